//! `route.match` for the `slack` route handler.
//!
//! The route takes an Event of family `slack.message` (payload `slack.message.v1`)
//! whose type its optional `events` prefixes take:
//!
//! ```json
//! {"events": ["slack.message.app_mention", "slack.message.reply"]}
//! ```
//!
//! A thread is one Work, its key the Event's (`slack:<team>/<channel>/<root ts>`).
//! An `app_mention` or a direct message creates the Work of its thread, or joins it
//! when it is open; a `reply` joins the open Work of its thread and creates none (a
//! thread nobody asked the app into stays the people's). The display of Work a
//! match creates is the spec's for a Slack thread: the title is the first line of
//! the message without mention tokens (`<@U123>`, `<!here>`), the requester the
//! user ID, no ref; a match that joins open Work keeps its display (the first message
//! names the thread), or gives one when the Work has none.

use protocol::wire::{
    RouteMatchParams, RouteMatchResult, WorkDisplay, MAX_DISPLAY_REQUESTER_BYTES,
    MAX_DISPLAY_TITLE_BYTES,
};
use protocol::RpcError;
use sdk::route::{Claim, EventRoute, Handler};
use serde_json::Value;

use crate::project::truncate;
use crate::{FAMILY, NAME};

/// The handler as `route.match` checks an Event against it.
const ROUTE: EventRoute<'static> = EventRoute {
    handler: NAME,
    families: &[FAMILY],
    subtypes: true,
    events_hint: "must be slack.message or one of its types (slack.message.app_mention, \
                  slack.message.im, slack.message.reply)",
    takes_all: "takes Slack mentions, direct messages and replies in their threads",
    key_noun: "thread key",
};

/// The `slack` route handler, as [`RouteConfig`] names it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Slack;

impl Handler for Slack {
    const ROUTE: EventRoute<'static> = ROUTE;
}

/// A `slack` route's config: the Event type prefixes it takes (`events`).
pub type RouteConfig = sdk::route::RouteConfig<Slack>;

/// Serves `route.match`. A route config that does not parse is an invalid params
/// error.
pub fn match_route(params: &RouteMatchParams) -> Result<RouteMatchResult, RpcError> {
    if let Err(no) = ROUTE.admit(params)? {
        return Ok(no);
    }
    let event = &params.event;
    let data = &event.payload.data;
    let kind = data.get("kind").and_then(Value::as_str).unwrap_or_default();
    let keys = event.keys.join(", ");
    // A mention or a direct message starts the thread's Work; a reply only joins it.
    let claim = Claim {
        keys: event.keys.clone(),
        starts: (kind != "reply").then(String::new),
        neither: format!("a reply in thread {keys} that no open Work follows"),
        subject: format!("thread {keys}"),
    };
    Ok(sdk::route::start_or_join(params, claim, || display(data)))
}

/// A message's text without Slack's mention tokens: `<@U123>`, `<@U123|name>`,
/// `<!here>`, `<!subteam^S1>` and the like are dropped; a link `<url|label>` keeps
/// its label and `<url>` its URL; a channel `<#C1|name>` becomes `#name`.
pub fn without_mentions(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(start) = rest.find('<') {
        out.push_str(&rest[..start]);
        let after = &rest[start + 1..];
        let Some(end) = after.find('>') else {
            out.push_str(&rest[start..]);
            return out;
        };
        let token = &after[..end];
        if token.starts_with('@') || token.starts_with('!') {
            // a mention: dropped
        } else if let Some(channel) = token.strip_prefix('#') {
            match channel.split_once('|') {
                Some((_, name)) if !name.is_empty() => {
                    out.push('#');
                    out.push_str(name);
                }
                _ => {}
            }
        } else {
            match token.split_once('|') {
                Some((_, label)) if !label.is_empty() => out.push_str(label),
                Some((url, _)) => out.push_str(url),
                None => out.push_str(token),
            }
        }
        rest = &after[end + 1..];
    }
    out.push_str(rest);
    out
}

/// One line: control characters become spaces, runs of spaces one, the ends are
/// trimmed, and the text is cut to `max` bytes at a character boundary.
pub fn one_line(text: &str, max: usize) -> String {
    let cleaned: String = text
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    let squeezed = cleaned.split_whitespace().collect::<Vec<_>>().join(" ");
    truncate(&squeezed, max).0.trim_end().to_string()
}

/// The display a message gives its thread's Work: the first non-empty line of its
/// text without mention tokens as the title, the user ID as the requester. None
/// when that leaves no title (a bare mention): a display needs a title or a ref.
pub fn display(data: &Value) -> Option<WorkDisplay> {
    let text = data.get("text").and_then(Value::as_str).unwrap_or_default();
    let stripped = without_mentions(text);
    let first = stripped
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .unwrap_or_default();
    let title = one_line(first, MAX_DISPLAY_TITLE_BYTES);
    if title.is_empty() {
        return None;
    }
    let user = data.get("user").and_then(Value::as_str).unwrap_or_default();
    let display = WorkDisplay {
        title,
        reference: String::new(),
        requester: one_line(user, MAX_DISPLAY_REQUESTER_BYTES),
        links: Vec::new(),
    };
    display.validate().is_ok().then_some(display)
}
