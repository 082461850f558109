//! A client of Linear's GraphQL API (`POST <api_url>` with `{query, variables}`,
//! `Authorization: <api key or OAuth token>`), on `ureq` with rustls.
//!
//! Every query and mutation the package sends is a constant here ([`DOCUMENTS`]), so
//! the tests validate each against Linear's published schema.
//!
//! Errors name the call and what Linear said (HTTP status, `extensions.code`,
//! message) and never carry the key; `data.linear` holds the same (`status`,
//! `code`, `message`, and for a rate limit `retry_after_s` and `reset_at`), and
//! `data.agent_message` what the agent is told:
//!
//! - HTTP 401 or `AUTHENTICATION_ERROR`: `unauthorized`, the api_key was refused;
//! - HTTP 403 or `FORBIDDEN`: `unauthorized`, the key may not do this;
//! - HTTP 404 or `Entity not found`: `not_found` (the operations name the key);
//! - HTTP 429 or `RATELIMITED` (Linear answers it with HTTP 400; its request or
//!   complexity budget): `unavailable` with `retry_after_s` and `reset_at` from
//!   `Retry-After` or the latest of `X-RateLimit-Requests-Reset` and
//!   `X-RateLimit-Complexity-Reset` (Unix ms). A reset at most
//!   [`MAX_RATE_LIMIT_WAIT`] away is waited out and the call asked again
//!   ([`RATE_LIMIT_RETRIES`]);
//! - a query over Linear's per-query complexity: `invalid`, not retried;
//! - other GraphQL `errors`: `invalid` (`INPUT_ERROR`, validation) or
//!   `unavailable`, naming their message and code.
//!
//! After a refused key or a rate limit not waited out, the key is held back for a
//! while ([`AUTH_BACKOFF`], the reset): the background passes (projector,
//! reconcile) answer the refusal without asking Linear again; the agent's
//! operations and the doctor's check ([`Client::without_backoff`]) still ask. The
//! back-off is the trackers' shared one ([`sdk::tracker::backoff`]).
//! Bounds: [`MAX_BODY_BYTES`] of response, [`REQUEST_TIMEOUT`] a call, no
//! redirects.

use std::time::Duration;

use protocol::{Code, RpcError};
use sdk::tracker::backoff::{Backoff, RateLimitStep};
use serde_json::{json, Value};

pub use sdk::tracker::backoff::{
    reworded, AUTH_BACKOFF, MAX_RATE_LIMIT_BACKOFF, MAX_RATE_LIMIT_WAIT, RATE_LIMIT_RETRIES,
};

/// The most bytes of a response read.
pub const MAX_BODY_BYTES: u64 = 4 * 1024 * 1024;
/// How long one call may take.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
const USER_AGENT: &str = concat!("open-conduit-linear/", env!("CARGO_PKG_VERSION"));

/// An issue with its comments (the first `$first`, oldest first).
pub const ISSUE_QUERY: &str = "query OcIssue($id: String!, $first: Int!) {
  issue(id: $id) {
    id identifier title description url
    creator { id name }
    assignee { id name }
    state { id name type }
    team { id key name }
    labels { nodes { id name } }
    comments(first: $first) {
      nodes { id body createdAt user { id name } }
      pageInfo { hasNextPage }
    }
  }
}";

/// A team's workflow states.
pub const TEAM_STATES_QUERY: &str = "query OcTeamStates($id: String!) {
  team(id: $id) {
    id key
    states(first: 250) { nodes { id name type } }
  }
}";

/// A comment on an issue.
pub const COMMENT_MUTATION: &str = "mutation OcComment($input: CommentCreateInput!) {
  commentCreate(input: $input) {
    success
    comment { id url createdAt }
  }
}";

/// An issue moved to a workflow state.
pub const MOVE_MUTATION: &str = "mutation OcMove($id: String!, $input: IssueUpdateInput!) {
  issueUpdate(id: $id, input: $input) {
    success
    issue { id identifier state { id name type } }
  }
}";

