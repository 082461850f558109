//! The toolbelt operations through the real `oc-github-extension` binary, with
//! this test as the host (`secret.resolve`, `state.work_events`, `kv.get`,
//! `kv.commit`) and a stand-in GitHub that counts what it is sent: the Work's
//! own repository and number, the refusal of another repository, and the replay
//! of a request ID (the same request ID twice makes one comment).

#![allow(clippy::unwrap_used)]

mod common;

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::*;
use protocol::wire::{
    Authority, Event, HostInfo, InitializeParams, KvCommitParams, KvExpect, KvGetParams,
    OperationCallParams, OperationCallResult, Payload, SecretResolveParams, StateEventsResult,
};
use protocol::{connect, CallError, Code, FnHandler, Options, Peer, RpcError};
use serde_json::{json, Value};

const EXE: &str = env!("CARGO_BIN_EXE_oc-github-extension");
const HANG: Duration = Duration::from_secs(60);

/// A stand-in GitHub: every request's method and path, answered 201 with a
/// comment (or 200 with labels).
/// What the stand-in saw: method, path and JSON body of each request.
type Seen = Arc<Mutex<Vec<(String, String, Value)>>>;

fn github() -> (String, Seen) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = seen.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { break };
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            let mut line = String::new();
            reader.read_line(&mut line).unwrap();
            let mut parts = line.split_whitespace();
            let method = parts.next().unwrap_or_default().to_string();
            let path = parts.next().unwrap_or_default().to_string();
            let mut len = 0;
            let mut auth = String::new();
            loop {
                let mut h = String::new();
                reader.read_line(&mut h).unwrap();
                let h = h.trim_end().to_string();
                if h.is_empty() {
                    break;
                }
                let (n, v) = h.split_once(':').unwrap();
                match n.to_ascii_lowercase().as_str() {
                    "content-length" => len = v.trim().parse().unwrap(),
                    "authorization" => auth = v.trim().to_string(),
                    _ => {}
                }
            }
            let mut body = vec![0; len];
            reader.read_exact(&mut body).unwrap();
            let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
            assert_eq!(auth, "Bearer the-token");
            let n = {
                let mut l = log.lock().unwrap();
                l.push((method.clone(), path.clone(), body.clone()));
                l.len()
            };
            let (status, answer) = if path.ends_with("/labels") {
                (200, json!([{"id": 1, "name": "bug"}]))
            } else {
                (
                    201,
                    json!({"id": n, "body": body["body"], "user": {"login": "bot"},
                           "html_url": format!("https://github.com/Codertocat/Hello-World/issues/1#issuecomment-{n}")}),
                )
            };
            let answer = answer.to_string();
            let _ = write!(
                stream,
                "HTTP/1.1 {status} X\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{answer}",
                answer.len()
            );
        }
    });
    (url, seen)
}

