//! The operations through the real `oc-linear-extension` binary, with this test as
//! the host (`secret.resolve`, `state.work_events`, `kv.get`, `kv.commit`) and the
//! schema-validating stand-in of Linear's API: the Work's own issue, the replay of a
//! request ID (the same request ID twice comments once; used for another operation,
//! a conflict), and a Work with no Linear issue refused. The key is in no error.

#![allow(clippy::unwrap_used)]

mod standin;

use std::collections::HashMap;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use protocol::wire::{
    Authority, ConfigureParams, Connection, Entry, Event, HostInfo, InitializeParams,
    KvCommitParams, KvExpect, KvGetParams, OperationCallParams, OperationCallResult, Payload,
    SecretResolveParams, StateEventsResult,
};
use protocol::{connect, CallError, Code, FnHandler, Options, Peer, RpcError};
use serde_json::{json, Value};

const EXE: &str = env!("CARGO_BIN_EXE_oc-linear-extension");
const HANG: Duration = Duration::from_secs(60);
const KEY: &str = "lin_api_OPS_TEST_KEY_42";

type Kv = Arc<Mutex<HashMap<String, (Value, String)>>>;

async fn start(kv: Kv) -> (Peer, tokio::process::Child) {
    let mut child = tokio::process::Command::new(EXE)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let stdin = child.stdin.take().unwrap();
    let stdout = child.stdout.take().unwrap();
    let handler = FnHandler(move |request: protocol::Request| {
        let kv = kv.clone();
        async move {
            match request.method.as_str() {
                "secret.resolve" => {
                    let p: SecretResolveParams = request.params()?;
                    assert_eq!(p.names, vec!["api_key".to_string()]);
                    Ok(json!({"values": {"api_key": KEY}}))
                }
                "state.work_events" => {
                    let p: Value = request.params()?;
                    if p["id"] != "w1" || p["after"].as_u64().unwrap_or(0) > 0 {
                        return Ok(serde_json::to_value(StateEventsResult::default()).unwrap());
                    }
                    let event = Event {
                        id: "e1".into(),
                        sequence: 3,
                        event_type: "linear.issue.assigned".into(),
                        scope_id: "s1".into(),
                        payload: Payload {
                            schema: "linear.issue.v1".into(),
                            data: json!({"kind": "assigned",
                                         "issue": {"identifier": "LIN-1778", "title": "Foo bar"}}),
                        },
                        keys: vec!["linear:LIN-1778".into()],
                        ..Default::default()
                    };
                    Ok(serde_json::to_value(StateEventsResult {
                        events: vec![event],
                    })
                    .unwrap())
                }
                "kv.get" => {
                    let p: KvGetParams = request.params()?;
                    Ok(match kv.lock().unwrap().get(&p.key) {
                        Some((v, ver)) => json!({"value": v, "version": ver}),
                        None => json!({}),
                    })
                }
                "kv.commit" => {
                    let p: KvCommitParams = request.params()?;
                    let mut kv = kv.lock().unwrap();
                    for c in &p.checks {
                        let holds = match &c.expect {
                            KvExpect::Absent => !kv.contains_key(&c.key),
                            KvExpect::Version(v) => kv.get(&c.key).is_some_and(|(_, x)| x == v),
                        };
                        if !holds {
                            return Err(RpcError::new(Code::Conflict, "check failed"));
                        }
                    }
                    for put in p.puts {
                        let n = kv.len();
                        kv.insert(put.key, (put.value, format!("v{n}")));
                    }
                    Ok(json!({}))
                }
                other => Err(RpcError::method_not_found(other)),
            }
        }
    });
    let peer = connect(stdout, stdin, handler, Options::named("extension linear"));
    tokio::time::timeout(
        HANG,
        peer.call_typed(&InitializeParams {
            protocol_versions: vec![1],
            host: HostInfo {
                name: "open-conduit".into(),
                version: "test".into(),
            },
            state_dir: std::env::temp_dir().display().to_string(),
            ..Default::default()
        }),
    )
    .await
    .unwrap()
    .unwrap();
    (peer, child)
}

async fn configure(peer: &Peer, api_url: &str) {
    let params = ConfigureParams {
        entries: vec![Entry {
            scope_id: "s1".into(),
            entry_type: "linear".into(),
            name: "eng".into(),
            connection: "lin".into(),
            config: json!({"teams": ["LIN"], "agent_user": "agent@example.com"}),
            ..Default::default()
        }],
        connections: vec![Connection {
            name: "lin".into(),
            connection_type: "linear".into(),
            config: json!({"api_url": api_url}),
            secrets: vec!["api_key".into(), "webhook_secret".into()],
        }],
        ..Default::default()
    };
    tokio::time::timeout(HANG, peer.call_typed(&params))
        .await
        .unwrap()
        .unwrap();
}

