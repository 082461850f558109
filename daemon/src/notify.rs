//! Readiness, status and watchdog notifications to the service manager (`sd_notify`).
//!
//! The protocol is one datagram per notification, `KEY=VALUE` lines, sent to the unix socket
//! named by `NOTIFY_SOCKET`: a path, or `@name` for a socket in the abstract namespace.
//! systemd sets it for `Type=notify` services; `open-conduit up` sets it for the daemons it
//! runs.
//!
//! A daemon creates one [`Notifier`] with [`Notifier::from_env`] at start-up, sends
//! [`ready`](Notifier::ready) once it serves, [`status`](Notifier::status) whenever it has
//! something to say, [`stopping`](Notifier::stopping) when it starts a graceful stop, and
//! [`watchdog`](Notifier::watchdog) pings when the service manager asks for them.
//!
//! # The watchdog
//!
//! With `WatchdogSec=` systemd kills a service that stops pinging. The ping must prove that
//! the daemon works, so send it from the daemon's main loop, never from a timer thread or task
//! of its own, which would go on pinging while the loop is hung:
//!
//! ```no_run
//! # async fn run(notifier: daemon::Notifier, mut signals: daemon::Signals) {
//! let mut watchdog = notifier.watchdog_ticker();
//! loop {
//!     tokio::select! {
//!         _ = daemon::notify::tick(&mut watchdog) => {
//!             let _ = notifier.watchdog();
//!         }
//!         _signal = signals.next() => {
//!             // ... stop or reload ...
//!             break;
//!         }
//!         // ... the daemon's own work ...
//!     }
//! }
//! # }
//! ```
//!
//! Sending never fails the daemon: every method returns the `io::Result` of the send for
//! callers who care, and logs a failure at debug level. A disabled notifier (no
//! `NOTIFY_SOCKET`) sends nothing and returns `Ok(())`.

use std::ffi::OsStr;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::net::{SocketAddr, UnixDatagram};
use std::sync::Arc;
use std::time::Duration;

use nix::time::{clock_gettime, ClockId};

const NOTIFY_SOCKET: &str = "NOTIFY_SOCKET";
const WATCHDOG_USEC: &str = "WATCHDOG_USEC";
const WATCHDOG_PID: &str = "WATCHDOG_PID";

/// How long a notification may block when the service manager does not read its socket.
const SEND_TIMEOUT: Duration = Duration::from_secs(1);

/// Sends notifications to the service manager. Cheap to clone; all clones share one socket.
#[derive(Clone, Debug, Default)]
pub struct Notifier {
    inner: Option<Arc<Inner>>,
}

#[derive(Debug)]
struct Inner {
    socket: UnixDatagram,
    addr: SocketAddr,
    /// The name as given, for messages.
    name: String,
    /// The full watchdog timeout (`WATCHDOG_USEC`).
    watchdog: Option<Duration>,
}

impl Notifier {
    /// Reads `NOTIFY_SOCKET`, `WATCHDOG_USEC` and `WATCHDOG_PID`, then removes all three from
    /// the environment so that child processes (extensions, executions) never inherit them
    /// and never talk to the service manager in our name.
    ///
    /// Call it once, early in `main`, before any thread is started (the tokio runtime
    /// included): removing an environment variable is not thread-safe. Call
    /// [`log::init`](crate::log::init) before it so that its complaints are logged.
    ///
    /// The watchdog is honoured only when `WATCHDOG_PID` is unset or is our pid, and
    /// `WATCHDOG_USEC` is a positive number. A `NOTIFY_SOCKET` that is empty or cannot be
    /// used is logged as an error and gives a disabled notifier: the daemon goes on.
    pub fn from_env() -> Notifier {
        let socket = std::env::var_os(NOTIFY_SOCKET);
        let usec = std::env::var_os(WATCHDOG_USEC);
        let pid = std::env::var_os(WATCHDOG_PID);
        for var in [NOTIFY_SOCKET, WATCHDOG_USEC, WATCHDOG_PID] {
            std::env::remove_var(var);
        }

        let Some(socket) = socket else {
            tracing::debug!("NOTIFY_SOCKET is not set: not notifying a service manager");
            return Notifier::disabled();
        };
        if socket.is_empty() {
            tracing::error!("NOTIFY_SOCKET is set but empty: not notifying a service manager");
            return Notifier::disabled();
        }
        let watchdog = watchdog_from(usec.as_deref(), pid.as_deref());
        match Notifier::for_socket(&socket, watchdog) {
            Ok(notifier) => notifier,
            Err(e) => {
                tracing::error!(
                    "NOTIFY_SOCKET={:?} cannot be used ({e}): not notifying a service manager",
                    socket.to_string_lossy()
                );
                Notifier::disabled()
            }
        }
    }

