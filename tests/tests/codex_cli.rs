#![allow(clippy::unwrap_used)]
//! The real Codex CLI (`@openai/codex`, pinned in tests/codex-cli/package.json,
//! installed by `npm ci --prefix tests/codex-cli`), driven non-interactively
//! (`codex exec --json`) and offline against a local Responses API server
//! ([`oc_systest::responses`]) that scripts each model call: the ground the `codex`
//! executor stands on (issue 45; /work/notes/hD-codex.md has the contract).
//!
//! Each test runs `codex` with a `CODEX_HOME` and a working directory of its own, a
//! custom model provider whose `base_url` is the local server, and a dummy API key
//! in the environment variable the provider's `env_key` names (never in argv).
//! `features.plugins=false` and `analytics.enabled=false` keep the CLI off the
//! network (otherwise it clones github.com/openai/plugins and posts analytics).
//!
//! Without the installed CLI each test says why on stderr and skips, unless
//! `OC_REQUIRE_PEERS=1` (as `.ci/run` sets), under which it fails. `OC_CODEX_CLI`
//! names another `codex` to run them against (another version).

use oc_systest::responses::{Reply, Request, ResponsesApi, Usage};
use oc_systest::HANG;
use serde_json::{json, Value};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The dummy API key, given to codex through [`KEY_VAR`] only.
const API_KEY: &str = "sk-test-0c0nduit-codex-5e1f9a";
/// The environment variable the provider's `env_key` names.
const KEY_VAR: &str = "OC_TEST_OPENAI_KEY";
/// A model the CLI's catalog does not know (it warns, and goes on).
const MODEL: &str = "oc-test-model";

/// The pinned CLI, or the one `OC_CODEX_CLI` names.
fn codex_cli() -> PathBuf {
    match std::env::var_os("OC_CODEX_CLI") {
        Some(p) if !p.is_empty() => PathBuf::from(p),
        _ => Path::new(env!("CARGO_MANIFEST_DIR")).join("codex-cli/node_modules/.bin/codex"),
    }
}

/// The installed CLI, or `None` after saying why (or a panic under
/// `OC_REQUIRE_PEERS=1`).
fn the_cli() -> Option<PathBuf> {
    let cli = codex_cli();
    let why = if !cli.exists() {
        format!("{} is not installed", cli.display())
    } else {
        match Command::new(&cli).arg("--version").output() {
            Ok(o) if o.status.success() => return Some(cli),
            Ok(o) => format!(
                "{} --version failed: {}",
                cli.display(),
                String::from_utf8_lossy(&o.stderr).trim()
            ),
            Err(e) => format!("{} does not run: {e}", cli.display()),
        }
    };
    let fix = "install Node.js and npm, then run `npm ci --prefix tests/codex-cli`";
    if std::env::var_os("OC_REQUIRE_PEERS").is_some_and(|v| v == "1") {
        panic!("codex_cli cannot run, and OC_REQUIRE_PEERS=1 requires it: {why} ({fix})");
    }
    let _ = writeln!(std::io::stderr(), "codex_cli: SKIPPED: {why} ({fix})");
    None
}

/// A test's directories: `home` (`CODEX_HOME`, which must exist) and `work` (the
/// working directory, not a git repository). Under cargo's target tmp dir, not
/// `/tmp`: under the temporary directory codex refuses to make the helper links its
/// Linux sandbox runs (`codex-linux-sandbox`), and says so on stderr. Removed on
/// drop.
struct Scratch {
    dir: PathBuf,
}

