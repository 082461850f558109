#![allow(clippy::unwrap_used)]
//! Approvals end to end, with real daemons, the bundled `human` package as the gate
//! and GitHub as Prism over GitHub's own OpenAPI description: a scope whose `human`
//! entry gates `github.open_pull_request` parks the agent's call until a person
//! decides. Approved from the CLI, the call made again on the resumed turn opens the
//! pull request (Prism sees one `POST /pulls`); rejected, the call fails with the
//! person's reason in the agent's text; with no decision within the gate's timeout,
//! the call fails saying so. Each decision is a `core.action.*` Event naming the
//! person.
//!
//! Without node or tests/github-api's packages the test prints SKIPPED and passes,
//! unless OC_REQUIRE_PEERS=1.

mod common;
use common::*;

use oc_systest::github::{start_prism, Prism};
use oc_systest::Suite;
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::time::Duration;

const TOKEN: &str = "ghp_gateSecretTokenNeverLogged012345678";
const REPO: &str = "Codertocat/Hello-World";
/// How long a gated call waits for a decision.
const GATE_TIMEOUT_S: u64 = 20;

/// On every turn: open a pull request from the workspace's branch (the same request
/// ID each time: the call made again after a decision is the same call).
const AGENT_CALLS: &str = r#"[
 {"operation": "github.open_pull_request", "request_id": "fake-pr",
  "input": {"head": "{branch}", "base": "main", "title": "Fix the bug", "body": "Fixes it."}}
]"#;

