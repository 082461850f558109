//! The router: each accepted event, in sequence order, to Work.
//!
//! For an event of scope S, S's routes are asked in order (`route.match` on the
//! extension that declares the route's handler, through extrunner's `ext.call`; the
//! payload gate is extrunner's). The first route that matches decides: a Work is
//! created with the keys, kind, display, context and grants it answered, unless one of
//! the keys already names an open Work, which the event then joins (storaged decides
//! that in the same write). No match (or no scope, or a disabled one) is the scope's
//! unmatched disposition. Every route asked is recorded with its verdict and reason,
//! so `work show` can say why.
//!
//! A route whose extension cannot answer (not running, crashed, timed out) fails the
//! pass: the event stays pending and is routed again on the next pass (routing is
//! deterministic), and the events after it wait, so the order holds. On several hosts
//! every host's router routes the same log: an event another router decided first
//! (`conflict` from `store.route_decide`) sends this one back to read the log again,
//! so each event is routed once and in order. A route trace
//! ([`Router::evaluate`] alone) asks the same questions and writes nothing.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use daemon::bus::Bus;
use protocol::config::Config;
use protocol::wire::{self, RouteMatchParams, RouteMatchResult};
use protocol::CallError;
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use serde_json::{json, Value};

mod pass;
pub use pass::Pass;

/// How long one `route.match` may take.
pub const MATCH_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a Wait owner's `dependency.filter` may take: the spec's in-transaction
/// bound, enforced by extrunner on the extension (`in_transaction`).
pub const FILTER_TIMEOUT: Duration = protocol::IN_TRANSACTION_DEADLINE;
/// How long the router waits for a `dependency.filter` answer through the bus (the
/// extension's [`FILTER_TIMEOUT`] plus the bus's round trip); past it, no match.
pub const FILTER_WAIT: Duration = Duration::from_secs(1);
/// The Work kind of Work a route creates without naming one.
pub const DEFAULT_KIND: &str = "work";
/// Events read per page.
pub const PAGE: u32 = 100;

/// An event as the router reads it (`store.unrouted`).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct RoutedEvent {
    /// Its sequence.
    pub seq: i64,
    /// Its ID.
    pub id: String,
    /// Its scope.
    pub scope_id: String,
    /// Its type.
    #[serde(rename = "type")]
    pub event_type: String,
    /// Its source.
    pub source: String,
    /// Its keys.
    #[serde(default)]
    pub keys: Vec<String>,
    /// Its payload data, as text: read only when a route handler or the toolbelt
    /// needs it (most events of a busy intake go to no route).
    #[serde(default)]
    pub payload: Box<RawValue>,
    /// Its payload schema.
    #[serde(default)]
    pub schema: Option<String>,
    /// Its delivery ID.
    #[serde(default)]
    pub delivery_id: Option<String>,
    /// When it happened at the source.
    #[serde(default)]
    pub occurred_at: Option<String>,
    /// When it was accepted.
    #[serde(default)]
    pub accepted_at: String,
    /// Its parent, for a derived event.
    #[serde(default)]
    pub parent_id: Option<String>,
    /// Its causal root.
    #[serde(default)]
    pub root_id: String,
    /// Its causal depth.
    #[serde(default)]
    pub depth: i64,
}

impl RoutedEvent {
    /// The payload as JSON (`null` if the store kept something else).
    pub fn payload_value(&self) -> Value {
        serde_json::from_str(self.payload.get()).unwrap_or(Value::Null)
    }

    /// The event as `route.match` carries it.
    pub fn wire(&self) -> wire::Event {
        wire::Event {
            id: self.id.clone(),
            sequence: u64::try_from(self.seq).unwrap_or(0),
            event_type: self.event_type.clone(),
            source: self.source.clone(),
            delivery_id: self.delivery_id.clone().unwrap_or_default(),
            scope_id: self.scope_id.clone(),
            keys: self.keys.clone(),
            payload: wire::Payload {
                schema: self.schema.clone().unwrap_or_default(),
                data: self.payload_value(),
            },
            occurred_at: self.occurred_at.clone().unwrap_or_default(),
            accepted_at: self.accepted_at.clone(),
            parent_id: self.parent_id.clone().unwrap_or_default(),
            root_id: self.root_id.clone(),
            depth: u32::try_from(self.depth).unwrap_or(0),
            execution_id: String::new(),
        }
    }
}

