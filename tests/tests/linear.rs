#![allow(clippy::unwrap_used)]
//! The linear package end to end, with real daemons: a signed Linear webhook (an
//! `Issue` `update` assigning LIN-1778 to the agent's user, the package's fixture)
//! to ingressd starts a Work on a claude-code binding granted `linear.comment` and
//! `linear.move`; the fake `claude` (mode `calls`), through the real
//! `open-conduit mcp`, comments on the issue (twice with one request ID: one comment)
//! and moves it, every GraphQL document reaching the stand-in of Linear's API valid
//! against Linear's published schema (graphql-js, tests/linear-api); the delivery
//! again (a redelivery) adds nothing; a bad signature and a stale
//! `webhookTimestamp` are 401 and nothing is kept; the agent's turn ends in
//! `linear.wait_reply`, the Work waits on the issue's key, and a person's comment on
//! the issue wakes it with the next turn's prompt carrying the comment; reconcile
//! (`ext.reconcile`, the stand-in's polled issues, the query valid against the
//! schema) adds nothing for the change already delivered, finds the missed one once
//! and ignores an edit; the projector (`linear.status`) posts one comment on the
//! issue showing the Work's state and edits it in place (`commentUpdate`) as the
//! state changes; the key and the webhook secret are in no log.
//!
//! A second test keeps the entry's webhook as configured (`manage_webhook`, the
//! `linear.webhooks` task, doctor's `webhooks` check) and reconciles a missed
//! comment.
//!
//! Without node or tests/linear-api's node_modules the test prints SKIPPED and
//! passes, unless OC_REQUIRE_PEERS=1.

mod common;
use common::*;

#[path = "../../extensions/linear/tests/standin/mod.rs"]
mod standin;

use oc_systest::{Daemon, Package, Suite};
use serde_json::{json, Value};
use std::path::Path;

const API_KEY: &str = "lin_api_E2E_SecretKeyNeverLogged_0123456789";
const WEBHOOK_SECRET: &str = "lin_wh_e2e-webhook-secret-never-logged";
const PATH: &str = "/linear/demo/eng";
const AGENT: &str = "d1e2f3a4-1111-4222-8333-444455556666";
const CALLS: &str = r#"[
 {"operation": "linear.comment", "input": {"body": "On it."}, "request_id": "fake-comment", "turn": "first"},
 {"operation": "linear.comment", "input": {"body": "On it."}, "request_id": "fake-comment", "tag": " again", "turn": "first"},
 {"operation": "linear.move", "input": {"state": "In Review"}, "request_id": "fake-move", "turn": "first"},
 {"operation": "linear.wait_reply", "input": {"timeout_s": 3600}, "request_id": "fake-wait", "turn": "first"}
]"#;

fn fixture() -> Value {
    let raw = std::fs::read(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../extensions/linear/tests/fixtures/issue-assigned.json"),
    )
    .unwrap();
    serde_json::from_slice(&raw).unwrap()
}

/// POSTs `body` to the entry's path with `webhookTimestamp` set to `ts_ms`, signed
/// under `secret` as Linear signs (hex HMAC-SHA256 of the raw body).
fn send(suite: &Suite, body: &Value, ts_ms: i64, secret: &str) -> oc_systest::Response {
    let mut body = body.clone();
    body["webhookTimestamp"] = json!(ts_ms);
    let bytes = serde_json::to_vec(&body).unwrap();
    let headers = vec![
        ("Content-Type", "application/json".to_string()),
        (
            "Linear-Delivery",
            "0f6ab5c4-1111-4222-8333-444455556666".into(),
        ),
        ("Linear-Event", "Issue".into()),
        (
            "Linear-Signature",
            sdk::tracker::hmac_sha256_hex(secret.as_bytes(), &bytes),
        ),
    ];
    oc_systest::post(suite.http, PATH, &headers, &bytes).unwrap()
}

fn linear_events(suite: &Suite) -> Vec<Value> {
    suite
        .events()
        .unwrap()
        .into_iter()
        .filter(|e| e["type"].as_str().is_some_and(|t| t.starts_with("linear.")))
        .collect()
}

fn comment_fixture() -> Value {
    let raw = std::fs::read(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../extensions/linear/tests/fixtures/comment-created.json"),
    )
    .unwrap();
    serde_json::from_slice(&raw).unwrap()
}

