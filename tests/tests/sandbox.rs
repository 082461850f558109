#![allow(clippy::unwrap_used)]
//! Sandboxed runs, with real daemons, the real `srt` (npm
//! `@anthropic-ai/sandbox-runtime`, pinned in tests/srt) and real bubblewrap: a
//! shell binding with an `srt` sandbox does its own work in its workspace while
//! every reach outside is denied (another Work's workspace, the configuration, a
//! `file:` secret, a write outside, a TCP port on loopback, the bus socket); a
//! SIGKILL of extrunner mid-run adopts the run through its pinned plan without
//! starting it twice, and a run whose pinned plan no longer matches its digest is
//! stopped, not adopted. A claude-code turn (the fake `claude`) runs inside its
//! sandbox with its toolbelt over the real `open-conduit mcp`, is adopted through
//! its pinned plan after a SIGKILL of extrunner, and fails closed, launching
//! nothing, when no package provides its sandbox type.
//!
//! Where srt, bubblewrap or socat is missing the tests skip saying so (and fail
//! under OC_REQUIRE_PEERS=1); where the kernel refuses user namespaces they skip
//! with the reason whatever the setting, since no package can mend that.

mod common;
use common::claude::read_context;
use common::repo::{have_git, make_repo};
use common::sandbox::*;
use common::*;

use oc_systest::{Daemon, Package, Suite};
use serde_json::{json, Value};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::Command;

fn started_sandbox(name: &str) -> Suite {
    let suite = Suite::new(Path::new(BIN), name, &packages()).unwrap();
    suite.start_all().unwrap();
    suite.apply_config(&config(&suite), HOOK).unwrap();
    suite
}

fn sandbox() -> Value {
    srt_sandbox(json!({}))
}

fn apply(suite: &Suite, binding: Value) {
    let mut c = config(suite);
    c["scopes"][0]["routes"] =
        json!([{"handler": "webhook", "binding": "run", "config": {"entry": "ci"}}]);
    c["scopes"][0]["bindings"] = json!([binding]);
    // The operator's configuration file, as /etc/open-conduit/config.json.
    std::fs::write(
        suite.dir.join("etc/config.json"),
        serde_json::to_vec(&c).unwrap(),
    )
    .unwrap();
    suite.apply_config(&c, HOOK).unwrap();
    wait_for("the route", || {
        let s = suite.call("sched.status", json!({})).unwrap();
        (s["handlers"]["webhook"] == "webhook").then_some(())
    });
}

/// Each probe of the second Work prints `name=denied` or `name=ALLOWED`.
const PROBES: &str = r#"echo "$OS_WORK_ID" > mine.txt
echo "own=$(cat mine.txt)"
probe() { name=$1; shift; if "$@" >/dev/null 2>&1; then echo "$name=ALLOWED"; else echo "$name=denied"; fi; }
if [ -n "$OTHER" ]; then
  probe other_workspace cat "$OTHER/mine.txt"
  probe config cat "$CONFIG_JSON"
  probe secret cat "$SECRET_FILE"
  probe write_outside sh -c 'echo x > "$OUTSIDE/escaped"'
  probe tcp bash -c 'exec 3<>/dev/tcp/127.0.0.1/'"$PORT"
  probe bus socat -u OPEN:/dev/null UNIX-CONNECT:"$BUS"
  probe write_own sh -c 'echo y > own.txt && cat own.txt'
  probe write_tmp sh -c 't=$(mktemp) && echo z > "$t" && cat "$t"'
fi
echo done=yes
"#;

