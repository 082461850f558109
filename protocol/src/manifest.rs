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
/// `open-conduit extension-run <name>` (its argv[0]).
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
    /// The argv that starts the package. A relative argv[0] resolves in the
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
    /// Pages of the package's own in the web view (at most four).
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

/// A page of the package's own in the web view (`/pages/<id>`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Page {
    /// The page's path segment, under the package's name.
    pub id: String,
    /// One line of at most 64 characters.
    pub title: String,
    /// One line of at most 200 bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub summary: Option<String>,
    /// The package's extension type whose entry offers the page.
    pub entry: String,
    /// The package's Work kind of a session.
    pub work_kind: String,
    /// The action that starts a session.
    pub start: String,
    /// The actions the message box sends, first offered first.
    #[serde(default)]
    pub compose: Vec<String>,
    /// The package's route handler whose binding offers grants.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub route: Option<String>,
}

// ---------------------------------------------------------------------------
// Parsing and loading

/// Parses and validates a manifest.
pub fn parse_manifest(bytes: &[u8]) -> Result<Manifest, ManifestError> {
    if bytes.len() > MAX_MANIFEST_BYTES {
        return Err(invalid(
            "manifest_size",
            MANIFEST_FILE,
            format!("{} bytes, more than {MAX_MANIFEST_BYTES}", bytes.len()),
        ));
    }
    let manifest: Manifest = match serde_json::from_slice(bytes) {
        Ok(m) => m,
        Err(err) => return Err(map_serde_error(bytes, err)),
    };
    manifest.validate()?;
    Ok(manifest)
}

/// Reads `dir/open-conduit-extension.json`, validates it, checks that the
/// directory is named after the manifest's name, and that the command and the
/// playbooks resolve inside the directory (following links).
pub fn load_manifest(dir: &Path) -> Result<Manifest, ManifestError> {
    let path = dir.join(MANIFEST_FILE);
    let bytes = std::fs::read(&path).map_err(|source| ManifestError::Io {
        path: path.clone(),
        source,
    })?;
    let manifest = parse_manifest(&bytes)?;
    let root = std::fs::canonicalize(dir).map_err(|source| ManifestError::Io {
        path: dir.to_path_buf(),
        source,
    })?;
    let dir_name = dir
        .file_name()
        .or_else(|| root.file_name())
        .and_then(|n| n.to_str())
        .unwrap_or("");
    if dir_name != manifest.name {
        return Err(invalid(
            "directory_name",
            dir.display(),
            format!(
                "the package directory is named `{dir_name}` but the manifest's name is `{}`",
                manifest.name
            ),
        ));
    }
    if !manifest.is_host_run() {
        if let Some(program) = manifest.command.first() {
            check_resolves_inside(&root, program, "command[0]", "command_outside")?;
        }
    }
    if let Some(playbooks) = &manifest.playbooks {
        check_resolves_inside(&root, playbooks, "playbooks", "playbooks_outside")?;
    }
    Ok(manifest)
}

fn check_resolves_inside(
    root: &Path,
    rel: &str,
    path: &str,
    rule: &'static str,
) -> Result<(), ManifestError> {
    let target = root.join(rel);
    if std::fs::symlink_metadata(&target).is_err() {
        // Missing: nothing to follow. The lexical check has already run.
        return Ok(());
    }
    let resolved = std::fs::canonicalize(&target).map_err(|source| ManifestError::Io {
        path: target.clone(),
        source,
    })?;
    if !resolved.starts_with(root) {
        return Err(invalid(
            rule,
            path,
            format!(
                "`{rel}` resolves to {}, outside the package directory",
                resolved.display()
            ),
        ));
    }
    Ok(())
}

fn map_serde_error(bytes: &[u8], err: serde_json::Error) -> ManifestError {
    let text = err.to_string();
    if let Some(rest) = text.strip_prefix("unknown field `") {
        if let Some(end) = rest.find('`') {
            let field = rest[..end].to_string();
            let location = match locate_key(bytes, &field) {
                Some(path) => format!(" at {path}"),
                None => format!(" (line {}, column {})", err.line(), err.column()),
            };
            return ManifestError::NewerManifest {
                kind: "field",
                field,
                location,
            };
        }
    }
    ManifestError::Malformed(err)
}

/// The path of the object holding `key`, when exactly one object in the
/// document holds it.
fn locate_key(bytes: &[u8], key: &str) -> Option<String> {
    let value: Value = serde_json::from_slice(bytes).ok()?;
    let mut found = Vec::new();
    collect_key_paths(&value, "", key, &mut found);
    if found.len() == 1 {
        found.pop()
    } else {
        None
    }
}

fn collect_key_paths(value: &Value, path: &str, key: &str, found: &mut Vec<String>) {
    match value {
        Value::Object(map) => {
            for (k, v) in map {
                let child = if path.is_empty() {
                    k.clone()
                } else {
                    format!("{path}.{k}")
                };
                if k == key {
                    found.push(child.clone());
                }
                collect_key_paths(v, &child, key, found);
            }
        }
        Value::Array(items) => {
            for (i, v) in items.iter().enumerate() {
                collect_key_paths(v, &format!("{path}[{i}]"), key, found);
            }
        }
        _ => {}
    }
}

// ---------------------------------------------------------------------------
// Name syntax

/// `[a-z][a-z0-9_-]*`, at most 64 bytes: the package name and other
/// identifier-shaped names.
pub fn is_identifier(s: &str) -> bool {
    let bytes = s.as_bytes();
    !bytes.is_empty()
        && bytes.len() <= MAX_IDENTIFIER_BYTES
        && bytes[0].is_ascii_lowercase()
        && bytes
            .iter()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'-' || *b == b'_')
}

