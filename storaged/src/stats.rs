//! The store's numbers (`store.stats`) and its health check (`store.check`).

use crate::db::Store;
use crate::error::StoreError;
use crate::sql::{Backend, Connection, OptionalExtension};
pub use busapi::store::stats::*;
use std::collections::BTreeMap;
use std::path::Path;

// ---------------------------------------------------------------------------------------
// Stats
// ---------------------------------------------------------------------------------------

fn by_state(conn: &Connection, table: &str) -> Result<BTreeMap<String, u64>, StoreError> {
    let mut stmt = conn.prepare(&format!(
        "SELECT state, count(*) FROM {table} GROUP BY state"
    ))?;
    let rows = stmt.query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)?)))?;
    let mut out = BTreeMap::new();
    for row in rows {
        let (state, n) = row?;
        out.insert(state, n.max(0) as u64);
    }
    Ok(out)
}

fn count(conn: &Connection, sql: &str) -> Result<u64, StoreError> {
    let n: i64 = conn.query_row(sql, [], |r| r.get(0))?;
    Ok(n.max(0) as u64)
}

/// The store's numbers, but `db_bytes` (the files).
pub fn stats(conn: &Connection) -> Result<StatsResponse, StoreError> {
    let oldest_accepted_at: Option<String> = conn
        .query_row(
            "SELECT accepted_at FROM events ORDER BY accepted_ms, seq LIMIT 1",
            [],
            |r| r.get(0),
        )
        .optional()?;
    let sequenced: Option<i64> = match conn.backend() {
        Backend::Sqlite => conn
            .query_row(
                "SELECT seq FROM sqlite_sequence WHERE name = 'events'",
                [],
                |r| r.get(0),
            )
            .optional()?,
        Backend::Postgres => conn.query_row(
            "SELECT pg_sequence_last_value(pg_get_serial_sequence('events', 'seq'))",
            [],
            |r| r.get(0),
        )?,
    };
    let max_seq: Option<i64> = conn.query_row("SELECT max(seq) FROM events", [], |r| r.get(0))?;
    let (art_count, art_bytes): (i64, i64) = conn.query_row(
        "SELECT count(*), CAST(coalesce(sum(size), 0) AS BIGINT) FROM artifacts",
        [],
        |r| Ok((r.get(0)?, r.get(1)?)),
    )?;
    Ok(StatsResponse {
        db_bytes: 0,
        events: EventStats {
            count: count(conn, "SELECT count(*) FROM events")?,
            oldest_accepted_at,
            latest_seq: sequenced.unwrap_or(0).max(max_seq.unwrap_or(0)),
        },
        works: by_state(conn, "works")?,
        executions: by_state(conn, "executions")?,
        waits_active: count(conn, "SELECT count(*) FROM waits WHERE state = 'active'")?,
        timers: count(conn, "SELECT count(*) FROM timers")?,
        kv_entries: count(conn, "SELECT count(*) FROM kv")?,
        artifacts: ArtifactStats {
            count: art_count.max(0) as u64,
            bytes: art_bytes.max(0) as u64,
        },
        resource_leases: count(conn, "SELECT count(*) FROM resource_leases")?,
        writer: WriterStats::default(),
    })
}

fn file_len(path: &Path) -> u64 {
    std::fs::metadata(path).map_or(0, |m| m.len())
}

impl Store {
    /// `store.stats`.
    pub async fn stats(&self, _req: StatsRequest) -> Result<StatsResponse, StoreError> {
        let mut out = self.read(stats).await?;
        out.db_bytes = match self.backend() {
            Backend::Sqlite => {
                let db = self.db_path().to_path_buf();
                let mut wal = db.clone().into_os_string();
                wal.push("-wal");
                file_len(&db) + file_len(Path::new(&wal))
            }
            Backend::Postgres => {
                self.read(|c| {
                    Ok(
                        c.query_row("SELECT pg_database_size(current_database())", [], |r| {
                            r.get::<_, u64>(0)
                        })?,
                    )
                })
                .await?
            }
        };
        let (groups, writes) = self.writer_counters();
        out.writer = WriterStats { groups, writes };
        Ok(out)
    }
}

fn quick_check(conn: &Connection) -> Result<String, StoreError> {
    if conn.backend() == Backend::Postgres {
        return postgres_check(conn);
    }
    let mut stmt = conn.prepare("PRAGMA quick_check(20)")?;
    let lines = stmt
        .query_map([], |r| r.get::<_, String>(0))?
        .collect::<Result<Vec<_>, _>>()?;
    Ok(lines.join("; "))
}

/// PostgreSQL keeps its own pages whole (checksums, WAL); what the store can
/// check is that the schema is this release's and every table of it reads.
fn postgres_check(conn: &Connection) -> Result<String, StoreError> {
    let found = crate::schema::version(conn)?;
    let ours = crate::schema::current_version();
    if found != ours {
        return Ok(format!(
            "schema version {found}, this release writes {ours}"
        ));
    }
    let mut problems = Vec::new();
    for table in crate::schema::TABLES {
        if let Err(e) = conn.query_row(
            &format!("SELECT count(*) FROM (SELECT 1 FROM {table} LIMIT 1) t"),
            [],
            |r| r.get::<_, i64>(0),
        ) {
            problems.push(format!("{table}: {e}"));
        }
    }
    Ok(if problems.is_empty() {
        "ok".into()
    } else {
        problems.join("; ")
    })
}

impl Store {
    /// `store.check`: SQLite's `quick_check` on a read connection (unless only the
    /// space is asked for), and the free space of the state directory's filesystem.
    pub async fn check(&self, req: CheckRequest) -> Result<CheckResponse, StoreError> {
        let integrity = if req.space_only {
            String::new()
        } else {
            self.read(quick_check).await?
        };
        let dir = self.dir().to_path_buf();
        let (free_bytes, total_bytes) = match nix::sys::statvfs::statvfs(&dir) {
            Ok(v) => {
                let unit = v.fragment_size();
                (
                    v.blocks_available().saturating_mul(unit),
                    v.blocks().saturating_mul(unit),
                )
            }
            Err(_) => (0, 0),
        };
        Ok(CheckResponse {
            integrity,
            database: self.describe(),
            dir: dir.display().to_string(),
            free_bytes,
            total_bytes,
        })
    }
}

crate::store_methods! {
    StatsRequest => stats,
    CheckRequest => check,
}
