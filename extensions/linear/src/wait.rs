//! `linear.wait_reply` (`operation.wait`): the agent parks its Work until a person
//! comments on the Work's Linear issue.
//!
//! The Wait is keyed by the Work key (`linear:ENG-123`) and takes only
//! `linear.issue.commented` Events: a person's comment on the issue is delivered
//! with that key, so it wakes the Wait in the router's own write, and the next
//! turn's prompt carries it. Comments by the agent's user are never delivered
//! ([`crate::project`]), so the agent (and the projector) cannot wake it. Without a
//! comment the Wait ends at `timeout_s` (default a day, at most a week).

use protocol::wire::{OperationWaitParams, OperationWaitResult};
use protocol::RpcError;
use sdk::tracker::ReplyWait;

use crate::project;

/// The operation's name.
pub const OPERATION: &str = "linear.wait_reply";
/// The Event type that wakes it.
pub const WAKE_TYPE: &str = "linear.issue.commented";

fn is_key(key: &str) -> bool {
    project::parse_key(key).is_some()
}

/// The wait, as `sdk::tracker` plans it for every package.
pub const WAIT: ReplyWait<'static> = ReplyWait {
    operation: OPERATION,
    wake_type: WAKE_TYPE,
    description: "a person's comment on the Work's Linear issue",
    is_key,
    no_key: "the Work has no Linear issue (it was not started by a Linear delivery)",
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
        assert_eq!(WAKE_TYPE, format!("{}.commented", crate::FAMILY));
        assert!(is_key(&project::key("ENG-12")));
        assert!(!is_key("github:x"));
        let w = sdk::tracker::reply_wait("linear:ENG-12", WAKE_TYPE, WAIT.description, 60, 1_000);
        assert_eq!(w.keys, vec!["linear:ENG-12".to_string()]);
        assert_eq!(w.types, vec![WAKE_TYPE.to_string()]);
        assert_eq!(w.due_at, protocol::time::format_rfc3339_ms(61_000));
    }
}
