//! The JSON HTTP API under `/api/`: each route one or a few typed bus calls
//! ([`crate::reads`]), each answer bounded, each error `{"error": {"code",
//! "message"}}` with its HTTP status. A request signs in with a login token
//! (`Authorization: Bearer`), a session cookie or a trusted proxy's header
//! ([`crate::auth`]); a `POST` must say `Content-Type: application/json` (a cross-site
//! form cannot) and, when a cookie or a proxy signed it, carry the session's CSRF
//! token.

use std::sync::Arc;

use busapi::ext::{ActRequest, ActionsRequest};
use busapi::view::{PageRequest, PagesRequest, PanelsRequest};
use hyper::body::Incoming;
use hyper::header::CONTENT_TYPE;
use hyper::{Method, Request, StatusCode};
use serde::Deserialize;
use serde_json::{json, Value};

use crate::auth::{Who, CSRF_HEADER};
use crate::context::App;
use crate::http::{
    bad, fail, json_reply, not_found, only, query, work_id, ApiError, Reply, MAX_ID,
};
use crate::reads::{self, TraceAsk, WorkFilter};

/// The largest request body.
pub const MAX_BODY_BYTES: usize = 64 * 1024;

type Answer = Result<Value, ApiError>;

/// Answer a request under `/api/` from `who`.
pub async fn route(app: &Arc<App>, req: Request<Incoming>, who: Who) -> Result<Reply, ApiError> {
    let path = req.uri().path().to_owned();
    let rest = path.strip_prefix("/api/").unwrap_or("");
    let parts: Vec<&str> = rest.split('/').collect();
    let post_ok = matches!(parts.as_slice(), ["works", _, "actions"]);
    let method = req.method().clone();
    if method == Method::POST && post_ok {
        let v = act(app, req, parts[1], &who).await?;
        return Ok(json_reply(StatusCode::OK, &v));
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
    let bus = &app.bus;
    let v = match parts.as_slice() {
        ["stream"] => {
            only(&q, &[])?;
            return crate::live::stream(&app.hub, bus.clone(), None);
        }
        ["works", id, "stream"] => {
            only(&q, &[])?;
            return crate::live::stream(&app.hub, bus.clone(), Some(work_id(id)?));
        }
        ["session"] => {
            only(&q, &[])?;
            json!({"person": who.person, "csrf": app.auth.csrf(&who)})
        }
        ["works"] => {
            only(&q, &["scope", "state", "binding", "after", "limit"])?;
            reads::works(bus, &WorkFilter::from_query(&q)?).await?
        }
        ["works", id] => {
            only(&q, &[])?;
            reads::work(bus, &work_id(id)?).await?
        }
        ["works", id, "actions"] => {
            only(&q, &[])?;
            let r = bus
                .call_typed(&ActionsRequest {
                    work_id: work_id(id)?,
                })
                .await?;
            json!(r)
        }
        ["works", id, "panels"] => {
            only(&q, &[])?;
            json!(
                bus.call_typed(&PanelsRequest {
                    work_id: work_id(id)?
                })
                .await?
            )
        }
        ["works", id, "output"] => {
            only(&q, &[])?;
            match crate::live::running_output(bus, &work_id(id)?).await {
                Some((execution_id, outputs)) => {
                    json!({"execution_id": execution_id, "outputs": outputs})
                }
                None => json!({"execution_id": null, "outputs": []}),
            }
        }
        ["events"] => {
            only(&q, &["after", "limit", "routing"])?;
            let after =
                match q.get("after").filter(|t| !t.is_empty()) {
                    None => 0,
                    Some(t) => t.parse::<i64>().ok().filter(|n| *n >= 0).ok_or_else(|| {
                        bad(format!("after={t:?}: an Event sequence (0 or more)"))
                    })?,
                };
            let routing = match q.get("routing").map(String::as_str) {
                None | Some("" | "false") => false,
                Some("true") => true,
                Some(o) => return Err(bad(format!("routing={o:?}: true or false"))),
            };
            reads::events(bus, after, reads::limit(&q)?, routing).await?
        }
        ["extensions"] => {
            only(&q, &[])?;
            reads::extensions(bus).await?
        }
        ["hosts"] => {
            only(&q, &[])?;
            reads::hosts(bus).await?
        }
        ["config"] => {
            only(&q, &[])?;
            reads::config(bus).await?
        }
        ["route-trace"] => {
            only(&q, &["scope", "sample", "type", "source", "keys"])?;
            let t = TraceAsk::from_query(&q)?
                .ok_or_else(|| bad("give scope, and sample (an Event's sequence) or type"))?;
            reads::trace(bus, &t).await?
        }
        ["asks"] => {
            only(&q, &[])?;
            json!({"asks": reads::open_items(bus).await?})
        }
        ["pages"] => {
            only(&q, &[])?;
            json!(bus.call_typed(&PagesRequest {}).await?)
        }
        ["pages", package, page] => {
            only(&q, &[])?;
            json!(
                bus.call_typed(&PageRequest {
                    package: ident(package)?,
                    page: ident(page)?,
                })
                .await?
            )
        }
        _ => return Err(not_found(format!("no route {path}"))),
    };
    Ok(json_reply(StatusCode::OK, &v))
}

/// A package's or a page's name from a path.
fn ident(s: &str) -> Result<String, ApiError> {
    let ok = !s.is_empty()
        && s.len() <= MAX_ID
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'));
    if !ok {
        return Err(bad(format!("{s:?} is not a name")));
    }
    Ok(s.to_owned())
}

/// The body of `POST /api/works/{id}/actions`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ActBody {
    /// The provider (empty: the one that offers the action).
    #[serde(default)]
    pub provider: Option<String>,
    /// The action.
    pub action: String,
    /// Its input.
    #[serde(default)]
    pub input: Option<Value>,
    /// Its idempotency key (none: a new one).
    #[serde(default)]
    pub key: Option<String>,
}

/// Whether the request says its body is JSON.
fn json_content(req: &Request<Incoming>) -> bool {
    req.headers()
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|m| m.trim().eq_ignore_ascii_case("application/json"))
}

async fn act(app: &App, req: Request<Incoming>, id: &str, who: &Who) -> Answer {
    if !json_content(&req) {
        return Err(fail(
            StatusCode::FORBIDDEN,
            "forbidden",
            "an action must be sent with Content-Type: application/json",
        ));
    }
    let given = req
        .headers()
        .get(CSRF_HEADER)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    app.auth.check_csrf(who, given.as_deref())?;
    let id = work_id(id)?;
    let body = crate::http::read_limited(req.into_body(), MAX_BODY_BYTES, "the body").await?;
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
    let r = app
        .bus
        .call_typed(&ActRequest {
            work_id: id,
            provider: b.provider.unwrap_or_default(),
            action: b.action,
            input: b.input.unwrap_or(Value::Null),
            caller: who.person.clone(),
            key,
        })
        .await?;
    Ok(json!(r))
}
