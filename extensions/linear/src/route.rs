//! `route.match` for the `linear` route handler.
//!
//! The route takes Events of family `linear.issue` (payload `linear.issue.v1`) whose
//! type its optional `events` prefixes take (`{"events": ["linear.issue.assigned"]}`).
//! One issue is one Work, keyed `linear:<identifier>`. An issue assigned to the
//! agent, moved to a configured state or labelled creates its Work (or joins it when
//! open); a comment joins the open Work of its issue, and creates one only when it
//! mentions the agent. The display is the spec's for a tracker issue: the title is
//! the issue's title, the ref its identifier (`ENG-123`), the requester its creator;
//! a match that joins open Work keeps the display it has.

use protocol::wire::{RouteMatchParams, RouteMatchResult};
use protocol::RpcError;
use sdk::config::ConfigError;
use sdk::tracker::IssueDisplay;
use serde::Deserialize;
use serde_json::Value;

use crate::{FAMILY, NAME, SCHEMA};

/// A `linear` route's config.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RouteConfig {
    /// Event type prefixes the route takes (all of the family when empty).
    pub events: Vec<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRoute {
    #[serde(default)]
    events: Vec<String>,
}

impl RouteConfig {
    /// Parses a route config (`null` is the empty config).
    pub fn check(config: &Value) -> Result<RouteConfig, ConfigError> {
        let raw: RawRoute = match config {
            Value::Null => RawRoute::default(),
            Value::Object(_) => sdk::config::parse(config)?,
            _ => return Err(ConfigError::whole("must be an object")),
        };
        for (i, prefix) in raw.events.iter().enumerate() {
            let ok = prefix == FAMILY
                || prefix.strip_prefix(FAMILY).is_some_and(|rest| {
                    rest.len() > 1
                        && rest.starts_with('.')
                        && rest[1..]
                            .bytes()
                            .all(|b| b.is_ascii_lowercase() || b == b'_')
                });
            if !ok {
                return Err(ConfigError::new(
                    format!("/events/{i}"),
                    "must be linear.issue or one of its types (linear.issue.assigned, \
                     linear.issue.moved, linear.issue.labeled, linear.issue.commented)",
                ));
            }
        }
        Ok(RouteConfig { events: raw.events })
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
            "takes Linear issues assigned to the agent (or moved, or labelled) and comments on them"
                .into()
        } else {
            format!("takes {}", self.events.join(", "))
        }
    }

    fn takes(&self, event_type: &str) -> bool {
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

/// The display an Event's data gives its issue's Work.
pub fn display(data: &Value) -> Option<protocol::wire::WorkDisplay> {
    let issue = data.get("issue")?;
    let text = |v: &Value, f: &str| {
        v.get(f)
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string()
    };
    let author = issue
        .get("creator")
        .map(|c| {
            let name = text(c, "name");
            if name.is_empty() {
                text(c, "id")
            } else {
                name
            }
        })
        .unwrap_or_default();
    IssueDisplay {
        title: text(issue, "title"),
        key: text(issue, "identifier"),
        author,
        url: text(issue, "url"),
    }
    .work_display()
}

/// Serves `route.match`.
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
        return no(format!("Event type `{}` is not {FAMILY}", event.event_type));
    }
    if event.payload.schema != SCHEMA {
        return no(format!(
            "unreadable payload schema `{}` (this release reads {SCHEMA})",
            event.payload.schema
        ));
    }
    if !config.takes(&event.event_type) {
        return no(format!(
            "Event type `{}` is not in the route's events ({})",
            event.event_type,
            config.events.join(", ")
        ));
    }
    let Some(key) = event
        .keys
        .iter()
        .find(|k| crate::project::parse_key(k).is_some())
    else {
        return no(format!("`{}` has no issue key", event.event_type));
    };
    let data = &event.payload.data;
    let open = params.work.is_some();
    let kind = data.get("kind").and_then(Value::as_str).unwrap_or_default();
    let mentions = data
        .pointer("/comment/mentions_agent")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    if kind == "commented" && !open && !mentions {
        return no(format!(
            "a comment on {key} that no open Work follows and that does not mention the agent"
        ));
    }
    let has_display = params
        .work
        .as_ref()
        .and_then(|w| w.display.as_ref())
        .is_some_and(|d| !d.is_empty());
    let display = if has_display { None } else { display(data) };
    let reason = if open {
        format!("`{}` joins the Work of {key}", event.event_type)
    } else {
        format!("`{}` starts {key}", event.event_type)
    };
    Ok(RouteMatchResult {
        matched: true,
        keys: vec![key.clone()],
        reason,
        display,
        ..Default::default()
    })
}
