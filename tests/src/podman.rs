//! Real containers for the tests: Debian's podman serving the Docker Engine API on a
//! unix socket of the test's own, with an image built here from Debian packages.
//!
//! [`Podman::start`] writes a `containers.conf` and a `storage.conf` in a scratch
//! directory of its own (named to podman by `CONTAINERS_CONF` and
//! `CONTAINERS_STORAGE_CONF`, so nothing of the machine's configuration is changed;
//! podman still reads the read-only `/etc/containers/registries.conf` and
//! `policy.json`, and keeps a blob-info cache in `/var/lib/containers/cache` and
//! netavark's `ipam.db` in `/run/containers/networks`, fixed paths in 4.3), imports
//! the image into that storage and runs `podman system service --time=0
//! unix://<dir>/podman.sock`. Each setting is there because something fails without
//! it on these machines (see [`CONTAINERS_CONF`]). Dropping it stops the service
//! (SIGTERM, then SIGKILL), removes every container of its storage, kills what is
//! left running from it (an exec session's conmon), unmounts what the storage left
//! mounted and removes the directory (kept with `OC_KEEP_PODMAN`).
//!
//! The image ([`Image`]) is `mmdebstrap` of the host's own Debian suite (so a binary
//! built here runs inside when mounted) from the mirror apt already uses, as a
//! tarball cached under `target/oc-podman/` keyed by the mmdebstrap command, then
//! `podman import`ed. No registry is needed.
//!
//! [`api`] is one Docker Engine API request over the socket with hyper's HTTP/1.1
//! client: what the `docker` container provider speaks.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::HANG;

/// The image the tests run, as [`Image::default`] names it.
pub const IMAGE: &str = "localhost/oc-debian:test";

/// The Docker Engine API version the requests name (podman 4.3 serves 1.41).
pub const API_VERSION: &str = "v1.41";

/// The largest answer body [`api`] reads.
pub const MAX_ANSWER_BYTES: usize = 16 * 1024 * 1024;

/// How long the service has to stop after SIGTERM before SIGKILL.
const STOP_GRACE: Duration = Duration::from_secs(20);

/// The `containers.conf` the harness writes (`{dir}` is its scratch directory):
/// - `runtime = "runc"`: Debian's crun fails here (`crun: cgroups in hybrid mode not
///   supported` on the cgroup v1/v2 hybrid, and `setrlimit RLIMIT_NOFILE: Operation
///   not permitted` without CAP_SYS_RESOURCE);
/// - `default_ulimits = []`: otherwise podman, as root, asks the runtime to raise
///   RLIMIT_NOFILE above the hard limit it inherited, which fails without
///   CAP_SYS_RESOURCE (`error setting rlimit type 7: operation not permitted`);
/// - `cgroup_manager = "cgroupfs"` and `events_logger = "file"`: there is no systemd
///   nor journald here (podman falls back with a warning; set, it does not guess);
/// - `lock_type = "file"` under `tmp_dir`: the default SHM locks (`/dev/shm/libpod_lock`)
///   are one segment for every root podman of the machine, and a fresh `tmp_dir`
///   makes podman free all of them on its first start;
/// - `tmp_dir`, `network_config_dir`, `image_copy_tmp_dir`, `events_logfile_path`:
///   the scratch directory, not `/run/libpod`, `/etc/containers/networks`, `/var/tmp`;
/// - `netns = "none"`: a container has no network unless it asks for one.
pub const CONTAINERS_CONF: &str = r#"[containers]
default_ulimits = []
netns = "none"
log_driver = "k8s-file"

[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"
events_logfile_path = "{dir}/events.log"
lock_type = "file"
tmp_dir = "{dir}/tmp"
image_copy_tmp_dir = "{dir}/tmp"

[network]
network_backend = "netavark"
network_config_dir = "{dir}/networks"
"#;

/// The `storage.conf` (`{driver}` is `overlay`, or `vfs` where overlay cannot mount;
/// `OC_PODMAN_DRIVER=vfs|overlay` chooses).
pub const STORAGE_CONF: &str = r#"[storage]
driver = "{driver}"
graphroot = "{dir}/storage"
runroot = "{dir}/run"
"#;

/// An image made with `mmdebstrap` and `podman import`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Image {
    /// Its name in the storage (`localhost/...:tag`: a short name would be looked up
    /// in registries).
    pub name: String,
    /// mmdebstrap's `--variant`.
    pub variant: String,
    /// Packages beyond the variant's (mmdebstrap's `--include`).
    pub include: Vec<String>,
}

