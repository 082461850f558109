#![allow(clippy::unwrap_used)]
//! Confinement against a hostile run: attacks from inside sandboxed runs (a shell
//! command and a claude-code agent, both `tests/tests/hostile/attack.py` in the real
//! srt and bubblewrap), each aimed at the code that runs OUTSIDE the sandbox and
//! trusts what the run can write (issue 37):
//!
//! 1. git config that runs commands (`core.fsmonitor`, filters, hooks, a `.git` file
//!    repointed at a gitdir of the run's) planted in its workspace: the provider's
//!    sweep, on demand and by its timer, never runs them;
//! 2. the run folder as a confused deputy: symlinks at the wrapper's temporary names
//!    and over stdout/stderr, a forged `meta.json` (naming a process group of the
//!    test's) and `result.json`: refused, nothing outside written, read or
//!    signalled, and the host reports what really happened;
//! 3. a `file:` secret rotated by rename while the run goes on stays unreadable;
//! 4. srt's default write paths (`~/.npm/_logs`, `~/.claude/debug`, `/tmp/claude`)
//!    land nothing on the host;
//! 5. `create_work` naming an unsandboxed binding is refused;
//! 6. `work cancel` leaves no process of the run, and a fork bomb stops at the
//!    binding's process limit.
//!
//! Every attack runs twice: with the suite as root, and as an unprivileged user
//! (`nobody`, as the package runs it as `open-conduit`). Where srt, bubblewrap or
//! python3 is missing the tests skip saying why (and fail under OC_REQUIRE_PEERS=1);
//! the unprivileged run needs root to switch users and skips saying so otherwise.

mod common;
use common::repo::{have_git, make_repo};
use common::sandbox::*;
use common::*;

use oc_systest::{Daemon, Package, RunAs, Suite, HANG};
use serde_json::{json, Value};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

const ATTACK: &str = include_str!("hostile/attack.py");
/// What a rotated secret says: it must never reach a run.
const ROTATED: &str = "rotated-secret-4711";
/// The process limit of the fork bomb's binding.
const MAX_PROCESSES: u64 = 32;

fn have_python() -> bool {
    let ok = Command::new("python3")
        .arg("-c")
        .arg("import json")
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        assert!(
            std::env::var_os("OC_REQUIRE_PEERS").is_none(),
            "python3 is missing, and OC_REQUIRE_PEERS is set (.ci/run installs it)"
        );
        eprintln!("SKIPPED: python3 is missing (the hostile run is a Python program)");
    }
    ok
}

/// A number no other suite of this test process uses, for its holding runs' `sleep`.
fn next_hold() -> u64 {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    1_000_000 + 64 * u64::from(std::process::id()) + n
}

/// A process of the test's own, in a process group of its own, run as the suite's
/// user: what a forged `meta.json` points the host at.
struct Victim(Child);

impl Victim {
    fn start(user: Option<&RunAs>) -> Victim {
        let mut cmd = Command::new("sleep");
        cmd.arg("600").process_group(0);
        if let Some(u) = user {
            cmd.uid(u.uid).gid(u.gid);
        }
        Victim(cmd.spawn().unwrap())
    }

    fn pid(&self) -> u32 {
        self.0.id()
    }

    fn alive(&mut self) -> bool {
        matches!(self.0.try_wait(), Ok(None))
    }
}

