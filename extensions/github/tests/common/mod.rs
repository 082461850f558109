//! What the tests share: the fixtures, a configured entry, signed requests.

#![allow(dead_code, clippy::unwrap_used)]

pub mod prism;

use std::collections::BTreeMap;

use oc_github::config::{EntryConfig, Registry};
use oc_github::signature::sign;
use protocol::wire::{ConfigureParams, Connection, Entry, WebhookHandleParams};
use serde_json::{json, Value};

pub const SECRET: &[u8] = b"a webhook secret for the tests";
pub const REPO: &str = "Codertocat/Hello-World";

pub const PING: &[u8] = include_bytes!("../fixtures/ping.json");
pub const ISSUES_OPENED: &[u8] = include_bytes!("../fixtures/issues.opened.json");
pub const ISSUE_COMMENT_CREATED: &[u8] = include_bytes!("../fixtures/issue_comment.created.json");
pub const PULL_REQUEST_OPENED: &[u8] = include_bytes!("../fixtures/pull_request.opened.json");
pub const PULL_REQUEST_REVIEW_SUBMITTED: &[u8] =
    include_bytes!("../fixtures/pull_request_review.submitted.json");
pub const CHECK_RUN_COMPLETED: &[u8] = include_bytes!("../fixtures/check_run.completed.json");
// From @octokit/webhooks-examples 7.6.1 (tests/fixtures/octokit/README.md).
pub const PULL_REQUEST_REVIEW_COMMENT_CREATED: &[u8] =
    include_bytes!("../fixtures/octokit/pull_request_review_comment.created.json");
pub const CHECK_SUITE_COMPLETED: &[u8] =
    include_bytes!("../fixtures/octokit/check_suite.completed.json");
pub const CHECK_SUITE_COMPLETED_NO_PR: &[u8] =
    include_bytes!("../fixtures/octokit/check_suite.completed.1.json");
pub const CHECK_RUN_COMPLETED_FAILURE: &[u8] =
    include_bytes!("../fixtures/octokit/check_run.completed.1.json");
pub const PULL_REQUEST_CLOSED: &[u8] =
    include_bytes!("../fixtures/octokit/pull_request.closed.json");
/// The head commit of pull request #2 in the fixtures.
pub const HEAD_SHA: &str = "ec26c3e57ca3a959ca5aad62de7213c562f8c821";

pub fn json_of(bytes: &[u8]) -> Value {
    serde_json::from_slice(bytes).unwrap()
}

/// One `github` entry in scope `s1` named `hello`, on connection `gh`.
pub fn entry(config: Value) -> Entry {
    Entry {
        scope_id: "s1".into(),
        entry_type: "github".into(),
        name: "hello".into(),
        connection: "gh".into(),
        config,
        ..Default::default()
    }
}

pub fn connection() -> Connection {
    Connection {
        name: "gh".into(),
        connection_type: "github".into(),
        config: json!({"api_url": "https://api.github.com"}),
        secrets: vec!["webhook_secret".into()],
    }
}

pub fn configure_params(entries: Vec<Entry>) -> ConfigureParams {
    ConfigureParams {
        entries,
        connections: vec![connection()],
        ..Default::default()
    }
}

pub fn registry(config: Value) -> Registry {
    Registry::from_params(&configure_params(vec![entry(config)])).unwrap()
}

pub fn the_entry(registry: &Registry) -> &EntryConfig {
    registry.entries.first().unwrap()
}

/// A POST to `/github/s1/hello` of `event`, signed under `secret`.
pub fn request(event: &str, delivery: &str, body: &[u8], secret: &[u8]) -> WebhookHandleParams {
    let mut headers = BTreeMap::new();
    headers.insert("x-github-event".to_string(), vec![event.to_string()]);
    headers.insert("x-github-delivery".to_string(), vec![delivery.to_string()]);
    headers.insert("x-hub-signature-256".to_string(), vec![sign(secret, body)]);
    headers.insert(
        "content-type".to_string(),
        vec!["application/json".to_string()],
    );
    WebhookHandleParams {
        method: "POST".into(),
        path: "/github/s1/hello".into(),
        query: String::new(),
        headers,
        body: body.to_vec(),
        remote_addr: "192.0.2.10:40000".into(),
    }
}

pub fn body_json(body: &[u8]) -> Value {
    serde_json::from_slice(body).unwrap()
}
