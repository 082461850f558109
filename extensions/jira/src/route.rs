//! `route.match` for the `jira` route handler.
//!
//! The route takes an Event of family `jira.issue` (payload `jira.issue.v1`) whose
//! type its optional `events` prefixes take. An issue is one Work, keyed
//! `jira:<issue key>`. An assignment to the agent, a move to a configured status or
//! a configured label creates the issue's Work (or joins it when open); a comment
//! joins the open Work of its issue, and creates one only when it mentions the
//! agent (`comment.mentions_agent`). The display is the spec's
//! for a tracker issue: the issue's title (summary), its key as the ref, and its
//! author (the reporter's display name, or account ID) as the requester.

use protocol::wire::{RouteMatchParams, RouteMatchResult, WorkDisplay};
use protocol::RpcError;
use sdk::route::{Claim, EventRoute, Handler};
use serde_json::Value;

use crate::{FAMILY, NAME};

/// The handler as `route.match` checks an Event against it.
const ROUTE: EventRoute<'static> = EventRoute {
    handler: NAME,
    families: &[FAMILY],
    subtypes: false,
    events_hint: "must be jira.issue or one of its types (jira.issue.assigned, \
                  jira.issue.status_changed, jira.issue.labelled, jira.issue.comment_created)",
    takes_all: "takes Jira issues given to the agent and comments on them",
    key_noun: "issue key",
};

/// The `jira` route handler, as [`RouteConfig`] names it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Jira;

impl Handler for Jira {
    const ROUTE: EventRoute<'static> = ROUTE;
}

/// A `jira` route's config: the Event type prefixes it takes (`events`).
pub type RouteConfig = sdk::route::RouteConfig<Jira>;

/// Serves `route.match`.
pub fn match_route(params: &RouteMatchParams) -> Result<RouteMatchResult, RpcError> {
    if let Err(no) = ROUTE.admit(params)? {
        return Ok(no);
    }
    let event = &params.event;
    let data = &event.payload.data;
    let kind = data.get("kind").and_then(Value::as_str).unwrap_or_default();
    let mentioned = data
        .pointer("/comment/mentions_agent")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    let keys = event.keys.join(", ");
    // An assignment, a status or a label the intake let through starts the Work;
    // a comment only when it mentions the agent.
    let claim = Claim {
        keys: event.keys.clone(),
        starts: (kind != "comment_created" || mentioned).then(String::new),
        neither: format!("a comment on {keys} that no open Work follows"),
        subject: keys,
    };
    Ok(sdk::route::start_or_join(params, claim, || display(data)))
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
