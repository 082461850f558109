//! A client of Slack's Web API (`https://slack.com/api/<method>`), on `ureq` with
//! rustls.
//!
//! - Every call carries the bot token as `Authorization: Bearer …`, the only place
//!   the token goes: never in a URL, an error or a log line. Writes are POSTs with
//!   a form-encoded body (`application/x-www-form-urlencoded`; `blocks` as a JSON
//!   string), reads GETs with query parameters, as Slack's published description
//!   lists them (docs/decisions.md, "Slack, first step").
//! - A call is bounded by [`REQUEST_TIMEOUT`]; a response body is read up to
//!   [`MAX_BODY_BYTES`].
//! - A 429 is waited out as its `Retry-After` says, at most [`Limits::retries`]
//!   times and only when the wait is at most [`Limits::max_wait`]; otherwise the
//!   call fails `unavailable`, the error naming the limit it hit.
//! - Slack answers its errors `200 {"ok": false, "error": "<code>"}`: the error
//!   names the method and Slack's code (`chat.postMessage: channel_not_found`),
//!   with what the code means for the common ones ([`SlackError`]).
//!
//! - Calls are paced client-side by Slack's per-method tiers ([`pace`]): a token
//!   bucket per method (per conversation for `chat.postMessage`) shared by the
//!   process; a call that would wait past [`pace::MAX_PACE_WAIT`] is refused naming
//!   the method, the tier and the bound. A token Slack refused (`invalid_auth` …) is
//!   not sent again for a while: the calls meanwhile fail at once with that error.
//! - Every `ok: false` is logged (method and code, never the token) for the operator.
//!
//! `ureq` blocks: the async methods run it on tokio's blocking pool.

pub mod pace;

use std::sync::Arc;
use std::time::{Duration, Instant};

use protocol::{Code, RpcError};
use serde_json::{json, Value};
use sha2::{Digest, Sha256};

use pace::{Pacer, Tier};

/// Slack's Web API base URL.
pub const DEFAULT_API_URL: &str = "https://slack.com/api";
/// The `User-Agent` sent.
pub const USER_AGENT: &str = concat!("open-conduit-slack/", env!("CARGO_PKG_VERSION"));
/// How long one request may take, connect to last byte.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// The largest response body read.
pub const MAX_BODY_BYTES: u64 = 4 * 1024 * 1024;
/// How many times a rate limited call is retried by default.
pub const MAX_RETRIES: u32 = 3;
/// The longest `Retry-After` waited out by default.
pub const MAX_WAIT: Duration = Duration::from_secs(30);

/// How a client waits out rate limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// How many 429s of one call are waited out.
    pub retries: u32,
    /// The longest `Retry-After` waited out.
    pub max_wait: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            retries: MAX_RETRIES,
            max_wait: MAX_WAIT,
        }
    }
}

/// A failed call: the method, the status and Slack's error code, and a message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlackError {
    /// The code it crosses the protocol with.
    pub code: Code,
    /// The Web API method (`chat.postMessage`).
    pub method: String,
    /// The HTTP status, when Slack answered.
    pub status: Option<u16>,
    /// Slack's `error` (`channel_not_found`), when it sent one.
    pub error: Option<String>,
    /// What went wrong, in a sentence (never the token).
    pub message: String,
}

/// What Slack's common error codes mean, for the operator and the agent.
pub fn explain(error: &str) -> Option<&'static str> {
    Some(match error {
        "invalid_auth" | "not_authed" => "the connection's bot_token is not a valid token",
        "token_revoked" | "token_expired" | "account_inactive" => {
            "the connection's bot_token was revoked or its app uninstalled"
        }
        "missing_scope" => "the app lacks an OAuth scope this method needs",
        "channel_not_found" => {
            "the conversation does not exist, or the app cannot see it (invite the app)"
        }
        "not_in_channel" => "the app is not a member of the conversation (invite it)",
        "is_archived" => "the conversation is archived",
        "thread_not_found" => "the thread does not exist",
        "message_not_found" => "the message does not exist",
        "cant_update_message" => "the app can only edit its own messages",
        "user_not_found" => "no such user",
        "ratelimited" => "Slack's rate limit for this method was hit",
        "msg_too_long" => "the text is too long",
        "no_text" => "the message has no text",
        "invalid_blocks" | "invalid_blocks_format" => "the blocks are not valid Block Kit",
        "already_reacted" => "the app already added this reaction",
        "invalid_name" => "no emoji of that name",
        _ => return None,
    })
}

