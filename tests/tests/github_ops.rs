#![allow(clippy::unwrap_used)]
//! The github operations end to end, with real daemons: a signed GitHub `issues`
//! delivery (opened, labelled `agent`) starts a Work on a claude-code binding granted
//! `github.comment`, `github.add_labels` and `github.open_pull_request`, with a git
//! workspace. The fake `claude` (mode `github`), through the real `open-conduit mcp`,
//! reads its context, comments, labels, opens a pull request from its workspace's
//! branch, comments again with the same request ID, and comments without a body.
//!
//! GitHub is Prism over GitHub's own OpenAPI description (`--errors`: a request that
//! does not fit the description is answered 4xx with the violation; `--dynamic`:
//! answers generated from the schemas, since some of the description's own examples,
//! a pull request's among them, do not fit it and `--errors` would make them 500), from
//! tests/github-api (`npm ci --prefix tests/github-api`). Without node or those
//! packages the test prints SKIPPED and passes, unless OC_REQUIRE_PEERS=1.

mod common;
use common::*;

use oc_systest::github::{start_prism, Prism};
use oc_systest::{Daemon, Suite};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};

/// The connection's token: it must appear in no log.
/// What the fake claude does through the toolbelt (`FAKE_CLAUDE_MODE=calls`): a
/// comment (request ID `fake-comment`), a label, a pull request whose head is the
/// branch its workspace has checked out, onto `main`, the same comment again (the
/// same request ID), and a comment without a body.
const AGENT_CALLS: &str = r#"[
 {"operation": "github.comment", "input": {"body": "On it."}, "request_id": "fake-comment"},
 {"operation": "github.add_labels", "input": {"labels": ["triaged"]}, "request_id": "fake-labels"},
 {"operation": "github.open_pull_request", "input": {"head": "{branch}", "base": "main", "title": "Fix the bug", "body": "Fixes it."}, "request_id": "fake-pr"},
 {"operation": "github.comment", "input": {"body": "On it."}, "request_id": "fake-comment", "tag": " again"},
 {"operation": "github.comment", "input": {"body": ""}, "request_id": "fake-empty", "tag": " empty"}
]"#;

const TOKEN: &str = "ghp_e2eSecretTokenNeverLogged0123456789";
const REPO: &str = "Codertocat/Hello-World";

fn suite_with(prism: &Prism, bare: &Path) -> (Suite, PathBuf, Value) {
    let (suite, claude) = agent_suite("github-ops");
    let rec = suite.dir.join("claude.jsonl");
    let config_dir = suite.dir.join("claude-config");
    let doc = json!({
        "connections": [github_connection(&suite, &prism.url, TOKEN)],
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
                "operations": ["github.comment", "github.add_labels", "github.open_pull_request"],
                "resource": {"type": "git",
                             "config": {"repository": format!("file://{}", bare.display()),
                                        "min_free_mb": 1}},
                "config": {"binary": claude,
                           "env": {"FAKE_CLAUDE_MODE": "calls", "FAKE_CLAUDE_RECORD": rec,
                                   "FAKE_CLAUDE_CALLS": AGENT_CALLS,
                                   "CLAUDE_CONFIG_DIR": config_dir}}
            }]
        }]
    });
    suite.apply_config(&doc, "/github/demo/repo").unwrap();
    (suite, rec, doc)
}

/// The `n`th turn's MCP exchange, once recorded.
fn exchange(rec: &Path, n: usize) -> Vec<Value> {
    wait_for("the agent's MCP exchange", || {
        records(rec)
            .into_iter()
            .filter_map(|r| r["mcp"].as_array().cloned())
            .nth(n)
    })
}

/// The tool result of `method` in an exchange.
fn result_of(mcp: &[Value], m: &str) -> Value {
    mcp.iter()
        .find(|x| x["method"] == m)
        .unwrap_or_else(|| panic!("no {m} in {mcp:#?}"))["answer"]["result"]
        .clone()
}

