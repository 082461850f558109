#![allow(clippy::unwrap_used)]
//! Whole turns of the `codex` executor with the real Codex CLI (`@openai/codex`,
//! pinned in tests/codex-cli/package.json, installed by `npm ci --prefix
//! tests/codex-cli`), offline: codex talks to a local Responses API server
//! ([`oc_systest::responses`]) that scripts each turn (calls of the toolbelt's MCP
//! tools through the real `open-conduit mcp`, then the structured status as the last
//! message), and the real daemons run the Work.
//!
//! Without the installed CLI each test says why on stderr and skips, unless
//! `OC_REQUIRE_PEERS=1`, under which it fails. `OC_CODEX_CLI` names another `codex`.

mod common;
use common::claude::files_containing;
use common::*;

use oc_systest::responses::{Reply, Request, ResponsesApi, Usage};
use oc_systest::{Daemon, Package, Suite, HANG};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

/// The API key the binding gives codex through a connection's secret.
const API_KEY: &str = "sk-oc-codex-test-key-5e1d7c";
/// The toolbelt's tools, as codex offers them to the model.
const NS: &str = "mcp__open_conduit";

/// The pinned CLI, or the one `OC_CODEX_CLI` names.
fn codex_cli() -> PathBuf {
    match std::env::var_os("OC_CODEX_CLI") {
        Some(p) if !p.is_empty() => PathBuf::from(p),
        _ => Path::new(env!("CARGO_MANIFEST_DIR")).join("codex-cli/node_modules/.bin/codex"),
    }
}

/// The installed CLI, or `None` after saying why (a panic under
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
    let fix = "npm ci --prefix tests/codex-cli";
    let peers = std::env::var_os("OC_REQUIRE_PEERS").is_some_and(|v| v == "1");
    assert!(!peers, "{why}, and OC_REQUIRE_PEERS=1 requires it ({fix})");
    eprintln!("codex: SKIPPED: {why} ({fix})");
    None
}

