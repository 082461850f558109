//! A job: one child process in a process group of its own, and what this
//! extension keeps to talk to it.
//!
//! Nothing here knows about the protocol. A [`Job`] is started with
//! [`Job::spawn`], fed lines on its stdin with [`Job::feed`] and [`Job::write`], signalled
//! with [`Job::signal`], and observed with [`Job::exited`]; [`group_members`]
//! reads `/proc` to tell whether any process of its group is left.

use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::sync::Arc;
use tokio::io::AsyncWriteExt;
use tokio::process::ChildStdin;
use tokio::sync::{watch, Mutex, OwnedMutexGuard};

/// How a job's leader ended, once it has: its wait status, or why it could not
/// be waited for.
pub type Exit = Option<Result<ExitStatus, String>>;

/// What a job needs to start.
#[derive(Debug, Clone)]
pub struct Start<'a> {
    /// The argv (not empty).
    pub argv: &'a [String],
    /// The run directory: the job's working directory, where its output goes.
    pub run_dir: &'a Path,
    /// Variables set for the job, over this process's own environment.
    pub env: Vec<(String, String)>,
}

/// A started job.
#[derive(Debug)]
pub struct Job {
    /// The leader's pid, which is also the process group's id.
    pub pid: i32,
    /// The run directory (absolute when the runs directory is).
    pub run_dir: PathBuf,
    /// The write end of the job's stdin. Kept open for the job's whole life so
    /// injected inputs can reach it; the mutex keeps lines whole and in order.
    stdin: Arc<Mutex<Option<ChildStdin>>>,
    /// Set once by the task that waits for the leader.
    exit: watch::Receiver<Exit>,
}

impl Job {
    /// Starts the job: `argv[0]` in a new process group (setpgid), stdin a
    /// pipe, stdout and stderr into `stdout` and `stderr` in the run
    /// directory. A task waits for the leader's exit status from now on (so
    /// the child is always reaped, whether or not anyone waits).
    pub fn spawn(start: Start<'_>) -> std::io::Result<Job> {
        let (program, args) = start
            .argv
            .split_first()
            .ok_or_else(|| std::io::Error::other("the command is empty"))?;
        let stdout = std::fs::File::create(start.run_dir.join("stdout"))?;
        let stderr = std::fs::File::create(start.run_dir.join("stderr"))?;
        let mut command = std::process::Command::new(program);
        // Default signal dispositions, whatever this extension was started with.
        sdk::signals::reset_on_exec(&mut command);
        let mut child = tokio::process::Command::from(command)
            .args(args)
            .current_dir(start.run_dir)
            .envs(start.env)
            .stdin(Stdio::piped())
            .stdout(stdout)
            .stderr(stderr)
            // Its own process group: signals reach the job and everything it
            // starts, and never this extension.
            .process_group(0)
            // The job is detached from this handle: dropping it kills nothing.
            .kill_on_drop(false)
            .spawn()?;
        let pid = child
            .id()
            .and_then(|p| i32::try_from(p).ok())
            .ok_or_else(|| std::io::Error::other("the job has no pid"))?;
        let stdin = Arc::new(Mutex::new(child.stdin.take()));
        let (tx, exit) = watch::channel(None);
        tokio::spawn(async move {
            // The exit status, never the end of the output: a grandchild that
            // keeps stdout open does not hold the job.
            let status = child.wait().await.map_err(|e| e.to_string());
            tx.send_replace(Some(status));
        });
        Ok(Job {
            pid,
            run_dir: start.run_dir.to_path_buf(),
            stdin,
            exit,
        })
    }

    /// The leader's exit, if it has ended.
    pub fn exit_now(&self) -> Exit {
        self.exit.borrow().clone()
    }

    /// Waits for the leader to end and returns its wait status.
    pub async fn exited(&self) -> Result<ExitStatus, String> {
        let mut exit = self.exit.clone();
        let seen = exit
            .wait_for(Option::is_some)
            .await
            .map_err(|_| "the task waiting for the job is gone".to_string())?;
        seen.clone()
            .unwrap_or_else(|| Err("the job's exit was not recorded".to_string()))
    }

