//! The wire types of containers: `container.launch` and `container.adopt` (E→H, an
//! executor's launch through its binding's container) and `container_provider.*`
//! (H→E, the provider package's side).
//!
//! An executor asks the host to launch a run in its binding's container
//! ([`ContainerLaunchParams`]) with the launch as it would run it unconfined and what
//! it needs ([`SandboxNeeds`]: the paths it reads and writes, which the provider
//! mounts at the same paths, and nothing else of the host). The host checks the needs
//! against its protected set, asks the provider to plan ([`ContainerPlan`]), computes
//! the plan's digest ([`container_digest`]) and pins it, asks the provider to create
//! the container (labelled with [`LABEL_EXECUTION`], [`LABEL_WORK`] and
//! [`LABEL_HOST`]), pins the container too and answers both
//! ([`ContainerLaunched`]). The executor then runs the plan's `argv` under its own
//! wrapper, as it would the launch: a program of the provider's on this host that
//! starts the container, carries its stdin, stdout and stderr, passes SIGTERM and
//! SIGINT on to it, ends with its exit status and removes it. On recovery the executor
//! asks `container.adopt`; the host refuses a plan whose digest no longer matches and
//! asks the provider to inspect the pinned container: one that carries another
//! execution's label is refused. The host's sweep stops and removes its containers
//! whose execution has ended (`container_provider.list`, `stop`, `remove`).
//!
//! A provider fails closed: a plan or create it cannot make is refused
//! `sandbox_unavailable` (or `sandbox_denied`) and nothing runs; an inspect or list it
//! cannot answer is an error, never "gone" or an empty list, so the host removes
//! nothing on it.

use crate::sandbox::{SandboxLaunch, SandboxNeeds};
use crate::wire::Call;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::BTreeMap;

/// The label naming the Execution a container runs.
pub const LABEL_EXECUTION: &str = "open-conduit.execution";
/// The label naming its Work.
pub const LABEL_WORK: &str = "open-conduit.work";
/// The label naming the host (the initialize's `container_host`) that made it.
pub const LABEL_HOST: &str = "open-conduit.host";

/// The container's name for an Execution: `oc-<execution>` (an Execution's ID is
/// unique, so a second create for it finds the first).
pub fn container_name(execution_id: &str) -> String {
    format!("oc-{execution_id}")
}

/// A planned container launch.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ContainerPlan {
    /// The container's name.
    pub name: String,
    /// The program the executor runs on this host instead of the launch (the
    /// provider's, which runs the launch in the container and ends with it).
    pub argv: Vec<String>,
    /// Its working directory.
    pub cwd: String,
    /// Its environment (the launch's own goes into the container).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<String, String>,
    /// The provider's record of the container it will create (image, mounts,
    /// limits, labels, network).
    #[serde(default, skip_serializing_if = "Value::is_null")]
    pub data: Value,
}

/// The digest the host pins a container plan by: SHA-256 of its JSON, hex.
pub fn container_digest(plan: &ContainerPlan) -> String {
    crate::sandbox::json_digest(plan)
}

/// `container.launch` (E→H): plan and create the container of a run the host opened
/// for this process, whose binding has a container.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ContainerLaunchParams {
    /// The run's Execution.
    pub execution_id: String,
    /// The run's lease epoch (0: the run's own).
    #[serde(default)]
    pub epoch: u64,
    /// The launch.
    pub launch: SandboxLaunch,
    /// What it needs.
    #[serde(default)]
    pub needs: SandboxNeeds,
}

/// Result of `container.launch` and `container.adopt`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ContainerLaunched {
    /// The pinned plan.
    pub plan: ContainerPlan,
    /// Its digest, as the host computed it.
    pub digest: String,
    /// The container the provider made (its engine ID).
    pub container: String,
}

/// `container.adopt` (E→H): prove a recovered run's container is the pinned one.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ContainerAdoptParams {
    /// The run's Execution.
    pub execution_id: String,
    /// The run's lease epoch.
    #[serde(default)]
    pub epoch: u64,
    /// The digest the executor recorded with its recovery metadata.
    pub digest: String,
}

/// `container_provider.plan` (H→E): plan a launch in the provider's container type.
/// The launch comes without its environment's values (each variable is there, empty):
/// the plan is pinned, and the values come with `container_provider.create`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ContainerProviderPlanParams {
    /// The container type.
    #[serde(rename = "type")]
    pub container_type: String,
    /// The binding's container config.
    #[serde(default)]
    pub config: Value,
    /// The run's Execution.
    pub execution_id: String,
    /// Its Work.
    #[serde(default)]
    pub work_id: String,
    /// The host's container label.
    #[serde(default)]
    pub host: String,
    /// The launch.
    pub launch: SandboxLaunch,
    /// Its needs, checked against the host's protected set.
    pub needs: SandboxNeeds,
}

