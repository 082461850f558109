//! `dependency.filter` for `github.wait`: does a delivery satisfy a wait's plan?
//!
//! The host asks it inside a transaction, for an Event on one of the Wait's keys and
//! types ([`crate::waits::Kind::delivery_types`] and the task's `github.wait.*`
//! type), with the plan [`crate::waits::plan`] returned. It answers from those
//! params alone: no call to the host or to GitHub, no clock, bounded work. A failure
//! counts as "no match" on the host's side, and the `github.waits` task stays the
//! fallback, so a delivery this filter turns down never loses the wait.
//!
//! The rules (every one also needs the Event's repository to be the plan's and its
//! payload schema to be its family's `.v1`):
//!
//! - **The task's own Event** (`github.wait.*` of the plan's kind carrying the
//!   plan's ID) always satisfies it.
//! - **checks**: a `github.check_suite.completed` for the plan's head commit, when
//!   every check run the plan saw pending belongs to that suite (a commit whose
//!   pending runs span several suites is left to the task, since one suite's
//!   completion says nothing of the others and the filter keeps no state); or a
//!   `github.check_run.completed` for the head commit when the plan saw exactly one
//!   run pending and this is it (by ID, or by name for a re-run). A plan that saw
//!   more pending runs than it lists is left to the task.
//! - **review**: a `github.pull_request_review.submitted` on the plan's pull request
//!   whose review ID is above the newest one when the wait was planned, not pending,
//!   and not by the login the connection acts as (`bot`).
//! - **reply**: a `github.issue_comment.created` on the plan's issue or pull request
//!   whose comment ID is above the newest one when planned, or a
//!   `github.pull_request_review_comment.created` on it created no earlier than the
//!   second the wait was planned in (review comments are numbered apart from the
//!   conversation's, so the time decides); neither by `bot`.

use protocol::wire::{DependencyFilterParams, DependencyFilterResult, Event};
use protocol::{Code, RpcError};
use serde_json::Value;

use crate::waits::{is_bot, Kind, Plan, WAIT};
use crate::Family;

/// Serves `dependency.filter`: `matched` when the Event satisfies the plan. A plan
/// that does not parse, or another operation's, is an error (which the host counts
/// as no match).
pub fn filter(params: &DependencyFilterParams) -> Result<DependencyFilterResult, RpcError> {
    if params.operation != WAIT {
        return Err(RpcError::new(
            Code::NotFound,
            format!(
                "`{}` is not a wait operation of this package (it filters {WAIT})",
                params.operation
            ),
        ));
    }
    let plan: Plan = serde_json::from_value(params.plan.clone()).map_err(|e| {
        RpcError::new(
            Code::Invalid,
            format!("the wait's plan is not a github.wait plan: {e}"),
        )
    })?;
    let verdict = if !params.work_id.is_empty() && params.work_id != plan.work_id {
        Err(format!(
            "the plan is Work {}'s, not {}'s",
            plan.work_id, params.work_id
        ))
    } else {
        decide(&plan, &params.event)
    };
    if let Err(why) = &verdict {
        tracing::debug!(plan = %plan.id, event = %params.event.id, reason = %why, "not satisfied");
    }
    Ok(DependencyFilterResult {
        matched: verdict.is_ok(),
    })
}

/// `Ok` when `event` satisfies `plan`, else why not.
pub fn decide(plan: &Plan, event: &Event) -> Result<(), String> {
    let family = Family::of_type(&event.event_type)
        .ok_or_else(|| format!("`{}` is of no github family", event.event_type))?;
    if event.payload.schema != family.schema() {
        return Err(format!(
            "unreadable payload schema `{}` (this release reads {})",
            event.payload.schema,
            family.schema()
        ));
    }
    let data = &event.payload.data;
    let repository = text(data, "repository");
    if !repository.eq_ignore_ascii_case(&plan.repository) {
        return Err(format!(
            "the Event is about {repository}, the wait about {}",
            plan.repository
        ));
    }
    if family == Family::Wait {
        return if event.event_type == plan.kind.event_type() && text(data, "plan") == plan.id {
            Ok(())
        } else {
            Err("a github.wait Event of another plan".into())
        };
    }
    if !plan
        .kind
        .delivery_types()
        .contains(&event.event_type.as_str())
    {
        return Err(format!(
            "`{}` does not satisfy a wait for {}",
            event.event_type,
            kind_name(plan.kind)
        ));
    }
    match plan.kind {
        Kind::Checks => checks(plan, family, data),
        Kind::Review => review(plan, data),
        Kind::Reply => reply(plan, family, data),
    }
}

