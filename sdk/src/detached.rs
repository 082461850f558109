//! A detached run's directory and what the extension and its wrapper write in it,
//! plus the `/proc` reads that tell whether a run's processes are still there: the
//! shared part of the executors that run a command detached from their own process
//! (the shell and claude-code executors), each of which adds its own files.
//!
//! | file | written by | when |
//! | --- | --- | --- |
//! | `spec.json` | extension | before the launch: argv, cwd, deadline, grace, nonce |
//! | `wrapper.log` | wrapper | its own complaints (its stderr) |
//! | `meta.json` | extension, then wrapper | right after the spawn: pid, its start time, nonce; once the command started: its pgid too |
//! | `kill` | extension | to ask the wrapper to end the command (interrupt, stop) |
//! | `status` | wrapper | once the command and its group are gone: how it ended |
//! | `result.json` | extension | the result it answered, so that it is answered again identically |
//!
//! Every file is written to a temporary name and renamed, so a reader sees a whole
//! file or none.

use protocol::wire::ExecutorStopResult;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use std::io::{self, Read, Write};
use std::os::unix::fs::OpenOptionsExt;
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

/// Writes `bytes` to `dir/name` whole: a temporary file, synced, renamed over it.
pub fn write_atomic(dir: &Path, name: &str, bytes: &[u8]) -> io::Result<()> {
    let tmp = dir.join(format!(".{name}.tmp.{}", std::process::id()));
    let result = (|| {
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
        std::fs::rename(&tmp, dir.join(name))
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

/// Writes `value` as JSON to `dir/name` whole.
pub fn write_json<T: Serialize>(dir: &Path, name: &str, value: &T) -> io::Result<()> {
    let bytes = serde_json::to_vec_pretty(value).map_err(io::Error::other)?;
    write_atomic(dir, name, &bytes)
}

/// Reads `dir/name` as JSON: `None` when the file does not exist.
pub fn read_json<T: DeserializeOwned>(dir: &Path, name: &str) -> io::Result<Option<T>> {
    match std::fs::read(dir.join(name)) {
        Ok(bytes) => serde_json::from_slice(&bytes)
            .map(Some)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, format!("{name}: {e}"))),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

/// True when `dir/name` exists.
pub fn exists(dir: &Path, name: &str) -> bool {
    dir.join(name).exists()
}

/// A fresh nonce: 128 random bits from the kernel, in hex.
pub fn nonce() -> io::Result<String> {
    let mut bytes = [0u8; 16];
    std::fs::File::open("/dev/urandom")?.read_exact(&mut bytes)?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
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
    let days = i64::try_from(secs / 86_400).unwrap_or(0);
    let rem = secs % 86_400;
    // Howard Hinnant's civil_from_days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        (rem / 60) % 60,
        rem % 60
    )
}

/// One process, as `/proc/<pid>/stat` shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProcStat {
    /// Its pid.
    pub pid: i32,
    /// Its state letter (`R`, `S`, `Z`, ...).
    pub state: char,
    /// Its parent.
    pub ppid: i32,
    /// Its process group.
    pub pgrp: i32,
    /// Its session.
    pub session: i32,
    /// When it started, in clock ticks since boot: set at fork and never changed,
    /// so a pid and its start time name one process for good.
    pub start: u64,
    /// Its kernel flags (`PF_*`).
    pub flags: u64,
}

impl ProcStat {
    /// Neither a zombie nor dead.
    pub fn live(&self) -> bool {
        self.state != 'Z' && self.state != 'X'
    }

    /// Whether it is exiting (`PF_EXITING`, set first thing in `do_exit`): it runs
    /// nothing any more, and may already have dropped its namespaces while its
    /// state still says running.
    pub fn exiting(&self) -> bool {
        const PF_EXITING: u64 = 0x4;
        self.flags & PF_EXITING != 0
    }
}

/// Reads `/proc/<pid>/stat`: `None` when there is no such process.
pub fn proc_stat(pid: i32) -> Option<ProcStat> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // `pid (comm) state ppid pgrp session tty tpgid flags minflt cminflt majflt
    // cmajflt utime stime cutime cstime priority nice threads itrealvalue starttime
    // ...`; comm may hold spaces and parentheses.
    let after = text.get(text.rfind(')')? + 1..)?;
    let fields: Vec<&str> = after.split_whitespace().collect();
    let state = fields.first()?.chars().next()?;
    let ppid = fields.get(1)?.parse().ok()?;
    let pgrp = fields.get(2)?.parse().ok()?;
    let session = fields.get(3)?.parse().ok()?;
    let flags = fields.get(6)?.parse().ok()?;
    let start = fields.get(19)?.parse().ok()?;
    Some(ProcStat {
        pid,
        state,
        ppid,
        pgrp,
        session,
        start,
        flags,
    })
}

