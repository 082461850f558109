//! `open-conduit up`: the whole suite in the foreground, the way systemd runs it,
//! without systemd.
//!
//! It makes the state directory, private to the user (0700, and a umask of 0077 for
//! itself and everything it starts, so the database, the logs and the artifacts are
//! 0600), binds the bus socket (`<state>/run/bus.sock`), the
//! webhook socket (`--listen`) and the web view's socket (`--web-listen`) itself and
//! passes them to the broker, ingressd and webd by socket activation (`LISTEN_FDS`,
//! `LISTEN_PID`, `LISTEN_FDNAMES`), so a daemon that restarts refuses no connection.
//! It starts the daemons in order (broker, storaged, extrunner, schedulerd, ingressd,
//! webd), each with a `NOTIFY_SOCKET` of its own, and
//! starts the next only once the previous one said `READY=1`. It prints each daemon's
//! log lines prefixed with its name, restarts a daemon that dies (with a growing
//! backoff, and says so), and on Ctrl-C or SIGTERM stops them in reverse order and
//! leaves no process behind.
//!
//! The state directory is a host: `<state>/host-id` keeps a random ID (made on the
//! first `up`) that schedulerd is given, so that several `up` sharing one
//! PostgreSQL database are several hosts, and an `up` started again on the same
//! state directory adopts its own runs.
//!
//! Every daemon and bundled extension is this same binary, re-executed
//! (`open-conduit __daemon <name>`, `open-conduit extension-run <name>`): one build gives
//! the whole suite.
//!
//! Without `--config` it applies an embedded demo: a `demo` scope whose `webhook`
//! entry takes unsigned deliveries on `/hooks/demo` from loopback only, routed to a
//! shell binding that prints what it received, and a `schedule` job every minute.

use std::collections::HashMap;
use std::io::Write;
use std::net::{SocketAddr, TcpListener};
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use busapi::ext::RegistrationsRequest;
use busapi::ingress::RoutesRequest;
use busapi::store::{ConfigApplyRequest, ConfigApplyResponse};
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, BufReader as AsyncBufReader};

use crate::bundled::write_bundled;
pub use crate::bundled::{bundled, bundled_playbooks, write_bundled_to, write_playbooks};
use crate::client::call_typed_within;
use tokio::net::UnixDatagram;
use tokio::process::{Child, Command};

/// How long a daemon may take to say `READY=1`.
pub const READY_WAIT: Duration = Duration::from_secs(60);
/// How long a daemon may take to stop after SIGTERM before SIGKILL.
pub const STOP_WAIT: Duration = Duration::from_secs(15);
/// The longest wait before restarting a daemon that keeps dying.
pub const BACKOFF_MAX: Duration = Duration::from_secs(30);

/// The daemons, in start order.
pub const DAEMONS: [&str; 6] = [
    "broker",
    "storaged",
    "extrunner",
    "schedulerd",
    "ingressd",
    "webd",
];

/// The tunnel daemon, started after the others when the configuration names a
/// tunnel (`settings.webhooks.tunnel`).
pub const TUNNELD: &str = "tunneld";

/// Whether the configuration document names a tunnel.
pub fn names_tunnel(config: &Value) -> bool {
    config
        .pointer("/settings/webhooks/tunnel")
        .is_some_and(|t| !t.is_null())
}

/// The embedded demo configuration.
pub fn demo_config() -> Value {
    json!({
        "scopes": [{
            "id": "demo",
            "entries": [
                {"type": "webhook", "name": "demo",
                 "config": {"path": "/hooks/demo", "signature": {"scheme": "none"},
                            "allow_unsigned": "loopback"}},
                {"type": "schedule", "name": "clock",
                 "config": {"binding": "echo", "jobs": [{"name": "every-minute", "cron": "* * * * *"}]}}
            ],
            "routes": [
                {"handler": "webhook", "binding": "echo", "config": {"entry": "demo"}},
                {"handler": "schedule", "binding": "echo"}
            ],
            "bindings": [
                {"name": "echo", "executor": "shell",
                 "config": {"script": "echo \"Work $OS_WORK_ID, attempt $OS_ATTEMPT, received:\"; cat \"$OS_INPUTS\"; echo; echo done"}}
            ]
        }]
    })
}

