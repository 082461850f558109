//! `open-conduit-ingressd`: arguments, start-up and the main loop.
//!
//! It joins the bus as the `ingress` service, fetches the webhook paths from extrunner
//! (waiting up to [`FIRST_ROUTES_WAIT`] before it serves, so connections queued while it
//! restarted meet the paths), and serves HTTP with the [`BusIntake`]: each delivery goes
//! through extrunner to its extension and to storaged before it is answered.

use std::net::SocketAddr;
use std::sync::Arc;

use clap::Parser;
use daemon::{Activation, LogTarget, Notifier, Signal, Signals};

use crate::intake::{follow_routes, refresh_routes, BusIntake, Service};
use crate::{Limits, Routes, Server};
use daemon::bus::{Bus, BusOptions};
use std::path::PathBuf;
use std::time::Duration;

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
    /// How long a request head may take to arrive, in milliseconds.
    #[arg(long, default_value_t = 10_000)]
    pub header_timeout_ms: u64,
    /// How long a request body may take to arrive, in milliseconds.
    #[arg(long, default_value_t = 30_000)]
    pub body_timeout_ms: u64,
    /// The bus socket.
    #[arg(long, env = "OPEN_CONDUIT_BUS", default_value = daemon::bus::DEFAULT_BUS_SOCKET)]
    pub bus: PathBuf,
    /// Where logs go: auto (journald when started by it), journald or stderr.
    #[arg(long, default_value = "auto")]
    pub log: LogTarget,
}

/// How long ingressd waits for the webhook paths before it starts serving.
pub const FIRST_ROUTES_WAIT: Duration = Duration::from_secs(3);

/// ingressd's main: returns the exit status.
pub fn main<I: IntoIterator<Item = String>>(args: I) -> i32 {
    let args: Args = match daemon::parse_args(args) {
        Ok(a) => a,
        Err(status) => return status,
    };
    daemon::run_daemon(
        "open-conduit-ingressd",
        args.log,
        daemon::Flavor::Tunable,
        |notifier, activation| run(args, notifier, activation),
    )
}

async fn run(args: Args, notifier: Notifier, mut activation: Activation) -> Result<(), String> {
    let mut signals = Signals::new().map_err(|e| format!("signals: {e}"))?;
    let listener = activation.tcp_listener_or_bind("http", args.listen).await?;
    let local = listener
        .local_addr()
        .map(|a| a.to_string())
        .unwrap_or_else(|_| "the passed socket".to_owned());
    let limits = Limits {
        max_connections: args.max_connections,
        header_timeout: Duration::from_millis(args.header_timeout_ms.max(1)),
        body_timeout: Duration::from_millis(args.body_timeout_ms.max(1)),
        ..Limits::default()
    };
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let routes = Arc::new(Routes::pending());
    let service = Service::new(routes.clone());
    service.set_listen(local.clone());
    let bus = Bus::start(
        BusOptions::service(
            &args.bus,
            "ingressd",
            &["ingress"],
            Arc::new(service.clone()),
        )
        .with_topics(&[busapi::topic::EXT_STATE]),
    );
    let _ = notifier.status("fetching the webhook paths from extrunner");
    match tokio::time::timeout(FIRST_ROUTES_WAIT, refresh_routes(&bus, &routes, Some(&service.sources()))).await {
        Ok(Ok(n)) => tracing::info!(paths = n, complete = routes.is_complete(), "webhook paths fetched"),
        Ok(Err(e)) => tracing::warn!(error = %e, "no webhook paths yet: unknown paths are answered 503 until extrunner answers"),
        Err(_) => tracing::warn!("extrunner did not answer within {FIRST_ROUTES_WAIT:?}: unknown paths are answered 503 until it does"),
    }
    let routes_for_reload = routes.clone();
    let reconciler = tokio::spawn(crate::reconcile::run(
        bus.clone(),
        service.sources(),
        service.reports(),
        crate::reconcile::PageLimits::default(),
    ));
    let follower = tokio::spawn(follow_routes(bus.clone(), routes.clone(), service));
    let mut server = tokio::spawn(Server::serve(
        listener,
        routes,
        Arc::new(BusIntake::new(bus.clone())),
        limits,
        async move {
            let _ = stop_rx.await;
        },
    ));
    let _ = notifier.ready();
    let _ = notifier.status(&format!("serving webhooks on {}", local));
    let mut watchdog = notifier.watchdog_ticker();
    let mut stop_tx = Some(stop_tx);
    loop {
        tokio::select! {
            done = &mut server => {
                follower.abort();
                reconciler.abort();
                bus.close();
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
                    tracing::info!("reload asked: fetching the webhook paths again");
                    if let Err(e) = refresh_routes(&bus, &routes_for_reload, None).await {
                        tracing::warn!(error = %e, "cannot fetch the webhook paths now");
                    }
                    let _ = notifier.ready();
                }
            },
        }
    }
}
