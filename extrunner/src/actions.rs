//! `action.submit` (permission `action.submit`): a package invokes one of the host's
//! actions for a person it identified on its own surface, and `state.works`, the
//! read a package finds that Work with.
//!
//! The host offers one provider, `core`, with two actions on a Work:
//!
//! - `stop`: the Work is cancelled (`sched.cancel`, which stops its running attempt
//!   first), for a Work that is open (pending, idle, running, waiting, woken);
//! - `retry`: the Work runs again (`sched.retry`): a failed or cancelled one is
//!   reopened, an idle or completed one gets a new turn on the action's Event.
//!
//! In order: the scope must be one whose configuration uses the package
//! (`unauthorized`), the Work must exist in that scope (`not_found` otherwise, as
//! for a Work out of reach), the provider and action must be ones the host offers
//! (`not_found`, naming what it offers), and the fields within their bounds
//! (`invalid`). Then the action is recorded as one Event `core.action.<action>`
//! from source `core/actions/<package>` whose delivery ID is the submit's `key`,
//! data `{action, caller: "<package>:<caller>", work_id, input}` and no keys,
//! accepted and attached to the Work in one write (`store.action_accept`), so no
//! route ever sees it and it creates no Work. A key submitted before answers that
//! Event with `added: false` and does nothing again. A Work whose state the action
//! is not for is `conflict` with why, and nothing is recorded; one that changes
//! between the record and the action answers the action's refusal (the Event stays
//! recorded, and the key is spent).

use busapi::sched::{CancelRequest, RetryRequest};
use busapi::store::{ActionAcceptRequest, EventInput, WorkGetRequest, WorksRequest};
use daemon::bus::Bus;
use protocol::wire::{
    self, ActionSubmitParams, ActionSubmitResult, StateWorksParams, StateWorksResult,
    ACTION_EVENT_FAMILY, ACTION_RETRY, ACTION_STOP, CORE_PROVIDER, MAX_ACTION_CALLER_BYTES,
    MAX_ACTION_INPUT_BYTES, MAX_ACTION_KEY_BYTES, MAX_ACTION_NAME_BYTES,
};
use protocol::{CallError, Code, RpcError};
use serde_json::json;

use crate::identity::Identity;

/// The payload schema of every action's Event.
pub const ACTION_SCHEMA: &str = "core.action.v1";

/// The Work states `stop` is for: the open ones.
const STOP_STATES: &[&str] = &["pending", "idle", "running", "waiting", "woken"];
/// The Work states `retry` is for.
const RETRY_STATES: &[&str] = &["failed", "cancelled", "idle", "completed"];

/// A submit that passed the checks that need no store.
#[derive(Debug, Clone, PartialEq)]
pub struct Checked {
    /// `stop` or `retry`.
    pub action: &'static str,
    /// `<package>:<caller>`.
    pub caller: String,
    /// The Event source: `core/actions/<package>`.
    pub source: String,
}

fn refuse(code: Code, message: impl Into<String>) -> RpcError {
    RpcError::new(code, message)
}

/// One line of text, non-empty, within `max` bytes, with no control characters.
fn one_line(field: &str, v: &str, max: usize) -> Result<(), RpcError> {
    if v.is_empty() {
        return Err(refuse(Code::Invalid, format!("{field} is required")));
    }
    if v.len() > max {
        return Err(refuse(
            Code::Invalid,
            format!("{field} is {} bytes, over the limit of {max}", v.len()),
        ));
    }
    if v.chars().any(char::is_control) {
        return Err(refuse(
            Code::Invalid,
            format!("{field} must be one line of text (no control characters)"),
        ));
    }
    Ok(())
}

