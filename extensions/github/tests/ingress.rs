//! The ingress side without a host: the manifest, signatures, configure,
//! the projection of each fixture and `webhook.handle`'s decisions.

#![allow(clippy::unwrap_used)]

mod common;

use common::*;
use oc_github::config::Registry;
use oc_github::signature::{sign, verify, SignatureError};
use oc_github::webhook::{precheck, process};
use oc_github::{project, Family};
use protocol::wire::{Entry, WebhookHandleResult};
use serde_json::{json, Value};

// ---------------------------------------------------------------------------
// Manifest

#[test]
fn the_manifest_parses_and_declares_what_the_host_contract_needs() {
    let m = protocol::manifest::parse_manifest(oc_github::MANIFEST.as_bytes()).unwrap();
    assert_eq!(m.name, "github");
    assert_eq!(m.command, vec!["oc-github-extension".to_string()]);
    assert_eq!(m.protocol, vec![1]);
    let families: Vec<&str> = m
        .provides
        .families
        .iter()
        .map(|f| f.name.as_str())
        .collect();
    assert_eq!(families, Family::names());
    assert!(m.provides.families.iter().all(|f| f.re_derivable));
    let ext = &m.provides.extensions[0];
    assert!(ext.ingress && ext.webhooks);
    assert_eq!(ext.type_name, "github");
    assert_eq!(ext.families, Family::names());
    let conn = &m.provides.connections[0];
    let secret = conn
        .fields
        .iter()
        .find(|f| f.name == "webhook_secret")
        .unwrap();
    assert!(secret.secret && secret.required);
    assert!(conn
        .fields
        .iter()
        .any(|f| f.name == "token" && f.secret && !f.required));
    assert_eq!(m.provides.routes[0].handler, "github");
    for f in Family::ALL {
        assert_eq!(
            m.payload_status(Some(f.schema())),
            protocol::manifest::PayloadStatus::Current,
            "{}",
            f.schema()
        );
    }
    assert!(m.enables("webhook.handle") && m.enables("route.match"));
    // Rendering comes with the families; the filter with `dependency_filter`.
    assert!(m.enables("event.render"));
    assert!(m.provides.dependency_filter && m.enables("dependency.filter"));
    assert_eq!(families.len(), 8);
    let ext = oc_github::extension().unwrap();
    assert!(ext.errors().is_empty(), "{:?}", ext.errors());
}

// ---------------------------------------------------------------------------
// Signatures

#[test]
fn githubs_documented_example_signature_verifies() {
    let secret = b"It's a Secret to Everybody";
    let expected = "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17";
    assert_eq!(sign(secret, b"Hello, World!"), expected);
    verify(secret, b"Hello, World!", Some(expected)).unwrap();
    // Upper-case hex is the same signature.
    let upper = format!(
        "sha256={}",
        expected["sha256=".len()..].to_ascii_uppercase()
    );
    verify(secret, b"Hello, World!", Some(&upper)).unwrap();
    assert_eq!(
        verify(secret, b"Hello, World?", Some(expected)),
        Err(SignatureError::Mismatch)
    );
    assert_eq!(
        verify(b"It's a Secret to Nobody", b"Hello, World!", Some(expected)),
        Err(SignatureError::Mismatch)
    );
}

#[test]
fn a_fixture_signed_verifies_and_a_tampered_body_does_not() {
    let header = sign(SECRET, ISSUES_OPENED);
    verify(SECRET, ISSUES_OPENED, Some(&header)).unwrap();
    let mut tampered = ISSUES_OPENED.to_vec();
    let at = tampered.iter().position(|b| *b == b'S').unwrap();
    tampered[at] = b's';
    assert_eq!(
        verify(SECRET, &tampered, Some(&header)),
        Err(SignatureError::Mismatch)
    );
    let mut longer = ISSUES_OPENED.to_vec();
    longer.push(b' ');
    assert_eq!(
        verify(SECRET, &longer, Some(&header)),
        Err(SignatureError::Mismatch)
    );
}

