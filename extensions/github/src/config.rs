//! The `configure` entries: one per repository webhook.
//!
//! An entry of type `github` has the config
//!
//! ```json
//! {"repository": "owner/name", "path": "/github/custom", "events": ["issues", "check_run"],
//!  "reconcile_interval_s": 300, "manage_webhook": false}
//! ```
//!
//! `repository` is required; `path` defaults to `/github/<scope_id>/<entry>` and
//! must stay under `/github`; `events` (the GitHub event names to accept)
//! defaults to all seven. `reconcile_interval_s` (default
//! [`DEFAULT_RECONCILE_INTERVAL_S`], 0 turns it off) is how often the webhook's
//! recent deliveries are read back for the ones that failed ([`crate::reconcile`]);
//! `manage_webhook` (default false) makes the `github.webhooks` task keep the
//! repository's webhook pointing here ([`crate::hooks`]). The entry must name a
//! connection of type `github`: its `webhook_secret` signs the deliveries.

use protocol::wire::{ConfigureParams, ConfigureResult, SourceDecl};
use protocol::RpcError;
use serde::Deserialize;
use serde_json::Value;

use crate::{Family, NAME, WEBHOOK_SECRET};

/// The webhook path prefix every entry's path stays under.
pub const PATH_PREFIX: &str = "/github";

/// The longest repository name accepted (`owner/name`), in bytes.
const MAX_REPOSITORY_BYTES: usize = 200;
/// The longest webhook path accepted, in bytes.
const MAX_PATH_BYTES: usize = 512;
/// Seconds between reconcile passes when an entry does not say.
pub const DEFAULT_RECONCILE_INTERVAL_S: u64 = 300;
/// The longest reconcile interval accepted (a week), in seconds.
pub const MAX_RECONCILE_INTERVAL_S: u64 = 7 * 24 * 3600;

pub use sdk::config::ConfigError;
use sdk::entries;

/// An entry's config as written (strict).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawEntry {
    #[serde(default)]
    repository: Option<String>,
    #[serde(default)]
    path: Option<String>,
    #[serde(default)]
    events: Option<Vec<String>>,
    #[serde(default)]
    reconcile_interval_s: Option<u64>,
    #[serde(default)]
    manage_webhook: Option<bool>,
}

/// A `github` connection's config as written (strict; `null` is `{}`).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawConnection {
    #[serde(default)]
    api_url: Option<String>,
    #[serde(default)]
    git_url: Option<String>,
    #[serde(default)]
    app_id: Option<RawAppId>,
    #[serde(default)]
    installation_id: Option<RawInstallationId>,
}

/// `app_id`: the App's ID as a number, or its client ID.
#[derive(Debug, Deserialize)]
#[serde(untagged, expecting = "must be a number or a non-empty string")]
enum RawAppId {
    Number(u64),
    Text(String),
}

/// `installation_id`: a number, or one written as text.
#[derive(Debug, Deserialize)]
#[serde(untagged, expecting = "must be a positive integer")]
enum RawInstallationId {
    Number(u64),
    Text(String),
}

/// Reads a config that is an object or `null` (read as `{}`).
fn read<T: Default + serde::de::DeserializeOwned>(config: &Value) -> Result<T, ConfigError> {
    match config {
        Value::Null => Ok(T::default()),
        Value::Object(_) => sdk::config::parse(config),
        _ => Err(ConfigError::whole("must be an object")),
    }
}

/// An entry's own config, as parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParsedConfig {
    /// The repository, `owner/name`, as written.
    pub repository: String,
    /// The webhook path, when one is written.
    pub path: Option<String>,
    /// The families to accept (`None`: all).
    pub events: Option<Vec<Family>>,
    /// Seconds between reconcile passes (0: none).
    pub reconcile_interval_s: u64,
    /// True when the `github.webhooks` task manages the repository's webhook.
    pub manage_webhook: bool,
    /// Whether the config names `reconcile_interval_s` (else it is the default, which
    /// a connection without an API credential turns off).
    pub reconcile_named: bool,
}

