//! The SQLite WAL and the locks on it: a write that finds the database locked
//! waits for the lock rather than failing, and a WAL grown under load is cut back
//! once the store is idle.

#![allow(clippy::unwrap_used)]

use std::time::{Duration, Instant};
use storaged::{Limits, Store};

fn temp_dir(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("oc-store-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

async fn put(store: &Store, key: String, value: String) {
    store
        .write(move |conn| {
            conn.execute(
                "INSERT INTO kv (namespace, key, value, version, updated_at) VALUES ('t', ?1, ?2, 'v', 'now')",
                [key.as_str(), value.as_str()],
            )?;
            Ok(())
        })
        .await
        .unwrap();
}

/// Another connection holds the write lock for 300 ms (as the checkpoint thread
/// does, briefly, when it cuts the WAL back, or an operator's backup): a write
/// made meanwhile waits and commits once the lock is free, answered after it, and
/// is kept.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_waits_for_a_lock_held_elsewhere() {
    let dir = temp_dir("wal-lock");
    let store = Store::open(&dir, Limits::default()).unwrap();
    put(&store, "before".into(), "1".into()).await;
    let db = dir.join("db/conduit.db");
    let (locked_tx, locked_rx) = std::sync::mpsc::channel();
    let holder = std::thread::spawn(move || {
        let c = rusqlite::Connection::open(&db).unwrap();
        c.execute_batch("BEGIN IMMEDIATE").unwrap();
        locked_tx.send(()).unwrap();
        std::thread::sleep(Duration::from_millis(300));
        let releasing = Instant::now();
        c.execute_batch("COMMIT").unwrap();
        releasing
    });
    locked_rx.recv().unwrap();
    put(&store, "during".into(), "2".into()).await;
    let answered = Instant::now();
    let releasing = holder.join().unwrap();
    assert!(
        answered > releasing,
        "the write was answered while another connection held the write lock"
    );
    let kept: i64 = store
        .read(|conn| {
            Ok(conn.query_row(
                "SELECT count(*) FROM kv WHERE key IN ('before', 'during')",
                [],
                |r| r.get(0),
            )?)
        })
        .await
        .unwrap();
    assert_eq!(kept, 2);
    store.close();
    let _ = std::fs::remove_dir_all(&dir);
}

/// Writes far past the WAL's bound: the log starts over again and again (the
/// file, grown past four times the bound, is cut back to that each time); once
/// the writes stop, the checkpoint thread cuts the file back to nothing, and
/// every write is still there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_wal_is_cut_back_once_writes_stop() {
    let dir = temp_dir("wal-idle");
    let limit: u64 = 256 * 1024;
    let limits = Limits {
        wal_restart_bytes: limit,
        ..Limits::default()
    };
    let store = Store::open(&dir, limits).unwrap();
    let wal = dir.join("db/conduit.db-wal");
    let size = || std::fs::metadata(&wal).map(|m| m.len()).unwrap_or(0);
    let value = "v".repeat(8 * 1024);
    let began = Instant::now();
    let (mut written, mut n, mut last, mut cut) = (0u64, 0u64, 0u64, 0u32);
    while written < 40 * limit || began.elapsed() < Duration::from_secs(3) {
        put(&store, format!("k{n}"), value.clone()).await;
        written += value.len() as u64;
        n += 1;
        // Started over past four times the bound, the file is cut back to that.
        let now = size();
        if now < last {
            cut += 1;
        }
        last = now;
    }
    assert!(
        cut >= 2,
        "the WAL never started over ({cut} times) in {written} bytes written (bound {limit}); it is {last} bytes"
    );
    // Idle now: within a few rounds of the checkpoint thread (500 ms each) the
    // file is cut back. The deadline only bounds a failing run.
    let deadline = Instant::now() + Duration::from_secs(30);
    while size() > 0 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(
        size(),
        0,
        "the WAL was not cut back once the store was idle"
    );
    let kept: i64 = store
        .read(|conn| Ok(conn.query_row("SELECT count(*) FROM kv", [], |r| r.get(0))?))
        .await
        .unwrap();
    assert_eq!(kept as u64, n);
    store.close();
    let _ = std::fs::remove_dir_all(&dir);
}
