//! `bench web`: webd's reads and its live streams, against the whole suite.
//!
//! The suite runs as in production (this binary re-executed as each daemon and as the
//! bundled extensions, through `oc_systest::Suite`: the broker, storaged on a real
//! SQLite file, extrunner, schedulerd, ingressd and webd). The configuration routes
//! each signed webhook delivery to a Work of its own (a shell binding, with
//! `job_concurrency` 0 so that nothing runs and the Works stay as they were made).
//! The bench signs in with a token from `open-conduit web login`, sent as
//! `Authorization: Bearer` (webd takes it on pages as on the API).
//!
//! - reads: 1,000 Works made by deliveries through ingressd; then `GET
//!   /api/works?limit=50`, `GET /api/works/{id}` (the 1,000 IDs in turn) and the page
//!   `GET /works`, each with 1 and with 8 clients on keep-alive HTTP/1.1 connections
//!   (a thread and a connection each, sending as soon as answered), counted for
//!   `RUN` after `WARMUP`: requests a second, p50 and p99;
//! - bus calls a request makes: the broker's `requests` counter (`bus.status`) over
//!   `CALLS_SAMPLE` sequential requests, less what the suite called meanwhile on its
//!   own (the same counter over an idle second, scaled);
//! - live streams: `STREAMS` streams on `/api/stream` (raw `text/event-stream`), left
//!   open and quiet for `IDLE` as a page is (`OC_BENCH_IDLE_S=SECONDS` for another
//!   time), then a burst of `BURST` deliveries sent at once (each on its own
//!   connection, opened first): the Works the burst made, the nudges published on the
//!   topics webd passes on (a subscriber of this bench's own on the bus counts them),
//!   the `changed` events each stream sent until the burst settled (nothing new for
//!   `QUIET` and every Work made), and the page re-reads a browser would make from
//!   them (`webd/static/app.js` reads the page 200 ms after the last `changed` of a
//!   run).

use crate::webclient::{dechunk, parse_head, Client, Head, HANG};
use crate::{loadavg, machine, millis, percentile, Load, Res};
use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Barrier, Mutex};
use std::time::{Duration, Instant};

const SECRET: &str = "bench-web-secret";
const PATH: &str = "/hooks/web";
const SCOPE: &str = "bench";
/// Works in the store before the reads.
const FILL: u64 = 1000;
const FILL_SENDERS: u64 = 8;
const WARMUP: Duration = Duration::from_millis(500);
const RUN: Duration = Duration::from_secs(3);
/// Sequential requests over which the bus calls of one are counted.
const CALLS_SAMPLE: u32 = 50;
const STREAMS: usize = 8;
/// How long the streams stay open, quiet, before the burst (`OC_BENCH_IDLE_S`
/// changes it).
const IDLE: Duration = Duration::from_secs(3);

/// `IDLE`, or `OC_BENCH_IDLE_S` seconds.
fn idle_before_burst() -> Duration {
    std::env::var("OC_BENCH_IDLE_S")
        .ok()
        .and_then(|s| s.parse::<f64>().ok())
        .filter(|s| s.is_finite() && *s >= 0.0)
        .map_or(IDLE, Duration::from_secs_f64)
}
const BURST: u64 = 100;
/// The burst has settled when no stream got anything for this long.
const QUIET: Duration = Duration::from_secs(2);
/// The page's own delay after a `changed` (`soon()` in `webd/static/app.js`).
const PAGE_DEBOUNCE: Duration = Duration::from_millis(200);

fn progress(what: &str) {
    eprintln!("bench web: {what}");
}

