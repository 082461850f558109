//! schedulerd in one process, with no broker and no child process: its router,
//! starter and toolbelt against storaged's real store (SQLite in a temp dir, called
//! as the bus would call it, through `storaged::service::call_raw`), and an
//! extension of the test's own answering through extrunner's `ext.*` shapes.

#![allow(dead_code, clippy::unwrap_used)]

use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use busapi::ext::{
    ExtCallAny, Registration, RegistrationsRequest, RegistrationsResponse, EXT_CALL,
};
use busapi::store::*;
use busapi::Call;
use protocol::{CallError, NoHandler, Options, Peer, RpcError};
use schedulerd::host::Host;
use schedulerd::ports::{ExtCalls, Extensions, Pending, Store, StoreCalls};
use schedulerd::router::{Router, Stats};
use schedulerd::starter::Starter;
use schedulerd::toolbelt::Toolbelt;
use serde_json::value::RawValue;
use serde_json::{json, Value};
use tokio::sync::Notify;

/// How long a test waits for something that should happen at once before it says
/// it never came (a guard against a hung test, not a measure of anything).
pub const HANG: Duration = Duration::from_secs(60);

/// storaged's store, called in this process.
struct InProcess(storaged::Store);

impl StoreCalls for InProcess {
    fn call_raw(&self, method: &'static str, params: Box<RawValue>) -> Pending {
        let store = self.0.clone();
        Box::pin(async move {
            match storaged::service::call_raw(&store, method, &params).await {
                Some(Ok(answer)) => Ok(answer),
                Some(Err(e)) => Err(CallError::Rpc(e.into())),
                None => Err(CallError::Rpc(RpcError::method_not_found(method))),
            }
        })
    }
}

/// What the test's extension answers to one `ext.call`.
pub type Answer = Result<Value, RpcError>;
type Answerer =
    Arc<dyn Fn(ExtCallAny) -> Pin<Box<dyn Future<Output = Answer> + Send>> + Send + Sync>;

/// The test's extensions, as extrunner would show them: registrations, and the
/// answers to `ext.call` of a function of the test's. Every call is kept.
pub struct Extension {
    registrations: Mutex<RegistrationsResponse>,
    answer: Mutex<Answerer>,
    calls: Mutex<Vec<ExtCallAny>>,
    called: Notify,
}

impl Extension {
    /// Answer every `ext.call` with `answer`.
    pub fn answer_with(&self, answer: impl Fn(&ExtCallAny) -> Answer + Send + Sync + 'static) {
        let answer = Arc::new(answer);
        *self.answer.lock().unwrap() = Arc::new(move |c| {
            let answer = answer.clone();
            Box::pin(async move { answer(&c) })
        });
    }

    /// Answer every `ext.call` with the future `answer` makes.
    pub fn answer_async<F, Fut>(&self, answer: F)
    where
        F: Fn(ExtCallAny) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Answer> + Send + 'static,
    {
        *self.answer.lock().unwrap() = Arc::new(move |c| Box::pin(answer(c)));
    }

    /// Every `ext.call` so far, in order.
    pub fn calls(&self) -> Vec<ExtCallAny> {
        self.calls.lock().unwrap().clone()
    }

    /// The calls of extension method `method` so far.
    pub fn calls_of(&self, method: &str) -> Vec<ExtCallAny> {
        self.calls()
            .into_iter()
            .filter(|c| c.method == method)
            .collect()
    }

    /// Route `hook.opened` events (as [`route_match`]) and end each run (answer its
    /// `executor.wait` with `outcome`) only once the returned [`Notify`] lets one go;
    /// answer `{}` to anything else.
    pub fn runs_until_released(&self, outcome: Value) -> Arc<Notify> {
        let release = Arc::new(Notify::new());
        let released = release.clone();
        self.answer_async(move |c| {
            let released = released.clone();
            let outcome = outcome.clone();
            async move {
                if let Some(a) = route_match(&c) {
                    return a;
                }
                match c.method.as_str() {
                    "executor.wait" => {
                        released.notified().await;
                        Ok(outcome)
                    }
                    _ => Ok(json!({})),
                }
            }
        });
        release
    }

    /// The first call (so far or to come) that `pick` takes.
    pub async fn wait_for(&self, what: &str, pick: impl Fn(&ExtCallAny) -> bool) -> ExtCallAny {
        let found = async {
            loop {
                let called = self.called.notified();
                if let Some(c) = self.calls().into_iter().find(|c| pick(c)) {
                    return c;
                }
                called.await;
            }
        };
        tokio::time::timeout(HANG, found)
            .await
            .unwrap_or_else(|_| panic!("no {what} within {HANG:?}; calls: {:?}", self.calls()))
    }

