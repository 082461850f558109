//! Offline validation: `config check` without a daemon.
//!
//! A configuration's objects belong to the packages that declare their types: a
//! connection to the package declaring its connection type, an entry to the one
//! declaring its extension type, a route to the one declaring its handler, a binding
//! to the one declaring its executor. Each package that owns an object is started for
//! `validate` alone, as the spec's offline validation says: a temporary state
//! directory (removed afterwards), no coordination store (its host calls are refused),
//! an empty `configure` (a dry run) that reports the KV layout as current so nothing
//! migrates,
//! and a 15 s start timeout. It is stopped once its objects are checked. A package
//! that cannot start refuses its objects with `extension_unavailable`; an object whose
//! type no package declares is `unknown_type`.
//!
//! Each binding's executor is also asked which connection secrets its config resolves
//! (kind `executor_secrets`), and each is held against the binding and the packages'
//! manifests here, where both are known: the connection must be one the binding names
//! (`connection` or one of `connections`), its type must declare the secret
//! (`provides.connections[].fields[]` with `secret: true`), and its `secret_refs` must
//! set it.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use protocol::config::Config;
use protocol::wire::{validate_kind, Call, KvLayout, SecretUse, ValidateParams, ValidateResult};
use protocol::{CallOptions, Handler};
use serde_json::Value;

use crate::discovery::{Discovery, Package};
use crate::process::{declared_kv_version, ExtensionProcess, ProcessSpec, SupervisorOptions};

/// How long a package may take to start, and each `validate` to answer.
pub const START_TIMEOUT: Duration = Duration::from_secs(15);

/// At most this many warnings are shown (the spec's cap).
pub const MAX_WARNINGS: usize = 8;

/// One finding about the configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    /// A JSON pointer into the configuration document.
    pub pointer: String,
    /// A stable code (`invalid_config`, `unknown_type`, `extension_unavailable`, ...).
    pub code: String,
    /// What is wrong, for the operator.
    pub message: String,
    /// A warning does not make the configuration invalid.
    pub warning: bool,
}

/// What an answer to `validate` is for.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Role {
    /// An object's check: its diagnostics and warnings are findings.
    Check,
    /// The mode the binding's resource config writes (kind `resource_mode`).
    ResourceMode(String),
    /// The mode the binding's executor config requests (kind `executor_mode`).
    ExecutorMode(String),
    /// The connection secrets the binding's executor config resolves (kind
    /// `executor_secrets`), by the binding's pointer.
    ExecutorSecrets(String),
}

/// One object a package validates.
#[derive(Debug, Clone)]
struct Object {
    pointer: String,
    params: ValidateParams,
    role: Role,
}

fn params(kind: &str, type_name: &str, name: &str, config: &Value) -> ValidateParams {
    ValidateParams {
        kind: kind.to_owned(),
        type_name: type_name.to_owned(),
        name: name.to_owned(),
        config: config.clone(),
        ..ValidateParams::default()
    }
}

