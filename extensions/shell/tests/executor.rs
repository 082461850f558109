#![allow(clippy::unwrap_used)]
//! The real `oc-shell-extension` binary as a child process, driven over its
//! stdin and stdout as the host drives it, with the host's callbacks
//! (`execution.persist_recovery`, `artifact.*`) served and recorded here. Every
//! run is a real process group; the checks read the run directory and `/proc`.
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

const EXE: &str = env!("CARGO_BIN_EXE_oc-shell-extension");
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

struct Scratch(PathBuf);

impl Scratch {
    fn new(test: &str) -> Scratch {
        let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
            .join(format!("oc-shell-{test}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Scratch(dir)
    }
    fn join(&self, p: &str) -> PathBuf {
        self.0.join(p)
    }
    fn state(&self) -> PathBuf {
        self.join("state")
    }
    fn run_dir(&self, id: &str) -> PathBuf {
        self.state().join("runs").join(id)
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
    persists: Mutex<Vec<Value>>,
    /// For each persist: whether the run's `started` file existed a moment
    /// after it arrived (it must not: the command starts after the persist).
    started_at_persist: Mutex<Vec<bool>>,
    refuse_persist: AtomicBool,
    /// Symlinks planted in the run directory when its recovery is persisted (after
    /// the wrapper started, before it starts the command): name, target.
    plant: Mutex<Vec<(String, PathBuf)>>,
    artifacts: Mutex<HashMap<String, Artifact>>,
    next: AtomicUsize,
}

impl Recorded {
    fn persists_of(&self, id: &str) -> Vec<Value> {
        self.persists
            .lock()
            .unwrap()
            .iter()
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
            if rec.refuse_persist.load(Ordering::SeqCst) {
                return Err(RpcError::new(
                    protocol::Code::Conflict,
                    "the run is closed (test)",
                ));
            }
            rec.persists.lock().unwrap().push(p.clone());
            let run_dir = PathBuf::from(p["recovery"]["data"]["run_dir"].as_str().unwrap_or(""));
            for (name, target) in rec.plant.lock().unwrap().iter() {
                std::os::unix::fs::symlink(target, run_dir.join(name)).unwrap();
            }
            let started = run_dir.join("started");
            tokio::time::sleep(Duration::from_millis(300)).await;
            rec.started_at_persist
                .lock()
                .unwrap()
                .push(started.exists());
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
    child: Child,
    peer: Peer,
}

impl Ext {
    /// Starts the extension and initializes it with `state` as its state dir.
    async fn start(rec: &Arc<Recorded>, state: &Path) -> Ext {
        let mut child = Command::new(EXE)
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
        let peer = connect(stdout, stdin, host, Options::named("shell extension"));
        let init = within(peer.call(
            "initialize",
            &json!({
                "protocol_versions": [1],
                "host": {"name": "test-host", "version": "0"},
                "state_dir": state,
                "executor_dirs": {},
            }),
        ))
        .await
        .unwrap();
        assert_eq!(init["protocol_version"], 1);
        let file: Value = serde_json::from_str(oc_shell::MANIFEST).unwrap();
        assert_eq!(init["manifest"], file);
        Ext { child, peer }
    }

    async fn call(&self, method: &str, params: Value) -> Result<Value, CallError> {
        within(self.peer.call(method, &params)).await
    }

    async fn run(&self, id: &str, config: Value) -> Result<Value, CallError> {
        self.call("executor.run", json!({"run": run_request(id, 1, config)}))
            .await
    }

    async fn wait(&self, id: &str) -> ExecutorWaitResult {
        let v = self.wait_raw(id).await.unwrap();
        serde_json::from_value(v).unwrap()
    }

    /// `executor.recover` of `id` at `epoch`, running `script`, with `recovery`.
    async fn recover(
        &self,
        id: &str,
        epoch: u64,
        script: &str,
        recovery: &Value,
    ) -> Result<Value, CallError> {
        self.call(
            "executor.recover",
            json!({"run": run_request(id, epoch, json!({"script": script})), "recovery": recovery}),
        )
        .await
    }

    /// `executor.interrupt` of `id` at epoch 1, giving `reason`.
    async fn interrupt(&self, id: &str, reason: &str) {
        self.call(
            "executor.interrupt",
            json!({"executor": "shell", "execution_id": id, "epoch": 1, "reason": reason}),
        )
        .await
        .unwrap();
    }

    /// `executor.stop` of `id` at epoch 1.
    async fn stop(&self, id: &str) -> ExecutorStopResult {
        let v = self
            .call(
                "executor.stop",
                json!({"executor": "shell", "execution_id": id, "epoch": 1}),
            )
            .await
            .unwrap();
        serde_json::from_value(v).unwrap()
    }

    async fn wait_raw(&self, id: &str) -> Result<Value, CallError> {
        self.call(
            "executor.wait",
            json!({"executor": "shell", "execution_id": id}),
        )
        .await
    }

    /// SIGKILL to the extension's whole process group (as extrunner stops an
    /// extension, and as a crash): it gets no chance to clean up.
    async fn crash(mut self) {
        let pid = self.child.id().unwrap() as i32;
        nix::sys::signal::killpg(
            nix::unistd::Pid::from_raw(pid),
            nix::sys::signal::Signal::SIGKILL,
        )
        .unwrap();
        let status = within(self.child.wait()).await.unwrap();
        assert!(!status.success());
    }
}

fn run_request(id: &str, epoch: u64, config: Value) -> Value {
    json!({
        "executor": "shell",
        "execution_id": id,
        "epoch": epoch,
        "attempt": 1,
        "work": {"id": "w-1", "scope_id": "s", "kind": "deploy"},
        "binding": {"name": "deploy", "executor": "shell", "config": config},
        "config": config,
        "inputs": [
            {"id": "ev-1", "type": "webhook.delivery", "source": "webhook/s/ci",
             "payload": {"schema": "webhook.delivery.v1", "data": {"ref": "main"}}}
        ],
        "toolbelt": {"endpoint": "", "token": ""},
    })
}

fn meta(dir: &Path) -> Value {
    serde_json::from_slice(&std::fs::read(dir.join("meta.json")).unwrap()).unwrap()
}

/// The live (not zombie) processes whose process group is `pgid`, from `/proc`.
fn group_alive(pgid: i64) -> Vec<i64> {
    let mut left = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|n| n.parse::<i64>().ok()) else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        let after = &stat[stat.rfind(')').unwrap() + 1..];
        let fields: Vec<&str> = after.split_whitespace().collect();
        if fields[2].parse::<i64>().unwrap() == pgid && fields[0] != "Z" {
            left.push(pid);
        }
    }
    left
}

fn alive(pid: i64) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => {
            let after = &stat[stat.rfind(')').unwrap() + 1..];
            after.split_whitespace().next() != Some("Z")
        }
        Err(_) => false,
    }
}

