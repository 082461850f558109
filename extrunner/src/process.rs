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

use crate::configuration::Configuration;
use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;
use protocol::wire::{ConfigureResult, HostInfo, InitializeParams, InitializeResult, KvLayout};
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

// ---------------------------------------------------------------------------
// One process

/// One run of an extension process. Dropping it without [`ExtensionProcess::stop`]
/// SIGKILLs its process group.
pub struct ExtensionProcess {
    name: String,
    pid: i32,
    peer: Peer,
    exit: watch::Receiver<Option<ProcessExit>>,
    stopped: AtomicBool,
}

impl fmt::Debug for ExtensionProcess {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ExtensionProcess")
            .field("name", &self.name)
            .field("pid", &self.pid)
            .field("exit", &*self.exit.borrow())
            .finish()
    }
}

fn resolve_program(dir: &Path, program: &str) -> PathBuf {
    let path = Path::new(program);
    if path.is_absolute() {
        return path.to_path_buf();
    }
    let inside = dir.join(path);
    if program.contains('/') || inside.exists() {
        return inside;
    }
    // A bare name not in the package: looked up on the sanitized PATH.
    path.to_path_buf()
}

impl ExtensionProcess {
    /// Start the process (no handshake yet): the command in the package
    /// directory, its own process group, the sanitized environment, the protocol
    /// on stdin and stdout, stderr to the log. Creates the state directory and
    /// the log's directory.
    pub async fn spawn(
        spec: &ProcessSpec,
        opts: &SupervisorOptions,
    ) -> Result<ExtensionProcess, StartError> {
        let spawn_err = |what: &str, e: std::io::Error| StartError::Spawn(format!("{what}: {e}"));
        let Some(program) = spec.command.first() else {
            return Err(StartError::Spawn("the command is empty".into()));
        };
        tokio::fs::create_dir_all(&spec.state_dir)
            .await
            .map_err(|e| spawn_err(&format!("state dir {}", spec.state_dir.display()), e))?;
        if let Some(parent) = spec.log_path.parent() {
            tokio::fs::create_dir_all(parent)
                .await
                .map_err(|e| spawn_err(&format!("log dir {}", parent.display()), e))?;
        }
        let log = LogFile::open(&spec.log_path, opts.log_cap)
            .await
            .map_err(|e| spawn_err(&format!("log {}", spec.log_path.display()), e))?;

        let program_path = resolve_program(&spec.dir, program);
        let mut cmd = Command::new(&program_path);
        cmd.args(&spec.command[1..])
            .current_dir(&spec.dir)
            .env_clear()
            .envs(sanitized_env(&spec.base_env, &spec.grants))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0)
            .kill_on_drop(false);
        let mut child = cmd
            .spawn()
            .map_err(|e| spawn_err(&program_path.display().to_string(), e))?;
        let pid = child
            .id()
            .and_then(|p| i32::try_from(p).ok())
            .ok_or_else(|| StartError::Spawn("the process has no id".into()))?;
        let (stdin, stdout, stderr) =
            match (child.stdin.take(), child.stdout.take(), child.stderr.take()) {
                (Some(i), Some(o), Some(e)) => (i, o, e),
                _ => {
                    let _ = killpg(Pid::from_raw(pid), Signal::SIGKILL);
                    let _ = child.wait().await;
                    return Err(StartError::Spawn("a stdio pipe is missing".into()));
                }
            };
        // Wider pipes: a large message crosses in fewer wake-ups. Best effort.
        let _ = nix::fcntl::fcntl(
            stdin.as_fd(),
            nix::fcntl::FcntlArg::F_SETPIPE_SZ(PIPE_BYTES),
        );
        let _ = nix::fcntl::fcntl(
            stdout.as_fd(),
            nix::fcntl::FcntlArg::F_SETPIPE_SZ(PIPE_BYTES),
        );

        tokio::spawn(copy_stderr(spec.name.clone(), stderr, log));

        let (exit_tx, exit_rx) = watch::channel(None);
        let name = spec.name.clone();
        tokio::spawn(async move {
            let exit = match child.wait().await {
                Ok(status) => ProcessExit::from(status),
                Err(e) => {
                    tracing::warn!(OC_EXTENSION = %name, pid, error = %e, "cannot wait for the extension process");
                    ProcessExit::Unknown
                }
            };
            tracing::info!(OC_EXTENSION = %name, pid, %exit, "extension process ended");
            exit_tx.send_replace(Some(exit));
        });

