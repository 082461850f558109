#![allow(clippy::unwrap_used)]
//! Schedules with real daemons: a job of the schedule extension fires on time and
//! becomes Work; after schedulerd was down across two due times, it fires once, not
//! twice.

use oc_systest::{Daemon, Suite, HANG};
use serde_json::{json, Value};
use std::path::Path;
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_oc-suite");
const EVERY_S: u64 = 10;

fn runs(suite: &Suite) -> Vec<Value> {
    suite
        .events()
        .unwrap()
        .into_iter()
        .filter(|e| e["type"] == "schedule.run")
        .collect()
}

fn wait_runs(suite: &Suite, n: usize) -> Vec<Value> {
    let deadline = Instant::now() + HANG;
    loop {
        let r = runs(suite);
        if r.len() >= n {
            return r;
        }
        assert!(
            Instant::now() < deadline,
            "{} runs, not {n}, within {HANG:?}",
            r.len()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn a_job_runs_on_time_and_once_after_missed_periods() {
    let suite = Suite::new(Path::new(BIN), "schedule", &Suite::first_party()).unwrap();
    suite.start_all().unwrap();
    let config = json!({"scopes": [{
        "id": "ops",
        "entries": [{"type": "schedule", "name": "cron",
                     "config": {"binding": "job", "jobs": [{"name": "tick", "every_s": EVERY_S}]}}],
        "routes": [{"handler": "schedule", "binding": "job"}],
        "bindings": [{"name": "job", "executor": "shell", "config": {"command": ["true"]}}]
    }]});
    suite
        .call("store.config_apply", json!({ "config": config }))
        .unwrap();

    // The first run comes within one period, and becomes Work titled by the job.
    let first = wait_runs(&suite, 1);
    assert_eq!(first[0]["scope_id"], "ops");
    assert_eq!(first[0]["payload"]["job"], "tick", "{}", first[0]);
    let deadline = Instant::now() + HANG;
    let work = loop {
        let works = suite
            .call("store.works", json!({"scope_id": "ops"}))
            .unwrap();
        if let Some(w) = works["works"].as_array().and_then(|a| a.first()).cloned() {
            break w;
        }
        assert!(Instant::now() < deadline, "no Work for the run");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(work["display"]["title"], "tick", "{work}");

    // schedulerd down across two due times: once back, the job fires once.
    suite.kill(Daemon::Schedulerd);
    let down = Instant::now();
    let before = runs(&suite).len();
    std::thread::sleep(Duration::from_secs(2 * EVERY_S + 2));
    assert_eq!(
        runs(&suite).len(),
        before,
        "nothing fires while schedulerd is down"
    );
    suite.start(Daemon::Schedulerd).unwrap();
    let after = wait_runs(&suite, before + 1);
    // Give a second, wrong catch-up every chance to appear; the next regular run is
    // a full period after the catch-up.
    std::thread::sleep(Duration::from_secs(3));
    let after_wait = runs(&suite);
    assert_eq!(
        after_wait.len(),
        before + 1,
        "one catch-up run, not one per missed period (down {:?}): {after:?}",
        down.elapsed()
    );
    // And it is armed again, in the future.
    let timers = suite.call("store.timers", json!({})).unwrap();
    let t = &timers["timers"][0];
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    assert!(t["due_ms"].as_i64().unwrap() > now_ms - 1000, "{timers}");
}
