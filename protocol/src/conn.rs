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

impl Peer {
    /// The connection's name.
    pub fn name(&self) -> &str {
        &self.inner.opts.name
    }

    /// Call `method` and wait for its answer.
    pub async fn call<P: Serialize + ?Sized>(
        &self,
        method: &str,
        params: &P,
    ) -> Result<Value, CallError> {
        self.call_with(method, params, CallOptions::default()).await
    }

    /// Call `method` and decode its answer into `T`.
    pub async fn call_as<P: Serialize + ?Sized, T: DeserializeOwned>(
        &self,
        method: &str,
        params: &P,
    ) -> Result<T, CallError> {
        let raw = self
            .call_raw(method, params, CallOptions::default())
            .await?;
        serde_json::from_str(raw.get())
            .map_err(|e| CallError::Codec(format!("answer to {method} does not decode: {e}")))
    }

    /// A typed call: the method is the params type's, and the answer decodes into
    /// its result type. A request of `{}` params is sent as `{}`.
    pub async fn call_typed<C: crate::wire::Call>(
        &self,
        params: &C,
    ) -> Result<C::Result, CallError> {
        self.call_as(C::METHOD, params).await
    }

    /// An in-transaction call: bounded by [`IN_TRANSACTION_DEADLINE`], and every
    /// callback from the peer meanwhile is refused with `reentrant_call`.
    pub async fn call_in_transaction<P: Serialize + ?Sized>(
        &self,
        method: &str,
        params: &P,
    ) -> Result<Value, CallError> {
        let opts = CallOptions {
            timeout: Some(IN_TRANSACTION_DEADLINE),
            cancel: None,
            in_transaction: true,
        };
        self.call_with(method, params, opts).await
    }

    /// Call with a deadline, a cancellation token, or in a transaction. Dropping the
    /// returned future before it completes cancels the call (`$/cancel`).
    pub async fn call_with<P: Serialize + ?Sized>(
        &self,
        method: &str,
        params: &P,
        opts: CallOptions,
    ) -> Result<Value, CallError> {
        let raw = self.call_raw(method, params, opts).await?;
        serde_json::from_str(raw.get())
            .map_err(|e| CallError::Codec(format!("answer to {method}: {e}")))
    }

    /// [`Peer::call_with`], answering the result exactly as it arrived.
    pub async fn call_raw<P: Serialize + ?Sized>(
        &self,
        method: &str,
        params: &P,
        opts: CallOptions,
    ) -> Result<Box<RawValue>, CallError> {
        let request = self.prepare(method, params)?;
        self.call_prepared(request, opts).await
    }

    /// Encode a request now, to call later with [`Peer::call_prepared`]: for a
    /// caller that sends requests one after another, each once the one before is
    /// answered (artifact chunks), to encode the next while the peer serves the
    /// current. Refused [`CallError::TooLarge`] now if over the send bound. A
    /// request never called is never sent.
    pub fn prepare<P: Serialize + ?Sized>(
        &self,
        method: &str,
        params: &P,
    ) -> Result<Prepared, CallError> {
        let inner = &self.inner;
        if let Some(reason) = inner.closed.borrow().clone() {
            return Err(CallError::Transport(reason));
        }
        let id = inner.next_id.fetch_add(1, Ordering::Relaxed);
        let line = inner.encode(&OutRequest {
            jsonrpc: "2.0",
            id,
            method,
            params,
        })?;
        let limit = inner.send_limit();
        if line.len() - 1 > limit {
            return Err(CallError::TooLarge {
                size: line.len() - 1,
                limit,
            });
        }
        Ok(Prepared {
            method: method.to_string(),
            id,
            line,
        })
    }

