#![allow(clippy::unwrap_used)]
//! The bitbucket package end to end, with real daemons: a signed Bitbucket Cloud
//! webhook (the `pullrequest:comment_created` payload of Atlassian's documentation,
//! extensions/bitbucket/tests/fixtures, its text mentioning the agent) to ingressd
//! starts a Work on a claude-code binding granted the package's operations, displayed
//! with the pull request's title, `workspace/repo#id` and author. The fake `claude`
//! (mode `calls`), through the real `open-conduit mcp`, reads the pull request and
//! comments on it (twice with one request ID: posted once), every request through
//! Prism's validation proxy over Atlassian's published API 2.0 description in front
//! of the scripted Bitbucket (tests/src/bitbucket.rs); the delivery again (the same
//! comment, identified by itself) adds nothing; a bad signature is 401 and nothing
//! is kept. The agent then calls `bitbucket.wait_reply`: the Work waits, keyed by
//! the pull request; a person's comment wakes it and the next turn's prompt carries
//! it. The pull request's merge (`pullrequest:fulfilled`) reaches the same Work and completes
//! it. The secrets are in no log.
//!
//! Without node or tests/github-api's Prism the test prints SKIPPED and passes, unless
//! OC_REQUIRE_PEERS=1.

mod common;
use common::*;

use oc_bitbucket::intake::sign;
use oc_systest::bitbucket::Bitbucket;
use oc_systest::{Daemon, Package, Suite};
use serde_json::{json, Value};
use std::path::Path;

const TOKEN: &str = "bb-e2e-AccessTokenNeverLogged-0123456789";
const WEBHOOK_SECRET: &str = "bb-e2e-webhook-secret-never-logged";
const PATH: &str = "/bitbucket/demo/code";
const KEY: &str = "bitbucket:team_name/repo_name#1";
const CALLS: &str = r#"[
 {"operation": "bitbucket.read_pull_request", "input": {}, "request_id": "fake-read", "turn": "first"},
 {"operation": "bitbucket.comment", "input": {"text": "On it: the redirect loops."}, "request_id": "fake-comment", "turn": "first"},
 {"operation": "bitbucket.comment", "input": {"text": "On it: the redirect loops."}, "request_id": "fake-comment", "tag": " again", "turn": "first"},
 {"operation": "bitbucket.wait_reply", "input": {"timeout_s": 3600}, "request_id": "fake-wait", "turn": "first"}
]"#;

fn fixture(name: &str) -> Value {
    let bytes = std::fs::read(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../extensions/bitbucket/tests/fixtures")
            .join(name),
    )
    .unwrap();
    serde_json::from_slice(&bytes).unwrap()
}

/// POSTs `body` to the entry's path as `event`, signed under `secret`, with `uuid`.
fn send(suite: &Suite, event: &str, body: &[u8], secret: &str, uuid: &str) -> oc_systest::Response {
    let headers = vec![
        ("Content-Type", "application/json".to_string()),
        ("X-Event-Key", event.to_string()),
        ("X-Hub-Signature", sign(secret.as_bytes(), body)),
        ("X-Request-UUID", uuid.to_string()),
    ];
    oc_systest::post(suite.http, PATH, &headers, body).unwrap()
}

