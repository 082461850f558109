//! Workspaces: the host side of resource providers.
//!
//! An executor asks for its run's workspace with `resource.acquire` (a new segment)
//! or `resource.lookup` (a resumed one), and only through a run the host opened for
//! that very process: extrunner records each `executor.run`, `executor.recover` and
//! `executor.resume` it forwards ([`Workspaces::open`]) with the connection it went
//! out on, and a resource call that comes back on another connection, for another
//! extension, at another epoch or after the run ended is refused.
//!
//! The host then calls the provider of the binding's resource type
//! (`provider.acquire`, with the Work as owner and the binding's resource config) and
//! records the lease in storaged (`store.resource_lease_put`), so a restart of any
//! daemon or of the provider loses none. Before it serves a provider process for the
//! first time it runs `provider.reconcile` on it ([`Workspaces::reconcile`]): what an
//! interrupted acquisition left half-made is removed by the provider, a whole workspace
//! without a lease (extrunner died between the provider's answer and the record) gets
//! its lease, and a lease whose workspace is gone is dropped. An acquisition is
//! idempotent per owner and mode, so one the provider's crash interrupted is asked
//! again once.
//!
//! [`Workspaces::sweep`] asks every provider whose manifest marks a resource type
//! `sweep` to remove the workspaces of closed Works (`provider.sweep`), answering
//! its `provider.owner_status` from storaged, and drops the leases of what it
//! removed. extrunner runs it every [`SWEEP_INTERVAL`]; `ext.resource_sweep` runs
//! it now.

use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, Weak};
use std::time::{Duration, Instant};

use busapi::ext::SweepReport;
use busapi::store::{LeasePutRequest, LeaseRow, LeasesRequest};
use busapi::Call;
use daemon::bus::Bus;
use protocol::wire::{
    Binding, ProvidedResource, ProviderAcquireParams, ProviderLookupParams,
    ProviderOwnerStatusParams, ProviderOwnerStatusResult, ProviderReconcileParams,
    ProviderReconcileResult, ProviderSweepParams, ProviderSweepResult, ResourceAcquireParams,
    ResourceLookupParams, RunRequest, MAX_PAGE_LIMIT,
};
use protocol::{CallError, Code, Peer, Reply, RpcError};
use serde_json::value::RawValue;
use serde_json::Value;

mod containers;
mod passes;
mod sandboxes;
pub use containers::ContainerSweep;
pub use sandboxes::Protected;

/// A call to a running package, answered with its raw reply.
pub type CallFuture<'a> = Pin<Box<dyn Future<Output = Result<Reply, RpcError>> + Send + 'a>>;

/// What the workspace service needs of the packages that provide resources and
/// sandboxes (extrunner's runner implements it): who provides a type, the process it
/// runs as, what the host protects, and a call to it.
pub trait Providers: Send + Sync {
    /// Every resource type an admitted package provides, with the package.
    fn resource_types(&self) -> Vec<(String, String)>;
    /// Whether `provider`'s manifest marks `resource_type` for sweeping.
    fn sweeps(&self, provider: &str, resource_type: &str) -> bool;
    /// The package that provides the sandbox type `sandbox_type`, when it runs.
    fn sandbox_provider(&self, sandbox_type: &str) -> Option<String>;
    /// The package that provides the container type `container_type`, when it runs.
    fn container_provider(&self, container_type: &str) -> Option<String>;
    /// Each distinct container (type, config) the applied configuration's enabled
    /// bindings name: the engines the container sweep lists.
    fn container_configs(&self) -> Vec<(String, Value)>;
    /// The files the applied configuration's `file:` secret references name.
    fn secret_files(&self) -> Vec<PathBuf>;
    /// The agents' plugin directory (empty when there is none).
    fn playbook_dir(&self) -> String;
    /// The connection to `provider`'s current process, when it has one.
    fn peer(&self, provider: &str) -> Option<Peer>;
    /// A host-to-extension call of `method` to `provider`, bounded by `timeout` (the
    /// runner's `Runner::call`, not in a transaction, without cancellation).
    fn call<'a>(
        &'a self,
        provider: &'a str,
        method: &'a str,
        params: Box<RawValue>,
        timeout: Duration,
    ) -> CallFuture<'a>;

    /// The package that provides `resource_type`.
    fn resource_provider(&self, resource_type: &str) -> Option<String> {
        self.resource_types()
            .into_iter()
            .find(|(t, _)| t == resource_type)
            .map(|(_, p)| p)
    }
}

