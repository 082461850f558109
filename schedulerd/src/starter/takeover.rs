//! Lease takeover: every attempt of this host whose lease ran out is taken over at a
//! higher epoch and adopted; one of a host that is gone is settled failed; a run
//! whose lease was fenced is asked to stop; a returning host stops the runs taken
//! over elsewhere while it was away.

use protocol::wire::{self, ExecutorWaitResult, Outcome};
use serde_json::{json, Value};

use super::*;

impl Starter {
    /// Take over and adopt every attempt of this host whose lease ran out, and settle
    /// those of hosts that are gone.
    pub async fn recover_expired(&self) -> Result<usize, String> {
        if !self.host.beaten() {
            return Ok(0);
        }
        let expired = self.page_now("store.expired_leases").await?;
        let mut n = 0;
        for e in expired["executions"].as_array().into_iter().flatten() {
            let execution_id = e["id"].as_str().unwrap_or_default().to_owned();
            let work_id = e["work_id"].as_str().unwrap_or_default().to_owned();
            if self.is_running(&work_id) {
                continue;
            }
            let launched_by = e["host"].as_str().unwrap_or_default();
            if !launched_by.is_empty() && launched_by != self.host.id {
                if self.settle_foreign(e).await {
                    n += 1;
                }
                continue;
            }
            let taken = self
                .bus
                .call(
                    "store.lease_takeover",
                    &json!({"execution_id": execution_id, "epoch": e["epoch"],
                            "lease_owner": self.owner, "lease_ttl_ms": ms(LEASE_TTL),
                            "host": self.host.id}),
                )
                .await;
            let Ok(taken) = taken else {
                continue;
            };
            let Ok(work) = self
                .bus
                .call("store.work_get", &json!({ "id": work_id }))
                .await
            else {
                continue;
            };
            let work = work["work"].clone();
            let (binding, extension, pool, _) = match self.resolve(&work) {
                Ok(r) => r,
                Err(why) => {
                    self.block(&work_id, why);
                    continue;
                }
            };
            if let Ok(mut r) = self.running.lock() {
                r.insert(work_id.clone(), pool);
            }
            n += 1;
            let epoch = taken["epoch"].as_i64().unwrap_or(0);
            let seqs: Vec<i64> =
                serde_json::from_value(taken["inputs"].clone()).unwrap_or_default();
            let inputs = self.inputs(&work_id, &seqs).await;
            let run = self.run_request(
                &work,
                &binding,
                &execution_id,
                epoch,
                e["attempt"].as_i64().unwrap_or(1),
                inputs,
            );
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
            let failures = work["failures"].as_i64().unwrap_or(0);
            let recovery = taken["recovery"].clone();
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
    async fn settle_foreign(&self, e: &Value) -> bool {
        let execution_id = e["id"].as_str().unwrap_or_default().to_owned();
        let work_id = e["work_id"].as_str().unwrap_or_default().to_owned();
        let taken = match self
            .bus
            .call(
                "store.lease_takeover",
                &json!({"execution_id": execution_id, "epoch": e["epoch"],
                        "lease_owner": self.owner, "lease_ttl_ms": ms(LEASE_TTL),
                        "host": self.host.id}),
            )
            .await
        {
            Ok(t) => t,
            Err(err) => {
                tracing::debug!(OC_EXECUTION_ID = %execution_id, error = %err, "not taken over");
                return false;
            }
        };
        let failures = match self
            .bus
            .call("store.work_get", &json!({ "id": work_id }))
            .await
        {
            Ok(w) => w["work"]["failures"].as_i64().unwrap_or(0),
            Err(_) => 0,
        };
        let gone = taken["host_gone_ms"].as_i64().filter(|ms| *ms > 0);
        let host = taken["host"].as_str().unwrap_or_default();
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
        tracing::warn!(OC_WORK_ID = %work_id, OC_EXECUTION_ID = %execution_id, gone_host = %host, "settling an attempt of a host that is gone; the run may have executed");
        let a = Attempt {
            work_id,
            execution_id,
            epoch: taken["epoch"].as_i64().unwrap_or(0),
            executor: e["executor"].as_str().unwrap_or_default().to_owned(),
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
        let Ok(ex) = self
            .bus
            .call("store.executions", &json!({"work_id": a.work_id}))
            .await
        else {
            return;
        };
        let Some(row) = ex["executions"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|e| e["id"] == a.execution_id.as_str())
        else {
            return;
        };
        let owner = row["lease_owner"].as_str().unwrap_or_default();
        let mine = owner.ends_with(&format!("@{}", self.host.id));
        if row["state"] == "cancelled" {
            tracing::warn!(OC_WORK_ID = %a.work_id, OC_EXECUTION_ID = %a.execution_id, "the Work was cancelled; stopping the run here");
        } else if mine || owner.is_empty() {
            return;
        } else {
            tracing::warn!(OC_EXECUTION_ID = %a.execution_id, holder = %owner, "another host took this attempt over; stopping the run here");
        }
        let r = self
            .ext_call(
                &a.extension,
                "executor.stop",
                json!({"executor": a.executor, "execution_id": a.execution_id,
                       "epoch": a.epoch}),
                Duration::from_secs(120),
            )
            .await;
        match r.map(serde_json::from_value::<wire::ExecutorStopResult>) {
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
            let page = match self
                .bus
                .call(
                    "store.executions",
                    &json!({"host": self.host.id, "state": "failed", "limit": 1000,
                            "settled_since": protocol::time::format_rfc3339_ms(since_ms),
                            "after": after}),
                )
                .await
            {
                Ok(p) => p,
                Err(e) => {
                    tracing::warn!(error = %e, "cannot look for runs taken over while this host was gone");
                    return;
                }
            };
            for ex in page["executions"].as_array().into_iter().flatten() {
                let owner = ex["lease_owner"].as_str().unwrap_or_default();
                if owner.is_empty() || owner.ends_with(&format!("@{}", self.host.id)) {
                    continue;
                }
                let executor = ex["executor"].as_str().unwrap_or_default().to_owned();
                let Some(extension) = self.extension_of(&executor).await else {
                    tracing::warn!(OC_EXECUTION_ID = %ex["id"], %executor, "no extension declares the executor; its run here is not stopped");
                    continue;
                };
                tracing::warn!(OC_EXECUTION_ID = %ex["id"], holder = %owner, "a run of this host was taken over while it was gone; stopping it here");
                let r = self
                    .ext_call(
                        &extension,
                        "executor.stop",
                        json!({"executor": executor, "execution_id": ex["id"],
                               "epoch": ex["epoch"]}),
                        Duration::from_secs(120),
                    )
                    .await;
                if let Err(e) = r {
                    tracing::warn!(OC_EXECUTION_ID = %ex["id"], error = %e, "the run taken over elsewhere could not be stopped here");
                }
                stopped += 1;
            }
            match page["next"].as_str() {
                Some(n) if !n.is_empty() => after = n.to_owned(),
                _ => break,
            }
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
