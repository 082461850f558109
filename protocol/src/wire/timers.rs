//! Timers (E→H): `timer.arm` and `timer.cancel`.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::is_false;

/// `timer.arm` (E→H): arm (or re-arm) a declared recurrence's timer under a key.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct TimerArmParams {
    /// The recurrence (declared by the extension).
    pub recurrence: String,
    /// The configured scope.
    pub scope_id: String,
    /// The key (the host prefixes it with the extension's name).
    pub key: String,
    /// The recurrence's spec, passed back to `recurrence.next`.
    #[serde(default, skip_serializing_if = "Value::is_null")]
    pub spec: Value,
    /// The first fire time; empty asks `recurrence.next` from now.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub at: String,
}

/// Result of `timer.arm`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TimerArmResult {
    /// The timer ID.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub timer_id: String,
    /// When it fires.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub due_at: String,
}

/// `timer.cancel` (E→H): cancel a timer by recurrence, scope and key.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TimerCancelParams {
    /// The recurrence.
    pub recurrence: String,
    /// The scope.
    pub scope_id: String,
    /// The key.
    pub key: String,
}

/// Result of `timer.cancel`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TimerCancelResult {
    /// True when a timer was armed and is now cancelled.
    #[serde(default, skip_serializing_if = "is_false")]
    pub cancelled: bool,
}
