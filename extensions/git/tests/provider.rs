#![allow(clippy::unwrap_used)]
//! The real `oc-git-extension` binary as a child process, driven over its stdin and
//! stdout as the host drives it (`initialize` with `resource_dirs`, `provider.*`), with
//! the host's `provider.owner_status` served here. Real git on real repositories the
//! tests make, over `file://`, `git daemon` on 127.0.0.1 and a refusing HTTP server;
//! real SIGKILLs. Nothing here measures time: the timeouts only guard against hangs.

use protocol::{connect, CallError, FnHandler, Options, Peer, Request, RpcError};
use serde_json::{json, Value};
use std::collections::HashMap;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::process::{Child, Command};

const EXE: &str = env!("CARGO_BIN_EXE_oc-git-extension");
/// Only against hangs.
const HANG: Duration = Duration::from_secs(120);

async fn within<F: std::future::Future>(f: F) -> F::Output {
    tokio::time::timeout(HANG, f).await.expect("hung")
}

/// Whether real git is here; the tests skip with a reason when it is not.
fn have_git() -> bool {
    let ok = std::process::Command::new("git")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        eprintln!("skipped: no `git` on PATH (install Debian's git package)");
    }
    ok
}

/// Environment that keeps the user's and the system's git config out.
const ISOLATE: &[(&str, &str)] = &[
    ("GIT_CONFIG_GLOBAL", "/dev/null"),
    ("GIT_CONFIG_NOSYSTEM", "1"),
];

