//! The doctor checks (`check.run`):
//!
//! - [`TOKENS`]: for each connection the entries name, `auth.test` with its
//!   `bot_token`. A token Slack refuses (`invalid_auth`, `token_revoked` …) or one
//!   that cannot be resolved fails the check, the detail naming the connection,
//!   Slack's code and the remedy.
//! - [`SOCKET`]: for each connection `socket` entries name, the Socket Mode
//!   client's status ([`crate::receiver`]): connected (since when, to which host),
//!   else a failure with the last error and the remedy.
//!
//! `open-conduit doctor` shows the detail only, so the detail carries everything
//! (one sentence per connection, problems first). Each `auth.test` is bounded by
//! [`AUTH_TEST_TIMEOUT`].

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use protocol::wire::{CheckRunParams, CheckRunResult};

use crate::config::Mode;
use crate::{api, State};

/// The token check.
pub const TOKENS: &str = "tokens";
/// The Socket Mode check.
pub const SOCKET: &str = "socket_mode";
/// The longest one connection's `auth.test` may take in a check.
pub const AUTH_TEST_TIMEOUT: Duration = Duration::from_secs(10);

/// Where the operator finds the bot token.
const BOT_TOKEN_REMEDY: &str = "put the app's Bot User OAuth Token (xoxb-…, Slack app settings → \
     OAuth & Permissions; reinstall the app if it was revoked) in the connection's bot_token \
     and apply the configuration";
/// What to look at when Socket Mode is down.
const SOCKET_REMEDY: &str = "check the connection's app_token (xapp-…, with the \
     connections:write scope: Slack app settings → Basic Information → App-Level Tokens) and \
     that Socket Mode is enabled for the app; the package keeps reconnecting";

/// Serves `check.run`.
pub async fn run(state: &State, host: &sdk::Host, params: &CheckRunParams) -> CheckRunResult {
    match params.check.as_str() {
        TOKENS => tokens(state, host).await,
        SOCKET => socket(state),
        other => CheckRunResult {
            status: "warn".into(),
            code: "extension_check_invalid".into(),
            detail: format!("no check `{other}` (this package runs `{TOKENS}` and `{SOCKET}`)"),
            ..CheckRunResult::default()
        },
    }
}

/// A check's result from its lines: `(failed, line)`.
fn result(lines: Vec<(bool, String)>, code: &str, none: &str) -> CheckRunResult {
    if lines.is_empty() {
        return CheckRunResult {
            status: "ok".into(),
            detail: none.to_string(),
            ..CheckRunResult::default()
        };
    }
    let failed = lines.iter().any(|(f, _)| *f);
    let mut sorted = lines;
    sorted.sort_by_key(|(f, _)| !*f);
    let items: Vec<String> = sorted.into_iter().map(|(_, l)| l).collect();
    CheckRunResult {
        status: if failed { "fail" } else { "ok" }.into(),
        code: if failed {
            code.to_string()
        } else {
            String::new()
        },
        detail: items.join("; "),
        items,
        ..CheckRunResult::default()
    }
}

/// `auth.test` for each connection the entries name.
async fn tokens(state: &State, host: &sdk::Host) -> CheckRunResult {
    let registry = state.registry();
    let mut seen: Vec<(&str, &str)> = Vec::new();
    for e in &registry.entries {
        if !seen.iter().any(|(c, _)| *c == e.connection) {
            seen.push((&e.connection, &e.scope_id));
        }
    }
    let mut lines = Vec::new();
    for (connection, scope_id) in seen {
        let outcome = tokio::time::timeout(AUTH_TEST_TIMEOUT, async {
            let client = state
                .client(host, scope_id, connection)
                .await
                .map_err(|e| e.message)?;
            api::auth_test(&client).await.map_err(|e| e.message)
        })
        .await;
        lines.push(match outcome {
            Err(_) => (
                true,
                format!(
                    "connection {connection}: auth.test gave no answer within {}s \
                     (AUTH_TEST_TIMEOUT); check the connection's api_url and the network",
                    AUTH_TEST_TIMEOUT.as_secs()
                ),
            ),
            Ok(Err(message)) => (
                true,
                format!("connection {connection}: {message}; {BOT_TOKEN_REMEDY}"),
            ),
            Ok(Ok(who)) => (
                false,
                format!(
                    "connection {connection}: bot {} ({}) of team {} ({})",
                    who.user, who.user_id, who.team, who.team_id
                ),
            ),
        });
    }
    result(lines, "slack_token_invalid", "no slack entries")
}

/// When `t` was, for a person (RFC 3339, UTC).
fn at(t: Option<SystemTime>) -> String {
    t.and_then(|t| t.duration_since(UNIX_EPOCH).ok())
        .and_then(|d| i64::try_from(d.as_millis()).ok())
        .map(protocol::time::format_rfc3339_ms)
        .unwrap_or_else(|| "an unknown time".into())
}

/// The Socket Mode client of each connection `socket` entries name.
fn socket(state: &State) -> CheckRunResult {
    let registry = state.registry();
    let mut lines = Vec::new();
    let mut seen: Vec<&str> = Vec::new();
    for e in registry.entries.iter().filter(|e| e.mode == Mode::Socket) {
        if seen.contains(&e.connection.as_str()) {
            continue;
        }
        seen.push(&e.connection);
        let connection = &e.connection;
        lines.push(match state.receivers().status(connection) {
            None => (
                true,
                format!("connection {connection}: Socket Mode is not running; {SOCKET_REMEDY}"),
            ),
            Some(s) if s.connected => (
                false,
                format!(
                    "connection {connection}: Socket Mode connected to {} since {} \
                     ({} envelopes kept, {} reconnects)",
                    s.host.as_deref().unwrap_or("Slack"),
                    at(s.since),
                    s.delivered,
                    s.reconnects
                ),
            ),
            Some(s) => (
                true,
                format!(
                    "connection {connection}: Socket Mode not connected since {}{}; {SOCKET_REMEDY}",
                    at(s.since),
                    s.last_error
                        .as_deref()
                        .map(|e| format!(" (last error at {}: {e})", at(s.last_error_at)))
                        .unwrap_or_default()
                ),
            ),
        });
    }
    result(lines, "slack_socket_down", "no socket entries")
}
