//! The reads of the log: one event, pages of events, a Work's events, the sequence.

use super::*;
use crate::db::Limits;
use crate::error::StoreError;
use crate::sql::{params, params_from_iter, Backend, Connection, OptionalExtension};
use serde_json::Value;
use std::collections::BTreeSet;

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
