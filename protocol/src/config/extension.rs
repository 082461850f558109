//! What one extension is configured with ([`Config::for_extension`]) and the read-only
//! view a package's `check.run` receives ([`Config::check_view`]).

use std::collections::BTreeSet;

use serde_json::Value;

use super::scopes::binding_connections;
use super::Config;
use crate::manifest::Manifest;
use crate::wire;
use crate::wire::ConfigureParams;

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

impl Config {
    /// The read-only view of this configuration a package's `check.run` receives
    /// (spec: check.run's `config`): each enabled scope that uses the package (an
    /// entry of its types, a route on its handlers, a binding on its executors,
    /// resource, sandbox or container types, or granted one of its operations) with those routes,
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
        let containers: BTreeSet<&str> =
            pv.containers.iter().map(|s| s.type_name.as_str()).collect();
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
                let own_container = binding
                    .container
                    .as_ref()
                    .and_then(|s| s.get("type"))
                    .and_then(Value::as_str)
                    .is_some_and(|t| containers.contains(t));
                if !(own_executor || own_resource || granted || own_sandbox || own_container) {
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
