//! `github.wait`: park a Work until a pull request's checks finish, a review is
//! submitted, or someone replies on the issue or pull request.
//!
//! - `operation.wait` ([`plan`]) finds what to watch (the pull request's head commit
//!   and the check runs still pending on it for checks; the newest review or comment
//!   so far for the others; the login the connection acts as), keeps the plan in the
//!   package's KV under `wait/<work>` (a Work has at most one active Wait), and
//!   answers a Wait on the pull request's or issue's key (`github:<owner>/<name>#<n>`)
//!   and a key of the plan's own (`github-wait:<plan>`), for the delivery types that
//!   can satisfy it ([`Kind::delivery_types`]) and the one `github.wait.*` Event type
//!   the task delivers. The host asks [`crate::filter`] (`dependency.filter`) whether
//!   a delivery on those keys and types satisfies the plan, so a webhook delivery
//!   wakes the Wait at once; the task below is the fallback when deliveries are
//!   missed.
//! - The `github.waits` task ([`pass`]) looks at every kept plan: while checks are pending it
//!   sets the Wait's progress line ("3 of 5 checks finished, 1 failed") with
//!   `wait.progress`; once the condition holds it delivers that Event on the entry's
//!   source with the delivery ID `wait/<plan>` (so a repeat after a crash adds
//!   nothing) and drops the plan. It delivers only while the Wait is active (the
//!   progress call answers `not_found` before the turn that planned it has settled),
//!   so a condition that already holds never wakes nothing. A plan whose Wait has
//!   ended (woken by a delivery, cancelled, timed out: `state.waits`) is dropped, and
//!   any plan a minute after its due time.
//!
//! A `github.wait` Event goes to the Work whose Wait names its key; routes take it
//! only when their `events` name `github.wait` (see [`crate::route`]).
//!
//! What GitHub shows of the condition, before the wait and on each look, is read
//! in `observe.rs`.

use protocol::wire::{
    Authority, Delivery, IngressDeliverParams, IngressEvent, KvCheck, KvCommitParams, KvDelete,
    KvListParams, KvPut, OperationWaitParams, OperationWaitResult, Payload, StateWaitsParams,
    TaskRunResult, WaitProgressParams, WaitRequest,
};
use protocol::{Code, RpcError};
use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};
use sha2::{Digest, Sha256};

use crate::ops;

mod observe;

use observe::look_before;
pub use observe::{
    checks_state, is_bot, look, pending_checks, reply_state, review_state, Observed,
};

/// The wait operation.
pub const WAIT: &str = "github.wait";
/// The task that watches the plans.
pub const TASK: &str = "github.waits";
/// The KV prefix of the plans.
pub const PLAN_PREFIX: &str = "wait/";
/// The timeout when the call names none.
pub const DEFAULT_TIMEOUT_S: u64 = 86_400;
/// The longest timeout a call may ask for (seven days).
pub const MAX_TIMEOUT_S: u64 = 7 * 86_400;
/// The shortest.
pub const MIN_TIMEOUT_S: u64 = 60;
/// How long a plan outlives its due time before a pass drops it.
pub const PLAN_GRACE_MS: i64 = 60_000;
/// The most plans one pass looks at.
pub const MAX_PLANS_A_PASS: u32 = 1000;
/// The most pages of check runs, reviews or comments one look reads (100 a page).
pub const MAX_PAGES: usize = 10;
/// The most check runs a waking Event lists.
pub const MAX_RUNS_LISTED: usize = 50;
/// The longest description a call may give, in bytes (the toolbelt clips it further).
pub const MAX_DESCRIPTION_BYTES: usize = 1024;
/// The most pending check runs a plan lists; a plan that saw more lists none and
/// sets `pending_checks_truncated` (deliveries then never satisfy it: the task does).
pub const MAX_PENDING_CHECKS: usize = 100;

/// What a plan waits for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    /// Every check run on the pull request's head commit finished.
    Checks,
    /// A review submitted on the pull request.
    Review,
    /// A new comment on the issue or pull request.
    Reply,
}

