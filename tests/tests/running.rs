#![allow(clippy::unwrap_used)]
//! Work runs, with real daemons: a delivery becomes Work, schedulerd starts an attempt
//! on the binding's executor (the bundled shell executor, through extrunner), and the
//! result settles it: output kept as artifacts, failures retried with backoff until
//! the budget is spent, a deadline that kills the run, and a run that outlives SIGKILL
//! of schedulerd and of extrunner, adopted and recorded once.

mod common;
use common::*;

use oc_systest::{Daemon, Suite, HANG};
use serde_json::{json, Value};
use std::time::Duration;

fn with_binding(suite: &Suite, config: Value) -> Value {
    let mut c = common::config(suite);
    c["scopes"][0]["routes"] =
        json!([{"handler": "webhook", "binding": "run", "config": {"entry": "ci"}}]);
    c["scopes"][0]["bindings"] = json!([{"name": "run", "executor": "shell", "config": config}]);
    c
}

/// The one Work of scope demo, once it exists.
fn the_work(suite: &Suite) -> Value {
    wait_within("Work", HANG, || {
        let works = suite
            .call("store.works", json!({"scope_id": "demo"}))
            .unwrap();
        works["works"].as_array().and_then(|a| a.first()).cloned()
    })
}

fn work_in(suite: &Suite, id: &str, states: &[&str], limit: Duration) -> Value {
    wait_within(&format!("Work in {states:?}"), limit, || {
        let w = suite.call("store.work_get", json!({ "id": id })).unwrap()["work"].clone();
        states
            .contains(&w["state"].as_str().unwrap_or_default())
            .then_some(w)
    })
}

