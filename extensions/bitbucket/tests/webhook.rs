//! Intake and routing on Atlassian's own webhook payloads (tests/fixtures, see its
//! README): the signature (good, bad, missing → 401 and nothing kept), the delivery's
//! identity (the change it reports, else `X-Request-UUID`, else the body's digest:
//! the same on a redelivery), a payload to at most one Event, and `route.match`'s
//! decisions with the spec's display.

#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;

use oc_bitbucket::config::{parse_entry, Registry};
use oc_bitbucket::intake::{change_id, precheck, process, project, sign};
use oc_bitbucket::route::match_route;
use protocol::wire::{
    ConfigureParams, Connection, Entry, Event, Route, RouteMatchParams, RouteMatchResult,
    WebhookHandleParams, Work,
};
use serde_json::{json, Value};

const CREATED: &[u8] = include_bytes!("fixtures/pull-request-created.json");
const UPDATED: &[u8] = include_bytes!("fixtures/pull-request-updated.json");
const COMMENT: &[u8] = include_bytes!("fixtures/pull-request-comment-created.json");
const APPROVED: &[u8] = include_bytes!("fixtures/pull-request-approved.json");
const DECLINED: &[u8] = include_bytes!("fixtures/pull-request-declined.json");
const MERGED: &[u8] = include_bytes!("fixtures/pull-request-merged.json");
const STATUS_CREATED: &[u8] = include_bytes!("fixtures/repo-commit-status-created.json");
const STATUS_UPDATED: &[u8] = include_bytes!("fixtures/repo-commit-status-updated.json");
const ISSUE_CREATED: &[u8] = include_bytes!("fixtures/issue-created.json");
const ISSUE_COMMENT: &[u8] = include_bytes!("fixtures/issue-comment-created.json");
const SECRET: &[u8] = b"bb-webhook-secret-91c2";
/// The fixtures' repository.
const REPO: &str = "team_name/repo_name";
/// The fixtures' actor (Emma).
const EMMA: &str = "udfy9suggmzpswxc7n200y3c";

fn registry(config: Value) -> Registry {
    Registry::from_params(&ConfigureParams {
        entries: vec![Entry {
            scope_id: "s1".into(),
            entry_type: "bitbucket".into(),
            name: "code".into(),
            connection: "bb".into(),
            config,
            ..Default::default()
        }],
        connections: vec![Connection {
            name: "bb".into(),
            connection_type: "bitbucket".into(),
            ..Default::default()
        }],
        ..Default::default()
    })
    .unwrap()
}

fn default_registry() -> Registry {
    registry(
        json!({"repositories": [REPO], "mention": "@conduit", "agent_account_id": "557058:agent", "jira_projects": ["PROJ"]}),
    )
}

fn request(event: &str, body: &[u8], signature: Option<String>, uuid: &str) -> WebhookHandleParams {
    let mut headers = BTreeMap::new();
    if let Some(s) = signature {
        headers.insert("X-Hub-Signature".to_string(), vec![s]);
    }
    headers.insert("X-Event-Key".to_string(), vec![event.to_string()]);
    headers.insert("X-Request-UUID".to_string(), vec![uuid.to_string()]);
    WebhookHandleParams {
        method: "POST".into(),
        path: "/bitbucket/s1/code".into(),
        headers,
        body: body.to_vec(),
        ..Default::default()
    }
}

fn json_of(bytes: &[u8]) -> Value {
    serde_json::from_slice(bytes).unwrap()
}

/// The comment fixture, its text mentioning the agent.
fn mentioning_comment() -> Vec<u8> {
    let mut v = json_of(COMMENT);
    v["comment"]["content"]["raw"] = json!("@conduit the login page loops, can you fix it?");
    serde_json::to_vec(&v).unwrap()
}

#[test]
fn a_bad_or_missing_signature_is_401_and_keeps_nothing() {
    let reg = default_registry();
    let body = mentioning_comment();
    for signature in [
        Some(sign(b"wrong secret", &body)),
        None,
        Some("sha1=abc".to_string()),
        Some(sign(SECRET, b"another body")),
    ] {
        let params = request("pullrequest:comment_created", &body, signature, "u-1");
        let entry = precheck(&reg, &params).unwrap();
        let result = process(entry, SECRET, &params);
        assert_eq!(result.response.status, 401);
        assert!(result.deliveries.is_empty());
        assert!(String::from_utf8_lossy(&result.response.body).contains("X-Hub-Signature"));
    }
}

