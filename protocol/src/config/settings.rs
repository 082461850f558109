//! `settings`: storage, webhooks and their tunnel, and the public URL's check.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::secrets::check_secret_ref;

/// `settings`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Settings {
    /// Agent turns running at once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub concurrency: Option<u32>,
    /// Jobs running at once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job_concurrency: Option<u32>,
    /// Webhook settings.
    #[serde(default)]
    pub webhooks: WebhookSettings,
    /// Per-extension settings (`pass_env`), by extension name.
    #[serde(default)]
    pub extensions: BTreeMap<String, Value>,
    /// Where storaged keeps the database (SQLite when absent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub storage: Option<StorageSettings>,
    /// Fields this release does not read.
    #[serde(flatten)]
    pub extra: BTreeMap<String, Value>,
}

/// `settings.storage`: the database's backend and, for PostgreSQL, a secret
/// reference to its connection URL (it may carry a password). storaged reads
/// it when it starts (`--config`); a change takes effect at its next start, and
/// moving the data is `open-conduit store export`/`import`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct StorageSettings {
    /// `sqlite` (the default) or `postgres`.
    #[serde(default)]
    pub backend: String,
    /// For `postgres`: `env:NAME` or `file:/path` holding the connection URL
    /// (`postgres://user@host:port/db` or `host=… dbname=…`).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub url_ref: String,
}

impl StorageSettings {
    /// What is wrong with it, as (field, message) pairs.
    pub fn problems(&self) -> Vec<(&'static str, String)> {
        let mut out = Vec::new();
        match self.backend.as_str() {
            "" | "sqlite" => {
                if !self.url_ref.is_empty() {
                    out.push((
                        "url_ref",
                        "the sqlite backend takes no url_ref (its file is <state>/db/conduit.db)"
                            .into(),
                    ));
                }
            }
            "postgres" => {
                if self.url_ref.is_empty() {
                    out.push(("url_ref", "the postgres backend needs url_ref: `env:NAME` or `file:/path` holding the connection URL".into()));
                } else if let Err(e) = check_secret_ref(&self.url_ref) {
                    out.push(("url_ref", e));
                }
            }
            other => out.push((
                "backend",
                format!("{other:?} is not a storage backend (`sqlite` or `postgres`)"),
            )),
        }
        out
    }
}

/// `settings.webhooks`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct WebhookSettings {
    /// The public URL webhooks arrive at (sent to extensions in `configure`).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub public_url: String,
    /// The tunnel that exposes the webhook listener (tunneld runs it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tunnel: Option<TunnelSettings>,
    /// Fields this release does not read.
    #[serde(flatten)]
    pub extra: BTreeMap<String, Value>,
}

/// `settings.webhooks.tunnel`: the provider type and its config, which is the
/// provider package's own (the host never reads it; `validate` kind `tunnel` checks it).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct TunnelSettings {
    /// The tunnel type, a type a package declares in `provides.tunnels`.
    #[serde(default)]
    pub provider: String,
    /// The provider's config as the operator wrote it (`{}` when none).
    #[serde(default, skip_serializing_if = "Value::is_null")]
    pub config: Value,
}

impl TunnelSettings {
    /// The config `tunnel.run` carries: as written, `{}` when none.
    pub fn run_config(&self) -> Value {
        if self.config.is_null() {
            Value::Object(Default::default())
        } else {
            self.config.clone()
        }
    }
}

/// The longest public URL taken (the operator's or a tunnel's).
pub const MAX_PUBLIC_URL_BYTES: usize = 2048;

/// Whether `url` could be the operator's `public_url`: `http://` or `https://`, a host,
/// no credentials (no `@` before the path), no whitespace or control characters, at most
/// [`MAX_PUBLIC_URL_BYTES`]. The reason when it is not.
pub fn check_public_url(url: &str) -> Result<(), String> {
    if url.len() > MAX_PUBLIC_URL_BYTES {
        return Err(format!(
            "a public URL of {} bytes is over the {MAX_PUBLIC_URL_BYTES}-byte limit",
            url.len()
        ));
    }
    if url.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err("a public URL has no whitespace or control characters".into());
    }
    let lower = url.to_ascii_lowercase();
    let rest = if let Some(r) = lower.strip_prefix("https://") {
        r
    } else if let Some(r) = lower.strip_prefix("http://") {
        r
    } else {
        return Err(format!("{url:?} is not an http:// or https:// URL"));
    };
    let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
    if authority.contains('@') {
        return Err("a public URL carries no credentials (user@ or user:password@)".into());
    }
    let host = if let Some(v6) = authority.strip_prefix('[') {
        v6.split(']').next().unwrap_or_default()
    } else {
        authority.split(':').next().unwrap_or_default()
    };
    if host.is_empty() {
        return Err(format!("{url:?} has no host"));
    }
    if let Some((_, port)) = authority
        .rsplit_once(':')
        .filter(|_| !authority.ends_with(']'))
    {
        if !port.is_empty() && port.parse::<u16>().is_err() {
            return Err(format!("{url:?} has a bad port {port:?}"));
        }
    }
    Ok(())
}
