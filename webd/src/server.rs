//! The accept loop: each connection served by hyper's HTTP/1.1 server (keep-alive,
//! a bound on the request head's size and arrival time) within a connection limit,
//! until the server stops; then the requests in flight finish within a grace period.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;
use tokio::sync::{watch, Semaphore};
use tokio::task::JoinSet;

use crate::context::App;

/// The server's bounds.
#[derive(Debug, Clone)]
pub struct Limits {
    /// Open connections at most (past it a connection waits in the backlog).
    pub max_connections: usize,
    /// How long a request head may take to arrive (also the keep-alive idle time).
    pub header_timeout: Duration,
    /// The largest request head, in bytes.
    pub max_head_bytes: usize,
    /// How long the requests in flight may take to finish once the server stops.
    pub grace: Duration,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            max_connections: 256,
            header_timeout: Duration::from_secs(10),
            max_head_bytes: 16 * 1024,
            grace: Duration::from_secs(10),
        }
    }
}

/// Serve the web view and its API on `listener` until `stop` resolves.
pub async fn serve(
    listener: TcpListener,
    app: Arc<App>,
    limits: Limits,
    stop: impl Future<Output = ()>,
) {
    let mut builder = http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .keep_alive(true)
        .header_read_timeout(limits.header_timeout)
        .max_buf_size(limits.max_head_bytes.max(8192));
    let builder = Arc::new(builder);
    let slots = Arc::new(Semaphore::new(limits.max_connections.max(1)));
    let (stop_tx, stop_rx) = watch::channel(false);
    let mut tasks = JoinSet::new();
    tokio::pin!(stop);
    loop {
        // Past the limit, connections wait in the listen backlog.
        let permit = tokio::select! {
            biased;
            () = &mut stop => break,
            p = Arc::clone(&slots).acquire_owned() => match p {
                Ok(p) => p,
                Err(_) => break,
            },
        };
        let accepted = tokio::select! {
            biased;
            () = &mut stop => break,
            Some(_) = tasks.join_next(), if !tasks.is_empty() => continue,
            a = listener.accept() => a,
        };
        let (stream, remote) = match accepted {
            Ok(a) => a,
            Err(e) => {
                tracing::warn!(error = %e, "accept failed");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        let (app, builder, mut stop) = (Arc::clone(&app), Arc::clone(&builder), stop_rx.clone());
        tasks.spawn(async move {
            let _permit = permit;
            let service = hyper::service::service_fn(move |req| {
                crate::app::handle(Arc::clone(&app), remote, req)
            });
            let conn = builder.serve_connection(TokioIo::new(stream), service);
            tokio::pin!(conn);
            let mut stopping = *stop.borrow_and_update();
            if stopping {
                conn.as_mut().graceful_shutdown();
            }
            loop {
                tokio::select! {
                    r = conn.as_mut() => {
                        if let Err(e) = r {
                            tracing::debug!(%remote, error = %e, "connection ended");
                        }
                        break;
                    }
                    _ = stop.changed(), if !stopping => {
                        stopping = true;
                        conn.as_mut().graceful_shutdown();
                    }
                }
            }
        });
    }
    drop(listener);
    let _ = stop_tx.send(true);
    let drained = tokio::time::timeout(limits.grace, async {
        while tasks.join_next().await.is_some() {}
    })
    .await;
    if drained.is_err() {
        tracing::warn!(
            connections = tasks.len(),
            "the grace period passed: closing the connections left"
        );
        tasks.abort_all();
    }
}