#[test]
fn a_signed_mentioning_comment_is_one_event_and_a_redelivery_has_the_same_identity() {
    let reg = default_registry();
    let body = mentioning_comment();
    let params = request(
        "pullrequest:comment_created",
        &body,
        Some(sign(SECRET, &body)),
        "3cd1e1a3-6a2a-4a3b-b5f6-0d9c2f1b2e77",
    );
    let entry = precheck(&reg, &params).unwrap();
    let first = process(entry, SECRET, &params);
    assert_eq!(first.response.status, 200);
    assert_eq!(first.deliveries.len(), 1);
    let d = &first.deliveries[0];
    // The comment's own identity, which reconcile derives alike from a polled
    // pull request, not the request's UUID; the Event is a snapshot of it.
    assert_eq!(
        d.delivery_id,
        "pullrequest/team_name/repo_name/1/comment/17"
    );
    assert_eq!(d.source, "bitbucket/s1/code");
    let e = &d.events[0];
    assert!(e.snapshot);
    assert_eq!(e.event_type, "bitbucket.pullrequest.comment_created");
    assert_eq!(e.keys, vec!["bitbucket:team_name/repo_name#1".to_string()]);
    assert_eq!(e.payload.schema, "bitbucket.pullrequest.v1");
    assert_eq!(e.payload.data["mentioned"], true);
    assert_eq!(e.payload.data["comment"]["id"], 17);
    assert_eq!(e.payload.data["comment"]["inline"]["path"], "path/to/file");
    assert_eq!(e.payload.data["title"], "Title of pull request");
    // Bitbucket's redelivery (another attempt, even under another X-Request-UUID, or
    // none) names the same comment: the same delivery, which the host keeps once.
    let again = process(entry, SECRET, &params);
    assert_eq!(again.deliveries[0].delivery_id, d.delivery_id);
    assert_eq!(again.deliveries[0].events, d.events);
    let mut bare = params.clone();
    bare.headers.remove("X-Request-UUID");
    let a = process(entry, SECRET, &bare);
    assert_eq!(a.deliveries[0].delivery_id, d.delivery_id);
}

#[test]
fn a_delivery_naming_no_change_keeps_its_request_uuid_or_digest() {
    let reg = default_registry();
    let params = request(
        "pullrequest:updated",
        UPDATED,
        Some(sign(SECRET, UPDATED)),
        "3cd1e1a3-6a2a-4a3b-b5f6-0d9c2f1b2e77",
    );
    let entry = precheck(&reg, &params).unwrap();
    let first = process(entry, SECRET, &params);
    let d = &first.deliveries[0];
    assert_eq!(d.delivery_id, "3cd1e1a3-6a2a-4a3b-b5f6-0d9c2f1b2e77");
    assert!(!d.events[0].snapshot);
    // Without the header, the identity is the body's digest: the same for the same body.
    let mut bare = params.clone();
    bare.headers.remove("X-Request-UUID");
    let a = process(entry, SECRET, &bare);
    let b = process(entry, SECRET, &bare);
    assert!(a.deliveries[0].delivery_id.starts_with("sha256:"));
    assert_eq!(a.deliveries[0].delivery_id, b.deliveries[0].delivery_id);
    assert!(!a.deliveries[0].events[0].snapshot);
}

