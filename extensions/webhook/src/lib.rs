//! The `webhook` extension: a generic, signed-JSON webhook intake.
//!
//! Each config entry of type `webhook` registers one webhook path (its `path`, by
//! default `/webhook/<scope>/<entry>`) and one ingress source
//! (`webhook/<scope>/<entry>`, family `webhook.delivery`). A `POST` there is
//! verified (HMAC-SHA256 in a header, the Standard Webhooks scheme, or unsigned
//! from loopback only), its body parsed as JSON, and answered with one delivery
//! carrying one Event: `webhook.delivery` (or `webhook.delivery.<subtype>`) in
//! schema `webhook.delivery.v1`. The route handler `webhook` takes those Events
//! into Work. See the crate's `README.md` for the entry config.
//!
//! The secret of a signed entry is the `secret` of the entry's connection (type
//! `webhook`), resolved through `secret.resolve` on first use and cached per
//! (scope, connection) until the next `configure`; a failed resolve answers 503.
//!
//! Modules: [`config`] parses and checks configs, [`signature`] verifies,
//! [`intake`] builds the answer of `webhook.handle`, [`route`] answers
//! `route.match`. All of them are pure; this module holds the state and the
//! host calls.

#![warn(missing_docs)]

pub mod config;
pub mod intake;
pub mod route;
pub mod signature;

use crate::config::{check_path, parse_entry_config, parse_route_config, Scheme};
use crate::intake::{admit, deliver, refuse, Entry, FAMILY};
use protocol::wire::{
    validate_kind, ConfigureParams, ConfigureResult, Diagnostic, RouteMatchParams,
    RouteMatchResult, SecretResolveParams, SourceDecl, ValidateParams, ValidateResult,
    WebhookHandleParams, WebhookHandleResult,
};
use protocol::RpcError;
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, RwLock, RwLockReadGuard, RwLockWriteGuard};

/// The manifest, `open-conduit-extension.json`.
pub const MANIFEST: &str = include_str!("../open-conduit-extension.json");
/// The entry type (and connection type) this extension serves.
pub const ENTRY_TYPE: &str = "webhook";
/// The name of the connection's secret a signed entry verifies with.
pub const SECRET_NAME: &str = "secret";

/// What the handlers share: the entries of the last `configure` and the secrets
/// resolved since.
#[derive(Debug, Default)]
struct Table {
    /// Bumped by every `configure`, so a resolve that raced one caches nothing.
    generation: u64,
    entries: Arc<Vec<Arc<Entry>>>,
    secrets: HashMap<(String, String), Arc<str>>,
}

/// The extension's state, shared by its handlers (cheap to clone).
#[derive(Debug, Clone, Default)]
pub struct State(Arc<RwLock<Table>>);

impl State {
    /// No entries yet.
    pub fn new() -> Self {
        State::default()
    }

    fn read(&self) -> RwLockReadGuard<'_, Table> {
        self.0.read().unwrap_or_else(|p| p.into_inner())
    }

    fn write(&self) -> RwLockWriteGuard<'_, Table> {
        self.0.write().unwrap_or_else(|p| p.into_inner())
    }

    /// Replaces the entries and drops every cached secret.
    pub fn install(&self, entries: Vec<Arc<Entry>>) {
        let mut t = self.write();
        t.generation = t.generation.wrapping_add(1);
        t.entries = Arc::new(entries);
        t.secrets.clear();
    }

    /// The current entries.
    pub fn entries(&self) -> Arc<Vec<Arc<Entry>>> {
        Arc::clone(&self.read().entries)
    }

    /// The secret of `entry`'s connection: cached, else resolved through the host.
    /// An error says why it could not be had.
    pub async fn secret(&self, host: &sdk::Host, entry: &Entry) -> Result<Arc<str>, String> {
        let key = (entry.scope_id.clone(), entry.connection.clone());
        let generation = {
            let t = self.read();
            if let Some(s) = t.secrets.get(&key) {
                return Ok(Arc::clone(s));
            }
            t.generation
        };
        let resolved = host
            .secret_resolve(&SecretResolveParams {
                scope_id: entry.scope_id.clone(),
                connection: entry.connection.clone(),
                names: vec![SECRET_NAME.to_string()],
            })
            .await
            .map_err(|e| e.to_string())?;
        let value: Arc<str> = resolved
            .values
            .get(SECRET_NAME)
            .map(|v| Arc::from(v.as_str()))
            .ok_or_else(|| format!("the host resolved no `{SECRET_NAME}`"))?;
        let mut t = self.write();
        if t.generation == generation {
            t.secrets.insert(key, Arc::clone(&value));
        }
        Ok(value)
    }

    /// Serves `webhook.handle`.
    pub async fn handle(&self, host: &sdk::Host, p: &WebhookHandleParams) -> WebhookHandleResult {
        let entries = self.entries();
        let entry = match admit(&entries, p) {
            Ok(e) => Arc::clone(e),
            Err(answer) => return answer,
        };
        let secret: Arc<str> = if entry.config.scheme.is_signed() {
            match self.secret(host, &entry).await {
                Ok(s) => s,
                Err(why) => {
                    eprintln!(
                        "webhook: scope {}, entry {}: cannot resolve the secret of connection {}: {why}",
                        entry.scope_id, entry.name, entry.connection
                    );
                    return refuse(503, "the webhook's secret is not available; retry later");
                }
            }
        } else {
            Arc::from("")
        };
        deliver(&entry, p, &secret, unix_now())
    }
}

