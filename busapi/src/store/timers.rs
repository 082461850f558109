//! The wire types of `timers` (moved from storaged).

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// A timer, as storaged's reads answer it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TimerRow {
    /// The timer ID (new at every arming).
    pub id: String,
    /// Who armed it (an extension, or `core`).
    pub owner: String,
    /// Its kind (`recurrence`, `wait.timeout`, ...).
    pub kind: String,
    /// Its scope.
    pub scope_id: String,
    /// Its key.
    pub key: String,
    /// When it fires (ms).
    pub due_ms: i64,
    /// When it fires (RFC 3339).
    pub due_at: String,
    /// Its recurrence spec.
    #[serde(default, skip_serializing_if = "Value::is_null")]
    pub spec: Value,
    /// Its payload.
    #[serde(default, skip_serializing_if = "Value::is_null")]
    pub payload: Value,
    /// Armed (RFC 3339).
    pub created_at: String,
}

/// `store.timer_arm`: arm a timer, replacing the one with the same (owner, kind,
/// scope_id, key).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TimerArmRequest {
    /// Who arms it (bound by the host).
    pub owner: String,
    /// Its kind.
    pub kind: String,
    /// Its scope.
    #[serde(default)]
    pub scope_id: String,
    /// Its key.
    pub key: String,
    /// When it fires (ms).
    pub due_ms: i64,
    /// Its recurrence spec.
    #[serde(default)]
    pub spec: Option<Value>,
    /// Its payload.
    #[serde(default)]
    pub payload: Option<Value>,
}

/// Result of `store.timer_arm`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TimerArmResponse {
    /// The timer as armed.
    pub timer: TimerRow,
    /// Whether it replaced an armed one.
    pub replaced: bool,
}

/// `store.timer_cancel`: delete the timer with this (owner, kind, scope_id, key).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TimerCancelRequest {
    /// Who armed it.
    pub owner: String,
    /// Its kind.
    pub kind: String,
    /// Its scope.
    #[serde(default)]
    pub scope_id: String,
    /// Its key.
    pub key: String,
}

/// Result of `store.timer_cancel`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TimerCancelResponse {
    /// Whether a timer was armed (cancelling none is not an error).
    pub cancelled: bool,
}

/// `store.timers_due`: timers due by `now_ms`, earliest first.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TimersDueRequest {
    /// The time to compare with.
    pub now_ms: i64,
    /// At most this many.
    #[serde(default)]
    pub limit: u32,
}

/// Result of `store.timers_due` and `store.timers`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TimersResponse {
    /// The timers.
    pub timers: Vec<TimerRow>,
    /// The next page's cursor; empty at the end.
    #[serde(default)]
    pub next: String,
}

/// `store.timer_fire`: fire one timer, if it is still armed with the due time read.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TimerFireRequest {
    /// The timer (as read).
    pub id: String,
    /// Its due time (as read).
    pub expect_due_ms: i64,
    /// Re-arm it at this time (a recurrence's next occurrence) instead of deleting it.
    #[serde(default)]
    pub rearm_due_ms: Option<i64>,
    /// The re-armed timer's payload (default: the fired one's).
    #[serde(default)]
    pub payload: Option<Value>,
}

/// Result of `store.timer_fire`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TimerFireResponse {
    /// What fired.
    pub fired: TimerRow,
    /// The timer re-armed in its place.
    #[serde(default)]
    pub rearmed: Option<TimerRow>,
}

/// `store.timers`: a page of armed timers by ID.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TimersRequest {
    /// Only this owner's.
    #[serde(default)]
    pub owner: Option<String>,
    /// Only this scope's.
    #[serde(default)]
    pub scope_id: Option<String>,
    /// The cursor (the previous page's `next`).
    #[serde(default)]
    pub after: String,
    /// At most this many.
    #[serde(default)]
    pub limit: u32,
}