impl Scratch {
    fn new(name: &str) -> Scratch {
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
            .join(format!("oc-codex-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("home")).unwrap();
        std::fs::create_dir_all(dir.join("work")).unwrap();
        Scratch { dir }
    }

    fn home(&self) -> PathBuf {
        self.dir.join("home")
    }

    fn work(&self) -> PathBuf {
        self.dir.join("work")
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        if std::env::var_os("OC_KEEP_SUITE").is_none() {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

/// A TOML string (a JSON string is one, for the characters used here).
fn toml_str(s: &str) -> String {
    serde_json::to_string(s).unwrap()
}

/// `-c key=value` for each pair.
fn overrides(pairs: &[(&str, String)]) -> Vec<String> {
    pairs
        .iter()
        .flat_map(|(k, v)| ["-c".to_owned(), format!("{k}={v}")])
        .collect()
}

/// The options every run takes: the local provider, no network, the model.
fn provider(api: &ResponsesApi) -> Vec<String> {
    let mut args = overrides(&[
        ("model_provider", toml_str("oc")),
        ("model_providers.oc.name", toml_str("Open Conduit test")),
        ("model_providers.oc.base_url", toml_str(&api.base_url())),
        ("model_providers.oc.wire_api", toml_str("responses")),
        ("model_providers.oc.env_key", toml_str(KEY_VAR)),
        ("features.plugins", "false".into()),
        ("analytics.enabled", "false".into()),
    ]);
    args.extend(["-m".into(), MODEL.into()]);
    args
}

/// A running `codex`, its output read by threads of its own.
struct Running {
    child: Child,
    out: std::thread::JoinHandle<String>,
    err: std::thread::JoinHandle<String>,
}

/// What one run printed, and how it ended.
struct Run {
    status: ExitStatus,
    stdout: String,
    stderr: String,
    /// The `--json` events (stdout's JSON lines).
    events: Vec<Value>,
}

impl Run {
    fn of_type(&self, kind: &str) -> Vec<&Value> {
        self.events.iter().filter(|e| e["type"] == kind).collect()
    }

    /// The completed items of `item_type`.
    fn items(&self, item_type: &str) -> Vec<&Value> {
        self.of_type("item.completed")
            .into_iter()
            .map(|e| &e["item"])
            .filter(|i| i["type"] == item_type)
            .collect()
    }

    /// `thread.started`'s `thread_id`: the session to resume.
    fn thread_id(&self) -> String {
        let started = self.of_type("thread.started");
        assert_eq!(started.len(), 1, "one thread.started: {}", self.stdout);
        started[0]["thread_id"].as_str().unwrap().to_owned()
    }

    /// The last `turn.completed`'s usage.
    fn usage(&self) -> Value {
        let done = self.of_type("turn.completed");
        assert_eq!(done.len(), 1, "one turn.completed: {}", self.stdout);
        done[0]["usage"].clone()
    }

    fn explain(&self) -> String {
        format!(
            "status {}\nstdout:\n{}\nstderr:\n{}",
            self.status, self.stdout, self.stderr
        )
    }
}

/// Start `codex args` in the scratch's `work` with its `CODEX_HOME` and the key in
/// [`KEY_VAR`]; `stdin` is written and closed (or `/dev/null`).
fn start(cli: &Path, scratch: &Scratch, args: &[String], stdin: Option<&str>) -> Running {
    start_with(cli, scratch, args, stdin, &[])
}

/// [`start`] with more environment.
fn start_with(
    cli: &Path,
    scratch: &Scratch,
    args: &[String],
    stdin: Option<&str>,
    env: &[(&str, &str)],
) -> Running {
    assert!(
        !args.iter().any(|a| a.contains(API_KEY)),
        "the key is not in argv"
    );
    let mut child = Command::new(cli)
        .args(args)
        .current_dir(scratch.work())
        .env("CODEX_HOME", scratch.home())
        .env(KEY_VAR, API_KEY)
        .env_remove("OPENAI_API_KEY")
        .env_remove("OPENAI_BASE_URL")
        .env_remove("CODEX_API_KEY")
        .envs(env.iter().copied())
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    if let Some(text) = stdin {
        let mut input = child.stdin.take().unwrap();
        input.write_all(text.as_bytes()).unwrap();
    }
    let read = |mut r: Box<dyn Read + Send>| {
        std::thread::spawn(move || {
            let mut s = String::new();
            let _ = r.read_to_string(&mut s);
            s
        })
    };
    let out = read(Box::new(child.stdout.take().unwrap()));
    let err = read(Box::new(child.stderr.take().unwrap()));
    Running { child, out, err }
}

impl Running {
    /// Wait for the end (bounded: past it, kill and fail).
    fn finish(mut self) -> Run {
        let deadline = Instant::now() + HANG * 2;
        let status = loop {
            if let Some(s) = self.child.try_wait().unwrap() {
                break s;
            }
            if Instant::now() > deadline {
                let _ = self.child.kill();
                let _ = self.child.wait();
                panic!("codex did not end within {:?}", HANG * 2);
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        let stdout = self.out.join().unwrap();
        let stderr = self.err.join().unwrap();
        let events = stdout
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .collect();
        Run {
            status,
            stdout,
            stderr,
            events,
        }
    }
}

fn codex(cli: &Path, scratch: &Scratch, args: &[String], stdin: Option<&str>) -> Run {
    start(cli, scratch, args, stdin).finish()
}

/// `codex exec --json --skip-git-repo-check <provider> extra... prompt`.
fn exec(api: &ResponsesApi, extra: &[String], prompt: &str) -> Vec<String> {
    let mut args: Vec<String> = ["exec", "--json", "--skip-git-repo-check"]
        .map(String::from)
        .to_vec();
    args.extend(provider(api));
    args.extend(extra.iter().cloned());
    args.push(prompt.to_owned());
    args
}

/// `codex exec resume --json --skip-git-repo-check <provider> <session> -` (the
/// prompt on stdin).
fn resume(api: &ResponsesApi, session: &str) -> Vec<String> {
    let mut args: Vec<String> = ["exec", "resume", "--json", "--skip-git-repo-check"]
        .map(String::from)
        .to_vec();
    args.extend(provider(api));
    args.push(session.to_owned());
    args.push("-".to_owned());
    args
}

/// Everything under `dir` whose bytes contain `needle`.
fn files_containing(dir: &Path, needle: &[u8]) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let p = e.path();
            let Ok(meta) = std::fs::symlink_metadata(&p) else {
                continue;
            };
            if meta.is_dir() {
                stack.push(p);
            } else if meta.is_file() {
                if let Ok(bytes) = std::fs::read(&p) {
                    if bytes.windows(needle.len()).any(|w| w == needle) {
                        out.push(p);
                    }
                }
            }
        }
    }
    out
}

/// The usage `turn.completed` reports for a total of `u`.
fn reported(u: Usage) -> Value {
    json!({"input_tokens": u.input_tokens, "cached_input_tokens": u.cached_tokens,
           "cache_write_input_tokens": 0, "output_tokens": u.output_tokens,
           "reasoning_output_tokens": u.reasoning_tokens})
}

fn sum(a: Usage, b: Usage) -> Usage {
    Usage {
        input_tokens: a.input_tokens + b.input_tokens,
        cached_tokens: a.cached_tokens + b.cached_tokens,
        output_tokens: a.output_tokens + b.output_tokens,
        reasoning_tokens: a.reasoning_tokens + b.reasoning_tokens,
    }
}

fn usage(input: u64, cached: u64, output: u64, reasoning: u64) -> Usage {
    Usage {
        input_tokens: input,
        cached_tokens: cached,
        output_tokens: output,
        reasoning_tokens: reasoning,
    }
}

/// (a) One turn: the request the CLI makes, the answer's text in the JSON events
/// and the last-message file, the usage the server reported in `turn.completed`.
#[test]
fn a_turn_answers_with_the_reported_usage() {
    let Some(cli) = the_cli() else { return };
    let scratch = Scratch::new("turn");
    let u = usage(1500, 300, 42, 7);
    let api =
        ResponsesApi::start(move |_req| Reply::response(vec![Reply::text("The answer is 42.")], u))
            .unwrap();
    let last = scratch.dir.join("last-message.txt");
    let extra = vec!["-o".to_owned(), last.display().to_string()];
    let run = codex(
        &cli,
        &scratch,
        &exec(&api, &extra, "What is the answer?"),
        None,
    );
    assert!(run.status.success(), "{}", run.explain());

    // The events: thread.started (the session), turn.started, the answer, the usage.
    let session = run.thread_id();
    assert_eq!(session.len(), 36, "a UUID: {session}");
    assert_eq!(run.of_type("turn.started").len(), 1, "{}", run.explain());
    let answers = run.items("agent_message");
    assert_eq!(answers.len(), 1, "{}", run.explain());
    assert_eq!(answers[0]["text"], "The answer is 42.");
    assert_eq!(run.usage(), reported(u), "{}", run.explain());
    assert_eq!(
        std::fs::read_to_string(&last).unwrap().trim_end(),
        "The answer is 42."
    );
    // An unknown model is a warning (an `error` item), not a failure.
    let warnings = run.items("error");
    assert!(
        warnings
            .iter()
            .all(|w| w["message"].as_str().unwrap().contains(MODEL)),
        "{}",
        run.explain()
    );

    // The request: one streamed POST /v1/responses with the key as a bearer token,
    // the session's id, the model, the prompt.
    let requests = api.requests();
    assert_eq!(requests.len(), 1, "only the one model call: {requests:#?}");
    let req = &requests[0];
    assert!(req.is_response());
    assert_eq!(req.path, "/v1/responses");
    assert_eq!(
        req.header("authorization"),
        Some(format!("Bearer {API_KEY}").as_str())
    );
    assert_eq!(req.header("session-id"), Some(session.as_str()));
    assert_eq!(req.header("accept"), Some("text/event-stream"));
    assert_eq!(req.body["stream"], true);
    assert_eq!(req.body["model"], MODEL);
    assert_eq!(req.body["store"], false);
    assert_eq!(req.body["prompt_cache_key"], session.as_str());
    assert_eq!(
        req.messages("user").last().map(String::as_str),
        Some("What is the answer?")
    );

    // The session is a rollout file under CODEX_HOME/sessions named by its id; the
    // key is in no file there.
    let rollouts = files_containing(&scratch.home().join("sessions"), session.as_bytes());
    assert!(
        rollouts.iter().any(|p| p
            .file_name()
            .unwrap()
            .to_string_lossy()
            .ends_with(&format!("{session}.jsonl"))),
        "{rollouts:?}"
    );
    assert_eq!(
        files_containing(&scratch.home(), API_KEY.as_bytes()),
        Vec::<PathBuf>::new()
    );
}

/// A stdio MCP server (newline-delimited JSON-RPC) with one tool, `echo`, that
/// logs every message it gets to `$PROBE_LOG`; its answer tells what of the
/// environment it got (`OC_PROBE_TAG`, and whether the API key's variable).
const PROBE: &str = r#"
import json, os, sys
log = open(os.environ["PROBE_LOG"], "a")
for line in sys.stdin:
    line = line.strip()
    if not line:
        continue
    msg = json.loads(line)
    log.write(line + "\n")
    log.flush()
    if "id" not in msg:
        continue
    method = msg.get("method")
    if method == "initialize":
        result = {"protocolVersion": msg["params"].get("protocolVersion", "2025-06-18"),
                  "capabilities": {"tools": {}},
                  "serverInfo": {"name": "probe", "version": "1"}}
    elif method == "tools/list":
        result = {"tools": [{"name": "echo", "description": "Echo a word back",
                             "inputSchema": {"type": "object",
                                             "properties": {"word": {"type": "string"}},
                                             "required": ["word"]}}]}
    elif method == "tools/call":
        word = msg["params"]["arguments"].get("word", "")
        seen = "tag:%s key:%s" % (os.environ.get("OC_PROBE_TAG", "-"),
                                  "present" if "OC_TEST_OPENAI_KEY" in os.environ else "absent")
        result = {"content": [{"type": "text", "text": "echoed:" + word + " " + seen}],
                  "isError": False}
    else:
        print(json.dumps({"jsonrpc": "2.0", "id": msg["id"],
                          "error": {"code": -32601, "message": "no " + str(method)}}), flush=True)
        continue
    print(json.dumps({"jsonrpc": "2.0", "id": msg["id"], "result": result}), flush=True)
"#;

/// (b) The model calls a tool of an MCP server configured on the command line: the
/// CLI calls it (`tools/call` with the arguments) and sends its result back in the
/// next request as a `function_call_output` of the same `call_id`. The server gets
/// the variables `env` sets and `env_vars` names, not the rest of codex's
/// environment (not the API key).
#[test]
fn b_an_mcp_tool_call_goes_to_the_server_and_its_result_back_to_the_model() {
    let Some(cli) = the_cli() else { return };
    let scratch = Scratch::new("mcp");
    let script = scratch.dir.join("probe.py");
    std::fs::write(&script, PROBE).unwrap();
    let log = scratch.dir.join("probe.log");
    let api = ResponsesApi::start(move |req| {
        if req.tool_outputs().is_empty() {
            Reply::response(
                vec![Reply::function_call(
                    "call_echo_1",
                    Some("mcp__probe"),
                    "echo",
                    json!({"word": "conduit"}),
                )],
                usage(1000, 0, 20, 0),
            )
        } else {
            Reply::response(
                vec![Reply::text("The probe said it.")],
                usage(1200, 1000, 8, 0),
            )
        }
    })
    .unwrap();
    let extra = overrides(&[
        ("mcp_servers.probe.command", toml_str("python3")),
        (
            "mcp_servers.probe.args",
            format!("[{}]", toml_str(&script.display().to_string())),
        ),
        (
            "mcp_servers.probe.env",
            format!("{{PROBE_LOG={}}}", toml_str(&log.display().to_string())),
        ),
        (
            "mcp_servers.probe.env_vars",
            format!("[{}]", toml_str("OC_PROBE_TAG")),
        ),
        // `codex exec` never asks; without this the call fails "requires approval".
        (
            "mcp_servers.probe.default_tools_approval_mode",
            toml_str("approve"),
        ),
        // A server that does not start fails the run (else codex goes on without it).
        ("mcp_servers.probe.required", "true".into()),
    ]);
    // `OC_PROBE_TAG` is in codex's environment, passed on by `env_vars`.
    let args = exec(&api, &extra, "Echo conduit");
    let run = start_with(&cli, &scratch, &args, None, &[("OC_PROBE_TAG", "t-123")]).finish();
    assert!(run.status.success(), "{}", run.explain());

    // The server saw the handshake and the call, with the model's arguments.
    let seen: Vec<Value> = std::fs::read_to_string(&log)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let methods: Vec<&str> = seen.iter().filter_map(|m| m["method"].as_str()).collect();
    assert_eq!(
        methods,
        [
            "initialize",
            "notifications/initialized",
            "tools/list",
            "tools/call"
        ],
        "{seen:#?}"
    );
    let call = &seen[3]["params"];
    assert_eq!(call["name"], "echo");
    assert_eq!(call["arguments"], json!({"word": "conduit"}));
    assert_eq!(call["_meta"]["callId"], "call_echo_1");

    // Two model calls: the tool offered (namespace mcp__probe), then its result sent
    // back after the call it answers.
    let requests = api.responses();
    assert_eq!(requests.len(), 2, "{requests:#?}");
    assert!(
        requests[0].tools().iter().any(|t| t == "mcp__probe__echo"),
        "{:?}",
        requests[0].tools()
    );
    let input = requests[1].input();
    let call_at = input
        .iter()
        .position(|i| i["type"] == "function_call")
        .unwrap();
    assert_eq!(input[call_at]["call_id"], "call_echo_1");
    assert_eq!(input[call_at]["namespace"], "mcp__probe");
    assert_eq!(input[call_at]["name"], "echo");
    let outputs = requests[1].tool_outputs();
    assert_eq!(outputs.len(), 1, "{input:#?}");
    assert_eq!(outputs[0]["call_id"], "call_echo_1");
    let text = Request::output_text(&outputs[0]);
    assert!(
        text.contains("echoed:conduit tag:t-123 key:absent"),
        "{text}"
    );
    assert_eq!(input.last(), Some(&outputs[0]));

    // The events: the call as an mcp_tool_call item, then the answer; the turn's
    // usage is both calls'.
    let calls = run.items("mcp_tool_call");
    assert_eq!(calls.len(), 1, "{}", run.explain());
    assert_eq!(calls[0]["server"], "probe");
    assert_eq!(calls[0]["tool"], "echo");
    assert_eq!(calls[0]["arguments"], json!({"word": "conduit"}));
    assert_eq!(calls[0]["status"], "completed");
    assert_eq!(
        calls[0]["result"]["content"][0]["text"],
        "echoed:conduit tag:t-123 key:absent",
        "{}",
        run.explain()
    );
    assert_eq!(run.items("agent_message")[0]["text"], "The probe said it.");
    assert_eq!(
        run.usage(),
        reported(sum(usage(1000, 0, 20, 0), usage(1200, 1000, 8, 0)))
    );
}

/// (c) `codex exec resume <session> -` continues the same session: the same thread
/// id, and the next request carries the earlier turn (its prompt and answer) before
/// the new prompt, which came on stdin. `turn.completed`'s usage is the session's
/// running total, not the turn's.
#[test]
fn c_resume_continues_the_session() {
    let Some(cli) = the_cli() else { return };
    let scratch = Scratch::new("resume");
    let turn = Arc::new(AtomicU64::new(0));
    let first = usage(1000, 0, 10, 2);
    let second = usage(2100, 1000, 30, 4);
    let api = {
        let turn = Arc::clone(&turn);
        ResponsesApi::start(move |_req| match turn.fetch_add(1, Ordering::SeqCst) {
            0 => Reply::response(vec![Reply::text("First answer.")], first),
            _ => Reply::response(vec![Reply::text("Second answer.")], second),
        })
        .unwrap()
    };
    let one = codex(&cli, &scratch, &exec(&api, &[], "First prompt"), None);
    assert!(one.status.success(), "{}", one.explain());
    let session = one.thread_id();
    assert_eq!(one.usage(), reported(first));

    let two = codex(
        &cli,
        &scratch,
        &resume(&api, &session),
        Some("Second prompt"),
    );
    assert!(two.status.success(), "{}", two.explain());
    assert_eq!(two.thread_id(), session, "the same session");
    assert_eq!(two.items("agent_message")[0]["text"], "Second answer.");
    assert_eq!(
        two.usage(),
        reported(sum(first, second)),
        "the session's total"
    );

    let requests = api.responses();
    assert_eq!(requests.len(), 2, "{requests:#?}");
    let req = &requests[1];
    assert_eq!(req.header("session-id"), Some(session.as_str()));
    let users = req.messages("user");
    let at = |t: &str| users.iter().position(|u| u == t);
    assert!(at("First prompt") < at("Second prompt"), "{users:#?}");
    assert!(at("First prompt").is_some(), "{users:#?}");
    assert_eq!(req.messages("assistant"), ["First answer."]);
    // The whole earlier input comes again, in order, before the new prompt.
    let before = requests[0].input();
    let after = req.input();
    assert_eq!(
        &after[..before.len()],
        &before[..],
        "the earlier input first"
    );
}

/// (d) A 429 usage-limit answer ends the run at once (no retry): the CLI prints the
/// limit as an `error` event and `turn.failed`, and exits 1. The session's rollout
/// file says it in machine terms: the turn's error is `usage_limit_exceeded`, and
/// the rate-limit headers' reset time is there. A plain 429 rate limit reads
/// differently.
#[test]
fn d_a_usage_limit_fails_the_turn_with_exit_status_1() {
    let Some(cli) = the_cli() else { return };
    let scratch = Scratch::new("limit");
    // 2100-07-01T12:00:00Z: the CLI shows the reset time in local time.
    let resets_at = 4_118_126_400u64;
    let api = ResponsesApi::start(move |_req| Reply::usage_limit(resets_at)).unwrap();
    let run = codex(&cli, &scratch, &exec(&api, &[], "Anything"), None);
    assert_eq!(run.status.code(), Some(1), "{}", run.explain());
    assert_eq!(api.responses().len(), 1, "no retry");
    let errors = run.of_type("error");
    assert_eq!(errors.len(), 1, "{}", run.explain());
    let message = errors[0]["message"].as_str().unwrap();
    assert!(
        message.starts_with("You\u{2019}ve hit your usage limit."),
        "{message}"
    );
    assert!(message.contains("2100"), "the reset time: {message}");
    let failed = run.of_type("turn.failed");
    assert_eq!(failed.len(), 1, "{}", run.explain());
    assert_eq!(failed[0]["error"]["message"], message);
    assert!(run.of_type("turn.completed").is_empty());
    // The session's rollout (a later resume can continue it) holds the turn's end
    // with `codex_error_info`, and the rate limits the headers gave.
    let session = run.thread_id();
    let rollout = files_containing(&scratch.home().join("sessions"), session.as_bytes());
    assert_eq!(rollout.len(), 1, "{rollout:?}");
    let events: Vec<Value> = std::fs::read_to_string(&rollout[0])
        .unwrap()
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|l| l["type"] == "event_msg")
        .map(|l| l["payload"].clone())
        .collect();
    let complete = events
        .iter()
        .rfind(|p| p["type"] == "task_complete")
        .unwrap();
    assert_eq!(
        complete["error"]["codex_error_info"], "usage_limit_exceeded",
        "{complete:#}"
    );
    assert_eq!(complete["error"]["message"], message);
    let counts = events.iter().rfind(|p| p["type"] == "token_count").unwrap();
    assert_eq!(
        counts["rate_limits"]["primary"]["resets_at"], resets_at,
        "{counts:#}"
    );
    assert_eq!(counts["rate_limits"]["primary"]["used_percent"], 100.0);

    let scratch = Scratch::new("ratelimit");
    let api = ResponsesApi::start(|_req| Reply::rate_limit()).unwrap();
    let run = codex(&cli, &scratch, &exec(&api, &[], "Anything"), None);
    assert_eq!(run.status.code(), Some(1), "{}", run.explain());
    let failed = run.of_type("turn.failed");
    assert_eq!(failed.len(), 1, "{}", run.explain());
    let message = failed[0]["error"]["message"].as_str().unwrap();
    assert!(message.contains("429"), "{message}");
    assert!(!message.contains("usage limit"), "{message}");
}

/// (e) SIGINT mid-turn (the model's stream open) ends the run with exit status 1 and
/// no `turn.completed`; the session survives, and a resume carries the interrupted
/// prompt and a `<turn_aborted>` note. SIGTERM kills the run (no note), and the
/// session resumes too.
#[test]
fn e_sigint_interrupts_a_turn_and_the_session_resumes() {
    let Some(cli) = the_cli() else { return };
    let scratch = Scratch::new("sigint");
    let calls = Arc::new(AtomicU64::new(0));
    let api = {
        let calls = Arc::clone(&calls);
        ResponsesApi::start(move |_req| match calls.fetch_add(1, Ordering::SeqCst) {
            0 | 2 => Reply::Stall,
            _ => Reply::response(vec![Reply::text("Back again.")], usage(500, 0, 5, 0)),
        })
        .unwrap()
    };
    let running = start(&cli, &scratch, &exec(&api, &[], "A long task"), None);
    let deadline = Instant::now() + HANG;
    while api.responses().is_empty() {
        assert!(Instant::now() < deadline, "no model call within {HANG:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
    let pid = nix::unistd::Pid::from_raw(i32::try_from(running.child.id()).unwrap());
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGINT).unwrap();
    let run = running.finish();
    api.release();
    assert_eq!(run.status.code(), Some(1), "{}", run.explain());
    assert_eq!(run.of_type("turn.started").len(), 1, "{}", run.explain());
    assert!(
        run.of_type("turn.completed").is_empty(),
        "{}",
        run.explain()
    );
    let session = run.thread_id();

    let again = codex(&cli, &scratch, &resume(&api, &session), Some("Go on"));
    assert!(again.status.success(), "{}", again.explain());
    assert_eq!(again.thread_id(), session);
    let requests = api.responses();
    assert_eq!(requests.len(), 2, "{requests:#?}");
    // The interrupted turn's prompt, then the CLI's note that the user interrupted
    // it, then the new prompt.
    let users = requests[1].messages("user");
    let at = |t: &str| users.iter().position(|u| u.starts_with(t));
    assert!(at("A long task").is_some(), "{users:#?}");
    assert!(at("A long task") < at("<turn_aborted>"), "{users:#?}");
    assert!(at("<turn_aborted>") < at("Go on"), "{users:#?}");

    // SIGTERM is not handled: the process dies of it, and records no abort; the
    // session resumes all the same, with the killed turn's prompt and no note.
    let running = start(&cli, &scratch, &resume(&api, &session), Some("Stall again"));
    let deadline = Instant::now() + HANG;
    while api.responses().len() < 3 {
        assert!(Instant::now() < deadline, "no model call within {HANG:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
    let pid = nix::unistd::Pid::from_raw(i32::try_from(running.child.id()).unwrap());
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).unwrap();
    let run = running.finish();
    api.release();
    {
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(run.status.signal(), Some(15), "{}", run.explain());
    }
    assert!(
        run.of_type("turn.completed").is_empty(),
        "{}",
        run.explain()
    );
    assert!(run.of_type("turn.failed").is_empty(), "{}", run.explain());
    let last = codex(&cli, &scratch, &resume(&api, &session), Some("Once more"));
    assert!(last.status.success(), "{}", last.explain());
    let requests = api.responses();
    assert_eq!(requests.len(), 4, "{requests:#?}");
    let users = requests[3].messages("user");
    let at = |t: &str| users.iter().position(|u| u.starts_with(t));
    assert!(at("Stall again").is_some(), "{users:#?}");
    assert!(at("Stall again") < at("Once more"), "{users:#?}");
    assert_eq!(
        users
            .iter()
            .filter(|u| u.starts_with("<turn_aborted>"))
            .count(),
        1,
        "only the SIGINT's note: {users:#?}"
    );
}
