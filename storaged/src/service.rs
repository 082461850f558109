//! The `store.*` methods on the bus, over [`Store`].
//!
//! Each method is one atomic unit of the storage module; this layer only decodes,
//! dispatches, maps errors to wire codes and publishes the nudges other daemons
//! wait on (`event.accepted` after a write that added events, `work.changed` after a
//! write that may make Work ready, `config.applied` after a new configuration
//! generation).

use crate::{Store, StoreError};
use busapi::{store, Call};
use protocol::{BoxFuture, Handler, Reply, Request, RpcError};
use serde_json::value::RawValue;
use serde_json::Value;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, OnceLock};

/// Publishes a notification on the bus (set once the bus client exists).
pub type Publish = Arc<dyn Fn(&str, &Value) + Send + Sync>;

type Dispatch =
    for<'a> fn(
        &'a Store,
        &'a str,
        &'a RawValue,
    ) -> Pin<Box<dyn Future<Output = Option<Result<Reply, StoreError>>> + Send + 'a>>;

/// Every module's dispatcher, in the order they are asked.
fn dispatchers() -> &'static [Dispatch] {
    &[
        |s, m, p| Box::pin(crate::events::dispatch_raw(s, m, p)),
        |s, m, p| Box::pin(crate::kv::dispatch_raw(s, m, p)),
        |s, m, p| Box::pin(crate::commit::dispatch_raw(s, m, p)),
        |s, m, p| Box::pin(crate::reserved::dispatch_raw(s, m, p)),
        |s, m, p| Box::pin(crate::work::dispatch_raw(s, m, p)),
        |s, m, p| Box::pin(crate::work::waits::dispatch_raw(s, m, p)),
        |s, m, p| Box::pin(crate::timers::dispatch_raw(s, m, p)),
        |s, m, p| Box::pin(crate::artifacts::dispatch_raw(s, m, p)),
        |s, m, p| Box::pin(crate::resources::dispatch_raw(s, m, p)),
        |s, m, p| Box::pin(crate::retention::dispatch_raw(s, m, p)),
        |s, m, p| Box::pin(crate::stats::dispatch_raw(s, m, p)),
        |s, m, p| Box::pin(crate::config::dispatch_raw(s, m, p)),
        |s, m, p| Box::pin(crate::metrics::dispatch_raw(s, m, p)),
    ]
}

/// Every `store.*` method served.
pub fn methods() -> Vec<&'static str> {
    let mut all: Vec<&'static str> = Vec::new();
    for list in [
        crate::events::METHODS,
        crate::kv::METHODS,
        crate::commit::METHODS,
        crate::reserved::METHODS,
        crate::work::METHODS,
        crate::work::waits::METHODS,
        crate::timers::METHODS,
        crate::artifacts::METHODS,
        crate::resources::METHODS,
        crate::retention::METHODS,
        crate::stats::METHODS,
        crate::config::METHODS,
        crate::metrics::METHODS,
    ] {
        all.extend_from_slice(list);
    }
    all
}

/// The writes after which Work may be ready to start (or resume): `work.changed`.
const WORK_CHANGING: &[&str] = &[
    store::RouteDecideRequest::METHOD,
    store::RouteDecideManyRequest::METHOD,
    store::AttemptSettleRequest::METHOD,
    store::WaitWakeRequest::METHOD,
    store::WorkCancelRequest::METHOD,
    store::WorkRetryRequest::METHOD,
    store::WorkSettleHoldRequest::METHOD,
    store::ActionAcceptRequest::METHOD,
];

/// Methods whose answer may say events were added (`added_any`).
const ACCEPTING: &[&str] = &[
    store::EventsAcceptRequest::METHOD,
    store::EventAcceptDerivedRequest::METHOD,
    store::KvCommitRequest::METHOD,
    store::ActionAcceptRequest::METHOD,
];

/// The bus handler of storaged.
pub struct Service {
    store: Store,
    publish: Arc<OnceLock<Publish>>,
    accepted: Coalesced,
    work_changed: Coalesced,
}

impl Service {
    /// Serve `store`; `publish` is filled in once the bus client exists.
    pub fn new(store: Store, publish: Arc<OnceLock<Publish>>) -> Service {
        Service {
            store,
            publish,
            accepted: Coalesced::default(),
            work_changed: Coalesced::default(),
        }
    }
}

/// One nudge for many writes: a nudge asked for while an earlier one of the same
/// topic is still waiting to go out is that one. The waiting nudge goes out after
/// the writes that asked for it have committed (they asked after their commit), so
/// a subscriber that reads on it sees them all; a write that asks after it went out
/// sends a new one. Under load this is one `event.accepted` per turn of the
/// runtime instead of one per delivery, for the broker and every subscriber.
#[derive(Debug, Clone, Default)]
struct Coalesced {
    waiting: Arc<std::sync::atomic::AtomicBool>,
}

impl Coalesced {
    fn nudge(&self, publish: &Arc<OnceLock<Publish>>, topic: &'static str, params: Value) {
        use std::sync::atomic::Ordering;
        if self.waiting.swap(true, Ordering::AcqRel) {
            return;
        }
        let (waiting, publish) = (self.waiting.clone(), publish.clone());
        tokio::spawn(async move {
            // Let the other answers ready now ask first: they join this nudge.
            tokio::task::yield_now().await;
            waiting.store(false, Ordering::Release);
            if let Some(publish) = publish.get() {
                publish(topic, &params);
            }
        });
    }
}