impl Kind {
    fn parse(s: &str) -> Option<Kind> {
        match s {
            "checks" => Some(Kind::Checks),
            "review" => Some(Kind::Review),
            "reply" => Some(Kind::Reply),
            _ => None,
        }
    }

    /// The types of the webhook deliveries that may satisfy it (the plan decides,
    /// through [`crate::filter`]).
    pub fn delivery_types(self) -> &'static [&'static str] {
        match self {
            Kind::Checks => &["github.check_suite.completed", "github.check_run.completed"],
            Kind::Review => &["github.pull_request_review.submitted"],
            Kind::Reply => &[
                "github.issue_comment.created",
                "github.pull_request_review_comment.created",
            ],
        }
    }

    /// Every Event type that can wake its Wait: [`Kind::delivery_types`], then the
    /// `github.wait.*` type the task delivers.
    pub fn wait_types(self) -> Vec<String> {
        let mut types: Vec<String> = self
            .delivery_types()
            .iter()
            .map(|t| t.to_string())
            .collect();
        types.push(self.event_type().to_string());
        types
    }

    /// The `github.wait.*` Event type the task delivers when the condition holds.
    pub fn event_type(self) -> &'static str {
        match self {
            Kind::Checks => "github.wait.checks_completed",
            Kind::Review => "github.wait.reviewed",
            Kind::Reply => "github.wait.replied",
        }
    }

    fn describe(self, number: u64) -> String {
        match self {
            Kind::Checks => format!("checks on PR #{number}"),
            Kind::Review => format!("a review on PR #{number}"),
            Kind::Reply => format!("a reply on #{number}"),
        }
    }
}

/// A check run a plan saw pending on the head commit.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PendingCheck {
    /// The check run's ID.
    pub id: u64,
    /// Its name.
    pub name: String,
    /// Its check suite's ID (0 when GitHub named none).
    #[serde(default)]
    pub suite_id: u64,
}

/// A wait's plan, kept under `wait/<work>` until it is satisfied or outlived, and
/// returned as the Wait's plan, which `dependency.filter` receives back.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Plan {
    /// The plan's ID (from the Work and the call's request ID).
    pub id: String,
    /// What it waits for.
    pub kind: Kind,
    /// The Work.
    pub work_id: String,
    /// The Work's scope.
    pub scope_id: String,
    /// The connection the looks act as.
    pub connection: String,
    /// The entry's source the waking Event is delivered on.
    pub source: String,
    /// `owner/name`.
    pub repository: String,
    /// The pull request or issue.
    pub number: u64,
    /// For checks: the head commit waited on.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub head_sha: String,
    /// For a review or reply: the newest ID there was when the wait was planned.
    #[serde(default)]
    pub after_id: u64,
    /// For checks: the check runs on the head commit that had not completed when
    /// the wait was planned (at most [`MAX_PENDING_CHECKS`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pending_checks: Vec<PendingCheck>,
    /// For checks: more runs were pending than [`MAX_PENDING_CHECKS`].
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub pending_checks_truncated: bool,
    /// The login the connection acts as (whose own reviews and comments never
    /// satisfy the wait); empty when GitHub could not say.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub bot: String,
    /// When it was planned (RFC 3339).
    pub planned_at: String,
    /// Its due time, ms since the epoch.
    pub due_ms: i64,
    /// The last progress line set.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub progress: String,
}

impl Plan {
    /// The key the Wait and its waking Event share.
    pub fn key(&self) -> String {
        format!("github-wait:{}", self.id)
    }

    /// The Wait's keys: the pull request's or issue's (`github:<owner>/<name>#<n>`,
    /// which the deliveries about it carry), then the plan's own.
    pub fn wait_keys(&self) -> Vec<String> {
        vec![
            crate::project::key(&self.repository, self.number),
            self.key(),
        ]
    }

    /// The KV key the plan is kept under.
    pub fn kv_key(work_id: &str) -> String {
        format!("{PLAN_PREFIX}{work_id}")
    }
}

fn invalid(m: impl Into<String>) -> RpcError {
    RpcError::new(Code::Invalid, m)
}