/// Labels of a name (the team's and the workspace's), to add one by name.
pub const LABELS_QUERY: &str = "query OcLabels($name: String!) {
  issueLabels(first: 50, filter: { name: { eqIgnoreCase: $name } }) {
    nodes { id name team { id } }
  }
}";

/// A label added to an issue.
pub const ADD_LABEL_MUTATION: &str = "mutation OcAddLabel($id: String!, $labelId: String!) {
  issueAddLabel(id: $id, labelId: $labelId) {
    success
    issue { id identifier labels { nodes { id name } } }
  }
}";

/// The issues of a filter (reconcile: the entry's teams, updated after the
/// checkpoint), with what a webhook payload of their last change carries: the
/// fields, and the newest history entries (what the change was).
pub const ISSUES_SINCE_QUERY: &str =
    "query OcIssuesSince($filter: IssueFilter!, $first: Int!, $after: String) {
  issues(filter: $filter, first: $first, after: $after, orderBy: updatedAt) {
    nodes {
      id identifier title description url createdAt updatedAt
      team { id key name }
      state { id name type }
      assignee { id name email }
      creator { id name email }
      labels { nodes { id name } }
      history(first: 5) {
        nodes { createdAt fromAssigneeId toAssigneeId fromStateId toStateId addedLabelIds }
      }
    }
    pageInfo { hasNextPage endCursor }
  }
}";

/// A comment edited in place (the projector's status comment).
pub const COMMENT_UPDATE_MUTATION: &str =
    "mutation OcCommentUpdate($id: String!, $input: CommentUpdateInput!) {
  commentUpdate(id: $id, input: $input) {
    success
    comment { id }
  }
}";

/// The connection's own user and workspace (the doctor's check of the key).
pub const VIEWER_QUERY: &str = "query OcViewer {
  viewer { id name email }
  organization { name urlKey }
}";

/// Every document the package sends.
pub const DOCUMENTS: [(&str, &str); 9] = [
    ("OcIssue", ISSUE_QUERY),
    ("OcTeamStates", TEAM_STATES_QUERY),
    ("OcComment", COMMENT_MUTATION),
    ("OcMove", MOVE_MUTATION),
    ("OcLabels", LABELS_QUERY),
    ("OcAddLabel", ADD_LABEL_MUTATION),
    ("OcIssuesSince", ISSUES_SINCE_QUERY),
    ("OcCommentUpdate", COMMENT_UPDATE_MUTATION),
    ("OcViewer", VIEWER_QUERY),
];

/// A client of one connection.
#[derive(Clone)]
pub struct Client {
    url: String,
    key: String,
    /// The hold after a refusal, keyed by a digest of the URL and the key.
    backoff: Backoff,
    agent: ureq::Agent,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client").field("url", &self.url).finish()
    }
}

fn unavailable(what: &str, why: impl std::fmt::Display) -> RpcError {
    RpcError::new(Code::Unavailable, format!("Linear {what}: {why}"))
}

/// What a rate limited answer's headers say: Linear's resets (the latest of
/// `X-RateLimit-Requests-Reset` and `X-RateLimit-Complexity-Reset`, Unix ms) and a
/// `Retry-After` (seconds), if any.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RateHeaders {
    /// The latest reset, Unix ms.
    pub reset_ms: Option<i64>,
    /// `Retry-After`, seconds.
    pub retry_after_s: Option<u64>,
}

impl RateHeaders {
    /// The headers of `headers`.
    pub fn of(headers: &ureq::http::HeaderMap) -> RateHeaders {
        let text = |h: &str| headers.get(h).and_then(|v| v.to_str().ok()).map(str::trim);
        RateHeaders {
            reset_ms: ["x-ratelimit-requests-reset", "x-ratelimit-complexity-reset"]
                .iter()
                .filter_map(|h| text(h)?.parse::<i64>().ok())
                .filter(|ms| *ms > 0)
                .max(),
            retry_after_s: text("retry-after").and_then(|v| v.parse::<u64>().ok()),
        }
    }

