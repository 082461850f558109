//! Work: routing decisions, attempts under fenced leases, and the Work reads.
//!
//! Every write here is one atomic unit with preconditions: schedulerd reads, decides
//! (outside any transaction), then commits with preconditions on what it read, and a
//! failed precondition is `conflict` (re-read and decide again).
//!
//! Work states: `pending` (has pending input, may start once `retry_at_ms` passed),
//! `idle` (open, nothing to do: after a handoff), `running` (an attempt holds the
//! lease), `waiting` (its attempt is parked on a Wait), `woken` (the Wait was woken:
//! ready to resume the same attempt), and the ends `completed` (reopened by new
//! input), `failed` and `cancelled` (closed: their correlation keys go to the next
//! Work that names them).
//!
//! Execution states: `running`, `waiting`, and the settled `completed`, `failed`,
//! `handoff`, `cancelled`.
//!
//! Input states (`work_inputs`): `pending`, `taken` (by `attempt_id`), `done`,
//! `failed` (the Work failed for good with it), `cancelled`.
//!
//! The lease fence: `works.lease_epoch` is the Work's current epoch; an execution
//! runs under `executions.lease_epoch`. Every write of an attempt names its epoch and
//! is refused (`conflict`) unless both equal it and the execution is running. A new
//! attempt, a resume and a takeover each take a new epoch, so the older holder's
//! writes are refused from then on.

use crate::db::{Limits, Store};
use crate::error::StoreError;
use crate::util;
use protocol::wire::{Outcome, WorkDisplay};
use rusqlite::{params, Connection, OptionalExtension, Row};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The longest route reason, display refusal or cancel reason, in bytes.
pub const MAX_REASON_BYTES: usize = 2048;
/// The longest lease.
pub const MAX_LEASE_TTL_MS: u64 = 24 * 60 * 60 * 1000;
/// A page's default size when the caller says 0.
pub const DEFAULT_PAGE: u32 = 100;
/// The most payload bytes one `store.unrouted` page carries (at least one event).
pub const MAX_UNROUTED_PAGE_BYTES: usize = 8 * 1024 * 1024;

/// Work states.
pub mod state {
    /// Has pending input; may start once its retry time passed.
    pub const PENDING: &str = "pending";
    /// Open, nothing to do.
    pub const IDLE: &str = "idle";
    /// An attempt holds the lease.
    pub const RUNNING: &str = "running";
    /// Parked on a Wait.
    pub const WAITING: &str = "waiting";
    /// Its Wait was woken: ready to resume the same attempt.
    pub const WOKEN: &str = "woken";
    /// Done; new input reopens it.
    pub const COMPLETED: &str = "completed";
    /// Failed for good.
    pub const FAILED: &str = "failed";
    /// Cancelled.
    pub const CANCELLED: &str = "cancelled";
}

// ---------------------------------------------------------------------------------------
// Shared helpers (also used by `waits` and `timers`)
// ---------------------------------------------------------------------------------------

/// `field` within `max` bytes, naming the limit.
pub(crate) fn check_text(field: &str, v: &str, max: usize, limit: &str) -> Result<(), StoreError> {
    if v.len() > max {
        return Err(StoreError::invalid(format!(
            "{field} is {} bytes, over {limit} ({max})",
            v.len()
        )));
    }
    Ok(())
}

/// A name or key: non-empty, within `max_key_bytes`.
pub(crate) fn check_name(field: &str, v: &str, limits: &Limits) -> Result<(), StoreError> {
    if v.is_empty() {
        return Err(StoreError::invalid(format!("{field} is required")));
    }
    check_text(field, v, limits.max_key_bytes, "max_key_bytes")
}

/// An optional name: within `max_key_bytes`.
pub(crate) fn check_opt_name(field: &str, v: &str, limits: &Limits) -> Result<(), StoreError> {
    check_text(field, v, limits.max_key_bytes, "max_key_bytes")
}

/// A list of names: at most `max_batch`, each non-empty within `max_key_bytes`.
pub(crate) fn check_list(field: &str, items: &[String], limits: &Limits) -> Result<(), StoreError> {
    if items.len() > limits.max_batch {
        return Err(StoreError::invalid(format!(
            "{field} has {} entries, over max_batch ({})",
            items.len(),
            limits.max_batch
        )));
    }
    for item in items {
        check_name(&format!("{field} entry"), item, limits)?;
    }
    Ok(())
}

/// JSON text of a value, within `max_value_bytes`.
pub(crate) fn json_text(field: &str, v: &Value, limits: &Limits) -> Result<String, StoreError> {
    let text = serde_json::to_string(v)
        .map_err(|e| StoreError::invalid(format!("{field} is not JSON: {e}")))?;
    check_text(field, &text, limits.max_value_bytes, "max_value_bytes")?;
    Ok(text)
}

/// JSON text of a list of strings.
pub(crate) fn list_text(items: &[String]) -> String {
    serde_json::to_string(items).unwrap_or_else(|_| "[]".into())
}

/// A stored JSON list of strings (an unreadable one reads as empty).
pub(crate) fn parse_list(text: &str) -> Vec<String> {
    serde_json::from_str(text).unwrap_or_default()
}

