//! The event log: accepting events (a batch as one atomic unit; one derived event
//! with KV records), ingress checkpoints, and the reads of the log.
//!
//! Identity (spec, "Event payload schema evolution"): an event's delivery identity
//! (source, delivery_id) and observation identity (source, item, item_version) are
//! bound to a canonical signature of its envelope. The same identity with the same
//! signature is the same event (answered, nothing added); with another signature
//! it is `conflict`, and the whole batch applies nothing. The signature of an event
//! with a delivery_id leaves its item and item_version out, so an observation that
//! names a delivery (a webhook delivery read back by reconcile) and that delivery
//! arriving live are one event, whichever comes first.
//!
//! An event with a delivery_id is named `evt_` + the first 32 hex digits of
//! sha256(source "\n" delivery_id) (the spec's EmittedEventID), so a transaction's
//! own records can name it before it commits; any other gets a random ID.
//!
//! A derived event (with a parent) takes its parent's scope and root, one more
//! than its parent's depth; the chain's depth and per-minute count are bounded
//! (`causal_limit`, naming the bound).

use crate::db::Store;
use crate::error::StoreError;
use crate::kv::{KvCheckItem, KvDeleteItem, KvPutItem};
use serde::{Deserialize, Serialize};
use serde_json::Value;

mod accept;
mod checkpoints;
mod reads;

pub use accept::*;
pub use checkpoints::*;
pub use reads::*;

/// The longest scope, type, source, delivery ID, item, item version, schema,
/// parent, execution, occurred_at, checkpoint source or generation.
pub const MAX_FIELD_BYTES: usize = 1024;
/// The most correlation keys one event carries.
pub const MAX_KEYS_PER_EVENT: usize = 256;
/// The page size of the reads when the request names none.
pub const DEFAULT_PAGE: usize = 100;
/// The most payload bytes one page of `store.events` or `store.work_events` carries
/// (at least one event): a page stays within the bus's 64 MiB message even when one
/// event is as large as the largest webhook body.
pub const MAX_EVENTS_PAGE_BYTES: usize = 8 * 1024 * 1024;
/// The window of the per-chain derivation rate, in ms.
pub const DERIVED_WINDOW_MS: i64 = 60_000;

// ---------------------------------------------------------------------------
// Requests and responses

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

// ---------------------------------------------------------------------------
// Accepting

/// Who is accepting: an extension's identity, or (owner `None`) a trusted daemon.
#[derive(Debug, Clone, Copy, Default)]
pub struct AcceptContext<'a> {
    /// The extension; `None` skips the family and namespace checks.
    pub owner: Option<&'a str>,
    /// Its declared families.
    pub families: &'a [String],
    /// Its configured scopes, when they bound what it may touch.
    pub scopes: Option<&'a [String]>,
}

// The store's methods and the bus dispatch.
impl Store {
    /// `store.events_accept`.
    pub async fn events_accept(
        &self,
        req: EventsAcceptRequest,
    ) -> Result<EventsAcceptResponse, StoreError> {
        let limits = self.limits().clone();
        // The batch's root events are checked and signed here, so the writer
        // thread, which every write waits for, runs only the statements.
        let ready = presign(&limits, &req);
        self.write_repeatable(move |conn| accept_events(conn, &limits, &req, &ready))
            .await
    }

    /// `store.event_accept_derived`.
    pub async fn event_accept_derived(
        &self,
        req: EventAcceptDerivedRequest,
    ) -> Result<AcceptedEvent, StoreError> {
        let limits = self.limits().clone();
        self.write(move |conn| event_accept_derived(conn, &limits, &req))
            .await
    }

    /// `store.checkpoint_get`.
    pub async fn checkpoint_get(
        &self,
        req: CheckpointGetRequest,
    ) -> Result<CheckpointGetResponse, StoreError> {
        self.read(move |conn| checkpoint_get(conn, &req)).await
    }

    /// `store.checkpoint_set`.
    pub async fn checkpoint_set(
        &self,
        req: CheckpointSetRequest,
    ) -> Result<CheckpointSetResponse, StoreError> {
        let limits = self.limits().clone();
        self.write(move |conn| checkpoint_set(conn, &limits, &req))
            .await
    }

    /// `store.event`.
    pub async fn event(&self, req: EventGetRequest) -> Result<EventGetResponse, StoreError> {
        let limits = self.limits().clone();
        self.read(move |conn| event_get(conn, &limits, &req)).await
    }

    /// `store.events`.
    pub async fn events(&self, req: EventsListRequest) -> Result<EventsPageResponse, StoreError> {
        let limits = self.limits().clone();
        self.read(move |conn| events_list(conn, &limits, &req))
            .await
    }

    /// `store.work_events`.
    pub async fn work_events(
        &self,
        req: WorkEventsRequest,
    ) -> Result<EventsPageResponse, StoreError> {
        let limits = self.limits().clone();
        self.read(move |conn| work_events(conn, &limits, &req))
            .await
    }

    /// `store.sequence`.
    pub async fn sequence(&self, _req: SequenceRequest) -> Result<SequenceResponse, StoreError> {
        self.read(sequence).await
    }
}

crate::store_methods! {
    "store.events_accept" => events_accept,
    "store.event_accept_derived" => event_accept_derived,
    "store.checkpoint_get" => checkpoint_get,
    "store.checkpoint_set" => checkpoint_set,
    "store.event" => event,
    "store.events" => events,
    "store.work_events" => work_events,
    "store.sequence" => sequence,
}

fn too_long(what: &str, s: &str, max: usize, name: &str) -> Result<(), StoreError> {
    if s.len() > max {
        return Err(StoreError::invalid(format!(
            "{what} is {} bytes, over {name} ({max})",
            s.len()
        )));
    }
    Ok(())
}