#[test]
fn a_sandboxed_command_works_in_its_workspace_and_reaches_nothing_else() {
    if !have_git() || !have_srt() {
        return;
    }
    let suite = started_sandbox("sandbox-deny");
    let bare = make_repo(&suite.dir);
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let port = listener.local_addr().unwrap().port();
    let binding = |env: Value| {
        json!({"name": "run", "executor": "shell", "sandbox": sandbox(),
               "resource": {"type": "git", "config":
                   {"repository": format!("file://{}", bare.display()), "min_free_mb": 1}},
               "config": {"script": PROBES, "env": env}})
    };
    apply(&suite, binding(json!({})));
    // The first Work leaves a file in its own workspace.
    send(&suite, "s-1", 1);
    let first = work_of(&suite, 1, &[]);
    let ex = ended(&suite, &first);
    assert_eq!(ex["state"], "completed", "{ex}");
    assert_eq!(fields(&output(&suite, &ex))["own"], first);
    let leases = suite
        .call("store.resource_leases", json!({"limit": 100}))
        .unwrap();
    let other = leases["leases"][0]["dir"].as_str().unwrap().to_owned();
    assert!(Path::new(&other).join("mine.txt").exists());
    // The second probes everything it must not reach.
    let env = json!({
        "OTHER": other,
        "CONFIG_JSON": suite.dir.join("etc/config.json").display().to_string(),
        "SECRET_FILE": suite.dir.join("secrets/hook-secret").display().to_string(),
        "OUTSIDE": suite.dir.display().to_string(),
        "PORT": port.to_string(),
        "BUS": suite.bus.display().to_string(),
    });
    apply(&suite, binding(env));
    send(&suite, "s-2", 2);
    let second = work_of(&suite, 2, &[&first]);
    let ex = ended(&suite, &second);
    assert_eq!(ex["state"], "completed", "{ex}");
    let out = output(&suite, &ex);
    let f = fields(&out);
    assert_eq!(f["own"], second, "its own work is kept: {out}");
    assert_eq!(f["write_own"], "ALLOWED", "{out}");
    assert_eq!(f["write_tmp"], "ALLOWED", "its own tmp is writable: {out}");
    for case in [
        "other_workspace",
        "config",
        "secret",
        "write_outside",
        "tcp",
        "bus",
    ] {
        assert_eq!(
            f.get(case).map(String::as_str),
            Some("denied"),
            "{case}: {out}"
        );
    }
    assert!(!suite.dir.join("escaped").exists());
    assert!(listener.accept().is_err(), "nothing connected to {port}");
    // The host pinned the plan it ran.
    let pin = suite
        .dir
        .join("state/sandboxes/pins")
        .join(format!("{}.json", ex["id"].as_str().unwrap()));
    let pin: Value = serde_json::from_slice(&std::fs::read(&pin).unwrap()).unwrap();
    assert_eq!(pin["digest"].as_str().unwrap().len(), 64, "{pin}");
    // `srt --settings FILE -c LINE` (as root after the step that enters its pids
    // cgroup).
    let argv = pin["plan"]["argv"].as_array().unwrap();
    assert!(
        argv[argv.len() - 5].as_str().unwrap().ends_with("srt"),
        "{pin}"
    );
    // doctor runs a command through the srt the binding names.
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
        .find(|l| l.contains("srt_sandbox"))
        .unwrap_or_else(|| panic!("no srt_sandbox check: {doctor}"));
    assert!(
        line.contains("ok") && line.contains("srt confines commands here"),
        "{doctor}"
    );
}

/// Records each start in its own tmp folder (`<run dir>/tmp`, the one place of its
/// run directory it may write), then waits for `go` there.
const WAITER: &str = r#"echo started >> "$TMPDIR/count"
while [ ! -e "$TMPDIR/go" ]; do sleep 0.1; done
echo done=yes
"#;

