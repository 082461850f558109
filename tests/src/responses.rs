//! A local stand-in for the OpenAI Responses API, for driving the real Codex CLI
//! offline (a `model_providers.<id>` whose `base_url` is
//! `http://127.0.0.1:<port>/v1` and whose `wire_api` is `responses`).
//!
//! Plain HTTP/1.1 on 127.0.0.1, one request per connection (`Connection: close`),
//! one thread per connection, the same shape as [`crate::messages`]. `POST
//! .../responses` is answered by the test's script ([`Script`]): a response of
//! output items (`message` with text, `function_call`), streamed as server-sent
//! events when the request asks for `stream` (`response.created`,
//! `response.in_progress`, per item `response.output_item.added`, for a message
//! `response.content_part.added`, `response.output_text.delta` in two pieces,
//! `response.output_text.done`, `response.content_part.done`, for a function call
//! `response.function_call_arguments.delta` in two pieces and
//! `response.function_call_arguments.done`, then `response.output_item.done`; last
//! `response.completed` with the usage), else one JSON response; an error status
//! with an OpenAI error body (a usage limit, with the `x-codex-primary-*` headers
//! ChatGPT's Codex backend sends; a rate limit); or a stall (the stream
//! opens with `response.created` and then holds, bounded, so a test can interrupt
//! the client mid-turn). `GET .../models` answers an empty list; anything else is a
//! 404. Every request is logged in [`ResponsesApi::requests`]; every request body
//! is bounded ([`MAX_BODY`]).

use serde_json::{json, Value};
use std::io::Write;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

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
    /// The body as JSON (`Null` when empty, compressed or not JSON).
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

    /// A `POST .../responses` (the turn's model calls).
    pub fn is_response(&self) -> bool {
        self.method == "POST"
            && self
                .path
                .split('?')
                .next()
                .is_some_and(|p| p.ends_with("/responses"))
    }

    /// The input items (the conversation the client sends, whole, every time).
    pub fn input(&self) -> Vec<Value> {
        self.body["input"].as_array().cloned().unwrap_or_default()
    }

    /// The names of the tools the request offers: a function's name, and a
    /// namespace's functions as `<namespace>__<name>` (Codex offers an MCP server's
    /// tools in a namespace `mcp__<server>`).
    pub fn tools(&self) -> Vec<String> {
        let mut out = Vec::new();
        for t in self.body["tools"].as_array().into_iter().flatten() {
            let Some(name) = t["name"].as_str() else {
                continue;
            };
            match t["tools"].as_array() {
                Some(inner) if t["type"] == "namespace" => {
                    for f in inner {
                        if let Some(f) = f["name"].as_str() {
                            out.push(format!("{name}__{f}"));
                        }
                    }
                }
                _ => out.push(name.to_owned()),
            }
        }
        out
    }

    /// The `function_call_output` items of the input (the tool results sent back).
    pub fn tool_outputs(&self) -> Vec<Value> {
        self.input()
            .into_iter()
            .filter(|i| i["type"] == "function_call_output")
            .collect()
    }

    /// The text of a `function_call_output` item: its `output` string, or its
    /// parts' texts joined by newlines.
    pub fn output_text(item: &Value) -> String {
        match &item["output"] {
            Value::String(s) => s.clone(),
            Value::Array(parts) => parts
                .iter()
                .filter_map(|p| p["text"].as_str())
                .collect::<Vec<_>>()
                .join("\n"),
            other => other.to_string(),
        }
    }

    /// The texts of the input's messages of `role` (`user`, `assistant`,
    /// `developer`), one per message, parts joined.
    pub fn messages(&self, role: &str) -> Vec<String> {
        self.input()
            .iter()
            .filter(|i| i["type"] == "message" && i["role"] == role)
            .map(|m| match &m["content"] {
                Value::String(s) => s.clone(),
                Value::Array(parts) => parts
                    .iter()
                    .filter_map(|p| p["text"].as_str())
                    .collect::<String>(),
                _ => String::new(),
            })
            .collect()
    }
}

/// Token counts of one response, as the API reports them in `response.completed`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Usage {
    /// `input_tokens` (cached ones included, as OpenAI counts).
    pub input_tokens: u64,
    /// `input_tokens_details.cached_tokens`.
    pub cached_tokens: u64,
    /// `output_tokens` (reasoning ones included).
    pub output_tokens: u64,
    /// `output_tokens_details.reasoning_tokens`.
    pub reasoning_tokens: u64,
}

