#![allow(clippy::unwrap_used)]
//! Whole turns with the real Claude Code CLI (`@anthropic-ai/claude-code`, pinned in
//! tests/claude-cli/package.json, installed by `npm ci --prefix tests/claude-cli`),
//! offline: claude talks to a local Messages API server ([`oc_systest::messages`])
//! that scripts each turn (tool uses of the toolbelt's MCP tools through the real
//! `open-conduit mcp`, the structured status, a final text), and the real daemons run
//! the Work.
//!
//! Without the installed CLI each test says why on stderr and skips, unless
//! `OC_REQUIRE_PEERS=1` (as `.ci/run` sets), under which it fails. `OC_CLAUDE_CLI`
//! names another `claude` to run them against (another version).
//!
//! claude refuses `--dangerously-skip-permissions` (what `bypassPermissions` is) as
//! root unless `IS_SANDBOX=1`: the bindings here set it, since CI runs as root
//! (docs/claude-code.md).

mod common;
use common::claude::{files_containing, the_cli};
use common::*;

use oc_systest::messages::{MessagesApi, Reply, Request};
use oc_systest::{Daemon, Package, Suite, HANG};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

/// The API key the bindings give claude (through `env`, or a secret).
const API_KEY: &str = "sk-ant-test-0c0nduit-key-8f3a2b";

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

fn script_file(path: &Path, text: &str) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
    std::fs::set_permissions(path, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
}

/// The tool use the last message answered (by the prefix of its ID), if any.
fn answered(req: &Request) -> Option<String> {
    req.tool_results().iter().find_map(|r| {
        let id = r["tool_use_id"].as_str()?;
        Some(id.strip_prefix("toolu_")?.split('_').next()?.to_owned())
    })
}

/// Whether a tool result reads as an error.
fn failed(req: &Request) -> bool {
    req.tool_results().iter().any(|r| r["is_error"] == true)
}

