//! The wrapper of a detached run: `<exe> <wrap arg> <run dir> <nonce>`, the process
//! that owns one run's command and outlives the extension that started it (shared by
//! the shell and claude-code executors, [`WrapperOptions`] saying what differs).
//!
//! It makes itself a session leader (so a signal to the extension's or the runner's
//! process group never reaches it) and a child subreaper (so every orphan of the
//! command is reparented to it and reaped here, never left a zombie under an init
//! that may not reap). It waits for `go` on its stdin, which the extension sends once
//! the recovery metadata is persisted: an extension that dies before that leaves a
//! wrapper that reads EOF and exits without running anything. It reads that line one
//! byte at a time, so nothing after it is consumed. Then it starts the command in a
//! new process group of its own (stdin `/dev/null`, or the rest of the extension's
//! pipe when [`WrapperOptions::stdin_from_extension`]; stdout and stderr into the run
//! directory, created afresh: anything already at their names is refused and the
//! command never starts), records `meta.json`, and supervises:
//!
//! * the command's exit is its wait status, from `waitpid`, never the end of its
//!   output;
//! * a `kill` request (interrupt, stop) or the deadline sends SIGTERM (and SIGCONT)
//!   to the whole group, then SIGKILL after the grace period, and the cause is
//!   recorded;
//! * when the command exits and members of its group remain, they get the same
//!   TERM-then-KILL, so a run never leaves a process behind;
//! * once the group is empty it writes `status` (atomically) and exits.
//!
//! It opens the run directory once and every file in it under that descriptor,
//! never through a symlink ([`crate::nofollow`]): what the command does to its run
//! directory cannot make the wrapper write or read anything else.

use crate::detached::{self as rundir, Cause, KillRequest, Meta, Spec, Status};
use crate::nofollow::Dir;
use nix::errno::Errno;
use nix::sys::signal::{killpg, SigSet, Signal};
use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
use nix::unistd::Pid;
use std::ffi::OsString;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// A line on the wrapper's stderr (`wrapper.log`), never a panic: `eprintln!`
/// panics when the write fails, and on a full disk it does.
macro_rules! complain {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr(), $($arg)*);
    }};
}

/// How often the wrapper looks at its children, the kill request and the clock.
const TICK: Duration = Duration::from_millis(50);

/// What differs between the executors' wrappers.
#[derive(Debug, Clone, Copy)]
pub struct WrapperOptions {
    /// Its name in its complaints (`shell`, `claude-code`).
    pub label: &'static str,
    /// The command's stdin is the rest of the extension's pipe (prompt and injected
    /// input), else `/dev/null`.
    pub stdin_from_extension: bool,
    /// The file in the run directory that takes the command's stdout.
    pub stdout: &'static str,
    /// The file in the run directory that takes the command's stderr.
    pub stderr: &'static str,
}

static OPTIONS: std::sync::OnceLock<WrapperOptions> = std::sync::OnceLock::new();

fn label() -> &'static str {
    OPTIONS.get().map_or("executor", |o| o.label)
}

/// The wrapper's own small program (the cli package's `open-conduit-wrap`): the
/// same [`main`], without the rest of the multi-call binary to load on every run.
pub const PROGRAM: &str = "open-conduit-wrap";

/// The program an executor running as `exe` starts its wrappers with: [`PROGRAM`]
/// beside `exe` (a build tree), or in `../lib/open-conduit/` from it (the package:
/// `/usr/bin/open-conduit` and `/usr/lib/open-conduit/open-conduit-wrap`), when it is
/// there; else `exe` itself, which is the wrapper too when called with the wrap
/// argument. Either way the argv is `<program> <wrap arg> <run dir> <nonce>`.
pub fn program(exe: &Path) -> PathBuf {
    let Some(dir) = exe.parent() else {
        return exe.to_path_buf();
    };
    [
        dir.join(PROGRAM),
        dir.join("../lib/open-conduit").join(PROGRAM),
    ]
    .into_iter()
    .find(|p| p.is_file())
    .unwrap_or_else(|| exe.to_path_buf())
}