    /// Send a [`Peer::prepare`]d request and wait for its answer, as
    /// [`Peer::call_raw`] does.
    pub async fn call_prepared(
        &self,
        request: Prepared,
        opts: CallOptions,
    ) -> Result<Box<RawValue>, CallError> {
        let inner = &self.inner;
        let Prepared { method, id, line } = request;
        let method = method.as_str();
        if let Some(reason) = inner.closed.borrow().clone() {
            return Err(CallError::Transport(reason));
        }
        let started = tokio::time::Instant::now();
        let cancel = opts.cancel.clone().unwrap_or_default();
        // A place on the wire, kept until the answer (or until the call is abandoned,
        // after its `$/cancel` is queued: the guard below is dropped first).
        let _place = inner
            .place(method, line.len(), opts.timeout, &cancel)
            .await?;
        let _tx_guard = opts.in_transaction.then(|| TxGuard::new(inner));
        let (tx, rx) = oneshot::channel();
        lock(&inner.pending).insert(id, tx);
        let mut guard = PendingGuard {
            inner: inner.clone(),
            id,
            armed: true,
        };
        // close() marks the connection closed before it drains `pending`, so
        // either the drain saw this call or this check sees the close.
        if let Some(reason) = inner.closed.borrow().clone() {
            guard.armed = false;
            lock(&inner.pending).remove(&id);
            return Err(CallError::Transport(reason));
        }
        inner.wait_for_room(line.len()).await?;
        inner.send_line(line)?;

        let answer = async {
            match rx.await {
                Ok(result) => result,
                // The sender is dropped only by a close that already answered.
                Err(_) => Err(CallError::Transport(inner.close_reason())),
            }
        };
        let result = match opts.timeout {
            Some(limit) => tokio::select! {
                r = answer => r,
                _ = cancel.cancelled() => Err(CallError::Cancelled),
                _ = tokio::time::sleep_until(started + limit) => Err(CallError::Timeout(limit)),
            },
            None => tokio::select! {
                r = answer => r,
                _ = cancel.cancelled() => Err(CallError::Cancelled),
            },
        };
        if !matches!(
            result,
            Err(CallError::Cancelled) | Err(CallError::Timeout(_))
        ) {
            guard.armed = false;
        }
        result
    }

    /// Send a notification.
    pub fn notify<P: Serialize + ?Sized>(&self, method: &str, params: &P) -> Result<(), CallError> {
        let inner = &self.inner;
        if let Some(reason) = inner.closed.borrow().clone() {
            return Err(CallError::Transport(reason));
        }
        let line = encode(&OutNotification {
            jsonrpc: "2.0",
            method,
            params,
        })?;
        let limit = inner.send_limit();
        if line.len() - 1 > limit {
            return Err(CallError::TooLarge {
                size: line.len() - 1,
                limit,
            });
        }
        inner.send_reply(line);
        Ok(())
    }

    /// Send a notification only if the peer has less than `room` bytes of output
    /// unread; otherwise drop it and answer `false`. For fan-out to subscribers:
    /// a slow reader loses notifications and never holds anyone up.
    pub fn notify_if_room<P: Serialize + ?Sized>(
        &self,
        method: &str,
        params: &P,
        room: usize,
    ) -> Result<bool, CallError> {
        if self.inner.queued_bytes.load(Ordering::SeqCst) >= room {
            return Ok(false);
        }
        self.notify(method, params).map(|()| true)
    }

    /// The most bytes a message sent to the peer may have now.
    pub fn max_send_bytes(&self) -> usize {
        self.inner.send_limit()
    }

    /// Send the peer messages of up to `bytes` from now on: it said it reads them
    /// (see [`agreed_message_bytes`]).
    pub fn set_max_send_bytes(&self, bytes: usize) {
        self.inner.send_limit.store(bytes, Ordering::SeqCst);
    }

    /// Bytes queued for the peer and not yet written.
    pub fn queued_bytes(&self) -> usize {
        self.inner.queued_bytes.load(Ordering::SeqCst)
    }

    /// True when `other` is a handle of this same connection (not merely one to the
    /// same peer): what the host binds a run it opened to.
    pub fn same_connection(&self, other: &Peer) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }

    /// True once the connection has closed.
    pub fn is_closed(&self) -> bool {
        self.inner.closed.borrow().is_some()
    }

    /// Resolves with the reason once the connection has closed.
    pub async fn closed(&self) -> Arc<CloseReason> {
        let mut rx = self.inner.closed.subscribe();
        loop {
            if let Some(reason) = rx.borrow_and_update().clone() {
                return reason;
            }
            if rx.changed().await.is_err() {
                return self.inner.close_reason();
            }
        }
    }

    /// Resolves once the connection has closed and everything queued before the
    /// close was written (or the writer gave up): wait for this before the process
    /// exits, so a last answer or error reaches the peer. Bounded by `limit`.
    pub async fn finished(&self, limit: Duration) -> Arc<CloseReason> {
        let reason = self.closed().await;
        let mut rx = self.inner.writer_done.subscribe();
        let _ = tokio::time::timeout(limit, rx.wait_for(|done| *done)).await;
        reason
    }

    /// Close: fail every pending call, cancel every request being served, flush
    /// what is queued and shut the stream down (the peer sees EOF).
    pub fn close(&self, why: &str) {
        self.inner
            .close(CloseReason::Local(why.to_string()), Shutdown::Flush);
    }

    /// The number of requests from the peer being served now.
    pub fn serving(&self) -> usize {
        lock(&self.inner.serving).len()
    }

    /// Resolves once no request from the peer is being served: each has been
    /// answered (its answer queued before this resolves, so a [`Peer::close`]
    /// after it still writes them) or the connection closed.
    pub async fn idle(&self) {
        loop {
            let idle = self.inner.idle.notified();
            tokio::pin!(idle);
            idle.as_mut().enable();
            if lock(&self.inner.serving).is_empty() {
                return;
            }
            idle.await;
        }
    }

    /// Cancel every request from the peer being served now, as `$/cancel` would:
    /// each handler's token fires, its future is dropped, and it is answered
    /// -32800. The connection stays open.
    pub fn cancel_serving(&self) {
        let tokens: Vec<CancelToken> = lock(&self.inner.serving).values().cloned().collect();
        for token in tokens {
            token.cancel();
        }
    }
}

