//! `sched.retry`: run a Work again.
//!
//! A failed or cancelled Work is reopened with the inputs it failed or was cancelled
//! with; an idle or completed one gets a new turn, on the input `seq` names (the
//! `core.action.retry` Event that asked for it) or else on its latest input again
//! (`store.work_retry`, which also resets its failure count). A Work that is running,
//! waiting or queued already is refused `conflict`, with why; so is one being
//! cancelled right now. The Work's annotation follows (`work.annotate`), and the
//! store's `work.changed` wakes the starter.

use busapi::sched::RetryResult;
use busapi::store::WorkRetryRequest;
use protocol::{Code, RpcError};

use super::cancel::MAX_CANCEL_REASON_BYTES;
use super::Starter;

impl Starter {
    /// `sched.retry`: `store.work_retry {work_id, reason, seq?}`. Answers `{work_id,
    /// state, was, inputs}`; the store's refusal (`not_found`, `conflict`) keeps its
    /// code.
    pub async fn retry(
        &self,
        work_id: &str,
        reason: &str,
        seq: Option<i64>,
    ) -> Result<RetryResult, RpcError> {
        if work_id.is_empty() {
            return Err(RpcError::new(Code::Invalid, "work_id is required"));
        }
        if reason.len() > MAX_CANCEL_REASON_BYTES {
            return Err(RpcError::new(
                Code::Invalid,
                format!(
                    "the reason is {} bytes, over the limit of {MAX_CANCEL_REASON_BYTES} \
                     (max_cancel_reason_bytes)",
                    reason.len()
                ),
            ));
        }
        if self.is_cancelling(work_id) {
            return Err(RpcError::new(
                Code::Conflict,
                format!("Work {work_id} is being cancelled: retry it once it is"),
            ));
        }
        let request = WorkRetryRequest {
            work_id: work_id.to_owned(),
            reason: reason.to_owned(),
            seq,
            expect_version: None,
        };
        let r = self.store.call(&request).await.map_err(|e| {
            let code = e.code().and_then(Code::parse).unwrap_or(Code::Unavailable);
            RpcError::new(code, format!("Work {work_id} does not run again: {e}"))
        })?;
        self.router.annotate(work_id);
        tracing::info!(OC_WORK_ID = %work_id, was = %r.was, %reason, "Work runs again");
        Ok(RetryResult {
            work_id: work_id.to_owned(),
            state: r.state,
            was: r.was,
            inputs: r.inputs,
        })
    }
}
