//! The REST client and the operations against Atlassian's published Jira Cloud
//! platform REST v3 OpenAPI description (tests/jira-api, see its README): every
//! request goes through Prism as a validation proxy (`proxy --errors`), which
//! checks it (and the answer) against the description and refuses one the
//! description does not allow (422), in front of a small scripted Jira
//! ([`upstream`]) whose answers are what the operations need (Prism's made-up mock
//! answers change between calls, so a transition found by name could not be taken).
//! A second stand-in answers what Prism cannot: 401, 403, 404 and 429 with
//! `Retry-After`, with the error text the agent sees.

#![allow(clippy::unwrap_used)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use oc_jira::api::{Auth, Client};
use oc_jira::ops;
use serde_json::{json, Value};

const TOKEN: &str = "tok-SECRET-4f1c";

fn required() -> bool {
    std::env::var("OC_REQUIRE_PEERS").is_ok_and(|v| v == "1")
}

fn repo_tests() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests")
}

struct Prism {
    url: String,
    log: Arc<Mutex<Vec<String>>>,
    _child: Mutex<Child>,
}

fn prism() -> Result<&'static Prism, String> {
    static PRISM: OnceLock<Result<Prism, String>> = OnceLock::new();
    PRISM
        .get_or_init(start_prism)
        .as_ref()
        .map_err(Clone::clone)
}

fn prism_or_skip() -> Option<&'static Prism> {
    match prism() {
        Ok(p) => Some(p),
        Err(why) => {
            assert!(!required(), "no Prism under OC_REQUIRE_PEERS=1: {why}");
            eprintln!("SKIPPED: {why}");
            None
        }
    }
}

fn start_prism() -> Result<Prism, String> {
    let bin = repo_tests().join("github-api/node_modules/.bin/prism");
    let spec = repo_tests().join("jira-api/platform-swagger.v3.json");
    if !Command::new("node")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
    {
        return Err("node is not installed".into());
    }
    if !bin.exists() {
        return Err(
            "tests/github-api has no node_modules (run npm ci --prefix tests/github-api)".into(),
        );
    }
    if !spec.exists() {
        return Err(format!("{} is missing", spec.display()));
    }
    let port = TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map_err(|e| e.to_string())?
        .port();
    // The wrapper kills Prism when our end of its stdin closes (the test process ends).
    let upstream = upstream();
    let script = format!(
        "'{}' proxy --errors -h 127.0.0.1 -p {port} '{}' '{upstream}' 2>&1 & pid=$!; cat >/dev/null; kill $pid",
        bin.display(),
        spec.display()
    );
    let mut child = Command::new("sh")
        .arg("-c")
        .arg(script)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("starting prism: {e}"))?;
    let stdout = child.stdout.take().ok_or("no stdout")?;
    let log = Arc::new(Mutex::new(Vec::new()));
    let (tx, rx) = std::sync::mpsc::channel();
    let lines = log.clone();
    std::thread::spawn(move || {
        let mut ready = Some(tx);
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if line.contains("Prism is listening") {
                if let Some(tx) = ready.take() {
                    let _ = tx.send(true);
                }
            }
            lines.lock().unwrap().push(line);
        }
        if let Some(tx) = ready.take() {
            let _ = tx.send(false);
        }
    });
    match rx.recv_timeout(Duration::from_secs(300)) {
        Ok(true) => Ok(Prism {
            url: format!("http://127.0.0.1:{port}"),
            log,
            _child: Mutex::new(child),
        }),
        _ => {
            let _ = child.kill();
            Err(format!(
                "prism did not start listening: {}",
                log.lock().unwrap().join("\n")
            ))
        }
    }
}