    async fn serve(&self, method: &str, params: Box<RawValue>) -> Result<Box<RawValue>, CallError> {
        if method == RegistrationsRequest::METHOD {
            let r = self.registrations.lock().unwrap().clone();
            return Ok(serde_json::value::to_raw_value(&r).unwrap());
        }
        if method != EXT_CALL {
            return Err(CallError::Rpc(RpcError::method_not_found(method)));
        }
        let call: ExtCallAny = serde_json::from_str(params.get()).unwrap();
        self.calls.lock().unwrap().push(call.clone());
        self.called.notify_waiters();
        let answer = self.answer.lock().unwrap().clone();
        match answer(call).await {
            Ok(v) => Ok(serde_json::value::to_raw_value(&v).unwrap()),
            Err(e) => Err(CallError::Rpc(e)),
        }
    }
}

struct Shared(Arc<Extension>);

impl ExtCalls for Shared {
    fn call_raw(&self, method: &'static str, params: Box<RawValue>) -> Pending {
        let ext = self.0.clone();
        Box::pin(async move { ext.serve(method, params).await })
    }
}

/// A package as extrunner registers it, running in `scopes`.
pub fn package(name: &str, scopes: &[&str]) -> Registration {
    Registration {
        name: name.into(),
        state: "running".into(),
        scopes: scopes.iter().map(|s| s.to_string()).collect(),
        ..Registration::default()
    }
}

/// One scheduler and its store.
pub struct Sched {
    /// storaged's store, which the test reads to see what a user would.
    pub raw: storaged::Store,
    /// The store as schedulerd calls it.
    pub store: Store,
    /// The test's extensions.
    pub ext: Arc<Extension>,
    /// The router.
    pub router: Router,
    /// What the router did.
    pub stats: Arc<Stats>,
    dir: PathBuf,
}

impl Drop for Sched {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The scope every test configures, with its route and binding.
pub fn config() -> Value {
    json!({"scopes": [{
        "id": "demo",
        "entries": [{"type": "hook", "name": "ci", "config": {"path": "/ci"}}],
        "routes": [{"handler": "hook.route", "binding": "run", "config": {"entry": "ci"}}],
        "bindings": [{"name": "run", "executor": "shell", "config": {"command": ["true"]},
                      "operations": ["hook.label", "hook.await_checks", "hook.lookup"]}],
        "unmatched": "drop",
    }]})
}

impl Sched {
    /// A fresh store under a temp dir, the extensions `packages` registered, and
    /// nothing answered yet (every call errs until the test says).
    pub async fn new(name: &str, packages: Vec<Registration>) -> Sched {
        let dir = std::env::temp_dir().join(format!(
            "oc-sched-{name}-{}-{}",
            std::process::id(),
            storaged::util::new_id("t")
        ));
        let _ = std::fs::remove_dir_all(&dir);
        let raw = storaged::Store::open(&dir, storaged::Limits::default()).unwrap();
        let ext = Arc::new(Extension {
            registrations: Mutex::new(RegistrationsResponse {
                complete: true,
                playbook_dir: String::new(),
                extensions: packages,
            }),
            answer: Mutex::new(Arc::new(|c: ExtCallAny| {
                Box::pin(async move {
                    Err(RpcError::authored(
                        "unavailable",
                        format!("the test answers no {}", c.method),
                    ))
                })
            })),
            calls: Mutex::default(),
            called: Notify::new(),
        });
        let store = Store::new(InProcess(raw.clone()));
        let router = Router::new(store.clone(), Extensions::new(Shared(ext.clone())));
        Sched {
            raw,
            store,
            ext,
            router,
            stats: Arc::default(),
            dir,
        }
    }

    /// A store method, called as any daemon would (a test's own mistake panics).
    pub async fn call<C: Call>(&self, params: &C) -> C::Result {
        self.store
            .call(params)
            .await
            .unwrap_or_else(|e| panic!("{}: {e}", C::METHOD))
    }

    /// Apply `config` and let the router read it, and the registrations.
    pub async fn configure(&self, config: Value) {
        self.call(&ConfigApplyRequest { config }).await;
        self.router.refresh_config().await.unwrap();
        self.router.refresh_handlers().await.unwrap();
    }

    /// Accept an event of `scope`, as an extension's intake would: its sequence.
    pub async fn accept(&self, scope: &str, event_type: &str, keys: &[&str], data: Value) -> i64 {
        let delivery = storaged::util::new_id("d");
        let answer = self
            .call(&EventsAcceptRequest {
                events: vec![EventInput {
                    scope_id: scope.into(),
                    event_type: event_type.into(),
                    source: "hook".into(),
                    delivery_id: Some(delivery),
                    schema: Some(format!("{event_type}.v1")),
                    payload: data,
                    keys: keys.iter().map(|k| k.to_string()).collect(),
                    ..EventInput::default()
                }],
                owner: None,
                families: None,
                scopes: None,
            })
            .await;
        answer.events[0].seq
    }

    /// One routing pass.
    pub async fn route(&self) -> schedulerd::router::Pass {
        self.router.pass(&self.stats).await.unwrap()
    }

    /// How the event `seq` was routed.
    pub async fn routing(&self, seq: i64) -> RoutingResponse {
        self.call(&RoutingRequest { seq }).await
    }

    /// The Works of `scope`.
    pub async fn works(&self, scope: &str) -> Vec<WorkRow> {
        self.call(&WorksRequest {
            scope_id: Some(scope.into()),
            limit: 100,
            ..WorksRequest::default()
        })
        .await
        .works
    }

