//! `route.match` for the `github` route handler.
//!
//! The route takes an Event of one of the package's families whose payload is
//! the family's `.v1` and that passes the route's filters:
//!
//! ```json
//! {"events": ["github.issue.opened", "github.issue_comment"], "labels": ["agent"]}
//! ```
//!
//! `events` lists Event type prefixes, matched at a `.` boundary
//! (`github.issue_comment` takes `github.issue_comment.created`, and
//! `github.issue` does not take it); `labels` requires the issue or pull
//! request to carry one of them (compared case-insensitively; a check run or
//! suite carries none). The Work's keys are the Event's; a check run or suite on
//! no pull request has none and is not taken. The display names the issue or pull
//! request (its title, `#N`, its author and a link), or for a check run
//! `<name>: <conclusion>` and `#<first PR>` (a suite: `Checks (<app>):
//! <conclusion>`). Given the Work's current display, a match keeps its links and
//! adds its own; a check run or suite, or an Event about another issue or pull
//! request than the display's ref, only adds its link.

use protocol::wire::{
    check_display_url, DisplayLink, RouteMatchParams, RouteMatchResult, WorkDisplay,
    MAX_DISPLAY_LINKS, MAX_DISPLAY_LINK_LABEL_BYTES, MAX_DISPLAY_REF_BYTES,
    MAX_DISPLAY_REQUESTER_BYTES, MAX_DISPLAY_TITLE_BYTES,
};
use protocol::RpcError;
use sdk::config::ConfigError;
use serde::Deserialize;
use serde_json::Value;

use crate::project::truncate;
use crate::{Family, NAME};

/// A `github` route's config.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RouteConfig {
    /// Event type prefixes the route takes (all when empty).
    pub events: Vec<String>,
    /// Labels of which the issue or pull request must carry one (any when empty).
    pub labels: Vec<String>,
}

/// A route's config as written (strict).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRoute {
    #[serde(default)]
    events: Option<Vec<String>>,
    #[serde(default)]
    labels: Option<Vec<String>>,
}

impl RouteConfig {
    /// Parses a route config (`null` is the empty config). Every `events`
    /// prefix must be a family or begin with one and a `.`; an unknown field is
    /// refused. The error is [`RouteConfig::message`]'s.
    pub fn parse(config: &Value) -> Result<RouteConfig, String> {
        RouteConfig::check(config).map_err(|e| RouteConfig::message(&e))
    }

    /// A route config's error in a sentence: `route config /labels/0: must be a string`.
    pub fn message(e: &ConfigError) -> String {
        if e.pointer.is_empty() {
            format!("route config {}", e.reason)
        } else {
            format!("route config {}: {}", e.pointer, e.reason)
        }
    }

    /// [`RouteConfig::parse`], its error naming the field as a JSON pointer.
    pub fn check(config: &Value) -> Result<RouteConfig, ConfigError> {
        let raw: RawRoute = match config {
            Value::Null => RawRoute::default(),
            Value::Object(_) => sdk::config::parse(config)?,
            _ => return Err(ConfigError::whole("must be an object")),
        };
        let events = raw.events.unwrap_or_default();
        for prefix in &events {
            let ok = Family::of_type(prefix).is_some_and(|f| {
                let rest = &prefix[f.name().len()..];
                rest.is_empty()
                    || rest.len() > 1
                        && rest[1..]
                            .bytes()
                            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
            });
            if !ok {
                return Err(ConfigError::new(
                    "/events",
                    format!(
                        "`{prefix}` is not a github Event type or family \
                         (github.issue, github.issue_comment, github.pull_request, \
                         github.pull_request_review, github.pull_request_review_comment, \
                         github.check_run, github.check_suite, github.wait, or one of them \
                         with .<action>)"
                    ),
                ));
            }
        }
        Ok(RouteConfig {
            events,
            labels: raw.labels.unwrap_or_default(),
        })
    }

