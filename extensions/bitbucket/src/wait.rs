//! `bitbucket.wait_reply` (`operation.wait`): the agent parks its Work until a person
//! comments on the Work's pull request.
//!
//! The Wait is keyed by the pull request's Work key (`bitbucket:<workspace>/<repo>#<id>`)
//! and takes only `bitbucket.pullrequest.comment_created` Events: a person's comment
//! is delivered with that key, so it wakes the Wait, and the next turn's prompt
//! carries it. The agent's own comments are never delivered (intake drops those by
//! `agent_account_id`), so it cannot wake itself. Without a comment the Wait ends at
//! `timeout_s` (default a day, at most a week). Planned by the SDK's
//! [`sdk::tracker::ReplyWait`], as every tracker's reply wait is.

use protocol::wire::{OperationWaitParams, OperationWaitResult};
use protocol::RpcError;
use sdk::tracker::ReplyWait;

use crate::intake;

/// The operation's name.
pub const OPERATION: &str = "bitbucket.wait_reply";
/// The Event type that wakes it.
pub const WAKE_TYPE: &str = "bitbucket.pullrequest.comment_created";

fn is_key(key: &str) -> bool {
    intake::parse_key(key).is_some()
}

/// The wait, as `sdk::tracker` plans it for every package.
pub const WAIT: ReplyWait<'static> = ReplyWait {
    operation: OPERATION,
    wake_type: WAKE_TYPE,
    description: "a comment on the Work's Bitbucket pull request",
    is_key,
    no_key: "the Work has no Bitbucket pull request (it was not started by a Bitbucket webhook)",
};

/// Serves `operation.wait` for [`OPERATION`].
pub async fn plan(
    host: &sdk::Host,
    params: &OperationWaitParams,
) -> Result<OperationWaitResult, RpcError> {
    WAIT.plan(host, params).await
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
        assert_eq!(w.types, vec![WAKE_TYPE.to_string()]);
    }
}