struct PendingGuard {
    inner: Arc<Inner>,
    id: u64,
    armed: bool,
}

impl Drop for PendingGuard {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        // Abandoned (dropped, cancelled or timed out): forget the id, so a late
        // answer is discarded, and tell the peer to stop.
        let was_pending = lock(&self.inner.pending).remove(&self.id).is_some();
        if was_pending && self.inner.closed.borrow().is_none() {
            let params = serde_json::json!({ "id": self.id });
            if let Ok(line) = encode(&OutNotification {
                jsonrpc: "2.0",
                method: CANCEL_METHOD,
                params: &params,
            }) {
                self.inner.send_reply(line);
            }
        }
    }
}

struct TxGuard<'a>(&'a Inner);

impl<'a> TxGuard<'a> {
    fn new(inner: &'a Inner) -> Self {
        inner.in_transaction.fetch_add(1, Ordering::SeqCst);
        TxGuard(inner)
    }
}

impl Drop for TxGuard<'_> {
    fn drop(&mut self) {
        self.0.in_transaction.fetch_sub(1, Ordering::SeqCst);
    }
}

#[derive(Clone, Copy, PartialEq)]
enum Shutdown {
    /// Write what is queued, then shut the stream down.
    Flush,
    /// Stop writing now (the peer is not reading).
    Abort,
}

/// Counts a call among those waiting for a place, for as long as it waits.
struct Waiting<'a> {
    inner: &'a Inner,
    bytes: usize,
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.inner.waiting.fetch_sub(1, Ordering::SeqCst);
        self.inner
            .waiting_bytes
            .fetch_sub(self.bytes, Ordering::SeqCst);
    }
}

impl Inner {
    /// [`encode`], into a line buffer the writer is done with when there is one: a
    /// stream of large messages (artifact chunks) is then written into memory
    /// already mapped, not into fresh pages grown by doubling, each message.
    fn encode<T: Serialize>(&self, msg: &T) -> Result<Vec<u8>, CallError> {
        let spare = lock(&self.spare).pop();
        match spare {
            Some(buf) => encode_into(buf, msg),
            None => encode(msg),
        }
    }

    /// Keep a written line's buffer for [`Inner::encode`], if it is worth keeping.
    fn recycle(&self, mut line: Vec<u8>) {
        if !(SPARE_MIN_BYTES..=SPARE_MAX_BYTES).contains(&line.capacity()) {
            return;
        }
        let mut spare = lock(&self.spare);
        if spare.len() < SPARE_BUFFERS {
            line.clear();
            spare.push(line);
        }
    }