impl Drop for Victim {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

struct Hostile {
    suite: Suite,
    user: Option<RunAs>,
    attack: PathBuf,
    claude: PathBuf,
    claude_config: PathBuf,
    victim_file: PathBuf,
    secret: PathBuf,
    seen: Vec<String>,
    number: u64,
    /// The argv of the children a holding run starts (`sleep <n>`), this suite's own
    /// (runs outlive a failed test's suite).
    hold: String,
    /// Held while the test runs, so the fork bomb (which takes [`ALONE`] for
    /// writing) runs alone: `ulimit -u` counts every process of the run's user on
    /// the machine, and other tests run as that same user.
    shared: Option<std::sync::RwLockReadGuard<'static, ()>>,
}

/// The fork bomb runs alone (see `Hostile::shared`).
static ALONE: std::sync::RwLock<()> = std::sync::RwLock::new(());

impl Hostile {
    fn new(name: &str, user: Option<RunAs>) -> Hostile {
        let mut packages = packages();
        packages.push(Package {
            name: "claude-code".into(),
            manifest: oc_claude_code::MANIFEST.into(),
            command: vec!["ext-claude-code".into()],
        });
        let suite = Suite::new(Path::new(BIN), name, &packages).unwrap();
        let attack = suite.dir.join("bin/attack.py");
        script(&attack, ATTACK);
        // The agent: the attack first, then the (fake) Claude Code CLI for its turn.
        let claude = suite.dir.join("bin/claude");
        script(
            &claude,
            &format!(
                "#!/bin/sh\npython3 '{}' \"$@\" </dev/null\nexec '{BIN}' fake-claude \"$@\"\n",
                attack.display()
            ),
        );
        with_toolbelt(&suite);
        // The workspace sweep's timer every second, with no grace.
        suite.set_env(Daemon::Extrunner, "OC_TEST_SWEEP_INTERVAL_S", "1");
        let claude_config = suite.dir.join("claude-config");
        std::fs::create_dir_all(&claude_config).unwrap();
        let victim_file = suite.dir.join("victim.txt");
        std::fs::write(&victim_file, "untouched").unwrap();
        let secret = suite.dir.join("secrets/hook-secret");
        if let Some(u) = &user {
            suite.run_as(u.clone()).unwrap();
        }
        suite.start_all().unwrap();
        let h = Hostile {
            suite,
            user,
            attack,
            claude,
            claude_config,
            victim_file,
            secret,
            seen: Vec::new(),
            number: 0,
            hold: format!("sleep {}", next_hold()),
            shared: None,
        };
        // The files the run's user may write, as its own: so that only confinement,
        // not file modes, keeps the attacks out.
        h.apply(h.shell(json!({}), json!({})));
        for path in [&h.claude_config, &h.victim_file] {
            h.suite.give(path).unwrap();
        }
        h
    }

    fn env(&self, extra: Value) -> Value {
        let mut env = json!({
            "VICTIM": self.victim_file,
            "SECRET_FILE": self.secret,
            "HOLD_SLEEP": self.hold.trim_start_matches("sleep "),
        });
        for (k, v) in extra.as_object().into_iter().flatten() {
            env[k] = v.clone();
        }
        env
    }

    /// The sandboxed shell binding running the attack with `env`.
    fn shell(&self, env: Value, sandbox_config: Value) -> Value {
        json!({"name": "run", "executor": "shell", "sandbox": srt_sandbox(sandbox_config),
               "config": {"command": ["python3", self.attack], "env": self.env(env),
                          "grace_s": 2}})
    }

    /// The sandboxed claude-code binding whose agent runs the attack with `env`.
    fn agent(&self, env: Value) -> Value {
        let mut env = self.env(env);
        env["ATTACK_RECORD"] = json!(self.record());
        env["CLAUDE_CONFIG_DIR"] = json!(self.claude_config);
        env["FAKE_CLAUDE_STATE"] = json!("finished");
        json!({"name": "run", "executor": "claude-code", "sandbox": srt_sandbox(json!({})),
               "config": {"binary": self.claude, "dir": self.claude_config, "env": env}})
    }

    fn record(&self) -> PathBuf {
        self.claude_config.join("attack.log")
    }

