//! A run's own git credential, the part every forge package shares (spec, Inventory
//! row "Run environment"; docs/decisions.md, issue 38):
//!
//! - [`layer`] is the `run.environment` answer: git config on `GIT_CONFIG_*` that,
//!   for the connection's git base URL, clears the helper list and names
//!   `open-conduit git-credential EXTENSION` (from the host's directory), with
//!   `useHttpPath`, and `GIT_TERMINAL_PROMPT=0`. No credential is in it.
//! - [`run_repository`] decides, for a `run.credential` request, the one repository
//!   the run may have: git must ask for the connection's git base, and for the
//!   binding's git resource when it is under that base, else for the Work's own
//!   repository (which the package reads from its Events). Anything else is refused
//!   ([`unauthorized`], with the message for the agent).
//!
//! The package then answers the credential itself (a token, an App's minted token,
//! an app password) and never logs it.

use std::future::Future;

use protocol::wire::{git_config_env, RunCredentialParams, RunEnvironmentResult};
use protocol::{Code, RpcError};
use serde_json::{json, Value};

/// An `unauthorized` refusal carrying `m` for the agent (git's stderr).
pub fn unauthorized(m: impl Into<String>) -> RpcError {
    let m = m.into();
    let mut e = RpcError::new(Code::Unauthorized, m.clone());
    match e.data.as_mut() {
        Some(Value::Object(data)) => {
            data.insert(protocol::toolbelt::AGENT_MESSAGE_FIELD.into(), json!(m));
        }
        _ => e.data = Some(json!({ protocol::toolbelt::AGENT_MESSAGE_FIELD: m })),
    }
    e
}

/// The base URL a connection's repositories are cloned from: `git_url` when given,
/// else the public site for the public API (`public`: the API's host and the site,
/// `("api.github.com", "https://github.com")`), else the API URL's scheme and host
/// (a self-hosted server: `https://HOST/api/v3` → `https://HOST`). `api_url`
/// defaults to `default_api_url`. No trailing `/`.
pub fn git_base(
    git_url: Option<&str>,
    api_url: Option<&str>,
    default_api_url: &str,
    public: (&str, &str),
) -> String {
    if let Some(u) = git_url.filter(|u| !u.trim().is_empty()) {
        return u.trim().trim_end_matches('/').to_owned();
    }
    let api = api_url
        .filter(|u| !u.trim().is_empty())
        .unwrap_or(default_api_url)
        .trim()
        .trim_end_matches('/');
    let (scheme, rest) = api.split_once("://").unwrap_or(("https", api));
    let host = rest.split('/').next().unwrap_or(rest);
    if host.eq_ignore_ascii_case(public.0) {
        return public.1.trim_end_matches('/').to_owned();
    }
    format!("{scheme}://{host}")
}

/// The host of `base` (no scheme, user, port or path), for a sandbox's network needs.
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

