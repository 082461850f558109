//! The `store.*` methods on the bus, over [`Store`].
//!
//! Each method is one atomic unit of the storage module; this layer only decodes,
//! dispatches, maps errors to wire codes and publishes the nudges other daemons
//! wait on (`event.accepted` after a write that added events, `work.changed` after a
//! write that may make Work ready, `config.applied` after a new configuration
//! generation).

use crate::{Store, StoreError};
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
    ) -> Pin<Box<dyn Future<Output = Option<Result<Value, StoreError>>> + Send + 'a>>;

/// Every module's dispatcher, in the order they are asked.
fn dispatchers() -> &'static [Dispatch] {
    &[
        |s, m, p| Box::pin(crate::events::dispatch(s, m, p)),
        |s, m, p| Box::pin(crate::kv::dispatch(s, m, p)),
        |s, m, p| Box::pin(crate::work::dispatch(s, m, p)),
        |s, m, p| Box::pin(crate::waits::dispatch(s, m, p)),
        |s, m, p| Box::pin(crate::timers::dispatch(s, m, p)),
        |s, m, p| Box::pin(crate::artifacts::dispatch(s, m, p)),
        |s, m, p| Box::pin(crate::resources::dispatch(s, m, p)),
        |s, m, p| Box::pin(crate::retention::dispatch(s, m, p)),
        |s, m, p| Box::pin(crate::config::dispatch(s, m, p)),
    ]
}

/// Every `store.*` method served.
pub fn methods() -> Vec<&'static str> {
    let mut all: Vec<&'static str> = Vec::new();
    for list in [
        crate::events::METHODS,
        crate::kv::METHODS,
        crate::work::METHODS,
        crate::waits::METHODS,
        crate::timers::METHODS,
        crate::artifacts::METHODS,
        crate::resources::METHODS,
        crate::retention::METHODS,
        crate::config::METHODS,
    ] {
        all.extend_from_slice(list);
    }
    all
}

/// Methods whose answer may say events were added (`added_any`).
/// The writes after which Work may be ready to start (or resume): `work.changed`.
const WORK_CHANGING: &[&str] = &[
    "store.route_decide",
    "store.attempt_settle",
    "store.wait_wake",
    "store.work_cancel",
];

const ACCEPTING: &[&str] = &[
    "store.events_accept",
    "store.event_accept_derived",
    "store.kv_commit",
];

/// The bus handler of storaged.
pub struct Service {
    store: Store,
    publish: Arc<OnceLock<Publish>>,
}

impl Service {
    /// Serve `store`; `publish` is filled in once the bus client exists.
    pub fn new(store: Store, publish: Arc<OnceLock<Publish>>) -> Service {
        Service { store, publish }
    }
}

/// Serve one method: the answer as JSON, or the store's error.
pub async fn call(store: &Store, method: &str, params: &RawValue) -> Result<Value, StoreError> {
    if method == "store.methods" {
        return Ok(serde_json::json!({ "methods": methods() }));
    }
    for dispatch in dispatchers() {
        if let Some(answer) = dispatch(store, method, params).await {
            return answer;
        }
    }
    Err(StoreError::NotFound(format!("no such method: {method}")))
}

impl Handler for Service {
    fn call(&self, request: Request) -> BoxFuture<Result<Reply, RpcError>> {
        let store = self.store.clone();
        let publish = self.publish.clone();
        Box::pin(async move {
            let method = request.method.as_str();
            let answer = match call(&store, method, &request.params).await {
                Ok(v) => v,
                Err(StoreError::NotFound(m)) if m.starts_with("no such method") => {
                    return Err(RpcError::method_not_found(method));
                }
                Err(e) => return Err(e.into()),
            };
            if ACCEPTING.contains(&method) && added_any(&answer) {
                if let Some(publish) = publish.get() {
                    publish("event.accepted", &serde_json::json!({ "method": method }));
                }
            }
            if WORK_CHANGING.contains(&method) {
                if let Some(publish) = publish.get() {
                    publish("work.changed", &serde_json::json!({ "method": method }));
                }
            }
            if method == "store.config_apply"
                && answer.get("changed").and_then(Value::as_bool) == Some(true)
            {
                if let Some(publish) = publish.get() {
                    publish(
                        "config.applied",
                        &serde_json::json!({
                            "generation": answer.get("generation"),
                            "hash": answer.get("hash"),
                        }),
                    );
                }
            }
            protocol::reply(&answer)
        })
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
