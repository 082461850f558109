//! `operation.gate`: a call of a gated operation parks on a Wait until a person
//! approves or rejects it, and is made once approved.
//!
//! The decision's source of truth is the recorded Events: the Work's
//! `core.action.approve` and `core.action.reject` Events of this provider whose
//! `data.decision.gate_id` is the call's gate ID (the first one recorded wins). A
//! Wait of the gate that timed out with no decision refuses the call.

use crate::config::{Gate, HumanConfig};
use crate::{
    for_agent, gate_key, plan_str, summarize, ACTION_APPROVE, ACTION_REJECT, NAME, WAIT_ACTIVE,
    WAIT_TIMED_OUT,
};
use protocol::wire::{
    clip_line, Event, OperationGateParams, OperationGateResult, Wait, WaitRequest,
    ACTION_EVENT_FAMILY, MAX_WAIT_DESCRIPTION_BYTES,
};
use protocol::{Code, RpcError};
use serde_json::{json, Value};

/// Where a gated call stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// A person approved it.
    Approved {
        /// Who.
        by: String,
    },
    /// A person rejected it.
    Rejected {
        /// Who.
        by: String,
        /// Why (may be empty).
        reason: String,
    },
    /// Its Wait timed out with no decision.
    TimedOut {
        /// The gate's timeout, in seconds.
        timeout_s: u64,
    },
    /// Nobody decided yet.
    Open,
}

