//! Actions a package provides (manifest `provides.actions`): it answers
//! `work.actions` with what it offers on a Work of a scope it is configured for, and
//! `work.act` with a plan: it authorises the person and decides, and writes nothing.
//! The host records the decision as the action's one Event (see the parent module):
//!
//! - a plan with `keys` is accepted with those keys and left to the router, so the
//!   Wait that waits on them (an ask's, a gate's) wakes by it, in the store's own
//!   write; every key must be under the provider's name (`human/…`), so a provider
//!   wakes only its own Waits;
//! - a plan without keys is attached to the Work (`store.action_accept`), with the
//!   provider's hold on the Work settled in the same write when the plan says so
//!   (an admission).
//!
//! A key submitted before answers its Event (`added: false`) without asking the
//! provider again, so a retried answer is never refused as "already answered".

use std::time::Duration;

use busapi::store::{
    ActionAcceptRequest, EventGetRequest, EventInput, EventsAcceptRequest, HoldSettle, WorkRow,
};
use daemon::bus::Bus;
use protocol::wire::Call;
use protocol::wire::{
    self, ActionOffer, ActionSubmitResult, ListedAction, WorkActParams, WorkActResult,
    WorkActionsParams, WorkActionsResult, ACTION_EVENT_FAMILY, MAX_ACTIONS_OFFERED,
    MAX_ACTION_CHOICES, MAX_ACTION_INPUT_BYTES, MAX_ACTION_TEXT_BYTES,
};
use protocol::{CallError, Code, RpcError};
use serde::de::DeserializeOwned;
use serde_json::json;

use super::{bus_error, refuse, Act, ACTION_SCHEMA};
use crate::render::Packages;

/// How long a provider has to answer `work.actions` or `work.act`.
pub const PROVIDER_TIMEOUT: Duration = Duration::from_secs(10);
/// The most keys a plan names.
pub const MAX_PLAN_KEYS: usize = 16;
/// The longest key a plan names, in bytes.
pub const MAX_PLAN_KEY_BYTES: usize = 200;

/// The packages that provide actions on `scope` (running or not), by name.
pub fn providers<'a>(packages: &'a dyn Packages, scope: &str) -> Vec<&'a str> {
    let mut out: Vec<&str> = packages
        .names()
        .into_iter()
        .filter(|n| packages.manifest(n).is_some_and(|m| m.provides.actions))
        .filter(|n| packages.scopes_of(n).iter().any(|s| s == scope))
        .collect();
    out.sort_unstable();
    out
}

/// A typed call to a package, with its failure as an action's caller sees it: the
/// provider's own refusal passes on; anything else is `unavailable`.
async fn call<C: Call>(
    packages: &dyn Packages,
    name: &str,
    params: &C,
) -> Result<C::Result, RpcError>
where
    C::Result: DeserializeOwned,
{
    let raw = serde_json::value::to_raw_value(params).map_err(RpcError::unauthored)?;
    let reply = packages
        .call(name, C::METHOD, raw, PROVIDER_TIMEOUT)
        .await
        .map_err(|e| {
            if e.app_code().is_some() {
                e
            } else {
                refuse(
                    Code::Unavailable,
                    format!(
                        "the action provider {name:?} did not answer {}: {}",
                        C::METHOD,
                        e.message
                    ),
                )
            }
        })?;
    serde_json::from_str(reply.get()).map_err(|e| {
        refuse(
            Code::Unavailable,
            format!(
                "the action provider {name:?} answered {} with something else: {e}",
                C::METHOD
            ),
        )
    })
}

/// What every provider package on the Work's scope offers on it. A provider that
/// fails is left out and logged; an offer past the bounds is cut.
pub async fn offers(packages: &dyn Packages, work: &WorkRow) -> Vec<ListedAction> {
    let mut out = Vec::new();
    for name in providers(packages, &work.scope_id) {
        let params = WorkActionsParams {
            scope_id: work.scope_id.clone(),
            work_id: work.id.clone(),
        };
        match call(packages, name, &params).await {
            Ok(WorkActionsResult { actions }) => {
                if actions.len() > MAX_ACTIONS_OFFERED {
                    tracing::warn!(OC_EXTENSION = %name, offered = actions.len(), "work.actions offered more than {MAX_ACTIONS_OFFERED} actions; the rest are left out");
                }
                out.extend(
                    actions
                        .into_iter()
                        .take(MAX_ACTIONS_OFFERED)
                        .filter_map(|a| bounded_offer(name, a))
                        .map(|offer| ListedAction {
                            provider: name.to_owned(),
                            offer,
                        }),
                );
            }
            Err(e) => {
                tracing::warn!(OC_EXTENSION = %name, OC_WORK_ID = %work.id, error = %e, "work.actions failed; its actions are not listed")
            }
        }
    }
    out
}

/// An offer within the bounds, or none (logged).
fn bounded_offer(provider: &str, mut a: ActionOffer) -> Option<ActionOffer> {
    let fits = |s: &str| s.len() <= MAX_ACTION_TEXT_BYTES && !s.chars().any(char::is_control);
    if a.id.is_empty() || a.id.len() > wire::MAX_ACTION_NAME_BYTES || !fits(&a.label) {
        tracing::warn!(OC_EXTENSION = %provider, action = %a.id, "an offered action's id or label breaks its bounds; left out");
        return None;
    }
    a.prompt = wire::clip_line(&a.prompt, MAX_ACTION_TEXT_BYTES);
    a.detail = wire::clip_line(&a.detail, MAX_ACTION_TEXT_BYTES);
    a.choices.truncate(MAX_ACTION_CHOICES);
    a.choices
        .iter_mut()
        .for_each(|c| *c = wire::clip_line(c, MAX_ACTION_TEXT_BYTES));
    if serde_json::to_string(&a.input).map_or(true, |t| t.len() > MAX_ACTION_INPUT_BYTES) {
        tracing::warn!(OC_EXTENSION = %provider, action = %a.id, "an offered action's input is over {MAX_ACTION_INPUT_BYTES} bytes; left out");
        return None;
    }
    Some(a)
}

