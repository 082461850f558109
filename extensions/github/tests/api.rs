//! The GitHub API client against GitHub's own API description (Prism in mock
//! mode with `--errors`, over `@octokit/openapi`, from tests/github-api), and
//! against a stand-in server of ours for what Prism cannot script (pagination,
//! ETags, rate limits, App tokens).
//!
//! Without node or the npm packages (`npm ci --prefix tests/github-api`), the
//! Prism tests print SKIPPED and pass, unless OC_REQUIRE_PEERS=1.

#![allow(clippy::unwrap_used)]

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

mod common;

use common::prism::{prism, required, Prism};
use oc_github::api::{Client, Credentials, ACCEPT, API_VERSION, MAX_BODY_BYTES};
use oc_github::app::AppCredentials;
use protocol::Code;
use serde_json::{json, Value};

// ---------------------------------------------------------------------------
// Prism
// ---------------------------------------------------------------------------

/// Prism, or `None` after printing SKIPPED (a failure under OC_REQUIRE_PEERS=1).
fn prism_or_skip(test: &str) -> Option<&'static Prism> {
    match prism() {
        Ok(p) => Some(p),
        Err(why) => {
            assert!(
                !required(),
                "{test}: no Prism under OC_REQUIRE_PEERS=1: {why}"
            );
            eprintln!("SKIPPED {test}: {why}");
            None
        }
    }
}

fn token_client(url: &str) -> Client {
    Client::new(url, Credentials::Token("test-token".into())).unwrap()
}

/// A client that asks Prism to generate its answers from the schema: some of
/// the description's own examples (a pull request's, an issue's wrapped in
/// `value`) do not fit it.
fn dynamic_client(url: &str) -> Client {
    Client::build(
        url,
        Credentials::Token("test-token".into()),
        vec![("Prefer".into(), "dynamic=true".into())],
        Duration::from_secs(1),
    )
    .unwrap()
}

#[test]
fn prism_reads_an_issue_and_its_comments() {
    let Some(prism) = prism_or_skip("prism_reads_an_issue_and_its_comments") else {
        return;
    };
    let client = dynamic_client(&prism.url);
    let issue = client
        .request_blocking("GET", "/repos/octocat/hello-world/issues/1347", None)
        .unwrap();
    assert!(issue["number"].is_number(), "{issue}");
    assert!(issue["title"].is_string(), "{issue}");
    let (comments, truncated) = token_client(&prism.url)
        .get_all_blocking(
            "/repos/octocat/hello-world/issues/1347/comments?per_page=100",
            10,
        )
        .unwrap();
    assert!(!comments.is_empty());
    assert!(comments[0]["id"].is_u64());
    // Prism's example Link points at https://api.github.com, outside the
    // client's api_url: not followed (the token stays with the api_url).
    assert!(truncated);
}

#[test]
fn prism_takes_a_comment_labels_an_edit_and_a_pull_request() {
    let Some(prism) = prism_or_skip("prism_takes_a_comment_labels_an_edit_and_a_pull_request")
    else {
        return;
    };
    let client = token_client(&prism.url);
    let comment = client
        .request_blocking(
            "POST",
            "/repos/octocat/hello-world/issues/1347/comments",
            Some(&json!({"body": "Me too"})),
        )
        .unwrap();
    assert!(comment["id"].is_u64(), "{comment}");
    let labels = client
        .request_blocking(
            "POST",
            "/repos/octocat/hello-world/issues/1347/labels",
            Some(&json!({"labels": ["bug", "enhancement"]})),
        )
        .unwrap();
    assert!(labels.is_array(), "{labels}");
    let edited = client
        .request_blocking(
            "PATCH",
            "/repos/octocat/hello-world/issues/comments/1",
            Some(&json!({"body": "Me too, edited"})),
        )
        .unwrap();
    assert!(edited["id"].is_u64());
    // The description's own example of a pull request does not validate against
    // its schema, so Prism is asked to generate one from the schema instead.
    let pr = dynamic_client(&prism.url)
        .request_blocking(
            "POST",
            "/repos/octocat/hello-world/pulls",
            Some(&json!({"head": "octocat:new-feature", "base": "master", "title": "Amazing new feature", "body": "Please pull these awesome changes in!"})),
        )
        .unwrap();
    assert!(pr["number"].is_number(), "{pr}");
}