/// The wrapper's entry point, with the arguments after the wrap argument. Returns the
/// process's exit status.
pub fn main(args: &[OsString], options: WrapperOptions) -> i32 {
    let options = *OPTIONS.get_or_init(|| options);
    let (Some(dir), Some(nonce)) = (args.first(), args.get(1)) else {
        complain!("{} wrapper: usage: <wrap arg> <run dir> <nonce>", label());
        return 2;
    };
    let dir = PathBuf::from(dir);
    let Some(nonce) = nonce.to_str() else {
        complain!("{} wrapper: the nonce is not text", label());
        return 2;
    };
    // Out of the extension's session and process group first.
    if let Err(e) = nix::unistd::setsid() {
        complain!("{} wrapper: setsid: {e}", label());
    }
    if let Err(e) = nix::sys::prctl::set_child_subreaper(true) {
        complain!("{} wrapper: cannot become a subreaper: {e}", label());
    }
    if !read_go() {
        complain!(
            "{} wrapper: no go from the extension; the command was not started",
            label()
        );
        return 0;
    }
    let dir = match Dir::open(&dir) {
        Ok(d) => d,
        Err(e) => {
            complain!(
                "{} wrapper: cannot open the run directory: {e}; the command was not started",
                label()
            );
            return 1;
        }
    };
    run(&dir, nonce, options)
}

/// Reads the first line of stdin one byte at a time (so nothing after it is
/// consumed: the rest of the pipe may be the command's) and says whether it is `go`.
fn read_go() -> bool {
    let stdin = std::io::stdin();
    let mut line = Vec::new();
    let mut byte = [0u8; 1];
    while line.len() < 16 {
        match nix::unistd::read(&stdin, &mut byte) {
            Ok(1) if byte[0] == b'\n' => return line == b"go",
            Ok(1) => line.push(byte[0]),
            Err(Errno::EINTR) => continue,
            _ => return false,
        }
    }
    false
}

fn run(dir: &Dir, nonce: &str, options: WrapperOptions) -> i32 {
    let me = i32::try_from(std::process::id()).unwrap_or(0);
    let spec: Spec = match dir.read_json(rundir::SPEC) {
        Ok(Some(spec)) => spec,
        Ok(None) => return never_started(dir, me, nonce, "the run has no spec.json".into()),
        Err(e) => return never_started(dir, me, nonce, format!("cannot read spec.json: {e}")),
    };
    if spec.nonce != nonce {
        return never_started(dir, me, nonce, "spec.json is of another launch".into());
    }
    let Some(program) = spec.argv.first() else {
        return never_started(dir, me, nonce, "the argv is empty".into());
    };
    if !Path::new(&spec.cwd).is_dir() {
        let why = format!(
            "cannot start {program}: the working directory {} is not a directory",
            spec.cwd
        );
        return never_started(dir, me, nonce, why);
    }
    // Created afresh: an output file already there (a symlink to a secret, another
    // Work's file) is refused, and the command never starts.
    let output = |name: &str| dir.create_new(name, 0o600);
    let (stdout, stderr) = match (output(options.stdout), output(options.stderr)) {
        (Ok(o), Ok(e)) => (o, e),
        (Err(e), _) | (_, Err(e)) => {
            return never_started(dir, me, nonce, format!("cannot open the output files: {e}"))
        }
    };
    // Room for the records of the run's end, taken before the command starts: a
    // command that ran must be able to say so even on a disk that filled up
    // meanwhile (else it would read as lost, and run again). No room now: it does
    // not start (and runs later).
    if let Err(e) = dir.reserve(rundir::RESERVE, RESERVE_BYTES) {
        return never_started(
            dir,
            me,
            nonce,
            format!("no room for the run's records: {e}"),
        );
    }
    // SIGCHLD is blocked here (the command starts with an empty mask: see
    // [`crate::signals`]) so that the supervision wakes on a child's end at once
    // instead of at its next tick ([`wait_for_child`]).
    let chld = SigSet::from(Signal::SIGCHLD);
    if let Err(e) = chld.thread_block() {
        complain!("{} wrapper: cannot block SIGCHLD: {e}", label());
    }
    let started = Instant::now();
    let mut command = Command::new(program);
    crate::signals::reset_on_exec(&mut command);
    let child = command
        .args(&spec.argv[1..])
        .current_dir(&spec.cwd)
        .stdin(if options.stdin_from_extension {
            Stdio::inherit()
        } else {
            Stdio::null()
        })
        .stdout(stdout)
        .stderr(stderr)
        .process_group(0)
        .spawn();
    let leader = match child.map(|c| i32::try_from(c.id())) {
        Ok(Ok(pid)) => pid,
        Ok(Err(_)) => {
            return never_started(dir, me, nonce, "the command's pid is out of range".into())
        }
        Err(e) => return never_started(dir, me, nonce, format!("cannot start {program}: {e}")),
    };
    let meta = Meta {
        pid: me,
        pgid: leader,
        nonce: nonce.to_string(),
        started_at: rundir::now_rfc3339(),
        start: rundir::start_time(me),
    };
    if let Err(e) = dir.write_json_for_boot(rundir::META, &meta) {
        complain!("{} wrapper: cannot write meta.json: {e}", label());
    }
    let status = supervise(dir, &spec, leader, started);
    let written = record_end(dir, &status);
    let _ = dir.remove(rundir::RESERVE);
    if let Err(e) = written {
        complain!("{} wrapper: cannot write the status: {e}", label());
        return 1;
    }
    0
}

