//! The `configure` entries and the `slack` connection's config.
//!
//! An entry of type `slack` has the config
//!
//! ```json
//! {"path": "/slack/custom", "channels": ["C0123456789", "im"], "mode": "events"}
//! ```
//!
//! every field optional: `path` (the Events API and interactivity request path)
//! defaults to `/slack/<scope_id>/<entry>` and must stay under `/slack`; `channels`
//! is an allow-list of conversation IDs (`C…`, `G…`, `D…`), and the word `im` for
//! every direct message; without it every conversation the app hears is taken.
//! `mode` is `events` (the default: Slack calls the Events API request URL, through
//! ingressd) or `socket` (the package opens a Socket Mode WebSocket with the
//! connection's `app_token`, [`crate::receiver`]; the request path stays served when
//! the connection has a `signing_secret`, so an event Slack still sends over HTTP
//! is the same source's and kept once). The entry must name a connection of type
//! `slack`: its `signing_secret` signs Events API requests.
//!
//! A `slack` connection's config is `{"api_url": "https://slack.com/api"}` (every
//! field optional); its secrets are `bot_token` (the Web API), `signing_secret`
//! (Events API and interactivity requests) and `app_token` (Socket Mode).

use protocol::wire::{ConfigureParams, ConfigureResult, Connection, SourceDecl};
use protocol::RpcError;
use serde::Deserialize;
use serde_json::Value;

use crate::{APP_TOKEN, FAMILY, NAME, SIGNING_SECRET};

pub use sdk::config::ConfigError;
use sdk::entries;

/// The request path prefix every entry's path stays under.
pub const PATH_PREFIX: &str = "/slack";
/// The longest request path accepted, in bytes.
const MAX_PATH_BYTES: usize = 512;
/// The most conversations an allow-list names.
pub const MAX_CHANNELS: usize = 1000;
/// The allow-list word for every direct message.
pub const IM: &str = "im";

/// How an entry hears Slack.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Mode {
    /// The Events API: Slack calls the entry's request path through ingressd.
    #[default]
    Events,
    /// Socket Mode: the package opens the WebSocket itself (the `app_token`).
    Socket,
}

impl Mode {
    /// The mode as written (`events`, `socket`).
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Events => "events",
            Mode::Socket => "socket",
        }
    }
}

/// An entry's config as written (strict).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawEntry {
    #[serde(default)]
    path: Option<String>,
    #[serde(default)]
    channels: Option<Vec<String>>,
    #[serde(default)]
    mode: Option<String>,
}

/// A `slack` connection's config as written (strict; `null` is `{}`).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawConnection {
    #[serde(default)]
    api_url: Option<String>,
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
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ParsedConfig {
    /// The request path, when one is written.
    pub path: Option<String>,
    /// The allow-list (`None`: every conversation).
    pub channels: Option<Vec<String>>,
    /// How the entry hears Slack.
    pub mode: Mode,
}

impl ParsedConfig {
    /// What the entry sets up, in one line.
    pub fn describe(&self) -> String {
        let path = match &self.path {
            Some(p) => p.clone(),
            None => format!("{PATH_PREFIX}/<scope>/<entry>"),
        };
        let mut line = match self.mode {
            Mode::Events => format!("receives Slack Events API requests at {path}"),
            Mode::Socket => "hears Slack over Socket Mode (the connection's app_token)".to_string(),
        };
        match &self.channels {
            None => line.push_str(", from every conversation the app is in"),
            Some(list) => line.push_str(&format!(", from {} only", list.join(", "))),
        }
        line
    }
}

/// A conversation ID: `C`, `G` or `D` and at least two more uppercase ASCII
/// letters or digits.
pub fn is_conversation_id(id: &str) -> bool {
    id.len() >= 3
        && id.len() <= 64
        && matches!(id.as_bytes().first(), Some(b'C' | b'G' | b'D'))
        && id
            .bytes()
            .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit())
}