    /// A notifier for the socket `socket`: an absolute path, or `@name` for the abstract
    /// namespace (the syntax of `NOTIFY_SOCKET`). `watchdog` is the full watchdog timeout
    /// (as `WATCHDOG_USEC`); pings are due every half of it. For tests, and for
    /// `open-conduit up`.
    pub fn for_socket(
        socket: impl AsRef<OsStr>,
        watchdog: Option<Duration>,
    ) -> io::Result<Notifier> {
        let socket = socket.as_ref();
        let addr = parse_addr(socket)?;
        let sock = UnixDatagram::unbound()?;
        // Never blocks the thread that sends: a service manager that is not reading
        // (a queue full of watchdog pings) would otherwise stop the whole daemon,
        // which may run on one thread. A datagram that cannot go now is an error
        // the caller logs, not a wait.
        sock.set_nonblocking(true)?;
        sock.set_write_timeout(Some(SEND_TIMEOUT))?;
        Ok(Notifier {
            inner: Some(Arc::new(Inner {
                socket: sock,
                addr,
                name: socket.to_string_lossy().into_owned(),
                watchdog: watchdog.filter(|d| !d.is_zero()),
            })),
        })
    }

    /// A notifier that sends nothing.
    pub fn disabled() -> Notifier {
        Notifier { inner: None }
    }

    /// Whether notifications are sent anywhere.
    pub fn enabled(&self) -> bool {
        self.inner.is_some()
    }

    /// `READY=1`: start-up is finished and the daemon serves. Also send it after a reload.
    pub fn ready(&self) -> io::Result<()> {
        self.send("READY=1")
    }

    /// `STATUS=...`: one line saying what the daemon does, shown by `systemctl status`.
    /// Line breaks in `text` become spaces.
    pub fn status(&self, text: &str) -> io::Result<()> {
        let line: String = text
            .chars()
            .map(|c| if c == '\n' || c == '\r' { ' ' } else { c })
            .collect();
        self.send(&format!("STATUS={line}"))
    }

    /// `STOPPING=1`: a graceful stop has begun.
    pub fn stopping(&self) -> io::Result<()> {
        self.send("STOPPING=1")
    }

    /// `RELOADING=1` with `MONOTONIC_USEC=` (the `CLOCK_MONOTONIC` time now), as
    /// `Type=notify-reload` requires: the daemon has begun reloading its configuration. Send
    /// [`ready`](Self::ready) when the reload is done.
    pub fn reloading(&self) -> io::Result<()> {
        if !self.enabled() {
            return Ok(());
        }
        let now = clock_gettime(ClockId::CLOCK_MONOTONIC).map_err(io::Error::from)?;
        let usec = now.tv_sec() * 1_000_000 + now.tv_nsec() / 1_000;
        self.send(&format!("RELOADING=1\nMONOTONIC_USEC={usec}"))
    }

    /// `WATCHDOG=1`: a watchdog ping. Send it from the main loop (see the module docs).
    pub fn watchdog(&self) -> io::Result<()> {
        self.send("WATCHDOG=1")
    }

    /// `EXTEND_TIMEOUT_USEC=...`: asks for `extra` more time to finish starting, reloading or
    /// stopping, counted from now.
    pub fn extend_timeout(&self, extra: Duration) -> io::Result<()> {
        self.send(&format!("EXTEND_TIMEOUT_USEC={}", extra.as_micros()))
    }

    /// How often to ping the watchdog (half the watchdog timeout), or `None` when no watchdog
    /// is asked for or the notifier is disabled.
    pub fn watchdog_interval(&self) -> Option<Duration> {
        self.inner.as_ref()?.watchdog.map(|d| d / 2)
    }

    /// A ticker for the main loop's `select!` that ticks every
    /// [`watchdog_interval`](Self::watchdog_interval) (the first tick is immediate), or `None`
    /// when there is no watchdog. Must be called inside a tokio runtime.
    pub fn watchdog_ticker(&self) -> Option<tokio::time::Interval> {
        let period = self.watchdog_interval()?;
        let mut ticker = tokio::time::interval(period);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        Some(ticker)
    }

    /// Sends `state` (newline-separated `KEY=VALUE` assignments) as one datagram.
    pub fn send(&self, state: &str) -> io::Result<()> {
        let Some(inner) = &self.inner else {
            return Ok(());
        };
        match inner.socket.send_to_addr(state.as_bytes(), &inner.addr) {
            Ok(_) => Ok(()),
            Err(e) => {
                tracing::debug!(
                    socket = %inner.name,
                    "cannot notify the service manager of {state:?}: {e}"
                );
                Err(e)
            }
        }
    }
}