/// An identifier, or identifier segments joined by dots (each segment of
/// lower-case letters, digits, `-` and `_`, the first starting with a letter),
/// at most 128 bytes.
pub fn is_name(s: &str) -> bool {
    if s.is_empty() || s.len() > MAX_NAME_BYTES {
        return false;
    }
    let mut segments = s.split('.');
    let first_ok = segments.next().is_some_and(is_identifier);
    first_ok
        && segments.all(|seg| {
            !seg.is_empty()
                && seg
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_')
        })
}

/// Whether `s` is under the package name `own`: an identifier-shaped name is
/// `own` or `own-…`, a dotted name is `own.…`.
pub fn is_under(own: &str, s: &str) -> bool {
    if s.contains('.') {
        s.strip_prefix(own)
            .and_then(|rest| rest.strip_prefix('.'))
            .is_some_and(|rest| !rest.is_empty())
    } else {
        s == own
            || s.strip_prefix(own)
                .and_then(|rest| rest.strip_prefix('-'))
                .is_some_and(|rest| !rest.is_empty())
    }
}

/// A wait target kind: lower-case letters, digits, `-` or `_`.
pub fn is_target_kind(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= MAX_IDENTIFIER_BYTES
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_')
}

/// A top-level config field name: ASCII letters, digits, `_` and `-`.
fn is_config_field(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= MAX_NAME_BYTES
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

fn is_one_line(s: &str) -> bool {
    !s.chars().any(char::is_control)
}

/// A `.v<N>` version suffix's number, when the last segment is one.
fn version_suffix(s: &str) -> Option<(&str, u64)> {
    let (base, last) = s.rsplit_once('.')?;
    let digits = last.strip_prefix('v')?;
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok().map(|n| (base, n))
}

/// Whether a path written in the manifest stays inside the package directory:
/// relative, non-empty, and with no `..` component.
fn stays_inside(p: &str) -> bool {
    if p.is_empty() || p.starts_with('/') || p.starts_with('\\') {
        return false;
    }
    Path::new(p)
        .components()
        .all(|c| matches!(c, Component::Normal(_) | Component::CurDir))
}

// ---------------------------------------------------------------------------
// Validation

/// Names of one kind already declared, for duplicate detection.
struct Seen<'a> {
    first: BTreeMap<&'a str, String>,
}

impl<'a> Seen<'a> {
    fn new() -> Self {
        Seen {
            first: BTreeMap::new(),
        }
    }

    fn claim(
        &mut self,
        rule: &'static str,
        name: &'a str,
        path: &str,
    ) -> Result<(), ManifestError> {
        if let Some(first) = self.first.get(name) {
            return Err(invalid(
                rule,
                path,
                format!("`{name}` is declared twice (first at {first})"),
            ));
        }
        self.first.insert(name, path.to_string());
        Ok(())
    }
}

impl Manifest {
    /// Whether the command is exactly `open-conduit extension-run <name>`,
    /// which runs on the host's own executable.
    pub fn is_host_run(&self) -> bool {
        self.command.len() == 3
            && self.command[0] == HOST_RUN_PROGRAM
            && self.command[1] == "extension-run"
            && self.command[2] == self.name
    }

    /// The highest protocol version both this build and the package speak.
    pub fn common_protocol(&self) -> Option<u32> {
        self.protocol
            .iter()
            .copied()
            .filter(|v| SUPPORTED_PROTOCOL_VERSIONS.contains(v))
            .max()
    }

    /// Whether the manifest declares `permission`.
    pub fn has_permission(&self, permission: &str) -> bool {
        self.permissions.iter().any(|p| p == permission)
    }

    /// Checks every validation rule; the first broken one is the error.
    pub fn validate(&self) -> Result<(), ManifestError> {
        self.validate_package()?;
        self.validate_permissions()?;
        self.validate_names()?;
        self.validate_families_and_types()?;
        self.validate_routes_and_kinds()?;
        self.validate_operations()?;
        self.validate_toolsets()?;
        self.validate_executors()?;
        self.validate_resources()?;
        self.validate_tasks_checks_probes()?;
        self.validate_schemas()?;
        self.validate_pages()?;
        self.validate_fields_everywhere()?;
        Ok(())
    }

