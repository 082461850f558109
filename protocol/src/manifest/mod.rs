//! The extension manifest: `open-conduit-extension.json`, parsed and validated
//! strictly and offline.
//!
//! A manifest names a package (its name, its own version, the protocol versions
//! it speaks, the command that starts it) and lists, under `provides`, the
//! mechanical declarations the host enables methods from (see
//! [`crate::catalogue`]). Every struct rejects unknown fields: manifest fields
//! are added without a protocol version bump, so an unknown field means the
//! package needs a newer Open Conduit ([`ManifestError::NewerManifest`]), not
//! that the manifest is broken.
//!
//! [`Manifest::validate`] checks every rule of the specification's "Validation
//! rules" list; a broken rule is [`ManifestError::Invalid`] with a short stable
//! rule identifier and a message that names the offending path.
//!
//! Modules: `validate` (the validation rules), `schemas` (payload schema
//! evolution: how a payload's schema stands against the declared ones), `load`
//! (parsing and loading) and `names` (name syntax); the manifest's types are here.

mod load;
mod names;
mod schemas;
mod validate;

pub use load::*;
pub use names::*;
pub use schemas::*;

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::path::{Component, Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The protocol versions this build speaks.
pub const SUPPORTED_PROTOCOL_VERSIONS: &[u32] = &[1];

/// The manifest's file name, in the package directory.
pub const MANIFEST_FILE: &str = "open-conduit-extension.json";

/// The largest manifest file accepted, in bytes.
pub const MAX_MANIFEST_BYTES: usize = 1 << 20;

/// Package names the host keeps for itself.
pub const RESERVED_NAMES: &[&str] = &["core", "execution", "manual", "os", "open-conduit"];

/// Every permission this build knows. Any other is refused as needing a newer
/// Open Conduit.
pub const PERMISSIONS: &[&str] = &[
    "telemetry.sink",
    "telemetry.capture",
    "probes",
    "config.read",
    "work.start_gate",
    "operation.gate",
    "action.submit",
];

/// The toolbelt's builtin operations, which a toolset may grant beside the
/// package's own.
pub const BUILTIN_OPERATIONS: &[&str] = &["read_context", "wait", "emit", "outcome"];

/// The optional executor controls (methods, not suitability claims).
pub const EXECUTOR_CONTROLS: &[&str] = &[
    "stop",
    "forget",
    "attach",
    "container_attach",
    "live",
    "interactive_launch",
];

/// The executor `toolbelt` label's values.
pub const TOOLBELT_LABELS: &[&str] = &["none", "cli", "mcp", "sdk"];

/// Resource acquisition modes.
pub const RESOURCE_MODES: &[&str] = &["shared", "work", "fresh"];

/// Executor capacity pools: `""` is agent turns, `jobs` is jobs.
pub const EXECUTOR_POOLS: &[&str] = &["", "jobs"];

/// Value types of an extension type's or resource's `settings`.
pub const SETTING_TYPES: &[&str] = &["string", "boolean", "number", "strings"];

/// The command that runs a package on the host's own executable:
/// `open-conduit extension-run <name>` (its `argv[0]`).
pub const HOST_RUN_PROGRAM: &str = "open-conduit";

/// The most pages a package may contribute.
pub const MAX_PAGES: usize = 4;

const MAX_TITLE_CHARS: usize = 64;
const MAX_SUMMARY_BYTES: usize = 200;
const MAX_GUIDANCE_BYTES: usize = 4096;
const MAX_FIELD_HELP_BYTES: usize = 400;
const MAX_IDENTIFIER_BYTES: usize = 64;
const MAX_NAME_BYTES: usize = 128;

// ---------------------------------------------------------------------------
// Errors

/// Why a manifest was refused.
#[derive(Debug, thiserror::Error)]
pub enum ManifestError {
    /// The manifest uses a field, permission or control this build doesn't
    /// know: additive manifest fields ship without a protocol version bump, so
    /// the package needs a newer Open Conduit.
    #[error("the package needs a newer Open Conduit: unknown {kind} `{field}`{location}")]
    NewerManifest {
        /// What is unknown: `field`, `permission` or `executor control`.
        kind: &'static str,
        /// The unknown name.
        field: String,
        /// Where it is, when known (` at provides.executors[0].labels`), or empty.
        location: String,
    },
    /// A validation rule is broken.
    #[error("invalid manifest: {message} [{rule}]")]
    Invalid {
        /// A short stable identifier of the rule, such as `name_reserved`.
        rule: &'static str,
        /// What is wrong and where (`provides.operations[2].summary: ...`).
        message: String,
    },
    /// The bytes are not JSON of the manifest's shape (a missing required
    /// field, a wrong type).
    #[error("malformed manifest: {0}")]
    Malformed(#[source] serde_json::Error),
    /// The manifest file could not be read.
    #[error("reading {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
}

impl ManifestError {
    /// The rule identifier of an [`ManifestError::Invalid`], if it is one.
    pub fn rule(&self) -> Option<&'static str> {
        match self {
            ManifestError::Invalid { rule, .. } => Some(rule),
            _ => None,
        }
    }

    /// True for [`ManifestError::NewerManifest`].
    pub fn needs_newer(&self) -> bool {
        matches!(self, ManifestError::NewerManifest { .. })
    }
}

fn invalid(rule: &'static str, path: impl fmt::Display, msg: impl fmt::Display) -> ManifestError {
    ManifestError::Invalid {
        rule,
        message: format!("{path}: {msg}"),
    }
}

// ---------------------------------------------------------------------------
// The manifest

/// `open-conduit-extension.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Manifest {
    /// The protocol versions the package speaks; one must be supported.
    pub protocol: Vec<u32>,
    /// The package's name: an identifier, and the namespace of everything it
    /// declares.
    pub name: String,
    /// The package's own version (free text, one line).
    pub version: String,
    /// The display name operators read; one line of at most 64 characters.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// The argv that starts the package. A relative `argv[0]` resolves in the
    /// package directory and must stay inside it.
    pub command: Vec<String>,
    /// The version of the package's KV layout (default 0, never negative).
    #[serde(default)]
    pub kv_version: i64,
    /// Host services beyond the package's own surfaces it asks for.
    #[serde(default)]
    pub permissions: Vec<String>,
    /// A directory of playbooks inside the package directory.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub playbooks: Option<String>,
    /// Stores larger than coordination state, each on a declared connection type.
    #[serde(default)]
    pub external_stores: Vec<ExternalStore>,
    /// The mechanical declarations.
    #[serde(default)]
    pub provides: Provides,
}

