//! `work.actions` and `work.act`: what a person may do on a Work (answer an ask,
//! approve or reject a gated call, admit or reject held Work), and the one Event the
//! host records when they do. `work.act` writes nothing: it authorises the person,
//! checks the input and plans the Event's keys and decision.

use crate::config::HumanConfig;
use crate::{
    ask_key, gate, gate_key, plan_choices, plan_str, ACTION_ADMIT, ACTION_ANSWER, ACTION_APPROVE,
    ACTION_REJECT, NAME, WAIT_ACTIVE,
};
use protocol::wire::{
    clip_line, ActionOffer, HoldSettlement, Wait, WorkActParams, WorkActResult,
    MAX_ACTIONS_OFFERED, MAX_ACTION_TEXT_BYTES, MAX_HOLD_REASON_BYTES,
};
use protocol::{Code, RpcError};
use serde::Deserialize;
use serde_json::{json, Value};

/// The longest answer, in bytes.
pub const MAX_ANSWER_BYTES: usize = 4000;
/// The longest reason a person gives, in bytes (one line).
pub const MAX_REASON_BYTES: usize = 200;

/// `text` cut to `max` bytes at a character boundary, ending in `…` when cut
/// (several lines kept).
pub fn clip_text(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_string();
    }
    let ellipsis = "…";
    let mut out = String::with_capacity(max);
    for c in text.chars() {
        if out.len() + c.len_utf8() + ellipsis.len() > max {
            break;
        }
        out.push(c);
    }
    out.push_str(ellipsis);
    out
}

fn offer(id: &str, label: &str) -> ActionOffer {
    ActionOffer {
        id: id.to_string(),
        label: label.to_string(),
        awaited: true,
        ..ActionOffer::default()
    }
}

/// What a person may do on `work` given its `waits`: `answer` for each open ask,
/// `approve` and `reject` for each parked call, `admit` and `reject` while the Work
/// is held by this package.
pub fn offers(work: &protocol::wire::Work, waits: &[Wait]) -> Vec<ActionOffer> {
    let mut out = Vec::new();
    for w in waits
        .iter()
        .filter(|w| w.owner == NAME && w.state == WAIT_ACTIVE)
    {
        match plan_str(&w.plan, "kind") {
            Some("ask") => {
                let Some(ask_id) = plan_str(&w.plan, "ask_id") else {
                    continue;
                };
                let question = plan_str(&w.plan, "question").unwrap_or(&w.description);
                let choices = plan_choices(&w.plan);
                out.push(ActionOffer {
                    prompt: clip_text(question, MAX_ACTION_TEXT_BYTES),
                    detail: clip_line(question.trim(), MAX_ACTION_TEXT_BYTES),
                    choices,
                    input: json!({ "ask_id": ask_id }),
                    ..offer(ACTION_ANSWER, "Answer")
                });
            }
            Some("gate") => {
                let Some(gate_id) = plan_str(&w.plan, "gate_id") else {
                    continue;
                };
                let detail = clip_line(&gate::detail(&w.plan), MAX_ACTION_TEXT_BYTES);
                out.push(ActionOffer {
                    detail: detail.clone(),
                    input: json!({ "gate_id": gate_id }),
                    ..offer(ACTION_APPROVE, "Approve")
                });
                out.push(ActionOffer {
                    prompt: "Why?".into(),
                    detail,
                    input: json!({ "gate_id": gate_id }),
                    ..offer(ACTION_REJECT, "Reject")
                });
            }
            _ => {}
        }
    }
    if let Some(hold) = work.hold.as_ref().filter(|h| h.owner == NAME) {
        let what = work
            .display
            .as_ref()
            .map(|d| d.title.as_str())
            .filter(|t| !t.is_empty())
            .unwrap_or(work.id.as_str());
        let detail = clip_line(
            &format!("start {what} ({})", hold.reason),
            MAX_ACTION_TEXT_BYTES,
        );
        out.push(ActionOffer {
            detail: detail.clone(),
            input: json!({}),
            ..offer(ACTION_ADMIT, "Admit")
        });
        out.push(ActionOffer {
            prompt: "Why?".into(),
            detail,
            input: json!({}),
            ..offer(ACTION_REJECT, "Reject")
        });
    }
    out.truncate(MAX_ACTIONS_OFFERED);
    out
}

