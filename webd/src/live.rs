//! Live updates: the bus's nudges, passed to the browser as Server-Sent Events.
//!
//! webd receives storaged's, extrunner's and the configuration's topics
//! (`event.accepted`, `work.changed`, `ext.state`, `config.applied`) on the bus and
//! fans each out to every open stream ([`Hub`]). A stream gathers the nudges of a
//! quarter second into one `changed` event naming their topics, on which a page
//! reads itself again; nothing polls while nothing changes. A Work's stream also
//! carries its running attempt's output (`output`): while an attempt runs and the
//! page is open, webd asks the executor for the output's tail (`ext.live`) each
//! second and sends it when it grew. The streams end when webd stops; the browser's
//! `EventSource` connects again by itself (`retry:`), to the next webd.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use busapi::ext::LiveRequest;
use busapi::store::ExecutionsRequest;
use bytes::Bytes;
use daemon::bus::Bus;
use hyper::StatusCode;
use serde_json::json;
use tokio::sync::{broadcast, mpsc, watch};

use crate::http::{fail, respond, ApiError, Body, ChannelBody, Reply};

/// The topics a page is told of.
pub const TOPICS: &[&str] = &[
    busapi::topic::EVENT_ACCEPTED,
    busapi::topic::WORK_CHANGED,
    busapi::topic::EXT_STATE,
    busapi::topic::CONFIG_APPLIED,
];

/// Streams open at most; past it a stream is refused 503.
pub const MAX_STREAMS: u64 = 64;
/// How long nudges gather before a stream sends one `changed`.
pub const GATHER: Duration = Duration::from_millis(250);
/// A comment sent on a quiet stream so proxies keep it open.
pub const KEEPALIVE: Duration = Duration::from_secs(15);
/// How often a Work's stream reads its running attempt's output.
pub const OUTPUT_EVERY: Duration = Duration::from_secs(1);
/// The tail of each output a Work's stream sends (bytes).
pub const OUTPUT_TAIL: u64 = 16 * 1024;
/// What the browser waits before it connects again (milliseconds).
pub const RETRY_MS: u64 = 1000;

/// The nudges, fanned out to the streams.
pub struct Hub {
    tx: broadcast::Sender<&'static str>,
    open: AtomicU64,
    stop: watch::Receiver<bool>,
}

impl Hub {
    /// A hub whose streams end when `stop` turns true.
    pub fn new(stop: watch::Receiver<bool>) -> Hub {
        let (tx, _) = broadcast::channel(256);
        Hub {
            tx,
            open: AtomicU64::new(0),
            stop,
        }
    }

    /// A topic arrived from the bus.
    pub fn nudge(&self, topic: &str) {
        if let Some(t) = TOPICS.iter().find(|t| **t == topic) {
            let _ = self.tx.send(t);
        }
    }

    /// Streams open now.
    pub fn streams(&self) -> u64 {
        self.open.load(Ordering::Relaxed)
    }
}

struct Open(Arc<Hub>);

impl Drop for Open {
    fn drop(&mut self) {
        self.0.open.fetch_sub(1, Ordering::Relaxed);
    }
}

fn frame(event: &str, data: &serde_json::Value) -> Bytes {
    Bytes::from(format!("event: {event}\ndata: {data}\n\n"))
}

