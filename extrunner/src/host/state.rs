//! The Work and configuration reads (`state.work`, `state.executions`, `state.waits`,
//! `state.scopes`, `state.scope`) and `work.cancel`, bound to what the extension may
//! reach.
//!
//! **Reach** (spec, "Authority and scoping", the state reads): a Work is within the
//! extension's reach when it is in a scope whose configuration uses the extension
//! (its identity's scopes), or when it is of one of the Work kinds its manifest
//! declares (`provides.work_kinds`), wherever it is, so a package can find and retire
//! Work left where its entry was removed. A Work out of reach reads exactly as one
//! that does not exist: `state.work` is `not_found` with the same message
//! (`no Work <id>`), `state.executions` and `state.waits` answer an empty list. So a
//! read is never an existence oracle.
//!
//! - `state.executions`: the Work's Executions, oldest first (by attempt). storaged's
//!   execution state is carried as it is (`running`, `waiting`, `completed`,
//!   `failed`, `handoff`, `cancelled`) with the outcome it implies.
//! - `state.waits`: the Work's Waits, oldest first (by declaration time), each with
//!   its state, owner, description, progress, keys, types and due time. A Wait's
//!   `plan` is shown to its owner only (the extension whose operation declared it):
//!   human's asks and gates look up their own Wait's plan; another owner's reads as
//!   no plan.
//! - Both answer at most [`MAX_WORK_ROWS`] rows, the newest ones: a long-lived Work
//!   keeps its latest. The host reads at most [`MAX_READ_ROWS`] rows of one Work to
//!   find them; a Work with more is refused as `unsupported`, naming the limit.
//! - `state.scopes` / `state.scope`: the configuration in force, limited to the
//!   scopes whose configuration uses the extension, and the disabled scopes holding
//!   its entries (`disabled: true`, as `configure`'s `disabled` entries tell it).
//!   Each carries the extension's own entries (as `configure` gives them), the
//!   scope's routes (a route's config only when its handler is the extension's) and
//!   its bindings (the executor config only for the extension's own executors).
//!   Another scope, or none, is `not_found` (`no scope <id>`).
//! - `work.cancel`: only Work of the extension's own declared kinds, within reach as
//!   above: in its scopes, or anywhere for its own kinds (spec, "Authority and
//!   scoping": "Work of the extension's own declared kinds wherever it is (which
//!   work.cancel may also cancel)"; docs/decisions.md). A Work out of reach is
//!   `not_found` as for the reads; one within reach of another kind is
//!   `unauthorized`, and nothing is done. A Work already ended answers
//!   `cancelled: false`; an open one is cancelled through schedulerd's `sched.cancel`
//!   (which stops a running attempt first) with the reason `cancelled by <name>`
//!   (`: <reason>` when one is given, at most [`MAX_CANCEL_REASON_BYTES`]). The wire
//!   carries no key, so no key is prefixed.

use std::collections::VecDeque;

use super::*;
use busapi::sched::CancelRequest;
use busapi::store::{
    ExecutionRow, ExecutionsRequest, WaitRow, WaitsRequest, WorkGetRequest, WorkRow,
};
use protocol::wire::{
    Execution, Outcome, StateExecutionsParams, StateExecutionsResult, StateScopeParams,
    StateScopeResult, StateScopesResult, StateWaitsParams, StateWaitsResult, StateWorkParams,
    StateWorkResult, WorkCancelParams, WorkCancelResult,
};

/// The most Executions or Waits one `state.executions` or `state.waits` answers: the
/// newest of the Work's.
pub const MAX_WORK_ROWS: usize = wire::MAX_PAGE_LIMIT as usize;

/// The most Executions or Waits of one Work the host reads to answer the newest
/// [`MAX_WORK_ROWS`]; a Work with more is refused (`unsupported`).
pub const MAX_READ_ROWS: usize = 100_000;

/// The longest reason `work.cancel` takes (the host adds `cancelled by <name>: `).
pub const MAX_CANCEL_REASON_BYTES: usize = 1024;

