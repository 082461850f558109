//! Accepting events: identity, the canonical signature, a derived event's chain
//! bounds, and the insert.

use super::*;
use crate::db::Limits;
use crate::error::StoreError;
use crate::kv::{self};
use crate::sql::{params, Backend, Connection, OptionalExtension};
use crate::util;
use serde_json::Value;

/// The spec's EmittedEventID (one definition, in the protocol crate).
pub use protocol::wire::emitted_event_id;

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

struct Parent {
    root_id: String,
    depth: i64,
}

/// An event checked and resolved, ready to insert unless it already exists.
pub struct Prepared {
    pub(super) ev: EventInput,
    pub(super) payload_text: String,
    pub(super) signature: String,
    parent: Option<Parent>,
    existing: Option<AcceptedEvent>,
}

impl Prepared {
    /// Whether it is a root event named by its delivery (no observation
    /// identity): what a group's statement inserts ahead on PostgreSQL
    /// (`super::ahead`).
    pub(super) fn plain_delivery(&self) -> bool {
        self.parent.is_none()
            && self.existing.is_none()
            && self.ev.delivery_id.is_some()
            && self.ev.item.is_none()
            && self.ev.item_version.is_none()
    }
}

/// The key under which a statement run ahead of a write's group keeps the
/// `seq` of an event it inserted for the write ([`Connection::take_ahead`]).
pub(super) fn ahead_key(id: &str, signature: &str) -> String {
    format!("{id}\n{signature}")
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

/// An event's fields checked against their bounds and its owner's authority,
/// and its payload as the text kept. Nothing here reads the database.
fn check(
    limits: &Limits,
    input: &EventInput,
    ctx: &AcceptContext<'_>,
) -> Result<(EventInput, String), StoreError> {
    let ev = EventInput {
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
        snapshot: input.snapshot,
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
    Ok((ev, payload_text))
}

/// A root event (no parent) checked, in a scope its caller may write to, and
/// signed: ready to insert. Nothing here reads the database, so this runs before
/// the write and off the writer thread ([`presign`]).
fn prepare_root(
    limits: &Limits,
    input: &EventInput,
    ctx: &AcceptContext<'_>,
) -> Result<Prepared, StoreError> {
    let (ev, payload_text) = check(limits, input, ctx)?;
    if let Some(scopes) = ctx.scopes {
        if !scopes.contains(&ev.scope_id) {
            return Err(StoreError::Unauthorized(format!(
                "scope {:?} is not one the caller is configured in",
                ev.scope_id
            )));
        }
    }
    let signature = sign(&ev, &payload_text);
    Ok(Prepared {
        ev,
        payload_text,
        signature,
        parent: None,
        existing: None,
    })
}

/// Who accepts a `store.events_accept` batch.
fn batch_context(req: &EventsAcceptRequest) -> AcceptContext<'_> {
    AcceptContext {
        owner: req.owner.as_deref(),
        families: req.families.as_deref().unwrap_or_default(),
        scopes: req.scopes.as_deref(),
    }
}

/// Each root event of a batch made ready before its write ([`prepare_root`]);
/// `None` for a derived event (its parent is read in the write) and for one
/// refused here (the write refuses it again, in its place in the batch, so the
/// batch's first refusal is the one answered).
pub fn presign(limits: &Limits, req: &EventsAcceptRequest) -> Vec<Option<Prepared>> {
    if req.events.len() > limits.max_batch {
        return Vec::new();
    }
    let ctx = batch_context(req);
    req.events
        .iter()
        .map(|ev| match nonempty(&ev.parent_id) {
            None => prepare_root(limits, ev, &ctx).ok(),
            Some(_) => None,
        })
        .collect()
}

/// The signature of a checked event.
fn sign(ev: &EventInput, payload_text: &str) -> String {
    // An event with a delivery ID is that delivery whichever way it came: a live
    // delivery, or an observation naming it (a reconcile reading back a missed
    // webhook delivery), so the item it was observed as is not part of its envelope.
    let (item, item_version) = match ev.delivery_id {
        Some(_) => (None, None),
        None => (ev.item.as_ref(), ev.item_version.as_ref()),
    };
    signature(
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
        payload_text,
    )
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
    let mut p = match nonempty(&input.parent_id) {
        None => prepare_root(limits, input, ctx)?,
        Some(pid) => prepare_derived(conn, limits, input, ctx, &pid)?,
    };
    if lookup {
        p.existing = kept_under(conn, &p)?;
    }
    Ok(p)
}

/// A derived event checked and signed: its parent is an accepted event of the
/// same scope (never revealing another), whose scope it takes.
fn prepare_derived(
    conn: &Connection,
    limits: &Limits,
    input: &EventInput,
    ctx: &AcceptContext<'_>,
    pid: &str,
) -> Result<Prepared, StoreError> {
    let (mut ev, payload_text) = check(limits, input, ctx)?;
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
    let signature = sign(&ev, &payload_text);
    Ok(Prepared {
        ev,
        payload_text,
        signature,
        parent: Some(Parent { root_id, depth }),
        existing: None,
    })
}

/// The event already kept under `p`'s identity (its delivery, or its
/// observation), if any; `conflict` when that event's envelope differs, unless
/// `p` is a snapshot (`EventInput::snapshot`), whose delivery ID alone is its identity.
fn kept_under(conn: &Connection, p: &Prepared) -> Result<Option<AcceptedEvent>, StoreError> {
    let (ev, signature) = (&p.ev, &p.signature);
    let mut existing: Option<AcceptedEvent> = None;
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
            // A snapshot's delivery ID alone is its identity: the first kept stands.
            if sig != *signature && !ev.snapshot {
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
            if (sig != *signature && !ev.snapshot) || existing.as_ref().is_some_and(|e| e.id != id)
            {
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
    Ok(existing)
}

/// The insert of a new event; it inserts nothing for an identity already kept.
macro_rules! insert_event_sql {
    () => {
        "INSERT INTO events (id, scope_id, type, source, delivery_id, item, item_version,
         schema, payload, keys, signature, parent_id, root_id, depth, execution_id,
         occurred_at, accepted_at, accepted_ms)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18)
         ON CONFLICT DO NOTHING"
    };
}
const INSERT_EVENT: &str = insert_event_sql!();
/// [`INSERT_EVENT`] on PostgreSQL with the new event's `unrouted` row and its
/// keys (`?10`, the JSON array kept in `keys`): its `seq`, or no row.
const INSERT_EVENT_PG: &str = concat!(
    "WITH e AS (",
    insert_event_sql!(),
    " RETURNING seq),
     u AS (INSERT INTO unrouted (seq) SELECT seq FROM e),
     k AS (INSERT INTO event_keys (key, seq)
           SELECT DISTINCT j.key, e.seq FROM e, jsonb_array_elements_text(CAST(?10 AS jsonb)) AS j(key)
           ON CONFLICT DO NOTHING)
     SELECT seq FROM e"
);

/// Check a new derived event against its chain's bounds; then insert the event and
/// its keys. Nothing is written when a bound refuses it, and nothing (`None`)
/// when an event is already kept under its identity.
fn insert(
    conn: &Connection,
    limits: &Limits,
    p: &Prepared,
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
    // On PostgreSQL the group's statement may have inserted it already.
    let pg = conn.backend() == Backend::Postgres;
    if pg && p.plain_delivery() {
        if let Some(seq) = conn.take_ahead(&ahead_key(&id, signature)) {
            return Ok(Some(AcceptedEvent {
                id,
                seq,
                added: true,
            }));
        }
    }
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
            (parent.root_id.clone(), depth)
        }
    };
    let keys_text = serde_json::to_string(&ev.keys)
        .map_err(|e| StoreError::Internal(format!("encode keys: {e}")))?;
    // An identity already kept (the unique ID, which for a delivery is its
    // identity's digest, or the observation's unique index) inserts nothing.
    let values = params![
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
    ];
    let seq: Option<i64> = match conn.as_sqlite() {
        // SQLite: no RETURNING. With it, SQLite keeps a statement journal for the
        // insert (a copy of each page before it changes, in case the statement
        // aborts halfway): 5.8 against 3.4 µs an insert, measured on this schema.
        // The new row's `seq` is the connection's last inserted rowid.
        Some(lite) => (conn.prepare_cached(INSERT_EVENT)?.execute(values)? == 1)
            .then(|| lite.last_insert_rowid()),
        // PostgreSQL: the event, its `unrouted` row and its keys in one
        // statement (one round trip).
        None => conn
            .prepare_cached(INSERT_EVENT_PG)?
            .query_row(values, |r| r.get(0))
            .optional()?,
    };
    let Some(seq) = seq else {
        return Ok(None);
    };
    if !pg {
        conn.prepare_cached("INSERT INTO unrouted (seq) VALUES (?1)")?
            .execute([seq])?;
        let mut key_stmt = conn.prepare_cached(
            "INSERT INTO event_keys (key, seq) VALUES (?1, ?2) ON CONFLICT DO NOTHING",
        )?;
        for k in &ev.keys {
            key_stmt.execute(params![k, seq])?;
        }
    }
    Ok(Some(AcceptedEvent {
        id,
        seq,
        added: true,
    }))
}

