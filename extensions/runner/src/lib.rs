//! The `runner` extension: the example external executor, written with the SDK.
//!
//! It provides one executor, `runner`, whose binding config is
//! `{"command": ["argv", ...]}`. Each attempt starts the command as a *job*: a
//! child process in a process group of its own, with stdin a pipe this process
//! keeps open and stdout and stderr in files of the run directory,
//! `runs/<execution_id>/` under the extension's working directory.
//!
//! The lifecycle, one SDK handler per protocol method:
//!
//! * `executor.run` starts the job, persists the recovery metadata
//!   (`runner.recovery.v1`: pid and run directory) with
//!   `execution.persist_recovery`, then answers. The run's inputs become the
//!   job's first lines on stdin.
//! * `executor.inject` writes an input to the job's stdin as one JSON line.
//! * `executor.interrupt` sends SIGINT to the job's group.
//! * `executor.stop` sends SIGTERM, SIGKILL 5 s later, and answers once `/proc`
//!   shows the group empty.
//! * `executor.wait` answers from the job's exit status: completed for exit 0,
//!   failed otherwise; the summary is stdout's last line; stdout and stderr are
//!   uploaded as artifacts.
//! * `executor.forget` drops an ended run's files and state.
//! * `executor.recover` adopts only a job this same process started.
//!
//! Modules: [`job`] is the process side (spawn, stdin, signals, `/proc`),
//! [`executor`] the protocol side (one method per handler); this file wires
//! them to the SDK.

#![warn(missing_docs)]

pub mod executor;
pub mod job;

use executor::Runner;
use protocol::wire::{
    ExecutorForgetParams, ExecutorInjectParams, ExecutorInterruptParams, ExecutorRecoverParams,
    ExecutorRunParams, ExecutorStopParams, ExecutorWaitParams, ValidateParams,
};

/// The manifest, `open-conduit-extension.json`.
pub const MANIFEST: &str = include_str!("../open-conduit-extension.json");

/// The extension: the manifest and one handler per method, all sharing
/// `runner`.
///
/// `Extension::on::<P, _, _>` serves the catalogue method whose params type is
/// `P` (`ExecutorRunParams` is `executor.run`), decoding the params and
/// encoding the answer; the SDK refuses a handler for a method the manifest
/// does not enable (inject needs the `inject` label, stop the `stop`
/// control...), which [`sdk::Extension::errors`] reports here.
pub fn extension(runner: Runner) -> Result<sdk::Extension, String> {
    // Each handler owns a clone of the (cheap, shared) executor state, and
    // clones it again into the future it returns.
    let (run, recover, wait) = (runner.clone(), runner.clone(), runner.clone());
    let (inject, interrupt, stop, forget) =
        (runner.clone(), runner.clone(), runner.clone(), runner);
    let ext = sdk::Extension::new(MANIFEST)
        .map_err(|e| e.to_string())?
        .on::<ExecutorRunParams, _, _>(move |ctx, p| {
            let r = run.clone();
            // `ctx.host` calls back into the host (persist_recovery here).
            async move { r.run(&ctx.host, p).await }
        })
        .on::<ExecutorRecoverParams, _, _>(move |_ctx, p| {
            let r = recover.clone();
            async move { r.recover(p).await }
        })
        .on::<ExecutorWaitParams, _, _>(move |ctx, p| {
            let r = wait.clone();
            // A cancelled wait drops this future: only the observation ends.
            async move { r.wait(&ctx.host, p).await }
        })
        .on::<ExecutorInjectParams, _, _>(move |_ctx, p| {
            let r = inject.clone();
            async move { r.inject(p).await }
        })
        .on::<ExecutorInterruptParams, _, _>(move |_ctx, p| {
            let r = interrupt.clone();
            async move { r.interrupt(p).await }
        })
        .on::<ExecutorStopParams, _, _>(move |_ctx, p| {
            let r = stop.clone();
            async move { r.stop(p).await }
        })
        .on::<ExecutorForgetParams, _, _>(move |_ctx, p| {
            let r = forget.clone();
            async move { r.forget(p).await }
        })
        .on::<ValidateParams, _, _>(|_ctx, p| async move { Ok(executor::validate(&p)) });
    if let Some(e) = ext.errors().first() {
        return Err(e.to_string());
    }
    Ok(ext)
}

/// The binary's entry point: serves the extension over stdio until the host
/// closes the connection, and returns the exit status.
///
/// Runs live in `runs/` under the working directory. (The SDK does not hand
/// `initialize`'s `state_dir` to the extension; the bundled shell executor
/// taps its input to read it, which this example leaves out.)
pub fn main() -> i32 {
    let runs = match std::env::current_dir() {
        Ok(cwd) => cwd.join("runs"),
        Err(e) => {
            eprintln!("runner: no working directory: {e}");
            return 2;
        }
    };
    match extension(Runner::new(runs)) {
        // `sdk::run` answers initialize and shutdown itself, keeps stdout for
        // the protocol only, and returns when stdin reaches EOF.
        Ok(ext) => sdk::run(ext),
        Err(e) => {
            eprintln!("runner: {e}");
            2
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn the_manifest_enables_every_method_served() {
        let m = protocol::manifest::parse_manifest(MANIFEST.as_bytes()).unwrap();
        assert_eq!(m.name, "runner");
        assert_eq!(m.command, ["oc-runner-extension"]);
        let ex = &m.provides.executors[0];
        assert_eq!(ex.name, executor::EXECUTOR);
        assert_eq!(ex.pool, "jobs");
        assert!(ex.labels.interrupt && ex.labels.inject && !ex.labels.resume);
        assert_eq!(ex.labels.toolbelt, "none");
        for method in [
            "executor.run",
            "executor.recover",
            "executor.wait",
            "executor.inject",
            "executor.interrupt",
            "executor.stop",
            "executor.forget",
        ] {
            assert!(m.enables(method), "{method}");
        }
        assert!(!m.enables("executor.resume"));
        extension(Runner::new("runs".into())).unwrap();
    }
}