    /// Seconds until Linear takes calls again (at least 1), and the reset as
    /// RFC 3339, from `now_ms`.
    pub fn retry(&self, now_ms: i64) -> (Option<u64>, Option<String>) {
        let reset_at = self.reset_ms.map(protocol::time::format_rfc3339_ms);
        let from_reset = self.reset_ms.map(|ms| {
            u64::try_from((ms - now_ms).max(0))
                .unwrap_or(0)
                .div_ceil(1000)
        });
        let s = self.retry_after_s.or(from_reset).map(|s| s.max(1));
        (s, reset_at)
    }
}

/// What kind of refusal an error is, for the back-off.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Auth,
    RateLimited(Option<u64>),
    Other,
}

/// The error of a refusal: `code`, the message, and `data.linear` with what Linear
/// said (`status`, `code`, `message`, and for a rate limit `retry_after_s` and
/// `reset_at`, also as `data.reset_at`), and `data.agent_message`.
fn refusal(
    code: Code,
    text: String,
    status: u16,
    linear_code: &str,
    message: &str,
    retry: (Option<u64>, Option<String>),
) -> RpcError {
    let mut e = RpcError::new(code, text);
    let mut linear = serde_json::Map::new();
    linear.insert("status".into(), json!(status));
    if !linear_code.is_empty() {
        linear.insert("code".into(), json!(linear_code));
    }
    if !message.is_empty() {
        linear.insert("message".into(), json!(message));
    }
    if let Some(s) = retry.0 {
        linear.insert("retry_after_s".into(), json!(s));
    }
    if let Some(at) = &retry.1 {
        linear.insert("reset_at".into(), json!(at));
    }
    let agent = protocol::toolbelt::agent_message(&e.message);
    if let Some(Value::Object(data)) = e.data.as_mut() {
        if let Some(at) = retry.1 {
            data.insert("reset_at".into(), json!(at));
        }
        data.insert("linear".into(), Value::Object(linear));
        data.insert(protocol::toolbelt::AGENT_MESSAGE_FIELD.into(), json!(agent));
    }
    e
}

/// The `retry_after_s` of an error this module made, if it was a rate limit.
pub fn retry_after_s(e: &RpcError) -> Option<u64> {
    e.data.as_ref()?.pointer("/linear/retry_after_s")?.as_u64()
}

/// Reads a GraphQL answer at `now_ms`: `data`, or the error its status or `errors`
/// make (see the module doc).
pub fn read_answer(
    what: &str,
    status: u16,
    rate: RateHeaders,
    body: &[u8],
    now_ms: i64,
) -> Result<Value, RpcError> {
    classify(what, status, rate, body, now_ms).map_err(|(e, _)| e)
}