fn executions(suite: &Suite, work_id: &str) -> Vec<Value> {
    suite
        .call("store.executions", json!({ "work_id": work_id }))
        .unwrap()["executions"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

fn started_with(name: &str, binding: Value) -> Suite {
    let suite = started(name);
    let config = with_binding(&suite, binding);
    suite.apply_config(&config, HOOK).unwrap();
    // Wait until schedulerd knows the binding's executor.
    wait_within("the shell executor known", HANG, || {
        let s = suite.call("sched.status", json!({})).unwrap();
        (s["handlers"]["webhook"] == "webhook").then_some(())
    });
    suite
}

#[test]
fn a_shell_binding_runs_and_its_output_is_kept() {
    let suite = started_with(
        "run-ok",
        json!({"script": "echo \"inputs: $(wc -c < \"$OS_INPUTS\")\" >&2; echo the build is green"}),
    );
    assert_eq!(
        deliver(&suite, "d-1", br#"{"number": 7}"#).unwrap().status,
        200
    );
    let work = the_work(&suite);
    let id = work["id"].as_str().unwrap();
    work_in(&suite, id, &["completed"], HANG);
    let ex = executions(&suite, id);
    assert_eq!(ex.len(), 1, "{ex:?}");
    assert_eq!(ex[0]["state"], "completed", "{ex:?}");
    let result = &ex[0]["result"];
    assert_eq!(result["summary"], "the build is green", "{result}");
    let artifacts: Vec<String> = result["artifacts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| artifact_text(&suite, a.as_str().unwrap()))
        .collect();
    assert!(
        artifacts.iter().any(|a| a == "the build is green\n"),
        "{artifacts:?}"
    );
    assert!(
        artifacts.iter().any(|a| a.starts_with("inputs: ")),
        "{artifacts:?}"
    );
}

#[test]
fn a_failing_command_is_retried_with_backoff_until_its_budget_is_spent() {
    let suite = started_with("run-fail", json!({"script": "echo broken >&2; exit 3"}));
    assert_eq!(
        deliver(&suite, "d-1", br#"{"number": 7}"#).unwrap().status,
        200
    );
    let work = the_work(&suite);
    let id = work["id"].as_str().unwrap();
    // 1 + 2 + 4 + 8 s of backoff between five attempts.
    let failed = work_in(&suite, id, &["failed"], HANG * 2);
    assert_eq!(failed["failures"], 5, "{failed}");
    let ex = executions(&suite, id);
    assert_eq!(ex.len(), 5, "one attempt per failure: {ex:?}");
    for e in &ex {
        assert_eq!(e["result"]["error"], "exited with status 3", "{e}");
    }
    // Each retry waited longer than the one before.
    let started: Vec<i64> = ex
        .iter()
        .map(|e| protocol::time::parse_rfc3339_ms(e["started_at"].as_str().unwrap()).unwrap())
        .collect();
    let gaps: Vec<i64> = started.windows(2).map(|w| w[1] - w[0]).collect();
    assert!(
        gaps.windows(2).all(|g| g[1] > g[0]),
        "backoff grows: {gaps:?}"
    );
}

#[test]
fn a_deadline_kills_the_run_and_says_so() {
    let suite = started_with(
        "run-deadline",
        json!({"script": "sleep 300 & sleep 300", "deadline_s": 1, "grace_s": 1}),
    );
    assert_eq!(
        deliver(&suite, "d-1", br#"{"number": 7}"#).unwrap().status,
        200
    );
    let work = the_work(&suite);
    let id = work["id"].as_str().unwrap().to_owned();
    let ex = wait_within("a settled attempt", HANG, || {
        executions(&suite, &id)
            .into_iter()
            .find(|e| !e["result"].is_null())
    });
    let error = ex["result"]["error"].as_str().unwrap();
    assert!(error.contains("killed by deadline"), "{error}");
}

#[test]
fn a_run_outlives_sigkill_of_schedulerd_and_extrunner_and_is_recorded_once() {
    let marker = std::env::temp_dir().join(format!("oc-run-once-{}", std::process::id()));
    let _ = std::fs::remove_file(&marker);
    let suite = started_with(
        "run-recover",
        json!({"script": format!("sleep 4; echo ran >> '{}'; echo finished", marker.display())}),
    );
    assert_eq!(
        deliver(&suite, "d-1", br#"{"number": 7}"#).unwrap().status,
        200
    );
    let work = the_work(&suite);
    let id = work["id"].as_str().unwrap().to_owned();
    // Running, with its recovery metadata persisted.
    let first = wait_within("a running attempt with recovery", HANG, || {
        executions(&suite, &id)
            .into_iter()
            .find(|e| e["state"] == "running" && !e["recovery"].is_null())
    });
    suite.kill(Daemon::Schedulerd);
    suite.kill(Daemon::Extrunner);
    suite.start(Daemon::Extrunner).unwrap();
    suite.start(Daemon::Schedulerd).unwrap();
    let done = work_in(&suite, &id, &["completed"], HANG * 2);
    assert_eq!(done["state"], "completed");
    let ex = executions(&suite, &id);
    assert_eq!(ex.len(), 1, "adopted, not launched again: {ex:?}");
    assert!(
        ex[0]["epoch"].as_i64().unwrap() > first["epoch"].as_i64().unwrap(),
        "taken over at a higher epoch: {ex:?}"
    );
    assert_eq!(ex[0]["result"]["summary"], "finished", "{ex:?}");
    let ran = std::fs::read_to_string(&marker).unwrap();
    assert_eq!(ran, "ran\n", "the command ran exactly once");
    // The old epoch can write nothing any more.
    let stale = suite.call(
        "store.attempt_settle",
        json!({"execution_id": first["id"], "epoch": first["epoch"], "outcome": "failed"}),
    );
    let e = stale.unwrap_err();
    assert_eq!(e["data"]["code"], "conflict", "{e}");
    let _ = std::fs::remove_file(&marker);
}

#[test]
fn an_operator_interrupts_a_running_attempt() {
    // The deadline only bounds what a failed test would leave behind.
    let suite = started_with(
        "run-interrupt",
        json!({"script": "sleep 300", "deadline_s": 30, "grace_s": 1}),
    );
    assert_eq!(
        deliver(&suite, "d-1", br#"{"number": 7}"#).unwrap().status,
        200
    );
    let work = the_work(&suite);
    let id = work["id"].as_str().unwrap().to_owned();
    wait_within("a running attempt", HANG, || {
        executions(&suite, &id)
            .into_iter()
            .find(|e| e["state"] == "running" && !e["recovery"].is_null())
    });
    let answer = suite
        .call(
            "sched.interrupt",
            json!({"work_id": id, "reason": "the operator asked"}),
        )
        .unwrap();
    assert!(answer["execution_id"].is_string(), "{answer}");
    let ex = wait_within("the interrupted attempt settled", HANG, || {
        executions(&suite, &id)
            .into_iter()
            .find(|e| !e["result"].is_null())
    });
    let error = ex["result"]["error"].as_str().unwrap();
    assert!(error.contains("interrupted"), "{error}");
    assert!(error.contains("the operator asked"), "{error}");
    // Nothing running to interrupt is said so.
    let e = suite
        .call("sched.interrupt", json!({"work_id": "work_nope"}))
        .unwrap_err();
    assert_eq!(e["data"]["code"], "conflict", "{e}");
    // Stop the retry that follows, so nothing outlives the test.
    let _ = suite.call("sched.stop", json!({ "work_id": id }));
}

/// `(state, process group)` of a live process `pid` (a zombie is not live).
fn live(pid: i32) -> Option<(char, i32)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let mut rest = stat.rsplit_once(')')?.1.split_whitespace();
    let state = rest.next()?.chars().next()?;
    let _ppid = rest.next()?;
    let pgid: i32 = rest.next()?.parse().ok()?;
    (state != 'Z' && state != 'X').then_some((state, pgid))
}

/// The live processes of process group `pgid`, and those whose argv holds `needle`.
fn processes_of(pgid: i32, needle: &str) -> Vec<String> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<i32>().ok())
        else {
            continue;
        };
        let Some((_, group)) = live(pid) else {
            continue;
        };
        let argv = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
        let argv = String::from_utf8_lossy(&argv).replace('\0', " ");
        if group == pgid || argv.contains(needle) {
            out.push(format!("{pid} (group {group}): {argv}"));
        }
    }
    out
}

/// `work cancel` (the real CLI) on the Work of a delivery, once its command (a shell
/// and its child `sleep <marker>`) runs and wrote both pids to `pids(execution)`.
/// Answers the CLI's output, the Work, and the processes of the run left when the
/// CLI answered: its process group, its command, its wrapper and sandbox (their argv
/// names the execution). A sandboxed run's pids are its own namespace's: its
/// processes are found by their argv alone.
fn cancel_a_running_shell(
    suite: &Suite,
    pids: impl Fn(&str) -> std::path::PathBuf,
    marker: &str,
    sandboxed: bool,
) -> (String, String, Vec<String>) {
    assert_eq!(
        deliver(suite, "d-1", br#"{"number": 7}"#).unwrap().status,
        200
    );
    let work = the_work(suite);
    let id = work["id"].as_str().unwrap().to_owned();
    let exec = wait_within("a running attempt", HANG, || {
        executions(suite, &id)
            .into_iter()
            .find(|e| e["state"] == "running" && !e["recovery"].is_null())
    });
    let exec = exec["id"].as_str().unwrap().to_owned();
    let pids = pids(&exec);
    let (shell, child) = wait_within("the command's pids", HANG, || {
        let text = std::fs::read_to_string(&pids).ok()?;
        let mut it = text.split_whitespace().map(|p| p.parse::<i32>().ok());
        Some((it.next()??, it.next()??))
    });
    let group = match sandboxed {
        true => -1,
        false => live(shell).map_or(-1, |(_, pgid)| pgid),
    };
    let before = processes_of(group, marker);
    assert!(
        before.iter().any(|p| p.contains(marker)),
        "the command is not running: {before:?}"
    );
    let (code, said) = cli(suite, &["work", "cancel", &id]);
    assert_eq!(code, 0, "{said}");
    let mut left = processes_of(group, marker);
    left.extend(processes_of(-1, &exec));
    if !sandboxed {
        left.extend(
            [shell, child]
                .into_iter()
                .filter(|p| live(*p).is_some())
                .map(|p| p.to_string()),
        );
    }
    (said, id, left)
}

/// After the cancel: the Work is `cancelled` for good (the run's own end, after the
/// stop, neither failed it nor started another attempt), its attempt is cancelled,
/// `work interrupt` says nothing runs, and a second cancel is refused.
fn cancelled_for_good(suite: &Suite, id: &str) {
    let w = suite.call("store.work_get", json!({ "id": id })).unwrap()["work"].clone();
    assert_eq!(w["state"], "cancelled", "{w}");
    let ex = executions(suite, id);
    assert_eq!(ex.len(), 1, "no further attempt: {ex:?}");
    assert_eq!(ex[0]["state"], "cancelled", "{ex:?}");
    let (code, said) = cli(suite, &["work", "interrupt", id]);
    assert_ne!(code, 0, "{said}");
    assert!(said.contains("has no running attempt"), "{said}");
    let (code, said) = cli(suite, &["work", "cancel", id]);
    assert_ne!(code, 0, "{said}");
    assert!(said.contains("already cancelled"), "{said}");
}

/// A shell that starts `sleep <marker>` and writes both pids to `file`.
fn sleeper(marker: &str, file: &str) -> Value {
    // The deadline only bounds what a failed test would leave behind.
    json!({"script": format!("sleep {marker} & echo \"$$ $!\" > {file}; wait"),
           "deadline_s": 60, "grace_s": 1})
}

#[test]
fn work_cancel_stops_the_running_attempt_before_it_settles() {
    let pids = std::env::temp_dir().join(format!("oc-cancel-{}", std::process::id()));
    let _ = std::fs::remove_file(&pids);
    let marker = "3017";
    let suite = started_with(
        "run-cancel",
        sleeper(marker, &format!("'{}'", pids.display())),
    );
    let (said, id, left) =
        cancel_a_running_shell(&suite, |_| pids.clone(), &format!("sleep {marker}"), false);
    assert!(
        left.is_empty(),
        "work cancel left processes of the run: {left:?} ({said})"
    );
    assert!(said.contains("was stopped first"), "{said}");
    cancelled_for_good(&suite, &id);
    let _ = std::fs::remove_file(&pids);
}

#[test]
fn work_cancel_stops_a_sandboxed_run_and_its_sandbox() {
    if !common::sandbox::have_srt() {
        return;
    }
    let suite = Suite::new(
        std::path::Path::new(BIN),
        "run-cancel-srt",
        &common::sandbox::packages(),
    )
    .unwrap();
    suite.start_all().unwrap();
    let marker = "3019";
    // The command writes its pids in its own tmp folder, where its sandbox lets it.
    let mut c = with_binding(&suite, sleeper(marker, "\"$TMPDIR/pids\""));
    c["scopes"][0]["bindings"][0]["sandbox"] = common::sandbox::srt_sandbox(json!({}));
    suite.apply_config(&c, HOOK).unwrap();
    wait_within("the route", HANG, || {
        let s = suite.call("sched.status", json!({})).unwrap();
        (s["handlers"]["webhook"] == "webhook").then_some(())
    });
    let runs = suite.dir.join("state/extensions/shell/runs");
    let (said, id, left) = cancel_a_running_shell(
        &suite,
        |exec| runs.join(exec).join("tmp/pids"),
        &format!("sleep {marker}"),
        true,
    );
    assert!(
        left.is_empty(),
        "work cancel left processes of the sandboxed run: {left:?} ({said})"
    );
    assert!(said.contains("was stopped first"), "{said}");
    cancelled_for_good(&suite, &id);
}

/// SIGKILL of `name`'s extension process (found through `ext.inspect`).
fn kill_extension(suite: &Suite, name: &str) {
    let pid = wait_within(&format!("{name} running"), HANG, || {
        let v = suite.call("ext.inspect", json!({ "name": name })).ok()?;
        v["pid"].as_i64()
    });
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(i32::try_from(pid).unwrap()),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
}

/// A run in flight while only extrunner (or only the executor's extension) dies:
/// schedulerd goes on holding the lease and adopts the run once the executor answers
/// again, however long that takes; the command runs once and the Work completes once.
fn a_run_outlives_the_loss_of_its_executor(name: &str, kill: impl FnOnce(&Suite)) {
    let marker = std::env::temp_dir().join(format!("oc-run-{name}-{}", std::process::id()));
    let _ = std::fs::remove_file(&marker);
    let suite = started_with(
        name,
        json!({"script": format!("echo started >> '{m}'; sleep 4; echo ran >> '{m}'; echo finished",
                                 m = marker.display())}),
    );
    assert_eq!(
        deliver(&suite, "d-1", br#"{"number": 7}"#).unwrap().status,
        200
    );
    let work = the_work(&suite);
    let id = work["id"].as_str().unwrap().to_owned();
    // The command runs (a kill before the wrapper's go would leave nothing running,
    // rightly retried).
    wait_within("the command started", HANG, || {
        std::fs::read_to_string(&marker)
            .ok()
            .filter(|m| m.starts_with("started"))
    });
    kill(&suite);
    let done = work_in(&suite, &id, &["completed", "failed"], HANG * 2);
    let ex = executions(&suite, &id);
    assert_eq!(done["state"], "completed", "{done} {ex:?}");
    assert_eq!(ex.len(), 1, "adopted, not launched again: {ex:?}");
    assert_eq!(ex[0]["result"]["summary"], "finished", "{ex:?}");
    let ran = std::fs::read_to_string(&marker).unwrap();
    assert_eq!(ran, "started\nran\n", "the command ran exactly once");
    let _ = std::fs::remove_file(&marker);
}

#[test]
fn a_run_outlives_sigkill_of_extrunner_alone_and_runs_once() {
    a_run_outlives_the_loss_of_its_executor("run-extrunner", |suite| {
        suite.kill(Daemon::Extrunner);
        // Longer than schedulerd's first retries: an executor that does not answer
        // is no evidence that the run ended.
        std::thread::sleep(Duration::from_secs(2));
        suite.start(Daemon::Extrunner).unwrap();
    });
}

#[test]
fn a_run_outlives_sigkill_of_its_executor_extension_and_runs_once() {
    a_run_outlives_the_loss_of_its_executor("run-shell-ext", |suite| {
        kill_extension(suite, "shell");
    });
}

/// `n` deliveries, each its own Work on the shell binding, with no fault: each
/// command runs exactly once and each Work completes once.
fn short_runs_each_run_once(name: &str, n: usize) {
    let marker = std::env::temp_dir().join(format!("oc-runs-{name}-{}", std::process::id()));
    let _ = std::fs::remove_file(&marker);
    let suite = started_with(
        name,
        json!({"script": format!("echo \"$OS_WORK_ID\" >> '{}'", marker.display())}),
    );
    for i in 0..n {
        let body = format!(r#"{{"number": {i}}}"#);
        let r = deliver(&suite, &format!("d-{i}"), body.as_bytes()).unwrap();
        assert_eq!(r.status, 200, "{}", r.text());
    }
    let works = wait_within(
        "every Work settled",
        HANG * 4 + Duration::from_secs(n as u64 / 2),
        || {
            let mut all = Vec::new();
            let mut after = String::new();
            loop {
                let page = suite
                    .call(
                        "store.works",
                        json!({"scope_id": "demo", "limit": 1000, "after": after}),
                    )
                    .unwrap();
                all.extend(page["works"].as_array().cloned().unwrap_or_default());
                after = page["next"].as_str().unwrap_or_default().to_owned();
                if after.is_empty() {
                    break;
                }
            }
            let settled = all
                .iter()
                .filter(|w| w["state"] == "completed" || w["state"] == "failed")
                .count();
            (all.len() == n && settled == n).then_some(all)
        },
    );
    let ran = std::fs::read_to_string(&marker).unwrap();
    let mut counts = std::collections::BTreeMap::<&str, usize>::new();
    for line in ran.lines() {
        *counts.entry(line).or_default() += 1;
    }
    let mut wrong = Vec::new();
    for w in &works {
        let id = w["id"].as_str().unwrap();
        let runs = counts.get(id).copied().unwrap_or(0);
        let ex = executions(&suite, id);
        if w["state"] != "completed" || runs != 1 || ex.len() != 1 {
            wrong.push(format!(
                "{id}: {} after {} attempts, command ran {runs} times: {ex:?}",
                w["state"],
                ex.len()
            ));
        }
    }
    assert!(
        wrong.is_empty(),
        "{} of {n} runs went wrong:\n{}",
        wrong.len(),
        wrong.join("\n")
    );
    let _ = std::fs::remove_file(&marker);
}

#[test]
fn short_runs_with_no_fault_each_run_exactly_once() {
    short_runs_each_run_once("runs-200", 200);
}

/// The whole of it: `cargo test -p oc-systest --test running -- --ignored`.
#[test]
#[ignore = "1,000 runs: about a minute; run by hand"]
fn a_thousand_short_runs_with_no_fault_each_run_exactly_once() {
    short_runs_each_run_once("runs-1000", 1000);
}
