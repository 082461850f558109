//! `linear.wait_reply` (`operation.wait`): the agent parks its Work until a person
//! comments on the Work's Linear issue.
//!
//! The Wait is keyed by the issue's Work key (`linear:ENG-123`) and takes only
//! `linear.issue.commented` Events: a person's comment on the issue is delivered
//! with that key, so it wakes the Wait in the router's own write, and the next
//! turn's prompt carries it. Comments by the agent's user are never delivered
//! ([`crate::project`]), so the agent (and the projector) cannot wake it. Without a
//! comment the Wait ends at `timeout_s` (default a day, at most a week).

use protocol::wire::{OperationWaitParams, OperationWaitResult, StateWorkParams, WaitRequest};
use protocol::{Code, RpcError};
use sdk::tracker;

use crate::{project, FAMILY};

/// The operation's name.
pub const OPERATION: &str = "linear.wait_reply";

/// The Event type that wakes it.
pub fn comment_type() -> String {
    format!("{FAMILY}.commented")
}

/// The Linear issue key among a Work's keys.
pub fn issue_key(keys: &[String]) -> Option<&str> {
    keys.iter()
        .map(String::as_str)
        .find(|k| project::parse_key(k).is_some())
}

/// The Wait for a person's comment on `key`'s issue, due `timeout_s` after `now_ms`.
pub fn reply_wait(key: &str, timeout_s: u64, now_ms: i64) -> WaitRequest {
    tracker::reply_wait(
        key,
        &comment_type(),
        "a person's comment on the Work's Linear issue",
        timeout_s,
        now_ms,
    )
}

/// Serves `operation.wait` for [`OPERATION`].
pub async fn plan(
    host: &sdk::Host,
    params: &OperationWaitParams,
) -> Result<OperationWaitResult, RpcError> {
    if params.operation != OPERATION {
        return Err(RpcError::new(
            Code::NotFound,
            format!("no wait operation {}", params.operation),
        ));
    }
    let timeout = tracker::reply_wait_timeout_s(&params.input)?;
    let work = host
        .call_typed(&StateWorkParams {
            id: params.authority.work_id.clone(),
        })
        .await
        .map_err(|e| RpcError::new(Code::Unavailable, format!("reading the Work: {e}")))?
        .work;
    let key = issue_key(&work.keys).ok_or_else(|| {
        RpcError::new(
            Code::Invalid,
            "the Work has no Linear issue (it was not started by a Linear delivery)",
        )
    })?;
    Ok(OperationWaitResult {
        wait: reply_wait(key, timeout, protocol::time::now_ms()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_wait_is_keyed_by_the_issue_and_woken_by_comments_only() {
        let keys = vec!["github:x".to_string(), project::key("ENG-12")];
        let key = issue_key(&keys).expect("an issue key");
        let w = reply_wait(key, 60, 1_000);
        assert_eq!(w.keys, vec!["linear:ENG-12".to_string()]);
        assert_eq!(w.types, vec!["linear.issue.commented".to_string()]);
        assert_eq!(w.due_at, protocol::time::format_rfc3339_ms(61_000));
        assert!(issue_key(&["github:x".to_string()]).is_none());
    }

    #[test]
    fn timeout_s_is_bounded_and_the_error_names_the_bounds() {
        assert_eq!(
            tracker::reply_wait_timeout_s(&json!({})).ok(),
            Some(tracker::REPLY_WAIT_DEFAULT_S)
        );
        assert_eq!(
            tracker::reply_wait_timeout_s(&json!({"timeout_s": 5})).ok(),
            Some(5)
        );
        for bad in [
            json!({"timeout_s": 0}),
            json!({"timeout_s": tracker::REPLY_WAIT_MAX_S + 1}),
            json!({"timeout_s": "1"}),
        ] {
            let e = tracker::reply_wait_timeout_s(&bad).expect_err("refused");
            assert!(e.message.contains("604800"), "{}", e.message);
        }
    }
}
