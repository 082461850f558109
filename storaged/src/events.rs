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

use crate::db::{Limits, Store};
use crate::error::StoreError;
use crate::kv::{self, KvCheckItem, KvDeleteItem, KvPutItem};
use crate::sql::{params, params_from_iter, Backend, Connection, OptionalExtension};
use crate::util;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::{Digest, Sha256};
use std::collections::BTreeSet;

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

/// The spec's EmittedEventID: `evt_` + the first 32 hex digits of
/// sha256(source "\n" delivery_id).
pub fn emitted_event_id(source: &str, delivery_id: &str) -> String {
    let mut h = Sha256::new();
    h.update(source.as_bytes());
    h.update(b"\n");
    h.update(delivery_id.as_bytes());
    let mut out = String::with_capacity(36);
    out.push_str("evt_");
    util::push_hex(&mut out, &h.finalize()[..16]);
    out
}

/// The parts of an event's envelope its signature covers.
struct Envelope<'a> {
    scope_id: &'a str,
    event_type: &'a str,
    source: &'a str,
    delivery_id: Option<&'a str>,
    item: Option<&'a str>,
    item_version: Option<&'a str>,
    schema: Option<&'a str>,
    keys: &'a [String],
    parent_id: Option<&'a str>,
}

/// The signature of an envelope whose payload encodes as `payload_text` (the
/// compact encoding of a JSON value, whose objects' keys are in order: canonical
/// already). The text hashed is the canonical JSON of the envelope object
/// (`util::canonical`): its keys in byte order, written here in that order rather
/// than built as a tree and sorted for each event.
fn signature(e: &Envelope<'_>, payload_text: &str) -> String {
    fn text(out: &mut Vec<u8>, s: Option<&str>) {
        match s {
            // Writing a string into a Vec cannot fail.
            Some(s) => {
                let _ = serde_json::to_writer(&mut *out, s);
            }
            None => out.extend_from_slice(b"null"),
        }
    }
    let mut out = Vec::with_capacity(256 + payload_text.len());
    out.extend_from_slice(b"{\"delivery_id\":");
    text(&mut out, e.delivery_id);
    out.extend_from_slice(b",\"item\":");
    text(&mut out, e.item);
    out.extend_from_slice(b",\"item_version\":");
    text(&mut out, e.item_version);
    out.extend_from_slice(b",\"keys\":[");
    for (i, k) in e.keys.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        text(&mut out, Some(k));
    }
    out.extend_from_slice(b"],\"parent_id\":");
    text(&mut out, e.parent_id);
    out.extend_from_slice(b",\"payload\":");
    out.extend_from_slice(payload_text.as_bytes());
    out.extend_from_slice(b",\"schema\":");
    text(&mut out, e.schema);
    out.extend_from_slice(b",\"scope_id\":");
    text(&mut out, Some(e.scope_id));
    out.extend_from_slice(b",\"source\":");
    text(&mut out, Some(e.source));
    out.extend_from_slice(b",\"type\":");
    text(&mut out, Some(e.event_type));
    out.push(b'}');
    util::digest(&out)
}

