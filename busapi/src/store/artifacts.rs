//! The wire types of `artifacts` (moved from storaged).

use serde::{Deserialize, Serialize};

/// `store.artifact_create`: open an artifact for chunked writing.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ArtifactCreateRequest {
    /// The Execution it belongs to.
    #[serde(default)]
    pub execution_id: Option<String>,
    /// Its name (`transcript`, `log`).
    pub name: String,
    /// Its media type.
    #[serde(default)]
    pub media_type: Option<String>,
    /// The most bytes it may hold; absent or 0 for `max_artifact_bytes`.
    #[serde(default)]
    pub max_bytes: Option<u64>,
}

/// Result of `store.artifact_create`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ArtifactCreateResponse {
    /// The new artifact's id.
    pub artifact_id: String,
}

/// `store.artifact_write`: one chunk at exactly the artifact's current size.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ArtifactWriteRequest {
    /// The open artifact.
    pub artifact_id: String,
    /// Where the chunk goes: the bytes written so far.
    #[serde(default)]
    pub offset: u64,
    /// The bytes (base64 on the wire), at most `max_chunk_bytes`.
    #[serde(with = "protocol::b64")]
    pub data: Vec<u8>,
}

/// Result of `store.artifact_write`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ArtifactWriteResponse {
    /// The artifact's size after the chunk.
    pub size: u64,
}

/// `store.artifact_commit`: make a written artifact durable and visible.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ArtifactCommitRequest {
    /// The open artifact.
    pub artifact_id: String,
    /// The size the writer expects; refused (`conflict`) when it differs.
    #[serde(default)]
    pub size: Option<u64>,
}

/// Result of `store.artifact_commit`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ArtifactCommitResponse {
    /// The artifact.
    pub artifact_id: String,
    /// Its size.
    pub size: u64,
    /// `sha256:<hex>` of its bytes.
    pub digest: String,
}

/// `store.artifact_abort`: discard an open artifact.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ArtifactAbortRequest {
    /// The open artifact.
    pub artifact_id: String,
}

/// Result of `store.artifact_abort`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ArtifactAbortResponse {}

/// `store.artifact_read`: a range of a committed artifact.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ArtifactReadRequest {
    /// The committed artifact.
    pub artifact_id: String,
    /// The first byte.
    #[serde(default)]
    pub offset: u64,
    /// How many bytes, at most `max_chunk_bytes`.
    pub length: u64,
}

/// Result of `store.artifact_read`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ArtifactReadResponse {
    /// The bytes (base64 on the wire); fewer than asked at the end.
    #[serde(with = "protocol::b64")]
    pub data: Vec<u8>,
    /// The artifact's whole size.
    pub size: u64,
    /// Whether `data` reaches the end.
    pub eof: bool,
}

/// `store.artifact_get`: one committed artifact's row.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ArtifactGetRequest {
    /// The artifact.
    pub artifact_id: String,
}

/// A committed artifact (the answer of `store.artifact_get`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Artifact {
    /// Its id.
    pub artifact_id: String,
    /// The Execution it belongs to (`""` for none).
    pub execution_id: String,
    /// Its name.
    pub name: String,
    /// Its media type (`""` if not given).
    pub media_type: String,
    /// Its size in bytes.
    pub size: u64,
    /// `sha256:<hex>` of its bytes.
    pub digest: String,
    /// When it was committed (RFC 3339).
    pub created_at: String,
    /// When it was committed (ms since the epoch).
    pub created_ms: i64,
}

/// `store.artifacts`: committed artifacts, in commit order, paged.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ArtifactsRequest {
    /// Only this Execution's.
    #[serde(default)]
    pub execution_id: Option<String>,
    /// The cursor: `next` of the previous page (0 for the first).
    #[serde(default)]
    pub after: i64,
    /// The page size, 1 to `max_page` (default 100).
    #[serde(default)]
    pub limit: Option<usize>,
}

/// Result of `store.artifacts`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ArtifactsResponse {
    /// The page.
    pub artifacts: Vec<Artifact>,
    /// The cursor of the next page, when there may be one.
    #[serde(default)]
    pub next: Option<i64>,
}
