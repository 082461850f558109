//! The WAL: how its locks are waited for, and the checkpoint thread that copies
//! it back into the database file, starts it over under load and cuts it back
//! once the store is idle (SQLite only).

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::sync::Arc;

/// How the writer waits when the database is locked by another connection (the
/// checkpoint thread cutting the WAL back, see [`checkpointer`]; an operator's
/// backup): tries every 50 µs for the first
/// millisecond, then every millisecond, for about 10 s in all. SQLite's own
/// busy timeout sleeps 1, 2, 5, 10, 15 ms... between tries, so a writer that
/// met a lock held for 3 ms slept 8 ms, and one held for 9 ms slept 18: under
/// `bench intake` at 1,000 deliveries a second every restart of the WAL stalled
/// the deliveries under way for 25–30 ms.
pub(super) fn writer_busy(tries: i32) -> bool {
    const QUICK: i32 = 20;
    if tries < QUICK {
        std::thread::sleep(std::time::Duration::from_micros(50));
        true
    } else {
        std::thread::sleep(std::time::Duration::from_millis(1));
        tries < QUICK + 10_000
    }
}

/// The tries of [`checkpoint_busy`] at first: about 2 ms.
const CHECKPOINT_TRIES: i32 = 40;
/// The most tries of [`checkpoint_busy`]: about 10 s, SQLite's busy timeout
/// here before.
const MAX_CHECKPOINT_TRIES: i32 = 200_000;

thread_local! {
    /// How many tries this thread's next [`checkpoint_busy`] wait may take.
    static CHECKPOINT_PATIENCE: std::cell::Cell<i32> = const { std::cell::Cell::new(CHECKPOINT_TRIES) };
}

/// How a checkpoint that needs the readers gone (a restart, or cutting the file
/// back) waits for them, while it holds the write lock: every 50 µs, at first for
/// about 2 ms, then it gives up and is tried again at the checkpoint thread's
/// next round (reads are short: under load a moment without one comes soon).
/// Each restart that could not happen doubles the next wait, up to about 10 s,
/// so reads that never pause cannot keep the WAL growing.
pub(super) fn checkpoint_busy(tries: i32) -> bool {
    std::thread::sleep(std::time::Duration::from_micros(50));
    tries < CHECKPOINT_PATIENCE.with(|p| p.get())
}

/// A restart of the WAL asked of the writer thread by the checkpoint thread.
#[derive(Debug, Default)]
pub(super) struct RestartRequest {
    /// The tries the restart may wait for readers ([`checkpoint_busy`]); 0: none asked.
    due: AtomicI32,
    /// Whether the last restart could not happen (readers stayed).
    failed: AtomicBool,
}

/// Start the WAL over, on the writer's own connection between two of its groups,
/// if the checkpoint thread asked: the write lock is the writer's already, so
/// the restart waits for no write, and the writes queued meanwhile wait only
/// for its own work (the frames copied since the last round, two syncs, the
/// readers still on the WAL).
pub(super) fn restart_if_asked(conn: &rusqlite::Connection, request: &RestartRequest) {
    let tries = request.due.swap(0, Ordering::SeqCst);
    if tries <= 0 {
        return;
    }
    CHECKPOINT_PATIENCE.with(|p| p.set(tries));
    let _ = conn.busy_handler(Some(checkpoint_busy));
    let outcome = conn.query_row("PRAGMA wal_checkpoint(RESTART)", [], |r| r.get::<_, i64>(0));
    let _ = conn.busy_handler(Some(writer_busy));
    let failed = match outcome {
        Ok(0) => {
            tracing::debug!("the WAL starts over");
            false
        }
        Ok(_) => {
            tracing::debug!("the WAL could not start over yet (readers on it)");
            true
        }
        Err(e) => {
            tracing::warn!(error = %e, "restarting checkpoint");
            true
        }
    };
    request.failed.store(failed, Ordering::SeqCst);
}

/// How much the WAL may log before the checkpoint thread starts it over, by
/// default ([`Limits::wal_restart_bytes`](super::Limits::wal_restart_bytes)).
pub const WAL_RESTART_BYTES: u64 = 64 * 1024 * 1024;

