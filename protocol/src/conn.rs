//! The JSON-RPC 2.0 connection, over any async byte stream.
//!
//! One UTF-8 JSON object per line. Symmetric: either side sends requests,
//! responses and notifications. The reader never waits on a handler: each request
//! is served in its own task, and responses and `$/cancel` (or its LSP name
//! `$/cancelRequest`) are handled on the reader itself, so nested callbacks always work. At most
//! [`Options::max_inflight`] requests are served at once; over that the reader
//! answers `overloaded` at once. The calling side keeps to the same bound: at most
//! `max_inflight` of its calls are on the wire at once, and the next ones wait their
//! turn in order (bounded by [`Options::max_waiting_calls`] and
//! [`Options::max_waiting_bytes`], and each by its own deadline), so a peer that keeps
//! the protocol's bound is never refused for being busy. A closed stream or a dead
//! peer fails every pending call with [`CallError::Transport`], and every later call
//! the same way.

use crate::error::{CallError, CloseReason, Code, RpcError, INVALID_REQUEST, PARSE_ERROR};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::value::RawValue;
use serde_json::Value;
use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufWriter};
use tokio::sync::{mpsc, oneshot, watch, Notify, OwnedSemaphorePermit, Semaphore};
use tokio::task::AbortHandle;

mod framing;
mod inner;
mod peer;
mod serve;
use framing::{read_loop, write_loop};

/// At most this many bytes a message (16 MiB), not counting the newline: the spec's
/// bound, and the floor every peer must take. A peer is sent no larger message unless
/// it said it reads more ([`Peer::set_max_send_bytes`]).
pub const MAX_MESSAGE_BYTES: usize = 16 * 1024 * 1024;
/// The larger bound (64 MiB) of the connections that carry webhook bodies and the
/// events made of them: the bus (both sides are ours) and an extension that said, in
/// `initialize`, that it reads messages this large (ours, built on the SDK, do). A
/// body up to ingressd's 25 MiB limit crosses base64-encoded (33.4 MiB) inside one
/// message, and the extension's answer carries its parsed payload (about 25 MiB
/// more when it also returns the raw body): neither fits in 16 MiB, both in 64 MiB.
pub const LARGE_MESSAGE_BYTES: usize = 64 * 1024 * 1024;
/// At most this many requests served at once per side.
pub const MAX_INFLIGHT: usize = 64;
/// At most this many calls wait for a place on the wire, per connection.
pub const MAX_WAITING_CALLS: usize = 4096;
/// At most this many bytes of requests wait for a place on the wire, per connection.
pub const MAX_WAITING_BYTES: usize = 256 * 1024 * 1024;
/// The deadline of an in-transaction call.
pub const IN_TRANSACTION_DEADLINE: Duration = Duration::from_millis(250);
/// The cancellation notification.
pub const CANCEL_METHOD: &str = "$/cancel";
/// The LSP's name for the same notification (`$/cancelRequest`), which stock
/// JSON-RPC libraries such as vscode-jsonrpc send: honoured as an alias of
/// [`CANCEL_METHOD`] on receipt. We only ever send [`CANCEL_METHOD`].
pub const LSP_CANCEL_METHOD: &str = "$/cancelRequest";

/// A boxed, sendable future.
pub type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send + 'static>>;

/// The bounds of one connection.
#[derive(Debug, Clone)]
pub struct Options {
    /// A name for logs ("extension github", "bus peer 12").
    pub name: String,
    /// At most this many bytes a message read from the peer.
    pub max_message_bytes: usize,
    /// At most this many bytes a message sent to the peer (what it is known to
    /// read): a larger request fails [`CallError::TooLarge`] unsent, a larger answer
    /// becomes an error answer. Raised on a live connection with
    /// [`Peer::set_max_send_bytes`] once the peer says it reads more.
    pub max_send_bytes: usize,
    /// At most this many requests served at once; the next is answered `overloaded`.
    pub max_inflight: usize,
    /// At most this many bytes of answers queued for a peer that does not read
    /// them; past it the connection is closed, since the peer is not reading.
    pub max_queued_bytes: usize,
    /// At most this many calls wait for one of the `max_inflight` places on the wire;
    /// the next is refused `overloaded` at once, naming this bound.
    pub max_waiting_calls: usize,
    /// At most this many bytes of requests wait for a place on the wire; the next is
    /// refused `overloaded` at once, naming this bound.
    pub max_waiting_bytes: usize,
    /// Told how long each request this side served took (a daemon's bus metrics);
    /// `None`: nothing is measured.
    pub serve_times: Option<ServeTimer>,
}

