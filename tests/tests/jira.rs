#![allow(clippy::unwrap_used)]
//! The jira package end to end, with real daemons: a signed Jira Cloud webhook (the
//! `jira:issue_updated` payload of an issue assigned to the agent, from Atlassian's
//! documentation, extensions/jira/tests/fixtures) to ingressd starts a Work on a
//! claude-code binding granted `jira.comment` and `jira.transition`; the fake
//! `claude` (mode `calls`), through the real `open-conduit mcp`, comments on the
//! issue (twice with one request ID: posted once) and moves it to In Progress, every
//! request through Prism's validation proxy over Atlassian's published platform REST
//! v3 description in front of a scripted Jira (tests/src/jira.rs); the delivery
//! again (Jira's retry, same `X-Atlassian-Webhook-Identifier`) adds nothing; a bad
//! signature is 401 and nothing is kept. The agent then calls `jira.wait_reply`: the
//! Work waits, keyed by the issue; a person's comment (an ADF body with a list, a code
//! block and a mention) wakes it and the next turn's prompt carries the comment
//! rendered readably. The projector (`jira.status`, on schedulerd's clock) shows
//! the Work's state as one comment on the issue, edited in place (`PUT …/comment/
//! {id}`, valid against the description) as the state moves on. The secrets are in
//! no log.
//!
//! Without node or tests/github-api's Prism the test prints SKIPPED and passes, unless
//! OC_REQUIRE_PEERS=1.

mod common;
use common::*;

use oc_jira::signature::sign;
use oc_systest::jira::Jira;
use oc_systest::{Daemon, Package, Suite};
use serde_json::{json, Value};
use std::path::Path;

const API_TOKEN: &str = "jira-e2e-ApiTokenNeverLogged-0123456789";
const WEBHOOK_SECRET: &str = "jira-e2e-webhook-secret-never-logged";
const AGENT: &str = "5b912e21fa38ae2c896099ae";
const PATH: &str = "/jira/demo/tracker";
const CALLS: &str = r#"[
 {"operation": "jira.comment", "input": {"text": "On it.\n\n- reproduce\n- fix"}, "request_id": "fake-comment", "turn": "first"},
 {"operation": "jira.comment", "input": {"text": "On it.\n\n- reproduce\n- fix"}, "request_id": "fake-comment", "tag": " again", "turn": "first"},
 {"operation": "jira.transition", "input": {"to": "In Progress"}, "request_id": "fake-move", "turn": "first"},
 {"operation": "jira.wait_reply", "input": {"timeout_s": 3600}, "request_id": "fake-wait", "turn": "first"}
]"#;

fn fixture(name: &str) -> Vec<u8> {
    std::fs::read(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../extensions/jira/tests/fixtures")
            .join(name),
    )
    .unwrap()
}

/// POSTs `body` to the entry's path, signed under `secret`, with delivery ID `id`.
fn send(suite: &Suite, body: &[u8], secret: &str, id: &str) -> oc_systest::Response {
    let headers = vec![
        ("Content-Type", "application/json".to_string()),
        ("X-Hub-Signature", sign(secret.as_bytes(), body)),
        ("X-Atlassian-Webhook-Identifier", id.to_string()),
    ];
    oc_systest::post(suite.http, PATH, &headers, body).unwrap()
}

