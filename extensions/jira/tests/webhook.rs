//! Intake and routing on Jira's own webhook payloads (tests/fixtures, see its
//! README): the signature (good, bad, missing, malformed), a payload to at most one
//! Event, and `route.match`'s decisions with the spec's display.

#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;

use oc_jira::config::Registry;
use oc_jira::intake::{precheck, process, project};
use oc_jira::route::match_route;
use oc_jira::signature::{sign, verify, SignatureError};
use protocol::wire::{
    ConfigureParams, Connection, Entry, Event, Route, RouteMatchParams, WebhookHandleParams, Work,
};
use serde_json::{json, Value};

const ASSIGNED: &[u8] = include_bytes!("fixtures/issue-updated-issue-assigned.json");
const CREATED: &[u8] = include_bytes!("fixtures/issue-created.json");
const COMMENT: &[u8] = include_bytes!("fixtures/comment-created.json");
/// The assignee the assigned fixture's changelog names.
const AGENT: &str = "5b912e21fa38ae2c896099ae";
const SECRET: &[u8] = b"It's a Secret to Everybody";

fn registry(config: Value) -> Registry {
    Registry::from_params(&ConfigureParams {
        entries: vec![Entry {
            scope_id: "s1".into(),
            entry_type: "jira".into(),
            name: "tracker".into(),
            connection: "jc".into(),
            config,
            ..Default::default()
        }],
        connections: vec![Connection {
            name: "jc".into(),
            connection_type: "jira".into(),
            ..Default::default()
        }],
        ..Default::default()
    })
    .unwrap()
}

fn default_registry() -> Registry {
    registry(json!({"projects": ["INDEV", "BBCOM"], "agent_account_id": AGENT}))
}

fn request(body: &[u8], signature: Option<String>) -> WebhookHandleParams {
    let mut headers = BTreeMap::new();
    if let Some(s) = signature {
        headers.insert("X-Hub-Signature".to_string(), vec![s]);
    }
    headers.insert(
        "X-Atlassian-Webhook-Identifier".to_string(),
        vec!["delivery-1".to_string()],
    );
    WebhookHandleParams {
        method: "POST".into(),
        path: "/jira/s1/tracker".into(),
        headers,
        body: body.to_vec(),
        ..Default::default()
    }
}

#[test]
fn a_good_signature_verifies_and_a_bad_one_does_not() {
    let good = sign(SECRET, ASSIGNED);
    assert!(good.starts_with("sha256=") && good.len() == 7 + 64);
    assert_eq!(verify(SECRET, Some(&good), ASSIGNED), Ok(()));
    assert_eq!(
        verify(b"another secret", Some(&good), ASSIGNED),
        Err(SignatureError::Mismatch)
    );
    let mut tampered = ASSIGNED.to_vec();
    tampered.push(b' ');
    assert_eq!(
        verify(SECRET, Some(&good), &tampered),
        Err(SignatureError::Mismatch)
    );
    assert_eq!(verify(SECRET, None, ASSIGNED), Err(SignatureError::Missing));
    assert_eq!(
        verify(SECRET, Some("sha1=abc"), ASSIGNED),
        Err(SignatureError::Malformed)
    );
    assert_eq!(
        verify(SECRET, Some("sha256=zz"), ASSIGNED),
        Err(SignatureError::Malformed)
    );
}

#[test]
fn a_bad_signature_is_401_and_keeps_nothing() {
    let reg = default_registry();
    let params = request(ASSIGNED, Some(sign(b"wrong", ASSIGNED)));
    let entry = precheck(&reg, &params).unwrap();
    let result = process(entry, SECRET, &params);
    assert_eq!(result.response.status, 401);
    assert!(result.deliveries.is_empty());
    assert!(
        String::from_utf8_lossy(&result.response.body).contains("X-Hub-Signature does not match")
    );
    let unsigned = process(entry, SECRET, &request(ASSIGNED, None));
    assert_eq!(unsigned.response.status, 401);
    assert!(unsigned.deliveries.is_empty());
}