/// An external store: a store larger than coordination state, explicit in
/// config through a connection of a declared type.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExternalStore {
    /// The store's name (an identifier, unique in the manifest).
    pub name: String,
    /// The connection type (declared in `provides.connections`) that locates it.
    pub connection_type: String,
}

/// Everything a package provides. Each list or flag enables the methods of one
/// surface (see [`crate::catalogue::Surface`]).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Provides {
    /// Event families the package accepts Events of.
    pub families: Vec<Family>,
    /// Connection types.
    pub connections: Vec<ConnectionType>,
    /// Extension (config entry) types.
    pub extensions: Vec<ExtensionType>,
    /// Route handlers.
    pub routes: Vec<RouteHandler>,
    /// Work kinds.
    pub work_kinds: Vec<WorkKind>,
    /// Calendar recurrences (timer kinds the package arms and computes).
    pub recurrences: Vec<Recurrence>,
    /// Toolbelt operations.
    pub operations: Vec<Operation>,
    /// Wait target kinds the package resolves (`<kind>:<name>`).
    pub targets: Vec<String>,
    /// The package filters dependency wakes of its wait operations.
    pub dependency_filter: bool,
    /// Named sets of operations for agents' roles.
    pub toolsets: Vec<Toolset>,
    /// Executors.
    pub executors: Vec<Executor>,
    /// Resource provider types.
    pub resources: Vec<ResourceType>,
    /// Process sandbox provider types.
    pub sandboxes: Vec<SandboxType>,
    /// Container provider types.
    pub containers: Vec<ContainerType>,
    /// Webhook tunnel provider types.
    pub tunnels: Vec<TunnelType>,
    /// Background tasks run at an interval.
    pub tasks: Vec<Task>,
    /// Doctor checks.
    pub checks: Vec<Check>,
    /// Payload schemas.
    pub schemas: Vec<Schema>,
    /// Read-only setup probes the package serves.
    pub probes: Vec<Probe>,
    /// Pages of the package's own in the web view (at most four; they need
    /// `panels` and `actions`).
    pub pages: Vec<Page>,
    /// Told before a container segment settles (`segment.ended`).
    pub segment_end: bool,
    /// Asked about other extensions' operation calls (permission `operation.gate`).
    pub operation_gate: bool,
    /// Asked before a Work's first attempt starts (permission `work.start_gate`).
    pub start_gate: bool,
    /// Proposes configuration candidates (permission `config.read`).
    pub config_candidate: bool,
    /// The package goes by its first entry's name on each scope.
    pub entry_named: bool,
    /// The package's operations join a toolbelt only where a scope has one of
    /// its entries.
    pub entry_gated: bool,
    /// Offers actions (`work.actions`, `work.act`).
    pub actions: bool,
    /// Renders panels on scope and Work pages (`view.render`).
    pub panels: bool,
    /// Receives Work annotations (`work.annotate`).
    pub annotations: bool,
    /// Adds an environment layer to runs (`run.environment`).
    pub run_environment: bool,
    /// Exports telemetry (`telemetry.export`).
    pub exporter: bool,
    /// Has an interactive setup (`setup.run` and the `setup.*` callbacks).
    pub setup: bool,
}

