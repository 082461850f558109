//! `webhook.handle`: one Linear webhook request, verified and turned into at most one
//! delivery.
//!
//! In order: a method other than POST is 405; a path no entry covers is 404; a body
//! over [`MAX_BODY_BYTES`] is 413; an unresolvable webhook secret is 503 with
//! `Retry-After`; a missing, malformed or wrong `Linear-Signature` (hex HMAC-SHA256
//! of the raw body under the webhook secret, compared in constant time) is 401; a
//! body that is not a JSON object is 400; a `webhookTimestamp` (Unix ms, inside the
//! signed body) missing or more than [`MAX_SKEW_MS`] from now is 401 (Linear's
//! `LinearWebhookClient.verify` does the same checks). Then a payload the package
//! takes is one delivery and 200; one it does not take is 200 and nothing
//! ([`crate::project`]); one it cannot read is 400. The payload's `actor` and
//! `webhookId` are dropped before projecting ([`strip_delivery_fields`]), so a
//! comment's Event is the one reconcile makes from the polled comment.

use protocol::wire::{HttpAnswer, WebhookHandleParams, WebhookHandleResult};
use sdk::tracker;
use serde_json::Value;

use crate::config::{EntryConfig, Registry};
use crate::project::{self, Verdict};

/// The signature header (hex HMAC-SHA256 of the body).
pub const SIGNATURE_HEADER: &str = "linear-signature";
/// The header naming the delivery (logged; the delivery ID is the change's).
pub const DELIVERY_HEADER: &str = "linear-delivery";
/// The signed body field carrying the send time, Unix milliseconds.
pub const TIMESTAMP_FIELD: &str = "webhookTimestamp";
/// How far `webhookTimestamp` may be from now, either way (Linear's SDK: 60 s).
pub const MAX_SKEW_MS: i64 = 60_000;
/// The largest body read (Linear's SDK handler's default: 5 MiB).
pub const MAX_BODY_BYTES: usize = 5 * 1024 * 1024;
/// Seconds a 503 asks Linear to wait.
pub const RETRY_AFTER_SECONDS: u32 = 5;

/// The payload field naming the webhook that sent it (logged, not in the Event).
pub const WEBHOOK_ID_FIELD: &str = "webhookId";

/// Drops what only a delivery carries (`actor`, `webhookId`) from a verified
/// payload, so its Event is the one reconcile makes from the polled comment or
/// issue: the store keeps one envelope per delivery ID, and a poll cannot know
/// which webhook or actor a delivery would have named.
pub fn strip_delivery_fields(payload: &mut Value) {
    if let Some(o) = payload.as_object_mut() {
        o.remove("actor");
        o.remove(WEBHOOK_ID_FIELD);
    }
}

/// Method, entry and size checks, before the secret is needed.
pub fn precheck<'a>(
    registry: &'a Registry,
    params: &WebhookHandleParams,
) -> Result<&'a EntryConfig, HttpAnswer> {
    if !params.method.eq_ignore_ascii_case("POST") {
        return Err(HttpAnswer::text(405, "only POST is accepted").with_header("Allow", "POST"));
    }
    let entry = registry
        .entry_for(&params.path)
        .ok_or_else(|| HttpAnswer::text(404, "no Linear entry is configured at this path"))?;
    if params.body.len() > MAX_BODY_BYTES {
        return Err(HttpAnswer::text(
            413,
            &format!("the body is larger than {MAX_BODY_BYTES} bytes"),
        ));
    }
    Ok(entry)
}

/// 503: the webhook secret could not be resolved.
pub fn unavailable() -> HttpAnswer {
    tracker::unavailable("the webhook secret", RETRY_AFTER_SECONDS)
}

fn refused(e: tracker::SignatureError) -> WebhookHandleResult {
    tracker::answer_only(HttpAnswer::text(
        401,
        &e.reason("Linear-Signature", "webhookTimestamp (Unix ms in the body)"),
    ))
}

/// Serves a request `precheck` admitted for `entry`, with its webhook secret, at
/// `now_ms`.
pub fn process(
    entry: &EntryConfig,
    secret: &[u8],
    params: &WebhookHandleParams,
    now_ms: i64,
) -> WebhookHandleResult {
    if let Err(e) =
        tracker::verify_hmac_hex(secret, &params.body, params.header(SIGNATURE_HEADER), "")
    {
        return refused(e);
    }
    let Some(mut payload) = serde_json::from_slice::<Value>(&params.body)
        .ok()
        .filter(Value::is_object)
    else {
        return tracker::answer_only(HttpAnswer::text(400, "the body is not a JSON object"));
    };
    let ts = payload
        .get(TIMESTAMP_FIELD)
        .and_then(Value::as_f64)
        .filter(|t| t.is_finite() && *t > 0.0 && *t < 1e15)
        .map(|t| t as i64);
    if let Err(e) = tracker::check_timestamp_ms(ts, now_ms, MAX_SKEW_MS) {
        return refused(e);
    }
    if let Some(id) = payload.get(WEBHOOK_ID_FIELD).and_then(Value::as_str) {
        tracing::info!(linear_webhook = id, "a Linear webhook's delivery");
    }
    strip_delivery_fields(&mut payload);
    match project::project(entry, &payload) {
        Ok(Verdict::Deliver(delivery)) => {
            if let Some(d) = params.header(DELIVERY_HEADER) {
                tracing::info!(linear_delivery = d, id = %delivery.delivery_id, "a Linear webhook");
            }
            tracker::deliver(delivery)
        }
        Ok(Verdict::Ignored(why)) => tracker::answer_only(tracker::ignored(&why)),
        Err(why) => tracker::answer_only(HttpAnswer::text(
            400,
            &format!("unreadable Linear payload: {why}"),
        )),
    }
}
