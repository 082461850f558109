//! The executor-wide usage-limit hold of an agent executor: after a turn hits a usage
//! limit, every turn is refused (a limited failure, no process) until the reset plus
//! a grace. Kept in memory and in the extension's KV under [`HOLD_KEY`], so another
//! process of the executor (after a restart) keeps it.

use crate::Host;
use protocol::wire::{KvCommitParams, KvPut};
use protocol::CallError;
use serde_json::{json, Value};
use std::sync::Mutex;

/// The KV key of the hold.
pub const HOLD_KEY: &str = "hold";
/// Added to a usage limit's reset before the retry.
pub const LIMIT_GRACE_MS: i64 = 2 * 60_000;
/// The retry delay of a usage limit whose reset is unknown.
pub const UNKNOWN_RESET_MS: i64 = 30 * 60_000;

/// The hold: until (ms) and the reset as the retry hint says it.
#[derive(Debug, Default)]
pub struct Hold {
    held: Mutex<Option<(i64, String)>>,
}

/// When a limit met at `now` with the reset `reset_ms` (when known) lifts: the reset
/// plus [`LIMIT_GRACE_MS`], else `now` plus [`UNKNOWN_RESET_MS`].
pub fn lifts_at(reset_ms: Option<i64>, now: i64) -> i64 {
    match reset_ms {
        Some(r) => r + LIMIT_GRACE_MS,
        None => now + UNKNOWN_RESET_MS,
    }
}

impl Hold {
    /// The hold in memory at `now`, its reset as text; a lapsed hold is dropped.
    pub fn in_memory(&self, now: i64) -> Option<String> {
        let mut h = self.held.lock().unwrap_or_else(|p| p.into_inner());
        match h.clone() {
            Some((until, reset_at)) if until > now => Some(reset_at),
            Some(_) => {
                *h = None;
                None
            }
            None => None,
        }
    }

    /// Holds until `until` (kept if a later hold is already there).
    pub fn set(&self, until: i64, reset_at: &str) {
        let mut h = self.held.lock().unwrap_or_else(|p| p.into_inner());
        if h.as_ref().is_none_or(|(u, _)| *u < until) {
            *h = Some((until, reset_at.to_string()));
        }
    }

    /// The hold at `now`, in memory or in the KV (another process of this executor
    /// may have recorded it).
    pub async fn current(&self, host: &Host, now: i64) -> Option<String> {
        if let Some(r) = self.in_memory(now) {
            return Some(r);
        }
        let got = host.kv_get(HOLD_KEY).await.ok()?;
        let v = got.value?;
        let until = v.get("until_ms").and_then(Value::as_i64)?;
        let reset_at = v.get("reset_at").and_then(Value::as_str)?.to_string();
        if until > now {
            self.set(until, &reset_at);
            return Some(reset_at);
        }
        None
    }

    /// Holds until `until` in memory and records it in the KV; answers the reset as
    /// RFC 3339 (the retry hint's).
    pub async fn record(&self, host: &Host, until: i64) -> Result<String, (String, CallError)> {
        let reset_at = protocol::time::format_rfc3339_ms(until);
        self.set(until, &reset_at);
        let hold = KvCommitParams {
            puts: vec![KvPut {
                namespace: String::new(),
                key: HOLD_KEY.to_string(),
                value: json!({"until_ms": until, "reset_at": reset_at}),
            }],
            ..KvCommitParams::default()
        };
        match host.kv_commit(&hold).await {
            Ok(_) => Ok(reset_at),
            Err(e) => Err((reset_at, e)),
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn a_hold_lapses_and_keeps_the_later_reset() {
        let h = Hold::default();
        h.set(100, "a");
        h.set(50, "b");
        assert_eq!(h.in_memory(10).as_deref(), Some("a"));
        assert_eq!(h.in_memory(100), None);
        assert_eq!(lifts_at(Some(1000), 0), 1000 + LIMIT_GRACE_MS);
        assert_eq!(lifts_at(None, 7), 7 + UNKNOWN_RESET_MS);
    }
}
