//! Waits: declared by a `waiting` settle (`work::attempt_settle`), woken by an event
//! (`store.route_decide` with `wake`, or `store.wait_wake`), a timeout or by hand;
//! at most one active per Work.
//!
//! Wait states: `active`, `woken`, `timed_out`, `cancelled`. A timed Wait has a
//! timeout timer (owner [`TIMER_OWNER`], kind [`TIMER_KIND`], the Work's scope, key
//! the Wait ID) armed in the unit that declares it and deleted in the unit that
//! wakes or cancels it; schedulerd answers that timer firing with
//! `store.wait_wake {reason: "timeout"}`, which deletes it, rather than with
//! `store.timer_fire`.

use super::{set_work_state, state, SettleWait};
use crate::db::{Limits, Store};
use crate::error::StoreError;
use crate::fields::{
    check_list, check_name, check_opt_name, list_text, page_limit, parse_json, parse_list,
};
use crate::rpc::{read_method, write_method};
use crate::sql::{params, Backend, Connection, OptionalExtension, Row};
use crate::util;
pub use busapi::store::waits::*;
use protocol::wire::{clip_line, MAX_WAIT_DESCRIPTION_BYTES, MAX_WAIT_PROGRESS_BYTES};

/// The owner of Wait timeout timers.
pub const TIMER_OWNER: &str = "core";
/// The kind of Wait timeout timers.
pub const TIMER_KIND: &str = "wait.timeout";

const WAIT_SELECT: &str = "SELECT w.id, w.work_id, w.execution_id, w.owner, w.description, \
     w.progress, w.keys, w.types, w.plan, w.due_ms, w.state, w.created_at, w.woken_at, \
     w.wake_seq, (SELECT t.due_ms FROM timers t JOIN works k ON k.id = w.work_id \
       WHERE t.owner = 'core' AND t.kind = 'wait.timeout' AND t.scope_id = k.scope_id \
       AND t.key = w.id) FROM waits w";

fn wait_from_row(r: &Row<'_>) -> crate::sql::Result<WaitRow> {
    let keys: String = r.get(6)?;
    let types: String = r.get(7)?;
    let timer_due: Option<i64> = r.get(14)?;
    Ok(WaitRow {
        id: r.get(0)?,
        work_id: r.get(1)?,
        execution_id: r.get(2)?,
        owner: r.get(3)?,
        description: r.get(4)?,
        progress: r.get(5)?,
        keys: parse_list(&keys),
        types: parse_list(&types),
        plan: parse_json(r.get(8)?),
        due_ms: r.get(9)?,
        state: r.get(10)?,
        created_at: r.get(11)?,
        woken_at: r.get(12)?,
        wake_seq: r.get(13)?,
        due_at: timer_due.map(util::rfc3339),
    })
}

/// `until 25 Oct 2026 09:00 UTC`: a timed Wait's description when it was given none.
pub fn due_description(due_ms: i64) -> String {
    const MONTHS: [&str; 12] = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    // rfc3339 is `YYYY-MM-DDTHH:MM:SS.mmmZ`.
    let t = util::rfc3339(due_ms);
    let year = t.get(0..4).unwrap_or("");
    let month = t
        .get(5..7)
        .and_then(|m| m.parse::<usize>().ok())
        .and_then(|m| MONTHS.get(m.wrapping_sub(1)))
        .copied()
        .unwrap_or("");
    let day = t
        .get(8..10)
        .and_then(|d| d.parse::<u32>().ok())
        .unwrap_or(0);
    let hm = t.get(11..16).unwrap_or("");
    format!("until {day} {month} {year} {hm} UTC")
}

