//! Reconcile: a polled change is the webhook's Event of the same change, byte for
//! byte and under the same identity (so a missed delivery is found once and a late
//! one adds nothing); a plain edit is no Event; a comment mentioning the agent is
//! one that starts Work. The payloads are Jira's own shapes: the webhook bodies of
//! tests/fixtures, and Atlassian's examples of a changelog page
//! (`fixtures/changelog.json`) and a comments page (`fixtures/comments.json`) from
//! the published description. The REST calls go through Prism as a validation
//! proxy over that description (tests/jira-api), in front of a scripted Jira.

#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use oc_jira::api::{Auth, Client};
use oc_jira::config::Registry;
use oc_jira::intake::{precheck, process};
use oc_jira::reconcile::observations;
use oc_jira::signature::sign;
use oc_jira::{poll, route};
use protocol::wire::{
    ConfigureParams, Connection, Entry, Event, IngressEvent, Observation, Route, RouteMatchParams,
    WebhookHandleParams,
};
use serde_json::{json, Value};

const ASSIGNED: &[u8] = include_bytes!("fixtures/issue-updated-issue-assigned.json");
const COMMENT: &[u8] = include_bytes!("fixtures/comment-created.json");
const CHANGELOG: &str = include_str!("fixtures/changelog.json");
const COMMENTS: &str = include_str!("fixtures/comments.json");
const AGENT: &str = "5b912e21fa38ae2c896099ae";
const SECRET: &[u8] = b"reconcile-secret";
/// The times of the scripted changes (Jira's clock).
const T_ASSIGN: &str = "2026-12-07T10:00:00.000+00:00";
const T_EDIT: &str = "2026-12-07T10:05:00.000+00:00";
const T_COMMENT: &str = "2026-12-07T10:07:00.000+00:00";

fn ms(t: &str) -> i64 {
    poll::time_ms(t).unwrap()
}

fn registry() -> Registry {
    Registry::from_params(&ConfigureParams {
        entries: vec![Entry {
            scope_id: "s1".into(),
            entry_type: "jira".into(),
            name: "tracker".into(),
            connection: "jc".into(),
            config: json!({"projects": ["INDEV"], "agent_account_id": AGENT,
                           "statuses": ["Ready for agent"], "labels": ["agent"]}),
            ..Default::default()
        }],
        connections: vec![Connection {
            name: "jc".into(),
            connection_type: "jira".into(),
            ..Default::default()
        }],
        ..Default::default()
    })
    .unwrap()
}

/// The webhook's Event of `body`, and its delivery ID.
fn delivered(body: &[u8]) -> Option<(String, IngressEvent)> {
    let reg = registry();
    let mut headers = BTreeMap::new();
    headers.insert("X-Hub-Signature".to_string(), vec![sign(SECRET, body)]);
    headers.insert(
        "X-Atlassian-Webhook-Identifier".to_string(),
        vec!["header-id-1".to_string()],
    );
    let params = WebhookHandleParams {
        method: "POST".into(),
        path: "/jira/s1/tracker".into(),
        headers,
        body: body.to_vec(),
        ..Default::default()
    };
    let mut r = process(precheck(&reg, &params).unwrap(), SECRET, &params);
    assert_eq!(r.response.status, 200);
    let d = r.deliveries.pop()?;
    Some((d.delivery_id, d.events.into_iter().next()?))
}

/// A history in the shape of Atlassian's changelog example, with `items`.
fn history(id: &str, created: &str, items: Value) -> Value {
    let mut h: Value = serde_json::from_str::<Value>(CHANGELOG).unwrap()["values"][0].clone();
    h["id"] = json!(id);
    h["created"] = json!(created);
    h["items"] = items;
    h
}

/// The assigned fixture's issue as the search answers it after the assignment
/// (history 76941) and a later summary edit (77000), with `comments`.
fn polled_issue() -> Value {
    let fixture: Value = serde_json::from_slice(ASSIGNED).unwrap();
    let f = &fixture["issue"]["fields"];
    let histories = vec![
        history(
            "76941",
            T_ASSIGN,
            json!([{"field": "assignee", "fieldtype": "jira", "fieldId": "assignee",
                    "to": AGENT, "toString": "Иванов Иван Иванович"}]),
        ),
        history(
            "77000",
            T_EDIT,
            json!([{"field": "summary", "fieldtype": "jira", "fieldId": "summary",
                    "fromString": f["summary"], "toString": "Тестовая задача (edited)"}]),
        ),
    ];
    json!({
        "id": fixture["issue"]["id"], "key": fixture["issue"]["key"],
        "fields": {
            "summary": "Тестовая задача (edited)",
            "status": {"name": f["status"]["name"]},
            "assignee": {"accountId": AGENT, "displayName": "Иванов Иван Иванович"},
            "labels": [],
            "reporter": f["reporter"], "creator": f["creator"],
            "created": "2026-12-01T09:00:00.000+00:00", "updated": T_COMMENT,
        },
        "changelog": {"startAt": 0, "maxResults": 2, "total": 2, "histories": histories},
    })
}