#[test]
fn a_signed_assignment_to_the_agent_is_one_event_keyed_by_the_issue() {
    let reg = default_registry();
    let params = request(ASSIGNED, Some(sign(SECRET, ASSIGNED)));
    let result = process(precheck(&reg, &params).unwrap(), SECRET, &params);
    assert_eq!(result.response.status, 200);
    assert_eq!(result.deliveries.len(), 1);
    let d = &result.deliveries[0];
    // The identity of the change (issue 19435's changelog 76941), not the header's
    // delivery ID: a poll of the same change carries the same.
    assert_eq!(d.delivery_id, "issue/19435/changelog/76941");
    assert_eq!(d.source, "jira/s1/tracker");
    let e = &d.events[0];
    assert_eq!(e.event_type, "jira.issue.assigned");
    assert_eq!(e.keys, vec!["jira:INDEV-242".to_string()]);
    assert_eq!(e.payload.schema, "jira.issue.v1");
    assert_eq!(e.payload.data["summary"], "Тестовая задача");
    assert_eq!(e.payload.data["reporter"], "jira_test");
}

#[test]
fn an_assignment_to_someone_else_or_another_project_is_ignored() {
    let payload: Value = serde_json::from_slice(ASSIGNED).unwrap();
    let other = registry(json!({"projects": ["INDEV"], "agent_account_id": "someone-else"}));
    assert!(project(&other.entries[0], &payload).unwrap().is_none());
    let elsewhere = registry(json!({"projects": ["OTHER"], "agent_account_id": AGENT}));
    assert!(project(&elsewhere.entries[0], &payload).unwrap().is_none());
    // Signed and ignored is still a 200 (Jira retries anything else), with nothing kept.
    let params = request(ASSIGNED, Some(sign(SECRET, ASSIGNED)));
    let result = process(&other.entries[0], SECRET, &params);
    assert_eq!(result.response.status, 200);
    assert!(result.deliveries.is_empty());
}

#[test]
fn a_created_issue_starts_work_by_assignee_status_or_label() {
    let payload: Value = serde_json::from_slice(CREATED).unwrap();
    let by_assignee =
        registry(json!({"projects": ["BBCOM"], "agent_account_id": "5b912f5c8a96e82b9549361c"}));
    let e = project(&by_assignee.entries[0], &payload).unwrap().unwrap();
    assert_eq!(e.event_type, "jira.issue.assigned");
    assert_eq!(e.keys, vec!["jira:BBCOM-1398".to_string()]);
    let by_status =
        registry(json!({"projects": ["BBCOM"], "agent_account_id": AGENT, "statuses": ["open"]}));
    let e = project(&by_status.entries[0], &payload).unwrap().unwrap();
    assert_eq!(e.event_type, "jira.issue.status_changed");
    let mut labelled = payload.clone();
    labelled["issue"]["fields"]["labels"] = json!(["agent"]);
    let by_label =
        registry(json!({"projects": ["BBCOM"], "agent_account_id": AGENT, "labels": ["agent"]}));
    let e = project(&by_label.entries[0], &labelled).unwrap().unwrap();
    assert_eq!(e.event_type, "jira.issue.labelled");
    assert!(project(&default_registry().entries[0], &payload)
        .unwrap()
        .is_none());
}

#[test]
fn a_changelog_status_or_label_change_starts_work() {
    let mut payload: Value = serde_json::from_slice(ASSIGNED).unwrap();
    payload["changelog"]["items"] = json!([
        {"field": "status", "fieldtype": "jira", "fieldId": "status", "from": "10257", "fromString": "To Do", "to": "10258", "toString": "Ready for agent"}
    ]);
    let reg = registry(
        json!({"projects": ["INDEV"], "agent_account_id": "x", "statuses": ["Ready for agent"], "labels": ["agent"]}),
    );
    assert_eq!(
        project(&reg.entries[0], &payload)
            .unwrap()
            .unwrap()
            .event_type,
        "jira.issue.status_changed"
    );
    payload["changelog"]["items"] = json!([
        {"field": "labels", "fieldtype": "jira", "fieldId": "labels", "from": null, "fromString": "backend", "to": null, "toString": "backend agent"}
    ]);
    assert_eq!(
        project(&reg.entries[0], &payload)
            .unwrap()
            .unwrap()
            .event_type,
        "jira.issue.labelled"
    );
    payload["changelog"]["items"] = json!([
        {"field": "labels", "fieldtype": "jira", "fieldId": "labels", "from": null, "fromString": "agent", "to": null, "toString": "agent backend"}
    ]);
    assert!(
        project(&reg.entries[0], &payload).unwrap().is_none(),
        "a label already there adds nothing"
    );
}

