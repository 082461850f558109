//! The wire types of `work::reads` (moved from storaged).

use super::*;

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

/// `store.works`: a page of Works, by ID or (`recent`) the last changed first.
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
    /// The last changed first (by `updated_at`, then ID, both descending) instead
    /// of by ID; the cursor is then `<updated_at>|<id>` of the page's last Work.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub recent: bool,
}

/// Result of `store.works`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct WorksResponse {
    /// The Works.
    pub works: Vec<WorkRow>,
    /// The next page's cursor; empty at the end.
    pub next: String,
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
    /// Only those this host launched.
    #[serde(default)]
    pub host: Option<String>,
    /// Only those settled at or after this time (RFC 3339, as `settled_at` reads).
    #[serde(default)]
    pub settled_since: Option<String>,
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
