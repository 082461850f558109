//! Lease takeover: every attempt of this host whose lease ran out is taken over at a
//! higher epoch and adopted; one of a host that is gone is settled failed; a run
//! whose lease was fenced is asked to stop; a returning host stops the runs taken
//! over elsewhere while it was away.

use std::time::Duration;

use busapi::store::{
    ExecutionRow, ExecutionsRequest, ExpiredLeasesRequest, LeaseTakeoverRequest,
    LeaseTakeoverResponse, WorkGetRequest,
};
use busapi::Call;
use protocol::time::now_ms;
use protocol::wire::{self, ExecutorStopParams, ExecutorWaitResult, Outcome, RunRequest};

use super::adopt::Recovery;
use super::{epoch_u64, Attempt, Starter, KNOWLEDGE_WAIT, LEASE_TTL, MAX_TAKEN_PAGES};
use crate::ports::ms;

impl Starter {
    /// `store.lease_takeover` of the expired attempt `e` by this host.
    async fn take_over(
        &self,
        e: &ExecutionRow,
    ) -> Result<LeaseTakeoverResponse, protocol::CallError> {
        self.store
            .call(&LeaseTakeoverRequest {
                execution_id: e.id.clone(),
                epoch: e.epoch,
                lease_owner: self.owner.clone(),
                lease_ttl_ms: ms(LEASE_TTL),
                host: self.host.id.clone(),
            })
            .await
    }

    /// Take over and adopt every attempt of this host whose lease ran out, and settle
    /// those of hosts that are gone.
    pub async fn recover_expired(&self) -> Result<usize, String> {
        if !self.host.beaten() {
            return Ok(0);
        }
        let expired = self
            .store
            .call(&ExpiredLeasesRequest {
                now_ms: now_ms(),
                limit: 100,
                host: self.host.id.clone(),
            })
            .await
            .map_err(|e| format!("{}: {e}", ExpiredLeasesRequest::METHOD))?;
        let mut n = 0;
        for e in &expired.executions {
            let execution_id = e.id.clone();
            let work_id = e.work_id.clone();
            if self.is_running(&work_id) {
                continue;
            }
            if !e.host.is_empty() && e.host != self.host.id {
                if self.settle_foreign(e).await {
                    n += 1;
                }
                continue;
            }
            let Ok(taken) = self.take_over(e).await else {
                continue;
            };
            let Ok(work) = self
                .store
                .call(&WorkGetRequest {
                    id: work_id.clone(),
                })
                .await
            else {
                continue;
            };
            let work = work.work;
            let (binding, extension, pool, _) = match self.resolve(&work) {
                Ok(r) => r,
                Err(why) => {
                    self.block(&work_id, why);
                    continue;
                }
            };
            if let Ok(mut r) = self.running.lock() {
                r.insert(
                    work_id.clone(),
                    super::Running {
                        pool,
                        scope: work.scope_id.clone(),
                    },
                );
            }
            n += 1;
            let epoch = taken.epoch;
            let inputs = self.inputs(&work_id, &taken.inputs).await;
            let run = self.run_request(&work, &binding, &execution_id, epoch, e.attempt, inputs);
            let a = Attempt {
                work_id: work_id.clone(),
                execution_id,
                epoch,
                executor: binding.executor.clone(),
                extension,
                run,
            };
            tracing::info!(OC_WORK_ID = %work_id, OC_EXECUTION_ID = %a.execution_id, epoch, "taking over an attempt whose lease ran out");
            let this = self.clone();
            let failures = work.failures;
            let recovery = taken.recovery;
            tokio::spawn(async move {
                let work_id = a.work_id.clone();
                this.observe(a, failures, Some(Recovery::Given(String::new(), recovery)))
                    .await;
                if let Ok(mut r) = this.running.lock() {
                    r.remove(&work_id);
                }
            });
        }
        Ok(n)
    }

    /// An expired attempt launched by a host that is gone: fence it by epoch and
    /// settle it failed under the retry policy, without asking any executor (this
    /// host's knows nothing of the run, and the gone host's cannot answer). The run
    /// may have executed. Answers whether it was settled.
    async fn settle_foreign(&self, e: &ExecutionRow) -> bool {
        let taken = match self.take_over(e).await {
            Ok(t) => t,
            Err(err) => {
                tracing::debug!(OC_EXECUTION_ID = %e.id, error = %err, "not taken over");
                return false;
            }
        };
        let failures = match self
            .store
            .call(&WorkGetRequest {
                id: e.work_id.clone(),
            })
            .await
        {
            Ok(w) => w.work.failures,
            Err(_) => 0,
        };
        let gone = taken.host_gone_ms.filter(|ms| *ms > 0);
        let host = taken.host.as_str();
        let mut failed = ExecutorWaitResult::new(Outcome::Failed);
        failed.error = format!(
            "host {host} is gone ({}): its attempt was fenced and settled by host {} without \
             stop evidence; the run may have executed",
            match gone {
                Some(ms) => format!("no beat since {}", protocol::time::format_rfc3339_ms(ms)),
                None => "it never beat".to_owned(),
            },
            self.host.id
        );
        tracing::warn!(OC_WORK_ID = %e.work_id, OC_EXECUTION_ID = %e.id, gone_host = %host, "settling an attempt of a host that is gone; the run may have executed");
        let a = Attempt {
            work_id: e.work_id.clone(),
            execution_id: e.id.clone(),
            epoch: taken.epoch,
            executor: e.executor.clone(),
            extension: String::new(),
            run: RunRequest::default(),
        };
        self.settle(&a, failed, failures).await;
        true
    }

