#![allow(clippy::unwrap_used)]
//! The slack package over Socket Mode, with real daemons, against a Slack stand-in
//! on 127.0.0.1 (`oc_systest::slack::SocketSlack`: `apps.connections.open`,
//! `auth.test`, and a WebSocket server speaking the envelope protocol):
//!
//! - a `socket` entry makes the package open the socket with the connection's
//!   app-level token; Slack's own `app_mention` envelope (python-slack-sdk's
//!   fixture) starts a Work, and its ack arrives only once the store has the Event
//!   (the stand-in looks in the store when it reads the ack);
//! - the same event over the Events API (signed, at the entry's path) adds nothing;
//! - a `disconnect` with envelopes unacknowledged loses nothing: the package
//!   reconnects, the stand-in sends them again as Slack does, each is kept once;
//! - the doctor: `tokens` fails for a connection whose bot token Slack refuses
//!   (naming `invalid_auth`), `socket_mode` is ok while connected and fails once the
//!   socket is down (the app token refused);
//! - a configuration without the socket entry closes the socket.
//!
//! Waits only bound hangs; nothing asserts on timing.

mod common;
use common::*;

use busapi::ext::{ExtCall, EXT_CALL};
use oc_slack::signature::sign;
use oc_systest::slack::SocketSlack;
use oc_systest::{Daemon, Package, Suite, HANG};
use protocol::wire::{CheckRunParams, CheckRunResult};
use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};

const BOT_TOKEN: &str = "xoxb-socket-SecretBotTokenNeverLogged-0123";
const BAD_BOT_TOKEN: &str = "xoxb-revoked-SecretBadTokenNeverLogged-9876";
const APP_TOKEN: &str = "xapp-1-socket-SecretAppTokenNeverLogged-4567";
const SIGNING_SECRET: &str = "socket-signing-secret-never-logged-abcdef";
const PATH: &str = "/slack/demo/team";

fn fixture(name: &str) -> Value {
    let raw = std::fs::read(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../extensions/slack/tests/fixtures/socket_mode")
            .join(name),
    )
    .unwrap();
    serde_json::from_slice(&raw).unwrap()
}

/// The fixture's `app_mention` envelope as `envelope_id`, its event `event_id`, with
/// `text` at `ts` (in the thread of `thread_ts` when given).
fn envelope(envelope_id: &str, event_id: &str, ts: &str, thread_ts: Option<&str>) -> Value {
    let mut env = fixture("app_mention.json");
    env["envelope_id"] = json!(envelope_id);
    env["payload"]["event_id"] = json!(event_id);
    env["payload"]["event"]["ts"] = json!(ts);
    env["payload"]["event"]["text"] = json!("<@U111> Tidy the changelog");
    if let Some(t) = thread_ts {
        env["payload"]["event"]["type"] = json!("message");
        env["payload"]["event"]["thread_ts"] = json!(t);
        env["payload"]["event"]["text"] = json!("and the release notes");
        env["payload"]["event"]["channel_type"] = json!("channel");
    }
    env
}

/// One bus call from any thread (the stand-in's hook runs on its own).
fn bus_call(bus: &Path, method: &str, params: Value) -> Value {
    let mut s = UnixStream::connect(bus).unwrap();
    s.set_read_timeout(Some(HANG)).unwrap();
    let mut line =
        serde_json::to_vec(&json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params}))
            .unwrap();
    line.push(b'\n');
    s.write_all(&line).unwrap();
    let mut answer = String::new();
    BufReader::new(s).read_line(&mut answer).unwrap();
    let v: Value = serde_json::from_str(&answer).unwrap();
    v["result"].clone()
}