#[tokio::test]
async fn a_command_that_prints_completes_with_its_output_as_artifacts() {
    let s = Scratch::new("completes");
    let rec = Arc::new(Recorded::default());
    let ext = Ext::start(&rec, &s.state()).await;
    let script = r#"touch started; echo "hello from $OS_WORK_ID in $OS_SCOPE_ID with $EXTRA"; pwd; echo oops >&2; echo "the last line""#;
    ext.run("ex-ok", json!({"script": script, "env": {"EXTRA": "x"}}))
        .await
        .unwrap();

    // The recovery metadata was persisted before run answered, and before the
    // command started.
    let persisted = rec.persists_of("ex-ok");
    assert_eq!(persisted.len(), 1, "{persisted:?}");
    let p = &persisted[0];
    assert_eq!(p["epoch"], 1);
    assert_eq!(p["recovery"]["schema"], "shell.recovery.v1");
    let dir = s.run_dir("ex-ok");
    assert_eq!(
        PathBuf::from(p["recovery"]["data"]["run_dir"].as_str().unwrap()),
        dir
    );
    assert!(p["recovery"]["data"]["pid"].as_i64().unwrap() > 1);
    assert_eq!(p["recovery"]["data"]["nonce"].as_str().unwrap().len(), 32);
    assert_eq!(*rec.started_at_persist.lock().unwrap(), [false]);

    let r = ext.wait("ex-ok").await;
    assert_eq!(r.outcome, Outcome::Completed, "{r:?}");
    assert_eq!(r.error, "");
    assert_eq!(r.summary, "the last line");
    assert_eq!(r.artifacts.len(), 2, "{r:?}");
    let out = rec.artifact(&r.artifacts[0]);
    assert_eq!(out.name, "stdout");
    assert_eq!(out.execution_id, "ex-ok");
    assert!(out.committed);
    let expected = format!(
        "hello from w-1 in s with x\n{}\nthe last line\n",
        dir.display()
    );
    assert_eq!(String::from_utf8(out.bytes).unwrap(), expected);
    let err = rec.artifact(&r.artifacts[1]);
    assert_eq!(
        (err.name.as_str(), err.bytes.as_slice()),
        ("stderr", &b"oops\n"[..])
    );

    // The inputs reached the command's directory.
    let inputs: Value =
        serde_json::from_slice(&std::fs::read(dir.join("inputs.json")).unwrap()).unwrap();
    assert_eq!(inputs["inputs"][0]["id"], "ev-1");
    assert_eq!(inputs["inputs"][0]["payload"]["data"]["ref"], "main");
    assert_eq!(inputs["work"]["id"], "w-1");

    // Another wait gets the same result, and nothing is uploaded twice.
    let again = ext.wait("ex-ok").await;
    assert_eq!(again, r);
    assert_eq!(rec.artifacts.lock().unwrap().len(), 2);

    // A second run of the same execution does not launch it again.
    ext.run("ex-ok", json!({"script": script})).await.unwrap();
    assert_eq!(rec.persists_of("ex-ok").len(), 1);
}

