//! The writer thread: it takes the queued writes in groups, runs each group in one
//! transaction (see [`run_group`]) and answers each write once the group's commit is on disk.

use super::jobs::{Finish, GroupFailure, Job, Msg};
use super::wal::{restart_if_asked, RestartRequest};
use super::{Ahead, StorageTarget, WriterCounters};
use crate::error::StoreError;
use crate::sql::{Backend, Connection};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use tokio::sync::mpsc;

/// The first wait before making a lost PostgreSQL connection again; it doubles
/// up to [`MAX_RECONNECT_WAIT`] while the server stays away.
const FIRST_RECONNECT_WAIT: std::time::Duration = std::time::Duration::from_millis(100);
/// The longest wait between two attempts to reconnect.
const MAX_RECONNECT_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

/// The writer's connection, made again after a loss (PostgreSQL).
struct WriterConn {
    conn: Option<Connection>,
    /// Where its round trips are counted ([`WriterCounters::round_trips`]).
    trips: Arc<std::sync::atomic::AtomicU64>,
    target: StorageTarget,
    wait: std::time::Duration,
    next_try: std::time::Instant,
}

impl WriterConn {
    /// The connection, reconnecting when it is lost and the backoff allows;
    /// else why there is none.
    fn get(&mut self) -> Result<&Connection, GroupFailure> {
        if self.conn.as_ref().is_some_and(|c| !c.is_lost()) {
            return self
                .conn
                .as_ref()
                .ok_or_else(|| GroupFailure::Failed("gone".into()));
        }
        let StorageTarget::Postgres(pg) = &self.target else {
            return Err(GroupFailure::Failed("the SQLite connection is gone".into()));
        };
        if self.conn.take().is_some() {
            tracing::warn!(database = %pg.describe(), "the database connection is lost; writes fail until it is back");
        }
        let now = std::time::Instant::now();
        if now < self.next_try {
            return Err(GroupFailure::Unavailable(format!(
                "no connection to {} (the next attempt is in {} ms)",
                pg.describe(),
                self.next_try.duration_since(now).as_millis()
            )));
        }
        match pg.connect() {
            Ok(session) => {
                tracing::info!(database = %pg.describe(), "the database connection is back");
                self.wait = FIRST_RECONNECT_WAIT;
                let conn = Connection::postgres(session);
                conn.count_round_trips_in(self.trips.clone());
                self.conn = Some(conn);
                self.conn
                    .as_ref()
                    .ok_or_else(|| GroupFailure::Failed("gone".into()))
            }
            Err(e) => {
                self.next_try = now + self.wait;
                self.wait = (self.wait * 2).min(MAX_RECONNECT_WAIT);
                Err(GroupFailure::of(e))
            }
        }
    }
}

/// How the writer forms groups ([`Limits::max_group`], [`Limits::group_gather`]).
pub(super) struct Grouping {
    pub(super) max: usize,
    pub(super) gather: std::time::Duration,
}