/// `answer`'s input (strict).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct AnswerInput {
    ask_id: String,
    #[serde(default)]
    answer: Option<String>,
    #[serde(default)]
    choice: Option<Value>,
}

/// `approve`'s or `reject`'s input on a gated call (strict).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct GateInput {
    gate_id: String,
    #[serde(default)]
    reason: Option<String>,
}

/// `admit`'s or `reject`'s input on held Work (strict).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct HoldInput {
    #[serde(default)]
    reason: Option<String>,
}

fn refuse(code: Code, message: impl Into<String>) -> RpcError {
    RpcError::new(code, message)
}

/// Reads an action's input as `T` (null reads as `{}`).
fn read<T: serde::de::DeserializeOwned>(action: &str, input: &Value) -> Result<T, RpcError> {
    let empty = json!({});
    let input = if input.is_null() { &empty } else { input };
    if !input.is_object() {
        return Err(refuse(
            Code::Invalid,
            format!("{action}: the input must be an object"),
        ));
    }
    sdk::config::parse(input).map_err(|e| refuse(Code::Invalid, format!("{action}: input {e}")))
}

/// Checks a reason: one line of at most [`MAX_REASON_BYTES`] (trimmed).
fn check_reason(action: &str, reason: Option<String>) -> Result<String, RpcError> {
    let reason = reason.unwrap_or_default().trim().to_string();
    if reason.chars().any(char::is_control) {
        return Err(refuse(
            Code::Invalid,
            format!("{action}: the reason must be one line"),
        ));
    }
    if reason.len() > MAX_REASON_BYTES {
        return Err(refuse(
            Code::Invalid,
            format!(
                "{action}: the reason is {} bytes, over the limit of {MAX_REASON_BYTES}",
                reason.len()
            ),
        ));
    }
    Ok(reason)
}

/// The Wait of `kind` (`ask` or `gate`) whose plan's `field` is `id` (an active one
/// first): not_found without one, conflict when it is closed.
fn open_wait<'a>(
    waits: &'a [Wait],
    kind: &str,
    field: &str,
    id: &str,
    work_id: &str,
) -> Result<&'a Wait, RpcError> {
    let mine: Vec<&Wait> = waits
        .iter()
        .filter(|w| {
            w.owner == NAME
                && plan_str(&w.plan, "kind") == Some(kind)
                && plan_str(&w.plan, field) == Some(id)
        })
        .collect();
    if let Some(w) = mine.iter().find(|w| w.state == WAIT_ACTIVE) {
        return Ok(w);
    }
    match mine.first() {
        Some(w) => Err(refuse(
            Code::Conflict,
            format!(
                "{kind} {id} on Work {work_id} is closed ({})",
                if w.state.is_empty() { "done" } else { &w.state }
            ),
        )),
        None => Err(refuse(
            Code::NotFound,
            format!("no {kind} {id} on Work {work_id}"),
        )),
    }
}