/// One route's verdict.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Record {
    /// The route handler.
    pub handler: String,
    /// The route's binding.
    pub binding: String,
    /// Whether it matched.
    pub matched: bool,
    /// Why.
    pub reason: String,
}

/// What the routes decided for an event.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Decision {
    /// Every route asked, in order.
    pub records: Vec<Record>,
    /// The store's outcome (`store.route_decide`'s `outcome`).
    pub outcome: Value,
}

/// Why a pass stopped.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RouteError {
    /// A route's extension could not answer now: retry the event later.
    #[error("route {index} ({handler}): {why}")]
    Unavailable {
        /// The route's index in its scope.
        index: usize,
        /// Its handler.
        handler: String,
        /// What happened.
        why: String,
    },
    /// The store could not be read or written now.
    #[error("storaged: {0}")]
    Store(String),
    /// Another router (another host's schedulerd) routed the event meanwhile.
    #[error("event {0} was routed elsewhere meanwhile")]
    RoutedElsewhere(i64),
    /// The configuration or the extensions' registrations have not been read yet: an
    /// event routed now would be judged against nothing.
    #[error("waiting for the {0} before routing")]
    NotLoaded(&'static str),
}

/// What the router knows: the configuration and which extension serves which handler.
#[derive(Debug, Default)]
pub struct Knowledge {
    /// The configuration generation (document and hash).
    pub config: Option<(Config, String)>,
    /// Operation → the extension declaring it, with what an agent is told about it.
    pub operations: HashMap<String, (String, protocol::toolbelt::OperationGuidance)>,
    /// True once the configuration has been read (even if none is applied).
    pub config_loaded: bool,
    /// True once the extensions' registrations have been read.
    pub handlers_loaded: bool,
    /// Route handler → the extension declaring it.
    pub handlers: HashMap<String, String>,
    /// Entry type → the extension declaring it.
    pub types: HashMap<String, String>,
    /// Executor → the extension declaring it, and its pool (`""` or `jobs`).
    pub executors: HashMap<String, (String, String)>,
    /// The executors that advertise `inject`.
    pub injectable: std::collections::HashSet<String>,
    /// Each extension's tasks: (extension, task, interval in seconds).
    pub tasks: Vec<(String, String, u64)>,
    /// Each extension's surfaces schedulerd calls around runs and Waits,
    /// with the scopes whose configuration uses it.
    pub surfaces: Vec<ExtensionSurfaces>,
    /// The agents' plugin extrunner wrote from every package's playbooks (its
    /// registrations' `playbook_dir`; empty for none): each run's `playbook_dir`.
    pub playbook_dir: String,
}

/// What schedulerd may call on one extension besides routes and executors.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ExtensionSurfaces {
    /// The extension.
    pub name: String,
    /// The scopes whose configuration uses it.
    pub scopes: Vec<String>,
    /// It adds an environment layer to runs in those scopes (`run.environment`).
    pub run_environment: bool,
    /// It is told when a run's segment ends (`segment.ended`).
    pub segment_end: bool,
    /// It filters the wakes of the Waits its wait operations plan (`dependency.filter`).
    pub dependency_filter: bool,
    /// It shows Work on its own surface (`work.annotate`).
    pub annotations: bool,
}

impl Knowledge {
    /// The running extensions whose configuration uses `scope` and that declare the
    /// surface `pick` selects.
    pub fn with_surface(
        &self,
        scope: &str,
        pick: impl Fn(&ExtensionSurfaces) -> bool,
    ) -> Vec<String> {
        self.surfaces
            .iter()
            .filter(|s| pick(s) && s.scopes.iter().any(|x| x == scope))
            .map(|s| s.name.clone())
            .collect()
    }
}

/// How many `work.annotate` calls may be in flight at once (the annotations are sent
/// by `crate::annotate`).
pub const ANNOTATIONS_IN_FLIGHT: usize = 16;