/// The start time of `pid` ([`ProcStat::start`]), or 0 when it cannot be read.
/// Read right after the spawn, before the child is reaped, it cannot race: the
/// process exists (alive or a zombie) until its parent waits for it.
pub fn start_time(pid: i32) -> u64 {
    proc_stat(pid).map_or(0, |s| s.start)
}

fn live_processes() -> Vec<ProcStat> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter_map(proc_stat)
        .filter(ProcStat::live)
        .collect()
}

/// The live (not zombie) processes whose process group is `pgid`.
pub fn group_members(pgid: i32) -> Vec<i32> {
    if pgid <= 1 {
        return Vec::new();
    }
    let mut pids: Vec<i32> = live_processes()
        .into_iter()
        .filter(|s| s.pgrp == pgid)
        .map(|s| s.pid)
        .collect();
    pids.sort_unstable();
    pids
}

/// The live processes of session `sid` that started no earlier than `since` (start
/// ticks), `sid` itself excepted.
pub fn session_members(sid: i32, since: u64) -> Vec<i32> {
    if sid <= 1 {
        return Vec::new();
    }
    let mut pids: Vec<i32> = live_processes()
        .into_iter()
        .filter(|s| s.session == sid && s.pid != sid && s.start >= since)
        .map(|s| s.pid)
        .collect();
    pids.sort_unstable();
    pids
}

/// True when `pid` is alive (not a zombie) and is the wrapper that was started:
/// with a recorded start time (`start` > 0), the process with that pid started then
/// (a recycled pid has another); without one (metadata of an earlier release), its
/// argv is `<exe> <wrap_arg> <run dir> <nonce>`.
pub fn wrapper_alive(pid: i32, start: u64, nonce: &str, wrap_arg: &str) -> bool {
    if pid <= 1 {
        return false;
    }
    let stat = match proc_stat(pid) {
        Some(s) if s.live() => s,
        _ => return false,
    };
    if start > 0 {
        return stat.start == start;
    }
    let Ok(cmdline) = std::fs::read(format!("/proc/{pid}/cmdline")) else {
        return false;
    };
    let args: Vec<&[u8]> = cmdline.split(|b| *b == 0).collect();
    args.get(1) == Some(&wrap_arg.as_bytes()) && args.get(3) == Some(&nonce.as_bytes())
}

/// How often a stop looks again at what is left.
pub const POLL: std::time::Duration = std::time::Duration::from_millis(50);
/// How long a stop waits for the processes to be gone once the end is recorded.
pub const EVIDENCE_WAIT: std::time::Duration = std::time::Duration::from_secs(2);
/// How long a stop waits past the grace period for the wrapper to record the end.
pub const STOP_SLACK: std::time::Duration = std::time::Duration::from_secs(5);

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
/// and nonce.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Launch {
    /// The run directory.
    pub dir: std::path::PathBuf,
    /// The wrapper's pid.
    pub pid: i32,
    /// The wrapper's start time ([`ProcStat::start`]); 0 when not recorded.
    pub start: u64,
    /// The nonce the wrapper was started with.
    pub nonce: String,
    /// The argument that makes the executable the wrapper.
    pub wrap_arg: &'static str,
}

impl Launch {
    /// The launch `dir/meta.json` records, when it records one.
    pub fn on_disk(dir: &Path, wrap_arg: &'static str) -> Option<Launch> {
        let meta: Meta = read_json(dir, META).ok().flatten()?;
        Some(Launch {
            dir: dir.to_path_buf(),
            pid: meta.pid,
            start: meta.start,
            nonce: meta.nonce,
            wrap_arg,
        })
    }

    /// Whether the wrapper is still there ([`wrapper_alive`]).
    pub fn wrapper_alive(&self) -> bool {
        wrapper_alive(self.pid, self.start, &self.nonce, self.wrap_arg)
    }

    /// The command's process group as `meta.json` records it; 0 before it started.
    pub fn pgid(&self) -> i32 {
        read_json::<Meta>(&self.dir, META)
            .ok()
            .flatten()
            .map_or(0, |m| m.pgid)
    }

