//! One request, as hyper hands it over: what it asks for (a delivery, `/healthz`,
//! `/metrics`, or a refusal decided from its head alone), its body read within its
//! bounds, the [`Intake`]'s answer, and the response.

use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::{Body, Incoming};
use hyper::header::{HeaderName, HeaderValue, CONNECTION, TRANSFER_ENCODING};
use hyper::http::request::Parts;
use hyper::{Request, Response, StatusCode};
use tokio::time::{timeout, timeout_at, Instant};

use crate::metrics::Metrics;
use crate::{Answer, Delivery, Intake, IntakeError, Limits, Routes};

/// How long `/healthz` waits for the intake's answer.
const HEALTH_TIMEOUT: Duration = Duration::from_secs(5);
/// The most a body's buffer reserves before its bytes arrive.
const MAX_RESERVE: usize = 1024 * 1024;

/// What every connection shares.
pub(crate) struct Shared {
    pub routes: Arc<Routes>,
    pub intake: Arc<dyn Intake>,
    pub limits: Limits,
    pub metrics: Arc<Metrics>,
}

/// What the requests of one connection tell the code that closes it.
#[derive(Default)]
pub(crate) struct ConnFlags {
    /// An answer went out with `Connection: close` while the request's body may be
    /// unread: closing must let the peer read it (see [`crate::http::linger_close`]).
    pub linger: AtomicBool,
    /// A request of this connection reached the service: a stop asked for before
    /// then waits for it (see [`crate::server`]'s `connection`).
    pub started: AtomicBool,
    /// Woken when the first request reaches the service.
    pub first: tokio::sync::Notify,
}

/// The response of every request.
pub(crate) type Reply = Response<Full<Bytes>>;

/// What a request asks for, decided from its head alone.
enum Action {
    Deliver {
        route: String,
        owner: String,
        source: String,
    },
    Health,
    Metrics,
    Answer(Answer),
}

/// Why a body could not be read.
enum BodyError {
    TooLarge,
    Timeout,
    Bad(String),
    Closed,
}

fn plain(status: u16, body: impl Into<String>) -> Answer {
    let mut body = body.into();
    body.push('\n');
    Answer::text(status, body)
}

fn too_large(limits: &Limits) -> String {
    format!(
        "the body is larger than the limit of {} bytes",
        limits.max_body_bytes
    )
}

/// The refusal of a request from its framing (hyper has refused already a malformed
/// or conflicting length, and a transfer coding that does not end in chunked).
fn framing(req: &Parts, body: &Incoming, limits: &Limits) -> Option<(u16, String)> {
    let te = req.headers.get_all(TRANSFER_ENCODING);
    if te.iter().next().is_some() {
        let codings: Vec<&[u8]> = te
            .iter()
            .flat_map(|v| v.as_bytes().split(|b| *b == b','))
            .map(|c| c.trim_ascii())
            .filter(|c| !c.is_empty())
            .collect();
        if !(codings.len() == 1 && codings[0].eq_ignore_ascii_case(b"chunked")) {
            return Some((
                501,
                "only the chunked transfer coding is supported".to_owned(),
            ));
        }
    }
    match body.size_hint().exact() {
        Some(n) if usize::try_from(n).map_or(true, |n| n > limits.max_body_bytes) => {
            Some((413, too_large(limits)))
        }
        _ => None,
    }
}

/// The `/metrics` outcome of an extension's answer.
fn outcome_of(status: u16) -> &'static str {
    match status {
        200..=299 => "accepted",
        401 | 403 => "bad_signature",
        404 | 405 => "no_route",
        413 => "too_large",
        400..=499 => "refused",
        503 => "unavailable",
        _ => "failed",
    }
}

fn decide(shared: &Shared, method: &str, path: &str) -> Action {
    let builtin = match path {
        "/healthz" => Some(Action::Health),
        "/metrics" => Some(Action::Metrics),
        _ => None,
    };
    if let Some(action) = builtin {
        if method == "GET" || method == "HEAD" {
            return action;
        }
        let mut a = plain(405, format!("{path} answers GET only"));
        a.headers.push(("Allow".to_owned(), "GET, HEAD".to_owned()));
        return Action::Answer(a);
    }
    if !path.starts_with('/') {
        return Action::Answer(plain(400, "the request target is not a path"));
    }
    match shared.routes.lookup(path) {
        Some(m) if method == "POST" => Action::Deliver {
            route: m.route,
            owner: m.owner,
            source: m.source,
        },
        Some(m) => {
            let mut a = plain(405, format!("{} is a webhook path: POST only", m.route));
            a.headers.push(("Allow".to_owned(), "POST".to_owned()));
            Action::Answer(a)
        }
        None if !shared.routes.is_complete() => {
            let mut a = plain(
                503,
                "the webhook paths are not all known yet (starting up): retry shortly",
            );
            a.headers.push(("Retry-After".to_owned(), "2".to_owned()));
            Action::Answer(a)
        }
        None => Action::Answer(plain(404, format!("no webhook is registered at {path}"))),
    }
}

