//! A scripted Jira Cloud behind Prism's validation proxy over Atlassian's published
//! platform REST v3 description (tests/jira-api): every request the jira package
//! sends is checked against the description (a violation is answered 422 and shows
//! in Prism's log), and the scripted Jira answers what the operations need (an issue,
//! its comments, its transitions, a made comment, an edited comment, a made
//! transition). Each request it serves is recorded.

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
        let record = seen.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else { break };
                let record = record.clone();
                std::thread::spawn(move || serve(stream, &record));
            }
        });
        let prism = crate::github::start_prism_proxy(&description_path(), &upstream)?;
        Ok(Jira {
            url: prism.url.clone(),
            prism,
            seen,
        })
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

fn serve(stream: TcpStream, seen: &Mutex<Vec<Seen>>) {
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
        let (status, answer) = answer(&method, &target);
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

fn answer(method: &str, target: &str) -> (u16, Value) {
    let path = target.split('?').next().unwrap_or_default();
    let transitions = path.ends_with("/transitions");
    let comment = path.ends_with("/comment");
    if method == "PUT" && path.contains("/comment/") {
        let id = path.rsplit('/').next().unwrap_or_default();
        return (200, json!({"id": id}));
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