/// The objects of `config`, grouped by the package that owns each; objects whose type
/// no package declares become `unknown_type` findings.
fn objects(
    config: &Config,
    discovery: &Discovery,
) -> (BTreeMap<String, Vec<Object>>, Vec<Finding>) {
    let mut owners: BTreeMap<(&str, &str), &str> = BTreeMap::new();
    for p in &discovery.packages {
        let pv = &p.manifest.provides;
        for t in &pv.connections {
            owners.insert((validate_kind::CONNECTION, &t.type_name), &p.name);
        }
        for t in &pv.extensions {
            owners.insert((validate_kind::EXTENSION, &t.type_name), &p.name);
        }
        for r in &pv.routes {
            owners.insert((validate_kind::ROUTE, &r.handler), &p.name);
        }
        for e in &pv.executors {
            owners.insert((validate_kind::EXECUTOR, &e.name), &p.name);
            // Asked of every executor: one that does not know the kind names none.
            owners.insert((validate_kind::EXECUTOR_SECRETS, &e.name), &p.name);
            if e.resource_mode {
                owners.insert((validate_kind::EXECUTOR_MODE, &e.name), &p.name);
            }
        }
        for t in &pv.tunnels {
            owners.insert((validate_kind::TUNNEL, &t.type_name), &p.name);
        }
        for t in &pv.sandboxes {
            owners.insert((validate_kind::SANDBOX, &t.type_name), &p.name);
        }
        for t in &pv.containers {
            owners.insert((validate_kind::CONTAINER, &t.type_name), &p.name);
        }
        for r in &pv.resources {
            owners.insert((validate_kind::RESOURCE, &r.type_name), &p.name);
            if r.mode_default {
                owners.insert((validate_kind::RESOURCE_MODE, &r.type_name), &p.name);
            }
        }
    }
    let mut by_package: BTreeMap<String, Vec<Object>> = BTreeMap::new();
    let mut unknown = Vec::new();
    let mut untyped = Vec::new();
    let mut add = |pointer: String, what: &str, params: ValidateParams, role: Role| match owners
        .get(&(params.kind.as_str(), params.type_name.as_str()))
    {
        Some(owner) => by_package
            .entry((*owner).to_owned())
            .or_default()
            .push(Object {
                pointer,
                params,
                role,
            }),
        // A mode nobody answers names no mode: no finding.
        None if role != Role::Check => {}
        None => unknown.push(Finding {
            pointer,
            code: "unknown_type".into(),
            message: format!(
                "no installed or bundled extension provides the {what} {:?}",
                params.type_name
            ),
            warning: false,
        }),
    };
    if let Some(t) = config
        .settings
        .webhooks
        .tunnel
        .as_ref()
        .filter(|t| !t.provider.is_empty())
    {
        add(
            "/settings/webhooks/tunnel/provider".to_owned(),
            "tunnel provider",
            params(validate_kind::TUNNEL, &t.provider, "", &t.run_config()),
            Role::Check,
        );
    }
    for (i, c) in config.connections.iter().enumerate() {
        if c.connection_type.is_empty() {
            continue; // Config::problems names it
        }
        add(
            format!("/connections/{i}/type"),
            "connection type",
            params(
                validate_kind::CONNECTION,
                &c.connection_type,
                &c.name,
                &c.config,
            ),
            Role::Check,
        );
    }
    for (i, s) in config.scopes.iter().enumerate() {
        for (j, e) in s.entries.iter().enumerate() {
            if e.entry_type.is_empty() {
                continue;
            }
            add(
                format!("/scopes/{i}/entries/{j}/type"),
                "entry type",
                params(validate_kind::EXTENSION, &e.entry_type, &e.name, &e.config),
                Role::Check,
            );
        }
        for (j, r) in s.routes.iter().enumerate() {
            if r.handler.is_empty() {
                continue;
            }
            add(
                format!("/scopes/{i}/routes/{j}/handler"),
                "route handler",
                params(validate_kind::ROUTE, &r.handler, "", &r.config),
                Role::Check,
            );
        }
        for (j, b) in s.bindings.iter().enumerate() {
            let Some(executor) = b.get("executor").and_then(Value::as_str) else {
                continue;
            };
            let name = b.get("name").and_then(Value::as_str).unwrap_or_default();
            let at = format!("/scopes/{i}/bindings/{j}");
            let exec_config = b.get("config").unwrap_or(&Value::Null);
            add(
                format!("{at}/executor"),
                "executor",
                params(validate_kind::EXECUTOR, executor, name, exec_config),
                Role::Check,
            );
            add(
                format!("{at}/executor"),
                "executor",
                params(validate_kind::EXECUTOR_SECRETS, executor, name, exec_config),
                Role::ExecutorSecrets(at.clone()),
            );
            if let Some(sandbox) = b.get("sandbox") {
                match sandbox.get("type").and_then(Value::as_str) {
                    Some(stype) => add(
                        format!("{at}/sandbox/type"),
                        "sandbox type",
                        params(
                            validate_kind::SANDBOX,
                            stype,
                            name,
                            sandbox.get("config").unwrap_or(&Value::Null),
                        ),
                        Role::Check,
                    ),
                    None => untyped.push(Finding {
                        pointer: format!("{at}/sandbox/type"),
                        code: "invalid_config".into(),
                        message: "a binding's sandbox needs a type (the sandbox provider, srt)"
                            .into(),
                        warning: false,
                    }),
                }
            }
            if let Some(container) = b.get("container") {
                match container.get("type").and_then(Value::as_str) {
                    Some(ctype) => add(
                        format!("{at}/container/type"),
                        "container type",
                        params(
                            validate_kind::CONTAINER,
                            ctype,
                            name,
                            container.get("config").unwrap_or(&Value::Null),
                        ),
                        Role::Check,
                    ),
                    None => untyped.push(Finding {
                        pointer: format!("{at}/container/type"),
                        code: "invalid_config".into(),
                        message:
                            "a binding's container needs a type (the container provider, docker)"
                                .into(),
                        warning: false,
                    }),
                }
            }
            let Some(resource) = b.get("resource") else {
                continue;
            };
            let Some(rtype) = resource.get("type").and_then(Value::as_str) else {
                untyped.push(Finding {
                    pointer: format!("{at}/resource/type"),
                    code: "invalid_config".into(),
                    message: "a binding's resource needs a type (the resource provider, git)"
                        .into(),
                    warning: false,
                });
                continue;
            };
            let rconfig = resource.get("config").unwrap_or(&Value::Null);
            add(
                format!("{at}/resource/type"),
                "resource type",
                params(validate_kind::RESOURCE, rtype, name, rconfig),
                Role::Check,
            );
            // The workspace checks: the mode the resource writes against the one the
            // executor requests (config check's mode warning).
            add(
                format!("{at}/resource/type"),
                "resource type",
                params(validate_kind::RESOURCE_MODE, rtype, name, rconfig),
                Role::ResourceMode(at.clone()),
            );
            add(
                format!("{at}/executor"),
                "executor",
                params(validate_kind::EXECUTOR_MODE, executor, name, exec_config),
                Role::ExecutorMode(at.clone()),
            );
        }
    }
    unknown.extend(untyped);
    (by_package, unknown)
}

