//! Routing decisions: `store.route_decide`, `store.unrouted`, `store.routing`.

use super::*;
pub use busapi::store::work::routing::*;

// ---------------------------------------------------------------------------------------
// store.route_decide
// ---------------------------------------------------------------------------------------

fn check_display(v: &Value) -> Result<String, String> {
    let display: WorkDisplay =
        serde_json::from_value(v.clone()).map_err(|e| format!("not a display: {e}"))?;
    display.validate().map_err(|e| e.to_string())?;
    serde_json::to_string(&display).map_err(|e| e.to_string())
}

/// Record a routing decision (see [`RouteDecideRequest`]).
pub fn route_decide(
    conn: &Connection,
    limits: &Limits,
    req: &RouteDecideRequest,
) -> Result<RouteDecideResponse, StoreError> {
    // Bounds first.
    check_name("scope_id", &req.scope_id, limits)?;
    if req.records.len() > limits.max_batch {
        return Err(StoreError::invalid(format!(
            "records has {} entries, over max_batch ({})",
            req.records.len(),
            limits.max_batch
        )));
    }
    for r in &req.records {
        check_opt_name("records handler", &r.handler, limits)?;
        check_opt_name("records binding", &r.binding, limits)?;
        check_text(
            "records reason",
            &r.reason,
            MAX_REASON_BYTES,
            "the reason limit",
        )?;
        if let Some(w) = &r.work_id {
            check_opt_name("records work_id", w, limits)?;
        }
        if let Some(d) = &r.display_refused {
            check_text(
                "records display_refused",
                d,
                MAX_REASON_BYTES,
                "the reason limit",
            )?;
        }
    }
    let display_in = match &req.outcome {
        RouteOutcome::Unmatched { disposition } => {
            check_opt_name("disposition", disposition, limits)?;
            None
        }
        RouteOutcome::Create {
            kind,
            binding,
            keys,
            display,
            context,
            grants,
            close,
        } => {
            if let Some(c) = close {
                if c != state::COMPLETED && c != state::CANCELLED {
                    return Err(StoreError::invalid(format!(
                        "close is {c:?}: completed or cancelled"
                    )));
                }
            }
            check_name("kind", kind, limits)?;
            check_opt_name("binding", binding, limits)?;
            check_list("keys", keys, limits)?;
            check_list("grants", grants, limits)?;
            if let Some(c) = context {
                json_text("context", c, limits)?;
            }
            display.as_ref()
        }
        RouteOutcome::Attach {
            work_id,
            display,
            wake,
        } => {
            check_name("work_id", work_id, limits)?;
            if let Some(w) = wake {
                check_name("wake", w, limits)?;
            }
            display.as_ref()
        }
    };
    if let Some(d) = display_in {
        check_text(
            "display",
            &d.to_string(),
            limits.max_value_bytes,
            "max_value_bytes",
        )?;
    }

    // Preconditions: the event exists, in this scope, not routed yet.
    let scope: Option<String> = conn
        .query_row(
            "SELECT scope_id FROM events WHERE seq = ?1",
            [req.seq],
            |r| r.get(0),
        )
        .optional()?;
    let Some(scope) = scope else {
        return Err(StoreError::not_found(format!(
            "no event with seq {}",
            req.seq
        )));
    };
    if scope != req.scope_id {
        return Err(StoreError::invalid(format!(
            "event {} is in scope {scope}, not {}",
            req.seq, req.scope_id
        )));
    }
    let routed: Option<String> = conn
        .query_row(
            "SELECT disposition FROM routed WHERE seq = ?1",
            [req.seq],
            |r| r.get(0),
        )
        .optional()?;
    if let Some(d) = routed {
        return Err(StoreError::conflict(format!(
            "event {} is already routed ({d})",
            req.seq
        )));
    }

    let now_ms = util::now_ms();
    let now = util::rfc3339(now_ms);
    let mut created = false;
    let mut woke = None;
    let mut closing: Option<(String, String)> = None;
    let target: Option<String>;
    let disposition: String;

    match &req.outcome {
        RouteOutcome::Unmatched { disposition: d } => {
            target = None;
            disposition = if d.is_empty() {
                "unmatched".into()
            } else {
                format!("unmatched:{d}")
            };
        }
        RouteOutcome::Create {
            kind,
            binding,
            keys,
            context,
            grants,
            close,
            ..
        } => {
            // A key finds its Work: the first key naming an open Work wins.
            let mut found: Option<String> = None;
            for key in keys {
                let named: Option<(String, String, String)> = conn
                    .query_row(
                        "SELECT w.id, w.state, w.scope_id FROM work_keys k \
                         JOIN works w ON w.id = k.work_id WHERE k.key = ?1",
                        [key],
                        |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
                    )
                    .optional()?;
                if let Some((id, st, sc)) = named {
                    if is_closed(&st) {
                        continue;
                    }
                    if sc != req.scope_id {
                        return Err(StoreError::invalid(format!(
                            "key {key} names Work {id} of scope {sc}, not {}",
                            req.scope_id
                        )));
                    }
                    found = Some(id);
                    break;
                }
            }
            let id = match (found, close) {
                (Some(id), Some(c)) => {
                    closing = Some((id.clone(), c.clone()));
                    Some(id)
                }
                (Some(id), None) => Some(id),
                // Nothing open to close: no Work is made for it.
                (None, Some(_)) => None,
                (None, None) => {
                    let id = util::new_id("work");
                    let context_text = match context {
                        Some(c) if !c.is_null() => Some(json_text("context", c, limits)?),
                        _ => None,
                    };
                    conn.execute(
                        "INSERT INTO works (id, scope_id, kind, binding, state, context, grants, \
                         created_at, updated_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?8)",
                        params![
                            id,
                            req.scope_id,
                            kind,
                            binding,
                            state::PENDING,
                            context_text,
                            list_text(grants),
                            now
                        ],
                    )?;
                    created = true;
                    Some(id)
                }
            };
            match id {
                Some(id) => {
                    // Bind the keys: unbound ones and those of closed Work go to this Work.
                    for key in keys {
                        conn.execute(
                            "INSERT INTO work_keys (key, work_id) VALUES (?1, ?2) \
                             ON CONFLICT(key) DO UPDATE SET work_id = excluded.work_id \
                             WHERE (SELECT state FROM works WHERE id = work_keys.work_id) \
                                   IN ('failed', 'cancelled')",
                            params![key, id],
                        )?;
                    }
                    disposition = if created { "created" } else { "attached" }.into();
                    target = Some(id);
                }
                None => {
                    target = None;
                    disposition = "unmatched:closes_nothing".into();
                }
            }
        }
        RouteOutcome::Attach { work_id, wake, .. } => {
            let work: Option<(String, String)> = conn
                .query_row(
                    "SELECT state, scope_id FROM works WHERE id = ?1",
                    [work_id],
                    |r| Ok((r.get(0)?, r.get(1)?)),
                )
                .optional()?;
            let Some((st, sc)) = work else {
                return Err(StoreError::not_found(format!("no Work {work_id}")));
            };
            if sc != req.scope_id {
                return Err(StoreError::invalid(format!(
                    "Work {work_id} is in scope {sc}, not {}",
                    req.scope_id
                )));
            }
            if is_closed(&st) {
                return Err(StoreError::conflict(format!(
                    "Work {work_id} is {st}: nothing attaches to it"
                )));
            }
            if let Some(wait_id) = wake {
                let wait: Option<(String, String)> = conn
                    .query_row(
                        "SELECT work_id, state FROM waits WHERE id = ?1",
                        [wait_id],
                        |r| Ok((r.get(0)?, r.get(1)?)),
                    )
                    .optional()?;
                match wait {
                    Some((w, s)) if w == *work_id && s == "active" => {}
                    Some((w, s)) => {
                        return Err(StoreError::conflict(format!(
                        "Wait {wait_id} is {s} (of Work {w}), not an active Wait of Work {work_id}"
                    )))
                    }
                    None => {
                        return Err(StoreError::conflict(format!("no Wait {wait_id}")));
                    }
                }
                woke = Some(wait_id.clone());
            }
            disposition = "attached".into();
            target = Some(work_id.clone());
        }
    }

    // The display: stored when valid, else refused and recorded (routing goes on).
    let mut display_refused = None;
    if let (Some(id), Some(d)) = (&target, display_in) {
        match check_display(d) {
            Ok(text) => {
                conn.execute(
                    "UPDATE works SET display = ?2 WHERE id = ?1",
                    params![id, text],
                )?;
            }
            Err(why) => display_refused = Some(why),
        }
    }

    // The event becomes a pending input of the Work.
    let mut work_state = None;
    if let Some(id) = &target {
        conn.execute(
            "INSERT INTO work_inputs (work_id, seq, state) VALUES (?1, ?2, 'pending')",
            params![id, req.seq],
        )?;
        let st: String =
            conn.query_row("SELECT state FROM works WHERE id = ?1", [id], |r| r.get(0))?;
        let mut next = match st.as_str() {
            state::IDLE | state::COMPLETED => state::PENDING.to_string(),
            _ => st,
        };
        if let Some(wait_id) = &woke {
            super::waits::wake_in(conn, wait_id, Some(req.seq), "woken", &now)?;
            if next == state::WAITING {
                next = state::WOKEN.into();
            }
        }
        match &closing {
            Some((_, c)) => {
                super::reads::close_in(conn, id, c, &format!("closed by event {}", req.seq), &now)?;
                next = c.clone();
            }
            None => set_work_state(conn, id, &next, &now)?,
        }
        work_state = Some(next);
    }

    // Why: one record per route, in order.
    let first_matched = req.records.iter().position(|r| r.matched);
    let refusal_at = first_matched.or_else(|| req.records.len().checked_sub(1));
    for (i, r) in req.records.iter().enumerate() {
        let work_id = match (&r.work_id, Some(i) == first_matched) {
            (Some(w), _) => Some(w.clone()),
            (None, true) => target.clone(),
            (None, false) => None,
        };
        let refused = match (&r.display_refused, Some(i) == refusal_at, &display_refused) {
            (Some(a), true, Some(b)) => Some(format!("{a}; {b}")),
            (None, true, Some(b)) => Some(b.clone()),
            (a, _, _) => a.clone(),
        };
        conn.execute(
            "INSERT INTO route_records (seq, idx, scope_id, handler, binding, matched, work_id, \
             reason, display_refused, recorded_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)",
            params![
                req.seq,
                i as i64,
                req.scope_id,
                r.handler,
                r.binding,
                r.matched,
                work_id,
                r.reason,
                refused,
                now
            ],
        )?;
    }
    conn.execute(
        "INSERT INTO routed (seq, disposition, routed_at) VALUES (?1, ?2, ?3)",
        params![req.seq, disposition, now],
    )?;
    conn.execute("DELETE FROM unrouted WHERE seq = ?1", [req.seq])?;
    Ok(RouteDecideResponse {
        work_id: target,
        created,
        work_state,
        display_refused,
        woke,
    })
}

