//! `open-conduit-webd`: arguments, start-up and the main loop.
//!
//! It joins the bus as a plain client, takes the listening socket systemd passes
//! (named `http`) or binds `--listen`, and serves the API ([`crate::api`]) until it is
//! told to stop; the login tokens are read from `<state>/webd/tokens`.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use clap::Parser;
use daemon::bus::{Bus, BusOptions};
use daemon::{Activation, LogTarget, Notifier, Signal, Signals};

use crate::api::Api;
use crate::server::{serve, Limits};
use crate::tokens::Tokens;

/// The Open Conduit web daemon: the JSON HTTP API.
#[derive(Parser, Debug)]
#[command(name = "open-conduit-webd", version)]
pub struct Args {
    /// The address to listen on when systemd passes no socket named `http`.
    #[arg(long, default_value = "127.0.0.1:8421")]
    pub listen: SocketAddr,
    /// The state directory: the login tokens are `<state>/webd/tokens`.
    #[arg(long, default_value = "/var/lib/open-conduit")]
    pub state: PathBuf,
    /// Open connections at most.
    #[arg(long, default_value_t = 256)]
    pub max_connections: usize,
    /// How long a request head may take to arrive, in milliseconds.
    #[arg(long, default_value_t = 10_000)]
    pub header_timeout_ms: u64,
    /// The bus socket.
    #[arg(long, env = "OPEN_CONDUIT_BUS", default_value = daemon::bus::DEFAULT_BUS_SOCKET)]
    pub bus: PathBuf,
    /// Where logs go: auto (journald when started by it), journald or stderr.
    #[arg(long, default_value = "auto")]
    pub log: LogTarget,
}

/// webd's main: returns the exit status.
pub fn main<I: IntoIterator<Item = String>>(args: I) -> i32 {
    let args: Args = match daemon::parse_args(args) {
        Ok(a) => a,
        Err(status) => return status,
    };
    daemon::run_daemon(
        "open-conduit-webd",
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
        ..Limits::default()
    };
    let bus = Bus::start(BusOptions::client(&args.bus));
    let tokens = Tokens::new(crate::tokens::path(&args.state));
    let api = Arc::new(Api::new(bus.clone(), tokens));
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let mut server = tokio::spawn(serve(listener, api, limits, async move {
        let _ = stop_rx.await;
    }));
    let _ = notifier.ready();
    let _ = notifier.status(&format!("serving the API on {local}"));
    tracing::info!(listen = %local, "serving the API");
    let mut watchdog = notifier.watchdog_ticker();
    let mut stop_tx = Some(stop_tx);
    loop {
        tokio::select! {
            done = &mut server => {
                bus.close();
                return done.map_err(|e| format!("the server task: {e}"));
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
                    // Nothing to reload: the tokens file is read again when it changes.
                    let _ = notifier.reloading();
                    let _ = notifier.ready();
                }
            },
        }
    }
}
