#![allow(clippy::unwrap_used)]
//! `github.wait` end to end, with real daemons: a signed `issues` delivery starts a
//! claude-code Work whose agent (the fake `claude`, through the real `open-conduit
//! mcp`) waits for the checks of pull request #7 and ends its turn. The Work sleeps
//! on a Wait described `checks on PR #7`; the package's `github.waits` task looks at
//! the head commit's check runs and sets the Wait's progress, which `open-conduit
//! work show` prints (`1 of 2 checks finished`); once both runs have finished it
//! delivers `github.wait.checks_completed`, which wakes the Work, and the next turn
//! starts with it (the runs' conclusions in its data).
//!
//! GitHub is the validating stand-in in front of Prism (every request must fit
//! GitHub's OpenAPI description): the pull request and the check runs are built from
//! the description's own `pull-request` and `check-run-paginated` examples. Without
//! node or tests/github-api's packages the test prints SKIPPED and passes, unless
//! OC_REQUIRE_PEERS=1.

mod common;
use common::*;

use oc_systest::github::{example, prism_or_skip, Reply, Request, StandIn};
use oc_systest::{Daemon, Suite};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const REPO: &str = "Codertocat/Hello-World";
const TOKEN: &str = "ghp_waitTestTokenNeverLogged0123456789";
const SHA: &str = "0123456789abcdef0123456789abcdef01234567";
/// The agent's calls, every turn: wait for the checks of PR #7.
const AGENT_CALLS: &str = r#"[
 {"operation": "github.wait", "input": {"for": "checks", "number": 7}, "request_id": "fake-wait"}
]"#;
/// The task's interval is 15 s and schedulerd runs the first pass one interval after
/// it learns of the task: a few passes fit in this.
const PASSES: Duration = Duration::from_secs(180);

/// GitHub's side: pull request #7 at `SHA`, and its two check runs, the second
/// finished once `done` is set.
fn github(done: Arc<Mutex<bool>>) -> impl FnMut(&Request) -> Option<Reply> + Send {
    let mut pr = example("pull-request").unwrap();
    pr["number"] = json!(7);
    pr["head"]["sha"] = json!(SHA);
    let listing = example("check-run-paginated").unwrap();
    let run = listing["check_runs"][0].clone();
    move |r: &Request| {
        let repo = format!("/repos/{REPO}");
        if r.method == "GET" && r.path() == format!("{repo}/pulls/7") {
            return Some(Reply::json(200, &pr));
        }
        if r.method == "GET" && r.path() == format!("{repo}/commits/{SHA}/check-runs") {
            let finished = *done.lock().unwrap();
            let mut build = run.clone();
            build["id"] = json!(41);
            build["name"] = json!("build");
            build["head_sha"] = json!(SHA);
            build["status"] = json!("completed");
            build["conclusion"] = json!("success");
            let mut test = run.clone();
            test["id"] = json!(42);
            test["name"] = json!("test");
            test["head_sha"] = json!(SHA);
            if finished {
                test["status"] = json!("completed");
                test["conclusion"] = json!("success");
            } else {
                test["status"] = json!("in_progress");
                test["conclusion"] = Value::Null;
                test["completed_at"] = Value::Null;
            }
            return Some(Reply::json(
                200,
                &json!({"total_count": 2, "check_runs": [build, test]}),
            ));
        }
        None
    }
}

fn suite_with(api_url: &str) -> (Suite, PathBuf) {
    let (suite, claude) = agent_suite("github-wait");
    let rec = suite.dir.join("claude.jsonl");
    let doc = json!({
        "connections": [github_connection(&suite, api_url, TOKEN)],
        "scopes": [{
            "id": "demo",
            "entries": [
                {"type": "github", "name": "repo", "connection": "gh",
                 "config": {"repository": REPO, "reconcile_interval_s": 0}}
            ],
            "routes": [{"handler": "github", "binding": "cc",
                        "config": {"events": ["github.issue.opened"], "labels": ["agent"]}}],
            "bindings": [{
                "name": "cc", "executor": "claude-code", "connection": "gh",
                "operations": ["github.wait"],
                "config": {"binary": claude,
                           "env": {"FAKE_CLAUDE_MODE": "calls", "FAKE_CLAUDE_RECORD": rec,
                                   "FAKE_CLAUDE_CALLS": AGENT_CALLS,
                                   "CLAUDE_CONFIG_DIR": suite.dir.join("claude-config")}}
            }]
        }]
    });
    suite.apply_config(&doc, "/github/demo/repo").unwrap();
    (suite, rec)
}

