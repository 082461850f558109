//! Helpers shared by the integration tests: child processes of the test binary itself, and
//! temporary directories.
//!
//! Tests that change the environment or file descriptors of their process run in a child:
//! the test binary re-executed with `--exact NAME`, and `OC_TEST_CHILD=NAME` so that the test
//! `NAME` does its work only there (in the parent run it returns at once).

#![allow(dead_code, clippy::unwrap_used)]

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

pub const CHILD_VAR: &str = "OC_TEST_CHILD";

/// A limit that turns a hang into a failure; never reached by a working test.
pub const HANG: Duration = Duration::from_secs(120);

/// Whether this process is the child run of test `name`.
pub fn is_child(name: &str) -> bool {
    std::env::var(CHILD_VAR).as_deref() == Ok(name)
}

fn child_args(name: &str) -> [String; 4] {
    [
        name.to_owned(),
        "--exact".to_owned(),
        "--nocapture".to_owned(),
        "--test-threads=1".to_owned(),
    ]
}

/// A command running test `name` of this test binary as a child. Its output is piped.
pub fn child(name: &str) -> Command {
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args(child_args(name))
        .env(CHILD_VAR, name)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    cmd
}

/// Like [`child`], but started through `sh`, which sets `var` to the pid of the child (the
/// shell `exec`s the test binary, which keeps the pid): how a supervisor sets `LISTEN_PID` or
/// `WATCHDOG_PID`, without changing the environment of a threaded process after a fork.
pub fn child_with_own_pid(name: &str, var: &str) -> Command {
    let mut cmd = Command::new("/bin/sh");
    cmd.arg("-c")
        .arg(format!("{var}=$$; export {var}; exec \"$0\" \"$@\""))
        .arg(std::env::current_exe().unwrap())
        .args(child_args(name))
        .env(CHILD_VAR, name)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    cmd
}

/// Waits for a spawned child (killing it after [`HANG`]) and collects its output.
pub fn wait(mut child: Child) -> Output {
    let mut out = child.stdout.take();
    let mut err = child.stderr.take();
    let out_reader = std::thread::spawn(move || {
        let mut buf = Vec::new();
        if let Some(o) = out.as_mut() {
            let _ = o.read_to_end(&mut buf);
        }
        buf
    });
    let err_reader = std::thread::spawn(move || {
        let mut buf = Vec::new();
        if let Some(e) = err.as_mut() {
            let _ = e.read_to_end(&mut buf);
        }
        buf
    });
    let start = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if start.elapsed() > HANG {
            let _ = child.kill();
            let _ = child.wait();
            panic!("child process hung for {HANG:?}");
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    Output {
        status,
        stdout: out_reader.join().unwrap(),
        stderr: err_reader.join().unwrap(),
    }
}

/// Runs a child to its end and checks that its one test ran and passed. Returns its stderr.
pub fn run_ok(mut cmd: Command) -> String {
    let output = wait(cmd.spawn().unwrap());
    check_ok(&output)
}

/// Checks that a child's one test ran and passed. Returns its stderr.
pub fn check_ok(output: &Output) -> String {
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success() && stdout.contains("1 passed"),
        "child failed ({}):\n--- stdout\n{stdout}\n--- stderr\n{stderr}",
        output.status
    );
    stderr.into_owned()
}

/// A directory under the system's temporary directory, removed on drop. Its path is short
/// enough for unix socket paths.
pub struct TempDir(PathBuf);

impl TempDir {
    pub fn new(tag: &str) -> TempDir {
        static COUNT: AtomicUsize = AtomicUsize::new(0);
        let n = COUNT.fetch_add(1, Ordering::Relaxed);
        let path = std::env::temp_dir().join(format!("oc-dt-{}-{n}-{tag}", std::process::id()));
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path).unwrap();
        TempDir(path)
    }

    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