/// A comment by a person mentioning the agent, in the shape of Atlassian's example.
fn mention_comment() -> Value {
    let mut c: Value = serde_json::from_str::<Value>(COMMENTS).unwrap()["comments"][0].clone();
    c["id"] = json!("31039");
    c["created"] = json!(T_COMMENT);
    c["updated"] = json!(T_COMMENT);
    c["body"] = json!({"type": "doc", "version": 1, "content": [{"type": "paragraph", "content": [
        {"type": "mention", "attrs": {"id": AGENT, "text": "@Agent"}},
        {"type": "text", "text": " please take this"}]}]});
    c
}

fn same(o: &Observation, id: &str, e: &IngressEvent) {
    assert_eq!(o.delivery_id, id);
    assert_eq!(o.item, id);
    assert_eq!(o.events.len(), 1);
    let p = &o.events[0];
    // Both are snapshots of the change: storaged keeps the first of them.
    assert!(p.snapshot && e.snapshot, "{p:?} {e:?}");
    assert_eq!(
        (&p.event_type, &p.keys, &p.payload),
        (&e.event_type, &e.keys, &e.payload),
        "the poll's Event differs from the webhook's"
    );
}

#[test]
fn a_polled_assignment_is_the_webhooks_event_and_a_plain_edit_is_none() {
    let (id, webhook) = delivered(ASSIGNED).unwrap();
    assert_eq!(
        id, "issue/19435/changelog/76941",
        "identity from the change"
    );
    let entry = &registry().entries[0];
    let issue = polled_issue();
    let hs = issue["changelog"]["histories"].as_array().unwrap().clone();
    let found = observations(entry, &issue, &hs, true, &[], ms(T_ASSIGN) - 60_000);
    assert_eq!(found.len(), 1, "the summary edit is no Event: {found:#?}");
    same(&found[0], &id, &webhook);
    // The summary as it was just after the assignment, not as it is now.
    assert_eq!(
        found[0].events[0].payload.data["summary"],
        "Тестовая задача"
    );
    // Changes before the scan's start are not observed.
    assert!(observations(entry, &issue, &hs, true, &[], ms(T_ASSIGN) + 1).is_empty());
}

#[test]
fn a_polled_comment_mentioning_the_agent_is_the_webhooks_event_and_starts_work() {
    let assigned: Value = serde_json::from_slice(ASSIGNED).unwrap();
    let mut body: Value = serde_json::from_slice(COMMENT).unwrap();
    let comment = mention_comment();
    body["issue"] = assigned["issue"].clone();
    body["comment"] = comment.clone();
    let (id, webhook) = delivered(&serde_json::to_vec(&body).unwrap()).unwrap();
    assert_eq!(id, "comment/31039");
    assert_eq!(webhook.payload.data["comment"]["mentions_agent"], true);
    assert!(
        webhook.payload.data["comment"].get("text").is_none(),
        "no free text in the Event"
    );
    let entry = &registry().entries[0];
    let issue = polled_issue();
    let hs = issue["changelog"]["histories"].as_array().unwrap().clone();
    // The webhook's issue fields are those after the assignment; the comment came
    // after the edit, so here the issue's summary is the edited one.
    let mut body_now = body.clone();
    body_now["issue"]["fields"]["summary"] = json!("Тестовая задача (edited)");
    let (_, webhook_now) = delivered(&serde_json::to_vec(&body_now).unwrap()).unwrap();
    let found = observations(entry, &issue, &hs, true, &[comment], ms(T_EDIT) + 1);
    assert_eq!(found.len(), 1, "{found:#?}");
    same(&found[0], &id, &webhook_now);
    // It starts Work when none is open; a comment without the mention does not.
    let ask = |e: &IngressEvent| {
        route::match_route(&RouteMatchParams {
            handler: "jira".into(),
            route: Route::default(),
            event: Event {
                id: "e1".into(),
                event_type: e.event_type.clone(),
                keys: e.keys.clone(),
                payload: e.payload.clone(),
                ..Default::default()
            },
            work: None,
            ..Default::default()
        })
        .unwrap()
        .matched
    };
    assert!(ask(&found[0].events[0]));
    let mut plain = mention_comment();
    plain["body"]["content"][0]["content"][0] = json!({"type": "text", "text": "Agent"});
    let found = observations(entry, &issue, &hs, true, &[plain], ms(T_EDIT) + 1);
    assert_eq!(found.len(), 1);
    assert_eq!(
        found[0].events[0].payload.data["comment"]["mentions_agent"],
        false
    );
    assert!(!ask(&found[0].events[0]));
    // A comment edited since is left to its delivery (its mention may have changed).
    let mut changed = mention_comment();
    changed["updated"] = json!("2026-12-07T11:00:00.000+00:00");
    assert!(observations(entry, &issue, &hs, true, &[changed], ms(T_EDIT) + 1).is_empty());
    // The agent's own comment is no Event.
    let mut own = mention_comment();
    own["author"]["accountId"] = json!(AGENT);
    assert!(observations(entry, &issue, &hs, true, &[own], ms(T_EDIT) + 1).is_empty());
}

