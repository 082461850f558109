//! A detached run's directory and what the extension and its wrapper write in it:
//! the shared part of the executors that run a command detached from their own
//! process (the shell and claude-code executors), each of which adds its own files.
//! The `/proc` reads that tell whether a run's processes are still there are in
//! [`crate::procs`] (re-exported here).
//!
//! | file | written by | when |
//! | --- | --- | --- |
//! | `spec.json` | extension | before the launch: argv, cwd, deadline, grace, nonce |
//! | `wrapper.log` | wrapper | its own complaints (its stderr) |
//! | `meta.json` | extension, then wrapper | right after the spawn: pid, its start time, nonce; once the command started: its pgid too |
//! | `kill` | extension | to ask the wrapper to end the command (interrupt, stop) |
//! | `reserve` | wrapper | before the command starts: room for `status` on a disk that fills up (removed at the end) |
//! | `status` | wrapper | once the command and its group are gone: how it ended |
//! | `result.json` | extension | the result it answered, so that it is answered again identically |
//!
//! Every file is written to a fresh temporary name and renamed, so a reader sees a
//! whole file or none; `status`, `kill` and `result.json` are synced before the
//! rename (they must say the same after a crash of the host), while `spec.json`,
//! `meta.json` and the inputs, which mean nothing once the host restarted (every
//! process they name is gone), are not: a sync is a journal commit on the way to
//! starting the run. `reserve` is allocated (`fallocate`), not written. Every file
//! is opened through [`crate::nofollow`]: never through a symlink, only when it is
//! a regular file, bounded.
//!
//! What the host trusts is not what the run could write. The wrapper's pid and start
//! time are the ones the extension saw at the spawn (kept in its recovery metadata);
//! the command's process group that `meta.json` records is signalled only once
//! `/proc` shows every live member of it in the wrapper's session, started no
//! earlier than the wrapper ([`Launch::owns_group`]), else the run's processes are
//! the wrapper's session's; `status` and `result.json` are trusted because a
//! sandboxed run cannot write its run directory (the executors give it only its own
//! `tmp`), and a `result.json` older than the `status` is not the extension's.

use crate::nofollow::Dir;
pub use crate::procs::{
    group_members, proc_stat, session_members, start_time, wrapper_alive, wrapper_start, ProcStat,
};
use protocol::wire::ExecutorStopResult;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use std::io;
use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

/// The launch spec the wrapper reads.
pub const SPEC: &str = "spec.json";
/// The wrapper's own log.
pub const WRAPPER_LOG: &str = "wrapper.log";
/// Who runs: written by the wrapper once the command started.
pub const META: &str = "meta.json";
/// A request to end the command, with its cause.
pub const KILL: &str = "kill";
/// How the command ended.
pub const STATUS: &str = "status";
/// Room kept for `status` while the command runs: given back to write it when
/// the disk is full.
pub const RESERVE: &str = "reserve";
/// The wait result the extension answered.
pub const RESULT: &str = "result.json";

/// Why the extension (or the wrapper for it) ended the command.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Cause {
    /// The binding's `deadline_s` passed.
    Deadline,
    /// `executor.interrupt`.
    Interrupt,
    /// `executor.stop`.
    Stop,
}

/// The launch: what the wrapper runs and how it bounds it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Spec {
    /// The Execution.
    pub execution_id: String,
    /// Its Work.
    #[serde(default)]
    pub work_id: String,
    /// The argv.
    pub argv: Vec<String>,
    /// The absolute working directory.
    pub cwd: String,
    /// The deadline, in seconds from the command's start.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deadline_s: Option<u64>,
    /// Seconds between SIGTERM and SIGKILL.
    pub grace_s: u64,
    /// The nonce the wrapper is started with (its argv carries it too).
    pub nonce: String,
}

/// Who runs: the wrapper's pid, the command's process group, the nonce.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Meta {
    /// The wrapper's pid (a session leader).
    pub pid: i32,
    /// The command's process group (its pid); 0 when it never started.
    pub pgid: i32,
    /// The nonce.
    pub nonce: String,
    /// When the command started (RFC 3339, UTC).
    pub started_at: String,
    /// The wrapper's start time ([`ProcStat::start`]), recorded by the extension
    /// right after the spawn and kept by the wrapper; 0 in metadata of an earlier
    /// release.
    #[serde(default)]
    pub start: u64,
}