    /// One of the `max_inflight` places on the wire for a call of `len` bytes: at
    /// once when one is free, else in turn, within the call's deadline and while it
    /// is not cancelled. Past a waiting bound, `overloaded` naming it.
    async fn place(
        &self,
        method: &str,
        len: usize,
        timeout: Option<Duration>,
        cancel: &CancelToken,
    ) -> Result<OwnedSemaphorePermit, CallError> {
        if let Ok(p) = self.window.clone().try_acquire_owned() {
            return Ok(p);
        }
        let waiting = self.waiting.fetch_add(1, Ordering::SeqCst) + 1;
        let bytes = self.waiting_bytes.fetch_add(len, Ordering::SeqCst) + len;
        let _counted = Waiting {
            inner: self,
            bytes: len,
        };
        let over = |what: String| {
            CallError::Rpc(RpcError::new(
                Code::Overloaded,
                format!(
                    "{method} refused: {what} wait for one of the {} places on the wire to {}",
                    self.opts.max_inflight, self.opts.name
                ),
            ))
        };
        if waiting > self.opts.max_waiting_calls {
            return Err(over(format!(
                "{} calls already (max_waiting_calls)",
                waiting - 1
            )));
        }
        if bytes > self.opts.max_waiting_bytes {
            return Err(over(format!(
                "{} bytes of calls already (max_waiting_bytes {})",
                bytes - len,
                self.opts.max_waiting_bytes
            )));
        }
        let mut closed = self.closed.subscribe();
        let acquire = self.window.clone().acquire_owned();
        let deadline = async {
            match timeout {
                Some(limit) => tokio::time::sleep(limit).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            p = acquire => p.map_err(|_| CallError::Transport(self.close_reason())),
            _ = cancel.cancelled() => Err(CallError::Cancelled),
            _ = deadline => Err(CallError::Timeout(timeout.unwrap_or_default())),
            _ = closed.wait_for(Option::is_some) => Err(CallError::Transport(self.close_reason())),
        }
    }

    fn send_limit(&self) -> usize {
        self.send_limit.load(Ordering::SeqCst)
    }

    fn close_reason(&self) -> Arc<CloseReason> {
        self.closed
            .borrow()
            .clone()
            .unwrap_or_else(|| Arc::new(CloseReason::Local("connection dropped".into())))
    }

    fn close(&self, reason: CloseReason, how: Shutdown) {
        let reason = Arc::new(reason);
        let first = self.closed.send_if_modified(|state| {
            if state.is_some() {
                return false;
            }
            *state = Some(reason.clone());
            true
        });
        if !first {
            return;
        }
        match &*reason {
            CloseReason::PeerClosed | CloseReason::Local(_) => {
                tracing::debug!(peer = %self.opts.name, %reason, "connection closed")
            }
            _ => tracing::warn!(peer = %self.opts.name, %reason, "connection closed"),
        }
        let pending: Vec<_> = lock(&self.pending).drain().collect();
        for (_, tx) in pending {
            let _ = tx.send(Err(CallError::Transport(reason.clone())));
        }
        let serving: Vec<_> = lock(&self.serving).drain().map(|(_, t)| t).collect();
        for token in serving {
            token.cancel();
        }
        self.idle.notify_waiters();
        if let Some(reader) = self.reader.get() {
            reader.abort();
        }
        match how {
            Shutdown::Flush => {
                let _ = self.out.send(Out::Close);
            }
            Shutdown::Abort => {
                if let Some(writer) = self.writer.get() {
                    writer.abort();
                }
            }
        }
        self.written.notify_waiters();
    }

    /// Queue a line that must not wait (an answer, a notification, a cancel). If the
    /// peer has left more than `max_queued_bytes` unread, it is not reading: close.
    fn send_reply(&self, line: Vec<u8>) {
        if self.queue_reply(line).is_err() {
            self.not_reading();
        }
    }

    /// Queue a line that must not wait, or `Err` when the peer has left more than
    /// `max_queued_bytes` unread (the caller closes, with [`Inner::not_reading`]).
    /// Takes no lock, so it may be called holding one.
    fn queue_reply(&self, line: Vec<u8>) -> Result<(), ()> {
        let len = line.len();
        let queued = self.queued_bytes.fetch_add(len, Ordering::SeqCst) + len;
        if queued > self.opts.max_queued_bytes {
            self.queued_bytes.fetch_sub(len, Ordering::SeqCst);
            return Err(());
        }
        if self.out.send(Out::Line(line)).is_err() {
            self.queued_bytes.fetch_sub(len, Ordering::SeqCst);
        }
        Ok(())
    }

    fn not_reading(&self) {
        self.close(
            CloseReason::Protocol(format!(
                "the peer is not reading: more than {} bytes of output queued (max_queued_bytes)",
                self.opts.max_queued_bytes
            )),
            Shutdown::Abort,
        );
    }

    /// Queue a request line; the room was awaited before.
    fn send_line(&self, line: Vec<u8>) -> Result<(), CallError> {
        let len = line.len();
        self.queued_bytes.fetch_add(len, Ordering::SeqCst);
        if self.out.send(Out::Line(line)).is_err() {
            self.queued_bytes.fetch_sub(len, Ordering::SeqCst);
            return Err(CallError::Transport(self.close_reason()));
        }
        Ok(())
    }

    /// A caller's request waits (it may: it is not the reader) while the peer has
    /// more than half the queue bound unread.
    async fn wait_for_room(&self, len: usize) -> Result<(), CallError> {
        let room = |queued: usize| queued == 0 || queued + len <= self.opts.max_queued_bytes / 2;
        if room(self.queued_bytes.load(Ordering::SeqCst)) {
            return Ok(());
        }
        loop {
            let written = self.written.notified();
            tokio::pin!(written);
            written.as_mut().enable();
            if let Some(reason) = self.closed.borrow().clone() {
                return Err(CallError::Transport(reason));
            }
            if room(self.queued_bytes.load(Ordering::SeqCst)) {
                return Ok(());
            }
            written.await;
        }
    }
}

/// `null`, as a raw JSON value (absent params, an empty result).
fn null_raw() -> Box<RawValue> {
    RawValue::from_string("null".into()).unwrap_or_else(|_| unreachable!("null is JSON"))
}
