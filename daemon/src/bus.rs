//! The bus client every daemon (and the CLI) uses to reach the broker.
//!
//! It connects to the broker's unix socket, registers the daemon's service and
//! prefixes, subscribes to its topics, and serves the requests the broker routes to
//! it. When the connection is lost (the broker restarted, say) it reconnects with
//! backoff (100 ms doubling to 5 s), registers and subscribes again by itself. A
//! call made while disconnected waits up to [`BusOptions::call_wait`] for a
//! connection and then fails `unavailable`.
//!
//! A service also serves its handler on a direct socket beside the bus socket, and
//! a service's client (or a daemon's plain client made [`BusOptions::with_direct`],
//! never the CLI's) calls a service over its direct socket when it can, without the
//! broker's hop ([`crate::direct`]).

use crate::batch::{self, BatchLimits, BatchParams, BatchSend, Gatherer};
use protocol::{
    BoxFuture, CallError, CallOptions, Code, Handler, NoHandler, Options, Peer, Reply, RpcError,
};
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::value::RawValue;
use serde_json::{json, Value};
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;
use tokio::sync::watch;

/// The bus socket when packaged.
pub const DEFAULT_BUS_SOCKET: &str = "/run/open-conduit/bus.sock";

/// The first reconnection delay.
pub const BACKOFF_FIRST: Duration = Duration::from_millis(100);
/// The longest reconnection delay.
pub const BACKOFF_MAX: Duration = Duration::from_secs(5);

/// How a client joins the bus.
#[derive(Clone)]
pub struct BusOptions {
    /// The broker's socket.
    pub socket: PathBuf,
    /// The service to register (`None` for a plain client such as the CLI).
    pub service: Option<String>,
    /// The method prefixes the service owns (`store` for `store.*`).
    pub prefixes: Vec<String>,
    /// The notification topics to receive.
    pub topics: Vec<String>,
    /// Serves requests routed to this service, and receives notifications.
    pub handler: Arc<dyn Handler>,
    /// How long a call waits for a connection before failing `unavailable`.
    pub call_wait: Duration,
    /// A name for logs.
    pub name: String,
    /// How [`Bus::call_gathered`] gathers calls into batches; `None` sends each
    /// alone.
    pub gather: Option<BatchLimits>,
    /// The directory of direct sockets ([`crate::direct`]): a service serves one
    /// there, a caller uses them; `None` for the broker alone.
    pub direct: Option<PathBuf>,
}

impl BusOptions {
    /// A plain client of the bus at `socket`: no service, no topics.
    pub fn client(socket: impl Into<PathBuf>) -> Self {
        BusOptions {
            socket: socket.into(),
            direct: None,
            service: None,
            prefixes: Vec::new(),
            topics: Vec::new(),
            handler: Arc::new(NoHandler),
            call_wait: Duration::from_secs(5),
            name: "bus client".into(),
            gather: gather_limits(),
        }
    }

    /// A service owning `prefixes`, served by `handler`.
    pub fn service(
        socket: impl Into<PathBuf>,
        service: &str,
        prefixes: &[&str],
        handler: Arc<dyn Handler>,
    ) -> Self {
        let socket = socket.into();
        BusOptions {
            direct: crate::direct::dir_for(&socket),
            service: Some(service.to_string()),
            prefixes: prefixes.iter().map(|p| p.to_string()).collect(),
            handler,
            name: format!("bus ({service})"),
            ..BusOptions::client(socket)
        }
    }

    /// Call services over their direct sockets when it can ([`crate::direct`]): a
    /// daemon's client, not the CLI's (services do so by themselves).
    pub fn with_direct(mut self) -> Self {
        self.direct = crate::direct::dir_for(&self.socket);
        self
    }

    /// Receive these topics.
    pub fn with_topics(mut self, topics: &[&str]) -> Self {
        self.topics = topics.iter().map(|t| t.to_string()).collect();
        self
    }
}

/// The notification the broker sends a service's old connection when a new one
/// registers the same service.
pub const REPLACED: &str = "bus.replaced";

/// Serves the user's handler, and notes `bus.replaced`.
struct Intercept {
    inner: Arc<dyn Handler>,
    replaced: watch::Sender<bool>,
}