#[test]
fn every_fixture_s_change_has_its_identity() {
    let p = "pullrequest/team_name/repo_name/1";
    for (event_key, body, id) in [
        ("pullrequest:created", CREATED, Some(format!("{p}/created"))),
        ("pullrequest:updated", UPDATED, None),
        (
            "pullrequest:comment_created",
            COMMENT,
            Some(format!("{p}/comment/17")),
        ),
        (
            "pullrequest:approved",
            APPROVED,
            Some(format!(
                "{p}/approved/{EMMA}/2015-04-06T16:34:59.195330+00:00"
            )),
        ),
        ("pullrequest:fulfilled", MERGED, Some(format!("{p}/fulfilled"))),
        ("pullrequest:rejected", DECLINED, Some(format!("{p}/rejected"))),
        (
            "repo:commit_status_created",
            STATUS_CREATED,
            Some(
                "status/team_name/repo_name/9fec847784abb10b2fa567ee63b85bd238955d0e/mybuildtool/INPROGRESS/2015-11-19T20:37:35.547563+00:00"
                    .to_string(),
            ),
        ),
        (
            "issue:created",
            ISSUE_CREATED,
            Some("issue/team_name/repo_name/1/created".to_string()),
        ),
        (
            "issue:comment_created",
            ISSUE_COMMENT,
            Some("issue/team_name/repo_name/1/comment/17".to_string()),
        ),
        ("issue:updated", ISSUE_CREATED, None),
        ("repo:push", CREATED, None),
    ] {
        assert_eq!(change_id(event_key, &json_of(body)), id, "{event_key}");
    }
    // A change request names its reviewer and time like an approval; the fixture
    // (the approval's body) has no `changes_request`, so it names no change.
    let mut changes = json_of(APPROVED);
    assert_eq!(
        change_id("pullrequest:changes_request_created", &changes),
        None
    );
    changes["changes_request"] = changes["approval"].clone();
    assert_eq!(
        change_id("pullrequest:changes_request_created", &changes),
        Some(format!(
            "{p}/changes_requested/{EMMA}/2015-04-06T16:34:59.195330+00:00"
        ))
    );
    // The repository is lower case in the identity; an ID that cannot be one (a
    // `/` in it) names no change.
    let mut upper = json_of(COMMENT);
    upper["repository"]["full_name"] = json!("Team_Name/Repo_Name");
    assert_eq!(
        change_id("pullrequest:comment_created", &upper),
        Some(format!("{p}/comment/17"))
    );
    upper["comment"]["id"] = json!("1/2");
    assert_eq!(change_id("pullrequest:comment_created", &upper), None);
}

#[test]
fn every_fixture_projects_to_its_event_type_and_key() {
    let config = &default_registry().entries[0].config;
    for (event_key, body, event_type, key) in [
        (
            "pullrequest:created",
            CREATED,
            "bitbucket.pullrequest.created",
            "bitbucket:team_name/repo_name#1",
        ),
        (
            "pullrequest:updated",
            UPDATED,
            "bitbucket.pullrequest.updated",
            "bitbucket:team_name/repo_name#1",
        ),
        (
            "pullrequest:comment_created",
            COMMENT,
            "bitbucket.pullrequest.comment_created",
            "bitbucket:team_name/repo_name#1",
        ),
        (
            "pullrequest:approved",
            APPROVED,
            "bitbucket.pullrequest.approved",
            "bitbucket:team_name/repo_name#1",
        ),
        (
            "pullrequest:changes_request_created",
            APPROVED,
            "bitbucket.pullrequest.changes_requested",
            "bitbucket:team_name/repo_name#1",
        ),
        (
            "pullrequest:rejected",
            DECLINED,
            "bitbucket.pullrequest.rejected",
            "bitbucket:team_name/repo_name#1",
        ),
        (
            "pullrequest:fulfilled",
            MERGED,
            "bitbucket.pullrequest.fulfilled",
            "bitbucket:team_name/repo_name#1",
        ),
        (
            "repo:commit_status_created",
            STATUS_CREATED,
            "bitbucket.commit_status.created",
            "bitbucket:team_name/repo_name@9fec847784abb10b2fa567ee63b85bd238955d0e",
        ),
        (
            "repo:commit_status_updated",
            STATUS_UPDATED,
            "bitbucket.commit_status.updated",
            "bitbucket:team_name/repo_name@9fec847784abb10b2fa567ee63b85bd238955d0e",
        ),
        (
            "issue:created",
            ISSUE_CREATED,
            "bitbucket.issue.created",
            "bitbucket:team_name/repo_name/issues/1",
        ),
        (
            "issue:comment_created",
            ISSUE_COMMENT,
            "bitbucket.issue.comment_created",
            "bitbucket:team_name/repo_name/issues/1",
        ),
    ] {
        let e = project(config, event_key, &json_of(body))
            .unwrap_or_else(|why| panic!("{event_key}: {why}"))
            .unwrap_or_else(|| panic!("{event_key}: no Event"));
        assert_eq!(e.event_type, event_type, "{event_key}");
        assert_eq!(e.keys, vec![key.to_string()], "{event_key}");
        assert_eq!(
            e.payload.schema,
            format!("{}.v1", event_type.rsplit_once('.').unwrap().0)
        );
    }
    // Another repository's, or an event the package does not take: nothing.
    let other = registry(json!({"repositories": ["acme/other"], "mention": "@conduit"}));
    assert!(project(
        &other.entries[0].config,
        "pullrequest:created",
        &json_of(CREATED)
    )
    .unwrap()
    .is_none());
    assert!(project(config, "repo:push", &json_of(CREATED))
        .unwrap()
        .is_none());
    // A pull request event without its pull request cannot be read.
    assert!(project(
        config,
        "pullrequest:created",
        &json!({"repository": {"full_name": REPO}})
    )
    .is_err());
}

