//! A client of the Bitbucket Cloud REST API 2.0 (`<api_url>/repositories/…`), on
//! `ureq` with rustls.
//!
//! - The credential goes only in the `Authorization` header (Bearer with a workspace
//!   or repository access token, or Basic with the username and an app password):
//!   never in a URL, an error or a log line.
//! - A call is bounded by [`REQUEST_TIMEOUT`]; a response body is read up to
//!   [`MAX_BODY_BYTES`]. A GET answered with a redirect within the same API (as
//!   Bitbucket answers some reads, a pull request's `diff` and `diffstat` among
//!   them) is followed once; no other redirect is followed, so the credential never
//!   leaves the API.
//! - 401, 403, 404 and 429 are errors naming the method and path and what they mean
//!   (a 429 with its `Retry-After`); a 429 is not waited out here: the agent or the
//!   operator retries.
//!
//! `ureq` blocks: the async methods run it on tokio's blocking pool.

use std::sync::Arc;
use std::time::Duration;

use protocol::{Code, RpcError};
use serde_json::Value;

/// The `User-Agent` sent.
pub const USER_AGENT: &str = concat!("open-conduit-bitbucket/", env!("CARGO_PKG_VERSION"));
/// How long one request may take, connect to last byte.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// The largest response body read.
pub const MAX_BODY_BYTES: u64 = 4 * 1024 * 1024;

/// How the client authenticates.
#[derive(Clone)]
pub enum Auth {
    /// A workspace, project or repository access token (Bearer).
    Bearer(String),
    /// Basic auth: a username and an app password.
    Basic {
        /// The username.
        username: String,
        /// The app password.
        password: String,
    },
}

impl std::fmt::Debug for Auth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Auth::Basic { username, .. } => write!(f, "Basic({username}, <redacted>)"),
            Auth::Bearer(_) => f.write_str("Bearer(<redacted>)"),
        }
    }
}

impl Auth {
    fn header(&self) -> String {
        match self {
            Auth::Basic { username, password } => format!(
                "Basic {}",
                base64_simd::STANDARD.encode_to_string(format!("{username}:{password}"))
            ),
            Auth::Bearer(t) => format!("Bearer {t}"),
        }
    }
}

struct Inner {
    base: String,
    agent: ureq::Agent,
    auth: Auth,
}

/// A Bitbucket Cloud REST client (cheap to clone).
#[derive(Clone)]
pub struct Client {
    inner: Arc<Inner>,
}

/// A response: its status and body.
#[derive(Debug, Clone)]
pub struct Answer {
    /// The HTTP status (2xx).
    pub status: u16,
    /// The body, at most [`MAX_BODY_BYTES`].
    pub body: Vec<u8>,
}

/// What a status means, for the error.
fn meaning(status: u16) -> (Code, &'static str) {
    match status {
        400 => (Code::Invalid, "Bitbucket refused the request as invalid"),
        401 => (Code::Unauthorized, "the connection's credentials were refused (check token, or username and app_password)"),
        403 => (Code::Unauthorized, "the connection's token or app password lacks the permission for this (its scopes: pullrequest, pullrequest:write, repository)"),
        404 => (Code::NotFound, "no such repository or pull request, or the credentials cannot see it"),
        409 => (Code::Conflict, "Bitbucket refused the request as conflicting with the pull request's state"),
        429 => (Code::Unavailable, "Bitbucket's rate limit was hit"),
        _ => (Code::Unavailable, "Bitbucket answered an error"),
    }
}