/// Declare the active Wait of a Work's execution, arming its timeout timer: part of
/// a `waiting` settle. `conflict` when the Work already has an active Wait.
pub(crate) fn declare_in(
    conn: &Connection,
    work_id: &str,
    execution_id: &str,
    w: &SettleWait,
    now: &str,
) -> Result<(String, Option<String>), StoreError> {
    let active: Option<String> = conn
        .query_row(
            "SELECT id FROM waits WHERE work_id = ?1 AND state = 'active'",
            [work_id],
            |r| r.get(0),
        )
        .optional()?;
    if let Some(id) = active {
        return Err(StoreError::conflict(format!(
            "Work {work_id} already has an active Wait ({id})"
        )));
    }
    let mut description = clip_line(&w.description, MAX_WAIT_DESCRIPTION_BYTES);
    if description.is_empty() {
        if let Some(due) = w.due_ms {
            description = due_description(due);
        }
    }
    let plan = match &w.plan {
        Some(p) if !p.is_null() => Some(serde_json::to_string(p).unwrap_or_default()),
        _ => None,
    };
    let id = util::new_id("wait");
    conn.execute(
        "INSERT INTO waits (id, work_id, execution_id, owner, description, keys, types, plan, \
         due_ms, state, created_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, 'active', ?10)",
        params![
            id,
            work_id,
            execution_id,
            w.owner,
            description,
            list_text(&w.keys),
            list_text(&w.types),
            plan,
            w.due_ms,
            now
        ],
    )?;
    let timer = match w.due_ms {
        Some(due) => {
            let scope: String =
                conn.query_row("SELECT scope_id FROM works WHERE id = ?1", [work_id], |r| {
                    r.get(0)
                })?;
            let payload = serde_json::json!({ "wait_id": id, "work_id": work_id });
            let (tid, _) = crate::timers::arm_in(
                conn,
                &crate::timers::Arm {
                    owner: TIMER_OWNER,
                    kind: TIMER_KIND,
                    scope_id: &scope,
                    key: &id,
                    due_ms: due,
                    spec: None,
                    payload: Some(payload.to_string()),
                },
                now,
            )?;
            Some(tid)
        }
        None => None,
    };
    Ok((id, timer))
}

fn delete_timer(conn: &Connection, wait_id: &str) -> Result<(), StoreError> {
    conn.execute(
        "DELETE FROM timers WHERE owner = ?1 AND kind = ?2 AND key = ?3",
        params![TIMER_OWNER, TIMER_KIND, wait_id],
    )?;
    Ok(())
}

/// End an active Wait (`woken`, `timed_out`), deleting its timeout timer. The caller
/// checked that it is active and moves its Work.
pub(crate) fn wake_in(
    conn: &Connection,
    wait_id: &str,
    seq: Option<i64>,
    to: &str,
    now: &str,
) -> Result<(), StoreError> {
    conn.execute(
        "UPDATE waits SET state = ?2, woken_at = ?3, wake_seq = ?4 WHERE id = ?1",
        params![wait_id, to, now, seq],
    )?;
    delete_timer(conn, wait_id)
}

/// Cancel a Work's active Wait, if any (and its timer): part of `work_cancel`.
pub(crate) fn cancel_active_in(
    conn: &Connection,
    work_id: &str,
    now: &str,
) -> Result<Option<String>, StoreError> {
    let active: Option<String> = conn
        .query_row(
            "SELECT id FROM waits WHERE work_id = ?1 AND state = 'active'",
            [work_id],
            |r| r.get(0),
        )
        .optional()?;
    if let Some(id) = &active {
        conn.execute(
            "UPDATE waits SET state = 'cancelled', woken_at = ?2 WHERE id = ?1",
            params![id, now],
        )?;
        delete_timer(conn, id)?;
    }
    Ok(active)
}

// ---------------------------------------------------------------------------------------
// store.wait_wake
// ---------------------------------------------------------------------------------------

