//! `action.submit` and `state.works` through the scoped host, end to end: a broker on
//! a real unix socket, storaged's service on it, the host serving an "extension" over
//! a socket pair, and a `sched` service standing in for schedulerd that answers
//! `sched.cancel` and `sched.retry` with storaged's own `store.work_cancel` and
//! `store.work_retry` (what schedulerd does once no run is left to stop) and counts
//! the calls.

#![allow(clippy::unwrap_used)]

use daemon::bus::{Bus, BusOptions};
use extrunner::host::{BoundIdentity, Identity, ScopedHost};
use protocol::{BoxFuture, CallError, Handler, NoHandler, Options, Peer, Reply, Request, RpcError};
use serde_json::{json, Value};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

const HANG: Duration = Duration::from_secs(60);

fn manifest(permissions: &str) -> String {
    format!(
        r#"{{"protocol": [1], "name": "notes", "version": "1.0.0", "command": ["bin/notes"],
            "permissions": {permissions}}}"#
    )
}

/// What the stand-in scheduler was asked: (method, params).
type Asked = Arc<Mutex<Vec<(String, Value)>>>;

/// `sched.cancel` and `sched.retry` as schedulerd serves them when nothing runs.
struct Sched {
    store: Bus,
    asked: Asked,
}

impl Handler for Sched {
    fn call(&self, request: Request) -> BoxFuture<Result<Reply, RpcError>> {
        let store = self.store.clone();
        let asked = self.asked.clone();
        Box::pin(async move {
            let p: Value = request.params()?;
            asked
                .lock()
                .unwrap()
                .push((request.method.clone(), p.clone()));
            let method = match request.method.as_str() {
                "sched.cancel" => "store.work_cancel",
                "sched.retry" => "store.work_retry",
                other => return Err(RpcError::method_not_found(other)),
            };
            match store.call(method, &p).await {
                Ok(r) if method == "store.work_cancel" => {
                    protocol::reply(&json!({"work_id": p["work_id"], "state": "cancelled",
                        "epoch": r["epoch"], "attempt": null}))
                }
                // schedulerd's answer: the store's, with the Work named.
                Ok(mut r) => {
                    r["work_id"] = p["work_id"].clone();
                    protocol::reply(&r)
                }
                Err(CallError::Rpc(e)) => Err(e),
                Err(e) => Err(RpcError::new(protocol::Code::Unavailable, e.to_string())),
            }
        })
    }
}

struct Harness {
    dir: PathBuf,
    store: Bus,
    asked: Asked,
    ext: Peer,
    _host: Peer,
    _sched: Bus,
}