/// The longest ID a `not_found` answer repeats.
const MAX_ECHO_BYTES: usize = 200;

/// The Work states that have ended: nothing is left to cancel.
const ENDED: &[&str] = &["completed", "failed", "cancelled"];

fn required(field: &str, v: &str) -> Result<(), RpcError> {
    if v.is_empty() {
        return Err(RpcError::new(Code::Invalid, format!("{field} is required")));
    }
    Ok(())
}

/// The one answer for a Work that does not exist and one out of reach.
fn no_work(id: &str) -> RpcError {
    RpcError::new(
        Code::NotFound,
        format!("no Work {}", wire::clip_line(id, MAX_ECHO_BYTES)),
    )
}

/// The one answer for a scope that does not exist and one out of reach.
fn no_scope(id: &str) -> RpcError {
    RpcError::new(
        Code::NotFound,
        format!("no scope {}", wire::clip_line(id, MAX_ECHO_BYTES)),
    )
}

fn too_many(what: &str, work_id: &str) -> RpcError {
    RpcError::new(
        Code::Unsupported,
        format!(
            "Work {work_id} has more than {MAX_READ_ROWS} {what}, over the limit of \
             {MAX_READ_ROWS} the host reads for one Work"
        ),
    )
}

/// storaged's Work row as the wire shows it (through the one conversion
/// `state.works` uses too).
fn wire_work(w: &WorkRow) -> wire::Work {
    wire::Work::from_store_row(&serde_json::to_value(w).unwrap_or(Value::Null))
}

/// storaged's Execution row as the wire shows it: the outcome is what its state says
/// of how its last segment ended.
fn wire_execution(e: ExecutionRow) -> Execution {
    let outcome = match e.state.as_str() {
        "completed" => Some(Outcome::Completed),
        "failed" => Some(Outcome::Failed),
        "handoff" => Some(Outcome::Handoff),
        "waiting" => Some(Outcome::Waiting),
        _ => None,
    };
    Execution {
        id: e.id,
        work_id: e.work_id,
        attempt: u32::try_from(e.attempt).unwrap_or(0),
        epoch: u64::try_from(e.epoch).unwrap_or(0),
        executor: e.executor,
        state: e.state,
        outcome,
        started_at: e.started_at,
        ended_at: e.settled_at.unwrap_or_default(),
    }
}

/// storaged's Wait row as the wire shows it to `reader`: its plan only when `reader`
/// owns it.
fn wire_wait(reader: &str, w: WaitRow) -> wire::Wait {
    let plan = if !w.owner.is_empty() && w.owner == reader {
        w.plan
    } else {
        Value::Null
    };
    wire::Wait {
        id: w.id,
        work_id: w.work_id,
        state: w.state,
        owner: w.owner,
        operation: String::new(),
        description: w.description,
        progress: w.progress,
        keys: w.keys,
        types: w.types,
        plan,
        due_at: w.due_at.unwrap_or_default(),
        created_at: w.created_at,
    }
}

