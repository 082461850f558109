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
//!
//! What the router knows (the configuration, which package declares what) is
//! [`crate::knowledge`]'s; an event a Wait is for is found in `waits.rs`.

use std::sync::{Arc, RwLock};
use std::time::Duration;

use busapi::ext::ExtCall;
use busapi::sched::{RouteTrace, RouteVerdict};
use busapi::store::{
    ConfigCurrentRequest, RouteDecideRequest, RouteDecideResponse, RouteOutcome, RouteRecordInput,
    UnroutedEvent, WorksRequest,
};
use busapi::Call;
use protocol::config::Config;
use protocol::wire::{self, RouteMatchParams};
use protocol::CallError;
use serde_json::{json, Value};

use crate::knowledge::Knowledge;
use crate::ports::{ms, Extensions, Store};

mod pass;
mod waits;
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

/// What the routes decided for an event: every route asked, in order, and the
/// outcome `store.route_decide` records (a route trace's answer).
pub type Decision = RouteTrace;

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

/// How many `work.annotate` calls may be in flight at once (the annotations are sent
/// by `crate::annotate`).
pub const ANNOTATIONS_IN_FLIGHT: usize = 16;

/// The router.
#[derive(Debug, Clone)]
pub struct Router {
    store: Store,
    extensions: Extensions,
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

fn poisoned() -> RouteError {
    RouteError::Store("the router's knowledge is poisoned".into())
}

/// The outcome of a scope's unmatched disposition.
fn unmatched(disposition: &str) -> RouteOutcome {
    RouteOutcome::Unmatched {
        disposition: disposition.to_owned(),
    }
}

impl Router {
    /// A router calling `store` and `extensions`.
    pub fn new(store: Store, extensions: Extensions) -> Router {
        Router {
            store,
            extensions,
            knowledge: Arc::default(),
            injections: Arc::default(),
            annotations: Arc::new(tokio::sync::Semaphore::new(ANNOTATIONS_IN_FLIGHT)),
        }
    }

    /// The store it calls.
    pub fn store(&self) -> &Store {
        &self.store
    }

    /// The extensions it calls.
    pub fn extensions(&self) -> &Extensions {
        &self.extensions
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
        let method = ConfigCurrentRequest::METHOD;
        let answer = match self.store.call(&ConfigCurrentRequest {}).await {
            Ok(a) => Some(a),
            Err(e) if e.code() == Some(protocol::Code::NotFound.as_str()) => None,
            Err(e) => return Err(format!("{method}: {e}")),
        };
        let config = match answer {
            None => None,
            Some(generation) => match Config::parse(&generation.config) {
                Ok(c) => Some((c, generation.hash)),
                Err(p) => {
                    return Err(format!(
                        "the stored configuration {} has problems: {}",
                        generation.hash,
                        p.iter()
                            .map(ToString::to_string)
                            .collect::<Vec<_>>()
                            .join("; ")
                    ))
                }
            },
        };
        if let Ok(mut k) = self.knowledge.write() {
            k.set_config(config);
        }
        Ok(())
    }

    /// Fetch which extension declares which route handler and entry type.
    pub async fn refresh_handlers(&self) -> Result<(), String> {
        let r = self
            .extensions
            .registrations()
            .await
            .map_err(|e| format!("{}: {e}", busapi::ext::RegistrationsRequest::METHOD))?;
        if let Ok(mut k) = self.knowledge.write() {
            k.set_registrations(r);
        }
        Ok(())
    }

    /// The open Work the event's keys already name, with its display (what a route
    /// handler sees as `work`, so it can add to the display rather than replace it).
    async fn work_of(&self, ev: &UnroutedEvent) -> Option<wire::Work> {
        for key in ev.keys.iter().take(8) {
            let page = self
                .store
                .call(&WorksRequest {
                    scope_id: Some(ev.scope_id.clone()),
                    key: Some(key.clone()),
                    limit: 5,
                    ..WorksRequest::default()
                })
                .await
                .ok()?;
            let open = page
                .works
                .iter()
                .find(|w| !matches!(w.state.as_str(), "completed" | "failed" | "cancelled"));
            if let Some(w) = open {
                return Some(crate::rows::work(w));
            }
        }
        None
    }

