//! Containers: the host side of container providers (`container.launch`,
//! `container.adopt`, and the sweep of containers whose execution ended).
//!
//! Served, like `sandbox.plan`, only through a run the host opened for the calling
//! process and only when that run's binding has a container. `container.launch`
//! checks the launch's needs against the host's protected set exactly as a sandbox
//! plan does (they are what the provider mounts), asks the binding's provider to plan
//! (`container_provider.plan`, with the launch's environment values blanked: the plan
//! is pinned in the state directory, and the values may be secrets), computes the
//! plan's digest itself, asks the provider to create the container with the
//! environment (`container_provider.create`), and pins plan, digest and container in
//! `<state>/containers/pins/<execution>.json` before it answers. `container.adopt`
//! reads the pin back, refuses (`sandbox_denied`) a plan whose digest no longer
//! matches, and asks the provider to inspect the container: one that carries another
//! execution's label is refused; one gone is adopted (the run's own command reports
//! how it ended). A provider that is down, slow, or answers anything but a refusal
//! fails closed: `sandbox_unavailable`, and nothing runs.
//!
//! [`Workspaces::sweep_containers`] lists, for each container engine the applied
//! configuration's bindings name, the containers carrying this host's label, and
//! stops and removes those whose execution is no longer running in storaged (a
//! cancelled Work, a run whose command was killed before it removed its container).
//! A list that fails removes nothing.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use busapi::store::ExecutionsRequest;
use protocol::container::{
    container_digest, ContainerAdoptParams, ContainerCreated, ContainerDone, ContainerInfo,
    ContainerLaunchParams, ContainerLaunched, ContainerList, ContainerPlan,
    ContainerProviderCreateParams, ContainerProviderInspectParams, ContainerProviderListParams,
    ContainerProviderPlanParams, ContainerProviderRemoveParams, ContainerProviderStopParams,
};
use protocol::{Peer, RpcError};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::sandboxes::{check_launch, denied, read_pin, unavailable, write_pin, PROVIDER_TIMEOUT};
use super::{call_provider, lock, OpenRun, Providers, Workspaces};

/// How long the sweep gives a container between SIGTERM and SIGKILL.
pub const SWEEP_STOP_GRACE_S: u64 = 10;
/// The longest one stop (the grace and the engine's own time) may take.
const STOP_TIMEOUT: Duration = Duration::from_secs(SWEEP_STOP_GRACE_S + 60);
/// The most containers one sweep of one engine looks at.
pub const MAX_SWEPT: usize = 1000;
/// The file under `<state>/containers` naming this host's container label.
const HOST_LABEL_FILE: &str = "host";

/// A pinned container as the host keeps it.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
struct ContainerPin {
    execution_id: String,
    work_id: String,
    #[serde(rename = "type")]
    container_type: String,
    digest: String,
    plan: ContainerPlan,
    container: String,
}

/// A provider's refusal crosses as itself; anything else fails closed.
fn provider_error(provider: &str, method: &str, e: RpcError) -> RpcError {
    match e.app_code() {
        Some("sandbox_denied") | Some("sandbox_unavailable") => e,
        _ => unavailable(format!(
            "the container provider {provider:?} failed {method}: {}",
            e.message
        )),
    }
}

fn decode<T: serde::de::DeserializeOwned>(
    provider: &str,
    method: &str,
    v: Value,
) -> Result<T, RpcError> {
    serde_json::from_value(v).map_err(|e| {
        unavailable(format!(
            "{provider:?} answered {method} with something else: {e}"
        ))
    })
}

/// What the sweep did on one engine.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct ContainerSweep {
    /// The container type.
    pub container_type: String,
    /// The containers of this host it saw.
    pub seen: usize,
    /// Those it stopped and removed (their names).
    pub removed: Vec<String>,
    /// Why the list or a removal failed (nothing removed on a failed list).
    pub error: String,
}

impl Workspaces {
    fn contained(
        &self,
        caller: &str,
        peer: &Peer,
        execution_id: &str,
        epoch: u64,
    ) -> Result<(OpenRun, String, Value), RpcError> {
        self.confined_run(caller, peer, execution_id, epoch, "container", |b| {
            b.container.clone()
        })
    }

    fn containers_dir(&self) -> Result<PathBuf, RpcError> {
        let state = lock(&self.protected).state_dir.clone();
        if state.as_os_str().is_empty() {
            return Err(unavailable(
                "the host has no state directory to pin containers in",
            ));
        }
        Ok(state.join("containers"))
    }