impl Default for Image {
    fn default() -> Image {
        Image {
            name: IMAGE.into(),
            variant: "minbase".into(),
            include: Vec::new(),
        }
    }
}

impl Image {
    /// The mmdebstrap command (without its output path): the host's suite from the
    /// mirror apt uses, docs, manuals and translations left out.
    pub fn mmdebstrap_args(&self) -> Vec<String> {
        let (suite, mirror) = host_suite_and_mirror();
        let mut args = vec![
            "--mode=root".to_owned(),
            format!("--variant={}", self.variant),
            "--dpkgopt=path-exclude=/usr/share/doc/*".to_owned(),
            "--dpkgopt=path-exclude=/usr/share/man/*".to_owned(),
            "--dpkgopt=path-exclude=/usr/share/locale/*".to_owned(),
            "--dpkgopt=path-exclude=/usr/share/info/*".to_owned(),
        ];
        if !self.include.is_empty() {
            args.push(format!("--include={}", self.include.join(",")));
        }
        args.push(suite);
        args.push("{tarball}".to_owned());
        args.push(mirror);
        args
    }

    /// The cached tarball for this image, built if it is not there yet (and how long
    /// that took, `None` when cached).
    pub fn tarball(&self) -> Result<(PathBuf, Option<Duration>), String> {
        static BUILDING: Mutex<()> = Mutex::new(());
        let _one = BUILDING.lock().unwrap_or_else(|e| e.into_inner());
        let args = self.mmdebstrap_args();
        let key = {
            use sha2::Digest;
            let digest = sha2::Sha256::digest(args.join("\0").as_bytes());
            digest[..8]
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect::<String>()
        };
        let dir = cache_dir();
        let path = dir.join(format!("debian-{key}.tar"));
        if path.is_file() {
            return Ok((path, None));
        }
        if !on_path("mmdebstrap") {
            return Err("mmdebstrap is missing (Debian's mmdebstrap)".into());
        }
        std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        // mmdebstrap picks the format from the name: keep `.tar` last.
        let part = dir.join(format!("debian-{key}.part-{}.tar", std::process::id()));
        let log = path.with_extension("log");
        let argv: Vec<String> = args
            .iter()
            .map(|a| a.replace("{tarball}", &part.to_string_lossy()))
            .collect();
        let started = Instant::now();
        let out = run_bounded(
            Command::new("mmdebstrap").args(&argv),
            Duration::from_secs(900),
        )?;
        let _ = std::fs::write(&log, &out.1);
        if !out.0 {
            let _ = std::fs::remove_file(&part);
            return Err(format!(
                "mmdebstrap {} failed (no Debian mirror?): {}",
                argv.join(" "),
                tail(&out.1)
            ));
        }
        std::fs::rename(&part, &path).map_err(|e| format!("{}: {e}", path.display()))?;
        Ok((path, Some(started.elapsed())))
    }
}

/// The host's Debian suite (`VERSION_CODENAME`) and the first mirror apt lists for
/// it (`/etc/apt/sources.list`, `/etc/apt/sources.list.d/*`, one-line and deb822);
/// `bookworm` and `http://deb.debian.org/debian` when they say nothing.
pub fn host_suite_and_mirror() -> (String, String) {
    let release = std::fs::read_to_string("/etc/os-release").unwrap_or_default();
    let suite = release
        .lines()
        .find_map(|l| l.strip_prefix("VERSION_CODENAME="))
        .map(|s| s.trim_matches('"').to_owned())
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "bookworm".into());
    let mut files = vec![PathBuf::from("/etc/apt/sources.list")];
    if let Ok(dir) = std::fs::read_dir("/etc/apt/sources.list.d") {
        let mut more: Vec<PathBuf> = dir.flatten().map(|e| e.path()).collect();
        more.sort();
        files.extend(more);
    }
    let mirror = files
        .iter()
        .filter_map(|f| std::fs::read_to_string(f).ok())
        .find_map(|text| mirror_for(&text, &suite))
        .unwrap_or_else(|| "http://deb.debian.org/debian".into());
    (suite, mirror)
}