#[test]
fn a_created_issue_is_polled_with_its_fields_at_creation() {
    let entry = &registry().entries[0];
    let mut issue = polled_issue();
    // Created assigned to the agent, later moved to someone else.
    issue["fields"]["created"] = json!(T_ASSIGN);
    issue["fields"]["assignee"] = json!({"accountId": "someone-else"});
    let hs = vec![history(
        "77001",
        T_EDIT,
        json!([{"field": "assignee", "fieldtype": "jira", "fieldId": "assignee",
                "from": AGENT, "to": "someone-else"}]),
    )];
    let found = observations(entry, &issue, &hs, true, &[], ms(T_ASSIGN));
    assert_eq!(found.len(), 1, "{found:#?}");
    assert_eq!(found[0].delivery_id, "issue/19435/created");
    assert_eq!(found[0].events[0].event_type, "jira.issue.assigned");
    // Without all the histories the fields at creation are unknown: not observed.
    assert!(observations(entry, &issue, &hs, false, &[], ms(T_ASSIGN)).is_empty());
}

#[test]
fn jira_times_and_the_jql_are_read_and_written_as_jira_does() {
    assert_eq!(
        poll::time_ms("2019-06-13T12:51:49.131+0300"),
        poll::time_ms("2019-06-13T09:51:49.131Z")
    );
    assert_eq!(
        poll::jql(&["INDEV".into(), "OPS".into()], 7),
        "project in (\"INDEV\", \"OPS\") AND updated >= \"-7m\" ORDER BY created ASC, key ASC"
    );
}

// --- Through Prism over the published description. ---

fn required() -> bool {
    std::env::var("OC_REQUIRE_PEERS").is_ok_and(|v| v == "1")
}

fn repo_tests() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests")
}

/// A scripted Jira: the search, the changelog, the comments and one comment of
/// [`polled_issue`]. Records each request's target.
fn upstream(seen: Arc<Mutex<Vec<String>>>) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(stream) = stream else { break };
            let seen = seen.clone();
            std::thread::spawn(move || {
                let mut out = stream.try_clone().unwrap();
                let mut r = BufReader::new(stream);
                loop {
                    let mut first = String::new();
                    if r.read_line(&mut first).unwrap_or(0) == 0 {
                        return;
                    }
                    let mut len = 0usize;
                    loop {
                        let mut l = String::new();
                        if r.read_line(&mut l).unwrap_or(0) == 0 || l == "\r\n" {
                            break;
                        }
                        if let Some(v) = l.to_ascii_lowercase().strip_prefix("content-length:") {
                            len = v.trim().parse().unwrap_or(0);
                        }
                    }
                    let mut body = vec![0; len];
                    let _ = r.read_exact(&mut body);
                    let target = first.split_whitespace().nth(1).unwrap_or("").to_string();
                    seen.lock().unwrap().push(target.clone());
                    let path = target.split('?').next().unwrap_or("");
                    let issue = polled_issue();
                    let answer = if path == "/rest/api/3/search" {
                        json!({"startAt": 0, "maxResults": 50, "total": 1, "issues": [issue]})
                    } else if path.ends_with("/changelog") {
                        json!({"startAt": 0, "maxResults": 100, "total": 2, "isLast": true,
                               "values": issue["changelog"]["histories"]})
                    } else if path.ends_with("/comment") {
                        json!({"startAt": 0, "maxResults": 50, "total": 1, "comments": [mention_comment()]})
                    } else {
                        mention_comment()
                    };
                    let text = answer.to_string();
                    let head = format!(
                        "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
                        text.len()
                    );
                    if out.write_all(head.as_bytes()).is_err()
                        || out.write_all(text.as_bytes()).is_err()
                    {
                        return;
                    }
                }
            });
        }
    });
    url
}