/// The `n`th turn's MCP exchange, once recorded; without it in time, the test fails
/// with what the Work, its Waits and the github package's log say.
fn exchange(suite: &Suite, rec: &Path, n: usize) -> Vec<Value> {
    let deadline = Instant::now() + PASSES;
    loop {
        let found = records(rec)
            .into_iter()
            .filter_map(|r| r["mcp"].as_array().cloned())
            .nth(n);
        if let Some(mcp) = found {
            return mcp;
        }
        if Instant::now() > deadline {
            let works = suite.call("store.works", json!({"scope_id": "demo"}));
            let log = std::fs::read_to_string(suite.dir.join("state/logs/extensions/github.log"))
                .unwrap_or_default();
            let tail: Vec<&str> = log.lines().rev().take(40).collect();
            panic!(
                "no MCP exchange of turn {n} within {PASSES:?}\nworks: {works:?}\nrecords: {:?}\n\
                 github log (newest first):\n{}\nschedulerd: {}",
                records(rec),
                tail.join("\n"),
                suite.log(Daemon::Schedulerd)
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn an_agent_waits_for_its_pull_requests_checks_and_wakes_when_they_finish() {
    let Some(prism) = prism_or_skip() else {
        return;
    };
    let done = Arc::new(Mutex::new(false));
    let standin = StandIn::start(&prism, github(done.clone())).unwrap();
    let (suite, rec) = suite_with(&standin.url);
    deliver_agent_issue(&suite, "gh-wait-1", 1);

    // The turn planned the wait through the toolbelt and ended.
    let mcp = exchange(&suite, &rec, 0);
    let call = mcp
        .iter()
        .find(|x| x["method"] == "tools/call github.wait")
        .unwrap_or_else(|| panic!("no github.wait call in {mcp:#?}"));
    let answer = &call["answer"]["result"];
    assert_eq!(answer["isError"], false, "{answer}");
    let work_id = wait_within("the Work", PASSES, || {
        suite
            .call("store.works", json!({"scope_id": "demo"}))
            .ok()?["works"][0]["id"]
            .as_str()
            .map(str::to_owned)
    });

    // The Work sleeps on the Wait; the task's look sets its progress.
    let show = wait_within("the wait's progress in work show", PASSES, || {
        let (_, show) = cli(&suite, &["work", "show", &work_id]);
        show.contains("progress: 1 of 2 checks finished")
            .then_some(show)
    });
    assert!(show.contains("checks on PR #7"), "{show}");
    let waits = suite
        .call("store.waits", json!({ "work_id": work_id }))
        .unwrap();
    let wait = &waits["waits"][0];
    assert_eq!(wait["state"], "active", "{waits}");
    assert_eq!(
        wait["owner"], "github",
        "the planner owns the Wait: {waits}"
    );
    assert!(!standin
        .requests("GET", &format!("/commits/{SHA}/check-runs"))
        .is_empty());
    assert!(
        records(&rec).iter().filter(|r| r["mcp"].is_array()).count() == 1,
        "no second turn while the checks run"
    );

    // Both runs finished: the next look wakes the Work, and its next turn starts.
    *done.lock().unwrap() = true;
    exchange(&suite, &rec, 1);
    let waits = suite
        .call("store.waits", json!({ "work_id": work_id }))
        .unwrap();
    assert!(
        waits["waits"]
            .as_array()
            .unwrap()
            .iter()
            .any(|w| w["state"] == "woken" && w["progress"] == "1 of 2 checks finished"),
        "the woken Wait keeps its last progress: {waits}"
    );
    let events = suite.events().unwrap();
    let woke: Vec<&Value> = events
        .iter()
        .filter(|e| e["type"] == "github.wait.checks_completed")
        .collect();
    assert_eq!(woke.len(), 1, "one waking Event: {events:#?}");
    let data = &woke[0]["payload"];
    assert_eq!(data["checks"]["conclusion"], "success", "{data}");
    assert_eq!(data["checks"]["total"], 2);
    assert_eq!(data["head_sha"], SHA);
    assert_eq!(data["number"], 7);

    // Every request fitted GitHub's description, and the token is in no log.
    assert!(
        standin.violations().is_empty(),
        "{:#?}",
        standin.violations()
    );
    let ext_log = std::fs::read_to_string(suite.dir.join("state/logs/extensions/github.log"))
        .unwrap_or_default();
    assert!(!ext_log.contains(TOKEN));
}
