#![allow(clippy::unwrap_used)]
//! `open-conduit work retry` with real daemons: a completed Work of a shell binding
//! runs again on its input (`sched.retry`, `store.work_retry`), a failed one is
//! reopened, and a Work that is queued already is refused with why.

mod common;
use common::*;

use oc_systest::{Suite, HANG};
use serde_json::{json, Value};
use std::time::Duration;

fn work_in(suite: &Suite, id: &str, states: &[&str], limit: Duration) -> Value {
    wait_within(&format!("Work in {states:?}"), limit, || {
        let w = suite.call("store.work_get", json!({ "id": id })).unwrap()["work"].clone();
        states
            .contains(&w["state"].as_str().unwrap_or_default())
            .then_some(w)
    })
}

fn executions(suite: &Suite, work_id: &str) -> Vec<Value> {
    suite
        .call("store.executions", json!({ "work_id": work_id }))
        .unwrap()["executions"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

#[test]
fn work_retry_runs_a_completed_work_again_and_reopens_a_failed_one() {
    // The script fails once a marker file exists: the second attempt fails.
    let marker = std::env::temp_dir().join(format!("oc-retry-{}", std::process::id()));
    let _ = std::fs::remove_file(&marker);
    let suite = started("work-retry");
    let mut c = config(&suite);
    c["scopes"][0]["routes"] =
        json!([{"handler": "webhook", "binding": "run", "config": {"entry": "ci"}}]);
    let script = format!(
        "if [ -e '{m}' ]; then echo broken >&2; exit 3; fi; touch '{m}'; echo green",
        m = marker.display()
    );
    c["scopes"][0]["bindings"] =
        json!([{"name": "run", "executor": "shell", "config": {"script": script}}]);
    suite.apply_config(&c, HOOK).unwrap();
    wait_within("the shell executor known", HANG, || {
        let s = suite.call("sched.status", json!({})).unwrap();
        (s["handlers"]["webhook"] == "webhook").then_some(())
    });
    assert_eq!(
        deliver(&suite, "d-1", br#"{"number": 7}"#).unwrap().status,
        200
    );
    let id = wait_within("Work", HANG, || {
        let works = suite
            .call("store.works", json!({"scope_id": "demo"}))
            .unwrap();
        works["works"][0]["id"].as_str().map(str::to_string)
    });
    work_in(&suite, &id, &["completed"], HANG);

    // Completed: a new turn on its input.
    let (code, said) = cli(&suite, &["work", "retry", &id]);
    assert_eq!(code, 0, "{said}");
    assert!(said.contains("pending (was completed)"), "{said}");
    // Its attempts fail now, until the failure budget is spent (with backoff).
    let failed = work_in(&suite, &id, &["failed"], HANG * 2);
    assert_eq!(failed["failures"], 5, "{failed}");
    let n = executions(&suite, &id).len();
    assert_eq!(n, 6, "one completed, five failed");

    // Failed: reopened with the input it failed on; it runs and completes.
    std::fs::remove_file(&marker).unwrap();
    let (code, said) = cli(
        &suite,
        &["work", "retry", &id, "--reason", "fixed the runner"],
    );
    assert_eq!(code, 0, "{said}");
    assert!(said.contains("(was failed)"), "{said}");
    work_in(&suite, &id, &["completed"], HANG);
    let ex = executions(&suite, &id);
    assert_eq!(ex.len(), n + 1, "{ex:?}");
    assert_eq!(ex[n]["state"], "completed", "{ex:?}");
    let _ = std::fs::remove_file(&marker);
}
