//! ingressd: the HTTP webhook intake of Open Conduit.
//!
//! [`Server::serve`] answers HTTP/1.1 on a listening TCP socket with hyper's server
//! (keep-alive, `Content-Length` and chunked bodies, `Expect: 100-continue`), within
//! bounded heads, bodies, times and connections.
//! A `POST` on a webhook path ([`Routes`]) becomes a [`Delivery`] handed to an [`Intake`],
//! whose [`Answer`] (sent only once the events are durable) goes back to the sender;
//! an [`IntakeError`] becomes a 4xx or 5xx, never a 2xx. `GET /healthz` asks
//! [`Intake::healthy`], and `GET /metrics` serves the counters in Prometheus text format,
//! with every other daemon's gathered over the bus ([`Intake::metrics`]).

pub mod accesslog;
pub mod cli;
mod handler;
mod http;
pub mod intake;
mod metrics;
pub mod reconcile;
mod routes;
mod server;

use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::time::Duration;

pub use routes::{RouteMatch, Routes};
pub use server::Server;

/// A boxed, sendable future: what an [`Intake`] returns.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// One webhook request, as received: handed to the extension that owns its path.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Delivery {
    /// The request path, without the query.
    pub path: String,
    /// The registered webhook path that matched `path` (a prefix of it, or `path` itself).
    pub route: String,
    /// The extension that owns `route`.
    pub owner: String,
    /// The ingress source `route` feeds (empty when not known).
    pub source: String,
    /// The request method (`POST`).
    pub method: String,
    /// The query string without its `?`; empty when there is none.
    pub query: String,
    /// The headers, names lowercased: in the order of each name's first appearance,
    /// a name's values in the order received.
    pub headers: Vec<(String, Vec<u8>)>,
    /// The body, decoded from its transfer encoding.
    pub body: Vec<u8>,
    /// The peer's address.
    pub remote: SocketAddr,
}

impl Delivery {
    /// The first header named `name` (case-insensitive).
    pub fn header(&self, name: &str) -> Option<&[u8]> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_slice())
    }
}

/// The owning extension's HTTP answer to a [`Delivery`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Answer {
    /// The status code (100 to 599; anything else is answered 500).
    pub status: u16,
    /// Extra headers. `Content-Length`, `Transfer-Encoding` and `Connection` are the
    /// server's own and dropped here, as is any header that cannot be sent (a name
    /// that is not a token, a line break or other control byte in a value).
    pub headers: Vec<(String, String)>,
    /// The body.
    pub body: Vec<u8>,
}

impl Answer {
    /// An answer with a plain-text body.
    pub fn text(status: u16, body: impl Into<String>) -> Answer {
        Answer {
            status,
            headers: vec![(
                "Content-Type".to_owned(),
                "text/plain; charset=utf-8".to_owned(),
            )],
            body: body.into().into_bytes(),
        }
    }
}

/// Why a delivery was not accepted. Each maps to a status that is never a 2xx.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum IntakeError {
    /// The extension or the store cannot take it now: 503 with `Retry-After`.
    #[error("unavailable, retry after {retry_after_s} s")]
    Unavailable {
        /// Seconds the sender should wait before it redelivers.
        retry_after_s: u32,
    },
    /// A stated bound on waiting calls was reached on the way (the delivery was not
    /// refused for being busy alone): 503 with `Retry-After`, counted apart in
    /// `/metrics` (outcome `overloaded`).
    #[error("overloaded, retry after {retry_after_s} s: {bound}")]
    Overloaded {
        /// Seconds the sender should wait before it redelivers.
        retry_after_s: u32,
        /// The bound, as the refusal names it.
        bound: String,
    },
    /// The signature does not verify: 401.
    #[error("bad signature: {0}")]
    BadSignature(String),
    /// The request is not a valid delivery: 400.
    #[error("invalid delivery: {0}")]
    Invalid(String),
    /// Anything else: 500.
    #[error("internal error: {0}")]
    Internal(String),
}

impl IntakeError {
    /// The HTTP status this error is answered with.
    pub fn status(&self) -> u16 {
        match self {
            IntakeError::Unavailable { .. } | IntakeError::Overloaded { .. } => 503,
            IntakeError::BadSignature(_) => 401,
            IntakeError::Invalid(_) => 400,
            IntakeError::Internal(_) => 500,
        }
    }

    /// The outcome label in `/metrics`.
    pub fn outcome(&self) -> &'static str {
        match self {
            IntakeError::Unavailable { .. } => "unavailable",
            IntakeError::Overloaded { .. } => "overloaded",
            IntakeError::BadSignature(_) => "bad_signature",
            IntakeError::Invalid(_) => "invalid",
            IntakeError::Internal(_) => "internal",
        }
    }
}

/// Where deliveries go: the owning extension, then the store.
///
/// `deliver` answers only once the delivery's events are durable (or with an error).
pub trait Intake: Send + Sync + 'static {
    /// Hands one delivery over; the answer goes back to the sender as it is.
    fn deliver(&self, d: Delivery) -> BoxFuture<'_, Result<Answer, IntakeError>>;
    /// Whether deliveries can be taken now (`/healthz`).
    fn healthy(&self) -> BoxFuture<'_, bool>;
    /// `/metrics`: ingressd's own samples (`own`) and the rest of the suite's, if
    /// this intake reaches them (over the bus, each daemon waited for a bounded
    /// time: [`daemon::scrape::gather`]). By default `own` alone.
    fn metrics(&self, own: String) -> BoxFuture<'_, String> {
        Box::pin(async move { own })
    }
}

/// The server's bounds. Every one has a clear answer that names it.
#[derive(Clone, Debug)]
pub struct Limits {
    /// The request line and headers, in bytes (431 past it).
    pub max_head_bytes: usize,
    /// The number of headers (431 past it).
    pub max_headers: usize,
    /// The decoded body, in bytes (413 past it, without reading the rest).
    pub max_body_bytes: usize,
    /// How long a request head may take to arrive, and how long an idle keep-alive
    /// connection is kept (408 when a head was started, a quiet close when not).
    pub header_timeout: Duration,
    /// How long a body may take to arrive (408, then close).
    pub body_timeout: Duration,
    /// Open connections at most; past it, a new connection is answered 503 and closed.
    pub max_connections: usize,
    /// How long the intake may take for one delivery (503 with `Retry-After` past it).
    pub intake_timeout: Duration,
    /// How long in-flight requests may take to finish once the server is asked to stop.
    pub grace: Duration,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            max_head_bytes: 64 * 1024,
            max_headers: 100,
            max_body_bytes: 25 * 1024 * 1024,
            header_timeout: Duration::from_secs(10),
            body_timeout: Duration::from_secs(30),
            max_connections: 1024,
            intake_timeout: Duration::from_secs(60),
            grace: Duration::from_secs(20),
        }
    }
}

/// The header `/healthz` names this ingressd process in.
pub const INSTANCE_HEADER: &str = "X-Open-Conduit-Ingressd";

/// This process's random instance ID (`ingress.routes`' `instance`, and the
/// [`INSTANCE_HEADER`] of `/healthz`): how doctor tells that a request sent to the
/// public URL came back to this ingressd.
pub fn instance() -> &'static str {
    static ID: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    ID.get_or_init(|| {
        let mut b = [0u8; 8];
        // Without the system's randomness the ID is still this process's (the pid).
        let _ = getrandom::fill(&mut b);
        let pid = std::process::id();
        format!(
            "{pid}-{}",
            b.iter().map(|x| format!("{x:02x}")).collect::<String>()
        )
    })
}
