//! The resource config of a binding's `git` resource, checked strictly: every
//! field but `repository` is optional, unknown fields are refused.

use protocol::{Code, RpcError};
use sdk::config::ConfigError;
use serde::Deserialize;
use serde_json::Value;
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

/// The default bound on one git command.
pub const DEFAULT_TIMEOUT_S: u64 = 600;
/// The largest `timeout_s` accepted.
pub const MAX_TIMEOUT_S: u64 = 3600;
/// The default disk floor, in MiB.
pub const DEFAULT_MIN_FREE_MB: u64 = 256;
/// The default prefix of a Work's own branch.
pub const DEFAULT_BRANCH_PREFIX: &str = "oc/";

/// `GIT_*` names the environment layer may not set: they would point git in the
/// workspace at another repository.
const LAYER_DENIED: &[&str] = &[
    "GIT_DIR",
    "GIT_WORK_TREE",
    "GIT_COMMON_DIR",
    "GIT_INDEX_FILE",
    "GIT_OBJECT_DIRECTORY",
    "GIT_ALTERNATE_OBJECT_DIRECTORIES",
    "GIT_NAMESPACE",
];

/// An acquisition mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// One checkout for the binding, shared by every Work on it.
    Shared,
    /// One worktree per Work, on its own branch, kept across its attempts.
    Work,
    /// One clone per Work that shares nothing writable with the cache.
    Fresh,
}

impl Mode {
    /// Reads a mode: `shared`, `work`, `fresh` (or `clone`, the executor's name for it).
    pub fn parse(text: &str) -> Option<Mode> {
        match text {
            "shared" => Some(Mode::Shared),
            "work" => Some(Mode::Work),
            "fresh" | "clone" => Some(Mode::Fresh),
            _ => None,
        }
    }

    /// The mode's name on the wire and in references.
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Shared => "shared",
            Mode::Work => "work",
            Mode::Fresh => "fresh",
        }
    }

    /// Every mode, in the manifest's order.
    pub const ALL: [Mode; 3] = [Mode::Shared, Mode::Work, Mode::Fresh];
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Raw {
    repository: String,
    #[serde(default)]
    mode: Option<String>,
    #[serde(default)]
    base: Option<String>,
    #[serde(default)]
    branch_prefix: Option<String>,
    #[serde(default)]
    timeout_s: Option<u64>,
    #[serde(default)]
    min_free_mb: Option<u64>,
    #[serde(default)]
    spares: Option<u32>,
    #[serde(default)]
    env: BTreeMap<String, String>,
    /// The host's grant (ResourceAcquisition.HostEnv); the values arrive as
    /// `host_env`, so the names are only accepted here.
    #[serde(default)]
    #[allow(dead_code)]
    pass_env: Vec<String>,
    #[serde(default)]
    connection: Option<String>,
    #[serde(default)]
    secret: Option<String>,
    #[serde(default)]
    username: Option<String>,
}

/// Spare worktrees kept ready when the config names no number.
pub const DEFAULT_SPARES: u32 = 1;
/// The most spare worktrees a repository may keep.
pub const MAX_SPARES: u32 = 8;

/// The default secret of the connection that holds the repository's credential.
pub const DEFAULT_SECRET: &str = "token";
/// The default user name sent with it (GitHub's for a token over HTTPS).
pub const DEFAULT_USERNAME: &str = "x-access-token";

/// Where an HTTP(S) repository's credential comes from: a secret of a connection
/// of the configuration, resolved through the host when git needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Credential {
    /// The connection.
    pub connection: String,
    /// Its secret holding the password or token.
    pub secret: String,
    /// The user name sent with it.
    pub username: String,
    /// Whether the config named `secret` itself: a `github` App connection's
    /// installation token is minted only when it did not
    /// ([`crate::github_app`]).
    pub explicit_secret: bool,
    /// Whether the config named `username` itself: a `bitbucket` connection's user
    /// name is chosen by its secrets only when it did not ([`crate::bitbucket`]).
    pub explicit_username: bool,
}

/// Where the repository is, as git is given it and as messages show it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Source {
    /// What git fetches from (a URL or an absolute path).
    pub url: String,
    /// The URL with any user and password replaced by `***`.
    pub display: String,
    /// The cache's name: the repository's last path component and a hash of the URL.
    pub key: String,
}