/// A ~300-byte delivery body; `number` is its Work's correlation key.
fn delivery(addr: SocketAddr, n: u64, tag: &str) -> Vec<u8> {
    let body = format!(
        r#"{{"number": {n}, "action": "opened", "title": "delivery {n}", "filler": "{}"}}"#,
        "x".repeat(200)
    );
    let sig = oc_systest::sign_sha256(SECRET.as_bytes(), body.as_bytes());
    format!(
        "POST {PATH} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\n\
         X-Delivery-Id: {tag}-{n}\r\nX-Signature-256: {sig}\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

/// One read route under load.
#[derive(Clone)]
struct Route {
    name: &'static str,
    /// The paths sent in turn.
    paths: Arc<Vec<String>>,
}

struct Loaded {
    per_s: f64,
    p50: Duration,
    p99: Duration,
    non_200: u64,
    bytes: usize,
    /// Every request answered, warm-up included.
    total: u64,
}

/// `clients` connections sending `route`'s paths as fast as answered, counted over
/// `RUN` after `WARMUP`.
fn load(addr: SocketAddr, token: &str, route: &Route, clients: usize) -> Res<Loaded> {
    let start = Instant::now();
    let (from, until) = (start + WARMUP, start + WARMUP + RUN);
    let next = Arc::new(AtomicU64::new(0));
    let mut threads = Vec::new();
    for _ in 0..clients {
        let (next, paths, token) = (next.clone(), route.paths.clone(), token.to_owned());
        threads.push(std::thread::spawn(
            move || -> Result<(Vec<Duration>, u64, usize, u64), String> {
                let mut c = Client::new(addr, &token);
                let (mut lat, mut non_200, mut bytes, mut total) = (Vec::new(), 0u64, 0usize, 0u64);
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed) as usize;
                    let t = Instant::now();
                    if t >= until {
                        return Ok((lat, non_200, bytes, total));
                    }
                    let (status, body) = c.get(&paths[i % paths.len()])?;
                    let took = t.elapsed();
                    total += 1;
                    if t >= from && t + took <= until {
                        lat.push(took);
                        if status != 200 {
                            non_200 += 1;
                        }
                        bytes = body.len();
                    }
                }
            },
        ));
    }
    let (mut all, mut non_200, mut bytes, mut total) = (Vec::new(), 0, 0, 0);
    for t in threads {
        let (lat, n, b, k) = t.join().map_err(|_| "a client panicked")??;
        all.extend(lat);
        non_200 += n;
        bytes = bytes.max(b);
        total += k;
    }
    Ok(Loaded {
        per_s: all.len() as f64 / RUN.as_secs_f64(),
        p50: percentile(&mut all, 50.0),
        p99: percentile(&mut all, 99.0),
        non_200,
        bytes,
        total,
    })
}

/// The broker's count of calls it forwarded (`bus.*` not counted).
fn bus_requests(suite: &oc_systest::Suite) -> Res<u64> {
    let v = suite
        .call("bus.status", json!({}))
        .map_err(|e| format!("bus.status: {e}"))?;
    v["counters"]["requests"]
        .as_u64()
        .ok_or_else(|| format!("bus.status has no counters.requests: {v}").into())
}

fn bus_counter(suite: &oc_systest::Suite, name: &str) -> Res<u64> {
    let v = suite
        .call("bus.status", json!({}))
        .map_err(|e| format!("bus.status: {e}"))?;
    Ok(v["counters"][name].as_u64().unwrap_or(0))
}

/// Bus calls one request of `path` makes: over `CALLS_SAMPLE` sequential requests,
/// less the suite's own calls at `idle_per_s` meanwhile.
fn bus_calls_per_request(
    suite: &oc_systest::Suite,
    token: &str,
    paths: &[String],
    idle_per_s: f64,
) -> Res<f64> {
    let mut c = Client::new(suite.web, token);
    let before = bus_requests(suite)?;
    let t = Instant::now();
    for i in 0..CALLS_SAMPLE as usize {
        let (status, body) = c.get(&paths[i % paths.len()])?;
        if status != 200 {
            return Err(format!(
                "GET {}: {status} {}",
                paths[0],
                String::from_utf8_lossy(&body)
            )
            .into());
        }
    }
    let took = t.elapsed();
    let after = bus_requests(suite)?;
    let own = after.saturating_sub(before) as f64 - idle_per_s * took.as_secs_f64();
    Ok((own / f64::from(CALLS_SAMPLE) * 10.0).round() / 10.0)
}

