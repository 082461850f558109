//! A run's own git credential (spec, Inventory rows "Run environment" and "Container
//! segment end"):
//!
//! - `run.environment`: for a run whose binding names a `github` connection, a layer of
//!   git config on `GIT_CONFIG_*`: for the connection's git URL ([`git_base`]), the
//!   helper list cleared and `open-conduit git-credential github` named (from the
//!   host's directory), with `useHttpPath`, and `GIT_TERMINAL_PROMPT=0`. No credential
//!   is in it.
//! - `run.credential`: what that helper asks for over the run's toolbelt. Only the
//!   run's own repository: the binding's git resource when it is on the connection's
//!   git URL, else the Work's GitHub repository (its newest `github.*` Event). With a
//!   token connection, that token; with a GitHub App, an installation token minted for
//!   that one repository with `contents: write` and `pull_requests: write`, kept in
//!   this process's memory for the execution (reused while more than
//!   [`crate::app::REFRESH_MARGIN`] remains) and never written anywhere.
//! - `segment.ended`: every token minted for the execution is revoked
//!   (`DELETE /installation/token`) and forgotten. Best effort: a token this process
//!   forgot (it restarted) expires on its own within the hour GitHub gives it.
//!
//! The layer and the choice of the run's repository are the SDK's
//! ([`sdk::gitcred`]), shared with the Bitbucket package.

use std::collections::HashMap;
use std::sync::Mutex;

use protocol::wire::{
    RunCredentialParams, RunCredentialResult, RunEnvironmentParams, RunEnvironmentResult,
    SegmentEndedParams, SegmentEndedResult,
};
use protocol::RpcError;
use serde_json::{json, Value};

use sdk::gitcred::unauthorized;
pub use sdk::gitcred::{host_of, repository_of_path, repository_under};

use crate::State;

/// The user name git sends with a token, as GitHub takes it.
pub const USERNAME: &str = "x-access-token";
/// What a minted installation token may do.
pub fn permissions() -> Value {
    json!({"contents": "write", "pull_requests": "write"})
}

/// One minted token.
#[derive(Clone)]
struct Minted {
    scope_id: String,
    connection: String,
    repository: String,
    token: String,
    expires_ms: i64,
}

/// The tokens minted for runs, by execution.
#[derive(Default)]
pub struct Issued {
    by_execution: Mutex<HashMap<String, Vec<Minted>>>,
}

