//! `slack.wait_reply` (`operation.wait`): the agent parks its Work until someone
//! replies in the Work's Slack thread.
//!
//! The Wait is keyed by the thread's Work key (`slack:<team>/<channel>/<root ts>`)
//! and takes only `slack.message.reply` Events: a reply a person writes in the
//! thread is delivered with that key, so it wakes the Wait in the router's own
//! write, and the next turn's prompt carries it. Replies while the agent's turn runs
//! reach that turn instead (injection); the package's own messages are never
//! delivered, so the agent cannot wake itself. Without a reply the Wait ends at
//! `timeout_s` (default a day, at most a week).

use protocol::wire::{OperationWaitParams, OperationWaitResult};
use protocol::RpcError;
use sdk::tracker::ReplyWait;

use crate::project;

/// The operation's name.
pub const OPERATION: &str = "slack.wait_reply";
/// The Event type that wakes it.
pub const WAKE_TYPE: &str = "slack.message.reply";

fn is_key(key: &str) -> bool {
    project::parse_key(key).is_some()
}

/// The wait, as `sdk::tracker` plans it for every package.
pub const WAIT: ReplyWait<'static> = ReplyWait {
    operation: OPERATION,
    wake_type: WAKE_TYPE,
    description: "a reply in the Work's Slack thread",
    is_key,
    no_key: "the Work has no Slack thread (it was not started by a Slack message)",
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
        assert_eq!(WAKE_TYPE, format!("{}.reply", crate::FAMILY));
        assert!(is_key(&project::key("T1", "C1", "1.5")));
        assert!(!is_key("github:x"));
        let w = sdk::tracker::reply_wait("slack:T1/C1/1.5", WAKE_TYPE, WAIT.description, 60, 1_000);
        assert_eq!(w.keys, vec!["slack:T1/C1/1.5".to_string()]);
        assert_eq!(w.types, vec![WAKE_TYPE.to_string()]);
        assert_eq!(w.due_at, protocol::time::format_rfc3339_ms(61_000));
    }
}