/// `C` called on `provider`, its answer as JSON.
async fn call_provider<C: Call>(
    runner: &dyn Providers,
    provider: &str,
    params: &C,
    timeout: Duration,
) -> Result<Value, RpcError> {
    call_method(runner, provider, C::METHOD, params, timeout).await
}

/// `method` called on `provider` with `params`, its answer as JSON.
async fn call_method<P: serde::Serialize>(
    runner: &dyn Providers,
    provider: &str,
    method: &str,
    params: &P,
    timeout: Duration,
) -> Result<Value, RpcError> {
    let raw = serde_json::value::to_raw_value(params).map_err(RpcError::unauthored)?;
    runner
        .call(provider, method, raw, timeout)
        .await
        .and_then(reply_value)
}

/// How often the host sweeps spare workspaces (the spec's SweepInterval).
pub const SWEEP_INTERVAL: Duration = Duration::from_secs(6 * 3600);
/// How long a Work must have been closed before the periodic sweep removes its
/// workspace (a completed Work reopens on new input, and resumes in it).
pub const SWEEP_GRACE: Duration = Duration::from_secs(24 * 3600);
/// The most runs the host keeps open across all extensions; past it the oldest
/// whose process is gone, then the oldest, are forgotten.
pub const MAX_OPEN_RUNS: usize = 4096;
/// The longest one `provider.acquire` may take (a first clone of a large repository).
pub const ACQUIRE_TIMEOUT: Duration = Duration::from_secs(3600);
/// The longest one `provider.lookup`, `provider.reconcile` or `provider.sweep` may take.
pub const PASS_TIMEOUT: Duration = Duration::from_secs(1800);

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// A run the host opened for one extension process.
#[derive(Debug, Clone)]
struct OpenRun {
    extension: String,
    peer: Peer,
    work_id: String,
    scope_id: String,
    binding: Binding,
    executor: String,
    /// The run's own toolbelt socket and the host's toolbelt directory, when it has
    /// a toolbelt.
    toolbelt: Option<(String, String)>,
    epoch: u64,
    opened: Instant,
    /// Its `executor.wait` answered a completed or failed result.
    ended: bool,
}

/// A pass (reconcile or sweep) the host opened on one provider process.
#[derive(Debug, Clone)]
struct Pass {
    extension: String,
    peer: Option<Peer>,
}

/// The host's workspace service, shared by extrunner's scoped hosts and the runner.
#[derive(Default)]
pub struct Workspaces {
    runner: OnceLock<Weak<dyn Providers>>,
    bus: Option<Bus>,
    runs: Mutex<HashMap<String, OpenRun>>,
    passes: Mutex<HashMap<String, Pass>>,
    /// The provider process each provider was last reconciled on.
    reconciled: Mutex<HashMap<String, Peer>>,
    /// Serialises the reconcile of one provider.
    reconciling: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
    /// What no sandbox may see but a run's own part of it (`sandbox.plan`).
    protected: Mutex<Protected>,
    /// This host's container label, once read or made.
    container_label: Mutex<Option<String>>,
}

impl std::fmt::Debug for Workspaces {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Workspaces")
            .field("open_runs", &lock(&self.runs).len())
            .finish()
    }
}

fn not_opened(execution_id: &str) -> RpcError {
    RpcError::new(
        Code::Unauthorized,
        format!(
            "execution {execution_id:?} is not a run the host opened for this process: resource calls are served only through one"
        ),
    )
}

fn random_id() -> String {
    protocol::random::unique_hex::<12>()
}

fn store_error(method: &str, e: CallError) -> RpcError {
    match e {
        CallError::Rpc(e) => e,
        other => RpcError::new(
            Code::Unavailable,
            format!("the store is unavailable for {method} ({other})"),
        ),
    }
}

fn reply_value(reply: protocol::Reply) -> Result<Value, RpcError> {
    let text: &serde_json::value::RawValue = &reply;
    serde_json::from_str(text.get()).map_err(RpcError::unauthored)
}

