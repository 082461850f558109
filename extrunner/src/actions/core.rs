//! The host's own provider, `core`, with three actions on a Work:
//!
//! - `stop`: the Work is cancelled (`sched.cancel`, which stops its running attempt
//!   first), for a Work that is open (pending, idle, running, waiting, woken);
//! - `interrupt`: the running attempt's turn is ended (`sched.interrupt`, the
//!   executor's `executor.interrupt`), for a running Work, which stays open;
//! - `retry`: the Work runs again (`sched.retry`): a failed or cancelled one is
//!   reopened, an idle or completed one gets a new turn on the action's Event.
//!
//! The action's Event names no keys and is accepted and attached to the Work in one
//! write (`store.action_accept`), so no route ever sees it and it creates no Work.
//! A Work whose state the action is not for is `conflict` with why, and nothing is
//! recorded; one that changes between the record and the action answers the
//! action's refusal (the Event stays recorded, and the key is spent).

use busapi::sched::{CancelRequest, InterruptRequest, RetryRequest};
use busapi::store::{ActionAcceptRequest, EventInput, WorkRow};
use daemon::bus::Bus;
use protocol::wire::{
    ActionOffer, ActionSubmitResult, ACTION_EVENT_FAMILY, ACTION_INTERRUPT, ACTION_RETRY,
    ACTION_STOP, CORE_PROVIDER,
};
use protocol::{CallError, Code, RpcError};
use serde_json::json;

use super::{bus_error, refuse, Act, ACTION_SCHEMA};

/// The Work states `stop` is for: the open ones.
pub const STOP_STATES: &[&str] = &["pending", "idle", "running", "waiting", "woken"];
/// The Work states `interrupt` is for.
pub const INTERRUPT_STATES: &[&str] = &["running"];
/// The Work states `retry` is for.
pub const RETRY_STATES: &[&str] = &["failed", "cancelled", "idle", "completed"];

/// What `core` offers on a Work in its state now.
pub fn offers(work: &WorkRow) -> Vec<ActionOffer> {
    let mut out = Vec::new();
    if STOP_STATES.contains(&work.state.as_str()) {
        out.push(ActionOffer {
            id: ACTION_STOP.to_owned(),
            label: "Stop".to_owned(),
            detail: format!("cancel Work {}, stopping its running attempt", work.id),
            ..ActionOffer::default()
        });
    }
    if INTERRUPT_STATES.contains(&work.state.as_str()) {
        out.push(ActionOffer {
            id: ACTION_INTERRUPT.to_owned(),
            label: "Interrupt".to_owned(),
            detail: format!(
                "end the running turn of Work {}; it stays open for its next input",
                work.id
            ),
            ..ActionOffer::default()
        });
    }
    if RETRY_STATES.contains(&work.state.as_str()) {
        out.push(ActionOffer {
            id: ACTION_RETRY.to_owned(),
            label: "Retry".to_owned(),
            detail: format!("run Work {} again", work.id),
            ..ActionOffer::default()
        });
    }
    out
}

/// Take `core`'s action `a.action` on `work`.
pub async fn act(bus: &Bus, work: &WorkRow, a: &Act) -> Result<ActionSubmitResult, RpcError> {
    let action = match a.action.as_str() {
        ACTION_STOP => ACTION_STOP,
        ACTION_INTERRUPT => ACTION_INTERRUPT,
        ACTION_RETRY => ACTION_RETRY,
        other => {
            return Err(refuse(
                Code::NotFound,
                format!(
                    "{CORE_PROVIDER:?} offers no action {other:?}: it offers {ACTION_STOP}, \
                     {ACTION_INTERRUPT} and {ACTION_RETRY}"
                ),
            ));
        }
    };
    let states = match action {
        ACTION_STOP => STOP_STATES,
        ACTION_INTERRUPT => INTERRUPT_STATES,
        _ => RETRY_STATES,
    };
    let reason = format!("{action} by {}", a.caller);
    let mut data = json!({"action": action, "provider": CORE_PROVIDER, "caller": a.caller,
                          "work_id": a.work_id});
    if !a.input.is_null() {
        data["input"] = a.input.clone();
    }
    let accepted = bus
        .call_typed(&ActionAcceptRequest {
            work_id: a.work_id.clone(),
            states: states.iter().map(|s| (*s).to_owned()).collect(),
            reason: reason.clone(),
            event: EventInput {
                scope_id: work.scope_id.clone(),
                event_type: format!("{ACTION_EVENT_FAMILY}.{action}"),
                source: a.source.clone(),
                delivery_id: Some(a.key.clone()),
                schema: Some(ACTION_SCHEMA.to_owned()),
                payload: data,
                keys: Vec::new(),
                ..EventInput::default()
            },
            ..ActionAcceptRequest::default()
        })
        .await
        .map_err(|e| match e {
            CallError::Rpc(e) if e.is(Code::Conflict) => refuse(
                Code::Conflict,
                format!(
                    "{}: {action} is for a Work that is {}",
                    e.message,
                    states.join(", ")
                ),
            ),
            e => bus_error("the store", e),
        })?;
    let event = accepted.id;
    if !accepted.added {
        return Ok(ActionSubmitResult {
            event,
            added: false,
            message: format!(
                "{action} was submitted with key {:?} before: nothing was done again",
                a.key
            ),
        });
    }
    let work_id = a.work_id.as_str();
    let message = if action == ACTION_STOP {
        let r = bus
            .call_typed(&CancelRequest {
                work_id: work_id.to_owned(),
                reason,
            })
            .await
            .map_err(|e| bus_error("the scheduler", e))?;
        match r.attempt {
            Some(attempt) if !attempt.stopped => format!(
                "stopped Work {work_id} (its run may still be running on host {})",
                attempt.host
            ),
            _ => format!("stopped Work {work_id}"),
        }
    } else if action == ACTION_INTERRUPT {
        bus.call_typed(&InterruptRequest {
            work_id: work_id.to_owned(),
            reason,
        })
        .await
        .map_err(|e| bus_error("the scheduler", e))?;
        format!("interrupted the running turn of Work {work_id}")
    } else {
        bus.call_typed(&RetryRequest {
            work_id: work_id.to_owned(),
            reason,
            seq: Some(accepted.seq),
        })
        .await
        .map_err(|e| bus_error("the scheduler", e))?;
        format!("Work {work_id} will run again")
    };
    Ok(ActionSubmitResult {
        event,
        added: true,
        message,
    })
}
