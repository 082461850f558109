//! `fake-claude`: a small stand-in for the Claude Code CLI, for tests. It
//! takes the same flags the executor passes, reads stream-json user messages
//! on stdin, writes stream-json on stdout as the real CLI does (a `system`
//! `init` line with the session, an `assistant` message with usage, the
//! echo of each user message under `--replay-user-messages`, an optional
//! `rate_limit_event`, a `result` with this process's `usage`, the session's
//! `total_cost_usd` and `modelUsage`, the turn's `model_usage_since_last_result`
//! and `structured_output`, as 2.1.332 writes them), writes the session's transcript at
//! `<CLAUDE_CONFIG_DIR or ~/.claude>/projects/<project folder>/<session>.jsonl`
//! (named as Claude Code names it, [`crate::continuity::project_name`]) and keeps the session's cumulative totals next to it.
//!
//! With `--mcp-config`, when the `open-conduit` server's command exists, it
//! starts it over stdio and performs `initialize`, `notifications/initialized`,
//! `tools/list`, a `tools/call` of `read_context` and (in mode `wait`) of
//! `wait` (on a session's first segment; a resumed one does not wait again).
//!
//! Environment:
//!
//! * `FAKE_CLAUDE_MODE`: `ok` (default), `usage_limit`, `lose_session` (says
//!   "No conversation found with session ID" to a resume), `hang` (never
//!   ends its turn), `crash` (exits 3 without a result), `error` (a result
//!   with `is_error`), `wait` (calls the toolbelt's wait), `no_status`,
//!   `denied` (refuses the toolbelt's declare_outcome, as a permission mode does),
//!   `calls` (the toolbelt `call`s `FAKE_CLAUDE_CALLS` lists: [`scripted_calls`]).
//! * `FAKE_CLAUDE_STATE`: the structured status's state (default `building`).
//! * `FAKE_CLAUDE_USAGE`: `input,output,cache_read,cache_creation` of the
//!   turn's one model call (default `100,50,1000,200`).
//! * `FAKE_CLAUDE_HOLD`: a path; the turn ends only once it exists (messages
//!   arriving meanwhile are taken in and echoed).
//! * `FAKE_CLAUDE_RATE_LIMIT`: a reset (epoch seconds) for a rejected
//!   `rate_limit_event` in mode `usage_limit`.
//! * `FAKE_CLAUDE_LIMIT_TEXT`: the result text in mode `usage_limit`.
//! * `FAKE_CLAUDE_RECORD`: a file to which it appends its argv, cwd,
//!   environment, mount namespace and whether it could write a file in its
//!   `TMPDIR` (and the MCP exchange, and the prompt: `{"prompt", "resumed"}`) as
//!   JSON lines.
//! * `FAKE_CLAUDE_PROBE`: a path; the record says whether it could read it
//!   (`probe_readable`), for tests of the sandbox.

use serde_json::{json, Map, Value};
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc::{self, Receiver, TryRecvError};
use std::time::Duration;

#[derive(Default)]
struct Args {
    model: String,
    replay: bool,
    schema: bool,
    resume: Option<String>,
    session_id: Option<String>,
    mcp_config: Option<String>,
}

fn parse_args(argv: &[String]) -> Args {
    let mut a = Args::default();
    let mut i = 1;
    while i < argv.len() {
        let next = argv.get(i + 1).cloned();
        match argv[i].as_str() {
            "--model" => {
                a.model = next.unwrap_or_default();
                i += 1;
            }
            "--replay-user-messages" => a.replay = true,
            "--json-schema" => {
                a.schema = true;
                i += 1;
            }
            "--resume" => {
                a.resume = next;
                i += 1;
            }
            "--session-id" => {
                a.session_id = next;
                i += 1;
            }
            "--mcp-config" => {
                a.mcp_config = next;
                i += 1;
            }
            "--permission-mode" | "--input-format" | "--output-format" | "--tools"
            | "--plugin-dir" => i += 1,
            _ => {}
        }
        i += 1;
    }
    a
}

fn var(name: &str) -> String {
    std::env::var(name).unwrap_or_default()
}

fn record(line: &Value) {
    let path = var("FAKE_CLAUDE_RECORD");
    if path.is_empty() {
        return;
    }
    if let Ok(mut f) = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
    {
        let _ = writeln!(f, "{line}");
    }
}

fn emit(v: &Value) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{v}");
    let _ = out.flush();
}

fn append(path: &Path, v: &Value) {
    if let Ok(mut f) = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
    {
        let _ = writeln!(f, "{v}");
    }
}

