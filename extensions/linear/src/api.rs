//! A client of Linear's GraphQL API (`POST <api_url>` with `{query, variables}`,
//! `Authorization: <api key or OAuth token>`), on `ureq` with rustls.
//!
//! Every query and mutation the package sends is a constant here ([`DOCUMENTS`]), so
//! the tests validate each against Linear's published schema. Errors name what
//! failed and never carry the key: HTTP 401/403 (and GraphQL
//! `AUTHENTICATION_ERROR`/`FORBIDDEN`) are `unauthorized`; a rate limit (HTTP 429,
//! or GraphQL `RATELIMITED`, Linear's request or complexity limit) is `retry_after`
//! with the reset Linear's `X-RateLimit-*-Reset` headers give; other GraphQL
//! `errors` name their message and `extensions.code`. Bounds: [`MAX_BODY_BYTES`] of
//! response, [`REQUEST_TIMEOUT`] a call, no redirects.

use std::time::Duration;

use protocol::{Code, RpcError};
use serde_json::{json, Value};

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

/// Every document the package sends.
pub const DOCUMENTS: [(&str, &str); 8] = [
    ("OcIssue", ISSUE_QUERY),
    ("OcTeamStates", TEAM_STATES_QUERY),
    ("OcComment", COMMENT_MUTATION),
    ("OcMove", MOVE_MUTATION),
    ("OcLabels", LABELS_QUERY),
    ("OcAddLabel", ADD_LABEL_MUTATION),
    ("OcIssuesSince", ISSUES_SINCE_QUERY),
    ("OcCommentUpdate", COMMENT_UPDATE_MUTATION),
];

/// A client of one connection.
#[derive(Clone)]
pub struct Client {
    url: String,
    key: String,
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

/// The reset a rate limited answer names, from its headers: the latest of
/// `X-RateLimit-Requests-Reset` and `X-RateLimit-Complexity-Reset` (Unix ms), as
/// RFC 3339.
fn reset_at(headers: &ureq::http::HeaderMap) -> Option<String> {
    ["x-ratelimit-requests-reset", "x-ratelimit-complexity-reset"]
        .iter()
        .filter_map(|h| headers.get(*h)?.to_str().ok()?.trim().parse::<i64>().ok())
        .filter(|ms| *ms > 0)
        .max()
        .map(protocol::time::format_rfc3339_ms)
}

/// Reads a GraphQL answer: `data`, or the error its status or `errors` make.
pub fn read_answer(
    what: &str,
    status: u16,
    reset: Option<String>,
    body: &[u8],
) -> Result<Value, RpcError> {
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
        .unwrap_or_default()
        .to_string();
    let message = first_error
        .as_ref()
        .and_then(|e| e.get("message"))
        .and_then(Value::as_str)
        .map(|m| sdk::tracker::one_line(m, 300))
        .unwrap_or_default();
    if status == 429 || code == "RATELIMITED" {
        let when = reset.as_deref().unwrap_or("unknown");
        return Err(RpcError::retry_after(
            format!(
                "Linear {what}: rate limited (Linear's request or complexity limit; resets at {when})"
            ),
            reset.as_deref(),
        ));
    }
    if status == 401 || code == "AUTHENTICATION_ERROR" {
        return Err(RpcError::new(
            Code::Unauthorized,
            format!(
                "Linear {what}: the connection's api_key was refused (HTTP {status}{}); check the key",
                if code.is_empty() { String::new() } else { format!(", {code}") }
            ),
        ));
    }
    if status == 403 || code == "FORBIDDEN" {
        return Err(RpcError::new(
            Code::Unauthorized,
            format!(
                "Linear {what}: the connection's key may not do this (HTTP {status}): {message}"
            ),
        ));
    }
    if let Some(e) = first_error {
        let _ = e;
        return Err(RpcError::new(
            if code == "INPUT_ERROR" || code == "GRAPHQL_VALIDATION_FAILED" {
                Code::Invalid
            } else {
                Code::Unavailable
            },
            format!(
                "Linear {what}: {message}{}",
                if code.is_empty() {
                    String::new()
                } else {
                    format!(" ({code})")
                }
            ),
        ));
    }
    if !(200..300).contains(&status) {
        return Err(unavailable(what, format!("HTTP {status}")));
    }
    parsed
        .and_then(|v| v.get("data").cloned())
        .filter(Value::is_object)
        .ok_or_else(|| unavailable(what, "the answer has no data"))
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
            agent: ureq::Agent::new_with_config(config),
        })
    }

    /// Sends `query` with `variables` (blocking), answering `data`. `what` names the
    /// call in errors.
    pub fn send_blocking(
        &self,
        what: &str,
        query: &str,
        variables: &Value,
    ) -> Result<Value, RpcError> {
        let body = serde_json::to_vec(&json!({"query": query, "variables": variables}))
            .map_err(|e| unavailable(what, e))?;
        let req = ureq::http::Request::builder()
            .method("POST")
            .uri(&self.url)
            .header("Content-Type", "application/json")
            .header("Accept", "application/json")
            .header("Authorization", &self.key)
            .body(body)
            .map_err(|_| unavailable(what, "the request could not be built"))?;
        let response = self.agent.run(req).map_err(|e| match e {
            ureq::Error::Timeout(_) => unavailable(
                what,
                format!("no answer within {}s", REQUEST_TIMEOUT.as_secs()),
            ),
            other => unavailable(what, other),
        })?;
        let status = response.status().as_u16();
        let reset = reset_at(response.headers());
        let bytes = response
            .into_body()
            .with_config()
            .limit(MAX_BODY_BYTES)
            .read_to_vec()
            .map_err(|e| match e {
                ureq::Error::BodyExceedsLimit(_) => unavailable(
                    what,
                    format!("the answer is larger than {MAX_BODY_BYTES} bytes"),
                ),
                other => unavailable(what, other),
            })?;
        tracing::info!(call = what, status, "Linear GraphQL call");
        read_answer(what, status, reset, &bytes)
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
