//! Benchmarks that print the tables kept in `docs/benchmarks.md`.
//!
//! `bench intake [--json]`: signed webhook deliveries accepted durably by the whole
//! suite (see `intake.rs`), next to Debian's `webhook` where it is installed.
//!
//! `bench dispatch [--json]`: from a delivery's 2xx answer to its `shell` job's
//! process started, p50 and p99 at 10 and at 200 deliveries a second (see
//! `dispatch.rs`).
//!
//! `bench web [--json]`: webd's reads (requests a second, p50 and p99 of the Works
//! list, one Work and the Works page, with 1 and 8 clients, over 1,000 Works) and its
//! live streams (the `changed` events a burst of 100 deliveries makes on 8 open
//! streams), against the whole suite (see `web.rs`).
//!
//! `bench workspace [--json]`: a git workspace for a new Work from the git
//! provider's warm cache against `git clone --local` of the same 10,000-file
//! repository (see `workspace.rs`).
//!
//! `bench transport [--json]`: the spec's transport table for this implementation
//! on this machine, over a real child process (this same binary, re-executed as the
//! scenario extension), with a raw-pipe round trip measured in the same run as the
//! floor and each latency as a ratio to it. `OC_BENCH_ONLY=echo` measures only the
//! floor and the echo (with the load averages), a few seconds a run.

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

use oc_scenario::host::{spawn, HostEvent, Running};
use protocol::{CallOptions, CancelToken};
use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The argument that makes this binary the scenario extension.
const AS_EXTENSION: &str = "__scenario-extension";

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if let Some(status) = oc_systest::dispatch(&args) {
        std::process::exit(status);
    }
    match args.first().map(String::as_str) {
        Some(AS_EXTENSION) => std::process::exit(oc_scenario::main_entry(&args[1..])),
        Some(bus::AS_BROKER) => std::process::exit(broker::cli::main(
            std::iter::once("open-conduit-broker".to_string()).chain(args[1..].iter().cloned()),
        )),
        Some(bus::AS_PROBE) => std::process::exit(broker::probe::main(&args[1..])),
        Some(bus::AS_UNIX_ECHO) => std::process::exit(bus::unix_echo(&args[1..])),
        Some(workspace::AS_GIT_PROVIDER) => std::process::exit(oc_git::main()),
        Some(store::AS_STORAGED) => std::process::exit(storaged::cli::main(
            std::iter::once("open-conduit-storaged".to_string()).chain(args[1..].iter().cloned()),
        )),
        _ => {}
    }
    match args.first().map(String::as_str) {
        Some("store") => {
            let json = args.iter().any(|a| a == "--json");
            let backend = args
                .iter()
                .position(|a| a == "--backend")
                .and_then(|i| args.get(i + 1))
                .map_or("sqlite", String::as_str);
            if let Err(e) = store::run(json, backend) {
                eprintln!("bench store: {e}");
                std::process::exit(1);
            }
        }
        Some("bus") => {
            let json = args.iter().any(|a| a == "--json");
            if let Err(e) = bus::run(json) {
                eprintln!("bench bus: {e}");
                std::process::exit(1);
            }
        }
        Some("intake") => {
            let json = args.iter().any(|a| a == "--json");
            if let Err(e) = intake::run(json) {
                eprintln!("bench intake: {e}");
                std::process::exit(1);
            }
        }
        Some("dispatch") => {
            let json = args.iter().any(|a| a == "--json");
            if let Err(e) = dispatch::run(json) {
                eprintln!("bench dispatch: {e}");
                std::process::exit(1);
            }
        }
        Some("web") => {
            let json = args.iter().any(|a| a == "--json");
            if let Err(e) = web::run(json) {
                eprintln!("bench web: {e}");
                std::process::exit(1);
            }
        }
        Some("workspace") => {
            let json = args.iter().any(|a| a == "--json");
            if let Err(e) = workspace::run(json) {
                eprintln!("bench workspace: {e}");
                std::process::exit(1);
            }
        }
        Some("transport") => {
            let json = args.iter().any(|a| a == "--json");
            if let Err(e) = transport(json) {
                eprintln!("bench transport: {e}");
                std::process::exit(1);
            }
        }
        _ => {
            eprintln!("usage: bench transport|bus|store [--backend sqlite|postgres]|intake|dispatch|web|workspace [--json]");
            std::process::exit(2);
        }
    }
}

