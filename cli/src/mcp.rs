//! `open-conduit mcp`: the agents' toolbelt as an MCP server on stdio.
//!
//! Newline-delimited JSON-RPC 2.0 on stdin and stdout: `initialize` (version
//! negotiation: a version it speaks is echoed, any other is answered with its latest,
//! never an error), `notifications/initialized`, `ping`, `tools/list` and `tools/call`.
//! Each tool call goes to the toolbelt socket named by `OS_ENDPOINT` as one
//! `toolbelt.call`, with the token read afresh from the file `OS_TOKEN_FILE` names (so a
//! token replaced when a run is adopted is used at once; the token itself is never in
//! the environment). A refusal is an `isError` result carrying the safe code and the
//! host's message (for an operation, only what it meant for the agent, bounded); a
//! call that gets no answer says why: no answer within 60 s (the operation may still
//! finish; a retry with the same `request_id` never repeats it), the endpoint
//! unreachable (nothing listening, with the cause), or the connection broken mid-call.
//! `initialize`'s instructions list each operation the execution is granted, with its
//! summary, input fields and guidance, fetched from the host.

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::time::Duration;

use protocol::toolbelt::{self as tb, CallParams, Guidance, GuidanceParams};
use serde_json::{json, Value};

/// The MCP versions spoken, newest first.
pub const VERSIONS: &[&str] = &["2025-06-18", "2025-03-26", "2024-11-05"];

/// The longest line read from the client.
const MAX_LINE: u64 = 4 * 1024 * 1024;

/// The fixed first sentence of the instructions.
pub const INSTRUCTIONS: &str = "These tools are your toolbelt in Open Conduit: read_context shows the Work you are on and the events that brought you here; emit and create_work record new events and Work; wait parks this Work until an event (or a time) wakes it, then end your turn; declare_outcome says how the turn ended; call runs an operation this Work is granted.";

/// Why a toolbelt call has no answer from the host.
#[derive(Debug, PartialEq, Eq)]
pub enum Failure {
    /// The host refused: the safe code, and its message.
    Refused(String, String),
    /// Nothing listens at the endpoint.
    Unreachable(String),
    /// No answer within the call's bound.
    Timeout,
    /// The connection broke mid-call.
    Broken(String),
    /// The setup is wrong (no endpoint, no token file).
    Setup(String),
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Failure::Refused(code, message) => write!(f, "{code}: {message}"),
            Failure::Unreachable(why) => write!(f, "unreachable: {why}"),
            Failure::Timeout => write!(
                f,
                "timeout: no answer within {} s; the operation may still finish, and a retry with the same request_id never repeats it",
                tb::CALL_TIMEOUT.as_secs()
            ),
            Failure::Broken(why) => write!(f, "connection broken mid-call: {why}"),
            Failure::Setup(why) => write!(f, "setup: {why}"),
        }
    }
}

/// A client of the toolbelt socket.
#[derive(Debug, Clone)]
pub struct Client {
    endpoint: PathBuf,
    token_file: PathBuf,
    timeout: Duration,
}

impl Client {
    /// From `OS_ENDPOINT` and `OS_TOKEN_FILE`.
    pub fn from_env() -> Result<Client, String> {
        let get = |k: &str| {
            std::env::var_os(k)
                .filter(|v| !v.is_empty())
                .map(PathBuf::from)
                .ok_or_else(|| format!("{k} is not set"))
        };
        Ok(Client {
            endpoint: get(tb::ENV_ENDPOINT)?,
            token_file: get(tb::ENV_TOKEN_FILE)?,
            timeout: tb::CALL_TIMEOUT,
        })
    }

    fn token(&self) -> Result<String, Failure> {
        std::fs::read_to_string(&self.token_file)
            .map(|t| t.trim().to_owned())
            .map_err(|e| {
                Failure::Setup(format!("the token file {}: {e}", self.token_file.display()))
            })
    }