/// Prism's log lines.
type Log = Arc<Mutex<Vec<String>>>;

/// Prism as a validation proxy in front of `upstream`: (its URL, its log).
fn prism(upstream: &str) -> Result<(String, Log), String> {
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
            "tests/github-api has no node_modules (npm ci --prefix tests/github-api)".into(),
        );
    }
    let port = TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map_err(|e| e.to_string())?
        .port();
    // The wrapper kills Prism when our end of its stdin closes (the test ends).
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
    // Kept open (and so Prism alive) until the test process ends.
    std::mem::forget(child.stdin.take());
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
        Ok(true) => Ok((format!("http://127.0.0.1:{port}"), log)),
        _ => {
            let _ = child.kill();
            Err(format!(
                "prism did not start: {}",
                log.lock().unwrap().join("\n")
            ))
        }
    }
}

#[test]
fn the_polls_requests_are_valid_against_the_published_description() {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let up = upstream(seen.clone());
    let (url, log) = match prism(&up) {
        Ok(p) => p,
        Err(why) => {
            assert!(!required(), "no Prism under OC_REQUIRE_PEERS=1: {why}");
            eprintln!("SKIPPED: {why}");
            return;
        }
    };
    let client = Client::new(
        &url,
        Auth::Basic {
            email: "agent@example.com".into(),
            token: "tok-SECRET".into(),
        },
    )
    .unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let jql = poll::jql(&["INDEV".into()], 12);
    let page = rt.block_on(poll::search(&client, &jql, 0, 50)).unwrap();
    let issue = page["issues"][0].clone();
    assert_eq!(issue["key"], "INDEV-242");
    let tail = rt
        .block_on(poll::changelog_tail(&client, "19435", 2))
        .unwrap();
    assert_eq!(tail.len(), 2);
    let comments = rt
        .block_on(poll::recent_comments(&client, "19435"))
        .unwrap();
    assert_eq!(comments.len(), 1);
    let one = rt
        .block_on(poll::comment(&client, "19435", "31039"))
        .unwrap();
    assert_eq!(one["id"], "31039");
    let found = observations(
        &registry().entries[0],
        &issue,
        &tail,
        true,
        &comments,
        ms(T_ASSIGN) - 1,
    );
    let ids: Vec<&str> = found.iter().map(|o| o.delivery_id.as_str()).collect();
    assert_eq!(ids, ["issue/19435/changelog/76941", "comment/31039"]);
    let targets = seen.lock().unwrap().clone();
    assert!(
        targets[0].starts_with("/rest/api/3/search?jql="),
        "{targets:?}"
    );
    assert!(targets[0].contains("%22INDEV%22"), "{targets:?}");
    assert!(targets[0].contains("%22-12m%22"), "{targets:?}");
    assert!(targets[0].contains("expand=changelog"), "{targets:?}");
    let violations: Vec<String> = log
        .lock()
        .unwrap()
        .iter()
        .filter(|l| l.contains("violation") || l.contains("did not pass the validation"))
        .cloned()
        .collect();
    assert!(
        violations.is_empty(),
        "Prism reported violations: {violations:?}"
    );
}

#[test]
fn the_reconcile_interval_defaults_to_300_s_and_is_bounded() {
    let sources = registry().configure_result().sources;
    assert_eq!(sources[0].reconcile_interval_s, 300);
    let parsed = oc_jira::config::parse_entry(
        &json!({"projects": ["INDEV"], "agent_account_id": AGENT, "reconcile_interval_s": 0}),
    )
    .unwrap();
    assert_eq!(parsed.reconcile_interval_s, 0);
    let e = oc_jira::config::parse_entry(
        &json!({"projects": ["INDEV"], "agent_account_id": AGENT, "reconcile_interval_s": 86_401}),
    )
    .unwrap_err();
    assert_eq!(e.pointer, "/reconcile_interval_s");
    assert!(
        e.reason.contains("MAX_RECONCILE_INTERVAL_S"),
        "{}",
        e.reason
    );
}