#[test]
fn prism_refuses_a_malformed_request_as_invalid_with_githubs_error_shape() {
    let Some(prism) = prism_or_skip("prism_refuses_a_malformed_request") else {
        return;
    };
    let client = token_client(&prism.url);
    let err = client
        .request_blocking(
            "POST",
            "/repos/octocat/hello-world/issues/1347/comments",
            Some(&json!({"text": "no body"})),
        )
        .unwrap_err();
    assert_eq!(err.code, Code::Invalid, "{err}");
    assert_eq!(err.status, Some(422));
    assert!(err.documentation_url.is_some(), "{err:?}");
    assert!(err.errors.as_ref().is_some_and(Value::is_array), "{err:?}");
    let rpc = err.to_rpc();
    assert_eq!(rpc.app_code(), Some("invalid"));
    assert_eq!(rpc.data.as_ref().unwrap()["github"]["status"], 422);
    // What the agent is told: GitHub's status, message, documentation URL and
    // field errors, bounded.
    let told = rpc.data.as_ref().unwrap()["agent_message"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(told.starts_with("GitHub answered 422: "), "{told}");
    assert!(told.contains("(see "), "{told}");
    assert!(told.contains("errors: "), "{told}");
    assert!(told.len() <= protocol::toolbelt::MAX_AGENT_MESSAGE_BYTES);
}

#[test]
fn the_operations_run_against_prism() {
    let Some(prism) = prism_or_skip("the_operations_run_against_prism") else {
        return;
    };
    let client = dynamic_client(&prism.url);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let work = oc_github::ops::WorkRef {
        repository: Some("octocat/Hello-World".into()),
        number: Some(1347),
    };
    let target = oc_github::ops::target(&json!({}), &work, &[]).unwrap();
    let read = rt
        .block_on(oc_github::ops::run(
            &client,
            "github.read_issue",
            &json!({}),
            &target,
        ))
        .unwrap();
    assert!(read["title"].is_string(), "{read}");
    assert!(read["comments"].is_array(), "{read}");
    let out = rt
        .block_on(oc_github::ops::run(
            &client,
            "github.comment",
            &json!({"body": "hello"}),
            &target,
        ))
        .unwrap();
    assert!(out["comment"]["id"].is_number(), "{out}");
    let out = rt
        .block_on(oc_github::ops::run(
            &client,
            "github.add_labels",
            &json!({"labels": ["bug"]}),
            &target,
        ))
        .unwrap();
    assert!(out["labels"].is_array(), "{out}");
    let pr = rt
        .block_on(oc_github::ops::run(
            &client,
            "github.open_pull_request",
            &json!({"head": "fix-1347", "base": "main", "title": "Fix the bug", "body": "Fixes #1347"}),
            &target,
        ))
        .unwrap();
    assert!(pr["number"].is_number(), "{pr}");
    let log = prism.log.lock().unwrap();
    assert!(
        log.iter()
            .any(|l| l.contains("/repos/octocat/Hello-World/pulls")),
        "Prism saw the POST"
    );
}

/// A recorded payload (tests/fixtures) as the accepted Event of `family`.
fn fixture_event(family: oc_github::Family, path: &str) -> protocol::wire::Event {
    let body = std::fs::read(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(path)).unwrap();
    let e = oc_github::project::project(family, "d-1", &serde_json::from_slice(&body).unwrap())
        .unwrap();
    protocol::wire::Event {
        id: "ev-1".into(),
        event_type: e.event_type,
        scope_id: "s1".into(),
        keys: e.keys,
        payload: e.payload,
        ..Default::default()
    }
}

#[test]
fn prism_serves_what_rendering_and_wait_planning_read() {
    use oc_github::{render, Family};
    let Some(prism) = prism_or_skip("prism_serves_what_rendering_and_wait_planning_read") else {
        return;
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let client = token_client(&prism.url);

    // A review's comments with their diff hunks (the description's example).
    let review = fixture_event(
        Family::PullRequestReview,
        "tests/fixtures/pull_request_review.submitted.json",
    );
    let extra = rt.block_on(render::gather(&client, Family::PullRequestReview, &review));
    assert!(extra.notes.is_empty(), "{:?}", extra.notes);
    let comments = extra.review_comments.clone().unwrap();
    assert!(!comments.is_empty());
    let hunk = comments[0]["diff_hunk"].as_str().unwrap().to_string();
    let text = render::markdown(Family::PullRequestReview, &review, &extra);
    assert!(text.contains("### Review comments ("), "{text}");
    assert!(text.contains(&format!("```diff\n{hunk}\n```")), "{text}");

    // A failed check run's output.
    let run = fixture_event(
        Family::CheckRun,
        "tests/fixtures/octokit/check_run.completed.1.json",
    );
    let extra = rt.block_on(render::gather(&client, Family::CheckRun, &run));
    assert!(extra.notes.is_empty(), "{:?}", extra.notes);
    let text = render::markdown(Family::CheckRun, &run, &extra);
    let title = extra.check_run.as_ref().unwrap()["output"]["title"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(text.contains(&format!("**{title}**")), "{text}");

    // A comment's conversation: the issue's count, then its last page (Prism makes
    // both up from the schema).
    let comment = fixture_event(
        Family::IssueComment,
        "tests/fixtures/issue_comment.created.json",
    );
    let extra = rt.block_on(render::gather(
        &dynamic_client(&prism.url),
        Family::IssueComment,
        &comment,
    ));
    assert!(extra.notes.is_empty(), "{:?}", extra.notes);
    assert!(extra.thread.unwrap().len() <= render::MAX_THREAD_COMMENTS);

    // What github.wait's planning reads: the head commit's check runs and the
    // connection's own login.
    let (runs, _) = rt
        .block_on(client.get_all_in(
            "/repos/Codertocat/Hello-World/commits/ec26c3e57ca3a959ca5aad62de7213c562f8c821/check-runs?per_page=100",
            "check_runs",
            1,
        ))
        .unwrap();
    assert!(!runs.is_empty());
    let (pending, _) = oc_github::waits::pending_checks(&runs);
    assert!(pending.len() <= runs.len());
    let login = rt.block_on(client.acting_login()).unwrap();
    assert!(!login.is_empty());

    let log = prism.log.lock().unwrap();
    for path in [
        "/repos/Codertocat/Hello-World/pulls/2/reviews/237895671/comments",
        "/repos/Codertocat/Hello-World/check-runs/128620228",
        "/repos/Codertocat/Hello-World/issues/1",
        "/user",
    ] {
        assert!(log.iter().any(|l| l.contains(path)), "Prism saw {path}");
    }
}

// ---------------------------------------------------------------------------
// The stand-in server
// ---------------------------------------------------------------------------

/// A request as the stand-in saw it.
#[derive(Debug, Clone)]
struct Seen {
    method: String,
    target: String,
    headers: HashMap<String, String>,
    body: Vec<u8>,
}

impl Seen {
    fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or(Value::Null)
    }
}

struct Answer {
    status: u16,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

fn answer(status: u16, body: Value) -> Answer {
    Answer {
        status,
        headers: vec![("Content-Type".into(), "application/json".into())],
        body: body.to_string().into_bytes(),
    }
}

impl Answer {
    fn header(mut self, n: &str, v: &str) -> Self {
        self.headers.push((n.into(), v.into()));
        self
    }
}

struct StandIn {
    url: String,
    seen: Arc<Mutex<Vec<Seen>>>,
}

/// A one-connection-at-a-time HTTP/1.1 server answering with `f`.
fn stand_in(f: impl Fn(&Seen, usize) -> Answer + Send + 'static) -> StandIn {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = seen.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(stream) = stream else { break };
            let Some(req) = read_request(&stream) else {
                continue;
            };
            let n = {
                let mut l = log.lock().unwrap();
                l.push(req.clone());
                l.len()
            };
            let a = f(&req, n);
            write_answer(stream, a);
        }
    });
    StandIn { url, seen }
}