impl SlackError {
    fn transport(method: &str, message: String) -> SlackError {
        SlackError {
            code: Code::Unavailable,
            method: method.to_string(),
            status: None,
            error: None,
            message,
        }
    }

    /// The error of an `ok: false` answer with Slack's `error` code.
    pub fn of_code(method: &str, status: u16, error: &str, needed: Option<&str>) -> SlackError {
        let code = match error {
            "invalid_auth"
            | "not_authed"
            | "token_revoked"
            | "token_expired"
            | "account_inactive"
            | "missing_scope"
            | "not_allowed_token_type"
            | "no_permission"
            | "cant_update_message"
            | "not_in_channel" => Code::Unauthorized,
            "channel_not_found" | "thread_not_found" | "message_not_found" | "user_not_found" => {
                Code::NotFound
            }
            "ratelimited"
            | "rate_limited"
            | "request_timeout"
            | "service_unavailable"
            | "fatal_error"
            | "internal_error" => Code::Unavailable,
            "already_reacted" => Code::Conflict,
            _ => Code::Invalid,
        };
        let mut message = format!("Slack {method} failed: {error}");
        if let Some(why) = explain(error) {
            message.push_str(&format!(" ({why})"));
        }
        if let Some(scope) = needed.filter(|s| !s.is_empty()) {
            message.push_str(&format!("; needed scope: {scope}"));
        }
        SlackError {
            code,
            method: method.to_string(),
            status: Some(status),
            error: Some(error.to_string()),
            message,
        }
    }

    /// The error as it crosses the protocol: its code, its message, `data.slack`
    /// (method, status, error) and `data.agent_message`.
    pub fn to_rpc(&self) -> RpcError {
        let mut e = RpcError::new(self.code, self.message.clone());
        if let Some(Value::Object(data)) = e.data.as_mut() {
            let mut slack = serde_json::Map::new();
            slack.insert("method".into(), json!(self.method));
            if let Some(s) = self.status {
                slack.insert("status".into(), json!(s));
            }
            if let Some(err) = &self.error {
                slack.insert("error".into(), json!(err));
            }
            data.insert("slack".into(), Value::Object(slack));
            data.insert(
                protocol::toolbelt::AGENT_MESSAGE_FIELD.into(),
                json!(protocol::toolbelt::agent_message(&self.message)),
            );
        }
        e
    }
}

impl std::fmt::Display for SlackError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for SlackError {}

struct Inner {
    base: String,
    agent: ureq::Agent,
    token: String,
    /// A digest of the API URL and the token: the pacer's buckets and back-off are
    /// per token (and Slack).
    token_key: String,
    limits: Limits,
    pacer: &'static Pacer,
}

/// True for Slack's codes that say the token itself is refused.
pub fn is_auth_failure(error: &str) -> bool {
    matches!(
        error,
        "invalid_auth" | "not_authed" | "token_revoked" | "token_expired" | "account_inactive"
    )
}

/// A Web API client for one connection's bot token. Cheap to clone.
#[derive(Clone)]
pub struct Client {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "slack::Client({}, token …)", self.inner.base)
    }
}

/// `s` percent-encoded for a form or query value (everything but RFC 3986's
/// unreserved characters).
pub fn percent_encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// `name=value&…`, each percent-encoded.
pub fn encode_form(params: &[(&str, String)]) -> String {
    params
        .iter()
        .map(|(k, v)| format!("{}={}", percent_encode(k), percent_encode(v)))
        .collect::<Vec<_>>()
        .join("&")
}

