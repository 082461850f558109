//! PostgreSQL: the new events of a group of `store.events_accept` writes
//! inserted in one statement before the writes run ([`crate::db::Ahead`]).
//!
//! Each write's accept would otherwise be a round trip to the server for each
//! event it adds; a group of 64 writes was 64 round trips or more, each a
//! wake-up of the server's backend and of the writer. The statement inserts
//! every event of the group that is a root event named by its delivery (what
//! every ingress delivery is), in the group's order (so `seq` is the order the
//! writes would have given), with its `unrouted` row and its keys, and keeps
//! each new event's `seq` on the connection under its ID and signature. Each
//! write then runs as before and, at its insert, takes its event's `seq`
//! there instead of inserting it ([`super::accept`]); an event the statement
//! did not insert (kept already under its identity, or left out here) takes
//! the ordinary way, which finds it or inserts it. A write whose events are not
//! all of that kind has no part in the statement.

use super::accept::{ahead_key, Prepared};
use super::{emitted_event_id, EventsAcceptRequest};
use crate::db::Ahead;
use crate::sql::{Connection, Error};
use crate::util;
use std::collections::HashSet;
use std::sync::Arc;

/// The most payload bytes one statement carries; a write whose events would
/// take it past this has no part in it (it inserts its events itself).
pub const MAX_AHEAD_BYTES: usize = 16 * 1024 * 1024;

/// The statement: the events (one array per column, in the group's order), an
/// event already kept under its ID or observation inserting nothing; its
/// `unrouted` row and keys with it. Answers each new event's ID, `seq` and
/// signature.
const INSERT_AHEAD: &str = "WITH e AS (
    INSERT INTO events (id, scope_id, type, source, delivery_id, schema, payload, keys,
        signature, root_id, depth, execution_id, occurred_at, accepted_at, accepted_ms)
    SELECT v.id, v.scope_id, v.type, v.source, v.delivery_id, v.schema, v.payload, v.keys,
        v.signature, v.id, 0, v.execution_id, v.occurred_at, $12::text, $13::int8
    FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[],
        $7::text[], $8::text[], $9::text[], $10::text[], $11::text[])
        WITH ORDINALITY AS v(id, scope_id, type, source, delivery_id, schema, payload, keys,
        signature, execution_id, occurred_at, ord)
    ORDER BY v.ord
    ON CONFLICT DO NOTHING
    RETURNING id, seq, signature, keys
),
u AS (INSERT INTO unrouted (seq) SELECT seq FROM e),
k AS (
    INSERT INTO event_keys (key, seq)
    SELECT DISTINCT j.key, e.seq FROM e, jsonb_array_elements_text(CAST(e.keys AS jsonb)) AS j(key)
    ON CONFLICT DO NOTHING
)
SELECT id, seq, signature FROM e";

/// One `store.events_accept` write's events, made ready before the write
/// (`super::presign`), every one a root event named by its delivery.
pub struct AcceptAhead {
    ready: Arc<Vec<Option<Prepared>>>,
}

impl AcceptAhead {
    /// The write's part, when every event of `req` is of the kind the
    /// statement inserts and was made ready.
    pub fn new(req: &EventsAcceptRequest, ready: Arc<Vec<Option<Prepared>>>) -> Option<Self> {
        let all = !req.events.is_empty()
            && ready.len() == req.events.len()
            && ready
                .iter()
                .all(|p| p.as_ref().is_some_and(Prepared::plain_delivery));
        all.then_some(AcceptAhead { ready })
    }

    fn events(&self) -> impl Iterator<Item = &Prepared> {
        self.ready.iter().flatten()
    }
}

/// The statement's columns, one array each.
#[derive(Default)]
struct Columns<'a> {
    id: Vec<String>,
    scope_id: Vec<&'a str>,
    event_type: Vec<&'a str>,
    source: Vec<&'a str>,
    delivery_id: Vec<Option<&'a str>>,
    schema: Vec<Option<&'a str>>,
    payload: Vec<&'a str>,
    keys: Vec<String>,
    signature: Vec<&'a str>,
    execution_id: Vec<Option<&'a str>>,
    occurred_at: Vec<Option<&'a str>>,
}

impl<'a> Columns<'a> {
    fn push(&mut self, id: String, p: &'a Prepared) -> Result<(), Error> {
        let ev = &p.ev;
        self.keys.push(
            serde_json::to_string(&ev.keys)
                .map_err(|e| Error::Postgres(format!("encode keys: {e}")))?,
        );
        self.id.push(id);
        self.scope_id.push(&ev.scope_id);
        self.event_type.push(&ev.event_type);
        self.source.push(&ev.source);
        self.delivery_id.push(ev.delivery_id.as_deref());
        self.schema.push(ev.schema.as_deref());
        self.payload.push(&p.payload_text);
        self.signature.push(&p.signature);
        self.execution_id.push(ev.execution_id.as_deref());
        self.occurred_at.push(ev.occurred_at.as_deref());
        Ok(())
    }
}

impl Ahead for AcceptAhead {
    fn as_any(&self) -> &dyn std::any::Any {
        self
    }

    fn run_all(&self, conn: &Connection, parts: &[&dyn Ahead]) -> Result<(), Error> {
        let mut cols = Columns::default();
        // One row per ID: a second event under the same ID (the same delivery
        // twice in a group) takes the ordinary way, as it would after the
        // first was inserted.
        let mut ids = HashSet::new();
        let mut bytes = 0usize;
        for part in parts {
            let Some(a) = part.as_any().downcast_ref::<AcceptAhead>() else {
                continue;
            };
            let size: usize = a.events().map(|p| p.payload_text.len()).sum();
            if bytes + size > MAX_AHEAD_BYTES {
                continue;
            }
            bytes += size;
            for p in a.events() {
                let Some(d) = &p.ev.delivery_id else {
                    continue;
                };
                let id = emitted_event_id(&p.ev.source, d);
                if ids.insert(id.clone()) {
                    cols.push(id, p)?;
                }
            }
        }
        if cols.id.is_empty() {
            return Ok(());
        }
        let now_ms = util::now_ms();
        let accepted_at = util::rfc3339(now_ms);
        let Some(rows) = conn.with_pg(|s| {
            s.query_arrays(
                INSERT_AHEAD,
                &[
                    &cols.id,
                    &cols.scope_id,
                    &cols.event_type,
                    &cols.source,
                    &cols.delivery_id,
                    &cols.schema,
                    &cols.payload,
                    &cols.keys,
                    &cols.signature,
                    &cols.execution_id,
                    &cols.occurred_at,
                    &accepted_at,
                    &now_ms,
                ],
            )
        }) else {
            return Ok(());
        };
        for row in rows? {
            let id: String = row.try_get(0)?;
            let seq: i64 = row.try_get(1)?;
            let signature: String = row.try_get(2)?;
            conn.with_pg(|s| s.put_ahead(ahead_key(&id, &signature), seq));
        }
        Ok(())
    }
}
