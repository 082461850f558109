//! A supervised extension process.
//!
//! [`ExtensionProcess`] is one run of an extension: its command started in the
//! package directory, in its own process group, with the sanitized environment
//! ([`sanitized_env`]), the protocol on its stdin and stdout and its stderr copied
//! to a bounded log file and to tracing (`OC_EXTENSION = <name>`). Its end is
//! read from the child's wait status, never from EOF on its pipes: a process
//! that closes stdout but keeps running is not dead.
//!
//! [`Supervisor`] runs one extension for as long as it is wanted: the KV layout
//! check before the start (refusing, for good, a manifest whose `kv_version` is
//! older than the one recorded: `kv_downgrade`), start, `initialize` (refusing,
//! for good, an extension with no common protocol version or a manifest that
//! differs from its file), `configure` with `kv: {stored, declared}` (and,
//! only once it succeeded, the declared layout recorded through [`KvLayouts`]),
//! restart after a crash with
//! exponential backoff, and stop: `shutdown`, close stdin, then SIGTERM and
//! SIGKILL to the whole process group, so that no process of the group outlives
//! it, grandchildren included.
//!
//! Modules: [`child`] (one process: its start, handshake, stop and log) and
//! [`supervisor`] (its supervision); the spec, the options, the environment and the
//! errors they share are here.

mod child;
mod supervisor;

pub use child::*;
pub use supervisor::*;

use crate::configuration::Configuration;
use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;
use protocol::wire::{
    Call, ConfigureParams, ConfigureResult, HostInfo, InitializeParams, InitializeResult, KvLayout,
    ShutdownParams,
};
use protocol::{
    agreed_message_bytes, connect_arc, CallError, CallOptions, Code, Handler, NoHandler, Options,
    Peer, LARGE_MESSAGE_BYTES,
};
use serde_json::Value;
use std::fmt;
use std::future::Future;
use std::os::fd::AsFd;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::{ChildStderr, Command};
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// The variables of the daemon's environment every extension receives when set
/// (the spec's B05 baseline), besides every `LC_*` variable.
pub const BASELINE_ENV: &[&str] = &[
    "PATH", "HOME", "USER", "LOGNAME", "SHELL", "LANG", "TZ", "TMPDIR", "TERM",
];

/// Variables no extension receives, even when the operator grants them: the
/// suite's own settings and systemd's service plumbing.
const NEVER_PASSED_PREFIXES: &[&str] = &["OPEN_CONDUIT_", "LISTEN_", "WATCHDOG_"];
const NEVER_PASSED: &[&str] = &["NOTIFY_SOCKET", "JOURNAL_STREAM", "INVOCATION_ID"];

/// The default bound of an extension's log file (1 MiB).
pub const LOG_CAP: u64 = 1024 * 1024;
/// At most this many bytes of stderr make one log line; a longer line is split.
pub const MAX_LOG_LINE: usize = 8 * 1024;
/// The capacity asked for the protocol's pipes (the kernel default is 64 KiB).
pub const PIPE_BYTES: i32 = 1024 * 1024;

/// How often a stop looks at what is left of a process group.
/// How long a stop waits for the last of the process's stderr to reach the log.
const LOG_DRAIN: Duration = Duration::from_secs(2);
const GROUP_POLL: Duration = Duration::from_millis(10);

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

// ---------------------------------------------------------------------------
// The spec and the options

