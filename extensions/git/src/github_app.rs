//! A repository's credential from a GitHub App connection.
//!
//! When a `git` resource's `connection` is of type `github` with `app_id` and
//! `installation_id` in its config (as `configure` sent it), and the resource config
//! names no `secret` itself, the provider does not look for a `token`: it resolves the
//! connection's `private_key` (`secret.resolve`), signs the App's JWT and mints an
//! installation token for the one repository (`repositories: [name]`, permissions
//! `{"contents": "read"}`) through the connection's `api_url`
//! (`POST /app/installations/{id}/access_tokens`, the GitHub package's client). The
//! repository must be `<git base>/<owner>/<name>(.git)`, the git base being the
//! connection's `git_url` (else `https://github.com`, or the `api_url`'s host for
//! GitHub Enterprise Server).
//!
//! The token is git's password with user `x-access-token`. It is kept in this
//! process's memory only, one per (connection, repository), and reused until
//! [`oc_github::app::REFRESH_MARGIN`] (5 minutes) before its `expires_at`; it is never
//! written anywhere nor logged. A mint that fails fails the acquisition (and the
//! doctor check) as `resource_setup_failed` (`data.what` `credential`) naming the
//! connection and GitHub's status, never the token or the key.

use crate::config::{Credential, Source};
use oc_github::api::{ApiError, Client, Credentials};
use oc_github::app::{AppCredentials, REFRESH_MARGIN};
use oc_github::config::AppConfig;
use oc_github::credential::{git_base, repository_under};
use protocol::wire::Connection;
use protocol::{Code, RpcError};
use serde_json::{json, Value};
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, MutexGuard};

/// The connection type whose App the provider mints tokens with.
pub const CONNECTION_TYPE: &str = "github";
/// The connection's secret holding the App's private key.
pub const PRIVATE_KEY: &str = "private_key";
/// What a minted token may do: read the repository's contents.
pub fn permissions() -> Value {
    json!({"contents": "read"})
}

/// One minted token. No `Debug`: it holds the token.
struct Minted {
    token: String,
    expires_ms: i64,
    /// What it was minted with (api_url, app, installation, git base): a changed
    /// connection mints anew.
    made_with: String,
}

type Slot = Arc<tokio::sync::Mutex<Option<Minted>>>;

/// The connections `configure` sent and the tokens minted with them.
#[derive(Default)]
pub struct Apps {
    connections: Mutex<BTreeMap<String, Connection>>,
    /// By (connection, `owner/name` lowercased); one mint at a time per slot.
    minted: Mutex<HashMap<(String, String), Slot>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

fn setup_failed(repository: &str, message: impl Into<String>) -> RpcError {
    let mut e = RpcError::new(Code::ResourceSetupFailed, message);
    if let Some(Value::Object(map)) = e.data.as_mut() {
        map.insert("what".into(), Value::String("credential".into()));
        map.insert("repository".into(), Value::String(repository.into()));
    }
    e
}

/// The App of a connection, when it is a `github` connection with `app_id` and
/// `installation_id`; an error when its App fields are half there or malformed.
pub fn app_of(connection: &Connection) -> Result<Option<AppConfig>, String> {
    if connection.connection_type != CONNECTION_TYPE {
        return Ok(None);
    }
    AppConfig::parse(&connection.config)
}

/// The `api_url` of a connection's config (empty: the GitHub package's default).
fn api_url(config: &Value) -> String {
    config
        .get("api_url")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .trim()
        .to_string()
}

impl Apps {
    /// Records the connections of an applied configuration (a dry run changes
    /// nothing), and forgets the tokens of connections it no longer has or changed.
    pub fn configure(&self, connections: &[Connection]) {
        let next: BTreeMap<String, Connection> = connections
            .iter()
            .map(|c| (c.name.clone(), c.clone()))
            .collect();
        let mut known = lock(&self.connections);
        lock(&self.minted).retain(|(name, _), _| known.get(name) == next.get(name));
        *known = next;
    }

    /// The connection `name`: as `configure` sent it, else among `extra` (a
    /// `check.run`'s view).
    pub fn connection(&self, name: &str, extra: &[Connection]) -> Option<Connection> {
        lock(&self.connections)
            .get(name)
            .cloned()
            .or_else(|| extra.iter().find(|c| c.name == name).cloned())
    }