fn read_request(stream: &TcpStream) -> Option<Seen> {
    let mut reader = BufReader::new(stream);
    let mut line = String::new();
    reader.read_line(&mut line).ok()?;
    let mut parts = line.split_whitespace();
    let method = parts.next()?.to_string();
    let target = parts.next()?.to_string();
    let mut headers = HashMap::new();
    loop {
        let mut h = String::new();
        reader.read_line(&mut h).ok()?;
        let h = h.trim_end();
        if h.is_empty() {
            break;
        }
        let (n, v) = h.split_once(':')?;
        headers.insert(n.trim().to_ascii_lowercase(), v.trim().to_string());
    }
    let len: usize = headers
        .get("content-length")
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let mut body = vec![0; len];
    reader.read_exact(&mut body).ok()?;
    Some(Seen {
        method,
        target,
        headers,
        body,
    })
}

fn write_answer(mut stream: TcpStream, a: Answer) {
    let mut head = format!(
        "HTTP/1.1 {} X\r\nContent-Length: {}\r\nConnection: close\r\n",
        a.status,
        a.body.len()
    );
    for (n, v) in &a.headers {
        head.push_str(&format!("{n}: {v}\r\n"));
    }
    head.push_str("\r\n");
    let _ = stream.write_all(head.as_bytes());
    let _ = stream.write_all(&a.body);
}

