//! A client of GitHub's REST API (api.github.com, or GitHub Enterprise Server's
//! `https://HOST/api/v3`), on `ureq`.
//!
//! - Authentication by token (`Authorization: Bearer …`) or as a GitHub App
//!   installation ([`crate::app`]: a JWT signed with the App's key buys an
//!   installation token, cached until five minutes before it expires).
//! - Every request sends `Accept: application/vnd.github+json, application/json`,
//!   `X-GitHub-Api-Version: 2022-11-28` and a `User-Agent`, and is bounded by a
//!   [`REQUEST_TIMEOUT`]; a response body is read up to [`MAX_BODY_BYTES`].
//! - GETs are conditional: a `200` with an `ETag` is kept (at most
//!   [`ETAG_ENTRIES`] of them, each at most [`MAX_ETAG_BODY_BYTES`]) and the next GET
//!   of that URL sends `If-None-Match`; a `304` answers the kept body.
//! - [`Client::get_all`] follows the `Link` header's `rel="next"` up to a page cap,
//!   and only to URLs under the client's `api_url` (the token never leaves it).
//! - Rate limits: a `403`/`429` with `X-RateLimit-Remaining: 0` (the primary
//!   limit) or with `Retry-After` (a secondary limit) is waited out once when the
//!   wait is at most [`MAX_WAIT`], else it fails `unavailable` naming the reset time.
//! - Errors carry GitHub's `message`, `documentation_url` and the status
//!   ([`ApiError`]), and a message for the agent (`data.agent_message`, which the
//!   toolbelt forwards bounded to its tool result); every request is logged with `tracing` (method, path, status,
//!   elapsed ms), never a token.
//!
//! `ureq` blocks: the async methods run it on tokio's blocking pool.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use protocol::Code;
use serde_json::{json, Value};

use crate::app::AppCredentials;

/// GitHub's API base URL.
pub const DEFAULT_API_URL: &str = "https://api.github.com";
/// What every request accepts (Prism, like some proxies, wants `application/json`
/// among them).
pub const ACCEPT: &str = "application/vnd.github+json, application/json";
/// The REST API version every request asks for.
pub const API_VERSION: &str = "2022-11-28";
/// The `User-Agent` GitHub requires.
pub const USER_AGENT: &str = concat!("open-conduit-github/", env!("CARGO_PKG_VERSION"));
/// How long one request may take, connect to last byte.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// The largest response body read.
pub const MAX_BODY_BYTES: u64 = 8 * 1024 * 1024;
/// The longest a rate limit is waited out (once); a longer one fails the call.
pub const MAX_WAIT: Duration = Duration::from_secs(60);
/// How many pages [`Client::get_all`] reads at most by default.
pub const MAX_PAGES: usize = 10;
/// How many conditional-GET bodies are kept.
pub const ETAG_ENTRIES: usize = 128;
/// The largest body kept for a conditional GET.
pub const MAX_ETAG_BODY_BYTES: usize = 1024 * 1024;

/// How the client authenticates.
#[derive(Clone)]
pub enum Credentials {
    /// A personal access or OAuth token.
    Token(String),
    /// A GitHub App installation.
    App(Arc<AppCredentials>),
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Credentials::Token(_) => f.write_str("Token(…)"),
            Credentials::App(app) => write!(
                f,
                "App(app_id {}, installation {})",
                app.app_id, app.installation_id
            ),
        }
    }
}

pub use crate::error::ApiError;

/// One page: its JSON body and the next page's URL, if any.
#[derive(Debug, Clone, PartialEq)]
pub struct Page {
    /// The status (`200` also for a `304` answered from the cache).
    pub status: u16,
    /// The body (`null` when empty).
    pub body: Value,
    /// The `Link` header's `rel="next"` URL.
    pub next: Option<String>,
}

#[derive(Default)]
struct EtagCache {
    order: VecDeque<String>,
    entries: HashMap<String, (String, Value, Option<String>)>,
}

