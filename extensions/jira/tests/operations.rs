//! `jira.link`, `jira.labels` and `jira.set_fields` against Atlassian's published
//! Jira Cloud platform REST v3 description (tests/jira-api): every request goes
//! through Prism as a validation proxy (`proxy --errors`, a request the description
//! refuses is answered 422) in front of a small scripted Jira recording what it
//! serves. Then through the real `oc-jira-extension` binary, with this test as the
//! host: a link made once per request ID, `settable_fields` enforced (none by
//! default), and every input checked with a clear error before Jira is called.
//!
//! Without node or Prism's packages it prints SKIPPED and passes, unless
//! OC_REQUIRE_PEERS=1.

#![allow(clippy::unwrap_used)]

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use oc_jira::api::{Auth, Client};
use oc_jira::ops::{fields, link};
use protocol::wire::{
    Authority, Call, ConfigureParams, Connection, Entry, Event, HostInfo, InitializeParams,
    KvCommitParams, KvCommitResult, KvGetParams, KvGetResult, OperationCallParams,
    OperationCallResult, Payload, SecretResolveParams, SecretResolveResult, StateEventsResult,
    StateWorkEventsParams,
};
use protocol::{connect, CallError, Code, FnHandler, Options, Peer, RpcError};
use serde_json::{json, Value};

const TOKEN: &str = "tok-OPS-SECRET-9a7e";
const EXE: &str = env!("CARGO_BIN_EXE_oc-jira-extension");
const PR: &str = "https://github.com/acme/widgets/pull/7";

fn required() -> bool {
    std::env::var("OC_REQUIRE_PEERS").is_ok_and(|v| v == "1")
}

fn repo_tests() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests")
}

/// One request the scripted Jira served: method, path with query, body.
#[derive(Debug, Clone)]
struct Seen {
    method: String,
    target: String,
    body: Value,
}

struct Jira {
    url: String,
    log: Arc<Mutex<Vec<String>>>,
    seen: Arc<Mutex<Vec<Seen>>>,
    _prism: Mutex<Child>,
}

impl Jira {
    fn violations(&self) -> Vec<String> {
        self.log
            .lock()
            .unwrap()
            .iter()
            .filter(|l| l.contains("violation") || l.contains("did not pass the validation"))
            .cloned()
            .collect()
    }

    fn served(&self, method: &str, suffix: &str) -> Vec<Seen> {
        self.seen
            .lock()
            .unwrap()
            .iter()
            .filter(|s| s.method == method && s.target.split('?').next().unwrap().ends_with(suffix))
            .cloned()
            .collect()
    }
}

fn jira() -> Option<&'static Jira> {
    static JIRA: OnceLock<Result<Jira, String>> = OnceLock::new();
    match JIRA.get_or_init(start) {
        Ok(j) => Some(j),
        Err(why) => {
            assert!(!required(), "no Prism under OC_REQUIRE_PEERS=1: {why}");
            println!("SKIPPED: {why}");
            None
        }
    }
}

fn start() -> Result<Jira, String> {
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
    let seen: Arc<Mutex<Vec<Seen>>> = Arc::default();
    let upstream = scripted(seen.clone());
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
        Ok(true) => Ok(Jira {
            url: format!("http://127.0.0.1:{port}"),
            log,
            seen,
            _prism: Mutex::new(child),
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

/// The scripted Jira: a remote link made (201), an issue edited (204), the issue.
fn scripted(seen: Arc<Mutex<Vec<Seen>>>) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(stream) = stream else { break };
            let seen = seen.clone();
            std::thread::spawn(move || serve(stream, &seen));
        }
    });
    url
}

