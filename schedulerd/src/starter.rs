//! The starter: Work with pending input runs, one attempt at a time, through its
//! binding's executor; each attempt's result settles the Work.
//!
//! An attempt starts under a new lease epoch (`store.attempt_start`), within its pool
//! (`settings.concurrency` for agent turns, `settings.job_concurrency` for the `jobs`
//! pool), as `executor.run` on the extension declaring the executor (through
//! extrunner). schedulerd keeps the lease alive while it observes the run
//! (`executor.wait`); the executor persists its recovery metadata fenced by that epoch.
//! The result settles the attempt (`store.attempt_settle`): completed; failed, retried
//! with exponential backoff (or at the executor's `retry_after` hint) until the failure
//! budget is spent; waiting on a Wait; or handoff.
//!
//! Recovery: a running attempt whose lease ran out (schedulerd was down, or lost the
//! lease) is taken over at a higher epoch (`store.lease_takeover`), which fences every
//! write of the old holder, and adopted with `executor.recover` and the metadata last
//! persisted; nothing is launched again. An executor that cannot adopt it
//! (`not_adoptable`) is asked to stop it, and the attempt is settled failed under the
//! retry policy only once the stop answers with physical-stop evidence. If the
//! executor's extension or extrunner goes away while schedulerd waits (or while
//! `executor.run` is in flight), the same recovery is tried with backoff, the lease
//! renewed all along, until the executor answers: an executor that does not answer is
//! never evidence that a run ended.
//!
//! Several hosts: every attempt names the host that launched it, and only that host
//! adopts it (its executor alone knows the run). An expired attempt of another host
//! is taken over only once that host is gone too (its beat older than its host
//! lease, checked by `store.lease_takeover` in the same write); it is then fenced by
//! epoch and settled failed under the retry policy at once, without asking the local
//! executor anything: nobody could gather stop evidence, so the run may have executed
//! (at least once). A woken Wait is resumed by the host that parked it while that host
//! is alive; injections and controls reach only attempts of this host.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use daemon::bus::Bus;
use protocol::time::now_ms;
use protocol::wire::{self, ExecutorWaitResult, Outcome, RunRequest};
use protocol::CallError;
use serde_json::{json, Value};

use crate::host::Host;
use crate::router::{RoutedEvent, Router};
use crate::toolbelt::Toolbelt;

mod adopt;
mod cancel;
mod controls;
mod layers;
mod retry;
mod takeover;
use adopt::{refused_before_launch, Recovery};
pub use cancel::{CANCEL_STOP_WAIT, MAX_CANCEL_REASON_BYTES};
pub use layers::binding_connections;

/// The most inputs one `sched.inject` injects.
pub const MAX_INJECT_INPUTS: usize = 100;
/// How long a lease lasts without renewal.
pub const LEASE_TTL: Duration = Duration::from_secs(10);
/// How often a held lease is renewed.
pub const LEASE_RENEW: Duration = Duration::from_secs(3);
/// Failures before a Work fails for good.
pub const FAILURE_BUDGET: i64 = 5;
/// The first retry's delay; each later one doubles, up to [`RETRY_MAX`].
pub const RETRY_BASE: Duration = Duration::from_secs(1);
/// The longest retry delay.
pub const RETRY_MAX: Duration = Duration::from_secs(300);
/// Agent turns at once, unless `settings.concurrency` says.
pub const DEFAULT_CONCURRENCY: u32 = 4;
/// Jobs at once, unless `settings.job_concurrency` says.
pub const DEFAULT_JOB_CONCURRENCY: u32 = 8;
/// The most pages of runs (1,000 each) a returning host looks through to stop.
const MAX_TAKEN_PAGES: usize = 100;
/// How long a returning host waits for the extensions' registrations.
const KNOWLEDGE_WAIT: Duration = Duration::from_secs(60);
/// How long one `executor.wait` call may take before it is asked again.
const WAIT_CALL: Duration = Duration::from_secs(3600);
/// The delay before retry number `failures` (1 for the first failure).
pub fn backoff(failures: i64) -> Duration {
    let shift = u32::try_from(failures.saturating_sub(1).clamp(0, 20)).unwrap_or(20);
    RETRY_BASE.saturating_mul(1u32 << shift).min(RETRY_MAX)
}

