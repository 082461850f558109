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

/// `store.check`: no fields.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CheckRequest {}

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
