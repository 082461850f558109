//! The database: one writer thread with group commit, and a pool of read-only
//! connections, on SQLite (the default) or PostgreSQL.
//!
//! Every write is a closure run by the writer thread inside a transaction that it
//! shares with the other writes queued at the same moment, each in its own
//! savepoint: a write that fails (or panics) is rolled back to its savepoint alone,
//! and the rest commit together, sharing one fsync. A write is answered only after
//! its transaction committed (WAL, `synchronous=FULL`), so an answer means it is on
//! disk. Reads run on a small pool of read-only connections, off the async
//! threads.
//!
//! On PostgreSQL the same holds (`synchronous_commit` on: a commit is on the
//! server's disk), and each write transaction first takes one advisory lock, so
//! the write transactions of every storaged sharing the database run one at a
//! time, as SQLite's do: a write that reads then writes (claiming an attempt,
//! firing a timer) sees every earlier commit of every host. Every session is
//! bounded server side ([`crate::sql::SessionBounds`]): a host frozen inside a
//! write loses its session (and the lock) after a few seconds idle, and a write
//! waits for the lock only so long. A lost connection fails the writes in
//! flight (never a false success) and is made again with backoff.

mod jobs;
mod wal;
pub mod walbatch;
mod writer;

pub use writer::WRITE_LOCK;

use crate::error::StoreError;
use crate::schema;
use crate::sql::{Backend, Connection, PgTarget};
use jobs::{Job, Msg, RepeatableJob, TypedJob};
use rusqlite::OpenFlags;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use tokio::sync::{mpsc, oneshot, Semaphore};
use wal::{checkpoint_busy, checkpointer, writer_busy, RestartRequest};
pub use wal::{WAL_KEEP_FACTOR, WAL_RESTART_BYTES};
use writer::{writer_loop, Grouping};

/// The largest event payload (32 MiB of JSON text): a webhook body up to ingressd's
/// 25 MiB limit, parsed by its extension and written again, is kept whole (written
/// again it is no longer than the body, except for numbers such as `1e5` that come
/// back longer: hence the room). Pages of events are bounded in bytes besides
/// ([`crate::events::MAX_EVENTS_PAGE_BYTES`]), so one such event still crosses.
pub const MAX_PAYLOAD_BYTES: usize = 32 * 1024 * 1024;

/// The bounds of the store. Every one has an error that names it.
#[derive(Debug, Clone)]
pub struct Limits {
    /// Most writes in one group-committed transaction.
    pub max_group: usize,
    /// Most writes queued for the writer; a caller past it waits.
    pub max_queued_writes: usize,
    /// Read-only connections (and reads at once).
    pub readers: usize,
    /// Largest event payload (its JSON text).
    pub max_payload_bytes: usize,
    /// Largest KV value (its JSON text).
    pub max_value_bytes: usize,
    /// Longest KV key.
    pub max_key_bytes: usize,
    /// Most events in one accept, or puts, deletes, checks and emissions in one commit.
    pub max_batch: usize,
    /// Largest page of any list.
    pub max_page: usize,
    /// Largest artifact.
    pub max_artifact_bytes: u64,
    /// Largest artifact chunk.
    pub max_chunk_bytes: usize,
    /// Deepest causal chain a derived event may extend.
    pub max_causal_depth: i64,
    /// Most events derived in one chain (by root) per minute.
    pub max_derived_per_minute: i64,
    /// How much the SQLite WAL may log before it is started over (see
    /// `checkpointer`).
    pub wal_restart_bytes: u64,
    /// How long the writer waits for more writes before committing a group that
    /// already has company (two writes or more); zero commits at once. See
    /// [`GROUP_GATHER`].
    pub group_gather: std::time::Duration,
}

/// The writer's wait for company, by default: none. Under load the writes that
/// queue while a group commits form the next group by themselves; a wait on top of
/// that held every delivery in flight back (docs/decisions.md, "Intake speed,
/// seventh step"). A lone write (an idle store) never waits whatever this is.
pub const GROUP_GATHER: std::time::Duration = std::time::Duration::ZERO;

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_group: 256,
            max_queued_writes: 4096,
            readers: 4,
            max_payload_bytes: MAX_PAYLOAD_BYTES,
            max_value_bytes: 1024 * 1024,
            max_key_bytes: 512,
            max_batch: 1000,
            max_page: 1000,
            max_artifact_bytes: 1024 * 1024 * 1024,
            max_chunk_bytes: protocol::wire::MAX_CHUNK_BYTES,
            max_causal_depth: 16,
            max_derived_per_minute: 120,
            wal_restart_bytes: WAL_RESTART_BYTES,
            group_gather: GROUP_GATHER,
        }
    }
}