fn basic(url: &str) -> Client {
    Client::new(
        url,
        Auth::Basic {
            email: "agent@example.com".into(),
            token: TOKEN.into(),
        },
    )
    .unwrap()
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// Prism's log lines since `from` that report a request violation.
fn violations(p: &Prism, from: usize) -> Vec<String> {
    p.log.lock().unwrap()[from..]
        .iter()
        .filter(|l| l.contains("violation") || l.contains("did not pass the validation"))
        .cloned()
        .collect()
}

#[test]
fn read_comment_and_transition_are_valid_against_the_published_description() {
    let Some(p) = prism_or_skip() else { return };
    let from = p.log.lock().unwrap().len();
    let rt = rt();
    let client = basic(&p.url);
    let issue = rt.block_on(ops::read_issue(&client, "PROJ-123")).unwrap();
    assert_eq!(issue["summary"], "Fix the login page");
    assert_eq!(
        issue["comments"][0]["text"],
        "Please look at @Agent\n\n- the login page"
    );
    let text = "Working on it.\n\n- read the issue\n- fix it\n\n```rust\nfn main() {}\n```";
    let made = rt
        .block_on(ops::comment(&client, "PROJ-123", text))
        .unwrap();
    assert_eq!(made["comment_id"], "10001");
    let moved = rt
        .block_on(ops::transition(&client, "PROJ-123", "done"))
        .unwrap();
    assert_eq!(
        moved,
        json!({"issue": "PROJ-123", "transition": "Finish", "status": "Done"})
    );
    let e = rt
        .block_on(ops::transition(&client, "PROJ-123", "Won't do"))
        .unwrap_err();
    assert_eq!(
        e.message,
        "PROJ-123 offers no transition or status named `Won't do`; it offers: Start Progress (to In Progress), Finish (to Done)"
    );
    let v = violations(p, from);
    assert!(v.is_empty(), "Prism reported violations: {v:?}");
}

#[test]
fn a_request_the_description_refuses_fails() {
    let Some(p) = prism_or_skip() else { return };
    let client = basic(&p.url);
    // The description's IssueUpdateDetails.transition is an object, not a string.
    let e = client
        .send(
            "POST",
            "/rest/api/3/issue/PROJ-1/transitions",
            Some(&json!({"transition": "31"})),
        )
        .unwrap_err();
    assert!(
        e.message
            .contains("Jira POST /rest/api/3/issue/PROJ-1/transitions answered 422"),
        "{}",
        e.message
    );
    // And maxResults is an integer.
    let e = client
        .send(
            "GET",
            "/rest/api/3/issue/PROJ-1/comment?maxResults=many",
            None,
        )
        .unwrap_err();
    assert!(e.message.contains("answered 4"), "{}", e.message);
    assert!(!e.message.contains(TOKEN));
}

#[test]
fn the_adf_body_has_a_list_and_a_code_block() {
    let doc = oc_jira::adf::from_markdown("Hello\nthere\n\n- one\n- two\n\n```sh\nls -l\n```");
    let kinds: Vec<&str> = doc["content"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n["type"].as_str().unwrap())
        .collect();
    assert_eq!(kinds, ["paragraph", "bulletList", "codeBlock"]);
    assert_eq!(doc["content"][2]["attrs"]["language"], "sh");
    let text = oc_jira::adf::to_text(&doc, 10_000);
    assert!(text.contains("- one\n- two"), "{text}");
    assert!(text.contains("```\nls -l\n```"), "{text}");
}

/// The scripted Jira behind Prism: a transition list, an issue, its comments, a
/// made comment, a made transition (204); every request's line is recorded.
fn upstream() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(stream) = stream else { break };
            std::thread::spawn(move || serve_one(stream));
        }
    });
    url
}

/// Every request line the scripted Jira served.
fn seen() -> &'static Mutex<Vec<String>> {
    static SEEN: OnceLock<Mutex<Vec<String>>> = OnceLock::new();
    SEEN.get_or_init(Default::default)
}

