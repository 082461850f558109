//! Slack's request signature, version `v0`: `X-Slack-Signature` is `v0=` and the
//! hex HMAC-SHA256, under the app's signing secret, of `v0:<timestamp>:<raw body>`,
//! where the timestamp is `X-Slack-Request-Timestamp` (Unix seconds). A request
//! whose timestamp is more than [`MAX_SKEW_S`] from now either way is refused, so a
//! captured request cannot be replayed later; the signature is compared in constant
//! time.

use hmac::{Hmac, Mac};
use sha2::Sha256;

type HmacSha256 = Hmac<Sha256>;

/// The signature header.
pub const HEADER: &str = "x-slack-signature";
/// The timestamp header.
pub const TIMESTAMP_HEADER: &str = "x-slack-request-timestamp";
/// How far a request's timestamp may be from now, either way, in seconds.
pub const MAX_SKEW_S: i64 = 300;

/// Why a request's signature was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SignatureError {
    /// No `X-Slack-Signature` header.
    Missing,
    /// No `X-Slack-Request-Timestamp` header.
    MissingTimestamp,
    /// The timestamp is not a whole number of seconds.
    MalformedTimestamp,
    /// The timestamp is more than [`MAX_SKEW_S`] from now.
    Stale,
    /// The header is not `v0=` and 64 hex digits.
    Malformed,
    /// The header does not match the request under the secret.
    Mismatch,
}

impl SignatureError {
    /// The reason, as the 401 answer says it.
    pub fn reason(self) -> &'static str {
        match self {
            SignatureError::Missing => "missing X-Slack-Signature header",
            SignatureError::MissingTimestamp => "missing X-Slack-Request-Timestamp header",
            SignatureError::MalformedTimestamp => {
                "malformed X-Slack-Request-Timestamp header (expected Unix seconds)"
            }
            SignatureError::Stale => {
                "X-Slack-Request-Timestamp is more than 300 seconds from now (a replay, or a clock off)"
            }
            SignatureError::Malformed => {
                "malformed X-Slack-Signature header (expected v0=<64 hex digits>)"
            }
            SignatureError::Mismatch => "X-Slack-Signature does not match the request",
        }
    }
}

impl std::fmt::Display for SignatureError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.reason())
    }
}

impl std::error::Error for SignatureError {}

fn mac(secret: &[u8], timestamp: &str, body: &[u8]) -> Option<HmacSha256> {
    // An HMAC takes a key of any length, so this does not fail.
    let mut mac = HmacSha256::new_from_slice(secret).ok()?;
    mac.update(b"v0:");
    mac.update(timestamp.as_bytes());
    mac.update(b":");
    mac.update(body);
    Some(mac)
}

/// The `X-Slack-Signature` Slack would send for `body` at `timestamp` under
/// `secret`: `v0=<lowercase hex>`.
pub fn sign(secret: &[u8], timestamp: &str, body: &[u8]) -> String {
    let Some(mac) = mac(secret, timestamp, body) else {
        return String::new();
    };
    let digest = mac.finalize().into_bytes();
    let mut out = String::with_capacity(3 + 64);
    out.push_str("v0=");
    out.push_str(&protocol::hex::encode(&digest));
    out
}

/// Verifies a request: `signature` and `timestamp` are its headers' values (if
/// any), `now_s` the current Unix time in seconds.
pub fn verify(
    secret: &[u8],
    timestamp: Option<&str>,
    signature: Option<&str>,
    body: &[u8],
    now_s: i64,
) -> Result<(), SignatureError> {
    let signature = signature.ok_or(SignatureError::Missing)?.trim();
    let timestamp = timestamp.ok_or(SignatureError::MissingTimestamp)?.trim();
    let seconds: i64 = timestamp
        .parse()
        .ok()
        .filter(|_| !timestamp.is_empty() && timestamp.bytes().all(|b| b.is_ascii_digit()))
        .ok_or(SignatureError::MalformedTimestamp)?;
    if (now_s.saturating_sub(seconds)).abs() > MAX_SKEW_S {
        return Err(SignatureError::Stale);
    }
    let hex = signature
        .strip_prefix("v0=")
        .ok_or(SignatureError::Malformed)?;
    if hex.len() != 64 {
        return Err(SignatureError::Malformed);
    }
    let expected = protocol::hex::decode(hex).ok_or(SignatureError::Malformed)?;
    let mac = mac(secret, timestamp, body).ok_or(SignatureError::Mismatch)?;
    mac.verify_slice(&expected)
        .map_err(|_| SignatureError::Mismatch)
}