        let peer = connect_arc(
            stdout,
            stdin,
            opts.handler.clone(),
            // Reads up to 64 MiB from the start; sends more than 16 MiB only once
            // the extension's initialize answer says it reads more.
            Options::negotiated(format!("extension {}", spec.name)),
        );
        tracing::info!(OC_EXTENSION = %spec.name, pid, program = %program_path.display(), "extension process started");
        Ok(ExtensionProcess {
            name: spec.name.clone(),
            pid,
            peer,
            exit: exit_rx,
            stopped: AtomicBool::new(false),
        })
    }

    /// `initialize`: answers the version chosen, or why the extension is refused
    /// (no common version, a manifest that differs from the file) or failed.
    pub async fn handshake(
        &self,
        spec: &ProcessSpec,
        opts: &SupervisorOptions,
    ) -> Result<u32, StartError> {
        let params = InitializeParams {
            protocol_versions: opts.host_versions.clone(),
            host: HostInfo {
                name: opts.host_name.clone(),
                version: opts.host_version.clone(),
            },
            state_dir: spec.state_dir.display().to_string(),
            resource_dirs: spec.resource_dirs.clone(),
            max_message_bytes: u64::try_from(LARGE_MESSAGE_BYTES).ok(),
            ..InitializeParams::default()
        };
        let mut params = serde_json::to_value(&params)
            .map_err(|e| StartError::Handshake(format!("cannot encode initialize: {e}")))?;
        if let Some(obj) = params.as_object_mut() {
            obj.entry("executor_dirs")
                .or_insert_with(|| Value::Object(Default::default()));
        }
        let call = CallOptions {
            timeout: Some(opts.start_timeout),
            ..CallOptions::default()
        };
        let answer = match self.peer.call_with("initialize", &params, call).await {
            Ok(v) => v,
            Err(CallError::Rpc(e)) if e.is(Code::UnsupportedProtocolVersion) => {
                return Err(StartError::Refused(Refusal::Version {
                    ours: opts.host_versions.clone(),
                    detail: e.message,
                }))
            }
            Err(CallError::Timeout(t)) => return Err(StartError::Timeout(t)),
            Err(e) => return Err(StartError::Handshake(e.to_string())),
        };
        let result: InitializeResult = serde_json::from_value(answer)
            .map_err(|e| StartError::Handshake(format!("the answer does not decode: {e}")))?;
        if !opts.host_versions.contains(&result.protocol_version) {
            return Err(StartError::Refused(Refusal::Version {
                ours: opts.host_versions.clone(),
                detail: format!(
                    "the extension chose version {}, which the host does not speak",
                    result.protocol_version
                ),
            }));
        }
        if let Some(detail) = manifest_difference(&spec.manifest_json, &result.manifest) {
            return Err(StartError::Refused(Refusal::ManifestMismatch { detail }));
        }
        let max_send = agreed_message_bytes(result.max_message_bytes);
        self.peer.set_max_send_bytes(max_send);
        tracing::debug!(OC_EXTENSION = %spec.name, max_send, "message bound agreed");
        Ok(result.protocol_version)
    }

    /// `configure` with the package's current configuration and `kv`; the answer,
    /// checked against the manifest, becomes its registration. An error answer, a
    /// crash, a timeout or an answer that breaks the registration rules is
    /// [`StartError::Configure`].
    pub async fn configure(
        &self,
        opts: &SupervisorOptions,
        kv: KvLayout,
    ) -> Result<ConfigureResult, StartError> {
        send_configure(&self.peer, opts, kv, opts.start_timeout).await
    }

    /// The whole start after the spawn: `initialize`, `configure` with `kv`,
    /// then (only once configure succeeded) the declared layout recorded.
    /// Answers the protocol version.
    pub async fn start_up(
        &self,
        spec: &ProcessSpec,
        opts: &SupervisorOptions,
        kv: KvLayout,
    ) -> Result<u32, StartError> {
        let version = self.handshake(spec, opts).await?;
        self.configure(opts, kv).await?;
        if let Some(layouts) = &opts.kv_layouts {
            if kv.stored != kv.declared {
                layouts
                    .set(&spec.name, kv.declared)
                    .await
                    .map_err(StartError::KvLayout)?;
                tracing::info!(OC_EXTENSION = %spec.name, from = kv.stored, to = kv.declared, "KV layout recorded");
            }
        }
        Ok(version)
    }

    /// The connection to the process.
    pub fn peer(&self) -> &Peer {
        &self.peer
    }

    /// The process id, also its process group id.
    pub fn pid(&self) -> i32 {
        self.pid
    }

    /// How the process ended, once it has (from its wait status).
    pub fn exit_status(&self) -> Option<ProcessExit> {
        *self.exit.borrow()
    }

    /// Resolves once the process has ended, with how.
    pub async fn exited(&self) -> ProcessExit {
        let mut rx = self.exit.clone();
        let result = match rx.wait_for(Option::is_some).await {
            Ok(exit) => exit.unwrap_or(ProcessExit::Unknown),
            Err(_) => ProcessExit::Unknown,
        };
        result
    }

    async fn wait_exit(&self, limit: Duration) -> Option<ProcessExit> {
        tokio::time::timeout(limit, self.exited()).await.ok()
    }

    fn signal_group(&self, sig: Signal) {
        match killpg(Pid::from_raw(self.pid), sig) {
            Ok(()) => {
                tracing::info!(OC_EXTENSION = %self.name, pgid = self.pid, signal = %sig, "signalled the extension's process group")
            }
            Err(nix::errno::Errno::ESRCH) => {}
            Err(e) => {
                tracing::warn!(OC_EXTENSION = %self.name, pgid = self.pid, signal = %sig, error = %e, "cannot signal the extension's process group")
            }
        }
    }

    /// Stop: `shutdown` (bounded), close stdin, wait a grace period for the
    /// process to exit, then SIGTERM to the whole group, wait again, then SIGKILL
    /// to the whole group. The group is signalled even when the leader has
    /// already exited, so that no process of it is left when this returns.
    /// Answers how the leader ended.
    pub async fn stop(&self, opts: &SupervisorOptions) -> ProcessExit {
        self.stop_with(opts, true).await
    }

    /// [`ExtensionProcess::stop`], without asking for `shutdown` when
    /// `ask_shutdown` is false (a process that never answered `initialize`).
    async fn stop_with(&self, opts: &SupervisorOptions, ask_shutdown: bool) -> ProcessExit {
        if ask_shutdown && self.exit_status().is_none() && !self.peer.is_closed() {
            let call = CallOptions {
                timeout: Some(opts.shutdown_timeout),
                ..CallOptions::default()
            };
            let params = serde_json::json!({});
            let shutdown = self.peer.call_with("shutdown", &params, call);
            tokio::select! {
                r = shutdown => if let Err(e) = r {
                    tracing::debug!(OC_EXTENSION = %self.name, error = %e, "shutdown not answered");
                },
                _ = self.exited() => {}
            }
        }
        self.peer.close("the host is stopping the extension");

        let mut sent_term = false;
        let exit = match self.wait_exit(opts.grace).await {
            Some(exit) => exit,
            None => {
                tracing::info!(OC_EXTENSION = %self.name, pid = self.pid, grace = ?opts.grace, "the extension did not exit after stdin closed");
                self.signal_group(Signal::SIGTERM);
                sent_term = true;
                match self.wait_exit(opts.grace).await {
                    Some(exit) => exit,
                    None => {
                        self.signal_group(Signal::SIGKILL);
                        self.exited().await
                    }
                }
            }
        };
        self.end_group(opts.grace, sent_term).await;
        self.stopped.store(true, Ordering::SeqCst);
        exit
    }

    /// End whatever is left of the group once the leader has exited.
    async fn end_group(&self, grace: Duration, sent_term: bool) {
        let pgid = self.pid;
        let left = group_members(pgid);
        if left.is_empty() {
            return;
        }
        tracing::info!(OC_EXTENSION = %self.name, pgid, pids = ?left, "processes of the extension's group outlived it");
        if !sent_term {
            self.signal_group(Signal::SIGTERM);
            if wait_group_gone(pgid, grace).await {
                tracing::info!(OC_EXTENSION = %self.name, pgid, pids = ?left, "the group's remaining processes ended after SIGTERM");
                return;
            }
        }
        let left = group_members(pgid);
        self.signal_group(Signal::SIGKILL);
        if wait_group_gone(pgid, grace.max(Duration::from_secs(1))).await {
            tracing::info!(OC_EXTENSION = %self.name, pgid, pids = ?left, "the group's remaining processes were killed by SIGKILL");
        } else {
            tracing::error!(OC_EXTENSION = %self.name, pgid, pids = ?group_members(pgid), "processes of the extension's group survive SIGKILL");
        }
    }
}