/// How a scripted turn goes.
#[derive(Clone)]
struct Plan {
    /// The outcome the agent declares through the toolbelt.
    declare: &'static str,
    /// The state of the structured status.
    state: &'static str,
    /// Answer every message request with a 429 instead.
    limited: bool,
    /// Hold the answer after read_context until the gate opens.
    gate: Option<Arc<Gate>>,
    /// Start with a `wait` whose `timeout_s` is -1 (then the status).
    bad_wait: bool,
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

/// The script: each turn reads its context, declares `plan.declare`, gives the status
/// `plan.state`, then says done. Turn `n` (the counter) reports `1000 * n` input and
/// `10 * n` output tokens per model call.
struct Turns {
    turn: Arc<AtomicU64>,
    ids: AtomicU64,
    plan: Plan,
}

impl Turns {
    fn reply(&self, req: &Request) -> Reply {
        if self.plan.limited {
            return Reply::Error {
                status: 429,
                kind: "rate_limit_error".into(),
                message: "Number of request tokens has exceeded your rate limit".into(),
            };
        }
        let n = self.turn.load(Ordering::SeqCst);
        let id = |step: &str| {
            format!(
                "toolu_{step}_{}_{}",
                n,
                self.ids.fetch_add(1, Ordering::SeqCst)
            )
        };
        let (input, output) = (1000 * n, 10 * n);
        let tools = req.tools();
        if !tools.iter().any(|t| t == "StructuredOutput") {
            // Not the turn's own call (a side request): a plain answer.
            return Reply::message(vec![Reply::text("ok")], input, output);
        }
        let blocks = match answered(req).as_deref() {
            None if self.plan.bad_wait => vec![Reply::tool_use(
                &id("bw"),
                "mcp__open-conduit__wait",
                json!({"description": "a bad wait", "timeout_s": -1}),
            )],
            Some("bw") => vec![Reply::tool_use(
                &id("so"),
                "StructuredOutput",
                json!({"state": self.plan.state, "summary": format!("turn {n}"),
                       "handoff": format!("after turn {n}")}),
            )],
            None => vec![Reply::tool_use(
                &id("rc"),
                "mcp__open-conduit__read_context",
                json!({}),
            )],
            Some("rc") => {
                if let Some(g) = &self.plan.gate {
                    g.wait();
                }
                vec![
                    Reply::text("I read the Work."),
                    Reply::tool_use(
                        &id("do"),
                        "mcp__open-conduit__declare_outcome",
                        json!({"outcome": self.plan.declare, "summary": format!("turn {n} declared")}),
                    ),
                ]
            }
            Some("do") => vec![Reply::tool_use(
                &id("so"),
                "StructuredOutput",
                json!({"state": self.plan.state, "summary": format!("turn {n}"),
                       "handoff": format!("after turn {n}")}),
            )],
            _ => vec![Reply::text("done")],
        };
        Reply::message(blocks, input, output)
    }
}

struct Setup {
    suite: Suite,
    api: MessagesApi,
    turn: Arc<AtomicU64>,
}

/// The suite with the claude-code package, the real `claude`, the toolbelt's
/// `open-conduit`, every daemon started and a binding `cc` with `config` (merged over
/// the defaults here) and, when `secret` is set, a connection `anthropic` holding
/// the API key.
fn started(cli: &Path, name: &str, plan: Plan, config: Value, secret: bool) -> Setup {
    let turn = Arc::new(AtomicU64::new(1));
    let turns = Turns {
        turn: Arc::clone(&turn),
        ids: AtomicU64::new(1),
        plan,
    };
    // A sandboxed binding's claude reaches the API through srt's proxy, which
    // 127.0.0.1 would bypass (srt's NO_PROXY).
    let sandbox = config.get("sandbox").cloned();
    let ip = if sandbox.is_some() {
        "127.0.0.2"
    } else {
        "127.0.0.1"
    };
    let api = MessagesApi::start_on(ip, move |req| turns.reply(req)).unwrap();
    let mut packages = Suite::first_party();
    packages.push(Package {
        name: "claude-code".into(),
        manifest: oc_claude_code::MANIFEST.into(),
        command: vec!["ext-claude-code".into()],
    });
    if sandbox.is_some() {
        packages.push(Package {
            name: "srt".into(),
            manifest: oc_srt::MANIFEST.into(),
            command: vec!["ext-srt".into()],
        });
    }
    let suite = Suite::new(Path::new(BIN), name, &packages).unwrap();
    let tbdir = suite.dir.join("toolbelt");
    script_file(
        &tbdir.join("open-conduit"),
        &format!("#!/bin/sh\nexec '{BIN}' \"$@\"\n"),
    );
    suite.set_args(
        Daemon::Schedulerd,
        &["--toolbelt-dir", tbdir.to_str().unwrap()],
    );
    suite.start_all().unwrap();
    // A `dir_name` in `config` names the working directory under the suite's.
    let work_dir = suite
        .dir
        .join(config["dir_name"].as_str().unwrap_or("work"));
    let config_dir = suite.dir.join("claude-config");
    std::fs::create_dir_all(&work_dir).unwrap();
    let mut env = json!({
        "ANTHROPIC_BASE_URL": api.base_url(),
        "CLAUDE_CONFIG_DIR": config_dir,
        "DISABLE_AUTOUPDATER": "1",
        "DISABLE_TELEMETRY": "1",
        "DISABLE_ERROR_REPORTING": "1",
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "IS_SANDBOX": "1",
    });
    let mut c = common::config(&suite);
    let mut binding = json!({"name": "cc", "executor": "claude-code",
        "config": {"binary": cli, "dir": work_dir, "model": "claude-test-model"}});
    if secret {
        let key = suite.dir.join("anthropic-key");
        std::fs::write(&key, API_KEY).unwrap();
        c["connections"]
            .as_array_mut()
            .unwrap()
            .push(json!({"name": "anthropic", "type": "claude-code",
                         "secret_refs": {"api_key": format!("file:{}", key.display())}}));
        binding["connection"] = json!("anthropic");
        binding["config"]["secret_env"] = json!({"ANTHROPIC_API_KEY": "api_key"});
    } else {
        env["ANTHROPIC_API_KEY"] = json!(API_KEY);
    }
    binding["config"]["env"] = env;
    if let (Some(b), Some(extra)) = (binding["config"].as_object_mut(), config.as_object()) {
        for (k, v) in extra
            .iter()
            .filter(|(k, _)| *k != "dir_name" && *k != "sandbox")
        {
            b.insert(k.clone(), v.clone());
        }
    }
    if let Some(s) = sandbox {
        binding["sandbox"] = s;
    }
    c["scopes"][0]["routes"] =
        json!([{"handler": "webhook", "binding": "cc", "config": {"entry": "ci"}}]);
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

/// The segment directories of every execution, with their segment.json.
fn segments(suite: &Suite) -> Vec<Value> {
    let mut out = Vec::new();
    let runs = suite.dir.join("state");
    let mut stack = vec![runs];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else if p.file_name().is_some_and(|n| n == "segment.json") {
                out.push(serde_json::from_slice(&std::fs::read(&p).unwrap()).unwrap());
            }
        }
    }
    out
}