    /// One Work.
    pub async fn work(&self, id: &str) -> WorkRow {
        self.call(&WorkGetRequest { id: id.into() }).await.work
    }

    /// The executions of a Work, by attempt.
    pub async fn executions(&self, work_id: &str) -> Vec<ExecutionRow> {
        self.call(&ExecutionsRequest {
            work_id: Some(work_id.into()),
            ..ExecutionsRequest::default()
        })
        .await
        .executions
    }

    /// A Work of scope `demo` made by routing an event with key `key` (the route
    /// must match it): its ID and the event's sequence.
    pub async fn routed_work(&self, key: &str) -> (String, i64) {
        let seq = self
            .accept(
                "demo",
                "hook.opened",
                &[key],
                json!({"key": key, "title": "red build"}),
            )
            .await;
        self.route().await;
        let routing = self.routing(seq).await;
        let work_id = routing.records[0].work_id.clone().unwrap();
        (work_id, seq)
    }

    /// The toolbelt, its key read (or made) in the store, at `toolbelt.sock` in the
    /// test's directory (not bound).
    pub async fn toolbelt(&self) -> Toolbelt {
        let key = schedulerd::toolbelt::load_key(&self.store).await.unwrap();
        Toolbelt::new(
            self.store.clone(),
            self.router.extensions().clone(),
            self.router.knowledge(),
            key,
            self.dir.join("toolbelt.sock"),
            String::new(),
        )
    }

    /// A starter of host `host_id` (alive in the store), with its toolbelt.
    pub async fn starter(&self, host_id: &str) -> Starter {
        let starter = Starter::new(self.router.clone(), self.host(host_id).await);
        starter.set_toolbelt(self.toolbelt().await);
        starter
    }

    /// A running attempt of `work_id` on the binding `run` (executor `shell`), and an
    /// agent connected to the toolbelt (serving on its socket) with the run's token.
    pub async fn attempt(&self, work_id: &str) -> Attempt {
        let a = self
            .call(&AttemptStartRequest {
                work_id: work_id.into(),
                executor: "shell".into(),
                binding: "run".into(),
                lease_owner: "schedulerd:1@h1".into(),
                lease_ttl_ms: 600_000,
                expect_version: None,
                host: String::new(),
            })
            .await;
        let tb = self.toolbelt().await;
        let endpoint = PathBuf::from(tb.for_run(work_id, &a.execution_id, a.epoch).endpoint);
        let listener = Toolbelt::bind(&endpoint).unwrap();
        tokio::spawn(tb.clone().serve(listener));
        let stream = tokio::net::UnixStream::connect(&endpoint).await.unwrap();
        let (r, w) = stream.into_split();
        let agent = protocol::connect(r, w, NoHandler, Options::named("agent"));
        Attempt {
            token: tb.token(work_id, &a.execution_id, a.epoch),
            tb,
            execution_id: a.execution_id,
            epoch: a.epoch,
            agent,
        }
    }

    /// This host, alive in the store.
    pub async fn host(&self, id: &str) -> Host {
        let host = Host::new(id.into(), "test host".into(), Duration::from_secs(30));
        host.beat(&self.store).await.unwrap();
        host
    }
}

/// A running attempt and the agent of its turn, connected to the toolbelt.
pub struct Attempt {
    /// The toolbelt serving the agent.
    pub tb: Toolbelt,
    /// The attempt's execution.
    pub execution_id: String,
    /// Its epoch.
    pub epoch: i64,
    /// The run's toolbelt token.
    pub token: String,
    /// The agent's end of the toolbelt's socket.
    pub agent: Peer,
}

/// `route.match` that takes every `hook.opened` event, keyed by its `key`, titled by
/// its `title`, and no other.
pub fn route_match(c: &ExtCallAny) -> Option<Answer> {
    if c.method != "route.match" {
        return None;
    }
    let p = c.params.clone().unwrap_or_default();
    let event = &p["event"];
    Some(Ok(if event["type"] == "hook.opened" {
        json!({"matched": true, "reason": "an opened hook",
               "keys": [event["payload"]["data"]["key"]],
               "display": {"title": event["payload"]["data"]["title"]}})
    } else {
        json!({"matched": false, "reason": format!("not for {}", event["type"].as_str().unwrap_or_default())})
    }))
}

/// A package that runs the binding's executor (`shell`) and shows Work on its own
/// surface (`work.annotate`), in scope `demo`.
pub fn shell() -> Registration {
    let mut shell = package("shell", &["demo"]);
    shell.executors = vec![busapi::ext::ExecutorInfo {
        name: "shell".into(),
        pool: String::new(),
        inject: true,
    }];
    shell.surfaces.annotations = true;
    shell
}

/// The package declaring the route handler and entry type of [`config`].
pub fn hook() -> Registration {
    let mut hook = package("hook", &["demo"]);
    hook.handlers = vec!["hook.route".into()];
    hook.types = vec!["hook".into()];
    hook
}

/// The params of an extension call.
pub fn params(c: &ExtCallAny) -> Value {
    c.params.clone().unwrap_or_default()
}