impl ParsedConfig {
    /// What the entry sets up, in one line.
    pub fn describe(&self) -> String {
        let events = match &self.events {
            None => "issues, issue_comment, pull_request, pull_request_review, \
                     pull_request_review_comment, check_run and check_suite"
                .into(),
            Some(list) => list
                .iter()
                .map(|f| f.github_event())
                .collect::<Vec<_>>()
                .join(", "),
        };
        let path = match &self.path {
            Some(p) => p.clone(),
            None => format!("{PATH_PREFIX}/<scope>/<entry>"),
        };
        let mut line = format!(
            "receives {events} webhooks of {} at {path}",
            self.repository
        );
        match self.reconcile_interval_s {
            0 => line.push_str(", without reconcile"),
            n => line.push_str(&format!(
                ", reconciled every {n} s (when the connection has a token or an App key)"
            )),
        }
        if self.manage_webhook {
            line.push_str(", managing the repository's webhook");
        }
        line
    }
}

/// One configured entry, in force until the next configure.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EntryConfig {
    /// The scope.
    pub scope_id: String,
    /// The entry's name within the scope.
    pub name: String,
    /// The connection whose `webhook_secret` signs its deliveries.
    pub connection: String,
    /// The repository, `owner/name`, as written.
    pub repository: String,
    /// The webhook path (without a trailing `/`).
    pub path: String,
    /// The families it accepts (`None`: all).
    pub events: Option<Vec<Family>>,
    /// Its source name, `github/<scope_id>/<entry>`.
    pub source: String,
    /// Seconds between reconcile passes (0: none).
    pub reconcile_interval_s: u64,
    /// True when the `github.webhooks` task manages the repository's webhook.
    pub manage_webhook: bool,
}

impl EntryConfig {
    /// Parses an entry's config alone (no scope, name or connection).
    pub fn parse_config(config: &Value) -> Result<ParsedConfig, ConfigError> {
        let raw: RawEntry = read(config)?;
        let repository = raw
            .repository
            .ok_or_else(|| ConfigError::new("/repository", "is required (owner/name)"))?
            .trim()
            .to_string();
        check_repository(&repository).map_err(|m| ConfigError::new("/repository", m))?;
        let path = match raw.path {
            None => None,
            Some(s) => Some(normalize_path(&s).map_err(|m| ConfigError::new("/path", m))?),
        };
        let events = match raw.events {
            None => None,
            Some(names) => {
                let mut families = Vec::new();
                for name in names {
                    let Some(family) = Family::from_github_event(&name) else {
                        return Err(ConfigError::new(
                            "/events",
                            format!(
                                "`{name}` is not an event this extension handles (issues, \
                                 issue_comment, pull_request, pull_request_review, \
                                 pull_request_review_comment, check_run, check_suite)"
                            ),
                        ));
                    };
                    if !families.contains(&family) {
                        families.push(family);
                    }
                }
                Some(families)
            }
        };
        let reconcile_named = raw.reconcile_interval_s.is_some();
        let reconcile_interval_s = match raw.reconcile_interval_s {
            None => DEFAULT_RECONCILE_INTERVAL_S,
            Some(n) if n <= MAX_RECONCILE_INTERVAL_S => n,
            Some(_) => {
                return Err(ConfigError::new(
                    "/reconcile_interval_s",
                    format!(
                        "must be a whole number of seconds from 0 (off) to \
                         {MAX_RECONCILE_INTERVAL_S}"
                    ),
                ))
            }
        };
        Ok(ParsedConfig {
            repository,
            path,
            events,
            reconcile_interval_s,
            manage_webhook: raw.manage_webhook.unwrap_or(false),
            reconcile_named,
        })
    }

    /// The GitHub events the entry takes, in manifest order (all seven when its
    /// config names none; `github.wait` is fed by no webhook event).
    pub fn github_events(&self) -> Vec<&'static str> {
        Family::ALL
            .into_iter()
            .filter(|f| !f.github_event().is_empty() && self.accepts(*f))
            .map(Family::github_event)
            .collect()
    }

    /// The repository's owner and name.
    pub fn owner_repo(&self) -> (&str, &str) {
        self.repository
            .split_once('/')
            .unwrap_or((self.repository.as_str(), ""))
    }

    /// True when the entry accepts `family`.
    pub fn accepts(&self, family: Family) -> bool {
        self.events
            .as_ref()
            .is_none_or(|list| list.contains(&family))
    }

    /// True when `full_name` (a payload's `repository.full_name`) is the entry's
    /// repository, compared case-insensitively as GitHub does.
    pub fn is_repository(&self, full_name: &str) -> bool {
        self.repository.eq_ignore_ascii_case(full_name)
    }
}

