//! `route.match` for the `jira` route handler.
//!
//! The route takes an Event of family `jira.issue` (payload `jira.issue.v1`) whose
//! type its optional `events` prefixes take. An issue is one Work, keyed
//! `jira:<issue key>`. An assignment to the agent, a move to a configured status or
//! a configured label creates the issue's Work (or joins it when open); a comment
//! joins the open Work of its issue and creates none. The display is the spec's
//! for a tracker issue: the issue's title (summary), its key as the ref, and its
//! author (the reporter's display name, or account ID) as the requester.

use protocol::wire::{RouteMatchParams, RouteMatchResult, WorkDisplay};
use protocol::RpcError;
use sdk::config::ConfigError;
use serde::Deserialize;
use serde_json::Value;

use crate::{FAMILY, NAME, SCHEMA};

/// A `jira` route's config.
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
    /// Parses a route config (`null` is empty), its error naming the field.
    pub fn check(config: &Value) -> Result<RouteConfig, ConfigError> {
        let raw: RawRoute = match config {
            Value::Null => RawRoute::default(),
            Value::Object(_) => sdk::config::parse(config)?,
            _ => return Err(ConfigError::whole("must be an object")),
        };
        let events = raw.events.unwrap_or_default();
        for (i, p) in events.iter().enumerate() {
            let ok = p == FAMILY
                || p.strip_prefix(FAMILY).is_some_and(|rest| {
                    rest.len() > 1
                        && rest.starts_with('.')
                        && rest[1..]
                            .bytes()
                            .all(|b| b.is_ascii_lowercase() || b == b'_')
                });
            if !ok {
                return Err(ConfigError::new(
                    format!("/events/{i}"),
                    "must be jira.issue or one of its types (jira.issue.assigned, \
                     jira.issue.status_changed, jira.issue.labelled, jira.issue.comment_created)",
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
            "takes Jira issues given to the agent and comments on them".into()
        } else {
            format!("takes {}", self.events.join(", "))
        }
    }

    fn takes(&self, event_type: &str) -> bool {
        self.events.is_empty()
            || self.events.iter().any(|p| {
                event_type
                    .strip_prefix(p.as_str())
                    .is_some_and(|r| r.is_empty() || r.starts_with('.'))
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

/// Serves `route.match`.
pub fn match_route(params: &RouteMatchParams) -> Result<RouteMatchResult, RpcError> {
    if params.handler != NAME {
        return no(format!("handler `{}` is not served here", params.handler));
    }
    let config = RouteConfig::check(&params.route.config)
        .map_err(|e| RpcError::invalid_params(RouteConfig::message(&e)))?;
    let event = &params.event;
    let ours = event
        .event_type
        .strip_prefix(FAMILY)
        .is_some_and(|r| r.is_empty() || r.starts_with('.'));
    if !ours {
        return no(format!(
            "Event type `{}` is not jira.issue",
            event.event_type
        ));
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
    if event.keys.is_empty() {
        return no(format!("`{}` has no issue key", event.event_type));
    }
    let data = &event.payload.data;
    let kind = data.get("kind").and_then(Value::as_str).unwrap_or_default();
    let open = params.work.is_some();
    if kind == "comment_created" && !open {
        return no(format!(
            "a comment on {} that no open Work follows",
            event.keys.join(", ")
        ));
    }
    let has_display = params
        .work
        .as_ref()
        .and_then(|w| w.display.as_ref())
        .is_some_and(|d| !d.is_empty());
    let display = if has_display { None } else { display(data) };
    let reason = if open {
        format!(
            "`{}` joins the Work of {}",
            event.event_type,
            event.keys.join(", ")
        )
    } else {
        format!(
            "`{}` starts the Work of {}",
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

/// The display an issue's Event gives its Work: the summary as title, the issue
/// key as ref, the reporter as requester.
pub fn display(data: &Value) -> Option<WorkDisplay> {
    let field = |f: &str| {
        data.get(f)
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string()
    };
    sdk::tracker::IssueDisplay {
        title: field("summary"),
        key: field("issue_key"),
        author: field("reporter"),
        url: String::new(),
    }
    .work_display()
}
