//! Logging with `tracing`: to journald under systemd, readable lines on stderr otherwise.
//!
//! Call [`init`] first thing in `main` (before [`Notifier::from_env`](crate::Notifier::from_env)
//! and [`Activation::from_env`](crate::Activation::from_env), so their complaints are logged).
//!
//! # Target
//!
//! [`LogTarget::Auto`] (the default of a daemon's `--log` flag) logs to journald when the
//! process was started by journald, that is when `JOURNAL_STREAM` names stderr (see
//! [`stderr_is_journal`]), and to stderr otherwise. `--log journald` and `--log stderr` force
//! one or the other.
//!
//! # Filter
//!
//! `OC_LOG` selects what is logged, with the directive syntax of `RUST_LOG` without regular
//! expressions: a default level and `target=level` pairs separated by commas, such as
//! `info` (the default when `OC_LOG` is unset or empty), `debug`, or
//! `info,schedulerd=debug,protocol=trace`. A target matches itself and the modules below it.
//!
//! # Correlation fields
//!
//! The names in [`fields`] follow one thing across daemons, so that
//! `journalctl OC_WORK_ID=w-123` tells one Work's story. Put them on a span that covers the
//! work and every event recorded inside the span carries them:
//!
//! ```
//! use daemon::fields;
//!
//! # let work_id = "w-123";
//! let span = tracing::info_span!("attempt", { fields::WORK_ID } = %work_id);
//! let _entered = span.enter(); // or `.instrument(span)` on a future
//! tracing::info!("attempt started"); // journal entry has OC_WORK_ID=w-123
//! ```
//!
//! What reaches the journal, from reading tracing-journald 0.3 (its docs and source):
//!
//! - Every event sends the fields of all its enclosing spans (root first), then `PRIORITY`,
//!   `TARGET`, `CODE_FILE`, `CODE_LINE`, `SYSLOG_IDENTIFIER` and the event's own fields. Each
//!   span also adds `SPAN_NAME`, `SPAN_TARGET`, `SPAN_CODE_FILE` and `SPAN_CODE_LINE`. Nested
//!   spans that both set a field give the entry that field twice, which journald keeps as
//!   two values.
//! - Field names are sanitised: `.` becomes `_`, leading `_` are dropped, characters other
//!   than ASCII letters, digits and `_` are dropped, and the rest is upper-cased. So
//!   `OC_WORK_ID` (and `oc_work_id`) arrive as `OC_WORK_ID`.
//! - By default every user field except `message` is prefixed with `F_` (the default prefix
//!   is `Some("F")`, joined with `_`), which would make `F_OC_WORK_ID`.
//!   [`init`] calls `with_field_prefix(None)`, so our fields arrive unprefixed. The price:
//!   a field named like a journald standard field (`priority`, `target`, `code_line`,
//!   `syslog_identifier`, ...) would collide with it. Do not use such names; the `OC_` names
//!   here are safe.
//! - `message` becomes `MESSAGE`; values are sent length-encoded, so newlines are kept.
//! - `PRIORITY` is syslog's for the level ([`priorities`]): ERROR 3, WARN 4, INFO 6,
//!   DEBUG and TRACE 7 (tracing-journald's default puts INFO at 5, "notice", which would
//!   make every routine line stand out in `journalctl -p notice`).
//!
//! On stderr the span and its fields are printed before the message, e.g.
//! `INFO attempt{OC_WORK_ID=w-123}: schedulerd::run: attempt started`.

use std::ffi::OsStr;
use std::fmt;
use std::io::IsTerminal;
use std::os::fd::AsFd;
use std::os::unix::fs::MetadataExt;
use std::str::FromStr;

use tracing_subscriber::filter::Targets;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;

use crate::Error;

/// Journal field names that follow one thing across daemons. Use them as span fields
/// (see the [module documentation](self)).
pub mod fields {
    /// The id of an accepted event.
    pub const EVENT_ID: &str = "OC_EVENT_ID";
    /// The id of a Work.
    pub const WORK_ID: &str = "OC_WORK_ID";
    /// The id of an execution (the process group an executor started for an attempt).
    pub const EXECUTION_ID: &str = "OC_EXECUTION_ID";
    /// The scope a Work or an extension runs in.
    pub const SCOPE: &str = "OC_SCOPE";
    /// The name of an extension.
    pub const EXTENSION: &str = "OC_EXTENSION";
}

