//! Workspaces (resource providers): `resource.acquire` / `resource.lookup` (E→H) and
//! the `provider.*` methods (H→E), with the owner statuses ([`owner_status`]).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::{is_false, is_zero_u64};

/// The status a host answers for an owner in `provider.owner_status`.
pub mod owner_status {
    /// The owner (a Work) is still open: its workspace is in use.
    pub const OPEN: &str = "open";
    /// The owner is closed: its workspace is spare.
    pub const CLOSED: &str = "closed";
    /// The host does not know the owner: a provider keeps its workspace.
    pub const UNKNOWN: &str = "unknown";
}

/// `provider.acquire` (H→E): the workspace of `owner` in `mode`, made when it does not
/// exist yet. Idempotent per owner and mode: a second acquisition answers the same
/// workspace (the same `ref` and `dir`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ProviderAcquireParams {
    /// The resource type (`git`).
    #[serde(rename = "type")]
    pub resource_type: String,
    /// The lease's owner: the Work the workspace is for.
    pub owner: String,
    /// The mode the executor requests (`shared`, `work`, `fresh`); empty for the
    /// resource config's own default.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub mode: String,
    /// The executor's request parameters (`{"branch": "fix-12"}`).
    #[serde(default, skip_serializing_if = "Value::is_null")]
    pub params: Value,
    /// The binding's resource config, raw JSON.
    #[serde(default, skip_serializing_if = "Value::is_null")]
    pub config: Value,
    /// The scope of the binding (names a `shared` checkout with `binding`).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub scope_id: String,
    /// The binding (names a `shared` checkout with `scope_id`).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub binding: String,
    /// The host's values of the variables the resource's own `pass_env` names
    /// (ResourceAcquisition.HostEnv): the only daemon variables the provider adds to its
    /// sanitized environment.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub host_env: BTreeMap<String, String>,
}

/// A workspace a provider answers (`provider.acquire`, `provider.lookup`,
/// `provider.reconcile`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ProvidedResource {
    /// The lease reference: stable for the owner and mode, quoted by `provider.lookup`.
    #[serde(rename = "ref")]
    pub reference: String,
    /// The owner it was acquired for.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub owner: String,
    /// The mode it was made in.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub mode: String,
    /// The directory the executor runs in (absolute).
    pub dir: String,
    /// The provider's environment layer for runs in it.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<String, String>,
    /// What the provider says about it, for the operator (`branch`, `head`,
    /// `repository`).
    #[serde(default, skip_serializing_if = "Value::is_null")]
    pub data: Value,
}

/// Result of `provider.acquire`.
pub type ProviderAcquireResult = ProvidedResource;

/// `provider.lookup` (H→E): the workspace a lease reference names. Never creates
/// anything: a reference with no complete workspace is `resource_not_found`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ProviderLookupParams {
    /// The resource type.
    #[serde(rename = "type")]
    pub resource_type: String,
    /// The lease reference from the acquisition.
    #[serde(rename = "ref")]
    pub reference: String,
    /// The binding's resource config, raw JSON (for its environment layer).
    #[serde(default, skip_serializing_if = "Value::is_null")]
    pub config: Value,
}

/// Result of `provider.lookup`.
pub type ProviderLookupResult = ProvidedResource;

/// `resource.acquire` (E→H): an executor asks for its run's workspace, only through a
/// run the host opened for this process. The host calls `provider.acquire` on the
/// provider of the binding's resource (the Work as owner) and records the lease.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ResourceAcquireParams {
    /// The run's Execution.
    pub execution_id: String,
    /// The run's lease epoch (a superseded one is refused, conflict).
    #[serde(default, skip_serializing_if = "is_zero_u64")]
    pub epoch: u64,
    /// The mode requested (`shared`, `work`, `fresh`/`clone`); empty for the resource
    /// config's own default.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub mode: String,
    /// The request's parameters (`{"branch": "fix-12"}`).
    #[serde(default, skip_serializing_if = "Value::is_null")]
    pub params: Value,
}

/// Result of `resource.acquire`: the workspace.
pub type ResourceAcquireResult = ProvidedResource;

/// `resource.lookup` (E→H): the workspace a lease reference names, for a resumed
/// segment. Never creates anything.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ResourceLookupParams {
    /// The run's Execution.
    pub execution_id: String,
    /// The run's lease epoch.
    #[serde(default, skip_serializing_if = "is_zero_u64")]
    pub epoch: u64,
    /// The lease reference from the acquisition.
    #[serde(rename = "ref")]
    pub reference: String,
}

/// Result of `resource.lookup`.
pub type ResourceLookupResult = ProvidedResource;

/// A workspace a reconcile or sweep removed or kept, and why.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ResourceNote {
    /// The lease reference.
    #[serde(rename = "ref")]
    pub reference: String,
    /// Its owner, when known.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub owner: String,
    /// Its directory.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub dir: String,
    /// Why it was removed or kept.
    pub reason: String,
}

/// `provider.reconcile` (H→E): after a crash or a restart, repair what an interrupted
/// acquisition left (a half-made worktree is removed, so the next acquisition makes it
/// whole) and answer every complete workspace, for the host to compare with its leases.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ProviderReconcileParams {
    /// The resource type.
    #[serde(rename = "type")]
    pub resource_type: String,
    /// The pass's ID, quoted in `provider.owner_status`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub pass_id: String,
}

/// Result of `provider.reconcile`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ProviderReconcileResult {
    /// Every complete workspace.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub resources: Vec<ProvidedResource>,
    /// What was half-made and removed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub removed: Vec<ResourceNote>,
}

/// `provider.sweep` (H→E, with manifest `resources[].sweep`): remove the workspaces of
/// owners the host reports closed (asked through `provider.owner_status`), keep and report
/// any with uncommitted changes, and prune the provider's caches.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ProviderSweepParams {
    /// The resource type.
    #[serde(rename = "type")]
    pub resource_type: String,
    /// The pass's ID, quoted in `provider.owner_status`.
    pub pass_id: String,
    /// How long an owner must have been closed before its workspace goes, in seconds.
    #[serde(default, skip_serializing_if = "is_zero_u64")]
    pub grace_s: u64,
    /// Remove a closed owner's workspace even with uncommitted changes.
    #[serde(default, skip_serializing_if = "is_false")]
    pub remove_dirty: bool,
}

/// Result of `provider.sweep`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ProviderSweepResult {
    /// The workspaces removed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub removed: Vec<ResourceNote>,
    /// The spare workspaces kept, and why (uncommitted changes, within the grace).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub kept: Vec<ResourceNote>,
    /// What was pruned (one line per cache).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pruned: Vec<String>,
}

/// `provider.owner_status` (E→H): during a reconcile or sweep pass, whether each owner
/// is still open.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProviderOwnerStatusParams {
    /// The pass's ID, from `provider.reconcile` or `provider.sweep`.
    pub pass_id: String,
    /// The owners asked about (at most [`MAX_PAGE_LIMIT`](super::MAX_PAGE_LIMIT) per call).
    pub owners: Vec<String>,
}

/// One owner's status in `provider.owner_status`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct OwnerStatus {
    /// The owner.
    pub owner: String,
    /// [`owner_status`]: `open`, `closed` or `unknown`.
    pub status: String,
    /// When it closed (RFC 3339), for a closed owner.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub closed_at: String,
}

/// Result of `provider.owner_status`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProviderOwnerStatusResult {
    /// One status per owner asked about.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub owners: Vec<OwnerStatus>,
}