fn suite_with(prism: &Prism, bare: &Path) -> (Suite, PathBuf) {
    let (suite, claude) = agent_suite("human-gates");
    let rec = suite.dir.join("claude.jsonl");
    let doc = json!({
        "connections": [github_connection(&suite, &prism.url, TOKEN)],
        "scopes": [{
            "id": "demo",
            "entries": [
                {"type": "github", "name": "repo", "connection": "gh",
                 "config": {"repository": REPO, "reconcile_interval_s": 0}},
                {"type": "human", "name": "people",
                 "config": {"gates": [{"operation": "github.open_pull_request",
                                       "timeout_s": GATE_TIMEOUT_S}]}}
            ],
            "routes": [{"handler": "github", "binding": "cc",
                        "config": {"events": ["github.issue.opened"], "labels": ["agent"]}}],
            "bindings": [{
                "name": "cc", "executor": "claude-code", "connection": "gh",
                "operations": ["github.open_pull_request"],
                "resource": {"type": "git",
                             "config": {"repository": format!("file://{}", bare.display()),
                                        "min_free_mb": 1}},
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

/// The Work of issue `number`.
fn work_of(suite: &Suite, number: u64) -> String {
    let key = format!("github:{}#{number}", REPO.to_ascii_lowercase());
    wait_for("the issue's Work", || {
        let works = suite
            .call("store.works", json!({"scope_id": "demo", "key": key}))
            .ok()?;
        works["works"][0]["id"].as_str().map(str::to_owned)
    })
}

/// The agent's `github.open_pull_request` answers, in the order its turns made them
/// (the test's Works run one after another).
fn pr_answers(rec: &Path) -> Vec<Value> {
    records(rec)
        .into_iter()
        .filter_map(|r| r["mcp"].as_array().cloned())
        .filter_map(|mcp| {
            mcp.into_iter()
                .find(|x| x["method"] == "tools/call github.open_pull_request")
                .map(|x| x["answer"]["result"].clone())
        })
        .collect()
}

fn text(result: &Value) -> String {
    result["content"][0]["text"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

/// The open approval of Work `work_id`, once listed.
fn approval_of(suite: &Suite, work_id: &str) -> Value {
    wait_for("the approval in `asks`", || {
        let (_, out) = cli(suite, &["--json", "asks"]);
        let v: Value = serde_json::from_str(&out).ok()?;
        v["asks"]
            .as_array()?
            .iter()
            .find(|a| a["kind"] == "approval" && a["work_id"] == work_id)
            .cloned()
    })
}

fn pull_posts(prism: &Prism) -> usize {
    prism
        .log
        .lock()
        .unwrap()
        .iter()
        .filter(|l| l.contains("Request received"))
        .filter(|l| {
            l.to_lowercase()
                .contains("post /repos/codertocat/hello-world/pulls")
        })
        .count()
}

#[test]
fn a_gated_pull_request_waits_for_a_persons_approval_and_a_rejection_or_timeout_fails_it() {
    let prism = match start_prism() {
        Ok(p) => p,
        Err(why) => {
            assert!(
                !oc_systest::github::required(),
                "no Prism under OC_REQUIRE_PEERS=1: {why}"
            );
            eprintln!("SKIPPED: {why}");
            return;
        }
    };
    if !common::repo::have_git() {
        return;
    }
    let repos = std::env::temp_dir().join(format!("oc-human-gates-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&repos);
    std::fs::create_dir_all(&repos).unwrap();
    let bare = common::repo::make_repo(&repos);
    let (suite, rec) = suite_with(&prism, &bare);
    let me = cli::asks::person();

    // 1. Approved: the call parks, GitHub sees nothing, then the call made again
    // after the approval opens the pull request.
    deliver_agent_issue(&suite, "gate-1", 1);
    let first = work_of(&suite, 1);
    let parked = wait_for("the parked call", || pr_answers(&rec).first().cloned());
    assert_eq!(parked["isError"], false, "{parked}");
    assert_eq!(parked["structuredContent"]["parked"], true, "{parked}");
    let approval = approval_of(&suite, &first);
    assert!(
        approval["text"]
            .as_str()
            .unwrap()
            .contains("github.open_pull_request"),
        "{approval}"
    );
    let (_, show) = cli(&suite, &["work", "show", &first]);
    assert!(show.contains("approval "), "{show}");
    assert_eq!(pull_posts(&prism), 0, "the gated call reached GitHub");
    let id = approval["id"].as_str().unwrap();
    let (code, out) = cli(&suite, &["ask", "approve", id, "--reason", "looks right"]);
    assert_eq!(code, 0, "{out}");
    let opened = wait_for("the call made again", || pr_answers(&rec).get(1).cloned());
    assert_eq!(opened["isError"], false, "{opened}");
    assert!(
        opened["structuredContent"]["number"].is_number(),
        "{opened}"
    );
    assert_eq!(pull_posts(&prism), 1);
    let approvals: Vec<Value> = suite
        .events()
        .unwrap()
        .into_iter()
        .filter(|e| e["type"] == "core.action.approve")
        .collect();
    assert_eq!(approvals.len(), 1, "{approvals:#?}");
    assert_eq!(approvals[0]["payload"]["caller"], me);

    // 2. Rejected: the call made again fails with the person's reason.
    deliver_agent_issue(&suite, "gate-2", 2);
    let second = work_of(&suite, 2);
    let approval = approval_of(&suite, &second);
    let id = approval["id"].as_str().unwrap();
    let (code, out) = cli(
        &suite,
        &["ask", "reject", id, "--reason", "wrong base branch"],
    );
    assert_eq!(code, 0, "{out}");
    let refused = wait_for("the rejected call made again", || {
        pr_answers(&rec).get(3).cloned()
    });
    assert_eq!(refused["isError"], true, "{refused}");
    let said = text(&refused);
    assert!(said.contains("wrong base branch"), "{said}");
    assert!(said.contains(&me), "the agent reads who refused: {said}");
    assert_eq!(pull_posts(&prism), 1, "the rejected call reached GitHub");

    // 3. No decision within the gate's timeout: the call fails saying so.
    deliver_agent_issue(&suite, "gate-3", 3);
    let third = work_of(&suite, 3);
    approval_of(&suite, &third);
    let timed_out = wait_within(
        "the timed-out call made again",
        Duration::from_secs(GATE_TIMEOUT_S * 6),
        || pr_answers(&rec).get(5).cloned(),
    );
    assert_eq!(timed_out["isError"], true, "{timed_out}");
    let said = text(&timed_out);
    assert!(said.contains("no approval within"), "{said}");
    assert_eq!(pull_posts(&prism), 1, "the timed-out call reached GitHub");
    for d in [
        oc_systest::Daemon::Extrunner,
        oc_systest::Daemon::Schedulerd,
    ] {
        assert!(!suite.log(d).contains(TOKEN), "the token is in {d:?}'s log");
    }
    let _ = std::fs::remove_dir_all(&repos);
}