/// `restarts`: the checkpoint thread's requests to start the WAL over (SQLite),
/// served between two groups.
pub(super) fn writer_loop(
    conn: Connection,
    target: StorageTarget,
    mut rx: mpsc::Receiver<Msg>,
    grouping: Grouping,
    restarts: Option<Arc<RestartRequest>>,
    closing: Arc<AtomicBool>,
    counters: Arc<WriterCounters>,
) {
    conn.count_round_trips_in(counters.round_trips.clone());
    let mut conn = WriterConn {
        conn: Some(conn),
        trips: counters.round_trips.clone(),
        target,
        wait: FIRST_RECONNECT_WAIT,
        next_try: std::time::Instant::now(),
    };
    let mut stop = false;
    while !stop {
        let Some(first) = rx.blocking_recv() else {
            break;
        };
        let mut jobs = Vec::new();
        let mut next = Some(first);
        while let Some(msg) = next.take() {
            match msg {
                Msg::Job(job) => jobs.push(job),
                Msg::Stop => stop = true,
            }
            if jobs.len() < grouping.max {
                next = rx.try_recv().ok();
            }
        }
        // Company now means more is on its way: give it a moment to join.
        if !grouping.gather.is_zero() && !stop && jobs.len() >= 2 && jobs.len() < grouping.max {
            std::thread::sleep(grouping.gather);
            while jobs.len() < grouping.max {
                match rx.try_recv() {
                    Ok(Msg::Job(job)) => jobs.push(job),
                    Ok(Msg::Stop) => {
                        stop = true;
                        break;
                    }
                    Err(_) => break,
                }
            }
        }
        if !jobs.is_empty() {
            counters.groups.fetch_add(1, Ordering::Relaxed);
            counters
                .writes
                .fetch_add(jobs.len() as u64, Ordering::Relaxed);
            counters.group_size.observe(jobs.len() as f64);
            let started = std::time::Instant::now();
            match conn.get() {
                Ok(c) => {
                    run_group(c, jobs);
                    counters.group_seconds.observe_duration(started.elapsed());
                }
                Err(why) => {
                    for job in jobs {
                        job.fail(why.to_error("cannot begin a write transaction"));
                    }
                }
            }
        }
        if let (Some(request), Some(c)) = (&restarts, conn.conn.as_ref()) {
            if let Some(sqlite) = c.as_sqlite() {
                restart_if_asked(sqlite, request);
            }
        }
        if closing.load(Ordering::SeqCst) && rx.is_empty() {
            stop = true;
        }
    }
    rx.close();
    // Writes that raced the close are answered, not left hanging.
    while let Ok(msg) = rx.try_recv() {
        if let Msg::Job(job) = msg {
            job.fail(StoreError::Closed);
        }
    }
    tracing::debug!("the writer thread stops");
}

/// Run a transaction-control statement.
fn control(conn: &Connection, sql: &str) -> Result<(), GroupFailure> {
    match conn.as_sqlite() {
        Some(c) => c
            .prepare_cached(sql)
            .and_then(|mut s| s.execute([]))
            .map(|_| ())
            .map_err(|e| GroupFailure::of(crate::sql::Error::Sqlite(e))),
        None => conn.execute_batch(sql).map_err(GroupFailure::of),
    }
}

/// The advisory lock every PostgreSQL write transaction takes first (one
/// writer at a time across every storaged on the database): "oc" "wr" as a
/// number, so another program's locks are unlikely to collide with it.
pub const WRITE_LOCK: i64 = 0x6f63_7772;

/// How a PostgreSQL write transaction begins: the write lock first, and with
/// `savepoint` the first job's savepoint in the same round trip.
fn pg_begin(savepoint: bool) -> String {
    let savepoint = if savepoint { "; SAVEPOINT job" } else { "" };
    format!("BEGIN; SELECT pg_advisory_xact_lock({WRITE_LOCK}){savepoint}")
}

/// Begin a write transaction with `sql`; on PostgreSQL a failure after `BEGIN`
/// (the lock not had within the session's bound) leaves a transaction open,
/// which is rolled back.
fn begin(conn: &Connection, sql: &str) -> Result<(), GroupFailure> {
    let begun = control(conn, sql);
    if begun.is_err() && conn.backend() == Backend::Postgres {
        let _ = conn.execute_batch("ROLLBACK");
    }
    begun
}

