//! `webhook.handle`: one Events API (or interactivity) request, verified and turned
//! into at most one delivery.
//!
//! In order: a method other than POST is 405; a path no `events` entry covers is
//! 404; a body over [`MAX_BODY_BYTES`] is 413; an unresolvable signing secret is 503
//! with `Retry-After`; a missing, wrong or stale signature ([`crate::signature`]) is
//! 401. Then, signed: a `url_verification` is 200 with its `challenge`; an
//! `event_callback` is one delivery and 200, or 200 and nothing ([`crate::project`]
//! says what is ignored; Slack retries anything but a 2xx, so an ignored event is
//! still a 200); an interactivity request (form-encoded `payload=`) is 200 here
//! and, when it is a `block_actions` press, acted on after this by
//! [`crate::actions`] ([`block_actions_payload`]); an `ssl_check` is 200 and
//! nothing; a body that is not a JSON object, or an
//! `event_callback` that cannot be read, is 400. Only a delivering 200 carries a
//! delivery. A retry (`X-Slack-Retry-Num`) carries the same `event_id`, the
//! delivery ID, so the host keeps it once.

use protocol::wire::{HttpAnswer, WebhookHandleParams, WebhookHandleResult};
use serde_json::{json, Value};

use crate::config::{EntryConfig, Registry};
use crate::project::{self, Verdict};
use crate::signature;

/// The largest request body read, in bytes (Slack's event payloads are a few KiB; an
/// interactivity payload carrying a whole view can be tens).
pub const MAX_BODY_BYTES: usize = 1024 * 1024;
/// Seconds a 503 asks Slack to wait.
pub const RETRY_AFTER_SECONDS: u32 = 5;
/// The header Slack sets on a retried delivery (1, 2, 3).
pub const RETRY_NUM_HEADER: &str = "x-slack-retry-num";

/// A plain-text answer.
pub fn text(status: u16, message: &str) -> HttpAnswer {
    HttpAnswer::text(status, message)
}

/// A JSON answer.
pub fn json_answer(status: u16, value: &Value) -> HttpAnswer {
    HttpAnswer::json(status, value)
}

/// 200 and nothing delivered (Slack would retry anything else).
pub fn ignored(reason: &str) -> HttpAnswer {
    json_answer(200, &json!({"ok": true, "ignored": true, "reason": reason}))
}

/// 503 with `Retry-After`: the signing secret could not be resolved.
pub fn unavailable() -> HttpAnswer {
    text(503, "the signing secret is unavailable; try again")
        .with_header("Retry-After", &RETRY_AFTER_SECONDS.to_string())
}

/// A result with no delivery.
pub fn answer_only(response: HttpAnswer) -> WebhookHandleResult {
    WebhookHandleResult {
        deliveries: Vec::new(),
        response,
    }
}

/// What is decided before the secret is needed: the method (405 unless POST), the
/// entry (404 when no `events` entry's path covers the request's) and the body's
/// size (413 over [`MAX_BODY_BYTES`]).
pub fn precheck<'a>(
    registry: &'a Registry,
    params: &WebhookHandleParams,
) -> Result<&'a EntryConfig, HttpAnswer> {
    if !params.method.eq_ignore_ascii_case("POST") {
        return Err(text(405, "only POST is accepted").with_header("Allow", "POST"));
    }
    let entry = registry
        .entry_for(&params.path)
        .ok_or_else(|| text(404, "no Slack Events API entry is configured at this path"))?;
    if params.body.len() > MAX_BODY_BYTES {
        return Err(text(
            413,
            &format!("the body is larger than {MAX_BODY_BYTES} bytes"),
        ));
    }
    Ok(entry)
}

