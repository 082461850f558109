//! The wire types of `work::hosts` (moved from storaged).

use super::*;

/// `store.host_beat`: this host is alive for `lease_ms` more.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HostBeatRequest {
    /// The host ID.
    pub host: String,
    /// A name for people (its hostname, its state directory).
    #[serde(default)]
    pub name: String,
    /// How long it counts as alive without another beat.
    pub lease_ms: u64,
}

/// Result of `store.host_beat`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct HostBeatResponse {
    /// When the host counts as gone unless it beats again.
    pub expires_ms: i64,
    /// True when the host was gone (or unknown) before this beat.
    pub returned: bool,
    /// When it had gone (its lease's end), if it returned from being gone; the other
    /// hosts may have taken its attempts over since.
    #[serde(default)]
    pub gone_since_ms: Option<i64>,
}

/// `store.hosts`: the hosts, by ID, paged.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HostsRequest {
    /// Hosts after this ID (empty: from the first).
    #[serde(default)]
    pub after: String,
    /// At most this many.
    #[serde(default)]
    pub limit: u32,
}

/// A host, as `store.hosts` answers it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct HostRow {
    /// Its ID.
    pub id: String,
    /// Its name for people.
    pub name: String,
    /// Its last beat (ms).
    pub beat_ms: i64,
    /// When it counts as gone unless it beats again (ms).
    pub expires_ms: i64,
    /// Whether it is alive now.
    pub alive: bool,
    /// Its first beat (RFC 3339).
    pub started_at: String,
    /// Attempts it launched that run now.
    pub running: i64,
}

/// Result of `store.hosts`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct HostsResponse {
    /// The hosts.
    pub hosts: Vec<HostRow>,
    /// The next page's cursor; empty at the end.
    #[serde(default)]
    pub next: String,
}

/// `store.task_claim`: claim the pass of an extension task that is due, so that one
/// host of the suite runs it.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TaskClaimRequest {
    /// The extension declaring the task.
    pub extension: String,
    /// The task.
    pub task: String,
    /// Its interval.
    pub every_ms: u64,
    /// The host claiming it.
    pub host: String,
}

/// Result of `store.task_claim`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TaskClaimResponse {
    /// True: the caller runs this pass now.
    pub claimed: bool,
    /// When the next pass is due (ask again then).
    pub due_ms: i64,
    /// The host that claimed the last pass (empty: none yet).
    #[serde(default)]
    pub host: String,
}