fn crashed(e: &RpcError) -> bool {
    e.data
        .as_ref()
        .and_then(|d| d.get("crashed"))
        .and_then(Value::as_bool)
        == Some(true)
}

impl Workspaces {
    /// The service, recording leases through `bus` (none: resource calls are
    /// answered `unavailable`).
    pub fn new(bus: Option<Bus>) -> Arc<Workspaces> {
        Arc::new(Workspaces {
            bus,
            ..Workspaces::default()
        })
    }

    /// Binds the packages that provide the resources (extrunner's runner).
    pub fn attach(&self, providers: Weak<dyn Providers>) {
        let _ = self.runner.set(providers);
    }

    fn runner(&self) -> Result<Arc<dyn Providers>, RpcError> {
        self.runner
            .get()
            .and_then(Weak::upgrade)
            .ok_or_else(|| RpcError::new(Code::Unavailable, "the host's extensions are not loaded"))
    }

    fn bus(&self) -> Result<&Bus, RpcError> {
        self.bus.as_ref().ok_or_else(|| {
            RpcError::new(
                Code::Unavailable,
                "the host has no store to record leases in",
            )
        })
    }

    async fn store<C: Call>(&self, params: &C) -> Result<C::Result, RpcError> {
        self.bus()?
            .call_typed(params)
            .await
            .map_err(|e| store_error(C::METHOD, e))
    }

    // -----------------------------------------------------------------------------------
    // Runs the host opened
    // -----------------------------------------------------------------------------------

    /// Records a run the host is about to forward to `extension` over `peer`
    /// (`executor.run`, `executor.recover`).
    pub fn open(&self, extension: &str, peer: &Peer, run: &RunRequest) {
        let mut runs = lock(&self.runs);
        if runs.len() >= MAX_OPEN_RUNS && !runs.contains_key(&run.execution_id) {
            let victim = runs
                .iter()
                .min_by_key(|(_, r)| (!(r.peer.is_closed() || r.ended), r.opened))
                .map(|(id, _)| id.clone());
            if let Some(id) = victim {
                runs.remove(&id);
            }
        }
        runs.insert(
            run.execution_id.clone(),
            OpenRun {
                extension: extension.to_owned(),
                peer: peer.clone(),
                work_id: run.work.id.clone(),
                scope_id: run.work.scope_id.clone(),
                binding: run.binding.clone(),
                executor: run.executor.clone(),
                toolbelt: (!run.toolbelt.token.is_empty())
                    .then(|| (run.toolbelt.endpoint.clone(), run.toolbelt.dir.clone())),
                epoch: run.epoch,
                opened: Instant::now(),
                ended: false,
            },
        );
    }

    /// A parked run woken on `extension` over `peer` (`executor.resume`) at `epoch`.
    pub fn reopen(&self, extension: &str, peer: &Peer, execution_id: &str, epoch: u64) {
        if let Some(r) = lock(&self.runs).get_mut(execution_id) {
            if r.extension == extension {
                r.peer = peer.clone();
                r.epoch = epoch;
                r.ended = false;
            }
        }
    }

    /// The run ended (its `executor.wait` answered a completed or failed result):
    /// it refuses resource calls from now on.
    pub fn close(&self, execution_id: &str) {
        if let Some(r) = lock(&self.runs).get_mut(execution_id) {
            r.ended = true;
        }
    }

    fn opened(
        &self,
        caller: &str,
        peer: &Peer,
        execution_id: &str,
        epoch: u64,
    ) -> Result<OpenRun, RpcError> {
        let runs = lock(&self.runs);
        let run = runs
            .get(execution_id)
            .filter(|r| r.extension == caller && r.peer.same_connection(peer) && !r.ended)
            .ok_or_else(|| not_opened(execution_id))?;
        if epoch != 0 && epoch != run.epoch {
            return Err(RpcError::new(
                Code::Conflict,
                format!(
                    "execution {execution_id:?} is at epoch {}, not {epoch}: the run was superseded",
                    run.epoch
                ),
            ));
        }
        Ok(run.clone())
    }