    /// One request on a fresh connection.
    pub fn request(&self, method: &str, params: Value) -> Result<Value, Failure> {
        let mut s = UnixStream::connect(&self.endpoint).map_err(|e| {
            Failure::Unreachable(format!(
                "nothing is listening at {} ({e})",
                self.endpoint.display()
            ))
        })?;
        let _ = s.set_read_timeout(Some(self.timeout));
        let _ = s.set_write_timeout(Some(self.timeout));
        let line = json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params});
        s.write_all(format!("{line}\n").as_bytes())
            .map_err(|e| Failure::Broken(e.to_string()))?;
        let mut answer = String::new();
        let read =
            BufReader::new(s.take(protocol::MAX_MESSAGE_BYTES as u64)).read_line(&mut answer);
        match read {
            Ok(0) => return Err(Failure::Broken("the host closed the connection".into())),
            Ok(_) => {}
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                return Err(Failure::Timeout)
            }
            Err(e) => return Err(Failure::Broken(e.to_string())),
        }
        let v: Value = serde_json::from_str(&answer)
            .map_err(|e| Failure::Broken(format!("the answer is not JSON: {e}")))?;
        if let Some(e) = v.get("error") {
            let code = e["data"]["code"]
                .as_str()
                .or_else(|| e["code"].as_i64().map(|_| "internal"))
                .unwrap_or("internal")
                .to_owned();
            let message = e["message"].as_str().unwrap_or_default().to_owned();
            return Err(Failure::Refused(code, message));
        }
        Ok(v["result"].clone())
    }

    /// `toolbelt.call`.
    pub fn call(&self, tool: &str, input: Value, request_id: String) -> Result<Value, Failure> {
        let params = CallParams {
            token: self.token()?,
            tool: tool.to_owned(),
            input,
            request_id,
        };
        let params = serde_json::to_value(params).map_err(|e| Failure::Setup(e.to_string()))?;
        self.request(tb::METHOD_CALL, params)
    }

    /// `toolbelt.git_credential`: a credential for the run's own git.
    pub fn git_credential(
        &self,
        mut params: tb::GitCredentialParams,
    ) -> Result<protocol::wire::RunCredentialResult, Failure> {
        params.token = self.token()?;
        let params = serde_json::to_value(params).map_err(|e| Failure::Setup(e.to_string()))?;
        let v = self.request(tb::METHOD_GIT_CREDENTIAL, params)?;
        serde_json::from_value(v).map_err(|e| Failure::Broken(format!("git_credential: {e}")))
    }

    /// `toolbelt.guidance`.
    pub fn guidance(&self) -> Result<Guidance, Failure> {
        let params = serde_json::to_value(GuidanceParams {
            token: self.token()?,
        })
        .map_err(|e| Failure::Setup(e.to_string()))?;
        let v = self.request(tb::METHOD_GUIDANCE, params)?;
        serde_json::from_value(v).map_err(|e| Failure::Broken(format!("guidance: {e}")))
    }
}

/// The instructions: the fixed sentence, then the granted operations.
pub fn instructions(g: Option<&Guidance>) -> String {
    let mut text = INSTRUCTIONS.to_owned();
    let Some(g) = g.filter(|g| !g.operations.is_empty()) else {
        return text;
    };
    text.push_str("\n\n## Operations\n");
    for o in &g.operations {
        let fields = o.input.as_ref().map(tb::input_fields).unwrap_or_default();
        text.push_str(&format!("- {}: {}", o.name, o.summary));
        if !fields.is_empty() {
            text.push_str(&format!(" (input: {})", fields.join(", ")));
        }
        text.push('\n');
    }
    for o in g.operations.iter().filter(|o| !o.guidance.is_empty()) {
        text.push_str(&format!("\n### {}\n{}\n", o.name, o.guidance));
    }
    text
}

/// The tools, as `tools/list` answers them ([`tb::tools`]).
pub fn tools() -> Value {
    tb::tools()
}

fn fresh_request_id() -> String {
    protocol::random::unique_hex::<12>()
}