fn debug(setup: &Setup) -> String {
    let reqs: Vec<String> = setup
        .api
        .requests()
        .iter()
        .map(|r| {
            format!(
                "{} {} {}",
                r.method,
                r.path,
                answered(r).unwrap_or_default()
            )
        })
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

fn result_of(e: &Value) -> &Value {
    &e["result"]
}

/// A first turn reads its context and declares the Work completed through the real
/// `open-conduit mcp`; the declared outcome wins over the status (`building`), and the
/// turn's usage is what the server reported.
#[test]
fn a_first_turn_reads_its_context_and_its_declared_outcome_completes_the_work() {
    let Some(cli) = the_cli() else { return };
    let plan = Plan {
        declare: "completed",
        state: "building",
        limited: false,
        gate: None,
        bad_wait: false,
    };
    let setup = started(&cli, "claude-cli-first", plan, json!({}), false);
    let suite = &setup.suite;
    assert_eq!(
        deliver(suite, "f-1", br#"{"number": 1}"#).unwrap().status,
        200
    );
    let work = the_work(suite);
    let ex = ended_executions(&setup, &work, 1);
    let r = result_of(&ex[0]);
    wait_for("the Work completed", || {
        (work_state(suite, &work) == "completed").then_some(())
    });
    // The toolbelt answered read_context with this Work (seen by the model).
    let msgs = setup.api.messages();
    let context = msgs
        .iter()
        .find(|m| answered(m).as_deref() == Some("rc"))
        .unwrap_or_else(|| panic!("no read_context result: {}", debug(&setup)));
    assert!(!failed(context), "read_context failed: {}", context.text());
    assert!(context.text().contains(&work), "{}", context.text());
    let declared = msgs
        .iter()
        .find(|m| answered(m).as_deref() == Some("do"))
        .unwrap();
    assert!(
        !failed(declared),
        "declare_outcome failed: {}",
        declared.text()
    );
    assert_eq!(
        declared.header("x-api-key"),
        Some(API_KEY),
        "the binding's key reaches the API"
    );
    // The key given in the binding's env is in no segment.json.
    let recorded: Vec<PathBuf> = files_containing(&suite.dir.join("state"), API_KEY.as_bytes())
        .into_iter()
        .filter(|p| p.file_name().is_some_and(|n| n == "segment.json"))
        .collect();
    assert!(recorded.is_empty(), "the key is recorded in {recorded:#?}");
    // Usage: each model call of turn 1 reported 1000 input and 10 output tokens.
    assert_eq!(setup.turn.load(Ordering::SeqCst), 1);
    let calls = msgs
        .iter()
        .filter(|m| m.tools().iter().any(|t| t == "StructuredOutput"))
        .count() as u64;
    assert_eq!(r["usage"]["input_tokens"], json!(1000 * calls), "{r}");
    assert_eq!(r["usage"]["output_tokens"], json!(10 * calls), "{r}");
}

/// The second delivery on the Work's key resumes the session (`--resume`, the first
/// turn's messages are in the second's requests), in a working directory whose
/// project folder Claude Code cuts and hashes, and the second turn's usage is its
/// own, not the difference from the first's.
#[test]
fn a_second_turn_resumes_the_session_and_reports_its_own_usage() {
    let Some(cli) = the_cli() else { return };
    let plan = Plan {
        declare: "handoff",
        state: "building",
        limited: false,
        gate: None,
        bad_wait: false,
    };
    // A working directory whose Claude Code project folder is cut and hashed (over
    // 200 UTF-16 units) and has a character outside the Basic Multilingual Plane.
    let dir_name = format!("work-\u{1F600}-{}", "x".repeat(200));
    let setup = started(
        &cli,
        "claude-cli-resume",
        plan,
        json!({ "dir_name": dir_name }),
        false,
    );
    let suite = &setup.suite;
    assert_eq!(
        deliver(suite, "r-1", br#"{"number": 2}"#).unwrap().status,
        200
    );
    let work = the_work(suite);
    ended_executions(&setup, &work, 1);
    let first_calls = setup.api.messages().len();
    setup.turn.store(2, Ordering::SeqCst);
    assert_eq!(
        deliver(suite, "r-2", br#"{"number": 2}"#).unwrap().status,
        200
    );
    let ex = ended_executions(&setup, &work, 2);
    let segs = segments(suite);
    assert!(
        segs.iter().any(|s| s["launched"] == "resume"),
        "the second turn resumed: {}",
        debug(&setup)
    );
    assert!(
        segs.iter()
            .all(|s| s["decision"]["handoff_reason"].is_null()),
        "{segs:#?}"
    );
    let msgs = setup.api.messages();
    let second: Vec<&Request> = msgs[first_calls..]
        .iter()
        .filter(|m| m.tools().iter().any(|t| t == "StructuredOutput"))
        .collect();
    assert!(
        second
            .first()
            .is_some_and(|m| m.text().contains("I read the Work.")),
        "the resumed session carries the first turn: {}",
        debug(&setup)
    );
    let r = result_of(ex.iter().max_by_key(|e| e["attempt"].as_u64()).unwrap());
    let n = second.len() as u64;
    assert_eq!(r["usage"]["input_tokens"], json!(2000 * n), "{r}");
    assert_eq!(r["usage"]["output_tokens"], json!(20 * n), "{r}");
}

/// With `permission_mode: acceptEdits` the toolbelt is still allowed: read_context
/// and declare_outcome run, and the Work takes the declared outcome.
#[test]
fn accept_edits_keeps_the_toolbelt() {
    let Some(cli) = the_cli() else { return };
    let plan = Plan {
        declare: "completed",
        state: "building",
        limited: false,
        gate: None,
        bad_wait: false,
    };
    let setup = started(
        &cli,
        "claude-cli-accept",
        plan,
        json!({"permission_mode": "acceptEdits"}),
        false,
    );
    let suite = &setup.suite;
    assert_eq!(
        deliver(suite, "a-1", br#"{"number": 3}"#).unwrap().status,
        200
    );
    let work = the_work(suite);
    ended_executions(&setup, &work, 1);
    let msgs = setup.api.messages();
    for step in ["rc", "do"] {
        let m = msgs
            .iter()
            .find(|m| answered(m).as_deref() == Some(step))
            .unwrap_or_else(|| panic!("no {step} result: {}", debug(&setup)));
        assert!(!failed(m), "{step} was refused: {}", m.text());
    }
    wait_for("the Work completed", || {
        let s = work_state(suite, &work);
        (s == "completed" || s == "failed").then_some(())
    });
    assert_eq!(work_state(suite, &work), "completed", "{}", debug(&setup));
}

/// A 429 from the API is a usage limit: the attempt fails as limited, and the Work's
/// retry waits for the reset (unknown here: the executor's default delay).
#[test]
fn a_429_is_read_as_a_usage_limit() {
    let Some(cli) = the_cli() else { return };
    let plan = Plan {
        declare: "completed",
        state: "finished",
        limited: true,
        gate: None,
        bad_wait: false,
    };
    let setup = started(&cli, "claude-cli-429", plan, json!({}), false);
    let suite = &setup.suite;
    assert_eq!(
        deliver(suite, "l-1", br#"{"number": 4}"#).unwrap().status,
        200
    );
    let work = the_work(suite);
    let ex = ended_executions(&setup, &work, 1);
    let r = result_of(&ex[0]);
    assert_eq!(ex[0]["state"], "failed", "{r}");
    assert_eq!(r["data"]["data"]["reason"], "usage_limit", "{r}");
    assert_eq!(r["data"]["data"]["limited"], true, "{r}");
    let retry_at = wait_for("the retry time", || {
        suite.call("store.work_get", json!({ "id": work })).unwrap()["work"]["retry_at_ms"].as_i64()
    });
    assert!(retry_at > protocol::time::now_ms(), "{retry_at}");
}

/// The API key comes from a connection's secret through `secret_env`: claude sends
/// it, and no file of the state directory (segment.json, logs, artifacts, KV)
/// holds it.
#[test]
fn a_secret_env_key_reaches_claude_and_is_written_nowhere() {
    let Some(cli) = the_cli() else { return };
    let plan = Plan {
        declare: "completed",
        state: "finished",
        limited: false,
        gate: None,
        bad_wait: false,
    };
    let setup = started(&cli, "claude-cli-secret", plan, json!({}), true);
    let suite = &setup.suite;
    assert_eq!(
        deliver(suite, "s-1", br#"{"number": 5}"#).unwrap().status,
        200
    );
    let work = the_work(suite);
    let ex = ended_executions(&setup, &work, 1);
    let r = result_of(&ex[0]);
    assert_ne!(ex[0]["state"], "failed", "{r}\n{}", debug(&setup));
    let msgs = setup.api.messages();
    assert!(!msgs.is_empty(), "{}", debug(&setup));
    assert!(
        msgs.iter().all(|m| m.header("x-api-key") == Some(API_KEY)),
        "claude sends the secret's key"
    );
    wait_for("the Work completed", || {
        (work_state(suite, &work) == "completed").then_some(())
    });
    let leaked: Vec<PathBuf> = files_containing(&suite.dir.join("state"), API_KEY.as_bytes());
    assert!(leaked.is_empty(), "the key is written in {leaked:#?}");
    let leaked = files_containing(&suite.dir.join("logs"), API_KEY.as_bytes());
    assert!(leaked.is_empty(), "the key is written in {leaked:#?}");
}

/// An event delivered while a turn runs is injected into the real claude's stdin,
/// taken in and echoed, and consumed with the turn: the Work completes with one
/// attempt, and the model saw the event.
#[test]
fn an_event_delivered_mid_turn_is_injected_into_the_real_cli_and_consumed() {
    let Some(cli) = the_cli() else { return };
    let gate = Arc::new(Gate::default());
    let plan = Plan {
        declare: "completed",
        state: "finished",
        limited: false,
        gate: Some(Arc::clone(&gate)),
        bad_wait: false,
    };
    let setup = started(&cli, "claude-cli-inject", plan, json!({}), false);
    let suite = &setup.suite;
    assert_eq!(
        deliver(suite, "j-1", br#"{"number": 8, "text": "first"}"#)
            .unwrap()
            .status,
        200
    );
    let work = the_work(suite);
    // The model call after read_context is held: the turn is running.
    wait_for("the held call", || {
        (gate.reached.load(Ordering::SeqCst) > 0).then_some(())
    });
    assert_eq!(
        deliver(
            suite,
            "j-2",
            br#"{"number": 8, "text": "arrived-mid-turn"}"#
        )
        .unwrap()
        .status,
        200
    );
    let injected = wait_for("the injection", || {
        files_containing(&suite.dir.join("state"), b"")
            .into_iter()
            .find(|p| p.file_name().is_some_and(|n| n == "injected.jsonl"))
            .filter(|p| std::fs::metadata(p).is_ok_and(|m| m.len() > 0))
    });
    gate.open();
    let ex = ended_executions(&setup, &work, 1);
    wait_for("the Work settled", || {
        let s = work_state(suite, &work);
        (s == "completed" || s == "failed").then_some(())
    });
    let all = suite
        .call("store.executions", json!({ "work_id": work }))
        .unwrap();
    assert_eq!(
        all["executions"].as_array().unwrap().len(),
        1,
        "no second attempt: {all}\n{}",
        debug(&setup)
    );
    let data = &result_of(&ex[0])["data"]["data"];
    assert_eq!(
        data["injected"],
        json!({"accepted": 1, "consumed": 1}),
        "{data}\n{}\ninjected: {}",
        debug(&setup),
        std::fs::read_to_string(&injected).unwrap_or_default()
    );
    assert!(
        setup
            .api
            .messages()
            .iter()
            .any(|m| m.text().contains("arrived-mid-turn")),
        "the model saw the injected event: {}",
        debug(&setup)
    );
    assert_eq!(work_state(suite, &work), "completed");
}

/// A toolbelt call whose argument breaks the tool's published schema (`wait` with
/// `timeout_s: -1`) is a tool error naming the field, as the model sees it, and
/// parks nothing.
#[test]
fn a_bad_tool_argument_is_a_tool_error_naming_the_field() {
    let Some(cli) = the_cli() else { return };
    let plan = Plan {
        declare: "completed",
        state: "finished",
        limited: false,
        gate: None,
        bad_wait: true,
    };
    let setup = started(&cli, "claude-cli-badarg", plan, json!({}), false);
    let suite = &setup.suite;
    assert_eq!(
        deliver(suite, "b-1", br#"{"number": 9}"#).unwrap().status,
        200
    );
    let work = the_work(suite);
    ended_executions(&setup, &work, 1);
    let msgs = setup.api.messages();
    let after = msgs
        .iter()
        .find(|m| answered(m).as_deref() == Some("bw"))
        .unwrap_or_else(|| panic!("no wait result: {}", debug(&setup)));
    assert!(failed(after), "the bad wait was accepted: {}", after.text());
    assert!(
        after
            .text()
            .contains("timeout_s: expected at least 1, got -1"),
        "{}",
        after.text()
    );
    wait_for("the Work settled", || {
        let s = work_state(suite, &work);
        (s != "running" && s != "pending").then_some(s)
    });
    assert_eq!(work_state(suite, &work), "completed", "{}", debug(&setup));
    let waits = suite
        .call("store.waits", json!({ "work_id": work }))
        .unwrap();
    assert!(
        waits["waits"].as_array().is_none_or(Vec::is_empty),
        "{waits}"
    );
}

/// srt as `npm ci --prefix tests/srt` installs it, when it and bubblewrap can
/// confine a command here; else `None` after saying why (a panic under
/// `OC_REQUIRE_PEERS=1` for what .ci/run installs).
fn the_srt() -> Option<PathBuf> {
    let srt = Path::new(env!("CARGO_MANIFEST_DIR")).join("srt/node_modules/.bin/srt");
    let scratch = std::env::temp_dir();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    match rt.block_on(oc_srt::check::probe(&srt.display().to_string(), &scratch)) {
        Ok(_) => Some(srt),
        Err(f) => {
            let peers = std::env::var_os("OC_REQUIRE_PEERS").is_some_and(|v| v == "1");
            assert!(
                !peers || f.code == "user_namespaces_refused",
                "srt cannot run, and OC_REQUIRE_PEERS=1 requires it: {}",
                f.reason
            );
            eprintln!("SKIPPED: {}", f.reason);
            None
        }
    }
}

/// The real CLI in an srt sandbox: its turn reaches the (scripted) API through srt's
/// proxy, reads its context and declares its outcome through the toolbelt, and the
/// Work completes; claude's temporary files are in the segment's own tmp folder.
#[test]
fn a_sandboxed_turn_of_the_real_cli_reaches_the_api_and_its_toolbelt() {
    let Some(cli) = the_cli() else { return };
    let Some(srt) = the_srt() else { return };
    let plan = Plan {
        declare: "completed",
        state: "building",
        limited: false,
        gate: None,
        bad_wait: false,
    };
    let sandbox = json!({"sandbox": {"type": "srt", "config": {"srt": srt}}});
    let setup = started(&cli, "claude-cli-sandbox", plan, sandbox, false);
    let suite = &setup.suite;
    assert_eq!(
        deliver(suite, "s-1", br#"{"number": 1}"#).unwrap().status,
        200
    );
    let work = the_work(suite);
    let ex = ended_executions(&setup, &work, 1);
    assert_eq!(ex[0]["state"], "completed", "{}: {}", ex[0], debug(&setup));
    wait_for("the Work completed", || {
        (work_state(suite, &work) == "completed").then_some(())
    });
    let msgs = setup.api.messages();
    let context = msgs
        .iter()
        .find(|m| answered(m).as_deref() == Some("rc"))
        .unwrap_or_else(|| panic!("no read_context result: {}", debug(&setup)));
    assert!(!failed(context), "read_context failed: {}", context.text());
    assert!(context.text().contains(&work), "{}", context.text());
    // The host pinned the plan it ran: srt, with the API host allowed.
    let pin = suite
        .dir
        .join("state/sandboxes/pins")
        .join(format!("{}.json", ex[0]["id"].as_str().unwrap()));
    let pin: Value = serde_json::from_slice(&std::fs::read(&pin).unwrap()).unwrap();
    // `srt --settings FILE -c LINE` (as root after the step that enters its pids
    // cgroup).
    let argv = pin["plan"]["argv"].as_array().unwrap();
    assert!(
        argv[argv.len() - 5].as_str().unwrap().ends_with("srt"),
        "{pin}"
    );
    let settings = pin["plan"]["data"]["settings"].as_str().unwrap();
    let settings: Value = serde_json::from_slice(&std::fs::read(settings).unwrap()).unwrap();
    assert_eq!(
        settings["network"]["allowedDomains"],
        json!(["127.0.0.2"]),
        "{settings}"
    );
}
