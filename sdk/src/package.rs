//! What the packages with their own entry, route and connection types (`bitbucket`,
//! `jira`, `linear`, `slack`, `github`) each repeated in their `lib.rs`:
//!
//! - [`OwnTypes::validate`] serves `validate` for the package's own types: an
//!   entry's config (`extension`), a route's (`route`) and a connection's
//!   (`connection`), each problem a diagnostic coded `<package>_entry_invalid`,
//!   `<package>_route_invalid` or `<package>_connection_invalid` at the JSON
//!   pointer of the field. Other kinds and types are answered valid.
//! - [`Configured`] holds the entries and connections of the last `configure`,
//!   and finds a connection of the package's type.
//! - [`signed_webhook`] answers a `webhook.handle` request with the secret that
//!   signs it, or, when the secret cannot be had, logs why and answers that it is
//!   unavailable.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use protocol::wire::{
    validate_kind, Connection, Diagnostic, HttpAnswer, ValidateParams, ValidateResult,
    WebhookHandleResult,
};
use protocol::{Code, RpcError};
use serde_json::Value;

use crate::config::ConfigError;

/// A package's own types and how each one's config is checked.
#[derive(Clone, Copy)]
pub struct OwnTypes {
    /// The package's name: the entry, route handler and connection type it owns,
    /// and the prefix of its diagnostic codes.
    pub name: &'static str,
    /// An entry's config, described in one line when it is valid.
    pub entry: fn(&Value) -> Result<String, ConfigError>,
    /// A route's config, described in one line when it is valid.
    pub route: fn(&Value) -> Result<String, ConfigError>,
    /// The message of a route's config error.
    pub route_message: fn(&ConfigError) -> String,
    /// A connection's config.
    pub connection: fn(&Value) -> Result<(), ConfigError>,
}

impl OwnTypes {
    /// Serves `validate`: see the module.
    pub fn validate(&self, params: &ValidateParams) -> ValidateResult {
        let mut result = ValidateResult::default();
        if params.type_name != self.name {
            return result;
        }
        let diagnostic = |what: &str, message: String, e: ConfigError| Diagnostic {
            code: format!("{}_{what}_invalid", self.name),
            message,
            path: e.pointer,
        };
        match params.kind.as_str() {
            validate_kind::EXTENSION => match (self.entry)(&params.config) {
                Ok(describe) => result.describe.push(describe),
                Err(e) => {
                    let message = e.reason.clone();
                    result.diagnostics.push(diagnostic("entry", message, e));
                }
            },
            validate_kind::ROUTE => match (self.route)(&params.config) {
                Ok(describe) => result.describe.push(describe),
                Err(e) => {
                    let message = (self.route_message)(&e);
                    result.diagnostics.push(diagnostic("route", message, e));
                }
            },
            validate_kind::CONNECTION => {
                if let Err(e) = (self.connection)(&params.config) {
                    let message = e.reason.clone();
                    result
                        .diagnostics
                        .push(diagnostic("connection", message, e));
                }
            }
            _ => {}
        }
        result
    }
}

/// The entries (`R`, the package's registry) and connections of the last
/// `configure` that was not a dry run.
pub struct Configured<R> {
    registry: Mutex<Arc<R>>,
    connections: Mutex<HashMap<String, Connection>>,
}

