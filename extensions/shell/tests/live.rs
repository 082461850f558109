#![allow(clippy::unwrap_used)]
//! `executor.live` of the real `oc-shell-extension` binary, driven over its stdin
//! and stdout as the host drives it: a running command's output shows while it
//! runs, an output the command swapped for a FIFO never blocks the answer, and an
//! ended run is `not_live`. Nothing here measures time: the timeouts only guard
//! against hangs.

use protocol::wire::{ExecutorLiveResult, ExecutorWaitResult};
use protocol::{connect, CallError, FnHandler, Options, Peer, Request, RpcError};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::process::{Child, Command};

const EXE: &str = env!("CARGO_BIN_EXE_oc-shell-extension");
/// Only against hangs: nothing here measures time.
const HANG: Duration = Duration::from_secs(60);

async fn within<F: std::future::Future>(f: F) -> F::Output {
    tokio::time::timeout(HANG, f).await.expect("hung")
}

struct Scratch(PathBuf);

impl Scratch {
    fn new(test: &str) -> Scratch {
        let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
            .join(format!("oc-shell-live-{test}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Scratch(dir)
    }
    fn state(&self) -> PathBuf {
        self.0.join("state")
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

/// The host's side of the calls the extension makes: recovery and artifacts,
/// accepted and dropped.
async fn serve_host(next: Arc<AtomicUsize>, request: Request) -> Result<Value, RpcError> {
    let p = request.params_value()?;
    match request.method.as_str() {
        "execution.persist_recovery" => Ok(json!({})),
        "artifact.create" => Ok(json!({
            "artifact_id": format!("art-{}", next.fetch_add(1, Ordering::SeqCst))
        })),
        "artifact.write" => {
            let w: protocol::wire::ArtifactWriteParams = request.params()?;
            Ok(json!({"size": w.offset + w.data.len() as u64}))
        }
        "artifact.commit" => Ok(json!({"artifact_id": p["artifact_id"], "size": 0})),
        other => Err(RpcError::method_not_found(other)),
    }
}

struct Ext {
    _child: Child,
    peer: Peer,
}

impl Ext {
    async fn start(state: &Path) -> Ext {
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
        let next = Arc::new(AtomicUsize::new(0));
        let host = FnHandler(move |request: Request| serve_host(Arc::clone(&next), request));
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
        Ext {
            _child: child,
            peer,
        }
    }

    async fn call(&self, method: &str, params: Value) -> Result<Value, CallError> {
        within(self.peer.call(method, &params)).await
    }

    async fn live(&self, id: &str, tail: u64) -> Result<ExecutorLiveResult, CallError> {
        let v = self
            .call(
                "executor.live",
                json!({"executor": "shell", "execution_id": id, "tail": tail}),
            )
            .await?;
        Ok(serde_json::from_value(v).unwrap())
    }

    /// Polls `executor.live` of `id` until `check` holds of its answer (bounded by
    /// [`HANG`]), and answers it.
    async fn live_until(
        &self,
        what: &str,
        id: &str,
        check: impl Fn(&ExecutorLiveResult) -> bool,
    ) -> ExecutorLiveResult {
        let got = tokio::time::timeout(HANG, async {
            loop {
                let live = self.live(id, 0).await.unwrap();
                if check(&live) {
                    return live;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
        .await;
        got.unwrap_or_else(|_| panic!("hung waiting for {what}"))
    }
}

fn run_request(id: &str, script: &str) -> Value {
    let config = json!({ "script": script, "deadline_s": 120, "grace_s": 1 });
    json!({"run": {
        "executor": "shell",
        "execution_id": id,
        "epoch": 1,
        "attempt": 1,
        "work": {"id": "w-1", "scope_id": "s", "kind": "deploy"},
        "binding": {"name": "deploy", "executor": "shell", "config": config},
        "config": config,
        "inputs": [],
        "toolbelt": {"endpoint": "", "token": ""},
    }})
}

/// The text of output `name` in `live`, when it is there.
fn text(live: &ExecutorLiveResult, name: &str) -> Option<String> {
    live.outputs
        .iter()
        .find(|o| o.name == name)
        .map(|o| String::from_utf8_lossy(&o.tail).into_owned())
}

#[tokio::test]
async fn a_running_command_shows_its_output_so_far_and_an_ended_one_is_not_live() {
    let s = Scratch::new("running");
    let ext = Ext::start(&s.state()).await;
    // Prints, waits for the test's go, prints again, then swaps its stderr for a
    // FIFO nobody writes, and ends when told.
    let script = r#"echo "line one"; echo "warming up" >&2
while [ ! -e go ]; do sleep 0.02; done
echo "line two"
rm stderr; mkfifo stderr; touch swapped
while [ ! -e end ]; do sleep 0.02; done
echo "the last line""#;
    ext.call("executor.run", run_request("ex-live", script))
        .await
        .unwrap();
    let dir = s.run_dir("ex-live");

    let live = ext
        .live_until("the first lines", "ex-live", |l| {
            text(l, "stdout").is_some_and(|t| t.contains("line one"))
                && text(l, "stderr").is_some_and(|t| t.contains("warming up"))
        })
        .await;
    assert_eq!(text(&live, "stdout").unwrap(), "line one\n");
    let stdout = &live.outputs[0];
    assert_eq!(
        (
            stdout.name.as_str(),
            stdout.media_type.as_str(),
            stdout.size
        ),
        ("stdout", "text/plain", 9)
    );
    assert_eq!(live.outputs[1].name, "stderr");
    // Only the last bytes asked for; an ask over the limit is refused, naming it.
    let short = ext.live("ex-live", 4).await.unwrap();
    assert_eq!(text(&short, "stdout").unwrap(), "one\n");
    assert_eq!(short.outputs[0].size, 9);
    let e = ext.live("ex-live", 64 * 1024 + 1).await.unwrap_err();
    assert_eq!(e.code(), Some("invalid"), "{e}");
    assert!(e.to_string().contains("65536"), "{e}");

    // Output written later shows too.
    std::fs::write(dir.join("go"), b"").unwrap();
    ext.live_until("the second line", "ex-live", |l| {
        text(l, "stdout").is_some_and(|t| t.contains("line two"))
    })
    .await;

    // A FIFO where stderr was is left out, and does not block the answer.
    within(async {
        while !dir.join("swapped").exists() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    let swapped = ext.live("ex-live", 0).await.unwrap();
    assert_eq!(text(&swapped, "stdout").unwrap(), "line one\nline two\n");
    assert!(text(&swapped, "stderr").is_none(), "{swapped:?}");

    // Once it has ended: not_live; and so is an execution nobody started.
    std::fs::write(dir.join("end"), b"").unwrap();
    let v = ext
        .call(
            "executor.wait",
            json!({"executor": "shell", "execution_id": "ex-live"}),
        )
        .await
        .unwrap();
    let _: ExecutorWaitResult = serde_json::from_value(v).unwrap();
    let e = ext.live("ex-live", 0).await.unwrap_err();
    assert_eq!(e.code(), Some("not_live"), "{e}");
    let e = ext.live("ex-nobody", 0).await.unwrap_err();
    assert_eq!(e.code(), Some("not_live"), "{e}");
}