impl Client {
    /// A client of `api_url` (empty: [`DEFAULT_API_URL`]), an http or https URL,
    /// with the bot `token` and the default [`Limits`].
    pub fn new(api_url: &str, token: &str) -> Result<Client, SlackError> {
        Client::build(api_url, token, Limits::default())
    }

    /// A client with its own rate limit waits (each capped at the defaults).
    pub fn build(api_url: &str, token: &str, limits: Limits) -> Result<Client, SlackError> {
        Client::with_pacer(api_url, token, limits, Pacer::global())
    }

    /// A client paced by `pacer` instead of the process's ([`Pacer::global`]).
    pub fn with_pacer(
        api_url: &str,
        token: &str,
        limits: Limits,
        pacer: &'static Pacer,
    ) -> Result<Client, SlackError> {
        let base = match api_url.trim() {
            "" => DEFAULT_API_URL,
            url => url,
        };
        let base = base.trim_end_matches('/').to_string();
        if !(base.starts_with("https://") || base.starts_with("http://")) {
            return Err(SlackError {
                code: Code::Invalid,
                method: String::new(),
                status: None,
                error: None,
                message: format!("api_url `{base}` is not an http or https URL"),
            });
        }
        let config = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(REQUEST_TIMEOUT))
            .max_redirects(0)
            .user_agent(USER_AGENT)
            .build();
        let token_key = Sha256::digest(format!("{base}\n{token}").as_bytes())
            .iter()
            .take(12)
            .map(|b| format!("{b:02x}"))
            .collect();
        Ok(Client {
            inner: Arc::new(Inner {
                base,
                agent: ureq::Agent::new_with_config(config),
                token: token.to_string(),
                token_key,
                pacer,
                limits: Limits {
                    retries: limits.retries.min(MAX_RETRIES),
                    max_wait: limits.max_wait.min(MAX_WAIT),
                },
            }),
        })
    }

    /// The API base URL, without a trailing `/`.
    pub fn api_url(&self) -> &str {
        &self.inner.base
    }

    /// POSTs `method` with a form-encoded body of `params`: the answer (`ok: true`).
    pub async fn post(
        &self,
        method: &str,
        params: Vec<(&'static str, String)>,
    ) -> Result<Value, SlackError> {
        let this = self.clone();
        let method = method.to_string();
        blocking(&method.clone(), move || this.send("POST", &method, &params)).await
    }

    /// GETs `method` with `params` as the query: the answer (`ok: true`).
    pub async fn get(
        &self,
        method: &str,
        params: Vec<(&'static str, String)>,
    ) -> Result<Value, SlackError> {
        let this = self.clone();
        let method = method.to_string();
        blocking(&method.clone(), move || this.send("GET", &method, &params)).await
    }

    /// One call, blocking: `verb` is `GET` or `POST`.
    pub fn send(
        &self,
        verb: &str,
        method: &str,
        params: &[(&str, String)],
    ) -> Result<Value, SlackError> {
        let encoded = encode_form(params);
        let url = if verb == "GET" && !encoded.is_empty() {
            format!("{}/{method}?{encoded}", self.inner.base)
        } else {
            format!("{}/{method}", self.inner.base)
        };
        let body = if verb == "GET" {
            Vec::new()
        } else {
            encoded.into_bytes()
        };
        let limits = self.inner.limits;
        let pacer = self.inner.pacer;
        if let Some(held) = pacer.auth_held(&self.inner.token_key, Instant::now()) {
            let mut e = SlackError::of_code(method, 200, &held.error, None);
            e.status = None;
            e.message = format!(
                "{}; Slack refused it on {}: not asked again for {} s (back-off after an authentication failure)",
                e.message,
                held.method,
                held.remaining.as_secs().max(1)
            );
            tracing::warn!(method, error = %held.error, "not calling Slack: it refused the token");
            return Err(e);
        }
        let tier = Tier::of(method);
        let mut key = format!("{} {} {method}", self.inner.base, self.inner.token_key);
        if tier.per_channel() {
            if let Some((_, channel)) = params.iter().find(|(k, _)| *k == "channel") {
                key.push(' ');
                key.push_str(channel);
            }
        }
        let mut retried = 0u32;
        loop {
            match pacer.reserve(&key, tier.rate(), Instant::now()) {
                Ok(wait) if wait.is_zero() => {}
                Ok(wait) => {
                    tracing::info!(
                        method,
                        tier = tier.name(),
                        wait_ms = wait.as_millis() as u64,
                        "pacing a call to Slack's rate limit tier"
                    );
                    std::thread::sleep(wait);
                }
                Err(refused) => {
                    let rate = tier.rate();
                    let message = format!(
                        "Slack {method} not sent: {} allows about {} calls a minute{}, and this call would wait {} s for its turn, longer than the {} bound (MAX_PACE_WAIT); try again later",
                        tier.name(),
                        rate.per_minute,
                        if tier.per_channel() { " per conversation" } else { "" },
                        refused.wait.as_secs_f64().ceil() as u64,
                        seconds(refused.bound)
                    );
                    tracing::warn!(method, tier = tier.name(), "{message}");
                    return Err(SlackError {
                        code: Code::Unavailable,
                        method: method.to_string(),
                        status: None,
                        error: None,
                        message,
                    });
                }
            }
            let mut req = ureq::http::Request::builder()
                .method(verb)
                .uri(&url)
                .header("Accept", "application/json")
                .header("User-Agent", USER_AGENT)
                .header("Authorization", format!("Bearer {}", self.inner.token));
            if verb != "GET" {
                req = req.header("Content-Type", "application/x-www-form-urlencoded");
            }
            let req = req
                .body(body.clone())
                .map_err(|e| SlackError::transport(method, format!("Slack {method}: {e}")))?;
            let started = Instant::now();
            let response = self.inner.agent.run(req);
            let elapsed_ms = started.elapsed().as_millis();
            let response = match response {
                Ok(r) => r,
                Err(e) => {
                    tracing::warn!(method, elapsed_ms, error = %e, "Slack Web API call failed");
                    let what = match e {
                        ureq::Error::Timeout(_) => format!(
                            "Slack {method} took longer than {}s",
                            REQUEST_TIMEOUT.as_secs()
                        ),
                        other => format!("Slack {method}: {other}"),
                    };
                    return Err(SlackError::transport(method, what));
                }
            };
            let status = response.status().as_u16();
            tracing::info!(method, status, elapsed_ms, "Slack Web API call");
            let retry_after = response
                .headers()
                .get("retry-after")
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.trim().parse::<u64>().ok());
            let bytes = read_bounded(response, method)?;
            if status == 429 {
                let wait = Duration::from_secs(retry_after.unwrap_or(1));
                let now = Instant::now();
                pacer.hold(&key, now + wait.min(pace::MAX_AUTH_BACKOFF), now);
                if retried < limits.retries && wait <= limits.max_wait {
                    tracing::info!(
                        method,
                        wait_s = wait.as_secs(),
                        retried,
                        "waiting out Slack's rate limit"
                    );
                    std::thread::sleep(wait);
                    retried += 1;
                    continue;
                }
                let why = if wait > limits.max_wait {
                    format!(
                        "Retry-After {} s is longer than the {} s this package waits",
                        wait.as_secs(),
                        limits.max_wait.as_secs()
                    )
                } else {
                    format!(
                        "still rate limited after {} retries (at most {})",
                        retried, limits.retries
                    )
                };
                let mut e = SlackError::of_code(method, status, "ratelimited", None);
                e.message = format!("{}: {why}", e.message);
                return Err(e);
            }
            let parsed: Option<Value> = serde_json::from_slice(&bytes).ok();
            if !(200..300).contains(&status) {
                // Slack answers errors 200; anything else is its edge (or a proxy).
                if let Some(code) = parsed
                    .as_ref()
                    .and_then(|p| p.get("error"))
                    .and_then(Value::as_str)
                {
                    tracing::warn!(method, status, error = code, "Slack refused the call");
                    if is_auth_failure(code) {
                        pacer.auth_failed(&self.inner.token_key, method, code, Instant::now());
                    }
                    return Err(SlackError::of_code(method, status, code, None));
                }
                let code = match status {
                    401 | 403 => Code::Unauthorized,
                    404 => Code::NotFound,
                    400 | 413 | 422 => Code::Invalid,
                    _ => Code::Unavailable,
                };
                return Err(SlackError {
                    code,
                    method: method.to_string(),
                    status: Some(status),
                    error: None,
                    message: format!("Slack {method} answered HTTP {status}"),
                });
            }
            let Some(answer) = parsed.filter(Value::is_object) else {
                return Err(SlackError {
                    code: Code::Unavailable,
                    method: method.to_string(),
                    status: Some(status),
                    error: None,
                    message: format!(
                        "Slack {method} answered {status} with a body that is not a JSON object"
                    ),
                });
            };
            if answer.get("ok").and_then(Value::as_bool) != Some(true) {
                let code = answer
                    .get("error")
                    .and_then(Value::as_str)
                    .unwrap_or("unknown_error");
                let needed = answer.get("needed").and_then(Value::as_str);
                tracing::warn!(method, status, error = code, "Slack refused the call");
                if is_auth_failure(code) {
                    pacer.auth_failed(&self.inner.token_key, method, code, Instant::now());
                }
                return Err(SlackError::of_code(method, status, code, needed));
            }
            pacer.auth_ok(&self.inner.token_key);
            return Ok(answer);
        }
    }
}

