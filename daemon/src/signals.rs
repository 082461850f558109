//! Stop and reload signals, and deadlines for graceful stops.
//!
//! systemd stops a service with SIGTERM (Ctrl-C in a terminal sends SIGINT) and, for
//! `ExecReload=kill -HUP $MAINPID` or `Type=notify-reload`, reloads it with SIGHUP. A daemon
//! creates [`Signals`] once its runtime runs, before it reports ready, and waits on
//! [`Signals::next`] in its main loop. Once created, the handlers stay installed for the life
//! of the process: these signals no longer kill it, the daemon decides.
//!
//! A graceful stop must finish within the unit's `TimeoutStopSec` (after which systemd sends
//! SIGKILL); [`with_deadline`] bounds it so the daemon can give up on stragglers and still exit
//! on its own terms.

use std::future::Future;
use std::io;
use std::time::Duration;

use tokio::signal::unix::{signal, SignalKind};

/// What a signal asks of the daemon.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Signal {
    /// SIGTERM or SIGINT: stop gracefully.
    Stop,
    /// SIGHUP: reload the configuration.
    Reload,
}

/// The daemon's signal handlers (SIGTERM, SIGINT, SIGHUP).
#[derive(Debug)]
pub struct Signals {
    term: tokio::signal::unix::Signal,
    int: tokio::signal::unix::Signal,
    hup: tokio::signal::unix::Signal,
}

impl Signals {
    /// Installs the handlers. Must be called inside a tokio runtime. Signals that arrive after
    /// this call are kept until [`next`](Self::next) takes them (several of one kind that
    /// arrive together may be merged into one).
    pub fn new() -> io::Result<Signals> {
        Ok(Signals {
            term: signal(SignalKind::terminate())?,
            int: signal(SignalKind::interrupt())?,
            hup: signal(SignalKind::hangup())?,
        })
    }

    /// Waits for the next signal. Cancel-safe: usable as a `select!` arm in a loop.
    pub async fn next(&mut self) -> Signal {
        let (name, what) = tokio::select! {
            Some(()) = self.term.recv() => ("SIGTERM", Signal::Stop),
            Some(()) = self.int.recv() => ("SIGINT", Signal::Stop),
            Some(()) = self.hup.recv() => ("SIGHUP", Signal::Reload),
            // Only when the runtime is shutting down: nothing more will arrive.
            else => ("none (the runtime is shutting down)", Signal::Stop),
        };
        tracing::debug!("received {name}: {what:?}");
        what
    }
}

/// The error of [`with_deadline`]: the future did not finish in time (and was dropped).
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("did not finish within {deadline:?}")]
pub struct DeadlineElapsed {
    /// The deadline that passed.
    pub deadline: Duration,
}

/// Runs `f` for at most `deadline`: its output, or [`DeadlineElapsed`] after dropping it.
/// Must be awaited inside a tokio runtime.
///
/// ```no_run
/// # async fn stop() {}
/// # async fn f() {
/// use std::time::Duration;
/// if let Err(e) = daemon::with_deadline(Duration::from_secs(80), stop()).await {
///     tracing::warn!("graceful stop {e}: exiting anyway");
/// }
/// # }
/// ```
pub async fn with_deadline<F: Future>(
    deadline: Duration,
    f: F,
) -> Result<F::Output, DeadlineElapsed> {
    tokio::time::timeout(deadline, f)
        .await
        .map_err(|_| DeadlineElapsed { deadline })
}
