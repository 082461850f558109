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
//! Reconcile (`ext.reconcile` over the scripted Jira's search, changelog and
//! comments, every request through Prism): an assignment delivered by webhook and
//! then polled adds nothing; a missed assignment is found once; a plain edit (the
//! summary) adds nothing; a missed comment from a person mentioning the agent is
//! found once; their late webhook deliveries add nothing (an Event's identity is its
//! change's, whichever way it comes).
//!
//! Without node or tests/github-api's Prism the tests print SKIPPED and pass, unless
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
    // Its identity is the change's (issue 19435's changelog 76941), not the header's.
    assert_eq!(before[0]["delivery_id"], "issue/19435/changelog/76941");
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
    // The Event carries no text: rendering reads the comment from Jira.
    let mut stored = comment["comment"].clone();
    stored["created"] = json!("2026-12-07T10:00:00.000+00:00");
    stored["updated"] = json!("2026-12-07T10:00:00.000+00:00");
    jira.add_comment("19435", stored);
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

/// A whole scan through extrunner's `ext.reconcile` from no checkpoint: (items, added).
fn scan_all(suite: &Suite) -> (u64, u64) {
    let (mut items, mut added, mut cursor) = (0, 0, String::new());
    for _ in 0..100 {
        let page = suite
            .call(
                "ext.reconcile",
                json!({"name": "jira", "timeout_ms": 30_000,
                       "page": {"source": "jira/demo/tracker", "cursor": cursor, "max_items": 50}}),
            )
            .unwrap();
        items += page["items"].as_u64().unwrap();
        added += page["added"].as_u64().unwrap();
        if page["complete"] == true {
            return (items, added);
        }
        cursor = page["cursor"].as_str().unwrap().to_owned();
    }
    panic!("the scan did not complete in 100 pages");
}