/// The router.
#[derive(Debug, Clone)]
pub struct Router {
    bus: Bus,
    knowledge: Arc<RwLock<Knowledge>>,
    /// Events routed to a Work whose attempt was running, to inject into it:
    /// (Work, event seq), at most [`MAX_INJECTIONS`].
    injections: Arc<std::sync::Mutex<std::collections::VecDeque<(String, i64)>>>,
    /// `work.annotate` calls in flight.
    annotations: Arc<tokio::sync::Semaphore>,
}

/// The most routed events waiting to be injected into running attempts; past it an
/// event is left for the Work's next attempt.
pub const MAX_INJECTIONS: usize = 1024;

fn store_err(method: &str, e: CallError) -> RouteError {
    RouteError::Store(format!("{method}: {e}"))
}

impl Router {
    /// A router calling through `bus`.
    pub fn new(bus: Bus) -> Router {
        Router {
            bus,
            knowledge: Arc::default(),
            injections: Arc::default(),
            annotations: Arc::new(tokio::sync::Semaphore::new(ANNOTATIONS_IN_FLIGHT)),
        }
    }

    /// The bus.
    pub fn bus(&self) -> &Bus {
        &self.bus
    }

    /// The bound on `work.annotate` calls in flight ([`ANNOTATIONS_IN_FLIGHT`]).
    pub fn annotations(&self) -> &Arc<tokio::sync::Semaphore> {
        &self.annotations
    }

    /// The events routed to running attempts since the last call, oldest first.
    pub fn take_injections(&self) -> Vec<(String, i64)> {
        match self.injections.lock() {
            Ok(mut q) => q.drain(..).collect(),
            Err(p) => p.into_inner().drain(..).collect(),
        }
    }

    fn queue_injection(&self, work_id: &str, seq: i64) {
        let mut q = self.injections.lock().unwrap_or_else(|p| p.into_inner());
        if q.len() >= MAX_INJECTIONS {
            tracing::warn!(OC_WORK_ID = %work_id, seq, "{MAX_INJECTIONS} injections wait already (max_injections); the event waits for the Work's next attempt");
            return;
        }
        q.push_back((work_id.to_owned(), seq));
    }

    /// What it knows, to replace.
    pub fn knowledge(&self) -> Arc<RwLock<Knowledge>> {
        self.knowledge.clone()
    }

    /// Fetch the stored configuration generation (none applied is `Ok`).
    pub async fn refresh_config(&self) -> Result<(), String> {
        let answer = match self.bus.call("store.config_current", &json!({})).await {
            Ok(a) => a,
            Err(e) if e.code() == Some(protocol::Code::NotFound.as_str()) => Value::Null,
            Err(e) => return Err(format!("store.config_current: {e}")),
        };
        let config = if answer.is_null() {
            None
        } else {
            let hash = answer["hash"].as_str().unwrap_or_default().to_owned();
            match Config::parse(&answer["config"]) {
                Ok(c) => Some((c, hash)),
                Err(p) => {
                    return Err(format!(
                        "the stored configuration {hash} has problems: {}",
                        p.iter()
                            .map(ToString::to_string)
                            .collect::<Vec<_>>()
                            .join("; ")
                    ))
                }
            }
        };
        if let Ok(mut k) = self.knowledge.write() {
            k.config = config;
            k.config_loaded = true;
        }
        Ok(())
    }