/// The journal priority of each level: syslog's meaning of each (ERROR `err` 3, WARN
/// `warning` 4, INFO `info` 6, DEBUG and TRACE `debug` 7).
pub fn priorities() -> tracing_journald::PriorityMappings {
    use tracing_journald::Priority;
    tracing_journald::PriorityMappings {
        error: Priority::Error,
        warn: Priority::Warning,
        info: Priority::Informational,
        debug: Priority::Debug,
        trace: Priority::Debug,
    }
}

/// The environment variable holding the log filter.
pub const FILTER_VAR: &str = "OC_LOG";

/// Where log records go; the value of a daemon's `--log` flag.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum LogTarget {
    /// Journald when stderr is connected to the journal, stderr otherwise.
    #[default]
    Auto,
    /// Always journald; [`init`] fails if it cannot be reached.
    Journald,
    /// Always readable lines on stderr.
    Stderr,
}

impl FromStr for LogTarget {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self, Error> {
        match s {
            "auto" => Ok(LogTarget::Auto),
            "journald" => Ok(LogTarget::Journald),
            "stderr" => Ok(LogTarget::Stderr),
            other => Err(Error::InvalidLogTarget(other.to_owned())),
        }
    }
}

impl fmt::Display for LogTarget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            LogTarget::Auto => "auto",
            LogTarget::Journald => "journald",
            LogTarget::Stderr => "stderr",
        })
    }
}

/// Installs the global `tracing` subscriber.
///
/// `identifier` is the journal's `SYSLOG_IDENTIFIER` (`journalctl -t`), such as
/// `open-conduit-broker`. The filter comes from `OC_LOG` (see the module documentation).
///
/// Errors: an invalid `OC_LOG`, [`LogTarget::Journald`] when journald cannot be reached, or a
/// subscriber already installed. With [`LogTarget::Auto`], a journal that cannot be reached
/// falls back to stderr with a warning.
pub fn init(identifier: &str, target: LogTarget) -> Result<(), Error> {
    let filter = filter_from(std::env::var_os(FILTER_VAR).as_deref())?;

    let want_journald = match target {
        LogTarget::Journald => true,
        LogTarget::Stderr => false,
        LogTarget::Auto => stderr_is_journal(),
    };
    let mut fallback = None;
    let journald = if want_journald {
        match tracing_journald::layer() {
            Ok(layer) => Some(
                layer
                    .with_syslog_identifier(identifier.to_owned())
                    .with_field_prefix(None)
                    .with_priority_mappings(priorities()),
            ),
            Err(e) if target == LogTarget::Journald => return Err(Error::Journald(e)),
            Err(e) => {
                fallback = Some(e);
                None
            }
        }
    } else {
        None
    };
    let stderr = journald.is_none().then(|| {
        tracing_subscriber::fmt::layer()
            .with_writer(std::io::stderr)
            .with_ansi(std::io::stderr().is_terminal())
            .with_target(true)
    });

    tracing_subscriber::registry()
        .with(filter)
        .with(journald)
        .with(stderr)
        .try_init()
        .map_err(|e| Error::LogInit(e.to_string()))?;

    if let Some(e) = fallback {
        tracing::warn!(
            "stderr is connected to the journal but journald cannot be reached ({e}): logging to stderr"
        );
    }
    Ok(())
}

/// The filter for the value of `OC_LOG`: `info` when unset or empty.
fn filter_from(value: Option<&OsStr>) -> Result<Targets, Error> {
    let Some(value) = value else {
        return Ok(default_filter());
    };
    let invalid = |reason: String| Error::InvalidEnv {
        var: FILTER_VAR,
        value: value.to_string_lossy().into_owned(),
        reason,
    };
    let text = value
        .to_str()
        .ok_or_else(|| invalid("not valid UTF-8".to_owned()))?
        .trim();
    if text.is_empty() {
        return Ok(default_filter());
    }
    text.parse::<Targets>().map_err(|e| {
        invalid(format!(
            "{e} (expected a level such as info, or directives such as info,broker=debug)"
        ))
    })
}