/// Wake a Wait.
pub fn wait_wake(
    conn: &Connection,
    limits: &Limits,
    req: &WaitWakeRequest,
) -> Result<WaitWakeResponse, StoreError> {
    check_name("wait_id", &req.wait_id, limits)?;
    if req.reason == WakeReason::Event && req.seq.is_none() {
        return Err(StoreError::invalid("an event wake names the event's seq"));
    }
    let wait: Option<(String, Option<String>, String)> = conn
        .query_row(
            "SELECT work_id, execution_id, state FROM waits WHERE id = ?1",
            [&req.wait_id],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
        )
        .optional()?;
    let Some((work_id, execution_id, st)) = wait else {
        return Err(StoreError::not_found(format!("no Wait {}", req.wait_id)));
    };
    if st != "active" {
        return Err(StoreError::conflict(format!(
            "Wait {} is {st}, not active",
            req.wait_id
        )));
    }
    if let Some(seq) = req.seq {
        let input: Option<i64> = conn
            .query_row(
                "SELECT seq FROM work_inputs WHERE work_id = ?1 AND seq = ?2",
                params![work_id, seq],
                |r| r.get(0),
            )
            .optional()?;
        if input.is_none() {
            return Err(StoreError::conflict(format!(
                "event {seq} is not an input of Work {work_id} (route it first)"
            )));
        }
    }
    let to = if req.reason == WakeReason::Timeout {
        "timed_out"
    } else {
        "woken"
    };
    let now = util::now();
    wake_in(conn, &req.wait_id, req.seq, to, &now)?;
    let work_state: String =
        conn.query_row("SELECT state FROM works WHERE id = ?1", [&work_id], |r| {
            r.get(0)
        })?;
    if work_state == state::WAITING {
        set_work_state(conn, &work_id, state::WOKEN, &now)?;
    }
    Ok(WaitWakeResponse {
        work_id,
        execution_id,
        state: to.into(),
    })
}

// ---------------------------------------------------------------------------------------
// store.wait_progress
// ---------------------------------------------------------------------------------------

