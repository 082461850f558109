//! The webhook intake (`webhook.handle`) on Linear payloads (the fixtures' README
//! names them): `Linear-Signature` good, bad and missing; `webhookTimestamp` fresh,
//! stale and missing; which payloads become an Event (type, key, delivery ID) and
//! which are ignored; the entries' configs.

#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;

use oc_linear::config::{parse_entry, Registry};
use oc_linear::intake;
use protocol::wire::{
    ConfigureParams, Connection, Entry, WebhookHandleParams, WebhookHandleResult,
};
use serde_json::{json, Value};

const SECRET: &[u8] = b"lin_wh_0123456789abcdef";
const NOW_MS: i64 = 1_765_000_000_000;
const ISSUE: &[u8] = include_bytes!("fixtures/issue-assigned.json");
const COMMENT: &[u8] = include_bytes!("fixtures/comment-created.json");
const AGENT: &str = "d1e2f3a4-1111-4222-8333-444455556666";

fn registry(config: Value) -> Registry {
    Registry::from_params(&ConfigureParams {
        entries: vec![Entry {
            scope_id: "s1".into(),
            entry_type: "linear".into(),
            name: "eng".into(),
            connection: "lin".into(),
            config,
            ..Default::default()
        }],
        connections: vec![Connection {
            name: "lin".into(),
            connection_type: "linear".into(),
            config: json!({}),
            secrets: vec!["api_key".into(), "webhook_secret".into()],
        }],
        ..Default::default()
    })
    .unwrap()
}

fn default_registry() -> Registry {
    registry(
        json!({"teams": ["LIN"], "agent_user": AGENT, "mention": "@conduit",
                    "states": ["In Progress"], "labels": ["agent"]}),
    )
}

fn fixture(bytes: &[u8], at_ms: i64) -> Value {
    let mut v: Value = serde_json::from_slice(bytes).unwrap();
    v["webhookTimestamp"] = json!(at_ms);
    v
}

fn request(body: &[u8], signature: Option<String>) -> WebhookHandleParams {
    let mut headers = BTreeMap::new();
    if let Some(sig) = signature {
        headers.insert("Linear-Signature".to_string(), vec![sig]);
    }
    headers.insert(
        "Linear-Delivery".to_string(),
        vec!["234d1a4e-b617-4388-90fe-adc3633d6b72".to_string()],
    );
    headers.insert("Linear-Event".to_string(), vec!["Issue".to_string()]);
    WebhookHandleParams {
        method: "POST".into(),
        path: "/linear/s1/eng".into(),
        headers,
        body: body.to_vec(),
        ..Default::default()
    }
}

fn signed(payload: &Value) -> WebhookHandleParams {
    let body = serde_json::to_vec(payload).unwrap();
    let sig = sdk::tracker::hmac_sha256_hex(SECRET, &body);
    request(&body, Some(sig))
}

fn handle(reg: &Registry, params: &WebhookHandleParams) -> WebhookHandleResult {
    match intake::precheck(reg, params) {
        Ok(entry) => intake::process(entry, SECRET, params, NOW_MS),
        Err(answer) => sdk::tracker::answer_only(answer),
    }
}

fn body_text(r: &WebhookHandleResult) -> String {
    String::from_utf8_lossy(&r.response.body).into_owned()
}

#[test]
fn a_signed_assignment_to_the_agent_is_one_event_keyed_by_the_issue() {
    let reg = default_registry();
    let r = handle(&reg, &signed(&fixture(ISSUE, NOW_MS - 2_000)));
    assert_eq!(r.response.status, 200, "{}", body_text(&r));
    assert_eq!(r.deliveries.len(), 1);
    let d = &r.deliveries[0];
    assert_eq!(d.source, "linear/s1/eng");
    assert_eq!(
        d.delivery_id,
        "Issue/539068e2-ae88-4d09-bd75-22eb4a59612f/2020-01-23T12:55:02.101Z"
    );
    let e = &d.events[0];
    assert_eq!(e.event_type, "linear.issue.assigned");
    assert_eq!(e.keys, vec!["linear:LIN-1778".to_string()]);
    assert_eq!(e.payload.schema, "linear.issue.v1");
    assert_eq!(e.payload.data["issue"]["title"], "Foo bar");
    assert_eq!(e.payload.data["issue"]["creator"]["name"], "Ada Lovelace");
    assert_eq!(e.occurred_at, "2020-01-23T12:55:02.101Z");
    // The same change delivered again carries the same delivery ID.
    let again = handle(&reg, &signed(&fixture(ISSUE, NOW_MS - 1_000)));
    assert_eq!(again.deliveries[0].delivery_id, d.delivery_id);
}

