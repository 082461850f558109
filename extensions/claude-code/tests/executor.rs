#![allow(clippy::unwrap_used)]
//! The real `oc-claude-code-extension` binary as a child process, driven over
//! its stdin and stdout as the host drives it, with the host's callbacks
//! (`execution.persist_recovery`, `artifact.*`, `kv.get`, `kv.commit`) served
//! and recorded here; claude is `fake-claude`, a real process in a real
//! process group. Nothing here measures time: the timeouts only guard against
//! hangs.

use protocol::wire::{ExecutorWaitResult, Outcome};
use protocol::{connect, CallError, FnHandler, Options, Peer, Request, RpcError};
use serde_json::{json, Value};
use std::collections::HashMap;
use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::process::{Child, Command};

const EXE: &str = env!("CARGO_BIN_EXE_oc-claude-code-extension");
const FAKE: &str = env!("CARGO_BIN_EXE_fake-claude");
/// Only against hangs: nothing here measures time.
const HANG: Duration = Duration::from_secs(90);

async fn within<F: std::future::Future>(f: F) -> F::Output {
    tokio::time::timeout(HANG, f).await.expect("hung")
}

async fn until(what: &str, mut check: impl FnMut() -> bool) {
    let waited = tokio::time::timeout(HANG, async {
        while !check() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    assert!(waited.is_ok(), "hung waiting for {what}");
}

struct Scratch(PathBuf);

impl Scratch {
    fn new(test: &str) -> Scratch {
        let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
            .join(format!("oc-cc-{test}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("home")).unwrap();
        Scratch(dir)
    }
    fn join(&self, p: &str) -> PathBuf {
        self.0.join(p)
    }
    fn state(&self) -> PathBuf {
        self.join("state")
    }
    fn claude_dir(&self) -> PathBuf {
        self.join("claude-config")
    }
    fn segment(&self, id: &str, n: u32) -> PathBuf {
        self.state().join("runs").join(id).join(n.to_string())
    }
    fn record(&self) -> PathBuf {
        self.join("record.jsonl")
    }
    /// The fake's recorded launches (argv, cwd, env), in order.
    fn launches(&self) -> Vec<Value> {
        std::fs::read_to_string(self.record())
            .unwrap_or_default()
            .lines()
            // A line the fake is still writing does not parse yet: skip it.
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .filter(|v| v.get("argv").is_some())
            .collect()
    }
    fn mcp_exchanges(&self) -> Vec<Value> {
        std::fs::read_to_string(self.record())
            .unwrap_or_default()
            .lines()
            // A line the fake is still writing does not parse yet: skip it.
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .filter(|v| v.get("mcp").is_some())
            .collect()
    }
    /// A binding config running the fake, recording into this scratch.
    fn config(&self, extra: Value) -> Value {
        let mut c = json!({
            "binary": FAKE,
            "env": {"FAKE_CLAUDE_RECORD": self.record()},
        });
        for (k, v) in extra.as_object().unwrap() {
            if k == "env" {
                for (ek, ev) in v.as_object().unwrap() {
                    c["env"][ek] = ev.clone();
                }
            } else {
                c[k] = v.clone();
            }
        }
        c
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn arg_after(argv: &Value, flag: &str) -> Option<String> {
    let a = argv.as_array().unwrap();
    let i = a.iter().position(|x| x == flag)?;
    a.get(i + 1).and_then(Value::as_str).map(str::to_string)
}

fn has_arg(argv: &Value, flag: &str) -> bool {
    argv.as_array().unwrap().iter().any(|x| x == flag)
}

#[derive(Default)]
struct Host {
    persists: Mutex<Vec<Value>>,
    /// Symlinks planted in the segment directory when the wrapper's pid is
    /// persisted (after the wrapper started, before it starts claude): name, target.
    plant: Mutex<Vec<(String, PathBuf)>>,
    artifacts: Mutex<HashMap<String, (String, Vec<u8>)>>,
    kv: Mutex<HashMap<String, (Value, u64)>>,
    kv_commits: AtomicUsize,
    next: AtomicUsize,
    /// `event.render_owned`: the renderings it answers, by Event ID (text,
    /// truncated); while empty it answers method-not-found, as a host without it.
    renderings: Mutex<HashMap<String, (String, bool)>>,
    /// The `event.render_owned` requests, in order.
    render_requests: Mutex<Vec<Value>>,
    /// `secret.resolve`'s answers: (connection, secret) → value.
    secrets: Mutex<HashMap<(String, String), String>>,
    /// `secret.resolve` calls, in order.
    resolves: Mutex<Vec<Value>>,
}

impl Host {
    fn persists_of(&self, id: &str) -> Vec<Value> {
        self.persists
            .lock()
            .unwrap()
            .iter()
            .filter(|p| p["execution_id"] == id)
            .cloned()
            .collect()
    }
    fn kv(&self, key: &str) -> Option<Value> {
        self.kv.lock().unwrap().get(key).map(|(v, _)| v.clone())
    }
    fn continuity(&self, work: &str) -> Value {
        self.kv(&format!("work/{work}")).unwrap_or(Value::Null)
    }
    fn set_kv(&self, key: &str, value: Value) {
        let n = self.next.fetch_add(1, Ordering::SeqCst) as u64 + 1000;
        self.kv.lock().unwrap().insert(key.to_string(), (value, n));
    }
    fn artifact(&self, id: &str) -> (String, Vec<u8>) {
        self.artifacts.lock().unwrap().get(id).cloned().unwrap()
    }
}

async fn serve_host(h: Arc<Host>, request: Request) -> Result<Value, RpcError> {
    let p = request.params_value()?;
    match request.method.as_str() {
        "execution.persist_recovery" => {
            let data = &p["recovery"]["data"];
            if data["pid"].as_i64().unwrap_or(0) != 0 {
                let dir = PathBuf::from(data["segment_dir"].as_str().unwrap_or(""));
                for (name, target) in h.plant.lock().unwrap().iter() {
                    std::os::unix::fs::symlink(target, dir.join(name)).unwrap();
                }
            }
            h.persists.lock().unwrap().push(p);
            Ok(json!({}))
        }
        "kv.get" => {
            let key = p["key"].as_str().unwrap_or("");
            match h.kv.lock().unwrap().get(key) {
                Some((v, n)) => Ok(json!({"value": v, "version": format!("v{n}")})),
                None => Ok(json!({})),
            }
        }
        "kv.commit" => {
            let mut kv = h.kv.lock().unwrap();
            for c in p["checks"].as_array().cloned().unwrap_or_default() {
                let key = c["key"].as_str().unwrap_or("");
                let now = kv.get(key).map(|(_, n)| format!("v{n}"));
                let ok = match (c.get("version").and_then(Value::as_str), now) {
                    (Some(want), Some(have)) => want == have,
                    (None, None) => c["absent"] == true,
                    _ => false,
                };
                if !ok {
                    return Err(RpcError::new(
                        protocol::Code::Conflict,
                        "check failed (test)",
                    ));
                }
            }
            for put in p["puts"].as_array().cloned().unwrap_or_default() {
                let n = h.next.fetch_add(1, Ordering::SeqCst) as u64;
                kv.insert(
                    put["key"].as_str().unwrap().to_string(),
                    (put["value"].clone(), n),
                );
            }
            for del in p["deletes"].as_array().cloned().unwrap_or_default() {
                kv.remove(del["key"].as_str().unwrap());
            }
            h.kv_commits.fetch_add(1, Ordering::SeqCst);
            Ok(json!({}))
        }
        "event.render_owned" => {
            let renderings = h.renderings.lock().unwrap().clone();
            if renderings.is_empty() {
                return Err(RpcError::method_not_found("event.render_owned"));
            }
            h.render_requests.lock().unwrap().push(p.clone());
            let events: Vec<Value> = p["events"]
                .as_array()
                .unwrap()
                .iter()
                .map(|e| {
                    let id = e["id"].as_str().unwrap();
                    match renderings.get(id) {
                        Some((text, cut)) => json!({"id": id, "text": text, "truncated": cut,
                                                   "rendered_by": "tracker"}),
                        None => json!({ "id": id }),
                    }
                })
                .collect();
            Ok(json!({ "events": events }))
        }
        "artifact.create" => {
            let id = format!("art-{}", h.next.fetch_add(1, Ordering::SeqCst));
            h.artifacts.lock().unwrap().insert(
                id.clone(),
                (p["name"].as_str().unwrap_or("").into(), Vec::new()),
            );
            Ok(json!({"artifact_id": id}))
        }
        "artifact.write" => {
            let w: protocol::wire::ArtifactWriteParams = request.params()?;
            let mut all = h.artifacts.lock().unwrap();
            let a = all.get_mut(&w.artifact_id).unwrap();
            a.1.extend_from_slice(&w.data);
            Ok(json!({"size": a.1.len()}))
        }
        "secret.resolve" => {
            h.resolves.lock().unwrap().push(p.clone());
            let connection = p["connection"].as_str().unwrap_or("");
            let known = h.secrets.lock().unwrap();
            let mut values = serde_json::Map::new();
            for name in p["names"].as_array().cloned().unwrap_or_default() {
                let name = name.as_str().unwrap_or("").to_string();
                let Some(v) = known.get(&(connection.to_string(), name.clone())) else {
                    return Err(RpcError::new(
                        protocol::Code::NotFound,
                        format!("connection {connection:?} has no secret {name:?} (test)"),
                    ));
                };
                values.insert(name, json!(v));
            }
            Ok(json!({ "values": values }))
        }
        "artifact.commit" => {
            let id = p["artifact_id"].as_str().unwrap().to_string();
            let size = h.artifacts.lock().unwrap().get(&id).unwrap().1.len();
            Ok(json!({"artifact_id": id, "size": size}))
        }
        other => Err(RpcError::method_not_found(other)),
    }
}

struct Ext {
    child: Child,
    peer: Peer,
}

impl Ext {
    async fn start(h: &Arc<Host>, s: &Scratch) -> Ext {
        Ext::start_with(h, s, &[]).await
    }

    /// Starts the extension with a small environment of its own (as the host's
    /// sanitized one), plus names that must never reach claude.
    async fn start_with(h: &Arc<Host>, s: &Scratch, extra: &[(&str, &str)]) -> Ext {
        let mut cmd = Command::new(EXE);
        cmd.env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .env("HOME", s.join("home"))
            .env("CLAUDE_CONFIG_DIR", s.claude_dir())
            .env("ANTHROPIC_API_KEY", "sk-must-not-leak")
            .env("CLAUDECODE", "1")
            .env("CLAUDE_CODE_ENTRYPOINT", "cli")
            .env("SOME_SERVICE_TOKEN", "tok-must-not-leak");
        for (k, v) in extra {
            cmd.env(k, v);
        }
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .process_group(0)
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let stdin = child.stdin.take().unwrap();
        let stdout = child.stdout.take().unwrap();
        let host_h = Arc::clone(h);
        let host = FnHandler(move |request: Request| serve_host(Arc::clone(&host_h), request));
        let peer = connect(stdout, stdin, host, Options::named("claude-code extension"));
        let init = within(peer.call(
            "initialize",
            &json!({
                "protocol_versions": [1],
                "host": {"name": "test-host", "version": "0"},
                "state_dir": s.state(),
                "executor_dirs": {},
            }),
        ))
        .await
        .unwrap();
        assert_eq!(init["protocol_version"], 1);
        let file: Value = serde_json::from_str(oc_claude_code::MANIFEST).unwrap();
        assert_eq!(init["manifest"], file);
        Ext { child, peer }
    }

    async fn call(&self, method: &str, params: Value) -> Result<Value, CallError> {
        within(self.peer.call(method, &params)).await
    }

    async fn run(&self, req: Value) -> Result<Value, CallError> {
        self.call("executor.run", json!({ "run": req })).await
    }

    async fn wait(&self, id: &str) -> ExecutorWaitResult {
        let v = self.wait_raw(id).await.unwrap();
        let r: ExecutorWaitResult = serde_json::from_value(v).unwrap();
        r.validate().unwrap();
        r
    }

    /// `executor.interrupt` of `id` at epoch 1, giving `reason`.
    async fn interrupt(&self, id: &str, reason: &str) {
        self.call(
            "executor.interrupt",
            json!({"executor": "claude-code", "execution_id": id, "epoch": 1, "reason": reason}),
        )
        .await
        .unwrap();
    }

    /// `executor.stop` of `id` at epoch 1: its answer.
    async fn stop(&self, id: &str) -> Value {
        self.call(
            "executor.stop",
            json!({"executor": "claude-code", "execution_id": id, "epoch": 1}),
        )
        .await
        .unwrap()
    }

    async fn wait_raw(&self, id: &str) -> Result<Value, CallError> {
        self.call(
            "executor.wait",
            json!({"executor": "claude-code", "execution_id": id}),
        )
        .await
    }

    async fn inject(&self, id: &str, epoch: u64, event: Value) -> Result<Value, CallError> {
        self.call(
            "executor.inject",
            json!({"executor": "claude-code", "execution_id": id, "epoch": epoch, "event": event}),
        )
        .await
    }

    /// One whole turn: run, then wait.
    async fn turn(&self, req: Value) -> ExecutorWaitResult {
        let id = req["execution_id"].as_str().unwrap().to_string();
        self.run(req).await.unwrap();
        self.wait(&id).await
    }

    /// SIGKILL to the extension's whole process group (a crash).
    async fn crash(mut self) {
        let pid = self.child.id().unwrap() as i32;
        let _ = nix::sys::signal::killpg(
            nix::unistd::Pid::from_raw(pid),
            nix::sys::signal::Signal::SIGKILL,
        );
        let _ = within(self.child.wait()).await;
    }
}

fn event(id: &str, body: &str) -> Value {
    json!({"id": id, "type": "tracker.comment", "source": "tracker/s",
           "payload": {"schema": "tracker.comment.v1",
                       "data": {"author": "ann", "number": 42, "title": "Make it faster", "url": "https://tracker.example/42", "body": body}}})
}

fn request(id: &str, epoch: u64, work: &str, config: &Value) -> Value {
    json!({
        "executor": "claude-code",
        "execution_id": id,
        "epoch": epoch,
        "attempt": 1,
        "work": {"id": work, "scope_id": "scope-a", "kind": "task", "keys": ["acme/api#42"]},
        "binding": {"name": "agent", "executor": "claude-code", "config": config},
        "config": config,
        "inputs": [event(&format!("{id}-in"), "please make it faster")],
        "toolbelt": {"endpoint": "", "token": ""},
    })
}

fn transcript_dir(s: &Scratch, cwd: &str) -> PathBuf {
    let project: String = cwd
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect();
    s.claude_dir().join("projects").join(project)
}

/// The first user message the fake took in for `session` (the prompt).
fn first_prompt(s: &Scratch, cwd: &str, session: &str) -> String {
    let text =
        std::fs::read_to_string(transcript_dir(s, cwd).join(format!("{session}.jsonl"))).unwrap();
    let first: Value = serde_json::from_str(text.lines().next().unwrap()).unwrap();
    first["message"]["content"][0]["text"]
        .as_str()
        .unwrap()
        .to_string()
}

/// All user message texts of a session's transcript.
fn prompts(s: &Scratch, cwd: &str, session: &str) -> Vec<String> {
    let text =
        std::fs::read_to_string(transcript_dir(s, cwd).join(format!("{session}.jsonl"))).unwrap();
    text.lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|v| v["type"] == "user")
        .map(|v| {
            v["message"]["content"][0]["text"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect()
}

fn group_alive(pgid: i64) -> Vec<i64> {
    let mut left = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|n| n.parse::<i64>().ok()) else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        let after = &stat[stat.rfind(')').unwrap() + 1..];
        let fields: Vec<&str> = after.split_whitespace().collect();
        if fields[2].parse::<i64>().unwrap() == pgid && fields[0] != "Z" {
            left.push(pid);
        }
    }
    left
}

const MCP_STUB: &str = r#"#!/bin/sh
dir=$(dirname "$0")
printf '%s %s\n' "$OS_ENDPOINT" "$(cat "$OS_TOKEN_FILE")" >> "$dir/seen"
while IFS= read -r line; do
  id=$(printf '%s' "$line" | sed -n 's/.*"id":\([0-9][0-9]*\).*/\1/p')
  [ -z "$id" ] && continue
  case "$line" in
    *'"initialize"'*) r='{"protocolVersion":"2025-06-18","capabilities":{"tools":{}},"serverInfo":{"name":"stub","version":"0"}}' ;;
    *'"tools/list"'*) r='{"tools":[{"name":"read_context","inputSchema":{"type":"object"}},{"name":"wait","inputSchema":{"type":"object"}}]}' ;;
    *'"tools/call"'*) r='{"content":[{"type":"text","text":"the context of the work"}]}' ;;
    *) r='{}' ;;
  esac
  printf '{"jsonrpc":"2.0","id":%s,"result":%s}\n' "$id" "$r"
done
"#;

#[tokio::test]
async fn the_invocation_the_mcp_config_and_a_sanitized_environment() {
    let s = Scratch::new("invocation");
    let h = Arc::new(Host::default());
    let ext = Ext::start(&h, &s).await;
    let tb = s.join("toolbelt");
    std::fs::create_dir_all(&tb).unwrap();
    let stub = tb.join("open-conduit");
    std::fs::write(&stub, MCP_STUB).unwrap();
    std::fs::set_permissions(&stub, std::fs::Permissions::from_mode(0o755)).unwrap();
    let config = s.config(json!({"extra_args": ["--add-dir", "/tmp"], "playbook": "work-item"}));
    let mut req = request("ex-inv", 1, "w-inv", &config);
    req["toolbelt"] =
        json!({"endpoint": "/run/oc/toolbelt.sock", "token": "tok-secret-1", "dir": tb});
    let r = ext.turn(req).await;
    assert_eq!(r.outcome, Outcome::Handoff, "{r:?}");

    // Recovery intent first (no pid yet), then the launched wrapper.
    let persisted = h.persists_of("ex-inv");
    assert_eq!(persisted.len(), 2, "{persisted:?}");
    assert_eq!(
        persisted[0]["recovery"]["schema"],
        "open-conduit.claudecode.recovery.v1"
    );
    assert_eq!(persisted[0]["recovery"]["data"]["pid"], 0);
    let seg = s.segment("ex-inv", 1);
    assert_eq!(
        PathBuf::from(
            persisted[0]["recovery"]["data"]["segment_dir"]
                .as_str()
                .unwrap()
        ),
        seg
    );
    assert!(persisted[1]["recovery"]["data"]["pid"].as_i64().unwrap() > 1);

    // The invocation.
    let launches = s.launches();
    assert_eq!(launches.len(), 1);
    let argv = &launches[0]["argv"];
    let a: Vec<&str> = argv
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_str().unwrap())
        .collect();
    assert_eq!(
        &a[1..12],
        [
            "-p",
            "--model",
            "opus",
            "--permission-mode",
            "bypassPermissions",
            "--input-format",
            "stream-json",
            "--output-format",
            "stream-json",
            "--verbose",
            "--replay-user-messages"
        ]
    );
    assert!(has_arg(argv, "--json-schema"));
    let session = arg_after(argv, "--session-id").unwrap();
    assert_eq!(session.len(), 36);
    assert!(arg_after(argv, "--resume").is_none());
    let mcp_path = seg.join("mcp.json");
    assert_eq!(
        arg_after(argv, "--mcp-config").unwrap(),
        mcp_path.display().to_string()
    );
    // The toolbelt's tools are allowed whatever the permission mode.
    assert_eq!(
        arg_after(argv, "--allowedTools").as_deref(),
        Some("mcp__open-conduit")
    );
    assert_eq!(&a[a.len() - 2..], ["--add-dir", "/tmp"]);

    // The MCP config names the toolbelt's server and the token file, never the token.
    let mcp_text = std::fs::read_to_string(&mcp_path).unwrap();
    assert!(!mcp_text.contains("tok-secret-1"));
    let mcp: Value = serde_json::from_str(&mcp_text).unwrap();
    let server = &mcp["mcpServers"]["open-conduit"];
    assert_eq!(server["command"], stub.display().to_string());
    assert_eq!(server["args"], json!(["mcp"]));
    assert_eq!(server["env"]["OS_ENDPOINT"], "/run/oc/toolbelt.sock");
    let token_file = PathBuf::from(server["env"]["OS_TOKEN_FILE"].as_str().unwrap());
    assert_eq!(
        std::fs::read_to_string(&token_file).unwrap(),
        "tok-secret-1"
    );
    let mode = std::fs::metadata(&token_file).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600);

    // The fake drove the stub server: initialize, tools/list, read_context.
    let exchanges = s.mcp_exchanges();
    assert_eq!(exchanges.len(), 1, "{exchanges:?}");
    let ex = exchanges[0]["mcp"].as_array().unwrap();
    assert_eq!(ex[0]["answer"]["result"]["serverInfo"]["name"], "stub");
    assert_eq!(
        ex[1]["answer"]["result"]["tools"][0]["name"],
        "read_context"
    );
    assert_eq!(
        ex[2]["answer"]["result"]["content"][0]["text"],
        "the context of the work"
    );
    let seen = std::fs::read_to_string(tb.join("seen")).unwrap();
    assert_eq!(seen.trim(), "/run/oc/toolbelt.sock tok-secret-1");

    // claude's environment: sanitized, with the identity and no credential.
    let env = launches[0]["env"].as_object().unwrap();
    for gone in [
        "ANTHROPIC_API_KEY",
        "CLAUDECODE",
        "CLAUDE_CODE_ENTRYPOINT",
        "SOME_SERVICE_TOKEN",
        "OS_TOKEN",
        "OS_TOKEN_FILE",
        "OS_ENDPOINT",
    ] {
        assert!(!env.contains_key(gone), "{gone} reached claude");
    }
    for (k, v) in env {
        assert!(
            !v.as_str().unwrap().contains("tok-secret-1"),
            "{k} carries the token"
        );
        assert!(!v.as_str().unwrap().contains("must-not-leak"), "{k} leaked");
    }
    assert_eq!(env["OS_SCOPE_ID"], "scope-a");
    assert_eq!(env["OS_WORK_ID"], "w-inv");
    assert_eq!(env["OS_EXECUTION_ID"], "ex-inv");
    assert_eq!(env["OS_ATTEMPT"], "1");
    assert_eq!(env["CLAUDE_CODE_AUTO_COMPACT_WINDOW"], "600000");
    assert_eq!(
        env["CLAUDE_CONFIG_DIR"],
        s.claude_dir().display().to_string()
    );
    // The private per-Work directory is the working directory.
    let cwd = launches[0]["cwd"].as_str().unwrap().to_string();
    assert_eq!(PathBuf::from(&cwd), s.state().join("work").join("w-inv"));

    // The prompt: the playbook, the arguments and the rendered input.
    let p = first_prompt(&s, &cwd, &session);
    assert!(p.starts_with("/open-conduit:work-item 42\n\n## Already waiting\n\n### tracker.comment\nauthor: ann\nnumber: 42\ntitle: Make it faster\nurl: https://tracker.example/42\n\nplease make it faster"), "{p}");

    // The result: status, usage, data and the output as artifacts.
    assert_eq!(r.summary, "did a turn");
    let usage = r.usage.clone().unwrap();
    assert_eq!(
        (
            usage.input_tokens,
            usage.output_tokens,
            usage.cached_tokens,
            usage.cache_creation_tokens
        ),
        (100, 50, 1000, 200)
    );
    assert!((usage.cost_usd.unwrap() - 0.01).abs() < 1e-9);
    let data = r.data.clone().unwrap();
    assert_eq!(data.schema, "core.turn.v1");
    assert_eq!(data.data["state"], "building");
    assert_eq!(data.data["kind"], "fresh");
    assert_eq!(data.data["tokens"]["cache_read"], 1000);
    assert_eq!(data.data["model_calls"], 1);
    assert_eq!(data.data["exit_code"], 0);
    assert!(data.data.get("session").is_none() && data.data.get("handoff").is_none());
    assert!(
        !data.data.to_string().contains(&session),
        "the data carries the session"
    );
    let (name, bytes) = h.artifact(&r.artifacts[0]);
    assert_eq!(name, "out.jsonl");
    assert!(String::from_utf8(bytes)
        .unwrap()
        .contains("\"type\":\"result\""));
    assert_eq!(data.data["artifacts"]["transcript"], json!(r.artifacts[0]));

    // The MCP server left in claude's group was ended with it.
    let meta: Value =
        serde_json::from_slice(&std::fs::read(seg.join("meta.json")).unwrap()).unwrap();
    assert_eq!(
        group_alive(meta["pgid"].as_i64().unwrap()),
        Vec::<i64>::new()
    );

    // Continuity: the session, the note, the turn, the attach command.
    let c = h.continuity("w-inv");
    assert_eq!(c["session"], json!(session));
    assert_eq!(c["turns"], 1);
    assert_eq!(c["note"], json!(format!("handoff note from {session}")));
    assert!(c.get("in_flight").is_none(), "{c}");
    assert_eq!(c["attach"][1], "--resume");

    // Another wait answers the same; a second run of the execution launches nothing.
    assert_eq!(ext.wait("ex-inv").await, r);
    ext.run(request("ex-inv", 1, "w-inv", &config))
        .await
        .unwrap();
    assert_eq!(s.launches().len(), 1);
}

