//! The crate's error type.

use std::io;
use std::os::fd::RawFd;

use crate::signals::DeadlineElapsed;

/// Everything that can go wrong while a daemon starts up.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A `--log` value that is not `auto`, `journald` or `stderr`.
    #[error("invalid log target {0:?}: expected auto, journald or stderr")]
    InvalidLogTarget(String),

    /// An environment variable whose value cannot be used.
    #[error("invalid {var}={value:?}: {reason}")]
    InvalidEnv {
        var: &'static str,
        value: String,
        reason: String,
    },

    /// Logging to journald was asked for, but its socket could not be reached.
    #[error("cannot log to journald: {0}")]
    Journald(#[source] io::Error),

    /// A global `tracing` subscriber is already installed.
    #[error("cannot install the log subscriber: {0}")]
    LogInit(String),

    /// A system call on a socket-activated file descriptor failed.
    #[error("socket-activated fd {fd} ({name:?}): {op}: {source}")]
    Fd {
        fd: RawFd,
        name: String,
        op: &'static str,
        #[source]
        source: nix::Error,
    },

    /// A socket-activated file descriptor is not the kind of socket the daemon asked for.
    #[error("socket-activated fd {fd} ({name:?}) is not {expected}: it is {found}")]
    WrongSocket {
        fd: RawFd,
        name: String,
        expected: &'static str,
        found: String,
    },

    /// A graceful stop did not finish in time.
    #[error(transparent)]
    Deadline(#[from] DeadlineElapsed),

    #[error(transparent)]
    Io(#[from] io::Error),
}