/// A request to end the command.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KillRequest {
    /// Why.
    pub cause: Cause,
    /// The reason given with an interrupt, for the record.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub reason: String,
}

/// How the command ended.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Status {
    /// Its exit code, when it exited.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
    /// The signal that killed it, when one did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signal: Option<i32>,
    /// Why it was killed, when the executor killed it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cause: Option<Cause>,
    /// The reason given with an interrupt.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub reason: String,
    /// The deadline that killed it, for the message.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deadline_s: Option<u64>,
    /// Why there is no exit to report (the command could not start, or its
    /// wrapper was lost).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub error: String,
    /// When it ended (RFC 3339, UTC).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub ended_at: String,
}

impl Status {
    /// How the process ended, in words: `exited with status 3`,
    /// `killed by signal 9 (SIGKILL)`.
    pub fn how(&self) -> String {
        match (self.exit_code, self.signal) {
            (Some(code), _) => format!("exited with status {code}"),
            (None, Some(signal)) => match nix::sys::signal::Signal::try_from(signal) {
                Ok(s) => format!("killed by signal {signal} ({})", s.as_str()),
                Err(_) => format!("killed by signal {signal}"),
            },
            (None, None) => "ended with an unknown status".to_string(),
        }
    }

    /// True for a clean exit (status 0) that nobody caused.
    pub fn succeeded(&self) -> bool {
        self.error.is_empty() && self.cause.is_none() && self.exit_code == Some(0)
    }

    /// The failure in words (`exited with status 3`, `killed by deadline (30 s):
    /// killed by signal 15 (SIGTERM)`), or `None` for a success.
    pub fn failure(&self) -> Option<String> {
        if !self.error.is_empty() {
            return Some(self.error.clone());
        }
        let how = self.how();
        match self.cause {
            Some(Cause::Deadline) => Some(match self.deadline_s {
                Some(d) => format!("killed by deadline ({d} s): {how}"),
                None => format!("killed by deadline: {how}"),
            }),
            Some(Cause::Interrupt) if self.reason.is_empty() => Some(format!("interrupted: {how}")),
            Some(Cause::Interrupt) => Some(format!("interrupted ({}): {how}", self.reason)),
            Some(Cause::Stop) => Some(format!("stopped: {how}")),
            None if self.exit_code == Some(0) => None,
            None => Some(how),
        }
    }
}

/// Writes `bytes` to `dir/name` whole: a fresh temporary file, synced, renamed over
/// it ([`Dir::write_atomic`]: nothing is followed).
pub fn write_atomic(dir: &Path, name: &str, bytes: &[u8]) -> io::Result<()> {
    Dir::open(dir)?.write_atomic(name, bytes)
}

/// Writes `value` as JSON to `dir/name` whole.
pub fn write_json<T: Serialize>(dir: &Path, name: &str, value: &T) -> io::Result<()> {
    Dir::open(dir)?.write_json(name, value)
}

/// Writes `value` as JSON to `dir/name` whole, unsynced ([`Dir::write_for_boot`]):
/// for the files that mean nothing after a reboot (`spec.json`, `meta.json`, a
/// run's inputs).
pub fn write_json_for_boot<T: Serialize>(dir: &Path, name: &str, value: &T) -> io::Result<()> {
    Dir::open(dir)?.write_json_for_boot(name, value)
}

