//! A scripted Jira Cloud behind Prism's validation proxy over Atlassian's published
//! platform REST v3 description (tests/jira-api): every request the jira package
//! sends is checked against the description (a violation is answered 422 and shows
//! in Prism's log), and the scripted Jira answers what the operations need (an issue,
//! its comments, its transitions, a made comment, an edited comment, a made
//! transition, a made remote link, an edited issue). Each request it serves is
//! recorded. For reconcile, a test scripts
//! the issues its search answers ([`Jira::set_issues`]: each with its embedded
//! changelog, also answered by `…/changelog`) and their comments
//! ([`Jira::add_comment`], answered by `…/comment` newest first and by
//! `…/comment/{id}`).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{json, Value};

pub use crate::github::Prism;

/// The largest request body the scripted Jira reads.
const MAX_BODY: usize = 4 * 1024 * 1024;

/// Atlassian's Jira Cloud platform REST v3 description in tests/jira-api.
pub fn description_path() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("jira-api/platform-swagger.v3.json")
}

/// One request the scripted Jira served.
#[derive(Debug, Clone)]
pub struct Seen {
    /// `GET`, `POST`, …
    pub method: String,
    /// The path with its query.
    pub target: String,
    /// The body, as JSON (null when empty or not JSON).
    pub body: Value,
}

/// The scripted Jira and Prism in front of it.
pub struct Jira {
    /// Prism's URL: the connection's `base_url`.
    pub url: String,
    /// Prism.
    pub prism: Prism,
    seen: Arc<Mutex<Vec<Seen>>>,
    script: Arc<Mutex<Script>>,
}

/// What a test scripted: the searched issues, and comments by issue ID or key.
#[derive(Default)]
struct Script {
    issues: Vec<Value>,
    comments: Vec<(String, Value)>,
}

impl Jira {
    /// Start the scripted Jira and Prism over the description in front of it; `Err`
    /// says why Prism cannot run.
    pub fn start() -> Result<Jira, String> {
        let listener = TcpListener::bind("127.0.0.1:0").map_err(|e| e.to_string())?;
        let upstream = format!(
            "http://{}",
            listener.local_addr().map_err(|e| e.to_string())?
        );
        let seen: Arc<Mutex<Vec<Seen>>> = Arc::default();
        let script: Arc<Mutex<Script>> = Arc::default();
        let record = seen.clone();
        let scripted = script.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else { break };
                let record = record.clone();
                let scripted = scripted.clone();
                std::thread::spawn(move || serve(stream, &record, &scripted));
            }
        });
        let prism = crate::github::start_prism_proxy(&description_path(), &upstream)?;
        Ok(Jira {
            url: prism.url.clone(),
            prism,
            seen,
            script,
        })
    }

    /// The issues the search answers from now on (IssueBeans with `fields` and an
    /// embedded `changelog`).
    pub fn set_issues(&self, issues: Vec<Value>) {
        if let Ok(mut s) = self.script.lock() {
            s.issues = issues;
        }
    }

    /// Adds a comment of the issue `issue` (its ID or key).
    pub fn add_comment(&self, issue: &str, comment: Value) {
        if let Ok(mut s) = self.script.lock() {
            s.comments.push((issue.to_string(), comment));
        }
    }

    /// The requests served so far.
    pub fn requests(&self) -> Vec<Seen> {
        self.seen.lock().map(|s| s.clone()).unwrap_or_default()
    }

    /// Prism's lines reporting a violation of the description.
    pub fn violations(&self) -> Vec<String> {
        self.prism
            .lines()
            .into_iter()
            .filter(|l| l.contains("violation") || l.contains("did not pass the validation"))
            .collect()
    }
}