/// An issue comment as the OpenAPI description shows one.
fn comment(id: u64) -> Value {
    json!({"id": id, "node_id": "MDEyOklzc3VlQ29tbWVudDE=", "body": format!("comment {id}"),
           "user": {"login": "octocat", "id": 1}, "html_url": format!("https://github.com/octocat/Hello-World/issues/1347#issuecomment-{id}"),
           "created_at": "2011-04-14T16:00:49Z", "updated_at": "2011-04-14T16:00:49Z",
           "author_association": "COLLABORATOR"})
}

#[test]
fn requests_carry_githubs_headers_and_the_token() {
    let s = stand_in(|_, _| answer(200, json!({"ok": true})));
    token_client(&s.url)
        .request_blocking("GET", "/repos/o/r", None)
        .unwrap();
    let seen = s.seen.lock().unwrap();
    let h = &seen[0].headers;
    assert_eq!(h["accept"], ACCEPT);
    assert_eq!(h["x-github-api-version"], API_VERSION);
    assert!(h["user-agent"].starts_with("open-conduit-github/"));
    assert_eq!(h["authorization"], "Bearer test-token");
}

#[test]
fn pagination_follows_link_next_over_three_pages_up_to_the_cap() {
    let s = stand_in(|req, _| {
        let page: u64 = req
            .target
            .rsplit_once("&page=")
            .and_then(|(_, p)| p.parse().ok())
            .unwrap_or(1);
        let host = req.headers["host"].clone();
        let mut a = answer(200, json!([comment(page * 10), comment(page * 10 + 1)]));
        if page < 3 {
            a = a.header(
                "Link",
                &format!(
                    "<http://{host}/repos/o/r/issues/1/comments?per_page=2&page={}>; rel=\"next\", <http://{host}/repos/o/r/issues/1/comments?per_page=2&page=3>; rel=\"last\"",
                    page + 1
                ),
            );
        }
        a
    });
    let client = token_client(&s.url);
    let (items, truncated) = client
        .get_all_blocking("/repos/o/r/issues/1/comments?per_page=2", 10)
        .unwrap();
    let ids: Vec<u64> = items.iter().map(|c| c["id"].as_u64().unwrap()).collect();
    assert_eq!(ids, vec![10, 11, 20, 21, 30, 31]);
    assert!(!truncated);
    assert_eq!(s.seen.lock().unwrap().len(), 3);
    let (items, truncated) = client
        .get_all_blocking("/repos/o/r/issues/1/comments?per_page=2&page=1", 2)
        .unwrap();
    assert_eq!(items.len(), 4);
    assert!(truncated, "the page cap leaves the third page unread");
}

#[test]
fn a_304_answers_the_cached_body() {
    let s = stand_in(|req, _| {
        if req.headers.get("if-none-match").map(String::as_str) == Some("\"v1\"") {
            Answer {
                status: 304,
                headers: vec![("ETag".into(), "\"v1\"".into())],
                body: Vec::new(),
            }
        } else {
            answer(200, json!({"number": 1, "title": "Found a bug"})).header("ETag", "\"v1\"")
        }
    });
    let client = token_client(&s.url);
    let first = client
        .request_blocking("GET", "/repos/o/r/issues/1", None)
        .unwrap();
    let second = client
        .request_blocking("GET", "/repos/o/r/issues/1", None)
        .unwrap();
    assert_eq!(first, second);
    let seen = s.seen.lock().unwrap();
    assert_eq!(seen.len(), 2);
    assert!(!seen[0].headers.contains_key("if-none-match"));
    assert_eq!(seen[1].headers["if-none-match"], "\"v1\"");
}