#[test]
fn a_sandboxed_run_is_adopted_through_its_pinned_plan_and_a_changed_plan_is_stopped() {
    if !have_srt() {
        return;
    }
    let suite = started_sandbox("sandbox-adopt");
    apply(
        &suite,
        json!({"name": "run", "executor": "shell", "sandbox": sandbox(),
               "config": {"script": WAITER}}),
    );
    send(&suite, "a-1", 1);
    let work = work_of(&suite, 1, &[]);
    let exec = started_run(&suite, &work);
    suite.kill(Daemon::Extrunner);
    suite.start(Daemon::Extrunner).unwrap();
    wait_for("the adoption", || {
        suite
            .log(Daemon::Extrunner)
            .contains("adopted through its pinned plan")
            .then_some(())
    });
    std::fs::write(run_dir(&suite, &exec).join("tmp/go"), "").unwrap();
    let ex = ended(&suite, &work);
    assert_eq!(ex["state"], "completed", "{ex}");
    assert_eq!(starts(&suite, &exec), 1, "started once");
    assert_eq!(executions(&suite, &work).len(), 1);
    let first_work = work.clone();

    // A plan changed after it was pinned: stopped, not adopted.
    send(&suite, "a-2", 2);
    let work = work_of(&suite, 2, &[&first_work]);
    let exec = started_run(&suite, &work);
    suite.kill(Daemon::Extrunner);
    let pin = suite
        .dir
        .join("state/sandboxes/pins")
        .join(format!("{exec}.json"));
    let mut v: Value = serde_json::from_slice(&std::fs::read(&pin).unwrap()).unwrap();
    v["plan"]["env"]["WIDENED"] = json!("1");
    std::fs::write(&pin, serde_json::to_vec(&v).unwrap()).unwrap();
    suite.start(Daemon::Extrunner).unwrap();
    let ex = ended(&suite, &work);
    assert_eq!(ex["state"], "failed", "{ex}");
    assert!(
        ex.to_string().contains("no longer matches"),
        "the refusal is the reason: {ex}"
    );
    assert_eq!(starts(&suite, &exec), 1, "never started again");
    // Stopped: its wrapper recorded the end.
    assert!(run_dir(&suite, &exec).join("status").exists());
}

/// A suite with the claude-code package (and srt when `srt`), the fake `claude` and
/// the toolbelt's `open-conduit`, every daemon started.
struct ClaudeSuite {
    suite: Suite,
    claude: PathBuf,
    work_dir: PathBuf,
    config_dir: PathBuf,
    /// The fake's record, in claude's config directory (writable from inside).
    record: PathBuf,
}

impl ClaudeSuite {
    /// The binding's env: the fake's record, the finished state, claude's own
    /// config directory, and `extra`.
    fn env(&self, extra: Value) -> Value {
        let mut env = json!({
            "FAKE_CLAUDE_RECORD": self.record,
            "FAKE_CLAUDE_STATE": "finished",
            "CLAUDE_CONFIG_DIR": self.config_dir,
        });
        for (k, v) in extra.as_object().into_iter().flatten() {
            env[k] = v.clone();
        }
        env
    }

    /// The sandboxed claude-code binding `run` with `env`.
    fn binding(&self, env: Value) -> Value {
        json!({"name": "run", "executor": "claude-code", "sandbox": sandbox(),
               "config": {"binary": self.claude, "dir": self.work_dir, "env": env}})
    }
}

fn claude_suite(name: &str, srt: bool) -> ClaudeSuite {
    let mut packages = if srt {
        packages()
    } else {
        Suite::first_party()
    };
    packages.push(Package {
        name: "claude-code".into(),
        manifest: oc_claude_code::MANIFEST.into(),
        command: vec!["ext-claude-code".into()],
    });
    let suite = Suite::new(Path::new(BIN), name, &packages).unwrap();
    let claude = suite.dir.join("bin/claude");
    script(
        &claude,
        &format!("#!/bin/sh\nexec '{BIN}' fake-claude \"$@\"\n"),
    );
    with_toolbelt(&suite);
    suite.start_all().unwrap();
    let work_dir = suite.dir.join("work");
    let config_dir = suite.dir.join("claude-config");
    std::fs::create_dir_all(&work_dir).unwrap();
    std::fs::create_dir_all(&config_dir).unwrap();
    let record = config_dir.join("record.jsonl");
    ClaudeSuite {
        suite,
        claude,
        work_dir,
        config_dir,
        record,
    }
}

fn launches(rec: &Path) -> usize {
    records(rec)
        .iter()
        .filter(|r| r.get("argv").is_some())
        .count()
}