/// Where a connection reports how long the requests it served took: the slot of a
/// request's method is looked up before it runs (no allocation), and its time
/// recorded once it is answered.
pub trait ServeTimes: Send + Sync {
    /// The slot `method`'s times go to.
    fn slot(&self, method: &str) -> usize;
    /// A request of `slot` was answered (or cancelled) after `took`.
    fn served(&self, slot: usize, took: Duration);
}

/// A shared [`ServeTimes`].
#[derive(Clone)]
pub struct ServeTimer(pub Arc<dyn ServeTimes>);

impl std::fmt::Debug for ServeTimer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ServeTimer")
    }
}

impl Default for Options {
    fn default() -> Self {
        Options {
            name: "peer".into(),
            max_message_bytes: MAX_MESSAGE_BYTES,
            max_send_bytes: MAX_MESSAGE_BYTES,
            max_inflight: MAX_INFLIGHT,
            max_queued_bytes: 4 * MAX_MESSAGE_BYTES,
            max_waiting_calls: MAX_WAITING_CALLS,
            max_waiting_bytes: MAX_WAITING_BYTES,
            serve_times: None,
        }
    }
}

impl Options {
    /// The defaults, named.
    pub fn named(name: impl Into<String>) -> Self {
        Options {
            name: name.into(),
            ..Options::default()
        }
    }

    /// [`LARGE_MESSAGE_BYTES`] both ways, and room for four such messages queued:
    /// for a connection whose two sides are both ours (the bus).
    pub fn large(name: impl Into<String>) -> Self {
        Options {
            name: name.into(),
            max_message_bytes: LARGE_MESSAGE_BYTES,
            max_send_bytes: LARGE_MESSAGE_BYTES,
            max_inflight: MAX_INFLIGHT,
            max_queued_bytes: 4 * LARGE_MESSAGE_BYTES,
            max_waiting_calls: MAX_WAITING_CALLS,
            max_waiting_bytes: MAX_WAITING_BYTES,
            serve_times: None,
        }
    }

    /// Reads up to [`LARGE_MESSAGE_BYTES`], but sends at most [`MAX_MESSAGE_BYTES`]
    /// until the peer says in `initialize` that it reads more: for the connection
    /// between extrunner and an extension, seen from either side.
    pub fn negotiated(name: impl Into<String>) -> Self {
        Options {
            max_send_bytes: MAX_MESSAGE_BYTES,
            ..Options::large(name)
        }
    }
}

/// The send bound for a peer that declared `declared` bytes in `initialize`
/// (`max_message_bytes`): the spec's [`MAX_MESSAGE_BYTES`] when it declared nothing
/// (or less, which the spec does not allow), at most [`LARGE_MESSAGE_BYTES`].
pub fn agreed_message_bytes(declared: Option<u64>) -> usize {
    declared
        .map_or(MAX_MESSAGE_BYTES, |n| {
            usize::try_from(n).unwrap_or(usize::MAX)
        })
        .clamp(MAX_MESSAGE_BYTES, LARGE_MESSAGE_BYTES)
}

/// A cancellation signal shared by a canceller and the work it cancels.
#[derive(Clone, Default, Debug)]
pub struct CancelToken(Arc<CancelState>);

#[derive(Default, Debug)]
struct CancelState {
    cancelled: AtomicBool,
    notify: Notify,
}

impl CancelToken {
    /// A token not yet cancelled.
    pub fn new() -> Self {
        CancelToken::default()
    }

    /// Cancel: wakes every waiter, now and later.
    pub fn cancel(&self) {
        self.0.cancelled.store(true, Ordering::SeqCst);
        self.0.notify.notify_waiters();
    }

    /// True once cancelled.
    pub fn is_cancelled(&self) -> bool {
        self.0.cancelled.load(Ordering::SeqCst)
    }

    /// Resolves once cancelled.
    pub async fn cancelled(&self) {
        loop {
            let notified = self.0.notify.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if self.is_cancelled() {
                return;
            }
            notified.await;
        }
    }
}

/// A request to serve.
pub struct Request {
    /// The method.
    pub method: String,
    /// The params as they arrived (`null` when absent): decode them with
    /// [`Request::params`] straight into the handler's type.
    pub params: Box<RawValue>,
    /// The connection it came on, for callbacks to the peer.
    pub peer: Peer,
    /// Cancelled when the peer sends `$/cancel` (or `$/cancelRequest`) for this
    /// request or the connection closes. The handler's future is also dropped then.
    pub cancel: CancelToken,
}