#[tokio::test]
async fn resumed_and_fresh_sessions_report_per_turn_usage() {
    let s = Scratch::new("usage");
    let h = Arc::new(Host::default());
    let ext = Ext::start(&h, &s).await;
    let config = s.config(json!({"auto_compact_tokens": 0}));
    let r1 = ext.turn(request("ex-u1", 1, "w-u", &config)).await;
    assert_eq!(r1.outcome, Outcome::Handoff, "{r1:?}");
    let r2 = ext.turn(request("ex-u2", 1, "w-u", &config)).await;
    assert_eq!(r2.outcome, Outcome::Handoff, "{r2:?}");
    let launches = s.launches();
    let session = arg_after(&launches[0]["argv"], "--session-id").unwrap();
    // The second turn resumes the same session.
    assert_eq!(
        arg_after(&launches[1]["argv"], "--resume").unwrap(),
        session
    );
    assert!(arg_after(&launches[1]["argv"], "--session-id").is_none());
    assert!(!launches[1]["env"]
        .as_object()
        .unwrap()
        .contains_key("CLAUDE_CODE_AUTO_COMPACT_WINDOW"));
    // The session reported its cumulative cost and each process's tokens; each
    // turn's usage is its own.
    for r in [&r1, &r2] {
        let u = r.usage.clone().unwrap();
        assert_eq!(
            (
                u.input_tokens,
                u.output_tokens,
                u.cached_tokens,
                u.cache_creation_tokens
            ),
            (100, 50, 1000, 200),
            "{r:?}"
        );
        assert!((u.cost_usd.unwrap() - 0.01).abs() < 1e-9);
    }
    assert_eq!(r2.data.clone().unwrap().data["kind"], "resume");
    let cwd = launches[1]["cwd"].as_str().unwrap();
    let texts = prompts(&s, cwd, &session);
    assert_eq!(texts.len(), 2);
    assert!(
        texts[1].starts_with("42 events\n\n## Since your last turn\n\n### tracker.comment"),
        "{}",
        texts[1]
    );
    let c = h.continuity("w-u");
    assert_eq!(c["turns"], 2);
    assert_eq!(c["totals"]["tokens"]["input"], 200);

    // A wake resumes the same attempt as a new --resume segment.
    ext.call(
        "executor.resume",
        json!({"executor": "claude-code", "execution_id": "ex-u2", "epoch": 2,
               "inputs": [event("ev-wake", "the owner answered")]}),
    )
    .await
    .unwrap();
    let r3 = ext.wait("ex-u2").await;
    assert_eq!(r3.outcome, Outcome::Handoff, "{r3:?}");
    assert_ne!(r3, r2);
    assert!(s.segment("ex-u2", 2).join("result.json").exists());
    assert_eq!(
        arg_after(&s.launches()[2]["argv"], "--resume").unwrap(),
        session
    );
    let texts = prompts(&s, cwd, &session);
    assert!(texts[2].contains("the owner answered"), "{}", texts[2]);
    assert_eq!(h.continuity("w-u")["turns"], 3);

    // A turn of another Work starts its own fresh session.
    ext.turn(request("ex-other", 1, "w-other", &config)).await;
    let other = arg_after(&s.launches()[3]["argv"], "--session-id").unwrap();
    assert_ne!(other, session);
}