impl EtagCache {
    fn put(&mut self, url: &str, etag: String, body: Value, next: Option<String>) {
        if !self.entries.contains_key(url) {
            self.order.push_back(url.to_string());
        }
        self.entries.insert(url.to_string(), (etag, body, next));
        while self.order.len() > ETAG_ENTRIES {
            if let Some(old) = self.order.pop_front() {
                self.entries.remove(&old);
            }
        }
    }
}

struct Inner {
    base: String,
    agent: ureq::Agent,
    credentials: Credentials,
    headers: Vec<(String, String)>,
    max_wait: Duration,
    etags: Mutex<EtagCache>,
    /// The App's installation token and when it expires (ms since the epoch).
    app_token: Mutex<Option<(String, i64)>>,
}

/// A GitHub API client for one connection. Cheap to clone.
#[derive(Clone)]
pub struct Client {
    inner: Arc<Inner>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Client {
    /// A client of `api_url` (empty: [`DEFAULT_API_URL`]), an http or https URL.
    pub fn new(api_url: &str, credentials: Credentials) -> Result<Client, ApiError> {
        Client::build(api_url, credentials, Vec::new(), MAX_WAIT)
    }

    /// A client that also sends these headers on every request, and waits out
    /// rate limits of at most `max_wait` (capped at [`MAX_WAIT`]).
    pub fn build(
        api_url: &str,
        credentials: Credentials,
        headers: Vec<(String, String)>,
        max_wait: Duration,
    ) -> Result<Client, ApiError> {
        let base = if api_url.trim().is_empty() {
            DEFAULT_API_URL
        } else {
            api_url.trim()
        };
        let base = base.trim_end_matches('/').to_string();
        if !(base.starts_with("https://") || base.starts_with("http://")) {
            return Err(ApiError::new(
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
                credentials,
                headers,
                max_wait: max_wait.min(MAX_WAIT),
                etags: Mutex::new(EtagCache::default()),
                app_token: Mutex::new(None),
            }),
        })
    }

    /// The API base URL, without a trailing `/`.
    pub fn api_url(&self) -> &str {
        &self.inner.base
    }

    /// `method path` with an optional JSON body: the response's JSON.
    pub async fn request(
        &self,
        method: &str,
        path: &str,
        body: Option<Value>,
    ) -> Result<Value, ApiError> {
        let this = self.clone();
        let (method, path) = (method.to_string(), path.to_string());
        blocking(move || this.request_blocking(&method, &path, body.as_ref())).await
    }

    /// Every item of a paged list GET, following `rel="next"` for at most
    /// `max_pages` pages: the items and whether more pages were left unread.
    pub async fn get_all(
        &self,
        path: &str,
        max_pages: usize,
    ) -> Result<(Vec<Value>, bool), ApiError> {
        let this = self.clone();
        let path = path.to_string();
        blocking(move || this.get_all_blocking(&path, max_pages)).await
    }

    /// One GET page: its status, body and the `Link` header's next URL.
    pub async fn get_page(&self, path: &str) -> Result<Page, ApiError> {
        let this = self.clone();
        let path = path.to_string();
        blocking(move || this.send("GET", &path, None, true)).await
    }

    /// [`Client::request`], blocking.
    pub fn request_blocking(
        &self,
        method: &str,
        path: &str,
        body: Option<&Value>,
    ) -> Result<Value, ApiError> {
        Ok(self.send(method, path, body, true)?.body)
    }

    /// [`Client::get_all`] of a listing whose pages are objects holding the list in
    /// `field` (`{"total_count": 2, "check_runs": [...]}`).
    pub async fn get_all_in(
        &self,
        path: &str,
        field: &'static str,
        max_pages: usize,
    ) -> Result<(Vec<Value>, bool), ApiError> {
        let this = self.clone();
        let path = path.to_string();
        blocking(move || this.pages_blocking(&path, Some(field), max_pages)).await
    }

    /// The login the client acts as: a token's user (`GET /user`), or an App's
    /// bot user, `<slug>[bot]` (the slug from `GET /app`, asked with a fresh JWT).
    pub async fn acting_login(&self) -> Result<String, ApiError> {
        let this = self.clone();
        blocking(move || this.acting_login_blocking()).await
    }