impl Request {
    /// The params decoded into `T`, or `invalid params`. Absent params read as
    /// `{}` for a type that does not take `null`.
    pub fn params<T: DeserializeOwned>(&self) -> Result<T, RpcError> {
        match serde_json::from_str(self.params.get()) {
            Ok(v) => Ok(v),
            Err(_) if self.params.get() == "null" => {
                serde_json::from_str("{}").map_err(RpcError::invalid_params)
            }
            Err(e) => Err(RpcError::invalid_params(e)),
        }
    }

    /// The params as a JSON value.
    pub fn params_value(&self) -> Result<Value, RpcError> {
        serde_json::from_str(self.params.get()).map_err(RpcError::invalid_params)
    }
}

/// A result as it goes on the wire: JSON text, written as it is.
pub type Reply = Box<RawValue>;

/// Encode a result for the wire.
pub fn reply<T: Serialize + ?Sized>(value: &T) -> Result<Reply, RpcError> {
    serde_json::value::to_raw_value(value).map_err(RpcError::unauthored)
}

/// Serves what the peer sends.
pub trait Handler: Send + Sync + 'static {
    /// Serve one request. Runs in its own task; may call the peer back. The result
    /// is raw JSON ([`reply`] encodes one), so a forwarder passes an answer on
    /// without decoding it.
    fn call(&self, request: Request) -> BoxFuture<Result<Reply, RpcError>>;

    /// A notification from the peer (not `$/cancel` nor its alias
    /// `$/cancelRequest`, which the connection handles).
    /// Called on the reader: must not block.
    fn notify(&self, _peer: &Peer, _method: &str, _params: Value) {}
}

/// A [`Handler`] from a closure answering JSON values.
pub struct FnHandler<F>(pub F);

impl<F, Fut> Handler for FnHandler<F>
where
    F: Fn(Request) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<Value, RpcError>> + Send + 'static,
{
    fn call(&self, request: Request) -> BoxFuture<Result<Reply, RpcError>> {
        let fut = (self.0)(request);
        Box::pin(async move { reply(&fut.await?) })
    }
}

/// A handler that serves nothing: every request is method-not-found.
pub struct NoHandler;

impl Handler for NoHandler {
    fn call(&self, request: Request) -> BoxFuture<Result<Reply, RpcError>> {
        let method = request.method;
        Box::pin(async move { Err(RpcError::method_not_found(&method)) })
    }
}

/// A request encoded ahead of its call ([`Peer::prepare`]).
pub struct Prepared {
    method: String,
    id: u64,
    line: Vec<u8>,
}

impl std::fmt::Debug for Prepared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Prepared")
            .field("method", &self.method)
            .field("id", &self.id)
            .field("bytes", &self.line.len())
            .finish()
    }
}

/// Per-call choices.
#[derive(Debug, Clone, Default)]
pub struct CallOptions {
    /// Give up (and cancel the call) after this long.
    pub timeout: Option<Duration>,
    /// Cancel the call when this token fires: the call returns
    /// [`CallError::Cancelled`] at once and the peer is sent `$/cancel`.
    pub cancel: Option<CancelToken>,
    /// An in-transaction call: while it is outstanding, every request from the
    /// peer is refused with `reentrant_call`.
    pub in_transaction: bool,
}

enum Out {
    Line(Vec<u8>),
    /// Flush what is queued, shut the stream down and stop.
    Close,
}

/// Where a call's answer goes.
type Answer = oneshot::Sender<Result<Box<RawValue>, CallError>>;

struct Inner {
    opts: Options,
    handler: Arc<dyn Handler>,
    next_id: AtomicU64,
    pending: Mutex<HashMap<u64, Answer>>,
    serving: Mutex<HashMap<String, CancelToken>>,
    /// Notified whenever `serving` becomes empty.
    idle: Notify,
    in_transaction: AtomicUsize,
    /// Places on the wire for this side's calls (`max_inflight`), taken in order.
    window: Arc<Semaphore>,
    /// Calls waiting for a place, and their bytes.
    waiting: AtomicUsize,
    waiting_bytes: AtomicUsize,
    out: mpsc::UnboundedSender<Out>,
    /// Line buffers the writer is done with, for the next lines to be encoded into
    /// (see [`Inner::encode`]).
    spare: Mutex<Vec<Vec<u8>>>,
    queued_bytes: AtomicUsize,
    /// The current send bound (starts as `opts.max_send_bytes`).
    send_limit: AtomicUsize,
    written: Notify,
    closed: watch::Sender<Option<Arc<CloseReason>>>,
    /// Set once the writer has stopped (flushed and shut down, or aborted).
    writer_done: watch::Sender<bool>,
    reader: OnceLock<AbortHandle>,
    writer: OnceLock<AbortHandle>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic while holding one of these short locks leaves consistent data.
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// One end of a connection: call and notify the peer. Cheap to clone.
#[derive(Clone)]
pub struct Peer {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Peer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Peer")
            .field("name", &self.inner.opts.name)
            .finish()
    }
}