fn nonempty(s: &Option<String>) -> Option<String> {
    s.as_ref().filter(|s| !s.is_empty()).cloned()
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

struct Parent {
    root_id: String,
    depth: i64,
}

/// An event checked and resolved, ready to insert unless it already exists.
struct Prepared {
    ev: EventInput,
    payload_text: String,
    signature: String,
    parent: Option<Parent>,
    existing: Option<AcceptedEvent>,
}

fn family_declared(families: &[String], t: &str) -> bool {
    families.iter().any(|f| {
        !f.is_empty()
            && (t == f
                || t.strip_prefix(f.as_str())
                    .is_some_and(|rest| rest.starts_with('.')))
    })
}

fn check_owner_rules(ctx: &AcceptContext<'_>, ev: &EventInput) -> Result<(), StoreError> {
    let Some(owner) = ctx.owner else {
        return Ok(());
    };
    kv::check_owner(owner)?;
    let t = ev.event_type.as_str();
    if !family_declared(ctx.families, t) {
        return Err(StoreError::Undeclared(format!(
            "event type {t:?} is not of a family {owner:?} declared"
        )));
    }
    let own_type = t == owner
        || t.strip_prefix(owner)
            .and_then(|r| r.strip_prefix('.'))
            .is_some_and(|r| !r.is_empty());
    if !own_type {
        return Err(StoreError::Unauthorized(format!(
            "event type {t:?} is not under {owner:?}"
        )));
    }
    let s = ev.source.as_str();
    let own_source = s == owner
        || s.strip_prefix(owner)
            .and_then(|r| r.strip_prefix('/'))
            .is_some_and(|r| !r.is_empty());
    if !own_source {
        return Err(StoreError::Unauthorized(format!(
            "source {s:?} is not {owner:?}'s (only {owner:?} or \"{owner}/…\")"
        )));
    }
    Ok(())
}

/// Check an event and make its envelope; with `lookup`, also find an event
/// already kept under its identity (else the insert's conflict finds it).
fn prepare(
    conn: &Connection,
    limits: &Limits,
    input: &EventInput,
    ctx: &AcceptContext<'_>,
    lookup: bool,
) -> Result<Prepared, StoreError> {
    let mut ev = EventInput {
        scope_id: input.scope_id.clone(),
        event_type: input.event_type.clone(),
        source: input.source.clone(),
        delivery_id: nonempty(&input.delivery_id),
        item: nonempty(&input.item),
        item_version: nonempty(&input.item_version),
        schema: nonempty(&input.schema),
        // The payload stays where it is (it may be 25 MiB): it is read from `input`.
        payload: Value::Null,
        keys: input.keys.clone(),
        occurred_at: nonempty(&input.occurred_at),
        parent_id: nonempty(&input.parent_id),
        execution_id: nonempty(&input.execution_id),
    };
    // Bounds.
    if ev.event_type.is_empty() {
        return Err(StoreError::invalid("an event needs a type"));
    }
    if ev.source.is_empty() {
        return Err(StoreError::invalid("an event needs a source"));
    }
    for (what, v) in [
        ("scope_id", Some(&ev.scope_id)),
        ("type", Some(&ev.event_type)),
        ("source", Some(&ev.source)),
        ("delivery_id", ev.delivery_id.as_ref()),
        ("item", ev.item.as_ref()),
        ("item_version", ev.item_version.as_ref()),
        ("schema", ev.schema.as_ref()),
        ("occurred_at", ev.occurred_at.as_ref()),
        ("parent_id", ev.parent_id.as_ref()),
        ("execution_id", ev.execution_id.as_ref()),
    ] {
        if let Some(v) = v {
            too_long(what, v, MAX_FIELD_BYTES, "MAX_FIELD_BYTES")?;
        }
    }
    if ev.item.is_some() != ev.item_version.is_some() {
        return Err(StoreError::invalid(
            "item and item_version go together: the observation identity needs both",
        ));
    }
    if ev.keys.len() > MAX_KEYS_PER_EVENT {
        return Err(StoreError::invalid(format!(
            "an event has {} keys, over MAX_KEYS_PER_EVENT ({MAX_KEYS_PER_EVENT})",
            ev.keys.len()
        )));
    }
    for k in &ev.keys {
        if k.is_empty() {
            return Err(StoreError::invalid("a correlation key must not be empty"));
        }
        too_long(
            "a correlation key",
            k,
            limits.max_key_bytes,
            "max_key_bytes",
        )?;
    }
    let payload_text = serde_json::to_string(&input.payload)
        .map_err(|e| StoreError::invalid(format!("payload: {e}")))?;
    if payload_text.len() > limits.max_payload_bytes {
        return Err(StoreError::invalid(format!(
            "payload is {} bytes, over max_payload_bytes ({})",
            payload_text.len(),
            limits.max_payload_bytes
        )));
    }
    // Authority.
    check_owner_rules(ctx, &ev)?;
    // The parent: an accepted event of the same scope, never revealing another.
    let parent = match &ev.parent_id {
        None => {
            if let Some(scopes) = ctx.scopes {
                if !scopes.contains(&ev.scope_id) {
                    return Err(StoreError::Unauthorized(format!(
                        "scope {:?} is not one the caller is configured in",
                        ev.scope_id
                    )));
                }
            }
            None
        }
        Some(pid) => {
            let row = conn
                .prepare_cached("SELECT scope_id, root_id, depth FROM events WHERE id = ?1")?
                .query_row([pid], |r| {
                    Ok((
                        r.get::<_, String>(0)?,
                        r.get::<_, String>(1)?,
                        r.get::<_, i64>(2)?,
                    ))
                })
                .optional()?;
            let not_found = || StoreError::not_found(format!("parent event {pid} not found"));
            let Some((scope, root_id, depth)) = row else {
                return Err(not_found());
            };
            if !ev.scope_id.is_empty() && ev.scope_id != scope {
                return Err(not_found());
            }
            if let Some(scopes) = ctx.scopes {
                if !scopes.contains(&scope) {
                    return Err(not_found());
                }
            }
            ev.scope_id = scope;
            Some(Parent { root_id, depth })
        }
    };
    // An event with a delivery ID is that delivery whichever way it came: a live
    // delivery, or an observation naming it (a reconcile reading back a missed
    // webhook delivery), so the item it was observed as is not part of its envelope.
    let (item, item_version) = match ev.delivery_id {
        Some(_) => (None, None),
        None => (ev.item.as_ref(), ev.item_version.as_ref()),
    };
    let signature = signature(
        &Envelope {
            scope_id: &ev.scope_id,
            event_type: &ev.event_type,
            source: &ev.source,
            delivery_id: ev.delivery_id.as_deref(),
            item: item.map(String::as_str),
            item_version: item_version.map(String::as_str),
            schema: ev.schema.as_deref(),
            keys: &ev.keys,
            parent_id: ev.parent_id.as_deref(),
        },
        &payload_text,
    );
    // Identity.
    let mut existing: Option<AcceptedEvent> = None;
    if !lookup {
        return Ok(Prepared {
            ev,
            payload_text,
            signature,
            parent,
            existing,
        });
    }
    if let Some(d) = &ev.delivery_id {
        // A delivery's ID is its identity's digest: the unique index on `id` finds it.
        let row = conn
            .prepare_cached("SELECT id, seq, signature FROM events WHERE id = ?1")?
            .query_row([emitted_event_id(&ev.source, d)], |r| {
                Ok((
                    r.get::<_, String>(0)?,
                    r.get::<_, i64>(1)?,
                    r.get::<_, String>(2)?,
                ))
            })
            .optional()?;
        if let Some((id, seq, sig)) = row {
            if sig != signature {
                return Err(StoreError::conflict(format!(
                    "delivery ({}, {d}) was accepted as {id} with a different envelope",
                    ev.source
                )));
            }
            existing = Some(AcceptedEvent {
                id,
                seq,
                added: false,
            });
        }
    }
    if let (Some(item), Some(version)) = (&ev.item, &ev.item_version) {
        let row = conn
            .prepare_cached(
                "SELECT id, seq, signature FROM events
                 WHERE source = ?1 AND item = ?2 AND item_version = ?3",
            )?
            .query_row(params![ev.source, item, version], |r| {
                Ok((
                    r.get::<_, String>(0)?,
                    r.get::<_, i64>(1)?,
                    r.get::<_, String>(2)?,
                ))
            })
            .optional()?;
        if let Some((id, seq, sig)) = row {
            if sig != signature || existing.as_ref().is_some_and(|e| e.id != id) {
                return Err(StoreError::conflict(format!(
                    "observation ({}, {item}, {version}) was accepted as {id} with a different envelope",
                    ev.source
                )));
            }
            existing = Some(AcceptedEvent {
                id,
                seq,
                added: false,
            });
        }
    }
    Ok(Prepared {
        ev,
        payload_text,
        signature,
        parent,
        existing,
    })
}

/// Check a new derived event against its chain's bounds; then insert the event and
/// its keys. Nothing is written when a bound refuses it, and nothing (`None`)
/// when an event is already kept under its identity.
fn insert(
    conn: &Connection,
    limits: &Limits,
    p: Prepared,
    now_ms: i64,
) -> Result<Option<AcceptedEvent>, StoreError> {
    let Prepared {
        ev,
        payload_text,
        signature,
        parent,
        ..
    } = p;
    let id = match &ev.delivery_id {
        Some(d) => emitted_event_id(&ev.source, d),
        None => util::new_id("evt"),
    };
    let (root_id, depth) = match parent {
        None => (id.clone(), 0),
        Some(parent) => {
            let depth = parent.depth + 1;
            if depth > limits.max_causal_depth {
                return Err(StoreError::CausalLimit(format!(
                    "causal chain {}: depth {depth} is over max_causal_depth ({})",
                    parent.root_id, limits.max_causal_depth
                )));
            }
            let recent: i64 = conn
                .prepare_cached(
                    "SELECT count(*) FROM events
                     WHERE root_id = ?1 AND accepted_ms > ?2 AND depth > 0",
                )?
                .query_row(params![parent.root_id, now_ms - DERIVED_WINDOW_MS], |r| {
                    r.get(0)
                })?;
            if recent >= limits.max_derived_per_minute {
                return Err(StoreError::CausalLimit(format!(
                    "causal chain {}: {recent} events derived in the last minute, at max_derived_per_minute ({})",
                    parent.root_id, limits.max_derived_per_minute
                )));
            }
            (parent.root_id, depth)
        }
    };
    let keys_text = serde_json::to_string(&ev.keys)
        .map_err(|e| StoreError::Internal(format!("encode keys: {e}")))?;
    // An identity already kept (the unique ID, which for a delivery is its
    // identity's digest, or the observation's unique index) inserts nothing.
    let seq: Option<i64> = conn
        .prepare_cached(
            "INSERT INTO events (id, scope_id, type, source, delivery_id, item, item_version,
             schema, payload, keys, signature, parent_id, root_id, depth, execution_id,
             occurred_at, accepted_at, accepted_ms)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18)
         ON CONFLICT DO NOTHING
         RETURNING seq",
        )?
        .query_row(
            params![
                id,
                ev.scope_id,
                ev.event_type,
                ev.source,
                ev.delivery_id,
                ev.item,
                ev.item_version,
                ev.schema,
                payload_text,
                keys_text,
                signature,
                ev.parent_id,
                root_id,
                depth,
                ev.execution_id,
                ev.occurred_at,
                util::rfc3339(now_ms),
                now_ms,
            ],
            |r| r.get(0),
        )
        .optional()?;
    let Some(seq) = seq else {
        return Ok(None);
    };
    conn.prepare_cached("INSERT INTO unrouted (seq) VALUES (?1)")?
        .execute([seq])?;
    let mut key_stmt = conn.prepare_cached(
        "INSERT INTO event_keys (key, seq) VALUES (?1, ?2) ON CONFLICT DO NOTHING",
    )?;
    for k in &ev.keys {
        key_stmt.execute(params![k, seq])?;
    }
    Ok(Some(AcceptedEvent {
        id,
        seq,
        added: true,
    }))
}