/// Reads `dir/name` as JSON: `None` when the file (or the directory) does not exist.
/// A symlink or anything but a regular file there is refused.
pub fn read_json<T: DeserializeOwned>(dir: &Path, name: &str) -> io::Result<Option<T>> {
    match Dir::open(dir) {
        Ok(d) => d.read_json(name),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

/// True when a regular file is at `dir/name` (a symlink to one is not).
pub fn exists(dir: &Path, name: &str) -> bool {
    Dir::open(dir).is_ok_and(|d| d.is_file(name))
}

/// Whether `result.json` in `dir` may be answered again: a regular file written no
/// earlier than the `status` (the extension writes it after the end is recorded; a
/// command that wrote one while it ran wrote it before).
pub fn result_is_current(dir: &Path) -> bool {
    let Ok(d) = Dir::open(dir) else {
        return false;
    };
    match (d.changed(RESULT), d.changed(STATUS)) {
        (Some(result), Some(status)) => result >= status,
        _ => false,
    }
}

/// The result recorded in `dir/result.json`, when it may be answered again
/// ([`result_is_current`]).
pub fn recorded_result<T: DeserializeOwned>(dir: &Path) -> Option<T> {
    if !result_is_current(dir) {
        return None;
    }
    read_json(dir, RESULT).ok().flatten()
}

/// How the run in `dir` ended, as its `status` says; a missing or unreadable
/// `status` reads as an error naming the launch `unit` (`run`, `segment`).
pub fn read_status(dir: &Path, unit: &str) -> Status {
    match read_json::<Status>(dir, STATUS) {
        Ok(Some(s)) => s,
        Ok(None) => Status {
            error: format!("the {unit}'s status is missing"),
            ..Status::default()
        },
        Err(e) => Status {
            error: format!("the {unit}'s status does not read: {e}"),
            ..Status::default()
        },
    }
}

/// A run's two outputs, read bounded.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Outputs {
    /// Its standard output.
    pub stdout: Vec<u8>,
    /// Its standard error.
    pub stderr: Vec<u8>,
    /// Why an output was not read, one line each (`the run's stdout was not read:
    /// ...`): an output that is not a regular file of the run directory (a symlink
    /// put there) is never read, and reads as empty.
    pub refusals: Vec<String>,
}

/// Reads the outputs `stdout` and `stderr` (file names in `dir`) of the launch
/// `unit` (`run`, `segment`), each bounded to `max` bytes
/// ([`crate::runs::read_bounded`]), off the async runtime. Fails only when a read
/// task is lost, saying which file (`reading <name>: ...`).
pub async fn read_outputs(
    dir: &Path,
    unit: &str,
    stdout: &'static str,
    stderr: &'static str,
    max: u64,
) -> Result<Outputs, String> {
    let read = |name: &'static str| {
        let path = dir.join(name);
        async move {
            tokio::task::spawn_blocking(move || crate::runs::read_bounded(&path, max))
                .await
                .map_err(|e| format!("reading {name}: {e}"))
        }
    };
    let mut refusals = Vec::new();
    let mut output = |name: &str, got: io::Result<Vec<u8>>| match got {
        Ok(bytes) => bytes,
        Err(e) => {
            refusals.push(format!("the {unit}'s {name} was not read: {e}"));
            Vec::new()
        }
    };
    let stdout = output(stdout, read(stdout).await?);
    let stderr = output(stderr, read(stderr).await?);
    Ok(Outputs {
        stdout,
        stderr,
        refusals,
    })
}

/// A fresh nonce: 128 random bits from the kernel, in hex.
pub fn nonce() -> io::Result<String> {
    protocol::random::hex(16)
}

/// True when `s` looks like a nonce of [`nonce`]: 32 lowercase hex digits.
pub fn is_nonce(s: &str) -> bool {
    s.len() == 32 && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// Now, as RFC 3339 in UTC with seconds (`2026-10-25T09:00:00Z`).
pub fn now_rfc3339() -> String {
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    protocol::time::format_rfc3339_secs(i64::try_from(secs).unwrap_or(i64::MAX))
}

/// How often a stop looks again at what is left.
pub const POLL: std::time::Duration = std::time::Duration::from_millis(50);
/// How often a wait for a run's end looks at its files while the wrapper's exit
/// can wake it ([`crate::procs::Exit`]).
pub const EXIT_POLL: std::time::Duration = std::time::Duration::from_secs(1);
/// How long a stop waits for the processes to be gone once the end is recorded.
pub const EVIDENCE_WAIT: std::time::Duration = std::time::Duration::from_secs(2);
/// How long a stop waits past the grace period for the wrapper to record the end.
pub const STOP_SLACK: std::time::Duration = std::time::Duration::from_secs(5);
/// The longest grace period a run's `spec.json` may give (the configs' bound): a
/// longer one read there is cut to it.
pub const MAX_GRACE_S: u64 = 31_622_400;

/// What an executor calls its runs and their command, in the records it writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Words {
    /// Its name, in its complaints (`shell`, `claude-code`).
    pub label: &'static str,
    /// One launch (`run`, `segment`).
    pub unit: &'static str,
    /// What the wrapper runs (`the command`, `claude`).
    pub what: &'static str,
    /// The grace period (seconds) when the spec does not say.
    pub default_grace_s: u64,
}

