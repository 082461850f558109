//! The writer's VFS (`storaged::db::walbatch`): a commit's WAL frames reach the file
//! in one write instead of two a frame, counted by the kernel (`syscw` of
//! `/proc/thread-self/io`: SQLite writes on the calling thread), not timed; and what
//! it writes is what SQLite wrote: readers on the default VFS see every commit as it
//! is answered, and the database passes `PRAGMA integrity_check` after thousands of
//! commits, savepoints rolled back and a WAL started over. (SIGKILL of a storaged
//! in the middle of its commits: tests/crash.rs, whose writer uses this VFS.)

#![allow(clippy::unwrap_used)]

use rusqlite::{Connection, OpenFlags};
use std::path::{Path, PathBuf};

fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("oc-walbatch-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn writer(path: &Path, gathered: bool) -> Connection {
    let c = if gathered {
        let vfs = storaged::db::walbatch::register().unwrap();
        Connection::open_with_flags_and_vfs(path, OpenFlags::default(), vfs).unwrap()
    } else {
        Connection::open(path).unwrap()
    };
    c.pragma_update(None, "journal_mode", "WAL").unwrap();
    c.pragma_update(None, "synchronous", "FULL").unwrap();
    c.pragma_update(None, "wal_autocheckpoint", 0).unwrap();
    c.execute_batch(
        "CREATE TABLE IF NOT EXISTS ev (id TEXT PRIMARY KEY, n INTEGER, body BLOB);
         CREATE INDEX IF NOT EXISTS ev_n ON ev(n);",
    )
    .unwrap();
    c
}

mod kernel;

/// The write calls this thread has made so far.
fn writes() -> u64 {
    kernel::write_calls("/proc/thread-self/io")
}

/// A scattered key, as an event's digest ID is.
fn key(i: u64) -> String {
    let mut x = i.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ 0xD1B5_4A32_D192_ED03;
    x ^= x >> 29;
    format!("evt_{x:016x}{i:08}")
}

/// One group's commit: 64 rows at scattered places of the primary key, each row
/// about 1.5 KiB, so tens of pages (a few dozen frames).
fn commit_group(c: &Connection, group: u64) -> u64 {
    let before = writes();
    let tx = c.unchecked_transaction().unwrap();
    for i in 0..64 {
        let n = group * 64 + i;
        tx.execute(
            "INSERT INTO ev (id, n, body) VALUES (?1, ?2, ?3)",
            rusqlite::params![key(n), n as i64, vec![(n % 251) as u8; 1500]],
        )
        .unwrap();
    }
    tx.commit().unwrap();
    writes() - before
}

fn frames(path: &Path) -> u64 {
    let wal = std::fs::metadata(path.with_extension("db-wal"))
        .unwrap()
        .len();
    (wal.saturating_sub(32)) / (4096 + 24)
}

#[test]
fn a_commit_writes_its_wal_frames_in_one_call() {
    let dir = temp_dir("count");
    let mut counted = Vec::new();
    for gathered in [false, true] {
        let path = dir.join(format!("gathered-{gathered}.db"));
        let c = writer(&path, gathered);
        // Warm: the table's first pages exist.
        commit_group(&c, 0);
        let frames_before = frames(&path);
        let mut calls = 0;
        for g in 1..=10 {
            calls += commit_group(&c, g);
        }
        let written = frames(&path) - frames_before;
        counted.push((gathered, calls, written));
    }
    let (_, plain, plain_frames) = counted[0];
    let (_, gathered, gathered_frames) = counted[1];
    // The default VFS: two calls a frame (header, page).
    assert!(
        plain >= 2 * plain_frames && plain_frames >= 10 * 5,
        "{counted:?}"
    );
    // Gathered: the same frames, one call a commit and a 124 KiB (the most the
    // default VFS writes in one call).
    assert!(gathered_frames >= 10 * 5, "{counted:?}");
    let most = 10 + gathered_frames * (4096 + 24) / (124 * 1024) + 1;
    assert!(
        gathered <= most,
        "{gathered} write calls for 10 commits of {gathered_frames} frames, more than {most}: {counted:?}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn readers_see_each_commit_and_the_database_stays_whole() {
    let dir = temp_dir("whole");
    let path = dir.join("conduit.db");
    let c = writer(&path, true);
    let reader = Connection::open_with_flags(&path, OpenFlags::SQLITE_OPEN_READ_ONLY).unwrap();
    let count = |r: &Connection| -> i64 {
        r.query_row("SELECT count(*) FROM ev", [], |row| row.get(0))
            .unwrap()
    };
    let mut expected = 0;
    for g in 0..60u64 {
        // A savepoint rolled back inside the group: its frames may be written and
        // then written over.
        let tx = c.unchecked_transaction().unwrap();
        for i in 0..40 {
            let n = g * 1000 + i;
            tx.execute(
                "INSERT INTO ev (id, n, body) VALUES (?1, ?2, ?3)",
                rusqlite::params![key(n), n as i64, vec![7u8; 900]],
            )
            .unwrap();
        }
        tx.execute_batch("SAVEPOINT s").unwrap();
        for i in 40..80 {
            let n = g * 1000 + i;
            tx.execute(
                "INSERT INTO ev (id, n, body) VALUES (?1, ?2, ?3)",
                rusqlite::params![key(n), n as i64, vec![9u8; 900]],
            )
            .unwrap();
        }
        tx.execute_batch("ROLLBACK TO s; RELEASE s").unwrap();
        tx.execute("UPDATE ev SET body = ?1 WHERE n % 7 = 0", [vec![1u8; 1200]])
            .unwrap();
        tx.commit().unwrap();
        expected += 40;
        // Answered: a reader on the default VFS sees it at once.
        assert_eq!(count(&reader), expected, "after group {g}");
        if g % 20 == 19 {
            // The WAL started over, as storaged's writer does between groups.
            let (busy, _, _): (i64, i64, i64) = c
                .query_row("PRAGMA wal_checkpoint(RESTART)", [], |r| {
                    Ok((r.get(0)?, r.get(1)?, r.get(2)?))
                })
                .unwrap();
            assert_eq!(busy, 0);
        }
    }
    drop(reader);
    drop(c);
    // Opened again on the default VFS: whole, every committed row there.
    let again = Connection::open(&path).unwrap();
    let check: String = again
        .query_row("PRAGMA integrity_check", [], |r| r.get(0))
        .unwrap();
    assert_eq!(check, "ok");
    assert_eq!(count(&again), expected);
    let rolled_back: i64 = again
        .query_row("SELECT count(*) FROM ev WHERE n % 1000 >= 40", [], |r| {
            r.get(0)
        })
        .unwrap();
    assert_eq!(rolled_back, 0);
    let _ = std::fs::remove_dir_all(&dir);
}