/// Accept one event: the existing one for a known identity with the same
/// envelope, `conflict` for a changed one, or a new one. A derived event over its
/// chain's bounds is `causal_limit`, and nothing is written for it.
pub fn accept_event(
    conn: &Connection,
    limits: &Limits,
    ev: &EventInput,
    ctx: &AcceptContext<'_>,
    now_ms: i64,
) -> Result<AcceptedEvent, StoreError> {
    // A root event (an ingress delivery, the common case) is inserted first
    // and looked up only when its identity is already kept: one statement for a
    // new one. A derived event is looked up first, so that a replay of one is
    // never refused by its chain's bounds.
    let root = nonempty(&ev.parent_id).is_none();
    let p = prepare(conn, limits, ev, ctx, !root)?;
    if let Some(existing) = p.existing.clone() {
        return Ok(existing);
    }
    if let Some(added) = insert(conn, limits, p, now_ms)? {
        return Ok(added);
    }
    kept_already(conn, limits, ev, ctx)
}

/// The event kept under `ev`'s identity (`conflict` when its envelope differs).
fn kept_already(
    conn: &Connection,
    limits: &Limits,
    ev: &EventInput,
    ctx: &AcceptContext<'_>,
) -> Result<AcceptedEvent, StoreError> {
    prepare(conn, limits, ev, ctx, true)?
        .existing
        .ok_or_else(|| {
            StoreError::Internal("an event's identity conflicted, but no event holds it".into())
        })
}