/// An event family.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Family {
    /// The family's name, under the package's name.
    pub name: String,
    /// Whether its Events can be derived again from the source.
    #[serde(default)]
    pub re_derivable: bool,
    /// What is lost when its Events are lost: required when not re-derivable,
    /// forbidden when re-derivable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub loss: Option<String>,
}

/// A connection type.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConnectionType {
    /// The type's name.
    #[serde(rename = "type")]
    pub type_name: String,
    /// Its config fields and secret keys.
    #[serde(default)]
    pub fields: Vec<Field>,
}

/// An extension (config entry) type.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExtensionType {
    /// The type's name.
    #[serde(rename = "type")]
    pub type_name: String,
    /// Whether entries of this type are ingress sources.
    #[serde(default)]
    pub ingress: bool,
    /// The families an ingress type ingests (declared in `provides.families`).
    #[serde(default)]
    pub families: Vec<String>,
    /// Whether entries register webhook paths (needs `ingress`).
    #[serde(default)]
    pub webhooks: bool,
    /// The top-level config fields safe to show the operator.
    #[serde(default)]
    pub settings: Vec<Setting>,
    /// What an entry sets up, one line per element of an array field.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub describe: Option<Describe>,
    /// The config's fields, for the operator.
    #[serde(default)]
    pub fields: Vec<Field>,
}

/// A config field safe to show, with its value type.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Setting {
    /// A top-level config field name.
    pub field: String,
    /// `string`, `boolean`, `number` or `strings`.
    #[serde(rename = "type")]
    pub type_name: String,
    /// The value it takes when absent, of `type`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default: Option<Value>,
}

/// Names an entry's array field and, in each element, the fields that name and
/// detail one line of what the entry sets up.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Describe {
    /// The array field.
    pub list: String,
    /// The element field that names a line.
    pub name: String,
    /// The element field that details it.
    pub detail: String,
}

/// A config field described for the operator (descriptive only).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Field {
    /// The field's name (on a connection, a secret key when `secret`).
    pub name: String,
    /// One line of at most 400 bytes.
    #[serde(default)]
    pub help: String,
    /// The default it takes when absent, as text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default: Option<String>,
    /// Whether a config must set it (then it has no default).
    #[serde(default)]
    pub required: bool,
    /// A fixed set of values, which includes the default.
    #[serde(default)]
    pub options: Vec<String>,
    /// A key of the connection's `secret_refs` (connection types only).
    #[serde(default)]
    pub secret: bool,
}

/// A route handler.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RouteHandler {
    /// The handler's name.
    pub handler: String,
    /// It answers `route.samples`.
    #[serde(default)]
    pub samples: bool,
    /// It checks the binding each of its routes binds (validate kind `binding`).
    #[serde(default)]
    pub binding: bool,
    /// The route config's fields.
    #[serde(default)]
    pub fields: Vec<Field>,
}

