//! The GraphQL client and the operations against a stand-in of Linear's API that
//! validates every query and mutation it receives against Linear's published schema
//! with graphql-js (tests/linear-api: `validate.js`, `schema.graphql`), answering a
//! document the schema refuses as Linear does (400, `GRAPHQL_VALIDATION_FAILED`);
//! and the errors of a refused key (401), a forbidden call (403) and Linear's rate
//! limit (`RATELIMITED`, its reset headers), none carrying the key.
//!
//! Needs `npm ci --prefix tests/linear-api`; without it the tests print `SKIPPED`
//! and pass, unless `OC_REQUIRE_PEERS=1`.

#![allow(clippy::unwrap_used)]

mod standin;

use oc_linear::api::{self, Client};
use oc_linear::ops;
use protocol::Code;
use serde_json::{json, Value};
use standin::{graphql_error, operation_name, stand_in, Answer, Validator};

const KEY: &str = "lin_api_TESTKEY0123456789";

#[test]
fn every_document_the_package_sends_is_valid_against_linears_schema() {
    let Some(mut v) = Validator::start() else {
        return;
    };
    for (name, doc) in api::DOCUMENTS {
        assert_eq!(v.errors(doc), Vec::<String>::new(), "{name}");
        assert_eq!(operation_name(doc), name);
    }
    // The validation can fail: a field Linear's schema does not have.
    let broken = api::ISSUE_QUERY.replace("identifier title", "identifier headline");
    let errors = v.errors(&broken);
    assert!(errors.iter().any(|e| e.contains("headline")), "{errors:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_operations_send_valid_documents_and_read_the_answers() {
    let Some(v) = Validator::start() else {
        return;
    };
    let (url, seen) = stand_in(v);
    let client = Client::new(&url, KEY).unwrap();
    let issue = ops::run(
        &client,
        ops::READ_ISSUE,
        &json!({"comments": 10}),
        "LIN-1778",
    )
    .await
    .unwrap();
    assert_eq!(issue["title"], "Foo bar");
    assert_eq!(issue["comments"][0]["author"], "Ada Lovelace");
    let c = ops::run(
        &client,
        ops::COMMENT,
        &json!({"body": "On it."}),
        "LIN-1778",
    )
    .await
    .unwrap();
    assert_eq!(c["id"], "c2");
    let m = ops::run(
        &client,
        ops::MOVE,
        &json!({"state": "in review"}),
        "LIN-1778",
    )
    .await
    .unwrap();
    assert_eq!(m["state"], "In Review");
    let e = ops::run(&client, ops::MOVE, &json!({"state": "Shipped"}), "LIN-1778")
        .await
        .unwrap_err();
    assert!(e.is(Code::Invalid), "{e:?}");
    assert!(e.message.contains("Todo, In Review, Done"), "{}", e.message);
    let l = ops::run(&client, ops::LABEL, &json!({"label": "Agent"}), "LIN-1778")
        .await
        .unwrap();
    assert_eq!(
        l["label_id"], "lt",
        "the team's label before the workspace's"
    );
    let seen = seen.lock().unwrap();
    let ops_seen: Vec<&str> = seen.requests.iter().map(|r| r.0.as_str()).collect();
    assert_eq!(
        ops_seen,
        [
            "OcIssue",
            "OcIssue",
            "OcComment",
            "OcIssue",
            "OcTeamStates",
            "OcMove",
            "OcIssue",
            "OcTeamStates",
            "OcIssue",
            "OcLabels",
            "OcAddLabel"
        ]
    );
    for (op, vars, auth, errors) in &seen.requests {
        assert!(errors.is_empty(), "{op}: {errors:?}");
        assert_eq!(auth, KEY, "{op}");
        assert!(vars.is_object(), "{op}");
    }
    let comment = &seen.requests[2].1;
    assert_eq!(comment["input"]["body"], "On it.");
    assert_eq!(
        comment["input"]["issueId"],
        "539068e2-ae88-4d09-bd75-22eb4a59612f"
    );
    assert_eq!(seen.requests[5].1["input"]["stateId"], "s2");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_document_the_schema_refuses_is_an_error() {
    let Some(v) = Validator::start() else {
        return;
    };
    let (url, seen) = stand_in(v);
    let client = Client::new(&url, KEY).unwrap();
    let e = client
        .send(
            "broken",
            "query OcBroken { issue(id: \"x\") { headline } }",
            json!({}),
        )
        .await
        .unwrap_err();
    assert!(e.is(Code::Invalid), "{e:?}");
    assert!(e.message.contains("headline"), "{}", e.message);
    assert!(e.message.contains("GRAPHQL_VALIDATION_FAILED"));
    assert_eq!(seen.lock().unwrap().requests[0].3.len(), 1);
}

/// The reset header of a time `s` seconds from now (Unix ms).
fn reset_in(s: i64) -> String {
    (protocol::time::now_ms() + s * 1000).to_string()
}

/// What the agent is told, and what Linear said, of an error.
fn told(e: &protocol::RpcError) -> (String, Value) {
    let data = e.data.clone().unwrap_or(Value::Null);
    (
        data["agent_message"]
            .as_str()
            .unwrap_or_default()
            .to_string(),
        data["linear"].clone(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_forbidden_unknown_and_rate_limited_calls_are_clear_errors_without_the_key() {
    let Some(v) = Validator::start() else {
        return;
    };
    let (url, seen) = stand_in(v);
    // The agent's client: asked even after a refusal.
    let client = Client::new(&url, KEY).unwrap().without_backoff();
    type Case = (Answer, Code, &'static str, &'static str);
    let cases: Vec<Case> = vec![
        (
            graphql_error(
                401,
                &[],
                "Authentication required, not authenticated",
                "AUTHENTICATION_ERROR",
            ),
            Code::Unauthorized,
            "api_key was refused",
            "HTTP 401 AUTHENTICATION_ERROR: Authentication required, not authenticated",
        ),
        (
            graphql_error(403, &[], "Forbidden", "FORBIDDEN"),
            Code::Unauthorized,
            "may not do this",
            "HTTP 403 FORBIDDEN: Forbidden",
        ),
        (
            graphql_error(200, &[], "Entity not found: Issue", "INPUT_ERROR"),
            Code::NotFound,
            "Linear has no issue LIN-1778",
            "HTTP 200 INPUT_ERROR: Entity not found: Issue",
        ),
        (
            graphql_error(
                400,
                &[],
                "Query too complex: 12000 points, the limit is 10000",
                "INPUT_ERROR",
            ),
            Code::Invalid,
            "more complex than Linear allows one query",
            "not retried",
        ),
    ];
    for (answer, code, says, linear_says) in cases {
        let status = answer.0;
        let before = seen.lock().unwrap().requests.len();
        seen.lock().unwrap().answer = Some(answer);
        let e = ops::run(&client, ops::READ_ISSUE, &json!({}), "LIN-1778")
            .await
            .unwrap_err();
        assert!(e.is(code), "{status}: {e:?}");
        assert!(e.message.contains(says), "{status}: {}", e.message);
        assert!(e.message.contains(linear_says), "{status}: {}", e.message);
        let (agent, linear) = told(&e);
        assert!(agent.contains(linear_says), "{status}: {agent}");
        assert_eq!(linear["status"], status, "{linear}");
        assert!(!format!("{e:?}").contains(KEY), "{status}: the key leaked");
        assert_eq!(
            seen.lock().unwrap().requests.len(),
            before + 1,
            "{status}: asked once"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_issue_key_is_not_found_naming_the_key() {
    let Some(v) = Validator::start() else {
        return;
    };
    let (url, seen) = stand_in(v);
    seen.lock().unwrap().script = Some(Box::new(|op, vars| {
        (op == "OcIssue" && vars["id"] == "LIN-99999")
            .then(|| graphql_error(200, &[], "Entity not found: Issue", "INPUT_ERROR"))
    }));
    let client = Client::new(&url, KEY).unwrap().without_backoff();
    for op in [ops::READ_ISSUE, ops::COMMENT, ops::MOVE, ops::LABEL] {
        let input = json!({"body": "hi", "state": "Done", "label": "Bug"});
        let e = ops::run(&client, op, &input, "LIN-99999")
            .await
            .unwrap_err();
        assert!(e.is(Code::NotFound), "{op}: {e:?}");
        let (agent, linear) = told(&e);
        assert!(
            agent.starts_with("Linear has no issue LIN-99999"),
            "{op}: {agent}"
        );
        assert!(agent.contains("Entity not found"), "{op}: {agent}");
        assert_eq!(linear["message"], "Entity not found: Issue");
    }
    // Only the reads were sent: nothing was changed.
    let seen = seen.lock().unwrap();
    assert!(
        seen.requests.iter().all(|r| r.0 == "OcIssue"),
        "{:?}",
        seen.requests.iter().map(|r| &r.0).collect::<Vec<_>>()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_short_rate_limit_is_waited_out_and_a_long_one_is_the_error_with_when_to_retry() {
    let Some(v) = Validator::start() else {
        return;
    };
    let (url, seen) = stand_in(v);
    let client = Client::new(&url, KEY).unwrap().without_backoff();
    // Linear's request limit, resetting in a second: waited out, asked again once.
    seen.lock().unwrap().once.push_back(graphql_error(
        400,
        &[("X-RateLimit-Requests-Reset", reset_in(1))],
        "Rate limit exceeded",
        "RATELIMITED",
    ));
    let issue = ops::run(&client, ops::READ_ISSUE, &json!({}), "LIN-1778")
        .await
        .unwrap();
    assert_eq!(issue["identifier"], "LIN-1778");
    assert_eq!(seen.lock().unwrap().requests.len(), 2);

    // Still limited after the retry: the error, after two requests.
    let still = graphql_error(
        400,
        &[("X-RateLimit-Complexity-Reset", reset_in(1))],
        "Rate limit exceeded",
        "RATELIMITED",
    );
    seen.lock().unwrap().once.extend([still.clone(), still]);
    let e = ops::run(&client, ops::READ_ISSUE, &json!({}), "LIN-1778")
        .await
        .unwrap_err();
    assert!(e.is(Code::Unavailable), "{e:?}");
    assert!(
        e.message.contains("still rate limited after 1 retry"),
        "{}",
        e.message
    );
    assert_eq!(seen.lock().unwrap().requests.len(), 4);

    // The complexity limit, resetting in an hour: not waited, the error says when.
    let reset = protocol::time::now_ms() + 3_600_000;
    seen.lock().unwrap().answer = Some(graphql_error(
        400,
        &[
            ("X-RateLimit-Requests-Reset", reset_in(5)),
            ("X-RateLimit-Complexity-Reset", reset.to_string()),
        ],
        "Rate limit exceeded",
        "RATELIMITED",
    ));
    let e = ops::run(&client, ops::READ_ISSUE, &json!({}), "LIN-1778")
        .await
        .unwrap_err();
    assert_eq!(seen.lock().unwrap().requests.len(), 5, "not retried");
    assert!(e.is(Code::Unavailable), "{e:?}");
    let (agent, linear) = told(&e);
    let after = api::retry_after_s(&e).unwrap();
    assert!((3590..=3600).contains(&after), "{after}");
    assert_eq!(linear["retry_after_s"], after);
    assert_eq!(linear["code"], "RATELIMITED");
    let at = protocol::time::format_rfc3339_ms(reset);
    assert_eq!(linear["reset_at"], at.as_str());
    assert_eq!(e.data.as_ref().unwrap()["reset_at"], at.as_str());
    assert!(
        agent.contains("rate limited (HTTP 400 RATELIMITED: Rate limit exceeded"),
        "{agent}"
    );
    assert!(agent.contains(&format!("retry after {after} s")), "{agent}");
    assert!(e.message.contains("MAX_RATE_LIMIT_WAIT"), "{}", e.message);
    assert!(!format!("{e:?}").contains(KEY));

    // The background passes' client (holds honoured) does not ask Linear until the
    // reset; the agent's still does.
    let background = Client::new(&url, KEY).unwrap();
    let e = background
        .send(
            "read_issue",
            api::ISSUE_QUERY,
            json!({"id": "LIN-1778", "first": 1}),
        )
        .await
        .unwrap_err();
    assert!(e.message.contains("not asked again for"), "{}", e.message);
    assert!(e.message.contains("rate limited"), "{}", e.message);
    assert_eq!(seen.lock().unwrap().requests.len(), 5, "held back");
    seen.lock().unwrap().answer = None;
    ops::run(&client, ops::READ_ISSUE, &json!({}), "LIN-1778")
        .await
        .unwrap();
    assert_eq!(seen.lock().unwrap().requests.len(), 6);
    // A success releases the hold.
    background
        .send(
            "read_issue",
            api::ISSUE_QUERY,
            json!({"id": "LIN-1778", "first": 1}),
        )
        .await
        .unwrap();
    assert_eq!(seen.lock().unwrap().requests.len(), 7);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_refused_key_the_background_passes_do_not_ask_again() {
    let Some(v) = Validator::start() else {
        return;
    };
    let (url, seen) = stand_in(v);
    seen.lock().unwrap().answer = Some(graphql_error(
        401,
        &[],
        "Authentication required, not authenticated",
        "AUTHENTICATION_ERROR",
    ));
    let background = Client::new(&url, KEY).unwrap();
    for _ in 0..3 {
        let e = background
            .send(
                "comment update",
                api::ISSUE_QUERY,
                json!({"id": "LIN-1778", "first": 1}),
            )
            .await
            .unwrap_err();
        assert!(e.is(Code::Unauthorized), "{e:?}");
        assert!(
            e.message.contains("HTTP 401 AUTHENTICATION_ERROR"),
            "{}",
            e.message
        );
    }
    assert_eq!(
        seen.lock().unwrap().requests.len(),
        1,
        "one refusal, then held back"
    );
    // The doctor's check asks again, and names the 401.
    let doctor = Client::new(&url, KEY).unwrap().without_backoff();
    let e = doctor
        .send("viewer", api::VIEWER_QUERY, json!({}))
        .await
        .unwrap_err();
    let (fail, line) = oc_linear::check::line("lin", Some(Err(e.message)));
    assert!(fail);
    assert!(line.starts_with("connection lin: Linear viewer: the connection's api_key was refused (HTTP 401 AUTHENTICATION_ERROR"), "{line}");
    assert!(!line.contains(KEY));
    assert_eq!(seen.lock().unwrap().requests.len(), 2);
    // A working key: the check names its user and workspace.
    seen.lock().unwrap().answer = Some((
        200,
        vec![],
        json!({"data": {"viewer": {"id": "u1", "name": "Conduit Agent", "email": "agent@example.com"},
                        "organization": {"name": "Acme", "urlKey": "acme"}}})
        .to_string(),
    ));
    let data = doctor
        .send("viewer", api::VIEWER_QUERY, json!({}))
        .await
        .unwrap();
    let (fail, line) = oc_linear::check::line("lin", Some(Ok(data)));
    assert!(!fail);
    assert_eq!(
        line,
        "connection lin: the key is Conduit Agent (agent@example.com) of workspace Acme (acme)"
    );
    let r = oc_linear::check::result(vec![(false, line), (true, "connection b: refused".into())]);
    assert_eq!(r.status, "fail");
    assert!(
        r.detail.starts_with("connection b: refused"),
        "{}",
        r.detail
    );
}
