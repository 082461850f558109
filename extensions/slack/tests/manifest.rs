//! The Slack app manifest generated from the configuration, validated against
//! Slack's published manifest schema (slackapi/manifest-schema, copied with its
//! license into tests/slack-api/manifest-schema) by a third-party validator (Ajv, in
//! tests/slack-api, run by node): the Events API and Socket Mode manifests are
//! accepted, and a manifest missing a required field is refused, so the validator
//! can fail.
//!
//! Without node or tests/slack-api's Ajv the schema checks print SKIPPED and pass,
//! unless OC_REQUIRE_PEERS=1.

#![allow(clippy::unwrap_used)]

use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Stdio};

use oc_slack::config::Registry;
use oc_slack::manifest_gen::{app_manifest, manifests, BOT_EVENTS, BOT_SCOPES};
use protocol::wire::{ConfigureParams, Connection, Entry};
use serde_json::{json, Value};

fn slack_api() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/slack-api")
}

fn required() -> bool {
    std::env::var("OC_REQUIRE_PEERS").is_ok_and(|v| v == "1")
}

/// Ajv's verdict on `manifest`: `Some((accepted, output))`, or `None` (SKIPPED)
/// without node or Ajv.
fn validate(manifest: &Value) -> Option<(bool, String)> {
    let dir = slack_api();
    let why = if !dir.join("node_modules/ajv").is_dir() {
        Some("tests/slack-api has no node_modules/ajv (npm ci --prefix tests/slack-api)")
    } else if Command::new("node").arg("--version").output().is_err() {
        Some("no node")
    } else {
        None
    };
    if let Some(why) = why {
        assert!(!required(), "OC_REQUIRE_PEERS=1 and {why}");
        eprintln!("SKIPPED: {why}");
        return None;
    }
    let mut child = Command::new("node")
        .arg(dir.join("validate-manifest.js"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(manifest.to_string().as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        matches!(out.status.code(), Some(0 | 1)),
        "the validator failed to run: {text}"
    );
    Some((out.status.success(), text))
}

fn registry(entries: Value, connections: Value) -> Registry {
    let entries: Vec<Entry> = serde_json::from_value(entries).unwrap();
    let connections: Vec<Connection> = serde_json::from_value(connections).unwrap();
    Registry::from_params(&ConfigureParams {
        entries,
        connections,
        ..Default::default()
    })
    .unwrap()
}

fn events_registry() -> Registry {
    registry(
        json!([{"scope_id": "demo", "name": "team", "type": "slack", "connection": "sl",
                "config": {"path": "/slack/acme"}}]),
        json!([{"name": "sl", "type": "slack", "secrets": ["bot_token", "signing_secret"]}]),
    )
}

fn socket_registry() -> Registry {
    registry(
        json!([{"scope_id": "demo", "name": "team", "type": "slack", "connection": "sl",
                "config": {"mode": "socket"}},
               {"scope_id": "ops", "name": "pager", "type": "slack", "connection": "sl",
                "config": {"mode": "socket", "channels": ["C0123ABC"]}}]),
        json!([{"name": "sl", "type": "slack", "secrets": ["bot_token", "app_token"]}]),
    )
}

#[test]
fn an_events_api_manifest_has_the_request_urls_scopes_and_events() {
    let r = events_registry();
    let all = manifests(&r.entries, "https://conduit.example.com/");
    assert_eq!(all.len(), 1);
    let m = &all[0];
    assert_eq!(m.connection, "sl");
    assert_eq!(m.entries, ["demo/team"]);
    let v = &m.manifest;
    assert_eq!(v["display_information"]["name"], "Open Conduit");
    assert!(v["features"]["bot_user"]["display_name"].is_string());
    assert_eq!(v["oauth_config"]["scopes"]["bot"], json!(BOT_SCOPES));
    for scope in [
        "chat:write",
        "reactions:write",
        "channels:history",
        "groups:history",
        "im:history",
        "mpim:history",
        "users:read",
        "app_mentions:read",
        "im:read",
    ] {
        assert!(BOT_SCOPES.contains(&scope), "{scope}");
    }
    let url = "https://conduit.example.com/slack/acme";
    assert_eq!(v["settings"]["event_subscriptions"]["request_url"], url);
    assert_eq!(
        v["settings"]["event_subscriptions"]["bot_events"],
        json!(BOT_EVENTS)
    );
    assert_eq!(v["settings"]["interactivity"]["request_url"], url);
    assert_eq!(v["settings"]["interactivity"]["is_enabled"], true);
    assert_eq!(v["settings"]["socket_mode_enabled"], false);
    if let Some((ok, out)) = validate(v) {
        assert!(ok, "Slack's schema refused the manifest: {out}\n{v:#}");
    }
}

#[test]
fn a_socket_mode_manifest_enables_socket_mode_without_request_urls() {
    let r = socket_registry();
    let all = manifests(&r.entries, "https://conduit.example.com");
    assert_eq!(
        all.len(),
        1,
        "one manifest for the connection both entries name"
    );
    let m = &all[0];
    assert_eq!(m.entries, ["demo/team", "ops/pager"]);
    let v = &m.manifest;
    assert_eq!(v["settings"]["socket_mode_enabled"], true);
    assert!(v["settings"]["event_subscriptions"]
        .get("request_url")
        .is_none());
    assert!(v["settings"]["interactivity"].get("request_url").is_none());
    assert!(
        m.notes.iter().any(|n| n.contains("connections:write")),
        "{:?}",
        m.notes
    );
    if let Some((ok, out)) = validate(v) {
        assert!(ok, "Slack's schema refused the manifest: {out}\n{v:#}");
    }
}

#[test]
fn without_a_public_url_the_manifest_says_what_to_fill_in() {
    let r = events_registry();
    let entries: Vec<_> = r.entries.iter().collect();
    let m = app_manifest("sl", &entries, "");
    assert!(m.manifest["settings"]["event_subscriptions"]
        .get("request_url")
        .is_none());
    assert!(
        m.notes
            .iter()
            .any(|n| n.contains("public_url") && n.contains("/slack/acme")),
        "{:?}",
        m.notes
    );
    if let Some((ok, out)) = validate(&m.manifest) {
        assert!(ok, "{out}");
    }
}

#[test]
fn the_schema_refuses_a_manifest_missing_a_required_field() {
    let r = events_registry();
    let mut v = manifests(&r.entries, "https://conduit.example.com")[0]
        .manifest
        .clone();
    v.as_object_mut().unwrap().remove("display_information");
    if let Some((ok, out)) = validate(&v) {
        assert!(!ok, "a manifest without display_information was accepted");
        assert!(out.contains("display_information"), "{out}");
    }
    let mut v = manifests(&r.entries, "https://conduit.example.com")[0]
        .manifest
        .clone();
    v["settings"]["interactivity"]
        .as_object_mut()
        .unwrap()
        .remove("is_enabled");
    if let Some((ok, out)) = validate(&v) {
        assert!(!ok, "interactivity without is_enabled was accepted");
        assert!(out.contains("is_enabled"), "{out}");
    }
}