fn serve_one(mut stream: std::net::TcpStream) {
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    loop {
        let mut first = String::new();
        if reader.read_line(&mut first).unwrap_or(0) == 0 {
            return;
        }
        let mut length = 0usize;
        loop {
            let mut line = String::new();
            if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
                break;
            }
            if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                length = v.trim().parse().unwrap_or(0);
            }
        }
        let mut rest = vec![0u8; length];
        let _ = reader.read_exact(&mut rest);
        seen().lock().unwrap().push(first.trim().to_string());
        let mut parts = first.split_whitespace();
        let verb = parts.next().unwrap_or_default().to_string();
        let path = parts
            .next()
            .unwrap_or_default()
            .split('?')
            .next()
            .unwrap_or_default()
            .to_string();
        let (status, body) = match (
            verb.as_str(),
            path.ends_with("/transitions"),
            path.ends_with("/comment"),
        ) {
            ("GET", true, _) => (
                200,
                json!({"transitions": [
                {"id": "11", "name": "Start Progress", "to": {"id": "3", "name": "In Progress"}},
                {"id": "31", "name": "Finish", "to": {"id": "10001", "name": "Done"}}]}),
            ),
            ("POST", true, _) => (204, Value::Null),
            ("GET", _, true) => (
                200,
                json!({"startAt": 0, "maxResults": 50, "total": 1, "comments": [
                {"id": "10000", "author": {"accountId": "5b10a", "displayName": "Ann"},
                 "created": "2024-05-01T10:00:00.000+0000",
                 "body": {"type": "doc", "version": 1, "content": [
                    {"type": "paragraph", "content": [{"type": "text", "text": "Please look at "},
                        {"type": "mention", "attrs": {"id": "5b10b", "text": "@Agent"}}]},
                    {"type": "bulletList", "content": [{"type": "listItem", "content": [
                        {"type": "paragraph", "content": [{"type": "text", "text": "the login page"}]}]}]}]}}]}),
            ),
            ("POST", _, true) => (201, json!({"id": "10001"})),
            _ => (
                200,
                json!({"id": "10042", "key": "PROJ-123", "fields": {
                "summary": "Fix the login page", "status": {"name": "To Do"}, "labels": ["agent"],
                "reporter": {"accountId": "5b10a", "displayName": "Ann"}, "description": null}}),
            ),
        };
        let text = if body.is_null() {
            String::new()
        } else {
            body.to_string()
        };
        let answer = format!(
            "HTTP/1.1 {status} X\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{text}",
            text.len()
        );
        if stream.write_all(answer.as_bytes()).is_err() {
            return;
        }
    }
}

/// A stand-in answering every request with `status`, `headers` and `body`,
/// recording the requests' heads.
fn stand_in(
    status: u16,
    headers: &'static str,
    body: &'static str,
) -> (String, Arc<Mutex<Vec<String>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let seen = Arc::new(Mutex::new(Vec::new()));
    let record = seen.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { break };
            stream
                .set_read_timeout(Some(Duration::from_secs(10)))
                .unwrap();
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            let mut head = String::new();
            let mut length = 0usize;
            loop {
                let mut line = String::new();
                if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
                    break;
                }
                if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                    length = v.trim().parse().unwrap_or(0);
                }
                head.push_str(&line);
            }
            let mut rest = vec![0u8; length];
            let _ = reader.read_exact(&mut rest);
            record.lock().unwrap().push(head);
            let answer = format!(
                "HTTP/1.1 {status} X\r\nContent-Type: application/json\r\n{headers}Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
            let _ = stream.write_all(answer.as_bytes());
        }
    });
    (url, seen)
}