    /// What the route takes, in one line.
    pub fn describe(&self) -> String {
        let mut out = if self.events.is_empty() {
            "takes every github Event".to_string()
        } else {
            format!("takes {}", self.events.join(", "))
        };
        if !self.labels.is_empty() {
            out.push_str(&format!(
                " on issues or pull requests labelled {}",
                self.labels.join(" or ")
            ));
        }
        out
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

/// Serves `route.match`. A route config that does not parse is an invalid
/// params error (routing retries, so the Event waits for a fixed config rather
/// than falling through).
pub fn match_route(params: &RouteMatchParams) -> Result<RouteMatchResult, RpcError> {
    if params.handler != NAME {
        return no(format!("handler `{}` is not served here", params.handler));
    }
    let config = RouteConfig::parse(&params.route.config).map_err(RpcError::invalid_params)?;
    let event = &params.event;
    let Some(family) = Family::of_type(&event.event_type) else {
        return no(format!(
            "Event type `{}` is of no github family",
            event.event_type
        ));
    };
    if event.payload.schema != family.schema() {
        return no(format!(
            "unreadable payload schema `{}` (this release reads {})",
            event.payload.schema,
            family.schema()
        ));
    }
    if !config.takes_type(&event.event_type) {
        return no(format!(
            "Event type `{}` is not in the route's events ({})",
            event.event_type,
            config.events.join(", ")
        ));
    }
    if family == Family::Wait && !config.events.iter().any(|p| p.starts_with("github.wait")) {
        return no(format!(
            "`{}` wakes the Wait that planned it; a route takes it only when its events name github.wait",
            event.event_type
        ));
    }
    let data = &event.payload.data;
    let repository = data
        .get("repository")
        .and_then(Value::as_str)
        .unwrap_or_default();
    // An Event about a Work this route's binding already runs (its keys reach it: a
    // review, a comment or a check on the pull request the agent opened) follows the
    // Work whatever its labels: the route took the Work once.
    let follows = params
        .work
        .as_ref()
        .is_some_and(|w| w.binding == params.route.binding);
    if !config.labels.is_empty() && !follows {
        if matches!(family, Family::CheckRun | Family::CheckSuite) {
            return no("a check run or suite carries no labels, and the route requires one".into());
        }
        let carried: Vec<&str> = data
            .get("labels")
            .and_then(Value::as_array)
            .map(|l| l.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        let hit = config
            .labels
            .iter()
            .any(|want| carried.iter().any(|c| c.eq_ignore_ascii_case(want)));
        if !hit {
            return no(format!(
                "{}#{} carries none of the route's labels ({})",
                repository,
                data.get("number").and_then(Value::as_u64).unwrap_or(0),
                config.labels.join(", ")
            ));
        }
    }
    if event.keys.is_empty() {
        return no(format!(
            "`{}` has no keys (a check run or suite on no pull request has no Work to go to)",
            event.event_type
        ));
    }
    let current = params.work.as_ref().and_then(|w| w.display.as_ref());
    let display = display(family, data).and_then(|ours| merge(family, ours, current));
    let subject = match family {
        Family::CheckRun => format!(
            "check run {} on {}",
            data.get("name").and_then(Value::as_str).unwrap_or_default(),
            event.keys.join(", ")
        ),
        Family::CheckSuite => format!(
            "check suite of {} on {}",
            data.get("app").and_then(Value::as_str).unwrap_or_default(),
            event.keys.join(", ")
        ),
        _ => event.keys.join(", "),
    };
    // A pull request closed: merged completes the Work it reaches, closed unmerged
    // cancels it, and neither runs a turn nor makes Work.
    let close = match (family, event.event_type.as_str()) {
        (Family::PullRequest, "github.pull_request.closed") => {
            if data.get("merged").and_then(Value::as_bool) == Some(true) {
                "completed"
            } else {
                "cancelled"
            }
        }
        _ => "",
    };
    let reason = match close {
        "completed" => format!(
            "`{}`: {subject} merged: completes its Work",
            event.event_type
        ),
        "cancelled" => format!(
            "`{}`: {subject} closed unmerged: cancels its Work",
            event.event_type
        ),
        _ => format!("`{}`: {subject}", event.event_type),
    };
    Ok(RouteMatchResult {
        matched: true,
        keys: event.keys.clone(),
        reason,
        display,
        close: close.to_string(),
        ..Default::default()
    })
}

/// One line: control characters become spaces, the ends are trimmed, and the
/// text is cut to `max` bytes at a character boundary.
pub fn one_line(text: &str, max: usize) -> String {
    let cleaned: String = text
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    truncate(cleaned.trim(), max).0.trim_end().to_string()
}

fn link(label: &str, url: &str) -> Option<DisplayLink> {
    let label = one_line(label, MAX_DISPLAY_LINK_LABEL_BYTES);
    if label.is_empty() || check_display_url("url", url).is_err() {
        return None;
    }
    Some(DisplayLink {
        label,
        url: url.to_string(),
    })
}

/// A check run's or suite's first pull request and how it stands: its conclusion, or
/// its status while it runs.
fn check_of(data: &Value) -> Option<(u64, &str)> {
    let number = data
        .get("pull_requests")
        .and_then(Value::as_array)
        .and_then(|l| l.first())
        .and_then(Value::as_u64)?;
    let outcome = data
        .get("conclusion")
        .and_then(Value::as_str)
        .filter(|c| !c.is_empty())
        .or_else(|| data.get("status").and_then(Value::as_str))
        .unwrap_or_default();
    Some((number, outcome))
}

/// The display an Event's data gives on its own (none when it has no number
/// to refer to, or the result breaks the wire's display checks).
pub fn display(family: Family, data: &Value) -> Option<WorkDisplay> {
    let s = |field: &str| data.get(field).and_then(Value::as_str).unwrap_or_default();
    let display = match family {
        Family::Wait => return None,
        Family::CheckRun => {
            let (number, outcome) = check_of(data)?;
            WorkDisplay {
                title: one_line(
                    &format!("{}: {outcome}", s("name")),
                    MAX_DISPLAY_TITLE_BYTES,
                ),
                reference: format!("#{number}"),
                requester: String::new(),
                links: link(&format!("Check {}", s("name")), s("html_url"))
                    .into_iter()
                    .collect(),
            }
        }
        Family::CheckSuite => {
            let (number, outcome) = check_of(data)?;
            WorkDisplay {
                title: one_line(
                    &format!("Checks ({}): {outcome}", s("app")),
                    MAX_DISPLAY_TITLE_BYTES,
                ),
                reference: format!("#{number}"),
                requester: String::new(),
                links: Vec::new(),
            }
        }
        _ => {
            let number = data.get("number").and_then(Value::as_u64)?;
            let is_pr = match family {
                Family::Issue => false,
                Family::IssueComment => data
                    .get("is_pull_request")
                    .and_then(Value::as_bool)
                    .unwrap_or(false),
                _ => true,
            };
            let label = if is_pr {
                format!("PR #{number}")
            } else {
                format!("Issue #{number}")
            };
            WorkDisplay {
                title: one_line(s("title"), MAX_DISPLAY_TITLE_BYTES),
                reference: one_line(&format!("#{number}"), MAX_DISPLAY_REF_BYTES),
                requester: one_line(s("author"), MAX_DISPLAY_REQUESTER_BYTES),
                links: link(&label, s("html_url")).into_iter().collect(),
            }
        }
    };
    display.validate().is_ok().then_some(display)
}

/// `ours` applied over the Work's `current` display: the current links stay
/// first and ours are added (up to the limit); a check run, or an Event about
/// another issue or pull request than the current ref, keeps the current
/// title, ref and requester. Falls back to `ours` alone when the result would
/// break the display checks.
pub fn merge(
    family: Family,
    ours: WorkDisplay,
    current: Option<&WorkDisplay>,
) -> Option<WorkDisplay> {
    let Some(current) = current.filter(|c| !c.is_empty()) else {
        return Some(ours);
    };
    let keep_head = matches!(family, Family::CheckRun | Family::CheckSuite)
        || (!current.reference.is_empty() && current.reference != ours.reference);
    let mut merged = if keep_head {
        WorkDisplay {
            links: Vec::new(),
            ..current.clone()
        }
    } else {
        WorkDisplay {
            links: Vec::new(),
            ..ours.clone()
        }
    };
    for l in current.links.iter().chain(ours.links.iter()) {
        if merged.links.len() >= MAX_DISPLAY_LINKS {
            break;
        }
        if !merged.links.iter().any(|m| m.url == l.url) {
            merged.links.push(l.clone());
        }
    }
    if merged.validate().is_ok() {
        Some(merged)
    } else {
        Some(ours)
    }
}
