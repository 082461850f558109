//! What every daemon's `main` does before its own work, in the one order that is
//! right: parse the arguments, start logging, take the notifier and the passed
//! sockets (both read and clear the environment, so before any thread starts),
//! build the runtime, run, and turn the outcome into an exit status.

use crate::{Activation, LogTarget, Notifier};
use std::future::Future;

/// The runtime a daemon runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flavor {
    /// One thread: for work that is short hops between sockets.
    CurrentThread,
    /// A pool of this many worker threads (0: one per core).
    MultiThread(usize),
}

/// Parse `args` (the program name first); on `--help`, `--version` or an error,
/// print it and answer the exit status (0, or 2 for a usage error).
pub fn parse_args<A: clap::Parser>(args: impl IntoIterator<Item = String>) -> Result<A, i32> {
    A::try_parse_from(args).map_err(|e| {
        let _ = e.print();
        if e.use_stderr() {
            2
        } else {
            0
        }
    })
}

/// Start logging as `identifier` (`open-conduit-broker`, …), take the notifier and
/// the passed sockets, build the runtime and run `run` on it. Answers the exit
/// status: 0 when `run` returns `Ok`, 1 when start-up fails or `run` returns an
/// error (logged).
pub fn run_daemon<F, Fut>(identifier: &str, log: LogTarget, flavor: Flavor, run: F) -> i32
where
    F: FnOnce(Notifier, Activation) -> Fut,
    Fut: Future<Output = Result<(), String>>,
{
    if let Err(e) = crate::log::init(identifier, log) {
        eprintln!("{identifier}: {e}");
        return 1;
    }
    // Both edit the environment: before any thread starts.
    let notifier = Notifier::from_env();
    let activation = match Activation::from_env() {
        Ok(a) => a,
        Err(e) => {
            tracing::error!(error = %e, "socket activation");
            return 1;
        }
    };
    let built = match flavor {
        Flavor::CurrentThread => tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build(),
        Flavor::MultiThread(0) => tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build(),
        Flavor::MultiThread(workers) => tokio::runtime::Builder::new_multi_thread()
            .worker_threads(workers)
            .enable_all()
            .build(),
    };
    let rt = match built {
        Ok(rt) => rt,
        Err(e) => {
            tracing::error!(error = %e, "cannot start the runtime");
            return 1;
        }
    };
    match rt.block_on(run(notifier, activation)) {
        Ok(()) => 0,
        Err(e) => {
            tracing::error!(error = %e, "{identifier} stops");
            1
        }
    }
}