#[test]
fn a_401_403_404_and_429_are_clear_errors_without_the_token() {
    let rt = rt();
    let (url, seen) = stand_in(401, "", "");
    let e = rt
        .block_on(ops::read_issue(&basic(&url), "PROJ-9"))
        .unwrap_err();
    assert_eq!(
        e.message,
        "Jira GET /rest/api/3/issue/PROJ-9 answered 401: the connection's credentials were refused (check email and api_token, or bearer_token)"
    );
    assert!(
        seen.lock().unwrap()[0].contains("authorization: Basic ")
            || seen.lock().unwrap()[0].contains("Authorization: Basic ")
    );
    let (url, _) = stand_in(
        403,
        "",
        r#"{"errorMessages":["You do not have permission to comment."],"errors":{}}"#,
    );
    let e = rt
        .block_on(ops::comment(&basic(&url), "PROJ-9", "hi"))
        .unwrap_err();
    assert_eq!(
        e.message,
        "Jira POST /rest/api/3/issue/PROJ-9/comment answered 403: the connection's account lacks the permission for this (browse, comment or transition) (You do not have permission to comment.)"
    );
    let (url, _) = stand_in(
        404,
        "",
        r#"{"errorMessages":["Issue does not exist or you do not have permission to see it."],"errors":{}}"#,
    );
    let e = rt
        .block_on(ops::read_issue(&basic(&url), "NOPE-1"))
        .unwrap_err();
    assert!(
        e.message
            .starts_with("Jira GET /rest/api/3/issue/NOPE-1 answered 404: no such issue"),
        "{}",
        e.message
    );
    let (url, _) = stand_in(429, "Retry-After: 17\r\n", "");
    let e = rt
        .block_on(ops::transition(&basic(&url), "PROJ-9", "Done"))
        .unwrap_err();
    assert_eq!(
        e.message,
        "Jira GET /rest/api/3/issue/PROJ-9/transitions answered 429: Jira's rate limit was hit; Retry-After 17 s: try again after that (longer than the 10 s a call waits, MAX_RATE_LIMIT_WAIT)"
    );
    assert!(!e.message.contains(TOKEN));
    // An issue key that is not one is refused before any call.
    let e = rt
        .block_on(ops::read_issue(&basic(&url), "../../admin"))
        .unwrap_err();
    assert!(e.message.contains("is not an issue key"), "{}", e.message);
}

/// A stand-in answering `answers` in order (the last one again after them),
/// recording the requests' first lines.
fn scripted(answers: Vec<(u16, String, String)>) -> (String, Arc<Mutex<Vec<String>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let seen = Arc::new(Mutex::new(Vec::new()));
    let record = seen.clone();
    std::thread::spawn(move || {
        for (n, stream) in listener.incoming().enumerate() {
            let Ok(mut stream) = stream else { break };
            stream
                .set_read_timeout(Some(Duration::from_secs(10)))
                .unwrap();
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            let mut first = String::new();
            let _ = reader.read_line(&mut first);
            let mut length = 0usize;
            loop {
                let mut line = String::new();
                if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
                    break;
                }
                if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                    length = v.trim().parse().unwrap_or(0);
                }
            }
            let mut rest = vec![0u8; length];
            let _ = reader.read_exact(&mut rest);
            record.lock().unwrap().push(first.trim().to_string());
            let (status, headers, body) = answers[n.min(answers.len() - 1)].clone();
            let answer = format!(
                "HTTP/1.1 {status} X\r\nContent-Type: application/json\r\n{headers}Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
            let _ = stream.write_all(answer.as_bytes());
        }
    });
    (url, seen)
}

const ISSUE: &str =
    r#"{"id": "10042", "key": "PROJ-9", "fields": {"summary": "S", "status": {"name": "To Do"}}}"#;

/// What the agent is told, and what Jira said, of an error.
fn told(e: &protocol::RpcError) -> (String, Value) {
    let data = e.data.clone().unwrap_or(Value::Null);
    (
        data["agent_message"]
            .as_str()
            .unwrap_or_default()
            .to_string(),
        data["jira"].clone(),
    )
}