/// `/a/b/type` → `/a/b/config`, then the diagnostic's own path inside the config.
fn config_pointer(object_pointer: &str, path: &str) -> String {
    let base = match object_pointer.rsplit_once('/') {
        Some((parent, _)) => format!("{parent}/config"),
        None => "/config".to_owned(),
    };
    if path.is_empty() {
        base
    } else if path.starts_with('/') {
        format!("{base}{path}")
    } else {
        format!("{base}/{}", path.replace('~', "~0").replace('/', "~1"))
    }
}

/// The host side of an offline package: it has no store, so every call is refused.
struct NoStore;

impl Handler for NoStore {
    fn call(
        &self,
        request: protocol::Request,
    ) -> protocol::BoxFuture<Result<protocol::Reply, protocol::RpcError>> {
        let method = request.method;
        Box::pin(async move {
            Err(protocol::RpcError::new(
                protocol::Code::Unsupported,
                format!("{method}: offline validation has no coordination store"),
            ))
        })
    }
}

/// Check `config` with the packages of `discovery`, each started under a temporary
/// directory below `scratch` (removed before this returns). Answers the findings,
/// errors and at most [`MAX_WARNINGS`] warnings, in document order per package.
pub async fn validate(config: &Config, discovery: &Discovery, scratch: &Path) -> Vec<Finding> {
    let (by_package, mut findings) = objects(config, discovery);
    let mut warnings = 0;
    // Each binding's (resource mode, executor mode), by the binding's pointer.
    let mut modes: BTreeMap<String, (String, String)> = BTreeMap::new();
    // The secrets each binding's executor config resolves, by the binding's pointer.
    let mut secrets: Vec<(String, Vec<SecretUse>)> = Vec::new();
    for (name, objects) in by_package {
        let Some(package) = discovery.package(&name) else {
            continue;
        };
        let state = scratch.join(format!("validate-{name}"));
        let result = validate_with(package, &objects, &state).await;
        let _ = std::fs::remove_dir_all(&state);
        match result {
            Ok(answers) => {
                for (object, answer) in objects.iter().zip(answers) {
                    match (&object.role, answer) {
                        (Role::ResourceMode(at), Ok(r)) => {
                            modes.entry(at.clone()).or_default().0 = r.mode.unwrap_or_default();
                        }
                        (Role::ExecutorMode(at), Ok(r)) => {
                            modes.entry(at.clone()).or_default().1 = r.mode.unwrap_or_default();
                        }
                        (Role::ExecutorSecrets(at), Ok(r)) => {
                            secrets.push((at.clone(), r.secrets));
                        }
                        // A failed mode or secrets call names none.
                        (
                            Role::ResourceMode(_)
                            | Role::ExecutorMode(_)
                            | Role::ExecutorSecrets(_),
                            Err(_),
                        ) => {}
                        (Role::Check, Ok(r)) => {
                            for d in r.diagnostics {
                                findings.push(Finding {
                                    pointer: config_pointer(&object.pointer, &d.path),
                                    code: d.code,
                                    message: d.message,
                                    warning: false,
                                });
                            }
                            for w in r.warnings {
                                warnings += 1;
                                if warnings > MAX_WARNINGS {
                                    continue;
                                }
                                findings.push(Finding {
                                    pointer: config_pointer(&object.pointer, ""),
                                    code: "warning".into(),
                                    message: w.chars().take(300).collect(),
                                    warning: true,
                                });
                            }
                        }
                        (Role::Check, Err(why)) => findings.push(Finding {
                            pointer: object.pointer.clone(),
                            code: "extension_unavailable".into(),
                            message: format!("extension {name} could not check it: {why}"),
                            warning: false,
                        }),
                    }
                }
            }
            Err(why) => {
                for object in objects.iter().filter(|o| o.role == Role::Check) {
                    findings.push(Finding {
                        pointer: object.pointer.clone(),
                        code: "extension_unavailable".into(),
                        message: format!("extension {name} cannot start: {why}"),
                        warning: false,
                    });
                }
            }
        }
    }
    for (at, uses) in secrets {
        findings.extend(secret_findings(config, discovery, &at, &uses));
    }
    for (at, (resource, executor)) in modes {
        if let Some(message) = sandbox_workspace(config, &at, &resource, &executor) {
            findings.push(Finding {
                pointer: format!("{at}/sandbox"),
                code: "sandbox_workspace".into(),
                message,
                warning: false,
            });
        }
        if let Some(message) = mode_warning(&resource, &executor) {
            warnings += 1;
            if warnings <= MAX_WARNINGS {
                findings.push(Finding {
                    pointer: format!("{at}/resource/config/mode"),
                    code: "warning".into(),
                    message,
                    warning: true,
                });
            }
        }
    }
    findings
}