/// The clock, in unix seconds.
pub fn unix_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
}

fn entry_error(scope: &str, entry: &str, detail: impl std::fmt::Display) -> RpcError {
    RpcError::invalid_params(format!("scope {scope}, entry {entry}: {detail}"))
}

/// Checks `configure`'s entries of type `webhook` and plans what they register:
/// one source and one webhook path each. Entries of scopes that are disabled
/// register nothing. The first bad entry fails it all with an invalid-params error
/// naming the scope, the entry and the field.
pub fn plan(params: &ConfigureParams) -> Result<(Vec<Arc<Entry>>, ConfigureResult), RpcError> {
    let connections: HashMap<&str, &protocol::wire::Connection> = params
        .connections
        .iter()
        .map(|c| (c.name.as_str(), c))
        .collect();
    let mut paths: BTreeMap<String, (String, String)> = BTreeMap::new();
    let mut entries = Vec::new();
    let mut result = ConfigureResult::default();
    for e in params.entries.iter().filter(|e| e.entry_type == ENTRY_TYPE) {
        let (scope, name) = (e.scope_id.as_str(), e.name.as_str());
        let config = parse_entry_config(&e.config).map_err(|err| entry_error(scope, name, err))?;
        let path = match &config.path {
            Some(p) => p.clone(),
            None => check_path(&format!("/webhook/{scope}/{name}")).map_err(|why| {
                entry_error(
                    scope,
                    name,
                    format!("/path: the default path is not usable ({why}); set one"),
                )
            })?,
        };
        if config.scheme.is_signed() {
            if e.connection.is_empty() {
                return Err(entry_error(
                    scope,
                    name,
                    format!(
                        "connection: signature scheme {} needs a connection of type {ENTRY_TYPE} (granted to the scope) holding its `{SECRET_NAME}`",
                        config.scheme.name()
                    ),
                ));
            }
            if let Some(c) = connections.get(e.connection.as_str()) {
                if !c.secrets.iter().any(|s| s == SECRET_NAME) {
                    return Err(entry_error(
                        scope,
                        name,
                        format!(
                            "connection: connection {} has no secret named `{SECRET_NAME}`",
                            c.name
                        ),
                    ));
                }
            }
        }
        if let Some((s, n)) = paths.get(&path) {
            return Err(entry_error(
                scope,
                name,
                format!("/path: {path} is already the path of scope {s}, entry {n}"),
            ));
        }
        paths.insert(path.clone(), (scope.to_string(), name.to_string()));
        let entry = Entry {
            scope_id: scope.to_string(),
            name: name.to_string(),
            connection: if config.scheme == Scheme::None {
                String::new()
            } else {
                e.connection.clone()
            },
            source: format!("{ENTRY_TYPE}/{scope}/{name}"),
            path,
            config,
        };
        result.sources.push(SourceDecl {
            name: entry.source.clone(),
            source_type: ENTRY_TYPE.to_string(),
            scope_id: entry.scope_id.clone(),
            entry: entry.name.clone(),
            families: vec![FAMILY.to_string()],
            reconcile_interval_s: 0,
        });
        result.webhooks.push(entry.webhook_path());
        entries.push(Arc::new(entry));
    }
    Ok((entries, result))
}

