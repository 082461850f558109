//! The Slack app manifest for a connection, generated from the configuration: what
//! the operator pastes at api.slack.com/apps ("Create New App" → "From an app
//! manifest", or an app's "App Manifest" page) so the app has the scopes, events
//! and endpoints the package needs.
//!
//! - `display_information.name` is [`APP_NAME`]; `features.bot_user` makes the bot
//!   user the package posts as; `features.app_home` opens the messages tab, so
//!   people can write to the app directly.
//! - `oauth_config.scopes.bot` is [`BOT_SCOPES`]: what the operations, the
//!   projector, rendering and the events need.
//! - `settings.event_subscriptions.bot_events` is [`BOT_EVENTS`]; with Socket Mode
//!   (any `socket` entry on the connection) `settings.socket_mode_enabled` is true
//!   and no request URL is given (Slack sends events and interactions over the
//!   socket); otherwise the request URL, and the interactivity request URL, are the
//!   public URL and the (first) entry's path.
//! - Without a public URL, an `events` connection's manifest has no request URLs and
//!   [`AppManifest::notes`] says what to fill in.
//!
//! It is checked against Slack's published manifest schema (slackapi/manifest-schema)
//! in the tests.

use serde::Serialize;
use serde_json::{json, Map, Value};

use crate::config::{EntryConfig, Mode};

/// The app's display name (Slack's limit is 35 characters).
pub const APP_NAME: &str = "Open Conduit";
/// The bot user's display name.
pub const BOT_NAME: &str = "open-conduit";
/// The OAuth scopes of the app's bot token.
pub const BOT_SCOPES: [&str; 9] = [
    "app_mentions:read",
    "channels:history",
    "chat:write",
    "groups:history",
    "im:history",
    "im:read",
    "mpim:history",
    "reactions:write",
    "users:read",
];
/// The events the app subscribes to as its bot.
pub const BOT_EVENTS: [&str; 5] = [
    "app_mention",
    "message.channels",
    "message.groups",
    "message.im",
    "message.mpim",
];

/// One connection's manifest.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AppManifest {
    /// The connection.
    pub connection: String,
    /// The entries (`scope/entry`) it was made from.
    pub entries: Vec<String>,
    /// The manifest, as Slack takes it.
    pub manifest: Value,
    /// What the operator still has to do, one sentence each.
    pub notes: Vec<String>,
}

/// The manifest of `connection` for its `entries` (at least one), with the
/// configuration's `public_url` (empty: none).
pub fn app_manifest(connection: &str, entries: &[&EntryConfig], public_url: &str) -> AppManifest {
    let socket = entries.iter().any(|e| e.mode == Mode::Socket);
    let base = public_url.trim().trim_end_matches('/');
    let http_entry = entries.iter().find(|e| e.http);
    let mut notes = Vec::new();
    let mut events = Map::new();
    let mut interactivity = Map::new();
    interactivity.insert("is_enabled".into(), json!(true));
    if !socket {
        match http_entry {
            Some(e) if base.starts_with("https://") || base.starts_with("http://") => {
                let url = format!("{base}{}", e.path);
                events.insert("request_url".into(), json!(url));
                interactivity.insert("request_url".into(), json!(url));
            }
            Some(e) => notes.push(format!(
                "no public_url is configured: set the Event Subscriptions and Interactivity \
                 request URLs to the public URL of ingressd followed by {}",
                e.path
            )),
            None => {}
        }
    } else {
        notes.push(
            "Socket Mode: create an app-level token with the connections:write scope \
             (Basic Information → App-Level Tokens) and put it in the connection's app_token"
                .to_string(),
        );
    }
    events.insert("bot_events".into(), json!(BOT_EVENTS));
    notes.push(
        "install the app to the workspace and put its Bot User OAuth Token (xoxb-…) in the \
         connection's bot_token"
            .to_string(),
    );
    if !socket || http_entry.is_some() {
        notes.push(
            "put the app's Signing Secret (Basic Information) in the connection's signing_secret"
                .to_string(),
        );
    }
    let manifest = json!({
        "_metadata": {"major_version": 1, "minor_version": 1},
        "display_information": {
            "name": APP_NAME,
            "description": "Slack threads become Work for Open Conduit's agents",
        },
        "features": {
            "app_home": {
                "home_tab_enabled": false,
                "messages_tab_enabled": true,
                "messages_tab_read_only_enabled": false,
            },
            "bot_user": {"display_name": BOT_NAME, "always_online": true},
        },
        "oauth_config": {"scopes": {"bot": BOT_SCOPES}},
        "settings": {
            "event_subscriptions": events,
            "interactivity": interactivity,
            "org_deploy_enabled": false,
            "socket_mode_enabled": socket,
            "token_rotation_enabled": false,
        },
    });
    AppManifest {
        connection: connection.to_string(),
        entries: entries
            .iter()
            .map(|e| format!("{}/{}", e.scope_id, e.name))
            .collect(),
        manifest,
        notes,
    }
}

/// The manifests of every connection the `entries` name, in the order first named.
pub fn manifests(entries: &[EntryConfig], public_url: &str) -> Vec<AppManifest> {
    let mut names: Vec<&str> = Vec::new();
    for e in entries {
        if !names.contains(&e.connection.as_str()) {
            names.push(&e.connection);
        }
    }
    names
        .into_iter()
        .map(|name| {
            let of: Vec<&EntryConfig> = entries.iter().filter(|e| e.connection == name).collect();
            app_manifest(name, &of, public_url)
        })
        .collect()
}

/// What the manifests are made with besides the entries: the public URL of the last
/// configure, and the package's state directory (where they are written).
#[derive(Debug, Default)]
pub struct Setup {
    public_url: std::sync::Mutex<String>,
    state_dir: std::sync::Mutex<Option<std::path::PathBuf>>,
}

/// The directory under the state directory the manifests are written to, one
/// `<connection>.json` each.
pub const DIR: &str = "app-manifests";

impl Setup {
    /// The public URL of the last configure (empty: none).
    pub fn public_url(&self) -> String {
        crate::lock(&self.public_url).clone()
    }

    /// Records `initialize`'s `state_dir`.
    pub fn record_initialize(&self, params: &Value) {
        *crate::lock(&self.state_dir) = sdk::dirs::Dirs::from_initialize(params, "").state_dir;
    }

    /// Records a configure's public URL and writes each connection's manifest to
    /// `<state_dir>/app-manifests/<connection>.json` (the operator reads it there;
    /// it holds no secret). A write that fails is logged.
    pub fn configure(&self, entries: &[EntryConfig], public_url: &str) {
        *crate::lock(&self.public_url) = public_url.to_string();
        let Some(dir) = crate::lock(&self.state_dir).clone().map(|d| d.join(DIR)) else {
            return;
        };
        let all = manifests(entries, public_url);
        if all.is_empty() {
            return;
        }
        if let Err(e) = std::fs::create_dir_all(&dir) {
            eprintln!("slack: {}: {e}", dir.display());
            return;
        }
        for m in all {
            let safe: String = m
                .connection
                .chars()
                .map(|c| {
                    if c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.') {
                        c
                    } else {
                        '_'
                    }
                })
                .collect();
            let path = dir.join(format!("{safe}.json"));
            let text = serde_json::to_string_pretty(&m.manifest).unwrap_or_default() + "\n";
            match std::fs::write(&path, text) {
                Ok(()) => eprintln!(
                    "slack: the Slack app manifest of connection {} is in {}",
                    m.connection,
                    path.display()
                ),
                Err(e) => eprintln!("slack: {}: {e}", path.display()),
            }
        }
    }
}
