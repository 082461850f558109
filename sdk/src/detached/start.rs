//! Starting a detached run's wrapper, the step every executor that runs a command
//! detached (shell, claude-code, codex) takes the same way: `exe WRAP_ARG DIR NONCE`
//! in the run directory with exactly the run's environment, its stderr into a
//! `wrapper.log` made afresh, its stdin a pipe; `meta.json` written with the pid and
//! start time read right after the spawn (before anything can reap the child, so they
//! name it); then the executor's recovery metadata persisted. Only once both are
//! done does the executor send `go` on the pipe: a failure of either drops the pipe,
//! the wrapper reads EOF and exits having started nothing, and the failure is
//! answered.

use super::{start_time, write_json_for_boot, Meta, WRAPPER_LOG};
use crate::nofollow::Dir;
use protocol::{Code, RpcError};
use std::ffi::OsStr;
use std::future::Future;
use std::path::Path;
use std::process::Stdio;
use tokio::process::{Child, ChildStdin};

/// A wrapper started and recorded.
#[derive(Debug)]
pub struct Started {
    /// Its pid.
    pub pid: i32,
    /// Its start time (`/proc/PID/stat`), read right after the spawn.
    pub start: u64,
    /// The pipe to its stdin: `go` first, then whatever the executor sends.
    pub stdin: Option<ChildStdin>,
    /// The child, to reap once the executor is done with the pipe.
    pub child: Child,
}

fn internal(what: String) -> RpcError {
    RpcError::new(Code::Internal, what)
}

/// Starts the wrapper `exe wrap_arg dir nonce` (`what` names it in errors), writes
/// `meta.json`, then runs `persist(pid, start)`; a failure of either stops the
/// wrapper before it starts anything.
pub async fn start_wrapper<K, V, F, Fut>(
    exe: &Path,
    wrap_arg: &str,
    dir: &Path,
    nonce: &str,
    env: impl IntoIterator<Item = (K, V)>,
    what: &str,
    persist: F,
) -> Result<Started, RpcError>
where
    K: AsRef<OsStr>,
    V: AsRef<OsStr>,
    F: FnOnce(i32, u64) -> Fut,
    Fut: Future<Output = Result<(), RpcError>>,
{
    let log = Dir::open(dir)
        .and_then(|d| d.create_new(WRAPPER_LOG, 0o600))
        .map_err(|e| internal(format!("creating {WRAPPER_LOG}: {e}")))?;
    let mut child = tokio::process::Command::new(exe)
        .arg(wrap_arg)
        .arg(dir)
        .arg(nonce)
        .current_dir(dir)
        .env_clear()
        .envs(env)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(log)
        .kill_on_drop(false)
        .spawn()
        .map_err(|e| internal(format!("cannot start the {what} wrapper: {e}")))?;
    let pid = child
        .id()
        .and_then(|p| i32::try_from(p).ok())
        .ok_or_else(|| internal("the wrapper has no pid".into()))?;
    let start = start_time(pid);
    let stdin = child.stdin.take();
    let meta = Meta {
        pid,
        pgid: 0,
        nonce: nonce.to_owned(),
        started_at: String::new(),
        start,
    };
    let recorded = match write_json_for_boot(dir, super::META, &meta) {
        Err(e) => Err(internal(format!("writing meta.json: {e}"))),
        Ok(()) => persist(pid, start).await,
    };
    if let Err(e) = recorded {
        // No go: the wrapper reads EOF and exits without starting anything.
        drop(stdin);
        let _ = child.wait().await;
        return Err(e);
    }
    Ok(Started {
        pid,
        start,
        stdin,
        child,
    })
}
