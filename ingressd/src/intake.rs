//! The intake over the bus: a delivery goes to extrunner (`ext.webhook`), which has the
//! owning extension verify and parse it (`webhook.handle`) and has storaged accept the
//! deliveries it yields durably, all before it answers; only then does the sender get
//! the extension's answer. The webhook paths come from extrunner's `ext.registrations`,
//! fetched again whenever extrunner announces a change (`ext.state`), whenever the bus
//! comes back, and every [`ROUTES_POLL`] regardless.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use busapi::ext::{RegistrationsRequest, WebhookDelivery, WebhookRequest};
use busapi::ingress::RoutesResponse;
use busapi::ingress::{ReconcileStatusRequest, ReconcileStatusResponse, Route, RoutesRequest};
use busapi::store::SequenceRequest;
use busapi::Call;
use daemon::bus::Bus;
use protocol::wire::{HttpAnswer, SourceDecl, WebhookHandleParams};

use crate::reconcile::{Reports, Sources};
use protocol::{BoxFuture as RpcFuture, CallError, Code, Handler, Peer, Reply, Request, RpcError};
use serde_json::Value;

use crate::{Answer, BoxFuture, Delivery, Intake, IntakeError, Routes};

/// How often the routes are fetched without a notification.
pub const ROUTES_POLL: Duration = Duration::from_secs(10);
/// How long `/healthz` waits for storaged and extrunner.
pub const HEALTH_TIMEOUT: Duration = Duration::from_secs(2);
/// The `Retry-After` of a delivery that could not be taken now, in seconds.
pub const RETRY_AFTER_S: u32 = 5;

/// Deliveries through extrunner and storaged, on the bus.
#[derive(Debug, Clone)]
pub struct BusIntake {
    bus: Bus,
}

impl BusIntake {
    /// Deliver through `bus`.
    pub fn new(bus: Bus) -> BusIntake {
        BusIntake { bus }
    }
}

/// The request as `webhook.handle` takes it: header names lowercased, each with its
/// values in order. The body moves over rather than being copied (it may be 25 MiB).
pub fn handle_params(d: &mut Delivery) -> WebhookHandleParams {
    let mut headers = std::collections::BTreeMap::<String, Vec<String>>::new();
    for (name, value) in &d.headers {
        headers
            .entry(name.to_ascii_lowercase())
            .or_default()
            .push(String::from_utf8_lossy(value).into_owned());
    }
    WebhookHandleParams {
        method: d.method.clone(),
        path: d.path.clone(),
        query: d.query.clone(),
        headers,
        body: std::mem::take(&mut d.body),
        remote_addr: d.remote.to_string(),
    }
}

/// The sender's answer from the extension's.
pub fn answer_of(r: HttpAnswer) -> Answer {
    Answer {
        status: r.status,
        headers: r.headers.into_iter().collect(),
        body: r.body,
    }
}

/// The 413 of a body of `body_len` bytes that crosses as a message of `size` bytes,
/// over the `limit` of the hop that refused it (the owning extension's, or the bus's):
/// redelivering cannot help, so it is not a 503.
fn too_large(owner: &str, body_len: usize, size: u64, limit: u64) -> Answer {
    tracing::warn!(OC_EXTENSION = %owner, body_len, size, limit, "a delivery too large for the message limit");
    Answer::text(
        413,
        format!(
            "this body of {body_len} bytes is too large for `{owner}`: it crosses base64-encoded \
             in a message of {size} bytes, over the {limit}-byte message limit \
             (max_message_bytes) of the extension or the bus; an extension that does not say \
             it reads larger messages takes bodies up to about 12 MiB\n"
        ),
    )
}

/// What a failed `ext.webhook` for a body of `body_len` bytes is answered: never a
/// 2xx.
pub fn failure(owner: &str, body_len: usize, e: CallError) -> Result<Answer, IntakeError> {
    let unavailable = IntakeError::Unavailable {
        retry_after_s: RETRY_AFTER_S,
    };
    match e {
        CallError::TooLarge { size, limit } => Ok(too_large(
            owner,
            body_len,
            u64::try_from(size).unwrap_or(u64::MAX),
            u64::try_from(limit).unwrap_or(u64::MAX),
        )),
        CallError::Rpc(err) if err.too_large_of().is_some() => {
            let (size, limit) = err.too_large_of().unwrap_or_default();
            Ok(too_large(owner, body_len, size, limit))
        }
        CallError::Rpc(err) => match err.app_code() {
            Some(c) if c == Code::Overloaded.as_str() => {
                // Calls queue for their place on each hop; this is a stated bound on
                // that queue (its message names it), not mere busyness.
                tracing::warn!(OC_EXTENSION = %owner, bound = %err.message, "delivery refused: a bound on waiting calls was reached");
                Err(IntakeError::Overloaded {
                    retry_after_s: RETRY_AFTER_S,
                    bound: err.message,
                })
            }
            Some(c)
                if c == Code::Unavailable.as_str()
                    || c == Code::ShuttingDown.as_str()
                    || c == Code::NotFound.as_str() =>
            {
                tracing::warn!(OC_EXTENSION = %owner, error = %err, "delivery not taken now");
                Err(unavailable)
            }
            Some(c) if c == Code::Conflict.as_str() => {
                tracing::error!(OC_EXTENSION = %owner, error = %err, "a redelivery differs from the delivery kept");
                Ok(Answer::text(
                    409,
                    "this delivery ID was accepted before with different content\n",
                ))
            }
            _ => {
                tracing::error!(OC_EXTENSION = %owner, error = %err, "the delivery failed");
                Err(IntakeError::Internal(err.to_string()))
            }
        },
        other => {
            tracing::warn!(OC_EXTENSION = %owner, error = %other, "extrunner did not answer");
            Err(unavailable)
        }
    }
}

