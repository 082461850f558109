//! `webhook.handle`: one Jira Cloud webhook delivery, verified and turned into at
//! most one Event of family `jira.issue`.
//!
//! In order: a method other than POST is 405; a path no entry covers is 404; a body
//! over [`MAX_BODY_BYTES`] is 413; an unresolvable `webhook_secret` is 503 with
//! `Retry-After`; a missing or wrong `X-Hub-Signature` is 401; a body that is not a
//! JSON object, or names no issue key, is 400. Then one Event, or 200 and nothing
//! (Jira retries anything but a 2xx, so an ignored delivery is still a 200).
//!
//! Taken ([`project`]), for an issue of one of the entry's projects:
//! - `jira:issue_created` whose assignee is the agent, whose status is one of the
//!   entry's `statuses` or which carries one of its `labels`;
//! - `jira:issue_updated` whose changelog assigns it to the agent (`assigned`),
//!   moves it to one of the `statuses` (`status_changed`) or adds one of the
//!   `labels` (`labelled`);
//! - `comment_created` by anyone but the agent (`comment_created`: it joins the
//!   issue's open Work, and starts one only when it mentions the agent,
//!   `comment.mentions_agent`).
//!
//! Each Event is keyed `jira:<issue key>`. Its delivery ID is the identity of the
//! change it reports ([`change_id`]: `issue/<id>/changelog/<changelog id>`,
//! `issue/<id>/created`, `comment/<comment id>`), which reconcile derives the same
//! way from a polled issue, so a change is one Event whichever way it comes
//! (docs/decisions.md, issue 43). Only a delivery naming no change falls back to the
//! `X-Atlassian-Webhook-Identifier` header, or a digest of the body.
//!
//! The payload holds only what both ways read alike: the issue's key, ID, project,
//! summary and status as of the change, its reporter, the change's kind, and for a
//! comment its ID, author and whether it mentions the agent. Free text (the
//! description, a comment's body) is not in it: a webhook sends it in a different
//! markup than the REST API answers, and the same Event must be byte for byte the
//! same. A comment's text is read when the Event is rendered (see [`crate`]'s
//! `event.render`).

use protocol::wire::{
    Delivery, HttpAnswer, IngressEvent, Payload, WebhookHandleParams, WebhookHandleResult,
};
use serde_json::{json, Value};
use sha2::{Digest, Sha256};

use crate::config::{is_issue_key, EntryConfig, Registry};
use crate::signature;
use crate::{FAMILY, SCHEMA};

/// The largest body read, in bytes (an issue payload with many custom fields is
/// tens of KiB).
pub const MAX_BODY_BYTES: usize = 2 * 1024 * 1024;
/// Seconds a 503 asks Jira to wait.
pub const RETRY_AFTER_SECONDS: u32 = 5;
/// The most bytes of a comment's text read for rendering.
pub const MAX_TEXT_BYTES: usize = 64 * 1024;

/// The Work key of an issue: `jira:<issue key>`.
pub fn key(issue_key: &str) -> String {
    format!("jira:{issue_key}")
}

/// The issue key of a Work key made by [`key`].
pub fn parse_key(key: &str) -> Option<&str> {
    key.strip_prefix("jira:").filter(|k| is_issue_key(k))
}

pub use sdk::tracker::answer_only;
use sdk::tracker::ignored;

/// 503 with `Retry-After`: the webhook secret could not be resolved.
pub fn unavailable() -> HttpAnswer {
    sdk::tracker::unavailable("the webhook secret", RETRY_AFTER_SECONDS)
}

/// What is decided before the secret is needed: method, entry, body size.
pub fn precheck<'a>(
    registry: &'a Registry,
    params: &WebhookHandleParams,
) -> Result<&'a EntryConfig, HttpAnswer> {
    if !params.method.eq_ignore_ascii_case("POST") {
        return Err(HttpAnswer::text(405, "only POST is accepted").with_header("Allow", "POST"));
    }
    let entry = registry
        .entry_for(&params.path)
        .ok_or_else(|| HttpAnswer::text(404, "no Jira entry is configured at this path"))?;
    if params.body.len() > MAX_BODY_BYTES {
        return Err(HttpAnswer::text(
            413,
            &format!("the body is larger than {MAX_BODY_BYTES} bytes (MAX_BODY_BYTES)"),
        ));
    }
    Ok(entry)
}

