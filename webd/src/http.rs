//! What every route shares: the response body (a whole buffer, or a stream of
//! Server-Sent Events), the error answer `{"error": {"code", "message"}}` with its
//! HTTP status, and the reading of a query string or a form.

use std::collections::HashMap;
use std::convert::Infallible;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::{Body as HttpBody, Frame, SizeHint};
use hyper::header::{HeaderValue, ALLOW, CACHE_CONTROL, CONTENT_TYPE, LOCATION};
use hyper::{Response, StatusCode};
use protocol::error::CallError;
use serde_json::json;
use tokio::sync::mpsc;

/// The longest ID, key or query value taken from a request.
pub const MAX_ID: usize = 200;

/// A response's body: a buffer, or a live stream.
pub type Body = http_body_util::combinators::BoxBody<Bytes, Infallible>;

/// A response.
pub type Reply = Response<Body>;

/// A whole body.
pub fn full(bytes: impl Into<Bytes>) -> Body {
    Full::new(bytes.into()).boxed()
}

/// A body fed chunk by chunk from a channel; it ends when the sender is dropped.
pub struct ChannelBody(pub mpsc::Receiver<Bytes>);

impl HttpBody for ChannelBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        self.0.poll_recv(cx).map(|c| c.map(|b| Ok(Frame::data(b))))
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::default()
    }
}

/// An error answer.
#[derive(Debug, Clone, PartialEq)]
pub struct ApiError {
    /// The HTTP status.
    pub status: StatusCode,
    /// A stable code.
    pub code: String,
    /// What went wrong, for a person.
    pub message: String,
}

/// An error with this status and code.
pub fn fail(status: StatusCode, code: &str, message: impl Into<String>) -> ApiError {
    ApiError {
        status,
        code: code.to_owned(),
        message: message.into(),
    }
}

/// A 400.
pub fn bad(message: impl Into<String>) -> ApiError {
    fail(StatusCode::BAD_REQUEST, "invalid", message)
}

/// A 404.
pub fn not_found(message: impl Into<String>) -> ApiError {
    fail(StatusCode::NOT_FOUND, "not_found", message)
}

impl From<CallError> for ApiError {
    fn from(e: CallError) -> ApiError {
        match &e {
            CallError::Rpc(r) => {
                let code = r.app_code().unwrap_or("bus_error").to_owned();
                let status = match code.as_str() {
                    "not_found" => StatusCode::NOT_FOUND,
                    "invalid" | "unsupported" => StatusCode::BAD_REQUEST,
                    "conflict" | "not_accepting" | "not_live" => StatusCode::CONFLICT,
                    "unauthorized" | "undeclared" => StatusCode::FORBIDDEN,
                    "unavailable" | "overloaded" | "shutting_down" | "retry_after" => {
                        StatusCode::SERVICE_UNAVAILABLE
                    }
                    _ => StatusCode::BAD_GATEWAY,
                };
                ApiError {
                    status,
                    code,
                    message: r.message.clone(),
                }
            }
            CallError::Transport(_) | CallError::Timeout(_) | CallError::Cancelled => fail(
                StatusCode::SERVICE_UNAVAILABLE,
                "unavailable",
                format!("the bus: {e}"),
            ),
            CallError::TooLarge { .. } | CallError::Codec(_) => {
                fail(StatusCode::BAD_GATEWAY, "bus_error", e.to_string())
            }
        }
    }
}

/// A response with the headers every answer carries.
pub fn respond(status: StatusCode, content_type: &'static str, body: Body) -> Reply {
    let mut r = Response::new(body);
    *r.status_mut() = status;
    let h = r.headers_mut();
    h.insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    h.insert(CACHE_CONTROL, HeaderValue::from_static("no-store"));
    h.insert(
        "x-content-type-options",
        HeaderValue::from_static("nosniff"),
    );
    h.insert("x-frame-options", HeaderValue::from_static("DENY"));
    h.insert("referrer-policy", HeaderValue::from_static("same-origin"));
    r
}

/// A JSON answer.
pub fn json_reply(status: StatusCode, value: &serde_json::Value) -> Reply {
    respond(
        status,
        "application/json",
        full(value.to_string().into_bytes()),
    )
}