    /// The package that provides `resource_type`.
    fn provider(&self, runner: &dyn Providers, resource_type: &str) -> Result<String, RpcError> {
        runner.resource_provider(resource_type).ok_or_else(|| {
            RpcError::new(
                Code::Unavailable,
                format!("no installed package provides the resource type {resource_type:?}"),
            )
        })
    }

    // -----------------------------------------------------------------------------------
    // resource.acquire and resource.lookup
    // -----------------------------------------------------------------------------------

    /// `resource.acquire` from `caller` over `peer`.
    pub async fn acquire(
        &self,
        caller: &str,
        peer: &Peer,
        p: ResourceAcquireParams,
    ) -> Result<ProvidedResource, RpcError> {
        let run = self.opened(caller, peer, &p.execution_id, p.epoch)?;
        let Some(resource) = run.binding.resource.clone() else {
            return Err(RpcError::new(
                Code::Invalid,
                format!(
                    "binding {:?} of scope {:?} has no resource",
                    run.binding.name, run.scope_id
                ),
            ));
        };
        let runner = self.runner()?;
        let provider = self.provider(runner.as_ref(), &resource.resource_type)?;
        let params = ProviderAcquireParams {
            resource_type: resource.resource_type.clone(),
            owner: run.work_id.clone(),
            mode: p.mode,
            params: p.params,
            config: resource.config.clone(),
            scope_id: run.scope_id.clone(),
            binding: run.binding.name.clone(),
            host_env: host_env(&resource.config),
        };
        let mut tries = 0;
        let got: ProvidedResource = loop {
            tries += 1;
            self.ensure_reconciled(runner.as_ref(), &provider, &resource.resource_type)
                .await?;
            let started = Instant::now();
            match call_provider(runner.as_ref(), &provider, &params, ACQUIRE_TIMEOUT).await {
                Ok(v) => {
                    let got: ProvidedResource = serde_json::from_value(v).map_err(|e| {
                        RpcError::unauthored(format_args!(
                            "{provider:?} answered provider.acquire with something else: {e}"
                        ))
                    })?;
                    tracing::info!(OC_EXTENSION = %provider, OC_WORK_ID = %run.work_id,
                        OC_EXECUTION_ID = %p.execution_id, reference = %got.reference,
                        dir = %got.dir, elapsed_ms = started.elapsed().as_millis() as u64,
                        "workspace acquired");
                    break got;
                }
                // Acquisition is idempotent per owner and mode: one the provider's
                // crash interrupted is asked again, once, after its reconcile.
                Err(e) if crashed(&e) && tries < 2 => {
                    tracing::warn!(OC_EXTENSION = %provider, OC_WORK_ID = %run.work_id, error = %e.message,
                        "the provider crashed during an acquisition; asking again after its reconcile");
                    continue;
                }
                Err(e) => {
                    tracing::warn!(OC_EXTENSION = %provider, OC_WORK_ID = %run.work_id,
                        OC_EXECUTION_ID = %p.execution_id, code = ?e.app_code(), error = %e.message,
                        "the workspace could not be acquired");
                    return Err(e);
                }
            }
        };
        check_dir(&provider, &got)?;
        self.record(
            &resource.resource_type,
            &got,
            &run.work_id,
            &run.scope_id,
            &run.binding.name,
            &p.execution_id,
        )
        .await?;
        Ok(got)
    }

    /// `resource.lookup` from `caller` over `peer`: only a lease of the run's own Work.
    pub async fn lookup(
        &self,
        caller: &str,
        peer: &Peer,
        p: ResourceLookupParams,
    ) -> Result<ProvidedResource, RpcError> {
        let run = self.opened(caller, peer, &p.execution_id, p.epoch)?;
        let Some(resource) = run.binding.resource.clone() else {
            return Err(RpcError::new(
                Code::Invalid,
                format!(
                    "binding {:?} of scope {:?} has no resource",
                    run.binding.name, run.scope_id
                ),
            ));
        };
        let leases = self
            .leases(Some(&resource.resource_type), Some(&run.work_id))
            .await?;
        if !leases.iter().any(|l| l.reference == p.reference) {
            return Err(RpcError::new(
                Code::ResourceNotFound,
                format!(
                    "Work {} holds no {} lease {:?}",
                    run.work_id, resource.resource_type, p.reference
                ),
            ));
        }
        let runner = self.runner()?;
        let provider = self.provider(runner.as_ref(), &resource.resource_type)?;
        self.ensure_reconciled(runner.as_ref(), &provider, &resource.resource_type)
            .await?;
        let params = ProviderLookupParams {
            resource_type: resource.resource_type.clone(),
            reference: p.reference.clone(),
            config: resource.config.clone(),
        };
        let v = call_provider(runner.as_ref(), &provider, &params, PASS_TIMEOUT).await?;
        let got: ProvidedResource = serde_json::from_value(v).map_err(|e| {
            RpcError::unauthored(format_args!(
                "{provider:?} answered provider.lookup with something else: {e}"
            ))
        })?;
        check_dir(&provider, &got)?;
        Ok(got)
    }