impl Drop for ExtensionProcess {
    fn drop(&mut self) {
        if !self.stopped.load(Ordering::SeqCst) {
            self.peer.close("the extension process was dropped");
            let _ = killpg(Pid::from_raw(self.pid), Signal::SIGKILL);
        }
    }
}

/// The live (not zombie) processes of the group `pgid`, from `/proc`; without a
/// readable `/proc`, the group itself when a signal can reach it.
pub fn group_members(pgid: i32) -> Vec<i32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return match killpg(Pid::from_raw(pgid), None) {
            Ok(()) => vec![pgid],
            Err(_) => Vec::new(),
        };
    };
    let mut pids = Vec::new();
    for entry in entries.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<i32>().ok())
        else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        // pid (comm) state ppid pgrp ...; comm may hold spaces and parentheses.
        let Some(rest) = stat.rfind(')').map(|i| &stat[i + 1..]) else {
            continue;
        };
        let mut fields = rest.split_whitespace();
        let state = fields.next().unwrap_or("");
        let pgrp = fields.nth(1).and_then(|s| s.parse::<i32>().ok());
        if pgrp == Some(pgid) && state != "Z" && state != "X" {
            pids.push(pid);
        }
    }
    pids
}

async fn wait_group_gone(pgid: i32, limit: Duration) -> bool {
    let deadline = Instant::now() + limit;
    loop {
        if group_members(pgid).is_empty() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(GROUP_POLL).await;
    }
}