// ---------------------------------------------------------------------------------------
// store.route_decide_many
// ---------------------------------------------------------------------------------------

/// Record several routing decisions (see [`RouteDecideManyRequest`]).
pub fn route_decide_many(
    conn: &Connection,
    limits: &Limits,
    req: &RouteDecideManyRequest,
) -> Result<RouteDecideManyResponse, StoreError> {
    if req.decisions.len() > limits.max_batch {
        return Err(StoreError::invalid(format!(
            "decisions has {} entries, over max_batch ({})",
            req.decisions.len(),
            limits.max_batch
        )));
    }
    let mut decided = Vec::with_capacity(req.decisions.len());
    for (i, d) in req.decisions.iter().enumerate() {
        decided.push(route_decide(conn, limits, d).map_err(|e| crate::events::at(i, e))?);
    }
    Ok(RouteDecideManyResponse { decided })
}

// ---------------------------------------------------------------------------------------
// store.unrouted
// ---------------------------------------------------------------------------------------

/// Accepted events not routed yet.
pub fn unrouted(
    conn: &Connection,
    limits: &Limits,
    req: &UnroutedRequest,
) -> Result<UnroutedResponse, StoreError> {
    let limit = page_limit(req.limit, limits)?;
    let mut stmt = conn.prepare_cached(
        "SELECT e.seq, e.id, e.scope_id, e.type, e.source, e.keys, e.payload, e.parent_id, \
         e.root_id, e.depth, e.accepted_ms, e.schema, e.delivery_id, e.occurred_at, \
         e.accepted_at, e.execution_id FROM unrouted u JOIN events e ON e.seq = u.seq \
         WHERE u.seq > ?1 ORDER BY u.seq LIMIT ?2",
    )?;
    let mut rows = stmt.query(params![req.after, limit])?;
    let mut events = Vec::new();
    let mut bytes = 0usize;
    let mut next = req.after;
    let mut more = false;
    while let Some(r) = rows.next()? {
        let payload: String = r.get(6)?;
        if !events.is_empty() && bytes + payload.len() > MAX_UNROUTED_PAGE_BYTES {
            more = true;
            break;
        }
        bytes += payload.len();
        let keys: String = r.get(5)?;
        let ev = UnroutedEvent {
            seq: r.get(0)?,
            id: r.get(1)?,
            scope_id: r.get(2)?,
            event_type: r.get(3)?,
            source: r.get(4)?,
            keys: parse_list(&keys),
            payload: raw_json(payload),
            parent_id: r.get(7)?,
            root_id: r.get(8)?,
            depth: r.get(9)?,
            accepted_ms: r.get(10)?,
            schema: r.get(11)?,
            delivery_id: r.get(12)?,
            occurred_at: r.get(13)?,
            accepted_at: r.get(14)?,
            execution_id: r.get(15)?,
        };
        next = ev.seq;
        events.push(ev);
    }
    more |= events.len() as i64 >= limit;
    Ok(UnroutedResponse { events, next, more })
}

