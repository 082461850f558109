//! `linear.link` {`url`, `title`?}: a URL (the Work's pull request) attached to the
//! Work's issue with `attachmentLinkURL`, which takes the identifier and
//! lets Linear show a GitHub pull request as one (with its state). Linear keeps one
//! attachment per issue and URL, so linking the same URL again updates the one
//! there; with a request ID the result is kept too ([`crate::ops::changes_linear`]),
//! so a retry answers it without calling Linear.

use protocol::{Code, RpcError};
use serde_json::{json, Value};

use crate::api::Client;

/// `linear.link`.
pub const LINK: &str = "linear.link";
/// The longest URL accepted, in bytes.
pub const MAX_URL_BYTES: usize = 2048;
/// The longest title accepted, in bytes.
pub const MAX_TITLE_BYTES: usize = 255;

/// A URL attached to an issue (the issue by ID or identifier).
pub const LINK_URL_MUTATION: &str =
    "mutation OcLinkUrl($issueId: String!, $url: String!, $title: String) {
  attachmentLinkURL(issueId: $issueId, url: $url, title: $title) {
    success
    attachment { id url title }
  }
}";

fn invalid(m: impl Into<String>) -> RpcError {
    RpcError::new(Code::Invalid, m)
}

/// The checked input: the URL (http or https, one line, at most
/// [`MAX_URL_BYTES`]) and the title (one line, at most [`MAX_TITLE_BYTES`]; absent
/// when not given).
pub fn checked(input: &Value) -> Result<(String, Option<String>), RpcError> {
    let url = input
        .get("url")
        .and_then(Value::as_str)
        .map(str::trim)
        .filter(|u| !u.is_empty())
        .ok_or_else(|| {
            invalid("url (the http(s) URL to link, e.g. the pull request's) is required")
        })?;
    if url.len() > MAX_URL_BYTES {
        return Err(invalid(format!("url is longer than {MAX_URL_BYTES} bytes")));
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
    let title = match input.get("title") {
        None | Some(Value::Null) => None,
        Some(Value::String(t)) => {
            let t = t.trim();
            if t.is_empty() || t.len() > MAX_TITLE_BYTES || t.chars().any(char::is_control) {
                return Err(invalid(format!(
                    "title must be one line of 1 to {MAX_TITLE_BYTES} bytes"
                )));
            }
            Some(t.to_string())
        }
        Some(_) => return Err(invalid("title must be a string")),
    };
    Ok((url.to_string(), title))
}

/// Attaches the input's URL to the issue `identifier`.
pub async fn run(client: &Client, input: &Value, identifier: &str) -> Result<Value, RpcError> {
    let (url, title) = checked(input)?;
    let data = client
        .send(
            "link",
            LINK_URL_MUTATION,
            json!({"issueId": identifier, "url": url, "title": title}),
        )
        .await?;
    if data.pointer("/attachmentLinkURL/success") != Some(&json!(true)) {
        return Err(RpcError::new(
            Code::Unavailable,
            format!("Linear did not link the URL to {identifier}"),
        ));
    }
    let a = data
        .pointer("/attachmentLinkURL/attachment")
        .cloned()
        .unwrap_or(Value::Null);
    Ok(json!({"issue": identifier, "attachment_id": a["id"], "url": url, "title": a["title"]}))
}
