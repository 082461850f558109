//! A test's fault point: `OC_GIT_FAULT=pause_after_add:<dir>` makes one acquisition
//! stop between `git worktree add` (or the clone) and the record that says the
//! workspace is whole, so a test can SIGKILL the provider, or extrunner, right there.
//!
//! It is one-shot and opt-in twice over: the variable must reach the provider (the
//! operator's `settings.extensions.git.pass_env` grants it), and the pause happens
//! only while `<dir>/armed` exists, which it renames to `<dir>/taken` before writing
//! its pid to `<dir>/paused`. Paused, it waits until it is killed or its parent
//! (extrunner) is gone.

use std::path::Path;
use std::time::Duration;

/// The variable naming the fault.
pub const FAULT_ENV: &str = "OC_GIT_FAULT";

/// Pauses here if the fault names `point` and is armed.
pub async fn pause_point(point: &str) {
    let Ok(spec) = std::env::var(FAULT_ENV) else {
        return;
    };
    let Some((at, dir)) = spec.split_once(':') else {
        return;
    };
    let dir = Path::new(dir);
    if at != point || std::fs::rename(dir.join("armed"), dir.join("taken")).is_err() {
        return;
    }
    let parent = std::os::unix::process::parent_id();
    let _ = std::fs::write(dir.join("paused"), std::process::id().to_string());
    eprintln!("git: {FAULT_ENV}={spec}: paused at {point}");
    loop {
        tokio::time::sleep(Duration::from_millis(50)).await;
        if std::os::unix::process::parent_id() != parent {
            std::process::exit(1);
        }
    }
}
