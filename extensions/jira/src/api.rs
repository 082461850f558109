//! A client of the Jira Cloud platform REST API v3 (`<base_url>/rest/api/3/…`), on
//! `ureq` with rustls.
//!
//! - The credential goes only in the `Authorization` header (Basic with the email
//!   and API token, or Bearer): never in a URL, an error or a log line.
//! - A call is bounded by [`REQUEST_TIMEOUT`]; a response body is read up to
//!   [`MAX_BODY_BYTES`]; no redirect is followed.
//! - 401, 403, 404 and 429 are errors naming the method and path, what they mean
//!   and what Jira said (`errorMessages`); `data.jira` holds the status, Jira's
//!   message, and for a rate limit `retry_after_s`, `reset_at` and Jira's
//!   `RateLimit-Reason`; `data.agent_message` what the agent is told. 401 and 403
//!   are `unauthorized`, 404 `not_found`, 429 `unavailable`.
//! - A 429 (or a 503 with `Retry-After`) whose `Retry-After` (else
//!   `X-RateLimit-Reset`) is at most [`MAX_RATE_LIMIT_WAIT`] away is waited out and
//!   the call sent again, up to [`RATE_LIMIT_RETRIES`] times; otherwise the error
//!   says when to retry.
//! - After a 401, or a rate limit not waited out, the credential is held back
//!   ([`AUTH_BACKOFF`], the reset up to [`MAX_RATE_LIMIT_BACKOFF`]): the background
//!   passes (the projector) answer the refusal without asking Jira again; the
//!   agent's operations and the doctor's check ([`Client::without_backoff`]) still
//!   ask. The back-off is the trackers' shared one ([`sdk::tracker::backoff`]).
//!
//! `ureq` blocks: the async methods run it on tokio's blocking pool.

use std::sync::Arc;
use std::time::Duration;

use protocol::{Code, RpcError};
use sdk::tracker::backoff::{Backoff, RateLimitStep};
use serde_json::{json, Value};

pub use sdk::tracker::backoff::{
    reworded, AUTH_BACKOFF, MAX_RATE_LIMIT_BACKOFF, MAX_RATE_LIMIT_WAIT, RATE_LIMIT_RETRIES,
};

/// The `User-Agent` sent.
pub const USER_AGENT: &str = concat!("open-conduit-jira/", env!("CARGO_PKG_VERSION"));
/// How long one request may take, connect to last byte.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// The largest response body read.
pub const MAX_BODY_BYTES: u64 = 4 * 1024 * 1024;

/// How the client authenticates.
#[derive(Clone)]
pub enum Auth {
    /// Basic auth: the account's email and an API token.
    Basic {
        /// The email.
        email: String,
        /// The API token.
        token: String,
    },
    /// An OAuth 2.0 access token.
    Bearer(String),
}

impl std::fmt::Debug for Auth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Auth::Basic { email, .. } => write!(f, "Basic({email}, <redacted>)"),
            Auth::Bearer(_) => f.write_str("Bearer(<redacted>)"),
        }
    }
}

impl Auth {
    fn header(&self) -> String {
        match self {
            Auth::Basic { email, token } => {
                format!("Basic {}", base64(format!("{email}:{token}").as_bytes()))
            }
            Auth::Bearer(t) => format!("Bearer {t}"),
        }
    }
}

