//! Commands on GitHub (`/oc stop`, `/oc retry`, `/oc answer`, `/oc approve`,
//! `/oc reject`, `/oc admit`) through the real `oc-github-extension` binary: this test
//! is the host (`secret.resolve`, `kv.*`, `state.works`, `action.list` with the offers
//! a test sets, `action.submit`, which it counts and answers as `core` and as a
//! `human` package named `people` whose only approver is `github:writer` would) and a
//! stand-in GitHub that answers the commenter's permission and takes the replies. Every request the stand-in gets is
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
    ActionListParams, ActionListResult, ActionOffer, ActionSubmitParams, ActionSubmitResult,
    HostInfo, InitializeParams, KvCommitParams, KvExpect, KvGetParams, ListedAction,
    SecretResolveParams, StateWorksParams, StateWorksResult, Work,
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

/// What the host was asked: every `action.submit`, the `action.list` calls, and the
/// `kv.commit` claims refused (by key); and what `action.list` offers on Work w1.
#[derive(Default)]
struct Asked {
    submits: Vec<ActionSubmitParams>,
    lists: usize,
    offers: Vec<ListedAction>,
    refused_claims: Vec<String>,
    kv: HashMap<String, Value>,
}

/// How the `human` package `people` (approvers: `github:writer`) answers a submit of
/// its action on Work w1, given what it offers (its messages and refusals).
fn people_act(offers: &[ListedAction], p: &ActionSubmitParams) -> Result<String, RpcError> {
    let caller = format!("github:{}", p.caller);
    if caller != "github:writer" {
        return Err(RpcError::new(
            Code::Unauthorized,
            format!("{caller} may not {} here: only github:writer may", p.action),
        ));
    }
    let offer = offers
        .iter()
        .map(|l| &l.offer)
        .find(|o| {
            o.id == p.action
                && o.input
                    .as_object()
                    .unwrap()
                    .iter()
                    .all(|(k, v)| &p.input[k] == v)
        })
        .ok_or_else(|| RpcError::new(Code::NotFound, "no such ask or gate on Work w1"))?;
    let choices = &offer.choices;
    Ok(match p.action.as_str() {
        "answer" => {
            if let Some(n) = p.input["choice"].as_u64() {
                if n == 0 || n as usize > choices.len() {
                    return Err(RpcError::new(
                        Code::Invalid,
                        format!(
                            "answer: choice {n} is not one offered (1-{} of: {})",
                            choices.len(),
                            choices.join(", ")
                        ),
                    ));
                }
            } else {
                let text = p.input["answer"].as_str().unwrap();
                assert!(choices.is_empty() || choices.iter().any(|c| c == text));
            }
            format!(
                "answered ask {} on Work w1",
                p.input["ask_id"].as_str().unwrap()
            )
        }
        "approve" => "approved github.open_pull_request on Work w1".to_string(),
        "reject" if p.input.get("gate_id").is_some() => {
            "rejected github.open_pull_request on Work w1".to_string()
        }
        "reject" => "rejected Work w1: it is cancelled".to_string(),
        "admit" => "admitted Work w1".to_string(),
        other => panic!("people offers no {other}"),
    })
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
                "action.list" => {
                    let p: ActionListParams = request.params()?;
                    assert_eq!((p.scope_id.as_str(), p.work_id.as_str()), ("s1", "w1"));
                    let mut asked = asked.lock().unwrap();
                    asked.lists += 1;
                    Ok(serde_json::to_value(ActionListResult {
                        actions: asked.offers.clone(),
                    })
                    .unwrap())
                }
                "action.submit" => {
                    let p: ActionSubmitParams = request.params()?;
                    let mut asked = asked.lock().unwrap();
                    let added = !asked.submits.iter().any(|s| s.key == p.key);
                    // Counted whether the provider takes it or refuses it.
                    asked.submits.push(p.clone());
                    let message = match (p.provider.as_str(), p.action.as_str()) {
                        ("core", "stop") => format!("stopped Work {}", p.work_id),
                        ("core", "retry") => format!("Work {} will run again", p.work_id),
                        ("people", _) => people_act(&asked.offers, &p)?,
                        other => panic!("no action {other:?}"),
                    };
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

/// The stand-in GitHub (its requests checked by Prism when there is one), the
/// extension configured for it, and what its host was asked.
async fn setup() -> (Seen, Shared, Peer, tokio::process::Child, bool) {
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
    let (peer, child) = start(asked.clone()).await;
    let mut params = configure_params(vec![entry(json!({"repository": REPO}))]);
    params.connections[0].config = json!({"api_url": url});
    params.connections[0].secrets = vec!["webhook_secret".into(), "token".into()];
    tokio::time::timeout(HANG, peer.call_typed(&params))
        .await
        .unwrap()
        .unwrap();
    (seen, asked, peer, child, prism.is_some())
}

/// Every request the stand-in GitHub got fits GitHub's description.
fn all_fit_the_description(seen: &Seen, prism: bool) {
    if !prism {
        return;
    }
    for (m, p, b, status) in seen.lock().unwrap().iter() {
        let status = status.unwrap();
        assert!(
            (200..300).contains(&status),
            "Prism answered {status} to {m} {p} {b}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn comments_steer_the_work_only_for_people_with_write_permission() {
    let (seen, asked, peer, _child, prism) = setup().await;

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

    // Stop and retry list no actions: they are the host's own.
    assert_eq!(asked.lock().unwrap().lists, 0);

    // Every request fits GitHub's description, the permission read among them.
    let permission = format!("/repos/{REPO}/collaborators/writer/permission");
    assert!(seen
        .lock()
        .unwrap()
        .iter()
        .any(|(m, p, _, _)| m == "GET" && p == &permission));
    all_fit_the_description(&seen, prism);
}

fn offered(id: &str, input: Value, detail: &str, choices: &[&str]) -> ListedAction {
    ListedAction {
        provider: "people".into(),
        offer: ActionOffer {
            id: id.into(),
            label: id.into(),
            detail: detail.into(),
            choices: choices.iter().map(|c| c.to_string()).collect(),
            awaited: true,
            input,
            ..ActionOffer::default()
        },
    }
}

/// The host's own actions, offered on every Work (and never picked by a decision).
fn core_offers() -> Vec<ListedAction> {
    vec![ListedAction {
        provider: "core".into(),
        offer: ActionOffer {
            id: "stop".into(),
            label: "Stop".into(),
            ..ActionOffer::default()
        },
    }]
}

/// Sets what `action.list` offers, comments, and waits for the reply to `login`
/// (its `n`th): answers it.
async fn decide(
    peer: &Peer,
    seen: &Seen,
    asked: &Shared,
    offers: Option<Vec<ListedAction>>,
    id: u64,
    login: &str,
    body: &str,
) -> String {
    if let Some(offers) = offers {
        asked.lock().unwrap().offers = offers;
    }
    let before = replies_to(seen, login).len();
    comment(peer, &format!("d-{id}"), id, login, 1, body).await;
    until(&format!("the reply to comment {id}"), || {
        replies_to(seen, login).len() > before
    })
    .await;
    replies_to(seen, login).remove(before)
}

/// The last submit: provider, action, input, caller, key.
fn last_submit(asked: &Shared) -> (String, String, Value, String, String) {
    let asked = asked.lock().unwrap();
    let s = asked.submits.last().unwrap();
    (
        s.provider.clone(),
        s.action.clone(),
        s.input.clone(),
        s.caller.clone(),
        s.key.clone(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn comments_answer_asks_and_decide_approvals_and_admission() {
    let (seen, asked, peer, _child, prism) = setup().await;
    let submits = || asked.lock().unwrap().submits.len();
    let with = |extra: Vec<ListedAction>| {
        let mut offers = core_offers();
        offers.extend(extra);
        Some(offers)
    };

    // No open ask: the reply says so and nothing is submitted.
    let r = decide(
        &peer,
        &seen,
        &asked,
        with(vec![]),
        2001,
        "writer",
        "/oc answer yes",
    )
    .await;
    assert_eq!(
        r,
        "@writer: Work w1 has no open ask: `/oc answer` has nothing to answer"
    );
    assert_eq!(submits(), 0);

    // An ask with choices, answered by number, then by text.
    let ask = offered(
        "answer",
        json!({"ask_id": "a-1"}),
        "Ship it now?",
        &["yes", "no"],
    );
    let r = decide(
        &peer,
        &seen,
        &asked,
        with(vec![ask]),
        2002,
        "writer",
        "/oc answer 2",
    )
    .await;
    assert_eq!(r, "@writer: answered ask a-1 on Work w1");
    assert_eq!(
        last_submit(&asked),
        (
            "people".into(),
            "answer".into(),
            json!({"ask_id": "a-1", "choice": 2}),
            "writer".into(),
            "comment/2002".into()
        )
    );
    let r = decide(&peer, &seen, &asked, None, 2003, "writer", "/oc answer yes").await;
    assert_eq!(r, "@writer: answered ask a-1 on Work w1");
    assert_eq!(
        last_submit(&asked).2,
        json!({"ask_id": "a-1", "answer": "yes"})
    );
    // A choice that is not offered: the provider's refusal is the reply.
    let r = decide(&peer, &seen, &asked, None, 2004, "writer", "/oc answer 3").await;
    assert_eq!(
        r,
        "@writer: `/oc answer` was refused: answer: choice 3 is not one offered (1-2 of: yes, no)"
    );

    // A free-text ask answered on the lines after the command.
    let ask = offered("answer", json!({"ask_id": "a-2"}), "Which base?", &[]);
    let r = decide(
        &peer,
        &seen,
        &asked,
        with(vec![ask]),
        2005,
        "writer",
        "/oc answer\r\nrelease-2.x,\r\nnot main\r\n",
    )
    .await;
    assert_eq!(r, "@writer: answered ask a-2 on Work w1");
    assert_eq!(
        last_submit(&asked).2,
        json!({"ask_id": "a-2", "answer": "release-2.x,\nnot main"})
    );

    // A parked call: a reader is refused by the repository's permission before
    // anything is read or submitted; a maintainer by the package's approvers.
    let gate = json!({"gate_id": "g-1"});
    let detail = "github.open_pull_request \"Fix the parser\"";
    let gated = with(vec![
        offered("approve", gate.clone(), detail, &[]),
        offered("reject", gate.clone(), detail, &[]),
    ]);
    let lists = || asked.lock().unwrap().lists;
    let (listed, n) = (lists(), submits());
    let r = decide(&peer, &seen, &asked, gated, 2006, "reader", "/oc approve").await;
    assert_eq!(
        r,
        "@reader: `/oc approve` needs write permission on Codertocat/Hello-World (you have read)"
    );
    assert_eq!((lists(), submits()), (listed, n));
    let r = decide(
        &peer,
        &seen,
        &asked,
        None,
        2007,
        "maintainer",
        "/oc approve",
    )
    .await;
    assert_eq!(
        r,
        "@maintainer: `/oc approve` was refused: github:maintainer may not approve here: only github:writer may"
    );
    assert_eq!(last_submit(&asked).3, "maintainer");
    // A rejection needs its reason; with one, it is the gate's.
    let r = decide(&peer, &seen, &asked, None, 2008, "writer", "/oc reject").await;
    assert_eq!(
        r,
        "@writer: `/oc reject` needs a reason, which the agent reads: `/oc reject REASON`"
    );
    let n = submits();
    let r = decide(
        &peer,
        &seen,
        &asked,
        None,
        2009,
        "writer",
        "/oc reject wrong base\nsee the issue",
    )
    .await;
    assert_eq!(r, "@writer: rejected github.open_pull_request on Work w1");
    assert_eq!(submits(), n + 1);
    assert_eq!(
        last_submit(&asked),
        (
            "people".into(),
            "reject".into(),
            json!({"gate_id": "g-1", "reason": "wrong base"}),
            "writer".into(),
            "comment/2009".into()
        )
    );
    let r = decide(
        &peer,
        &seen,
        &asked,
        None,
        2010,
        "writer",
        "/oc approve lgtm",
    )
    .await;
    assert_eq!(r, "@writer: approved github.open_pull_request on Work w1");
    assert_eq!(
        last_submit(&asked).2,
        json!({"gate_id": "g-1", "reason": "lgtm"})
    );

    // A Work held for admission: approve points at admit; admit and reject settle it.
    let held = with(vec![
        offered("admit", json!({}), "start w1", &[]),
        offered("reject", json!({}), "start w1", &[]),
    ]);
    let r = decide(&peer, &seen, &asked, held, 2011, "writer", "/oc approve").await;
    assert_eq!(
        r,
        "@writer: no call of Work w1 waits for approval; the Work is held for admission: `/oc admit` starts it"
    );
    let r = decide(&peer, &seen, &asked, None, 2012, "writer", "/oc admit").await;
    assert_eq!(r, "@writer: admitted Work w1");
    assert_eq!(
        last_submit(&asked),
        (
            "people".into(),
            "admit".into(),
            json!({}),
            "writer".into(),
            "comment/2012".into()
        )
    );
    let r = decide(
        &peer,
        &seen,
        &asked,
        None,
        2013,
        "writer",
        "/oc reject not now",
    )
    .await;
    assert_eq!(r, "@writer: rejected Work w1: it is cancelled");
    assert_eq!(last_submit(&asked).2, json!({"reason": "not now"}));

    // An answer without one is told how to give it, whoever writes it.
    let r = decide(&peer, &seen, &asked, None, 2014, "reader", "/oc answer").await;
    assert!(
        r.starts_with("@reader: `/oc answer` needs the answer"),
        "{r}"
    );

    // Each submit is keyed by its own comment.
    let keys: Vec<String> = asked
        .lock()
        .unwrap()
        .submits
        .iter()
        .map(|s| s.key.clone())
        .collect();
    let expected: Vec<String> = [2002, 2003, 2004, 2005, 2007, 2009, 2010, 2012, 2013]
        .iter()
        .map(|id| format!("comment/{id}"))
        .collect();
    assert_eq!(keys, expected);
    all_fit_the_description(&seen, prism);
}