/// The first `deb` source of `suite` in a sources file (either format).
fn mirror_for(text: &str, suite: &str) -> Option<String> {
    // One-line: `deb [opts] URI SUITE COMPONENTS...`.
    for line in text.lines() {
        let mut words = line.split_whitespace();
        if words.next() != Some("deb") {
            continue;
        }
        let rest: Vec<&str> = words.skip_while(|w| w.starts_with('[')).collect();
        if rest.get(1) == Some(&suite) {
            return rest.first().map(|s| (*s).to_owned());
        }
    }
    // deb822: stanzas separated by blank lines.
    for stanza in text.split("\n\n") {
        let field = |name: &str| {
            stanza
                .lines()
                .find_map(|l| l.strip_prefix(name))
                .map(str::trim)
        };
        let is_deb = field("Types:").is_some_and(|t| t.split_whitespace().any(|t| t == "deb"));
        let has_suite = field("Suites:").is_some_and(|s| s.split_whitespace().any(|s| s == suite));
        if is_deb && has_suite {
            if let Some(uri) = field("URIs:").and_then(|u| u.split_whitespace().next()) {
                return Some(uri.to_owned());
            }
        }
    }
    None
}

/// Where tarballs are cached: `$OC_PODMAN_CACHE`, else `target/oc-podman` of the
/// running test binary (`target/debug/deps/...`), else the temporary directory.
fn cache_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("OC_PODMAN_CACHE") {
        return PathBuf::from(d);
    }
    let target = std::env::current_exe().ok().and_then(|exe| {
        exe.ancestors()
            .find(|a| a.file_name().is_some_and(|n| n == "target"))
            .map(Path::to_path_buf)
    });
    match target {
        Some(t) => t.join("oc-podman"),
        None => std::env::temp_dir().join("oc-podman-cache"),
    }
}

fn on_path(cmd: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|p| std::env::split_paths(&p).any(|d| d.join(cmd).is_file()))
}

fn tail(text: &str) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(8)..].join("\n")
}

/// Run `cmd` to its end or `limit` (then SIGKILL): whether it succeeded, and its
/// output (stdout then stderr).
fn run_bounded(cmd: &mut Command, limit: Duration) -> Result<(bool, String), String> {
    let what = format!("{:?}", cmd.get_program());
    let out_path = std::env::temp_dir().join(format!(
        "oc-podman-run-{}-{:?}.out",
        std::process::id(),
        std::thread::current().id()
    ));
    let out =
        std::fs::File::create(&out_path).map_err(|e| format!("{}: {e}", out_path.display()))?;
    let err = out.try_clone().map_err(|e| e.to_string())?;
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err)
        .spawn()
        .map_err(|e| format!("cannot run {what}: {e}"))?;
    let deadline = Instant::now() + limit;
    let ok = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status.success(),
            Ok(None) if Instant::now() > deadline => {
                let _ = child.kill();
                let _ = child.wait();
                let _ = std::fs::remove_file(&out_path);
                return Err(format!("{what} did not end within {limit:?}"));
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(50)),
            Err(e) => return Err(format!("{what}: {e}")),
        }
    };
    let text = std::fs::read_to_string(&out_path).unwrap_or_default();
    let _ = std::fs::remove_file(&out_path);
    Ok((ok, text))
}

/// A running `podman system service` with a storage of its own.
pub struct Podman {
    dir: PathBuf,
    socket: PathBuf,
    image: String,
    driver: &'static str,
    service: Option<Child>,
    /// How long mmdebstrap took, when this start built the tarball.
    pub built_in: Option<Duration>,
    /// How long `podman import` took.
    pub imported_in: Duration,
}

impl std::fmt::Debug for Podman {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Podman")
            .field("dir", &self.dir)
            .field("driver", &self.driver)
            .finish()
    }
}

impl Podman {
    /// The service in a fresh `<tmp>/oc-podman-<name>-<pid>` (`name` distinct among
    /// the test binary's tests that run at once), with [`Image::default`]
    /// imported. `Err(why)` when it cannot run here (not root, podman, runc or
    /// mmdebstrap missing, no mirror, the service does not answer).
    pub fn start(name: &str) -> Result<Podman, String> {
        Podman::start_with(name, &Image::default())
    }