/// What is wrong with the secrets `uses` the executor config of the binding at `at`
/// resolves: a connection the binding does not name, one not defined, a secret its
/// type does not declare, or one its `secret_refs` do not set. A connection whose
/// type no package declares is left to that connection's own `unknown_type`.
fn secret_findings(
    config: &Config,
    discovery: &Discovery,
    at: &str,
    uses: &[SecretUse],
) -> Vec<Finding> {
    let Some(binding) = binding_at(config, at) else {
        return Vec::new();
    };
    let own = binding
        .get("connection")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let more = protocol::config::binding_connections(binding).unwrap_or_default();
    let mut out = Vec::new();
    for u in uses {
        let mut refuse = |code: &str, message: String| {
            out.push(Finding {
                pointer: format!("{at}/config{}", u.path),
                code: code.into(),
                message,
                warning: false,
            })
        };
        let name = if u.connection.is_empty() {
            own
        } else {
            u.connection.as_str()
        };
        if name.is_empty() {
            refuse(
                "unbound_connection",
                format!(
                    "the secret {:?} is taken from the binding's connection, and the binding names none",
                    u.secret
                ),
            );
            continue;
        }
        if name != own && !more.iter().any(|c| c == name) {
            refuse(
                "unbound_connection",
                format!(
                    "connection {name:?} is not one the binding names (its connection or connections)"
                ),
            );
            continue;
        }
        let Some(c) = config.connection(name) else {
            refuse(
                "unbound_connection",
                format!("no connection is named {name:?}"),
            );
            continue;
        };
        let ctype = &c.connection_type;
        let Some(declared) = discovery.packages.iter().find_map(|p| {
            p.manifest
                .provides
                .connections
                .iter()
                .find(|t| &t.type_name == ctype)
        }) else {
            continue;
        };
        let names: Vec<&str> = declared
            .fields
            .iter()
            .filter(|f| f.secret)
            .map(|f| f.name.as_str())
            .collect();
        if !names.contains(&u.secret.as_str()) {
            let its = if names.is_empty() {
                "its type declares no secrets".to_owned()
            } else {
                format!("its secrets are {}", names.join(", "))
            };
            refuse(
                "undeclared_secret",
                format!(
                    "connection {name:?} (type {ctype}) has no secret {:?}; {its}",
                    u.secret
                ),
            );
        } else if !c.secret_refs.contains_key(&u.secret) {
            refuse(
                "missing_secret_ref",
                format!(
                    "connection {name:?} sets no secret_refs.{} (`env:NAME` or `file:/path`), so no run can resolve it",
                    u.secret
                ),
            );
        }
    }
    out
}

