//! What the host's own actions write (`action.submit`, provider `core`):
//! `store.action_accept` records an action's Event and routes it to its Work in one
//! write, and `store.work_retry` runs a Work again.
//!
//! An action's Event names no keys and is never left for the router: it is accepted
//! and attached to its Work in the same unit (a `done` input, so it changes no Work
//! state by itself), with one route record (handler `core.action`) saying who acted.
//! A repeated identity (the same source and delivery ID) answers the Event kept,
//! `added: false`, and writes nothing, whatever the Work's state is now.
//!
//! An action that settles a hold (`settle_hold`: a package's `admit` or `reject` of
//! a held Work) settles it in the same write, under the Event's delivery ID as the
//! settlement's key ([`super::holds`]).

use super::*;
use crate::events::{accept_event, emitted_event_id, AcceptContext};
pub use busapi::store::work::actions::*;

/// The route handler an action's route record names.
pub const ACTION_HANDLER: &str = "core.action";

// ---------------------------------------------------------------------------------------
// store.action_accept
// ---------------------------------------------------------------------------------------

/// Accept an action's Event and attach it to its Work (see the module doc).
pub fn action_accept(
    conn: &Connection,
    limits: &Limits,
    req: &ActionAcceptRequest,
) -> Result<ActionAcceptResponse, StoreError> {
    check_name("work_id", &req.work_id, limits)?;
    check_list("states", &req.states, limits)?;
    check_text("reason", &req.reason, MAX_REASON_BYTES, "the reason limit")?;
    let ev = &req.event;
    let delivery_id = ev
        .delivery_id
        .as_deref()
        .filter(|d| !d.is_empty())
        .ok_or_else(|| StoreError::invalid("an action's event needs a delivery_id"))?;
    if ev.parent_id.as_deref().is_some_and(|p| !p.is_empty()) {
        return Err(StoreError::invalid(
            "an action's event is a root: no parent_id",
        ));
    }
    if !ev.keys.is_empty() {
        return Err(StoreError::invalid(
            "an action's event names no keys: it must not create or find Work",
        ));
    }
    let work: Option<(String, String)> = conn
        .query_row(
            "SELECT state, scope_id FROM works WHERE id = ?1",
            [&req.work_id],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .optional()?;
    let Some((work_state, scope)) = work else {
        return Err(StoreError::not_found(format!("no Work {}", req.work_id)));
    };
    if scope != ev.scope_id {
        return Err(StoreError::invalid(format!(
            "Work {} is in scope {scope}, not {}",
            req.work_id, ev.scope_id
        )));
    }
    let known: Option<i64> = conn
        .query_row(
            "SELECT seq FROM events WHERE id = ?1",
            [emitted_event_id(&ev.source, delivery_id)],
            |r| r.get(0),
        )
        .optional()?;
    if known.is_none() && !req.states.is_empty() && !req.states.contains(&work_state) {
        return Err(StoreError::conflict(format!(
            "Work {} is {work_state}",
            req.work_id
        )));
    }
    if let Some(settle) = &req.settle_hold {
        check_name("settle_hold.owner", &settle.owner, limits)?;
        check_text(
            "settle_hold.reason",
            &settle.reason,
            MAX_REASON_BYTES,
            "the reason limit",
        )?;
        if known.is_none()
            && !super::holds::can_settle(conn, &req.work_id, &settle.owner, delivery_id)?
        {
            return Err(StoreError::conflict(format!(
                "Work {} has no hold of {} to settle",
                req.work_id, settle.owner
            )));
        }
    }
    let now_ms = util::now_ms();
    let accepted = accept_event(conn, limits, ev, &AcceptContext::default(), now_ms, None)?;
    if accepted.added {
        let now = util::rfc3339(now_ms);
        conn.execute(
            "INSERT INTO work_inputs (work_id, seq, state) VALUES (?1, ?2, 'done')",
            params![req.work_id, accepted.seq],
        )?;
        conn.execute(
            "INSERT INTO route_records (seq, idx, scope_id, handler, binding, matched, work_id, \
             reason, display_refused, recorded_at) VALUES (?1, 0, ?2, ?3, '', ?4, ?5, ?6, NULL, ?7)",
            params![
                accepted.seq,
                ev.scope_id,
                ACTION_HANDLER,
                true,
                req.work_id,
                req.reason,
                now
            ],
        )?;
        conn.execute(
            "INSERT INTO routed (seq, disposition, routed_at) VALUES (?1, 'attached', ?2)",
            params![accepted.seq, now],
        )?;
        conn.execute("DELETE FROM unrouted WHERE seq = ?1", [accepted.seq])?;
    }
    // The hold is settled under the action's own identity, so the same action again
    // settles nothing again.
    let settled = match (&req.settle_hold, accepted.added) {
        (Some(settle), true) => super::holds::settle_in(
            conn,
            &req.work_id,
            settle,
            delivery_id,
            &util::rfc3339(now_ms),
        )?,
        _ => false,
    };
    Ok(ActionAcceptResponse {
        id: accepted.id,
        seq: accepted.seq,
        added: accepted.added,
        work_state,
        settled,
    })
}

// ---------------------------------------------------------------------------------------
// store.work_retry
// ---------------------------------------------------------------------------------------

/// Run a Work again: it becomes `pending` with its failure count reset, and its
/// next attempt takes the inputs it failed or was cancelled with (a failed or
/// cancelled Work), the input `seq` (when given), or, when that makes none, its
/// latest input again. A Work that is running, waiting, woken or pending is
/// `conflict` (it runs already, or will), as is one with no input at all.
pub fn work_retry(
    conn: &Connection,
    limits: &Limits,
    req: &WorkRetryRequest,
) -> Result<WorkRetryResponse, StoreError> {
    check_name("work_id", &req.work_id, limits)?;
    check_text("reason", &req.reason, MAX_REASON_BYTES, "the reason limit")?;
    let work: Option<(String, i64)> = conn
        .query_row(
            "SELECT state, version FROM works WHERE id = ?1",
            [&req.work_id],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .optional()?;
    let Some((was, version)) = work else {
        return Err(StoreError::not_found(format!("no Work {}", req.work_id)));
    };
    if let Some(v) = req.expect_version {
        if v != version {
            return Err(StoreError::conflict(format!(
                "Work {} is at version {version}, not {v}",
                req.work_id
            )));
        }
    }
    match was.as_str() {
        state::FAILED | state::CANCELLED | state::IDLE | state::COMPLETED => {}
        state::PENDING | state::WOKEN => {
            return Err(StoreError::conflict(format!(
                "Work {} is {was}: it is queued to run already",
                req.work_id
            )))
        }
        other => {
            return Err(StoreError::conflict(format!(
                "Work {} is {other}: it has an attempt already (stop it first)",
                req.work_id
            )))
        }
    }
    let seqs_in = |sql: &str| -> Result<Vec<i64>, StoreError> {
        let mut stmt = conn.prepare_cached(sql)?;
        let rows = stmt
            .query_map([&req.work_id], |r| r.get(0))?
            .collect::<crate::sql::Result<Vec<i64>>>()?;
        Ok(rows)
    };
    let mut inputs = if is_closed(&was) {
        seqs_in(
            "SELECT seq FROM work_inputs WHERE work_id = ?1 \
             AND state IN ('failed', 'cancelled') ORDER BY seq",
        )?
    } else {
        Vec::new()
    };
    if let Some(seq) = req.seq {
        let of_work: Option<i64> = conn
            .query_row(
                "SELECT seq FROM work_inputs WHERE work_id = ?1 AND seq = ?2",
                params![req.work_id, seq],
                |r| r.get(0),
            )
            .optional()?;
        if of_work.is_none() {
            return Err(StoreError::invalid(format!(
                "event {seq} is not an input of Work {}",
                req.work_id
            )));
        }
        if !inputs.contains(&seq) {
            inputs.push(seq);
        }
    }
    if inputs.is_empty() {
        let latest: Option<i64> = conn.query_row(
            "SELECT MAX(seq) FROM work_inputs WHERE work_id = ?1",
            [&req.work_id],
            |r| r.get(0),
        )?;
        inputs.extend(latest);
    }
    if inputs.is_empty() {
        return Err(StoreError::conflict(format!(
            "Work {} has no input to run again",
            req.work_id
        )));
    }
    inputs.sort_unstable();
    for seq in &inputs {
        conn.execute(
            "UPDATE work_inputs SET state = 'pending', attempt_id = NULL \
             WHERE work_id = ?1 AND seq = ?2",
            params![req.work_id, seq],
        )?;
    }
    let now = util::now();
    conn.execute(
        "UPDATE works SET state = ?2, failures = 0, retry_at_ms = NULL WHERE id = ?1",
        params![req.work_id, state::PENDING],
    )?;
    touch(conn, &req.work_id, &now)?;
    Ok(WorkRetryResponse {
        was,
        state: state::PENDING.into(),
        inputs,
    })
}