/// A write's part in one statement that its group runs before its writes, on
/// PostgreSQL, where each statement is a round trip to the server: the parts
/// of a group's writes (of one type) are run together by [`Ahead::run_all`],
/// which keeps what each write will need on the connection
/// ([`Connection::take_ahead`]); each write then takes its values there instead
/// of asking the server. Only a group made of repeatable writes runs it, so
/// that when anything goes wrong (the statement fails, a write fails, or a
/// value kept is not taken by its write) the group is rolled back and run
/// again the ordinary way, each write under its savepoint.
pub trait Ahead: Send + Sync {
    /// Itself, for [`Ahead::run_all`] to find its parts among a group's.
    fn as_any(&self) -> &dyn std::any::Any;
    /// Run the parts of a group that are of this one's type (this one among
    /// them), in one statement; the others are left alone.
    fn run_all(&self, conn: &Connection, parts: &[&dyn Ahead]) -> Result<(), crate::sql::Error>;
}

/// Where the database is.
#[derive(Debug, Clone, Default)]
pub enum StorageTarget {
    /// SQLite in `<state>/db/conduit.db`.
    #[default]
    Sqlite,
    /// A PostgreSQL database (shared by every host of a suite).
    Postgres(Box<PgTarget>),
}

/// What the writer thread has done: groups committed and writes in them.
#[derive(Debug)]
pub struct WriterCounters {
    /// Transactions committed (or failed).
    pub groups: AtomicU64,
    /// Writes run in them.
    pub writes: AtomicU64,
    /// Writes per group.
    pub group_size: daemon::metrics::Histogram,
    /// How long a group took, from its transaction's begin to its commit answered.
    pub group_seconds: daemon::metrics::Histogram,
    /// Round trips to the database server the groups took (PostgreSQL; 0 on
    /// SQLite): with `groups` and `writes`, the round trips per group and per
    /// write, a figure that does not depend on the machine. Counted as each
    /// is answered, so a group's are in before its writes are answered.
    pub round_trips: Arc<AtomicU64>,
}

/// The buckets of [`WriterCounters::group_size`].
pub const GROUP_SIZE_BUCKETS: &[f64] = &[1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0];

impl Default for WriterCounters {
    fn default() -> Self {
        WriterCounters {
            groups: AtomicU64::new(0),
            writes: AtomicU64::new(0),
            group_size: daemon::metrics::Histogram::new(GROUP_SIZE_BUCKETS),
            group_seconds: daemon::metrics::Histogram::new(daemon::metrics::LATENCY_BUCKETS),
            round_trips: Arc::new(AtomicU64::new(0)),
        }
    }
}

struct Inner {
    writer: mpsc::Sender<Msg>,
    closing: Arc<AtomicBool>,
    counters: Arc<WriterCounters>,
    readers: Mutex<Vec<Connection>>,
    read_permits: Arc<Semaphore>,
    target: StorageTarget,
    dir: PathBuf,
    db_path: PathBuf,
    limits: Limits,
    writer_thread: Mutex<Option<std::thread::JoinHandle<()>>>,
}

/// The store. Cheap to clone.
#[derive(Clone)]
pub struct Store {
    inner: Arc<Inner>,
}

/// The writer's page cache, in KiB (SQLite's default is 2 MiB). Kept small on
/// purpose: when an insert splits a b-tree page and reorders the siblings, SQLite
/// parks a page under the number of the locking page (page 262,145 with 4 KiB
/// pages) for a moment, and the commit that follows then walks the whole cache to
/// drop pages past the end of the file. With 64 MiB (16,384 pages) that walk was
/// 6% of storaged's CPU under `bench intake`; pages the cache does not hold are
/// read through the memory map or from the WAL instead.
const WRITER_CACHE_KIB: i64 = 4 * 1024;

/// How much of the database file each connection reads through a memory map
/// rather than a `pread` per page (a reader's page cache is emptied by every
/// write, so under load it reads most pages again).
const MMAP_BYTES: i64 = 256 * 1024 * 1024;