/// `owner/name`: both parts non-empty, of ASCII letters, digits, `-`, `_` and `.`.
fn check_repository(repository: &str) -> Result<(), String> {
    if repository.len() > MAX_REPOSITORY_BYTES {
        return Err(format!(
            "is longer than {MAX_REPOSITORY_BYTES} bytes (owner/name)"
        ));
    }
    let part_ok = |p: &str| {
        !p.is_empty()
            && p != "."
            && p != ".."
            && p.bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
    };
    match repository.split_once('/') {
        Some((owner, name)) if part_ok(owner) && part_ok(name) => Ok(()),
        _ => Err(format!("`{repository}` is not owner/name")),
    }
}

/// A written webhook path: absolute, under `/github`, without `.`/`..`
/// segments, query, fragment, whitespace or control characters; a trailing
/// `/` is dropped.
fn normalize_path(path: &str) -> Result<String, String> {
    let trimmed = path.trim_end_matches('/');
    if path.len() > MAX_PATH_BYTES {
        return Err(format!("is longer than {MAX_PATH_BYTES} bytes"));
    }
    if trimmed != PATH_PREFIX && !trimmed.starts_with(&format!("{PATH_PREFIX}/")) {
        return Err(format!("`{path}` is not under {PATH_PREFIX}/"));
    }
    if trimmed
        .chars()
        .any(|c| c.is_whitespace() || c.is_control() || matches!(c, '?' | '#' | '%' | '\\'))
    {
        return Err(format!(
            "`{path}` has whitespace, a control character, `?`, `#`, `%` or `\\`"
        ));
    }
    if trimmed
        .split('/')
        .skip(1)
        .any(|seg| seg.is_empty() || seg == "." || seg == "..")
    {
        return Err(format!("`{path}` has an empty, `.` or `..` segment"));
    }
    Ok(trimmed.to_string())
}

/// Checks a `github` connection's config (strict: an unknown field is refused):
/// `api_url` and `git_url`, when given, are http or https URLs; `app_id` and
/// `installation_id` come together.
pub fn check_connection_config(config: &Value) -> Result<(), ConfigError> {
    let raw: RawConnection = read(config)?;
    for (at, url) in [("/api_url", &raw.api_url), ("/git_url", &raw.git_url)] {
        if let Some(url) = url {
            protocol::wire::check_display_url(&at[1..], url)
                .map_err(|e| ConfigError::new(at, format!("`{url}`: {}", e.reason)))?;
        }
    }
    AppConfig::of(raw).map(|_| ())
}

/// A connection's GitHub App fields: `app_id` (or the App's client ID) and
/// `installation_id`. Its secret `private_key` holds the App's key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AppConfig {
    /// The App's ID (a number or the client ID, as text).
    pub app_id: String,
    /// The installation the connection acts as.
    pub installation_id: u64,
}

impl AppConfig {
    /// The App fields of a connection's config: `None` when it has neither. The
    /// error names the field (`/installation_id: must be a positive integer`).
    pub fn parse(config: &Value) -> Result<Option<AppConfig>, String> {
        read::<RawConnection>(config)
            .and_then(AppConfig::of)
            .map_err(|e| e.to_string())
    }