impl Usage {
    fn json(&self) -> Value {
        json!({
            "input_tokens": self.input_tokens,
            "input_tokens_details": {"cached_tokens": self.cached_tokens},
            "output_tokens": self.output_tokens,
            "output_tokens_details": {"reasoning_tokens": self.reasoning_tokens},
            "total_tokens": self.input_tokens + self.output_tokens,
        })
    }
}

/// What the script answers a `responses` request with.
#[derive(Debug, Clone)]
pub enum Reply {
    /// A completed response of these output items ([`Reply::text`],
    /// [`Reply::function_call`]) with this usage.
    Response {
        /// The output items.
        output: Vec<Value>,
        /// The token counts.
        usage: Usage,
    },
    /// An error status with this JSON body.
    Error {
        /// The HTTP status.
        status: u16,
        /// More headers.
        headers: Vec<(String, String)>,
        /// The body (`{"error": {...}}`).
        body: Value,
    },
    /// A stream that opens (`response.created`) and then sends nothing until
    /// [`ResponsesApi::release`] or [`crate::HANG`], then closes without
    /// `response.completed`.
    Stall,
}

impl Reply {
    /// An assistant `message` item of one `output_text` part (its `id` is given when
    /// the response is sent).
    pub fn text(text: &str) -> Value {
        json!({"type": "message", "role": "assistant", "status": "completed",
               "content": [{"type": "output_text", "text": text, "annotations": []}]})
    }

    /// A `function_call` item: `call_id`, the function `name` in `namespace` (the
    /// namespace a tool was offered in, as `mcp__<server>`; `None` for a top-level
    /// function), and its `arguments` (sent as a JSON string, as the API does).
    pub fn function_call(
        call_id: &str,
        namespace: Option<&str>,
        name: &str,
        arguments: Value,
    ) -> Value {
        let mut item = json!({"type": "function_call", "status": "completed", "call_id": call_id,
                              "name": name, "arguments": arguments.to_string()});
        if let Some(ns) = namespace {
            item["namespace"] = json!(ns);
        }
        item
    }

    /// A response of `output` with `usage`.
    pub fn response(output: Vec<Value>, usage: Usage) -> Reply {
        Reply::Response { output, usage }
    }

    /// The 429 an account past its usage limit gets (as ChatGPT's Codex backend
    /// answers): an error of type `usage_limit_reached` whose limit resets at
    /// `resets_at` (Unix seconds), with the rate-limit headers Codex reads
    /// (`x-codex-primary-used-percent`, `-window-minutes`, `-reset-at`).
    pub fn usage_limit(resets_at: u64) -> Reply {
        let header = |n: &str, v: String| (format!("x-codex-primary-{n}"), v);
        Reply::Error {
            status: 429,
            headers: vec![
                header("used-percent", "100".into()),
                header("window-minutes", "300".into()),
                header("reset-at", resets_at.to_string()),
            ],
            body: json!({"error": {"type": "usage_limit_reached",
                "message": "The usage limit has been reached", "plan_type": "pro",
                "resets_at": resets_at}}),
        }
    }

    /// A plain 429 rate limit (`rate_limit_exceeded`).
    pub fn rate_limit() -> Reply {
        Reply::Error {
            status: 429,
            headers: Vec::new(),
            body: json!({"error": {"type": "rate_limit_exceeded", "code": "rate_limit_exceeded",
                "message": "Rate limit reached for requests", "param": null}}),
        }
    }
}

/// The test's script: the answer to each `responses` request.
pub type Script = dyn Fn(&Request) -> Reply + Send + Sync;

/// The running server. Dropping it stops accepting (and releases stalls).
pub struct ResponsesApi {
    /// Where it listens.
    pub addr: SocketAddr,
    requests: Arc<Mutex<Vec<Request>>>,
    stop: Arc<AtomicBool>,
    release: Arc<AtomicBool>,
}

/// What every connection's thread shares.
struct Shared {
    requests: Arc<Mutex<Vec<Request>>>,
    script: Box<Script>,
    ids: AtomicU64,
    release: Arc<AtomicBool>,
}

