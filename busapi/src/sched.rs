//! schedulerd's methods (`sched.*`): route traces, the router's status, and the
//! operator's hold on Work (cancel, retry, and the controls of a running attempt).
//!
//! - `sched.route_trace`: how every route of a scope would decide a hypothetical
//!   event ([`RouteTraceRequest`] → [`RouteTrace`]), writing nothing;
//! - `sched.status`: what the router has done, the configuration generation it routes
//!   by, the route handlers it knows, and the Work it runs ([`SchedStatus`]);
//! - `sched.cancel`: cancel a Work, stopping its running attempt first when it runs on
//!   the answering host ([`CancelRequest`] → [`CancelResult`]);
//! - `sched.retry`: run a Work again ([`RetryRequest`] → [`RetryResult`]);
//! - `sched.interrupt`, `sched.stop`, `sched.inject`: the executor's control of the
//!   Work's running attempt (`conflict` when it has none).

use std::collections::HashMap;

use crate::store::RouteOutcome;
use protocol::wire::Payload;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// `sched.route_trace`: how the routes of `scope_id` would decide `event`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RouteTraceRequest {
    /// The scope whose routes are asked.
    pub scope_id: String,
    /// The hypothetical event.
    pub event: TraceEvent,
}

/// The event a route trace asks about.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TraceEvent {
    /// Its type.
    #[serde(rename = "type")]
    pub event_type: String,
    /// Its source.
    #[serde(default)]
    pub source: String,
    /// Its correlation keys.
    #[serde(default)]
    pub keys: Vec<String>,
    /// Its payload (schema and data).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub payload: Option<Payload>,
}

/// One route's verdict on an event.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RouteVerdict {
    /// The route handler (`toolbelt` for Work an agent asked for; empty for an event
    /// a Work's Wait is for).
    pub handler: String,
    /// The route's binding.
    pub binding: String,
    /// Whether it matched.
    pub matched: bool,
    /// Why.
    pub reason: String,
}

/// What the routes decided for an event (the answer of `sched.route_trace`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RouteTrace {
    /// Every route asked, in order.
    pub records: Vec<RouteVerdict>,
    /// The decision, as `store.route_decide` would record it.
    pub outcome: RouteOutcome,
}

/// `sched.status`: no fields.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StatusRequest {}

/// What the router has done since schedulerd started.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RouterStats {
    /// Events routed to Work.
    pub routed: u64,
    /// Of them, those that created their Work.
    pub created: u64,
    /// Events no route took.
    pub unmatched: u64,
    /// The last event routed.
    pub last_seq: i64,
    /// Why the last pass stopped early, if it did.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub blocked: String,
}

/// The answer of `sched.status`.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct SchedStatus {
    /// What the router has done.
    pub router: RouterStats,
    /// The hash of the configuration generation it routes by (none applied: null).
    #[serde(default)]
    pub generation: Option<String>,
    /// Route handler → the extension declaring it.
    #[serde(default)]
    pub handlers: HashMap<String, String>,
    /// Work whose attempt this host observes now → its pool (`""` or `jobs`).
    #[serde(default)]
    pub running: HashMap<String, String>,
    /// Work that cannot start → why.
    #[serde(default)]
    pub blocked: HashMap<String, String>,
}

/// `sched.cancel`: cancel a Work, stopping its running attempt first.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CancelRequest {
    /// The Work.
    pub work_id: String,
    /// Why (at most the store's reason limit, 2048 bytes).
    #[serde(default)]
    pub reason: String,
}

/// What a cancel did to the Work's running attempt.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AttemptStop {
    /// The attempt's execution.
    pub execution_id: String,
    /// The host it runs on.
    pub host: String,
    /// True when nothing of the run is left (the executor's physical-stop evidence);
    /// false when it may still be running.
    pub stopped: bool,
    /// What the executor said, or why it was not asked.
    pub detail: String,
}

/// The answer of `sched.cancel`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CancelResult {
    /// The Work.
    pub work_id: String,
    /// Its state now (`cancelled`).
    pub state: String,
    /// The Work's epoch now (bumped: its attempt's writes are refused).
    pub epoch: i64,
    /// The execution that was running or waiting.
    #[serde(default)]
    pub execution_id: Option<String>,
    /// The active Wait it cancelled.
    #[serde(default)]
    pub wait_id: Option<String>,
    /// What became of the running attempt; null when none ran.
    #[serde(default)]
    pub attempt: Option<AttemptStop>,
}

/// `sched.retry`: run a Work again (`store.work_retry`).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RetryRequest {
    /// The Work.
    pub work_id: String,
    /// Why (at most the store's reason limit, 2048 bytes).
    #[serde(default)]
    pub reason: String,
    /// The input to run on (the retry action's Event); its latest when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seq: Option<i64>,
}

/// The answer of `sched.retry`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RetryResult {
    /// The Work.
    pub work_id: String,
    /// Its state now (`pending`).
    pub state: String,
    /// Its state before.
    pub was: String,
    /// The inputs its next attempt takes, by sequence.
    pub inputs: Vec<i64>,
}

/// `sched.interrupt`: interrupt the Work's running attempt (`executor.interrupt`).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InterruptRequest {
    /// The Work.
    pub work_id: String,
    /// Why (the executor keeps it on the attempt's result).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub reason: String,
}

/// `sched.stop`: stop the Work's running attempt (`executor.stop`).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StopRequest {
    /// The Work.
    pub work_id: String,
    /// Why (for the operator's record; the executor is not told).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub reason: String,
}

/// The answer of `sched.interrupt` and `sched.stop`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ControlResult {
    /// The running attempt's execution.
    pub execution_id: String,
    /// Its epoch.
    pub epoch: i64,
    /// The executor's answer, as it gave it.
    pub answer: Value,
}

/// `sched.inject`: inject input into the Work's running attempt, each as its own
/// `executor.inject`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InjectRequest {
    /// The Work.
    pub work_id: String,
    /// Events, or IDs of the Work's input events (one, or a list of at most 100).
    #[serde(default, skip_serializing_if = "Value::is_null")]
    pub inputs: Value,
}

/// The answer of `sched.inject`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct InjectResult {
    /// The running attempt's execution.
    pub execution_id: String,
    /// Its epoch.
    pub epoch: i64,
    /// The executor's answer to each injection, in order.
    pub answers: Vec<Value>,
}

/// `sched.metrics`: no fields; answers the daemon's samples ([`crate::metrics`]).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct MetricsRequest {}

crate::methods! {
    "sched.route_trace": RouteTraceRequest => RouteTrace,
    "sched.metrics": MetricsRequest => crate::metrics::MetricsText,
    "sched.status": StatusRequest => SchedStatus,
    "sched.cancel": CancelRequest => CancelResult,
    "sched.retry": RetryRequest => RetryResult,
    "sched.interrupt": InterruptRequest => ControlResult,
    "sched.stop": StopRequest => ControlResult,
    "sched.inject": InjectRequest => InjectResult,
}
