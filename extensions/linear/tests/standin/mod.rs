//! A stand-in of Linear's GraphQL API for the tests: every document it receives is
//! validated against Linear's published schema with graphql-js
//! (tests/linear-api), and one the schema refuses is answered as Linear does (400,
//! `GRAPHQL_VALIDATION_FAILED`); others get canned answers, or the answer a test
//! sets.

#![allow(dead_code, clippy::unwrap_used)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::{Arc, Mutex};

use serde_json::{json, Value};

pub fn api_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/linear-api")
}

/// graphql-js over Linear's schema, one JSON line per document.
pub struct Validator {
    _child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
}

impl Validator {
    pub fn start() -> Option<Validator> {
        let dir = api_dir();
        if !dir.join("node_modules/graphql").is_dir() {
            let why = "tests/linear-api has no node_modules (npm ci --prefix tests/linear-api)";
            if std::env::var("OC_REQUIRE_PEERS").is_ok_and(|v| v == "1") {
                panic!("{why}");
            }
            println!("SKIPPED: {why}");
            return None;
        }
        let mut child = Command::new("node")
            .arg(dir.join("validate.js"))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("node");
        let stdin = child.stdin.take().unwrap();
        let mut stdout = BufReader::new(child.stdout.take().unwrap());
        let mut ready = String::new();
        stdout.read_line(&mut ready).unwrap();
        assert!(ready.contains("ready"), "{ready}");
        Some(Validator {
            _child: child,
            stdin,
            stdout,
        })
    }

    pub fn errors(&mut self, query: &str) -> Vec<String> {
        let mut line = serde_json::to_string(&json!({"query": query})).unwrap();
        line.push('\n');
        self.stdin.write_all(line.as_bytes()).unwrap();
        let mut out = String::new();
        self.stdout.read_line(&mut out).unwrap();
        let v: Value = serde_json::from_str(&out).unwrap();
        if v["ok"] == true {
            return Vec::new();
        }
        v["errors"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e.as_str().unwrap().to_string())
            .collect()
    }
}

impl Drop for Validator {
    fn drop(&mut self) {
        let _ = self._child.kill();
        let _ = self._child.wait();
    }
}

/// An answer the stand-in gives instead: status, headers, body.
pub type Answer = (u16, Vec<(String, String)>, String);

/// What the stand-in saw: each request's operation, variables, Authorization and
/// validation errors.
#[derive(Default)]
pub struct Seen {
    pub requests: Vec<(String, Value, String, Vec<String>)>,
    /// An answer given instead (status, headers, body).
    pub answer: Option<Answer>,
}

pub fn canned(operation: &str) -> Value {
    match operation {
        "OcIssue" => json!({"data": {"issue": {
            "id": "539068e2-ae88-4d09-bd75-22eb4a59612f", "identifier": "LIN-1778",
            "title": "Foo bar", "description": "The foo is not barred.",
            "url": "https://linear.app/acme/issue/LIN-1778/foo-bar",
            "creator": {"id": "u1", "name": "Ada Lovelace"}, "assignee": {"id": "u2", "name": "Conduit Agent"},
            "state": {"id": "s1", "name": "Todo", "type": "unstarted"},
            "team": {"id": "t1", "key": "LIN", "name": "Linear"},
            "labels": {"nodes": [{"id": "l1", "name": "Bug"}]},
            "comments": {"nodes": [{"id": "c1", "body": "Indeed.", "createdAt": "2020-01-23T12:53:18.084Z",
                                     "user": {"id": "u1", "name": "Ada Lovelace"}}],
                         "pageInfo": {"hasNextPage": false}}}}}),
        "OcTeamStates" => json!({"data": {"team": {"id": "t1", "key": "LIN", "states": {"nodes": [
            {"id": "s1", "name": "Todo", "type": "unstarted"},
            {"id": "s2", "name": "In Review", "type": "started"},
            {"id": "s3", "name": "Done", "type": "completed"}]}}}}),
        "OcComment" => json!({"data": {"commentCreate": {"success": true,
            "comment": {"id": "c2", "url": "https://linear.app/acme/issue/LIN-1778#comment-c2", "createdAt": "2026-01-01T00:00:00.000Z"}}}}),
        "OcMove" => json!({"data": {"issueUpdate": {"success": true,
            "issue": {"id": "539068e2-ae88-4d09-bd75-22eb4a59612f", "identifier": "LIN-1778",
                      "state": {"id": "s2", "name": "In Review", "type": "started"}}}}}),
        "OcLabels" => json!({"data": {"issueLabels": {"nodes": [
            {"id": "lw", "name": "Agent", "team": null},
            {"id": "lt", "name": "agent", "team": {"id": "t1"}}]}}}),
        "OcAddLabel" => json!({"data": {"issueAddLabel": {"success": true,
            "issue": {"id": "539068e2-ae88-4d09-bd75-22eb4a59612f", "identifier": "LIN-1778",
                      "labels": {"nodes": [{"id": "lt", "name": "agent"}]}}}}}),
        _ => json!({"data": {}}),
    }
}

pub fn operation_name(query: &str) -> String {
    query
        .split(|c: char| c == '(' || c == '{' || c.is_whitespace())
        .filter(|w| !w.is_empty())
        .nth(1)
        .unwrap_or_default()
        .to_string()
}

/// Starts the stand-in: answers each POST after validating its query.
pub fn stand_in(validator: Validator) -> (String, Arc<Mutex<Seen>>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/graphql", listener.local_addr().unwrap());
    let seen = Arc::new(Mutex::new(Seen::default()));
    let seen2 = seen.clone();
    std::thread::spawn(move || {
        let mut validator = validator;
        for stream in listener.incoming() {
            let Ok(stream) = stream else { continue };
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            let mut len = 0usize;
            let mut auth = String::new();
            loop {
                let mut line = String::new();
                if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
                    break;
                }
                let lower = line.to_ascii_lowercase();
                if let Some(v) = lower.strip_prefix("content-length:") {
                    len = v.trim().parse().unwrap_or(0);
                }
                if lower.starts_with("authorization:") {
                    auth = line["authorization:".len()..].trim().to_string();
                }
            }
            let mut body = vec![0; len];
            reader.read_exact(&mut body).unwrap();
            let req: Value = serde_json::from_slice(&body).unwrap();
            let query = req["query"].as_str().unwrap_or_default().to_string();
            let errors = validator.errors(&query);
            let op = operation_name(&query);
            let mut seen = seen2.lock().unwrap();
            seen.requests
                .push((op.clone(), req["variables"].clone(), auth, errors.clone()));
            let (status, headers, text) = if !errors.is_empty() {
                (
                    400,
                    Vec::new(),
                    json!({"errors": [{"message": errors[0],
                                       "extensions": {"code": "GRAPHQL_VALIDATION_FAILED"}}]})
                    .to_string(),
                )
            } else if let Some(a) = seen.answer.clone() {
                a
            } else {
                (200, Vec::new(), canned(&op).to_string())
            };
            drop(seen);
            let mut out = stream;
            let mut head = format!(
                "HTTP/1.1 {status} X\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n",
                text.len()
            );
            for (k, v) in headers {
                head.push_str(&format!("{k}: {v}\r\n"));
            }
            head.push_str("\r\n");
            let _ = out.write_all(head.as_bytes());
            let _ = out.write_all(text.as_bytes());
        }
    });
    (url, seen)
}