#[test]
fn a_comment_is_an_event_of_its_issue_and_one_without_an_issue_is_400() {
    // The fixture comes from a Jira that sent no `issue` with a comment; Jira Cloud
    // sends it (key and fields), which the test adds from the assigned fixture.
    let reg = default_registry();
    let params = request(COMMENT, Some(sign(SECRET, COMMENT)));
    let result = process(precheck(&reg, &params).unwrap(), SECRET, &params);
    assert_eq!(result.response.status, 400);
    assert!(result.deliveries.is_empty());
    let mut payload: Value = serde_json::from_slice(COMMENT).unwrap();
    let assigned: Value = serde_json::from_slice(ASSIGNED).unwrap();
    payload["issue"] = assigned["issue"].clone();
    let e = project(&reg.entries[0], &payload).unwrap().unwrap();
    assert_eq!(e.event_type, "jira.issue.comment_created");
    assert_eq!(e.keys, vec!["jira:INDEV-242".to_string()]);
    // No free text in the Event (it is read when rendered); the body "12345"
    // mentions nobody.
    assert!(e.payload.data["comment"].get("text").is_none());
    assert_eq!(e.payload.data["comment"]["mentions_agent"], false);
    assert_eq!(e.payload.data["comment"]["id"], "31039");
    assert_eq!(e.payload.data["comment"]["author"], "ii_ivanov");
    // The agent's own comment is not heard.
    payload["comment"]["author"]["accountId"] = json!(AGENT);
    assert!(project(&reg.entries[0], &payload).unwrap().is_none());
}

#[test]
fn method_path_and_size_are_checked_before_the_secret() {
    let reg = default_registry();
    let mut params = request(ASSIGNED, None);
    params.method = "GET".into();
    assert_eq!(precheck(&reg, &params).unwrap_err().status, 405);
    params.method = "POST".into();
    params.path = "/jira/elsewhere".into();
    assert_eq!(precheck(&reg, &params).unwrap_err().status, 404);
    params.path = "/jira/s1/tracker".into();
    params.body = vec![b' '; oc_jira::intake::MAX_BODY_BYTES + 1];
    assert_eq!(precheck(&reg, &params).unwrap_err().status, 413);
}

fn event_of(payload: &Value) -> Event {
    let e = project(&default_registry().entries[0], payload)
        .unwrap()
        .unwrap();
    Event {
        id: "e1".into(),
        sequence: 1,
        event_type: e.event_type,
        scope_id: "s1".into(),
        payload: e.payload,
        keys: e.keys,
        ..Default::default()
    }
}

fn ask(event: Event, config: Value, work: Option<Work>) -> protocol::wire::RouteMatchResult {
    match_route(&RouteMatchParams {
        handler: "jira".into(),
        route: Route {
            handler: "jira".into(),
            binding: "agent".into(),
            config,
        },
        event,
        work,
        ..Default::default()
    })
    .unwrap()
}

#[test]
fn an_assigned_issue_starts_its_work_with_title_key_and_author() {
    let payload: Value = serde_json::from_slice(ASSIGNED).unwrap();
    let r = ask(event_of(&payload), Value::Null, None);
    assert!(r.matched, "{}", r.reason);
    assert_eq!(r.keys, vec!["jira:INDEV-242".to_string()]);
    let d = r.display.unwrap();
    assert_eq!(d.title, "Тестовая задача");
    assert_eq!(d.reference, "INDEV-242");
    assert_eq!(d.requester, "jira_test");
}

#[test]
fn a_comment_joins_open_work_and_creates_none() {
    let mut payload: Value = serde_json::from_slice(COMMENT).unwrap();
    let assigned: Value = serde_json::from_slice(ASSIGNED).unwrap();
    payload["issue"] = assigned["issue"].clone();
    let r = ask(event_of(&payload), Value::Null, None);
    assert!(!r.matched);
    assert!(r.reason.contains("no open Work"), "{}", r.reason);
    let work = Work {
        id: "w1".into(),
        ..Default::default()
    };
    let r = ask(event_of(&payload), Value::Null, Some(work));
    assert!(r.matched, "{}", r.reason);
    assert_eq!(r.keys, vec!["jira:INDEV-242".to_string()]);
}

#[test]
fn the_routes_events_filter_and_config_errors() {
    let payload: Value = serde_json::from_slice(ASSIGNED).unwrap();
    let r = ask(
        event_of(&payload),
        json!({"events": ["jira.issue.labelled"]}),
        None,
    );
    assert!(!r.matched);
    let r = ask(
        event_of(&payload),
        json!({"events": ["jira.issue.assigned"]}),
        None,
    );
    assert!(r.matched);
    let bad = match_route(&RouteMatchParams {
        handler: "jira".into(),
        route: Route {
            handler: "jira".into(),
            binding: "agent".into(),
            config: json!({"events": ["github.issue"]}),
        },
        event: event_of(&payload),
        ..Default::default()
    })
    .unwrap_err();
    assert!(bad.message.contains("/events/0"), "{}", bad.message);
}