/// The answer an `answer` action gives to the ask planned `plan`.
fn answer_of(input: &AnswerInput, plan: &Value) -> Result<String, RpcError> {
    let choices: Vec<&str> = plan["choices"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    let bad = |m: String| refuse(Code::Invalid, format!("answer: {m}"));
    let listed = || choices.join(", ");
    match (&input.answer, &input.choice) {
        (Some(_), Some(_)) => Err(bad("give answer or choice, not both".into())),
        (None, None) => Err(bad("the answer is empty".into())),
        (None, Some(choice)) => {
            if choices.is_empty() {
                return Err(bad(format!(
                    "ask {} offers no choices: give answer",
                    input.ask_id
                )));
            }
            let picked = match choice {
                Value::Number(n) => n
                    .as_u64()
                    .and_then(|n| usize::try_from(n).ok())
                    .and_then(|n| n.checked_sub(1))
                    .and_then(|i| choices.get(i).copied()),
                Value::String(s) => choices.iter().copied().find(|c| *c == s.trim()),
                _ => None,
            };
            picked.map(str::to_string).ok_or_else(|| {
                bad(format!(
                    "choice {choice} is not one offered (1-{} of: {})",
                    choices.len(),
                    listed()
                ))
            })
        }
        (Some(text), None) => {
            if text.trim().is_empty() {
                return Err(bad("the answer is empty".into()));
            }
            if text.len() > MAX_ANSWER_BYTES {
                return Err(bad(format!(
                    "{} bytes, over the limit of {MAX_ANSWER_BYTES}",
                    text.len()
                )));
            }
            if choices.is_empty() {
                return Ok(text.clone());
            }
            choices
                .iter()
                .find(|c| **c == text.trim())
                .map(|c| c.to_string())
                .ok_or_else(|| {
                    bad(format!(
                        "the answer is not one of the choices: {}",
                        listed()
                    ))
                })
        }
    }
}

/// Plans `work.act` on `work` (its `waits`) under the scope's `config`: refuses a
/// person who is not an approver (unauthorized), an ask or gate that does not exist
/// (not_found) or is closed (conflict), an input that does not fit (invalid).
pub fn act(
    config: &HumanConfig,
    p: &WorkActParams,
    work: &protocol::wire::Work,
    waits: &[Wait],
) -> Result<WorkActResult, RpcError> {
    let action = p.action.as_str();
    if ![ACTION_ANSWER, ACTION_APPROVE, ACTION_REJECT, ACTION_ADMIT].contains(&action) {
        return Err(refuse(
            Code::NotFound,
            format!("{NAME} offers no action {action:?} (answer, approve, reject, admit)"),
        ));
    }
    if !config.may_decide(&p.caller) {
        let caller = if p.caller.is_empty() {
            "an unidentified caller"
        } else {
            &p.caller
        };
        return Err(refuse(
            Code::Unauthorized,
            format!(
                "{caller} may not {action} here: only {} may",
                config.approvers.join(", ")
            ),
        ));
    }
    let gated = p.input.get("gate_id").is_some();
    match action {
        ACTION_ANSWER => {
            let input: AnswerInput = read(action, &p.input)?;
            let w = open_wait(waits, "ask", "ask_id", &input.ask_id, &work.id)?;
            let answer = answer_of(&input, &w.plan)?;
            Ok(WorkActResult {
                keys: vec![ask_key(&input.ask_id)],
                decision: json!({"ask_id": input.ask_id, "answer": answer}),
                settle_hold: None,
                message: format!("answered ask {} on Work {}", input.ask_id, work.id),
            })
        }
        ACTION_APPROVE | ACTION_REJECT if gated || action == ACTION_APPROVE => {
            let input: GateInput = read(action, &p.input)?;
            let w = open_wait(waits, "gate", "gate_id", &input.gate_id, &work.id)?;
            let reason = check_reason(action, input.reason)?;
            let approved = action == ACTION_APPROVE;
            let op = plan_str(&w.plan, "operation").unwrap_or("the call");
            Ok(WorkActResult {
                keys: vec![gate_key(&input.gate_id)],
                decision: json!({"gate_id": input.gate_id, "approved": approved, "reason": reason}),
                settle_hold: None,
                message: format!(
                    "{} {op} on Work {}",
                    if approved { "approved" } else { "rejected" },
                    work.id
                ),
            })
        }
        _ => {
            // admit, or reject without a gate: the Work's admission.
            let input: HoldInput = read(action, &p.input)?;
            let reason = check_reason(action, input.reason)?;
            if work.hold.as_ref().is_none_or(|h| h.owner != NAME) {
                return Err(refuse(
                    Code::NotFound,
                    format!("Work {} is not held for admission by {NAME}", work.id),
                ));
            }
            let admit = action == ACTION_ADMIT;
            let said = match (admit, reason.is_empty()) {
                (true, true) => format!("admitted by {}", p.caller),
                (true, false) => format!("admitted by {}: {reason}", p.caller),
                (false, true) => format!("rejected by {}", p.caller),
                (false, false) => format!("rejected by {}: {reason}", p.caller),
            };
            Ok(WorkActResult {
                keys: Vec::new(),
                decision: json!({"admitted": admit, "reason": reason}),
                settle_hold: Some(HoldSettlement {
                    admit,
                    reason: clip_line(&said, MAX_HOLD_REASON_BYTES),
                }),
                message: if admit {
                    format!("admitted Work {}", work.id)
                } else {
                    format!("rejected Work {}: it is cancelled", work.id)
                },
            })
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use protocol::wire::{Work, WorkDisplay, WorkHold};

    fn ask_wait(state: &str, choices: Value) -> Wait {
        Wait {
            id: "wt-1".into(),
            work_id: "w-1".into(),
            state: state.into(),
            owner: "human".into(),
            operation: "human.ask".into(),
            description: "Deploy?".into(),
            plan: json!({"kind": "ask", "ask_id": "a-1", "question": "Deploy?\nTo prod.", "choices": choices}),
            ..Wait::default()
        }
    }

    fn gate_wait(state: &str) -> Wait {
        Wait {
            id: "wt-2".into(),
            work_id: "w-1".into(),
            state: state.into(),
            owner: "human".into(),
            plan: json!({"kind": "gate", "gate_id": "g-1", "operation": "github.merge",
                         "input": "number=3", "timeout_s": 60}),
            ..Wait::default()
        }
    }

    fn work(held: bool) -> Work {
        Work {
            id: "w-1".into(),
            scope_id: "acme".into(),
            state: "pending".into(),
            display: Some(WorkDisplay {
                title: "Fix the parser".into(),
                ..WorkDisplay::default()
            }),
            hold: held.then(|| WorkHold {
                owner: "human".into(),
                reason: "waiting for a person to admit it".into(),
                held_at: String::new(),
            }),
            ..Work::default()
        }
    }

    /// Who acts on Work w-1 (held for admission when `held`) with its `waits`, under
    /// the scope's `config`.
    struct Person<'a> {
        caller: &'a str,
        waits: &'a [Wait],
        config: Value,
        held: bool,
    }

    /// `caller` acting on Work w-1, not held, with `waits`, under a config with no
    /// approvers.
    fn person<'a>(caller: &'a str, waits: &'a [Wait]) -> Person<'a> {
        Person {
            caller,
            waits,
            config: json!({}),
            held: false,
        }
    }

    impl Person<'_> {
        /// `work.act` of `action` with `input`.
        fn act(&self, action: &str, input: Value) -> Result<WorkActResult, RpcError> {
            let config = crate::config::parse_config(&self.config).unwrap();
            act(
                &config,
                &WorkActParams {
                    scope_id: "acme".into(),
                    work_id: "w-1".into(),
                    action: action.into(),
                    input,
                    caller: self.caller.into(),
                    key: "k-1".into(),
                },
                &work(self.held),
                self.waits,
            )
        }
    }

    #[test]
    fn offers_follow_the_open_asks_gates_and_hold() {
        let waits = [
            ask_wait("active", json!(["yes", "no"])),
            gate_wait("active"),
            Wait {
                owner: "github".into(),
                ..ask_wait("active", json!([]))
            },
            Wait {
                id: "old".into(),
                ..ask_wait("woken", json!([]))
            },
        ];
        let o = offers(&work(true), &waits);
        let ids: Vec<&str> = o.iter().map(|a| a.id.as_str()).collect();
        assert_eq!(ids, ["answer", "approve", "reject", "admit", "reject"]);
        assert_eq!(o[0].prompt, "Deploy?\nTo prod.");
        assert_eq!(o[0].detail, "Deploy?");
        assert_eq!(o[0].choices, ["yes", "no"]);
        assert_eq!(o[0].input, json!({"ask_id": "a-1"}));
        assert!(o.iter().all(|a| a.awaited));
        assert_eq!(o[1].detail, "github.merge number=3");
        assert_eq!(o[1].input, json!({"gate_id": "g-1"}));
        assert_eq!(o[2].prompt, "Why?");
        assert_eq!(
            o[3].detail,
            "start Fix the parser (waiting for a person to admit it)"
        );
        assert_eq!(o[3].input, json!({}));
        assert!(offers(&work(false), &[]).is_empty());
    }

    #[test]
    fn an_answer_plans_its_keys_and_decision() {
        let choices = [ask_wait("active", json!(["yes", "no"]))];
        for input in [
            json!({"ask_id": "a-1", "choice": 2}),
            json!({"ask_id": "a-1", "choice": "no"}),
            json!({"ask_id": "a-1", "answer": " no "}),
        ] {
            let r = person("cli:alice", &choices)
                .act("answer", input.clone())
                .unwrap();
            assert_eq!(r.keys, ["human/ask/a-1"], "{input}");
            assert_eq!(
                r.decision,
                json!({"ask_id": "a-1", "answer": "no"}),
                "{input}"
            );
            assert!(r.settle_hold.is_none());
            assert_eq!(r.message, "answered ask a-1 on Work w-1");
        }
        let free = [ask_wait("active", json!([]))];
        let r = person("github:octocat", &free)
            .act(
                "answer",
                json!({"ask_id": "a-1", "answer": "Tuesday,\nafter 5"}),
            )
            .unwrap();
        assert_eq!(r.decision["answer"], "Tuesday,\nafter 5");
    }

    #[test]
    fn answers_that_do_not_fit_are_refused() {
        let choices = [ask_wait("active", json!(["yes", "no"]))];
        let free = [ask_wait("active", json!([]))];
        let long = "x".repeat(MAX_ANSWER_BYTES + 1);
        for (input, waits, code, message) in [
            (
                json!({"ask_id": "a-1", "choice": 3}),
                &choices[..],
                Code::Invalid,
                "answer: choice 3 is not one offered (1-2 of: yes, no)",
            ),
            (
                json!({"ask_id": "a-1", "answer": "maybe"}),
                &choices[..],
                Code::Invalid,
                "answer: the answer is not one of the choices: yes, no",
            ),
            (
                json!({"ask_id": "a-1", "choice": 1}),
                &free[..],
                Code::Invalid,
                "answer: ask a-1 offers no choices: give answer",
            ),
            (
                json!({"ask_id": "a-1", "answer": " "}),
                &free[..],
                Code::Invalid,
                "answer: the answer is empty",
            ),
            (
                json!({"ask_id": "a-1"}),
                &free[..],
                Code::Invalid,
                "answer: the answer is empty",
            ),
            (
                json!({"ask_id": "a-1", "answer": long}),
                &free[..],
                Code::Invalid,
                "answer: 4001 bytes, over the limit of 4000",
            ),
            (
                json!({"ask_id": "a-1", "answer": "x", "choice": 1}),
                &choices[..],
                Code::Invalid,
                "answer: give answer or choice, not both",
            ),
            (
                json!({"ask_id": "a-1", "text": "x"}),
                &free[..],
                Code::Invalid,
                "answer: input /text: unknown field (known: ask_id, answer, choice)",
            ),
            (
                json!({"answer": "x"}),
                &free[..],
                Code::Invalid,
                "answer: input /ask_id: is required",
            ),
            (
                json!({"ask_id": "a-9", "answer": "x"}),
                &free[..],
                Code::NotFound,
                "no ask a-9 on Work w-1",
            ),
            (
                json!({"ask_id": "a-1", "answer": "x"}),
                &[ask_wait("timed_out", json!([]))][..],
                Code::Conflict,
                "ask a-1 on Work w-1 is closed (timed_out)",
            ),
        ] {
            let e = person("cli:alice", waits)
                .act("answer", input.clone())
                .unwrap_err();
            assert!(e.is(code), "{input}: {e}");
            assert_eq!(e.message, message, "{input}");
        }
        let e = person("cli:alice", &free)
            .act("shrug", json!({}))
            .unwrap_err();
        assert!(e.is(Code::NotFound));
    }

    #[test]
    fn an_approver_list_refuses_others() {
        let gates = [gate_wait("active")];
        let listed = |caller| Person {
            config: json!({"approvers": ["cli:alice"]}),
            ..person(caller, &gates)
        };
        let approve = json!({"gate_id": "g-1"});
        let e = listed("cli:bob")
            .act("approve", approve.clone())
            .unwrap_err();
        assert!(e.is(Code::Unauthorized));
        assert_eq!(
            e.message,
            "cli:bob may not approve here: only cli:alice may"
        );
        let e = person("", &gates)
            .act("approve", approve.clone())
            .unwrap_err();
        assert!(e.is(Code::Unauthorized));
        let r = listed("cli:alice").act("approve", approve).unwrap();
        assert_eq!(r.keys, ["human/gate/g-1"]);
        assert_eq!(
            r.decision,
            json!({"gate_id": "g-1", "approved": true, "reason": ""})
        );
        assert_eq!(r.message, "approved github.merge on Work w-1");
    }

    #[test]
    fn a_rejection_carries_its_reason_and_closed_gates_conflict() {
        let gates = [gate_wait("active")];
        let bob = person("cli:bob", &gates);
        let r = bob
            .act(
                "reject",
                json!({"gate_id": "g-1", "reason": "not on a Friday"}),
            )
            .unwrap();
        assert_eq!(r.keys, ["human/gate/g-1"]);
        assert_eq!(
            r.decision,
            json!({"gate_id": "g-1", "approved": false, "reason": "not on a Friday"})
        );
        let e = bob
            .act("reject", json!({"gate_id": "g-1", "reason": "a\nb"}))
            .unwrap_err();
        assert_eq!(e.message, "reject: the reason must be one line");
        let e = bob
            .act(
                "reject",
                json!({"gate_id": "g-1", "reason": "x".repeat(201)}),
            )
            .unwrap_err();
        assert_eq!(
            e.message,
            "reject: the reason is 201 bytes, over the limit of 200"
        );
        let e = person("cli:bob", &[gate_wait("woken")])
            .act("approve", json!({"gate_id": "g-1"}))
            .unwrap_err();
        assert!(e.is(Code::Conflict));
        let e = bob.act("approve", json!({})).unwrap_err();
        assert_eq!(e.message, "approve: input /gate_id: is required");
    }

    #[test]
    fn admission_settles_the_hold_in_the_record() {
        let alice = Person {
            held: true,
            ..person("cli:alice", &[])
        };
        let r = alice.act("admit", json!({})).unwrap();
        assert!(r.keys.is_empty());
        assert_eq!(r.decision, json!({"admitted": true, "reason": ""}));
        assert_eq!(
            r.settle_hold,
            Some(HoldSettlement {
                admit: true,
                reason: "admitted by cli:alice".into()
            })
        );
        let r = alice.act("reject", json!({"reason": "duplicate"})).unwrap();
        assert_eq!(
            r.settle_hold,
            Some(HoldSettlement {
                admit: false,
                reason: "rejected by cli:alice: duplicate".into()
            })
        );
        assert_eq!(r.message, "rejected Work w-1: it is cancelled");
        let e = person("cli:alice", &[])
            .act("admit", Value::Null)
            .unwrap_err();
        assert!(e.is(Code::NotFound));
        assert_eq!(e.message, "Work w-1 is not held for admission by human");
    }

    #[test]
    fn clipped_text_ends_in_an_ellipsis() {
        assert_eq!(clip_text("short", 10), "short");
        let c = clip_text(&"é".repeat(10), 9);
        assert_eq!(c, "ééé…");
        assert!(c.len() <= 9);
    }
}