#[tokio::test]
async fn the_prompt_shows_the_inputs_as_their_owners_render_them() {
    let s = Scratch::new("render");
    let h = Arc::new(Host::default());
    let review =
        "**ann** requested changes\n\n```diff\n@@ -1 +1 @@\n-slow()\n+fast()\n```\n> use the cache";
    h.renderings.lock().unwrap().extend([
        ("ex-r-in".to_string(), (review.to_string(), false)),
        (
            "ev-wake-r".to_string(),
            ("**bob** approved".to_string(), true),
        ),
    ]);
    let ext = Ext::start(&h, &s).await;
    let config = s.config(json!({"auto_compact_tokens": 0}));
    let mut req = request("ex-r", 1, "w-r", &config);
    req["binding"]["connection"] = json!("gh-main");
    req["inputs"]
        .as_array_mut()
        .unwrap()
        .push(event("ex-r-plain", "no owner renders this one"));
    let r = ext.turn(req).await;
    assert_eq!(r.outcome, Outcome::Handoff, "{r:?}");
    let launch = &s.launches()[0];
    let session = arg_after(&launch["argv"], "--session-id").unwrap();
    let cwd = launch["cwd"].as_str().unwrap().to_string();
    // The owner's rendering under the Event's type; the other keeps the default one.
    let p = first_prompt(&s, &cwd, &session);
    assert!(
        p.starts_with(&format!(
            "42\n\n## Already waiting\n\n### tracker.comment\n\n{review}\n\n### tracker.comment\nauthor: ann\n"
        )),
        "{p}"
    );
    assert!(p.ends_with("\nno owner renders this one\n"), "{p}");
    assert!(!p.contains("please make it faster"), "{p}");
    // The host was asked once, with the Work, the binding's connection, the bound
    // and the Events by ID (their payloads stay with the host).
    let asked = h.render_requests.lock().unwrap().clone();
    assert_eq!(asked.len(), 1, "{asked:?}");
    assert_eq!(asked[0]["work_id"], "w-r");
    assert_eq!(asked[0]["connection"], "gh-main");
    assert_eq!(asked[0]["max_bytes"], 32 * 1024);
    let ids: Vec<&str> = asked[0]["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["ex-r-in", "ex-r-plain"]);
    assert_eq!(asked[0]["events"][0]["payload"], json!({}), "{asked:?}");

    // A wake's prompt shows its inputs the same way, saying when one was cut.
    ext.call(
        "executor.resume",
        json!({"executor": "claude-code", "execution_id": "ex-r", "epoch": 2,
               "inputs": [event("ev-wake-r", "generic text of the wake")]}),
    )
    .await
    .unwrap();
    ext.wait("ex-r").await;
    let texts = prompts(&s, &cwd, &session);
    assert!(
        texts[1].ends_with("## Since your last turn\n\n### tracker.comment\n\n**bob** approved\n\n(this rendering was cut to its bound)\n"),
        "{}",
        texts[1]
    );
    assert_eq!(h.render_requests.lock().unwrap().len(), 2);
}

fn make_cold(h: &Host, work: &str) {
    let mut c = h.continuity(work);
    c["last_turn_end_ms"] = json!(protocol::time::now_ms() - 56 * 60_000);
    h.set_kv(&format!("work/{work}"), c);
}

#[tokio::test]
async fn a_cold_session_hands_off_resumes_under_cold_turns_resume_and_after_attach() {
    let s = Scratch::new("cold");
    let h = Arc::new(Host::default());
    let ext = Ext::start(&h, &s).await;
    let config = s.config(json!({}));
    ext.turn(request("ex-c1", 1, "w-c", &config)).await;
    let first = arg_after(&s.launches()[0]["argv"], "--session-id").unwrap();

    // Warm: resumes.
    ext.turn(request("ex-c2", 1, "w-c", &config)).await;
    assert_eq!(
        arg_after(&s.launches()[1]["argv"], "--resume").unwrap(),
        first
    );

    // Cold: a fresh session from the note.
    make_cold(&h, "w-c");
    let r = ext.turn(request("ex-c3", 1, "w-c", &config)).await;
    let launch = &s.launches()[2];
    let second = arg_after(&launch["argv"], "--session-id").unwrap();
    assert_ne!(second, first);
    let p = first_prompt(&s, launch["cwd"].as_str().unwrap(), &second);
    assert!(p.starts_with(&format!("42 handoff\n\n## Handoff from your last session\n\nhandoff note from {first}\n\n## Since your last turn\n\n")), "{p}");
    assert_eq!(r.data.unwrap().data["handoff_reason"], "cold");
    let c = h.continuity("w-c");
    assert_eq!(c["session"], json!(second));
    assert_eq!(c["past_sessions"], json!([first]));

    // Cold under cold_turns: resume resumes.
    make_cold(&h, "w-c");
    let resume = s.config(json!({"cold_turns": "resume"}));
    ext.turn(request("ex-c4", 1, "w-c", &resume)).await;
    assert_eq!(
        arg_after(&s.launches()[3]["argv"], "--resume").unwrap(),
        second
    );

    // Attach: claude --resume in the workspace, and the note is cleared, so
    // the next turn resumes even when cold.
    let a = ext
        .call(
            "executor.attach",
            json!({"executor": "claude-code", "work_id": "w-c", "config": config}),
        )
        .await
        .unwrap();
    assert_eq!(a["argv"], json!([FAKE, "--resume", second]));
    assert_eq!(
        PathBuf::from(a["dir"].as_str().unwrap()),
        s.state().join("work").join("w-c")
    );
    make_cold(&h, "w-c");
    ext.turn(request("ex-c5", 1, "w-c", &config)).await;
    assert_eq!(
        arg_after(&s.launches()[4]["argv"], "--resume").unwrap(),
        second
    );

    // Nothing to attach to for a Work without a session.
    let none = ext
        .call(
            "executor.attach",
            json!({"executor": "claude-code", "work_id": "w-none", "config": config}),
        )
        .await
        .unwrap_err();
    assert_eq!(none.code(), Some("nothing_to_attach"));

    // Releasing the Work's continuity (forget without an execution).
    ext.call(
        "executor.forget",
        json!({"executor": "claude-code", "work_id": "w-c"}),
    )
    .await
    .unwrap();
    assert_eq!(h.continuity("w-c"), Value::Null);
    assert!(!s.state().join("runs").join("ex-c1").exists());
}

#[tokio::test]
async fn a_large_session_hands_off_by_size_unless_handoff_tokens_is_zero() {
    let s = Scratch::new("large");
    let h = Arc::new(Host::default());
    let ext = Ext::start(&h, &s).await;
    let big = s.config(json!({"env": {"FAKE_CLAUDE_USAGE": "10,5,400000,100"}}));
    ext.turn(request("ex-l1", 1, "w-l", &big)).await;
    assert_eq!(h.continuity("w-l")["context_tokens"], 400_115);
    let first = arg_after(&s.launches()[0]["argv"], "--session-id").unwrap();

    // Warm but large: a fresh session from the note.
    let r = ext.turn(request("ex-l2", 1, "w-l", &big)).await;
    let second = arg_after(&s.launches()[1]["argv"], "--session-id").unwrap();
    assert_ne!(first, second);
    assert_eq!(r.data.unwrap().data["handoff_reason"], "size");

    // handoff_tokens: 0 turns it off: the large session resumes.
    let off =
        s.config(json!({"handoff_tokens": 0, "env": {"FAKE_CLAUDE_USAGE": "10,5,400000,100"}}));
    ext.turn(request("ex-l3", 1, "w-l", &off)).await;
    assert_eq!(
        arg_after(&s.launches()[2]["argv"], "--resume").unwrap(),
        second
    );

    // A smaller session resumes.
    ext.turn(request("ex-l4", 1, "w-small", &s.config(json!({}))))
        .await;
    ext.turn(request("ex-l5", 1, "w-small", &s.config(json!({}))))
        .await;
    assert!(arg_after(&s.launches()[4]["argv"], "--resume").is_some());
}

#[tokio::test]
async fn an_injection_is_consumed_only_when_echoed() {
    let s = Scratch::new("inject");
    let h = Arc::new(Host::default());
    let ext = Ext::start(&h, &s).await;
    let hold = s.join("hold");
    let config = s.config(json!({"env": {"FAKE_CLAUDE_HOLD": hold}}));
    ext.run(request("ex-i", 1, "w-i", &config)).await.unwrap();
    let out = s.segment("ex-i", 1).join("out.jsonl");
    until("the fake to be in its turn", || {
        std::fs::read_to_string(&out)
            .unwrap_or_default()
            .contains("\"assistant\"")
    })
    .await;
    ext.inject("ex-i", 1, event("ev-late", "one more thing"))
        .await
        .unwrap();
    // A retried dispatch is not written twice.
    ext.inject("ex-i", 1, event("ev-late", "one more thing"))
        .await
        .unwrap();
    // A lower epoch is refused.
    let stale = ext.inject("ex-i", 0, event("ev-x", "x")).await.unwrap_err();
    assert_eq!(stale.code(), Some("conflict"));
    until("the echo", || {
        std::fs::read_to_string(&out)
            .unwrap_or_default()
            .contains("ev-late")
    })
    .await;
    std::fs::write(&hold, b"").unwrap();
    let r = ext.wait("ex-i").await;
    assert_eq!(r.outcome, Outcome::Handoff, "{r:?}");
    assert_eq!(r.consumed_inputs, ["ev-late"]);
    let data = r.data.unwrap().data;
    assert_eq!(data["injected"], json!({"accepted": 1, "consumed": 1}));
    let session = arg_after(&s.launches()[0]["argv"], "--session-id").unwrap();
    let texts = prompts(&s, s.launches()[0]["cwd"].as_str().unwrap(), &session);
    assert_eq!(texts.len(), 2, "{texts:?}");
    assert!(
        texts[1].starts_with("## Arrived during this turn"),
        "{}",
        texts[1]
    );
    assert!(texts[1].contains("one more thing"));

    // After the result, and for an execution this process does not hold: not accepting.
    let after = ext
        .inject("ex-i", 1, event("ev-after", "x"))
        .await
        .unwrap_err();
    assert_eq!(after.code(), Some("not_accepting"));
    let unknown = ext
        .inject("ex-nobody", 1, event("ev-y", "x"))
        .await
        .unwrap_err();
    assert_eq!(unknown.code(), Some("not_accepting"));

    // An injection that was accepted but whose echo never came is not consumed:
    // a segment whose claude dies before taking it in.
    let crash =
        s.config(json!({"env": {"FAKE_CLAUDE_HOLD": s.join("never"), "FAKE_CLAUDE_MODE": "hang"}}));
    ext.run(request("ex-i2", 1, "w-i2", &crash)).await.unwrap();
    let out2 = s.segment("ex-i2", 1).join("out.jsonl");
    until("the fake to hang", || {
        std::fs::read_to_string(&out2)
            .unwrap_or_default()
            .contains("\"assistant\"")
    })
    .await;
    ext.inject("ex-i2", 1, event("ev-lost", "lost"))
        .await
        .unwrap();
    ext.interrupt("ex-i2", "test").await;
    let r = ext.wait("ex-i2").await;
    assert_eq!(r.outcome, Outcome::Failed);
    assert!(r.consumed_inputs.is_empty(), "{r:?}");
    assert_eq!(
        r.data.unwrap().data["injected"],
        json!({"accepted": 1, "consumed": 0})
    );
}

/// `executor.live` of a running segment: claude's stream-json lines so far (and its
/// stderr), then `not_live` once the turn has ended.
#[tokio::test]
async fn a_running_turn_shows_its_stream_live() {
    let s = Scratch::new("live");
    let h = Arc::new(Host::default());
    let ext = Ext::start(&h, &s).await;
    let hold = s.join("hold");
    let config = s.config(json!({"env": {"FAKE_CLAUDE_HOLD": hold}}));
    ext.run(request("ex-live", 1, "w-live", &config))
        .await
        .unwrap();
    let live = |tail: u64| {
        ext.call(
            "executor.live",
            json!({"executor": "claude-code", "execution_id": "ex-live", "tail": tail}),
        )
    };
    let stream = within(async {
        loop {
            let got: protocol::wire::ExecutorLiveResult =
                serde_json::from_value(live(0).await.unwrap()).unwrap();
            let out = got.outputs.iter().find(|o| o.name == "out.jsonl").cloned();
            if let Some(o) =
                out.filter(|o| String::from_utf8_lossy(&o.tail).contains("\"assistant\""))
            {
                return (got, o);
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    let (all, out) = stream;
    assert_eq!(out.media_type, "application/x-ndjson");
    let on_disk = std::fs::read(s.segment("ex-live", 1).join("out.jsonl")).unwrap();
    assert!(on_disk.starts_with(&out.tail), "the raw file's bytes");
    let first: Value =
        serde_json::from_slice(out.tail.split(|b| *b == b'\n').next().unwrap()).unwrap();
    assert_eq!(first["type"], "system", "{first}");
    let err = all.outputs.iter().find(|o| o.name == "err.log").unwrap();
    assert_eq!(err.media_type, "text/plain");
    // The last bytes only, when fewer are asked.
    let short: protocol::wire::ExecutorLiveResult =
        serde_json::from_value(live(8).await.unwrap()).unwrap();
    assert_eq!(short.outputs[0].tail.len(), 8, "{short:?}");
    assert!(short.outputs[0].size >= out.size);

    std::fs::write(&hold, b"").unwrap();
    ext.wait("ex-live").await;
    let e = live(0).await.unwrap_err();
    assert_eq!(e.code(), Some("not_live"), "{e}");
}

#[tokio::test]
async fn a_usage_limit_hints_the_retry_and_holds_the_executor() {
    let s = Scratch::new("limit");
    let h = Arc::new(Host::default());
    let ext = Ext::start(&h, &s).await;
    let reset_s = protocol::time::now_ms() / 1000 + 3600;
    let config = s.config(json!({"env": {"FAKE_CLAUDE_MODE": "usage_limit", "FAKE_CLAUDE_RATE_LIMIT": reset_s.to_string()}}));
    let r = ext.turn(request("ex-lim", 1, "w-lim", &config)).await;
    assert_eq!(r.outcome, Outcome::Failed);
    let expected = protocol::time::format_rfc3339_ms(reset_s * 1000 + 120_000);
    assert_eq!(r.retry_hint.clone().unwrap().reset_at, expected, "{r:?}");
    let data = r.data.clone().unwrap().data;
    assert_eq!(data["limited"], true);
    assert_eq!(data["reason"], "usage_limit");
    assert_eq!(h.kv("hold").unwrap()["reset_at"], json!(expected));
    assert_eq!(s.launches().len(), 1);

    // While the hold lasts, a run (any Work) fails the same way and launches nothing.
    let ok = s.config(json!({}));
    let r2 = ext.turn(request("ex-lim2", 1, "w-other", &ok)).await;
    assert_eq!(r2.outcome, Outcome::Failed);
    assert_eq!(r2.retry_hint.unwrap().reset_at, expected);
    assert_eq!(s.launches().len(), 1);
    assert!(!s.state().join("runs").join("ex-lim2").exists());

    // A restarted extension reads the hold from the KV.
    ext.crash().await;
    let ext = Ext::start(&h, &s).await;
    let r3 = ext.turn(request("ex-lim3", 1, "w-other", &ok)).await;
    assert_eq!(r3.retry_hint.unwrap().reset_at, expected);
    assert_eq!(s.launches().len(), 1);
}

#[tokio::test]
async fn a_limit_worded_with_a_time_of_day_retries_after_it_or_after_thirty_minutes() {
    let s = Scratch::new("limit30");
    let h = Arc::new(Host::default());
    let ext = Ext::start(&h, &s).await;
    let before = protocol::time::now_ms();
    // The wording's reset is a time of day; with no rate_limit_event the
    // reset comes from "resets 9:40am": the next 09:40 (UTC) plus two minutes.
    let config = s.config(json!({"env": {"FAKE_CLAUDE_MODE": "usage_limit"}}));
    let r = ext.turn(request("ex-w", 1, "w-w", &config)).await;
    let at = protocol::time::parse_rfc3339_ms(&r.retry_hint.unwrap().reset_at).unwrap();
    let day = 86_400_000;
    let nine_forty = (before / day) * day + (9 * 60 + 40) * 60_000;
    let next = if nine_forty <= before {
        nine_forty + day
    } else {
        nine_forty
    };
    assert!(
        at == next + 120_000 || at == next + day + 120_000,
        "{at} vs {next}"
    );

    // A limit whose reset is unknown: retried after 30 minutes.
    h.kv.lock().unwrap().remove("hold");
    ext.crash().await;
    let ext = Ext::start(&h, &s).await;
    let before = protocol::time::now_ms();
    let unknown = s.config(json!({"env": {"FAKE_CLAUDE_MODE": "usage_limit", "FAKE_CLAUDE_LIMIT_TEXT": "usage_limit_reached"}}));
    let r = ext.turn(request("ex-w2", 1, "w-w2", &unknown)).await;
    let after = protocol::time::now_ms();
    let at = protocol::time::parse_rfc3339_ms(&r.retry_hint.unwrap().reset_at).unwrap();
    assert!(
        at >= before + 30 * 60_000 - 1000 && at <= after + 30 * 60_000,
        "{at}"
    );
    assert_eq!(s.launches().len(), 2);
}

#[tokio::test]
async fn failures_an_interrupt_and_a_missing_binary() {
    let s = Scratch::new("failures");
    let h = Arc::new(Host::default());
    let ext = Ext::start(&h, &s).await;
    let failed = |r: &ExecutorWaitResult, starts: &str| {
        assert_eq!(r.outcome, Outcome::Failed, "{r:?}");
        assert!(r.error.starts_with(starts), "{}", r.error);
    };
    let r = ext
        .turn(request(
            "ex-err",
            1,
            "w-f",
            &s.config(json!({"env": {"FAKE_CLAUDE_MODE": "error"}})),
        ))
        .await;
    failed(&r, "claude reported an error: something broke");
    // A toolbelt call claude refused: no success, whatever the status said.
    let r = ext
        .turn(request(
            "ex-denied",
            1,
            "w-fd",
            &s.config(
                json!({"env": {"FAKE_CLAUDE_MODE": "denied", "FAKE_CLAUDE_STATE": "finished"}}),
            ),
        ))
        .await;
    failed(
        &r,
        "claude refused the toolbelt (mcp__open-conduit__declare_outcome)",
    );
    assert_eq!(r.data.clone().unwrap().data["reason"], "toolbelt_denied");
    let r = ext
        .turn(request(
            "ex-crash",
            1,
            "w-f2",
            &s.config(json!({"env": {"FAKE_CLAUDE_MODE": "crash"}})),
        ))
        .await;
    failed(&r, "claude ended without a result: exited with status 3");
    assert_eq!(r.data.unwrap().data["reason"], "no_result");
    let r = ext
        .turn(request(
            "ex-nost",
            1,
            "w-f3",
            &s.config(json!({"env": {"FAKE_CLAUDE_MODE": "no_status"}})),
        ))
        .await;
    failed(&r, "the turn ended without a status");
    let r = ext
        .turn(request(
            "ex-fin",
            1,
            "w-f4",
            &s.config(
                json!({"env": {"FAKE_CLAUDE_STATE": "finished", "FAKE_CLAUDE_REPORT": "all done"}}),
            ),
        ))
        .await;
    assert_eq!(r.outcome, Outcome::Completed, "{r:?}");
    assert_eq!(r.data.unwrap().data["report"], "all done");
    let r = ext
        .turn(request(
            "ex-weird",
            1,
            "w-f5",
            &s.config(json!({"env": {"FAKE_CLAUDE_STATE": "dancing"}})),
        ))
        .await;
    failed(&r, "the turn ended with an unknown state");

    // A lost session fails the turn and the next one starts afresh.
    let lose = s.config(json!({"env": {"FAKE_CLAUDE_MODE": "lose_session"}}));
    let r = ext.turn(request("ex-lose", 1, "w-f4", &lose)).await;
    failed(&r, "claude ended without a result");
    assert!(r.error.contains("no conversation found"), "{}", r.error);
    let n = s.launches().len();
    ext.turn(request("ex-after-lose", 1, "w-f4", &s.config(json!({}))))
        .await;
    let l = &s.launches()[n];
    assert!(arg_after(&l["argv"], "--session-id").is_some());
    assert!(first_prompt(
        &s,
        l["cwd"].as_str().unwrap(),
        &arg_after(&l["argv"], "--session-id").unwrap()
    )
    .starts_with("42 handoff"));

    // An interrupt: TERM to the group.
    let hang = s.config(json!({"env": {"FAKE_CLAUDE_MODE": "hang"}}));
    ext.run(request("ex-hang", 1, "w-h", &hang)).await.unwrap();
    let seg = s.segment("ex-hang", 1);
    until("the fake to hang", || {
        std::fs::read_to_string(seg.join("out.jsonl"))
            .unwrap_or_default()
            .contains("\"assistant\"")
    })
    .await;
    ext.interrupt("ex-hang", "operator").await;
    let r = ext.wait("ex-hang").await;
    failed(&r, "interrupted (operator): killed by signal 15 (SIGTERM)");
    let meta: Value =
        serde_json::from_slice(&std::fs::read(seg.join("meta.json")).unwrap()).unwrap();
    assert_eq!(
        group_alive(meta["pgid"].as_i64().unwrap()),
        Vec::<i64>::new()
    );

    // Stop with evidence, then forget.
    ext.run(request("ex-stop", 1, "w-s", &hang)).await.unwrap();
    let stopped = ext.stop("ex-stop").await;
    assert_eq!(stopped["stopped"], true, "{stopped}");
    failed(&ext.wait("ex-stop").await, "stopped: ");
    ext.call(
        "executor.forget",
        json!({"executor": "claude-code", "work_id": "w-s", "execution_id": "ex-stop"}),
    )
    .await
    .unwrap();
    assert!(!s.state().join("runs").join("ex-stop").exists());

    // A missing binary: a structured failure, no process, nothing persisted.
    let launched = s.launches().len();
    let missing = json!({"binary": "/no/such/claude"});
    let r = ext.turn(request("ex-nobin", 1, "w-nb", &missing)).await;
    failed(
        &r,
        "binary_missing: the Claude Code CLI `/no/such/claude` was not found",
    );
    assert_eq!(r.data.unwrap().data["reason"], "binary_missing");
    let r = ext.turn(request("ex-nopath", 1, "w-nb", &json!({}))).await;
    failed(
        &r,
        "binary_missing: the Claude Code CLI `claude` was not found",
    );
    assert!(h.persists_of("ex-nobin").is_empty());
    assert!(!s.state().join("runs").join("ex-nobin").exists());
    assert_eq!(s.launches().len(), launched);

    // A bad config and a gone dir fail the same way.
    let r = ext
        .turn(request("ex-bad", 1, "w-b", &json!({"modle": "x"})))
        .await;
    failed(
        &r,
        "invalid claude-code executor config: /modle: unknown field (known: binary,",
    );
    assert_eq!(r.data.unwrap().schema, "open-conduit.claudecode.result.v1");
    let r = ext
        .turn(request(
            "ex-gone",
            1,
            "w-g",
            &s.config(json!({"dir": s.join("gone")})),
        ))
        .await;
    failed(&r, "workspace_unavailable");
    let v = ext
        .call("validate", json!({"kind": "executor", "type": "claude-code", "config": {"handoff_minutes": "soon"}}))
        .await
        .unwrap();
    assert_eq!(v["diagnostics"][0]["path"], "/handoff_minutes");
    let v = ext
        .call(
            "validate",
            json!({"kind": "executor", "type": "claude-code", "config": {"handoff_share": 0.3}}),
        )
        .await
        .unwrap();
    assert!(v.get("diagnostics").is_none());
    assert!(v["warnings"][0].as_str().unwrap().contains("handoff_share"));
}

/// Every file under `dir` whose bytes contain `needle`.
fn files_containing(dir: &std::path::Path, needle: &[u8]) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = e.path();
        let Ok(kind) = e.file_type() else { continue };
        if kind.is_dir() {
            out.extend(files_containing(&path, needle));
        } else if kind.is_file() {
            let bytes = std::fs::read(&path).unwrap_or_default();
            if bytes.windows(needle.len()).any(|w| w == needle) {
                out.push(path);
            }
        }
    }
    out
}

/// `secret_env` takes each secret from its own connection: the model's key from a
/// second connection the binding names (`connections`) while its `connection` is a
/// GitHub one, each connection through its own `secret.resolve`. The values reach
/// claude's environment and no argument or file of the run; a connection the binding
/// does not name is refused before anything is resolved or started.
#[tokio::test]
async fn secret_env_takes_each_secret_from_its_own_connection() {
    let s = Scratch::new("secrets");
    let h = Arc::new(Host::default());
    {
        let mut known = h.secrets.lock().unwrap();
        known.insert(
            ("gh-bot".into(), "token".into()),
            "ghs-from-the-github-connection".into(),
        );
        known.insert(
            ("anthropic".into(), "api_key".into()),
            "sk-ant-from-its-own-connection".into(),
        );
    }
    let ext = Ext::start(&h, &s).await;
    let config = s.config(json!({"secret_env": {
        "ANTHROPIC_API_KEY": {"connection": "anthropic", "secret": "api_key"},
        "GH_TOKEN": "token"}}));
    // What config check asks the executor: the secrets this config resolves.
    let v = ext
        .call(
            "validate",
            json!({"kind": "executor_secrets", "type": "claude-code", "config": config}),
        )
        .await
        .unwrap();
    assert_eq!(
        v["secrets"],
        json!([
            {"path": "/secret_env/ANTHROPIC_API_KEY", "connection": "anthropic", "secret": "api_key"},
            {"path": "/secret_env/GH_TOKEN", "secret": "token"}
        ])
    );
    let mut req = request("ex-sec", 1, "w-sec", &config);
    req["binding"]["connection"] = json!("gh-bot");
    req["binding"]["connections"] = json!(["anthropic"]);
    let r = ext.turn(req).await;
    assert_ne!(r.outcome, Outcome::Failed, "{r:?}");
    let launches = s.launches();
    assert_eq!(launches.len(), 1);
    let env = &launches[0]["env"];
    assert_eq!(env["ANTHROPIC_API_KEY"], "sk-ant-from-its-own-connection");
    assert_eq!(env["GH_TOKEN"], "ghs-from-the-github-connection");
    // One call per connection, each asking only its own secrets.
    let resolves = h.resolves.lock().unwrap().clone();
    assert_eq!(
        resolves,
        vec![
            json!({"scope_id": "scope-a", "connection": "anthropic", "names": ["api_key"]}),
            json!({"scope_id": "scope-a", "connection": "gh-bot", "names": ["token"]}),
        ]
    );
    for value in [
        "sk-ant-from-its-own-connection",
        "ghs-from-the-github-connection",
    ] {
        assert!(
            !launches[0]["argv"].to_string().contains(value),
            "{value} in argv"
        );
        assert_eq!(
            files_containing(&s.state(), value.as_bytes()),
            Vec::<PathBuf>::new(),
            "{value} written under the state directory"
        );
    }

    // A connection the binding does not name: refused, nothing resolved or started.
    let stray = s.config(json!({"secret_env": {
        "ANTHROPIC_API_KEY": {"connection": "someone-else", "secret": "api_key"}}}));
    let mut req = request("ex-stray", 1, "w-stray", &stray);
    req["binding"]["connection"] = json!("gh-bot");
    req["binding"]["connections"] = json!(["anthropic"]);
    let r = ext.turn(req).await;
    assert_eq!(r.outcome, Outcome::Failed, "{r:?}");
    assert!(
        r.error.starts_with(
            "invalid_config: secret_env.ANTHROPIC_API_KEY names the connection \"someone-else\", which the binding does not name"
        ),
        "{}",
        r.error
    );
    assert_eq!(r.data.unwrap().data["reason"], "invalid_config");
    assert_eq!(h.resolves.lock().unwrap().len(), 2);
    assert_eq!(s.launches().len(), 1);
    // A secret its connection lacks fails the turn naming it, never a value.
    let missing = s.config(json!({"secret_env": {
        "ANTHROPIC_API_KEY": {"connection": "anthropic", "secret": "api_kye"}}}));
    let mut req = request("ex-miss", 1, "w-miss", &missing);
    req["binding"]["connection"] = json!("gh-bot");
    req["binding"]["connections"] = json!(["anthropic"]);
    let r = ext.turn(req).await;
    assert_eq!(r.outcome, Outcome::Failed, "{r:?}");
    assert!(
        r.error.contains("connection \"anthropic\"") && r.error.contains("api_kye"),
        "{}",
        r.error
    );
    assert_eq!(r.data.unwrap().data["reason"], "secret_unavailable");
    assert_eq!(s.launches().len(), 1);
}

#[tokio::test]
async fn a_running_turn_is_adopted_after_the_extension_is_killed() {
    let s = Scratch::new("adopt");
    let h = Arc::new(Host::default());
    let hold = s.join("hold");
    // The toolbelt names a directory without the server, so the fake skips MCP.
    let config = s.config(json!({"env": {"FAKE_CLAUDE_HOLD": hold}}));
    let mut req = request("ex-a", 1, "w-a", &config);
    req["toolbelt"] = json!({"endpoint": "/run/oc/tb.sock", "token": "tok-epoch-1", "dir": s.join("no-toolbelt")});

    let first = Ext::start(&h, &s).await;
    first.run(req.clone()).await.unwrap();
    let seg = s.segment("ex-a", 1);
    until("the fake to be in its turn", || {
        std::fs::read_to_string(seg.join("out.jsonl"))
            .unwrap_or_default()
            .contains("\"assistant\"")
    })
    .await;
    let recovery = h.persists_of("ex-a").last().unwrap()["recovery"].clone();
    first.crash().await;

    let second = Ext::start(&h, &s).await;
    assert_eq!(
        second.wait_raw("ex-a").await.unwrap_err().code(),
        Some("not_found")
    );
    let mut req2 = req.clone();
    req2["epoch"] = json!(2);
    req2["toolbelt"]["token"] = json!("tok-epoch-2");
    second
        .call(
            "executor.recover",
            json!({"run": req2, "recovery": recovery}),
        )
        .await
        .unwrap();
    // The credential file was replaced first.
    assert_eq!(
        std::fs::read_to_string(seg.join("toolbelt-token")).unwrap(),
        "tok-epoch-2"
    );
    // An adopted segment takes no input.
    let refused = second
        .inject("ex-a", 2, event("ev-z", "z"))
        .await
        .unwrap_err();
    assert_eq!(refused.code(), Some("not_accepting"));
    std::fs::write(&hold, b"").unwrap();
    let r = second.wait("ex-a").await;
    assert_eq!(r.outcome, Outcome::Handoff, "{r:?}");
    assert_eq!(s.launches().len(), 1, "one launch only");
    assert_eq!(h.continuity("w-a")["turns"], 1);

    // A lower epoch is refused.
    let lower = second
        .call(
            "executor.recover",
            json!({"run": req.clone(), "recovery": recovery}),
        )
        .await
        .unwrap_err();
    assert_eq!(lower.code(), Some("not_adoptable"));

    // Tampered metadata is refused by a fresh process.
    second.crash().await;
    let third = Ext::start(&h, &s).await;
    let mut tampered = recovery.clone();
    tampered["data"]["nonce"] = json!("0123456789abcdef0123456789abcdef");
    let mut req3 = req.clone();
    req3["epoch"] = json!(3);
    let e = third
        .call(
            "executor.recover",
            json!({"run": req3, "recovery": tampered}),
        )
        .await
        .unwrap_err();
    assert_eq!(e.code(), Some("not_adoptable"));
    let mut elsewhere = recovery.clone();
    elsewhere["data"]["segment_dir"] = json!(s.join("elsewhere/ex-a/1"));
    let e = third
        .call(
            "executor.recover",
            json!({"run": req3, "recovery": elsewhere}),
        )
        .await
        .unwrap_err();
    assert_eq!(e.code(), Some("not_adoptable"));
    // A lower epoch than the adoption's, even in a new process.
    let e = third
        .call(
            "executor.recover",
            json!({"run": req.clone(), "recovery": recovery}),
        )
        .await
        .unwrap_err();
    assert_eq!(e.code(), Some("not_adoptable"));
    // The recorded result comes back as it was; the turn is applied once.
    third
        .call(
            "executor.recover",
            json!({"run": req3, "recovery": recovery}),
        )
        .await
        .unwrap();
    assert_eq!(third.wait("ex-a").await, r);
    assert_eq!(h.continuity("w-a")["turns"], 1);
    assert_eq!(s.launches().len(), 1);
}

#[tokio::test]
async fn a_retry_after_a_crash_between_decision_and_launch_takes_the_decision_over() {
    let s = Scratch::new("decision");
    let h = Arc::new(Host::default());
    let config = s.config(json!({}));
    let faulty = Ext::start_with(&h, &s, &[("OC_CLAUDE_CODE_FAULT", "after_decision")]).await;
    let e = faulty
        .run(request("ex-d1", 1, "w-d", &config))
        .await
        .unwrap_err();
    assert!(e.is_transport(), "{e}");
    faulty.crash().await;
    let c = h.continuity("w-d");
    let decided = c["in_flight"].clone();
    assert_eq!(decided["kind"], "fresh", "{c}");
    let session = decided["session"].as_str().unwrap().to_string();
    assert!(s.launches().is_empty());

    let ext = Ext::start(&h, &s).await;
    // The attempt cannot be adopted: nothing was launched.
    let recovery = h.persists_of("ex-d1").last().unwrap()["recovery"].clone();
    let e = ext
        .call(
            "executor.recover",
            json!({"run": request("ex-d1", 2, "w-d", &config), "recovery": recovery}),
        )
        .await
        .unwrap_err();
    assert_eq!(e.code(), Some("not_adoptable"));
    // The retry takes the recorded decision over: the same session and kind.
    let mut retry = request("ex-d2", 3, "w-d", &config);
    retry["attempt"] = json!(2);
    let r = ext.turn(retry).await;
    assert_eq!(r.outcome, Outcome::Handoff, "{r:?}");
    let launches = s.launches();
    assert_eq!(launches.len(), 1);
    assert_eq!(
        arg_after(&launches[0]["argv"], "--session-id").unwrap(),
        session
    );
    let c = h.continuity("w-d");
    assert!(c.get("in_flight").is_none(), "{c}");
    assert_eq!(c["session"], json!(session));
    assert_eq!(c["turns"], 1);
}

/// A file outside every segment directory, holding `text`: no trick may change it,
/// nor bring it into a result.
fn outside(s: &Scratch, name: &str, text: &str) -> PathBuf {
    let p = s.join(name);
    std::fs::write(&p, text).unwrap();
    p
}

fn alive(pid: i64) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => {
            let after = &stat[stat.rfind(')').unwrap() + 1..];
            after.split_whitespace().next() != Some("Z")
        }
        Err(_) => false,
    }
}

/// A binding config whose "claude" is the shell script `body`, run as the agent.
fn hostile(s: &Scratch, body: &str) -> Value {
    let script = s.join("hostile-claude");
    std::fs::write(&script, format!("#!/bin/sh\n{body}\n")).unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    json!({"binary": script})
}

/// No artifact holds the secret or the other Work's file of [`outside`].
fn assert_no_leak(h: &Host) {
    for (name, bytes) in h.artifacts.lock().unwrap().values() {
        let text = String::from_utf8_lossy(bytes);
        assert!(
            !text.contains("the secret") && !text.contains("another Work"),
            "{name}"
        );
    }
}

/// A process group of the test's own, which no segment may signal.
struct Bystander(std::process::Child);

impl Bystander {
    fn start() -> Bystander {
        use std::os::unix::process::CommandExt;
        Bystander(
            std::process::Command::new("sleep")
                .arg("300")
                .process_group(0)
                .spawn()
                .unwrap(),
        )
    }
    fn pid(&self) -> i64 {
        i64::from(self.0.id())
    }
}

impl Drop for Bystander {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[tokio::test]
async fn a_symlink_at_a_temporary_name_or_a_record_writes_nothing_outside() {
    let s = Scratch::new("tmplink");
    let h = Arc::new(Host::default());
    let ext = Ext::start(&h, &s).await;
    let target = outside(&s, "victim.db", "precious\n");
    let seg = s.segment("ex-tmp", 1);
    // At every temporary name the wrapper (its parent) and the extension (the
    // wrapper's parent) would write a record of the segment under, and at the
    // injection log, the agent plants a symlink to the target; then an injection,
    // the interrupt (`kill`), the status and the result are written.
    let body = format!(
        r#"D='{seg}'
ext=$(awk '{{print $4}}' /proc/$PPID/stat)
for pid in $PPID $ext; do
  for f in status meta.json result.json kill adopted.json toolbelt-token; do
    ln -s '{t}' "$D/.$f.tmp.$pid"
  done
done
ln -s '{t}' "$D/injected.jsonl"
touch "$D/ready"; exec sleep 300"#,
        seg = seg.display(),
        t = target.display()
    );
    ext.run(request("ex-tmp", 1, "w-tmp", &hostile(&s, &body)))
        .await
        .unwrap();
    until("the symlinks to be planted", || seg.join("ready").exists()).await;
    ext.inject("ex-tmp", 1, event("ev-x", "more"))
        .await
        .unwrap();
    ext.interrupt("ex-tmp", "test").await;
    let r = ext.wait("ex-tmp").await;
    assert_eq!(r.outcome, Outcome::Failed, "{r:?}");
    assert!(r.error.starts_with("interrupted (test): "), "{r:?}");
    assert_eq!(std::fs::read_to_string(&target).unwrap(), "precious\n");
    for f in ["status", "meta.json", "result.json", "kill"] {
        let m = std::fs::symlink_metadata(seg.join(f)).unwrap();
        assert!(m.file_type().is_file(), "{f} is not a file of its own");
    }
}

#[tokio::test]
async fn outputs_planted_before_the_start_are_refused_and_claude_never_runs() {
    let s = Scratch::new("preplant");
    let h = Arc::new(Host::default());
    let secret = outside(&s, "secret.txt", "the secret\n");
    let other = outside(&s, "other-work.txt", "another Work's file\n");
    *h.plant.lock().unwrap() = vec![
        ("out.jsonl".into(), secret.clone()),
        ("err.log".into(), other.clone()),
    ];
    let ext = Ext::start(&h, &s).await;
    let marker = s.join("ran");
    let body = format!("touch '{}'; echo out; echo err >&2", marker.display());
    let r = ext
        .turn(request("ex-pre", 1, "w-pre", &hostile(&s, &body)))
        .await;
    assert_eq!(r.outcome, Outcome::Failed, "{r:?}");
    assert!(
        r.error.contains("out.jsonl") && r.error.contains("refused"),
        "{r:?}"
    );
    assert!(!marker.exists(), "claude started");
    assert_eq!(std::fs::read_to_string(&secret).unwrap(), "the secret\n");
    assert_eq!(
        std::fs::read_to_string(&other).unwrap(),
        "another Work's file\n"
    );
    assert_no_leak(&h);
}

#[tokio::test]
async fn outputs_swapped_for_symlinks_are_never_read() {
    let s = Scratch::new("swapped");
    let h = Arc::new(Host::default());
    let ext = Ext::start(&h, &s).await;
    let secret = outside(
        &s,
        "secret.txt",
        r#"{"type":"result","subtype":"success","is_error":false,"result":"the secret"}"#,
    );
    let seg = s.segment("ex-swap", 1);
    let body = format!(
        r#"D='{}'
echo harmless; rm "$D/out.jsonl" "$D/err.log"
ln -s '{}' "$D/out.jsonl"; ln -s '{}' "$D/err.log""#,
        seg.display(),
        secret.display(),
        secret.display()
    );
    let r = ext
        .turn(request("ex-swap", 1, "w-swap", &hostile(&s, &body)))
        .await;
    assert_eq!(r.outcome, Outcome::Failed, "{r:?}");
    assert!(
        r.error.contains("out.jsonl") && r.error.contains("symbolic link"),
        "{r:?}"
    );
    assert!(!r.summary.contains("secret"), "{r:?}");
    assert_no_leak(&h);
}

#[tokio::test]
async fn a_forged_process_group_is_never_signalled_by_stop() {
    let s = Scratch::new("forged");
    let h = Arc::new(Host::default());
    let ext = Ext::start(&h, &s).await;
    let bystander = Bystander::start();
    let seg = s.segment("ex-fg", 1);
    // The agent waits for its group to be recorded, rewrites `meta.json` to name
    // the bystander's group, kills its wrapper (so nothing records its end) and
    // sleeps on.
    let body = format!(
        r#"D='{seg}'
echo $$ > "$D/../agent.pid"
until grep -q '"pgid": [1-9]' "$D/meta.json"; do sleep 0.05; done
printf '{{"pid": %s, "pgid": {group}, "nonce": "x", "started_at": ""}}' $PPID > "$D/m.new"
mv -f "$D/m.new" "$D/meta.json"
kill -9 $PPID
touch "$D/../forged"
exec sleep 300"#,
        seg = seg.display(),
        group = bystander.pid()
    );
    ext.run(request("ex-fg", 1, "w-fg", &hostile(&s, &body)))
        .await
        .unwrap();
    let exec_dir = seg.parent().unwrap().to_path_buf();
    let wrapper = h
        .persists_of("ex-fg")
        .iter()
        .filter_map(|p| p["recovery"]["data"]["pid"].as_i64())
        .find(|p| *p != 0)
        .unwrap();
    until("the forgery and the wrapper's death", || {
        exec_dir.join("forged").exists() && !alive(wrapper)
    })
    .await;
    let agent: i64 = std::fs::read_to_string(exec_dir.join("agent.pid"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let stopped = ext.stop("ex-fg").await;
    assert!(
        alive(bystander.pid()),
        "the bystander's group was signalled"
    );
    assert_eq!(stopped["stopped"], true, "{stopped}");
    assert!(!alive(agent), "the agent outlived the stop");
    let r = ext.wait("ex-fg").await;
    assert_eq!(r.outcome, Outcome::Failed, "{r:?}");
}
