//! Tunnels (H→E): `tunnel.run` and `tunnel.url`.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// `tunnel.run` (H→E): keep the webhook listener exposed until cancelled, publishing each
/// public URL through `tunnel.url`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct TunnelRunParams {
    /// The tunnel type.
    #[serde(rename = "type")]
    pub tunnel_type: String,
    /// The listener's address, the only one to forward to.
    pub addr: String,
    /// The operator's tunnel config as written (`{}` when none).
    #[serde(default)]
    pub config: Value,
    /// The run ID, quoted by `tunnel.url`.
    pub run_id: String,
}

/// Result of `tunnel.run`, once the tunnel has stopped.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TunnelRunResult {}

/// `tunnel.url` (E→H): the run's public URL changed (`""` while down).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TunnelUrlParams {
    /// The run ID.
    pub run_id: String,
    /// The public URL.
    #[serde(default)]
    pub url: String,
}

/// Result of `tunnel.url`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TunnelUrlResult {}
