//! The wire types of `reserved` (moved from storaged).

use serde::{Deserialize, Serialize};

/// `store.kv_layout_get`: the KV layout version recorded for an extension.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KvLayoutGetRequest {
    /// The extension's name.
    pub extension: String,
}

/// The recorded version; none when nothing was recorded yet.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct KvLayoutGetResponse {
    /// The version.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<u64>,
}

/// `store.kv_layout_set`: record an extension's KV layout version (never lower).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KvLayoutSetRequest {
    /// The extension's name.
    pub extension: String,
    /// The version it reported.
    pub version: u64,
}

/// The version recorded before, if any.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct KvLayoutSetResponse {
    /// The previous version.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub previous: Option<u64>,
}

/// The tunnel's current public URL, as tunneld records it (`store.tunnel_set`) and
/// reads it back (`store.tunnel_get`, also extrunner and `open-conduit status`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TunnelRecord {
    /// The public URL (`""` while the tunnel is down).
    #[serde(default)]
    pub url: String,
    /// The run that published it.
    #[serde(default)]
    pub run_id: String,
    /// The tunnel type.
    #[serde(default)]
    pub provider: String,
    /// Why the tunnel is down, when it is.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub reason: String,
    /// When it was recorded (set by the store).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub updated_at: String,
}

/// `store.tunnel_get`: no params.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TunnelGetRequest {}

/// `store.tunnel_get`'s answer: the record, none when nothing was ever recorded.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct TunnelGetResponse {
    /// The record.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tunnel: Option<TunnelRecord>,
}

/// `store.tunnel_set`'s answer.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct TunnelSetResponse {}