/// A Work kind.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WorkKind {
    /// The kind's name.
    pub name: String,
    /// The route handler (declared in `provides.routes`) whose Work it is.
    pub handler: String,
    /// Standing Work: kept open between inputs.
    #[serde(default)]
    pub standing: bool,
    /// Trigger selection: `work_kind.trigger` picks the input a start takes.
    #[serde(default)]
    pub trigger: bool,
    /// Runs on a clock, so a dry run starts none.
    #[serde(default)]
    pub timed: bool,
    /// Runs once.
    #[serde(default)]
    pub run_once: bool,
}

/// A calendar recurrence.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Recurrence {
    /// The recurrence's name.
    pub name: String,
}

/// The kind of a toolbelt operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum OperationKind {
    /// A plain handler (`operation.call`).
    Handler,
    /// A translated wait (`operation.wait`).
    Wait,
    /// An emission (`operation.emit`).
    Emit,
}

impl OperationKind {
    /// Parses `handler`, `wait` or `emit`.
    pub fn parse(s: &str) -> Option<OperationKind> {
        match s {
            "handler" => Some(OperationKind::Handler),
            "wait" => Some(OperationKind::Wait),
            "emit" => Some(OperationKind::Emit),
            _ => None,
        }
    }

    /// The manifest's spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            OperationKind::Handler => "handler",
            OperationKind::Wait => "wait",
            OperationKind::Emit => "emit",
        }
    }
}

fn default_operation_kind() -> String {
    "handler".to_string()
}

/// A toolbelt operation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Operation {
    /// The operation's name.
    pub name: String,
    /// `handler` (default), `wait` or `emit`.
    #[serde(default = "default_operation_kind")]
    pub kind: String,
    /// An emission whose records commit in the emission's transaction
    /// (`emit.commit`); emit only.
    #[serde(default)]
    pub commit: bool,
    /// A capability the handler serves, named like an operation; handler only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub serves: Option<String>,
    /// One line of at most 200 bytes.
    #[serde(default)]
    pub summary: String,
    /// Agent guidance, at most 4096 bytes.
    #[serde(default)]
    pub guidance: String,
    /// The JSON Schema of the input's data: an object.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input: Option<Value>,
}

impl Operation {
    /// The parsed kind, or `None` when it is not one this build knows.
    pub fn kind(&self) -> Option<OperationKind> {
        OperationKind::parse(&self.kind)
    }
}

/// A named set of operations for an agent's role.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Toolset {
    /// `<name>.…`.
    pub name: String,
    /// The operations it grants.
    pub operations: Vec<ToolsetOperation>,
}

/// An operation of a toolset.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToolsetOperation {
    /// A declared operation or a builtin.
    pub name: String,
    /// The toolset version it joined in.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub since: Option<u32>,
}

/// An executor.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Executor {
    /// The executor's name.
    pub name: String,
    /// The core's mechanical labels (unknown, semantic labels are refused).
    #[serde(default)]
    pub labels: ExecutorLabels,
    /// Optional controls: `stop`, `forget`, `attach`, `container_attach`,
    /// `live`, `interactive_launch`.
    #[serde(default)]
    pub controls: Vec<String>,
    /// The capacity pool: `""` (agent turns) or `jobs`.
    #[serde(default)]
    pub pool: String,
    /// Other names `--with` takes for it (needs `interactive_launch`).
    #[serde(default)]
    pub launch_names: Vec<String>,
    /// Answers validate kind `executor_mode`.
    #[serde(default)]
    pub resource_mode: bool,
    /// Answers validate kind `executor_playbook`.
    #[serde(default)]
    pub playbook: bool,
    /// Answers validate kind `executor_folder`.
    #[serde(default)]
    pub folder_config: bool,
    /// The executor config's fields.
    #[serde(default)]
    pub fields: Vec<Field>,
}

impl Executor {
    /// Whether it declares `control`.
    pub fn has_control(&self, control: &str) -> bool {
        self.controls.iter().any(|c| c == control)
    }
}

fn default_toolbelt() -> String {
    "none".to_string()
}