/// Why two manifests differ, or `None` when they are the same document (compared
/// as JSON values, so key order and spacing do not count, nor fields spelled out
/// at their default).
pub fn manifest_difference(file: &Value, returned: &Value) -> Option<String> {
    if file == returned {
        return None;
    }
    let parse = |v: &Value| serde_json::from_value::<protocol::manifest::Manifest>(v.clone());
    if let (Ok(a), Ok(b)) = (parse(file), parse(returned)) {
        if a == b {
            return None;
        }
    }
    let (Some(a), Some(b)) = (file.as_object(), returned.as_object()) else {
        return Some("the returned manifest is not an object".into());
    };
    let mut keys: Vec<&String> = a.keys().chain(b.keys()).collect();
    keys.sort();
    keys.dedup();
    let differing: Vec<&str> = keys
        .into_iter()
        .filter(|k| a.get(*k) != b.get(*k))
        .map(String::as_str)
        .collect();
    Some(format!("fields differ: {}", differing.join(", ")))
}

// ---------------------------------------------------------------------------
// stderr: the log file and tracing

/// The line written first into a log truncated at `cap` bytes.
pub fn truncation_marker(cap: u64) -> String {
    const KIB: u64 = 1024;
    const MIB: u64 = 1024 * 1024;
    let size = if cap >= MIB && cap / MIB * MIB == cap {
        format!("{} MiB", cap / MIB)
    } else if cap >= KIB && cap / KIB * KIB == cap {
        format!("{} KiB", cap / KIB)
    } else {
        format!("{cap} bytes")
    };
    format!("--- log truncated at {size} ---")
}

struct LogFile {
    file: tokio::fs::File,
    size: u64,
    cap: u64,
    failed: bool,
}

impl LogFile {
    async fn open(path: &Path, cap: u64) -> std::io::Result<LogFile> {
        let file = tokio::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .await?;
        let size = file.metadata().await?.len();
        Ok(LogFile {
            file,
            size,
            cap,
            failed: false,
        })
    }