async fn call(
    peer: &Peer,
    op: &str,
    request_id: &str,
    work: &str,
    input: Value,
) -> Result<Value, CallError> {
    tokio::time::timeout(
        HANG,
        peer.call_typed(&OperationCallParams {
            operation: op.into(),
            request_id: request_id.into(),
            authority: Authority {
                scope_id: "s1".into(),
                work_id: work.into(),
                execution_id: "x1".into(),
                epoch: 1,
                binding: "agent".into(),
                connection: "lin".into(),
            },
            input,
        }),
    )
    .await
    .unwrap()
    .map(|r: OperationCallResult| r.output)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_comment_is_made_once_per_request_id_on_the_works_issue() {
    let Some(v) = standin::Validator::start() else {
        return;
    };
    let (url, seen) = standin::stand_in(v);
    let kv: Kv = Arc::default();
    let (peer, _child) = start(kv.clone()).await;
    configure(&peer, &url).await;
    let first = call(
        &peer,
        "linear.comment",
        "r1",
        "w1",
        json!({"body": "On it."}),
    )
    .await
    .unwrap();
    assert_eq!(first["issue"], "LIN-1778");
    assert_eq!(first["id"], "c2");
    let again = call(
        &peer,
        "linear.comment",
        "r1",
        "w1",
        json!({"body": "On it."}),
    )
    .await
    .unwrap();
    assert_eq!(again, first);
    let comments =
        |seen: &standin::Seen| seen.requests.iter().filter(|r| r.0 == "OcComment").count();
    assert_eq!(
        comments(&seen.lock().unwrap()),
        1,
        "the retry commented again"
    );
    // The same request ID for another operation is a conflict.
    let e = call(&peer, "linear.move", "r1", "w1", json!({"state": "Done"}))
        .await
        .unwrap_err();
    assert!(e.is(Code::Conflict), "{e:?}");
    // A new request ID moves the issue.
    let moved = call(&peer, "linear.move", "r2", "w1", json!({"state": "Done"}))
        .await
        .unwrap();
    assert_eq!(moved["state"], "Done");
    let read = call(&peer, "linear.read_issue", "", "w1", json!({}))
        .await
        .unwrap();
    assert_eq!(read["identifier"], "LIN-1778");
    for r in &seen.lock().unwrap().requests {
        assert!(r.3.is_empty(), "{}: {:?}", r.0, r.3);
        assert_eq!(r.2, KEY);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_key_and_a_work_without_an_issue_are_clear_errors() {
    let Some(v) = standin::Validator::start() else {
        return;
    };
    let (url, seen) = standin::stand_in(v);
    let (peer, _child) = start(Arc::default()).await;
    configure(&peer, &url).await;
    let e = call(&peer, "linear.read_issue", "", "w2", json!({}))
        .await
        .unwrap_err();
    assert!(format!("{e}").contains("has no Linear issue"), "{e}");
    seen.lock().unwrap().answer = Some((
        401,
        vec![],
        json!({"errors": [{"message": "Authentication required", "extensions": {"code": "AUTHENTICATION_ERROR"}}]})
            .to_string(),
    ));
    let e = call(&peer, "linear.comment", "r9", "w1", json!({"body": "x"}))
        .await
        .unwrap_err();
    assert!(e.is(Code::Unauthorized), "{e:?}");
    let shown = format!("{e:?}");
    assert!(shown.contains("api_key was refused"), "{shown}");
    assert!(!shown.contains(KEY), "the key leaked: {shown}");
}

const PR_URL: &str = "https://github.com/acme/widgets/pull/2";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pull_request_is_linked_once_per_request_id_and_fields_are_updated() {
    let Some(v) = standin::Validator::start() else {
        return;
    };
    let (url, seen) = standin::stand_in(v);
    let (peer, _child) = start(Arc::default()).await;
    configure(&peer, &url).await;
    let input = json!({"url": PR_URL, "title": "Fix the foo (#2)"});
    let first = call(&peer, "linear.link", "l1", "w1", input.clone())
        .await
        .unwrap();
    assert_eq!(first["issue"], "LIN-1778");
    assert_eq!(first["attachment_id"], "a1");
    assert_eq!(first["url"], PR_URL);
    let again = call(&peer, "linear.link", "l1", "w1", input).await.unwrap();
    assert_eq!(again, first);
    let updated = call(
        &peer,
        "linear.update",
        "u1",
        "w1",
        json!({"priority": "high", "estimate": 3, "due_date": "2026-12-31", "title": "Foo bar"}),
    )
    .await
    .unwrap();
    assert_eq!(updated["priority"], 2);
    assert_eq!(updated["due_date"], "2026-12-31");
    let cleared = call(
        &peer,
        "linear.update",
        "u2",
        "w1",
        json!({"due_date": null}),
    )
    .await
    .unwrap();
    assert_eq!(cleared["issue"], "LIN-1778");
    let seen = seen.lock().unwrap();
    let links: Vec<&Value> = seen
        .requests
        .iter()
        .filter(|r| r.0 == "OcLinkUrl")
        .map(|r| &r.1)
        .collect();
    assert_eq!(links.len(), 1, "the retry linked again");
    assert_eq!(links[0]["issueId"], "LIN-1778");
    assert_eq!(links[0]["url"], PR_URL);
    assert_eq!(links[0]["title"], "Fix the foo (#2)");
    let updates: Vec<&Value> = seen
        .requests
        .iter()
        .filter(|r| r.0 == "OcUpdate")
        .map(|r| &r.1)
        .collect();
    assert_eq!(
        updates[0]["input"],
        json!({"priority": 2, "estimate": 3, "dueDate": "2026-12-31", "title": "Foo bar"})
    );
    assert_eq!(updates[1]["input"], json!({"dueDate": null}));
    for r in &seen.requests {
        assert!(r.3.is_empty(), "{} refused by the schema: {:?}", r.0, r.3);
        assert_eq!(r.2, KEY);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn link_and_update_inputs_are_checked_with_clear_errors_before_linear_is_called() {
    let Some(v) = standin::Validator::start() else {
        return;
    };
    let (url, seen) = standin::stand_in(v);
    let (peer, _child) = start(Arc::default()).await;
    configure(&peer, &url).await;
    let cases = [
        ("linear.link", json!({}), "url (the http(s) URL"),
        (
            "linear.link",
            json!({"url": "ftp://x/y"}),
            "is not an http or https URL",
        ),
        (
            "linear.link",
            json!({"url": "https://"}),
            "is not an http or https URL",
        ),
        (
            "linear.link",
            json!({"url": PR_URL, "title": "a\nb"}),
            "title must be one line",
        ),
        ("linear.update", json!({}), "give at least one of"),
        (
            "linear.update",
            json!({"assignee": "me"}),
            "`assignee` is not a field linear.update sets",
        ),
        (
            "linear.update",
            json!({"priority": 9}),
            "priority must be 0 to 4",
        ),
        (
            "linear.update",
            json!({"priority": "meh"}),
            "priority must be 0 to 4",
        ),
        (
            "linear.update",
            json!({"estimate": -1}),
            "estimate must be a whole number",
        ),
        (
            "linear.update",
            json!({"due_date": "2026-02-30"}),
            "due_date must be a date",
        ),
        (
            "linear.update",
            json!({"title": "  "}),
            "title must be one line",
        ),
    ];
    for (i, (op, input, want)) in cases.into_iter().enumerate() {
        let e = call(&peer, op, &format!("bad{i}"), "w1", input.clone())
            .await
            .unwrap_err();
        assert!(e.is(Code::Invalid), "{op} {input}: {e:?}");
        assert!(format!("{e}").contains(want), "{op} {input}: {e}");
    }
    let seen = seen.lock().unwrap();
    assert!(
        !seen
            .requests
            .iter()
            .any(|r| r.0 == "OcLinkUrl" || r.0 == "OcUpdate"),
        "a refused input reached Linear"
    );
}

#[test]
fn the_link_and_update_documents_are_valid_against_linears_schema() {
    let Some(mut v) = standin::Validator::start() else {
        return;
    };
    for doc in [
        oc_linear::ops::link::LINK_URL_MUTATION,
        oc_linear::ops::update::UPDATE_MUTATION,
    ] {
        let errors = v.errors(doc);
        assert!(errors.is_empty(), "{doc}: {errors:?}");
    }
    // And the validator does refuse a field Linear has not.
    assert!(!v
        .errors(
            "mutation X($id: String!) { attachmentLinkURL(issueId: $id, href: $id) { success } }"
        )
        .is_empty());
}
