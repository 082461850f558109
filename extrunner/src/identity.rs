//! Who an extension's process is (its [`Identity`]: name, manifest, scopes,
//! connections), bound by the host at start and rebound on reconfiguration
//! ([`BoundIdentity`]), and the write checks that follow from it: its namespaces,
//! its sources, its families and its payload schemas; and the payload read gate of
//! its manifest ([`gate_event`]). The host's handler ([`crate::host`]), ingress
//! ([`crate::ingress`]), the renderings ([`crate::render`]) and `ext.call`
//! ([`crate::service`]) all check against it.

use std::sync::{Arc, RwLock};

use protocol::manifest::Manifest;
use protocol::manifest::{PayloadStatus, UnreadableSchema};
use protocol::wire::{self, Emission};
use protocol::{Code, RpcError};
use serde_json::Value;

/// The KV namespace reserved for the host (the extensions' KV layout versions).
pub const RESERVED_NAMESPACE: &str = "core.extensions";

/// The identity an extension's process is bound to, fixed by the host at start.
/// The extension never supplies any of it; a restart reuses it.
#[derive(Debug, Clone)]
pub struct Identity {
    /// The extension's name (the manifest's).
    pub name: String,
    /// Its manifest.
    pub manifest: Manifest,
    /// The scopes whose configuration uses the extension.
    pub scopes: Vec<String>,
    /// The connections bound to its configured entries.
    pub connections: Vec<String>,
    /// Those it may resolve outside any scope: the tunnel's, when it runs the tunnel.
    pub unscoped: Vec<String>,
}

impl Identity {
    /// The identity of `manifest`'s extension, named after the manifest.
    pub fn new(manifest: Manifest, scopes: Vec<String>, connections: Vec<String>) -> Identity {
        Identity {
            name: manifest.name.clone(),
            manifest,
            scopes,
            connections,
            unscoped: Vec::new(),
        }
    }

    /// The families the manifest declares.
    pub fn families(&self) -> Vec<String> {
        self.manifest
            .provides
            .families
            .iter()
            .map(|f| f.name.clone())
            .collect()
    }

    /// Whether `scope` is one whose configuration uses the extension.
    pub fn in_scope(&self, scope: &str) -> bool {
        !scope.is_empty() && self.scopes.iter().any(|s| s == scope)
    }
}

/// An [`Identity`] shared by the host of every run of one extension. A
/// reconfiguration rebinds its scopes and connections; its name and manifest
/// never change, so a restart cannot widen what the process may do.
#[derive(Debug)]
pub struct BoundIdentity {
    current: RwLock<Arc<Identity>>,
}

impl BoundIdentity {
    /// Bind `identity`.
    pub fn new(identity: Identity) -> Arc<BoundIdentity> {
        Arc::new(BoundIdentity {
            current: RwLock::new(Arc::new(identity)),
        })
    }

    /// The identity as bound now.
    pub fn current(&self) -> Arc<Identity> {
        self.current
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone()
    }

    /// After a reconfiguration: the scopes and connections the new configuration
    /// binds to the extension. Calls already being served keep the identity they
    /// started with.
    pub fn rebind(&self, scopes: Vec<String>, connections: Vec<String>) {
        let mut current = self
            .current
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let mut next = Identity::clone(&current);
        next.scopes = scopes;
        next.connections = connections;
        *current = Arc::new(next);
    }

    /// The connections the package may resolve outside any scope (the tunnel's).
    pub fn rebind_unscoped(&self, unscoped: Vec<String>) {
        let mut current = self
            .current
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let mut next = Identity::clone(&current);
        next.unscoped = unscoped;
        *current = Arc::new(next);
    }
}

/// The namespace `namespace` addresses for the extension `name`: empty is its
/// name; otherwise it must be `name` or `name.` + suffix, never the host's
/// reserved namespace. Anything else is `unauthorized`.
pub fn own_namespace(name: &str, namespace: &str) -> Result<String, RpcError> {
    if namespace.is_empty() {
        return Ok(name.to_string());
    }
    let reserved = namespace == RESERVED_NAMESPACE
        || namespace
            .strip_prefix(RESERVED_NAMESPACE)
            .is_some_and(|rest| rest.starts_with('.'));
    let own = namespace == name
        || namespace
            .strip_prefix(name)
            .and_then(|rest| rest.strip_prefix('.'))
            .is_some_and(|rest| !rest.is_empty());
    if reserved || !own {
        return Err(RpcError::new(
            Code::Unauthorized,
            format!("namespace {namespace:?} is not {name:?}'s (only {name:?} or \"{name}.…\"): nothing was applied"),
        ));
    }
    Ok(namespace.to_string())
}

/// Whether `source` is the extension's: `name` or `name/` + suffix.
pub fn own_source(name: &str, source: &str) -> bool {
    source == name
        || source
            .strip_prefix(name)
            .and_then(|rest| rest.strip_prefix('/'))
            .is_some_and(|rest| !rest.is_empty())
}

/// Whether `event_type` is of one of `manifest`'s declared families (the family
/// itself, or `family.` + suffix).
pub fn declared_family(manifest: &Manifest, event_type: &str) -> bool {
    manifest.provides.families.iter().any(|f| {
        !f.name.is_empty()
            && (event_type == f.name
                || event_type
                    .strip_prefix(f.name.as_str())
                    .is_some_and(|rest| rest.starts_with('.')))
    })
}

