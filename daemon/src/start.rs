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
    /// One thread, unless the operator sets [`WORKER_THREADS_ENV`] to a pool size
    /// of 2 or more. One thread costs less CPU per message than a pool (no
    /// stealing, no waking a sibling worker for each task woken); a pool lets one
    /// daemon use more than one core on a large host.
    Tunable,
}

/// The environment variable that sets the pool size of the daemons whose flavor
/// is [`Flavor::Tunable`].
pub const WORKER_THREADS_ENV: &str = "OPEN_CONDUIT_WORKER_THREADS";

impl Flavor {
    /// The flavor to build, given the value of [`WORKER_THREADS_ENV`]. A value that
    /// is not a number is an error naming the variable.
    pub fn resolve(self, env: Option<&str>) -> Result<Flavor, String> {
        let Flavor::Tunable = self else {
            return Ok(self);
        };
        let Some(text) = env.map(str::trim).filter(|t| !t.is_empty()) else {
            return Ok(Flavor::CurrentThread);
        };
        match text.parse::<usize>() {
            Ok(0 | 1) => Ok(Flavor::CurrentThread),
            Ok(n) if n <= MAX_WORKER_THREADS => Ok(Flavor::MultiThread(n)),
            _ => Err(format!(
                "{WORKER_THREADS_ENV}={text:?}: expected a number of worker threads from 1 to {MAX_WORKER_THREADS}"
            )),
        }
    }
}

/// The largest pool [`WORKER_THREADS_ENV`] may ask for.
pub const MAX_WORKER_THREADS: usize = 256;

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
    let flavor = match flavor.resolve(std::env::var(WORKER_THREADS_ENV).ok().as_deref()) {
        Ok(f) => f,
        Err(e) => {
            tracing::error!(error = %e, "cannot start the runtime");
            return 1;
        }
    };
    let built = match flavor {
        Flavor::CurrentThread | Flavor::Tunable => tokio::runtime::Builder::new_current_thread()
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tunable_daemon_runs_on_one_thread_unless_told() {
        let t = Flavor::Tunable;
        assert_eq!(t.resolve(None), Ok(Flavor::CurrentThread));
        assert_eq!(t.resolve(Some("")), Ok(Flavor::CurrentThread));
        assert_eq!(t.resolve(Some("1")), Ok(Flavor::CurrentThread));
        assert_eq!(t.resolve(Some(" 4 ")), Ok(Flavor::MultiThread(4)));
        let e = t.resolve(Some("many")).unwrap_err();
        assert!(
            e.contains(WORKER_THREADS_ENV) && e.contains("\"many\""),
            "{e}"
        );
        assert!(t.resolve(Some("100000")).is_err());
        // The others are what they say, whatever the environment.
        assert_eq!(
            Flavor::CurrentThread.resolve(Some("8")),
            Ok(Flavor::CurrentThread)
        );
        assert_eq!(
            Flavor::MultiThread(2).resolve(Some("8")),
            Ok(Flavor::MultiThread(2))
        );
    }
}