/// `store.events_accept`: the whole batch, or (on any refusal) an error; the caller
/// runs it inside one write, so a refusal writes nothing.
pub fn accept_events(
    conn: &Connection,
    limits: &Limits,
    req: &EventsAcceptRequest,
) -> Result<EventsAcceptResponse, StoreError> {
    if req.events.len() > limits.max_batch {
        return Err(StoreError::invalid(format!(
            "the batch has {} events, over max_batch ({})",
            req.events.len(),
            limits.max_batch
        )));
    }
    let families = req.families.clone().unwrap_or_default();
    let ctx = AcceptContext {
        owner: req.owner.as_deref(),
        families: &families,
        scopes: req.scopes.as_deref(),
    };
    let now_ms = util::now_ms();
    let mut out = EventsAcceptResponse::default();
    for (i, ev) in req.events.iter().enumerate() {
        let a = accept_event(conn, limits, ev, &ctx, now_ms).map_err(|e| at(i, e))?;
        out.added_any |= a.added;
        out.events.push(a);
    }
    Ok(out)
}

/// Prefix an error's message with the index of the event it refers to.
pub(crate) fn at(i: usize, e: StoreError) -> StoreError {
    match e {
        StoreError::NotFound(m) => StoreError::NotFound(format!("events[{i}]: {m}")),
        StoreError::Conflict(m) => StoreError::Conflict(format!("events[{i}]: {m}")),
        StoreError::Invalid(m) => StoreError::Invalid(format!("events[{i}]: {m}")),
        StoreError::Unauthorized(m) => StoreError::Unauthorized(format!("events[{i}]: {m}")),
        StoreError::Undeclared(m) => StoreError::Undeclared(format!("events[{i}]: {m}")),
        StoreError::CausalLimit(m) => StoreError::CausalLimit(format!("events[{i}]: {m}")),
        other => other,
    }
}