/// Serves a request `precheck` admitted for `entry`, with its signing secret, at
/// `now_s` (Unix seconds).
pub fn process(
    entry: &EntryConfig,
    secret: &[u8],
    params: &WebhookHandleParams,
    now_s: i64,
) -> WebhookHandleResult {
    if let Err(e) = signature::verify(
        secret,
        params.header(signature::TIMESTAMP_HEADER),
        params.header(signature::HEADER),
        &params.body,
        now_s,
    ) {
        return answer_only(text(401, e.reason()));
    }
    let form = params.header("content-type").is_some_and(|c| {
        c.trim_start()
            .starts_with("application/x-www-form-urlencoded")
    });
    if form {
        return answer_only(form_request(&params.body));
    }
    let Some(payload) = serde_json::from_slice::<Value>(&params.body)
        .ok()
        .filter(Value::is_object)
    else {
        return answer_only(text(400, "the body is not a JSON object"));
    };
    match payload
        .get("type")
        .and_then(Value::as_str)
        .unwrap_or_default()
    {
        "url_verification" => {
            let challenge = payload
                .get("challenge")
                .and_then(Value::as_str)
                .unwrap_or_default();
            if challenge.is_empty() || challenge.len() > 1024 {
                return answer_only(text(400, "a url_verification without a usable challenge"));
            }
            answer_only(json_answer(200, &json!({"challenge": challenge})))
        }
        "event_callback" => match project::event_callback(entry, &payload) {
            Ok(Verdict::Deliver(delivery)) => {
                if let Some(n) = params.header(RETRY_NUM_HEADER) {
                    tracing::info!(retry = n, event_id = %delivery.delivery_id, "a retried Slack event");
                }
                WebhookHandleResult {
                    deliveries: vec![delivery],
                    response: json_answer(200, &json!({"ok": true})),
                }
            }
            Ok(Verdict::Ignored(why)) => answer_only(ignored(&why)),
            Err(why) => answer_only(text(400, &format!("unreadable event_callback: {why}"))),
        },
        other => answer_only(ignored(&format!(
            "Slack request type `{other}` is not one this package takes"
        ))),
    }
}

/// A signed form-encoded request: an interactivity `payload=` (a `block_actions`
/// press is acted on after this answer, by [`crate::actions`]) or an `ssl_check`.
fn form_request(body: &[u8]) -> HttpAnswer {
    let body = String::from_utf8_lossy(body);
    let fields = form_fields(&body);
    if let Some((_, payload)) = fields.iter().find(|(k, _)| k == "payload") {
        let kind = serde_json::from_str::<Value>(payload)
            .ok()
            .and_then(|p| p.get("type").and_then(Value::as_str).map(str::to_string))
            .unwrap_or_else(|| "unreadable".into());
        if kind == "block_actions" {
            return json_answer(200, &json!({"ok": true, "interactivity": kind}));
        }
        return ignored(&format!(
            "interactivity payloads of type `{kind}` are not acted on"
        ));
    }
    if fields.iter().any(|(k, _)| k == "ssl_check") {
        return json_answer(200, &json!({"ok": true}));
    }
    text(400, "a form-encoded request without payload")
}

/// The fields of a form-encoded body, percent-decoded (`+` is a space).
pub fn form_fields(body: &str) -> Vec<(String, String)> {
    body.split('&')
        .filter(|p| !p.is_empty())
        .map(|pair| {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            (percent_decode(k), percent_decode(v))
        })
        .collect()
}

/// `s` percent-decoded, `+` as a space.
pub fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    let hex = |b: u8| char::from(b).to_digit(16);
    while i < bytes.len() {
        match (
            bytes[i],
            bytes.get(i + 1).copied(),
            bytes.get(i + 2).copied(),
        ) {
            (b'%', Some(h), Some(l)) => match (hex(h), hex(l)) {
                (Some(h), Some(l)) => {
                    out.push(u8::try_from(h * 16 + l).unwrap_or(b'?'));
                    i += 3;
                }
                _ => {
                    out.push(b'%');
                    i += 1;
                }
            },
            (b'+', _, _) => {
                out.push(b' ');
                i += 1;
            }
            (b, _, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The `block_actions` payload of a form-encoded interactivity request, if it is
/// one. Only for a request [`process`] answered 200: that answer comes after the
/// signature and timestamp were verified.
pub fn block_actions_payload(params: &WebhookHandleParams) -> Option<Value> {
    let form = params.header("content-type").is_some_and(|c| {
        c.trim_start()
            .starts_with("application/x-www-form-urlencoded")
    });
    if !form || params.body.len() > MAX_BODY_BYTES {
        return None;
    }
    let body = String::from_utf8_lossy(&params.body);
    let (_, payload) = form_fields(&body)
        .into_iter()
        .find(|(k, _)| k == "payload")?;
    let payload: Value = serde_json::from_str(&payload).ok()?;
    (payload.get("type").and_then(Value::as_str) == Some("block_actions")).then_some(payload)
}