    fn container_pin_path(&self, execution_id: &str) -> Result<PathBuf, RpcError> {
        Ok(self
            .containers_dir()?
            .join("pins")
            .join(format!("{execution_id}.json")))
    }

    /// This host's container label: a random name kept in
    /// `<state>/containers/host`, made on first use, so that two hosts sharing an
    /// engine never sweep each other's containers.
    pub fn container_host(&self) -> Result<String, RpcError> {
        let mut known = lock(&self.container_label);
        if let Some(label) = known.as_ref() {
            return Ok(label.clone());
        }
        let path = self.containers_dir()?.join(HOST_LABEL_FILE);
        let kept = std::fs::read(&path)
            .ok()
            .and_then(|b| serde_json::from_slice::<String>(&b).ok())
            .filter(|l| !l.is_empty() && l.len() <= 64);
        let label = match kept {
            Some(label) => label,
            None => {
                let label = format!("oc-{}", protocol::random::unique_hex::<8>());
                write_pin(&path, &label)
                    .map_err(|e| unavailable(format!("cannot keep {}: {e}", path.display())))?;
                label
            }
        };
        *known = Some(label.clone());
        Ok(label)
    }

    fn container_provider(&self, runner: &dyn Providers, kind: &str) -> Result<String, RpcError> {
        runner.container_provider(kind).ok_or_else(|| {
            unavailable(format!(
                "no installed package provides the container type {kind:?}"
            ))
        })
    }

    /// `container.launch` from `caller` over `peer`.
    pub async fn container_launch(
        &self,
        caller: &str,
        peer: &Peer,
        p: ContainerLaunchParams,
    ) -> Result<ContainerLaunched, RpcError> {
        let (run, kind, config) = self.contained(caller, peer, &p.execution_id, p.epoch)?;
        check_launch(&p.launch, &p.needs)?;
        let pin_path = self.container_pin_path(&p.execution_id)?;
        let host = self.container_host()?;
        let needs = self.merge(&run, &p.execution_id, p.needs).await?;
        let runner = self.runner().map_err(|e| unavailable(e.message))?;
        let provider = self.container_provider(runner.as_ref(), &kind)?;
        let env = p.launch.env.clone();
        let mut launch = p.launch;
        for v in launch.env.values_mut() {
            v.clear();
        }
        let params = ContainerProviderPlanParams {
            container_type: kind.clone(),
            config: config.clone(),
            execution_id: p.execution_id.clone(),
            work_id: run.work_id.clone(),
            host,
            launch,
            needs,
        };
        let method = "container_provider.plan";
        let v = call_provider(runner.as_ref(), &provider, &params, PROVIDER_TIMEOUT)
            .await
            .map_err(|e| provider_error(&provider, method, e))?;
        let plan: ContainerPlan = decode(&provider, method, v)?;
        if plan.argv.is_empty() || !Path::new(&plan.cwd).is_absolute() || plan.name.is_empty() {
            return Err(unavailable(format!(
                "{provider:?} answered a container plan without a name, a program or an absolute cwd"
            )));
        }
        let digest = container_digest(&plan);
        let create = ContainerProviderCreateParams {
            container_type: kind.clone(),
            config,
            execution_id: p.execution_id.clone(),
            plan: plan.clone(),
            env,
        };
        let method = "container_provider.create";
        let v = call_provider(runner.as_ref(), &provider, &create, PROVIDER_TIMEOUT)
            .await
            .map_err(|e| provider_error(&provider, method, e))?;
        let created: ContainerCreated = decode(&provider, method, v)?;
        let pin = ContainerPin {
            execution_id: p.execution_id.clone(),
            work_id: run.work_id.clone(),
            container_type: kind,
            digest: digest.clone(),
            plan: plan.clone(),
            container: created.container.clone(),
        };
        if let Err(e) = write_pin(&pin_path, &pin) {
            // Nothing runs unpinned: the container made is removed again.
            let _ = self
                .remove_container(runner.as_ref(), &provider, &pin, &created.container)
                .await;
            return Err(unavailable(format!(
                "cannot pin the container in {}: {e}",
                pin_path.display()
            )));
        }
        tracing::info!(OC_EXTENSION = %provider, OC_WORK_ID = %run.work_id,
            OC_EXECUTION_ID = %p.execution_id, %digest, container = %created.container,
            name = %plan.name, "container created and pinned");
        Ok(ContainerLaunched {
            plan,
            digest,
            container: created.container,
        })
    }