/// Open a stream: every page's nudges, and with `work`, that Work's running output.
pub fn stream(hub: &Arc<Hub>, bus: Bus, work: Option<String>) -> Result<Reply, ApiError> {
    if hub.open.fetch_add(1, Ordering::Relaxed) >= MAX_STREAMS {
        hub.open.fetch_sub(1, Ordering::Relaxed);
        return Err(fail(
            StatusCode::SERVICE_UNAVAILABLE,
            "overloaded",
            format!("{MAX_STREAMS} live streams are open already (the most webd keeps)"),
        ));
    }
    let open = Open(Arc::clone(hub));
    let mut rx = hub.tx.subscribe();
    let mut stop = hub.stop.clone();
    let (tx, body_rx) = mpsc::channel::<Bytes>(16);
    tokio::spawn(async move {
        let _open = open;
        let hello = format!(
            "retry: {RETRY_MS}\nevent: hello\ndata: {}\n\n",
            json!({"work_id": work})
        );
        if tx.send(Bytes::from(hello)).await.is_err() {
            return;
        }
        let mut pending: Vec<&'static str> = Vec::new();
        // When the nudges gathered so far go out: GATHER after the first of them.
        let mut due: Option<tokio::time::Instant> = None;
        let mut keepalive = tokio::time::interval(KEEPALIVE);
        let mut output = tokio::time::interval(OUTPUT_EVERY);
        let mut last_sizes: Vec<(String, u64)> = Vec::new();
        if *stop.borrow_and_update() {
            return;
        }
        loop {
            tokio::select! {
                r = stop.changed() => if r.is_err() || *stop.borrow() { break },
                () = tx.closed() => break,
                t = rx.recv() => match t {
                    Ok(t) => {
                        if !pending.contains(&t) {
                            pending.push(t);
                        }
                        due.get_or_insert_with(|| tokio::time::Instant::now() + GATHER);
                    }
                    Err(broadcast::error::RecvError::Lagged(_)) => {
                        pending.push(busapi::topic::WORK_CHANGED);
                        due.get_or_insert_with(|| tokio::time::Instant::now() + GATHER);
                    }
                    Err(broadcast::error::RecvError::Closed) => break,
                },
                () = sleep_until_due(due), if due.is_some() => {
                    due = None;
                    let topics = std::mem::take(&mut pending);
                    if tx.send(frame("changed", &json!({"topics": topics}))).await.is_err() {
                        break;
                    }
                }
                _ = keepalive.tick() => {
                    if tx.send(Bytes::from_static(b": keepalive\n\n")).await.is_err() {
                        break;
                    }
                }
                _ = output.tick(), if work.is_some() => {
                    let Some(id) = work.as_deref() else { continue };
                    if let Some(out) = running_output(&bus, id).await {
                        let sizes: Vec<(String, u64)> = out.1.iter()
                            .map(|o| (o["name"].as_str().unwrap_or("").to_owned(), o["size"].as_u64().unwrap_or(0)))
                            .collect();
                        if sizes != last_sizes {
                            last_sizes = sizes;
                            let data = json!({"execution_id": out.0, "outputs": out.1});
                            if tx.send(frame("output", &data)).await.is_err() {
                                break;
                            }
                        }
                    }
                }
            }
        }
    });
    let mut r = respond(
        StatusCode::OK,
        "text/event-stream",
        Body::new(ChannelBody(body_rx)),
    );
    r.headers_mut().insert(
        "x-accel-buffering",
        hyper::header::HeaderValue::from_static("no"),
    );
    Ok(r)
}

/// The running attempt of Work `id` and its outputs' tails (as text), if it runs.
pub async fn running_output(bus: &Bus, id: &str) -> Option<(String, Vec<serde_json::Value>)> {
    let ex = bus
        .call_typed(&ExecutionsRequest {
            work_id: Some(id.to_owned()),
            state: Some("running".into()),
            limit: 1,
            ..ExecutionsRequest::default()
        })
        .await
        .ok()?;
    let exec = ex.executions.into_iter().next()?;
    let live = bus
        .call_typed(&LiveRequest {
            execution_id: exec.id.clone(),
            tail: OUTPUT_TAIL,
        })
        .await
        .ok()?;
    let outputs = live
        .outputs
        .iter()
        .map(|o| {
            json!({"name": o.name, "media_type": o.media_type, "size": o.size,
                   "text": String::from_utf8_lossy(&o.tail)})
        })
        .collect();
    Some((exec.id, outputs))
}

/// Sleep until `due` (forever without one: the branch is off then).
async fn sleep_until_due(due: Option<tokio::time::Instant>) {
    match due {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}
