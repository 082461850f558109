//! The reads the API and the pages share: each one or a few typed bus calls, bounded,
//! answering JSON values that both serve (the API as they are, the pages drawn from
//! them), so a page never shows what the API does not.

use std::collections::HashMap;

use busapi::ext::ListRequest;
use busapi::people::{decision, from_hold, from_wait, Open};
use busapi::sched::{RouteTraceRequest, TraceEvent};
use busapi::store::{
    ConfigCurrentRequest, EventsListRequest, ExecutionsRequest, HostsRequest, RoutingRequest,
    WaitsRequest, WorkEventsRequest, WorkGetRequest, WorkInputsRequest, WorksRequest, WORK_STATES,
};
use daemon::bus::Bus;
use serde_json::{json, Value};

use crate::http::{bad, ApiError, MAX_ID};

/// The most items one page may ask for (`limit`).
pub const MAX_LIMIT: u32 = 200;
/// A page's size when `limit` is not given.
pub const DEFAULT_LIMIT: u32 = 50;
/// The most rows a read goes through to make one answer (Waits and held Works for
/// what waits for a person, a Work's Events for its decisions).
pub const MAX_SCANNED: usize = 2000;
/// The most keys a route trace's event carries.
pub const MAX_TRACE_KEYS: usize = 32;

/// A page's `limit`.
pub fn limit(q: &HashMap<String, String>) -> Result<u32, ApiError> {
    match q.get("limit").filter(|t| !t.is_empty()) {
        None => Ok(DEFAULT_LIMIT),
        Some(t) => match t.parse::<u32>() {
            Ok(n) if (1..=MAX_LIMIT).contains(&n) => Ok(n),
            _ => Err(bad(format!("limit={t:?}: a number from 1 to {MAX_LIMIT}"))),
        },
    }
}

/// The filters of a list of Works.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct WorkFilter {
    /// Its scope.
    pub scope: Option<String>,
    /// Its state (one of [`WORK_STATES`]).
    pub state: Option<String>,
    /// Its binding (filtered on the page read).
    pub binding: Option<String>,
    /// The cursor.
    pub after: String,
    /// At most this many.
    pub limit: u32,
}

impl WorkFilter {
    /// The filters from a query (`scope`, `state`, `binding`, `after`, `limit`).
    pub fn from_query(q: &HashMap<String, String>) -> Result<WorkFilter, ApiError> {
        let nonempty = |n: &str| q.get(n).filter(|v| !v.is_empty()).cloned();
        let state = nonempty("state");
        if let Some(s) = &state {
            if !WORK_STATES.contains(&s.as_str()) {
                return Err(bad(format!(
                    "state={s:?}: one of {}",
                    WORK_STATES.join(", ")
                )));
            }
        }
        Ok(WorkFilter {
            scope: nonempty("scope"),
            state,
            binding: nonempty("binding"),
            after: q.get("after").cloned().unwrap_or_default(),
            limit: limit(q)?,
        })
    }
}

/// A page of Works, the last changed first (`store.works` with `recent`): `{works, next}`. A binding
/// filter keeps the page's Works of that binding (the page may come back short;
/// `next` goes on).
pub async fn works(bus: &Bus, f: &WorkFilter) -> Result<Value, ApiError> {
    let r = bus
        .call_typed(&WorksRequest {
            scope_id: f.scope.clone(),
            state: f.state.clone(),
            after: f.after.clone(),
            limit: f.limit,
            recent: true,
            ..WorksRequest::default()
        })
        .await?;
    let works: Vec<_> = r
        .works
        .into_iter()
        .filter(|w| f.binding.as_ref().is_none_or(|b| &w.binding == b))
        .collect();
    Ok(json!({"works": works, "next": r.next}))
}

/// A page of Events in sequence order, each with how it was routed: `{events,
/// next_after}`.
pub async fn events(bus: &Bus, after: i64, limit: u32, routing: bool) -> Result<Value, ApiError> {
    let r = bus
        .call_typed(&EventsListRequest {
            after,
            limit: Some(limit),
            scopes: None,
        })
        .await?;
    let mut events = Vec::with_capacity(r.events.len());
    for e in &r.events {
        let mut v = json!(e);
        if routing {
            v["routing"] = bus
                .call_typed(&RoutingRequest { seq: e.seq })
                .await
                .map(|r| json!(r))
                .unwrap_or(Value::Null);
        }
        events.push(v);
    }
    Ok(json!({"events": events, "next_after": r.next_after}))
}