/// Parses an entry's config alone (no scope, name or connection).
pub fn parse_entry(config: &Value) -> Result<ParsedConfig, ConfigError> {
    let raw: RawEntry = read(config)?;
    let path = match raw.path {
        None => None,
        Some(s) => Some(normalize_path(&s).map_err(|m| ConfigError::new("/path", m))?),
    };
    let channels = match raw.channels {
        None => None,
        Some(list) => {
            if list.len() > MAX_CHANNELS {
                return Err(ConfigError::new(
                    "/channels",
                    format!("names more than {MAX_CHANNELS} conversations"),
                ));
            }
            let mut out: Vec<String> = Vec::new();
            for (i, c) in list.iter().enumerate() {
                let c = c.trim();
                if c != IM && !is_conversation_id(c) {
                    return Err(ConfigError::new(
                        format!("/channels/{i}"),
                        "must be a conversation ID (C…, G… or D…, as Slack shows it \
                         under the channel's details) or `im` for every direct message",
                    ));
                }
                if !out.iter().any(|o| o == c) {
                    out.push(c.to_string());
                }
            }
            Some(out)
        }
    };
    let mode = match raw.mode.as_deref().map(str::trim) {
        None | Some("events") => Mode::Events,
        Some("socket") => Mode::Socket,
        Some(_) => {
            return Err(ConfigError::new(
                "/mode",
                "must be `events` (the Events API over HTTP) or `socket` (Socket Mode)",
            ))
        }
    };
    Ok(ParsedConfig {
        path,
        channels,
        mode,
    })
}

/// A written request path: absolute, under `/slack`, without `.`/`..` segments,
/// query, fragment, whitespace or control characters; a trailing `/` is dropped.
fn normalize_path(path: &str) -> Result<String, String> {
    if path.len() > MAX_PATH_BYTES {
        return Err(format!("is longer than {MAX_PATH_BYTES} bytes"));
    }
    let trimmed = path.trim_end_matches('/');
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

/// Checks a `slack` connection's config (strict: an unknown field is refused):
/// `api_url`, when given, is an http or https URL.
pub fn check_connection_config(config: &Value) -> Result<(), ConfigError> {
    let raw: RawConnection = read(config)?;
    if let Some(url) = &raw.api_url {
        protocol::wire::check_display_url("api_url", url)
            .map_err(|e| ConfigError::new("/api_url", format!("`{url}`: {}", e.reason)))?;
    }
    Ok(())
}

/// The `api_url` of a connection's config (default [`crate::api::DEFAULT_API_URL`]).
pub fn api_url(config: &Value) -> String {
    config
        .get("api_url")
        .and_then(Value::as_str)
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .unwrap_or(crate::api::DEFAULT_API_URL)
        .to_string()
}

/// One configured entry, in force until the next configure.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EntryConfig {
    /// The scope.
    pub scope_id: String,
    /// The entry's name within the scope.
    pub name: String,
    /// The `slack` connection.
    pub connection: String,
    /// The request path (without a trailing `/`).
    pub path: String,
    /// The allow-list (`None`: every conversation).
    pub channels: Option<Vec<String>>,
    /// How it hears Slack.
    pub mode: Mode,
    /// Whether it serves its request path: an `events` entry always, a `socket`
    /// entry when its connection has a `signing_secret` (interactivity, and what
    /// Slack still sends over HTTP while an app moves from one way to the other:
    /// the same source, so an event that comes both ways is kept once).
    pub http: bool,
    /// Its source name, `slack/<scope_id>/<entry>`.
    pub source: String,
}

