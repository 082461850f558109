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

use std::collections::HashMap;
use std::sync::Mutex;

use protocol::wire::{
    git_config_env, RunCredentialParams, RunCredentialResult, RunEnvironmentParams,
    RunEnvironmentResult, SegmentEndedParams, SegmentEndedResult,
};
use protocol::{Code, RpcError};
use serde_json::{json, Value};

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

fn unauthorized(m: impl Into<String>) -> RpcError {
    let m = m.into();
    let mut e = RpcError::new(Code::Unauthorized, m.clone());
    e.data = Some(json!({ protocol::toolbelt::AGENT_MESSAGE_FIELD: m }));
    e
}

/// The base URL a connection's repositories are cloned from: its `git_url`, else
/// `https://github.com` for `api.github.com`, else the `api_url`'s scheme and host
/// (GitHub Enterprise Server: `https://HOST/api/v3` → `https://HOST`). No trailing `/`.
pub fn git_base(config: &Value) -> String {
    if let Some(u) = config["git_url"].as_str().filter(|u| !u.trim().is_empty()) {
        return u.trim().trim_end_matches('/').to_owned();
    }
    let api = config["api_url"]
        .as_str()
        .filter(|u| !u.trim().is_empty())
        .unwrap_or(crate::api::DEFAULT_API_URL)
        .trim()
        .trim_end_matches('/');
    let (scheme, rest) = api.split_once("://").unwrap_or(("https", api));
    let host = rest.split('/').next().unwrap_or(rest);
    if host.eq_ignore_ascii_case("api.github.com") {
        return "https://github.com".into();
    }
    format!("{scheme}://{host}")
}

/// The host of `base` (no scheme, port or path), for a sandbox's network needs.
pub fn host_of(base: &str) -> Option<String> {
    let rest = base.split_once("://").map_or(base, |(_, r)| r);
    let authority = rest.split('/').next().unwrap_or_default();
    let authority = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    let host = match authority.strip_prefix('[') {
        Some(v6) => v6.split(']').next().unwrap_or_default(),
        None => authority.split(':').next().unwrap_or_default(),
    };
    (!host.is_empty()).then(|| host.to_ascii_lowercase())
}

/// `owner/name` of a repository URL under `base` (`https://github.com/o/r.git`).
pub fn repository_under(base: &str, url: &str) -> Option<String> {
    let lower = url.to_ascii_lowercase();
    let prefix = format!("{}/", base.to_ascii_lowercase());
    if !lower.starts_with(&prefix) {
        return None;
    }
    repository_of_path(url.get(prefix.len()..)?)
}

