//! The attach program of an ssh container: `__ssh-attach --dir DIR -- SSH ARGS…`,
//! what the executor's wrapper runs on this host in place of the launch.
//!
//! It runs `SSH ARGS… sh DIR/run` with its own standard input, output and error (the
//! launch's, carried over the connection), passes a SIGTERM or SIGINT it receives on
//! to the launch's process group on the remote (a second ssh; without a terminal
//! the remote would not hear of the first one's end), and when the launch's ssh
//! ends, removes the remote folder (a third) and exits with the launch's status
//! (ssh's own 255 when the connection failed). Nothing of it runs inside the launch.

use crate::container::quote;
use nix::sys::signal::{self, SigHandler, Signal};
use std::ffi::OsString;
use std::io::Write;
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicI32, Ordering};
use std::time::Duration;

/// The signal received and not yet passed on (0: none).
static PENDING: AtomicI32 = AtomicI32::new(0);

extern "C" fn note(sig: nix::libc::c_int) {
    PENDING.store(sig, Ordering::SeqCst);
}

/// A line on stderr, never a panic.
fn say(text: &str) {
    let _ = writeln!(std::io::stderr(), "ssh-attach: {text}");
}

/// Runs `script` through `ssh … sh -s` (its stdin), for a signal or the removal.
fn remote(ssh: &[String], script: &str) {
    let Some((program, args)) = ssh.split_first() else {
        return;
    };
    let child = Command::new(program)
        .args(args)
        .arg("sh -s")
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn();
    match child {
        Ok(mut c) => {
            if let Some(mut stdin) = c.stdin.take() {
                let _ = stdin.write_all(script.as_bytes());
            }
            let _ = c.wait();
        }
        Err(e) => say(&format!("cannot start {program:?}: {e}")),
    }
}

/// The program's entry point (`args` from the program's name on). Returns the exit
/// status.
pub fn main(args: &[OsString]) -> i32 {
    let args: Vec<String> = args
        .iter()
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    let (dir, ssh) = match args.as_slice() {
        [_, _, flag, dir, sep, ssh @ ..] if flag == "--dir" && sep == "--" && !ssh.is_empty() => {
            (dir.clone(), ssh.to_vec())
        }
        _ => {
            say("usage: __ssh-attach --dir DIR -- SSH ARGS…");
            return 2;
        }
    };
    for sig in [Signal::SIGTERM, Signal::SIGINT] {
        // SAFETY: the handler only stores into an atomic, which is async-signal-safe.
        if let Err(e) = unsafe { signal::signal(sig, SigHandler::Handler(note)) } {
            say(&format!("cannot handle {sig}: {e}"));
            return 125;
        }
    }
    let (program, rest) = (&ssh[0], &ssh[1..]);
    // In a process group of its own: the wrapper's SIGTERM to the run's group is
    // this program's to pass on to the remote, and must not end the connection
    // (without a terminal the remote would go on, unheard).
    let mut child = match Command::new(program)
        .args(rest)
        .arg(format!("sh {}", quote(&format!("{dir}/run"))))
        .process_group(0)
        .spawn()
    {
        Ok(c) => c,
        Err(e) => {
            say(&format!("cannot start {program:?}: {e}"));
            return 125;
        }
    };
    let status = loop {
        let sig = PENDING.swap(0, Ordering::SeqCst);
        if sig != 0 {
            let name = if sig == nix::libc::SIGINT {
                "INT"
            } else {
                "TERM"
            };
            remote(
                &ssh,
                &format!(
                    "p=$(cat {pid}) && g=$(cut -d' ' -f5 \"/proc/$p/stat\") && kill -s {name} -- \"-$g\"\n",
                    pid = quote(&format!("{dir}/pid"))
                ),
            );
        }
        match child.try_wait() {
            Ok(Some(s)) => break s,
            Ok(None) => std::thread::sleep(Duration::from_millis(50)),
            Err(e) => {
                say(&format!("cannot wait for ssh: {e}"));
                break match child.wait() {
                    Ok(s) => s,
                    Err(_) => return 125,
                };
            }
        }
    };
    let code = {
        use std::os::unix::process::ExitStatusExt;
        status
            .code()
            .or_else(|| status.signal().map(|s| 128 + s))
            .unwrap_or(125)
    };
    // A connection that failed (ssh's 255) may leave the launch running: it goes
    // with its folder. (After a launch that ended, its recorded pid may name
    // another process by now, so it is not signalled.)
    let kill = if code == 255 {
        "p=$(cat \"$d/pid\" 2>/dev/null) && g=$(cut -d' ' -f5 \"/proc/$p/stat\" 2>/dev/null) && kill -s KILL -- \"-$g\" 2>/dev/null\n"
    } else {
        ""
    };
    remote(
        &ssh,
        &format!("d={}\n{kill}rm -rf -- \"$d\"\n", quote(&dir)),
    );
    code
}