/// One stdio MCP client exchange, recorded.
fn mcp(config: &str, mode: &str, resumed: bool) -> Option<std::process::Child> {
    let text = std::fs::read_to_string(config).ok()?;
    let v: Value = serde_json::from_str(&text).ok()?;
    let server = v.pointer("/mcpServers/open-conduit")?;
    let command = server.get("command")?.as_str()?.to_string();
    if !Path::new(&command).is_file() {
        record(&json!({"mcp": "skipped", "command": command}));
        return None;
    }
    let args: Vec<String> = server
        .get("args")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|x| x.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default();
    let env: BTreeMap<String, String> = server
        .get("env")
        .and_then(Value::as_object)
        .map(|m| {
            m.iter()
                .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_string())))
                .collect()
        })
        .unwrap_or_default();
    let mut child = Command::new(&command)
        .args(&args)
        .envs(&env)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .ok()?;
    let mut stdin = child.stdin.take()?;
    let mut reader = BufReader::new(child.stdout.take()?);
    let mut exchange = Vec::new();
    let mut call = |id: Option<u64>, method: &str, params: Value| -> Option<Value> {
        let mut msg = json!({"jsonrpc": "2.0", "method": method, "params": params});
        if let Some(id) = id {
            msg["id"] = json!(id);
        }
        writeln!(stdin, "{msg}").ok()?;
        stdin.flush().ok()?;
        let id = id?;
        let mut line = String::new();
        loop {
            line.clear();
            if reader.read_line(&mut line).ok()? == 0 {
                return None;
            }
            let Ok(answer) = serde_json::from_str::<Value>(&line) else {
                continue;
            };
            if answer.get("id") == Some(&json!(id)) {
                return Some(answer);
            }
        }
    };
    let init = call(
        Some(1),
        "initialize",
        json!({"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "fake-claude", "version": "0"}}),
    );
    exchange.push(json!({"method": "initialize", "answer": init}));
    call(None, "notifications/initialized", json!({}));
    let tools = call(Some(2), "tools/list", json!({}));
    exchange.push(json!({"method": "tools/list", "answer": tools}));
    let ctx = call(
        Some(3),
        "tools/call",
        json!({"name": "read_context", "arguments": {}}),
    );
    exchange.push(json!({"method": "tools/call read_context", "answer": ctx}));
    if mode == "wait" {
        let w = call(
            Some(4),
            "tools/call",
            json!({"name": "wait", "arguments": {"description": "waiting for the owner"}}),
        );
        exchange.push(json!({"method": "tools/call wait", "answer": w}));
    }
    if mode == "calls" {
        scripted_calls(&mut call, &mut exchange, resumed);
    }
    record(&json!({"mcp": exchange, "env": env}));
    Some(child)
}

/// Mode `calls`: each toolbelt `call` that `FAKE_CLAUDE_CALLS` lists (a JSON array
/// of `{"operation", "input", "request_id", "tag", "turn"}`), in order (`turn`:
/// `first` only on a session's first segment, `resumed` only on a resumed one, absent
/// on both); the text `{branch}`
/// anywhere in an input becomes the branch checked out in the cwd
/// (`git rev-parse --abbrev-ref HEAD`). Each answer is recorded as
/// `tools/call <operation><tag>`, with the branch.
fn scripted_calls(
    call: &mut impl FnMut(Option<u64>, &str, Value) -> Option<Value>,
    exchange: &mut Vec<Value>,
    resumed: bool,
) {
    let branch = Command::new("git")
        .args(["rev-parse", "--abbrev-ref", "HEAD"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default();
    let script = var("FAKE_CLAUDE_CALLS").replace("{branch}", &branch);
    let calls: Vec<Value> = serde_json::from_str(&script).unwrap_or_default();
    for (i, c) in calls.iter().enumerate() {
        match c["turn"].as_str() {
            Some("first") if resumed => continue,
            Some("resumed") if !resumed => continue,
            _ => {}
        }
        let operation = c["operation"].as_str().unwrap_or_default();
        let tag = c["tag"].as_str().unwrap_or_default();
        let answer = call(
            Some(10 + i as u64),
            "tools/call",
            json!({"name": "call", "arguments": {"operation": operation,
                   "input": c["input"], "request_id": c["request_id"]}}),
        );
        exchange.push(json!({"method": format!("tools/call {operation}{tag}"),
                             "answer": answer, "branch": branch}));
    }
}

fn usage_numbers() -> [u64; 4] {
    let mut n = [100, 50, 1000, 200];
    let given = var("FAKE_CLAUDE_USAGE");
    for (i, part) in given.split(',').enumerate().take(4) {
        if let Ok(x) = part.trim().parse() {
            n[i] = x;
        }
    }
    n
}

/// The fake's whole run: answers its exit status.
pub fn run() -> i32 {
    let argv: Vec<String> = std::env::args().collect();
    let args = parse_args(&argv);
    let mode = {
        let m = var("FAKE_CLAUDE_MODE");
        if m.is_empty() {
            "ok".to_string()
        } else {
            m
        }
    };
    let cwd = std::env::current_dir().unwrap_or_default();
    let env: Map<String, Value> = std::env::vars()
        .map(|(k, v)| (k, Value::String(v)))
        .collect();
    let mnt_ns = std::fs::read_link("/proc/self/ns/mnt")
        .map(|p| p.display().to_string())
        .unwrap_or_default();
    let mut line = json!({"argv": argv, "cwd": cwd, "env": env, "mnt_ns": mnt_ns});
    let probe = var("FAKE_CLAUDE_PROBE");
    if !probe.is_empty() {
        line["probe_readable"] = json!(std::fs::read(&probe).is_ok());
    }
    let tmp = std::env::temp_dir().join(format!("fake-claude-{}", std::process::id()));
    line["tmp_writable"] = json!(std::fs::write(&tmp, "x").is_ok());
    let _ = std::fs::remove_file(&tmp);
    record(&line);

    let config_dir = match std::env::var("CLAUDE_CONFIG_DIR") {
        Ok(d) if !d.is_empty() => PathBuf::from(d),
        _ => PathBuf::from(var("HOME")).join(".claude"),
    };
    let project = crate::continuity::project_name(&cwd.display().to_string());
    let projects = config_dir.join("projects").join(project);
    let (session, resumed) = match (&args.resume, &args.session_id) {
        (Some(s), _) => (s.clone(), true),
        (None, Some(s)) => (s.clone(), false),
        (None, None) => ("fake-session".to_string(), false),
    };
    let transcript = projects.join(format!("{session}.jsonl"));
    if resumed && (!transcript.exists() || mode == "lose_session") {
        eprintln!("No conversation found with session ID: {session}");
        return 1;
    }
    if !resumed && transcript.exists() {
        eprintln!("Error: Session ID {session} is already in use.");
        return 1;
    }
    if std::fs::create_dir_all(&projects).is_err() {
        eprintln!("cannot create {}", projects.display());
        return 1;
    }

    let (tx, rx) = mpsc::channel::<String>();
    std::thread::spawn(move || {
        let stdin = std::io::stdin();
        for line in stdin.lock().lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });

    emit(
        &json!({"type": "system", "subtype": "init", "session_id": session,
                 "model": args.model, "cwd": cwd, "tools": [], "mcp_servers": []}),
    );
    let take_in = |line: &str| {
        let Ok(v) = serde_json::from_str::<Value>(line) else {
            return;
        };
        append(&transcript, &v);
        if args.replay {
            emit(
                &json!({"type": "user", "message": v.get("message").cloned().unwrap_or(Value::Null),
                         "session_id": session, "isReplay": true}),
            );
        }
    };
    let Ok(first) = rx.recv() else {
        eprintln!("Error: no input on stdin");
        return 1;
    };
    take_in(&first);
    // The prompt as the executor wrote it (the message's text).
    if let Ok(v) = serde_json::from_str::<Value>(&first) {
        let content = &v["message"]["content"];
        let text = match content {
            Value::String(t) => t.clone(),
            Value::Array(parts) => parts
                .iter()
                .filter_map(|p| p["text"].as_str())
                .collect::<Vec<_>>()
                .join("\n"),
            _ => String::new(),
        };
        record(&json!({"prompt": text, "resumed": args.resume.is_some()}));
    }
    if mode == "crash" {
        eprintln!("fake-claude: crashing as told");
        return 3;
    }
    // A resumed segment (woken from a wait) finishes rather than waiting again.
    let mcp_mode = if mode == "wait" && args.resume.is_some() {
        "ok"
    } else {
        mode.as_str()
    };
    let server = args
        .mcp_config
        .as_deref()
        .and_then(|c| mcp(c, mcp_mode, args.resume.is_some()));

    let [input, output, cache_read, cache_creation] = usage_numbers();
    let usage = json!({"input_tokens": input, "output_tokens": output,
                       "cache_read_input_tokens": cache_read, "cache_creation_input_tokens": cache_creation});
    let assistant = json!({"type": "assistant", "session_id": session, "parent_tool_use_id": null,
        "message": {"id": format!("msg_{}", std::process::id()), "model": format!("claude-{}", args.model),
                    "role": "assistant", "content": [{"type": "text", "text": "working on it"}], "usage": usage}});
    emit(&assistant);
    append(&transcript, &assistant);
    if mode == "hang" {
        loop {
            std::thread::sleep(Duration::from_secs(3600));
        }
    }
    let hold = var("FAKE_CLAUDE_HOLD");
    drain(&rx, &take_in);
    if !hold.is_empty() {
        while !Path::new(&hold).exists() {
            drain(&rx, &take_in);
            std::thread::sleep(Duration::from_millis(20));
        }
        drain(&rx, &take_in);
    }

    // Cumulative totals of the session.
    let totals_path = projects.join(format!("{session}.totals.json"));
    let before: Value = std::fs::read_to_string(&totals_path)
        .ok()
        .and_then(|t| serde_json::from_str(&t).ok())
        .unwrap_or_else(|| json!({}));
    let n = |k: &str| before.get(k).and_then(Value::as_u64).unwrap_or(0);
    let micro = n("cost_micro") + 10_000;
    let totals = json!({"input": n("input") + input, "output": n("output") + output,
        "cache_read": n("cache_read") + cache_read, "cache_creation": n("cache_creation") + cache_creation,
        "cost_micro": micro});
    let _ = std::fs::write(&totals_path, totals.to_string());
    let cost = micro as f64 / 1_000_000.0;
    // As Claude Code 2.1.332 reports: `usage` this process's, `total_cost_usd` and
    // `modelUsage` the session's, `model_usage_since_last_result` this turn's.
    let model = format!("claude-{}", args.model);
    let model_usage = json!({&model: {"inputTokens": totals["input"], "outputTokens": totals["output"],
        "cacheReadInputTokens": totals["cache_read"], "cacheCreationInputTokens": totals["cache_creation"],
        "costUSD": cost}});
    let since = json!({&model: {"inputTokens": input, "outputTokens": output,
        "cacheReadInputTokens": cache_read, "cacheCreationInputTokens": cache_creation,
        "costUSD": 0.01}});

    let mut result = json!({"type": "result", "subtype": "success", "is_error": false, "duration_ms": 1,
        "num_turns": 1, "result": "turn done", "session_id": session, "total_cost_usd": cost, "usage": usage,
        "modelUsage": model_usage, "model_usage_since_last_result": since});
    match mode.as_str() {
        "usage_limit" => {
            let reset = var("FAKE_CLAUDE_RATE_LIMIT");
            if let Ok(at) = reset.parse::<i64>() {
                emit(
                    &json!({"type": "rate_limit_event", "rate_limit_info": {"status": "rejected", "resetsAt": at, "rateLimitType": "five_hour"}, "session_id": session}),
                );
            }
            result["is_error"] = json!(true);
            let text = match var("FAKE_CLAUDE_LIMIT_TEXT") {
                t if t.is_empty() => {
                    "You've hit your limit · resets 9:40am (Europe/London)".to_string()
                }
                t => t,
            };
            result["result"] = json!(text);
            result["api_error_status"] = json!(429);
        }
        "denied" => {
            // As claude refuses a tool the permission mode does not allow.
            let tool = "mcp__open-conduit__declare_outcome";
            emit(
                &json!({"type": "system", "subtype": "permission_denied", "tool_name": tool, "tool_use_id": "t1", "session_id": session}),
            );
            result["permission_denials"] =
                json!([{"tool_name": tool, "tool_use_id": "t1", "tool_input": {}}]);
        }
        "error" => {
            result["subtype"] = json!("error_during_execution");
            result["is_error"] = json!(true);
            result["result"] = json!("something broke");
        }
        _ => {}
    }
    if args.schema && mode != "no_status" && mode != "error" && mode != "usage_limit" {
        let state = match var("FAKE_CLAUDE_STATE") {
            s if s.is_empty() => "building".to_string(),
            s => s,
        };
        let mut status = json!({"state": state, "summary": "did a turn",
                                "handoff": format!("handoff note from {session}")});
        let report = var("FAKE_CLAUDE_REPORT");
        if !report.is_empty() {
            status["report"] = json!(report);
        }
        result["structured_output"] = status;
    }
    emit(&result);
    // Keep taking nothing in until stdin closes, as the real CLI waits for
    // its next message.
    while rx.recv().is_ok() {}
    drop(server);
    0
}

fn drain(rx: &Receiver<String>, take_in: &impl Fn(&str)) {
    loop {
        match rx.try_recv() {
            Ok(line) => take_in(&line),
            Err(TryRecvError::Empty) | Err(TryRecvError::Disconnected) => return,
        }
    }
}
