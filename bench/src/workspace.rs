//! `bench workspace`: a workspace for a new Work from the git provider's warm cache,
//! against `git clone --local` of the same repository, in the same run.
//!
//! The repository (made in a temporary directory with `git fast-import`: `FILES`
//! small text files in `DIRS` directories, one commit) is a bare one on a local path.
//! The provider is the real one (`oc_git::main`, this binary re-executed as
//! `__git-provider`), spoken to over its stdin and stdout as the host does:
//! `initialize` with `resource_dirs.git`, one warm-up `provider.acquire` (which makes
//! the bare cache), then `ROUNDS` acquisitions for new owners in mode `work`. Each
//! round also times `git clone --local` of the repository into a fresh directory and
//! a bare `git worktree add` from the provider's cache (the checkout alone: what an
//! acquisition costs without anything else the provider does); the three alternate
//! so a change of load on the machine falls on all of them. The provider keeps a
//! spare worktree (config `spares`, default 1) that an acquisition takes; after each
//! acquisition the bench waits for the provider to make the next spare (timed as
//! `spare_refill_ms`) before it times the others, so the background checkout never
//! overlaps a timed one.
//!
//! On a file system that has just deleted many files (the previous run's scratch
//! directory), creating files can be much slower for a few minutes (ext4 without a
//! journal skips recently freed inodes one by one): wait five minutes between runs.

use crate::{idle, loadavg, machine, millis, percentile, Res};
use protocol::{connect, FnHandler, Options, Peer, Request, RpcError};
use serde_json::{json, Value};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The argument that makes this binary the git provider.
pub const AS_GIT_PROVIDER: &str = "__git-provider";

/// Files in the repository.
const FILES: usize = 10_000;
/// Directories they are spread over.
const DIRS: usize = 100;
/// Timed acquisitions (and clones, and bare worktree adds).
const ROUNDS: usize = 10;
/// The bound on one call to the provider.
const CALL_BOUND: Duration = Duration::from_secs(300);

/// Keeps the user's and the system's git config out of every git here, the
/// provider's included.
const ISOLATE: [(&str, &str); 2] = [
    ("GIT_CONFIG_GLOBAL", "/dev/null"),
    ("GIT_CONFIG_NOSYSTEM", "1"),
];

fn progress(what: &str) {
    eprintln!("bench workspace: {what}");
}

/// The temporary directory, removed when dropped.
struct Scratch(PathBuf);

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn path_str(p: &Path) -> Res<&str> {
    p.to_str()
        .ok_or_else(|| format!("{} is not UTF-8", p.display()).into())
}

/// `git <args>` in `dir`, which must succeed; answers stdout.
fn git(dir: &Path, args: &[&str]) -> Res<String> {
    let out = Command::new("git")
        .args(args)
        .current_dir(dir)
        .envs(ISOLATE)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("cannot run git: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "git {args:?} in {}: {}",
            dir.display(),
            String::from_utf8_lossy(&out.stderr).trim()
        )
        .into());
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// The fast-import stream of the repository: one blob per file, one commit on `main`.
fn stream() -> Vec<u8> {
    let mut out = Vec::with_capacity(FILES * 200);
    for i in 0..FILES {
        let text = format!(
            "file {i} of the workspace benchmark\ndirectory {}\n{}\n",
            i % DIRS,
            "some text to give the file a little body. ".repeat(1 + i % 4)
        );
        out.extend_from_slice(format!("blob\nmark :{}\ndata {}\n", i + 1, text.len()).as_bytes());
        out.extend_from_slice(text.as_bytes());
        out.push(b'\n');
    }
    out.extend_from_slice(
        b"commit refs/heads/main\ncommitter bench <bench@example.com> 1700000000 +0000\ndata 18\none commit, all in\n",
    );
    for i in 0..FILES {
        out.extend_from_slice(format!("M 100644 :{} {}\n", i + 1, file_path(i)).as_bytes());
    }
    out.extend_from_slice(b"\ndone\n");
    out
}

fn file_path(i: usize) -> String {
    format!("d{:03}/f{i:05}.txt", i % DIRS)
}

/// Makes `<dir>/origin.git`, bare, with `FILES` files in one commit on `main`.
fn make_repository(dir: &Path) -> Res<PathBuf> {
    let origin = dir.join("origin.git");
    git(
        dir,
        &["init", "-q", "--bare", "-b", "main", path_str(&origin)?],
    )?;
    let mut child = Command::new("git")
        .args(["fast-import", "--quiet", "--done"])
        .current_dir(&origin)
        .envs(ISOLATE)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .map_err(|e| format!("cannot run git fast-import: {e}"))?;
    {
        let mut stdin = child.stdin.take().ok_or("no stdin")?;
        stdin.write_all(&stream())?;
    }
    if !child.wait()?.success() {
        return Err("git fast-import failed".into());
    }
    let listed = git(&origin, &["ls-tree", "-r", "--name-only", "main"])?;
    let files = listed.lines().count();
    if files != FILES {
        return Err(format!("the repository has {files} files, not {FILES}").into());
    }
    Ok(origin)
}

