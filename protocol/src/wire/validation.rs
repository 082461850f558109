//! Validation (H→E): `validate` and the kinds it is asked about
//! ([`validate_kind`]).

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::work::Binding;
use super::{is_false, present};

/// The kinds `validate` is asked about.
pub mod validate_kind {
    /// A connection's config.
    pub const CONNECTION: &str = "connection";
    /// An extension entry's config.
    pub const EXTENSION: &str = "extension";
    /// A route handler's config.
    pub const ROUTE: &str = "route";
    /// A resource config.
    pub const RESOURCE: &str = "resource";
    /// A binding's executor config (may answer warnings).
    pub const EXECUTOR: &str = "executor";
    /// A route's binding, for a handler declared with routes[].binding.
    pub const BINDING: &str = "binding";
    /// A binding's sandbox config.
    pub const SANDBOX: &str = "sandbox";
    /// A binding's container config.
    pub const CONTAINER: &str = "container";
    /// A tunnel config.
    pub const TUNNEL: &str = "tunnel";
    /// The mode a resource config writes (answered `mode`).
    pub const RESOURCE_MODE: &str = "resource_mode";
    /// Whether a resource works in a sandbox or container under a mode.
    pub const RESOURCE_SANDBOX: &str = "resource_sandbox";
    /// The mode an executor config requests (answered `mode`).
    pub const EXECUTOR_MODE: &str = "executor_mode";
    /// The playbook an executor config starts turns on (answered `playbook`).
    pub const EXECUTOR_PLAYBOOK: &str = "executor_playbook";
    /// An executor config adapted to an included folder (answered `config`).
    pub const EXECUTOR_FOLDER: &str = "executor_folder";
    /// The connection secrets an executor config resolves (answered `secrets`), which
    /// config check holds against the binding's connections and their types' declared
    /// secret fields.
    pub const EXECUTOR_SECRETS: &str = "executor_secrets";
    /// Every kind.
    pub const ALL: &[&str] = &[
        CONNECTION,
        EXTENSION,
        ROUTE,
        RESOURCE,
        EXECUTOR,
        BINDING,
        SANDBOX,
        CONTAINER,
        TUNNEL,
        RESOURCE_MODE,
        RESOURCE_SANDBOX,
        EXECUTOR_MODE,
        EXECUTOR_PLAYBOOK,
        EXECUTOR_FOLDER,
        EXECUTOR_SECRETS,
    ];
}

/// `validate` (H→E): check a config object of one of the extension's types; a refusal is
/// an `invalid` error, diagnostics a finer answer.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ValidateParams {
    /// What is validated ([`validate_kind`]).
    pub kind: String,
    /// The type (connection, entry, handler, executor, resource, sandbox, container or
    /// tunnel type).
    #[serde(rename = "type")]
    pub type_name: String,
    /// The object's name, for messages.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub name: String,
    /// The config, raw JSON.
    #[serde(default, skip_serializing_if = "Value::is_null")]
    pub config: Value,
    /// The binding, for kind `binding`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub binding: Option<Binding>,
    /// The mode the executor requests, for kind `resource_sandbox`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub mode: String,
    /// The included folder, for kind `executor_folder`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub folder: String,
    /// Whether the binding has a resource, for kind `executor_folder`.
    #[serde(default, skip_serializing_if = "is_false")]
    pub resource: bool,
}

/// One validation finding.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Diagnostic {
    /// A stable code.
    pub code: String,
    /// The message.
    pub message: String,
    /// A JSON pointer into the config.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub path: String,
}

/// Result of `validate`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ValidateResult {
    /// Findings; none means valid.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub diagnostics: Vec<Diagnostic>,
    /// What a valid object sets up, one line each, for the config view.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub describe: Vec<String>,
    /// The mode, for kinds `resource_mode` and `executor_mode` (empty for none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<String>,
    /// The playbook, for kind `executor_playbook` (empty for none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub playbook: Option<String>,
    /// The adapted config, for kind `executor_folder`.
    #[serde(
        default,
        deserialize_with = "present",
        skip_serializing_if = "Option::is_none"
    )]
    pub config: Option<Value>,
    /// Warnings about a valid executor config.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
    /// The connection secrets the config resolves, for kind `executor_secrets`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub secrets: Vec<SecretUse>,
}

/// One connection secret an executor config resolves (`validate` kind
/// `executor_secrets`): where the config names it, the connection (empty for the
/// binding's own `connection`) and the secret's name.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SecretUse {
    /// A JSON pointer into the executor config.
    pub path: String,
    /// The connection, one the binding names; empty for the binding's `connection`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub connection: String,
    /// The secret's name (a key of the connection's `secret_refs`).
    pub secret: String,
}