/// `up`'s options.
#[derive(Debug, Clone)]
pub struct UpOptions {
    /// The state directory.
    pub state: PathBuf,
    /// The configuration file; `None` runs the embedded demo.
    pub config: Option<PathBuf>,
    /// Where webhooks are accepted.
    pub listen: SocketAddr,
    /// Where the web view (webd) is served.
    pub web_listen: SocketAddr,
    /// Every daemon log line to the terminal, not only what [`shown`] keeps.
    pub verbose: bool,
}

/// What `up` prints of a daemon's log line when not verbose: warnings and errors,
/// and one short line per delivery and per attempt settled (without the time stamp,
/// level and module); `None` for the rest, which goes to the log file only.
pub fn shown(line: &str) -> Option<String> {
    // `<time>  <LEVEL> <target>: <message and fields>`
    let mut words = line.split_whitespace();
    let _time = words.next()?;
    let level = words.next()?;
    let rest = line
        .split_once(&format!(" {level} "))
        .map(|(_, r)| r.trim_start())?;
    let message = rest.split_once(": ").map_or(rest, |(_, m)| m);
    match level {
        "WARN" | "ERROR" => Some(format!("{level} {message}")),
        _ if message.starts_with("delivery accepted") || message.starts_with("attempt settled") => {
            Some(message.to_owned())
        }
        _ => None,
    }
}

/// The default state directory: `$XDG_STATE_HOME/open-conduit`, else
/// `~/.local/state/open-conduit`, else `./open-conduit-state`.
pub fn default_state() -> PathBuf {
    if let Some(x) = std::env::var_os("XDG_STATE_HOME").filter(|x| !x.is_empty()) {
        return PathBuf::from(x).join("open-conduit");
    }
    if let Some(h) = std::env::var_os("HOME").filter(|x| !x.is_empty()) {
        return PathBuf::from(h).join(".local/state/open-conduit");
    }
    PathBuf::from("open-conduit-state")
}

fn say(line: &str) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}

/// Pass `fd` as the child's fd 3, named `name` (see [`daemon::activation::pass`]).
fn pass_fd(cmd: &mut Command, fd: RawFd, name: &str) {
    use daemon::activation::pass;
    cmd.env(pass::PASS_FDS, "1").env(pass::PASS_FDNAMES, name);
    // SAFETY: the hook runs only dup2 and fcntl between fork and exec.
    unsafe {
        cmd.pre_exec(pass::to_fd3(fd));
    }
}

/// Called first in `main`: turn what `up` passed into systemd's variables.
pub fn take_passed_fds() {
    daemon::activation::pass::take_passed();
}

struct Running {
    child: Child,
    started: Instant,
    backoff: Duration,
}

struct Up {
    opts: UpOptions,
    exe: PathBuf,
    bus: PathBuf,
    bus_listener: UnixListener,
    http: TcpListener,
    /// webd's listening socket (`--web-listen`).
    web: TcpListener,
    bundled: PathBuf,
    /// storaged's `--config-dir`, when the configuration names a storage.
    storage_dir: Option<PathBuf>,
    /// This suite's host ID (`<state>/host-id`).
    host_id: String,
    running: HashMap<&'static str, Running>,
}

impl Up {
    fn args(&self, name: &str) -> Vec<String> {
        let bus = self.bus.display().to_string();
        let state = self.opts.state.display().to_string();
        let mut a = vec!["__daemon".to_owned(), name.to_owned()];
        let more: Vec<String> = match name {
            "broker" => {
                let mut v = vec!["--socket".to_owned(), bus.clone()];
                if !nix::unistd::getuid().is_root() {
                    if let Ok(Some(u)) = nix::unistd::User::from_uid(nix::unistd::getuid()) {
                        v.push("--service-user".to_owned());
                        v.push(u.name);
                    }
                }
                v
            }
            "storaged" => {
                let mut v = vec!["--state".into(), state, "--bus".into(), bus.clone()];
                if let Some(dir) = &self.storage_dir {
                    v.extend(["--config-dir".into(), dir.display().to_string()]);
                }
                v
            }
            "extrunner" => vec![
                "--config-dir".into(),
                self.opts.state.join("etc").display().to_string(),
                "--bundled".into(),
                self.bundled.display().to_string(),
                "--state".into(),
                state,
                "--bus".into(),
                bus.clone(),
            ],
            "schedulerd" => vec![
                "--bus".into(),
                bus.clone(),
                "--host-id".into(),
                self.host_id.clone(),
                "--host-name".into(),
                format!(
                    "{}:{}",
                    std::fs::read_to_string("/proc/sys/kernel/hostname")
                        .map(|h| h.trim().to_owned())
                        .unwrap_or_default(),
                    self.opts.state.display()
                ),
            ],
            "webd" => vec!["--bus".into(), bus.clone(), "--state".into(), state],
            _ => vec!["--bus".into(), bus.clone()],
        };
        a.extend(more);
        a.extend(["--log".to_owned(), "stderr".to_owned()]);
        a
    }