/// What to run: one extension package.
#[derive(Debug, Clone)]
pub struct ProcessSpec {
    /// The extension's name (its manifest's name).
    pub name: String,
    /// The package directory: the command runs in it, and a relative program
    /// resolves in it.
    pub dir: PathBuf,
    /// The argv that starts the package (the manifest's `command`).
    pub command: Vec<String>,
    /// The manifest file's content; the handshake must return the same manifest.
    pub manifest_json: Value,
    /// The names of the daemon's variables the operator grants the package.
    pub grants: Vec<String>,
    /// The extension's private state directory (`<state>/extensions/<name>`).
    pub state_dir: PathBuf,
    /// The log its stderr goes to (`<state>/logs/extensions/<name>.log`).
    pub log_path: PathBuf,
    /// The environment the sanitized one is taken from: the daemon's own
    /// ([`daemon_env`]) unless a caller passes another.
    pub base_env: Vec<(String, String)>,
    /// Each declared resource type's state directory, `<state>/resources/<type>`
    /// (initialize's `resource_dirs`): the host's, not the package's, so leases and
    /// workspaces outlive a move of the package.
    pub resource_dirs: std::collections::BTreeMap<String, String>,
}

impl ProcessSpec {
    /// A spec laid out under the state directory `state`: the private state in
    /// `<state>/extensions/<name>`, the log in `<state>/logs/extensions/<name>.log`,
    /// the daemon's environment as the base, nothing granted.
    pub fn new(
        name: impl Into<String>,
        dir: impl Into<PathBuf>,
        command: Vec<String>,
        manifest_json: Value,
        state: &Path,
    ) -> ProcessSpec {
        let name = name.into();
        let resource_dirs = manifest_json
            .pointer("/provides/resources")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|r| r.get("type").and_then(Value::as_str))
            .filter(|t| protocol::manifest::is_name(t))
            .map(|t| {
                let dir = state.join("resources").join(t);
                (t.to_owned(), dir.display().to_string())
            })
            .collect();
        ProcessSpec {
            resource_dirs,
            state_dir: state.join("extensions").join(&name),
            log_path: state
                .join("logs")
                .join("extensions")
                .join(format!("{name}.log")),
            dir: dir.into(),
            command,
            manifest_json,
            grants: Vec::new(),
            base_env: daemon_env(),
            name,
        }
    }
}

/// The daemon's environment (variables whose name or value is not UTF-8 are
/// left out).
pub fn daemon_env() -> Vec<(String, String)> {
    std::env::vars_os()
        .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)))
        .collect()
}

fn never_passed(name: &str) -> bool {
    NEVER_PASSED.contains(&name) || NEVER_PASSED_PREFIXES.iter().any(|p| name.starts_with(p))
}

fn in_baseline(name: &str) -> bool {
    BASELINE_ENV.contains(&name) || name.starts_with("LC_")
}

/// The environment an extension receives: from `base`, the baseline variables
/// ([`BASELINE_ENV`] and every `LC_*`) and the granted names, those set; never
/// the suite's settings (`OPEN_CONDUIT_*`) or systemd's plumbing (`NOTIFY_SOCKET`,
/// `LISTEN_*`, `WATCHDOG_*`), granted or not.
pub fn sanitized_env(base: &[(String, String)], grants: &[String]) -> Vec<(String, String)> {
    base.iter()
        .filter(|(k, _)| !never_passed(k) && (in_baseline(k) || grants.iter().any(|g| g == k)))
        .cloned()
        .collect()
}

/// A boxed future borrowing its receiver.
pub type LayoutFuture<'a, T> = Pin<Box<dyn Future<Output = Result<T, String>> + Send + 'a>>;

/// Where the host keeps each extension's KV layout version (storaged's
/// `core.extensions` namespace, through `store.kv_layout_get/set`).
pub trait KvLayouts: Send + Sync {
    /// The version recorded for `name` (0 when none is).
    fn get<'a>(&'a self, name: &'a str) -> LayoutFuture<'a, u32>;
    /// Record `version` for `name` (storaged refuses a lower one).
    fn set<'a>(&'a self, name: &'a str, version: u32) -> LayoutFuture<'a, ()>;
}

/// The manifest's `kv_version` (0 when absent; a value past `u32` saturates).
pub fn declared_kv_version(manifest_json: &Value) -> u32 {
    manifest_json
        .get("kv_version")
        .and_then(Value::as_u64)
        .map_or(0, |v| u32::try_from(v).unwrap_or(u32::MAX))
}

