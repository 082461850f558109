//! Artifacts (E→H): `artifact.create`, `artifact.write`, `artifact.commit` and
//! `artifact.abort`.

use serde::{Deserialize, Serialize};

use super::{is_zero_u64, WireError, MAX_CHUNK_BYTES};

/// `artifact.create` (E→H): open an artifact of a run for chunked writing.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ArtifactCreateParams {
    /// The Execution it belongs to.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub execution_id: String,
    /// Its name (`transcript`, `log`).
    pub name: String,
    /// Its media type.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub media_type: String,
    /// The most bytes it may hold; 0 for the host's default.
    #[serde(default, skip_serializing_if = "is_zero_u64")]
    pub max_bytes: u64,
}

/// Result of `artifact.create`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ArtifactCreateResult {
    /// The artifact ID.
    pub artifact_id: String,
}

/// `artifact.write` (E→H): one chunk, of at most [`MAX_CHUNK_BYTES`], at an offset; each
/// is acknowledged before the next.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ArtifactWriteParams {
    /// The artifact.
    pub artifact_id: String,
    /// The offset of this chunk (the bytes written so far).
    #[serde(default)]
    pub offset: u64,
    /// The bytes, base64.
    #[serde(with = "crate::b64")]
    pub data: Vec<u8>,
}

impl ArtifactWriteParams {
    /// Checks the chunk size.
    pub fn validate(&self) -> Result<(), WireError> {
        if self.data.len() > MAX_CHUNK_BYTES {
            return Err(WireError::new(
                "data",
                format!(
                    "{} bytes, over the chunk limit of {MAX_CHUNK_BYTES} bytes",
                    self.data.len()
                ),
            ));
        }
        Ok(())
    }
}

/// Result of `artifact.write`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ArtifactWriteResult {
    /// The artifact's size after the chunk.
    pub size: u64,
}

/// `artifact.commit` (E→H): make a written artifact durable and visible.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ArtifactCommitParams {
    /// The artifact.
    pub artifact_id: String,
    /// The total size the writer expects (refused when it differs); 0 skips the check.
    #[serde(default, skip_serializing_if = "is_zero_u64")]
    pub size: u64,
}

/// Result of `artifact.commit`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ArtifactCommitResult {
    /// The artifact.
    pub artifact_id: String,
    /// Its size.
    pub size: u64,
    /// Its digest (`sha256:<hex>`).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub digest: String,
}

/// `artifact.abort` (E→H): discard an open artifact.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ArtifactAbortParams {
    /// The artifact.
    pub artifact_id: String,
}

/// Result of `artifact.abort`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ArtifactAbortResult {}