/// A stored JSON value (absent or unreadable reads as null).
pub(crate) fn parse_json(text: Option<String>) -> Value {
    text.and_then(|t| serde_json::from_str(&t).ok())
        .unwrap_or(Value::Null)
}

/// The page size: 0 is the default; over `max_page` is refused.
pub(crate) fn page_limit(limit: u32, limits: &Limits) -> Result<i64, StoreError> {
    let max = limits.max_page;
    if limit as usize > max {
        return Err(StoreError::invalid(format!(
            "limit {limit} is over max_page ({max})"
        )));
    }
    let n = if limit == 0 {
        (DEFAULT_PAGE as usize).min(max)
    } else {
        limit as usize
    };
    Ok(n as i64)
}

/// A lease length in ms, within [`MAX_LEASE_TTL_MS`].
fn lease_ttl(ttl: u64) -> Result<i64, StoreError> {
    if ttl > MAX_LEASE_TTL_MS {
        return Err(StoreError::invalid(format!(
            "lease_ttl_ms {ttl} is over the maximum lease ({MAX_LEASE_TTL_MS} ms)"
        )));
    }
    Ok(ttl as i64)
}

/// Bump a Work's version and `updated_at` (every write to a Work does).
fn touch(conn: &Connection, work_id: &str, now: &str) -> Result<(), StoreError> {
    conn.execute(
        "UPDATE works SET version = version + 1, updated_at = ?2 WHERE id = ?1",
        params![work_id, now],
    )?;
    Ok(())
}

/// Set a Work's state (and bump it).
pub(crate) fn set_work_state(
    conn: &Connection,
    work_id: &str,
    to: &str,
    now: &str,
) -> Result<(), StoreError> {
    conn.execute(
        "UPDATE works SET state = ?2 WHERE id = ?1",
        params![work_id, to],
    )?;
    touch(conn, work_id, now)
}

fn is_closed(state: &str) -> bool {
    state == state::FAILED || state == state::CANCELLED
}

// ---------------------------------------------------------------------------------------
// Rows
// ---------------------------------------------------------------------------------------

/// A Work, as storaged's reads answer it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct WorkRow {
    /// The Work ID.
    pub id: String,
    /// Its scope.
    pub scope_id: String,
    /// Its Work kind.
    pub kind: String,
    /// The binding it runs on.
    pub binding: String,
    /// Its state (see the module doc).
    pub state: String,
    /// Its display, when a source gave one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub display: Option<WorkDisplay>,
    /// Its context (set by the match that created it).
    #[serde(default, skip_serializing_if = "Value::is_null")]
    pub context: Value,
    /// The binding grants it opted into.
    #[serde(default)]
    pub grants: Vec<String>,
    /// Its correlation keys (at most `max_page` of them).
    #[serde(default)]
    pub keys: Vec<String>,
    /// The current lease epoch.
    pub lease_epoch: i64,
    /// Failed attempts since the last success.
    pub failures: i64,
    /// Not to start before this.
    #[serde(default)]
    pub retry_at_ms: Option<i64>,
    /// Created (RFC 3339).
    pub created_at: String,
    /// Last changed (RFC 3339).
    pub updated_at: String,
    /// Bumped by every write: the precondition of `expect_version`.
    pub version: i64,
}

const WORK_COLS: &str = "id, scope_id, kind, binding, state, display, context, grants, \
     lease_epoch, failures, retry_at_ms, created_at, updated_at, version";

fn work_from_row(r: &Row<'_>) -> rusqlite::Result<WorkRow> {
    let display: Option<String> = r.get(5)?;
    let grants: String = r.get(7)?;
    Ok(WorkRow {
        id: r.get(0)?,
        scope_id: r.get(1)?,
        kind: r.get(2)?,
        binding: r.get(3)?,
        state: r.get(4)?,
        display: display.and_then(|d| serde_json::from_str(&d).ok()),
        context: parse_json(r.get(6)?),
        grants: parse_list(&grants),
        keys: Vec::new(),
        lease_epoch: r.get(8)?,
        failures: r.get(9)?,
        retry_at_ms: r.get(10)?,
        created_at: r.get(11)?,
        updated_at: r.get(12)?,
        version: r.get(13)?,
    })
}

fn work_keys(conn: &Connection, work_id: &str, max: usize) -> Result<Vec<String>, StoreError> {
    let mut stmt =
        conn.prepare_cached("SELECT key FROM work_keys WHERE work_id = ?1 ORDER BY key LIMIT ?2")?;
    let keys = stmt
        .query_map(params![work_id, max as i64], |r| r.get(0))?
        .collect::<rusqlite::Result<Vec<String>>>()?;
    Ok(keys)
}

/// One Work with its keys, if it exists.
pub(crate) fn load_work(
    conn: &Connection,
    id: &str,
    limits: &Limits,
) -> Result<Option<WorkRow>, StoreError> {
    let work = conn
        .query_row(
            &format!("SELECT {WORK_COLS} FROM works WHERE id = ?1"),
            [id],
            work_from_row,
        )
        .optional()?;
    match work {
        Some(mut w) => {
            w.keys = work_keys(conn, &w.id, limits.max_page)?;
            Ok(Some(w))
        }
        None => Ok(None),
    }
}

