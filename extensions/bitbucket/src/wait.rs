//! The package's waits (`operation.wait`) and their `dependency.filter`.
//!
//! `bitbucket.wait_reply`: the agent parks its Work until a person comments on the
//! Work's pull request or requests changes on it. The Wait is keyed by the pull
//! request's Work key (`bitbucket:<workspace>/<repo>#<id>`) and takes
//! `bitbucket.pullrequest.comment_created` and `bitbucket.pullrequest.changes_requested`
//! Events ([`WAKE_TYPES`]): either is delivered with that key, so it wakes the Wait,
//! and the next turn's prompt carries it. The agent's own comments and change
//! requests are never delivered (intake drops those by `agent_account_id`), so it
//! cannot wake itself. Without either the Wait ends at `timeout_s` (default a day, at
//! most a week). Planned by the SDK's [`sdk::tracker::ReplyWait`], as every tracker's
//! reply wait is, with the change request's type added to the Wait's types.
//!
//! `bitbucket.wait_build` is [`crate::build`]'s.
//!
//! [`filter`] serves `dependency.filter` for both: a build wait's plan is decided by
//! [`crate::build::decide`]; any other plan (a reply wait's, which its keys and types
//! already decide) is taken.

use protocol::wire::{
    DependencyFilterParams, DependencyFilterResult, OperationWaitParams, OperationWaitResult,
};
use protocol::{Code, RpcError};
use sdk::tracker::ReplyWait;
use serde_json::Value;

use crate::{build, intake};

/// The operation's name.
pub const OPERATION: &str = "bitbucket.wait_reply";
/// The Event type of a comment, which wakes it.
pub const WAKE_TYPE: &str = "bitbucket.pullrequest.comment_created";
/// The Event type of a change request, which wakes it too.
pub const CHANGES_REQUESTED: &str = "bitbucket.pullrequest.changes_requested";
/// Every Event type that wakes it.
pub const WAKE_TYPES: [&str; 2] = [WAKE_TYPE, CHANGES_REQUESTED];

fn is_key(key: &str) -> bool {
    intake::parse_key(key).is_some()
}

/// The wait, as `sdk::tracker` plans it for every package.
pub const WAIT: ReplyWait<'static> = ReplyWait {
    operation: OPERATION,
    wake_type: WAKE_TYPE,
    description: "a comment or change request on the Work's Bitbucket pull request",
    is_key,
    no_key: "the Work has no Bitbucket pull request (it was not started by a Bitbucket webhook)",
};

/// The reply wait's Wait with every type of [`WAKE_TYPES`].
pub fn with_change_requests(mut result: OperationWaitResult) -> OperationWaitResult {
    for t in WAKE_TYPES {
        if !result.wait.types.iter().any(|have| have == t) {
            result.wait.types.push(t.to_string());
        }
    }
    result
}

/// Serves `operation.wait` for [`OPERATION`] and [`build::OPERATION`]; a refusal
/// carries its message for the agent.
pub async fn plan(
    state: &crate::State,
    host: &sdk::Host,
    params: &OperationWaitParams,
) -> Result<OperationWaitResult, RpcError> {
    let planned = match params.operation.as_str() {
        build::OPERATION => build::plan(state, host, params).await,
        OPERATION => WAIT.plan(host, params).await.map(with_change_requests),
        other => Err(RpcError::new(
            Code::NotFound,
            format!(
                "no wait operation {other} (this package has {OPERATION} and {})",
                build::OPERATION
            ),
        )),
    };
    planned.map_err(sdk::tracker::for_agent)
}

/// Serves `dependency.filter` (the host sends an empty `operation`, since the package
/// declares two waits): a build wait's plan (`wait: "build"`) decides by the Event
/// ([`build::decide`]); any other plan is taken.
pub fn filter(params: &DependencyFilterParams) -> Result<DependencyFilterResult, RpcError> {
    if params.plan.get("wait").and_then(Value::as_str) != Some(build::PLAN_KIND) {
        return Ok(DependencyFilterResult { matched: true });
    }
    let plan: build::Plan = serde_json::from_value(params.plan.clone()).map_err(|e| {
        RpcError::new(
            Code::Invalid,
            format!("the wait's plan is not a bitbucket.wait_build plan: {e}"),
        )
    })?;
    let verdict = if !params.work_id.is_empty() && params.work_id != plan.work_id {
        Err(format!(
            "the plan is Work {}'s, not {}'s",
            plan.work_id, params.work_id
        ))
    } else {
        build::decide(&plan, &params.event)
    };
    if let Err(why) = &verdict {
        tracing::debug!(work = %plan.work_id, event = %params.event.id, reason = %why, "the build wait is not woken");
    }
    Ok(DependencyFilterResult {
        matched: verdict.is_ok(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_wait_is_woken_by_comments_on_the_pull_requests_own_key() {
        assert_eq!(WAKE_TYPE, format!("{}.comment_created", crate::PULLREQUEST));
        assert!(is_key(&intake::key("acme/widgets", 7)));
        assert!(!is_key("bitbucket:acme/widgets/issues/7"));
        assert!(!is_key("bitbucket:acme/widgets@abcdef0"));
        assert!(!is_key("jira:PROJ-7"));
        let w = sdk::tracker::reply_wait(
            "bitbucket:acme/widgets#7",
            WAKE_TYPE,
            WAIT.description,
            60,
            1_000,
        );
        assert_eq!(w.keys, vec!["bitbucket:acme/widgets#7".to_string()]);
        let w = with_change_requests(OperationWaitResult { wait: w }).wait;
        assert_eq!(w.types, [WAKE_TYPE, CHANGES_REQUESTED]);
        assert_eq!(
            CHANGES_REQUESTED,
            format!("{}.changes_requested", crate::PULLREQUEST)
        );
    }

    #[test]
    fn the_filter_decides_build_plans_and_takes_the_rest() {
        use protocol::wire::{Event, Payload};
        use serde_json::json;
        let status = |state: &str| Event {
            event_type: "bitbucket.commit_status.updated".into(),
            payload: Payload {
                schema: "bitbucket.commit_status.v1".into(),
                data: json!({"repository": "acme/widgets", "commit": "9fec847784ab", "state": state, "name": "ci"}),
            },
            ..Default::default()
        };
        let plan = json!({"wait": "build", "work_id": "w1", "repository": "acme/widgets",
                          "pull_request": 5, "commit": "9fec847784ab"});
        let params = |plan: &serde_json::Value, state: &str, work: &str| DependencyFilterParams {
            work_id: work.into(),
            plan: plan.clone(),
            event: status(state),
            ..Default::default()
        };
        let matched = |p: DependencyFilterParams| filter(&p).map(|r| r.matched);
        assert_eq!(matched(params(&plan, "SUCCESSFUL", "w1")), Ok(true));
        assert_eq!(matched(params(&plan, "INPROGRESS", "w1")), Ok(false));
        assert_eq!(matched(params(&plan, "FAILED", "w2")), Ok(false));
        // A reply wait's plan is decided by its keys and types alone.
        let reply = json!({"key": "bitbucket:acme/widgets#5"});
        assert_eq!(matched(params(&reply, "INPROGRESS", "w1")), Ok(true));
        assert!(filter(&params(
            &json!({"wait": "build", "commit": 7}),
            "FAILED",
            "w1"
        ))
        .is_err());
    }
}
