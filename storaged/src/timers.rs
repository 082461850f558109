//! Timers: recurrences, Wait timeouts and retries, armed by (owner, kind, scope, key)
//! and fired atomically: `store.timer_fire` deletes (or re-arms) a timer only while it
//! still has the due time its caller read, so two schedulers never both fire it.
//!
//! Every arming (an arm, a re-arm by `timer_arm`, a re-arm as it fires) takes a new
//! ID, so a fire that read an earlier arming is refused even at the same due time.

use crate::db::{Limits, Store};
use crate::error::StoreError;
use crate::fields::{check_name, check_opt_name, json_text, page_limit, parse_json};
use crate::rpc::{read_method, write_method};
use crate::sql::{params, Connection, OptionalExtension, Row};
use crate::util;
pub use busapi::store::timers::*;
use serde_json::Value;

const TIMER_COLS: &str = "id, owner, kind, scope_id, key, due_ms, spec, payload, created_at";

fn timer_from_row(r: &Row<'_>) -> crate::sql::Result<TimerRow> {
    let due_ms: i64 = r.get(5)?;
    Ok(TimerRow {
        id: r.get(0)?,
        owner: r.get(1)?,
        kind: r.get(2)?,
        scope_id: r.get(3)?,
        key: r.get(4)?,
        due_ms,
        due_at: util::rfc3339(due_ms),
        spec: parse_json(r.get(6)?),
        payload: parse_json(r.get(7)?),
        created_at: r.get(8)?,
    })
}

/// What to arm.
pub(crate) struct Arm<'a> {
    pub owner: &'a str,
    pub kind: &'a str,
    pub scope_id: &'a str,
    pub key: &'a str,
    pub due_ms: i64,
    pub spec: Option<String>,
    pub payload: Option<String>,
}

/// Arm (or re-arm) a timer under a new ID: `(id, replaced)`.
pub(crate) fn arm_in(
    conn: &Connection,
    a: &Arm<'_>,
    now: &str,
) -> Result<(String, bool), StoreError> {
    let replaced = conn.execute(
        "DELETE FROM timers WHERE owner = ?1 AND kind = ?2 AND scope_id = ?3 AND key = ?4",
        params![a.owner, a.kind, a.scope_id, a.key],
    )? > 0;
    let id = util::new_id("tmr");
    conn.execute(
        "INSERT INTO timers (id, owner, kind, scope_id, key, due_ms, spec, payload, created_at) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
        params![id, a.owner, a.kind, a.scope_id, a.key, a.due_ms, a.spec, a.payload, now],
    )?;
    Ok((id, replaced))
}

fn opt_json(field: &str, v: &Option<Value>, limits: &Limits) -> Result<Option<String>, StoreError> {
    match v {
        Some(v) if !v.is_null() => Ok(Some(json_text(field, v, limits)?)),
        _ => Ok(None),
    }
}

fn load(conn: &Connection, id: &str) -> Result<Option<TimerRow>, StoreError> {
    Ok(conn
        .query_row(
            &format!("SELECT {TIMER_COLS} FROM timers WHERE id = ?1"),
            [id],
            timer_from_row,
        )
        .optional()?)
}

// ---------------------------------------------------------------------------------------
// store.timer_arm, store.timer_cancel
// ---------------------------------------------------------------------------------------

/// Arm a timer.
pub fn timer_arm(
    conn: &Connection,
    limits: &Limits,
    req: &TimerArmRequest,
) -> Result<TimerArmResponse, StoreError> {
    check_name("owner", &req.owner, limits)?;
    check_name("kind", &req.kind, limits)?;
    check_opt_name("scope_id", &req.scope_id, limits)?;
    check_name("key", &req.key, limits)?;
    let spec = opt_json("spec", &req.spec, limits)?;
    let payload = opt_json("payload", &req.payload, limits)?;
    let (id, replaced) = arm_in(
        conn,
        &Arm {
            owner: &req.owner,
            kind: &req.kind,
            scope_id: &req.scope_id,
            key: &req.key,
            due_ms: req.due_ms,
            spec,
            payload,
        },
        &util::now(),
    )?;
    let timer = load(conn, &id)?
        .ok_or_else(|| StoreError::Internal(format!("timer {id} vanished while armed")))?;
    Ok(TimerArmResponse { timer, replaced })
}

/// Cancel a timer.
pub fn timer_cancel(
    conn: &Connection,
    limits: &Limits,
    req: &TimerCancelRequest,
) -> Result<TimerCancelResponse, StoreError> {
    check_name("owner", &req.owner, limits)?;
    check_name("kind", &req.kind, limits)?;
    check_opt_name("scope_id", &req.scope_id, limits)?;
    check_name("key", &req.key, limits)?;
    let n = conn.execute(
        "DELETE FROM timers WHERE owner = ?1 AND kind = ?2 AND scope_id = ?3 AND key = ?4",
        params![req.owner, req.kind, req.scope_id, req.key],
    )?;
    Ok(TimerCancelResponse { cancelled: n > 0 })
}

