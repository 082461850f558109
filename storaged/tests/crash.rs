//! Crash safety with real processes: clients send accepts through the bus as fast
//! as they can while storaged is SIGKILLed at random moments and restarted, again
//! and again. Afterwards every accept that was answered OK is in the database
//! exactly once, and the database passes `PRAGMA integrity_check`.

#![allow(clippy::unwrap_used)]

use daemon::bus::{Bus, BusOptions};
use serde_json::{json, Value};
use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

const STORAGED: &str = env!("CARGO_BIN_EXE_open-conduit-storaged");

const HANG: Duration = Duration::from_secs(120);

fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("oc-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// A small deterministic generator (xorshift), seeded per run and printed, so a
/// failing run can be replayed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }
    fn between(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next() % (hi - lo)
    }
}

fn start_storaged(state: &Path, bus: &Path) -> Child {
    Command::new(STORAGED)
        .arg("--state")
        .arg(state)
        .arg("--bus")
        .arg(bus)
        .args(["--log", "stderr"])
        .env("OC_LOG", "warn")
        .stdin(Stdio::null())
        .spawn()
        .unwrap()
}

fn sigkill(child: &mut Child) {
    let _ = nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGKILL,
    );
    let _ = child.wait();
}

async fn start_broker(socket: &Path) -> tokio::task::JoinHandle<()> {
    let listener = tokio::net::UnixListener::bind(socket).unwrap();
    let broker = broker::Broker::new(broker::Config::default());
    tokio::spawn(async move {
        let _ = broker.serve(&listener).await;
    })
}

fn accept_params(delivery: &str) -> Value {
    json!({"events": [{
        "scope_id": "crash",
        "type": "crash.ping",
        "source": "crash",
        "delivery_id": delivery,
        "payload": {"delivery": delivery},
        "keys": [format!("k:{delivery}")],
    }]})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn answered_accepts_survive_sigkill_exactly_once() {
    let dir = temp_dir("crash");
    let state = dir.join("state");
    let socket = dir.join("bus.sock");
    let _broker = start_broker(&socket).await;
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64
        | 1;
    println!("crash test seed {seed}");
    let mut rng = Rng(seed);

    let mut storaged = start_storaged(&state, &socket);
    let answered: Arc<Mutex<HashSet<String>>> = Arc::new(Mutex::new(HashSet::new()));
    let attempted: Arc<Mutex<HashSet<String>>> = Arc::new(Mutex::new(HashSet::new()));
    let stop = Arc::new(AtomicBool::new(false));
    let mut writers = Vec::new();
    for w in 0..8 {
        let mut opts = BusOptions::client(&socket);
        opts.call_wait = Duration::from_secs(30);
        let bus = Bus::start(opts);
        let answered = answered.clone();
        let attempted = attempted.clone();
        let stop = stop.clone();
        writers.push(tokio::spawn(async move {
            let mut n = 0u64;
            while !stop.load(Ordering::SeqCst) {
                let delivery = format!("w{w}-{n}");
                n += 1;
                attempted.lock().unwrap().insert(delivery.clone());
                let params = accept_params(&delivery);
                let call = bus.call("store.events_accept", &params);
                match tokio::time::timeout(Duration::from_secs(30), call).await {
                    Ok(Ok(answer)) => {
                        assert_eq!(
                            answer["events"].as_array().map(Vec::len),
                            Some(1),
                            "{answer}"
                        );
                        answered.lock().unwrap().insert(delivery);
                    }
                    // Unavailable while storaged is down, or the connection broke
                    // mid-call: not answered OK, so nothing is promised.
                    Ok(Err(_)) | Err(_) => tokio::time::sleep(Duration::from_millis(5)).await,
                }
            }
        }));
    }
    for round in 0..6 {
        let wait = rng.between(100, 600);
        tokio::time::sleep(Duration::from_millis(wait)).await;
        let before = answered.lock().unwrap().len();
        sigkill(&mut storaged);
        println!("round {round}: killed storaged after {wait} ms ({before} answered so far)");
        storaged = start_storaged(&state, &socket);
    }
    // Let the last incarnation answer some more, then stop the writers.
    tokio::time::timeout(HANG, async {
        let target = answered.lock().unwrap().len() + 50;
        while answered.lock().unwrap().len() < target {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("storaged never came back");
    stop.store(true, Ordering::SeqCst);
    for w in writers {
        tokio::time::timeout(HANG, w).await.unwrap().unwrap();
    }
    sigkill(&mut storaged);

    let answered = answered.lock().unwrap().clone();
    let attempted = attempted.lock().unwrap().clone();
    assert!(
        answered.len() > 100,
        "too few accepts answered to mean anything: {}",
        answered.len()
    );
    let db = rusqlite::Connection::open(state.join("db/conduit.db")).unwrap();
    let integrity: String = db
        .query_row("PRAGMA integrity_check", [], |r| r.get(0))
        .unwrap();
    assert_eq!(integrity, "ok");
    let mut stmt = db
        .prepare(
            "SELECT delivery_id, count(*) FROM events WHERE source = 'crash' GROUP BY delivery_id",
        )
        .unwrap();
    let rows: Vec<(String, i64)> = stmt
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    let stored: HashSet<String> = rows.iter().map(|(d, _)| d.clone()).collect();
    for (delivery, count) in &rows {
        assert_eq!(*count, 1, "{delivery} stored {count} times");
        assert!(attempted.contains(delivery), "{delivery} was never sent");
    }
    let lost: Vec<&String> = answered.difference(&stored).collect();
    assert!(
        lost.is_empty(),
        "answered OK but not in the database: {lost:?}"
    );
    println!(
        "{} answered, {} stored, {} attempted",
        answered.len(),
        stored.len(),
        attempted.len()
    );
    let _ = std::fs::remove_dir_all(&dir);
}