#[test]
fn an_agent_comments_labels_and_opens_a_pull_request_through_the_toolbelt() {
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
    let repos = std::env::temp_dir().join(format!("oc-github-ops-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&repos);
    std::fs::create_dir_all(&repos).unwrap();
    let bare = common::repo::make_repo(&repos);
    let (suite, rec, doc) = suite_with(&prism, &bare);
    deliver_agent_issue(&suite, "gh-ops-1", 1);

    // The turn ran its calls through the real MCP server.
    let mcp = exchange(&rec, 0);
    let answer = |m: &str| result_of(&mcp, m);
    let context = answer("tools/call read_context");
    assert_eq!(context["isError"], false, "{context}");
    let ops = &context["structuredContent"]["operations"];
    for op in [
        "github.comment",
        "github.add_labels",
        "github.open_pull_request",
    ] {
        assert!(ops.as_array().unwrap().contains(&json!(op)), "{ops}");
    }
    let comment = answer("tools/call github.comment");
    assert_eq!(comment["isError"], false, "{comment}");
    let again = answer("tools/call github.comment again");
    assert_eq!(again["isError"], false, "{again}");
    assert_eq!(
        again["structuredContent"], comment["structuredContent"],
        "the same request ID answers the same comment"
    );
    let labels = answer("tools/call github.add_labels");
    assert_eq!(labels["isError"], false, "{labels}");
    let pr = answer("tools/call github.open_pull_request");
    assert_eq!(pr["isError"], false, "{pr}");
    let branch = mcp
        .iter()
        .find(|x| x["method"] == "tools/call github.open_pull_request")
        .unwrap()["branch"]
        .clone();
    // The PR's head is the Work's own branch, checked out in its workspace.
    let work_id = suite
        .call("store.works", json!({"scope_id": "demo"}))
        .unwrap()["works"][0]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let leases = suite
        .call("store.resource_leases", json!({ "owner": work_id }))
        .unwrap();
    let dir = leases["leases"][0]["dir"].as_str().unwrap().to_owned();
    assert_eq!(
        branch.as_str(),
        Some(common::repo::git(Path::new(&dir), &["rev-parse", "--abbrev-ref", "HEAD"]).as_str()),
        "{leases}"
    );
    assert!(branch.as_str().unwrap().starts_with("oc/"), "{branch}");
    // A refusal reaches the agent with its message, not only its code.
    let empty = answer("tools/call github.comment empty");
    assert_eq!(empty["isError"], true, "{empty}");
    let text = empty["content"][0]["text"].as_str().unwrap_or_default();
    assert!(
        text.starts_with("invalid: github.comment: body is empty"),
        "{text}"
    );

    // Prism: every request fitted GitHub's description (none answered with a
    // violation), the PR's head was the branch, and one POST made one comment.
    let log = prism.log.lock().unwrap().clone();
    let requests: Vec<&String> = log
        .iter()
        .filter(|l| l.contains("Request received"))
        .collect();
    let comments = requests
        .iter()
        .filter(|l| {
            l.to_lowercase()
                .contains("post /repos/codertocat/hello-world/issues/1/comments")
        })
        .count();
    // The agent's comment once (its repeated request ID made no second) and the
    // package's status comment once (edited in place after: PATCH).
    assert_eq!(comments, 2, "two comment POSTs: {log:#?}");
    for path in ["issues/1/labels", "/pulls"] {
        assert!(
            requests.iter().any(|l| l.to_lowercase().contains(&format!(
                "post /repos/codertocat/hello-world/{}",
                path.trim_start_matches('/')
            ))),
            "{path}: {log:#?}"
        );
    }
    let violations: Vec<&String> = log
        .iter()
        .filter(|l| {
            l.contains("did not pass the validation")
                || l.contains("Violation:")
                || l.contains("Responding with \"4")
                || l.contains("Responding with \"5")
        })
        .collect();
    let answered = log
        .iter()
        .filter(|l| l.contains("Responding with \"2"))
        .count();
    assert_eq!(
        answered,
        requests.len(),
        "every request answered 2xx: {log:#?}"
    );
    assert!(violations.is_empty(), "{violations:#?}");

    // GitHub's own refusal reaches the agent with its message: the connection now
    // points where Prism knows no route, and every call of the next Work is 404.
    let mut doc = doc;
    doc["connections"][0]["config"]["api_url"] = json!(format!("{}/nowhere", prism.url));
    suite.apply_config(&doc, "/github/demo/repo").unwrap();
    deliver_agent_issue(&suite, "gh-ops-2", 2);
    let mcp = exchange(&rec, 1);
    let refused = result_of(&mcp, "tools/call github.comment");
    assert_eq!(refused["isError"], true, "{refused}");
    let text = refused["content"][0]["text"].as_str().unwrap_or_default();
    assert!(
        text.starts_with("not_found: github.comment: GitHub answered 404: Route not resolved"),
        "{text}"
    );
    assert!(
        text.len() <= 500 + "not_found: github.comment: ".len(),
        "{text}"
    );
    assert!(!text.contains(TOKEN));

    // The github package's request lines reach its log, without the token.
    let ext_log = wait_for("the github request lines", || {
        let text = std::fs::read_to_string(suite.dir.join("state/logs/extensions/github.log"))
            .unwrap_or_default();
        text.contains("GitHub API request").then_some(text)
    });
    for want in ["method=\"POST\"", "path=", "status=201", "elapsed_ms="] {
        assert!(ext_log.contains(want), "{want} in {ext_log}");
    }
    assert!(!ext_log.contains(TOKEN), "the token is in the log");
    for d in [Daemon::Extrunner, Daemon::Schedulerd] {
        assert!(!suite.log(d).contains(TOKEN), "the token is in {d:?}'s log");
    }
    let _ = std::fs::remove_dir_all(&repos);
}

/// The agent's calls on another repository: a comment on Octo/Other#7, which a
/// github entry of the scope `side` receives.
const CROSS_CALLS: &str = r#"[
 {"operation": "github.comment", "input": {"repository": "Octo/Other", "number": 7, "body": "Seen from demo."}, "request_id": "cross-{n}"}
]"#;

/// An operation on another scope's repository is refused without the configuration's
/// authorization (`scope.authorize`: `authorization.file_scopes`), saying which field
/// would allow it, and allowed with it: GitHub (Prism) gets the comment on Octo/Other.
#[test]
fn an_operation_on_another_scopes_repository_needs_the_configurations_authorization() {
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
    let (suite, claude) = agent_suite("github-cross");
    let rec = suite.dir.join("claude.jsonl");
    let mut doc = json!({
        "connections": [github_connection(&suite, &prism.url, TOKEN)],
        "scopes": [{
            "id": "demo",
            "entries": [{"type": "github", "name": "repo", "connection": "gh",
                         "config": {"repository": REPO, "reconcile_interval_s": 0}}],
            "routes": [{"handler": "github", "binding": "cc",
                        "config": {"events": ["github.issue.opened"], "labels": ["agent"]}}],
            "bindings": [{
                "name": "cc", "executor": "claude-code", "connection": "gh",
                "operations": ["github.comment"],
                "config": {"binary": claude, "dir": suite.dir,
                           "env": {"FAKE_CLAUDE_MODE": "calls", "FAKE_CLAUDE_RECORD": rec,
                                   "FAKE_CLAUDE_CALLS": CROSS_CALLS.replace("{n}", "1"),
                                   "CLAUDE_CONFIG_DIR": suite.dir.join("claude-config")}}
            }]
        }, {
            "id": "side",
            "entries": [{"type": "github", "name": "other", "connection": "gh",
                         "config": {"repository": "Octo/Other", "reconcile_interval_s": 0}}]
        }]
    });
    suite.apply_config(&doc, "/github/demo/repo").unwrap();
    deliver_agent_issue(&suite, "cross-1", 1);
    let refused = result_of(&exchange(&rec, 0), "tools/call github.comment");
    assert_eq!(refused["isError"], true, "{refused}");
    let text = refused["content"][0]["text"].as_str().unwrap_or_default();
    assert!(
        text.contains("not Octo/Other") && text.contains("authorization.file_scopes"),
        "{text}"
    );

    // The operator authorizes demo's Work to file in side.
    doc["scopes"][0]["authorization"] = json!({"file_scopes": ["side"]});
    doc["scopes"][0]["bindings"][0]["config"]["env"]["FAKE_CLAUDE_CALLS"] =
        json!(CROSS_CALLS.replace("{n}", "2"));
    suite.apply_config(&doc, "/github/demo/repo").unwrap();
    deliver_agent_issue(&suite, "cross-2", 2);
    let allowed = result_of(&exchange(&rec, 1), "tools/call github.comment");
    assert_eq!(allowed["isError"], false, "{allowed}");
    assert_eq!(allowed["structuredContent"]["repository"], "Octo/Other");
    let log = prism.log.lock().unwrap().clone();
    assert!(
        log.iter().any(|l| l
            .to_lowercase()
            .contains("post /repos/octo/other/issues/7/comments")),
        "{log:#?}"
    );
}