fn works_query(
    conn: &Connection,
    sql: &str,
    args: &[&dyn rusqlite::ToSql],
    limits: &Limits,
) -> Result<Vec<WorkRow>, StoreError> {
    let mut stmt = conn.prepare(sql)?;
    let mut works = stmt
        .query_map(args, work_from_row)?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    for w in &mut works {
        w.keys = work_keys(conn, &w.id, limits.max_page)?;
    }
    Ok(works)
}

/// An Execution (one attempt of a Work).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ExecutionRow {
    /// The Execution ID.
    pub id: String,
    /// Its Work.
    pub work_id: String,
    /// The attempt number, from 1.
    pub attempt: i64,
    /// The executor that runs it.
    pub executor: String,
    /// The binding it runs on.
    pub binding: String,
    /// Its state (see the module doc).
    pub state: String,
    /// Who holds its lease.
    pub lease_owner: String,
    /// The lease epoch it runs under.
    pub epoch: i64,
    /// When its lease runs out (while running).
    #[serde(default)]
    pub lease_expires_ms: Option<i64>,
    /// The last recovery metadata it persisted.
    #[serde(default, skip_serializing_if = "Value::is_null")]
    pub recovery: Value,
    /// Its result once settled.
    #[serde(default, skip_serializing_if = "Value::is_null")]
    pub result: Value,
    /// When a failed attempt's Work may retry.
    #[serde(default)]
    pub retry_at_ms: Option<i64>,
    /// Started (RFC 3339).
    pub started_at: String,
    /// Settled (RFC 3339).
    #[serde(default)]
    pub settled_at: Option<String>,
}

const EXEC_COLS: &str = "id, work_id, attempt, executor, binding, state, lease_owner, \
     lease_epoch, lease_expires_ms, recovery, result, retry_at_ms, started_at, settled_at";

fn exec_from_row(r: &Row<'_>) -> rusqlite::Result<ExecutionRow> {
    Ok(ExecutionRow {
        id: r.get(0)?,
        work_id: r.get(1)?,
        attempt: r.get(2)?,
        executor: r.get(3)?,
        binding: r.get(4)?,
        state: r.get(5)?,
        lease_owner: r.get(6)?,
        epoch: r.get(7)?,
        lease_expires_ms: r.get(8)?,
        recovery: parse_json(r.get(9)?),
        result: parse_json(r.get(10)?),
        retry_at_ms: r.get(11)?,
        started_at: r.get(12)?,
        settled_at: r.get(13)?,
    })
}

// ---------------------------------------------------------------------------------------
// store.route_decide
// ---------------------------------------------------------------------------------------

/// Why one route decided as it did.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RouteRecordInput {
    /// The route handler.
    #[serde(default)]
    pub handler: String,
    /// The route's binding.
    #[serde(default)]
    pub binding: String,
    /// Whether it matched.
    pub matched: bool,
    /// The handler's reason.
    #[serde(default)]
    pub reason: String,
    /// The Work it named; the first matching record without one gets the routed Work.
    #[serde(default)]
    pub work_id: Option<String>,
    /// Why its display was dropped before it reached the store.
    #[serde(default)]
    pub display_refused: Option<String>,
}

/// What the router decided for the event.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub enum RouteOutcome {
    /// No route matched: the scope's unmatched disposition applies.
    Unmatched {
        /// The disposition (stored as `unmatched:<disposition>`; empty: `unmatched`).
        #[serde(default)]
        disposition: String,
    },
    /// Create a Work, unless one of its keys already names an open Work: then attach.
    Create {
        /// The Work kind.
        kind: String,
        /// The binding it runs on.
        #[serde(default)]
        binding: String,
        /// Its correlation keys.
        #[serde(default)]
        keys: Vec<String>,
        /// Its display (a `WorkDisplay`; dropped, never fatal, when it breaks a limit).
        #[serde(default)]
        display: Option<Value>,
        /// Its context (only for a Work this creates).
        #[serde(default)]
        context: Option<Value>,
        /// Its grants (only for a Work this creates).
        #[serde(default)]
        grants: Vec<String>,
    },
    /// Attach the event to a Work.
    Attach {
        /// The Work.
        work_id: String,
        /// A display replacing the Work's (dropped, never fatal, when it breaks a limit).
        #[serde(default)]
        display: Option<Value>,
        /// Wake this active Wait of the Work with the event, in the same unit.
        #[serde(default)]
        wake: Option<String>,
    },
}

/// `store.route_decide`: record a routing decision for one event.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RouteDecideRequest {
    /// The event's sequence.
    pub seq: i64,
    /// The event's scope (must be the one it was accepted into).
    pub scope_id: String,
    /// Why, one record per route asked, in order.
    #[serde(default)]
    pub records: Vec<RouteRecordInput>,
    /// The decision.
    pub outcome: RouteOutcome,
}

