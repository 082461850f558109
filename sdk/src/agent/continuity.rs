//! An agent executor's private per-Work record in its KV (claude-code's continuity,
//! codex's session): read, changed and committed under the version read, again on a
//! conflict, at most [`KV_RETRIES`] times. A record that does not read is taken as
//! the default (a fresh start), never an error.

use crate::Host;
use protocol::wire::{KvCommitParams, KvPut};
use protocol::{CallError, Code, RpcError};
use serde::de::DeserializeOwned;
use serde::Serialize;

/// How many times a change is tried against a record that keeps changing.
pub const KV_RETRIES: usize = 8;

/// Reads the record at `key` (the default when absent or unreadable).
pub async fn read<T: DeserializeOwned + Default>(host: &Host, key: &str) -> Result<T, RpcError> {
    let got = host
        .kv_get(key)
        .await
        .map_err(|e| unavailable("reading continuity", e))?;
    Ok(got
        .value
        .and_then(|v| serde_json::from_value(v).ok())
        .unwrap_or_default())
}

fn unavailable(what: &str, e: CallError) -> RpcError {
    match e {
        CallError::Rpc(e) => e,
        other => RpcError::new(Code::Unavailable, format!("{what}: {other}")),
    }
}

/// Applies `change` to the record at `key` and commits it when `change` says it
/// changed (its second value); answers `change`'s first value. `what` names the
/// change in errors.
pub async fn update<T, R>(
    host: &Host,
    key: &str,
    what: &str,
    mut change: impl FnMut(&mut T) -> (R, bool),
) -> Result<R, RpcError>
where
    T: DeserializeOwned + Serialize + Default,
{
    for _ in 0..KV_RETRIES {
        let got = host
            .kv_get(key)
            .await
            .map_err(|e| unavailable("reading continuity", e))?;
        let mut c: T = got
            .value
            .clone()
            .and_then(|v| serde_json::from_value(v).ok())
            .unwrap_or_default();
        let (out, changed) = change(&mut c);
        if !changed {
            return Ok(out);
        }
        let value = serde_json::to_value(&c)
            .map_err(|e| RpcError::new(Code::Internal, format!("{what}: {e}")))?;
        let batch = KvCommitParams {
            checks: vec![got.check("", key)],
            puts: vec![KvPut {
                namespace: String::new(),
                key: key.to_string(),
                value,
            }],
            ..KvCommitParams::default()
        };
        match host.kv_commit(&batch).await {
            Ok(_) => return Ok(out),
            Err(CallError::Rpc(e)) if e.is(Code::Conflict) => continue,
            Err(e) => return Err(unavailable(what, e)),
        }
    }
    Err(RpcError::new(
        Code::Conflict,
        format!("continuity kept changing while {what} ({KV_RETRIES} tries)"),
    ))
}