/// One transaction: each job in its own savepoint, one commit for all; a lone
/// job, or a group of repeatable jobs, without savepoints ([`run_unguarded`]).
fn run_group(conn: &Connection, jobs: Vec<Box<dyn Job>>) {
    let pg = conn.backend() == Backend::Postgres;
    let bare = jobs.len() == 1 || jobs.iter().all(|j| j.repeatable());
    if pg && !bare {
        return run_group_pg(conn, jobs);
    }
    let first = if pg {
        pg_begin(false)
    } else {
        "BEGIN IMMEDIATE".to_string()
    };
    if let Err(e) = begin(conn, &first) {
        let why = e.to_error("cannot begin a write transaction");
        tracing::error!(error = %why);
        for job in jobs {
            job.fail(e.to_error("cannot begin a write transaction"));
        }
        return;
    }
    let jobs = match run_unguarded(conn, jobs) {
        Some(jobs) => jobs,
        None => return,
    };
    if pg {
        // Begun again by `run_unguarded`, with the first job's savepoint.
        return run_guarded_pg(conn, jobs);
    }
    let mut finishes: Vec<Finish> = Vec::with_capacity(jobs.len());
    let mut jobs = jobs.into_iter();
    while let Some(job) = jobs.next() {
        if lost_transaction(conn) {
            // A failed job took the whole transaction with it (SQLite rolls it
            // back itself on SQLITE_FULL or an I/O error): nothing of the group
            // is written, so nothing of it may be answered as written, and the
            // jobs left must not run outside a transaction.
            let why = rolled_back();
            if due_to_say(&ROLLED_SAID) {
                tracing::error!("a write failed and the database rolled its group back (said at most once a minute)");
            } else {
                tracing::debug!("a write failed and the database rolled its group back");
            }
            for finish in finishes {
                finish(Err(why.clone()));
            }
            job.fail(why.to_error("the group was rolled back"));
            for job in jobs {
                job.fail(why.to_error("the group was rolled back"));
            }
            return;
        }
        if let Err(e) = control(conn, "SAVEPOINT job") {
            job.fail(e.to_error("cannot open a savepoint"));
            continue;
        }
        let outcome = catch_unwind(AssertUnwindSafe(|| job.run(conn)));
        match outcome {
            Ok((true, finish)) => {
                if let Err(e) = control(conn, "RELEASE SAVEPOINT job") {
                    tracing::error!(error = ?e, "cannot release a savepoint");
                    let _ = conn.execute_batch("ROLLBACK TO SAVEPOINT job; RELEASE SAVEPOINT job");
                    finish(Err(e));
                    continue;
                }
                finishes.push(finish);
            }
            Ok((false, finish)) => {
                let _ = conn.execute_batch("ROLLBACK TO SAVEPOINT job; RELEASE SAVEPOINT job");
                finishes.push(finish);
            }
            Err(_) => {
                // The job's answer channel went with the panic: its caller hears
                // of the failure; the others are untouched.
                tracing::error!("a write panicked; rolled back alone");
                let _ = conn.execute_batch("ROLLBACK TO SAVEPOINT job; RELEASE SAVEPOINT job");
            }
        }
    }
    commit(conn, finishes);
}

/// Whether the transaction [`run_group`] began is gone: SQLite rolls a
/// transaction back by itself on some errors (`SQLITE_FULL`, `SQLITE_IOERR`), and
/// a savepoint opened after that would start a transaction of its own.
fn lost_transaction(conn: &Connection) -> bool {
    conn.as_sqlite()
        .is_some_and(rusqlite::Connection::is_autocommit)
}

thread_local! {
    /// Whether this writer thread's last commit failed for a full disk: said in
    /// the log when it starts and when it ends (at most once a [`SAY_EVERY`] each,
    /// a disk that is nearly full lets some commits through), not at every write.
    static DISK_FULL: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    /// When the log last said the disk is full.
    static FULL_SAID: std::cell::Cell<Option<std::time::Instant>> = const { std::cell::Cell::new(None) };
    /// When the log last said there is room again.
    static ROOM_SAID: std::cell::Cell<Option<std::time::Instant>> = const { std::cell::Cell::new(None) };
    /// When the log last said SQLite rolled a group back by itself.
    static ROLLED_SAID: std::cell::Cell<Option<std::time::Instant>> = const { std::cell::Cell::new(None) };
}

/// How often the log says at most that the disk is full, or that there is room again.
const SAY_EVERY: std::time::Duration = std::time::Duration::from_secs(60);

