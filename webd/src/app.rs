//! One request, from its first line to its answer: what needs no sign-in
//! (`/healthz`, `/api/openapi.json`, `/static/…`, `/login`), then the person it
//! comes from ([`crate::auth`]), then the API (`/api/…`, [`crate::api`]) or a page
//! ([`crate::ui`]). `/metrics` (no sign-in, as ingressd's) is the whole suite's, in
//! Prometheus text format. Also webd's own bus service: `web.status`,
//! `web.metrics`, and the topics it passes to the live streams ([`crate::live`]).

use std::convert::Infallible;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use busapi::web::{StatusRequest, WebStatus, HEALTH_PATH};
use busapi::Call;
use hyper::body::Incoming;
use hyper::header::{HeaderValue, CACHE_CONTROL, SET_COOKIE};
use hyper::{Method, Request, StatusCode};
use protocol::{BoxFuture, Handler, Peer, Reply as RpcReply, Request as RpcRequest, RpcError};
use serde_json::Value;

use crate::context::App;
use crate::http::{error_reply, fail, full, params, respond, see_other, ApiError, Reply};
use crate::live::Hub;

/// The stylesheet of every page.
pub const STYLE: &str = include_str!("../static/style.css");
/// The one script of every page.
pub const SCRIPT: &str = include_str!("../static/app.js");
/// The largest sign-in form.
pub const MAX_FORM_BYTES: usize = 4096;

/// Answer one request from `remote`.
pub async fn handle(
    app: Arc<App>,
    remote: SocketAddr,
    req: Request<Incoming>,
) -> Result<Reply, Infallible> {
    let path = req.uri().path().to_owned();
    let api = path.starts_with("/api/");
    Ok(match answer(&app, remote.ip(), req).await {
        Ok(r) => r,
        Err(e) => {
            tracing::debug!(status = e.status.as_u16(), code = %e.code, %path, "{}", e.message);
            if api {
                error_reply(&e)
            } else if e.status == StatusCode::UNAUTHORIZED {
                see_other(&format!(
                    "/login?next={}",
                    crate::http::percent_encode(&path)
                ))
            } else {
                crate::ui::error_page(&e)
            }
        }
    })
}

async fn answer(app: &Arc<App>, remote: IpAddr, req: Request<Incoming>) -> Result<Reply, ApiError> {
    let path = req.uri().path();
    let get = req.method() == Method::GET;
    match path {
        p if p == HEALTH_PATH && get => {
            return Ok(respond(
                StatusCode::OK,
                "text/plain; charset=utf-8",
                full("ok\n"),
            ))
        }
        "/api/openapi.json" if get => {
            return Ok(respond(
                StatusCode::OK,
                "application/json",
                full(crate::OPENAPI),
            ))
        }
        "/static/style.css" if get => return Ok(asset("text/css; charset=utf-8", STYLE)),
        "/static/app.js" if get => return Ok(asset("text/javascript; charset=utf-8", SCRIPT)),
        "/login" => return login(app, remote, req).await,
        "/metrics" if get => {
            let own = own_metrics(app.hub.streams(), app.auth.sessions());
            let text =
                daemon::scrape::gather(&app.bus, "webd", own, daemon::scrape::SCRAPE_WAIT).await;
            return Ok(respond(
                StatusCode::OK,
                "text/plain; version=0.0.4; charset=utf-8",
                full(text),
            ));
        }
        _ => {}
    }
    let who = app.auth.who(req.headers(), remote)?;
    let Some(who) = who else {
        return Err(fail(
            StatusCode::UNAUTHORIZED,
            "unauthorized",
            "sign in: send Authorization: Bearer <token> (open-conduit web login prints one), or sign in on /login",
        ));
    };
    if path.starts_with("/api/") {
        return crate::api::route(app, req, who).await;
    }
    if path == "/logout" && req.method() == Method::POST {
        let form = read_form(req).await?;
        app.auth
            .check_csrf(&who, form.get("csrf").map(String::as_str))?;
        let mut r = see_other("/login");
        set_cookie(&mut r, &app.auth.logout_cookie(false));
        return Ok(r);
    }
    crate::ui::route(app, req, &who).await
}