/// `container_provider.create` (H→E): make the planned container (not started).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ContainerProviderCreateParams {
    /// The container type.
    #[serde(rename = "type")]
    pub container_type: String,
    /// The binding's container config.
    #[serde(default)]
    pub config: Value,
    /// The run's Execution.
    pub execution_id: String,
    /// The pinned plan.
    pub plan: ContainerPlan,
    /// The launch's environment, for the container: never part of the plan (which
    /// the host pins in its state directory), since it may carry secrets the
    /// binding gives the run.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<String, String>,
}

/// Result of `container_provider.create`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ContainerCreated {
    /// The container's engine ID.
    pub container: String,
}

/// A container, as `container_provider.inspect` and `list` see it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ContainerInfo {
    /// Its engine ID.
    pub id: String,
    /// Its name.
    #[serde(default)]
    pub name: String,
    /// `created`, `running`, `exited` (any other engine state as the engine names
    /// it), or `gone` (inspect only: the engine has no such container).
    pub state: String,
    /// Its [`LABEL_EXECUTION`].
    #[serde(default)]
    pub execution_id: String,
    /// Its [`LABEL_WORK`].
    #[serde(default)]
    pub work_id: String,
    /// Its [`LABEL_HOST`].
    #[serde(default)]
    pub host: String,
    /// Its exit status, once exited.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i64>,
    /// Its first process on this host, while running (0 otherwise or remote).
    #[serde(default)]
    pub pid: i64,
}

/// `container_provider.inspect` (H→E).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ContainerProviderInspectParams {
    /// The container type.
    #[serde(rename = "type")]
    pub container_type: String,
    /// The binding's container config.
    #[serde(default)]
    pub config: Value,
    /// The container (engine ID or name).
    pub container: String,
}

/// `container_provider.list` (H→E): every container carrying the host's label.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ContainerProviderListParams {
    /// The container type.
    #[serde(rename = "type")]
    pub container_type: String,
    /// A binding's container config (its engine).
    #[serde(default)]
    pub config: Value,
    /// The host's container label.
    pub host: String,
}

/// Result of `container_provider.list`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ContainerList {
    /// The containers.
    pub containers: Vec<ContainerInfo>,
}

/// `container_provider.signal` (H→E): send a signal to the container's process.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ContainerProviderSignalParams {
    /// The container type.
    #[serde(rename = "type")]
    pub container_type: String,
    /// The binding's container config.
    #[serde(default)]
    pub config: Value,
    /// The container.
    pub container: String,
    /// The signal's name (`SIGTERM`, `SIGINT`, `SIGKILL`).
    pub signal: String,
}

/// `container_provider.stop` (H→E): SIGTERM, then SIGKILL after `grace_s`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ContainerProviderStopParams {
    /// The container type.
    #[serde(rename = "type")]
    pub container_type: String,
    /// The binding's container config.
    #[serde(default)]
    pub config: Value,
    /// The container.
    pub container: String,
    /// Seconds between SIGTERM and SIGKILL.
    #[serde(default)]
    pub grace_s: u64,
}

/// `container_provider.remove` (H→E): remove a container (stopped or not).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ContainerProviderRemoveParams {
    /// The container type.
    #[serde(rename = "type")]
    pub container_type: String,
    /// The binding's container config.
    #[serde(default)]
    pub config: Value,
    /// The container.
    pub container: String,
}

/// Result of `container_provider.signal`, `stop` and `remove`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ContainerDone {
    /// Whether the container was there (false: already gone).
    pub found: bool,
}

impl Call for ContainerLaunchParams {
    const METHOD: &'static str = "container.launch";
    type Result = ContainerLaunched;
}

impl Call for ContainerAdoptParams {
    const METHOD: &'static str = "container.adopt";
    type Result = ContainerLaunched;
}

impl Call for ContainerProviderPlanParams {
    const METHOD: &'static str = "container_provider.plan";
    type Result = ContainerPlan;
}

impl Call for ContainerProviderCreateParams {
    const METHOD: &'static str = "container_provider.create";
    type Result = ContainerCreated;
}

impl Call for ContainerProviderInspectParams {
    const METHOD: &'static str = "container_provider.inspect";
    type Result = ContainerInfo;
}

impl Call for ContainerProviderListParams {
    const METHOD: &'static str = "container_provider.list";
    type Result = ContainerList;
}

impl Call for ContainerProviderSignalParams {
    const METHOD: &'static str = "container_provider.signal";
    type Result = ContainerDone;
}

impl Call for ContainerProviderStopParams {
    const METHOD: &'static str = "container_provider.stop";
    type Result = ContainerDone;
}

impl Call for ContainerProviderRemoveParams {
    const METHOD: &'static str = "container_provider.remove";
    type Result = ContainerDone;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_digest_follows_the_plan_and_the_name_the_execution() {
        let mut plan = ContainerPlan {
            name: container_name("exe-1"),
            argv: vec!["oc-docker".into(), "attach".into()],
            cwd: "/".into(),
            ..ContainerPlan::default()
        };
        assert_eq!(plan.name, "oc-exe-1");
        let a = container_digest(&plan);
        assert_eq!(a.len(), 64);
        plan.data = serde_json::json!({"Image": "debian"});
        assert_ne!(a, container_digest(&plan));
    }
}
