#![allow(clippy::unwrap_used)]
//! Workspaces, with real daemons and real git: a binding with a `git` resource runs
//! each Work in its own worktree of a repository served by `git daemon` (or read
//! through `file://`); the lease survives SIGKILL of the provider and of extrunner in
//! the middle of an acquisition; a sweep removes a closed Work's worktree and keeps a
//! dirty one; bad repositories fail the run before any process starts, visibly in
//! `work show`.

mod common;
use common::repo::{git, have_git, make_repo};
use common::*;

use oc_systest::{Daemon, Suite, HANG};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The command each run executes: it records where it ran and what it saw, then
/// commits a file of its own, so the test can tell the workspaces apart.
const SCRIPT: &str = r#"set -e
if [ -n "$MARKER" ]; then echo ran >> "$MARKER"; fi
prior=$(cat mine.txt 2>/dev/null || echo none)
echo "$OS_WORK_ID" > mine.txt
git add mine.txt
git -c user.name=agent -c user.email=agent@example.invalid commit -q --allow-empty -m "work $OS_WORK_ID"
readme=no; if [ -f README.md ]; then readme=yes; fi
inws=no; if [ "$PWD" = "$OC_WORKSPACE" ]; then inws=yes; fi
echo "dir=$PWD"
echo "inws=$inws branch=$(git rev-parse --abbrev-ref HEAD) prior=$prior readme=$readme"
"#;

/// `git daemon` serving `root` on a loopback port; killed on drop.
struct GitDaemon {
    child: Child,
    port: u16,
}