/// One line saying what a valid entry sets up.
fn describe_entry(name: &str, config: &config::EntryConfig) -> String {
    let path = config.path.clone().unwrap_or_else(|| {
        let name = if name.is_empty() { "<entry>" } else { name };
        format!("/webhook/<scope>/{name}")
    });
    let how = match &config.scheme {
        Scheme::HmacSha256 {
            header,
            format,
            timestamp_header,
        } => {
            let ts = timestamp_header
                .as_ref()
                .map(|t| format!(", timestamped by {t}"))
                .unwrap_or_default();
            format!("signed hmac-sha256 in {header} as {}{ts}", format.text)
        }
        Scheme::StandardWebhooks => "signed as Standard Webhooks".to_string(),
        Scheme::None => "unsigned, from loopback only".to_string(),
    };
    format!("POST {path}: {how}")
}

/// Serves `validate` for an entry (kind `extension`) or a route (kind `route`) of
/// type `webhook`; other kinds have nothing to check.
pub fn validate(p: &ValidateParams) -> ValidateResult {
    let diagnostic = |e: config::ConfigError| Diagnostic {
        code: "invalid_config".to_string(),
        message: e.to_string(),
        path: e.pointer,
    };
    let mut result = ValidateResult::default();
    match (p.kind.as_str(), p.type_name.as_str()) {
        (validate_kind::EXTENSION, ENTRY_TYPE) => match parse_entry_config(&p.config) {
            Ok(c) => result.describe.push(describe_entry(&p.name, &c)),
            Err(e) => result.diagnostics.push(diagnostic(e)),
        },
        (validate_kind::ROUTE, route::HANDLER) => match parse_route_config(&p.config) {
            Ok(c) => result.describe.push(match c.entry {
                Some(e) => format!("webhook deliveries of entry {e}"),
                None => "every webhook delivery of the scope".to_string(),
            }),
            Err(e) => result.diagnostics.push(diagnostic(e)),
        },
        _ => {}
    }
    result
}

/// Serves `route.match`.
pub fn match_route(p: &RouteMatchParams) -> RouteMatchResult {
    if p.handler != route::HANDLER {
        return RouteMatchResult {
            reason: format!("handler {} is not {}", p.handler, route::HANDLER),
            ..RouteMatchResult::default()
        };
    }
    route::route_match(p)
}