/// Accept one event: the existing one for a known identity with the same
/// envelope, `conflict` for a changed one, or a new one. A derived event over its
/// chain's bounds is `causal_limit`, and nothing is written for it. `ready` is the
/// event made ready before the write ([`presign`]), if it was.
pub fn accept_event(
    conn: &Connection,
    limits: &Limits,
    ev: &EventInput,
    ctx: &AcceptContext<'_>,
    now_ms: i64,
    ready: Option<&Prepared>,
) -> Result<AcceptedEvent, StoreError> {
    // A root event (an ingress delivery, the common case) is inserted first
    // and looked up only when its identity is already kept: one statement for a
    // new one. A derived event is looked up first, so that a replay of one is
    // never refused by its chain's bounds.
    let made;
    let p = match ready {
        Some(p) => p,
        None => {
            let root = nonempty(&ev.parent_id).is_none();
            made = prepare(conn, limits, ev, ctx, !root)?;
            &made
        }
    };
    if let Some(existing) = &p.existing {
        return Ok(existing.clone());
    }
    if let Some(added) = insert(conn, limits, p, now_ms)? {
        return Ok(added);
    }
    kept_already(conn, p)
}

/// The event kept under `p`'s identity, which its insert found taken
/// (`conflict` when its envelope differs).
fn kept_already(conn: &Connection, p: &Prepared) -> Result<AcceptedEvent, StoreError> {
    kept_under(conn, p)?.ok_or_else(|| {
        StoreError::Internal("an event's identity conflicted, but no event holds it".into())
    })
}