    fn acting_login_blocking(&self) -> Result<String, ApiError> {
        let (path, field, suffix, body) = match &self.inner.credentials {
            Credentials::Token(_) => (
                "/user",
                "login",
                "",
                self.send("GET", "/user", None, true)?.body,
            ),
            Credentials::App(app) => {
                let jwt = app.jwt(protocol::time::now_ms() / 1000)?;
                let url = self.url_of("/app")?;
                let page = self.send_with("GET", &url, None, Some(format!("Bearer {jwt}")))?;
                ("/app", "slug", "[bot]", page.body)
            }
        };
        body[field]
            .as_str()
            .filter(|s| !s.is_empty())
            .map(|s| format!("{s}{suffix}"))
            .ok_or_else(|| {
                ApiError::new(Code::Unavailable, format!("GET {path} answered no {field}"))
            })
    }

    /// [`Client::get_all`], blocking.
    pub fn get_all_blocking(
        &self,
        path: &str,
        max_pages: usize,
    ) -> Result<(Vec<Value>, bool), ApiError> {
        self.pages_blocking(path, None, max_pages)
    }

    fn pages_blocking(
        &self,
        path: &str,
        field: Option<&str>,
        max_pages: usize,
    ) -> Result<(Vec<Value>, bool), ApiError> {
        let mut items = Vec::new();
        let mut url = path.to_string();
        for _ in 0..max_pages.max(1) {
            let page = self.send("GET", &url, None, true)?;
            let body = match (field, page.body) {
                (Some(f), Value::Object(mut m)) => m.remove(f).unwrap_or(Value::Null),
                (_, body) => body,
            };
            match body {
                Value::Array(list) => items.extend(list),
                other => {
                    return Err(ApiError::new(
                        Code::Unavailable,
                        format!("GET {url} answered {}, not a list", type_name(&other)),
                    ))
                }
            }
            match page.next {
                None => return Ok((items, false)),
                Some(next) if self.under_base(&next) => url = next,
                Some(next) => {
                    tracing::warn!(next = %next, base = %self.inner.base,
                        "not following a next page outside the api_url");
                    return Ok((items, true));
                }
            }
        }
        Ok((items, true))
    }

    fn under_base(&self, url: &str) -> bool {
        url.strip_prefix(&self.inner.base)
            .is_some_and(|rest| rest.starts_with('/') || rest.starts_with('?'))
    }

    fn url_of(&self, path: &str) -> Result<String, ApiError> {
        if path.starts_with('/') {
            Ok(format!("{}{path}", self.inner.base))
        } else if self.under_base(path) {
            Ok(path.to_string())
        } else {
            Err(ApiError::new(
                Code::Invalid,
                format!("`{path}` is not under the api_url {}", self.inner.base),
            ))
        }
    }

    /// The `Authorization` header's value.
    fn authorization(&self) -> Result<String, ApiError> {
        match &self.inner.credentials {
            Credentials::Token(t) => Ok(format!("Bearer {t}")),
            Credentials::App(app) => Ok(format!("Bearer {}", self.installation_token(app)?)),
        }
    }

    /// The App installation's token: cached until [`crate::app::REFRESH_MARGIN`]
    /// before it expires, else bought with a fresh JWT.
    pub fn installation_token(&self, app: &AppCredentials) -> Result<String, ApiError> {
        let now = protocol::time::now_ms();
        let margin = i64::try_from(crate::app::REFRESH_MARGIN.as_millis()).unwrap_or(i64::MAX);
        if let Some((token, expires)) = &*lock(&self.inner.app_token) {
            if now.saturating_add(margin) < *expires {
                return Ok(token.clone());
            }
        }
        let (token, expires) = self.buy_token(app, &json!({}))?;
        *lock(&self.inner.app_token) = Some((token.clone(), expires));
        Ok(token)
    }