/// How many times [`Limits::wal_restart_bytes`](super::Limits::wal_restart_bytes) the WAL file may stay when it
/// starts over under load (see [`checkpointer`]).
pub const WAL_KEEP_FACTOR: u64 = 4;

/// How often the checkpoint thread copies the WAL back into the database.
const CHECKPOINT_EVERY: std::time::Duration = std::time::Duration::from_millis(500);

/// Copy committed WAL frames into the database file, passively (never blocking
/// the writer), until the store closes; a last full checkpoint on the way out
/// keeps the WAL from growing across restarts.
///
/// A passive checkpoint copies frames but never starts the WAL over: under steady
/// load some reader is always reading from the WAL, so the file would only grow
/// (about 17 MB a second at 3,600 deliveries a second, measured). Once the log
/// holds more than `limit` ([`Limits::wal_restart_bytes`](super::Limits::wal_restart_bytes)),
/// it asks the writer thread to start it over between two groups
/// ([`restart_if_asked`]): a restart waits for the readers of the WAL to finish
/// (reads are short) and holds new writes meanwhile, so the next commit writes
/// from the start of the file again. Made from this thread, the restart first
/// had to catch the write lock between two groups, polling for it, and under
/// steady writes it could wait seconds for it.
///
/// The file itself is kept between restarts (up to [`WAL_KEEP_FACTOR`] times the
/// bound): writing over blocks the file already has costs less than growing it
/// again, and cutting 100 MB off it inside the next commit stalled the writer
/// 40 ms under `bench intake`. Once a round passes with no new commit, the file
/// is cut back to nothing.
pub(super) fn checkpointer(
    conn: rusqlite::Connection,
    wal: PathBuf,
    limit: u64,
    request: Arc<RestartRequest>,
    closing: Arc<AtomicBool>,
) {
    let page: i64 = conn
        .query_row("PRAGMA page_size", [], |r| r.get(0))
        .unwrap_or(4096);
    // A WAL frame: a 24-byte header and a page.
    let frame_bytes = u64::try_from(page).unwrap_or(4096) + 24;
    let mut last_log = None;
    let mut patience = CHECKPOINT_TRIES;
    while !closing.load(Ordering::SeqCst) {
        std::thread::sleep(CHECKPOINT_EVERY);
        let (log, copied) = match conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |r| {
            Ok((r.get::<_, i64>(1)?, r.get::<_, i64>(2)?))
        }) {
            Ok(frames) => frames,
            Err(e) => {
                tracing::debug!(error = %e, "passive checkpoint");
                continue;
            }
        };
        let log_bytes = u64::try_from(log).unwrap_or(0) * frame_bytes;
        // No commit since the last round, and every frame copied.
        let idle = last_log == Some(log) && log == copied;
        if idle {
            let size = std::fs::metadata(&wal).map(|m| m.len()).unwrap_or(0);
            if size > limit || log_bytes > limit {
                // The writer is idle: the lock is free, nothing to ask of it.
                request.due.store(0, Ordering::SeqCst);
                match conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |r| {
                    r.get::<_, i64>(0)
                }) {
                    Ok(0) => {
                        tracing::debug!(size, "the WAL is cut back: no write since the last round")
                    }
                    Ok(_) => tracing::debug!(size, "the WAL could not be cut back yet (busy)"),
                    Err(e) => tracing::warn!(error = %e, size, "truncating checkpoint"),
                }
            }
        } else if log_bytes > limit {
            patience = if request.failed.swap(false, Ordering::SeqCst) {
                (patience * 2).min(MAX_CHECKPOINT_TRIES)
            } else {
                CHECKPOINT_TRIES
            };
            tracing::debug!(log_bytes, patience, "the WAL is due to start over");
            request.due.store(patience, Ordering::SeqCst);
        }
        last_log = Some(log);
    }
    // On the way out nothing is in a hurry: wait for the last readers as long as
    // any other connection would.
    let _ = conn.busy_timeout(std::time::Duration::from_secs(10));
    let _ = conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()));
}
