//! `bench intake`: signed webhook deliveries accepted durably, end to end.
//!
//! The whole suite runs as in production (this binary re-executed as each daemon and as
//! the bundled webhook extension, through `oc_systest::Suite`: the broker, storaged on a
//! real SQLite file, extrunner, ingressd on a passed socket). Senders post signed JSON
//! deliveries (HMAC-SHA256, about 1 KiB, each with its own delivery ID) over keep-alive
//! connections; a 2xx means the delivery is on disk.
//!
//! - throughput: 64 senders, each posting as fast as it is answered, for 5 s after 1 s
//!   of warm-up;
//! - latency at a fixed 1,000 a second: 16 connections, each sending on its own
//!   schedule (open loop: latency counts from when a request was due, so a stall is
//!   not hidden by sending later), for 5 s;
//! - a burst: 500 deliveries sent at the same moment, each on its own connection
//!   (opened first, then all released together): how many were answered 2xx;
//! - peak memory: the sum of the peak resident sets (`VmHWM`) of the suite's
//!   processes (the five daemons and the extension) at the end.
//!
//! In the same run, where Debian's `webhook` package is installed (`/usr/bin/webhook`),
//! the same two loads go to it, configured with a `payload-hmac-sha256` rule and
//! `/bin/true` as its command: a server that checks the signature and keeps nothing.

use crate::syscalls::{self, Counts};
use crate::{hookpost, loadavg, machine, millis, percentile, Load, Res};
use serde_json::json;
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

const SECRET: &str = "bench-secret";
const PATH: &str = "/hooks/bench";
const SENDERS: usize = 64;
const WARMUP: Duration = Duration::from_secs(1);
const RUN: Duration = Duration::from_secs(5);
const RATE: u64 = 1000;
const RATE_CONNS: u64 = 16;
const BURST: usize = 500;

struct Kill(Child);