fn plan_id(authority: &Authority, request_id: &str) -> String {
    let mut h = Sha256::new();
    h.update(authority.scope_id.as_bytes());
    h.update([0]);
    h.update(authority.work_id.as_bytes());
    h.update([0]);
    if request_id.is_empty() {
        // No request ID: every call is its own wait.
        h.update(authority.execution_id.as_bytes());
        h.update(protocol::time::now_ms().to_be_bytes());
    } else {
        h.update(request_id.as_bytes());
    }
    let d = h.finalize();
    d.iter().take(12).map(|b| format!("{b:02x}")).collect()
}

/// The newest `id` among `items` (0 for none).
fn newest_id(items: &[Value]) -> u64 {
    items
        .iter()
        .filter_map(|i| i["id"].as_u64())
        .max()
        .unwrap_or(0)
}

/// Serves `operation.wait` for `github.wait`.
pub async fn plan(
    state: &crate::State,
    host: &sdk::Host,
    params: &OperationWaitParams,
) -> Result<OperationWaitResult, RpcError> {
    if params.operation != WAIT {
        return Err(RpcError::new(
            Code::NotFound,
            format!(
                "`{}` is not a wait operation of this package",
                params.operation
            ),
        ));
    }
    let authority = &params.authority;
    if authority.connection.is_empty() {
        return Err(RpcError::new(
            Code::Unauthorized,
            "the binding names no connection: github.wait looks at GitHub as the binding's github connection",
        ));
    }
    if authority.work_id.is_empty() {
        return Err(invalid("github.wait needs a Work"));
    }
    let input = match &params.input {
        Value::Object(m) => m.clone(),
        Value::Null => Map::new(),
        _ => return Err(invalid("the input must be an object")),
    };
    let kind = input
        .get("for")
        .and_then(Value::as_str)
        .and_then(Kind::parse)
        .ok_or_else(|| invalid("for is required: checks, review or reply"))?;
    let timeout_s = match input.get("timeout_s") {
        None | Some(Value::Null) => DEFAULT_TIMEOUT_S,
        Some(v) => v
            .as_u64()
            .filter(|s| (MIN_TIMEOUT_S..=MAX_TIMEOUT_S).contains(s))
            .ok_or_else(|| {
                invalid(format!(
                    "timeout_s must be a whole number of seconds from {MIN_TIMEOUT_S} to {MAX_TIMEOUT_S}"
                ))
            })?,
    };
    let description = match input.get("description") {
        None | Some(Value::Null) => String::new(),
        Some(Value::String(s)) if s.len() <= MAX_DESCRIPTION_BYTES => s.trim().to_string(),
        Some(Value::String(_)) => {
            return Err(invalid(format!(
                "description is longer than {MAX_DESCRIPTION_BYTES} bytes"
            )))
        }
        Some(_) => return Err(invalid("description must be a string")),
    };
    let target_input =
        json!({"repository": input.get("repository"), "number": input.get("number")});
    let work = ops::work_ref(host, &authority.work_id).await?;
    let registry = state.registry();
    let entries: Vec<&crate::config::EntryConfig> = registry
        .entries
        .iter()
        .filter(|e| e.scope_id == authority.scope_id)
        .collect();
    let repos: Vec<String> = entries.iter().map(|e| e.repository.clone()).collect();
    let target = ops::target(&target_input, &work, &repos)?;
    let number = target
        .number
        .ok_or_else(|| invalid("the Work has no issue or pull request: give its number"))?;
    let entry = entries
        .iter()
        .find(|e| e.repository.eq_ignore_ascii_case(&target.repository))
        .ok_or_else(|| {
            invalid(format!(
                "no github entry of this scope receives {}: a wait is woken on an entry's source",
                target.repository
            ))
        })?;
    let client = state
        .client(host, &authority.scope_id, &authority.connection)
        .await?;
    let repo = &target.repository;
    let before = look_before(&client, kind, repo, number).await?;
    let bot = match state
        .acting_login(&client, &authority.scope_id, &authority.connection)
        .await
    {
        Ok(login) => login,
        Err(e) => {
            tracing::warn!(error = %e, connection = %authority.connection,
                "could not learn the login the connection acts as; its own comments may satisfy the wait");
            String::new()
        }
    };
    let now = protocol::time::now_ms();
    let due_ms = now + i64::try_from(timeout_s).unwrap_or(0) * 1000;
    let plan = Plan {
        id: plan_id(authority, &params.request_id),
        kind,
        work_id: authority.work_id.clone(),
        scope_id: authority.scope_id.clone(),
        connection: authority.connection.clone(),
        source: entry.source.clone(),
        repository: repo.clone(),
        number,
        head_sha: before.head_sha,
        after_id: before.after_id,
        pending_checks: before.pending,
        pending_checks_truncated: before.pending_truncated,
        bot,
        planned_at: protocol::time::format_rfc3339_ms(now),
        due_ms,
        progress: String::new(),
    };
    let value =
        serde_json::to_value(&plan).map_err(|e| RpcError::unauthored(format_args!("{e}")))?;
    host.call_typed(&KvCommitParams {
        puts: vec![KvPut {
            namespace: String::new(),
            key: Plan::kv_key(&plan.work_id),
            value: value.clone(),
        }],
        ..Default::default()
    })
    .await
    .map_err(|e| RpcError::new(Code::Unavailable, format!("keeping the wait's plan: {e}")))?;
    tracing::info!(plan = %plan.id, work = %plan.work_id, kind = ?kind, repository = %repo, number, "wait planned");
    Ok(OperationWaitResult {
        wait: WaitRequest {
            keys: plan.wait_keys(),
            types: kind.wait_types(),
            due_at: protocol::time::format_rfc3339_ms(due_ms),
            description: if description.is_empty() {
                kind.describe(number)
            } else {
                description
            },
            plan: value,
        },
    })
}

