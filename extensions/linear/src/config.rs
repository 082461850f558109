//! The `configure` entries and the `linear` connection's config.
//!
//! An entry of type `linear`:
//!
//! ```json
//! {"teams": ["ENG"], "agent_user": "2e1c…", "states": ["Todo"], "labels": ["agent"],
//!  "mention": "@conduit", "path": "/linear/acme/issues"}
//! ```
//!
//! `teams` (required, the team keys whose issues are taken) and `agent_user`
//! (required, the Linear user ID or email whose assignment starts Work) are required;
//! `states` (workflow state names: an issue moved into one starts Work), `labels`
//! (label names: an issue given one starts Work) and `mention` (text a comment
//! carries to call the agent in), `reconcile_interval_s` (seconds between
//! reconcile scans, default 300, 0 off, at most a day) and `manage_webhook` (default
//! false: the `linear.webhooks` task keeps a webhook per team pointing at
//! `public_url` + `path`, [`crate::hooks`]) are optional; `path` defaults to
//! `/linear/<scope>/<entry>` and stays under `/linear`.
//!
//! A `linear` connection's config is `{"api_url": "https://api.linear.app/graphql"}`
//! (optional); its secrets are `api_key` (a personal API key or an OAuth token, sent
//! as `Authorization`) and `webhook_secret` (signs webhooks).

use protocol::wire::{ConfigureParams, ConfigureResult};
use protocol::RpcError;
use serde::Deserialize;
use serde_json::Value;

use crate::{FAMILY, NAME};

pub use sdk::config::ConfigError;
use sdk::entries;