fn serve(mut stream: std::net::TcpStream, seen: &Mutex<Vec<Seen>>) {
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
        let mut body = vec![0u8; length];
        let _ = reader.read_exact(&mut body);
        let mut parts = first.split_whitespace();
        let method = parts.next().unwrap_or_default().to_string();
        let target = parts.next().unwrap_or_default().to_string();
        let path = target.split('?').next().unwrap_or_default().to_string();
        seen.lock().unwrap().push(Seen {
            method: method.clone(),
            target,
            body: serde_json::from_slice(&body).unwrap_or(Value::Null),
        });
        let (status, answer) = match method.as_str() {
            "POST" if path.ends_with("/remotelink") => (
                201,
                json!({"id": 10000, "self": "https://example.atlassian.net/rest/api/3/issue/PROJ-123/remotelink/10000"}),
            ),
            "PUT" => (204, Value::Null),
            _ => (
                200,
                json!({"id": "10042", "key": "PROJ-123", "fields": {"summary": "Fix it"}}),
            ),
        };
        let text = if answer.is_null() {
            String::new()
        } else {
            answer.to_string()
        };
        let head = format!(
            "HTTP/1.1 {status} X\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{text}",
            text.len()
        );
        if stream.write_all(head.as_bytes()).is_err() {
            return;
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

#[test]
fn link_labels_and_fields_are_valid_against_the_published_description() {
    let Some(j) = jira() else { return };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let client = basic(&j.url);
    let made = rt
        .block_on(link::link(
            &client,
            "PROJ-124",
            &json!({"url": PR, "title": "acme/widgets#7", "relationship": "fixed by"}),
        ))
        .unwrap();
    assert_eq!(made["link_id"], 10000);
    assert_eq!(made["global_id"], PR);
    let long = format!("https://example.com/{}", "a".repeat(300));
    let made = rt
        .block_on(link::link(&client, "PROJ-124", &json!({"url": long})))
        .unwrap();
    assert!(made["global_id"]
        .as_str()
        .unwrap()
        .starts_with("oc:sha256:"));
    let labelled = rt
        .block_on(fields::labels(
            &client,
            "PROJ-124",
            &json!({"add": ["agent", "has-pr"], "remove": ["triage"]}),
        ))
        .unwrap();
    assert_eq!(labelled["added"], json!(["agent", "has-pr"]));
    let set = rt
        .block_on(fields::set_fields(
            &client,
            "PROJ-124",
            &json!({"fields": {"duedate": "2026-12-31", "customfield_10016": 3}}),
            &["duedate".to_string(), "customfield_10016".to_string()],
        ))
        .unwrap();
    assert_eq!(set["issue"], "PROJ-124");
    let v = j.violations();
    assert!(v.is_empty(), "Prism reported violations: {v:?}");

    let links = j.served("POST", "/rest/api/3/issue/PROJ-124/remotelink");
    assert_eq!(
        links[0].body,
        json!({"globalId": PR, "relationship": "fixed by",
               "object": {"url": PR, "title": "acme/widgets#7"}})
    );
    assert_eq!(
        links[1].body["object"]["title"].as_str().unwrap().len(),
        255
    );
    let puts = j.served("PUT", "/rest/api/3/issue/PROJ-124");
    assert_eq!(
        puts[0].body,
        json!({"update": {"labels": [{"add": "agent"}, {"add": "has-pr"}, {"remove": "triage"}]}})
    );
    assert_eq!(
        puts[1].body,
        json!({"fields": {"duedate": "2026-12-31", "customfield_10016": 3}})
    );
}

#[test]
fn inputs_are_checked_with_clear_errors() {
    let bad_links = [
        (json!({}), "url (the http(s) URL"),
        (
            json!({"url": "javascript:alert(1)"}),
            "is not an http or https URL",
        ),
        (json!({"url": "https:///x"}), "is not an http or https URL"),
        (json!({"url": PR, "title": ""}), "title must be one line"),
        (
            json!({"url": PR, "relationship": 3}),
            "relationship must be a string",
        ),
    ];
    for (input, want) in bad_links {
        let e = link::body(&input).unwrap_err();
        assert!(
            e.is(Code::Invalid) && e.message.contains(want),
            "{input}: {e:?}"
        );
    }
    let bad_labels = [
        (json!({}), "give labels to add or remove"),
        (json!({"add": "agent"}), "add must be an array"),
        (json!({"add": ["two words"]}), "is not a label"),
        (
            json!({"add": ["x"], "remove": ["x"]}),
            "is both added and removed",
        ),
        (
            json!({"set": ["x"]}),
            "`set` is not an input of jira.labels",
        ),
    ];
    for (input, want) in bad_labels {
        let e = fields::labels_body(&input).unwrap_err();
        assert!(e.message.contains(want), "{input}: {e:?}");
    }
    let too_many: Vec<String> = (0..51).map(|i| format!("l{i}")).collect();
    let e = fields::labels_body(&json!({"add": too_many})).unwrap_err();
    assert!(e.message.contains("more than 50"), "{e:?}");
    let allowed = vec!["duedate".to_string()];
    let e = fields::fields_body(&json!({"fields": {"summary": "x"}}), &allowed).unwrap_err();
    assert!(e.is(Code::Unauthorized), "{e:?}");
    assert!(e.message.contains("allows only duedate"), "{e:?}");
    let e = fields::fields_body(&json!({"fields": {"duedate": "x"}}), &[]).unwrap_err();
    assert!(e.message.contains("allows no fields"), "{e:?}");
    let e = fields::fields_body(&json!({"fields": {}}), &allowed).unwrap_err();
    assert!(e.message.contains("fields (an object"), "{e:?}");
    let big = json!({"fields": {"duedate": "x".repeat(40_000)}});
    let e = fields::fields_body(&big, &allowed).unwrap_err();
    assert!(e.message.contains("32768"), "{e:?}");
    // The entry's list is checked as configured.
    let e = oc_jira::config::parse_entry(&json!({"projects": ["PROJ"], "agent_account_id": "a1",
                                                 "settable_fields": ["Due Date"]}))
    .unwrap_err();
    assert_eq!(e.pointer, "/settable_fields/0");
    let ok = oc_jira::config::parse_entry(&json!({"projects": ["PROJ"], "agent_account_id": "a1",
                                                  "settable_fields": ["duedate"]}))
    .unwrap();
    assert_eq!(ok.settable_fields, ["duedate"]);
    assert!(
        oc_jira::config::parse_entry(&json!({"projects": ["PROJ"], "agent_account_id": "a1"}))
            .unwrap()
            .settable_fields
            .is_empty()
    );
}

/// What this test serves the extension as its host: secrets, the Work's Event, a KV.
fn host_answer(
    kv: &Mutex<HashMap<String, Value>>,
    request: &protocol::Request,
) -> Result<Value, RpcError> {
    let m = request.method.as_str();
    if m == <SecretResolveParams as Call>::METHOD {
        let params: SecretResolveParams = request.params()?;
        let mut result = SecretResolveResult::default();
        for name in params.names {
            if name == "api_token" {
                result.values.insert(name, TOKEN.to_string());
            }
        }
        return Ok(serde_json::to_value(result).unwrap());
    }
    if m == <StateWorkEventsParams as Call>::METHOD {
        let params: StateWorkEventsParams = request.params()?;
        let mut events = Vec::new();
        if params.after == 0 && params.id.starts_with('w') {
            events.push(Event {
                id: "e1".into(),
                sequence: 1,
                event_type: "jira.issue.assigned".into(),
                scope_id: params.id.replace('w', "s"),
                payload: Payload {
                    schema: "jira.issue.v1".into(),
                    data: json!({"issue_key": "PROJ-123"}),
                },
                ..Default::default()
            });
        }
        return Ok(serde_json::to_value(StateEventsResult { events }).unwrap());
    }
    if m == <KvGetParams as Call>::METHOD {
        let params: KvGetParams = request.params()?;
        let value = kv.lock().unwrap().get(&params.key).cloned();
        return Ok(serde_json::to_value(KvGetResult {
            value,
            ..Default::default()
        })
        .unwrap());
    }
    if m == <KvCommitParams as Call>::METHOD {
        let params: KvCommitParams = request.params()?;
        let mut kv = kv.lock().unwrap();
        for put in params.puts {
            kv.insert(put.key, put.value);
        }
        return Ok(serde_json::to_value(KvCommitResult::default()).unwrap());
    }
    Err(RpcError::method_not_found(m))
}

async fn within<F: std::future::Future>(f: F) -> F::Output {
    tokio::time::timeout(Duration::from_secs(60), f)
        .await
        .expect("hung")
}

async fn call(
    peer: &Peer,
    scope: &str,
    op: &str,
    request_id: &str,
    input: Value,
) -> Result<Value, CallError> {
    within(peer.call_typed(&OperationCallParams {
        operation: op.into(),
        request_id: request_id.into(),
        authority: Authority {
            scope_id: scope.into(),
            work_id: scope.replace('s', "w"),
            binding: "agent".into(),
            connection: "jc".into(),
            ..Default::default()
        },
        input,
    }))
    .await
    .map(|r: OperationCallResult| r.output)
}

#[tokio::test]
async fn the_extension_links_once_per_request_id_and_sets_only_the_fields_the_entry_allows() {
    let Some(j) = jira() else { return };
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
    let kv: Arc<Mutex<HashMap<String, Value>>> = Arc::default();
    let handler = FnHandler(move |request: protocol::Request| {
        let kv = kv.clone();
        async move { host_answer(&kv, &request) }
    });
    let peer = connect(stdout, stdin, handler, Options::named("extension jira"));
    let _: Value = within(peer.call_typed(&InitializeParams {
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
    // Scope s1's entry allows duedate; scope s2's allows nothing.
    let entry = |scope: &str, config: Value| Entry {
        scope_id: scope.into(),
        entry_type: "jira".into(),
        name: "tracker".into(),
        connection: "jc".into(),
        config,
        ..Default::default()
    };
    within(peer.call_typed(&ConfigureParams {
        entries: vec![
            entry(
                "s1",
                json!({"projects": ["PROJ"], "agent_account_id": "a1", "settable_fields": ["duedate"]}),
            ),
            entry("s2", json!({"projects": ["PROJ"], "agent_account_id": "a1"})),
        ],
        connections: vec![Connection {
            name: "jc".into(),
            connection_type: "jira".into(),
            config: json!({"base_url": j.url, "email": "agent@example.com"}),
            secrets: vec!["api_token".into()],
        }],
        ..Default::default()
    }))
    .await
    .unwrap();

    let before = j
        .served("POST", "/rest/api/3/issue/PROJ-123/remotelink")
        .len();
    let first = call(&peer, "s1", "jira.link", "link-1", json!({"url": PR}))
        .await
        .unwrap();
    assert_eq!(first["issue"], "PROJ-123");
    let again = call(&peer, "s1", "jira.link", "link-1", json!({"url": PR}))
        .await
        .unwrap();
    assert_eq!(again, first);
    assert_eq!(
        j.served("POST", "/rest/api/3/issue/PROJ-123/remotelink")
            .len(),
        before + 1,
        "a repeated request_id links once"
    );

    let puts = || j.served("PUT", "/rest/api/3/issue/PROJ-123").len();
    let before = puts();
    let e = call(
        &peer,
        "s1",
        "jira.set_fields",
        "f-1",
        json!({"fields": {"summary": "pwned"}}),
    )
    .await
    .unwrap_err();
    assert!(e.is(Code::Unauthorized), "{e:?}");
    assert!(format!("{e}").contains("allows only duedate"), "{e}");
    let e = call(
        &peer,
        "s2",
        "jira.set_fields",
        "f-2",
        json!({"fields": {"duedate": "2026-12-31"}}),
    )
    .await
    .unwrap_err();
    assert!(format!("{e}").contains("allows no fields"), "{e}");
    assert_eq!(puts(), before, "a refused field reached Jira");
    let set = call(
        &peer,
        "s1",
        "jira.set_fields",
        "f-3",
        json!({"fields": {"duedate": "2026-12-31"}}),
    )
    .await
    .unwrap();
    assert_eq!(set["set"], json!(["duedate"]));
    let labelled = call(
        &peer,
        "s2",
        "jira.labels",
        "lab-1",
        json!({"add": ["has-pr"]}),
    )
    .await
    .unwrap();
    assert_eq!(labelled["added"], json!(["has-pr"]));
    assert_eq!(puts(), before + 2);
    let e = call(&peer, "s1", "jira.labels", "lab-2", json!({"add": ["a b"]}))
        .await
        .unwrap_err();
    assert!(e.is(Code::Invalid), "{e:?}");
    let v = j.violations();
    assert!(v.is_empty(), "Prism reported violations: {v:?}");

    drop(peer);
    let _ = child.kill().await;
    let log = within(log).await.unwrap();
    assert!(!log.contains(TOKEN), "the token in the log: {log}");
}