fn prompts(rec: &Path) -> Vec<String> {
    records(rec)
        .into_iter()
        .filter_map(|r| r["prompt"].as_str().map(str::to_owned))
        .collect()
}

/// A whole scan through extrunner's `ext.reconcile` from no checkpoint: (items, added).
fn scan_all(suite: &Suite) -> (u64, u64) {
    let (mut items, mut added, mut cursor) = (0, 0, String::new());
    for _ in 0..100 {
        let page = suite
            .call(
                "ext.reconcile",
                json!({"name": "linear", "timeout_ms": 30_000,
                       "page": {"source": "linear/demo/eng", "cursor": cursor, "max_items": 50}}),
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

fn works(suite: &Suite) -> Vec<Value> {
    suite
        .call("store.works", json!({"scope_id": "demo"}))
        .unwrap()["works"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

#[test]
fn an_issue_assigned_to_the_agent_starts_a_work_that_comments_and_moves_it() {
    let Some(validator) = standin::Validator::start() else {
        return;
    };
    let (api_url, seen) = standin::stand_in(validator);

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
    let suite = Suite::new(Path::new(BIN), "linear", &packages).unwrap();
    let claude = suite.dir.join("bin/claude");
    script(
        &claude,
        &format!("#!/bin/sh\nexec '{BIN}' fake-claude \"$@\"\n"),
    );
    with_toolbelt(&suite);
    suite.start_all().unwrap();

    let secrets = suite.dir.join("secrets");
    std::fs::create_dir_all(&secrets).unwrap();
    let key_file = secrets.join("linear-api-key");
    std::fs::write(&key_file, format!("{API_KEY}\n")).unwrap();
    let secret_file = secrets.join("linear-webhook-secret");
    std::fs::write(&secret_file, format!("{WEBHOOK_SECRET}\n")).unwrap();
    let rec = suite.dir.join("claude.jsonl");
    std::fs::create_dir_all(suite.dir.join("work")).unwrap();
    let doc = json!({
        "connections": [{"name": "lin", "type": "linear", "config": {"api_url": api_url},
                         "secret_refs": {"api_key": format!("file:{}", key_file.display()),
                                         "webhook_secret": format!("file:{}", secret_file.display())}}],
        "scopes": [{
            "id": "demo",
            "entries": [{"type": "linear", "name": "eng", "connection": "lin",
                         "config": {"teams": ["LIN"], "agent_user": AGENT,
                                    "reconcile_interval_s": 0}}],
            "routes": [{"handler": "linear", "binding": "cc"}],
            "bindings": [{
                "name": "cc", "executor": "claude-code", "connection": "lin",
                "operations": ["linear.comment", "linear.move", "linear.wait_reply"],
                "config": {"binary": claude, "dir": suite.dir.join("work"),
                           "env": {"FAKE_CLAUDE_MODE": "calls", "FAKE_CLAUDE_RECORD": rec,
                                   "FAKE_CLAUDE_CALLS": CALLS,
                                   "CLAUDE_CONFIG_DIR": suite.dir.join("claude-config")}}
            }]
        }]
    });
    suite.apply_config(&doc, PATH).unwrap();

    // The assignment, as Linear sends it now.
    let assigned = fixture();
    let r = send(&suite, &assigned, protocol::time::now_ms(), WEBHOOK_SECRET);
    assert_eq!(r.status, 200, "{}", r.text());
    let work = wait_for("the issue's Work", || {
        works(&suite).first()?["id"].as_str().map(str::to_string)
    });
    let row = suite.call("store.work_get", json!({"id": work})).unwrap()["work"].clone();
    assert_eq!(row["display"]["title"], "Foo bar", "{row}");
    assert_eq!(row["display"]["ref"], "LIN-1778", "{row}");
    assert_eq!(row["display"]["requester"], "Ada Lovelace", "{row}");

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
    let comment = result("tools/call linear.comment");
    assert_eq!(comment["isError"], false, "{comment}");
    let again = result("tools/call linear.comment again");
    assert_eq!(again["structuredContent"], comment["structuredContent"]);
    let moved = result("tools/call linear.move");
    assert_eq!(moved["isError"], false, "{moved}");
    assert!(moved.to_string().contains("In Review"), "{moved}");

    {
        let seen = seen.lock().unwrap();
        let ops: Vec<&str> = seen.requests.iter().map(|r| r.0.as_str()).collect();
        let agent_comments = seen
            .requests
            .iter()
            .filter(|r| r.0 == "OcComment" && r.1["input"]["body"] == "On it.")
            .count();
        assert_eq!(agent_comments, 1, "one comment for one request ID: {ops:?}");
        assert_eq!(ops.iter().filter(|o| **o == "OcMove").count(), 1, "{ops:?}");
        for (op, variables, auth, errors) in &seen.requests {
            assert!(errors.is_empty(), "{op} refused by the schema: {errors:?}");
            assert_eq!(auth, API_KEY, "{op}");
            if op == "OcMove" {
                assert_eq!(variables["input"]["stateId"], "s2", "{variables}");
            }
        }
    }

    // The same change delivered again (a redelivery): kept once.
    let before = linear_events(&suite);
    assert_eq!(before.len(), 1, "{before:#?}");
    let r = send(&suite, &assigned, protocol::time::now_ms(), WEBHOOK_SECRET);
    assert_eq!(r.status, 200, "{}", r.text());
    // A bad signature and a stale timestamp: 401, nothing kept.
    let mut other = assigned.clone();
    other["data"]["updatedAt"] = json!("2020-01-23T13:00:00.000Z");
    let r = send(
        &suite,
        &other,
        protocol::time::now_ms(),
        "not the webhook secret",
    );
    assert_eq!(r.status, 401, "{}", r.text());
    let r = send(
        &suite,
        &other,
        protocol::time::now_ms() - 3_600_000,
        WEBHOOK_SECRET,
    );
    assert_eq!(r.status, 401, "{}", r.text());
    // The redelivery's answer came after the store kept (or found) it.
    let events = linear_events(&suite);
    assert_eq!(events.len(), 1, "{events:#?}");
    assert_eq!(works(&suite).len(), 1);

    // The turn ended in linear.wait_reply: the Work waits on the issue's key.
    let waiting = wait_for("the Work waiting for a comment", || {
        let w = suite.call("store.waits", json!({"work_id": work})).ok()?["waits"]
            .as_array()?
            .iter()
            .find(|w| w["state"] == "active" && w["owner"] == "linear")?
            .clone();
        let state = suite.call("store.work_get", json!({"id": work})).ok()?["work"]["state"]
            .as_str()?
            .to_string();
        (state == "waiting").then_some(w)
    });
    assert_eq!(waiting["keys"], json!(["linear:LIN-1778"]), "{waiting}");
    assert_eq!(prompts(&rec).len(), 1);

    // The projector: one comment on the issue showing the Work waiting.
    let shows = |seen: &standin::Seen, op: &str, state: &str| {
        seen.requests.iter().any(|r| {
            r.0 == op
                && r.3.is_empty()
                && r.1["input"]["body"].as_str().is_some_and(|b| {
                    b.starts_with("**Open Conduit**")
                        && b.contains(&work)
                        && b.contains(&format!("**{state}**"))
                })
        })
    };
    wait_for("the status comment showing the Work waiting", || {
        let seen = seen.lock().unwrap();
        (shows(&seen, "OcComment", "waiting") || shows(&seen, "OcCommentUpdate", "waiting"))
            .then_some(())
    });

    // A person comments on the issue: the Wait is woken and the next turn's prompt
    // carries the comment.
    let mut comment = comment_fixture();
    comment["data"]["body"] = json!("Please also cover the archived projects.");
    let r = send(&suite, &comment, protocol::time::now_ms(), WEBHOOK_SECRET);
    assert_eq!(r.status, 200, "{}", r.text());
    let resumed = wait_for("the turn the comment started", || {
        prompts(&rec).into_iter().nth(1)
    });
    assert!(
        resumed.contains("Please also cover the archived projects."),
        "{resumed}"
    );
    assert!(resumed.contains("Ada Lovelace"), "{resumed}");
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
    assert_eq!(linear_events(&suite).len(), 2);

    // The status comment follows the Work out of waiting: edited in place, never
    // posted twice.
    let settled = wait_for("the Work's turn done", || {
        let state = suite.call("store.work_get", json!({"id": work})).ok()?["work"]["state"]
            .as_str()?
            .to_string();
        (!["pending", "woken", "running", "waiting"].contains(&state.as_str())).then_some(state)
    });
    wait_for("the status comment edited to the Work's state", || {
        shows(&seen.lock().unwrap(), "OcCommentUpdate", &settled).then_some(())
    });
    {
        let seen = seen.lock().unwrap();
        let status_posts = seen
            .requests
            .iter()
            .filter(|r| {
                r.0 == "OcComment"
                    && r.1["input"]["body"]
                        .as_str()
                        .is_some_and(|b| b.starts_with("**Open Conduit**"))
            })
            .count();
        assert_eq!(status_posts, 1, "one status comment per Work");
        assert!(seen
            .requests
            .iter()
            .filter(|r| r.0 == "OcCommentUpdate")
            .all(|r| r.1["id"] == "c2" && r.3.is_empty()));
    }

    // Reconcile polls the team's issues (the stand-in's `OcIssuesSince`): the
    // assignment already delivered adds nothing, the missed one (LIN-1779) is found
    // once and starts its Work, an edit is no Event; a second scan adds nothing.
    let (items, added) = scan_all(&suite);
    assert_eq!((items, added), (2, 1));
    let events = linear_events(&suite);
    assert_eq!(events.len(), 3, "{events:#?}");
    assert!(
        events.iter().any(|e| e["delivery_id"]
            == "Issue/6d2f0a51-3c4b-4e5f-8a9b-0c1d2e3f4a5b/2020-01-23T13:10:00.000Z"),
        "{events:#?}"
    );
    wait_for("the missed issue's Work", || {
        works(&suite)
            .iter()
            .any(|w| w["display"]["ref"] == "LIN-1779")
            .then_some(())
    });
    assert_eq!(scan_all(&suite), (2, 0));
    assert_eq!(linear_events(&suite).len(), 3);
    assert_eq!(works(&suite).len(), 2);
    {
        let seen = seen.lock().unwrap();
        let polls: Vec<_> = seen
            .requests
            .iter()
            .filter(|r| r.0 == "OcIssuesSince")
            .collect();
        assert_eq!(polls.len(), 2);
        for (_, variables, _, errors) in &polls {
            assert!(errors.is_empty(), "{errors:?}");
            assert_eq!(variables["filter"]["team"]["key"]["in"], json!(["LIN"]));
            assert!(
                variables["filter"]["updatedAt"]["gt"].is_string(),
                "{variables}"
            );
        }
    }

    for d in [
        Daemon::Broker,
        Daemon::Storaged,
        Daemon::Schedulerd,
        Daemon::Ingressd,
        Daemon::Extrunner,
    ] {
        let log = suite.log(d);
        assert!(!log.contains(API_KEY), "{d:?} logged the API key");
        assert!(
            !log.contains(WEBHOOK_SECRET),
            "{d:?} logged the webhook secret"
        );
    }
}

/// `open-conduit doctor`'s output.
fn doctor(suite: &Suite) -> String {
    let out = std::process::Command::new(BIN)
        .arg("open-conduit")
        .arg("--bus")
        .arg(&suite.bus)
        .arg("doctor")
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// One pass of the `linear.webhooks` task through extrunner, as schedulerd asks it.
fn webhooks_task(suite: &Suite) -> Result<String, String> {
    suite
        .call(
            "ext.call",
            json!({"name": "linear", "method": "task.run", "timeout_ms": 60_000,
                   "params": {"task": "linear.webhooks", "now": "2026-01-01T00:00:00Z"}}),
        )
        .map(|r| r["detail"].as_str().unwrap_or_default().to_owned())
        .map_err(|e| e["message"].as_str().unwrap_or_default().to_owned())
}

fn webhook_writes(seen: &standin::Seen) -> Vec<(String, Value, Vec<String>)> {
    seen.requests
        .iter()
        .filter(|r| r.0 == "OcWebhookCreate" || r.0 == "OcWebhookUpdate")
        .map(|r| (r.0.clone(), r.1.clone(), r.3.clone()))
        .collect()
}

/// The managed webhook (`manage_webhook`, the `linear.webhooks` task) with a public
/// URL configured: the first pass creates the team's webhook once (one
/// `webhookCreate` at the stand-in, valid against Linear's schema, with the URL,
/// the resource types, the team and the connection's secret), a second pass writes
/// nothing, a webhook changed at Linear is drift in `open-conduit doctor` and the
/// next pass repairs it. Then reconcile polls comments: a comment already delivered
/// by webhook adds nothing, a missed one mentioning the agent is found once, and a
/// second scan adds nothing. The secrets are in no log.
#[test]
fn a_managed_webhook_is_kept_as_configured_and_a_missed_comment_is_reconciled() {
    let Some(validator) = standin::Validator::start() else {
        return;
    };
    let (api_url, seen) = standin::stand_in(validator);
    seen.lock().unwrap().webhooks.push(json!({
        "id": "0c1d2e3f-0000-4000-8000-000000000099", "url": "https://ci.example.com/hook",
        "enabled": true, "resourceTypes": ["Issue"], "team": {"id": "team-LIN", "key": "LIN"}}));

    let mut packages = Suite::first_party();
    packages.push(Package {
        name: "linear".into(),
        manifest: oc_linear::MANIFEST.into(),
        command: vec!["ext-linear".into()],
    });
    let suite = Suite::new(Path::new(BIN), "linear-hooks", &packages).unwrap();
    suite.start_all().unwrap();
    let secrets = suite.dir.join("secrets");
    std::fs::create_dir_all(&secrets).unwrap();
    let key_file = secrets.join("linear-api-key");
    std::fs::write(&key_file, format!("{API_KEY}\n")).unwrap();
    let secret_file = secrets.join("linear-webhook-secret");
    std::fs::write(&secret_file, format!("{WEBHOOK_SECRET}\n")).unwrap();
    let doc = json!({
        "settings": {"webhooks": {"public_url": "https://hooks.example.com/"}},
        "connections": [{"name": "lin", "type": "linear", "config": {"api_url": api_url},
                         "secret_refs": {"api_key": format!("file:{}", key_file.display()),
                                         "webhook_secret": format!("file:{}", secret_file.display())}}],
        "scopes": [{
            "id": "demo",
            "entries": [{"type": "linear", "name": "eng", "connection": "lin",
                         "config": {"teams": ["LIN"], "agent_user": AGENT, "mention": "@conduit",
                                    "reconcile_interval_s": 0, "manage_webhook": true}}]
        }]
    });
    suite.apply_config(&doc, PATH).unwrap();
    let log = || {
        std::fs::read_to_string(suite.dir.join("state/logs/extensions/linear.log"))
            .unwrap_or_default()
    };

    // The first pass (this one, or the one configure set off) creates the webhook.
    let detail = webhooks_task(&suite).unwrap_or_else(|e| panic!("{e}\n{}", log()));
    assert!(detail.contains("demo/eng"), "{detail}");
    let hook_id = {
        let seen = seen.lock().unwrap();
        let writes = webhook_writes(&seen);
        assert_eq!(writes.len(), 1, "{writes:#?}");
        let (op, variables, errors) = &writes[0];
        assert_eq!(op, "OcWebhookCreate");
        assert!(errors.is_empty(), "refused by the schema: {errors:?}");
        let input = &variables["input"];
        assert_eq!(input["url"], "https://hooks.example.com/linear/demo/eng");
        assert_eq!(input["resourceTypes"], json!(["Comment", "Issue"]));
        assert_eq!(input["teamId"], "LIN");
        assert_eq!(input["secret"], WEBHOOK_SECRET);
        assert_eq!(input["enabled"], true);
        let ours = seen
            .webhooks
            .iter()
            .find(|h| h["url"] == "https://hooks.example.com/linear/demo/eng")
            .unwrap();
        ours["id"].as_str().unwrap().to_owned()
    };
    let text = doctor(&suite);
    assert!(
        text.contains(&format!("LIN webhook {hook_id} ok")),
        "{text}"
    );

    // A second pass with nothing changed writes nothing.
    let detail = webhooks_task(&suite).unwrap();
    assert!(detail.contains("is as configured"), "{detail}");
    assert_eq!(webhook_writes(&seen.lock().unwrap()).len(), 1);

    // Changed at Linear (disabled, pointed elsewhere): drift in doctor, repaired by
    // the next pass with one webhookUpdate.
    {
        let mut seen = seen.lock().unwrap();
        let hook = seen
            .webhooks
            .iter_mut()
            .find(|h| h["id"] == hook_id)
            .unwrap();
        hook["enabled"] = json!(false);
        hook["url"] = json!("https://old.example.com/linear/demo/eng");
    }
    let text = doctor(&suite);
    assert!(
        text.contains("warn linear_webhooks")
            && text.contains(&format!("LIN webhook {hook_id} drifted"))
            && text.contains("is disabled")
            && text.contains("delivers to https://old.example.com/linear/demo/eng"),
        "{text}"
    );
    let detail = webhooks_task(&suite).unwrap();
    assert!(detail.contains("updated LIN webhook"), "{detail}");
    {
        let seen = seen.lock().unwrap();
        let writes = webhook_writes(&seen);
        assert_eq!(writes.len(), 2, "{writes:#?}");
        assert_eq!(writes[1].0, "OcWebhookUpdate");
        assert_eq!(writes[1].1["id"], hook_id.as_str());
        assert!(writes[1].2.is_empty(), "{:?}", writes[1].2);
        let hook = seen.webhooks.iter().find(|h| h["id"] == hook_id).unwrap();
        assert_eq!(hook["enabled"], true);
        assert_eq!(hook["url"], "https://hooks.example.com/linear/demo/eng");
    }
    assert!(
        doctor(&suite).contains(&format!("LIN webhook {hook_id} ok")),
        "{}",
        doctor(&suite)
    );
    webhooks_task(&suite).unwrap();
    assert_eq!(webhook_writes(&seen.lock().unwrap()).len(), 2);

    // A comment delivered by webhook, then a scan polling it and a missed one that
    // mentions the agent (no issue changes this time).
    let delivered = comment_fixture();
    let r = send(&suite, &delivered, protocol::time::now_ms(), WEBHOOK_SECRET);
    assert_eq!(r.status, 200, "{}", r.text());
    wait_for("the delivered comment's Event", || {
        (linear_events(&suite).len() == 1).then_some(())
    });
    let data = &delivered["data"];
    let missed_id = "9a8b7c6d-5e4f-4a3b-8c2d-1e0f9a8b7c6d";
    {
        let mut seen = seen.lock().unwrap();
        seen.answers.insert(
            "OcIssuesSince".into(),
            json!({"data": {"issues": {"nodes": [],
                   "pageInfo": {"hasNextPage": false, "endCursor": null}}}}),
        );
        seen.answers.insert(
            "OcCommentsSince".into(),
            standin::comments_since(vec![
                standin::polled_comment(
                    data["id"].as_str().unwrap(),
                    data["body"].as_str().unwrap(),
                    data["createdAt"].as_str().unwrap(),
                ),
                standin::polled_comment(
                    missed_id,
                    "@conduit could you look at the flaky test too?",
                    "2020-01-23T13:20:00.000Z",
                ),
            ]),
        );
    }
    assert_eq!(scan_all(&suite), (2, 1));
    let events = linear_events(&suite);
    assert_eq!(events.len(), 2, "{events:#?}");
    let missed = events
        .iter()
        .find(|e| e["delivery_id"] == format!("Comment/{missed_id}/create"))
        .unwrap_or_else(|| panic!("{events:#?}"));
    assert_eq!(missed["type"], "linear.issue.commented", "{missed}");
    assert_eq!(scan_all(&suite), (2, 0));
    assert_eq!(linear_events(&suite).len(), 2);
    {
        let seen = seen.lock().unwrap();
        let polls: Vec<_> = seen
            .requests
            .iter()
            .filter(|r| r.0 == "OcCommentsSince")
            .collect();
        assert_eq!(polls.len(), 2);
        for (_, variables, _, errors) in &polls {
            assert!(errors.is_empty(), "{errors:?}");
            assert_eq!(
                variables["filter"]["issue"]["team"]["key"]["in"],
                json!(["LIN"])
            );
            assert!(
                variables["filter"]["createdAt"]["gt"].is_string(),
                "{variables}"
            );
        }
        for r in &seen.requests {
            assert!(r.3.is_empty(), "{} refused by the schema: {:?}", r.0, r.3);
        }
    }

    for d in [
        Daemon::Broker,
        Daemon::Storaged,
        Daemon::Schedulerd,
        Daemon::Ingressd,
        Daemon::Extrunner,
    ] {
        let log = suite.log(d);
        assert!(!log.contains(API_KEY), "{d:?} logged the API key");
        assert!(
            !log.contains(WEBHOOK_SECRET),
            "{d:?} logged the webhook secret"
        );
    }
    assert!(
        !log().contains(WEBHOOK_SECRET),
        "the package logged the secret"
    );
}