/// Why an event went where it went (`not_found` for an unknown sequence).
pub fn routing(
    conn: &Connection,
    limits: &Limits,
    req: &RoutingRequest,
) -> Result<RoutingResponse, StoreError> {
    let exists: Option<i64> = conn
        .prepare_cached("SELECT seq FROM events WHERE seq = ?1")?
        .query_row(params![req.seq], |r| r.get(0))
        .optional()?;
    if exists.is_none() {
        return Err(StoreError::not_found(format!("no event {}", req.seq)));
    }
    let decided: Option<(String, String)> = conn
        .prepare_cached("SELECT disposition, routed_at FROM routed WHERE seq = ?1")?
        .query_row(params![req.seq], |r| Ok((r.get(0)?, r.get(1)?)))
        .optional()?;
    let mut stmt = conn.prepare_cached(
        "SELECT idx, handler, binding, matched, work_id, reason, display_refused \
         FROM route_records WHERE seq = ?1 ORDER BY idx LIMIT ?2",
    )?;
    let limit = i64::try_from(limits.max_batch).unwrap_or(i64::MAX);
    let records = stmt
        .query_map(params![req.seq, limit], |r| {
            Ok(RouteRecord {
                idx: r.get(0)?,
                handler: r.get(1)?,
                binding: r.get(2)?,
                matched: r.get::<_, i64>(3)? != 0,
                work_id: r.get(4)?,
                reason: r.get(5)?,
                display_refused: r.get(6)?,
            })
        })?
        .collect::<Result<Vec<_>, _>>()?;
    let (disposition, routed_at) = match decided {
        Some((d, at)) => (Some(d), Some(at)),
        None => (None, None),
    };
    Ok(RoutingResponse {
        seq: req.seq,
        disposition,
        routed_at,
        records,
    })
}