    async fn write_line(&mut self, line: &[u8]) -> std::io::Result<()> {
        let need = line.len() as u64 + 1;
        if self.size + need > self.cap {
            self.file.set_len(0).await?;
            self.size = 0;
            let marker = format!("{}\n", truncation_marker(self.cap));
            self.file.write_all(marker.as_bytes()).await?;
            self.size = marker.len() as u64;
        }
        self.file.write_all(line).await?;
        self.file.write_all(b"\n").await?;
        self.file.flush().await?;
        self.size += need;
        Ok(())
    }

    async fn emit(&mut self, name: &str, line: &[u8]) {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        tracing::info!(OC_EXTENSION = %name, "{}", String::from_utf8_lossy(line));
        if self.failed {
            return;
        }
        if let Err(e) = self.write_line(line).await {
            self.failed = true;
            tracing::warn!(OC_EXTENSION = %name, error = %e, "cannot write the extension's log; its stderr goes to tracing only");
        }
    }
}

async fn copy_stderr(name: String, stderr: ChildStderr, mut log: LogFile) {
    let mut reader = BufReader::with_capacity(16 * 1024, stderr);
    let mut line: Vec<u8> = Vec::with_capacity(256);
    loop {
        let buf = match reader.fill_buf().await {
            Ok(buf) => buf,
            Err(e) => {
                tracing::debug!(OC_EXTENSION = %name, error = %e, "reading stderr failed");
                break;
            }
        };
        if buf.is_empty() {
            break;
        }
        let room = MAX_LOG_LINE - line.len();
        let window = &buf[..buf.len().min(room)];
        match window.iter().position(|&b| b == b'\n') {
            Some(i) => {
                line.extend_from_slice(&window[..i]);
                reader.consume(i + 1);
                log.emit(&name, &line).await;
                line.clear();
            }
            None => {
                let n = window.len();
                line.extend_from_slice(window);
                reader.consume(n);
                if line.len() >= MAX_LOG_LINE {
                    log.emit(&name, &line).await;
                    line.clear();
                }
            }
        }
    }
    if !line.is_empty() {
        log.emit(&name, &line).await;
    }
}

// ---------------------------------------------------------------------------
// Supervision

/// Where a supervised extension is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum State {
    /// Starting: spawned, `initialize` not yet answered.
    Starting,
    /// Serving: [`Supervisor::peer`] is its connection.
    Running,
    /// Crashed; restarting at `until`.
    Backoff {
        /// When the next start begins.
        until: Instant,
    },
    /// Refused for good (never restarted).
    Refused {
        /// Why.
        reason: Refusal,
    },
    /// Stopped.
    Stopped,
}

struct Shared {
    name: String,
    state: watch::Sender<State>,
    peer: Mutex<Option<Peer>>,
    pid: Mutex<Option<i32>>,
    restarts: AtomicU64,
    last_exit: Mutex<Option<ProcessExit>>,
    protocol_version: Mutex<Option<u32>>,
}

impl Shared {
    fn set_state(&self, state: State) {
        tracing::debug!(OC_EXTENSION = %self.name, ?state, "extension state");
        self.state.send_replace(state);
    }
}

/// One extension, supervised by a task of its own.
pub struct Supervisor {
    shared: Arc<Shared>,
    stop: watch::Sender<bool>,
    task: tokio::sync::Mutex<Option<JoinHandle<()>>>,
}

impl fmt::Debug for Supervisor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Supervisor")
            .field("name", &self.shared.name)
            .field("state", &self.state())
            .field("restarts", &self.restarts())
            .finish()
    }
}

impl Supervisor {
    /// Start supervising `spec` (must be called within a tokio runtime).
    pub fn start(spec: ProcessSpec, opts: SupervisorOptions) -> Supervisor {
        let (state, _) = watch::channel(State::Starting);
        let shared = Arc::new(Shared {
            name: spec.name.clone(),
            state,
            peer: Mutex::new(None),
            pid: Mutex::new(None),
            restarts: AtomicU64::new(0),
            last_exit: Mutex::new(None),
            protocol_version: Mutex::new(None),
        });
        let (stop, stop_rx) = watch::channel(false);
        let task = tokio::spawn(supervise(spec, opts, shared.clone(), stop_rx));
        Supervisor {
            shared,
            stop,
            task: tokio::sync::Mutex::new(Some(task)),
        }
    }