#[test]
fn reconcile_finds_a_missed_change_once_and_a_late_delivery_adds_nothing() {
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
    packages.push(Package {
        name: "jira".into(),
        manifest: oc_jira::MANIFEST.into(),
        command: vec!["ext-jira".into()],
    });
    let suite = Suite::new(Path::new(BIN), "jira-reconcile", &packages).unwrap();
    suite.start_all().unwrap();
    let token_file = suite.dir.join("jira-api-token");
    std::fs::write(&token_file, format!("{API_TOKEN}\n")).unwrap();
    let secret_file = suite.dir.join("jira-webhook-secret");
    std::fs::write(&secret_file, format!("{WEBHOOK_SECRET}\n")).unwrap();
    let doc = json!({
        "connections": [{"name": "jc", "type": "jira",
                         "config": {"base_url": jira.url, "email": "agent@example.com"},
                         "secret_refs": {"api_token": format!("file:{}", token_file.display()),
                                         "webhook_secret": format!("file:{}", secret_file.display())}}],
        "scopes": [{
            "id": "demo",
            "entries": [{"type": "jira", "name": "tracker", "connection": "jc",
                         "config": {"projects": ["INDEV"], "agent_account_id": AGENT,
                                    "reconcile_interval_s": 0}}]
        }]
    });
    suite.apply_config(&doc, PATH).unwrap();

    // The assignment of INDEV-242 (changelog 76941) comes by webhook.
    let assigned = fixture("issue-updated-issue-assigned.json");
    let r = send(&suite, &assigned, WEBHOOK_SECRET, "d-assigned-1");
    assert_eq!(r.status, 200, "{}", r.text());
    let events = jira_events(&suite);
    assert_eq!(events.len(), 1, "{events:#?}");
    assert_eq!(events[0]["delivery_id"], "issue/19435/changelog/76941");

    // Jira then has: INDEV-242 assigned (delivered) and its summary edited (a plain
    // edit); INDEV-243 assigned to the agent (missed); a person's comment on INDEV-242
    // mentioning the agent (missed). Times are Jira's, within the last minutes.
    let doc: Value = serde_json::from_slice(&assigned).unwrap();
    let fields = &doc["issue"]["fields"];
    let at =
        |ago_s: i64| protocol::time::format_rfc3339_ms(protocol::time::now_ms() - ago_s * 1000);
    let edited = format!("{} (edited)", fields["summary"].as_str().unwrap());
    let assign = |id: &str, when: &str| {
        json!({"id": id, "created": when, "author": {"accountId": "5c07f55ba1b46046f530e0f3", "displayName": "jira_test"},
               "items": [{"field": "assignee", "fieldtype": "jira", "fieldId": "assignee",
                          "to": AGENT, "toString": "Agent"}]})
    };
    let issue = |id: &str, key: &str, summary: &str, histories: Vec<Value>| {
        json!({"id": id, "key": key, "fields": {
            "summary": summary, "status": {"name": fields["status"]["name"]},
            "assignee": {"accountId": AGENT}, "labels": [],
            "reporter": {"accountId": fields["reporter"]["accountId"], "displayName": fields["reporter"]["displayName"]},
            "created": at(3600), "updated": at(30)},
            "changelog": {"startAt": 0, "maxResults": histories.len(), "total": histories.len(), "histories": histories}})
    };
    let edit = json!({"id": "77000", "created": at(240), "author": {"accountId": "5c07f55ba1b46046f530e0f3"},
                      "items": [{"field": "summary", "fieldtype": "jira", "fieldId": "summary",
                                 "fromString": fields["summary"], "toString": edited}]});
    jira.set_issues(vec![
        issue(
            "19435",
            "INDEV-242",
            &edited,
            vec![assign("76941", &at(300)), edit],
        ),
        issue(
            "19436",
            "INDEV-243",
            fields["summary"].as_str().unwrap(),
            vec![assign("80001", &at(120))],
        ),
    ]);
    let mention = json!({"type": "doc", "version": 1, "content": [{"type": "paragraph", "content": [
        {"type": "mention", "attrs": {"id": AGENT, "text": "@Agent"}},
        {"type": "text", "text": " can you take this?"}]}]});
    let comment = json!({"id": "31050", "created": at(60), "updated": at(60),
                         "author": {"accountId": "5b10a2844c20165700ede21g", "displayName": "Ann Reviewer"},
                         "body": mention});
    jira.add_comment("19435", comment.clone());

    // One scan: the delivered assignment again (nothing added), the missed
    // assignment and the missed comment (added once); the edit is no item.
    assert_eq!(scan_all(&suite), (3, 2));
    let events = jira_events(&suite);
    let mut ids: Vec<&str> = events
        .iter()
        .filter_map(|e| e["delivery_id"].as_str())
        .collect();
    ids.sort_unstable();
    assert_eq!(
        ids,
        [
            "comment/31050",
            "issue/19435/changelog/76941",
            "issue/19436/changelog/80001"
        ],
        "{events:#?}"
    );
    let found = events
        .iter()
        .find(|e| e["delivery_id"] == "comment/31050")
        .unwrap();
    assert_eq!(found["type"], "jira.issue.comment_created");
    assert_eq!(
        found["payload"]["comment"]["mentions_agent"], true,
        "{found}"
    );
    // A second scan finds the same and adds nothing.
    assert_eq!(scan_all(&suite), (3, 0));

    // The missed changes' webhook deliveries, late: nothing new.
    let mut late = doc.clone();
    late["issue"]["id"] = json!("19436");
    late["issue"]["key"] = json!("INDEV-243");
    late["changelog"]["id"] = json!("80001");
    let body = serde_json::to_vec(&late).unwrap();
    let r = send(&suite, &body, WEBHOOK_SECRET, "d-late-1");
    assert_eq!(r.status, 200, "{}", r.text());
    let mut late_comment: Value = serde_json::from_slice(&fixture("comment-created.json")).unwrap();
    late_comment["issue"] = doc["issue"].clone();
    late_comment["issue"]["fields"]["summary"] = json!(edited);
    late_comment["comment"] = comment;
    let body = serde_json::to_vec(&late_comment).unwrap();
    let r = send(&suite, &body, WEBHOOK_SECRET, "d-late-2");
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(jira_events(&suite).len(), 3, "{:#?}", jira_events(&suite));

    let searches: Vec<_> = jira
        .requests()
        .into_iter()
        .filter(|r| r.target.starts_with("/rest/api/3/search?"))
        .collect();
    assert_eq!(searches.len(), 2, "one search a scan");
    assert!(
        searches[0].target.contains("expand=changelog"),
        "{searches:?}"
    );
    assert!(jira.violations().is_empty(), "{:#?}", jira.violations());
    for d in [Daemon::Ingressd, Daemon::Extrunner, Daemon::Storaged] {
        let log = suite.log(d);
        assert!(!log.contains(API_TOKEN), "{d:?} logged the API token");
        assert!(
            !log.contains(WEBHOOK_SECRET),
            "{d:?} logged the webhook secret"
        );
    }
}