#[test]
fn missing_and_malformed_signatures_are_refused() {
    assert_eq!(verify(SECRET, b"{}", None), Err(SignatureError::Missing));
    let good = sign(SECRET, b"{}");
    let hex = &good["sha256=".len()..];
    for bad in [
        hex.to_string(),                    // no prefix
        format!("sha1={hex}"),              // another algorithm
        format!("sha256={}", &hex[..62]),   // short
        format!("sha256={hex}00"),          // long
        format!("sha256={}zz", &hex[..62]), // not hex
        String::new(),
    ] {
        assert_eq!(
            verify(SECRET, b"{}", Some(&bad)),
            Err(SignatureError::Malformed),
            "{bad:?}"
        );
    }
}

// ---------------------------------------------------------------------------
// Configure

#[test]
fn configure_registers_a_source_and_the_default_path_for_each_entry() {
    let reg = registry(json!({"repository": REPO}));
    let result = reg.configure_result();
    assert_eq!(result.sources.len(), 1);
    let source = &result.sources[0];
    assert_eq!(source.name, "github/s1/hello");
    assert_eq!(source.source_type, "github");
    assert_eq!(source.scope_id, "s1");
    assert_eq!(source.entry, "hello");
    assert_eq!(source.families, Family::names());
    let hook = &result.webhooks[0];
    assert_eq!(hook.path, "/github/s1/hello");
    assert_eq!(hook.source, "github/s1/hello");
    assert_eq!(
        (hook.scope_id.as_str(), hook.entry.as_str()),
        ("s1", "hello")
    );
}

#[test]
fn configure_takes_a_path_and_an_events_list() {
    let reg = registry(json!({
        "repository": REPO,
        "path": "/github/custom/",
        "events": ["issues", "check_run"],
    }));
    let e = the_entry(&reg);
    assert_eq!(e.path, "/github/custom");
    assert_eq!(e.events, Some(vec![Family::Issue, Family::CheckRun]));
    assert!(e.accepts(Family::Issue) && !e.accepts(Family::PullRequest));
    assert_eq!(reg.configure_result().webhooks[0].path, "/github/custom");
}

fn configure_error(entries: Vec<Entry>) -> String {
    let e = Registry::from_params(&configure_params(entries)).unwrap_err();
    assert_eq!(e.code, protocol::error::INVALID_PARAMS, "{e:?}");
    e.message
}

#[test]
fn configure_refuses_an_entry_without_a_connection_naming_scope_entry_and_field() {
    let mut e = entry(json!({"repository": REPO}));
    e.connection = String::new();
    let message = configure_error(vec![e]);
    assert!(message.contains("scope s1"), "{message}");
    assert!(message.contains("entry hello"), "{message}");
    assert!(message.contains("`connection`"), "{message}");
}

#[test]
fn configure_refuses_broken_config_fields() {
    for (config, field) in [
        (json!({}), "`repository`"),
        (json!({"repository": "no-slash"}), "`repository`"),
        (json!({"repository": "a/b/c"}), "`repository`"),
        (json!({"repository": 7}), "`repository`"),
        (json!({"repository": REPO, "path": "/elsewhere"}), "`path`"),
        (
            json!({"repository": REPO, "path": "/github/../x"}),
            "`path`",
        ),
        (json!({"repository": REPO, "events": ["push"]}), "`events`"),
        (json!({"repository": REPO, "events": "issues"}), "`events`"),
    ] {
        let message = configure_error(vec![entry(config.clone())]);
        assert!(message.contains(field), "{config}: {message}");
        assert!(message.contains("scope s1, entry hello"), "{message}");
    }
    // Two entries on one path.
    let mut second = entry(json!({"repository": REPO, "path": "/github/s1/hello"}));
    second.name = "other".into();
    let message = configure_error(vec![entry(json!({"repository": REPO})), second]);
    assert!(
        message.contains("entry other") && message.contains("`path`"),
        "{message}"
    );
}

