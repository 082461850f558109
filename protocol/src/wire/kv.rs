//! KV: the shared types of a key's preconditions, writes and entries ([`KvCheck`],
//! [`KvPut`], [`KvDelete`], [`KvEntry`]) and the KV methods (`kv.get`, `kv.list`,
//! `kv.commit`).

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::events::{Emission, EmissionResult};
use super::{check_page_limit, is_false, is_zero_u32, present, WireError};

// ---------------------------------------------------------------------------------------
// Shared types: KV
// ---------------------------------------------------------------------------------------

/// A KV precondition: the key holds exactly `version`, or is absent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KvExpect {
    /// The key holds a value with this version.
    Version(String),
    /// The key holds no value.
    Absent,
}

/// A precondition of a `kv.commit` or `event.accept`. On the wire it is
/// `{"key":"k","version":"…"}` or `{"key":"k","absent":true}`, with `namespace` when it is
/// not the extension's own name; anything else (both, neither) is refused when read.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "KvCheckWire", into = "KvCheckWire")]
pub struct KvCheck {
    /// The namespace: the extension's name (empty) or `name.` + suffix.
    pub namespace: String,
    /// The key.
    pub key: String,
    /// What the key must hold.
    pub expect: KvExpect,
}

impl KvCheck {
    /// The key in the extension's own namespace must hold `version`.
    pub fn version(key: impl Into<String>, version: impl Into<String>) -> Self {
        KvCheck {
            namespace: String::new(),
            key: key.into(),
            expect: KvExpect::Version(version.into()),
        }
    }

    /// The key in the extension's own namespace must be absent.
    pub fn absent(key: impl Into<String>) -> Self {
        KvCheck {
            namespace: String::new(),
            key: key.into(),
            expect: KvExpect::Absent,
        }
    }

    /// The same check in another of the extension's namespaces.
    pub fn in_namespace(mut self, namespace: impl Into<String>) -> Self {
        self.namespace = namespace.into();
        self
    }
}

#[derive(Serialize, Deserialize)]
struct KvCheckWire {
    #[serde(default, skip_serializing_if = "String::is_empty")]
    namespace: String,
    key: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    version: Option<String>,
    #[serde(default, skip_serializing_if = "is_false")]
    absent: bool,
}

impl TryFrom<KvCheckWire> for KvCheck {
    type Error = String;

    fn try_from(w: KvCheckWire) -> Result<Self, String> {
        let expect = match (w.version, w.absent) {
            (Some(v), false) => KvExpect::Version(v),
            (None, true) => KvExpect::Absent,
            (Some(_), true) => {
                return Err(format!(
                    "check of {:?}: version and absent are exclusive",
                    w.key
                ))
            }
            (None, false) => {
                return Err(format!(
                    "check of {:?}: needs a version or absent: true",
                    w.key
                ))
            }
        };
        Ok(KvCheck {
            namespace: w.namespace,
            key: w.key,
            expect,
        })
    }
}

impl From<KvCheck> for KvCheckWire {
    fn from(c: KvCheck) -> Self {
        let (version, absent) = match c.expect {
            KvExpect::Version(v) => (Some(v), false),
            KvExpect::Absent => (None, true),
        };
        KvCheckWire {
            namespace: c.namespace,
            key: c.key,
            version,
            absent,
        }
    }
}

/// A KV write: `value` under `key`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct KvPut {
    /// The namespace: the extension's name (empty) or `name.` + suffix.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub namespace: String,
    /// The key.
    pub key: String,
    /// The value, raw JSON.
    pub value: Value,
}

/// A KV delete (deleting an absent key is not an error).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct KvDelete {
    /// The namespace: the extension's name (empty) or `name.` + suffix.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub namespace: String,
    /// The key.
    pub key: String,
}

/// One entry of a `kv.list` page.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct KvEntry {
    /// The key.
    pub key: String,
    /// The value, raw JSON.
    pub value: Value,
    /// The value's version (a digest of it), for a later check.
    pub version: String,
}

// ---------------------------------------------------------------------------------------
// KV
// ---------------------------------------------------------------------------------------

/// `kv.get` (E→H): one key of the extension's namespaces.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct KvGetParams {
    /// The namespace: the extension's name (empty) or `name.` + suffix.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub namespace: String,
    /// The key.
    pub key: String,
}

/// Result of `kv.get`: the value and its version, or neither when the key is absent.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct KvGetResult {
    /// The value (a stored JSON `null` is `Some(Value::Null)`).
    #[serde(
        default,
        deserialize_with = "present",
        skip_serializing_if = "Option::is_none"
    )]
    pub value: Option<Value>,
    /// The value's version (a digest of it); none when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
}

impl KvGetResult {
    /// True when the key holds no value.
    pub fn is_absent(&self) -> bool {
        self.version.is_none()
    }

    /// The precondition that the key is still as read (its version, or absent).
    pub fn check(&self, namespace: &str, key: &str) -> KvCheck {
        KvCheck {
            namespace: namespace.to_string(),
            key: key.to_string(),
            expect: match &self.version {
                Some(v) => KvExpect::Version(v.clone()),
                None => KvExpect::Absent,
            },
        }
    }
}

/// `kv.list` (E→H): one page of a namespace's keys with a prefix, in key order.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct KvListParams {
    /// The namespace: the extension's name (empty) or `name.` + suffix.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub namespace: String,
    /// Only keys with this prefix.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub prefix: String,
    /// The cursor: only keys after this one (the previous page's `next`).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub after: String,
    /// At most this many entries (at most 1000; 0 for the default).
    #[serde(default, skip_serializing_if = "is_zero_u32")]
    pub limit: u32,
}

impl KvListParams {
    /// Checks the limit.
    pub fn validate(&self) -> Result<(), WireError> {
        check_page_limit(self.limit)
    }
}

/// Result of `kv.list`: a page of entries and the cursor of the next, if any.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct KvListResult {
    /// The entries.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub entries: Vec<KvEntry>,
    /// The `after` of the next page; empty at the end.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub next: String,
}

/// `kv.commit` (E→H): one atomic batch of preconditions, puts, deletes and Emissions. A
/// failed check or refused Emission applies nothing (`conflict`, or the refusal's code).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct KvCommitParams {
    /// Preconditions, all of which must hold.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub checks: Vec<KvCheck>,
    /// Writes.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub puts: Vec<KvPut>,
    /// Deletes.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub deletes: Vec<KvDelete>,
    /// Events to accept in the same transaction.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub emissions: Vec<Emission>,
}

/// Result of `kv.commit`: each Emission's outcome, in the order sent.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct KvCommitResult {
    /// One per Emission.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub emissions: Vec<EmissionResult>,
}
