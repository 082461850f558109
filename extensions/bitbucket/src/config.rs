//! The `configure` entries and the `bitbucket` connection's config, parsed with serde
//! (unknown fields refused) and checked, each error naming its field by a JSON pointer.
//!
//! An entry of type `bitbucket` has the config
//!
//! ```json
//! {"repositories": ["acme/widgets"], "mention": "@conduit",
//!  "agent_account_id": "557058:1234", "jira_projects": ["PROJ"], "path": "/bitbucket/x"}
//! ```
//!
//! `repositories` (`workspace/repo_slug`) and `mention` are required;
//! `agent_account_id` is the agent's own account (its comments and reviews wake
//! nothing; `@{account_id}` mentions it too); `jira_projects` makes a pull request
//! whose source branch names an issue of one of them (`PROJ-123`) start Work; `path`
//! defaults to `/bitbucket/<scope>/<entry>` and stays under `/bitbucket`;
//! `manage_webhook` (default false) keeps a webhook on each repository
//! ([`crate::hooks`]); `reconcile_interval_s` (seconds between reconcile scans,
//! default [`DEFAULT_RECONCILE_INTERVAL_S`], 0 off, at most a day) sets how often
//! the repositories' pull requests are polled for changes a webhook did not bring
//! ([`crate::reconcile`]).
//!
//! A `bitbucket` connection's config is `{"api_url": "https://api.bitbucket.org/2.0",
//! "username": "bot", "git_url": "https://bitbucket.org"}` (all optional; `git_url`
//! is where repositories are cloned from, for runs' own git credential); its secrets are `token` (a workspace or
//! repository access token, Bearer) or `app_password` (Basic with the username), and
//! `webhook_secret`.

use protocol::wire::{ConfigureParams, ConfigureResult};
use protocol::RpcError;
use serde::Deserialize;
use serde_json::Value;

use crate::{FAMILIES, NAME};

pub use sdk::config::ConfigError;
use sdk::entries;

/// The request path prefix every entry's path stays under.
pub const PATH_PREFIX: &str = "/bitbucket";
/// The API a connection uses when it names none.
pub const DEFAULT_API_URL: &str = "https://api.bitbucket.org/2.0";
/// The most repositories or Jira projects one entry lists.
pub const MAX_LIST: usize = 100;
/// The longest mention, in bytes.
pub const MAX_MENTION_BYTES: usize = 100;
/// Seconds between reconcile scans when the entry does not say.
pub const DEFAULT_RECONCILE_INTERVAL_S: u64 = 300;
/// The longest `reconcile_interval_s` (a day).
pub const MAX_RECONCILE_INTERVAL_S: u64 = 86_400;

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawEntry {
    #[serde(default)]
    repositories: Vec<String>,
    #[serde(default)]
    mention: String,
    #[serde(default)]
    agent_account_id: Option<String>,
    #[serde(default)]
    jira_projects: Vec<String>,
    #[serde(default)]
    path: Option<String>,
    #[serde(default)]
    manage_webhook: bool,
    #[serde(default)]
    reconcile_interval_s: Option<u64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawConnection {
    #[serde(default)]
    api_url: Option<String>,
    #[serde(default)]
    username: Option<String>,
    #[serde(default)]
    git_url: Option<String>,
}

fn read<T: Default + serde::de::DeserializeOwned>(config: &Value) -> Result<T, ConfigError> {
    match config {
        Value::Null => Ok(T::default()),
        Value::Object(_) => sdk::config::parse(config),
        _ => Err(ConfigError::whole("must be an object")),
    }
}

/// An entry's own config, as parsed.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ParsedConfig {
    /// `workspace/repo_slug`, lower case.
    pub repositories: Vec<String>,
    /// How a comment mentions the agent (`@conduit`).
    pub mention: String,
    /// The agent's Atlassian account ID, when given.
    pub agent_account_id: Option<String>,
    /// Jira project keys (upper case) whose issue keys in a branch start Work.
    pub jira_projects: Vec<String>,
    /// The request path, when one is written.
    pub path: Option<String>,
    /// Keep a webhook on each repository pointing at `public_url` + path (the
    /// `bitbucket.webhooks` task).
    pub manage_webhook: bool,
    /// Seconds between reconcile scans (0: off).
    pub reconcile_interval_s: u64,
}