mod bus;
mod dispatch;
mod hookpost;
mod intake;
mod store;
mod syscalls;
mod web;
mod webclient;
mod workspace;

type Res<T> = Result<T, Box<dyn std::error::Error>>;

pub(crate) fn micros(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

fn millis(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

pub(crate) fn percentile(samples: &mut [Duration], p: f64) -> Duration {
    samples.sort();
    if samples.is_empty() {
        return Duration::ZERO;
    }
    let rank = ((p / 100.0) * samples.len() as f64).ceil() as usize;
    samples[rank.clamp(1, samples.len()) - 1]
}

pub(crate) fn median(samples: &mut [Duration]) -> Duration {
    percentile(samples, 50.0)
}

fn progress(what: &str) {
    eprintln!("bench transport: {what}");
}

/// A raw pipe round trip: a line to a child that writes it back, no protocol.
fn pipe_floor(exe: &Path) -> Res<Duration> {
    let mut child = Command::new(exe)
        .args([AS_EXTENSION, oc_scenario::PIPE_ECHO_ARG])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()?;
    let mut stdin = child.stdin.take().ok_or("no stdin")?;
    let mut stdout = BufReader::new(child.stdout.take().ok_or("no stdout")?);
    let mut line = String::new();
    let mut samples = Vec::with_capacity(5000);
    for i in 0..5200 {
        let t = Instant::now();
        stdin.write_all(b"{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":1}\n")?;
        stdin.flush()?;
        line.clear();
        stdout.read_line(&mut line)?;
        if i >= 200 {
            samples.push(t.elapsed());
        }
    }
    drop(stdin);
    let _ = child.wait();
    Ok(median(&mut samples))
}

async fn start(exe: &Path) -> Res<(Running, Duration)> {
    let t = Instant::now();
    let ext = spawn(exe, &[AS_EXTENSION])?;
    ext.initialize(protocol::version::PROTOCOL_VERSIONS).await?;
    Ok((ext, t.elapsed()))
}

async fn stop(ext: Running) {
    ext.peer.close("benchmark done");
    let mut child = ext.child;
    let _ = tokio::time::timeout(Duration::from_secs(5), child.wait()).await;
}

struct Figures {
    floor: Duration,
    cold_start: Duration,
    warm_restart: Duration,
    version_mismatch: Duration,
    echo_p50: Duration,
    echo_p99: Duration,
    callback: Duration,
    artifact_mib_s: f64,
    artifact_chunk: Duration,
    cancel: Duration,
    crash: Duration,
    binary_bytes: u64,
    deps: Option<usize>,
}

/// Only the artifact upload, `rounds` times (for profiling: `OC_BENCH_ONLY=artifact`).
async fn artifact_only(exe: &Path, rounds: u32) -> Res<()> {
    let (ext, _) = start(exe).await?;
    let t = Instant::now();
    for _ in 0..rounds {
        ext.peer
            .call("scenario.upload", &json!({ "bytes": 16 << 20 }))
            .await?;
    }
    let mib_s = 16.0 * f64::from(rounds) / t.elapsed().as_secs_f64();
    println!("artifact: {mib_s:.0} MiB/s over {rounds} uploads");
    stop(ext).await;
    Ok(())
}

/// The extension echo round trips of one run.
async fn echoes(ext: &Running) -> Res<Vec<Duration>> {
    let mut echoes = Vec::with_capacity(10_000);
    for i in 0..10_500u32 {
        let t = Instant::now();
        ext.peer.call("scenario.echo", &json!(i)).await?;
        if i >= 500 {
            echoes.push(t.elapsed());
        }
    }
    Ok(echoes)
}

/// Only the raw pipe floor and the echo, in that order (`OC_BENCH_ONLY=echo`), with
/// the load averages at the start and the end.
async fn echo_only(exe: &Path, as_json: bool) -> Res<()> {
    let load_start = loadavg();
    let floor = pipe_floor(exe)?;
    let (ext, _) = start(exe).await?;
    let mut samples = echoes(&ext).await?;
    stop(ext).await;
    let load_end = loadavg();
    let p50 = percentile(&mut samples, 50.0);
    let p99 = percentile(&mut samples, 99.0);
    if as_json {
        println!(
            "{}",
            json!({
                "machine": machine(),
                "floor_pipe_rtt_us": micros(floor),
                "echo_p50_us": micros(p50),
                "echo_p99_us": micros(p99),
                "ratio_to_floor": {"echo_p50": micros(p50) / micros(floor)},
                "loadavg_start": load_start,
                "loadavg_end": load_end,
                "idle": idle(load_start, load_end),
            })
        );
    } else {
        println!(
            "floor {:.1} µs, echo p50 {:.1} µs ({:.1}×), p99 {:.1} µs, load {:.2} → {:.2}",
            micros(floor),
            micros(p50),
            micros(p50) / micros(floor),
            micros(p99),
            load_start[0],
            load_end[0]
        );
    }
    Ok(())
}

async fn measure(exe: &Path) -> Res<Figures> {
    progress("raw pipe floor");
    let floor = pipe_floor(exe)?;

    progress("cold start");
    let (ext, cold_start) = start(exe).await?;
    stop(ext).await;

    progress("warm restart");
    let mut restarts = Vec::new();
    for _ in 0..10 {
        let (ext, t) = start(exe).await?;
        restarts.push(t);
        stop(ext).await;
    }

    progress("version mismatch");
    let mut mismatches = Vec::new();
    for _ in 0..10 {
        let t = Instant::now();
        let ext = spawn(exe, &[AS_EXTENSION])?;
        let refused = ext.initialize(&[999]).await;
        let elapsed = t.elapsed();
        match refused {
            Err(e) if e.is(protocol::Code::UnsupportedProtocolVersion) => {}
            other => return Err(format!("version mismatch not refused: {other:?}").into()),
        }
        mismatches.push(elapsed);
        stop(ext).await;
    }

    let (mut ext, _) = start(exe).await?;

    progress("echo");
    let mut echoes = echoes(&ext).await?;

    progress("host callbacks");
    let n = 5000u64;
    let t = Instant::now();
    ext.peer
        .call("scenario.callbacks", &json!({ "n": n }))
        .await?;
    let callback = t.elapsed() / n as u32;

    progress("artifact 16 MiB in 256 KiB chunks");
    let mut uploads = Vec::new();
    for _ in 0..5 {
        let t = Instant::now();
        let v = ext
            .peer
            .call("scenario.upload", &json!({ "bytes": 16 << 20 }))
            .await?;
        uploads.push(t.elapsed());
        if v["chunks"] != 64 {
            return Err(format!("upload answered {v}").into());
        }
    }
    let upload = median(&mut uploads);
    let artifact_mib_s = 16.0 / upload.as_secs_f64();
    let artifact_chunk = upload / 64;
    while ext.events.try_recv().is_ok() {}

    progress("cancellation");
    let mut cancels = Vec::new();
    for i in 0..50 {
        let token = CancelToken::new();
        let opts = CallOptions {
            cancel: Some(token.clone()),
            ..Default::default()
        };
        let peer = ext.peer.clone();
        let call = tokio::spawn(async move {
            peer.call_with("scenario.wait_cancel", &json!(i), opts)
                .await
        });
        ext.peer.call("scenario.echo", &Value::Null).await?;
        let t = Instant::now();
        token.cancel();
        loop {
            match ext.events.recv().await {
                Some(HostEvent::CancelSeen(v)) if v == json!(i) => break,
                Some(_) => continue,
                None => return Err("event stream ended".into()),
            }
        }
        cancels.push(t.elapsed());
        let _ = call.await;
    }
    stop(ext).await;

    progress("crash detection");
    let mut crashes = Vec::new();
    for _ in 0..10 {
        let (ext, _) = start(exe).await?;
        let t = Instant::now();
        ext.kill_group();
        ext.peer.closed().await;
        crashes.push(t.elapsed());
        let mut child = ext.child;
        let _ = child.wait().await;
    }

    Ok(Figures {
        floor,
        cold_start,
        warm_restart: median(&mut restarts),
        version_mismatch: median(&mut mismatches),
        echo_p50: percentile(&mut echoes, 50.0),
        echo_p99: percentile(&mut echoes, 99.0),
        callback,
        artifact_mib_s,
        artifact_chunk,
        cancel: median(&mut cancels),
        crash: median(&mut crashes),
        binary_bytes: std::fs::metadata(exe)?.len(),
        deps: dependency_count(),
    })
}

/// The crates.io packages the extension side links (the SDK and protocol's
/// dependencies), from `cargo tree`; `None` when cargo is not at hand.
fn dependency_count() -> Option<usize> {
    let out = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
        .args([
            "tree",
            "-p",
            "oc-scenario",
            "-e",
            "normal",
            "--prefix",
            "none",
            "--offline",
        ])
        .stderr(Stdio::null())
        .output()
        .ok()?;
    if !out.status.success() {
        return None;
    }
    let text = String::from_utf8_lossy(&out.stdout);
    let mut names: Vec<&str> = text
        .lines()
        .filter(|l| !l.contains("(/") && !l.trim().is_empty())
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    names.sort();
    names.dedup();
    Some(names.len())
}

pub(crate) fn machine() -> String {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|m| m.trim().to_string())
        })
        .unwrap_or_else(|| "unknown CPU".into());
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| s.trim().to_string())
        .unwrap_or_default();
    format!("{cores} cores, {cpu}, Linux {kernel}")
}