/// Apply the pragmas every connection needs.
/// `wal_limit`: the writer's (see [`Limits::wal_restart_bytes`]); `None` for a
/// reader.
fn configure(conn: &rusqlite::Connection, wal_limit: Option<u64>) -> Result<(), StoreError> {
    conn.busy_timeout(std::time::Duration::from_secs(10))?;
    conn.set_prepared_statement_cache_capacity(256);
    conn.pragma_update(None, "mmap_size", MMAP_BYTES)?;
    if let Some(wal_limit) = wal_limit {
        conn.busy_handler(Some(writer_busy))?;
        conn.pragma_update(None, "cache_size", -WRITER_CACHE_KIB)?;
        conn.pragma_update(None, "journal_mode", "WAL")?;
        conn.pragma_update(None, "synchronous", "FULL")?;
        conn.pragma_update(None, "foreign_keys", "ON")?;
        // Checkpoints run on a thread of their own (see `checkpointer`), never
        // inside a commit; the writer thread runs only the restarts of the WAL
        // that thread asks for, between two groups.
        conn.pragma_update(None, "wal_autocheckpoint", 0)?;
        // A WAL grown under load past this is cut back to it when it starts over
        // (and to nothing once the store is idle: see `checkpointer`).
        conn.pragma_update(
            None,
            "journal_size_limit",
            i64::try_from(wal_limit.saturating_mul(WAL_KEEP_FACTOR)).unwrap_or(i64::MAX),
        )?;
        // Each write runs in a savepoint; the pages a savepoint must be able to
        // restore are kept in memory, not written to a temporary file.
        conn.pragma_update(None, "temp_store", "MEMORY")?;
    } else {
        conn.pragma_update(None, "query_only", "ON")?;
    }
    Ok(())
}

impl Store {
    /// Open (creating and migrating) the store under `state_dir`: the database in
    /// `db/conduit.db`, artifacts in `artifacts/`. A database from a newer release
    /// is refused.
    pub fn open(state_dir: &Path, limits: Limits) -> Result<Store, StoreError> {
        Store::open_with(state_dir, limits, &StorageTarget::Sqlite)
    }

    /// Open the store on `target`; artifacts stay under `state_dir` whatever
    /// the backend.
    pub fn open_with(
        state_dir: &Path,
        limits: Limits,
        target: &StorageTarget,
    ) -> Result<Store, StoreError> {
        let db_dir = state_dir.join("db");
        for dir in [&db_dir, &state_dir.join("artifacts")] {
            std::fs::create_dir_all(dir)
                .map_err(|e| StoreError::Io(format!("create {}: {e}", dir.display())))?;
        }
        let db_path = db_dir.join("conduit.db");
        let closing = Arc::new(AtomicBool::new(false));
        let mut readers = Vec::with_capacity(limits.readers);
        let mut restarts = None;
        let conn = match target {
            StorageTarget::Sqlite => {
                // The writer gathers a commit's WAL frames into one write
                // (`walbatch`); readers and the checkpointer only read the WAL.
                let vfs = walbatch::register().map_err(StoreError::Io)?;
                let conn = rusqlite::Connection::open_with_flags_and_vfs(
                    &db_path,
                    OpenFlags::default(),
                    vfs,
                )?;
                configure(&conn, Some(limits.wal_restart_bytes))?;
                let conn = Connection::sqlite(conn);
                schema::migrate(&conn)?;
                for _ in 0..limits.readers.max(1) {
                    let r = rusqlite::Connection::open_with_flags(
                        &db_path,
                        OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
                    )?;
                    configure(&r, None)?;
                    readers.push(Connection::sqlite(r));
                }
                let checkpoint_conn = rusqlite::Connection::open(&db_path)?;
                checkpoint_conn.busy_handler(Some(checkpoint_busy))?;
                let stop_checkpoints = closing.clone();
                let wal = db_dir.join("conduit.db-wal");
                let wal_limit = limits.wal_restart_bytes;
                let request = Arc::new(RestartRequest::default());
                restarts = Some(request.clone());
                std::thread::Builder::new()
                    .name("storaged-checkpoint".into())
                    .spawn(move || {
                        checkpointer(checkpoint_conn, wal, wal_limit, request, stop_checkpoints)
                    })
                    .map_err(|e| StoreError::Io(format!("start the checkpoint thread: {e}")))?;
                conn
            }
            StorageTarget::Postgres(pg) => {
                // The driver blocks on a runtime of its own, which cannot
                // start on a thread that drives this one: open on a thread of
                // its own. Readers connect when first needed (and after a loss).
                std::thread::scope(|s| {
                    s.spawn(|| -> Result<Connection, StoreError> {
                        // The migration on a session of its own, without the
                        // lock and statement bounds (see `connect_to_migrate`);
                        // the writer's session has every bound.
                        let migrating = Connection::postgres(pg.connect_to_migrate()?);
                        schema::migrate(&migrating)?;
                        drop(migrating);
                        Ok(Connection::postgres(pg.connect()?))
                    })
                    .join()
                    .unwrap_or_else(|_| {
                        Err(StoreError::Internal("opening the database panicked".into()))
                    })
                })?
            }
        };
        let (tx, rx) = mpsc::channel(limits.max_queued_writes.max(1));
        let grouping = Grouping {
            max: limits.max_group.max(1),
            gather: limits.group_gather,
        };
        let flag = closing.clone();
        let counters = Arc::new(WriterCounters::default());
        let counted = counters.clone();
        let reconnect = target.clone();
        let answers = jobs::answerer();
        let thread = std::thread::Builder::new()
            .name("storaged-writer".into())
            .spawn(move || {
                jobs::set_answerer(answers);
                writer_loop(conn, reconnect, rx, grouping, restarts, flag, counted)
            })
            .map_err(|e| StoreError::Io(format!("start the writer thread: {e}")))?;
        Ok(Store {
            inner: Arc::new(Inner {
                writer: tx,
                closing,
                counters,
                read_permits: Arc::new(Semaphore::new(limits.readers.max(1))),
                readers: Mutex::new(readers),
                target: target.clone(),
                dir: state_dir.to_path_buf(),
                db_path,
                limits,
                writer_thread: Mutex::new(Some(thread)),
            }),
        })
    }