/// One launch of a detached run: its directory, and its wrapper's pid, start time
/// and nonce, as the extension saw them when it spawned the wrapper (or as `/proc`
/// proves them), never as a file of the run says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Launch {
    /// The run directory.
    pub dir: std::path::PathBuf,
    /// The wrapper's pid.
    pub pid: i32,
    /// The wrapper's start time ([`ProcStat::start`]); 0 when not known.
    pub start: u64,
    /// The nonce the wrapper was started with.
    pub nonce: String,
    /// The argument that makes the executable the wrapper.
    pub wrap_arg: &'static str,
}

impl Launch {
    /// The launch `dir/meta.json` records, when it records one, for a run this
    /// process neither started nor adopted (a stop, a forget): the pid it names is
    /// taken as the wrapper's only while `/proc` shows that process running the
    /// wrapper of `dir` with the nonce ([`wrapper_start`]), and its start time is the
    /// one `/proc` shows.
    pub fn on_disk(dir: &Path, wrap_arg: &'static str) -> Option<Launch> {
        let meta: Meta = read_json(dir, META).ok().flatten()?;
        let start = wrapper_start(meta.pid, dir, &meta.nonce, wrap_arg).unwrap_or(0);
        Some(Launch {
            dir: dir.to_path_buf(),
            pid: meta.pid,
            start,
            nonce: meta.nonce,
            wrap_arg,
        })
    }

    /// Whether the wrapper is still there: the process with its pid started when it
    /// did; without a known start time, its argv proves it the wrapper of this run
    /// directory with the nonce ([`wrapper_start`]).
    pub fn wrapper_alive(&self) -> bool {
        if self.start > 0 {
            wrapper_alive(self.pid, self.start, &self.nonce, self.wrap_arg)
        } else {
            wrapper_start(self.pid, &self.dir, &self.nonce, self.wrap_arg).is_some()
        }
    }

    /// The command's process group as `meta.json` records it; 0 before it started.
    /// What the run could have written: signal it only once [`Launch::owns_group`].
    pub fn pgid(&self) -> i32 {
        read_json::<Meta>(&self.dir, META)
            .ok()
            .flatten()
            .map_or(0, |m| m.pgid)
    }

    /// Whether the process group `pgid` is the run's: every live member of it is in
    /// the wrapper's session (its session id is the wrapper's pid: the kernel never
    /// gives that id to another session while one of its members lives) and started
    /// no earlier than the wrapper. A `meta.json` forged to name another group, a
    /// host process's, fails this, and that group is never signalled.
    pub fn owns_group(&self, pgid: i32) -> bool {
        crate::procs::group_in_session(pgid, self.pid, self.start)
    }

    /// The processes of the run left besides the wrapper: the command's group when
    /// it is the run's ([`Launch::owns_group`]); else (no group recorded yet, or one
    /// that is not the run's) the wrapper's session since the wrapper started.
    pub fn members(&self, pgid: i32) -> Vec<i32> {
        if pgid > 1 && self.owns_group(pgid) {
            group_members(pgid)
        } else if self.start > 0 {
            session_members(self.pid, self.start)
        } else {
            Vec::new()
        }
    }

