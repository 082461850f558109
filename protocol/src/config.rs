//! The configuration document (`/etc/open-conduit/config.json`): settings, connections,
//! scopes with their entries, routes and bindings.
//!
//! [`Config::parse`] reads and checks the document, reporting every problem with its JSON
//! pointer. [`Config::for_extension`] is what one extension is configured with: its entries
//! (those of the types its manifest declares) in enabled scopes, the connections those
//! entries name (secret *names* only), the public URL, its entries in disabled scopes, and
//! the scopes and connections its identity is bound to. [`resolve_secret_ref`] reads one
//! secret reference (`env:NAME` or `file:/path`); the values never enter the document.
//!
//! Unknown top-level and object fields are kept (`extra`) rather than refused, so a newer
//! document still configures the daemons that understand part of it; `config check` (the
//! CLI) reports them.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::manifest::Manifest;
use crate::wire::{self, ConfigureParams};

/// The largest secret file read through a `file:` reference.
pub const MAX_SECRET_FILE_BYTES: u64 = 64 * 1024;

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

/// The whole document.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Config {
    /// Suite-wide settings.
    #[serde(default)]
    pub settings: Settings,
    /// Connections: a service account's config and secret references.
    #[serde(default)]
    pub connections: Vec<ConnectionConfig>,
    /// The scopes.
    #[serde(default)]
    pub scopes: Vec<ScopeConfig>,
    /// Fields this release does not read.
    #[serde(flatten)]
    pub extra: BTreeMap<String, Value>,
}

/// `settings`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Settings {
    /// Agent turns running at once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub concurrency: Option<u32>,
    /// Jobs running at once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job_concurrency: Option<u32>,
    /// Webhook settings.
    #[serde(default)]
    pub webhooks: WebhookSettings,
    /// Per-extension settings (`pass_env`), by extension name.
    #[serde(default)]
    pub extensions: BTreeMap<String, Value>,
    /// Where storaged keeps the database (SQLite when absent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub storage: Option<StorageSettings>,
    /// Fields this release does not read.
    #[serde(flatten)]
    pub extra: BTreeMap<String, Value>,
}

/// `settings.storage`: the database's backend and, for PostgreSQL, a secret
/// reference to its connection URL (it may carry a password). storaged reads
/// it when it starts (`--config`); a change takes effect at its next start, and
/// moving the data is `open-conduit store export`/`import`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct StorageSettings {
    /// `sqlite` (the default) or `postgres`.
    #[serde(default)]
    pub backend: String,
    /// For `postgres`: `env:NAME` or `file:/path` holding the connection URL
    /// (`postgres://user@host:port/db` or `host=… dbname=…`).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub url_ref: String,
}

impl StorageSettings {
    /// What is wrong with it, as (field, message) pairs.
    pub fn problems(&self) -> Vec<(&'static str, String)> {
        let mut out = Vec::new();
        match self.backend.as_str() {
            "" | "sqlite" => {
                if !self.url_ref.is_empty() {
                    out.push((
                        "url_ref",
                        "the sqlite backend takes no url_ref (its file is <state>/db/conduit.db)"
                            .into(),
                    ));
                }
            }
            "postgres" => {
                if self.url_ref.is_empty() {
                    out.push(("url_ref", "the postgres backend needs url_ref: `env:NAME` or `file:/path` holding the connection URL".into()));
                } else if let Err(e) = check_secret_ref(&self.url_ref) {
                    out.push(("url_ref", e));
                }
            }
            other => out.push((
                "backend",
                format!("{other:?} is not a storage backend (`sqlite` or `postgres`)"),
            )),
        }
        out
    }
}

/// `settings.webhooks`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct WebhookSettings {
    /// The public URL webhooks arrive at (sent to extensions in `configure`).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub public_url: String,
    /// The tunnel that exposes the webhook listener (tunneld runs it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tunnel: Option<TunnelSettings>,
    /// Fields this release does not read.
    #[serde(flatten)]
    pub extra: BTreeMap<String, Value>,
}

/// `settings.webhooks.tunnel`: the provider type and its config, which is the
/// provider package's own (the host never reads it; `validate` kind `tunnel` checks it).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct TunnelSettings {
    /// The tunnel type, a type a package declares in `provides.tunnels`.
    #[serde(default)]
    pub provider: String,
    /// The provider's config as the operator wrote it (`{}` when none).
    #[serde(default, skip_serializing_if = "Value::is_null")]
    pub config: Value,
}

impl TunnelSettings {
    /// The config `tunnel.run` carries: as written, `{}` when none.
    pub fn run_config(&self) -> Value {
        if self.config.is_null() {
            Value::Object(Default::default())
        } else {
            self.config.clone()
        }
    }
}

/// The longest public URL taken (the operator's or a tunnel's).
pub const MAX_PUBLIC_URL_BYTES: usize = 2048;