/// The recorded decision on gate `gate_id` among `events` (the first by sequence),
/// else what its Waits say: one timed out and none active is [`Verdict::TimedOut`].
pub fn verdict(gate_id: &str, events: &[Event], waits: &[Wait]) -> Verdict {
    let approve = format!("{ACTION_EVENT_FAMILY}.{ACTION_APPROVE}");
    let reject = format!("{ACTION_EVENT_FAMILY}.{ACTION_REJECT}");
    let decided = events
        .iter()
        .filter(|e| e.event_type == approve || e.event_type == reject)
        .filter(|e| {
            let data = &e.payload.data;
            data["provider"].as_str() == Some(NAME)
                && data["decision"]["gate_id"].as_str() == Some(gate_id)
        })
        .min_by_key(|e| e.sequence);
    if let Some(e) = decided {
        let data = &e.payload.data;
        let by = data["caller"].as_str().unwrap_or("someone").to_string();
        return if e.event_type == approve && data["decision"]["approved"] != json!(false) {
            Verdict::Approved { by }
        } else {
            Verdict::Rejected {
                by,
                reason: data["decision"]["reason"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string(),
            }
        };
    }
    let mine: Vec<&Wait> = waits
        .iter()
        .filter(|w| w.owner == NAME && plan_str(&w.plan, "gate_id") == Some(gate_id))
        .collect();
    if mine.iter().any(|w| w.state == WAIT_ACTIVE) {
        return Verdict::Open;
    }
    match mine.iter().find(|w| w.state == WAIT_TIMED_OUT) {
        Some(w) => Verdict::TimedOut {
            timeout_s: w.plan["timeout_s"].as_u64().unwrap_or(0),
        },
        None => Verdict::Open,
    }
}

/// Whether a Wait of gate `gate_id` is among `waits` (without one, nobody could
/// have decided it: `work.act` decides only an open gate).
pub fn has_wait(gate_id: &str, waits: &[Wait]) -> bool {
    waits
        .iter()
        .any(|w| w.owner == NAME && plan_str(&w.plan, "gate_id") == Some(gate_id))
}

/// A refusal of the gated call, the agent reading `message`.
fn refusal(message: String) -> RpcError {
    for_agent(RpcError::new(Code::Unauthorized, message))
}

/// The Wait a gated call parks on: keys `human/gate/<id>`, woken by an approval or a
/// rejection, described as `approval of <op> by <who>`, timing out after the gate's
/// timeout, with the plan `{kind: "gate", gate_id, operation, owner, input,
/// approvers, timeout_s}` (`input` a one-line summary of the call's input).
pub fn wait(
    config: &HumanConfig,
    gate: &Gate,
    p: &OperationGateParams,
    gate_id: &str,
    now_ms: i64,
) -> WaitRequest {
    let due = (now_ms / 1000).saturating_add(i64::try_from(gate.timeout_s).unwrap_or(i64::MAX));
    WaitRequest {
        keys: vec![gate_key(gate_id)],
        types: vec![
            format!("{ACTION_EVENT_FAMILY}.{ACTION_APPROVE}"),
            format!("{ACTION_EVENT_FAMILY}.{ACTION_REJECT}"),
        ],
        due_at: protocol::time::format_rfc3339_secs(due),
        description: clip_line(
            &format!("approval of {} by {}", p.operation, config.who()),
            MAX_WAIT_DESCRIPTION_BYTES,
        ),
        plan: json!({
            "kind": "gate",
            "gate_id": gate_id,
            "operation": p.operation,
            "owner": p.owner,
            "input": summarize(&p.input),
            "approvers": config.approvers,
            "timeout_s": gate.timeout_s,
        }),
    }
}

/// The gate's answer on call `p` of gated operation `gate`, given the Work's
/// recorded `events` and its `waits`: approved lets it through, rejected or timed
/// out refuses it (the agent reads why), else it parks on [`wait`].
pub fn decide(
    config: &HumanConfig,
    gate: &Gate,
    p: &OperationGateParams,
    gate_id: &str,
    events: &[Event],
    waits: &[Wait],
    now_ms: i64,
) -> Result<OperationGateResult, RpcError> {
    match verdict(gate_id, events, waits) {
        Verdict::Approved { .. } => Ok(OperationGateResult::default()),
        Verdict::Rejected { by, reason } if reason.is_empty() => {
            Err(refusal(format!("rejected by {by}")))
        }
        Verdict::Rejected { by, reason } => Err(refusal(format!("rejected by {by}: {reason}"))),
        Verdict::TimedOut { timeout_s } => {
            let timeout_s = if timeout_s == 0 {
                gate.timeout_s
            } else {
                timeout_s
            };
            Err(refusal(format!(
                "no approval within {timeout_s}s: the call was not made"
            )))
        }
        Verdict::Open => Ok(OperationGateResult {
            wait: Some(wait(config, gate, p, gate_id, now_ms)),
        }),
    }
}

/// The `detail` of a gate's actions: `<op> <input summary>`, from its Wait's plan.
pub fn detail(plan: &Value) -> String {
    let op = plan_str(plan, "operation").unwrap_or("an operation");
    match plan_str(plan, "input") {
        Some(s) if !s.is_empty() => format!("{op} {s}"),
        _ => op.to_string(),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::gate_id;
    use protocol::wire::{Authority, Payload};

    fn config() -> HumanConfig {
        crate::config::parse_config(&json!({
            "approvers": ["cli:alice"],
            "gates": [{"operation": "github.open_pull_request", "timeout_s": 600}]
        }))
        .unwrap()
    }

    fn call() -> OperationGateParams {
        OperationGateParams {
            operation: "github.open_pull_request".into(),
            owner: "github".into(),
            request_id: "r-1".into(),
            authority: Authority {
                scope_id: "acme".into(),
                work_id: "w-1".into(),
                ..Authority::default()
            },
            input: json!({"title": "Fix the parser", "head": "fix", "base": "main", "draft": false}),
        }
    }

    fn decision(seq: u64, action: &str, gate: &str, caller: &str, reason: &str) -> Event {
        Event {
            id: format!("e-{seq}"),
            sequence: seq,
            event_type: format!("core.action.{action}"),
            payload: Payload {
                schema: "core.action.v1".into(),
                data: json!({"action": action, "provider": "human", "caller": caller,
                             "work_id": "w-1", "input": {"gate_id": gate},
                             "decision": {"gate_id": gate, "approved": action == "approve", "reason": reason}}),
            },
            ..Event::default()
        }
    }

    fn gate_wait(gate: &str, state: &str) -> Wait {
        Wait {
            id: format!("wt-{state}"),
            work_id: "w-1".into(),
            state: state.into(),
            owner: "human".into(),
            plan: json!({"kind": "gate", "gate_id": gate, "timeout_s": 600}),
            ..Wait::default()
        }
    }

    fn message(e: &RpcError) -> &str {
        e.data.as_ref().unwrap()["agent_message"].as_str().unwrap()
    }

    #[test]
    fn a_gated_call_parks_then_goes_through_once_approved() {
        let c = config();
        let g = c.gate_for("github.open_pull_request").unwrap().clone();
        let p = call();
        let id = gate_id("w-1", &p.operation, &p.request_id, &p.input);
        assert!(id.starts_with("g-") && id.len() == 14);
        let parked = decide(&c, &g, &p, &id, &[], &[], 1_792_915_200_000).unwrap();
        let w = parked.wait.unwrap();
        assert_eq!(w.keys, [format!("human/gate/{id}")]);
        assert_eq!(w.types, ["core.action.approve", "core.action.reject"]);
        assert_eq!(
            w.description,
            "approval of github.open_pull_request by cli:alice"
        );
        assert_eq!(w.due_at, "2026-10-25T08:10:00Z");
        assert_eq!(
            w.plan,
            json!({"kind": "gate", "gate_id": id, "operation": "github.open_pull_request",
                   "owner": "github",
                   "input": "base=\"main\" draft=false head=\"fix\" title=\"Fix the parser\"",
                   "approvers": ["cli:alice"], "timeout_s": 600})
        );
        assert_eq!(
            detail(&w.plan),
            "github.open_pull_request base=\"main\" draft=false head=\"fix\" title=\"Fix the parser\""
        );
        // Still waiting: the same Wait again.
        let waits = [gate_wait(&id, "active")];
        assert!(decide(&c, &g, &p, &id, &[], &waits, 0)
            .unwrap()
            .wait
            .is_some());
        // Approved: through. Another gate's decision is not this one's.
        let events = [
            decision(3, "reject", "g-other", "cli:alice", "no"),
            decision(5, "approve", &id, "cli:alice", ""),
        ];
        let waits = [gate_wait(&id, "woken")];
        assert_eq!(
            decide(&c, &g, &p, &id, &events, &waits, 0).unwrap(),
            OperationGateResult::default()
        );
        assert_eq!(
            verdict(&id, &events, &waits),
            Verdict::Approved {
                by: "cli:alice".into()
            }
        );
    }

    #[test]
    fn a_rejection_or_a_timeout_refuses_with_the_reason() {
        let c = config();
        let g = c.gate_for("github.open_pull_request").unwrap().clone();
        let p = call();
        let id = gate_id("w-1", &p.operation, &p.request_id, &p.input);
        // The first decision wins.
        let events = [
            decision(9, "approve", &id, "cli:alice", ""),
            decision(7, "reject", &id, "cli:alice", "not on a Friday"),
        ];
        let e = decide(&c, &g, &p, &id, &events, &[], 0).unwrap_err();
        assert!(e.is(Code::Unauthorized));
        assert_eq!(message(&e), "rejected by cli:alice: not on a Friday");
        let e = decide(
            &c,
            &g,
            &p,
            &id,
            &events[1..]
                .iter()
                .map(|e| {
                    let mut e = e.clone();
                    e.payload.data["decision"]["reason"] = json!("");
                    e
                })
                .collect::<Vec<_>>(),
            &[],
            0,
        )
        .unwrap_err();
        assert_eq!(message(&e), "rejected by cli:alice");
        // Another provider's decision does not count.
        let mut foreign = decision(2, "approve", &id, "cli:mallory", "");
        foreign.payload.data["provider"] = json!("core");
        assert_eq!(verdict(&id, &[foreign], &[]), Verdict::Open);
        // Timed out with no decision.
        let waits = [gate_wait(&id, "timed_out")];
        let e = decide(&c, &g, &p, &id, &[], &waits, 0).unwrap_err();
        assert!(e.is(Code::Unauthorized));
        assert_eq!(
            message(&e),
            "no approval within 600s: the call was not made"
        );
        // A timed-out Wait and a newer active one: still open.
        let waits = [gate_wait(&id, "timed_out"), gate_wait(&id, "active")];
        assert_eq!(verdict(&id, &[], &waits), Verdict::Open);
        assert!(has_wait(&id, &waits) && !has_wait("g-x", &waits));
    }

    #[test]
    fn gate_ids_follow_the_call_and_its_input() {
        let input = json!({"title": "a"});
        let a = gate_id("w-1", "github.merge", "r-1", &input);
        assert_eq!(
            a,
            gate_id("w-1", "github.merge", "r-1", &json!({"title": "a"}))
        );
        assert_ne!(a, gate_id("w-2", "github.merge", "r-1", &input));
        assert_ne!(a, gate_id("w-1", "github.comment", "r-1", &input));
        assert_ne!(a, gate_id("w-1", "github.merge", "r-2", &input));
        assert_ne!(
            a,
            gate_id("w-1", "github.merge", "r-1", &json!({"title": "b"}))
        );
    }
}