    /// After this host lost an attempt's lease: when another host holds it now (it
    /// found this host gone and settled the attempt), or the Work was cancelled
    /// (`store.work_cancel` fenced the lease, from a `sched.cancel` of another host or
    /// one whose stop did not succeed), the run here is nobody's, and this host's
    /// executor is asked once to stop it. Best effort: its writes are fenced either
    /// way.
    pub(super) async fn stop_if_fenced(&self, a: &Attempt) {
        let Some(executions) = self.executions_of(&a.work_id).await else {
            return;
        };
        let Some(row) = executions.iter().find(|e| e.id == a.execution_id) else {
            return;
        };
        let owner = row.lease_owner.as_str();
        let mine = owner.ends_with(&format!("@{}", self.host.id));
        if row.state == "cancelled" {
            tracing::warn!(OC_WORK_ID = %a.work_id, OC_EXECUTION_ID = %a.execution_id, "the Work was cancelled; stopping the run here");
        } else if mine || owner.is_empty() {
            return;
        } else {
            tracing::warn!(OC_EXECUTION_ID = %a.execution_id, holder = %owner, "another host took this attempt over; stopping the run here");
        }
        let r = self
            .ext_call(&a.extension, a.stop_params(), Duration::from_secs(120))
            .await;
        match r.map(|answer| serde_json::from_str::<wire::ExecutorStopResult>(answer.get())) {
            Ok(Ok(stop)) if stop.stopped => {
                tracing::info!(OC_EXECUTION_ID = %a.execution_id, detail = %stop.detail, "the fenced run is stopped")
            }
            Ok(Ok(stop)) => {
                tracing::warn!(OC_EXECUTION_ID = %a.execution_id, detail = %stop.detail, "the fenced run could not be stopped here")
            }
            Ok(Err(e)) => {
                tracing::warn!(OC_EXECUTION_ID = %a.execution_id, error = %e, "the fenced run's executor.stop answered something that does not decode")
            }
            Err(e) => {
                tracing::warn!(OC_EXECUTION_ID = %a.execution_id, error = %e, "the fenced run could not be stopped here")
            }
        }
    }

    /// This host is back after being gone since `since_ms`: the attempts it launched
    /// that another host settled meanwhile may still run here (its executions outlive
    /// schedulerd). Each is asked once of this host's executor to stop (best effort:
    /// their writes are fenced either way).
    pub async fn stop_runs_taken_since(&self, since_ms: i64) {
        let mut after = String::new();
        let mut stopped = 0usize;
        for _page in 0..MAX_TAKEN_PAGES {
            let request = ExecutionsRequest {
                host: Some(self.host.id.clone()),
                state: Some("failed".into()),
                limit: 1000,
                settled_since: Some(protocol::time::format_rfc3339_ms(since_ms)),
                after: after.clone(),
                work_id: None,
            };
            let page = match self.store.call(&request).await {
                Ok(p) => p,
                Err(e) => {
                    tracing::warn!(error = %e, "cannot look for runs taken over while this host was gone");
                    return;
                }
            };
            for ex in &page.executions {
                let owner = ex.lease_owner.as_str();
                if owner.is_empty() || owner.ends_with(&format!("@{}", self.host.id)) {
                    continue;
                }
                let Some(extension) = self.extension_of(&ex.executor).await else {
                    tracing::warn!(OC_EXECUTION_ID = %ex.id, executor = %ex.executor, "no extension declares the executor; its run here is not stopped");
                    continue;
                };
                tracing::warn!(OC_EXECUTION_ID = %ex.id, holder = %owner, "a run of this host was taken over while it was gone; stopping it here");
                let params = ExecutorStopParams {
                    executor: ex.executor.clone(),
                    execution_id: ex.id.clone(),
                    epoch: epoch_u64(ex.epoch),
                };
                let r = self
                    .ext_call(&extension, params, Duration::from_secs(120))
                    .await;
                if let Err(e) = r {
                    tracing::warn!(OC_EXECUTION_ID = %ex.id, error = %e, "the run taken over elsewhere could not be stopped here");
                }
                stopped += 1;
            }
            if page.next.is_empty() {
                break;
            }
            after = page.next;
        }
        if stopped > 0 {
            tracing::info!(
                runs = stopped,
                "asked this host's executors to stop runs taken over elsewhere"
            );
        }
    }

    /// The extension declaring `executor`, once it is running and registered (a
    /// schedulerd just started reads the registrations first): `None` past
    /// [`KNOWLEDGE_WAIT`].
    async fn extension_of(&self, executor: &str) -> Option<String> {
        let deadline = tokio::time::Instant::now() + KNOWLEDGE_WAIT;
        loop {
            let found = self
                .router
                .knowledge()
                .read()
                .ok()
                .and_then(|k| k.executors.get(executor).map(|(e, _)| e.clone()));
            match found {
                Some(e) => return Some(e),
                None if tokio::time::Instant::now() >= deadline => return None,
                None => tokio::time::sleep(Duration::from_millis(200)).await,
            }
        }
    }
}
