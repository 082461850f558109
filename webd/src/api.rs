//! The JSON HTTP API: each route one or a few typed bus calls (`busapi`), each
//! answer bounded, each error `{"error": {"code", "message"}}` with its HTTP status.
//! Every route but `/api/openapi.json` needs `Authorization: Bearer <login token>`;
//! a `POST` must say `Content-Type: application/json`, which a cross-site form cannot
//! send (403 otherwise).

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::Arc;

use busapi::ext::{ActRequest, ActionsRequest, ListRequest};
use busapi::people::{decision, from_hold, from_wait, Open};
use busapi::store::{
    EventsListRequest, ExecutionsRequest, RoutingRequest, WaitsRequest, WorkEventsRequest,
    WorkGetRequest, WorkInputsRequest, WorksRequest,
};
use bytes::Bytes;
use daemon::bus::Bus;
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper::header::{HeaderValue, ALLOW, AUTHORIZATION, CACHE_CONTROL, CONTENT_TYPE};
use hyper::{Method, Request, Response, StatusCode};
use protocol::error::CallError;
use serde::Deserialize;
use serde_json::{json, Value};

use crate::tokens::Tokens;

/// The most items one page may ask for (`limit`).
pub const MAX_LIMIT: u32 = 200;
/// A page's size when `limit` is not given.
pub const DEFAULT_LIMIT: u32 = 50;
/// The most rows a route reads to make one answer (Waits and held Works for
/// `/api/asks`, a Work's Events for its decisions).
pub const MAX_SCANNED: usize = 2000;
/// The largest request body.
pub const MAX_BODY_BYTES: usize = 64 * 1024;
/// The longest ID or key taken from a request.
pub const MAX_ID: usize = 200;

/// The Work states `state=` takes: the store's.
pub use busapi::store::WORK_STATES;

/// What the routes need: the bus and the login tokens.
pub struct Api {
    bus: Bus,
    tokens: Tokens,
}

impl Api {
    /// The API over `bus`, signing in with `tokens`.
    pub fn new(bus: Bus, tokens: Tokens) -> Api {
        Api { bus, tokens }
    }
}

/// An error answer.
#[derive(Debug, Clone, PartialEq)]
pub struct ApiError {
    /// The HTTP status.
    pub status: StatusCode,
    /// A stable code.
    pub code: String,
    /// What went wrong, for a person.
    pub message: String,
}

fn fail(status: StatusCode, code: &str, message: impl Into<String>) -> ApiError {
    ApiError {
        status,
        code: code.to_owned(),
        message: message.into(),
    }
}

fn bad(message: impl Into<String>) -> ApiError {
    fail(StatusCode::BAD_REQUEST, "invalid", message)
}

impl From<CallError> for ApiError {
    fn from(e: CallError) -> ApiError {
        match &e {
            CallError::Rpc(r) => {
                let code = r.app_code().unwrap_or("bus_error").to_owned();
                let status = match code.as_str() {
                    "not_found" => StatusCode::NOT_FOUND,
                    "invalid" | "unsupported" => StatusCode::BAD_REQUEST,
                    "conflict" | "not_accepting" | "not_live" => StatusCode::CONFLICT,
                    "unauthorized" | "undeclared" => StatusCode::FORBIDDEN,
                    "unavailable" | "overloaded" | "shutting_down" | "retry_after" => {
                        StatusCode::SERVICE_UNAVAILABLE
                    }
                    _ => StatusCode::BAD_GATEWAY,
                };
                ApiError {
                    status,
                    code,
                    message: r.message.clone(),
                }
            }
            CallError::Transport(_) | CallError::Timeout(_) | CallError::Cancelled => fail(
                StatusCode::SERVICE_UNAVAILABLE,
                "unavailable",
                format!("the bus: {e}"),
            ),
            CallError::TooLarge { .. } | CallError::Codec(_) => {
                fail(StatusCode::BAD_GATEWAY, "bus_error", e.to_string())
            }
        }
    }
}