fn wait_for<T>(what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + HANG * 2;
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(Instant::now() < deadline, "no {what} within {:?}", HANG * 2);
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A gate the script waits at (bounded), and the test opens.
#[derive(Default)]
struct Gate {
    open: Mutex<bool>,
    cond: Condvar,
    reached: AtomicU64,
}

impl Gate {
    fn wait(&self) {
        self.reached.fetch_add(1, Ordering::SeqCst);
        let open = self.open.lock().unwrap();
        let _ = self
            .cond
            .wait_timeout_while(open, HANG * 2, |o| !*o)
            .unwrap();
    }

    fn open(&self) {
        *self.open.lock().unwrap() = true;
        self.cond.notify_all();
    }
}

/// How the scripted turns go.
#[derive(Clone, Default)]
struct Plan {
    /// The outcome each turn declares through the toolbelt.
    declare: &'static str,
    /// The state of the structured status.
    state: &'static str,
    /// Answer every request with a usage limit resetting at this Unix time.
    limited: Option<u64>,
    /// Hold the answer after read_context until the gate opens.
    gate: Option<Arc<Gate>>,
    /// Turn 1 waits through the toolbelt (instead of declaring an outcome).
    wait: bool,
}

/// The step a request answers: the call ID's step of the tool output that ends its
/// input (`rc`, `do`), or `None` for a turn's first request.
fn answered(req: &Request) -> Option<String> {
    let last = req.input().pop()?;
    if last["type"] != "function_call_output" {
        return None;
    }
    let id = last["call_id"].as_str()?;
    Some(id.strip_prefix("call_")?.split('_').next()?.to_owned())
}

/// The text of the tool output that ends a request's input.
fn last_output(req: &Request) -> String {
    req.input()
        .last()
        .map(Request::output_text)
        .unwrap_or_default()
}

/// The script: each turn reads its context, declares `plan.declare`, then ends with
/// the status `plan.state` as its last message. Turn `n` (the counter) reports
/// `1000 * n` input tokens (`100 * n` of them cached) and `10 * n` output tokens per
/// model call.
struct Turns {
    turn: Arc<AtomicU64>,
    plan: Plan,
}

impl Turns {
    fn reply(&self, req: &Request) -> Reply {
        if let Some(at) = self.plan.limited {
            return Reply::usage_limit(at);
        }
        let n = self.turn.load(Ordering::SeqCst);
        let usage = Usage {
            input_tokens: 1000 * n,
            cached_tokens: 100 * n,
            output_tokens: 10 * n,
            reasoning_tokens: 0,
        };
        let call = |step: &str, name: &str, args: Value| {
            Reply::function_call(&format!("call_{step}_{n}"), Some(NS), name, args)
        };
        let items = match answered(req).as_deref() {
            None => vec![call("rc", "read_context", json!({}))],
            Some("rc") => {
                if let Some(g) = &self.plan.gate {
                    g.wait();
                }
                if self.plan.wait && n == 1 {
                    return Reply::response(
                        vec![call(
                            "wt",
                            "wait",
                            json!({"description": "waiting for the owner"}),
                        )],
                        usage,
                    );
                }
                vec![
                    Reply::text("I read the Work."),
                    call(
                        "do",
                        "declare_outcome",
                        json!({"outcome": self.plan.declare, "summary": format!("turn {n} declared")}),
                    ),
                ]
            }
            _ => {
                let status = json!({"state": self.plan.state, "summary": format!("turn {n}"),
                    "handoff": format!("after turn {n}"), "report": ""});
                vec![Reply::text(&status.to_string())]
            }
        };
        Reply::response(items, usage)
    }
}

struct Setup {
    suite: Suite,
    api: ResponsesApi,
    turn: Arc<AtomicU64>,
}

/// The suite with the codex package, the real `codex`, the toolbelt's
/// `open-conduit`, every daemon started, a connection `openai` holding the key and
/// a binding `cx` taking it through `secret_env`.
fn started(cli: &Path, name: &str, plan: Plan) -> Setup {
    let turn = Arc::new(AtomicU64::new(1));
    let turns = Turns {
        turn: Arc::clone(&turn),
        plan,
    };
    let api = ResponsesApi::start(move |req| turns.reply(req)).unwrap();
    let mut packages = Suite::first_party();
    packages.push(Package {
        name: "codex".into(),
        manifest: oc_codex::MANIFEST.into(),
        command: vec!["ext-codex".into()],
    });
    let suite = Suite::new(Path::new(BIN), name, &packages).unwrap();
    let tbdir = suite.dir.join("toolbelt");
    std::fs::create_dir_all(&tbdir).unwrap();
    let tool = tbdir.join("open-conduit");
    std::fs::write(&tool, format!("#!/bin/sh\nexec '{BIN}' \"$@\"\n")).unwrap();
    std::fs::set_permissions(&tool, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    suite.set_args(
        Daemon::Schedulerd,
        &["--toolbelt-dir", tbdir.to_str().unwrap()],
    );
    suite.start_all().unwrap();
    let work_dir = suite.dir.join("work");
    std::fs::create_dir_all(&work_dir).unwrap();
    let key = suite.dir.join("secrets/openai-key");
    std::fs::create_dir_all(key.parent().unwrap()).unwrap();
    std::fs::write(&key, API_KEY).unwrap();
    let mut c = common::config(&suite);
    c["connections"]
        .as_array_mut()
        .unwrap()
        .push(json!({"name": "openai", "type": "codex",
                     "secret_refs": {"api_key": format!("file:{}", key.display())}}));
    let binding = json!({"name": "cx", "executor": "codex", "connection": "openai",
        "config": {"binary": cli, "dir": work_dir, "model": "oc-test-model",
                   "base_url": api.base_url(), "sandbox_mode": "read-only",
                   "secret_env": {"OPENAI_API_KEY": "api_key"}}});
    c["scopes"][0]["routes"] =
        json!([{"handler": "webhook", "binding": "cx", "config": {"entry": "ci"}}]);
    c["scopes"][0]["bindings"] = json!([binding]);
    suite.apply_config(&c, HOOK).unwrap();
    Setup { suite, api, turn }
}

fn the_work(suite: &Suite) -> String {
    wait_for("Work", || {
        let w = suite
            .call("store.works", json!({"scope_id": "demo"}))
            .unwrap();
        w["works"][0]["id"].as_str().map(str::to_owned)
    })
}

fn work_state(suite: &Suite, id: &str) -> String {
    suite.call("store.work_get", json!({ "id": id })).unwrap()["work"]["state"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

/// Every segment.json under the state directory.
fn segments(suite: &Suite) -> Vec<Value> {
    files_containing(&suite.dir.join("state"), b"")
        .into_iter()
        .filter(|p| p.file_name().is_some_and(|n| n == "segment.json"))
        .map(|p| serde_json::from_slice(&std::fs::read(&p).unwrap()).unwrap())
        .collect()
}

fn debug(setup: &Setup) -> String {
    let reqs: Vec<String> = setup
        .api
        .requests()
        .iter()
        .map(|r| format!("{} {} {:?}", r.method, r.path, answered(r)))
        .collect();
    let mut logs = String::new();
    for p in files_containing(&setup.suite.dir.join("state"), b"") {
        let name = p.file_name().and_then(|n| n.to_str()).unwrap_or_default();
        if ["err.log", "out.jsonl", "wrapper.log", "status"].contains(&name) {
            let text = std::fs::read_to_string(&p).unwrap_or_default();
            let tail: String = text
                .chars()
                .rev()
                .take(3000)
                .collect::<Vec<_>>()
                .into_iter()
                .rev()
                .collect();
            logs.push_str(&format!("--- {}\n{tail}\n", p.display()));
        }
    }
    format!(
        "requests: {reqs:#?}\nsegments: {:#?}\n{logs}\nextrunner log:\n{}",
        segments(&setup.suite),
        setup.suite.log(Daemon::Extrunner)
    )
}

/// The Work's executions once `n` of them have ended, oldest first.
fn ended_executions(setup: &Setup, work: &str, n: usize) -> Vec<Value> {
    let deadline = Instant::now() + HANG * 2;
    loop {
        let ex = setup
            .suite
            .call("store.executions", json!({ "work_id": work }))
            .unwrap();
        let all = ex["executions"].as_array().cloned().unwrap_or_default();
        let ended: Vec<Value> = all
            .into_iter()
            .filter(|e| e["settled_at"].is_string())
            .collect();
        if ended.len() >= n {
            return ended;
        }
        assert!(
            Instant::now() < deadline,
            "no {n} ended executions: {ex:#}\n{}",
            debug(setup)
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// No file of the state directory or the logs, and no process's argv, holds the key.
fn assert_key_written_nowhere(suite: &Suite) {
    for dir in ["state", "logs"] {
        let leaked = files_containing(&suite.dir.join(dir), API_KEY.as_bytes());
        assert!(leaked.is_empty(), "the key is written in {leaked:#?}");
    }
    let specs = files_containing(&suite.dir.join("state"), b"\"argv\"");
    assert!(!specs.is_empty(), "no spec.json with the argv");
}

/// A delivery starts a Work whose codex turn reads its context and declares its
/// outcome through the real `open-conduit mcp`; the status is the last message; the
/// turn's usage is the server's; the key reaches the API only through codex's
/// environment. A second delivery resumes the same session: its request carries the
/// first turn, and its usage is its own (the session's totals less the first's).
#[test]
fn a_turn_calls_the_toolbelt_and_the_next_delivery_resumes_its_session() {
    let Some(cli) = the_cli() else { return };
    let plan = Plan {
        declare: "handoff",
        state: "building",
        ..Plan::default()
    };
    let setup = started(&cli, "codex-turns", plan);
    let suite = &setup.suite;
    assert_eq!(
        deliver(suite, "c-1", br#"{"number": 1}"#).unwrap().status,
        200
    );
    let work = the_work(suite);
    let ex = ended_executions(&setup, &work, 1);
    let first = &ex[0]["result"];
    assert_ne!(ex[0]["state"], "failed", "{first}\n{}", debug(&setup));
    let calls = setup.api.responses();
    // read_context answered with this Work, and declare_outcome was accepted.
    let rc = calls
        .iter()
        .find(|r| answered(r).as_deref() == Some("rc"))
        .unwrap_or_else(|| panic!("no read_context result: {}", debug(&setup)));
    assert!(last_output(rc).contains(&work), "{}", last_output(rc));
    let done = calls
        .iter()
        .find(|r| answered(r).as_deref() == Some("do"))
        .unwrap_or_else(|| panic!("no declare_outcome result: {}", debug(&setup)));
    assert!(
        !last_output(done).to_lowercase().contains("error"),
        "declare_outcome failed: {}",
        last_output(done)
    );
    assert!(rc
        .tools()
        .iter()
        .any(|t| t == &format!("{NS}__declare_outcome")));
    for r in &calls {
        assert_eq!(
            r.header("authorization"),
            Some(format!("Bearer {API_KEY}").as_str()),
            "the secret's key reaches the API"
        );
    }
    assert_eq!(first["data"]["data"]["state"], "building", "{first}");
    assert_eq!(first["data"]["data"]["kind"], "fresh", "{first}");
    // Usage of turn 1: each call 1000 input (100 cached) and 10 output tokens.
    let n1 = calls.len() as u64;
    assert_eq!(first["usage"]["input_tokens"], json!(900 * n1), "{first}");
    assert_eq!(first["usage"]["cached_tokens"], json!(100 * n1), "{first}");
    assert_eq!(first["usage"]["output_tokens"], json!(10 * n1), "{first}");
    let session = first["data"]["data"]["session"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(!session.is_empty(), "{first}");

    // The second delivery on the Work's key resumes the session.
    setup.turn.store(2, Ordering::SeqCst);
    assert_eq!(
        deliver(suite, "c-2", br#"{"number": 1}"#).unwrap().status,
        200
    );
    let ex = ended_executions(&setup, &work, 2);
    let second = &ex.iter().max_by_key(|e| e["attempt"].as_u64()).unwrap()["result"];
    assert_eq!(
        second["data"]["data"]["kind"],
        "resume",
        "{second}\n{}",
        debug(&setup)
    );
    assert_eq!(
        second["data"]["data"]["session"],
        json!(session),
        "{second}"
    );
    let all = setup.api.responses();
    let later = &all[calls.len()..];
    let resumed = later.first().unwrap();
    assert_eq!(resumed.header("session-id"), Some(session.as_str()));
    assert!(
        resumed
            .messages("assistant")
            .iter()
            .any(|m| m.contains("I read the Work.")),
        "the resumed session carries the first turn: {}",
        debug(&setup)
    );
    let n2 = later.len() as u64;
    assert_eq!(
        second["usage"]["input_tokens"],
        json!(1800 * n2),
        "{second}"
    );
    assert_eq!(second["usage"]["output_tokens"], json!(20 * n2), "{second}");
    // The launch: the toolbelt as a required, approved MCP server given only its
    // variables, the key only by its variable's name, commands without it.
    let spec = files_containing(&suite.dir.join("state"), b"\"argv\"")
        .into_iter()
        .find(|p| p.file_name().is_some_and(|n| n == "spec.json"))
        .unwrap();
    let spec: Value = serde_json::from_slice(&std::fs::read(spec).unwrap()).unwrap();
    let argv: Vec<&str> = spec["argv"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    for want in [
        "shell_environment_policy.inherit=\"core\"",
        "features.plugins=false",
        "analytics.enabled=false",
        "model_providers.oc.env_key=\"OPENAI_API_KEY\"",
        "mcp_servers.open-conduit.required=true",
        "mcp_servers.open-conduit.default_tools_approval_mode=\"approve\"",
        "mcp_servers.open-conduit.env_vars=[\"OS_ENDPOINT\", \"OS_TOKEN_FILE\"]",
    ] {
        assert!(argv.contains(&want), "{want} not in {argv:?}");
    }
    let segs = segments(suite);
    let home = Path::new(segs[0]["home"].as_str().unwrap());
    let rollouts = files_containing(&home.join("sessions"), session.as_bytes());
    assert!(
        !rollouts.is_empty(),
        "the session lives in the Work's CODEX_HOME"
    );
    assert!(
        segs.iter()
            .all(|s| s["home"].as_str().unwrap().contains("/state/")),
        "CODEX_HOME under the state directory: {segs:#?}"
    );
    assert_key_written_nowhere(suite);

    // A session whose rollout is gone is not resumed: the next turn starts afresh,
    // and its usage is its whole (a zero baseline).
    std::fs::remove_dir_all(home.join("sessions")).unwrap();
    setup.turn.store(3, Ordering::SeqCst);
    let before = setup.api.responses().len();
    assert_eq!(
        deliver(suite, "c-3", br#"{"number": 1}"#).unwrap().status,
        200
    );
    let ex = ended_executions(&setup, &work, 3);
    let third = &ex.iter().max_by_key(|e| e["attempt"].as_u64()).unwrap()["result"];
    assert_eq!(
        third["data"]["data"]["kind"],
        "fresh",
        "{third}\n{}",
        debug(&setup)
    );
    assert_ne!(third["data"]["data"]["session"], json!(session), "{third}");
    let n3 = (setup.api.responses().len() - before) as u64;
    assert_eq!(third["usage"]["input_tokens"], json!(2700 * n3), "{third}");

    // doctor runs the binding's CLI: its version, named with the binding.
    let out = Command::new(BIN)
        .arg("open-conduit")
        .arg("--bus")
        .arg(&suite.bus)
        .arg("doctor")
        .output()
        .unwrap();
    let doctor = String::from_utf8_lossy(&out.stdout).into_owned();
    let line = doctor
        .lines()
        .find(|l| l.contains("codex") && l.contains("Codex CLI"))
        .unwrap_or_else(|| panic!("no codex check: {doctor}"));
    assert!(
        line.contains("ok") && line.contains("codex-cli"),
        "{doctor}"
    );
}

/// A usage limit from the API fails the turn as limited, with the reset the server
/// sent (plus the grace) as the retry time, and holds the executor: another Work's
/// turn launches nothing before the reset.
#[test]
fn a_usage_limit_holds_the_executor_until_the_reset() {
    let Some(cli) = the_cli() else { return };
    let reset = (protocol::time::now_ms() / 1000 + 3600) as u64;
    let plan = Plan {
        declare: "completed",
        state: "finished",
        limited: Some(reset),
        ..Plan::default()
    };
    let setup = started(&cli, "codex-limit", plan);
    let suite = &setup.suite;
    assert_eq!(
        deliver(suite, "l-1", br#"{"number": 4}"#).unwrap().status,
        200
    );
    let work = the_work(suite);
    let ex = ended_executions(&setup, &work, 1);
    let r = &ex[0]["result"];
    assert_eq!(ex[0]["state"], "failed", "{r}");
    assert_eq!(
        r["data"]["data"]["reason"],
        "usage_limit",
        "{r}\n{}",
        debug(&setup)
    );
    assert_eq!(r["data"]["data"]["limited"], true, "{r}");
    let expected = protocol::time::format_rfc3339_ms(reset as i64 * 1000 + 2 * 60_000);
    assert_eq!(r["data"]["data"]["resets_at"], json!(expected), "{r}");
    let retry_at = wait_for("the retry time", || {
        suite.call("store.work_get", json!({ "id": work })).unwrap()["work"]["retry_at_ms"].as_i64()
    });
    assert!(retry_at > protocol::time::now_ms(), "{retry_at}");
    // Another Work meanwhile: held, no launch, no request.
    let requests = setup.api.responses().len();
    let launched = segments(suite).len();
    assert_eq!(
        deliver(suite, "l-2", br#"{"number": 5}"#).unwrap().status,
        200
    );
    let other = wait_for("the other Work", || {
        let w = suite
            .call("store.works", json!({"scope_id": "demo"}))
            .unwrap();
        w["works"]
            .as_array()?
            .iter()
            .filter_map(|w| w["id"].as_str())
            .find(|id| *id != work)
            .map(str::to_owned)
    });
    let ex = ended_executions(&setup, &other, 1);
    let r = &ex[0]["result"];
    assert_eq!(r["data"]["data"]["reason"], "usage_limit", "{r}");
    assert_eq!(segments(suite).len(), launched, "the hold launched nothing");
    assert_eq!(setup.api.responses().len(), requests);
}

/// SIGKILL of extrunner while codex waits on the API: the segment runs on under its
/// wrapper, the restarted extrunner adopts it, and the Work completes with one
/// execution and one launch.
#[test]
fn sigkill_of_extrunner_mid_turn_adopts_the_run_with_one_launch() {
    let Some(cli) = the_cli() else { return };
    let gate = Arc::new(Gate::default());
    let plan = Plan {
        declare: "completed",
        state: "finished",
        gate: Some(Arc::clone(&gate)),
        ..Plan::default()
    };
    let setup = started(&cli, "codex-adopt", plan);
    let suite = &setup.suite;
    assert_eq!(
        deliver(suite, "k-1", br#"{"number": 7}"#).unwrap().status,
        200
    );
    let work = the_work(suite);
    wait_for("the held call", || {
        (gate.reached.load(Ordering::SeqCst) > 0).then_some(())
    });
    // Mid-turn: no process's argv holds the key, and the toolbelt's MCP server (given
    // only the variables codex's env_vars names) has none in its environment.
    let marker = suite.dir.display().to_string();
    let (mut servers, mut ours) = (0, 0);
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let read = |f: &str| std::fs::read(e.path().join(f)).unwrap_or_default();
        let (argv, environ) = (read("cmdline"), read("environ"));
        let has = |b: &[u8], s: &[u8]| b.windows(s.len()).any(|w| w == s);
        if !has(&argv, marker.as_bytes()) && !has(&environ, marker.as_bytes()) {
            continue;
        }
        ours += 1;
        assert!(!has(&argv, API_KEY.as_bytes()), "the key is in an argv");
        if argv.ends_with(b"\0mcp\0") {
            servers += 1;
            assert!(
                !has(&environ, API_KEY.as_bytes()),
                "the MCP server has the key"
            );
            assert!(
                has(&environ, b"OS_TOKEN_FILE="),
                "the MCP server has its variables"
            );
        }
    }
    assert!(
        ours > 0 && servers > 0,
        "the turn's processes: {ours}, servers: {servers}"
    );
    suite.kill(Daemon::Extrunner);
    suite.start(Daemon::Extrunner).unwrap();
    gate.open();
    wait_for("the Work settled", || {
        let s = work_state(suite, &work);
        (s == "completed" || s == "failed").then_some(())
    });
    let ex = suite
        .call("store.executions", json!({ "work_id": work }))
        .unwrap();
    assert_eq!(
        work_state(suite, &work),
        "completed",
        "{ex}\n{}",
        debug(&setup)
    );
    assert_eq!(
        ex["executions"].as_array().unwrap().len(),
        1,
        "adopted, not launched again: {ex}"
    );
    assert_eq!(segments(suite).len(), 1, "one launch only");
    assert_key_written_nowhere(suite);
}

/// A turn that waits through the toolbelt parks the Work; the next delivery wakes
/// it, and the same execution resumes the same codex session in a second segment
/// (`executor.resume`), which ends the turn.
#[test]
fn a_wait_parks_the_work_and_the_wake_resumes_the_session() {
    let Some(cli) = the_cli() else { return };
    let plan = Plan {
        declare: "completed",
        state: "finished",
        wait: true,
        ..Plan::default()
    };
    let setup = started(&cli, "codex-wait", plan);
    let suite = &setup.suite;
    assert_eq!(
        deliver(suite, "w-1", br#"{"number": 3}"#).unwrap().status,
        200
    );
    let work = the_work(suite);
    wait_for("the Work waiting", || {
        (work_state(suite, &work) == "waiting").then_some(())
    });
    let waits = suite
        .call("store.waits", json!({ "work_id": work }))
        .unwrap();
    assert_eq!(
        waits["waits"][0]["description"], "waiting for the owner",
        "{waits}"
    );
    let first = segments(suite);
    assert_eq!(first.len(), 1, "{first:#?}");
    setup.turn.store(2, Ordering::SeqCst);
    assert_eq!(
        deliver(suite, "w-2", br#"{"number": 3}"#).unwrap().status,
        200
    );
    wait_for("the Work completed", || {
        let s = work_state(suite, &work);
        (s == "completed" || s == "failed").then_some(())
    });
    assert_eq!(work_state(suite, &work), "completed", "{}", debug(&setup));
    let segs = segments(suite);
    let resumed = segs
        .iter()
        .find(|s| s["segment"] == "2")
        .unwrap_or_else(|| panic!("no second segment: {segs:#?}"));
    assert_eq!(resumed["kind"], "resume", "{segs:#?}");
    assert_eq!(
        resumed["execution_id"], first[0]["execution_id"],
        "{segs:#?}"
    );
    let session = setup.api.responses()[0]
        .header("session-id")
        .unwrap()
        .to_owned();
    assert_eq!(resumed["session"], json!(session), "{segs:#?}");
    let later: Vec<Request> = setup
        .api
        .responses()
        .into_iter()
        .filter(|r| {
            r.messages("user")
                .iter()
                .any(|m| m.contains("## Since your last turn"))
        })
        .collect();
    assert!(!later.is_empty(), "the wake's prompt: {}", debug(&setup));
    assert_key_written_nowhere(suite);
}

/// An operator's interrupt mid-turn ends codex (the attempt fails as interrupted,
/// with the reason), and the retry resumes the same session: its request carries
/// the interrupted turn's prompt, and the Work completes.
#[test]
fn an_interrupted_turn_is_retried_on_the_same_session() {
    let Some(cli) = the_cli() else { return };
    let gate = Arc::new(Gate::default());
    let plan = Plan {
        declare: "completed",
        state: "finished",
        gate: Some(Arc::clone(&gate)),
        ..Plan::default()
    };
    let setup = started(&cli, "codex-interrupt", plan);
    let suite = &setup.suite;
    assert_eq!(
        deliver(suite, "i-1", br#"{"number": 8}"#).unwrap().status,
        200
    );
    let work = the_work(suite);
    wait_for("the held call", || {
        (gate.reached.load(Ordering::SeqCst) > 0).then_some(())
    });
    let session = setup.api.responses()[0]
        .header("session-id")
        .unwrap()
        .to_owned();
    suite
        .call(
            "sched.interrupt",
            json!({"work_id": work, "reason": "the operator asked"}),
        )
        .unwrap();
    let ex = ended_executions(&setup, &work, 1);
    let r = &ex[0]["result"];
    assert_eq!(ex[0]["state"], "failed", "{r}");
    let error = r["error"].as_str().unwrap_or_default();
    assert!(
        error.contains("interrupted") && error.contains("the operator asked"),
        "{r}"
    );
    assert_eq!(r["data"]["data"]["reason"], "interrupted", "{r}");
    gate.open();
    setup.turn.store(2, Ordering::SeqCst);
    wait_for("the Work completed", || {
        let s = work_state(suite, &work);
        (s == "completed" || s == "failed").then_some(())
    });
    assert_eq!(work_state(suite, &work), "completed", "{}", debug(&setup));
    let ex = ended_executions(&setup, &work, 2);
    let retry = &ex.iter().max_by_key(|e| e["attempt"].as_u64()).unwrap()["result"];
    assert_eq!(retry["data"]["data"]["kind"], "resume", "{retry}");
    assert_eq!(retry["data"]["data"]["session"], json!(session), "{retry}");
    let resumed = setup
        .api
        .responses()
        .into_iter()
        .find(|r| r.header("session-id") == Some(session.as_str()) && r.messages("user").len() > 2)
        .unwrap_or_else(|| panic!("no resumed request: {}", debug(&setup)));
    assert!(
        resumed
            .messages("user")
            .iter()
            .filter(|m| m.contains("## Already waiting"))
            .count()
            >= 1,
        "the retry carries the interrupted prompt: {:?}",
        resumed.messages("user")
    );
}