/// The Event that wakes `plan`'s Wait.
pub fn waking_event(plan: &Plan, found: Map<String, Value>) -> IngressEvent {
    let mut data = Map::new();
    data.insert("for".into(), json!(plan.kind));
    data.insert("repository".into(), json!(plan.repository));
    data.insert("number".into(), json!(plan.number));
    data.insert("plan".into(), json!(plan.id));
    if !plan.head_sha.is_empty() {
        data.insert("head_sha".into(), json!(plan.head_sha));
    }
    data.extend(found);
    IngressEvent {
        event_type: plan.kind.event_type().to_string(),
        payload: Payload {
            schema: crate::Family::Wait.schema().to_string(),
            data: Value::Object(data),
        },
        keys: vec![plan.key()],
        occurred_at: protocol::time::format_rfc3339_ms(protocol::time::now_ms()),
        snapshot: false,
    }
}

/// The state of `plan`'s Wait when it is no longer active (`woken`, `cancelled`,
/// `timed_out`): a delivery woke it, or it ended otherwise. `None` while it is
/// active, not declared yet (the planning turn has not settled), or unreadable.
async fn wait_ended(host: &sdk::Host, plan: &Plan) -> Option<String> {
    let waits = host
        .call_typed(&StateWaitsParams {
            work_id: plan.work_id.clone(),
        })
        .await
        .ok()?;
    let key = plan.key();
    waits
        .waits
        .iter()
        .find(|w| w.keys.contains(&key))
        .filter(|w| !w.state.is_empty() && w.state != "active")
        .map(|w| w.state.clone())
}

/// What one pass did.
#[derive(Debug, Default)]
struct Tally {
    plans: usize,
    woken: usize,
    pending: usize,
    dropped: usize,
    failed: usize,
}

