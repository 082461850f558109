//! `route.match` for the `bitbucket` route handler.
//!
//! The route takes the package's Events (families `bitbucket.pullrequest`,
//! `bitbucket.commit_status`, `bitbucket.issue`) whose type its optional `events`
//! prefixes take. A pull request is one Work, keyed `bitbucket:<workspace>/<repo>#<id>`
//! ([`crate::intake::key`]); an issue of the repository's tracker is one Work too.
//!
//! What starts a Work (when none is open for the key):
//! - a comment mentioning the agent (`mentioned`), on a pull request or an issue;
//! - a pull request created or updated from a branch naming a Jira issue of the
//!   entry's `jira_projects` (`jira_key`), unless the agent's own account did it;
//! - an issue created mentioning the agent.
//!
//! Anything else of the key (other comments, approvals, change requests, fulfilment
//! and rejection, commit statuses) joins the open Work and creates none.
//! `fulfilled` and `rejected` join with the Event the Work's completion will read
//! (not in this step: see the README).
//!
//! The display is the spec's for a pull request or issue: its title, its key as the
//! ref (`workspace/repo#id`), its author as the requester, and a link to its page.

use protocol::wire::{RouteMatchParams, RouteMatchResult, WorkDisplay};
use protocol::RpcError;
use sdk::route::{Claim, EventRoute, Handler};
use serde_json::Value;

use crate::{FAMILIES, NAME};

/// The handler as `route.match` checks an Event against it.
const ROUTE: EventRoute<'static> = EventRoute {
    handler: NAME,
    families: &FAMILIES,
    subtypes: false,
    events_hint: "must be bitbucket.pullrequest, bitbucket.commit_status, bitbucket.issue \
                  or one of their types (bitbucket.pullrequest.comment_created)",
    takes_all: "takes Bitbucket pull requests that mention the agent or name a Jira issue, and what follows on them",
    key_noun: "key",
};

/// The `bitbucket` route handler, as [`RouteConfig`] names it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Bitbucket;

impl Handler for Bitbucket {
    const ROUTE: EventRoute<'static> = ROUTE;
}

/// A `bitbucket` route's config: the Event type prefixes it takes (`events`).
pub type RouteConfig = sdk::route::RouteConfig<Bitbucket>;

/// Why an Event starts a Work when none is open, if it does.
pub fn starts(family: &str, data: &Value) -> Option<&'static str> {
    let kind = data.get("kind").and_then(Value::as_str).unwrap_or_default();
    let flag = |f: &str| data.get(f).and_then(Value::as_bool).unwrap_or(false);
    let jira = data
        .get("jira_key")
        .and_then(Value::as_str)
        .is_some_and(|k| !k.is_empty());
    match (family, kind) {
        (_, "comment_created") if flag("mentioned") => Some("a comment mentions the agent"),
        (crate::PULLREQUEST, "created" | "updated") if jira && !flag("by_agent") => {
            Some("its branch names a Jira issue")
        }
        (crate::ISSUE, "created") if flag("mentioned") => Some("the issue mentions the agent"),
        _ => None,
    }
}

/// Serves `route.match`.
pub fn match_route(params: &RouteMatchParams) -> Result<RouteMatchResult, RpcError> {
    let family = match ROUTE.admit(params)? {
        Ok(family) => family,
        Err(no) => return Ok(no),
    };
    let event = &params.event;
    let data = &event.payload.data;
    let keys = event.keys.join(", ");
    let claim = Claim {
        keys: event.keys.clone(),
        starts: starts(family, data).map(String::from),
        neither: format!(
            "`{}` on {keys} starts no Work (no mention of the agent, no Jira issue in its branch) and no open Work follows it",
            event.event_type,
        ),
        subject: keys,
    };
    Ok(sdk::route::start_or_join(params, claim, || display(data)))
}

/// The display an Event gives its Work: the title, `workspace/repo#id` as ref, the
/// author as requester, the page as link.
pub fn display(data: &Value) -> Option<WorkDisplay> {
    let field = |f: &str| {
        data.get(f)
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string()
    };
    let id = data.get("id").and_then(Value::as_u64)?;
    let sep = if data.get("source_branch").is_some() {
        "#"
    } else {
        "/issues/"
    };
    sdk::tracker::IssueDisplay {
        title: field("title"),
        key: format!("{}{sep}{id}", field("repository")),
        author: field("author"),
        url: field("url"),
    }
    .work_display()
}