/// The plan's bounds: keys under the provider's name, the decision within the
/// input's bound.
fn check_plan(provider: &str, plan: &WorkActResult) -> Result<(), RpcError> {
    let bad = |why: String| {
        refuse(
            Code::Unavailable,
            format!("the action provider {provider:?} planned {why}: nothing was recorded"),
        )
    };
    if plan.keys.len() > MAX_PLAN_KEYS {
        return Err(bad(format!(
            "{} keys, over the limit of {MAX_PLAN_KEYS}",
            plan.keys.len()
        )));
    }
    let prefix = format!("{provider}/");
    for k in &plan.keys {
        if !k.starts_with(&prefix)
            || k.len() > MAX_PLAN_KEY_BYTES
            || k.chars().any(char::is_control)
        {
            return Err(bad(format!(
                "the key {k:?}: a provider's keys are one line under {prefix:?}, at most {MAX_PLAN_KEY_BYTES} bytes"
            )));
        }
    }
    let decision = serde_json::to_string(&plan.decision).unwrap_or_default();
    if decision.len() > MAX_ACTION_INPUT_BYTES {
        return Err(bad(format!(
            "a decision of {} bytes, over the limit of {MAX_ACTION_INPUT_BYTES}",
            decision.len()
        )));
    }
    if !plan.keys.is_empty() && plan.settle_hold.is_some() {
        return Err(bad(
            "both keys and a hold's settlement (an action either wakes a Wait or settles a hold)"
                .to_owned(),
        ));
    }
    Ok(())
}

/// Take the action `a` on `work` through its provider package.
pub async fn act(
    bus: &Bus,
    packages: Option<&dyn Packages>,
    work: &WorkRow,
    a: &Act,
) -> Result<ActionSubmitResult, RpcError> {
    let Some(packages) = packages else {
        return Err(refuse(
            Code::Unavailable,
            "the action providers are not reachable from here",
        ));
    };
    let offered = providers(packages, &work.scope_id);
    if !offered.contains(&a.provider.as_str()) {
        let mut names = vec![wire::CORE_PROVIDER];
        names.extend(offered.iter().copied());
        return Err(refuse(
            Code::NotFound,
            format!(
                "no action provider {:?} on scope {}: the providers there are {}",
                a.provider,
                work.scope_id,
                names.join(", ")
            ),
        ));
    }
    // A key submitted before: its Event, and nothing asked or done again.
    let id = wire::emitted_event_id(&a.source, &a.key);
    match bus
        .call_typed(&EventGetRequest {
            id: id.clone(),
            scopes: None,
        })
        .await
    {
        Ok(_) => {
            return Ok(ActionSubmitResult {
                event: id,
                added: false,
                message: format!(
                    "{} was submitted with key {:?} before: nothing was done again",
                    a.action, a.key
                ),
            })
        }
        Err(CallError::Rpc(e)) if e.is(Code::NotFound) => {}
        Err(e) => return Err(bus_error("the store", e)),
    }
    let plan = call(
        packages,
        &a.provider,
        &WorkActParams {
            scope_id: work.scope_id.clone(),
            work_id: work.id.clone(),
            action: a.action.clone(),
            input: a.input.clone(),
            caller: a.caller.clone(),
            key: a.key.clone(),
        },
    )
    .await?;
    check_plan(&a.provider, &plan)?;
    let mut data = json!({"action": a.action, "provider": a.provider, "caller": a.caller,
                          "work_id": a.work_id});
    if !a.input.is_null() {
        data["input"] = a.input.clone();
    }
    if !plan.decision.is_null() {
        data["decision"] = plan.decision.clone();
    }
    let event = EventInput {
        scope_id: work.scope_id.clone(),
        event_type: format!("{ACTION_EVENT_FAMILY}.{}", a.action),
        source: a.source.clone(),
        delivery_id: Some(a.key.clone()),
        schema: Some(ACTION_SCHEMA.to_owned()),
        payload: data,
        keys: plan.keys.clone(),
        ..EventInput::default()
    };
    let (event, added) = if plan.keys.is_empty() {
        let r = bus
            .call_typed(&ActionAcceptRequest {
                event,
                work_id: work.id.clone(),
                states: Vec::new(),
                reason: format!("{} by {}", a.action, a.caller),
                settle_hold: plan.settle_hold.as_ref().map(|h| HoldSettle {
                    owner: a.provider.clone(),
                    admit: h.admit,
                    reason: h.reason.clone(),
                }),
            })
            .await
            .map_err(|e| bus_error("the store", e))?;
        (r.id, r.added)
    } else {
        let r = bus
            .call_typed(&EventsAcceptRequest {
                events: vec![event],
                owner: None,
                families: None,
                scopes: None,
            })
            .await
            .map_err(|e| bus_error("the store", e))?;
        let one = r.events.into_iter().next().ok_or_else(|| {
            refuse(
                Code::Unavailable,
                "the store accepted no Event for the action",
            )
        })?;
        (one.id, one.added)
    };
    let message = if plan.message.is_empty() {
        format!("{} recorded on Work {}", a.action, work.id)
    } else {
        wire::clip_line(&plan.message, MAX_ACTION_TEXT_BYTES)
    };
    Ok(ActionSubmitResult {
        event,
        added,
        message,
    })
}