    /// The same with another image.
    pub fn start_with(name: &str, image: &Image) -> Result<Podman, String> {
        if !nix::unistd::getuid().is_root() {
            return Err("the tests do not run as root (the podman harness runs rootful)".into());
        }
        for (cmd, pkg) in [("podman", "podman"), ("runc", "runc"), ("conmon", "conmon")] {
            if !on_path(cmd) {
                return Err(format!("{cmd} is missing (Debian's {pkg})"));
            }
        }
        // The init of a container made with `HostConfig.Init` (containers.conf's
        // default `init_path`).
        if !Path::new("/usr/libexec/podman/catatonit").exists() {
            return Err("/usr/libexec/podman/catatonit is missing (Debian's catatonit)".into());
        }
        let (tarball, built_in) = image.tarball()?;
        let dir = std::env::temp_dir().join(format!("oc-podman-{name}-{}", std::process::id()));
        cleanup_dir(&dir);
        let mut p = Podman {
            socket: dir.join("podman.sock"),
            dir,
            image: image.name.clone(),
            driver: "overlay",
            service: None,
            built_in,
            imported_in: Duration::ZERO,
        };
        let started = Instant::now();
        let mut imported = Err(String::new());
        // overlay where it mounts (not on an overlayfs), else vfs; or what
        // OC_PODMAN_DRIVER names.
        let forced = std::env::var("OC_PODMAN_DRIVER").ok();
        let drivers: &[&'static str] = match forced.as_deref() {
            Some("vfs") => &["vfs"],
            Some("overlay") => &["overlay"],
            _ => &["overlay", "vfs"],
        };
        for &driver in drivers {
            p.driver = driver;
            p.write_config()?;
            imported = p.import(&tarball);
            if imported.is_ok() {
                break;
            }
            unmount_under(&p.dir);
            let _ = std::fs::remove_dir_all(p.dir.join("storage"));
            let _ = std::fs::remove_dir_all(p.dir.join("run"));
        }
        imported?;
        p.imported_in = started.elapsed();
        p.start_service()?;
        Ok(p)
    }

    fn write_config(&self) -> Result<(), String> {
        for sub in ["tmp", "networks", "storage", "run"] {
            std::fs::create_dir_all(self.dir.join(sub))
                .map_err(|e| format!("{}: {e}", self.dir.display()))?;
        }
        let dir = self.dir.to_string_lossy();
        let write = |name: &str, text: String| {
            std::fs::write(self.dir.join(name), text).map_err(|e| format!("{name}: {e}"))
        };
        write("containers.conf", CONTAINERS_CONF.replace("{dir}", &dir))?;
        write(
            "storage.conf",
            STORAGE_CONF
                .replace("{dir}", &dir)
                .replace("{driver}", self.driver),
        )
    }

    /// `podman` with this storage and configuration (for what the API does not do).
    pub fn command(&self) -> Command {
        let mut cmd = Command::new("podman");
        cmd.env("CONTAINERS_CONF", self.dir.join("containers.conf"))
            .env("CONTAINERS_STORAGE_CONF", self.dir.join("storage.conf"));
        cmd
    }