#[test]
fn each_refusal_tells_the_agent_what_jira_said() {
    let rt = rt();
    for (status, body, code, says) in [
        (401, "", protocol::Code::Unauthorized, "answered 401: the connection's credentials were refused"),
        (403, r#"{"errorMessages":["You do not have permission to see this issue."],"errors":{}}"#,
         protocol::Code::Unauthorized, "answered 403: the connection's account lacks the permission for this (browse, comment or transition) (You do not have permission to see this issue.)"),
        (404, r#"{"errorMessages":["Issue does not exist or you do not have permission to see it."],"errors":{}}"#,
         protocol::Code::NotFound, "Jira GET /rest/api/3/issue/NOPE-99 answered 404: no such issue, or the account cannot see it (Issue does not exist or you do not have permission to see it.)"),
    ] {
        let (url, _) = scripted(vec![(status, String::new(), body.to_string())]);
        let client = basic(&url).without_backoff();
        let e = rt.block_on(ops::read_issue(&client, "NOPE-99")).unwrap_err();
        assert!(e.is(code), "{status}: {e:?}");
        let (agent, jira) = told(&e);
        assert!(agent.contains(says), "{status}: {agent}");
        assert_eq!(jira["status"], status);
        assert!(!format!("{e:?}").contains(TOKEN));
    }
}

#[test]
fn a_short_retry_after_is_waited_out_and_a_long_one_is_the_error_with_when_to_retry() {
    let rt = rt();
    // 429 with Retry-After: 1, then the issue: waited out, sent again once.
    let (url, seen) = scripted(vec![
        (
            429,
            "Retry-After: 1\r\nRateLimit-Reason: jira-burst-based\r\n".into(),
            String::new(),
        ),
        (200, String::new(), ISSUE.into()),
    ]);
    let client = basic(&url).without_backoff();
    let v = rt
        .block_on(client.call("GET", "/rest/api/3/issue/PROJ-9".into(), None))
        .unwrap();
    assert_eq!(v["key"], "PROJ-9");
    assert_eq!(seen.lock().unwrap().len(), 2);

    // Still limited after the retry: the error, after two requests.
    let (url, seen) = scripted(vec![(429, "Retry-After: 1\r\n".into(), String::new())]);
    let e = rt
        .block_on(basic(&url).without_backoff().call(
            "POST",
            "/rest/api/3/issue/PROJ-9/comment".into(),
            Some(json!({})),
        ))
        .unwrap_err();
    assert!(e.is(protocol::Code::Unavailable), "{e:?}");
    assert!(
        e.message.contains("still rate limited after 1 retry"),
        "{}",
        e.message
    );
    assert_eq!(seen.lock().unwrap().len(), 2);

    // No Retry-After, a reset in an hour (Jira's minute form) and a reason: not
    // waited, the error says when and why.
    let reset = protocol::time::now_ms() / 60_000 * 60_000 + 3_600_000;
    let reset_text = protocol::time::format_rfc3339_ms(reset);
    let minutes = format!("{}Z", &reset_text[..16]);
    let (url, seen) = scripted(vec![(
        429,
        format!("X-RateLimit-Reset: {minutes}\r\nRateLimit-Reason: jira-quota-tenant-based\r\n"),
        String::new(),
    )]);
    let client = basic(&url).without_backoff();
    let e = rt
        .block_on(ops::comment(&client, "PROJ-9", "hi"))
        .unwrap_err();
    assert_eq!(seen.lock().unwrap().len(), 1, "not sent again");
    let (agent, jira) = told(&e);
    let after = oc_jira::api::retry_after_s(&e).unwrap();
    assert!((3500..=3600).contains(&after), "{after}");
    assert_eq!(jira["retry_after_s"], after);
    assert_eq!(jira["reset_at"], reset_text.as_str());
    assert_eq!(jira["reason"], "jira-quota-tenant-based");
    assert_eq!(e.data.as_ref().unwrap()["reset_at"], reset_text.as_str());
    assert!(agent.contains("answered 429: Jira's rate limit was hit (RateLimit-Reason jira-quota-tenant-based); the limit resets in"), "{agent}");
    assert!(agent.contains(&reset_text), "{agent}");

    // The projector's client (holds honoured) does not ask Jira until the reset;
    // the agent's does.
    let e = rt
        .block_on(basic(&url).call("GET", "/rest/api/3/issue/PROJ-9".into(), None))
        .unwrap_err();
    assert!(e.message.contains("not asked again for"), "{}", e.message);
    assert_eq!(seen.lock().unwrap().len(), 1);
    let _ = rt.block_on(client.call("GET", "/rest/api/3/issue/PROJ-9".into(), None));
    assert_eq!(seen.lock().unwrap().len(), 2);
}

