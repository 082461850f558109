#![allow(clippy::unwrap_used)]
//! A Jira issue fixed in a Bitbucket repository (issue 44, where the tracker kit and
//! Bitbucket meet), with real daemons: a signed Jira webhook assigning INDEV-242 to
//! the agent starts a Work on a claude-code binding whose `connection` is the Jira
//! one, with the `bitbucket` connection among its `connections` and a `git`
//! workspace of the scope's Bitbucket repository, served by the real
//! `git http-backend` behind Bitbucket's `x-token-auth` basic auth. The agent (the
//! fake `claude`, behind a wrapper that commits and pushes each turn through the
//! run's credential helper) opens a pull request from its branch without naming the
//! repository (the scope's one), through Prism over Atlassian's Bitbucket
//! description; the pull request is linked to the Work, so a change request on it
//! (a Bitbucket webhook) wakes the agent's reply wait in the same Work, which
//! answers it with another push and a comment on that pull request. No secret is in
//! a log, the state directory or the workspace.
//!
//! Without node, Prism or git it prints SKIPPED and passes, unless OC_REQUIRE_PEERS=1.

mod common;
use common::*;

use oc_systest::bitbucket::Bitbucket;
use oc_systest::githttp::GitHttp;
use oc_systest::jira::Jira;
use oc_systest::{Daemon, Suite};
use serde_json::{json, Value};
use std::path::Path;

const JIRA_TOKEN: &str = "jira-bb-ApiTokenNeverLogged-24680";
const JIRA_SECRET: &str = "jira-bb-webhook-secret-never-logged";
const BB_TOKEN: &str = "bb-jira-AccessTokenNeverLogged-13579";
const BB_SECRET: &str = "bb-jira-webhook-secret-never-logged";
const JIRA_AGENT: &str = "5b912e21fa38ae2c896099ae";
const REPO: &str = "acme/widgets";
const JIRA_PATH: &str = "/jira/demo/tracker";
const BB_PATH: &str = "/bitbucket/demo/code";

fn skip(what: &str, why: impl std::fmt::Display) {
    assert!(
        !oc_systest::bitbucket::required(),
        "no {what} under OC_REQUIRE_PEERS=1: {why}"
    );
    eprintln!("SKIPPED: {what}: {why}");
}

