#![allow(clippy::unwrap_used)]
//! The real `oc-webhook-extension` binary as a child process, driven over its
//! stdin and stdout as the host drives it: initialize, configure, webhook.handle
//! (with `secret.resolve` served back), route.match and validate.

use hmac::{Hmac, Mac};
use protocol::wire::{
    ConfigureResult, Event, RouteMatchResult, WebhookHandleParams, WebhookHandleResult,
};
use protocol::{connect, FnHandler, Options, Peer, Request, RpcError};
use serde_json::{json, Value};
use sha2::Sha256;
use std::process::Stdio;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::process::{Child, Command};

const EXE: &str = env!("CARGO_BIN_EXE_oc-webhook-extension");
const SECRET: &str = "It's a Secret to Everybody";
/// Only against hangs: nothing here measures time.
const HANG: Duration = Duration::from_secs(60);

async fn within<F: std::future::Future>(f: F) -> F::Output {
    tokio::time::timeout(HANG, f).await.expect("hung")
}

struct Running {
    _child: Child,
    peer: Peer,
    resolves: Arc<AtomicUsize>,
}

/// Starts the extension; the host side serves `secret.resolve`: connection
/// `hooks` of scope `s` has `secret`, connection `broken` fails.
fn spawn() -> Running {
    let mut child = Command::new(EXE)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let stdin = child.stdin.take().unwrap();
    let stdout = child.stdout.take().unwrap();
    let resolves = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&resolves);
    let host = FnHandler(move |request: Request| {
        let counted = Arc::clone(&counted);
        async move {
            if request.method != "secret.resolve" {
                return Err(RpcError::method_not_found(&request.method));
            }
            let p = request.params_value()?;
            counted.fetch_add(1, Ordering::SeqCst);
            assert_eq!(p["names"], json!(["secret"]), "{p}");
            match (p["scope_id"].as_str(), p["connection"].as_str()) {
                (Some("s"), Some("hooks")) => Ok(json!({"values": {"secret": SECRET}})),
                _ => Err(RpcError::new(
                    protocol::Code::NotFound,
                    "no such connection for this scope",
                )),
            }
        }
    });
    let peer = connect(stdout, stdin, host, Options::named("webhook extension"));
    Running {
        _child: child,
        peer,
        resolves,
    }
}

async fn initialize(ext: &Running) {
    let init = within(ext.peer.call(
        "initialize",
        &json!({
            "protocol_versions": [1],
            "host": {"name": "test-host", "version": "0"},
            "state_dir": std::env::temp_dir(),
        }),
    ))
    .await
    .unwrap();
    assert_eq!(init["protocol_version"], 1);
    let file: Value = serde_json::from_str(oc_webhook::MANIFEST).unwrap();
    assert_eq!(init["manifest"], file);
}

fn entries() -> Value {
    json!({
        "entries": [
            {
                "scope_id": "s", "type": "webhook", "name": "ci", "connection": "hooks",
                "config": {
                    "delivery_id": {"header": "X-Delivery-Id"},
                    "correlate": "/pull_request/number",
                    "event_type_pointer": "/action",
                },
            },
            {
                "scope_id": "s", "type": "webhook", "name": "local",
                "config": {"path": "/local", "signature": {"scheme": "none"}, "allow_unsigned": "loopback"},
            },
            {
                "scope_id": "s", "type": "webhook", "name": "gone", "connection": "broken",
                "config": {"path": "/gone"},
            },
        ],
        "connections": [
            {"name": "hooks", "type": "webhook", "secrets": ["secret"]},
            {"name": "broken", "type": "webhook", "secrets": ["secret"]},
        ],
        "kv": {"stored": 0, "declared": 0},
    })
}

async fn configure(ext: &Running, params: &Value) -> Result<ConfigureResult, protocol::CallError> {
    within(ext.peer.call_as("configure", params)).await
}

fn sign(body: &[u8]) -> String {
    let mut m = Hmac::<Sha256>::new_from_slice(SECRET.as_bytes()).unwrap();
    m.update(body);
    let mac = m.finalize().into_bytes();
    let hex: String = mac.iter().map(|b| format!("{b:02x}")).collect();
    format!("sha256={hex}")
}

fn post(path: &str, headers: &[(&str, &str)], body: &[u8], remote: &str) -> WebhookHandleParams {
    WebhookHandleParams {
        method: "POST".into(),
        path: path.into(),
        headers: headers
            .iter()
            .map(|(k, v)| (k.to_ascii_lowercase(), vec![v.to_string()]))
            .collect(),
        body: body.to_vec(),
        remote_addr: remote.into(),
        ..Default::default()
    }
}