    /// The extension's name.
    pub fn name(&self) -> &str {
        &self.shared.name
    }

    /// The state now.
    pub fn state(&self) -> State {
        self.shared.state.borrow().clone()
    }

    /// Follow the state as it changes.
    pub fn subscribe(&self) -> watch::Receiver<State> {
        self.shared.state.subscribe()
    }

    /// How many times the process was restarted after a crash.
    pub fn restarts(&self) -> u64 {
        self.shared.restarts.load(Ordering::SeqCst)
    }

    /// How the last process ended (from its wait status).
    pub fn last_exit(&self) -> Option<ProcessExit> {
        *lock(&self.shared.last_exit)
    }

    /// The connection to the running process, if one is running.
    pub fn peer(&self) -> Option<Peer> {
        lock(&self.shared.peer)
            .as_ref()
            .filter(|p| !p.is_closed())
            .cloned()
    }

    /// The protocol version the last successful `initialize` chose.
    pub fn protocol_version(&self) -> Option<u32> {
        *lock(&self.shared.protocol_version)
    }

    /// The current (or last) process id, also its process group id.
    pub fn pid(&self) -> Option<i32> {
        *lock(&self.shared.pid)
    }

    /// Wait until the extension runs, and answer its connection; or the state
    /// that means it never will (refused, stopped).
    pub async fn wait_running(&self) -> Result<Peer, State> {
        let mut rx = self.subscribe();
        loop {
            let state = rx.borrow_and_update().clone();
            match state {
                State::Running => {
                    if let Some(peer) = self.peer().filter(|p| !p.is_closed()) {
                        return Ok(peer);
                    }
                }
                State::Refused { .. } | State::Stopped => return Err(state),
                State::Starting | State::Backoff { .. } => {}
            }
            if rx.changed().await.is_err() {
                return Err(self.state());
            }
        }
    }

    /// Stop the extension (see [`ExtensionProcess::stop`]) and the supervision,
    /// and wait for both. Idempotent.
    pub async fn stop(&self) {
        self.stop.send_replace(true);
        let task = self.task.lock().await.take();
        if let Some(task) = task {
            if let Err(e) = task.await {
                tracing::error!(OC_EXTENSION = %self.shared.name, error = %e, "the supervision task failed");
            }
        }
    }
}

impl Drop for Supervisor {
    fn drop(&mut self) {
        // The task sees the request and stops the process on its own.
        self.stop.send_replace(true);
    }
}

async fn stop_requested(rx: &mut watch::Receiver<bool>) {
    // A dropped sender is a stop too.
    let _ = rx.wait_for(|stop| *stop).await;
}

/// The layout `configure` carries, read before the process starts: a manifest
/// older than the recorded layout is refused (`kv_downgrade`); without a layout
/// store the layout is current.
async fn kv_layout(spec: &ProcessSpec, opts: &SupervisorOptions) -> Result<KvLayout, StartError> {
    let declared = declared_kv_version(&spec.manifest_json);
    let Some(layouts) = &opts.kv_layouts else {
        return Ok(KvLayout {
            stored: declared,
            declared,
        });
    };
    let stored = layouts
        .get(&spec.name)
        .await
        .map_err(StartError::KvLayout)?;
    if declared < stored {
        return Err(StartError::Refused(Refusal::KvDowngrade {
            stored,
            declared,
        }));
    }
    Ok(KvLayout { stored, declared })
}

/// Send `configure` on `peer` with the package's current configuration and register
/// the answer.
pub async fn send_configure(
    peer: &Peer,
    opts: &SupervisorOptions,
    kv: KvLayout,
    timeout: Duration,
) -> Result<ConfigureResult, StartError> {
    let mut params = opts.configuration.params();
    params.kv = kv;
    let generation = params.generation.clone();
    let call = CallOptions {
        timeout: Some(timeout),
        ..CallOptions::default()
    };
    let answer = peer
        .call_with("configure", &params, call)
        .await
        .map_err(|e| StartError::Configure(e.to_string()))?;
    let result: ConfigureResult = serde_json::from_value(answer)
        .map_err(|e| StartError::Configure(format!("the answer does not decode: {e}")))?;
    opts.configuration
        .register(&generation, &result)
        .map_err(|e| StartError::Configure(format!("the answer breaks a rule: {e}")))?;
    Ok(result)
}

