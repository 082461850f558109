//! The suite on PostgreSQL: its database stopped for 10 s while deliveries
//! arrive. Meanwhile ingressd answers 503 (nothing is acknowledged that is not
//! kept); after the restart storaged reconnects by itself and every delivery
//! answered 2xx, before, after, or redelivered once the database is back, is
//! kept once. And two storaged on one database, one of them frozen inside a
//! write: the server ends its session by storaged's own bounds, so the other
//! goes on committing after a few seconds (issue 47).

#![allow(clippy::unwrap_used)]

mod common;

use common::{deliver, hook_events, started_with, wait_within};
use oc_systest::{Daemon, Suite};
use serde_json::json;
use std::collections::BTreeSet;
use std::time::{Duration, Instant};

/// A suite whose storaged keeps its database in `url`.
fn on_postgres(name: &str, url: &str) -> Suite {
    started_with(name, |suite| {
        let etc = suite.dir.join("etc/storaged");
        std::fs::create_dir_all(&etc).unwrap();
        std::fs::write(suite.dir.join("pg.url"), url).unwrap();
        let config = json!({"settings": {"storage": {
            "backend": "postgres",
            "url_ref": format!("file:{}", suite.dir.join("pg.url").display()),
        }}});
        std::fs::write(etc.join("config.json"), config.to_string()).unwrap();
        suite.set_args(
            Daemon::Storaged,
            &["--config-dir", &etc.display().to_string()],
        );
    })
}

fn body(n: usize) -> Vec<u8> {
    json!({"number": n, "text": format!("delivery {n}")})
        .to_string()
        .into_bytes()
}

/// Deliver until answered 2xx (a 503 is the sender's cue to try again).
fn deliver_until_kept(suite: &Suite, id: &str, n: usize) {
    wait_within(
        &format!("{id} answered 2xx"),
        Duration::from_secs(60),
        || {
            let r = deliver(suite, id, &body(n)).ok()?;
            match r.status {
                200..=299 => Some(()),
                503 => {
                    std::thread::sleep(Duration::from_millis(200));
                    None
                }
                other => panic!("{id}: answered {other}: {}", r.text()),
            }
        },
    )
}

#[test]
fn a_database_stopped_for_ten_seconds_is_503_meanwhile_and_nothing_answered_2xx_is_lost() {
    if oc_pgtest::unavailable().is_some() {
        // Say why, or fail under OC_REQUIRE_PEERS=1.
        let _ = oc_pgtest::shared_or_skip("postgres outage");
        return;
    }
    // A cluster of the test's own: it is stopped and started again.
    let cluster = oc_pgtest::Cluster::start().unwrap();
    let url = cluster.create_database("outage").unwrap();
    let suite = on_postgres("pg-outage", &url);
    let check = suite.call("store.check", json!({})).unwrap();
    assert!(
        check["database"]
            .as_str()
            .unwrap_or_default()
            .starts_with("postgres 127.0.0.1:"),
        "{check}"
    );

    let mut kept = BTreeSet::new();
    for n in 0..20 {
        let id = format!("before-{n}");
        deliver_until_kept(&suite, &id, n);
        kept.insert(id);
    }

    cluster.stop();
    let down = Instant::now();
    let mut refused = Vec::new();
    let mut n = 100;
    while down.elapsed() < Duration::from_secs(10) {
        let id = format!("during-{n}");
        let r = deliver(&suite, &id, &body(n)).unwrap();
        assert_eq!(
            r.status,
            503,
            "{id} while the database is down: {} {}",
            r.status,
            r.text()
        );
        assert!(r.header("retry-after").is_some(), "{id}: no Retry-After");
        refused.push((id, n));
        n += 1;
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(
        refused.len() >= 20,
        "only {} deliveries tried",
        refused.len()
    );
    cluster.run().unwrap();

    // storaged reconnects by itself; the senders' redeliveries are kept.
    for n in 0..20 {
        let id = format!("after-{n}");
        deliver_until_kept(&suite, &id, 1000 + n);
        kept.insert(id);
    }
    for (id, n) in &refused {
        deliver_until_kept(&suite, id, *n);
        kept.insert(id.clone());
    }

    let events = hook_events(&suite);
    let ids: Vec<String> = events
        .iter()
        .map(|e| e["delivery_id"].as_str().unwrap_or_default().to_string())
        .collect();
    let unique: BTreeSet<String> = ids.iter().cloned().collect();
    assert_eq!(ids.len(), unique.len(), "a delivery kept twice: {ids:?}");
    assert_eq!(unique, kept, "kept events differ from the 2xx answers");
    // storaged said what happened.
    let log = suite.log(Daemon::Storaged);
    assert!(log.contains("the database connection is lost"), "{log}");
    assert!(log.contains("the database connection is back"), "{log}");
}

/// A host of its own on `url`: a broker and a storaged, nothing else (the
/// writes are the test's own `store.kv_commit`s).
fn store_host(name: &str, url: &str) -> Suite {
    let suite = Suite::new(std::path::Path::new(common::BIN), name, &[]).unwrap();
    let etc = suite.dir.join("etc/storaged");
    std::fs::create_dir_all(&etc).unwrap();
    std::fs::write(suite.dir.join("pg.url"), url).unwrap();
    let config = json!({"settings": {"storage": {
        "backend": "postgres",
        "url_ref": format!("file:{}", suite.dir.join("pg.url").display()),
    }}});
    std::fs::write(etc.join("config.json"), config.to_string()).unwrap();
    suite.set_args(
        Daemon::Storaged,
        &["--config-dir", &etc.display().to_string()],
    );
    suite.start(Daemon::Broker).unwrap();
    suite.start(Daemon::Storaged).unwrap();
    suite
}

/// One write: the key `key` of the namespace `hung`.
fn put(suite: &Suite, key: &str) -> Result<(), serde_json::Value> {
    let req: busapi::store::commit::KvCommitRequest = serde_json::from_value(json!({
        "owner": "hung",
        "puts": [{"key": key, "value": {"k": key}}],
    }))
    .unwrap();
    suite.call_typed(&req).map(|_| ())
}

/// What a writer thread saw: each write answered OK (key, when), and each
/// failure (key, error).
#[derive(Default)]
struct Seen {
    ok: Vec<(String, Instant)>,
    failed: Vec<(String, String)>,
}

/// Write `<prefix>-<n>` to `suite` one after the other until `stop`.
fn writer(
    suite: std::sync::Arc<Suite>,
    prefix: String,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    seen: std::sync::Arc<std::sync::Mutex<Seen>>,
) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        let mut n = 0u64;
        while !stop.load(std::sync::atomic::Ordering::SeqCst) {
            let key = format!("{prefix}-{n}");
            n += 1;
            let r = put(&suite, &key);
            let mut seen = seen.lock().unwrap();
            match r {
                Ok(()) => seen.ok.push((key, Instant::now())),
                Err(e) => seen.failed.push((key, e.to_string())),
            }
        }
    })
}