impl EntryConfig {
    /// True when the allow-list takes conversation `channel` (a direct message when
    /// `im`).
    pub fn allows(&self, channel: &str, im: bool) -> bool {
        self.channels
            .as_ref()
            .is_none_or(|list| list.iter().any(|c| c == channel || (im && c == IM)))
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
            entries::check_type(entry, NAME)?;
            entries::check_named(entry)?;
            let parsed =
                parse_entry(&entry.config).map_err(|e| entries::invalid_config(entry, &e))?;
            let conn = entries::connection(
                entry,
                &params.connections,
                NAME,
                "a slack connection (bot_token, signing_secret)",
            )?;
            let needed = match parsed.mode {
                Mode::Events => SIGNING_SECRET,
                Mode::Socket => APP_TOKEN,
            };
            let http = parsed.mode == Mode::Events
                || conn.is_some_and(|c| c.secrets.iter().any(|s| s == SIGNING_SECRET));
            if let Some(conn) = conn {
                if !conn.secrets.is_empty() && !conn.secrets.iter().any(|s| s == needed) {
                    return Err(entries::invalid(
                        entry,
                        "connection",
                        &format!(
                            "names `{}`, which has no {needed} (mode {} needs it)",
                            conn.name,
                            parsed.mode.as_str()
                        ),
                    ));
                }
            }
            let path = entries::request_path(entry, PATH_PREFIX, parsed.path);
            // Only the entries that serve their path claim it.
            if http {
                paths.claim(entry, &path)?;
            }
            kept.push(EntryConfig {
                scope_id: entry.scope_id.clone(),
                name: entry.name.clone(),
                connection: entry.connection.clone(),
                path,
                channels: parsed.channels,
                mode: parsed.mode,
                http,
                source: entries::source_name(NAME, entry),
            });
        }
        Ok(Registry { entries: kept })
    }

    /// The sources the entries register, and the request paths of those that serve
    /// one ([`EntryConfig::http`]).
    pub fn configure_result(&self) -> ConfigureResult {
        let mut result = ConfigureResult::default();
        for e in &self.entries {
            let source = SourceDecl {
                name: e.source.clone(),
                source_type: NAME.to_string(),
                scope_id: e.scope_id.clone(),
                entry: e.name.clone(),
                families: vec![FAMILY.to_string()],
                reconcile_interval_s: 0,
            };
            if e.http {
                result.webhooks.push(entries::webhook(&source, &e.path));
            }
            result.sources.push(source);
        }
        result
    }

    /// The entry whose source is `source`.
    pub fn entry_of_source(&self, source: &str) -> Option<&EntryConfig> {
        self.entries.iter().find(|e| e.source == source)
    }

    /// The entry serving HTTP ([`EntryConfig::http`]) whose path is the longest that
    /// covers `request_path`.
    pub fn entry_for(&self, request_path: &str) -> Option<&EntryConfig> {
        let http = self.entries.iter().filter(|e| e.http);
        entries::longest_cover(http, |e| &e.path, request_path)
    }
}

/// The connections `socket` entries hear Slack through: one Socket Mode connection
/// each, however many entries name it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SocketConnection {
    /// The connection's name.
    pub connection: String,
    /// The scope its secrets are resolved in (the first entry's).
    pub scope_id: String,
    /// Its `api_url`.
    pub api_url: String,
    /// The `socket` entries that name it, in configure order.
    pub entries: Vec<EntryConfig>,
}

impl Registry {
    /// The Socket Mode connections the `socket` entries need, given the configured
    /// connections (for their `api_url`).
    pub fn socket_connections(&self, connections: &[Connection]) -> Vec<SocketConnection> {
        let mut out: Vec<SocketConnection> = Vec::new();
        for e in self.entries.iter().filter(|e| e.mode == Mode::Socket) {
            if let Some(s) = out.iter_mut().find(|s| s.connection == e.connection) {
                s.entries.push(e.clone());
                continue;
            }
            let config = entries::find_connection(connections, &e.connection)
                .map(|c| c.config.clone())
                .unwrap_or_default();
            out.push(SocketConnection {
                connection: e.connection.clone(),
                scope_id: e.scope_id.clone(),
                api_url: api_url(&config),
                entries: vec![e.clone()],
            });
        }
        out
    }
}
