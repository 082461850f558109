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

/// tests/linear-api, from this package's tests or from the system tests (which
/// include this file too).
pub fn api_dir() -> PathBuf {
    let here = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let systest = here.join("linear-api");
    if systest.is_dir() {
        return systest;
    }
    here.join("../../tests/linear-api")
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

/// A scripted answer by the request's operation and variables (`None`: the usual).
pub type Script = Box<dyn Fn(&str, &Value) -> Option<Answer> + Send>;

/// A GraphQL error answer as Linear gives it: `status`, `headers`, and `errors`
/// with `message` and `extensions.code`.
pub fn graphql_error(status: u16, headers: &[(&str, String)], message: &str, code: &str) -> Answer {
    (
        status,
        headers
            .iter()
            .map(|(k, v)| (k.to_string(), v.clone()))
            .collect(),
        json!({"errors": [{"message": message,
                           "extensions": {"code": code, "type": code.to_ascii_lowercase(),
                                          "userPresentableMessage": message}}],
               "data": null})
        .to_string(),
    )
}

/// What the stand-in saw: each request's operation, variables, Authorization and
/// validation errors.
#[derive(Default)]
pub struct Seen {
    pub requests: Vec<(String, Value, String, Vec<String>)>,
    /// An answer given instead (status, headers, body).
    pub answer: Option<Answer>,
    /// Answers given once each, in order, before all others but a validation
    /// failure.
    pub once: std::collections::VecDeque<Answer>,
    /// An answer chosen by the request (operation, variables), before all others
    /// but a validation failure and `once`.
    pub script: Option<Script>,
    /// Bodies given instead of the canned ones, by operation.
    pub answers: std::collections::HashMap<String, Value>,
    /// The workspace's webhooks (`OcWebhooks`, `OcWebhookCreate`, `OcWebhookUpdate`
    /// read and change them; each keeps the `secret` last set, never answered).
    pub webhooks: Vec<Value>,
}

/// The answer of a webhook operation over `seen.webhooks`, or `None` for others.
pub fn webhooks_answer(seen: &mut Seen, op: &str, variables: &Value) -> Option<Value> {
    let shown = |h: &Value| {
        let mut h = h.clone();
        if let Some(o) = h.as_object_mut() {
            o.remove("secret");
        }
        h
    };
    let apply = |h: &mut Value, input: &Value| {
        for k in ["url", "enabled", "resourceTypes", "secret", "label"] {
            if !input[k].is_null() {
                h[k] = input[k].clone();
            }
        }
    };
    match op {
        "OcWebhooks" => Some(json!({"data": {"webhooks": {
            "nodes": seen.webhooks.iter().map(shown).collect::<Vec<_>>(),
            "pageInfo": {"hasNextPage": false, "endCursor": null}}}})),
        "OcWebhookCreate" => {
            let input = &variables["input"];
            let team = input["teamId"].as_str().unwrap_or_default();
            let mut hook = json!({
                "id": format!("5e0d0b1c-0000-4000-8000-{:012}", seen.webhooks.len() + 1),
                "url": null, "enabled": true, "resourceTypes": [],
                "team": {"id": format!("team-{team}"), "key": team},
            });
            apply(&mut hook, input);
            seen.webhooks.push(hook.clone());
            Some(json!({"data": {"webhookCreate": {"success": true, "webhook": shown(&hook)}}}))
        }
        "OcWebhookUpdate" => {
            let id = variables["id"].as_str().unwrap_or_default();
            let Some(hook) = seen.webhooks.iter_mut().find(|h| h["id"] == id) else {
                return Some(
                    json!({"data": null, "errors": [{"message": "Entity not found: Webhook",
                    "extensions": {"code": "INVALID_INPUT"}}]}),
                );
            };
            apply(hook, &variables["input"]);
            Some(json!({"data": {"webhookUpdate": {"success": true, "webhook": shown(hook)}}}))
        }
        _ => None,
    }
}

/// `OcCommentsSince`'s answer with `nodes`.
pub fn comments_since(nodes: Vec<Value>) -> Value {
    json!({"data": {"comments": {"nodes": nodes,
        "pageInfo": {"hasNextPage": false, "endCursor": null}}}})
}

/// A comment as `OcCommentsSince` answers it, on LIN-1778 (the fixtures' issue),
/// by Ada Lovelace.
pub fn polled_comment(id: &str, body: &str, created_at: &str) -> Value {
    json!({
        "id": id, "body": body, "createdAt": created_at,
        "url": format!("https://linear.app/issue/LIN-1778/foo-bar#comment-{id}"),
        "user": {"id": "aacdca22-6266-4c0a-ab3c-8fa70a26765c", "name": "Ada Lovelace",
                 "email": "ada@example.com"},
        "issue": {"id": "539068e2-ae88-4d09-bd75-22eb4a59612f", "identifier": "LIN-1778",
                  "title": "Foo bar", "url": "https://linear.app/acme/issue/LIN-1778/foo-bar",
                  "team": {"id": "72b2a2dc-6f4f-4423-9d34-24b5bd10634a", "key": "LIN",
                           "name": "Linear"}}
    })
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
        "OcIssuesSince" => issues_since(),
        "OcCommentUpdate" => json!({"data": {"commentUpdate": {"success": true,
            "comment": {"id": "c2"}}}}),
        "OcCommentsSince" => comments_since(Vec::new()),
        "OcLinkUrl" => json!({"data": {"attachmentLinkURL": {"success": true,
            "attachment": {"id": "a1", "url": "https://github.com/acme/widgets/pull/2",
                           "title": "Pull request"}}}}),
        "OcUpdate" => json!({"data": {"issueUpdate": {"success": true,
            "issue": {"id": "539068e2-ae88-4d09-bd75-22eb4a59612f", "identifier": "LIN-1778",
                      "title": "Foo bar", "priority": 2, "estimate": 3, "dueDate": "2026-12-31"}}}}),
        _ => json!({"data": {}}),
    }
}

