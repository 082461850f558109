//! The harness of the cross-daemon tests (and of `bench intake`): the whole suite as
//! real processes on real sockets, the way systemd runs it.
//!
//! One multi-call binary ([`dispatch`]; `oc-suite` here, the bench binary there) is each
//! daemon and each bundled extension, chosen by its first argument. A [`Suite`] holds the
//! bus socket and the webhook listening socket itself and passes them to the broker and
//! ingressd by socket activation (`LISTEN_FDS`, `LISTEN_PID`, `LISTEN_FDNAMES`), so a
//! daemon killed and started again loses no connection, exactly as under systemd. Each
//! daemon gets a `NOTIFY_SOCKET` of its own and counts as started when it sends
//! `READY=1`. Its stderr goes to `<dir>/logs/<daemon>.log`.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::net::{UnixDatagram, UnixListener, UnixStream};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

pub mod agent;
pub mod badtunnel;
pub mod bitbucket;
pub mod feed;
pub mod githttp;
pub mod github;
pub mod http1;
pub mod jira;
pub mod messages;
pub mod pause;
pub mod podman;
pub mod responses;
pub mod sieve;
pub mod slack;
pub mod standins;
pub mod webdriver;

/// How long anything here may take before a test calls it hung. Nothing measures time.
pub const HANG: Duration = Duration::from_secs(60);

/// Run as the program named by `args[0]`, if it is one of the suite's; `None` if not.
/// Call it first thing in `main`, before any thread starts.
pub fn dispatch(args: &[String]) -> Option<i32> {
    let which = args.first()?.as_str();
    let rest = args[1..].iter().cloned();
    // Before any thread: the daemon reads these as systemd's.
    daemon::activation::pass::take_passed();
    let named = |name: &str| std::iter::once(name.to_owned()).chain(rest.clone());
    Some(match which {
        "broker" => broker::cli::main(named("open-conduit-broker")),
        "storaged" => storaged::cli::main(named("open-conduit-storaged")),
        "extrunner" => extrunner::cli::main(named("open-conduit-extrunner")),
        "schedulerd" => schedulerd::cli::main(named("open-conduit-schedulerd")),
        "ingressd" => ingressd::cli::main(named("open-conduit-ingressd")),
        "tunneld" => tunneld::cli::main(named("open-conduit-tunneld")),
        "webd" => webd::cli::main(named("open-conduit-webd")),
        // The ssh tunnel and container provider, and its attach program.
        "ext-ssh" | "__ssh-attach" => oc_ssh::main(),
        "ext-cloudflared" => oc_cloudflared::main(),
        "ext-ngrok" => oc_ngrok::main(),
        "ext-srt" => oc_srt::main(),
        // The docker container provider, and its attach client.
        "ext-docker" | "__docker-attach" => oc_docker::main(),
        "fake-cloudflared" => standins::cloudflared(&rest.clone().collect::<Vec<_>>()),
        "fake-ngrok" => standins::ngrok(&rest.clone().collect::<Vec<_>>()),
        "ext-badtunnel" => badtunnel::main_entry(),
        "ext-feed" => feed::main_entry(),
        "ext-pause" => pause::main_entry(),
        "ext-agent" => agent::main_entry(),
        "ext-sieve" => sieve::main_entry(),
        // What `open-conduit up` re-executes its own binary as: each daemon and each
        // bundled extension.
        "__daemon" | "extension-run" => cli::main(
            std::iter::once("open-conduit".to_owned())
                .chain(args.iter().cloned())
                .collect(),
        ),
        // The command line, as `open-conduit ARGS…`.
        "open-conduit" => cli::main(
            std::iter::once("open-conduit".to_owned())
                .chain(rest.clone())
                .collect(),
        ),
        // The toolbelt's MCP server, as `open-conduit mcp`.
        "mcp" => cli::mcp::main(),
        // A run's git credential helper, as `open-conduit git-credential EXT OP`.
        "git-credential" => cli::gitcred::main(
            args.get(1).map(String::as_str).unwrap_or_default(),
            args.get(2).map(String::as_str).unwrap_or_default(),
        ),
        "ext-webhook" => match oc_webhook::extension() {
            Ok(ext) => sdk::run(ext),
            Err(e) => {
                eprintln!("webhook: {e}");
                2
            }
        },
        // The shell executor, and the wrapper it starts each run through (it
        // re-executes its own binary as `__wrap`).
        "ext-shell" | "__wrap" => oc_shell::main(),
        // A stand-in for the Claude Code CLI.
        "fake-claude" => oc_claude_code::fake::run(),
        // The claude-code executor, and its segment wrapper.
        "ext-claude-code" | "__wrap-claude-code" => oc_claude_code::main(),
        // The codex executor, and its segment wrapper.
        "ext-codex" | "__wrap-codex" => oc_codex::main(),
        "ext-git" => oc_git::main(),
        "ext-human" => match oc_human::extension() {
            Ok(ext) => sdk::run(ext),
            Err(e) => {
                eprintln!("human: {e}");
                2
            }
        },
        "ext-schedule" => match oc_schedule::extension() {
            Ok(ext) => sdk::run(ext),
            Err(e) => {
                eprintln!("schedule: {e}");
                2
            }
        },
        "ext-github" => match oc_github::extension() {
            Ok(ext) => sdk::run(ext),
            Err(e) => {
                eprintln!("github: {e}");
                2
            }
        },
        "ext-slack" => match oc_slack::extension() {
            Ok(ext) => sdk::run(ext),
            Err(e) => {
                eprintln!("slack: {e}");
                2
            }
        },
        "ext-linear" => match oc_linear::extension() {
            Ok(ext) => sdk::run(ext),
            Err(e) => {
                eprintln!("linear: {e}");
                2
            }
        },
        "ext-jira" => match oc_jira::extension() {
            Ok(ext) => sdk::run(ext),
            Err(e) => {
                eprintln!("jira: {e}");
                2
            }
        },
        "ext-bitbucket" => match oc_bitbucket::extension() {
            Ok(ext) => sdk::run(ext),
            Err(e) => {
                eprintln!("bitbucket: {e}");
                2
            }
        },
        _ => return None,
    })
}

