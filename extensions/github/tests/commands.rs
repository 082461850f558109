//! Commands on GitHub (`/oc stop`, `/oc retry`) through the real `oc-github-extension`
//! binary: this test is the host (`secret.resolve`, `kv.*`, `state.works`,
//! `action.submit`, which it counts) and a stand-in GitHub that answers the
//! commenter's permission and takes the replies. Every request the stand-in gets is
//! also sent to Prism (GitHub's OpenAPI description, `--errors`), which must find it
//! valid: the permission read, the bot's own login and the replies. Without Prism
//! (no node, or no `npm ci --prefix tests/github-api`) that check prints SKIPPED and
//! the rest runs, unless OC_REQUIRE_PEERS=1.

#![allow(clippy::unwrap_used)]

mod common;

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::*;
use protocol::wire::{
    ActionSubmitParams, ActionSubmitResult, HostInfo, InitializeParams, KvCommitParams, KvExpect,
    KvGetParams, SecretResolveParams, StateWorksParams, StateWorksResult, Work,
};
use protocol::{connect, Code, FnHandler, Options, Peer, RpcError};
use serde_json::{json, Value};

const EXE: &str = env!("CARGO_BIN_EXE_oc-github-extension");
const HANG: Duration = Duration::from_secs(60);

/// Prism's status for one request: the same method, path, headers and body (a
/// request the description refuses is 4xx).
fn prism_status(
    prism: &str,
    method: &str,
    path: &str,
    headers: &[(String, String)],
    body: &[u8],
) -> u16 {
    let mut s = TcpStream::connect(prism).unwrap();
    let mut head = format!("{method} {path} HTTP/1.1\r\nHost: {prism}\r\nConnection: close\r\n");
    for (n, v) in headers {
        if !matches!(n.as_str(), "host" | "connection" | "content-length") {
            head.push_str(&format!("{n}: {v}\r\n"));
        }
    }
    // Prism makes its answer up from the schema: some of the description's own
    // examples do not fit it (the permission's), which `--errors` would answer 500
    // for, whatever the request.
    head.push_str("Prefer: dynamic=true\r\n");
    head.push_str(&format!("Content-Length: {}\r\n\r\n", body.len()));
    s.write_all(head.as_bytes()).unwrap();
    s.write_all(body).unwrap();
    let mut answer = String::new();
    let _ = s.read_to_string(&mut answer);
    answer
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0)
}

// ---------------------------------------------------------------------------
// The stand-in GitHub

/// One request: method, path, JSON body, and Prism's status for it (None without
/// Prism).
type Seen = Arc<Mutex<Vec<(String, String, Value, Option<u16>)>>>;

/// The permissions of the commenters the tests use.
fn permission_of(login: &str) -> Value {
    match login {
        "writer" => json!({"permission": "write", "role_name": "write",
                           "user": {"login": "writer", "id": 2}}),
        "maintainer" => json!({"permission": "write", "role_name": "maintain",
                               "user": {"login": "maintainer", "id": 3}}),
        _ => json!({"permission": "read", "role_name": "read",
                    "user": {"login": login, "id": 4}}),
    }
}