/// How the supervisor runs an extension.
#[derive(Clone)]
pub struct SupervisorOptions {
    /// The protocol versions offered in `initialize`.
    pub host_versions: Vec<u32>,
    /// The host's name in `initialize`.
    pub host_name: String,
    /// The host's version in `initialize`.
    pub host_version: String,
    /// How long `initialize` may take (a start timeout is a crash, not a refusal).
    pub start_timeout: Duration,
    /// How long `shutdown` may take at stop.
    pub shutdown_timeout: Duration,
    /// How long a stop waits after closing stdin, and again after SIGTERM.
    pub grace: Duration,
    /// The first wait before a restart.
    pub backoff_initial: Duration,
    /// The longest wait before a restart.
    pub backoff_max: Duration,
    /// A run at least this long resets the backoff.
    pub backoff_reset_after: Duration,
    /// The bound of the log file.
    pub log_cap: u64,
    /// Serves the extension's calls to the host.
    pub handler: Arc<dyn Handler>,
    /// The recorded KV layout versions. `None`: the layout is taken as current
    /// (`stored = declared`), nothing migrates and nothing is recorded.
    pub kv_layouts: Option<Arc<dyn KvLayouts>>,
    /// What `configure` sends, and where its answer is registered. One per package
    /// (the runner gives each its own).
    pub configuration: Arc<Configuration>,
    /// How long a reconfiguration's `configure` may take.
    pub configure_timeout: Duration,
}

impl Default for SupervisorOptions {
    fn default() -> Self {
        SupervisorOptions {
            host_versions: protocol::version::PROTOCOL_VERSIONS.to_vec(),
            host_name: "open-conduit".into(),
            host_version: env!("CARGO_PKG_VERSION").into(),
            start_timeout: Duration::from_secs(15),
            shutdown_timeout: Duration::from_secs(2),
            grace: Duration::from_secs(5),
            backoff_initial: Duration::from_millis(100),
            backoff_max: Duration::from_secs(30),
            backoff_reset_after: Duration::from_secs(60),
            log_cap: LOG_CAP,
            handler: Arc::new(NoHandler),
            kv_layouts: None,
            configuration: Arc::new(Configuration::default()),
            configure_timeout: Duration::from_secs(30),
        }
    }
}

impl fmt::Debug for SupervisorOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SupervisorOptions")
            .field("host_versions", &self.host_versions)
            .field("host_name", &self.host_name)
            .field("host_version", &self.host_version)
            .field("start_timeout", &self.start_timeout)
            .field("shutdown_timeout", &self.shutdown_timeout)
            .field("grace", &self.grace)
            .field("backoff_initial", &self.backoff_initial)
            .field("backoff_max", &self.backoff_max)
            .field("backoff_reset_after", &self.backoff_reset_after)
            .field("log_cap", &self.log_cap)
            .field("kv_layouts", &self.kv_layouts.is_some())
            .finish_non_exhaustive()
    }
}

// ---------------------------------------------------------------------------
// Errors and exits

/// A deterministic refusal: the same package would be refused again, so it is
/// never restarted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// No protocol version both sides speak.
    #[error("no common protocol version (the host speaks {ours:?}): {detail}")]
    Version {
        /// The versions the host offered.
        ours: Vec<u32>,
        /// What the extension answered.
        detail: String,
    },
    /// The manifest returned by `initialize` differs from the package's file.
    #[error("the manifest the extension returned differs from its file: {detail}")]
    ManifestMismatch {
        /// What differs.
        detail: String,
    },
    /// The manifest's `kv_version` is older than the layout the host recorded
    /// (an older release after a newer one migrated the KV).
    #[error("kv_downgrade: the manifest declares KV layout {declared}, older than the recorded {stored}")]
    KvDowngrade {
        /// The version recorded from the last successful configure.
        stored: u32,
        /// The manifest's `kv_version`.
        declared: u32,
    },
}

