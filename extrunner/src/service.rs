//! The `ext.*` bus methods, served by the [`Runner`].
//!
//! - `ext.list {}`: every package (name, origin, version, state, restarts, pid,
//!   protocol version, refusal), the discovery reports and the conflicts;
//! - `ext.inspect {name}`: one package in detail; `not_found` for an unknown name;
//! - `ext.restart {name}`: stop and start again (a refused one is tried again);
//! - `ext.call {name, method, params, in_transaction?, timeout_ms?, hold?}`: a
//!   host-to-extension call on a running extension (see [`Runner::call`]); with
//!   `hold`, a long-lived one (`tunnel.run`) held open without a deadline until it is
//!   answered or the caller cancels ([`Runner::call_held`]);
//! - `ext.webhook {name, request}`: a webhook request to the owning extension's
//!   `webhook.handle`, its deliveries accepted durably before the answer
//!   ([`Runner::webhook`]);
//! - `ext.reconcile {name, page: {source, generation, cursor, checkpoint, max_items,
//!   max_bytes}, timeout_ms}`: one reconcile page, accepted before the answer
//!   ([`Runner::reconcile`]);
//! - `ext.registrations {}`: every package's registered ingress sources and webhook
//!   paths (and whether every first handshake is done, so the list is complete), and
//!   `playbook_dir`, the agents' plugin runs are given ([`crate::playbooks`]);
//! - `ext.resource_sweep {type?, grace_s?, remove_dirty?}`: sweep the spare workspaces
//!   now ([`crate::workspaces::Workspaces::sweep`]);
//! - `ext.live {execution_id, tail?}`: a running attempt's output so far, from its
//!   executor's `executor.live` ([`crate::live`]);
//! - `view.panels {work_id}`, `view.pages {}`, `view.page {package, page}`: the web
//!   view's panels and pages, from the packages' `view.render`
//!   ([`crate::actions::view`]).
//!
//! Each method is a type of [`busapi::ext`] (its params, and its answer as
//! `Call::Result`): the dispatch matches `T::METHOD`, decodes `T` and answers
//! `T::Result`, so an answer that is not the declared type does not build.
//!
//! The service also takes the `config.applied` notification (storaged publishes it on
//! a new generation) and wakes whoever follows the configuration ([`Service::config_changed`]).

use crate::runner::Runner;
use busapi::ext::{
    ActRequest, ActionsRequest, CheckInfo, ExecutorInfo, ExtCallAny, InspectRequest, ListRequest,
    LiveRequest, OperationInfo, ReconcileRequest, Registration, RegistrationsRequest,
    RegistrationsResponse, ResourceSweepRequest, ResourceSweepResponse, RestartRequest, Surfaces,
    TaskInfo, WebhookRequest,
};
use busapi::Call;
use protocol::wire::{DependencyFilterParams, RouteMatchParams};
use protocol::{reply, BoxFuture, Code, Handler, Reply, Request, RpcError};
use serde_json::Value;
use std::sync::Arc;

/// The longest grace `ext.resource_sweep` may be given (30 days).
pub const SWEEP_GRACE_MAX_S: u64 = 30 * 24 * 3600;

/// The longest page timeout `ext.reconcile` may be given.
pub const PAGE_TIMEOUT_MAX: std::time::Duration = std::time::Duration::from_secs(600);

/// How long `ext.call` waits for an answer unless told otherwise.
pub const CALL_TIMEOUT_DEFAULT: std::time::Duration = std::time::Duration::from_secs(300);
/// The longest `ext.call` may be told to wait.
pub const CALL_TIMEOUT_MAX: std::time::Duration = std::time::Duration::from_secs(3600);

/// The bus handler of extrunner's service.
#[derive(Debug, Clone)]
pub struct Service {
    runner: Arc<Runner>,
    config_changed: Arc<tokio::sync::Notify>,
    tunnel_changed: Arc<tokio::sync::Notify>,
    ready: Arc<std::sync::atomic::AtomicBool>,
}

