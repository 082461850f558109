//! What extrunner's end-to-end tests share: a broker on a real unix socket in a
//! scratch directory, storaged's service on it and a client straight to the store
//! (as a trusted daemon); a `sched` service standing in for schedulerd; and the
//! scoped host serving an "extension" over a socket pair.

#![allow(dead_code, clippy::unwrap_used)]

use daemon::bus::{Bus, BusOptions};
use extrunner::configuration::Configuration;
use extrunner::host::{BoundIdentity, Identity, ScopedHost};
use protocol::{BoxFuture, CallError, Handler, NoHandler, Options, Peer, Reply, Request, RpcError};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::future::Future;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

/// Only against hangs: nothing here measures time.
pub const HANG: Duration = Duration::from_secs(60);

/// `f`, or a panic if it hangs.
pub async fn within<F: Future>(f: F) -> F::Output {
    tokio::time::timeout(HANG, f).await.expect("timed out")
}

/// A broker on `bus.sock` and storaged's service (its store under `store/`) in a
/// scratch directory, removed on drop.
pub struct Stack {
    /// The scratch directory.
    pub dir: PathBuf,
    /// The broker's socket.
    pub socket: PathBuf,
    /// Straight to storaged, as a trusted daemon.
    pub bus: Bus,
}

impl Drop for Stack {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

impl Stack {
    /// A broker and storaged in a fresh directory named after `name`, once storaged
    /// has registered `store`.
    pub async fn start(name: &str) -> Stack {
        static N: AtomicU32 = AtomicU32::new(0);
        let dir = std::env::temp_dir().join(format!(
            "oc-extrunner-{name}-{}-{}",
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
        let store = storaged::Store::open(&dir.join("store"), storaged::Limits::default()).unwrap();
        let service = storaged::service::Service::new(store, Arc::new(OnceLock::new()));
        let _service = Bus::start(BusOptions::service(
            &socket,
            "storaged",
            &["store"],
            Arc::new(service),
        ));
        let mut opts = BusOptions::client(&socket);
        opts.call_wait = HANG;
        let bus = Bus::start(opts);
        within(bus.call("store.methods", &json!({}))).await.unwrap();
        Stack { dir, socket, bus }
    }

    /// A store method, called as a trusted daemon (a test's own mistake panics).
    pub async fn store(&self, method: &str, params: Value) -> Value {
        within(self.bus.call(method, &params)).await.unwrap()
    }

    /// A host bound as the runner binds `manifest` to the configuration `document`
    /// (generation g1): its identity, configure params and document. The package
    /// must be used by exactly `scopes`.
    pub fn bound(&self, manifest: &str, document: &Value, scopes: &[&str]) -> ScopedHost {
        let manifest = protocol::manifest::parse_manifest(manifest.as_bytes()).unwrap();
        let doc = protocol::config::Config::parse(document).unwrap();
        let ec = doc.for_extension(&manifest, "g1");
        assert_eq!(ec.scopes, scopes);
        let configuration = Arc::new(Configuration::new(Some(manifest.clone())));
        configuration.set(ec.params, BTreeMap::new());
        configuration.set_document(Arc::new(doc));
        let identity = Identity::new(manifest, ec.scopes, ec.connections);
        ScopedHost::new(BoundIdentity::new(identity), self.bus.clone())
            .with_configuration(configuration)
    }
}

/// What the stand-in scheduler was asked: (method, params).
pub type Asked = Arc<Mutex<Vec<(String, Value)>>>;

/// `sched.cancel` and `sched.retry` as schedulerd serves them when nothing runs:
/// storaged's own `store.work_cancel` and `store.work_retry`. Every call is kept.
pub struct Sched {
    _bus: Bus,
    asked: Asked,
}

impl Sched {
    /// The stand-in, registered on `stack`'s broker as `schedulerd`.
    pub fn start(stack: &Stack) -> Sched {
        let asked = Asked::default();
        let bus = Bus::start(BusOptions::service(
            &stack.socket,
            "schedulerd",
            &["sched"],
            Arc::new(SchedService {
                store: stack.bus.clone(),
                asked: asked.clone(),
            }),
        ));
        Sched { _bus: bus, asked }
    }
}

struct SchedService {
    store: Bus,
    asked: Asked,
}

impl Handler for SchedService {
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

/// The scoped host serving an extension over a socket pair, with the [`Stack`] it
/// calls and, when started with one, the stand-in [`Sched`].
pub struct Harness {
    /// The broker and storaged.
    pub stack: Stack,
    /// The extension's end.
    pub ext: Peer,
    _host: Peer,
    sched: Option<Sched>,
}

impl Harness {
    /// `host` serving the extension `name` on `stack`.
    pub fn serve(stack: Stack, sched: Option<Sched>, host: ScopedHost, name: &str) -> Harness {
        let (a, b) = tokio::net::UnixStream::pair().unwrap();
        let (ar, aw) = a.into_split();
        let (br, bw) = b.into_split();
        let host = protocol::connect(ar, aw, host, Options::named("host"));
        let ext = protocol::connect(
            br,
            bw,
            NoHandler,
            Options::named(format!("extension {name}")),
        );
        Harness {
            stack,
            ext,
            _host: host,
            sched,
        }
    }

    /// A call of the extension's to the host.
    pub async fn call(&self, method: &str, params: Value) -> Result<Value, CallError> {
        within(self.ext.call(method, &params)).await
    }

    /// A call of the extension's to the host that must succeed.
    pub async fn ok(&self, method: &str, params: Value) -> Value {
        match self.call(method, params).await {
            Ok(v) => v,
            Err(e) => panic!("{method}: {e}"),
        }
    }

    /// A store method, called as a trusted daemon.
    pub async fn store(&self, method: &str, params: Value) -> Value {
        self.stack.store(method, params).await
    }

    /// A Work of `kind` made from `event` (accepted as a trusted daemon, keyed by its
    /// `keys`) as the router would: its ID.
    pub async fn route(&self, event: Value, kind: &str) -> String {
        let scope = event["scope_id"].clone();
        let keys = event["keys"].clone();
        let accepted = self
            .store("store.events_accept", json!({"events": [event]}))
            .await;
        let routed = self
            .store(
                "store.route_decide",
                json!({"seq": accepted["events"][0]["seq"], "scope_id": scope,
                    "outcome": {"type": "create", "kind": kind, "keys": keys}}),
            )
            .await;
        routed["work_id"].as_str().unwrap().to_string()
    }

    /// The state of Work `work_id`, as stored.
    pub async fn state(&self, work_id: &str) -> String {
        let w = self.store("store.work_get", json!({"id": work_id})).await;
        w["work"]["state"].as_str().unwrap().to_string()
    }

    /// What the stand-in scheduler was asked so far (nothing without one).
    pub fn asked(&self) -> Vec<(String, Value)> {
        self.sched
            .as_ref()
            .map(|s| s.asked.lock().unwrap().clone())
            .unwrap_or_default()
    }
}

/// A `notes.note.added` delivery `key` from `notes` in `scope`, keyed `key`.
pub fn note(scope: &str, key: &str) -> Value {
    json!({"scope_id": scope, "type": "notes.note.added", "source": "notes",
        "delivery_id": key, "payload": {"n": 1}, "keys": [key]})
}

/// The application code and message of a refusal.
pub fn refused(r: Result<Value, CallError>) -> (String, String) {
    match r {
        Err(CallError::Rpc(e)) => (e.app_code().unwrap_or("?").to_owned(), e.message),
        other => panic!("expected a refusal, got {other:?}"),
    }
}