impl Drop for Kill {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A ~1 KiB delivery body, different for every `n`.
fn body(n: u64) -> Vec<u8> {
    let filler = "x".repeat(900);
    format!(
        r#"{{"number": {n}, "action": "opened", "title": "delivery {n}", "filler": "{filler}"}}"#
    )
    .into_bytes()
}

fn request(addr: SocketAddr, path: &str, tag: &str, n: u64) -> Vec<u8> {
    hookpost::signed_post(addr, path, &format!("{tag}-{n}"), SECRET, &body(n))
}

/// Deliveries per second answered 2xx with `SENDERS` senders, the non-2xx answers,
/// and every 2xx answer (warm-up included).
async fn throughput(addr: SocketAddr, path: &str, tag: &str) -> Res<(f64, u64, u64)> {
    let counter = Arc::new(AtomicU64::new(0));
    let failures = Arc::new(AtomicU64::new(0));
    let answered = Arc::new(AtomicU64::new(0));
    let start = Instant::now();
    let measure_from = start + WARMUP;
    let until = measure_from + RUN;
    let counted = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for t in 0..SENDERS {
        let (counter, failures, counted) = (counter.clone(), failures.clone(), counted.clone());
        let answered = answered.clone();
        let path = path.to_owned();
        let tag = format!("{tag}-t{t}");
        tasks.push(tokio::spawn(async move {
            let mut s = TcpStream::connect(addr).await?;
            s.set_nodelay(true)?;
            let mut buf = Vec::new();
            loop {
                let now = Instant::now();
                if now >= until {
                    return Ok::<(), Box<dyn std::error::Error + Send + Sync>>(());
                }
                let n = counter.fetch_add(1, Ordering::Relaxed);
                s.write_all(&request(addr, &path, &tag, n)).await?;
                let status = hookpost::read_status(&mut s, &mut buf)
                    .await
                    .map_err(|e| e.to_string())?;
                if !(200..300).contains(&status) {
                    failures.fetch_add(1, Ordering::Relaxed);
                    continue;
                }
                answered.fetch_add(1, Ordering::Relaxed);
                if Instant::now() >= measure_from && Instant::now() < until {
                    counted.fetch_add(1, Ordering::Relaxed);
                }
            }
        }));
    }
    for t in tasks {
        t.await?.map_err(|e| e.to_string())?;
    }
    Ok((
        counted.load(Ordering::Relaxed) as f64 / RUN.as_secs_f64(),
        failures.load(Ordering::Relaxed),
        answered.load(Ordering::Relaxed),
    ))
}

/// How many of `BURST` simultaneous deliveries are answered 2xx.
async fn burst(addr: SocketAddr, path: &str, tag: &str) -> Res<u64> {
    let gate = Arc::new(tokio::sync::Barrier::new(BURST));
    let mut tasks = Vec::new();
    for n in 0..BURST as u64 {
        let (gate, path, tag) = (gate.clone(), path.to_owned(), tag.to_owned());
        tasks.push(tokio::spawn(async move {
            let s = TcpStream::connect(addr).await;
            gate.wait().await;
            let mut s = s.ok()?;
            s.write_all(&request(addr, &path, &tag, n)).await.ok()?;
            let mut buf = Vec::new();
            hookpost::read_status(&mut s, &mut buf).await.ok()
        }));
    }
    let mut ok = 0;
    for t in tasks {
        if let Ok(Some(status)) = t.await {
            if (200..300).contains(&status) {
                ok += 1;
            }
        }
    }
    Ok(ok)
}

/// p50 and p99 at a fixed `RATE` a second, open loop.
async fn at_rate(addr: SocketAddr, path: &str, tag: &str) -> Res<(Duration, Duration, u64)> {
    let start = Instant::now() + Duration::from_millis(100);
    let per_conn = RATE / RATE_CONNS;
    let total = per_conn * RUN.as_secs();
    let mut tasks = Vec::new();
    for c in 0..RATE_CONNS {
        let path = path.to_owned();
        let tag = format!("{tag}-r{c}");
        tasks.push(tokio::spawn(async move {
            let mut s = TcpStream::connect(addr).await?;
            s.set_nodelay(true)?;
            let mut buf = Vec::new();
            // (latency, when it was due after `start`)
            let mut lat = Vec::with_capacity(total as usize);
            let mut failures = 0u64;
            let gap = Duration::from_micros(1_000_000 / per_conn);
            let offset = gap / RATE_CONNS as u32 * c as u32;
            for k in 0..total {
                let due = start + offset + gap * k as u32;
                tokio::time::sleep_until(due.into()).await;
                s.write_all(&request(addr, &path, &tag, k)).await?;
                let status = hookpost::read_status(&mut s, &mut buf)
                    .await
                    .map_err(|e| e.to_string())?;
                if !(200..300).contains(&status) {
                    failures += 1;
                }
                lat.push((due.elapsed(), due.duration_since(start)));
            }
            Ok::<_, Box<dyn std::error::Error + Send + Sync>>((lat, failures))
        }));
    }
    let mut timed = Vec::new();
    let mut failures = 0;
    for t in tasks {
        let (lat, f) = t.await?.map_err(|e| e.to_string())?;
        timed.extend(lat);
        failures += f;
    }
    let mut all: Vec<Duration> = timed.iter().map(|(l, _)| *l).collect();
    if std::env::var_os("OC_BENCH_TAIL").is_some() {
        let max = all.iter().max().copied().unwrap_or_default();
        eprintln!(
            "{tag}: p90 {:?} p99 {:?} p99.9 {:?} max {max:?}",
            percentile(&mut all, 90.0),
            percentile(&mut all, 99.0),
            percentile(&mut all, 99.9)
        );
        // When the slowest were due: a stall shows as a cluster.
        timed.sort_by_key(|t| std::cmp::Reverse(t.0));
        let slowest: Vec<String> = timed
            .iter()
            .take(20)
            .map(|(l, at)| format!("{:.1}ms@{}ms", millis(*l), at.as_millis()))
            .collect();
        eprintln!("{tag}: slowest (latency@due) {}", slowest.join(" "));
    }
    Ok((
        percentile(&mut all, 50.0),
        percentile(&mut all, 99.0),
        failures,
    ))
}

/// CPU seconds (user and system) `pid` has used.
fn cpu_s(pid: u32) -> f64 {
    let ticks = std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| {
            let after = s.rsplit_once(')')?.1.to_owned();
            let f: Vec<&str> = after.split_whitespace().collect();
            let u: f64 = f.get(11)?.parse().ok()?;
            let k: f64 = f.get(12)?.parse().ok()?;
            Some(u + k)
        })
        .unwrap_or(0.0);
    // USER_HZ is 100 on Linux.
    ticks / 100.0
}

fn vm_hwm_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse().ok())
        })
        .unwrap_or(0)
}