    fn validate_package(&self) -> Result<(), ManifestError> {
        if self.common_protocol().is_none() {
            return Err(invalid(
                "protocol_unsupported",
                "protocol",
                format!(
                    "{:?} includes no supported version (supported: {:?})",
                    self.protocol, SUPPORTED_PROTOCOL_VERSIONS
                ),
            ));
        }
        if !is_identifier(&self.name) {
            return Err(invalid(
                "name_invalid",
                "name",
                format!(
                    "`{}` is not an identifier ([a-z][a-z0-9_-]*, at most {MAX_IDENTIFIER_BYTES} bytes)",
                    self.name
                ),
            ));
        }
        if RESERVED_NAMES.contains(&self.name.as_str()) {
            return Err(invalid(
                "name_reserved",
                "name",
                format!("`{}` is reserved", self.name),
            ));
        }
        if self.version.trim().is_empty() || !is_one_line(&self.version) {
            return Err(invalid(
                "version_invalid",
                "version",
                "must be one non-empty line",
            ));
        }
        if let Some(title) = &self.title {
            if title.trim().is_empty() || !is_one_line(title) {
                return Err(invalid(
                    "title_invalid",
                    "title",
                    "must be one non-empty line",
                ));
            }
            if title.chars().count() > MAX_TITLE_CHARS {
                return Err(invalid(
                    "title_invalid",
                    "title",
                    format!("longer than {MAX_TITLE_CHARS} characters"),
                ));
            }
        }
        match self.command.first() {
            None => return Err(invalid("command_empty", "command", "is empty")),
            Some(program) if program.is_empty() => {
                return Err(invalid("command_empty", "command[0]", "is empty"))
            }
            Some(program) => {
                if !self.is_host_run() && !stays_inside(program) {
                    return Err(invalid(
                        "command_outside",
                        "command[0]",
                        format!("`{program}` leaves the package directory (absolute or `..`)"),
                    ));
                }
            }
        }
        if let Some(playbooks) = &self.playbooks {
            if !stays_inside(playbooks) {
                return Err(invalid(
                    "playbooks_outside",
                    "playbooks",
                    format!("`{playbooks}` leaves the package directory (absolute or `..`)"),
                ));
            }
        }
        if self.kv_version < 0 {
            return Err(invalid(
                "kv_version_negative",
                "kv_version",
                format!("{} is negative", self.kv_version),
            ));
        }
        let mut stores = Seen::new();
        for (i, store) in self.external_stores.iter().enumerate() {
            let path = format!("external_stores[{i}]");
            if !is_identifier(&store.name) {
                return Err(invalid(
                    "name_syntax",
                    format!("{path}.name"),
                    format!("`{}` is not an identifier", store.name),
                ));
            }
            stores.claim("name_duplicate", &store.name, &format!("{path}.name"))?;
            if !self
                .provides
                .connections
                .iter()
                .any(|c| c.type_name == store.connection_type)
            {
                return Err(invalid(
                    "external_store_connection",
                    format!("{path}.connection_type"),
                    format!(
                        "`{}` is not a connection type this manifest declares",
                        store.connection_type
                    ),
                ));
            }
        }
        Ok(())
    }

    fn validate_permissions(&self) -> Result<(), ManifestError> {
        let mut seen = Seen::new();
        for (i, p) in self.permissions.iter().enumerate() {
            if !PERMISSIONS.contains(&p.as_str()) {
                return Err(ManifestError::NewerManifest {
                    kind: "permission",
                    field: p.clone(),
                    location: format!(" at permissions[{i}]"),
                });
            }
            seen.claim("permission_duplicate", p, &format!("permissions[{i}]"))?;
        }
        Ok(())
    }

    /// Every namespaced name: syntax, namespace, duplicates within its kind.
    fn validate_names(&self) -> Result<(), ManifestError> {
        let p = &self.provides;
        let lists: Vec<(&str, Vec<&str>)> = vec![
            (
                "families",
                p.families.iter().map(|x| x.name.as_str()).collect(),
            ),
            (
                "connections",
                p.connections.iter().map(|x| x.type_name.as_str()).collect(),
            ),
            (
                "extensions",
                p.extensions.iter().map(|x| x.type_name.as_str()).collect(),
            ),
            (
                "routes",
                p.routes.iter().map(|x| x.handler.as_str()).collect(),
            ),
            (
                "work_kinds",
                p.work_kinds.iter().map(|x| x.name.as_str()).collect(),
            ),
            (
                "recurrences",
                p.recurrences.iter().map(|x| x.name.as_str()).collect(),
            ),
            (
                "operations",
                p.operations.iter().map(|x| x.name.as_str()).collect(),
            ),
            (
                "executors",
                p.executors.iter().map(|x| x.name.as_str()).collect(),
            ),
            (
                "resources",
                p.resources.iter().map(|x| x.type_name.as_str()).collect(),
            ),
            (
                "sandboxes",
                p.sandboxes.iter().map(|x| x.type_name.as_str()).collect(),
            ),
            (
                "containers",
                p.containers.iter().map(|x| x.type_name.as_str()).collect(),
            ),
            (
                "tunnels",
                p.tunnels.iter().map(|x| x.type_name.as_str()).collect(),
            ),
            ("tasks", p.tasks.iter().map(|x| x.name.as_str()).collect()),
            ("pages", p.pages.iter().map(|x| x.id.as_str()).collect()),
        ];
        for (list, names) in &lists {
            let field = match *list {
                "connections" | "extensions" | "resources" | "sandboxes" | "containers"
                | "tunnels" => "type",
                "routes" => "handler",
                "pages" => "id",
                _ => "name",
            };
            let mut seen = Seen::new();
            for (i, name) in names.iter().enumerate() {
                let path = format!("provides.{list}[{i}].{field}");
                self.check_namespaced(&path, name)?;
                seen.claim("name_duplicate", name, &path)?;
            }
        }
        Ok(())
    }

    fn check_namespaced(&self, path: &str, name: &str) -> Result<(), ManifestError> {
        if !is_name(name) {
            return Err(invalid(
                "name_syntax",
                path,
                format!(
                    "`{name}` is not a name (lower-case letters, digits, - and _, dot-separated)"
                ),
            ));
        }
        if !is_under(&self.name, name) {
            return Err(invalid(
                "name_namespace",
                path,
                format!(
                    "`{name}` is not under the extension's name (`{0}`, `{0}-…` or `{0}.…`)",
                    self.name
                ),
            ));
        }
        Ok(())
    }