fn error_answer(e: &IntakeError) -> Answer {
    let mut a = match e {
        IntakeError::Internal(_) => plain(500, "internal error while taking the delivery"),
        e => plain(e.status(), e.to_string()),
    };
    if let IntakeError::Unavailable { retry_after_s }
    | IntakeError::Overloaded { retry_after_s, .. } = e
    {
        a.headers
            .push(("Retry-After".to_owned(), retry_after_s.to_string()));
    }
    a
}

/// The response of `answer`, counted in `/metrics`. `Content-Length` comes from the
/// body, and `Transfer-Encoding` and `Connection` are the server's own: those, and any
/// header hyper cannot send (a line break in a value, a name that is not a token),
/// are dropped. `close` ends the connection after it.
fn respond(shared: &Shared, answer: Answer, close: bool) -> Reply {
    shared.metrics.response(answer.status);
    let status = StatusCode::from_u16(answer.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let mut resp = Response::new(Full::new(Bytes::from(answer.body)));
    *resp.status_mut() = status;
    let headers = resp.headers_mut();
    for (name, value) in answer.headers {
        let reserved = ["content-length", "transfer-encoding", "connection"]
            .iter()
            .any(|r| name.eq_ignore_ascii_case(r));
        if reserved {
            continue;
        }
        if let (Ok(n), Ok(v)) = (
            HeaderName::from_bytes(name.as_bytes()),
            HeaderValue::from_str(&value),
        ) {
            headers.append(n, v);
        }
    }
    if close {
        headers.insert(CONNECTION, HeaderValue::from_static("close"));
    }
    resp
}

/// A refusal that leaves the request's body unread: answer, then close.
fn refuse(shared: &Shared, flags: &ConnFlags, answer: Answer) -> Reply {
    flags.linger.store(true, Ordering::Relaxed);
    respond(shared, answer, true)
}

/// Reads a body, at most `max` bytes of it: past that it stops reading.
async fn read_body(body: &mut Incoming, max: usize) -> Result<Vec<u8>, BodyError> {
    let hint = usize::try_from(body.size_hint().lower()).unwrap_or(max);
    let mut out = Vec::with_capacity(hint.min(max).min(MAX_RESERVE));
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(body_error)?;
        if let Ok(data) = frame.into_data() {
            if out.len().saturating_add(data.len()) > max {
                return Err(BodyError::TooLarge);
            }
            out.extend_from_slice(&data);
        }
    }
    Ok(out)
}

/// A body that broke off (the peer closed or reset) ends the connection without an
/// answer; a malformed chunked body is a 400.
fn body_error(e: hyper::Error) -> BodyError {
    let io = std::error::Error::source(&e).and_then(|s| s.downcast_ref::<io::Error>());
    match io.map(io::Error::kind) {
        Some(io::ErrorKind::InvalidData | io::ErrorKind::InvalidInput) => BodyError::Bad(format!(
            "the chunked body is malformed: {}",
            io.map_or_else(|| e.to_string(), ToString::to_string)
        )),
        _ => {
            tracing::debug!(error = %e, "reading a body");
            BodyError::Closed
        }
    }
}