/// Serves a delivery `precheck` admitted for `entry`, with its webhook secret.
pub fn process(
    entry: &EntryConfig,
    secret: &[u8],
    params: &WebhookHandleParams,
) -> WebhookHandleResult {
    if let Err(e) = signature::verify(secret, params.header(signature::HEADER), &params.body) {
        return answer_only(HttpAnswer::text(401, &signature::reason(e)));
    }
    let Some(payload) = serde_json::from_slice::<Value>(&params.body)
        .ok()
        .filter(Value::is_object)
    else {
        return answer_only(HttpAnswer::text(400, "the body is not a JSON object"));
    };
    let header = params.header(signature::DELIVERY_HEADER).map(str::trim);
    let delivery_id = match (change_id(s(&payload, "/webhookEvent"), &payload), header) {
        (Some(change), _) => change,
        (None, Some(id))
            if !id.is_empty() && id.len() <= 200 && id.bytes().all(|b| b.is_ascii_graphic()) =>
        {
            id.to_string()
        }
        (None, _) => format!(
            "sha256:{}",
            protocol::hex::encode(&Sha256::digest(&params.body))
        ),
    };
    match project(entry, &payload) {
        Ok(Some(event)) => sdk::tracker::deliver(Delivery {
            source: entry.source.clone(),
            delivery_id,
            body: None,
            events: vec![event],
        }),
        Ok(None) => answer_only(ignored(
            "not an assignment to the agent, a configured status or label, or a comment",
        )),
        Err(why) => answer_only(HttpAnswer::text(
            400,
            &format!("unreadable Jira webhook: {why}"),
        )),
    }
}

/// The longest ID part of a change's identity, in bytes.
const MAX_ID_BYTES: usize = 64;

fn id_part(v: &str) -> Option<&str> {
    let v = v.trim();
    (!v.is_empty() && v.len() <= MAX_ID_BYTES && v.bytes().all(|b| b.is_ascii_graphic()))
        .then_some(v)
}

/// The identity of the change a payload of `event` reports, the same for a webhook
/// delivery and for a poll of the change: `issue/<issue id>/changelog/<changelog
/// id>` for `jira:issue_updated`, `issue/<issue id>/created` for
/// `jira:issue_created`, `comment/<comment id>` for `comment_created`. `None` when
/// the payload names no such ID.
pub fn change_id(event: &str, payload: &Value) -> Option<String> {
    let issue = || id_part(s(payload, "/issue/id"));
    match event {
        "jira:issue_updated" => Some(format!(
            "issue/{}/changelog/{}",
            issue()?,
            id_part(s(payload, "/changelog/id"))?
        )),
        "jira:issue_created" => Some(format!("issue/{}/created", issue()?)),
        "comment_created" => Some(format!("comment/{}", id_part(s(payload, "/comment/id"))?)),
        _ => None,
    }
}

/// Whether a comment's body (wiki markup or Atlassian Document Format) mentions
/// `account` (`[~accountid:<account>]`, or a `mention` node with that `id`).
pub fn mentions(body: &Value, account: &str) -> bool {
    fn walk(v: &Value, account: &str, depth: usize) -> bool {
        if depth > 64 {
            return false;
        }
        match v {
            Value::Object(o) => {
                (o.get("type").and_then(Value::as_str) == Some("mention")
                    && v.pointer("/attrs/id").and_then(Value::as_str) == Some(account))
                    || o.get("content")
                        .is_some_and(|c| walk(c, account, depth + 1))
            }
            Value::Array(a) => a.iter().any(|x| walk(x, account, depth + 1)),
            _ => false,
        }
    }
    match body {
        Value::String(t) => t.contains(&format!("[~accountid:{account}]")),
        other => walk(other, account, 0),
    }
}

fn s<'a>(v: &'a Value, pointer: &str) -> &'a str {
    v.pointer(pointer)
        .and_then(Value::as_str)
        .unwrap_or_default()
}

pub use sdk::tracker::clip as truncate;

/// A user object's display name, or its account ID.
fn who(user: Option<&Value>) -> String {
    let Some(u) = user else { return String::new() };
    match s(u, "/displayName") {
        "" => s(u, "/accountId").to_string(),
        n => n.to_string(),
    }
}

