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
//! `internal`. The message never echoes the token; an operation's refusal carries
//! only what the operation meant for the agent ([`AGENT_MESSAGE_FIELD`], made safe
//! by [`agent_message`]).
//!
//! The token never travels in an environment variable: an executor writes it to a
//! private (0600) file and names that file in [`ENV_TOKEN_FILE`]; the client reads the
//! file on every call, so a token replaced on adoption is picked up at once.

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use std::time::Duration;

/// The toolbelt socket's path, for a client (`open-conduit mcp`).
pub const ENV_ENDPOINT: &str = "OS_ENDPOINT";
/// The file holding the execution's token, for a client.
pub const ENV_TOKEN_FILE: &str = "OS_TOKEN_FILE";

/// The event type the toolbelt's `create_work` emits, which the router turns into
/// Work as asked.
pub const WORK_REQUESTED: &str = "agent.work_requested";

/// Run one tool.
pub const METHOD_CALL: &str = "toolbelt.call";
/// The granted operations, with their guidance.
pub const METHOD_GUIDANCE: &str = "toolbelt.guidance";

/// A credential for the run's own git (`open-conduit git-credential`), from the
/// extension whose `run.environment` layer named the helper.
pub const METHOD_GIT_CREDENTIAL: &str = "toolbelt.git_credential";

/// How long one call may take, end to end (the operation may still finish after; a
/// retry with the same request ID never runs it twice).
pub const CALL_TIMEOUT: Duration = Duration::from_secs(60);

/// The largest input a tool takes, in bytes of JSON.
pub const MAX_INPUT_BYTES: usize = 1024 * 1024;

/// The field of an operation's refusal (`data.agent_message`) holding a message meant
/// for the agent: the toolbelt forwards it, made safe by [`agent_message`], in the
/// agent's tool result. A refusal without one reaches the agent as its code only.
pub const AGENT_MESSAGE_FIELD: &str = "agent_message";

/// The longest message of an operation's refusal the agent is shown, in bytes.
pub const MAX_AGENT_MESSAGE_BYTES: usize = 500;

/// What stands in for a word that looks like a credential.
pub const REDACTED: &str = "[redacted]";

/// Token prefixes never shown to an agent: the toolbelt's own, GitHub's (`ghp_`,
/// `gho_`, `ghu_`, `ghs_`, `ghr_`, `github_pat_`), a JWT's header, and the
/// `Bearer`/`token` authorization schemes' values.
const SECRET_PREFIXES: &[&str] = &[
    "oct1.",
    "ghp_",
    "gho_",
    "ghu_",
    "ghs_",
    "ghr_",
    "github_pat_",
    "eyj",
    "sk-",
    "xox",
];

fn looks_secret(word: &str) -> bool {
    let w = word
        .trim_start_matches(|c: char| !c.is_ascii_alphanumeric())
        .to_ascii_lowercase();
    SECRET_PREFIXES.iter().any(|p| w.starts_with(p))
}

/// An operation's message made fit for an agent: one line without control
/// characters, each word that looks like a credential (a token prefix, or the word
/// after `Bearer`, `token` or `Authorization:`) replaced by [`REDACTED`], at most
/// [`MAX_AGENT_MESSAGE_BYTES`] (cut at a character boundary, ending in `…`).
pub fn agent_message(text: &str) -> String {
    let one_line: String = text
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    let mut words: Vec<String> = Vec::new();
    let mut after_scheme = false;
    for word in one_line.split(' ').filter(|w| !w.is_empty()) {
        let lower = word.to_ascii_lowercase();
        if after_scheme || looks_secret(word) {
            words.push(REDACTED.to_string());
        } else {
            words.push(word.to_string());
        }
        after_scheme = matches!(
            lower.trim_end_matches(':'),
            "bearer" | "token" | "authorization" | "basic"
        );
    }
    let joined = words.join(" ");
    if joined.len() <= MAX_AGENT_MESSAGE_BYTES {
        return joined;
    }
    let ellipsis = "…";
    let mut out = String::with_capacity(MAX_AGENT_MESSAGE_BYTES);
    for c in joined.chars() {
        if out.len() + c.len_utf8() + ellipsis.len() > MAX_AGENT_MESSAGE_BYTES {
            break;
        }
        out.push(c);
    }
    out.push_str(ellipsis);
    out
}

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