/// A checked resource config.
#[derive(Debug, Clone)]
pub struct Config {
    /// The repository.
    pub source: Source,
    /// The mode when the executor requests none.
    pub mode: Mode,
    /// The branch new branches start from (`None`: the remote's default branch).
    pub base: Option<String>,
    /// The prefix of a Work's own branch.
    pub branch_prefix: String,
    /// The bound on one git command.
    pub timeout: Duration,
    /// The disk floor, in MiB.
    pub min_free_mb: u64,
    /// Spare worktrees kept ready for new Works (mode `work`).
    pub spares: u32,
    /// The environment layer's configured part (`GIT_*` only).
    pub env: BTreeMap<String, String>,
    /// The repository's credential, for an `https://` or `http://` one.
    pub credential: Option<Credential>,
}

fn invalid(message: impl Into<String>) -> RpcError {
    RpcError::new(Code::Invalid, message)
}

impl Config {
    /// Checks a resource config; a relative local path resolves against `config_dir`.
    /// An error is `invalid`: `git resource config: /timeout_s: ...`.
    pub fn parse(value: &Value, config_dir: Option<&Path>) -> Result<Config, RpcError> {
        Config::check(value, config_dir).map_err(|e| invalid(format!("git resource config: {e}")))
    }

    /// [`Config::parse`], its error naming the field as a JSON pointer into the config.
    pub fn check(value: &Value, config_dir: Option<&Path>) -> Result<Config, ConfigError> {
        if !value.is_object() {
            return Err(ConfigError::whole(
                "must be an object with at least repository",
            ));
        }
        let raw: Raw = sdk::config::parse(value)?;
        let source = checked_source(&raw.repository, config_dir)
            .map_err(|why| ConfigError::new("/repository", why))?;
        let mode = match raw.mode.as_deref() {
            None | Some("") => Mode::Work,
            Some(m) => Mode::parse(m).ok_or_else(|| {
                ConfigError::new("/mode", format!("`{m}` is not shared, work or fresh"))
            })?,
        };
        let base = match raw.base {
            Some(b) if !b.is_empty() => {
                if !branch_ok(&b) {
                    return Err(ConfigError::new(
                        "/base",
                        format!("`{b}` is not a valid branch name"),
                    ));
                }
                Some(b)
            }
            _ => None,
        };
        let branch_prefix = raw
            .branch_prefix
            .unwrap_or_else(|| DEFAULT_BRANCH_PREFIX.to_string());
        if !branch_prefix.is_empty() && !branch_ok(&format!("{branch_prefix}x")) {
            return Err(ConfigError::new(
                "/branch_prefix",
                format!("`{branch_prefix}` does not begin a valid branch name"),
            ));
        }
        let timeout_s = raw.timeout_s.unwrap_or(DEFAULT_TIMEOUT_S);
        if timeout_s == 0 || timeout_s > MAX_TIMEOUT_S {
            return Err(ConfigError::new(
                "/timeout_s",
                format!("{timeout_s} is not between 1 and {MAX_TIMEOUT_S}"),
            ));
        }
        for name in raw.env.keys() {
            let at = sdk::config::pointer(["env", name.as_str()]);
            if !name.starts_with("GIT_") || name.len() <= 4 {
                return Err(ConfigError::new(at, "env names only GIT_* variables"));
            }
            if LAYER_DENIED.contains(&name.as_str()) {
                return Err(ConfigError::new(
                    at,
                    "may not be set: it would point git away from the workspace",
                ));
            }
        }
        let credential = match raw.connection.filter(|c| !c.is_empty()) {
            None => {
                if raw.secret.is_some() || raw.username.is_some() {
                    return Err(ConfigError::new(
                        if raw.secret.is_some() {
                            "/secret"
                        } else {
                            "/username"
                        },
                        "secret and username need a connection (the one holding the credential)",
                    ));
                }
                None
            }
            Some(connection) => {
                if !(source.url.starts_with("https://") || source.url.starts_with("http://")) {
                    return Err(ConfigError::new(
                        "/connection",
                        format!(
                            "a connection's credential is for https:// and http:// repositories, not {}",
                            source.display
                        ),
                    ));
                }
                let explicit_secret = raw.secret.is_some();
                let explicit_username = raw.username.is_some();
                let secret = raw.secret.unwrap_or_else(|| DEFAULT_SECRET.to_string());
                let username = raw.username.unwrap_or_else(|| DEFAULT_USERNAME.to_string());
                for (field, v) in [
                    ("/connection", &connection),
                    ("/secret", &secret),
                    ("/username", &username),
                ] {
                    if v.is_empty() || v.len() > 256 || v.chars().any(|c| c.is_control()) {
                        return Err(ConfigError::new(
                            field,
                            "must be 1 to 256 bytes without control characters",
                        ));
                    }
                }
                Some(Credential {
                    connection,
                    secret,
                    username,
                    explicit_secret,
                    explicit_username,
                })
            }
        };
        let spares = raw.spares.unwrap_or(DEFAULT_SPARES);
        if spares > MAX_SPARES {
            return Err(ConfigError::new(
                "/spares",
                format!("{spares} is over {MAX_SPARES} (MAX_SPARES)"),
            ));
        }
        Ok(Config {
            source,
            mode,
            base,
            branch_prefix,
            timeout: Duration::from_secs(timeout_s),
            min_free_mb: raw.min_free_mb.unwrap_or(DEFAULT_MIN_FREE_MB),
            spares,
            env: raw.env,
            credential,
        })
    }
}