/// Every Work of the bench's scope, by ID.
fn works(suite: &oc_systest::Suite) -> Res<Vec<String>> {
    let mut out = Vec::new();
    let mut after = String::new();
    loop {
        let page = suite
            .call_typed(&busapi::store::WorksRequest {
                scope_id: Some(SCOPE.to_owned()),
                after: after.clone(),
                limit: 200,
                ..Default::default()
            })
            .map_err(|e| format!("the Works: {e}"))?;
        out.extend(page.works.into_iter().map(|w| w.id));
        if page.next.is_empty() || page.next == after {
            return Ok(out);
        }
        after = page.next;
    }
}

/// Wait until the scope holds `n` Works.
fn wait_for_works(suite: &oc_systest::Suite, n: usize) -> Res<Vec<String>> {
    let deadline = Instant::now() + HANG;
    loop {
        let w = works(suite)?;
        if w.len() >= n {
            return Ok(w);
        }
        if Instant::now() > deadline {
            return Err(format!("{} Works of {n} after {HANG:?}", w.len()).into());
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Reads one answer's status off a keep-alive connection to ingressd.
fn answer(s: &mut TcpStream, buf: &mut Vec<u8>) -> Result<u16, String> {
    let end = loop {
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break end;
        }
        Client::fill(s, buf)?;
    };
    let head = parse_head(&String::from_utf8_lossy(&buf[..end]))?;
    buf.drain(..end + 4);
    let len = head.length.unwrap_or(0);
    while buf.len() < len {
        Client::fill(s, buf)?;
    }
    buf.drain(..len);
    Ok(head.status)
}

/// `FILL` deliveries from `FILL_SENDERS` keep-alive connections: how many were 2xx.
fn fill(addr: SocketAddr) -> Res<u64> {
    let mut threads = Vec::new();
    for t in 0..FILL_SENDERS {
        threads.push(std::thread::spawn(move || -> Result<u64, String> {
            let mut s = TcpStream::connect(addr).map_err(|e| e.to_string())?;
            s.set_nodelay(true).map_err(|e| e.to_string())?;
            s.set_read_timeout(Some(HANG)).map_err(|e| e.to_string())?;
            let (mut buf, mut ok) = (Vec::new(), 0);
            for n in (t..FILL).step_by(FILL_SENDERS as usize) {
                s.write_all(&delivery(addr, n, "fill"))
                    .map_err(|e| e.to_string())?;
                if (200..300).contains(&answer(&mut s, &mut buf)?) {
                    ok += 1;
                }
            }
            Ok(ok)
        }));
    }
    let mut ok = 0;
    for t in threads {
        ok += t.join().map_err(|_| "a sender panicked")??;
    }
    Ok(ok)
}

/// `BURST` deliveries sent at the same moment, each on a connection opened first:
/// when they were released, and how many were 2xx.
fn burst(addr: SocketAddr) -> Res<(Instant, u64)> {
    let gate = Arc::new(Barrier::new(BURST as usize + 1));
    let mut threads = Vec::new();
    for n in FILL..FILL + BURST {
        let gate = gate.clone();
        threads.push(std::thread::spawn(move || -> Result<u16, String> {
            let s = TcpStream::connect(addr).map_err(|e| e.to_string());
            let req = delivery(addr, n, "burst");
            gate.wait();
            let mut s = s?;
            s.set_read_timeout(Some(HANG)).map_err(|e| e.to_string())?;
            s.write_all(&req).map_err(|e| e.to_string())?;
            answer(&mut s, &mut Vec::new())
        }));
    }
    gate.wait();
    let released = Instant::now();
    let mut ok = 0;
    for t in threads {
        if let Ok(Ok(status)) = t.join() {
            if (200..300).contains(&status) {
                ok += 1;
            }
        }
    }
    Ok((released, ok))
}

/// What one live stream (or the bus subscriber) received: when, and what.
type Seen = Arc<Mutex<Vec<(Instant, String)>>>;

/// Open `/api/stream` and read its events on a thread of their own until `stop`:
/// each event's name (`hello`, `changed`, …) with its data, as it arrived.
fn open_stream(addr: SocketAddr, token: &str, stop: Arc<AtomicBool>) -> Res<Seen> {
    let mut s = TcpStream::connect(addr)?;
    s.set_read_timeout(Some(Duration::from_millis(100)))?;
    s.write_all(
        format!(
            "GET /api/stream HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {token}\r\n\
             Accept: text/event-stream\r\n\r\n"
        )
        .as_bytes(),
    )?;
    let seen: Seen = Arc::new(Mutex::new(Vec::new()));
    let out = seen.clone();
    std::thread::spawn(move || {
        let (mut raw, mut text) = (Vec::new(), Vec::new());
        let mut head: Option<Head> = None;
        let mut chunk = [0u8; 16384];
        while !stop.load(Ordering::Relaxed) {
            match s.read(&mut chunk) {
                Ok(0) => break,
                Ok(n) => raw.extend_from_slice(&chunk[..n]),
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ) =>
                {
                    continue
                }
                Err(_) => break,
            }
            let now = Instant::now();
            if head.is_none() {
                let Some(end) = raw.windows(4).position(|w| w == b"\r\n\r\n") else {
                    continue;
                };
                match parse_head(&String::from_utf8_lossy(&raw[..end])) {
                    Ok(h) if h.status == 200 => head = Some(h),
                    Ok(h) => {
                        push(&out, now, format!("error {}", h.status));
                        break;
                    }
                    Err(e) => {
                        push(&out, now, format!("error {e}"));
                        break;
                    }
                }
                raw.drain(..end + 4);
            }
            if head.as_ref().is_some_and(|h| h.chunked) {
                if dechunk(&mut raw, &mut text).is_err() {
                    break;
                }
            } else {
                text.append(&mut raw);
            }
            // Whole events only: each ends with a blank line.
            while let Some(end) = text.windows(2).position(|w| w == b"\n\n") {
                let event = String::from_utf8_lossy(&text[..end]).into_owned();
                text.drain(..end + 2);
                let name = event
                    .lines()
                    .find_map(|l| l.strip_prefix("event:"))
                    .map(str::trim);
                let data = event
                    .lines()
                    .find_map(|l| l.strip_prefix("data:"))
                    .map_or("", str::trim);
                if let Some(name) = name {
                    push(&out, now, format!("{name} {data}"));
                }
            }
        }
    });
    Ok(seen)
}

fn push(seen: &Seen, at: Instant, what: String) {
    seen.lock()
        .unwrap_or_else(|p| p.into_inner())
        .push((at, what));
}

fn snapshot(seen: &Seen) -> Vec<(Instant, String)> {
    seen.lock().unwrap_or_else(|p| p.into_inner()).clone()
}

/// Subscribe on the bus to the topics webd passes on, and record each notification
/// (its topic) on a thread of its own until `stop`.
fn subscribe(bus: &Path, stop: Arc<AtomicBool>) -> Res<Seen> {
    let mut s = UnixStream::connect(bus)?;
    s.set_read_timeout(Some(Duration::from_millis(100)))?;
    let topics = [
        busapi::topic::EVENT_ACCEPTED,
        busapi::topic::WORK_CHANGED,
        busapi::topic::EXT_STATE,
        busapi::topic::CONFIG_APPLIED,
    ];
    let mut line = serde_json::to_vec(&json!({"jsonrpc": "2.0", "id": 1,
        "method": "bus.subscribe", "params": {"topics": topics}}))?;
    line.push(b'\n');
    s.write_all(&line)?;
    let mut reader = BufReader::new(s);
    let mut answer = String::new();
    reader.read_line(&mut answer)?;
    let v: Value = serde_json::from_str(&answer)?;
    if v.get("error").is_some() {
        return Err(format!("bus.subscribe: {v}").into());
    }
    let seen: Seen = Arc::new(Mutex::new(Vec::new()));
    let out = seen.clone();
    std::thread::spawn(move || {
        let mut line = String::new();
        while !stop.load(Ordering::Relaxed) {
            match reader.read_line(&mut line) {
                Ok(0) => break,
                Ok(_) if line.ends_with('\n') => {
                    let now = Instant::now();
                    if let Ok(v) = serde_json::from_str::<Value>(&line) {
                        if let (Some(m), None) = (v["method"].as_str(), v.get("id")) {
                            push(&out, now, m.to_owned());
                        }
                    }
                    line.clear();
                }
                // A part of a line: the rest comes with the next read.
                Ok(_) => {}
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ) => {}
                Err(_) => break,
            }
        }
    });
    Ok(seen)
}

