//! Attempts under fenced leases: `store.attempt_start`, `store.lease_renew`,
//! `store.lease_takeover`, `store.recovery_persist`, `store.attempt_settle`, and the
//! reads schedulerd polls (`store.expired_leases`, `store.works_ready`).

use super::*;
pub use busapi::store::work::attempts::*;

// ---------------------------------------------------------------------------------------
// store.attempt_start
// ---------------------------------------------------------------------------------------

/// Start or resume an attempt.
pub fn attempt_start(
    conn: &Connection,
    limits: &Limits,
    req: &AttemptStartRequest,
) -> Result<AttemptStartResponse, StoreError> {
    check_name("work_id", &req.work_id, limits)?;
    check_name("executor", &req.executor, limits)?;
    check_opt_name("binding", &req.binding, limits)?;
    check_name("lease_owner", &req.lease_owner, limits)?;
    if !req.host.is_empty() {
        check_host("host", &req.host)?;
    }
    let ttl = lease_ttl(req.lease_ttl_ms)?;

    let work: Option<(String, i64, i64, Option<String>)> = conn
        .query_row(
            "SELECT state, lease_epoch, version, hold_owner FROM works WHERE id = ?1",
            [&req.work_id],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)),
        )
        .optional()?;
    let Some((st, epoch, version, hold)) = work else {
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
    if let Some(owner) = hold {
        return Err(StoreError::conflict(format!(
            "Work {} is held by {owner}: it starts once admitted",
            req.work_id
        )));
    }
    let pending: Vec<i64> = {
        let mut stmt = conn.prepare_cached(
            "SELECT seq FROM work_inputs WHERE work_id = ?1 AND state = 'pending' ORDER BY seq",
        )?;
        stmt.query_map([&req.work_id], |r| r.get(0))?
            .collect::<crate::sql::Result<Vec<i64>>>()?
    };
    let resume = match st.as_str() {
        state::PENDING if !pending.is_empty() => false,
        state::PENDING => {
            return Err(StoreError::conflict(format!(
                "Work {} has no pending input",
                req.work_id
            )))
        }
        state::WOKEN => true,
        state::RUNNING => {
            return Err(StoreError::conflict(format!(
                "Work {} is already running an attempt",
                req.work_id
            )))
        }
        other => {
            return Err(StoreError::conflict(format!(
                "Work {} is {other}: nothing to start",
                req.work_id
            )))
        }
    };

    let now_ms = util::now_ms();
    let now = util::rfc3339(now_ms);
    let epoch = epoch + 1;
    let expires = now_ms.saturating_add(ttl);
    let (execution_id, attempt, wait_id) = if resume {
        let exec: Option<(String, i64)> = conn
            .query_row(
                "SELECT id, attempt FROM executions WHERE work_id = ?1 AND state = 'waiting' \
                 ORDER BY attempt DESC LIMIT 1",
                [&req.work_id],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .optional()?;
        let Some((id, attempt)) = exec else {
            return Err(StoreError::Internal(format!(
                "Work {} is woken but has no waiting execution",
                req.work_id
            )));
        };
        conn.execute(
            "UPDATE executions SET state = 'running', lease_epoch = ?2, lease_owner = ?3, \
             lease_expires_ms = ?4, host = ?5 WHERE id = ?1",
            params![id, epoch, req.lease_owner, expires, req.host],
        )?;
        let wait_id: Option<String> = conn
            .query_row(
                "SELECT id FROM waits WHERE execution_id = ?1 AND state != 'active' \
                 ORDER BY created_at DESC LIMIT 1",
                [&id],
                |r| r.get(0),
            )
            .optional()?;
        (id, attempt, wait_id)
    } else {
        let attempt: i64 = conn.query_row(
            "SELECT COALESCE(MAX(attempt), 0) + 1 FROM executions WHERE work_id = ?1",
            [&req.work_id],
            |r| r.get(0),
        )?;
        let id = util::new_id("exe");
        conn.execute(
            "INSERT INTO executions (id, work_id, attempt, executor, binding, state, lease_owner, \
             lease_epoch, lease_expires_ms, started_at, host) \
             VALUES (?1, ?2, ?3, ?4, ?5, 'running', ?6, ?7, ?8, ?9, ?10)",
            params![
                id,
                req.work_id,
                attempt,
                req.executor,
                req.binding,
                req.lease_owner,
                epoch,
                expires,
                now,
                req.host
            ],
        )?;
        (id, attempt, None)
    };
    conn.execute(
        "UPDATE work_inputs SET state = 'taken', attempt_id = ?2 \
         WHERE work_id = ?1 AND state = 'pending'",
        params![req.work_id, execution_id],
    )?;
    conn.execute(
        "UPDATE works SET state = 'running', lease_epoch = ?2, retry_at_ms = NULL WHERE id = ?1",
        params![req.work_id, epoch],
    )?;
    touch(conn, &req.work_id, &now)?;
    Ok(AttemptStartResponse {
        execution_id,
        attempt,
        epoch,
        lease_expires_ms: expires,
        inputs: pending,
        resumed: resume,
        wait_id,
    })
}

// ---------------------------------------------------------------------------------------
// The fence
// ---------------------------------------------------------------------------------------

struct Fenced {
    work_id: String,
    lease_expires_ms: Option<i64>,
    host: String,
}

/// The execution, if `epoch` is the current epoch of its Work and its own, and it runs.
fn fence(conn: &Connection, execution_id: &str, epoch: i64) -> Result<Fenced, StoreError> {
    let row: Option<(String, String, i64, i64, Option<i64>, String)> = conn
        .query_row(
            "SELECT e.work_id, e.state, e.lease_epoch, w.lease_epoch, e.lease_expires_ms, e.host \
             FROM executions e JOIN works w ON w.id = e.work_id WHERE e.id = ?1",
            [execution_id],
            |r| {
                Ok((
                    r.get(0)?,
                    r.get(1)?,
                    r.get(2)?,
                    r.get(3)?,
                    r.get(4)?,
                    r.get(5)?,
                ))
            },
        )
        .optional()?;
    let Some((work_id, st, exec_epoch, work_epoch, lease_expires_ms, host)) = row else {
        return Err(StoreError::not_found(format!(
            "no execution {execution_id}"
        )));
    };
    if epoch != exec_epoch || epoch != work_epoch {
        return Err(StoreError::conflict(format!(
            "lease epoch {epoch} of execution {execution_id} is fenced: the current epoch is {work_epoch}"
        )));
    }
    if st != "running" {
        return Err(StoreError::conflict(format!(
            "execution {execution_id} is {st}, not running"
        )));
    }
    Ok(Fenced {
        work_id,
        lease_expires_ms,
        host,
    })
}

fn taken_inputs(conn: &Connection, execution_id: &str) -> Result<Vec<i64>, StoreError> {
    let mut stmt = conn.prepare_cached(
        "SELECT seq FROM work_inputs WHERE attempt_id = ?1 AND state = 'taken' ORDER BY seq",
    )?;
    let v = stmt
        .query_map([execution_id], |r| r.get(0))?
        .collect::<crate::sql::Result<Vec<i64>>>()?;
    Ok(v)
}

fn pending_inputs(conn: &Connection, work_id: &str) -> Result<Vec<i64>, StoreError> {
    let mut stmt = conn.prepare_cached(
        "SELECT seq FROM work_inputs WHERE work_id = ?1 AND state = 'pending' ORDER BY seq",
    )?;
    let v = stmt
        .query_map([work_id], |r| r.get(0))?
        .collect::<crate::sql::Result<Vec<i64>>>()?;
    Ok(v)
}

// ---------------------------------------------------------------------------------------
// store.lease_renew, store.lease_takeover, store.recovery_persist
// ---------------------------------------------------------------------------------------

/// Renew a lease.
pub fn lease_renew(
    conn: &Connection,
    limits: &Limits,
    req: &LeaseRenewRequest,
) -> Result<LeaseRenewResponse, StoreError> {
    check_name("execution_id", &req.execution_id, limits)?;
    let ttl = lease_ttl(req.lease_ttl_ms)?;
    fence(conn, &req.execution_id, req.epoch)?;
    let expires = util::now_ms().saturating_add(ttl);
    conn.execute(
        "UPDATE executions SET lease_expires_ms = ?2 WHERE id = ?1",
        params![req.execution_id, expires],
    )?;
    Ok(LeaseRenewResponse {
        lease_expires_ms: expires,
    })
}

/// Take over an expired lease.
pub fn lease_takeover(
    conn: &Connection,
    limits: &Limits,
    req: &LeaseTakeoverRequest,
) -> Result<LeaseTakeoverResponse, StoreError> {
    check_name("execution_id", &req.execution_id, limits)?;
    check_name("lease_owner", &req.lease_owner, limits)?;
    if !req.host.is_empty() {
        check_host("host", &req.host)?;
    }
    let ttl = lease_ttl(req.lease_ttl_ms)?;
    let f = fence(conn, &req.execution_id, req.epoch)?;
    let now_ms = util::now_ms();
    if let Some(exp) = f.lease_expires_ms {
        if exp > now_ms {
            return Err(StoreError::conflict(format!(
                "the lease of execution {} is live until {}",
                req.execution_id,
                util::rfc3339(exp)
            )));
        }
    }
    let mut host_gone_ms = None;
    if !req.host.is_empty() && !f.host.is_empty() && f.host != req.host {
        // The host's lease by the database's clock, the database's absence not counted.
        let db_now = observe(conn)?;
        let expires = host_expires(conn, &f.host)?;
        if let Some(exp) = expires.filter(|e| *e > db_now) {
            return Err(StoreError::conflict(format!(
                "execution {} runs on host {}, alive until {} unless it beats again: only it \
                 may take the attempt over",
                req.execution_id,
                f.host,
                util::rfc3339(exp)
            )));
        }
        host_gone_ms = Some(expires.unwrap_or(0));
    }
    let epoch = req.epoch + 1;
    let expires = now_ms.saturating_add(ttl);
    conn.execute(
        "UPDATE executions SET lease_epoch = ?2, lease_owner = ?3, lease_expires_ms = ?4 \
         WHERE id = ?1",
        params![req.execution_id, epoch, req.lease_owner, expires],
    )?;
    conn.execute(
        "UPDATE works SET lease_epoch = ?2 WHERE id = ?1",
        params![f.work_id, epoch],
    )?;
    touch(conn, &f.work_id, &util::rfc3339(now_ms))?;
    let recovery: Option<String> = conn.query_row(
        "SELECT recovery FROM executions WHERE id = ?1",
        [&req.execution_id],
        |r| r.get(0),
    )?;
    Ok(LeaseTakeoverResponse {
        inputs: taken_inputs(conn, &req.execution_id)?,
        work_id: f.work_id,
        epoch,
        lease_expires_ms: expires,
        recovery: parse_json(recovery),
        host: f.host,
        host_gone_ms,
    })
}

/// Persist recovery metadata.
pub fn recovery_persist(
    conn: &Connection,
    limits: &Limits,
    req: &RecoveryPersistRequest,
) -> Result<RecoveryPersistResponse, StoreError> {
    check_name("execution_id", &req.execution_id, limits)?;
    let text = json_text("recovery", &req.recovery, limits)?;
    fence(conn, &req.execution_id, req.epoch)?;
    conn.execute(
        "UPDATE executions SET recovery = ?2 WHERE id = ?1",
        params![req.execution_id, text],
    )?;
    Ok(RecoveryPersistResponse {})
}

// ---------------------------------------------------------------------------------------
// store.attempt_settle
// ---------------------------------------------------------------------------------------

/// Settle an attempt.
pub fn attempt_settle(
    conn: &Connection,
    limits: &Limits,
    req: &AttemptSettleRequest,
) -> Result<AttemptSettleResponse, StoreError> {
    check_name("execution_id", &req.execution_id, limits)?;
    let result_text = match &req.result {
        Some(v) if !v.is_null() => Some(json_text("result", v, limits)?),
        _ => None,
    };
    if req.outcome != Outcome::Failed && (req.retry_at_ms.is_some() || req.final_failure) {
        return Err(StoreError::invalid(
            "retry_at_ms and final go only with a failed outcome",
        ));
    }
    match (&req.outcome, &req.wait) {
        (Outcome::Waiting, None) => {
            return Err(StoreError::invalid("a waiting outcome needs its wait"));
        }
        (Outcome::Waiting, Some(w)) => {
            check_opt_name("wait owner", &w.owner, limits)?;
            check_list("wait keys", &w.keys, limits)?;
            check_list("wait types", &w.types, limits)?;
            if let Some(p) = &w.plan {
                json_text("wait plan", p, limits)?;
            }
            check_text(
                "wait description",
                &w.description,
                limits.max_value_bytes,
                "max_value_bytes",
            )?;
        }
        (_, Some(_)) => {
            return Err(StoreError::invalid("only a waiting outcome carries a wait"));
        }
        _ => {}
    }

    check_list("consumed", &req.consumed, limits)?;
    let f = fence(conn, &req.execution_id, req.epoch)?;
    let work_id = f.work_id;
    for id in &req.consumed {
        conn.execute(
            "UPDATE work_inputs SET state = 'done', attempt_id = ?1 \
             WHERE work_id = ?2 AND state = 'pending' \
             AND seq = (SELECT seq FROM events WHERE id = ?3)",
            params![req.execution_id, work_id, id],
        )?;
    }
    let now_ms = util::now_ms();
    let now = util::rfc3339(now_ms);
    let mut wait_id = None;
    let mut timer_id = None;
    let (exec_state, work_state) = match req.outcome {
        Outcome::Completed | Outcome::Handoff => {
            conn.execute(
                "UPDATE work_inputs SET state = 'done' WHERE attempt_id = ?1 AND state = 'taken'",
                [&req.execution_id],
            )?;
            let has_pending = !pending_inputs(conn, &work_id)?.is_empty();
            let (es, ws) = if req.outcome == Outcome::Completed {
                (
                    "completed",
                    if has_pending {
                        state::PENDING
                    } else {
                        state::COMPLETED
                    },
                )
            } else {
                (
                    "handoff",
                    if has_pending {
                        state::PENDING
                    } else {
                        state::IDLE
                    },
                )
            };
            conn.execute(
                "UPDATE works SET failures = 0, retry_at_ms = NULL WHERE id = ?1",
                [&work_id],
            )?;
            (es, ws)
        }
        Outcome::Failed => {
            if req.final_failure {
                conn.execute(
                    "UPDATE work_inputs SET state = 'failed' \
                     WHERE attempt_id = ?1 AND state = 'taken'",
                    [&req.execution_id],
                )?;
                conn.execute(
                    "UPDATE works SET failures = failures + 1, retry_at_ms = NULL WHERE id = ?1",
                    [&work_id],
                )?;
                ("failed", state::FAILED)
            } else {
                conn.execute(
                    "UPDATE work_inputs SET state = 'pending', attempt_id = NULL \
                     WHERE attempt_id = ?1 AND state = 'taken'",
                    [&req.execution_id],
                )?;
                conn.execute(
                    "UPDATE works SET failures = failures + 1, retry_at_ms = ?2 WHERE id = ?1",
                    params![work_id, req.retry_at_ms],
                )?;
                // Inputs went back to pending, so the Work has some unless the attempt
                // held none (impossible for a started one): then it rests idle.
                let ws = if pending_inputs(conn, &work_id)?.is_empty() {
                    state::IDLE
                } else {
                    state::PENDING
                };
                ("failed", ws)
            }
        }
        Outcome::Waiting => {
            let Some(w) = &req.wait else {
                return Err(StoreError::invalid("a waiting outcome needs its wait"));
            };
            let (wid, tid) = super::waits::declare_in(conn, &work_id, &req.execution_id, w, &now)?;
            wait_id = Some(wid);
            timer_id = tid;
            conn.execute(
                "UPDATE works SET failures = 0, retry_at_ms = NULL WHERE id = ?1",
                [&work_id],
            )?;
            ("waiting", state::WAITING)
        }
    };
    let settled = if exec_state == "waiting" {
        None
    } else {
        Some(now.clone())
    };
    conn.execute(
        "UPDATE executions SET state = ?2, result = COALESCE(?3, result), retry_at_ms = ?4, \
         lease_expires_ms = NULL, settled_at = ?5 WHERE id = ?1",
        params![
            req.execution_id,
            exec_state,
            result_text,
            req.retry_at_ms,
            settled
        ],
    )?;
    set_work_state(conn, &work_id, work_state, &now)?;
    let failures: i64 = conn.query_row(
        "SELECT failures FROM works WHERE id = ?1",
        [&work_id],
        |r| r.get(0),
    )?;
    Ok(AttemptSettleResponse {
        pending: pending_inputs(conn, &work_id)?,
        work_id,
        work_state: work_state.into(),
        execution_state: exec_state.into(),
        failures,
        wait_id,
        timer_id,
    })
}

// ---------------------------------------------------------------------------------------
// store.expired_leases, store.works_ready
// ---------------------------------------------------------------------------------------

/// Executions whose lease expired.
pub fn expired_leases(
    conn: &Connection,
    limits: &Limits,
    req: &ExpiredLeasesRequest,
) -> Result<ExpiredLeasesResponse, StoreError> {
    let limit = page_limit(req.limit, limits)?;
    if !req.host.is_empty() {
        check_host("host", &req.host)?;
    }
    let (_, alive_after) = alive_after(conn)?;
    let mut stmt = conn.prepare_cached(&format!(
        "SELECT {EXEC_COLS} FROM executions WHERE state = 'running' \
         AND lease_expires_ms <= ?1 AND (?3 = '' OR host = '' OR host = ?3 \
         OR NOT EXISTS (SELECT 1 FROM hosts h WHERE h.id = executions.host AND h.expires_ms > ?4)) \
         ORDER BY lease_expires_ms, id LIMIT ?2"
    ))?;
    let executions = stmt
        .query_map(
            params![req.now_ms, limit, req.host, alive_after],
            exec_from_row,
        )?
        .collect::<crate::sql::Result<Vec<_>>>()?;
    Ok(ExpiredLeasesResponse { executions })
}

/// Work ready to start or resume (a held Work is not: it waits for its admission).
pub fn works_ready(
    conn: &Connection,
    limits: &Limits,
    req: &WorksReadyRequest,
) -> Result<WorksReadyResponse, StoreError> {
    let limit = page_limit(req.limit, limits)?;
    if !req.host.is_empty() {
        check_host("host", &req.host)?;
    }
    let (_, alive_after) = alive_after(conn)?;
    let mut works = works_query(
        conn,
        &format!(
            "SELECT {WORK_COLS} FROM works WHERE state = 'woken' AND (?2 = '' OR NOT EXISTS \
             (SELECT 1 FROM executions e JOIN hosts h ON h.id = e.host \
              WHERE e.work_id = works.id AND e.state = 'waiting' AND e.host != '' \
              AND e.host != ?2 AND h.expires_ms > ?3)) \
             ORDER BY retry_at_ms, id LIMIT ?1"
        ),
        &[&limit, &req.host, &alive_after],
        limits,
    )?;
    let rest = limit - works.len() as i64;
    if rest > 0 {
        works.extend(works_query(
            conn,
            &format!(
                "SELECT {WORK_COLS} FROM works WHERE state = 'pending' AND hold_owner IS NULL \
                 AND (retry_at_ms IS NULL OR retry_at_ms <= ?1) ORDER BY retry_at_ms, id LIMIT ?2"
            ),
            &[&req.now_ms, &rest],
            limits,
        )?);
    }
    Ok(WorksReadyResponse { works })
}
