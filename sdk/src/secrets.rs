//! A package's cache of connection secrets resolved through `secret.resolve`, per
//! (scope, connection, name), for one configuration: `configure` clears it
//! ([`SecretCache::clear`]), and a resolve that started before a clear does not
//! cache what it got (the generation moved on).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use protocol::wire::SecretResolveParams;
use protocol::{Code, RpcError};

#[derive(Default)]
struct Inner {
    generation: u64,
    values: HashMap<(String, String, &'static str), Arc<str>>,
}

/// The cache; see the module.
#[derive(Default)]
pub struct SecretCache {
    inner: Mutex<Inner>,
}

impl SecretCache {
    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Drops every cached secret (a new configuration is in force).
    pub fn clear(&self) {
        let mut inner = self.lock();
        inner.generation += 1;
        inner.values.clear();
    }

    /// The configuration generation the cache is at: what a caller that keeps
    /// something made from a secret compares before keeping it.
    pub fn generation(&self) -> u64 {
        self.lock().generation
    }

    /// Secret `name` of `connection` in `scope_id`: cached, or resolved through the
    /// host (and cached unless a clear came in between). An empty value is as none.
    /// The error never holds a secret.
    pub async fn get(
        &self,
        host: &crate::Host,
        scope_id: &str,
        connection: &str,
        name: &'static str,
    ) -> Result<Arc<str>, RpcError> {
        let key = (scope_id.to_string(), connection.to_string(), name);
        let generation = {
            let inner = self.lock();
            if let Some(v) = inner.values.get(&key) {
                return Ok(v.clone());
            }
            inner.generation
        };
        let resolved = host
            .secret_resolve(&SecretResolveParams {
                scope_id: scope_id.to_string(),
                connection: connection.to_string(),
                names: vec![name.to_string()],
            })
            .await
            .map_err(|e| {
                RpcError::new(
                    Code::Unavailable,
                    format!("resolving {name} of connection {connection}: {e}"),
                )
            })?;
        let value: Arc<str> = resolved
            .values
            .get(name)
            .filter(|v| !v.is_empty())
            .map(|v| Arc::from(v.as_str()))
            .ok_or_else(|| {
                RpcError::new(
                    Code::Unauthorized,
                    format!("connection {connection} has no {name}"),
                )
            })?;
        let mut inner = self.lock();
        if inner.generation == generation {
            inner.values.insert(key, value.clone());
        }
        Ok(value)
    }
}