/// Whether `url` could be the operator's `public_url`: `http://` or `https://`, a host,
/// no credentials (no `@` before the path), no whitespace or control characters, at most
/// [`MAX_PUBLIC_URL_BYTES`]. The reason when it is not.
pub fn check_public_url(url: &str) -> Result<(), String> {
    if url.len() > MAX_PUBLIC_URL_BYTES {
        return Err(format!(
            "a public URL of {} bytes is over the {MAX_PUBLIC_URL_BYTES}-byte limit",
            url.len()
        ));
    }
    if url.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err("a public URL has no whitespace or control characters".into());
    }
    let lower = url.to_ascii_lowercase();
    let rest = if let Some(r) = lower.strip_prefix("https://") {
        r
    } else if let Some(r) = lower.strip_prefix("http://") {
        r
    } else {
        return Err(format!("{url:?} is not an http:// or https:// URL"));
    };
    let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
    if authority.contains('@') {
        return Err("a public URL carries no credentials (user@ or user:password@)".into());
    }
    let host = if let Some(v6) = authority.strip_prefix('[') {
        v6.split(']').next().unwrap_or_default()
    } else {
        authority.split(':').next().unwrap_or_default()
    };
    if host.is_empty() {
        return Err(format!("{url:?} has no host"));
    }
    if let Some((_, port)) = authority
        .rsplit_once(':')
        .filter(|_| !authority.ends_with(']'))
    {
        if !port.is_empty() && port.parse::<u16>().is_err() {
            return Err(format!("{url:?} has a bad port {port:?}"));
        }
    }
    Ok(())
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

/// One problem in a document, at a JSON pointer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Problem {
    /// Where (RFC 6901).
    pub pointer: String,
    /// What is wrong.
    pub message: String,
}

impl std::fmt::Display for Problem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.pointer, self.message)
    }
}

/// What one extension is configured with, and what its identity is bound to.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ExtensionConfig {
    /// `configure`'s params, without `kv` (the host fills it in).
    pub params: ConfigureParams,
    /// The enabled scopes its entries are in.
    pub scopes: Vec<String>,
    /// The connections its entries name.
    pub connections: Vec<String>,
    /// The connections it may resolve outside any scope: the one the tunnel's
    /// config names (`settings.webhooks.tunnel.config.connection`), when the tunnel
    /// is of its types.
    pub unscoped_connections: Vec<String>,
}

fn is_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 128
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
}

/// Escape one JSON pointer segment.
fn seg(s: &str) -> String {
    s.replace('~', "~0").replace('/', "~1")
}

impl Config {
    /// Parse and check a document. Every problem is reported, each with its pointer.
    pub fn parse(doc: &Value) -> Result<Config, Vec<Problem>> {
        let config: Config = match serde_json::from_value(doc.clone()) {
            Ok(c) => c,
            Err(e) => {
                return Err(vec![Problem {
                    pointer: String::new(),
                    message: format!("not a configuration document: {e}"),
                }])
            }
        };
        let problems = config.problems();
        if problems.is_empty() {
            Ok(config)
        } else {
            Err(problems)
        }
    }

    /// The fields of `doc` this release does not know, each with its pointer: a
    /// misspelt field is otherwise ignored without a word. (Extension configs, under
    /// each object's `config`, are their extensions' to check.)
    pub fn unknown_fields(doc: &Value) -> Vec<Problem> {
        const TOP: &[&str] = &["settings", "connections", "scopes"];
        const SETTINGS: &[&str] = &[
            "concurrency",
            "job_concurrency",
            "webhooks",
            "extensions",
            "storage",
        ];
        const WEBHOOKS: &[&str] = &["public_url", "tunnel"];
        const CONNECTION: &[&str] = &["name", "type", "config", "secret_refs"];
        const SCOPE: &[&str] = &[
            "id",
            "enabled",
            "entries",
            "routes",
            "bindings",
            "unmatched",
            "authorization",
        ];
        const ENTRY: &[&str] = &["type", "name", "connection", "config"];
        const ROUTE: &[&str] = &["handler", "binding", "config"];
        const BINDING: &[&str] = &[
            "name",
            "executor",
            "toolbelt",
            "operations",
            "grants",
            "connection",
            BINDING_CONNECTIONS,
            "resource",
            "sandbox",
            "container",
            "config",
            ALLOW_UNCONFINED_CREATE_WORK,
        ];
        let mut out = Vec::new();
        let mut check = |v: &Value, at: &str, known: &[&str]| {
            for key in v.as_object().into_iter().flat_map(|o| o.keys()) {
                if !known.contains(&key.as_str()) {
                    out.push(Problem {
                        pointer: format!("{at}/{}", seg(key)),
                        message: format!("unknown field {key:?} (ignored)"),
                    });
                }
            }
        };
        let items = |v: &Value| v.as_array().cloned().unwrap_or_default();
        check(doc, "", TOP);
        check(&doc["settings"], "/settings", SETTINGS);
        check(&doc["settings"]["webhooks"], "/settings/webhooks", WEBHOOKS);
        check(
            &doc["settings"]["storage"],
            "/settings/storage",
            &["backend", "url_ref"],
        );
        check(
            &doc["settings"]["webhooks"]["tunnel"],
            "/settings/webhooks/tunnel",
            &["provider", "config"],
        );
        for (i, c) in items(&doc["connections"]).iter().enumerate() {
            check(c, &format!("/connections/{i}"), CONNECTION);
        }
        for (i, s) in items(&doc["scopes"]).iter().enumerate() {
            let at = format!("/scopes/{i}");
            check(s, &at, SCOPE);
            for (j, e) in items(&s["entries"]).iter().enumerate() {
                check(e, &format!("{at}/entries/{j}"), ENTRY);
            }
            for (j, r) in items(&s["routes"]).iter().enumerate() {
                check(r, &format!("{at}/routes/{j}"), ROUTE);
            }
            for (j, b) in items(&s["bindings"]).iter().enumerate() {
                check(b, &format!("{at}/bindings/{j}"), BINDING);
            }
        }
        out
    }

