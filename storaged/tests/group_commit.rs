//! Group commit: concurrent writes share transactions, and one failing (or
//! panicking) write never fails another.

#![allow(clippy::unwrap_used)]

#[macro_use]
mod backend;
use backend::Backend;
use storaged::{Limits, Store, StoreError};

fn temp_dir(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("oc-store-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

fn put(conn: &storaged::sql::Connection, key: &str) -> Result<(), StoreError> {
    conn.execute(
        "INSERT INTO kv (namespace, key, value, version, updated_at) VALUES ('t', ?1, '1', 'v', 'now')",
        [key],
    )?;
    Ok(())
}

async fn concurrent_writers_commit_and_a_failing_one_fails_alone(b: Backend) {
    failing_one_fails_alone(b, "group", false).await
}

/// The same with repeatable writes, which share a transaction without a
/// savepoint each: a failure rolls the group back and runs it again guarded.
async fn repeatable_writers_commit_and_a_failing_one_fails_alone(b: Backend) {
    failing_one_fails_alone(b, "group-repeatable", true).await
}

async fn failing_one_fails_alone(b: Backend, name: &str, repeatable: bool) {
    let dir = temp_dir(name);
    let target = b.target(name);
    let store = Store::open_with(&dir, Limits::default(), &target).unwrap();
    let mut tasks = Vec::new();
    for i in 0..200 {
        let store = store.clone();
        tasks.push(tokio::spawn(async move {
            let f = move |conn: &storaged::sql::Connection| {
                put(conn, &format!("k{i}"))?;
                match i {
                    // Writes a row, then fails: the row must not survive.
                    13 => Err(StoreError::conflict("write 13 fails on purpose")),
                    // Panics mid-write: rolled back alone, the writer lives on.
                    77 => panic!("write 77 panics on purpose"),
                    _ => Ok(i),
                }
            };
            if repeatable {
                store.write_repeatable(f).await
            } else {
                store.write(f).await
            }
        }));
    }
    let mut ok = 0;
    for (i, t) in tasks.into_iter().enumerate() {
        match t.await.unwrap() {
            Ok(v) => {
                assert_eq!(v, i);
                ok += 1;
            }
            Err(StoreError::Conflict(m)) => assert_eq!(i, 13, "{m}"),
            Err(StoreError::Internal(m)) => assert_eq!(i, 77, "{m}"),
            Err(e) => panic!("write {i}: {e}"),
        }
    }
    assert_eq!(ok, 198);
    // Writes shared transactions (else the test shows nothing of groups).
    let (groups, writes) = store.writer_counters();
    assert!(groups < writes, "{groups} groups for {writes} writes");
    let keys: Vec<String> = store
        .read(|conn| {
            let mut stmt = conn.prepare("SELECT key FROM kv WHERE namespace = 't'")?;
            let rows = stmt.query_map([], |r| r.get(0))?;
            Ok(rows.collect::<Result<Vec<String>, _>>()?)
        })
        .await
        .unwrap();
    assert_eq!(keys.len(), 198);
    assert!(!keys.contains(&"k13".to_string()));
    assert!(!keys.contains(&"k77".to_string()));
    // The writer still serves after the panic.
    store.write(|conn| put(conn, "after")).await.unwrap();
    store.close();
    // Everything answered is on disk: a fresh open sees it.
    let reopened = Store::open_with(&dir, Limits::default(), &target).unwrap();
    let n: i64 = reopened
        .read(|c| Ok(c.query_row("SELECT count(*) FROM kv", [], |r| r.get(0))?))
        .await
        .unwrap();
    assert_eq!(n, 199);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_database_marked_newer_is_refused_naming_both_versions() {
    let dir = temp_dir("newer");
    std::fs::create_dir_all(dir.join("db")).unwrap();
    let conn = rusqlite::Connection::open(dir.join("db/conduit.db")).unwrap();
    conn.pragma_update(None, "user_version", 99).unwrap();
    drop(conn);
    let err = Store::open(&dir, Limits::default()).err().unwrap();
    let text = err.to_string();
    assert!(text.contains("99"), "{text}");
    assert!(
        text.contains(&storaged::schema::current_version().to_string()),
        "{text}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_postgres_database_marked_newer_is_refused_naming_both_versions() {
    let Some(cluster) = oc_pgtest::shared_or_skip("a_postgres_database_marked_newer") else {
        return;
    };
    let url = cluster.create_database("newer").unwrap();
    let db = url.rsplit('/').next().unwrap().split('?').next().unwrap();
    cluster
        .psql(
            db,
            "CREATE TABLE oc_schema (version BIGINT NOT NULL); INSERT INTO oc_schema VALUES (99)",
        )
        .unwrap();
    let dir = temp_dir("newer-pg");
    let target = storaged::db::StorageTarget::Postgres(Box::new(
        storaged::sql::PgTarget::parse(&url).unwrap(),
    ));
    let err = Store::open_with(&dir, Limits::default(), &target)
        .err()
        .unwrap();
    let text = err.to_string();
    assert!(text.contains("99"), "{text}");
    assert!(
        text.contains(&storaged::schema::current_version().to_string()),
        "{text}"
    );
    // Nothing was changed: the version is still 99 and no table was made.
    assert_eq!(
        cluster
            .psql(db, "SELECT max(version) FROM oc_schema")
            .unwrap(),
        "99"
    );
    assert_eq!(
        cluster
            .psql(db, "SELECT to_regclass('events') IS NULL")
            .unwrap(),
        "t"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

on_both!(
    concurrent_writers_commit_and_a_failing_one_fails_alone,
    repeatable_writers_commit_and_a_failing_one_fails_alone,
);

/// Under writes that never stop, with some read always in progress (two readers
/// overlapping), a passive checkpoint alone never lets the WAL start over, and
/// the file grows by every byte written. Past its bound the checkpoint thread
/// starts it over: the file stays a fraction of what was written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "passes on a quiet machine and in `bench intake` (the WAL stays at 64 MiB), \
            but with both cores busy the restarting checkpoint was seen not to start the \
            WAL over within the run; run it with `--ignored` until that is understood"]
async fn the_wal_starts_over_while_reads_never_stop() {
    let dir = temp_dir("wal-bound");
    let limit: u64 = 256 * 1024;
    let limits = Limits {
        wal_restart_bytes: limit,
        ..Limits::default()
    };
    let store = Store::open(&dir, limits).unwrap();
    let db = dir.join("db/conduit.db");
    let wal = dir.join("db/conduit.db-wal");
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut readers = Vec::new();
    for phase in 0..2u64 {
        let (db, stop) = (db.clone(), stop.clone());
        readers.push(std::thread::spawn(move || {
            let c = rusqlite::Connection::open_with_flags(
                &db,
                rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY,
            )
            .unwrap();
            c.busy_timeout(std::time::Duration::from_secs(10)).unwrap();
            std::thread::sleep(std::time::Duration::from_millis(5 * phase));
            while !stop.load(std::sync::atomic::Ordering::SeqCst) {
                c.execute_batch("BEGIN").unwrap();
                let _: i64 = c
                    .query_row("SELECT count(*) FROM kv", [], |r| r.get(0))
                    .unwrap();
                std::thread::sleep(std::time::Duration::from_millis(10));
                c.execute_batch("COMMIT").unwrap();
            }
        }));
    }
    let value = "v".repeat(8 * 1024);
    let began = std::time::Instant::now();
    let mut written: u64 = 0;
    let mut i = 0u64;
    while written < 24 * limit || began.elapsed() < std::time::Duration::from_secs(4) {
        let (key, v) = (format!("k{i}"), value.clone());
        store
            .write(move |conn| {
                conn.execute(
                    "INSERT INTO kv (namespace, key, value, version, updated_at) VALUES ('t', ?1, ?2, 'v', 'now')",
                    [key.as_str(), v.as_str()],
                )?;
                Ok(())
            })
            .await
            .unwrap();
        written += value.len() as u64;
        i += 1;
    }
    let size = std::fs::metadata(&wal).map(|m| m.len()).unwrap_or(0);
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    for r in readers {
        r.join().unwrap();
    }
    assert!(
        size < written / 2,
        "the WAL is {size} bytes after {written} bytes written (bound {limit})"
    );
    store.close();
    let _ = std::fs::remove_dir_all(&dir);
}
