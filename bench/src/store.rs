//! `bench store`: durable accepts per second through the bus with 1, 16 and 64
//! concurrent writers, next to the single-row-transaction rate of a SQLite file on
//! the same disk (WAL, `synchronous=FULL`) measured in the same run; and `kv.get`
//! latency through the bus. Three processes: the broker and storaged (this binary
//! re-executed) and the clients (this process).
//!
//! `--backend postgres`: storaged on a PostgreSQL cluster the bench makes on the
//! same disk (Debian's server, default settings: `fsync` and
//! `synchronous_commit` on), and the floor is single-row transactions (one
//! autocommitted `INSERT` each) on that server over the same loopback TCP.
//!
//! Beside the rates, storaged's writer's own counts over each run (from
//! `store.metrics`): writes per commit group, and round trips to the database
//! server per group and per write (PostgreSQL; 0 on SQLite), which do not
//! depend on the machine.

use crate::bus::AS_BROKER;
use crate::{machine, micros, percentile, Res};
use busapi::store::{
    EventInput, EventsAcceptRequest, KvCommitRequest, KvGetRequest, KvPutItem, MetricsRequest,
    SequenceRequest,
};
use serde_json::json;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub const AS_STORAGED: &str = "__storaged";

struct Kill(Child);

impl Drop for Kill {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Where the bench's storaged keeps its database.
enum Db {
    Sqlite,
    Postgres {
        cluster: oc_pgtest::Cluster,
        url: String,
    },
}

/// Single-row transactions on PostgreSQL, one after another, for `run_for`.
fn pg_floor(url: &str, run_for: Duration) -> Res<f64> {
    let target = storaged::sql::PgTarget::parse(url)?;
    // The driver runs a runtime of its own: off this one.
    let rate = std::thread::scope(|s| {
        s.spawn(|| -> Result<f64, String> {
            let mut session = target.connect().map_err(|e| e.to_string())?;
            session
                .batch(
                    "CREATE TABLE IF NOT EXISTS floor (id BIGSERIAL PRIMARY KEY, v TEXT NOT NULL)",
                )
                .map_err(|e| e.to_string())?;
            let start = Instant::now();
            let mut n = 0u64;
            while start.elapsed() < run_for {
                let v = format!("row {n}");
                session
                    .execute("INSERT INTO floor (v) VALUES (?1)", &[&v])
                    .map_err(|e| e.to_string())?;
                n += 1;
            }
            Ok(n as f64 / start.elapsed().as_secs_f64())
        })
        .join()
        .unwrap_or_else(|_| Err("the floor thread panicked".into()))
    })?;
    Ok(rate)
}

/// Single-row transactions, one after another, for `run_for`.
fn floor(dir: &Path, run_for: Duration) -> Res<f64> {
    let conn = rusqlite::Connection::open(dir.join("floor.db"))?;
    conn.pragma_update(None, "journal_mode", "WAL")?;
    conn.pragma_update(None, "synchronous", "FULL")?;
    conn.execute_batch("CREATE TABLE IF NOT EXISTS t (id INTEGER PRIMARY KEY, v TEXT NOT NULL)")?;
    let start = Instant::now();
    let mut n = 0u64;
    while start.elapsed() < run_for {
        conn.execute_batch("BEGIN IMMEDIATE")?;
        conn.execute("INSERT INTO t (v) VALUES (?1)", [format!("row {n}")])?;
        conn.execute_batch("COMMIT")?;
        n += 1;
    }
    Ok(n as f64 / start.elapsed().as_secs_f64())
}

async fn client(socket: &Path) -> Res<protocol::Peer> {
    let stream = tokio::net::UnixStream::connect(socket).await?;
    let (r, w) = stream.into_split();
    Ok(protocol::connect(
        r,
        w,
        protocol::NoHandler,
        protocol::Options::named("bench"),
    ))
}

async fn accepts_per_s(socket: &Path, writers: usize, run_for: Duration, tag: &str) -> Res<f64> {
    let mut peers = Vec::new();
    for _ in 0..writers {
        peers.push(client(socket).await?);
    }
    let start = Instant::now();
    let mut tasks = Vec::new();
    for (w, peer) in peers.into_iter().enumerate() {
        let tag = tag.to_string();
        tasks.push(tokio::spawn(async move {
            let mut n = 0u64;
            while start.elapsed() < run_for {
                let delivery = format!("{tag}-{w}-{n}");
                let params = EventsAcceptRequest {
                    events: vec![EventInput {
                        scope_id: "bench".into(),
                        event_type: "bench.ping".into(),
                        source: "bench".into(),
                        delivery_id: Some(delivery),
                        payload: json!({ "n": n }),
                        ..EventInput::default()
                    }],
                    owner: None,
                    families: None,
                    scopes: None,
                };
                if peer.call_typed(&params).await.is_ok() {
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
    Ok(total as f64 / start.elapsed().as_secs_f64())
}

async fn measure(exe: &Path, dir: &Path, db: &Db) -> Res<serde_json::Value> {
    let socket = dir.join("bus.sock");
    let etc = dir.join("etc");
    std::fs::create_dir_all(&etc)?;
    if let Db::Postgres { url, .. } = db {
        std::fs::write(dir.join("pg.url"), url)?;
        let config = json!({"settings": {"storage": {"backend": "postgres",
            "url_ref": format!("file:{}", dir.join("pg.url").display())}}});
        std::fs::write(etc.join("config.json"), config.to_string())?;
    }
    let socket_s = socket.to_str().ok_or("socket path")?.to_string();
    let state = dir.join("state");
    let _broker = Kill(
        Command::new(exe)
            .args([AS_BROKER, "--socket", &socket_s, "--log", "stderr"])
            .env("OC_LOG", "warn")
            .stdin(Stdio::null())
            .spawn()?,
    );
    let _storaged = Kill(
        Command::new(exe)
            .args([
                AS_STORAGED,
                "--bus",
                &socket_s,
                "--log",
                "stderr",
                "--state",
            ])
            .arg(&state)
            .arg("--config-dir")
            .arg(&etc)
            .env("OC_LOG", "warn")
            .stdin(Stdio::null())
            .spawn()?,
    );
    // Wait until storaged serves.
    let probe = loop {
        if let Ok(p) = client(&socket).await {
            if p.call_typed(&SequenceRequest {}).await.is_ok() {
                break p;
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let run_for = Duration::from_secs(3);
    eprintln!("bench store: single-row transactions (floor)");
    let floor = match db {
        Db::Sqlite => floor(dir, run_for)?,
        Db::Postgres { url, .. } => pg_floor(url, run_for)?,
    };
    let mut rates = Vec::new();
    let mut groups = Vec::new();
    for writers in [1usize, 16, 64] {
        eprintln!("bench store: {writers} concurrent writers");
        let before = writer_totals(&probe).await?;
        rates.push(accepts_per_s(&socket, writers, run_for, &format!("w{writers}")).await?);
        groups.push(writer_totals(&probe).await?.since(&before));
    }
    eprintln!("bench store: kv.get");
    probe
        .call_typed(&KvCommitRequest {
            owner: "bench".into(),
            families: None,
            scopes: None,
            checks: Vec::new(),
            puts: vec![KvPutItem {
                namespace: String::new(),
                key: "k".into(),
                value: json!({"hello": "world"}),
            }],
            deletes: Vec::new(),
            emissions: Vec::new(),
        })
        .await?;
    let get = KvGetRequest {
        owner: "bench".into(),
        namespace: String::new(),
        key: "k".into(),
    };
    let mut samples = Vec::new();
    for i in 0..5500 {
        let t = Instant::now();
        probe.call_typed(&get).await?;
        if i >= 500 {
            samples.push(t.elapsed());
        }
    }
    let backend = match db {
        Db::Sqlite => "sqlite".to_string(),
        Db::Postgres { cluster, .. } => format!(
            "postgres ({}, default settings)",
            cluster
                .psql("postgres", "SHOW server_version")
                .unwrap_or_default()
        ),
    };
    Ok(json!({
        "machine": machine(),
        "backend": backend,
        "floor_single_txn_per_s": floor,
        "accepts_per_s_1": rates[0],
        "accepts_per_s_16": rates[1],
        "accepts_per_s_64": rates[2],
        "ratio_64_to_floor": rates[2] / floor,
        "writes_per_group_64": groups[2].writes_per_group(),
        "round_trips_per_group_64": groups[2].round_trips_per_group(),
        "round_trips_per_write_64": groups[2].round_trips_per_write(),
        "round_trips_per_write_1": groups[0].round_trips_per_write(),
        "kv_get_p50_us": micros(percentile(&mut samples, 50.0)),
        "kv_get_p99_us": micros(percentile(&mut samples, 99.0)),
    }))
}

/// storaged's writer so far, from `store.metrics`: groups committed, writes in
/// them, and round trips to the database server (PostgreSQL; 0 on SQLite).
#[derive(Debug, Clone, Copy, Default)]
struct WriterTotals {
    groups: f64,
    writes: f64,
    round_trips: f64,
}

impl WriterTotals {
    fn since(&self, before: &WriterTotals) -> WriterTotals {
        WriterTotals {
            groups: self.groups - before.groups,
            writes: self.writes - before.writes,
            round_trips: self.round_trips - before.round_trips,
        }
    }

    fn writes_per_group(&self) -> f64 {
        self.writes / self.groups.max(1.0)
    }

    fn round_trips_per_group(&self) -> f64 {
        self.round_trips / self.groups.max(1.0)
    }

    fn round_trips_per_write(&self) -> f64 {
        self.round_trips / self.writes.max(1.0)
    }
}

async fn writer_totals(probe: &protocol::Peer) -> Res<WriterTotals> {
    let text = probe.call_typed(&MetricsRequest {}).await?.text;
    let sample = |name: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
            .unwrap_or(0.0)
    };
    Ok(WriterTotals {
        groups: sample("oc_storaged_commit_groups_total"),
        writes: sample("oc_storaged_commit_writes_total"),
        round_trips: sample("oc_storaged_commit_round_trips_total"),
    })
}

/// The store alone, in this process (no bus): `OC_BENCH_ONLY=direct`.
async fn direct(dir: &Path) -> Res<()> {
    let store = storaged::Store::open(&dir.join("direct"), storaged::Limits::default())?;
    for writers in [1usize, 16, 64] {
        let start = Instant::now();
        let run_for = Duration::from_secs(2);
        let mut tasks = Vec::new();
        for w in 0..writers {
            let store = store.clone();
            tasks.push(tokio::spawn(async move {
                let mut n = 0u64;
                while start.elapsed() < run_for {
                    let req: storaged::events::EventsAcceptRequest = serde_json::from_value(json!({"events": [{
                        "scope_id": "bench", "type": "bench.ping", "source": "bench",
                        "delivery_id": format!("d{writers}-{w}-{n}"), "payload": {"n": n}, "keys": [],
                    }]}))
                    .unwrap_or_else(|e| panic!("{e}"));
                    if store.events_accept(req).await.is_ok() {
                        n += 1;
                    }
                }
                n
            }));
        }
        let mut total = 0;
        for t in tasks {
            total += t.await?;
        }
        let (groups, writes) = store.writer_counters();
        println!(
            "direct, {writers} writers: {:.0} accepts/s (so far {groups} groups, {writes} writes)",
            total as f64 / start.elapsed().as_secs_f64()
        );
    }
    Ok(())
}

pub fn run(as_json: bool, backend: &str) -> Res<()> {
    let exe = std::env::current_exe()?;
    // On the disk the state would live on: under the working directory's target,
    // not tmpfs.
    let dir = std::env::current_dir()?.join(format!("target/bench-store-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir)?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    if std::env::var("OC_BENCH_ONLY").as_deref() == Ok("direct") {
        let mt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()?;
        let r = mt.block_on(direct(&dir));
        let _ = std::fs::remove_dir_all(&dir);
        return r;
    }
    let db = match backend {
        "sqlite" => Db::Sqlite,
        "postgres" => {
            eprintln!(
                "bench store: starting a PostgreSQL cluster in {}",
                dir.display()
            );
            let cluster = oc_pgtest::Cluster::start_in(&dir)?;
            let url = cluster.create_database("bench")?;
            Db::Postgres { cluster, url }
        }
        other => return Err(format!("--backend {other}: sqlite or postgres").into()),
    };
    let result = rt.block_on(measure(&exe, &dir, &db));
    drop(db);
    let _ = std::fs::remove_dir_all(&dir);
    let v = result?;
    if as_json {
        println!("{v}");
        return Ok(());
    }
    let f = |k: &str| v[k].as_f64().unwrap_or(0.0);
    println!(
        "Store on {}: durable accepts through the bus ({})",
        v["backend"].as_str().unwrap_or_default(),
        machine()
    );
    println!();
    println!("| figure | value | × single-row transactions |");
    println!("| --- | --- | --- |");
    println!(
        "| single-row transactions per second (floor) | {:.0} | 1.0 |",
        f("floor_single_txn_per_s")
    );
    for w in [1, 16, 64] {
        let k = format!("accepts_per_s_{w}");
        println!(
            "| accepts per second, {w} writer{} | {:.0} | {:.1} |",
            if w == 1 { "" } else { "s" },
            f(&k),
            f(&k) / f("floor_single_txn_per_s")
        );
    }
    println!(
        "| writes per commit group, 64 writers | {:.1} | |",
        f("writes_per_group_64")
    );
    println!(
        "| round trips to the server per group, 64 writers | {:.1} | |",
        f("round_trips_per_group_64")
    );
    println!(
        "| round trips to the server per write, 64 writers (1 writer) | {:.2} ({:.2}) | |",
        f("round_trips_per_write_64"),
        f("round_trips_per_write_1")
    );
    println!(
        "| kv.get p50 through the bus | {:.1} µs | |",
        f("kv_get_p50_us")
    );
    println!(
        "| kv.get p99 through the bus | {:.1} µs | |",
        f("kv_get_p99_us")
    );
    Ok(())
}