/// An issue as `OcIssuesSince` answers it, assigned to the fixtures' agent user;
/// `change` is its last history entry.
pub fn polled_issue(
    id: &str,
    identifier: &str,
    title: &str,
    updated_at: &str,
    change: Value,
) -> Value {
    json!({
        "id": id, "identifier": identifier, "title": title,
        "description": "Polled.", "url": format!("https://linear.app/acme/issue/{identifier}/x"),
        "createdAt": "2020-01-23T12:50:11.000Z", "updatedAt": updated_at,
        "team": {"id": "72b2a2dc-6f4f-4423-9d34-24b5bd10634a", "key": "LIN", "name": "Linear"},
        "state": {"id": "0a1b2c3d-0000-4000-8000-000000000001", "name": "Todo", "type": "unstarted"},
        "assignee": {"id": "d1e2f3a4-1111-4222-8333-444455556666", "name": "Conduit Agent",
                     "email": "agent@example.com"},
        "creator": {"id": "aacdca22-6266-4c0a-ab3c-8fa70a26765c", "name": "Ada Lovelace",
                    "email": "ada@example.com"},
        "labels": {"nodes": [{"id": "9f8e7d6c-2222-4333-8444-555566667777", "name": "Bug"}]},
        "history": {"nodes": [change]}
    })
}

/// The assignment to the agent user at `at`, as a history entry.
pub fn assigned_at(at: &str) -> Value {
    json!({"createdAt": at, "fromAssigneeId": null,
           "toAssigneeId": "d1e2f3a4-1111-4222-8333-444455556666",
           "fromStateId": null, "toStateId": null, "addedLabelIds": []})
}

/// `OcIssuesSince`: LIN-1778 as the fixture issue-assigned.json's change left it
/// (the same change), LIN-1779 assigned to the agent later (a delivery missed), and
/// LIN-1780, assigned long ago, whose last change was an edit (no trigger).
pub fn issues_since() -> Value {
    let mut same = polled_issue(
        "539068e2-ae88-4d09-bd75-22eb4a59612f",
        "LIN-1778",
        "Foo bar",
        "2020-01-23T12:55:02.101Z",
        assigned_at("2020-01-23T12:55:02.101Z"),
    );
    same["description"] = json!("The foo is not barred.\n\n```\nfoo --bar\n```");
    same["url"] = json!("https://linear.app/acme/issue/LIN-1778/foo-bar");
    json!({"data": {"issues": {
        "nodes": [
            same,
            polled_issue("6d2f0a51-3c4b-4e5f-8a9b-0c1d2e3f4a5b", "LIN-1779", "Missed one",
                         "2020-01-23T13:10:00.000Z", assigned_at("2020-01-23T13:10:00.004Z")),
            polled_issue("7e3a1b62-4d5c-4f6a-9bac-1d2e3f4a5b6c", "LIN-1780", "Edited one",
                         "2020-01-23T14:00:00.000Z", assigned_at("2020-01-22T09:00:00.000Z"))
        ],
        "pageInfo": {"hasNextPage": false, "endCursor": "c3"}}}})
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
            } else if let Some(a) = seen.once.pop_front() {
                a
            } else if let Some(a) = seen.script.as_ref().and_then(|f| f(&op, &req["variables"])) {
                a
            } else if let Some(a) = seen.answer.clone() {
                a
            } else if let Some(v) = webhooks_answer(&mut seen, &op, &req["variables"]) {
                (200, Vec::new(), v.to_string())
            } else if let Some(v) = seen.answers.get(&op).cloned() {
                (200, Vec::new(), v.to_string())
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