fn asset(content_type: &'static str, text: &'static str) -> Reply {
    let mut r = respond(StatusCode::OK, content_type, full(text));
    r.headers_mut()
        .insert(CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    r
}

fn set_cookie(r: &mut Reply, value: &str) {
    if let Ok(v) = HeaderValue::from_str(value) {
        r.headers_mut().append(SET_COOKIE, v);
    }
}

async fn read_form(
    req: Request<Incoming>,
) -> Result<std::collections::HashMap<String, String>, ApiError> {
    let body = crate::http::read_limited(req.into_body(), MAX_FORM_BYTES, "the form").await?;
    params(&String::from_utf8_lossy(&body), MAX_FORM_BYTES)
}

/// Where to go after signing in: a path of this site only.
fn next_path(next: Option<&String>) -> String {
    match next {
        Some(n) if n.starts_with('/') && !n.starts_with("//") && !n.starts_with("/\\") => n.clone(),
        _ => "/works".to_owned(),
    }
}

/// `GET /login`: the form; `POST /login` with `token` (and `next`): the session.
async fn login(app: &Arc<App>, remote: IpAddr, req: Request<Incoming>) -> Result<Reply, ApiError> {
    let q = crate::http::query(req.uri().query().unwrap_or(""))?;
    if req.method() == Method::GET {
        return Ok(crate::ui::login_page(&next_path(q.get("next")), None));
    }
    if req.method() != Method::POST {
        return Err(fail(
            StatusCode::METHOD_NOT_ALLOWED,
            "method_not_allowed",
            "/login takes GET or POST",
        ));
    }
    let tls = app.auth.tls(req.headers(), remote);
    let form = read_form(req).await?;
    let next = next_path(form.get("next"));
    let token = form.get("token").map(String::as_str).unwrap_or("");
    match app.auth.login(token, tls) {
        Ok((person, cookie)) => {
            tracing::info!(%person, "signed in");
            let mut r = see_other(&next);
            set_cookie(&mut r, &cookie);
            Ok(r)
        }
        Err(e) if e.status == StatusCode::UNAUTHORIZED => {
            let mut r = crate::ui::login_page(&next, Some(&e.message));
            *r.status_mut() = StatusCode::UNAUTHORIZED;
            Ok(r)
        }
        Err(e) => Err(e),
    }
}

/// webd's own samples (every family `oc_webd_…`): its streams and sessions, and
/// its bus call times.
pub fn own_metrics(streams: u64, sessions: u64) -> String {
    use daemon::metrics::{Kind, Text};
    let mut t = Text::new();
    t.single(
        "oc_webd_streams",
        Kind::Gauge,
        "Live-update streams (Server-Sent Events) open now.",
        streams,
    );
    t.single(
        "oc_webd_sessions",
        Kind::Gauge,
        "Signed-in sessions held now.",
        sessions,
    );
    daemon::metrics::render_call_times(&mut t, "webd");
    t.into_string()
}

/// webd's bus service: `web.status`, `web.metrics`, and the topics for the live
/// streams.
pub struct Service {
    /// The hub the topics go to.
    pub hub: Arc<Hub>,
    /// The app, once it is made (the bus comes first).
    pub app: std::sync::OnceLock<Arc<App>>,
    /// Where webd listens.
    pub listen: String,
}

impl Handler for Service {
    fn call(&self, request: RpcRequest) -> BoxFuture<Result<RpcReply, RpcError>> {
        let status = WebStatus {
            listen: self.listen.clone(),
            url: format!("http://{}/", self.listen),
            streams: self.hub.streams(),
            sessions: self.app.get().map_or(0, |a| a.auth.sessions()),
        };
        Box::pin(async move {
            match request.method.as_str() {
                m if m == StatusRequest::METHOD => protocol::reply(&status),
                m if m == busapi::web::MetricsRequest::METHOD => {
                    protocol::reply(&busapi::metrics::MetricsText {
                        text: own_metrics(status.streams, status.sessions),
                    })
                }
                other => Err(RpcError::method_not_found(other)),
            }
        })
    }

    fn notify(&self, _peer: &Peer, method: &str, _params: Value) {
        self.hub.nudge(method);
    }
}
