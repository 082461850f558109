//! The Events API intake (`webhook.handle`) on Slack's own payloads (the fixtures'
//! README names them): the v0 signature and its timestamp window, the
//! `url_verification` challenge, which events become an Event (and of which type,
//! key and delivery ID), which are ignored, and the entries' configs.

#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;

use oc_slack::config::{self, Registry};
use oc_slack::intake;
use oc_slack::signature::{self, sign};
use protocol::wire::{
    ConfigureParams, Connection, Entry, WebhookHandleParams, WebhookHandleResult,
};
use serde_json::{json, Value};

const SECRET: &[u8] = b"8f742231b10e8888abcd99yyyzzz85a5";
const NOW: i64 = 1_610_241_800;
const APP_MENTION: &[u8] = include_bytes!("fixtures/events/app_mention.json");
const MESSAGE: &[u8] = include_bytes!("fixtures/events/message.channels.json");
const BLOCK_ACTIONS: &[u8] = include_bytes!("fixtures/events/block_actions.json");

fn entry(config: Value) -> Entry {
    Entry {
        scope_id: "s1".into(),
        entry_type: "slack".into(),
        name: "team".into(),
        connection: "sl".into(),
        config,
        ..Default::default()
    }
}

fn params(entries: Vec<Entry>) -> ConfigureParams {
    ConfigureParams {
        entries,
        connections: vec![Connection {
            name: "sl".into(),
            connection_type: "slack".into(),
            config: json!({}),
            secrets: vec!["bot_token".into(), "signing_secret".into()],
        }],
        ..Default::default()
    }
}

fn registry(config: Value) -> Registry {
    Registry::from_params(&params(vec![entry(config)])).unwrap()
}

/// A POST of `body` to the entry's default path, signed at `timestamp` under `secret`.
fn request(body: &[u8], timestamp: i64, secret: &[u8]) -> WebhookHandleParams {
    let ts = timestamp.to_string();
    let mut headers = BTreeMap::new();
    headers.insert("X-Slack-Request-Timestamp".to_string(), vec![ts.clone()]);
    headers.insert(
        "X-Slack-Signature".to_string(),
        vec![sign(secret, &ts, body)],
    );
    headers.insert(
        "Content-Type".to_string(),
        vec!["application/json".to_string()],
    );
    WebhookHandleParams {
        method: "POST".into(),
        path: "/slack/s1/team".into(),
        headers,
        body: body.to_vec(),
        ..Default::default()
    }
}

fn handle(registry: &Registry, req: &WebhookHandleParams) -> WebhookHandleResult {
    match intake::precheck(registry, req) {
        Ok(entry) => intake::process(entry, SECRET, req, NOW),
        Err(answer) => intake::answer_only(answer),
    }
}

fn body_text(r: &WebhookHandleResult) -> String {
    String::from_utf8_lossy(&r.response.body).into_owned()
}

fn fixture(bytes: &[u8]) -> Value {
    serde_json::from_slice(bytes).unwrap()
}

fn bytes(v: &Value) -> Vec<u8> {
    serde_json::to_vec(v).unwrap()
}

#[test]
fn the_signature_is_slacks_v0() {
    // python-slack-sdk tests/slack_sdk/signature/test_signature_verifier.py (Slack's documented example).
    let body = b"token=xyzz0WbapA4vBCDEFasx0q6G&team_id=T1DC2JH3J&team_domain=testteamnow&channel_id=G8PSS9T3V&channel_name=foobar&user_id=U2CERLKJA&user_name=roadrunner&command=%2Fwebhook-collect&text=&response_url=https%3A%2F%2Fhooks.slack.com%2Fcommands%2FT1DC2JH3J%2F397700885554%2F96rGlfmibIGlgcZRskXaIFfN&trigger_id=398738663015.47445629121.803a0bc887a14d10d2c447fce8b6703c";
    assert_eq!(
        sign(b"8f742231b10e8888abcd99yyyzzz85a5", "1531420618", body),
        "v0=a2114d57b48eac39b9ad189dd8316235a7b4a8d21a10bd27519666489c69b503"
    );
    assert_eq!(
        signature::verify(
            b"8f742231b10e8888abcd99yyyzzz85a5",
            Some("1531420618"),
            Some("v0=a2114d57b48eac39b9ad189dd8316235a7b4a8d21a10bd27519666489c69b503"),
            body,
            1_531_420_618 + 10,
        ),
        Ok(())
    );
}