/// Waits for the next tick of `ticker`, or forever when it is `None`: a `select!` arm for
/// [`Notifier::watchdog_ticker`] that needs no precondition.
pub async fn tick(ticker: &mut Option<tokio::time::Interval>) {
    match ticker {
        Some(t) => {
            t.tick().await;
        }
        None => std::future::pending().await,
    }
}

fn parse_addr(socket: &OsStr) -> io::Result<SocketAddr> {
    let bytes = socket.as_bytes();
    match bytes.first() {
        Some(b'/') => SocketAddr::from_pathname(socket),
        Some(b'@') => abstract_addr(&bytes[1..]),
        _ => Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "expected an absolute path or @name",
        )),
    }
}

#[cfg(target_os = "linux")]
fn abstract_addr(name: &[u8]) -> io::Result<SocketAddr> {
    use std::os::linux::net::SocketAddrExt;
    SocketAddr::from_abstract_name(name)
}

#[cfg(not(target_os = "linux"))]
fn abstract_addr(_name: &[u8]) -> io::Result<SocketAddr> {
    Err(io::Error::new(
        io::ErrorKind::Unsupported,
        "abstract unix sockets exist only on Linux",
    ))
}

/// The watchdog timeout from `WATCHDOG_USEC`, if it is meant for us.
fn watchdog_from(usec: Option<&OsStr>, pid: Option<&OsStr>) -> Option<Duration> {
    let usec = usec?;
    if let Some(pid) = pid {
        match pid.to_str().and_then(|p| p.parse::<u32>().ok()) {
            Some(p) if p == std::process::id() => {}
            Some(p) => {
                tracing::debug!("WATCHDOG_PID={p} is not our pid: no watchdog");
                return None;
            }
            None => {
                tracing::error!("WATCHDOG_PID={:?} is not a pid: no watchdog", pid);
                return None;
            }
        }
    }
    match usec.to_str().and_then(|u| u.parse::<u64>().ok()) {
        Some(0) => None,
        Some(u) => Some(Duration::from_micros(u)),
        None => {
            tracing::error!(
                "WATCHDOG_USEC={:?} is not a number of microseconds: no watchdog",
                usec
            );
            None
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn watchdog_values() {
        let me = std::process::id().to_string();
        fn us(s: &str) -> Option<&OsStr> {
            Some(OsStr::new(s))
        }
        assert_eq!(watchdog_from(None, None), None);
        assert_eq!(
            watchdog_from(us("3000000"), None),
            Some(Duration::from_secs(3))
        );
        assert_eq!(
            watchdog_from(us("3000000"), us(&me)),
            Some(Duration::from_secs(3))
        );
        let other = (std::process::id() + 1).to_string();
        assert_eq!(watchdog_from(us("3000000"), us(&other)), None);
        assert_eq!(watchdog_from(us("3000000"), us("x")), None);
        assert_eq!(watchdog_from(us("0"), None), None);
        assert_eq!(watchdog_from(us("-5"), None), None);
        assert_eq!(watchdog_from(us(""), None), None);
    }

    #[test]
    fn addresses() {
        assert!(parse_addr(OsStr::new("/run/x.sock")).is_ok());
        assert!(parse_addr(OsStr::new("@name")).is_ok());
        assert!(parse_addr(OsStr::new("relative.sock")).is_err());
        assert!(parse_addr(OsStr::new("vsock:2:1234")).is_err());
        assert!(parse_addr(OsStr::new("")).is_err());
    }

    /// A service manager that stops reading fills the socket's queue; the daemon's
    /// next ping is refused at once instead of holding its thread (a daemon on one
    /// thread would stop serving).
    #[test]
    fn a_full_queue_refuses_a_ping_instead_of_blocking() {
        let dir = std::env::temp_dir().join(format!("oc-notify-full-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("notify.sock");
        let manager = std::os::unix::net::UnixDatagram::bind(&path).unwrap();
        let n = Notifier::for_socket(&path, None).unwrap();
        n.ready().unwrap();
        let mut refused = None;
        for i in 0..100_000 {
            if let Err(e) = n.watchdog() {
                refused = Some((i, e));
                break;
            }
        }
        let (sent, e) = refused.expect("the queue never filled");
        assert!(sent > 0);
        assert_eq!(e.kind(), io::ErrorKind::WouldBlock, "{e}");
        // What was queued is there to read, READY=1 first.
        let mut buf = [0u8; 64];
        let len = manager.recv(&mut buf).unwrap();
        assert_eq!(&buf[..len], b"READY=1");
        drop(manager);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn disabled_sends_nothing() {
        let n = Notifier::disabled();
        assert!(!n.enabled());
        n.ready().unwrap();
        n.reloading().unwrap();
        assert_eq!(n.watchdog_interval(), None);
        assert!(n.watchdog_ticker().is_none());
    }
}