impl ParsedConfig {
    /// What the entry sets up, in one line.
    pub fn describe(&self) -> String {
        let path = self
            .path
            .clone()
            .unwrap_or_else(|| format!("{PATH_PREFIX}/<scope>/<entry>"));
        let mut line = format!(
            "receives Bitbucket webhooks at {path} for {}; pull request comments mentioning {} start Work",
            self.repositories.join(", "),
            self.mention
        );
        if !self.jira_projects.is_empty() {
            line.push_str(&format!(
                ", and pull requests from branches naming an issue of {}",
                self.jira_projects.join(", ")
            ));
        }
        if self.manage_webhook {
            line.push_str("; keeps each repository's webhook (manage_webhook)");
        }
        line
    }

    /// Whether `repository` (`workspace/repo_slug`, any case) is one of the entry's.
    pub fn takes(&self, repository: &str) -> bool {
        let r = repository.to_ascii_lowercase();
        self.repositories.contains(&r)
    }
}

/// A Bitbucket workspace or repository slug: 1 to 100 of letters, digits, `-`, `_`, `.`.
pub fn is_slug(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 100
        && s != "."
        && s != ".."
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
}

/// `workspace/repo_slug`.
pub fn is_repository(s: &str) -> bool {
    s.split_once('/')
        .is_some_and(|(w, r)| is_slug(w) && is_slug(r))
}

/// A Jira project key: an upper-case letter, then upper-case letters, digits or `_`.
pub fn is_project_key(key: &str) -> bool {
    key.len() <= 32
        && key.as_bytes().first().is_some_and(u8::is_ascii_uppercase)
        && key
            .bytes()
            .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_')
}

fn list(
    raw: Vec<String>,
    field: &str,
    check: impl Fn(&str) -> Option<&'static str>,
    normalize: impl Fn(&str) -> String,
) -> Result<Vec<String>, ConfigError> {
    if raw.len() > MAX_LIST {
        return Err(ConfigError::new(
            format!("/{field}"),
            format!("lists more than {MAX_LIST} (MAX_LIST)"),
        ));
    }
    let mut out: Vec<String> = Vec::new();
    for (i, v) in raw.iter().enumerate() {
        let v = v.trim();
        if let Some(why) = check(v) {
            return Err(ConfigError::new(format!("/{field}/{i}"), why));
        }
        let v = normalize(v);
        if !out.contains(&v) {
            out.push(v);
        }
    }
    Ok(out)
}

/// Parses an entry's config alone.
pub fn parse_entry(config: &Value) -> Result<ParsedConfig, ConfigError> {
    let raw: RawEntry = read(config)?;
    if raw.repositories.is_empty() {
        return Err(ConfigError::new(
            "/repositories",
            "is required: the repositories whose webhooks this entry takes (workspace/repo_slug)",
        ));
    }
    let repositories = list(
        raw.repositories,
        "repositories",
        |r| {
            (!is_repository(r)).then_some(
                "must be workspace/repo_slug (letters, digits, -, _ and . on each side of one /)",
            )
        },
        str::to_ascii_lowercase,
    )?;
    let mention = raw.mention.trim();
    if mention.is_empty()
        || mention.len() > MAX_MENTION_BYTES
        || mention.chars().any(|c| c.is_whitespace() || c.is_control())
    {
        return Err(ConfigError::new(
            "/mention",
            format!("is required: how a comment mentions the agent (@conduit), one word of at most {MAX_MENTION_BYTES} bytes"),
        ));
    }
    let agent_account_id = match raw.agent_account_id.as_deref().map(str::trim) {
        None | Some("") => None,
        Some(a) if a.len() <= 128 && a.bytes().all(|b| b.is_ascii_graphic()) => Some(a.to_string()),
        Some(_) => {
            return Err(ConfigError::new(
                "/agent_account_id",
                "must be an Atlassian account ID (printable ASCII, at most 128 bytes)",
            ))
        }
    };
    let jira_projects = list(
        raw.jira_projects,
        "jira_projects",
        |k| {
            (!is_project_key(k))
                .then_some("must be a Jira project key (upper-case letters, digits, _; PROJ)")
        },
        str::to_string,
    )?;
    let path = match raw.path {
        None => None,
        Some(p) => Some(
            entries::normalize_path(&p, PATH_PREFIX).map_err(|m| ConfigError::new("/path", m))?,
        ),
    };
    let reconcile_interval_s = raw
        .reconcile_interval_s
        .unwrap_or(DEFAULT_RECONCILE_INTERVAL_S);
    if reconcile_interval_s > MAX_RECONCILE_INTERVAL_S {
        return Err(ConfigError::new(
            "/reconcile_interval_s",
            format!(
                "must be 0 (off) to {MAX_RECONCILE_INTERVAL_S} seconds (MAX_RECONCILE_INTERVAL_S)"
            ),
        ));
    }
    Ok(ParsedConfig {
        repositories,
        mention: mention.to_string(),
        agent_account_id,
        jira_projects,
        path,
        manage_webhook: raw.manage_webhook,
        reconcile_interval_s,
    })
}