/// The JSON answer of an error.
pub fn error_reply(e: &ApiError) -> Reply {
    let body = json!({"error": {"code": e.code, "message": e.message}});
    let mut r = json_reply(e.status, &body);
    if e.status == StatusCode::UNAUTHORIZED {
        r.headers_mut().insert(
            "www-authenticate",
            HeaderValue::from_static("Bearer realm=\"open-conduit\""),
        );
    }
    if e.status == StatusCode::METHOD_NOT_ALLOWED {
        let allow = if e.message.contains("POST") {
            "GET, POST"
        } else {
            "GET"
        };
        r.headers_mut()
            .insert(ALLOW, HeaderValue::from_static(allow));
    }
    r
}

/// A `303 See Other` to `to`.
pub fn see_other(to: &str) -> Reply {
    let mut r = respond(StatusCode::SEE_OTHER, "text/plain; charset=utf-8", full(""));
    if let Ok(v) = HeaderValue::from_str(to) {
        r.headers_mut().insert(LOCATION, v);
    }
    r
}

/// `%`-decode a query or form component (`+` is a space).
pub fn percent_decode(s: &str) -> Result<String, ApiError> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'+' => out.push(b' '),
            b'%' => {
                let hex = s
                    .get(i + 1..i + 3)
                    .and_then(|h| u8::from_str_radix(h, 16).ok())
                    .ok_or_else(|| bad("a parameter has a bad %-escape"))?;
                out.push(hex);
                i += 2;
            }
            c => out.push(c),
        }
        i += 1;
    }
    String::from_utf8(out).map_err(|_| bad("a parameter is not UTF-8"))
}

/// `%`-encode a query component.
pub fn percent_encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// The parameters of a query string or a form body (each at most once, each value
/// at most `max_value` bytes).
pub fn params(q: &str, max_value: usize) -> Result<HashMap<String, String>, ApiError> {
    let mut out = HashMap::new();
    for pair in q.split('&').filter(|p| !p.is_empty()) {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        let (k, v) = (percent_decode(k)?, percent_decode(v)?);
        if v.len() > max_value {
            return Err(bad(format!("{k}: longer than {max_value} characters")));
        }
        if out.insert(k.clone(), v).is_some() {
            return Err(bad(format!("{k} is given more than once")));
        }
    }
    Ok(out)
}

/// The query's parameters (each at most once, at most [`MAX_ID`] bytes).
pub fn query(q: &str) -> Result<HashMap<String, String>, ApiError> {
    params(q, MAX_ID)
}

/// Refuse a parameter not in `known`.
pub fn only(q: &HashMap<String, String>, known: &[&str]) -> Result<(), ApiError> {
    match q.keys().find(|k| !known.contains(&k.as_str())) {
        Some(k) if known.is_empty() => Err(bad(format!("this route takes no parameter {k:?}"))),
        Some(k) => Err(bad(format!(
            "no parameter {k:?} (this route takes {})",
            known.join(", ")
        ))),
        None => Ok(()),
    }
}

/// A parameter that is given and not empty.
pub fn nonempty(q: &HashMap<String, String>, name: &str) -> Option<String> {
    q.get(name).filter(|v| !v.is_empty()).cloned()
}

/// A Work ID taken from a path.
pub fn work_id(id: &str) -> Result<String, ApiError> {
    let id = percent_decode(id)?;
    if id.is_empty() || id.len() > MAX_ID || !id.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(bad(format!(
            "a Work ID is 1 to {MAX_ID} printable characters"
        )));
    }
    Ok(id)
}

/// A request's whole body, at most `max` bytes (413 naming `what` and the limit).
pub async fn read_limited(
    body: hyper::body::Incoming,
    max: usize,
    what: &str,
) -> Result<Bytes, ApiError> {
    Ok(http_body_util::Limited::new(body, max)
        .collect()
        .await
        .map_err(|e| {
            fail(
                StatusCode::PAYLOAD_TOO_LARGE,
                "too_large",
                format!("{what} (at most {max} bytes): {e}"),
            )
        })?
        .to_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queries_decode_and_refuse_repeats() {
        let q = query("scope=a%2Fb&state=running&limit=5").unwrap_or_default();
        assert_eq!(q.get("scope").map(String::as_str), Some("a/b"));
        assert!(query("a=1&a=2").is_err());
        assert!(query("a=%zz").is_err());
        assert_eq!(
            percent_decode(&percent_encode("a b/é")).ok().as_deref(),
            Some("a b/é")
        );
    }
}
