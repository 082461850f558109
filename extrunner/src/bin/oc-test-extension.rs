//! The extension the extrunner tests supervise, on the SDK. Its behaviour is
//! chosen by the variables the tests grant it:
//!
//! - `OC_TEST_MODE`: `serve` (the default), `crash_on_start` (exits 3 before
//!   serving, unless the file named by `OC_TEST_FLIP_FILE` exists),
//!   `wrong_manifest` (serves a manifest that differs from its file),
//!   `fork_stubborn_child` (serves, after starting a grandchild that ignores
//!   SIGTERM), `silent` (never answers anything), `foreign_version` (a
//!   hand-written JSON-RPC loop that answers `initialize` with protocol version 7,
//!   which no host offers), `spec_bound` (the same loop answering version 1 and
//!   `testext.echo`, saying nothing of larger messages: the spec's 16 MiB bound).
//!
//! The mode may also be the first argument (a package's `command`).
//!
//! Methods: `testext.echo` (its params), `testext.env` (its environment as an
//! object), `testext.crash` (exits 3 without answering), `testext.pid` (its pid,
//! process group and the stubborn grandchild's pid), `testext.stderr`
//! (`{lines, text}`: writes `text` to stderr `lines` times), `testext.hang_up`
//! (closes its end of the protocol's stdout pipe, never answering, and keeps
//! running after the connection ends, until a signal ends it),
//! `testext.render_owned` (calls the host's `event.render_owned` with its params;
//! answers `{ok}` or `{error, message}`).
//!
//! It owns the family `testext.note` and answers `event.render` for it: `rendered by
//! testext: <type> <data.title> (work <work_id>, connection <connection>, max
//! <max_bytes>)`, refused (`invalid`) when the payload's `fail` is true, and with
//! `data.repeat` copies of `data.text` appended (past any bound) when given.

use sdk::{Ctx, Extension};
use serde::Deserialize;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::os::fd::{AsFd, FromRawFd, IntoRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::OnceLock;

/// The manifest, also the file the tests pass as the package's.
const MANIFEST: &str = include_str!("testext.json");
/// Another release's manifest, served in `wrong_manifest` mode.
const OTHER_MANIFEST: &str = include_str!("testext-other.json");

#[derive(Deserialize)]
struct Lines {
    lines: u64,
    text: String,
}

/// What fd 1 was at start (the protocol's stdout pipe), as `/proc/self/fd` names it.
static STDOUT_LINK: OnceLock<PathBuf> = OnceLock::new();
/// Set by `testext.hang_up`: keep running once the connection has ended.
static LINGER: AtomicBool = AtomicBool::new(false);

/// Replace every descriptor of the protocol's stdout pipe with `/dev/null`: the
/// host sees EOF while this process goes on. Answers how many were replaced.
fn hang_up() -> usize {
    let Some(target) = STDOUT_LINK.get() else {
        return 0;
    };
    let Ok(null) = std::fs::File::options().write(true).open("/dev/null") else {
        return 0;
    };
    let Ok(entries) = std::fs::read_dir("/proc/self/fd") else {
        return 0;
    };
    let mut replaced = 0;
    for entry in entries.flatten() {
        let Some(fd) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<i32>().ok())
        else {
            continue;
        };
        if fd <= 2 || std::fs::read_link(entry.path()).ok().as_deref() != Some(target.as_path()) {
            continue;
        }
        // SAFETY: `fd` is open (just listed); it is borrowed as an OwnedFd only
        // for dup2 and released again without being closed.
        let mut owned = unsafe { OwnedFd::from_raw_fd(fd) };
        if nix::unistd::dup2(null.as_fd(), &mut owned).is_ok() {
            replaced += 1;
        }
        let _ = owned.into_raw_fd();
    }
    replaced
}

/// Serve by hand, not on the SDK: `initialize` answered with `version` whatever the
/// host offers and no `max_message_bytes` (so the spec's 16 MiB bound), an empty
/// `configure` and `shutdown`, and `<anything>.echo`.
fn hand_written(version: u32) -> i32 {
    let Ok(rt) = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    else {
        return 1;
    };
    rt.block_on(async {
        let handler = protocol::FnHandler(move |request: protocol::Request| async move {
            match request.method.as_str() {
                "initialize" => {
                    // The package's own manifest file when it has one (the host
                    // compares the two), else testext's.
                    let text = std::fs::read_to_string(protocol::manifest::MANIFEST_FILE)
                        .unwrap_or_else(|_| MANIFEST.to_owned());
                    let manifest: Value =
                        serde_json::from_str(&text).map_err(protocol::RpcError::unauthored)?;
                    Ok(json!({"protocol_version": version, "manifest": manifest}))
                }
                "configure" | "shutdown" => Ok(json!({})),
                m if m.ends_with(".echo") => request.params_value(),
                other => Err(protocol::RpcError::method_not_found(other)),
            }
        });
        let peer = protocol::connect(
            tokio::io::stdin(),
            tokio::io::stdout(),
            handler,
            protocol::Options::named("host of testext"),
        );
        peer.finished(std::time::Duration::from_secs(5)).await;
    });
    0
}

fn main() {
    std::process::exit(run());
}

