//! A PostgreSQL cluster of a test's own, from Debian's `postgresql` package:
//! `initdb` in a temporary directory, the server on a free port on 127.0.0.1
//! (run as `nobody` when the tests run as root: PostgreSQL refuses root), a
//! fresh database per test, and the server stopped (SIGINT: a fast shutdown)
//! and its directory removed when the test process exits, or killed with it.
//!
//! [`shared`] starts one cluster per test process; tests that stop or kill the
//! server start their own with [`Cluster::start`].

#![allow(clippy::missing_errors_doc)]

use nix::sys::signal::{kill, Signal};
use nix::unistd::{Gid, Pid, Uid, User};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

/// Where Debian installs the server's programs, newest version first.
fn bin_dir() -> Option<PathBuf> {
    if let Ok(dir) = std::env::var("OC_PG_BIN") {
        return Some(PathBuf::from(dir));
    }
    let mut versions: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .ok()?
        .filter_map(Result::ok)
        .filter_map(|e| {
            let v = e.file_name().to_str()?.parse::<u32>().ok()?;
            let bin = e.path().join("bin");
            bin.join("postgres").exists().then_some((v, bin))
        })
        .collect();
    versions.sort();
    versions.pop().map(|(_, b)| b)
}

/// Why PostgreSQL cannot run here, if it cannot.
pub fn unavailable() -> Option<String> {
    match bin_dir() {
        Some(_) => None,
        None => Some(
            "PostgreSQL's server is not installed (Debian's postgresql package: .ci/run installs it)"
                .into(),
        ),
    }
}

/// Skip (printing why) when PostgreSQL is missing, or fail when
/// `OC_REQUIRE_PEERS=1` says it must be there: `Some(cluster)` to go on.
pub fn shared_or_skip(test: &str) -> Option<&'static Cluster> {
    match shared() {
        Ok(c) => Some(c),
        Err(why) => {
            if std::env::var("OC_REQUIRE_PEERS").as_deref() == Ok("1") {
                panic!("{test}: PostgreSQL is required (OC_REQUIRE_PEERS=1): {why}");
            }
            eprintln!("SKIP {test}: {why}");
            None
        }
    }
}

/// The test process's one cluster, started on first use.
pub fn shared() -> Result<&'static Cluster, String> {
    static SHARED: OnceLock<Result<Cluster, String>> = OnceLock::new();
    SHARED
        .get_or_init(Cluster::start)
        .as_ref()
        .map_err(Clone::clone)
}

/// The servers this process started, stopped at exit.
static RUNNING: Mutex<Vec<(i32, PathBuf)>> = Mutex::new(Vec::new());

extern "C" fn stop_all_at_exit() {
    let running = std::mem::take(&mut *RUNNING.lock().unwrap_or_else(|p| p.into_inner()));
    for (pid, dir) in running {
        stop_pid(pid);
        let _ = std::fs::remove_dir_all(dir);
    }
}