/// `store.event_accept_derived`: one derived event; when it is new, its KV checks
/// hold and its records commit with it. An already accepted identical event is
/// answered (`added: false`) and its records are not applied again.
pub fn event_accept_derived(
    conn: &Connection,
    limits: &Limits,
    req: &EventAcceptDerivedRequest,
) -> Result<AcceptedEvent, StoreError> {
    if nonempty(&req.event.parent_id).is_none() {
        return Err(StoreError::invalid(
            "event.parent_id is required: event.accept only derives",
        ));
    }
    let has_kv = !(req.checks.is_empty() && req.puts.is_empty() && req.deletes.is_empty());
    let items = 1 + req.checks.len() + req.puts.len() + req.deletes.len();
    if items > limits.max_batch {
        return Err(StoreError::invalid(format!(
            "the batch has {items} items, over max_batch ({})",
            limits.max_batch
        )));
    }
    let owner = req.owner.as_deref();
    if has_kv {
        let Some(owner) = owner else {
            return Err(StoreError::invalid(
                "KV checks and records need the owner whose namespaces they address",
            ));
        };
        kv::validate_ops(limits, owner, &req.checks, &req.puts, &req.deletes)?;
    }
    let families = req.families.clone().unwrap_or_default();
    let ctx = AcceptContext {
        owner,
        families: &families,
        scopes: req.scopes.as_deref(),
    };
    let p = prepare(conn, limits, &req.event, &ctx, true)?;
    if let Some(existing) = p.existing.clone() {
        return Ok(existing);
    }
    if let Some(owner) = owner.filter(|_| has_kv) {
        kv::apply_checks(conn, owner, &req.checks)?;
    }
    let accepted = match insert(conn, limits, p, util::now_ms())? {
        Some(a) => a,
        None => kept_already(conn, limits, &req.event, &ctx)?,
    };
    if let Some(owner) = owner.filter(|_| has_kv) {
        kv::apply_writes(conn, limits, owner, &req.puts, &req.deletes)?;
    }
    Ok(accepted)
}

// ---------------------------------------------------------------------------
// Checkpoints

/// `store.checkpoint_get`.
pub fn checkpoint_get(
    conn: &Connection,
    req: &CheckpointGetRequest,
) -> Result<CheckpointGetResponse, StoreError> {
    too_long("source", &req.source, MAX_FIELD_BYTES, "MAX_FIELD_BYTES")?;
    let row = conn
        .prepare_cached(
            "SELECT checkpoint, generation, updated_at FROM checkpoints WHERE source = ?1",
        )?
        .query_row([&req.source], |r| {
            Ok((
                r.get::<_, String>(0)?,
                r.get::<_, String>(1)?,
                r.get::<_, String>(2)?,
            ))
        })
        .optional()?;
    Ok(match row {
        None => CheckpointGetResponse::default(),
        Some((checkpoint, generation, updated_at)) => CheckpointGetResponse {
            checkpoint: Some(checkpoint),
            generation: Some(generation),
            updated_at: Some(updated_at),
        },
    })
}

/// `store.checkpoint_set`: a failed precondition is `conflict`.
pub fn checkpoint_set(
    conn: &Connection,
    limits: &Limits,
    req: &CheckpointSetRequest,
) -> Result<CheckpointSetResponse, StoreError> {
    if req.source.is_empty() {
        return Err(StoreError::invalid("a checkpoint needs a source"));
    }
    too_long("source", &req.source, MAX_FIELD_BYTES, "MAX_FIELD_BYTES")?;
    too_long(
        "generation",
        &req.generation,
        MAX_FIELD_BYTES,
        "MAX_FIELD_BYTES",
    )?;
    too_long(
        "checkpoint",
        &req.checkpoint,
        limits.max_value_bytes,
        "max_value_bytes",
    )?;
    if req.expect.is_some() && req.expect_absent {
        return Err(StoreError::invalid(
            "expect and expect_absent are exclusive",
        ));
    }
    let previous: Option<String> = conn
        .prepare_cached("SELECT checkpoint FROM checkpoints WHERE source = ?1")?
        .query_row([&req.source], |r| r.get(0))
        .optional()?;
    let holds = match (&req.expect, req.expect_absent) {
        (Some(want), _) => previous.as_ref() == Some(want),
        (None, true) => previous.is_none(),
        (None, false) => true,
    };
    if !holds {
        return Err(StoreError::conflict(format!(
            "checkpoint of {:?}: expected {}, found {}",
            req.source,
            req.expect.as_deref().unwrap_or("none"),
            previous.as_deref().unwrap_or("none")
        )));
    }
    conn.prepare_cached(
        "INSERT INTO checkpoints (source, checkpoint, generation, updated_at) VALUES (?1, ?2, ?3, ?4)
         ON CONFLICT (source) DO UPDATE SET checkpoint = excluded.checkpoint,
             generation = excluded.generation, updated_at = excluded.updated_at",
    )?
    .execute(params![
        req.source,
        req.checkpoint,
        req.generation,
        util::now()
    ])?;
    Ok(CheckpointSetResponse { previous })
}