    /// The document's structural problems (names, uniqueness, references).
    pub fn problems(&self) -> Vec<Problem> {
        let mut out = Vec::new();
        let mut problem = |pointer: String, message: String| out.push(Problem { pointer, message });
        let w = &self.settings.webhooks;
        if !w.public_url.is_empty() {
            if let Err(e) = check_public_url(&w.public_url) {
                problem("/settings/webhooks/public_url".into(), e);
            }
        }
        if let Some(st) = &self.settings.storage {
            for (field, message) in st.problems() {
                problem(format!("/settings/storage/{field}"), message);
            }
        }
        if let Some(t) = &w.tunnel {
            if !is_name(&t.provider) {
                problem(
                    "/settings/webhooks/tunnel/provider".into(),
                    format!(
                        "{:?} is not a tunnel type (a package's provides.tunnels[].type)",
                        t.provider
                    ),
                );
            }
            if !(t.config.is_null() || t.config.is_object()) {
                problem(
                    "/settings/webhooks/tunnel/config".into(),
                    "a tunnel config is an object".into(),
                );
            }
        }
        let mut connections = BTreeSet::new();
        for (i, c) in self.connections.iter().enumerate() {
            let at = format!("/connections/{i}");
            if !is_name(&c.name) {
                problem(
                    format!("{at}/name"),
                    format!(
                        "{:?} is not a name (letters, digits, -, _, ., at most 128 bytes)",
                        c.name
                    ),
                );
            } else if !connections.insert(c.name.as_str()) {
                problem(
                    format!("{at}/name"),
                    format!("connection {:?} is defined twice", c.name),
                );
            }
            if c.connection_type.is_empty() {
                problem(format!("{at}/type"), "a connection needs a type".into());
            }
            for (name, r) in &c.secret_refs {
                if let Err(e) = check_secret_ref(r) {
                    problem(format!("{at}/secret_refs/{}", seg(name)), e);
                }
            }
        }
        let mut scopes = BTreeSet::new();
        for (i, s) in self.scopes.iter().enumerate() {
            let at = format!("/scopes/{i}");
            if !is_name(&s.id) {
                problem(format!("{at}/id"), format!("{:?} is not a scope ID", s.id));
            } else if !scopes.insert(s.id.as_str()) {
                problem(
                    format!("{at}/id"),
                    format!("scope {:?} is defined twice", s.id),
                );
            }
            let mut entries = BTreeSet::new();
            for (j, e) in s.entries.iter().enumerate() {
                let at = format!("{at}/entries/{j}");
                if e.entry_type.is_empty() {
                    problem(format!("{at}/type"), "an entry needs a type".into());
                }
                if !is_name(&e.name) {
                    problem(
                        format!("{at}/name"),
                        format!("{:?} is not an entry name", e.name),
                    );
                } else if !entries.insert(e.name.as_str()) {
                    problem(
                        format!("{at}/name"),
                        format!("entry {:?} is defined twice in scope {:?}", e.name, s.id),
                    );
                }
                if !e.connection.is_empty() && !connections.contains(e.connection.as_str()) {
                    problem(
                        format!("{at}/connection"),
                        format!("no connection is named {:?}", e.connection),
                    );
                }
            }
            let ids: BTreeSet<&str> = self.scopes.iter().map(|x| x.id.as_str()).collect();
            for (field, list) in [
                ("read_scopes", &s.authorization.read_scopes),
                ("file_scopes", &s.authorization.file_scopes),
            ] {
                for (k, other) in list.iter().enumerate() {
                    let at = format!("{at}/authorization/{field}/{k}");
                    if other == &s.id {
                        problem(
                            at,
                            format!("scope {other:?} needs no authority over itself"),
                        );
                    } else if !ids.contains(other.as_str()) {
                        problem(at, format!("no scope is named {other:?}"));
                    }
                }
            }
            let mut bindings = BTreeSet::new();
            let names: BTreeSet<&str> = s
                .bindings
                .iter()
                .filter_map(|b| b.get("name").and_then(Value::as_str))
                .collect();
            for (j, b) in s.bindings.iter().enumerate() {
                let at = format!("{at}/bindings/{j}");
                match allowed_unconfined(b) {
                    Ok(allowed) => {
                        for (k, name) in allowed.iter().enumerate() {
                            if !names.contains(name.as_str()) {
                                problem(
                                    format!("{at}/{ALLOW_UNCONFINED_CREATE_WORK}/{k}"),
                                    format!("scope {:?} has no binding {name:?}", s.id),
                                );
                            }
                        }
                    }
                    Err(e) => problem(format!("{at}/{ALLOW_UNCONFINED_CREATE_WORK}"), e),
                }
                let Some(b) = b.as_object() else {
                    problem(at, "a binding is an object".into());
                    continue;
                };
                match b.get("name").and_then(Value::as_str) {
                    Some(name) if is_name(name) => {
                        if !bindings.insert(name) {
                            problem(
                                format!("{at}/name"),
                                format!("binding {name:?} is defined twice in scope {:?}", s.id),
                            );
                        }
                    }
                    _ => problem(format!("{at}/name"), "a binding needs a name".into()),
                }
                if b.get("executor")
                    .and_then(Value::as_str)
                    .is_none_or(str::is_empty)
                {
                    problem(
                        format!("{at}/executor"),
                        "a binding needs an executor".into(),
                    );
                }
                let own = b.get("connection").and_then(Value::as_str).unwrap_or("");
                match binding_connections(&Value::Object(b.clone())) {
                    Ok(more) => {
                        let mut seen = BTreeSet::new();
                        for (k, name) in more.iter().enumerate() {
                            let at = format!("{at}/{BINDING_CONNECTIONS}/{k}");
                            if !connections.contains(name.as_str()) {
                                problem(at, format!("no connection is named {name:?}"));
                            } else if name == own {
                                problem(
                                    at,
                                    format!("{name:?} is already the binding's connection"),
                                );
                            } else if !seen.insert(name.as_str()) {
                                problem(at, format!("connection {name:?} is named twice"));
                            }
                        }
                    }
                    Err(e) => problem(format!("{at}/{BINDING_CONNECTIONS}"), e),
                }
            }
            for (j, r) in s.routes.iter().enumerate() {
                if r.handler.is_empty() {
                    problem(
                        format!("{at}/routes/{j}/handler"),
                        "a route needs a handler".into(),
                    );
                }
                if !r.binding.is_empty() && !bindings.contains(r.binding.as_str()) {
                    problem(
                        format!("{at}/routes/{j}/binding"),
                        format!("scope {:?} has no binding {:?}", s.id, r.binding),
                    );
                }
            }
        }
        out
    }

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