#[test]
fn the_longest_registered_path_covering_the_request_wins() {
    let mut outer = entry(json!({"repository": REPO, "path": "/github/org"}));
    outer.name = "outer".into();
    let mut inner = entry(json!({"repository": REPO, "path": "/github/org/team"}));
    inner.name = "inner".into();
    let reg = Registry::from_params(&configure_params(vec![outer, inner])).unwrap();
    assert_eq!(reg.entry_for("/github/org/team").unwrap().name, "inner");
    assert_eq!(reg.entry_for("/github/org/team/x").unwrap().name, "inner");
    assert_eq!(reg.entry_for("/github/org/teams").unwrap().name, "outer");
    assert_eq!(reg.entry_for("/github/org").unwrap().name, "outer");
    assert!(reg.entry_for("/github/orgs").is_none());
}

// ---------------------------------------------------------------------------
// Projection

fn projected(family: Family, body: &[u8]) -> protocol::wire::IngressEvent {
    project::project(family, "d-1", &json_of(body)).unwrap()
}

#[test]
fn an_opened_issue_projects_its_fields() {
    let e = projected(Family::Issue, ISSUES_OPENED);
    assert_eq!(e.event_type, "github.issue.opened");
    assert_eq!(e.payload.schema, "github.issue.v1");
    assert_eq!(e.keys, vec!["github:codertocat/hello-world#1".to_string()]);
    assert_eq!(e.occurred_at, "2019-05-15T15:20:18Z");
    let d = &e.payload.data;
    assert_eq!(d["action"], "opened");
    assert_eq!(d["delivery_id"], "d-1");
    assert_eq!(d["repository"], REPO);
    assert_eq!(d["sender"], "Codertocat");
    assert_eq!(d["number"], 1);
    assert_eq!(d["title"], "Spelling error in the README file");
    assert_eq!(d["state"], "open");
    assert_eq!(
        d["html_url"],
        "https://github.com/Codertocat/Hello-World/issues/1"
    );
    assert_eq!(d["author"], "Codertocat");
    assert_eq!(d["labels"], json!(["bug"]));
    assert!(d["body"]
        .as_str()
        .unwrap()
        .starts_with("It looks like you accidently spelled"));
    assert!(d.get("body_truncated").is_none());
    // Trimmed: nothing of the raw payload's bulk.
    assert!(d.get("issue").is_none() && d.get("user").is_none());
    assert!(e.payload.data.to_string().len() < 1024);
}

#[test]
fn an_issue_comment_projects_the_issue_and_the_comment() {
    let e = projected(Family::IssueComment, ISSUE_COMMENT_CREATED);
    assert_eq!(e.event_type, "github.issue_comment.created");
    assert_eq!(e.payload.schema, "github.issue_comment.v1");
    assert_eq!(e.keys, vec!["github:codertocat/hello-world#1".to_string()]);
    assert_eq!(e.occurred_at, "2019-05-15T15:20:21Z");
    let d = &e.payload.data;
    assert_eq!(d["number"], 1);
    assert_eq!(d["is_pull_request"], false);
    assert_eq!(d["comment"]["id"], 492700400);
    assert_eq!(d["comment"]["author"], "Codertocat");
    assert_eq!(
        d["comment"]["body"],
        "You are totally right! I'll get this fixed right away."
    );
    assert_eq!(
        d["comment"]["html_url"],
        "https://github.com/Codertocat/Hello-World/issues/1#issuecomment-492700400"
    );
}

#[test]
fn an_opened_pull_request_projects_its_refs() {
    let e = projected(Family::PullRequest, PULL_REQUEST_OPENED);
    assert_eq!(e.event_type, "github.pull_request.opened");
    assert_eq!(e.keys, vec!["github:codertocat/hello-world#2".to_string()]);
    assert_eq!(e.occurred_at, "2019-05-15T15:20:33Z");
    let d = &e.payload.data;
    assert_eq!(d["number"], 2);
    assert_eq!(d["title"], "Update the README with new information.");
    assert_eq!(
        d["html_url"],
        "https://github.com/Codertocat/Hello-World/pull/2"
    );
    assert_eq!(d["head_ref"], "changes");
    assert_eq!(d["base_ref"], "master");
    assert_eq!(d["head_sha"], "ec26c3e57ca3a959ca5aad62de7213c562f8c821");
    assert_eq!(d["draft"], false);
    assert_eq!(d["merged"], false);
    assert_eq!(d["labels"], json!(["bug"]));
}