/// `url` without a user (`https://me@host/x` → `https://host/x`).
fn without_user(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    let (authority, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    let authority = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    format!("{scheme}://{authority}{path}")
}

/// `owner/name` of a repository URL under `base` (`https://github.com/o/r.git`; a
/// user in the URL, `https://me@bitbucket.org/o/r.git`, is ignored).
pub fn repository_under(base: &str, url: &str) -> Option<String> {
    let url = without_user(url);
    let lower = url.to_ascii_lowercase();
    let prefix = format!("{}/", without_user(base).to_ascii_lowercase());
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

/// The helper git runs: `open-conduit git-credential EXTENSION`, from `dir` when given.
pub fn helper(dir: &str, extension: &str) -> Result<String, RpcError> {
    if dir.is_empty() {
        return Ok(format!("!open-conduit git-credential {extension}"));
    }
    if dir.contains(['\'', '\n', '\0']) {
        return Err(RpcError::new(
            Code::Invalid,
            format!("the toolbelt directory {dir:?} cannot be quoted for git"),
        ));
    }
    Ok(format!(
        "!'{}/open-conduit' git-credential {extension}",
        dir.trim_end_matches('/')
    ))
}

/// The `run.environment` layer naming `extension`'s helper for `base`, with the
/// toolbelt directory `dir` ([`helper`]), and `base`'s host for a sandbox.
pub fn layer(base: &str, dir: &str, extension: &str) -> Result<RunEnvironmentResult, RpcError> {
    let pairs = vec![
        (format!("credential.{base}.helper"), String::new()),
        (format!("credential.{base}.helper"), helper(dir, extension)?),
        (format!("credential.{base}.useHttpPath"), "true".to_owned()),
    ];
    let mut env = git_config_env(&pairs);
    env.insert("GIT_TERMINAL_PROMPT".into(), "0".into());
    Ok(RunEnvironmentResult {
        env,
        hosts: host_of(base).into_iter().collect(),
    })
}

/// The repository git asks for (`owner/name`), when it asks for `base`: its
/// protocol and host must be `base`'s, its path under `base`'s path.
pub fn asked_repository(p: &RunCredentialParams, base: &str) -> Result<String, RpcError> {
    let asked_base = format!("{}://{}", p.protocol, p.host);
    let plain = without_user(base);
    let base_origin = plain
        .split_once("://")
        .map(|(s, r)| format!("{s}://{}", r.split('/').next().unwrap_or(r)))
        .unwrap_or_else(|| plain.clone());
    if !asked_base.eq_ignore_ascii_case(&base_origin) {
        return Err(unauthorized(format!(
            "this run's credential is for {base}, not {asked_base}"
        )));
    }
    let base_path = plain
        .get(base_origin.len()..)
        .unwrap_or_default()
        .trim_matches('/');
    let path = p.path.trim_start_matches('/');
    let path = path
        .get(..base_path.len())
        .filter(|pre| pre.eq_ignore_ascii_case(base_path))
        .and_then(|pre| path.get(pre.len()..))
        .unwrap_or(path);
    repository_of_path(path).ok_or_else(|| {
        unauthorized(format!(
            "git asked for {asked_base} without a repository path (credential.useHttpPath is off?)"
        ))
    })
}

/// The binding's git resource's repository, when it is under `base`.
pub fn resource_repository(p: &RunCredentialParams, base: &str) -> Option<String> {
    let r = p.resource.as_ref().filter(|r| r.resource_type == "git")?;
    repository_under(base, r.config["repository"].as_str()?)
}

/// The repository a `run.credential` request may have, checked against what git
/// asked: the binding's git resource under `base`, else the Work's own repository
/// (`work`, called only then; `title` names the forge in the refusal). A refusal is
/// logged as `PACKAGE: run X of Work Y asked for ..., refused` (no credential is
/// involved yet).
pub async fn run_repository<F, Fut>(
    package: &str,
    title: &str,
    p: &RunCredentialParams,
    base: &str,
    work: F,
) -> Result<String, RpcError>
where
    F: FnOnce() -> Fut,
    Fut: Future<Output = Result<Option<String>, RpcError>>,
{
    let asked = asked_repository(p, base)?;
    let allowed = match resource_repository(p, base) {
        Some(r) => r,
        None => work().await?.ok_or_else(|| {
            unauthorized(format!(
                "this run's binding has no git resource on {base} and its Work has no {title} repository, so it gets no credential"
            ))
        })?,
    };
    if !asked.eq_ignore_ascii_case(&allowed) {
        eprintln!(
            "{package}: run {} of Work {} asked for a credential for {asked}, refused: it may use {allowed} only",
            p.authority.execution_id, p.authority.work_id
        );
        return Err(unauthorized(format!(
            "this run may use {allowed} only, not {asked}"
        )));
    }
    Ok(allowed)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use protocol::wire::ResourceBinding;

    const GITHUB: (&str, &str) = ("api.github.com", "https://github.com");

    #[test]
    fn the_git_base_follows_the_api_url() {
        let base = |g, a| git_base(g, a, "https://api.github.com", GITHUB);
        assert_eq!(base(None, None), "https://github.com");
        assert_eq!(
            base(None, Some("https://ghe.example.com/api/v3")),
            "https://ghe.example.com"
        );
        assert_eq!(
            base(
                Some("http://127.0.0.1:9/git/"),
                Some("http://127.0.0.1:4010")
            ),
            "http://127.0.0.1:9/git"
        );
        assert_eq!(
            git_base(
                None,
                None,
                "https://api.bitbucket.org/2.0",
                ("api.bitbucket.org", "https://bitbucket.org")
            ),
            "https://bitbucket.org"
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
            repository_under("https://bitbucket.org", "https://me@bitbucket.org/w/r.git")
                .as_deref(),
            Some("w/r")
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
            helper("/usr/bin", "github").ok().as_deref(),
            Some("!'/usr/bin/open-conduit' git-credential github")
        );
        assert!(helper("/a'b", "github").is_err());
        assert_eq!(
            helper("", "bitbucket").ok().as_deref(),
            Some("!open-conduit git-credential bitbucket")
        );
    }

    #[test]
    fn the_layer_names_the_helper_for_the_base() {
        let l = layer("https://bitbucket.org", "/usr/bin", "bitbucket").unwrap();
        assert_eq!(l.env["GIT_CONFIG_COUNT"], "3");
        assert_eq!(
            l.env["GIT_CONFIG_KEY_1"],
            "credential.https://bitbucket.org.helper"
        );
        assert_eq!(l.env["GIT_CONFIG_VALUE_0"], "");
        assert_eq!(
            l.env["GIT_CONFIG_VALUE_1"],
            "!'/usr/bin/open-conduit' git-credential bitbucket"
        );
        assert_eq!(l.env["GIT_TERMINAL_PROMPT"], "0");
        assert_eq!(l.hosts, vec!["bitbucket.org".to_string()]);
    }

    fn request(host: &str, path: &str, resource: Option<&str>) -> RunCredentialParams {
        RunCredentialParams {
            protocol: "http".into(),
            host: host.into(),
            path: path.into(),
            resource: resource.map(|r| ResourceBinding {
                resource_type: "git".into(),
                config: json!({ "repository": r }),
            }),
            ..RunCredentialParams::default()
        }
    }

    #[tokio::test]
    async fn only_the_runs_own_repository_is_given() {
        let base = "http://127.0.0.1:9/git";
        let none = || async { Ok(None) };
        let work = || async { Ok(Some("w/r".to_string())) };
        // The resource's repository, under the base's path.
        let p = request(
            "127.0.0.1:9",
            "git/o/r.git",
            Some("http://127.0.0.1:9/git/o/r"),
        );
        assert_eq!(
            run_repository("t", "T", &p, base, none).await.unwrap(),
            "o/r"
        );
        // The Work's when the resource is elsewhere; another is refused.
        let p = request("127.0.0.1:9", "git/w/r.git", Some("https://x.org/o/r"));
        assert_eq!(
            run_repository("t", "T", &p, base, work).await.unwrap(),
            "w/r"
        );
        let p = request("127.0.0.1:9", "git/o/other.git", None);
        let e = run_repository("t", "T", &p, base, work).await.unwrap_err();
        assert!(e.is(Code::Unauthorized), "{e:?}");
        assert!(e.message.contains("w/r only"), "{}", e.message);
        let said = &e.data.unwrap()[protocol::toolbelt::AGENT_MESSAGE_FIELD];
        assert!(said.as_str().unwrap().contains("w/r only"));
        // Another host, no path, no repository at all.
        let p = request("127.0.0.1:10", "git/w/r.git", None);
        assert!(run_repository("t", "T", &p, base, work).await.is_err());
        let p = request("127.0.0.1:9", "", None);
        assert!(run_repository("t", "T", &p, base, work).await.is_err());
        let p = request("127.0.0.1:9", "git/w/r.git", None);
        let e = run_repository("t", "T", &p, base, none).await.unwrap_err();
        assert!(e.message.contains("no T repository"), "{}", e.message);
    }
}
