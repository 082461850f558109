//! The transport scenario: one workload, run over a real child process, by the
//! transport compatibility suite (`tests/transport.rs`) and the benchmark
//! (`cargo run --release -p bench -- transport`).
//!
//! The extension side ([`extension`]) is built on the SDK; the host side
//! ([`host`]) is what a host would serve back (echo, artifacts, ingress push) and
//! a launcher for the child process.

use protocol::wire;
use sdk::{Ctx, Extension};
use serde::Deserialize;
use serde_json::{json, Value};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use tokio::sync::Notify;

pub mod host;

/// The scenario's manifest.
pub const MANIFEST: &str = include_str!("../open-conduit-extension.json");

/// The argument that makes the scenario binary a raw pipe echo (the floor the
/// benchmark measures against): each line read from stdin is written back.
pub const PIPE_ECHO_ARG: &str = "--pipe-echo";

/// The argument, followed by a number of milliseconds, that sets how long calls
/// in flight at `shutdown` may run on before they are cancelled
/// ([`sdk::Extension::shutdown_grace`]; the SDK's default otherwise).
pub const SHUTDOWN_GRACE_ARG: &str = "--shutdown-grace-ms";

/// The artifact chunk size the scenario uploads in (the protocol's maximum).
pub const CHUNK_BYTES: usize = 256 * 1024;

#[derive(Deserialize)]
struct Fail {
    code: String,
    message: String,
}

#[derive(Deserialize)]
struct Count {
    n: u64,
}

#[derive(Deserialize)]
struct Upload {
    bytes: usize,
    #[serde(default = "default_chunk")]
    chunk: usize,
}

fn default_chunk() -> usize {
    CHUNK_BYTES
}

fn host_failed(e: protocol::CallError) -> protocol::RpcError {
    protocol::RpcError::authored("host_call_failed", e.to_string())
}

/// A latch: once released, every waiter, now and later, goes on.
#[derive(Default)]
struct Release {
    done: AtomicBool,
    notify: Notify,
}

impl Release {
    fn release(&self) {
        self.done.store(true, Ordering::SeqCst);
        self.notify.notify_waiters();
    }

    async fn wait(&self) {
        loop {
            let notified = self.notify.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if self.done.load(Ordering::SeqCst) {
                return;
            }
            notified.await;
        }
    }
}

/// The scenario extension.
pub fn extension() -> Result<Extension, sdk::SdkError> {
    let release = Arc::new(Release::default());
    let released = release.clone();
    let ext = Extension::new(MANIFEST)?
        .method("scenario.echo", |_ctx: Ctx, params: Value| async move {
            Ok(params)
        })
        .method("scenario.fail", |_ctx: Ctx, p: Fail| async move {
            Err::<Value, _>(protocol::RpcError::authored(&p.code, p.message))
        })
        .method("scenario.sleep", |_ctx: Ctx, ms: u64| async move {
            tokio::time::sleep(std::time::Duration::from_millis(ms)).await;
            Ok(ms)
        })
        // n nested extension-to-host calls while serving this one request.
        .method("scenario.callbacks", |ctx: Ctx, p: Count| async move {
            let mut sum = 0u64;
            for i in 0..p.n {
                let v = ctx
                    .host
                    .call("scenario.host_echo", &json!(i))
                    .await
                    .map_err(host_failed)?;
                sum += v.as_u64().unwrap_or(0);
            }
            Ok(json!({ "calls": p.n, "sum": sum }))
        })
        // An artifact of `bytes` uploaded in acknowledged chunks.
        .method("scenario.upload", |ctx: Ctx, p: Upload| async move {
            upload(&ctx, p.bytes, p.chunk.clamp(1, CHUNK_BYTES)).await
        })
        // Starts an extension-initiated push and answers at once; the push's answer
        // is reported back with the notification `scenario.push_answered`.
        .method("scenario.push", |ctx: Ctx, p: Count| async move {
            tokio::spawn(async move {
                let events: Vec<Value> = (0..p.n)
                    .map(|i| json!({"family": "scenario.ping", "delivery_id": format!("d{i}")}))
                    .collect();
                let answer = ctx
                    .host
                    .call(
                        "ingress.push",
                        &json!({"source": "scenario", "events": events}),
                    )
                    .await;
                let report = match answer {
                    Ok(v) => json!({"ok": v}),
                    Err(e) => json!({"error": e.to_string()}),
                };
                let _ = ctx.host.notify("scenario.push_answered", &report);
            });
            Ok(json!({"started": true}))
        })
        // Waits until cancelled; the cancellation is reported to the host with
        // `scenario.cancel_seen` as the handler is dropped.
        .method("scenario.wait_cancel", |ctx: Ctx, tag: Value| async move {
            struct Seen(sdk::Host, Value);
            impl Drop for Seen {
                fn drop(&mut self) {
                    let _ = self.0.notify("scenario.cancel_seen", &self.1);
                }
            }
            let _seen = Seen(ctx.host.clone(), tag);
            ctx.cancel.cancelled().await;
            Ok(Value::Null)
        })
        // Writes to stdout from this process and from a child that inherits it.
        .method(
            "scenario.stray_stdout",
            |_ctx: Ctx, lines: u64| async move {
                for i in 0..lines {
                    println!("stray line {i} that must not reach the protocol stream");
                }
                let status = tokio::process::Command::new("sh")
                    .args(["-c", "echo stray from a child process; cat"])
                    .status()
                    .await
                    .map_err(protocol::RpcError::unauthored)?;
                Ok(json!({"lines": lines, "child_ok": status.success()}))
            },
        )
        // Blocks until the host sends the notification `scenario.release`.
        // Says `scenario.blocked` to the host once it is being served.
        .method("scenario.block", move |ctx: Ctx, _p: Value| {
            let release = release.clone();
            async move {
                let _ = ctx.host.notify("scenario.blocked", &Value::Null);
                release.wait().await;
                Ok(json!("released"))
            }
        })
        // Dies mid-call, without answering.
        .method("scenario.crash", |_ctx: Ctx, code: i32| async move {
            std::process::exit(code);
            #[allow(unreachable_code)]
            Ok(Value::Null)
        })
        .on_notification(move |_host, method, _params| {
            if method == "scenario.release" {
                released.release();
            }
        });
    Ok(ext)
}