/// Result of `store.route_decide`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RouteDecideResponse {
    /// The Work the event went to (none when unmatched).
    #[serde(default)]
    pub work_id: Option<String>,
    /// Whether the Work was created by this decision.
    pub created: bool,
    /// The Work's state after the decision.
    #[serde(default)]
    pub work_state: Option<String>,
    /// Why the outcome's display was dropped.
    #[serde(default)]
    pub display_refused: Option<String>,
    /// The Wait this decision woke.
    #[serde(default)]
    pub woke: Option<String>,
}

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
        } => {
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
            let id = match found {
                Some(id) => id,
                None => {
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
                    id
                }
            };
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
            crate::waits::wake_in(conn, wait_id, Some(req.seq), "woken", &now)?;
            if next == state::WAITING {
                next = state::WOKEN.into();
            }
        }
        set_work_state(conn, id, &next, &now)?;
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
    Ok(RouteDecideResponse {
        work_id: target,
        created,
        work_state,
        display_refused,
        woke,
    })
}

// ---------------------------------------------------------------------------------------
// store.unrouted
// ---------------------------------------------------------------------------------------

/// `store.unrouted`: accepted events not routed yet, in sequence order.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UnroutedRequest {
    /// Only events after this sequence.
    #[serde(default)]
    pub after: i64,
    /// At most this many (0: the default; at most `max_page`).
    #[serde(default)]
    pub limit: u32,
}

/// An event waiting for the router.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct UnroutedEvent {
    /// Its sequence.
    pub seq: i64,
    /// Its ID.
    pub id: String,
    /// Its scope.
    pub scope_id: String,
    /// Its type.
    #[serde(rename = "type")]
    pub event_type: String,
    /// Its source.
    pub source: String,
    /// Its correlation keys.
    #[serde(default)]
    pub keys: Vec<String>,
    /// Its payload.
    #[serde(default)]
    pub payload: Value,
    /// Its parent's ID, for a derived event.
    #[serde(default)]
    pub parent_id: Option<String>,
    /// Its causal root.
    pub root_id: String,
    /// Its causal depth.
    pub depth: i64,
    /// When it was accepted (ms).
    pub accepted_ms: i64,
    /// Its payload schema.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schema: Option<String>,
    /// Its delivery ID.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delivery_id: Option<String>,
    /// When it happened at the source.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub occurred_at: Option<String>,
    /// When it was accepted (RFC 3339).
    #[serde(default)]
    pub accepted_at: String,
    /// The execution that caused it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub execution_id: Option<String>,
}

/// Result of `store.unrouted`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct UnroutedResponse {
    /// The events.
    pub events: Vec<UnroutedEvent>,
    /// The cursor for the next page (the last sequence read, or `after`).
    pub next: i64,
}

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
         e.accepted_at, e.execution_id FROM events e \
         WHERE e.seq > ?1 AND NOT EXISTS (SELECT 1 FROM routed r WHERE r.seq = e.seq) \
         ORDER BY e.seq LIMIT ?2",
    )?;
    let mut rows = stmt.query(params![req.after, limit])?;
    let mut events = Vec::new();
    let mut bytes = 0usize;
    let mut next = req.after;
    while let Some(r) = rows.next()? {
        let payload: String = r.get(6)?;
        if !events.is_empty() && bytes + payload.len() > MAX_UNROUTED_PAGE_BYTES {
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
            payload: parse_json(Some(payload)),
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
    Ok(UnroutedResponse { events, next })
}

/// `store.routing`: why an event went where it went.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RoutingRequest {
    /// The event's sequence.
    pub seq: i64,
}

/// One route's verdict on an event, as recorded.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RouteRecord {
    /// The route's index in its scope.
    pub idx: i64,
    /// The route handler.
    pub handler: String,
    /// The route's binding.
    pub binding: String,
    /// Whether it matched.
    pub matched: bool,
    /// The Work it went to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub work_id: Option<String>,
    /// The handler's reason.
    pub reason: String,
    /// Why its display was dropped.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub display_refused: Option<String>,
}

/// Result of `store.routing`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RoutingResponse {
    /// The event's sequence.
    pub seq: i64,
    /// The decision (`routed`, `unmatched`, `unmatched:<disposition>`, …); none while
    /// the event waits for the router.
    #[serde(default)]
    pub disposition: Option<String>,
    /// When it was decided.
    #[serde(default)]
    pub routed_at: Option<String>,
    /// Each route asked, in order.
    pub records: Vec<RouteRecord>,
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

// ---------------------------------------------------------------------------------------
// store.attempt_start
// ---------------------------------------------------------------------------------------

/// `store.attempt_start`: start (or resume) an attempt under a new lease epoch.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AttemptStartRequest {
    /// The Work.
    pub work_id: String,
    /// The executor that runs it.
    pub executor: String,
    /// The binding it runs on.
    #[serde(default)]
    pub binding: String,
    /// Who takes the lease (the scheduler instance).
    pub lease_owner: String,
    /// The lease's length.
    pub lease_ttl_ms: u64,
    /// The Work's version as read.
    #[serde(default)]
    pub expect_version: Option<i64>,
}