impl Scoped<'_> {
    /// Whether `kind` is one of the Work kinds the manifest declares.
    fn own_kind(&self, kind: &str) -> bool {
        !kind.is_empty()
            && self
                .identity
                .manifest
                .provides
                .work_kinds
                .iter()
                .any(|k| k.name == kind)
    }

    /// Whether the extension may read `w`: in its scopes, or of its own kinds.
    fn reaches(&self, w: &WorkRow) -> bool {
        self.identity.in_scope(&w.scope_id) || self.own_kind(&w.kind)
    }

    /// The Work `id` when it is within reach; `None` for one out of reach and for one
    /// that does not exist alike.
    async fn reachable_work(&self, id: &str) -> Result<Option<WorkRow>, RpcError> {
        match self.store(&WorkGetRequest { id: id.to_owned() }).await {
            Ok(r) if self.reaches(&r.work) => Ok(Some(r.work)),
            Ok(_) => Ok(None),
            Err(e) if e.is(Code::NotFound) => Ok(None),
            Err(e) => Err(e),
        }
    }

    pub(super) async fn state_work(&self, p: StateWorkParams) -> Result<StateWorkResult, RpcError> {
        required("id", &p.id)?;
        match self.reachable_work(&p.id).await? {
            Some(w) => Ok(StateWorkResult {
                work: wire_work(&w),
            }),
            None => Err(no_work(&p.id)),
        }
    }

    pub(super) async fn state_executions(
        &self,
        p: StateExecutionsParams,
    ) -> Result<StateExecutionsResult, RpcError> {
        required("work_id", &p.work_id)?;
        let Some(work) = self.reachable_work(&p.work_id).await? else {
            return Ok(StateExecutionsResult::default());
        };
        // By attempt, oldest first: the newest MAX_WORK_ROWS are the last read.
        let mut kept = VecDeque::new();
        let mut read = 0usize;
        let mut after = String::new();
        loop {
            let page = self
                .store(&ExecutionsRequest {
                    work_id: Some(work.id.clone()),
                    after: after.clone(),
                    ..ExecutionsRequest::default()
                })
                .await?;
            read += page.executions.len();
            for e in page.executions {
                kept.push_back(e);
                if kept.len() > MAX_WORK_ROWS {
                    kept.pop_front();
                }
            }
            if page.next.is_empty() || page.next == after {
                break;
            }
            if read >= MAX_READ_ROWS {
                return Err(too_many("Executions", &work.id));
            }
            after = page.next;
        }
        Ok(StateExecutionsResult {
            executions: kept.into_iter().map(wire_execution).collect(),
        })
    }

    pub(super) async fn state_waits(
        &self,
        p: StateWaitsParams,
    ) -> Result<StateWaitsResult, RpcError> {
        required("work_id", &p.work_id)?;
        let Some(work) = self.reachable_work(&p.work_id).await? else {
            return Ok(StateWaitsResult::default());
        };
        // storaged pages Waits by ID, which says nothing of their age: keep the
        // newest MAX_WORK_ROWS by declaration time as the pages come.
        let newest_first = |a: &WaitRow, b: &WaitRow| {
            (b.created_at.as_str(), b.id.as_str()).cmp(&(a.created_at.as_str(), a.id.as_str()))
        };
        let mut kept: Vec<WaitRow> = Vec::new();
        let mut read = 0usize;
        let mut after = String::new();
        loop {
            let page = self
                .store(&WaitsRequest {
                    work_id: Some(work.id.clone()),
                    after: after.clone(),
                    ..WaitsRequest::default()
                })
                .await?;
            read += page.waits.len();
            kept.extend(page.waits);
            if kept.len() > MAX_WORK_ROWS {
                kept.sort_by(newest_first);
                kept.truncate(MAX_WORK_ROWS);
            }
            if page.next.is_empty() || page.next == after {
                break;
            }
            if read >= MAX_READ_ROWS {
                return Err(too_many("Waits", &work.id));
            }
            after = page.next;
        }
        kept.sort_by(newest_first);
        kept.reverse();
        let reader = self.name();
        Ok(StateWaitsResult {
            waits: kept.into_iter().map(|w| wire_wait(reader, w)).collect(),
        })
    }

    /// The scopes the extension may read, as `state.scopes` shows them: those whose
    /// configuration uses it, then the disabled ones holding its entries.
    fn scopes_view(&self) -> Vec<wire::Scope> {
        let params = self.configuration.params();
        let document = self.configuration.document();
        let provides = &self.identity.manifest.provides;
        let own_handler = |h: &str| provides.routes.iter().any(|r| r.handler == h);
        let own_executor = |x: &str| provides.executors.iter().any(|e| e.name == x);
        let mut ids: Vec<(String, bool)> = self
            .identity
            .scopes
            .iter()
            .map(|s| (s.clone(), false))
            .collect();
        for e in &params.disabled {
            if !e.scope_id.is_empty() && !ids.iter().any(|(id, _)| id == &e.scope_id) {
                ids.push((e.scope_id.clone(), true));
            }
        }
        ids.into_iter()
            .map(|(id, disabled)| {
                let entries = if disabled {
                    &params.disabled
                } else {
                    &params.entries
                };
                let mut scope = wire::Scope {
                    id: id.clone(),
                    disabled,
                    entries: entries
                        .iter()
                        .filter(|e| e.scope_id == id)
                        .cloned()
                        .collect(),
                    ..wire::Scope::default()
                };
                let configured = document
                    .as_deref()
                    .and_then(|d| d.scopes.iter().find(|s| s.id == id));
                if let Some(configured) = configured {
                    scope.routes = configured
                        .routes
                        .iter()
                        .map(|r| {
                            let mut r = r.clone();
                            if !own_handler(&r.handler) {
                                r.config = Value::Null;
                            }
                            r
                        })
                        .collect();
                    scope.bindings = configured
                        .bindings
                        .iter()
                        .filter_map(|b| serde_json::from_value::<wire::Binding>(b.clone()).ok())
                        .map(|mut b| {
                            if !own_executor(&b.executor) {
                                b.config = Value::Null;
                            }
                            b
                        })
                        .collect();
                }
                scope
            })
            .collect()
    }

    pub(super) fn state_scopes(&self) -> StateScopesResult {
        StateScopesResult {
            scopes: self.scopes_view(),
        }
    }

    pub(super) fn state_scope(&self, p: StateScopeParams) -> Result<StateScopeResult, RpcError> {
        required("id", &p.id)?;
        self.scopes_view()
            .into_iter()
            .find(|s| s.id == p.id)
            .map(|scope| StateScopeResult { scope })
            .ok_or_else(|| no_scope(&p.id))
    }

    pub(super) async fn work_cancel(
        &self,
        p: WorkCancelParams,
    ) -> Result<WorkCancelResult, RpcError> {
        required("work_id", &p.work_id)?;
        if p.reason.len() > MAX_CANCEL_REASON_BYTES {
            return Err(RpcError::new(
                Code::Invalid,
                format!(
                    "reason is {} bytes, over the limit of {MAX_CANCEL_REASON_BYTES}",
                    p.reason.len()
                ),
            ));
        }
        let Some(work) = self.reachable_work(&p.work_id).await? else {
            return Err(no_work(&p.work_id));
        };
        let name = self.name();
        if !self.own_kind(&work.kind) {
            let kinds: Vec<&str> = self
                .identity
                .manifest
                .provides
                .work_kinds
                .iter()
                .map(|k| k.name.as_str())
                .collect();
            return Err(RpcError::new(
                Code::Unauthorized,
                format!(
                    "Work {} is of kind {:?}, not one of {name:?}'s declared work kinds ({}): \
                     work.cancel cancels only those; nothing was done",
                    work.id,
                    work.kind,
                    kinds.join(", ")
                ),
            ));
        }
        if ENDED.contains(&work.state.as_str()) {
            return Ok(WorkCancelResult { cancelled: false });
        }
        let reason = if p.reason.is_empty() {
            format!("cancelled by {name}")
        } else {
            format!("cancelled by {name}: {}", p.reason)
        };
        let cancel = CancelRequest {
            work_id: work.id.clone(),
            reason,
        };
        match self.bus.call_typed(&cancel).await {
            Ok(_) => {
                tracing::info!(extension = %name, OC_WORK_ID = %work.id, reason = %cancel.reason, "Work cancelled by its extension");
                Ok(WorkCancelResult { cancelled: true })
            }
            // Ended since it was read: nothing was left to cancel. Otherwise (being
            // cancelled already) the refusal as the scheduler said it.
            Err(CallError::Rpc(e)) if e.is(Code::Conflict) => {
                match self.reachable_work(&work.id).await? {
                    Some(now) if ENDED.contains(&now.state.as_str()) => {
                        Ok(WorkCancelResult { cancelled: false })
                    }
                    _ => Err(e),
                }
            }
            Err(CallError::Rpc(e)) => Err(e),
            Err(e) => Err(RpcError::new(
                Code::Unavailable,
                format!(
                    "the scheduler is unavailable ({e}): Work {} is not cancelled",
                    work.id
                ),
            )),
        }
    }
}
