//! Holds on a Work's start (admission): `store.work_hold` places one for the
//! package whose `work.admit` asked for it, and `store.work_settle_hold` settles it
//! for that package alone, admitting the Work or cancelling it. An action's record
//! may settle one in the same write ([`settle_in`], from `store.action_accept`).
//!
//! A held Work stays `pending` (its input keeps arriving) but `store.works_ready`
//! does not offer it and `store.attempt_start` refuses it. A Work is held only
//! before its first attempt; closing it (cancel) drops its hold. An admitting
//! package is listed in `admitted` and not asked again; the settlement's key is
//! kept, so the same settlement again (a retried call, a redelivered action)
//! changes nothing, even after the Work was held anew.

use super::*;
pub use busapi::store::work::holds::*;
use protocol::wire::{WorkHold, MAX_HOLD_REASON_BYTES};

/// A hold as a Work row shows it, from its columns (no owner: not held).
pub(crate) fn hold_from(
    owner: Option<String>,
    reason: String,
    held_at: Option<String>,
) -> Option<WorkHold> {
    owner.map(|owner| WorkHold {
        owner,
        reason,
        held_at: held_at.unwrap_or_default(),
    })
}

/// What the hold columns of a Work say.
struct Held {
    state: String,
    scope_id: String,
    owner: Option<String>,
    key: Option<String>,
    admitted: Vec<String>,
}

fn held(conn: &Connection, work_id: &str) -> Result<Option<Held>, StoreError> {
    let row = conn
        .query_row(
            "SELECT state, scope_id, hold_owner, hold_key, admitted FROM works WHERE id = ?1",
            [work_id],
            |r| {
                let admitted: String = r.get(4)?;
                Ok(Held {
                    state: r.get(0)?,
                    scope_id: r.get(1)?,
                    owner: r.get(2)?,
                    key: r.get(3)?,
                    admitted: parse_list(&admitted),
                })
            },
        )
        .optional()?;
    Ok(row)
}

// ---------------------------------------------------------------------------------------
// store.work_hold
// ---------------------------------------------------------------------------------------

/// Hold a pending Work that has not started for `owner` (see the module doc). The
/// same owner's hold again is `held: false`; another owner's hold, a Work that is
/// not pending, has an attempt already, or was admitted by `owner` is `conflict`.
pub fn work_hold(
    conn: &Connection,
    limits: &Limits,
    req: &WorkHoldRequest,
) -> Result<WorkHoldResponse, StoreError> {
    check_name("work_id", &req.work_id, limits)?;
    check_name("owner", &req.owner, limits)?;
    check_text(
        "reason",
        &req.reason,
        MAX_HOLD_REASON_BYTES,
        "the hold reason limit",
    )?;
    if req.reason.contains('\n') {
        return Err(StoreError::invalid("a hold's reason is one line"));
    }
    let Some(w) = held(conn, &req.work_id)? else {
        return Err(StoreError::not_found(format!("no Work {}", req.work_id)));
    };
    match w.owner.as_deref() {
        Some(o) if o == req.owner => return Ok(WorkHoldResponse { held: false }),
        Some(o) => {
            return Err(StoreError::conflict(format!(
                "Work {} is held by {o} already",
                req.work_id
            )))
        }
        None => {}
    }
    if w.state != state::PENDING {
        return Err(StoreError::conflict(format!(
            "Work {} is {}: only a pending Work is held",
            req.work_id, w.state
        )));
    }
    if w.admitted.contains(&req.owner) {
        return Err(StoreError::conflict(format!(
            "Work {} was admitted by {} already",
            req.work_id, req.owner
        )));
    }
    let started: Option<i64> = conn
        .query_row(
            "SELECT attempt FROM executions WHERE work_id = ?1 LIMIT 1",
            [&req.work_id],
            |r| r.get(0),
        )
        .optional()?;
    if started.is_some() {
        return Err(StoreError::conflict(format!(
            "Work {} has started already: only a Work's first attempt is held",
            req.work_id
        )));
    }
    let now = util::now();
    conn.execute(
        "UPDATE works SET hold_owner = ?2, hold_reason = ?3, held_at = ?4 WHERE id = ?1",
        params![req.work_id, req.owner, req.reason, now],
    )?;
    touch(conn, &req.work_id, &now)?;
    Ok(WorkHoldResponse { held: true })
}

// ---------------------------------------------------------------------------------------
// store.work_settle_hold
// ---------------------------------------------------------------------------------------

/// Settle `owner`'s hold on a Work (see the module doc).
pub fn work_settle_hold(
    conn: &Connection,
    limits: &Limits,
    req: &WorkSettleHoldRequest,
) -> Result<WorkSettleHoldResponse, StoreError> {
    check_name("work_id", &req.work_id, limits)?;
    check_name("owner", &req.owner, limits)?;
    check_name("key", &req.key, limits)?;
    check_text("reason", &req.reason, MAX_REASON_BYTES, "the reason limit")?;
    if let Some(scopes) = &req.scopes {
        check_list("scopes", scopes, limits)?;
    }
    let not_found = || StoreError::not_found(format!("no Work {}", req.work_id));
    let scope = held(conn, &req.work_id)?.ok_or_else(not_found)?.scope_id;
    if req
        .scopes
        .as_ref()
        .is_some_and(|scopes| !scopes.contains(&scope))
    {
        return Err(not_found());
    }
    let settle = HoldSettle {
        owner: req.owner.clone(),
        admit: req.admit,
        reason: req.reason.clone(),
    };
    let settled = settle_in(conn, &req.work_id, &settle, &req.key, &util::now())?;
    let work_state: String = conn.query_row(
        "SELECT state FROM works WHERE id = ?1",
        [&req.work_id],
        |r| r.get(0),
    )?;
    Ok(WorkSettleHoldResponse {
        settled,
        work_state,
    })
}

/// Whether `owner` holds `work_id` now, and has not settled it with `key` before.
pub(crate) fn can_settle(
    conn: &Connection,
    work_id: &str,
    owner: &str,
    key: &str,
) -> Result<bool, StoreError> {
    Ok(held(conn, work_id)?
        .is_some_and(|w| w.owner.as_deref() == Some(owner) && w.key.as_deref() != Some(key)))
}

/// Settle `settle.owner`'s hold on `work_id` under `key`, in the caller's
/// transaction: admitted, the hold goes and the owner joins `admitted`; refused, the
/// Work is closed `cancelled` with the reason. Answers false (writing nothing) when
/// the Work has no hold of that owner's or was settled with `key` before.
pub(crate) fn settle_in(
    conn: &Connection,
    work_id: &str,
    settle: &HoldSettle,
    key: &str,
    now: &str,
) -> Result<bool, StoreError> {
    let Some(w) = held(conn, work_id)? else {
        return Ok(false);
    };
    if w.owner.as_deref() != Some(settle.owner.as_str()) || w.key.as_deref() == Some(key) {
        return Ok(false);
    }
    let mut admitted = w.admitted;
    if settle.admit && !admitted.contains(&settle.owner) {
        admitted.push(settle.owner.clone());
    }
    conn.execute(
        "UPDATE works SET hold_owner = NULL, hold_reason = '', held_at = NULL, hold_key = ?2, \
         admitted = ?3 WHERE id = ?1",
        params![work_id, key, list_text(&admitted)],
    )?;
    if settle.admit {
        touch(conn, work_id, now)?;
    } else {
        super::reads::close_in(conn, work_id, state::CANCELLED, &settle.reason, now)?;
    }
    Ok(true)
}
