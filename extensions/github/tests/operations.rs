//! The toolbelt operations through the real `oc-github-extension` binary, with
//! this test as the host (`secret.resolve`, `state.work_events`, `kv.get`,
//! `kv.commit`) and a stand-in GitHub that counts what it is sent: the Work's
//! own repository and number, the refusal of another repository, and the replay
//! of a request ID (the same request ID twice makes one comment); `github.wait`'s
//! planning (the Wait's keys, types and plan) and `dependency.filter` on the plan it
//! returned; `event.render` with and without the Work's connection.

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
    Authority, DependencyFilterParams, Event, EventRenderParams, EventRenderResult, HostInfo,
    InitializeParams, KvCommitParams, KvEntry, KvExpect, KvGetParams, KvListParams, KvListResult,
    OperationCallParams, OperationCallResult, OperationWaitParams, Payload, SecretResolveParams,
    StateEventsResult, StateWaitsParams, StateWaitsResult, TaskRunParams, TaskRunResult, Wait,
    WaitRequest,
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
            let (status, answer) = if let Some(answer) = read(&method, &path) {
                answer
            } else if path.ends_with("/labels") {
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

/// The stand-in's answers to the reads of `github.wait`'s planning and of
/// `event.render` (pull request 2 and issue 1 of the fixtures' repository).
fn read(method: &str, path: &str) -> Option<(u16, Value)> {
    if method != "GET" {
        return None;
    }
    let repo = "/repos/Codertocat/Hello-World";
    let path = path.strip_prefix(repo).unwrap_or(path);
    Some(match path {
        "/user" => (200, json!({"login": "oc-bot", "id": 1})),
        "/pulls/2" => (
            200,
            json!({"number": 2, "head": {"sha": HEAD_SHA, "ref": "changes"}}),
        ),
        p if p == format!("/commits/{HEAD_SHA}/check-runs?per_page=100") => (
            200,
            json!({"total_count": 2, "check_runs": [
                {"id": 1, "name": "lint", "status": "completed", "conclusion": "success",
                 "check_suite": {"id": 118578147}},
                {"id": 128620228, "name": "Octocoders-linter", "status": "in_progress",
                 "conclusion": null, "check_suite": {"id": 118578147}}
            ]}),
        ),
        "/pulls/2/reviews?per_page=100" => (
            200,
            json!([{"id": 100, "state": "COMMENTED", "user": {"login": "someone"}}]),
        ),
        "/issues/1/comments?per_page=100" => (
            200,
            json!([{"id": 492700399, "user": {"login": "someone"}, "body": "earlier"}]),
        ),
        "/pulls/2/reviews/237895671/comments?per_page=100" => (
            200,
            json!([{"id": 284312630, "path": "README.md", "line": 265,
                    "user": {"login": "Codertocat"}, "diff_hunk": "@@ -1 +1 @@\n-# Hello-World",
                    "body": "Maybe you should use more emoji on this line."}]),
        ),
        // A failed check run's read fails: the rendering says so and goes on.
        "/check-runs/128620228" => (500, json!({"message": "Server Error"})),
        _ => return None,
    })
}

/// The host's KV: key → (value, version).
type Kv = Arc<Mutex<HashMap<String, (Value, String)>>>;

/// The Waits `state.waits` answers.
type Waits = Arc<Mutex<Vec<Wait>>>;

async fn start(kv: Kv) -> (Peer, tokio::process::Child) {
    start_with(kv, Waits::default()).await
}

async fn start_with(kv: Kv, waits: Waits) -> (Peer, tokio::process::Child) {
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
        let waits = waits.clone();
        async move {
            match request.method.as_str() {
                "state.waits" => {
                    let p: StateWaitsParams = request.params()?;
                    let waits: Vec<Wait> = waits
                        .lock()
                        .unwrap()
                        .iter()
                        .filter(|w| w.work_id == p.work_id)
                        .cloned()
                        .collect();
                    Ok(serde_json::to_value(StateWaitsResult { waits }).unwrap())
                }
                "kv.list" => {
                    let p: KvListParams = request.params()?;
                    let mut entries: Vec<KvEntry> = kv
                        .lock()
                        .unwrap()
                        .iter()
                        .filter(|(k, _)| k.starts_with(&p.prefix))
                        .map(|(k, (v, ver))| KvEntry {
                            key: k.clone(),
                            value: v.clone(),
                            version: ver.clone(),
                        })
                        .collect();
                    entries.sort_by(|a, b| a.key.cmp(&b.key));
                    Ok(serde_json::to_value(KvListResult {
                        entries,
                        next: String::new(),
                    })
                    .unwrap())
                }
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
                    for delete in p.deletes {
                        kv.remove(&delete.key);
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

// ---------------------------------------------------------------------------
// github.wait's planning, dependency.filter and event.render

/// The accepted Event of a fixture (`family`, `body`) in scope `s1`.
fn fixture_event(family: oc_github::Family, body: &[u8]) -> Event {
    let e = oc_github::project::project(family, "d-38", &json_of(body)).unwrap();
    Event {
        id: "ev-38".into(),
        event_type: e.event_type,
        scope_id: "s1".into(),
        keys: e.keys,
        payload: e.payload,
        occurred_at: e.occurred_at,
        ..Default::default()
    }
}

async fn configured() -> (Peer, tokio::process::Child, Seen, Kv) {
    configured_with(Waits::default()).await
}

async fn configured_with(waits: Waits) -> (Peer, tokio::process::Child, Seen, Kv) {
    let (url, seen) = github();
    let kv: Kv = Arc::default();
    let (peer, child) = start_with(kv.clone(), waits).await;
    let mut params = configure_params(vec![entry(json!({"repository": REPO}))]);
    params.connections[0].config = json!({"api_url": url});
    tokio::time::timeout(HANG, peer.call_typed(&params))
        .await
        .unwrap()
        .unwrap();
    (peer, child, seen, kv)
}

async fn wait(peer: &Peer, request_id: &str, input: Value) -> WaitRequest {
    tokio::time::timeout(
        HANG,
        peer.call_typed(&OperationWaitParams {
            operation: "github.wait".into(),
            request_id: request_id.into(),
            authority: authority("w1"),
            input,
        }),
    )
    .await
    .unwrap()
    .unwrap()
    .wait
}

async fn filtered(peer: &Peer, plan: &Value, event: Event) -> bool {
    tokio::time::timeout(
        HANG,
        peer.call_typed(&DependencyFilterParams {
            operation: "github.wait".into(),
            work_id: "w1".into(),
            plan: plan.clone(),
            event,
        }),
    )
    .await
    .unwrap()
    .unwrap()
    .matched
}

#[tokio::test]
async fn a_wait_is_keyed_and_typed_for_the_deliveries_that_satisfy_its_plan() {
    use oc_github::Family;
    let (peer, _child, _seen, kv) = configured().await;

    // Checks on pull request #2: its head commit, one run of suite 118578147 pending.
    let w = wait(&peer, "wait-1", json!({"for": "checks", "number": 2})).await;
    let id = w.plan["id"].as_str().unwrap().to_string();
    assert_eq!(
        w.keys,
        vec![
            "github:codertocat/hello-world#2".to_string(),
            format!("github-wait:{id}")
        ]
    );
    assert_eq!(
        w.types,
        vec![
            "github.check_suite.completed",
            "github.check_run.completed",
            "github.wait.checks_completed"
        ]
    );
    assert_eq!(w.description, "checks on PR #2");
    let plan = &w.plan;
    assert_eq!(plan["kind"], "checks");
    assert_eq!(plan["work_id"], "w1");
    assert_eq!(plan["repository"], REPO);
    assert_eq!(plan["number"], 2);
    assert_eq!(plan["head_sha"], HEAD_SHA);
    assert_eq!(
        plan["pending_checks"],
        json!([{"id": 128620228, "name": "Octocoders-linter", "suite_id": 118578147}])
    );
    assert_eq!(plan["bot"], "oc-bot");
    assert!(plan["planned_at"].is_string());
    assert_eq!(kv.lock().unwrap()["wait/w1"].0, *plan, "the plan is kept");
    // The recorded deliveries, judged by the binary on the plan it answered.
    assert!(
        filtered(
            &peer,
            plan,
            fixture_event(Family::CheckSuite, CHECK_SUITE_COMPLETED)
        )
        .await
    );
    assert!(
        filtered(
            &peer,
            plan,
            fixture_event(Family::CheckRun, CHECK_RUN_COMPLETED_FAILURE)
        )
        .await
    );
    assert!(
        !filtered(
            &peer,
            plan,
            fixture_event(Family::PullRequestReview, PULL_REQUEST_REVIEW_SUBMITTED)
        )
        .await
    );

    // A review on #2: the newest review then was 100.
    let w = wait(&peer, "wait-2", json!({"for": "review", "number": 2})).await;
    assert_eq!(
        w.types,
        vec![
            "github.pull_request_review.submitted",
            "github.wait.reviewed"
        ]
    );
    assert_eq!(w.keys[0], "github:codertocat/hello-world#2");
    assert_eq!(w.plan["after_id"], 100);
    assert_eq!(w.plan["kind"], "review");
    assert!(
        filtered(
            &peer,
            &w.plan,
            fixture_event(Family::PullRequestReview, PULL_REQUEST_REVIEW_SUBMITTED)
        )
        .await
    );

    // A reply on the Work's own issue #1: the newest comment then was 492700399.
    let w = wait(&peer, "wait-3", json!({"for": "reply"})).await;
    assert_eq!(
        w.types,
        vec![
            "github.issue_comment.created",
            "github.pull_request_review_comment.created",
            "github.wait.replied"
        ]
    );
    assert_eq!(w.keys[0], "github:codertocat/hello-world#1");
    assert_eq!(w.plan["after_id"], 492700399);
    assert_eq!(w.description, "a reply on #1");
    assert!(
        filtered(
            &peer,
            &w.plan,
            fixture_event(Family::IssueComment, ISSUE_COMMENT_CREATED)
        )
        .await
    );
    // A review comment from 2019 on #2: neither this issue nor after the planning.
    assert!(
        !filtered(
            &peer,
            &w.plan,
            fixture_event(
                Family::PullRequestReviewComment,
                PULL_REQUEST_REVIEW_COMMENT_CREATED
            )
        )
        .await
    );
    // A plan that is not one is an error (the host counts it as no match).
    let e = tokio::time::timeout(
        HANG,
        peer.call_typed(&DependencyFilterParams {
            operation: "github.wait".into(),
            work_id: "w1".into(),
            plan: json!({"nonsense": true}),
            event: fixture_event(Family::IssueComment, ISSUE_COMMENT_CREATED),
        }),
    )
    .await
    .unwrap()
    .unwrap_err();
    assert!(e.is(Code::Invalid), "{e}");
}

async fn render(
    peer: &Peer,
    event: Event,
    connection: &str,
    max_bytes: u32,
) -> Result<EventRenderResult, CallError> {
    tokio::time::timeout(
        HANG,
        peer.call_typed(&EventRenderParams {
            event,
            work_id: "w1".into(),
            connection: connection.into(),
            max_bytes,
        }),
    )
    .await
    .unwrap()
}

#[tokio::test]
async fn a_review_renders_with_its_comments_read_through_the_works_connection() {
    use oc_github::Family;
    let (peer, _child, seen, _kv) = configured().await;
    let review = fixture_event(Family::PullRequestReview, PULL_REQUEST_REVIEW_SUBMITTED);
    let r = render(&peer, review.clone(), "gh", 0).await.unwrap();
    assert!(!r.truncated);
    assert!(
        r.text
            .starts_with("## @Codertocat reviewed pull request #2: commented\n"),
        "{}",
        r.text
    );
    assert!(r.text.contains("### Review comments (1)"), "{}", r.text);
    assert!(
        r.text.contains(
            "#### `README.md` line 265 (@Codertocat)\n```diff\n@@ -1 +1 @@\n-# Hello-World\n```\n> Maybe you should use more emoji on this line.\n"
        ),
        "{}",
        r.text
    );
    assert!(seen.lock().unwrap().iter().any(|(m, p, _)| m == "GET"
        && p == "/repos/Codertocat/Hello-World/pulls/2/reviews/237895671/comments?per_page=100"));
    // Bounded.
    let r = render(&peer, review.clone(), "gh", 100).await.unwrap();
    assert!(r.truncated && r.text.len() <= 100, "{}", r.text.len());
    // No connection: what the payload has, and one line saying so.
    let r = render(&peer, review, "", 0).await.unwrap();
    assert!(r.text.contains("_The review's comments were not read from GitHub: the Work's binding names no GitHub connection._"), "{}", r.text);
    // A failed check run whose read fails: the payload's part and why, no token.
    let run = fixture_event(Family::CheckRun, CHECK_RUN_COMPLETED_FAILURE);
    let r = render(&peer, run, "gh", 0).await.unwrap();
    assert!(
        r.text.contains("_The check run reported no output._"),
        "{}",
        r.text
    );
    assert!(
        r.text.contains("_The check run's output was not read from GitHub (GitHub answered 500: Server Error); showing what the event carries._"),
        "{}",
        r.text
    );
    assert!(!r.text.contains("the-token"));
    // An unreadable payload schema is refused (the host renders it generically).
    let mut odd = fixture_event(Family::CheckSuite, CHECK_SUITE_COMPLETED);
    odd.payload.schema = "github.check_suite.v2".into();
    let e = render(&peer, odd, "gh", 0).await.unwrap_err();
    assert!(e.is(Code::Invalid), "{e}");
}

async fn waits_pass(peer: &Peer) -> String {
    let r: TaskRunResult = tokio::time::timeout(
        HANG,
        peer.call_typed(&TaskRunParams {
            task: "github.waits".into(),
            now: String::new(),
        }),
    )
    .await
    .unwrap()
    .unwrap();
    r.detail
}

#[tokio::test]
async fn a_plan_whose_wait_a_delivery_woke_is_dropped_without_a_look_at_github() {
    let waits = Waits::default();
    let (peer, _child, seen, kv) = configured_with(waits.clone()).await;
    let w = wait(&peer, "wait-9", json!({"for": "checks", "number": 2})).await;
    // Its Wait is not declared yet (the planning turn has not settled): the pass
    // looks at GitHub (one run still in progress) and keeps the plan.
    let looks = |seen: &Seen| {
        seen.lock()
            .unwrap()
            .iter()
            .filter(|(_, p, _)| p.contains("/check-runs"))
            .count()
    };
    let before = looks(&seen);
    let detail = waits_pass(&peer).await;
    assert!(detail.contains("1 pending"), "{detail}");
    assert_eq!(looks(&seen), before + 1);
    assert!(kv.lock().unwrap().contains_key("wait/w1"));
    // A delivery woke the Wait (the host's dependency.filter said so): the next pass
    // drops the plan and asks GitHub nothing.
    waits.lock().unwrap().push(Wait {
        id: "wait-a".into(),
        work_id: "w1".into(),
        state: "woken".into(),
        owner: "github".into(),
        operation: "github.wait".into(),
        keys: w.keys.clone(),
        ..Default::default()
    });
    let detail = waits_pass(&peer).await;
    assert!(detail.contains("1 dropped"), "{detail}");
    assert_eq!(looks(&seen), before + 1);
    assert!(!kv.lock().unwrap().contains_key("wait/w1"));
}