/// The longest time between two writes answered OK, of those answered in
/// `from..to` (and the one before the first of them).
fn longest_gap(seen: &Seen, from: Instant, to: Instant) -> Duration {
    let mut times: Vec<Instant> = seen.ok.iter().map(|(_, t)| *t).collect();
    times.sort();
    let mut longest = Duration::ZERO;
    let mut last = from;
    for t in times.into_iter().filter(|t| *t > from && *t <= to) {
        longest = longest.max(t - last);
        last = t;
    }
    longest.max(to.saturating_duration_since(last))
}

/// Two hosts (each a broker and a storaged) on one PostgreSQL database, both
/// writing all along; host a's storaged is stopped (SIGSTOP) at a moment its
/// writer's session sits inside a write transaction holding the suite's write
/// lock (`pg_stat_activity` `idle in transaction`, `pg_locks` granted: frozen
/// again until one freeze lands there). The server ends that session by
/// storaged's own `idle_in_transaction_session_timeout` while the process is
/// still stopped; host b goes on committing (its longest gap is printed); once
/// a is let go it reconnects and writes again, and every write either host
/// answered OK is in the database.
#[test]
fn a_storaged_frozen_inside_a_write_does_not_hold_the_write_lock_for_long() {
    use nix::sys::signal::{kill, Signal};
    use nix::unistd::Pid;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::{Arc, Mutex};
    let Some(cluster) = oc_pgtest::shared_or_skip("hung writer") else {
        return;
    };
    let url = cluster.create_database("hung").unwrap();
    let db = url
        .rsplit('/')
        .next()
        .and_then(|t| t.split('?').next())
        .unwrap()
        .to_string();
    let a = Arc::new(store_host(
        "pg-hung-a",
        &format!("{url}&application_name=oc_hung_a"),
    ));
    let b = Arc::new(store_host(
        "pg-hung-b",
        &format!("{url}&application_name=oc_hung_b"),
    ));
    let a_pid = Pid::from_raw(i32::try_from(a.pid(Daemon::Storaged).unwrap()).unwrap());
    let sql = |q: &str| cluster.psql(&db, q).unwrap();
    // The write lock as pg_locks shows a bigint key: its high and low halves.
    let key = storaged::db::WRITE_LOCK;
    let (high, low) = (key >> 32, key & 0xffff_ffff);
    let holding = format!(
        "SELECT a.pid FROM pg_stat_activity a JOIN pg_locks l ON l.pid = a.pid
          WHERE a.datname = '{db}' AND a.application_name = 'oc_hung_a'
            AND a.state = 'idle in transaction' AND l.locktype = 'advisory'
            AND l.granted AND l.classid = {high} AND l.objid = {low}"
    );

    let stop = Arc::new(AtomicBool::new(false));
    let (seen_a, seen_b) = (
        Arc::new(Mutex::new(Seen::default())),
        Arc::new(Mutex::new(Seen::default())),
    );
    let mut threads = Vec::new();
    for i in 0..2 {
        threads.push(writer(
            a.clone(),
            format!("a{i}"),
            stop.clone(),
            seen_a.clone(),
        ));
    }
    threads.push(writer(b.clone(), "b".into(), stop.clone(), seen_b.clone()));
    wait_within("both hosts writing", Duration::from_secs(60), || {
        (seen_a.lock().unwrap().ok.len() >= 20 && seen_b.lock().unwrap().ok.len() >= 20)
            .then_some(())
    });

    // Freeze a until a freeze lands inside a write transaction.
    let mut frozen = None;
    for attempt in 0..60u64 {
        std::thread::sleep(Duration::from_millis(20 + (attempt * 37) % 150));
        kill(a_pid, Signal::SIGSTOP).unwrap();
        let at = Instant::now();
        // What the server finishes of a statement sent before the stop, it
        // finishes at once; then the session's state is what it stays.
        std::thread::sleep(Duration::from_millis(100));
        let pid = sql(&holding);
        if !pid.is_empty() {
            frozen = Some((at, pid, attempt + 1));
            break;
        }
        kill(a_pid, Signal::SIGCONT).unwrap();
    }
    let Some((frozen_at, session, attempts)) = frozen else {
        stop.store(true, Ordering::SeqCst);
        panic!("no freeze of 60 landed inside a write transaction");
    };

    // The server ends the stopped host's session while it is still stopped.
    wait_within(
        "the stopped host's session ended by the server",
        Duration::from_secs(30),
        || {
            let n = sql(&format!(
                "SELECT count(*) FROM pg_stat_activity WHERE pid = {session}"
            ));
            (n == "0").then_some(())
        },
    );
    let ended = frozen_at.elapsed();
    // Host b commits after the session ended (within a bound that only
    // guards against a hang), and a second more, to see b's pace again.
    let b_before = seen_b.lock().unwrap().ok.len();
    wait_within(
        "host b committing after the freeze",
        Duration::from_secs(30),
        || (seen_b.lock().unwrap().ok.len() > b_before).then_some(()),
    );
    std::thread::sleep(Duration::from_secs(1));
    let gap = longest_gap(&seen_b.lock().unwrap(), frozen_at, Instant::now());
    assert!(
        seen_b.lock().unwrap().failed.is_empty(),
        "host b's writes failed: {:?}",
        seen_b.lock().unwrap().failed
    );
    assert!(
        kill(a_pid, None).is_ok(),
        "host a's storaged is gone while stopped"
    );

    // Let a go: it finds its session lost, connects again and writes again.
    let a_before = seen_a.lock().unwrap().ok.len();
    let a_failed_before = seen_a.lock().unwrap().failed.len();
    kill(a_pid, Signal::SIGCONT).unwrap();
    let thawed = Instant::now();
    wait_within("host a writing again", Duration::from_secs(30), || {
        (seen_a.lock().unwrap().ok.len() >= a_before + 5).then_some(())
    });
    let back = thawed.elapsed();
    stop.store(true, Ordering::SeqCst);
    for t in threads {
        t.join().unwrap();
    }
    let seen_a = seen_a.lock().unwrap();
    let seen_b = seen_b.lock().unwrap();
    let failed_a: Vec<&(String, String)> = seen_a.failed[a_failed_before..].iter().collect();
    for (key, e) in &failed_a {
        // The writes in flight when the session went: answered unavailable
        // (the sender tries again), never OK.
        assert!(
            e.contains("unavailable") || e.contains("lost"),
            "{key}: {e}"
        );
    }
    assert!(
        seen_a.failed[..a_failed_before].is_empty(),
        "host a's writes failed before the freeze: {:?}",
        &seen_a.failed[..a_failed_before]
    );

    // Nothing either host answered OK is missing.
    let kept: BTreeSet<String> = sql("SELECT key FROM kv WHERE namespace = 'hung'")
        .lines()
        .map(str::to_string)
        .collect();
    let answered: BTreeSet<String> = seen_a
        .ok
        .iter()
        .chain(seen_b.ok.iter())
        .map(|(k, _)| k.clone())
        .collect();
    let missing: Vec<&String> = answered.difference(&kept).collect();
    assert!(missing.is_empty(), "answered OK but not kept: {missing:?}");
    let log = a.log(Daemon::Storaged);
    assert!(log.contains("the database connection is lost"), "{log}");
    assert!(log.contains("the database connection is back"), "{log}");
    assert!(
        cluster
            .log()
            .contains("terminating connection due to idle-in-transaction timeout"),
        "the server's log does not say it ended the session"
    );
    println!(
        "hung writer: the freeze landed inside a write on try {attempts}; the server ended the \
         stopped host's session {:.2} s after the freeze; host b's longest gap between two \
         commits {:.2} s ({} writes OK); host a wrote again {:.2} s after it was let go, {} \
         writes in flight answered unavailable ({} OK in all)",
        ended.as_secs_f64(),
        gap.as_secs_f64(),
        seen_b.ok.len(),
        back.as_secs_f64(),
        failed_a.len(),
        seen_a.ok.len(),
    );
}