    /// Start `name` and wait for its `READY=1`.
    async fn start(&mut self, name: &'static str) -> Result<u32, String> {
        let notify_path = self.opts.state.join(format!("run/notify-{name}.sock"));
        let _ = std::fs::remove_file(&notify_path);
        let notify = UnixDatagram::bind(&notify_path)
            .map_err(|e| format!("{}: {e}", notify_path.display()))?;
        let mut cmd = Command::new(&self.exe);
        if !self.opts.verbose && name == "ingressd" {
            // Its per-delivery line is a debug one: `shown` prints it.
            cmd.env(daemon::log::FILTER_VAR, "info,ingressd::intake=debug");
        }
        cmd.env_remove(extrunner::runner::CONFIG_FILE_VAR);
        if let (Some(file), "extrunner") = (&self.opts.config, name) {
            // Its folder is denied to every sandbox.
            cmd.env(extrunner::runner::CONFIG_FILE_VAR, file);
        }
        cmd.args(self.args(name))
            .env("NOTIFY_SOCKET", &notify_path)
            .env_remove("OPEN_CONDUIT_BUS")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            // Its own process group: the terminal's Ctrl-C reaches `up` alone, which
            // stops the daemons in order.
            .process_group(0)
            .kill_on_drop(false);
        die_with_parent(&mut cmd);
        match name {
            "broker" => pass_fd(&mut cmd, self.bus_listener.as_raw_fd(), "bus"),
            "ingressd" => pass_fd(&mut cmd, self.http.as_raw_fd(), "http"),
            "webd" => pass_fd(&mut cmd, self.web.as_raw_fd(), "http"),
            _ => {}
        }
        let mut child = cmd.spawn().map_err(|e| format!("start {name}: {e}"))?;
        let pid = child.id().unwrap_or(0);
        if let Some(err) = child.stderr.take() {
            // Each line to the terminal, prefixed, and to `<state>/logs/<name>.log`
            // (what `open-conduit logs` reads under `up`), bounded (`uplog`).
            let log_path = self.opts.state.join(format!("logs/{name}.log"));
            let mut log = crate::uplog::BoundedLog::open(log_path, crate::uplog::MAX_LOG_BYTES);
            let verbose = self.opts.verbose;
            tokio::spawn(async move {
                let mut lines = AsyncBufReader::new(err).lines();
                while let Ok(Some(line)) = lines.next_line().await {
                    if verbose {
                        say(&format!("{name:>10} | {line}"));
                    } else if let Some(short) = shown(&line) {
                        say(&format!("{name:>10} | {short}"));
                    }
                    log.line(&line);
                }
            });
        }
        // Known at once, so that a stop while it starts stops it too.
        self.running.insert(
            name,
            Running {
                child,
                started: Instant::now(),
                backoff: Duration::from_secs(1),
            },
        );
        let deadline = Instant::now() + READY_WAIT;
        let mut buf = vec![0u8; 4096];
        loop {
            let remaining = deadline.saturating_duration_since(Instant::now());
            tokio::select! {
                r = notify.recv(&mut buf) => {
                    let n = r.map_err(|e| format!("{name}'s notify socket: {e}"))?;
                    let text = String::from_utf8_lossy(&buf[..n]).to_string();
                    if text.lines().any(|l| l == "READY=1") {
                        break;
                    }
                }
                _ = tokio::time::sleep(Duration::from_millis(50)) => {
                    let exited = match self.running.get_mut(name) {
                        Some(r) => r.child.try_wait().ok().flatten(),
                        None => None,
                    };
                    if let Some(status) = exited {
                        self.running.remove(name);
                        return Err(format!("{name} exited before it was ready ({status})"));
                    }
                    if remaining.is_zero() {
                        if let Some(mut r) = self.running.remove(name) {
                            let _ = r.child.start_kill();
                            let _ = r.child.wait().await;
                        }
                        return Err(format!("{name} was not ready within {READY_WAIT:?}"));
                    }
                }
            }
        }
        // Keep reading its notifications so the socket never fills; its last
        // `STATUS=` line goes to `<state>/run/<name>.status` (what `status` shows).
        let status_path = self.opts.state.join(format!("run/{name}.status"));
        tokio::spawn(async move {
            let mut buf = vec![0u8; 4096];
            while let Ok(n) = notify.recv(&mut buf).await {
                let text = String::from_utf8_lossy(&buf[..n]).to_string();
                if let Some(status) = text.lines().find_map(|l| l.strip_prefix("STATUS=")) {
                    let _ = std::fs::write(&status_path, status);
                }
            }
        });
        say(&format!("open-conduit: {name} ready (pid {pid})"));
        Ok(pid)
    }

