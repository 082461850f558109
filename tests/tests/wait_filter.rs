#![allow(clippy::unwrap_used)]
//! A Wait's dependency filter with real daemons: a turn (the `agent` test executor,
//! driven from here through the real toolbelt) parks its Work on a Wait the `sieve`
//! package's wait operation plans; `sieve` declares `provides.dependency_filter`, so
//! schedulerd's router asks it (`dependency.filter` through extrunner) about every
//! event the Wait's keys and types match. A delivery on the Wait's key that the filter
//! refuses does not wake it; the next one, which the filter matches, does, and the
//! same attempt resumes.

mod common;
use common::*;

use oc_systest::{Package, Suite};
use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};

/// One `toolbelt.call` on the run's toolbelt socket, as the MCP server sends it.
fn toolbelt_call(endpoint: &str, token: &str, input: Value, request_id: &str) -> Value {
    let mut s = UnixStream::connect(endpoint).unwrap();
    let line = json!({"jsonrpc": "2.0", "id": 1, "method": "toolbelt.call",
        "params": {"token": token, "tool": "call", "input": input, "request_id": request_id}});
    writeln!(s, "{line}").unwrap();
    let mut answer = String::new();
    BufReader::new(s).read_line(&mut answer).unwrap();
    serde_json::from_str(&answer).unwrap()
}

/// The run file the `agent` executor wrote for segment `segment`.
fn run_file(dir: &Path, segment: u64) -> (PathBuf, Value) {
    wait_for(&format!("the agent's segment {segment}"), || {
        for e in std::fs::read_dir(dir).ok()?.flatten() {
            let p = e.path();
            if p.extension().is_some_and(|x| x == "json") {
                let v: Value = serde_json::from_str(&std::fs::read_to_string(&p).ok()?).ok()?;
                if v["segment"] == segment {
                    return Some((p, v));
                }
            }
        }
        None
    })
}

/// The lines `sieve`'s filter wrote, one per `dependency.filter` it answered.
fn filter_calls(suite: &Suite) -> Vec<Value> {
    records(&suite.dir.join("bundled/sieve/filters"))
}

/// The sequence of the delivery `id`'s event.
fn seq_of(suite: &Suite, id: &str) -> i64 {
    hook_events(suite)
        .into_iter()
        .find(|e| e["delivery_id"] == id)
        .and_then(|e| e["seq"].as_i64())
        .unwrap_or_else(|| panic!("no event of delivery {id}"))
}

#[test]
fn only_an_event_the_owners_filter_matches_wakes_the_wait() {
    let mut packages = Suite::first_party();
    packages.push(Package {
        name: "agent".into(),
        manifest: oc_systest::agent::MANIFEST.into(),
        command: vec!["ext-agent".into()],
    });
    packages.push(Package {
        name: "sieve".into(),
        manifest: oc_systest::sieve::MANIFEST.into(),
        command: vec!["ext-sieve".into()],
    });
    let suite = Suite::new(Path::new(BIN), "wait-filter", &packages).unwrap();
    suite.start_all().unwrap();
    let turns = suite.dir.join("turns");
    std::fs::create_dir_all(&turns).unwrap();
    let mut c = config(&suite);
    c["scopes"][0]["routes"] =
        json!([{"handler": "webhook", "binding": "agent", "config": {"entry": "ci"}}]);
    c["scopes"][0]["bindings"] = json!([{"name": "agent", "executor": "agent",
        "operations": ["sieve.await"], "config": {"dir": turns}}]);
    suite.apply_config(&c, HOOK).unwrap();
    assert_eq!(
        deliver(&suite, "f-1", br#"{"number": 5, "state": "pending"}"#)
            .unwrap()
            .status,
        200
    );

    // The turn plans the Wait through the toolbelt and ends.
    let (run, record) = run_file(&turns, 0);
    let endpoint = record["toolbelt"]["endpoint"].as_str().unwrap();
    let token = record["toolbelt"]["token"].as_str().unwrap();
    let work_id = record["work_id"].as_str().unwrap().to_owned();
    let key = "webhook:demo/ci:5";
    let planned = toolbelt_call(
        endpoint,
        token,
        json!({"operation": "sieve.await",
               "input": {"key": key, "pointer": "/body/state", "equals": "green"}}),
        "w-1",
    );
    assert_eq!(planned["result"]["wait"]["keys"], json!([key]), "{planned}");
    std::fs::write(
        run.with_extension("end"),
        json!({"outcome": "handoff", "summary": "waiting for green"}).to_string(),
    )
    .unwrap();
    let wait = wait_for("the Work's Wait", || {
        let waits = suite
            .call("store.waits", json!({ "work_id": work_id }))
            .ok()?;
        waits["waits"]
            .as_array()?
            .iter()
            .find(|w| w["state"] == "active")
            .cloned()
    });
    assert_eq!(wait["owner"], "sieve", "{wait}");
    assert_eq!(
        wait["plan"],
        json!({"pointer": "/body/state", "equals": "green"})
    );

    // The same key and type, but not what the filter wants: asked, refused, not woken.
    assert_eq!(
        deliver(&suite, "f-2", br#"{"number": 5, "state": "failing"}"#)
            .unwrap()
            .status,
        200
    );
    let refused = wait_for("the filter's answer about f-2", || {
        filter_calls(&suite).into_iter().next()
    });
    assert_eq!(refused["matched"], false, "{refused}");
    assert_eq!(refused["operation"], "sieve.await", "{refused}");
    assert_eq!(refused["work_id"], work_id.as_str(), "{refused}");

    // What the filter matches wakes it: the same attempt resumes.
    assert_eq!(
        deliver(&suite, "f-3", br#"{"number": 5, "state": "green"}"#)
            .unwrap()
            .status,
        200
    );
    let (run2, _) = run_file(&turns, 1);
    assert_eq!(run2, run, "the same execution resumes");
    let waits = suite
        .call("store.waits", json!({ "work_id": work_id }))
        .unwrap();
    let woken = &waits["waits"][0];
    assert_eq!(woken["state"], "woken", "{waits}");
    assert_eq!(
        woken["wake_seq"],
        seq_of(&suite, "f-3"),
        "woken by the matching delivery, not the one before: {waits}"
    );
    let calls = filter_calls(&suite);
    let answers: Vec<&Value> = calls.iter().map(|c| &c["matched"]).collect();
    assert_eq!(answers, [false, true], "{calls:?}");
    // The refused delivery still went to the Work, as input for its next turn.
    let inputs = suite
        .call("store.work_inputs", json!({ "work_id": work_id }))
        .unwrap();
    let seqs: Vec<i64> = inputs["inputs"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|i| i["seq"].as_i64())
        .collect();
    assert!(seqs.contains(&seq_of(&suite, "f-2")), "{inputs}");
}
