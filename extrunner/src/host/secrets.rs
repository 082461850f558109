//! What the configuration grants the extension: the secrets of the connections bound
//! to it (`secret.resolve`) and its scopes' authorizations (`scope.authorize`).

use super::*;

/// The most secret names one `secret.resolve` may ask for.
pub const MAX_SECRET_NAMES: usize = 64;

impl Scoped<'_> {
    /// `scope.authorize`: asked only about one of the package's own scopes; answered
    /// from the configuration in force (`authorization.read_scopes`/`file_scopes`).
    pub(super) fn scope_authorize(
        &self,
        p: protocol::wire::ScopeAuthorizeParams,
    ) -> Result<protocol::wire::ScopeAuthorizeResult, RpcError> {
        if !self.identity.in_scope(&p.scope_id) {
            return Err(RpcError::new(
                Code::Unauthorized,
                format!(
                    "scope {:?} is not one whose configuration uses {:?}",
                    p.scope_id,
                    self.name()
                ),
            ));
        }
        let Some(access) = protocol::config::Access::parse(&p.access) else {
            return Err(RpcError::invalid_params(format!(
                "access is {:?}: read or file",
                p.access
            )));
        };
        Ok(
            match self
                .configuration
                .authorizes(&p.scope_id, &p.target_scope_id, access)
            {
                Ok(()) => protocol::wire::ScopeAuthorizeResult {
                    allowed: true,
                    reason: String::new(),
                },
                Err(why) => protocol::wire::ScopeAuthorizeResult {
                    allowed: false,
                    reason: why,
                },
            },
        )
    }

    pub(super) fn secret_resolve(
        &self,
        p: SecretResolveParams,
    ) -> Result<SecretResolveResult, RpcError> {
        // A connection of a scope that uses the package, or the tunnel's (asked with
        // no scope: the tunnel is the suite's).
        let scoped = self.identity.in_scope(&p.scope_id);
        let unscoped = p.scope_id.is_empty() && self.identity.unscoped.contains(&p.connection);
        if !(scoped || unscoped) || !self.identity.connections.contains(&p.connection) {
            return Err(RpcError::new(
                Code::Unauthorized,
                format!(
                    "connection {:?} in scope {:?} is not bound to {:?}'s entries or its executors' bindings",
                    p.connection,
                    p.scope_id,
                    self.name()
                ),
            ));
        }
        if p.names.len() > MAX_SECRET_NAMES {
            return Err(RpcError::invalid_params(format!(
                "{} secret names, over the limit of {MAX_SECRET_NAMES}",
                p.names.len()
            )));
        }
        let mut out = SecretResolveResult::default();
        for name in p.names {
            let Some(reference) = self.configuration.secret_ref(&p.connection, &name) else {
                return Err(RpcError::new(
                    Code::NotFound,
                    format!(
                        "connection {:?} has no secret {name:?} in its secret_refs",
                        p.connection
                    ),
                ));
            };
            // The reason names the reference, never the value.
            let value = protocol::config::resolve_secret_ref(&reference).map_err(|why| {
                RpcError::new(
                    Code::Unavailable,
                    format!(
                        "secret {name:?} of connection {:?} cannot be read: {why}",
                        p.connection
                    ),
                )
            })?;
            out.values.insert(name, value);
        }
        Ok(out)
    }
}