// ---------------------------------------------------------------------------
// Reads

const EVENT_COLUMNS: &str = "seq, id, scope_id, type, source, delivery_id, item, item_version, \
     schema, payload, keys, signature, parent_id, root_id, depth, execution_id, occurred_at, \
     accepted_at";

fn row_to_event(r: &crate::sql::Row<'_>) -> crate::sql::Result<(StoredEvent, String, String)> {
    Ok((
        StoredEvent {
            seq: r.get(0)?,
            id: r.get(1)?,
            scope_id: r.get(2)?,
            event_type: r.get(3)?,
            source: r.get(4)?,
            delivery_id: r.get(5)?,
            item: r.get(6)?,
            item_version: r.get(7)?,
            schema: r.get(8)?,
            payload: Value::Null,
            keys: Vec::new(),
            signature: r.get(11)?,
            parent_id: r.get(12)?,
            root_id: r.get(13)?,
            depth: r.get(14)?,
            execution_id: r.get(15)?,
            occurred_at: r.get(16)?,
            accepted_at: r.get(17)?,
        },
        r.get(9)?,
        r.get(10)?,
    ))
}

fn finish_event(
    (mut e, payload, keys): (StoredEvent, String, String),
) -> Result<StoredEvent, StoreError> {
    e.payload = serde_json::from_str(&payload)
        .map_err(|err| StoreError::Internal(format!("event {}: stored payload: {err}", e.id)))?;
    e.keys = serde_json::from_str(&keys)
        .map_err(|err| StoreError::Internal(format!("event {}: stored keys: {err}", e.id)))?;
    Ok(e)
}

type EventRow = (StoredEvent, String, String);

fn event_row_by_seq(conn: &Connection, seq: i64) -> Result<Option<EventRow>, StoreError> {
    Ok(conn
        .prepare_cached(&format!(
            "SELECT {EVENT_COLUMNS} FROM events WHERE seq = ?1"
        ))?
        .query_row([seq], row_to_event)
        .optional()?)
}

fn page_limit(limits: &Limits, limit: Option<u32>) -> Result<usize, StoreError> {
    match limit {
        None | Some(0) => Ok(DEFAULT_PAGE.min(limits.max_page.max(1))),
        Some(n) if n as usize > limits.max_page => Err(StoreError::invalid(format!(
            "limit {n} is over max_page ({})",
            limits.max_page
        ))),
        Some(n) => Ok(n as usize),
    }
}

fn check_scopes(limits: &Limits, scopes: &Option<Vec<String>>) -> Result<(), StoreError> {
    if let Some(scopes) = scopes {
        if scopes.len() > limits.max_batch {
            return Err(StoreError::invalid(format!(
                "{} scopes, over max_batch ({})",
                scopes.len(),
                limits.max_batch
            )));
        }
        for s in scopes {
            too_long("a scope", s, MAX_FIELD_BYTES, "MAX_FIELD_BYTES")?;
        }
    }
    Ok(())
}

/// `store.event`.
pub fn event_get(
    conn: &Connection,
    limits: &Limits,
    req: &EventGetRequest,
) -> Result<EventGetResponse, StoreError> {
    too_long("id", &req.id, MAX_FIELD_BYTES, "MAX_FIELD_BYTES")?;
    check_scopes(limits, &req.scopes)?;
    let row = conn
        .prepare_cached(&format!("SELECT {EVENT_COLUMNS} FROM events WHERE id = ?1"))?
        .query_row([&req.id], row_to_event)
        .optional()?;
    let event = row.map(finish_event).transpose()?.filter(|e| {
        req.scopes
            .as_ref()
            .is_none_or(|scopes| scopes.contains(&e.scope_id))
    });
    match event {
        Some(event) => Ok(EventGetResponse { event }),
        None => Err(StoreError::not_found(format!("event {} not found", req.id))),
    }
}