/// `len` bytes of a repeating 251-byte pattern, so a receiver can check every
/// byte arrived in place.
pub fn pattern(len: usize) -> Vec<u8> {
    let block: Vec<u8> = (0..251u8).collect();
    let mut data = Vec::with_capacity(len);
    while data.len() < len {
        let n = (len - data.len()).min(block.len());
        data.extend_from_slice(&block[..n]);
    }
    data
}

async fn upload(ctx: &Ctx, bytes: usize, chunk: usize) -> Result<Value, protocol::RpcError> {
    let data = pattern(bytes);
    let create = wire::ArtifactCreateParams {
        name: "scenario.bin".into(),
        media_type: "application/octet-stream".into(),
        ..Default::default()
    };
    if chunk == CHUNK_BYTES {
        let committed = ctx
            .host
            .upload_artifact(&create, &data)
            .await
            .map_err(host_failed)?;
        let chunks = bytes.div_ceil(CHUNK_BYTES);
        return Ok(
            json!({"artifact_id": committed.artifact_id, "chunks": chunks, "committed": committed}),
        );
    }
    // Smaller chunks, by hand.
    let id = ctx
        .host
        .call_typed(&create)
        .await
        .map_err(host_failed)?
        .artifact_id;
    let mut chunks = 0u64;
    for (n, piece) in data.chunks(chunk).enumerate() {
        let write = wire::ArtifactWriteParams {
            artifact_id: id.clone(),
            offset: (n * chunk) as u64,
            data: piece.to_vec(),
        };
        ctx.host.call_typed(&write).await.map_err(host_failed)?;
        chunks += 1;
    }
    let commit = wire::ArtifactCommitParams {
        artifact_id: id.clone(),
        size: bytes as u64,
    };
    let committed = ctx.host.call_typed(&commit).await.map_err(host_failed)?;
    Ok(json!({"artifact_id": id, "chunks": chunks, "committed": committed}))
}

/// A raw pipe echo with no protocol at all: the floor of a round trip.
pub fn pipe_echo() -> i32 {
    use std::io::{BufRead, Write};
    let stdin = std::io::stdin();
    let mut out = std::io::stdout().lock();
    let mut line = String::new();
    let mut input = stdin.lock();
    loop {
        line.clear();
        match input.read_line(&mut line) {
            Ok(0) | Err(_) => return 0,
            Ok(_) => {
                if out
                    .write_all(line.as_bytes())
                    .and_then(|_| out.flush())
                    .is_err()
                {
                    return 0;
                }
            }
        }
    }
}

/// The scenario binary's main: the extension, or with [`PIPE_ECHO_ARG`] the raw
/// pipe echo.
pub fn main_entry(args: &[String]) -> i32 {
    if args.iter().any(|a| a == PIPE_ECHO_ARG) {
        return pipe_echo();
    }
    let grace = match args.iter().position(|a| a == SHUTDOWN_GRACE_ARG) {
        None => None,
        Some(i) => match args.get(i + 1).and_then(|ms| ms.parse::<u64>().ok()) {
            Some(ms) => Some(std::time::Duration::from_millis(ms)),
            None => {
                eprintln!("scenario: {SHUTDOWN_GRACE_ARG} needs a number of milliseconds");
                return 2;
            }
        },
    };
    match extension() {
        Ok(ext) => sdk::run(match grace {
            Some(grace) => ext.shutdown_grace(grace),
            None => ext,
        }),
        Err(e) => {
            eprintln!("scenario: {e}");
            1
        }
    }
}
