//! Extension tasks: each task an extension declares (`provides.tasks`) runs as
//! `task.run` at its interval, the first pass one interval after schedulerd learns of
//! it. A pass that fails (an error, a crash, a timeout) is reported and tried again at
//! the next interval; passes of one task never overlap.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use daemon::bus::Bus;
use serde_json::json;

use crate::router::Router;

/// How long one pass may take.
pub const TASK_TIMEOUT: Duration = Duration::from_secs(300);

/// Run every known task on its interval, forever.
pub async fn run(bus: Bus, router: Router) {
    let mut due: HashMap<(String, String), Instant> = HashMap::new();
    loop {
        let tasks = router
            .knowledge()
            .read()
            .map(|k| k.tasks.clone())
            .unwrap_or_default();
        let now = Instant::now();
        due.retain(|k, _| tasks.iter().any(|(e, t, _)| (e, t) == (&k.0, &k.1)));
        for (extension, task, every) in tasks {
            let key = (extension.clone(), task.clone());
            let next = *due
                .entry(key.clone())
                .or_insert(now + Duration::from_secs(every));
            if next > now {
                continue;
            }
            due.insert(key, now + Duration::from_secs(every));
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
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}