    fn import(&self, tarball: &Path) -> Result<(), String> {
        let (ok, out) = run_bounded(
            self.command()
                .args([
                    "import",
                    "--change",
                    "CMD [\"/bin/sh\"]",
                    "--change",
                    "ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                ])
                .arg(tarball)
                .arg(&self.image),
            HANG,
        )?;
        if ok {
            Ok(())
        } else {
            Err(format!(
                "podman import ({} storage) failed: {}",
                self.driver,
                tail(&out)
            ))
        }
    }

    /// Start the service (again, after [`Podman::stop_service`]: the containers it
    /// left running are still there, conmon keeps them) and wait until it answers
    /// `/_ping`. Its output is appended to `service.log`.
    pub fn start_service(&mut self) -> Result<(), String> {
        if let Some(c) = self.service.as_mut() {
            if matches!(c.try_wait(), Ok(None)) {
                return Ok(());
            }
        }
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.join("service.log"))
            .map_err(|e| format!("service.log: {e}"))?;
        let err = log.try_clone().map_err(|e| e.to_string())?;
        let child = self
            .command()
            .args(["system", "service", "--time=0"])
            .arg(format!("unix://{}", self.socket.display()))
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(err)
            .spawn()
            .map_err(|e| format!("cannot run podman system service: {e}"))?;
        self.service = Some(child);
        let deadline = Instant::now() + HANG;
        loop {
            if let Ok(a) = api(&self.socket, "GET", "/_ping", None) {
                if a.status == 200 {
                    return Ok(());
                }
            }
            if let Some(c) = self.service.as_mut() {
                if let Ok(Some(status)) = c.try_wait() {
                    self.service = None;
                    return Err(format!(
                        "podman system service ended ({status}): {}",
                        tail(&self.log())
                    ));
                }
            }
            if Instant::now() > deadline {
                return Err(format!(
                    "podman system service did not answer /_ping within {HANG:?}: {}",
                    tail(&self.log())
                ));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The Docker Engine API's socket.
    pub fn socket(&self) -> &Path {
        &self.socket
    }

    /// The scratch directory (configuration, storage, logs).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The image's name.
    pub fn image(&self) -> &str {
        &self.image
    }

    /// The storage driver in use (`overlay` or `vfs`).
    pub fn driver(&self) -> &str {
        self.driver
    }

    /// The service's output so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("service.log")).unwrap_or_default()
    }

    /// One API request on this service's socket ([`api`]).
    pub fn api(&self, method: &str, path: &str, body: Option<&Value>) -> Result<Answer, String> {
        api(&self.socket, method, path, body)
    }

    /// Stop the service (SIGTERM, SIGKILL after a grace), leaving its containers as
    /// they are: what the engine going down looks like to a client. The socket file
    /// stays.
    pub fn stop_service(&mut self) {
        let Some(mut child) = self.service.take() else {
            return;
        };
        if let Ok(pid) = i32::try_from(child.id()) {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGTERM,
            );
        }
        let deadline = Instant::now() + STOP_GRACE;
        loop {
            match child.try_wait() {
                Ok(Some(_)) | Err(_) => return,
                Ok(None) if Instant::now() > deadline => {
                    let _ = child.kill();
                    let _ = child.wait();
                    return;
                }
                Ok(None) => std::thread::sleep(Duration::from_millis(20)),
            }
        }
    }
}

impl Drop for Podman {
    fn drop(&mut self) {
        self.stop_service();
        // Every container of this storage, running or not (conmon outlives the
        // service).
        let _ = run_bounded(
            self.command()
                .args(["rm", "--all", "--force", "--volumes", "--time", "0"]),
            HANG,
        );
        kill_leftovers(&self.dir);
        if std::env::var_os("OC_KEEP_PODMAN").is_none() {
            cleanup_dir(&self.dir);
        }
    }
}

/// SIGKILL what is still running with a path under `dir` on its command line: the
/// conmon of an exec session waits `--exit-delay` (300 s) after the session ends,
/// even once its container is removed.
fn kill_leftovers(dir: &Path) {
    let needle = format!("{}/", dir.display());
    let me = std::process::id();
    let Ok(procs) = std::fs::read_dir("/proc") else {
        return;
    };
    for entry in procs.flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        if u32::try_from(pid).ok() == Some(me) {
            continue;
        }
        let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else {
            continue;
        };
        if String::from_utf8_lossy(&cmdline).contains(&needle) {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
    }
}

/// Unmount what is mounted under `dir` (the overlay driver bind-mounts its home onto
/// itself and leaves it mounted), then remove it.
fn cleanup_dir(dir: &Path) {
    unmount_under(dir);
    let _ = std::fs::remove_dir_all(dir);
}

fn unmount_under(dir: &Path) {
    let info = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    let mut points: Vec<PathBuf> = info
        .lines()
        .filter_map(|l| l.split(' ').nth(4))
        .map(|p| PathBuf::from(unescape_mount(p)))
        .filter(|p| p.starts_with(dir))
        .collect();
    // Deepest first.
    points.sort_by_key(|p| std::cmp::Reverse(p.components().count()));
    for p in points {
        let _ = run_bounded(Command::new("umount").arg("--lazy").arg(&p), HANG);
    }
}

/// mountinfo's octal escapes (`\040` for a space, ...).
fn unescape_mount(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let octal = b
            .get(i + 1..i + 4)
            .and_then(|d| std::str::from_utf8(d).ok())
            .and_then(|d| u8::from_str_radix(d, 8).ok());
        if b[i] == b'\\' {
            if let Some(v) = octal {
                out.push(v);
                i += 4;
                continue;
            }
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// An API answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    /// The status.
    pub status: u16,
    /// The body.
    pub body: Vec<u8>,
}

impl Answer {
    /// The body as JSON.
    pub fn json(&self) -> Result<Value, String> {
        serde_json::from_slice(&self.body)
            .map_err(|e| format!("the answer is not JSON ({e}): {}", self.text()))
    }

    /// The body as text.
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

/// One Docker Engine API request on the unix socket `socket`: `path` is given
/// without the version (`/containers/json?...`) and sent as `/v1.41/...`, except
/// `/_ping`. A JSON body is sent as `application/json`. The answer's body is read
/// up to [`MAX_ANSWER_BYTES`]; the whole exchange is bounded by [`HANG`]. `Err` says
/// what failed, naming the socket: what the provider maps to `sandbox_unavailable`.
pub fn api(
    socket: &Path,
    method: &str,
    path: &str,
    body: Option<&Value>,
) -> Result<Answer, String> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("cannot make a runtime: {e}"))?;
    let full = if path == "/_ping" {
        path.to_owned()
    } else {
        format!("/{API_VERSION}{path}")
    };
    let bytes = match body {
        Some(v) => serde_json::to_vec(v).map_err(|e| e.to_string())?,
        None => Vec::new(),
    };
    let mut req = hyper::Request::builder()
        .method(method)
        .uri(&full)
        // Go's server refuses an HTTP/1.1 request without Host.
        .header("Host", "docker");
    if body.is_some() {
        req = req.header("Content-Type", "application/json");
    }
    let req = req
        .body(http_body_util::Full::new(hyper::body::Bytes::from(bytes)))
        .map_err(|e| format!("bad request {method} {full}: {e}"))?;
    let what = format!("{method} {full} on {}", socket.display());
    rt.block_on(async {
        match tokio::time::timeout(HANG, exchange(socket, req)).await {
            Ok(r) => r.map_err(|e| format!("{what}: {e}")),
            Err(_) => Err(format!("{what}: no answer within {HANG:?}")),
        }
    })
}

async fn exchange(
    socket: &Path,
    req: hyper::Request<http_body_util::Full<hyper::body::Bytes>>,
) -> Result<Answer, String> {
    use http_body_util::BodyExt;
    let stream = tokio::net::UnixStream::connect(socket)
        .await
        .map_err(|e| format!("the engine is unavailable: cannot connect: {e}"))?;
    let (mut sender, conn) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
            .await
            .map_err(|e| format!("the engine is unavailable: {}", chain(&e)))?;
    let driver = tokio::spawn(conn);
    let answer = sender
        .send_request(req)
        .await
        .map_err(|e| format!("the engine is unavailable: {}", chain(&e)))?;
    let status = answer.status().as_u16();
    let body = http_body_util::Limited::new(answer.into_body(), MAX_ANSWER_BYTES)
        .collect()
        .await
        .map_err(|e| {
            format!(
                "reading the answer (at most {MAX_ANSWER_BYTES} bytes): {}",
                chain(&*e)
            )
        })?
        .to_bytes()
        .to_vec();
    driver.abort();
    Ok(Answer { status, body })
}

/// An error and its sources, `: `-separated (hyper's own message is terse).
fn chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut out = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        out.push_str(": ");
        out.push_str(&s.to_string());
        source = s.source();
    }
    out
}

