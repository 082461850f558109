//! A local stand-in for the Anthropic Messages API, for driving the real Claude Code
//! CLI offline (`ANTHROPIC_BASE_URL=http://127.0.0.1:<port>`).
//!
//! Plain HTTP/1.1 on 127.0.0.1, one request per connection (`Connection: close`),
//! one thread per connection. `POST /v1/messages` is answered by the test's script
//! ([`Script`]): a message (streamed as server-sent events when the request asks for
//! `stream`: `message_start`, `content_block_start`/`content_block_delta`/
//! `content_block_stop` per block (text as `text_delta`, a tool use as
//! `input_json_delta` in two pieces), `message_delta` with the stop reason and the
//! output tokens, `message_stop`; else one JSON message), or an error status.
//! `POST /v1/messages/count_tokens` answers a fixed count, a `GET` an empty list;
//! anything else is a 404 and is logged, like every request, in [`MessagesApi::requests`].
//! Every request body is bounded ([`MAX_BODY`]).

use serde_json::{json, Value};
use std::io::Write;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// The largest request body read.
pub const MAX_BODY: usize = 32 * 1024 * 1024;
/// The longest request head read.
const MAX_HEAD: usize = 64 * 1024;

/// One request the server saw.
#[derive(Debug, Clone)]
pub struct Request {
    /// `GET`, `POST`, ...
    pub method: String,
    /// The path with its query.
    pub path: String,
    /// The headers, names lowercased.
    pub headers: Vec<(String, String)>,
    /// The body as JSON (`Null` when empty or not JSON).
    pub body: Value,
}

impl Request {
    /// A header's value.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// A `POST /v1/messages` (not `count_tokens`).
    pub fn is_message(&self) -> bool {
        self.method == "POST" && self.path.split('?').next() == Some("/v1/messages")
    }

    /// The names of the tools the request offers.
    pub fn tools(&self) -> Vec<String> {
        self.body["tools"]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|t| t["name"].as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default()
    }

    /// The `tool_result` blocks of the last message, with their tool use IDs.
    pub fn tool_results(&self) -> Vec<Value> {
        self.body["messages"]
            .as_array()
            .and_then(|m| m.last())
            .and_then(|m| m["content"].as_array())
            .map(|c| {
                c.iter()
                    .filter(|b| b["type"] == "tool_result")
                    .cloned()
                    .collect()
            })
            .unwrap_or_default()
    }

    /// The text of every message, joined (what the model was told).
    pub fn text(&self) -> String {
        let mut out = String::new();
        if let Some(msgs) = self.body["messages"].as_array() {
            for m in msgs {
                match &m["content"] {
                    Value::String(s) => out.push_str(s),
                    Value::Array(blocks) => {
                        for b in blocks {
                            if let Some(t) = b["text"].as_str() {
                                out.push_str(t);
                            }
                            if let Some(t) = b["content"].as_str() {
                                out.push_str(t);
                            }
                            if let Some(parts) = b["content"].as_array() {
                                for p in parts {
                                    out.push_str(p["text"].as_str().unwrap_or_default());
                                }
                            }
                        }
                    }
                    _ => {}
                }
                out.push('\n');
            }
        }
        out
    }
}

/// What the script answers a message request with.
#[derive(Debug, Clone)]
pub enum Reply {
    /// An assistant message of these content blocks (`text` or `tool_use`), with
    /// this many input and output tokens.
    Message {
        /// The content blocks.
        blocks: Vec<Value>,
        /// Input tokens (uncached).
        input_tokens: u64,
        /// Output tokens.
        output_tokens: u64,
    },
    /// An error status with an Anthropic error body, `x-should-retry: false`.
    Error {
        /// The HTTP status.
        status: u16,
        /// The error `type` (`rate_limit_error`, ...).
        kind: String,
        /// The message.
        message: String,
    },
}

impl Reply {
    /// A text block.
    pub fn text(text: &str) -> Value {
        json!({"type": "text", "text": text})
    }