impl Issued {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Vec<Minted>>> {
        self.by_execution.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// The base URL a connection's repositories are cloned from: its `git_url`, else
/// `https://github.com` for `api.github.com`, else the `api_url`'s scheme and host
/// (GitHub Enterprise Server: `https://HOST/api/v3` → `https://HOST`). No trailing `/`.
pub fn git_base(config: &Value) -> String {
    sdk::gitcred::git_base(
        config["git_url"].as_str(),
        config["api_url"].as_str(),
        crate::api::DEFAULT_API_URL,
        ("api.github.com", "https://github.com"),
    )
}

/// The first of `connections` of type `github`, with its config.
fn github_connection(state: &State, connections: &[String]) -> Option<(String, Value)> {
    let known = crate::lock(&state.connections);
    connections.iter().find_map(|name| {
        known
            .get(name)
            .filter(|c| c.connection_type == crate::NAME)
            .map(|c| (name.clone(), c.config.clone()))
    })
}

/// Serves `run.environment`.
pub fn environment(
    state: &State,
    p: &RunEnvironmentParams,
) -> Result<RunEnvironmentResult, RpcError> {
    let Some((_, config)) = github_connection(state, &p.connections) else {
        return Ok(RunEnvironmentResult::default());
    };
    sdk::gitcred::layer(&git_base(&config), &p.toolbelt_dir, crate::NAME)
}

/// Serves `run.credential`.
pub async fn credential(
    state: &State,
    host: &sdk::Host,
    p: &RunCredentialParams,
) -> Result<RunCredentialResult, RpcError> {
    let Some((connection, config)) = github_connection(state, &p.connections) else {
        return Err(unauthorized(
            "this run's binding names no github connection",
        ));
    };
    let base = git_base(&config);
    let allowed = sdk::gitcred::run_repository(crate::NAME, "GitHub", p, &base, || async {
        Ok(crate::ops::work_ref(host, &p.authority.work_id)
            .await?
            .repository)
    })
    .await?;
    let client = state
        .client(host, &p.authority.scope_id, &connection)
        .await?;
    let Some(app) = client.app() else {
        let token = client.token().unwrap_or_default().to_owned();
        return Ok(RunCredentialResult {
            username: USERNAME.into(),
            password: token,
            expires_at: String::new(),
        });
    };
    let now = protocol::time::now_ms();
    let margin = i64::try_from(crate::app::REFRESH_MARGIN.as_millis()).unwrap_or(i64::MAX);
    let kept = state
        .issued
        .lock()
        .get(&p.authority.execution_id)
        .and_then(|v| {
            v.iter()
                .find(|m| {
                    m.repository.eq_ignore_ascii_case(&allowed) && now + margin < m.expires_ms
                })
                .cloned()
        });
    let minted = match kept {
        Some(m) => m,
        None => {
            let name = allowed.split('/').nth(1).unwrap_or(&allowed).to_owned();
            let c = client.clone();
            let (token, expires_ms) = crate::api::blocking(move || {
                c.scoped_installation_token(&app, &[name], &permissions())
            })
            .await
            .map_err(|e| e.to_rpc())?;
            let m = Minted {
                scope_id: p.authority.scope_id.clone(),
                connection: connection.clone(),
                repository: allowed.clone(),
                token,
                expires_ms,
            };
            state
                .issued
                .lock()
                .entry(p.authority.execution_id.clone())
                .or_default()
                .push(m.clone());
            eprintln!(
                "github: minted an installation token for {allowed} for run {} of Work {}",
                p.authority.execution_id, p.authority.work_id
            );
            m
        }
    };
    Ok(RunCredentialResult {
        username: USERNAME.into(),
        password: minted.token,
        expires_at: protocol::time::format_rfc3339_ms(minted.expires_ms),
    })
}

/// Serves `segment.ended`: revoke what was minted for the execution.
pub async fn segment_ended(
    state: &State,
    host: &sdk::Host,
    p: &SegmentEndedParams,
) -> Result<SegmentEndedResult, RpcError> {
    let minted = state
        .issued
        .lock()
        .remove(&p.authority.execution_id)
        .unwrap_or_default();
    for m in minted {
        let client = match state.client(host, &m.scope_id, &m.connection).await {
            Ok(c) => c,
            Err(e) => {
                eprintln!(
                    "github: cannot revoke the token of run {}: {}",
                    p.authority.execution_id, e.message
                );
                continue;
            }
        };
        let token = m.token.clone();
        match crate::api::blocking(move || client.revoke_installation_token(&token)).await {
            Ok(()) => eprintln!(
                "github: revoked the installation token for {} of run {}",
                m.repository, p.authority.execution_id
            ),
            Err(e) => eprintln!(
                "github: revoking the installation token for {} of run {} failed: {}",
                m.repository, p.authority.execution_id, e.message
            ),
        }
    }
    Ok(SegmentEndedResult {})
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_git_base_follows_the_api_url() {
        assert_eq!(git_base(&json!({})), "https://github.com");
        assert_eq!(
            git_base(&json!({"api_url": "https://ghe.example.com/api/v3"})),
            "https://ghe.example.com"
        );
        assert_eq!(
            git_base(
                &json!({"api_url": "http://127.0.0.1:4010", "git_url": "http://127.0.0.1:9/git/"})
            ),
            "http://127.0.0.1:9/git"
        );
    }
}
