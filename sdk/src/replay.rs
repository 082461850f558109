//! Operations idempotent on the request ID: a package keeps the output of a changing
//! operation in its KV under a key made of the calling Work and the request ID, so a
//! retry (the toolbelt's, or the agent's) answers the first result instead of acting
//! twice. Used by every package whose operations change a service (github, slack,
//! linear, jira).
//!
//! The key is `op/<hex SHA-256 of scope \0 work \0 request_id \0>`: the request ID is
//! the calling Work's, as the toolbelt keeps it, so another Work's same ID is another
//! call. A kept result names its operation: the same request ID with another
//! operation is a conflict, not a replay.

use protocol::wire::{Authority, KvCheck, KvCommitParams, KvGetParams, KvPut};
use protocol::{Code, RpcError};
use serde_json::{json, Value};
use sha2::{Digest, Sha256};

/// The hex SHA-256 of `parts`, each followed by a NUL.
pub fn digest(parts: &[&str]) -> String {
    let mut h = Sha256::new();
    for p in parts {
        h.update(p.as_bytes());
        h.update([0]);
    }
    protocol::hex::encode(&h.finalize())
}

/// The KV key the result of a request ID is kept under, for one Work.
pub fn replay_key(authority: &Authority, request_id: &str) -> String {
    format!(
        "op/{}",
        digest(&[&authority.scope_id, &authority.work_id, request_id])
    )
}

fn replayed(stored: &Value, operation: &str) -> Result<Value, RpcError> {
    if stored["operation"].as_str() != Some(operation) {
        return Err(RpcError::new(
            Code::Conflict,
            format!(
                "this request_id was already used for {}",
                stored["operation"].as_str().unwrap_or("another operation")
            ),
        ));
    }
    Ok(stored["output"].clone())
}

/// The value kept under `key` in the package's own KV namespace, if any.
pub async fn kv_get(host: &crate::Host, key: &str) -> Result<Option<Value>, RpcError> {
    host.call_typed(&KvGetParams {
        namespace: String::new(),
        key: key.to_string(),
    })
    .await
    .map(|r| r.value)
    .map_err(|e| RpcError::new(Code::Unavailable, format!("kv.get: {e}")))
}

/// The result kept for `request_id` (of the Work in `authority`), when a call with it
/// already acted: its output, or a conflict when it was another operation's. None
/// when nothing is kept, or `request_id` is empty.
pub async fn kept_result(
    host: &crate::Host,
    authority: &Authority,
    request_id: &str,
    operation: &str,
) -> Result<Option<Value>, RpcError> {
    if request_id.is_empty() {
        return Ok(None);
    }
    match kv_get(host, &replay_key(authority, request_id)).await? {
        Some(stored) => {
            let output = replayed(&stored, operation)?;
            tracing::info!(operation, "replaying the kept result of a request_id");
            Ok(Some(output))
        }
        None => Ok(None),
    }
}

/// Keeps `output` as the result of `request_id` (unless it is empty), and answers the
/// output to give: `output`, or the result a concurrent call with the same request
/// ID kept first. A failure to keep is logged, not an error: the act is done.
pub async fn keep_result(
    host: &crate::Host,
    authority: &Authority,
    request_id: &str,
    operation: &str,
    output: Value,
) -> Result<Value, RpcError> {
    keep_result_with(host, authority, request_id, operation, output, Vec::new()).await
}

/// [`keep_result`], writing `also` (more of the package's KV, such as what it posted)
/// in the same commit; with an empty `request_id` only `also` is written.
pub async fn keep_result_with(
    host: &crate::Host,
    authority: &Authority,
    request_id: &str,
    operation: &str,
    output: Value,
    also: Vec<KvPut>,
) -> Result<Value, RpcError> {
    let mut puts = also;
    let mut checks = Vec::new();
    let key = replay_key(authority, request_id);
    let replay = !request_id.is_empty();
    if replay {
        checks.push(KvCheck::absent(key.clone()));
        puts.push(KvPut {
            namespace: String::new(),
            key: key.clone(),
            value: json!({"operation": operation, "output": output,
                          "at": protocol::time::format_rfc3339_ms(protocol::time::now_ms())}),
        });
    }
    if puts.is_empty() {
        return Ok(output);
    }
    let commit = host
        .call_typed(&KvCommitParams {
            checks,
            puts,
            ..Default::default()
        })
        .await;
    if let Err(e) = commit {
        if replay && e.is(Code::Conflict) {
            // Another call with the same request ID kept its result first.
            if let Some(stored) = kv_get(host, &key).await? {
                return replayed(&stored, operation);
            }
        }
        tracing::warn!(operation, error = %e, "keeping the result of a request_id failed");
    }
    Ok(output)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The key is the one github, slack and the trackers kept before they shared
    /// this module, so results kept by an older version still replay.
    #[test]
    fn the_key_is_scope_work_and_request_id_each_nul_terminated() {
        let a = Authority {
            scope_id: "s".into(),
            work_id: "w".into(),
            ..Default::default()
        };
        let mut h = Sha256::new();
        h.update(b"s\0w\0r\0");
        let want = format!("op/{}", protocol::hex::encode(&h.finalize()));
        assert_eq!(replay_key(&a, "r"), want);
        assert_ne!(replay_key(&a, "r"), replay_key(&a, "r2"));
    }

    #[test]
    fn a_kept_result_of_another_operation_is_a_conflict() {
        let stored = json!({"operation": "x.comment", "output": {"id": 1}});
        assert_eq!(replayed(&stored, "x.comment").ok(), Some(json!({"id": 1})));
        let e = replayed(&stored, "x.move").err();
        assert!(e.is_some_and(|e| e.is(Code::Conflict) && e.message.contains("x.comment")));
    }
}