#[test]
fn a_submitted_review_projects_its_state_and_body() {
    let e = projected(Family::PullRequestReview, PULL_REQUEST_REVIEW_SUBMITTED);
    assert_eq!(e.event_type, "github.pull_request_review.submitted");
    assert_eq!(e.keys, vec!["github:codertocat/hello-world#2".to_string()]);
    assert_eq!(e.occurred_at, "2019-05-15T15:20:38Z");
    let d = &e.payload.data;
    assert_eq!(d["number"], 2);
    assert_eq!(d["review"]["state"], "commented");
    assert_eq!(d["review"]["body"], "");
    assert_eq!(d["review"]["id"], 237895671);
    assert_eq!(d["review"]["author"], "Codertocat");
}

#[test]
fn a_completed_check_run_keys_each_pull_request() {
    let e = projected(Family::CheckRun, CHECK_RUN_COMPLETED);
    assert_eq!(e.event_type, "github.check_run.completed");
    assert_eq!(e.payload.schema, "github.check_run.v1");
    assert_eq!(e.keys, vec!["github:codertocat/hello-world#2".to_string()]);
    assert_eq!(e.occurred_at, "2019-05-15T15:21:12Z");
    let d = &e.payload.data;
    assert_eq!(d["name"], "Octocoders-linter");
    assert_eq!(d["status"], "completed");
    assert_eq!(d["conclusion"], "success");
    assert_eq!(d["head_sha"], "ec26c3e57ca3a959ca5aad62de7213c562f8c821");
    assert_eq!(d["pull_requests"], json!([2]));

    // Without pull requests: no keys.
    let mut payload = json_of(CHECK_RUN_COMPLETED);
    payload["check_run"]["pull_requests"] = json!([]);
    let e = project::project(Family::CheckRun, "d-2", &payload).unwrap();
    assert!(e.keys.is_empty());
    // Two (and a repeated one): one key each.
    payload["check_run"]["pull_requests"] = json!([{"number": 3}, {"number": 9}, {"number": 3}]);
    let e = project::project(Family::CheckRun, "d-3", &payload).unwrap();
    assert_eq!(
        e.keys,
        vec![
            "github:codertocat/hello-world#3".to_string(),
            "github:codertocat/hello-world#9".to_string()
        ]
    );
}

#[test]
fn actions_are_sanitized_and_bodies_truncated() {
    assert_eq!(
        project::sanitize_action("ready_for_review"),
        "ready_for_review"
    );
    assert_eq!(project::sanitize_action("Re-Opened!"), "re_opened_");
    let mut payload = json_of(ISSUES_OPENED);
    payload["action"] = json!("Un-Labeled");
    let body = "é".repeat(40_000); // 80,000 bytes of two-byte characters
    payload["issue"]["body"] = json!(body);
    let e = project::project(Family::Issue, "d", &payload).unwrap();
    assert_eq!(e.event_type, "github.issue.un_labeled");
    assert_eq!(e.payload.data["action"], "Un-Labeled");
    let cut = e.payload.data["body"].as_str().unwrap();
    assert!(cut.len() <= project::MAX_BODY_BYTES);
    assert_eq!(cut.len(), project::MAX_BODY_BYTES); // 65,536 is even: no partial char
    assert_eq!(e.payload.data["body_truncated"], true);
    let (odd, was_cut) = project::truncate("aé", 2);
    assert_eq!((odd, was_cut), ("a", true));
}

#[test]
fn a_payload_missing_what_its_family_needs_is_refused() {
    let mut payload = json_of(ISSUES_OPENED);
    payload["issue"].as_object_mut().unwrap().remove("number");
    let why = project::project(Family::Issue, "d", &payload).unwrap_err();
    assert!(why.contains("number"), "{why}");
    let mut payload = json_of(ISSUES_OPENED);
    payload.as_object_mut().unwrap().remove("action");
    assert!(project::project(Family::Issue, "d", &payload).is_err());
    let payload = json_of(ISSUES_OPENED);
    assert!(project::project(Family::PullRequest, "d", &payload).is_err());
}

