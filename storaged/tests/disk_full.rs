//! A full disk (SQLite's `SQLITE_FULL`, made here with `max_page_count`): a write
//! that does not fit is `StoreError::Full`, crossing as `unavailable` (retry), never
//! `internal`; of a group of writes, every one answered `Ok` is in the database and
//! none answered an error is; the writer lives on, and once there is room again
//! writes are taken without reopening anything.

#![allow(clippy::unwrap_used)]

use protocol::{Code, RpcError};
use storaged::{Limits, Store, StoreError};

fn put(conn: &storaged::sql::Connection, key: &str) -> Result<(), StoreError> {
    put_sized(conn, key, 20_000)
}

/// A value of `size` bytes: of a few pages, a full database refuses it; a small
/// one may still fit after a large one did not.
fn put_sized(conn: &storaged::sql::Connection, key: &str, size: usize) -> Result<(), StoreError> {
    let value = format!("\"{}\"", "x".repeat(size));
    conn.execute(
        "INSERT INTO kv (namespace, key, value, version, updated_at) VALUES ('t', ?1, ?2, 'v', 'now')",
        [key, value.as_str()],
    )?;
    Ok(())
}

/// Caps (or uncaps) the database at its pages now plus `more`.
async fn cap(store: &Store, more: Option<i64>) {
    store
        .write(move |conn| {
            let pages: i64 = conn.query_row("PRAGMA page_count", [], |r| r.get(0))?;
            let max = more.map_or(1_073_741_823, |m| pages + m);
            conn.query_row(&format!("PRAGMA max_page_count = {max}"), [], |r| {
                r.get::<_, i64>(0)
            })?;
            Ok(())
        })
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_database_refuses_writes_as_unavailable_and_takes_them_again_with_room() {
    let dir = std::env::temp_dir().join(format!("oc-store-full-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let store = Store::open(&dir, Limits::default()).unwrap();
    store.write(|c| put(c, "before")).await.unwrap();
    cap(&store, Some(20)).await;

    // Writes at once (groups of them), until the database is full.
    let mut tasks = Vec::new();
    for i in 0..40 {
        let store = store.clone();
        tasks.push(tokio::spawn(async move {
            let size = if i % 3 == 0 { 100 } else { 20_000 };
            store
                .write(move |c| put_sized(c, &format!("k{i}"), size))
                .await
        }));
    }
    let mut taken = Vec::new();
    let mut full = 0;
    for (i, t) in tasks.into_iter().enumerate() {
        match t.await.unwrap() {
            Ok(()) => taken.push(format!("k{i}")),
            // The write that did not fit, or one of its group that SQLite rolled
            // back with it: both "not written, retry".
            Err(e) => {
                let its_own = matches!(e, StoreError::Full(_));
                assert!(
                    its_own || matches!(e, StoreError::Unavailable(_)),
                    "write {i}: {e:?}"
                );
                let rpc = RpcError::from(e);
                assert_eq!(rpc.app_code(), Some(Code::Unavailable.as_str()), "{rpc:?}");
                if its_own {
                    assert!(rpc.message.contains("the disk is full"), "{}", rpc.message);
                    full += 1;
                }
            }
        }
    }
    assert!(full > 0, "no write was refused for a full database");
    let kept: Vec<String> = store
        .read(|conn| {
            let mut stmt = conn.prepare("SELECT key FROM kv WHERE key LIKE 'k%' ORDER BY key")?;
            let rows = stmt.query_map([], |r| r.get(0))?;
            Ok(rows.collect::<Result<Vec<String>, _>>()?)
        })
        .await
        .unwrap();
    taken.sort();
    assert_eq!(kept, taken, "what was answered Ok is what is kept");
    let check = store
        .check(busapi::store::CheckRequest::default())
        .await
        .unwrap();
    assert_eq!(check.integrity, "ok");

    // Room again: the same store takes writes.
    cap(&store, None).await;
    store.write(|c| put(c, "after")).await.unwrap();
    store.close();
    let _ = std::fs::remove_dir_all(&dir);
}