    /// `signal` to what is left of the run: the group `pgid` as a whole when it is
    /// the run's (checked again right before), else each of `members`.
    fn signal(&self, pgid: i32, members: &[i32], signal: nix::sys::signal::Signal) {
        use nix::unistd::Pid;
        if pgid > 1 && self.owns_group(pgid) {
            let _ = nix::sys::signal::killpg(Pid::from_raw(pgid), signal);
            return;
        }
        if pgid > 1 {
            eprintln!(
                "{}: meta.json names process group {pgid}, which is not the run's (pid {}): only the run's own processes are signalled",
                self.dir.display(),
                self.pid
            );
        }
        for pid in members {
            // Each is the wrapper's session's still, or it is left alone.
            if crate::procs::in_session(*pid, self.pid, self.start) {
                let _ = nix::sys::signal::kill(Pid::from_raw(*pid), signal);
            }
        }
    }

    /// Writes the kill request the wrapper acts on (the first cause stays). When
    /// the wrapper is gone, signals what is left of the run here: SIGTERM, then
    /// SIGKILL after the grace period.
    pub fn ask_to_end(&self, request: &KillRequest, words: Words) -> io::Result<()> {
        if exists(&self.dir, KILL) {
            return Ok(());
        }
        write_json(&self.dir, KILL, request)?;
        if self.wrapper_alive() {
            return Ok(());
        }
        // Nobody reads the request: signal the group ourselves.
        let pgid = self.pgid();
        let members = self.members(pgid);
        if members.is_empty() {
            return Ok(());
        }
        self.signal(pgid, &members, nix::sys::signal::Signal::SIGTERM);
        self.signal(pgid, &members, nix::sys::signal::Signal::SIGCONT);
        let grace = self.grace_s(words);
        let this = self.clone();
        tokio::spawn(async move {
            tokio::time::sleep(std::time::Duration::from_secs(grace)).await;
            let left = this.members(pgid);
            if !left.is_empty() {
                this.signal(pgid, &left, nix::sys::signal::Signal::SIGKILL);
            }
        });
        Ok(())
    }

    fn grace_s(&self, words: Words) -> u64 {
        read_json::<Spec>(&self.dir, SPEC)
            .ok()
            .flatten()
            .map_or(words.default_grace_s, |s| s.grace_s)
            .min(MAX_GRACE_S)
    }

    /// The result the ended run answers: for an `adopted` run (one an earlier
    /// process may have answered), the one recorded in `result.json` when it may be
    /// answered again ([`recorded_result`]); else the one `build` makes, recorded
    /// there (a failure to record it is only complained about, naming execution
    /// `id`). `build` runs only when nothing recorded is answered.
    pub async fn answer_once<T, E>(
        &self,
        adopted: bool,
        words: Words,
        id: &str,
        build: impl std::future::Future<Output = Result<T, E>>,
    ) -> Result<T, E>
    where
        T: Serialize + DeserializeOwned,
    {
        let recorded = if adopted {
            recorded_result::<T>(&self.dir)
        } else {
            None
        };
        if let Some(r) = recorded {
            return Ok(r);
        }
        let r = build.await?;
        if let Err(e) = write_json(&self.dir, RESULT, &r) {
            eprintln!(
                "{}: execution {id}: cannot record the result: {e}",
                words.label
            );
        }
        Ok(r)
    }

    /// Waits until the run's end is recorded. A wrapper that is gone without
    /// recording it is a lost run: once nothing of the run is left, its end is
    /// recorded here as lost.
    pub async fn await_end(&self, words: Words) {
        let dir = &self.dir;
        // The wrapper writes the status and then exits: its exit (a pidfd) wakes
        // this wait as it happens; the files are looked at every POLL without one
        // and every EXIT_POLL with one.
        let mut exit = crate::procs::Exit::of(self.pid).filter(|_| self.wrapper_alive());
        loop {
            if exists(dir, STATUS) {
                return;
            }
            if !self.wrapper_alive() {
                if exists(dir, STATUS) {
                    return;
                }
                let pgid = self.pgid();
                if self.members(pgid).is_empty() {
                    let error = if pgid > 0 {
                        format!(
                            "the {}'s wrapper (pid {}) ended without recording how {} ended",
                            words.unit, self.pid, words.what
                        )
                    } else {
                        format!(
                            "{} never started: its wrapper (pid {}) ended first",
                            words.what, self.pid
                        )
                    };
                    let status = Status {
                        error,
                        ended_at: now_rfc3339(),
                        ..Status::default()
                    };
                    if let Err(e) = write_json(dir, STATUS, &status) {
                        eprintln!(
                            "{}: {}: cannot record a lost {}: {e}",
                            words.label,
                            dir.display(),
                            words.unit
                        );
                    }
                    return;
                }
            }
            match &exit {
                // Once it has ended, the files say the rest (a pidfd stays readable).
                Some(e) => {
                    if e.wait(EXIT_POLL).await {
                        exit = None;
                    }
                }
                None => tokio::time::sleep(POLL).await,
            }
        }
    }