fn base64(bytes: &[u8]) -> String {
    const A: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(char::from(A[((n >> (18 - 6 * i)) & 63) as usize]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

struct Inner {
    base: String,
    agent: ureq::Agent,
    auth: Auth,
}

/// A Jira Cloud REST client (cheap to clone).
#[derive(Clone)]
pub struct Client {
    inner: Arc<Inner>,
    /// The hold after a refusal, keyed by a digest of the site and the credential.
    backoff: Backoff,
}

/// What a status means, for the error.
fn meaning(status: u16) -> (Code, &'static str) {
    match status {
        400 => (Code::Invalid, "Jira refused the request as invalid"),
        401 => (Code::Unauthorized, "the connection's credentials were refused (check email and api_token, or bearer_token)"),
        403 => (Code::Unauthorized, "the connection's account lacks the permission for this (browse, comment or transition)"),
        404 => (Code::NotFound, "no such issue, or the account cannot see it"),
        429 => (Code::Unavailable, "Jira's rate limit was hit"),
        _ => (Code::Unavailable, "Jira answered an error"),
    }
}

/// What an answer's rate limit headers say.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RateHeaders {
    /// `Retry-After`, seconds.
    pub retry_after_s: Option<u64>,
    /// `X-RateLimit-Reset` (ISO 8601, `yyyy-MM-ddTHH:mmZ`), Unix ms.
    pub reset_ms: Option<i64>,
    /// `RateLimit-Reason` (`jira-burst-based`, `jira-per-issue-on-write`, a quota).
    pub reason: Option<String>,
}

impl RateHeaders {
    /// The headers of `headers`.
    pub fn of(headers: &ureq::http::HeaderMap) -> RateHeaders {
        let text = |h: &str| {
            headers
                .get(h)
                .and_then(|v| v.to_str().ok())
                .map(|v| v.trim().to_string())
        };
        RateHeaders {
            retry_after_s: text("retry-after").and_then(|v| v.parse::<u64>().ok()),
            reset_ms: text("x-ratelimit-reset").and_then(|v| parse_reset(&v)),
            reason: text("ratelimit-reason")
                .filter(|r| !r.is_empty())
                .map(|r| sdk::tracker::one_line(&r, 80).to_string()),
        }
    }

    /// Seconds until Jira takes the call again (at least 1), and when, as RFC 3339,
    /// from `now_ms`.
    pub fn retry(&self, now_ms: i64) -> (Option<u64>, Option<String>) {
        let from_reset = self.reset_ms.map(|ms| {
            u64::try_from((ms - now_ms).max(0))
                .unwrap_or(0)
                .div_ceil(1000)
        });
        let s = self.retry_after_s.or(from_reset).map(|s| s.max(1));
        let at = self.reset_ms.or_else(|| {
            s.and_then(|s| i64::try_from(s).ok())
                .map(|s| now_ms + s * 1000)
        });
        (s, at.map(protocol::time::format_rfc3339_ms))
    }
}

/// `X-RateLimit-Reset`: RFC 3339, or Jira's `yyyy-MM-ddTHH:mmZ` (no seconds).
fn parse_reset(v: &str) -> Option<i64> {
    protocol::time::parse_rfc3339_ms(v).or_else(|| {
        let (minutes, zone) = v.split_at(v.len().checked_sub(1)?);
        (v.len() == 17 && zone.eq_ignore_ascii_case("z"))
            .then(|| protocol::time::parse_rfc3339_ms(&format!("{minutes}:00Z")))
            .flatten()
    })
}

/// The `retry_after_s` of an error this module made, if it was a rate limit.
pub fn retry_after_s(e: &RpcError) -> Option<u64> {
    e.data.as_ref()?.pointer("/jira/retry_after_s")?.as_u64()
}

/// The error of a refused call `what` (status not 2xx) at `now_ms`, and whether it
/// is a rate limit (with its seconds).
pub fn refusal(
    what: &str,
    status: u16,
    rate: &RateHeaders,
    body: &[u8],
    now_ms: i64,
) -> (RpcError, Option<Option<u64>>) {
    let (code, means) = meaning(status);
    let limited = status == 429 || (status == 503 && rate.retry_after_s.is_some());
    let (retry_s, reset_at) = if limited {
        rate.retry(now_ms)
    } else {
        (None, None)
    };
    let mut message = format!("{what} answered {status}: {means}");
    if limited {
        if let Some(reason) = &rate.reason {
            message.push_str(&format!(" (RateLimit-Reason {reason})"));
        }
        match (rate.retry_after_s, retry_s) {
            (Some(s), _) => message.push_str(&format!("; Retry-After {s} s: try again after that")),
            (None, Some(s)) => message.push_str(&format!(
                "; the limit resets in {s} s ({}): try again after that",
                reset_at.as_deref().unwrap_or("?")
            )),
            (None, None) => message.push_str("; try again later"),
        }
    }
    let detail = error_detail(body);
    if let Some(d) = &detail {
        message.push_str(&format!(" ({d})"));
    }
    let mut e = RpcError::new(code, message);
    let mut jira = serde_json::Map::new();
    jira.insert("status".into(), json!(status));
    if let Some(d) = detail {
        jira.insert("message".into(), json!(d));
    }
    if let Some(s) = retry_s {
        jira.insert("retry_after_s".into(), json!(s));
    }
    if let Some(at) = &reset_at {
        jira.insert("reset_at".into(), json!(at));
    }
    if let Some(r) = rate.reason.as_ref().filter(|_| limited) {
        jira.insert("reason".into(), json!(r));
    }
    let agent = protocol::toolbelt::agent_message(&e.message);
    if let Some(Value::Object(data)) = e.data.as_mut() {
        if let Some(at) = reset_at {
            data.insert("reset_at".into(), json!(at));
        }
        data.insert("jira".into(), Value::Object(jira));
        data.insert(protocol::toolbelt::AGENT_MESSAGE_FIELD.into(), json!(agent));
    }
    (e, limited.then_some(retry_s))
}

impl Client {
    /// A client of the site `base_url` with `auth`.
    pub fn new(base_url: &str, auth: Auth) -> Result<Client, RpcError> {
        let base = base_url.trim().trim_end_matches('/').to_string();
        if !(base.starts_with("https://") || base.starts_with("http://")) {
            return Err(RpcError::new(
                Code::Invalid,
                format!("base_url `{base}` is not an http or https URL"),
            ));
        }
        let config = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(REQUEST_TIMEOUT))
            .max_redirects(0)
            .user_agent(USER_AGENT)
            .build();
        let backoff = Backoff::new("Jira", &base, &auth.header());
        Ok(Client {
            inner: Arc::new(Inner {
                base,
                agent: ureq::Agent::new_with_config(config),
                auth,
            }),
            backoff,
        })
    }

    /// This client, calling Jira even while its credential is held back (after a
    /// 401 or a rate limit): for a call someone asked for now (the agent's
    /// operation, the doctor's check), which still records a new refusal. The
    /// projector uses the client as made, and is not sent while held.
    pub fn without_backoff(mut self) -> Client {
        self.backoff = self.backoff.without_holds();
        self
    }

    /// The site's base URL.
    pub fn base_url(&self) -> &str {
        &self.inner.base
    }

    /// One call: `verb` `path` (with its query), a JSON body for POST. Answers the
    /// JSON body (`Null` for an empty one, as a 204). Rate limits and holds: see
    /// the module doc.
    pub fn send(&self, verb: &str, path: &str, body: Option<&Value>) -> Result<Value, RpcError> {
        let what = format!("Jira {verb} {}", path.split('?').next().unwrap_or(path));
        if let Some(e) = self.backoff.held() {
            tracing::warn!("not calling Jira: {}", e.message);
            return Err(e);
        }
        let bytes = match body {
            Some(b) => serde_json::to_vec(b).unwrap_or_default(),
            None => Vec::new(),
        };
        let mut retried = 0u32;
        loop {
            let (status, rate, data) = self.once(&what, verb, path, body.is_some(), &bytes)?;
            tracing::info!(status, "{what}");
            if (200..300).contains(&status) {
                self.backoff.succeeded();
                if data.iter().all(u8::is_ascii_whitespace) {
                    return Ok(Value::Null);
                }
                return serde_json::from_slice(&data).map_err(|_| {
                    RpcError::new(
                        Code::Unavailable,
                        format!("{what} answered {status} with a body that is not JSON"),
                    )
                });
            }
            let (e, limited) = refusal(&what, status, &rate, &data, protocol::time::now_ms());
            match limited {
                Some(s) => match self.backoff.rate_limited(e, s, retried) {
                    RateLimitStep::Wait(wait) => {
                        tracing::warn!(
                            status,
                            wait_s = wait.as_secs(),
                            retried,
                            reason = rate.reason.as_deref().unwrap_or(""),
                            "{what}: waiting out Jira's rate limit"
                        );
                        std::thread::sleep(wait);
                        retried += 1;
                        continue;
                    }
                    RateLimitStep::Fail(e) => {
                        tracing::warn!("{}", e.message);
                        return Err(e);
                    }
                },
                None => {
                    if status == 401 {
                        self.backoff.refused(&e);
                    }
                    tracing::warn!("{}", e.message);
                    return Err(e);
                }
            }
        }
    }

    /// One request: the status, the rate headers and the body (bounded).
    fn once(
        &self,
        what: &str,
        verb: &str,
        path: &str,
        json_body: bool,
        bytes: &[u8],
    ) -> Result<(u16, RateHeaders, Vec<u8>), RpcError> {
        let mut req = ureq::http::Request::builder()
            .method(verb)
            .uri(format!("{}{path}", self.inner.base))
            .header("Accept", "application/json")
            .header("Authorization", self.inner.auth.header());
        if json_body {
            req = req.header("Content-Type", "application/json");
        }
        let req = req
            .body(bytes.to_vec())
            .map_err(|e| RpcError::new(Code::Invalid, format!("{what}: {e}")))?;
        let response = self.inner.agent.run(req).map_err(|e| {
            let m = match e {
                ureq::Error::Timeout(_) => format!(
                    "{what} took longer than {} s (REQUEST_TIMEOUT)",
                    REQUEST_TIMEOUT.as_secs()
                ),
                other => format!("{what}: {other}"),
            };
            tracing::warn!("{m}");
            RpcError::new(Code::Unavailable, m)
        })?;
        let status = response.status().as_u16();
        let rate = RateHeaders::of(response.headers());
        let data = response
            .into_body()
            .with_config()
            .limit(MAX_BODY_BYTES)
            .read_to_vec()
            .map_err(|e| {
                let m = match e {
                    ureq::Error::BodyExceedsLimit(_) => format!("{what}: the response body is larger than {MAX_BODY_BYTES} bytes (MAX_BODY_BYTES)"),
                    other => format!("{what}: {other}"),
                };
                RpcError::new(Code::Unavailable, m)
            })?;
        Ok((status, rate, data))
    }

    /// [`Client::send`] on tokio's blocking pool.
    pub async fn call(
        &self,
        verb: &'static str,
        path: String,
        body: Option<Value>,
    ) -> Result<Value, RpcError> {
        let client = self.clone();
        tokio::task::spawn_blocking(move || client.send(verb, &path, body.as_ref()))
            .await
            .unwrap_or_else(|e| {
                Err(RpcError::new(
                    Code::Internal,
                    format!("Jira {verb}: the call was cancelled: {e}"),
                ))
            })
    }
}

/// Jira's `errorMessages` and `errors`, one line, at most 500 bytes.
fn error_detail(body: &[u8]) -> Option<String> {
    let v: Value = serde_json::from_slice(body).ok()?;
    let mut parts: Vec<String> = v
        .get("errorMessages")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .map(str::to_string)
        .collect();
    if let Some(errors) = v.get("errors").and_then(Value::as_object) {
        for (k, e) in errors {
            parts.push(format!("{k}: {}", e.as_str().unwrap_or_default()));
        }
    }
    let line = parts.join("; ").replace(['\n', '\r'], " ");
    (!line.is_empty()).then(|| sdk::tracker::clip(&line, 500).0.to_string())
}
