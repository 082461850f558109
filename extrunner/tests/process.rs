#![allow(clippy::unwrap_used)]
//! The supervised extension process, against a real child process
//! (`oc-test-extension`), real pipes and real signals.

use extrunner::process::{
    group_members, truncation_marker, ProcessExit, ProcessSpec, Refusal, State, Supervisor,
    SupervisorOptions,
};
use serde_json::{json, Value};
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::Duration;

const BIN: &str = env!("CARGO_BIN_EXE_oc-test-extension");
const MANIFEST: &str = include_str!("../src/bin/testext.json");
/// Only against hangs: nothing here measures time.
const HANG: Duration = Duration::from_secs(60);

/// A scratch directory, removed when the test ends.
struct Scratch(PathBuf);

impl std::ops::Deref for Scratch {
    type Target = Path;
    fn deref(&self) -> &Path {
        &self.0
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn scratch(test: &str) -> Scratch {
    let dir = std::env::temp_dir().join(format!("oc-extrunner-{test}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    Scratch(dir)
}

fn path_var() -> String {
    std::env::var("PATH").unwrap_or_else(|_| "/usr/bin:/bin".into())
}

/// A spec for the test extension in `mode`, with a controlled base environment:
/// PATH, the mode and whatever `extra` adds; the mode is granted.
fn spec(dir: &Path, mode: &str, extra: &[(&str, &str)]) -> ProcessSpec {
    let mut s = ProcessSpec::new(
        "testext",
        dir,
        vec![BIN.to_string()],
        serde_json::from_str(MANIFEST).unwrap(),
        &dir.join("state"),
    );
    s.base_env = vec![
        ("PATH".into(), path_var()),
        ("OC_TEST_MODE".into(), mode.into()),
    ];
    s.base_env
        .extend(extra.iter().map(|(k, v)| (k.to_string(), v.to_string())));
    s.grants = vec!["OC_TEST_MODE".into()];
    s
}

fn opts() -> SupervisorOptions {
    SupervisorOptions {
        backoff_initial: Duration::from_millis(10),
        backoff_max: Duration::from_millis(100),
        grace: Duration::from_millis(300),
        ..SupervisorOptions::default()
    }
}

/// Wait until `cond` holds for the supervisor, re-checked on every state change.
async fn wait_until(sup: &Supervisor, what: &str, cond: impl Fn(&Supervisor) -> bool) {
    let mut rx = sup.subscribe();
    let wait = async {
        loop {
            rx.borrow_and_update();
            if cond(sup) {
                return;
            }
            rx.changed().await.unwrap();
        }
    };
    tokio::time::timeout(HANG, wait)
        .await
        .unwrap_or_else(|_| panic!("timed out waiting for {what}; state {:?}", sup.state()));
}

async fn running(sup: &Supervisor) -> protocol::Peer {
    tokio::time::timeout(HANG, sup.wait_running())
        .await
        .expect("timed out waiting for Running")
        .unwrap_or_else(|state| panic!("never ran: {state:?}"))
}

/// A process is gone when /proc has no entry for it or it is a zombie (its new
/// parent may never reap it in a container).
fn alive(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => {
            let state = stat
                .rfind(')')
                .and_then(|i| stat[i + 1..].split_whitespace().next())
                .unwrap_or("");
            state != "Z" && state != "X"
        }
        Err(_) => false,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn handshake_then_echo_round_trips() {
    let dir = scratch("echo");
    let sup = Supervisor::start(spec(&dir, "serve", &[]), opts());
    let peer = running(&sup).await;
    let answer = peer
        .call("testext.echo", &json!({"hello": [1, 2, 3]}))
        .await
        .unwrap();
    assert_eq!(answer, json!({"hello": [1, 2, 3]}));
    assert_eq!(sup.restarts(), 0);
    sup.stop().await;
    assert_eq!(sup.state(), State::Stopped);
    assert!(sup.peer().is_none());
    // Stopped through shutdown and EOF on stdin: a clean exit.
    assert_eq!(sup.last_exit(), Some(ProcessExit::Code(0)));
    assert!(dir.join("state/extensions/testext").is_dir());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_common_version_is_refused_and_not_restarted() {
    let dir = scratch("version");
    let options = SupervisorOptions {
        host_versions: vec![99],
        ..opts()
    };
    let sup = Supervisor::start(spec(&dir, "serve", &[]), options);
    let state = tokio::time::timeout(HANG, sup.wait_running())
        .await
        .unwrap()
        .unwrap_err();
    match state {
        State::Refused {
            reason: Refusal::Version { ours, .. },
        } => assert_eq!(ours, vec![99]),
        other => panic!("expected a version refusal, got {other:?}"),
    }
    assert_eq!(sup.restarts(), 0);
    sup.stop().await;
    // Refused stays refused: the supervision ended without another start.
    assert!(matches!(sup.state(), State::Refused { .. }));
    assert_eq!(sup.restarts(), 0);
    let pid = sup.pid().unwrap();
    assert!(group_members(pid).is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn manifest_mismatch_is_refused_and_not_restarted() {
    let dir = scratch("manifest");
    let sup = Supervisor::start(spec(&dir, "wrong_manifest", &[]), opts());
    let state = tokio::time::timeout(HANG, sup.wait_running())
        .await
        .unwrap()
        .unwrap_err();
    match state {
        State::Refused {
            reason: Refusal::ManifestMismatch { detail },
        } => assert!(detail.contains("version"), "{detail}"),
        other => panic!("expected a manifest refusal, got {other:?}"),
    }
    sup.stop().await;
    assert_eq!(sup.restarts(), 0);
    assert!(matches!(
        sup.state(),
        State::Refused {
            reason: Refusal::ManifestMismatch { .. }
        }
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_on_start_is_restarted_with_backoff_until_it_serves() {
    let dir = scratch("crash-on-start");
    let flip = dir.join("flip");
    let flip_s = flip.to_str().unwrap().to_string();
    let mut s = spec(&dir, "crash_on_start", &[("OC_TEST_FLIP_FILE", &flip_s)]);
    s.grants.push("OC_TEST_FLIP_FILE".into());
    let sup = Supervisor::start(s, opts());
    let mut rx = sup.subscribe();
    let saw_backoff = tokio::spawn(async move {
        loop {
            if matches!(*rx.borrow_and_update(), State::Backoff { .. }) {
                return true;
            }
            if rx.changed().await.is_err() {
                return false;
            }
        }
    });
    wait_until(&sup, "two restarts", |s| s.restarts() >= 2).await;
    assert!(tokio::time::timeout(HANG, saw_backoff)
        .await
        .unwrap()
        .unwrap());
    // How it ended comes from its wait status.
    assert_eq!(sup.last_exit(), Some(ProcessExit::Code(3)));
    assert!(sup.peer().is_none() || sup.state() == State::Running);

    std::fs::write(&flip, b"serve now").unwrap();
    let peer = running(&sup).await;
    assert_eq!(
        peer.call("testext.echo", &json!("up")).await.unwrap(),
        json!("up")
    );
    sup.stop().await;
    assert_eq!(sup.state(), State::Stopped);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_mid_call_is_a_transport_error_and_it_serves_again() {
    let dir = scratch("crash-mid-call");
    let sup = Supervisor::start(spec(&dir, "serve", &[]), opts());
    let peer = running(&sup).await;
    let first: Value = peer.call("testext.pid", &json!({})).await.unwrap();
    let err = peer.call("testext.crash", &json!({})).await.unwrap_err();
    assert!(err.is_transport(), "{err}");

    wait_until(&sup, "a restart that runs", |s| {
        s.restarts() >= 1 && s.state() == State::Running && s.peer().is_some()
    })
    .await;
    assert_eq!(sup.last_exit(), Some(ProcessExit::Code(3)));
    let peer = running(&sup).await;
    assert_eq!(
        peer.call("testext.echo", &json!({"again": true}))
            .await
            .unwrap(),
        json!({"again": true})
    );
    let second: Value = peer.call("testext.pid", &json!({})).await.unwrap();
    assert_ne!(first["pid"], second["pid"]);
    sup.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stop_leaves_no_process_of_the_group_alive() {
    let dir = scratch("stubborn");
    let sup = Supervisor::start(spec(&dir, "fork_stubborn_child", &[]), opts());
    let peer = running(&sup).await;
    let pids: Value = peer.call("testext.pid", &json!({})).await.unwrap();
    let pid = i32::try_from(pids["pid"].as_i64().unwrap()).unwrap();
    let pgid = i32::try_from(pids["pgid"].as_i64().unwrap()).unwrap();
    let child = i32::try_from(pids["child"].as_i64().unwrap()).unwrap();
    // Its own process group, led by the extension.
    assert_eq!(pgid, pid);
    assert_eq!(sup.pid(), Some(pid));
    assert!(alive(pid));
    assert!(alive(child));
    assert!(group_members(pgid).contains(&child));

    tokio::time::timeout(HANG, sup.stop()).await.unwrap();
    assert_eq!(sup.state(), State::Stopped);
    assert!(!alive(pid), "the extension survived its stop");
    assert!(
        !alive(child),
        "the grandchild ignoring SIGTERM survived the stop"
    );
    assert_eq!(group_members(pgid), Vec::<i32>::new());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_extension_sees_only_the_baseline_and_its_grants() {
    let dir = scratch("env");
    let mut s = spec(
        &dir,
        "serve",
        &[
            ("HOME", "/home/oc"),
            ("LANG", "C.UTF-8"),
            ("LC_ALL", "C"),
            ("LC_TIME", "C"),
            ("TZ", "UTC"),
            ("OC_SECRET_TOKEN", "hunter2"),
            ("GITHUB_TOKEN", "ghp_secret"),
            ("NOTIFY_SOCKET", "/run/systemd/notify"),
            ("LISTEN_FDS", "1"),
            ("OPEN_CONDUIT_STATE", "/var/lib/open-conduit"),
            ("HTTPS_PROXY", "http://proxy:3128"),
        ],
    );
    // Granting the suite's own plumbing passes nothing; a granted name that is
    // not set passes nothing either.
    s.grants.extend(
        [
            "HTTPS_PROXY",
            "NOTIFY_SOCKET",
            "OPEN_CONDUIT_STATE",
            "NOT_SET",
        ]
        .map(String::from),
    );
    let sup = Supervisor::start(s, opts());
    let peer = running(&sup).await;
    let env: Value = peer.call("testext.env", &json!({})).await.unwrap();
    let keys: BTreeSet<&str> = env
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    let expected: BTreeSet<&str> = [
        "PATH",
        "HOME",
        "LANG",
        "LC_ALL",
        "LC_TIME",
        "TZ",
        "OC_TEST_MODE",
        "HTTPS_PROXY",
    ]
    .into_iter()
    .collect();
    assert_eq!(keys, expected);
    assert_eq!(env["HTTPS_PROXY"], json!("http://proxy:3128"));
    assert_eq!(env["HOME"], json!("/home/oc"));
    sup.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stderr_goes_to_a_bounded_log_truncated_with_a_marker() {
    let dir = scratch("log");
    let cap = 4096;
    let options = SupervisorOptions {
        log_cap: cap,
        ..opts()
    };
    let s = spec(&dir, "serve", &[]);
    let log = s.log_path.clone();
    assert_eq!(log, dir.join("state/logs/extensions/testext.log"));
    let sup = Supervisor::start(s, options);
    let peer = running(&sup).await;
    let marker = truncation_marker(cap);

    peer.call(
        "testext.stderr",
        &json!({"lines": 1, "text": "first words"}),
    )
    .await
    .unwrap();
    let wait_log = |needle: String| {
        let log = log.clone();
        async move {
            loop {
                let text = std::fs::read_to_string(&log).unwrap_or_default();
                if text.contains(&needle) {
                    return text;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    };
    let text = tokio::time::timeout(HANG, wait_log("first words".into()))
        .await
        .unwrap();
    assert!(!text.contains(&marker));

    // 100 lines of 100 bytes: well past the 4 KiB cap.
    let line = "x".repeat(99);
    peer.call("testext.stderr", &json!({"lines": 100, "text": line}))
        .await
        .unwrap();
    peer.call("testext.stderr", &json!({"lines": 1, "text": "last words"}))
        .await
        .unwrap();
    let text = tokio::time::timeout(HANG, wait_log("last words".into()))
        .await
        .unwrap();
    assert!(
        text.starts_with(&format!("{marker}\n")),
        "{}",
        &text[..text.len().min(200)]
    );
    assert!(!text.contains("first words"));
    assert!(text.len() as u64 <= cap, "{} bytes", text.len());
    sup.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_extension_that_hangs_up_but_runs_on_is_stopped_not_taken_for_dead() {
    let dir = scratch("hang-up");
    let sup = Supervisor::start(spec(&dir, "serve", &[]), opts());
    let peer = running(&sup).await;
    let first: Value = peer.call("testext.pid", &json!({})).await.unwrap();
    let first_pid = i32::try_from(first["pid"].as_i64().unwrap()).unwrap();
    // It closes its stdout and never answers: the call fails with the connection.
    let err = peer.call("testext.hang_up", &json!({})).await.unwrap_err();
    assert!(err.is_transport(), "{err}");

    wait_until(&sup, "a restart that runs", |s| {
        s.restarts() >= 1 && s.state() == State::Running && s.peer().is_some()
    })
    .await;
    // EOF was not its death: it ran on until the group was signalled, and its
    // end is read from its wait status.
    assert_eq!(
        sup.last_exit(),
        Some(ProcessExit::Signal(
            nix::sys::signal::Signal::SIGTERM as i32
        ))
    );
    assert!(!alive(first_pid));
    let peer = running(&sup).await;
    assert_eq!(
        peer.call("testext.echo", &json!(1)).await.unwrap(),
        json!(1)
    );
    sup.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_version_the_host_does_not_speak_is_refused() {
    let dir = scratch("foreign-version");
    let sup = Supervisor::start(spec(&dir, "foreign_version", &[]), opts());
    let state = tokio::time::timeout(HANG, sup.wait_running())
        .await
        .unwrap()
        .unwrap_err();
    match state {
        State::Refused {
            reason: Refusal::Version { detail, .. },
        } => assert!(detail.contains('7'), "{detail}"),
        other => panic!("expected a version refusal, got {other:?}"),
    }
    sup.stop().await;
    assert_eq!(sup.restarts(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_start_timeout_is_a_crash_not_a_refusal() {
    let dir = scratch("silent");
    let options = SupervisorOptions {
        start_timeout: Duration::from_millis(200),
        ..opts()
    };
    let sup = Supervisor::start(spec(&dir, "silent", &[]), options);
    wait_until(&sup, "two restarts", |s| s.restarts() >= 2).await;
    assert!(!matches!(sup.state(), State::Refused { .. }));
    // It never exited on its own: the stop after the timeout ended it.
    assert_eq!(
        sup.last_exit(),
        Some(ProcessExit::Signal(
            nix::sys::signal::Signal::SIGTERM as i32
        ))
    );
    let pid = sup.pid().unwrap();
    tokio::time::timeout(HANG, sup.stop()).await.unwrap();
    assert_eq!(sup.state(), State::Stopped);
    assert!(group_members(pid).is_empty());
}

/// Layout versions in memory; `get` fails while `unavailable`.
#[derive(Default)]
struct MemLayouts {
    stored: std::sync::Mutex<std::collections::HashMap<String, u32>>,
    sets: std::sync::Mutex<Vec<(String, u32)>>,
    unavailable: bool,
}

impl extrunner::process::KvLayouts for MemLayouts {
    fn get<'a>(&'a self, name: &'a str) -> extrunner::process::LayoutFuture<'a, u32> {
        let v = self.stored.lock().unwrap().get(name).copied().unwrap_or(0);
        let unavailable = self.unavailable;
        Box::pin(async move {
            if unavailable {
                Err("storaged is unavailable".to_string())
            } else {
                Ok(v)
            }
        })
    }
    fn set<'a>(&'a self, name: &'a str, version: u32) -> extrunner::process::LayoutFuture<'a, ()> {
        self.sets.lock().unwrap().push((name.to_string(), version));
        self.stored
            .lock()
            .unwrap()
            .insert(name.to_string(), version);
        Box::pin(async { Ok(()) })
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_older_kv_version_is_refused_before_the_process_starts() {
    let dir = scratch("kvdowngrade");
    let layouts = std::sync::Arc::new(MemLayouts::default());
    layouts.stored.lock().unwrap().insert("testext".into(), 2);
    let options = SupervisorOptions {
        kv_layouts: Some(layouts.clone()),
        ..opts()
    };
    let sup = Supervisor::start(spec(&dir, "serve", &[]), options);
    let state = tokio::time::timeout(HANG, sup.wait_running())
        .await
        .unwrap()
        .unwrap_err();
    assert_eq!(
        state,
        State::Refused {
            reason: Refusal::KvDowngrade {
                stored: 2,
                declared: 0
            }
        }
    );
    assert!(state_reason(&sup).contains("kv_downgrade"));
    assert_eq!(sup.restarts(), 0);
    assert_eq!(sup.pid(), None, "the process never started");
    assert!(layouts.sets.lock().unwrap().is_empty());
    sup.stop().await;
}

fn state_reason(sup: &Supervisor) -> String {
    match sup.state() {
        State::Refused { reason } => reason.to_string(),
        other => format!("{other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_current_layout_runs_and_records_nothing() {
    let dir = scratch("kvcurrent");
    let layouts = std::sync::Arc::new(MemLayouts::default());
    let options = SupervisorOptions {
        kv_layouts: Some(layouts.clone()),
        ..opts()
    };
    let sup = Supervisor::start(spec(&dir, "serve", &[]), options);
    running(&sup).await;
    assert!(layouts.sets.lock().unwrap().is_empty());
    sup.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreadable_layout_is_retried_not_refused() {
    let dir = scratch("kvunavailable");
    let layouts = std::sync::Arc::new(MemLayouts {
        unavailable: true,
        ..MemLayouts::default()
    });
    let options = SupervisorOptions {
        kv_layouts: Some(layouts),
        ..opts()
    };
    let sup = Supervisor::start(spec(&dir, "serve", &[]), options);
    wait_until(&sup, "a retry", |s| s.restarts() >= 2).await;
    assert!(!matches!(sup.state(), State::Refused { .. }));
    assert_eq!(sup.pid(), None, "never started without its layout");
    sup.stop().await;
}

/// A string message of `bytes` bytes as `testext.echo` params.
fn big_params(bytes: usize) -> Value {
    json!({ "blob": "x".repeat(bytes) })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_sdk_extension_takes_messages_over_16_mib_and_one_that_did_not_say_so_does_not() {
    let twenty_mib = 20 * 1024 * 1024;

    // On the SDK: it said in its initialize answer that it reads 64 MiB, and the host
    // said the same; 20 MiB crosses both ways.
    let dir = scratch("large-sdk");
    let sup = Supervisor::start(spec(&dir, "serve", &[]), opts());
    let peer = running(&sup).await;
    assert_eq!(peer.max_send_bytes(), protocol::LARGE_MESSAGE_BYTES);
    let answer = peer
        .call("testext.echo", &big_params(twenty_mib))
        .await
        .unwrap();
    assert_eq!(answer["blob"].as_str().map(str::len), Some(twenty_mib));
    sup.stop().await;

    // Not on the SDK and silent about it: the spec's 16 MiB. A larger request is
    // refused unsent with an error naming the limit, and the extension serves on.
    let dir = scratch("large-spec");
    let sup = Supervisor::start(spec(&dir, "spec_bound", &[]), opts());
    let peer = running(&sup).await;
    assert_eq!(peer.max_send_bytes(), protocol::MAX_MESSAGE_BYTES);
    let e = peer
        .call("testext.echo", &big_params(twenty_mib))
        .await
        .unwrap_err();
    match &e {
        protocol::CallError::TooLarge { limit, .. } => {
            assert_eq!(*limit, protocol::MAX_MESSAGE_BYTES)
        }
        other => panic!("expected TooLarge, got {other:?}"),
    }
    assert!(e.to_string().contains("16777216"), "{e}");
    let small = peer.call("testext.echo", &json!({"still": "here"})).await;
    assert_eq!(small.unwrap(), json!({"still": "here"}));
    assert_eq!(sup.restarts(), 0);
    sup.stop().await;
}
