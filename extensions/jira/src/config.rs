//! The `configure` entries and the `jira` connection's config.
//!
//! An entry of type `jira` has the config
//!
//! ```json
//! {"projects": ["PROJ"], "agent_account_id": "5b10ac8d82e05b22cc7d4ef5",
//!  "statuses": ["Ready for agent"], "labels": ["agent"], "path": "/jira/custom"}
//! ```
//!
//! `projects` (project keys) and `agent_account_id` (the Atlassian account whose
//! assignment starts Work) are required; `statuses` and `labels` are further
//! triggers; `path` defaults to `/jira/<scope>/<entry>` and stays under `/jira`.
//! `reconcile_interval_s` (seconds between reconcile scans, default
//! [`DEFAULT_RECONCILE_INTERVAL_S`], 0 off, at most a day) sets how often the
//! projects' issues are polled for changes a webhook did not bring.
//! `settable_fields` lists the field IDs `jira.set_fields` may set (none by default).
//!
//! A `jira` connection's config is `{"base_url": "https://SITE.atlassian.net",
//! "email": "bot@example.com"}`; its secrets are `api_token` (Basic auth with the
//! email) or `bearer_token`, and `webhook_secret`.

use protocol::wire::{ConfigureParams, ConfigureResult};
use protocol::RpcError;
use serde::Deserialize;
use serde_json::Value;

use crate::{FAMILY, NAME};

pub use sdk::config::ConfigError;
use sdk::entries;

/// The request path prefix every entry's path stays under.
pub const PATH_PREFIX: &str = "/jira";
/// Seconds between reconcile scans when the entry does not say.
pub const DEFAULT_RECONCILE_INTERVAL_S: u64 = 300;
/// The longest `reconcile_interval_s` (a day).
pub const MAX_RECONCILE_INTERVAL_S: u64 = 86_400;
/// The most project keys, statuses or labels one entry lists.
pub const MAX_LIST: usize = 100;

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawEntry {
    #[serde(default)]
    projects: Vec<String>,
    #[serde(default)]
    agent_account_id: String,
    #[serde(default)]
    statuses: Vec<String>,
    #[serde(default)]
    labels: Vec<String>,
    #[serde(default)]
    path: Option<String>,
    #[serde(default)]
    reconcile_interval_s: Option<u64>,
    #[serde(default)]
    settable_fields: Vec<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawConnection {
    #[serde(default)]
    base_url: Option<String>,
    #[serde(default)]
    email: Option<String>,
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
    /// Project keys (upper case).
    pub projects: Vec<String>,
    /// The agent's Atlassian account ID.
    pub agent_account_id: String,
    /// Status names that start Work.
    pub statuses: Vec<String>,
    /// Labels that start Work.
    pub labels: Vec<String>,
    /// The request path, when one is written.
    pub path: Option<String>,
    /// Seconds between reconcile scans (0: off).
    pub reconcile_interval_s: u64,
    /// The field IDs `jira.set_fields` may set on this entry's issues (`duedate`,
    /// `customfield_10016`); none by default.
    pub settable_fields: Vec<String>,
}

impl ParsedConfig {
    /// What the entry sets up, in one line.
    pub fn describe(&self) -> String {
        let path = self
            .path
            .clone()
            .unwrap_or_else(|| format!("{PATH_PREFIX}/<scope>/<entry>"));
        let mut line = format!(
            "receives Jira webhooks at {path} for {}; issues assigned to {} start Work",
            self.projects.join(", "),
            self.agent_account_id
        );
        if !self.statuses.is_empty() {
            line.push_str(&format!(", or moved to {}", self.statuses.join(", ")));
        }
        if !self.labels.is_empty() {
            line.push_str(&format!(", or labelled {}", self.labels.join(", ")));
        }
        line
    }
}

/// A Jira project key: an upper-case letter, then upper-case letters, digits or `_`.
pub fn is_project_key(key: &str) -> bool {
    key.len() <= 32
        && key.as_bytes().first().is_some_and(u8::is_ascii_uppercase)
        && key
            .bytes()
            .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_')
}

/// An issue key: a project key, `-`, a number (`PROJ-123`).
pub fn is_issue_key(key: &str) -> bool {
    key.rsplit_once('-').is_some_and(|(p, n)| {
        is_project_key(p) && !n.is_empty() && n.len() <= 12 && n.bytes().all(|b| b.is_ascii_digit())
    })
}

/// A Jira field ID: a lower-case letter, then lower-case letters, digits or `_`
/// (`duedate`, `priority`, `customfield_10016`), at most 64 bytes.
pub fn is_field_id(id: &str) -> bool {
    id.len() <= 64
        && id.as_bytes().first().is_some_and(u8::is_ascii_lowercase)
        && id
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
}

fn list(
    raw: Vec<String>,
    field: &str,
    check: impl Fn(&str) -> Option<&'static str>,
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
        if v.is_empty() || v.len() > 255 || v.chars().any(char::is_control) {
            return Err(ConfigError::new(
                format!("/{field}/{i}"),
                "must be one line of 1 to 255 bytes",
            ));
        }
        if let Some(why) = check(v) {
            return Err(ConfigError::new(format!("/{field}/{i}"), why));
        }
        if !out.iter().any(|o| o == v) {
            out.push(v.to_string());
        }
    }
    Ok(out)
}