    /// A tool use block.
    pub fn tool_use(id: &str, name: &str, input: Value) -> Value {
        json!({"type": "tool_use", "id": id, "name": name, "input": input})
    }

    /// A message of `blocks` with the given token counts.
    pub fn message(blocks: Vec<Value>, input_tokens: u64, output_tokens: u64) -> Reply {
        Reply::Message {
            blocks,
            input_tokens,
            output_tokens,
        }
    }
}

/// The test's script: the answer to each message request.
pub type Script = dyn Fn(&Request) -> Reply + Send + Sync;

/// The running server. Dropping it stops accepting.
pub struct MessagesApi {
    /// Where it listens.
    pub addr: SocketAddr,
    requests: Arc<Mutex<Vec<Request>>>,
    stop: Arc<AtomicBool>,
}

impl MessagesApi {
    /// Starts the server on an ephemeral port of 127.0.0.1.
    pub fn start(
        script: impl Fn(&Request) -> Reply + Send + Sync + 'static,
    ) -> std::io::Result<Self> {
        Self::start_on("127.0.0.1", script)
    }

    /// Starts the server on an ephemeral port of `ip` (a sandboxed claude reaches
    /// `127.0.0.2` through srt's proxy, which `127.0.0.1` bypasses as `NO_PROXY`).
    pub fn start_on(
        ip: &str,
        script: impl Fn(&Request) -> Reply + Send + Sync + 'static,
    ) -> std::io::Result<Self> {
        let listener = TcpListener::bind((ip, 0))?;
        let addr = listener.local_addr()?;
        let requests = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let script: Arc<Script> = Arc::new(script);
        let ids = Arc::new(AtomicU64::new(1));
        {
            let requests = Arc::clone(&requests);
            let stop = Arc::clone(&stop);
            std::thread::spawn(move || {
                for conn in listener.incoming() {
                    if stop.load(Ordering::SeqCst) {
                        return;
                    }
                    let Ok(conn) = conn else { continue };
                    let requests = Arc::clone(&requests);
                    let script = Arc::clone(&script);
                    let ids = Arc::clone(&ids);
                    std::thread::spawn(move || {
                        if let Err(e) = serve(conn, &requests, &*script, &ids) {
                            eprintln!("messages api: {e}");
                        }
                    });
                }
            });
        }
        Ok(MessagesApi {
            addr,
            requests,
            stop,
        })
    }

    /// `http://<ip>:<port>`, for `ANTHROPIC_BASE_URL`.
    pub fn base_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Every request so far, in order.
    pub fn requests(&self) -> Vec<Request> {
        self.requests
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// The message requests so far.
    pub fn messages(&self) -> Vec<Request> {
        self.requests()
            .into_iter()
            .filter(Request::is_message)
            .collect()
    }
}

impl Drop for MessagesApi {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        let _ = TcpStream::connect(self.addr);
    }
}

fn read_request(conn: &TcpStream) -> std::io::Result<Request> {
    let raw = crate::http1::read_request(conn, MAX_HEAD, MAX_BODY)?;
    let body = serde_json::from_slice(&raw.body).unwrap_or(Value::Null);
    Ok(Request {
        method: raw.method,
        path: raw.path,
        headers: raw.headers,
        body,
    })
}

fn respond(
    conn: &mut TcpStream,
    status: u16,
    headers: &[(&str, &str)],
    body: &[u8],
) -> std::io::Result<()> {
    crate::http1::respond(conn, status, headers, body)
}