    async fn record(
        &self,
        resource_type: &str,
        got: &ProvidedResource,
        owner: &str,
        scope_id: &str,
        binding: &str,
        execution_id: &str,
    ) -> Result<(), RpcError> {
        self.store(&LeasePutRequest {
            resource_type: resource_type.to_owned(),
            reference: got.reference.clone(),
            owner: owner.to_owned(),
            scope_id: scope_id.to_owned(),
            binding: binding.to_owned(),
            mode: got.mode.clone(),
            dir: got.dir.clone(),
            data: (!got.data.is_null()).then(|| got.data.clone()),
            execution_id: (!execution_id.is_empty()).then(|| execution_id.to_owned()),
        })
        .await?;
        Ok(())
    }

    /// Every lease, of `resource_type` and `owner` when given, through every page.
    pub async fn leases(
        &self,
        resource_type: Option<&str>,
        owner: Option<&str>,
    ) -> Result<Vec<LeaseRow>, RpcError> {
        let mut out = Vec::new();
        let mut after = String::new();
        loop {
            let page = self
                .store(&LeasesRequest {
                    resource_type: resource_type.map(str::to_owned),
                    owner: owner.map(str::to_owned),
                    after: after.clone(),
                    limit: MAX_PAGE_LIMIT,
                })
                .await?;
            out.extend(page.leases);
            if page.next.is_empty() {
                return Ok(out);
            }
            after = page.next;
        }
    }
}

/// The daemon's values of the variables the resource config names in its own
/// `pass_env` (ResourceAcquisition.HostEnv), those set: the only daemon variables the
/// provider adds to its sanitized environment (a proxy, say).
fn host_env(config: &Value) -> BTreeMap<String, String> {
    config
        .get("pass_env")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .filter(|n| !n.is_empty() && !n.contains(['=', '\0']))
        .filter_map(|n| std::env::var(n).ok().map(|v| (n.to_owned(), v)))
        .collect()
}

/// A provider's workspace must be an absolute directory.
fn check_dir(provider: &str, got: &ProvidedResource) -> Result<(), RpcError> {
    if got.reference.is_empty() || !std::path::Path::new(&got.dir).is_absolute() {
        return Err(RpcError::unauthored(format_args!(
            "{provider:?} answered a workspace without a reference or an absolute dir ({:?}, {:?})",
            got.reference, got.dir
        )));
    }
    Ok(())
}

/// What the workspace service's tests share: a connection and a run.
#[cfg(test)]
mod testkit {
    use protocol::wire::{Binding, RunRequest, Work};
    use protocol::Peer;

    /// A connection to nobody (its far end is kept by nothing).
    pub fn peer() -> Peer {
        let (ar, aw) = tokio::io::duplex(4096);
        protocol::connect(ar, aw, protocol::NoHandler, protocol::Options::named("t"))
    }