type Answer = Result<Value, ApiError>;

fn respond(status: StatusCode, body: Vec<u8>) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::from(body)));
    *r.status_mut() = status;
    let h = r.headers_mut();
    h.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    h.insert(CACHE_CONTROL, HeaderValue::from_static("no-store"));
    h.insert(
        "x-content-type-options",
        HeaderValue::from_static("nosniff"),
    );
    r
}

fn error_response(e: &ApiError) -> Response<Full<Bytes>> {
    let body = json!({"error": {"code": e.code, "message": e.message}});
    let mut r = respond(e.status, body.to_string().into_bytes());
    if e.status == StatusCode::UNAUTHORIZED {
        r.headers_mut().insert(
            "www-authenticate",
            HeaderValue::from_static("Bearer realm=\"open-conduit\""),
        );
    }
    if e.status == StatusCode::METHOD_NOT_ALLOWED {
        let allow = if e.message.contains("POST") {
            "GET, POST"
        } else {
            "GET"
        };
        r.headers_mut()
            .insert(ALLOW, HeaderValue::from_static(allow));
    }
    r
}

/// Answer one request.
pub async fn handle(
    api: Arc<Api>,
    req: Request<Incoming>,
) -> Result<Response<Full<Bytes>>, Infallible> {
    if req.method() == Method::GET && req.uri().path() == "/api/openapi.json" {
        return Ok(respond(StatusCode::OK, crate::OPENAPI.as_bytes().to_vec()));
    }
    Ok(match route(&api, req).await {
        Ok(v) => respond(StatusCode::OK, v.to_string().into_bytes()),
        Err(e) => {
            tracing::debug!(status = e.status.as_u16(), code = %e.code, "{}", e.message);
            error_response(&e)
        }
    })
}

/// The person the request's bearer token signs in as.
fn sign_in(api: &Api, req: &Request<Incoming>) -> Result<String, ApiError> {
    let unauthorized = |m: &str| fail(StatusCode::UNAUTHORIZED, "unauthorized", m);
    let Some(value) = req.headers().get(AUTHORIZATION) else {
        return Err(unauthorized(
            "sign in: send Authorization: Bearer <token> (open-conduit web login prints one)",
        ));
    };
    let token = value
        .to_str()
        .ok()
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .ok_or_else(|| unauthorized("the Authorization header is not Bearer <token>"))?;
    match api.tokens.person(token) {
        Ok(Some(person)) => Ok(person),
        Ok(None) => Err(unauthorized(
            "the token is not a login token (open-conduit web login prints one)",
        )),
        Err(e) => {
            tracing::warn!(error = %e, "cannot read the login tokens");
            Err(fail(
                StatusCode::SERVICE_UNAVAILABLE,
                "unavailable",
                "the login tokens cannot be read now",
            ))
        }
    }
}

async fn route(api: &Api, req: Request<Incoming>) -> Answer {
    let path = req.uri().path().to_owned();
    let Some(rest) = path.strip_prefix("/api/") else {
        return Err(fail(
            StatusCode::NOT_FOUND,
            "not_found",
            format!("no route {path}"),
        ));
    };
    let parts: Vec<&str> = rest.split('/').collect();
    let post_ok = matches!(parts.as_slice(), ["works", _, "actions"]);
    let known = matches!(
        parts.as_slice(),
        ["works"] | ["works", _] | ["works", _, "actions"] | ["events"] | ["extensions"] | ["asks"]
    );
    if !known {
        return Err(fail(
            StatusCode::NOT_FOUND,
            "not_found",
            format!("no route {path}"),
        ));
    }
    let person = sign_in(api, &req)?;
    let method = req.method().clone();
    if method == Method::POST && post_ok {
        return act(api, req, parts[1], &person).await;
    }
    if method != Method::GET {
        let allowed = if post_ok { "GET or POST" } else { "GET" };
        return Err(fail(
            StatusCode::METHOD_NOT_ALLOWED,
            "method_not_allowed",
            format!("{path} takes {allowed}"),
        ));
    }
    let q = query(req.uri().query().unwrap_or(""))?;
    match parts.as_slice() {
        ["works"] => works(api, &q).await,
        ["works", id] => {
            no_params(&q)?;
            work(api, &work_id(id)?).await
        }
        ["works", id, "actions"] => {
            no_params(&q)?;
            let r = api
                .bus
                .call_typed(&ActionsRequest {
                    work_id: work_id(id)?,
                })
                .await?;
            Ok(json!(r))
        }
        ["events"] => events(api, &q).await,
        ["extensions"] => {
            no_params(&q)?;
            Ok(json!(api.bus.call_typed(&ListRequest::default()).await?))
        }
        _ => {
            no_params(&q)?;
            asks(api).await
        }
    }
}

