//! `bench dispatch`: from a delivery's 2xx answer to its executor's process
//! started, at 10 and at 200 deliveries a second.
//!
//! The whole suite runs as in production (`oc_systest::Suite`, as `bench intake`
//! starts it), with one route: every delivery makes a Work of its own
//! (`correlate` on the delivery's number) whose binding is a `shell` job. The
//! job's command is [`STAMP_BIN`], a small program of the bench's own (beside
//! this binary; the standard library only, so its start costs what a small
//! command's does): the first thing it does is read the wall clock, then it
//! writes that time and the run's inputs (which carry the delivery's number) to
//! a file of its own and exits. The
//! senders note the wall clock when each 2xx answer is read; the latency is the
//! stamp minus that (the command's exec and its loading included, which is what
//! an executor's process costs).
//!
//! Each rate runs open loop for a fixed time (`OC_BENCH_DISPATCH_SECS`, 10 by
//! default) on 4 keep-alive connections, each sending on its own schedule; then
//! the bench waits (bounded) until every delivery answered 2xx has its stamp.
//! The suite's settings are the defaults (`job_concurrency` 8).

use crate::{hookpost, loadavg, machine, millis, percentile, Load, Res};
use serde_json::{json, Value};
use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

/// The stamping command, a program of its own beside the bench's
/// (`bench/src/bin/dispatch-stamp.rs`).
pub const STAMP_BIN: &str = "dispatch-stamp";

const SECRET: &str = "bench-secret";
const PATH: &str = "/hooks/dispatch";
const SCOPE: &str = "dispatch";
/// The payload field that carries a delivery's number.
const FIELD: &str = "oc_bench_dispatch_n";
const CONNS: u64 = 4;
const RATES: [u64; 2] = [10, 200];
/// The longest wait for the last stamps after a rate's sending ends.
const DRAIN: Duration = Duration::from_secs(120);

fn now_ns() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos())
}

fn body(n: u64) -> Vec<u8> {
    format!(r#"{{"number": {n}, "{FIELD}": {n}, "action": "opened"}}"#).into_bytes()
}

fn request(addr: SocketAddr, n: u64) -> Vec<u8> {
    hookpost::signed_post(addr, PATH, &format!("dispatch-{n}"), SECRET, &body(n))
}

/// Send at `rate` a second for `run_for`, numbering deliveries from `first`:
/// the wall-clock time each 2xx answer was read, by number, and the non-2xx
/// answers.
async fn send(
    addr: SocketAddr,
    rate: u64,
    run_for: Duration,
    first: u64,
) -> Res<(HashMap<u64, u128>, u64)> {
    let total = (rate * run_for.as_secs() / CONNS).max(1);
    let gap = Duration::from_micros(1_000_000 * CONNS / rate.max(1));
    let start = Instant::now() + Duration::from_millis(100);
    let mut tasks = Vec::new();
    for c in 0..CONNS {
        tasks.push(tokio::spawn(async move {
            let mut s = TcpStream::connect(addr).await?;
            s.set_nodelay(true)?;
            let mut buf = Vec::new();
            let mut answered = Vec::with_capacity(total as usize);
            let mut refused = 0u64;
            let offset = gap / CONNS as u32 * c as u32;
            for k in 0..total {
                let n = first + k * CONNS + c;
                tokio::time::sleep_until((start + offset + gap * k as u32).into()).await;
                s.write_all(&request(addr, n)).await?;
                let status = hookpost::read_status(&mut s, &mut buf)
                    .await
                    .map_err(|e| e.to_string())?;
                let at = now_ns();
                if (200..300).contains(&status) {
                    answered.push((n, at));
                } else {
                    refused += 1;
                }
            }
            Ok::<_, Box<dyn std::error::Error + Send + Sync>>((answered, refused))
        }));
    }
    let mut out = HashMap::new();
    let mut refused = 0;
    for t in tasks {
        let (a, r) = t.await?.map_err(|e| e.to_string())?;
        out.extend(a);
        refused += r;
    }
    Ok((out, refused))
}

/// The delivery number in a stamp's inputs.
fn number_in(v: &Value) -> Option<u64> {
    match v {
        Value::Object(m) => m
            .get(FIELD)
            .and_then(Value::as_u64)
            .or_else(|| m.values().find_map(number_in)),
        Value::Array(a) => a.iter().find_map(number_in),
        Value::String(s) if s.contains(FIELD) => {
            serde_json::from_str(s).ok().as_ref().and_then(number_in)
        }
        _ => None,
    }
}

/// Stamps read so far from `dir`: start time by delivery number.
fn read_stamps(dir: &Path, into: &mut HashMap<u64, u128>) -> Res<()> {
    for e in std::fs::read_dir(dir)?.flatten() {
        let name = e.file_name();
        if name.to_string_lossy().starts_with('.') {
            continue;
        }
        let text = std::fs::read_to_string(e.path())?;
        let Some((at, inputs)) = text.split_once('\n') else {
            continue;
        };
        let Ok(at) = at.parse::<u128>() else {
            continue;
        };
        let inputs: Value = serde_json::from_str(inputs).unwrap_or(Value::Null);
        if let Some(n) = number_in(&inputs) {
            // A Work run again (a retry) keeps its first start.
            into.entry(n)
                .and_modify(|t| *t = (*t).min(at))
                .or_insert(at);
        }
    }
    Ok(())
}

/// CPU seconds (user and system, with those of reaped children: the wrappers
/// and commands the shell extension ran) of `pid`.
fn cpu_with_children_s(pid: u32) -> f64 {
    let ticks = std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| {
            let after = s.rsplit_once(')')?.1.to_owned();
            let f: Vec<f64> = after
                .split_whitespace()
                .skip(11)
                .take(4)
                .filter_map(|v| v.parse().ok())
                .collect();
            Some(f.iter().sum::<f64>())
        })
        .unwrap_or(0.0);
    // USER_HZ is 100 on Linux.
    ticks / 100.0
}

