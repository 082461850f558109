//! Errors as they cross the wire, and the errors a caller sees.
//!
//! Transport errors use the JSON-RPC reserved codes. Anything authored uses
//! [`APP_ERROR`] (-32000) with `data.code`, a stable `[a-z][a-z0-9_]*` code: the
//! spec's table ([`Code`]) and the protocol's own codes. An authored error's code and
//! message cross verbatim; an unauthored one crosses as `internal` with no detail
//! ([`RpcError::unauthored`] logs the detail on this side).

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

/// Invalid JSON was received.
pub const PARSE_ERROR: i64 = -32700;
/// The JSON sent is not a valid request object.
pub const INVALID_REQUEST: i64 = -32600;
/// The method does not exist or is not available.
pub const METHOD_NOT_FOUND: i64 = -32601;
/// Invalid method parameters.
pub const INVALID_PARAMS: i64 = -32602;
/// Internal JSON-RPC error.
pub const INTERNAL_ERROR: i64 = -32603;
/// The request was cancelled (`$/cancel`, the LSP convention).
pub const REQUEST_CANCELLED: i64 = -32800;
/// Anything authored: the stable code is in `data.code`.
pub const APP_ERROR: i64 = -32000;

macro_rules! codes {
    ($($variant:ident => $text:literal,)*) => {
        /// The stable error codes: the spec's table and the protocol's own.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum Code {
            $(#[doc = concat!("`", $text, "`")] $variant,)*
        }

        impl Code {
            /// Every code, in the spec's order.
            pub const ALL: &'static [Code] = &[$(Code::$variant,)*];

            /// The code as it appears in `data.code`.
            pub fn as_str(self) -> &'static str {
                match self {
                    $(Code::$variant => $text,)*
                }
            }

            /// The code named `text`, if it is one of ours.
            pub fn parse(text: &str) -> Option<Code> {
                match text {
                    $($text => Some(Code::$variant),)*
                    _ => None,
                }
            }
        }
    };
}

codes! {
    Invalid => "invalid",
    Unsupported => "unsupported",
    Unauthorized => "unauthorized",
    Undeclared => "undeclared",
    NotFound => "not_found",
    Conflict => "conflict",
    CausalLimit => "causal_limit",
    NotAdoptable => "not_adoptable",
    NotAccepting => "not_accepting",
    NothingToAttach => "nothing_to_attach",
    NotLive => "not_live",
    ResourceSetupFailed => "resource_setup_failed",
    ResourceNotFound => "resource_not_found",
    ResourceExhausted => "resource_exhausted",
    SandboxDenied => "sandbox_denied",
    SandboxUnavailable => "sandbox_unavailable",
    ContainerRunning => "container_running",
    ContainerUnconfirmed => "container_unconfirmed",
    RetryAfter => "retry_after",
    UnsupportedProtocolVersion => "unsupported_protocol_version",
    ReentrantCall => "reentrant_call",
    Overloaded => "overloaded",
    Cancelled => "cancelled",
    ShuttingDown => "shutting_down",
    Internal => "internal",
    Unavailable => "unavailable",
}

impl fmt::Display for Code {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// True when `code` is a well-formed stable code: `[a-z][a-z0-9_]*`.
pub fn is_stable_code(code: &str) -> bool {
    let mut bytes = code.bytes();
    matches!(bytes.next(), Some(b'a'..=b'z'))
        && bytes.all(|b| matches!(b, b'a'..=b'z' | b'0'..=b'9' | b'_'))
}

/// A JSON-RPC error object, exactly as it crosses the wire.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RpcError {
    /// The JSON-RPC code: a reserved transport code or [`APP_ERROR`].
    pub code: i64,
    /// What went wrong, for a person.
    pub message: String,
    /// For authored errors, `{"code": "<stable code>", ...}`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<Value>,
}

impl fmt::Display for RpcError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.app_code() {
            Some(code) => write!(f, "{code}: {}", self.message),
            None => write!(f, "{} (JSON-RPC {})", self.message, self.code),
        }
    }
}