/// What an extension process is, from its command line: this binary re-executed as
/// `ext-<name>` (`oc_systest::dispatch`) gives `extension:<name>`, anything else
/// its program's file name.
fn extension_label(pid: u32) -> String {
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
    let args: Vec<String> = cmdline
        .split(|b| *b == 0)
        .map(|a| String::from_utf8_lossy(a).into_owned())
        .collect();
    let name = match args.get(1).and_then(|a| a.strip_prefix("ext-")) {
        Some(name) => name.to_owned(),
        None => args
            .first()
            .and_then(|a| a.rsplit('/').next())
            .unwrap_or("unknown")
            .to_owned(),
    };
    format!("extension:{name}")
}

/// CPU microseconds per kept delivery for each process (processes of one label add
/// up), from each one's CPU seconds over the loads.
fn cpu_per_delivery(cpu: &[(String, f64)], kept: u64) -> BTreeMap<String, f64> {
    let mut out = BTreeMap::new();
    if kept == 0 {
        return out;
    }
    for (name, secs) in cpu {
        *out.entry(name.clone()).or_insert(0.0) += secs * 1e6 / kept as f64;
    }
    for v in out.values_mut() {
        *v = (*v * 10.0).round() / 10.0;
    }
    out
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

struct Figures {
    per_s_64: f64,
    failures_64: u64,
    p50: Duration,
    p99: Duration,
    failures_rate: u64,
    burst_ok: u64,
    /// The 2xx answers to the 64 senders, warm-up included.
    answered_64: u64,
    /// Every delivery answered 2xx over the three loads: each has its own delivery
    /// ID, so each must be one event kept.
    answered_2xx: u64,
}

/// The three loads, one after another; `after_64` runs once the 64 senders are done.
async fn measure(
    addr: SocketAddr,
    path: &str,
    tag: &str,
    after_64: &mut dyn FnMut() -> Res<()>,
) -> Res<Figures> {
    let (per_s_64, failures_64, answered_64) = throughput(addr, path, tag).await?;
    after_64()?;
    let (p50, p99, failures_rate) = at_rate(addr, path, &format!("{tag}-rate")).await?;
    let burst_ok = burst(addr, path, &format!("{tag}-burst")).await?;
    let sent_at_rate = RATE / RATE_CONNS * RATE_CONNS * RUN.as_secs();
    Ok(Figures {
        answered_2xx: answered_64 + sent_at_rate.saturating_sub(failures_rate) + burst_ok,
        burst_ok,
        answered_64,
        per_s_64,
        failures_64,
        p50,
        p99,
        failures_rate,
    })
}

fn free_port() -> Res<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

/// Debian's `webhook`, configured to check the same signature and run `/bin/true`.
fn start_peer(dir: &Path) -> Res<Option<(Kill, SocketAddr)>> {
    let bin = Path::new("/usr/bin/webhook");
    if !bin.exists() {
        return Ok(None);
    }
    let hooks = dir.join("hooks.json");
    std::fs::write(
        &hooks,
        serde_json::to_vec(&json!([{
            "id": "bench",
            "execute-command": "/bin/true",
            "response-message": "ok",
            "trigger-rule": {"match": {"type": "payload-hmac-sha256", "secret": SECRET,
                "parameter": {"source": "header", "name": "X-Signature-256"}}}
        }]))?,
    )?;
    let port = free_port()?;
    let child = Command::new(bin)
        .args(["-hooks", &hooks.display().to_string(), "-ip", "127.0.0.1"])
        .args(["-port", &port.to_string()])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()?;
    let addr: SocketAddr = format!("127.0.0.1:{port}").parse()?;
    for _ in 0..200 {
        if std::net::TcpStream::connect(addr).is_ok() {
            return Ok(Some((Kill(child), addr)));
        }
        std::thread::sleep(Duration::from_millis(25));
    }
    Err("webhook did not listen".into())
}

pub fn run(json: bool) -> Res<()> {
    let load_start = loadavg();
    let exe: PathBuf = std::env::current_exe()?;
    let packages = oc_systest::Suite::first_party();
    let suite = oc_systest::Suite::new(&exe, "bench-intake", &packages)?;
    suite.start_all()?;
    let config = json!({
        "connections": [{"name": "hooks", "type": "webhook",
            "secret_refs": {"secret": format!("file:{}", suite.dir.join("secret").display())}}],
        "scopes": [{"id": "bench", "entries": [{"type": "webhook", "name": "in",
            "connection": "hooks", "config": {"path": PATH,
            "delivery_id": {"header": "X-Delivery-Id"}, "correlate": "/number"}}]}]
    });
    std::fs::write(suite.dir.join("secret"), SECRET)?;
    suite.apply_config(&config, PATH)?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let mut pids: Vec<(String, u32)> = oc_systest::Daemon::ALL
        .iter()
        .filter_map(|d| suite.pid(*d).map(|p| (d.name().to_owned(), p)))
        .collect();
    if let Some(ext) = suite.pid(oc_systest::Daemon::Extrunner) {
        pids.extend(children(ext).into_iter().map(|p| (extension_label(p), p)));
    }
    let sequence = |suite: &oc_systest::Suite| -> Res<u64> {
        let v = suite
            .call_typed(&busapi::store::SequenceRequest::default())
            .map_err(|e| e.to_string())?;
        Ok(u64::try_from(v.sequence)?)
    };
    // The writer's groups and writes: how many writes shared a commit at 64 senders.
    let writer = |suite: &oc_systest::Suite| -> Res<(u64, u64)> {
        let v = suite
            .call_typed(&busapi::store::StatsRequest::default())
            .map_err(|e| e.to_string())?;
        Ok((v.writer.groups, v.writer.writes))
    };
    let kept_before = sequence(&suite)?;
    let writer_before = writer(&suite)?;
    let mut writer_64 = writer_before;
    let cpu_before: Vec<f64> = pids.iter().map(|(_, p)| cpu_s(*p)).collect();
    // System calls and context switches over the 64 senders' load (warm-up included).
    let perf = syscalls::perf_usable();
    let pid_list: Vec<u32> = pids.iter().map(|(_, p)| *p).collect();
    let mut phase = Some(syscalls::Phase::start(&pid_list, perf.is_ok(), &suite.dir));
    let mut counts_64 = Vec::new();
    let ours = rt.block_on(measure(suite.http, PATH, "oc", &mut || {
        if let Some(p) = phase.take() {
            counts_64 = p.end();
        }
        writer_64 = writer(&suite)?;
        Ok(())
    }))?;
    let suite_counts: Vec<(String, Counts)> =
        pids.iter().map(|(n, _)| n.clone()).zip(counts_64).collect();
    let cpu: Vec<(String, f64)> = pids
        .iter()
        .zip(cpu_before)
        .map(|((n, p), before)| (n.clone(), cpu_s(*p) - before))
        .collect();
    let pids: Vec<u32> = pids.iter().map(|(_, p)| *p).collect();
    let peak_kib: u64 = pids.iter().map(|p| vm_hwm_kib(*p)).sum();
    let kept_after = sequence(&suite)?;
    drop(suite);
    let groups = writer_64.0.saturating_sub(writer_before.0);
    let writes_per_commit = match groups {
        0 => 0.0,
        g => writer_64.1.saturating_sub(writer_before.1) as f64 / g as f64,
    };
    // Each delivery is one root event (no route matches, so nothing derives more):
    // the events kept over the loads are the deliveries kept.
    let kept = kept_after.saturating_sub(kept_before);
    let lost = ours.answered_2xx.saturating_sub(kept);
    let per_delivery = cpu_per_delivery(&cpu, kept);

    let peer_dir = std::env::temp_dir().join(format!("oc-bench-peer-{}", std::process::id()));
    std::fs::create_dir_all(&peer_dir)?;
    let peer = match start_peer(&peer_dir)? {
        Some((kill, addr)) => {
            let mut phase = Some(syscalls::Phase::start(
                &[kill.0.id()],
                perf.is_ok(),
                &peer_dir,
            ));
            let mut counts = Counts::default();
            let f = rt.block_on(measure(addr, "/hooks/bench", "peer", &mut || {
                if let Some(p) = phase.take() {
                    counts = p.end().first().copied().unwrap_or_default();
                }
                Ok(())
            }))?;
            let peak = vm_hwm_kib(kill.0.id());
            Some((f, peak, counts))
        }
        None => None,
    };
    let _ = std::fs::remove_dir_all(&peer_dir);
    let load = Load::since(load_start);

    let mib = |kib: u64| kib as f64 / 1024.0;
    if json {
        let mut out = json!({
            "machine": machine(),
            "deliveries_per_s_64": ours.per_s_64.round(),
            "failures_64": ours.failures_64,
            "p50_ms_at_1000": millis(ours.p50),
            "p99_ms_at_1000": millis(ours.p99),
            "failures_at_1000": ours.failures_rate,
            "burst_500_ok": ours.burst_ok,
            "peak_rss_mib": mib(peak_kib),
            "deliveries_answered_2xx": ours.answered_2xx,
            "deliveries_kept": kept,
            "deliveries_lost": lost,
            "cpu_s": cpu.iter().map(|(n, c)| json!({"process": n, "cpu_s": c})).collect::<Vec<_>>(),
            "cpu_us_per_delivery": per_delivery,
            "storaged_writes_per_commit_64": (writes_per_commit * 10.0).round() / 10.0,
        });
        load.add_to(&mut out);
        let peer_counts = peer.as_ref().map(|(f, _, c)| (c, f.answered_64));
        counts_json(
            &mut out,
            &suite_counts,
            ours.answered_64,
            peer_counts,
            &perf,
        );
        if let Some((f, peak, _)) = &peer {
            out["peer_deliveries_per_s_64"] = json!(f.per_s_64.round());
            out["peer_p50_ms_at_1000"] = json!(millis(f.p50));
            out["peer_p99_ms_at_1000"] = json!(millis(f.p99));
            out["peer_failures"] = json!(f.failures_64 + f.failures_rate);
            out["peer_burst_500_ok"] = json!(f.burst_ok);
            out["peer_peak_rss_mib"] = json!(mib(*peak));
        }
        println!("{}", serde_json::to_string_pretty(&out)?);
        if lost > 0 {
            return Err(format!("{lost} deliveries answered 2xx were not kept").into());
        }
        return Ok(());
    }
    println!("machine: {}", machine());
    println!("{}", load.line());
    println!("| figure | Open Conduit (durable) | Debian webhook 2.8 (keeps nothing) |");
    println!("| --- | --- | --- |");
    let peer_or = |f: &dyn Fn(&Figures, u64) -> String| {
        peer.as_ref()
            .map_or_else(|| "not installed".to_owned(), |(p, k, _)| f(p, *k))
    };
    println!(
        "| deliveries/s, 64 senders | {:.0} | {} |",
        ours.per_s_64,
        peer_or(&|p, _| format!("{:.0}", p.per_s_64))
    );
    println!(
        "| p50 at 1,000/s | {:.2} ms | {} |",
        millis(ours.p50),
        peer_or(&|p, _| format!("{:.2} ms", millis(p.p50)))
    );
    println!(
        "| p99 at 1,000/s | {:.2} ms | {} |",
        millis(ours.p99),
        peer_or(&|p, _| format!("{:.2} ms", millis(p.p99)))
    );
    println!(
        "| peak RSS | {:.1} MiB (5 daemons + extension) | {} |",
        mib(peak_kib),
        peer_or(&|_, k| format!("{:.1} MiB", mib(k)))
    );
    println!(
        "| non-2xx answers | {} | {} |",
        ours.failures_64 + ours.failures_rate,
        peer_or(&|p, _| (p.failures_64 + p.failures_rate).to_string())
    );
    println!(
        "| answered 2xx of {BURST} at once | {} | {} |",
        ours.burst_ok,
        peer_or(&|p, _| p.burst_ok.to_string())
    );
    println!(
        "deliveries answered 2xx: {}, kept by storaged: {kept}, lost: {lost}",
        ours.answered_2xx
    );
    let cpu_line: Vec<String> = cpu.iter().map(|(n, c)| format!("{n} {c:.1} s")).collect();
    println!("CPU used during the loads: {}", cpu_line.join(", "));
    let per_line: Vec<String> = per_delivery
        .iter()
        .map(|(n, us)| format!("{n} {us:.0} µs"))
        .collect();
    println!("CPU per kept delivery: {}", per_line.join(", "));
    println!("storaged's writes per commit, 64 senders: {writes_per_commit:.1}");
    let peer_counts = peer.as_ref().map(|(f, _, c)| (c, f.answered_64));
    counts_table(&suite_counts, ours.answered_64, peer_counts, &perf);
    if lost > 0 {
        return Err(format!("{lost} deliveries answered 2xx were not kept").into());
    }
    Ok(())
}

/// Every process's counts (processes of one label add up) and their sum.
fn by_label(counts: &[(String, Counts)]) -> (BTreeMap<String, Counts>, Counts) {
    let mut out: BTreeMap<String, Counts> = BTreeMap::new();
    let mut total = Counts {
        syscalls: Some(0),
        ..Counts::default()
    };
    for (name, c) in counts {
        out.entry(name.clone())
            .and_modify(|e| e.add(c))
            .or_insert(*c);
        total.add(c);
    }
    (out, total)
}

/// `syscalls_per_delivery` (where perf counted), `io_syscalls_per_delivery`,
/// `ctxsw_per_delivery` and `voluntary_ctxsw_per_delivery`, each for the suite (per
/// process and `total`) and the peer, over the 64 senders' load.
fn counts_json(
    out: &mut serde_json::Value,
    suite: &[(String, Counts)],
    delivered: u64,
    peer: Option<(&Counts, u64)>,
    perf: &Result<(), String>,
) {
    let (named, total) = by_label(suite);
    let figure = |f: &dyn Fn(&Counts) -> Option<u64>| {
        let mut m = serde_json::Map::new();
        for (name, c) in named.iter().chain([(&"total".to_owned(), &total)]) {
            let Some(n) = f(c) else {
                return serde_json::Value::Null;
            };
            m.insert(name.clone(), json!(syscalls::per(n, delivered)));
        }
        let peer = peer.and_then(|(c, d)| Some(syscalls::per(f(c)?, d)));
        json!({"suite": m, "peer": peer})
    };
    let all = figure(&|c| c.syscalls);
    if !all.is_null() {
        out["syscalls_per_delivery"] = all;
    }
    out["io_syscalls_per_delivery"] = figure(&|c| Some(c.io_syscalls()));
    out["ctxsw_per_delivery"] = figure(&|c| Some(c.ctxsw()));
    out["voluntary_ctxsw_per_delivery"] = figure(&|c| Some(c.voluntary));
    out["counts_load"] = json!({
        "load": "64 senders, warm-up included",
        "deliveries_2xx": delivered,
        "peer_deliveries_2xx": peer.map(|(_, d)| d),
        "syscalls": match perf {
            Ok(()) => "perf stat -e raw_syscalls:sys_enter -p PID (threads and children inherit)".to_owned(),
            Err(why) => why.clone(),
        },
        "io_syscalls": "syscr + syscw of /proc/PID/io: read and write calls only (not recv/send, epoll_wait, futex)",
        "ctxsw": "voluntary + nonvoluntary of /proc/PID/task/*/status",
        "suite_threads_ended": total.threads_ended,
    });
}

fn counts_table(
    suite: &[(String, Counts)],
    delivered: u64,
    peer: Option<(&Counts, u64)>,
    perf: &Result<(), String>,
) {
    let (named, total) = by_label(suite);
    println!();
    println!(
        "Per delivery over the 64 senders' load, warm-up included ({delivered} answered 2xx{}):",
        peer.map_or(String::new(), |(_, d)| format!("; the peer {d}"))
    );
    if let Err(why) = perf {
        println!("system calls not counted: {why}");
    }
    println!("| process | system calls (perf) | reads + writes (syscr + syscw) | context switches (voluntary + involuntary) |");
    println!("| --- | --- | --- | --- |");
    let row = |name: &str, c: &Counts, d: u64| {
        let sys = c
            .syscalls
            .map_or("–".to_owned(), |n| format!("{:.1}", syscalls::per(n, d)));
        println!(
            "| {name} | {sys} | {:.1} | {:.1} ({:.1} + {:.1}) |",
            syscalls::per(c.io_syscalls(), d),
            syscalls::per(c.ctxsw(), d),
            syscalls::per(c.voluntary, d),
            syscalls::per(c.involuntary, d),
        );
    };
    let mut idle = Vec::new();
    for (name, c) in &named {
        let none = |n: u64| syscalls::per(n, delivered) == 0.0;
        if c.syscalls.is_none_or(none) && none(c.io_syscalls()) && none(c.ctxsw()) {
            idle.push(name.as_str());
        } else {
            row(name, c, delivered);
        }
    }
    row("**suite total**", &total, delivered);
    if let Some((c, d)) = peer {
        row("Debian webhook", c, d);
    }
    if !idle.is_empty() {
        println!(
            "(under 0.05 of each per delivery, left out: {})",
            idle.join(", ")
        );
    }
    if total.threads_ended > 0 {
        println!(
            "({} suite threads ended during the load; their context switches are not counted)",
            total.threads_ended
        );
    }
}
