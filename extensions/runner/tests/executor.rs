#![allow(clippy::unwrap_used)]
//! The real `oc-runner-extension` binary as a child process, driven over its
//! stdin and stdout as the host drives it, with the host's callbacks
//! (`execution.persist_recovery`, `artifact.*`) served and recorded here. Every
//! job is a real process group; the checks read the run directory and `/proc`.
//! Nothing here measures time: the timeouts only guard against hangs.

use protocol::wire::{ExecutorStopResult, ExecutorWaitResult, Outcome};
use protocol::{connect, CallError, FnHandler, Options, Peer, Request, RpcError};
use serde_json::{json, Value};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::process::{Child, Command};

const EXE: &str = env!("CARGO_BIN_EXE_oc-runner-extension");
/// Only against hangs: nothing here measures time.
const HANG: Duration = Duration::from_secs(60);

async fn within<F: std::future::Future>(f: F) -> F::Output {
    tokio::time::timeout(HANG, f).await.expect("hung")
}

/// Polls until `check` holds (bounded by [`HANG`]).
async fn until(what: &str, mut check: impl FnMut() -> bool) {
    let waited = tokio::time::timeout(HANG, async {
        while !check() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    assert!(waited.is_ok(), "hung waiting for {what}");
}

/// A scratch directory: the extension's working directory, so its runs live
/// in `<scratch>/runs/<execution_id>`.
struct Scratch(PathBuf);

impl Scratch {
    fn new(test: &str) -> Scratch {
        let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
            .join(format!("oc-runner-{test}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Scratch(dir)
    }
    fn run_dir(&self, id: &str) -> PathBuf {
        self.0.join("runs").join(id)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[derive(Debug, Clone, Default)]
struct Artifact {
    execution_id: String,
    name: String,
    bytes: Vec<u8>,
    committed: bool,
}

/// What the host side saw.
#[derive(Default)]
struct Recorded {
    /// Every persist_recovery that arrived (refused ones too).
    persists: Mutex<Vec<Value>>,
    /// How many persists were answered (a moment after they arrive).
    answered: AtomicUsize,
    refuse_persist: AtomicBool,
    artifacts: Mutex<HashMap<String, Artifact>>,
    next: AtomicUsize,
}

impl Recorded {
    fn persists_of(&self, id: &str) -> Vec<Value> {
        let all = self.persists.lock().unwrap();
        all.iter()
            .filter(|p| p["execution_id"] == id)
            .cloned()
            .collect()
    }
    fn artifact(&self, id: &str) -> Artifact {
        self.artifacts.lock().unwrap().get(id).cloned().unwrap()
    }
}

async fn serve_host(rec: Arc<Recorded>, request: Request) -> Result<Value, RpcError> {
    let p = request.params_value()?;
    match request.method.as_str() {
        "execution.persist_recovery" => {
            rec.persists.lock().unwrap().push(p.clone());
            // Answer late: a run that did not wait for this answer would show.
            tokio::time::sleep(Duration::from_millis(300)).await;
            rec.answered.fetch_add(1, Ordering::SeqCst);
            if rec.refuse_persist.load(Ordering::SeqCst) {
                return Err(RpcError::new(
                    protocol::Code::Conflict,
                    "the run is closed (test)",
                ));
            }
            Ok(json!({}))
        }
        "artifact.create" => {
            let id = format!("art-{}", rec.next.fetch_add(1, Ordering::SeqCst));
            rec.artifacts.lock().unwrap().insert(
                id.clone(),
                Artifact {
                    execution_id: p["execution_id"].as_str().unwrap_or("").into(),
                    name: p["name"].as_str().unwrap_or("").into(),
                    ..Artifact::default()
                },
            );
            Ok(json!({"artifact_id": id}))
        }
        "artifact.write" => {
            let w: protocol::wire::ArtifactWriteParams = request.params()?;
            let mut all = rec.artifacts.lock().unwrap();
            let a = all.get_mut(&w.artifact_id).unwrap();
            assert_eq!(w.offset, a.bytes.len() as u64);
            a.bytes.extend_from_slice(&w.data);
            Ok(json!({"size": a.bytes.len()}))
        }
        "artifact.commit" => {
            let id = p["artifact_id"].as_str().unwrap().to_string();
            let mut all = rec.artifacts.lock().unwrap();
            let a = all.get_mut(&id).unwrap();
            a.committed = true;
            Ok(json!({"artifact_id": id, "size": a.bytes.len()}))
        }
        other => Err(RpcError::method_not_found(other)),
    }
}

struct Ext {
    _child: Child,
    peer: Peer,
}

impl Ext {
    /// Starts the extension in `cwd` and initializes it.
    async fn start(rec: &Arc<Recorded>, cwd: &Path) -> Ext {
        Ext::start_ignoring(rec, cwd, false).await
    }

    /// The extension, started with SIGINT ignored when `ignore_sigint` (as `nohup` or
    /// `cmd &` in a script would).
    async fn start_ignoring(rec: &Arc<Recorded>, cwd: &Path, ignore_sigint: bool) -> Ext {
        let mut cmd = Command::new(EXE);
        if ignore_sigint {
            // SAFETY: only sigaction between fork and exec.
            unsafe {
                cmd.pre_exec(|| {
                    nix::sys::signal::signal(
                        nix::sys::signal::Signal::SIGINT,
                        nix::sys::signal::SigHandler::SigIgn,
                    )
                    .map(|_| ())
                    .map_err(std::io::Error::from)
                });
            }
        }
        let mut child = cmd
            .current_dir(cwd)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .process_group(0)
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let stdin = child.stdin.take().unwrap();
        let stdout = child.stdout.take().unwrap();
        let host_rec = Arc::clone(rec);
        let host = FnHandler(move |request: Request| serve_host(Arc::clone(&host_rec), request));
        let peer = connect(stdout, stdin, host, Options::named("runner extension"));
        let init = within(peer.call(
            "initialize",
            &json!({"protocol_versions": [1], "host": {"name": "test-host", "version": "0"}}),
        ))
        .await
        .unwrap();
        assert_eq!(init["protocol_version"], 1);
        let file: Value = serde_json::from_str(oc_runner::MANIFEST).unwrap();
        assert_eq!(init["manifest"], file);
        Ext {
            _child: child,
            peer,
        }
    }

    async fn call(&self, method: &str, params: Value) -> Result<Value, CallError> {
        within(self.peer.call(method, &params)).await
    }

    async fn run(&self, id: &str, command: &[&str], inputs: Value) -> Result<Value, CallError> {
        let config = json!({ "command": command });
        let mut run = run_request(id, config);
        run["inputs"] = inputs;
        self.call("executor.run", json!({ "run": run })).await
    }

    async fn wait(&self, id: &str) -> ExecutorWaitResult {
        let v = self
            .call(
                "executor.wait",
                json!({"executor": "runner", "execution_id": id}),
            )
            .await
            .unwrap();
        serde_json::from_value(v).unwrap()
    }

    async fn control(&self, method: &str, id: &str) -> Result<Value, CallError> {
        self.call(
            method,
            json!({"executor": "runner", "execution_id": id, "epoch": 1}),
        )
        .await
    }

    async fn stop(&self, id: &str) -> ExecutorStopResult {
        serde_json::from_value(self.control("executor.stop", id).await.unwrap()).unwrap()
    }

    /// The pid the run's recovery metadata names (its process group).
    fn pid(rec: &Recorded, id: &str) -> i32 {
        let p = rec.persists_of(id);
        p[0]["recovery"]["data"]["pid"].as_i64().unwrap() as i32
    }
}

fn run_request(id: &str, config: Value) -> Value {
    json!({
        "executor": "runner",
        "execution_id": id,
        "epoch": 1,
        "attempt": 1,
        "work": {"id": "w-1", "scope_id": "s", "kind": "job"},
        "binding": {"name": "job", "executor": "runner", "config": config},
        "config": config,
        "toolbelt": {"endpoint": "", "token": ""},
    })
}

fn event(id: &str, event_type: &str, data: Value) -> Value {
    json!({"id": id, "type": event_type, "source": "test",
           "payload": {"schema": "test.input.v1", "data": data}})
}

fn code(e: &CallError) -> String {
    match e {
        CallError::Rpc(e) => e
            .data
            .as_ref()
            .and_then(|d| d["code"].as_str())
            .unwrap_or("")
            .to_string(),
        other => panic!("not an error answer: {other}"),
    }
}

/// The live (not zombie) processes whose process group is `pgid`, from `/proc`.
fn group_alive(pgid: i32) -> Vec<i32> {
    oc_runner::job::group_members(pgid)
}

fn alive(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => {
            let after = &stat[stat.rfind(')').unwrap() + 1..];
            after.split_whitespace().next() != Some("Z")
        }
        Err(_) => false,
    }
}

#[tokio::test]
async fn an_injected_input_reaches_the_job_after_its_own_inputs() {
    let s = Scratch::new("inject");
    let rec = Arc::new(Recorded::default());
    let ext = Ext::start(&rec, &s.0).await;
    let script = r#"read first; echo "first $first"; read line; echo "got $line""#;
    let inputs = json!([event("ev-1", "test.started", json!({"n": 1}))]);
    ext.run("ex-inject", &["sh", "-c", script], inputs)
        .await
        .unwrap();

    // The recovery metadata was persisted, and answered, before run answered.
    let persisted = rec.persists_of("ex-inject");
    assert_eq!(persisted.len(), 1, "{persisted:?}");
    assert_eq!(rec.answered.load(Ordering::SeqCst), 1);
    let p = &persisted[0];
    assert_eq!(p["epoch"], 1);
    assert_eq!(p["recovery"]["schema"], "runner.recovery.v1");
    let dir = s.run_dir("ex-inject");
    assert_eq!(p["recovery"]["data"]["run_dir"], dir.display().to_string());
    assert!(Ext::pid(&rec, "ex-inject") > 1);

    // The job blocks on its second read until the injection arrives.
    let injected = event("ev-2", "test.poked", json!({"word": "hello"}));
    ext.call(
        "executor.inject",
        json!({"executor": "runner", "execution_id": "ex-inject", "epoch": 1, "event": injected}),
    )
    .await
    .unwrap();

    let r = ext.wait("ex-inject").await;
    assert_eq!(r.outcome, Outcome::Completed, "{r:?}");
    assert!(r.summary.starts_with("got "), "{r:?}");
    assert!(r.summary.contains("test.poked"), "{r:?}");
    assert!(r.summary.contains("hello"), "{r:?}");
    assert_eq!(r.artifacts.len(), 1, "{r:?}");
    let out = rec.artifact(&r.artifacts[0]);
    assert_eq!(
        (out.name.as_str(), out.execution_id.as_str()),
        ("stdout", "ex-inject")
    );
    assert!(out.committed);
    let text = String::from_utf8(out.bytes).unwrap();
    let first: Value =
        serde_json::from_str(text.lines().next().unwrap().strip_prefix("first ").unwrap()).unwrap();
    assert_eq!(
        first,
        json!({"id": "ev-1", "type": "test.started", "data": {"n": 1}})
    );

    // Another wait answers the same, without uploading again; the job has
    // ended, so it takes no more input.
    assert_eq!(ext.wait("ex-inject").await, r);
    assert_eq!(rec.artifacts.lock().unwrap().len(), 1);
    let late = ext
        .call(
            "executor.inject",
            json!({"executor": "runner", "execution_id": "ex-inject", "epoch": 1,
                   "event": event("ev-3", "test.late", json!(null))}),
        )
        .await
        .unwrap_err();
    assert_eq!(code(&late), "not_accepting");
}

#[tokio::test]
async fn an_interrupted_job_fails_killed_by_sigint() {
    let s = Scratch::new("interrupt");
    let rec = Arc::new(Recorded::default());
    let ext = Ext::start(&rec, &s.0).await;
    ext.run("ex-int", &["sleep", "300"], json!([]))
        .await
        .unwrap();
    let pid = Ext::pid(&rec, "ex-int");
    assert!(alive(pid));
    ext.control("executor.interrupt", "ex-int").await.unwrap();
    let r = ext.wait("ex-int").await;
    assert_eq!(r.outcome, Outcome::Failed, "{r:?}");
    assert_eq!(r.error, "killed by signal 2 (SIGINT)");
    assert!(r.artifacts.is_empty());
}

#[tokio::test]
async fn an_interrupt_stops_a_job_even_when_the_extension_started_with_sigint_ignored() {
    let s = Scratch::new("interrupt-ign");
    let rec = Arc::new(Recorded::default());
    let ext = Ext::start_ignoring(&rec, &s.0, true).await;
    ext.run("ex-ign", &["sleep", "300"], json!([]))
        .await
        .unwrap();
    let pid = Ext::pid(&rec, "ex-ign");
    assert!(alive(pid));
    ext.control("executor.interrupt", "ex-ign").await.unwrap();
    let r = ext.wait("ex-ign").await;
    assert_eq!(r.outcome, Outcome::Failed, "{r:?}");
    assert_eq!(r.error, "killed by signal 2 (SIGINT)");
}

#[tokio::test]
async fn a_failing_job_reports_its_status_and_last_line() {
    let s = Scratch::new("fails");
    let rec = Arc::new(Recorded::default());
    let ext = Ext::start(&rec, &s.0).await;
    let script = "echo one; echo the last line; echo oops >&2; exit 3";
    ext.run("ex-3", &["sh", "-c", script], json!([]))
        .await
        .unwrap();
    let r = ext.wait("ex-3").await;
    assert_eq!(r.outcome, Outcome::Failed, "{r:?}");
    assert_eq!(r.error, "exited with status 3");
    assert_eq!(r.summary, "the last line");
    let names: Vec<String> = r.artifacts.iter().map(|a| rec.artifact(a).name).collect();
    assert_eq!(names, ["stdout", "stderr"]);

    // A program that cannot start is a failed run, not a broken executor.
    ext.run("ex-none", &["/nonexistent/program"], json!([]))
        .await
        .unwrap();
    let r = ext.wait("ex-none").await;
    assert_eq!(r.outcome, Outcome::Failed, "{r:?}");
    assert!(
        r.error.starts_with("cannot start /nonexistent/program"),
        "{r:?}"
    );
}

#[tokio::test]
async fn stop_kills_the_whole_group_and_answers_once_it_is_empty() {
    let s = Scratch::new("stop");
    let rec = Arc::new(Recorded::default());
    let ext = Ext::start(&rec, &s.0).await;
    // Both the shell and its grandchild ignore SIGTERM: only SIGKILL ends them.
    let script = r#"trap "" TERM; sleep 300 & echo $! > grandchild; wait"#;
    ext.run("ex-stop", &["sh", "-c", script], json!([]))
        .await
        .unwrap();
    let pid = Ext::pid(&rec, "ex-stop");
    let file = s.run_dir("ex-stop").join("grandchild");
    until("the grandchild's pid", || {
        std::fs::read_to_string(&file).is_ok_and(|t| t.ends_with('\n'))
    })
    .await;
    let grandchild: i32 = std::fs::read_to_string(&file)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(alive(grandchild));
    assert_eq!(group_alive(pid).len(), 2);

    let r = ext.stop("ex-stop").await;
    assert!(r.stopped, "{r:?}");
    assert!(r.detail.contains("SIGKILL"), "{r:?}");
    // Answered only once nothing of the group is left.
    assert_eq!(group_alive(pid), Vec::<i32>::new());
    assert!(!alive(grandchild));

    let w = ext.wait("ex-stop").await;
    assert_eq!(w.outcome, Outcome::Failed);
    assert_eq!(w.error, "killed by signal 9 (SIGKILL)");
    // A second stop finds the group empty.
    assert!(ext.stop("ex-stop").await.stopped);
}

#[tokio::test]
async fn forget_removes_an_ended_runs_files_and_refuses_a_running_one() {
    let s = Scratch::new("forget");
    let rec = Arc::new(Recorded::default());
    let ext = Ext::start(&rec, &s.0).await;
    ext.run("ex-done", &["sh", "-c", "echo bye"], json!([]))
        .await
        .unwrap();
    ext.run("ex-busy", &["sleep", "300"], json!([]))
        .await
        .unwrap();
    assert_eq!(ext.wait("ex-done").await.summary, "bye");
    let dir = s.run_dir("ex-done");
    assert!(dir.join("stdout").exists());

    let forget = |id: &str| json!({"executor": "runner", "work_id": "w-1", "execution_id": id});
    let busy = ext
        .call("executor.forget", forget("ex-busy"))
        .await
        .unwrap_err();
    assert_eq!(code(&busy), "conflict");
    assert!(s.run_dir("ex-busy").exists());

    ext.call("executor.forget", forget("ex-done"))
        .await
        .unwrap();
    assert!(!dir.exists());
    // Forgotten: the executor no longer knows it.
    let gone = ext
        .call(
            "executor.wait",
            json!({"executor": "runner", "execution_id": "ex-done"}),
        )
        .await
        .unwrap_err();
    assert_eq!(code(&gone), "not_found");

    // Once stopped, the other run can be forgotten too (by its Work).
    assert!(ext.stop("ex-busy").await.stopped);
    ext.wait("ex-busy").await;
    ext.call(
        "executor.forget",
        json!({"executor": "runner", "work_id": "w-1"}),
    )
    .await
    .unwrap();
    assert!(!s.run_dir("ex-busy").exists());
}

#[tokio::test]
async fn a_refused_persist_fails_the_run_and_kills_its_job() {
    let s = Scratch::new("refused");
    let rec = Arc::new(Recorded::default());
    rec.refuse_persist.store(true, Ordering::SeqCst);
    let ext = Ext::start(&rec, &s.0).await;
    let e = ext
        .run("ex-refused", &["sleep", "300"], json!([]))
        .await
        .unwrap_err();
    assert_eq!(code(&e), "conflict");
    let pid = Ext::pid(&rec, "ex-refused");
    assert!(group_alive(pid).is_empty());
    assert!(!s.run_dir("ex-refused").exists());
}

#[tokio::test]
async fn recover_adopts_only_its_own_jobs() {
    let s = Scratch::new("recover");
    let rec = Arc::new(Recorded::default());
    let ext = Ext::start(&rec, &s.0).await;
    ext.run("ex-own", &["sleep", "300"], json!([]))
        .await
        .unwrap();
    let recovery = rec.persists_of("ex-own")[0]["recovery"].clone();
    let mut run = run_request("ex-own", json!({"command": ["sleep", "300"]}));
    run["epoch"] = json!(2);
    ext.call(
        "executor.recover",
        json!({"run": run, "recovery": recovery}),
    )
    .await
    .unwrap();
    // The old epoch is fenced off now.
    let stale = ext
        .control("executor.interrupt", "ex-own")
        .await
        .unwrap_err();
    assert_eq!(code(&stale), "conflict");

    // A job another process started is not adoptable.
    let mut other = run_request("ex-other", json!({"command": ["true"]}));
    other["epoch"] = json!(2);
    let e = ext
        .call(
            "executor.recover",
            json!({"run": other, "recovery": {"schema": "runner.recovery.v1",
                   "data": {"pid": 1, "run_dir": "/nowhere"}}}),
        )
        .await
        .unwrap_err();
    assert_eq!(code(&e), "not_adoptable");

    let r: ExecutorStopResult = serde_json::from_value(
        ext.call(
            "executor.stop",
            json!({"executor": "runner", "execution_id": "ex-own", "epoch": 2}),
        )
        .await
        .unwrap(),
    )
    .unwrap();
    assert!(r.stopped, "{r:?}");
}