#[test]
fn a_signed_app_mention_is_one_event_keyed_by_its_thread() {
    let reg = registry(Value::Null);
    let r = handle(&reg, &request(APP_MENTION, NOW, SECRET));
    assert_eq!(r.response.status, 200, "{}", body_text(&r));
    assert_eq!(r.deliveries.len(), 1);
    let d = &r.deliveries[0];
    assert_eq!(d.source, "slack/s1/team");
    assert_eq!(d.delivery_id, "Ev111");
    assert_eq!(d.events.len(), 1);
    let e = &d.events[0];
    assert_eq!(e.event_type, "slack.message.app_mention");
    assert_eq!(
        e.keys,
        vec!["slack:T111/C111/1610241741.000200".to_string()]
    );
    assert_eq!(e.payload.schema, "slack.message.v1");
    assert_eq!(e.payload.data["user"], "U222");
    assert_eq!(e.payload.data["thread_ts"], "1610241741.000200");
    assert_eq!(e.payload.data["kind"], "app_mention");
    assert_eq!(e.occurred_at, "2021-01-10T01:22:21.000Z");
}

#[test]
fn a_retry_and_a_replay_carry_the_same_delivery_id() {
    let reg = registry(Value::Null);
    let first = handle(&reg, &request(APP_MENTION, NOW, SECRET));
    let mut retry = request(APP_MENTION, NOW + 60, SECRET);
    retry
        .headers
        .insert("X-Slack-Retry-Num".into(), vec!["1".into()]);
    retry
        .headers
        .insert("X-Slack-Retry-Reason".into(), vec!["http_timeout".into()]);
    let second = handle(&reg, &retry);
    assert_eq!(second.response.status, 200);
    assert_eq!(
        first.deliveries[0].delivery_id,
        second.deliveries[0].delivery_id
    );
    assert_eq!(first.deliveries[0].events, second.deliveries[0].events);
}

#[test]
fn bad_missing_and_stale_signatures_are_401_and_deliver_nothing() {
    let reg = registry(Value::Null);
    let cases: Vec<(&str, WebhookHandleParams)> = vec![
        ("wrong secret", request(APP_MENTION, NOW, b"another secret")),
        ("too old", request(APP_MENTION, NOW - 301, SECRET)),
        ("from the future", request(APP_MENTION, NOW + 301, SECRET)),
        ("no signature", {
            let mut r = request(APP_MENTION, NOW, SECRET);
            r.headers.remove("X-Slack-Signature");
            r
        }),
        ("no timestamp", {
            let mut r = request(APP_MENTION, NOW, SECRET);
            r.headers.remove("X-Slack-Request-Timestamp");
            r
        }),
        ("timestamp changed after signing", {
            let mut r = request(APP_MENTION, NOW, SECRET);
            r.headers.insert(
                "X-Slack-Request-Timestamp".into(),
                vec![(NOW + 1).to_string()],
            );
            r
        }),
        ("body changed after signing", {
            let mut r = request(APP_MENTION, NOW, SECRET);
            r.body = String::from_utf8(r.body)
                .unwrap()
                .replace("U222", "U999")
                .into_bytes();
            r
        }),
        ("malformed", {
            let mut r = request(APP_MENTION, NOW, SECRET);
            r.headers
                .insert("X-Slack-Signature".into(), vec!["sha256=abc".into()]);
            r
        }),
    ];
    for (what, req) in cases {
        let r = handle(&reg, &req);
        assert_eq!(r.response.status, 401, "{what}: {}", body_text(&r));
        assert!(r.deliveries.is_empty(), "{what}");
    }
    // At the edge of the window it is still taken.
    assert_eq!(
        handle(&reg, &request(APP_MENTION, NOW - 300, SECRET))
            .deliveries
            .len(),
        1
    );
}