    /// The App `credential` uses: `None` when the config names its `secret`, or its
    /// connection is not a `github` App connection (the secret is then git's password).
    pub fn app_for(
        &self,
        credential: &Credential,
        extra: &[Connection],
        repository: &str,
    ) -> Result<Option<(Connection, AppConfig)>, RpcError> {
        if credential.explicit_secret {
            return Ok(None);
        }
        let Some(connection) = self.connection(&credential.connection, extra) else {
            return Ok(None);
        };
        match app_of(&connection) {
            Ok(Some(app)) => Ok(Some((connection, app))),
            Ok(None) => Ok(None),
            Err(why) => Err(setup_failed(
                repository,
                format!(
                    "connection {:?} (a GitHub App) cannot mint a token for {repository}: {why}",
                    connection.name
                ),
            )),
        }
    }

    /// An installation token for `source` from the App of `connection`: the one kept
    /// while more than [`REFRESH_MARGIN`] remains, else a new one minted with the
    /// `private_key` resolved through `host` for `scope_id`.
    pub async fn token(
        &self,
        host: Option<&sdk::Host>,
        scope_id: &str,
        connection: &Connection,
        app: &AppConfig,
        source: &Source,
    ) -> Result<String, RpcError> {
        let display = &source.display;
        let base = git_base(&connection.config);
        let Some(full) = repository_under(&base, &source.url) else {
            return Err(setup_failed(
                display,
                format!(
                    "{display} is not a repository under {base}, where connection {:?} (a GitHub App) mints tokens: set the connection's git_url to the base URL its repositories are cloned from",
                    connection.name
                ),
            ));
        };
        let name = full
            .split_once('/')
            .map(|(_, n)| n.to_string())
            .unwrap_or_else(|| full.clone());
        let api = api_url(&connection.config);
        let made_with = format!("{api}\n{}\n{}\n{base}", app.app_id, app.installation_id);
        let slot: Slot = lock(&self.minted)
            .entry((connection.name.clone(), full.to_ascii_lowercase()))
            .or_default()
            .clone();
        let mut held = slot.lock().await;
        let now = protocol::time::now_ms();
        let margin = i64::try_from(REFRESH_MARGIN.as_millis()).unwrap_or(i64::MAX);
        if let Some(m) = held.as_ref() {
            if m.made_with == made_with && now.saturating_add(margin) < m.expires_ms {
                return Ok(m.token.clone());
            }
        }
        *held = None;
        let pem = private_key(host, scope_id, &connection.name, display).await?;
        let (app_id, installation_id) = (app.app_id.clone(), app.installation_id);
        let api_for_mint = api.clone();
        let minted = tokio::task::spawn_blocking(move || -> Result<(String, i64), ApiError> {
            let app = Arc::new(AppCredentials::new(&app_id, installation_id, &pem)?);
            let client = Client::new(&api_for_mint, Credentials::App(Arc::clone(&app)))?;
            client.scoped_installation_token(&app, &[name], &permissions())
        })
        .await
        .map_err(|e| {
            setup_failed(
                display,
                format!(
                    "connection {:?}: minting an installation token for {full} stopped: {e}",
                    connection.name
                ),
            )
        })?
        .map_err(|e| {
            setup_failed(
                display,
                format!(
                    "connection {:?} (GitHub App {}, installation {}) could not mint an installation token for {full} at {}: {e}",
                    connection.name,
                    app.app_id,
                    app.installation_id,
                    if api.is_empty() {
                        oc_github::api::DEFAULT_API_URL
                    } else {
                        api.as_str()
                    }
                ),
            )
        })?;
        let (token, expires_ms) = minted;
        tracing::info!(
            connection = %connection.name,
            repository = %full,
            "minted a read-only installation token for the repository"
        );
        *held = Some(Minted {
            token: token.clone(),
            expires_ms,
            made_with,
        });
        Ok(token)
    }
}

/// The App's private key: the connection's `private_key`, through `secret.resolve`.
async fn private_key(
    host: Option<&sdk::Host>,
    scope_id: &str,
    connection: &str,
    repository: &str,
) -> Result<String, RpcError> {
    let Some(host) = host else {
        return Err(setup_failed(
            repository,
            "no host to resolve the GitHub App's private_key through",
        ));
    };
    let answer = host
        .call_typed(&protocol::wire::SecretResolveParams {
            scope_id: scope_id.to_string(),
            connection: connection.to_string(),
            names: vec![PRIVATE_KEY.to_string()],
        })
        .await
        .map_err(|e| {
            setup_failed(
                repository,
                format!(
                    "the private_key of connection {connection:?} (a GitHub App) could not be resolved: {}",
                    e.rpc().map_or_else(|| e.to_string(), |r| r.message.clone())
                ),
            )
        })?;
    answer.values.get(PRIVATE_KEY).cloned().ok_or_else(|| {
        setup_failed(
            repository,
            format!("connection {connection:?} (a GitHub App) has no secret {PRIVATE_KEY:?}"),
        )
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn github(config: Value) -> Connection {
        Connection {
            name: "gh".into(),
            connection_type: "github".into(),
            config,
            secrets: vec![PRIVATE_KEY.into()],
        }
    }

    fn credential(explicit_secret: bool) -> Credential {
        Credential {
            connection: "gh".into(),
            secret: "token".into(),
            username: "x-access-token".into(),
            explicit_secret,
            explicit_username: false,
        }
    }

    #[test]
    fn only_an_app_connection_without_an_explicit_secret_mints() {
        let apps = Apps::default();
        let app = github(json!({"app_id": 7, "installation_id": "42"}));
        apps.configure(std::slice::from_ref(&app));
        let (c, a) = apps.app_for(&credential(false), &[], "r").unwrap().unwrap();
        assert_eq!(
            (c.name.as_str(), a.app_id.as_str(), a.installation_id),
            ("gh", "7", 42)
        );
        assert!(apps.app_for(&credential(true), &[], "r").unwrap().is_none());
        // A token connection, another type, an unknown connection: the secret.
        apps.configure(&[github(json!({}))]);
        assert!(apps
            .app_for(&credential(false), &[], "r")
            .unwrap()
            .is_none());
        let mut other = app.clone();
        other.connection_type = "gitlab".into();
        apps.configure(&[other]);
        assert!(apps
            .app_for(&credential(false), &[], "r")
            .unwrap()
            .is_none());
        apps.configure(&[]);
        assert!(apps
            .app_for(&credential(false), &[], "r")
            .unwrap()
            .is_none());
        // A check's view stands in for configure.
        assert!(apps
            .app_for(&credential(false), std::slice::from_ref(&app), "r")
            .unwrap()
            .is_some());
        // Half an App is a clear refusal.
        apps.configure(&[github(json!({"app_id": 7}))]);
        let e = apps.app_for(&credential(false), &[], "r").unwrap_err();
        assert!(e.is(Code::ResourceSetupFailed), "{e:?}");
        assert!(e.message.contains("\"gh\"") && e.message.contains("installation_id"));
    }

    #[tokio::test]
    async fn a_repository_outside_the_git_base_is_refused_before_any_mint() {
        let apps = Apps::default();
        let app = github(json!({"app_id": 7, "installation_id": 42,
                                "git_url": "https://git.example.com"}));
        let cfg = AppConfig::parse(&app.config).unwrap().unwrap();
        let source = crate::config::source("https://github.com/o/r.git", None).unwrap();
        let e = apps
            .token(None, "s", &app, &cfg, &source)
            .await
            .err()
            .unwrap();
        assert!(e.is(Code::ResourceSetupFailed), "{e:?}");
        assert!(
            e.message.contains("https://git.example.com") && e.message.contains("git_url"),
            "{}",
            e.message
        );
        // Under the base, the key is the next thing needed: without a host, refused.
        let source = crate::config::source("https://git.example.com/o/r.git", None).unwrap();
        let e = apps
            .token(None, "s", &app, &cfg, &source)
            .await
            .err()
            .unwrap();
        assert!(e.message.contains("private_key"), "{}", e.message);
    }
}