impl Intake for BusIntake {
    fn deliver(&self, mut d: Delivery) -> BoxFuture<'_, Result<Answer, IntakeError>> {
        Box::pin(async move {
            let body_len = d.body.len();
            let request = handle_params(&mut d);
            let call: WebhookDelivery = WebhookRequest {
                name: d.owner.clone(),
                request,
            };
            // Gathered with the other deliveries for the same extension under way
            // (each answered on its own); keyed by extension, so that a slow one
            // holds up only its own deliveries.
            match self.bus.call_gathered_typed(&d.owner, &call).await {
                Ok(a) => {
                    // The first line of a Work's story: `open-conduit logs --work`
                    // joins it to the Work by the event's ID. At most
                    // LINES_PER_S a second (`accesslog`).
                    let now_s = std::time::SystemTime::now()
                        .duration_since(std::time::UNIX_EPOCH)
                        .map_or(0, |d| d.as_secs());
                    for delivery in &a.deliveries {
                        for event in &delivery.events {
                            let (line, left_out) = ACCESS_LINES.take(now_s);
                            if left_out > 0 {
                                tracing::info!(left_out, "{left_out} more deliveries were accepted in an earlier second without a line each (at most {} lines a second; their Events are kept)", crate::accesslog::LINES_PER_S);
                            }
                            if !line {
                                continue;
                            }
                            if delivery.added {
                                tracing::info!(OC_EXTENSION = %d.owner, OC_EVENT_ID = %event.id, path = %d.path, "delivery accepted");
                            } else {
                                tracing::info!(OC_EXTENSION = %d.owner, OC_EVENT_ID = %event.id, path = %d.path, "redelivery: already accepted, nothing added");
                            }
                        }
                    }
                    Ok(answer_of(a.response))
                }
                Err(e) => failure(&d.owner, body_len, e),
            }
        })
    }

    fn healthy(&self) -> BoxFuture<'_, bool> {
        Box::pin(async move {
            let (sequence, registrations) =
                (SequenceRequest::default(), RegistrationsRequest::default());
            let store = self.bus.call_typed(&sequence);
            let ext = self.bus.call_typed(&registrations);
            matches!(
                tokio::time::timeout(HEALTH_TIMEOUT, async { tokio::join!(store, ext) }).await,
                Ok((Ok(_), Ok(_)))
            )
        })
    }

    fn metrics(&self, own: String) -> BoxFuture<'_, String> {
        Box::pin(daemon::scrape::gather(
            &self.bus,
            "ingressd",
            own,
            daemon::scrape::SCRAPE_WAIT,
        ))
    }
}

/// The budget of the intake's line per delivery.
static ACCESS_LINES: crate::accesslog::LineBudget = crate::accesslog::LineBudget::new();

/// The bus handler of ingressd's service: wakes the route follower on `ext.state`,
/// and answers `ingress.routes` (the paths served now).
#[derive(Debug, Clone)]
pub struct Service {
    listen: Arc<std::sync::OnceLock<String>>,
    routes: Arc<Routes>,
    sources: Sources,
    reports: Reports,
    changed: Arc<tokio::sync::Notify>,
    fetched: Arc<AtomicU64>,
}

impl Service {
    /// Serve `routes`.
    pub fn new(routes: Arc<Routes>) -> Service {
        Service {
            listen: Arc::default(),
            routes,
            sources: Sources::default(),
            reports: Reports::default(),
            changed: Arc::new(tokio::sync::Notify::new()),
            fetched: Arc::new(AtomicU64::new(0)),
        }
    }

    /// Say where webhooks are accepted (for `ingress.routes`).
    pub fn set_listen(&self, addr: String) {
        let _ = self.listen.set(addr);
    }

    /// Woken on every `ext.state`.
    pub fn changed(&self) -> Arc<tokio::sync::Notify> {
        self.changed.clone()
    }

    /// The registered sources (for the reconcile passes).
    pub fn sources(&self) -> Sources {
        self.sources.clone()
    }

    /// The last reconcile pass of each source.
    pub fn reports(&self) -> Reports {
        self.reports.clone()
    }
}

