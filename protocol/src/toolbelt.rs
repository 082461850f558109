//! The agents' toolbelt: what an execution calls, holding its per-execution token, on
//! the unix socket schedulerd serves (DESIGN.md, "Scheduler"). The same JSON-RPC 2.0
//! framing as the bus ([`crate::conn`]); two methods:
//!
//! - `toolbelt.call` ([`CallParams`]): run one tool ([`TOOLS`]) and answer its output.
//! - `toolbelt.guidance` ([`GuidanceParams`]): the operations the execution is granted,
//!   each with its summary, input fields and guidance ([`Guidance`]).
//!
//! A refusal is an error whose `data.code` is one of the safe codes ([`crate::Code`]):
//! `unauthorized` (a token that is not the execution's current one), `invalid`,
//! `not_found`, `conflict` (a call with the same request ID is in progress),
//! `unavailable` (a daemon the tool needs is down; retry with the same request ID) or
//! `internal`. The message never echoes the token.
//!
//! The token never travels in an environment variable: an executor writes it to a
//! private (0600) file and names that file in [`ENV_TOKEN_FILE`]; the client reads the
//! file on every call, so a token replaced on adoption is picked up at once.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::time::Duration;

/// The toolbelt socket's path, for a client (`open-conduit mcp`).
pub const ENV_ENDPOINT: &str = "OS_ENDPOINT";
/// The file holding the execution's token, for a client.
pub const ENV_TOKEN_FILE: &str = "OS_TOKEN_FILE";

/// Run one tool.
pub const METHOD_CALL: &str = "toolbelt.call";
/// The granted operations, with their guidance.
pub const METHOD_GUIDANCE: &str = "toolbelt.guidance";

/// How long one call may take, end to end (the operation may still finish after; a
/// retry with the same request ID never runs it twice).
pub const CALL_TIMEOUT: Duration = Duration::from_secs(60);

/// The largest input a tool takes, in bytes of JSON.
pub const MAX_INPUT_BYTES: usize = 1024 * 1024;

/// The builtin tools.
pub const TOOLS: &[&str] = &[
    TOOL_READ_CONTEXT,
    TOOL_EMIT,
    TOOL_CREATE_WORK,
    TOOL_WAIT,
    TOOL_DECLARE_OUTCOME,
    TOOL_CALL,
];

/// `read_context {}` → the Work (id, scope, kind, state, display, keys, context), the
/// execution (id, attempt, epoch, binding) and its inputs in acceptance order.
pub const TOOL_READ_CONTEXT: &str = "read_context";
/// `emit {type, payload?, keys?}` → `{event_id, seq}`: an Event derived from the run's
/// input, of a type in the toolbelt's own family `agent.`.
pub const TOOL_EMIT: &str = "emit";
/// `create_work {title, binding?, keys?, context?}` → `{event_id, key}`: new Work in the
/// same scope (its binding defaults to the caller's), created by the router from an
/// `agent.work_requested` Event derived from the run's input.
pub const TOOL_CREATE_WORK: &str = "create_work";
/// `wait {keys?, types?, due_at? | timeout_s?, description?}` → `{wait}`: the turn ends
/// parked on this Wait, whatever the executor says (unless it fails); an Event on one
/// of the keys (or the Work's own keys when none are given) wakes it and resumes the
/// same attempt.
pub const TOOL_WAIT: &str = "wait";
/// `declare_outcome {outcome: completed|handoff|failed, summary?}` → `{}`: the turn's
/// outcome, which replaces the executor's unless the executor failed or a wait was
/// declared.
pub const TOOL_DECLARE_OUTCOME: &str = "declare_outcome";
/// `call {operation, input?}` → the operation's output: an extension operation the
/// binding grants (`operations`), idempotent on the call's request ID.
pub const TOOL_CALL: &str = "call";

/// `toolbelt.call` params.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct CallParams {
    /// The execution's token.
    pub token: String,
    /// The tool ([`TOOLS`]).
    pub tool: String,
    /// The tool's input (an object).
    #[serde(default, skip_serializing_if = "Value::is_null")]
    pub input: Value,
    /// The call's request ID: a retry repeats it, and gets the first call's committed
    /// answer without running anything again. Empty for no replay.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub request_id: String,
}

/// `toolbelt.guidance` params.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct GuidanceParams {
    /// The execution's token.
    pub token: String,
}

/// One granted operation, as an agent is told about it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct OperationGuidance {
    /// The operation's name.
    pub name: String,
    /// `handler`, `wait` or `emit`.
    #[serde(default)]
    pub kind: String,
    /// One line.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub summary: String,
    /// The JSON Schema of its input, if it declares one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input: Option<Value>,
    /// How to use it.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub guidance: String,
}

/// `toolbelt.guidance` result.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Guidance {
    /// The granted operations, in the binding's order.
    #[serde(default)]
    pub operations: Vec<OperationGuidance>,
}

/// The input fields of a JSON Schema object, for one line of guidance: `body`,
/// `number?` (a field not in `required` is optional).
pub fn input_fields(schema: &Value) -> Vec<String> {
    let required: Vec<&str> = schema["required"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    schema["properties"]
        .as_object()
        .into_iter()
        .flatten()
        .map(|(name, _)| {
            if required.contains(&name.as_str()) {
                name.clone()
            } else {
                format!("{name}?")
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn input_fields_mark_the_optional_ones() {
        let schema = json!({"type": "object", "required": ["body"],
                            "properties": {"body": {}, "number": {}}});
        assert_eq!(input_fields(&schema), vec!["body", "number?"]);
        assert!(input_fields(&json!({})).is_empty());
    }
}