/// The host's KV: key → (value, version).
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
                    assert_eq!(p.names, vec!["token".to_string()]);
                    Ok(json!({"values": {"token": "the-token"}}))
                }
                "state.work_events" => {
                    let p: Value = request.params()?;
                    if p["id"] != "w1" || p["after"].as_u64().unwrap_or(0) > 0 {
                        return Ok(serde_json::to_value(StateEventsResult::default()).unwrap());
                    }
                    let event = Event {
                        id: "e1".into(),
                        sequence: 7,
                        event_type: "github.issue.opened".into(),
                        scope_id: "s1".into(),
                        payload: Payload {
                            schema: "github.issue.v1".into(),
                            data: json!({"repository": REPO, "number": 1, "action": "opened"}),
                        },
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
    let peer = connect(stdout, stdin, handler, Options::named("extension github"));
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

fn authority(work: &str) -> Authority {
    Authority {
        scope_id: "s1".into(),
        work_id: work.into(),
        execution_id: "x1".into(),
        epoch: 1,
        binding: "agent".into(),
        connection: "gh".into(),
    }
}

async fn call(
    peer: &Peer,
    operation: &str,
    request_id: &str,
    work: &str,
    input: Value,
) -> Result<Value, CallError> {
    tokio::time::timeout(
        HANG,
        peer.call_typed(&OperationCallParams {
            operation: operation.into(),
            request_id: request_id.into(),
            authority: authority(work),
            input,
        }),
    )
    .await
    .unwrap()
    .map(|r: OperationCallResult| r.output)
}

#[tokio::test]
async fn a_comment_goes_to_the_works_issue_once_per_request_id() {
    let (url, seen) = github();
    let kv: Kv = Arc::default();
    let (peer, _child) = start(kv.clone()).await;
    let mut params = configure_params(vec![entry(json!({"repository": REPO}))]);
    params.connections[0].config = json!({"api_url": url});
    tokio::time::timeout(HANG, peer.call_typed(&params))
        .await
        .unwrap()
        .unwrap();

    let first = call(
        &peer,
        "github.comment",
        "req-1",
        "w1",
        json!({"body": "On it."}),
    )
    .await
    .unwrap();
    assert_eq!(first["repository"], REPO);
    assert_eq!(first["number"], 1);
    assert_eq!(first["comment"]["id"], 1);
    // The same request ID again: the kept result, and GitHub is not called.
    let again = call(
        &peer,
        "github.comment",
        "req-1",
        "w1",
        json!({"body": "On it."}),
    )
    .await
    .unwrap();
    assert_eq!(again, first);
    {
        let seen = seen.lock().unwrap();
        assert_eq!(seen.len(), 1, "one POST: {seen:?}");
        assert_eq!(seen[0].0, "POST");
        assert_eq!(seen[0].1, "/repos/Codertocat/Hello-World/issues/1/comments");
        assert_eq!(seen[0].2, json!({"body": "On it."}));
    }
    assert_eq!(kv.lock().unwrap().len(), 1);

    // Another request ID makes another comment.
    let second = call(
        &peer,
        "github.comment",
        "req-2",
        "w1",
        json!({"body": "Done."}),
    )
    .await
    .unwrap();
    assert_eq!(second["comment"]["id"], 2);

    // The same request ID for another operation is a conflict.
    let e = call(
        &peer,
        "github.add_labels",
        "req-1",
        "w1",
        json!({"labels": ["bug"]}),
    )
    .await
    .unwrap_err();
    assert!(e.is(Code::Conflict), "{e}");

    let labels = call(
        &peer,
        "github.add_labels",
        "req-3",
        "w1",
        json!({"labels": ["bug"]}),
    )
    .await
    .unwrap();
    assert_eq!(labels["labels"], json!(["bug"]));

    // Another repository than the Work's is refused, and GitHub is not called.
    let before = seen.lock().unwrap().len();
    let e = call(
        &peer,
        "github.comment",
        "req-4",
        "w1",
        json!({"body": "x", "repository": "someone/else"}),
    )
    .await
    .unwrap_err();
    assert!(e.is(Code::Unauthorized), "{e}");
    // The package's own refusal carries its message for the agent.
    let CallError::Rpc(rpc) = &e else {
        panic!("{e}")
    };
    let told = rpc.data.as_ref().unwrap()["agent_message"].clone();
    assert!(
        told.as_str().unwrap().contains("not someone/else"),
        "{told}"
    );
    // A Work with no GitHub Events may name its scope's entry repository, and
    // must give a number.
    let e = call(
        &peer,
        "github.comment",
        "req-5",
        "w2",
        json!({"body": "x", "repository": REPO}),
    )
    .await
    .unwrap_err();
    assert!(e.is(Code::Invalid), "{e}");
    let e = call(
        &peer,
        "github.comment",
        "req-6",
        "w2",
        json!({"body": "x", "repository": "someone/else", "number": 3}),
    )
    .await
    .unwrap_err();
    assert!(e.is(Code::Unauthorized), "{e}");
    let e = call(&peer, "github.comment", "req-7", "w1", json!({}))
        .await
        .unwrap_err();
    assert!(e.is(Code::Invalid), "{e}");
    assert_eq!(seen.lock().unwrap().len(), before);
    let ok = call(
        &peer,
        "github.comment",
        "req-8",
        "w2",
        json!({"body": "x", "repository": REPO, "number": 3}),
    )
    .await
    .unwrap();
    assert_eq!(ok["number"], 3);
    // Another Work's same request ID is its own call, not the first Work's answer.
    let before = seen.lock().unwrap().len();
    let other = call(
        &peer,
        "github.comment",
        "req-1",
        "w2",
        json!({"body": "On it.", "repository": REPO, "number": 3}),
    )
    .await
    .unwrap();
    assert_eq!(other["number"], 3, "{other}");
    assert_eq!(seen.lock().unwrap().len(), before + 1);
}