/// The mode a config writes, empty for none (validate kind `resource_mode`).
pub fn written_mode(value: &Value) -> String {
    value
        .get("mode")
        .and_then(Value::as_str)
        .and_then(Mode::parse)
        .map(|m| m.as_str().to_string())
        .unwrap_or_default()
}

/// Checks a branch name the way that matters before git sees it: no option
/// injection, no ref syntax, bounded; git's own check comes after.
pub fn check_branch(field: &str, name: &str) -> Result<(), RpcError> {
    if !branch_ok(name) {
        return Err(invalid(format!(
            "{field}: `{name}` is not a valid branch name"
        )));
    }
    Ok(())
}

/// [`check_branch`]'s test.
fn branch_ok(name: &str) -> bool {
    let bad = name.is_empty()
        || name.len() > 200
        || name.starts_with('-')
        || name.starts_with('/')
        || name.ends_with('/')
        || name.ends_with(".lock")
        || name.ends_with('.')
        || name.contains("..")
        || name.contains("//")
        || name.contains("@{")
        || name == "HEAD"
        || name
            .chars()
            .any(|c| c.is_control() || c.is_whitespace() || "~^:?*[\\".contains(c));
    !bad
}

/// Reads the repository: a URL of an allowed scheme, `user@host:path`, or a path.
pub fn source(repository: &str, config_dir: Option<&Path>) -> Result<Source, RpcError> {
    checked_source(repository, config_dir)
        .map_err(|why| invalid(format!("git resource config: repository {why}")))
}

/// [`source`], its error saying what is wrong with the repository.
fn checked_source(repository: &str, config_dir: Option<&Path>) -> Result<Source, String> {
    let r = repository.trim();
    if r.is_empty() {
        return Err("is empty".into());
    }
    if r.len() > 2048 || r.starts_with('-') || r.chars().any(|c| c.is_control()) {
        return Err("is not a usable URL or path".into());
    }
    let url = if let Some((scheme, _)) = r.split_once("://") {
        match scheme {
            "https" | "http" | "ssh" | "git" | "file" => r.to_string(),
            other => {
                return Err(format!(
                    "scheme `{other}` is not https, http, ssh, git or file"
                ))
            }
        }
    } else if r.contains("::") {
        return Err("names a remote helper (`<transport>::`), which is refused".into());
    } else if is_scp_like(r) || Path::new(r).is_absolute() {
        r.to_string()
    } else {
        let Some(dir) = config_dir else {
            return Err(format!(
                "`{r}` is a relative path and there is no config directory to resolve it against"
            ));
        };
        dir.join(r).to_string_lossy().into_owned()
    };
    let display = redact(&url);
    Ok(Source {
        key: key(&url),
        display,
        url,
    })
}

/// `user@host:path` (git's scp-like ssh syntax): a colon before any slash.
fn is_scp_like(r: &str) -> bool {
    match (r.find(':'), r.find('/')) {
        (Some(colon), slash) => {
            colon > 0 && slash.is_none_or(|s| colon < s) && !r[..colon].contains('\\')
        }
        _ => false,
    }
}

/// The URL with its userinfo replaced by `***`.
pub fn redact(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_string();
    };
    let end = rest.find('/').unwrap_or(rest.len());
    match rest[..end].rfind('@') {
        Some(at) => format!("{scheme}://***@{}", &rest[at + 1..]),
        None => url.to_string(),
    }
}

/// A name safe in a path: `[A-Za-z0-9._-]`, at most `max` bytes, never `.` or `..`.
pub fn slug(text: &str, max: usize) -> String {
    let mut s: String = text
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '-'
            }
        })
        .take(max)
        .collect();
    s = s.trim_matches('-').to_string();
    if s.is_empty() {
        s.push('x');
    }
    s
}