    async fn remove_container(
        &self,
        runner: &dyn Providers,
        provider: &str,
        pin: &ContainerPin,
        container: &str,
    ) -> Result<ContainerDone, RpcError> {
        let params = ContainerProviderRemoveParams {
            container_type: pin.container_type.clone(),
            config: Value::Null,
            container: container.to_owned(),
        };
        let v = call_provider(runner, provider, &params, PROVIDER_TIMEOUT).await?;
        decode(provider, "container_provider.remove", v)
    }

    /// `container.adopt` from `caller` over `peer`.
    pub async fn container_adopt(
        &self,
        caller: &str,
        peer: &Peer,
        p: ContainerAdoptParams,
    ) -> Result<ContainerLaunched, RpcError> {
        let (run, kind, config) = self.contained(caller, peer, &p.execution_id, p.epoch)?;
        let pin_path = self.container_pin_path(&p.execution_id)?;
        let pin: ContainerPin = read_pin(&pin_path, "container", "container", &p.execution_id)?;
        let now = container_digest(&pin.plan);
        if now != pin.digest || p.digest != pin.digest || pin.execution_id != p.execution_id {
            return Err(denied(format!(
                "the container plan's digest no longer matches: pinned {}, the plan now {now}, the executor's {}",
                pin.digest, p.digest
            )));
        }
        let runner = self.runner().map_err(|e| unavailable(e.message))?;
        let provider = self.container_provider(runner.as_ref(), &kind)?;
        let params = ContainerProviderInspectParams {
            container_type: kind,
            config,
            container: pin.container.clone(),
        };
        let method = "container_provider.inspect";
        let v = call_provider(runner.as_ref(), &provider, &params, PROVIDER_TIMEOUT)
            .await
            .map_err(|e| provider_error(&provider, method, e))?;
        let info: ContainerInfo = decode(&provider, method, v)?;
        if info.state != "gone" && info.execution_id != p.execution_id {
            return Err(denied(format!(
                "container {} carries execution {:?}, not {:?}",
                pin.container, info.execution_id, p.execution_id
            )));
        }
        tracing::info!(OC_EXTENSION = %provider, OC_WORK_ID = %run.work_id,
            OC_EXECUTION_ID = %p.execution_id, container = %pin.container, state = %info.state,
            "containered run adopted through its pinned container");
        Ok(ContainerLaunched {
            plan: pin.plan,
            digest: pin.digest,
            container: pin.container,
        })
    }

    /// Stops and removes, on every engine the applied bindings name, the containers
    /// of this host whose execution is no longer running.
    pub async fn sweep_containers(&self) -> Vec<ContainerSweep> {
        let Ok(runner) = self.runner() else {
            return Vec::new();
        };
        let Ok(host) = self.container_host() else {
            return Vec::new();
        };
        let mut out = Vec::new();
        for (kind, config) in runner.container_configs() {
            let Some(provider) = runner.container_provider(&kind) else {
                continue;
            };
            let mut report = ContainerSweep {
                container_type: kind.clone(),
                ..ContainerSweep::default()
            };
            if let Err(e) = self
                .sweep_engine(
                    runner.as_ref(),
                    &provider,
                    &kind,
                    &config,
                    &host,
                    &mut report,
                )
                .await
            {
                report.error = e.message;
            }
            out.push(report);
        }
        out
    }

    async fn sweep_engine(
        &self,
        runner: &dyn Providers,
        provider: &str,
        kind: &str,
        config: &Value,
        host: &str,
        report: &mut ContainerSweep,
    ) -> Result<(), RpcError> {
        let params = ContainerProviderListParams {
            container_type: kind.to_owned(),
            config: config.clone(),
            host: host.to_owned(),
        };
        let v = call_provider(runner, provider, &params, PROVIDER_TIMEOUT).await?;
        let list: ContainerList = decode(provider, "container_provider.list", v)?;
        // Only this host's (the provider filters; the host checks).
        let ours: Vec<ContainerInfo> = list
            .containers
            .into_iter()
            .filter(|c| c.host == host && !c.execution_id.is_empty())
            .take(MAX_SWEPT)
            .collect();
        report.seen = ours.len();
        let mut running: BTreeMap<String, bool> = BTreeMap::new();
        for c in ours {
            let live = match running.get(&c.execution_id) {
                Some(l) => *l,
                None => {
                    let l = self.execution_running(&c.work_id, &c.execution_id).await?;
                    running.insert(c.execution_id.clone(), l);
                    l
                }
            };
            if live {
                continue;
            }
            let stop = ContainerProviderStopParams {
                container_type: kind.to_owned(),
                config: config.clone(),
                container: c.id.clone(),
                grace_s: SWEEP_STOP_GRACE_S,
            };
            if c.state == "running" {
                call_provider(runner, provider, &stop, STOP_TIMEOUT).await?;
            }
            let remove = ContainerProviderRemoveParams {
                container_type: kind.to_owned(),
                config: config.clone(),
                container: c.id.clone(),
            };
            call_provider(runner, provider, &remove, PROVIDER_TIMEOUT).await?;
            tracing::info!(OC_EXTENSION = %provider, OC_WORK_ID = %c.work_id,
                OC_EXECUTION_ID = %c.execution_id, container = %c.id, name = %c.name,
                "removed the container of an execution that is no longer running");
            if let Ok(path) = self.container_pin_path(&c.execution_id) {
                let _ = std::fs::remove_file(path);
            }
            report.removed.push(c.name);
        }
        Ok(())
    }