    /// The processes of the run left besides the wrapper: the command's group, or,
    /// while no group is recorded (the wrapper may have started the command and not
    /// yet said so), the wrapper's session since the wrapper started.
    pub fn members(&self, pgid: i32) -> Vec<i32> {
        if pgid > 1 {
            group_members(pgid)
        } else if self.start > 0 {
            session_members(self.pid, self.start)
        } else {
            Vec::new()
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
        signal_all(pgid, &members, nix::sys::signal::Signal::SIGTERM);
        signal_all(pgid, &members, nix::sys::signal::Signal::SIGCONT);
        let grace = self.grace_s(words);
        let this = self.clone();
        tokio::spawn(async move {
            tokio::time::sleep(std::time::Duration::from_secs(grace)).await;
            let left = this.members(pgid);
            if !left.is_empty() {
                signal_all(pgid, &left, nix::sys::signal::Signal::SIGKILL);
            }
        });
        Ok(())
    }

    fn grace_s(&self, words: Words) -> u64 {
        read_json::<Spec>(&self.dir, SPEC)
            .ok()
            .flatten()
            .map_or(words.default_grace_s, |s| s.grace_s)
    }

    /// Waits until the run's end is recorded. A wrapper that is gone without
    /// recording it is a lost run: once nothing of the run is left, its end is
    /// recorded here as lost.
    pub async fn await_end(&self, words: Words) {
        let dir = &self.dir;
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
            tokio::time::sleep(POLL).await;
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
        signal_all(pgid, &self.members(pgid), Signal::SIGKILL);
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

/// `signal` to the group `pgid` when there is one, else to each of `members`.
fn signal_all(pgid: i32, members: &[i32], signal: nix::sys::signal::Signal) {
    use nix::unistd::Pid;
    if pgid > 1 {
        let _ = nix::sys::signal::killpg(Pid::from_raw(pgid), signal);
    } else {
        for pid in members {
            let _ = nix::sys::signal::kill(Pid::from_raw(*pid), signal);
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn failures_say_why() {
        let exit = |code| Status {
            exit_code: Some(code),
            ..Status::default()
        };
        assert!(exit(0).succeeded());
        assert_eq!(exit(0).failure(), None);
        assert_eq!(exit(3).failure().unwrap(), "exited with status 3");
        let killed = Status {
            signal: Some(9),
            ..Status::default()
        };
        assert_eq!(killed.failure().unwrap(), "killed by signal 9 (SIGKILL)");
        let deadline = Status {
            signal: Some(15),
            cause: Some(Cause::Deadline),
            deadline_s: Some(30),
            ..Status::default()
        };
        assert_eq!(
            deadline.failure().unwrap(),
            "killed by deadline (30 s): killed by signal 15 (SIGTERM)"
        );
        let clean_but_interrupted = Status {
            exit_code: Some(0),
            cause: Some(Cause::Interrupt),
            reason: "operator".into(),
            ..Status::default()
        };
        assert!(!clean_but_interrupted.succeeded());
        assert_eq!(
            clean_but_interrupted.failure().unwrap(),
            "interrupted (operator): exited with status 0"
        );
    }

    #[test]
    fn nonces_are_fresh_hex() {
        let a = nonce().unwrap();
        let b = nonce().unwrap();
        assert!(is_nonce(&a) && is_nonce(&b));
        assert_ne!(a, b);
        assert!(!is_nonce("xyz"));
    }

    #[test]
    fn timestamps_are_rfc3339() {
        let t = now_rfc3339();
        assert_eq!(t.len(), 20, "{t}");
        assert!(t.ends_with('Z') && t.as_bytes()[10] == b'T', "{t}");
        assert!(t.as_str() > "2024-01-01T00:00:00Z", "{t}");
    }

    #[test]
    fn proc_reads_this_process() {
        let me = std::process::id() as i32;
        let s = proc_stat(me).unwrap();
        assert_eq!(s.pid, me);
        assert!(s.start > 0);
        // Without a start time, the argv must say it is the wrapper: it does not.
        assert!(!wrapper_alive(
            me,
            0,
            "00000000000000000000000000000000",
            "__wrap"
        ));
        // With one, the start time alone tells: right, and a recycled pid's wrong.
        assert!(wrapper_alive(me, s.start, "", "__wrap"));
        assert!(!wrapper_alive(me, s.start + 1, "", "__wrap"));
        assert!(!wrapper_alive(0, 0, "", "__wrap"));
        assert!(group_members(s.pgrp).contains(&me));
        assert_eq!(session_members(s.session, u64::MAX), Vec::<i32>::new());
    }
}