fn run() -> i32 {
    if let Ok(link) = std::fs::read_link(Path::new("/proc/self/fd/1")) {
        let _ = STDOUT_LINK.set(link);
    }
    let mut mode = std::env::args()
        .nth(1)
        .or_else(|| std::env::var("OC_TEST_MODE").ok())
        .unwrap_or_else(|| "serve".into());
    if mode == "crash_on_start" {
        let flipped = std::env::var_os("OC_TEST_FLIP_FILE")
            .is_some_and(|f| std::path::Path::new(&f).exists());
        if !flipped {
            eprintln!("testext: crashing on start, as asked");
            return 3;
        }
        mode = "serve".into();
    }
    if mode == "silent" {
        eprintln!("testext: silent, as asked");
        loop {
            std::thread::sleep(std::time::Duration::from_secs(3600));
        }
    }
    if mode == "foreign_version" {
        return hand_written(7);
    }
    if mode == "spec_bound" {
        return hand_written(1);
    }
    let manifest = if mode == "wrong_manifest" {
        OTHER_MANIFEST
    } else {
        MANIFEST
    };
    let mut stubborn: Option<u32> = None;
    if mode == "fork_stubborn_child" {
        match std::process::Command::new("/bin/sh")
            .args(["-c", "trap '' TERM; exec sleep 1000"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .spawn()
        {
            Ok(child) => stubborn = Some(child.id()),
            Err(e) => {
                eprintln!("testext: cannot start the stubborn child: {e}");
                return 1;
            }
        }
    }
    eprintln!("testext: serving in mode {mode}");
    let ext = match Extension::new(manifest) {
        Ok(ext) => ext,
        Err(e) => {
            eprintln!("testext: {e}");
            return 1;
        }
    };
    let ext = ext
        // Calls the host back: `kv.commit` a value under `namespace`/`key`, then
        // `kv.get` it; answers what the host said to each.
        .method(
            "testext.kv_roundtrip",
            |ctx: Ctx, params: Value| async move {
                let namespace = params.get("namespace").cloned().unwrap_or(Value::Null);
                let key = params.get("key").cloned().unwrap_or(Value::Null);
                let value = params.get("value").cloned().unwrap_or(Value::Null);
                let mut put = serde_json::json!({"key": key, "value": value});
                let mut get = serde_json::json!({"key": key});
                if !namespace.is_null() {
                    put["namespace"] = namespace.clone();
                    get["namespace"] = namespace;
                }
                let commit = ctx
                    .host
                    .call("kv.commit", &serde_json::json!({"puts": [put]}))
                    .await;
                let read = ctx.host.call("kv.get", &get).await;
                let said = |r: Result<Value, protocol::CallError>| match r {
                    Ok(v) => serde_json::json!({"ok": v}),
                    Err(e) => serde_json::json!({"error": e.code().unwrap_or("transport")}),
                };
                Ok(serde_json::json!({"commit": said(commit), "get": said(read)}))
            },
        )
        // Answers after `ms` milliseconds (an extension that is slow to answer).
        .method("testext.sleep", |_ctx: Ctx, ms: u64| async move {
            tokio::time::sleep(std::time::Duration::from_millis(ms)).await;
            Ok(ms)
        })
        .method("testext.echo", |_ctx: Ctx, params: Value| async move {
            Ok(params)
        })
        .method("testext.env", |_ctx: Ctx, _params: Value| async move {
            let vars: BTreeMap<String, String> = std::env::vars_os()
                .map(|(k, v)| {
                    (
                        k.to_string_lossy().into_owned(),
                        v.to_string_lossy().into_owned(),
                    )
                })
                .collect();
            Ok(json!(vars))
        })
        .method("testext.crash", |_ctx: Ctx, _params: Value| async move {
            eprintln!("testext: crashing mid-call, as asked");
            std::process::exit(3);
            #[allow(unreachable_code)]
            Ok(Value::Null)
        })
        .method("testext.pid", move |_ctx: Ctx, _params: Value| async move {
            Ok(json!({
                "pid": std::process::id(),
                "pgid": nix::unistd::getpgrp().as_raw(),
                "child": stubborn,
            }))
        })
        .method("testext.stderr", |_ctx: Ctx, p: Lines| async move {
            for _ in 0..p.lines {
                eprintln!("{}", p.text);
            }
            Ok(json!({"lines": p.lines}))
        })
        .on::<protocol::wire::EventRenderParams, _, _>(|_ctx: Ctx, p| async move {
            let data = &p.event.payload.data;
            if data["fail"] == true {
                return Err(protocol::RpcError::new(
                    protocol::Code::Invalid,
                    "testext refuses to render this one, as asked",
                ));
            }
            let mut text = format!(
                "rendered by testext: {} {} (work {}, connection {}, max {})",
                p.event.event_type,
                data["title"].as_str().unwrap_or_default(),
                p.work_id,
                p.connection,
                p.max_bytes
            );
            let repeat = data["repeat"].as_u64().unwrap_or(0);
            let piece = data["text"].as_str().unwrap_or_default();
            for _ in 0..repeat.min(1 << 20) {
                text.push_str(piece);
            }
            Ok(protocol::wire::EventRenderResult {
                text,
                truncated: false,
            })
        })
        .method(
            "testext.render_owned",
            |ctx: Ctx, params: Value| async move {
                match ctx.host.call("event.render_owned", &params).await {
                    Ok(v) => Ok(json!({ "ok": v })),
                    Err(e) => Ok(json!({
                        "error": e.code().unwrap_or("transport"),
                        "message": e.to_string(),
                    })),
                }
            },
        )
        .method("testext.hang_up", |_ctx: Ctx, _params: Value| async move {
            LINGER.store(true, Ordering::SeqCst);
            let replaced = hang_up();
            eprintln!("testext: hung up ({replaced} descriptors), running on");
            Ok(json!({"replaced": replaced}))
        });
    let code = sdk::run(ext);
    if LINGER.load(Ordering::SeqCst) {
        eprintln!("testext: the connection ended; lingering until a signal");
        loop {
            std::thread::sleep(std::time::Duration::from_secs(3600));
        }
    }
    code
}
