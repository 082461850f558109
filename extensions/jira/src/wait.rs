//! `jira.wait_reply` (`operation.wait`): the agent parks its Work until a person
//! comments on the Work's Jira issue.
//!
//! The Wait is keyed by the Work key (`jira:<issue key>`) and takes only
//! `jira.issue.comment_created` Events: a person's comment is delivered with that
//! key, so it wakes the Wait, and the next turn's prompt carries it (its text read
//! from Jira when the Event is rendered, the ADF body made text). The agent's own
//! comments are never delivered (intake drops comments by `agent_account_id`), so
//! it cannot wake itself. Without a comment the Wait ends at `timeout_s` (default a
//! day, at most a week).

use protocol::wire::{OperationWaitParams, OperationWaitResult};
use protocol::RpcError;
use sdk::tracker::ReplyWait;

use crate::intake;

/// The operation's name.
pub const OPERATION: &str = "jira.wait_reply";
/// The Event type that wakes it.
pub const WAKE_TYPE: &str = "jira.issue.comment_created";

fn is_key(key: &str) -> bool {
    intake::parse_key(key).is_some()
}

/// The wait, as `sdk::tracker` plans it for every package.
pub const WAIT: ReplyWait<'static> = ReplyWait {
    operation: OPERATION,
    wake_type: WAKE_TYPE,
    description: "a comment on the Work's Jira issue",
    is_key,
    no_key: "the Work has no Jira issue (it was not started by a Jira webhook)",
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
    fn the_wait_is_woken_by_the_packages_replies_on_its_own_keys() {
        assert_eq!(WAKE_TYPE, format!("{}.comment_created", crate::FAMILY));
        assert!(is_key(&intake::key("PROJ-7")));
        assert!(!is_key("github:x"));
        let w = sdk::tracker::reply_wait("jira:PROJ-7", WAKE_TYPE, WAIT.description, 60, 1_000);
        assert_eq!(w.keys, vec!["jira:PROJ-7".to_string()]);
        assert_eq!(w.types, vec![WAKE_TYPE.to_string()]);
        assert_eq!(w.due_at, protocol::time::format_rfc3339_ms(61_000));
    }
}
