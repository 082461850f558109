//! The operator's controls of a running attempt (`sched.interrupt`, `sched.stop`,
//! `sched.inject` through the executor) and the events routed to a Work whose
//! attempt runs, injected into it.

use std::time::Duration;

use busapi::sched::{ControlResult, InjectResult};
use busapi::store::{ExecutionRow, WorkInputsRequest};
use busapi::Call;
use protocol::wire::{self, ExecutorInjectParams, ExecutorInterruptParams, ExecutorStopParams};
use serde_json::Value;

use super::{epoch_u64, Starter, MAX_INJECT_INPUTS};
use crate::ports::{decode, Answer};

/// How long one control of a running attempt may take.
const CONTROL_TIMEOUT: Duration = Duration::from_secs(120);

/// The executor's answer to a control, as it gave it.
fn answered(method: &str, answer: Answer) -> Result<Value, String> {
    answer
        .and_then(|a| decode::<Value>(method, &a))
        .map_err(|e| format!("{method}: {e}"))
}

impl Starter {
    /// The running attempt of `work_id`: the execution row, its executor and the
    /// extension declaring it.
    async fn running_attempt(
        &self,
        work_id: &str,
    ) -> Result<(ExecutionRow, String, String), String> {
        let Some(ex) = self.running_execution(work_id).await? else {
            return Err(format!("Work {work_id} has no running attempt"));
        };
        if !ex.host.is_empty() && ex.host != self.host.id {
            return Err(format!(
                "the running attempt of Work {work_id} runs on host {}, not this one ({}): \
                 its executor is there",
                ex.host, self.host.id
            ));
        }
        let executor = ex.executor.clone();
        let extension = self.extension_declaring(&executor)?;
        Ok((ex, executor, extension))
    }

    /// `sched.interrupt`: `executor.interrupt` on the running attempt of `work_id`,
    /// with `reason`. Answers the executor's answer, with the execution.
    pub async fn interrupt(&self, work_id: &str, reason: &str) -> Result<ControlResult, String> {
        let (ex, executor, extension) = self.running_attempt(work_id).await?;
        let params = ExecutorInterruptParams {
            executor,
            execution_id: ex.id.clone(),
            epoch: epoch_u64(ex.epoch),
            reason: reason.to_owned(),
        };
        let answer = self.ext_call(&extension, params, CONTROL_TIMEOUT).await;
        Ok(ControlResult {
            answer: answered(ExecutorInterruptParams::METHOD, answer)?,
            execution_id: ex.id,
            epoch: ex.epoch,
        })
    }

    /// `sched.stop`: `executor.stop` on the running attempt of `work_id`. Answers the
    /// executor's answer, with the execution.
    pub async fn stop(&self, work_id: &str) -> Result<ControlResult, String> {
        let (ex, executor, extension) = self.running_attempt(work_id).await?;
        let params = ExecutorStopParams {
            executor,
            execution_id: ex.id.clone(),
            epoch: epoch_u64(ex.epoch),
        };
        let answer = self.ext_call(&extension, params, CONTROL_TIMEOUT).await;
        Ok(ControlResult {
            answer: answered(ExecutorStopParams::METHOD, answer)?,
            execution_id: ex.id,
            epoch: ex.epoch,
        })
    }

    /// `sched.inject`: each of `inputs` (Events, or the IDs of the Work's input
    /// events) injected into the running attempt of `work_id` as its own
    /// `executor.inject`. Answers the executor's answers, with the execution.
    pub async fn inject(&self, work_id: &str, inputs: &Value) -> Result<InjectResult, String> {
        let (ex, executor, extension) = self.running_attempt(work_id).await?;
        let events = self.events_to_inject(work_id, inputs).await?;
        let mut answers = Vec::new();
        for event in events {
            let params = ExecutorInjectParams {
                executor: executor.clone(),
                execution_id: ex.id.clone(),
                epoch: epoch_u64(ex.epoch),
                event,
            };
            let answer = self.ext_call(&extension, params, CONTROL_TIMEOUT).await;
            answers.push(answered(ExecutorInjectParams::METHOD, answer)?);
        }
        Ok(InjectResult {
            execution_id: ex.id,
            epoch: ex.epoch,
            answers,
        })
    }