#[test]
fn timestamps_that_are_not_rfc3339_utc_are_left_to_the_hosts_clock() {
    assert!(project::is_utc_timestamp("2019-05-15T15:20:18Z"));
    assert!(project::is_utc_timestamp("2019-05-15T15:20:18.123Z"));
    assert!(!project::is_utc_timestamp("2019-05-15T15:20:18+02:00"));
    assert!(!project::is_utc_timestamp("2019-05-15"));
    let mut payload = json_of(ISSUES_OPENED);
    payload["issue"]["updated_at"] = json!("yesterday");
    payload["issue"]["created_at"] = json!(null);
    let e = project::project(Family::Issue, "d", &payload).unwrap();
    assert_eq!(e.occurred_at, "");
}

// ---------------------------------------------------------------------------
// webhook.handle

fn handle(config: Value, params: &protocol::wire::WebhookHandleParams) -> WebhookHandleResult {
    let reg = registry(config);
    match precheck(&reg, params) {
        Ok(entry) => process(entry, SECRET, params),
        Err(answer) => oc_github::webhook::answer_only(answer),
    }
}

fn hello() -> Value {
    json!({"repository": REPO})
}

#[test]
fn a_signed_issue_is_one_delivery_and_200() {
    let params = request(
        "issues",
        "72d3162e-cc78-11e3-81ab-4c9367dc0958",
        ISSUES_OPENED,
        SECRET,
    );
    let r = handle(hello(), &params);
    assert_eq!(r.response.status, 200);
    assert_eq!(body_json(&r.response.body), json!({"ok": true}));
    assert_eq!(r.deliveries.len(), 1);
    let d = &r.deliveries[0];
    assert_eq!(d.source, "github/s1/hello");
    assert_eq!(d.delivery_id, "72d3162e-cc78-11e3-81ab-4c9367dc0958");
    assert!(d.body.is_none());
    assert_eq!(d.events.len(), 1);
    assert_eq!(d.events[0].event_type, "github.issue.opened");
    assert_eq!(
        d.events[0].keys,
        vec!["github:codertocat/hello-world#1".to_string()]
    );
    assert_eq!(
        d.events[0].payload.data["delivery_id"],
        "72d3162e-cc78-11e3-81ab-4c9367dc0958"
    );
    // Each fixture of the five families is delivered as its family.
    for (event, body, family) in [
        ("issue_comment", ISSUE_COMMENT_CREATED, Family::IssueComment),
        ("pull_request", PULL_REQUEST_OPENED, Family::PullRequest),
        (
            "pull_request_review",
            PULL_REQUEST_REVIEW_SUBMITTED,
            Family::PullRequestReview,
        ),
        ("check_run", CHECK_RUN_COMPLETED, Family::CheckRun),
    ] {
        let r = handle(hello(), &request(event, "d", body, SECRET));
        assert_eq!(r.response.status, 200, "{event}");
        let e = &r.deliveries[0].events[0];
        assert_eq!(Family::of_type(&e.event_type), Some(family), "{event}");
        assert_eq!(e.payload.schema, family.schema());
    }
}

#[test]
fn a_bad_signature_is_401_and_no_delivery() {
    let wrong = request("issues", "d", ISSUES_OPENED, b"another secret");
    let r = handle(hello(), &wrong);
    assert_eq!(r.response.status, 401);
    assert!(r.deliveries.is_empty());
    assert!(String::from_utf8_lossy(&r.response.body).contains("does not match"));

    let mut tampered = request("issues", "d", ISSUES_OPENED, SECRET);
    tampered.body.push(b'\n');
    let r = handle(hello(), &tampered);
    assert_eq!(r.response.status, 401);
    assert!(r.deliveries.is_empty());

    let mut unsigned = request("issues", "d", ISSUES_OPENED, SECRET);
    unsigned.headers.remove("x-hub-signature-256");
    let r = handle(hello(), &unsigned);
    assert_eq!(r.response.status, 401);
    assert!(r.deliveries.is_empty());
    assert!(String::from_utf8_lossy(&r.response.body).contains("missing"));
    assert!(r.response.headers["Content-Type"].starts_with("text/plain"));
}