fn classify(
    what: &str,
    status: u16,
    rate: RateHeaders,
    body: &[u8],
    now_ms: i64,
) -> Result<Value, (RpcError, Kind)> {
    let parsed: Option<Value> = serde_json::from_slice(body).ok();
    let first_error = parsed
        .as_ref()
        .and_then(|v| v.get("errors"))
        .and_then(Value::as_array)
        .and_then(|a| a.first())
        .cloned();
    let code = first_error
        .as_ref()
        .and_then(|e| e.pointer("/extensions/code"))
        .and_then(Value::as_str)
        .map(|c| sdk::tracker::one_line(c, 60))
        .unwrap_or_default()
        .to_string();
    let message = first_error
        .as_ref()
        .and_then(|e| e.get("message"))
        .and_then(Value::as_str)
        .map(|m| sdk::tracker::one_line(m, 300))
        .unwrap_or_default()
        .to_string();
    let said = |fallback: &str| {
        let mut s = format!("HTTP {status}");
        if !code.is_empty() {
            s.push_str(&format!(" {code}"));
        }
        s.push_str(": ");
        s.push_str(if message.is_empty() {
            fallback
        } else {
            &message
        });
        s
    };
    let none = (None, None);
    if status == 429 || code == "RATELIMITED" {
        let retry = rate.retry(now_ms);
        let when = match (&retry.0, &retry.1) {
            (Some(s), Some(at)) => format!("retry after {s} s (Linear's limit resets at {at})"),
            (Some(s), None) => format!("retry after {s} s"),
            _ => "retry later (Linear named no reset)".to_string(),
        };
        let text = format!(
            "Linear {what}: rate limited ({}; Linear's request or complexity limit of the key): {when}",
            said("rate limit exceeded")
        );
        let kind = Kind::RateLimited(retry.0);
        return Err((
            refusal(Code::Unavailable, text, status, &code, &message, retry),
            kind,
        ));
    }
    if status == 401 || code == "AUTHENTICATION_ERROR" {
        let text = format!(
            "Linear {what}: the connection's api_key was refused ({}); check the key (Linear: Settings, Security & access, Personal API keys) and apply the configuration",
            said("not authenticated")
        );
        return Err((
            refusal(Code::Unauthorized, text, status, &code, &message, none),
            Kind::Auth,
        ));
    }
    if status == 403 || code == "FORBIDDEN" {
        let text = format!(
            "Linear {what}: the connection's key may not do this ({}); check the key's permissions and its access to the team",
            said("forbidden")
        );
        return Err((
            refusal(Code::Unauthorized, text, status, &code, &message, none),
            Kind::Other,
        ));
    }
    if status == 404 || message.starts_with("Entity not found") {
        let text = format!("Linear {what}: not found ({})", said("not found"));
        return Err((
            refusal(Code::NotFound, text, status, &code, &message, none),
            Kind::Other,
        ));
    }
    if first_error.is_some() {
        let lower = message.to_ascii_lowercase();
        let (code_out, text) = if lower.contains("too complex") || code.contains("COMPLEXITY") {
            (
                Code::Invalid,
                format!(
                    "Linear {what}: the query is more complex than Linear allows one query ({}); not retried",
                    said("query too complex")
                ),
            )
        } else if code == "INPUT_ERROR"
            || code == "GRAPHQL_VALIDATION_FAILED"
            || code == "BAD_USER_INPUT"
        {
            (Code::Invalid, format!("Linear {what}: {}", said("invalid")))
        } else {
            (
                Code::Unavailable,
                format!("Linear {what}: {}", said("an error")),
            )
        };
        let mut e = refusal(code_out, text, status, &code, &message, none);
        // The message names the GraphQL code last, as before.
        if !code.is_empty() && !e.message.contains(&format!("({code})")) {
            e.message.push_str(&format!(" ({code})"));
        }
        return Err((e, Kind::Other));
    }
    if !(200..300).contains(&status) {
        return Err((
            refusal(
                Code::Unavailable,
                format!("Linear {what}: HTTP {status}"),
                status,
                "",
                "",
                none,
            ),
            Kind::Other,
        ));
    }
    parsed
        .and_then(|v| v.get("data").cloned())
        .filter(Value::is_object)
        .ok_or_else(|| (unavailable(what, "the answer has no data"), Kind::Other))
}