/// The last Events (newest first), at most `limit`, with their routing.
pub async fn recent_events(bus: &Bus, limit: u32) -> Result<Value, ApiError> {
    let last = bus
        .call_typed(&busapi::store::SequenceRequest::default())
        .await?
        .sequence;
    let after = (last - i64::from(limit)).max(0);
    let mut page = events(bus, after, limit, true).await?;
    if let Some(list) = page["events"].as_array_mut() {
        list.reverse();
    }
    Ok(page)
}

/// One Work: the Work, its attempts, its inputs and why each came, its Waits and the
/// people's decisions on it (its `core.action.*` Events).
pub async fn work(bus: &Bus, id: &str) -> Result<Value, ApiError> {
    let work = bus
        .call_typed(&WorkGetRequest { id: id.to_owned() })
        .await?
        .work;
    let ex = bus
        .call_typed(&ExecutionsRequest {
            work_id: Some(id.to_owned()),
            limit: MAX_LIMIT,
            ..ExecutionsRequest::default()
        })
        .await?;
    let inputs = bus
        .call_typed(&WorkInputsRequest {
            work_id: id.to_owned(),
            state: None,
            after: 0,
            limit: MAX_LIMIT,
        })
        .await?;
    let mut with_routing = Vec::with_capacity(inputs.inputs.len());
    for i in &inputs.inputs {
        let routing = bus.call_typed(&RoutingRequest { seq: i.seq }).await.ok();
        with_routing.push(json!({"seq": i.seq, "state": i.state,
                                 "attempt_id": i.attempt_id, "routing": routing}));
    }
    let waits = bus
        .call_typed(&WaitsRequest {
            work_id: Some(id.to_owned()),
            limit: MAX_LIMIT,
            ..WaitsRequest::default()
        })
        .await?;
    let mut decisions = Vec::new();
    let (mut after, mut read) = (0, 0);
    while read < MAX_SCANNED {
        let page = bus
            .call_typed(&WorkEventsRequest {
                work_id: id.to_owned(),
                after,
                limit: Some(MAX_LIMIT),
                scopes: None,
            })
            .await?;
        read += page.events.len();
        decisions.extend(page.events.iter().filter_map(decision));
        if page.events.is_empty() || page.next_after <= after {
            break;
        }
        after = page.next_after;
    }
    Ok(
        json!({"work": work, "executions": ex.executions, "inputs": with_routing,
              "waits": waits.waits, "decisions": decisions}),
    )
}

/// What waits for a person: open asks and approvals (active Waits), then Works held
/// for admission; at most [`MAX_SCANNED`] of each read.
pub async fn open_items(bus: &Bus) -> Result<Vec<Open>, ApiError> {
    let mut out = Vec::new();
    let mut scopes = HashMap::<String, String>::new();
    let (mut after, mut read) = (String::new(), 0);
    loop {
        let page = bus
            .call_typed(&WaitsRequest {
                state: Some("active".into()),
                after: after.clone(),
                limit: MAX_LIMIT,
                ..WaitsRequest::default()
            })
            .await?;
        read += page.waits.len();
        for w in page.waits.iter().filter(|w| !w.owner.is_empty()) {
            if !scopes.contains_key(&w.work_id) {
                let scope = bus
                    .call_typed(&WorkGetRequest {
                        id: w.work_id.clone(),
                    })
                    .await
                    .map(|r| r.work.scope_id)
                    .unwrap_or_default();
                scopes.insert(w.work_id.clone(), scope);
            }
            let scope = scopes.get(&w.work_id).map(String::as_str).unwrap_or("");
            out.extend(from_wait(w, scope));
        }
        if page.next.is_empty() || read >= MAX_SCANNED {
            break;
        }
        after = page.next;
    }
    let (mut after, mut read) = (String::new(), 0);
    loop {
        let page = bus
            .call_typed(&WorksRequest {
                state: Some("pending".into()),
                after: after.clone(),
                limit: MAX_LIMIT,
                ..WorksRequest::default()
            })
            .await?;
        read += page.works.len();
        out.extend(page.works.iter().filter_map(from_hold));
        if page.next.is_empty() || read >= MAX_SCANNED {
            break;
        }
        after = page.next;
    }
    Ok(out)
}

/// Every package and its state (`ext.list`).
pub async fn extensions(bus: &Bus) -> Result<Value, ApiError> {
    Ok(json!(bus.call_typed(&ListRequest::default()).await?))
}

/// The hosts of the suite, alive or gone (`store.hosts`, at most [`MAX_LIMIT`]).
pub async fn hosts(bus: &Bus) -> Result<Value, ApiError> {
    let r = bus
        .call_typed(&HostsRequest {
            after: String::new(),
            limit: MAX_LIMIT,
        })
        .await?;
    Ok(json!({"hosts": r.hosts, "next": r.next}))
}

