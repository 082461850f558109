//! Lifecycle: `initialize`, `configure` and `shutdown` (H→E), with what they carry:
//! the host's info, the KV layout, webhook paths and sources.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::work::{Binding, Connection, Entry};
use super::{is_false, is_zero_u64};

/// The host's name and version, in `initialize`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct HostInfo {
    /// The host's name (`open-conduit`).
    pub name: String,
    /// The host's version.
    pub version: String,
}

/// `initialize` (H→E): the first call; the protocol versions the host speaks and the
/// directories the extension uses.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct InitializeParams {
    /// The protocol versions the host supports.
    pub protocol_versions: Vec<u32>,
    /// The host's name and version.
    pub host: HostInfo,
    /// The extension's private state directory.
    pub state_dir: String,
    /// Each declared executor's runs directory (`<state>/executors/<name>`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub executor_dirs: BTreeMap<String, String>,
    /// Each declared resource type's state directory (`<state>/resources/<type>`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub resource_dirs: BTreeMap<String, String>,
    /// Each declared container provider type's state directory.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub container_dirs: BTreeMap<String, String>,
    /// The host's container label.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub container_host: String,
    /// The config file's directory, against which relative config paths resolve.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub config_dir: String,
    /// The largest message the host reads, when it reads more than the spec's 16 MiB
    /// (an addition: absent means 16 MiB). The extension may answer up to this.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_message_bytes: Option<u64>,
}

impl InitializeParams {
    /// The highest version both `ours` and the host's list contain.
    pub fn pick_version(&self, ours: &[u32]) -> Option<u32> {
        self.protocol_versions
            .iter()
            .copied()
            .filter(|v| ours.contains(v))
            .max()
    }
}

/// Result of `initialize`: the chosen version and the extension's manifest, kept raw (the
/// host parses it and compares it with the file).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct InitializeResult {
    /// The chosen protocol version.
    pub protocol_version: u32,
    /// The manifest, raw JSON.
    pub manifest: Value,
    /// The largest message the extension reads, when it reads more than the spec's
    /// 16 MiB (an addition: absent means 16 MiB). The host then sends it up to this
    /// (at most [`crate::LARGE_MESSAGE_BYTES`]), so a webhook body over about 12 MiB
    /// reaches it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_message_bytes: Option<u64>,
}

/// The extension's KV layout versions, in `configure`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct KvLayout {
    /// The version the host recorded from the last successful configure.
    #[serde(default)]
    pub stored: u32,
    /// The manifest's kv_version.
    #[serde(default)]
    pub declared: u32,
}

impl KvLayout {
    /// True when the extension must migrate its KV before configuring.
    pub fn needs_migration(&self) -> bool {
        self.stored < self.declared
    }
}

/// `configure` (H→E): the current generation's entries, connections and settings; sent
/// after initialize and again on every config apply and tunnel URL change.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ConfigureParams {
    /// The config generation's hash.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub generation: String,
    /// The extension's entries in enabled scopes.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub entries: Vec<Entry>,
    /// The connections the entries name (secret names only).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub connections: Vec<Connection>,
    /// The public URL webhooks arrive at.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub public_url: String,
    /// True for a dry run: start nothing.
    #[serde(default, skip_serializing_if = "is_false")]
    pub dry_run: bool,
    /// The extension's entries in scopes configured but disabled: start nothing for them,
    /// keep what is held for them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub disabled: Vec<Entry>,
    /// The KV layout versions.
    #[serde(default)]
    pub kv: KvLayout,
    /// Every enabled binding whose container provider the extension declares.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub containers: Vec<Binding>,
}

/// An ingress source the extension registers in `configure`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SourceDecl {
    /// The source name: the extension's name or `name/` + suffix.
    pub name: String,
    /// The ingress type (one the manifest declares).
    #[serde(rename = "type", default, skip_serializing_if = "String::is_empty")]
    pub source_type: String,
    /// The scope it feeds.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub scope_id: String,
    /// The entry it belongs to.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub entry: String,
    /// The families its Events belong to.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub families: Vec<String>,
    /// How often to reconcile it, in seconds; 0 never.
    #[serde(default, skip_serializing_if = "is_zero_u64")]
    pub reconcile_interval_s: u64,
}

/// A webhook path the extension registers in `configure`; it covers the paths beneath it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct WebhookPath {
    /// The path (`/schedule/<scope>/<entry>`), under the extension's own name.
    pub path: String,
    /// The source its deliveries feed.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub source: String,
    /// The scope.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub scope_id: String,
    /// The entry.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub entry: String,
}

impl WebhookPath {
    /// True when this path serves `request_path` (itself or a path beneath it).
    pub fn covers(&self, request_path: &str) -> bool {
        let base = self.path.trim_end_matches('/');
        match request_path.strip_prefix(base) {
            Some(rest) => rest.is_empty() || rest.starts_with('/') || base.is_empty(),
            None => false,
        }
    }
}

/// Result of `configure`: the ingress sources and webhook paths the extension registers.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ConfigureResult {
    /// Ingress sources.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sources: Vec<SourceDecl>,
    /// Webhook paths.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub webhooks: Vec<WebhookPath>,
}

/// `shutdown` (H→E): finish or cancel in-flight work and exit; new requests are answered
/// `shutting_down`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShutdownParams {}

/// Result of `shutdown`: an acknowledgement.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShutdownResult {}
