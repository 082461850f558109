//! `jira.wait_reply` (`operation.wait`): the agent parks its Work until a person
//! comments on the Work's Jira issue.
//!
//! The Wait is keyed by the issue's Work key (`jira:<issue key>`) and takes only
//! `jira.issue.comment_created` Events: a person's comment is delivered with that
//! key, so it wakes the Wait, and the next turn's prompt carries it (the ADF body
//! rendered as text at intake). The agent's own comments are never delivered
//! (intake drops comments by `agent_account_id`), so it cannot wake itself. Without
//! a comment the Wait ends at `timeout_s` (default a day, at most a week).

use protocol::wire::{OperationWaitParams, OperationWaitResult, StateWorkParams, WaitRequest};
use protocol::{Code, RpcError};
use serde_json::{json, Value};

use crate::{intake, FAMILY};

/// The operation's name.
pub const OPERATION: &str = "jira.wait_reply";
/// How long a wait lasts without `timeout_s`.
pub const DEFAULT_TIMEOUT_S: u64 = 86_400;
/// The shortest `timeout_s`.
pub const MIN_TIMEOUT_S: u64 = 1;
/// The longest `timeout_s` (a week).
pub const MAX_TIMEOUT_S: u64 = 7 * 86_400;

/// The Event type that wakes it.
pub fn comment_type() -> String {
    format!("{FAMILY}.comment_created")
}

fn invalid(m: impl Into<String>) -> RpcError {
    RpcError::new(Code::Invalid, m)
}

/// The wait's timeout from the call's input.
pub fn timeout_s(input: &Value) -> Result<u64, RpcError> {
    match input.get("timeout_s") {
        None | Some(Value::Null) => Ok(DEFAULT_TIMEOUT_S),
        Some(v) => v
            .as_u64()
            .filter(|s| (MIN_TIMEOUT_S..=MAX_TIMEOUT_S).contains(s))
            .ok_or_else(|| {
                invalid(format!(
                    "timeout_s must be a whole number of seconds from {MIN_TIMEOUT_S} to {MAX_TIMEOUT_S}"
                ))
            }),
    }
}

/// The Jira issue key among a Work's keys (`jira:PROJ-1`).
pub fn issue_work_key(keys: &[String]) -> Option<&str> {
    keys.iter()
        .map(String::as_str)
        .find(|k| intake::parse_key(k).is_some())
}

/// The Wait for a comment on `key`'s issue, due `timeout_s` after `now_ms`.
pub fn reply_wait(key: &str, timeout_s: u64, now_ms: i64) -> WaitRequest {
    let due_ms =
        now_ms.saturating_add(i64::try_from(timeout_s.saturating_mul(1000)).unwrap_or(i64::MAX));
    WaitRequest {
        keys: vec![key.to_string()],
        types: vec![comment_type()],
        due_at: protocol::time::format_rfc3339_ms(due_ms),
        description: "a comment on the Work's Jira issue".to_string(),
        plan: json!({ "issue": key }),
    }
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
    let timeout = timeout_s(&params.input)?;
    let work = host
        .call_typed(&StateWorkParams {
            id: params.authority.work_id.clone(),
        })
        .await
        .map_err(|e| RpcError::new(Code::Unavailable, format!("reading the Work: {e}")))?
        .work;
    let key = issue_work_key(&work.keys).ok_or_else(|| {
        invalid("the Work has no Jira issue (it was not started by a Jira webhook)")
    })?;
    Ok(OperationWaitResult {
        wait: reply_wait(key, timeout, protocol::time::now_ms()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_wait_is_keyed_by_the_issue_and_woken_by_comments_only() {
        let keys = vec!["other:1".to_string(), intake::key("PROJ-7")];
        let key = issue_work_key(&keys).expect("an issue key");
        let w = reply_wait(key, 60, 1_000);
        assert_eq!(w.keys, vec!["jira:PROJ-7".to_string()]);
        assert_eq!(w.types, vec!["jira.issue.comment_created".to_string()]);
        assert_eq!(w.due_at, protocol::time::format_rfc3339_ms(61_000));
        assert!(issue_work_key(&["slack:x".to_string()]).is_none());
    }

    #[test]
    fn timeout_s_is_bounded_and_the_error_names_the_bounds() {
        assert_eq!(timeout_s(&json!({})).ok(), Some(DEFAULT_TIMEOUT_S));
        assert_eq!(timeout_s(&json!({"timeout_s": 5})).ok(), Some(5));
        for bad in [
            json!({"timeout_s": 0}),
            json!({"timeout_s": MAX_TIMEOUT_S + 1}),
            json!({"timeout_s": "1"}),
        ] {
            let e = timeout_s(&bad).expect_err("refused");
            assert!(e.message.contains("604800"), "{}", e.message);
        }
    }
}