/// Why a start failed.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// A deterministic refusal: never restarted.
    #[error("refused: {0}")]
    Refused(Refusal),
    /// The process could not be started (a crash: restarted).
    #[error("cannot start the process: {0}")]
    Spawn(String),
    /// No answer to `initialize` within the start timeout (a crash).
    #[error("no answer to initialize within {0:?}")]
    Timeout(Duration),
    /// `initialize` failed otherwise: the process died, or answered an error or
    /// nonsense (a crash).
    #[error("initialize failed: {0}")]
    Handshake(String),
    /// `configure` failed: an error answer (a failed migration, say), a crash
    /// or a timeout (a crash: restarted, and the layout is not recorded).
    #[error("configure failed: {0}")]
    Configure(String),
    /// The KV layout could not be read or recorded (a crash: restarted).
    #[error("KV layout: {0}")]
    KvLayout(String),
}

impl StartError {
    /// True for a deterministic refusal.
    pub fn is_refusal(&self) -> bool {
        matches!(self, StartError::Refused(_))
    }
}

/// How a process ended, from its wait status.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProcessExit {
    /// It exited with this code.
    Code(i32),
    /// A signal ended it.
    Signal(i32),
    /// Its status could not be read.
    Unknown,
}

impl From<std::process::ExitStatus> for ProcessExit {
    fn from(status: std::process::ExitStatus) -> Self {
        match (status.code(), status.signal()) {
            (Some(code), _) => ProcessExit::Code(code),
            (None, Some(sig)) => ProcessExit::Signal(sig),
            (None, None) => ProcessExit::Unknown,
        }
    }
}

impl fmt::Display for ProcessExit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ProcessExit::Code(c) => write!(f, "exited with code {c}"),
            ProcessExit::Signal(s) => match Signal::try_from(*s) {
                Ok(sig) => write!(f, "killed by {sig}"),
                Err(_) => write!(f, "killed by signal {s}"),
            },
            ProcessExit::Unknown => write!(f, "ended with an unknown status"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn sanitized_env_keeps_the_baseline_and_grants_only() {
        let base = env(&[
            ("PATH", "/bin"),
            ("LC_TIME", "C"),
            ("AWS_SECRET_ACCESS_KEY", "x"),
            ("OPEN_CONDUIT_STATE", "/s"),
            ("NOTIFY_SOCKET", "/run/n"),
            ("LISTEN_FDS", "1"),
            ("HTTPS_PROXY", "http://p"),
        ]);
        let grants = vec![
            "HTTPS_PROXY".to_string(),
            "NOTIFY_SOCKET".to_string(),
            "OPEN_CONDUIT_STATE".to_string(),
        ];
        let got = sanitized_env(&base, &grants);
        assert_eq!(
            got,
            env(&[
                ("PATH", "/bin"),
                ("LC_TIME", "C"),
                ("HTTPS_PROXY", "http://p")
            ])
        );
    }

    #[test]
    fn manifests_compare_as_documents() {
        let a: Value =
            serde_json::from_str(r#"{"protocol":[1],"name":"x","version":"1","command":["x"]}"#)
                .expect("json");
        let b: Value = serde_json::from_str(
            r#"{ "command": ["x"], "version": "1", "name": "x", "protocol": [1], "kv_version": 0 }"#,
        )
        .expect("json");
        assert_eq!(manifest_difference(&a, &b), None);
        let c: Value =
            serde_json::from_str(r#"{"protocol":[1],"name":"x","version":"2","command":["x"]}"#)
                .expect("json");
        let d = manifest_difference(&a, &c).expect("differs");
        assert!(d.contains("version"), "{d}");
    }

    #[test]
    fn marker_names_the_cap() {
        assert_eq!(truncation_marker(LOG_CAP), "--- log truncated at 1 MiB ---");
        assert_eq!(truncation_marker(4096), "--- log truncated at 4 KiB ---");
    }
}
