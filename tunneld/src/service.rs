//! tunneld on the bus: `tunnel.url` and `tunnel.status`, and the state they share
//! with the run loop.
//!
//! - `tunnel.url {run_id, url, provider_package?}` (extrunner forwards the provider's):
//!   `conflict` for a run tunneld no longer holds; `invalid` (logged, not published)
//!   for a URL that is not http(s) with a host and no credentials; otherwise the URL
//!   (`""`: the tunnel is down) is recorded in storaged and `tunnel.changed {url}` is
//!   published. Calls are taken one at a time, in the order they arrive.
//! - `tunnel.status {}`: the provider, the run held, the URL, the last stop and the
//!   runs started.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use busapi::store::TunnelRecord;
use busapi::tunnel::{StatusRequest, TunnelStatus, UrlRequest, UrlResponse};
use busapi::Call;
use daemon::bus::Bus;
use protocol::{reply, BoxFuture, Code, Handler, Reply, Request, RpcError};
use serde_json::{json, Value};

/// The notification published when the public URL changes.
pub const CHANGED_TOPIC: &str = busapi::topic::TUNNEL_CHANGED;
/// The most bytes of a `tunnel.url` request taken.
pub const MAX_URL_REQUEST: usize = busapi::tunnel::MAX_URL_REQUEST;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// The run tunneld holds.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Held {
    /// The run ID.
    pub run_id: String,
    /// The tunnel type.
    pub provider: String,
    /// The package running it.
    pub package: String,
}

/// What the run loop and the bus methods share.
#[derive(Debug, Default)]
pub struct State {
    held: Mutex<Option<Held>>,
    url: Mutex<String>,
    last_stop: Mutex<String>,
    /// A URL was taken during the run held now (resets the backoff).
    published: AtomicBool,
    /// Runs started.
    pub runs: AtomicU64,
    /// URLs refused.
    pub refused: AtomicU64,
    order: tokio::sync::Mutex<()>,
}

impl State {
    /// Hold `run` (replacing any run held).
    pub fn hold(&self, run: Option<Held>) {
        self.published.store(false, Ordering::SeqCst);
        *lock(&self.held) = run;
    }

    /// The run held.
    pub fn held(&self) -> Option<Held> {
        lock(&self.held).clone()
    }

    /// Whether a URL was taken during the run held now.
    pub fn published(&self) -> bool {
        self.published.load(Ordering::SeqCst)
    }

    /// The public URL now (`""`: none).
    pub fn url(&self) -> String {
        lock(&self.url).clone()
    }

    /// Note why the last run stopped.
    pub fn stopped(&self, why: &str) {
        *lock(&self.last_stop) = why.to_owned();
    }

    /// Record `url` for the run `held` (or nothing held) with `reason`, in storaged and
    /// on the bus. Taken in order with the bus method's records.
    pub async fn record(
        &self,
        bus: &Bus,
        held: Option<&Held>,
        url: &str,
        reason: &str,
    ) -> Result<(), String> {
        let _order = self.order.lock().await;
        self.record_locked(bus, held, url, reason).await
    }

    async fn record_locked(
        &self,
        bus: &Bus,
        held: Option<&Held>,
        url: &str,
        reason: &str,
    ) -> Result<(), String> {
        let held = held.cloned().unwrap_or_default();
        let record = TunnelRecord {
            url: url.to_owned(),
            run_id: held.run_id,
            provider: held.provider,
            reason: reason.to_owned(),
            updated_at: String::new(),
        };
        bus.call_typed(&record)
            .await
            .map_err(|e| format!("{}: {e}", TunnelRecord::METHOD))?;
        *lock(&self.url) = url.to_owned();
        bus.publish(CHANGED_TOPIC, &json!({ "url": url }));
        Ok(())
    }

    /// What `tunnel.status` answers.
    pub fn status(&self) -> TunnelStatus {
        let held = self.held().unwrap_or_default();
        TunnelStatus {
            provider: held.provider,
            package: held.package,
            run_id: held.run_id,
            url: self.url(),
            last_stop: lock(&self.last_stop).clone(),
            runs: self.runs.load(Ordering::SeqCst),
            refused: self.refused.load(Ordering::SeqCst),
        }
    }
}

/// The bus handler.
#[derive(Debug, Clone)]
pub struct Service {
    state: Arc<State>,
    /// The client storaged is reached on.
    client: Bus,
    /// Woken by `config.applied`.
    pub config_changed: Arc<tokio::sync::Notify>,
}

impl Service {
    /// Serve `state`, recording through `client`.
    pub fn new(state: Arc<State>, client: Bus) -> Service {
        Service {
            state,
            client,
            config_changed: Arc::new(tokio::sync::Notify::new()),
        }
    }
}

async fn take_url(state: &State, bus: &Bus, p: UrlRequest) -> Result<UrlResponse, RpcError> {
    let _order = state.order.lock().await;
    let held = state.held();
    let holds = held.as_ref().is_some_and(|h| {
        h.run_id == p.run_id && (p.provider_package.is_empty() || h.package == p.provider_package)
    });
    let Some(held) = held.filter(|_| holds) else {
        tracing::warn!(run_id = %p.run_id, "a tunnel.url quoting a run tunneld does not hold: refused");
        return Err(RpcError::new(
            Code::Conflict,
            format!("tunnel run {:?} is not the run tunneld holds", p.run_id),
        ));
    };
    if !p.url.is_empty() {
        if let Err(why) = protocol::config::check_public_url(&p.url) {
            state.refused.fetch_add(1, Ordering::SeqCst);
            tracing::warn!(run_id = %p.run_id, provider = %held.provider, %why,
                "the provider's public URL is refused: not published");
            return Err(RpcError::new(
                Code::Invalid,
                format!("the public URL is refused: {why}"),
            ));
        }
    }
    state
        .record_locked(bus, Some(&held), &p.url, "")
        .await
        .map_err(|e| RpcError::new(Code::Unavailable, e))?;
    if p.url.is_empty() {
        tracing::info!(run_id = %p.run_id, provider = %held.provider, "the tunnel is down (the provider says so)");
    } else {
        state.published.store(true, Ordering::SeqCst);
        tracing::info!(run_id = %p.run_id, provider = %held.provider, url = %p.url, "the tunnel's public URL");
    }
    Ok(UrlResponse {})
}

impl Handler for Service {
    fn call(&self, request: Request) -> BoxFuture<Result<Reply, RpcError>> {
        let state = self.state.clone();
        let client = self.client.clone();
        Box::pin(async move {
            match request.method.as_str() {
                m if m == UrlRequest::METHOD => {
                    if request.params.get().len() > MAX_URL_REQUEST {
                        return Err(RpcError::new(
                            Code::Invalid,
                            format!("a {m} request is at most {MAX_URL_REQUEST} bytes"),
                        ));
                    }
                    let p: UrlRequest = request.params()?;
                    let answer: <UrlRequest as Call>::Result = take_url(&state, &client, p).await?;
                    reply(&answer)
                }
                m if m == StatusRequest::METHOD => {
                    let _: StatusRequest = request.params()?;
                    let answer: <StatusRequest as Call>::Result = state.status();
                    reply(&answer)
                }
                other => Err(RpcError::method_not_found(other)),
            }
        })
    }

    fn notify(&self, _peer: &protocol::Peer, method: &str, _params: Value) {
        if method == busapi::topic::CONFIG_APPLIED {
            self.config_changed.notify_one();
        }
    }
}
