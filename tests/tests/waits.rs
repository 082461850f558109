#![allow(clippy::unwrap_used)]
//! Waits with real daemons: an attempt parks its Work on a Wait (the `pause` test
//! executor), and a matching event, or the Wait's timeout, wakes it: the same attempt
//! resumes and finishes.

mod common;
use common::*;

use oc_systest::{Daemon, Package, Suite, HANG};
use serde_json::{json, Value};
use std::path::Path;
use std::time::{Duration, Instant};

fn suite_with_pause(name: &str, pause: Value) -> Suite {
    let mut packages = Suite::first_party();
    packages.push(Package {
        name: "pause".into(),
        manifest: oc_systest::pause::MANIFEST.into(),
        command: vec!["ext-pause".into()],
    });
    let suite = Suite::new(Path::new(BIN), name, &packages).unwrap();
    suite.set_args(Daemon::Ingressd, &["--header-timeout-ms", "5000"]);
    suite.start_all().unwrap();
    let mut c = config(&suite);
    c["scopes"][0]["routes"] =
        json!([{"handler": "webhook", "binding": "pause", "config": {"entry": "ci"}}]);
    c["scopes"][0]["bindings"] = json!([{"name": "pause", "executor": "pause", "config": pause}]);
    suite.apply_config(&c, HOOK).unwrap();
    suite
}

fn work_state(suite: &Suite, state: &str) -> Value {
    let deadline = Instant::now() + HANG;
    loop {
        let works = suite
            .call("store.works", json!({"scope_id": "demo"}))
            .unwrap();
        if let Some(w) = works["works"]
            .as_array()
            .and_then(|a| a.iter().find(|w| w["state"] == state))
        {
            return w.clone();
        }
        assert!(
            Instant::now() < deadline,
            "no Work {state} within {HANG:?}: {works}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn the_execution(suite: &Suite, work_id: &str) -> Value {
    let ex = suite
        .call("store.executions", json!({ "work_id": work_id }))
        .unwrap();
    let all = ex["executions"].as_array().unwrap();
    assert_eq!(all.len(), 1, "one attempt, resumed: {ex}");
    all[0].clone()
}

#[test]
fn a_matching_event_wakes_the_waiting_work() {
    let suite = suite_with_pause("wait-event", json!({"key": "webhook:demo/ci:7"}));
    assert_eq!(
        deliver(&suite, "d-1", br#"{"number": 7}"#).unwrap().status,
        200
    );
    let waiting = work_state(&suite, "waiting");
    let waits = suite
        .call("store.waits", json!({"work_id": waiting["id"]}))
        .unwrap();
    assert_eq!(
        waits["waits"][0]["description"], "waiting for an event on webhook:demo/ci:7",
        "{waits}"
    );
    // The event it waits for wakes it: the same attempt resumes and finishes.
    assert_eq!(
        deliver(&suite, "d-2", br#"{"number": 7}"#).unwrap().status,
        200
    );
    let done = work_state(&suite, "completed");
    assert_eq!(done["id"], waiting["id"]);
    let ex = the_execution(&suite, done["id"].as_str().unwrap());
    assert_eq!(ex["result"]["summary"], "woken by webhook.delivery", "{ex}");
}

#[test]
fn the_wait_timeout_wakes_it_too() {
    let suite = suite_with_pause("wait-timeout", json!({"key": "never", "timeout_s": 2}));
    assert_eq!(
        deliver(&suite, "d-1", br#"{"number": 7}"#).unwrap().status,
        200
    );
    let waiting = work_state(&suite, "waiting");
    let done = work_state(&suite, "completed");
    assert_eq!(done["id"], waiting["id"]);
    let ex = the_execution(&suite, done["id"].as_str().unwrap());
    assert_eq!(ex["result"]["summary"], "woken by the timeout", "{ex}");
}