impl ResponsesApi {
    /// Starts the server on an ephemeral port of 127.0.0.1.
    pub fn start(
        script: impl Fn(&Request) -> Reply + Send + Sync + 'static,
    ) -> std::io::Result<Self> {
        let listener = TcpListener::bind(("127.0.0.1", 0))?;
        let addr = listener.local_addr()?;
        let requests = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let release = Arc::new(AtomicBool::new(false));
        let shared = Arc::new(Shared {
            requests: Arc::clone(&requests),
            script: Box::new(script),
            ids: AtomicU64::new(1),
            release: Arc::clone(&release),
        });
        {
            let stop = Arc::clone(&stop);
            std::thread::spawn(move || {
                for conn in listener.incoming() {
                    if stop.load(Ordering::SeqCst) {
                        return;
                    }
                    let Ok(conn) = conn else { continue };
                    let shared = Arc::clone(&shared);
                    std::thread::spawn(move || {
                        if let Err(e) = serve(conn, &shared) {
                            eprintln!("responses api: {e}");
                        }
                    });
                }
            });
        }
        Ok(ResponsesApi {
            addr,
            requests,
            stop,
            release,
        })
    }

    /// `http://<ip>:<port>/v1`, for a provider's `base_url` (the client appends
    /// `/responses`).
    pub fn base_url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }

    /// Every request so far, in order.
    pub fn requests(&self) -> Vec<Request> {
        self.requests
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// The `responses` requests so far.
    pub fn responses(&self) -> Vec<Request> {
        self.requests()
            .into_iter()
            .filter(Request::is_response)
            .collect()
    }

    /// End every stall now (their streams close without `response.completed`).
    pub fn release(&self) {
        self.release.store(true, Ordering::SeqCst);
    }
}

impl Drop for ResponsesApi {
    fn drop(&mut self) {
        self.release.store(true, Ordering::SeqCst);
        self.stop.store(true, Ordering::SeqCst);
        let _ = TcpStream::connect(self.addr);
    }
}

fn read_request(conn: &TcpStream) -> std::io::Result<Request> {
    let raw = crate::http1::read_request(conn, MAX_HEAD, MAX_BODY)?;
    // A compressed body (`content-encoding`) is kept as `Null`: the headers show it.
    let body = if raw.header("content-encoding").is_some() {
        Value::Null
    } else {
        serde_json::from_slice(&raw.body).unwrap_or(Value::Null)
    };
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
    headers: &[(String, String)],
    body: &[u8],
) -> std::io::Result<()> {
    let mut all = vec![("content-type".to_string(), "application/json".to_string())];
    all.extend(headers.iter().cloned());
    crate::http1::respond(conn, status, &all, body)
}

/// Cut `s` in two at a character boundary near its middle.
fn halves(s: &str) -> [&str; 2] {
    let cut = (0..=s.len() / 2)
        .rev()
        .find(|i| s.is_char_boundary(*i))
        .unwrap_or(0);
    [&s[..cut], &s[cut..]]
}

/// The server-sent events of one streamed response (`items` have their ids).
fn stream(response: &Value, items: &[Value]) -> String {
    let mut out = String::new();
    let mut seq = 0u64;
    let mut event = |name: &str, mut data: Value| {
        data["type"] = json!(name);
        data["sequence_number"] = json!(seq);
        seq += 1;
        out.push_str(&format!("event: {name}\ndata: {data}\n\n"));
    };
    let mut opening = response.clone();
    opening["status"] = json!("in_progress");
    opening["output"] = json!([]);
    opening["usage"] = Value::Null;
    event("response.created", json!({"response": opening}));
    event("response.in_progress", json!({"response": opening}));
    for (index, item) in items.iter().enumerate() {
        let id = item["id"].clone();
        let mut added = item.clone();
        added["status"] = json!("in_progress");
        if item["type"] == "function_call" {
            added["arguments"] = json!("");
            event(
                "response.output_item.added",
                json!({"output_index": index, "item": added}),
            );
            let arguments = item["arguments"].as_str().unwrap_or_default();
            for part in halves(arguments) {
                event(
                    "response.function_call_arguments.delta",
                    json!({"item_id": id, "output_index": index, "delta": part}),
                );
            }
            event(
                "response.function_call_arguments.done",
                json!({"item_id": id, "output_index": index, "arguments": arguments}),
            );
        } else {
            added["content"] = json!([]);
            event(
                "response.output_item.added",
                json!({"output_index": index, "item": added}),
            );
            for (c, part) in item["content"].as_array().into_iter().flatten().enumerate() {
                let text = part["text"].as_str().unwrap_or_default();
                event(
                    "response.content_part.added",
                    json!({"item_id": id, "output_index": index, "content_index": c,
                           "part": {"type": "output_text", "text": "", "annotations": []}}),
                );
                for piece in halves(text) {
                    event(
                        "response.output_text.delta",
                        json!({"item_id": id, "output_index": index, "content_index": c,
                               "delta": piece, "logprobs": []}),
                    );
                }
                event(
                    "response.output_text.done",
                    json!({"item_id": id, "output_index": index, "content_index": c,
                           "text": text, "logprobs": []}),
                );
                event(
                    "response.content_part.done",
                    json!({"item_id": id, "output_index": index, "content_index": c,
                           "part": part}),
                );
            }
        }
        event(
            "response.output_item.done",
            json!({"output_index": index, "item": item}),
        );
    }
    event("response.completed", json!({"response": response}));
    out
}

