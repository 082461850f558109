//! The GitHub API's errors as the package reports them: the code an error crosses the
//! protocol with, GitHub's own status, message, documentation URL and field errors,
//! and what the agent is told. Shared by the API client ([`crate::api`]) and the App's
//! key and JWT ([`crate::app`]).

use protocol::{Code, RpcError};
use serde_json::{json, Value};

/// A failed API call: the stable code it crosses with, and what GitHub said.
#[derive(Debug, Clone, PartialEq)]
pub struct ApiError {
    /// The code: `unauthorized` (401, 403), `not_found` (404), `invalid` (400,
    /// 422), `conflict` (409), `unavailable` (rate limits, 5xx, transport).
    pub code: Code,
    /// The HTTP status, when GitHub answered.
    pub status: Option<u16>,
    /// What went wrong: GitHub's `message` when it sent one.
    pub message: String,
    /// GitHub's `documentation_url`, when it sent one.
    pub documentation_url: Option<String>,
    /// GitHub's `errors` (a 422's field errors), when it sent them.
    pub errors: Option<Value>,
    /// When a rate limit resets (RFC 3339), for `unavailable` by a rate limit.
    pub reset_at: Option<String>,
}

impl ApiError {
    /// An error of `code` that GitHub did not answer.
    pub(crate) fn new(code: Code, message: impl Into<String>) -> Self {
        ApiError {
            code,
            status: None,
            message: message.into(),
            documentation_url: None,
            errors: None,
            reset_at: None,
        }
    }

    /// The error as it crosses the protocol: its code, its message, and
    /// `data.github` with the status, GitHub's message, `documentation_url`,
    /// `errors` and `reset_at`.
    pub fn to_rpc(&self) -> RpcError {
        let mut e = RpcError::new(self.code, self.to_string());
        let mut github = serde_json::Map::new();
        if let Some(s) = self.status {
            github.insert("status".into(), json!(s));
        }
        github.insert("message".into(), json!(self.message));
        if let Some(d) = &self.documentation_url {
            github.insert("documentation_url".into(), json!(d));
        }
        if let Some(errs) = &self.errors {
            github.insert("errors".into(), errs.clone());
        }
        if let Some(r) = &self.reset_at {
            github.insert("reset_at".into(), json!(r));
        }
        if let Some(Value::Object(data)) = e.data.as_mut() {
            data.insert("github".into(), Value::Object(github));
            data.insert(
                protocol::toolbelt::AGENT_MESSAGE_FIELD.into(),
                json!(self.agent_message()),
            );
        }
        e
    }

    /// What the agent is told (`data.agent_message`, bounded by the toolbelt):
    /// GitHub's status and message, the retry time of a rate limit, the
    /// documentation URL, and a 422's field errors (resource, field, code).
    pub fn agent_message(&self) -> String {
        let mut m = self.to_string();
        if let Some(Value::Array(errs)) = &self.errors {
            let parts: Vec<String> = errs
                .iter()
                .take(5)
                .map(|e| match e {
                    Value::String(s) => s.clone(),
                    e => ["resource", "field", "code", "message"]
                        .iter()
                        .filter_map(|k| e[*k].as_str().map(|v| format!("{k}={v}")))
                        .collect::<Vec<_>>()
                        .join(" "),
                })
                .filter(|p| !p.is_empty())
                .collect();
            if !parts.is_empty() {
                m.push_str(&format!("; errors: {}", parts.join("; ")));
            }
        }
        protocol::toolbelt::agent_message(&m)
    }
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.status {
            Some(s) => write!(f, "GitHub answered {s}: {}", self.message)?,
            None => write!(f, "GitHub API: {}", self.message)?,
        }
        if let Some(r) = &self.reset_at {
            write!(f, " (rate limited: retry after {r})")?;
        }
        if let Some(d) = &self.documentation_url {
            write!(f, " (see {d})")?;
        }
        Ok(())
    }
}

impl std::error::Error for ApiError {}
