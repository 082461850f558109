//! `open-conduit-ingressd`: arguments, start-up and the main loop.
//!
//! Until the bus-backed intake is wired (the owning extension's `webhook.handle` through
//! extrunner, then storaged's `store.events_accept`), this binary serves with
//! [`NotWired`]: every delivery is answered 503 "the extension path is not wired yet"
//! with `Retry-After: 5`, and `/healthz` answers 503. No path is registered yet, so
//! every webhook path is 404.

use std::net::SocketAddr;
use std::sync::Arc;

use clap::Parser;
use daemon::{Activation, LogTarget, Notifier, Signal, Signals};
use tokio::net::TcpListener;

use crate::{Answer, BoxFuture, Delivery, Intake, IntakeError, Limits, Routes, Server};

/// The Open Conduit ingress daemon: HTTP webhook intake.
#[derive(Parser, Debug)]
#[command(name = "open-conduit-ingressd", version)]
pub struct Args {
    /// The address to listen on when systemd passes no socket named `http`.
    #[arg(long, default_value = "127.0.0.1:8420")]
    pub listen: SocketAddr,
    /// Open connections at most.
    #[arg(long, default_value_t = 1024)]
    pub max_connections: usize,
    /// Where logs go: auto (journald when started by it), journald or stderr.
    #[arg(long, default_value = "auto")]
    pub log: LogTarget,
}

/// The intake until the bus is wired: every delivery is 503, and it is never healthy.
#[derive(Debug, Default)]
pub struct NotWired;

impl Intake for NotWired {
    fn deliver(&self, _d: Delivery) -> BoxFuture<'_, Result<Answer, IntakeError>> {
        Box::pin(async {
            let mut answer = Answer::text(503, "the extension path is not wired yet\n");
            answer
                .headers
                .push(("Retry-After".to_owned(), "5".to_owned()));
            Ok(answer)
        })
    }

    fn healthy(&self) -> BoxFuture<'_, bool> {
        Box::pin(async { false })
    }
}

/// ingressd's main: returns the exit status.
pub fn main<I: IntoIterator<Item = String>>(args: I) -> i32 {
    let args: Args = match daemon::parse_args(args) {
        Ok(a) => a,
        Err(status) => return status,
    };
    daemon::run_daemon(
        "open-conduit-ingressd",
        args.log,
        daemon::Flavor::MultiThread(0),
        |notifier, activation| run(args, notifier, activation),
    )
}

async fn listen(args: &Args, activation: &mut Activation) -> Result<TcpListener, String> {
    match activation.take_tcp_listener("http") {
        Ok(Some(l)) => {
            let l = TcpListener::from_std(l).map_err(|e| format!("the passed socket: {e}"))?;
            tracing::info!("serving on the socket systemd passed");
            return Ok(l);
        }
        Ok(None) => {}
        Err(e) => return Err(e.to_string()),
    }
    let l = TcpListener::bind(args.listen)
        .await
        .map_err(|e| format!("bind {}: {e}", args.listen))?;
    tracing::info!(listen = %args.listen, "serving on a socket of its own");
    Ok(l)
}

async fn run(args: Args, notifier: Notifier, mut activation: Activation) -> Result<(), String> {
    let mut signals = Signals::new().map_err(|e| format!("signals: {e}"))?;
    let listener = listen(&args, &mut activation).await?;
    let limits = Limits {
        max_connections: args.max_connections,
        ..Limits::default()
    };
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let routes = Arc::new(Routes::new());
    let mut server = tokio::spawn(Server::serve(
        listener,
        routes,
        Arc::new(NotWired),
        limits,
        async move {
            let _ = stop_rx.await;
        },
    ));
    let _ = notifier.ready();
    let _ = notifier.status("serving HTTP; the extension path is not wired yet");
    let mut watchdog = notifier.watchdog_ticker();
    let mut stop_tx = Some(stop_tx);
    loop {
        tokio::select! {
            done = &mut server => {
                return match done {
                    Ok(Ok(())) => Ok(()),
                    Ok(Err(e)) => Err(format!("serving: {e}")),
                    Err(e) => Err(format!("the server task: {e}")),
                };
            }
            _ = daemon::notify::tick(&mut watchdog) => {
                let _ = notifier.watchdog();
            }
            signal = signals.next(), if stop_tx.is_some() => match signal {
                Signal::Stop => {
                    let _ = notifier.stopping();
                    tracing::info!("stopping: finishing the requests in flight");
                    if let Some(tx) = stop_tx.take() {
                        let _ = tx.send(());
                    }
                }
                Signal::Reload => {
                    let _ = notifier.reloading();
                    tracing::info!("reload asked: ingressd has no configuration to reload yet");
                    let _ = notifier.ready();
                }
            },
        }
    }
}