/// `git <args>` in `dir`, which must succeed; answers stdout.
fn git(dir: &Path, args: &[&str]) -> String {
    let out = std::process::Command::new("git")
        .args(["-c", "user.name=test", "-c", "user.email=test@example.com"])
        .args(args)
        .current_dir(dir)
        .envs(ISOLATE.iter().copied())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "git {args:?} in {}: {}",
        dir.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

struct Scratch(PathBuf);

impl Scratch {
    fn new(test: &str) -> Scratch {
        let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
            .join(format!("oc-git-{test}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Scratch(dir)
    }
    fn root(&self) -> PathBuf {
        self.0.join("resources").join("git")
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A bare repository `<scratch>/origin.git`: `main` with three commits (a.txt,
/// dir/b.txt) and `feature` with one more (feature.txt). `extra` files go in the
/// first commit.
fn make_origin(scratch: &Path, extra: &[(&str, &str)]) -> PathBuf {
    let src = scratch.join("src");
    std::fs::create_dir_all(src.join("dir")).unwrap();
    git(&src, &["init", "-q", "-b", "main"]);
    std::fs::write(src.join("a.txt"), "one\n").unwrap();
    for (name, text) in extra {
        std::fs::write(src.join(name), text).unwrap();
    }
    git(&src, &["add", "-A"]);
    git(&src, &["commit", "-q", "-m", "first"]);
    std::fs::write(src.join("dir/b.txt"), "two\n").unwrap();
    git(&src, &["add", "-A"]);
    git(&src, &["commit", "-q", "-m", "second"]);
    std::fs::write(src.join("a.txt"), "one, again\n").unwrap();
    git(&src, &["commit", "-q", "-am", "third"]);
    git(&src, &["checkout", "-q", "-b", "feature"]);
    std::fs::write(src.join("feature.txt"), "feature\n").unwrap();
    git(&src, &["add", "-A"]);
    git(&src, &["commit", "-q", "-m", "feature"]);
    git(&src, &["checkout", "-q", "main"]);
    let origin = scratch.join("origin.git");
    git(
        scratch,
        &[
            "clone",
            "-q",
            "--bare",
            src.to_str().unwrap(),
            origin.to_str().unwrap(),
        ],
    );
    origin
}

fn file_url(p: &Path) -> String {
    format!("file://{}", p.display())
}

/// The host side: owner statuses to answer, and what was asked.
#[derive(Default)]
struct HostState {
    statuses: Mutex<HashMap<String, (String, String)>>,
    asked: Mutex<Vec<Value>>,
}

async fn serve_host(state: Arc<HostState>, request: Request) -> Result<Value, RpcError> {
    match request.method.as_str() {
        "provider.owner_status" => {
            let p: protocol::wire::ProviderOwnerStatusParams = request.params()?;
            state
                .asked
                .lock()
                .unwrap()
                .push(serde_json::to_value(&p).unwrap());
            let statuses = state.statuses.lock().unwrap();
            let owners: Vec<Value> = p
                .owners
                .iter()
                .map(|o| {
                    let (status, closed_at) = statuses
                        .get(o)
                        .cloned()
                        .unwrap_or(("unknown".into(), String::new()));
                    json!({"owner": o, "status": status, "closed_at": closed_at})
                })
                .collect();
            Ok(json!({ "owners": owners }))
        }
        other => Err(RpcError::method_not_found(other)),
    }
}

struct Ext {
    child: Child,
    peer: Peer,
}

impl Ext {
    async fn start(scratch: &Scratch, host: &Arc<HostState>, env: &[(&str, &str)]) -> Ext {
        let mut child = Command::new(EXE)
            .current_dir(&scratch.0)
            .envs(ISOLATE.iter().copied())
            .envs(env.iter().copied())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .process_group(0)
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let stdin = child.stdin.take().unwrap();
        let stdout = child.stdout.take().unwrap();
        let state = Arc::clone(host);
        let handler = FnHandler(move |request: Request| serve_host(Arc::clone(&state), request));
        let peer = connect(stdout, stdin, handler, Options::named("git provider"));
        let init = within(peer.call(
            "initialize",
            &json!({
                "protocol_versions": [1],
                "host": {"name": "test-host", "version": "0"},
                "state_dir": scratch.0.join("state").to_str().unwrap(),
                "resource_dirs": {"git": scratch.root().to_str().unwrap()},
            }),
        ))
        .await
        .unwrap();
        assert_eq!(init["protocol_version"], 1);
        let file: Value = serde_json::from_str(oc_git::MANIFEST).unwrap();
        assert_eq!(init["manifest"], file);
        Ext { child, peer }
    }

    async fn call(&self, method: &str, params: Value) -> Result<Value, CallError> {
        within(self.peer.call(method, &params)).await
    }

    async fn acquire(
        &self,
        owner: &str,
        mode: &str,
        config: Value,
        params: Value,
    ) -> Result<Value, CallError> {
        self.call(
            "provider.acquire",
            json!({"type": "git", "owner": owner, "mode": mode, "config": config,
                   "params": params, "scope_id": "acme", "binding": "agent"}),
        )
        .await
    }

    fn kill(&mut self) {
        let pid = nix::unistd::Pid::from_raw(self.child.id().unwrap() as i32);
        nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGKILL).unwrap();
    }
}

/// The app code and `data.what` of a failed call.
fn code_of(e: &CallError) -> (String, String) {
    let rpc = e
        .rpc()
        .unwrap_or_else(|| panic!("not an authored error: {e}"));
    let data = rpc.data.clone().unwrap_or(Value::Null);
    (
        data["code"].as_str().unwrap_or("").to_string(),
        data["what"].as_str().unwrap_or("").to_string(),
    )
}

fn dir_of(v: &Value) -> PathBuf {
    PathBuf::from(v["dir"].as_str().unwrap())
}

/// The cache's worktrees other than the bare cache itself.
fn worktrees(root: &Path) -> Vec<String> {
    let mut out = Vec::new();
    for cache in std::fs::read_dir(root.join("cache")).unwrap() {
        let cache = cache.unwrap().path();
        let list = git(&cache, &["worktree", "list", "--porcelain"]);
        for block in list.split("\n\n") {
            if block.trim().is_empty() || block.lines().any(|l| l == "bare") {
                continue;
            }
            let first = block.lines().next().unwrap_or("").to_string();
            // The provider's spare worktrees are nobody's workspace.
            if first.contains("/spare/") {
                continue;
            }
            out.push(first);
        }
    }
    out
}

/// Every entry under `<root>/<mode>/*/`.
fn entries(root: &Path, mode: &str) -> Vec<String> {
    let mut out = Vec::new();
    let Ok(keys) = std::fs::read_dir(root.join(mode)) else {
        return out;
    };
    for key in keys {
        for e in std::fs::read_dir(key.unwrap().path()).unwrap() {
            out.push(e.unwrap().file_name().to_string_lossy().into_owned());
        }
    }
    out.sort();
    out
}

#[tokio::test]
async fn two_works_get_their_own_worktrees_and_a_second_acquire_answers_the_same() {
    if !have_git() {
        return;
    }
    let s = Scratch::new("work");
    let origin = make_origin(&s.0, &[]);
    let host = Arc::new(HostState::default());
    let ext = Ext::start(&s, &host, &[]).await;
    let config = json!({"repository": file_url(&origin)});

    let w1 = ext
        .acquire("w-1", "", config.clone(), Value::Null)
        .await
        .unwrap();
    let w2 = ext
        .acquire("w-2", "work", config.clone(), Value::Null)
        .await
        .unwrap();
    assert_eq!(w1["mode"], "work", "work is the default mode");
    let (d1, d2) = (dir_of(&w1), dir_of(&w2));
    assert_ne!(d1, d2);
    assert_ne!(w1["data"]["branch"], w2["data"]["branch"]);
    for d in [&d1, &d2] {
        assert!(d.starts_with(s.root()));
        assert_eq!(
            std::fs::read_to_string(d.join("a.txt")).unwrap(),
            "one, again\n"
        );
        assert_eq!(
            std::fs::read_to_string(d.join("dir/b.txt")).unwrap(),
            "two\n"
        );
        assert!(!d.join("feature.txt").exists());
        // A worktree: .git is a file pointing into the cache.
        assert!(d.join(".git").is_file());
    }
    assert_eq!(
        w1["env"]["GIT_CEILING_DIRECTORIES"],
        d1.parent().unwrap().to_str().unwrap()
    );
    assert!(w1["env"]
        .as_object()
        .unwrap()
        .keys()
        .all(|k| k.starts_with("GIT_")));
    let branch1 = git(&d1, &["branch", "--show-current"]);
    assert_eq!(branch1.trim(), w1["data"]["branch"].as_str().unwrap());
    assert!(branch1.starts_with("oc/"));

    // A commit in one is not visible in the other.
    std::fs::write(d1.join("mine.txt"), "w-1's\n").unwrap();
    git(&d1, &["add", "mine.txt"]);
    git(&d1, &["commit", "-q", "-m", "w-1's change"]);
    let head1 = git(&d1, &["rev-parse", "HEAD"]).trim().to_string();
    assert!(!d2.join("mine.txt").exists());
    assert!(!git(&d2, &["log", "--format=%H"]).contains(&head1));

    // The second acquisition for w-1 answers the same workspace, its commit there.
    let again = ext
        .acquire("w-1", "work", config.clone(), Value::Null)
        .await
        .unwrap();
    assert_eq!(again["ref"], w1["ref"]);
    assert_eq!(dir_of(&again), d1);
    assert_eq!(again["data"]["head"], head1.as_str());
    assert_eq!(worktrees(&s.root()).len(), 2);

    // Lookup answers it and never creates; an unknown reference is resource_not_found.
    let looked = ext
        .call("provider.lookup", json!({"type": "git", "ref": w1["ref"]}))
        .await
        .unwrap();
    assert_eq!(dir_of(&looked), d1);
    let key = w1["ref"]
        .as_str()
        .unwrap()
        .split('/')
        .nth(1)
        .unwrap()
        .to_string();
    let e = ext
        .call(
            "provider.lookup",
            json!({"type": "git", "ref": format!("work/{key}/nobody-00000000")}),
        )
        .await
        .unwrap_err();
    assert_eq!(code_of(&e).0, "resource_not_found");
    let e = ext
        .call(
            "provider.lookup",
            json!({"type": "git", "ref": "work/../../etc"}),
        )
        .await
        .unwrap_err();
    assert_eq!(code_of(&e).0, "resource_not_found");
    assert_eq!(worktrees(&s.root()).len(), 2);

    // The branch parameter: an existing branch is checked out, a new one is made
    // from the default branch.
    let w3 = ext
        .acquire("w-3", "work", config.clone(), json!({"branch": "feature"}))
        .await
        .unwrap();
    assert!(dir_of(&w3).join("feature.txt").exists());
    assert_eq!(
        git(&dir_of(&w3), &["branch", "--show-current"]).trim(),
        "feature"
    );
    let w4 = ext
        .acquire("w-4", "work", config.clone(), json!({"branch": "fix-12"}))
        .await
        .unwrap();
    assert_eq!(
        git(&dir_of(&w4), &["branch", "--show-current"]).trim(),
        "fix-12"
    );
    assert!(!dir_of(&w4).join("feature.txt").exists());
    // A branch already checked out for another Work is a structured refusal.
    let e = ext
        .acquire("w-5", "work", config.clone(), json!({"branch": "feature"}))
        .await
        .unwrap_err();
    assert_eq!(
        code_of(&e),
        ("resource_setup_failed".into(), "branch".into())
    );

    // fresh: a clone of its own (a .git directory), sharing nothing writable.
    let f1 = ext
        .acquire("w-1", "fresh", config.clone(), Value::Null)
        .await
        .unwrap();
    let fd = dir_of(&f1);
    assert_ne!(fd, d1);
    assert!(fd.join(".git").is_dir());
    assert!(!fd.join(".git/objects/info/alternates").exists());
    assert_eq!(
        std::fs::read_to_string(fd.join("a.txt")).unwrap(),
        "one, again\n"
    );
    assert!(!fd.join("mine.txt").exists());
    assert_eq!(
        git(&fd, &["remote", "get-url", "origin"]).trim(),
        file_url(&origin)
    );
    let f1again = ext
        .acquire("w-1", "clone", config.clone(), Value::Null)
        .await
        .unwrap();
    assert_eq!(f1again["ref"], f1["ref"]);

    // shared: one checkout for the binding, whoever the owner.
    let sh1 = ext
        .acquire("w-1", "shared", config.clone(), Value::Null)
        .await
        .unwrap();
    let sh2 = ext
        .acquire("w-2", "shared", config.clone(), Value::Null)
        .await
        .unwrap();
    assert_eq!(sh1["dir"], sh2["dir"]);
    assert_eq!(
        git(&dir_of(&sh1), &["branch", "--show-current"]).trim(),
        "main"
    );
}

#[tokio::test]
async fn a_repository_served_by_git_daemon() {
    if !have_git() {
        return;
    }
    let exec = std::process::Command::new("git")
        .arg("--exec-path")
        .output()
        .unwrap();
    let exec = PathBuf::from(String::from_utf8_lossy(&exec.stdout).trim());
    if !exec.join("git-daemon").exists() {
        eprintln!("skipped: git-daemon is not installed");
        return;
    }
    let s = Scratch::new("daemon");
    make_origin(&s.0, &[]);
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    // In a process group of its own: `git daemon` runs git-daemon as its child, and
    // the whole group goes when the test ends.
    let daemon = Command::new("git")
        .process_group(0)
        .args([
            "daemon",
            "--reuseaddr",
            "--export-all",
            "--listen=127.0.0.1",
            &format!("--port={port}"),
            &format!("--base-path={}", s.0.display()),
        ])
        .envs(ISOLATE.iter().copied())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    struct Group(i32);
    impl Drop for Group {
        fn drop(&mut self) {
            let _ = nix::sys::signal::killpg(
                nix::unistd::Pid::from_raw(self.0),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
    }
    let _group = Group(daemon.id().and_then(|p| i32::try_from(p).ok()).unwrap());
    within(async {
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;
    let host = Arc::new(HostState::default());
    let ext = Ext::start(&s, &host, &[]).await;
    let config = json!({"repository": format!("git://127.0.0.1:{port}/origin.git")});
    let w1 = ext
        .acquire("w-1", "work", config.clone(), Value::Null)
        .await
        .unwrap();
    let w2 = ext
        .acquire("w-2", "work", config, Value::Null)
        .await
        .unwrap();
    for w in [&w1, &w2] {
        assert_eq!(
            std::fs::read_to_string(dir_of(w).join("a.txt")).unwrap(),
            "one, again\n"
        );
    }
    assert_ne!(w1["dir"], w2["dir"]);
    assert_eq!(w1["data"]["base"], "main");
}

/// An HTTP server on 127.0.0.1 that asks every request for a password.
fn refusing_http() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { continue };
            let mut buf = [0u8; 4096];
            let _ = conn.set_read_timeout(Some(Duration::from_secs(5)));
            let _ = conn.read(&mut buf);
            let _ = conn.write_all(
                b"HTTP/1.1 401 Unauthorized\r\nWWW-Authenticate: Basic realm=\"repo\"\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
            );
        }
    });
    port
}

#[tokio::test]
async fn bad_inputs_are_structured_failures_that_leave_nothing() {
    if !have_git() {
        return;
    }
    let s = Scratch::new("bad");
    let origin = make_origin(&s.0, &[]);
    let host = Arc::new(HostState::default());
    let ext = Ext::start(&s, &host, &[]).await;

    // An unreachable repository: a path with nothing there, a port nobody listens on.
    let gone = s.0.join("no-such.git");
    let e = ext
        .acquire(
            "w-1",
            "work",
            json!({"repository": file_url(&gone)}),
            Value::Null,
        )
        .await
        .unwrap_err();
    assert_eq!(
        code_of(&e),
        ("resource_setup_failed".into(), "unreachable".into()),
        "{e}"
    );
    assert!(e.to_string().contains("no-such.git"), "{e}");
    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let e = ext
        .acquire(
            "w-1",
            "work",
            json!({"repository": format!("git://127.0.0.1:{closed}/r.git")}),
            Value::Null,
        )
        .await
        .unwrap_err();
    assert_eq!(
        code_of(&e),
        ("resource_setup_failed".into(), "unreachable".into()),
        "{e}"
    );

    // A repository that needs a credential the provider lacks: no prompt, a refusal.
    let port = refusing_http();
    let e = ext
        .acquire(
            "w-1",
            "work",
            json!({"repository": format!("http://127.0.0.1:{port}/r.git"), "timeout_s": 60}),
            Value::Null,
        )
        .await
        .unwrap_err();
    assert_eq!(
        code_of(&e),
        ("resource_setup_failed".into(), "credential".into()),
        "{e}"
    );

    // A branch that does not exist: as the base, and for a shared checkout.
    let config = json!({"repository": file_url(&origin), "base": "no-such-branch"});
    let e = ext
        .acquire("w-1", "work", config, Value::Null)
        .await
        .unwrap_err();
    assert_eq!(
        code_of(&e),
        ("resource_setup_failed".into(), "branch".into()),
        "{e}"
    );
    assert!(e.to_string().contains("no-such-branch"), "{e}");
    let config = json!({"repository": file_url(&origin)});
    let e = ext
        .acquire(
            "w-1",
            "shared",
            config.clone(),
            json!({"branch": "no-such-branch"}),
        )
        .await
        .unwrap_err();
    assert_eq!(
        code_of(&e),
        ("resource_setup_failed".into(), "branch".into()),
        "{e}"
    );

    // The disk floor: resource_exhausted, saying what to free.
    let e = ext
        .acquire(
            "w-1",
            "work",
            json!({"repository": file_url(&origin), "min_free_mb": 1u64 << 40}),
            Value::Null,
        )
        .await
        .unwrap_err();
    assert_eq!(code_of(&e).0, "resource_exhausted", "{e}");
    assert!(e.to_string().contains("min_free_mb"), "{e}");

    // Bad requests and configs are `invalid`.
    for (config, params) in [
        (
            json!({"repository": "ext::sh -c touch% /tmp/pwned"}),
            Value::Null,
        ),
        (
            json!({"repository": file_url(&origin), "surprise": 1}),
            Value::Null,
        ),
        (
            json!({"repository": file_url(&origin)}),
            json!({"branch": "--upload-pack=evil"}),
        ),
        (
            json!({"repository": file_url(&origin), "env": {"LD_PRELOAD": "x"}}),
            Value::Null,
        ),
    ] {
        let e = ext
            .acquire("w-1", "work", config, params)
            .await
            .unwrap_err();
        assert_eq!(code_of(&e).0, "invalid", "{e}");
    }

    // None of it left a workspace or a record.
    for mode in ["shared", "work", "fresh"] {
        assert_eq!(entries(&s.root(), mode), Vec::<String>::new(), "{mode}");
    }
    // And the good repository still works after all that.
    ext.acquire("w-1", "work", config, Value::Null)
        .await
        .unwrap();

    // validate: the config check and the mode it writes.
    let v = ext
        .call(
            "validate",
            json!({"kind": "resource", "type": "git", "config": {"repository": "ftp://x/y"}}),
        )
        .await
        .unwrap();
    assert_eq!(v["diagnostics"][0]["code"], "invalid_config");
    assert_eq!(v["diagnostics"][0]["path"], "/repository");
    assert_eq!(
        v["diagnostics"][0]["message"],
        "git resource config: /repository: scheme `ftp` is not https, http, ssh, git or file"
    );
    let v = ext
        .call("validate", json!({"kind": "resource_mode", "type": "git", "config": {"repository": "/r", "mode": "fresh"}}))
        .await
        .unwrap();
    assert_eq!(v["mode"], "fresh");
}

/// The environment that makes the `slow` filter of [`slow_origin`] sleep 3 s a file
/// while it checks out, so a test can kill the provider in the middle: a `git` first
/// on the provider's PATH that defines the filter with `-c`. The provider replaces
/// any `GIT_CONFIG_COUNT` in its git's environment; a `-c` is read after its
/// overrides, and drivers of the command scope are not blanked.
fn slow_env(s: &Scratch) -> Vec<(String, String)> {
    let bin = s.0.join("slow-bin");
    std::fs::create_dir_all(&bin).unwrap();
    let path = std::env::var("PATH").unwrap_or_default();
    let wrapper = bin.join("git");
    std::fs::write(
        &wrapper,
        format!("#!/bin/sh\nPATH='{path}' exec git -c filter.slow.smudge='sleep 3; cat' \"$@\"\n"),
    )
    .unwrap();
    std::fs::set_permissions(
        &wrapper,
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    vec![("PATH".into(), format!("{}:{path}", bin.display()))]
}

fn env_refs(env: &[(String, String)]) -> Vec<(&str, &str)> {
    env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect()
}

/// An origin with `n` files `f<i>.txt` under the `slow` filter.
fn slow_origin(s: &Scratch, n: usize) -> PathBuf {
    let files: Vec<(String, String)> = (1..=n)
        .map(|i| (format!("f{i}.txt"), format!("file {i}\n")))
        .collect();
    let mut extra: Vec<(&str, &str)> = files
        .iter()
        .map(|(n, t)| (n.as_str(), t.as_str()))
        .collect();
    extra.push((".gitattributes", "f*.txt filter=slow\n"));
    make_origin(&s.0, &extra)
}

/// Starts an acquisition whose checkout is slow (a smudge filter that sleeps, from the
/// provider's environment), waits until the worktree is half there, and SIGKILLs the
/// provider. Answers the half-made workspace's directory.
async fn kill_mid_acquisition(
    s: &Scratch,
    host: &Arc<HostState>,
    config: &Value,
    owner: &str,
) -> PathBuf {
    let before = entries(&s.root(), "work");
    let slow = slow_env(s);
    let mut ext = Ext::start(s, host, &env_refs(&slow)).await;
    let call = {
        let peer = ext.peer.clone();
        let params = json!({"type": "git", "owner": owner, "config": config});
        tokio::spawn(async move { peer.call("provider.acquire", &params).await })
    };
    let root = s.root();
    let half = within(async {
        loop {
            let found = entries(&root, "work")
                .into_iter()
                .find(|e| !e.ends_with(".json") && !e.ends_with(".tmp") && !before.contains(e));
            if let Some(name) = found {
                let key = std::fs::read_dir(root.join("work"))
                    .unwrap()
                    .next()
                    .unwrap()
                    .unwrap()
                    .path();
                let dir = key.join(&name);
                if dir.join("a.txt").exists() || dir.join(".git").exists() {
                    return dir;
                }
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    ext.kill();
    let answer = within(call).await.unwrap();
    assert!(
        answer.as_ref().is_err_and(|e| e.is_transport()),
        "the acquisition was cut off, not answered: {answer:?}"
    );
    let _ = ext.child.wait().await;
    // Half-made indeed: the record was never marked ready, a file is still missing.
    let record: Value =
        serde_json::from_slice(&std::fs::read(half.with_extension("json")).unwrap()).unwrap();
    assert_eq!(record["state"], "creating");
    assert!(
        !(1..=6).all(|i| half.join(format!("f{i}.txt")).exists()),
        "the checkout was not cut off"
    );
    half
}

/// The process groups of git commands the provider noted under `running/`.
fn noted_groups(root: &Path) -> Vec<String> {
    std::fs::read_dir(root.join("running"))
        .map(|d| {
            d.filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default()
}

/// The live processes of these process groups.
fn alive_in(groups: &[String]) -> usize {
    let mut alive = 0;
    for proc_entry in std::fs::read_dir("/proc").unwrap().filter_map(|e| e.ok()) {
        let Ok(stat) = std::fs::read_to_string(proc_entry.path().join("stat")) else {
            continue;
        };
        let Some((_, after)) = stat.rsplit_once(')') else {
            continue;
        };
        // Fields after the command: state, ppid, pgrp.
        let fields: Vec<&str> = after.split_whitespace().collect();
        if fields.len() > 2 && fields[0] != "Z" && groups.iter().any(|g| g == fields[2]) {
            alive += 1;
        }
    }
    alive
}

#[tokio::test]
async fn a_provider_killed_mid_acquisition_leaves_one_whole_worktree_after_restart() {
    if !have_git() {
        return;
    }
    let s = Scratch::new("crash");
    let origin = slow_origin(&s, 6);
    let host = Arc::new(HostState::default());
    // No spares: a spare made after the first acquisition would let the second
    // take it at once (a move and a branch switch, nothing for the slow filter),
    // answering before the kill.
    let config = json!({"repository": file_url(&origin), "spares": 0});

    // Warm the cache so the kill lands in the checkout, not the first fetch.
    {
        let ext = Ext::start(&s, &host, &[]).await;
        ext.acquire("warm", "fresh", config.clone(), Value::Null)
            .await
            .unwrap();
    }

    let check_whole = |dir: &Path| {
        for i in 1..=6 {
            assert_eq!(
                std::fs::read_to_string(dir.join(format!("f{i}.txt"))).unwrap(),
                format!("file {i}\n"),
                "f{i}.txt"
            );
        }
        assert_eq!(git(dir, &["status", "--porcelain"]), "", "clean");
    };

    // 1. Killed, restarted, then reconcile: the half-made worktree is removed; the next
    //    acquisition makes one whole worktree.
    let half = kill_mid_acquisition(&s, &host, &config, "w-1").await;
    // The killed provider's git died with it, but what that git had started (its own
    // git children, the filter) lives on in the group.
    let groups = noted_groups(&s.root());
    assert!(!groups.is_empty(), "the killed provider's git was noted");
    eprintln!(
        "processes left running by the killed provider: {}",
        alive_in(&groups)
    );
    let ext = Ext::start(&s, &host, &[]).await;
    let looked = ext
        .call(
            "provider.lookup",
            json!({"type": "git", "ref": format!("work/{}/{}",
            half.parent().unwrap().file_name().unwrap().to_str().unwrap(),
            half.file_name().unwrap().to_str().unwrap())}),
        )
        .await
        .unwrap_err();
    assert_eq!(
        code_of(&looked).0,
        "resource_not_found",
        "lookup never answers a half-made one"
    );
    let r = ext
        .call(
            "provider.reconcile",
            json!({"type": "git", "pass_id": "r-1"}),
        )
        .await
        .unwrap();
    let removed = r["removed"].as_array().unwrap();
    assert_eq!(removed.len(), 1, "{r}");
    assert_eq!(removed[0]["owner"], "w-1");
    assert!(removed[0]["reason"].as_str().unwrap().contains("half-made"));
    assert!(!half.exists());
    assert_eq!(
        worktrees(&s.root()),
        Vec::<String>::new(),
        "no worktree entry left"
    );
    assert_eq!(
        alive_in(&groups),
        0,
        "what the dead provider left running is ended"
    );
    let running: Vec<_> = std::fs::read_dir(s.root().join("running"))
        .map(|d| d.filter_map(|e| e.ok()).map(|e| e.file_name()).collect())
        .unwrap_or_default();
    assert!(
        running.is_empty(),
        "the dead provider's git is ended: {running:?}"
    );
    let w1 = ext
        .acquire("w-1", "work", config.clone(), Value::Null)
        .await
        .unwrap();
    assert_eq!(dir_of(&w1), half, "the same place, made whole");
    check_whole(&half);
    assert_eq!(worktrees(&s.root()).len(), 1);
    assert_eq!(
        entries(&s.root(), "work").len(),
        2,
        "one worktree and its record"
    );
    drop(ext);

    // 2. Killed, restarted, and acquired again with no reconcile: the acquisition
    //    itself repairs it.
    let half2 = kill_mid_acquisition(&s, &host, &config, "w-2").await;
    let ext = Ext::start(&s, &host, &[]).await;
    let w2 = ext
        .acquire("w-2", "work", config.clone(), Value::Null)
        .await
        .unwrap();
    assert_eq!(dir_of(&w2), half2);
    check_whole(&half2);
    assert_eq!(worktrees(&s.root()).len(), 2, "one worktree per owner");
    assert_eq!(entries(&s.root(), "work").len(), 4);
    // And w-1's is untouched by any of it.
    let again = ext
        .acquire("w-1", "work", config, Value::Null)
        .await
        .unwrap();
    assert_eq!(again["ref"], w1["ref"]);
    let r = ext
        .call(
            "provider.reconcile",
            json!({"type": "git", "pass_id": "r-2"}),
        )
        .await
        .unwrap();
    // Nothing of a workspace is left to repair (a spare worktree the killed
    // provider was making in the background may be).
    let repaired: Vec<&Value> = r["removed"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|n| !n["ref"].as_str().unwrap_or_default().starts_with("spare/"))
        .collect();
    assert!(repaired.is_empty(), "nothing left to repair: {r}");
    assert_eq!(
        r["resources"].as_array().unwrap().len(),
        3,
        "w-1, w-2 and the warm clone"
    );
}

#[tokio::test]
async fn sweep_removes_closed_clean_workspaces_and_keeps_dirty_ones() {
    if !have_git() {
        return;
    }
    let s = Scratch::new("sweep");
    let origin = make_origin(&s.0, &[]);
    let host = Arc::new(HostState::default());
    let ext = Ext::start(&s, &host, &[]).await;
    let config = json!({"repository": file_url(&origin)});
    let mut dirs = HashMap::new();
    for owner in ["w-1", "w-2", "w-3", "w-4"] {
        let w = ext
            .acquire(owner, "work", config.clone(), Value::Null)
            .await
            .unwrap();
        dirs.insert(owner, dir_of(&w));
    }
    std::fs::write(dirs["w-2"].join("a.txt"), "edited, not committed\n").unwrap();
    {
        let mut st = host.statuses.lock().unwrap();
        st.insert("w-1".into(), ("closed".into(), String::new()));
        st.insert("w-2".into(), ("closed".into(), String::new()));
        st.insert("w-3".into(), ("open".into(), String::new()));
        let just_now = protocol::time::format_rfc3339_ms(protocol::time::now_ms());
        st.insert("w-4".into(), ("closed".into(), just_now));
    }

    let r = ext
        .call(
            "provider.sweep",
            json!({"type": "git", "pass_id": "sweep-1", "grace_s": 3600}),
        )
        .await
        .unwrap();
    // Within the grace, w-4 stays; w-1 and w-2 closed long ago (no time given) stay too.
    assert_eq!(r["removed"], Value::Null, "{r}");
    let r = ext
        .call(
            "provider.sweep",
            json!({"type": "git", "pass_id": "sweep-2"}),
        )
        .await
        .unwrap();
    let names = |v: &Value| -> Vec<String> {
        let mut n: Vec<String> = v
            .as_array()
            .map(|a| {
                a.iter()
                    .map(|x| x["owner"].as_str().unwrap().to_string())
                    .collect()
            })
            .unwrap_or_default();
        n.sort();
        n
    };
    assert_eq!(names(&r["removed"]), ["w-1", "w-4"], "{r}");
    assert_eq!(names(&r["kept"]), ["w-2"], "{r}");
    assert!(r["kept"][0]["reason"]
        .as_str()
        .unwrap()
        .contains("uncommitted"));
    assert!(!r["pruned"].as_array().unwrap().is_empty());
    assert!(!dirs["w-1"].exists() && !dirs["w-4"].exists());
    assert!(dirs["w-2"].exists() && dirs["w-3"].exists());
    assert_eq!(
        std::fs::read_to_string(dirs["w-2"].join("a.txt")).unwrap(),
        "edited, not committed\n"
    );
    assert_eq!(
        worktrees(&s.root()).len(),
        2,
        "the cache's worktree entries are pruned"
    );
    let asked = host.asked.lock().unwrap().clone();
    assert_eq!(asked.last().unwrap()["pass_id"], "sweep-2");
    assert_eq!(asked.last().unwrap()["owners"].as_array().unwrap().len(), 4);

    // A removed workspace's owner acquiring again gets a new one on its kept branch.
    let w1 = ext
        .acquire("w-1", "work", config.clone(), Value::Null)
        .await
        .unwrap();
    assert_eq!(dir_of(&w1), dirs["w-1"]);

    // remove_dirty: the dirty one goes too.
    let r = ext
        .call(
            "provider.sweep",
            json!({"type": "git", "pass_id": "sweep-3", "remove_dirty": true}),
        )
        .await
        .unwrap();
    assert!(names(&r["removed"]).contains(&"w-2".to_string()), "{r}");
    assert!(!dirs["w-2"].exists());
    assert!(
        dirs["w-3"].exists(),
        "an open Work's workspace is never swept"
    );
}

/// `check.run` for `repositories` with `bindings` (name, resource config) in one scope
/// (a binding without a git resource among them).
async fn check_repositories(ext: &Ext, dir: &Path, bindings: &[(&str, Value)]) -> Value {
    let mut list: Vec<Value> = bindings
        .iter()
        .map(|(name, config)| {
            json!({"name": name, "executor": "shell",
            "resource": {"type": "git", "config": config}})
        })
        .collect();
    list.push(json!({"name": "plain", "executor": "shell"}));
    ext.call(
        "check.run",
        json!({"check": "repositories", "config": {"dir": dir.to_str().unwrap(),
            "scopes": [{"id": "acme", "bindings": list}]}}),
    )
    .await
    .unwrap()
}

#[tokio::test]
async fn the_repositories_check_names_unreachable_repositories_and_a_low_disk() {
    if !have_git() {
        return;
    }
    let s = Scratch::new("check");
    let origin = make_origin(&s.0, &[]);
    let host = Arc::new(HostState::default());
    let ext = Ext::start(&s, &host, &[]).await;
    let good = json!({"repository": file_url(&origin)});
    let gone = s.0.join("no-such.git");

    // Reachable: ok, with its branches counted; a relative path resolves against the
    // config view's directory, and two bindings of one repository ask it once.
    let r = check_repositories(
        &ext,
        &s.0,
        &[
            ("agent", good.clone()),
            (
                "reviewer",
                json!({"repository": "origin.git", "timeout_s": 30}),
            ),
        ],
    )
    .await;
    assert_eq!(r["status"], "ok", "{r}");
    let detail = r["detail"].as_str().unwrap();
    assert!(detail.contains("2 of 2 repositories reachable"), "{r}");
    assert!(detail.contains("MiB free"), "{r}");
    let items: Vec<&str> = r["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i.as_str().unwrap())
        .collect();
    assert!(
        items.iter().any(|i| i.starts_with("ok ")
            && i.contains("acme.agent")
            && i.contains("2 branch(es)")),
        "{r}"
    );

    // Unreachable: fail, naming the binding, the repository and git's own words.
    let r = check_repositories(
        &ext,
        &s.0,
        &[
            ("agent", good.clone()),
            ("broken", json!({"repository": file_url(&gone)})),
            ("typo", json!({"repository": "ftp://example.com/r.git"})),
        ],
    )
    .await;
    assert_eq!(r["status"], "fail", "{r}");
    assert_eq!(r["code"], "repository_unreachable", "{r}");
    let detail = r["detail"].as_str().unwrap();
    assert!(detail.contains("1 of 2 repositories reachable"), "{r}");
    assert!(detail.contains("acme.broken"), "{r}");
    assert!(detail.contains("no-such.git"), "{r}");
    assert!(
        detail.contains("does not appear to be a git repository"),
        "git's message: {r}"
    );
    assert!(
        detail.contains("acme.typo") && detail.contains("ftp"),
        "{r}"
    );
    assert!(!detail.contains("acme.agent"), "only the failures: {r}");

    // A repository nobody answers for: a port nobody listens on, within the bound.
    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let r = check_repositories(
        &ext,
        &s.0,
        &[(
            "daemon",
            json!({"repository": format!("git://127.0.0.1:{closed}/r.git")}),
        )],
    )
    .await;
    assert_eq!(r["code"], "repository_unreachable", "{r}");

    // The disk floor: the largest min_free_mb of the configs.
    let r = check_repositories(
        &ext,
        &s.0,
        &[
            ("agent", good.clone()),
            (
                "big",
                json!({"repository": file_url(&origin), "min_free_mb": 1u64 << 40}),
            ),
        ],
    )
    .await;
    assert_eq!(r["status"], "fail", "{r}");
    assert_eq!(r["code"], "disk_low", "{r}");
    assert!(r["detail"].as_str().unwrap().contains("min_free_mb"), "{r}");

    // No git binding at all (what doctor sends when it has no configuration view):
    // ok, saying so, with the disk against the default floor.
    let r = ext
        .call("check.run", json!({"check": "repositories", "config": {}}))
        .await
        .unwrap();
    assert_eq!(r["status"], "ok", "{r}");
    assert!(r["detail"]
        .as_str()
        .unwrap()
        .contains("no binding has a git resource"));
    let r = ext
        .call("check.run", json!({"check": "nope", "config": {}}))
        .await
        .unwrap();
    assert_eq!(r["code"], "unknown_check", "{r}");

    // The check is read-only: no cache, no workspace, no note.
    assert!(!s.root().exists(), "the check made nothing");
}

/// The whole spare worktrees of the (only) cache, and the half-made ones.
fn spares(root: &Path) -> (Vec<PathBuf>, Vec<PathBuf>) {
    let (mut whole, mut half) = (Vec::new(), Vec::new());
    for key in std::fs::read_dir(root.join("spare")).into_iter().flatten() {
        for e in std::fs::read_dir(key.unwrap().path()).unwrap() {
            let p = e.unwrap().path();
            if !p.is_dir() {
                continue;
            }
            let rec: Option<Value> = std::fs::read(p.with_extension("json"))
                .ok()
                .and_then(|b| serde_json::from_slice(&b).ok());
            match rec {
                Some(r) if r["state"] == "ready" => whole.push(p),
                _ => half.push(p),
            }
        }
    }
    (whole, half)
}

async fn a_whole_spare(root: &Path) -> PathBuf {
    within(async {
        loop {
            if let Some(p) = spares(root).0.into_iter().next() {
                return p;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
}

#[tokio::test]
async fn a_new_work_takes_the_spare_worktree_and_a_half_made_spare_is_removed() {
    if !have_git() {
        return;
    }
    let s = Scratch::new("spare");
    let origin = slow_origin(&s, 4);
    let host = Arc::new(HostState::default());
    let config = json!({"repository": file_url(&origin)});
    let root = s.root();

    // After the first acquisition the provider makes a spare in the background.
    let ext = Ext::start(&s, &host, &[]).await;
    let w1 = ext
        .acquire("w-1", "work", config.clone(), Value::Null)
        .await
        .unwrap();
    let spare = a_whole_spare(&root).await;
    // The next new Work's workspace is that spare, moved and on its own branch.
    let w2 = ext
        .acquire("w-2", "work", config.clone(), Value::Null)
        .await
        .unwrap();
    let d2 = dir_of(&w2);
    assert!(!spare.exists(), "the spare was taken: {}", spare.display());
    assert_eq!(
        git(&d2, &["rev-parse", "--abbrev-ref", "HEAD"]).trim(),
        w2["data"]["branch"].as_str().unwrap()
    );
    assert_eq!(git(&d2, &["status", "--porcelain"]), "", "clean");
    assert_eq!(
        std::fs::read_to_string(d2.join("f4.txt")).unwrap(),
        "file 4\n"
    );
    assert_eq!(w2["data"]["head"], w1["data"]["head"]);
    // It is a worktree of the cache like any other, and its commits are its own.
    assert_eq!(worktrees(&root).len(), 2);
    std::fs::write(d2.join("mine.txt"), "w-2's\n").unwrap();
    git(&d2, &["add", "mine.txt"]);
    git(&d2, &["commit", "-q", "-m", "w-2's change"]);
    assert!(!dir_of(&w1).join("mine.txt").exists());
    // The pool is topped up again, and an acquisition again answers the same.
    let next = a_whole_spare(&root).await;
    assert_ne!(next, spare);
    let again = ext
        .acquire("w-2", "work", config.clone(), Value::Null)
        .await
        .unwrap();
    assert_eq!(dir_of(&again), d2);
    // The base moved after the spare was made: the workspace made from it is on the
    // new commit, with its files.
    let src = s.0.join("src");
    std::fs::write(src.join("later.txt"), "later\n").unwrap();
    git(&src, &["add", "later.txt"]);
    git(&src, &["commit", "-q", "-m", "later"]);
    git(&src, &["push", "-q", origin.to_str().unwrap(), "main"]);
    let new_head = git(&src, &["rev-parse", "HEAD"]).trim().to_string();
    let w4 = ext
        .acquire("w-4", "work", config.clone(), Value::Null)
        .await
        .unwrap();
    let d4 = dir_of(&w4);
    assert!(!next.exists(), "the spare was taken");
    assert_eq!(w4["data"]["head"], new_head.as_str());
    assert_eq!(
        std::fs::read_to_string(d4.join("later.txt")).unwrap(),
        "later\n"
    );
    assert_eq!(git(&d4, &["status", "--porcelain"]), "", "clean");
    a_whole_spare(&root).await;
    drop(ext);

    // Killed while it makes a spare (the checkout is slow): the half-made spare is
    // removed by the next reconcile, worktree entry and all.
    let slow = slow_env(&s);
    let mut ext = Ext::start(&s, &host, &env_refs(&slow)).await;
    ext.acquire("w-3", "work", config.clone(), Value::Null)
        .await
        .unwrap();
    let half = within(async {
        loop {
            if let Some(p) = spares(&root).1.into_iter().next() {
                if p.join(".git").exists() {
                    return p;
                }
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    ext.kill();
    let _ = ext.child.wait().await;
    let ext = Ext::start(&s, &host, &[]).await;
    let r = ext
        .call(
            "provider.reconcile",
            json!({"type": "git", "pass_id": "r-spare"}),
        )
        .await
        .unwrap();
    let removed: Vec<&Value> = r["removed"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|n| n["reason"] == "a half-made spare worktree")
        .collect();
    assert_eq!(removed.len(), 1, "{r}");
    assert_eq!(removed[0]["dir"], half.to_string_lossy().as_ref());
    assert!(!half.exists());
    assert!(spares(&root).1.is_empty());
    let list = git(
        &root
            .join("cache")
            .read_dir()
            .unwrap()
            .next()
            .unwrap()
            .unwrap()
            .path(),
        &["worktree", "list", "--porcelain"],
    );
    assert!(
        !list.contains(half.to_string_lossy().as_ref()),
        "no worktree entry left for it: {list}"
    );
    assert_eq!(worktrees(&root).len(), 4, "w-1, w-2, w-3 and w-4 remain");
}

// ---------------------------------------------------------------------------------
// A hostile run's planted git config (issue 37): the provider runs git in a
// workspace as the service user, outside the sandbox; nothing the run wrote there
// may run. Each planted command touches a marker file outside the workspace.

/// Where the planted commands leave their marks: outside every workspace.
fn markers(s: &Scratch) -> PathBuf {
    let m = s.0.join("markers");
    std::fs::create_dir_all(&m).unwrap();
    m
}

/// The planted commands that ran, by the marks they left.
fn ran(markers: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(markers)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

/// `git config --file <file> <key> <value>` from `/`, so no repository's config is
/// read (and nothing planted runs) while planting.
fn set_config(file: &Path, key: &str, value: &str) {
    let out = std::process::Command::new("git")
        .args(["config", "--file"])
        .arg(file)
        .args([key, value])
        .current_dir("/")
        .envs(ISOLATE.iter().copied())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// git with an explicit repository, from `/` (for the test's own setup only).
fn git_in(git_dir: &Path, work_tree: &Path, args: &[&str]) -> String {
    let mut all: Vec<String> = vec![
        format!("--git-dir={}", git_dir.display()),
        format!("--work-tree={}", work_tree.display()),
    ];
    all.extend(args.iter().map(|a| a.to_string()));
    let refs: Vec<&str> = all.iter().map(String::as_str).collect();
    git(Path::new("/"), &refs)
}

/// An old modification time, so git must read a tracked file again (through its
/// clean filter) to tell whether it changed.
fn age(path: &Path) {
    let ok = std::process::Command::new("touch")
        .args(["-d", "2001-01-01 00:00"])
        .arg(path)
        .status()
        .unwrap()
        .success();
    assert!(ok);
}

fn executable(path: &Path, text: &str) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
    std::fs::set_permissions(path, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
}

/// Plants, as a hostile run would, in the workspace `dir` whose repository git would
/// find at `gitdir`: every command-running key in its config (and in a file it
/// includes), hooks where git looks and where the config says, a filter, diff and
/// merge driver named by `.gitattributes`, by `info/attributes` and by an attributes
/// file the config names, and a nested repository with its own fsmonitor. Each
/// command touches a marker named after it in `markers`. Then ages the tracked
/// files so a `status` must read them again.
fn plant(dir: &Path, gitdir: &Path, markers: &Path) {
    let mark = |what: &str| format!("touch {}/{what}; false", markers.display());
    let config = gitdir.join("config");
    let hooks = gitdir.join("evil-hooks");
    let more = gitdir.join("more.cfg");
    let attributes = gitdir.join("evil-attributes");
    for (key, value) in [
        ("core.fsmonitor", mark("fsmonitor")),
        ("core.pager", mark("pager")),
        ("pager.status", mark("pager-status")),
        ("core.editor", mark("editor")),
        ("sequence.editor", mark("sequence-editor")),
        ("core.askPass", mark("askpass")),
        ("core.sshCommand", mark("ssh-command")),
        ("core.gitProxy", mark("git-proxy")),
        ("core.hooksPath", hooks.display().to_string()),
        ("core.attributesFile", attributes.display().to_string()),
        ("filter.x.clean", mark("filter-x-clean")),
        ("filter.x.smudge", mark("filter-x-smudge")),
        ("filter.x.process", mark("filter-x-process")),
        ("filter.x.required", "true".into()),
        ("filter.y.clean", mark("filter-y-clean")),
        ("filter.y.required", "true".into()),
        ("diff.x.textconv", mark("diff-x-textconv")),
        ("diff.x.command", mark("diff-x-command")),
        ("diff.external", mark("diff-external")),
        ("merge.x.driver", mark("merge-x-driver")),
        (
            "credential.helper",
            format!("!{}", mark("credential-helper")),
        ),
        (
            "credential.https://example.com.helper",
            format!("!{}", mark("credential-url-helper")),
        ),
        ("status.submoduleSummary", "true".into()),
        ("submodule.recurse", "true".into()),
        ("include.path", more.display().to_string()),
    ] {
        set_config(&config, key, &value);
    }
    // A driver whose name holds `=`: blanking it with `-c filter.<name>.clean=` would
    // define `filter.q.clean` (which info/attributes names) as the command in its name.
    let injecting = format!(
        "filter.q.clean=touch {}/injected;.smudge",
        markers.display()
    );
    set_config(&config, &injecting, "cat");
    // The included file: another fsmonitor (it comes later, so it wins) and the
    // filter `z` that info/attributes names.
    set_config(&more, "core.fsmonitor", &mark("included-fsmonitor"));
    set_config(&more, "filter.z.clean", &mark("included-filter-z-clean"));
    set_config(
        &more,
        "filter.z.process",
        &mark("included-filter-z-process"),
    );
    set_config(&more, "filter.z.required", "true");
    for hook in [
        "post-index-change",
        "post-checkout",
        "reference-transaction",
        "pre-auto-gc",
        "post-rewrite",
    ] {
        for d in [gitdir.join("hooks"), hooks.clone()] {
            let m = format!("{}-{hook}", d.file_name().unwrap().to_string_lossy());
            executable(&d.join(hook), &format!("#!/bin/sh\n{}\n", mark(&m)));
        }
    }
    std::fs::write(dir.join(".gitattributes"), "* filter=x diff=x merge=x\n").unwrap();
    std::fs::create_dir_all(gitdir.join("info")).unwrap();
    std::fs::write(
        gitdir.join("info/attributes"),
        "a.txt filter=z\ndir/b.txt filter=q\n",
    )
    .unwrap();
    std::fs::write(&attributes, "dir/* filter=y\n").unwrap();
    // A nested repository of its own, with its own fsmonitor and filter.
    let sub = dir.join("sub");
    std::fs::create_dir_all(&sub).unwrap();
    git(&sub, &["init", "-q"]);
    std::fs::write(sub.join("s.txt"), "s\n").unwrap();
    git(&sub, &["add", "s.txt"]);
    git(&sub, &["commit", "-q", "-m", "s"]);
    std::fs::write(sub.join(".gitattributes"), "* filter=w\n").unwrap();
    set_config(
        &sub.join(".git/config"),
        "core.fsmonitor",
        &mark("sub-fsmonitor"),
    );
    set_config(
        &sub.join(".git/config"),
        "filter.w.clean",
        &mark("sub-filter-w"),
    );
    age(&sub.join("s.txt"));
    age(&dir.join("a.txt"));
    age(&dir.join("dir/b.txt"));
}

/// Hides every untracked path from `status` (the `.gitignore` ignores itself too), so
/// a planted workspace whose tracked files are unchanged is clean.
fn hide_untracked(dir: &Path) {
    std::fs::write(dir.join(".gitignore"), "*\n").unwrap();
}

fn reference_parts(v: &Value) -> (String, String) {
    let r = v["ref"].as_str().unwrap();
    let mut parts = r.split('/');
    let _mode = parts.next();
    (
        parts.next().unwrap().to_string(),
        parts.next().unwrap().to_string(),
    )
}

/// After planting, with both owners closed: the sweep removes the clean workspace
/// and keeps the dirty one; lookup, acquire again and reconcile answer the dirty one
/// as it is (its real HEAD); the sweep with remove_dirty removes it. No planted
/// command runs at any step.
async fn nothing_planted_runs(
    ext: &Ext,
    host: &HostState,
    mode: &str,
    config: &Value,
    clean: &Value,
    dirty: &Value,
    marks: &Path,
) {
    let none_ran = |step: &str| {
        let ran = ran(marks);
        assert!(
            ran.is_empty(),
            "planted commands ran outside the sandbox ({mode}, {step}): {ran:?}"
        );
    };
    let owners = |v: &Value| -> Vec<String> {
        v.as_array()
            .map(|a| {
                a.iter()
                    .map(|x| x["owner"].as_str().unwrap().to_string())
                    .collect()
            })
            .unwrap_or_default()
    };
    {
        let mut st = host.statuses.lock().unwrap();
        st.insert("w-clean".into(), ("closed".into(), String::new()));
        st.insert("w-dirty".into(), ("closed".into(), String::new()));
    }
    let r = ext
        .call(
            "provider.sweep",
            json!({"type": "git", "pass_id": "s-hostile-1"}),
        )
        .await
        .unwrap();
    none_ran("sweep");
    assert_eq!(owners(&r["removed"]), ["w-clean"], "{r}");
    assert_eq!(owners(&r["kept"]), ["w-dirty"], "{r}");
    assert!(
        r["kept"][0]["reason"]
            .as_str()
            .unwrap()
            .contains("uncommitted changes"),
        "{r}"
    );
    assert!(!dir_of(clean).exists());
    assert!(dir_of(dirty).join("a.txt").exists());

    let looked = ext
        .call(
            "provider.lookup",
            json!({"type": "git", "ref": dirty["ref"]}),
        )
        .await;
    none_ran("lookup");
    let looked = looked.unwrap();
    assert_eq!(looked["dir"], dirty["dir"]);
    assert_eq!(looked["data"]["head"], dirty["data"]["head"], "{looked}");
    let again = ext
        .acquire("w-dirty", mode, config.clone(), Value::Null)
        .await;
    none_ran("acquire again");
    let again = again.unwrap();
    assert_eq!(again["ref"], dirty["ref"]);
    assert_eq!(again["data"]["head"], dirty["data"]["head"]);
    let r = ext
        .call(
            "provider.reconcile",
            json!({"type": "git", "pass_id": "r-hostile"}),
        )
        .await
        .unwrap();
    none_ran("reconcile");
    assert_eq!(r["removed"], Value::Null, "it is whole: {r}");
    assert_eq!(r["resources"][0]["ref"], dirty["ref"], "{r}");
    assert_eq!(r["resources"][0]["data"]["head"], dirty["data"]["head"]);

    let r = ext
        .call(
            "provider.sweep",
            json!({"type": "git", "pass_id": "s-hostile-2", "remove_dirty": true}),
        )
        .await
        .unwrap();
    none_ran("sweep with remove_dirty");
    assert_eq!(owners(&r["removed"]), ["w-dirty"], "{r}");
    assert!(
        r["removed"][0]["reason"]
            .as_str()
            .unwrap()
            .contains("discarded"),
        "{r}"
    );
    assert!(!dir_of(dirty).exists());
}

/// A provider and what a hostile run's test needs around it, dropped provider
/// first (its scratch last); `None`, so the test passes vacuously, without git.
struct Hostile {
    ext: Ext,
    host: Arc<HostState>,
    marks: PathBuf,
    origin: PathBuf,
    s: Scratch,
}

impl Hostile {
    async fn start(name: &str) -> Option<Hostile> {
        if !have_git() {
            return None;
        }
        let s = Scratch::new(name);
        let origin = make_origin(&s.0, &[]);
        let marks = markers(&s);
        let host = Arc::new(HostState::default());
        let ext = Ext::start(&s, &host, &[]).await;
        Some(Hostile {
            ext,
            host,
            marks,
            origin,
            s,
        })
    }

    /// Two workspaces in `mode`: `w-clean`, and `w-dirty` whose tracked `a.txt` the
    /// run changed.
    async fn clean_and_dirty(&self, mode: &str, config: &Value) -> (Value, Value) {
        let clean = self
            .ext
            .acquire("w-clean", mode, config.clone(), Value::Null)
            .await
            .unwrap();
        let dirty = self
            .ext
            .acquire("w-dirty", mode, config.clone(), Value::Null)
            .await
            .unwrap();
        std::fs::write(dir_of(&dirty).join("a.txt"), "changed by the run\n").unwrap();
        (clean, dirty)
    }
}

/// What a run does to a worktree whose gitdir (the cache's) it cannot write: makes a
/// gitdir of its own in the workspace `dir` (`.evil`, the files tracked), points
/// `.git` at it and [`plant`]s there.
fn repoint_and_plant(dir: &Path, marks: &Path) {
    let evil = dir.join(".evil");
    git(dir, &["init", "-q", "--bare", evil.to_str().unwrap()]);
    set_config(&evil.join("config"), "core.bare", "false");
    git_in(&evil, dir, &["add", "a.txt", "dir/b.txt"]);
    std::fs::write(dir.join(".git"), format!("gitdir: {}\n", evil.display())).unwrap();
    plant(dir, &evil, marks);
}

#[tokio::test]
async fn planted_git_config_in_a_fresh_clone_never_runs_outside() {
    let Some(h) = Hostile::start("hostile-fresh").await else {
        return;
    };
    let config = json!({"repository": file_url(&h.origin), "mode": "fresh"});
    let (clean, dirty) = h.clean_and_dirty("fresh", &config).await;
    // The dirty one's submodule, which the run staged (a gitlink and its
    // .gitmodules, whose `update` is a command).
    let d = dir_of(&dirty);
    let sub_head = {
        let sub = h.s.0.join("subsrc");
        std::fs::create_dir_all(&sub).unwrap();
        git(&sub, &["init", "-q"]);
        git(&sub, &["commit", "-q", "--allow-empty", "-m", "s"]);
        git(&sub, &["rev-parse", "HEAD"]).trim().to_string()
    };
    git_in(
        &d.join(".git"),
        &d,
        &[
            "update-index",
            "--add",
            "--cacheinfo",
            &format!("160000,{sub_head},module"),
        ],
    );
    std::fs::write(
        d.join(".gitmodules"),
        format!(
            "[submodule \"module\"]\n\tpath = module\n\turl = ./module\n\tignore = none\n\tupdate = !touch {}/submodule-update\n",
            h.marks.display()
        ),
    )
    .unwrap();
    for w in [&clean, &dirty] {
        let dir = dir_of(w);
        plant(&dir, &dir.join(".git"), &h.marks);
    }
    hide_untracked(&dir_of(&clean));
    nothing_planted_runs(&h.ext, &h.host, "fresh", &config, &clean, &dirty, &h.marks).await;
}

#[tokio::test]
async fn planted_git_config_behind_a_repointed_worktree_git_file_never_runs_outside() {
    let Some(h) = Hostile::start("hostile-work").await else {
        return;
    };
    let config = json!({"repository": file_url(&h.origin), "spares": 0});
    let (clean, dirty) = h.clean_and_dirty("work", &config).await;
    for w in [&clean, &dirty] {
        // The worktree's own gitdir is the cache's, which the run cannot write: it
        // makes one of its own in the workspace, with the files tracked, and points
        // `.git` at it.
        repoint_and_plant(&dir_of(w), &h.marks);
    }
    hide_untracked(&dir_of(&clean));
    nothing_planted_runs(&h.ext, &h.host, "work", &config, &clean, &dirty, &h.marks).await;
    // The cache's worktree entries are gone with them.
    assert_eq!(worktrees(&h.s.root()), Vec::<String>::new());
}

#[tokio::test]
async fn a_workspace_whose_repository_the_provider_cannot_name_is_kept_and_nothing_runs() {
    let Some(h) = Hostile::start("hostile-unnamed").await else {
        return;
    };
    let config = json!({"repository": file_url(&h.origin), "spares": 0});
    // A fresh clone whose `.git` the run replaced by a symlink to a planted gitdir.
    let fresh = h
        .ext
        .acquire("w-fresh", "fresh", config.clone(), Value::Null)
        .await
        .unwrap();
    let fd = dir_of(&fresh);
    std::fs::rename(fd.join(".git"), fd.join(".evil")).unwrap();
    std::os::unix::fs::symlink(fd.join(".evil"), fd.join(".git")).unwrap();
    plant(&fd, &fd.join(".evil"), &h.marks);
    // A worktree whose entry in the cache is gone (pruned), its `.git` file pointing
    // at a planted gitdir: nothing names its repository but that file.
    let work = h
        .ext
        .acquire("w-work", "work", config.clone(), Value::Null)
        .await
        .unwrap();
    let wd = dir_of(&work);
    let (key, slug) = reference_parts(&work);
    let entry =
        h.s.root()
            .join("cache")
            .join(format!("{key}.git"))
            .join("worktrees")
            .join(&slug);
    assert!(entry.join("gitdir").is_file(), "{}", entry.display());
    std::fs::remove_dir_all(&entry).unwrap();
    repoint_and_plant(&wd, &h.marks);
    // A fresh clone whose config git cannot read (so cannot be listed): planted, then
    // broken.
    let broken = h
        .ext
        .acquire("w-broken", "fresh", config.clone(), Value::Null)
        .await
        .unwrap();
    let bd = dir_of(&broken);
    plant(&bd, &bd.join(".git"), &h.marks);
    let mut text = std::fs::read_to_string(bd.join(".git/config")).unwrap();
    text.push_str("[core\n\tbroken\n");
    std::fs::write(bd.join(".git/config"), text).unwrap();

    {
        let mut st = h.host.statuses.lock().unwrap();
        for owner in ["w-fresh", "w-work", "w-broken"] {
            st.insert(owner.into(), ("closed".into(), String::new()));
        }
    }
    for remove_dirty in [false, true] {
        let r = h
            .ext
            .call(
                "provider.sweep",
                json!({"type": "git", "pass_id": format!("s-{remove_dirty}"),
                       "remove_dirty": remove_dirty}),
            )
            .await
            .unwrap();
        assert_eq!(
            ran(&h.marks),
            Vec::<String>::new(),
            "remove_dirty {remove_dirty}"
        );
        assert_eq!(r["removed"], Value::Null, "{r}");
        let kept = r["kept"].as_array().unwrap();
        assert_eq!(kept.len(), 3, "{r}");
        for k in kept {
            let reason = k["reason"].as_str().unwrap();
            match k["owner"].as_str().unwrap() {
                "w-fresh" => assert!(reason.contains("is not a directory"), "{reason}"),
                "w-work" => assert!(reason.contains("no worktree entry"), "{reason}"),
                _ => assert!(reason.contains("cannot be listed"), "{reason}"),
            }
        }
        assert!(fd.exists() && wd.exists() && bd.exists());
    }
    for w in [&fresh, &work, &broken] {
        let e = h
            .ext
            .call("provider.lookup", json!({"type": "git", "ref": w["ref"]}))
            .await
            .unwrap_err();
        assert_eq!(code_of(&e).0, "resource_not_found");
    }
    assert_eq!(ran(&h.marks), Vec::<String>::new(), "lookup");
    // The next reconcile removes them as broken, running nothing there either.
    let r = h
        .ext
        .call(
            "provider.reconcile",
            json!({"type": "git", "pass_id": "r-1"}),
        )
        .await
        .unwrap();
    assert_eq!(r["removed"].as_array().unwrap().len(), 3, "{r}");
    assert!(!fd.exists() && !wd.exists() && !bd.exists());
    assert_eq!(ran(&h.marks), Vec::<String>::new());
}
