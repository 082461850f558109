//! The accept loop and one connection's requests.

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{watch, OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinSet;
use tokio::time::{timeout, Instant};

use crate::http::{response, BodyError, Conn, Head, HeadError};
use crate::metrics::Metrics;
use crate::{Answer, Delivery, Intake, IntakeError, Limits, Routes};

/// How long a closing connection waits for the peer's remaining bytes.
const LINGER: Duration = Duration::from_secs(2);
/// How long `/healthz` waits for the intake's answer.
const HEALTH_TIMEOUT: Duration = Duration::from_secs(5);

/// The HTTP intake server.
pub struct Server;

struct Shared {
    routes: Arc<Routes>,
    intake: Arc<dyn Intake>,
    limits: Limits,
    metrics: Metrics,
}

/// Counts an open connection and holds its slot until dropped.
struct Slot {
    shared: Arc<Shared>,
    _permit: OwnedSemaphorePermit,
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.shared
            .metrics
            .connections_open
            .fetch_sub(1, Ordering::Relaxed);
    }
}

impl Server {
    /// Serves HTTP on `listener` until `stop` resolves; then stops accepting, lets the
    /// requests in flight finish (within `limits.grace`), closes every connection and
    /// returns. Errors only when the listener cannot be used at all.
    pub async fn serve(
        listener: TcpListener,
        routes: Arc<Routes>,
        intake: Arc<dyn Intake>,
        limits: Limits,
        stop: impl Future<Output = ()>,
    ) -> io::Result<()> {
        let shared = Arc::new(Shared {
            routes,
            intake,
            limits,
            metrics: Metrics::default(),
        });
        let slots = Arc::new(Semaphore::new(shared.limits.max_connections.max(1)));
        let (stop_tx, stop_rx) = watch::channel(false);
        let mut tasks = JoinSet::new();
        tokio::pin!(stop);
        loop {
            tokio::select! {
                biased;
                () = &mut stop => break,
                Some(_) = tasks.join_next(), if !tasks.is_empty() => {}
                accepted = listener.accept() => match accepted {
                    Ok((stream, remote)) => {
                        let _ = stream.set_nodelay(true);
                        shared.metrics.connections_total.fetch_add(1, Ordering::Relaxed);
                        match Arc::clone(&slots).try_acquire_owned() {
                            Ok(permit) => {
                                shared.metrics.connections_open.fetch_add(1, Ordering::Relaxed);
                                let slot = Slot { shared: Arc::clone(&shared), _permit: permit };
                                tasks.spawn(connection(stream, remote, slot, stop_rx.clone()));
                            }
                            Err(_) => {
                                shared.metrics.connections_refused.fetch_add(1, Ordering::Relaxed);
                                shared.metrics.response(503);
                                let max = shared.limits.max_connections;
                                tasks.spawn(refuse(stream, max));
                            }
                        }
                    }
                    Err(e) => {
                        // Out of descriptors, say: keep serving the connections we have.
                        tracing::warn!(error = %e, "accept failed");
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                },
            }
        }
        drop(listener);
        let _ = stop_tx.send(true);
        let in_flight = tasks.len();
        if in_flight > 0 {
            tracing::info!(
                connections = in_flight,
                "stopping: finishing the requests in flight"
            );
        }
        let drained = timeout(shared.limits.grace, async {
            while tasks.join_next().await.is_some() {}
        })
        .await;
        if drained.is_err() {
            tracing::warn!(
                connections = tasks.len(),
                grace_ms = shared.limits.grace.as_millis() as u64,
                "the grace period passed: closing the connections left"
            );
            tasks.abort_all();
            while tasks.join_next().await.is_some() {}
        }
        Ok(())
    }
}

async fn refuse(stream: TcpStream, max: usize) {
    let mut conn = Conn::new(stream);
    let body = format!("too many connections (at most {max}); retry later\n");
    let bytes = response(503, &retry_after(1), body.as_bytes(), true, false);
    if conn.write(&bytes, Duration::from_secs(1)).await.is_ok() {
        conn.linger_close(Duration::from_millis(200)).await;
    }
}

fn text() -> (String, String) {
    (
        "Content-Type".to_owned(),
        "text/plain; charset=utf-8".to_owned(),
    )
}

fn retry_after(secs: u32) -> Vec<(String, String)> {
    vec![text(), ("Retry-After".to_owned(), secs.to_string())]
}

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

#[derive(Clone, Copy, PartialEq, Eq)]
enum Framing {
    None,
    Length(usize),
    Chunked,
}

fn framing(head: &Head, limits: &Limits) -> Result<Framing, (u16, String)> {
    let te: Vec<&[u8]> = head.values("transfer-encoding").collect();
    let mut lengths = head
        .values("content-length")
        .flat_map(|v| v.split(|b| *b == b','))
        .map(|v| v.trim_ascii());
    if !te.is_empty() {
        if lengths.next().is_some() {
            return Err((
                400,
                "both Transfer-Encoding and Content-Length are set".to_owned(),
            ));
        }
        let codings: Vec<&[u8]> = te
            .iter()
            .flat_map(|v| v.split(|b| *b == b','))
            .map(|c| c.trim_ascii())
            .filter(|c| !c.is_empty())
            .collect();
        return if codings.len() == 1 && codings[0].eq_ignore_ascii_case(b"chunked") {
            Ok(Framing::Chunked)
        } else {
            Err((
                501,
                "only the chunked transfer coding is supported".to_owned(),
            ))
        };
    }
    let mut length: Option<u64> = None;
    for v in lengths {
        let n = std::str::from_utf8(v)
            .ok()
            .filter(|s| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()))
            .and_then(|s| s.parse::<u64>().ok())
            .ok_or_else(|| (400, "Content-Length is not a number".to_owned()))?;
        if length.is_some_and(|l| l != n) {
            return Err((400, "Content-Length values disagree".to_owned()));
        }
        length = Some(n);
    }
    match length {
        None | Some(0) => Ok(Framing::None),
        Some(n) => match usize::try_from(n) {
            Ok(n) if n <= limits.max_body_bytes => Ok(Framing::Length(n)),
            _ => Err((413, too_large(limits))),
        },
    }
}