fn default_filter() -> Targets {
    Targets::new().with_default(tracing::Level::INFO)
}

/// Whether stderr is connected to the journal: `JOURNAL_STREAM` (`DEV:INODE`, in decimal, set
/// by systemd for services whose output goes to the journal) names the device and inode of
/// fd 2. A `JOURNAL_STREAM` inherited from a parent whose stderr went to the journal, while
/// ours was redirected elsewhere, does not count.
pub fn stderr_is_journal() -> bool {
    let Some(value) = std::env::var_os("JOURNAL_STREAM") else {
        return false;
    };
    let Some(value) = value.to_str() else {
        return false;
    };
    let Ok(stderr) = std::io::stderr().as_fd().try_clone_to_owned() else {
        return false;
    };
    let Ok(meta) = std::fs::File::from(stderr).metadata() else {
        return false;
    };
    journal_stream_matches(value, meta.dev(), meta.ino())
}

/// Whether a `JOURNAL_STREAM` value names the file with this device and inode.
fn journal_stream_matches(value: &str, dev: u64, ino: u64) -> bool {
    let Some((d, i)) = value.trim().split_once(':') else {
        return false;
    };
    match (d.parse::<u64>(), i.parse::<u64>()) {
        (Ok(d), Ok(i)) => d == dev && i == ino,
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn journal_stream_comparison() {
        assert!(journal_stream_matches("64769:1234", 64769, 1234));
        assert!(journal_stream_matches("0:1", 0, 1));
        assert!(!journal_stream_matches("64769:1234", 64769, 1235));
        assert!(!journal_stream_matches("64768:1234", 64769, 1234));
        assert!(!journal_stream_matches("", 0, 0));
        assert!(!journal_stream_matches("64769", 64769, 0));
        assert!(!journal_stream_matches("64769:", 64769, 0));
        assert!(!journal_stream_matches(":1234", 0, 1234));
        assert!(!journal_stream_matches("a:b", 0, 0));
        assert!(!journal_stream_matches("0x10:1", 16, 1));
        assert!(!journal_stream_matches("-1:1", 0, 1));
        assert!(!journal_stream_matches("1:2:3", 1, 2));
    }

    #[test]
    fn log_target_parses() {
        assert_eq!("auto".parse::<LogTarget>().unwrap(), LogTarget::Auto);
        assert_eq!(
            "journald".parse::<LogTarget>().unwrap(),
            LogTarget::Journald
        );
        assert_eq!("stderr".parse::<LogTarget>().unwrap(), LogTarget::Stderr);
        let err = "syslog".parse::<LogTarget>().unwrap_err();
        assert_eq!(
            err.to_string(),
            "invalid log target \"syslog\": expected auto, journald or stderr"
        );
        for t in [LogTarget::Auto, LogTarget::Journald, LogTarget::Stderr] {
            assert_eq!(t.to_string().parse::<LogTarget>().unwrap(), t);
        }
    }

    #[test]
    fn filter_values() {
        use tracing::Level;
        let f = filter_from(None).unwrap();
        assert!(f.would_enable("anything", &Level::INFO));
        assert!(!f.would_enable("anything", &Level::DEBUG));

        let f = filter_from(Some(OsStr::new(" "))).unwrap();
        assert!(f.would_enable("anything", &Level::INFO));

        let f = filter_from(Some(OsStr::new("warn,schedulerd=debug"))).unwrap();
        assert!(!f.would_enable("broker", &Level::INFO));
        assert!(f.would_enable("broker", &Level::WARN));
        assert!(f.would_enable("schedulerd::run", &Level::DEBUG));
        assert!(!f.would_enable("schedulerd::run", &Level::TRACE));

        let err = filter_from(Some(OsStr::new("broker=loud"))).unwrap_err();
        assert!(
            matches!(err, Error::InvalidEnv { var: "OC_LOG", .. }),
            "{err}"
        );
        assert!(err.to_string().contains("OC_LOG=\"broker=loud\""), "{err}");
    }
}