impl Client {
    /// A client of `url` with `key`.
    pub fn new(url: &str, key: &str) -> Result<Client, RpcError> {
        if !(url.starts_with("https://") || url.starts_with("http://")) {
            return Err(RpcError::new(
                Code::Invalid,
                format!("api_url `{url}` is not an http or https URL"),
            ));
        }
        let config = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(REQUEST_TIMEOUT))
            .max_redirects(0)
            .user_agent(USER_AGENT)
            .build();
        Ok(Client {
            url: url.to_string(),
            key: key.to_string(),
            backoff: Backoff::new("Linear", url, key),
            agent: ureq::Agent::new_with_config(config),
        })
    }

    /// This client, calling Linear even while its key is held back (after a 401 or
    /// a rate limit): for a call someone asked for now (the agent's operation, the
    /// doctor's check), which still records a new refusal. The background passes
    /// (projector, reconcile) use the client as made, and are not sent while held.
    pub fn without_backoff(mut self) -> Client {
        self.backoff = self.backoff.without_holds();
        self
    }

    /// Sends `query` with `variables` (blocking), answering `data`. `what` names the
    /// call in errors. A rate limit whose reset is at most [`MAX_RATE_LIMIT_WAIT`]
    /// away is waited out and the call asked again, up to [`RATE_LIMIT_RETRIES`]
    /// times; otherwise the error says when to retry (`retry_after_s`). After a
    /// refused key ([`AUTH_BACKOFF`]) or a rate limit not waited out (until its
    /// reset, at most [`MAX_RATE_LIMIT_BACKOFF`]) the key is held back: calls of a
    /// client honouring holds answer the refusal without asking Linear.
    pub fn send_blocking(
        &self,
        what: &str,
        query: &str,
        variables: &Value,
    ) -> Result<Value, RpcError> {
        if let Some(e) = self.backoff.held() {
            tracing::warn!(call = what, "not calling Linear: {}", e.message);
            return Err(e);
        }
        let body = serde_json::to_vec(&json!({"query": query, "variables": variables}))
            .map_err(|e| unavailable(what, e))?;
        let mut retried = 0u32;
        loop {
            let (status, rate, bytes) = self.post(what, &body)?;
            tracing::info!(call = what, status, "Linear GraphQL call");
            let (e, kind) = match classify(what, status, rate, &bytes, protocol::time::now_ms()) {
                Ok(data) => {
                    self.backoff.succeeded();
                    return Ok(data);
                }
                Err(failed) => failed,
            };
            let linear_code = e
                .data
                .as_ref()
                .and_then(|d| d.pointer("/linear/code"))
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string();
            match kind {
                Kind::RateLimited(s) => match self.backoff.rate_limited(e, s, retried) {
                    RateLimitStep::Wait(wait) => {
                        tracing::warn!(
                            call = what,
                            status,
                            code = %linear_code,
                            wait_s = wait.as_secs(),
                            retried,
                            "waiting out Linear's rate limit"
                        );
                        std::thread::sleep(wait);
                        retried += 1;
                        continue;
                    }
                    RateLimitStep::Fail(e) => {
                        tracing::warn!(call = what, status, code = %linear_code, "{}", e.message);
                        return Err(e);
                    }
                },
                Kind::Auth => {
                    self.backoff.refused(&e);
                    tracing::warn!(call = what, status, code = %linear_code, "{}", e.message);
                    return Err(e);
                }
                Kind::Other => {
                    tracing::warn!(call = what, status, code = %linear_code, "{}", e.message);
                    return Err(e);
                }
            }
        }
    }

    /// One POST of `body`: the status, the rate headers and the body (bounded).
    fn post(&self, what: &str, body: &[u8]) -> Result<(u16, RateHeaders, Vec<u8>), RpcError> {
        let req = ureq::http::Request::builder()
            .method("POST")
            .uri(&self.url)
            .header("Content-Type", "application/json")
            .header("Accept", "application/json")
            .header("Authorization", &self.key)
            .body(body.to_vec())
            .map_err(|_| unavailable(what, "the request could not be built"))?;
        let response = self.agent.run(req).map_err(|e| {
            let e = match e {
                ureq::Error::Timeout(_) => unavailable(
                    what,
                    format!(
                        "no answer within {}s (REQUEST_TIMEOUT)",
                        REQUEST_TIMEOUT.as_secs()
                    ),
                ),
                other => unavailable(what, other),
            };
            tracing::warn!(call = what, "{}", e.message);
            e
        })?;
        let status = response.status().as_u16();
        let rate = RateHeaders::of(response.headers());
        let bytes = response
            .into_body()
            .with_config()
            .limit(MAX_BODY_BYTES)
            .read_to_vec()
            .map_err(|e| match e {
                ureq::Error::BodyExceedsLimit(_) => unavailable(
                    what,
                    format!("the answer is larger than {MAX_BODY_BYTES} bytes (MAX_BODY_BYTES)"),
                ),
                other => unavailable(what, other),
            })?;
        Ok((status, rate, bytes))
    }

    /// [`Client::send_blocking`] on tokio's blocking pool.
    pub async fn send(
        &self,
        what: &str,
        query: &'static str,
        variables: Value,
    ) -> Result<Value, RpcError> {
        let client = self.clone();
        let what_owned = what.to_string();
        tokio::task::spawn_blocking(move || client.send_blocking(&what_owned, query, &variables))
            .await
            .unwrap_or_else(|_| Err(unavailable(what, "the call's task failed")))
    }
}