    /// The store's bounds.
    pub fn limits(&self) -> &Limits {
        &self.inner.limits
    }

    /// Groups committed by the writer and the writes in them (the mean group size
    /// tells how much group commit is saving).
    pub fn writer_counters(&self) -> (u64, u64) {
        let c = &self.inner.counters;
        (
            c.groups.load(Ordering::Relaxed),
            c.writes.load(Ordering::Relaxed),
        )
    }

    /// The writer's counters and histograms (metrics).
    pub fn writer_stats(&self) -> &WriterCounters {
        &self.inner.counters
    }

    /// Writes queued for the writer thread now, and the most it queues.
    pub fn write_queue(&self) -> (usize, usize) {
        let w = &self.inner.writer;
        (w.max_capacity() - w.capacity(), w.max_capacity())
    }

    /// The state directory.
    pub fn dir(&self) -> &Path {
        &self.inner.dir
    }

    /// Which backend holds the database.
    pub fn backend(&self) -> Backend {
        match self.inner.target {
            StorageTarget::Sqlite => Backend::Sqlite,
            StorageTarget::Postgres(_) => Backend::Postgres,
        }
    }

    /// Where the database is, for logs and doctor: the SQLite file, or
    /// PostgreSQL's host, port, database and user (never a password).
    pub fn describe(&self) -> String {
        match &self.inner.target {
            StorageTarget::Sqlite => self.inner.db_path.display().to_string(),
            StorageTarget::Postgres(pg) => format!("postgres {}", pg.describe()),
        }
    }

    /// The SQLite database file (where it would be, on PostgreSQL).
    pub fn db_path(&self) -> &Path {
        &self.inner.db_path
    }

