//! `event.render`: a `jira.issue` Event as markdown for the agent's prompt (the
//! issue's key, summary, status and reporter, a description only when an Event
//! carries one, and the comment's author and text), bounded by the request's
//! `max_bytes` with [`sdk::tracker::clip_markdown`]. An Event carries no free text:
//! a comment's text is read from Jira when the Event is rendered and put into the
//! data as `comment.text` before this runs ([`crate::comment_text`], Atlassian
//! Document Format made text by [`crate::adf`]).

use protocol::wire::{EventRenderParams, EventRenderResult, MAX_RENDERED_BYTES};
use protocol::{Code, RpcError};
use serde_json::Value;

use crate::{FAMILY, SCHEMA};

/// The bound used when the request gives none.
pub const DEFAULT_MAX_BYTES: usize = 16 * 1024;

/// The request's bound: its `max_bytes`, at most [`MAX_RENDERED_BYTES`].
pub fn bound(max_bytes: u32) -> usize {
    match usize::try_from(max_bytes).unwrap_or(MAX_RENDERED_BYTES) {
        0 => DEFAULT_MAX_BYTES,
        n => n.min(MAX_RENDERED_BYTES),
    }
}

/// The markdown of an Event's data.
pub fn markdown(event_type: &str, data: &Value) -> String {
    let f = |p: &str| data.pointer(p).and_then(Value::as_str).unwrap_or_default();
    let mut out = format!("**Jira issue {}**: {}\n\n", f("/issue_key"), f("/summary"));
    let mut facts = Vec::new();
    if !f("/status").is_empty() {
        facts.push(format!("Status: {}", f("/status")));
    }
    if !f("/reporter").is_empty() {
        facts.push(format!("Reporter: {}", f("/reporter")));
    }
    let why = match f("/kind") {
        "assigned" => "assigned to you",
        "status_changed" => "moved to a status you take",
        "labelled" => "given a label you take",
        "comment_created" => "a new comment",
        _ => "",
    };
    if !why.is_empty() {
        facts.push(format!("Event: {why} ({event_type})"));
    }
    if !facts.is_empty() {
        out.push_str(&facts.join(" · "));
        out.push_str("\n\n");
    }
    if !f("/description").is_empty() {
        out.push_str("Description:\n\n");
        out.push_str(f("/description"));
        out.push_str("\n\n");
    }
    if data.get("comment").is_some() {
        out.push_str(&format!("**Comment by {}:**\n\n", f("/comment/author")));
        out.push_str(f("/comment/text"));
        out.push('\n');
    }
    out.trim_end().to_string()
}

/// Serves `event.render`.
pub fn serve(params: &EventRenderParams) -> Result<EventRenderResult, RpcError> {
    let event = &params.event;
    let ours = event
        .event_type
        .strip_prefix(FAMILY)
        .is_some_and(|r| r.is_empty() || r.starts_with('.'));
    if !ours || event.payload.schema != SCHEMA {
        return Err(RpcError::new(
            Code::Invalid,
            format!(
                "`{}` ({}) is not a {FAMILY} Event this release reads ({SCHEMA})",
                event.event_type, event.payload.schema
            ),
        ));
    }
    let full = markdown(&event.event_type, &event.payload.data);
    let max = bound(params.max_bytes);
    let text = sdk::tracker::clip_markdown(&full, max);
    let truncated = text != full;
    let text = if text.len() > max {
        sdk::tracker::clip(&text, max).0.to_string()
    } else {
        text
    };
    Ok(EventRenderResult { text, truncated })
}