fn bitbucket_events(suite: &Suite) -> Vec<Value> {
    suite
        .events()
        .unwrap()
        .into_iter()
        .filter(|e| {
            e["type"]
                .as_str()
                .is_some_and(|t| t.starts_with("bitbucket."))
        })
        .collect()
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
fn a_comment_mentioning_the_agent_starts_a_work_whose_agent_comments_once() {
    let bb = match Bitbucket::start() {
        Ok(b) => b,
        Err(why) => {
            assert!(
                !oc_systest::bitbucket::required(),
                "no Prism under OC_REQUIRE_PEERS=1: {why}"
            );
            eprintln!("SKIPPED: {why}");
            return;
        }
    };

    let mut packages = Suite::first_party();
    for (name, manifest, command) in [
        ("claude-code", oc_claude_code::MANIFEST, "ext-claude-code"),
        ("bitbucket", oc_bitbucket::MANIFEST, "ext-bitbucket"),
    ] {
        packages.push(Package {
            name: name.into(),
            manifest: manifest.into(),
            command: vec![command.into()],
        });
    }
    let suite = Suite::new(Path::new(BIN), "bitbucket", &packages).unwrap();
    let claude = suite.dir.join("bin/claude");
    script(
        &claude,
        &format!("#!/bin/sh\nexec '{BIN}' fake-claude \"$@\"\n"),
    );
    with_toolbelt(&suite);
    suite.start_all().unwrap();

    let token_file = suite.dir.join("bitbucket-token");
    std::fs::write(&token_file, format!("{TOKEN}\n")).unwrap();
    let secret_file = suite.dir.join("bitbucket-webhook-secret");
    std::fs::write(&secret_file, format!("{WEBHOOK_SECRET}\n")).unwrap();
    let rec = suite.dir.join("claude.jsonl");
    std::fs::create_dir_all(suite.dir.join("work")).unwrap();
    let doc = json!({
        "connections": [{"name": "bb", "type": "bitbucket",
                         "config": {"api_url": bb.url},
                         "secret_refs": {"token": format!("file:{}", token_file.display()),
                                         "webhook_secret": format!("file:{}", secret_file.display())}}],
        "scopes": [{
            "id": "demo",
            "entries": [{"type": "bitbucket", "name": "code", "connection": "bb",
                         "config": {"repositories": ["team_name/repo_name"], "mention": "@conduit",
                                    "agent_account_id": "557058:agent"}}],
            "routes": [{"handler": "bitbucket", "binding": "cc"}],
            "bindings": [{
                "name": "cc", "executor": "claude-code", "connection": "bb",
                "operations": ["bitbucket.read_pull_request", "bitbucket.comment", "bitbucket.wait_reply"],
                "config": {"binary": claude, "dir": suite.dir.join("work"),
                           "env": {"FAKE_CLAUDE_MODE": "calls", "FAKE_CLAUDE_RECORD": rec,
                                   "FAKE_CLAUDE_CALLS": CALLS,
                                   "CLAUDE_CONFIG_DIR": suite.dir.join("claude-config")}}
            }]
        }]
    });
    suite.apply_config(&doc, PATH).unwrap();

    let mut comment = fixture("pull-request-comment-created.json");
    comment["comment"]["content"]["raw"] = json!("@conduit the login page loops, can you fix it?");
    let body = serde_json::to_vec(&comment).unwrap();
    const EVENT: &str = "pullrequest:comment_created";

    // A bad signature first: 401, nothing kept.
    let r = send(&suite, EVENT, &body, "not the webhook secret", "u-forged");
    assert_eq!(r.status, 401, "{}", r.text());
    assert!(bitbucket_events(&suite).is_empty());
    assert!(works(&suite).is_empty());

    // The comment, signed.
    let r = send(&suite, EVENT, &body, WEBHOOK_SECRET, "u-comment-1");
    assert_eq!(r.status, 200, "{}", r.text());
    let work = wait_for("the pull request's Work", || {
        works(&suite).first()?["id"].as_str().map(str::to_string)
    });
    let row = suite.call("store.work_get", json!({"id": work})).unwrap()["work"].clone();
    assert_eq!(row["display"]["title"], "Title of pull request", "{row}");
    assert_eq!(row["display"]["ref"], "team_name/repo_name#1", "{row}");
    assert_eq!(row["display"]["requester"], "Emma", "{row}");

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
    let read = result("tools/call bitbucket.read_pull_request");
    assert_eq!(read["isError"], false, "{read}");
    assert!(read.to_string().contains("logged_in"), "the diff: {read}");
    let said = result("tools/call bitbucket.comment");
    assert_eq!(said["isError"], false, "{said}");
    let again = result("tools/call bitbucket.comment again");
    assert_eq!(again["structuredContent"], said["structuredContent"]);
    let posts = bb.requests_to(
        "POST",
        "/repositories/team_name/repo_name/pullrequests/1/comments",
    );
    assert_eq!(posts.len(), 1, "one comment for one request ID: {posts:#?}");
    assert_eq!(
        posts[0].body["content"]["raw"],
        "On it: the redirect loops."
    );
    assert!(bb
        .requests()
        .iter()
        .all(|r| r.authorization == format!("Bearer {TOKEN}")));
    assert!(bb.violations().is_empty(), "{:#?}", bb.violations());

    // The delivery again (Bitbucket's redelivery names the same comment, its
    // identity since issue 44's reconcile): nothing new.
    let r = send(&suite, EVENT, &body, WEBHOOK_SECRET, "u-comment-1");
    assert_eq!(r.status, 200, "{}", r.text());
    let r = send(&suite, EVENT, &body, "not the webhook secret", "u-forged-2");
    assert_eq!(r.status, 401, "{}", r.text());
    let events = bitbucket_events(&suite);
    assert_eq!(events.len(), 1, "{events:#?}");
    assert_eq!(
        events[0]["delivery_id"],
        "pullrequest/team_name/repo_name/1/comment/17"
    );
    assert_eq!(works(&suite).len(), 1);

    // The agent waits for a comment: the Work waits, keyed by the pull request.
    let waiting = wait_for("the Work waiting for a comment", || {
        let w = suite.call("store.waits", json!({"work_id": work})).ok()?["waits"]
            .as_array()?
            .iter()
            .find(|w| w["state"] == "active" && w["owner"] == "bitbucket")?
            .clone();
        let state = suite.call("store.work_get", json!({"id": work})).ok()?["work"]["state"]
            .as_str()?
            .to_string();
        (state == "waiting").then_some(w)
    });
    assert_eq!(waiting["keys"], json!([KEY]), "{waiting}");

    // A person's comment (no mention needed: it follows the open Work) wakes it,
    // and the next turn's prompt carries it.
    let mut reply = fixture("pull-request-comment-created.json");
    reply["comment"]["id"] = json!(18);
    reply["comment"]["content"]["raw"] = json!("Also keep the old URL working.");
    let body = serde_json::to_vec(&reply).unwrap();
    let r = send(&suite, EVENT, &body, WEBHOOK_SECRET, "u-comment-2");
    assert_eq!(r.status, 200, "{}", r.text());
    let resumed = wait_for("the turn the comment started", || {
        records(&rec)
            .into_iter()
            .filter_map(|r| r["prompt"].as_str().map(str::to_owned))
            .nth(1)
    });
    assert!(
        resumed.contains("Also keep the old URL working."),
        "{resumed}"
    );
    assert!(
        resumed.contains("Comment by Emma on path/to/file line 10"),
        "{resumed}"
    );
    assert_eq!(works(&suite).len(), 1, "the reply made no Work of its own");

    // The merge reaches the same Work and completes it.
    let merged = serde_json::to_vec(&fixture("pull-request-merged.json")).unwrap();
    let r = send(
        &suite,
        "pullrequest:fulfilled",
        &merged,
        WEBHOOK_SECRET,
        "u-merged",
    );
    assert_eq!(r.status, 200, "{}", r.text());
    wait_for("the merge in the Work's Events", || {
        let events = suite
            .call("store.work_events", json!({"work_id": work, "limit": 100}))
            .ok()?;
        events["events"]
            .as_array()?
            .iter()
            .any(|e| e["type"] == "bitbucket.pullrequest.fulfilled")
            .then_some(())
    });
    assert_eq!(works(&suite).len(), 1);
    wait_for("the merge to complete the Work", || {
        works(&suite)
            .iter()
            .any(|w| w["id"] == json!(work) && w["state"] == "completed")
            .then_some(())
    });

    // No daemon's log holds the token or the webhook secret.
    for d in [
        Daemon::Broker,
        Daemon::Storaged,
        Daemon::Schedulerd,
        Daemon::Ingressd,
        Daemon::Extrunner,
    ] {
        let log = suite.log(d);
        assert!(!log.contains(TOKEN), "{d:?} logged the token");
        assert!(
            !log.contains(WEBHOOK_SECRET),
            "{d:?} logged the webhook secret"
        );
    }
}
