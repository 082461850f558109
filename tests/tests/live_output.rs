#![allow(clippy::unwrap_used)]
//! `ext.live` over the real bus: a running shell Work's output so far, as the web
//! view asks for it. extrunner reads the execution from storaged and forwards
//! `executor.live` to the bundled shell executor, whose run prints a line, waits for
//! the test, prints another and ends when told; once it has ended the answer is
//! `not_live`. Nothing here measures time: the waits only guard against hangs.

mod common;
use common::*;

use busapi::ext::LiveRequest;
use oc_systest::Suite;
use protocol::wire::ExecutorLiveResult;
use serde_json::{json, Value};
use std::path::Path;

fn executions(suite: &Suite, work_id: &str) -> Vec<Value> {
    suite
        .call("store.executions", json!({ "work_id": work_id }))
        .unwrap()["executions"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

/// `ext.live` of `execution_id`: the answer, or the error's code and message.
fn live(suite: &Suite, execution_id: &str, tail: u64) -> Result<ExecutorLiveResult, Value> {
    suite.call_typed(&LiveRequest {
        execution_id: execution_id.to_owned(),
        tail,
    })
}

/// The text of output `name` in `live`, when it is there.
fn text(live: &ExecutorLiveResult, name: &str) -> Option<String> {
    live.outputs
        .iter()
        .find(|o| o.name == name)
        .map(|o| String::from_utf8_lossy(&o.tail).into_owned())
}

fn touch(path: &Path) {
    std::fs::write(path, b"").unwrap();
}

#[test]
fn ext_live_shows_a_running_shell_works_output_and_not_live_once_it_ended() {
    let suite = started("live-output");
    let (go, end) = (suite.dir.join("go"), suite.dir.join("end"));
    let script = format!(
        "echo 'step one'; echo 'to stderr' >&2\n\
         while [ ! -e '{go}' ]; do sleep 0.05; done\n\
         echo 'step two'\n\
         while [ ! -e '{end}' ]; do sleep 0.05; done\n\
         echo 'the end'",
        go = go.display(),
        end = end.display()
    );
    let mut config = common::config(&suite);
    config["scopes"][0]["routes"] =
        json!([{"handler": "webhook", "binding": "run", "config": {"entry": "ci"}}]);
    // The deadline only bounds what a failed test would leave behind.
    config["scopes"][0]["bindings"] = json!([{"name": "run", "executor": "shell",
        "config": {"script": script, "deadline_s": 120, "grace_s": 1}}]);
    suite.apply_config(&config, HOOK).unwrap();
    wait_for("the shell binding's route", || {
        let s = suite.call("sched.status", json!({})).unwrap();
        (s["handlers"]["webhook"] == "webhook").then_some(())
    });
    assert_eq!(
        deliver(&suite, "d-1", br#"{"number": 7}"#).unwrap().status,
        200
    );
    let work = wait_for("the Work", || {
        let works = suite
            .call("store.works", json!({"scope_id": "demo"}))
            .unwrap();
        works["works"].as_array().and_then(|a| a.first()).cloned()
    });
    let work_id = work["id"].as_str().unwrap().to_owned();
    let exec = wait_for("a running attempt", || {
        executions(&suite, &work_id)
            .into_iter()
            .find(|e| e["state"] == "running" && !e["recovery"].is_null())
    });
    let exec = exec["id"].as_str().unwrap().to_owned();

    // What it printed so far, while it runs.
    let first = wait_for("the first line, live", || {
        let l = live(&suite, &exec, 0).unwrap();
        text(&l, "stdout")
            .is_some_and(|t| t.contains("step one"))
            .then_some(l)
    });
    assert_eq!(text(&first, "stdout").unwrap(), "step one\n");
    assert_eq!(first.outputs[0].media_type, "text/plain");
    assert_eq!(first.outputs[0].size, 9);
    assert_eq!(text(&first, "stderr").unwrap(), "to stderr\n");
    // And what it prints later.
    touch(&go);
    wait_for("the second line, live", || {
        let l = live(&suite, &exec, 0).unwrap();
        text(&l, "stdout")
            .is_some_and(|t| t == "step one\nstep two\n")
            .then_some(())
    });
    // The last bytes only, when fewer are asked; more than the limit is refused.
    let short = live(&suite, &exec, 4).unwrap();
    assert_eq!(text(&short, "stdout").unwrap(), "two\n");
    let e = live(&suite, &exec, 64 * 1024 + 1).unwrap_err();
    assert_eq!(e["data"]["code"], "invalid", "{e}");
    assert!(e.to_string().contains("65536"), "{e}");
    // An execution nobody knows.
    let e = live(&suite, "exe_00000000000000000000000000000000", 0).unwrap_err();
    assert_eq!(e["data"]["code"], "not_found", "{e}");

    // Once it has ended: not_live.
    touch(&end);
    wait_for("the Work completed", || {
        let w = suite
            .call("store.work_get", json!({ "id": work_id }))
            .unwrap()["work"]
            .clone();
        (w["state"] == "completed").then_some(())
    });
    let e = live(&suite, &exec, 0).unwrap_err();
    assert_eq!(e["data"]["code"], "not_live", "{e}");
}
