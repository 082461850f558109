//! Who an extension's process is (its [`Identity`]: name, manifest, scopes,
//! connections), bound by the host at start and rebound on reconfiguration
//! ([`BoundIdentity`]), and the write checks that follow from it: its namespaces,
//! its sources, its families and its payload schemas. The host's handler
//! ([`crate::host`]) and ingress ([`crate::ingress`]) both check against it.

use std::sync::{Arc, RwLock};

use protocol::manifest::Manifest;
use protocol::manifest::UnreadableSchema;
use protocol::wire::Emission;
use protocol::{Code, RpcError};

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
