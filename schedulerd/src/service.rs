//! schedulerd on the bus: `sched.*` methods (their params and results are
//! [`busapi::sched`]'s, which drive the dispatch), and the notifications that wake it.
//!
//! - `sched.route_trace {scope_id, event: {type, source?, keys?, payload: {schema?, data}}}`:
//!   how every route of the scope would decide this hypothetical event (each route's
//!   verdict and reason, and the outcome), writing nothing;
//! - `sched.interrupt {work_id, reason?}`, `sched.stop {work_id, reason?}`,
//!   `sched.inject {work_id, inputs}`: the executor's control on the Work's running
//!   attempt (`conflict` when it has none); `inputs` are Events or IDs of the Work's
//!   input events, each injected as its own `executor.inject {event}`;
//! - `sched.cancel {work_id, reason?}`: cancel the Work, stopping its running attempt
//!   first when it runs on this host (`executor.stop`, with physical-stop evidence);
//!   answers what became of the attempt (`attempt: {execution_id, host, stopped,
//!   detail}`, `null` when none ran): an attempt of another host, or one its executor
//!   could not stop, may still be running, and the Work is cancelled all the same;
//! - `sched.retry {work_id, reason?, seq?}`: run the Work again (`store.work_retry`):
//!   a failed or cancelled one is reopened with the inputs it ended with, an idle or
//!   completed one gets a new turn on the input `seq` (an action's Event) or its
//!   latest; `conflict` for one that is running, waiting or queued already;
//! - `sched.status {}`: what the router has done (routed, created, unmatched, the last
//!   event, and why it is held up, if it is), the configuration generation it routes
//!   by, and the route handlers it knows.
//!
//! `event.accepted` wakes the router, `config.applied` and `ext.state` make it read
//! the configuration and the handlers again.

use std::future::Future;
use std::sync::Arc;

use busapi::sched::{
    CancelRequest, InjectRequest, InterruptRequest, MetricsRequest, RetryRequest, RouteTrace,
    RouteTraceRequest, SchedStatus, StatusRequest, StopRequest,
};
use busapi::store::UnroutedEvent;
use busapi::{topic, Call};
use protocol::{reply, BoxFuture, Code, Handler, Peer, Reply, Request, RpcError};
use serde_json::Value;
use tokio::sync::Notify;

use crate::router::{Router, Stats};
use crate::starter::Starter;

/// The wakes the service hands the loops.
#[derive(Debug, Default)]
pub struct Wakes {
    /// Events were accepted.
    pub events: Notify,
    /// A new configuration generation.
    pub config: Notify,
    /// Extensions' registrations changed.
    pub extensions: Notify,
    /// Work may be ready to start.
    pub work: Notify,
}

/// The bus handler.
#[derive(Debug, Clone)]
pub struct Service {
    router: Router,
    stats: Arc<Stats>,
    wakes: Arc<Wakes>,
    starter: Arc<std::sync::OnceLock<Starter>>,
}

/// Decode `request`'s params as `C`, and answer what `serve` makes of them: the
/// method's params and result are `C`'s.
async fn serve<C, F, Fut>(request: &Request, serve: F) -> Result<Reply, RpcError>
where
    C: Call,
    F: FnOnce(C) -> Fut,
    Fut: Future<Output = Result<C::Result, RpcError>>,
{
    let params: C = request.params()?;
    reply(&serve(params).await?)
}

impl Service {
    /// Serve `router`.
    pub fn new(router: Router, stats: Arc<Stats>, wakes: Arc<Wakes>) -> Service {
        Service {
            router,
            stats,
            wakes,
            starter: Arc::default(),
        }
    }

    /// Report what `starter` runs in `sched.status`.
    pub fn set_starter(&self, starter: Starter) {
        let _ = self.starter.set(starter);
    }

    /// The starter, once schedulerd has one.
    fn starter(&self) -> Result<&Starter, RpcError> {
        self.starter
            .get()
            .ok_or_else(|| RpcError::new(Code::Unavailable, "schedulerd is starting"))
    }

    /// `sched.route_trace`: how the scope's routes would decide the event, writing
    /// nothing.
    pub async fn trace(router: &Router, p: RouteTraceRequest) -> Result<RouteTrace, RpcError> {
        let payload = p.event.payload.unwrap_or_default();
        let ev = UnroutedEvent {
            seq: 0,
            id: "evt_trace".into(),
            scope_id: p.scope_id,
            event_type: p.event.event_type,
            source: p.event.source,
            keys: p.event.keys,
            payload: serde_json::value::to_raw_value(&payload.data)
                .map_err(|e| RpcError::invalid_params(format!("event.payload: {e}")))?,
            parent_id: None,
            root_id: String::new(),
            depth: 0,
            accepted_ms: 0,
            schema: (!payload.schema.is_empty()).then_some(payload.schema),
            delivery_id: None,
            occurred_at: None,
            accepted_at: String::new(),
            execution_id: None,
        };
        router
            .evaluate(&ev)
            .await
            .map_err(|e| RpcError::new(Code::Unavailable, e.to_string()))
    }

