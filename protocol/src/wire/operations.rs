//! Operations (H→E): `operation.call`, `operation.wait` and `operation.emit`, and the
//! Wait an operation asks for ([`WaitRequest`]).

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::events::Emission;
use super::work::{clip_line, Authority};
use super::{present, MAX_WAIT_DESCRIPTION_BYTES};

/// `operation.call` (H→E): a toolbelt call of a handler operation; idempotent on
/// `request_id`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct OperationCallParams {
    /// The operation.
    pub operation: String,
    /// The call's request ID (a retry repeats it); empty for no replay.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub request_id: String,
    /// The validated authority.
    pub authority: Authority,
    /// The input's data.
    #[serde(default, skip_serializing_if = "Value::is_null")]
    pub input: Value,
}

/// Result of `operation.call` (an OperationError crosses as an error with its code).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct OperationCallResult {
    /// The output.
    #[serde(default, skip_serializing_if = "Value::is_null")]
    pub output: Value,
}

/// What a Work waits for: the wire form of extension.WaitRequest.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct WaitRequest {
    /// Correlation keys whose Events wake it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub keys: Vec<String>,
    /// Only Events of these types wake it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub types: Vec<String>,
    /// When it times out; empty for no timeout.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub due_at: String,
    /// What it waits for, in words (clipped to one line of 200 bytes).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub description: String,
    /// The plan `dependency.filter` receives.
    #[serde(default, skip_serializing_if = "Value::is_null")]
    pub plan: Value,
}

impl WaitRequest {
    /// The description as the toolbelt stores it: its first line within 200 bytes.
    pub fn clipped_description(&self) -> String {
        clip_line(&self.description, MAX_WAIT_DESCRIPTION_BYTES)
    }
}

/// `operation.wait` (H→E): plan a wait operation's Wait.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct OperationWaitParams {
    /// The wait operation.
    pub operation: String,
    /// The call's request ID.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub request_id: String,
    /// The validated authority.
    pub authority: Authority,
    /// The input's data.
    #[serde(default, skip_serializing_if = "Value::is_null")]
    pub input: Value,
}

/// Result of `operation.wait`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct OperationWaitResult {
    /// The Wait to declare.
    pub wait: WaitRequest,
}

/// `operation.emit` (H→E): plan an emit operation's Event.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct OperationEmitParams {
    /// The emit operation.
    pub operation: String,
    /// The call's request ID.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub request_id: String,
    /// The validated authority.
    pub authority: Authority,
    /// The input's data.
    #[serde(default, skip_serializing_if = "Value::is_null")]
    pub input: Value,
}

/// Result of `operation.emit`: the Event to accept and, for an operation that commits,
/// the data `emit.commit` receives in the emission transaction.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct OperationEmitResult {
    /// The Event to accept (derived from the calling Work's input).
    pub event: Emission,
    /// The commit data; present only for an operation declared to commit.
    #[serde(
        default,
        deserialize_with = "present",
        skip_serializing_if = "Option::is_none"
    )]
    pub commit: Option<Value>,
    /// The output returned to the caller.
    #[serde(default, skip_serializing_if = "Value::is_null")]
    pub output: Value,
}
