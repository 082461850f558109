//! A run's own git credential (spec, Inventory row "Run environment"), as the GitHub
//! package gives it, through the SDK's shared part ([`sdk::gitcred`]):
//!
//! - `run.environment`: for a run whose binding names a `bitbucket` connection, a
//!   layer of git config on `GIT_CONFIG_*` naming `open-conduit git-credential
//!   bitbucket` as the credential helper for the connection's git base URL
//!   ([`git_base`]: `https://bitbucket.org`, or the connection's `git_url`), with
//!   `useHttpPath`, and `GIT_TERMINAL_PROMPT=0`. No credential is in it.
//! - `run.credential`: what that helper asks for over the run's toolbelt. Only the
//!   run's own repository: the binding's git resource when it is under the git base,
//!   else the Work's Bitbucket repository (its newest `bitbucket.*` Event). The
//!   credential is the connection's ([`git_login_for`]): its `token` (a workspace or
//!   repository access token) with the user name [`TOKEN_USERNAME`], else its
//!   `app_password` with its config's `username`. Nothing is minted, so nothing is
//!   kept or revoked; the secret goes only into the answer, never into a log line or
//!   an error.

use protocol::wire::{
    Connection, RunCredentialParams, RunCredentialResult, RunEnvironmentParams,
    RunEnvironmentResult, StateWorkEventsParams,
};
use protocol::{Code, RpcError};
use sdk::gitcred::unauthorized;
use serde_json::Value;

use crate::config::{self, ConnectionConfig};
use crate::{State, APP_PASSWORD, NAME, TOKEN};

/// The user name git sends with a workspace or repository access token.
pub const TOKEN_USERNAME: &str = "x-token-auth";
/// Bitbucket Cloud's API host and the site its repositories are cloned from.
pub const PUBLIC: (&str, &str) = ("api.bitbucket.org", "https://bitbucket.org");

/// The base URL a connection's repositories are cloned from: its `git_url`, else
/// `https://bitbucket.org` for `api.bitbucket.org`, else the `api_url`'s scheme and
/// host. No trailing `/`.
pub fn git_base(config: &ConnectionConfig) -> String {
    sdk::gitcred::git_base(
        config.git_url.as_deref(),
        Some(&config.api_url),
        config::DEFAULT_API_URL,
        PUBLIC,
    )
}

/// How git signs in as `connection` (a `bitbucket` connection as configure sent it):
/// the user name and the name of the secret holding the password, with what a git
/// resource config names itself (`secret`, `username`; each wins). The secret
/// defaults to `token` when the connection has one, else `app_password`; the user
/// name to [`TOKEN_USERNAME`] with `token`, else the connection's `username`. An
/// error says what is missing (never a value). Used by this package's
/// `run.credential` (nothing named) and by the git provider, for fetches.
pub fn git_login_for(
    connection: &Connection,
    secret: Option<&str>,
    username: Option<&str>,
) -> Result<(String, String), String> {
    let has = |n: &str| connection.secrets.iter().any(|s| s == n);
    let secret = match secret {
        Some(s) => s.to_string(),
        None if has(TOKEN) => TOKEN.to_string(),
        None if has(APP_PASSWORD) => APP_PASSWORD.to_string(),
        None => {
            return Err(format!(
                "connection {:?} has neither a {TOKEN} nor an {APP_PASSWORD}",
                connection.name
            ))
        }
    };
    let username = match username {
        Some(u) => u.to_string(),
        None if secret == TOKEN => TOKEN_USERNAME.to_string(),
        None => connection
            .config
            .get("username")
            .and_then(Value::as_str)
            .map(str::trim)
            .filter(|u| !u.is_empty())
            .ok_or_else(|| {
                format!(
                    "connection {:?} has no username for its {secret}",
                    connection.name
                )
            })?
            .to_string(),
    };
    Ok((username, secret))
}

/// The first of `connections` of type `bitbucket`.
fn bitbucket_connection(state: &State, connections: &[String]) -> Option<Connection> {
    connections.iter().find_map(|name| {
        state
            .configured
            .connection(name)
            .filter(|c| c.connection_type == NAME)
    })
}

/// The connection's config, checked.
fn parsed(connection: &Connection) -> Result<ConnectionConfig, RpcError> {
    config::check_connection_config(&connection.config).map_err(|e| {
        RpcError::new(
            Code::Invalid,
            format!("connection {}: {}{}", connection.name, e.pointer, e.reason),
        )
    })
}

/// Serves `run.environment`.
pub fn environment(
    state: &State,
    p: &RunEnvironmentParams,
) -> Result<RunEnvironmentResult, RpcError> {
    let Some(connection) = bitbucket_connection(state, &p.connections) else {
        return Ok(RunEnvironmentResult::default());
    };
    let base = git_base(&parsed(&connection)?);
    sdk::gitcred::layer(&base, &p.toolbelt_dir, NAME)
}

