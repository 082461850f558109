//! The wire types of `config` (moved from storaged).

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// `store.config_apply`: store a configuration as the current generation.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConfigApplyRequest {
    /// The whole configuration (a JSON object).
    pub config: Value,
}

/// Result of `store.config_apply`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConfigApplyResponse {
    /// The current generation.
    pub generation: i64,
    /// `sha256:<hex>` of the configuration's canonical JSON.
    pub hash: String,
    /// Whether this apply stored a new generation.
    pub changed: bool,
}

/// `store.config_current`: no fields.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConfigCurrentRequest {}

/// `store.config_generation`: one stored generation.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConfigGenerationRequest {
    /// The generation.
    pub generation: i64,
}

/// A stored generation (the answer of `store.config_current` and
/// `store.config_generation`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ConfigGeneration {
    /// Its number.
    pub generation: i64,
    /// `sha256:<hex>` of the configuration's canonical JSON.
    pub hash: String,
    /// The configuration.
    pub config: Value,
    /// When it was applied (RFC 3339).
    pub applied_at: String,
}