    /// Stops the daemons in reverse order: SIGTERM, then SIGKILL past
    /// [`STOP_WAIT`]. Another signal meanwhile (a second Ctrl-C) kills what is left
    /// at once.
    /// Removes what only a running suite uses from `<state>/run`: the bus socket, the
    /// notify sockets, the status lines, the toolbelt socket, the daemons' direct
    /// sockets (`direct/`, whose daemons removed their own as they stopped; one
    /// SIGKILLed leaves its socket).
    fn tidy(&self) {
        let run = self.opts.state.join("run");
        if let Some(direct) = daemon::direct::dir_for(&run.join("bus.sock")) {
            let _ = std::fs::remove_dir_all(direct);
        }
        let Ok(entries) = std::fs::read_dir(&run) else {
            return;
        };
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().to_string();
            let stale = name == "bus.sock"
                || name == "toolbelt.sock"
                || (name.starts_with("notify-") && name.ends_with(".sock"))
                || name.ends_with(".status");
            if stale {
                let _ = std::fs::remove_file(e.path());
            }
        }
    }

    async fn stop_all(&mut self, signals: &mut daemon::Signals) {
        let mut forced = false;
        for name in std::iter::once(&TUNNELD).chain(DAEMONS.iter().rev()) {
            let Some(mut r) = self.running.remove(name) else {
                continue;
            };
            if forced {
                let _ = r.child.kill().await;
                say(&format!("open-conduit: {name} killed"));
                continue;
            }
            if let Some(pid) = r.child.id().and_then(|p| i32::try_from(p).ok()) {
                let _ = nix::sys::signal::kill(
                    nix::unistd::Pid::from_raw(pid),
                    nix::sys::signal::Signal::SIGTERM,
                );
            }
            tokio::select! {
                waited = tokio::time::timeout(STOP_WAIT, r.child.wait()) => match waited {
                    Ok(_) => say(&format!("open-conduit: {name} stopped")),
                    Err(_) => {
                        let _ = r.child.kill().await;
                        say(&format!(
                            "open-conduit: {name} did not stop in {STOP_WAIT:?}: killed"
                        ));
                    }
                },
                _ = signals.next() => {
                    say("open-conduit: asked again: killing what is left");
                    forced = true;
                    let _ = r.child.kill().await;
                    say(&format!("open-conduit: {name} killed"));
                }
            }
        }
    }
}

/// The daemon started by `cmd` gets SIGTERM when `up` dies (however it dies), so a
/// suite never outlives its supervisor.
fn die_with_parent(cmd: &mut Command) {
    let parent = nix::unistd::getpid();
    // SAFETY: the hook calls only prctl and getppid between fork and exec.
    unsafe {
        cmd.pre_exec(move || {
            nix::sys::prctl::set_pdeathsig(nix::sys::signal::Signal::SIGTERM)
                .map_err(std::io::Error::from)?;
            // `up` died between the fork and the prctl: nobody would stop this one.
            if nix::unistd::getppid() != parent {
                return Err(std::io::Error::other("open-conduit up is gone"));
            }
            Ok(())
        });
    }
}

/// Bind the web view's socket (`--web-listen`): a port in use is an error that
/// names the option.
fn bind_web(addr: SocketAddr) -> Result<TcpListener, String> {
    TcpListener::bind(addr).map_err(|e| {
        let busy = if e.kind() == std::io::ErrorKind::AddrInUse {
            " (another web view, e.g. open-conduit-webd.socket, or another `up`, holds it: pick another with --web-listen ADDR, `127.0.0.1:0` for any free port)"
        } else {
            ""
        };
        format!("--web-listen {addr}: {e}{busy}")
    })
}