impl Handler for Service {
    fn call(&self, request: Request) -> RpcFuture<Result<Reply, RpcError>> {
        let routes = self.routes.clone();
        let fetched = self.fetched.load(Ordering::SeqCst);
        let reports = self.reports.clone();
        let listen = self.listen.get().cloned().unwrap_or_default();
        Box::pin(async move {
            match request.method.as_str() {
                m if m == ReconcileStatusRequest::METHOD => {
                    let mut sources: Vec<_> = reports
                        .lock()
                        .map(|r| r.values().cloned().collect())
                        .unwrap_or_default();
                    sources.sort_by(|a: &crate::reconcile::PassReport, b| a.source.cmp(&b.source));
                    let answer: <ReconcileStatusRequest as Call>::Result =
                        ReconcileStatusResponse { sources };
                    protocol::reply(&answer)
                }
                m if m == RoutesRequest::METHOD => {
                    let answer: <RoutesRequest as Call>::Result = RoutesResponse {
                        listen,
                        instance: crate::instance().to_owned(),
                        routes: routes
                            .list()
                            .into_iter()
                            .map(|(path, owner)| Route { path, owner })
                            .collect(),
                        complete: routes.is_complete(),
                        fetches: fetched,
                    };
                    protocol::reply(&answer)
                }
                m if m == busapi::ingress::MetricsRequest::METHOD => {
                    protocol::reply(&busapi::metrics::MetricsText {
                        text: crate::metrics::render_serving(),
                    })
                }
                other => Err(RpcError::method_not_found(other)),
            }
        })
    }

    fn notify(&self, _peer: &Peer, method: &str, _params: Value) {
        if method == busapi::topic::EXT_STATE {
            self.changed.notify_one();
        }
    }
}

/// Fetch the webhook paths (and the sources) from extrunner once, into `routes` (and
/// `sources`).
pub async fn refresh_routes(
    bus: &Bus,
    routes: &Routes,
    sources: Option<&Sources>,
) -> Result<usize, CallError> {
    let r = bus.call_typed(&RegistrationsRequest::default()).await?;
    if let Some(sources) = sources {
        let list: Vec<(String, SourceDecl)> = r
            .extensions
            .iter()
            .flat_map(|e| e.sources.iter().map(|s| (e.name.clone(), s.clone())))
            .collect();
        if let Ok(mut s) = sources.lock() {
            *s = list;
        }
    }
    let triples: Vec<(String, String, String)> = r
        .extensions
        .iter()
        .flat_map(|e| {
            e.webhooks
                .iter()
                .map(|w| (w.path.clone(), e.name.clone(), w.source.clone()))
        })
        .collect();
    let n = triples.len();
    routes.replace_with_sources(triples);
    routes.set_complete(r.complete);
    Ok(n)
}

/// Keep `routes` current: at once, then on each `ext.state`, each reconnection and
/// every [`ROUTES_POLL`].
pub async fn follow_routes(bus: Bus, routes: Arc<Routes>, service: Service) {
    let changed = service.changed();
    loop {
        match refresh_routes(&bus, &routes, Some(&service.sources)).await {
            Ok(n) => {
                service.fetched.fetch_add(1, Ordering::SeqCst);
                tracing::debug!(
                    paths = n,
                    complete = routes.is_complete(),
                    "webhook paths fetched"
                );
            }
            Err(e) => {
                tracing::warn!(error = %e, "cannot fetch the webhook paths from extrunner now")
            }
        }
        let retry = if routes.is_complete() {
            ROUTES_POLL
        } else {
            Duration::from_millis(500)
        };
        tokio::select! {
            _ = changed.notified() => {}
            _ = tokio::time::sleep(retry) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_message_too_large_for_a_hop_is_413_naming_the_limit_not_503() {
        let body_len = 20 * 1024 * 1024;
        // extrunner's refusal: too large for the owning extension.
        let refused = RpcError::too_large(
            27_962_000,
            protocol::MAX_MESSAGE_BYTES,
            "the `webhook.handle` request is too large",
        );
        let a = failure("plain", body_len, CallError::Rpc(refused))
            .unwrap_or_else(|e| panic!("answered {e}"));
        assert_eq!(a.status, 413);
        let text = String::from_utf8_lossy(&a.body).into_owned();
        assert!(text.contains("16777216-byte message limit"), "{text}");
        assert!(text.contains("20971520 bytes"), "{text}");
        // ingressd's own bus call.
        let a = failure(
            "plain",
            body_len,
            CallError::TooLarge {
                size: 70_000_000,
                limit: protocol::LARGE_MESSAGE_BYTES,
            },
        )
        .unwrap_or_else(|e| panic!("answered {e}"));
        assert_eq!(a.status, 413);
        // Any other `invalid` is not a 413.
        let other = RpcError::new(Code::Invalid, "something else");
        assert!(failure("plain", body_len, CallError::Rpc(other)).is_err());
    }
}