/// A `tools/call` answer.
fn tool_result(client: &Client, name: &str, arguments: Value) -> Value {
    if !tb::TOOLS.contains(&name) {
        return json!({"isError": true,
                      "content": [{"type": "text", "text": format!("invalid: no tool named {name:?}")}]});
    }
    let mut input = if arguments.is_object() {
        arguments
    } else {
        json!({})
    };
    let request_id = input
        .as_object_mut()
        .and_then(|o| o.remove("request_id"))
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_else(fresh_request_id);
    match client.call(name, input, request_id) {
        Ok(out) => json!({"isError": false,
                          "content": [{"type": "text", "text": out.to_string()}],
                          "structuredContent": if out.is_object() { out.clone() } else { json!({"result": out}) }}),
        Err(f) => json!({"isError": true, "content": [{"type": "text", "text": f.to_string()}]}),
    }
}

/// One message's answer (`None` for a notification).
pub fn answer(client: Option<&Client>, msg: &Value) -> Option<Value> {
    let id = msg.get("id").cloned();
    let method = msg["method"].as_str().unwrap_or_default();
    let result: Result<Value, (i64, String)> = match method {
        "initialize" => {
            let asked = msg["params"]["protocolVersion"]
                .as_str()
                .unwrap_or_default();
            let version = if VERSIONS.contains(&asked) {
                asked
            } else {
                VERSIONS[0]
            };
            let guidance = client.and_then(|c| c.guidance().ok());
            Ok(json!({
                "protocolVersion": version,
                "capabilities": {"tools": {"listChanged": false}},
                "serverInfo": {"name": "open-conduit", "version": env!("CARGO_PKG_VERSION")},
                "instructions": instructions(guidance.as_ref()),
            }))
        }
        "ping" => Ok(json!({})),
        "tools/list" => Ok(json!({ "tools": tools() })),
        "tools/call" => {
            let name = msg["params"]["name"].as_str().unwrap_or_default();
            let arguments = msg["params"]["arguments"].clone();
            // Every argument is held to the schema the tool publishes, before any call.
            match (tb::check_input(name, &arguments), client) {
                (Err(why), _) => Ok(json!({"isError": true,
                    "content": [{"type": "text", "text": format!("invalid: {why}")}]})),
                (Ok(()), Some(c)) => Ok(tool_result(c, name, arguments)),
                (Ok(()), None) => Ok(json!({"isError": true, "content": [{"type": "text",
                    "text": format!("setup: {} and {} must name the toolbelt", tb::ENV_ENDPOINT, tb::ENV_TOKEN_FILE)}]})),
            }
        }
        _ if id.is_none() => return None, // notifications/initialized and the like
        other => Err((-32601, format!("method not found: {other}"))),
    };
    let id = id?;
    Some(match result {
        Ok(r) => json!({"jsonrpc": "2.0", "id": id, "result": r}),
        Err((code, message)) => {
            json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}})
        }
    })
}