fn load_config(opts: &UpOptions) -> Result<Value, String> {
    let Some(path) = &opts.config else {
        return Ok(demo_config());
    };
    let text = std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let doc: Value =
        serde_json::from_slice(&text).map_err(|e| format!("{}: not JSON: {e}", path.display()))?;
    if let Err(problems) = protocol::config::Config::parse(&doc) {
        let lines: Vec<String> = problems.iter().map(|p| format!("  {p}")).collect();
        return Err(format!(
            "{} has problems:\n{}",
            path.display(),
            lines.join("\n")
        ));
    }
    Ok(doc)
}

/// Wait (at most 20 s) until every running extension is configured with generation
/// `hash` and ingressd serves every webhook path they registered, so what `up` prints
/// next is true. An extension that refuses the generation is the error, with its
/// reason (which names the JSON pointer).
async fn settle_config(bus: &Path, hash: &str) -> Result<(), String> {
    let deadline = Instant::now() + Duration::from_secs(20);
    let limit = Duration::from_secs(5);
    while Instant::now() < deadline {
        let regs = call_typed_within(bus, RegistrationsRequest {}, limit)
            .await
            .unwrap_or_default();
        let exts = regs.extensions;
        let refused: Vec<String> = exts
            .iter()
            .filter_map(|e| Some((e, e.refusal.as_ref()?)))
            .filter(|(_, r)| r.generation == hash)
            .map(|(e, r)| format!("  {}: {}", e.name, r.error))
            .collect();
        if !refused.is_empty() {
            return Err(format!(
                "the configuration is refused:\n{}",
                refused.join("\n")
            ));
        }
        let configured = regs.complete
            && exts
                .iter()
                .filter(|e| e.state == "running")
                .all(|e| e.generation == hash);
        let wanted: Vec<String> = exts
            .iter()
            .flat_map(|e| &e.webhooks)
            .map(|w| w.path.trim_end_matches('/').to_owned())
            .collect();
        let routes = call_typed_within(bus, RoutesRequest {}, limit)
            .await
            .unwrap_or_default();
        let served: Vec<String> = routes.routes.into_iter().map(|r| r.path).collect();
        if configured && wanted.iter().all(|p| served.contains(p)) {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    say("open-conduit: the extensions have not all taken the configuration yet (see their log lines)");
    Ok(())
}

/// Run the suite until Ctrl-C or SIGTERM. Returns the exit status.
pub async fn up(opts: UpOptions) -> i32 {
    match run(opts).await {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("open-conduit up: {e}");
            1
        }
    }
}

/// When the configuration names a storage (`settings.storage`), write it where
/// storaged reads it (`<state>/etc/storaged/config.json`, that setting alone):
/// its directory. Storage is chosen before the configuration can be applied,
/// since applying it writes to the database.
fn write_storage_settings(state: &Path, config: &Value) -> Result<Option<PathBuf>, String> {
    let storage = config
        .pointer("/settings/storage")
        .cloned()
        .unwrap_or(Value::Null);
    if storage.is_null() {
        return Ok(None);
    }
    let dir = state.join("etc/storaged");
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let path = dir.join("config.json");
    let doc = json!({"settings": {"storage": storage}});
    std::fs::write(&path, doc.to_string()).map_err(|e| format!("{}: {e}", path.display()))?;
    Ok(Some(dir))
}

/// The longest `<state>/host-id` read.
const MAX_HOST_ID_FILE: u64 = 256;

/// This suite's host ID: the one kept in `<state>/host-id`, or a new random one
/// written there. A state directory is a host: two `up` on one machine sharing a
/// database are two hosts, and an `up` started again on its state directory is the
/// same host (it adopts its own runs).
pub fn host_id(state: &Path) -> Result<String, String> {
    use std::io::Read as _;
    let path = state.join("host-id");
    if let Ok(f) = std::fs::File::open(&path) {
        let mut text = String::new();
        f.take(MAX_HOST_ID_FILE)
            .read_to_string(&mut text)
            .map_err(|e| format!("{}: {e}", path.display()))?;
        let id = text.trim().to_owned();
        schedulerd::host::check_id(&id).map_err(|e| format!("{}: {e}", path.display()))?;
        return Ok(id);
    }
    let bytes: [u8; 12] = protocol::random::bytes().map_err(|e| e.to_string())?;
    let id: String = std::iter::once("h-".to_owned())
        .chain(bytes.iter().map(|b| format!("{b:02x}")))
        .collect();
    let tmp = state.join("host-id.tmp");
    std::fs::write(&tmp, format!("{id}\n")).map_err(|e| format!("{}: {e}", tmp.display()))?;
    std::fs::rename(&tmp, &path).map_err(|e| format!("{}: {e}", path.display()))?;
    Ok(id)
}

/// The umask of `up` and everything it starts: what they make is the user's alone.
pub const UMASK: u32 = 0o077;

/// Makes the state directory private: created 0700 (with `run/`, `logs/` and
/// `etc/extensions/`), or, when it exists open to the group or others, made 0700,
/// which is said on stderr.
pub fn private_state(state: &Path) -> Result<(), String> {
    use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
    let private = |d: &Path| {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(d)
            .map_err(|e| format!("{}: {e}", d.display()))
    };
    private(state)?;
    let meta = std::fs::metadata(state).map_err(|e| format!("{}: {e}", state.display()))?;
    let mode = meta.permissions().mode() & 0o7777;
    if mode & 0o077 != 0 {
        std::fs::set_permissions(state, std::fs::Permissions::from_mode(0o700)).map_err(|e| {
            format!(
                "{} is {mode:04o}, open to other users, and cannot be made 0700: {e}",
                state.display()
            )
        })?;
        eprintln!(
            "open-conduit up: {} was {mode:04o}, open to other users: made 0700",
            state.display()
        );
    }
    for sub in ["run", "etc/extensions", "logs"] {
        private(&state.join(sub))?;
    }
    Ok(())
}

async fn run(mut opts: UpOptions) -> Result<(), String> {
    // Before anything is made: the daemons, the extensions and the runs inherit it.
    nix::sys::stat::umask(nix::sys::stat::Mode::from_bits_truncate(UMASK));
    let config = load_config(&opts)?;
    if let Some(file) = &opts.config {
        opts.config =
            Some(std::path::absolute(file).map_err(|e| format!("{}: {e}", file.display()))?);
    }
    let exe = std::env::current_exe().map_err(|e| format!("this binary's path: {e}"))?;
    private_state(&opts.state)?;
    let bundled = write_bundled(&opts.state, &exe)?;
    let storage_dir = write_storage_settings(&opts.state, &config)?;
    let host_id = host_id(&opts.state)?;
    let bus = opts.state.join("run/bus.sock");
    if bus.exists() {
        if UnixStream::connect(&bus).is_ok() {
            return Err(format!(
                "{} is in use: is another `open-conduit up` running on this state directory?",
                bus.display()
            ));
        }
        let _ = std::fs::remove_file(&bus);
    }
    // The TCP sockets first: a port in use leaves no bus socket behind.
    let http =
        TcpListener::bind(opts.listen).map_err(|e| format!("listen {}: {e}", opts.listen))?;
    let listen = http.local_addr().map_err(|e| e.to_string())?;
    let web = bind_web(opts.web_listen)?;
    let web_addr = web.local_addr().map_err(|e| e.to_string())?;
    let bus_listener = UnixListener::bind(&bus).map_err(|e| format!("{}: {e}", bus.display()))?;
    let mut signals = daemon::Signals::new().map_err(|e| format!("signals: {e}"))?;
    let mut up = Up {
        opts,
        exe,
        bus: bus.clone(),
        bus_listener,
        http,
        web,
        bundled,
        storage_dir,
        host_id,
        running: HashMap::new(),
    };
    say(&format!(
        "open-conduit: state in {}, bus at {}",
        up.opts.state.display(),
        bus.display()
    ));
    for name in DAEMONS {
        let started = tokio::select! {
            r = up.start(name) => r,
            _ = signals.next() => {
                say("open-conduit: stopping");
                up.stop_all(&mut signals).await;
                up.tidy();
                return Ok(());
            }
        };
        if let Err(e) = started {
            up.stop_all(&mut signals).await;
            up.tidy();
            return Err(e);
        }
    }
    let apply = async {
        let applied = call_typed_within(
            &bus,
            ConfigApplyRequest {
                config: config.clone(),
            },
            READY_WAIT,
        )
        .await?;
        settle_config(&bus, &applied.hash).await?;
        Ok::<ConfigApplyResponse, String>(applied)
    };
    let applied = tokio::select! {
        r = apply => r,
        _ = signals.next() => {
            say("open-conduit: stopping");
            up.stop_all(&mut signals).await;
            up.tidy();
            return Ok(());
        }
    };
    let applied = match applied {
        Ok(a) => a,
        Err(e) => {
            up.stop_all(&mut signals).await;
            up.tidy();
            return Err(e);
        }
    };
    if names_tunnel(&config) {
        if let Err(e) = up.start(TUNNELD).await {
            up.stop_all(&mut signals).await;
            up.tidy();
            return Err(e);
        }
        say("open-conduit: the configuration names a tunnel: tunneld runs it (`open-conduit status` shows its public URL)");
    }
    let demo = up.opts.config.is_none();
    say(&format!(
        "open-conduit: configuration {} applied (generation {})",
        if demo { "demo" } else { "file" },
        applied.generation
    ));
    say(&format!("open-conduit: webhooks on http://{listen}"));
    if demo {
        say("open-conduit: the demo takes unsigned deliveries on /hooks/demo, from loopback only. Try:");
        say(&format!(
            "  curl -sS -X POST http://{listen}/hooks/demo -H 'Content-Type: application/json' -d '{{\"hello\":\"world\"}}'"
        ));
    }
    say(&format!(
        "open-conduit: web view on http://{web_addr}/ (sign in: open-conduit web login --state {})",
        up.opts.state.display()
    ));
    say(&format!(
        "open-conduit: ready; Ctrl-C stops everything (OPEN_CONDUIT_BUS={})",
        bus.display()
    ));
    let mut tick = tokio::time::interval(Duration::from_millis(200));
    let mut restarts: HashMap<&'static str, (Instant, Duration)> = HashMap::new();
    loop {
        tokio::select! {
            signal = signals.next() => {
                // SIGHUP too: the terminal `up` runs in is gone.
                say(if signal == daemon::Signal::Reload {
                    "open-conduit: hung up: stopping"
                } else {
                    "open-conduit: stopping"
                });
                break;
            }
            _ = tick.tick() => {
                let now = Instant::now();
                let mut dead = Vec::new();
                for (name, r) in up.running.iter_mut() {
                    if let Ok(Some(status)) = r.child.try_wait() {
                        dead.push((*name, status, r.started.elapsed(), r.backoff));
                    }
                }
                for (name, status, uptime, backoff) in dead {
                    up.running.remove(name);
                    let wait = if uptime > Duration::from_secs(60) { Duration::from_secs(1) } else { backoff };
                    say(&format!("open-conduit: {name} exited ({status}); restarting in {wait:?}"));
                    restarts.insert(name, (now + wait, wait));
                }
                let due: Vec<(&'static str, Duration)> = restarts
                    .iter()
                    .filter(|(_, (at, _))| *at <= now)
                    .map(|(n, (_, w))| (*n, *w))
                    .collect();
                for (name, wait) in due {
                    restarts.remove(name);
                    let next = (wait * 2).min(BACKOFF_MAX);
                    match up.start(name).await {
                        Ok(_) => {
                            if let Some(r) = up.running.get_mut(name) {
                                r.backoff = next;
                            }
                        }
                        Err(e) => {
                            say(&format!("open-conduit: {name} did not start again ({e}); trying again in {next:?}"));
                            restarts.insert(name, (Instant::now() + next, next));
                        }
                    }
                }
            }
        }
    }
    up.stop_all(&mut signals).await;
    up.tidy();
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_state_directory_keeps_its_host_id_and_a_bad_one_is_refused() {
        let dir = std::env::temp_dir().join(format!("oc-up-host-id-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("a scratch directory");
        let first = host_id(&dir).expect("a new host ID");
        assert!(first.starts_with("h-") && first.len() == 26, "{first}");
        assert_eq!(host_id(&dir).expect("the kept one"), first);
        let other = dir.join("other");
        std::fs::create_dir_all(&other).expect("another state directory");
        assert_ne!(host_id(&other).expect("another host ID"), first);
        std::fs::write(dir.join("host-id"), "not/an id\n").expect("write");
        let e = host_id(&dir).unwrap_err();
        assert!(e.contains("host-id") && e.contains("may hold only"), "{e}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