impl Drop for Harness {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

impl Harness {
    async fn start(permissions: &str) -> Harness {
        static N: AtomicU32 = AtomicU32::new(0);
        let dir = std::env::temp_dir().join(format!(
            "oc-extrunner-actions-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::SeqCst)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let socket = dir.join("bus.sock");
        let listener = tokio::net::UnixListener::bind(&socket).unwrap();
        let broker = broker::Broker::new(broker::Config::default());
        tokio::spawn(async move {
            let _ = broker.serve(&listener).await;
        });
        let store = storaged::Store::open(&dir.join("state"), storaged::Limits::default()).unwrap();
        let service = storaged::service::Service::new(store, Arc::new(OnceLock::new()));
        let _service = Bus::start(BusOptions::service(
            &socket,
            "storaged",
            &["store"],
            Arc::new(service),
        ));
        let mut opts = BusOptions::client(&socket);
        opts.call_wait = HANG;
        let client = Bus::start(opts);
        tokio::time::timeout(HANG, client.call("store.methods", &json!({})))
            .await
            .unwrap()
            .unwrap();
        let asked = Asked::default();
        let sched = Bus::start(BusOptions::service(
            &socket,
            "schedulerd",
            &["sched"],
            Arc::new(Sched {
                store: client.clone(),
                asked: asked.clone(),
            }),
        ));

        let manifest =
            protocol::manifest::parse_manifest(manifest(permissions).as_bytes()).unwrap();
        let identity = Identity::new(manifest, vec!["s1".into()], Vec::new());
        let host = ScopedHost::new(BoundIdentity::new(identity), client.clone());
        let (a, b) = tokio::net::UnixStream::pair().unwrap();
        let (ar, aw) = a.into_split();
        let (br, bw) = b.into_split();
        let host_peer = protocol::connect(ar, aw, host, Options::named("host"));
        let ext = protocol::connect(br, bw, NoHandler, Options::named("extension notes"));
        Harness {
            dir,
            store: client,
            asked,
            ext,
            _host: host_peer,
            _sched: sched,
        }
    }

    async fn call(&self, method: &str, params: Value) -> Result<Value, CallError> {
        tokio::time::timeout(HANG, self.ext.call(method, &params))
            .await
            .unwrap()
    }

    async fn store(&self, method: &str, params: Value) -> Value {
        tokio::time::timeout(HANG, self.store.call(method, &params))
            .await
            .unwrap()
            .unwrap()
    }

    /// A Work in `scope` keyed `key`, made from a delivery as the router would.
    async fn work(&self, scope: &str, key: &str) -> String {
        let accepted = self
            .store(
                "store.events_accept",
                json!({"events": [{"scope_id": scope, "type": "notes.note.added",
                    "source": "notes", "delivery_id": key, "payload": {"n": 1}, "keys": [key]}]}),
            )
            .await;
        let seq = accepted["events"][0]["seq"].clone();
        let routed = self
            .store(
                "store.route_decide",
                json!({"seq": seq, "scope_id": scope,
                    "outcome": {"type": "create", "kind": "work", "keys": [key]}}),
            )
            .await;
        routed["work_id"].as_str().unwrap().to_string()
    }

    async fn state(&self, work_id: &str) -> String {
        let w = self.store("store.work_get", json!({"id": work_id})).await;
        w["work"]["state"].as_str().unwrap().to_string()
    }

    async fn events(&self) -> Vec<Value> {
        let page = self.store("store.events", json!({"after": 0})).await;
        page["events"].as_array().unwrap().clone()
    }

    fn asked(&self) -> Vec<(String, Value)> {
        self.asked.lock().unwrap().clone()
    }
}

fn submit(work_id: &str, action: &str, key: &str) -> Value {
    json!({"scope_id": "s1", "work_id": work_id, "action": action, "caller": "octocat",
        "key": key, "input": {"comment": 7}})
}

fn refused(r: Result<Value, CallError>) -> (String, String) {
    match r {
        Err(CallError::Rpc(e)) => (e.app_code().unwrap_or("?").to_owned(), e.message),
        other => panic!("expected a refusal, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stop_and_retry_are_recorded_once_and_performed_once() {
    let h = Harness::start(r#"["action.submit"]"#).await;
    let w = h.work("s1", "notes:1").await;
    h.store(
        "store.attempt_start",
        json!({"work_id": w, "executor": "x", "lease_owner": "sched-1", "lease_ttl_ms": 60000}),
    )
    .await;
    let before = h.events().await.len();

    // What the host refuses, with nothing recorded and nothing asked of the scheduler.
    let mut other_scope = submit(&w, "stop", "k0");
    other_scope["scope_id"] = json!("s2");
    let (code, said) = refused(h.call("action.submit", other_scope).await);
    assert_eq!(code, "unauthorized", "{said}");
    let (code, said) = refused(
        h.call("action.submit", submit("work_nope", "stop", "k0"))
            .await,
    );
    assert_eq!(code, "not_found", "{said}");
    let elsewhere = h.work("s2", "notes:2").await;
    let (code, said) = refused(
        h.call("action.submit", submit(&elsewhere, "stop", "k0"))
            .await,
    );
    assert_eq!(
        (code.as_str(), said.as_str()),
        (
            "not_found",
            format!("no Work {elsewhere} in scope s1").as_str()
        )
    );
    let (code, said) = refused(h.call("action.submit", submit(&w, "merge", "k0")).await);
    assert_eq!(code, "not_found", "{said}");
    let (code, said) = refused(h.call("action.submit", submit(&w, "retry", "k0")).await);
    assert_eq!(code, "conflict", "{said}");
    assert!(said.contains("is running"), "{said}");
    assert_eq!(
        h.events().await.len(),
        before + 1,
        "only the other scope's Work"
    );
    assert!(h.asked().is_empty());

    // stop: recorded as core.action.stop, attached to the Work, and the Work cancelled.
    let stopped = h
        .call("action.submit", submit(&w, "stop", "comment/7"))
        .await
        .unwrap();
    assert_eq!(stopped["added"], true);
    assert_eq!(stopped["message"], format!("stopped Work {w}"));
    assert_eq!(h.state(&w).await, "cancelled");
    let asked = h.asked();
    assert_eq!(asked.len(), 1);
    assert_eq!(asked[0].0, "sched.cancel");
    assert_eq!(
        asked[0].1,
        json!({"work_id": w, "reason": "stop by notes:octocat"})
    );
    let event = h
        .store("store.event", json!({"id": stopped["event"]}))
        .await["event"]
        .clone();
    assert_eq!(event["type"], "core.action.stop");
    assert_eq!(event["source"], "core/actions/notes");
    assert_eq!(event["delivery_id"], "comment/7");
    assert_eq!(event["keys"], json!([]));
    assert_eq!(
        event["payload"],
        json!({"action": "stop", "provider": "core", "caller": "notes:octocat", "work_id": w,
            "input": {"comment": 7}})
    );
    let unrouted = h
        .store("store.unrouted", json!({"after": 0, "limit": 100}))
        .await;
    let pending: Vec<&Value> = unrouted["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["id"] == stopped["event"])
        .collect();
    assert!(
        pending.is_empty(),
        "the action's Event is never left for the router"
    );
    let of_work = h.call("state.work_events", json!({"id": w})).await.unwrap();
    assert!(
        of_work["events"]
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["id"] == stopped["event"]),
        "{of_work}"
    );

    // The same key again: the same Event, added false, nothing done again.
    let again = h
        .call("action.submit", submit(&w, "stop", "comment/7"))
        .await
        .unwrap();
    assert_eq!(again["event"], stopped["event"]);
    assert_eq!(again["added"], false);
    assert_eq!(h.asked().len(), 1);

    // retry: the cancelled Work runs again, on the inputs it was cancelled with.
    let retried = h
        .call("action.submit", submit(&w, "retry", "comment/8"))
        .await
        .unwrap();
    assert_eq!(retried["added"], true);
    assert_eq!(retried["message"], format!("Work {w} will run again"));
    assert_eq!(h.state(&w).await, "pending");
    let asked = h.asked();
    assert_eq!(asked.len(), 2);
    assert_eq!(asked[1].0, "sched.retry");
    assert_eq!(asked[1].1["reason"], "retry by notes:octocat");
    assert!(asked[1].1["seq"].is_i64(), "{:?}", asked[1].1);
    // Queued already: refused, nothing recorded.
    let n = h.events().await.len();
    let (code, said) = refused(
        h.call("action.submit", submit(&w, "retry", "comment/9"))
            .await,
    );
    assert_eq!(code, "conflict", "{said}");
    assert_eq!(h.events().await.len(), n);
    assert_eq!(h.asked().len(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn submit_needs_its_permission_and_state_works_finds_a_work_by_key() {
    let h = Harness::start("[]").await;
    let w = h.work("s1", "notes:1").await;
    h.work("s1", "notes:2").await;
    let outside = h.work("s2", "notes:3").await;
    let (code, said) = refused(h.call("action.submit", submit(&w, "stop", "k")).await);
    assert_eq!(code, "undeclared", "{said}");
    assert!(said.contains("\"action.submit\""), "{said}");

    let found = h
        .call("state.works", json!({"key": "notes:1"}))
        .await
        .unwrap();
    let works = found["works"].as_array().unwrap();
    assert_eq!(works.len(), 1, "{found}");
    assert_eq!(works[0]["id"], w);
    assert_eq!(works[0]["state"], "pending");
    assert_eq!(works[0]["keys"], json!(["notes:1"]));
    let all = h.call("state.works", json!({})).await.unwrap();
    assert_eq!(all["works"].as_array().unwrap().len(), 2, "{all}");
    // Another scope's Work, by its key or by the scope: an empty page.
    let none = h
        .call("state.works", json!({"key": "notes:3"}))
        .await
        .unwrap();
    assert_eq!(none, json!({}));
    let none = h
        .call("state.works", json!({"scope_id": "s2"}))
        .await
        .unwrap();
    assert_eq!(none, json!({}));
    let by_state = h
        .call("state.works", json!({"states": ["running", "idle"]}))
        .await
        .unwrap();
    assert_eq!(by_state, json!({}));
    let _ = outside;
    let (code, _) = refused(h.call("state.works", json!({"limit": 5000})).await);
    assert_eq!(code, "invalid");
}
