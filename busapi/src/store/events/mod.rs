//! The wire types of `events` (moved from storaged).

use crate::store::kv::{KvCheckItem, KvDeleteItem, KvPutItem};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// One event to accept.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EventInput {
    /// The scope it is accepted into. A derived event may leave it empty and takes
    /// its parent's; when given it must be the parent's.
    #[serde(default)]
    pub scope_id: String,
    /// The event type.
    #[serde(rename = "type")]
    pub event_type: String,
    /// The source (`github`, `schedule/runs`).
    pub source: String,
    /// The delivery ID within the source: the delivery identity.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delivery_id: Option<String>,
    /// The observed item: with `item_version`, the observation identity.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub item: Option<String>,
    /// The observed item's version.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub item_version: Option<String>,
    /// The payload schema (`<base>.v<N>`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schema: Option<String>,
    /// The payload data.
    #[serde(default)]
    pub payload: Value,
    /// Correlation keys.
    #[serde(default)]
    pub keys: Vec<String>,
    /// When it happened at the source (RFC 3339 text).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub occurred_at: Option<String>,
    /// The event it derives from; absent for a root.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent_id: Option<String>,
    /// The execution that caused it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub execution_id: Option<String>,
    /// The payload is a snapshot of the change `delivery_id` names
    /// (`IngressEvent::snapshot`): another envelope under that delivery ID is this
    /// event again (`added: false`), not a conflict.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub snapshot: bool,
}

/// `store.events_accept`: a batch of events as one atomic unit.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EventsAcceptRequest {
    /// The events, at most max_batch.
    pub events: Vec<EventInput>,
    /// The extension the events come from (set by extrunner): every type must be of
    /// `families` and under its name, every source its own.
    #[serde(default)]
    pub owner: Option<String>,
    /// The owner's declared families.
    #[serde(default)]
    pub families: Option<Vec<String>>,
    /// The scopes the owner is configured in: when given, a root event must be of
    /// one of them and a derived one's parent in one of them.
    #[serde(default)]
    pub scopes: Option<Vec<String>>,
}

/// One accepted event.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AcceptedEvent {
    /// Its ID.
    pub id: String,
    /// Its sequence in the log.
    pub seq: i64,
    /// True when this call added it; false when it was already accepted.
    pub added: bool,
}

/// Each event's outcome, in order.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct EventsAcceptResponse {
    /// One per event.
    pub events: Vec<AcceptedEvent>,
    /// True when any event was added (publish `event.accepted`).
    pub added_any: bool,
}

/// `store.event_accept_derived` (the spec's `event.accept`): one derived event,
/// with KV checks, puts and deletes committed together with it.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EventAcceptDerivedRequest {
    /// The extension the call is made for; required with any KV check or record.
    #[serde(default)]
    pub owner: Option<String>,
    /// The owner's declared families.
    #[serde(default)]
    pub families: Option<Vec<String>>,
    /// The owner's configured scopes: when given, the parent must be in one.
    #[serde(default)]
    pub scopes: Option<Vec<String>>,
    /// The event; `parent_id` is required.
    pub event: EventInput,
    /// Preconditions, applied when the event is new.
    #[serde(default)]
    pub checks: Vec<KvCheckItem>,
    /// Records written with a newly added event.
    #[serde(default)]
    pub puts: Vec<KvPutItem>,
    /// Records deleted with a newly added event.
    #[serde(default)]
    pub deletes: Vec<KvDeleteItem>,
}

/// `store.checkpoint_get`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CheckpointGetRequest {
    /// The ingress source.
    pub source: String,
}

/// The stored checkpoint, or nothing.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct CheckpointGetResponse {
    /// The checkpoint.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checkpoint: Option<String>,
    /// Its generation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub generation: Option<String>,
    /// When it was set (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub updated_at: Option<String>,
}

/// `store.checkpoint_set`: store a checkpoint, with an optional precondition on the
/// stored one: `expect` (it must be this checkpoint) or `expect_absent` (there
/// must be none). Neither: unconditional.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CheckpointSetRequest {
    /// The ingress source.
    pub source: String,
    /// The new checkpoint.
    pub checkpoint: String,
    /// Its generation.
    #[serde(default)]
    pub generation: String,
    /// The checkpoint that must be stored now.
    #[serde(default)]
    pub expect: Option<String>,
    /// No checkpoint may be stored now.
    #[serde(default)]
    pub expect_absent: bool,
}

/// The checkpoint replaced, if any.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct CheckpointSetResponse {
    /// The checkpoint stored before.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub previous: Option<String>,
}

/// `store.event`: one event by ID.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EventGetRequest {
    /// The event ID.
    pub id: String,
    /// When given, an event outside these scopes is `not_found`.
    #[serde(default)]
    pub scopes: Option<Vec<String>>,
}

/// An accepted event with its whole envelope.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StoredEvent {
    /// Its ID.
    pub id: String,
    /// Its sequence.
    pub seq: i64,
    /// The scope it was accepted into (empty when none was recorded).
    pub scope_id: String,
    /// The type.
    #[serde(rename = "type")]
    pub event_type: String,
    /// The source.
    pub source: String,
    /// The delivery ID.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delivery_id: Option<String>,
    /// The observed item.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub item: Option<String>,
    /// The observed item's version.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub item_version: Option<String>,
    /// The payload schema.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schema: Option<String>,
    /// The payload data.
    #[serde(default)]
    pub payload: Value,
    /// Correlation keys.
    #[serde(default)]
    pub keys: Vec<String>,
    /// The envelope's canonical signature.
    pub signature: String,
    /// The parent; none for a root.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent_id: Option<String>,
    /// The root of its causal chain (its own ID for a root).
    pub root_id: String,
    /// Its causal depth (0 for a root).
    pub depth: i64,
    /// The execution that caused it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub execution_id: Option<String>,
    /// When it happened at the source.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub occurred_at: Option<String>,
    /// When it was accepted (RFC 3339).
    pub accepted_at: String,
}

/// The event.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct EventGetResponse {
    /// The event.
    pub event: StoredEvent,
}

/// `store.events`: the log after a sequence, optionally only some scopes' events
/// (filtered before the limit, so a page is short only at the end of the log).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EventsListRequest {
    /// Only events with a sequence above this one.
    #[serde(default)]
    pub after: i64,
    /// At most this many (0 or absent: 100; at most max_page).
    #[serde(default)]
    pub limit: Option<u32>,
    /// Only events of these scopes (`""` for events with no scope recorded).
    #[serde(default)]
    pub scopes: Option<Vec<String>>,
}

/// A page of events and the cursor of the next.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct EventsPageResponse {
    /// The events, in sequence order.
    pub events: Vec<StoredEvent>,
    /// The `after` of the next page: the last event's sequence, or `after`.
    pub next_after: i64,
}

/// `store.work_events`: one Work's events (routed to it, or naming its keys).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WorkEventsRequest {
    /// The Work.
    pub work_id: String,
    /// Only events with a sequence above this one.
    #[serde(default)]
    pub after: i64,
    /// At most this many (0 or absent: 100; at most max_page).
    #[serde(default)]
    pub limit: Option<u32>,
    /// Only events of these scopes.
    #[serde(default)]
    pub scopes: Option<Vec<String>>,
}

/// `store.sequence`.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SequenceRequest {}

/// The latest accepted event's sequence (0 for an empty log).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct SequenceResponse {
    /// The sequence.
    pub sequence: i64,
}