fn serve(stream: TcpStream, seen: &Mutex<Vec<Seen>>, script: &Mutex<Script>) {
    let _ = stream.set_read_timeout(Some(Duration::from_secs(30)));
    let Ok(mut out) = stream.try_clone() else {
        return;
    };
    let mut reader = BufReader::new(stream);
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
        let mut body = vec![0u8; length.min(MAX_BODY)];
        if reader.read_exact(&mut body).is_err() {
            return;
        }
        let mut parts = first.split_whitespace();
        let method = parts.next().unwrap_or_default().to_string();
        let target = parts.next().unwrap_or_default().to_string();
        let scripted = script
            .lock()
            .ok()
            .and_then(|s| scripted(&s, &method, &target));
        let (status, answer) = scripted.unwrap_or_else(|| answer(&method, &target));
        if let Ok(mut s) = seen.lock() {
            s.push(Seen {
                method,
                target,
                body: serde_json::from_slice(&body).unwrap_or(Value::Null),
            });
        }
        let text = if answer.is_null() {
            String::new()
        } else {
            answer.to_string()
        };
        let head = format!(
            "HTTP/1.1 {status} X\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
            text.len()
        );
        if out.write_all(head.as_bytes()).is_err() || out.write_all(text.as_bytes()).is_err() {
            return;
        }
    }
}

fn query(target: &str, name: &str) -> Option<u64> {
    target
        .split_once('?')?
        .1
        .split('&')
        .find_map(|kv| kv.strip_prefix(&format!("{name}=")))?
        .parse()
        .ok()
}

/// The answers of what a test scripted: the search, an issue's changelog, its
/// comments, one comment. `None` for anything else.
fn scripted(s: &Script, method: &str, target: &str) -> Option<(u16, Value)> {
    if method != "GET" {
        return None;
    }
    let path = target.split('?').next().unwrap_or_default();
    let start = query(target, "startAt").unwrap_or(0) as usize;
    let max = query(target, "maxResults").unwrap_or(50) as usize;
    if path == "/rest/api/3/search" {
        let page: Vec<Value> = s.issues.iter().skip(start).take(max).cloned().collect();
        return Some((
            200,
            json!({"startAt": start, "maxResults": max, "total": s.issues.len(), "issues": page}),
        ));
    }
    let rest = path.strip_prefix("/rest/api/3/issue/")?;
    let mut parts = rest.split('/');
    let issue = parts.next().unwrap_or_default();
    let is = |v: &Value| v["id"] == issue || v["key"] == issue;
    let comments = || {
        let mut c: Vec<Value> = s
            .comments
            .iter()
            .filter(|(i, _)| {
                i == issue
                    || s.issues
                        .iter()
                        .any(|v| is(v) && (v["id"] == *i || v["key"] == *i))
            })
            .map(|(_, c)| c.clone())
            .collect();
        c.sort_by(|a, b| b["created"].as_str().cmp(&a["created"].as_str()));
        c
    };
    match (parts.next(), parts.next()) {
        (Some("changelog"), None) => {
            let histories = s
                .issues
                .iter()
                .find(|v| is(v))?
                .pointer("/changelog/histories")?
                .as_array()?
                .clone();
            let total = histories.len();
            let values: Vec<Value> = histories.into_iter().skip(start).take(max).collect();
            let last = start + values.len() >= total;
            Some((
                200,
                json!({"startAt": start, "maxResults": max, "total": total, "isLast": last, "values": values}),
            ))
        }
        (Some("comment"), None) => {
            let all = comments();
            if all.is_empty() {
                return None;
            }
            let page: Vec<Value> = all.iter().skip(start).take(max).cloned().collect();
            Some((
                200,
                json!({"startAt": start, "maxResults": max, "total": all.len(), "comments": page}),
            ))
        }
        (Some("comment"), Some(id)) => comments()
            .into_iter()
            .find(|c| c["id"] == id)
            .map(|c| (200, c)),
        _ => None,
    }
}

