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
use sdk::config::ConfigError;
use serde::Deserialize;
use serde_json::Value;

use crate::project::truncate;
use crate::{FAMILY, NAME, SCHEMA};

/// A `slack` route's config.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RouteConfig {
    /// Event type prefixes the route takes (all of the family when empty).
    pub events: Vec<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRoute {
    #[serde(default)]
    events: Option<Vec<String>>,
}

impl RouteConfig {
    /// Parses a route config (`null` is the empty config), its error naming the
    /// field as a JSON pointer.
    pub fn check(config: &Value) -> Result<RouteConfig, ConfigError> {
        let raw: RawRoute = match config {
            Value::Null => RawRoute::default(),
            Value::Object(_) => sdk::config::parse(config)?,
            _ => return Err(ConfigError::whole("must be an object")),
        };
        let events = raw.events.unwrap_or_default();
        for (i, prefix) in events.iter().enumerate() {
            let ok = prefix == FAMILY
                || prefix.strip_prefix(FAMILY).is_some_and(|rest| {
                    rest.len() > 1
                        && rest.starts_with('.')
                        && rest[1..]
                            .bytes()
                            .all(|b| b.is_ascii_lowercase() || b == b'_' || b == b'.')
                });
            if !ok {
                return Err(ConfigError::new(
                    format!("/events/{i}"),
                    "must be slack.message or one of its types (slack.message.app_mention, \
                     slack.message.im, slack.message.reply)",
                ));
            }
        }
        Ok(RouteConfig { events })
    }

    /// A route config's error in a sentence.
    pub fn message(e: &ConfigError) -> String {
        if e.pointer.is_empty() {
            format!("route config {}", e.reason)
        } else {
            format!("route config {}: {}", e.pointer, e.reason)
        }
    }

    /// What the route takes, in one line.
    pub fn describe(&self) -> String {
        if self.events.is_empty() {
            "takes Slack mentions, direct messages and replies in their threads".into()
        } else {
            format!("takes {}", self.events.join(", "))
        }
    }

    /// True when the route's `events` take `event_type`.
    pub fn takes_type(&self, event_type: &str) -> bool {
        self.events.is_empty()
            || self.events.iter().any(|p| {
                event_type
                    .strip_prefix(p.as_str())
                    .is_some_and(|rest| rest.is_empty() || rest.starts_with('.'))
            })
    }
}

fn no(reason: String) -> Result<RouteMatchResult, RpcError> {
    Ok(RouteMatchResult {
        matched: false,
        reason,
        ..Default::default()
    })
}

/// Serves `route.match`. A route config that does not parse is an invalid params
/// error.
pub fn match_route(params: &RouteMatchParams) -> Result<RouteMatchResult, RpcError> {
    if params.handler != NAME {
        return no(format!("handler `{}` is not served here", params.handler));
    }
    let config = RouteConfig::check(&params.route.config)
        .map_err(|e| RpcError::invalid_params(RouteConfig::message(&e)))?;
    let event = &params.event;
    let of_family = event
        .event_type
        .strip_prefix(FAMILY)
        .is_some_and(|rest| rest.is_empty() || rest.starts_with('.'));
    if !of_family {
        return no(format!(
            "Event type `{}` is not slack.message",
            event.event_type
        ));
    }
    if event.payload.schema != SCHEMA {
        return no(format!(
            "unreadable payload schema `{}` (this release reads {SCHEMA})",
            event.payload.schema
        ));
    }
    if !config.takes_type(&event.event_type) {
        return no(format!(
            "Event type `{}` is not in the route's events ({})",
            event.event_type,
            config.events.join(", ")
        ));
    }
    if event.keys.is_empty() {
        return no(format!("`{}` has no thread key", event.event_type));
    }
    let data = &event.payload.data;
    let kind = data.get("kind").and_then(Value::as_str).unwrap_or_default();
    let open = params.work.is_some();
    if kind == "reply" && !open {
        return no(format!(
            "a reply in thread {} that no open Work follows",
            event.keys.join(", ")
        ));
    }
    let current = params
        .work
        .as_ref()
        .and_then(|w| w.display.as_ref())
        .filter(|d| !d.is_empty());
    let display = match current {
        Some(_) => None,
        None => display(data),
    };
    let reason = if open {
        format!(
            "`{}` joins the Work of thread {}",
            event.event_type,
            event.keys.join(", ")
        )
    } else {
        format!(
            "`{}` starts thread {}",
            event.event_type,
            event.keys.join(", ")
        )
    };
    Ok(RouteMatchResult {
        matched: true,
        keys: event.keys.clone(),
        reason,
        display,
        ..Default::default()
    })
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