    /// Applies the configuration: the scope's webhook routed to `run`, beside an
    /// unsandboxed binding `open` a sandboxed run must not escape to.
    fn apply(&self, run: Value) {
        let mut c = config(&self.suite);
        c["scopes"][0]["routes"] =
            json!([{"handler": "webhook", "binding": "run", "config": {"entry": "ci"}}]);
        c["scopes"][0]["bindings"] = json!([
            run,
            {"name": "open", "executor": "shell", "config": {"command": ["true"]}}
        ]);
        std::fs::write(
            self.suite.dir.join("etc/config.json"),
            serde_json::to_vec(&c).unwrap(),
        )
        .unwrap();
        self.suite.give(&self.suite.dir.join("secrets")).unwrap();
        self.suite.apply_config(&c, HOOK).unwrap();
        wait_for("the route", || {
            let s = self.suite.call("sched.status", json!({})).unwrap();
            (s["handlers"]["webhook"] == "webhook").then_some(())
        });
    }

    /// Delivers one event and answers its new Work.
    fn new_work(&mut self) -> String {
        self.number += 1;
        let n = self.number;
        send(&self.suite, &format!("attack-{n}"), n);
        let seen: Vec<&str> = self.seen.iter().map(String::as_str).collect();
        let work = work_of(&self.suite, n, &seen);
        self.seen.push(work.clone());
        work
    }

    fn running(&self, work: &str) -> String {
        wait_for("the running execution", || {
            executions(&self.suite, work)
                .first()
                .and_then(|e| e["id"].as_str().map(str::to_owned))
        })
    }

    fn shell_run_dir(&self, execution: &str) -> PathBuf {
        self.suite
            .dir
            .join("state/extensions/shell/runs")
            .join(execution)
    }

    fn cli(&self, args: &[&str]) -> String {
        let (code, out) = cli(&self.suite, args);
        assert_eq!(code, 0, "open-conduit {args:?}: {out}");
        out
    }

    /// What a settled execution says of itself, artifacts included.
    fn everything(&self, ex: &Value) -> String {
        format!("{ex}\n{}", artifacts(&self.suite, ex).join("\n"))
    }

    fn who(&self) -> &str {
        self.user.as_ref().map_or("root", |u| u.name.as_str())
    }
}

/// The live processes whose argv names `needle`.
fn processes_naming(needle: &str) -> Vec<String> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let name = entry.file_name();
        let Some(pid) = name
            .to_str()
            .filter(|n| n.bytes().all(|b| b.is_ascii_digit()))
        else {
            continue;
        };
        let stat = std::fs::read_to_string(entry.path().join("stat")).unwrap_or_default();
        let state = stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().next())
            .unwrap_or("X");
        if state == "Z" || state == "X" {
            continue;
        }
        let cmdline = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
        let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
        if cmdline.contains(needle) {
            out.push(format!("{pid}: {cmdline}"));
        }
    }
    out
}

/// Nothing the run planted in its folder is in the host's: no symlink, none of the
/// names it made, no forged result.
fn untouched_folder(dir: &Path) {
    let mut planted = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).unwrap().flatten() {
            let meta = entry.path().symlink_metadata().unwrap();
            let name = entry.file_name().to_string_lossy().into_owned();
            if meta.file_type().is_symlink()
                || name.ends_with(".lnk")
                || name == "status.d"
                || name.contains(".tmp.")
            {
                planted.push(entry.path());
            } else if meta.is_dir() {
                stack.push(entry.path());
            } else if name == "result.json" || name == "status" || name == "meta.json" {
                let text = std::fs::read_to_string(entry.path()).unwrap();
                assert!(
                    !text.contains("FORGED") && !text.contains("2026-01-01"),
                    "{}: {text}",
                    entry.path().display()
                );
            }
        }
    }
    assert!(
        planted.is_empty(),
        "the run's plants reached the host: {planted:?}"
    );
}

fn denied(f: &std::collections::BTreeMap<String, String>, cases: &[&str], all: &str) {
    for case in cases {
        assert_eq!(
            f.get(*case).map(String::as_str),
            Some("denied"),
            "{case}: {all}"
        );
    }
}

/// Homes where srt's default write paths would land on the host.
fn homes(h: &Hostile) -> Vec<PathBuf> {
    let mut out = vec![h.suite.dir.join("home")];
    if let Some(home) = std::env::var_os("HOME") {
        out.push(PathBuf::from(home));
    }
    out
}

