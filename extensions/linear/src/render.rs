//! `event.render`: a `linear.issue` Event as markdown for the prompt, from the
//! Event's own data (no API call), bounded by the request's `max_bytes` (default
//! [`DEFAULT_MAX_BYTES`]) with [`sdk::tracker::clip_markdown`].

use protocol::wire::{EventRenderParams, EventRenderResult};
use protocol::{Code, RpcError};
use serde_json::Value;

use crate::{FAMILY, SCHEMA};

/// The bound when the request gives none, in bytes.
pub const DEFAULT_MAX_BYTES: usize = 16 * 1024;

fn s<'a>(v: &'a Value, pointer: &str) -> &'a str {
    v.pointer(pointer)
        .and_then(Value::as_str)
        .unwrap_or_default()
}

/// The markdown of an Event's data, unbounded.
pub fn markdown(event_type: &str, data: &Value) -> String {
    let id = s(data, "/issue/identifier");
    let title = sdk::tracker::one_line(s(data, "/issue/title"), 300);
    let url = s(data, "/issue/url");
    let mut out = String::new();
    if event_type.ends_with(".commented") {
        let author = s(data, "/comment/user/name");
        let author = if author.is_empty() {
            s(data, "/comment/user/id")
        } else {
            author
        };
        out.push_str(&format!(
            "**Comment on Linear issue {id}** ({title}) by {author}:\n\n{}\n",
            s(data, "/comment/body")
        ));
        return out;
    }
    out.push_str(&format!("**Linear issue {id}: {title}**\n\n"));
    let why = match s(data, "/kind") {
        "assigned" => "It was assigned to you.".to_string(),
        "moved" => format!("It moved to {}.", s(data, "/issue/state")),
        "labeled" => "It was given a label that calls you in.".to_string(),
        other => format!("Trigger: {other}."),
    };
    out.push_str(&format!(
        "{why} State: {}. Opened by {}.",
        s(data, "/issue/state"),
        s(data, "/issue/creator/name")
    ));
    if !url.is_empty() {
        out.push_str(&format!(" {url}"));
    }
    out.push_str("\n\n");
    let description = s(data, "/issue/description");
    if description.trim().is_empty() {
        out.push_str("_(no description)_\n");
    } else {
        out.push_str(description);
        out.push('\n');
    }
    out
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
    let max = match params.max_bytes {
        0 => DEFAULT_MAX_BYTES,
        n => usize::try_from(n).unwrap_or(DEFAULT_MAX_BYTES),
    };
    let full = markdown(&event.event_type, &event.payload.data);
    let text = sdk::tracker::clip_markdown(&full, max);
    let truncated = text.len() != full.len() || text != full;
    Ok(EventRenderResult { text, truncated })
}