/// `toolbelt.git_credential` params: git's credential request, for one extension.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct GitCredentialParams {
    /// The execution's token.
    pub token: String,
    /// The extension the helper names (the one whose layer set it up).
    pub extension: String,
    /// `https` or `http`.
    pub protocol: String,
    /// The host, with `:port` when git sends one.
    pub host: String,
    /// The repository's path (git sends it with `credential.useHttpPath`).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub path: String,
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

fn object_schema(properties: Value, required: &[&str]) -> Value {
    json!({"type": "object", "properties": properties, "required": required})
}

/// The built-in tools with the JSON Schemas of their inputs, as `tools/list`
/// publishes them (`name`, `description`, `inputSchema`); [`check_input`] holds
/// every call to them.
pub fn tools() -> Value {
    let rid = json!({"type": "string", "description": "Repeat it on a retry: the first call's answer comes back and nothing runs twice."});
    json!([
        {"name": TOOL_READ_CONTEXT,
         "description": "The Work you are on (its title, keys, context) and the events that brought you here, oldest first.",
         "inputSchema": object_schema(json!({}), &[])},
        {"name": TOOL_EMIT,
         "description": "Record an event of type agent.<something>, derived from this Work's latest event.",
         "inputSchema": object_schema(json!({"type": {"type": "string"}, "payload": {"type": "object"},
                                      "keys": {"type": "array", "items": {"type": "string"}},
                                      "request_id": rid}), &["type"])},
        {"name": TOOL_CREATE_WORK,
         "description": "Ask for new Work in this scope (on your binding unless you name another).",
         "inputSchema": object_schema(json!({"title": {"type": "string"}, "binding": {"type": "string"},
                                      "keys": {"type": "array", "items": {"type": "string"}},
                                      "context": {"type": "object"}, "request_id": rid}), &["title"])},
        {"name": TOOL_WAIT,
         "description": "Park this Work until an event on its keys (or the keys you give), or a timeout, wakes it; then end your turn.",
         "inputSchema": object_schema(json!({"description": {"type": "string"},
                                      "keys": {"type": "array", "items": {"type": "string"}},
                                      "types": {"type": "array", "items": {"type": "string"}},
                                      "timeout_s": {"type": "integer", "minimum": 1},
                                      "due_at": {"type": "string", "description": "RFC 3339"}}), &["description"])},
        {"name": TOOL_DECLARE_OUTCOME,
         "description": "Say how this turn ended: completed (the Work is done), handoff (keep it open for its next event) or failed.",
         "inputSchema": object_schema(json!({"outcome": {"type": "string", "enum": ["completed", "handoff", "failed"]},
                                      "summary": {"type": "string"}}), &["outcome"])},
        {"name": TOOL_CALL,
         "description": "Run an operation this Work is granted (see the Operations list).",
         "inputSchema": object_schema(json!({"operation": {"type": "string"}, "input": {"type": "object"},
                                      "request_id": rid}), &["operation"])},
    ])
}

/// Checks a built-in tool's input (`null` reads as `{}`) against the schema it
/// publishes ([`tools`]): the type, `required`, `properties`, `items`, `enum` and
/// `minimum` keywords those schemas use. The error names the field by its path
/// (`timeout_s`, `keys[2]`). An unknown tool passes (the caller refuses it).
pub fn check_input(tool: &str, input: &Value) -> Result<(), String> {
    let all = tools();
    let Some(schema) = all
        .as_array()
        .into_iter()
        .flatten()
        .find(|t| t["name"] == tool)
        .map(|t| &t["inputSchema"])
    else {
        return Ok(());
    };
    let empty = json!({});
    let input = if input.is_null() { &empty } else { input };
    check_value(schema, input, "")
}