async fn supervise(
    spec: ProcessSpec,
    opts: SupervisorOptions,
    shared: Arc<Shared>,
    mut stop_rx: watch::Receiver<bool>,
) {
    let name = spec.name.clone();
    let mut backoff = opts.backoff_initial;
    loop {
        if *stop_rx.borrow() {
            break;
        }
        shared.set_state(State::Starting);
        let mut uptime = Duration::ZERO;
        let kv = tokio::select! {
            r = kv_layout(&spec, &opts) => r,
            _ = stop_requested(&mut stop_rx) => break,
        };
        let spawned = match kv {
            Err(StartError::Refused(reason)) => {
                tracing::error!(OC_EXTENSION = %name, %reason, "extension refused before its start; it will not be restarted");
                shared.set_state(State::Refused { reason });
                return;
            }
            Err(e) => Err(e),
            Ok(kv) => ExtensionProcess::spawn(&spec, &opts).await.map(|p| (p, kv)),
        };
        match spawned {
            Err(e) => {
                tracing::error!(OC_EXTENSION = %name, error = %e, "extension failed to start");
            }
            Ok((process, kv)) => {
                *lock(&shared.pid) = Some(process.pid());
                let handshake = tokio::select! {
                    r = process.start_up(&spec, &opts, kv) => Some(r),
                    _ = stop_requested(&mut stop_rx) => None,
                };
                match handshake {
                    None => {
                        let exit = process.stop(&opts).await;
                        *lock(&shared.last_exit) = Some(exit);
                        break;
                    }
                    Some(Err(StartError::Refused(reason))) => {
                        tracing::error!(OC_EXTENSION = %name, %reason, "extension refused; it will not be restarted");
                        let exit = process.stop(&opts).await;
                        *lock(&shared.last_exit) = Some(exit);
                        shared.set_state(State::Refused { reason });
                        return;
                    }
                    Some(Err(e)) => {
                        tracing::warn!(OC_EXTENSION = %name, error = %e, "extension failed its start");
                        // Past initialize it may answer shutdown; before it,
                        // there is no point asking.
                        let initialized =
                            matches!(e, StartError::Configure(_) | StartError::KvLayout(_));
                        let exit = process.stop_with(&opts, initialized).await;
                        *lock(&shared.last_exit) = Some(exit);
                    }
                    Some(Ok(version)) => {
                        let started = Instant::now();
                        *lock(&shared.peer) = Some(process.peer().clone());
                        *lock(&shared.protocol_version) = Some(version);
                        tracing::info!(OC_EXTENSION = %name, pid = process.pid(), protocol_version = version, "extension running");
                        shared.set_state(State::Running);
                        let stopping = tokio::select! {
                            _ = process.exited() => false,
                            _ = process.peer().closed() => false,
                            _ = stop_requested(&mut stop_rx) => true,
                        };
                        *lock(&shared.peer) = None;
                        if !stopping {
                            // The process died, or its connection did while it
                            // may still run: either way it is stopped (the
                            // connection is gone) and its end read from its
                            // wait status.
                            if process.exit_status().is_none() {
                                tracing::warn!(OC_EXTENSION = %name, pid = process.pid(), "the extension's connection closed; stopping it");
                            }
                        }
                        let exit = process.stop(&opts).await;
                        *lock(&shared.last_exit) = Some(exit);
                        uptime = started.elapsed();
                        if stopping {
                            break;
                        }
                        tracing::warn!(OC_EXTENSION = %name, %exit, ?uptime, "extension crashed");
                    }
                }
            }
        }
        if uptime >= opts.backoff_reset_after {
            backoff = opts.backoff_initial;
        }
        shared.restarts.fetch_add(1, Ordering::SeqCst);
        let until = Instant::now() + backoff;
        tracing::info!(OC_EXTENSION = %name, ?backoff, "restarting the extension after a backoff");
        shared.set_state(State::Backoff { until });
        tokio::select! {
            _ = tokio::time::sleep(backoff) => {}
            _ = stop_requested(&mut stop_rx) => break,
        }
        backoff = backoff.saturating_mul(2).min(opts.backoff_max);
    }
    shared.set_state(State::Stopped);
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