fn stop_pid(pid: i32) {
    let pid = Pid::from_raw(pid);
    if kill(pid, Signal::SIGINT).is_err() {
        return;
    }
    let until = Instant::now() + Duration::from_secs(10);
    while Instant::now() < until {
        if kill(pid, None).is_err() {
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = kill(pid, Signal::SIGKILL);
}

/// A running cluster.
pub struct Cluster {
    bin: PathBuf,
    dir: PathBuf,
    port: u16,
    pid: Mutex<Option<i32>>,
    owner: Option<(Uid, Gid)>,
    next_db: AtomicU64,
}

/// The superuser the clusters are made with.
pub const USER: &str = "conduit";

impl Cluster {
    /// Make and start a new cluster (in the temporary directory).
    pub fn start() -> Result<Cluster, String> {
        Cluster::start_in(&std::env::temp_dir())
    }

    /// Make and start a new cluster in a new directory under `parent` (a
    /// benchmark puts it on the disk the state would live on).
    pub fn start_in(parent: &Path) -> Result<Cluster, String> {
        static AT_EXIT: OnceLock<()> = OnceLock::new();
        AT_EXIT.get_or_init(|| {
            // SAFETY: registers a plain function with no arguments.
            unsafe {
                nix::libc::atexit(stop_all_at_exit);
            }
        });
        let bin = bin_dir().ok_or_else(|| unavailable().unwrap_or_default())?;
        static N: AtomicU64 = AtomicU64::new(0);
        let dir = parent.join(format!(
            "oc-pg-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).map_err(|e| format!("create {}: {e}", dir.display()))?;
        let owner = if Uid::effective().is_root() {
            let nobody = User::from_name("nobody")
                .ok()
                .flatten()
                .ok_or("running as root, and there is no user `nobody` to run PostgreSQL as")?;
            nix::unistd::chown(&dir, Some(nobody.uid), Some(nobody.gid))
                .map_err(|e| format!("chown {}: {e}", dir.display()))?;
            Some((nobody.uid, nobody.gid))
        } else {
            None
        };
        let data = dir.join("data");
        let out = as_owner(Command::new(bin.join("initdb")), owner)
            .args(["-D"])
            .arg(&data)
            .args([
                "-U",
                USER,
                "--auth=trust",
                "-E",
                "UTF8",
                "--locale=C",
                "--no-instructions",
            ])
            .stdout(Stdio::null())
            .output()
            .map_err(|e| {
                let _ = std::fs::remove_dir_all(&dir);
                format!("run initdb: {e}")
            })?;
        if !out.status.success() {
            let _ = std::fs::remove_dir_all(&dir);
            return Err(format!(
                "initdb failed: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
        let cluster = Cluster {
            bin,
            dir,
            port: 0,
            pid: Mutex::new(None),
            owner,
            next_db: AtomicU64::new(0),
        };
        let mut cluster = cluster;
        for _ in 0..5 {
            cluster.port = free_port()?;
            match cluster.run() {
                Ok(()) => return Ok(cluster),
                Err(e) if e.contains("in use") => continue,
                Err(e) => return Err(e),
            }
        }
        Err("no free port for PostgreSQL after 5 tries".into())
    }

    /// Start the server (again), and wait until it takes connections.
    pub fn run(&self) -> Result<(), String> {
        let mut pid = self.pid.lock().unwrap_or_else(|p| p.into_inner());
        if pid.is_some() {
            return Ok(());
        }
        let log = self.dir.join("server.log");
        let log_file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log)
            .map_err(|e| format!("open {}: {e}", log.display()))?;
        if let Some((uid, gid)) = self.owner {
            let _ = nix::unistd::chown(&log, Some(uid), Some(gid));
        }
        let mut cmd = Command::new(self.bin.join("postgres"));
        cmd.arg("-D")
            .arg(self.dir.join("data"))
            .args(["-p", &self.port.to_string(), "-k"])
            .arg(&self.dir)
            .args([
                "-c",
                "listen_addresses=127.0.0.1",
                "-c",
                "max_connections=200",
            ])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log_file);
        let owner = self.owner;
        // SAFETY: only async-signal-safe calls between fork and exec.
        unsafe {
            cmd.pre_exec(move || {
                if let Some((uid, gid)) = owner {
                    nix::unistd::setgroups(&[]).map_err(std::io::Error::from)?;
                    nix::unistd::setgid(gid).map_err(std::io::Error::from)?;
                    nix::unistd::setuid(uid).map_err(std::io::Error::from)?;
                }
                // Set after the change of user (which clears it): the server
                // goes when the thread that started it does.
                nix::sys::prctl::set_pdeathsig(Signal::SIGINT).map_err(std::io::Error::from)?;
                Ok(())
            });
        }
        // Started from a thread that lives as long as the process, so the
        // parent-death signal comes only when the process goes.
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let child = cmd.spawn();
            let id = child
                .as_ref()
                .map(|c| c.id() as i32)
                .map_err(|e| e.to_string());
            let _ = tx.send(id);
            if let Ok(mut c) = child {
                let _ = c.wait();
            }
            loop {
                std::thread::park();
            }
        });
        let id = rx
            .recv()
            .map_err(|e| format!("start postgres: {e}"))?
            .map_err(|e| format!("start postgres: {e}"))?;
        *pid = Some(id);
        RUNNING
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push((id, self.dir.clone()));
        drop(pid);
        let until = Instant::now() + Duration::from_secs(60);
        loop {
            let ready = Command::new(self.bin.join("pg_isready"))
                .args(["-h", "127.0.0.1", "-p", &self.port.to_string(), "-q"])
                .status()
                .map(|s| s.success())
                .unwrap_or(false);
            if ready {
                return Ok(());
            }
            let alive = self
                .pid()
                .is_some_and(|p| kill(Pid::from_raw(p), None).is_ok());
            let text = std::fs::read_to_string(&log).unwrap_or_default();
            if !alive || Instant::now() > until {
                *self.pid.lock().unwrap_or_else(|p| p.into_inner()) = None;
                let why = if text.contains("Address already in use") {
                    "port in use".to_string()
                } else {
                    text.lines().rev().take(5).collect::<Vec<_>>().join(" | ")
                };
                return Err(format!("postgres did not start: {why}"));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The server's process ID, while it runs.
    pub fn pid(&self) -> Option<i32> {
        *self.pid.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Stop the server (a fast shutdown: clients are disconnected).
    pub fn stop(&self) {
        let pid = self.pid.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(pid) = pid {
            stop_pid(pid);
            RUNNING
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .retain(|(p, _)| *p != pid);
        }
    }

    /// The port on 127.0.0.1.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The server's log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("server.log")).unwrap_or_default()
    }

    /// A connection string for database `db`.
    pub fn url(&self, db: &str) -> String {
        format!(
            "postgres://{USER}@127.0.0.1:{}/{db}?connect_timeout=5",
            self.port
        )
    }

    /// Create a fresh database (named after `hint`): its URL.
    pub fn create_database(&self, hint: &str) -> Result<String, String> {
        let clean: String = hint
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() {
                    c.to_ascii_lowercase()
                } else {
                    '_'
                }
            })
            .take(40)
            .collect();
        let name = format!(
            "t_{clean}_{}_{}",
            std::process::id(),
            self.next_db.fetch_add(1, Ordering::Relaxed)
        );
        self.psql("postgres", &format!("CREATE DATABASE {name}"))?;
        Ok(self.url(&name))
    }

    /// Run SQL with `psql` against database `db`: its output.
    pub fn psql(&self, db: &str, sql: &str) -> Result<String, String> {
        let out = Command::new(self.bin.join("psql"))
            .args(["-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1"])
            .args([
                "-h",
                "127.0.0.1",
                "-p",
                &self.port.to_string(),
                "-U",
                USER,
                "-d",
                db,
            ])
            .args(["-c", sql])
            .output()
            .map_err(|e| format!("run psql: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "psql {sql:?}: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
    }

    /// The cluster's directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        self.stop();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn as_owner(mut cmd: Command, owner: Option<(Uid, Gid)>) -> Command {
    if let Some((uid, gid)) = owner {
        cmd.uid(uid.as_raw()).gid(gid.as_raw());
    }
    cmd
}

fn free_port() -> Result<u16, String> {
    let l = std::net::TcpListener::bind("127.0.0.1:0").map_err(|e| format!("bind: {e}"))?;
    l.local_addr()
        .map(|a| a.port())
        .map_err(|e| format!("local_addr: {e}"))
}
