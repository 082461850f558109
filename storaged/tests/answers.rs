//! A commit's answers reach the runtime that waits for them with one wake-up, not
//! one per write: counted by the kernel (`syscw` of the writer thread's
//! `/proc/self/task/TID/io`, which counts the `eventfd` writes that wake a runtime
//! from another thread), never timed.

#![allow(clippy::unwrap_used)]

use std::sync::mpsc;
use std::time::Duration;
use storaged::{Limits, Store, StoreError};

/// The writer thread of this process's one store.
fn writer_tid() -> String {
    for e in std::fs::read_dir("/proc/self/task").unwrap().flatten() {
        let comm = std::fs::read_to_string(e.path().join("comm")).unwrap_or_default();
        if comm.trim() == "storaged-writer" {
            return e.file_name().to_string_lossy().into_owned();
        }
    }
    panic!("no storaged-writer thread");
}

mod kernel;

fn writes_of(tid: &str) -> u64 {
    kernel::write_calls(&format!("/proc/self/task/{tid}/io"))
}

#[tokio::test(flavor = "current_thread")]
async fn sixty_four_writes_in_one_commit_wake_the_runtime_once() {
    let dir = std::env::temp_dir().join(format!("oc-store-answers-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let store = Store::open(&dir, Limits::default()).unwrap();
    store
        .write(|c| {
            c.execute_batch("CREATE TABLE t (n INTEGER)")?;
            Ok(())
        })
        .await
        .unwrap();
    let tid = writer_tid();

    // Hold the writer inside a first write until 64 more are queued behind it, so
    // that they are one group (whatever the machine's speed).
    let (release, held) = mpsc::channel::<()>();
    let (inside, entered) = mpsc::channel::<()>();
    let first = {
        let store = store.clone();
        tokio::spawn(async move {
            store
                .write(move |_| {
                    let _ = inside.send(());
                    held.recv_timeout(Duration::from_secs(60))
                        .map_err(|e| StoreError::Internal(format!("never released: {e}")))
                })
                .await
        })
    };
    tokio::time::timeout(Duration::from_secs(60), async {
        while entered.try_recv().is_err() {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
    .expect("the first write never ran");
    let mut writes = Vec::new();
    for n in 0..64 {
        let store = store.clone();
        writes.push(tokio::spawn(async move {
            store
                .write(move |c| {
                    c.execute("INSERT INTO t (n) VALUES (?1)", [n])?;
                    Ok(n)
                })
                .await
        }));
    }
    tokio::time::timeout(Duration::from_secs(60), async {
        while store.write_queue().0 < 64 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
    .expect("the 64 writes never queued");
    let (groups_before, _) = store.writer_counters();
    let before = writes_of(&tid);
    release.send(()).unwrap();
    first.await.unwrap().unwrap();
    for (n, w) in writes.into_iter().enumerate() {
        assert_eq!(w.await.unwrap().unwrap(), n as i32);
    }
    let written = writes_of(&tid) - before;
    let (groups_after, _) = store.writer_counters();
    let groups = groups_after - groups_before;
    // The held write's group and the 64's (the writer may split them in two).
    assert!(
        groups <= 3,
        "the 64 writes were not grouped: {groups} groups"
    );
    // Per group: the WAL in one write (walbatch) and one wake-up of the runtime.
    // Answered one by one from the writer thread this was 64 wake-ups and more.
    assert!(
        written <= 2 * groups + 2,
        "the writer thread made {written} write calls for the {groups} group(s) of these 65 writes"
    );
    let rows: i64 = store
        .read(|c| Ok(c.query_row("SELECT count(*) FROM t WHERE ?1 = 0", [0], |r| r.get(0))?))
        .await
        .unwrap();
    assert_eq!(rows, 64);
    store.close();
    let _ = std::fs::remove_dir_all(&dir);
}