/// The first 8 hex digits of the SHA-256 of `text`.
pub fn short_hash(text: &str) -> String {
    let digest = Sha256::digest(text.as_bytes());
    digest.iter().take(4).map(|b| format!("{b:02x}")).collect()
}

fn key(url: &str) -> String {
    let trimmed = url.trim_end_matches('/');
    let last = trimmed
        .rsplit(['/', ':'])
        .next()
        .unwrap_or(trimmed)
        .trim_end_matches(".git");
    format!("{}-{}", slug(last, 32), short_hash(trimmed))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use serde_json::json;

    #[test]
    fn repositories_of_each_kind_and_refusals() {
        let s = source("https://bot:s3cret@example.com/acme/api.git", None).unwrap();
        assert_eq!(s.display, "https://***@example.com/acme/api.git");
        assert!(s.key.starts_with("api-"), "{}", s.key);
        assert!(source("ssh://git@example.com/acme/api", None).is_ok());
        assert!(source("git@example.com:acme/api.git", None).is_ok());
        assert!(source("file:///srv/r.git", None).is_ok());
        assert_eq!(
            source("r.git", Some(Path::new("/etc/oc"))).unwrap().url,
            "/etc/oc/r.git"
        );
        for bad in ["ext::sh -c evil", "ftp://x/y", "-uhack", "rel/path", ""] {
            assert!(source(bad, None).is_err(), "{bad}");
        }
    }

    #[test]
    fn configs_are_strict() {
        let c = Config::parse(&json!({"repository": "/srv/r.git"}), None).unwrap();
        assert_eq!(c.mode, Mode::Work);
        assert_eq!(c.branch_prefix, "oc/");
        let e = Config::parse(&json!({"repository": "/r", "extra": 1}), None).unwrap_err();
        assert!(e.is(Code::Invalid));
        assert!(Config::parse(&json!({"repository": "/r", "mode": "lent"}), None).is_err());
        assert!(Config::parse(&json!({"repository": "/r", "env": {"PATH": "/x"}}), None).is_err());
        assert!(
            Config::parse(&json!({"repository": "/r", "env": {"GIT_DIR": "/x"}}), None).is_err()
        );
        assert!(Config::parse(&json!({"repository": "/r", "timeout_s": 0}), None).is_err());
        assert!(Config::parse(&json!({"repository": "/r", "base": "a..b"}), None).is_err());
        // Each error names its field.
        for (config, pointer) in [
            (json!({"repository": "/r", "extra": 1}), "/extra"),
            (json!({"repository": "/r", "timeout_s": "10"}), "/timeout_s"),
            (json!({"repository": "/r", "timeout_s": 0}), "/timeout_s"),
            (json!({"repository": "/r", "mode": "lent"}), "/mode"),
            (
                json!({"repository": "/r", "env": {"PATH": "/x"}}),
                "/env/PATH",
            ),
            (
                json!({"repository": "/r", "env": {"GIT_X": 1}}),
                "/env/GIT_X",
            ),
            (json!({"repository": "ftp://x/y"}), "/repository"),
            (json!({"repository": "/r", "secret": "s"}), "/secret"),
            (
                json!({"repository": "/r", "connection": "gh"}),
                "/connection",
            ),
            (json!({"mode": "work"}), "/repository"),
            (json!([]), ""),
        ] {
            let e = Config::check(&config, None).unwrap_err();
            assert_eq!(e.pointer, pointer, "{config}: {e}");
        }
        let e =
            Config::parse(&json!({"repository": "/r", "timeout_s": "s3cret"}), None).unwrap_err();
        assert_eq!(
            e.message,
            "git resource config: /timeout_s: must be a whole, non-negative number"
        );
        assert_eq!(written_mode(&json!({"mode": "clone"})), "fresh");
        assert_eq!(written_mode(&json!({})), "");
    }

    #[test]
    fn branch_names_cannot_inject() {
        for bad in ["-b", "a b", "x.lock", "a..b", "a:b", "HEAD", "", "/a"] {
            assert!(check_branch("branch", bad).is_err(), "{bad}");
        }
        for good in ["main", "fix/12", "oc/w-1", "release-1.2"] {
            assert!(check_branch("branch", good).is_ok(), "{good}");
        }
        assert_eq!(slug("../w 1", 40), "w-1");
        assert_eq!(slug("..", 40), "x");
    }
}
