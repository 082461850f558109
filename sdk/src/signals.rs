//! What a run is started with: the signal dispositions and mask a new program
//! expects. A disposition of "ignore" survives `exec`, so an extension started from a
//! process that ignored SIGINT (`nohup`, `cmd &` in a script) would pass it to every
//! run, and an interrupt could never stop one. Rust's `Command` already resets
//! SIGPIPE and the mask; the other ignored signals are reset here.

use nix::sys::signal::{sigprocmask, SigHandler, SigSet, SigmaskHow, Signal};

/// Resets every catchable signal to its default disposition and unblocks all
/// signals. For `pre_exec`: it calls only `sigaction` and `sigprocmask`, which are
/// async-signal-safe, and allocates nothing.
pub fn reset_for_exec() -> std::io::Result<()> {
    for signal in Signal::iterator() {
        if matches!(signal, Signal::SIGKILL | Signal::SIGSTOP) {
            continue;
        }
        // SAFETY: installs the default disposition, no handler code.
        let _ = unsafe { nix::sys::signal::signal(signal, SigHandler::SigDfl) };
    }
    sigprocmask(SigmaskHow::SIG_SETMASK, Some(&SigSet::empty()), None)?;
    Ok(())
}

/// [`reset_for_exec`] as the `pre_exec` hook of `cmd`.
pub fn reset_on_exec(cmd: &mut std::process::Command) {
    use std::os::unix::process::CommandExt;
    // SAFETY: the hook calls only async-signal-safe functions (see reset_for_exec).
    unsafe {
        cmd.pre_exec(reset_for_exec);
    }
}