    /// Fetch which extension declares which route handler and entry type.
    pub async fn refresh_handlers(&self) -> Result<(), String> {
        let r = self
            .bus
            .call("ext.registrations", &json!({}))
            .await
            .map_err(|e| format!("ext.registrations: {e}"))?;
        let mut handlers = HashMap::new();
        let mut types = HashMap::new();
        let mut executors = HashMap::new();
        let mut injectable = std::collections::HashSet::new();
        let mut tasks = Vec::new();
        let mut operations = HashMap::new();
        let mut surfaces = Vec::new();
        for e in r["extensions"].as_array().into_iter().flatten() {
            let name = e["name"].as_str().unwrap_or_default();
            let s = &e["surfaces"];
            surfaces.push(ExtensionSurfaces {
                name: name.to_owned(),
                scopes: serde_json::from_value(e["scopes"].clone()).unwrap_or_default(),
                run_environment: s["run_environment"] == true,
                segment_end: s["segment_end"] == true,
                dependency_filter: s["dependency_filter"] == true,
                annotations: s["annotations"] == true,
            });
            for o in e["operations"].as_array().into_iter().flatten() {
                if let Ok(g) =
                    serde_json::from_value::<protocol::toolbelt::OperationGuidance>(o.clone())
                {
                    operations.insert(g.name.clone(), (name.to_owned(), g));
                }
            }
            for h in e["handlers"].as_array().into_iter().flatten() {
                if let Some(h) = h.as_str() {
                    handlers.insert(h.to_owned(), name.to_owned());
                }
            }
            if e["state"] == "running" {
                for t in e["tasks"].as_array().into_iter().flatten() {
                    if let (Some(n), Some(every)) = (t["name"].as_str(), t["interval_s"].as_u64()) {
                        if every > 0 {
                            tasks.push((name.to_owned(), n.to_owned(), every));
                        }
                    }
                }
            }
            for x in e["executors"].as_array().into_iter().flatten() {
                if let Some(n) = x["name"].as_str() {
                    let pool = x["pool"].as_str().unwrap_or_default().to_owned();
                    executors.insert(n.to_owned(), (name.to_owned(), pool));
                    if x["inject"] == true {
                        injectable.insert(n.to_owned());
                    }
                }
            }
            for t in e["types"].as_array().into_iter().flatten() {
                if let Some(t) = t.as_str() {
                    types.insert(t.to_owned(), name.to_owned());
                }
            }
        }
        if let Ok(mut k) = self.knowledge.write() {
            k.handlers = handlers;
            k.types = types;
            k.executors = executors;
            k.injectable = injectable;
            k.tasks = tasks;
            k.operations = operations;
            k.surfaces = surfaces;
            k.playbook_dir = r["playbook_dir"].as_str().unwrap_or_default().to_owned();
            k.handlers_loaded = true;
        }
        Ok(())
    }

    /// The scope as `route.match` shows it to `owner`: its own entries only.
    fn scope_for(k: &Knowledge, scope_id: &str, owner: &str) -> Option<wire::Scope> {
        let (config, _) = k.config.as_ref()?;
        let s = config.scope(scope_id)?;
        let entries = s
            .entries
            .iter()
            .filter(|e| k.types.get(&e.entry_type).is_some_and(|o| o == owner))
            .map(|e| wire::Entry {
                scope_id: s.id.clone(),
                entry_type: e.entry_type.clone(),
                name: e.name.clone(),
                connection: e.connection.clone(),
                binding_connections: Vec::new(),
                config: e.config.clone(),
            })
            .collect();
        Some(wire::Scope {
            id: s.id.clone(),
            disabled: !s.enabled,
            entries,
            routes: s.routes.clone(),
            bindings: s
                .bindings
                .iter()
                .filter_map(|b| serde_json::from_value(b.clone()).ok())
                .collect(),
        })
    }

    /// The open Work the event's keys already name, with its display (what a route
    /// handler sees as `work`, so it can add to the display rather than replace it).
    async fn work_of(&self, ev: &RoutedEvent) -> Option<wire::Work> {
        for key in ev.keys.iter().take(8) {
            let page = self
                .bus
                .call(
                    "store.works",
                    &json!({"scope_id": ev.scope_id, "key": key, "limit": 5}),
                )
                .await
                .ok()?;
            let open = page["works"].as_array().into_iter().flatten().find(|w| {
                !matches!(
                    w["state"].as_str(),
                    Some("completed" | "failed" | "cancelled")
                )
            });
            if let Some(w) = open {
                return Some(wire::Work::from_store_row(w));
            }
        }
        None
    }

