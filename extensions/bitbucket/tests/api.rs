//! The REST client and the operations against Atlassian's published Bitbucket Cloud
//! API 2.0 description (tests/bitbucket-api, see its README): every request goes
//! through Prism as a validation proxy (`proxy --errors`), which checks it and the
//! answer against the description and refuses a request the description does not
//! allow (422), in front of the scripted Bitbucket of `tests/src/bitbucket.rs`
//! (included here by path; the system tests use the same file). The scripted
//! Bitbucket alone answers what the description does not declare: 401, 403, 404 and
//! 429 with `Retry-After`, with the error text the agent sees. The real extension
//! process, over a fake host, shows the idempotence on the request ID.

#![allow(clippy::unwrap_used)]

#[allow(dead_code)]
#[path = "../../../tests/src/bitbucket.rs"]
mod bitbucket;

use bitbucket::Scripted;
use oc_bitbucket::api::{Auth, Client};
use oc_bitbucket::ops::{self, Target};
use serde_json::{json, Value};

const TOKEN: &str = "bbtok-SECRET-77a1";

fn bearer(url: &str) -> Client {
    Client::new(url, Auth::Bearer(TOKEN.into())).unwrap()
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

fn target(id: u64) -> Target {
    Target {
        repository: "acme/widgets".into(),
        pull_request: Some(id),
    }
}

#[test]
fn each_operation_is_valid_against_the_published_description() {
    let Some(bb) = bitbucket::shared_or_skip() else {
        return;
    };
    let rt = rt();
    let client = bearer(&bb.url);
    let t = target(5);

    let pr = rt
        .block_on(ops::read_pull_request(&client, &t))
        .unwrap_or_else(|e| panic!("{e:?}\n{}", bb.prism.lines().join("\n")));
    assert_eq!(pr["title"], "Fix the login page");
    assert_eq!(pr["source_branch"], "feature/PROJ-12-login");
    assert_eq!(
        pr["comments"][0]["text"],
        "@conduit please look at the redirect"
    );
    assert_eq!(
        pr["comments"][1]["inline"],
        json!({"path": "src/login.rs", "to": 12})
    );
    assert_eq!(
        pr["files"],
        json!([{"path": "src/login.rs", "status": "modified", "lines_added": 2, "lines_removed": 1}])
    );
    assert!(pr["diff"]
        .as_str()
        .unwrap()
        .contains("+    if !logged_in {"));
    assert_eq!(pr["diff_truncated"], false);

    let made = rt
        .block_on(ops::comment(&client, &t, &json!({"text": "On it."})))
        .unwrap();
    assert_eq!(made["comment_id"], 103);
    assert_eq!(made["pull_request"], "bitbucket:acme/widgets#5");
    rt.block_on(ops::comment(
        &client,
        &t,
        &json!({"text": "This loops.", "inline": {"path": "src/login.rs", "to": 12}}),
    ))
    .unwrap();
    let opened = rt
        .block_on(ops::open_pull_request(
            &client,
            &Target {
                repository: "acme/widgets".into(),
                pull_request: None,
            },
            &json!({"title": "PROJ-12: fix the login loop", "branch": "PROJ-12-fix",
                    "destination": "main", "description": "Fixes PROJ-12."}),
        ))
        .unwrap();
    assert_eq!(opened["id"], 7);
    assert_eq!(opened["key"], "acme/widgets#7");
    let approved = rt.block_on(ops::approve(&client, &t)).unwrap();
    assert_eq!(approved["approved"], true);
    let changes = rt
        .block_on(ops::request_changes(
            &client,
            &t,
            &json!({"text": "Please add a test."}),
        ))
        .unwrap();
    assert_eq!(changes["changes_requested"], true);
    assert_eq!(changes["comment_id"], 103);

    // What Bitbucket was sent.
    let comments = bb.requests_to("POST", "/repositories/acme/widgets/pullrequests/5/comments");
    assert!(comments
        .iter()
        .any(|c| c.body["content"]["raw"] == "On it."));
    assert!(comments
        .iter()
        .any(|c| c.body["inline"] == json!({"path": "src/login.rs", "to": 12})));
    let opened = bb.requests_to("POST", "/repositories/acme/widgets/pullrequests");
    assert_eq!(opened[0].body["source"]["branch"]["name"], "PROJ-12-fix");
    assert_eq!(opened[0].body["destination"]["branch"]["name"], "main");
    assert_eq!(bb.requests_to("POST", "/pullrequests/5/approve").len(), 1);
    assert_eq!(
        bb.requests_to("POST", "/pullrequests/5/request-changes")
            .len(),
        1
    );
    // The diffstat of the source against the destination commit.
    assert_eq!(
        bb.requests_to(
            "GET",
            "/repositories/acme/widgets/diffstat/d3022fc0ca3d..ce5965ddd289"
        )
        .len(),
        1
    );
    assert!(bb
        .requests()
        .iter()
        .all(|r| r.authorization == format!("Bearer {TOKEN}")));
    let v = bb.violations();
    assert!(v.is_empty(), "Prism reported violations: {v:?}");
}

#[test]
fn a_request_the_description_refuses_fails() {
    let Some(bb) = bitbucket::shared_or_skip() else {
        return;
    };
    let client = bearer(&bb.url);
    // The description's comment content is an object, not a string.
    let e = client
        .send(
            "POST",
            "/repositories/acme/widgets/pullrequests/5/comments",
            Some(&json!({"type": "pullrequest_comment", "content": "hi"})),
        )
        .unwrap_err();
    assert!(
        e.message.contains(
            "Bitbucket POST /repositories/acme/widgets/pullrequests/5/comments answered 422"
        ),
        "{}",
        e.message
    );
    // And a pull request ID is an integer.
    let e = client
        .send("GET", "/repositories/acme/widgets/pullrequests/five", None)
        .unwrap_err();
    assert!(e.message.contains("answered 4"), "{}", e.message);
    assert!(!e.message.contains(TOKEN));
}

#[test]
fn a_401_403_404_and_429_are_clear_errors_without_the_token() {
    let rt = rt();
    let s = Scripted::start().unwrap();
    let client = bearer(&s.url);
    let t = target(9);
    s.fail_with(Some((401, "", "")));
    let e = rt
        .block_on(ops::read_pull_request(&client, &t))
        .unwrap_err();
    assert_eq!(
        e.message,
        "Bitbucket GET /repositories/acme/widgets/pullrequests/9 answered 401: the connection's credentials were refused (check token, or username and app_password)"
    );
    assert!(e.is(protocol::Code::Unauthorized));
    s.fail_with(Some((
        403,
        "",
        r#"{"type":"error","error":{"message":"Your credentials lack one or more required privilege scopes.","detail":{"granted":["repository"],"required":["pullrequest:write"]}}}"#,
    )));
    let e = rt
        .block_on(ops::comment(&client, &t, &json!({"text": "hi"})))
        .unwrap_err();
    assert_eq!(
        e.message,
        "Bitbucket POST /repositories/acme/widgets/pullrequests/9/comments answered 403: the connection's token or app password lacks the permission for this (its scopes: pullrequest, pullrequest:write, repository) (Your credentials lack one or more required privilege scopes.)"
    );
    s.fail_with(Some((
        404,
        "",
        r#"{"type":"error","error":{"message":"Repository not found"}}"#,
    )));
    let e = rt.block_on(ops::approve(&client, &t)).unwrap_err();
    assert!(e.is(protocol::Code::NotFound));
    assert!(
        e.message.starts_with(
            "Bitbucket POST /repositories/acme/widgets/pullrequests/9/approve answered 404: no such repository or pull request"
        ),
        "{}",
        e.message
    );
    s.fail_with(Some((429, "Retry-After: 17\r\n", "")));
    let e = rt
        .block_on(ops::request_changes(&client, &t, &json!({})))
        .unwrap_err();
    assert_eq!(
        e.message,
        "Bitbucket POST /repositories/acme/widgets/pullrequests/9/request-changes answered 429: Bitbucket's rate limit was hit; Retry-After 17 s: try again after that"
    );
    assert!(s.requests().iter().all(|r| !r.target.contains(TOKEN)));
    // A redirect out of the API is not followed (the token stays in the API).
    s.fail_with(Some((302, "Location: https://evil.example/steal\r\n", "")));
    let e = rt
        .block_on(ops::read_pull_request(&client, &t))
        .unwrap_err();
    assert!(
        e.message.contains("a redirect that is not followed"),
        "{}",
        e.message
    );
    // One within the API is followed once (the second is refused).
    let before = s.requests().len();
    s.fail_with(Some((
        302,
        "Location: /repositories/acme/widgets/pullrequests/10\r\n",
        "",
    )));
    let e = rt
        .block_on(ops::read_pull_request(&client, &t))
        .unwrap_err();
    assert!(
        e.message.contains("a redirect that is not followed"),
        "{}",
        e.message
    );
    let followed: Vec<String> = s.requests()[before..]
        .iter()
        .map(|r| r.target.clone())
        .collect();
    assert_eq!(
        followed,
        [
            "/repositories/acme/widgets/pullrequests/9",
            "/repositories/acme/widgets/pullrequests/10"
        ]
    );
}

#[test]
fn basic_auth_is_the_username_and_app_password() {
    let rt = rt();
    let s = Scripted::start().unwrap();
    let client = Client::new(
        &s.url,
        Auth::Basic {
            username: "bot".into(),
            password: "app-pass".into(),
        },
    )
    .unwrap();
    rt.block_on(ops::approve(&client, &target(3))).unwrap();
    // base64("bot:app-pass")
    assert_eq!(s.requests()[0].authorization, "Basic Ym90OmFwcC1wYXNz");
    assert!(!format!("{client:?}", client = Auth::Bearer(TOKEN.into())).contains(TOKEN));
}

#[test]
fn bad_inputs_are_refused_before_any_call() {
    let rt = rt();
    let s = Scripted::start().unwrap();
    let client = bearer(&s.url);
    for (input, says) in [
        (json!({}), "text is required"),
        (json!({"text": "  "}), "text is empty"),
        (
            json!({"text": "x", "inline": {"path": "a.rs"}}),
            "inline.to is required",
        ),
        (
            json!({"text": "x", "inline": {"to": 3}}),
            "inline.path is required",
        ),
        (
            json!({"text": "x".repeat(ops::MAX_TEXT_BYTES + 1)}),
            "longer than 32000 bytes",
        ),
    ] {
        let e = rt
            .block_on(ops::comment(&client, &target(1), &input))
            .unwrap_err();
        assert!(e.message.contains(says), "{input}: {}", e.message);
    }
    let e = rt
        .block_on(ops::open_pull_request(
            &client,
            &target(1),
            &json!({"title": "t", "branch": "bad branch"}),
        ))
        .unwrap_err();
    assert!(e.message.contains("is not a branch name"), "{}", e.message);
    let e = rt
        .block_on(ops::approve(
            &client,
            &Target {
                repository: "acme/widgets".into(),
                pull_request: None,
            },
        ))
        .unwrap_err();
    assert!(e.message.contains("has no pull request"), "{}", e.message);
    assert!(s.requests().is_empty());
}

// ---- the real extension process ----------------------------------------------------

mod process {
    use super::*;
    use protocol::wire::{
        Authority, Call, ConfigureParams, Connection, Entry, Event, HostInfo, InitializeParams,
        KvCommitParams, KvCommitResult, KvGetParams, KvGetResult, OperationCallParams,
        OperationCallResult, SecretResolveParams, SecretResolveResult, StateEventsResult,
        StateWorkEventsParams, WebhookHandleParams, WebhookHandleResult,
    };
    use protocol::{connect, FnHandler, Options, RpcError};
    use std::collections::{BTreeMap, HashMap};
    use std::process::Stdio;
    use std::sync::{Arc, Mutex};
    use std::time::Duration;

    const EXE: &str = env!("CARGO_BIN_EXE_oc-bitbucket-extension");
    const COMMENT: &[u8] = include_bytes!("fixtures/pull-request-comment-created.json");
    const SECRET: &str = "whsec-bb-5e11";

    async fn within<F: std::future::Future>(f: F) -> F::Output {
        tokio::time::timeout(Duration::from_secs(60), f)
            .await
            .expect("hung")
    }

    /// What the host serves the extension: secrets, the Work's Events, a KV.
    #[derive(Default)]
    struct Host {
        events: Mutex<Vec<Event>>,
        kv: Mutex<HashMap<String, Value>>,
        resolved: Mutex<Vec<String>>,
    }

    fn serve(host: &Host, request: &protocol::Request) -> Result<Value, RpcError> {
        let m = request.method.as_str();
        if m == <SecretResolveParams as Call>::METHOD {
            let params: SecretResolveParams = request.params()?;
            let mut result = SecretResolveResult::default();
            for name in params.names {
                host.resolved.lock().unwrap().push(name.clone());
                let value = match name.as_str() {
                    "webhook_secret" => SECRET,
                    "token" => TOKEN,
                    _ => continue,
                };
                result.values.insert(name, value.to_string());
            }
            return Ok(serde_json::to_value(result).unwrap());
        }
        if m == <StateWorkEventsParams as Call>::METHOD {
            let params: StateWorkEventsParams = request.params()?;
            let events = host
                .events
                .lock()
                .unwrap()
                .iter()
                .filter(|e| e.sequence > params.after)
                .cloned()
                .collect();
            return Ok(serde_json::to_value(StateEventsResult { events }).unwrap());
        }
        if m == <KvGetParams as Call>::METHOD {
            let params: KvGetParams = request.params()?;
            let value = host.kv.lock().unwrap().get(&params.key).cloned();
            return Ok(serde_json::to_value(KvGetResult {
                value,
                ..Default::default()
            })
            .unwrap());
        }
        if m == <KvCommitParams as Call>::METHOD {
            let params: KvCommitParams = request.params()?;
            let mut kv = host.kv.lock().unwrap();
            for put in params.puts {
                kv.insert(put.key, put.value);
            }
            return Ok(serde_json::to_value(KvCommitResult::default()).unwrap());
        }
        Err(RpcError::method_not_found(m))
    }

    #[tokio::test]
    async fn a_signed_comment_becomes_an_event_and_a_repeated_request_id_comments_once() {
        let Some(bb) = bitbucket::shared_or_skip() else {
            return;
        };
        let mut child = tokio::process::Command::new(EXE)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let stdin = child.stdin.take().unwrap();
        let stdout = child.stdout.take().unwrap();
        let mut stderr = child.stderr.take().unwrap();
        let log = tokio::spawn(async move {
            let mut out = String::new();
            let _ = tokio::io::AsyncReadExt::read_to_string(&mut stderr, &mut out).await;
            out
        });
        let host = Arc::new(Host::default());
        let served = host.clone();
        let handler = FnHandler(move |request: protocol::Request| {
            let host = served.clone();
            async move { serve(&host, &request) }
        });
        let peer = connect(
            stdout,
            stdin,
            handler,
            Options::named("extension bitbucket"),
        );
        let init: Value = within(peer.call_typed(&InitializeParams {
            protocol_versions: vec![1],
            host: HostInfo {
                name: "open-conduit".into(),
                version: "test".into(),
            },
            state_dir: std::env::temp_dir().display().to_string(),
            ..Default::default()
        }))
        .await
        .map(|r| serde_json::to_value(r).unwrap())
        .unwrap();
        assert_eq!(
            init["manifest"],
            serde_json::from_str::<Value>(oc_bitbucket::MANIFEST).unwrap()
        );
        let configured = within(peer.call_typed(&ConfigureParams {
            entries: vec![Entry {
                scope_id: "s1".into(),
                entry_type: "bitbucket".into(),
                name: "code".into(),
                connection: "bb".into(),
                config: json!({"repositories": ["team_name/repo_name"], "mention": "@conduit"}),
                ..Default::default()
            }],
            connections: vec![Connection {
                name: "bb".into(),
                connection_type: "bitbucket".into(),
                config: json!({"api_url": bb.url}),
                secrets: vec!["token".into(), "webhook_secret".into()],
            }],
            ..Default::default()
        }))
        .await
        .unwrap();
        assert_eq!(configured.webhooks[0].path, "/bitbucket/s1/code");

        let mut payload: Value = serde_json::from_slice(COMMENT).unwrap();
        payload["comment"]["content"]["raw"] = json!("@conduit please fix the loop");
        let body = serde_json::to_vec(&payload).unwrap();
        let mut headers = BTreeMap::new();
        headers.insert(
            "X-Hub-Signature".to_string(),
            vec![oc_bitbucket::intake::sign(SECRET.as_bytes(), &body)],
        );
        headers.insert(
            "X-Event-Key".to_string(),
            vec!["pullrequest:comment_created".to_string()],
        );
        headers.insert("X-Request-UUID".to_string(), vec!["uuid-1".to_string()]);
        let mut params = WebhookHandleParams {
            method: "POST".into(),
            path: "/bitbucket/s1/code".into(),
            headers,
            body,
            ..Default::default()
        };
        let r: WebhookHandleResult = within(peer.call_typed(&params)).await.unwrap();
        assert_eq!(r.response.status, 200);
        let delivery = r.deliveries[0].clone();
        // The comment's own identity (issue 44), not the request's UUID.
        assert_eq!(
            delivery.delivery_id,
            "pullrequest/team_name/repo_name/1/comment/17"
        );
        assert!(delivery.events[0].snapshot);
        params.headers.insert(
            "X-Hub-Signature".to_string(),
            vec![oc_bitbucket::intake::sign(b"wrong", &params.body)],
        );
        let refused: WebhookHandleResult = within(peer.call_typed(&params)).await.unwrap();
        assert_eq!(refused.response.status, 401);
        assert!(refused.deliveries.is_empty());
        // The secret was resolved once and cached for the configuration.
        assert_eq!(
            host.resolved
                .lock()
                .unwrap()
                .iter()
                .filter(|n| *n == "webhook_secret")
                .count(),
            1
        );

        let e = &delivery.events[0];
        host.events.lock().unwrap().push(Event {
            id: "ev-1".into(),
            sequence: 1,
            event_type: e.event_type.clone(),
            source: delivery.source.clone(),
            delivery_id: delivery.delivery_id.clone(),
            scope_id: "s1".into(),
            keys: e.keys.clone(),
            payload: e.payload.clone(),
            ..Default::default()
        });
        let authority = Authority {
            scope_id: "s1".into(),
            work_id: "w1".into(),
            binding: "agent".into(),
            connection: "bb".into(),
            ..Default::default()
        };
        let comment = OperationCallParams {
            operation: "bitbucket.comment".into(),
            request_id: "req-1".into(),
            authority: authority.clone(),
            input: json!({"text": "On it."}),
        };
        let posts = || {
            bb.requests_to(
                "POST",
                "/repositories/team_name/repo_name/pullrequests/1/comments",
            )
            .len()
        };
        let first: OperationCallResult = within(peer.call_typed(&comment)).await.unwrap();
        assert_eq!(first.output["comment_id"], 103);
        assert_eq!(
            first.output["pull_request"],
            "bitbucket:team_name/repo_name#1"
        );
        let again: OperationCallResult = within(peer.call_typed(&comment)).await.unwrap();
        assert_eq!(again.output, first.output);
        assert_eq!(posts(), 1, "a repeated request_id posts once");
        // The same request ID for another operation is a conflict, not a replay.
        let e = within(peer.call_typed(&OperationCallParams {
            operation: "bitbucket.approve".into(),
            request_id: "req-1".into(),
            authority: authority.clone(),
            input: json!({}),
        }))
        .await
        .unwrap_err();
        assert!(e.to_string().contains("already used"), "{e}");
        let read: OperationCallResult = within(peer.call_typed(&OperationCallParams {
            operation: "bitbucket.read_pull_request".into(),
            request_id: "req-2".into(),
            authority,
            input: json!({}),
        }))
        .await
        .unwrap();
        assert_eq!(read.output["id"], 1);

        drop(peer);
        let _ = child.kill().await;
        let log = within(log).await.unwrap();
        assert!(
            !log.contains(TOKEN) && !log.contains(SECRET),
            "a secret in the log: {log}"
        );
        let v = bb.violations();
        assert!(v.is_empty(), "Prism reported violations: {v:?}");
    }
}