/// The configuration now, redacted, with the check of its structure: `{generation,
/// hash, config, check: {ok, problems, warnings}, scopes}`.
pub async fn config(bus: &Bus) -> Result<Value, ApiError> {
    let c = bus.call_typed(&ConfigCurrentRequest {}).await?;
    let (ok, problems, scopes) = match protocol::config::Config::parse(&c.config) {
        Ok(parsed) => (
            true,
            Vec::new(),
            parsed
                .scopes
                .iter()
                .map(|s| s.id.clone())
                .collect::<Vec<_>>(),
        ),
        Err(p) => (
            false,
            p.into_iter()
                .map(|p| json!({"pointer": p.pointer, "message": p.message}))
                .collect(),
            Vec::new(),
        ),
    };
    let warnings: Vec<Value> = protocol::config::Config::unknown_fields(&c.config)
        .into_iter()
        .map(|p| json!({"pointer": p.pointer, "message": p.message}))
        .collect();
    Ok(json!({
        "generation": c.generation,
        "hash": c.hash,
        "config": protocol::config::redacted(&c.config),
        "check": {"ok": ok, "problems": problems, "warnings": warnings},
        "scopes": scopes,
    }))
}

/// What a route trace traces: an event given field by field, or a recorded Event
/// (`sample`, its sequence) taken as the sample.
#[derive(Debug, Clone, Default)]
pub struct TraceAsk {
    /// The scope.
    pub scope: String,
    /// A recorded Event's sequence to trace as it was.
    pub sample: Option<i64>,
    /// Else the event's type.
    pub event_type: String,
    /// Its source.
    pub source: String,
    /// Its keys.
    pub keys: Vec<String>,
}

impl TraceAsk {
    /// From a query: `scope`, and `sample` or `type` (with `source`, `keys` comma
    /// separated).
    pub fn from_query(q: &HashMap<String, String>) -> Result<Option<TraceAsk>, ApiError> {
        let Some(scope) = q.get("scope").filter(|s| !s.is_empty()) else {
            return Ok(None);
        };
        let sample = match q.get("sample").filter(|s| !s.is_empty()) {
            None => None,
            Some(s) => Some(
                s.parse::<i64>()
                    .ok()
                    .filter(|n| *n > 0)
                    .ok_or_else(|| bad(format!("sample={s:?}: an Event's sequence")))?,
            ),
        };
        let event_type = q.get("type").cloned().unwrap_or_default();
        if sample.is_none() && event_type.is_empty() {
            return Ok(None);
        }
        let keys: Vec<String> = q
            .get("keys")
            .map(|k| {
                k.split(',')
                    .map(str::trim)
                    .filter(|k| !k.is_empty())
                    .map(str::to_owned)
                    .collect()
            })
            .unwrap_or_default();
        if keys.len() > MAX_TRACE_KEYS {
            return Err(bad(format!("keys: at most {MAX_TRACE_KEYS}")));
        }
        Ok(Some(TraceAsk {
            scope: scope.clone(),
            sample,
            event_type,
            source: q.get("source").cloned().unwrap_or_default(),
            keys,
        }))
    }
}

/// How every route of the scope would decide the event (`sched.route_trace`),
/// writing nothing: `{event, records, outcome}`.
pub async fn trace(bus: &Bus, t: &TraceAsk) -> Result<Value, ApiError> {
    let event = match t.sample {
        Some(seq) => {
            let page = bus
                .call_typed(&EventsListRequest {
                    after: seq - 1,
                    limit: Some(1),
                    scopes: None,
                })
                .await?;
            let e = page
                .events
                .into_iter()
                .find(|e| e.seq == seq)
                .ok_or_else(|| crate::http::not_found(format!("no Event {seq}")))?;
            TraceEvent {
                event_type: e.event_type,
                source: e.source,
                keys: e.keys,
                payload: Some(protocol::wire::Payload {
                    schema: e.schema.unwrap_or_default(),
                    data: e.payload,
                }),
            }
        }
        None => TraceEvent {
            event_type: t.event_type.clone(),
            source: t.source.clone(),
            keys: t.keys.clone(),
            payload: None,
        },
    };
    if t.scope.len() > MAX_ID {
        return Err(bad(format!("scope: longer than {MAX_ID} characters")));
    }
    let shown = json!({"type": event.event_type, "source": event.source, "keys": event.keys});
    let r = bus
        .call_typed(&RouteTraceRequest {
            scope_id: t.scope.clone(),
            event,
        })
        .await?;
    Ok(json!({"scope": t.scope, "event": shown, "records": r.records, "outcome": r.outcome}))
}