fn slack_events_at(bus: &Path) -> Vec<Value> {
    bus_call(bus, "store.events", json!({"after": 0, "limit": 1000}))["events"]
        .as_array()
        .cloned()
        .unwrap_or_default()
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

fn check(suite: &Suite, name: &str) -> CheckRunResult {
    let call = ExtCall::new(
        "slack",
        CheckRunParams {
            check: name.into(),
            ..Default::default()
        },
    );
    let answer = suite
        .call(EXT_CALL, serde_json::to_value(call).unwrap())
        .unwrap();
    serde_json::from_value(answer).unwrap()
}

fn secret(suite: &Suite, name: &str, value: &str) -> PathBuf {
    let dir = suite.dir.join("secrets");
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(name);
    std::fs::write(&path, format!("{value}\n")).unwrap();
    path
}

#[test]
fn socket_mode_keeps_each_event_once_and_acks_only_what_is_kept() {
    let slack = SocketSlack::start(BOT_TOKEN, APP_TOKEN).unwrap();
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
    let suite = Suite::new(Path::new(BIN), "slack-socket", &packages).unwrap();
    let claude = suite.dir.join("bin/claude");
    script(
        &claude,
        &format!("#!/bin/sh\nexec '{BIN}' fake-claude \"$@\"\n"),
    );
    suite.start_all().unwrap();
    std::fs::create_dir_all(suite.dir.join("work")).unwrap();
    let file = |p: PathBuf| format!("file:{}", p.display());
    let doc = json!({
        "connections": [
            {"name": "sl", "type": "slack", "config": {"api_url": slack.api_url},
             "secret_refs": {"bot_token": file(secret(&suite, "bot", BOT_TOKEN)),
                             "app_token": file(secret(&suite, "app", APP_TOKEN)),
                             "signing_secret": file(secret(&suite, "signing", SIGNING_SECRET))}},
            {"name": "sl-old", "type": "slack", "config": {"api_url": slack.api_url},
             "secret_refs": {"bot_token": file(secret(&suite, "bad-bot", BAD_BOT_TOKEN)),
                             "signing_secret": file(secret(&suite, "signing", SIGNING_SECRET))}}
        ],
        "scopes": [{
            "id": "demo",
            "entries": [
                {"type": "slack", "name": "team", "connection": "sl", "config": {"mode": "socket"}},
                {"type": "slack", "name": "old", "connection": "sl-old"}
            ],
            "routes": [{"handler": "slack", "binding": "cc"}],
            "bindings": [{
                "name": "cc", "executor": "claude-code", "connection": "sl",
                "config": {"binary": claude, "dir": suite.dir.join("work"),
                           "env": {"CLAUDE_CONFIG_DIR": suite.dir.join("claude-config")}}
            }]
        }]
    });
    // The socket entry keeps its request path (the connection has a signing secret).
    suite.apply_config(&doc, PATH).unwrap();

    // The package opens the socket with the app token.
    let first = slack.connection(1).unwrap();
    let bus = suite.bus.clone();
    slack.on_ack(move |envelope_id| {
        let event_id = match envelope_id {
            "env-mention" => "Ev-sock-1",
            "env-reply-1" => "Ev-sock-2",
            "env-reply-2" => "Ev-sock-3",
            _ => return "unknown".into(),
        };
        let kept = slack_events_at(&bus)
            .iter()
            .any(|e| e["delivery_id"] == event_id);
        if kept { "kept" } else { "not kept" }.into()
    });

    // An app_mention over the socket: a Work, acked once kept.
    let mention = envelope("env-mention", "Ev-sock-1", "1700000000.000100", None);
    first.send(&mention.to_string()).unwrap();
    let (conn, said) = slack.ack_of("env-mention").unwrap();
    assert_eq!((conn, said.as_str()), (1, "kept"));
    let work = wait_for("the thread's Work", || {
        works(&suite).first()?["id"].as_str().map(str::to_string)
    });
    let row = suite.call("store.work_get", json!({"id": work})).unwrap()["work"].clone();
    assert_eq!(row["display"]["title"], "Tidy the changelog", "{row}");
    assert_eq!(slack_events_at(&suite.bus).len(), 1);

    // The same event over the Events API: kept once.
    let body = serde_json::to_vec(&mention["payload"]).unwrap();
    let ts = (protocol::time::now_ms() / 1000).to_string();
    let r = oc_systest::post(
        suite.http,
        PATH,
        &[
            ("Content-Type", "application/json".to_string()),
            ("X-Slack-Request-Timestamp", ts.clone()),
            (
                "X-Slack-Signature",
                sign(SIGNING_SECRET.as_bytes(), &ts, &body),
            ),
        ],
        &body,
    )
    .unwrap();
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(slack_events_at(&suite.bus).len(), 1, "the Events API copy");
    assert_eq!(works(&suite).len(), 1);

    // Two replies, then `disconnect` before they are all acked: what was not acked
    // comes again on the new connection (as Slack does) and is kept once.
    let root = "1700000000.000100";
    let replies = [
        envelope("env-reply-1", "Ev-sock-2", "1700000001.000200", Some(root)),
        envelope("env-reply-2", "Ev-sock-3", "1700000002.000300", Some(root)),
    ];
    for r in &replies {
        first.send(&r.to_string()).unwrap();
    }
    first
        .send(r#"{"type":"disconnect","reason":"refresh_requested","debug_info":{"host":"applink-standin"}}"#)
        .unwrap();
    let second = slack.connection(2).unwrap();
    assert!(slack.opens() >= 2, "a fresh apps.connections.open");
    let acked: Vec<String> = slack.acks().into_iter().map(|(id, _, _)| id).collect();
    for r in &replies {
        let id = r["envelope_id"].as_str().unwrap();
        if !acked.iter().any(|a| a == id) {
            let mut again = r.clone();
            again["retry_attempt"] = json!(1);
            again["retry_reason"] = json!("timeout");
            second.send(&again.to_string()).unwrap();
        }
    }
    for id in ["env-reply-1", "env-reply-2"] {
        let (_, said) = slack.ack_of(id).unwrap();
        assert_eq!(said, "kept", "{id} acked before it was kept");
    }
    let events = slack_events_at(&suite.bus);
    let mut ids: Vec<&str> = events
        .iter()
        .filter_map(|e| e["delivery_id"].as_str())
        .collect();
    ids.sort();
    assert_eq!(ids, ["Ev-sock-1", "Ev-sock-2", "Ev-sock-3"], "{events:#?}");
    assert_eq!(
        works(&suite).len(),
        1,
        "the replies joined the thread's Work"
    );
    assert!(
        slack.acks().iter().all(|(_, _, said)| said == "kept"),
        "{:?}",
        slack.acks()
    );

    // The doctor: the refused bot token fails `tokens`, naming Slack's code.
    let tokens = check(&suite, "tokens");
    assert_eq!(tokens.status, "fail", "{tokens:?}");
    assert!(tokens.detail.contains("connection sl-old"), "{tokens:?}");
    assert!(tokens.detail.contains("invalid_auth"), "{tokens:?}");
    assert!(tokens.detail.contains("bot_token"), "{tokens:?}");
    assert!(
        tokens
            .items
            .iter()
            .any(|i| i.starts_with("connection sl: bot conduit")),
        "{tokens:?}"
    );
    let up = check(&suite, "socket_mode");
    assert_eq!(up.status, "ok", "{up:?}");
    assert!(up.detail.contains("connected"), "{up:?}");

    // The app manifest of each connection, from the configuration.
    let answer = suite
        .call(
            EXT_CALL,
            json!({"name": "slack", "method": oc_slack::receiver::MANIFEST_METHOD, "params": {}}),
        )
        .unwrap();
    let manifests = answer["manifests"].as_array().cloned().unwrap_or_default();
    let sl = manifests
        .iter()
        .find(|m| m["connection"] == "sl")
        .unwrap_or_else(|| panic!("{answer:#}"));
    assert_eq!(sl["manifest"]["settings"]["socket_mode_enabled"], true);
    let old = manifests
        .iter()
        .find(|m| m["connection"] == "sl-old")
        .unwrap_or_else(|| panic!("{answer:#}"));
    assert_eq!(old["manifest"]["settings"]["socket_mode_enabled"], false);

    // A configuration without the socket entry stops the socket; the entry back
    // starts a new one.
    let mut events_only = doc.clone();
    events_only["scopes"][0]["entries"][0]["config"] = json!({"mode": "events"});
    suite.apply_config(&events_only, PATH).unwrap();
    wait_for("the socket closed by the configuration", || {
        second.is_closed().then_some(())
    });
    let none = check(&suite, "socket_mode");
    assert_eq!(
        (none.status.as_str(), none.detail.as_str()),
        ("ok", "no socket entries")
    );
    suite.apply_config(&doc, PATH).unwrap();
    let third = slack.connection(3).unwrap();

    // The socket goes down and Slack refuses the app token: `socket_mode` fails.
    slack.refuse_open(true);
    third.drop_connection();
    let down = wait_for("the socket_mode check failing", || {
        let c = check(&suite, "socket_mode");
        (c.status == "fail" && c.detail.contains("invalid_auth")).then_some(c)
    });
    assert!(down.detail.contains("connection sl"), "{down:?}");
    assert!(down.detail.contains("app_token"), "{down:?}");

    // No log holds a token or the signing secret.
    for d in [
        Daemon::Broker,
        Daemon::Storaged,
        Daemon::Ingressd,
        Daemon::Extrunner,
    ] {
        let log = suite.log(d);
        for s in [BOT_TOKEN, BAD_BOT_TOKEN, APP_TOKEN, SIGNING_SECRET] {
            assert!(!log.contains(s), "{d:?} logged a secret");
        }
    }
}