#[tokio::test]
async fn several_waits_at_once_all_get_the_result() {
    let s = Scratch::new("waits");
    let rec = Arc::new(Recorded::default());
    let ext = Ext::start(&rec, &s.state()).await;
    ext.run(
        "ex-many",
        json!({"script": "until [ -e go ]; do sleep 0.05; done; echo fine"}),
    )
    .await
    .unwrap();
    let waits = [
        ext.wait("ex-many"),
        ext.wait("ex-many"),
        ext.wait("ex-many"),
    ];
    let release = async {
        tokio::time::sleep(Duration::from_millis(200)).await;
        std::fs::write(s.run_dir("ex-many").join("go"), b"").unwrap();
    };
    let (results, ()) = tokio::join!(futures_all(waits), release);
    for r in &results {
        assert_eq!(r.outcome, Outcome::Completed, "{r:?}");
        assert_eq!(r, &results[0]);
    }
    assert_eq!(rec.artifacts.lock().unwrap().len(), 1);
}

async fn futures_all<F: std::future::Future>(fs: [F; 3]) -> Vec<F::Output> {
    let [a, b, c] = fs;
    let (a, b, c) = tokio::join!(a, b, c);
    vec![a, b, c]
}

#[tokio::test]
async fn a_nonzero_exit_fails_with_its_status() {
    let s = Scratch::new("exit3");
    let rec = Arc::new(Recorded::default());
    let ext = Ext::start(&rec, &s.state()).await;
    ext.run("ex-3", json!({"command": ["sh", "-c", "exit 3"]}))
        .await
        .unwrap();
    let r = ext.wait("ex-3").await;
    assert_eq!(r.outcome, Outcome::Failed);
    assert_eq!(r.error, "exited with status 3");
    assert!(r.artifacts.is_empty(), "empty outputs are not uploaded");

    // A program that does not exist fails the run, saying so.
    ext.run("ex-none", json!({"command": ["/no/such/program"]}))
        .await
        .unwrap();
    let r = ext.wait("ex-none").await;
    assert_eq!(r.outcome, Outcome::Failed);
    assert!(
        r.error.starts_with("cannot start /no/such/program"),
        "{}",
        r.error
    );
}

#[tokio::test]
async fn a_bad_config_fails_the_run_naming_the_field() {
    let s = Scratch::new("badconfig");
    let rec = Arc::new(Recorded::default());
    let ext = Ext::start(&rec, &s.state()).await;
    for (id, config, field) in [
        ("ex-b1", json!({"command": []}), "/command"),
        ("ex-b2", json!(null), "/command"),
        (
            "ex-b3",
            json!({"command": ["true"], "deadline_s": "soon"}),
            "/deadline_s",
        ),
        (
            "ex-b4",
            json!({"command": ["true"], "env": {"A": 1}}),
            "/env/A",
        ),
    ] {
        ext.run(id, config).await.unwrap();
        let r = ext.wait(id).await;
        assert_eq!(r.outcome, Outcome::Failed);
        assert!(
            r.error
                .starts_with(&format!("invalid shell executor config: {field}:")),
            "{}",
            r.error
        );
        assert!(!s.run_dir(id).exists(), "nothing was launched");
    }
    assert!(rec.persists.lock().unwrap().is_empty());
    // The reason says what the field must be, not what it was.
    let r = ext.wait("ex-b3").await;
    assert_eq!(
        r.error,
        "invalid shell executor config: /deadline_s: must be a whole, non-negative number"
    );

    let v = ext
        .call(
            "validate",
            json!({"kind": "executor", "type": "shell", "config": {"command": "make"}}),
        )
        .await
        .unwrap();
    assert_eq!(v["diagnostics"][0]["path"], "/command");
}

