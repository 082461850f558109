//! Settling an attempt (`store.attempt_settle`): the executor's result, with what the
//! turn declared through the toolbelt (a Wait parks the Work, an outcome replaces the
//! executor's unless it failed); a failure is retried with backoff (or at the
//! executor's hint) until the failure budget is spent. The extensions that asked are
//! told the segment ended.

use busapi::store::{AttemptSettleRequest, SettleWait};
use busapi::Call;
use protocol::time::now_ms;
use protocol::wire::{self, ExecutorWaitResult, Outcome};
use serde_json::json;
use std::time::Duration;

use super::{backoff, epoch_u64, Attempt, Starter, FAILURE_BUDGET};
use crate::ports::ms;

impl Starter {
    pub(super) async fn settle(&self, a: &Attempt, r: ExecutorWaitResult, failures: i64) {
        // What the turn declared through the toolbelt: a Wait parks the Work, an outcome
        // replaces the executor's, unless the executor failed.
        let declared = crate::toolbelt::declared(&self.store, &a.execution_id).await;
        let mut r = r;
        // An executor's own Wait is its own; one the turn declared is its planner's.
        let mut wait_owner = a.extension.clone();
        if let Some(d) = &declared {
            if r.outcome != Outcome::Failed {
                if let Some(w) = &d.wait {
                    r.outcome = Outcome::Waiting;
                    r.wait = Some(w.clone());
                    wait_owner = d.wait_owner.clone();
                } else if let Some((o, summary)) = &d.outcome {
                    r.outcome = *o;
                    if !summary.is_empty() {
                        r.summary = summary.clone();
                    }
                    if r.outcome == Outcome::Failed && r.error.is_empty() {
                        r.error = "the agent declared the turn failed".into();
                    }
                }
            }
        }
        let mut req = AttemptSettleRequest {
            execution_id: a.execution_id.clone(),
            epoch: a.epoch,
            outcome: r.outcome,
            result: Some(
                json!({"summary": r.summary, "error": r.error, "artifacts": r.artifacts,
                                "data": r.data, "usage": r.usage}),
            ),
            retry_at_ms: None,
            final_failure: false,
            wait: None,
            // Inputs injected into the turn and taken in: done with it (spec 003).
            consumed: r.consumed_inputs.clone(),
        };
        if r.outcome == Outcome::Failed {
            let n = failures + 1;
            if n >= FAILURE_BUDGET {
                req.final_failure = true;
            } else {
                let hinted = r
                    .retry_hint
                    .as_ref()
                    .and_then(|h| protocol::time::parse_rfc3339_ms(&h.reset_at));
                req.retry_at_ms = Some(hinted.unwrap_or_else(|| now_ms() + ms(backoff(n)) as i64));
            }
        }
        if r.outcome == Outcome::Waiting {
            if let Some(w) = &r.wait {
                req.wait = Some(SettleWait {
                    owner: wait_owner,
                    description: w.description.clone(),
                    keys: w.keys.clone(),
                    types: w.types.clone(),
                    plan: (!w.plan.is_null()).then(|| w.plan.clone()),
                    due_ms: protocol::time::parse_rfc3339_ms(&w.due_at),
                });
            }
        }
        self.segment_ended(
            wire::Authority {
                scope_id: a.run.work.scope_id.clone(),
                work_id: a.work_id.clone(),
                execution_id: a.execution_id.clone(),
                epoch: epoch_u64(a.epoch),
                binding: a.run.binding.name.clone(),
                connection: a.run.binding.connection.clone(),
            },
            serde_json::to_value(r.outcome)
                .ok()
                .and_then(|v| v.as_str().map(str::to_owned))
                .unwrap_or_default()
                .as_str(),
        );
        // The result is known here and nowhere else for sure (a run's files may not
        // have been written: a full disk): while the store cannot take it now, it is
        // offered again, with backoff, for up to SETTLE_PATIENCE. Meanwhile the Work
        // counts as running here, so no takeover adopts the run again.
        let give_up = tokio::time::Instant::now() + SETTLE_PATIENCE;
        let mut wait = SETTLE_FIRST_WAIT;
        loop {
            match self.store.call(&req).await {
                Ok(s) => {
                    tracing::info!(OC_WORK_ID = %a.work_id, OC_EXECUTION_ID = %a.execution_id, outcome = ?r.outcome, error = %r.error, work_state = %s.work_state, "attempt settled");
                    self.router.annotate(&a.work_id);
                    if declared.is_some() {
                        crate::toolbelt::clear(&self.store, &a.execution_id).await;
                    }
                    return;
                }
                Err(e) if not_now(&e) && tokio::time::Instant::now() + wait < give_up => {
                    if wait == SETTLE_FIRST_WAIT {
                        tracing::warn!(OC_WORK_ID = %a.work_id, OC_EXECUTION_ID = %a.execution_id, error = %e, method = AttemptSettleRequest::METHOD, "the attempt could not be settled now; its result is offered again until it is (for up to {SETTLE_PATIENCE:?})");
                    }
                    tokio::time::sleep(wait).await;
                    wait = (wait * 2).min(SETTLE_MAX_WAIT);
                }
                Err(e) => {
                    tracing::warn!(OC_WORK_ID = %a.work_id, OC_EXECUTION_ID = %a.execution_id, error = %e, method = AttemptSettleRequest::METHOD, "the attempt could not be settled; its lease will run out and recovery settles it");
                    return;
                }
            }
        }
    }
}

/// The first wait before a settle the store could not take is offered again.
const SETTLE_FIRST_WAIT: Duration = Duration::from_millis(250);
/// The longest wait between two offers.
const SETTLE_MAX_WAIT: Duration = Duration::from_secs(5);
/// How long a settle is offered again before the attempt is left to recovery
/// (which asks the executor, and may run the Work again if the run's own record
/// of its end was not written).
pub const SETTLE_PATIENCE: Duration = Duration::from_secs(3600);

/// Whether the store refused a settle for now only (unavailable: a full disk, the
/// database away; shutting down; overloaded), or did not answer: offered again.
fn not_now(e: &protocol::CallError) -> bool {
    use protocol::{CallError, Code};
    match e {
        CallError::Rpc(_) => e.code().is_some_and(|c| {
            [Code::Unavailable, Code::ShuttingDown, Code::Overloaded]
                .iter()
                .any(|k| k.as_str() == c)
        }),
        CallError::Transport(_) | CallError::Timeout(_) => true,
        _ => false,
    }
}