    fn validate_families_and_types(&self) -> Result<(), ManifestError> {
        let p = &self.provides;
        for (i, fam) in p.families.iter().enumerate() {
            let path = format!("provides.families[{i}]");
            let loss = fam.loss.as_deref().map(str::trim).unwrap_or("");
            if !fam.re_derivable && loss.is_empty() {
                return Err(invalid(
                    "family_loss_missing",
                    format!("{path}.loss"),
                    format!(
                        "family `{}` is not re-derivable, so it must state what its loss loses",
                        fam.name
                    ),
                ));
            }
            if fam.re_derivable && fam.loss.is_some() {
                return Err(invalid(
                    "family_loss_forbidden",
                    format!("{path}.loss"),
                    format!(
                        "family `{}` is re-derivable, so it loses nothing and states no loss",
                        fam.name
                    ),
                ));
            }
        }
        for (i, ext) in p.extensions.iter().enumerate() {
            let path = format!("provides.extensions[{i}]");
            if ext.ingress && ext.families.is_empty() {
                return Err(invalid(
                    "ingress_families",
                    format!("{path}.families"),
                    format!("ingress type `{}` declares no families", ext.type_name),
                ));
            }
            let mut seen = Seen::new();
            for (j, fam) in ext.families.iter().enumerate() {
                let fpath = format!("{path}.families[{j}]");
                if !p.families.iter().any(|f| &f.name == fam) {
                    return Err(invalid(
                        "family_undeclared",
                        &fpath,
                        format!("`{fam}` is not a family this manifest declares"),
                    ));
                }
                seen.claim("name_duplicate", fam, &fpath)?;
            }
            if ext.webhooks && !ext.ingress {
                return Err(invalid(
                    "webhooks_need_ingress",
                    format!("{path}.webhooks"),
                    format!(
                        "type `{}` has webhooks but is not an ingress type",
                        ext.type_name
                    ),
                ));
            }
            validate_settings(&format!("{path}.settings"), &ext.settings)?;
            if let Some(d) = &ext.describe {
                for (key, v) in [("list", &d.list), ("name", &d.name), ("detail", &d.detail)] {
                    if !is_config_field(v) {
                        return Err(invalid(
                            "describe_fields",
                            format!("{path}.describe.{key}"),
                            format!("`{v}` is not a config field name"),
                        ));
                    }
                }
            }
        }
        if p.entry_gated {
            if p.operations.is_empty() {
                return Err(invalid(
                    "entry_gated_needs_operations",
                    "provides.entry_gated",
                    "the manifest declares no operations to gate",
                ));
            }
            if p.extensions.is_empty() {
                return Err(invalid(
                    "entry_gated_needs_type",
                    "provides.entry_gated",
                    "the manifest declares no extension type whose entries gate its operations",
                ));
            }
        }
        Ok(())
    }

    fn validate_routes_and_kinds(&self) -> Result<(), ManifestError> {
        let p = &self.provides;
        for (i, kind) in p.work_kinds.iter().enumerate() {
            if !p.routes.iter().any(|r| r.handler == kind.handler) {
                return Err(invalid(
                    "work_kind_handler",
                    format!("provides.work_kinds[{i}].handler"),
                    format!(
                        "work kind `{}` names `{}`, which is not a route handler this manifest declares",
                        kind.name, kind.handler
                    ),
                ));
            }
        }
        let mut seen = Seen::new();
        for (i, target) in p.targets.iter().enumerate() {
            let path = format!("provides.targets[{i}]");
            if !is_target_kind(target) {
                return Err(invalid(
                    "target_kind",
                    &path,
                    format!(
                        "`{target}` is not a wait target kind (lower-case letters, digits, - or _)"
                    ),
                ));
            }
            seen.claim("target_duplicate", target, &path)?;
        }
        Ok(())
    }

    fn validate_operations(&self) -> Result<(), ManifestError> {
        let p = &self.provides;
        for (i, op) in p.operations.iter().enumerate() {
            let path = format!("provides.operations[{i}]");
            let Some(kind) = op.kind() else {
                return Err(invalid(
                    "operation_kind",
                    format!("{path}.kind"),
                    format!("`{}` is not handler, wait or emit", op.kind),
                ));
            };
            if op.commit && kind != OperationKind::Emit {
                return Err(invalid(
                    "operation_commit",
                    format!("{path}.commit"),
                    format!(
                        "only an emit operation may commit; `{}` is {}",
                        op.name, op.kind
                    ),
                ));
            }
            if let Some(serves) = &op.serves {
                if kind != OperationKind::Handler {
                    return Err(invalid(
                        "operation_serves",
                        format!("{path}.serves"),
                        format!(
                            "only a handler serves a capability; `{}` is {}",
                            op.name, op.kind
                        ),
                    ));
                }
                if !is_name(serves) || !serves.contains('.') {
                    return Err(invalid(
                        "operation_serves",
                        format!("{path}.serves"),
                        format!("`{serves}` is not named like an operation (a dotted name)"),
                    ));
                }
            }
            if !is_one_line(&op.summary) {
                return Err(invalid(
                    "operation_summary",
                    format!("{path}.summary"),
                    "is not one line",
                ));
            }
            if op.summary.len() > MAX_SUMMARY_BYTES {
                return Err(invalid(
                    "operation_summary",
                    format!("{path}.summary"),
                    format!("longer than {MAX_SUMMARY_BYTES} bytes"),
                ));
            }
            if op.guidance.len() > MAX_GUIDANCE_BYTES {
                return Err(invalid(
                    "operation_guidance",
                    format!("{path}.guidance"),
                    format!("longer than {MAX_GUIDANCE_BYTES} bytes"),
                ));
            }
            if let Some(input) = &op.input {
                if !input.is_object() {
                    return Err(invalid(
                        "operation_input",
                        format!("{path}.input"),
                        "is not a JSON object (a JSON Schema)",
                    ));
                }
            }
        }
        if p.dependency_filter
            && !p
                .operations
                .iter()
                .any(|o| o.kind() == Some(OperationKind::Wait))
        {
            return Err(invalid(
                "dependency_filter_needs_wait",
                "provides.dependency_filter",
                "the manifest declares no wait operation",
            ));
        }
        Ok(())
    }