/// The provider, a child process spoken to over its stdio.
struct Provider {
    child: tokio::process::Child,
    peer: Peer,
}

impl Provider {
    async fn start(exe: &Path, dir: &Path) -> Res<Provider> {
        let mut child = tokio::process::Command::new(exe)
            .arg(AS_GIT_PROVIDER)
            .current_dir(dir)
            .envs(ISOLATE)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()?;
        let stdin = child.stdin.take().ok_or("no stdin")?;
        let stdout = child.stdout.take().ok_or("no stdout")?;
        // The host's side: acquisitions call nothing back.
        let handler = FnHandler(|request: Request| {
            let method = request.method.clone();
            async move { Err::<Value, _>(RpcError::method_not_found(&method)) }
        });
        let peer = connect(stdout, stdin, handler, Options::named("git provider"));
        let provider = Provider { child, peer };
        provider
            .call(
                "initialize",
                json!({
                    "protocol_versions": protocol::version::PROTOCOL_VERSIONS,
                    "host": {"name": "bench", "version": "0"},
                    "state_dir": path_str(&dir.join("state"))?,
                    "resource_dirs": {"git": path_str(&dir.join("resources").join("git"))?},
                }),
            )
            .await?;
        Ok(provider)
    }

    async fn call(&self, method: &str, params: Value) -> Res<Value> {
        let answer = tokio::time::timeout(CALL_BOUND, self.peer.call(method, &params))
            .await
            .map_err(|_| format!("{method}: no answer in {} s", CALL_BOUND.as_secs()))?;
        Ok(answer.map_err(|e| format!("{method}: {e}"))?)
    }

    /// Acquires a `work` workspace for `owner`; answers its directory, checked whole.
    async fn acquire(&self, origin: &Path, owner: &str) -> Res<PathBuf> {
        let answer = self
            .call(
                "provider.acquire",
                json!({"type": "git", "owner": owner, "mode": "work",
                       "config": {"repository": path_str(origin)?},
                       "scope_id": "bench", "binding": "agent"}),
            )
            .await?;
        let dir = PathBuf::from(answer["dir"].as_str().ok_or("the answer names no dir")?);
        check_checkout(&dir)?;
        Ok(dir)
    }

    async fn stop(mut self) {
        self.peer.close("benchmark done");
        let _ = tokio::time::timeout(Duration::from_secs(10), self.child.wait()).await;
    }
}

/// The last file of the repository is in `dir`.
fn check_checkout(dir: &Path) -> Res<()> {
    let last = dir.join(file_path(FILES - 1));
    if !last.is_file() {
        return Err(format!("{} is missing: not a whole checkout", last.display()).into());
    }
    Ok(())
}

/// The provider's bare cache (the only one under its resource directory).
fn cache_of(dir: &Path) -> Res<PathBuf> {
    let caches = dir.join("resources").join("git").join("cache");
    std::fs::read_dir(&caches)?
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .find(|p| p.extension().is_some_and(|x| x == "git"))
        .ok_or_else(|| format!("no cache under {}", caches.display()).into())
}