async fn handle(ext: &Running, p: &WebhookHandleParams) -> WebhookHandleResult {
    within(ext.peer.call_as("webhook.handle", p)).await.unwrap()
}

fn body_text(r: &WebhookHandleResult) -> String {
    String::from_utf8_lossy(&r.response.body).into_owned()
}

const PR_BODY: &[u8] =
    br#"{"action":"Opened","pull_request":{"number":12,"title":"Make the build green"}}"#;

#[tokio::test]
async fn deliveries_are_verified_parsed_and_routed() {
    let ext = spawn();
    initialize(&ext).await;
    let configured = configure(&ext, &entries()).await.unwrap();
    let paths: Vec<_> = configured
        .webhooks
        .iter()
        .map(|w| (w.path.as_str(), w.source.as_str()))
        .collect();
    assert_eq!(
        paths,
        [
            ("/webhook/s/ci", "webhook/s/ci"),
            ("/local", "webhook/s/local"),
            ("/gone", "webhook/s/gone"),
        ]
    );
    assert!(configured
        .sources
        .iter()
        .all(|s| s.families == ["webhook.delivery"] && s.scope_id == "s"));

    // A correctly signed delivery: 200, one delivery, the right keys.
    let sig = sign(PR_BODY);
    let good = post(
        "/webhook/s/ci",
        &[
            ("X-Signature-256", &sig),
            ("X-Delivery-Id", "d-1"),
            ("Content-Type", "application/json"),
            ("X-Not-Kept", "x"),
        ],
        PR_BODY,
        "203.0.113.9:41000",
    );
    let r = handle(&ext, &good).await;
    assert_eq!(r.response.status, 200, "{}", body_text(&r));
    assert_eq!(body_text(&r), r#"{"ok":true,"delivery":"d-1"}"#);
    assert_eq!(r.deliveries.len(), 1);
    let d = &r.deliveries[0];
    assert_eq!(d.source, "webhook/s/ci");
    assert_eq!(d.delivery_id, "d-1");
    assert_eq!(d.events.len(), 1);
    let ev = &d.events[0];
    assert_eq!(ev.event_type, "webhook.delivery.opened");
    assert_eq!(ev.keys, ["webhook:s/ci:12"]);
    assert_eq!(ev.payload.schema, "webhook.delivery.v1");
    assert_eq!(
        ev.payload.data,
        json!({
            "scope": "s", "entry": "ci", "delivery_id": "d-1",
            "headers": {"content-type": "application/json", "x-delivery-id": "d-1"},
            "body": serde_json::from_slice::<Value>(PR_BODY).unwrap(),
            "correlation": "12",
        })
    );
    assert_eq!(ext.resolves.load(Ordering::SeqCst), 1);

    // A wrong signature: 401, no deliveries; the secret came from the cache.
    let mut forged = good.clone();
    forged.body = br#"{"action":"closed","pull_request":{"number":12}}"#.to_vec();
    let r = handle(&ext, &forged).await;
    assert_eq!(r.response.status, 401);
    assert_eq!(body_text(&r).trim(), "signature does not match");
    assert!(r.deliveries.is_empty());
    let mut unsigned = good.clone();
    unsigned.headers.remove("x-signature-256");
    let r = handle(&ext, &unsigned).await;
    assert_eq!(r.response.status, 401);
    assert_eq!(body_text(&r).trim(), "missing header X-Signature-256");
    assert!(r.deliveries.is_empty());
    assert_eq!(ext.resolves.load(Ordering::SeqCst), 1);

    // Unsigned: refused from elsewhere, taken from loopback.
    let from = |remote: &str| post("/local/sub", &[], br#"{"hello":"world"}"#, remote);
    let r = handle(&ext, &from("10.0.0.1:5000")).await;
    assert_eq!(r.response.status, 403);
    assert!(r.deliveries.is_empty());
    let r = handle(&ext, &from("127.0.0.1:5000")).await;
    assert_eq!(r.response.status, 200, "{}", body_text(&r));
    assert_eq!(r.deliveries.len(), 1);
    assert_eq!(r.deliveries[0].source, "webhook/s/local");
    let id = &r.deliveries[0].delivery_id;
    assert!(id.starts_with("sha256:") && id.len() == 7 + 64, "{id}");
    assert_eq!(r.deliveries[0].events[0].event_type, "webhook.delivery");
    assert!(r.deliveries[0].events[0].keys.is_empty());

    // Not JSON (but signed): 400. No entry: 404. Not POST: 405.
    let junk = b"not json";
    let sig = sign(junk);
    let r = handle(
        &ext,
        &post(
            "/webhook/s/ci",
            &[("X-Signature-256", &sig), ("X-Delivery-Id", "d-2")],
            junk,
            "10.0.0.1:1",
        ),
    )
    .await;
    assert_eq!(r.response.status, 400);
    assert!(r.deliveries.is_empty());
    let r = handle(&ext, &post("/nowhere", &[], b"{}", "127.0.0.1:1")).await;
    assert_eq!(r.response.status, 404);
    let mut get = good.clone();
    get.method = "GET".into();
    let r = handle(&ext, &get).await;
    assert_eq!(r.response.status, 405);
    assert!(r.deliveries.is_empty());

    // A secret that cannot be resolved: 503 with Retry-After, never 2xx; a failure
    // is not cached, so each request asks again.
    let gone = post(
        "/gone",
        &[("X-Signature-256", "sha256=00")],
        b"{}",
        "10.0.0.1:1",
    );
    for asked in [2, 3] {
        let r = handle(&ext, &gone).await;
        assert_eq!(r.response.status, 503);
        assert_eq!(
            r.response.headers.get("Retry-After").map(String::as_str),
            Some("5")
        );
        assert!(r.deliveries.is_empty());
        assert_eq!(ext.resolves.load(Ordering::SeqCst), asked);
    }

    // route.match on the produced Event.
    let event = Event {
        id: "ev-1".into(),
        event_type: ev.event_type.clone(),
        source: d.source.clone(),
        delivery_id: d.delivery_id.clone(),
        scope_id: "s".into(),
        keys: ev.keys.clone(),
        payload: ev.payload.clone(),
        ..Event::default()
    };
    let matched: RouteMatchResult = within(ext.peer.call_as(
        "route.match",
        &json!({
            "handler": "webhook",
            "route": {"handler": "webhook", "config": {"entry": "ci", "title_pointer": "/pull_request/title"}},
            "scope": {"id": "s"},
            "event": event,
        }),
    ))
    .await
    .unwrap();
    assert!(matched.matched, "{}", matched.reason);
    assert_eq!(
        matched.reason,
        "event type webhook.delivery.opened from entry ci"
    );
    assert_eq!(matched.keys, ["webhook:s/ci:12"]);
    assert_eq!(matched.kind, "");
    let display = matched.display.unwrap();
    assert_eq!(display.title, "Make the build green");
    assert_eq!(display.reference, "12");

    let other: RouteMatchResult = within(ext.peer.call_as(
        "route.match",
        &json!({
            "handler": "webhook",
            "route": {"handler": "webhook", "config": {"entry": "deploy"}},
            "scope": {"id": "s"},
            "event": event,
        }),
    ))
    .await
    .unwrap();
    assert!(!other.matched);
    assert!(other.reason.contains("entry deploy"), "{}", other.reason);

    // configure again: the cache is dropped, so the secret is resolved again.
    configure(&ext, &entries()).await.unwrap();
    let r = handle(&ext, &good).await;
    assert_eq!(r.response.status, 200);
    assert_eq!(ext.resolves.load(Ordering::SeqCst), 4);
    let r = handle(&ext, &good).await;
    assert_eq!(r.response.status, 200);
    assert_eq!(ext.resolves.load(Ordering::SeqCst), 4);

    // And a configure without the entry unregisters it.
    let none = configure(&ext, &json!({"kv": {"stored": 0, "declared": 0}}))
        .await
        .unwrap();
    assert!(none.webhooks.is_empty());
    let r = handle(&ext, &good).await;
    assert_eq!(r.response.status, 404);
}

#[tokio::test]
async fn a_bad_entry_fails_configure_naming_it() {
    let ext = spawn();
    initialize(&ext).await;
    let bad = json!({
        "entries": [{
            "scope_id": "s", "type": "webhook", "name": "ci", "connection": "hooks",
            "config": {"signature": {"format": "sha256=hex"}},
        }],
        "connections": [{"name": "hooks", "type": "webhook", "secrets": ["secret"]}],
    });
    let e = configure(&ext, &bad).await.unwrap_err();
    let rpc = e.rpc().unwrap();
    assert_eq!(rpc.code, -32602);
    assert!(
        rpc.message
            .contains("scope s, entry ci: /signature/format:"),
        "{}",
        rpc.message
    );
    let unsigned_without_connection = json!({
        "entries": [{"scope_id": "s", "type": "webhook", "name": "ci", "config": {}}],
    });
    let e = configure(&ext, &unsigned_without_connection)
        .await
        .unwrap_err();
    assert!(
        e.to_string().contains("scope s, entry ci: connection:"),
        "{e}"
    );

    let v: Value = within(ext.peer.call(
        "validate",
        &json!({"kind": "extension", "type": "webhook", "name": "ci", "config": {"correlate": "nope"}}),
    ))
    .await
    .unwrap();
    assert_eq!(v["diagnostics"][0]["path"], "/correlate");
}