impl Handler for Intercept {
    fn call(&self, request: protocol::Request) -> protocol::BoxFuture<Result<Reply, RpcError>> {
        if batch::is_batch(&request.method) {
            return batch::serve(&self.inner, request);
        }
        self.inner.call(request)
    }

    fn notify(&self, peer: &Peer, method: &str, params: Value) {
        if method == REPLACED {
            tracing::error!(%params, "another instance registered this service: leaving the bus");
            self.replaced.send_replace(true);
            return;
        }
        self.inner.notify(peer, method, params);
    }
}

struct Shared {
    opts: BusOptions,
    handler: Arc<dyn Handler>,
    current: watch::Sender<Option<Peer>>,
    topics: Mutex<Vec<String>>,
    stop: watch::Sender<bool>,
    gatherers: Mutex<HashMap<String, Arc<Gatherer>>>,
    /// A service's call times by method ([`crate::metrics`]).
    times: Option<protocol::ServeTimer>,
    /// The direct connections this client calls over.
    direct: Option<Arc<crate::direct::Client>>,
    /// The service's own direct socket, once it has joined the bus.
    server: Mutex<Option<crate::direct::Server>>,
}

/// A connection to the bus that keeps itself up. Cheap to clone.
#[derive(Clone)]
pub struct Bus {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for Bus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Bus")
            .field("socket", &self.shared.opts.socket)
            .field("service", &self.shared.opts.service)
            .field("connected", &self.is_connected())
            .finish()
    }
}

impl Bus {
    /// Start joining the bus; returns at once, the connection comes up in the
    /// background (see [`Bus::connected`]). Must be called within a tokio runtime.
    pub fn start(opts: BusOptions) -> Bus {
        let (current, _) = watch::channel(None);
        let (stop, _) = watch::channel(false);
        let topics = Mutex::new(opts.topics.clone());
        let times = opts
            .service
            .as_ref()
            .map(|_| protocol::ServeTimer(crate::metrics::service_call_times(&opts.prefixes)));
        let handler: Arc<dyn Handler> = Arc::new(Intercept {
            inner: opts.handler.clone(),
            replaced: stop.clone(),
        });
        let direct = opts
            .direct
            .clone()
            .map(|dir| crate::direct::Client::new(dir, &opts.name));
        let shared = Arc::new(Shared {
            handler,
            direct,
            server: Mutex::new(None),
            opts,
            current,
            topics,
            stop,
            gatherers: Mutex::default(),
            times,
        });
        tokio::spawn(keep_connected(shared.clone()));
        Bus { shared }
    }

    /// Wait up to `limit` for a registered connection.
    pub async fn connected(&self, limit: Duration) -> Result<Peer, CallError> {
        let mut rx = self.shared.current.subscribe();
        let found = tokio::time::timeout(limit, async {
            rx.wait_for(|p| p.as_ref().is_some_and(|p| !p.is_closed()))
                .await
                .ok()
                .and_then(|p| p.clone())
        })
        .await;
        match found {
            Ok(Some(peer)) => Ok(peer),
            _ => Err(unavailable(&self.shared.opts, limit)),
        }
    }

    /// True while connected (and registered).
    pub fn is_connected(&self) -> bool {
        self.shared
            .current
            .borrow()
            .as_ref()
            .is_some_and(|p| !p.is_closed())
    }

    /// Call a method through the broker.
    pub async fn call<P: Serialize + ?Sized>(
        &self,
        method: &str,
        params: &P,
    ) -> Result<Value, CallError> {
        let (peer, direct) = self.peer_for(method).await?;
        peer.call(method, params)
            .await
            .map_err(|e| through(direct, method, e))
    }

    /// The connection a call of `method` goes on: the service's direct connection
    /// when it is up (`true`), otherwise the broker's.
    async fn peer_for(&self, method: &str) -> Result<(Peer, bool), CallError> {
        if let Some(peer) = self.shared.direct.as_ref().and_then(|d| d.peer(method)) {
            return Ok((peer, true));
        }
        Ok((self.connected(self.shared.opts.call_wait).await?, false))
    }

    /// Call and decode the answer.
    pub async fn call_as<P: Serialize + ?Sized, T: DeserializeOwned>(
        &self,
        method: &str,
        params: &P,
    ) -> Result<T, CallError> {
        let (peer, direct) = self.peer_for(method).await?;
        peer.call_as(method, params)
            .await
            .map_err(|e| through(direct, method, e))
    }