    /// Ask the routes of the event's scope, in order, writing nothing.
    pub async fn evaluate(&self, ev: &RoutedEvent) -> Result<Decision, RouteError> {
        let (routes, unmatched, enabled) = {
            let k = self
                .knowledge
                .read()
                .map_err(|_| RouteError::Store("the router's knowledge is poisoned".into()))?;
            match k.config.as_ref().and_then(|(c, _)| c.scope(&ev.scope_id)) {
                None => (Vec::new(), "no_scope".to_owned(), false),
                Some(s) => (
                    s.routes.clone(),
                    s.extra
                        .get("unmatched")
                        .and_then(Value::as_str)
                        .unwrap_or_default()
                        .to_owned(),
                    s.enabled,
                ),
            }
        };
        let unmatched_outcome =
            |disposition: &str| json!({"type": "unmatched", "disposition": disposition});
        if !enabled {
            let disposition = if unmatched == "no_scope" {
                "no_scope"
            } else {
                "scope_disabled"
            };
            return Ok(Decision {
                records: Vec::new(),
                outcome: unmatched_outcome(disposition),
            });
        }
        // Work an agent asked for through the toolbelt (`create_work`): created as asked,
        // on the binding it names, with no route asked.
        if ev.event_type == protocol::toolbelt::WORK_REQUESTED
            && ev.source == format!("toolbelt/{}", ev.scope_id)
        {
            let payload = ev.payload_value();
            let data = &payload["data"];
            let mut outcome = json!({
                "type": "create",
                "kind": DEFAULT_KIND,
                "binding": data["binding"],
                "keys": ev.keys,
                "display": {"title": data["title"]},
            });
            if !data["context"].is_null() {
                outcome["context"] = data["context"].clone();
            }
            return Ok(Decision {
                records: vec![Record {
                    handler: "toolbelt".into(),
                    binding: data["binding"].as_str().unwrap_or_default().to_owned(),
                    matched: true,
                    reason: format!(
                        "create_work by {}",
                        data["requested_by"].as_str().unwrap_or_default()
                    ),
                }],
                outcome,
            });
        }
        // The event and its open Work are what a route handler is shown: with no
        // routes to ask, nothing reads them.
        let (event, work) = match routes.is_empty() {
            true => (wire::Event::default(), None),
            false => (ev.wire(), self.work_of(ev).await),
        };
        let mut records = Vec::new();
        for (index, route) in routes.iter().enumerate() {
            let (owner, scope) = {
                let k = self
                    .knowledge
                    .read()
                    .map_err(|_| RouteError::Store("the router's knowledge is poisoned".into()))?;
                let owner = k.handlers.get(&route.handler).cloned();
                let scope = owner
                    .as_deref()
                    .and_then(|o| Self::scope_for(&k, &ev.scope_id, o));
                (owner, scope)
            };
            let Some(owner) = owner else {
                records.push(Record {
                    handler: route.handler.clone(),
                    binding: route.binding.clone(),
                    matched: false,
                    reason: format!(
                        "no extension declares the route handler {:?}",
                        route.handler
                    ),
                });
                continue;
            };
            let params = RouteMatchParams {
                handler: route.handler.clone(),
                route: route.clone(),
                scope: scope.unwrap_or_default(),
                event: event.clone(),
                work: work.clone(),
            };
            let timeout_ms = u64::try_from(MATCH_TIMEOUT.as_millis()).unwrap_or(u64::MAX);
            let answer = self
                .bus
                .call_as::<_, RouteMatchResult>(
                    "ext.call",
                    &json!({"name": owner, "method": "route.match", "params": params,
                            "timeout_ms": timeout_ms}),
                )
                .await;
            let m = match answer {
                Ok(m) => m,
                Err(CallError::Rpc(e))
                    if e.app_code() == Some(protocol::Code::Invalid.as_str())
                        || e.app_code() == Some("invalid_params")
                        || e.code == -32602 =>
                {
                    // The route's config is refused by its handler: no match, said why.
                    records.push(Record {
                        handler: route.handler.clone(),
                        binding: route.binding.clone(),
                        matched: false,
                        reason: format!("the handler refused the route: {}", e.message),
                    });
                    continue;
                }
                Err(e) => {
                    return Err(RouteError::Unavailable {
                        index,
                        handler: route.handler.clone(),
                        why: e.to_string(),
                    })
                }
            };
            records.push(Record {
                handler: route.handler.clone(),
                binding: route.binding.clone(),
                matched: m.matched,
                reason: m.reason.clone(),
            });
            if m.matched {
                let kind = if m.kind.is_empty() {
                    DEFAULT_KIND.to_owned()
                } else {
                    m.kind.clone()
                };
                let mut outcome = json!({
                    "type": "create",
                    "kind": kind,
                    "binding": route.binding,
                    "keys": m.keys,
                    "grants": m.grants,
                });
                if let Some(d) = &m.display {
                    outcome["display"] = json!(d);
                }
                if let Some(c) = &m.context {
                    outcome["context"] = c.clone();
                }
                if !m.close.is_empty() {
                    outcome["close"] = json!(m.close);
                }
                return Ok(Decision { records, outcome });
            }
        }
        Ok(Decision {
            records,
            outcome: unmatched_outcome(&unmatched),
        })
    }