/// The pids whose parent is `parent`.
fn children(parent: u32) -> Vec<u32> {
    let mut out = Vec::new();
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return out;
    };
    for e in dir.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        let ppid = std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .ok()
            .and_then(|s| {
                let after = s.rsplit_once(')')?.1.to_owned();
                after.split_whitespace().nth(1)?.parse::<u32>().ok()
            });
        if ppid == Some(parent) {
            out.push(pid);
        }
    }
    out
}

/// The suite's daemons and extension processes.
fn suite_pids(suite: &oc_systest::Suite) -> Vec<u32> {
    let mut pids: Vec<u32> = oc_systest::Daemon::ALL
        .iter()
        .filter_map(|d| suite.pid(*d))
        .collect();
    if let Some(ext) = suite.pid(oc_systest::Daemon::Extrunner) {
        pids.extend(children(ext));
    }
    pids
}

struct RateFigures {
    rate: u64,
    /// CPU seconds the suite used over this rate's load and drain.
    cpu_s: f64,
    /// Seconds from the first answer to the last start.
    span_s: f64,
    sent_2xx: usize,
    refused: u64,
    started: usize,
    latencies: Vec<Duration>,
    /// Stamps earlier than the answer was read (counted as zero).
    early: usize,
}

async fn one_rate(
    addr: SocketAddr,
    stamps: &Path,
    rate: u64,
    run_for: Duration,
    first: u64,
    pids: &[u32],
) -> Res<RateFigures> {
    eprintln!("bench dispatch: {rate} deliveries a second for {run_for:?}");
    let cpu = || pids.iter().map(|p| cpu_with_children_s(*p)).sum::<f64>();
    let cpu_before = cpu();
    let (answered, refused) = send(addr, rate, run_for, first).await?;
    let until = Instant::now() + DRAIN;
    let mut started = HashMap::new();
    loop {
        started.clear();
        read_stamps(stamps, &mut started)?;
        let missing = answered.keys().filter(|n| !started.contains_key(n)).count();
        if missing == 0 || Instant::now() >= until {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let cpu_s = cpu() - cpu_before;
    let first_answer = answered.values().min().copied().unwrap_or(0);
    let last_start = answered
        .keys()
        .filter_map(|n| started.get(n))
        .max()
        .copied()
        .unwrap_or(first_answer);
    let span_s = last_start.saturating_sub(first_answer) as f64 / 1e9;
    let mut latencies = Vec::new();
    let mut early = 0;
    for (n, at) in &answered {
        if let Some(s) = started.get(n) {
            if s < at {
                early += 1;
                latencies.push(Duration::ZERO);
            } else {
                latencies.push(Duration::from_nanos(
                    u64::try_from(s - at).unwrap_or(u64::MAX),
                ));
            }
        }
    }
    Ok(RateFigures {
        rate,
        cpu_s,
        span_s,
        sent_2xx: answered.len(),
        refused,
        started: latencies.len(),
        latencies,
        early,
    })
}

/// `lscpu`'s "Model name", or `/proc/cpuinfo`'s.
fn cpu_model() -> String {
    let lscpu = std::process::Command::new("lscpu")
        .env("LC_ALL", "C")
        .output()
        .ok()
        .and_then(|o| {
            String::from_utf8_lossy(&o.stdout)
                .lines()
                .find(|l| l.trim_start().starts_with("Model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, v)| v.trim().to_owned())
        });
    lscpu.unwrap_or_else(machine)
}

pub fn run(as_json: bool) -> Res<()> {
    let load_start = loadavg();
    let exe: PathBuf = std::env::current_exe()?;
    let run_for = Duration::from_secs(
        std::env::var("OC_BENCH_DISPATCH_SECS")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(10),
    );
    let jobs: Option<u32> = std::env::var("OC_BENCH_DISPATCH_JOBS")
        .ok()
        .and_then(|s| s.parse().ok());
    let packages = oc_systest::Suite::first_party();
    let suite = oc_systest::Suite::new(&exe, "bench-dispatch", &packages)?;
    eprintln!("bench dispatch: starting the suite");
    suite.start_all()?;
    let stamps = suite.dir.join("stamps");
    std::fs::create_dir_all(&stamps)?;
    std::fs::write(suite.dir.join("secret"), SECRET)?;
    // The command, and the runs' wrapper as the package has it: the small program
    // the shell executor finds beside its executable (sdk::wrapper::program).
    let stamp_bin = exe.with_file_name(STAMP_BIN);
    for program in [stamp_bin.clone(), exe.with_file_name(sdk::wrapper::PROGRAM)] {
        if !program.is_file() {
            return Err(format!(
                "{} is missing: build it with `cargo build --release -p bench -p cli`",
                program.display()
            )
            .into());
        }
    }
    let stamp_s = stamp_bin.to_str().ok_or("the bench's path is not UTF-8")?;
    let stamps_s = stamps.to_str().ok_or("the suite's path is not UTF-8")?;
    let mut config = json!({
        "connections": [{"name": "hooks", "type": "webhook",
            "secret_refs": {"secret": format!("file:{}", suite.dir.join("secret").display())}}],
        "scopes": [{"id": SCOPE,
            "entries": [{"type": "webhook", "name": "in", "connection": "hooks",
                "config": {"path": PATH, "delivery_id": {"header": "X-Delivery-Id"},
                           "correlate": "/number"}}],
            "routes": [{"handler": "webhook", "binding": "run", "config": {"entry": "in"}}],
            "bindings": [{"name": "run", "executor": "shell",
                "config": {"command": [stamp_s, stamps_s]}}]}]
    });
    if let Some(jobs) = jobs {
        config["settings"] = json!({ "job_concurrency": jobs });
    }
    suite.apply_config(&config, PATH)?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    // A delivery on each connection first, so that the first rate does not pay
    // for warming up.
    let warm = rt.block_on(one_rate(
        suite.http,
        &stamps,
        CONNS,
        Duration::from_secs(1),
        1_000_000,
        &[],
    ))?;
    if warm.started == 0 {
        return Err(format!(
            "the warm-up delivery's command never started (2xx {}, refused {}); schedulerd's log:\n{}",
            warm.sent_2xx,
            warm.refused,
            suite.log(oc_systest::Daemon::Schedulerd)
        )
        .into());
    }
    // After the warm-up: the shell extension runs by then.
    let pids = suite_pids(&suite);
    let mut figures = Vec::new();
    for (i, rate) in RATES.iter().enumerate() {
        figures.push(rt.block_on(one_rate(
            suite.http,
            &stamps,
            *rate,
            run_for,
            (i as u64 + 1) * 10_000_000,
            &pids,
        ))?);
    }
    drop(suite);
    let load = Load::since(load_start);
    let cpu = cpu_model();
    let mut rows = Vec::new();
    for f in &mut figures {
        let p50 = percentile(&mut f.latencies, 50.0);
        let p99 = percentile(&mut f.latencies, 99.0);
        let max = f.latencies.iter().max().copied().unwrap_or_default();
        rows.push(json!({
            "rate": f.rate,
            "seconds": run_for.as_secs(),
            "p50_ms": (millis(p50) * 100.0).round() / 100.0,
            "p99_ms": (millis(p99) * 100.0).round() / 100.0,
            "max_ms": (millis(max) * 100.0).round() / 100.0,
            "answered_2xx": f.sent_2xx,
            "refused": f.refused,
            "started": f.started,
            "started_before_answer_read": f.early,
            "runs_per_s": if f.span_s > 0.0 { (f.started as f64 / f.span_s * 10.0).round() / 10.0 } else { 0.0 },
            "suite_cpu_ms_per_run": if f.started > 0 { (f.cpu_s * 1e3 / f.started as f64 * 10.0).round() / 10.0 } else { 0.0 },
        }));
    }
    if as_json {
        let mut out = json!({
            "machine": machine(),
            "cpu_model": cpu,
            "job_concurrency": jobs.unwrap_or(8),
            "rates": rows,
        });
        load.add_to(&mut out);
        println!("{}", serde_json::to_string_pretty(&out)?);
    } else {
        println!("machine: {} ({cpu})", machine());
        println!("{}", load.line());
        println!("job_concurrency {}", jobs.unwrap_or(8));
        println!(
            "| deliveries/s | p50 | p99 | max | answered 2xx | started | runs/s | suite CPU per run |"
        );
        println!("| --- | --- | --- | --- | --- | --- | --- | --- |");
        for r in &rows {
            println!(
                "| {} | {:.1} ms | {:.1} ms | {:.1} ms | {} | {} | {} | {} ms |",
                r["rate"],
                r["p50_ms"].as_f64().unwrap_or(0.0),
                r["p99_ms"].as_f64().unwrap_or(0.0),
                r["max_ms"].as_f64().unwrap_or(0.0),
                r["answered_2xx"],
                r["started"],
                r["runs_per_s"],
                r["suite_cpu_ms_per_run"]
            );
        }
    }
    let lost: usize = figures.iter().map(|f| f.sent_2xx - f.started).sum();
    if lost > 0 {
        return Err(format!("{lost} deliveries answered 2xx never started their command").into());
    }
    Ok(())
}