/// Result of `store.attempt_start`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct AttemptStartResponse {
    /// The Execution.
    pub execution_id: String,
    /// Its attempt number.
    pub attempt: i64,
    /// The new lease epoch: every write of the attempt names it.
    pub epoch: i64,
    /// When the lease runs out unless renewed.
    pub lease_expires_ms: i64,
    /// The inputs this attempt (or segment) took, in sequence order.
    pub inputs: Vec<i64>,
    /// True when this resumes a woken Wait's attempt rather than starting one.
    pub resumed: bool,
    /// The Wait it resumes from.
    #[serde(default)]
    pub wait_id: Option<String>,
}

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
    let ttl = lease_ttl(req.lease_ttl_ms)?;

    let work: Option<(String, i64, i64)> = conn
        .query_row(
            "SELECT state, lease_epoch, version FROM works WHERE id = ?1",
            [&req.work_id],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
        )
        .optional()?;
    let Some((st, epoch, version)) = work else {
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
    let pending: Vec<i64> = {
        let mut stmt = conn.prepare_cached(
            "SELECT seq FROM work_inputs WHERE work_id = ?1 AND state = 'pending' ORDER BY seq",
        )?;
        let v = stmt
            .query_map([&req.work_id], |r| r.get(0))?
            .collect::<rusqlite::Result<Vec<i64>>>()?;
        v
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
             lease_expires_ms = ?4 WHERE id = ?1",
            params![id, epoch, req.lease_owner, expires],
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
             lease_epoch, lease_expires_ms, started_at) \
             VALUES (?1, ?2, ?3, ?4, ?5, 'running', ?6, ?7, ?8, ?9)",
            params![
                id,
                req.work_id,
                attempt,
                req.executor,
                req.binding,
                req.lease_owner,
                epoch,
                expires,
                now
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
}

/// The execution, if `epoch` is the current epoch of its Work and its own, and it runs.
fn fence(conn: &Connection, execution_id: &str, epoch: i64) -> Result<Fenced, StoreError> {
    let row: Option<(String, String, i64, i64, Option<i64>)> = conn
        .query_row(
            "SELECT e.work_id, e.state, e.lease_epoch, w.lease_epoch, e.lease_expires_ms \
             FROM executions e JOIN works w ON w.id = e.work_id WHERE e.id = ?1",
            [execution_id],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?)),
        )
        .optional()?;
    let Some((work_id, st, exec_epoch, work_epoch, lease_expires_ms)) = row else {
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
    })
}

fn taken_inputs(conn: &Connection, execution_id: &str) -> Result<Vec<i64>, StoreError> {
    let mut stmt = conn.prepare_cached(
        "SELECT seq FROM work_inputs WHERE attempt_id = ?1 AND state = 'taken' ORDER BY seq",
    )?;
    let v = stmt
        .query_map([execution_id], |r| r.get(0))?
        .collect::<rusqlite::Result<Vec<i64>>>()?;
    Ok(v)
}

fn pending_inputs(conn: &Connection, work_id: &str) -> Result<Vec<i64>, StoreError> {
    let mut stmt = conn.prepare_cached(
        "SELECT seq FROM work_inputs WHERE work_id = ?1 AND state = 'pending' ORDER BY seq",
    )?;
    let v = stmt
        .query_map([work_id], |r| r.get(0))?
        .collect::<rusqlite::Result<Vec<i64>>>()?;
    Ok(v)
}

// ---------------------------------------------------------------------------------------
// store.lease_renew, store.lease_takeover, store.recovery_persist
// ---------------------------------------------------------------------------------------

/// `store.lease_renew`: extend a running attempt's lease, under its current epoch.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LeaseRenewRequest {
    /// The Execution.
    pub execution_id: String,
    /// The epoch it runs under.
    pub epoch: i64,
    /// The new lease length, from now.
    pub lease_ttl_ms: u64,
}

/// Result of `store.lease_renew`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct LeaseRenewResponse {
    /// When the lease now runs out.
    pub lease_expires_ms: i64,
}

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

/// `store.lease_takeover`: take over a running attempt whose lease expired (to adopt
/// it with `executor.recover`, or to stop it and settle it), under a new epoch that
/// fences the previous holder.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LeaseTakeoverRequest {
    /// The Execution.
    pub execution_id: String,
    /// The epoch read with the expired lease.
    pub epoch: i64,
    /// The new holder.
    pub lease_owner: String,
    /// The new lease length.
    pub lease_ttl_ms: u64,
}

/// Result of `store.lease_takeover`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct LeaseTakeoverResponse {
    /// The Work.
    pub work_id: String,
    /// The new epoch.
    pub epoch: i64,
    /// When the new lease runs out.
    pub lease_expires_ms: i64,
    /// The recovery metadata last persisted (null: none).
    #[serde(default)]
    pub recovery: Value,
    /// The inputs the attempt holds.
    pub inputs: Vec<i64>,
}