#[test]
fn the_agents_own_comments_and_reviews_wake_nothing() {
    let as_agent =
        registry(json!({"repositories": [REPO], "mention": "@conduit", "agent_account_id": EMMA}));
    let config = &as_agent.entries[0].config;
    let mut comment = json_of(&mentioning_comment());
    for (key, body) in [
        ("pullrequest:comment_created", comment.clone()),
        ("pullrequest:approved", json_of(APPROVED)),
        ("pullrequest:changes_request_created", json_of(APPROVED)),
    ] {
        assert!(project(config, key, &body).unwrap().is_none(), "{key}");
    }
    // Signed and ignored is a 200 with nothing kept.
    let body = serde_json::to_vec(&comment).unwrap();
    let params = request(
        "pullrequest:comment_created",
        &body,
        Some(sign(SECRET, &body)),
        "u-2",
    );
    let result = process(&as_agent.entries[0], SECRET, &params);
    assert_eq!(result.response.status, 200);
    assert!(result.deliveries.is_empty());
    // Someone else's comment is heard, mentioning the agent or not.
    comment["actor"]["account_id"] = json!("someone");
    assert!(project(config, "pullrequest:comment_created", &comment)
        .unwrap()
        .is_some());
}

#[test]
fn mentions_and_jira_keys() {
    let config = parse_entry(
        &json!({"repositories": [REPO], "mention": "@Conduit", "agent_account_id": "557058:agent"}),
    )
    .unwrap();
    let m = |t: &str| oc_bitbucket::intake::mentions(&config, t);
    assert!(m("@conduit please"));
    assert!(m("thanks @CONDUIT."));
    assert!(m("ping @{557058:agent} here"));
    assert!(!m("@conduits are many"));
    assert!(!m("no mention"));
    assert!(!m("x@conduit"));
    let projects = vec!["PROJ".to_string(), "OPS".to_string()];
    let k = |b: &str| oc_bitbucket::intake::jira_key_in(&projects, b);
    assert_eq!(k("feature/PROJ-123-login").as_deref(), Some("PROJ-123"));
    assert_eq!(k("proj-7").as_deref(), Some("PROJ-7"));
    assert_eq!(k("bugfix/OPS-1").as_deref(), Some("OPS-1"));
    assert_eq!(k("XPROJ-1"), None);
    assert_eq!(k("PROJ-"), None);
    assert_eq!(k("main"), None);
}

