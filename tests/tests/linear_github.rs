#![allow(clippy::unwrap_used)]
//! "Fix LIN-1778" ends in a pull request (issue 43), with real daemons: a signed
//! Linear webhook assigning LIN-1778 to the agent's user starts a Work on a
//! claude-code binding whose `connection` is the Linear one and whose resource is a
//! `git` workspace of a repository served by the real `git http-backend` behind
//! `x-access-token` basic auth ([`GitHttp`]), with the `github` connection among the
//! binding's `connections` (and a `github` entry of the scope receiving the
//! repository). The binding is granted `github.open_pull_request` and `linear.link`.
//!
//! The agent (the fake `claude`, behind a wrapper that first commits in its workspace
//! and runs `git push origin HEAD`, which gets its credential from the run's
//! credential helper over the toolbelt) opens the pull request through the toolbelt
//! (GitHub is Prism over GitHub's OpenAPI description behind the validating
//! stand-in: one valid `POST /repos/{o}/{r}/pulls`, naming no repository: the scope's
//! one) and links the pull request's URL on the issue (`linear.link`: one
//! `attachmentLinkURL` with that URL, valid against Linear's schema). A retry of
//! either with its request ID acts once. No secret is in a log.
//!
//! Without node, Prism's or graphql-js's packages, or git, it prints SKIPPED and
//! passes, unless OC_REQUIRE_PEERS=1.

mod common;
use common::*;

#[path = "../../extensions/linear/tests/standin/mod.rs"]
mod standin;

use oc_systest::githttp::GitHttp;
use oc_systest::github::{prism_or_skip, Reply as GhReply, Request as GhRequest, StandIn};
use oc_systest::{Daemon, Package, Suite};
use serde_json::{json, Value};
use std::path::Path;

const API_KEY: &str = "lin_api_LinGh_SecretKeyNeverLogged_0123456789";
const WEBHOOK_SECRET: &str = "lin_wh_lingh-webhook-secret-never-logged";
const TOKEN: &str = "ghp_linGhTokenNeverInTheRun0123456789abcd";
const PATH: &str = "/linear/demo/eng";
const AGENT: &str = "d1e2f3a4-1111-4222-8333-444455556666";
const REPO: &str = "Codertocat/Hello-World";
const PR_URL: &str = "https://github.com/Codertocat/Hello-World/pull/2";
const HEAD_SHA: &str = "ec26c3e57ca3a959ca5aad62de7213c562f8c821";

/// The agent's calls: the pull request from the workspace's branch (no repository:
/// the scope's github entry's), its URL linked on the issue, each twice with one
/// request ID.
fn calls() -> String {
    json!([
        {"operation": "github.open_pull_request",
         "input": {"head": "{branch}", "base": "main", "title": "Fix LIN-1778",
                   "body": "Fixes LIN-1778"},
         "request_id": "fix-pr", "turn": "first"},
        {"operation": "github.open_pull_request",
         "input": {"head": "{branch}", "base": "main", "title": "Fix LIN-1778",
                   "body": "Fixes LIN-1778"},
         "request_id": "fix-pr", "tag": " again", "turn": "first"},
        {"operation": "linear.link", "input": {"url": PR_URL, "title": "Fix LIN-1778 (#2)"},
         "request_id": "fix-link", "turn": "first"},
        {"operation": "linear.link", "input": {"url": PR_URL, "title": "Fix LIN-1778 (#2)"},
         "request_id": "fix-link", "tag": " again", "turn": "first"}
    ])
    .to_string()
}

fn fixture() -> Value {
    let raw = std::fs::read(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../extensions/linear/tests/fixtures/issue-assigned.json"),
    )
    .unwrap();
    serde_json::from_slice(&raw).unwrap()
}

/// POSTs the assignment, signed as Linear signs it.
fn send(suite: &Suite, body: &Value) -> oc_systest::Response {
    let mut body = body.clone();
    body["webhookTimestamp"] = json!(protocol::time::now_ms());
    let bytes = serde_json::to_vec(&body).unwrap();
    let headers = vec![
        ("Content-Type", "application/json".to_string()),
        (
            "Linear-Delivery",
            "3c1d2e4f-1111-4222-8333-444455556666".into(),
        ),
        ("Linear-Event", "Issue".into()),
        (
            "Linear-Signature",
            sdk::tracker::hmac_sha256_hex(WEBHOOK_SECRET.as_bytes(), &bytes),
        ),
    ];
    oc_systest::post(suite.http, PATH, &headers, &bytes).unwrap()
}

