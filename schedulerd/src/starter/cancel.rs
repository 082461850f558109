//! `sched.cancel`: cancel a Work, stopping its running attempt first.
//!
//! The Work's running attempt, when it runs on this host, is stopped through its
//! executor (`executor.stop`, answered with physical-stop evidence) before
//! `store.work_cancel` settles the Work and fences the attempt's lease. While the
//! cancel is under way the attempt's own result (its `executor.wait` answers once the
//! stop ended the run) settles nothing: it would fail the attempt and retry the Work.
//! Once the Work is cancelled, the attempt's writes are refused by epoch anyway.
//!
//! An attempt of another host, or one whose executor cannot stop it (`stopped:
//! false`, no answer within [`CANCEL_STOP_WAIT`], no extension declaring the
//! executor), does not hold the cancel up: the Work is cancelled all the same and the
//! answer says the run may still be running, and where. The host that observes that
//! run finds its lease fenced when it next renews it and asks its executor to stop
//! it then (best effort).

use std::time::Duration;

use busapi::sched::{AttemptStop, CancelResult};
use busapi::store::{ExecutionRow, WorkCancelRequest};
use protocol::wire::{ExecutorStopParams, ExecutorStopResult};
use protocol::{Code, RpcError};

use super::{epoch_u64, Starter};

/// How long `sched.cancel` waits for the executor's stop before it cancels the Work
/// anyway (saying the run may still be running): under the 60 s the CLI waits for
/// an answer.
pub const CANCEL_STOP_WAIT: Duration = Duration::from_secs(45);

/// The longest reason `sched.cancel` takes: the store's reason limit, checked before
/// anything is stopped.
pub const MAX_CANCEL_REASON_BYTES: usize = 2048;

/// How the attempt ended, for a person.
fn said(stop: &AttemptStop) -> String {
    if stop.stopped {
        format!(
            "its running attempt {} was stopped on host {}: {}",
            stop.execution_id, stop.host, stop.detail
        )
    } else {
        format!(
            "its running attempt {} may still be running on host {}: {}",
            stop.execution_id, stop.host, stop.detail
        )
    }
}

impl Starter {
    /// Whether `sched.cancel` is cancelling `work_id` now.
    pub(super) fn is_cancelling(&self, work_id: &str) -> bool {
        self.cancelling
            .lock()
            .map(|c| c.contains(work_id))
            .unwrap_or(false)
    }

    /// `sched.cancel`: stop the running attempt of `work_id` (when it runs on this
    /// host), then cancel the Work (`store.work_cancel`, with `reason`). Answers
    /// `{work_id, state, epoch, execution_id, wait_id, attempt}`, `attempt` being
    /// `null` when nothing was running, else `{execution_id, host, stopped, detail}`.
    /// The store's refusal (`not_found`, `conflict` for a Work already settled) keeps
    /// its code.
    pub async fn cancel(&self, work_id: &str, reason: &str) -> Result<CancelResult, RpcError> {
        if work_id.is_empty() {
            return Err(RpcError::new(Code::Invalid, "work_id is required"));
        }
        if reason.len() > MAX_CANCEL_REASON_BYTES {
            return Err(RpcError::new(
                Code::Invalid,
                format!(
                    "the reason is {} bytes, over the limit of {MAX_CANCEL_REASON_BYTES}                      (max_cancel_reason_bytes)",
                    reason.len()
                ),
            ));
        }
        {
            let mut cancelling = self
                .cancelling
                .lock()
                .map_err(|_| RpcError::new(Code::Internal, "the cancel set is poisoned"))?;
            if !cancelling.insert(work_id.to_owned()) {
                return Err(RpcError::new(
                    Code::Conflict,
                    format!("Work {work_id} is being cancelled already"),
                ));
            }
        }
        let answer = self.cancel_marked(work_id, reason).await;
        if let Ok(mut cancelling) = self.cancelling.lock() {
            cancelling.remove(work_id);
        }
        answer
    }