/// A sandboxed binding (at `at`) whose workspace mode shares writable state with
/// other Works (`shared`: one checkout for every Work of the binding) is refused:
/// its sandbox would let one Work's command write another's workspace.
fn sandbox_workspace(config: &Config, at: &str, resource: &str, executor: &str) -> Option<String> {
    let binding = binding_at(config, at)?;
    binding.get("sandbox")?;
    let mode = if executor.is_empty() {
        resource
    } else {
        executor
    };
    (mode == "shared").then(|| {
        "a sandboxed binding's workspace must not share writable state with other Works: mode \"shared\" gives every Work one checkout; use work or fresh (clone)".to_owned()
    })
}

/// The binding at `/scopes/<i>/bindings/<j>`.
fn binding_at<'a>(config: &'a Config, at: &str) -> Option<&'a Value> {
    let mut parts = at.trim_start_matches('/').split('/');
    let (Some("scopes"), Some(i), Some("bindings"), Some(j)) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return None;
    };
    let scope = config.scopes.get(i.parse::<usize>().ok()?)?;
    scope.bindings.get(j.parse::<usize>().ok()?)
}

/// The mode warning: the resource writes a mode the executor's own request
/// overrides (`clone` is `fresh`).
fn mode_warning(resource: &str, executor: &str) -> Option<String> {
    let norm = |m: &str| if m == "clone" { "fresh" } else { m }.to_owned();
    if resource.is_empty() || executor.is_empty() || norm(resource) == norm(executor) {
        return None;
    }
    Some(format!(
        "the resource's mode {resource:?} never applies: the executor requests {executor:?} (its workspace_mode), which wins; set the same mode in both, or drop the resource's"
    ))
}

/// Start `package` offline, ask `validate` for each object, stop it.
async fn validate_with(
    package: &Package,
    objects: &[Object],
    state: &Path,
) -> Result<Vec<Result<ValidateResult, String>>, String> {
    let mut spec = ProcessSpec::new(
        &package.name,
        &package.dir,
        package.manifest.command.clone(),
        package.manifest_json.clone(),
        state,
    );
    // Offline: the state directory is temporary, and so is the log.
    spec.state_dir = state.join("state");
    spec.log_path = state.join("extension.log");
    // An empty configure, marked as a dry run: nothing is set up for real.
    let configuration = crate::configuration::Configuration::new(Some(package.manifest.clone()));
    configuration.set(
        protocol::wire::ConfigureParams {
            dry_run: true,
            ..Default::default()
        },
        BTreeMap::new(),
    );
    let opts = SupervisorOptions {
        configuration: std::sync::Arc::new(configuration),
        start_timeout: START_TIMEOUT,
        handler: std::sync::Arc::new(NoStore),
        ..SupervisorOptions::default()
    };
    let process = ExtensionProcess::spawn(&spec, &opts)
        .await
        .map_err(|e| e.to_string())?;
    let declared = declared_kv_version(&package.manifest_json);
    let started = process
        .start_up(
            &spec,
            &opts,
            KvLayout {
                stored: declared,
                declared,
            },
        )
        .await;
    if let Err(e) = started {
        let _ = process.stop(&opts).await;
        return Err(with_log(e.to_string(), &spec.log_path));
    }
    let mut answers = Vec::with_capacity(objects.len());
    for object in objects {
        let call = CallOptions {
            timeout: Some(START_TIMEOUT),
            ..CallOptions::default()
        };
        let answer = match process
            .peer()
            .call_with(ValidateParams::METHOD, &object.params, call)
            .await
        {
            Ok(v) => serde_json::from_value::<ValidateResult>(v)
                .map_err(|e| format!("its answer does not decode: {e}")),
            Err(e) => Err(e.to_string()),
        };
        answers.push(answer);
    }
    let _ = process.stop(&opts).await;
    Ok(answers)
}

