#![allow(clippy::unwrap_used)]
//! Webhook intake end to end, with real daemons on real sockets: ingressd (socket
//! activated), extrunner with the bundled webhook and github extensions, storaged on a
//! real SQLite file, all through the broker.

use oc_systest::{post, sign_sha256, Daemon, Response, Suite, HANG};
use serde_json::{json, Value};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::time::Duration;

mod common;
use common::*;

/// Send `bytes` on a new connection and read the answer to the end.
fn raw(suite: &Suite, bytes: &[u8]) -> Response {
    let mut s = TcpStream::connect(suite.http).unwrap();
    s.set_read_timeout(Some(HANG)).unwrap();
    s.write_all(bytes).unwrap();
    let mut answer = Vec::new();
    s.read_to_end(&mut answer).unwrap();
    oc_systest::parse_response(&answer).unwrap()
}

fn get(suite: &Suite, path: &str) -> Response {
    raw(
        suite,
        format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").as_bytes(),
    )
}

#[test]
fn signed_deliveries_are_kept_once_and_everything_else_gets_its_answer() {
    let suite = started("intake");
    let body = br#"{"number": 7, "title": "the build is red"}"#;

    // A signed delivery: 200, and in the store.
    let first = deliver(&suite, "d-1", body).unwrap();
    assert_eq!(first.status, 200, "{}", first.text());
    let events = hook_events(&suite);
    assert_eq!(events.len(), 1, "{events:?}");
    assert_eq!(events[0]["delivery_id"], "d-1");
    assert_eq!(events[0]["scope_id"], "demo");
    assert_eq!(events[0]["type"], "webhook.delivery");
    assert_eq!(events[0]["keys"], json!(["webhook:demo/ci:7"]));

    // The same delivery again: the same answer, said to be a duplicate, nothing added.
    let again = deliver(&suite, "d-1", body).unwrap();
    assert_eq!(again.status, 200);
    let mut expected: Value = serde_json::from_slice(&first.body).unwrap();
    assert!(expected.get("duplicate").is_none(), "{expected}");
    expected["duplicate"] = json!(true);
    let again_body: Value = serde_json::from_slice(&again.body).unwrap();
    assert_eq!(again_body, expected);
    assert_eq!(hook_events(&suite).len(), 1);

    // A bad signature: 401, nothing added.
    let forged = post(
        suite.http,
        HOOK,
        &[
            ("X-Delivery-Id", "d-2".into()),
            ("X-Signature-256", sign_sha256(b"not the secret", body)),
        ],
        body,
    )
    .unwrap();
    assert_eq!(forged.status, 401, "{}", forged.text());
    assert_eq!(hook_events(&suite).len(), 1);

    // An unknown path: 404.
    let unknown = post(suite.http, "/hooks/nobody", &[], body).unwrap();
    assert_eq!(unknown.status, 404);

    // An oversized body: 413 from its Content-Length, before any of it is sent.
    let big = raw(
        &suite,
        format!(
            "POST {HOOK} HTTP/1.1\r\nHost: x\r\nContent-Length: {}\r\n\r\n",
            25 * 1024 * 1024 + 1
        )
        .as_bytes(),
    );
    assert_eq!(big.status, 413, "{}", big.text());

    // A slow sender: half a body, then nothing; cut off by the body timeout (1 s here).
    let slow = raw(
        &suite,
        format!("POST {HOOK} HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{{\"half\":")
            .as_bytes(),
    );
    assert_eq!(slow.status, 408, "{}", slow.text());
    assert_eq!(hook_events(&suite).len(), 1);

    // Health and metrics.
    let health = get(&suite, "/healthz");
    assert_eq!(health.status, 200, "{}", health.text());
    let metrics = get(&suite, "/metrics").text();
    for line in [
        "ingressd_deliveries_total{owner=\"webhook\",source=\"webhook/demo/ci\",outcome=\"accepted\"} 2",
        "ingressd_deliveries_total{owner=\"webhook\",source=\"webhook/demo/ci\",outcome=\"bad_signature\"} 1",
    ] {
        assert!(metrics.contains(line), "{line} in {metrics}");
    }
}

fn fixture(name: &str) -> Vec<u8> {
    std::fs::read(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../extensions/github/tests/fixtures")
            .join(name),
    )
    .unwrap()
}

fn github(suite: &Suite, event: &str, id: &str, body: &[u8]) -> Response {
    post(
        suite.http,
        "/github/demo/repo",
        &[
            ("Content-Type", "application/json".into()),
            ("X-GitHub-Event", event.into()),
            ("X-GitHub-Delivery", id.into()),
            (
                "X-Hub-Signature-256",
                sign_sha256(GH_SECRET.as_bytes(), body),
            ),
        ],
        body,
    )
    .unwrap()
}