impl std::error::Error for RpcError {}

impl RpcError {
    /// An authored error with one of the spec's codes.
    pub fn new(code: Code, message: impl Into<String>) -> Self {
        RpcError {
            code: APP_ERROR,
            message: message.into(),
            data: Some(json!({ "code": code.as_str() })),
        }
    }

    /// An authored error with any stable code (an operation handler's own). A
    /// malformed code is not sent as it is: the error crosses as `internal`.
    pub fn authored(code: &str, message: impl Into<String>) -> Self {
        if is_stable_code(code) {
            RpcError {
                code: APP_ERROR,
                message: message.into(),
                data: Some(json!({ "code": code })),
            }
        } else {
            RpcError::unauthored(format_args!(
                "authored error with malformed code {code:?}: {}",
                message.into()
            ))
        }
    }

    /// `retry_after`, the only code that crosses as a retry hint, with an
    /// optional `reset_at` (RFC 3339).
    pub fn retry_after(message: impl Into<String>, reset_at: Option<&str>) -> Self {
        let mut data = json!({ "code": Code::RetryAfter.as_str() });
        if let (Some(at), Some(map)) = (reset_at, data.as_object_mut()) {
            map.insert("reset_at".into(), Value::String(at.into()));
        }
        RpcError {
            code: APP_ERROR,
            message: message.into(),
            data: Some(data),
        }
    }

    /// An error nobody authored: its detail goes to this side's log and the peer
    /// sees only `internal`.
    pub fn unauthored(detail: impl fmt::Display) -> Self {
        tracing::error!(detail = %detail, "internal error answered as `internal`");
        RpcError::internal()
    }

    /// `invalid`: a message of `size` bytes would exceed the `limit`-byte message
    /// bound of the peer it was for, so it was not sent. `data.too_large` carries
    /// both numbers, so that a caller (ingressd: 413) can tell it from other refusals.
    pub fn too_large(size: usize, limit: usize, message: impl Into<String>) -> Self {
        RpcError {
            code: APP_ERROR,
            message: message.into(),
            data: Some(json!({
                "code": Code::Invalid.as_str(),
                "too_large": {"size": size, "limit": limit},
            })),
        }
    }

    /// The size and the limit of a [`RpcError::too_large`].
    pub fn too_large_of(&self) -> Option<(u64, u64)> {
        let t = self.data.as_ref()?.get("too_large")?;
        Some((t.get("size")?.as_u64()?, t.get("limit")?.as_u64()?))
    }

    /// `internal` with no detail.
    pub fn internal() -> Self {
        RpcError::new(Code::Internal, "internal error")
    }

    /// -32601: the method is not served here.
    pub fn method_not_found(method: &str) -> Self {
        RpcError {
            code: METHOD_NOT_FOUND,
            message: format!("method not found: {method}"),
            data: None,
        }
    }

    /// -32602: the params do not fit the method.
    pub fn invalid_params(detail: impl fmt::Display) -> Self {
        RpcError {
            code: INVALID_PARAMS,
            message: format!("invalid params: {detail}"),
            data: None,
        }
    }

    /// -32800: the request was cancelled by its caller.
    pub fn cancelled() -> Self {
        RpcError {
            code: REQUEST_CANCELLED,
            message: "request cancelled".into(),
            data: Some(json!({ "code": Code::Cancelled.as_str() })),
        }
    }

    /// The stable code in `data.code`, if there is one.
    pub fn app_code(&self) -> Option<&str> {
        self.data.as_ref()?.get("code")?.as_str()
    }

    /// True when this error carries `code`.
    pub fn is(&self, code: Code) -> bool {
        self.app_code() == Some(code.as_str())
    }

    /// `data.reset_at` of a `retry_after` error.
    pub fn reset_at(&self) -> Option<&str> {
        if !self.is(Code::RetryAfter) {
            return None;
        }
        self.data.as_ref()?.get("reset_at")?.as_str()
    }
}