/// Waits until the provider has a whole spare worktree again (its record says
/// `ready`), answering how long that took.
async fn spare_ready(dir: &Path) -> Res<Duration> {
    let spares = dir.join("resources").join("git").join("spare");
    let t = Instant::now();
    loop {
        let whole = std::fs::read_dir(&spares)
            .into_iter()
            .flatten()
            .flatten()
            .flat_map(|k| std::fs::read_dir(k.path()).into_iter().flatten().flatten())
            .filter(|e| e.path().extension().is_some_and(|x| x == "json"))
            .filter_map(|e| std::fs::read_to_string(e.path()).ok())
            .any(|text| text.contains("\"ready\""));
        if whole {
            return Ok(t.elapsed());
        }
        if t.elapsed() > CALL_BOUND {
            return Err(format!(
                "no spare worktree under {} within {} s",
                spares.display(),
                CALL_BOUND.as_secs()
            )
            .into());
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Runs `f` and answers how long it took.
fn timed<T>(f: impl FnOnce() -> Res<T>) -> Res<Duration> {
    let t = Instant::now();
    f()?;
    Ok(t.elapsed())
}

struct Figures {
    first_acquire: Duration,
    acquire: Vec<Duration>,
    refill: Vec<Duration>,
    worktree_add: Vec<Duration>,
    clone: Vec<Duration>,
    pack_bytes: u64,
}

async fn measure(exe: &Path, dir: &Path) -> Res<Figures> {
    progress(&format!(
        "making a repository of {FILES} files in {DIRS} directories"
    ));
    let origin = make_repository(dir)?;
    let pack_bytes = dir_bytes(&origin.join("objects").join("pack"));

    progress("starting the provider; warm-up acquisition (makes the cache)");
    let provider = Provider::start(exe, dir).await?;
    let t = Instant::now();
    provider.acquire(&origin, "warm-up").await?;
    let first_acquire = t.elapsed();
    let cache = cache_of(dir)?;
    spare_ready(dir).await?;

    let clones = dir.join("clones");
    let floors = dir.join("floor");
    std::fs::create_dir_all(&clones)?;
    std::fs::create_dir_all(&floors)?;
    let (mut acquire, mut worktree_add, mut clone) = (Vec::new(), Vec::new(), Vec::new());
    let mut refill = Vec::new();
    for i in 0..ROUNDS {
        progress(&format!("round {} of {ROUNDS}", i + 1));
        let t = Instant::now();
        provider.acquire(&origin, &format!("work-{i}")).await?;
        acquire.push(t.elapsed());
        // The provider tops its spare worktrees up in the background: that checkout
        // is timed on its own and kept off the clone's and the worktree add's time.
        refill.push(spare_ready(dir).await?);

        let target = floors.join(format!("w{i}"));
        worktree_add.push(timed(|| {
            git(
                &cache,
                &[
                    "worktree",
                    "add",
                    "-q",
                    "--no-track",
                    "-b",
                    &format!("floor-{i}"),
                    path_str(&target)?,
                    "origin/main",
                ],
            )
        })?);
        check_checkout(&target)?;

        let target = clones.join(format!("c{i}"));
        clone.push(timed(|| {
            git(
                dir,
                &[
                    "clone",
                    "-q",
                    "--local",
                    path_str(&origin)?,
                    path_str(&target)?,
                ],
            )
        })?);
        check_checkout(&target)?;
    }
    provider.stop().await;
    Ok(Figures {
        first_acquire,
        acquire,
        refill,
        worktree_add,
        clone,
        pack_bytes,
    })
}

fn dir_bytes(dir: &Path) -> u64 {
    std::fs::read_dir(dir)
        .map(|rd| {
            rd.filter_map(|e| e.ok())
                .filter_map(|e| e.metadata().ok())
                .map(|m| m.len())
                .sum()
        })
        .unwrap_or(0)
}

/// `{p50, min, max}` in milliseconds.
fn spread(samples: &[Duration]) -> (f64, f64, f64) {
    let mut s = samples.to_vec();
    let p50 = millis(percentile(&mut s, 50.0));
    let min = s.first().copied().map_or(0.0, millis);
    let max = s.last().copied().map_or(0.0, millis);
    (p50, min, max)
}

fn spread_json(samples: &[Duration]) -> Value {
    let (p50, min, max) = spread(samples);
    json!({"p50": p50, "min": min, "max": max})
}

pub fn run(as_json: bool) -> Res<()> {
    let exe = std::env::current_exe()?;
    let load_start = loadavg();
    let scratch =
        Scratch(std::env::temp_dir().join(format!("oc-bench-workspace-{}", std::process::id())));
    let _ = std::fs::remove_dir_all(&scratch.0);
    std::fs::create_dir_all(&scratch.0)?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let f = rt.block_on(measure(&exe, &scratch.0))?;
    let load_end = loadavg();
    progress("removing the scratch directory");
    drop(scratch);

    let idle = idle(load_start, load_end);
    let (acq, clone) = (spread(&f.acquire), spread(&f.clone));
    let ratio = if acq.0 > 0.0 { clone.0 / acq.0 } else { 0.0 };
    if as_json {
        let v = json!({
            "machine": machine(),
            "files": FILES,
            "directories": DIRS,
            "rounds": ROUNDS,
            "pack_bytes": f.pack_bytes,
            "first_acquire_ms": millis(f.first_acquire),
            "acquire_ms": spread_json(&f.acquire),
            "spare_refill_ms": spread_json(&f.refill),
            "worktree_add_ms": spread_json(&f.worktree_add),
            "clone_ms": spread_json(&f.clone),
            "ratio": ratio,
            "load_start": load_start,
            "load_end": load_end,
            "idle": idle,
        });
        println!("{}", serde_json::to_string_pretty(&v)?);
        return Ok(());
    }
    println!("machine: {}", machine());
    println!(
        "repository: {FILES} files in {DIRS} directories, one commit, pack {:.1} MiB",
        f.pack_bytes as f64 / (1024.0 * 1024.0)
    );
    println!(
        "load average (1, 5, 15 min): {:?} at start, {:?} at end: {}",
        load_start,
        load_end,
        if idle { "idle" } else { "NOT idle" }
    );
    println!();
    println!("| figure ({ROUNDS} each) | p50 | min | max |");
    println!("| --- | --- | --- | --- |");
    let row = |name: &str, samples: &[Duration]| {
        let (p50, min, max) = spread(samples);
        println!("| {name} | {p50:.0} ms | {min:.0} ms | {max:.0} ms |");
    };
    row("provider.acquire, mode work, warm cache", &f.acquire);
    row(
        "topping the spare worktree up after it (in the background)",
        &f.refill,
    );
    row(
        "git worktree add from the same cache (the checkout alone)",
        &f.worktree_add,
    );
    row("git clone --local", &f.clone);
    println!();
    println!(
        "first acquisition (makes the cache): {:.0} ms",
        millis(f.first_acquire)
    );
    println!("clone p50 / acquire p50: {ratio:.2} (the aim: at least 5)");
    Ok(())
}