    /// Execution `exec_1` at epoch 1 of Work `work_1` (scope `demo`) on the shell
    /// binding `run` that `binding` finishes.
    pub fn run(binding: impl FnOnce(&mut Binding)) -> RunRequest {
        let mut b = Binding {
            name: "run".into(),
            ..Binding::default()
        };
        binding(&mut b);
        RunRequest {
            executor: "shell".into(),
            execution_id: "exec_1".into(),
            epoch: 1,
            work: Work {
                id: "work_1".into(),
                scope_id: "demo".into(),
                ..Work::default()
            },
            binding: b,
            ..RunRequest::default()
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::testkit::peer;
    use super::*;
    use protocol::wire::{ResourceBinding, Work};
    use serde_json::json;

    fn run(id: &str, epoch: u64) -> RunRequest {
        RunRequest {
            execution_id: id.into(),
            epoch,
            work: Work {
                id: "work_1".into(),
                scope_id: "demo".into(),
                ..Work::default()
            },
            binding: Binding {
                name: "run".into(),
                resource: Some(ResourceBinding {
                    resource_type: "git".into(),
                    config: json!({"repository": "/r"}),
                }),
                ..Binding::default()
            },
            ..RunRequest::default()
        }
    }

    #[tokio::test]
    async fn resource_calls_are_served_only_through_the_run_opened_for_that_process() {
        let ws = Workspaces::new(None);
        let (mine, other) = (peer(), peer());
        ws.open("shell", &mine, &run("exec_1", 3));
        let got = ws.opened("shell", &mine, "exec_1", 3).unwrap();
        assert_eq!(got.work_id, "work_1");
        // Epoch 0 names none: the run's own.
        assert!(ws.opened("shell", &mine, "exec_1", 0).is_ok());
        // Another connection (a restarted or another process of the package).
        let e = ws.opened("shell", &other, "exec_1", 3).unwrap_err();
        assert_eq!(e.app_code(), Some("unauthorized"), "{e}");
        // Another package, even on the same connection.
        assert!(ws.opened("claude-code", &mine, "exec_1", 3).is_err());
        // A run the host never opened.
        assert!(ws.opened("shell", &mine, "exec_2", 3).is_err());
        // A superseded epoch.
        let e = ws.opened("shell", &mine, "exec_1", 2).unwrap_err();
        assert_eq!(e.app_code(), Some("conflict"), "{e}");
        // Resumed at a higher epoch over a new connection: only that one now.
        ws.reopen("shell", &other, "exec_1", 4);
        assert!(ws.opened("shell", &other, "exec_1", 4).is_ok());
        assert!(ws.opened("shell", &mine, "exec_1", 4).is_err());
        // An ended run refuses.
        ws.close("exec_1");
        assert!(ws.opened("shell", &other, "exec_1", 4).is_err());
    }

    #[tokio::test]
    async fn the_open_runs_are_bounded() {
        let ws = Workspaces::new(None);
        let p = peer();
        for i in 0..MAX_OPEN_RUNS + 10 {
            ws.open("shell", &p, &run(&format!("exec_{i}"), 1));
        }
        assert_eq!(lock(&ws.runs).len(), MAX_OPEN_RUNS);
        // The oldest went first.
        assert!(ws.opened("shell", &p, "exec_0", 1).is_err());
        assert!(ws
            .opened("shell", &p, &format!("exec_{}", MAX_OPEN_RUNS + 9), 1)
            .is_ok());
    }

    #[tokio::test]
    async fn owner_status_is_answered_only_within_a_pass_on_that_process() {
        let ws = Workspaces::new(None);
        let (mine, other) = (peer(), peer());
        lock(&ws.passes).insert(
            "pass_1".into(),
            Pass {
                extension: "git".into(),
                peer: Some(mine.clone()),
            },
        );
        let ask = |id: &str| ProviderOwnerStatusParams {
            pass_id: id.into(),
            owners: vec!["work_1".into()],
        };
        for (caller, peer, pass) in [
            ("git", &other, "pass_1"),
            ("shell", &mine, "pass_1"),
            ("git", &mine, "pass_2"),
        ] {
            let e = ws.owner_status(caller, peer, ask(pass)).await.unwrap_err();
            assert_eq!(e.app_code(), Some("unauthorized"), "{caller} {pass}: {e}");
        }
        // Within the pass, the store is asked (none here: unavailable, not refused).
        let e = ws
            .owner_status("git", &mine, ask("pass_1"))
            .await
            .unwrap_err();
        assert_eq!(e.app_code(), Some("unavailable"), "{e}");
        let too_many = ProviderOwnerStatusParams {
            pass_id: "pass_1".into(),
            owners: vec!["w".into(); MAX_PAGE_LIMIT as usize + 1],
        };
        assert!(ws.owner_status("git", &mine, too_many).await.is_err());
    }
}