fn works(suite: &Suite) -> Vec<Value> {
    suite
        .call("store.works", json!({"scope_id": "demo"}))
        .unwrap()["works"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

#[test]
fn a_jira_issue_is_fixed_in_a_bitbucket_pull_request_whose_review_reaches_its_work() {
    if !common::repo::have_git() {
        return;
    }
    let jira = match Jira::start() {
        Ok(j) => j,
        Err(why) => return skip("Prism for Jira", why),
    };
    let bb = match Bitbucket::start_amended() {
        Ok(b) => b,
        Err(why) => return skip("Prism for Bitbucket", why),
    };
    let origin = match GitHttp::start() {
        Ok(o) => o,
        Err(why) => return skip("git origin", why),
    };
    origin.create_repo(REPO, true);
    origin.allow_user("x-token-auth", BB_TOKEN, &[REPO]);

    let packages = packages_with(&[
        ("claude-code", oc_claude_code::MANIFEST, "ext-claude-code"),
        ("jira", oc_jira::MANIFEST, "ext-jira"),
        ("bitbucket", oc_bitbucket::MANIFEST, "ext-bitbucket"),
    ]);
    let suite = Suite::new(Path::new(BIN), "jira-bitbucket", &packages).unwrap();
    let (claude, push_log) = pushing_claude(&suite, "Fix INDEV-242");
    with_toolbelt(&suite);
    suite.start_all().unwrap();

    let secrets = suite.dir.join("secrets");
    std::fs::create_dir_all(&secrets).unwrap();
    let file = |n: &str, v: &str| {
        let p = secrets.join(n);
        std::fs::write(&p, format!("{v}\n")).unwrap();
        format!("file:{}", p.display())
    };
    let rec = suite.dir.join("claude.jsonl");
    let calls = json!([
        {"operation": "bitbucket.open_pull_request",
         "input": {"title": "Fix INDEV-242", "branch": "{branch}",
                   "description": "Fixes INDEV-242."},
         "request_id": "jira-open", "turn": "first"},
        {"operation": "bitbucket.wait_reply", "input": {"timeout_s": 3600},
         "request_id": "jira-wait", "turn": "first"},
        {"operation": "bitbucket.comment", "input": {"text": "Renamed as asked."},
         "request_id": "jira-answer", "turn": "resumed"}
    ]);
    let doc = json!({
        "connections": [
            {"name": "jc", "type": "jira",
             "config": {"base_url": jira.url, "email": "agent@example.com"},
             "secret_refs": {"api_token": file("jira-token", JIRA_TOKEN),
                             "webhook_secret": file("jira-secret", JIRA_SECRET)}},
            {"name": "bb", "type": "bitbucket",
             "config": {"api_url": bb.url, "git_url": origin.url()},
             "secret_refs": {"token": file("bb-token", BB_TOKEN),
                             "webhook_secret": file("bb-secret", BB_SECRET)}}
        ],
        "scopes": [{
            "id": "demo",
            "entries": [
                {"type": "jira", "name": "tracker", "connection": "jc",
                 "config": {"projects": ["INDEV"], "agent_account_id": JIRA_AGENT}},
                {"type": "bitbucket", "name": "code", "connection": "bb",
                 "config": {"repositories": [REPO], "mention": "@conduit",
                            "agent_account_id": "557058:agent", "reconcile_interval_s": 0}}
            ],
            "routes": [{"handler": "jira", "binding": "cc"},
                       {"handler": "bitbucket", "binding": "cc"}],
            "bindings": [{
                "name": "cc", "executor": "claude-code", "connection": "jc",
                "connections": ["bb"],
                "operations": ["bitbucket.open_pull_request", "bitbucket.wait_reply",
                               "bitbucket.comment"],
                "resource": {"type": "git", "config": {
                    "repository": origin.repo_url(REPO), "connection": "bb",
                    "min_free_mb": 1}},
                "config": {"binary": claude,
                           "env": {"FAKE_CLAUDE_MODE": "calls", "FAKE_CLAUDE_RECORD": rec,
                                   "FAKE_CLAUDE_CALLS": calls.to_string(),
                                   "FAKE_CLAUDE_STATE": "review",
                                   "CLAUDE_CONFIG_DIR": suite.dir.join("claude-config")}}
            }]
        }]
    });
    suite.apply_config(&doc, JIRA_PATH).unwrap();
    suite.wait_for_route(BB_PATH).unwrap();

    // The assignment, signed as Jira signs it.
    let assigned = std::fs::read(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../extensions/jira/tests/fixtures/issue-updated-issue-assigned.json"),
    )
    .unwrap();
    let headers = vec![
        ("Content-Type", "application/json".to_string()),
        (
            "X-Hub-Signature",
            oc_jira::signature::sign(JIRA_SECRET.as_bytes(), &assigned),
        ),
        (
            "X-Atlassian-Webhook-Identifier",
            "jb-assigned-1".to_string(),
        ),
    ];
    let r = oc_systest::post(suite.http, JIRA_PATH, &headers, &assigned).unwrap();
    assert_eq!(r.status, 200, "{}", r.text());
    let work = wait_for("the issue's Work", || {
        works(&suite).first()?["id"].as_str().map(str::to_string)
    });

    // The push and the pull request on the scope's repository, as the Bitbucket
    // connection, from the pushed branch.
    let turn = wait_for("the first turn's calls", || {
        records(&rec)
            .into_iter()
            .filter_map(|r| r["mcp"].as_array().cloned())
            .next()
    });
    let branch = pushed_branch(&push_log);
    let head = origin.branch_head(REPO, &branch).unwrap();
    assert!(origin
        .pushes()
        .iter()
        .all(|p| p.user.as_deref() == Some("x-token-auth")));
    let opened = tool_answer(&turn, "tools/call bitbucket.open_pull_request");
    assert_eq!(opened["isError"], false, "{opened}");
    let posts = bb.requests_to("POST", &format!("/repositories/{REPO}/pullrequests"));
    assert_eq!(posts.len(), 1, "{posts:#?}");
    assert_eq!(posts[0].body["source"]["branch"]["name"], json!(branch));
    assert_eq!(posts[0].authorization, format!("Bearer {BB_TOKEN}"));

    // Linked: the pull request's key is the Work's, and the reply wait is on it.
    let pr_key = format!("bitbucket:{REPO}#7");
    wait_for("the pull request linked to the Work", || {
        let w = suite.call("store.work_get", json!({"id": work})).ok()?;
        w.to_string().contains(&pr_key).then_some(())
    });
    let wait = wait_for("the Work waiting for a reply", || {
        let w = suite.call("store.waits", json!({"work_id": work})).ok()?["waits"]
            .as_array()?
            .iter()
            .find(|w| w["state"] == "active" && w["owner"] == "bitbucket")?
            .clone();
        Some(w)
    });
    assert!(wait["keys"].to_string().contains(&pr_key), "{wait}");

    // A change request on the pull request wakes the same Work, which answers it.
    let mut change: Value = serde_json::from_slice(
        &std::fs::read(
            Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../extensions/bitbucket/tests/fixtures/pull-request-approved.json"),
        )
        .unwrap(),
    )
    .unwrap();
    change["repository"]["full_name"] = json!(REPO);
    change["pullrequest"]["id"] = json!(7);
    let body = serde_json::to_vec(&change).unwrap();
    let headers = vec![
        ("Content-Type", "application/json".to_string()),
        (
            "X-Event-Key",
            "pullrequest:changes_request_created".to_string(),
        ),
        (
            "X-Hub-Signature",
            oc_bitbucket::intake::sign(BB_SECRET.as_bytes(), &body),
        ),
        ("X-Request-UUID", "{jb-change-1}".to_string()),
    ];
    let r = oc_systest::post(suite.http, BB_PATH, &headers, &body).unwrap();
    assert_eq!(r.status, 200, "{}", r.text());
    let answered = wait_for("the turn the change request started", || {
        records(&rec)
            .into_iter()
            .filter_map(|r| r["mcp"].as_array().cloned())
            .nth(1)
    });
    let said = tool_answer(&answered, "tools/call bitbucket.comment");
    assert_eq!(said["isError"], false, "{said}");
    let comments = bb.requests_to(
        "POST",
        &format!("/repositories/{REPO}/pullrequests/7/comments"),
    );
    assert_eq!(comments.len(), 1, "{comments:#?}");
    assert_ne!(origin.branch_head(REPO, &branch).unwrap(), head);
    assert_eq!(
        works(&suite).len(),
        1,
        "one Work for the issue and its pull request"
    );
    assert!(bb.violations().is_empty(), "{:#?}", bb.violations());

    for d in [
        Daemon::Broker,
        Daemon::Storaged,
        Daemon::Schedulerd,
        Daemon::Ingressd,
        Daemon::Extrunner,
    ] {
        let log = suite.log(d);
        for s in [JIRA_TOKEN, JIRA_SECRET, BB_TOKEN, BB_SECRET] {
            assert!(!log.contains(s), "{d:?} logged a secret");
        }
    }
    assert_no_secret_under(
        &suite.dir,
        &secrets,
        &[JIRA_TOKEN, JIRA_SECRET, BB_TOKEN, BB_SECRET],
    );
}
