//! The real `oc-github-extension` binary as a child process, driven over its
//! stdin and stdout the way extrunner and ingressd drive it: initialize,
//! configure, `webhook.handle` (serving `secret.resolve` as the host), and
//! `route.match` on the Event a delivery carried.

#![allow(clippy::unwrap_used)]

mod common;

use std::process::Stdio;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::*;
use protocol::wire::{
    ConfigureParams, ConfigureResult, Event, HostInfo, InitializeParams, Route, RouteMatchParams,
    RouteMatchResult, Scope, SecretResolveParams, SecretResolveResult, WebhookHandleParams,
    WebhookHandleResult,
};
use protocol::{connect, Code, FnHandler, Options, Peer, RpcError};
use serde_json::{json, Value};

const EXE: &str = env!("CARGO_BIN_EXE_oc-github-extension");

/// Turns a hang into a failure; never a timing assertion.
const HANG: Duration = Duration::from_secs(60);

async fn within<F: std::future::Future>(f: F) -> F::Output {
    tokio::time::timeout(HANG, f).await.expect("hung")
}

/// The host's side of `secret.resolve`: what it was asked, and whether it fails.
#[derive(Default)]
struct Secrets {
    calls: AtomicUsize,
    fail: AtomicBool,
    asked: Mutex<Vec<SecretResolveParams>>,
}

struct Running {
    peer: Peer,
    secrets: Arc<Secrets>,
    _child: tokio::process::Child,
}

async fn start() -> Running {
    let mut child = tokio::process::Command::new(EXE)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let stdin = child.stdin.take().unwrap();
    let stdout = child.stdout.take().unwrap();
    let secrets = Arc::new(Secrets::default());
    let served = secrets.clone();
    let handler = FnHandler(move |request: protocol::Request| {
        let secrets = served.clone();
        async move {
            if request.method != "secret.resolve" {
                return Err(RpcError::method_not_found(&request.method));
            }
            let params: SecretResolveParams = request.params()?;
            secrets.calls.fetch_add(1, Ordering::SeqCst);
            secrets.asked.lock().unwrap().push(params.clone());
            if secrets.fail.load(Ordering::SeqCst) {
                return Err(RpcError::new(Code::Unavailable, "the secret store is down"));
            }
            let mut result = SecretResolveResult::default();
            for name in params.names {
                if name == "webhook_secret" {
                    let value = String::from_utf8(SECRET.to_vec()).unwrap();
                    result.values.insert(name, value);
                }
            }
            Ok(serde_json::to_value(result).unwrap())
        }
    });
    let peer = connect(stdout, stdin, handler, Options::named("extension github"));
    let init: Value = within(peer.call_typed(&InitializeParams {
        protocol_versions: vec![1],
        host: HostInfo {
            name: "open-conduit".into(),
            version: "test".into(),
        },
        state_dir: std::env::temp_dir().display().to_string(),
        ..Default::default()
    }))
    .await
    .map(|r| serde_json::to_value(r).unwrap())
    .unwrap();
    assert_eq!(init["protocol_version"], 1);
    let file: Value = serde_json::from_str(oc_github::MANIFEST).unwrap();
    assert_eq!(init["manifest"], file);
    Running {
        peer,
        secrets,
        _child: child,
    }
}

async fn configure(ext: &Running, params: &ConfigureParams) -> Result<ConfigureResult, String> {
    within(ext.peer.call_typed(params))
        .await
        .map_err(|e| e.to_string())
}

async fn handle(ext: &Running, params: &WebhookHandleParams) -> WebhookHandleResult {
    within(ext.peer.call_typed(params)).await.unwrap()
}

fn hello() -> ConfigureParams {
    configure_params(vec![entry(json!({"repository": REPO}))])
}

