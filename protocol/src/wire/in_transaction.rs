//! In-transaction methods (H→E; pure, deterministic, 250 ms, no callbacks):
//! `recurrence.next`, `work_kind.trigger`, `dependency.filter` and `emit.commit`.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::events::{Event, Payload};
use super::is_false;
use super::kv::{KvDelete, KvPut};
use super::work::Work;

/// `recurrence.next` (H→E, in transaction): the next fire time of a recurrence after a
/// fire, and the occurrence's payload.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RecurrenceNextParams {
    /// The recurrence.
    pub recurrence: String,
    /// The scope.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub scope_id: String,
    /// The timer's key.
    pub key: String,
    /// The recurrence's spec, as armed.
    #[serde(default, skip_serializing_if = "Value::is_null")]
    pub spec: Value,
    /// The time that just fired (or, when first armed, the arm time).
    pub after: String,
}

/// Result of `recurrence.next`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RecurrenceNextResult {
    /// The next fire time; empty to stop re-arming.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub next: String,
    /// The payload of the occurrence that fired, if it carries one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub payload: Option<Payload>,
}

/// `work_kind.trigger` (H→E, in transaction): which pending input starts a Work of a kind.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct WorkKindTriggerParams {
    /// The Work kind.
    pub kind: String,
    /// The Work.
    pub work: Work,
    /// Its pending inputs, in acceptance order.
    pub inputs: Vec<Event>,
}

/// Result of `work_kind.trigger`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkKindTriggerResult {
    /// The chosen input's Event ID; empty (or unknown) falls back to the first input.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub event_id: String,
}

/// `dependency.filter` (H→E, in transaction): does this Event satisfy a wait's plan?
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct DependencyFilterParams {
    /// The wait operation that planned the Wait.
    pub operation: String,
    /// The waiting Work.
    pub work_id: String,
    /// The plan the wait operation returned.
    #[serde(default, skip_serializing_if = "Value::is_null")]
    pub plan: Value,
    /// The candidate Event.
    pub event: Event,
}

/// Result of `dependency.filter` (a failure counts as false).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DependencyFilterResult {
    /// True when the Event satisfies the Wait.
    #[serde(default, skip_serializing_if = "is_false")]
    pub matched: bool,
}

/// The identity of an Event accepted in the current transaction.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AcceptedRef {
    /// The Event ID.
    pub id: String,
    /// Its sequence.
    pub sequence: u64,
    /// The root of its causal chain.
    pub root_id: String,
    /// Its causal depth.
    #[serde(default)]
    pub depth: u32,
    /// True when it was newly added.
    #[serde(default, skip_serializing_if = "is_false")]
    pub added: bool,
}

/// `emit.commit` (H→E, in transaction): the records an emit operation commits with the
/// Event the transaction just accepted.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct EmitCommitParams {
    /// The emit operation.
    pub operation: String,
    /// The commit data its `operation.emit` returned.
    #[serde(default, skip_serializing_if = "Value::is_null")]
    pub commit: Value,
    /// The accepted Event.
    pub event: AcceptedRef,
}

/// Result of `emit.commit`: the records, committed with the emission.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct EmitCommitResult {
    /// Writes.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub puts: Vec<KvPut>,
    /// Deletes.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub deletes: Vec<KvDelete>,
}