fn jira_events(suite: &Suite) -> Vec<Value> {
    suite
        .events()
        .unwrap()
        .into_iter()
        .filter(|e| e["type"].as_str().is_some_and(|t| t.starts_with("jira.")))
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
fn an_assigned_issue_starts_a_work_whose_agent_comments_and_moves_it() {
    let jira = match Jira::start() {
        Ok(j) => j,
        Err(why) => {
            assert!(
                !oc_systest::github::required(),
                "no Prism under OC_REQUIRE_PEERS=1: {why}"
            );
            eprintln!("SKIPPED: {why}");
            return;
        }
    };

    let mut packages = Suite::first_party();
    for (name, manifest, command) in [
        ("claude-code", oc_claude_code::MANIFEST, "ext-claude-code"),
        ("jira", oc_jira::MANIFEST, "ext-jira"),
    ] {
        packages.push(Package {
            name: name.into(),
            manifest: manifest.into(),
            command: vec![command.into()],
        });
    }
    let bin = Path::new(BIN);
    let suite = Suite::new(bin, "jira", &packages).unwrap();
    let claude = suite.dir.join("bin/claude");
    script(
        &claude,
        &format!("#!/bin/sh\nexec '{BIN}' fake-claude \"$@\"\n"),
    );
    with_toolbelt(&suite);
    suite.start_all().unwrap();

    let token_file = suite.dir.join("jira-api-token");
    std::fs::write(&token_file, format!("{API_TOKEN}\n")).unwrap();
    let secret_file = suite.dir.join("jira-webhook-secret");
    std::fs::write(&secret_file, format!("{WEBHOOK_SECRET}\n")).unwrap();
    let rec = suite.dir.join("claude.jsonl");
    std::fs::create_dir_all(suite.dir.join("work")).unwrap();
    let doc = json!({
        "connections": [{"name": "jc", "type": "jira",
                         "config": {"base_url": jira.url, "email": "agent@example.com"},
                         "secret_refs": {"api_token": format!("file:{}", token_file.display()),
                                         "webhook_secret": format!("file:{}", secret_file.display())}}],
        "scopes": [{
            "id": "demo",
            "entries": [{"type": "jira", "name": "tracker", "connection": "jc",
                         "config": {"projects": ["INDEV"], "agent_account_id": AGENT}}],
            "routes": [{"handler": "jira", "binding": "cc"}],
            "bindings": [{
                "name": "cc", "executor": "claude-code", "connection": "jc",
                "operations": ["jira.comment", "jira.transition", "jira.wait_reply"],
                "config": {"binary": claude, "dir": suite.dir.join("work"),
                           "env": {"FAKE_CLAUDE_MODE": "calls", "FAKE_CLAUDE_RECORD": rec,
                                   "FAKE_CLAUDE_CALLS": CALLS,
                                   "CLAUDE_CONFIG_DIR": suite.dir.join("claude-config")}}
            }]
        }]
    });
    suite.apply_config(&doc, PATH).unwrap();

    // A bad signature first: 401, nothing kept.
    let assigned = fixture("issue-updated-issue-assigned.json");
    let r = send(&suite, &assigned, "not the webhook secret", "d-forged");
    assert_eq!(r.status, 401, "{}", r.text());
    assert!(jira_events(&suite).is_empty());
    assert!(works(&suite).is_empty());

    // The assignment, signed.
    let r = send(&suite, &assigned, WEBHOOK_SECRET, "d-assigned-1");
    assert_eq!(r.status, 200, "{}", r.text());
    let work = wait_for("the issue's Work", || {
        works(&suite).first()?["id"].as_str().map(str::to_string)
    });
    let row = suite.call("store.work_get", json!({"id": work})).unwrap()["work"].clone();
    assert_eq!(row["display"]["title"], "Тестовая задача", "{row}");
    assert_eq!(row["display"]["ref"], "INDEV-242", "{row}");

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
    let comment = result("tools/call jira.comment");
    assert_eq!(comment["isError"], false, "{comment}");
    let again = result("tools/call jira.comment again");
    assert_eq!(again["structuredContent"], comment["structuredContent"]);
    let moved = result("tools/call jira.transition");
    assert_eq!(moved["isError"], false, "{moved}");
    assert!(moved.to_string().contains("Start Progress"), "{moved}");

    let requests = jira.requests();
    let posts: Vec<_> = requests
        .iter()
        .filter(|r| r.method == "POST" && r.target.ends_with("/issue/INDEV-242/comment"))
        .filter(|r| !r.text().starts_with("Open Conduit"))
        .collect();
    assert_eq!(
        posts.len(),
        1,
        "one comment for one request ID: {requests:#?}"
    );
    assert_eq!(posts[0].body["body"]["type"], "doc", "{:?}", posts[0]);
    let moves: Vec<_> = requests
        .iter()
        .filter(|r| r.method == "POST" && r.target.ends_with("/issue/INDEV-242/transitions"))
        .collect();
    assert_eq!(moves.len(), 1, "{requests:#?}");
    assert_eq!(moves[0].body["transition"]["id"], "11", "{:?}", moves[0]);
    assert!(jira.violations().is_empty(), "{:#?}", jira.violations());

    // The delivery again (Jira's retry keeps its identifier): nothing new.
    let before = jira_events(&suite);
    assert_eq!(before.len(), 1, "{before:#?}");
    assert_eq!(before[0]["delivery_id"], "d-assigned-1");
    let r = send(&suite, &assigned, WEBHOOK_SECRET, "d-assigned-1");
    assert_eq!(r.status, 200, "{}", r.text());
    let r = send(&suite, &assigned, "not the webhook secret", "d-forged-2");
    assert_eq!(r.status, 401, "{}", r.text());
    let events = jira_events(&suite);
    assert_eq!(events.len(), 1, "{events:#?}");
    assert_eq!(works(&suite).len(), 1);

    // The agent waits for a comment: the Work waits, keyed by the issue.
    let waiting = wait_for("the Work waiting for a comment", || {
        let w = suite.call("store.waits", json!({"work_id": work})).ok()?["waits"]
            .as_array()?
            .iter()
            .find(|w| w["state"] == "active" && w["owner"] == "jira")?
            .clone();
        let state = suite.call("store.work_get", json!({"id": work})).ok()?["work"]["state"]
            .as_str()?
            .to_string();
        (state == "waiting").then_some(w)
    });
    assert_eq!(waiting["keys"], json!(["jira:INDEV-242"]), "{waiting}");
    assert_eq!(
        waiting["description"], "a comment on the Work's Jira issue",
        "{waiting}"
    );

    // The projector shows the state on the issue: one comment, posted once.
    let status_posts = || {
        jira.requests()
            .into_iter()
            .filter(|r| r.method == "POST" && r.text().starts_with("Open Conduit"))
            .collect::<Vec<_>>()
    };
    let edits = || {
        jira.requests()
            .into_iter()
            .filter(|r| r.method == "PUT")
            .collect::<Vec<_>>()
    };
    let shows = |state: &str| {
        let wanted = format!("Open Conduit · Work {work} · {state}");
        status_posts()
            .into_iter()
            .chain(edits())
            .last()
            .is_some_and(|r| r.text() == wanted)
    };
    wait_for("the status comment showing waiting", || {
        shows("waiting").then_some(())
    });

    // A person comments (Jira Cloud's ADF body): the Wait wakes and the next turn's
    // prompt carries the comment, readable.
    let assigned_doc: Value = serde_json::from_slice(&assigned).unwrap();
    let mut comment: Value = serde_json::from_slice(&fixture("comment-created.json")).unwrap();
    comment["issue"] = assigned_doc["issue"].clone();
    comment["comment"]["author"]["accountId"] = json!("5b10a2844c20165700ede21g");
    comment["comment"]["author"]["displayName"] = json!("Ann Reviewer");
    comment["comment"]["body"] = json!({"type": "doc", "version": 1, "content": [
        {"type": "paragraph", "content": [
            {"type": "mention", "attrs": {"id": AGENT, "text": "@Agent"}},
            {"type": "text", "text": " two more things:"}]},
        {"type": "bulletList", "content": [
            {"type": "listItem", "content": [{"type": "paragraph", "content": [
                {"type": "text", "text": "keep the old URL working"}]}]},
            {"type": "listItem", "content": [{"type": "paragraph", "content": [
                {"type": "text", "text": "add a test"}]}]}]},
        {"type": "codeBlock", "attrs": {"language": "sh"}, "content": [
            {"type": "text", "text": "curl -I https://example.com/old"}]}]});
    let body = serde_json::to_vec(&comment).unwrap();
    let r = send(&suite, &body, WEBHOOK_SECRET, "d-comment-1");
    assert_eq!(r.status, 200, "{}", r.text());
    let resumed = wait_for("the turn the comment started", || {
        records(&rec)
            .into_iter()
            .filter_map(|r| r["prompt"].as_str().map(str::to_owned))
            .nth(1)
    });
    for part in [
        "@Agent two more things:",
        "- keep the old URL working\n- add a test",
        "```\ncurl -I https://example.com/old\n```",
        "Ann Reviewer",
    ] {
        assert!(resumed.contains(part), "no {part:?} in {resumed}");
    }
    assert!(!resumed.contains("\"type\""), "ADF left raw: {resumed}");
    let waits = suite.call("store.waits", json!({"work_id": work})).unwrap();
    assert!(
        waits["waits"]
            .as_array()
            .unwrap()
            .iter()
            .any(|w| w["state"] == "woken"),
        "the comment woke the Wait: {waits}"
    );
    assert_eq!(
        works(&suite).len(),
        1,
        "the comment made no Work of its own"
    );

    // The projector edits its one comment in place as the state moves on.
    let last = wait_for("the status comment edited to the Work's state", || {
        let state = suite.call("store.work_get", json!({"id": work})).ok()?["work"]["state"]
            .as_str()?
            .to_string();
        (state != "waiting" && shows(&state)).then_some(state)
    });
    let posted = status_posts();
    assert_eq!(posted.len(), 1, "one status comment: {posted:#?}");
    assert_eq!(posted[0].target, "/rest/api/3/issue/INDEV-242/comment");
    let edited = edits();
    assert!(!edited.is_empty(), "edited to {last}");
    for e in &edited {
        assert_eq!(
            e.target, "/rest/api/3/issue/INDEV-242/comment/10001",
            "{e:?}"
        );
    }
    assert!(jira.violations().is_empty(), "{:#?}", jira.violations());

    // No daemon's log holds the API token or the webhook secret.
    for d in [
        Daemon::Broker,
        Daemon::Storaged,
        Daemon::Schedulerd,
        Daemon::Ingressd,
        Daemon::Extrunner,
    ] {
        let log = suite.log(d);
        assert!(!log.contains(API_TOKEN), "{d:?} logged the API token");
        assert!(
            !log.contains(WEBHOOK_SECRET),
            "{d:?} logged the webhook secret"
        );
    }
}
