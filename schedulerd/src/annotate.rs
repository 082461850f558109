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

use protocol::wire::{AnnotatedAttempt, Call, WorkAnnotateParams};
use serde_json::{json, Value};

use crate::router::Router;

/// How many `work.annotate` calls may be in flight at once.
pub const MAX_IN_FLIGHT: usize = crate::router::ANNOTATIONS_IN_FLIGHT;
/// How long one `work.annotate` call may take.
pub const ANNOTATE_TIMEOUT: Duration = Duration::from_secs(30);

/// The latest attempt among `executions` (a `store.executions` answer).
pub fn latest_attempt(executions: &Value) -> Option<AnnotatedAttempt> {
    let latest = executions["executions"]
        .as_array()?
        .iter()
        .max_by_key(|e| e["attempt"].as_i64().unwrap_or(0))?;
    let result = &latest["result"];
    let text = |k: &str| result[k].as_str().unwrap_or_default().to_owned();
    Some(AnnotatedAttempt {
        execution_id: latest["id"].as_str().unwrap_or_default().to_owned(),
        attempt: latest["attempt"].as_i64().unwrap_or(0),
        state: latest["state"].as_str().unwrap_or_default().to_owned(),
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
        let bus = self.bus();
        let row = bus
            .call("store.work_get", &json!({ "id": work_id }))
            .await
            .map_err(|e| format!("store.work_get: {e}"))?["work"]
            .clone();
        let scope = row["scope_id"].as_str().unwrap_or_default().to_owned();
        let holders = {
            let k = self.knowledge();
            let k = k.read().map_err(|_| "the knowledge is poisoned")?;
            k.with_surface(&scope, |s| s.annotations)
        };
        if holders.is_empty() {
            return Ok(());
        }
        let executions = bus
            .call("store.executions", &json!({ "work_id": work_id }))
            .await
            .map_err(|e| format!("store.executions: {e}"))?;
        let mut params = WorkAnnotateParams {
            work: protocol::wire::Work::from_store_row(&row),
            version: row["version"].as_i64().unwrap_or(0),
            attempt: latest_attempt(&executions),
            ..WorkAnnotateParams::default()
        };
        if row["state"] == "waiting" {
            let waits = bus
                .call(
                    "store.waits",
                    &json!({"work_id": work_id, "state": "active", "limit": 1}),
                )
                .await
                .map_err(|e| format!("store.waits: {e}"))?;
            if let Some(w) = waits["waits"].as_array().and_then(|a| a.first()) {
                params.waiting_for = w["description"].as_str().unwrap_or_default().to_owned();
                params.progress = w["progress"].as_str().unwrap_or_default().to_owned();
            }
        }
        let params = serde_json::to_value(&params).map_err(|e| e.to_string())?;
        for name in holders {
            let call = bus
                .call(
                    "ext.call",
                    &json!({"name": name, "method": WorkAnnotateParams::METHOD, "params": params,
                            "timeout_ms": u64::try_from(ANNOTATE_TIMEOUT.as_millis()).unwrap_or(u64::MAX)}),
                )
                .await;
            if let Err(e) = call {
                tracing::warn!(OC_WORK_ID = %work_id, extension = %name, error = %e, "work.annotate failed");
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_latest_attempt_is_the_highest_numbered() {
        let ex = json!({"executions": [
            {"id": "x-1", "attempt": 1, "state": "failed", "result": {"error": "boom"}},
            {"id": "x-2", "attempt": 2, "state": "completed", "result": {"summary": "done"}},
        ]});
        let a = latest_attempt(&ex).unwrap();
        assert_eq!(a.execution_id, "x-2");
        assert_eq!(a.summary, "done");
        assert!(latest_attempt(&json!({"executions": []})).is_none());
    }
}