/// Serve one method: the answer as its wire text, the store's error, or `None`
/// when storaged serves no method of that name.
pub async fn call_raw(
    store: &Store,
    method: &str,
    params: &RawValue,
) -> Option<Result<Reply, StoreError>> {
    if method == store::MethodsRequest::METHOD {
        let answer = store::MethodsResponse {
            methods: methods().into_iter().map(str::to_owned).collect(),
        };
        return Some(crate::rpc::encode(method, answer));
    }
    for dispatch in dispatchers() {
        if let Some(answer) = dispatch(store, method, params).await {
            return Some(answer);
        }
    }
    None
}

/// Serve one method: the answer as JSON, or the store's error (for callers in
/// this process, by name; the bus gets [`call_raw`]'s text).
pub async fn call(store: &Store, method: &str, params: &RawValue) -> Result<Value, StoreError> {
    let raw = call_raw(store, method, params)
        .await
        .ok_or_else(|| StoreError::NotFound(format!("no such method: {method}")))??;
    serde_json::from_str(raw.get())
        .map_err(|e| StoreError::Internal(format!("the answer of {method}: {e}")))
}

/// The parts of an answer that say what a write did, read from its text without
/// the rest (an answer's events, with their payloads, are skipped over).
#[derive(Debug, Default, serde::Deserialize)]
struct Effects {
    added_any: Option<Value>,
    added: Option<Value>,
    emissions: Option<Value>,
    decided: Option<Value>,
    work_id: Option<Value>,
    changed: Option<Value>,
    generation: Option<Value>,
    hash: Option<Value>,
    settled: Option<Value>,
}

impl Effects {
    /// The effects of `answer`, as a JSON object of the fields present.
    fn of(answer: &RawValue) -> Value {
        let e: Effects = serde_json::from_str(answer.get()).unwrap_or_default();
        let mut out = serde_json::Map::new();
        for (k, v) in [
            ("added_any", e.added_any),
            ("added", e.added),
            ("emissions", e.emissions),
            ("decided", e.decided),
            ("work_id", e.work_id),
            ("changed", e.changed),
            ("generation", e.generation),
            ("hash", e.hash),
            ("settled", e.settled),
        ] {
            if let Some(v) = v {
                out.insert(k.to_owned(), v);
            }
        }
        Value::Object(out)
    }
}

impl Handler for Service {
    fn call(&self, request: Request) -> BoxFuture<Result<Reply, RpcError>> {
        let store = self.store.clone();
        let publish = self.publish.clone();
        let (accepted, work_changed) = (self.accepted.clone(), self.work_changed.clone());
        Box::pin(async move {
            let method = request.method.as_str();
            let answer = match call_raw(&store, method, &request.params).await {
                Some(Ok(v)) => v,
                Some(Err(e)) => return Err(e.into()),
                None => return Err(RpcError::method_not_found(method)),
            };
            let accepting = ACCEPTING.contains(&method);
            let work_changing = WORK_CHANGING.contains(&method);
            let applying = method == store::ConfigApplyRequest::METHOD;
            if !(accepting || work_changing || applying) {
                return Ok(answer);
            }
            let effects = Effects::of(&answer);
            if accepting && added_any(&effects) {
                accepted.nudge(
                    &publish,
                    busapi::topic::EVENT_ACCEPTED,
                    serde_json::json!({ "method": method }),
                );
            }
            if work_changing && changes_work(method, &effects) {
                work_changed.nudge(
                    &publish,
                    busapi::topic::WORK_CHANGED,
                    serde_json::json!({ "method": method }),
                );
            }
            if applying && effects.get("changed").and_then(Value::as_bool) == Some(true) {
                if let Some(publish) = publish.get() {
                    publish(
                        busapi::topic::CONFIG_APPLIED,
                        &serde_json::json!({
                            "generation": effects.get("generation"),
                            "hash": effects.get("hash"),
                        }),
                    );
                }
            }
            Ok(answer)
        })
    }
}

/// Whether a write may have made Work ready: a routing decision does only when it
/// sent its event to a Work (an unmatched event changes none), a hold's settlement
/// only when it settled one.
fn changes_work(method: &str, answer: &Value) -> bool {
    let to_work = |d: &Value| d.get("work_id").is_some_and(Value::is_string);
    match method {
        m if m == store::RouteDecideRequest::METHOD => to_work(answer),
        m if m == store::RouteDecideManyRequest::METHOD => answer
            .get("decided")
            .and_then(Value::as_array)
            .is_some_and(|all| all.iter().any(to_work)),
        // A settled hold lets its Work start (or closes it); an action that settles
        // none changes no Work state.
        m if m == store::WorkSettleHoldRequest::METHOD
            || m == store::ActionAcceptRequest::METHOD =>
        {
            answer.get("settled").and_then(Value::as_bool) == Some(true)
        }
        _ => true,
    }
}

/// True when an answer says events were added.
fn added_any(answer: &Value) -> bool {
    if answer.get("added_any").and_then(Value::as_bool) == Some(true) {
        return true;
    }
    if answer.get("added").and_then(Value::as_bool) == Some(true) {
        return true;
    }
    answer
        .get("emissions")
        .and_then(Value::as_array)
        .is_some_and(|e| {
            e.iter()
                .any(|r| r.get("added").and_then(Value::as_bool) == Some(true))
        })
}
