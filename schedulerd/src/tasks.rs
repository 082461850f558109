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

use daemon::bus::Bus;
use protocol::time::now_ms;
use serde_json::json;

use crate::host::Host;
use crate::router::Router;

/// How long one pass may take.
pub const TASK_TIMEOUT: Duration = Duration::from_secs(300);
/// How long to wait before asking the store again after a claim failed.
const CLAIM_RETRY_MS: i64 = 5_000;

/// Run every known task on its interval, forever: the passes this host claims.
pub async fn run(bus: Bus, router: Router, host: Host) {
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
                let claim = bus
                    .call(
                        "store.task_claim",
                        &json!({"extension": extension, "task": task,
                                "every_ms": every.saturating_mul(1000), "host": host.id}),
                    )
                    .await;
                let claim = match claim {
                    Ok(c) => c,
                    Err(e) => {
                        tracing::warn!(OC_EXTENSION = %extension, %task, error = %e, "cannot claim the task's pass now");
                        ask_at.insert(key, now + CLAIM_RETRY_MS);
                        continue;
                    }
                };
                ask_at.insert(
                    key,
                    claim["due_ms"].as_i64().unwrap_or(now + CLAIM_RETRY_MS),
                );
                if claim["claimed"] != true {
                    continue;
                }
                let bus = bus.clone();
                tokio::spawn(async move {
                    let answer = bus
                        .call(
                            "ext.call",
                            &json!({"name": extension, "method": "task.run",
                                    "params": {"task": task, "now": protocol::time::format_rfc3339_ms(protocol::time::now_ms())},
                                    "timeout_ms": TASK_TIMEOUT.as_millis() as u64}),
                        )
                        .await;
                    match answer {
                        Ok(a) => {
                            tracing::info!(OC_EXTENSION = %extension, %task, detail = %a["detail"], "task pass done")
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