    /// Whether storaged has `execution_id` (of `work_id`) running: an unknown one is
    /// not; a store that does not answer is an error (nothing is removed on it).
    async fn execution_running(&self, work_id: &str, execution_id: &str) -> Result<bool, RpcError> {
        if work_id.is_empty() {
            return Ok(false);
        }
        let mut after = String::new();
        loop {
            let page = self
                .store(&ExecutionsRequest {
                    work_id: Some(work_id.to_owned()),
                    state: None,
                    host: None,
                    settled_since: None,
                    after: after.clone(),
                    limit: 100,
                })
                .await?;
            if let Some(e) = page.executions.iter().find(|e| e.id == execution_id) {
                return Ok(e.state == "running");
            }
            if page.next.is_empty() || page.next == after {
                return Ok(false);
            }
            after = page.next;
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::super::testkit::peer;
    use super::*;
    use protocol::sandbox::{SandboxLaunch, SandboxNeeds};
    use protocol::wire::RunRequest;
    use serde_json::json;

    fn run(container: Option<Value>) -> RunRequest {
        super::super::testkit::run(|b| b.container = container)
    }

    fn launch() -> ContainerLaunchParams {
        ContainerLaunchParams {
            execution_id: "exec_1".into(),
            epoch: 1,
            launch: SandboxLaunch {
                argv: vec!["sh".into()],
                cwd: "/tmp".into(),
                ..SandboxLaunch::default()
            },
            needs: SandboxNeeds::default(),
        }
    }

    /// Only a run the host opened for this process, whose binding has a container;
    /// without a state directory, or without a provider, it fails closed.
    #[tokio::test]
    async fn container_calls_need_a_contained_run_and_fail_closed() {
        let ws = Workspaces::new(None);
        let p = peer();
        ws.open("shell", &p, &run(None));
        let e = ws
            .container_launch("shell", &p, launch())
            .await
            .unwrap_err();
        assert_eq!(e.app_code(), Some("unauthorized"), "{e}");
        let other = peer();
        let e = ws
            .container_launch("shell", &other, launch())
            .await
            .unwrap_err();
        assert_eq!(e.app_code(), Some("unauthorized"), "{e}");
        ws.open("shell", &p, &run(Some(json!({"type": "docker"}))));
        let e = ws
            .container_launch("shell", &p, launch())
            .await
            .unwrap_err();
        assert_eq!(e.app_code(), Some("sandbox_unavailable"), "{e}");
        assert!(e.message.contains("state directory"), "{e}");
        let state = std::env::temp_dir().join(format!("oc-ct-unit-{}", std::process::id()));
        ws.protect(super::super::Protected {
            state_dir: state.clone(),
            ..Default::default()
        });
        let e = ws
            .container_launch("shell", &p, launch())
            .await
            .unwrap_err();
        assert_eq!(e.app_code(), Some("sandbox_unavailable"), "{e}");
        // The host's label is made once and kept.
        let label = ws.container_host().unwrap();
        assert!(label.starts_with("oc-"), "{label}");
        assert_eq!(ws.container_host().unwrap(), label);
        let e = ws
            .container_adopt(
                "shell",
                &p,
                ContainerAdoptParams {
                    execution_id: "exec_1".into(),
                    epoch: 1,
                    digest: "x".into(),
                },
            )
            .await
            .unwrap_err();
        assert_eq!(e.app_code(), Some("sandbox_denied"), "{e}");
        assert!(e.message.contains("no pinned container"), "{e}");
        let _ = std::fs::remove_dir_all(state);
    }
}