/// The 1, 5 and 15-minute load averages (`/proc/loadavg`), zeros when unreadable.
pub(crate) fn loadavg() -> [f64; 3] {
    let text = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let mut out = [0.0; 3];
    for (slot, field) in out.iter_mut().zip(text.split_whitespace()) {
        *slot = field.parse().unwrap_or(0.0);
    }
    out
}

/// Whether the machine was idle for a run, from the load averages at its start and
/// end: nothing else busy at the start (1-minute load under half the cores) and at
/// the end no more than the bench's own one busy process added (under half the
/// cores plus one).
pub(crate) fn idle(start: [f64; 3], end: [f64; 3]) -> bool {
    let half = std::thread::available_parallelism().map_or(1, |n| n.get()) as f64 / 2.0;
    start[0] < half && end[0] < half + 1.0
}

/// The load averages around one run and whether the machine was idle for it
/// ([`idle`]). Every bench prints it, so a latency is never read from the busy mode
/// (or the idle one) by mistake.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Load {
    pub start: [f64; 3],
    pub end: [f64; 3],
}

impl Load {
    /// The load averages now, with those taken at the run's start.
    pub(crate) fn since(start: [f64; 3]) -> Load {
        Load {
            start,
            end: loadavg(),
        }
    }

    pub(crate) fn idle(&self) -> bool {
        idle(self.start, self.end)
    }