/// The starter and its bookkeeping.
#[derive(Debug, Clone)]
pub struct Starter {
    bus: Bus,
    router: Router,
    host: Host,
    owner: String,
    running: Arc<Mutex<HashMap<String, String>>>,
    blocked: Arc<Mutex<HashMap<String, String>>>,
    toolbelt: Arc<std::sync::OnceLock<Toolbelt>>,
    /// Work being cancelled (`sched.cancel`): its attempt's own result, once the stop
    /// ended the run, settles nothing; the cancel does.
    cancelling: Arc<Mutex<HashSet<String>>>,
}

/// An attempt being observed.
#[derive(Debug, Clone)]
struct Attempt {
    work_id: String,
    execution_id: String,
    epoch: i64,
    executor: String,
    extension: String,
    run: RunRequest,
}

fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

impl Starter {
    /// A starter of `host`, holding leases as its [`Host::owner`].
    pub fn new(bus: Bus, router: Router, host: Host) -> Starter {
        Starter {
            bus,
            router,
            owner: host.owner(),
            host,
            running: Arc::default(),
            blocked: Arc::default(),
            toolbelt: Arc::default(),
            cancelling: Arc::default(),
        }
    }

    /// From now on, each run is given its toolbelt token, and what a turn declared
    /// through the toolbelt applies when its attempt settles.
    pub fn set_toolbelt(&self, tb: Toolbelt) {
        let _ = self.toolbelt.set(tb);
    }

    /// Work observed now (Work ID → pool), and Work that cannot start (ID → why).
    pub fn snapshot(&self) -> (HashMap<String, String>, HashMap<String, String>) {
        (
            self.running.lock().map(|r| r.clone()).unwrap_or_default(),
            self.blocked.lock().map(|b| b.clone()).unwrap_or_default(),
        )
    }

    /// Whether an attempt of `work_id` is observed now.
    fn is_running(&self, work_id: &str) -> bool {
        self.running
            .lock()
            .map(|r| r.contains_key(work_id))
            .unwrap_or(true)
    }

    fn block(&self, work_id: &str, why: String) {
        if let Ok(mut b) = self.blocked.lock() {
            if b.get(work_id) != Some(&why) {
                tracing::warn!(OC_WORK_ID = %work_id, %why, "Work cannot start");
            }
            b.insert(work_id.to_owned(), why);
        }
    }

    /// The binding of `work` (its executor and config), the executor's extension and
    /// pool, and the pool's size.
    fn resolve(&self, work: &Value) -> Result<(wire::Binding, String, String, u32), String> {
        let k = self.router.knowledge();
        let k = k
            .read()
            .map_err(|_| "the knowledge is poisoned".to_owned())?;
        let (config, _) = k
            .config
            .as_ref()
            .ok_or_else(|| "no configuration is applied".to_owned())?;
        let scope_id = work["scope_id"].as_str().unwrap_or_default();
        let name = work["binding"].as_str().unwrap_or_default();
        let scope = config
            .scope(scope_id)
            .ok_or_else(|| format!("scope {scope_id:?} is not configured"))?;
        let raw = scope
            .bindings
            .iter()
            .find(|b| b["name"] == name)
            .ok_or_else(|| format!("scope {scope_id:?} has no binding {name:?}"))?;
        let binding: wire::Binding =
            serde_json::from_value(raw.clone()).map_err(|e| format!("binding {name:?}: {e}"))?;
        let (extension, pool) =
            k.executors.get(&binding.executor).cloned().ok_or_else(|| {
                format!("no extension declares the executor {:?}", binding.executor)
            })?;
        let size = if pool == "jobs" {
            config
                .settings
                .job_concurrency
                .unwrap_or(DEFAULT_JOB_CONCURRENCY)
        } else {
            config.settings.concurrency.unwrap_or(DEFAULT_CONCURRENCY)
        };
        Ok((binding, extension, pool, size))
    }

    /// `method` with `{now_ms, limit: 100, host}`.
    async fn page_now(&self, method: &str) -> Result<Value, String> {
        self.bus
            .call(
                method,
                &json!({"now_ms": now_ms(), "limit": 100, "host": self.host.id}),
            )
            .await
            .map_err(|e| format!("{method}: {e}"))
    }