    /// Writes `lines` to the job's stdin in the background: the stdin lock is
    /// taken before this returns, so any later write queues behind them. For
    /// the run's own inputs, which a slow reader must not make run wait for.
    pub async fn feed(&self, lines: Vec<String>) {
        let stdin = self.stdin.clone().lock_owned().await;
        tokio::spawn(async move {
            // A job that never reads its inputs may end first (EPIPE): fine.
            let _ = write_lines(stdin, lines).await;
        });
    }

    /// Writes `lines` to the job's stdin and returns once they are written.
    /// Fails once the job has closed its stdin or ended (EPIPE).
    pub async fn write(&self, lines: Vec<String>) -> std::io::Result<()> {
        write_lines(self.stdin.clone().lock_owned().await, lines).await
    }

    /// Sends `signal` to the job's whole process group. A group with no
    /// process left is not signalled: its id might be reused by now.
    pub fn signal(&self, signal: nix::sys::signal::Signal) -> Result<(), String> {
        if group_members(self.pid).is_empty() {
            return Ok(());
        }
        match nix::sys::signal::killpg(nix::unistd::Pid::from_raw(self.pid), signal) {
            Ok(()) | Err(nix::errno::Errno::ESRCH) => Ok(()),
            Err(e) => Err(format!("{signal} to process group {}: {e}", self.pid)),
        }
    }
}

/// Writes each line and a newline as one whole (the lock is held throughout).
async fn write_lines(
    mut stdin: OwnedMutexGuard<Option<ChildStdin>>,
    lines: Vec<String>,
) -> std::io::Result<()> {
    let pipe = stdin
        .as_mut()
        .ok_or_else(|| std::io::Error::from(std::io::ErrorKind::BrokenPipe))?;
    for line in lines {
        pipe.write_all(line.as_bytes()).await?;
        pipe.write_all(b"\n").await?;
    }
    pipe.flush().await
}

/// The live processes (not zombies) of process group `pgid`, read from
/// `/proc/<pid>/stat`.
pub fn group_members(pgid: i32) -> Vec<i32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let mut members = Vec::new();
    for entry in entries.flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|n| n.parse().ok()) else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue; // it ended meanwhile
        };
        // `pid (comm) state ppid pgrp ...`; comm may hold spaces and parentheses.
        let Some(after) = stat.rfind(')').map(|i| &stat[i + 1..]) else {
            continue;
        };
        let mut fields = after.split_whitespace();
        let state = fields.next();
        let pgrp = fields.nth(1).and_then(|g| g.parse::<i32>().ok());
        if pgrp == Some(pgid) && state != Some("Z") {
            members.push(pid);
        }
    }
    members
}

/// Describes a failed exit: `exited with status 3`, `killed by signal 2 (SIGINT)`;
/// `None` for success.
pub fn describe_failure(status: ExitStatus) -> Option<String> {
    if status.success() {
        return None;
    }
    if let Some(code) = status.code() {
        return Some(format!("exited with status {code}"));
    }
    match status.signal() {
        Some(n) => match nix::sys::signal::Signal::try_from(n) {
            Ok(sig) => Some(format!("killed by signal {n} ({sig})")),
            Err(_) => Some(format!("killed by signal {n}")),
        },
        None => Some(format!("ended with wait status {status}")),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn failures_are_described_from_the_wait_status() {
        assert_eq!(describe_failure(ExitStatus::from_raw(0)), None);
        assert_eq!(
            describe_failure(ExitStatus::from_raw(3 << 8)).unwrap(),
            "exited with status 3"
        );
        assert_eq!(
            describe_failure(ExitStatus::from_raw(2)).unwrap(),
            "killed by signal 2 (SIGINT)"
        );
    }

    #[test]
    fn this_process_is_in_its_own_group() {
        let pgid = nix::unistd::getpgrp().as_raw();
        let me = i32::try_from(std::process::id()).unwrap();
        assert!(group_members(pgid).contains(&me));
    }
}