    /// A fresh installation token limited to `repositories` (names in the
    /// installation's account) and `permissions`, bought with a fresh JWT and never
    /// cached here: the token and when it expires (ms since the epoch). A run's own
    /// git gets one ([`crate::credential`]).
    pub fn scoped_installation_token(
        &self,
        app: &AppCredentials,
        repositories: &[String],
        permissions: &Value,
    ) -> Result<(String, i64), ApiError> {
        self.buy_token(
            app,
            &json!({"repositories": repositories, "permissions": permissions}),
        )
    }

    /// Buy an installation token with a fresh JWT (`POST
    /// /app/installations/{id}/access_tokens` with `body`): the token and when it
    /// expires (ms since the epoch).
    fn buy_token(&self, app: &AppCredentials, body: &Value) -> Result<(String, i64), ApiError> {
        let jwt = app.jwt(protocol::time::now_ms() / 1000)?;
        let path = format!("/app/installations/{}/access_tokens", app.installation_id);
        let url = self.url_of(&path)?;
        let page = self.send_with("POST", &url, Some(body), Some(format!("Bearer {jwt}")))?;
        let token = page.body["token"]
            .as_str()
            .filter(|t| !t.is_empty())
            .ok_or_else(|| {
                ApiError::new(Code::Unavailable, format!("POST {path} answered no token"))
            })?;
        let expires = page.body["expires_at"]
            .as_str()
            .and_then(protocol::time::parse_rfc3339_ms)
            .ok_or_else(|| {
                ApiError::new(
                    Code::Unavailable,
                    format!("POST {path} answered no RFC 3339 expires_at"),
                )
            })?;
        Ok((token.to_string(), expires))
    }

    /// Revoke an installation token (`DELETE /installation/token`, authenticated by
    /// that token itself).
    pub fn revoke_installation_token(&self, token: &str) -> Result<(), ApiError> {
        let url = self.url_of("/installation/token")?;
        self.send_with("DELETE", &url, None, Some(format!("Bearer {token}")))
            .map(|_| ())
    }

    /// The App's credentials, when the client acts as an App installation.
    pub fn app(&self) -> Option<Arc<AppCredentials>> {
        match &self.inner.credentials {
            Credentials::App(app) => Some(app.clone()),
            Credentials::Token(_) => None,
        }
    }

    /// The connection's token, when the client acts by token.
    pub fn token(&self) -> Option<&str> {
        match &self.inner.credentials {
            Credentials::Token(t) => Some(t),
            Credentials::App(_) => None,
        }
    }

    fn send(
        &self,
        method: &str,
        path: &str,
        body: Option<&Value>,
        auth: bool,
    ) -> Result<Page, ApiError> {
        let url = self.url_of(path)?;
        let authorization = if auth {
            Some(self.authorization()?)
        } else {
            None
        };
        let result = self.send_with(method, &url, body, authorization);
        if let (Err(e), Credentials::App(_)) = (&result, &self.inner.credentials) {
            if e.status == Some(401) {
                // The installation token was revoked or expired early: buy a new
                // one next time.
                *lock(&self.inner.app_token) = None;
            }
        }
        result
    }

