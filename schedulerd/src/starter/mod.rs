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
//!
//! Admission: before the first attempt of a Work starts, the packages serving
//! `work.admit` in its scope are asked, and may hold it (`admission.rs`); a scope's
//! `admission.max_agent_turns` bounds its agent turns running at once on this host.
//!
//! Here: what is ready, within the pools ([`Starter::pass`]). An attempt is launched
//! in `launch.rs`, observed and adopted in `adopt.rs`, settled in `settle.rs`; lease
//! takeover is `takeover.rs`, the operator's controls `controls.rs`, `cancel.rs` and
//! `retry.rs`, the extensions' layers around a run `layers.rs`, admission
//! `admission.rs`.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use busapi::ext::ExtCall;
use busapi::store::{
    AttemptStartRequest, ExecutionRow, ExecutionsRequest, WorkRow, WorksReadyRequest,
};
use busapi::Call;
use protocol::time::now_ms;
use protocol::wire::{self, RunRequest};

use crate::host::Host;
use crate::ports::{ms, Answer, Extensions, Store};
use crate::router::Router;
use crate::toolbelt::Toolbelt;

mod admission;
mod adopt;
mod cancel;
mod controls;
mod launch;
mod layers;
mod retry;
mod settle;
mod takeover;
use admission::Admit;
pub use admission::ADMIT_TIMEOUT;
pub use cancel::{CANCEL_STOP_WAIT, MAX_CANCEL_REASON_BYTES};
pub use layers::LAYER_TIMEOUT;

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
    store: Store,
    extensions: Extensions,
    router: Router,
    host: Host,
    owner: String,
    /// Work observed now: its pool and its scope.
    running: Arc<Mutex<HashMap<String, Running>>>,
    blocked: Arc<Mutex<HashMap<String, String>>>,
    toolbelt: Arc<std::sync::OnceLock<Toolbelt>>,
    /// Work being cancelled (`sched.cancel`): its attempt's own result, once the stop
    /// ended the run, settles nothing; the cancel does.
    cancelling: Arc<Mutex<HashSet<String>>>,
    /// Works the last pass found ready and did not start (its queue).
    waiting: Arc<std::sync::atomic::AtomicU64>,
}

/// Where an observed attempt counts: its executor's pool and its Work's scope.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Running {
    pool: String,
    scope: String,
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

/// An epoch as the extension protocol carries it.
fn epoch_u64(epoch: i64) -> u64 {
    u64::try_from(epoch).unwrap_or(0)
}

impl Starter {
    /// A starter of `host`, calling the router's store and extensions and holding
    /// leases as its [`Host::owner`].
    pub fn new(router: Router, host: Host) -> Starter {
        Starter {
            store: router.store().clone(),
            extensions: router.extensions().clone(),
            router,
            owner: host.owner(),
            host,
            running: Arc::default(),
            blocked: Arc::default(),
            toolbelt: Arc::default(),
            cancelling: Arc::default(),
            waiting: Arc::default(),
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
            self.running
                .lock()
                .map(|r| {
                    r.iter()
                        .map(|(w, run)| (w.clone(), run.pool.clone()))
                        .collect()
                })
                .unwrap_or_default(),
            self.blocked.lock().map(|b| b.clone()).unwrap_or_default(),
        )
    }