/// The core's mechanical executor labels.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExecutorLabels {
    /// Can interrupt a running attempt.
    #[serde(default)]
    pub interrupt: bool,
    /// Can inject input into a running attempt.
    #[serde(default)]
    pub inject: bool,
    /// Can resume a session.
    #[serde(default)]
    pub resume: bool,
    /// Runs in a workspace resource.
    #[serde(default)]
    pub workspace: bool,
    /// How the run reaches its toolbelt: `none`, `cli`, `mcp` or `sdk`.
    #[serde(default = "default_toolbelt")]
    pub toolbelt: String,
}

impl Default for ExecutorLabels {
    fn default() -> Self {
        ExecutorLabels {
            interrupt: false,
            inject: false,
            resume: false,
            workspace: false,
            toolbelt: default_toolbelt(),
        }
    }
}

/// A resource provider type.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ResourceType {
    /// The type's name.
    #[serde(rename = "type")]
    pub type_name: String,
    /// The acquisition modes it offers: distinct `shared`, `work`, `fresh`.
    pub modes: Vec<String>,
    /// Answers validate kind `resource_mode`.
    #[serde(default)]
    pub mode_default: bool,
    /// Answers validate kind `resource_sandbox`.
    #[serde(default)]
    pub sandbox: bool,
    /// Removes spare resources when asked (`provider.sweep`).
    #[serde(default)]
    pub sweep: bool,
    /// The resource config fields safe to show.
    #[serde(default)]
    pub settings: Vec<Setting>,
    /// The resource config's fields.
    #[serde(default)]
    pub fields: Vec<Field>,
}

/// A process sandbox provider type.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SandboxType {
    /// The type's name.
    #[serde(rename = "type")]
    pub type_name: String,
    /// The sandbox config's fields.
    #[serde(default)]
    pub fields: Vec<Field>,
}

/// A container provider type.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ContainerType {
    /// The type's name.
    #[serde(rename = "type")]
    pub type_name: String,
    /// Its containers may reach the toolbelt through a TCP address
    /// (`container_provider.forward`).
    #[serde(default)]
    pub forward: bool,
    /// The container config's fields.
    #[serde(default)]
    pub fields: Vec<Field>,
}

/// A webhook tunnel provider type.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TunnelType {
    /// The type's name.
    #[serde(rename = "type")]
    pub type_name: String,
    /// The tunnel config's fields.
    #[serde(default)]
    pub fields: Vec<Field>,
}

/// A background task.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Task {
    /// The task's name.
    pub name: String,
    /// Seconds between runs, at least 1.
    pub interval_s: i64,
}

/// A doctor check.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Check {
    /// The check's name (listed as is when it is the package's name or starts
    /// with `<package>_` or `<package>-`, else as `<package>_<check>`).
    pub name: String,
    /// Offline doctor runs it too.
    #[serde(default)]
    pub offline: bool,
}

/// A payload schema base with the versions the release reads.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Schema {
    /// `<name>.…`, without a `.v<N>` suffix.
    pub base: String,
    /// Positive, strictly increasing; the last is the version written.
    pub versions: Vec<i64>,
}

/// A read-only setup probe the package serves (`probe.serve`), listed by the
/// host as `<name>.<probe>`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Probe {
    /// The probe's name within the package.
    pub name: String,
    /// One line of at most 200 bytes.
    #[serde(default)]
    pub summary: String,
    /// The arguments it takes.
    #[serde(default)]
    pub args: Vec<ProbeArg>,
}

/// An argument of a probe.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProbeArg {
    /// The argument's name.
    pub name: String,
    /// Whether a run must give it.
    #[serde(default)]
    pub required: bool,
    /// One line of at most 400 bytes.
    #[serde(default)]
    pub help: String,
}

/// A page of the package's own in the web view, drawn by core from the package's
/// panels (`view.render` with surface `page`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Page {
    /// The page's ID: an identifier, distinct among the package's pages (the web
    /// view addresses a page by its package and its ID).
    pub id: String,
    /// One line of at most 64 characters.
    pub title: String,
    /// One line of at most 200 bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub summary: Option<String>,
    /// The package's extension type whose entry offers the page.
    pub entry: String,
    /// The package's Work kind of a session, when the page is one session's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub work_kind: Option<String>,
    /// The action that starts a session (the spec's; not drawn yet).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start: Option<String>,
    /// The actions the message box sends, first offered first.
    #[serde(default)]
    pub compose: Vec<String>,
    /// The package's route handler whose binding offers grants.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub route: Option<String>,
}