/// Take over an expired lease.
pub fn lease_takeover(
    conn: &Connection,
    limits: &Limits,
    req: &LeaseTakeoverRequest,
) -> Result<LeaseTakeoverResponse, StoreError> {
    check_name("execution_id", &req.execution_id, limits)?;
    check_name("lease_owner", &req.lease_owner, limits)?;
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
    })
}

/// `store.recovery_persist`: the run's recovery metadata, under its current epoch.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RecoveryPersistRequest {
    /// The Execution.
    pub execution_id: String,
    /// The epoch it runs under.
    pub epoch: i64,
    /// The metadata (JSON, at most `max_value_bytes`).
    pub recovery: Value,
}

/// Result of `store.recovery_persist`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RecoveryPersistResponse {}

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

/// The Wait a `waiting` outcome declares.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SettleWait {
    /// The extension whose operation declared it; empty for a builtin wait.
    #[serde(default)]
    pub owner: String,
    /// What it waits for (cut to its first line within 200 bytes; a timed Wait given
    /// none is described `until 25 Oct 2026 09:00 UTC`).
    #[serde(default)]
    pub description: String,
    /// Correlation keys whose events wake it.
    #[serde(default)]
    pub keys: Vec<String>,
    /// Only events of these types wake it (empty: any).
    #[serde(default)]
    pub types: Vec<String>,
    /// The plan `dependency.filter` receives.
    #[serde(default)]
    pub plan: Option<Value>,
    /// When it times out (a timeout timer is armed).
    #[serde(default)]
    pub due_ms: Option<i64>,
}

/// `store.attempt_settle`: end a running attempt (or segment), under its epoch.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AttemptSettleRequest {
    /// The Execution.
    pub execution_id: String,
    /// The epoch it runs under.
    pub epoch: i64,
    /// How it ended.
    pub outcome: Outcome,
    /// The result (JSON, at most `max_value_bytes`).
    #[serde(default)]
    pub result: Option<Value>,
    /// `failed`: when the Work may retry (the caller's backoff and retry_after hint).
    #[serde(default)]
    pub retry_at_ms: Option<i64>,
    /// `failed`: the failure budget is spent; the Work fails for good.
    #[serde(default, rename = "final")]
    pub final_failure: bool,
    /// `waiting`: the Wait it declares.
    #[serde(default)]
    pub wait: Option<SettleWait>,
    /// IDs of events the attempt consumed while it ran (injected into it and taken
    /// in): pending inputs of its Work, done with this attempt whatever its outcome,
    /// so no further attempt starts for them.
    #[serde(default)]
    pub consumed: Vec<String>,
}

/// Result of `store.attempt_settle`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct AttemptSettleResponse {
    /// The Work.
    pub work_id: String,
    /// The Work's state now.
    pub work_state: String,
    /// The execution's state now.
    pub execution_state: String,
    /// The Work's failures now.
    pub failures: i64,
    /// The Wait declared (`waiting`).
    #[serde(default)]
    pub wait_id: Option<String>,
    /// Its timeout timer.
    #[serde(default)]
    pub timer_id: Option<String>,
    /// Inputs pending on the Work now (for `waiting`: those to check against the Wait).
    pub pending: Vec<i64>,
}

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
            let (wid, tid) = crate::waits::declare_in(conn, &work_id, &req.execution_id, w, &now)?;
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

/// `store.expired_leases`: running executions whose lease ran out by `now_ms`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExpiredLeasesRequest {
    /// The time to compare with.
    pub now_ms: i64,
    /// At most this many.
    #[serde(default)]
    pub limit: u32,
}

/// Result of `store.expired_leases`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ExpiredLeasesResponse {
    /// The executions, earliest expiry first.
    pub executions: Vec<ExecutionRow>,
}

/// Executions whose lease expired.
pub fn expired_leases(
    conn: &Connection,
    limits: &Limits,
    req: &ExpiredLeasesRequest,
) -> Result<ExpiredLeasesResponse, StoreError> {
    let limit = page_limit(req.limit, limits)?;
    let mut stmt = conn.prepare_cached(&format!(
        "SELECT {EXEC_COLS} FROM executions WHERE state = 'running' \
         AND lease_expires_ms <= ?1 ORDER BY lease_expires_ms, id LIMIT ?2"
    ))?;
    let executions = stmt
        .query_map(params![req.now_ms, limit], exec_from_row)?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    Ok(ExpiredLeasesResponse { executions })
}

/// `store.works_ready`: Work that may start (pending input, retry time passed) or
/// resume (woken).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WorksReadyRequest {
    /// The time to compare retry times with.
    pub now_ms: i64,
    /// At most this many.
    #[serde(default)]
    pub limit: u32,
}

/// Result of `store.works_ready`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct WorksReadyResponse {
    /// The Works: woken ones first, then pending by retry time.
    pub works: Vec<WorkRow>,
}