/// The bytes reserved for the records of a run's end ([`rundir::RESERVE`]).
const RESERVE_BYTES: usize = 64 * 1024;
/// How many times the status is tried again once the reserve is given back (a
/// filesystem may take a moment to count the freed blocks as free).
const RECORD_TRIES: u32 = 40;

/// Writes the `status`; on a full disk, gives the reserve back and tries again.
fn record_end(dir: &Dir, status: &Status) -> std::io::Result<()> {
    let mut last = match dir.write_json(rundir::STATUS, status) {
        Ok(()) => return Ok(()),
        Err(e) => e,
    };
    // The error names the file; its kind is what the system said.
    if !matches!(
        last.kind(),
        std::io::ErrorKind::StorageFull | std::io::ErrorKind::QuotaExceeded
    ) {
        return Err(last);
    }
    complain!(
        "{} wrapper: the disk is full; the status is written in the room reserved for it",
        label()
    );
    let _ = dir.remove(rundir::RESERVE);
    for _ in 0..RECORD_TRIES {
        match dir.write_json(rundir::STATUS, status) {
            Ok(()) => return Ok(()),
            Err(e) => last = e,
        }
        std::thread::sleep(TICK * 5);
    }
    Err(last)
}

/// Records a launch that never ran a command: a `meta.json` without a group and
/// a `status` that says why.
fn never_started(dir: &Dir, me: i32, nonce: &str, why: String) -> i32 {
    complain!("{} wrapper: {why}", label());
    let meta = Meta {
        pid: me,
        pgid: 0,
        nonce: nonce.to_string(),
        started_at: rundir::now_rfc3339(),
        start: rundir::start_time(me),
    };
    let status = Status {
        error: why,
        ended_at: rundir::now_rfc3339(),
        ..Status::default()
    };
    let written = dir
        .write_json(rundir::META, &meta)
        .and_then(|()| dir.write_json(rundir::STATUS, &status));
    match written {
        Ok(()) => 0,
        Err(e) => {
            complain!("{} wrapper: cannot record it: {e}", label());
            1
        }
    }
}

/// How the leader ended.
#[derive(Debug, Clone, Copy)]
enum Ended {
    Exited(i32),
    Signaled(i32),
}

/// Reaps every child that has ended (the leader and the orphans reparented
/// here); returns the leader's end when it is among them.
fn reap(leader: i32) -> Option<Ended> {
    let mut ended = None;
    loop {
        match waitpid(Pid::from_raw(-1), Some(WaitPidFlag::WNOHANG)) {
            Ok(WaitStatus::Exited(pid, code)) if pid.as_raw() == leader => {
                ended = Some(Ended::Exited(code));
            }
            Ok(WaitStatus::Signaled(pid, signal, _)) if pid.as_raw() == leader => {
                ended = Some(Ended::Signaled(signal as i32));
            }
            Ok(WaitStatus::StillAlive) => return ended,
            Ok(_) | Err(Errno::EINTR) => continue,
            Err(_) => return ended,
        }
    }
}