    /// A typed call: the method is the params type's ([`protocol::wire::Call`],
    /// the daemons' own in the `busapi` crate), the answer decodes into its result.
    pub async fn call_typed<C: protocol::wire::Call>(
        &self,
        params: &C,
    ) -> Result<C::Result, CallError> {
        self.call_as(C::METHOD, params).await
    }

    /// [`Bus::call_typed`] with options (deadline, cancellation).
    pub async fn call_typed_with<C: protocol::wire::Call>(
        &self,
        params: &C,
        opts: CallOptions,
    ) -> Result<C::Result, CallError> {
        let answer = self.call_with(C::METHOD, params, opts).await?;
        serde_json::from_value(answer)
            .map_err(|e| CallError::Codec(format!("answer to {} does not decode: {e}", C::METHOD)))
    }

    /// [`Bus::call_gathered`] of a typed call, its answer decoded.
    pub async fn call_gathered_typed<C: protocol::wire::Call>(
        &self,
        key: &str,
        params: &C,
    ) -> Result<C::Result, CallError> {
        self.call_gathered_as(C::METHOD, key, params).await
    }

    /// Call with options (deadline, cancellation).
    pub async fn call_with<P: Serialize + ?Sized>(
        &self,
        method: &str,
        params: &P,
        opts: CallOptions,
    ) -> Result<Value, CallError> {
        let (peer, direct) = self.peer_for(method).await?;
        peer.call_with(method, params, opts)
            .await
            .map_err(|e| through(direct, method, e))
    }

    /// Call `method` with other calls of it (and of the same `key`) gathered into one
    /// message while the bus is busy (the [`batch`] module): at rest it goes at once,
    /// alone, as [`Bus::call`] would send it. Each call is answered on its own, as it
    /// would be alone; one that is slow holds the others of its batch until it is
    /// answered, so calls that may be slow for different reasons take different keys.
    /// A gathered call has no cancellation of its own.
    pub async fn call_gathered<P: Serialize + ?Sized>(
        &self,
        method: &str,
        key: &str,
        params: &P,
    ) -> Result<Box<RawValue>, CallError> {
        let params = serde_json::value::to_raw_value(params)
            .map_err(|e| CallError::Codec(format!("the params of {method}: {e}")))?;
        let Some(limits) = self.shared.opts.gather else {
            return self.call_raw(method, params).await;
        };
        let gatherer = {
            let mut all = lock(&self.shared.gatherers);
            let id = format!("{method}\n{key}");
            match all.get(&id) {
                Some(g) => g.clone(),
                None => {
                    let send = Arc::new(Sending(Arc::downgrade(&self.shared)));
                    let g = Arc::new(Gatherer::start(method, limits, send));
                    all.insert(id, g.clone());
                    g
                }
            }
        };
        gatherer.call(params).await
    }

    /// [`Bus::call_gathered`], its answer decoded.
    pub async fn call_gathered_as<P: Serialize + ?Sized, T: DeserializeOwned>(
        &self,
        method: &str,
        key: &str,
        params: &P,
    ) -> Result<T, CallError> {
        let raw = self.call_gathered(method, key, params).await?;
        serde_json::from_str(raw.get())
            .map_err(|e| CallError::Codec(format!("answer to {method} does not decode: {e}")))
    }

    /// Call with params already encoded, answering the result exactly as it arrived
    /// (for a caller that decodes it itself, without a JSON tree between).
    pub async fn call_raw(
        &self,
        method: &str,
        params: Box<RawValue>,
    ) -> Result<Box<RawValue>, CallError> {
        let (peer, direct) = self.peer_for(method).await?;
        peer.call_raw(method, &params, CallOptions::default())
            .await
            .map_err(|e| through(direct, method, e))
    }

    /// Publish a notification on `topic`. Dropped (and `false`) while disconnected:
    /// a notification is a nudge, never the state.
    pub fn publish<P: Serialize + ?Sized>(&self, topic: &str, params: &P) -> bool {
        let peer = self.shared.current.borrow().clone();
        match peer {
            Some(peer) => peer.notify(topic, params).is_ok(),
            None => false,
        }
    }