#[test]
fn after_refused_credentials_the_projector_does_not_ask_again_and_the_check_names_the_401() {
    let rt = rt();
    let (url, seen) = scripted(vec![(401, String::new(), String::new())]);
    for _ in 0..3 {
        let e = rt
            .block_on(basic(&url).call(
                "PUT",
                "/rest/api/3/issue/PROJ-9/comment/1".into(),
                Some(json!({})),
            ))
            .unwrap_err();
        assert!(e.message.contains("answered 401"), "{}", e.message);
    }
    assert_eq!(seen.lock().unwrap().len(), 1, "one refusal, then held back");
    let e = rt
        .block_on(
            basic(&url)
                .without_backoff()
                .call("GET", oc_jira::check::MYSELF.into(), None),
        )
        .unwrap_err();
    assert_eq!(seen.lock().unwrap().len(), 2);
    let (fail, line) = oc_jira::check::line("jc", Some(Err(e.message)));
    assert!(fail);
    assert!(line.starts_with("connection jc: Jira GET /rest/api/3/myself answered 401: the connection's credentials were refused"), "{line}");
    assert!(!line.contains(TOKEN));
    let (fail, line) = oc_jira::check::line(
        "jc",
        Some(Ok(json!({"accountId": "5b10a", "displayName": "Agent"}))),
    );
    assert!(!fail);
    assert_eq!(
        line,
        "connection jc: the credentials are Agent (account 5b10a)"
    );
}

// ---- the real extension process ----------------------------------------------------

mod process {
    use super::*;
    use protocol::wire::{
        Authority, Call, ConfigureParams, Connection, Entry, Event, HostInfo, InitializeParams,
        KvCommitParams, KvCommitResult, KvGetParams, KvGetResult, OperationCallParams,
        OperationCallResult, Route, RouteMatchParams, RouteMatchResult, SecretResolveParams,
        SecretResolveResult, StateEventsResult, StateWorkEventsParams, WebhookHandleParams,
        WebhookHandleResult,
    };
    use protocol::{connect, FnHandler, Options, RpcError};
    use std::collections::{BTreeMap, HashMap};