/// Serves `task.run` for the `waits` task: one look at every kept plan.
pub async fn pass(state: &crate::State, host: &sdk::Host) -> Result<TaskRunResult, RpcError> {
    let page = host
        .call_typed(&KvListParams {
            namespace: String::new(),
            prefix: PLAN_PREFIX.to_string(),
            after: String::new(),
            limit: MAX_PLANS_A_PASS,
        })
        .await
        .map_err(|e| RpcError::new(Code::Unavailable, format!("kv.list: {e}")))?;
    if !page.next.is_empty() {
        tracing::warn!(
            limit = MAX_PLANS_A_PASS,
            "more waits are kept than one pass looks at (MAX_PLANS_A_PASS); the rest wait for a later pass"
        );
    }
    let mut t = Tally::default();
    let now = protocol::time::now_ms();
    for entry in page.entries {
        t.plans += 1;
        let drop = |reason: &str| {
            tracing::info!(key = %entry.key, reason, "dropping a wait plan");
            KvCommitParams {
                checks: vec![KvCheck::version(entry.key.clone(), entry.version.clone())],
                deletes: vec![KvDelete {
                    namespace: String::new(),
                    key: entry.key.clone(),
                }],
                ..Default::default()
            }
        };
        let plan: Plan = match serde_json::from_value(entry.value.clone()) {
            Ok(p) => p,
            Err(e) => {
                let _ = host
                    .call_typed(&drop(&format!("unreadable plan: {e}")))
                    .await;
                t.dropped += 1;
                continue;
            }
        };
        if now > plan.due_ms + PLAN_GRACE_MS {
            let _ = host.call_typed(&drop("its Wait is past due")).await;
            t.dropped += 1;
            continue;
        }
        if let Some(ended) = wait_ended(host, &plan).await {
            let _ = host
                .call_typed(&drop(&format!("its Wait is {ended}")))
                .await;
            t.dropped += 1;
            continue;
        }
        let observed = match state.client(host, &plan.scope_id, &plan.connection).await {
            Ok(client) => look(&client, &plan).await.map_err(|e| e.to_rpc()),
            Err(e) => Err(e),
        };
        let observed = match observed {
            Ok(o) => o,
            Err(e) => {
                tracing::warn!(plan = %plan.id, work = %plan.work_id, error = %e, "looking at GitHub for a wait failed; trying again next pass");
                t.failed += 1;
                continue;
            }
        };
        match observed {
            Observed::Pending(line) => {
                t.pending += 1;
                if line != plan.progress {
                    let set = host
                        .call_typed(&WaitProgressParams {
                            work_id: plan.work_id.clone(),
                            progress: line.clone(),
                        })
                        .await;
                    if set.is_ok() {
                        let mut kept = plan.clone();
                        kept.progress = line;
                        let value = serde_json::to_value(&kept).unwrap_or(Value::Null);
                        let _ = host
                            .call_typed(&KvCommitParams {
                                checks: vec![KvCheck::version(
                                    entry.key.clone(),
                                    entry.version.clone(),
                                )],
                                puts: vec![KvPut {
                                    namespace: String::new(),
                                    key: entry.key.clone(),
                                    value,
                                }],
                                ..Default::default()
                            })
                            .await;
                    }
                }
            }
            Observed::Done(found) => {
                // Deliver only to an active Wait of ours: setting the line it has
                // already answers not_found before the planning turn settled.
                let active = host
                    .call_typed(&WaitProgressParams {
                        work_id: plan.work_id.clone(),
                        progress: plan.progress.clone(),
                    })
                    .await;
                if let Err(e) = active {
                    tracing::debug!(plan = %plan.id, error = %e, "the condition holds but the Wait is not active (yet)");
                    t.pending += 1;
                    continue;
                }
                let delivered = host
                    .call_typed(&IngressDeliverParams {
                        delivery: Delivery {
                            source: plan.source.clone(),
                            delivery_id: format!("wait/{}", plan.id),
                            body: None,
                            events: vec![waking_event(&plan, found)],
                        },
                    })
                    .await;
                match delivered {
                    Ok(_) => {
                        t.woken += 1;
                        tracing::info!(plan = %plan.id, work = %plan.work_id, "the wait's condition holds: delivered");
                        let _ = host.call_typed(&drop("its Wait was woken")).await;
                    }
                    Err(e) => {
                        t.failed += 1;
                        tracing::warn!(plan = %plan.id, error = %e, "delivering a wait's Event failed; trying again next pass");
                    }
                }
            }
        }
    }
    Ok(TaskRunResult {
        detail: format!(
            "{} waits: {} woken, {} pending, {} dropped, {} failed",
            t.plans, t.woken, t.pending, t.dropped, t.failed
        ),
    })
}
