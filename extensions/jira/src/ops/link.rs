//! `jira.link` {`url`, `title`?, `relationship`?}: a remote issue link from the
//! Work's issue to a URL (the Work's pull request): `POST
//! /rest/api/3/issue/{key}/remotelink` with a `globalId` made from the URL, so
//! linking the same URL again updates the one link Jira has rather than adding
//! another. With a request ID the result is kept as well (as every changing
//! operation's, [`crate::ops`]).

use protocol::{Code, RpcError};
use serde_json::{json, Value};
use sha2::{Digest, Sha256};

use crate::api::Client;

/// `jira.link`.
pub const LINK: &str = "jira.link";
/// The longest URL accepted, in bytes.
pub const MAX_URL_BYTES: usize = 2048;
/// The longest title or relationship accepted, in bytes (Jira's `globalId`,
/// `title` and `relationship` are at most 255).
pub const MAX_TITLE_BYTES: usize = 255;

fn invalid(m: impl Into<String>) -> RpcError {
    RpcError::new(Code::Invalid, m)
}

/// The `globalId` of a URL: the URL itself when it fits Jira's 255 bytes, else
/// `oc:sha256:` and its digest. One URL, one link.
pub fn global_id(url: &str) -> String {
    if url.len() <= MAX_TITLE_BYTES {
        return url.to_string();
    }
    format!(
        "oc:sha256:{}",
        protocol::hex::encode(&Sha256::digest(url.as_bytes()))
    )
}

fn one_line(input: &Value, field: &str) -> Result<Option<String>, RpcError> {
    match input.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(t)) => {
            let t = t.trim();
            if t.is_empty() || t.len() > MAX_TITLE_BYTES || t.chars().any(char::is_control) {
                return Err(invalid(format!(
                    "{field} must be one line of 1 to {MAX_TITLE_BYTES} bytes"
                )));
            }
            Ok(Some(t.to_string()))
        }
        Some(_) => Err(invalid(format!("{field} must be a string"))),
    }
}

/// The request body of a checked input: the URL (http or https, one line, at most
/// [`MAX_URL_BYTES`]), its title (the URL when not given) and relationship.
pub fn body(input: &Value) -> Result<Value, RpcError> {
    let url = input
        .get("url")
        .and_then(Value::as_str)
        .map(str::trim)
        .filter(|u| !u.is_empty())
        .ok_or_else(|| {
            invalid("url (the http(s) URL to link, e.g. the pull request's) is required")
        })?;
    if url.len() > MAX_URL_BYTES {
        return Err(invalid(format!(
            "url is longer than {MAX_URL_BYTES} bytes (MAX_URL_BYTES)"
        )));
    }
    let lower = url.to_ascii_lowercase();
    let rest = lower
        .strip_prefix("https://")
        .or_else(|| lower.strip_prefix("http://"))
        .unwrap_or_default();
    if rest.is_empty()
        || rest.starts_with('/')
        || url.chars().any(|c| c.is_whitespace() || c.is_control())
    {
        return Err(invalid(format!(
            "url `{}` is not an http or https URL",
            sdk::tracker::one_line(url, 200)
        )));
    }
    let title = one_line(input, "title")?
        .unwrap_or_else(|| sdk::tracker::clip(url, MAX_TITLE_BYTES).0.to_string());
    let mut body = json!({"globalId": global_id(url), "object": {"url": url, "title": title}});
    if let Some(r) = one_line(input, "relationship")? {
        body["relationship"] = json!(r);
    }
    Ok(body)
}

/// Links the input's URL from the issue `key`.
pub async fn link(client: &Client, key: &str, input: &Value) -> Result<Value, RpcError> {
    let body = body(input)?;
    let base = super::issue_path(key)?;
    let made = client
        .call("POST", format!("{base}/remotelink"), Some(body.clone()))
        .await?;
    Ok(json!({
        "issue": key,
        "link_id": made.get("id").cloned().unwrap_or(Value::Null),
        "url": body["object"]["url"],
        "global_id": body["globalId"],
    }))
}
