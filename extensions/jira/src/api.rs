//! A client of the Jira Cloud platform REST API v3 (`<base_url>/rest/api/3/…`), on
//! `ureq` with rustls.
//!
//! - The credential goes only in the `Authorization` header (Basic with the email
//!   and API token, or Bearer): never in a URL, an error or a log line.
//! - A call is bounded by [`REQUEST_TIMEOUT`]; a response body is read up to
//!   [`MAX_BODY_BYTES`]; no redirect is followed.
//! - 401, 403, 404 and 429 are errors naming the method and path and what they
//!   mean (a 429 with its `Retry-After`); it is not waited out here: the agent or
//!   the operator retries.
//!
//! `ureq` blocks: the async methods run it on tokio's blocking pool.

use std::sync::Arc;
use std::time::Duration;

use protocol::{Code, RpcError};
use serde_json::Value;

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
        Ok(Client {
            inner: Arc::new(Inner {
                base,
                agent: ureq::Agent::new_with_config(config),
                auth,
            }),
        })
    }

    /// The site's base URL.
    pub fn base_url(&self) -> &str {
        &self.inner.base
    }

    /// One call: `verb` `path` (with its query), a JSON body for POST. Answers the
    /// JSON body (`Null` for an empty one, as a 204).
    pub fn send(&self, verb: &str, path: &str, body: Option<&Value>) -> Result<Value, RpcError> {
        let what = format!("Jira {verb} {}", path.split('?').next().unwrap_or(path));
        let mut req = ureq::http::Request::builder()
            .method(verb)
            .uri(format!("{}{path}", self.inner.base))
            .header("Accept", "application/json")
            .header("Authorization", self.inner.auth.header());
        let bytes = match body {
            Some(b) => {
                req = req.header("Content-Type", "application/json");
                serde_json::to_vec(b).unwrap_or_default()
            }
            None => Vec::new(),
        };
        let req = req
            .body(bytes)
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
        let retry_after = response
            .headers()
            .get("retry-after")
            .and_then(|v| v.to_str().ok())
            .map(|v| v.trim().to_string());
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
        tracing::info!(status, "{what}");
        if !(200..300).contains(&status) {
            let (code, means) = meaning(status);
            let mut message = format!("{what} answered {status}: {means}");
            if status == 429 {
                match retry_after {
                    Some(s) => {
                        message.push_str(&format!("; Retry-After {s} s: try again after that"))
                    }
                    None => message.push_str("; try again later"),
                }
            }
            if let Some(detail) = error_detail(&data) {
                message.push_str(&format!(" ({detail})"));
            }
            tracing::warn!("{message}");
            return Err(RpcError::new(code, message));
        }
        if data.iter().all(u8::is_ascii_whitespace) {
            return Ok(Value::Null);
        }
        serde_json::from_slice(&data).map_err(|_| {
            RpcError::new(
                Code::Unavailable,
                format!("{what} answered {status} with a body that is not JSON"),
            )
        })
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
