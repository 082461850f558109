//! The accept loop, the connection limit, and each connection served by hyper's
//! HTTP/1.1 server (keep-alive, `Content-Length` and chunked bodies, `Expect:
//! 100-continue`) within the [`Limits`], until the server stops.

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{watch, OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinSet;
use tokio::time::{sleep_until, timeout, Instant};

use crate::handler::{handle, ConnFlags, Shared};
use crate::http::{linger_close, raw_answer, write, Io};
use crate::{Intake, Limits, Routes};

/// How long a closing connection waits for the peer's remaining bytes.
const LINGER: Duration = Duration::from_secs(2);
/// How long a connection closing because the server stops waits for them.
const LINGER_STOPPING: Duration = Duration::from_millis(100);

/// The HTTP intake server.
pub struct Server;

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

/// hyper's HTTP/1.1 server within `limits`: the head's bounds (431 past them), the
/// header timeout (from the moment a request head is awaited, so it is also the
/// keep-alive idle timeout), keep-alive, and the answer to a peer that half-closes
/// after its request. An answer goes out in one write (head and body copied into one
/// buffer: our answers are small) and without a `Date` header, as before hyper: both
/// measured cheaper per request (docs/benchmarks.md).
fn builder(limits: &Limits) -> http1::Builder {
    let mut b = http1::Builder::new();
    b.timer(TokioTimer::new())
        .keep_alive(true)
        .half_close(true)
        .header_read_timeout(limits.header_timeout)
        .max_headers(limits.max_headers)
        .max_header_size(limits.max_head_bytes)
        .max_buf_size(limits.max_head_bytes.max(MIN_BUF))
        .writev(false)
        .auto_date_header(false);
    b
}

/// hyper's smallest read buffer.
const MIN_BUF: usize = 8192;

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
        let builder = Arc::new(builder(&limits));
        let shared = Arc::new(Shared {
            routes,
            intake,
            limits,
            metrics: crate::metrics::serving(),
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
                                tasks.spawn(connection(stream, remote, slot, Arc::clone(&builder), stop_rx.clone()));
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

/// Past the connection limit: 503 at once, without reading a request.
async fn refuse(mut stream: TcpStream, max: usize) {
    let body = format!("too many connections (at most {max}); retry later\n");
    let bytes = raw_answer(503, &[("Retry-After", "1".to_owned())], &body);
    if write(&mut stream, &bytes, Duration::from_secs(1))
        .await
        .is_ok()
    {
        linger_close(stream, Duration::from_millis(200)).await;
    }
}

/// Whether `buf` holds part of a request head (blank lines before one do not count).
fn head_started(buf: &[u8]) -> bool {
    buf.iter().any(|b| *b != b'\r' && *b != b'\n')
}

/// Serves one connection until it closes, the peer goes quiet, or the server stops
/// (the request in flight is answered, with `Connection: close`, then it closes).
async fn connection(
    stream: TcpStream,
    remote: SocketAddr,
    slot: Slot,
    builder: Arc<http1::Builder>,
    mut stop: watch::Receiver<bool>,
) {
    let shared = Arc::clone(&slot.shared);
    let limits = &shared.limits;
    let flags = Arc::new(ConnFlags::default());
    let service = {
        let (shared, flags) = (Arc::clone(&shared), Arc::clone(&flags));
        hyper::service::service_fn(move |req| {
            handle(Arc::clone(&shared), Arc::clone(&flags), remote, req)
        })
    };
    let io = TokioIo::new(Io::new(stream, limits.body_timeout));
    let mut conn = builder.serve_connection(io, service);
    // When the server stops: a connection whose first request has not reached the
    // service yet is a client about to send one (each webhook its own connection),
    // not an idle keep-alive one; closing it now would answer that delivery with
    // nothing. It gets until its head arrives (the header timeout at most), then
    // the request is answered with `Connection: close` like any other in flight.
    let mut asked: Option<Instant> = None;
    let mut stopping = false;
    let result = loop {
        if asked.is_none() && *stop.borrow_and_update() {
            asked = Some(Instant::now() + limits.header_timeout);
        }
        if let Some(deadline) = asked {
            if !stopping && (flags.started.load(Ordering::Acquire) || Instant::now() >= deadline) {
                stopping = true;
                std::pin::Pin::new(&mut conn).graceful_shutdown();
            }
        }
        let waiting = asked.filter(|_| !stopping);
        tokio::select! {
            r = &mut conn => break r,
            changed = stop.changed(), if asked.is_none() => {
                if changed.is_err() {
                    // The server is gone: nothing will ask to stop any more.
                    asked = Some(Instant::now() + limits.header_timeout);
                }
            }
            () = flags.first.notified(), if waiting.is_some() => {}
            () = sleep_until(waiting.unwrap_or_else(Instant::now)), if waiting.is_some() => {}
        }
    };
    let parts = conn.into_parts();
    let io = parts.io.into_inner();
    let write_stalled = io.write_stalled();
    let mut stream = io.into_inner();
    let linger = if stopping { LINGER_STOPPING } else { LINGER };
    match result {
        Ok(()) => {
            if flags.linger.load(Ordering::Relaxed) {
                linger_close(stream, linger).await;
            }
        }
        Err(e) if e.is_timeout() => {
            // A head was started and not finished in time: 408. A connection quiet
            // since its last answer (or since it opened) is closed without one.
            if head_started(&parts.read_buf) && !write_stalled {
                let why = format!(
                    "the request head did not arrive within {} ms",
                    limits.header_timeout.as_millis()
                );
                tracing::debug!(%remote, status = 408, "{why}");
                shared.metrics.response(408);
                let bytes = raw_answer(408, &[], &format!("{why}\n"));
                if write(&mut stream, &bytes, limits.body_timeout)
                    .await
                    .is_ok()
                {
                    linger_close(stream, linger).await;
                }
            }
        }
        Err(e) if e.is_parse() && !e.is_parse_version_h2() => {
            // hyper answered it: 431 past the head's bounds, else 400.
            let status = if e.is_parse_too_large() { 431 } else { 400 };
            tracing::debug!(%remote, status, error = %e, "a request head refused");
            shared.metrics.response(status);
            linger_close(stream, linger).await;
        }
        Err(e) => tracing::debug!(%remote, error = %e, "connection ended"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blank_lines_do_not_start_a_head() {
        assert!(!head_started(b""));
        assert!(!head_started(b"\r\n\r\n"));
        assert!(head_started(b"\r\nPOST / HT"));
    }
}