fn too_large(limits: &Limits) -> String {
    format!(
        "the body is larger than the limit of {} bytes",
        limits.max_body_bytes
    )
}

/// Splits a request target into path and query; an absolute-form target loses its
/// scheme and authority.
fn split_target(target: &str) -> (String, String) {
    let mut t = target;
    for scheme in ["http://", "https://"] {
        if let Some(rest) = t.strip_prefix(scheme) {
            t = rest.find('/').map_or("/", |i| &rest[i..]);
        }
    }
    match t.split_once('?') {
        Some((p, q)) => (p.to_owned(), q.to_owned()),
        None => (t.to_owned(), String::new()),
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

fn plain(status: u16, body: impl Into<String>) -> Answer {
    let mut body = body.into();
    body.push('\n');
    Answer::text(status, body)
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

async fn connection(
    stream: TcpStream,
    remote: SocketAddr,
    slot: Slot,
    mut stop: watch::Receiver<bool>,
) {
    let shared = Arc::clone(&slot.shared);
    let limits = &shared.limits;
    let mut conn = Conn::new(stream);
    loop {
        let head = match conn.read_head(limits, &mut stop).await {
            Ok(h) => h,
            Err(HeadError::Idle) => return,
            Err(HeadError::Reject(status, why)) => {
                tracing::debug!(%remote, status, "{why}");
                finish(conn, &shared, &plain(status, why), true, false).await;
                return;
            }
        };
        let head_only = head.method == "HEAD";
        let mut close = if head.minor == 0 {
            !head.has_token("connection", "keep-alive")
        } else {
            head.has_token("connection", "close")
        };
        let framing = match framing(&head, limits) {
            Ok(f) => f,
            Err((status, why)) => {
                tracing::debug!(%remote, status, "{why}");
                finish(conn, &shared, &plain(status, why), true, head_only).await;
                return;
            }
        };
        let (path, query) = split_target(&head.target);
        let answer = match decide(&shared, &head.method, &path) {
            Action::Deliver {
                route,
                owner,
                source,
            } => {
                if head.minor == 1 && head.has_token("expect", "100-continue") {
                    let _ = conn
                        .write(b"HTTP/1.1 100 Continue\r\n\r\n", limits.body_timeout)
                        .await;
                }
                let deadline = Instant::now() + limits.body_timeout;
                let body = match framing {
                    Framing::None => Ok(Vec::new()),
                    Framing::Length(n) => conn.read_body(n, deadline).await,
                    Framing::Chunked => conn.read_chunked(limits.max_body_bytes, deadline).await,
                };
                let body = match body {
                    Ok(b) => b,
                    Err(e) => {
                        let a = match e {
                            BodyError::Closed => return,
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
                        finish(conn, &shared, &a, true, false).await;
                        return;
                    }
                };
                let delivery = Delivery {
                    path,
                    route,
                    owner,
                    source,
                    method: head.method,
                    query,
                    headers: head.headers,
                    body,
                    remote,
                };
                deliver(&shared, delivery).await
            }
            other => {
                // A body nobody reads: answer, then close rather than read it.
                if framing != Framing::None {
                    close = true;
                }
                match other {
                    Action::Health => {
                        let ok = timeout(HEALTH_TIMEOUT, shared.intake.healthy())
                            .await
                            .unwrap_or(false);
                        let mut a = if ok {
                            plain(200, "ok")
                        } else {
                            plain(503, "unhealthy: deliveries cannot be taken now")
                        };
                        // Which ingressd answered: doctor compares it with the one on
                        // the bus, so a request through the tunnel is known to come
                        // back here.
                        a.headers.push((
                            crate::INSTANCE_HEADER.to_owned(),
                            crate::instance().to_owned(),
                        ));
                        a
                    }
                    Action::Metrics => {
                        let mut a = Answer::text(200, shared.metrics.render());
                        a.headers = vec![(
                            "Content-Type".to_owned(),
                            "text/plain; version=0.0.4; charset=utf-8".to_owned(),
                        )];
                        a
                    }
                    Action::Answer(a) => a,
                    Action::Deliver { .. } => plain(500, "unreachable"),
                }
            }
        };
        if *stop.borrow() {
            close = true;
        }
        shared.metrics.response(answer.status);
        let bytes = response(
            answer.status,
            &answer.headers,
            &answer.body,
            close,
            head_only,
        );
        if conn.write(&bytes, limits.body_timeout).await.is_err() {
            return;
        }
        if close {
            // Stopping: the peer has its answer; do not hold the stop for its close.
            let linger = if *stop.borrow() {
                Duration::from_millis(100)
            } else {
                LINGER
            };
            conn.linger_close(linger).await;
            return;
        }
    }
}

/// Writes a final answer and closes.
async fn finish(mut conn: Conn, shared: &Shared, answer: &Answer, close: bool, head_only: bool) {
    shared.metrics.response(answer.status);
    let bytes = response(
        answer.status,
        &answer.headers,
        &answer.body,
        close,
        head_only,
    );
    if conn.write(&bytes, shared.limits.body_timeout).await.is_ok() {
        conn.linger_close(LINGER).await;
    }
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
