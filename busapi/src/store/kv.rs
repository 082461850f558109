//! The wire types of `kv` (moved from storaged).

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// `store.kv_get`: one key of one of the owner's namespaces.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KvGetRequest {
    /// The extension the call is made for (bound by extrunner).
    pub owner: String,
    /// The namespace: empty for the owner's name, or `owner.` + suffix.
    #[serde(default)]
    pub namespace: String,
    /// The key.
    pub key: String,
}

/// The value and its version, or neither when the key is absent.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct KvGetResponse {
    /// The value (a stored JSON `null` is present as `null`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<Value>,
    /// The value's version (a digest of its canonical JSON).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
}

/// `store.kv_list`: a page of a namespace's keys with a prefix, in key order.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KvListRequest {
    /// The extension the call is made for.
    pub owner: String,
    /// The namespace: empty for the owner's name, or `owner.` + suffix.
    #[serde(default)]
    pub namespace: String,
    /// Only keys with this prefix.
    #[serde(default)]
    pub prefix: String,
    /// Only keys after this one (the previous page's `next`).
    #[serde(default)]
    pub after: String,
    /// At most this many entries (0 or absent: 100; at most max_page).
    #[serde(default)]
    pub limit: Option<u32>,
}

/// One entry of a `kv_list` page.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct KvListEntry {
    /// The key.
    pub key: String,
    /// The value.
    pub value: Value,
    /// The value's version.
    pub version: String,
}

/// A page of entries and the cursor of the next page (empty at the end).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct KvListResponse {
    /// The entries, in key order.
    #[serde(default)]
    pub entries: Vec<KvListEntry>,
    /// The `after` of the next page; empty when there is none.
    #[serde(default)]
    pub next: String,
}

/// A precondition: the key holds exactly `version`, or (`absent: true`) nothing.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KvCheckItem {
    /// The namespace: empty for the owner's name, or `owner.` + suffix.
    #[serde(default)]
    pub namespace: String,
    /// The key.
    pub key: String,
    /// The version the key must hold.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// The key must hold nothing.
    #[serde(default)]
    pub absent: bool,
}

/// A write of `value` under `key`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KvPutItem {
    /// The namespace: empty for the owner's name, or `owner.` + suffix.
    #[serde(default)]
    pub namespace: String,
    /// The key.
    pub key: String,
    /// The value.
    pub value: Value,
}

/// A delete (of an absent key is no error).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KvDeleteItem {
    /// The namespace: empty for the owner's name, or `owner.` + suffix.
    #[serde(default)]
    pub namespace: String,
    /// The key.
    pub key: String,
}