#[test]
fn a_ping_is_200_with_zen_and_no_delivery() {
    let r = handle(hello(), &request("ping", "d", PING, SECRET));
    assert_eq!(r.response.status, 200);
    assert!(r.deliveries.is_empty());
    assert_eq!(
        body_json(&r.response.body),
        json!({"ok": true, "zen": "Anything added dilutes everything else."})
    );
}

#[test]
fn another_repository_is_202_ignored() {
    let r = handle(
        json!({"repository": "someone/else"}),
        &request("issues", "d", ISSUES_OPENED, SECRET),
    );
    assert_eq!(r.response.status, 202);
    assert!(r.deliveries.is_empty());
    let body = body_json(&r.response.body);
    assert_eq!(body["ignored"], true);
    assert!(body["reason"]
        .as_str()
        .unwrap()
        .contains("Codertocat/Hello-World"));
    // The comparison ignores case.
    let r = handle(
        json!({"repository": "CODERTOCAT/hello-world"}),
        &request("issues", "d", ISSUES_OPENED, SECRET),
    );
    assert_eq!(r.response.status, 200);
    assert_eq!(r.deliveries.len(), 1);
}

#[test]
fn events_outside_the_seven_or_the_entrys_list_are_202_ignored() {
    let r = handle(hello(), &request("push", "d", ISSUES_OPENED, SECRET));
    assert_eq!(r.response.status, 202);
    assert!(r.deliveries.is_empty());
    assert!(String::from_utf8_lossy(&r.response.body).contains("push"));
    let only_checks = json!({"repository": REPO, "events": ["check_run"]});
    let r = handle(
        only_checks.clone(),
        &request("issues", "d", ISSUES_OPENED, SECRET),
    );
    assert_eq!(r.response.status, 202);
    assert!(r.deliveries.is_empty());
    let r = handle(
        only_checks,
        &request("check_run", "d", CHECK_RUN_COMPLETED, SECRET),
    );
    assert_eq!(r.response.status, 200);
    assert_eq!(r.deliveries.len(), 1);
}

#[test]
fn malformed_requests_are_4xx_and_no_delivery() {
    // Not JSON (but signed).
    let r = handle(hello(), &request("issues", "d", b"not json", SECRET));
    assert_eq!(r.response.status, 400);
    assert!(r.deliveries.is_empty());
    // JSON, but not an object.
    let r = handle(hello(), &request("issues", "d", b"[1]", SECRET));
    assert_eq!(r.response.status, 400);
    // No delivery ID.
    let mut p = request("issues", "d", ISSUES_OPENED, SECRET);
    p.headers.remove("x-github-delivery");
    let r = handle(hello(), &p);
    assert_eq!(r.response.status, 400);
    assert!(String::from_utf8_lossy(&r.response.body).contains("X-GitHub-Delivery"));
    // No event.
    let mut p = request("issues", "d", ISSUES_OPENED, SECRET);
    p.headers.remove("x-github-event");
    assert_eq!(handle(hello(), &p).response.status, 400);
    // An issues payload without its issue.
    let r = handle(
        hello(),
        &request(
            "issues",
            "d",
            br#"{"action":"opened","repository":{"full_name":"Codertocat/Hello-World"}}"#,
            SECRET,
        ),
    );
    assert_eq!(r.response.status, 400);
    assert!(r.deliveries.is_empty());
    // Not POST.
    let mut p = request("issues", "d", ISSUES_OPENED, SECRET);
    p.method = "GET".into();
    let r = handle(hello(), &p);
    assert_eq!(r.response.status, 405);
    assert_eq!(r.response.headers["Allow"], "POST");
    assert!(r.deliveries.is_empty());
    // A path no entry covers.
    let mut p = request("issues", "d", ISSUES_OPENED, SECRET);
    p.path = "/github/s1/other".into();
    assert_eq!(handle(hello(), &p).response.status, 404);
}

#[test]
fn headers_are_read_whatever_their_case_and_a_subpath_is_served() {
    let mut p = request("issues", "d-7", ISSUES_OPENED, SECRET);
    let headers = std::mem::take(&mut p.headers);
    for (k, v) in headers {
        p.headers.insert(k.to_ascii_uppercase(), v);
    }
    p.path = "/github/s1/hello/extra".into();
    let r = handle(hello(), &p);
    assert_eq!(r.response.status, 200);
    assert_eq!(r.deliveries[0].delivery_id, "d-7");
}

