//! Gates: `operation.gate` (H→E, permission `operation.gate`, manifest
//! `provides.operation_gate`) is asked about every call of another package's toolbelt
//! operation in a scope the gate's package is configured for; `work.admit` (H→E,
//! permission `work.start_gate`, manifest `provides.start_gate`) before the first
//! attempt of a Work in such a scope; `work.settle_hold` (E→H, the same permission)
//! settles a hold the package placed.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::{Authority, WaitRequest};

/// The code of a gate that failed (timed out, crashed, answered anything but an
/// operation error): the host fails closed and the call is refused.
pub const GATE_FAILED: &str = "gate_failed";
/// The longest hold reason, in bytes.
pub const MAX_HOLD_REASON_BYTES: usize = 200;

/// `operation.gate` (H→E).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct OperationGateParams {
    /// The operation called (`github.open_pull_request`).
    pub operation: String,
    /// The package that declares it.
    pub owner: String,
    /// The call's request ID (the same again is the same call).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub request_id: String,
    /// The caller's validated authority.
    pub authority: Authority,
    /// The call's input.
    #[serde(default, skip_serializing_if = "Value::is_null")]
    pub input: Value,
}

/// Result of `operation.gate`: no `wait` lets the call through; a `wait` parks it (the
/// turn ends on that Wait, and the call is made again when the Work resumes). An
/// error refuses it, its `data.agent_message` the reason the agent reads.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct OperationGateResult {
    /// The Wait the call parks on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wait: Option<WaitRequest>,
}

/// A hold on a Work's start.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Hold {
    /// Why the Work waits, in one line for a person.
    pub reason: String,
}

/// `work.admit` (H→E): asked before the first attempt of a Work starts.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct WorkAdmitParams {
    /// The Work.
    pub work: super::Work,
    /// The binding that would run it.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub binding: String,
    /// Its first input, when it has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input: Option<super::Event>,
}

/// Result of `work.admit`: no `hold` lets the start through. An error refuses the
/// start for now (it is asked again on a later pass).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkAdmitResult {
    /// The hold to place: the Work waits until the package settles it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hold: Option<Hold>,
}

/// `work.settle_hold` (E→H): settle a hold the package placed.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkSettleHoldParams {
    /// The held Work.
    pub work_id: String,
    /// Let the next start through once (true), or cancel the Work (false).
    pub admit: bool,
    /// Why, in one line.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub reason: String,
    /// The settlement's identity: the same key again does nothing again.
    pub key: String,
}

/// Result of `work.settle_hold`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkSettleHoldResult {
    /// Whether this call settled it (false: it was settled before, or had no hold of
    /// the package's).
    #[serde(default)]
    pub settled: bool,
}

/// A hold on a Work, as the state reads show it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkHold {
    /// The package that placed it.
    pub owner: String,
    /// Why the Work waits.
    pub reason: String,
    /// When it was placed.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub held_at: String,
}
