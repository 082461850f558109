//! Observing a run and adopting it again: the lease kept alive while the run is
//! followed (`executor.wait`), `executor.recover` whenever the executor lost it, and
//! the physical-stop evidence that alone lets an unadoptable attempt settle failed.
//! An executor, extension or extrunner that does not answer is never taken as the
//! run's end.

use std::time::Duration;

use busapi::store::LeaseRenewRequest;
use protocol::wire::{
    self, ExecutorRecoverParams, ExecutorStopParams, ExecutorWaitParams, ExecutorWaitResult,
    Outcome,
};
use protocol::CallError;
use serde_json::Value;

use super::{epoch_u64, Attempt, Starter, LEASE_RENEW, LEASE_TTL, WAIT_CALL};
use crate::ports::ms;

/// The first wait before adoption (or a stop) is tried again; each later one doubles,
/// up to [`ADOPT_RETRY_MAX`].
const ADOPT_RETRY_FIRST: Duration = Duration::from_millis(250);
/// The longest wait between two tries at adoption.
const ADOPT_RETRY_MAX: Duration = Duration::from_secs(10);

/// How a run is to be adopted.
#[derive(Debug)]
pub(super) enum Recovery {
    /// With the recovery metadata stored for the attempt (read now); why, for the
    /// record when the run cannot be adopted.
    Stored(String),
    /// With this recovery metadata (a takeover read it with the lease).
    Given(String, Value),
    /// The executor said `not_adoptable` (this): stop it with evidence.
    NotAdoptable(String),
}

/// How an adoption ended.
#[derive(Debug)]
enum Adoption {
    /// The executor follows the run again.
    Adopted,
    /// It could not, and nothing of the run is left: settle this.
    Failed(Box<ExecutorWaitResult>),
    /// Another holder took the lease.
    LeaseLost,
}

/// Whether an error answering `executor.run` (or `resume`) is the executor's own
/// refusal of the launch, so that nothing runs: an invalid or unauthorized request.
/// Anything else (unavailable, a timeout, a lost connection, an internal error,
/// `conflict` for a run launched before) may hide a run that started.
pub(super) fn refused_before_launch(e: &CallError) -> bool {
    matches!(
        e.code(),
        Some(
            "invalid"
                | "unauthorized"
                | "undeclared"
                | "unsupported"
                | "not_found"
                | "retry_after"
                | "causal_limit"
                | "resource_setup_failed"
                | "resource_not_found"
                | "resource_exhausted"
                | "sandbox_denied"
                | "sandbox_unavailable"
        )
    )
}

impl Attempt {
    /// `executor.stop` of this attempt.
    pub(super) fn stop_params(&self) -> ExecutorStopParams {
        ExecutorStopParams {
            executor: self.executor.clone(),
            execution_id: self.execution_id.clone(),
            epoch: epoch_u64(self.epoch),
        }
    }
}

impl Starter {
    /// Keep the lease and wait for the run's result; recover it if the extension
    /// restarts meanwhile; then settle. With `recovery`, the run is adopted first.
    ///
    /// An executor, extension or extrunner that does not answer is never evidence
    /// that a run ended: adoption is tried again with backoff for as long as the lease
    /// is held (it is renewed all along). The attempt settles failed only after the
    /// executor's `not_adoptable` and its physical-stop evidence.
    pub(super) async fn observe(&self, a: Attempt, failures: i64, recovery: Option<Recovery>) {
        let (lost_tx, mut lost) = tokio::sync::watch::channel::<Option<String>>(None);
        let renew = {
            let store = self.store.clone();
            let request = LeaseRenewRequest {
                execution_id: a.execution_id.clone(),
                epoch: a.epoch,
                lease_ttl_ms: ms(LEASE_TTL),
            };
            tokio::spawn(async move {
                loop {
                    tokio::time::sleep(LEASE_RENEW).await;
                    let r = store.call(&request).await;
                    if let Err(e) = r {
                        if e.code() == Some(protocol::Code::Conflict.as_str()) {
                            let _ = lost_tx.send(Some(e.to_string()));
                            return;
                        }
                    }
                }
            })
        };
        let outcome = self.follow(&a, recovery, &mut lost).await;
        // The lease is kept while the result is settled too (a settle the store
        // cannot take now is offered again: see `settle`).
        match outcome {
            // The run ended because `sched.cancel` stopped it: the cancel settles the
            // Work (cancelled), not this result (which would retry it).
            Some(result) if self.is_cancelling(&a.work_id) => {
                tracing::info!(OC_WORK_ID = %a.work_id, OC_EXECUTION_ID = %a.execution_id, outcome = ?result.outcome, error = %result.error, "the run ended while its Work is being cancelled; the cancel settles it");
                crate::toolbelt::clear(&self.store, &a.execution_id).await;
            }
            Some(result) => self.settle(&a, result, failures).await,
            None => {
                let why = lost.borrow().clone().unwrap_or_default();
                tracing::warn!(OC_EXECUTION_ID = %a.execution_id, %why, "lease lost; another holder settles the attempt");
                self.stop_if_fenced(&a).await;
            }
        }
        renew.abort();
    }

