//! The wire types of sandboxes: `sandbox.plan` and `sandbox.adopt` (E→H, an
//! executor's launch through its binding's sandbox) and `sandbox_provider.plan` and
//! `sandbox_provider.adopt` (H→E, the provider package's side).
//!
//! An executor asks the host to plan a launch ([`SandboxLaunch`]) with what it needs
//! ([`SandboxNeeds`]); the host checks those needs against its protected set, merges
//! the set in as denials, asks the binding's provider, computes the digest of the
//! [`SandboxPlan`] that comes back ([`plan_digest`]) and pins it with the attempt. On
//! recovery the executor asks `sandbox.adopt`, and the host asks the provider to prove
//! the live process is inside the pinned plan's sandbox.

use crate::wire::Call;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;

/// The most entries in each list of [`SandboxNeeds`].
pub const MAX_NEEDS: usize = 256;
/// The longest path or host in [`SandboxNeeds`], in bytes.
pub const MAX_NEED_BYTES: usize = 4096;

/// A launch as the executor would run it unconfined.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SandboxLaunch {
    /// The program and its arguments.
    pub argv: Vec<String>,
    /// The working directory (absolute).
    pub cwd: String,
    /// The environment.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<String, String>,
}

/// What a launch needs inside its sandbox: absolute paths and hosts.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SandboxNeeds {
    /// Paths it reads (the system's read-only paths need not be named).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub read: Vec<String>,
    /// Paths it reads and writes (its workspace, its own tmp and config directories).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub write: Vec<String>,
    /// Paths it must not see (the host adds its protected set).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub deny: Vec<String>,
    /// Network hosts it reaches (`api.anthropic.com`); the binding's allow-list adds
    /// to them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub hosts: Vec<String>,
}

/// A planned launch: what the executor runs instead.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SandboxPlan {
    /// The sandbox's program and arguments, the launch inside.
    pub argv: Vec<String>,
    /// The working directory.
    pub cwd: String,
    /// The environment.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<String, String>,
    /// The provider's own record of the plan (its settings file and its hash).
    #[serde(default, skip_serializing_if = "Value::is_null")]
    pub data: Value,
}

/// The digest the host pins a plan by: SHA-256 of its JSON (the maps sorted), hex.
pub fn plan_digest(plan: &SandboxPlan) -> String {
    json_digest(plan)
}

/// SHA-256 of `value`'s JSON, hex (the digest of a sandbox or container plan).
pub fn json_digest<T: Serialize>(value: &T) -> String {
    let bytes = serde_json::to_vec(value).unwrap_or_default();
    Sha256::digest(&bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// `sandbox.plan` (E→H): plan a launch of a run the host opened for this process,
/// whose binding has a sandbox.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SandboxPlanParams {
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

/// Result of `sandbox.plan` and `sandbox.adopt`: the pinned plan and its digest.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SandboxPlanned {
    /// The plan.
    pub plan: SandboxPlan,
    /// Its digest, as the host computed it.
    pub digest: String,
}

/// `sandbox.adopt` (E→H): prove a live launch is inside its pinned plan's sandbox.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SandboxAdoptParams {
    /// The run's Execution.
    pub execution_id: String,
    /// The run's lease epoch.
    #[serde(default)]
    pub epoch: u64,
    /// The digest the executor recorded with its recovery metadata.
    pub digest: String,
    /// The launched process (the plan's argv); 0 when it never started.
    #[serde(default)]
    pub pid: i32,
}

/// `sandbox_provider.plan` (H→E): plan a launch in the provider's sandbox type.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SandboxProviderPlanParams {
    /// The sandbox type.
    #[serde(rename = "type")]
    pub sandbox_type: String,
    /// The binding's sandbox config.
    #[serde(default)]
    pub config: Value,
    /// The run's Execution.
    pub execution_id: String,
    /// The launch.
    pub launch: SandboxLaunch,
    /// Its needs, merged with the host's protected set.
    pub needs: SandboxNeeds,
}

/// `sandbox_provider.adopt` (H→E): is `pid` inside `plan`'s sandbox?
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SandboxProviderAdoptParams {
    /// The sandbox type.
    #[serde(rename = "type")]
    pub sandbox_type: String,
    /// The binding's sandbox config.
    #[serde(default)]
    pub config: Value,
    /// The run's Execution.
    pub execution_id: String,
    /// The pinned plan.
    pub plan: SandboxPlan,
    /// The process that runs it; 0 when it never started.
    #[serde(default)]
    pub pid: i32,
}

/// Result of `sandbox_provider.adopt`: proven (a refusal is `sandbox_denied`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SandboxProviderAdoptResult {
    /// What the provider saw, for the log.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub evidence: String,
}

impl Call for SandboxPlanParams {
    const METHOD: &'static str = "sandbox.plan";
    type Result = SandboxPlanned;
}

impl Call for SandboxAdoptParams {
    const METHOD: &'static str = "sandbox.adopt";
    type Result = SandboxPlanned;
}

impl Call for SandboxProviderPlanParams {
    const METHOD: &'static str = "sandbox_provider.plan";
    type Result = SandboxPlan;
}

impl Call for SandboxProviderAdoptParams {
    const METHOD: &'static str = "sandbox_provider.adopt";
    type Result = SandboxProviderAdoptResult;
}

/// Whether `path` is `base` or inside it (both absolute, compared by components).
pub fn within(path: &str, base: &str) -> bool {
    let (p, b) = (std::path::Path::new(path), std::path::Path::new(base));
    p.starts_with(b)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_digest_changes_with_the_plan() {
        let mut plan = SandboxPlan {
            argv: vec!["srt".into()],
            cwd: "/w".into(),
            ..SandboxPlan::default()
        };
        let a = plan_digest(&plan);
        assert_eq!(a.len(), 64);
        assert_eq!(a, plan_digest(&plan.clone()));
        plan.env.insert("A".into(), "1".into());
        assert_ne!(a, plan_digest(&plan));
        assert!(within("/a/b/c", "/a/b"));
        assert!(!within("/a/bc", "/a/b"));
    }
}