/// Merge sequences from ordered sources: the first `limit` distinct ones. Each
/// source gave its first `limit` sequences after the cursor in order, so the first
/// `limit` of their union are the union's first `limit`.
fn merge_first(sources: Vec<Vec<i64>>, limit: usize) -> Vec<i64> {
    let mut all = BTreeSet::new();
    for s in sources {
        all.extend(s);
    }
    all.into_iter().take(limit).collect()
}

/// A page of the events `seqs` in order, cut short before the one that would take
/// its payloads past [`MAX_EVENTS_PAGE_BYTES`] (never before the first): the cursor
/// then resumes at the event cut off.
fn page(conn: &Connection, seqs: Vec<i64>, after: i64) -> Result<EventsPageResponse, StoreError> {
    let mut events = Vec::with_capacity(seqs.len());
    let mut bytes = 0usize;
    for seq in seqs {
        if let Some(row) = event_row_by_seq(conn, seq)? {
            let len = row.1.len();
            if !events.is_empty() && bytes + len > MAX_EVENTS_PAGE_BYTES {
                break;
            }
            bytes += len;
            events.push(finish_event(row)?);
        }
    }
    let next_after = events.last().map_or(after, |e| e.seq);
    Ok(EventsPageResponse { events, next_after })
}

fn dedup(scopes: &[String]) -> Vec<&String> {
    let set: BTreeSet<&String> = scopes.iter().collect();
    set.into_iter().collect()
}

/// `store.events`: with scopes, each scope's next events from the events_scope
/// index, merged; so a page costs the asked scopes' events, not the log between.
pub fn events_list(
    conn: &Connection,
    limits: &Limits,
    req: &EventsListRequest,
) -> Result<EventsPageResponse, StoreError> {
    let limit = page_limit(limits, req.limit)?;
    check_scopes(limits, &req.scopes)?;
    let seqs = match &req.scopes {
        None => {
            let mut stmt =
                conn.prepare_cached("SELECT seq FROM events WHERE seq > ?1 ORDER BY seq LIMIT ?2")?;
            let rows = stmt.query_map(params![req.after, limit as i64], |r| r.get::<_, i64>(0))?;
            rows.collect::<Result<Vec<i64>, _>>()?
        }
        Some(scopes) => {
            // SQLite is told which index serves this (PostgreSQL chooses it
            // well by itself).
            let mut stmt = conn.prepare_cached(match conn.backend() {
                Backend::Sqlite => {
                    "SELECT seq FROM events INDEXED BY events_scope
                     WHERE scope_id = ?1 AND seq > ?2 ORDER BY seq LIMIT ?3"
                }
                Backend::Postgres => {
                    "SELECT seq FROM events
                     WHERE scope_id = ?1 AND seq > ?2 ORDER BY seq LIMIT ?3"
                }
            })?;
            let mut sources = Vec::new();
            for scope in dedup(scopes) {
                let rows = stmt.query_map(params![scope, req.after, limit as i64], |r| {
                    r.get::<_, i64>(0)
                })?;
                sources.push(rows.collect::<Result<Vec<i64>, _>>()?);
            }
            merge_first(sources, limit)
        }
    };
    page(conn, seqs, req.after)
}

