//! What schedulerd knows of the suite: the configuration generation it routes and
//! starts by (`store.config_current`) and which package declares what
//! (`ext.registrations`): route handlers, entry types, executors and their pools,
//! toolbelt operations, tasks, and the surfaces called around runs and Waits.
//!
//! The router reads both again on `config.applied` and `ext.state`
//! ([`crate::router::Router::refresh_config`], `refresh_handlers`); the starter, the
//! toolbelt and the tasks read what it holds. A binding is looked up here by name
//! ([`Knowledge::binding`]), with the connections it names ([`binding_connections`]).

use std::collections::{HashMap, HashSet};

use busapi::ext::RegistrationsResponse;
use protocol::config::{Config, ScopeConfig};
use protocol::toolbelt::OperationGuidance;
use protocol::wire;
use serde_json::Value;

/// What schedulerd knows: the configuration and which extension serves what.
#[derive(Debug, Default)]
pub struct Knowledge {
    /// The configuration generation (document and hash).
    pub config: Option<(Config, String)>,
    /// Operation → the extension declaring it, with what an agent is told about it.
    pub operations: HashMap<String, (String, OperationGuidance)>,
    /// True once the configuration has been read (even if none is applied).
    pub config_loaded: bool,
    /// True once the extensions' registrations have been read.
    pub handlers_loaded: bool,
    /// Route handler → the extension declaring it.
    pub handlers: HashMap<String, String>,
    /// Entry type → the extension declaring it.
    pub types: HashMap<String, String>,
    /// Executor → the extension declaring it, and its pool (`""` or `jobs`).
    pub executors: HashMap<String, (String, String)>,
    /// The executors that advertise `inject`.
    pub injectable: HashSet<String>,
    /// Each extension's tasks: (extension, task, interval in seconds).
    pub tasks: Vec<(String, String, u64)>,
    /// Each extension's surfaces schedulerd calls around runs and Waits,
    /// with the scopes whose configuration uses it.
    pub surfaces: Vec<ExtensionSurfaces>,
    /// The agents' plugin extrunner wrote from every package's playbooks (its
    /// registrations' `playbook_dir`; empty for none): each run's `playbook_dir`.
    pub playbook_dir: String,
}

/// What schedulerd may call on one extension besides routes and executors.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ExtensionSurfaces {
    /// The extension.
    pub name: String,
    /// The scopes whose configuration uses it.
    pub scopes: Vec<String>,
    /// It adds an environment layer to runs in those scopes (`run.environment`).
    pub run_environment: bool,
    /// It is told when a run's segment ends (`segment.ended`).
    pub segment_end: bool,
    /// It filters the wakes of the Waits its wait operations plan (`dependency.filter`).
    pub dependency_filter: bool,
    /// It shows Work on its own surface (`work.annotate`).
    pub annotations: bool,
    /// It is asked about other packages' operation calls in its scopes
    /// (`operation.gate`).
    pub operation_gate: bool,
    /// It is asked before the first attempt of a Work in its scopes starts
    /// (`work.admit`).
    pub start_gate: bool,
}

/// Every connection `binding` names: `connection` first, then `connections`.
pub fn binding_connections(binding: &wire::Binding) -> Vec<String> {
    let mut out = Vec::new();
    if !binding.connection.is_empty() {
        out.push(binding.connection.clone());
    }
    for c in &binding.connections {
        if !c.is_empty() && !out.contains(c) {
            out.push(c.clone());
        }
    }
    out
}

/// The binding named `name` of `scope`, as configured (its JSON).
pub fn binding_in<'a>(scope: &'a ScopeConfig, name: &str) -> Option<&'a Value> {
    scope.bindings.iter().find(|b| b["name"] == name)
}

impl Knowledge {
    /// The running extensions whose configuration uses `scope` and that declare the
    /// surface `pick` selects.
    pub fn with_surface(
        &self,
        scope: &str,
        pick: impl Fn(&ExtensionSurfaces) -> bool,
    ) -> Vec<String> {
        self.surfaces
            .iter()
            .filter(|s| pick(s) && s.scopes.iter().any(|x| x == scope))
            .map(|s| s.name.clone())
            .collect()
    }

    /// The scope `scope_id` of the configuration applied, if any.
    pub fn scope(&self, scope_id: &str) -> Option<&ScopeConfig> {
        self.config.as_ref().and_then(|(c, _)| c.scope(scope_id))
    }

    /// The binding `name` of scope `scope_id` as configured now: `Err` says why
    /// there is none (no configuration, no such scope or binding, or one that does
    /// not read as a binding).
    pub fn binding(&self, scope_id: &str, name: &str) -> Result<wire::Binding, String> {
        let (config, _) = self
            .config
            .as_ref()
            .ok_or_else(|| "no configuration is applied".to_owned())?;
        let scope = config
            .scope(scope_id)
            .ok_or_else(|| format!("scope {scope_id:?} is not configured"))?;
        let raw = binding_in(scope, name)
            .ok_or_else(|| format!("scope {scope_id:?} has no binding {name:?}"))?;
        serde_json::from_value(raw.clone()).map_err(|e| format!("binding {name:?}: {e}"))
    }

    /// The configuration read from the store (`None`: none applied).
    pub fn set_config(&mut self, config: Option<(Config, String)>) {
        self.config = config;
        self.config_loaded = true;
    }

