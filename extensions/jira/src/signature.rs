//! Jira Cloud's webhook signature: a webhook registered with a secret carries
//! `X-Hub-Signature: sha256=<hex HMAC-SHA256 of the raw body under the secret>`
//! (the WebSub `method=signature` form). Jira sends no timestamp to bind it to, so
//! a replay is caught by the delivery ID (`X-Atlassian-Webhook-Identifier`, kept
//! once by the host) instead. The check is the SDK's shared one
//! ([`sdk::tracker::verify_hmac_hex`]), in constant time.

pub use sdk::tracker::SignatureError;

/// The signature header.
pub const HEADER: &str = "x-hub-signature";
/// The header as Jira spells it, for messages.
pub const HEADER_NAME: &str = "X-Hub-Signature";
/// The header carrying the delivery's identity, the same on Jira's retries.
pub const DELIVERY_HEADER: &str = "x-atlassian-webhook-identifier";
/// What precedes the hex digest.
pub const PREFIX: &str = "sha256=";

/// The `X-Hub-Signature` Jira would send for `body` under `secret`.
pub fn sign(secret: &[u8], body: &[u8]) -> String {
    format!("{PREFIX}{}", sdk::tracker::hmac_sha256_hex(secret, body))
}

/// Verifies a delivery's `signature` header (if any) over `body`.
pub fn verify(secret: &[u8], signature: Option<&str>, body: &[u8]) -> Result<(), SignatureError> {
    sdk::tracker::verify_hmac_hex(secret, body, signature, PREFIX)
}

/// Why a delivery was refused, as the 401 answer says it.
pub fn reason(e: SignatureError) -> String {
    let mut r = e.reason(HEADER_NAME, "");
    if e == SignatureError::Missing {
        r.push_str(" (is the webhook's secret set in Jira?)");
    }
    r
}