/// A daemon of the suite.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Daemon {
    /// `open-conduit-broker`.
    Broker,
    /// `open-conduit-storaged`.
    Storaged,
    /// `open-conduit-extrunner`.
    Extrunner,
    /// `open-conduit-schedulerd`.
    Schedulerd,
    /// `open-conduit-ingressd`.
    Ingressd,
    /// `open-conduit-tunneld` (not in [`Daemon::ALL`]: started when a test runs a
    /// tunnel).
    Tunneld,
    /// `open-conduit-webd` (not in [`Daemon::ALL`]: started by the tests of the web
    /// API), served on [`Suite::web`] with its state in `<dir>/state`.
    Webd,
}

impl Daemon {
    /// Its name, which is also its `dispatch` argument.
    pub fn name(self) -> &'static str {
        match self {
            Daemon::Broker => "broker",
            Daemon::Storaged => "storaged",
            Daemon::Extrunner => "extrunner",
            Daemon::Schedulerd => "schedulerd",
            Daemon::Ingressd => "ingressd",
            Daemon::Tunneld => "tunneld",
            Daemon::Webd => "webd",
        }
    }

    /// In start order.
    pub const ALL: [Daemon; 5] = [
        Daemon::Broker,
        Daemon::Storaged,
        Daemon::Extrunner,
        Daemon::Schedulerd,
        Daemon::Ingressd,
    ];
}

/// A bundled extension package: its name and its manifest file's text. The harness
/// writes `<dir>/bundled/<name>/open-conduit-extension.json` as it is, and beside it a
/// script named after the manifest's program (a bare name) that execs the multi-call
/// binary with `command` (the arguments that make it this extension).
#[derive(Debug, Clone)]
pub struct Package {
    /// The package name.
    pub name: String,
    /// The manifest text.
    pub manifest: String,
    /// The arguments the multi-call binary takes to be this extension.
    pub command: Vec<String>,
}