    fn of(raw: RawConnection) -> Result<Option<AppConfig>, ConfigError> {
        let app_id = match raw.app_id {
            None => None,
            Some(RawAppId::Number(n)) => Some(n.to_string()),
            Some(RawAppId::Text(s)) if !s.trim().is_empty() => Some(s.trim().to_string()),
            Some(RawAppId::Text(_)) => {
                return Err(ConfigError::new(
                    "/app_id",
                    "must be a number or a non-empty string",
                ))
            }
        };
        let positive = || ConfigError::new("/installation_id", "must be a positive integer");
        let installation_id = match raw.installation_id {
            None => None,
            Some(RawInstallationId::Number(n)) => Some(n),
            Some(RawInstallationId::Text(s)) => {
                Some(s.trim().parse::<u64>().map_err(|_| positive())?)
            }
        };
        if installation_id == Some(0) {
            return Err(positive());
        }
        match (app_id, installation_id) {
            (None, None) => Ok(None),
            (Some(app_id), Some(installation_id)) => Ok(Some(AppConfig {
                app_id,
                installation_id,
            })),
            (Some(_), None) => Err(ConfigError::new(
                "/installation_id",
                "is required with app_id (a GitHub App acts as one installation)",
            )),
            (None, Some(_)) => Err(ConfigError::new(
                "/app_id",
                "is required with installation_id",
            )),
        }
    }
}

/// The entries of one configure.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Registry {
    /// The entries, in the order configure listed them.
    pub entries: Vec<EntryConfig>,
}

impl Registry {
    /// Parses the entries of a configure. A broken entry fails it all, naming
    /// its scope, entry and field.
    pub fn from_params(params: &ConfigureParams) -> Result<Registry, RpcError> {
        let mut kept: Vec<EntryConfig> = Vec::new();
        let mut paths = entries::Paths::default();
        for entry in &params.entries {
            if entry.entry_type != NAME {
                return Err(entries::invalid(
                    entry,
                    "type",
                    &format!(
                        "is `{}`, not a type this extension declares",
                        entry.entry_type
                    ),
                ));
            }
            entries::check_named(entry)?;
            let parsed = EntryConfig::parse_config(&entry.config)
                .map_err(|e| entries::invalid_config(entry, &e))?;
            let conn = entries::connection(
                entry,
                &params.connections,
                NAME,
                "the connection's webhook_secret signs the deliveries",
            )?;
            if let Some(conn) = conn {
                if !conn.secrets.is_empty() && !conn.secrets.iter().any(|s| s == WEBHOOK_SECRET) {
                    return Err(entries::invalid(
                        entry,
                        "connection",
                        &format!("names `{}`, which has no {WEBHOOK_SECRET}", conn.name),
                    ));
                }
            }
            let path = entries::request_path(entry, PATH_PREFIX, parsed.path);
            paths.claim(entry, &path)?;
            // Reconcile reads the webhook's deliveries through the API: by default
            // only when the connection has a credential for it (a token or an App's
            // key), so a connection that only signs webhooks logs no failing pass.
            let api_credential = conn.is_none_or(|c| {
                c.secrets.is_empty()
                    || c.secrets
                        .iter()
                        .any(|s| s == crate::TOKEN || s == crate::PRIVATE_KEY)
            });
            let reconcile_interval_s = if parsed.reconcile_named || api_credential {
                parsed.reconcile_interval_s
            } else {
                0
            };
            kept.push(EntryConfig {
                scope_id: entry.scope_id.clone(),
                name: entry.name.clone(),
                connection: entry.connection.clone(),
                repository: parsed.repository,
                path,
                events: parsed.events,
                source: entries::source_name(NAME, entry),
                reconcile_interval_s,
                manage_webhook: parsed.manage_webhook,
            });
        }
        Ok(Registry { entries: kept })
    }

    /// The sources and webhook paths the entries register.
    pub fn configure_result(&self) -> ConfigureResult {
        let mut result = ConfigureResult::default();
        for e in &self.entries {
            let source = SourceDecl {
                name: e.source.clone(),
                source_type: NAME.to_string(),
                scope_id: e.scope_id.clone(),
                entry: e.name.clone(),
                families: Family::names(),
                reconcile_interval_s: e.reconcile_interval_s,
            };
            result.webhooks.push(entries::webhook(&source, &e.path));
            result.sources.push(source);
        }
        result
    }

    /// The entry whose source is `source`.
    pub fn entry_of_source(&self, source: &str) -> Option<&EntryConfig> {
        self.entries.iter().find(|e| e.source == source)
    }

    /// The entry whose path is the longest that covers `request_path`.
    pub fn entry_for(&self, request_path: &str) -> Option<&EntryConfig> {
        entries::longest_cover(&self.entries, |e| &e.path, request_path)
    }
}
