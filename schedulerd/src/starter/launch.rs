//! Launching an attempt: its inputs read from the store, its run request (the
//! binding, the toolbelt token, the extensions' environment layers), then
//! `executor.run` (or, for a woken Wait, `executor.resume` of the same attempt) and
//! the run observed until it settles.

use std::collections::HashSet;
use std::time::Duration;

use busapi::store::{AttemptStartResponse, WorkEventsRequest, WorkRow};
use busapi::Call;
use protocol::wire::{
    self, ExecutorResumeParams, ExecutorRunParams, ExecutorWaitResult, Outcome, RunRequest,
};

use super::adopt::{refused_before_launch, Recovery};
use super::{epoch_u64, layers, Attempt, Starter};

impl Starter {
    /// The inputs of `work_id` among `seqs`, as a run carries them (those that
    /// cannot be read now are left out).
    pub(super) async fn inputs(&self, work_id: &str, seqs: &[i64]) -> Vec<wire::Event> {
        let wanted: HashSet<i64> = seqs.iter().copied().collect();
        let mut out = Vec::new();
        let mut after = 0i64;
        loop {
            let page = self
                .store
                .call(&WorkEventsRequest {
                    work_id: work_id.to_owned(),
                    after,
                    limit: Some(1000),
                    scopes: None,
                })
                .await;
            let Ok(page) = page else {
                return out;
            };
            if page.events.is_empty() {
                return out;
            }
            for e in page.events {
                after = after.max(e.seq);
                if wanted.contains(&e.seq) {
                    out.push(crate::rows::input_event(e));
                }
            }
        }
    }

    pub(super) fn run_request(
        &self,
        work: &WorkRow,
        binding: &wire::Binding,
        execution_id: &str,
        epoch: i64,
        attempt: i64,
        inputs: Vec<wire::Event>,
    ) -> RunRequest {
        RunRequest {
            executor: binding.executor.clone(),
            execution_id: execution_id.to_owned(),
            epoch: epoch_u64(epoch),
            attempt: u32::try_from(attempt).unwrap_or(0),
            work: crate::rows::work(work),
            binding: binding.clone(),
            config: binding.config.clone(),
            inputs,
            toolbelt: self
                .toolbelt
                .get()
                .map(|tb| tb.for_run(&work.id, execution_id, epoch))
                .unwrap_or_default(),
            playbook_dir: self
                .router
                .knowledge()
                .read()
                .map(|k| k.playbook_dir.clone())
                .unwrap_or_default(),
            ..RunRequest::default()
        }
    }

    pub(super) async fn attempt(
        &self,
        work: WorkRow,
        binding: wire::Binding,
        extension: String,
        start: AttemptStartResponse,
    ) {
        let work_id = work.id.clone();
        let execution_id = start.execution_id.clone();
        let epoch = start.epoch;
        let inputs = self.inputs(&work_id, &start.inputs).await;
        let run = self.run_request(&work, &binding, &execution_id, epoch, start.attempt, inputs);
        tracing::info!(OC_WORK_ID = %work_id, OC_EXECUTION_ID = %execution_id, epoch, executor = %binding.executor, "attempt started");
        let resumed = start.resumed;
        let mut a = Attempt {
            work_id,
            execution_id,
            epoch,
            executor: binding.executor.clone(),
            extension,
            run,
        };
        let failures = work.failures;
        // A woken Wait resumes the same attempt as a new segment, with the inputs that
        // woke it (none for a timeout).
        let started = if resumed {
            let params = ExecutorResumeParams {
                executor: a.executor.clone(),
                execution_id: a.execution_id.clone(),
                epoch: epoch_u64(a.epoch),
                inputs: a.run.inputs.clone(),
                toolbelt: self
                    .toolbelt
                    .get()
                    .map(|tb| tb.for_run(&a.work_id, &a.execution_id, a.epoch)),
            };
            self.ext_call(&a.extension, params, Duration::from_secs(60))
                .await
        } else {
            let authority = layers::authority(&work, &binding, &a.execution_id, a.epoch);
            match self.run_environment(&authority, &binding).await {
                Ok((env, hosts)) => {
                    a.run.env = env;
                    a.run.hosts = hosts;
                }
                Err(e) => {
                    // Nothing was launched: the run fails before it starts.
                    tracing::warn!(OC_EXECUTION_ID = %a.execution_id, error = %e, "the run's environment could not be made");
                    let mut failed = ExecutorWaitResult::new(Outcome::Failed);
                    failed.error = e;
                    self.settle(&a, failed, failures).await;
                    return;
                }
            }
            let params = ExecutorRunParams { run: a.run.clone() };
            self.ext_call(&a.extension, params, Duration::from_secs(60))
                .await
        };
        let method = if resumed {
            ExecutorResumeParams::METHOD
        } else {
            ExecutorRunParams::METHOD
        };
        match started {
            Ok(_) => {
                self.router.annotate(&a.work_id);
                self.observe(a, failures, None).await
            }
            Err(e) if refused_before_launch(&e) => {
                // The executor refused the launch itself: nothing runs.
                let mut failed = ExecutorWaitResult::new(Outcome::Failed);
                failed.error = format!("{method}: {e}");
                self.settle(&a, failed, failures).await;
            }
            Err(e) => {
                // The answer was lost (extrunner or the extension went away, or the
                // call timed out): the run may have started. Adopt it, or stop
                // whatever there is with evidence, before anything settles.
                tracing::warn!(OC_EXECUTION_ID = %a.execution_id, error = %e, "{method} did not answer; recovering the run");
                self.observe(
                    a,
                    failures,
                    Some(Recovery::Stored(format!("{method}: {e}"))),
                )
                .await;
            }
        }
    }
}