/// `store.events_accept`: the whole batch, or (on any refusal) an error; the caller
/// runs it inside one write, so a refusal writes nothing.
///
/// `ready` holds the batch's events made ready before the write ([`presign`]),
/// by index (empty when none were).
pub fn accept_events(
    conn: &Connection,
    limits: &Limits,
    req: &EventsAcceptRequest,
    ready: &[Option<Prepared>],
) -> Result<EventsAcceptResponse, StoreError> {
    if req.events.len() > limits.max_batch {
        return Err(StoreError::invalid(format!(
            "the batch has {} events, over max_batch ({})",
            req.events.len(),
            limits.max_batch
        )));
    }
    let ctx = batch_context(req);
    let now_ms = util::now_ms();
    let mut out = EventsAcceptResponse::default();
    for (i, ev) in req.events.iter().enumerate() {
        let made = ready.get(i).and_then(Option::as_ref);
        let a = accept_event(conn, limits, ev, &ctx, now_ms, made).map_err(|e| at(i, e))?;
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
    let accepted = match insert(conn, limits, &p, util::now_ms())? {
        Some(a) => a,
        None => kept_already(conn, &p)?,
    };
    if let Some(owner) = owner.filter(|_| has_kv) {
        kv::apply_writes(conn, limits, owner, &req.puts, &req.deletes)?;
    }
    Ok(accepted)
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
