//! `store.metrics`: storaged's samples in the Prometheus text format (every family
//! `oc_storaged_…`). Works by state, attempts running, Works waiting to retry and
//! active Waits are counted in the database at scrape time (a few indexed counts,
//! each grouped by a bounded state); the writer's group sizes and times, its queue,
//! and the bus call times are kept in memory.

use crate::db::Store;
use crate::error::StoreError;
use crate::sql::Connection;
use busapi::metrics::MetricsText;
use busapi::store::MetricsRequest;
use daemon::metrics::{Kind, Text};
use std::collections::BTreeMap;
use std::sync::atomic::Ordering;

/// What the database says at scrape time.
#[derive(Debug, Default)]
struct Counts {
    works: BTreeMap<String, u64>,
    attempts_running: u64,
    works_retrying: u64,
    waits_active: u64,
}

/// The most distinct Work states reported (the states are a handful; a bound
/// all the same).
const MAX_STATES: usize = 32;

fn count(conn: &Connection, sql: &str) -> Result<u64, StoreError> {
    let n: i64 = conn.query_row(sql, [], |r| r.get(0))?;
    Ok(n.max(0) as u64)
}

fn counts(conn: &Connection) -> Result<Counts, StoreError> {
    let mut stmt = conn.prepare("SELECT state, count(*) FROM works GROUP BY state")?;
    let rows = stmt.query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)?)))?;
    let mut works = BTreeMap::new();
    for row in rows.take(MAX_STATES) {
        let (state, n) = row?;
        works.insert(state, n.max(0) as u64);
    }
    Ok(Counts {
        works,
        attempts_running: count(
            conn,
            "SELECT count(*) FROM executions WHERE state = 'running'",
        )?,
        works_retrying: count(
            conn,
            "SELECT count(*) FROM works WHERE state = 'pending' AND failures > 0",
        )?,
        waits_active: count(conn, "SELECT count(*) FROM waits WHERE state = 'active'")?,
    })
}

impl Store {
    /// `store.metrics`.
    pub async fn metrics(&self, _req: MetricsRequest) -> Result<MetricsText, StoreError> {
        let c = self.read(counts).await?;
        let mut t = Text::new();
        t.family(
            "oc_storaged_works",
            Kind::Gauge,
            "Works by state, counted in the database.",
        );
        for (state, n) in &c.works {
            t.sample("oc_storaged_works", &[("state", state)], n);
        }
        t.single(
            "oc_storaged_attempts_running",
            Kind::Gauge,
            "Attempts (executions) running now.",
            c.attempts_running,
        );
        t.single(
            "oc_storaged_works_retrying",
            Kind::Gauge,
            "Works pending again after a failed attempt, waiting for their retry.",
            c.works_retrying,
        );
        t.single(
            "oc_storaged_waits_active",
            Kind::Gauge,
            "Waits active now.",
            c.waits_active,
        );
        let w = self.writer_stats();
        t.single(
            "oc_storaged_commit_groups_total",
            Kind::Counter,
            "Transactions the writer committed (or failed), each a group of writes.",
            w.groups.load(Ordering::Relaxed),
        );
        t.single(
            "oc_storaged_commit_writes_total",
            Kind::Counter,
            "Writes run in those groups.",
            w.writes.load(Ordering::Relaxed),
        );
        t.single(
            "oc_storaged_commit_round_trips_total",
            Kind::Counter,
            "Round trips to the database server those groups took (PostgreSQL; 0 on SQLite).",
            w.round_trips.load(Ordering::Relaxed),
        );
        t.family(
            "oc_storaged_commit_group_size",
            Kind::Histogram,
            "Writes per group-committed transaction.",
        );
        t.histogram("oc_storaged_commit_group_size", &[], &w.group_size);
        t.family(
            "oc_storaged_commit_group_duration_seconds",
            Kind::Histogram,
            "Time a group took, from its transaction's begin to its commit.",
        );
        t.histogram(
            "oc_storaged_commit_group_duration_seconds",
            &[],
            &w.group_seconds,
        );
        let (queued, room) = self.write_queue();
        t.single(
            "oc_storaged_write_queue_depth",
            Kind::Gauge,
            "Writes queued for the writer thread now.",
            queued,
        );
        t.single(
            "oc_storaged_write_queue_limit",
            Kind::Gauge,
            "The most writes the writer queues (max_queued_writes).",
            room,
        );
        daemon::metrics::render_call_times(&mut t, "storaged");
        Ok(MetricsText {
            text: t.into_string(),
        })
    }
}

crate::store_methods! {
    MetricsRequest => metrics,
}