#[test]
fn github_deliveries_become_events_of_their_families() {
    let suite = started("github");
    let ping = github(&suite, "ping", "p-1", &fixture("ping.json"));
    assert_eq!(ping.status, 200, "{}", ping.text());

    let opened = fixture("issues.opened.json");
    let r = github(
        &suite,
        "issues",
        "72d3162e-cc78-11e3-81ab-4c9367dc0958",
        &opened,
    );
    assert_eq!(r.status, 200, "{}", r.text());
    let comment = fixture("issue_comment.created.json");
    let r = github(&suite, "issue_comment", "c-1", &comment);
    assert_eq!(r.status, 200, "{}", r.text());
    // Redelivered from GitHub's UI: the same delivery ID, nothing added.
    let r = github(
        &suite,
        "issues",
        "72d3162e-cc78-11e3-81ab-4c9367dc0958",
        &opened,
    );
    assert_eq!(r.status, 200, "{}", r.text());

    let events: Vec<Value> = suite
        .events()
        .unwrap()
        .into_iter()
        .filter(|e| e["source"] == "github/demo/repo")
        .collect();
    let types: Vec<&str> = events.iter().map(|e| e["type"].as_str().unwrap()).collect();
    assert_eq!(
        types,
        vec!["github.issue.opened", "github.issue_comment.created"]
    );
    assert_eq!(events[0]["schema"], "github.issue.v1");
    assert_eq!(events[0]["keys"][0], "github:codertocat/hello-world#1");

    // A forged one is refused.
    let mut forged = opened.clone();
    forged.extend_from_slice(b" ");
    let r = post(
        suite.http,
        "/github/demo/repo",
        &[
            ("X-GitHub-Event", "issues".into()),
            ("X-GitHub-Delivery", "forged".into()),
            (
                "X-Hub-Signature-256",
                sign_sha256(GH_SECRET.as_bytes(), &opened),
            ),
        ],
        &forged,
    )
    .unwrap();
    assert_eq!(r.status, 401, "{}", r.text());
}

#[test]
fn connections_made_while_ingressd_is_down_are_served_once_it_is_back() {
    let suite = started("activation");
    suite.kill(Daemon::Ingressd);
    // The socket stays open (the harness holds it, as systemd does): connecting and
    // sending succeed while nobody serves it.
    let addr = suite.http;
    let body = br#"{"number": 1}"#.to_vec();
    let sig = sign_sha256(SECRET.as_bytes(), &body);
    let pending = std::thread::spawn(move || {
        post(
            addr,
            HOOK,
            &[
                ("X-Delivery-Id", "while-down".into()),
                ("X-Signature-256", sig),
            ],
            &body,
        )
    });
    std::thread::sleep(Duration::from_millis(300));
    assert!(!pending.is_finished(), "answered while ingressd was down");
    suite.start(Daemon::Ingressd).unwrap();
    let r = pending.join().unwrap().unwrap();
    assert_eq!(r.status, 200, "{}", r.text());
    let events = hook_events(&suite);
    assert_eq!(events.len(), 1);
    assert_eq!(events[0]["delivery_id"], "while-down");
}

/// A configuration generation the webhook extension refuses: `ext.inspect` and
/// `ext.registrations` say so with the extension's reason (its pointer), the earlier
/// registration keeps serving, and the next generation it takes clears the refusal.
#[test]
fn a_refused_configuration_is_shown_and_the_previous_one_keeps_serving() {
    let suite = started("refused");
    let mut bad = config(&suite);
    bad["scopes"][0]["entries"][0]["config"]["signature"] = json!({"scheme": "sha1"});
    suite
        .call("store.config_apply", json!({ "config": bad }))
        .unwrap();
    let deadline = std::time::Instant::now() + HANG;
    let refusal = loop {
        let v = suite
            .call("ext.inspect", json!({"name": "webhook"}))
            .unwrap();
        if let Some(r) = v["refusal"].as_str() {
            break r.to_owned();
        }
        assert!(std::time::Instant::now() < deadline, "no refusal: {v}");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(refusal.contains("/signature/scheme"), "{refusal}");
    let regs = suite.call("ext.registrations", json!({})).unwrap();
    let webhook = regs["extensions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["name"] == "webhook")
        .unwrap()
        .clone();
    assert!(webhook["refusal"]["generation"].is_string(), "{webhook}");
    // The earlier generation's path is still served.
    let r = deliver(&suite, "kept-1", br#"{"number": 1}"#).unwrap();
    assert_eq!(r.status, 200, "{}", r.text());
    // A good generation again: the refusal is gone.
    suite
        .call("store.config_apply", json!({ "config": config(&suite) }))
        .unwrap();
    let deadline = std::time::Instant::now() + HANG;
    loop {
        let v = suite
            .call("ext.inspect", json!({"name": "webhook"}))
            .unwrap();
        if v["refusal"].is_null() {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "still refused: {v}");
        std::thread::sleep(Duration::from_millis(50));
    }
}