    /// The active Wait this event satisfies (by its keys and type, and by its owner's
    /// [`Router::dependency_filter`] when the owner declares one), in the event's
    /// scope: (Wait ID, Work ID).
    async fn waiting_for(&self, ev: &RoutedEvent) -> Result<Option<(String, String)>, RouteError> {
        if ev.keys.is_empty() {
            return Ok(None);
        }
        let waits = self
            .bus
            .call(
                "store.waits_matching",
                &json!({"keys": ev.keys, "types": [ev.event_type], "limit": 10}),
            )
            .await
            .map_err(|e| store_err("store.waits_matching", e))?;
        for w in waits["waits"].as_array().into_iter().flatten() {
            let work_id = w["work_id"].as_str().unwrap_or_default();
            let work = self
                .bus
                .call("store.work_get", &json!({ "id": work_id }))
                .await
                .map_err(|e| store_err("store.work_get", e))?;
            if work["work"]["scope_id"] == ev.scope_id.as_str()
                && self.dependency_filter(w, ev).await
            {
                return Ok(Some((
                    w["id"].as_str().unwrap_or_default().to_owned(),
                    work_id.to_owned(),
                )));
            }
        }
        Ok(None)
    }

    /// Whether the Wait `w` (a `store.waits_matching` row) takes `ev`, which its keys and
    /// types already match, as its owner's `dependency.filter` says: asked only when
    /// the owner declares `provides.dependency_filter` (a Wait with no owner, or whose
    /// owner declares none, takes it), in transaction ([`FILTER_TIMEOUT`], enforced by
    /// extrunner on the extension; [`FILTER_WAIT`] for the whole round trip). The
    /// operation is the owner's wait operation (its only one; empty when it declares
    /// several, see docs/decisions.md). `matched: false` and any failure (an error, a
    /// timeout, the extension down, an unreadable payload) count as no match (spec:
    /// the event routes as it would otherwise, and a later one may wake the Wait).
    async fn dependency_filter(&self, w: &Value, ev: &RoutedEvent) -> bool {
        let owner = w["owner"].as_str().unwrap_or_default();
        if owner.is_empty() {
            return true;
        }
        let operation = {
            let Ok(k) = self.knowledge.read() else {
                return false;
            };
            let filters = k
                .surfaces
                .iter()
                .any(|s| s.name == owner && s.dependency_filter);
            if !filters {
                return true;
            }
            let mut waits = k
                .operations
                .iter()
                .filter(|(_, (ext, g))| ext == owner && g.kind == "wait")
                .map(|(name, _)| name.clone());
            match (waits.next(), waits.next()) {
                (Some(only), None) => only,
                _ => String::new(),
            }
        };
        let wait_id = w["id"].as_str().unwrap_or_default();
        let params = wire::DependencyFilterParams {
            operation,
            work_id: w["work_id"].as_str().unwrap_or_default().to_owned(),
            plan: w["plan"].clone(),
            event: ev.wire(),
        };
        let request = json!({"name": owner, "method": "dependency.filter", "params": params,
                             "in_transaction": true});
        let call = self
            .bus
            .call_as::<_, wire::DependencyFilterResult>("ext.call", &request);
        match tokio::time::timeout(FILTER_WAIT, call).await {
            Ok(Ok(r)) => {
                if !r.matched {
                    tracing::info!(OC_EXTENSION = %owner, wait = %wait_id, seq = ev.seq, "the Wait's dependency filter did not take the event");
                }
                r.matched
            }
            Ok(Err(e)) => {
                tracing::warn!(OC_EXTENSION = %owner, wait = %wait_id, seq = ev.seq, error = %e, "the Wait's dependency filter failed: counted as no match");
                false
            }
            Err(_) => {
                tracing::warn!(OC_EXTENSION = %owner, wait = %wait_id, seq = ev.seq, "the Wait's dependency filter did not answer within {FILTER_WAIT:?}: counted as no match");
                false
            }
        }
    }