/// A test that needs podman and cannot have it: skips saying `why`, or fails under
/// `OC_REQUIRE_PEERS` (`.ci/run` installs what it needs).
pub fn skip(why: &str) {
    assert!(
        !crate::github::required(),
        "{why}, and OC_REQUIRE_PEERS is set (.ci/run installs Debian's podman, runc and mmdebstrap)"
    );
    eprintln!("SKIPPED: {why} (Debian's podman, runc and mmdebstrap; .ci/run installs them)");
}

/// Percent-encodes a query value.
pub fn enc(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// `/proc/PID/ns/WHICH`'s link (`pid` may be `self`).
pub fn ns(pid: &str, which: &str) -> String {
    std::fs::read_link(format!("/proc/{pid}/ns/{which}"))
        .map(|l| l.to_string_lossy().into_owned())
        .unwrap_or_default()
}

impl Podman {
    /// The engine's containers carrying `label` (`key=value` or a bare key),
    /// stopped ones too; panics when the engine does not answer (a test helper).
    pub fn labelled(&self, label: &str) -> Vec<Value> {
        let filters = serde_json::json!({ "label": [label] }).to_string();
        let path = format!("/containers/json?all=true&filters={}", enc(&filters));
        match self.api("GET", &path, None) {
            Ok(a) if a.status == 200 => a
                .json()
                .ok()
                .and_then(|v| v.as_array().cloned())
                .unwrap_or_default(),
            Ok(a) => panic!("GET {path}: {} {}", a.status, a.text()),
            Err(e) => panic!("GET {path}: {e}"),
        }
    }
}