/// Start a connection over `reader` and `writer`, served by `handler`. Must be
/// called within a tokio runtime; the reader and writer run as tasks.
pub fn connect<R, W, H>(reader: R, writer: W, handler: H, opts: Options) -> Peer
where
    R: AsyncRead + Send + Unpin + 'static,
    W: AsyncWrite + Send + Unpin + 'static,
    H: Handler,
{
    connect_arc(reader, writer, Arc::new(handler), opts)
}

/// [`connect`] with a shared handler.
pub fn connect_arc<R, W>(reader: R, writer: W, handler: Arc<dyn Handler>, opts: Options) -> Peer
where
    R: AsyncRead + Send + Unpin + 'static,
    W: AsyncWrite + Send + Unpin + 'static,
{
    let (tx, rx) = mpsc::unbounded_channel();
    let (closed, _) = watch::channel(None);
    let (writer_done, _) = watch::channel(false);
    let window = Arc::new(Semaphore::new(opts.max_inflight.max(1)));
    let send_limit = AtomicUsize::new(opts.max_send_bytes);
    let inner = Arc::new(Inner {
        send_limit,
        opts,
        window,
        waiting: AtomicUsize::new(0),
        waiting_bytes: AtomicUsize::new(0),
        handler,
        next_id: AtomicU64::new(1),
        pending: Mutex::new(HashMap::new()),
        serving: Mutex::new(HashMap::new()),
        idle: Notify::new(),
        in_transaction: AtomicUsize::new(0),
        out: tx,
        spare: Mutex::new(Vec::new()),
        queued_bytes: AtomicUsize::new(0),
        written: Notify::new(),
        closed,
        writer_done,
        reader: OnceLock::new(),
        writer: OnceLock::new(),
    });
    let w = tokio::spawn(write_loop(inner.clone(), writer, rx));
    let _ = inner.writer.set(w.abort_handle());
    let r = tokio::spawn(read_loop(inner.clone(), reader));
    let _ = inner.reader.set(r.abort_handle());
    Peer { inner }
}

#[derive(Serialize)]
struct OutRequest<'a, P: Serialize + ?Sized> {
    jsonrpc: &'static str,
    id: u64,
    method: &'a str,
    params: &'a P,
}

#[derive(Serialize)]
struct OutNotification<'a, P: Serialize + ?Sized> {
    jsonrpc: &'static str,
    method: &'a str,
    params: &'a P,
}

#[derive(Serialize)]
struct OutResult<'a> {
    jsonrpc: &'static str,
    id: &'a Value,
    result: &'a RawValue,
}

#[derive(Serialize)]
struct OutError<'a> {
    jsonrpc: &'static str,
    id: &'a Value,
    error: &'a RpcError,
}

fn encode<T: Serialize>(msg: &T) -> Result<Vec<u8>, CallError> {
    encode_into(Vec::with_capacity(SPARE_MIN_BYTES), msg)
}

/// `msg` and its newline, written into `buf` (empty).
fn encode_into<T: Serialize>(mut buf: Vec<u8>, msg: &T) -> Result<Vec<u8>, CallError> {
    serde_json::to_writer(&mut buf, msg).map_err(|e| CallError::Codec(e.to_string()))?;
    buf.push(b'\n');
    Ok(buf)
}

/// At most this many spare line buffers a connection keeps.
const SPARE_BUFFERS: usize = 4;
/// The largest line buffer kept as a spare, and the least worth keeping: smaller
/// ones cost little to allocate. A new buffer starts at the least, so most
/// messages (an event with its envelope is 2 to 3 KiB) are written without growing
/// it step by step from a few bytes.
const SPARE_MAX_BYTES: usize = 1024 * 1024;
const SPARE_MIN_BYTES: usize = 4 * 1024;

#[derive(Clone, Copy, PartialEq)]
enum Shutdown {
    /// Write what is queued, then shut the stream down.
    Flush,
    /// Stop writing now (the peer is not reading).
    Abort,
}

/// `null`, as a raw JSON value (absent params, an empty result).
fn null_raw() -> Box<RawValue> {
    RawValue::from_string("null".into()).unwrap_or_else(|_| unreachable!("null is JSON"))
}
