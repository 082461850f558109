//! The wire types of `work::attempts` (moved from storaged).

use super::*;

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
    /// The host that launches it (recorded on the execution; empty: none named).
    #[serde(default)]
    pub host: String,
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

/// `store.lease_takeover`: take over a running attempt whose lease expired (to adopt
/// it with `executor.recover`, or to stop it and settle it), under a new epoch that
/// fences the previous holder.
///
/// A taker naming its `host` may take over an attempt another host launched only once
/// that host is gone (its host lease ran out, or it never beat): the attempt's own
/// host, while alive, is the only one whose executor knows the run.
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
    /// The taker's host (empty: not checked against the attempt's host).
    #[serde(default)]
    pub host: String,
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
    /// The host that launched the attempt (empty: not recorded).
    #[serde(default)]
    pub host: String,
    /// When that host, another than the taker, counted as gone (null: the same host,
    /// or none recorded; 0: it never beat).
    #[serde(default)]
    pub host_gone_ms: Option<i64>,
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

/// `store.expired_leases`: running executions whose lease ran out by `now_ms`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExpiredLeasesRequest {
    /// The time to compare with.
    pub now_ms: i64,
    /// At most this many.
    #[serde(default)]
    pub limit: u32,
    /// Only those this host may take over: its own, those naming no host, and those
    /// of hosts gone by `now_ms` (empty: all).
    #[serde(default)]
    pub host: String,
}

/// Result of `store.expired_leases`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ExpiredLeasesResponse {
    /// The executions, earliest expiry first.
    pub executions: Vec<ExecutionRow>,
}

/// `store.works_ready`: Work that may start (pending input, retry time passed, no
/// hold) or resume (woken).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WorksReadyRequest {
    /// The time to compare retry times with.
    pub now_ms: i64,
    /// At most this many.
    #[serde(default)]
    pub limit: u32,
    /// The asking host: a woken Work whose parked attempt another host launched is
    /// left to that host while it is alive (its executor alone knows the run).
    #[serde(default)]
    pub host: String,
}

/// Result of `store.works_ready`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct WorksReadyResponse {
    /// The Works: woken ones first, then pending by retry time.
    pub works: Vec<WorkRow>,
}