/// The extension, with every handler.
pub fn extension() -> Result<sdk::Extension, String> {
    let state = State::new();
    let configured = state.clone();
    let ext = sdk::Extension::new(MANIFEST)
        .map_err(|e| e.to_string())?
        .on_configure(move |_ctx, params| {
            let state = configured.clone();
            async move {
                let (entries, result) = plan(&params)?;
                state.install(entries);
                Ok(result)
            }
        })
        .on::<WebhookHandleParams, _, _>(move |ctx, p| {
            let state = state.clone();
            async move { Ok(state.handle(&ctx.host, &p).await) }
        })
        .on::<RouteMatchParams, _, _>(|_ctx, p| async move { Ok(match_route(&p)) })
        .on::<ValidateParams, _, _>(|_ctx, p| async move { Ok(validate(&p)) });
    match ext.errors().first() {
        Some(e) => Err(e.to_string()),
        None => Ok(ext),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use protocol::wire::{Connection, Entry as WireEntry};
    use serde_json::{json, Value};

    fn wire_entry(scope: &str, name: &str, connection: &str, config: Value) -> WireEntry {
        WireEntry {
            scope_id: scope.into(),
            entry_type: ENTRY_TYPE.into(),
            name: name.into(),
            connection: connection.into(),
            config,
            ..WireEntry::default()
        }
    }

    fn hooks_connection() -> Connection {
        Connection {
            name: "hooks".into(),
            connection_type: ENTRY_TYPE.into(),
            secrets: vec![SECRET_NAME.into()],
            ..Connection::default()
        }
    }

    #[test]
    fn the_manifest_parses_and_every_handler_is_allowed() {
        extension().expect("a valid extension");
        let m = protocol::manifest::parse_manifest(MANIFEST.as_bytes()).expect("valid");
        assert_eq!(m.name, "webhook");
    }

    #[test]
    fn configure_registers_a_source_and_a_path_per_entry() {
        let params = ConfigureParams {
            entries: vec![
                wire_entry("s", "ci", "hooks", json!({})),
                wire_entry(
                    "s",
                    "local",
                    "",
                    json!({"path": "/local/", "signature": {"scheme": "none"}, "allow_unsigned": "loopback"}),
                ),
                WireEntry {
                    entry_type: "other".into(),
                    ..wire_entry("s", "x", "", json!({"bad": 1}))
                },
            ],
            connections: vec![hooks_connection()],
            ..ConfigureParams::default()
        };
        let (entries, result) = plan(&params).expect("valid");
        assert_eq!(entries.len(), 2);
        let sources: Vec<_> = result.sources.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(sources, ["webhook/s/ci", "webhook/s/local"]);
        assert_eq!(
            result.sources[0].families,
            vec!["webhook.delivery".to_string()]
        );
        assert_eq!(result.sources[0].source_type, "webhook");
        let paths: Vec<_> = result
            .webhooks
            .iter()
            .map(|w| (w.path.as_str(), w.source.as_str(), w.entry.as_str()))
            .collect();
        assert_eq!(
            paths,
            [
                ("/webhook/s/ci", "webhook/s/ci", "ci"),
                ("/local", "webhook/s/local", "local")
            ]
        );
    }

    fn plan_error(entries: Vec<WireEntry>) -> String {
        let params = ConfigureParams {
            entries,
            connections: vec![
                hooks_connection(),
                Connection {
                    name: "nosecret".into(),
                    connection_type: ENTRY_TYPE.into(),
                    ..Connection::default()
                },
            ],
            ..ConfigureParams::default()
        };
        match plan(&params) {
            Ok(_) => panic!("planned"),
            Err(e) => {
                assert_eq!(e.code, -32602, "{e}");
                e.message
            }
        }
    }

    #[test]
    fn configure_errors_name_scope_entry_and_field() {
        let m = plan_error(vec![wire_entry(
            "s1",
            "ci",
            "hooks",
            json!({"signature": {"scheme": "sha1"}}),
        )]);
        assert!(m.contains("scope s1, entry ci: /signature/scheme:"), "{m}");
        let m = plan_error(vec![wire_entry("s1", "ci", "", json!({}))]);
        assert!(m.contains("scope s1, entry ci: connection:"), "{m}");
        let m = plan_error(vec![wire_entry("s1", "ci", "nosecret", json!({}))]);
        assert!(m.contains("has no secret named `secret`"), "{m}");
        let m = plan_error(vec![
            wire_entry("s1", "a", "hooks", json!({"path": "/same"})),
            wire_entry("s2", "b", "hooks", json!({"path": "/same/"})),
        ]);
        assert!(
            m.contains("scope s2, entry b: /path: /same is already the path of scope s1, entry a"),
            "{m}"
        );
        let m = plan_error(vec![wire_entry("s1", "a b", "hooks", json!({}))]);
        assert!(
            m.contains("scope s1, entry a b: /path: the default path"),
            "{m}"
        );
    }

    #[test]
    fn configure_replaces_the_entries_and_drops_the_secrets() {
        let state = State::new();
        let params = ConfigureParams {
            entries: vec![wire_entry("s", "ci", "hooks", json!({}))],
            connections: vec![hooks_connection()],
            ..ConfigureParams::default()
        };
        let (entries, _) = plan(&params).expect("valid");
        state.install(entries);
        state
            .write()
            .secrets
            .insert(("s".into(), "hooks".into()), Arc::from("old"));
        assert_eq!(state.entries().len(), 1);
        state.install(Vec::new());
        assert!(state.entries().is_empty());
        assert!(state.read().secrets.is_empty());
    }

    #[test]
    fn validate_reports_diagnostics_with_pointers() {
        let v = validate(&ValidateParams {
            kind: "extension".into(),
            type_name: "webhook".into(),
            name: "ci".into(),
            config: json!({"signature": {"scheme": "none"}}),
            ..ValidateParams::default()
        });
        assert_eq!(v.diagnostics.len(), 1);
        assert_eq!(v.diagnostics[0].path, "/allow_unsigned");
        let v = validate(&ValidateParams {
            kind: "extension".into(),
            type_name: "webhook".into(),
            name: "ci".into(),
            config: json!({}),
            ..ValidateParams::default()
        });
        assert!(v.diagnostics.is_empty());
        assert_eq!(
            v.describe,
            vec![
                "POST /webhook/<scope>/ci: signed hmac-sha256 in X-Signature-256 as sha256={hex}"
                    .to_string()
            ]
        );
        let v = validate(&ValidateParams {
            kind: "route".into(),
            type_name: "webhook".into(),
            config: json!({"title_pointer": "x"}),
            ..ValidateParams::default()
        });
        assert_eq!(v.diagnostics[0].path, "/title_pointer");
    }
}