#[tokio::test]
async fn a_signed_issue_becomes_a_delivery_that_routes_into_work() {
    let ext = start().await;
    let configured = configure(&ext, &hello()).await.unwrap();
    assert_eq!(configured.sources.len(), 1);
    assert_eq!(configured.sources[0].name, "github/s1/hello");
    assert_eq!(configured.webhooks[0].path, "/github/s1/hello");

    // A correctly signed issues/opened delivery.
    let delivery_id = "72d3162e-cc78-11e3-81ab-4c9367dc0958";
    let r = handle(&ext, &request("issues", delivery_id, ISSUES_OPENED, SECRET)).await;
    assert_eq!(r.response.status, 200);
    assert_eq!(body_json(&r.response.body), json!({"ok": true}));
    assert_eq!(r.deliveries.len(), 1);
    let delivery = &r.deliveries[0];
    assert_eq!(delivery.source, "github/s1/hello");
    assert_eq!(delivery.delivery_id, delivery_id);
    assert_eq!(delivery.events.len(), 1);
    let event = &delivery.events[0];
    assert_eq!(event.event_type, "github.issue.opened");
    assert_eq!(
        event.keys,
        vec!["github:codertocat/hello-world#1".to_string()]
    );
    assert_eq!(event.payload.schema, "github.issue.v1");
    {
        let asked = ext.secrets.asked.lock().unwrap();
        assert_eq!(asked.len(), 1);
        assert_eq!(asked[0].scope_id, "s1");
        assert_eq!(asked[0].connection, "gh");
        assert_eq!(asked[0].names, vec!["webhook_secret".to_string()]);
    }

    // A bad signature: 401, nothing delivered.
    let r = handle(
        &ext,
        &request("issues", "d-2", ISSUES_OPENED, b"not the secret"),
    )
    .await;
    assert_eq!(r.response.status, 401);
    assert!(r.deliveries.is_empty());
    assert!(!r.response.body.is_empty());

    // A ping: 200, nothing delivered.
    let r = handle(&ext, &request("ping", "d-3", PING, SECRET)).await;
    assert_eq!(r.response.status, 200);
    assert!(r.deliveries.is_empty());
    assert_eq!(body_json(&r.response.body)["ok"], true);

    // The secret was resolved once and cached for the configuration.
    assert_eq!(ext.secrets.calls.load(Ordering::SeqCst), 1);

    // route.match on the Event the delivery carried, as the host accepted it.
    let accepted = Event {
        id: "ev-1".into(),
        sequence: 1,
        event_type: event.event_type.clone(),
        source: delivery.source.clone(),
        delivery_id: delivery.delivery_id.clone(),
        scope_id: "s1".into(),
        keys: event.keys.clone(),
        payload: event.payload.clone(),
        occurred_at: event.occurred_at.clone(),
        accepted_at: "2026-10-25T09:00:00Z".into(),
        ..Default::default()
    };
    let matched: RouteMatchResult = within(ext.peer.call_typed(&RouteMatchParams {
        handler: "github".into(),
        route: Route {
            handler: "github".into(),
            binding: "agent".into(),
            config: json!({"events": ["github.issue.opened"], "labels": ["bug"]}),
        },
        scope: Scope {
            id: "s1".into(),
            ..Default::default()
        },
        event: accepted,
        work: None,
    }))
    .await
    .unwrap();
    assert!(matched.matched, "{}", matched.reason);
    assert!(!matched.reason.is_empty());
    assert_eq!(matched.keys, event.keys);
    let display = matched.display.unwrap();
    display.validate().unwrap();
    assert_eq!(display.title, "Spelling error in the README file");
    assert_eq!(display.reference, "#1");
    assert_eq!(display.requester, "Codertocat");
    assert_eq!(display.links[0].label, "Issue #1");
    assert_eq!(
        display.links[0].url,
        "https://github.com/Codertocat/Hello-World/issues/1"
    );

    // A new configure drops the cached secret: the next delivery resolves again.
    configure(&ext, &hello()).await.unwrap();
    let r = handle(&ext, &request("issues", "d-4", ISSUES_OPENED, SECRET)).await;
    assert_eq!(r.response.status, 200);
    assert_eq!(ext.secrets.calls.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn a_secret_that_cannot_be_resolved_is_503_retry_after_and_nothing_delivered() {
    let ext = start().await;
    configure(&ext, &hello()).await.unwrap();
    ext.secrets.fail.store(true, Ordering::SeqCst);
    let r = handle(&ext, &request("issues", "d-1", ISSUES_OPENED, SECRET)).await;
    assert_eq!(r.response.status, 503);
    assert_eq!(
        r.response.headers.get("Retry-After").map(String::as_str),
        Some("5")
    );
    assert!(r.deliveries.is_empty());
    // A failure is not cached: once the store is back, the delivery goes through.
    ext.secrets.fail.store(false, Ordering::SeqCst);
    let r = handle(&ext, &request("issues", "d-1", ISSUES_OPENED, SECRET)).await;
    assert_eq!(r.response.status, 200);
    assert_eq!(r.deliveries.len(), 1);
}

#[tokio::test]
async fn configure_refuses_an_entry_without_a_connection_and_keeps_serving_the_last_one() {
    let ext = start().await;
    configure(&ext, &hello()).await.unwrap();
    let mut broken = entry(json!({"repository": REPO}));
    broken.connection = String::new();
    let e = configure(&ext, &configure_params(vec![broken]))
        .await
        .unwrap_err();
    assert!(
        e.contains("scope s1") && e.contains("entry hello") && e.contains("connection"),
        "{e}"
    );
    // The refused configure replaced nothing.
    let r = handle(&ext, &request("issues", "d-1", ISSUES_OPENED, SECRET)).await;
    assert_eq!(r.response.status, 200);
    // And nothing is served at a path no entry covers, without asking for secrets.
    let calls = ext.secrets.calls.load(Ordering::SeqCst);
    let mut elsewhere = request("issues", "d-2", ISSUES_OPENED, SECRET);
    elsewhere.path = "/github/s2/other".into();
    let r = handle(&ext, &elsewhere).await;
    assert_eq!(r.response.status, 404);
    assert!(r.deliveries.is_empty());
    assert_eq!(ext.secrets.calls.load(Ordering::SeqCst), calls);
}