impl Service {
    /// Serve `runner` on the bus.
    pub fn new(runner: Arc<Runner>) -> Service {
        Service {
            runner,
            config_changed: Arc::new(tokio::sync::Notify::new()),
            tunnel_changed: Arc::new(tokio::sync::Notify::new()),
            ready: Arc::new(std::sync::atomic::AtomicBool::new(false)),
        }
    }

    /// Woken on every `config.applied` notification.
    pub fn config_changed(&self) -> Arc<tokio::sync::Notify> {
        self.config_changed.clone()
    }

    /// Woken on every `tunnel.changed` notification.
    pub fn tunnel_changed(&self) -> Arc<tokio::sync::Notify> {
        self.tunnel_changed.clone()
    }

    /// Say that every first handshake is done (`ext.registrations` is complete).
    pub fn set_ready(&self) {
        self.ready.store(true, std::sync::atomic::Ordering::SeqCst);
    }

    /// The runner served.
    pub fn runner(&self) -> &Arc<Runner> {
        &self.runner
    }
}

/// The payload read gate, applied before a call that decides on an event: an event
/// whose payload the extension cannot read (retired, newer, undeclared) is answered
/// here, as the spec says, without reaching the extension: `route.match` no match,
/// `dependency.filter` false.
fn gate(runner: &Runner, name: &str, method: &str, params: &Value) -> Option<Value> {
    let refusal = match method {
        RouteMatchParams::METHOD => serde_json::json!({"matched": false}),
        DependencyFilterParams::METHOD => serde_json::json!({"matched": false}),
        _ => return None,
    };
    let manifest = runner.manifest(name)?;
    let event = params.get("event")?;
    let status = crate::identity::event_payload_status(manifest, event);
    if status.readable() {
        return None;
    }
    let mut answer = refusal;
    if method == RouteMatchParams::METHOD {
        answer["reason"] = Value::from(format!(
            "unreadable payload: its schema is {status:?} for `{name}`"
        ));
    }
    Some(answer)
}

fn registrations(runner: &Runner, complete: bool) -> RegistrationsResponse {
    let extensions: Vec<Registration> = runner
        .registrations()
        .into_iter()
        .map(|(name, state, r)| {
            let manifest = runner.manifest(&name);
            let handlers: Vec<String> = manifest
                .map(|m| {
                    m.provides
                        .routes
                        .iter()
                        .map(|h| h.handler.clone())
                        .collect()
                })
                .unwrap_or_default();
            let types: Vec<String> = manifest
                .map(|m| {
                    m.provides
                        .extensions
                        .iter()
                        .map(|t| t.type_name.clone())
                        .collect()
                })
                .unwrap_or_default();
            let tasks: Vec<TaskInfo> = manifest
                .map(|m| {
                    m.provides
                        .tasks
                        .iter()
                        .map(|t| TaskInfo {
                            name: t.name.clone(),
                            // At least one second: the manifest's validation says so.
                            interval_s: u64::try_from(t.interval_s).unwrap_or_default(),
                        })
                        .collect()
                })
                .unwrap_or_default();
            let checks: Vec<CheckInfo> = manifest
                .map(|m| {
                    m.provides
                        .checks
                        .iter()
                        .map(|c| CheckInfo {
                            name: c.name.clone(),
                            offline: c.offline,
                        })
                        .collect()
                })
                .unwrap_or_default();
            let executors: Vec<ExecutorInfo> = manifest
                .map(|m| {
                    m.provides
                        .executors
                        .iter()
                        .map(|x| ExecutorInfo {
                            name: x.name.clone(),
                            pool: x.pool.clone(),
                            inject: x.labels.inject,
                        })
                        .collect()
                })
                .unwrap_or_default();
            let operations: Vec<OperationInfo> = manifest
                .map(|m| {
                    m.provides
                        .operations
                        .iter()
                        .map(|o| OperationInfo {
                            name: o.name.clone(),
                            kind: o.kind.clone(),
                            summary: o.summary.clone(),
                            guidance: o.guidance.clone(),
                            input: o.input.clone(),
                        })
                        .collect()
                })
                .unwrap_or_default();
            // The surfaces schedulerd calls around a run, and where.
            let surfaces = manifest
                .map(|m| Surfaces {
                    run_environment: m.provides.run_environment,
                    segment_end: m.provides.segment_end,
                    dependency_filter: m.provides.dependency_filter,
                    annotations: m.provides.annotations,
                    operation_gate: m.provides.operation_gate && m.has_permission("operation.gate"),
                    start_gate: m.provides.start_gate && m.has_permission("work.start_gate"),
                })
                .unwrap_or_default();
            Registration {
                scopes: runner.scopes_of(&name),
                name,
                state: state.to_owned(),
                surfaces,
                handlers,
                operations,
                types,
                executors,
                tasks,
                checks,
                generation: r.generation,
                serial: r.serial,
                sources: r.sources,
                webhooks: r.webhooks,
                refusal: r.refusal,
            }
        })
        .collect();
    RegistrationsResponse {
        complete,
        playbook_dir: runner.playbook_dir().to_owned(),
        extensions,
    }
}