#[test]
fn every_non_2xx_answer_carries_no_delivery() {
    let cases = [
        request("issues", "d", ISSUES_OPENED, b"wrong"),
        request("issues", "d", b"{", SECRET),
        request("ping", "d", PING, SECRET),
        request("push", "d", ISSUES_OPENED, SECRET),
        request("issues", "d", ISSUES_OPENED, SECRET),
    ];
    for p in &cases {
        let r = handle(hello(), p);
        if !(200..300).contains(&r.response.status) {
            assert!(r.deliveries.is_empty());
        }
        if !r.deliveries.is_empty() {
            assert_eq!(r.response.status, 200);
        }
    }
    let unavailable = oc_github::webhook::unavailable();
    assert_eq!(unavailable.status, 503);
    assert_eq!(unavailable.headers["Retry-After"], "5");
}

// ---------------------------------------------------------------------------
// validate

fn validated(kind: &str, config: Value) -> protocol::wire::ValidateResult {
    oc_github::validate(&protocol::wire::ValidateParams {
        kind: kind.into(),
        type_name: "github".into(),
        name: "hello".into(),
        config,
        ..Default::default()
    })
}

#[test]
fn validate_answers_diagnostics_for_broken_entries_routes_and_connections() {
    let ok = validated(
        "extension",
        json!({"repository": REPO, "events": ["issues"]}),
    );
    assert!(ok.diagnostics.is_empty());
    assert_eq!(ok.describe.len(), 1);
    assert!(ok.describe[0].contains(REPO), "{:?}", ok.describe);
    let bad = validated("extension", json!({"repository": "nope"}));
    assert_eq!(bad.diagnostics.len(), 1);
    assert_eq!(bad.diagnostics[0].path, "/repository");

    assert!(validated("route", json!({"events": ["github.issue"]}))
        .diagnostics
        .is_empty());
    assert_eq!(
        validated("route", json!({"events": ["github.issues"]}))
            .diagnostics
            .len(),
        1
    );

    assert!(validated(
        "connection",
        json!({"api_url": "https://ghe.example/api/v3"})
    )
    .diagnostics
    .is_empty());
    assert_eq!(
        validated("connection", json!({"api_url": "ftp://x"}))
            .diagnostics
            .len(),
        1
    );
    // Each problem is named by its pointer; an unknown field is refused.
    let path_and_message = |kind: &str, config: Value| {
        let d = validated(kind, config).diagnostics;
        assert_eq!(d.len(), 1, "{d:?}");
        (d[0].path.clone(), d[0].message.clone())
    };
    assert_eq!(
        path_and_message("extension", json!({"repository": REPO, "lables": ["x"]})),
        (
            "/lables".to_string(),
            "unknown field (known: repository, path, events, reconcile_interval_s, manage_webhook)"
                .to_string()
        )
    );
    assert_eq!(
        path_and_message(
            "extension",
            json!({"repository": REPO, "events": ["issues", 3]})
        ),
        ("/events/1".to_string(), "must be a string".to_string())
    );
    assert_eq!(
        path_and_message(
            "route",
            json!({"events": ["github.issue"], "lables": ["agent"]})
        ),
        (
            "/lables".to_string(),
            "route config /lables: unknown field (known: events, labels)".to_string()
        )
    );
    assert_eq!(
        path_and_message("connection", json!({"app_id": 1, "installation_id": "x"})),
        (
            "/installation_id".to_string(),
            "must be a positive integer".to_string()
        )
    );
    assert_eq!(
        path_and_message("connection", json!({"app_id": 1})).0,
        "/installation_id"
    );
    assert_eq!(
        path_and_message("connection", json!({"api_url": "https://x", "token": "t"})).0,
        "/token"
    );
    // Another type is not ours to judge.
    let other = oc_github::validate(&protocol::wire::ValidateParams {
        kind: "extension".into(),
        type_name: "slack".into(),
        config: json!(42),
        ..Default::default()
    });
    assert!(other.diagnostics.is_empty());
}
