//! schedulerd on the bus: `sched.*` methods, and the notifications that wake it.
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

use std::sync::Arc;

use protocol::{reply, BoxFuture, Code, Handler, Peer, Reply, Request, RpcError};
use serde::Deserialize;
use serde_json::{json, Value};
use tokio::sync::Notify;

use crate::router::{RoutedEvent, Router, Stats};

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
    starter: Arc<std::sync::OnceLock<crate::starter::Starter>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TraceEvent {
    #[serde(rename = "type")]
    event_type: String,
    #[serde(default)]
    source: String,
    #[serde(default)]
    keys: Vec<String>,
    #[serde(default)]
    payload: Option<protocol::wire::Payload>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ControlParams {
    work_id: String,
    #[serde(default)]
    reason: String,
    #[serde(default)]
    inputs: Option<Value>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CancelParams {
    work_id: String,
    #[serde(default)]
    reason: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RetryParams {
    work_id: String,
    #[serde(default)]
    reason: String,
    #[serde(default)]
    seq: Option<i64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TraceParams {
    scope_id: String,
    event: TraceEvent,
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
    pub fn set_starter(&self, starter: crate::starter::Starter) {
        let _ = self.starter.set(starter);
    }

    async fn trace(router: Router, p: TraceParams) -> Result<Value, RpcError> {
        let payload = p.event.payload.unwrap_or_default();
        let ev = RoutedEvent {
            seq: 0,
            id: "evt_trace".into(),
            scope_id: p.scope_id,
            event_type: p.event.event_type,
            source: p.event.source,
            keys: p.event.keys,
            payload: serde_json::value::to_raw_value(&payload.data)
                .map_err(|e| RpcError::invalid_params(format!("event.payload: {e}")))?,
            schema: (!payload.schema.is_empty()).then_some(payload.schema),
            ..RoutedEvent::default()
        };
        let d = router
            .evaluate(&ev)
            .await
            .map_err(|e| RpcError::new(Code::Unavailable, e.to_string()))?;
        Ok(json!({"records": d.records, "outcome": d.outcome}))
    }

    fn status(&self) -> Value {
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
            .map(crate::starter::Starter::snapshot)
            .unwrap_or_default();
        json!({
            "router": self.stats.snapshot(),
            "generation": generation,
            "handlers": handlers,
            "running": running,
            "blocked": blocked,
        })
    }
}

impl Handler for Service {
    fn call(&self, request: Request) -> BoxFuture<Result<Reply, RpcError>> {
        let this = self.clone();
        Box::pin(async move {
            match request.method.as_str() {
                "sched.route_trace" => {
                    let p: TraceParams = request.params()?;
                    reply(&Service::trace(this.router.clone(), p).await?)
                }
                "sched.status" => reply(&this.status()),
                "sched.cancel" => {
                    let p: CancelParams = request.params()?;
                    let Some(starter) = this.starter.get() else {
                        return Err(RpcError::new(Code::Unavailable, "schedulerd is starting"));
                    };
                    reply(&starter.cancel(&p.work_id, &p.reason).await?)
                }
                "sched.retry" => {
                    let p: RetryParams = request.params()?;
                    let Some(starter) = this.starter.get() else {
                        return Err(RpcError::new(Code::Unavailable, "schedulerd is starting"));
                    };
                    reply(&starter.retry(&p.work_id, &p.reason, p.seq).await?)
                }
                "sched.interrupt" | "sched.stop" | "sched.inject" => {
                    let p: ControlParams = request.params()?;
                    let control = request
                        .method
                        .strip_prefix("sched.")
                        .unwrap_or_default()
                        .to_owned();
                    let Some(starter) = this.starter.get() else {
                        return Err(RpcError::new(Code::Unavailable, "schedulerd is starting"));
                    };
                    let mut extra = serde_json::Map::new();
                    if !p.reason.is_empty() {
                        extra.insert("reason".into(), Value::from(p.reason));
                    }
                    if let Some(inputs) = p.inputs {
                        extra.insert("inputs".into(), inputs);
                    }
                    match starter
                        .control(&p.work_id, &control, Value::Object(extra))
                        .await
                    {
                        Ok(v) => reply(&v),
                        Err(why) => Err(RpcError::new(Code::Conflict, why)),
                    }
                }
                other => Err(RpcError::method_not_found(other)),
            }
        })
    }

    fn notify(&self, _peer: &Peer, method: &str, _params: Value) {
        match method {
            "event.accepted" => self.wakes.events.notify_one(),
            "config.applied" => self.wakes.config.notify_one(),
            "ext.state" => self.wakes.extensions.notify_one(),
            "work.changed" => self.wakes.work.notify_one(),
            _ => {}
        }
    }
}