/// The suite, running in a scratch directory.
pub struct Suite {
    /// The scratch directory.
    pub dir: PathBuf,
    /// The bus socket.
    pub bus: PathBuf,
    /// Where webhooks are accepted.
    pub http: SocketAddr,
    /// Where webd serves its API.
    pub web: SocketAddr,
    bin: PathBuf,
    bus_listener: UnixListener,
    http_listener: TcpListener,
    web_listener: TcpListener,
    children: Mutex<HashMap<Daemon, Child>>,
    extra: Mutex<HashMap<Daemon, Vec<String>>>,
    envs: Mutex<HashMap<Daemon, Vec<(String, String)>>>,
    systemd_like: Mutex<HashMap<Daemon, u64>>,
    notify: Mutex<HashMap<Daemon, UnixDatagram>>,
    user: Mutex<Option<RunAs>>,
}

/// An unprivileged user the daemons run as ([`Suite::run_as`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunAs {
    /// Its name (the broker's `--service-user`).
    pub name: String,
    /// Its uid.
    pub uid: u32,
    /// Its primary group.
    pub gid: u32,
}

impl RunAs {
    /// `nobody`, when this process is root and can switch to it: the unprivileged user
    /// a test runs the suite as, beside root. `None` (with the reason) otherwise.
    pub fn nobody() -> Result<RunAs, String> {
        if !nix::unistd::getuid().is_root() {
            return Err(
                "the tests do not run as root, so they cannot switch to another user".into(),
            );
        }
        match nix::unistd::User::from_name("nobody") {
            Ok(Some(u)) => Ok(RunAs {
                name: u.name,
                uid: u.uid.as_raw(),
                gid: u.gid.as_raw(),
            }),
            Ok(None) => Err("this system has no user `nobody`".into()),
            Err(e) => Err(format!("cannot look up the user `nobody`: {e}")),
        }
    }
}

impl std::fmt::Debug for Suite {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Suite")
            .field("dir", &self.dir)
            .field("http", &self.http)
            .finish()
    }
}

fn io_err(msg: impl Into<String>) -> std::io::Error {
    std::io::Error::other(msg.into())
}