#[test]
fn errors_carry_githubs_message_and_their_codes() {
    let s = stand_in(|req, _| match req.target.as_str() {
        "/401" => answer(
            401,
            json!({"message": "Bad credentials", "documentation_url": "https://docs.github.com/rest"}),
        ),
        "/403" => answer(
            403,
            json!({"message": "Resource not accessible by integration", "documentation_url": "https://docs.github.com/rest/issues/comments#create-an-issue-comment"}),
        ),
        "/404" => answer(
            404,
            json!({"message": "Not Found", "documentation_url": "https://docs.github.com/rest"}),
        ),
        "/409" => answer(409, json!({"message": "Conflict"})),
        "/500" => answer(500, json!({})),
        _ => answer(200, json!({})),
    });
    let client = token_client(&s.url);
    let e = client.request_blocking("GET", "/401", None).unwrap_err();
    assert_eq!((e.code, e.status), (Code::Unauthorized, Some(401)));
    assert_eq!(
        e.to_rpc().data.unwrap()["agent_message"],
        "GitHub answered 401: Bad credentials (see https://docs.github.com/rest)"
    );
    assert_eq!(e.message, "Bad credentials");
    assert_eq!(
        e.documentation_url.as_deref(),
        Some("https://docs.github.com/rest")
    );
    let e = client
        .request_blocking("POST", "/403", Some(&json!({})))
        .unwrap_err();
    assert_eq!((e.code, e.status), (Code::Unauthorized, Some(403)));
    assert!(e
        .to_string()
        .contains("Resource not accessible by integration"));
    let e = client.request_blocking("GET", "/404", None).unwrap_err();
    assert_eq!(e.code, Code::NotFound);
    let e = client.request_blocking("GET", "/409", None).unwrap_err();
    assert_eq!(e.code, Code::Conflict);
    let e = client.request_blocking("GET", "/500", None).unwrap_err();
    assert_eq!((e.code, e.status), (Code::Unavailable, Some(500)));
}

#[test]
fn the_primary_rate_limit_fails_unavailable_naming_the_reset() {
    let reset = protocol::time::now_ms() / 1000 + 3600;
    let s = stand_in(move |_, _| {
        answer(403, json!({"message": "API rate limit exceeded for user ID 1.", "documentation_url": "https://docs.github.com/rest/overview/resources-in-the-rest-api#rate-limiting"}))
            .header("X-RateLimit-Limit", "5000")
            .header("X-RateLimit-Remaining", "0")
            .header("X-RateLimit-Reset", &reset.to_string())
    });
    let e = token_client(&s.url)
        .request_blocking("GET", "/repos/o/r/issues/1", None)
        .unwrap_err();
    assert_eq!(e.code, Code::Unavailable);
    let want = protocol::time::format_rfc3339_ms(reset * 1000);
    assert_eq!(e.reset_at.as_deref(), Some(want.as_str()));
    assert!(e.to_string().contains(&want), "{e}");
    assert_eq!(e.to_rpc().data.unwrap()["github"]["reset_at"], want);
    // The agent is told when to retry, and GitHub's message.
    let told = e.to_rpc().data.unwrap()["agent_message"].clone();
    let told = told.as_str().unwrap();
    assert!(told.contains(&format!("retry after {want}")), "{told}");
    assert!(told.contains("API rate limit exceeded"), "{told}");
    assert_eq!(s.seen.lock().unwrap().len(), 1, "an hour is not waited");
}

#[test]
fn a_short_retry_after_is_waited_once_and_a_long_one_fails() {
    let s = stand_in(|req, n| match (req.target.as_str(), n) {
        ("/short", 1) => answer(
            403,
            json!({"message": "You have exceeded a secondary rate limit."}),
        )
        .header("Retry-After", "1"),
        ("/long", _) => answer(
            429,
            json!({"message": "You have exceeded a secondary rate limit."}),
        )
        .header("Retry-After", "120"),
        _ => answer(201, comment(1)),
    });
    let client = token_client(&s.url);
    let ok = client
        .request_blocking("POST", "/short", Some(&json!({"body": "x"})))
        .unwrap();
    assert_eq!(ok["id"], 1);
    let seen = s.seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 2);
    assert_eq!(
        seen[1].json(),
        json!({"body": "x"}),
        "the retry sends the same body"
    );
    let e = client
        .request_blocking("POST", "/long", Some(&json!({})))
        .unwrap_err();
    assert_eq!(e.code, Code::Unavailable);
    assert!(e.reset_at.is_some());
    assert_eq!(s.seen.lock().unwrap().len(), 3, "120 s is not waited");
}

#[test]
fn a_body_over_the_bound_is_refused_naming_it() {
    let big = vec![b' '; usize::try_from(MAX_BODY_BYTES).unwrap() + 10];
    let s = stand_in(move |_, _| Answer {
        status: 200,
        headers: vec![],
        body: big.clone(),
    });
    let e = token_client(&s.url)
        .request_blocking("GET", "/big", None)
        .unwrap_err();
    assert!(e.message.contains(&MAX_BODY_BYTES.to_string()), "{e}");
}