    fn validate_toolsets(&self) -> Result<(), ManifestError> {
        let p = &self.provides;
        let mut toolsets = Seen::new();
        for (i, ts) in p.toolsets.iter().enumerate() {
            let path = format!("provides.toolsets[{i}]");
            if !is_name(&ts.name) || !ts.name.contains('.') || !is_under(&self.name, &ts.name) {
                return Err(invalid(
                    "toolset_name",
                    format!("{path}.name"),
                    format!("`{}` is not named `{}.…`", ts.name, self.name),
                ));
            }
            toolsets.claim("toolset_duplicate", &ts.name, &format!("{path}.name"))?;
            if ts.operations.is_empty() {
                return Err(invalid(
                    "toolset_empty",
                    format!("{path}.operations"),
                    format!("toolset `{}` grants no operation", ts.name),
                ));
            }
            let mut ops = Seen::new();
            for (j, op) in ts.operations.iter().enumerate() {
                let opath = format!("{path}.operations[{j}].name");
                let known = p.operations.iter().any(|o| o.name == op.name)
                    || BUILTIN_OPERATIONS.contains(&op.name.as_str());
                if !known {
                    return Err(invalid(
                        "toolset_operation_unknown",
                        &opath,
                        format!(
                            "`{}` is neither an operation this manifest declares nor a builtin",
                            op.name
                        ),
                    ));
                }
                ops.claim("toolset_operation_duplicate", &op.name, &opath)?;
            }
        }
        Ok(())
    }

    fn validate_executors(&self) -> Result<(), ManifestError> {
        let p = &self.provides;
        let mut launch = Seen::new();
        for (i, ex) in p.executors.iter().enumerate() {
            let path = format!("provides.executors[{i}]");
            if !TOOLBELT_LABELS.contains(&ex.labels.toolbelt.as_str()) {
                return Err(invalid(
                    "toolbelt_label",
                    format!("{path}.labels.toolbelt"),
                    format!("`{}` is not none, cli, mcp or sdk", ex.labels.toolbelt),
                ));
            }
            let mut controls = Seen::new();
            for (j, c) in ex.controls.iter().enumerate() {
                if !EXECUTOR_CONTROLS.contains(&c.as_str()) {
                    return Err(ManifestError::NewerManifest {
                        kind: "executor control",
                        field: c.clone(),
                        location: format!(" at {path}.controls[{j}]"),
                    });
                }
                controls.claim(
                    "executor_control_duplicate",
                    c,
                    &format!("{path}.controls[{j}]"),
                )?;
            }
            if !EXECUTOR_POOLS.contains(&ex.pool.as_str()) {
                return Err(invalid(
                    "executor_pool",
                    format!("{path}.pool"),
                    format!("`{}` is not \"\" (agent turns) or \"jobs\"", ex.pool),
                ));
            }
            if !ex.launch_names.is_empty() && !ex.has_control("interactive_launch") {
                return Err(invalid(
                    "launch_names_control",
                    format!("{path}.launch_names"),
                    format!(
                        "executor `{}` has launch names but not the interactive_launch control",
                        ex.name
                    ),
                ));
            }
            for (j, ln) in ex.launch_names.iter().enumerate() {
                let lpath = format!("{path}.launch_names[{j}]");
                if !is_identifier(ln) {
                    return Err(invalid(
                        "launch_name_invalid",
                        &lpath,
                        format!("`{ln}` is not a name"),
                    ));
                }
                if p.executors.iter().any(|e| &e.name == ln) {
                    return Err(invalid(
                        "launch_name_duplicate",
                        &lpath,
                        format!("`{ln}` is the name of an executor of this manifest"),
                    ));
                }
                launch.claim("launch_name_duplicate", ln, &lpath)?;
            }
        }
        Ok(())
    }

    fn validate_resources(&self) -> Result<(), ManifestError> {
        for (i, res) in self.provides.resources.iter().enumerate() {
            let path = format!("provides.resources[{i}]");
            if res.modes.is_empty() {
                return Err(invalid(
                    "resource_modes",
                    format!("{path}.modes"),
                    format!("resource type `{}` offers no mode", res.type_name),
                ));
            }
            let mut seen = Seen::new();
            for (j, mode) in res.modes.iter().enumerate() {
                let mpath = format!("{path}.modes[{j}]");
                if !RESOURCE_MODES.contains(&mode.as_str()) {
                    return Err(invalid(
                        "resource_modes",
                        &mpath,
                        format!("`{mode}` is not shared, work or fresh"),
                    ));
                }
                seen.claim("resource_modes", mode, &mpath)?;
            }
            validate_settings(&format!("{path}.settings"), &res.settings)?;
        }
        Ok(())
    }