/// Parses an entry's config alone.
pub fn parse_entry(config: &Value) -> Result<ParsedConfig, ConfigError> {
    let raw: RawEntry = read(config)?;
    if raw.projects.is_empty() {
        return Err(ConfigError::new(
            "/projects",
            "is required: the project keys whose issues this entry takes (PROJ)",
        ));
    }
    let projects = list(raw.projects, "projects", |k| {
        (!is_project_key(k))
            .then_some("must be a project key (upper-case letters, digits, _; PROJ)")
    })?;
    let agent = raw.agent_account_id.trim();
    if agent.is_empty() || agent.len() > 128 || !agent.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(ConfigError::new(
            "/agent_account_id",
            "is required: the Atlassian account ID of the agent's user (printable ASCII, at most 128 bytes)",
        ));
    }
    let statuses = list(raw.statuses, "statuses", |_| None)?;
    let labels = list(raw.labels, "labels", |l| {
        l.contains(' ')
            .then_some("must not contain a space (Jira labels cannot)")
    })?;
    let path = match raw.path {
        None => None,
        Some(p) => Some(
            entries::normalize_path(&p, PATH_PREFIX).map_err(|m| ConfigError::new("/path", m))?,
        ),
    };
    let settable_fields = list(raw.settable_fields, "settable_fields", |f| {
        (!is_field_id(f)).then_some(
            "must be a Jira field ID (lower-case letters, digits, _: duedate, customfield_10016)",
        )
    })?;
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
        reconcile_interval_s,
        projects,
        agent_account_id: agent.to_string(),
        statuses,
        labels,
        path,
        settable_fields,
    })
}

/// A connection's config, as parsed.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ConnectionConfig {
    /// The site's base URL, without a trailing `/`.
    pub base_url: String,
    /// The account email for Basic auth (with `api_token`).
    pub email: Option<String>,
}

/// Checks a `jira` connection's config: `base_url` (required) is an http or https
/// URL; `email`, when given, looks like one.
pub fn check_connection_config(config: &Value) -> Result<ConnectionConfig, ConfigError> {
    let raw: RawConnection = read(config)?;
    let url = raw.base_url.unwrap_or_default();
    let url = url.trim().trim_end_matches('/');
    if url.is_empty() {
        return Err(ConfigError::new(
            "/base_url",
            "is required: the Jira Cloud site, https://SITE.atlassian.net",
        ));
    }
    protocol::wire::check_display_url("base_url", url)
        .map_err(|e| ConfigError::new("/base_url", format!("`{url}`: {}", e.reason)))?;
    let email = match raw.email.as_deref().map(str::trim) {
        None | Some("") => None,
        Some(e) if e.contains('@') && e.len() <= 254 && !e.chars().any(char::is_whitespace) => {
            Some(e.to_string())
        }
        Some(_) => return Err(ConfigError::new("/email", "is not an email address")),
    };
    Ok(ConnectionConfig {
        base_url: url.to_string(),
        email,
    })
}

/// One configured entry, in force until the next configure: its `config` is what
/// it takes, its source `jira/<scope_id>/<entry>`.
pub type EntryConfig = entries::Registered<ParsedConfig>;

/// What the entries are, for [`entries::register`].
const KIND: entries::Kind<'static> = entries::Kind {
    name: NAME,
    path_prefix: PATH_PREFIX,
    connection: "a jira connection",
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
        entries::declare(&self.entries, NAME, &[FAMILY], |c| c.reconcile_interval_s)
    }

    /// The entry whose path is the longest that covers `request_path`.
    pub fn entry_for(&self, request_path: &str) -> Option<&EntryConfig> {
        entries::longest_cover(&self.entries, |e| &e.path, request_path)
    }
}