/// `store.work_events`: the events routed to the Work (work_inputs) and those
/// naming one of its keys (work_keys, event_keys), each source read in order from
/// its index and filtered by scope before the limit. An unknown Work is an empty
/// page.
pub fn work_events(
    conn: &Connection,
    limits: &Limits,
    req: &WorkEventsRequest,
) -> Result<EventsPageResponse, StoreError> {
    let limit = page_limit(limits, req.limit)?;
    check_scopes(limits, &req.scopes)?;
    too_long("work_id", &req.work_id, MAX_FIELD_BYTES, "MAX_FIELD_BYTES")?;
    // The scope filter, as `AND e.scope_id IN (?4, ?5, …)`.
    let scopes: Vec<&String> = req.scopes.as_deref().map(dedup).unwrap_or_default();
    let filter = match &req.scopes {
        None => String::new(),
        Some(_) if scopes.is_empty() => return page(conn, Vec::new(), req.after),
        Some(_) => {
            let marks: Vec<String> = (0..scopes.len()).map(|i| format!("?{}", i + 4)).collect();
            format!(" AND e.scope_id IN ({})", marks.join(", "))
        }
    };
    let run = |sql: &str, first: &str| -> Result<Vec<i64>, StoreError> {
        let mut stmt = conn.prepare_cached(sql)?;
        let mut values: Vec<crate::sql::Value> = vec![
            first.to_string().into(),
            req.after.into(),
            (limit as i64).into(),
        ];
        values.extend(scopes.iter().map(|s| (*s).clone().into()));
        let rows = stmt.query_map(params_from_iter(values), |r| r.get::<_, i64>(0))?;
        Ok(rows.collect::<Result<Vec<i64>, _>>()?)
    };
    let mut sources = Vec::new();
    sources.push(run(
        &format!(
            "SELECT wi.seq FROM work_inputs wi JOIN events e ON e.seq = wi.seq
             WHERE wi.work_id = ?1 AND wi.seq > ?2{filter} ORDER BY wi.seq LIMIT ?3"
        ),
        &req.work_id,
    )?);
    let keys: Vec<String> = {
        let mut stmt = conn.prepare_cached("SELECT key FROM work_keys WHERE work_id = ?1")?;
        let rows = stmt.query_map([&req.work_id], |r| r.get::<_, String>(0))?;
        rows.collect::<Result<Vec<String>, _>>()?
    };
    let key_sql = format!(
        "SELECT ek.seq FROM event_keys ek JOIN events e ON e.seq = ek.seq
         WHERE ek.key = ?1 AND ek.seq > ?2{filter} ORDER BY ek.seq LIMIT ?3"
    );
    for key in &keys {
        sources.push(run(&key_sql, key)?);
    }
    page(conn, merge_first(sources, limit), req.after)
}

/// `store.sequence`.
pub fn sequence(conn: &Connection) -> Result<SequenceResponse, StoreError> {
    let sequence: i64 = conn
        .prepare_cached("SELECT COALESCE(MAX(seq), 0) FROM events")?
        .query_row([], |r| r.get(0))?;
    Ok(SequenceResponse { sequence })
}

// ---------------------------------------------------------------------------
// The store's methods and the bus dispatch

impl Store {
    /// `store.events_accept`.
    pub async fn events_accept(
        &self,
        req: EventsAcceptRequest,
    ) -> Result<EventsAcceptResponse, StoreError> {
        let limits = self.limits().clone();
        self.write_repeatable(move |conn| accept_events(conn, &limits, &req))
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

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// The signature written field by field is the digest of the envelope's
    /// canonical JSON, byte for byte: signatures kept before it still match.
    #[test]
    fn signature_is_the_digest_of_the_canonical_envelope() {
        let strings = [
            "",
            "plain",
            "quote \" backslash \\ tab \t",
            "ünïcødé ✓",
            "\u{1}ctl",
        ];
        let payloads = [
            json!(null),
            json!({"b": 1, "a": [1.5, -2, "x"], "z": {"y": true, "c": null}}),
            json!("text \n with escapes"),
            json!([{"k": 1e300}, 0.1, 12345678901234567u64]),
        ];
        for (i, payload) in payloads.iter().enumerate() {
            for (j, s) in strings.iter().enumerate() {
                let opt = |n: usize| (!(i + j + n).is_multiple_of(3)).then_some(*s);
                let keys: Vec<String> = strings[..(i + j) % strings.len()]
                    .iter()
                    .map(|k| k.to_string())
                    .collect();
                let e = Envelope {
                    scope_id: s,
                    event_type: "t.x",
                    source: strings[(j + 1) % strings.len()],
                    delivery_id: opt(0),
                    item: opt(1),
                    item_version: opt(2),
                    schema: opt(3),
                    keys: &keys,
                    parent_id: opt(4),
                };
                let tree = json!({
                    "scope_id": e.scope_id, "type": e.event_type, "source": e.source,
                    "delivery_id": e.delivery_id, "item": e.item,
                    "item_version": e.item_version, "schema": e.schema,
                    "payload": Value::Null, "keys": e.keys, "parent_id": e.parent_id,
                });
                let before =
                    util::digest(util::canonical_with(&tree, "payload", payload).as_bytes());
                let text = serde_json::to_string(payload).unwrap();
                assert_eq!(signature(&e, &text), before, "payload {i}, string {j}");
            }
        }
    }

    #[test]
    fn emitted_event_id_is_the_first_half_of_the_digest() {
        let id = emitted_event_id("gh", "d-1");
        let full = util::digest(b"gh\nd-1");
        assert_eq!(
            id,
            format!("evt_{}", &full["sha256:".len().."sha256:".len() + 32])
        );
    }
}