/// `d` as `10 s`, `0.5 s`.
fn seconds(d: Duration) -> String {
    if d.subsec_millis() == 0 {
        format!("{} s", d.as_secs())
    } else {
        format!("{:.1} s", d.as_secs_f64())
    }
}

fn read_bounded(
    response: ureq::http::Response<ureq::Body>,
    method: &str,
) -> Result<Vec<u8>, SlackError> {
    response
        .into_body()
        .with_config()
        .limit(MAX_BODY_BYTES)
        .read_to_vec()
        .map_err(|e| {
            let message = match e {
                ureq::Error::BodyExceedsLimit(_) => format!(
                    "Slack {method}: the response body is larger than {MAX_BODY_BYTES} bytes"
                ),
                ureq::Error::Timeout(_) => format!(
                    "Slack {method}: the response took longer than {}s",
                    REQUEST_TIMEOUT.as_secs()
                ),
                other => format!("Slack {method}: {other}"),
            };
            SlackError::transport(method, message)
        })
}

async fn blocking<T: Send + 'static>(
    method: &str,
    f: impl FnOnce() -> Result<T, SlackError> + Send + 'static,
) -> Result<T, SlackError> {
    let method = method.to_string();
    tokio::task::spawn_blocking(f).await.unwrap_or_else(|e| {
        Err(SlackError {
            code: Code::Internal,
            method: method.clone(),
            status: None,
            error: None,
            message: format!("Slack {method}: the call panicked or was cancelled: {e}"),
        })
    })
}

