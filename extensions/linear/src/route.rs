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
use sdk::route::{Claim, EventRoute, Handler};
use sdk::tracker::IssueDisplay;
use serde_json::Value;

use crate::{FAMILY, NAME};

/// The handler as `route.match` checks an Event against it.
const ROUTE: EventRoute<'static> = EventRoute {
    handler: NAME,
    families: &[FAMILY],
    subtypes: false,
    events_hint: "must be linear.issue or one of its types (linear.issue.assigned, \
                  linear.issue.moved, linear.issue.labeled, linear.issue.commented)",
    takes_all:
        "takes Linear issues assigned to the agent (or moved, or labelled) and comments on them",
    key_noun: "issue key",
};

/// The `linear` route handler, as [`RouteConfig`] names it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Linear;

impl Handler for Linear {
    const ROUTE: EventRoute<'static> = ROUTE;
}

/// A `linear` route's config: the Event type prefixes it takes (`events`).
pub type RouteConfig = sdk::route::RouteConfig<Linear>;

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
    if let Err(no) = ROUTE.admit(params)? {
        return Ok(no);
    }
    let event = &params.event;
    let Some(key) = event
        .keys
        .iter()
        .find(|k| crate::project::parse_key(k).is_some())
    else {
        return Ok(sdk::route::unmatched(format!(
            "`{}` has no issue key",
            event.event_type
        )));
    };
    let data = &event.payload.data;
    let kind = data.get("kind").and_then(Value::as_str).unwrap_or_default();
    let mentions = data
        .pointer("/comment/mentions_agent")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    // An assignment, a move or a label the intake let through starts the Work; a
    // comment only when it mentions the agent.
    let claim = Claim {
        keys: vec![key.clone()],
        subject: key.clone(),
        starts: (kind != "commented" || mentions).then(String::new),
        neither: format!(
            "a comment on {key} that no open Work follows and that does not mention the agent"
        ),
    };
    Ok(sdk::route::start_or_join(params, claim, || display(data)))
}
