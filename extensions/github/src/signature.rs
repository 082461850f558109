//! `X-Hub-Signature-256`: `sha256=` and the hex HMAC-SHA256 of the raw body
//! under the webhook secret, compared in constant time.

use hmac::{Hmac, Mac};
use sha2::Sha256;

type HmacSha256 = Hmac<Sha256>;

/// The header GitHub signs deliveries with.
pub const HEADER: &str = "x-hub-signature-256";

/// Why a signature was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SignatureError {
    /// No `X-Hub-Signature-256` header.
    Missing,
    /// The header is not `sha256=` and 64 hex digits.
    Malformed,
    /// The header does not match the body under the secret.
    Mismatch,
}

impl SignatureError {
    /// The reason, as the 401 answer says it.
    pub fn reason(self) -> &'static str {
        match self {
            SignatureError::Missing => "missing X-Hub-Signature-256 header",
            SignatureError::Malformed => {
                "malformed X-Hub-Signature-256 header (expected sha256=<64 hex digits>)"
            }
            SignatureError::Mismatch => "X-Hub-Signature-256 does not match the body",
        }
    }
}

impl std::fmt::Display for SignatureError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.reason())
    }
}

impl std::error::Error for SignatureError {}

/// The header value GitHub would send for `body` under `secret`:
/// `sha256=<lowercase hex>`.
pub fn sign(secret: &[u8], body: &[u8]) -> String {
    // An HMAC takes a key of any length, so this cannot fail.
    let mut mac = match HmacSha256::new_from_slice(secret) {
        Ok(mac) => mac,
        Err(_) => return String::new(),
    };
    mac.update(body);
    let digest = mac.finalize().into_bytes();
    let mut out = String::with_capacity(7 + 64);
    out.push_str("sha256=");
    out.push_str(&protocol::hex::encode(&digest));
    out
}

/// Verifies `header` (the `X-Hub-Signature-256` value, if any) over `body`
/// under `secret`, in constant time.
pub fn verify(secret: &[u8], body: &[u8], header: Option<&str>) -> Result<(), SignatureError> {
    let header = header.ok_or(SignatureError::Missing)?.trim();
    let hex = header
        .strip_prefix("sha256=")
        .ok_or(SignatureError::Malformed)?;
    if hex.len() != 64 {
        return Err(SignatureError::Malformed);
    }
    let expected = protocol::hex::decode(hex).ok_or(SignatureError::Malformed)?;
    let mut mac = HmacSha256::new_from_slice(secret).map_err(|_| SignatureError::Mismatch)?;
    mac.update(body);
    mac.verify_slice(&expected)
        .map_err(|_| SignatureError::Mismatch)
}
