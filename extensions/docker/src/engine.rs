//! The Docker Engine API on its unix socket: one request per connection with hyper's
//! HTTP/1.1 client on tokio's `UnixStream`, every answer's body bounded
//! ([`MAX_ANSWER_BYTES`]) and every exchange bounded in time.

use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use serde_json::Value;
use std::time::Duration;

/// The API version every path is sent with (podman 4 serves 1.41; Docker 20.10+
/// too).
pub const API_VERSION: &str = "v1.41";
/// The most bytes of an answer's body read.
pub const MAX_ANSWER_BYTES: usize = 16 << 20;
/// The longest one exchange may take (a `stop` adds its grace).
pub const EXCHANGE_BOUND: Duration = Duration::from_secs(30);
/// The most bytes of an engine's error message repeated.
const MAX_MESSAGE: usize = 400;

/// Why a request failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EngineError {
    /// The engine did not answer: cannot connect, the connection broke, or no answer
    /// in time. The message names the socket.
    Unavailable(String),
    /// It answered, but the answer could not be read (over the bound, not JSON).
    Answer(String),
}

impl std::fmt::Display for EngineError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            EngineError::Unavailable(m) | EngineError::Answer(m) => f.write_str(m),
        }
    }
}

/// An answer: its status and body.
#[derive(Debug, Clone)]
pub struct Answer {
    /// The HTTP status.
    pub status: u16,
    /// The body (at most [`MAX_ANSWER_BYTES`]).
    pub body: Vec<u8>,
}

impl Answer {
    /// The body as JSON (null when it is not).
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or(Value::Null)
    }

    /// The engine's error message (`message` of its JSON body, else the text),
    /// clipped.
    pub fn message(&self) -> String {
        let v = self.json();
        let text = match v.get("message").and_then(Value::as_str) {
            Some(m) => m.to_owned(),
            None => String::from_utf8_lossy(&self.body).trim().to_owned(),
        };
        protocol::wire::clip_line(&text, MAX_MESSAGE)
    }

    /// Whether the status is 2xx.
    pub fn ok(&self) -> bool {
        (200..300).contains(&self.status)
    }
}

/// Percent-encodes a path segment or query value.
pub fn enc(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// An error and its sources, `: `-separated (hyper's own message is terse).
pub fn chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut out = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        out.push_str(": ");
        out.push_str(&s.to_string());
        source = s.source();
    }
    out
}

/// The engine on one unix socket.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Engine {
    /// Its socket.
    pub socket: String,
}

impl Engine {
    /// The engine at `socket`.
    pub fn new(socket: &str) -> Engine {
        Engine {
            socket: socket.to_owned(),
        }
    }

    /// "the engine at S is unavailable: why".
    pub fn unavailable(&self, why: impl std::fmt::Display) -> EngineError {
        EngineError::Unavailable(format!(
            "the engine at {} is unavailable: {why}",
            self.socket
        ))
    }

    /// The full path of an API `path` (`/containers/json`): `/v1.41/containers/json`
    /// (`/_ping` as it is).
    pub fn full(path: &str) -> String {
        if path == "/_ping" {
            path.to_owned()
        } else {
            format!("/{API_VERSION}{path}")
        }
    }

    /// A connected HTTP/1.1 client on the socket, its connection driven (with
    /// upgrades) on a task of its own.
    pub async fn connect(
        &self,
    ) -> Result<hyper::client::conn::http1::SendRequest<Full<Bytes>>, EngineError> {
        let stream = tokio::net::UnixStream::connect(&self.socket)
            .await
            .map_err(|e| self.unavailable(format!("cannot connect: {e}")))?;
        let (sender, conn) =
            hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
                .await
                .map_err(|e| self.unavailable(chain(&e)))?;
        tokio::spawn(async move {
            let _ = conn.with_upgrades().await;
        });
        Ok(sender)
    }

    /// A request of `method` on `path` with a JSON body, or none.
    pub fn request(
        method: &str,
        path: &str,
        body: Option<&Value>,
    ) -> Result<hyper::Request<Full<Bytes>>, EngineError> {
        let bytes = match body {
            Some(v) => serde_json::to_vec(v).map_err(|e| EngineError::Answer(e.to_string()))?,
            None => Vec::new(),
        };
        let mut req = hyper::Request::builder()
            .method(method)
            .uri(Engine::full(path))
            // Go's server refuses an HTTP/1.1 request without Host.
            .header("Host", "docker");
        if body.is_some() {
            req = req.header("Content-Type", "application/json");
        }
        req.body(Full::new(Bytes::from(bytes)))
            .map_err(|e| EngineError::Answer(format!("bad request {method} {path}: {e}")))
    }

    /// One exchange, bounded by `bound`.
    pub async fn call_within(
        &self,
        method: &str,
        path: &str,
        body: Option<&Value>,
        bound: Duration,
    ) -> Result<Answer, EngineError> {
        let req = Engine::request(method, path, body)?;
        let exchange = async {
            let mut sender = self.connect().await?;
            let answer = sender
                .send_request(req)
                .await
                .map_err(|e| self.unavailable(chain(&e)))?;
            let status = answer.status().as_u16();
            let body = http_body_util::Limited::new(answer.into_body(), MAX_ANSWER_BYTES)
                .collect()
                .await
                .map_err(|e| {
                    EngineError::Answer(format!(
                        "{method} {path} on {}: reading the answer (at most {MAX_ANSWER_BYTES} bytes): {}",
                        self.socket,
                        chain(&*e)
                    ))
                })?
                .to_bytes()
                .to_vec();
            Ok(Answer { status, body })
        };
        match tokio::time::timeout(bound, exchange).await {
            Ok(r) => r,
            Err(_) => Err(self.unavailable(format!("{method} {path}: no answer within {bound:?}"))),
        }
    }

    /// One exchange, bounded by [`EXCHANGE_BOUND`].
    pub async fn call(
        &self,
        method: &str,
        path: &str,
        body: Option<&Value>,
    ) -> Result<Answer, EngineError> {
        self.call_within(method, path, body, EXCHANGE_BOUND).await
    }
}
