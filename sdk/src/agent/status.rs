//! The structured status an agent ends its turn with (claude's `--json-schema`,
//! codex's `--output-schema`), and how it reads as the turn's outcome: `finished`
//! completes the Work, `building`, `review`, `help` and `done` hand it off (it stays
//! open), anything else is a failure (`no_status`). Also the structured failures an
//! agent executor answers without a process.

use protocol::wire::{clip_line, ExecutorWaitResult, Outcome, Payload, RetryHint};
use serde_json::{json, Map, Value};

/// The longest status report kept, in bytes.
pub const MAX_REPORT_BYTES: usize = 20_000;
/// The longest summary, in bytes.
pub const MAX_SUMMARY_BYTES: usize = 200;

/// The JSON schema of the structured status. Its descriptions say only what each
/// state means to Open Conduit.
pub fn schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "state": {
                "type": "string",
                "enum": ["finished", "building", "review", "help", "done"],
                "description": "finished: the Work is complete and closes. building: work continues; the Work stays open for its next input. review: something is ready for the owner to look at; the Work stays open. help: you need the owner's answer to go on; the Work stays open. done: your part is done and the owner decides what follows; the Work stays open."
            },
            "summary": {"type": "string", "description": "One line saying what this turn did."},
            "handoff": {"type": "string", "description": "A note for a fresh session continuing this Work: what was done, what is next, where things are."},
            "report": {"type": "string", "description": "An optional longer write-up of the turn for the operator."}
        },
        "required": ["state", "summary", "handoff"]
    })
}

/// [`schema`] as OpenAI's strict structured outputs take it (codex's
/// `--output-schema`): every property required (`report` may be empty) and no
/// other property allowed.
pub fn strict_schema() -> Value {
    let mut s = schema();
    s["required"] = json!(["state", "summary", "handoff", "report"]);
    s["additionalProperties"] = json!(false);
    s
}

/// A status as read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Declared {
    /// `state`, as given.
    pub state: String,
    /// `summary`, clipped to [`MAX_SUMMARY_BYTES`] on one line.
    pub summary: String,
    /// `report`, when not empty, clipped to [`MAX_REPORT_BYTES`].
    pub report: Option<String>,
    /// `handoff`, when not blank.
    pub handoff: Option<String>,
    /// The outcome the state means, or why it means none.
    pub outcome: Result<Outcome, String>,
}

/// Cuts `s` to at most `max` bytes, on a character boundary.
pub fn clip(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_string();
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    s[..end].to_string()
}

/// Reads a status object.
pub fn read(s: &Map<String, Value>) -> Declared {
    let text = |k: &str| s.get(k).and_then(Value::as_str).unwrap_or("");
    let state = text("state").to_string();
    let outcome = match state.as_str() {
        "finished" => Ok(Outcome::Completed),
        "building" | "review" | "help" | "done" => Ok(Outcome::Handoff),
        other => Err(format!(
            "the turn ended with an unknown state `{}`",
            clip_line(other, 40)
        )),
    };
    Declared {
        summary: clip_line(text("summary"), MAX_SUMMARY_BYTES),
        report: Some(text("report"))
            .filter(|t| !t.is_empty())
            .map(|t| clip(t, MAX_REPORT_BYTES)),
        handoff: Some(text("handoff"))
            .filter(|t| !t.trim().is_empty())
            .map(str::to_string),
        state,
        outcome,
    }
}

/// A structured failure with its reason in the data (`reason` and `kind`).
pub fn failure(schema: &str, reason: &str, error: String) -> ExecutorWaitResult {
    ExecutorWaitResult {
        data: Some(Payload {
            schema: schema.to_string(),
            data: json!({"reason": reason, "kind": reason}),
        }),
        summary: clip_line(&error, MAX_SUMMARY_BYTES),
        error,
        ..ExecutorWaitResult::new(Outcome::Failed)
    }
}

/// The failure of a turn refused under a usage-limit hold: reason `usage_limit`,
/// `limited`, `resets_at` and the retry hint. `who` names the agent (`claude`).
pub fn limited_failure(schema: &str, who: &str, reset_at: &str) -> ExecutorWaitResult {
    let mut r = failure(
        schema,
        "usage_limit",
        format!("{who} hit a usage limit; retry at {reset_at}"),
    );
    if let Some(d) = r.data.as_mut() {
        d.data["limited"] = json!(true);
        d.data["resets_at"] = json!(reset_at);
    }
    r.retry_hint = Some(RetryHint {
        reset_at: reset_at.to_string(),
    });
    r
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn states_read_as_outcomes() {
        let of = |v: Value| read(v.as_object().unwrap());
        let d = of(json!({"state": "finished", "summary": "a\nb", "handoff": " ", "report": ""}));
        assert_eq!(d.outcome, Ok(Outcome::Completed));
        assert_eq!((d.handoff, d.report), (None, None));
        assert!(!d.summary.contains('\n'));
        for s in ["building", "review", "help", "done"] {
            assert_eq!(of(json!({ "state": s })).outcome, Ok(Outcome::Handoff));
        }
        assert!(of(json!({"state": "x"}))
            .outcome
            .unwrap_err()
            .contains("`x`"));
        let strict = strict_schema();
        assert_eq!(strict["required"].as_array().unwrap().len(), 4);
        let l = limited_failure("s", "codex", "2100-01-01T00:00:00Z");
        assert_eq!(l.retry_hint.unwrap().reset_at, "2100-01-01T00:00:00Z");
    }
}