#[test]
fn the_agent_user_may_be_named_by_email() {
    let reg = registry(json!({"teams": ["lin"], "agent_user": "Agent@Example.com"}));
    let r = handle(&reg, &signed(&fixture(ISSUE, NOW_MS)));
    assert_eq!(r.deliveries.len(), 1, "{}", body_text(&r));
}

#[test]
fn bad_missing_and_malformed_signatures_are_401_and_deliver_nothing() {
    let reg = default_registry();
    let body = serde_json::to_vec(&fixture(ISSUE, NOW_MS)).unwrap();
    let wrong = sdk::tracker::hmac_sha256_hex(b"another secret", &body);
    let r = handle(&reg, &request(&body, Some(wrong)));
    assert_eq!(r.response.status, 401);
    assert!(r.deliveries.is_empty());
    assert!(body_text(&r).contains("Linear-Signature does not match"));
    let r = handle(&reg, &request(&body, None));
    assert_eq!(r.response.status, 401);
    assert!(body_text(&r).contains("missing Linear-Signature"));
    let r = handle(&reg, &request(&body, Some("sha256=abc".into())));
    assert_eq!(r.response.status, 401);
    assert!(body_text(&r).contains("malformed"));
    // A body changed after signing.
    let sig = sdk::tracker::hmac_sha256_hex(SECRET, &body);
    let mut changed = body.clone();
    changed.push(b' ');
    assert_eq!(
        handle(&reg, &request(&changed, Some(sig))).response.status,
        401
    );
}

#[test]
fn stale_future_and_missing_timestamps_are_401() {
    let reg = default_registry();
    for at in [NOW_MS - 61_000, NOW_MS + 61_000] {
        let r = handle(&reg, &signed(&fixture(ISSUE, at)));
        assert_eq!(r.response.status, 401, "at {at}");
        assert!(body_text(&r).contains("webhookTimestamp"));
        assert!(r.deliveries.is_empty());
    }
    let mut v = fixture(ISSUE, NOW_MS);
    v.as_object_mut().unwrap().remove("webhookTimestamp");
    let r = handle(&reg, &signed(&v));
    assert_eq!(r.response.status, 401);
    assert!(body_text(&r).contains("missing or unreadable webhookTimestamp"));
    // Within 60 s either way is taken.
    assert_eq!(
        handle(&reg, &signed(&fixture(ISSUE, NOW_MS + 59_000)))
            .deliveries
            .len(),
        1
    );
}

#[test]
fn method_path_and_size_are_checked_first() {
    let reg = default_registry();
    let mut p = signed(&fixture(ISSUE, NOW_MS));
    p.method = "GET".into();
    assert_eq!(handle(&reg, &p).response.status, 405);
    let mut p = signed(&fixture(ISSUE, NOW_MS));
    p.path = "/linear/other".into();
    assert_eq!(handle(&reg, &p).response.status, 404);
    let big = vec![b' '; intake::MAX_BODY_BYTES + 1];
    let sig = sdk::tracker::hmac_sha256_hex(SECRET, &big);
    assert_eq!(handle(&reg, &request(&big, Some(sig))).response.status, 413);
}

#[test]
fn what_is_not_a_trigger_is_ignored_with_200() {
    let reg = default_registry();
    // Assigned to someone else.
    let mut v = fixture(ISSUE, NOW_MS);
    v["data"]["assigneeId"] = json!("someone-else");
    v["data"]["assignee"]["id"] = json!("someone-else");
    v["data"]["assignee"]["email"] = json!("else@example.com");
    let r = handle(&reg, &signed(&v));
    assert_eq!(r.response.status, 200);
    assert!(r.deliveries.is_empty());
    assert!(body_text(&r).contains("no trigger"));
    // An edit of something else on an issue already assigned to the agent.
    let mut v = fixture(ISSUE, NOW_MS);
    v["updatedFrom"] = json!({"updatedAt": "2020-01-23T12:50:11.000Z", "title": "Foo"});
    assert!(handle(&reg, &signed(&v)).deliveries.is_empty());
    // Another team.
    let mut v = fixture(ISSUE, NOW_MS);
    v["data"]["identifier"] = json!("OPS-3");
    let r = handle(&reg, &signed(&v));
    assert!(r.deliveries.is_empty());
    assert!(body_text(&r).contains("not of team"));
    // Another type.
    let mut v = fixture(ISSUE, NOW_MS);
    v["type"] = json!("Project");
    assert!(handle(&reg, &signed(&v)).deliveries.is_empty());
}