    fn validate_tasks_checks_probes(&self) -> Result<(), ManifestError> {
        let p = &self.provides;
        for (i, task) in p.tasks.iter().enumerate() {
            if task.interval_s < 1 {
                return Err(invalid(
                    "task_interval",
                    format!("provides.tasks[{i}].interval_s"),
                    format!("{} is less than one second", task.interval_s),
                ));
            }
        }
        let mut checks = Seen::new();
        for (i, check) in p.checks.iter().enumerate() {
            let path = format!("provides.checks[{i}].name");
            if !is_identifier(&check.name) {
                return Err(invalid(
                    "name_syntax",
                    &path,
                    format!("`{}` is not an identifier", check.name),
                ));
            }
            checks.claim("name_duplicate", &check.name, &path)?;
        }
        let mut probes = Seen::new();
        for (i, probe) in p.probes.iter().enumerate() {
            let path = format!("provides.probes[{i}]");
            if !is_identifier(&probe.name) {
                return Err(invalid(
                    "name_syntax",
                    format!("{path}.name"),
                    format!("`{}` is not an identifier", probe.name),
                ));
            }
            probes.claim("name_duplicate", &probe.name, &format!("{path}.name"))?;
            if !is_one_line(&probe.summary) || probe.summary.len() > MAX_SUMMARY_BYTES {
                return Err(invalid(
                    "probe_summary",
                    format!("{path}.summary"),
                    format!("must be one line of at most {MAX_SUMMARY_BYTES} bytes"),
                ));
            }
            let mut args = Seen::new();
            for (j, arg) in probe.args.iter().enumerate() {
                let apath = format!("{path}.args[{j}]");
                if !is_config_field(&arg.name) {
                    return Err(invalid(
                        "name_syntax",
                        format!("{apath}.name"),
                        format!("`{}` is not an argument name", arg.name),
                    ));
                }
                args.claim("name_duplicate", &arg.name, &format!("{apath}.name"))?;
                check_help(&format!("{apath}.help"), &arg.help)?;
            }
        }
        Ok(())
    }

    fn validate_schemas(&self) -> Result<(), ManifestError> {
        let mut seen = Seen::new();
        for (i, schema) in self.provides.schemas.iter().enumerate() {
            let path = format!("provides.schemas[{i}]");
            let base = schema.base.as_str();
            if !is_name(base) || !base.contains('.') || !is_under(&self.name, base) {
                return Err(invalid(
                    "schema_base",
                    format!("{path}.base"),
                    format!("`{base}` is not a dotted name under `{}.`", self.name),
                ));
            }
            if version_suffix(base).is_some() {
                return Err(invalid(
                    "schema_base",
                    format!("{path}.base"),
                    format!("`{base}` ends in a version suffix; declare the base alone"),
                ));
            }
            seen.claim("name_duplicate", base, &format!("{path}.base"))?;
            if schema.versions.is_empty() {
                return Err(invalid(
                    "schema_versions",
                    format!("{path}.versions"),
                    format!("schema `{base}` lists no version"),
                ));
            }
            let mut previous = 0i64;
            for (j, v) in schema.versions.iter().enumerate() {
                if *v <= 0 {
                    return Err(invalid(
                        "schema_versions",
                        format!("{path}.versions[{j}]"),
                        format!("{v} is not positive"),
                    ));
                }
                if *v <= previous {
                    return Err(invalid(
                        "schema_versions",
                        format!("{path}.versions[{j}]"),
                        format!("{v} does not follow {previous}: versions strictly increase"),
                    ));
                }
                previous = *v;
            }
        }
        Ok(())
    }

    fn validate_pages(&self) -> Result<(), ManifestError> {
        let p = &self.provides;
        if p.pages.len() > MAX_PAGES {
            return Err(invalid(
                "pages_count",
                "provides.pages",
                format!("{} pages, more than {MAX_PAGES}", p.pages.len()),
            ));
        }
        for (i, page) in p.pages.iter().enumerate() {
            let path = format!("provides.pages[{i}]");
            if page.title.trim().is_empty()
                || !is_one_line(&page.title)
                || page.title.chars().count() > MAX_TITLE_CHARS
            {
                return Err(invalid(
                    "page_title",
                    format!("{path}.title"),
                    format!("must be one non-empty line of at most {MAX_TITLE_CHARS} characters"),
                ));
            }
            if let Some(summary) = &page.summary {
                if !is_one_line(summary) || summary.len() > MAX_SUMMARY_BYTES {
                    return Err(invalid(
                        "page_summary",
                        format!("{path}.summary"),
                        format!("must be one line of at most {MAX_SUMMARY_BYTES} bytes"),
                    ));
                }
            }
            if !p.extensions.iter().any(|e| e.type_name == page.entry) {
                return Err(invalid(
                    "page_reference",
                    format!("{path}.entry"),
                    format!("`{}` is not an extension type of this manifest", page.entry),
                ));
            }
            if !p.work_kinds.iter().any(|k| k.name == page.work_kind) {
                return Err(invalid(
                    "page_reference",
                    format!("{path}.work_kind"),
                    format!("`{}` is not a work kind of this manifest", page.work_kind),
                ));
            }
            if let Some(route) = &page.route {
                if !p.routes.iter().any(|r| &r.handler == route) {
                    return Err(invalid(
                        "page_reference",
                        format!("{path}.route"),
                        format!("`{route}` is not a route handler of this manifest"),
                    ));
                }
            }
            if page.start.is_empty() {
                return Err(invalid(
                    "page_actions",
                    format!("{path}.start"),
                    "names no action",
                ));
            }
            if !p.actions {
                return Err(invalid(
                    "page_actions",
                    &path,
                    "a page needs actions, and the manifest does not declare provides.actions",
                ));
            }
        }
        Ok(())
    }