#[test]
fn url_verification_is_answered_only_when_signed() {
    let reg = registry(Value::Null);
    let body = br#"{"token":"Jhj5dZrVaK7ZwHHjRyZWjbDl","challenge":"3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P","type":"url_verification"}"#;
    let r = handle(&reg, &request(body, NOW, SECRET));
    assert_eq!(r.response.status, 200);
    assert!(r.deliveries.is_empty());
    let answer: Value = serde_json::from_slice(&r.response.body).unwrap();
    assert_eq!(
        answer["challenge"],
        "3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P"
    );
    let unsigned = handle(&reg, &request(body, NOW, b"not the secret"));
    assert_eq!(unsigned.response.status, 401);
    assert!(!body_text(&unsigned).contains("3eZbrw1aBm"));
}

#[test]
fn direct_messages_and_thread_replies_are_events_and_channel_chatter_is_not() {
    let reg = registry(Value::Null);
    // A channel message outside a thread (the fixture as it is): ignored.
    let r = handle(&reg, &request(MESSAGE, NOW, SECRET));
    assert_eq!(r.response.status, 200);
    assert!(r.deliveries.is_empty(), "{}", body_text(&r));
    assert!(body_text(&r).contains("outside a thread"));

    // The same message in a direct message.
    let mut im = fixture(MESSAGE);
    im["event"]["channel"] = json!("D111");
    im["event"]["channel_type"] = json!("im");
    im["event_id"] = json!("Ev222");
    let r = handle(&reg, &request(&bytes(&im), NOW, SECRET));
    assert_eq!(r.deliveries.len(), 1, "{}", body_text(&r));
    let e = &r.deliveries[0].events[0];
    assert_eq!(e.event_type, "slack.message.im");
    assert_eq!(
        e.keys,
        vec!["slack:T111/D111/1610241741.000200".to_string()]
    );

    // A reply in a thread: keyed by the thread's root.
    let mut reply = fixture(MESSAGE);
    reply["event"]["thread_ts"] = json!("1610241000.000100");
    reply["event_id"] = json!("Ev333");
    let r = handle(&reg, &request(&bytes(&reply), NOW, SECRET));
    assert_eq!(r.deliveries.len(), 1, "{}", body_text(&r));
    let e = &r.deliveries[0].events[0];
    assert_eq!(e.event_type, "slack.message.reply");
    assert_eq!(
        e.keys,
        vec!["slack:T111/C111/1610241000.000100".to_string()]
    );
    assert_eq!(e.payload.data["thread_ts"], "1610241000.000100");
    assert_eq!(e.payload.data["ts"], "1610241741.000200");
}

#[test]
fn bots_edits_and_other_conversations_are_ignored() {
    let mut reply = fixture(MESSAGE);
    reply["event"]["thread_ts"] = json!("1610241000.000100");
    let variants: Vec<(&str, Value)> = vec![
        ("a bot's message", {
            let mut v = reply.clone();
            v["event"]["bot_id"] = json!("B111");
            v
        }),
        ("a bot_message", {
            let mut v = reply.clone();
            v["event"]["subtype"] = json!("bot_message");
            v
        }),
        ("an edit", {
            let mut v = reply.clone();
            v["event"]["subtype"] = json!("message_changed");
            v
        }),
        ("a reply mentioning the app (its app_mention is taken)", {
            let mut v = reply.clone();
            v["event"]["text"] = json!("<@U333> again");
            v
        }),
        ("another event type", {
            let mut v = reply.clone();
            v["event"]["type"] = json!("reaction_added");
            v
        }),
    ];
    let reg = registry(Value::Null);
    for (what, v) in variants {
        let r = handle(&reg, &request(&bytes(&v), NOW, SECRET));
        assert_eq!(r.response.status, 200, "{what}");
        assert!(r.deliveries.is_empty(), "{what}: {}", body_text(&r));
    }
    // An allow-list without C111 ignores the reply; with it, takes it.
    let only = registry(json!({"channels": ["C222", "im"]}));
    let r = handle(&only, &request(&bytes(&reply), NOW, SECRET));
    assert!(r.deliveries.is_empty());
    assert!(body_text(&r).contains("not in the entry's channels"));
    let with = registry(json!({"channels": ["C111"]}));
    assert_eq!(
        handle(&with, &request(&bytes(&reply), NOW, SECRET))
            .deliveries
            .len(),
        1
    );
    // `im` takes every direct message.
    let mut im = fixture(MESSAGE);
    im["event"]["channel"] = json!("D111");
    im["event"]["channel_type"] = json!("im");
    assert_eq!(
        handle(&only, &request(&bytes(&im), NOW, SECRET))
            .deliveries
            .len(),
        1
    );
}