    /// Start what is ready, within the pools. Answers how many started.
    pub async fn pass(&self) -> Result<usize, String> {
        if self.toolbelt.get().is_none() {
            // Every run is given its toolbelt token: nothing starts before the key is read.
            return Ok(0);
        }
        if !self.host.beaten() {
            // No attempt names a host the others would find gone.
            return Ok(0);
        }
        let ready = self.page_now("store.works_ready").await?;
        let mut started = 0;
        for work in ready["works"].as_array().into_iter().flatten() {
            let work_id = work["id"].as_str().unwrap_or_default().to_owned();
            if self.is_running(&work_id) {
                continue;
            }
            let (binding, extension, pool, size) = match self.resolve(work) {
                Ok(r) => r,
                Err(why) => {
                    self.block(&work_id, why);
                    continue;
                }
            };
            let busy = self
                .running
                .lock()
                .map(|r| r.values().filter(|p| **p == pool).count())
                .unwrap_or(usize::MAX);
            if busy >= size as usize {
                continue;
            }
            if let Ok(mut b) = self.blocked.lock() {
                b.remove(&work_id);
            }
            let start = self
                .bus
                .call(
                    "store.attempt_start",
                    &json!({"work_id": work_id, "executor": binding.executor,
                            "binding": binding.name, "lease_owner": self.owner,
                            "lease_ttl_ms": ms(LEASE_TTL), "host": self.host.id,
                            "expect_version": work["version"]}),
                )
                .await;
            let start = match start {
                Ok(s) => s,
                Err(e) => {
                    tracing::debug!(OC_WORK_ID = %work_id, error = %e, "attempt not started");
                    continue;
                }
            };
            if let Ok(mut r) = self.running.lock() {
                r.insert(work_id.clone(), pool);
            }
            started += 1;
            let this = self.clone();
            let work = work.clone();
            tokio::spawn(async move {
                let id = work_id.clone();
                this.attempt(work, binding, extension, start).await;
                if let Ok(mut r) = this.running.lock() {
                    r.remove(&id);
                }
            });
        }
        Ok(started)
    }

    async fn inputs(&self, work_id: &str, seqs: &[i64]) -> Vec<wire::Event> {
        let wanted: HashSet<i64> = seqs.iter().copied().collect();
        let mut out = Vec::new();
        let mut after = 0i64;
        loop {
            let page = match self
                .bus
                .call(
                    "store.work_events",
                    &json!({"work_id": work_id, "after": after, "limit": 1000}),
                )
                .await
            {
                Ok(p) => p,
                Err(_) => return out,
            };
            let events: Vec<RoutedEvent> =
                serde_json::from_value(page["events"].clone()).unwrap_or_default();
            if events.is_empty() {
                return out;
            }
            for e in &events {
                after = after.max(e.seq);
                if wanted.contains(&e.seq) {
                    out.push(e.wire());
                }
            }
        }
    }

