//! Derived events and control (E→H): `event.accept`, `work.cancel` and
//! `wait.progress`.

use serde::{Deserialize, Serialize};

use super::events::{Emission, EmissionResult};
use super::kv::{KvCheck, KvDelete, KvPut};
use super::{is_false, WireError};

/// `event.accept` (E→H): accept a derived Event (its `parent_id` required) with KV checks
/// and records committed atomically with it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct EventAcceptParams {
    /// The Event; `parent_id` is required.
    pub event: Emission,
    /// Preconditions.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub checks: Vec<KvCheck>,
    /// Records written with a newly added Event.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub puts: Vec<KvPut>,
    /// Records deleted with a newly added Event.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub deletes: Vec<KvDelete>,
}

impl EventAcceptParams {
    /// event.accept only derives: checks that a parent is named.
    pub fn validate(&self) -> Result<(), WireError> {
        if self.event.parent_id.is_empty() {
            return Err(WireError::new(
                "event.parent_id",
                "is required: event.accept only derives",
            ));
        }
        Ok(())
    }
}

/// Result of `event.accept`.
pub type EventAcceptResult = EmissionResult;

/// `work.cancel` (E→H): cancel a Work of the extension's own kinds.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkCancelParams {
    /// The Work ID.
    pub work_id: String,
    /// Why, for the operator.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub reason: String,
}

/// Result of `work.cancel`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkCancelResult {
    /// True when this call cancelled it; false when it had already ended.
    #[serde(default, skip_serializing_if = "is_false")]
    pub cancelled: bool,
}

/// `wait.progress` (E→H): the owner's progress line beside a Work's active Wait ("" clears
/// it; the host clips it to one line of 120 bytes).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct WaitProgressParams {
    /// The Work whose active Wait it describes.
    pub work_id: String,
    /// The progress line.
    #[serde(default)]
    pub progress: String,
}

/// Result of `wait.progress`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct WaitProgressResult {}