fn event_of(event_key: &str, payload: &Value) -> Event {
    let e = project(&default_registry().entries[0].config, event_key, payload)
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

fn ask(event: Event, config: Value, work: Option<Work>) -> RouteMatchResult {
    match_route(&RouteMatchParams {
        handler: "bitbucket".into(),
        route: Route {
            handler: "bitbucket".into(),
            binding: "agent".into(),
            config,
        },
        event,
        work,
        ..Default::default()
    })
    .unwrap()
}

fn open_work() -> Option<Work> {
    Some(Work {
        id: "w1".into(),
        ..Default::default()
    })
}

#[test]
fn a_mentioning_comment_starts_the_pull_requests_work_with_title_key_and_author() {
    let r = ask(
        event_of(
            "pullrequest:comment_created",
            &json_of(&mentioning_comment()),
        ),
        Value::Null,
        None,
    );
    assert!(r.matched, "{}", r.reason);
    assert_eq!(r.keys, vec!["bitbucket:team_name/repo_name#1".to_string()]);
    let d = r.display.unwrap();
    assert_eq!(d.title, "Title of pull request");
    assert_eq!(d.reference, "team_name/repo_name#1");
    assert_eq!(d.requester, "Emma");
    assert_eq!(d.links[0].url, "https://api.bitbucket.org/pullrequest_id");
}

#[test]
fn a_comment_without_a_mention_joins_open_work_and_creates_none() {
    let e = event_of("pullrequest:comment_created", &json_of(COMMENT));
    let r = ask(e.clone(), Value::Null, None);
    assert!(!r.matched);
    assert!(r.reason.contains("starts no Work"), "{}", r.reason);
    let r = ask(e, Value::Null, open_work());
    assert!(r.matched, "{}", r.reason);
    assert!(r.reason.contains("joins"), "{}", r.reason);
}

#[test]
fn a_pull_request_from_a_jira_branch_starts_work_and_others_do_not() {
    let mut created = json_of(CREATED);
    let plain = ask(event_of("pullrequest:created", &created), Value::Null, None);
    assert!(!plain.matched, "{}", plain.reason);
    created["pullrequest"]["source"]["branch"]["name"] = json!("feature/PROJ-12-login");
    let e = event_of("pullrequest:created", &created);
    assert_eq!(e.payload.data["jira_key"], "PROJ-12");
    let r = ask(e, Value::Null, None);
    assert!(r.matched, "{}", r.reason);
    assert!(r.reason.contains("Jira issue"), "{}", r.reason);
    // The agent's own pull request from a Jira branch starts nothing.
    created["actor"]["account_id"] = json!("557058:agent");
    let r = ask(event_of("pullrequest:created", &created), Value::Null, None);
    assert!(!r.matched, "{}", r.reason);
}

/// Bitbucket has no pull request labels: the agent's account added as a reviewer
/// is how a person hands a pull request over without a comment.
#[test]
fn the_agent_asked_to_review_an_open_pull_request_starts_work() {
    let mut updated = json_of(CREATED);
    updated["pullrequest"]["state"] = json!("OPEN");
    let plain = ask(event_of("pullrequest:updated", &updated), Value::Null, None);
    assert!(!plain.matched, "{}", plain.reason);
    updated["pullrequest"]["reviewers"] = json!([
        {"display_name": "Emma", "account_id": "udfy9suggmzpswxc7n200y3c"},
        {"display_name": "Conduit", "account_id": "557058:agent"}
    ]);
    let e = event_of("pullrequest:updated", &updated);
    assert_eq!(e.payload.data["review_requested"], true);
    let r = ask(e, Value::Null, None);
    assert!(r.matched, "{}", r.reason);
    assert!(r.reason.contains("review"), "{}", r.reason);
    // Not once it is merged or declined, and not the agent's own pull request.
    let mut merged = updated.clone();
    merged["pullrequest"]["state"] = json!("MERGED");
    assert!(!ask(event_of("pullrequest:updated", &merged), Value::Null, None).matched);
    let mut own = updated.clone();
    own["actor"]["account_id"] = json!("557058:agent");
    assert!(!ask(event_of("pullrequest:updated", &own), Value::Null, None).matched);
}

#[test]
fn reviews_fulfilment_and_rejection_join_open_work_only() {
    for (key, body) in [
        ("pullrequest:approved", APPROVED),
        ("pullrequest:changes_request_created", APPROVED),
        ("pullrequest:fulfilled", MERGED),
        ("pullrequest:rejected", DECLINED),
    ] {
        let e = event_of(key, &json_of(body));
        assert!(!ask(e.clone(), Value::Null, None).matched, "{key}");
        let r = ask(e, Value::Null, open_work());
        assert!(r.matched, "{key}: {}", r.reason);
        assert_eq!(r.keys, vec!["bitbucket:team_name/repo_name#1".to_string()]);
    }
}

#[test]
fn the_routes_events_filter_and_config_errors() {
    let e = event_of(
        "pullrequest:comment_created",
        &json_of(&mentioning_comment()),
    );
    assert!(!ask(e.clone(), json!({"events": ["bitbucket.issue"]}), None).matched);
    assert!(
        ask(
            e.clone(),
            json!({"events": ["bitbucket.pullrequest.comment_created"]}),
            None
        )
        .matched
    );
    let bad = match_route(&RouteMatchParams {
        handler: "bitbucket".into(),
        route: Route {
            handler: "bitbucket".into(),
            binding: "agent".into(),
            config: json!({"events": ["github.issue"]}),
        },
        event: e,
        ..Default::default()
    })
    .unwrap_err();
    assert!(bad.message.contains("/events/0"), "{}", bad.message);
}

#[test]
fn method_path_and_size_are_checked_before_the_secret() {
    let reg = default_registry();
    let mut params = request("pullrequest:created", CREATED, None, "u");
    params.method = "GET".into();
    assert_eq!(precheck(&reg, &params).unwrap_err().status, 405);
    params.method = "POST".into();
    params.path = "/bitbucket/elsewhere".into();
    assert_eq!(precheck(&reg, &params).unwrap_err().status, 404);
    params.path = "/bitbucket/s1/code".into();
    params.body = vec![b' '; oc_bitbucket::intake::MAX_BODY_BYTES + 1];
    assert_eq!(precheck(&reg, &params).unwrap_err().status, 413);
}

#[test]
fn config_errors_name_the_field_by_pointer() {
    let e = parse_entry(&json!({"mention": "@c"})).unwrap_err();
    assert_eq!(e.pointer, "/repositories");
    let e = parse_entry(&json!({"repositories": ["acme"], "mention": "@c"})).unwrap_err();
    assert_eq!(e.pointer, "/repositories/0");
    let e = parse_entry(&json!({"repositories": ["acme/w"]})).unwrap_err();
    assert_eq!(e.pointer, "/mention");
    let e = parse_entry(
        &json!({"repositories": ["acme/w"], "mention": "@c", "jira_projects": ["proj"]}),
    )
    .unwrap_err();
    assert_eq!(e.pointer, "/jira_projects/0");
    let e = parse_entry(&json!({"repositories": ["acme/w"], "mention": "@c", "path": "/github/x"}))
        .unwrap_err();
    assert_eq!(e.pointer, "/path");
    let e = parse_entry(&json!({"repositories": ["acme/w"], "mention": "@c", "labels": ["x"]}))
        .unwrap_err();
    assert!(e.to_string().contains("labels"), "{e}");
    let c = oc_bitbucket::config::check_connection_config(&Value::Null).unwrap();
    assert_eq!(c.api_url, "https://api.bitbucket.org/2.0");
    let e =
        oc_bitbucket::config::check_connection_config(&json!({"api_url": "ftp://x"})).unwrap_err();
    assert_eq!(e.pointer, "/api_url");
    let e = oc_bitbucket::config::check_connection_config(&json!({"username": "a:b"})).unwrap_err();
    assert_eq!(e.pointer, "/username");
}

#[test]
fn the_manifest_loads_and_validate_names_fields_by_pointer() {
    assert!(oc_bitbucket::extension().is_ok());
    let r = oc_bitbucket::validate(&protocol::wire::ValidateParams {
        kind: protocol::wire::validate_kind::EXTENSION.into(),
        type_name: "bitbucket".into(),
        config: json!({"repositories": ["acme/widgets"]}),
        ..Default::default()
    });
    assert_eq!(r.diagnostics[0].path, "/mention");
    let r = oc_bitbucket::validate(&protocol::wire::ValidateParams {
        kind: protocol::wire::validate_kind::CONNECTION.into(),
        type_name: "bitbucket".into(),
        config: json!({"api_url": "https://api.bitbucket.org/2.0", "username": "bot"}),
        ..Default::default()
    });
    assert!(r.diagnostics.is_empty(), "{:?}", r.diagnostics);
    let r = oc_bitbucket::validate(&protocol::wire::ValidateParams {
        kind: protocol::wire::validate_kind::ROUTE.into(),
        type_name: "bitbucket".into(),
        config: json!({"events": ["bitbucket.nope"]}),
        ..Default::default()
    });
    assert_eq!(r.diagnostics[0].path, "/events/0");
}

#[test]
fn an_inline_comment_renders_readably_and_bounded() {
    let e = event_of(
        "pullrequest:comment_created",
        &json_of(&mentioning_comment()),
    );
    let r = oc_bitbucket::render::serve(&protocol::wire::EventRenderParams {
        event: e.clone(),
        ..Default::default()
    })
    .unwrap();
    assert!(!r.truncated);
    assert!(
        r.text
            .starts_with("**Bitbucket pull request team_name/repo_name#1**: Title of pull request"),
        "{}",
        r.text
    );
    assert!(r.text.contains("Branch: branch2 → master"), "{}", r.text);
    assert!(
        r.text.contains(
            "**Comment by Emma on path/to/file line 10:**\n\n@conduit the login page loops"
        ),
        "{}",
        r.text
    );
    let small = oc_bitbucket::render::serve(&protocol::wire::EventRenderParams {
        event: e,
        max_bytes: 100,
        ..Default::default()
    })
    .unwrap();
    assert!(small.truncated);
    assert!(small.text.len() <= 100, "{}", small.text.len());
    let status = event_of("repo:commit_status_updated", &json_of(STATUS_UPDATED));
    let r = oc_bitbucket::render::serve(&protocol::wire::EventRenderParams {
        event: status,
        ..Default::default()
    })
    .unwrap();
    assert!(r.text.starts_with("**Bitbucket build status** on team_name/repo_name commit 9fec847784abb10b2fa567ee63b85bd238955d0e"), "{}", r.text);
}