fn answer(method: &str, target: &str) -> (u16, Value) {
    let path = target.split('?').next().unwrap_or_default();
    let transitions = path.ends_with("/transitions");
    let comment = path.ends_with("/comment");
    if method == "PUT" && path.contains("/comment/") {
        let id = path.rsplit('/').next().unwrap_or_default();
        return (200, json!({"id": id}));
    }
    // `jira.link`: a remote link made (or updated, for the same globalId).
    if method == "POST" && path.ends_with("/remotelink") {
        return (
            201,
            json!({"id": 10000, "self": format!("https://example.atlassian.net{path}/10000")}),
        );
    }
    // `jira.labels`, `jira.set_fields`: the issue edited.
    if method == "PUT" && !path.contains("/comment") {
        return (204, Value::Null);
    }
    match (method, transitions, comment) {
        ("GET", true, _) => (
            200,
            json!({"transitions": [
                {"id": "11", "name": "Start Progress", "to": {"id": "3", "name": "In Progress"}},
                {"id": "31", "name": "Finish", "to": {"id": "10001", "name": "Done"}}]}),
        ),
        ("POST", true, _) => (204, Value::Null),
        ("GET", _, true) => (
            200,
            json!({"startAt": 0, "maxResults": 50, "total": 0, "comments": []}),
        ),
        ("POST", _, true) => (201, json!({"id": "10001"})),
        _ => (
            200,
            json!({"id": "19435", "key": "INDEV-242", "fields": {
                "summary": "Тестовая задача", "status": {"name": "To Do"}, "labels": [],
                "reporter": {"accountId": "5b10a", "displayName": "jira_test"},
                "description": null}}),
        ),
    }
}

impl Seen {
    /// The text of an ADF body's first paragraph, when the request has one.
    pub fn text(&self) -> String {
        self.body
            .pointer("/body/content/0/content/0/text")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string()
    }
}

/// A scripted answer: status, extra headers, body (`Null`: empty).
pub type ErrorAnswer = (u16, Vec<(String, String)>, Value);

/// Chooses the answer of a request (method, target, body); `None`: the scripted
/// Jira's usual answer.
pub type Chooser = dyn Fn(&str, &str, &Value) -> Option<ErrorAnswer> + Send + Sync;

/// The scripted Jira alone (no Prism in front: Prism does not relay the error
/// answers the description does not list, such as a 429 with its headers),
/// answering what `script` chooses, else as [`Jira`]'s does. Each request it
/// serves is recorded.
pub struct ScriptedJira {
    /// The connection's `base_url`.
    pub url: String,
    seen: Arc<Mutex<Vec<Seen>>>,
}

impl ScriptedJira {
    /// Starts it.
    pub fn start(script: Box<Chooser>) -> std::io::Result<ScriptedJira> {
        let listener = TcpListener::bind("127.0.0.1:0")?;
        let url = format!("http://{}", listener.local_addr()?);
        let seen: Arc<Mutex<Vec<Seen>>> = Arc::default();
        let record = seen.clone();
        let script: Arc<Chooser> = Arc::from(script);
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else { break };
                let record = record.clone();
                let script = script.clone();
                std::thread::spawn(move || serve_scripted(stream, &record, &*script));
            }
        });
        Ok(ScriptedJira { url, seen })
    }

    /// The requests served so far.
    pub fn requests(&self) -> Vec<Seen> {
        self.seen.lock().map(|s| s.clone()).unwrap_or_default()
    }
}

fn serve_scripted(stream: TcpStream, seen: &Mutex<Vec<Seen>>, script: &Chooser) {
    let _ = stream.set_read_timeout(Some(Duration::from_secs(30)));
    let Ok(mut out) = stream.try_clone() else {
        return;
    };
    let mut reader = BufReader::new(stream);
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
        let mut body = vec![0u8; length.min(MAX_BODY)];
        if reader.read_exact(&mut body).is_err() {
            return;
        }
        let mut parts = first.split_whitespace();
        let method = parts.next().unwrap_or_default().to_string();
        let target = parts.next().unwrap_or_default().to_string();
        let body = serde_json::from_slice(&body).unwrap_or(Value::Null);
        let (status, headers, answer) = script(&method, &target, &body).unwrap_or_else(|| {
            let (status, answer) = answer(&method, &target);
            (status, Vec::new(), answer)
        });
        if let Ok(mut s) = seen.lock() {
            s.push(Seen {
                method,
                target,
                body,
            });
        }
        let text = if answer.is_null() {
            String::new()
        } else {
            answer.to_string()
        };
        let mut head = format!(
            "HTTP/1.1 {status} X\r\nContent-Type: application/json\r\nContent-Length: {}\r\n",
            text.len()
        );
        for (k, v) in headers {
            head.push_str(&format!("{k}: {v}\r\n"));
        }
        head.push_str("\r\n");
        if out.write_all(head.as_bytes()).is_err() || out.write_all(text.as_bytes()).is_err() {
            return;
        }
    }
}