    /// Ask the routes of the event's scope, in order, writing nothing.
    pub async fn evaluate(&self, ev: &UnroutedEvent) -> Result<Decision, RouteError> {
        let (routes, disposition, enabled) = {
            let k = self.knowledge.read().map_err(|_| poisoned())?;
            match k.scope(&ev.scope_id) {
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
        if !enabled {
            let disposition = if disposition == "no_scope" {
                "no_scope"
            } else {
                "scope_disabled"
            };
            return Ok(Decision {
                records: Vec::new(),
                outcome: unmatched(disposition),
            });
        }
        // Work an agent asked for through the toolbelt (`create_work`): created as asked,
        // on the binding it names, with no route asked.
        if ev.event_type == protocol::toolbelt::WORK_REQUESTED
            && ev.source == format!("toolbelt/{}", ev.scope_id)
        {
            return Ok(requested(ev));
        }
        // The event and its open Work are what a route handler is shown: with no
        // routes to ask, nothing reads them.
        let (event, work) = match routes.is_empty() {
            true => (wire::Event::default(), None),
            false => (crate::rows::routed_event(ev), self.work_of(ev).await),
        };
        let mut records = Vec::new();
        for (index, route) in routes.iter().enumerate() {
            let (owner, scope) = {
                let k = self.knowledge.read().map_err(|_| poisoned())?;
                let owner = k.handlers.get(&route.handler).cloned();
                let scope = owner.as_deref().and_then(|o| k.scope_for(&ev.scope_id, o));
                (owner, scope)
            };
            let Some(owner) = owner else {
                records.push(RouteVerdict {
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
            let call = ExtCall::new(owner, params).timeout_ms(ms(MATCH_TIMEOUT));
            let m = match self.extensions.call(&call).await {
                Ok(m) => m,
                Err(CallError::Rpc(e))
                    if e.app_code() == Some(protocol::Code::Invalid.as_str())
                        || e.app_code() == Some("invalid_params")
                        || e.code == -32602 =>
                {
                    // The route's config is refused by its handler: no match, said why.
                    records.push(RouteVerdict {
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
            records.push(RouteVerdict {
                handler: route.handler.clone(),
                binding: route.binding.clone(),
                matched: m.matched,
                reason: m.reason.clone(),
            });
            if m.matched {
                let kind = if m.kind.is_empty() {
                    DEFAULT_KIND.to_owned()
                } else {
                    m.kind
                };
                let outcome = RouteOutcome::Create {
                    kind,
                    binding: route.binding.clone(),
                    keys: m.keys,
                    display: m.display.as_ref().map(|d| json!(d)),
                    context: m.context,
                    grants: m.grants,
                    close: (!m.close.is_empty()).then_some(m.close),
                };
                return Ok(Decision { records, outcome });
            }
        }
        Ok(Decision {
            records,
            outcome: unmatched(&disposition),
        })
    }

    /// Decide for one event and record the decision. An event a waiting Work's Wait
    /// is for goes to that Work and wakes the Wait; its routes are still asked, for
    /// the display alone (a route that errs or matches nothing leaves it as it is).
    pub async fn route(&self, ev: &UnroutedEvent) -> Result<RouteDecideResponse, RouteError> {
        let d = match self.waiting_for(ev).await? {
            Some((wait_id, work_id)) => {
                let display = match self.evaluate(ev).await {
                    Ok(Decision {
                        outcome: RouteOutcome::Create { display, .. },
                        ..
                    }) => display,
                    _ => None,
                };
                Decision {
                    records: vec![RouteVerdict {
                        handler: String::new(),
                        binding: String::new(),
                        matched: true,
                        reason: format!("the Work's Wait {wait_id} is for this event"),
                    }],
                    outcome: RouteOutcome::Attach {
                        work_id,
                        display,
                        wake: Some(wait_id),
                    },
                }
            }
            None => self.evaluate(ev).await?,
        };

        self.decide(ev, &d).await
    }

    /// What `store.route_decide` is asked to record for `ev`.
    pub fn decide_params(ev: &UnroutedEvent, d: &Decision) -> RouteDecideRequest {
        RouteDecideRequest {
            seq: ev.seq,
            scope_id: ev.scope_id.clone(),
            records: d
                .records
                .iter()
                .map(|r| RouteRecordInput {
                    handler: r.handler.clone(),
                    binding: r.binding.clone(),
                    matched: r.matched,
                    reason: r.reason.clone(),
                    work_id: None,
                    display_refused: None,
                })
                .collect(),
            outcome: d.outcome.clone(),
        }
    }

    /// Record the decision for one event (`store.route_decide`): the store's answer.
    pub async fn decide(
        &self,
        ev: &UnroutedEvent,
        d: &Decision,
    ) -> Result<RouteDecideResponse, RouteError> {
        let answer = self.decide_with(ev, &Self::decide_params(ev, d)).await?;
        // The Work moved (made, woken, closed): the packages that show it are told.
        if let Some(work_id) = &answer.work_id {
            self.annotate(work_id);
        }
        Ok(answer)
    }

    /// `store.route_decide` with its params made already.
    async fn decide_with(
        &self,
        ev: &UnroutedEvent,
        params: &RouteDecideRequest,
    ) -> Result<RouteDecideResponse, RouteError> {
        self.store.call(params).await.map_err(|e| {
            if e.code() == Some(protocol::Code::Conflict.as_str())
                && e.to_string().contains("already routed")
            {
                RouteError::RoutedElsewhere(ev.seq)
            } else {
                store_err(RouteDecideRequest::METHOD, e)
            }
        })
    }
}

/// The decision for Work an agent asked for (`create_work`, an
/// `agent.work_requested` event of the toolbelt): a Work on the binding it names.
fn requested(ev: &UnroutedEvent) -> Decision {
    let payload = crate::rows::payload_value(ev);
    let data = &payload["data"];
    let binding = data["binding"].as_str().unwrap_or_default().to_owned();
    let outcome = RouteOutcome::Create {
        kind: DEFAULT_KIND.to_owned(),
        binding: binding.clone(),
        keys: ev.keys.clone(),
        display: Some(json!({"title": data["title"]})),
        context: (!data["context"].is_null()).then(|| data["context"].clone()),
        grants: Vec::new(),
        close: None,
    };
    Decision {
        records: vec![RouteVerdict {
            handler: "toolbelt".into(),
            binding,
            matched: true,
            reason: format!(
                "create_work by {}",
                data["requested_by"].as_str().unwrap_or_default()
            ),
        }],
        outcome,
    }
}

/// What the router has done since it started.
#[derive(Debug, Default)]
pub struct Stats {
    inner: std::sync::Mutex<busapi::sched::RouterStats>,
    /// Events read and not yet routed: the rest of the page being routed (0 when
    /// the router has routed all it read).
    queue: std::sync::atomic::AtomicU64,
}

impl Stats {
    /// The router's queue: events read and not yet routed.
    pub fn queue(&self) -> u64 {
        self.queue.load(std::sync::atomic::Ordering::Relaxed)
    }

    fn set_queue(&self, n: usize) {
        self.queue
            .store(n as u64, std::sync::atomic::Ordering::Relaxed);
    }

    fn note(&self, ev: &UnroutedEvent, answer: &RouteDecideResponse) {
        let _ = self.queue.fetch_update(
            std::sync::atomic::Ordering::Relaxed,
            std::sync::atomic::Ordering::Relaxed,
            |n| Some(n.saturating_sub(1)),
        );
        if let Ok(mut s) = self.inner.lock() {
            s.last_seq = ev.seq;
            if answer.work_id.is_some() {
                s.routed += 1;
                if answer.created {
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
    pub fn snapshot(&self) -> busapi::sched::RouterStats {
        self.inner.lock().map(|s| s.clone()).unwrap_or_default()
    }
}