/// `why`, with the last line the package wrote to its log, if any.
fn with_log(why: String, log: &PathBuf) -> String {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    match text.lines().rev().find(|l| !l.trim().is_empty()) {
        Some(last) => format!("{why} (its last log line: {})", last.trim()),
        None => why,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_mode_warning_names_both_modes() {
        assert_eq!(mode_warning("", "work"), None);
        assert_eq!(mode_warning("work", ""), None);
        assert_eq!(mode_warning("fresh", "clone"), None);
        let w = mode_warning("shared", "work").unwrap_or_default();
        assert!(w.contains("\"shared\"") && w.contains("\"work\""), "{w}");
    }

    #[test]
    fn a_secret_must_be_declared_by_a_connection_the_binding_names() {
        #![allow(clippy::unwrap_used)]
        let manifest = |json: &str| {
            let m = protocol::manifest::parse_manifest(json.as_bytes()).unwrap();
            crate::discovery::Package {
                name: m.name.clone(),
                dir: PathBuf::from("/x"),
                origin: crate::discovery::Origin::Bundled,
                manifest: m,
                manifest_json: serde_json::from_str(json).unwrap(),
            }
        };
        let discovery = Discovery {
            packages: vec![manifest(
                r#"{"protocol":[1],"name":"cc","version":"1","command":["x"],
                "provides":{"connections":[{"type":"cc","fields":[
                    {"name":"api_key","secret":true},{"name":"region"}]}],
                    "executors":[{"name":"cc"}]}}"#,
            )],
            reports: Vec::new(),
        };
        let config = Config::parse(&serde_json::json!({
            "connections": [
                {"name": "key", "type": "cc", "secret_refs": {"api_key": "env:K"}},
                {"name": "bare", "type": "cc"},
                {"name": "gh", "type": "github", "secret_refs": {"token": "env:T"}}],
            "scopes": [{"id": "a", "bindings": [
                {"name": "b", "executor": "cc", "connection": "gh", "connections": ["key", "bare"]},
                {"name": "alone", "executor": "cc"}]}]}))
        .unwrap();
        let secret = |path: &str, connection: &str, secret: &str| SecretUse {
            path: path.into(),
            connection: connection.into(),
            secret: secret.into(),
        };
        let uses = [
            secret("/secret_env/OK", "key", "api_key"),
            secret("/secret_env/TYPO", "key", "api_kye"),
            secret("/secret_env/CONFIG", "key", "region"),
            secret("/secret_env/UNSET", "bare", "api_key"),
            secret("/secret_env/OTHER", "elsewhere", "api_key"),
            // The github type is no package's here: its secrets are not judged.
            secret("/secret_env/GH", "", "whatever"),
        ];
        let found = secret_findings(&config, &discovery, "/scopes/0/bindings/0", &uses);
        let got: Vec<(&str, &str, &str)> = found
            .iter()
            .map(|f| (f.pointer.as_str(), f.code.as_str(), f.message.as_str()))
            .collect();
        assert_eq!(
            got,
            vec![
                (
                    "/scopes/0/bindings/0/config/secret_env/TYPO",
                    "undeclared_secret",
                    "connection \"key\" (type cc) has no secret \"api_kye\"; its secrets are api_key"
                ),
                (
                    "/scopes/0/bindings/0/config/secret_env/CONFIG",
                    "undeclared_secret",
                    "connection \"key\" (type cc) has no secret \"region\"; its secrets are api_key"
                ),
                (
                    "/scopes/0/bindings/0/config/secret_env/UNSET",
                    "missing_secret_ref",
                    "connection \"bare\" sets no secret_refs.api_key (`env:NAME` or `file:/path`), so no run can resolve it"
                ),
                (
                    "/scopes/0/bindings/0/config/secret_env/OTHER",
                    "unbound_connection",
                    "connection \"elsewhere\" is not one the binding names (its connection or connections)"
                ),
            ]
        );
        assert!(found.iter().all(|f| !f.warning));
        // A plain name on a binding with no connection.
        let found = secret_findings(
            &config,
            &discovery,
            "/scopes/0/bindings/1",
            &[secret("/secret_env/K", "", "api_key")],
        );
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].code, "unbound_connection");
    }

    #[test]
    fn pointers_land_inside_the_object_config() {
        assert_eq!(
            config_pointer("/scopes/0/entries/1/type", "/secret"),
            "/scopes/0/entries/1/config/secret"
        );
        assert_eq!(
            config_pointer("/scopes/0/entries/1/type", "a/b"),
            "/scopes/0/entries/1/config/a~1b"
        );
        assert_eq!(
            config_pointer("/connections/2/type", ""),
            "/connections/2/config"
        );
    }
}
