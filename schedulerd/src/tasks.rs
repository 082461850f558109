//! Extension tasks: each task an extension declares (`provides.tasks`) runs as
//! `task.run` at its interval, the first pass one interval after the suite learns of
//! it. A pass that fails (an error, a crash, a timeout) is reported and tried again at
//! the next interval.
//!
//! Once per suite, not once per host: a pass is claimed in the store
//! (`store.task_claim`, one write that moves the task's due time one interval ahead),
//! and only the host whose claim won runs it. A host asks again only when the due
//! time the store answered has passed.

use std::collections::HashMap;
use std::time::Duration;

use busapi::ext::ExtCall;
use busapi::store::TaskClaimRequest;
use protocol::time::now_ms;
use protocol::wire::{TaskRunParams, TaskRunResult};

use crate::host::Host;
use crate::ports::{ms, Store};
use crate::router::Router;

/// How long one pass may take.
pub const TASK_TIMEOUT: Duration = Duration::from_secs(300);
/// How long to wait before asking the store again after a claim failed.
const CLAIM_RETRY_MS: i64 = 5_000;

/// Run every known task on its interval, forever: the passes this host claims (in
/// `store`, run through the router's extensions).
pub async fn run(store: Store, router: Router, host: Host) {
    // (extension, task) → when to ask the store next (ms).
    let mut ask_at: HashMap<(String, String), i64> = HashMap::new();
    loop {
        let tasks = router
            .knowledge()
            .read()
            .map(|k| k.tasks.clone())
            .unwrap_or_default();
        ask_at.retain(|k, _| tasks.iter().any(|(e, t, _)| (e, t) == (&k.0, &k.1)));
        if host.beaten() {
            for (extension, task, every) in tasks {
                let key = (extension.clone(), task.clone());
                let now = now_ms();
                if ask_at.get(&key).is_some_and(|at| *at > now) {
                    continue;
                }
                let claim = store
                    .call(&TaskClaimRequest {
                        extension: extension.clone(),
                        task: task.clone(),
                        every_ms: every.saturating_mul(1000),
                        host: host.id.clone(),
                    })
                    .await;
                let claim = match claim {
                    Ok(c) => c,
                    Err(e) => {
                        tracing::warn!(OC_EXTENSION = %extension, %task, error = %e, "cannot claim the task's pass now");
                        ask_at.insert(key, now + CLAIM_RETRY_MS);
                        continue;
                    }
                };
                ask_at.insert(key, claim.due_ms);
                if !claim.claimed {
                    continue;
                }
                let extensions = router.extensions().clone();
                tokio::spawn(async move {
                    let params = TaskRunParams {
                        task: task.clone(),
                        now: protocol::time::format_rfc3339_ms(protocol::time::now_ms()),
                    };
                    let call = ExtCall::new(extension.clone(), params).timeout_ms(ms(TASK_TIMEOUT));
                    match extensions.answer(&call).await {
                        Ok(a) => {
                            // What the pass said of itself, when it said it as the
                            // protocol has it.
                            let detail = serde_json::from_str::<TaskRunResult>(a.get())
                                .map(|r| r.detail)
                                .unwrap_or_default();
                            tracing::info!(OC_EXTENSION = %extension, %task, %detail, "task pass done")
                        }
                        Err(e) => {
                            tracing::warn!(OC_EXTENSION = %extension, %task, error = %e, "task pass failed; tried again at its next interval")
                        }
                    }
                });
            }
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}