fn github(prism: Option<String>) -> (String, Seen) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let seen: Seen = Arc::default();
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
            let mut headers = Vec::new();
            let mut len = 0;
            loop {
                let mut h = String::new();
                reader.read_line(&mut h).unwrap();
                let h = h.trim_end().to_string();
                if h.is_empty() {
                    break;
                }
                let (n, v) = h.split_once(':').unwrap();
                let (n, v) = (n.trim().to_ascii_lowercase(), v.trim().to_string());
                if n == "content-length" {
                    len = v.parse().unwrap();
                }
                headers.push((n, v));
            }
            let mut body = vec![0; len];
            reader.read_exact(&mut body).unwrap();
            let auth = headers.iter().find(|(n, _)| n == "authorization");
            assert_eq!(auth.map(|(_, v)| v.as_str()), Some("Bearer the-token"));
            let checked = prism
                .as_deref()
                .map(|p| prism_status(p, &method, &path, &headers, &body));
            let json_body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
            let n = {
                let mut l = log.lock().unwrap();
                l.push((method.clone(), path.clone(), json_body.clone(), checked));
                l.len()
            };
            let repo = format!("/repos/{REPO}");
            let (status, answer) = match (method.as_str(), path.as_str()) {
                ("GET", "/user") => (200, json!({"login": "oc-bot", "id": 1})),
                ("GET", p) if p.starts_with(&format!("{repo}/collaborators/")) => {
                    let login = p
                        .trim_start_matches(&format!("{repo}/collaborators/"))
                        .trim_end_matches("/permission");
                    (200, permission_of(login))
                }
                ("POST", p) if p.ends_with("/comments") => (
                    201,
                    json!({"id": 9000 + n, "body": json_body["body"], "user": {"login": "oc-bot"}}),
                ),
                _ => (404, json!({"message": "Not Found"})),
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

// ---------------------------------------------------------------------------
// The host

/// What the host was asked: every `action.submit`, and the `kv.commit` claims
/// refused (by key).
#[derive(Default)]
struct Asked {
    submits: Vec<ActionSubmitParams>,
    refused_claims: Vec<String>,
    kv: HashMap<String, Value>,
}

type Shared = Arc<Mutex<Asked>>;

/// The Work of issue #1 (keyed as the package's routes key it); issue #2 has none.
fn work_of(key: &str) -> Vec<Work> {
    if key != "github:codertocat/hello-world#1" {
        return Vec::new();
    }
    vec![Work {
        id: "w1".into(),
        scope_id: "s1".into(),
        state: "running".into(),
        keys: vec![key.to_string()],
        ..Default::default()
    }]
}

async fn start(asked: Shared) -> (Peer, tokio::process::Child) {
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
        let asked = asked.clone();
        async move {
            match request.method.as_str() {
                "secret.resolve" => {
                    let p: SecretResolveParams = request.params()?;
                    let mut values = serde_json::Map::new();
                    for n in &p.names {
                        let v = match n.as_str() {
                            "token" => "the-token".to_string(),
                            "webhook_secret" => String::from_utf8(SECRET.to_vec()).unwrap(),
                            other => panic!("secret {other}"),
                        };
                        values.insert(n.clone(), json!(v));
                    }
                    Ok(json!({ "values": values }))
                }
                "state.works" => {
                    let p: StateWorksParams = request.params()?;
                    assert_eq!(p.scope_id, "s1");
                    Ok(serde_json::to_value(StateWorksResult {
                        works: work_of(&p.key),
                        next: String::new(),
                    })
                    .unwrap())
                }
                "action.submit" => {
                    let p: ActionSubmitParams = request.params()?;
                    let mut asked = asked.lock().unwrap();
                    let added = !asked.submits.iter().any(|s| s.key == p.key);
                    let message = match p.action.as_str() {
                        "stop" => format!("stopped Work {}", p.work_id),
                        _ => format!("Work {} will run again", p.work_id),
                    };
                    asked.submits.push(p);
                    Ok(serde_json::to_value(ActionSubmitResult {
                        event: "evt_1".into(),
                        added,
                        message,
                    })
                    .unwrap())
                }
                "kv.get" => {
                    let p: KvGetParams = request.params()?;
                    Ok(match asked.lock().unwrap().kv.get(&p.key) {
                        Some(v) => json!({"value": v, "version": "v1"}),
                        None => json!({}),
                    })
                }
                "kv.commit" => {
                    let p: KvCommitParams = request.params()?;
                    let mut asked = asked.lock().unwrap();
                    for c in &p.checks {
                        if matches!(c.expect, KvExpect::Absent) && asked.kv.contains_key(&c.key) {
                            asked.refused_claims.push(c.key.clone());
                            return Err(RpcError::new(Code::Conflict, "check failed"));
                        }
                    }
                    for put in p.puts {
                        asked.kv.insert(put.key, put.value);
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

/// A signed `issue_comment` `created` delivery of the fixture, with this comment.
async fn comment(peer: &Peer, delivery: &str, id: u64, login: &str, number: u64, body: &str) {
    let mut payload = json_of(ISSUE_COMMENT_CREATED);
    payload["comment"]["id"] = json!(id);
    payload["comment"]["body"] = json!(body);
    payload["comment"]["user"]["login"] = json!(login);
    payload["issue"]["number"] = json!(number);
    let bytes = serde_json::to_vec(&payload).unwrap();
    let answer = tokio::time::timeout(
        HANG,
        peer.call_typed(&request("issue_comment", delivery, &bytes, SECRET)),
    )
    .await
    .unwrap()
    .unwrap();
    assert_eq!(answer.response.status, 200);
    assert_eq!(
        answer.deliveries.len(),
        1,
        "the comment is delivered as ever"
    );
}

/// The replies posted so far mentioning `@login`.
fn replies_to(seen: &Seen, login: &str) -> Vec<String> {
    seen.lock()
        .unwrap()
        .iter()
        .filter(|(m, p, _, _)| m == "POST" && p.ends_with("/comments"))
        .filter_map(|(_, _, b, _)| b["body"].as_str().map(str::to_string))
        .filter(|b| b.starts_with(&format!("@{login}:")))
        .collect()
}

/// Waits (within HANG) until `done` holds.
async fn until(what: &str, done: impl Fn() -> bool) {
    let give_up = tokio::time::Instant::now() + HANG;
    while !done() {
        assert!(tokio::time::Instant::now() < give_up, "waited for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn comments_steer_the_work_only_for_people_with_write_permission() {
    let prism = match common::prism::prism() {
        Ok(p) => Some(p),
        Err(why) => {
            assert!(
                std::env::var("OC_REQUIRE_PEERS").as_deref() != Ok("1"),
                "no Prism under OC_REQUIRE_PEERS=1: {why}"
            );
            eprintln!("SKIPPED the Prism check of every request: {why}");
            None
        }
    };
    let (url, seen) = github(prism.map(|p| p.addr().to_owned()));
    let asked = Shared::default();
    let (peer, _child) = start(asked.clone()).await;
    let mut params = configure_params(vec![entry(json!({"repository": REPO}))]);
    params.connections[0].config = json!({"api_url": url});
    params.connections[0].secrets = vec!["webhook_secret".into(), "token".into()];
    tokio::time::timeout(HANG, peer.call_typed(&params))
        .await
        .unwrap()
        .unwrap();

    // Someone with write permission stops the Work of issue #1: one submit, one reply.
    comment(
        &peer,
        "d-1",
        1001,
        "writer",
        1,
        "/oc stop\nit is going nowhere",
    )
    .await;
    until("the reply to writer", || {
        !replies_to(&seen, "writer").is_empty()
    })
    .await;
    assert_eq!(replies_to(&seen, "writer"), ["@writer: stopped Work w1"]);
    {
        let asked = asked.lock().unwrap();
        assert_eq!(asked.submits.len(), 1);
        let s = &asked.submits[0];
        assert_eq!(
            (
                s.scope_id.as_str(),
                s.work_id.as_str(),
                s.provider.as_str(),
                s.action.as_str(),
                s.caller.as_str(),
                s.key.as_str()
            ),
            ("s1", "w1", "core", "stop", "writer", "comment/1001")
        );
        assert_eq!(s.input["comment_id"], 1001);
    }
    // The reply went to the issue the comment is on.
    assert!(seen
        .lock()
        .unwrap()
        .iter()
        .any(|(m, p, _, _)| m == "POST" && p == &format!("/repos/{REPO}/issues/1/comments")));

    // GitHub redelivers it: the claim is refused and nothing more happens.
    comment(
        &peer,
        "d-1",
        1001,
        "writer",
        1,
        "/oc stop\nit is going nowhere",
    )
    .await;
    until("the redelivery's claim", || {
        asked
            .lock()
            .unwrap()
            .refused_claims
            .contains(&"command/1001".to_string())
    })
    .await;
    assert_eq!(asked.lock().unwrap().submits.len(), 1);
    assert_eq!(replies_to(&seen, "writer").len(), 1);

    // Someone with read permission: refused with a reply, nothing submitted.
    comment(&peer, "d-2", 1002, "reader", 1, "/oc stop").await;
    until("the reply to reader", || {
        !replies_to(&seen, "reader").is_empty()
    })
    .await;
    assert_eq!(
        replies_to(&seen, "reader"),
        ["@reader: `/oc stop` needs write permission on Codertocat/Hello-World (you have read)"]
    );
    assert_eq!(asked.lock().unwrap().submits.len(), 1);

    // A maintainer retries it.
    comment(&peer, "d-3", 1003, "maintainer", 1, "/oc retry").await;
    until("the reply to maintainer", || {
        !replies_to(&seen, "maintainer").is_empty()
    })
    .await;
    assert_eq!(
        replies_to(&seen, "maintainer"),
        ["@maintainer: Work w1 will run again"]
    );
    assert_eq!(asked.lock().unwrap().submits[1].action, "retry");

    // An unknown command is answered with the commands; issue #2 has no Work.
    comment(&peer, "d-4", 1004, "someone", 1, "/oc xyz").await;
    until("the help", || !replies_to(&seen, "someone").is_empty()).await;
    let help = replies_to(&seen, "someone").remove(0);
    assert!(
        help.starts_with("@someone: `/oc xyz` is not a command."),
        "{help}"
    );
    assert!(
        help.contains("`/oc stop`") && help.contains("`/oc retry`"),
        "{help}"
    );
    comment(&peer, "d-5", 1005, "writer", 2, "/oc retry").await;
    until("the no-Work reply", || {
        replies_to(&seen, "writer").len() == 2
    })
    .await;
    assert_eq!(
        replies_to(&seen, "writer")[1],
        "@writer: there is no Work for Codertocat/Hello-World#2: `/oc retry` has nothing to act on"
    );
    assert_eq!(asked.lock().unwrap().submits.len(), 2);

    // Every request fits GitHub's description, the permission read among them.
    let seen = seen.lock().unwrap();
    let permission = format!("/repos/{REPO}/collaborators/writer/permission");
    assert!(seen
        .iter()
        .any(|(m, p, _, _)| m == "GET" && p == &permission));
    if prism.is_some() {
        for (m, p, b, status) in seen.iter() {
            let status = status.unwrap();
            assert!(
                (200..300).contains(&status),
                "Prism answered {status} to {m} {p} {b}"
            );
        }
    }
}
