//! What `/proc` shows of processes: one process's stat line, the live members of a
//! process group or a session, whether a pid is still the wrapper that was started,
//! and whether a group or a process belongs to a session. What the detached
//! executors ([`crate::detached`]) read to tell whether a run's processes are still
//! there and which of them are the run's, never what a file of the run says.

use std::path::Path;

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

/// The start time of `pid` when it is alive and its argv proves it the wrapper of
/// the run directory `dir` with `nonce` (`<exe> <wrap_arg> <dir> <nonce>`): what
/// `/proc` shows, never what a file of the run says. `None` otherwise.
pub fn wrapper_start(pid: i32, dir: &Path, nonce: &str, wrap_arg: &str) -> Option<u64> {
    use std::os::unix::ffi::OsStrExt;
    if pid <= 1 {
        return None;
    }
    let before = proc_stat(pid).filter(ProcStat::live)?;
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
    let args: Vec<&[u8]> = cmdline.split(|b| *b == 0).collect();
    let ours = args.get(1) == Some(&wrap_arg.as_bytes())
        && args.get(2) == Some(&dir.as_os_str().as_bytes())
        && args.get(3) == Some(&nonce.as_bytes());
    // The same process before and after the argv was read (not a pid recycled
    // meanwhile).
    let after = proc_stat(pid).filter(ProcStat::live)?;
    (ours && before.start == after.start).then_some(before.start)
}

/// Whether every live member of the process group `pgid` is in session `sid` and
/// started no earlier than `since` (start ticks): false for `pgid` or `sid` of 1 or
/// less.
pub fn group_in_session(pgid: i32, sid: i32, since: u64) -> bool {
    if pgid <= 1 || sid <= 1 {
        return false;
    }
    live_processes()
        .into_iter()
        .filter(|s| s.pgrp == pgid)
        .all(|s| s.session == sid && s.start >= since)
}

/// Whether `pid` is alive (not a zombie), in session `sid`, and started no earlier
/// than `since` (start ticks).
pub fn in_session(pid: i32, sid: i32, since: u64) -> bool {
    proc_stat(pid).is_some_and(|s| s.live() && s.session == sid && s.start >= since)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

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

/// A process's exit, to wait for without polling: a pidfd (Linux 5.3+), readable
/// once the process has ended. It names the process it was opened on even if the
/// pid is reused later; open it, then check that the process is the one meant.
#[derive(Debug)]
pub struct Exit(tokio::io::unix::AsyncFd<std::os::fd::OwnedFd>);

impl Exit {
    /// The exit of process `pid`; `None` when it is gone already or pidfds are not
    /// available (the caller polls then). Within a tokio runtime.
    pub fn of(pid: i32) -> Option<Exit> {
        use std::os::fd::FromRawFd;
        if pid <= 0 {
            return None;
        }
        // SAFETY: pidfd_open takes a pid and flags and returns a new descriptor.
        let fd = unsafe { nix::libc::syscall(nix::libc::SYS_pidfd_open, pid, 0) };
        let fd = i32::try_from(fd).ok().filter(|fd| *fd >= 0)?;
        // SAFETY: the descriptor was just returned to us and is owned by nothing else.
        let owned = unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) };
        // SAFETY: the OwnedFd is open and is moved into the AsyncFd, which alone
        // owns it (and returns it on every as_raw_fd) until it is dropped.
        unsafe {
            tokio::io::unix::AsyncFd::register_with_interest(owned, tokio::io::Interest::READABLE)
        }
        .ok()
        .map(Exit)
    }

    /// Waits until the process has ended or `limit` has passed; true when it has
    /// ended.
    pub async fn wait(&self, limit: std::time::Duration) -> bool {
        matches!(
            tokio::time::timeout(limit, self.0.readable()).await,
            Ok(Ok(_))
        )
    }
}
