//! `human.ask`: an agent asks a person a question (free text, or one of some
//! choices) and its Work waits for the answer, which the host records as a
//! `core.action.answer` Event on the ask's key ([`crate::ask_key`]).

use crate::config::{HumanConfig, MAX_TIMEOUT_S};
use crate::{ask_id, ask_key, for_agent, ACTION_ANSWER, ASK_OPERATION};
use protocol::wire::{
    clip_line, OperationWaitParams, OperationWaitResult, WaitRequest, ACTION_EVENT_FAMILY,
    MAX_WAIT_DESCRIPTION_BYTES,
};
use protocol::{Code, RpcError};
use serde::Deserialize;
use serde_json::json;
use std::collections::BTreeSet;

/// The longest question, in bytes.
pub const MAX_QUESTION_BYTES: usize = 4000;
/// The most choices an ask offers.
pub const MAX_CHOICES: usize = protocol::wire::MAX_ACTION_CHOICES;
/// The longest choice, in bytes (one line).
pub const MAX_CHOICE_BYTES: usize = 200;

/// `human.ask`'s input as written (strict).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawAsk {
    question: String,
    #[serde(default)]
    choices: Option<Vec<String>>,
    #[serde(default)]
    timeout_s: Option<u64>,
}

/// An ask, checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ask {
    /// The question, as asked.
    pub question: String,
    /// The answers to choose from (none: free text).
    pub choices: Vec<String>,
    /// How long to wait, in seconds (0: no limit).
    pub timeout_s: u64,
}

fn invalid(message: String) -> RpcError {
    for_agent(RpcError::new(
        Code::Invalid,
        format!("{ASK_OPERATION}: {message}"),
    ))
}

/// Checks a choice: one line, non-empty, at most [`MAX_CHOICE_BYTES`].
fn check_choice(choice: &str) -> Result<(), String> {
    if choice.trim().is_empty() {
        return Err("is empty".into());
    }
    if choice.chars().any(char::is_control) {
        return Err("must be one line without control characters".into());
    }
    if choice.len() > MAX_CHOICE_BYTES {
        return Err(format!(
            "{} bytes, over the limit of {MAX_CHOICE_BYTES}",
            choice.len()
        ));
    }
    Ok(())
}

/// Reads and checks `human.ask`'s input; the ask's timeout defaults to the entry's.
pub fn parse_ask(input: &serde_json::Value, default_timeout_s: u64) -> Result<Ask, RpcError> {
    if !input.is_object() {
        return Err(invalid(
            "the input must be an object {question, choices?, timeout_s?}".into(),
        ));
    }
    let raw: RawAsk = sdk::config::parse(input).map_err(|e| invalid(e.to_string()))?;
    if raw.question.trim().is_empty() {
        return Err(invalid("/question: is empty".into()));
    }
    if raw.question.len() > MAX_QUESTION_BYTES {
        return Err(invalid(format!(
            "/question: {} bytes, over the limit of {MAX_QUESTION_BYTES}",
            raw.question.len()
        )));
    }
    let choices = raw.choices.unwrap_or_default();
    if choices.len() > MAX_CHOICES {
        return Err(invalid(format!(
            "/choices: {} choices, over the limit of {MAX_CHOICES}",
            choices.len()
        )));
    }
    let mut seen = BTreeSet::new();
    for (i, c) in choices.iter().enumerate() {
        check_choice(c).map_err(|e| invalid(format!("/choices/{i}: {e}")))?;
        if !seen.insert(c.as_str()) {
            return Err(invalid(format!("/choices/{i}: {c:?} is offered twice")));
        }
    }
    let timeout_s = raw.timeout_s.unwrap_or(default_timeout_s);
    if timeout_s > MAX_TIMEOUT_S {
        return Err(invalid(format!(
            "/timeout_s: {timeout_s} is over the limit of {MAX_TIMEOUT_S} (30 days)"
        )));
    }
    Ok(Ask {
        question: raw.question,
        choices,
        timeout_s,
    })
}

