//! `webhook.handle`: one GitHub delivery, verified and turned into at most one
//! Event.
//!
//! In order: a method other than POST is 405; a path no entry covers is 404;
//! an unresolvable webhook secret is 503 with `Retry-After: 5`; a missing or
//! wrong `X-Hub-Signature-256` is 401; no `X-GitHub-Delivery` or
//! `X-GitHub-Event` is 400; a `ping` is 200 with GitHub's zen; a body that is
//! not a JSON object is 400; an event of none of the seven families, one the
//! entry does not accept, or one of another repository is 202 and ignored; a
//! payload its family cannot read is 400; anything else is one delivery and
//! 200. Only the 200 carries a delivery.

use protocol::wire::{Delivery, HttpAnswer, WebhookHandleParams, WebhookHandleResult};
use serde_json::{json, Value};

use crate::config::{EntryConfig, Registry};
use crate::{project, signature, Family};

/// The header naming the delivery (a GUID, repeated by a redelivery).
pub const DELIVERY_HEADER: &str = "x-github-delivery";
/// The header naming the event (`issues`, `ping`, ...).
pub const EVENT_HEADER: &str = "x-github-event";
/// The longest delivery ID accepted, in bytes.
pub const MAX_DELIVERY_ID_BYTES: usize = 200;
/// Seconds a 503 asks GitHub to wait.
pub const RETRY_AFTER_SECONDS: u32 = 5;

/// A plain-text answer.
pub fn text(status: u16, message: &str) -> HttpAnswer {
    HttpAnswer::text(status, message)
}

/// A JSON answer.
pub fn json_answer(status: u16, value: &Value) -> HttpAnswer {
    HttpAnswer::json(status, value)
}

/// 202: understood, and deliberately not delivered (GitHub would retry an
/// error).
pub fn ignored(reason: &str) -> HttpAnswer {
    json_answer(202, &json!({"ok": true, "ignored": true, "reason": reason}))
}

/// 503 with `Retry-After`: the webhook secret could not be resolved.
pub fn unavailable() -> HttpAnswer {
    text(503, "the webhook secret is unavailable; try again")
        .with_header("Retry-After", &RETRY_AFTER_SECONDS.to_string())
}

/// A result with no delivery.
pub fn answer_only(response: HttpAnswer) -> WebhookHandleResult {
    WebhookHandleResult {
        deliveries: Vec::new(),
        response,
    }
}

/// What is decided before the secret is needed: the method (405 unless POST)
/// and the entry (the longest registered path covering the request's, else
/// 404).
pub fn precheck<'a>(
    registry: &'a Registry,
    params: &WebhookHandleParams,
) -> Result<&'a EntryConfig, HttpAnswer> {
    if !params.method.eq_ignore_ascii_case("POST") {
        return Err(text(405, "only POST is accepted").with_header("Allow", "POST"));
    }
    registry
        .entry_for(&params.path)
        .ok_or_else(|| text(404, "no GitHub webhook is configured at this path"))
}

/// A usable delivery ID: one line of printable ASCII, at most
/// [`MAX_DELIVERY_ID_BYTES`].
fn delivery_id_ok(id: &str) -> bool {
    !id.is_empty() && id.len() <= MAX_DELIVERY_ID_BYTES && id.bytes().all(|b| b.is_ascii_graphic())
}

/// Serves a request `precheck` admitted for `entry`, with its webhook secret.
pub fn process(
    entry: &EntryConfig,
    secret: &[u8],
    params: &WebhookHandleParams,
) -> WebhookHandleResult {
    match decide(entry, secret, params) {
        Ok(delivery) => WebhookHandleResult {
            deliveries: vec![delivery],
            response: json_answer(200, &json!({"ok": true})),
        },
        Err(answer) => answer_only(answer),
    }
}

/// The delivery of an admitted request, or the answer that goes without one
/// (`Err` also carries the 200 of a ping and the 202s of ignored deliveries).
fn decide(
    entry: &EntryConfig,
    secret: &[u8],
    params: &WebhookHandleParams,
) -> Result<Delivery, HttpAnswer> {
    signature::verify(secret, &params.body, params.header(signature::HEADER))
        .map_err(|e| text(401, e.reason()))?;
    let delivery_id = params
        .header(DELIVERY_HEADER)
        .map(str::trim)
        .unwrap_or_default();
    if delivery_id.is_empty() {
        return Err(text(400, "missing X-GitHub-Delivery header"));
    }
    if !delivery_id_ok(delivery_id) {
        return Err(text(400, "malformed X-GitHub-Delivery header"));
    }
    let event = params
        .header(EVENT_HEADER)
        .map(str::trim)
        .unwrap_or_default();
    if event.is_empty() {
        return Err(text(400, "missing X-GitHub-Event header"));
    }
    let payload: Value = serde_json::from_slice(&params.body)
        .ok()
        .filter(Value::is_object)
        .ok_or_else(|| text(400, "the body is not a JSON object"))?;
    if event == "ping" {
        let zen = payload.get("zen").cloned().unwrap_or(Value::Null);
        return Err(json_answer(200, &json!({"ok": true, "zen": zen})));
    }
    let event = event_of(entry, event, delivery_id, &payload)?;
    Ok(Delivery {
        source: entry.source.clone(),
        delivery_id: delivery_id.to_string(),
        body: None,
        events: vec![event],
    })
}

/// The Event a delivery of GitHub event `event` with this payload makes for
/// `entry`, or the answer that goes without one: 202 for an event of none of the
/// seven families, one the entry does not accept or one of another repository;
/// 400 for a payload its family cannot read. The webhook path and reconcile
/// ([`crate::reconcile`]) decide alike.
pub fn event_of(
    entry: &EntryConfig,
    event: &str,
    delivery_id: &str,
    payload: &Value,
) -> Result<protocol::wire::IngressEvent, HttpAnswer> {
    let Some(family) = Family::from_github_event(event) else {
        return Err(ignored(&format!(
            "GitHub event `{event}` is not one this extension handles"
        )));
    };
    if !entry.accepts(family) {
        return Err(ignored(&format!(
            "GitHub event `{event}` is not in this entry's events"
        )));
    }
    match payload
        .pointer("/repository/full_name")
        .and_then(Value::as_str)
    {
        Some(full_name) if entry.is_repository(full_name) => {}
        Some(full_name) => {
            return Err(ignored(&format!(
                "repository {full_name} is not {}, the repository this webhook is for",
                entry.repository
            )))
        }
        None => return Err(ignored("the delivery names no repository")),
    }
    project::project(family, delivery_id, payload)
        .map_err(|why| text(400, &format!("unreadable `{event}` payload: {why}")))
}
