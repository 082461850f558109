//! The wire types of `work::routing` (moved from storaged).

use super::*;

/// Why one route decided as it did.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RouteRecordInput {
    /// The route handler.
    #[serde(default)]
    pub handler: String,
    /// The route's binding.
    #[serde(default)]
    pub binding: String,
    /// Whether it matched.
    pub matched: bool,
    /// The handler's reason.
    #[serde(default)]
    pub reason: String,
    /// The Work it named; the first matching record without one gets the routed Work.
    #[serde(default)]
    pub work_id: Option<String>,
    /// Why its display was dropped before it reached the store.
    #[serde(default)]
    pub display_refused: Option<String>,
}

/// What the router decided for the event.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub enum RouteOutcome {
    /// No route matched: the scope's unmatched disposition applies.
    Unmatched {
        /// The disposition (stored as `unmatched:<disposition>`; empty: `unmatched`).
        #[serde(default)]
        disposition: String,
    },
    /// Create a Work, unless one of its keys already names an open Work: then attach.
    Create {
        /// The Work kind.
        kind: String,
        /// The binding it runs on.
        #[serde(default)]
        binding: String,
        /// Its correlation keys.
        #[serde(default)]
        keys: Vec<String>,
        /// Its display (a `WorkDisplay`; dropped, never fatal, when it breaks a limit).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        display: Option<Value>,
        /// Its context (only for a Work this creates).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        context: Option<Value>,
        /// Its grants (only for a Work this creates).
        #[serde(default)]
        grants: Vec<String>,
        /// Close the open Work a key finds (`completed` or `cancelled`) rather than
        /// give it a turn; with none found, nothing is created (`unmatched:closes_nothing`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        close: Option<String>,
    },
    /// Attach the event to a Work.
    Attach {
        /// The Work.
        work_id: String,
        /// A display replacing the Work's (dropped, never fatal, when it breaks a limit).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        display: Option<Value>,
        /// Wake this active Wait of the Work with the event, in the same unit.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        wake: Option<String>,
    },
}

/// `store.route_decide`: record a routing decision for one event.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RouteDecideRequest {
    /// The event's sequence.
    pub seq: i64,
    /// The event's scope (must be the one it was accepted into).
    pub scope_id: String,
    /// Why, one record per route asked, in order.
    #[serde(default)]
    pub records: Vec<RouteRecordInput>,
    /// The decision.
    pub outcome: RouteOutcome,
}

/// Result of `store.route_decide`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RouteDecideResponse {
    /// The Work the event went to (none when unmatched).
    #[serde(default)]
    pub work_id: Option<String>,
    /// Whether the Work was created by this decision.
    pub created: bool,
    /// The Work's state after the decision.
    #[serde(default)]
    pub work_state: Option<String>,
    /// Why the outcome's display was dropped.
    #[serde(default)]
    pub display_refused: Option<String>,
    /// The Wait this decision woke.
    #[serde(default)]
    pub woke: Option<String>,
}

/// `store.route_decide_many`: several routing decisions in one write, in order,
/// each as `store.route_decide` records it. A refused one refuses the batch (its
/// error names its index) and nothing of it is recorded: the router then decides
/// those events one by one. The router sends its runs of decisions that change no
/// Work (unmatched events), one message and one write for many events.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RouteDecideManyRequest {
    /// The decisions, at most `max_batch`.
    pub decisions: Vec<RouteDecideRequest>,
}

/// Result of `store.route_decide_many`: each decision's result, in order.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RouteDecideManyResponse {
    /// One per decision.
    pub decided: Vec<RouteDecideResponse>,
}

/// `store.unrouted`: accepted events not routed yet, in sequence order.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UnroutedRequest {
    /// Only events after this sequence.
    #[serde(default)]
    pub after: i64,
    /// At most this many (0: the default; at most `max_page`).
    #[serde(default)]
    pub limit: u32,
}

/// An event waiting for the router.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct UnroutedEvent {
    /// Its sequence.
    pub seq: i64,
    /// Its ID.
    pub id: String,
    /// Its scope.
    pub scope_id: String,
    /// Its type.
    #[serde(rename = "type")]
    pub event_type: String,
    /// Its source.
    pub source: String,
    /// Its correlation keys.
    #[serde(default)]
    pub keys: Vec<String>,
    /// Its payload, as kept (passed on as text: the store does not read it).
    pub payload: Box<serde_json::value::RawValue>,
    /// Its parent's ID, for a derived event.
    #[serde(default)]
    pub parent_id: Option<String>,
    /// Its causal root.
    pub root_id: String,
    /// Its causal depth.
    pub depth: i64,
    /// When it was accepted (ms).
    pub accepted_ms: i64,
    /// Its payload schema.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schema: Option<String>,
    /// Its delivery ID.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delivery_id: Option<String>,
    /// When it happened at the source.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub occurred_at: Option<String>,
    /// When it was accepted (RFC 3339).
    #[serde(default)]
    pub accepted_at: String,
    /// The execution that caused it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub execution_id: Option<String>,
}

/// Result of `store.unrouted`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct UnroutedResponse {
    /// The events.
    pub events: Vec<UnroutedEvent>,
    /// The cursor for the next page (the last sequence read, or `after`).
    pub next: i64,
    /// Whether more may follow: the page stopped at its limit or its byte bound.
    /// False when the page holds every unrouted event after `after` there was.
    pub more: bool,
}

/// `store.routing`: why an event went where it went.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RoutingRequest {
    /// The event's sequence.
    pub seq: i64,
}

/// One route's verdict on an event, as recorded.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RouteRecord {
    /// The route's index in its scope.
    pub idx: i64,
    /// The route handler.
    pub handler: String,
    /// The route's binding.
    pub binding: String,
    /// Whether it matched.
    pub matched: bool,
    /// The Work it went to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub work_id: Option<String>,
    /// The handler's reason.
    pub reason: String,
    /// Why its display was dropped.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub display_refused: Option<String>,
}

/// Result of `store.routing`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RoutingResponse {
    /// The event's sequence.
    pub seq: i64,
    /// The decision (`routed`, `unmatched`, `unmatched:<disposition>`, …); none while
    /// the event waits for the router.
    #[serde(default)]
    pub disposition: Option<String>,
    /// When it was decided.
    #[serde(default)]
    pub routed_at: Option<String>,
    /// Each route asked, in order.
    pub records: Vec<RouteRecord>,
}