    fn send_with(
        &self,
        method: &str,
        url: &str,
        body: Option<&Value>,
        authorization: Option<String>,
    ) -> Result<Page, ApiError> {
        let payload = match body {
            Some(b) => Some(serde_json::to_vec(b).map_err(|e| {
                ApiError::new(Code::Invalid, format!("the request body is not JSON: {e}"))
            })?),
            None => None,
        };
        let cached = if method == "GET" {
            lock(&self.inner.etags).entries.get(url).cloned()
        } else {
            None
        };
        let path = url.strip_prefix(&self.inner.base).unwrap_or(url);
        let mut waited = false;
        loop {
            let mut req = ureq::http::Request::builder()
                .method(method)
                .uri(url)
                .header("Accept", ACCEPT)
                .header("X-GitHub-Api-Version", API_VERSION)
                .header("User-Agent", USER_AGENT);
            if let Some(a) = &authorization {
                req = req.header("Authorization", a);
            }
            if let Some((etag, _, _)) = &cached {
                req = req.header("If-None-Match", etag);
            }
            for (n, v) in &self.inner.headers {
                req = req.header(n, v);
            }
            if payload.is_some() {
                req = req.header("Content-Type", "application/json");
            }
            let req = req
                .body(payload.clone().unwrap_or_default())
                .map_err(|e| ApiError::new(Code::Invalid, format!("{method} {path}: {e}")))?;
            let started = Instant::now();
            let response = self.inner.agent.run(req);
            let elapsed_ms = started.elapsed().as_millis();
            let response = match response {
                Ok(r) => r,
                Err(e) => {
                    tracing::warn!(method, path, elapsed_ms, error = %e, "GitHub API request failed");
                    let what = match e {
                        ureq::Error::Timeout(_) => format!(
                            "{method} {path} took longer than {}s",
                            REQUEST_TIMEOUT.as_secs()
                        ),
                        other => format!("{method} {path}: {other}"),
                    };
                    return Err(ApiError::new(Code::Unavailable, what));
                }
            };
            let status = response.status().as_u16();
            tracing::info!(method, path, status, elapsed_ms, "GitHub API request");
            let header = |name: &str| {
                response
                    .headers()
                    .get(name)
                    .and_then(|v| v.to_str().ok())
                    .map(str::to_string)
            };
            let etag = header("etag");
            let next = header("link").as_deref().and_then(next_link);
            let remaining = header("x-ratelimit-remaining");
            let reset = header("x-ratelimit-reset");
            let retry_after = header("retry-after");
            if status == 304 {
                if let Some((_, body, next)) = cached.clone() {
                    return Ok(Page {
                        status: 200,
                        body,
                        next,
                    });
                }
            }
            let bytes = read_bounded(response, method, path)?;
            if (200..300).contains(&status) {
                let body: Value = if bytes.iter().all(u8::is_ascii_whitespace) {
                    Value::Null
                } else {
                    serde_json::from_slice(&bytes).map_err(|e| {
                        ApiError::new(
                            Code::Unavailable,
                            format!("{method} {path} answered {status} with a body that is not JSON: {e}"),
                        )
                    })?
                };
                if let (true, Some(etag)) = (method == "GET", etag) {
                    if bytes.len() <= MAX_ETAG_BODY_BYTES {
                        lock(&self.inner.etags).put(url, etag, body.clone(), next.clone());
                    }
                }
                return Ok(Page { status, body, next });
            }
            let mut err = github_error(status, &bytes);
            if matches!(status, 403 | 429) {
                let wait = if remaining.as_deref() == Some("0") {
                    let reset_s = reset.as_deref().and_then(|r| r.trim().parse::<i64>().ok());
                    err.code = Code::Unavailable;
                    err.reset_at =
                        reset_s.map(|s| protocol::time::format_rfc3339_ms(s.saturating_mul(1000)));
                    reset_s.map(|s| {
                        let now = protocol::time::now_ms();
                        let ms = s.saturating_mul(1000).saturating_sub(now).max(0);
                        Duration::from_millis(u64::try_from(ms).unwrap_or(u64::MAX))
                    })
                } else if let Some(secs) = retry_after
                    .as_deref()
                    .and_then(|r| r.trim().parse::<u64>().ok())
                {
                    err.code = Code::Unavailable;
                    err.reset_at = Some(protocol::time::format_rfc3339_ms(
                        protocol::time::now_ms().saturating_add(
                            i64::try_from(secs.saturating_mul(1000)).unwrap_or(i64::MAX),
                        ),
                    ));
                    Some(Duration::from_secs(secs))
                } else {
                    if status == 429 || err.message.to_lowercase().contains("rate limit") {
                        err.code = Code::Unavailable;
                    }
                    None
                };
                if let Some(wait) = wait {
                    if !waited && wait <= self.inner.max_wait {
                        tracing::info!(
                            method,
                            path,
                            wait_ms = wait.as_millis(),
                            "waiting out GitHub's rate limit once"
                        );
                        std::thread::sleep(wait);
                        waited = true;
                        continue;
                    }
                    err.message = format!(
                        "{} (a rate limit; not waited: longer than {}s, or already waited once)",
                        err.message,
                        self.inner.max_wait.as_secs()
                    );
                }
            }
            return Err(err);
        }
    }
}

fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "an object",
    }
}

fn read_bounded(
    response: ureq::http::Response<ureq::Body>,
    method: &str,
    path: &str,
) -> Result<Vec<u8>, ApiError> {
    response
        .into_body()
        .with_config()
        .limit(MAX_BODY_BYTES)
        .read_to_vec()
        .map_err(|e| match e {
            ureq::Error::BodyExceedsLimit(_) => ApiError::new(
                Code::Unavailable,
                format!("{method} {path}: the response body is larger than {MAX_BODY_BYTES} bytes"),
            ),
            ureq::Error::Timeout(_) => ApiError::new(
                Code::Unavailable,
                format!(
                    "{method} {path}: the response took longer than {}s",
                    REQUEST_TIMEOUT.as_secs()
                ),
            ),
            other => ApiError::new(Code::Unavailable, format!("{method} {path}: {other}")),
        })
}

/// The error of a non-2xx answer, with GitHub's `message`, `documentation_url`
/// and `errors` when the body has them.
pub fn github_error(status: u16, body: &[u8]) -> ApiError {
    let parsed: Value = serde_json::from_slice(body).unwrap_or(Value::Null);
    // GitHub's `message`; else an RFC 7807 problem's `title: detail` (a proxy's,
    // or Prism's own).
    let message = parsed["message"]
        .as_str()
        .map(str::to_string)
        .or_else(|| {
            let title = parsed["title"].as_str()?;
            Some(match parsed["detail"].as_str() {
                Some(d) => format!("{title}: {d}"),
                None => title.to_string(),
            })
        })
        .unwrap_or_else(|| format!("HTTP {status}"));
    let code = match status {
        401 | 403 => Code::Unauthorized,
        404 | 410 => Code::NotFound,
        400 | 422 => Code::Invalid,
        409 => Code::Conflict,
        _ => Code::Unavailable,
    };
    ApiError {
        code,
        status: Some(status),
        message,
        documentation_url: parsed["documentation_url"].as_str().map(str::to_string),
        errors: parsed.get("errors").filter(|e| !e.is_null()).cloned(),
        reset_at: None,
    }
}

/// The value of query parameter `name` in `url`, percent-decoded.
pub fn query_param(url: &str, name: &str) -> Option<String> {
    let query = url.split_once('?')?.1;
    let query = query.split('#').next().unwrap_or_default();
    query.split('&').find_map(|pair| {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        (k == name).then(|| percent_decode(v))
    })
}

/// `s` percent-encoded for a query value (everything but RFC 3986's unreserved).
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

fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| char::from(b).to_digit(16);
        match (bytes[i], bytes.get(i + 1), bytes.get(i + 2)) {
            (b'%', Some(&h), Some(&l)) if hex(h).is_some() && hex(l).is_some() => {
                let v = hex(h).unwrap_or(0) * 16 + hex(l).unwrap_or(0);
                out.push(u8::try_from(v).unwrap_or(b'?'));
                i += 3;
            }
            (b'+', _, _) => {
                out.push(b' ');
                i += 1;
            }
            (b, _, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The `rel="next"` URL of a `Link` header.
pub fn next_link(link: &str) -> Option<String> {
    link.split(',').find_map(|part| {
        let (url, params) = part.split_once(';')?;
        let is_next = params.split(';').any(|p| {
            let p = p.trim();
            p == "rel=\"next\"" || p == "rel=next"
        });
        let url = url.trim().strip_prefix('<')?.strip_suffix('>')?;
        is_next.then(|| url.to_string())
    })
}

pub(crate) async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, ApiError> + Send + 'static,
) -> Result<T, ApiError> {
    tokio::task::spawn_blocking(f).await.unwrap_or_else(|e| {
        Err(ApiError::new(
            Code::Internal,
            format!("the API call panicked or was cancelled: {e}"),
        ))
    })
}