fn no_escape_on_host(h: &Hostile) {
    let mut found: Vec<PathBuf> = homes(h)
        .iter()
        .flat_map(|home| [".npm/_logs/oc-escape", ".claude/debug/oc-escape"].map(|p| home.join(p)))
        .collect();
    found.push(PathBuf::from("/tmp/claude/oc-escape"));
    found.retain(|p| p.exists());
    assert!(found.is_empty(), "written outside the sandbox: {found:?}");
}

/// Items 2 and 4 for a shell run: the run folder tricks, the forged result of a
/// command that exits 3, srt's default write paths.
fn shell_folder_attack(h: &mut Hostile, victim: &mut Victim) {
    h.apply(h.shell(
        json!({"ATTACK_MODES": "folder escape", "ATTACK_EXIT": "3",
               "VICTIM_PGID": victim.pid().to_string()}),
        json!({}),
    ));
    let work = h.new_work();
    let ex = ended(&h.suite, &work);
    let all = h.everything(&ex);
    let out = output(&h.suite, &ex);
    let f = fields(&out);
    assert_eq!(
        f.get("run_dir_known").map(String::as_str),
        Some("yes"),
        "{}: {all}",
        h.who()
    );
    // Inside, the run's folder is read-only or a private tmpfs: what the run planted
    // never reaches the host's copy.
    untouched_folder(&h.shell_run_dir(ex["id"].as_str().unwrap()));
    // The host reports what happened: the command exited 3.
    assert_eq!(ex["state"], "failed", "{}: {all}", h.who());
    assert!(all.contains("exited with status 3"), "{all}");
    assert!(!all.contains("FORGED"), "{all}");
    assert!(
        !all.contains(SECRET),
        "the secret reached the run's output: {all}"
    );
    assert_eq!(
        std::fs::read_to_string(&h.victim_file).unwrap(),
        "untouched"
    );
    assert!(victim.alive(), "the victim's process group was signalled");
    no_escape_on_host(h);
    // No retry of it runs on beside the next attacks.
    h.cli(&["work", "cancel", &work]);
}

/// Item 2: a forged process group, then `work interrupt`: the test's own process
/// group is never signalled and the run ends.
fn shell_interrupt_attack(h: &mut Hostile, victim: &mut Victim) {
    h.apply(h.shell(
        json!({"ATTACK_MODES": "folder hold", "VICTIM_PGID": victim.pid().to_string()}),
        json!({}),
    ));
    let work = h.new_work();
    let exec = h.running(&work);
    let held = h.shell_run_dir(&exec).join("tmp/held");
    wait_for("the run to hold", || held.exists().then_some(()));
    h.cli(&["work", "interrupt", &work]);
    let ex = ended(&h.suite, &work);
    assert_eq!(ex["state"], "failed", "{ex}");
    // Its retry would hold again: cancel the Work.
    h.cli(&["work", "cancel", &work]);
    assert!(
        victim.alive(),
        "work interrupt signalled the victim's process group"
    );
    assert!(
        processes_naming(&h.hold).is_empty(),
        "{:?}",
        processes_naming(&h.hold)
    );
}

/// Every path under `dir` (depth first, at most 200), for a failure's message.
fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for entry in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let p = entry.path();
            if p.is_dir() {
                todo.push(p.clone());
            }
            out.push(p);
            if out.len() >= 200 {
                return out;
            }
        }
    }
    out
}

