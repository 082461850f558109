//! The operations through the real `oc-slack-extension` binary, with this test as
//! the host (`secret.resolve`, `state.work_events`, `kv.get`, `kv.commit`) and a
//! stand-in Slack that counts what it is sent: the Work's own thread, the replay of
//! a request ID (the same request ID twice posts once), `slack.update` only of the
//! package's own messages, and a Work with no Slack thread refused.

#![allow(clippy::unwrap_used)]

mod webapi;

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
use webapi::StandIn;

const EXE: &str = env!("CARGO_BIN_EXE_oc-slack-extension");
const HANG: Duration = Duration::from_secs(60);
const TOKEN: &str = "xoxb-ops-test-token";

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
                    assert_eq!(p.names, vec!["bot_token".to_string()]);
                    Ok(json!({"values": {"bot_token": TOKEN}}))
                }
                "state.work_events" => {
                    let p: Value = request.params()?;
                    if p["id"] != "w1" || p["after"].as_u64().unwrap_or(0) > 0 {
                        return Ok(serde_json::to_value(StateEventsResult::default()).unwrap());
                    }
                    let event = Event {
                        id: "e1".into(),
                        sequence: 3,
                        event_type: "slack.message.app_mention".into(),
                        scope_id: "s1".into(),
                        payload: Payload {
                            schema: "slack.message.v1".into(),
                            data: json!({"team_id": "T111", "channel": "C0123456789",
                                         "thread_ts": "1610241741.000200", "ts": "1610241741.000200",
                                         "user": "U222", "kind": "app_mention"}),
                        },
                        keys: vec!["slack:T111/C0123456789/1610241741.000200".into()],
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
    let peer = connect(stdout, stdin, handler, Options::named("extension slack"));
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
            entry_type: "slack".into(),
            name: "team".into(),
            connection: "sl".into(),
            config: Value::Null,
            ..Default::default()
        }],
        connections: vec![Connection {
            name: "sl".into(),
            connection_type: "slack".into(),
            config: json!({"api_url": api_url}),
            secrets: vec!["bot_token".into(), "signing_secret".into()],
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
                connection: "sl".into(),
            },
            input,
        }),
    )
    .await
    .unwrap()
    .map(|r: OperationCallResult| r.output)
}

fn slack() -> StandIn {
    StandIn::start(|n, req| {
        let ts = format!("1610242000.{n:06}");
        let body = match req.path() {
            "/chat.postMessage" | "/chat.update" => {
                json!({"ok": true, "channel": req.field("channel"), "ts": req.field("ts").unwrap_or(ts)})
            }
            _ => json!({"ok": true}),
        };
        (200, vec![], body.to_string())
    })
}

#[tokio::test]
async fn a_post_is_made_once_per_request_id_in_the_works_thread() {
    let stand_in = slack();
    let kv: Kv = Arc::default();
    let (peer, _child) = start(kv.clone()).await;
    configure(&peer, &stand_in.url).await;
    let first = call(
        &peer,
        "slack.post",
        "req-1",
        "w1",
        json!({"text": "On it."}),
    )
    .await
    .unwrap();
    let again = call(
        &peer,
        "slack.post",
        "req-1",
        "w1",
        json!({"text": "On it."}),
    )
    .await
    .unwrap();
    assert_eq!(first, again);
    assert_eq!(first["thread_ts"], "1610241741.000200");
    let posts = stand_in.requests();
    assert_eq!(posts.len(), 1, "one chat.postMessage for one request_id");
    assert_eq!(posts[0].path(), "/chat.postMessage");
    assert_eq!(posts[0].field("channel").as_deref(), Some("C0123456789"));
    assert_eq!(
        posts[0].field("thread_ts").as_deref(),
        Some("1610241741.000200")
    );
    assert_eq!(
        posts[0].header("authorization"),
        Some(format!("Bearer {TOKEN}").as_str())
    );
    // Another request ID is another message.
    call(
        &peer,
        "slack.post",
        "req-2",
        "w1",
        json!({"text": "Still on it."}),
    )
    .await
    .unwrap();
    assert_eq!(stand_in.requests().len(), 2);
    // The same request ID for another operation is a conflict.
    let e = call(&peer, "slack.react", "req-1", "w1", json!({"name": "eyes"}))
        .await
        .unwrap_err();
    assert!(
        matches!(&e, CallError::Rpc(r) if r.is(Code::Conflict)),
        "{e:?}"
    );
    // No secret in the package's KV.
    assert!(!format!("{:?}", kv.lock().unwrap()).contains(TOKEN));
}

#[tokio::test]
async fn update_edits_only_messages_the_package_posted_for_the_work() {
    let stand_in = slack();
    let (peer, _child) = start(Kv::default()).await;
    configure(&peer, &stand_in.url).await;
    let posted = call(
        &peer,
        "slack.post",
        "p",
        "w1",
        json!({"text": "Working: 0/3"}),
    )
    .await
    .unwrap();
    let ts = posted["ts"].as_str().unwrap().to_string();
    let edited = call(
        &peer,
        "slack.update",
        "u1",
        "w1",
        json!({"ts": ts, "text": "Working: 1/3"}),
    )
    .await
    .unwrap();
    assert_eq!(edited["ts"], ts.as_str());
    let e = call(
        &peer,
        "slack.update",
        "u2",
        "w1",
        json!({"ts": "1610241741.000200", "text": "rewriting someone's message"}),
    )
    .await
    .unwrap_err();
    let CallError::Rpc(e) = e else {
        panic!("{e:?}")
    };
    assert!(e.is(Code::Unauthorized), "{e:?}");
    assert!(e.data.as_ref().unwrap()["agent_message"]
        .as_str()
        .unwrap()
        .contains("slack.update edits only those"));
    let paths: Vec<String> = stand_in
        .requests()
        .iter()
        .map(|r| r.path().to_string())
        .collect();
    assert_eq!(paths, vec!["/chat.postMessage", "/chat.update"]);
}

#[tokio::test]
async fn a_work_without_a_slack_thread_is_refused() {
    let stand_in = slack();
    let (peer, _child) = start(Kv::default()).await;
    configure(&peer, &stand_in.url).await;
    let e = call(
        &peer,
        "slack.post",
        "r",
        "w-other",
        json!({"text": "hello"}),
    )
    .await
    .unwrap_err();
    let CallError::Rpc(e) = e else {
        panic!("{e:?}")
    };
    assert!(e.is(Code::Invalid), "{e:?}");
    assert!(e.message.contains("no Slack thread"), "{}", e.message);
    assert!(stand_in.requests().is_empty());
}