fn serve(mut conn: TcpStream, shared: &Shared) -> std::io::Result<()> {
    let req = read_request(&conn)?;
    shared
        .requests
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .push(req.clone());
    let route = req.path.split('?').next().unwrap_or_default();
    if req.method == "GET" && route.ends_with("/models") {
        return respond(
            &mut conn,
            200,
            &[],
            br#"{"object":"list","data":[],"models":[]}"#,
        );
    }
    if !req.is_response() {
        eprintln!("responses api: unknown request {} {}", req.method, req.path);
        let body = json!({"error": {"type": "invalid_request_error", "code": "not_found",
            "message": format!("no route {} {}", req.method, req.path), "param": null}});
        return respond(&mut conn, 404, &[], body.to_string().as_bytes());
    }
    let n = shared.ids.fetch_add(1, Ordering::SeqCst);
    let id = format!("resp_{n:04}");
    let model = req.body["model"]
        .as_str()
        .unwrap_or("test-model")
        .to_owned();
    let (output, usage) = match (shared.script)(&req) {
        Reply::Error {
            status,
            headers,
            body,
        } => {
            return respond(&mut conn, status, &headers, body.to_string().as_bytes());
        }
        Reply::Stall => return stall(conn, &id, &model, &shared.release),
        Reply::Response { output, usage } => (output, usage),
    };
    let items: Vec<Value> = output
        .into_iter()
        .enumerate()
        .map(|(i, mut item)| {
            if item.get("id").is_none() {
                let prefix = if item["type"] == "function_call" {
                    "fc"
                } else {
                    "msg"
                };
                item["id"] = json!(format!("{prefix}_{n:04}_{i}"));
            }
            item
        })
        .collect();
    let response = json!({"id": id, "object": "response", "created_at": 0, "status": "completed",
        "model": model, "output": items, "usage": usage.json(), "error": null,
        "incomplete_details": null});
    if req.body["stream"] != json!(true) {
        return respond(&mut conn, 200, &[], response.to_string().as_bytes());
    }
    let head = "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncache-control: no-cache\r\nconnection: close\r\n\r\n";
    conn.write_all(head.as_bytes())?;
    conn.write_all(stream(&response, &items).as_bytes())?;
    conn.flush()
}

/// Open a stream with `response.created`, then hold it until released, the client
/// goes away, or [`crate::HANG`].
fn stall(mut conn: TcpStream, id: &str, model: &str, release: &AtomicBool) -> std::io::Result<()> {
    let created = json!({"type": "response.created", "sequence_number": 0,
        "response": {"id": id, "object": "response", "status": "in_progress", "model": model,
                     "output": []}});
    let head = "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncache-control: no-cache\r\nconnection: close\r\n\r\n";
    conn.write_all(head.as_bytes())?;
    conn.write_all(format!("event: response.created\ndata: {created}\n\n").as_bytes())?;
    conn.flush()?;
    let deadline = Instant::now() + crate::HANG;
    while !release.load(Ordering::SeqCst) && Instant::now() < deadline {
        // A comment line: harmless to the client, and an error once it has gone.
        if conn.write_all(b": hold\n\n").is_err() {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Ok(())
}