    /// `executor.stop` of a launch: asks the wrapper to end the run (cause `stop`),
    /// waits for the end past the grace period, forces it when the wrapper did not
    /// record it, and answers the physical-stop evidence.
    pub async fn stop(&self, words: Words) -> io::Result<ExecutorStopResult> {
        if !exists(&self.dir, STATUS) {
            let request = KillRequest {
                cause: Cause::Stop,
                reason: String::new(),
            };
            self.ask_to_end(&request, words)?;
            let limit = std::time::Instant::now()
                + std::time::Duration::from_secs(self.grace_s(words))
                + STOP_SLACK;
            while !exists(&self.dir, STATUS)
                && self.wrapper_alive()
                && std::time::Instant::now() < limit
            {
                tokio::time::sleep(POLL).await;
            }
            if !exists(&self.dir, STATUS) {
                self.force_end().await;
            }
        }
        Ok(self.evidence().await)
    }

    /// Ends a run whose wrapper did not: SIGKILL to what is left and the wrapper,
    /// then records the stop when nothing is left.
    pub async fn force_end(&self) {
        use nix::sys::signal::{kill, Signal};
        use nix::unistd::Pid;
        let pgid = self.pgid();
        self.signal(pgid, &self.members(pgid), Signal::SIGKILL);
        if self.wrapper_alive() {
            let _ = kill(Pid::from_raw(self.pid), Signal::SIGKILL);
        }
        let limit = std::time::Instant::now() + EVIDENCE_WAIT;
        while std::time::Instant::now() < limit
            && (self.wrapper_alive() || !self.members(pgid).is_empty())
        {
            tokio::time::sleep(POLL).await;
        }
        if !exists(&self.dir, STATUS) && !self.wrapper_alive() && self.members(pgid).is_empty() {
            let status = Status {
                cause: Some(Cause::Stop),
                error: "stopped: the wrapper did not record the command's end, so its group and the wrapper were killed".into(),
                ended_at: now_rfc3339(),
                ..Status::default()
            };
            let _ = write_json(&self.dir, STATUS, &status);
        }
    }

    /// Physical-stop evidence: nothing of the run left, and the wrapper gone
    /// (waiting briefly for the wrapper to exit after its status).
    pub async fn evidence(&self) -> ExecutorStopResult {
        let pgid = self.pgid();
        let limit = std::time::Instant::now() + EVIDENCE_WAIT;
        loop {
            let members = self.members(pgid);
            let wrapper = self.wrapper_alive();
            if members.is_empty() && !wrapper {
                let detail = if pgid > 0 {
                    format!(
                        "no process of group {pgid} is left and the wrapper (pid {}) has exited",
                        self.pid
                    )
                } else {
                    format!(
                        "the command never started and the wrapper (pid {}) has exited",
                        self.pid
                    )
                };
                return ExecutorStopResult {
                    stopped: true,
                    detail,
                };
            }
            if std::time::Instant::now() >= limit {
                let mut left: Vec<String> = members.iter().map(i32::to_string).collect();
                if wrapper {
                    left.push(format!("{} (wrapper)", self.pid));
                }
                return ExecutorStopResult {
                    stopped: false,
                    detail: format!("still running: pid {}", left.join(", ")),
                };
            }
            tokio::time::sleep(POLL).await;
        }
    }
}

mod start;
pub use start::{start_wrapper, Started};

#[cfg(test)]
mod tests;

#[cfg(test)]
mod trust;
