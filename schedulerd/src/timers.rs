//! Timers: recurrences fire on time and re-arm.
//!
//! A due recurrence timer (armed by an extension with `timer.arm`, kind = the
//! recurrence's name) fires like this:
//!
//! 1. `recurrence.next` on its extension (in transaction: pure, bounded at 250 ms) with
//!    the time that fired gives the occurrence's payload and the next time. When that
//!    next time has already passed (schedulerd was down across due times), it is asked
//!    again from now: a missed recurrence fires once, not once per missed period.
//! 2. The occurrence is accepted as an event of the extension (type = its payload's
//!    schema base, source `<extension>/timers`, delivery ID `<timer key>@<due time>`):
//!    firing the same due time again after a crash adds nothing.
//! 3. `store.timer_fire` re-arms the timer at the next time, with the due time read
//!    as its precondition (a timer re-armed or cancelled meanwhile is left alone), or
//!    removes it when there is no next time.
//!
//! The router then routes the occurrence like any event.
//!
//! On several hosts every host's schedulerd looks at the same timers: the occurrence's
//! delivery ID makes a second acceptance add nothing, and `store.timer_fire`'s
//! precondition lets one re-arm win (the other's `conflict` is no failure), so a timer
//! fires once per due time across hosts.
//!
//! A Wait's timeout timer (owner `core`, kind `wait.timeout`, key the Wait's ID) wakes
//! the Wait with `store.wait_wake {reason: "timeout"}`, which removes the timer.

use std::time::Duration;

use daemon::bus::Bus;
use protocol::time::{now_ms, parse_rfc3339_ms};
use protocol::wire::RecurrenceNextResult;
use serde_json::{json, Value};

/// How long `recurrence.next` may take (the spec's in-transaction bound, with room for
/// the bus).
const NEXT_TIMEOUT: Duration = Duration::from_secs(2);

/// An RFC 3339 UTC time of `ms` since the epoch (see [`protocol::time`]).
pub use protocol::time::format_rfc3339_ms as rfc3339;

/// The schema's base: `schedule.run.v1` → `schedule.run`.
fn schema_base(schema: &str) -> &str {
    match schema.rsplit_once(".v") {
        Some((base, v)) if !v.is_empty() && v.bytes().all(|b| b.is_ascii_digit()) => base,
        _ => schema,
    }
}

async fn next(
    bus: &Bus,
    t: &Value,
    key: &str,
    after: &str,
) -> Result<RecurrenceNextResult, String> {
    let owner = t["owner"].as_str().unwrap_or_default();
    let answer = bus
        .call(
            "ext.call",
            &json!({"name": owner, "method": "recurrence.next", "in_transaction": true,
                    "timeout_ms": NEXT_TIMEOUT.as_millis() as u64,
                    "params": {"recurrence": t["kind"], "scope_id": t["scope_id"],
                               "key": key, "spec": t["spec"], "after": after}}),
        )
        .await
        .map_err(|e| format!("recurrence.next: {e}"))?;
    serde_json::from_value(answer).map_err(|e| format!("recurrence.next answered: {e}"))
}

fn is_conflict(e: &protocol::CallError) -> bool {
    e.code() == Some(protocol::Code::Conflict.as_str())
}

/// Fire one due timer. Answers the next due time it was re-armed at, if any.
pub async fn fire(bus: &Bus, t: &Value) -> Result<Option<i64>, String> {
    let owner = t["owner"].as_str().unwrap_or_default().to_owned();
    let full_key = t["key"].as_str().unwrap_or_default().to_owned();
    let key = full_key
        .strip_prefix(&format!("{owner}:"))
        .unwrap_or(&full_key)
        .to_owned();
    let due_ms = t["due_ms"].as_i64().unwrap_or(0);
    let due_at = t["due_at"].as_str().unwrap_or_default().to_owned();
    let first = next(bus, t, &key, &due_at).await?;
    if let Some(payload) = &first.payload {
        let event_type = schema_base(&payload.schema).to_owned();
        let own = event_type
            .strip_prefix(owner.as_str())
            .is_some_and(|r| r.starts_with('.'));
        if !own {
            return Err(format!(
                "the occurrence's schema {:?} is not {owner:?}'s",
                payload.schema
            ));
        }
        bus.call(
            "store.events_accept",
            &json!({"events": [{
                "scope_id": t["scope_id"],
                "type": event_type,
                "source": format!("{owner}/timers"),
                "delivery_id": format!("{key}@{due_at}"),
                "schema": payload.schema,
                "payload": payload.data,
                "occurred_at": due_at,
            }]}),
        )
        .await
        .map_err(|e| format!("store.events_accept: {e}"))?;
    }
    let now = now_ms();
    let mut rearm = if first.next.is_empty() {
        None
    } else {
        parse_rfc3339_ms(&first.next)
    };
    if rearm.is_some_and(|n| n <= now) {
        // Missed periods: the next one from now, once.
        let again = next(bus, t, &key, &rfc3339(now)).await?;
        rearm = if again.next.is_empty() {
            None
        } else {
            parse_rfc3339_ms(&again.next)
        };
    }
    let mut req = json!({"id": t["id"], "expect_due_ms": due_ms});
    if let Some(n) = rearm {
        req["rearm_due_ms"] = json!(n);
    }
    if let Err(e) = bus.call("store.timer_fire", &req).await {
        if is_conflict(&e) {
            // Another host's schedulerd fired it (its occurrence is the same event,
            // by its delivery ID), or it was re-armed or cancelled meanwhile.
            tracing::debug!(OC_EXTENSION = %owner, key = %full_key, due = %due_at, error = %e, "the timer was fired or re-armed elsewhere");
            return Ok(None);
        }
        return Err(format!("store.timer_fire: {e}"));
    }
    tracing::info!(OC_EXTENSION = %owner, key = %full_key, due = %due_at, next = ?rearm.map(rfc3339), "timer fired");
    Ok(rearm)
}

/// One pass: fire every due timer. Answers how many fired.
pub async fn pass(bus: &Bus) -> Result<usize, String> {
    let due = bus
        .call(
            "store.timers_due",
            &json!({"now_ms": now_ms(), "limit": 100}),
        )
        .await
        .map_err(|e| format!("store.timers_due: {e}"))?;
    let mut fired = 0;
    for t in due["timers"].as_array().into_iter().flatten() {
        if t["owner"] == "core" {
            // A Wait's timeout: wake it (storaged deletes the timer in the same write).
            if t["kind"] == "wait.timeout" {
                match bus
                    .call(
                        "store.wait_wake",
                        &json!({"wait_id": t["key"], "reason": "timeout"}),
                    )
                    .await
                {
                    Ok(_) => {
                        tracing::info!(wait = %t["key"], "a Wait timed out");
                        fired += 1;
                    }
                    Err(e) if is_conflict(&e) => {
                        tracing::debug!(wait = %t["key"], error = %e, "the Wait was woken elsewhere")
                    }
                    Err(e) => {
                        tracing::warn!(wait = %t["key"], error = %e, "a Wait's timeout could not wake it now")
                    }
                }
            }
            continue;
        }
        match fire(bus, t).await {
            Ok(_) => fired += 1,
            Err(e) => {
                tracing::warn!(key = %t["key"], error = %e, "a timer could not fire now; it is tried again")
            }
        }
    }
    Ok(fired)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schema_bases() {
        assert_eq!(schema_base("schedule.run.v1"), "schedule.run");
        assert_eq!(schema_base("x.video"), "x.video");
    }
}
