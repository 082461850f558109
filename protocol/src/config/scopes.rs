//! Connections and scopes: a scope's entries, routes and bindings (with the binding
//! fields a run's toolbelt reads), the authorization between scopes
//! ([`Config::authorizes`]) and the lookups by name.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::Config;
use crate::wire;

/// The binding field naming the bindings of its scope that its runs may name in the
/// toolbelt's `create_work` although they are less confined (another sandbox or
/// container type, or none): the operator's explicit opt-in.
pub const ALLOW_UNCONFINED_CREATE_WORK: &str = "allow_unconfined_create_work";

/// The bindings a run of `binding` (one of a scope's `bindings`, raw) may name in
/// `create_work` although they are less confined ([`ALLOW_UNCONFINED_CREATE_WORK`]):
/// none when the field is absent or `null`; `Err` when it is not an array of
/// strings.
pub fn allowed_unconfined(binding: &Value) -> Result<Vec<String>, String> {
    match binding.get(ALLOW_UNCONFINED_CREATE_WORK) {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(v) => serde_json::from_value::<Vec<String>>(v.clone())
            .map_err(|e| format!("an array of binding names: {e}")),
    }
}

/// The binding field naming further connections a binding's executor may resolve
/// secrets of, besides its `connection` (which stays what operations act as).
pub const BINDING_CONNECTIONS: &str = "connections";

/// The further connections `binding` (one of a scope's `bindings`, raw) names
/// ([`BINDING_CONNECTIONS`]): none when the field is absent or `null`; `Err` when it
/// is not an array of strings.
pub fn binding_connections(binding: &Value) -> Result<Vec<String>, String> {
    match binding.get(BINDING_CONNECTIONS) {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(v) => serde_json::from_value::<Vec<String>>(v.clone())
            .map_err(|e| format!("an array of connection names: {e}")),
    }
}

/// A connection.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ConnectionConfig {
    /// Its name, unique in the document.
    #[serde(default)]
    pub name: String,
    /// Its type (an extension's declared connection type).
    #[serde(rename = "type", default)]
    pub connection_type: String,
    /// Its config.
    #[serde(default, skip_serializing_if = "Value::is_null")]
    pub config: Value,
    /// Each secret's reference: `env:NAME` or `file:/absolute/path`.
    #[serde(default)]
    pub secret_refs: BTreeMap<String, String>,
}

/// A scope.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ScopeConfig {
    /// Its ID, unique in the document.
    #[serde(default)]
    pub id: String,
    /// False for a scope configured but disabled.
    #[serde(default = "yes")]
    pub enabled: bool,
    /// Its entries.
    #[serde(default)]
    pub entries: Vec<EntryConfig>,
    /// Its routes, in order.
    #[serde(default)]
    pub routes: Vec<wire::Route>,
    /// Its bindings.
    #[serde(default)]
    pub bindings: Vec<Value>,
    /// The other scopes its Work may read or file in (`scope.authorize`).
    #[serde(default, skip_serializing_if = "Authorization::is_empty")]
    pub authorization: Authorization,
    /// The host's own admission rules for its Work (`admission.max_agent_turns`).
    #[serde(default, skip_serializing_if = "Admission::is_empty")]
    pub admission: Admission,
    /// Fields this release does not read.
    #[serde(flatten)]
    pub extra: BTreeMap<String, Value>,
}

/// A scope's cross-scope authority (spec, "Cross-scope authority"): the scopes whose
/// resources its Work may read, and those it may file in (write: comment, label,
/// open a pull request). Filing implies reading.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Authorization {
    /// Scopes whose resources this scope's Work may read.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub read_scopes: Vec<String>,
    /// Scopes this scope's Work may file in.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub file_scopes: Vec<String>,
}

impl Authorization {
    /// True when it grants nothing.
    pub fn is_empty(&self) -> bool {
        self.read_scopes.is_empty() && self.file_scopes.is_empty()
    }
}

/// A scope's admission rules the host enforces itself (a package's own admission,
/// by a person or by hours, is its `work.admit`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Admission {
    /// At most this many attempts of the scope's agent turns (the executors of the
    /// default pool, not `jobs`) run at once on one host; the others wait their turn
    /// as they wait for the pool. At least 1; none: only `settings.concurrency`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_agent_turns: Option<u32>,
}

impl Admission {
    /// True when it sets no rule.
    pub fn is_empty(&self) -> bool {
        self.max_agent_turns.is_none()
    }
}

/// What `scope.authorize` asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// Read another scope's resources.
    Read,
    /// File in another scope (write).
    File,
}

impl Access {
    /// `read` or `file`.
    pub fn parse(s: &str) -> Option<Access> {
        match s {
            "read" => Some(Access::Read),
            "file" => Some(Access::File),
            _ => None,
        }
    }
}

fn yes() -> bool {
    true
}

/// An entry of a scope.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct EntryConfig {
    /// Its type: an extension type some package declares.
    #[serde(rename = "type", default)]
    pub entry_type: String,
    /// Its name, unique within the scope.
    #[serde(default)]
    pub name: String,
    /// The connection it acts as, if any.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub connection: String,
    /// Its config.
    #[serde(default, skip_serializing_if = "Value::is_null")]
    pub config: Value,
}

impl Config {
    /// Whether Work of scope `from` may `access` scope `to` (`scope.authorize`): `Ok`,
    /// or why not, naming the field that would allow it.
    pub fn authorizes(&self, from: &str, to: &str, access: Access) -> Result<(), String> {
        let Some(scope) = self.scope(from) else {
            return Err(format!("no scope is named {from:?}"));
        };
        if from == to {
            return Ok(());
        }
        if self.scope(to).is_none() {
            return Err(format!("no scope is named {to:?}"));
        }
        let a = &scope.authorization;
        let files = a.file_scopes.iter().any(|s| s == to);
        let reads = files || a.read_scopes.iter().any(|s| s == to);
        match access {
            Access::File if files => Ok(()),
            Access::Read if reads => Ok(()),
            Access::File => Err(format!(
                "scope {from:?} may not file in scope {to:?}: its authorization.file_scopes does not name it"
            )),
            Access::Read => Err(format!(
                "scope {from:?} may not read scope {to:?}: neither its authorization.read_scopes nor its file_scopes names it"
            )),
        }
    }

    /// The connection named `name`.
    pub fn connection(&self, name: &str) -> Option<&ConnectionConfig> {
        self.connections.iter().find(|c| c.name == name)
    }

    /// The scope `id`.
    pub fn scope(&self, id: &str) -> Option<&ScopeConfig> {
        self.scopes.iter().find(|s| s.id == id)
    }
}