/// `reactions.remove` of the app's reaction `name` on message `ts` of `channel`:
/// true when one was removed, false when the app had none there (`no_reaction`).
pub async fn remove_reaction(
    client: &Client,
    channel: &str,
    ts: &str,
    name: &str,
) -> Result<bool, SlackError> {
    let params = vec![
        ("channel", channel.to_string()),
        ("name", name.to_string()),
        ("timestamp", ts.to_string()),
    ];
    match client.post("reactions.remove", params).await {
        Ok(_) => Ok(true),
        Err(e) if e.error.as_deref() == Some("no_reaction") => Ok(false),
        Err(e) => Err(e),
    }
}

/// `reactions.add` of `name` on message `ts` of `channel`; a reaction the app
/// already added there (`already_reacted`) is no error.
pub async fn add_reaction(
    client: &Client,
    channel: &str,
    ts: &str,
    name: &str,
) -> Result<(), SlackError> {
    let params = vec![
        ("channel", channel.to_string()),
        ("name", name.to_string()),
        ("timestamp", ts.to_string()),
    ];
    match client.post("reactions.add", params).await {
        Ok(_) => Ok(()),
        Err(e) if e.error.as_deref() == Some("already_reacted") => Ok(()),
        Err(e) => Err(e),
    }
}

/// The name a person reads for user `user` (`users.info`): the profile's display
/// name, else the real name, else the user name; `None` when Slack gave none.
pub async fn user_name(client: &Client, user: &str) -> Result<Option<String>, SlackError> {
    let answer = client
        .get("users.info", vec![("user", user.to_string())])
        .await?;
    // Slack sends an object; its own description lists a list of one.
    let u = match answer.get("user") {
        Some(Value::Array(list)) => list.first().cloned().unwrap_or(Value::Null),
        Some(v) => v.clone(),
        None => Value::Null,
    };
    let pick = |v: Option<&Value>| {
        v.and_then(Value::as_str)
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(str::to_string)
    };
    Ok(pick(u.pointer("/profile/display_name"))
        .or_else(|| pick(u.get("real_name")))
        .or_else(|| pick(u.pointer("/profile/real_name")))
        .or_else(|| pick(u.get("name"))))
}