/// The last `n` lines of `text`.
fn tail(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// Item 6: `work cancel` of a running sandboxed run leaves nothing of it.
fn cancel_attack(h: &mut Hostile, run: Value, held: impl Fn(&Hostile, &str) -> PathBuf) {
    h.apply(run);
    let work = h.new_work();
    let exec = h.running(&work);
    let held = held(h, &exec);
    let deadline = Instant::now() + HANG;
    while !held.exists() {
        if Instant::now() > deadline {
            // What the test would need to tell why: the Work's executions, what
            // the run's folder holds and what the extensions said.
            let run_dir = held.parent().and_then(Path::parent).map(Path::to_path_buf);
            let listing: Vec<String> = run_dir
                .iter()
                .flat_map(|d| walk(d))
                .map(|p| p.display().to_string())
                .collect();
            panic!(
                "the run did not hold within {HANG:?} ({} not made)\nexecutions: {:#}\n\
                 the run's folder: {listing:?}\nprocesses of the run: {:?}\n\
                 extrunner's log:\n{}",
                held.display(),
                json!(executions(&h.suite, &work)),
                processes_naming(&exec),
                tail(&h.suite.log(Daemon::Extrunner), 60),
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(
        !processes_naming(&exec).is_empty(),
        "the run's srt is running"
    );
    h.cli(&["work", "cancel", &work]);
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let left: Vec<String> = processes_naming(&h.hold)
            .into_iter()
            .chain(processes_naming(&exec))
            .collect();
        if left.is_empty() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "work cancel left processes of the run: {left:?}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let w = h.suite.call("store.work_get", json!({"id": work})).unwrap();
    assert_eq!(w["work"]["state"], "cancelled", "{w}");
}

/// Item 6: a fork bomb stops at the binding's limit.
fn bomb_attack(h: &mut Hostile) {
    h.apply(h.shell(
        json!({"ATTACK_MODES": "bomb", "BOMB": "200"}),
        json!({"max_processes": MAX_PROCESSES}),
    ));
    let work = h.new_work();
    let ex = ended(&h.suite, &work);
    let out = output(&h.suite, &ex);
    let f = fields(&out);
    let field = |k: &str| {
        f.get(k)
            .cloned()
            .unwrap_or_else(|| panic!("{}: the bomb printed no {k}: {ex}: {out}", h.who()))
    };
    let forked: u64 = field("forked").parse().unwrap();
    assert_eq!(field("fork_refused"), "yes", "{}: {out}", h.who());
    assert!(forked < MAX_PROCESSES, "{forked} children started: {out}");
}

/// Item 3: a secret rotated by rename while the run goes on stays unreadable.
fn rotation_attack(h: &mut Hostile) {
    h.apply(h.shell(
        json!({"ATTACK_MODES": "secret", "SECRET_WAIT": "1"}),
        json!({}),
    ));
    let work = h.new_work();
    let exec = h.running(&work);
    let tmp = h.shell_run_dir(&exec).join("tmp");
    wait_for("the run to read the secret", || {
        tmp.join("waiting").exists().then_some(())
    });
    let fresh = h.secret.with_extension("new");
    std::fs::write(&fresh, ROTATED).unwrap();
    h.suite.give(&fresh).unwrap();
    std::fs::rename(&fresh, &h.secret).unwrap();
    std::fs::write(tmp.join("go"), "").unwrap();
    let ex = ended(&h.suite, &work);
    let all = h.everything(&ex);
    let f = fields(&output(&h.suite, &ex));
    denied(&f, &["secret_before", "secret_after"], &all);
    assert!(
        !all.contains("hook-secret"),
        "the secrets' folder was listed: {all}"
    );
    assert!(!all.contains(ROTATED), "the rotated secret was read: {all}");
    assert!(!all.contains("Secret_to_Everybody"), "{all}");
    // Put the webhook's secret back.
    std::fs::write(&h.secret, format!("{SECRET}\n")).unwrap();
}

/// Item 1: git config planted in the workspace never runs outside, on demand or by
/// the sweep's timer.
fn git_attack(h: &mut Hostile, mode: &str) {
    if !have_git() {
        return;
    }
    let root = h.suite.dir.join(format!("repo-{mode}"));
    std::fs::create_dir_all(&root).unwrap();
    let bare = make_repo(&root);
    h.suite.give(&root).unwrap();
    let marker = h.suite.dir.join(format!("pwned-{mode}"));
    let mut run = h.shell(json!({"ATTACK_MODES": "git", "MARKER": marker}), json!({}));
    run["resource"] = json!({"type": "git", "config": {
        "repository": format!("file://{}", bare.display()), "mode": mode, "min_free_mb": 1}});
    h.apply(run);
    let work = h.new_work();
    let ex = ended(&h.suite, &work);
    let out = output(&h.suite, &ex);
    assert_eq!(
        fields(&out).get("git_planted").map(String::as_str),
        Some("yes"),
        "{ex} {out}"
    );
    eprintln!("{}: the git plants ({mode}): {out}", h.who());
    // The timer's sweeps: two whole ones after the Work closed, each keeping the
    // dirty workspace.
    let swept = |h: &Hostile| {
        h.suite
            .log(Daemon::Extrunner)
            .lines()
            .filter(|l| l.contains("spare workspaces swept") && !l.contains("kept=0"))
            .count()
    };
    let before = swept(h);
    wait_for("two sweeps by the timer", || {
        (swept(h) >= before + 2).then_some(())
    });
    assert!(
        !marker.exists(),
        "the planted git config ran outside the sandbox ({mode}, the sweep's timer)"
    );
    for remove_dirty in [false, true] {
        let mut args = vec!["resource", "sweep", "--grace", "0"];
        if remove_dirty {
            args.push("--remove-dirty");
        }
        let said = h.cli(&args);
        assert!(
            !marker.exists(),
            "the planted git config ran outside the sandbox ({mode}, sweep): {said}"
        );
    }
}

fn agent_attack(h: &mut Hostile, victim: &Victim) {
    let _ = std::fs::remove_file(h.record());
    h.apply(h.agent(json!({
        "ATTACK_MODES": "folder escape secret create",
        "ESCAPE_BINDING": "open",
        "VICTIM_PGID": victim.pid().to_string(),
    })));
    let work = h.new_work();
    let ex = ended(&h.suite, &work);
    let all = h.everything(&ex);
    let text = std::fs::read_to_string(h.record()).unwrap_or_default();
    let f = fields(&text);
    assert_eq!(
        f.get("done").map(String::as_str),
        Some("yes"),
        "{text} {all}"
    );
    assert_eq!(
        f.get("run_dir_known").map(String::as_str),
        Some("yes"),
        "{text}"
    );
    untouched_folder(
        &h.suite
            .dir
            .join("state/extensions/claude-code/runs")
            .join(ex["id"].as_str().unwrap()),
    );
    denied(&f, &["secret_before"], &text);
    // create_work to the unsandboxed binding is refused, and makes no Work.
    assert_eq!(f["create_is_error"], "yes", "{}: {text}", h.who());
    assert_eq!(f["create_text"], "unauthorized", "{text}");
    let works = h
        .suite
        .call("store.works", json!({"scope_id": "demo"}))
        .unwrap();
    assert!(
        !works.to_string().contains("out of the sandbox"),
        "a Work was created outside the sandbox: {works}"
    );
    assert!(!all.contains("FORGED"), "{all}");
    assert!(!all.contains(SECRET), "{all}");
    assert_eq!(
        std::fs::read_to_string(&h.victim_file).unwrap(),
        "untouched"
    );
    no_escape_on_host(h);
}

/// The hostile suite as root (`None` when the tests are not root: skipped, saying
/// so) or as its unprivileged service user, once srt and python3 are here.
fn hostile(name: &str, as_root: bool) -> Option<Hostile> {
    if !have_srt() || !have_python() {
        return None;
    }
    let user = if as_root {
        if !nix::unistd::getuid().is_root() {
            eprintln!("SKIPPED: the suite runs as root only when the tests do");
            return None;
        }
        None
    } else {
        match RunAs::nobody() {
            Ok(u) => Some(u),
            Err(why) if nix::unistd::getuid().is_root() => panic!("{why}"),
            // Not root: the suite runs as this (unprivileged) user.
            Err(why) => {
                eprintln!("note: {why}; the suite runs as this user");
                None
            }
        }
    };
    let tag = if as_root { "root" } else { "user" };
    // Taken before the suite starts: its daemons run as the same user.
    let shared = (name != "cancel").then(|| ALONE.read().unwrap_or_else(|e| e.into_inner()));
    let mut h = Hostile::new(&format!("confine-{name}-{tag}"), user);
    h.shared = shared;
    // What an earlier run may have left where srt's defaults would write.
    for home in homes(&h) {
        for p in [".npm/_logs/oc-escape", ".claude/debug/oc-escape"] {
            let _ = std::fs::remove_file(home.join(p));
        }
    }
    let _ = std::fs::remove_file("/tmp/claude/oc-escape");
    Some(h)
}

/// Items 2 and 4 from a shell run.
fn run_folder(as_root: bool) {
    let Some(mut h) = hostile("folder", as_root) else {
        return;
    };
    let mut victim = Victim::start(h.user.as_ref());
    shell_folder_attack(&mut h, &mut victim);
    shell_interrupt_attack(&mut h, &mut victim);
    assert!(victim.alive());
}

/// Items 2, 3 (a read), 4 and 5 from a claude-code agent.
fn agent(as_root: bool) {
    let Some(mut h) = hostile("agent", as_root) else {
        return;
    };
    let victim = Victim::start(h.user.as_ref());
    agent_attack(&mut h, &victim);
}

/// Item 6: cancel (a shell run and an agent turn) and a fork bomb.
fn cancel_and_bomb(as_root: bool) {
    let Some(mut h) = hostile("cancel", as_root) else {
        return;
    };
    // The holds share the machine with the other tests; the bomb runs alone.
    let shared = ALONE.read().unwrap_or_else(|e| e.into_inner());
    let shell_hold = h.shell(json!({"ATTACK_MODES": "hold"}), json!({}));
    cancel_attack(&mut h, shell_hold, |h, exec| {
        h.shell_run_dir(exec).join("tmp/held")
    });
    let agent_hold = h.agent(json!({"ATTACK_MODES": "hold"}));
    cancel_attack(&mut h, agent_hold, |h, exec| {
        // The segment's own tmp folder, `<execution>/1.tmp`.
        h.suite
            .dir
            .join("state/extensions/claude-code/runs")
            .join(exec)
            .join("1.tmp/held")
    });
    drop(shared);
    let _alone = ALONE.write().unwrap_or_else(|e| e.into_inner());
    bomb_attack(&mut h);
}

/// Item 1, in a fresh clone and in a worktree.
fn git_config(as_root: bool) {
    let Some(mut h) = hostile("git", as_root) else {
        return;
    };
    git_attack(&mut h, "fresh");
    git_attack(&mut h, "work");
}

/// Item 3.
fn rotation(as_root: bool) {
    let Some(mut h) = hostile("rotation", as_root) else {
        return;
    };
    rotation_attack(&mut h);
}

macro_rules! as_root_and_as_user {
    ($($item:ident: $root:ident, $user:ident;)*) => {$(
        #[test]
        fn $root() {
            $item(true);
        }

        #[test]
        fn $user() {
            $item(false);
        }
    )*};
}

as_root_and_as_user! {
    run_folder:
        run_folder_tricks_reach_nothing_outside_as_root,
        run_folder_tricks_reach_nothing_outside_as_the_service_user;
    agent:
        a_hostile_agent_reaches_nothing_outside_as_root,
        a_hostile_agent_reaches_nothing_outside_as_the_service_user;
    cancel_and_bomb:
        cancel_and_a_fork_bomb_leave_nothing_as_root,
        cancel_and_a_fork_bomb_leave_nothing_as_the_service_user;
    git_config:
        planted_git_config_never_runs_outside_as_root,
        planted_git_config_never_runs_outside_as_the_service_user;
    rotation:
        a_rotated_secret_stays_unreadable_as_root,
        a_rotated_secret_stays_unreadable_as_the_service_user;
}
