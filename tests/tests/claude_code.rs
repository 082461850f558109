#![allow(clippy::unwrap_used)]
//! The claude-code executor with real daemons: a delivery becomes Work, a turn runs the
//! fake `claude`, which drives the real `open-conduit mcp` (initialize, tools/list,
//! read_context, wait) so the Work parks; the next matching delivery resumes the same
//! session (`--resume`) and the turn ends, handed back. Its transcript and output are
//! the run's artifacts.

mod common;
use common::*;

use oc_systest::{Daemon, Package, Suite, HANG};
use serde_json::{json, Value};
use std::path::Path;
use std::time::{Duration, Instant};

fn wait_for<T>(what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + HANG;
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(Instant::now() < deadline, "no {what} within {HANG:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn script(path: &Path, text: &str) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
    std::fs::set_permissions(path, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
}

fn records(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

fn work_state(suite: &Suite, id: &str) -> String {
    suite.call("store.work_get", json!({ "id": id })).unwrap()["work"]["state"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

fn flag(argv: &Value, name: &str) -> Option<String> {
    let a = argv.as_array()?;
    let i = a.iter().position(|x| x == name)?;
    a.get(i + 1)?.as_str().map(str::to_owned)
}

/// The suite with the claude-code package, the fake `claude` and the toolbelt's
/// `open-conduit`, every daemon started, and a binding `cc` whose env is `env`.
fn started_with(name: &str, env: Value) -> (Suite, std::path::PathBuf) {
    started_cc(name, env, None)
}

/// [`started_with`], and the binding's workspace from this git resource config
/// (instead of the executor's `dir`) when one is given, on branch `fix-9`.
fn started_cc(name: &str, env: Value, resource: Option<Value>) -> (Suite, std::path::PathBuf) {
    let mut packages = Suite::first_party();
    packages.push(Package {
        name: "claude-code".into(),
        manifest: oc_claude_code::MANIFEST.into(),
        command: vec!["ext-claude-code".into()],
    });
    let suite = Suite::new(Path::new(BIN), name, &packages).unwrap();
    // `claude` is the fake; the toolbelt directory's `open-conduit` is this suite's
    // binary, which serves `open-conduit mcp`.
    let claude = suite.dir.join("bin/claude");
    script(
        &claude,
        &format!("#!/bin/sh\nexec '{BIN}' fake-claude \"$@\"\n"),
    );
    let tbdir = suite.dir.join("toolbelt");
    script(
        &tbdir.join("open-conduit"),
        &format!("#!/bin/sh\nexec '{BIN}' \"$@\"\n"),
    );
    suite.set_args(
        Daemon::Schedulerd,
        &["--toolbelt-dir", tbdir.to_str().unwrap()],
    );
    suite.start_all().unwrap();
    let work_dir = suite.dir.join("work");
    let config_dir = suite.dir.join("claude-config");
    let rec = suite.dir.join("claude.jsonl");
    std::fs::create_dir_all(&work_dir).unwrap();
    let mut env = env;
    env["FAKE_CLAUDE_RECORD"] = json!(rec);
    env["CLAUDE_CONFIG_DIR"] = json!(config_dir);
    let mut c = config(&suite);
    c["scopes"][0]["routes"] =
        json!([{"handler": "webhook", "binding": "cc", "config": {"entry": "ci"}}]);
    c["scopes"][0]["bindings"] = json!([{"name": "cc", "executor": "claude-code",
        "config": {"binary": claude, "dir": work_dir, "env": env}}]);
    if let Some(r) = resource {
        let b = &mut c["scopes"][0]["bindings"][0];
        b["resource"] = json!({"type": "git", "config": r});
        b["config"]["branch"] = json!("fix-9");
        if let Some(cfg) = b["config"].as_object_mut() {
            cfg.remove("dir");
        }
    }
    suite.apply_config(&c, HOOK).unwrap();
    (suite, rec)
}

fn the_work(suite: &Suite) -> String {
    wait_for("Work", || {
        let w = suite
            .call("store.works", json!({"scope_id": "demo"}))
            .unwrap();
        w["works"][0]["id"].as_str().map(str::to_owned)
    })
}

fn launches(rec: &Path) -> usize {
    records(rec)
        .iter()
        .filter(|r| r.get("argv").is_some())
        .count()
}

#[test]
fn a_claude_turn_waits_through_the_real_mcp_server_and_resumes_its_session() {
    let (suite, rec) = started_with("claude-code", json!({"FAKE_CLAUDE_MODE": "wait"}));
    assert_eq!(
        deliver(&suite, "c-1", br#"{"number": 9}"#).unwrap().status,
        200
    );

    // The turn read its context and waited, through the real MCP server: the Work parks.
    let work_id = the_work(&suite);
    wait_for("the Work waiting", || {
        (work_state(&suite, &work_id) == "waiting").then_some(())
    });
    let first = records(&rec);
    let invocation = first.iter().find(|r| r.get("argv").is_some()).unwrap();
    let session = flag(&invocation["argv"], "--session-id").unwrap();
    assert!(
        flag(&invocation["argv"], "--mcp-config").is_some(),
        "{invocation}"
    );
    // The token is in no environment the agent sees.
    assert!(invocation["env"].get("OS_TOKEN").is_none(), "{invocation}");
    let mcp = first
        .iter()
        .find_map(|r| r["mcp"].as_array().cloned())
        .unwrap();
    let answer = |m: &str| mcp.iter().find(|x| x["method"] == m).unwrap()["answer"].clone();
    assert_eq!(
        answer("initialize")["result"]["serverInfo"]["name"],
        "open-conduit"
    );
    let context = answer("tools/call read_context");
    assert_eq!(context["result"]["isError"], false, "{context}");
    assert_eq!(
        context["result"]["structuredContent"]["work"]["id"],
        work_id.as_str(),
        "{context}"
    );
    let wait = answer("tools/call wait");
    assert_eq!(wait["result"]["isError"], false, "{wait}");
    let waits = suite
        .call("store.waits", json!({ "work_id": work_id }))
        .unwrap();
    assert_eq!(
        waits["waits"][0]["description"], "waiting for the owner",
        "{waits}"
    );

    // The next delivery on its key wakes it: the same session resumes.
    assert_eq!(
        deliver(&suite, "c-2", br#"{"number": 9}"#).unwrap().status,
        200
    );
    let resumed = wait_for("the resumed segment", || {
        records(&rec)
            .into_iter()
            .filter(|r| r.get("argv").is_some())
            .nth(1)
    });
    assert_eq!(
        flag(&resumed["argv"], "--resume").as_deref(),
        Some(session.as_str()),
        "{resumed}"
    );
    wait_for("the turn handed back", || {
        let s = work_state(&suite, &work_id);
        (s != "waiting" && s != "running" && s != "woken").then_some(s)
    });
    let ex = suite
        .call("store.executions", json!({ "work_id": work_id }))
        .unwrap();
    let result = &ex["executions"][0]["result"];
    assert!(
        result["artifacts"]
            .as_array()
            .is_some_and(|a| !a.is_empty()),
        "the turn's output is kept: {ex}"
    );
    assert!(
        result["usage"].is_object(),
        "usage is reported per turn: {ex}"
    );
}

/// A turn running when extrunner, then schedulerd, are SIGKILLed is adopted (the
/// segment runs on in its own session) and finishes: one launch only.
#[test]
fn a_running_turn_outlives_sigkill_of_extrunner_and_schedulerd_and_is_launched_once() {
    let hold = std::env::temp_dir().join(format!("oc-claude-hold-{}", std::process::id()));
    let _ = std::fs::remove_file(&hold);
    let (suite, rec) = started_with(
        "claude-adopt",
        json!({"FAKE_CLAUDE_HOLD": hold, "FAKE_CLAUDE_STATE": "finished"}),
    );
    assert_eq!(
        deliver(&suite, "a-1", br#"{"number": 4}"#).unwrap().status,
        200
    );
    let work_id = the_work(&suite);
    wait_for("the launch", || (launches(&rec) == 1).then_some(()));

    suite.kill(Daemon::Extrunner);
    suite.start(Daemon::Extrunner).unwrap();
    suite.kill(Daemon::Schedulerd);
    suite.start(Daemon::Schedulerd).unwrap();
    // The new schedulerd takes the lease over once it runs out, and adopts the turn.
    wait_for("the adoption", || {
        let ex = suite
            .call("store.executions", json!({ "work_id": work_id }))
            .unwrap();
        (ex["executions"][0]["epoch"].as_i64() > Some(1)).then_some(())
    });
    std::fs::write(&hold, "go").unwrap();
    wait_for("the Work completed", || {
        (work_state(&suite, &work_id) == "completed").then_some(())
    });
    assert_eq!(launches(&rec), 1, "one launch only: {:#?}", records(&rec));
    let _ = std::fs::remove_file(&hold);
}

/// A usage limit: the turn fails with a retry hint, the Work's retry waits for the
/// reset (plus two minutes) rather than the usual backoff, and the executor holds: a
/// turn of other Work launches nothing before the reset.
#[test]
fn a_usage_limit_delays_the_retry_to_the_reset_and_holds_the_executor() {
    let reset_s = protocol::time::now_ms() / 1000 + 3600;
    let (suite, rec) = started_with(
        "claude-limit",
        json!({"FAKE_CLAUDE_MODE": "usage_limit", "FAKE_CLAUDE_RATE_LIMIT": reset_s.to_string()}),
    );
    assert_eq!(
        deliver(&suite, "l-1", br#"{"number": 1}"#).unwrap().status,
        200
    );
    let first = the_work(&suite);
    let retry_at = wait_for("the retry time", || {
        let w = suite
            .call("store.work_get", json!({ "id": first }))
            .unwrap();
        w["work"]["retry_at_ms"].as_i64()
    });
    assert!(
        retry_at >= (reset_s + 120) * 1000,
        "the retry waits for the reset and two minutes: {retry_at} vs {reset_s}"
    );
    let ex = suite
        .call("store.executions", json!({ "work_id": first }))
        .unwrap();
    assert_eq!(ex["executions"][0]["state"], "failed", "{ex}");
    assert_eq!(launches(&rec), 1);

    // Other Work meanwhile: the executor holds, and launches nothing.
    assert_eq!(
        deliver(&suite, "l-2", br#"{"number": 2}"#).unwrap().status,
        200
    );
    let second = wait_for("the second Work", || {
        let w = suite
            .call("store.works", json!({"scope_id": "demo"}))
            .unwrap();
        w["works"]
            .as_array()?
            .iter()
            .find(|w| w["id"] != first.as_str())
            .and_then(|w| w["id"].as_str().map(str::to_owned))
    });
    let retry_at = wait_for("the second Work's retry time", || {
        let w = suite
            .call("store.work_get", json!({ "id": second }))
            .unwrap();
        w["work"]["retry_at_ms"].as_i64()
    });
    assert!(retry_at >= (reset_s + 120) * 1000, "{retry_at}");
    assert_eq!(
        launches(&rec),
        1,
        "the hold launched nothing: {:#?}",
        records(&rec)
    );
}

/// A turn in flight while only extrunner, or only the claude-code extension, dies:
/// schedulerd holds on to the lease and adopts the turn once the executor answers
/// again; one launch, and the Work completes once.
fn a_turn_outlives_the_loss_of_its_executor(name: &str, kill: impl FnOnce(&Suite)) {
    let hold = std::env::temp_dir().join(format!("oc-claude-{name}-{}", std::process::id()));
    let _ = std::fs::remove_file(&hold);
    let (suite, rec) = started_with(
        name,
        json!({"FAKE_CLAUDE_HOLD": hold, "FAKE_CLAUDE_STATE": "finished"}),
    );
    assert_eq!(
        deliver(&suite, "k-1", br#"{"number": 5}"#).unwrap().status,
        200
    );
    let work_id = the_work(&suite);
    wait_for("the launch", || (launches(&rec) == 1).then_some(()));
    kill(&suite);
    std::fs::write(&hold, "go").unwrap();
    wait_for("the Work completed", || {
        let s = work_state(&suite, &work_id);
        (s == "completed" || s == "failed").then_some(())
    });
    let ex = suite
        .call("store.executions", json!({ "work_id": work_id }))
        .unwrap();
    assert_eq!(work_state(&suite, &work_id), "completed", "{ex}");
    assert_eq!(
        ex["executions"].as_array().unwrap().len(),
        1,
        "adopted, not launched again: {ex}"
    );
    assert_eq!(launches(&rec), 1, "one launch only: {:#?}", records(&rec));
    let _ = std::fs::remove_file(&hold);
}

#[test]
fn a_running_turn_outlives_sigkill_of_extrunner_alone_and_is_launched_once() {
    a_turn_outlives_the_loss_of_its_executor("claude-extrunner", |suite| {
        suite.kill(Daemon::Extrunner);
        std::thread::sleep(Duration::from_secs(2));
        suite.start(Daemon::Extrunner).unwrap();
    });
}

#[test]
fn a_running_turn_outlives_sigkill_of_the_claude_code_extension_and_is_launched_once() {
    a_turn_outlives_the_loss_of_its_executor("claude-ext", |suite| {
        let pid = wait_for("claude-code running", || {
            let v = suite
                .call("ext.inspect", json!({"name": "claude-code"}))
                .ok()?;
            v["pid"].as_i64()
        });
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(i32::try_from(pid).unwrap()),
            nix::sys::signal::Signal::SIGKILL,
        )
        .unwrap();
    });
}

fn injected_ids(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else if p.file_name().is_some_and(|n| n == "injected.jsonl") {
                out.extend(
                    records(&p)
                        .iter()
                        .filter_map(|r| r["id"].as_str().map(str::to_owned)),
                );
            }
        }
    }
    out
}

/// An event routed to a Work while its turn runs is injected into that turn (the
/// executor advertises inject), echoed by claude and consumed with the turn: the Work
/// completes with one attempt and no further one starts for it. `sched.inject` with
/// the event's ID reaches the executor too (and writes nothing twice).
#[test]
fn an_event_during_a_turn_is_injected_consumed_and_starts_no_second_attempt() {
    let hold = std::env::temp_dir().join(format!("oc-claude-inject-{}", std::process::id()));
    let _ = std::fs::remove_file(&hold);
    let (suite, rec) = started_with(
        "claude-inject",
        json!({"FAKE_CLAUDE_HOLD": hold, "FAKE_CLAUDE_STATE": "finished"}),
    );
    assert_eq!(
        deliver(&suite, "i-1", br#"{"number": 6}"#).unwrap().status,
        200
    );
    let work_id = the_work(&suite);
    wait_for("the launch", || (launches(&rec) == 1).then_some(()));
    assert_eq!(
        deliver(&suite, "i-2", br#"{"number": 6}"#).unwrap().status,
        200
    );
    let state = suite.dir.join("state");
    let id = wait_for("the injection", || injected_ids(&state).into_iter().next());
    let answer = suite
        .call(
            "sched.inject",
            json!({"work_id": work_id, "inputs": [id.clone()]}),
        )
        .unwrap_or_else(|e| panic!("sched.inject: {e}"));
    assert!(answer["answers"].is_array(), "{answer}");
    std::fs::write(&hold, "go").unwrap();
    wait_for("the Work completed", || {
        let s = work_state(&suite, &work_id);
        (s == "completed" || s == "failed").then_some(())
    });
    let ex = suite
        .call("store.executions", json!({ "work_id": work_id }))
        .unwrap();
    assert_eq!(work_state(&suite, &work_id), "completed", "{ex}");
    assert_eq!(
        ex["executions"].as_array().unwrap().len(),
        1,
        "no second attempt for the consumed event: {ex}"
    );
    let data = &ex["executions"][0]["result"]["data"]["data"];
    assert_eq!(
        data["injected"],
        json!({"accepted": 1, "consumed": 1}),
        "{ex}"
    );
    assert_eq!(injected_ids(&state), [id], "written once");
    let inputs = suite
        .call("store.work_inputs", json!({ "work_id": work_id }))
        .unwrap();
    assert!(
        inputs["inputs"]
            .as_array()
            .unwrap()
            .iter()
            .all(|i| i["state"] == "done"),
        "{inputs}"
    );
    assert_eq!(launches(&rec), 1, "one launch only: {:#?}", records(&rec));
    let _ = std::fs::remove_file(&hold);
}

/// With a git resource, the turn runs in the Work's own worktree on the branch the
/// binding asks for, and the resumed segment looks the same lease up: same cwd.
#[test]
fn a_claude_turn_runs_in_its_worktree_and_resumes_in_it() {
    if !common::repo::have_git() {
        return;
    }
    let repos = std::env::temp_dir().join(format!("oc-claude-repo-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&repos);
    std::fs::create_dir_all(&repos).unwrap();
    let bare = common::repo::make_repo(&repos);
    let (suite, rec) = started_cc(
        "claude-ws",
        json!({"FAKE_CLAUDE_MODE": "wait"}),
        Some(json!({"repository": format!("file://{}", bare.display()), "min_free_mb": 1})),
    );
    assert_eq!(
        deliver(&suite, "w-1", br#"{"number": 9}"#).unwrap().status,
        200
    );
    let work_id = the_work(&suite);
    wait_for("the Work waiting", || {
        (work_state(&suite, &work_id) == "waiting").then_some(())
    });
    let first = records(&rec)
        .into_iter()
        .find(|r| r.get("argv").is_some())
        .unwrap();
    let cwd = first["cwd"].as_str().unwrap().to_owned();
    assert!(
        cwd.starts_with(suite.dir.join("state/resources/git/work").to_str().unwrap()),
        "{cwd}"
    );
    assert!(Path::new(&cwd).join("README.md").is_file());
    assert_eq!(
        common::repo::git(Path::new(&cwd), &["rev-parse", "--abbrev-ref", "HEAD"]),
        "fix-9"
    );
    let leases = suite
        .call("store.resource_leases", json!({"owner": work_id}))
        .unwrap();
    assert_eq!(leases["leases"][0]["dir"], cwd.as_str(), "{leases}");
    assert_eq!(leases["leases"].as_array().map(Vec::len), Some(1));
    // Woken, the next segment resumes the session in the same worktree.
    assert_eq!(
        deliver(&suite, "w-2", br#"{"number": 9}"#).unwrap().status,
        200
    );
    let resumed = wait_for("the resumed segment", || {
        records(&rec)
            .into_iter()
            .filter(|r| r.get("argv").is_some())
            .nth(1)
    });
    assert!(flag(&resumed["argv"], "--resume").is_some(), "{resumed}");
    assert_eq!(resumed["cwd"], cwd.as_str(), "{resumed}");
    let _ = std::fs::remove_dir_all(&repos);
}