fn kind_of(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(n) if n.is_i64() || n.is_u64() => "an integer",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

fn check_value(schema: &Value, v: &Value, at: &str) -> Result<(), String> {
    let name = if at.is_empty() { "the input" } else { at };
    let shown = |v: &Value| {
        let t = v.to_string();
        if t.len() > 60 {
            let cut = (0..=60).rev().find(|i| t.is_char_boundary(*i)).unwrap_or(0);
            format!("{}…", &t[..cut])
        } else {
            t
        }
    };
    if let Some(t) = schema["type"].as_str() {
        let ok = match t {
            "object" => v.is_object(),
            "array" => v.is_array(),
            "string" => v.is_string(),
            "boolean" => v.is_boolean(),
            "integer" => v.is_i64() || v.is_u64(),
            "number" => v.is_number(),
            _ => true,
        };
        if !ok {
            return Err(format!(
                "{name}: expected {}, got {} ({})",
                match t {
                    "object" | "array" | "integer" => format!("an {t}"),
                    other => format!("a {other}"),
                },
                kind_of(v),
                shown(v)
            ));
        }
    }
    if let Some(options) = schema["enum"].as_array() {
        if !options.contains(v) {
            let list: Vec<String> = options.iter().map(|o| o.to_string()).collect();
            return Err(format!(
                "{name}: expected one of {}, got {}",
                list.join(", "),
                shown(v)
            ));
        }
    }
    if let (Some(min), Some(n)) = (schema["minimum"].as_f64(), v.as_f64()) {
        if n < min {
            return Err(format!("{name}: expected at least {min}, got {}", shown(v)));
        }
    }
    if let Some(o) = v.as_object() {
        for r in schema["required"].as_array().into_iter().flatten() {
            if let Some(r) = r.as_str() {
                if !o.contains_key(r) {
                    return Err(format!("{}: required", join(at, r)));
                }
            }
        }
        if let Some(props) = schema["properties"].as_object() {
            for (k, sub) in props {
                if let Some(x) = o.get(k) {
                    check_value(sub, x, &join(at, k))?;
                }
            }
        }
    }
    if let (Some(items), Some(a)) = (schema.get("items"), v.as_array()) {
        for (i, x) in a.iter().enumerate() {
            check_value(items, x, &format!("{name}[{i}]"))?;
        }
    }
    Ok(())
}

fn join(at: &str, field: &str) -> String {
    if at.is_empty() {
        field.to_owned()
    } else {
        format!("{at}.{field}")
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn an_agent_message_is_one_bounded_line_without_credentials() {
        let m = agent_message("GitHub answered 404: Not Found\n(see https://docs.github.com/rest)");
        assert_eq!(
            m,
            "GitHub answered 404: Not Found (see https://docs.github.com/rest)"
        );
        let m =
            agent_message("sent Bearer abc123 and ghp_0123456789 and oct1.w.e.1.mac, token: xyz");
        assert!(
            !m.contains("abc123") && !m.contains("ghp_") && !m.contains("oct1."),
            "{m}"
        );
        assert!(!m.contains("xyz"), "{m}");
        assert!(m.contains(REDACTED), "{m}");
        let long = "é".repeat(2 * MAX_AGENT_MESSAGE_BYTES);
        let m = agent_message(&long);
        assert!(m.len() <= MAX_AGENT_MESSAGE_BYTES, "{}", m.len());
        assert!(m.ends_with('…'));
    }

    #[test]
    fn tool_inputs_are_held_to_their_published_schemas() {
        use serde_json::json;
        let bad =
            |tool: &str, input: serde_json::Value| super::check_input(tool, &input).unwrap_err();
        assert_eq!(
            bad("wait", json!({"description": "d", "timeout_s": -1})),
            "timeout_s: expected at least 1, got -1"
        );
        assert_eq!(
            bad("wait", json!({"description": "d", "timeout_s": "5"})),
            "timeout_s: expected an integer, got a string (\"5\")"
        );
        assert_eq!(
            bad("wait", json!({"description": "d", "timeout_s": 1.5})),
            "timeout_s: expected an integer, got a number (1.5)"
        );
        assert_eq!(bad("wait", json!({})), "description: required");
        assert_eq!(
            bad("emit", json!({"type": "agent.x", "payload": "text"})),
            "payload: expected an object, got a string (\"text\")"
        );
        assert_eq!(
            bad("emit", json!({"type": "agent.x", "keys": ["a", 2]})),
            "keys[1]: expected a string, got an integer (2)"
        );
        assert_eq!(
            bad("declare_outcome", json!({"outcome": "done"})),
            "outcome: expected one of \"completed\", \"handoff\", \"failed\", got \"done\""
        );
        assert_eq!(
            bad("call", json!("x")),
            "the input: expected an object, got a string (\"x\")"
        );
        for (tool, ok) in [
            (
                "wait",
                json!({"description": "d", "timeout_s": 60, "keys": ["k"]}),
            ),
            ("emit", json!({"type": "agent.x", "payload": {"a": 1}})),
            ("read_context", serde_json::Value::Null),
            (
                "declare_outcome",
                json!({"outcome": "handoff", "summary": "s"}),
            ),
            ("no_such_tool", json!(1)),
        ] {
            assert_eq!(super::check_input(tool, &ok), Ok(()), "{tool}");
        }
    }

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