impl GitDaemon {
    fn start(root: &Path) -> GitDaemon {
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        // In a process group of its own: `git daemon` runs git-daemon as its child,
        // and the whole group goes on drop.
        let child = Command::new("git")
            .process_group(0)
            .args([
                "daemon",
                "--reuseaddr",
                "--export-all",
                "--listen=127.0.0.1",
                &format!("--port={port}"),
                &format!("--base-path={}", root.display()),
                &root.display().to_string(),
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let deadline = Instant::now() + HANG;
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(Instant::now() < deadline, "git daemon did not listen");
            std::thread::sleep(Duration::from_millis(50));
        }
        GitDaemon { child, port }
    }

    fn url(&self, path: &str) -> String {
        format!("git://127.0.0.1:{}/{path}", self.port)
    }
}

impl Drop for GitDaemon {
    fn drop(&mut self) {
        if let Ok(pid) = i32::try_from(self.child.id()) {
            let _ = nix::sys::signal::killpg(
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
        let _ = self.child.wait();
    }
}

fn wait_for<T>(what: &str, limit: Duration, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(Instant::now() < deadline, "no {what} within {limit:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn binding_config(suite: &Suite, resource: Value, env: Value) -> Value {
    let mut c = common::config(suite);
    c["scopes"][0]["routes"] =
        json!([{"handler": "webhook", "binding": "run", "config": {"entry": "ci"}}]);
    c["scopes"][0]["bindings"] = json!([{"name": "run", "executor": "shell",
        "resource": {"type": "git", "config": resource},
        "config": {"script": SCRIPT, "env": env}}]);
    c
}

fn apply(suite: &Suite, config: &Value) {
    suite.apply_config(config, HOOK).unwrap();
    wait_for("the route", HANG, || {
        let s = suite.call("sched.status", json!({})).unwrap();
        (s["handlers"]["webhook"] == "webhook").then_some(())
    });
}

fn send(suite: &Suite, delivery: &str, number: u64) {
    let body = format!("{{\"number\": {number}}}");
    let r = deliver(suite, delivery, body.as_bytes()).unwrap();
    assert_eq!(r.status, 200, "{}", r.text());
}

fn works(suite: &Suite) -> Vec<Value> {
    suite
        .call("store.works", json!({"scope_id": "demo"}))
        .unwrap()["works"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

fn executions(suite: &Suite, work_id: &str) -> Vec<Value> {
    let mut all = suite
        .call("store.executions", json!({ "work_id": work_id }))
        .unwrap()["executions"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    all.sort_by_key(|e| e["attempt"].as_i64());
    all
}

/// The Work's executions once `n` of them have ended.
fn ended(suite: &Suite, work_id: &str, n: usize) -> Vec<Value> {
    wait_for(&format!("{n} ended executions of {work_id}"), HANG, || {
        let ex = executions(suite, work_id);
        let done = ex
            .iter()
            .filter(|e| e["state"] == "completed" || e["state"] == "failed")
            .count();
        (done >= n).then_some(ex)
    })
}

/// `key=value` words of a run's standard output (its first artifact that has them).
fn fields(suite: &Suite, execution: &Value) -> BTreeMap<String, String> {
    let text = execution["result"]["artifacts"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .map(|id| {
            let r = suite
                .call(
                    "store.artifact_read",
                    json!({"artifact_id": id, "offset": 0, "length": 65536}),
                )
                .unwrap();
            let data: Vec<u8> = protocol::b64::decode(r["data"].as_str().unwrap()).unwrap();
            String::from_utf8(data).unwrap()
        })
        .find(|t| t.contains("dir="))
        .unwrap_or_default();
    text.split_whitespace()
        .filter_map(|w| w.split_once('='))
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect()
}

fn leases(suite: &Suite) -> Vec<Value> {
    suite
        .call("store.resource_leases", json!({"limit": 500}))
        .unwrap()["leases"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

/// `open-conduit ARGS…` on the suite's bus: (status, stdout + stderr).
fn cli(suite: &Suite, args: &[&str]) -> (i32, String) {
    let out = Command::new(BIN)
        .arg("open-conduit")
        .arg("--bus")
        .arg(&suite.bus)
        .args(args)
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

/// The Works' worktrees of the provider's bare cache: besides the cache itself and
/// the spares (`<root>/spare/…`, which the provider tops up in the background, so
/// their number at any moment is not the Works').
fn worktrees(suite: &Suite) -> Vec<String> {
    let cache_root = suite.dir.join("state/resources/git/cache");
    let spares = suite.dir.join("state/resources/git/spare");
    let mut out = Vec::new();
    for entry in std::fs::read_dir(&cache_root)
        .into_iter()
        .flatten()
        .flatten()
    {
        let list = git(&entry.path(), &["worktree", "list", "--porcelain"]);
        out.extend(
            list.lines()
                .filter_map(|l| l.strip_prefix("worktree "))
                .filter(|w| !w.ends_with(".git") && !Path::new(w).starts_with(&spares))
                .map(str::to_owned),
        );
    }
    out
}

/// Every file under the `work` mode's directory: workspaces and their records.
fn work_dir_entries(suite: &Suite) -> Vec<String> {
    let root = suite.dir.join("state/resources/git/work");
    let mut out = Vec::new();
    for key in std::fs::read_dir(&root).into_iter().flatten().flatten() {
        for e in std::fs::read_dir(key.path())
            .into_iter()
            .flatten()
            .flatten()
        {
            out.push(e.file_name().to_string_lossy().into_owned());
        }
    }
    out.sort();
    out
}

#[test]
fn each_work_runs_in_its_own_worktree_and_resumes_in_it() {
    if !have_git() {
        return;
    }
    let suite = started("ws-work");
    let daemon = GitDaemon::start(&suite.dir);
    make_repo(&suite.dir);
    apply(
        &suite,
        &binding_config(
            &suite,
            json!({"repository": daemon.url("origin.git"), "min_free_mb": 1}),
            json!({}),
        ),
    );
    send(&suite, "d-1", 1);
    send(&suite, "d-2", 2);
    let both = wait_for("two Works", HANG, || {
        let w = works(&suite);
        (w.len() == 2).then_some(w)
    });
    let mut seen = Vec::new();
    for w in &both {
        let id = w["id"].as_str().unwrap().to_owned();
        let ex = ended(&suite, &id, 1);
        assert_eq!(ex[0]["state"], "completed", "{ex:?}");
        let f = fields(&suite, &ex[0]);
        assert_eq!(f["inws"], "yes", "the command runs in OC_WORKSPACE: {f:?}");
        assert_eq!(
            f["readme"], "yes",
            "the repository's files are there: {f:?}"
        );
        assert_eq!(f["prior"], "none", "{f:?}");
        assert!(f["branch"].starts_with("oc/"), "its own branch: {f:?}");
        seen.push((id, f));
    }
    let ((a, fa), (b, fb)) = (&seen[0], &seen[1]);
    assert_ne!(fa["dir"], fb["dir"], "one worktree each");
    assert_ne!(fa["branch"], fb["branch"], "one branch each");
    // A commit made in one is not in the other.
    let log_a = git(Path::new(&fa["dir"]), &["log", "--format=%s", "HEAD"]);
    let log_b = git(Path::new(&fb["dir"]), &["log", "--format=%s", "HEAD"]);
    assert!(
        log_a.contains(&format!("work {a}")) && !log_a.contains(&format!("work {b}")),
        "{log_a}"
    );
    assert!(
        log_b.contains(&format!("work {b}")) && !log_b.contains(&format!("work {a}")),
        "{log_b}"
    );
    assert_eq!(
        std::fs::read_to_string(Path::new(&fb["dir"]).join("mine.txt")).unwrap(),
        format!("{b}\n")
    );
    // The host holds one lease per Work, naming its worktree.
    let l = leases(&suite);
    assert_eq!(l.len(), 2, "{l:?}");
    for (id, f) in &seen {
        let lease = l.iter().find(|x| x["owner"] == id.as_str()).unwrap();
        assert_eq!(lease["dir"], f["dir"].as_str(), "{lease}");
        assert_eq!(lease["type"], "git");
        assert_eq!(lease["mode"], "work");
    }
    // A second delivery to the Work of issue 1 resumes in the same worktree.
    send(&suite, "d-3", 1);
    let (a, fa, ex) = wait_for("a second run of one Work", HANG, || {
        seen.iter().find_map(|(id, f)| {
            let ex = executions(&suite, id);
            let done = ex
                .iter()
                .filter(|e| e["state"] == "completed" || e["state"] == "failed")
                .count();
            (done >= 2).then(|| (id.clone(), f.clone(), ex))
        })
    });
    let (a, fa) = (&a, &fa);
    assert_eq!(ex.len(), 2, "{ex:?}");
    assert_eq!(ex[1]["state"], "completed", "{ex:?}");
    let again = fields(&suite, &ex[1]);
    assert_eq!(again["dir"], fa["dir"], "the same worktree: {again:?}");
    assert_eq!(again["branch"], fa["branch"]);
    assert_eq!(
        again["prior"],
        a.as_str(),
        "its own earlier commit: {again:?}"
    );
    assert_eq!(leases(&suite).len(), 2);
    // The operator sees it: work show names the workspace, resource list the leases.
    let show = cli(&suite, &["work", "show", a]);
    assert_eq!(show.0, 0, "{show:?}");
    assert!(
        show.1.contains(&format!("workspace: {}", fa["dir"]))
            && show.1.contains(&format!("branch {}", fa["branch"]))
            && show.1.contains("HEAD "),
        "{}",
        show.1
    );
    // doctor asks the git package about the configured repository, which answers.
    let doctor = cli(&suite, &["doctor"]);
    let line = doctor
        .1
        .lines()
        .find(|l| l.contains("git_repositories"))
        .unwrap_or_else(|| panic!("no git_repositories check: {}", doctor.1));
    assert!(
        line.contains("ok") && line.contains("1 of 1 repositories reachable"),
        "{}",
        doctor.1
    );
    let list = cli(&suite, &["resource", "list"]);
    assert_eq!(list.0, 0, "{list:?}");
    assert!(
        seen.iter().all(|(id, _)| list.1.contains(id.as_str())) && list.1.contains("2 workspaces"),
        "{}",
        list.1
    );
}

/// A suite whose git provider pauses once between `git worktree add` and the record
/// of a whole workspace (the `OC_GIT_FAULT` point, granted to the package).
fn paused_suite(name: &str) -> (Suite, PathBuf) {
    let suite = Suite::new(Path::new(BIN), name, &Suite::first_party()).unwrap();
    let fault = suite.dir.join("fault");
    std::fs::create_dir_all(&fault).unwrap();
    std::fs::write(fault.join("armed"), "").unwrap();
    suite.set_env(
        Daemon::Extrunner,
        "OC_GIT_FAULT",
        &format!("pause_after_add:{}", fault.display()),
    );
    std::fs::create_dir_all(suite.dir.join("etc")).unwrap();
    std::fs::write(
        suite.dir.join("etc/config.json"),
        json!({"settings": {"extensions": {"git": {"pass_env": ["OC_GIT_FAULT"]}}}}).to_string(),
    )
    .unwrap();
    suite.start_all().unwrap();
    suite.apply_config(&common::config(&suite), HOOK).unwrap();
    suite.wait_for_route("/github/demo/repo").unwrap();
    (suite, fault)
}

fn file_config(suite: &Suite, bare: &Path, marker: &Path) -> Value {
    binding_config(
        suite,
        json!({"repository": format!("file://{}", bare.display()), "min_free_mb": 1}),
        json!({"MARKER": marker.display().to_string()}),
    )
}

fn sigkill(pid: i32) {
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
}

/// After the crash: one Work, completed, one lease, one worktree, nothing half-made.
fn agrees_after_restart(suite: &Suite, fault: &Path, marker: &Path) -> Vec<Value> {
    let work = wait_for("the Work", HANG, || works(suite).into_iter().next());
    let id = work["id"].as_str().unwrap().to_owned();
    let ex = wait_for("a completed execution", HANG, || {
        let ex = executions(suite, &id);
        ex.iter().any(|e| e["state"] == "completed").then_some(ex)
    });
    assert!(fault.join("taken").exists(), "the pause was reached");
    // The command ran once: the interrupted acquisition started nothing.
    assert_eq!(std::fs::read_to_string(marker).unwrap(), "ran\n");
    let l = leases(suite);
    assert_eq!(l.len(), 1, "one lease: {l:?}");
    assert_eq!(l[0]["owner"], id.as_str());
    let trees = worktrees(suite);
    assert_eq!(
        trees,
        vec![l[0]["dir"].as_str().unwrap().to_owned()],
        "one worktree, the lease's"
    );
    let entries = work_dir_entries(suite);
    assert_eq!(
        entries.len(),
        2,
        "a workspace and its record, nothing else: {entries:?}"
    );
    assert!(entries.iter().all(|e| !e.ends_with(".tmp")), "{entries:?}");
    ex
}

#[test]
fn a_provider_killed_in_the_middle_of_an_acquisition_leaves_one_worktree_and_one_lease() {
    if !have_git() {
        return;
    }
    let (suite, fault) = paused_suite("ws-kill-provider");
    let bare = make_repo(&suite.dir);
    let marker = suite.dir.join("marker");
    apply(&suite, &file_config(&suite, &bare, &marker));
    send(&suite, "d-1", 1);
    let pid: i32 = wait_for("the pause", HANG, || {
        std::fs::read_to_string(fault.join("paused"))
            .ok()
            .and_then(|p| p.trim().parse().ok())
    });
    // The worktree is made, its record still says `creating`, and no lease exists.
    assert!(leases(&suite).is_empty());
    sigkill(pid);
    let ex = agrees_after_restart(&suite, &fault, &marker);
    // extrunner asked the restarted provider again within the same attempt.
    assert_eq!(ex.len(), 1, "{ex:?}");
    assert!(
        suite
            .log(Daemon::Extrunner)
            .contains("reconcile removed a half-made workspace"),
        "the half-made worktree was reconciled away"
    );
}

#[test]
fn extrunner_killed_in_the_middle_of_an_acquisition_leaves_one_worktree_and_one_lease() {
    if !have_git() {
        return;
    }
    let (suite, fault) = paused_suite("ws-kill-extrunner");
    let bare = make_repo(&suite.dir);
    let marker = suite.dir.join("marker");
    apply(&suite, &file_config(&suite, &bare, &marker));
    send(&suite, "d-1", 1);
    wait_for("the pause", HANG, || {
        fault.join("paused").exists().then_some(())
    });
    suite.kill(Daemon::Extrunner);
    suite.start(Daemon::Extrunner).unwrap();
    let ex = agrees_after_restart(&suite, &fault, &marker);
    // The interrupted attempt ended failed (it never launched); the next one ran.
    assert!(ex.iter().any(|e| e["state"] == "completed"), "{ex:?}");
}

#[test]
fn a_sweep_removes_a_closed_works_worktree_and_keeps_a_dirty_one() {
    if !have_git() {
        return;
    }
    let suite = started("ws-sweep");
    let bare = make_repo(&suite.dir);
    let marker = suite.dir.join("marker");
    apply(&suite, &file_config(&suite, &bare, &marker));
    send(&suite, "d-1", 1);
    send(&suite, "d-2", 2);
    let both = wait_for("two Works", HANG, || {
        let w = works(&suite);
        (w.len() == 2).then_some(w)
    });
    let ids: Vec<String> = both
        .iter()
        .map(|w| w["id"].as_str().unwrap().to_owned())
        .collect();
    for id in &ids {
        assert_eq!(ended(&suite, id, 1)[0]["state"], "completed");
    }
    let l = leases(&suite);
    let dir_of = |id: &str| -> PathBuf {
        PathBuf::from(
            l.iter().find(|x| x["owner"] == id).unwrap()["dir"]
                .as_str()
                .unwrap(),
        )
    };
    let (clean, dirty) = (dir_of(&ids[0]), dir_of(&ids[1]));
    std::fs::write(dirty.join("uncommitted.txt"), "work in progress\n").unwrap();
    // Within the default grace (a day) nothing goes.
    let early = cli(&suite, &["resource", "sweep"]);
    assert_eq!(early.0, 0, "{early:?}");
    assert!(early.1.contains("removed 0 workspaces"), "{}", early.1);
    assert!(clean.is_dir() && dirty.is_dir());
    // Both Works are closed (completed); with no grace, the clean one goes.
    let swept = cli(&suite, &["resource", "sweep", "--grace", "0"]);
    assert_eq!(swept.0, 0, "{swept:?}");
    assert!(swept.1.contains("removed 1 workspace"), "{}", swept.1);
    assert!(
        swept.1.contains("uncommitted changes"),
        "the dirty one is reported: {}",
        swept.1
    );
    assert!(swept.1.contains("pruned"), "{}", swept.1);
    assert!(!clean.exists(), "the closed Work's worktree is removed");
    assert!(
        dirty.join("uncommitted.txt").exists(),
        "the dirty one is kept"
    );
    let left = leases(&suite);
    assert_eq!(left.len(), 1, "{left:?}");
    assert_eq!(left[0]["owner"], ids[1].as_str());
    assert_eq!(
        worktrees(&suite),
        vec![dirty.display().to_string()],
        "pruned"
    );
}

/// A server that answers every request 401 with a Basic challenge: a repository
/// that needs a credential.
fn needs_credential() -> (u16, std::thread::JoinHandle<()>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let handle = std::thread::spawn(move || {
        for stream in listener.incoming().flatten().take(64) {
            let mut s = stream;
            let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
            let mut buf = [0u8; 4096];
            let _ = s.read(&mut buf);
            let _ = s.write_all(
                b"HTTP/1.1 401 Unauthorized\r\nWWW-Authenticate: Basic realm=\"repo\"\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
            );
        }
    });
    (port, handle)
}

#[test]
fn a_bad_repository_fails_the_run_before_any_process_starts() {
    if !have_git() {
        return;
    }
    let suite = started("ws-bad");
    let bare = make_repo(&suite.dir);
    let marker = suite.dir.join("marker");
    let (port, _server) = needs_credential();
    let cases = [
        (
            json!({"repository": "file:///nonexistent/repo.git"}),
            "resource_setup_failed",
            "/nonexistent/repo.git",
        ),
        (
            json!({"repository": format!("file://{}", bare.display()), "base": "no-such-branch"}),
            "resource_setup_failed",
            "no-such-branch",
        ),
        (
            json!({"repository": format!("http://127.0.0.1:{port}/private.git")}),
            "resource_setup_failed",
            "credential",
        ),
        (
            json!({"repository": format!("file://{}", bare.display()), "min_free_mb": 1u64 << 40}),
            "resource_exhausted",
            "MiB",
        ),
    ];
    let mut earlier: Vec<String> = Vec::new();
    for (n, (resource, code, says)) in cases.iter().enumerate() {
        let config = binding_config(
            &suite,
            resource.clone(),
            json!({"MARKER": marker.display().to_string()}),
        );
        apply(&suite, &config);
        send(&suite, &format!("bad-{n}"), 100 + n as u64);
        let id = wait_for("the new Work", HANG, || {
            works(&suite)
                .into_iter()
                .filter_map(|w| w["id"].as_str().map(str::to_owned))
                .find(|id| !earlier.contains(id))
        });
        earlier.push(id.clone());
        let ex = ended(&suite, &id, 1);
        let error = ex[0]["result"]["error"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        assert_eq!(ex[0]["state"], "failed", "{ex:?}");
        assert!(error.starts_with(code), "case {n}: {error}");
        assert!(error.contains(says), "case {n}: {error}");
        let show = cli(&suite, &["work", "show", &id]);
        assert!(show.1.contains(code), "case {n}: {}", show.1);
        if n == 0 {
            // doctor names the unreachable repository.
            let doctor = cli(&suite, &["doctor"]);
            let line = doctor
                .1
                .lines()
                .find(|l| l.contains("git_repositories"))
                .unwrap_or_else(|| panic!("no git_repositories check: {}", doctor.1));
            assert!(
                line.contains("fail") && line.contains("/nonexistent/repo.git"),
                "{}",
                doctor.1
            );
        }
        // Stop its retries before the next case.
        let _ = cli(&suite, &["work", "cancel", &id]);
    }
    assert!(!marker.exists(), "no command ran");
    assert!(leases(&suite).is_empty());
}

/// `git http-backend` (git's own smart-HTTP server, as CGI) behind a small HTTP
/// server on a loopback port that asks for Basic authentication: a private
/// repository over `http://`.
struct PrivateHttp {
    port: u16,
    /// The requests that carried the right credential.
    authorised: std::sync::Arc<std::sync::atomic::AtomicUsize>,
}

impl PrivateHttp {
    fn start(root: PathBuf, user: &str, password: &str) -> PrivateHttp {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let expected = format!(
            "Basic {}",
            protocol::b64::encode(format!("{user}:{password}").as_bytes())
        );
        let authorised = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let count = authorised.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let (root, expected, count) = (root.clone(), expected.clone(), count.clone());
                std::thread::spawn(move || serve_cgi(stream, &root, &expected, &count));
            }
        });
        PrivateHttp { port, authorised }
    }
}

fn serve_cgi(
    mut s: TcpStream,
    root: &Path,
    expected: &str,
    count: &std::sync::atomic::AtomicUsize,
) {
    let _ = s.set_read_timeout(Some(Duration::from_secs(30)));
    let mut raw = Vec::new();
    let mut buf = [0u8; 8192];
    let head_end = loop {
        if let Some(i) = raw.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        match s.read(&mut buf) {
            Ok(0) | Err(_) => return,
            Ok(n) => raw.extend_from_slice(&buf[..n]),
        }
    };
    let head = String::from_utf8_lossy(&raw[..head_end]).into_owned();
    let mut lines = head.split("\r\n");
    let mut first = lines.next().unwrap_or_default().split(' ');
    let (method, target) = (
        first.next().unwrap_or_default().to_owned(),
        first.next().unwrap_or_default().to_owned(),
    );
    let mut headers = BTreeMap::new();
    for l in lines {
        if let Some((k, v)) = l.split_once(':') {
            headers.insert(k.trim().to_ascii_lowercase(), v.trim().to_owned());
        }
    }
    if headers.get("authorization").map(String::as_str) != Some(expected) {
        let _ = s.write_all(
            b"HTTP/1.1 401 Unauthorized\r\nWWW-Authenticate: Basic realm=\"private\"\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
        );
        return;
    }
    count.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    let mut body = raw[head_end..].to_vec();
    let length: usize = headers
        .get("content-length")
        .and_then(|l| l.parse().ok())
        .unwrap_or(0);
    while body.len() < length {
        match s.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => body.extend_from_slice(&buf[..n]),
        }
    }
    let (path, query) = target.split_once('?').unwrap_or((&target, ""));
    let mut cgi = Command::new("git")
        .arg("http-backend")
        .env("GIT_PROJECT_ROOT", root)
        .env("GIT_HTTP_EXPORT_ALL", "1")
        .env("REQUEST_METHOD", &method)
        .env("PATH_INFO", path)
        .env("QUERY_STRING", query)
        .env("REMOTE_USER", "agent")
        .env("CONTENT_LENGTH", body.len().to_string())
        .env(
            "CONTENT_TYPE",
            headers.get("content-type").cloned().unwrap_or_default(),
        )
        .env(
            "HTTP_GIT_PROTOCOL",
            headers.get("git-protocol").cloned().unwrap_or_default(),
        )
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    if let Some(mut stdin) = cgi.stdin.take() {
        let _ = stdin.write_all(&body);
    }
    let out = cgi.wait_with_output().unwrap();
    let split = out
        .stdout
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .map(|i| (i, 4))
        .or_else(|| {
            out.stdout
                .windows(2)
                .position(|w| w == b"\n\n")
                .map(|i| (i, 2))
        });
    let Some((at, sep)) = split else { return };
    let cgi_head = String::from_utf8_lossy(&out.stdout[..at]).into_owned();
    let cgi_body = &out.stdout[at + sep..];
    let mut status = "200 OK".to_owned();
    let mut reply = String::new();
    for l in cgi_head.lines() {
        match l.split_once(':') {
            Some((k, v)) if k.eq_ignore_ascii_case("status") => status = v.trim().to_owned(),
            Some(_) => reply.push_str(&format!("{l}\r\n")),
            None => {}
        }
    }
    let _ = s.write_all(
        format!(
            "HTTP/1.1 {status}\r\n{reply}Content-Length: {}\r\nConnection: close\r\n\r\n",
            cgi_body.len()
        )
        .as_bytes(),
    );
    let _ = s.write_all(cgi_body);
}

#[test]
fn a_private_repository_is_fetched_with_the_credential_of_a_connection() {
    if !have_git() {
        return;
    }
    let suite = started("ws-private");
    make_repo(&suite.dir);
    let token = "s3cret-token-for-tests";
    let server = PrivateHttp::start(suite.dir.clone(), "x-access-token", token);
    let token_file = suite.dir.join("git-token");
    std::fs::write(&token_file, token).unwrap();
    let marker = suite.dir.join("marker");
    let mut config = binding_config(
        &suite,
        json!({"repository": format!("http://127.0.0.1:{}/origin.git", server.port),
               "connection": "repo", "min_free_mb": 1}),
        json!({"MARKER": marker.display().to_string()}),
    );
    config["connections"]
        .as_array_mut()
        .unwrap()
        .push(json!({"name": "repo", "type": "github",
                     "secret_refs": {"token": format!("file:{}", token_file.display())}}));
    apply(&suite, &config);
    send(&suite, "p-1", 1);
    let work = wait_for("the Work", HANG, || works(&suite).into_iter().next());
    let id = work["id"].as_str().unwrap().to_owned();
    let ex = ended(&suite, &id, 1);
    assert_eq!(ex[0]["state"], "completed", "{ex:?}");
    let f = fields(&suite, &ex[0]);
    assert_eq!(f["readme"], "yes", "the private repository's files: {f:?}");
    assert!(
        server.authorised.load(std::sync::atomic::Ordering::SeqCst) > 0,
        "git authenticated"
    );
    // The token was given to git on its environment only: it is in no file of the
    // workspace, the cache or the logs.
    let grep = Command::new("grep")
        .args(["-rl", token])
        .arg(suite.dir.join("state"))
        .arg(suite.dir.join("logs"))
        .output()
        .unwrap();
    assert!(
        String::from_utf8_lossy(&grep.stdout).trim().is_empty(),
        "the token leaked into {}",
        String::from_utf8_lossy(&grep.stdout)
    );
}
