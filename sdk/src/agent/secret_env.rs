//! A binding's `secret_env`: variables of the agent's environment set from
//! connection secrets. A value is a secret name (of the binding's `connection`) or
//! `{"connection": "<name>", "secret": "<name>"}` (of a connection the binding
//! names: its `connection` or one of its `connections`). [`check`] reads it into
//! [`SecretSource`]s; [`resolve`] asks each connection's `secret.resolve` at a launch.
//! Values go into the agent's environment only; every error names the variable, the
//! connection and the secret, never a value.

use crate::config::ConfigError;
use crate::Host;
use protocol::wire::{RunRequest, SecretResolveParams, SecretUse};
use serde::Deserialize;
use serde_json::Value;
use std::collections::BTreeMap;

/// `{"connection": "<name>", "secret": "<name>"}` (strict).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawSecretFrom {
    connection: String,
    secret: String,
}

/// One `secret_env` value as written.
#[derive(Debug, Clone, PartialEq)]
pub enum RawSecret {
    /// A secret of the binding's `connection`.
    Name(String),
    /// A secret of a named connection.
    From(RawSecretFrom),
}

/// What a `secret_env` value may be, for its error.
const SECRET_FORMS: &str =
    "must be a secret name, or {\"connection\": \"<name>\", \"secret\": \"<name>\"} naming one of the binding's connections";

impl<'de> Deserialize<'de> for RawSecret {
    /// A string, or an object of exactly `connection` and `secret`; anything else is
    /// [`SECRET_FORMS`], at the variable's pointer.
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        match Value::deserialize(d)? {
            Value::String(s) => Ok(RawSecret::Name(s)),
            v @ Value::Object(_) => serde_json::from_value(v)
                .map(RawSecret::From)
                .map_err(|_| serde::de::Error::custom(SECRET_FORMS)),
            _ => Err(serde::de::Error::custom(SECRET_FORMS)),
        }
    }
}

/// Where one `secret_env` variable's value comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SecretSource {
    /// The connection: empty for the binding's `connection`, else a connection the
    /// binding names (its `connection` or one of its `connections`).
    pub connection: String,
    /// The secret's name (a key of the connection's `secret_refs`).
    pub secret: String,
}

impl SecretSource {
    /// The connection it resolves from, `binding_connection` when it names none.
    pub fn connection_or<'a>(&'a self, binding_connection: &'a str) -> &'a str {
        if self.connection.is_empty() {
            binding_connection
        } else {
            &self.connection
        }
    }
}

/// Whether `name` is a variable name (letters, digits and `_`, not starting with a
/// digit).
pub fn is_var_name(name: &str) -> bool {
    !name.is_empty()
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
        && !name.as_bytes()[0].is_ascii_digit()
}

/// Checks a written `secret_env`; errors point into the binding config.
pub fn check(
    raw: BTreeMap<String, RawSecret>,
) -> Result<BTreeMap<String, SecretSource>, ConfigError> {
    let mut out = BTreeMap::new();
    for (name, raw) in raw {
        if !is_var_name(&name) {
            return Err(ConfigError::new(
                "/secret_env",
                "a variable name must be letters, digits and _, not starting with a digit",
            ));
        }
        let at = crate::config::pointer(["secret_env", name.as_str()]);
        let source = match raw {
            RawSecret::Name(secret) => SecretSource {
                connection: String::new(),
                secret,
            },
            RawSecret::From(f) => {
                if f.connection.trim().is_empty() || f.connection.contains('\0') {
                    return Err(ConfigError::new(
                        at,
                        "must name a connection (or be a plain secret name for the binding's connection)",
                    ));
                }
                SecretSource {
                    connection: f.connection,
                    secret: f.secret,
                }
            }
        };
        if source.secret.trim().is_empty() {
            return Err(ConfigError::new(at, "must not be empty"));
        }
        if source.secret.contains('\0') {
            return Err(ConfigError::new(at, "must not contain a NUL byte"));
        }
        out.insert(name, source);
    }
    Ok(out)
}

/// The connection secrets `secret_env` resolves, each with its pointer into the
/// config (`validate` kind `executor_secrets`).
pub fn uses(secret_env: &BTreeMap<String, SecretSource>) -> Vec<SecretUse> {
    secret_env
        .iter()
        .map(|(var, s)| SecretUse {
            path: format!("/secret_env/{}", var.replace('~', "~0").replace('/', "~1")),
            connection: s.connection.clone(),
            secret: s.secret.clone(),
        })
        .collect()
}

/// Why the secrets could not be resolved: a reason (`invalid_config`,
/// `secret_unavailable`) and a line naming the variable, never a value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unresolved {
    /// The failure's reason.
    pub reason: &'static str,
    /// What went wrong.
    pub error: String,
}

/// The variables' values: each connection's secrets through its own
/// `secret.resolve`, a plain name from the binding's `connection`, an object's from
/// the connection it names, which must be one the binding names.
pub async fn resolve(
    host: &Host,
    req: &RunRequest,
    secret_env: &BTreeMap<String, SecretSource>,
) -> Result<BTreeMap<String, String>, Unresolved> {
    let binding = &req.binding;
    let invalid = |error: String| Unresolved {
        reason: "invalid_config",
        error,
    };
    let mut wanted: BTreeMap<&str, Vec<(&str, &str)>> = BTreeMap::new();
    for (var, source) in secret_env {
        let connection = source.connection_or(&binding.connection);
        if connection.is_empty() {
            return Err(invalid(format!("invalid_config: secret_env.{var} takes a secret of the binding's connection, and the binding names none")));
        }
        if connection != binding.connection && !binding.connections.iter().any(|c| c == connection)
        {
            return Err(invalid(format!("invalid_config: secret_env.{var} names the connection {connection:?}, which the binding does not name (its connection or connections)")));
        }
        wanted
            .entry(connection)
            .or_default()
            .push((var.as_str(), source.secret.as_str()));
    }
    let unavailable = |error: String| Unresolved {
        reason: "secret_unavailable",
        error,
    };
    let mut out = BTreeMap::new();
    for (connection, vars) in wanted {
        let mut names: Vec<String> = vars.iter().map(|(_, s)| (*s).to_owned()).collect();
        names.sort();
        names.dedup();
        let got = host
            .call_typed(&SecretResolveParams {
                scope_id: req.work.scope_id.clone(),
                connection: connection.to_owned(),
                names,
            })
            .await
            .map_err(|e| {
                unavailable(format!(
                    "the secrets of connection {connection:?} could not be resolved: {e}"
                ))
            })?;
        for (var, name) in vars {
            let Some(v) = got.values.get(name) else {
                return Err(unavailable(format!(
                    "the secret {name} of connection {connection:?} for {var} was not resolved"
                )));
            };
            out.insert(var.to_owned(), v.clone());
        }
    }
    Ok(out)
}
