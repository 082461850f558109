//! The wire types of `stats` (moved from storaged).

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// `store.stats`: no fields.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StatsRequest {}

/// The event log's numbers.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct EventStats {
    /// Events stored.
    pub count: u64,
    /// When the oldest stored event was accepted (RFC 3339).
    pub oldest_accepted_at: Option<String>,
    /// The highest sequence ever assigned (0 for none).
    pub latest_seq: i64,
}

/// The artifacts' numbers.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ArtifactStats {
    /// Committed artifacts.
    pub count: u64,
    /// Their bytes.
    pub bytes: u64,
}

/// Result of `store.stats`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StatsResponse {
    /// The database file plus its WAL.
    pub db_bytes: u64,
    /// The event log.
    pub events: EventStats,
    /// Work by state.
    pub works: BTreeMap<String, u64>,
    /// Executions by state.
    pub executions: BTreeMap<String, u64>,
    /// Active Waits.
    pub waits_active: u64,
    /// Timers.
    pub timers: u64,
    /// KV entries.
    pub kv_entries: u64,
    /// Committed artifacts.
    pub artifacts: ArtifactStats,
    /// Resource leases.
    #[serde(default)]
    pub resource_leases: u64,
    /// The writer's transactions since this storaged started.
    #[serde(default)]
    pub writer: WriterStats,
}

/// What the writer thread has committed since storaged started: `writes` over
/// `groups` is how many writes share a commit (and its `fsync`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct WriterStats {
    /// Transactions the writer ran (each a group of writes, one commit).
    pub groups: u64,
    /// Writes in them.
    pub writes: u64,
}

/// `store.check`.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CheckRequest {
    /// Only the room left (cheap, for `status`): no `quick_check`, and
    /// [`CheckResponse::integrity`] is empty.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub space_only: bool,
}

/// Result of `store.check`: the database's integrity and the room left for it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CheckResponse {
    /// `ok`, or what SQLite's `quick_check` found (its first 20 lines); on
    /// PostgreSQL, the schema version and each table read.
    pub integrity: String,
    /// Where the database is: the SQLite file, or `postgres host:port/db as
    /// user` (never a password).
    #[serde(default)]
    pub database: String,
    /// The state directory.
    pub dir: String,
    /// Bytes free for the store's filesystem (for an unprivileged user).
    pub free_bytes: u64,
    /// The filesystem's size.
    pub total_bytes: u64,
}

impl CheckResponse {
    /// "the disk is full: …" when the state directory's filesystem is
    /// ([`disk_full`]), naming the directory and its free bytes.
    pub fn full(&self) -> Option<String> {
        disk_full(self.free_bytes, self.total_bytes).then(|| {
            format!(
                "the disk is full: {} bytes free of {} in {}",
                self.free_bytes, self.total_bytes, self.dir
            )
        })
    }
}

/// Below this many free bytes (or 2% of the filesystem, if less) the state
/// directory's disk is full: writes fail or are about to.
pub const FULL_BELOW_BYTES: u64 = 16 * 1024 * 1024;

/// Whether a filesystem of `total` bytes with `free` bytes free (for an
/// unprivileged user) is full: under [`FULL_BELOW_BYTES`] or 2% of it,
/// whichever is less. `total` 0 (unknown) is not full.
pub fn disk_full(free: u64, total: u64) -> bool {
    total > 0 && free < FULL_BELOW_BYTES.min(total / 50)
}