/// Why a connection closed. Every pending and later call fails with it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CloseReason {
    /// The peer closed its end (EOF): it exited or closed the stream.
    PeerClosed,
    /// The stream failed (broken pipe, reset).
    Io(String),
    /// The peer broke the protocol (a line over the limit, invalid JSON).
    Protocol(String),
    /// This side closed the connection.
    Local(String),
    /// The peer said why it would not go on (an error with a null id), such as a
    /// refusal at connect.
    PeerError(String),
}

impl fmt::Display for CloseReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CloseReason::PeerClosed => f.write_str("the peer closed the connection"),
            CloseReason::Io(e) => write!(f, "connection failed: {e}"),
            CloseReason::Protocol(e) => write!(f, "protocol error: {e}"),
            CloseReason::Local(e) => write!(f, "connection closed: {e}"),
            CloseReason::PeerError(e) => write!(f, "the peer ended the connection: {e}"),
        }
    }
}

/// What a call can end in, apart from its result.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum CallError {
    /// The connection is gone: closed stream, dead peer, protocol error. Never an
    /// authored error.
    #[error("transport error: {0}")]
    Transport(Arc<CloseReason>),
    /// The peer answered with an error.
    #[error("{0}")]
    Rpc(RpcError),
    /// This side cancelled the call; a late answer is discarded.
    #[error("call cancelled")]
    Cancelled,
    /// No answer within the call's deadline; the call was cancelled.
    #[error("no answer within {0:?}")]
    Timeout(Duration),
    /// The request would exceed the message limit and was not sent.
    #[error("request of {size} bytes exceeds the {limit}-byte message limit (max_message_bytes)")]
    TooLarge {
        /// The encoded size.
        size: usize,
        /// The limit.
        limit: usize,
    },
    /// The params could not be encoded, or the result decoded into the caller's type.
    #[error("{0}")]
    Codec(String),
}

impl CallError {
    /// The stable code of an authored answer (`None` for transport failures).
    pub fn code(&self) -> Option<&str> {
        match self {
            CallError::Rpc(e) => e.app_code(),
            CallError::Cancelled => Some(Code::Cancelled.as_str()),
            _ => None,
        }
    }

    /// True for a transport failure (the connection is gone).
    pub fn is_transport(&self) -> bool {
        matches!(self, CallError::Transport(_))
    }

    /// True when the peer answered with `code`.
    pub fn is(&self, code: Code) -> bool {
        self.code() == Some(code.as_str())
    }

    /// The peer's error object, if it answered with one.
    pub fn rpc(&self) -> Option<&RpcError> {
        match self {
            CallError::Rpc(e) => Some(e),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_round_trip_and_are_stable() {
        for code in Code::ALL {
            assert!(is_stable_code(code.as_str()), "{code}");
            assert_eq!(Code::parse(code.as_str()), Some(*code));
        }
        assert_eq!(Code::ALL.len(), 26);
    }

    #[test]
    fn stable_code_shape() {
        assert!(is_stable_code("a"));
        assert!(is_stable_code("rate_limit2"));
        assert!(!is_stable_code(""));
        assert!(!is_stable_code("2x"));
        assert!(!is_stable_code("Bad"));
        assert!(!is_stable_code("a-b"));
    }

    #[test]
    fn authored_with_malformed_code_crosses_as_internal() {
        let e = RpcError::authored("Not-OK", "secret detail");
        assert!(e.is(Code::Internal));
        assert!(!e.message.contains("secret"));
    }

    #[test]
    fn retry_after_carries_reset_at() {
        let e = RpcError::retry_after("slow down", Some("2026-11-29T17:00:00Z"));
        let wire = serde_json::to_value(&e).unwrap();
        assert_eq!(wire["code"], APP_ERROR);
        assert_eq!(wire["data"]["code"], "retry_after");
        assert_eq!(wire["data"]["reset_at"], "2026-11-29T17:00:00Z");
        assert_eq!(e.reset_at(), Some("2026-11-29T17:00:00Z"));
        assert_eq!(RpcError::retry_after("x", None).reset_at(), None);
    }
}