/// Set a Wait's progress.
pub fn wait_progress(
    conn: &Connection,
    limits: &Limits,
    req: &WaitProgressRequest,
) -> Result<WaitProgressResponse, StoreError> {
    check_name("owner", &req.owner, limits)?;
    check_name("work_id", &req.work_id, limits)?;
    // The raw text is bounded before it is cut.
    crate::fields::check_text(
        "progress",
        &req.progress,
        limits.max_value_bytes,
        "max_value_bytes",
    )?;
    let wait: Option<(String, String)> = conn
        .query_row(
            "SELECT id, owner FROM waits WHERE work_id = ?1 AND state = 'active'",
            [&req.work_id],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .optional()?;
    let Some((wait_id, owner)) = wait else {
        return Err(StoreError::not_found(format!(
            "Work {} has no active Wait",
            req.work_id
        )));
    };
    if owner.is_empty() || owner != req.owner {
        return Err(StoreError::Unauthorized(format!(
            "the active Wait of Work {} is not {}'s",
            req.work_id, req.owner
        )));
    }
    let progress = clip_line(&req.progress, MAX_WAIT_PROGRESS_BYTES);
    conn.execute(
        "UPDATE waits SET progress = ?2 WHERE id = ?1",
        params![wait_id, progress],
    )?;
    Ok(WaitProgressResponse { wait_id, progress })
}

// ---------------------------------------------------------------------------------------
// store.waits_matching, store.waits
// ---------------------------------------------------------------------------------------

/// Active Waits an event could wake.
pub fn waits_matching(
    conn: &Connection,
    limits: &Limits,
    req: &WaitsMatchingRequest,
) -> Result<WaitsResponse, StoreError> {
    check_list("keys", &req.keys, limits)?;
    check_list("types", &req.types, limits)?;
    let limit = page_limit(req.limit, limits)?;
    // The common case, no active Wait at all, answered by one probe of the state
    // index: the match below takes JSON arrays apart, and SQLite compiles it again
    // on each run (its plan depends on the values bound).
    let any_active: bool = conn
        .prepare_cached("SELECT EXISTS (SELECT 1 FROM waits WHERE state = 'active')")?
        .query_row([], |r| r.get(0))?;
    if !any_active {
        return Ok(WaitsResponse {
            waits: Vec::new(),
            next: String::new(),
        });
    }
    // The keys and types are JSON arrays of text: each backend has its own
    // way to take one apart.
    let mut stmt = conn.prepare_cached(&match conn.backend() {
        Backend::Sqlite => format!(
            "{WAIT_SELECT} WHERE w.state = 'active' \
             AND EXISTS (SELECT 1 FROM json_each(w.keys) k WHERE k.value IN (SELECT value FROM json_each(?1))) \
             AND (w.types = '[]' OR EXISTS (SELECT 1 FROM json_each(w.types) t \
                  WHERE t.value IN (SELECT value FROM json_each(?2)))) \
             ORDER BY w.id LIMIT ?3"
        ),
        Backend::Postgres => format!(
            "{WAIT_SELECT} WHERE w.state = 'active' \
             AND EXISTS (SELECT 1 FROM jsonb_array_elements_text(w.keys::jsonb) k(v) \
                  WHERE k.v IN (SELECT jsonb_array_elements_text(?1::jsonb))) \
             AND (w.types = '[]' OR EXISTS (SELECT 1 FROM jsonb_array_elements_text(w.types::jsonb) t(v) \
                  WHERE t.v IN (SELECT jsonb_array_elements_text(?2::jsonb)))) \
             ORDER BY w.id LIMIT ?3"
        ),
    })?;
    let waits = stmt
        .query_map(
            params![list_text(&req.keys), list_text(&req.types), limit],
            wait_from_row,
        )?
        .collect::<crate::sql::Result<Vec<_>>>()?;
    Ok(WaitsResponse {
        waits,
        next: String::new(),
    })
}

/// A page of Waits.
pub fn waits(
    conn: &Connection,
    limits: &Limits,
    req: &WaitsRequest,
) -> Result<WaitsResponse, StoreError> {
    let limit = page_limit(req.limit, limits)?;
    check_opt_name("after", &req.after, limits)?;
    let work_id = req.work_id.clone().unwrap_or_default();
    let st = req.state.clone().unwrap_or_default();
    check_opt_name("work_id", &work_id, limits)?;
    check_opt_name("state", &st, limits)?;
    let mut sql = format!("{WAIT_SELECT} WHERE w.id > ?1");
    let mut args: Vec<&dyn crate::sql::ToSql> = vec![&req.after];
    if !work_id.is_empty() {
        args.push(&work_id);
        sql.push_str(&format!(" AND w.work_id = ?{}", args.len()));
    }
    if !st.is_empty() {
        args.push(&st);
        sql.push_str(&format!(" AND w.state = ?{}", args.len()));
    }
    args.push(&limit);
    sql.push_str(&format!(" ORDER BY w.id LIMIT ?{}", args.len()));
    let mut stmt = conn.prepare_cached(&sql)?;
    let waits = stmt
        .query_map(args.as_slice(), wait_from_row)?
        .collect::<crate::sql::Result<Vec<_>>>()?;
    let next = match waits.last() {
        Some(w) if waits.len() as i64 == limit => w.id.clone(),
        _ => String::new(),
    };
    Ok(WaitsResponse { waits, next })
}

impl Store {
    read_method!(waits, WaitsRequest, WaitsResponse);
    write_method!(wait_wake, WaitWakeRequest, WaitWakeResponse);
    write_method!(wait_progress, WaitProgressRequest, WaitProgressResponse);
    read_method!(waits_matching, WaitsMatchingRequest, WaitsResponse);
}

crate::store_methods! {
    WaitsRequest => waits,
    WaitWakeRequest => wait_wake,
    WaitProgressRequest => wait_progress,
    WaitsMatchingRequest => waits_matching,
}