/// The request path prefix every entry's path stays under.
pub const PATH_PREFIX: &str = "/linear";
/// The default GraphQL endpoint.
pub const DEFAULT_API_URL: &str = "https://api.linear.app/graphql";
const MAX_PATH_BYTES: usize = 512;
/// The most teams, states or labels an entry names.
pub const MAX_LIST: usize = 100;
const MAX_NAME_BYTES: usize = 200;
/// Seconds between reconcile scans when the entry does not say.
pub const DEFAULT_RECONCILE_INTERVAL_S: u64 = 300;
/// The longest `reconcile_interval_s` (a day).
pub const MAX_RECONCILE_INTERVAL_S: u64 = 86_400;

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawEntry {
    #[serde(default)]
    path: Option<String>,
    #[serde(default)]
    teams: Vec<String>,
    #[serde(default)]
    agent_user: Option<String>,
    #[serde(default)]
    states: Vec<String>,
    #[serde(default)]
    labels: Vec<String>,
    #[serde(default)]
    mention: Option<String>,
    #[serde(default)]
    reconcile_interval_s: Option<u64>,
    #[serde(default)]
    manage_webhook: Option<bool>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawConnection {
    #[serde(default)]
    api_url: Option<String>,
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
    /// The request path, when one is written.
    pub path: Option<String>,
    /// Team keys (uppercase), at least one.
    pub teams: Vec<String>,
    /// The agent's Linear user (ID or email).
    pub agent_user: String,
    /// Workflow state names that start Work.
    pub states: Vec<String>,
    /// Label names that start Work.
    pub labels: Vec<String>,
    /// Text in a comment that calls the agent in.
    pub mention: Option<String>,
    /// Seconds between reconcile scans (0: off; default
    /// [`DEFAULT_RECONCILE_INTERVAL_S`]).
    pub reconcile_interval_s: u64,
    /// True when the `linear.webhooks` task keeps the teams' webhooks pointing here
    /// ([`crate::hooks`]).
    pub manage_webhook: bool,
}

impl ParsedConfig {
    /// What the entry sets up, in one line.
    pub fn describe(&self) -> String {
        let path = self
            .path
            .clone()
            .unwrap_or_else(|| format!("{PATH_PREFIX}/<scope>/<entry>"));
        let mut line = format!(
            "receives Linear webhooks at {path} for team(s) {}: issues assigned to {}",
            self.teams.join(", "),
            self.agent_user
        );
        if !self.states.is_empty() {
            line.push_str(&format!(", moved to {}", self.states.join(" or ")));
        }
        if !self.labels.is_empty() {
            line.push_str(&format!(", labelled {}", self.labels.join(" or ")));
        }
        if self.manage_webhook {
            line.push_str("; its webhook is managed (manage_webhook)");
        }
        line
    }
}

/// A Linear team key: 1 to 10 ASCII letters, digits or `_` (read uppercase).
pub fn is_team_key(key: &str) -> bool {
    !key.is_empty()
        && key.len() <= 10
        && key.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

fn names(list: Vec<String>, field: &str) -> Result<Vec<String>, ConfigError> {
    if list.len() > MAX_LIST {
        return Err(ConfigError::new(
            format!("/{field}"),
            format!("names more than {MAX_LIST}"),
        ));
    }
    let mut out: Vec<String> = Vec::new();
    for (i, s) in list.iter().enumerate() {
        let s = s.trim();
        if s.is_empty() || s.len() > MAX_NAME_BYTES || s.chars().any(char::is_control) {
            return Err(ConfigError::new(
                format!("/{field}/{i}"),
                format!("must be a name of 1 to {MAX_NAME_BYTES} bytes on one line"),
            ));
        }
        if !out.iter().any(|o| o.eq_ignore_ascii_case(s)) {
            out.push(s.to_string());
        }
    }
    Ok(out)
}

/// Parses an entry's config alone (no scope, name or connection).
pub fn parse_entry(config: &Value) -> Result<ParsedConfig, ConfigError> {
    let raw: RawEntry = read(config)?;
    let path = match raw.path {
        None => None,
        Some(s) => Some(normalize_path(&s).map_err(|m| ConfigError::new("/path", m))?),
    };
    if raw.teams.is_empty() {
        return Err(ConfigError::new(
            "/teams",
            "is required: the keys of the Linear teams whose issues are taken (ENG)",
        ));
    }
    let teams = names(raw.teams, "teams")?;
    for (i, t) in teams.iter().enumerate() {
        if !is_team_key(t) {
            return Err(ConfigError::new(
                format!("/teams/{i}"),
                "must be a team key (letters and digits, as in ENG-123's ENG)",
            ));
        }
    }
    let teams = teams.into_iter().map(|t| t.to_ascii_uppercase()).collect();
    let agent_user = raw
        .agent_user
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .ok_or_else(|| {
            ConfigError::new(
                "/agent_user",
                "is required: the Linear user (ID or email) whose assignment starts Work",
            )
        })?;
    if agent_user.len() > MAX_NAME_BYTES || agent_user.chars().any(char::is_whitespace) {
        return Err(ConfigError::new(
            "/agent_user",
            "must be a Linear user ID or email, without spaces",
        ));
    }
    let mention = match raw.mention.map(|m| m.trim().to_string()) {
        None => None,
        Some(m) if m.is_empty() || m.len() > MAX_NAME_BYTES => {
            return Err(ConfigError::new(
                "/mention",
                format!("must be 1 to {MAX_NAME_BYTES} bytes"),
            ))
        }
        Some(m) => Some(m),
    };
    let reconcile_interval_s = raw
        .reconcile_interval_s
        .unwrap_or(DEFAULT_RECONCILE_INTERVAL_S);
    if reconcile_interval_s > MAX_RECONCILE_INTERVAL_S {
        return Err(ConfigError::new(
            "/reconcile_interval_s",
            format!("must be 0 (off) to {MAX_RECONCILE_INTERVAL_S} seconds"),
        ));
    }
    Ok(ParsedConfig {
        path,
        teams,
        agent_user,
        states: names(raw.states, "states")?,
        labels: names(raw.labels, "labels")?,
        mention,
        reconcile_interval_s,
        manage_webhook: raw.manage_webhook.unwrap_or(false),
    })
}

fn normalize_path(path: &str) -> Result<String, String> {
    if path.len() > MAX_PATH_BYTES {
        return Err(format!("is longer than {MAX_PATH_BYTES} bytes"));
    }
    let trimmed = path.trim_end_matches('/');
    if !trimmed.starts_with(&format!("{PATH_PREFIX}/")) {
        return Err(format!("`{path}` is not under {PATH_PREFIX}/"));
    }
    if trimmed
        .chars()
        .any(|c| c.is_whitespace() || c.is_control() || matches!(c, '?' | '#' | '%' | '\\'))
        || trimmed
            .split('/')
            .skip(1)
            .any(|seg| seg.is_empty() || seg == "." || seg == "..")
    {
        return Err(format!(
            "`{path}` has whitespace, a control character, `?`, `#`, `%`, `\\`, or an empty, `.` or `..` segment"
        ));
    }
    Ok(trimmed.to_string())
}

/// Checks a `linear` connection's config: `api_url`, when given, is an http(s) URL.
pub fn check_connection_config(config: &Value) -> Result<(), ConfigError> {
    let raw: RawConnection = read(config)?;
    if let Some(url) = &raw.api_url {
        protocol::wire::check_display_url("api_url", url)
            .map_err(|e| ConfigError::new("/api_url", format!("`{url}`: {}", e.reason)))?;
    }
    Ok(())
}

/// The `api_url` of a connection's config (default [`DEFAULT_API_URL`]).
pub fn api_url(config: &Value) -> String {
    config
        .get("api_url")
        .and_then(Value::as_str)
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .unwrap_or(DEFAULT_API_URL)
        .to_string()
}

/// One configured entry, in force until the next configure: its `config` is the
/// entry's own, its source `linear/<scope>/<entry>`.
pub type EntryConfig = entries::Registered<ParsedConfig>;

/// What the entries are, for [`entries::register`].
const KIND: entries::Kind<'static> = entries::Kind {
    name: NAME,
    path_prefix: PATH_PREFIX,
    connection: "a linear connection (api_key, webhook_secret)",
    named: true,
};

/// The entries of one configure.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Registry {
    /// The entries, in configure order.
    pub entries: Vec<EntryConfig>,
}

impl Registry {
    /// Parses the entries of a configure; a broken entry fails it all, naming its
    /// scope, entry and field.
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