/// Answers one request of a connection (hyper's service). An error (the peer went
/// away in the middle of a body) closes the connection without an answer.
pub(crate) async fn handle(
    shared: Arc<Shared>,
    flags: Arc<ConnFlags>,
    remote: SocketAddr,
    req: Request<Incoming>,
) -> Result<Reply, io::Error> {
    let (shared, flags) = (&*shared, &*flags);
    if !flags.started.swap(true, Ordering::AcqRel) {
        flags.first.notify_one();
    }
    let limits = &shared.limits;
    let (head, mut body) = req.into_parts();
    if let Some((status, why)) = framing(&head, &body, limits) {
        tracing::debug!(%remote, status, "{why}");
        return Ok(refuse(shared, flags, plain(status, why)));
    }
    let path = head.uri.path();
    let answer = match decide(shared, head.method.as_str(), path) {
        Action::Deliver {
            route,
            owner,
            source,
        } => {
            // Reading the body sends `100 Continue` first when it was asked for.
            let deadline = Instant::now() + limits.body_timeout;
            let read = timeout_at(deadline, read_body(&mut body, limits.max_body_bytes)).await;
            let body = match read.unwrap_or(Err(BodyError::Timeout)) {
                Ok(b) => b,
                Err(e) => {
                    let a = match e {
                        BodyError::Closed => {
                            return Err(io::Error::new(
                                io::ErrorKind::UnexpectedEof,
                                "the peer went away in the middle of a body",
                            ))
                        }
                        BodyError::TooLarge => plain(413, too_large(limits)),
                        BodyError::Timeout => plain(
                            408,
                            format!(
                                "the body did not arrive within {} ms",
                                limits.body_timeout.as_millis()
                            ),
                        ),
                        BodyError::Bad(why) => plain(400, why),
                    };
                    tracing::debug!(%remote, status = a.status, owner, "body refused");
                    return Ok(refuse(shared, flags, a));
                }
            };
            let delivery = Delivery {
                path: path.to_owned(),
                route,
                owner,
                source,
                method: head.method.as_str().to_owned(),
                query: head.uri.query().unwrap_or_default().to_owned(),
                headers: head
                    .headers
                    .iter()
                    .map(|(n, v)| (n.as_str().to_owned(), v.as_bytes().to_vec()))
                    .collect(),
                body,
                remote,
            };
            deliver(shared, delivery).await
        }
        other => {
            let answer = match other {
                Action::Health => {
                    let ok = timeout(HEALTH_TIMEOUT, shared.intake.healthy())
                        .await
                        .unwrap_or(false);
                    let mut a = if ok {
                        plain(200, "ok")
                    } else {
                        plain(503, "unhealthy: deliveries cannot be taken now")
                    };
                    // Which ingressd answered: doctor compares it with the one on the
                    // bus, so a request through the tunnel is known to come back here.
                    a.headers.push((
                        crate::INSTANCE_HEADER.to_owned(),
                        crate::instance().to_owned(),
                    ));
                    a
                }
                Action::Metrics => {
                    let text = shared.intake.metrics(shared.metrics.render()).await;
                    let mut a = Answer::text(200, text);
                    a.headers = vec![(
                        "Content-Type".to_owned(),
                        "text/plain; version=0.0.4; charset=utf-8".to_owned(),
                    )];
                    a
                }
                Action::Answer(a) => a,
                Action::Deliver { .. } => plain(500, "unreachable"),
            };
            // A body nobody reads: answer, then close rather than read it.
            if !body.is_end_stream() {
                return Ok(refuse(shared, flags, answer));
            }
            answer
        }
    };
    Ok(respond(shared, answer, false))
}

async fn deliver(shared: &Shared, delivery: Delivery) -> Answer {
    let owner = delivery.owner.clone();
    let source = delivery.source.clone();
    let path = delivery.path.clone();
    let started = Instant::now();
    shared.metrics.in_flight.fetch_add(1, Ordering::Relaxed);
    let result = timeout(
        shared.limits.intake_timeout,
        shared.intake.deliver(delivery),
    )
    .await;
    shared.metrics.in_flight.fetch_sub(1, Ordering::Relaxed);
    let took = started.elapsed();
    let (outcome, answer) = match result {
        Ok(Ok(a)) if (200..=599).contains(&a.status) => (outcome_of(a.status), a),
        Ok(Ok(a)) => {
            tracing::warn!(
                owner,
                status = a.status,
                "the extension answered an invalid status"
            );
            (
                "internal",
                plain(500, "the extension answered an invalid status"),
            )
        }
        Ok(Err(e)) => {
            tracing::info!(owner, path, error = %e, "delivery refused");
            (e.outcome(), error_answer(&e))
        }
        Err(_) => {
            tracing::warn!(owner, path, "the intake did not answer in time");
            let mut a = plain(503, "the delivery was not taken in time; retry later");
            a.headers.push(("Retry-After".to_owned(), "5".to_owned()));
            ("timeout", a)
        }
    };
    shared.metrics.delivery(&owner, &source, outcome, took);
    answer
}