fn work_id(id: &str) -> Result<String, ApiError> {
    if id.is_empty() || id.len() > MAX_ID || !id.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(bad(format!(
            "a Work ID is 1 to {MAX_ID} printable characters"
        )));
    }
    Ok(id.to_owned())
}

fn percent_decode(s: &str) -> Result<String, ApiError> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'+' => out.push(b' '),
            b'%' => {
                let hex = s
                    .get(i + 1..i + 3)
                    .and_then(|h| u8::from_str_radix(h, 16).ok())
                    .ok_or_else(|| bad("a query parameter has a bad %-escape"))?;
                out.push(hex);
                i += 2;
            }
            c => out.push(c),
        }
        i += 1;
    }
    String::from_utf8(out).map_err(|_| bad("a query parameter is not UTF-8"))
}

/// The query's parameters (each at most once).
fn query(q: &str) -> Result<HashMap<String, String>, ApiError> {
    let mut out = HashMap::new();
    for pair in q.split('&').filter(|p| !p.is_empty()) {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        let (k, v) = (percent_decode(k)?, percent_decode(v)?);
        if v.len() > MAX_ID {
            return Err(bad(format!("{k}: longer than {MAX_ID} characters")));
        }
        if out.insert(k.clone(), v).is_some() {
            return Err(bad(format!("{k} is given more than once")));
        }
    }
    Ok(out)
}

fn no_params(q: &HashMap<String, String>) -> Result<(), ApiError> {
    only(q, &[])
}

fn only(q: &HashMap<String, String>, known: &[&str]) -> Result<(), ApiError> {
    match q.keys().find(|k| !known.contains(&k.as_str())) {
        Some(k) if known.is_empty() => Err(bad(format!("this route takes no parameter {k:?}"))),
        Some(k) => Err(bad(format!(
            "no parameter {k:?} (this route takes {})",
            known.join(", ")
        ))),
        None => Ok(()),
    }
}

fn limit(q: &HashMap<String, String>) -> Result<u32, ApiError> {
    match q.get("limit") {
        None => Ok(DEFAULT_LIMIT),
        Some(t) => match t.parse::<u32>() {
            Ok(n) if (1..=MAX_LIMIT).contains(&n) => Ok(n),
            _ => Err(bad(format!("limit={t:?}: a number from 1 to {MAX_LIMIT}"))),
        },
    }
}

fn nonempty(q: &HashMap<String, String>, name: &str) -> Option<String> {
    q.get(name).filter(|v| !v.is_empty()).cloned()
}

async fn works(api: &Api, q: &HashMap<String, String>) -> Answer {
    only(q, &["scope", "state", "after", "limit"])?;
    let state = nonempty(q, "state");
    if let Some(s) = &state {
        if !WORK_STATES.contains(&s.as_str()) {
            return Err(bad(format!(
                "state={s:?}: one of {}",
                WORK_STATES.join(", ")
            )));
        }
    }
    let r = api
        .bus
        .call_typed(&WorksRequest {
            scope_id: nonempty(q, "scope"),
            state,
            after: q.get("after").cloned().unwrap_or_default(),
            limit: limit(q)?,
            ..WorksRequest::default()
        })
        .await?;
    Ok(json!({"works": r.works, "next": r.next}))
}