fn serve(
    mut conn: TcpStream,
    requests: &Mutex<Vec<Request>>,
    script: &Script,
    ids: &AtomicU64,
) -> std::io::Result<()> {
    let req = read_request(&conn)?;
    requests
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .push(req.clone());
    let json_type = [("content-type", "application/json")];
    let route = req.path.split('?').next().unwrap_or_default();
    if req.method == "GET" {
        return respond(
            &mut conn,
            200,
            &json_type,
            br#"{"data":[],"has_more":false}"#,
        );
    }
    if req.method == "POST" && route == "/v1/messages/count_tokens" {
        return respond(&mut conn, 200, &json_type, br#"{"input_tokens":100}"#);
    }
    if !req.is_message() {
        eprintln!("messages api: unknown request {} {}", req.method, req.path);
        let body = json!({"type": "error", "error": {"type": "not_found_error", "message": format!("no route {}", req.path)}});
        return respond(&mut conn, 404, &json_type, body.to_string().as_bytes());
    }
    let model = req.body["model"]
        .as_str()
        .unwrap_or("claude-test")
        .to_owned();
    let (blocks, input_tokens, output_tokens) = match script(&req) {
        Reply::Error {
            status,
            kind,
            message,
        } => {
            let body = json!({"type": "error", "error": {"type": kind, "message": message}});
            return respond(
                &mut conn,
                status,
                &[
                    ("content-type", "application/json"),
                    ("x-should-retry", "false"),
                ],
                body.to_string().as_bytes(),
            );
        }
        Reply::Message {
            blocks,
            input_tokens,
            output_tokens,
        } => (blocks, input_tokens, output_tokens),
    };
    let id = format!("msg_{:04}", ids.fetch_add(1, Ordering::SeqCst));
    let stop_reason = if blocks.iter().any(|b| b["type"] == "tool_use") {
        "tool_use"
    } else {
        "end_turn"
    };
    if req.body["stream"] != json!(true) {
        let body = json!({"id": id, "type": "message", "role": "assistant", "model": model,
            "content": blocks, "stop_reason": stop_reason, "stop_sequence": null,
            "usage": {"input_tokens": input_tokens, "output_tokens": output_tokens}});
        return respond(&mut conn, 200, &json_type, body.to_string().as_bytes());
    }
    let mut events = String::new();
    let mut event = |name: &str, data: Value| {
        events.push_str(&format!("event: {name}\ndata: {data}\n\n"));
    };
    event(
        "message_start",
        json!({"type": "message_start", "message": {"id": id, "type": "message", "role": "assistant",
            "model": model, "content": [], "stop_reason": null, "stop_sequence": null,
            "usage": {"input_tokens": input_tokens, "output_tokens": 1,
                      "cache_read_input_tokens": 0, "cache_creation_input_tokens": 0}}}),
    );
    for (index, b) in blocks.iter().enumerate() {
        if b["type"] == "tool_use" {
            event(
                "content_block_start",
                json!({"type": "content_block_start", "index": index,
                    "content_block": {"type": "tool_use", "id": b["id"], "name": b["name"], "input": {}}}),
            );
            let input = b["input"].to_string();
            let cut = input.len() / 2;
            let cut = (0..=cut)
                .rev()
                .find(|i| input.is_char_boundary(*i))
                .unwrap_or(0);
            for part in [&input[..cut], &input[cut..]] {
                event(
                    "content_block_delta",
                    json!({"type": "content_block_delta", "index": index,
                        "delta": {"type": "input_json_delta", "partial_json": part}}),
                );
            }
        } else {
            event(
                "content_block_start",
                json!({"type": "content_block_start", "index": index,
                    "content_block": {"type": "text", "text": ""}}),
            );
            event(
                "content_block_delta",
                json!({"type": "content_block_delta", "index": index,
                    "delta": {"type": "text_delta", "text": b["text"]}}),
            );
        }
        event(
            "content_block_stop",
            json!({"type": "content_block_stop", "index": index}),
        );
    }
    event(
        "message_delta",
        json!({"type": "message_delta", "delta": {"stop_reason": stop_reason, "stop_sequence": null},
            "usage": {"output_tokens": output_tokens}}),
    );
    event("message_stop", json!({"type": "message_stop"}));
    let head = "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncache-control: no-cache\r\nconnection: close\r\n\r\n";
    conn.write_all(head.as_bytes())?;
    conn.write_all(events.as_bytes())?;
    conn.flush()
}