    const EXE: &str = env!("CARGO_BIN_EXE_oc-jira-extension");
    const ASSIGNED: &[u8] = include_bytes!("fixtures/issue-updated-issue-assigned.json");
    const AGENT: &str = "5b912e21fa38ae2c896099ae";
    const SECRET: &str = "whsec-jira-7d2e";

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
    }

    fn serve(host: &Host, request: &protocol::Request) -> Result<Value, RpcError> {
        let m = request.method.as_str();
        if m == <SecretResolveParams as Call>::METHOD {
            let params: SecretResolveParams = request.params()?;
            let mut result = SecretResolveResult::default();
            for name in params.names {
                let value = match name.as_str() {
                    "webhook_secret" => SECRET,
                    "api_token" => TOKEN,
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
    async fn the_extension_takes_a_signed_assignment_and_comments_and_moves_the_issue_once() {
        let Some(p) = prism_or_skip() else { return };
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
        let peer = connect(stdout, stdin, handler, Options::named("extension jira"));
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
            serde_json::from_str::<Value>(oc_jira::MANIFEST).unwrap()
        );

        let configured = within(peer.call_typed(&ConfigureParams {
            entries: vec![Entry {
                scope_id: "s1".into(),
                entry_type: "jira".into(),
                name: "tracker".into(),
                connection: "jc".into(),
                config: json!({"projects": ["INDEV"], "agent_account_id": AGENT}),
                ..Default::default()
            }],
            connections: vec![Connection {
                name: "jc".into(),
                connection_type: "jira".into(),
                config: json!({"base_url": p.url, "email": "agent@example.com"}),
                secrets: vec!["api_token".into(), "webhook_secret".into()],
            }],
            ..Default::default()
        }))
        .await
        .unwrap();
        assert_eq!(configured.webhooks[0].path, "/jira/s1/tracker");

        let mut headers = BTreeMap::new();
        headers.insert(
            "X-Hub-Signature".to_string(),
            vec![oc_jira::signature::sign(SECRET.as_bytes(), ASSIGNED)],
        );
        headers.insert(
            "X-Atlassian-Webhook-Identifier".to_string(),
            vec!["d-1".to_string()],
        );
        let mut params = WebhookHandleParams {
            method: "POST".into(),
            path: "/jira/s1/tracker".into(),
            headers,
            body: ASSIGNED.to_vec(),
            ..Default::default()
        };
        let r: WebhookHandleResult = within(peer.call_typed(&params)).await.unwrap();
        assert_eq!(r.response.status, 200);
        let delivery = r.deliveries[0].clone();
        // The change's identity (the intake's, issue 43), not the header's.
        assert_eq!(delivery.delivery_id, "issue/19435/changelog/76941");
        params.headers.insert(
            "X-Hub-Signature".to_string(),
            vec![oc_jira::signature::sign(b"wrong", ASSIGNED)],
        );
        let refused: WebhookHandleResult = within(peer.call_typed(&params)).await.unwrap();
        assert_eq!(refused.response.status, 401);
        assert!(refused.deliveries.is_empty());

        let e = &delivery.events[0];
        let event = Event {
            id: "ev-1".into(),
            sequence: 1,
            event_type: e.event_type.clone(),
            source: delivery.source.clone(),
            delivery_id: delivery.delivery_id.clone(),
            scope_id: "s1".into(),
            keys: e.keys.clone(),
            payload: e.payload.clone(),
            ..Default::default()
        };
        let matched: RouteMatchResult = within(peer.call_typed(&RouteMatchParams {
            handler: "jira".into(),
            route: Route {
                handler: "jira".into(),
                binding: "agent".into(),
                config: Value::Null,
            },
            event: event.clone(),
            ..Default::default()
        }))
        .await
        .unwrap();
        assert!(matched.matched, "{}", matched.reason);
        let display = matched.display.unwrap();
        assert_eq!(
            (
                display.title.as_str(),
                display.reference.as_str(),
                display.requester.as_str()
            ),
            ("Тестовая задача", "INDEV-242", "jira_test")
        );
        host.events.lock().unwrap().push(event);

        let authority = Authority {
            scope_id: "s1".into(),
            work_id: "w1".into(),
            binding: "agent".into(),
            connection: "jc".into(),
            ..Default::default()
        };
        let comment = OperationCallParams {
            operation: "jira.comment".into(),
            request_id: "req-1".into(),
            authority: authority.clone(),
            input: json!({"text": "On it.\n\n- reproduce\n- fix"}),
        };
        let posts = || {
            seen()
                .lock()
                .unwrap()
                .iter()
                .filter(|l| l.starts_with("POST /rest/api/3/issue/INDEV-242/comment"))
                .count()
        };
        let first: OperationCallResult = within(peer.call_typed(&comment)).await.unwrap();
        assert_eq!(first.output["comment_id"], "10001");
        let again: OperationCallResult = within(peer.call_typed(&comment)).await.unwrap();
        assert_eq!(again.output, first.output);
        assert_eq!(posts(), 1, "a repeated request_id posts once");
        let moved: OperationCallResult = within(peer.call_typed(&OperationCallParams {
            operation: "jira.transition".into(),
            request_id: "req-2".into(),
            authority,
            input: json!({"to": "In Progress"}),
        }))
        .await
        .unwrap();
        assert_eq!(moved.output["transition"], "Start Progress");

        drop(peer);
        let _ = child.kill().await;
        let log = within(log).await.unwrap();
        assert!(
            !log.contains(TOKEN) && !log.contains(SECRET),
            "a secret in the log: {log}"
        );
    }
}
