//! `work.annotate`: the packages that show Work on their own surface (manifest
//! `provides.annotations`; the GitHub package's status comment) are told how a Work
//! stands whenever schedulerd moves it: routed to it (made, woken, closed by its
//! route), an attempt started, an attempt settled (done, waiting, failed, handed
//! off), cancelled.
//!
//! Each annotation reads the Work afresh (`store.work_get`, its latest execution and,
//! while it waits, its active Wait), so a late one never shows an old state as new;
//! `version` (the Work's, bumped by every write) lets a package drop one that arrives
//! after a newer. Best effort and not awaited: at most [`MAX_IN_FLIGHT`] at once (more
//! wait their turn), each call bounded by [`ANNOTATE_TIMEOUT`]; a failure is logged.
//! Only the extensions configured for the Work's scope are told.

use std::time::Duration;

use busapi::ext::ExtCall;
use busapi::store::{ExecutionRow, ExecutionsRequest, WaitsRequest, WorkGetRequest};
use busapi::Call;
use protocol::wire::{AnnotatedAttempt, WorkAnnotateParams};

use crate::ports::ms;
use crate::router::Router;

/// How many `work.annotate` calls may be in flight at once.
pub const MAX_IN_FLIGHT: usize = crate::router::ANNOTATIONS_IN_FLIGHT;
/// How long one `work.annotate` call may take.
pub const ANNOTATE_TIMEOUT: Duration = Duration::from_secs(30);

/// The latest attempt among `executions` (a `store.executions` page).
pub fn latest_attempt(executions: &[ExecutionRow]) -> Option<AnnotatedAttempt> {
    let latest = executions.iter().max_by_key(|e| e.attempt)?;
    let result = &latest.result;
    let text = |k: &str| result[k].as_str().unwrap_or_default().to_owned();
    Some(AnnotatedAttempt {
        execution_id: latest.id.clone(),
        attempt: latest.attempt,
        state: latest.state.clone(),
        summary: text("summary"),
        error: text("error"),
    })
}

impl Router {
    /// Tell the annotating packages of the Work's scope how `work_id` stands now
    /// (module docs). Returns at once.
    pub fn annotate(&self, work_id: &str) {
        let router = self.clone();
        let work_id = work_id.to_owned();
        tokio::spawn(async move {
            let Ok(_permit) = router.annotations().clone().acquire_owned().await else {
                return;
            };
            if let Err(e) = router.annotate_now(&work_id).await {
                tracing::warn!(OC_WORK_ID = %work_id, error = %e, "work.annotate was not sent");
            }
        });
    }

    async fn annotate_now(&self, work_id: &str) -> Result<(), String> {
        let store = self.store();
        let row = store
            .call(&WorkGetRequest {
                id: work_id.to_owned(),
            })
            .await
            .map_err(|e| format!("{}: {e}", WorkGetRequest::METHOD))?
            .work;
        let holders = {
            let k = self.knowledge();
            let k = k.read().map_err(|_| "the knowledge is poisoned")?;
            k.with_surface(&row.scope_id, |s| s.annotations)
        };
        if holders.is_empty() {
            return Ok(());
        }
        let executions = store
            .call(&ExecutionsRequest {
                work_id: Some(work_id.to_owned()),
                ..ExecutionsRequest::default()
            })
            .await
            .map_err(|e| format!("{}: {e}", ExecutionsRequest::METHOD))?;
        let mut params = WorkAnnotateParams {
            work: crate::rows::work(&row),
            version: row.version,
            attempt: latest_attempt(&executions.executions),
            ..WorkAnnotateParams::default()
        };
        if row.state == "waiting" {
            let waits = store
                .call(&WaitsRequest {
                    work_id: Some(work_id.to_owned()),
                    state: Some("active".into()),
                    limit: 1,
                    ..WaitsRequest::default()
                })
                .await
                .map_err(|e| format!("{}: {e}", WaitsRequest::METHOD))?;
            if let Some(w) = waits.waits.first() {
                params.waiting_for = w.description.clone();
                params.progress = w.progress.clone();
            }
        }
        for name in holders {
            let call = ExtCall::new(name.clone(), params.clone()).timeout_ms(ms(ANNOTATE_TIMEOUT));
            if let Err(e) = self.extensions().answer(&call).await {
                tracing::warn!(OC_WORK_ID = %work_id, extension = %name, error = %e, "work.annotate failed");
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn execution(id: &str, attempt: i64, state: &str, result: serde_json::Value) -> ExecutionRow {
        serde_json::from_value(json!({"id": id, "work_id": "w", "attempt": attempt,
            "executor": "shell", "binding": "b", "state": state, "lease_owner": "",
            "epoch": 1, "result": result, "started_at": "now"}))
        .unwrap()
    }

    #[test]
    fn the_latest_attempt_is_the_highest_numbered() {
        let ex = vec![
            execution("x-1", 1, "failed", json!({"error": "boom"})),
            execution("x-2", 2, "completed", json!({"summary": "done"})),
        ];
        let a = latest_attempt(&ex).unwrap();
        assert_eq!(a.execution_id, "x-2");
        assert_eq!(a.summary, "done");
        assert!(latest_attempt(&[]).is_none());
    }
}