impl Suite {
    /// A suite in a fresh `<tmp>/oc-suite-<name>-<pid>` whose daemons are run by `bin`
    /// (a multi-call binary calling [`dispatch`]), with these bundled packages. Binds
    /// the bus socket and a webhook socket on an ephemeral loopback port; starts nothing.
    pub fn new(bin: &Path, name: &str, packages: &[Package]) -> std::io::Result<Suite> {
        let dir = std::env::temp_dir().join(format!("oc-suite-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        for sub in ["state", "etc/extensions", "bundled", "logs", "run"] {
            std::fs::create_dir_all(dir.join(sub))?;
        }
        for p in packages {
            let manifest: Value = serde_json::from_str(&p.manifest)
                .map_err(|e| io_err(format!("manifest of {}: {e}", p.name)))?;
            // The manifest is kept as it is (the handshake compares it with what the
            // extension reports); its program, a bare name, is a script in the package
            // directory that execs the multi-call binary.
            let program = manifest["command"][0]
                .as_str()
                .filter(|p| !p.contains('/'))
                .ok_or_else(|| io_err(format!("{}: command[0] must be a bare name", p.name)))?;
            let pkg = dir.join("bundled").join(&p.name);
            std::fs::create_dir_all(&pkg)?;
            let script = pkg.join(program);
            let args: String = p.command.iter().map(|a| format!(" '{a}'")).collect();
            std::fs::write(
                &script,
                format!("#!/bin/sh\nexec '{}'{args} \"$@\"\n", bin.display()),
            )?;
            std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o755))?;
            std::fs::write(
                pkg.join("open-conduit-extension.json"),
                serde_json::to_vec_pretty(&manifest).map_err(|e| io_err(e.to_string()))?,
            )?;
            // Its playbooks, as the package's layout ships them.
            cli::up::write_playbooks(&pkg, &p.name, &manifest).map_err(io_err)?;
        }
        let bus = dir.join("run/bus.sock");
        let bus_listener = UnixListener::bind(&bus)?;
        let http_listener = TcpListener::bind("127.0.0.1:0")?;
        let http = http_listener.local_addr()?;
        let web_listener = TcpListener::bind("127.0.0.1:0")?;
        let web = web_listener.local_addr()?;
        Ok(Suite {
            dir,
            bus,
            http,
            web,
            bin: bin.to_path_buf(),
            bus_listener,
            http_listener,
            web_listener,
            children: Mutex::new(HashMap::new()),
            extra: Mutex::new(HashMap::new()),
            envs: Mutex::new(HashMap::new()),
            systemd_like: Mutex::new(HashMap::new()),
            notify: Mutex::new(HashMap::new()),
            user: Mutex::new(None),
        })
    }

    /// From the next start on, run every daemon as `user` (an unprivileged service
    /// user, as the package runs the suite) with `HOME` at `<dir>/home`: hands the
    /// scratch directory's state, run, home and package folders to it. Files the test
    /// writes later must be readable by it (the defaults are).
    pub fn run_as(&self, user: RunAs) -> std::io::Result<()> {
        let home = self.dir.join("home");
        std::fs::create_dir_all(&home)?;
        for sub in ["state", "run", "home", "etc", "bundled"] {
            chown_tree(&self.dir.join(sub), user.uid, user.gid)?;
        }
        *self.user.lock().unwrap_or_else(|p| p.into_inner()) = Some(user);
        Ok(())
    }

    /// The user the daemons run as, when not this process's.
    pub fn user(&self) -> Option<RunAs> {
        self.user.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Hands `path` (and all under it) to the user the daemons run as, if any.
    pub fn give(&self, path: &Path) -> std::io::Result<()> {
        match self.user() {
            Some(u) => chown_tree(path, u.uid, u.gid),
            None => Ok(()),
        }
    }

    /// Where the daemons started [`as_systemd`](Suite::as_systemd) see `/run`: the
    /// journal's socket is `<this>/systemd/journal/socket`.
    pub fn journal_run(&self) -> PathBuf {
        self.dir.join("journal-run")
    }

    /// Bind the journal's native socket that the daemons started
    /// [`as_systemd`](Suite::as_systemd) write to (they see it at
    /// `/run/systemd/journal/socket`).
    pub fn journal(&self) -> std::io::Result<UnixDatagram> {
        let dir = self.journal_run().join("systemd/journal");
        std::fs::create_dir_all(&dir)?;
        let path = dir.join("socket");
        let _ = std::fs::remove_file(&path);
        let socket = UnixDatagram::bind(path)?;
        socket.set_read_timeout(Some(Duration::from_millis(200)))?;
        Ok(socket)
    }

    /// Whether this process may run a daemon in a mount namespace of its own, as
    /// [`as_systemd`](Suite::as_systemd) needs (root, or CAP_SYS_ADMIN).
    pub fn can_fake_journald() -> bool {
        Command::new("unshare")
            .args(["-m", "--propagation", "private", "true"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    }

    /// From its next start on, run `d` as systemd would under journald: `--log auto`,
    /// `JOURNAL_STREAM` naming its stderr, `WATCHDOG_USEC` set to `watchdog_usec`, and
    /// `/run` replaced (in a mount namespace of its own, through `unshare`) by
    /// [`journal_run`](Suite::journal_run), so that tracing-journald's fixed
    /// `/run/systemd/journal/socket` is [`journal`](Suite::journal)'s socket.
    pub fn as_systemd(&self, d: Daemon, watchdog_usec: u64) {
        let mut m = self.systemd_like.lock().unwrap_or_else(|p| p.into_inner());
        m.insert(d, watchdog_usec);
    }

    /// What `d` has sent to its `NOTIFY_SOCKET` since it was ready (only for a daemon
    /// started [`as_systemd`](Suite::as_systemd); waits at most 200 ms for the first).
    pub fn notifications(&self, d: Daemon) -> Vec<String> {
        let map = self.notify.lock().unwrap_or_else(|p| p.into_inner());
        let Some(socket) = map.get(&d) else {
            return Vec::new();
        };
        let mut out = Vec::new();
        let mut buf = [0u8; 4096];
        loop {
            match socket.recv(&mut buf) {
                Ok(n) => {
                    out.push(String::from_utf8_lossy(&buf[..n]).into_owned());
                    let _ = socket.set_nonblocking(true);
                }
                // A signal to the test process interrupted the wait: wait again.
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(_) => break,
            }
        }
        let _ = socket.set_nonblocking(false);
        out
    }

    /// Start `d` with these arguments too, from its next start on.
    pub fn set_args(&self, d: Daemon, args: &[&str]) {
        let mut extra = self.extra.lock().unwrap_or_else(|p| p.into_inner());
        extra.insert(d, args.iter().map(|a| (*a).to_owned()).collect());
    }

    /// Start `d` with this variable set too, from its next start on.
    pub fn set_env(&self, d: Daemon, name: &str, value: &str) {
        let mut envs = self.envs.lock().unwrap_or_else(|p| p.into_inner());
        envs.entry(d)
            .or_default()
            .push((name.to_owned(), value.to_owned()));
    }

    /// The bundled packages (webhook, github, schedule, shell, git, human), as the suite's binary
    /// serves them.
    pub fn first_party() -> Vec<Package> {
        vec![
            Package {
                name: "webhook".into(),
                manifest: oc_webhook::MANIFEST.into(),
                command: vec!["ext-webhook".into()],
            },
            Package {
                name: "github".into(),
                manifest: oc_github::MANIFEST.into(),
                command: vec!["ext-github".into()],
            },
            Package {
                name: "schedule".into(),
                manifest: oc_schedule::MANIFEST.into(),
                command: vec!["ext-schedule".into()],
            },
            Package {
                name: "shell".into(),
                manifest: oc_shell::MANIFEST.into(),
                command: vec!["ext-shell".into()],
            },
            Package {
                name: "git".into(),
                manifest: oc_git::MANIFEST.into(),
                command: vec!["ext-git".into()],
            },
            Package {
                name: "human".into(),
                manifest: oc_human::MANIFEST.into(),
                command: vec!["ext-human".into()],
            },
        ]
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Daemon, Child>> {
        self.children.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Start `d` and wait for its `READY=1`. Answers its pid.
    pub fn start(&self, d: Daemon) -> std::io::Result<u32> {
        let name = d.name();
        let notify_path = self.dir.join(format!("run/notify-{name}.sock"));
        let _ = std::fs::remove_file(&notify_path);
        let notify = UnixDatagram::bind(&notify_path)?;
        notify.set_read_timeout(Some(Duration::from_millis(200)))?;
        let user = self.user();
        if let Some(u) = &user {
            chown_tree(&notify_path, u.uid, u.gid)?;
        }
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.join(format!("logs/{name}.log")))?;
        let systemd = self
            .systemd_like
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&d)
            .copied();
        let mut cmd = match systemd {
            None => Command::new(&self.bin),
            Some(watchdog_usec) => {
                use std::os::unix::fs::MetadataExt;
                let meta = log.metadata()?;
                let mut c = Command::new("unshare");
                c.args(["-m", "--propagation", "private", "sh", "-c"])
                    .arg("mount --bind \"$0\" /run && exec \"$@\"")
                    .arg(self.journal_run())
                    .arg(&self.bin)
                    .env("JOURNAL_STREAM", format!("{}:{}", meta.dev(), meta.ino()))
                    .env("WATCHDOG_USEC", watchdog_usec.to_string());
                c
            }
        };
        let log_to = if systemd.is_some() { "auto" } else { "stderr" };
        cmd.arg(name)
            .env("NOTIFY_SOCKET", &notify_path)
            .env("OC_LOG", "info")
            .env_remove("OPEN_CONDUIT_BUS")
            .envs(
                self.envs
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .get(&d)
                    .cloned()
                    .unwrap_or_default(),
            )
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::from(log));
        let bus = self.bus.display().to_string();
        let state = self.dir.join("state").display().to_string();
        match d {
            Daemon::Broker => {
                cmd.args(["--socket", &bus, "--log", log_to]);
                if let Some(u) = &user {
                    cmd.args(["--service-user", &u.name]);
                } else if !nix::unistd::getuid().is_root() {
                    if let Ok(Some(u)) = nix::unistd::User::from_uid(nix::unistd::getuid()) {
                        cmd.args(["--service-user", &u.name]);
                    }
                }
                pass_fd(&mut cmd, self.bus_listener.as_raw_fd(), "bus");
            }
            Daemon::Storaged => {
                cmd.args(["--state", &state, "--bus", &bus, "--log", log_to]);
            }
            Daemon::Schedulerd | Daemon::Tunneld => {
                cmd.args(["--bus", &bus, "--log", log_to]);
            }
            Daemon::Extrunner => {
                let etc = self.dir.join("etc").display().to_string();
                let bundled = self.dir.join("bundled").display().to_string();
                cmd.args([
                    "--config-dir",
                    &etc,
                    "--bundled",
                    &bundled,
                    "--state",
                    &state,
                    "--bus",
                    &bus,
                    "--log",
                    log_to,
                ]);
            }
            Daemon::Ingressd => {
                cmd.args(["--bus", &bus, "--log", log_to]);
                pass_fd(&mut cmd, self.http_listener.as_raw_fd(), "http");
            }
            Daemon::Webd => {
                cmd.args(["--state", &state, "--bus", &bus, "--log", log_to]);
                pass_fd(&mut cmd, self.web_listener.as_raw_fd(), "http");
            }
        }
        if let Some(extra) = self.extra.lock().unwrap_or_else(|p| p.into_inner()).get(&d) {
            cmd.args(extra);
        }
        if let Some(u) = &user {
            // std drops the supplementary groups when it switches the uid.
            cmd.uid(u.uid)
                .gid(u.gid)
                .env("HOME", self.dir.join("home"))
                .env("USER", &u.name)
                .env("LOGNAME", &u.name);
        }
        let mut child = cmd.spawn()?;
        let pid = child.id();
        let deadline = Instant::now() + HANG;
        let mut buf = [0u8; 4096];
        loop {
            if let Some(status) = child.try_wait()? {
                return Err(io_err(format!(
                    "{name} exited before it was ready ({status}); see {}",
                    self.dir.join(format!("logs/{name}.log")).display()
                )));
            }
            match notify.recv(&mut buf) {
                Ok(n) => {
                    let text = String::from_utf8_lossy(&buf[..n]);
                    if text.lines().any(|l| l == "READY=1") {
                        break;
                    }
                }
                // A signal to the test process (a child ending) interrupts the
                // wait: nothing is lost, wait again.
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock
                            | std::io::ErrorKind::TimedOut
                            | std::io::ErrorKind::Interrupted
                    ) => {}
                Err(e) => return Err(e),
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                return Err(io_err(format!("{name} was not ready within {HANG:?}")));
            }
        }
        self.lock().insert(d, child);
        if systemd.is_some() {
            self.notify
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .insert(d, notify);
        }
        Ok(pid)
    }

    /// Start every daemon, in order.
    pub fn start_all(&self) -> std::io::Result<()> {
        for d in Daemon::ALL {
            self.start(d)?;
        }
        Ok(())
    }

    /// The pid of `d`, if it runs.
    pub fn pid(&self, d: Daemon) -> Option<u32> {
        self.lock().get(&d).map(Child::id)
    }

    /// SIGKILL `d` and reap it.
    pub fn kill(&self, d: Daemon) {
        if let Some(mut c) = self.lock().remove(&d) {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// SIGTERM `d` and wait for it (SIGKILL past [`HANG`]).
    pub fn stop(&self, d: Daemon) {
        let Some(mut c) = self.lock().remove(&d) else {
            return;
        };
        if let Ok(pid) = i32::try_from(c.id()) {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGTERM,
            );
        }
        let deadline = Instant::now() + HANG;
        loop {
            match c.try_wait() {
                Ok(Some(_)) | Err(_) => return,
                Ok(None) if Instant::now() > deadline => {
                    let _ = c.kill();
                    let _ = c.wait();
                    return;
                }
                Ok(None) => std::thread::sleep(Duration::from_millis(10)),
            }
        }
    }

    /// One JSON-RPC call through the broker (a connection of its own): the result, or
    /// the error object.
    pub fn call(&self, method: &str, params: Value) -> Result<Value, Value> {
        let mut s = UnixStream::connect(&self.bus).map_err(|e| json!(e.to_string()))?;
        s.set_read_timeout(Some(HANG))
            .map_err(|e| json!(e.to_string()))?;
        let mut line = serde_json::to_vec(
            &json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params}),
        )
        .map_err(|e| json!(e.to_string()))?;
        line.push(b'\n');
        s.write_all(&line).map_err(|e| json!(e.to_string()))?;
        let mut reader = BufReader::new(s);
        let mut answer = String::new();
        reader
            .read_line(&mut answer)
            .map_err(|e| json!(e.to_string()))?;
        let v: Value = serde_json::from_str(&answer).map_err(|e| json!(e.to_string()))?;
        match v.get("error") {
            Some(e) => Err(e.clone()),
            None => Ok(v.get("result").cloned().unwrap_or(Value::Null)),
        }
    }

    /// One typed call of a daemon's method (`busapi`): its result, or the error
    /// object (an answer that does not decode is an error naming the method).
    pub fn call_typed<C: busapi::Call>(&self, params: &C) -> Result<C::Result, Value> {
        let params = serde_json::to_value(params).map_err(|e| json!(e.to_string()))?;
        let v = self.call(C::METHOD, params)?;
        serde_json::from_value(v).map_err(|e| json!(format!("the answer of {}: {e}", C::METHOD)))
    }

    /// Apply a configuration document (as `open-conduit config apply` will) and wait
    /// until ingressd serves `path` (or [`HANG`]).
    pub fn apply_config(&self, doc: &Value, path: &str) -> Result<(), String> {
        self.call("store.config_apply", json!({ "config": doc }))
            .map_err(|e| format!("store.config_apply: {e}"))?;
        self.wait_for_route(path)
    }

    /// Wait until ingressd serves `path` (or [`HANG`]).
    pub fn wait_for_route(&self, path: &str) -> Result<(), String> {
        let deadline = Instant::now() + HANG;
        loop {
            if let Ok(r) = self.call("ingress.routes", json!({})) {
                let served = r["routes"]
                    .as_array()
                    .is_some_and(|a| a.iter().any(|x| x["path"] == path));
                if served {
                    return Ok(());
                }
            }
            if Instant::now() > deadline {
                return Err(format!("ingressd did not serve {path} within {HANG:?}"));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The events the store holds, in sequence order (every page).
    pub fn events(&self) -> Result<Vec<Value>, Value> {
        let mut out = Vec::new();
        let mut after = 0i64;
        loop {
            let page = self.call("store.events", json!({"after": after, "limit": 1000}))?;
            let events = page["events"].as_array().cloned().unwrap_or_default();
            if events.is_empty() {
                return Ok(out);
            }
            for e in &events {
                after = after.max(e["seq"].as_i64().unwrap_or(after));
            }
            out.extend(events);
        }
    }

    /// A daemon's log so far.
    pub fn log(&self, d: Daemon) -> String {
        std::fs::read_to_string(self.dir.join(format!("logs/{}.log", d.name()))).unwrap_or_default()
    }
}

impl Drop for Suite {
    fn drop(&mut self) {
        self.stop(Daemon::Webd);
        self.stop(Daemon::Tunneld);
        for d in Daemon::ALL.iter().rev() {
            self.stop(*d);
        }
        if std::env::var_os("OC_KEEP_SUITE").is_none() {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

/// `chown -R uid:gid path` (symlinks themselves, not what they name).
fn chown_tree(path: &Path, uid: u32, gid: u32) -> std::io::Result<()> {
    std::os::unix::fs::lchown(path, Some(uid), Some(gid))?;
    let meta = std::fs::symlink_metadata(path)?;
    if meta.is_dir() {
        for entry in std::fs::read_dir(path)? {
            chown_tree(&entry?.path(), uid, gid)?;
        }
    }
    Ok(())
}

/// Pass `fd` to the child as its fd 3, named `name`, as socket activation does.
fn pass_fd(cmd: &mut Command, fd: RawFd, name: &str) {
    use daemon::activation::pass;
    cmd.env(pass::PASS_FDS, "1").env(pass::PASS_FDNAMES, name);
    // SAFETY: the hook runs only dup2 and fcntl between fork and exec.
    unsafe {
        cmd.pre_exec(pass::to_fd3(fd));
    }
}

/// An HTTP answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Response {
    /// The status.
    pub status: u16,
    /// The headers, names lowercased.
    pub headers: Vec<(String, String)>,
    /// The body.
    pub body: Vec<u8>,
}

impl Response {
    /// The first header named `name` (lowercase).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    /// The body as text.
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

/// `POST path` with these headers and body on a new connection (`Connection: close`),
/// and read the whole answer. Any failure to connect, send or read is an error (the
/// sender would retry).
pub fn post(
    addr: SocketAddr,
    path: &str,
    headers: &[(&str, String)],
    body: &[u8],
) -> std::io::Result<Response> {
    let mut s = TcpStream::connect(addr)?;
    s.set_read_timeout(Some(HANG))?;
    s.set_nodelay(true)?;
    let mut req = format!(
        "POST {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nContent-Length: {}\r\n",
        body.len()
    );
    for (n, v) in headers {
        req.push_str(&format!("{n}: {v}\r\n"));
    }
    req.push_str("\r\n");
    let mut bytes = req.into_bytes();
    bytes.extend_from_slice(body);
    s.write_all(&bytes)?;
    let mut raw = Vec::new();
    s.read_to_end(&mut raw)?;
    parse_response(&raw)
}

/// `GET path` on a new connection, and the whole answer.
pub fn get(addr: SocketAddr, path: &str) -> std::io::Result<Response> {
    let mut s = TcpStream::connect(addr)?;
    s.set_read_timeout(Some(HANG))?;
    s.write_all(
        format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n").as_bytes(),
    )?;
    let mut raw = Vec::new();
    s.read_to_end(&mut raw)?;
    parse_response(&raw)
}

/// Parse one HTTP/1.1 answer with a `Content-Length` body (or a body to the end).
pub fn parse_response(raw: &[u8]) -> std::io::Result<Response> {
    let end = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or_else(|| io_err("the answer has no complete head"))?;
    let head = String::from_utf8_lossy(&raw[..end]);
    let mut lines = head.split("\r\n");
    let status_line = lines.next().unwrap_or_default();
    let status: u16 = status_line
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| io_err(format!("bad status line {status_line:?}")))?;
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    let mut body = raw[end + 4..].to_vec();
    if let Some(len) = headers
        .iter()
        .find(|(n, _)| n == "content-length")
        .and_then(|(_, v)| v.parse::<usize>().ok())
    {
        if body.len() < len {
            return Err(io_err("the answer's body is cut short"));
        }
        body.truncate(len);
    }
    Ok(Response {
        status,
        headers,
        body,
    })
}

/// `sha256=<hex>` of HMAC-SHA256(secret, body), as GitHub signs.
pub fn sign_sha256(secret: &[u8], body: &[u8]) -> String {
    use hmac::{Hmac, Mac};
    let mut mac = match Hmac::<sha2::Sha256>::new_from_slice(secret) {
        Ok(m) => m,
        Err(_) => return String::new(),
    };
    mac.update(body);
    let bytes = mac.finalize().into_bytes();
    let mut out = String::from("sha256=");
    for b in bytes {
        out.push_str(&format!("{b:02x}"));
    }
    out
}
