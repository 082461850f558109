//! `bench bus`: a trivial call from a client through the broker to a service and
//! back, against a unix-socket round trip measured in the same run as the floor.
//! Three processes, as in production: the broker and the service are this binary
//! re-executed (`__broker`, `__bus-probe`), the client is this process.

use crate::{loadavg, machine, median, micros, percentile, Load, Res};
use serde_json::json;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub const AS_BROKER: &str = "__broker";
pub const AS_PROBE: &str = "__bus-probe";
pub const AS_UNIX_ECHO: &str = "__unix-echo";

/// Connect to the socket given and write back every line read.
pub fn unix_echo(args: &[String]) -> i32 {
    let Some(path) = args.first() else { return 2 };
    let Ok(stream) = std::os::unix::net::UnixStream::connect(path) else {
        return 1;
    };
    let Ok(mut out) = stream.try_clone() else {
        return 1;
    };
    let mut input = BufReader::new(stream);
    let mut line = String::new();
    loop {
        line.clear();
        match input.read_line(&mut line) {
            Ok(0) | Err(_) => return 0,
            Ok(_) => {
                if out.write_all(line.as_bytes()).is_err() {
                    return 0;
                }
            }
        }
    }
}

struct Kill(Child);

impl Drop for Kill {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn floor(exe: &Path, dir: &Path) -> Res<Duration> {
    let path = dir.join("echo.sock");
    let listener = UnixListener::bind(&path)?;
    let _child = Kill(
        Command::new(exe)
            .args([AS_UNIX_ECHO, path.to_str().unwrap_or("")])
            .spawn()?,
    );
    let (stream, _) = listener.accept()?;
    let mut out = stream.try_clone()?;
    let mut input = BufReader::new(stream);
    let mut line = String::new();
    let mut samples = Vec::new();
    for i in 0..10_500 {
        let t = Instant::now();
        out.write_all(b"{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":1}\n")?;
        line.clear();
        input.read_line(&mut line)?;
        if i >= 500 {
            samples.push(t.elapsed());
        }
    }
    Ok(median(&mut samples))
}

async fn connect(socket: &Path) -> Res<protocol::Peer> {
    let stream = tokio::net::UnixStream::connect(socket).await?;
    let (r, w) = stream.into_split();
    Ok(protocol::connect(
        r,
        w,
        protocol::NoHandler,
        protocol::Options::named("bench client"),
    ))
}

struct Figures {
    floor: Duration,
    p50: Duration,
    p99: Duration,
    calls_per_s_64: f64,
}

async fn measure(exe: &Path, dir: &Path, floor: Duration) -> Res<Figures> {
    let socket: PathBuf = dir.join("bus.sock");
    let socket_arg = socket.to_str().ok_or("socket path")?.to_string();
    let _broker = Kill(
        Command::new(exe)
            .args([AS_BROKER, "--socket", &socket_arg, "--log", "stderr"])
            .env("OC_LOG", "warn")
            .stdin(Stdio::null())
            .spawn()?,
    );
    let mut probe = Command::new(exe)
        .args([AS_PROBE, "serve", &socket_arg, "probe", "probe"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .env("OC_LOG", "warn")
        .spawn()?;
    let stdout = probe.stdout.take().ok_or("probe stdout")?;
    let _probe = Kill(probe);
    let ready = tokio::task::spawn_blocking(move || {
        let mut line = String::new();
        let _ = BufReader::new(stdout).read_line(&mut line);
        line
    })
    .await?;
    if ready.trim() != "ready" {
        return Err("the probe service did not register".into());
    }
    eprintln!("bench bus: one caller");
    let client = connect(&socket).await?;
    let mut samples = Vec::with_capacity(10_000);
    for i in 0..10_500u32 {
        let t = Instant::now();
        client.call("probe.echo", &json!(i)).await?;
        if i >= 500 {
            samples.push(t.elapsed());
        }
    }
    eprintln!("bench bus: 64 concurrent callers");
    let mut callers = Vec::new();
    for _ in 0..64 {
        callers.push(connect(&socket).await?);
    }
    let run_for = Duration::from_secs(3);
    let start = Instant::now();
    let mut tasks = Vec::new();
    for caller in callers {
        tasks.push(tokio::spawn(async move {
            let mut n = 0u64;
            while start.elapsed() < run_for {
                if caller.call("probe.echo", &json!(n)).await.is_ok() {
                    n += 1;
                }
            }
            n
        }));
    }
    let mut total = 0u64;
    for t in tasks {
        total += t.await?;
    }
    let calls_per_s_64 = total as f64 / start.elapsed().as_secs_f64();
    Ok(Figures {
        floor,
        p50: percentile(&mut samples, 50.0),
        p99: percentile(&mut samples, 99.0),
        calls_per_s_64,
    })
}

pub fn run(as_json: bool) -> Res<()> {
    let load_start = loadavg();
    let exe = std::env::current_exe()?;
    let dir = std::env::temp_dir().join(format!("oc-bench-bus-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir)?;
    eprintln!("bench bus: unix socket floor");
    let floor = floor(&exe, &dir)?;
    // The client on one thread, as the CLI and the daemons' bus clients are.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let f = rt.block_on(measure(&exe, &dir, floor));
    let _ = std::fs::remove_dir_all(&dir);
    let f = f?;
    let load = Load::since(load_start);
    let ratio = |d: Duration| micros(d) / micros(f.floor);
    if as_json {
        let mut v = json!({
            "machine": machine(),
            "floor_unix_rtt_us": micros(f.floor),
            "hop_p50_us": micros(f.p50),
            "hop_p99_us": micros(f.p99),
            "calls_per_s_64": f.calls_per_s_64,
            "ratio_to_floor": {"hop_p50": ratio(f.p50), "hop_p99": ratio(f.p99)},
        });
        load.add_to(&mut v);
        println!("{v}");
        return Ok(());
    }
    println!("Bus: client → broker → service and back ({})", machine());
    println!("{}", load.line());
    println!();
    println!("| figure | value | × unix socket round trip |");
    println!("| --- | --- | --- |");
    println!(
        "| unix socket round trip (floor) | {:.1} µs | 1.0 |",
        micros(f.floor)
    );
    println!(
        "| call p50, one caller | {:.1} µs | {:.1} |",
        micros(f.p50),
        ratio(f.p50)
    );
    println!(
        "| call p99, one caller | {:.1} µs | {:.1} |",
        micros(f.p99),
        ratio(f.p99)
    );
    println!(
        "| calls per second, 64 concurrent callers | {:.0} | |",
        f.calls_per_s_64
    );
    Ok(())
}
