//! Secrets, tasks and checks: `secret.resolve` (E→H), `task.run` and `check.run`
//! (H→E).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::is_false;
use super::work::{Binding, Connection, Entry, Route};

/// `secret.resolve` (E→H): resolve a connection's secrets by name, in a configured scope
/// (current generation).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SecretResolveParams {
    /// The scope.
    pub scope_id: String,
    /// The connection.
    pub connection: String,
    /// The secret names.
    pub names: Vec<String>,
}

/// Result of `secret.resolve`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SecretResolveResult {
    /// Each name's value.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub values: BTreeMap<String, String>,
}

/// `task.run` (H→E): one pass of a declared background task.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskRunParams {
    /// The task.
    pub task: String,
    /// The host's clock.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub now: String,
}

/// Result of `task.run`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskRunResult {
    /// What the pass did, for the log.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub detail: String,
}

/// A scope in a check's configuration view.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct CheckScope {
    /// The scope ID.
    pub id: String,
    /// Its routes.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub routes: Vec<Route>,
    /// Its bindings (with the executor config for the extension's own executors).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub bindings: Vec<Binding>,
    /// The extension's own entries.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub entries: Vec<Entry>,
}

/// The tunnel in a check's configuration view.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct CheckTunnel {
    /// The tunnel type.
    #[serde(rename = "type")]
    pub tunnel_type: String,
    /// Its config as written.
    #[serde(default, skip_serializing_if = "Value::is_null")]
    pub config: Value,
}

/// The read-only configuration view a check receives (protocol.CheckConfig): never secret
/// values or reference text.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct CheckConfig {
    /// The config file's directory.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub dir: String,
    /// Each enabled scope that uses the extension.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub scopes: Vec<CheckScope>,
    /// The connections of the extension's types those name, config only.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub connections: Vec<Connection>,
    /// The tunnel, when its type is the extension's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tunnel: Option<CheckTunnel>,
}

/// `check.run` (H→E): one doctor check.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct CheckRunParams {
    /// The check's name.
    pub check: String,
    /// True for a deep check (may use secrets).
    #[serde(default, skip_serializing_if = "is_false")]
    pub deep: bool,
    /// The configuration view.
    #[serde(default)]
    pub config: CheckConfig,
}

/// A check status.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CheckStatus {
    /// Fine.
    Ok,
    /// Worth knowing.
    Info,
    /// Worth fixing.
    Warn,
    /// Broken.
    Fail,
}

impl CheckStatus {
    /// Parses a wire status.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "ok" => Some(CheckStatus::Ok),
            "info" => Some(CheckStatus::Info),
            "warn" => Some(CheckStatus::Warn),
            "fail" => Some(CheckStatus::Fail),
            _ => None,
        }
    }
}

/// Result of `check.run`: `{ok, detail}`, or with `status` a full check.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CheckRunResult {
    /// The short form's verdict.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ok: Option<bool>,
    /// The full form's status (`ok`, `info`, `warn`, `fail`), kept as text so an unknown
    /// one can be reported.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub status: String,
    /// A stable code.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub code: String,
    /// The detail.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub detail: String,
    /// Items.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub items: Vec<String>,
}

impl CheckRunResult {
    /// The status doctor shows, and the code it records when the extension gave none
    /// valid: without status, ok gives ok and its absence warn with
    /// `extension_check_failed`; an unknown status is warn with `extension_check_invalid`.
    pub fn effective(&self) -> (CheckStatus, String) {
        if self.status.is_empty() {
            return if self.ok == Some(true) {
                (CheckStatus::Ok, self.code.clone())
            } else {
                (CheckStatus::Warn, "extension_check_failed".to_string())
            };
        }
        match CheckStatus::parse(&self.status) {
            Some(status) => (status, self.code.clone()),
            None => (CheckStatus::Warn, "extension_check_invalid".to_string()),
        }
    }
}