/// The checks of a submit that need no store: the scope is the package's, the
/// provider and action are the host's, and every field is within its bound.
pub fn check(identity: &Identity, p: &ActionSubmitParams) -> Result<Checked, RpcError> {
    let name = identity.name.as_str();
    if p.scope_id.is_empty() || !identity.scopes.iter().any(|s| s == &p.scope_id) {
        return Err(refuse(
            Code::Unauthorized,
            format!(
                "scope {:?} is not one whose configuration uses {name:?}: nothing was done",
                p.scope_id
            ),
        ));
    }
    let provider = if p.provider.is_empty() {
        CORE_PROVIDER
    } else {
        p.provider.as_str()
    };
    if provider != CORE_PROVIDER {
        return Err(refuse(
            Code::NotFound,
            format!(
                "no action provider {provider:?}: this host offers {CORE_PROVIDER:?} \
                 ({ACTION_STOP}, {ACTION_RETRY})"
            ),
        ));
    }
    let action = match p.action.as_str() {
        ACTION_STOP => ACTION_STOP,
        ACTION_RETRY => ACTION_RETRY,
        other => {
            let shown: String = other.chars().take(MAX_ACTION_NAME_BYTES).collect();
            return Err(refuse(
                Code::NotFound,
                format!(
                    "{CORE_PROVIDER:?} offers no action {shown:?}: it offers {ACTION_STOP} and \
                     {ACTION_RETRY}"
                ),
            ));
        }
    };
    if p.work_id.is_empty() {
        return Err(refuse(
            Code::Invalid,
            format!("work_id is required: {CORE_PROVIDER}'s {action} acts on a Work"),
        ));
    }
    one_line("work_id", &p.work_id, MAX_ACTION_KEY_BYTES)?;
    one_line("caller", &p.caller, MAX_ACTION_CALLER_BYTES)?;
    one_line("key", &p.key, MAX_ACTION_KEY_BYTES)?;
    let input = serde_json::to_string(&p.input)
        .map_err(|e| refuse(Code::Invalid, format!("input is not JSON: {e}")))?;
    if input.len() > MAX_ACTION_INPUT_BYTES {
        return Err(refuse(
            Code::Invalid,
            format!(
                "input is {} bytes, over the limit of {MAX_ACTION_INPUT_BYTES}",
                input.len()
            ),
        ));
    }
    Ok(Checked {
        action,
        caller: format!("{name}:{}", p.caller),
        source: format!("core/actions/{name}"),
    })
}

/// A store or scheduler answer as the package sees it: authored errors pass on,
/// anything else is `unavailable`.
fn bus_error(what: &str, e: CallError) -> RpcError {
    match e {
        CallError::Rpc(e) => e,
        other => refuse(
            Code::Unavailable,
            format!("{what} is unavailable ({other})"),
        ),
    }
}

/// Serves `action.submit` (see the module doc).
pub async fn submit(
    identity: &Identity,
    bus: &Bus,
    p: ActionSubmitParams,
) -> Result<ActionSubmitResult, RpcError> {
    let checked = check(identity, &p)?;
    let not_found = || {
        refuse(
            Code::NotFound,
            format!("no Work {} in scope {}", p.work_id, p.scope_id),
        )
    };
    let work = match bus
        .call_typed(&WorkGetRequest {
            id: p.work_id.clone(),
        })
        .await
    {
        Ok(w) => w.work,
        Err(CallError::Rpc(e)) if e.is(Code::NotFound) => return Err(not_found()),
        Err(e) => return Err(bus_error("the store", e)),
    };
    if work.scope_id != p.scope_id {
        return Err(not_found());
    }
    let action = checked.action;
    let states = if action == ACTION_STOP {
        STOP_STATES
    } else {
        RETRY_STATES
    };
    let reason = format!("{action} by {}", checked.caller);
    let mut data = json!({"action": action, "caller": checked.caller, "work_id": p.work_id});
    if !p.input.is_null() {
        data["input"] = p.input.clone();
    }
    let accepted = bus
        .call_typed(&ActionAcceptRequest {
            work_id: p.work_id.clone(),
            states: states.iter().map(|s| (*s).to_owned()).collect(),
            reason: reason.clone(),
            event: EventInput {
                scope_id: p.scope_id.clone(),
                event_type: format!("{ACTION_EVENT_FAMILY}.{action}"),
                source: checked.source.clone(),
                delivery_id: Some(p.key.clone()),
                schema: Some(ACTION_SCHEMA.to_owned()),
                payload: data,
                keys: Vec::new(),
                ..EventInput::default()
            },
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
                p.key
            ),
        });
    }
    let work_id = p.work_id.as_str();
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
    tracing::info!(extension = %identity.name, OC_WORK_ID = %work_id, %action, caller = %checked.caller, event = %event, "action taken");
    Ok(ActionSubmitResult {
        event,
        added: true,
        message,
    })
}