#[tokio::test]
async fn a_deadline_kills_the_whole_group_and_says_so() {
    let s = Scratch::new("deadline");
    let rec = Arc::new(Recorded::default());
    let ext = Ext::start(&rec, &s.state()).await;
    ext.run(
        "ex-dl",
        json!({"script": "sleep 300 & sleep 300; wait", "deadline_s": 1, "grace_s": 1}),
    )
    .await
    .unwrap();
    let r = ext.wait("ex-dl").await;
    assert_eq!(r.outcome, Outcome::Failed);
    assert!(
        r.error.starts_with("killed by deadline (1 s)"),
        "{}",
        r.error
    );
    let pgid = meta(&s.run_dir("ex-dl"))["pgid"].as_i64().unwrap();
    assert!(pgid > 1);
    assert_eq!(group_alive(pgid), Vec::<i64>::new());
}

#[tokio::test]
async fn interrupt_kills_the_group_grandchildren_too() {
    let s = Scratch::new("interrupt");
    let rec = Arc::new(Recorded::default());
    let ext = Ext::start(&rec, &s.state()).await;
    // Both the shell and its background child ignore SIGTERM: only the
    // SIGKILL after the grace period, sent to the group, ends them.
    let script = "trap '' TERM; sleep 300 & echo $! > grandchild.pid; touch ready; wait";
    ext.run("ex-int", json!({"script": script, "grace_s": 1}))
        .await
        .unwrap();
    let dir = s.run_dir("ex-int");
    // The command may say it is ready before its wrapper has recorded its group.
    until("the command to be ready, its group recorded", || {
        dir.join("ready").exists() && meta(&dir)["pgid"].as_i64().unwrap_or(0) > 0
    })
    .await;
    let grandchild: i64 = std::fs::read_to_string(dir.join("grandchild.pid"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(alive(grandchild));
    let pgid = meta(&dir)["pgid"].as_i64().unwrap();
    assert!(group_alive(pgid).contains(&grandchild));

    ext.interrupt("ex-int", "operator").await;
    let r = ext.wait("ex-int").await;
    assert_eq!(r.outcome, Outcome::Failed);
    assert_eq!(
        r.error, "interrupted (operator): killed by signal 9 (SIGKILL)",
        "{r:?}"
    );
    assert!(!alive(grandchild), "the grandchild outlived the group kill");
    assert_eq!(group_alive(pgid), Vec::<i64>::new());

    // A superseded epoch is refused.
    let stale = ext
        .call(
            "executor.interrupt",
            json!({"executor": "shell", "execution_id": "ex-int", "epoch": 0}),
        )
        .await
        .unwrap_err();
    assert_eq!(stale.code(), Some("conflict"));
}

#[tokio::test]
async fn a_command_leaves_no_process_behind() {
    let s = Scratch::new("leftovers");
    let rec = Arc::new(Recorded::default());
    let ext = Ext::start(&rec, &s.state()).await;
    ext.run(
        "ex-left",
        json!({"script": "sleep 300 & echo $! > bg.pid; echo done", "grace_s": 1}),
    )
    .await
    .unwrap();
    let r = ext.wait("ex-left").await;
    assert_eq!(r.outcome, Outcome::Completed, "{r:?}");
    assert_eq!(r.summary, "done");
    let dir = s.run_dir("ex-left");
    let bg: i64 = std::fs::read_to_string(dir.join("bg.pid"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(!alive(bg));
    assert_eq!(
        group_alive(meta(&dir)["pgid"].as_i64().unwrap()),
        Vec::<i64>::new()
    );
}

#[tokio::test]
async fn stop_answers_with_evidence_and_forget_cleans_up() {
    let s = Scratch::new("stop");
    let rec = Arc::new(Recorded::default());
    let ext = Ext::start(&rec, &s.state()).await;
    ext.run(
        "ex-stop",
        json!({"script": "sleep 300 & touch ready; wait", "grace_s": 5}),
    )
    .await
    .unwrap();
    let dir = s.run_dir("ex-stop");
    // The command may say it is ready before its wrapper has recorded its group.
    until("the command to be ready, its group recorded", || {
        dir.join("ready").exists() && meta(&dir)["pgid"].as_i64().unwrap_or(0) > 0
    })
    .await;
    let pgid = meta(&dir)["pgid"].as_i64().unwrap();

    let running = ext
        .call(
            "executor.forget",
            json!({"executor": "shell", "work_id": "w-1", "execution_id": "ex-stop"}),
        )
        .await
        .unwrap_err();
    assert_eq!(running.code(), Some("conflict"));

    let stopped = ext.stop("ex-stop").await;
    assert!(stopped.stopped, "{stopped:?}");
    assert!(
        stopped.detail.contains(&format!("group {pgid}")),
        "{stopped:?}"
    );
    assert_eq!(group_alive(pgid), Vec::<i64>::new());

    let r = ext.wait("ex-stop").await;
    assert_eq!(r.outcome, Outcome::Failed);
    assert!(r.error.starts_with("stopped: "), "{}", r.error);

    ext.call(
        "executor.forget",
        json!({"executor": "shell", "work_id": "w-1", "execution_id": "ex-stop"}),
    )
    .await
    .unwrap();
    assert!(!dir.exists());
    let unknown = ext.wait_raw("ex-stop").await.unwrap_err();
    assert_eq!(unknown.code(), Some("not_found"));

    // Stopping what never ran here is stopped, with nothing to do.
    let nothing = ext.stop("ex-never").await;
    assert!(nothing.stopped);
}

#[tokio::test]
async fn a_run_survives_the_extension_and_is_recovered_once() {
    let s = Scratch::new("recover");
    let rec = Arc::new(Recorded::default());
    let ran = s.join("ran.txt");
    let script = format!("sleep 1; echo once >> '{}'; echo finished", ran.display());

    let first = Ext::start(&rec, &s.state()).await;
    first
        .run("ex-rec", json!({"script": script}))
        .await
        .unwrap();
    let recovery = rec.persists_of("ex-rec")[0]["recovery"].clone();
    first.crash().await;

    let second = Ext::start(&rec, &s.state()).await;
    // The new process does not know the run until it recovers it.
    let unknown = second.wait_raw("ex-rec").await.unwrap_err();
    assert_eq!(unknown.code(), Some("not_found"));
    second
        .recover("ex-rec", 2, &script, &recovery)
        .await
        .unwrap();
    let r = second.wait("ex-rec").await;
    assert_eq!(r.outcome, Outcome::Completed, "{r:?}");
    assert_eq!(r.summary, "finished");
    assert_eq!(std::fs::read_to_string(&ran).unwrap(), "once\n");
    assert_eq!(second.wait("ex-rec").await, r);

    // A lower epoch than the adoption's is refused.
    let lower = second
        .recover("ex-rec", 1, &script, &recovery)
        .await
        .unwrap_err();
    assert_eq!(lower.code(), Some("not_adoptable"));

    // Another restart: the recorded result comes back as it was, artifacts and all.
    second.crash().await;
    let third = Ext::start(&rec, &s.state()).await;
    third
        .recover("ex-rec", 3, &script, &recovery)
        .await
        .unwrap();
    assert_eq!(third.wait("ex-rec").await, r);
    assert_eq!(std::fs::read_to_string(&ran).unwrap(), "once\n");
    assert_eq!(rec.artifacts.lock().unwrap().len(), 1);
}

#[tokio::test]
async fn recover_refuses_what_it_cannot_prove() {
    let s = Scratch::new("bogus");
    let rec = Arc::new(Recorded::default());
    let ext = Ext::start(&rec, &s.state()).await;
    let recover = |id: &str, recovery: Value| json!({"run": run_request(id, 2, json!({"command": ["true"]})), "recovery": recovery});
    let refused = |r: Result<Value, CallError>| {
        let e = r.unwrap_err();
        assert_eq!(e.code(), Some("not_adoptable"), "{e}");
    };

    // A run that never existed here.
    let nonce = "0123456789abcdef0123456789abcdef";
    let gone = s.run_dir("ex-gone");
    refused(
        ext.call(
            "executor.recover",
            recover(
                "ex-gone",
                json!({"schema": "shell.recovery.v1",
                       "data": {"pid": 999_999_999, "nonce": nonce, "run_dir": gone, "epoch": 1}}),
            ),
        )
        .await,
    );

    // A live run, with its metadata tampered: a wrong nonce, a wrong pid, a wrong
    // schema, another execution's directory.
    ext.run(
        "ex-live",
        json!({"script": "touch ready; sleep 300", "grace_s": 1}),
    )
    .await
    .unwrap();
    let real = rec.persists_of("ex-live")[0]["recovery"].clone();
    let mut wrong_nonce = real.clone();
    wrong_nonce["data"]["nonce"] = json!(nonce);
    let mut wrong_pid = real.clone();
    wrong_pid["data"]["pid"] = json!(std::process::id());
    let mut wrong_schema = real.clone();
    wrong_schema["schema"] = json!("other.recovery.v1");
    for bad in [wrong_nonce, wrong_pid, wrong_schema] {
        let fresh = Ext::start(&rec, &s.state()).await;
        refused(
            fresh
                .call("executor.recover", recover("ex-live", bad))
                .await,
        );
    }
    let fresh = Ext::start(&rec, &s.state()).await;
    refused(
        fresh
            .call("executor.recover", recover("ex-other", real.clone()))
            .await,
    );

    // A recycled pid: a run directory whose metadata names a live process that is
    // not its wrapper (this test process), with no recorded end.
    let fake = s.run_dir("ex-fake");
    std::fs::create_dir_all(&fake).unwrap();
    let me = std::process::id();
    std::fs::write(
        fake.join("spec.json"),
        json!({"execution_id": "ex-fake", "argv": ["true"], "cwd": "/", "grace_s": 1, "nonce": nonce})
            .to_string(),
    )
    .unwrap();
    std::fs::write(
        fake.join("meta.json"),
        json!({"pid": me, "pgid": me, "nonce": nonce, "started_at": ""}).to_string(),
    )
    .unwrap();
    refused(
        fresh
            .call(
                "executor.recover",
                recover(
                    "ex-fake",
                    json!({"schema": "shell.recovery.v1",
                           "data": {"pid": me, "nonce": nonce, "run_dir": fake, "epoch": 1}}),
                ),
            )
            .await,
    );

    // The real metadata is adopted by a fresh process, which can then stop it.
    fresh
        .call("executor.recover", recover("ex-live", real))
        .await
        .unwrap();
    let stopped = fresh
        .call(
            "executor.stop",
            json!({"executor": "shell", "execution_id": "ex-live", "epoch": 2}),
        )
        .await
        .unwrap();
    assert_eq!(stopped["stopped"], true, "{stopped}");
    let r = fresh.wait("ex-live").await;
    assert!(r.error.starts_with("stopped: "), "{r:?}");
}

#[tokio::test]
async fn a_refused_persist_fails_the_run_before_the_command_starts() {
    let s = Scratch::new("refused");
    let rec = Arc::new(Recorded::default());
    rec.refuse_persist.store(true, Ordering::SeqCst);
    let ext = Ext::start(&rec, &s.state()).await;
    let marker = s.join("ran");
    let e = ext
        .run(
            "ex-refused",
            json!({"script": format!("touch '{}'", marker.display())}),
        )
        .await
        .unwrap_err();
    assert_eq!(e.code(), Some("conflict"), "{e}");
    assert!(e.to_string().contains("the run is closed (test)"), "{e}");
    // The wrapper has exited (run waited for it) without starting the command.
    assert!(!marker.exists());
    assert!(!s.run_dir("ex-refused").exists());
}

/// A file outside every run directory, holding `text`: no trick may change it, nor
/// bring it into a result.
fn outside(s: &Scratch, name: &str, text: &str) -> PathBuf {
    let p = s.join(name);
    std::fs::write(&p, text).unwrap();
    p
}

fn is_regular(p: &Path) -> bool {
    std::fs::symlink_metadata(p).is_ok_and(|m| m.file_type().is_file())
}

/// A process group of the test's own, which no run may signal.
struct Bystander(std::process::Child);

impl Bystander {
    fn start() -> Bystander {
        use std::os::unix::process::CommandExt;
        Bystander(
            std::process::Command::new("sleep")
                .arg("300")
                .process_group(0)
                .spawn()
                .unwrap(),
        )
    }
    fn pid(&self) -> i64 {
        i64::from(self.0.id())
    }
}

impl Drop for Bystander {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[tokio::test]
async fn a_symlink_at_a_temporary_name_writes_nothing_outside() {
    let s = Scratch::new("tmplink");
    let rec = Arc::new(Recorded::default());
    let ext = Ext::start(&rec, &s.state()).await;
    let target = outside(&s, "victim.db", "precious\n");
    // At every temporary name the wrapper (its parent) and the extension (the
    // wrapper's parent) would write a file of the run directory under, the command
    // plants a symlink to the target; then the extension writes `kill` (the
    // interrupt), the wrapper `status`, the extension `result.json`.
    let script = format!(
        r#"ext=$(awk '{{print $4}}' /proc/$PPID/stat)
for pid in $PPID $ext; do
  for f in status meta.json result.json kill stdout stderr; do
    ln -s '{}' "$OS_RUN_DIR/.$f.tmp.$pid"
  done
done
echo planted; touch "$OS_RUN_DIR/ready"; sleep 300"#,
        target.display()
    );
    ext.run("ex-tmp", json!({"script": script, "grace_s": 1}))
        .await
        .unwrap();
    let dir = s.run_dir("ex-tmp");
    until("the symlinks to be planted", || dir.join("ready").exists()).await;
    ext.interrupt("ex-tmp", "test").await;
    let r = ext.wait("ex-tmp").await;
    assert_eq!(r.outcome, Outcome::Failed, "{r:?}");
    assert!(r.error.starts_with("interrupted (test): "), "{r:?}");
    assert_eq!(r.summary, "planted");
    assert_eq!(std::fs::read_to_string(&target).unwrap(), "precious\n");
    for f in ["status", "meta.json", "result.json", "kill"] {
        assert!(is_regular(&dir.join(f)), "{f} is not a file of its own");
    }
}

/// No artifact holds the secret or the other Work's file of [`outside`].
fn assert_no_leak(rec: &Recorded) {
    for a in rec.artifacts.lock().unwrap().values() {
        let text = String::from_utf8_lossy(&a.bytes);
        assert!(!text.contains("the secret"), "{a:?}");
        assert!(!text.contains("another Work"), "{a:?}");
    }
}

#[tokio::test]
async fn outputs_planted_before_the_start_are_refused_and_nothing_runs() {
    let s = Scratch::new("preplant");
    let rec = Arc::new(Recorded::default());
    let secret = outside(&s, "secret.txt", "the secret\n");
    let other = outside(&s, "other-work.txt", "another Work's file\n");
    *rec.plant.lock().unwrap() = vec![
        ("stdout".into(), secret.clone()),
        ("stderr".into(), other.clone()),
    ];
    let ext = Ext::start(&rec, &s.state()).await;
    let marker = s.join("ran");
    ext.run(
        "ex-pre",
        json!({"script": format!("touch '{}'; echo out; echo err >&2", marker.display())}),
    )
    .await
    .unwrap();
    let r = ext.wait("ex-pre").await;
    assert_eq!(r.outcome, Outcome::Failed, "{r:?}");
    assert!(
        r.error.contains("stdout") && r.error.contains("refused"),
        "{r:?}"
    );
    assert!(!marker.exists(), "the command started");
    assert_eq!(std::fs::read_to_string(&secret).unwrap(), "the secret\n");
    assert_eq!(
        std::fs::read_to_string(&other).unwrap(),
        "another Work's file\n"
    );
    assert_no_leak(&rec);
}

#[tokio::test]
async fn outputs_swapped_for_symlinks_are_never_read() {
    let s = Scratch::new("swapped");
    let rec = Arc::new(Recorded::default());
    let ext = Ext::start(&rec, &s.state()).await;
    let secret = outside(&s, "secret.txt", "the secret\n");
    let other = outside(&s, "other-work.txt", "another Work's file\n");
    let script = format!(
        r#"echo harmless; echo noise >&2
rm "$OS_RUN_DIR/stdout" "$OS_RUN_DIR/stderr"
ln -s '{}' "$OS_RUN_DIR/stdout"; ln -s '{}' "$OS_RUN_DIR/stderr""#,
        secret.display(),
        other.display()
    );
    ext.run("ex-swap", json!({"script": script})).await.unwrap();
    let r = ext.wait("ex-swap").await;
    assert_eq!(r.outcome, Outcome::Failed, "{r:?}");
    assert!(
        r.error.contains("stdout") && r.error.contains("symbolic link"),
        "{r:?}"
    );
    assert!(!r.summary.contains("secret"), "{r:?}");
    assert_no_leak(&rec);
    assert_eq!(std::fs::read_to_string(&secret).unwrap(), "the secret\n");
}

/// The command waits for its group to be recorded, rewrites `meta.json` to name
/// `group`, kills its wrapper (so nothing records its end) and sleeps on.
fn forging(group: i64) -> String {
    format!(
        r#"echo $$ > "$OS_RUN_DIR/cmd.pid"
until grep -q '"pgid": [1-9]' "$OS_RUN_DIR/meta.json"; do sleep 0.05; done
printf '{{"pid": %s, "pgid": {group}, "nonce": "x", "started_at": ""}}' $PPID > "$OS_RUN_DIR/m.new"
mv -f "$OS_RUN_DIR/m.new" "$OS_RUN_DIR/meta.json"
kill -9 $PPID
touch "$OS_RUN_DIR/forged"
sleep 300"#
    )
}

/// Runs `id` with [`forging`] aimed at `bystander`'s group and waits until the
/// forgery is done and the wrapper dead: the command's pid.
async fn start_forged(
    s: &Scratch,
    rec: &Recorded,
    ext: &Ext,
    id: &str,
    bystander: &Bystander,
) -> i64 {
    ext.run(
        id,
        json!({"script": forging(bystander.pid()), "grace_s": 1}),
    )
    .await
    .unwrap();
    let dir = s.run_dir(id);
    let wrapper = rec.persists_of(id)[0]["recovery"]["data"]["pid"]
        .as_i64()
        .unwrap();
    until("the forgery and the wrapper's death", || {
        dir.join("forged").exists() && !alive(wrapper)
    })
    .await;
    std::fs::read_to_string(dir.join("cmd.pid"))
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

#[tokio::test]
async fn a_forged_process_group_is_never_signalled_by_interrupt() {
    let s = Scratch::new("forgedint");
    let rec = Arc::new(Recorded::default());
    let ext = Ext::start(&rec, &s.state()).await;
    let bystander = Bystander::start();
    let command = start_forged(&s, &rec, &ext, "ex-fg", &bystander).await;
    ext.interrupt("ex-fg", "test").await;
    let r = ext.wait("ex-fg").await;
    assert!(
        alive(bystander.pid()),
        "the bystander's group was signalled"
    );
    assert_eq!(r.outcome, Outcome::Failed, "{r:?}");
    assert!(
        r.error
            .contains("ended without recording how the command ended"),
        "{r:?}"
    );
    // The run's own processes were ended all the same.
    assert!(!alive(command), "the command outlived the interrupt");
}

#[tokio::test]
async fn a_forged_process_group_is_never_signalled_by_stop() {
    let s = Scratch::new("forgedstop");
    let rec = Arc::new(Recorded::default());
    let ext = Ext::start(&rec, &s.state()).await;
    let bystander = Bystander::start();
    let command = start_forged(&s, &rec, &ext, "ex-fs", &bystander).await;
    let stopped = ext.stop("ex-fs").await;
    assert!(
        alive(bystander.pid()),
        "the bystander's group was signalled"
    );
    assert!(stopped.stopped, "{stopped:?}");
    assert!(!alive(command), "the command outlived the stop");
    let r = ext.wait("ex-fs").await;
    assert_eq!(r.outcome, Outcome::Failed, "{r:?}");
}

#[tokio::test]
async fn a_forged_result_changes_nothing_the_host_reports() {
    let s = Scratch::new("forgedresult");
    let rec = Arc::new(Recorded::default());
    let forged = serde_json::to_string(&ExecutorWaitResult {
        summary: "all good (forged)".into(),
        ..ExecutorWaitResult::new(Outcome::Completed)
    })
    .unwrap();
    let script = format!(
        r#"printf '%s' '{forged}' > "$OS_RUN_DIR/result.json"
until [ -e "$OS_RUN_DIR/go" ]; do sleep 0.05; done
echo the real line; exit 3"#
    );
    // Answered by the process that launched it.
    let ext = Ext::start(&rec, &s.state()).await;
    ext.run("ex-fr", json!({"script": script})).await.unwrap();
    std::fs::write(s.run_dir("ex-fr").join("go"), "").unwrap();
    let r = ext.wait("ex-fr").await;
    assert_eq!(r.outcome, Outcome::Failed, "{r:?}");
    assert_eq!(r.error, "exited with status 3");
    assert_eq!(r.summary, "the real line");

    // Answered after a restart, by a process that recovered it.
    ext.run("ex-fr2", json!({"script": script})).await.unwrap();
    let dir = s.run_dir("ex-fr2");
    until("the forged result", || dir.join("result.json").exists()).await;
    let recovery = rec.persists_of("ex-fr2")[0]["recovery"].clone();
    ext.crash().await;
    std::fs::write(dir.join("go"), "").unwrap();
    let second = Ext::start(&rec, &s.state()).await;
    second
        .recover("ex-fr2", 2, &script, &recovery)
        .await
        .unwrap();
    let r = second.wait("ex-fr2").await;
    assert_eq!(r.outcome, Outcome::Failed, "{r:?}");
    assert_eq!(r.error, "exited with status 3");
    assert_eq!(r.summary, "the real line");
}