/// Work ready to start or resume.
pub fn works_ready(
    conn: &Connection,
    limits: &Limits,
    req: &WorksReadyRequest,
) -> Result<WorksReadyResponse, StoreError> {
    let limit = page_limit(req.limit, limits)?;
    let mut works = works_query(
        conn,
        &format!(
            "SELECT {WORK_COLS} FROM works WHERE state = 'woken' ORDER BY retry_at_ms, id LIMIT ?1"
        ),
        &[&limit],
        limits,
    )?;
    let rest = limit - works.len() as i64;
    if rest > 0 {
        works.extend(works_query(
            conn,
            &format!(
                "SELECT {WORK_COLS} FROM works WHERE state = 'pending' \
                 AND (retry_at_ms IS NULL OR retry_at_ms <= ?1) ORDER BY retry_at_ms, id LIMIT ?2"
            ),
            &[&req.now_ms, &rest],
            limits,
        )?);
    }
    Ok(WorksReadyResponse { works })
}

// ---------------------------------------------------------------------------------------
// store.work_cancel
// ---------------------------------------------------------------------------------------

/// `store.work_cancel`: cancel a Work, fencing its running attempt.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WorkCancelRequest {
    /// The Work.
    pub work_id: String,
    /// Why (kept on the cancelled execution's result).
    #[serde(default)]
    pub reason: String,
    /// The Work's version as read.
    #[serde(default)]
    pub expect_version: Option<i64>,
}

/// Result of `store.work_cancel`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct WorkCancelResponse {
    /// The execution that was running or waiting (to stop).
    #[serde(default)]
    pub execution_id: Option<String>,
    /// The Work's epoch now (bumped: the attempt's writes are refused).
    pub epoch: i64,
    /// The active Wait it cancelled.
    #[serde(default)]
    pub wait_id: Option<String>,
}

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
    let Some((st, epoch, version)) = work else {
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
    let execution_id: Option<String> = conn
        .query_row(
            "SELECT id FROM executions WHERE work_id = ?1 AND state IN ('running', 'waiting') \
             ORDER BY attempt DESC LIMIT 1",
            [&req.work_id],
            |r| r.get(0),
        )
        .optional()?;
    if let Some(id) = &execution_id {
        let result = serde_json::json!({ "cancelled": req.reason }).to_string();
        conn.execute(
            "UPDATE executions SET state = 'cancelled', lease_expires_ms = NULL, \
             settled_at = ?2, result = ?3 WHERE id = ?1",
            params![id, now, result],
        )?;
    }
    let wait_id = crate::waits::cancel_active_in(conn, &req.work_id, &now)?;
    conn.execute(
        "UPDATE work_inputs SET state = 'cancelled' \
         WHERE work_id = ?1 AND state IN ('pending', 'taken')",
        [&req.work_id],
    )?;
    let epoch = epoch + 1;
    conn.execute(
        "UPDATE works SET state = 'cancelled', lease_epoch = ?2, retry_at_ms = NULL WHERE id = ?1",
        params![req.work_id, epoch],
    )?;
    touch(conn, &req.work_id, &now)?;
    Ok(WorkCancelResponse {
        execution_id,
        epoch,
        wait_id,
    })
}

// ---------------------------------------------------------------------------------------
// Reads: store.work_get, store.works, store.executions, store.work_inputs
// ---------------------------------------------------------------------------------------

/// `store.work_get`: one Work.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WorkGetRequest {
    /// The Work ID.
    pub id: String,
}

/// Result of `store.work_get`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct WorkGetResponse {
    /// The Work.
    pub work: WorkRow,
}

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

/// `store.works`: a page of Works, by ID.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WorksRequest {
    /// Only this scope.
    #[serde(default)]
    pub scope_id: Option<String>,
    /// Only this state.
    #[serde(default)]
    pub state: Option<String>,
    /// Only this kind.
    #[serde(default)]
    pub kind: Option<String>,
    /// Only the Work this correlation key names.
    #[serde(default)]
    pub key: Option<String>,
    /// The cursor (the previous page's `next`).
    #[serde(default)]
    pub after: String,
    /// At most this many.
    #[serde(default)]
    pub limit: u32,
}

/// Result of `store.works`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct WorksResponse {
    /// The Works.
    pub works: Vec<WorkRow>,
    /// The next page's cursor; empty at the end.
    pub next: String,
}

/// A page of Works.
pub fn works(
    conn: &Connection,
    limits: &Limits,
    req: &WorksRequest,
) -> Result<WorksResponse, StoreError> {
    let limit = page_limit(req.limit, limits)?;
    check_opt_name("after", &req.after, limits)?;
    let mut sql = format!("SELECT {WORK_COLS} FROM works WHERE id > ?1");
    let mut args: Vec<&dyn rusqlite::ToSql> = vec![&req.after];
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
    sql.push_str(&format!(" ORDER BY id LIMIT ?{}", args.len()));
    let works = works_query(conn, &sql, &args, limits)?;
    let next = if works.len() as i64 == limit {
        works.last().map(|w| w.id.clone()).unwrap_or_default()
    } else {
        String::new()
    };
    Ok(WorksResponse { works, next })
}

/// `store.executions`: a page of executions (a Work's by attempt; otherwise by ID).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExecutionsRequest {
    /// Only this Work's.
    #[serde(default)]
    pub work_id: Option<String>,
    /// Only this state.
    #[serde(default)]
    pub state: Option<String>,
    /// The cursor (the previous page's `next`).
    #[serde(default)]
    pub after: String,
    /// At most this many.
    #[serde(default)]
    pub limit: u32,
}