    /// Decide for one event and record the decision. An event a waiting Work's Wait
    /// is for goes to that Work and wakes the Wait; its routes are still asked, for
    /// the display alone (a route that errs or matches nothing leaves it as it is).
    pub async fn route(&self, ev: &RoutedEvent) -> Result<Value, RouteError> {
        let d = match self.waiting_for(ev).await? {
            Some((wait_id, work_id)) => {
                let display = match self.evaluate(ev).await {
                    Ok(d) if d.outcome["type"] == "create" => d.outcome.get("display").cloned(),
                    _ => None,
                };
                let mut outcome = json!({"type": "attach", "work_id": work_id, "wake": wait_id});
                if let Some(display) = display {
                    outcome["display"] = display;
                }
                Decision {
                    records: vec![Record {
                        handler: String::new(),
                        binding: String::new(),
                        matched: true,
                        reason: format!("the Work's Wait {wait_id} is for this event"),
                    }],
                    outcome,
                }
            }
            None => self.evaluate(ev).await?,
        };

        self.decide(ev, &d).await
    }

    /// What `store.route_decide` is asked to record for `ev`.
    pub fn decide_params(ev: &RoutedEvent, d: &Decision) -> Value {
        let records: Vec<Value> = d
            .records
            .iter()
            .map(|r| {
                json!({"handler": r.handler, "binding": r.binding, "matched": r.matched,
                       "reason": r.reason})
            })
            .collect();
        json!({"seq": ev.seq, "scope_id": ev.scope_id, "records": records, "outcome": d.outcome})
    }

    /// Record the decision for one event (`store.route_decide`): the store's answer.
    pub async fn decide(&self, ev: &RoutedEvent, d: &Decision) -> Result<Value, RouteError> {
        let answer = self.decide_with(ev, &Self::decide_params(ev, d)).await?;
        // The Work moved (made, woken, closed): the packages that show it are told.
        if let Some(work_id) = answer["work_id"].as_str() {
            self.annotate(work_id);
        }
        Ok(answer)
    }

    /// `store.route_decide` with its params made already.
    async fn decide_with(&self, ev: &RoutedEvent, params: &Value) -> Result<Value, RouteError> {
        let answer = self
            .bus
            .call("store.route_decide", params)
            .await
            .map_err(|e| {
                if e.code() == Some(protocol::Code::Conflict.as_str())
                    && e.to_string().contains("already routed")
                {
                    RouteError::RoutedElsewhere(ev.seq)
                } else {
                    store_err("store.route_decide", e)
                }
            })?;
        Ok(answer)
    }
}

/// What the router has done since it started.
#[derive(Debug, Default)]
pub struct Stats {
    inner: std::sync::Mutex<StatsInner>,
}

/// A snapshot of [`Stats`].
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StatsInner {
    /// Events routed to Work.
    pub routed: u64,
    /// Of them, those that created their Work.
    pub created: u64,
    /// Events no route took.
    pub unmatched: u64,
    /// The last event routed.
    pub last_seq: i64,
    /// Why the last pass stopped early, if it did.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub blocked: String,
}

impl Stats {
    fn note(&self, ev: &RoutedEvent, answer: &Value) {
        if let Ok(mut s) = self.inner.lock() {
            s.last_seq = ev.seq;
            if answer["work_id"].is_string() {
                s.routed += 1;
                if answer["created"] == true {
                    s.created += 1;
                }
            } else {
                s.unmatched += 1;
            }
            s.blocked.clear();
        }
    }

    /// Say why the router is held up (empty: it is not).
    pub fn blocked(&self, why: String) {
        if let Ok(mut s) = self.inner.lock() {
            s.blocked = why;
        }
    }

    /// A snapshot.
    pub fn snapshot(&self) -> StatsInner {
        self.inner.lock().map(|s| s.clone()).unwrap_or_default()
    }
}