#[test]
fn a_move_to_a_configured_state_and_a_configured_label_are_triggers() {
    let reg = default_registry();
    let mut v = fixture(ISSUE, NOW_MS);
    v["data"]["assigneeId"] = json!(null);
    v["data"]["assignee"] = json!(null);
    v["data"]["state"]["name"] = json!("In Progress");
    v["updatedFrom"] = json!({"stateId": "old"});
    let r = handle(&reg, &signed(&v));
    assert_eq!(r.deliveries[0].events[0].event_type, "linear.issue.moved");
    let mut v = fixture(ISSUE, NOW_MS);
    v["data"]["assigneeId"] = json!(null);
    v["data"]["assignee"] = json!(null);
    v["data"]["labels"] = json!([{"id": "L1", "name": "Bug"}, {"id": "L2", "name": "Agent"}]);
    v["updatedFrom"] = json!({"labelIds": ["L1"]});
    let r = handle(&reg, &signed(&v));
    assert_eq!(r.deliveries[0].events[0].event_type, "linear.issue.labeled");
    // The label was there before: not a new trigger.
    v["updatedFrom"] = json!({"labelIds": ["L1", "L2"]});
    assert!(handle(&reg, &signed(&v)).deliveries.is_empty());
}

#[test]
fn a_comment_is_an_event_of_its_issue_and_the_agents_own_is_ignored() {
    let reg = default_registry();
    let r = handle(&reg, &signed(&fixture(COMMENT, NOW_MS)));
    assert_eq!(r.response.status, 200, "{}", body_text(&r));
    let d = &r.deliveries[0];
    assert_eq!(
        d.delivery_id,
        "Comment/2174add1-f7c8-44e3-bbf3-2d60b5ea8bc9/create"
    );
    let e = &d.events[0];
    assert_eq!(e.event_type, "linear.issue.commented");
    assert_eq!(e.keys, vec!["linear:LIN-1778".to_string()]);
    assert_eq!(e.payload.data["comment"]["mentions_agent"], true);
    assert_eq!(e.payload.data["comment"]["user"]["name"], "Ada Lovelace");
    let mut v = fixture(COMMENT, NOW_MS);
    v["data"]["userId"] = json!(AGENT);
    v["data"]["user"]["id"] = json!(AGENT);
    let r = handle(&reg, &signed(&v));
    assert!(r.deliveries.is_empty());
    assert!(body_text(&r).contains("agent user itself"));
}

#[test]
fn entry_configs_name_the_bad_field() {
    for (config, pointer) in [
        (json!({"agent_user": "x"}), "/teams"),
        (json!({"teams": ["LIN"]}), "/agent_user"),
        (json!({"teams": ["L-IN"], "agent_user": "x"}), "/teams/0"),
        (
            json!({"teams": ["LIN"], "agent_user": "x", "path": "/other"}),
            "/path",
        ),
        (
            json!({"teams": ["LIN"], "agent_user": "x", "states": [""]}),
            "/states/0",
        ),
        (
            json!({"teams": ["LIN"], "agent_user": "x", "bogus": 1}),
            "/bogus",
        ),
    ] {
        let e = parse_entry(&config).unwrap_err();
        assert_eq!(e.pointer, pointer, "{config}: {}", e.reason);
    }
    let ok = parse_entry(&json!({"teams": ["lin"], "agent_user": "x"})).unwrap();
    assert_eq!(ok.teams, vec!["LIN".to_string()]);
}

#[test]
fn the_manifest_is_served() {
    oc_linear::extension().unwrap();
    let m: Value = serde_json::from_str(oc_linear::MANIFEST).unwrap();
    let of_kind = |kind: &str| -> Vec<&str> {
        m["provides"]["operations"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|o| o["kind"] == kind)
            .map(|o| o["name"].as_str().unwrap())
            .collect()
    };
    assert_eq!(of_kind("handler"), oc_linear::ops::ALL.to_vec());
    assert_eq!(of_kind("wait"), vec![oc_linear::wait::OPERATION]);
}