/// Serves `state.works`: a page of the Works in the package's scopes (of any kind),
/// by ID, optionally of one scope, of some states and with one correlation key. A
/// scope that is not the package's reads as an empty page. The filters the store
/// does not apply (several states; every scope of the package) are applied to the
/// page it read, so a page may be short before the end: only an empty `next` ends
/// the listing.
pub async fn state_works(
    identity: &Identity,
    bus: &Bus,
    p: StateWorksParams,
) -> Result<StateWorksResult, RpcError> {
    wire::check_page_limit(p.limit).map_err(|e| refuse(Code::Invalid, e.to_string()))?;
    if !p.scope_id.is_empty() && !identity.scopes.iter().any(|s| s == &p.scope_id) {
        return Ok(StateWorksResult::default());
    }
    if identity.scopes.is_empty() {
        return Ok(StateWorksResult::default());
    }
    let scope = if p.scope_id.is_empty() && identity.scopes.len() == 1 {
        identity.scopes[0].as_str()
    } else {
        p.scope_id.as_str()
    };
    let some = |s: &str| (!s.is_empty()).then(|| s.to_owned());
    let request = WorksRequest {
        scope_id: some(scope),
        state: match p.states.as_slice() {
            [one] => Some(one.clone()),
            _ => None,
        },
        kind: some(&p.kind),
        key: some(&p.key),
        after: p.after.clone(),
        limit: p.limit,
    };
    let page = bus
        .call_typed(&request)
        .await
        .map_err(|e| bus_error("the store", e))?;
    let works = page
        .works
        .iter()
        .filter_map(|row| serde_json::to_value(row).ok())
        .map(|row| wire::Work::from_store_row(&row))
        .filter(|w| identity.scopes.iter().any(|s| s == &w.scope_id))
        .filter(|w| p.states.is_empty() || p.states.contains(&w.state))
        .collect();
    Ok(StateWorksResult {
        works,
        next: page.next,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn identity() -> Identity {
        let manifest = protocol::manifest::parse_manifest(
            br#"{"protocol": [1], "name": "github", "version": "1.0.0",
                 "command": ["x"], "permissions": ["action.submit"]}"#,
        )
        .unwrap();
        Identity::new(manifest, vec!["s1".into()], Vec::new())
    }

    fn submit(action: &str) -> ActionSubmitParams {
        ActionSubmitParams {
            scope_id: "s1".into(),
            work_id: "w-1".into(),
            provider: String::new(),
            action: action.into(),
            input: serde_json::Value::Null,
            caller: "octocat".into(),
            key: "comment/1".into(),
        }
    }

    fn code(r: Result<Checked, RpcError>) -> String {
        match r {
            Ok(c) => panic!("expected a refusal, got {c:?}"),
            Err(e) => format!("{}: {}", e.app_code().unwrap_or("?"), e.message),
        }
    }

    #[test]
    fn the_caller_is_the_packages_and_the_provider_defaults_to_core() {
        let c = check(&identity(), &submit("stop")).map_err(|e| e.message);
        assert_eq!(
            c,
            Ok(Checked {
                action: "stop",
                caller: "github:octocat".into(),
                source: "core/actions/github".into(),
            })
        );
        let mut p = submit("retry");
        p.provider = "core".into();
        assert_eq!(check(&identity(), &p).map(|c| c.action).ok(), Some("retry"));
    }

    #[test]
    fn a_submit_outside_its_scopes_or_of_an_unknown_action_is_refused() {
        let mut p = submit("stop");
        p.scope_id = "s2".into();
        let said = code(check(&identity(), &p));
        assert!(said.starts_with("unauthorized: scope \"s2\""), "{said}");
        let said = code(check(&identity(), &submit("merge")));
        assert!(
            said.starts_with("not_found: ") && said.contains("stop and retry"),
            "{said}"
        );
        let mut p = submit("stop");
        p.provider = "slack".into();
        let said = code(check(&identity(), &p));
        assert!(
            said.starts_with("not_found: no action provider \"slack\""),
            "{said}"
        );
    }

    #[test]
    fn every_field_is_bounded() {
        type Edit = fn(&mut ActionSubmitParams);
        let edits: [(&str, Edit); 7] = [
            ("work_id", |p| p.work_id.clear()),
            ("caller", |p| p.caller.clear()),
            ("caller", |p| p.caller = "a\nb".into()),
            ("caller", |p| {
                p.caller = "x".repeat(MAX_ACTION_CALLER_BYTES + 1)
            }),
            ("key", |p| p.key = "k".repeat(MAX_ACTION_KEY_BYTES + 1)),
            ("key", |p| p.key.clear()),
            ("input", |p| {
                p.input = json!("i".repeat(MAX_ACTION_INPUT_BYTES))
            }),
        ];
        for (field, edit) in edits {
            let mut p = submit("stop");
            edit(&mut p);
            let said = code(check(&identity(), &p));
            assert!(
                said.starts_with(&format!("invalid: {field}")),
                "{field}: {said}"
            );
        }
        let mut p = submit("stop");
        p.caller = "x".repeat(MAX_ACTION_CALLER_BYTES);
        p.key = "k".repeat(MAX_ACTION_KEY_BYTES);
        assert!(check(&identity(), &p).is_ok());
    }
}
