//! The wire types of `work` (moved from storaged).

pub mod actions;
pub mod attempts;
pub mod holds;
pub mod hosts;
pub mod reads;
pub mod routing;

pub use actions::*;
pub use attempts::*;
pub use holds::*;
pub use hosts::*;
pub use reads::*;
pub use routing::*;

use protocol::wire::{Outcome, WorkDisplay, WorkHold};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Every state a Work can be in, as the store names them (what a listing filters on).
pub const WORK_STATES: [&str; 8] = [
    "pending",
    "running",
    "waiting",
    "woken",
    "idle",
    "completed",
    "failed",
    "cancelled",
];

/// A Work, as storaged's reads answer it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct WorkRow {
    /// The Work ID.
    pub id: String,
    /// Its scope.
    pub scope_id: String,
    /// Its Work kind.
    pub kind: String,
    /// The binding it runs on.
    pub binding: String,
    /// Its state (see the module doc).
    pub state: String,
    /// Its display, when a source gave one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub display: Option<WorkDisplay>,
    /// Its context (set by the match that created it).
    #[serde(default, skip_serializing_if = "Value::is_null")]
    pub context: Value,
    /// The binding grants it opted into.
    #[serde(default)]
    pub grants: Vec<String>,
    /// Its correlation keys (at most `max_page` of them).
    #[serde(default)]
    pub keys: Vec<String>,
    /// The current lease epoch.
    pub lease_epoch: i64,
    /// Failed attempts since the last success.
    pub failures: i64,
    /// Not to start before this.
    #[serde(default)]
    pub retry_at_ms: Option<i64>,
    /// Created (RFC 3339).
    pub created_at: String,
    /// Last changed (RFC 3339).
    pub updated_at: String,
    /// Bumped by every write: the precondition of `expect_version`.
    pub version: i64,
    /// The hold its start waits on (an admission), while it has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hold: Option<WorkHold>,
    /// The packages that admitted its start (each settled its hold with admit):
    /// their `work.admit` is not asked again.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub admitted: Vec<String>,
}

/// An Execution (one attempt of a Work).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ExecutionRow {
    /// The Execution ID.
    pub id: String,
    /// Its Work.
    pub work_id: String,
    /// The attempt number, from 1.
    pub attempt: i64,
    /// The executor that runs it.
    pub executor: String,
    /// The binding it runs on.
    pub binding: String,
    /// Its state (see the module doc).
    pub state: String,
    /// Who holds its lease.
    pub lease_owner: String,
    /// The lease epoch it runs under.
    pub epoch: i64,
    /// When its lease runs out (while running).
    #[serde(default)]
    pub lease_expires_ms: Option<i64>,
    /// The last recovery metadata it persisted.
    #[serde(default, skip_serializing_if = "Value::is_null")]
    pub recovery: Value,
    /// Its result once settled.
    #[serde(default, skip_serializing_if = "Value::is_null")]
    pub result: Value,
    /// When a failed attempt's Work may retry.
    #[serde(default)]
    pub retry_at_ms: Option<i64>,
    /// Started (RFC 3339).
    pub started_at: String,
    /// Settled (RFC 3339).
    #[serde(default)]
    pub settled_at: Option<String>,
    /// The host that launched its current segment (empty: recorded before hosts
    /// were).
    #[serde(default)]
    pub host: String,
}