    /// Receive `topics` too, now and after every reconnection.
    pub async fn subscribe(&self, topics: &[&str]) -> Result<(), CallError> {
        {
            let mut mine = lock(&self.shared.topics);
            for t in topics {
                if !mine.iter().any(|m| m == t) {
                    mine.push(t.to_string());
                }
            }
        }
        let peer = self.shared.current.borrow().clone();
        if let Some(peer) = peer {
            peer.call("bus.subscribe", &json!({ "topics": topics }))
                .await?;
        }
        Ok(())
    }

    /// Resolves once this client left the bus for good: closed, or replaced by
    /// another instance registering the same service (a daemon then stops).
    pub async fn left(&self) {
        let mut rx = self.shared.stop.subscribe();
        let _ = rx.wait_for(|s| *s).await;
    }

    /// Leave the bus: close the connection and stop reconnecting.
    pub fn close(&self) {
        self.shared.stop.send_replace(true);
        if let Some(peer) = self.shared.current.borrow().as_ref() {
            peer.close("leaving the bus");
        }
    }
}

/// The batches of [`Bus::call_gathered`] go out on the bus's connection of the
/// moment; a bus gone answers `unavailable`.
struct Sending(Weak<Shared>);

impl Sending {
    fn bus(&self) -> Result<Bus, CallError> {
        match self.0.upgrade() {
            Some(shared) => Ok(Bus { shared }),
            None => Err(CallError::Rpc(RpcError::new(
                Code::Unavailable,
                "the bus client stopped",
            ))),
        }
    }
}

impl BatchSend for Sending {
    fn one(
        &self,
        method: &str,
        params: Box<RawValue>,
    ) -> BoxFuture<Result<Box<RawValue>, CallError>> {
        let (bus, method) = (self.bus(), method.to_owned());
        Box::pin(async move { bus?.call_raw(&method, params).await })
    }

    fn many(
        &self,
        batch: &str,
        params: &BatchParams<Box<RawValue>>,
    ) -> BoxFuture<Result<Box<RawValue>, CallError>> {
        let (bus, batch) = (self.bus(), batch.to_owned());
        let params = serde_json::value::to_raw_value(params)
            .map_err(|e| CallError::Codec(format!("the params of {batch}: {e}")));
        Box::pin(async move { bus?.call_raw(&batch, params?).await })
    }
}

/// The variable that sets how many batches of one method [`Bus::call_gathered`]
/// keeps out at once (0: every call alone, as before batches).
pub const BATCH_IN_FLIGHT_ENV: &str = "OPEN_CONDUIT_BATCH_IN_FLIGHT";

/// The gathering of [`Bus::call_gathered`]: [`BatchLimits::default`], or as
/// [`BATCH_IN_FLIGHT_ENV`] says (0 to [`MAX_BATCH_IN_FLIGHT`]; any other value is
/// logged and the default used).
fn gather_limits() -> Option<BatchLimits> {
    let limits = BatchLimits::default();
    let Ok(text) = std::env::var(BATCH_IN_FLIGHT_ENV) else {
        return Some(limits);
    };
    match text.trim().parse::<usize>() {
        Ok(0) => None,
        Ok(n) if n <= MAX_BATCH_IN_FLIGHT => Some(BatchLimits {
            in_flight: n,
            ..limits
        }),
        _ => {
            tracing::warn!(
                value = %text,
                default = limits.in_flight,
                "{BATCH_IN_FLIGHT_ENV} is not a number from 0 to {MAX_BATCH_IN_FLIGHT}: using the default"
            );
            Some(limits)
        }
    }
}

/// The most batches of one method [`BATCH_IN_FLIGHT_ENV`] may allow out at once.
pub const MAX_BATCH_IN_FLIGHT: usize = 256;

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// A call's error as the caller sees it: on a direct connection, as the broker
/// would have answered it.
fn through(direct: bool, method: &str, e: CallError) -> CallError {
    if direct {
        crate::direct::as_through_broker(method, e)
    } else {
        e
    }
}

/// Serve the service's direct socket once it has joined the bus (once a process).
fn serve_direct(shared: &Shared) {
    let (Some(dir), Some(service)) = (&shared.opts.direct, &shared.opts.service) else {
        return;
    };
    let mut server = lock(&shared.server);
    if server.is_some() {
        return;
    }
    let options = Options {
        serve_times: shared.times.clone(),
        ..Options::large(format!("direct ({service})"))
    };
    match crate::direct::serve(
        dir,
        service,
        &shared.opts.prefixes,
        shared.handler.clone(),
        options,
    ) {
        Ok(s) => {
            tracing::info!(socket = %s.path().display(), "serving direct connections");
            *server = Some(s);
        }
        // A unit that may not write the directory: the broker carries every call.
        Err(e) => {
            tracing::info!(error = %e, "no direct socket: every call comes through the broker")
        }
    }
}