/// What the stand-in answers itself once Prism found the request fits: the agent's
/// pull request (#2). The rest is Prism's.
fn github_answer(r: &GhRequest) -> Option<GhReply> {
    let path = r.path().to_ascii_lowercase();
    if r.method == "POST" && path == "/repos/codertocat/hello-world/pulls" {
        let head = r.json()["head"].as_str().unwrap_or("oc/x").to_owned();
        return Some(GhReply::json(
            201,
            &json!({"number": 2, "id": 1002, "node_id": "PR_2", "title": "Fix LIN-1778",
                    "state": "open", "html_url": PR_URL,
                    "url": "https://api.github.com/repos/Codertocat/Hello-World/pulls/2",
                    "user": {"login": "oc-bot", "id": 7}, "body": "Fixes LIN-1778",
                    "labels": [], "draft": false, "merged": false,
                    "head": {"ref": head, "sha": HEAD_SHA},
                    "base": {"ref": "main", "sha": HEAD_SHA},
                    "created_at": "2026-12-03T10:00:00Z", "updated_at": "2026-12-03T10:00:00Z"}),
        ));
    }
    None
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
fn a_linear_issues_work_with_a_github_workspace_ends_in_a_pull_request_linked_from_the_issue() {
    if !common::repo::have_git() {
        return;
    }
    let Some(validator) = standin::Validator::start() else {
        return;
    };
    let Some(prism) = prism_or_skip() else {
        return;
    };
    let origin = match GitHttp::start() {
        Ok(o) => o,
        Err(e) => {
            assert!(
                !oc_systest::github::required(),
                "no git origin under OC_REQUIRE_PEERS=1: {e}"
            );
            println!("SKIPPED: the git origin cannot start: {e}");
            return;
        }
    };
    origin.create_repo(REPO, true);
    origin.allow(TOKEN, &[REPO]);
    let github = StandIn::start(&prism, github_answer).unwrap();
    let (linear_url, seen) = standin::stand_in(validator);

    let mut packages = Suite::first_party();
    for (name, manifest, command) in [
        ("claude-code", oc_claude_code::MANIFEST, "ext-claude-code"),
        ("linear", oc_linear::MANIFEST, "ext-linear"),
    ] {
        packages.push(Package {
            name: name.into(),
            manifest: manifest.into(),
            command: vec![command.into()],
        });
    }
    let suite = Suite::new(Path::new(BIN), "linear-github", &packages).unwrap();
    // The agent: commit and push in its workspace (once), then the fake CLI.
    let push_log = suite.dir.join("push.log");
    let claude = suite.dir.join("bin/claude");
    script(
        &claude,
        &format!(
            "#!/bin/sh\n\
             if [ ! -e FIX.md ]; then\n\
             {{ echo fixed > FIX.md && git add FIX.md && \
             git -c user.name=bot -c user.email=bot@example.com commit -q -m 'Fix LIN-1778' && \
             git push origin HEAD; echo PUSH_EXIT=$?; \
             echo BRANCH=$(git rev-parse --abbrev-ref HEAD); }} >> '{}' 2>&1\n\
             fi\n\
             exec '{BIN}' fake-claude \"$@\"\n",
            push_log.display()
        ),
    );
    with_toolbelt(&suite);
    suite.start_all().unwrap();

    let secrets = suite.dir.join("secrets");
    std::fs::create_dir_all(&secrets).unwrap();
    let file = |n: &str, v: &str| {
        let p = secrets.join(n);
        std::fs::write(&p, v).unwrap();
        format!("file:{}", p.display())
    };
    let rec = suite.dir.join("claude.jsonl");
    let doc = json!({
        "connections": [
            {"name": "lin", "type": "linear", "config": {"api_url": linear_url},
             "secret_refs": {"api_key": file("linear-api-key", API_KEY),
                             "webhook_secret": file("linear-webhook-secret", WEBHOOK_SECRET)}},
            {"name": "gh", "type": "github",
             "config": {"api_url": github.url, "git_url": origin.url()},
             "secret_refs": {"token": file("gh-token", TOKEN),
                             "webhook_secret": file("gh-secret", GH_SECRET)}}
        ],
        "scopes": [{
            "id": "demo",
            "entries": [
                {"type": "linear", "name": "eng", "connection": "lin",
                 "config": {"teams": ["LIN"], "agent_user": AGENT, "reconcile_interval_s": 0}},
                {"type": "github", "name": "repo", "connection": "gh",
                 "config": {"repository": REPO, "reconcile_interval_s": 0}}
            ],
            "routes": [{"handler": "linear", "binding": "cc"}],
            "bindings": [{
                "name": "cc", "executor": "claude-code", "connection": "lin",
                "connections": ["gh"],
                "operations": ["github.open_pull_request", "linear.link"],
                "resource": {"type": "git", "config": {
                    "repository": origin.repo_url(REPO), "connection": "gh",
                    "min_free_mb": 1}},
                "config": {"binary": claude,
                           "env": {"FAKE_CLAUDE_MODE": "calls", "FAKE_CLAUDE_RECORD": rec,
                                   "FAKE_CLAUDE_CALLS": calls(),
                                   "FAKE_CLAUDE_STATE": "review",
                                   "CLAUDE_CONFIG_DIR": suite.dir.join("claude-config")}}
            }]
        }]
    });
    suite.apply_config(&doc, PATH).unwrap();

    let r = send(&suite, &fixture());
    assert_eq!(r.status, 200, "{}", r.text());
    let work = wait_for("the issue's Work", || {
        works(&suite).first()?["id"].as_str().map(str::to_string)
    });
    let row = suite.call("store.work_get", json!({"id": work})).unwrap()["work"].clone();
    assert_eq!(row["display"]["ref"], "LIN-1778", "{row}");

    // The agent's calls, through the real MCP server.
    let mcp = wait_for("the agent's calls", || {
        records(&rec)
            .into_iter()
            .filter_map(|r| r["mcp"].as_array().cloned())
            .next()
    });
    let result = |m: &str| {
        mcp.iter()
            .find(|x| x["method"] == m)
            .unwrap_or_else(|| panic!("no {m} in {mcp:#?}"))["answer"]["result"]
            .clone()
    };
    let pushed = std::fs::read_to_string(&push_log).unwrap_or_default();
    assert!(pushed.contains("PUSH_EXIT=0"), "the push failed: {pushed}");
    let branch = pushed
        .lines()
        .rev()
        .find_map(|l| l.trim().strip_prefix("BRANCH="))
        .unwrap()
        .to_owned();
    let pr = result("tools/call github.open_pull_request");
    assert_eq!(pr["isError"], false, "{pr}");
    assert!(pr.to_string().contains(PR_URL), "{pr}");
    let again = result("tools/call github.open_pull_request again");
    assert_eq!(again["structuredContent"], pr["structuredContent"]);
    let linked = result("tools/call linear.link");
    assert_eq!(linked["isError"], false, "{linked}");
    let again = result("tools/call linear.link again");
    assert_eq!(again["structuredContent"], linked["structuredContent"]);

    // The push reached the authenticated origin with the run's credential.
    let head = origin.branch_head(REPO, &branch);
    assert!(head.is_some(), "{branch} is not at the origin");
    let pushes = origin.pushes();
    assert!(
        pushes
            .iter()
            .any(|p| p.status == 200 && p.token.as_deref() == Some(TOKEN)),
        "{pushes:#?}"
    );
    // One pull request, valid for GitHub's description, its head the pushed branch.
    let prs: Vec<Value> = github
        .exchanges()
        .into_iter()
        .filter(|x| x.request.method == "POST" && x.request.path().ends_with("/pulls"))
        .map(|x| x.request.json())
        .collect();
    assert_eq!(prs.len(), 1, "{prs:#?}");
    assert_eq!(prs[0]["head"], branch.as_str());
    assert_eq!(prs[0]["base"], "main");
    assert!(github.violations().is_empty(), "{:#?}", github.violations());
    // One link on the issue, with the pull request's URL, valid for Linear's schema.
    {
        let seen = seen.lock().unwrap();
        let links: Vec<&Value> = seen
            .requests
            .iter()
            .filter(|r| r.0 == "OcLinkUrl")
            .map(|r| &r.1)
            .collect();
        assert_eq!(links.len(), 1, "{links:#?}");
        assert_eq!(links[0]["url"], PR_URL);
        assert_eq!(links[0]["issueId"], "LIN-1778");
        for (op, _, auth, errors) in &seen.requests {
            assert!(errors.is_empty(), "{op} refused by the schema: {errors:?}");
            assert_eq!(auth, API_KEY, "{op}");
        }
    }
    for d in [Daemon::Extrunner, Daemon::Schedulerd, Daemon::Ingressd] {
        let log = suite.log(d);
        for secret in [API_KEY, WEBHOOK_SECRET, TOKEN] {
            assert!(!log.contains(secret), "{d:?}'s log has a secret");
        }
    }
}