    /// The run's result, adopting it first when `recovery` says so and again each
    /// time the executor is lost; `None` once the lease is lost.
    async fn follow(
        &self,
        a: &Attempt,
        mut recovery: Option<Recovery>,
        lost: &mut tokio::sync::watch::Receiver<Option<String>>,
    ) -> Option<ExecutorWaitResult> {
        loop {
            if let Some(r) = recovery.take() {
                match self.adopt(a, r, lost).await {
                    Adoption::Adopted => {}
                    Adoption::Failed(result) => return Some(*result),
                    Adoption::LeaseLost => return None,
                }
            }
            let params = ExecutorWaitParams {
                executor: a.executor.clone(),
                execution_id: a.execution_id.clone(),
            };
            let wait = self.ext_call(&a.extension, params, WAIT_CALL);
            let answer = tokio::select! {
                r = wait => r,
                _ = lost.wait_for(Option::is_some) => return None,
            };
            match answer {
                Ok(v) => {
                    return Some(match serde_json::from_str::<ExecutorWaitResult>(v.get()) {
                        Ok(r) => r,
                        Err(e) => {
                            let mut failed = ExecutorWaitResult::new(Outcome::Failed);
                            failed.error = format!("executor.wait answered: {e}");
                            failed
                        }
                    })
                }
                Err(e) if e.code() == Some("not_adoptable") => {
                    recovery = Some(Recovery::NotAdoptable(e.to_string()));
                }
                Err(e) => {
                    // The extension is down, restarting, or a new process that does
                    // not know the run (`not_found`): adopt it again once it answers.
                    tracing::warn!(OC_EXECUTION_ID = %a.execution_id, error = %e, "observing the run failed; recovering it");
                    recovery = Some(Recovery::Stored(String::new()));
                }
            }
        }
    }

    /// The recovery metadata last persisted for the attempt; `None` when it cannot
    /// be read now.
    async fn stored_recovery(&self, a: &Attempt) -> Option<Value> {
        let executions = self.executions_of(&a.work_id).await?;
        Some(
            executions
                .into_iter()
                .find(|e| e.id == a.execution_id)
                .map(|e| e.recovery)
                .unwrap_or(Value::Null),
        )
    }

    /// `executor.recover` until the executor answers: adopted, or `not_adoptable`
    /// and then stopped with evidence. Every other error (the extension, extrunner,
    /// the broker or storaged unavailable) is tried again with backoff while the
    /// lease is held.
    async fn adopt(
        &self,
        a: &Attempt,
        how: Recovery,
        lost: &mut tokio::sync::watch::Receiver<Option<String>>,
    ) -> Adoption {
        let mut delay = ADOPT_RETRY_FIRST;
        let (why, known) = match how {
            Recovery::Stored(why) => (why, None),
            Recovery::Given(why, recovery) => (why, Some(recovery)),
            Recovery::NotAdoptable(e) => {
                return self.stop_with_evidence(a, String::new(), e, lost).await
            }
        };
        let mut known = known;
        loop {
            let recovery = match known.take() {
                Some(r) => Some(r),
                None => self.stored_recovery(a).await,
            };
            if let Some(recovery) = recovery {
                let recovery: wire::Payload = serde_json::from_value(recovery).unwrap_or_default();
                let mut run = a.run.clone();
                run.epoch = epoch_u64(a.epoch);
                if let Some(tb) = self.toolbelt.get() {
                    run.toolbelt = tb.for_run(&a.work_id, &a.execution_id, a.epoch);
                }
                let params = ExecutorRecoverParams { run, recovery };
                let r = self
                    .ext_call(&a.extension, params, Duration::from_secs(60))
                    .await;
                match r {
                    Ok(_) => {
                        tracing::info!(OC_EXECUTION_ID = %a.execution_id, epoch = a.epoch, "run adopted");
                        return Adoption::Adopted;
                    }
                    Err(e) if e.code() == Some("not_adoptable") => {
                        return self.stop_with_evidence(a, why, e.to_string(), lost).await;
                    }
                    Err(e) => {
                        tracing::warn!(OC_EXECUTION_ID = %a.execution_id, error = %e, retry_in = ?delay, "the executor cannot adopt the run now; trying again");
                    }
                }
            }
            tokio::select! {
                _ = tokio::time::sleep(delay) => {}
                _ = lost.wait_for(Option::is_some) => return Adoption::LeaseLost,
            }
            delay = (delay * 2).min(ADOPT_RETRY_MAX);
        }
    }

    /// After `not_adoptable`: `executor.stop` until it answers with physical-stop
    /// evidence (nothing of the run left), then the failure to settle.
    async fn stop_with_evidence(
        &self,
        a: &Attempt,
        why: String,
        refusal: String,
        lost: &mut tokio::sync::watch::Receiver<Option<String>>,
    ) -> Adoption {
        let mut delay = ADOPT_RETRY_FIRST;
        loop {
            let r = self
                .ext_call(&a.extension, a.stop_params(), Duration::from_secs(120))
                .await;
            match r.map(|answer| serde_json::from_str::<wire::ExecutorStopResult>(answer.get())) {
                Ok(Ok(stop)) if stop.stopped => {
                    let mut failed = ExecutorWaitResult::new(Outcome::Failed);
                    let adopted = format!(
                        "the run could not be adopted: {refusal}; stopped: {}",
                        stop.detail
                    );
                    failed.error = if why.is_empty() {
                        adopted
                    } else {
                        format!("{why}; {adopted}")
                    };
                    return Adoption::Failed(Box::new(failed));
                }
                Ok(Ok(stop)) => {
                    tracing::warn!(OC_EXECUTION_ID = %a.execution_id, detail = %stop.detail, "the run is not stopped yet; asking again");
                }
                Ok(Err(e)) => {
                    tracing::warn!(OC_EXECUTION_ID = %a.execution_id, error = %e, "executor.stop answered something that does not decode; asking again");
                }
                Err(e) => {
                    tracing::warn!(OC_EXECUTION_ID = %a.execution_id, error = %e, "executor.stop failed; asking again");
                }
            }
            tokio::select! {
                _ = tokio::time::sleep(delay) => {}
                _ = lost.wait_for(Option::is_some) => return Adoption::LeaseLost,
            }
            delay = (delay * 2).min(ADOPT_RETRY_MAX);
        }
    }
}
