//! `store.work_cancel` and the Work reads: `store.work_get`, `store.works`,
//! `store.executions`, `store.work_inputs`.

use super::*;
pub use busapi::store::work::reads::*;

// ---------------------------------------------------------------------------------------
// store.work_cancel
// ---------------------------------------------------------------------------------------

/// Cancel a Work.
pub fn work_cancel(
    conn: &Connection,
    limits: &Limits,
    req: &WorkCancelRequest,
) -> Result<WorkCancelResponse, StoreError> {
    check_name("work_id", &req.work_id, limits)?;
    check_text("reason", &req.reason, MAX_REASON_BYTES, "the reason limit")?;
    let work: Option<(String, i64, i64)> = conn
        .query_row(
            "SELECT state, lease_epoch, version FROM works WHERE id = ?1",
            [&req.work_id],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
        )
        .optional()?;
    let Some((st, _epoch, version)) = work else {
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
    if matches!(
        st.as_str(),
        state::COMPLETED | state::FAILED | state::CANCELLED
    ) {
        return Err(StoreError::conflict(format!(
            "Work {} is already {st}",
            req.work_id
        )));
    }
    let now = util::now();
    let (execution_id, epoch, wait_id) =
        close_in(conn, &req.work_id, state::CANCELLED, &req.reason, &now)?;
    Ok(WorkCancelResponse {
        execution_id,
        epoch,
        wait_id,
    })
}

/// Close an open Work as `completed` or `cancelled`, in the caller's transaction
/// (its hold, if it has one, goes): its running or waiting execution is settled `cancelled` (its lease fenced by a new
/// epoch, so the host running it stops it), its active Wait cancelled, its pending
/// and taken inputs `done` (completed) or `cancelled`. Answers the execution it
/// settled, the new epoch and the Wait it cancelled.
pub(crate) fn close_in(
    conn: &Connection,
    work_id: &str,
    to: &str,
    reason: &str,
    now: &str,
) -> Result<(Option<String>, i64, Option<String>), StoreError> {
    let epoch: i64 = conn.query_row(
        "SELECT lease_epoch FROM works WHERE id = ?1",
        [work_id],
        |r| r.get(0),
    )?;
    let execution_id: Option<String> = conn
        .query_row(
            "SELECT id FROM executions WHERE work_id = ?1 AND state IN ('running', 'waiting') \
             ORDER BY attempt DESC LIMIT 1",
            [work_id],
            |r| r.get(0),
        )
        .optional()?;
    if let Some(id) = &execution_id {
        let key = if to == state::CANCELLED {
            "cancelled"
        } else {
            "closed"
        };
        let result = serde_json::json!({ key: reason }).to_string();
        conn.execute(
            "UPDATE executions SET state = 'cancelled', lease_expires_ms = NULL, \
             settled_at = ?2, result = ?3 WHERE id = ?1",
            params![id, now, result],
        )?;
    }
    let wait_id = super::waits::cancel_active_in(conn, work_id, now)?;
    let inputs = if to == state::CANCELLED {
        "cancelled"
    } else {
        "done"
    };
    conn.execute(
        "UPDATE work_inputs SET state = ?2 WHERE work_id = ?1 AND state IN ('pending', 'taken')",
        params![work_id, inputs],
    )?;
    let epoch = epoch + 1;
    conn.execute(
        "UPDATE works SET state = ?3, lease_epoch = ?2, retry_at_ms = NULL, hold_owner = NULL, \
         hold_reason = '', held_at = NULL WHERE id = ?1",
        params![work_id, epoch, to],
    )?;
    touch(conn, work_id, now)?;
    Ok((execution_id, epoch, wait_id))
}

// ---------------------------------------------------------------------------------------
// Reads: store.work_get, store.works, store.executions, store.work_inputs
// ---------------------------------------------------------------------------------------

/// One Work (`not_found` when absent).
pub fn work_get(
    conn: &Connection,
    limits: &Limits,
    req: &WorkGetRequest,
) -> Result<WorkGetResponse, StoreError> {
    check_name("id", &req.id, limits)?;
    match load_work(conn, &req.id, limits)? {
        Some(work) => Ok(WorkGetResponse { work }),
        None => Err(StoreError::not_found(format!("no Work {}", req.id))),
    }
}

/// A page of Works.
pub fn works(
    conn: &Connection,
    limits: &Limits,
    req: &WorksRequest,
) -> Result<WorksResponse, StoreError> {
    let limit = page_limit(req.limit, limits)?;
    check_opt_name("after", &req.after, limits)?;
    // By ID, the cursor is the last ID; the last changed first, it is
    // `<updated_at>|<id>` of the last one (nothing before the first page).
    let (cursor_at, cursor_id) = match req.after.split_once('|') {
        Some((at, id)) if req.recent => (at.to_owned(), id.to_owned()),
        _ if req.recent && !req.after.is_empty() => {
            return Err(StoreError::invalid(
                "after: with recent, the cursor is a page's next (<updated_at>|<id>)",
            ))
        }
        _ => (String::new(), req.after.clone()),
    };
    let mut args: Vec<&dyn crate::sql::ToSql> = Vec::new();
    let mut sql = if !req.recent {
        args.push(&cursor_id);
        format!("SELECT {WORK_COLS} FROM works WHERE id > ?1")
    } else if req.after.is_empty() {
        format!("SELECT {WORK_COLS} FROM works WHERE 1 = 1")
    } else {
        args.push(&cursor_at);
        args.push(&cursor_id);
        format!(
            "SELECT {WORK_COLS} FROM works WHERE (updated_at < ?1 OR (updated_at = ?1 AND id < ?2))"
        )
    };
    for (col, v) in [
        ("scope_id", &req.scope_id),
        ("state", &req.state),
        ("kind", &req.kind),
    ] {
        if let Some(v) = v {
            check_opt_name(col, v, limits)?;
            args.push(v);
            sql.push_str(&format!(" AND {col} = ?{}", args.len()));
        }
    }
    if let Some(k) = &req.key {
        check_opt_name("key", k, limits)?;
        args.push(k);
        sql.push_str(&format!(
            " AND id IN (SELECT work_id FROM work_keys WHERE key = ?{})",
            args.len()
        ));
    }
    args.push(&limit);
    let order = if req.recent {
        "updated_at DESC, id DESC"
    } else {
        "id"
    };
    sql.push_str(&format!(" ORDER BY {order} LIMIT ?{}", args.len()));
    let works = works_query(conn, &sql, &args, limits)?;
    let next = match works.last() {
        Some(w) if works.len() as i64 == limit && req.recent => {
            format!("{}|{}", w.updated_at, w.id)
        }
        Some(w) if works.len() as i64 == limit => w.id.clone(),
        _ => String::new(),
    };
    Ok(WorksResponse { works, next })
}

/// A page of executions.
pub fn executions(
    conn: &Connection,
    limits: &Limits,
    req: &ExecutionsRequest,
) -> Result<ExecutionsResponse, StoreError> {
    let limit = page_limit(req.limit, limits)?;
    check_opt_name("after", &req.after, limits)?;
    let mut args: Vec<&dyn crate::sql::ToSql> = Vec::new();
    let mut sql = format!("SELECT {EXEC_COLS} FROM executions WHERE 1 = 1");
    // A Work's executions page by attempt number (the cursor is the number).
    let after_attempt: i64;
    if let Some(w) = &req.work_id {
        check_opt_name("work_id", w, limits)?;
        after_attempt = if req.after.is_empty() {
            0
        } else {
            req.after.parse().map_err(|_| {
                StoreError::invalid("after must be an attempt number when work_id is given")
            })?
        };
        args.push(w);
        sql.push_str(&format!(" AND work_id = ?{}", args.len()));
        args.push(&after_attempt);
        sql.push_str(&format!(" AND attempt > ?{}", args.len()));
    } else {
        args.push(&req.after);
        sql.push_str(&format!(" AND id > ?{}", args.len()));
    }
    if let Some(s) = &req.state {
        check_opt_name("state", s, limits)?;
        args.push(s);
        sql.push_str(&format!(" AND state = ?{}", args.len()));
    }
    if let Some(h) = &req.host {
        check_opt_name("host", h, limits)?;
        args.push(h);
        sql.push_str(&format!(" AND host = ?{}", args.len()));
    }
    if let Some(t) = &req.settled_since {
        check_opt_name("settled_since", t, limits)?;
        args.push(t);
        sql.push_str(&format!(" AND settled_at >= ?{}", args.len()));
    }
    args.push(&limit);
    let order = if req.work_id.is_some() {
        "attempt"
    } else {
        "id"
    };
    sql.push_str(&format!(" ORDER BY {order} LIMIT ?{}", args.len()));
    let mut stmt = conn.prepare_cached(&sql)?;
    let executions = stmt
        .query_map(args.as_slice(), exec_from_row)?
        .collect::<crate::sql::Result<Vec<_>>>()?;
    let next = match executions.last() {
        Some(e) if executions.len() as i64 == limit => {
            if req.work_id.is_some() {
                e.attempt.to_string()
            } else {
                e.id.clone()
            }
        }
        _ => String::new(),
    };
    Ok(ExecutionsResponse { executions, next })
}

/// A page of a Work's inputs.
pub fn work_inputs(
    conn: &Connection,
    limits: &Limits,
    req: &WorkInputsRequest,
) -> Result<WorkInputsResponse, StoreError> {
    check_name("work_id", &req.work_id, limits)?;
    let limit = page_limit(req.limit, limits)?;
    let state = req.state.clone().unwrap_or_default();
    check_opt_name("state", &state, limits)?;
    let mut stmt = conn.prepare_cached(
        "SELECT seq, state, attempt_id FROM work_inputs WHERE work_id = ?1 AND seq > ?2 \
         AND (?3 = '' OR state = ?3) ORDER BY seq LIMIT ?4",
    )?;
    let inputs = stmt
        .query_map(params![req.work_id, req.after, state, limit], |r| {
            Ok(WorkInput {
                seq: r.get(0)?,
                state: r.get(1)?,
                attempt_id: r.get(2)?,
            })
        })?
        .collect::<crate::sql::Result<Vec<_>>>()?;
    let next = inputs.last().map_or(req.after, |i| i.seq);
    Ok(WorkInputsResponse { inputs, next })
}