fn unavailable(opts: &BusOptions, waited: Duration) -> CallError {
    CallError::Rpc(RpcError::new(
        Code::Unavailable,
        format!(
            "no connection to the bus at {} within {waited:?}",
            opts.socket.display()
        ),
    ))
}

/// Connect, register, subscribe; on loss, again with backoff, until closed; then
/// stop serving the direct socket.
async fn keep_connected(shared: Arc<Shared>) {
    connection_loop(&shared).await;
    let server = lock(&shared.server).take();
    drop(server);
}

async fn connection_loop(shared: &Arc<Shared>) {
    let mut backoff = BACKOFF_FIRST;
    let mut stop = shared.stop.subscribe();
    let mut logged_down = false;
    loop {
        if *stop.borrow() {
            return;
        }
        match join(shared).await {
            Ok(peer) => {
                if logged_down {
                    tracing::info!(socket = %shared.opts.socket.display(), "bus connection back");
                }
                logged_down = false;
                backoff = BACKOFF_FIRST;
                shared.current.send_replace(Some(peer.clone()));
                serve_direct(shared);
                tokio::select! {
                    reason = peer.closed() => {
                        if *shared.stop.borrow() {
                            // Closed by this client's own leaving: nothing was lost.
                            shared.current.send_replace(None);
                            return;
                        }
                        tracing::warn!(%reason, "bus connection lost; reconnecting");
                    }
                    _ = stop.wait_for(|s| *s) => {
                        peer.close("leaving the bus");
                        shared.current.send_replace(None);
                        return;
                    }
                }
                shared.current.send_replace(None);
            }
            Err(e) => {
                if !logged_down {
                    tracing::warn!(socket = %shared.opts.socket.display(), error = %e, "cannot join the bus; retrying with backoff");
                    logged_down = true;
                } else {
                    tracing::debug!(error = %e, "cannot join the bus");
                }
                tokio::select! {
                    _ = tokio::time::sleep(backoff) => {}
                    _ = stop.wait_for(|s| *s) => return,
                }
                backoff = (backoff * 2).min(BACKOFF_MAX);
            }
        }
    }
}

async fn join(shared: &Shared) -> Result<Peer, String> {
    let opts = &shared.opts;
    let stream = tokio::net::UnixStream::connect(&opts.socket)
        .await
        .map_err(|e| format!("connect {}: {e}", opts.socket.display()))?;
    let (r, w) = crate::sock::split(stream)
        .map_err(|e| format!("connect {}: {e}", opts.socket.display()))?;
    // The broker's bound (64 MiB), both ways: a webhook body crosses in base64.
    let options = Options {
        serve_times: shared.times.clone(),
        ..Options::large(&opts.name)
    };
    let peer = protocol::connect_arc(r, w, shared.handler.clone(), options);
    if let Some(service) = &opts.service {
        peer.call(
            "bus.register",
            &json!({ "service": service, "prefixes": opts.prefixes }),
        )
        .await
        .map_err(|e| format!("bus.register {service}: {e}"))?;
    }
    let topics = lock(&shared.topics).clone();
    if !topics.is_empty() {
        peer.call("bus.subscribe", &json!({ "topics": topics }))
            .await
            .map_err(|e| format!("bus.subscribe: {e}"))?;
    }
    Ok(peer)
}

/// A handler for a service from a closure over (method, params): the usual shape
/// of a daemon's bus methods.
pub struct ServiceFn<F>(pub F);

impl<F, Fut> Handler for ServiceFn<F>
where
    F: Fn(String, Value) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = Result<Value, RpcError>> + Send + 'static,
{
    fn call(&self, request: protocol::Request) -> protocol::BoxFuture<Result<Reply, RpcError>> {
        let params = request.params_value();
        let method = request.method;
        let fut = params.map(|p| (self.0)(method, p));
        Box::pin(async move { protocol::reply(&fut?.await?) })
    }
}