/// Result of `store.executions`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ExecutionsResponse {
    /// The executions.
    pub executions: Vec<ExecutionRow>,
    /// The next page's cursor; empty at the end.
    pub next: String,
}

/// A page of executions.
pub fn executions(
    conn: &Connection,
    limits: &Limits,
    req: &ExecutionsRequest,
) -> Result<ExecutionsResponse, StoreError> {
    let limit = page_limit(req.limit, limits)?;
    check_opt_name("after", &req.after, limits)?;
    let mut args: Vec<&dyn rusqlite::ToSql> = Vec::new();
    let mut sql = format!("SELECT {EXEC_COLS} FROM executions WHERE 1");
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
    args.push(&limit);
    let order = if req.work_id.is_some() {
        "attempt"
    } else {
        "id"
    };
    sql.push_str(&format!(" ORDER BY {order} LIMIT ?{}", args.len()));
    let mut stmt = conn.prepare(&sql)?;
    let executions = stmt
        .query_map(args.as_slice(), exec_from_row)?
        .collect::<rusqlite::Result<Vec<_>>>()?;
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

/// `store.work_inputs`: a page of a Work's inputs, in sequence order.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WorkInputsRequest {
    /// The Work.
    pub work_id: String,
    /// Only this state.
    #[serde(default)]
    pub state: Option<String>,
    /// Only inputs after this sequence.
    #[serde(default)]
    pub after: i64,
    /// At most this many.
    #[serde(default)]
    pub limit: u32,
}

/// One input of a Work.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkInput {
    /// The event's sequence.
    pub seq: i64,
    /// Its state.
    pub state: String,
    /// The execution that took it.
    #[serde(default)]
    pub attempt_id: Option<String>,
}

/// Result of `store.work_inputs`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct WorkInputsResponse {
    /// The inputs.
    pub inputs: Vec<WorkInput>,
    /// The last sequence read (the next page's `after`), or `after`.
    pub next: i64,
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
        .collect::<rusqlite::Result<Vec<_>>>()?;
    let next = inputs.last().map_or(req.after, |i| i.seq);
    Ok(WorkInputsResponse { inputs, next })
}

// ---------------------------------------------------------------------------------------
// The Store wrappers and dispatch
// ---------------------------------------------------------------------------------------

macro_rules! write_method {
    ($name:ident, $req:ty, $resp:ty) => {
        #[doc = concat!("`store.", stringify!($name), "` as one atomic write.")]
        pub async fn $name(&self, req: $req) -> Result<$resp, StoreError> {
            let limits = self.limits().clone();
            self.write(move |c| $name(c, &limits, &req)).await
        }
    };
}

macro_rules! read_method {
    ($name:ident, $req:ty, $resp:ty) => {
        #[doc = concat!("`store.", stringify!($name), "` on a read connection.")]
        pub async fn $name(&self, req: $req) -> Result<$resp, StoreError> {
            let limits = self.limits().clone();
            self.read(move |c| $name(c, &limits, &req)).await
        }
    };
}
pub(crate) use {read_method, write_method};

impl Store {
    write_method!(route_decide, RouteDecideRequest, RouteDecideResponse);
    read_method!(unrouted, UnroutedRequest, UnroutedResponse);
    read_method!(routing, RoutingRequest, RoutingResponse);
    write_method!(attempt_start, AttemptStartRequest, AttemptStartResponse);
    write_method!(lease_renew, LeaseRenewRequest, LeaseRenewResponse);
    write_method!(lease_takeover, LeaseTakeoverRequest, LeaseTakeoverResponse);
    write_method!(
        recovery_persist,
        RecoveryPersistRequest,
        RecoveryPersistResponse
    );
    write_method!(attempt_settle, AttemptSettleRequest, AttemptSettleResponse);
    read_method!(expired_leases, ExpiredLeasesRequest, ExpiredLeasesResponse);
    read_method!(works_ready, WorksReadyRequest, WorksReadyResponse);
    write_method!(work_cancel, WorkCancelRequest, WorkCancelResponse);
    read_method!(work_get, WorkGetRequest, WorkGetResponse);
    read_method!(works, WorksRequest, WorksResponse);
    read_method!(executions, ExecutionsRequest, ExecutionsResponse);
    read_method!(work_inputs, WorkInputsRequest, WorkInputsResponse);
}

crate::store_methods! {
    "store.route_decide" => route_decide,
    "store.unrouted" => unrouted,
    "store.routing" => routing,
    "store.attempt_start" => attempt_start,
    "store.lease_renew" => lease_renew,
    "store.lease_takeover" => lease_takeover,
    "store.recovery_persist" => recovery_persist,
    "store.attempt_settle" => attempt_settle,
    "store.expired_leases" => expired_leases,
    "store.works_ready" => works_ready,
    "store.work_cancel" => work_cancel,
    "store.work_get" => work_get,
    "store.works" => works,
    "store.executions" => executions,
    "store.work_inputs" => work_inputs,
}