/// The write checks of one Emission: its type of a declared family, its source
/// the extension's, its payload absent or the current version of one of its own
/// schemas, and a root Emission's scope one of the extension's.
pub fn check_emission(identity: &Identity, emission: &Emission) -> Result<(), RpcError> {
    let name = identity.name.as_str();
    let t = emission.event_type.as_str();
    if !declared_family(&identity.manifest, t) {
        let own = t == name
            || t.strip_prefix(name)
                .is_some_and(|rest| rest.starts_with('.'));
        let (code, why) = if own {
            (Code::Undeclared, "a family the manifest does not declare")
        } else {
            (Code::Unauthorized, "not of one of its families")
        };
        return Err(RpcError::new(
            code,
            format!("event type {t:?} is {why}: nothing was applied"),
        ));
    }
    if !own_source(name, &emission.source) {
        return Err(RpcError::new(
            Code::Unauthorized,
            format!(
                "source {:?} is not {name:?}'s (only {name:?} or \"{name}/…\"): nothing was applied",
                emission.source
            ),
        ));
    }
    check_payload(&identity.manifest, &emission.payload.schema)?;
    if emission.parent_id.is_empty() && !identity.in_scope(&emission.scope_id) {
        return Err(RpcError::new(
            Code::Unauthorized,
            format!(
                "scope {:?} is not one whose configuration uses {name:?}: nothing was applied",
                emission.scope_id
            ),
        ));
    }
    Ok(())
}

/// Writes are strict: a payload must be absent or the current version of one of
/// the extension's schemas, otherwise `unreadable_schema`.
pub fn check_payload(manifest: &Manifest, schema: &str) -> Result<(), RpcError> {
    manifest
        .check_write(Some(schema))
        .map_err(|e| RpcError::authored(UnreadableSchema::CODE, e.to_string()))
}

/// The payload read gate, applied before any call that decides on an Event
/// (`route.match`, `dependency.filter`, `event.render`): an Event whose payload
/// is foreign, current or upcast passes verbatim; one that is retired, newer or
/// undeclared is withheld (`None`). The schema is read from `payload.schema` (the
/// wire Event) or, failing that, `schema` (storaged's envelope).
pub fn gate_event(manifest: &Manifest, event: &Value) -> Option<Value> {
    if event_payload_status(manifest, event).readable() {
        Some(event.clone())
    } else {
        None
    }
}

/// [`gate_event`] for a typed wire Event.
pub fn gate_wire_event(manifest: &Manifest, event: wire::Event) -> Option<wire::Event> {
    manifest
        .payload_status(Some(&event.payload.schema))
        .readable()
        .then_some(event)
}

/// How the payload of `event` (JSON) stands for `manifest`.
pub fn event_payload_status(manifest: &Manifest, event: &Value) -> PayloadStatus {
    let schema = event
        .get("payload")
        .and_then(|p| p.get("schema"))
        .and_then(Value::as_str)
        .or_else(|| event.get("schema").and_then(Value::as_str));
    manifest.payload_status(schema)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use serde_json::json;

    fn manifest() -> Manifest {
        protocol::manifest::parse_manifest(
            br#"{"protocol": [1], "name": "notes", "version": "1.0.0", "command": ["bin/notes"],
                "provides": {"families": [{"name": "notes.note", "re_derivable": true}],
                "schemas": [{"base": "notes.note", "versions": [2, 3]}]}}"#,
        )
        .unwrap()
    }

    fn event(schema: Option<&str>) -> Value {
        let mut e =
            json!({"id": "evt_1", "type": "notes.note.added", "payload": {"data": {"a": 1}}});
        if let Some(s) = schema {
            e["payload"]["schema"] = json!(s);
        }
        e
    }

    #[test]
    fn gate_passes_foreign_current_and_upcast_verbatim() {
        let m = manifest();
        for schema in [
            None,
            Some("github.issue.v9"),
            Some("notes.note.v3"),
            Some("notes.note.v2"),
        ] {
            let e = event(schema);
            assert_eq!(gate_event(&m, &e), Some(e.clone()), "{schema:?}");
        }
        // storaged's envelope keeps the schema at the top.
        let stored = json!({"id": "evt_2", "schema": "notes.note.v3", "payload": {"a": 1}});
        assert_eq!(gate_event(&m, &stored), Some(stored.clone()));
    }

    #[test]
    fn gate_withholds_retired_newer_and_undeclared() {
        let m = manifest();
        for schema in [
            "notes.note.v1",
            "notes.note.v4",
            "notes.other.v1",
            "notes.note",
        ] {
            assert_eq!(gate_event(&m, &event(Some(schema))), None, "{schema}");
        }
        let stored = json!({"id": "evt_2", "schema": "notes.note.v9"});
        assert_eq!(gate_event(&m, &stored), None);
        let typed = wire::Event {
            payload: wire::Payload {
                schema: "notes.note.v1".into(),
                data: Value::Null,
            },
            ..wire::Event::default()
        };
        assert!(gate_wire_event(&m, typed.clone()).is_none());
        let current = wire::Event {
            payload: wire::Payload {
                schema: "notes.note.v3".into(),
                data: Value::Null,
            },
            ..typed
        };
        assert!(gate_wire_event(&m, current).is_some());
    }

    #[test]
    fn namespaces_and_sources() {
        assert_eq!(own_namespace("notes", "").unwrap(), "notes");
        assert_eq!(own_namespace("notes", "notes.x").unwrap(), "notes.x");
        for bad in ["notesx", "notes.", "github", "core.extensions", "core"] {
            assert!(own_namespace("notes", bad)
                .unwrap_err()
                .is(Code::Unauthorized));
        }
        assert!(own_source("notes", "notes") && own_source("notes", "notes/a"));
        assert!(!own_source("notes", "notes/") && !own_source("notes", "notesx"));
    }
}
