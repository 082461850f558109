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

use busapi::ext::ExtCall;
use busapi::store::{
    EventInput, EventsAcceptRequest, TimerFireRequest, TimerRow, TimersDueRequest, WaitWakeRequest,
    WakeReason,
};
use busapi::Call;
use protocol::time::{now_ms, parse_rfc3339_ms};
use protocol::wire::{RecurrenceNextParams, RecurrenceNextResult};

use crate::ports::{ms, Extensions, Store};

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
    extensions: &Extensions,
    t: &TimerRow,
    key: &str,
    after: &str,
) -> Result<RecurrenceNextResult, String> {
    let params = RecurrenceNextParams {
        recurrence: t.kind.clone(),
        scope_id: t.scope_id.clone(),
        key: key.to_owned(),
        spec: t.spec.clone(),
        after: after.to_owned(),
    };
    let mut call = ExtCall::new(t.owner.clone(), params).timeout_ms(ms(NEXT_TIMEOUT));
    call.in_transaction = true;
    let answer = extensions
        .answer(&call)
        .await
        .map_err(|e| format!("{}: {e}", RecurrenceNextParams::METHOD))?;
    serde_json::from_str(answer.get())
        .map_err(|e| format!("{} answered: {e}", RecurrenceNextParams::METHOD))
}

fn is_conflict(e: &protocol::CallError) -> bool {
    e.code() == Some(protocol::Code::Conflict.as_str())
}

/// Fire one due timer. Answers the next due time it was re-armed at, if any.
pub async fn fire(
    store: &Store,
    extensions: &Extensions,
    t: &TimerRow,
) -> Result<Option<i64>, String> {
    let owner = t.owner.clone();
    let full_key = t.key.clone();
    let key = full_key
        .strip_prefix(&format!("{owner}:"))
        .unwrap_or(&full_key)
        .to_owned();
    let due_ms = t.due_ms;
    let due_at = t.due_at.clone();
    let first = next(extensions, t, &key, &due_at).await?;
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
        let occurrence = EventInput {
            scope_id: t.scope_id.clone(),
            event_type,
            source: format!("{owner}/timers"),
            delivery_id: Some(format!("{key}@{due_at}")),
            schema: Some(payload.schema.clone()),
            payload: payload.data.clone(),
            occurred_at: Some(due_at.clone()),
            ..EventInput::default()
        };
        store
            .call(&EventsAcceptRequest {
                events: vec![occurrence],
                owner: None,
                families: None,
                scopes: None,
            })
            .await
            .map_err(|e| format!("{}: {e}", EventsAcceptRequest::METHOD))?;
    }
    let now = now_ms();
    let mut rearm = if first.next.is_empty() {
        None
    } else {
        parse_rfc3339_ms(&first.next)
    };
    if rearm.is_some_and(|n| n <= now) {
        // Missed periods: the next one from now, once.
        let again = next(extensions, t, &key, &rfc3339(now)).await?;
        rearm = if again.next.is_empty() {
            None
        } else {
            parse_rfc3339_ms(&again.next)
        };
    }
    let fire = TimerFireRequest {
        id: t.id.clone(),
        expect_due_ms: due_ms,
        rearm_due_ms: rearm,
        payload: None,
    };
    if let Err(e) = store.call(&fire).await {
        if is_conflict(&e) {
            // Another host's schedulerd fired it (its occurrence is the same event,
            // by its delivery ID), or it was re-armed or cancelled meanwhile.
            tracing::debug!(OC_EXTENSION = %owner, key = %full_key, due = %due_at, error = %e, "the timer was fired or re-armed elsewhere");
            return Ok(None);
        }
        return Err(format!("{}: {e}", TimerFireRequest::METHOD));
    }
    tracing::info!(OC_EXTENSION = %owner, key = %full_key, due = %due_at, next = ?rearm.map(rfc3339), "timer fired");
    Ok(rearm)
}

/// One pass: fire every due timer. Answers how many fired.
pub async fn pass(store: &Store, extensions: &Extensions) -> Result<usize, String> {
    let due = store
        .call(&TimersDueRequest {
            now_ms: now_ms(),
            limit: 100,
        })
        .await
        .map_err(|e| format!("{}: {e}", TimersDueRequest::METHOD))?;
    let mut fired = 0;
    for t in &due.timers {
        if t.owner == "core" {
            // A Wait's timeout: wake it (storaged deletes the timer in the same write).
            if t.kind == "wait.timeout" {
                let wake = WaitWakeRequest {
                    wait_id: t.key.clone(),
                    seq: None,
                    reason: WakeReason::Timeout,
                };
                match store.call(&wake).await {
                    Ok(_) => {
                        tracing::info!(wait = %t.key, "a Wait timed out");
                        fired += 1;
                    }
                    Err(e) if is_conflict(&e) => {
                        tracing::debug!(wait = %t.key, error = %e, "the Wait was woken elsewhere")
                    }
                    Err(e) => {
                        tracing::warn!(wait = %t.key, error = %e, "a Wait's timeout could not wake it now")
                    }
                }
            }
            continue;
        }
        match fire(store, extensions, t).await {
            Ok(_) => fired += 1,
            Err(e) => {
                tracing::warn!(key = %t.key, error = %e, "a timer could not fire now; it is tried again")
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