    fn validate_fields_everywhere(&self) -> Result<(), ManifestError> {
        let p = &self.provides;
        for (i, c) in p.connections.iter().enumerate() {
            validate_fields(&format!("provides.connections[{i}]"), &c.fields, true, &[])?;
        }
        for (i, e) in p.extensions.iter().enumerate() {
            validate_fields(
                &format!("provides.extensions[{i}]"),
                &e.fields,
                false,
                &e.settings,
            )?;
        }
        for (i, r) in p.routes.iter().enumerate() {
            validate_fields(&format!("provides.routes[{i}]"), &r.fields, false, &[])?;
        }
        for (i, e) in p.executors.iter().enumerate() {
            validate_fields(&format!("provides.executors[{i}]"), &e.fields, false, &[])?;
        }
        for (i, r) in p.resources.iter().enumerate() {
            validate_fields(
                &format!("provides.resources[{i}]"),
                &r.fields,
                false,
                &r.settings,
            )?;
        }
        for (i, s) in p.sandboxes.iter().enumerate() {
            validate_fields(&format!("provides.sandboxes[{i}]"), &s.fields, false, &[])?;
        }
        for (i, c) in p.containers.iter().enumerate() {
            validate_fields(&format!("provides.containers[{i}]"), &c.fields, false, &[])?;
        }
        for (i, t) in p.tunnels.iter().enumerate() {
            validate_fields(&format!("provides.tunnels[{i}]"), &t.fields, false, &[])?;
        }
        Ok(())
    }
}

fn check_help(path: &str, help: &str) -> Result<(), ManifestError> {
    if !is_one_line(help) {
        return Err(invalid("field_help", path, "is not one line"));
    }
    if help.len() > MAX_FIELD_HELP_BYTES {
        return Err(invalid(
            "field_help",
            path,
            format!("longer than {MAX_FIELD_HELP_BYTES} bytes"),
        ));
    }
    Ok(())
}

fn setting_default_fits(type_name: &str, value: &Value) -> bool {
    match type_name {
        "string" => value.is_string(),
        "boolean" => value.is_boolean(),
        "number" => value.is_number(),
        "strings" => value
            .as_array()
            .is_some_and(|items| items.iter().all(Value::is_string)),
        _ => false,
    }
}