async fn events(api: &Api, q: &HashMap<String, String>) -> Answer {
    only(q, &["after", "limit"])?;
    let after = match q.get("after") {
        None => 0,
        Some(t) => t
            .parse::<i64>()
            .ok()
            .filter(|n| *n >= 0)
            .ok_or_else(|| bad(format!("after={t:?}: an Event sequence (0 or more)")))?,
    };
    let r = api
        .bus
        .call_typed(&EventsListRequest {
            after,
            limit: Some(limit(q)?),
            scopes: None,
        })
        .await?;
    Ok(json!({"events": r.events, "next_after": r.next_after}))
}

/// One Work: the Work, its attempts, its inputs and why each came, its Waits and
/// the people's decisions on it (its `core.action.*` Events).
async fn work(api: &Api, id: &str) -> Answer {
    let bus = &api.bus;
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

async fn asks(api: &Api) -> Answer {
    Ok(json!({"asks": open_items(&api.bus).await?}))
}

/// The body of `POST /api/works/{id}/actions`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ActBody {
    #[serde(default)]
    provider: Option<String>,
    action: String,
    #[serde(default)]
    input: Option<Value>,
    #[serde(default)]
    key: Option<String>,
}

/// Whether the request says its body is JSON.
fn json_content(req: &Request<Incoming>) -> bool {
    req.headers()
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|m| m.trim().eq_ignore_ascii_case("application/json"))
}

async fn act(api: &Api, req: Request<Incoming>, id: &str, person: &str) -> Answer {
    if !json_content(&req) {
        return Err(fail(
            StatusCode::FORBIDDEN,
            "forbidden",
            "an action must be sent with Content-Type: application/json",
        ));
    }
    let id = work_id(id)?;
    let body = Limited::new(req.into_body(), MAX_BODY_BYTES)
        .collect()
        .await
        .map_err(|e| {
            fail(
                StatusCode::PAYLOAD_TOO_LARGE,
                "too_large",
                format!("the body (at most {MAX_BODY_BYTES} bytes): {e}"),
            )
        })?
        .to_bytes();
    let b: ActBody = serde_json::from_slice(&body).map_err(|e| bad(format!("the body: {e}")))?;
    for (name, v) in [
        ("action", Some(&b.action)),
        ("provider", b.provider.as_ref()),
        ("key", b.key.as_ref()),
    ] {
        if v.is_some_and(|v| v.len() > MAX_ID) {
            return Err(bad(format!("{name}: longer than {MAX_ID} characters")));
        }
    }
    if b.action.is_empty() {
        return Err(bad("action: empty"));
    }
    let key = match b.key.filter(|k| !k.is_empty()) {
        Some(k) => k,
        None => format!(
            "web/{}",
            protocol::random::hex(8).map_err(|e| fail(
                StatusCode::INTERNAL_SERVER_ERROR,
                "internal",
                format!("no randomness: {e}")
            ))?
        ),
    };
    let r = api
        .bus
        .call_typed(&ActRequest {
            work_id: id,
            provider: b.provider.unwrap_or_default(),
            action: b.action,
            input: b.input.unwrap_or(Value::Null),
            caller: person.to_owned(),
            key,
        })
        .await?;
    Ok(json!(r))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queries_decode_and_refuse_repeats() {
        let q = query("scope=a%2Fb&state=running&limit=5").unwrap_or_default();
        assert_eq!(q.get("scope").map(String::as_str), Some("a/b"));
        assert!(query("a=1&a=2").is_err());
        assert!(query("a=%zz").is_err());
        assert!(limit(&query("limit=201").unwrap_or_default()).is_err());
        assert_eq!(limit(&HashMap::new()).ok(), Some(DEFAULT_LIMIT));
    }
}