    /// The starter's queue: Works its last pass found ready and did not start.
    pub fn queue(&self) -> u64 {
        self.waiting.load(std::sync::atomic::Ordering::Relaxed)
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
    fn resolve(&self, work: &WorkRow) -> Result<(wire::Binding, String, String, u32), String> {
        let k = self.router.knowledge();
        let k = k
            .read()
            .map_err(|_| "the knowledge is poisoned".to_owned())?;
        let binding = k.binding(&work.scope_id, &work.binding)?;
        let (config, _) = k
            .config
            .as_ref()
            .ok_or_else(|| "no configuration is applied".to_owned())?;
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

    /// Start what is ready, within the pools and the scopes' `max_agent_turns`, once
    /// its scope's start gates admit it (`admission.rs`). Answers how many started.
    ///
    /// The pass is sequential, and an attempt joins `running` before the next Work
    /// is looked at, so the counts it checks are exact on this host.
    pub async fn pass(&self) -> Result<usize, String> {
        if self.toolbelt.get().is_none() {
            // Every run is given its toolbelt token: nothing starts before the key is read.
            return Ok(0);
        }
        if !self.host.beaten() {
            // No attempt names a host the others would find gone.
            return Ok(0);
        }
        let ready = self
            .store
            .call(&WorksReadyRequest {
                now_ms: now_ms(),
                limit: 100,
                host: self.host.id.clone(),
            })
            .await
            .map_err(|e| format!("{}: {e}", WorksReadyRequest::METHOD))?;
        let mut started = 0;
        let found = ready.works.len();
        // The start gates that failed in this pass: not asked again until the next.
        let mut gates_down = HashSet::new();
        for work in ready.works {
            let work_id = work.id.clone();
            if self.is_running(&work_id) {
                continue;
            }
            let (binding, extension, pool, size) = match self.resolve(&work) {
                Ok(r) => r,
                Err(why) => {
                    self.block(&work_id, why);
                    continue;
                }
            };
            let busy = self
                .running
                .lock()
                .map(|r| r.values().filter(|r| r.pool == pool).count())
                .unwrap_or(usize::MAX);
            if busy >= size as usize || self.scope_full(&work.scope_id, &pool) {
                continue;
            }
            match self.admit(&work, &binding.name, &mut gates_down).await {
                Admit::Start => {}
                Admit::Held => continue,
                Admit::NotNow(why) => {
                    self.block(&work_id, why);
                    continue;
                }
            }
            if let Ok(mut b) = self.blocked.lock() {
                b.remove(&work_id);
            }
            let start = self
                .store
                .call(&AttemptStartRequest {
                    work_id: work_id.clone(),
                    executor: binding.executor.clone(),
                    binding: binding.name.clone(),
                    lease_owner: self.owner.clone(),
                    lease_ttl_ms: ms(LEASE_TTL),
                    expect_version: Some(work.version),
                    host: self.host.id.clone(),
                })
                .await;
            let start = match start {
                Ok(s) => s,
                Err(e) => {
                    tracing::debug!(OC_WORK_ID = %work_id, error = %e, "attempt not started");
                    continue;
                }
            };
            if let Ok(mut r) = self.running.lock() {
                r.insert(
                    work_id.clone(),
                    Running {
                        pool,
                        scope: work.scope_id.clone(),
                    },
                );
            }
            started += 1;
            let this = self.clone();
            tokio::spawn(async move {
                this.attempt(work, binding, extension, start).await;
                if let Ok(mut r) = this.running.lock() {
                    r.remove(&work_id);
                }
            });
        }
        self.waiting.store(
            found.saturating_sub(started) as u64,
            std::sync::atomic::Ordering::Relaxed,
        );
        Ok(started)
    }

    /// `params` to `extension` through extrunner, waiting at most `timeout`: its
    /// answer as the extension wrote it.
    async fn ext_call<C: Call>(&self, extension: &str, params: C, timeout: Duration) -> Answer {
        let call = ExtCall::new(extension, params).timeout_ms(ms(timeout));
        self.extensions.answer(&call).await
    }

    /// The execution row of the running attempt of `work_id`, on whichever host.
    async fn running_execution(&self, work_id: &str) -> Result<Option<ExecutionRow>, String> {
        let ex = self
            .store
            .call(&ExecutionsRequest {
                work_id: Some(work_id.to_owned()),
                state: Some("running".into()),
                ..ExecutionsRequest::default()
            })
            .await
            .map_err(|e| format!("{}: {e}", ExecutionsRequest::METHOD))?;
        Ok(ex.executions.into_iter().next())
    }

    /// The executions of `work_id`, by attempt; `None` when they cannot be read now.
    async fn executions_of(&self, work_id: &str) -> Option<Vec<ExecutionRow>> {
        self.store
            .call(&ExecutionsRequest {
                work_id: Some(work_id.to_owned()),
                ..ExecutionsRequest::default()
            })
            .await
            .ok()
            .map(|e| e.executions)
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