#[test]
fn entry_config_errors_name_the_field() {
    let e = oc_jira::config::parse_entry(&json!({"agent_account_id": "x"})).unwrap_err();
    assert_eq!(e.pointer, "/projects");
    let e = oc_jira::config::parse_entry(&json!({"projects": ["proj"], "agent_account_id": "x"}))
        .unwrap_err();
    assert_eq!(e.pointer, "/projects/0");
    let e = oc_jira::config::parse_entry(&json!({"projects": ["P"]})).unwrap_err();
    assert_eq!(e.pointer, "/agent_account_id");
    let e = oc_jira::config::parse_entry(
        &json!({"projects": ["P"], "agent_account_id": "x", "path": "/github/x"}),
    )
    .unwrap_err();
    assert_eq!(e.pointer, "/path");
    let e = oc_jira::config::check_connection_config(&json!({"email": "a@b"})).unwrap_err();
    assert_eq!(e.pointer, "/base_url");
    assert!(oc_jira::config::check_connection_config(
        &json!({"base_url": "https://x.atlassian.net", "email": "a@b.c"})
    )
    .is_ok());
}

#[test]
fn the_manifest_loads_and_validate_names_fields_by_pointer() {
    assert!(oc_jira::extension().is_ok());
    let r = oc_jira::validate(&protocol::wire::ValidateParams {
        kind: protocol::wire::validate_kind::EXTENSION.into(),
        type_name: "jira".into(),
        config: json!({"projects": ["PROJ"]}),
        ..Default::default()
    });
    assert_eq!(r.diagnostics[0].path, "/agent_account_id");
    let r = oc_jira::validate(&protocol::wire::ValidateParams {
        kind: protocol::wire::validate_kind::CONNECTION.into(),
        type_name: "jira".into(),
        config: json!({"base_url": "https://example.atlassian.net", "email": "bot@example.com"}),
        ..Default::default()
    });
    assert!(r.diagnostics.is_empty(), "{:?}", r.diagnostics);
}

#[test]
fn an_adf_comment_with_a_list_code_and_a_mention_renders_readably_and_bounded() {
    let mut payload: Value = serde_json::from_slice(COMMENT).unwrap();
    let assigned: Value = serde_json::from_slice(ASSIGNED).unwrap();
    payload["issue"] = assigned["issue"].clone();
    payload["comment"]["body"] = json!({"type": "doc", "version": 1, "content": [
        {"type": "paragraph", "content": [
            {"type": "mention", "attrs": {"id": AGENT, "text": "@Agent"}},
            {"type": "text", "text": " please check:"}]},
        {"type": "bulletList", "content": [
            {"type": "listItem", "content": [{"type": "paragraph", "content": [{"type": "text", "text": "the login page"}]}]},
            {"type": "listItem", "content": [{"type": "paragraph", "content": [{"type": "text", "text": "the tests"}]}]}]},
        {"type": "codeBlock", "attrs": {"language": "sh"}, "content": [{"type": "text", "text": "cargo test -p app"}]}
    ]});
    let mut e = event_of(&payload);
    assert_eq!(e.payload.data["comment"]["mentions_agent"], true);
    // What `event.render` does before rendering: the comment's text, read from Jira.
    e.payload.data["comment"]["text"] = json!(oc_jira::adf::to_text(
        &payload["comment"]["body"],
        oc_jira::intake::MAX_TEXT_BYTES
    ));
    let params = protocol::wire::EventRenderParams {
        event: e.clone(),
        ..Default::default()
    };
    let r = oc_jira::render::serve(&params).unwrap();
    assert!(!r.truncated);
    assert!(
        r.text
            .starts_with("**Jira issue INDEV-242**: Тестовая задача"),
        "{}",
        r.text
    );
    assert!(r.text.contains("**Comment by ii_ivanov:**"), "{}", r.text);
    assert!(
        r.text.contains(
            "@Agent please check:\n\n- the login page\n- the tests\n\n```\ncargo test -p app\n```"
        ),
        "{}",
        r.text
    );
    let small = oc_jira::render::serve(&protocol::wire::EventRenderParams {
        event: e,
        max_bytes: 120,
        ..Default::default()
    })
    .unwrap();
    assert!(small.truncated);
    assert!(small.text.len() <= 120, "{}", small.text.len());
}