/// The Wait of `human.ask` (its entry's config `config`; the clock `now_ms`): keys
/// `human/ask/<ask_id>`, woken by `core.action.answer`, described by the question's
/// first line, timing out after the ask's timeout, with the plan
/// `{kind: "ask", ask_id, question, choices}`.
pub fn plan(
    config: &HumanConfig,
    p: &OperationWaitParams,
    now_ms: i64,
) -> Result<OperationWaitResult, RpcError> {
    if p.operation != ASK_OPERATION {
        return Err(RpcError::new(
            Code::NotFound,
            format!(
                "no wait operation {} (this package has {ASK_OPERATION})",
                p.operation
            ),
        ));
    }
    if p.authority.work_id.is_empty() {
        return Err(invalid(
            "is asked from a Work's turn, and this call has no Work".into(),
        ));
    }
    let ask = parse_ask(&p.input, config.ask_timeout_s)?;
    let id = ask_id(
        &p.authority.work_id,
        &p.request_id,
        &p.authority.execution_id,
        &ask.question,
    );
    let due_at = match ask.timeout_s {
        0 => String::new(),
        s => protocol::time::format_rfc3339_secs(
            (now_ms / 1000).saturating_add(i64::try_from(s).unwrap_or(i64::MAX)),
        ),
    };
    Ok(OperationWaitResult {
        wait: WaitRequest {
            keys: vec![ask_key(&id)],
            types: vec![format!("{ACTION_EVENT_FAMILY}.{ACTION_ANSWER}")],
            due_at,
            description: clip_line(ask.question.trim(), MAX_WAIT_DESCRIPTION_BYTES),
            plan: json!({
                "kind": "ask",
                "ask_id": id,
                "question": ask.question,
                "choices": ask.choices,
            }),
        },
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use protocol::wire::Authority;
    use serde_json::{json, Value};

    fn params(input: Value, request_id: &str) -> OperationWaitParams {
        OperationWaitParams {
            operation: ASK_OPERATION.into(),
            request_id: request_id.into(),
            authority: Authority {
                scope_id: "acme".into(),
                work_id: "w-1".into(),
                execution_id: "x-1".into(),
                ..Authority::default()
            },
            input,
        }
    }

    fn config() -> HumanConfig {
        crate::config::parse_config(&json!({"ask_timeout_s": 3600})).unwrap()
    }

    fn agent_message(e: &RpcError) -> String {
        e.data.as_ref().unwrap()["agent_message"]
            .as_str()
            .unwrap()
            .to_string()
    }

    #[test]
    fn an_ask_plans_its_wait() {
        let r = plan(
            &config(),
            &params(
                json!({"question": "Deploy to prod?\nIt has 3 migrations.", "choices": ["yes", "no"]}),
                "r-1",
            ),
            1_792_915_200_000, // 2026-10-25T08:00:00Z
        )
        .unwrap();
        let id = ask_id("w-1", "r-1", "x-1", "ignored");
        assert!(id.starts_with("a-") && id.len() == 14, "{id}");
        let w = r.wait;
        assert_eq!(w.keys, [format!("human/ask/{id}")]);
        assert_eq!(w.types, ["core.action.answer"]);
        assert_eq!(w.description, "Deploy to prod?");
        assert_eq!(w.due_at, "2026-10-25T09:00:00Z");
        assert_eq!(
            w.plan,
            json!({"kind": "ask", "ask_id": id,
                   "question": "Deploy to prod?\nIt has 3 migrations.", "choices": ["yes", "no"]})
        );
        // No limit: no due_at; the ask's own timeout wins over the entry's.
        let r = plan(
            &config(),
            &params(json!({"question": "Which?", "timeout_s": 0}), "r-2"),
            0,
        )
        .unwrap();
        assert_eq!(r.wait.due_at, "");
        assert_eq!(r.wait.plan["choices"], json!([]));
    }

    #[test]
    fn bad_asks_say_why_to_the_agent() {
        let long = "x".repeat(MAX_QUESTION_BYTES + 1);
        let many: Vec<String> = (0..=MAX_CHOICES).map(|i| format!("c{i}")).collect();
        for (input, said) in [
            (json!({}), "human.ask: /question: is required"),
            (json!({"question": "  "}), "human.ask: /question: is empty"),
            (
                json!({"question": long}),
                "human.ask: /question: 4001 bytes, over the limit of 4000",
            ),
            (
                json!({"question": "q", "choices": many}),
                "human.ask: /choices: 21 choices, over the limit of 20",
            ),
            (
                json!({"question": "q", "choices": ["a", "b\nc"]}),
                "human.ask: /choices/1: must be one line without control characters",
            ),
            (
                json!({"question": "q", "choices": ["a", "a"]}),
                "human.ask: /choices/1: \"a\" is offered twice",
            ),
            (
                json!({"question": "q", "choices": ["x".repeat(201)]}),
                "human.ask: /choices/0: 201 bytes, over the limit of 200",
            ),
            (
                json!({"question": "q", "timeout_s": 2_592_001}),
                "human.ask: /timeout_s: 2592001 is over the limit of 2592000 (30 days)",
            ),
            (
                json!({"question": "q", "urgent": true}),
                "human.ask: /urgent: unknown field (known: question, choices, timeout_s)",
            ),
            (
                json!("q"),
                "human.ask: the input must be an object {question, choices?, timeout_s?}",
            ),
        ] {
            let e = plan(&config(), &params(input.clone(), "r"), 0).unwrap_err();
            assert!(e.is(Code::Invalid), "{input}");
            assert_eq!(agent_message(&e), said, "{input}");
        }
    }

    #[test]
    fn ask_ids_follow_the_request() {
        let a = ask_id("w-1", "r-1", "x-1", "q");
        assert_eq!(
            a,
            ask_id("w-1", "r-1", "x-2", "other"),
            "the request ID decides"
        );
        assert_ne!(a, ask_id("w-2", "r-1", "x-1", "q"));
        assert_ne!(a, ask_id("w-1", "r-2", "x-1", "q"));
        // Without a request ID: the execution and the question decide.
        let b = ask_id("w-1", "", "x-1", "q");
        assert_eq!(b, ask_id("w-1", "", "x-1", "q"));
        assert_ne!(b, ask_id("w-1", "", "x-1", "r"));
        assert_ne!(b, ask_id("w-1", "", "x-2", "q"));
    }
}
