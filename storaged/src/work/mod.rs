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
//!
//! Hosts: several hosts may run one suite on one database. Each execution names the
//! host that launched its segment; each host's schedulerd beats (`store.host_beat`),
//! and another host may take over an expired attempt only once that host is gone
//! too (its beat older than the host lease it declared).
//!
//! Modules: [`routing`] (`store.route_decide`, `store.unrouted`, `store.routing`),
//! [`attempts`] (an attempt's start, its fenced lease, recovery metadata and
//! settlement, and the reads schedulerd polls), [`hosts`] (host liveness and
//! extension task claims), [`reads`] (`store.work_cancel` and the
//! Work reads), [`actions`] (`store.action_accept`, `store.work_retry`: what the
//! host's own actions write), [`holds`] (`store.work_hold`, `store.work_settle_hold`:
//! a hold on a Work's start, by the package whose `work.admit` asked for it),
//! [`waits`] (a Work parked on a Wait, and its waking). The helpers and rows they
//! share are here.

mod actions;
mod attempts;
mod holds;
mod hosts;
mod reads;
mod routing;
pub mod waits;

pub use actions::*;
pub use attempts::*;
pub use holds::*;
pub use hosts::*;
pub use reads::*;
pub use routing::*;

use crate::db::{Limits, Store};
use crate::error::StoreError;
use crate::fields::*;
use crate::rpc::{read_method, write_method};
use crate::sql::{params, Connection, OptionalExtension, Row};
use crate::util;
pub use busapi::store::work::{ExecutionRow, WorkRow};
use protocol::wire::{Outcome, WorkDisplay};
use serde_json::Value;

/// The longest route reason, display refusal or cancel reason, in bytes.
pub const MAX_REASON_BYTES: usize = 2048;
/// The longest lease.
pub const MAX_LEASE_TTL_MS: u64 = 24 * 60 * 60 * 1000;
pub use crate::fields::DEFAULT_PAGE;
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

const WORK_COLS: &str = "id, scope_id, kind, binding, state, display, context, grants, \
     lease_epoch, failures, retry_at_ms, created_at, updated_at, version, hold_owner, \
     hold_reason, held_at, admitted";

fn work_from_row(r: &Row<'_>) -> crate::sql::Result<WorkRow> {
    let display: Option<String> = r.get(5)?;
    let grants: String = r.get(7)?;
    let admitted: String = r.get(17)?;
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
        hold: holds::hold_from(r.get(14)?, r.get(15)?, r.get(16)?),
        admitted: parse_list(&admitted),
    })
}

fn work_keys(conn: &Connection, work_id: &str, max: usize) -> Result<Vec<String>, StoreError> {
    let mut stmt =
        conn.prepare_cached("SELECT key FROM work_keys WHERE work_id = ?1 ORDER BY key LIMIT ?2")?;
    let keys = stmt
        .query_map(params![work_id, max as i64], |r| r.get(0))?
        .collect::<crate::sql::Result<Vec<String>>>()?;
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
    args: &[&dyn crate::sql::ToSql],
    limits: &Limits,
) -> Result<Vec<WorkRow>, StoreError> {
    // Cached: the SQL comes from a few fixed forms, and parsing it again for every
    // call was a measurable part of each `store.works_ready`.
    let mut stmt = conn.prepare_cached(sql)?;
    let mut works = stmt
        .query_map(args, work_from_row)?
        .collect::<crate::sql::Result<Vec<_>>>()?;
    for w in &mut works {
        w.keys = work_keys(conn, &w.id, limits.max_page)?;
    }
    Ok(works)
}

const EXEC_COLS: &str = "id, work_id, attempt, executor, binding, state, lease_owner, \
     lease_epoch, lease_expires_ms, recovery, result, retry_at_ms, started_at, settled_at, host";

fn exec_from_row(r: &Row<'_>) -> crate::sql::Result<ExecutionRow> {
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
        host: r.get(14)?,
    })
}

// ---------------------------------------------------------------------------------------
// The Store wrappers and dispatch
// ---------------------------------------------------------------------------------------

impl Store {
    write_method!(route_decide, RouteDecideRequest, RouteDecideResponse);
    /// `store.route_decide_many` as one atomic write (repeatable: it only writes).
    pub async fn route_decide_many(
        &self,
        req: RouteDecideManyRequest,
    ) -> Result<RouteDecideManyResponse, StoreError> {
        let limits = self.limits().clone();
        self.write_repeatable(move |c| route_decide_many(c, &limits, &req))
            .await
    }
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
    write_method!(work_retry, WorkRetryRequest, WorkRetryResponse);
    write_method!(action_accept, ActionAcceptRequest, ActionAcceptResponse);
    write_method!(work_hold, WorkHoldRequest, WorkHoldResponse);
    write_method!(
        work_settle_hold,
        WorkSettleHoldRequest,
        WorkSettleHoldResponse
    );
    read_method!(work_get, WorkGetRequest, WorkGetResponse);
    read_method!(works, WorksRequest, WorksResponse);
    read_method!(executions, ExecutionsRequest, ExecutionsResponse);
    read_method!(work_inputs, WorkInputsRequest, WorkInputsResponse);
    write_method!(host_beat, HostBeatRequest, HostBeatResponse);
    read_method!(hosts, HostsRequest, HostsResponse);
    write_method!(task_claim, TaskClaimRequest, TaskClaimResponse);
}

crate::store_methods! {
    RouteDecideRequest => route_decide,
    RouteDecideManyRequest => route_decide_many,
    UnroutedRequest => unrouted,
    RoutingRequest => routing,
    AttemptStartRequest => attempt_start,
    LeaseRenewRequest => lease_renew,
    LeaseTakeoverRequest => lease_takeover,
    RecoveryPersistRequest => recovery_persist,
    AttemptSettleRequest => attempt_settle,
    ExpiredLeasesRequest => expired_leases,
    WorksReadyRequest => works_ready,
    WorkCancelRequest => work_cancel,
    WorkRetryRequest => work_retry,
    ActionAcceptRequest => action_accept,
    WorkHoldRequest => work_hold,
    WorkSettleHoldRequest => work_settle_hold,
    WorkGetRequest => work_get,
    WorksRequest => works,
    ExecutionsRequest => executions,
    WorkInputsRequest => work_inputs,
    HostBeatRequest => host_beat,
    HostsRequest => hosts,
    TaskClaimRequest => task_claim,
}