    async fn cancel_marked(&self, work_id: &str, reason: &str) -> Result<CancelResult, RpcError> {
        let running = self
            .running_execution(work_id)
            .await
            .map_err(|e| RpcError::new(Code::Unavailable, e))?;
        let attempt = match &running {
            Some(ex) => Some(self.stop_for_cancel(work_id, ex).await),
            None => None,
        };
        let cancelled = self
            .store
            .call(&WorkCancelRequest {
                work_id: work_id.to_owned(),
                reason: reason.to_owned(),
                expect_version: None,
            })
            .await;
        let cancelled = match cancelled {
            Ok(c) => c,
            Err(e) => {
                let code = e.code().and_then(Code::parse).unwrap_or(Code::Unavailable);
                let mut message = format!("Work {work_id} is not cancelled: {e}");
                if let Some(a) = &attempt {
                    message.push_str(&format!("; {}", said(a)));
                }
                return Err(RpcError::new(code, message));
            }
        };
        self.router.annotate(work_id);
        match &attempt {
            Some(a) if a.stopped => {
                tracing::info!(OC_WORK_ID = %work_id, OC_EXECUTION_ID = %a.execution_id, detail = %a.detail, "Work cancelled; its running attempt was stopped first")
            }
            Some(a) => {
                tracing::warn!(OC_WORK_ID = %work_id, OC_EXECUTION_ID = %a.execution_id, host = %a.host, detail = %a.detail, "Work cancelled; its run may still be running")
            }
            None => tracing::info!(OC_WORK_ID = %work_id, "Work cancelled; no attempt was running"),
        }
        Ok(CancelResult {
            work_id: work_id.to_owned(),
            state: "cancelled".into(),
            epoch: cancelled.epoch,
            execution_id: cancelled.execution_id,
            wait_id: cancelled.wait_id,
            attempt,
        })
    }

    /// `executor.stop` on the running attempt `ex` of `work_id`, when it runs here,
    /// within [`CANCEL_STOP_WAIT`]: whether nothing of the run is left, and why.
    async fn stop_for_cancel(&self, work_id: &str, ex: &ExecutionRow) -> AttemptStop {
        let execution_id = ex.id.clone();
        let host = match ex.host.as_str() {
            "" => self.host.id.clone(),
            h => h.to_owned(),
        };
        let not_stopped = |detail: String| AttemptStop {
            execution_id: execution_id.clone(),
            host: host.clone(),
            stopped: false,
            detail,
        };
        if host != self.host.id {
            return not_stopped(format!(
                "it runs on host {host}, not this one ({}): only the executor there can stop \
                 it, and that host's schedulerd asks it to once it finds the attempt's lease \
                 fenced, if that host is up",
                self.host.id
            ));
        }
        let executor = ex.executor.clone();
        let extension = match self.extension_declaring(&executor) {
            Ok(e) => e,
            Err(why) => return not_stopped(format!("{why}: nothing here can stop the run")),
        };
        tracing::info!(OC_WORK_ID = %work_id, OC_EXECUTION_ID = %execution_id, "cancelling: stopping the running attempt first");
        let params = ExecutorStopParams {
            executor: executor.clone(),
            execution_id: execution_id.clone(),
            epoch: epoch_u64(ex.epoch),
        };
        let answer = self.ext_call(&extension, params, CANCEL_STOP_WAIT).await;
        match answer.map(|a| serde_json::from_str::<ExecutorStopResult>(a.get())) {
            Ok(Ok(stop)) => AttemptStop {
                execution_id: execution_id.clone(),
                host: host.clone(),
                stopped: stop.stopped,
                detail: if stop.detail.is_empty() {
                    format!("{executor}'s executor.stop said no more")
                } else {
                    stop.detail
                },
            },
            Ok(Err(e)) => not_stopped(format!(
                "{executor}'s executor.stop answered something that does not decode: {e}"
            )),
            Err(e) => not_stopped(format!(
                "{executor}'s executor.stop failed (waited at most {} s, the cancel's stop \
                 wait): {e}",
                CANCEL_STOP_WAIT.as_secs()
            )),
        }
    }
}
