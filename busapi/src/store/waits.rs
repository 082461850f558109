//! The wire types of `waits` (moved from storaged).

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// A Wait, as storaged's reads answer it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct WaitRow {
    /// The Wait ID.
    pub id: String,
    /// Its Work.
    pub work_id: String,
    /// The execution parked on it.
    #[serde(default)]
    pub execution_id: Option<String>,
    /// The extension whose operation declared it; empty for a builtin wait.
    pub owner: String,
    /// What it waits for, in words.
    pub description: String,
    /// The owner's progress line.
    pub progress: String,
    /// The keys that wake it.
    pub keys: Vec<String>,
    /// Only events of these types wake it (empty: any).
    pub types: Vec<String>,
    /// The plan `dependency.filter` receives.
    #[serde(default, skip_serializing_if = "Value::is_null")]
    pub plan: Value,
    /// When it times out, as declared.
    #[serde(default)]
    pub due_ms: Option<i64>,
    /// When its timeout fires, while its timer exists (RFC 3339).
    #[serde(default)]
    pub due_at: Option<String>,
    /// Its state.
    pub state: String,
    /// Declared (RFC 3339).
    pub created_at: String,
    /// Woken, timed out or cancelled (RFC 3339).
    #[serde(default)]
    pub woken_at: Option<String>,
    /// The event that woke it.
    #[serde(default)]
    pub wake_seq: Option<i64>,
}

/// Why a Wait wakes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WakeReason {
    /// An event (given as `seq`, an input of the Work) satisfied it.
    Event,
    /// Its timeout fired (state `timed_out`).
    Timeout,
    /// An operator or the scheduler woke it.
    Manual,
}

/// `store.wait_wake`: wake an active Wait; its Work becomes `woken` (ready to resume).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WaitWakeRequest {
    /// The Wait.
    pub wait_id: String,
    /// The event that woke it (required for `event`; an input of the Work).
    #[serde(default)]
    pub seq: Option<i64>,
    /// Why.
    pub reason: WakeReason,
}

/// Result of `store.wait_wake`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct WaitWakeResponse {
    /// The Work.
    pub work_id: String,
    /// The execution to resume.
    #[serde(default)]
    pub execution_id: Option<String>,
    /// The Wait's state now.
    pub state: String,
}

/// `store.wait_progress`: the owner's progress line on a Work's active Wait.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WaitProgressRequest {
    /// The calling extension (bound by the host, never sent by it).
    pub owner: String,
    /// The Work.
    pub work_id: String,
    /// The line (cut to one line within 120 bytes; "" clears it).
    #[serde(default)]
    pub progress: String,
}

/// Result of `store.wait_progress`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct WaitProgressResponse {
    /// The Wait.
    pub wait_id: String,
    /// The line as stored.
    pub progress: String,
}

/// `store.waits_matching`: active Waits an event with these keys and types could wake
/// (one of its keys, and its types empty or naming one of these).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WaitsMatchingRequest {
    /// The event's correlation keys.
    pub keys: Vec<String>,
    /// The event's type(s).
    #[serde(default)]
    pub types: Vec<String>,
    /// At most this many.
    #[serde(default)]
    pub limit: u32,
}

/// Result of `store.waits_matching` (and `store.waits`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct WaitsResponse {
    /// The Waits.
    pub waits: Vec<WaitRow>,
    /// The next page's cursor; empty at the end.
    #[serde(default)]
    pub next: String,
}

/// `store.waits`: a page of Waits by ID.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WaitsRequest {
    /// Only this Work's.
    #[serde(default)]
    pub work_id: Option<String>,
    /// Only this state.
    #[serde(default)]
    pub state: Option<String>,
    /// The cursor (the previous page's `next`).
    #[serde(default)]
    pub after: String,
    /// At most this many.
    #[serde(default)]
    pub limit: u32,
}
