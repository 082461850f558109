//! The wire types of `retention` (moved from storaged).

use serde::{Deserialize, Serialize};

/// `store.retention_run`: remove what is old or over the bounds. Every bound is
/// optional; an absent one removes nothing (orphan and stale files always go).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RetentionRunRequest {
    /// Remove events accepted longer ago than this.
    #[serde(default)]
    pub max_event_age_ms: Option<i64>,
    /// Keep at most this many events (the oldest beyond go).
    #[serde(default)]
    pub max_events: Option<u64>,
    /// Remove artifacts committed longer ago than this.
    #[serde(default)]
    pub max_artifact_age_ms: Option<i64>,
    /// Keep at most this many artifact bytes in all (the oldest beyond go).
    #[serde(default)]
    pub max_artifact_bytes: Option<u64>,
    /// The time the ages count from (default: now).
    #[serde(default)]
    pub now_ms: Option<i64>,
}

/// Result of `store.retention_run`: what it removed.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RetentionRunResponse {
    /// Events removed.
    pub events_removed: u64,
    /// `work_inputs` rows of terminal Work removed with their events.
    pub work_inputs_removed: u64,
    /// Committed artifacts removed (rows and files).
    pub artifacts_removed: u64,
    /// Their bytes.
    pub artifact_bytes_removed: u64,
    /// Files in `artifacts/` without a row removed.
    pub orphan_files_removed: u64,
    /// Stale files in `artifacts/tmp/` removed.
    pub stale_tmp_files_removed: u64,
}