    /// The read-only view of this configuration a package's `check.run` receives
    /// (spec: check.run's `config`): each enabled scope that uses the package (an
    /// entry of its types, a route on its handlers, a binding on its executors,
    /// resource or sandbox types, or granted one of its operations) with those routes,
    /// bindings (the executor config only for its own executors) and its own
    /// entries; the connections of its types those name (config only, secret names
    /// never values); the tunnel when its type is the package's. `dir` is the config
    /// file's directory.
    pub fn check_view(&self, manifest: &Manifest, dir: &str) -> wire::CheckConfig {
        let pv = &manifest.provides;
        let entry_types: BTreeSet<&str> =
            pv.extensions.iter().map(|t| t.type_name.as_str()).collect();
        let handlers: BTreeSet<&str> = pv.routes.iter().map(|r| r.handler.as_str()).collect();
        let executors: BTreeSet<&str> = pv.executors.iter().map(|x| x.name.as_str()).collect();
        let resources: BTreeSet<&str> = pv.resources.iter().map(|r| r.type_name.as_str()).collect();
        let sandboxes: BTreeSet<&str> = pv.sandboxes.iter().map(|s| s.type_name.as_str()).collect();
        let operations: BTreeSet<&str> = pv.operations.iter().map(|o| o.name.as_str()).collect();
        let connection_types: BTreeSet<&str> = pv
            .connections
            .iter()
            .map(|t| t.type_name.as_str())
            .collect();
        let mut out = wire::CheckConfig {
            dir: dir.to_owned(),
            ..wire::CheckConfig::default()
        };
        let mut named = BTreeSet::new();
        for scope in self.scopes.iter().filter(|s| s.enabled) {
            let mut view = wire::CheckScope {
                id: scope.id.clone(),
                ..wire::CheckScope::default()
            };
            for e in scope
                .entries
                .iter()
                .filter(|e| entry_types.contains(e.entry_type.as_str()))
            {
                if self
                    .connection(&e.connection)
                    .is_some_and(|c| connection_types.contains(c.connection_type.as_str()))
                {
                    named.insert(e.connection.clone());
                }
                view.entries.push(wire::Entry {
                    scope_id: scope.id.clone(),
                    entry_type: e.entry_type.clone(),
                    name: e.name.clone(),
                    connection: e.connection.clone(),
                    binding_connections: Vec::new(),
                    config: e.config.clone(),
                });
            }
            view.routes = scope
                .routes
                .iter()
                .filter(|r| handlers.contains(r.handler.as_str()))
                .cloned()
                .collect();
            for b in &scope.bindings {
                let Ok(mut binding) = serde_json::from_value::<wire::Binding>(b.clone()) else {
                    continue;
                };
                let own_executor = executors.contains(binding.executor.as_str());
                let own_resource = binding
                    .resource
                    .as_ref()
                    .is_some_and(|r| resources.contains(r.resource_type.as_str()));
                let granted = binding
                    .operations
                    .iter()
                    .any(|o| operations.contains(o.as_str()));
                let own_sandbox = binding
                    .sandbox
                    .as_ref()
                    .and_then(|s| s.get("type"))
                    .and_then(Value::as_str)
                    .is_some_and(|t| sandboxes.contains(t));
                if !(own_executor || own_resource || granted || own_sandbox) {
                    continue;
                }
                if !own_executor {
                    binding.config = Value::Null;
                }
                view.bindings.push(binding);
            }
            if !(view.entries.is_empty() && view.routes.is_empty() && view.bindings.is_empty()) {
                out.scopes.push(view);
            }
        }
        for name in named {
            if let Some(c) = self.connection(&name) {
                out.connections.push(wire::Connection {
                    name: c.name.clone(),
                    connection_type: c.connection_type.clone(),
                    config: c.config.clone(),
                    secrets: c.secret_refs.keys().cloned().collect(),
                });
            }
        }
        if let Some(t) = &self.settings.webhooks.tunnel {
            if pv.tunnels.iter().any(|x| x.type_name == t.provider) {
                out.tunnel = Some(wire::CheckTunnel {
                    tunnel_type: t.provider.clone(),
                    config: t.run_config(),
                });
            }
        }
        out
    }