/// A sandboxed turn running when extrunner is SIGKILLed is adopted through its
/// pinned plan (the digest in its recovery metadata) and finishes: one launch only.
#[test]
fn a_sandboxed_claude_turn_is_adopted_through_its_pinned_plan_after_sigkill_of_extrunner() {
    if !have_srt() {
        return;
    }
    let cc = claude_suite("sandbox-claude-adopt", true);
    let suite = &cc.suite;
    // Readable inside: the workspace.
    let hold = cc.work_dir.join("hold");
    apply(suite, cc.binding(cc.env(json!({"FAKE_CLAUDE_HOLD": hold}))));
    send(suite, "ca-1", 3);
    let work = work_of(suite, 3, &[]);
    wait_for("the launch", || (launches(&cc.record) == 1).then_some(()));
    let exec = executions(suite, &work)[0]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let recovery = &executions(suite, &work)[0]["recovery"]["data"];
    assert_eq!(
        recovery["sandbox_digest"].as_str().map(str::len),
        Some(64),
        "the recovery metadata keeps the digest: {recovery}"
    );
    suite.kill(Daemon::Extrunner);
    suite.start(Daemon::Extrunner).unwrap();
    wait_for("the adoption", || {
        let log = suite.log(Daemon::Extrunner);
        (log.contains("adopted through its pinned plan") && log.contains(&exec)).then_some(())
    });
    std::fs::write(&hold, "go").unwrap();
    let ex = ended(suite, &work);
    assert_eq!(ex["state"], "completed", "{ex}");
    assert_eq!(launches(&cc.record), 1, "one launch only");
    assert_eq!(executions(suite, &work).len(), 1);
}

/// A sandboxed binding whose sandbox type no package provides: the turn fails as
/// `sandbox_unavailable` and nothing is launched.
#[test]
fn a_sandboxed_claude_turn_without_its_provider_fails_closed_and_launches_nothing() {
    let cc = claude_suite("sandbox-claude-closed", false);
    let suite = &cc.suite;
    apply(suite, cc.binding(cc.env(json!({}))));
    send(suite, "cu-1", 4);
    let work = work_of(suite, 4, &[]);
    let ex = ended(suite, &work);
    assert_eq!(ex["state"], "failed", "{ex}");
    assert_eq!(
        ex["result"]["data"]["data"]["reason"], "sandbox_unavailable",
        "{ex}"
    );
    assert_eq!(launches(&cc.record), 0, "nothing launched");
    let run = suite
        .dir
        .join("state/extensions/claude-code/runs")
        .join(ex["id"].as_str().unwrap())
        .join("1");
    assert!(!run.join("spec.json").exists(), "no launch was written");
}

/// A claude-code turn (the fake `claude`) in an srt sandbox: it runs in a mount
/// namespace of its own, cannot read the configuration, writes temporary files in
/// its segment's own tmp, reads its Work's context through the real `open-conduit
/// mcp` over the run's toolbelt socket, and the Work completes.
#[test]
fn a_sandboxed_claude_turn_uses_its_toolbelt_and_reaches_nothing_else() {
    if !have_srt() {
        return;
    }
    let cc = claude_suite("sandbox-claude", true);
    let (suite, rec, protected) = (&cc.suite, &cc.record, cc.suite.dir.join("etc/config.json"));
    let env = cc.env(json!({"FAKE_CLAUDE_PROBE": protected}));
    apply(suite, cc.binding(env));
    send(suite, "cc-1", 7);
    let work = work_of(suite, 7, &[]);
    let ex = ended(suite, &work);
    assert_eq!(ex["state"], "completed", "{ex}");
    let recs = records(rec);
    let launch = recs
        .iter()
        .find(|r| r.get("argv").is_some())
        .unwrap_or_else(|| panic!("no launch recorded: {ex}"));
    let host_ns = std::fs::read_link("/proc/self/ns/mnt").unwrap();
    assert_ne!(
        launch["mnt_ns"].as_str().unwrap(),
        host_ns.display().to_string(),
        "claude runs in a mount namespace of its own: {launch}"
    );
    assert_eq!(launch["probe_readable"], false, "{launch}");
    assert_eq!(launch["tmp_writable"], true, "{launch}");
    let tmpdir = launch["env"]["TMPDIR"].as_str().unwrap();
    assert!(
        tmpdir.ends_with("/1.tmp") && tmpdir.contains(ex["id"].as_str().unwrap()),
        "TMPDIR is the segment's own: {tmpdir}"
    );
    let context = read_context(&recs);
    assert_eq!(
        context["result"]["structuredContent"]["work"]["id"],
        work.as_str(),
        "{context}"
    );
    // The host pinned the plan it ran.
    let pin = suite
        .dir
        .join("state/sandboxes/pins")
        .join(format!("{}.json", ex["id"].as_str().unwrap()));
    assert!(pin.exists(), "{}", pin.display());
}