/// Whether to say it now (not said within [`SAY_EVERY`]); if so, it counts as said.
fn due_to_say(
    when: &'static std::thread::LocalKey<std::cell::Cell<Option<std::time::Instant>>>,
) -> bool {
    let now = std::time::Instant::now();
    let due = when
        .get()
        .is_none_or(|t| now.duration_since(t) >= SAY_EVERY);
    if due {
        when.set(Some(now));
    }
    due
}

/// How the writes of a group the database rolled back are answered: nothing was
/// written; try again.
fn rolled_back() -> GroupFailure {
    GroupFailure::Unavailable(
        "the database rolled the write's group back after another write of it failed \
         (a full disk or an I/O error); nothing was written"
            .into(),
    )
}

/// Run a group without a savepoint per job, inside the transaction just begun,
/// when that is safe: a lone job (if it fails, the whole transaction is its own
/// to roll back) or a group of repeatable jobs (if one fails, all are rolled back
/// and handed back, to be run again each under its savepoint). Answers `None` when
/// the group is done (committed or rolled back and answered), or the jobs to run
/// the guarded way in a transaction begun again (on PostgreSQL with the first
/// job's savepoint).
///
/// On PostgreSQL a group of repeatable jobs first runs its jobs' [`Ahead`]
/// parts in one statement; a part that fails, or a value it kept that its job
/// did not take, sends the group the guarded way too.
fn run_unguarded(conn: &Connection, mut jobs: Vec<Box<dyn Job>>) -> Option<Vec<Box<dyn Job>>> {
    let repeatable = jobs.iter().all(|j| j.repeatable());
    let ahead = match run_ahead(conn, &jobs, repeatable) {
        Ok(ran) => ran,
        Err(e) => {
            for job in jobs {
                job.fail(e.to_error("cannot begin a write transaction"));
            }
            return None;
        }
    };
    if jobs.len() == 1 && !ahead {
        let job = jobs.pop()?;
        match catch_unwind(AssertUnwindSafe(|| job.run(conn))) {
            Ok((true, finish)) => commit(conn, vec![finish]),
            Ok((false, finish)) => {
                rollback(conn);
                finish(Ok(()));
            }
            Err(_) => {
                tracing::error!("a write panicked; rolled back");
                rollback(conn);
            }
        }
        return None;
    }
    if !repeatable {
        return Some(jobs);
    }
    let clean = jobs.iter_mut().all(|job| {
        matches!(
            catch_unwind(AssertUnwindSafe(|| job.attempt(conn))),
            Ok(true)
        )
    });
    let left = conn.clear_ahead();
    if left > 0 {
        tracing::warn!(
            left,
            "values a group's statement kept ahead for its writes were not taken; the group runs again, each write alone"
        );
    }
    if clean && left == 0 {
        commit(conn, jobs.into_iter().map(|job| job.settle()).collect());
        return None;
    }
    // One of them failed: undo them all and run each again under its savepoint.
    rollback(conn);
    let again = match conn.backend() {
        Backend::Postgres => pg_begin(true),
        Backend::Sqlite => "BEGIN IMMEDIATE".to_string(),
    };
    if let Err(e) = begin(conn, &again) {
        tracing::error!(error = %e.to_error("cannot begin a write transaction"));
        for job in jobs {
            job.fail(e.to_error("cannot begin a write transaction"));
        }
        return None;
    }
    Some(jobs)
}

/// Run the [`Ahead`] parts of a group of `repeatable` jobs, on PostgreSQL:
/// whether any ran. When the statement fails, its transaction is rolled back
/// and begun again (without them), so the group runs the ordinary way; the
/// error is why it could not begin again (the jobs are to be failed).
fn run_ahead(
    conn: &Connection,
    jobs: &[Box<dyn Job>],
    repeatable: bool,
) -> Result<bool, GroupFailure> {
    if !repeatable || conn.backend() != Backend::Postgres {
        return Ok(false);
    }
    let parts: Vec<&dyn Ahead> = jobs.iter().filter_map(|j| j.ahead()).collect();
    let Some(first) = parts.first() else {
        return Ok(false);
    };
    match first.run_all(conn, &parts) {
        Ok(()) => Ok(true),
        Err(e) => {
            tracing::warn!(error = %e, "a group's statement run ahead of its writes failed; the writes run the ordinary way");
            conn.clear_ahead();
            rollback(conn);
            begin(conn, &pg_begin(false)).inspect_err(|e| {
                tracing::error!(error = %e.to_error("cannot begin a write transaction"));
            })?;
            Ok(false)
        }
    }
}

