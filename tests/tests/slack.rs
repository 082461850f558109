#![allow(clippy::unwrap_used)]
//! The slack package end to end, with real daemons: a signed Events API
//! `app_mention` (Slack's own payload, python-slack-sdk's fixture) to ingressd starts
//! a Work on a claude-code binding granted `slack.post` and `slack.react`; the fake
//! `claude` (mode `calls`), through the real `open-conduit mcp`, posts in the thread,
//! posts again with the same request ID (answered once), adds a reaction and edits its
//! progress message twice (`slack.update` without a `ts`: the message it posted; before
//! any post such an update is a clear error and calls nothing), each
//! request valid against Slack's own Web API description (Prism, `--errors`); a reply
//! in the thread joins the same Work; the mention delivered again (a retry) adds
//! nothing; a bad signature and an old timestamp are 401 and nothing is kept; the
//! tokens are in no log.
//!
//! Without node or tests/github-api's Prism the test prints SKIPPED and passes, unless
//! OC_REQUIRE_PEERS=1.

mod common;
use common::*;

use oc_slack::signature::sign;
use oc_systest::slack::{start_prism, Adapter};
use oc_systest::{Daemon, Package, Suite};
use serde_json::{json, Value};
use std::path::Path;

const BOT_TOKEN: &str = "xoxb-e2e-SecretBotTokenNeverLogged-0123456789";
const SIGNING_SECRET: &str = "e2e-signing-secret-never-logged-abcdef";
const PATH: &str = "/slack/demo/team";
const CALLS: &str = r#"[
 {"operation": "slack.update", "input": {"text": "nothing to edit yet"}, "request_id": "fake-early", "tag": " early", "turn": "first"},
 {"operation": "slack.post", "input": {"text": "On it."}, "request_id": "fake-post", "turn": "first"},
 {"operation": "slack.post", "input": {"text": "On it."}, "request_id": "fake-post", "tag": " again", "turn": "first"},
 {"operation": "slack.react", "input": {"name": "eyes"}, "request_id": "fake-react", "turn": "first"},
 {"operation": "slack.update", "input": {"text": "On it: 1 of 2 pages built."}, "request_id": "fake-progress-1", "turn": "first"},
 {"operation": "slack.update", "input": {"text": "Done: both pages built."}, "request_id": "fake-progress-2", "tag": " done", "turn": "first"}
]"#;

fn fixture() -> Value {
    let raw = std::fs::read(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../extensions/slack/tests/fixtures/events/app_mention.json"),
    )
    .unwrap();
    serde_json::from_slice(&raw).unwrap()
}

fn now_s() -> i64 {
    protocol::time::now_ms() / 1000
}

/// POSTs `body` to the entry's path, signed at `ts` under `secret`.
fn send(suite: &Suite, body: &Value, ts: i64, secret: &str, retry: bool) -> oc_systest::Response {
    let bytes = serde_json::to_vec(body).unwrap();
    let ts = ts.to_string();
    let mut headers = vec![
        ("Content-Type", "application/json".to_string()),
        ("X-Slack-Request-Timestamp", ts.clone()),
        ("X-Slack-Signature", sign(secret.as_bytes(), &ts, &bytes)),
    ];
    if retry {
        headers.push(("X-Slack-Retry-Num", "1".into()));
        headers.push(("X-Slack-Retry-Reason", "http_timeout".into()));
    }
    oc_systest::post(suite.http, PATH, &headers, &bytes).unwrap()
}