/// The page re-reads a browser makes from `changed` events arriving at `times`:
/// `app.js` reads the page `PAGE_DEBOUNCE` after a `changed` with none after it
/// meanwhile.
fn rereads(times: &[Instant]) -> usize {
    times
        .windows(2)
        .filter(|w| w[1].duration_since(w[0]) >= PAGE_DEBOUNCE)
        .count()
        + usize::from(!times.is_empty())
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

struct Live {
    deliveries_2xx: u64,
    works_made: usize,
    nudges: Vec<(String, usize)>,
    nudges_total: usize,
    broker_notifications: u64,
    broker_dropped: u64,
    changed: Vec<usize>,
    rereads: Vec<usize>,
    changed_before: usize,
    min_gap: Option<Duration>,
    to_last_changed: Duration,
    to_last_nudge: Duration,
    stream_errors: Vec<String>,
}

fn live(suite: &oc_systest::Suite, token: &str, before: usize) -> Res<Live> {
    let stop = Arc::new(AtomicBool::new(false));
    let nudges = subscribe(&suite.bus, stop.clone())?;
    let mut streams = Vec::new();
    for _ in 0..STREAMS {
        streams.push(open_stream(suite.web, token, stop.clone())?);
    }
    let deadline = Instant::now() + HANG;
    while streams
        .iter()
        .any(|s| !snapshot(s).iter().any(|(_, e)| e.starts_with("hello")))
    {
        if Instant::now() > deadline {
            return Err("the streams did not say hello".into());
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let idle = idle_before_burst();
    progress(&format!(
        "{STREAMS} streams open; quiet for {idle:?}, then a burst of {BURST} deliveries"
    ));
    std::thread::sleep(idle);
    let notif_before = bus_counter(suite, "notifications")?;
    let dropped_before = bus_counter(suite, "dropped")?;
    let (released, deliveries_2xx) = burst(suite.http)?;
    // Settled: every Work made, and nothing new on any stream for QUIET.
    let works_made = loop {
        let made = works(suite)?.len().saturating_sub(before);
        let last = streams
            .iter()
            .filter_map(|s| snapshot(s).last().map(|(t, _)| *t))
            .chain(snapshot(&nudges).last().map(|(t, _)| *t))
            .max()
            .unwrap_or(released)
            .max(released);
        if made >= deliveries_2xx as usize && last.elapsed() >= QUIET {
            break made;
        }
        if released.elapsed() > HANG {
            return Err(format!("the burst did not settle: {made} Works made").into());
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let broker_notifications = bus_counter(suite, "notifications")?.saturating_sub(notif_before);
    let broker_dropped = bus_counter(suite, "dropped")?.saturating_sub(dropped_before);
    stop.store(true, Ordering::Relaxed);

    let seen_nudges: Vec<(Instant, String)> = snapshot(&nudges)
        .into_iter()
        .filter(|(t, _)| *t >= released)
        .collect();
    let mut by_topic: std::collections::BTreeMap<String, usize> = Default::default();
    for (_, topic) in &seen_nudges {
        *by_topic.entry(topic.clone()).or_default() += 1;
    }
    let (mut changed, mut reread, mut changed_before) = (Vec::new(), Vec::new(), 0);
    let (mut min_gap, mut last_changed) = (None::<Duration>, released);
    let mut stream_errors = Vec::new();
    for s in &streams {
        let events = snapshot(s);
        stream_errors.extend(
            events
                .iter()
                .filter(|(_, e)| e.starts_with("error"))
                .map(|(_, e)| e.clone()),
        );
        changed_before += events
            .iter()
            .filter(|(t, e)| *t < released && e.starts_with("changed"))
            .count();
        let times: Vec<Instant> = events
            .iter()
            .filter(|(t, e)| *t >= released && e.starts_with("changed"))
            .map(|(t, _)| *t)
            .collect();
        for w in times.windows(2) {
            let gap = w[1].duration_since(w[0]);
            min_gap = Some(min_gap.map_or(gap, |m| m.min(gap)));
        }
        if let Some(t) = times.last() {
            last_changed = last_changed.max(*t);
        }
        changed.push(times.len());
        reread.push(rereads(&times));
    }
    Ok(Live {
        deliveries_2xx,
        works_made,
        nudges_total: seen_nudges.len(),
        to_last_nudge: seen_nudges
            .last()
            .map_or(Duration::ZERO, |(t, _)| t.duration_since(released)),
        nudges: by_topic.into_iter().collect(),
        broker_notifications,
        broker_dropped,
        changed,
        rereads: reread,
        changed_before,
        min_gap,
        to_last_changed: last_changed.duration_since(released),
        stream_errors,
    })
}

/// `open-conduit web login --name bench`, as an operator runs it: the token.
fn login(exe: &Path, suite: &oc_systest::Suite) -> Res<String> {
    let out = std::process::Command::new(exe)
        .args(["open-conduit", "web", "login", "--name", "bench", "--state"])
        .arg(suite.dir.join("state"))
        .output()?;
    if !out.status.success() {
        return Err(format!("web login: {}", String::from_utf8_lossy(&out.stderr)).into());
    }
    Ok(String::from_utf8(out.stdout)?.trim().to_owned())
}

/// Check one answer of each route before timing them: what a user would see.
fn check(suite: &oc_systest::Suite, token: &str, id: &str) -> Res<()> {
    let mut c = Client::new(suite.web, token);
    let (status, body) = c.get("/api/works?limit=50")?;
    let v: Value = serde_json::from_slice(&body)?;
    let n = v["works"].as_array().map_or(0, Vec::len);
    if status != 200 || n != 50 {
        return Err(format!("GET /api/works?limit=50: {status}, {n} Works").into());
    }
    let (status, body) = c.get(&format!("/api/works/{id}"))?;
    let v: Value = serde_json::from_slice(&body)?;
    if status != 200 || v["work"]["id"] != id {
        return Err(format!("GET /api/works/{id}: {status} {v}").into());
    }
    let (status, body) = c.get("/works")?;
    let html = String::from_utf8_lossy(&body);
    if status != 200 || !html.contains("web:bench") || !html.contains("/works/") {
        return Err(format!("GET /works: {status} {html}").into());
    }
    Ok(())
}

struct Row {
    route: &'static str,
    clients: usize,
    loaded: Loaded,
}

pub fn run(as_json: bool) -> Res<()> {
    let load_start = loadavg();
    let exe = std::env::current_exe()?;
    let packages = oc_systest::Suite::first_party();
    let suite = oc_systest::Suite::new(&exe, "bench-web", &packages)?;
    progress("starting the suite");
    suite.start_all()?;
    std::fs::write(suite.dir.join("secret"), SECRET)?;
    let config = json!({
        // Nothing runs: the Works stay as the routes made them.
        "settings": {"job_concurrency": 0},
        "connections": [{"name": "hooks", "type": "webhook",
            "secret_refs": {"secret": format!("file:{}", suite.dir.join("secret").display())}}],
        "scopes": [{"id": SCOPE,
            "entries": [{"type": "webhook", "name": "in", "connection": "hooks",
                "config": {"path": PATH, "delivery_id": {"header": "X-Delivery-Id"},
                           "correlate": "/number"}}],
            "routes": [{"handler": "webhook", "binding": "run", "config": {"entry": "in"}}],
            "bindings": [{"name": "run", "executor": "shell",
                "config": {"command": ["/bin/true"]}}]}]
    });
    suite.apply_config(&config, PATH)?;
    suite.start(oc_systest::Daemon::Webd)?;
    let token = login(&exe, &suite)?;

    progress(&format!("{FILL} deliveries, a Work each"));
    let t = Instant::now();
    let filled = fill(suite.http)?;
    if filled != FILL {
        return Err(format!("{filled} of {FILL} deliveries answered 2xx").into());
    }
    let ids = wait_for_works(&suite, FILL as usize)?;
    let fill_time = t.elapsed();
    check(&suite, &token, &ids[0])?;

    let routes = [
        Route {
            name: "GET /api/works?limit=50",
            paths: Arc::new(vec!["/api/works?limit=50".to_owned()]),
        },
        Route {
            name: "GET /api/works/{id}",
            paths: Arc::new(ids.iter().map(|id| format!("/api/works/{id}")).collect()),
        },
        Route {
            name: "GET /works (HTML)",
            paths: Arc::new(vec!["/works".to_owned()]),
        },
    ];

    progress("bus calls a request makes");
    let idle_before = bus_requests(&suite)?;
    let t = Instant::now();
    std::thread::sleep(Duration::from_secs(1));
    let idle_per_s =
        bus_requests(&suite)?.saturating_sub(idle_before) as f64 / t.elapsed().as_secs_f64();
    let mut calls = Vec::new();
    for r in &routes {
        calls.push(bus_calls_per_request(&suite, &token, &r.paths, idle_per_s)?);
    }

    let webd = suite
        .pid(oc_systest::Daemon::Webd)
        .ok_or("webd is not running")?;
    let storaged = suite
        .pid(oc_systest::Daemon::Storaged)
        .ok_or("storaged is not running")?;
    let mut rows = Vec::new();
    // CPU µs a request, of webd and of storaged (warm-up included on both sides).
    let mut cpu_per = Vec::new();
    for r in &routes {
        for clients in [1, 8] {
            progress(&format!("{} with {clients} client(s)", r.name));
            let before = (cpu_s(webd), cpu_s(storaged));
            let loaded = load(suite.web, &token, r, clients)?;
            let per = |now: f64, then: f64| match loaded.total {
                0 => 0.0,
                n => (now - then) * 1e6 / n as f64,
            };
            cpu_per.push((per(cpu_s(webd), before.0), per(cpu_s(storaged), before.1)));
            rows.push(Row {
                route: r.name,
                clients,
                loaded,
            });
        }
    }

    progress("live streams");
    let live = live(&suite, &token, ids.len())?;
    let per_page_calls = calls[2];
    drop(suite);
    let load = Load::since(load_start);

    let non_200: u64 = rows.iter().map(|r| r.loaded.non_200).sum();
    let min_max = |v: &[usize]| {
        (
            v.iter().min().copied().unwrap_or(0),
            v.iter().max().copied().unwrap_or(0),
        )
    };
    let (changed_min, changed_max) = min_max(&live.changed);
    let (reread_min, reread_max) = min_max(&live.rereads);
    let rereads_all: usize = live.rereads.iter().sum();
    if as_json {
        let mut out = json!({
            "machine": machine(),
            "works": FILL,
            "fill_s": fill_time.as_secs_f64(),
            "reads": rows.iter().zip(&cpu_per).map(|(r, cpu)| json!({
                "route": r.route,
                "clients": r.clients,
                "requests_per_s": r.loaded.per_s.round(),
                "p50_ms": millis(r.loaded.p50),
                "p99_ms": millis(r.loaded.p99),
                "non_200": r.loaded.non_200,
                "answer_bytes": r.loaded.bytes,
                "webd_cpu_us_per_request": cpu.0.round(),
                "storaged_cpu_us_per_request": cpu.1.round(),
            })).collect::<Vec<_>>(),
            "bus_calls_per_request": routes.iter().zip(&calls)
                .map(|(r, c)| (r.name.to_owned(), json!(c)))
                .collect::<serde_json::Map<String, Value>>(),
            "suite_idle_bus_calls_per_s": idle_per_s,
            "live": {
                "streams": STREAMS,
                "idle_before_burst_s": idle_before_burst().as_secs_f64(),
                "burst_deliveries": BURST,
                "burst_deliveries_2xx": live.deliveries_2xx,
                "works_made": live.works_made,
                "nudges_on_webd_topics": live.nudges_total,
                "nudges_by_topic": live.nudges.iter().cloned().collect::<std::collections::BTreeMap<_, _>>(),
                "broker_notifications_all_topics": live.broker_notifications,
                "broker_dropped": live.broker_dropped,
                "changed_per_stream": live.changed,
                "page_rereads_per_stream": live.rereads,
                "changed_before_burst": live.changed_before,
                "shortest_gap_between_changed_ms": live.min_gap.map(millis),
                "burst_to_last_nudge_ms": millis(live.to_last_nudge),
                "burst_to_last_changed_ms": millis(live.to_last_changed),
                "bus_calls_per_page_reread": per_page_calls,
                "stream_errors": live.stream_errors,
            },
        });
        load.add_to(&mut out);
        println!("{}", serde_json::to_string_pretty(&out)?);
    } else {
        println!("machine: {}", machine());
        println!("{}", load.line());
        println!(
            "{FILL} Works made by deliveries in {:.1} s; reads over {:.0} s each after {:.1} s of warm-up",
            fill_time.as_secs_f64(),
            RUN.as_secs_f64(),
            WARMUP.as_secs_f64()
        );
        println!();
        println!("| request | clients | requests/s | p50 | p99 | CPU per request: webd, storaged | answer | bus calls per request |");
        println!("| --- | --- | --- | --- | --- | --- | --- | --- |");
        for (i, (r, cpu)) in rows.iter().zip(&cpu_per).enumerate() {
            println!(
                "| {} | {} | {:.0} | {:.2} ms | {:.2} ms | {:.0} µs, {:.0} µs | {:.1} KiB | {} |",
                r.route,
                r.clients,
                r.loaded.per_s,
                millis(r.loaded.p50),
                millis(r.loaded.p99),
                cpu.0,
                cpu.1,
                r.loaded.bytes as f64 / 1024.0,
                calls[i / 2]
            );
        }
        println!();
        println!(
            "| live streams ({STREAMS} open on /api/stream, quiet {:.0} s before the burst) | value |",
            idle_before_burst().as_secs_f64()
        );
        println!("| --- | --- |");
        println!(
            "| deliveries in the burst (answered 2xx) | {BURST} ({}) |",
            live.deliveries_2xx
        );
        println!("| Works made | {} |", live.works_made);
        let topics: Vec<String> = live
            .nudges
            .iter()
            .map(|(t, n)| format!("{t} {n}"))
            .collect();
        println!(
            "| nudges published on webd's topics | {} ({}) |",
            live.nudges_total,
            topics.join(", ")
        );
        println!(
            "| `changed` events per stream | {changed_min}–{changed_max} ({:?}) |",
            live.changed
        );
        println!(
            "| page re-reads per open page (app.js's 200 ms delay) | {reread_min}–{reread_max}; {rereads_all} for the {STREAMS} pages, {:.0} bus calls |",
            rereads_all as f64 * per_page_calls
        );
        println!(
            "| shortest gap between two `changed` on a stream | {} |",
            live.min_gap
                .map_or("n/a".to_owned(), |g| format!("{:.1} ms", millis(g)))
        );
        println!(
            "| burst sent → last nudge / last `changed` | {:.0} ms / {:.0} ms |",
            millis(live.to_last_nudge),
            millis(live.to_last_changed)
        );
        println!(
            "bus: {} notifications on all topics during the burst, {} dropped; the suite's own calls while idle {:.1}/s; `changed` before the burst: {}",
            live.broker_notifications, live.broker_dropped, idle_per_s, live.changed_before
        );
        if !live.stream_errors.is_empty() {
            println!("stream errors: {:?}", live.stream_errors);
        }
    }
    if non_200 > 0 {
        return Err(format!("{non_200} reads were not answered 200").into());
    }
    if live.deliveries_2xx != BURST {
        return Err(format!(
            "{} of {BURST} burst deliveries answered 2xx",
            live.deliveries_2xx
        )
        .into());
    }
    Ok(())
}