    /// What the extension of `manifest` is configured with: its entries (of the types it
    /// declares) in enabled scopes, those in disabled scopes apart, the connections those
    /// entries name when of a connection type it declares, the connections the bindings
    /// of its executors name (and their scopes), and the public URL.
    pub fn for_extension(&self, manifest: &Manifest, generation: &str) -> ExtensionConfig {
        let types: BTreeSet<&str> = manifest
            .provides
            .extensions
            .iter()
            .map(|t| t.type_name.as_str())
            .collect();
        let connection_types: BTreeSet<&str> = manifest
            .provides
            .connections
            .iter()
            .map(|t| t.type_name.as_str())
            .collect();
        let mut out = ExtensionConfig::default();
        out.params.generation = generation.to_owned();
        out.params.public_url = self.settings.webhooks.public_url.clone();
        let mut named = BTreeSet::new();
        for scope in &self.scopes {
            for e in &scope.entries {
                if !types.contains(e.entry_type.as_str()) {
                    continue;
                }
                let connection = self
                    .connection(&e.connection)
                    .filter(|c| connection_types.contains(c.connection_type.as_str()))
                    .map(|c| c.name.clone())
                    .unwrap_or_default();
                let entry = wire::Entry {
                    scope_id: scope.id.clone(),
                    entry_type: e.entry_type.clone(),
                    name: e.name.clone(),
                    connection: connection.clone(),
                    binding_connections: Vec::new(),
                    config: e.config.clone(),
                };
                if scope.enabled {
                    if !connection.is_empty() {
                        named.insert(connection);
                    }
                    if !out.scopes.contains(&scope.id) {
                        out.scopes.push(scope.id.clone());
                    }
                    out.params.entries.push(entry);
                } else {
                    out.params.disabled.push(entry);
                }
            }
        }
        // An executor's bindings: the connection each names and its further
        // `connections` (whatever their type: the operator named them for this
        // binding, e.g. for claude-code's `secret_env`), in an enabled scope, so the
        // executor may resolve their secrets (docs/decisions.md).
        let executors: BTreeSet<&str> = manifest
            .provides
            .executors
            .iter()
            .map(|x| x.name.as_str())
            .collect();
        for scope in self.scopes.iter().filter(|s| s.enabled) {
            for b in &scope.bindings {
                let ours = b["executor"]
                    .as_str()
                    .is_some_and(|x| executors.contains(x));
                if !ours {
                    continue;
                }
                let connection = b["connection"].as_str().unwrap_or_default();
                let more = binding_connections(b).unwrap_or_default();
                for name in std::iter::once(connection).chain(more.iter().map(String::as_str)) {
                    if name.is_empty() || self.connection(name).is_none() {
                        continue;
                    }
                    named.insert(name.to_owned());
                    if !out.scopes.contains(&scope.id) {
                        out.scopes.push(scope.id.clone());
                    }
                }
            }
        }
        // A resource provider's bindings: each enabled scope with a binding whose
        // resource is of the package's types is the package's (the provider resolves
        // what that binding's resource config needs there), and a connection the
        // resource config names is bound to it (the git resource's credential).
        let resource_types: BTreeSet<&str> = manifest
            .provides
            .resources
            .iter()
            .map(|r| r.type_name.as_str())
            .collect();
        for scope in self.scopes.iter().filter(|s| s.enabled) {
            for b in &scope.bindings {
                let ours = b["resource"]["type"]
                    .as_str()
                    .is_some_and(|t| resource_types.contains(t));
                if !ours {
                    continue;
                }
                if !out.scopes.contains(&scope.id) {
                    out.scopes.push(scope.id.clone());
                }
                let connection = b["resource"]["config"]["connection"]
                    .as_str()
                    .unwrap_or_default();
                if !connection.is_empty() && self.connection(connection).is_some() {
                    named.insert(connection.to_owned());
                }
            }
        }
        // The tunnel's connection (its key or token), when the tunnel is the package's:
        // the tunnel is the suite's, in no scope.
        if let Some(t) = &self.settings.webhooks.tunnel {
            let ours = manifest
                .provides
                .tunnels
                .iter()
                .any(|x| x.type_name == t.provider);
            let connection = t.config["connection"].as_str().unwrap_or_default();
            if ours && !connection.is_empty() && self.connection(connection).is_some() {
                named.insert(connection.to_owned());
                out.unscoped_connections.push(connection.to_owned());
            }
        }
        for name in named {
            if let Some(c) = self.connection(&name) {
                out.params.connections.push(wire::Connection {
                    name: c.name.clone(),
                    connection_type: c.connection_type.clone(),
                    config: c.config.clone(),
                    secrets: c.secret_refs.keys().cloned().collect(),
                });
                out.connections.push(name);
            }
        }
        out
    }
}

/// Check a secret reference's form without reading it.
pub fn check_secret_ref(r: &str) -> Result<(), String> {
    if let Some(name) = r.strip_prefix("env:") {
        if name.is_empty() || name.contains('=') || name.contains('\0') {
            return Err(format!("{r:?}: `env:` needs a variable name"));
        }
        return Ok(());
    }
    if let Some(path) = r.strip_prefix("file:") {
        if !path.starts_with('/') {
            return Err(format!("{r:?}: `file:` needs an absolute path"));
        }
        return Ok(());
    }
    Err(format!(
        "{r:?} is not a secret reference (`env:NAME` or `file:/absolute/path`)"
    ))
}