/// Serve stdin/stdout until stdin ends. Answers the exit status.
pub fn main() -> i32 {
    let client = match Client::from_env() {
        Ok(c) => Some(c),
        Err(e) => {
            eprintln!("open-conduit mcp: {e}; every tool call will say so");
            None
        }
    };
    let stdin = std::io::stdin();
    let mut input = stdin.lock();
    let mut out = std::io::stdout();
    loop {
        let mut line = String::new();
        match (&mut input).take(MAX_LINE).read_line(&mut line) {
            Ok(0) => return 0,
            Ok(_) => {}
            Err(e) => {
                eprintln!("open-conduit mcp: stdin: {e}");
                return 1;
            }
        }
        if line.trim().is_empty() {
            continue;
        }
        let reply = match serde_json::from_str::<Value>(&line) {
            Ok(msg) if msg.is_object() => answer(client.as_ref(), &msg),
            Ok(_) | Err(_) => Some(
                json!({"jsonrpc": "2.0", "id": null, "error": {"code": -32700, "message": "parse error: one JSON-RPC object per line"}}),
            ),
        };
        if let Some(r) = reply {
            if writeln!(out, "{r}").and_then(|()| out.flush()).is_err() {
                return 0;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn initialize_answers_its_latest_version_for_an_unknown_one() {
        let a = answer(
            None,
            &json!({"jsonrpc": "2.0", "id": 1, "method": "initialize",
                                     "params": {"protocolVersion": "1999-01-01"}}),
        )
        .unwrap();
        assert_eq!(a["result"]["protocolVersion"], VERSIONS[0]);
        let a = answer(
            None,
            &json!({"jsonrpc": "2.0", "id": 1, "method": "initialize",
                                     "params": {"protocolVersion": "2024-11-05"}}),
        )
        .unwrap();
        assert_eq!(a["result"]["protocolVersion"], "2024-11-05");
        assert!(answer(
            None,
            &json!({"jsonrpc": "2.0", "method": "notifications/initialized"})
        )
        .is_none());
        let a = answer(None, &json!({"jsonrpc": "2.0", "id": 2, "method": "nope"})).unwrap();
        assert_eq!(a["error"]["code"], -32601);
    }

    #[test]
    fn a_bad_argument_is_a_tool_error_naming_the_field() {
        let call = |name: &str, arguments: Value| {
            answer(
                None,
                &json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call",
                        "params": {"name": name, "arguments": arguments}}),
            )
            .unwrap()
        };
        for (name, arguments, field) in [
            (
                "wait",
                json!({"description": "d", "timeout_s": -1}),
                "timeout_s",
            ),
            (
                "wait",
                json!({"description": "d", "timeout_s": "5"}),
                "timeout_s",
            ),
            (
                "emit",
                json!({"type": "agent.x", "payload": "text"}),
                "payload",
            ),
        ] {
            let a = call(name, arguments);
            assert_eq!(a["result"]["isError"], true, "{a}");
            let text = a["result"]["content"][0]["text"]
                .as_str()
                .unwrap_or_default();
            assert!(
                text.starts_with(&format!("invalid: {field}: expected")),
                "{text}"
            );
        }
    }

    #[test]
    fn instructions_list_each_operation_with_its_fields_and_guidance() {
        let g = Guidance {
            operations: vec![protocol::toolbelt::OperationGuidance {
                name: "notes.add".into(),
                kind: "handler".into(),
                summary: "Add a note".into(),
                input: Some(json!({"properties": {"body": {}, "tag": {}}, "required": ["body"]})),
                guidance: "Keep notes short.".into(),
            }],
        };
        let text = instructions(Some(&g));
        assert!(text.starts_with(INSTRUCTIONS));
        assert!(
            text.contains("## Operations\n- notes.add: Add a note (input: body, tag?)"),
            "{text}"
        );
        assert!(text.contains("### notes.add\nKeep notes short."), "{text}");
        assert_eq!(instructions(None), INSTRUCTIONS);
    }

    #[test]
    fn an_unreachable_endpoint_is_told_apart_from_a_timeout() {
        let dir = std::env::temp_dir().join(format!("oc-mcp-unit-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let token = dir.join("token");
        std::fs::write(&token, "t").unwrap();
        let c = Client {
            endpoint: dir.join("nobody.sock"),
            token_file: token.clone(),
            timeout: Duration::from_millis(200),
        };
        let e = c
            .call("read_context", json!({}), String::new())
            .unwrap_err();
        assert!(matches!(e, Failure::Unreachable(_)), "{e}");
        assert!(e.to_string().starts_with("unreachable"));
        // A listener that never answers: a timeout, not "unreachable".
        let sock = dir.join("silent.sock");
        let _l = std::os::unix::net::UnixListener::bind(&sock).unwrap();
        let c = Client {
            endpoint: sock,
            token_file: token,
            timeout: Duration::from_millis(200),
        };
        let e = c
            .call("read_context", json!({}), String::new())
            .unwrap_err();
        assert_eq!(e, Failure::Timeout);
        assert!(!e.to_string().contains("unreachable"));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
