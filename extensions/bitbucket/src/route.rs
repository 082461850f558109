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
//! - a pull request created or updated (open) with the agent's account among its
//!   reviewers (`review_requested`: Bitbucket has no pull request labels, so a
//!   reviewer request is how a person hands a pull request over), not by the agent;
//! - an issue created mentioning the agent.
//!
//! Anything else of the key (other comments, approvals, change requests, commit
//! statuses) joins the open Work and creates none.
//!
//! A pull request merged (`bitbucket.pullrequest.fulfilled`) completes the open Work
//! it reaches, and one declined (`rejected`) cancels it (`close`, as GitHub's route
//! closes on `github.pull_request.closed`), without a turn; reaching no open Work,
//! either makes none.
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
        (crate::PULLREQUEST, "created" | "updated")
            if flag("review_requested")
                && !flag("by_agent")
                && data.get("state").and_then(Value::as_str) == Some("OPEN") =>
        {
            Some("the agent is asked to review it")
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
            "`{}` on {keys} starts no Work (no mention of the agent, no Jira issue in its branch, the agent not asked to review it) and no open Work follows it",
            event.event_type,
        ),
        subject: keys,
    };
    let mut result = sdk::route::start_or_join(params, claim, || display(data));
    let close = closes(&event.event_type);
    if result.matched && !close.is_empty() {
        let what = if close == "completed" {
            "merged: completes its Work"
        } else {
            "declined: cancels its Work"
        };
        result.reason = format!("`{}`: {} {what}", event.event_type, event.keys.join(", "));
        result.close = close.to_string();
    }
    Ok(result)
}

/// How an Event of `event_type` closes the open Work it reaches: `completed` for a
/// merged pull request, `cancelled` for a declined one, else `""` (it does not).
pub fn closes(event_type: &str) -> &'static str {
    match event_type.strip_prefix(crate::PULLREQUEST) {
        Some(".fulfilled") => "completed",
        Some(".rejected") => "cancelled",
        _ => "",
    }
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

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use protocol::wire::{Event, Payload, Route, Work};
    use serde_json::json;

    fn params(kind: &str, work: bool) -> RouteMatchParams {
        RouteMatchParams {
            handler: NAME.into(),
            route: Route {
                handler: NAME.into(),
                ..Default::default()
            },
            event: Event {
                id: "ev-1".into(),
                event_type: format!("bitbucket.pullrequest.{kind}"),
                keys: vec!["bitbucket:acme/widgets#5".into()],
                payload: Payload {
                    schema: "bitbucket.pullrequest.v1".into(),
                    data: json!({"kind": kind, "id": 5, "repository": "acme/widgets",
                                 "title": "Fix", "source_branch": "fix", "mentioned": false}),
                },
                ..Default::default()
            },
            work: work.then(|| Work {
                id: "w1".into(),
                keys: vec!["bitbucket:acme/widgets#5".into()],
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn a_merge_completes_and_a_decline_cancels_the_open_work() {
        let merged = match_route(&params("fulfilled", true)).unwrap();
        assert!(merged.matched);
        assert_eq!(merged.close, "completed");
        assert_eq!(merged.keys, ["bitbucket:acme/widgets#5"]);
        assert!(
            merged.reason.contains("merged: completes its Work"),
            "{}",
            merged.reason
        );
        let declined = match_route(&params("rejected", true)).unwrap();
        assert!(declined.matched);
        assert_eq!(declined.close, "cancelled");
        assert!(
            declined.reason.contains("declined: cancels its Work"),
            "{}",
            declined.reason
        );
        // Other Events of the pull request join without closing.
        for kind in [
            "approved",
            "changes_requested",
            "updated",
            "comment_created",
        ] {
            let joined = match_route(&params(kind, true)).unwrap();
            assert!(joined.matched, "{kind}");
            assert_eq!(joined.close, "", "{kind}");
        }
    }

    #[test]
    fn a_merge_or_decline_reaching_no_work_makes_none() {
        for kind in ["fulfilled", "rejected"] {
            let r = match_route(&params(kind, false)).unwrap();
            assert!(!r.matched, "{kind}");
            assert_eq!(r.close, "", "{kind}");
        }
        assert_eq!(closes("bitbucket.pullrequest.fulfilled"), "completed");
        assert_eq!(closes("bitbucket.pullrequest.rejected"), "cancelled");
        assert_eq!(closes("bitbucket.issue.rejected"), "");
        assert_eq!(closes("bitbucket.pullrequest.fulfilled_x"), "");
    }
}
