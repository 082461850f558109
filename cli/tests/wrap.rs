#![allow(clippy::unwrap_used)]
//! `open-conduit-wrap`, the wrapper of a detached run as a program of its own: the
//! executors find it beside the command (`sdk::wrapper::program`), and it is the
//! wrapper the multi-call command is, for each executor's wrap argument.

use serde_json::{json, Value};
use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};

const BIN: &str = env!("CARGO_BIN_EXE_open-conduit");
const WRAP: &str = env!("CARGO_BIN_EXE_open-conduit-wrap");

#[test]
fn the_executors_find_the_small_program_beside_the_command() {
    assert_eq!(sdk::wrapper::program(Path::new(BIN)), Path::new(WRAP));
    // Where it is missing, the command itself is the wrapper.
    let alone = Path::new("/nonexistent/bin/open-conduit");
    assert_eq!(sdk::wrapper::program(alone), alone);
}

/// Runs `program wrap_arg dir nonce` on a run directory whose spec runs `script`
/// with `sh -c`, sending `go`; answers the exit status, the `status` record and
/// the command's stdout.
fn wrap(program: &str, wrap_arg: &str, script: &str) -> (i32, Value, String) {
    let dir = tempdir();
    let nonce = "0123456789abcdef0123456789abcdef";
    let spec = json!({"execution_id": "exe_1", "argv": ["sh", "-c", script],
                      "cwd": dir.display().to_string(), "grace_s": 1, "nonce": nonce});
    std::fs::write(dir.join("spec.json"), spec.to_string()).unwrap();
    let mut child = Command::new(program)
        .args([wrap_arg, dir.to_str().unwrap(), nonce])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(b"go\n").unwrap();
    let code = child.wait().unwrap().code().unwrap_or(-1);
    let status: Value =
        serde_json::from_slice(&std::fs::read(dir.join("status")).unwrap()).unwrap();
    let out = std::fs::read_to_string(dir.join("stdout")).unwrap_or_default();
    let _ = std::fs::remove_dir_all(&dir);
    (code, status, out)
}

fn tempdir() -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "oc-wrap-{}-{}",
        std::process::id(),
        protocol::random::hex(6).unwrap()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[test]
fn the_small_program_runs_a_shell_run_as_the_command_does() {
    for program in [WRAP, BIN] {
        let (code, status, out) = wrap(program, "__wrap", "echo ran; exit 3");
        assert_eq!(code, 0, "{program}: the wrapper's own exit status");
        assert_eq!(status["exit_code"], 3, "{program}: {status}");
        assert_eq!(out, "ran\n", "{program}");
    }
}

#[test]
fn the_small_program_refuses_an_unknown_wrap_argument() {
    let out = Command::new(WRAP)
        .args(["__nothing", "/tmp", "x"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    for arg in ["__wrap", "__wrap-claude-code", "__wrap-codex"] {
        assert!(err.contains(arg), "{err}");
    }
}