impl Client {
    /// A client of the API at `api_url` with `auth`.
    pub fn new(api_url: &str, auth: Auth) -> Result<Client, RpcError> {
        let base = api_url.trim().trim_end_matches('/').to_string();
        if !(base.starts_with("https://") || base.starts_with("http://")) {
            return Err(RpcError::new(
                Code::Invalid,
                format!("api_url `{base}` is not an http or https URL"),
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

    /// The API's base URL.
    pub fn base_url(&self) -> &str {
        &self.inner.base
    }

    /// The path (under the base) a redirect's `Location` names, when it stays in the
    /// API: an absolute URL under the base, or an absolute path under the base's path.
    fn same_api(&self, location: &str) -> Option<String> {
        let base = &self.inner.base;
        if let Some(rest) = location.strip_prefix(base.as_str()) {
            return rest.starts_with('/').then(|| rest.to_string());
        }
        let after_scheme = base.split_once("://").map(|(_, r)| r).unwrap_or_default();
        let base_path = after_scheme
            .find('/')
            .map(|i| &after_scheme[i..])
            .unwrap_or("");
        location
            .strip_prefix(base_path)
            .filter(|r| location.starts_with('/') && r.starts_with('/'))
            .map(str::to_string)
    }

    /// One call: `verb` `path` (with its query, under the base), a JSON body for a
    /// POST or PUT. Answers the 2xx status and body.
    pub fn send(&self, verb: &str, path: &str, body: Option<&Value>) -> Result<Answer, RpcError> {
        let mut path = path.to_string();
        let mut hops = 0;
        loop {
            let what = format!(
                "Bitbucket {verb} {}",
                path.split('?').next().unwrap_or(&path)
            );
            match self.once(verb, &path, body, &what)? {
                Hop::Done(answer) => return Ok(answer),
                Hop::Redirect(status, location) => {
                    let next = (verb == "GET" && hops == 0)
                        .then(|| self.same_api(&location))
                        .flatten();
                    match next {
                        Some(next) => {
                            hops += 1;
                            path = next;
                        }
                        None => {
                            return Err(RpcError::new(
                                Code::Unavailable,
                                format!("{what} answered {status}, a redirect that is not followed (only one, within the API, for a GET)"),
                            ))
                        }
                    }
                }
            }
        }
    }

    fn once(
        &self,
        verb: &str,
        path: &str,
        body: Option<&Value>,
        what: &str,
    ) -> Result<Hop, RpcError> {
        let mut req = ureq::http::Request::builder()
            .method(verb)
            .uri(format!("{}{path}", self.inner.base))
            .header("Accept", "application/json, text/plain")
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
        let header = |name: &str| {
            response
                .headers()
                .get(name)
                .and_then(|v| v.to_str().ok())
                .map(|v| v.trim().to_string())
        };
        let retry_after = header("retry-after");
        let location = header("location");
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
        if (300..400).contains(&status) {
            return Ok(Hop::Redirect(status, location.unwrap_or_default()));
        }
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
        Ok(Hop::Done(Answer { status, body: data }))
    }

    /// [`Client::send`] on tokio's blocking pool.
    pub async fn call(
        &self,
        verb: &'static str,
        path: String,
        body: Option<Value>,
    ) -> Result<Answer, RpcError> {
        let client = self.clone();
        tokio::task::spawn_blocking(move || client.send(verb, &path, body.as_ref()))
            .await
            .unwrap_or_else(|e| {
                Err(RpcError::new(
                    Code::Internal,
                    format!("Bitbucket {verb}: the call was cancelled: {e}"),
                ))
            })
    }

    /// [`Client::call`], its body read as JSON (`Null` when empty).
    pub async fn json(
        &self,
        verb: &'static str,
        path: String,
        body: Option<Value>,
    ) -> Result<Value, RpcError> {
        let what = format!(
            "Bitbucket {verb} {}",
            path.split('?').next().unwrap_or(&path)
        );
        let answer = self.call(verb, path, body).await?;
        if answer.body.iter().all(u8::is_ascii_whitespace) {
            return Ok(Value::Null);
        }
        serde_json::from_slice(&answer.body).map_err(|_| {
            RpcError::new(
                Code::Unavailable,
                format!(
                    "{what} answered {} with a body that is not JSON",
                    answer.status
                ),
            )
        })
    }
}

enum Hop {
    Done(Answer),
    Redirect(u16, String),
}

/// Bitbucket's `error.message` and `error.detail` (or, from a validating proxy, an
/// RFC 7807 problem's `detail` and its `validation` messages), one line, at most 500
/// bytes.
fn error_detail(body: &[u8]) -> Option<String> {
    let v: Value = serde_json::from_slice(body).ok()?;
    let mut parts: Vec<String> = ["/error/message", "/error/detail", "/detail"]
        .iter()
        .filter_map(|p| v.pointer(p).and_then(Value::as_str))
        .filter(|s| !s.is_empty())
        .map(str::to_string)
        .collect();
    for item in v
        .get("validation")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let at: Vec<&str> = item
            .get("location")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .collect();
        let message = item
            .get("message")
            .and_then(Value::as_str)
            .unwrap_or_default();
        parts.push(format!("{}: {message}", at.join(".")));
    }
    let line = parts.join(": ").replace(['\n', '\r'], " ");
    (!line.is_empty()).then(|| sdk::tracker::clip(&line, 500).0.to_string())
}

impl Client {
    /// The path (with its query, under the base) that `url` names when it is in the
    /// API: a page's `next` link (Bitbucket answers it absolute), so a scan follows it
    /// without the credential leaving the API.
    pub fn path_in_api(&self, url: &str) -> Option<String> {
        self.same_api(url)
    }
}
