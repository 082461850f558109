//! The `shell` executor extension: runs a binding's command once per attempt.
//!
//! Each run (`executor.run`) gets a directory, `<runs>/<execution_id>/`, where
//! `<runs>` is the executor's directory from `initialize` (`executor_dirs.shell`),
//! else `<state_dir>/runs`. The command runs detached from this process, under a
//! small wrapper (`open-conduit-wrap __wrap`, or this same binary re-executed as
//! `__wrap` where that program is not installed: [`sdk::wrapper::program`]) that is a session
//! leader of its own: killing the extension, or the runner's process group,
//! never kills a run. The wrapper starts the command in a process group of its
//! own, with the run's inputs in `inputs.json` (`OS_INPUTS` names it) and its
//! stdout and stderr in files, waits for the command's real exit status, ends
//! whatever the command left in its group, and records the end in `status`.
//!
//! * The recovery metadata (`shell.recovery.v1`: the wrapper's pid and start
//!   time, a nonce, the run directory) is persisted
//!   before the command starts: the wrapper waits for the extension's go, which
//!   comes only once the host has the metadata.
//! * `executor.wait` resolves when `status` exists, uploads stdout and stderr as
//!   artifacts, and answers completed for exit 0, failed otherwise (`exited with
//!   status 3`, `killed by signal 9 (SIGKILL)`, `killed by deadline (30 s): ...`).
//! * `executor.recover` adopts a run whose end is recorded or whose wrapper is
//!   alive (the process with its pid started when it did); else
//!   `not_adoptable`. It never launches.
//! * A sandboxed run's directory is read-only inside its sandbox but for its own
//!   `tmp` (`TMPDIR`); this process and the wrapper open every file of it without
//!   following symlinks ([`sdk::nofollow`]), and trust nothing of it for what
//!   they signal ([`sdk::detached`]).
//! * `executor.interrupt` and `executor.stop` end the command's whole group
//!   (SIGTERM, then SIGKILL after `grace_s`); stop answers with physical-stop
//!   evidence. `executor.forget` removes an ended run's directory.
//! * `executor.live` answers a running run's stdout and stderr so far: each one's
//!   size and last bytes ([`sdk::live`]); `not_live` once it has ended.
//! * `deadline_s` is enforced by the wrapper, so it holds with no extension.
//!
//! Modules: [`config`] parses the binding config, [`rundir`] holds the run
//! directory's files and the `/proc` checks, [`wrapper`] is the wrapper
//! process (both on [`sdk::detached`] and [`sdk::wrapper`]), [`executor`] the
//! methods; the directories come from `initialize` ([`sdk::dirs`]).

#![warn(missing_docs)]

pub mod config;
pub mod executor;
pub mod rundir;
pub mod wrapper;

use executor::Shell;
use protocol::wire::{
    ExecutorForgetParams, ExecutorInterruptParams, ExecutorLiveParams, ExecutorRecoverParams,
    ExecutorRunParams, ExecutorStopParams, ExecutorWaitParams, ValidateParams,
};

/// The manifest, `open-conduit-extension.json`.
pub const MANIFEST: &str = include_str!("../open-conduit-extension.json");

/// The extension, with every handler, serving `shell`.
pub fn extension(shell: Shell) -> Result<sdk::Extension, String> {
    let run = shell.clone();
    let recover = shell.clone();
    let wait = shell.clone();
    let interrupt = shell.clone();
    let stop = shell.clone();
    let live = shell.clone();
    let forget = shell;
    let ext = sdk::Extension::new(MANIFEST)
        .map_err(|e| e.to_string())?
        .on::<ExecutorRunParams, _, _>(move |ctx, p| {
            let s = run.clone();
            async move { s.run(&ctx.host, p).await }
        })
        .on::<ExecutorRecoverParams, _, _>(move |ctx, p| {
            let s = recover.clone();
            async move { s.recover(&ctx.host, p).await }
        })
        .on::<ExecutorWaitParams, _, _>(move |ctx, p| {
            let s = wait.clone();
            async move { s.wait(&ctx.host, p).await }
        })
        .on::<ExecutorInterruptParams, _, _>(move |_ctx, p| {
            let s = interrupt.clone();
            async move { s.interrupt(p).await }
        })
        .on::<ExecutorStopParams, _, _>(move |_ctx, p| {
            let s = stop.clone();
            async move { s.stop(p).await }
        })
        .on::<ExecutorLiveParams, _, _>(move |_ctx, p| {
            let s = live.clone();
            async move { s.live(p).await }
        })
        .on::<ExecutorForgetParams, _, _>(move |_ctx, p| {
            let s = forget.clone();
            async move { s.forget(p).await }
        })
        .on::<ValidateParams, _, _>(|_ctx, p| async move { Ok(executor::validate(&p)) });
    if let Some(e) = ext.errors().first() {
        return Err(e.to_string());
    }
    Ok(ext)
}

/// The binary's entry point: the wrapper when started as `__wrap`, else the
/// extension served over stdio. Returns the exit status.
pub fn main() -> i32 {
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    if args.get(1).and_then(|a| a.to_str()) == Some(rundir::WRAP_ARG) {
        return wrapper::main(&args[2..]);
    }
    let dirs = sdk::dirs::SharedDirs::default();
    match extension(Shell::new(dirs.clone())) {
        Ok(ext) => sdk::run(ext.on_initialize(sdk::dirs::record(dirs, executor::EXECUTOR))),
        Err(e) => {
            eprintln!("shell: {e}");
            2
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn the_manifest_declares_the_executor_and_its_controls() {
        let m = protocol::manifest::parse_manifest(MANIFEST.as_bytes()).unwrap();
        assert_eq!(m.name, "shell");
        assert_eq!(m.command, ["oc-shell-extension"]);
        let ex = &m.provides.executors[0];
        assert_eq!(ex.name, executor::EXECUTOR);
        assert!(ex.labels.interrupt && !ex.labels.inject && !ex.labels.resume);
        assert_eq!(ex.labels.toolbelt, "none");
        assert_eq!(ex.pool, "jobs");
        for method in [
            "executor.run",
            "executor.recover",
            "executor.wait",
            "executor.interrupt",
            "executor.stop",
            "executor.forget",
            "executor.live",
        ] {
            assert!(m.enables(method), "{method}");
        }
        for method in ["executor.inject", "executor.resume", "executor.attach"] {
            assert!(!m.enables(method), "{method}");
        }
        assert!(extension(Shell::new(Default::default())).is_ok());
    }
}