    /// Run `f` as one atomic write, group-committed with the writes queued beside
    /// it. Answers once the transaction holding it is on disk.
    pub async fn write<T, F>(&self, f: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnOnce(&Connection) -> Result<T, StoreError> + Send + 'static,
    {
        let (tx, rx) = oneshot::channel::<Result<T, StoreError>>();
        self.submit(Box::new(TypedJob { f, tx }), rx).await
    }

    /// Queue a job for the writer and wait for its answer.
    async fn submit<T>(
        &self,
        job: Box<dyn Job>,
        answer: oneshot::Receiver<Result<T, StoreError>>,
    ) -> Result<T, StoreError> {
        self.inner
            .writer
            .send(Msg::Job(job))
            .await
            .map_err(|_| StoreError::Closed)?;
        answer.await.map_err(|_| {
            StoreError::Internal("the write failed inside the writer (see the log)".into())
        })?
    }

    /// [`Store::write`] for a write that does nothing but its statements (no
    /// file, no state outside the transaction) and so may run more than once.
    /// A group made only of such writes runs without a savepoint per write: if one
    /// of them fails, the group is rolled back and run again, each write under its
    /// own savepoint, so that only the failing one is undone.
    pub async fn write_repeatable<T, F>(&self, f: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: Fn(&Connection) -> Result<T, StoreError> + Send + 'static,
    {
        let (tx, rx) = oneshot::channel::<Result<T, StoreError>>();
        self.submit(
            Box::new(RepeatableJob {
                f,
                tx,
                kept: None,
                ahead: None,
            }),
            rx,
        )
        .await
    }

    /// [`Store::write_repeatable`] with a part in a statement its group runs
    /// before its writes, on PostgreSQL ([`Ahead`]): a group of such writes
    /// costs the server one round trip for all their parts instead of one or
    /// more each. On SQLite (no round trips) the part is not used.
    pub async fn write_repeatable_ahead<T, F>(
        &self,
        f: F,
        ahead: Box<dyn Ahead>,
    ) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: Fn(&Connection) -> Result<T, StoreError> + Send + 'static,
    {
        let (tx, rx) = oneshot::channel::<Result<T, StoreError>>();
        let ahead = (self.backend() == Backend::Postgres).then_some(ahead);
        self.submit(
            Box::new(RepeatableJob {
                f,
                tx,
                kept: None,
                ahead,
            }),
            rx,
        )
        .await
    }

    /// Run `f` on a read-only connection, off the async threads.
    pub async fn read<T, F>(&self, f: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnOnce(&Connection) -> Result<T, StoreError> + Send + 'static,
    {
        let permit = self
            .inner
            .read_permits
            .clone()
            .acquire_owned()
            .await
            .map_err(|_| StoreError::Closed)?;
        let inner = self.inner.clone();
        let work = move || {
            let conn = match (lock(&inner.readers).pop(), &inner.target) {
                (Some(c), _) if !c.is_lost() => c,
                (_, StorageTarget::Postgres(pg)) => {
                    let conn = Connection::postgres(pg.connect()?);
                    conn.execute_batch("SET default_transaction_read_only = on")?;
                    conn
                }
                (_, StorageTarget::Sqlite) => {
                    return Err(StoreError::Internal("no read connection free".into()));
                }
            };
            let result = catch_unwind(AssertUnwindSafe(|| f(&conn)));
            if !conn.is_lost() {
                lock(&inner.readers).push(conn);
            }
            drop(permit);
            result.unwrap_or_else(|_| Err(StoreError::Internal("a read panicked".into())))
        };
        if self.backend() == Backend::Postgres {
            // The PostgreSQL driver runs a runtime of its own: off this one.
            return tokio::task::spawn_blocking(work)
                .await
                .map_err(|e| StoreError::Internal(format!("read task: {e}")))?;
        }
        // On a multi-threaded runtime the read runs right here, with the worker
        // handing its other tasks to another thread meanwhile: no hop to the
        // blocking pool for a read of a few microseconds. Elsewhere (a
        // single-threaded runtime) it goes to the blocking pool.
        let multi = tokio::runtime::Handle::try_current()
            .map(|h| h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread)
            .unwrap_or(false);
        if multi {
            return tokio::task::block_in_place(work);
        }
        tokio::task::spawn_blocking(work)
            .await
            .map_err(|e| StoreError::Internal(format!("read task: {e}")))?
    }

    /// Stop the writer once the writes queued so far are done, and wait for it
    /// (blocking). Later writes fail with [`StoreError::Closed`].
    pub fn close(self) {
        self.inner.closing.store(true, Ordering::SeqCst);
        // Wakes a writer waiting for work; when the queue is full the writer is
        // busy and sees the flag after its group.
        let _ = self.inner.writer.try_send(Msg::Stop);
        let thread = lock(&self.inner.writer_thread).take();
        if let Some(t) = thread {
            let _ = t.join();
        }
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        // A PostgreSQL client's drop blocks on the driver's own runtime, which
        // cannot happen on a thread that drives tokio: drop them elsewhere.
        let readers = std::mem::take(&mut *lock(&self.readers));
        if readers.iter().any(|c| c.backend() == Backend::Postgres) {
            let _ = std::thread::Builder::new()
                .name("storaged-close".into())
                .spawn(move || drop(readers));
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}
