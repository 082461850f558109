//! The operator's controls of a running attempt (`sched.interrupt`, `sched.stop`,
//! `sched.inject` through the executor) and the events routed to a Work whose
//! attempt runs, injected into it.

use protocol::wire;
use serde_json::{json, Value};

use super::*;

impl Starter {
    /// The running attempt of `work_id`: the execution row, its executor and the
    /// extension declaring it.
    async fn running_attempt(&self, work_id: &str) -> Result<(Value, String, String), String> {
        let Some(ex) = self.running_execution(work_id).await? else {
            return Err(format!("Work {work_id} has no running attempt"));
        };
        let host = ex["host"].as_str().unwrap_or_default();
        if !host.is_empty() && host != self.host.id {
            return Err(format!(
                "the running attempt of Work {work_id} runs on host {host}, not this one ({}): \
                 its executor is there",
                self.host.id
            ));
        }
        let executor = ex["executor"].as_str().unwrap_or_default().to_owned();
        let extension = self.extension_declaring(&executor)?;
        Ok((ex, executor, extension))
    }

    /// `executor.interrupt`, `executor.stop` or `executor.inject` on the running attempt
    /// of `work_id` (for the CLI). Answers the executor's answer, with the execution.
    /// `inject` takes `inputs`: Events, or the IDs of the Work's input events, each
    /// injected as its own `executor.inject`.
    pub async fn control(
        &self,
        work_id: &str,
        control: &str,
        extra: Value,
    ) -> Result<Value, String> {
        let method = match control {
            "interrupt" => "executor.interrupt",
            "stop" => "executor.stop",
            "inject" => "executor.inject",
            other => return Err(format!("no control {other:?} (interrupt, stop, inject)")),
        };
        let (ex, executor, extension) = self.running_attempt(work_id).await?;
        let base = json!({"executor": executor, "execution_id": ex["id"], "epoch": ex["epoch"]});
        let with = |extra: &Value| {
            let mut params = base.clone();
            if let (Some(p), Some(extra)) = (params.as_object_mut(), extra.as_object()) {
                for (k, v) in extra {
                    p.insert(k.clone(), v.clone());
                }
            }
            params
        };
        if control == "inject" {
            let events = self.events_to_inject(work_id, &extra["inputs"]).await?;
            let mut answers = Vec::new();
            for event in events {
                let answer = self
                    .ext_call(
                        &extension,
                        method,
                        with(&json!({ "event": event })),
                        Duration::from_secs(120),
                    )
                    .await
                    .map_err(|e| format!("{method}: {e}"))?;
                answers.push(answer);
            }
            return Ok(json!({"execution_id": ex["id"], "epoch": ex["epoch"], "answers": answers}));
        }
        let answer = self
            .ext_call(&extension, method, with(&extra), Duration::from_secs(120))
            .await
            .map_err(|e| format!("{method}: {e}"))?;
        Ok(json!({"execution_id": ex["id"], "epoch": ex["epoch"], "answer": answer}))
    }

    /// `sched.inject`'s `inputs`: Event objects as they are, and IDs of the Work's own
    /// input events looked up; at most [`MAX_INJECT_INPUTS`].
    async fn events_to_inject(&self, work_id: &str, inputs: &Value) -> Result<Vec<Value>, String> {
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
                    out.push(json!(event));
                }
                Value::Object(o) => {
                    let event: wire::Event = serde_json::from_value(Value::Object(o))
                        .map_err(|e| format!("inputs[{i}] is not an Event: {e}"))?;
                    out.push(json!(event));
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
                .bus
                .call(
                    "store.work_inputs",
                    &json!({"work_id": work_id, "after": after, "limit": 1000}),
                )
                .await
                .map_err(|e| format!("store.work_inputs: {e}"))?;
            let got: Vec<i64> = page["inputs"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|i| i["seq"].as_i64())
                .collect();
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
            let params = json!({"executor": executor, "execution_id": ex["id"],
                                "epoch": ex["epoch"], "event": event});
            match self
                .ext_call(
                    &extension,
                    "executor.inject",
                    params,
                    Duration::from_secs(30),
                )
                .await
            {
                Ok(_) => {
                    tracing::info!(OC_WORK_ID = %work_id, OC_EXECUTION_ID = %ex["id"], event = %event.id, "injected into the running attempt")
                }
                Err(e) => {
                    tracing::info!(OC_WORK_ID = %work_id, OC_EXECUTION_ID = %ex["id"], event = %event.id, error = %e, "not injected; the event waits for the next attempt")
                }
            }
        }
    }
}