/// Why an issue event starts Work for `entry`, if it does.
fn trigger(entry: &EntryConfig, event: &str, payload: &Value) -> Option<&'static str> {
    let c = &entry.config;
    let fields = payload.pointer("/issue/fields");
    if event == "jira:issue_created" {
        let assignee = fields
            .map(|f| s(f, "/assignee/accountId"))
            .unwrap_or_default();
        if assignee == c.agent_account_id {
            return Some("assigned");
        }
        let status = fields.map(|f| s(f, "/status/name")).unwrap_or_default();
        if c.statuses.iter().any(|x| x.eq_ignore_ascii_case(status)) {
            return Some("status_changed");
        }
        let labels = fields
            .and_then(|f| f.get("labels"))
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(Value::as_str);
        return labels
            .into_iter()
            .any(|l| c.labels.iter().any(|x| x == l))
            .then_some("labelled");
    }
    let items = payload
        .pointer("/changelog/items")
        .and_then(Value::as_array)?;
    for item in items {
        let field = match s(item, "/fieldId") {
            "" => s(item, "/field"),
            f => f,
        };
        match field {
            "assignee" => {
                let to = match s(item, "/tmpToAccountId") {
                    "" => s(item, "/to"),
                    t => t,
                };
                if to == c.agent_account_id {
                    return Some("assigned");
                }
            }
            "status"
                if c.statuses
                    .iter()
                    .any(|x| x.eq_ignore_ascii_case(s(item, "/toString"))) =>
            {
                return Some("status_changed");
            }
            "labels" => {
                let before: Vec<&str> = s(item, "/fromString").split_whitespace().collect();
                if s(item, "/toString")
                    .split_whitespace()
                    .any(|l| !before.contains(&l) && c.labels.iter().any(|x| x == l))
                {
                    return Some("labelled");
                }
            }
            _ => {}
        }
    }
    None
}

/// The Event (or none) a webhook payload makes for `entry`. `Err` is a payload
/// that cannot be read.
pub fn project(entry: &EntryConfig, payload: &Value) -> Result<Option<IngressEvent>, String> {
    let event = s(payload, "/webhookEvent");
    if !matches!(
        event,
        "jira:issue_created" | "jira:issue_updated" | "comment_created"
    ) {
        return Ok(None);
    }
    let issue_key = s(payload, "/issue/key");
    if issue_key.is_empty() {
        return Err(format!("a `{event}` without issue.key"));
    }
    if !is_issue_key(issue_key) {
        return Err(format!(
            "issue.key `{}` is not an issue key",
            truncate(issue_key, 64).0
        ));
    }
    let project = issue_key
        .rsplit_once('-')
        .map(|(p, _)| p)
        .unwrap_or_default();
    if !entry.config.projects.iter().any(|p| p == project) {
        return Ok(None);
    }
    let fields = payload
        .pointer("/issue/fields")
        .cloned()
        .unwrap_or(Value::Null);
    let mut data = json!({
        "issue_key": issue_key,
        "issue_id": s(payload, "/issue/id"),
        "project": project,
        "summary": truncate(s(&fields, "/summary"), 1024).0,
        "status": s(&fields, "/status/name"),
        "reporter": who(fields.get("reporter").or_else(|| fields.get("creator"))),
        "reporter_account_id": s(&fields, "/reporter/accountId"),
        "webhook_event": event,
    });
    let kind = if event == "comment_created" {
        let author = s(payload, "/comment/author/accountId");
        if author == entry.config.agent_account_id {
            return Ok(None);
        }
        let mentions = payload
            .pointer("/comment/body")
            .is_some_and(|b| mentions(b, &entry.config.agent_account_id));
        data["comment"] = json!({
            "id": s(payload, "/comment/id"),
            "author": who(payload.pointer("/comment/author")),
            "author_account_id": author,
            "mentions_agent": mentions,
        });
        "comment_created"
    } else {
        match trigger(entry, event, payload) {
            Some(k) => k,
            None => return Ok(None),
        }
    };
    data["kind"] = json!(kind);
    let occurred_at = payload
        .get("timestamp")
        .and_then(Value::as_i64)
        .filter(|t| *t > 0)
        .map(protocol::time::format_rfc3339_ms)
        .unwrap_or_default();
    Ok(Some(IngressEvent {
        event_type: format!("{FAMILY}.{kind}"),
        payload: Payload {
            schema: SCHEMA.to_string(),
            data,
        },
        keys: vec![key(issue_key)],
        occurred_at,
        // Named by its change, the Event is that change's snapshot: a poll reading
        // it again (a user renamed since) is the same Event, not a conflict.
        snapshot: change_id(s(payload, "/webhookEvent"), payload).is_some(),
    }))
}