#[test]
fn a_next_link_outside_the_api_url_is_not_followed() {
    let s = stand_in(|_, _| {
        answer(200, json!([comment(1)]))
            .header("Link", "<https://elsewhere.example/x?page=2>; rel=\"next\"")
    });
    let (items, truncated) = token_client(&s.url).get_all_blocking("/list", 10).unwrap();
    assert_eq!(items.len(), 1);
    assert!(truncated);
    assert_eq!(s.seen.lock().unwrap().len(), 1);
}

// ---------------------------------------------------------------------------
// GitHub App
// ---------------------------------------------------------------------------

fn generate_key() -> Option<String> {
    let out = Command::new("openssl")
        .args(["genrsa", "-traditional", "2048"])
        .stderr(Stdio::null())
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
}

fn b64url_decode(s: &str) -> Vec<u8> {
    base64_simd::URL_SAFE_NO_PAD.decode_to_vec(s).unwrap()
}

#[test]
fn an_app_signs_a_verifiable_jwt_and_caches_its_installation_token_until_near_expiry() {
    let Some(pem) = generate_key() else {
        assert!(!required(), "openssl is needed under OC_REQUIRE_PEERS=1");
        eprintln!("SKIPPED: openssl genrsa failed");
        return;
    };
    let app = Arc::new(AppCredentials::new("12345", 42, &pem).unwrap());
    let public = app.public_key_der();
    let tokens = Arc::new(Mutex::new(0u32));
    let minted = tokens.clone();
    let s = stand_in(move |req, _| {
        if req.target == "/app/installations/42/access_tokens" {
            assert_eq!(req.method, "POST");
            let jwt = req.headers["authorization"]
                .strip_prefix("Bearer ")
                .unwrap();
            let parts: Vec<&str> = jwt.split('.').collect();
            assert_eq!(parts.len(), 3);
            let header: Value = serde_json::from_slice(&b64url_decode(parts[0])).unwrap();
            assert_eq!(header["alg"], "RS256");
            let claims: Value = serde_json::from_slice(&b64url_decode(parts[1])).unwrap();
            assert_eq!(claims["iss"], "12345");
            let (iat, exp) = (
                claims["iat"].as_i64().unwrap(),
                claims["exp"].as_i64().unwrap(),
            );
            assert!(
                exp > iat && exp - iat <= 600,
                "GitHub takes at most ten minutes"
            );
            ring::signature::UnparsedPublicKey::new(
                &ring::signature::RSA_PKCS1_2048_8192_SHA256,
                &public,
            )
            .verify(
                format!("{}.{}", parts[0], parts[1]).as_bytes(),
                &b64url_decode(parts[2]),
            )
            .expect("the JWT's RS256 signature verifies with the App's public key");
            let mut n = minted.lock().unwrap();
            *n += 1;
            // The first token expires within the refresh margin; the second in an hour.
            let ttl_s = if *n == 1 { 4 * 60 } else { 3600 };
            let at = protocol::time::format_rfc3339_ms(protocol::time::now_ms() + ttl_s * 1000);
            return answer(
                201,
                json!({"token": format!("ghs_{n}"), "expires_at": at, "permissions": {"issues": "write"}}),
            );
        }
        answer(200, json!({"authorization": req.headers["authorization"]}))
    });
    let client = Client::new(&s.url, Credentials::App(app)).unwrap();
    let auth = |client: &Client| {
        client
            .request_blocking("GET", "/repos/o/r/issues/1", None)
            .unwrap()["authorization"]
            .as_str()
            .unwrap()
            .to_string()
    };
    assert_eq!(auth(&client), "Bearer ghs_1");
    // ghs_1 expires within five minutes: bought again before use.
    assert_eq!(auth(&client), "Bearer ghs_2");
    // ghs_2 lasts an hour: cached.
    assert_eq!(auth(&client), "Bearer ghs_2");
    assert_eq!(auth(&client), "Bearer ghs_2");
    assert_eq!(*tokens.lock().unwrap(), 2);
}

#[test]
fn an_app_key_must_be_an_rsa_pem() {
    let e = AppCredentials::new("1", 2, "not a pem").err().unwrap();
    assert_eq!(e.code, Code::Invalid);
    let e = AppCredentials::new(
        "1",
        2,
        "-----BEGIN RSA PRIVATE KEY-----\nAAAA\n-----END RSA PRIVATE KEY-----\n",
    )
    .err()
    .unwrap();
    assert!(e.message.contains("not a usable RSA key"), "{e}");
}
