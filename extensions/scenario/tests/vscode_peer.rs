//! A third-party peer: a host written with the stock `vscode-jsonrpc` npm package
//! (`tests/peers/vscode-host.js`) drives the real scenario extension built from
//! this workspace. It checks the handshake, a call, and that a call it cancels
//! the library's way (`$/cancelRequest`, the LSP name) comes back `-32800`
//! instead of hanging.
//!
//! It needs `node` and `npm ci --prefix extensions/scenario/tests/peers` (CI runs
//! both). Without them it says why on stderr and skips, unless
//! `OC_REQUIRE_PEERS=1`, under which a missing peer fails.

#![allow(clippy::unwrap_used)]

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

const EXE: &str = env!("CARGO_BIN_EXE_oc-scenario-extension");

/// Turns a hang into a failure; never a timing assertion.
const HANG: Duration = Duration::from_secs(120);

fn peers() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/peers")
}

/// Say why the test cannot run, where the test harness does not swallow it, and
/// whether to skip (`true`) or fail.
fn cannot_run(why: &str) -> bool {
    let fix = "install Node.js and run `npm ci --prefix extensions/scenario/tests/peers`";
    if std::env::var_os("OC_REQUIRE_PEERS").is_some_and(|v| v == "1") {
        panic!("vscode_peer cannot run, and OC_REQUIRE_PEERS=1 requires it: {why} ({fix})");
    }
    // Straight to the process's stderr: libtest captures `eprintln!`.
    let _ = writeln!(std::io::stderr(), "vscode_peer: SKIPPED: {why} ({fix})");
    true
}

#[tokio::test]
async fn a_vscode_jsonrpc_host_initializes_calls_and_cancels_with_cancel_request() {
    let dir = peers();
    if !dir
        .join("node_modules/vscode-jsonrpc/package.json")
        .is_file()
        && cannot_run(&format!(
            "{} has no node_modules/vscode-jsonrpc",
            dir.display()
        ))
    {
        return;
    }
    let child = tokio::process::Command::new("node")
        .arg(dir.join("vscode-host.js"))
        .arg(EXE)
        .current_dir(&dir)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn();
    let child = match child {
        Ok(child) => child,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            if cannot_run("`node` is not on PATH") {
                return;
            }
            unreachable!("cannot_run panics unless it skips")
        }
        Err(e) => panic!("cannot start node: {e}"),
    };
    let out = tokio::time::timeout(HANG, child.wait_with_output())
        .await
        .expect("the vscode-jsonrpc host hung (a cancelled call never answered?)")
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "the vscode-jsonrpc host failed ({}):\n{stdout}\n{stderr}",
        out.status
    );
    for expected in [
        "ok: initialize protocol_version=1 manifest=scenario",
        r#"ok: scenario.echo answered {"hello":"vscode-jsonrpc"}"#,
        "ok: cancelled scenario.wait_cancel answered -32800",
        r#"ok: the handler saw the cancellation of {"tag":"vscode"}"#,
        "ok: still serving after the cancel",
        "ok: shutdown, and the extension exited 0",
    ] {
        assert!(
            stdout.lines().any(|l| l.starts_with(expected)),
            "missing {expected:?} in:\n{stdout}\n{stderr}"
        );
    }
}
