//! Admission, before a Work's first attempt starts.
//!
//! Start gates: each package serving `work.admit` (manifest `provides.start_gate`,
//! permission `work.start_gate`) and configured in the Work's scope is asked, one
//! after the other, with the Work, its binding and its first input, before the
//! Work's first attempt (it has no execution, no hold, and the package has not
//! admitted it already). A hold is placed in the store (`store.work_hold`) and the
//! Work waits, out of the starter's page, until the package settles it
//! (`work.settle_hold`, or a person's action); an error, a timeout or an answer that
//! does not read refuses the start for this pass only (it is asked again on the
//! next), and the package is not asked about other Work in the same pass.
//!
//! `scopes[].admission.max_agent_turns`: at most that many attempts of the scope's
//! agent turns (the default pool, not `jobs`) run at once on this host. The
//! starter's pass is sequential and counts the attempts it observes, so the bound is
//! exact per host (each host of a suite keeps its own).

use std::collections::HashSet;
use std::time::Duration;

use busapi::store::{WorkHoldRequest, WorkInputsRequest, WorkRow};
use busapi::Call;
use protocol::wire::{self, WorkAdmitParams, WorkAdmitResult, MAX_HOLD_REASON_BYTES};

use super::Starter;

/// How long one package's `work.admit` may take.
pub const ADMIT_TIMEOUT: Duration = Duration::from_secs(10);

/// What admission says of a ready Work.
pub(super) enum Admit {
    /// Start it.
    Start,
    /// A start gate held it (it is out of the starter's page until settled).
    Held,
    /// Not in this pass, and why (it is asked again on the next).
    NotNow(String),
}

impl Starter {
    /// Whether the scope's agent turns are at its `max_agent_turns` on this host, for
    /// an attempt of `pool` (a `jobs` attempt is never bounded by it).
    pub(super) fn scope_full(&self, scope: &str, pool: &str) -> bool {
        if pool == "jobs" {
            return false;
        }
        let max = {
            let k = self.router.knowledge();
            let Ok(k) = k.read() else {
                return true;
            };
            k.scope(scope).and_then(|s| s.admission.max_agent_turns)
        };
        let Some(max) = max else {
            return false;
        };
        let running = self
            .running
            .lock()
            .map(|r| {
                r.values()
                    .filter(|r| r.pool != "jobs" && r.scope == scope)
                    .count()
            })
            .unwrap_or(usize::MAX);
        running >= max as usize
    }

    /// The start gates of `work`'s scope still to ask about it.
    fn start_gates(&self, work: &WorkRow) -> Vec<String> {
        let k = self.router.knowledge();
        let Ok(k) = k.read() else {
            return Vec::new();
        };
        k.with_surface(&work.scope_id, |s| s.start_gate)
            .into_iter()
            .filter(|g| !work.admitted.contains(g))
            .collect()
    }

    /// Ask the start gates of `work`'s scope about its first attempt (see the module
    /// doc); `down` holds the gates that failed in this pass.
    pub(super) async fn admit(
        &self,
        work: &WorkRow,
        binding: &str,
        down: &mut HashSet<String>,
    ) -> Admit {
        if work.state != "pending" {
            // A woken Wait resumes an attempt that started already.
            return Admit::Start;
        }
        let gates = self.start_gates(work);
        if gates.is_empty() {
            return Admit::Start;
        }
        if let Some(hold) = &work.hold {
            return Admit::NotNow(format!("held by {}: {}", hold.owner, hold.reason));
        }
        if let Some(gate) = gates.iter().find(|g| down.contains(*g)) {
            return Admit::NotNow(format!(
                "its start gate {gate} failed in this pass; it is asked again on the next"
            ));
        }
        match self.executions_of(&work.id).await {
            Some(e) if e.is_empty() => {}
            Some(_) => return Admit::Start,
            None => return Admit::NotNow("its executions cannot be read now".into()),
        }
        let input = self.first_input(&work.id).await;
        let params = WorkAdmitParams {
            work: crate::rows::work(work),
            binding: binding.to_owned(),
            input,
        };
        for gate in gates {
            let answer = self
                .ext_call(&gate, params.clone(), ADMIT_TIMEOUT)
                .await
                .map_err(|e| e.to_string())
                .and_then(|a| {
                    serde_json::from_str::<WorkAdmitResult>(a.get()).map_err(|e| {
                        format!(
                            "its answer does not read as {}'s: {e}",
                            WorkAdmitParams::METHOD
                        )
                    })
                });
            let hold = match answer {
                Ok(WorkAdmitResult { hold: None }) => continue,
                Ok(WorkAdmitResult { hold: Some(h) }) => h,
                Err(e) => {
                    down.insert(gate.clone());
                    tracing::warn!(OC_WORK_ID = %work.id, gate = %gate, error = %e, "a start gate failed; the Work is asked about again on the next pass");
                    return Admit::NotNow(format!(
                        "its start gate {gate} failed ({e}); it is asked again"
                    ));
                }
            };
            let reason = wire::clip_line(&hold.reason, MAX_HOLD_REASON_BYTES);
            let held = self
                .store
                .call(&WorkHoldRequest {
                    work_id: work.id.clone(),
                    owner: gate.clone(),
                    reason: reason.clone(),
                })
                .await;
            return match held {
                Ok(_) => {
                    tracing::info!(OC_WORK_ID = %work.id, gate = %gate, %reason, "a start gate held the Work");
                    Admit::Held
                }
                Err(e) => Admit::NotNow(format!(
                    "{gate} held it, but the hold could not be kept ({}: {e})",
                    WorkHoldRequest::METHOD
                )),
            };
        }
        Admit::Start
    }

    /// The first input of `work_id`, as a run carries it (`None` when there is none,
    /// or it cannot be read now).
    async fn first_input(&self, work_id: &str) -> Option<wire::Event> {
        let inputs = self
            .store
            .call(&WorkInputsRequest {
                work_id: work_id.to_owned(),
                state: None,
                after: 0,
                limit: 1,
            })
            .await
            .ok()?;
        let seq = inputs.inputs.first()?.seq;
        self.inputs(work_id, &[seq]).await.into_iter().next()
    }
}