/// The newest `bitbucket.*` Event's repository among `events`.
pub fn repository_of(events: &[protocol::wire::Event]) -> Option<String> {
    events
        .iter()
        .rev()
        .filter(|e| {
            crate::FAMILIES
                .iter()
                .any(|f| e.event_type.starts_with(&format!("{f}.")))
        })
        .find_map(|e| {
            e.payload
                .data
                .get("repository")
                .and_then(Value::as_str)
                .filter(|r| config::is_repository(r))
                .map(str::to_string)
        })
}

/// The Work's Bitbucket repository: its newest `bitbucket.*` Event's (at most
/// [`crate::ops::MAX_WORK_EVENT_PAGES`] pages read).
async fn work_repository(host: &sdk::Host, work_id: &str) -> Result<Option<String>, RpcError> {
    if work_id.is_empty() {
        return Ok(None);
    }
    let mut found = None;
    let mut after = 0;
    for _ in 0..crate::ops::MAX_WORK_EVENT_PAGES {
        let page = host
            .call_typed(&StateWorkEventsParams {
                id: work_id.to_string(),
                after,
                limit: 1000,
            })
            .await
            .map_err(|e| {
                RpcError::new(Code::Unavailable, format!("reading the Work's Events: {e}"))
            })?;
        if page.events.is_empty() {
            break;
        }
        if let Some(r) = repository_of(&page.events) {
            found = Some(r);
        }
        after = page.next_after(after);
    }
    Ok(found)
}

/// Serves `run.credential`.
pub async fn credential(
    state: &State,
    host: &sdk::Host,
    p: &RunCredentialParams,
) -> Result<RunCredentialResult, RpcError> {
    let Some(connection) = bitbucket_connection(state, &p.connections) else {
        return Err(unauthorized(
            "this run's binding names no bitbucket connection",
        ));
    };
    let base = git_base(&parsed(&connection)?);
    sdk::gitcred::run_repository(NAME, "Bitbucket", p, &base, || {
        work_repository(host, &p.authority.work_id)
    })
    .await?;
    let (username, secret) = git_login_for(&connection, None, None)
        .map_err(|why| unauthorized(format!("{why}, so this run gets no git credential")))?;
    // Unnamed by a resource, the secret is one of the two (the cache wants it static).
    let secret = if secret == TOKEN { TOKEN } else { APP_PASSWORD };
    let password = state
        .secret(host, &p.authority.scope_id, &connection.name, secret)
        .await?;
    Ok(RunCredentialResult {
        username,
        password,
        expires_at: String::new(),
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use serde_json::json;

    fn conn(config: Value, secrets: &[&str]) -> Connection {
        Connection {
            name: "bb".into(),
            connection_type: NAME.into(),
            config,
            secrets: secrets.iter().map(|s| s.to_string()).collect(),
        }
    }

    #[test]
    fn the_git_base_is_bitbucket_org_or_the_git_url() {
        let base = |c: Value| git_base(&config::check_connection_config(&c).unwrap());
        assert_eq!(base(json!({})), "https://bitbucket.org");
        assert_eq!(
            base(json!({"api_url": "http://127.0.0.1:4010"})),
            "http://127.0.0.1:4010"
        );
        assert_eq!(
            base(json!({"api_url": "http://127.0.0.1:4010", "git_url": "http://127.0.0.1:9/git/"})),
            "http://127.0.0.1:9/git"
        );
        let e = config::check_connection_config(&json!({"git_url": "ssh://git@bitbucket.org"}))
            .unwrap_err();
        assert_eq!(e.pointer, "/git_url");
        let e = config::check_connection_config(&json!({"git_url": "https://me@bitbucket.org"}))
            .unwrap_err();
        assert_eq!(e.pointer, "/git_url");
    }

    #[test]
    fn a_token_wins_over_an_app_password() {
        let both = conn(json!({"username": "bot"}), &[TOKEN, APP_PASSWORD]);
        let login = |u: &str, s: &str| Some((u.to_string(), s.to_string()));
        let git_login = |c: &Connection| git_login_for(c, None, None).ok();
        assert_eq!(git_login(&both), login(TOKEN_USERNAME, TOKEN));
        let app = conn(
            json!({"username": "bot"}),
            &["webhook_secret", APP_PASSWORD],
        );
        assert_eq!(git_login(&app), login("bot", APP_PASSWORD));
        assert_eq!(git_login(&conn(json!({}), &[APP_PASSWORD])), None);
        assert_eq!(git_login(&conn(json!({"username": "bot"}), &[])), None);
        // What a git resource names wins, each on its own.
        assert_eq!(
            git_login_for(&both, Some(APP_PASSWORD), None).ok(),
            login("bot", APP_PASSWORD)
        );
        assert_eq!(
            git_login_for(&both, None, Some("me")).ok(),
            login("me", TOKEN)
        );
        let e = git_login_for(&conn(json!({}), &[APP_PASSWORD]), None, None).unwrap_err();
        assert!(e.contains("no username"), "{e}");
    }
}