    fn run_request(
        &self,
        work: &Value,
        binding: &wire::Binding,
        execution_id: &str,
        epoch: i64,
        attempt: i64,
        inputs: Vec<wire::Event>,
    ) -> RunRequest {
        RunRequest {
            executor: binding.executor.clone(),
            execution_id: execution_id.to_owned(),
            epoch: u64::try_from(epoch).unwrap_or(0),
            attempt: u32::try_from(attempt).unwrap_or(0),
            work: wire::Work::from_store_row(work),
            binding: binding.clone(),
            config: binding.config.clone(),
            inputs,
            toolbelt: self
                .toolbelt
                .get()
                .map(|tb| tb.for_run(work["id"].as_str().unwrap_or_default(), execution_id, epoch))
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

    async fn ext_call(
        &self,
        extension: &str,
        method: &str,
        params: Value,
        timeout: Duration,
    ) -> Result<Value, CallError> {
        self.bus
            .call(
                "ext.call",
                &json!({"name": extension, "method": method, "params": params,
                        "timeout_ms": ms(timeout)}),
            )
            .await
    }

    async fn attempt(&self, work: Value, binding: wire::Binding, extension: String, start: Value) {
        let work_id = work["id"].as_str().unwrap_or_default().to_owned();
        let execution_id = start["execution_id"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        let epoch = start["epoch"].as_i64().unwrap_or(0);
        let seqs: Vec<i64> = serde_json::from_value(start["inputs"].clone()).unwrap_or_default();
        let inputs = self.inputs(&work_id, &seqs).await;
        let run = self.run_request(
            &work,
            &binding,
            &execution_id,
            epoch,
            start["attempt"].as_i64().unwrap_or(1),
            inputs,
        );
        tracing::info!(OC_WORK_ID = %work_id, OC_EXECUTION_ID = %execution_id, epoch, executor = %binding.executor, "attempt started");
        let resumed = start["resumed"] == true;
        let mut a = Attempt {
            work_id,
            execution_id,
            epoch,
            executor: binding.executor.clone(),
            extension,
            run,
        };
        // A woken Wait resumes the same attempt as a new segment, with the inputs that
        // woke it (none for a timeout).
        let started = if resumed {
            self.ext_call(
                &a.extension,
                "executor.resume",
                json!({"executor": a.executor, "execution_id": a.execution_id,
                       "epoch": a.epoch, "inputs": a.run.inputs,
                       "toolbelt": self.toolbelt.get().map(|tb| tb.for_run(&a.work_id, &a.execution_id, a.epoch))}),
                Duration::from_secs(60),
            )
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
                    self.settle(&a, failed, work["failures"].as_i64().unwrap_or(0))
                        .await;
                    return;
                }
            }
            self.ext_call(
                &a.extension,
                "executor.run",
                json!({ "run": a.run }),
                Duration::from_secs(60),
            )
            .await
        };
        let failures = work["failures"].as_i64().unwrap_or(0);
        let method = if resumed {
            "executor.resume"
        } else {
            "executor.run"
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

    async fn settle(&self, a: &Attempt, r: ExecutorWaitResult, failures: i64) {
        // What the turn declared through the toolbelt: a Wait parks the Work, an outcome
        // replaces the executor's, unless the executor failed.
        let declared = crate::toolbelt::declared(&self.bus, &a.execution_id).await;
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
        let mut req = json!({
            "execution_id": a.execution_id,
            "epoch": a.epoch,
            "outcome": r.outcome,
            "result": {"summary": r.summary, "error": r.error, "artifacts": r.artifacts,
                       "data": r.data, "usage": r.usage},
            // Inputs injected into the turn and taken in: done with it (spec 003).
            "consumed": r.consumed_inputs,
        });
        if r.outcome == Outcome::Failed {
            let n = failures + 1;
            if n >= FAILURE_BUDGET {
                req["final"] = json!(true);
            } else {
                let hinted = r
                    .retry_hint
                    .as_ref()
                    .and_then(|h| protocol::time::parse_rfc3339_ms(&h.reset_at));
                req["retry_at_ms"] =
                    json!(hinted.unwrap_or_else(|| now_ms() + ms(backoff(n)) as i64));
            }
        }
        if r.outcome == Outcome::Waiting {
            if let Some(w) = &r.wait {
                req["wait"] = json!({
                    "owner": wait_owner,
                    "description": w.description,
                    "keys": w.keys,
                    "types": w.types,
                    "plan": w.plan,
                    "due_ms": protocol::time::parse_rfc3339_ms(&w.due_at),
                });
            }
        }
        self.segment_ended(
            wire::Authority {
                scope_id: a.run.work.scope_id.clone(),
                work_id: a.work_id.clone(),
                execution_id: a.execution_id.clone(),
                epoch: u64::try_from(a.epoch).unwrap_or(0),
                binding: a.run.binding.name.clone(),
                connection: a.run.binding.connection.clone(),
            },
            serde_json::to_value(r.outcome)
                .ok()
                .and_then(|v| v.as_str().map(str::to_owned))
                .unwrap_or_default()
                .as_str(),
        );
        match self.bus.call("store.attempt_settle", &req).await {
            Ok(s) => {
                tracing::info!(OC_WORK_ID = %a.work_id, OC_EXECUTION_ID = %a.execution_id, outcome = ?r.outcome, error = %r.error, work_state = %s["work_state"], "attempt settled");
                self.router.annotate(&a.work_id);
                if declared.is_some() {
                    crate::toolbelt::clear(&self.bus, &a.execution_id).await;
                }
            }
            Err(e) => {
                tracing::warn!(OC_WORK_ID = %a.work_id, OC_EXECUTION_ID = %a.execution_id, error = %e, "the attempt could not be settled now; its lease will run out and recovery settles it")
            }
        }
    }

    /// The execution row of the running attempt of `work_id`, on whichever host.
    async fn running_execution(&self, work_id: &str) -> Result<Option<Value>, String> {
        let ex = self
            .bus
            .call(
                "store.executions",
                &json!({"work_id": work_id, "state": "running"}),
            )
            .await
            .map_err(|e| format!("store.executions: {e}"))?;
        Ok(ex["executions"].as_array().and_then(|a| a.first()).cloned())
    }

    /// The extension declaring `executor`.
    fn extension_declaring(&self, executor: &str) -> Result<String, String> {
        let k = self.router.knowledge();
        let k = k
            .read()
            .map_err(|_| "the knowledge is poisoned".to_owned())?;
        k.executors
            .get(executor)
            .map(|(e, _)| e.clone())
            .ok_or_else(|| format!("no extension declares the executor {executor:?}"))
    }
}