    /// `sched.inject`'s `inputs`: Event objects as they are, and IDs of the Work's own
    /// input events looked up; at most [`MAX_INJECT_INPUTS`].
    async fn events_to_inject(
        &self,
        work_id: &str,
        inputs: &Value,
    ) -> Result<Vec<wire::Event>, String> {
        let list: Vec<Value> = match inputs {
            Value::Array(a) => a.clone(),
            Value::Null => return Err("inject needs inputs: Events or event IDs".into()),
            one => vec![one.clone()],
        };
        if list.len() > MAX_INJECT_INPUTS {
            return Err(format!(
                "{} inputs, over the limit of {MAX_INJECT_INPUTS} (max_inject_inputs)",
                list.len()
            ));
        }
        let mut out = Vec::new();
        let mut known: Option<Vec<wire::Event>> = None;
        for (i, input) in list.into_iter().enumerate() {
            match input {
                Value::String(id) => {
                    if known.is_none() {
                        let seqs = self.input_seqs(work_id).await?;
                        known = Some(self.inputs(work_id, &seqs).await);
                    }
                    let event = known
                        .as_ref()
                        .and_then(|k| k.iter().find(|e| e.id == id))
                        .ok_or_else(|| {
                            format!("inputs[{i}]: {id:?} is not an input of Work {work_id}")
                        })?;
                    out.push(event.clone());
                }
                Value::Object(o) => {
                    let event: wire::Event = serde_json::from_value(Value::Object(o))
                        .map_err(|e| format!("inputs[{i}] is not an Event: {e}"))?;
                    out.push(event);
                }
                other => {
                    return Err(format!(
                        "inputs[{i}] is neither an Event nor an event ID: {other}"
                    ))
                }
            }
        }
        Ok(out)
    }

    /// The sequence numbers of every input of `work_id`.
    async fn input_seqs(&self, work_id: &str) -> Result<Vec<i64>, String> {
        let mut seqs = Vec::new();
        let mut after = 0i64;
        loop {
            let page = self
                .store
                .call(&WorkInputsRequest {
                    work_id: work_id.to_owned(),
                    state: None,
                    after,
                    limit: 1000,
                })
                .await
                .map_err(|e| format!("{}: {e}", WorkInputsRequest::METHOD))?;
            let got: Vec<i64> = page.inputs.iter().map(|i| i.seq).collect();
            if got.is_empty() {
                return Ok(seqs);
            }
            after = got.iter().copied().max().unwrap_or(after);
            seqs.extend(got);
        }
    }

    /// Injects the events the router routed to running attempts, where their executor
    /// advertises `inject` (spec 003: injection). An attempt that no longer runs, an
    /// executor that does not inject or an injection not accepted leaves the event
    /// pending for the Work's next attempt.
    pub async fn inject_routed(&self) {
        for (work_id, seq) in self.router.take_injections() {
            let (ex, executor, extension) = match self.running_attempt(&work_id).await {
                Ok(a) => a,
                Err(why) => {
                    tracing::debug!(OC_WORK_ID = %work_id, seq, why = %why, "not injected; the event waits for the next attempt");
                    continue;
                }
            };
            let injectable = self
                .router
                .knowledge()
                .read()
                .is_ok_and(|k| k.injectable.contains(&executor));
            if !injectable {
                continue;
            }
            let Some(event) = self.inputs(&work_id, &[seq]).await.into_iter().next() else {
                continue;
            };
            let event_id = event.id.clone();
            let params = ExecutorInjectParams {
                executor,
                execution_id: ex.id.clone(),
                epoch: epoch_u64(ex.epoch),
                event,
            };
            match self
                .ext_call(&extension, params, Duration::from_secs(30))
                .await
            {
                Ok(_) => {
                    tracing::info!(OC_WORK_ID = %work_id, OC_EXECUTION_ID = %ex.id, event = %event_id, "injected into the running attempt")
                }
                Err(e) => {
                    tracing::info!(OC_WORK_ID = %work_id, OC_EXECUTION_ID = %ex.id, event = %event_id, error = %e, "not injected; the event waits for the next attempt")
                }
            }
        }
    }
}