/// `owner/name` of a path `owner/name(.git)`.
pub fn repository_of_path(path: &str) -> Option<String> {
    let path = path.trim_matches('/');
    let path = path.strip_suffix(".git").unwrap_or(path);
    let (owner, name) = path.split_once('/')?;
    let ok = |s: &str| {
        !s.is_empty()
            && s != "."
            && s != ".."
            && s.chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
    };
    (ok(owner) && ok(name)).then(|| format!("{owner}/{name}"))
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

/// The helper git runs: `open-conduit git-credential github`, from `dir` when given.
fn helper(dir: &str) -> Result<String, RpcError> {
    if dir.is_empty() {
        return Ok(format!("!open-conduit git-credential {}", crate::NAME));
    }
    if dir.contains(['\'', '\n', '\0']) {
        return Err(RpcError::new(
            Code::Invalid,
            format!("the toolbelt directory {dir:?} cannot be quoted for git"),
        ));
    }
    Ok(format!(
        "!'{}/open-conduit' git-credential {}",
        dir.trim_end_matches('/'),
        crate::NAME
    ))
}

/// Serves `run.environment`.
pub fn environment(
    state: &State,
    p: &RunEnvironmentParams,
) -> Result<RunEnvironmentResult, RpcError> {
    let Some((_, config)) = github_connection(state, &p.connections) else {
        return Ok(RunEnvironmentResult::default());
    };
    let base = git_base(&config);
    let pairs = vec![
        (format!("credential.{base}.helper"), String::new()),
        (
            format!("credential.{base}.helper"),
            helper(&p.toolbelt_dir)?,
        ),
        (format!("credential.{base}.useHttpPath"), "true".to_owned()),
    ];
    let mut env = git_config_env(&pairs);
    env.insert("GIT_TERMINAL_PROMPT".into(), "0".into());
    Ok(RunEnvironmentResult {
        env,
        hosts: host_of(&base).into_iter().collect(),
    })
}

/// The repository the run may have: its binding's git resource on `base`, else the
/// Work's GitHub repository.
async fn allowed_repository(
    host: &sdk::Host,
    p: &RunCredentialParams,
    base: &str,
) -> Result<String, RpcError> {
    if let Some(r) = p.resource.as_ref().filter(|r| r.resource_type == "git") {
        if let Some(url) = r.config["repository"].as_str() {
            if let Some(repo) = repository_under(base, url) {
                return Ok(repo);
            }
        }
    }
    let work = crate::ops::work_ref(host, &p.authority.work_id).await?;
    work.repository.ok_or_else(|| {
        unauthorized(format!(
            "this run's binding has no git resource on {base} and its Work has no GitHub repository, so it gets no credential"
        ))
    })
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
    let asked_base = format!("{}://{}", p.protocol, p.host);
    let base_origin = base
        .split_once("://")
        .map(|(s, r)| format!("{s}://{}", r.split('/').next().unwrap_or(r)))
        .unwrap_or_else(|| base.clone());
    if !asked_base.eq_ignore_ascii_case(&base_origin) {
        return Err(unauthorized(format!(
            "this run's credential is for {base}, not {asked_base}"
        )));
    }
    let base_path = base.get(base_origin.len()..).unwrap_or_default();
    let path = p.path.trim_start_matches('/');
    let path = path
        .get(..base_path.trim_start_matches('/').len())
        .filter(|pre| pre.eq_ignore_ascii_case(base_path.trim_start_matches('/')))
        .and_then(|pre| path.get(pre.len()..))
        .unwrap_or(path);
    let asked = repository_of_path(path).ok_or_else(|| {
        unauthorized(format!(
            "git asked for {asked_base} without a repository path (credential.useHttpPath is off?)"
        ))
    })?;
    let allowed = allowed_repository(host, p, &base).await?;
    if !asked.eq_ignore_ascii_case(&allowed) {
        eprintln!(
            "github: run {} of Work {} asked for a credential for {asked}, refused: it may use {allowed} only",
            p.authority.execution_id, p.authority.work_id
        );
        return Err(unauthorized(format!(
            "this run may use {allowed} only, not {asked}"
        )));
    }
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

    #[test]
    fn the_git_host_is_named_for_a_sandbox() {
        assert_eq!(host_of("https://github.com").as_deref(), Some("github.com"));
        assert_eq!(
            host_of("http://127.0.0.2:8080/git").as_deref(),
            Some("127.0.0.2")
        );
        assert_eq!(host_of("https://[::1]:9").as_deref(), Some("::1"));
    }

    #[test]
    fn repositories_are_read_from_urls_and_paths() {
        assert_eq!(
            repository_under("https://github.com", "https://GitHub.com/o/r.git").as_deref(),
            Some("o/r")
        );
        assert_eq!(
            repository_under("https://github.com", "https://x.com/o/r"),
            None
        );
        assert_eq!(repository_of_path("/o/r.git").as_deref(), Some("o/r"));
        assert_eq!(repository_of_path("o"), None);
        assert_eq!(repository_of_path("../r"), None);
        assert_eq!(repository_of_path("o/r/extra"), None);
    }

    #[test]
    fn the_helper_is_quoted_and_refuses_what_it_cannot_quote() {
        assert_eq!(
            helper("/usr/bin").ok().as_deref(),
            Some("!'/usr/bin/open-conduit' git-credential github")
        );
        assert!(helper("/a'b").is_err());
        assert_eq!(
            helper("").ok().as_deref(),
            Some("!open-conduit git-credential github")
        );
    }
}