/// A connection's config, as parsed.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ConnectionConfig {
    /// The API's base URL, without a trailing `/`.
    pub api_url: String,
    /// The username for Basic auth (with `app_password`).
    pub username: Option<String>,
    /// The base URL repositories are cloned from, when given (else derived from
    /// `api_url`: [`crate::credential::git_base`]), without a trailing `/`.
    pub git_url: Option<String>,
}

/// Checks a `bitbucket` connection's config: `api_url` (default
/// [`DEFAULT_API_URL`]) is an http or https URL; `username`, when given, is a slug;
/// `git_url`, when given, is an http or https URL without a user or query.
pub fn check_connection_config(config: &Value) -> Result<ConnectionConfig, ConfigError> {
    let raw: RawConnection = read(config)?;
    let url = raw.api_url.unwrap_or_default();
    let url = match url.trim().trim_end_matches('/') {
        "" => DEFAULT_API_URL,
        u => u,
    };
    protocol::wire::check_display_url("api_url", url)
        .map_err(|e| ConfigError::new("/api_url", format!("`{url}`: {}", e.reason)))?;
    if !(url.starts_with("https://") || url.starts_with("http://")) || url.contains(['?', '#']) {
        return Err(ConfigError::new(
            "/api_url",
            format!("`{url}` is not an http or https URL without a query"),
        ));
    }
    let username = match raw.username.as_deref().map(str::trim) {
        None | Some("") => None,
        Some(u) if u.len() <= 255 && u.bytes().all(|b| b.is_ascii_graphic() && b != b':') => {
            Some(u.to_string())
        }
        Some(_) => {
            return Err(ConfigError::new(
                "/username",
                "must be a Bitbucket username (printable ASCII without `:`, at most 255 bytes)",
            ))
        }
    };
    let git_url = match raw
        .git_url
        .as_deref()
        .map(|u| u.trim().trim_end_matches('/'))
    {
        None | Some("") => None,
        Some(u) => {
            let ok = protocol::wire::check_display_url("git_url", u).is_ok()
                && (u.starts_with("https://") || u.starts_with("http://"))
                && !u.contains(['?', '#', '@']);
            if !ok {
                return Err(ConfigError::new(
                    "/git_url",
                    format!("`{u}` is not an http or https URL without a user or query"),
                ));
            }
            Some(u.to_string())
        }
    };
    Ok(ConnectionConfig {
        api_url: url.to_string(),
        username,
        git_url,
    })
}

/// One configured entry, in force until the next configure: its `config` is what
/// it takes, its source `bitbucket/<scope_id>/<entry>`.
pub type EntryConfig = entries::Registered<ParsedConfig>;

/// What the entries are, for [`entries::register`].
const KIND: entries::Kind<'static> = entries::Kind {
    name: NAME,
    path_prefix: PATH_PREFIX,
    connection: "a bitbucket connection",
    named: false,
};

/// The entries of one configure.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Registry {
    /// The entries, in configure order.
    pub entries: Vec<EntryConfig>,
}

impl Registry {
    /// Parses the entries of a configure; a broken entry fails it all.
    pub fn from_params(params: &ConfigureParams) -> Result<Registry, RpcError> {
        let kept = entries::register(params, &KIND, parse_entry, |c| c.path.clone())?;
        Ok(Registry { entries: kept })
    }

    /// The sources and request paths the entries register.
    pub fn configure_result(&self) -> ConfigureResult {
        entries::declare(&self.entries, NAME, &FAMILIES, |c| c.reconcile_interval_s)
    }

    /// The entry whose path is the longest that covers `request_path`.
    pub fn entry_for(&self, request_path: &str) -> Option<&EntryConfig> {
        entries::longest_cover(&self.entries, |e| &e.path, request_path)
    }
}