    /// Adds `loadavg_start`, `loadavg_end` and `idle` to a JSON object.
    pub(crate) fn add_to(&self, out: &mut Value) {
        if let Some(out) = out.as_object_mut() {
            out.insert("loadavg_start".into(), json!(self.start));
            out.insert("loadavg_end".into(), json!(self.end));
            out.insert("idle".into(), json!(self.idle()));
        }
    }

    /// One line for the human-readable table.
    pub(crate) fn line(&self) -> String {
        let state = if self.idle() {
            "idle"
        } else {
            "NOT idle (other work ran on these cores: latencies are from the busy mode)"
        };
        format!(
            "machine {state}: 1-minute load {:.2} at the start, {:.2} at the end",
            self.start[0], self.end[0]
        )
    }
}

fn transport(as_json: bool) -> Res<()> {
    let load_start = loadavg();
    let exe: PathBuf = std::env::current_exe()?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    match std::env::var("OC_BENCH_ONLY").as_deref() {
        Ok("artifact") => return rt.block_on(artifact_only(&exe, 20)),
        Ok("echo") => return rt.block_on(echo_only(&exe, as_json)),
        _ => {}
    }
    let f = rt.block_on(measure(&exe))?;
    let load = Load::since(load_start);
    let ratio = |d: Duration| micros(d) / micros(f.floor);
    if as_json {
        let mut v = json!({
            "machine": machine(),
            "floor_pipe_rtt_us": micros(f.floor),
            "cold_start_ms": millis(f.cold_start),
            "warm_restart_ms": millis(f.warm_restart),
            "version_mismatch_ms": millis(f.version_mismatch),
            "echo_p50_us": micros(f.echo_p50),
            "echo_p99_us": micros(f.echo_p99),
            "callback_us": micros(f.callback),
            "artifact_mib_s": f.artifact_mib_s,
            "cancel_us": micros(f.cancel),
            "crash_detect_ms": millis(f.crash),
            "binary_bytes": f.binary_bytes,
            "dependency_count": f.deps,
            "ratio_to_floor": {
                "echo_p50": ratio(f.echo_p50),
                "echo_p99": ratio(f.echo_p99),
                "callback": ratio(f.callback),
                "artifact_chunk": ratio(f.artifact_chunk),
                "cancel": ratio(f.cancel),
                "crash_detect": ratio(f.crash),
                "cold_start": ratio(f.cold_start),
                "warm_restart": ratio(f.warm_restart),
                "version_mismatch": ratio(f.version_mismatch),
            },
        });
        load.add_to(&mut v);
        println!("{v}");
        return Ok(());
    }
    println!("Transport: JSON-RPC 2.0 over stdio ({})", machine());
    println!("{}", load.line());
    println!();
    println!("| figure | value | × raw pipe round trip |");
    println!("| --- | --- | --- |");
    println!(
        "| raw pipe round trip (floor) | {:.1} µs | 1.0 |",
        micros(f.floor)
    );
    let rows: [(&str, String, Option<Duration>); 12] = [
        (
            "cold start",
            format!("{:.2} ms", millis(f.cold_start)),
            Some(f.cold_start),
        ),
        (
            "warm restart",
            format!("{:.2} ms", millis(f.warm_restart)),
            Some(f.warm_restart),
        ),
        (
            "version mismatch",
            format!("{:.2} ms", millis(f.version_mismatch)),
            Some(f.version_mismatch),
        ),
        (
            "echo p50",
            format!("{:.1} µs", micros(f.echo_p50)),
            Some(f.echo_p50),
        ),
        (
            "echo p99",
            format!("{:.1} µs", micros(f.echo_p99)),
            Some(f.echo_p99),
        ),
        (
            "host callback",
            format!("{:.1} µs", micros(f.callback)),
            Some(f.callback),
        ),
        (
            "artifact 16 MiB / 256 KiB chunks",
            format!("{:.0} MiB/s", f.artifact_mib_s),
            Some(f.artifact_chunk),
        ),
        (
            "cancel seen by extension",
            format!("{:.1} µs", micros(f.cancel)),
            Some(f.cancel),
        ),
        (
            "crash detected",
            format!("{:.3} ms", millis(f.crash)),
            Some(f.crash),
        ),
        (
            "binary",
            format!("{:.1} MiB", f.binary_bytes as f64 / (1024.0 * 1024.0)),
            None,
        ),
        (
            "crates.io dependencies (extension side)",
            f.deps.map_or("n/a".into(), |n| n.to_string()),
            None,
        ),
        ("", String::new(), None),
    ];
    for (name, value, d) in rows.iter().filter(|r| !r.0.is_empty()) {
        let r = d.map_or("".to_string(), |d| format!("{:.1}", ratio(d)));
        println!("| {name} | {value} | {r} |");
    }
    println!();
    println!("(artifact's ratio is per 256 KiB chunk round trip)");
    Ok(())
}