fn slack_events(suite: &Suite) -> Vec<Value> {
    suite
        .events()
        .unwrap()
        .into_iter()
        .filter(|e| e["type"].as_str().is_some_and(|t| t.starts_with("slack.")))
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

fn work_event_types(suite: &Suite, work: &str) -> Vec<String> {
    suite
        .call("store.work_events", json!({"work_id": work, "limit": 100}))
        .unwrap()["events"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .iter()
        .filter_map(|e| e["type"].as_str().map(str::to_string))
        .collect()
}

/// The first string at key `key` anywhere in `v`.
fn find_str(v: &Value, key: &str) -> Option<String> {
    match v {
        Value::Object(m) => m
            .get(key)
            .and_then(Value::as_str)
            .map(str::to_string)
            .or_else(|| m.values().find_map(|x| find_str(x, key))),
        Value::Array(a) => a.iter().find_map(|x| find_str(x, key)),
        _ => None,
    }
}

#[test]
fn a_mention_starts_a_work_whose_agent_answers_in_the_thread() {
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
    let adapter = Adapter::start(&prism).unwrap();

    let mut packages = Suite::first_party();
    for (name, manifest, command) in [
        ("claude-code", oc_claude_code::MANIFEST, "ext-claude-code"),
        ("slack", oc_slack::MANIFEST, "ext-slack"),
    ] {
        packages.push(Package {
            name: name.into(),
            manifest: manifest.into(),
            command: vec![command.into()],
        });
    }
    let bin = Path::new(BIN);
    let suite = Suite::new(bin, "slack", &packages).unwrap();
    let claude = suite.dir.join("bin/claude");
    script(
        &claude,
        &format!("#!/bin/sh\nexec '{BIN}' fake-claude \"$@\"\n"),
    );
    with_toolbelt(&suite);
    suite.start_all().unwrap();

    let token_file = suite.dir.join("slack-bot-token");
    std::fs::write(&token_file, format!("{BOT_TOKEN}\n")).unwrap();
    let secret_file = suite.dir.join("slack-signing-secret");
    std::fs::write(&secret_file, format!("{SIGNING_SECRET}\n")).unwrap();
    let rec = suite.dir.join("claude.jsonl");
    std::fs::create_dir_all(suite.dir.join("work")).unwrap();
    let doc = json!({
        "connections": [{"name": "sl", "type": "slack", "config": {"api_url": adapter.url},
                         "secret_refs": {"bot_token": format!("file:{}", token_file.display()),
                                         "signing_secret": format!("file:{}", secret_file.display())}}],
        "scopes": [{
            "id": "demo",
            "entries": [{"type": "slack", "name": "team", "connection": "sl"}],
            "routes": [{"handler": "slack", "binding": "cc"}],
            "bindings": [{
                "name": "cc", "executor": "claude-code", "connection": "sl",
                "operations": ["slack.post", "slack.react", "slack.update"],
                "config": {"binary": claude, "dir": suite.dir.join("work"),
                           "env": {"FAKE_CLAUDE_MODE": "calls", "FAKE_CLAUDE_RECORD": rec,
                                   "FAKE_CLAUDE_CALLS": CALLS,
                                   "CLAUDE_CONFIG_DIR": suite.dir.join("claude-config")}}
            }]
        }]
    });
    suite.apply_config(&doc, PATH).unwrap();

    // The mention, as Slack sends it now.
    let mut mention = fixture();
    mention["event"]["text"] = json!("<@U111> Deploy the docs site\nthanks");
    let r = send(&suite, &mention, now_s(), SIGNING_SECRET, false);
    assert_eq!(r.status, 200, "{}", r.text());
    let work = wait_for("the thread's Work", || {
        works(&suite).first()?["id"].as_str().map(str::to_string)
    });
    let row = suite.call("store.work_get", json!({"id": work})).unwrap()["work"].clone();
    assert_eq!(row["display"]["title"], "Deploy the docs site", "{row}");
    assert_eq!(row["display"]["requester"], "U222", "{row}");

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
    let post = result("tools/call slack.post");
    assert_eq!(post["isError"], false, "{post}");
    let again = result("tools/call slack.post again");
    assert_eq!(again["structuredContent"], post["structuredContent"]);
    let react = result("tools/call slack.react");
    assert_eq!(react["isError"], false, "{react}");
    let posted_ts =
        find_str(&post["structuredContent"], "ts").unwrap_or_else(|| panic!("no ts in {post}"));
    // Before anything was posted there is no progress message to edit.
    let early = result("tools/call slack.update early");
    assert_eq!(early["isError"], true, "{early}");
    assert!(
        early
            .to_string()
            .contains("slack.post has posted no message for this Work"),
        "{early}"
    );
    let progress = result("tools/call slack.update");
    assert_eq!(progress["isError"], false, "{progress}");
    let done = result("tools/call slack.update done");
    assert_eq!(done["isError"], false, "{done}");
    let requests = adapter.requests();
    let posts: Vec<_> = requests
        .iter()
        .filter(|r| r.path() == "/chat.postMessage")
        .collect();
    assert_eq!(
        posts.len(),
        1,
        "one message for one request ID: {requests:#?}"
    );
    assert_eq!(posts[0].field("channel").as_deref(), Some("C111"));
    assert_eq!(
        posts[0].field("thread_ts").as_deref(),
        Some("1610241741.000200")
    );
    assert_eq!(
        requests
            .iter()
            .filter(|r| r.path() == "/reactions.add")
            .count(),
        1
    );
    // The progress message edited in place: two chat.update of the message posted,
    // in the thread's conversation, and no other message posted.
    let updates: Vec<_> = requests
        .iter()
        .filter(|r| r.path() == "/chat.update")
        .collect();
    assert_eq!(updates.len(), 2, "{requests:#?}");
    for (u, text) in updates
        .iter()
        .zip(["On it: 1 of 2 pages built.", "Done: both pages built."])
    {
        assert_eq!(u.field("channel").as_deref(), Some("C111"), "{u:?}");
        assert_eq!(u.field("ts").as_deref(), Some(posted_ts.as_str()), "{u:?}");
        assert_eq!(u.field("text").as_deref(), Some(text), "{u:?}");
        assert_eq!(u.status, 200, "{u:?}");
    }
    assert!(
        adapter.violations().is_empty(),
        "{:#?}",
        adapter.violations()
    );

    // A reply in the thread joins the Work.
    let mut reply = fixture();
    reply["event_id"] = json!("Ev-reply-1");
    reply["event"]["type"] = json!("message");
    reply["event"]["text"] = json!("also the API reference, please");
    reply["event"]["ts"] = json!("1610241800.000300");
    reply["event"]["thread_ts"] = json!("1610241741.000200");
    reply["event"]["channel_type"] = json!("channel");
    let r = send(&suite, &reply, now_s(), SIGNING_SECRET, false);
    assert_eq!(r.status, 200, "{}", r.text());
    wait_for("the reply on the Work", || {
        work_event_types(&suite, &work)
            .contains(&"slack.message.reply".to_string())
            .then_some(())
    });
    assert_eq!(works(&suite).len(), 1, "the reply made no Work of its own");

    // The mention again (Slack's retry): kept once.
    let before = slack_events(&suite).len();
    assert_eq!(before, 2);
    let r = send(&suite, &mention, now_s(), SIGNING_SECRET, true);
    assert_eq!(r.status, 200, "{}", r.text());
    // A bad signature and an old timestamp: 401, nothing kept.
    let mut other = mention.clone();
    other["event_id"] = json!("Ev-forged");
    let r = send(&suite, &other, now_s(), "not the signing secret", false);
    assert_eq!(r.status, 401, "{}", r.text());
    let r = send(&suite, &other, now_s() - 3600, SIGNING_SECRET, false);
    assert_eq!(r.status, 401, "{}", r.text());
    // The retry's answer came after the store kept (or found) it: nothing new since.
    let events = slack_events(&suite);
    assert_eq!(events.len(), before, "{events:#?}");
    assert!(events.iter().all(|e| e["delivery_id"] != "Ev-forged"));
    assert_eq!(works(&suite).len(), 1);

    // No daemon's log holds a token or the signing secret.
    for d in [
        Daemon::Broker,
        Daemon::Storaged,
        Daemon::Schedulerd,
        Daemon::Ingressd,
        Daemon::Extrunner,
    ] {
        let log = suite.log(d);
        assert!(!log.contains(BOT_TOKEN), "{d:?} logged the bot token");
        assert!(
            !log.contains(SIGNING_SECRET),
            "{d:?} logged the signing secret"
        );
    }
}

/// `open-conduit config check` (the real CLI, the running slack package validating
/// its own entries and connections) names each bad Slack field by its JSON pointer
/// in the configuration: a `mode` that is neither `events` nor `socket`, a field an
/// entry does not have, a `channels` item of the wrong type, a connection `api_url`
/// that is not a URL; a good configuration checks clean.
#[test]
fn config_check_names_bad_slack_fields_by_pointer() {
    let mut packages = Suite::first_party();
    packages.push(Package {
        name: "slack".into(),
        manifest: oc_slack::MANIFEST.into(),
        command: vec!["ext-slack".into()],
    });
    let suite = Suite::new(Path::new(BIN), "slack-check", &packages).unwrap();
    suite.start_all().unwrap();
    let secret = |name: &str| {
        let f = suite.dir.join(name);
        std::fs::write(&f, "x\n").unwrap();
        format!("file:{}", f.display())
    };
    let good = json!({
        "connections": [{"name": "sl", "type": "slack",
                         "config": {"api_url": "https://slack.com/api"},
                         "secret_refs": {"bot_token": secret("bot"),
                                         "signing_secret": secret("signing")}}],
        "scopes": [{
            "id": "demo",
            "entries": [
                {"type": "slack", "name": "team", "connection": "sl"},
                {"type": "slack", "name": "ops", "connection": "sl",
                 "config": {"channels": ["C0123456789", "im"], "mode": "events"}}
            ]
        }]
    });
    let check = |doc: &Value, name: &str| {
        let file = suite.dir.join(name);
        std::fs::write(&file, doc.to_string()).unwrap();
        cli(&suite, &["config", "check", file.to_str().unwrap()])
    };
    let (code, said) = check(&good, "good.json");
    assert_eq!(code, 0, "{said}");

    let mut bad = good.clone();
    bad["connections"][0]["config"]["api_url"] = json!("not a url");
    bad["scopes"][0]["entries"][0]["config"] = json!({"chanels": ["C0123456789"]});
    bad["scopes"][0]["entries"][1]["config"]["mode"] = json!("webhook");
    let (code, said) = check(&bad, "bad.json");
    assert_eq!(code, 1, "{said}");
    for (pointer, code) in [
        (
            "/connections/0/config/api_url: ",
            "slack_connection_invalid",
        ),
        (
            "/scopes/0/entries/0/config/chanels: unknown field",
            "slack_entry_invalid",
        ),
        (
            "/scopes/0/entries/1/config/mode: must be `events`",
            "slack_entry_invalid",
        ),
    ] {
        let line = said
            .lines()
            .find(|l| l.contains(pointer))
            .unwrap_or_else(|| panic!("no {pointer} in {said}"));
        assert!(line.contains(code), "{line}");
    }
    assert!(said.contains(" 3 problems"), "{said}");

    let mut bad = good.clone();
    bad["scopes"][0]["entries"][1]["config"]["channels"] = json!(["C0123456789", 7]);
    let (code, said) = check(&bad, "bad-type.json");
    assert_eq!(code, 1, "{said}");
    assert!(
        said.contains("/scopes/0/entries/1/config/channels/1: must be a string"),
        "{said}"
    );
}