#[test]
fn interactivity_is_verified_before_it_is_acted_on() {
    let reg = registry(Value::Null);
    let payload = std::str::from_utf8(BLOCK_ACTIONS).unwrap();
    let body = format!("payload={}", oc_slack::api::percent_encode(payload));
    let mut req = request(body.as_bytes(), NOW, SECRET);
    req.headers.insert(
        "Content-Type".into(),
        vec!["application/x-www-form-urlencoded".into()],
    );
    let r = handle(&reg, &req);
    assert_eq!(r.response.status, 200);
    assert!(r.deliveries.is_empty());
    assert!(body_text(&r).contains("block_actions"), "{}", body_text(&r));
    let mut forged = req.clone();
    forged.headers.insert(
        "X-Slack-Signature".into(),
        vec![sign(b"x", &NOW.to_string(), body.as_bytes())],
    );
    assert_eq!(handle(&reg, &forged).response.status, 401);
}

#[test]
fn method_path_and_size_are_checked_first() {
    let reg = registry(Value::Null);
    let mut get = request(APP_MENTION, NOW, SECRET);
    get.method = "GET".into();
    assert_eq!(handle(&reg, &get).response.status, 405);
    let mut other = request(APP_MENTION, NOW, SECRET);
    other.path = "/slack/s1/other".into();
    assert_eq!(handle(&reg, &other).response.status, 404);
    let big = vec![b' '; intake::MAX_BODY_BYTES + 1];
    let r = handle(&reg, &request(&big, NOW, SECRET));
    assert_eq!(r.response.status, 413);
    assert!(body_text(&r).contains(&intake::MAX_BODY_BYTES.to_string()));
    let r = handle(&reg, &request(b"[1, 2]", NOW, SECRET));
    assert_eq!(r.response.status, 400);
}

#[test]
fn configure_registers_the_request_path_and_names_bad_fields() {
    let reg = registry(Value::Null);
    let result = reg.configure_result();
    assert_eq!(result.webhooks.len(), 1);
    assert_eq!(result.webhooks[0].path, "/slack/s1/team");
    assert_eq!(result.sources[0].name, "slack/s1/team");
    assert_eq!(
        result.sources[0].families,
        vec!["slack.message".to_string()]
    );
    let custom = registry(json!({"path": "/slack/acme/"}));
    assert_eq!(custom.configure_result().webhooks[0].path, "/slack/acme");
    // Socket Mode keeps the path only while the connection has a signing secret
    // (interactivity, and events still sent over HTTP: the same source).
    let mut p = params(vec![entry(json!({"mode": "socket"}))]);
    p.connections[0].secrets.push("app_token".into());
    let kept = Registry::from_params(&p).unwrap().configure_result();
    assert_eq!(kept.webhooks.len(), 1);
    assert_eq!(kept.webhooks[0].source, kept.sources[0].name);
    p.connections[0].secrets = vec!["bot_token".into(), "app_token".into()];
    assert!(Registry::from_params(&p)
        .unwrap()
        .configure_result()
        .webhooks
        .is_empty());

    let bad = |config: Value| config::parse_entry(&config).unwrap_err();
    let e = bad(json!({"channels": ["C111", "general"]}));
    assert_eq!(e.pointer, "/channels/1");
    let e = bad(json!({"mode": "rtm"}));
    assert_eq!(e.pointer, "/mode");
    let e = bad(json!({"path": "/github/x"}));
    assert_eq!(e.pointer, "/path");
    let e = bad(json!({"chanels": []}));
    assert_eq!(e.pointer, "/chanels");
    let e = config::check_connection_config(&json!({"api_url": "ftp://x"})).unwrap_err();
    assert_eq!(e.pointer, "/api_url");
    // An events entry on a connection without a signing secret is refused.
    let mut p = params(vec![entry(Value::Null)]);
    p.connections[0].secrets = vec!["bot_token".into()];
    let e = Registry::from_params(&p).unwrap_err();
    assert!(e.message.contains("signing_secret"), "{}", e.message);
}