/// Read a secret reference: `env:NAME` (the reading process's environment) or
/// `file:/path` (its content without one trailing newline, at most
/// [`MAX_SECRET_FILE_BYTES`]). The error never contains the value.
pub fn resolve_secret_ref(r: &str) -> Result<String, String> {
    check_secret_ref(r)?;
    if let Some(name) = r.strip_prefix("env:") {
        return std::env::var(name).map_err(|_| format!("the variable {name} is not set"));
    }
    let path = r.strip_prefix("file:").unwrap_or(r);
    let meta = std::fs::metadata(path).map_err(|e| format!("{path}: {e}"))?;
    if meta.len() > MAX_SECRET_FILE_BYTES {
        return Err(format!(
            "{path} is {} bytes, over the secret file limit ({MAX_SECRET_FILE_BYTES})",
            meta.len()
        ));
    }
    let text = std::fs::read_to_string(path).map_err(|e| format!("{path}: {e}"))?;
    let text = text.strip_suffix('\n').unwrap_or(&text);
    let text = text.strip_suffix('\r').unwrap_or(text);
    Ok(text.to_owned())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use serde_json::json;

    #[test]
    fn a_scope_reads_or_files_in_another_only_as_its_authorization_says() {
        let doc = json!({"scopes": [
            {"id": "a", "authorization": {"read_scopes": ["b"], "file_scopes": ["c"]}},
            {"id": "b"}, {"id": "c"}, {"id": "d"}
        ]});
        let config = Config::parse(&doc).unwrap();
        assert!(config.authorizes("a", "b", Access::Read).is_ok());
        let why = config.authorizes("a", "b", Access::File).unwrap_err();
        assert!(why.contains("authorization.file_scopes"), "{why}");
        assert!(config.authorizes("a", "c", Access::File).is_ok());
        assert!(
            config.authorizes("a", "c", Access::Read).is_ok(),
            "filing implies reading"
        );
        assert!(config.authorizes("a", "d", Access::Read).is_err());
        assert!(
            config.authorizes("b", "a", Access::Read).is_err(),
            "not symmetric"
        );
        assert!(config.authorizes("a", "a", Access::File).is_ok());
        // Unknown and self-naming scopes are refused with their pointers.
        let bad = json!({"scopes": [
            {"id": "a", "authorization": {"read_scopes": ["nope"], "file_scopes": ["a"]}}
        ]});
        let problems = Config::parse(&bad).unwrap_err();
        let pointers: Vec<&str> = problems.iter().map(|p| p.pointer.as_str()).collect();
        assert!(
            pointers.contains(&"/scopes/0/authorization/read_scopes/0"),
            "{problems:?}"
        );
        assert!(
            pointers.contains(&"/scopes/0/authorization/file_scopes/0"),
            "{problems:?}"
        );
    }

    #[test]
    fn a_check_sees_the_scopes_that_use_its_package() {
        let git = crate::manifest::parse_manifest(
            br#"{"protocol":[1],"name":"git","version":"1","command":["x"],
                "provides":{"resources":[{"type":"git","modes":["work"]}]}}"#,
        )
        .unwrap();
        let doc = json!({"scopes": [
            {"id": "a", "bindings": [
                {"name": "agent", "executor": "claude-code", "config": {"model": "opus"},
                 "resource": {"type": "git", "config": {"repository": "/r"}}},
                {"name": "plain", "executor": "shell", "config": {"script": "true"}}]},
            {"id": "b", "bindings": [{"name": "other", "executor": "shell"}]},
            {"id": "c", "enabled": false, "bindings": [
                {"name": "off", "executor": "shell", "resource": {"type": "git"}}]}
        ]});
        let config = Config::parse(&doc).unwrap();
        let view = config.check_view(&git, "/etc/open-conduit");
        assert_eq!(view.dir, "/etc/open-conduit");
        assert_eq!(view.scopes.len(), 1, "{view:?}");
        let b = &view.scopes[0].bindings;
        assert_eq!(b.len(), 1);
        assert_eq!(b[0].name, "agent");
        assert_eq!(b[0].resource.as_ref().unwrap().config["repository"], "/r");
        // Another package's executor config is not the provider's to see.
        assert!(b[0].config.is_null());
        // A sandbox provider sees the bindings on its sandbox type.
        let srt = crate::manifest::parse_manifest(
            br#"{"protocol":[1],"name":"srt","version":"1","command":["x"],
                "provides":{"sandboxes":[{"type":"srt"}]}}"#,
        )
        .unwrap();
        let doc = json!({"scopes": [{"id": "a", "bindings": [
            {"name": "boxed", "executor": "shell", "sandbox": {"type": "srt", "config": {"srt": "/s"}}},
            {"name": "plain", "executor": "shell"}]}]});
        let view = Config::parse(&doc).unwrap().check_view(&srt, "");
        let b = &view.scopes[0].bindings;
        assert_eq!(b.len(), 1, "{view:?}");
        assert_eq!(b[0].sandbox.as_ref().unwrap()["config"]["srt"], "/s");
    }

    #[test]
    fn an_unconfined_create_work_grant_names_bindings_of_its_scope() {
        let doc = json!({"scopes": [{"id": "a", "bindings": [
            {"name": "boxed", "executor": "shell", "sandbox": {"type": "srt"},
             "allow_unconfined_create_work": ["open"]},
            {"name": "open", "executor": "shell"}]}]});
        let c = Config::parse(&doc).unwrap();
        assert_eq!(
            allowed_unconfined(&c.scopes[0].bindings[0]).unwrap(),
            vec!["open".to_owned()]
        );
        assert!(allowed_unconfined(&c.scopes[0].bindings[1])
            .unwrap()
            .is_empty());
        assert!(Config::unknown_fields(&doc).is_empty());
        // A name the scope does not have, and a field that is not an array of names,
        // are refused at their pointers.
        let mut bad = doc.clone();
        bad["scopes"][0]["bindings"][0][ALLOW_UNCONFINED_CREATE_WORK] = json!(["open", "gone"]);
        let p = Config::parse(&bad).unwrap_err();
        assert_eq!(p.len(), 1, "{p:?}");
        assert_eq!(
            p[0].pointer,
            "/scopes/0/bindings/0/allow_unconfined_create_work/1"
        );
        assert!(p[0].message.contains("\"gone\""), "{}", p[0].message);
        bad["scopes"][0]["bindings"][0][ALLOW_UNCONFINED_CREATE_WORK] = json!(true);
        let p = Config::parse(&bad).unwrap_err();
        assert_eq!(
            p[0].pointer,
            "/scopes/0/bindings/0/allow_unconfined_create_work"
        );
        assert!(
            p[0].message.contains("array of binding names"),
            "{}",
            p[0].message
        );
    }

    fn manifest() -> Manifest {
        crate::manifest::parse_manifest(
            br#"{"protocol":[1],"name":"hook","version":"1","command":["x"],
            "provides":{"families":[{"name":"hook.delivery","re_derivable":false,"loss":"gone"}],
            "connections":[{"type":"hook","fields":[{"name":"secret","secret":true}]}],
            "extensions":[{"type":"hook","ingress":true,"webhooks":true,"families":["hook.delivery"]}]}}"#,
        )
        .unwrap()
    }

    fn doc() -> Value {
        json!({
            "settings": {"webhooks": {"public_url": "https://x.example"}},
            "connections": [
                {"name": "c1", "type": "hook", "secret_refs": {"secret": "env:HOOK_SECRET"}},
                {"name": "gh", "type": "github", "secret_refs": {"token": "file:/etc/t"}}
            ],
            "scopes": [
                {"id": "a", "entries": [
                    {"type": "hook", "name": "one", "connection": "c1", "config": {"path": "/h/a"}},
                    {"type": "github", "name": "repo", "connection": "gh"}
                ]},
                {"id": "b", "enabled": false, "entries": [{"type": "hook", "name": "two"}]}
            ]
        })
    }

    #[test]
    fn an_extension_gets_its_own_entries_and_connections() {
        let c = Config::parse(&doc()).unwrap();
        let e = c.for_extension(&manifest(), "g1");
        assert_eq!(e.scopes, vec!["a".to_owned()]);
        assert_eq!(e.connections, vec!["c1".to_owned()]);
        assert_eq!(e.params.entries.len(), 1);
        assert_eq!(e.params.entries[0].name, "one");
        assert_eq!(e.params.entries[0].connection, "c1");
        assert_eq!(e.params.disabled.len(), 1);
        assert_eq!(e.params.connections[0].secrets, vec!["secret".to_owned()]);
        assert_eq!(e.params.public_url, "https://x.example");
        assert_eq!(e.params.generation, "g1");
    }

    #[test]
    fn an_executor_gets_the_connections_its_bindings_name() {
        let m = crate::manifest::parse_manifest(
            br#"{"protocol":[1],"name":"cc","version":"1","command":["x"],
            "provides":{"executors":[{"name":"cc"}]}}"#,
        )
        .unwrap();
        let mut d = doc();
        d["connections"]
            .as_array_mut()
            .unwrap()
            .push(json!({"name": "key", "type": "anthropic", "secret_refs": {"api_key": "env:K"}}));
        d["scopes"][0]["bindings"] = json!([
            {"name": "agent", "executor": "cc", "connection": "key"},
            {"name": "other", "executor": "shell", "connection": "gh"}
        ]);
        let c = Config::parse(&d).unwrap();
        let e = c.for_extension(&m, "g1");
        assert_eq!(e.scopes, vec!["a".to_owned()]);
        assert_eq!(e.connections, vec!["key".to_owned()]);
        assert!(e.params.entries.is_empty());
        // Before: an executor had no entries, so nothing at all.
        let e = c.for_extension(&manifest(), "g1");
        assert_eq!(e.connections, vec!["c1".to_owned()]);
        // A binding's further `connections` are the executor's to resolve too,
        // whatever their type; another executor's binding's are not.
        d["scopes"][0]["bindings"] = json!([
            {"name": "agent", "executor": "cc", "connection": "gh", "connections": ["key"]},
            {"name": "other", "executor": "shell", "connection": "gh", "connections": ["c1"]}
        ]);
        let c = Config::parse(&d).unwrap();
        assert!(Config::unknown_fields(&d).is_empty());
        let e = c.for_extension(&m, "g1");
        assert_eq!(e.connections, vec!["gh".to_owned(), "key".to_owned()]);
        assert_eq!(e.scopes, vec!["a".to_owned()]);
        // The check view's binding carries them.
        let view = c.check_view(&m, "");
        assert_eq!(view.scopes[0].bindings[0].connection, "gh");
        assert_eq!(
            view.scopes[0].bindings[0].connections,
            vec!["key".to_owned()]
        );
    }

    #[test]
    fn a_bindings_connections_exist_once_and_apart_from_its_connection() {
        let mut d = doc();
        d["scopes"][0]["bindings"] = json!([
            {"name": "ok", "executor": "cc", "connection": "gh", "connections": ["c1"]},
            {"name": "bad", "executor": "cc", "connection": "gh",
             "connections": ["c1", "gone", "gh", "c1"]},
            {"name": "none", "executor": "cc", "connections": null}
        ]);
        let p = Config::parse(&d).unwrap_err();
        let got: Vec<(&str, &str)> = p
            .iter()
            .map(|p| (p.pointer.as_str(), p.message.as_str()))
            .collect();
        assert_eq!(
            got,
            vec![
                (
                    "/scopes/0/bindings/1/connections/1",
                    "no connection is named \"gone\""
                ),
                (
                    "/scopes/0/bindings/1/connections/2",
                    "\"gh\" is already the binding's connection"
                ),
                (
                    "/scopes/0/bindings/1/connections/3",
                    "connection \"c1\" is named twice"
                ),
            ],
            "{p:?}"
        );
        assert!(p
            .iter()
            .all(|p| !p.pointer.starts_with("/scopes/0/bindings/0")));
        let typed = &Config::parse(&json!({"scopes": [{"id": "a", "bindings": [
            {"name": "typed", "executor": "cc", "connections": "c1"}]}]}))
        .unwrap_err()[0];
        assert_eq!(typed.pointer, "/scopes/0/bindings/0/connections");
        assert!(
            typed.message.contains("an array of connection names"),
            "{}",
            typed.message
        );
    }

    #[test]
    fn problems_are_reported_with_pointers() {
        let bad = json!({
            "connections": [{"name": "c", "type": "x", "secret_refs": {"s": "plain"}}],
            "scopes": [
                {"id": "a", "entries": [{"type": "t", "name": "e", "connection": "nope"},
                                        {"type": "t", "name": "e"}]},
                {"id": "a"}
            ]
        });
        let problems = Config::parse(&bad).unwrap_err();
        let pointers: Vec<&str> = problems.iter().map(|p| p.pointer.as_str()).collect();
        assert_eq!(
            pointers,
            vec![
                "/connections/0/secret_refs/s",
                "/scopes/0/entries/0/connection",
                "/scopes/0/entries/1/name",
                "/scopes/1/id"
            ]
        );
    }

    #[test]
    fn secret_refs_resolve_from_files_and_say_why_not() {
        let dir = std::env::temp_dir().join(format!("oc-secret-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("s");
        std::fs::write(&f, "hunter2\n").unwrap();
        assert_eq!(
            resolve_secret_ref(&format!("file:{}", f.display())).unwrap(),
            "hunter2"
        );
        let e = resolve_secret_ref("env:OC_SURELY_UNSET_VARIABLE_42").unwrap_err();
        assert!(e.contains("not set"), "{e}");
        assert!(resolve_secret_ref("file:relative").is_err());
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn public_urls_are_http_with_a_host_and_no_credentials() {
        for ok in [
            "https://hooks.example.com",
            "http://127.0.0.1:8080/x",
            "https://[::1]:443/p?q",
            "HTTPS://Example.COM",
        ] {
            assert!(check_public_url(ok).is_ok(), "{ok}");
        }
        for bad in [
            "ftp://x.example",
            "https://",
            "https://user:pw@x.example",
            "https://token@x.example/p",
            "https://x.example:99999",
            "https://x.example/a b",
            "x.example",
            "",
        ] {
            assert!(check_public_url(bad).is_err(), "{bad}");
        }
        assert!(check_public_url(&format!("https://x.example/{}", "a".repeat(3000))).is_err());
    }

    #[test]
    fn the_tunnel_setting_is_parsed_and_checked() {
        let doc = serde_json::json!({"settings": {"webhooks": {"tunnel": {
            "provider": "ssh", "config": {"host": "h", "url": "https://x.example"}}}}});
        let c = Config::parse(&doc).unwrap();
        let t = c.settings.webhooks.tunnel.clone().unwrap();
        assert_eq!(t.provider, "ssh");
        assert_eq!(t.run_config()["host"], "h");
        assert!(Config::unknown_fields(&doc).is_empty());
        let none = TunnelSettings {
            provider: "ssh".into(),
            config: Value::Null,
        };
        assert_eq!(none.run_config(), serde_json::json!({}));
        let bad = serde_json::json!({"settings": {"webhooks": {
            "public_url": "https://u:p@x.example",
            "tunnel": {"provider": "", "config": [], "extra": 1}}}});
        let problems = Config::parse(&bad).unwrap_err();
        let pointers: Vec<&str> = problems.iter().map(|p| p.pointer.as_str()).collect();
        assert_eq!(
            pointers,
            [
                "/settings/webhooks/public_url",
                "/settings/webhooks/tunnel/provider",
                "/settings/webhooks/tunnel/config"
            ]
        );
        let unknown = Config::unknown_fields(&bad);
        assert_eq!(unknown[0].pointer, "/settings/webhooks/tunnel/extra");
    }
}