/// Who a token is, as `auth.test` answers.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Identity {
    /// The workspace's name.
    pub team: String,
    /// The workspace's ID.
    pub team_id: String,
    /// The token's user name (the bot user's, for a bot token).
    pub user: String,
    /// The token's user ID.
    pub user_id: String,
    /// The bot's ID, for a bot token.
    pub bot_id: String,
    /// The workspace's URL.
    pub url: String,
}

/// `auth.test`: who the client's token is. A bad token fails with Slack's code
/// (`invalid_auth`, `token_revoked` …), explained.
pub async fn auth_test(client: &Client) -> Result<Identity, SlackError> {
    let answer = client.get("auth.test", Vec::new()).await?;
    let field = |name: &str| {
        answer
            .get(name)
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string()
    };
    Ok(Identity {
        team: field("team"),
        team_id: field("team_id"),
        user: field("user"),
        user_id: field("user_id"),
        bot_id: field("bot_id"),
        url: field("url"),
    })
}

/// The longest Socket Mode URL taken from `apps.connections.open`, in bytes.
pub const MAX_SOCKET_URL_BYTES: usize = 4096;

/// `apps.connections.open`: a fresh Socket Mode WebSocket URL (`wss://…`, one use).
/// `client` must carry the connection's app-level token (`xapp-…`, scope
/// `connections:write`), not its bot token. The URL carries a ticket: it goes
/// nowhere but the socket client.
pub async fn connections_open(client: &Client) -> Result<String, SlackError> {
    const METHOD: &str = "apps.connections.open";
    let answer = client.post(METHOD, Vec::new()).await?;
    let url = answer
        .get("url")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let bad = |why: &str| SlackError {
        code: Code::Unavailable,
        method: METHOD.to_string(),
        status: Some(200),
        error: None,
        message: format!("Slack {METHOD} answered {why}"),
    };
    if url.is_empty() {
        return Err(bad("no url"));
    }
    if url.len() > MAX_SOCKET_URL_BYTES {
        return Err(bad(&format!(
            "a url longer than {MAX_SOCKET_URL_BYTES} bytes (MAX_SOCKET_URL_BYTES)"
        )));
    }
    if !(url.starts_with("wss://") || url.starts_with("ws://")) {
        return Err(bad("a url that is not ws:// or wss://"));
    }
    Ok(url.to_string())
}