/// Sleeps until a child changes state (SIGCHLD, blocked since before the command
/// started, is pending) or `tick` passes, whichever comes first: a command's end is
/// seen as it happens, the kill request and the deadline at the next tick.
fn wait_for_child(tick: Duration) {
    let set = SigSet::from(Signal::SIGCHLD);
    let ts = nix::libc::timespec {
        tv_sec: nix::libc::time_t::try_from(tick.as_secs()).unwrap_or(1),
        tv_nsec: nix::libc::c_long::from(tick.subsec_nanos()),
    };
    // SAFETY: `set` and `ts` are valid for the call; a null info pointer is allowed.
    let got = unsafe { nix::libc::sigtimedwait(set.as_ref(), std::ptr::null_mut(), &ts) };
    // EAGAIN (the tick passed) and EINTR end the wait; any other refusal (a seccomp
    // filter, say) must not make the supervision spin: it sleeps the tick instead.
    if got < 0 && !matches!(Errno::last(), Errno::EAGAIN | Errno::EINTR) {
        std::thread::sleep(tick);
    }
}

fn group_empty(pgid: i32) -> bool {
    matches!(killpg(Pid::from_raw(pgid), None), Err(Errno::ESRCH))
}

fn terminate(pgid: i32) {
    let group = Pid::from_raw(pgid);
    let _ = killpg(group, Signal::SIGTERM);
    // A stopped process would hold the TERM until continued.
    let _ = killpg(group, Signal::SIGCONT);
}

fn supervise(dir: &Dir, spec: &Spec, leader: i32, started: Instant) -> Status {
    let deadline = spec
        .deadline_s
        .and_then(|s| started.checked_add(Duration::from_secs(s)));
    let grace = Duration::from_secs(spec.grace_s);
    let mut ended: Option<Ended> = None;
    let mut cause: Option<KillRequest> = None;
    let mut term_at: Option<Instant> = None;
    let mut killed = false;
    loop {
        if ended.is_none() {
            ended = reap(leader);
        } else {
            reap(leader);
        }
        let now = Instant::now();
        if ended.is_none() && cause.is_none() {
            let asked = match dir.read_json::<KillRequest>(rundir::KILL) {
                Ok(asked) => asked,
                Err(e) => {
                    // A request we cannot read is still a request to end.
                    complain!(
                        "{} wrapper: unreadable kill request ({e}); stopping",
                        label()
                    );
                    Some(KillRequest {
                        cause: Cause::Stop,
                        reason: String::new(),
                    })
                }
            };
            let due = deadline.is_some_and(|d| now >= d);
            cause = asked.or_else(|| {
                due.then(|| KillRequest {
                    cause: Cause::Deadline,
                    reason: String::new(),
                })
            });
            if cause.is_some() {
                terminate(leader);
                term_at = Some(now);
            }
        }
        if ended.is_some() {
            if group_empty(leader) {
                break;
            }
            if term_at.is_none() {
                // The command is gone but left members of its group behind.
                terminate(leader);
                term_at = Some(now);
            }
        }
        if let Some(t) = term_at {
            if !killed && now >= t + grace {
                let _ = killpg(Pid::from_raw(leader), Signal::SIGKILL);
                killed = true;
            }
        }
        wait_for_child(TICK);
    }
    let (exit_code, signal) = match ended {
        Some(Ended::Exited(code)) => (Some(code), None),
        Some(Ended::Signaled(signal)) => (None, Some(signal)),
        None => (None, None),
    };
    let (cause, reason) = match cause {
        Some(k) => (Some(k.cause), k.reason),
        None => (None, String::new()),
    };
    Status {
        exit_code,
        signal,
        deadline_s: (cause == Some(Cause::Deadline))
            .then_some(spec.deadline_s)
            .flatten(),
        cause,
        reason,
        error: String::new(),
        ended_at: rundir::now_rfc3339(),
    }
}