/// A setting default as a field default's text: a string as itself, anything
/// else as its JSON.
fn setting_default_text(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

fn validate_settings(path: &str, settings: &[Setting]) -> Result<(), ManifestError> {
    let mut seen = Seen::new();
    for (i, s) in settings.iter().enumerate() {
        let spath = format!("{path}[{i}]");
        if !is_config_field(&s.field) {
            return Err(invalid(
                "setting_field",
                format!("{spath}.field"),
                format!("`{}` is not a top-level config field name", s.field),
            ));
        }
        seen.claim("setting_duplicate", &s.field, &format!("{spath}.field"))?;
        if !SETTING_TYPES.contains(&s.type_name.as_str()) {
            return Err(invalid(
                "setting_type",
                format!("{spath}.type"),
                format!(
                    "`{}` is not string, boolean, number or strings",
                    s.type_name
                ),
            ));
        }
        if let Some(default) = &s.default {
            if !setting_default_fits(&s.type_name, default) {
                return Err(invalid(
                    "setting_default",
                    format!("{spath}.default"),
                    format!("{default} is not a {}", s.type_name),
                ));
            }
        }
    }
    Ok(())
}

fn validate_fields(
    path: &str,
    fields: &[Field],
    connection: bool,
    settings: &[Setting],
) -> Result<(), ManifestError> {
    let mut config = Seen::new();
    let mut secrets = Seen::new();
    for (i, f) in fields.iter().enumerate() {
        let fpath = format!("{path}.fields[{i}]");
        if !is_config_field(&f.name) {
            return Err(invalid(
                "field_name",
                format!("{fpath}.name"),
                format!("`{}` is not a field name", f.name),
            ));
        }
        if f.secret && !connection {
            return Err(invalid(
                "field_secret",
                format!("{fpath}.secret"),
                format!(
                    "`{}` is secret, but only a connection type has secret keys",
                    f.name
                ),
            ));
        }
        let seen = if f.secret { &mut secrets } else { &mut config };
        seen.claim("field_duplicate", &f.name, &format!("{fpath}.name"))?;
        check_help(&format!("{fpath}.help"), &f.help)?;
        if f.required && f.default.is_some() {
            return Err(invalid(
                "field_required_default",
                format!("{fpath}.default"),
                format!("`{}` is required, so it takes no default", f.name),
            ));
        }
        let mut options = Seen::new();
        for (j, o) in f.options.iter().enumerate() {
            let opath = format!("{fpath}.options[{j}]");
            if o.is_empty() {
                return Err(invalid("field_options", &opath, "is empty"));
            }
            options.claim("field_options", o, &opath)?;
        }
        if let Some(default) = &f.default {
            if !f.options.is_empty() && !f.options.contains(default) {
                return Err(invalid(
                    "field_options",
                    format!("{fpath}.options"),
                    format!("do not include the default `{default}`"),
                ));
            }
            if !f.secret {
                let setting_default = settings
                    .iter()
                    .find(|s| s.field == f.name)
                    .and_then(|s| s.default.as_ref());
                if let Some(sd) = setting_default {
                    let text = setting_default_text(sd);
                    if &text != default {
                        return Err(invalid(
                            "field_default_mismatch",
                            format!("{fpath}.default"),
                            format!(
                                "`{default}` differs from the settings default `{text}` of `{}`",
                                f.name
                            ),
                        ));
                    }
                }
            }
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------
// Payload schema evolution

/// How a payload's schema stands against the extension's declared schemas.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PayloadStatus {
    /// Absent, or outside the extension's namespace: passed verbatim.
    Foreign,
    /// The version the extension writes: passed.
    Current,
    /// An older version still listed: passed, upcast by the SDK.
    Upcast,
    /// Own, older than every listed version (or an unlisted older one): not
    /// passed for decisions.
    Retired,
    /// Own, newer than the written version: not passed for decisions.
    Newer,
    /// Own namespace, undeclared base or no version suffix: not passed.
    Undeclared,
}

impl PayloadStatus {
    /// The status's wire spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            PayloadStatus::Foreign => "foreign",
            PayloadStatus::Current => "current",
            PayloadStatus::Upcast => "upcast",
            PayloadStatus::Retired => "retired",
            PayloadStatus::Newer => "newer",
            PayloadStatus::Undeclared => "undeclared",
        }
    }

    /// Whether a payload of this status is passed to the extension for its
    /// decisions.
    pub fn readable(self) -> bool {
        matches!(
            self,
            PayloadStatus::Foreign | PayloadStatus::Current | PayloadStatus::Upcast
        )
    }
}

impl fmt::Display for PayloadStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A payload an extension may not write (wire code `unreadable_schema`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unreadable_schema: payload schema `{schema}` is {status}; a payload must be unversioned or the current version of one of the extension's schemas")]
pub struct UnreadableSchema {
    /// The schema the payload names.
    pub schema: String,
    /// How it stands.
    pub status: PayloadStatus,
}

impl UnreadableSchema {
    /// The wire error code.
    pub const CODE: &'static str = "unreadable_schema";
}

impl Manifest {
    /// Classifies a payload schema identifier (`<base>.v<N>`).
    pub fn payload_status(&self, schema: Option<&str>) -> PayloadStatus {
        let Some(schema) = schema.filter(|s| !s.is_empty()) else {
            return PayloadStatus::Foreign;
        };
        let own = schema == self.name
            || schema
                .strip_prefix(self.name.as_str())
                .is_some_and(|rest| rest.starts_with('.'));
        if !own {
            return PayloadStatus::Foreign;
        }
        let Some((base, n)) = version_suffix(schema) else {
            return PayloadStatus::Undeclared;
        };
        let Some(declared) = self.provides.schemas.iter().find(|s| s.base == base) else {
            return PayloadStatus::Undeclared;
        };
        let (Some(&first), Some(&current)) = (declared.versions.first(), declared.versions.last())
        else {
            return PayloadStatus::Undeclared;
        };
        let n = i64::try_from(n).unwrap_or(i64::MAX);
        if n == current {
            PayloadStatus::Current
        } else if n > current {
            PayloadStatus::Newer
        } else if n < first || !declared.versions.contains(&n) {
            PayloadStatus::Retired
        } else {
            PayloadStatus::Upcast
        }
    }

    /// Whether the extension may write a payload of `schema`: absent, or the
    /// current version of one of its own schemas.
    pub fn check_write(&self, schema: Option<&str>) -> Result<(), UnreadableSchema> {
        match schema.filter(|s| !s.is_empty()) {
            None => Ok(()),
            Some(s) => match self.payload_status(Some(s)) {
                PayloadStatus::Current => Ok(()),
                status => Err(UnreadableSchema {
                    schema: s.to_string(),
                    status,
                }),
            },
        }
    }

    /// Every name the manifest declares, by kind (for conflict checks across
    /// packages): `families`, `operations`, `executors`, … .
    pub fn declared_names(&self) -> BTreeMap<&'static str, BTreeSet<&str>> {
        let p = &self.provides;
        let mut out: BTreeMap<&'static str, BTreeSet<&str>> = BTreeMap::new();
        out.entry("name").or_default().insert(self.name.as_str());
        let groups: [(&'static str, Vec<&str>); 12] = [
            (
                "families",
                p.families.iter().map(|x| x.name.as_str()).collect(),
            ),
            (
                "config_types",
                p.connections
                    .iter()
                    .map(|x| x.type_name.as_str())
                    .chain(p.extensions.iter().map(|x| x.type_name.as_str()))
                    .collect(),
            ),
            (
                "handlers",
                p.routes.iter().map(|x| x.handler.as_str()).collect(),
            ),
            (
                "executors",
                p.executors.iter().map(|x| x.name.as_str()).collect(),
            ),
            (
                "resource_types",
                p.resources.iter().map(|x| x.type_name.as_str()).collect(),
            ),
            (
                "operations",
                p.operations.iter().map(|x| x.name.as_str()).collect(),
            ),
            (
                "work_kinds",
                p.work_kinds.iter().map(|x| x.name.as_str()).collect(),
            ),
            (
                "recurrences",
                p.recurrences.iter().map(|x| x.name.as_str()).collect(),
            ),
            (
                "schemas",
                p.schemas.iter().map(|x| x.base.as_str()).collect(),
            ),
            (
                "sandbox_types",
                p.sandboxes.iter().map(|x| x.type_name.as_str()).collect(),
            ),
            (
                "container_types",
                p.containers.iter().map(|x| x.type_name.as_str()).collect(),
            ),
            (
                "tunnel_types",
                p.tunnels.iter().map(|x| x.type_name.as_str()).collect(),
            ),
        ];
        for (kind, names) in groups {
            if !names.is_empty() {
                out.entry(kind).or_default().extend(names);
            }
        }
        out
    }
}