    /// `sched.metrics`: the router's and the starter's queues and counts (every
    /// family `oc_schedulerd_…`), and the bus call times.
    pub fn metrics(&self) -> busapi::metrics::MetricsText {
        use daemon::metrics::{Kind, Text};
        let mut t = Text::new();
        let router = self.stats.snapshot();
        t.family(
            "oc_schedulerd_router_events_total",
            Kind::Counter,
            "Events the router decided, by outcome (created: routed to a Work it created).",
        );
        for (outcome, n) in [
            ("routed", router.routed),
            ("created", router.created),
            ("unmatched", router.unmatched),
        ] {
            t.sample(
                "oc_schedulerd_router_events_total",
                &[("outcome", outcome)],
                n,
            );
        }
        t.single(
            "oc_schedulerd_router_last_seq",
            Kind::Gauge,
            "The sequence number of the last event routed.",
            router.last_seq,
        );
        t.single(
            "oc_schedulerd_router_queue_depth",
            Kind::Gauge,
            "Events the router read and has not routed yet.",
            self.stats.queue(),
        );
        t.single(
            "oc_schedulerd_router_blocked",
            Kind::Gauge,
            "1 while the router is held up (sched.status says why).",
            u8::from(!router.blocked.is_empty()),
        );
        let starter = self.starter.get();
        let (running, blocked) = starter.map(Starter::snapshot).unwrap_or_default();
        t.single(
            "oc_schedulerd_starter_queue_depth",
            Kind::Gauge,
            "Works the starter's last pass found ready and did not start.",
            starter.map_or(0, Starter::queue),
        );
        t.family(
            "oc_schedulerd_starter_running",
            Kind::Gauge,
            "Attempts this host's starter observes now, by pool.",
        );
        let mut pools = std::collections::BTreeMap::<&str, u64>::new();
        pools.insert("", 0);
        for pool in running.values() {
            *pools.entry(pool.as_str()).or_default() += 1;
        }
        for (pool, n) in pools {
            t.sample("oc_schedulerd_starter_running", &[("pool", pool)], n);
        }
        t.single(
            "oc_schedulerd_starter_blocked",
            Kind::Gauge,
            "Works that cannot start now (sched.status says why).",
            blocked.len(),
        );
        daemon::metrics::render_call_times(&mut t, "schedulerd");
        busapi::metrics::MetricsText {
            text: t.into_string(),
        }
    }

    /// `sched.status`.
    pub fn status(&self) -> SchedStatus {
        let k = self.router.knowledge();
        let (generation, handlers) = match k.read() {
            Ok(k) => (
                k.config.as_ref().map(|(_, h)| h.clone()),
                k.handlers.clone(),
            ),
            Err(_) => (None, Default::default()),
        };
        let (running, blocked) = self
            .starter
            .get()
            .map(Starter::snapshot)
            .unwrap_or_default();
        SchedStatus {
            router: self.stats.snapshot(),
            generation,
            handlers,
            running,
            blocked,
        }
    }
}

impl Handler for Service {
    fn call(&self, request: Request) -> BoxFuture<Result<Reply, RpcError>> {
        let this = self.clone();
        Box::pin(async move {
            let this = &this;
            let conflict = |why: String| RpcError::new(Code::Conflict, why);
            match request.method.as_str() {
                m if m == RouteTraceRequest::METHOD => {
                    serve(&request, |p| Service::trace(&this.router, p)).await
                }
                m if m == StatusRequest::METHOD => {
                    serve(&request, |_: StatusRequest| async { Ok(this.status()) }).await
                }
                m if m == MetricsRequest::METHOD => {
                    serve(&request, |_: MetricsRequest| async { Ok(this.metrics()) }).await
                }
                m if m == CancelRequest::METHOD => {
                    serve(&request, |p: CancelRequest| async move {
                        this.starter()?.cancel(&p.work_id, &p.reason).await
                    })
                    .await
                }
                m if m == RetryRequest::METHOD => {
                    serve(&request, |p: RetryRequest| async move {
                        this.starter()?.retry(&p.work_id, &p.reason, p.seq).await
                    })
                    .await
                }
                m if m == InterruptRequest::METHOD => {
                    serve(&request, |p: InterruptRequest| async move {
                        let starter = this.starter()?;
                        starter
                            .interrupt(&p.work_id, &p.reason)
                            .await
                            .map_err(conflict)
                    })
                    .await
                }
                m if m == StopRequest::METHOD => {
                    serve(&request, |p: StopRequest| async move {
                        this.starter()?.stop(&p.work_id).await.map_err(conflict)
                    })
                    .await
                }
                m if m == InjectRequest::METHOD => {
                    serve(&request, |p: InjectRequest| async move {
                        let starter = this.starter()?;
                        starter
                            .inject(&p.work_id, &p.inputs)
                            .await
                            .map_err(conflict)
                    })
                    .await
                }
                other => Err(RpcError::method_not_found(other)),
            }
        })
    }

    fn notify(&self, _peer: &Peer, method: &str, _params: Value) {
        match method {
            topic::EVENT_ACCEPTED => self.wakes.events.notify_one(),
            topic::CONFIG_APPLIED => self.wakes.config.notify_one(),
            topic::EXT_STATE => self.wakes.extensions.notify_one(),
            topic::WORK_CHANGED => self.wakes.work.notify_one(),
            _ => {}
        }
    }
}