/// Encode `T`'s answer: a method whose answer is not its declared result type does not
/// build.
fn answer<T: Call>(result: &T::Result) -> Result<Reply, RpcError> {
    reply(result)
}

/// The bus the actions reach the store and the scheduler on.
fn host_bus(runner: &Runner) -> Result<&daemon::bus::Bus, RpcError> {
    runner.host_bus().ok_or_else(|| {
        RpcError::new(
            Code::Unavailable,
            "this extrunner has no host bus: actions are not served",
        )
    })
}

async fn serve(runner: Arc<Runner>, ready: bool, request: Request) -> Result<Reply, RpcError> {
    match request.method.as_str() {
        m if m == <WebhookRequest as Call>::METHOD => {
            let p: WebhookRequest<Box<serde_json::value::RawValue>> = request.params()?;
            answer::<WebhookRequest>(&runner.webhook(&p.name, &p.request).await?)
        }
        // A method of no fields reads none of its params (anything sent is ignored).
        m if m == RegistrationsRequest::METHOD => {
            answer::<RegistrationsRequest>(&registrations(&runner, ready))
        }
        m if m == ReconcileRequest::METHOD => {
            let p: ReconcileRequest = request.params()?;
            let timeout = std::time::Duration::from_millis(p.timeout_ms);
            if timeout > PAGE_TIMEOUT_MAX || timeout.is_zero() {
                return Err(RpcError::new(
                    Code::Invalid,
                    format!(
                        "timeout_ms {} is not within 1 to {} ms (PAGE_TIMEOUT_MAX)",
                        p.timeout_ms,
                        PAGE_TIMEOUT_MAX.as_millis()
                    ),
                ));
            }
            answer::<ReconcileRequest>(&runner.reconcile(&p.name, &p.page, timeout).await?)
        }
        m if m == ResourceSweepRequest::METHOD => {
            let p: ResourceSweepRequest = request.params()?;
            let grace_s = p
                .grace_s
                .unwrap_or(crate::workspaces::SWEEP_GRACE.as_secs());
            if grace_s > SWEEP_GRACE_MAX_S {
                return Err(RpcError::new(
                    Code::Invalid,
                    format!("grace_s {grace_s} is over the longest grace ({SWEEP_GRACE_MAX_S} s)"),
                ));
            }
            let sweeps = runner
                .workspaces()
                .sweep(
                    p.resource_type.as_deref(),
                    std::time::Duration::from_secs(grace_s),
                    p.remove_dirty,
                )
                .await?;
            answer::<ResourceSweepRequest>(&ResourceSweepResponse { sweeps })
        }
        m if m == ListRequest::METHOD => answer::<ListRequest>(&runner.list()),
        m if m == busapi::ext::MetricsRequest::METHOD => {
            answer::<busapi::ext::MetricsRequest>(&crate::metrics::render(&runner.list()))
        }
        m if m == ActionsRequest::METHOD => {
            let p: ActionsRequest = request.params()?;
            let packages: &dyn crate::render::Packages = &*runner;
            answer::<ActionsRequest>(
                &crate::actions::actions(host_bus(&runner)?, Some(packages), p).await?,
            )
        }
        m if m == ActRequest::METHOD => {
            let p: ActRequest = request.params()?;
            let packages: &dyn crate::render::Packages = &*runner;
            answer::<ActRequest>(&crate::actions::act(host_bus(&runner)?, Some(packages), p).await?)
        }
        m if m == busapi::view::PanelsRequest::METHOD => {
            let p: busapi::view::PanelsRequest = request.params()?;
            let packages: Arc<dyn crate::render::Packages> = runner.clone();
            answer::<busapi::view::PanelsRequest>(
                &crate::actions::view::panels(host_bus(&runner)?, packages, p).await?,
            )
        }
        // A method of no fields reads none of its params.
        m if m == busapi::view::PagesRequest::METHOD => {
            answer::<busapi::view::PagesRequest>(&crate::actions::view::pages(&*runner))
        }
        m if m == busapi::view::PageRequest::METHOD => {
            let p: busapi::view::PageRequest = request.params()?;
            answer::<busapi::view::PageRequest>(&crate::actions::view::page(&*runner, p).await?)
        }
        m if m == LiveRequest::METHOD => {
            let p: LiveRequest = request.params()?;
            let packages: &dyn crate::render::Packages = &*runner;
            answer::<LiveRequest>(&crate::live::live(host_bus(&runner)?, packages, p).await?)
        }
        m if m == InspectRequest::METHOD => {
            let p: InspectRequest = request.params()?;
            match runner.inspect(&p.name) {
                Some(v) => answer::<InspectRequest>(&v),
                None => Err(RpcError::new(
                    Code::NotFound,
                    format!("no extension named `{}`", p.name),
                )),
            }
        }
        m if m == RestartRequest::METHOD => {
            let p: RestartRequest = request.params()?;
            answer::<RestartRequest>(&runner.restart(&p.name).await?)
        }
        m if m == ExtCallAny::METHOD => {
            let p: ExtCallAny = request.params()?;
            let params = p
                .params
                .unwrap_or_else(|| Value::Object(Default::default()));
            if let Some(answer) = gate(&runner, &p.name, &p.method, &params) {
                return reply(&answer);
            }
            if p.hold {
                if p.timeout_ms.is_some() || p.in_transaction {
                    return Err(RpcError::new(
                        Code::Invalid,
                        "a held call has no timeout_ms and is not in a transaction",
                    ));
                }
                return runner
                    .call_held(&p.name, &p.method, &params, request.cancel.clone())
                    .await;
            }
            let timeout = match p.timeout_ms {
                None => CALL_TIMEOUT_DEFAULT,
                Some(ms) if std::time::Duration::from_millis(ms) <= CALL_TIMEOUT_MAX => {
                    std::time::Duration::from_millis(ms)
                }
                Some(ms) => {
                    return Err(RpcError::new(
                        Code::Invalid,
                        format!(
                            "timeout_ms {ms} is over the longest call ({} ms, CALL_TIMEOUT_MAX)",
                            CALL_TIMEOUT_MAX.as_millis()
                        ),
                    ))
                }
            };
            // Any JSON the extension answers passes as it is (`ExtCallAny`'s result).
            runner
                .call(
                    &p.name,
                    &p.method,
                    &params,
                    p.in_transaction,
                    timeout,
                    Some(request.cancel.clone()),
                )
                .await
        }
        other => Err(RpcError::method_not_found(other)),
    }
}

impl Handler for Service {
    fn call(&self, request: Request) -> BoxFuture<Result<Reply, RpcError>> {
        let ready = self.ready.load(std::sync::atomic::Ordering::SeqCst);
        Box::pin(serve(self.runner.clone(), ready, request))
    }

    fn notify(&self, _peer: &protocol::Peer, method: &str, _params: Value) {
        if method == busapi::topic::CONFIG_APPLIED {
            self.config_changed.notify_one();
        } else if method == busapi::topic::TUNNEL_CHANGED {
            self.tunnel_changed.notify_one();
        }
    }
}