fn kind_name(kind: Kind) -> &'static str {
    match kind {
        Kind::Checks => "checks",
        Kind::Review => "a review",
        Kind::Reply => "a reply",
    }
}

fn text<'a>(data: &'a Value, field: &str) -> &'a str {
    data.get(field).and_then(Value::as_str).unwrap_or_default()
}

fn same_number(plan: &Plan, data: &Value) -> Result<(), String> {
    match data.get("number").and_then(Value::as_u64) {
        Some(n) if n == plan.number => Ok(()),
        Some(n) => Err(format!("about #{n}, the wait about #{}", plan.number)),
        None => Err("the Event names no issue or pull request number".into()),
    }
}

fn checks(plan: &Plan, family: Family, data: &Value) -> Result<(), String> {
    let sha = text(data, "head_sha");
    if plan.head_sha.is_empty() || sha != plan.head_sha {
        return Err(format!(
            "for commit {sha}, not the head commit {} the wait is on",
            plan.head_sha
        ));
    }
    if text(data, "status") != "completed" {
        return Err(format!("status {}, not completed", text(data, "status")));
    }
    if plan.pending_checks_truncated {
        return Err(
            "more check runs were pending when the wait was planned than the plan lists; \
             the github.waits task decides"
                .into(),
        );
    }
    let id = data.get("id").and_then(Value::as_u64).unwrap_or(0);
    match family {
        Family::CheckSuite => {
            let others: Vec<&str> = plan
                .pending_checks
                .iter()
                .filter(|p| p.suite_id == 0 || p.suite_id != id)
                .map(|p| p.name.as_str())
                .collect();
            if others.is_empty() {
                Ok(())
            } else {
                Err(format!(
                    "check runs of other suites were pending when the wait was planned ({})",
                    others.join(", ")
                ))
            }
        }
        Family::CheckRun => match plan.pending_checks.as_slice() {
            [only] if (id != 0 && only.id == id) || only.name == text(data, "name") => Ok(()),
            [only] => Err(format!(
                "check run {} is not {}, the one pending when the wait was planned",
                text(data, "name"),
                only.name
            )),
            [] => Err(
                "no check run was pending when the wait was planned: a suite's completion decides"
                    .into(),
            ),
            many => Err(format!(
                "{} check runs were pending when the wait was planned, not only this one",
                many.len()
            )),
        },
        _ => Err("not a check run or suite".into()),
    }
}

fn review(plan: &Plan, data: &Value) -> Result<(), String> {
    same_number(plan, data)?;
    let review = data.get("review").unwrap_or(&Value::Null);
    let id = review.get("id").and_then(Value::as_u64).unwrap_or(0);
    if id <= plan.after_id {
        return Err(format!(
            "review {id} is not newer than {}, the newest when the wait was planned",
            plan.after_id
        ));
    }
    if text(review, "state").eq_ignore_ascii_case("pending") {
        return Err("a pending review is a draft".into());
    }
    let author = text(review, "author");
    if is_bot(author, &plan.bot) {
        return Err(format!(
            "the review is {author}'s own (the connection's login)"
        ));
    }
    Ok(())
}

fn reply(plan: &Plan, family: Family, data: &Value) -> Result<(), String> {
    same_number(plan, data)?;
    let comment = data.get("comment").unwrap_or(&Value::Null);
    let author = text(comment, "author");
    if is_bot(author, &plan.bot) {
        return Err(format!(
            "the comment is {author}'s own (the connection's login)"
        ));
    }
    match family {
        Family::IssueComment => {
            let id = comment.get("id").and_then(Value::as_u64).unwrap_or(0);
            if id <= plan.after_id {
                return Err(format!(
                    "comment {id} is not newer than {}, the newest when the wait was planned",
                    plan.after_id
                ));
            }
            Ok(())
        }
        Family::PullRequestReviewComment => {
            let planned = protocol::time::parse_rfc3339_ms(&plan.planned_at).ok_or_else(|| {
                format!("the plan's planned_at {} is unreadable", plan.planned_at)
            })?;
            let created = protocol::time::parse_rfc3339_ms(text(comment, "created_at"))
                .ok_or("the review comment has no readable created_at")?;
            // GitHub's times have whole seconds.
            if created >= planned - planned.rem_euclid(1000) {
                Ok(())
            } else {
                Err(format!(
                    "the review comment was made at {}, before the wait was planned ({})",
                    text(comment, "created_at"),
                    plan.planned_at
                ))
            }
        }
        _ => Err("not a comment".into()),
    }
}