// ---------------------------------------------------------------------------------------
// store.timers_due, store.timer_fire
// ---------------------------------------------------------------------------------------

/// Timers due.
pub fn timers_due(
    conn: &Connection,
    limits: &Limits,
    req: &TimersDueRequest,
) -> Result<TimersResponse, StoreError> {
    let limit = page_limit(req.limit, limits)?;
    let mut stmt = conn.prepare_cached(&format!(
        "SELECT {TIMER_COLS} FROM timers WHERE due_ms <= ?1 ORDER BY due_ms, id LIMIT ?2"
    ))?;
    let timers = stmt
        .query_map(params![req.now_ms, limit], timer_from_row)?
        .collect::<crate::sql::Result<Vec<_>>>()?;
    Ok(TimersResponse {
        timers,
        next: String::new(),
    })
}

/// Fire a timer.
pub fn timer_fire(
    conn: &Connection,
    limits: &Limits,
    req: &TimerFireRequest,
) -> Result<TimerFireResponse, StoreError> {
    check_name("id", &req.id, limits)?;
    let payload = opt_json("payload", &req.payload, limits)?;
    if payload.is_some() && req.rearm_due_ms.is_none() {
        return Err(StoreError::invalid(
            "a payload goes only with rearm_due_ms (it is the re-armed timer's)",
        ));
    }
    let Some(fired) = load(conn, &req.id)? else {
        return Err(StoreError::conflict(format!(
            "timer {} is no longer armed (fired, cancelled or re-armed)",
            req.id
        )));
    };
    if fired.due_ms != req.expect_due_ms {
        return Err(StoreError::conflict(format!(
            "timer {} is due at {}, not {}",
            req.id, fired.due_ms, req.expect_due_ms
        )));
    }
    conn.execute("DELETE FROM timers WHERE id = ?1", [&req.id])?;
    let rearmed = match req.rearm_due_ms {
        Some(due) => {
            let spec = if fired.spec.is_null() {
                None
            } else {
                Some(fired.spec.to_string())
            };
            let payload = payload.or_else(|| {
                if fired.payload.is_null() {
                    None
                } else {
                    Some(fired.payload.to_string())
                }
            });
            let (id, _) = arm_in(
                conn,
                &Arm {
                    owner: &fired.owner,
                    kind: &fired.kind,
                    scope_id: &fired.scope_id,
                    key: &fired.key,
                    due_ms: due,
                    spec,
                    payload,
                },
                &util::now(),
            )?;
            load(conn, &id)?
        }
        None => None,
    };
    Ok(TimerFireResponse { fired, rearmed })
}

// ---------------------------------------------------------------------------------------
// store.timers
// ---------------------------------------------------------------------------------------

/// A page of timers.
pub fn timers(
    conn: &Connection,
    limits: &Limits,
    req: &TimersRequest,
) -> Result<TimersResponse, StoreError> {
    let limit = page_limit(req.limit, limits)?;
    check_opt_name("after", &req.after, limits)?;
    let mut sql = format!("SELECT {TIMER_COLS} FROM timers WHERE id > ?1");
    let mut args: Vec<&dyn crate::sql::ToSql> = vec![&req.after];
    for (col, v) in [("owner", &req.owner), ("scope_id", &req.scope_id)] {
        if let Some(v) = v {
            check_opt_name(col, v, limits)?;
            args.push(v);
            sql.push_str(&format!(" AND {col} = ?{}", args.len()));
        }
    }
    args.push(&limit);
    sql.push_str(&format!(" ORDER BY id LIMIT ?{}", args.len()));
    let mut stmt = conn.prepare(&sql)?;
    let timers = stmt
        .query_map(args.as_slice(), timer_from_row)?
        .collect::<crate::sql::Result<Vec<_>>>()?;
    let next = match timers.last() {
        Some(t) if timers.len() as i64 == limit => t.id.clone(),
        _ => String::new(),
    };
    Ok(TimersResponse { timers, next })
}

impl Store {
    write_method!(timer_arm, TimerArmRequest, TimerArmResponse);
    write_method!(timer_cancel, TimerCancelRequest, TimerCancelResponse);
    read_method!(timers_due, TimersDueRequest, TimersResponse);
    write_method!(timer_fire, TimerFireRequest, TimerFireResponse);
    read_method!(timers, TimersRequest, TimersResponse);
}

crate::store_methods! {
    TimerArmRequest => timer_arm,
    TimerCancelRequest => timer_cancel,
    TimersDueRequest => timers_due,
    TimerFireRequest => timer_fire,
    TimersRequest => timers,
}