    /// Replace what the extensions declare with their registrations `r`.
    pub fn set_registrations(&mut self, r: RegistrationsResponse) {
        let mut handlers = HashMap::new();
        let mut types = HashMap::new();
        let mut executors = HashMap::new();
        let mut injectable = HashSet::new();
        let mut tasks = Vec::new();
        let mut operations = HashMap::new();
        let mut surfaces = Vec::new();
        for e in r.extensions {
            let name = e.name;
            let s = &e.surfaces;
            surfaces.push(ExtensionSurfaces {
                name: name.clone(),
                scopes: e.scopes,
                run_environment: s.run_environment,
                segment_end: s.segment_end,
                dependency_filter: s.dependency_filter,
                annotations: s.annotations,
                operation_gate: s.operation_gate,
                start_gate: s.start_gate,
            });
            for o in e.operations {
                let g = OperationGuidance {
                    name: o.name,
                    kind: o.kind,
                    summary: o.summary,
                    input: o.input,
                    guidance: o.guidance,
                };
                operations.insert(g.name.clone(), (name.clone(), g));
            }
            for h in e.handlers {
                handlers.insert(h, name.clone());
            }
            if e.state == "running" {
                for t in e.tasks {
                    if t.interval_s > 0 {
                        tasks.push((name.clone(), t.name, t.interval_s));
                    }
                }
            }
            for x in e.executors {
                executors.insert(x.name.clone(), (name.clone(), x.pool));
                if x.inject {
                    injectable.insert(x.name);
                }
            }
            for t in e.types {
                types.insert(t, name.clone());
            }
        }
        self.handlers = handlers;
        self.types = types;
        self.executors = executors;
        self.injectable = injectable;
        self.tasks = tasks;
        self.operations = operations;
        self.surfaces = surfaces;
        self.playbook_dir = r.playbook_dir;
        self.handlers_loaded = true;
    }

    /// The scope as `route.match` shows it to `owner`: its own entries only.
    pub fn scope_for(&self, scope_id: &str, owner: &str) -> Option<wire::Scope> {
        let s = self.scope(scope_id)?;
        let entries = s
            .entries
            .iter()
            .filter(|e| self.types.get(&e.entry_type).is_some_and(|o| o == owner))
            .map(|e| wire::Entry {
                scope_id: s.id.clone(),
                entry_type: e.entry_type.clone(),
                name: e.name.clone(),
                connection: e.connection.clone(),
                binding_connections: Vec::new(),
                config: e.config.clone(),
            })
            .collect();
        Some(wire::Scope {
            id: s.id.clone(),
            disabled: !s.enabled,
            entries,
            routes: s.routes.clone(),
            bindings: s
                .bindings
                .iter()
                .filter_map(|b| serde_json::from_value(b.clone()).ok())
                .collect(),
        })
    }

    /// The wait operation of `owner` a Wait it planned is filtered by: its only
    /// one (empty when it declares several, see docs/decisions.md); `None` when
    /// `owner` declares no `dependency_filter` (the Wait takes the event unasked).
    pub fn wait_filter(&self, owner: &str) -> Option<String> {
        let filters = self
            .surfaces
            .iter()
            .any(|s| s.name == owner && s.dependency_filter);
        if !filters {
            return None;
        }
        let mut waits = self
            .operations
            .iter()
            .filter(|(_, (ext, g))| ext == owner && g.kind == "wait")
            .map(|(name, _)| name.clone());
        Some(match (waits.next(), waits.next()) {
            (Some(only), None) => only,
            _ => String::new(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use busapi::ext::{ExecutorInfo, Registration, Surfaces, TaskInfo};

    #[test]
    fn registrations_become_knowledge() {
        let mut k = Knowledge::default();
        k.set_registrations(RegistrationsResponse {
            complete: true,
            playbook_dir: "/p".into(),
            extensions: vec![Registration {
                name: "shell".into(),
                state: "stopped".into(),
                scopes: vec!["s1".into()],
                surfaces: Surfaces {
                    segment_end: true,
                    ..Surfaces::default()
                },
                handlers: vec!["shell.route".into()],
                executors: vec![ExecutorInfo {
                    name: "shell".into(),
                    pool: "jobs".into(),
                    inject: true,
                }],
                tasks: vec![TaskInfo {
                    name: "sweep".into(),
                    interval_s: 60,
                }],
                ..Registration::default()
            }],
        });
        assert!(k.handlers_loaded);
        assert_eq!(k.handlers["shell.route"], "shell");
        assert_eq!(k.executors["shell"], ("shell".into(), "jobs".into()));
        assert!(k.injectable.contains("shell"));
        // A package that is not running runs no tasks.
        assert!(k.tasks.is_empty());
        assert_eq!(k.with_surface("s1", |s| s.segment_end), vec!["shell"]);
        assert!(k.with_surface("s2", |s| s.segment_end).is_empty());
        assert_eq!(k.playbook_dir, "/p");
    }

    #[test]
    fn a_binding_names_its_connections_once() {
        let b = wire::Binding {
            connection: "gh".into(),
            connections: vec!["gh".into(), "".into(), "slack".into()],
            ..wire::Binding::default()
        };
        assert_eq!(binding_connections(&b), vec!["gh", "slack"]);
    }
}