impl<R: Default> Default for Configured<R> {
    fn default() -> Self {
        Configured {
            registry: Mutex::new(Arc::new(R::default())),
            connections: Mutex::new(HashMap::new()),
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl<R> Configured<R> {
    /// The entries in force.
    pub fn registry(&self) -> Arc<R> {
        lock(&self.registry).clone()
    }

    /// Puts `connections` in force (by name), then `registry`.
    pub fn put(&self, registry: R, connections: &[Connection]) {
        self.set_connections(connections);
        self.set_registry(registry);
    }

    /// Puts `connections` in force, by name.
    pub fn set_connections(&self, connections: &[Connection]) {
        *lock(&self.connections) = connections
            .iter()
            .map(|c| (c.name.clone(), c.clone()))
            .collect();
    }

    /// Puts `registry` in force.
    pub fn set_registry(&self, registry: R) {
        *lock(&self.registry) = Arc::new(registry);
    }

    /// Connection `name`, if it is configured.
    pub fn connection(&self, name: &str) -> Option<Connection> {
        lock(&self.connections).get(name).cloned()
    }

    /// Connection `name`, if it is configured; an error if it is of another type
    /// than `type_name`.
    pub fn connection_of_type(
        &self,
        name: &str,
        type_name: &str,
    ) -> Result<Option<Connection>, RpcError> {
        match self.connection(name) {
            Some(c) if c.connection_type != type_name => Err(RpcError::new(
                Code::Invalid,
                format!(
                    "connection {name} is of type {}, not {type_name}",
                    c.connection_type
                ),
            )),
            conn => Ok(conn),
        }
    }

    /// Connection `name`, which must be configured and of type `type_name`.
    pub fn required_connection(&self, name: &str, type_name: &str) -> Result<Connection, RpcError> {
        self.connection_of_type(name, type_name)?.ok_or_else(|| {
            RpcError::new(Code::Invalid, format!("no connection {name} is configured"))
        })
    }
}

/// Answers a `webhook.handle` request for entry `entry` in `scope_id` that
/// `process` serves with its signing `secret`. When the secret could not be had,
/// the package's log (stderr) says why (`<package>: scope S, entry E: why`; the
/// error never holds a secret) and the answer says no more than `unavailable`.
pub fn signed_webhook<S: AsRef<str>>(
    package: &str,
    scope_id: &str,
    entry: &str,
    secret: Result<S, RpcError>,
    unavailable: fn() -> HttpAnswer,
    process: impl FnOnce(&[u8]) -> WebhookHandleResult,
) -> WebhookHandleResult {
    match secret {
        Ok(secret) => process(secret.as_ref().as_bytes()),
        Err(e) => {
            eprintln!("{package}: scope {scope_id}, entry {entry}: {}", e.message);
            crate::tracker::answer_only(unavailable())
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use serde_json::json;

    fn entry(config: &Value) -> Result<String, ConfigError> {
        match config.get("source").and_then(Value::as_str) {
            Some(s) => Ok(format!("entry from {s}")),
            None => Err(ConfigError::new("/source", "must be a string")),
        }
    }

    fn route(config: &Value) -> Result<String, ConfigError> {
        match config.get("match") {
            Some(_) => Ok("route".to_string()),
            None => Err(ConfigError::new("/match", "is required")),
        }
    }

    fn route_message(e: &ConfigError) -> String {
        format!("{} (route)", e.reason)
    }

    fn connection(config: &Value) -> Result<(), ConfigError> {
        match config.get("api_url") {
            Some(Value::String(_)) | None => Ok(()),
            Some(_) => Err(ConfigError::new("/api_url", "must be a string")),
        }
    }

    const TYPES: OwnTypes = OwnTypes {
        name: "demo",
        entry,
        route,
        route_message,
        connection,
    };

    fn params(kind: &str, type_name: &str, config: Value) -> ValidateParams {
        serde_json::from_value(json!({
            "kind": kind,
            "type": type_name,
            "name": "x",
            "config": config,
        }))
        .unwrap()
    }

    #[test]
    fn valid_entries_and_routes_are_described() {
        let r = TYPES.validate(&params("extension", "demo", json!({"source": "s"})));
        assert!(r.diagnostics.is_empty());
        assert_eq!(r.describe, vec!["entry from s".to_string()]);
        let r = TYPES.validate(&params("route", "demo", json!({"match": {}})));
        assert_eq!(r.describe, vec!["route".to_string()]);
        let r = TYPES.validate(&params("connection", "demo", json!({})));
        assert!(r.diagnostics.is_empty() && r.describe.is_empty());
    }

    #[test]
    fn problems_are_coded_by_package_and_kind_at_the_pointer() {
        let r = TYPES.validate(&params("extension", "demo", json!({})));
        assert!(r.describe.is_empty());
        assert_eq!(r.diagnostics.len(), 1);
        assert_eq!(r.diagnostics[0].code, "demo_entry_invalid");
        assert_eq!(r.diagnostics[0].message, "must be a string");
        assert_eq!(r.diagnostics[0].path, "/source");

        let r = TYPES.validate(&params("route", "demo", json!({})));
        assert_eq!(r.diagnostics[0].code, "demo_route_invalid");
        assert_eq!(r.diagnostics[0].message, "is required (route)");
        assert_eq!(r.diagnostics[0].path, "/match");

        let r = TYPES.validate(&params("connection", "demo", json!({"api_url": 1})));
        assert_eq!(r.diagnostics[0].code, "demo_connection_invalid");
        assert_eq!(r.diagnostics[0].message, "must be a string");
        assert_eq!(r.diagnostics[0].path, "/api_url");
    }

    #[test]
    fn other_types_and_kinds_are_valid() {
        let r = TYPES.validate(&params("extension", "other", json!({})));
        assert!(r.diagnostics.is_empty() && r.describe.is_empty());
        let r = TYPES.validate(&params("executor", "demo", json!({})));
        assert!(r.diagnostics.is_empty() && r.describe.is_empty());
    }

    fn conn(name: &str, type_name: &str) -> Connection {
        serde_json::from_value(json!({"name": name, "type": type_name})).unwrap()
    }

    #[test]
    fn configured_keeps_the_last_put() {
        let c: Configured<Vec<u32>> = Configured::default();
        assert!(c.registry().is_empty());
        assert!(c.connection("a").is_none());
        c.put(vec![1], &[conn("a", "demo"), conn("b", "other")]);
        assert_eq!(*c.registry(), vec![1]);
        assert_eq!(c.connection("a").unwrap().connection_type, "demo");
        c.set_connections(&[]);
        assert!(c.connection("a").is_none());
        c.set_registry(vec![2]);
        assert_eq!(*c.registry(), vec![2]);
    }

    #[test]
    fn connections_of_another_type_or_missing_are_refused() {
        let c: Configured<()> = Configured::default();
        c.put((), &[conn("a", "demo"), conn("b", "other")]);
        assert!(c.connection_of_type("a", "demo").unwrap().is_some());
        assert!(c.connection_of_type("none", "demo").unwrap().is_none());
        let e = c.connection_of_type("b", "demo").unwrap_err();
        assert_eq!(e.code, RpcError::new(Code::Invalid, "").code);
        assert_eq!(e.message, "connection b is of type other, not demo");
        assert_eq!(
            c.required_connection("b", "demo").unwrap_err().message,
            "connection b is of type other, not demo"
        );
        let e = c.required_connection("none", "demo").unwrap_err();
        assert_eq!(e.message, "no connection none is configured");
        assert_eq!(c.required_connection("a", "demo").unwrap().name, "a");
    }

    fn refused() -> HttpAnswer {
        HttpAnswer::text(503, "the secret is unavailable")
    }

    #[test]
    fn a_webhook_is_served_with_its_secret() {
        let secret: Result<Arc<str>, RpcError> = Ok(Arc::from("s3cret"));
        let r = signed_webhook("demo", "sc", "e", secret, refused, |s| {
            assert_eq!(s, b"s3cret");
            crate::tracker::answer_only(HttpAnswer::text(200, "ok"))
        });
        assert_eq!(r.response.status, 200);
    }

    #[test]
    fn a_webhook_without_its_secret_is_answered_unavailable() {
        let secret: Result<String, RpcError> = Err(RpcError::new(Code::Unavailable, "no"));
        let r = signed_webhook("demo", "sc", "e", secret, refused, |_| {
            panic!("served without a secret")
        });
        assert_eq!(r.response.status, 503);
        assert!(r.deliveries.is_empty());
    }
}