/// Roll the open transaction back (a failure is logged: the next `BEGIN` finds out).
fn rollback(conn: &Connection) {
    if let Err(e) = control(conn, "ROLLBACK") {
        tracing::error!(error = ?e, "cannot roll a write transaction back");
    }
}

/// [`run_group`] on PostgreSQL, where every control statement is a round trip
/// to the server: the first savepoint goes with `BEGIN` and the lock, the
/// boundary between two jobs is one round trip (`RELEASE SAVEPOINT job;
/// SAVEPOINT job`), a failed job's `ROLLBACK TO` keeps its savepoint for the
/// next, and `COMMIT` releases the last.
fn run_group_pg(conn: &Connection, jobs: Vec<Box<dyn Job>>) {
    if let Err(e) = begin(conn, &pg_begin(true)) {
        tracing::error!(error = %e.to_error("cannot begin a write transaction"));
        for job in jobs {
            job.fail(e.to_error("cannot begin a write transaction"));
        }
        return;
    }
    run_guarded_pg(conn, jobs);
}

/// The jobs of [`run_group_pg`], in the transaction begun with the first
/// job's savepoint.
fn run_guarded_pg(conn: &Connection, jobs: Vec<Box<dyn Job>>) {
    let count = jobs.len();
    let mut savepoint = true;
    let mut finishes = Vec::with_capacity(count);
    for (i, job) in jobs.into_iter().enumerate() {
        if !savepoint {
            if let Err(e) = control(conn, "SAVEPOINT job") {
                job.fail(e.to_error("cannot open a savepoint"));
                continue;
            }
            savepoint = true;
        }
        let last = i + 1 == count;
        match catch_unwind(AssertUnwindSafe(|| job.run(conn))) {
            Ok((true, finish)) if last => finishes.push(finish),
            Ok((true, finish)) => match control(conn, "RELEASE SAVEPOINT job; SAVEPOINT job") {
                Ok(()) => finishes.push(finish),
                Err(e) => {
                    tracing::error!(error = ?e, "cannot release a savepoint");
                    let _ = conn.execute_batch("ROLLBACK TO SAVEPOINT job");
                    finish(Err(e));
                    savepoint = false;
                }
            },
            Ok((false, finish)) => {
                let _ = conn.execute_batch("ROLLBACK TO SAVEPOINT job");
                finishes.push(finish);
            }
            Err(_) => {
                tracing::error!("a write panicked; rolled back alone");
                let _ = conn.execute_batch("ROLLBACK TO SAVEPOINT job");
            }
        }
    }
    commit(conn, finishes);
}

/// Commit a group and answer each write that ran in it with the outcome.
fn commit(conn: &Connection, finishes: Vec<Finish>) {
    if lost_transaction(conn) {
        super::jobs::answer_all(finishes, Err(rolled_back()));
        return;
    }
    let committed = control(conn, "COMMIT");
    match &committed {
        Err(GroupFailure::Full(m)) => {
            if !DISK_FULL.replace(true) && due_to_say(&FULL_SAID) {
                tracing::error!(error = %m, "the disk is full: writes are refused (callers are told to retry) until space is freed");
            } else {
                tracing::debug!(error = %m, "commit failed: the disk is full");
            }
        }
        Err(e) => tracing::error!(error = ?e, "commit failed"),
        Ok(()) => {
            if DISK_FULL.replace(false) && due_to_say(&ROOM_SAID) {
                tracing::info!("there is room on the disk again: writes are taken");
            }
        }
    }
    if committed.is_err() {
        let _ = conn.execute_batch("ROLLBACK");
    }
    super::jobs::answer_all(finishes, committed);
}
