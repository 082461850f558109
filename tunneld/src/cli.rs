//! `open-conduit-tunneld`: arguments, start-up and the main loop.
//!
//! It joins the bus as the `tunneld` service owning `tunnel.*` (subscribed to
//! `config.applied`), says `READY=1` once it serves, and runs the configured tunnel
//! ([`crate::runs::run_loop`]) until SIGTERM, when it cancels the run (the provider
//! stops its tunnel) and clears the public URL.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use clap::Parser;
use daemon::bus::{Bus, BusOptions};
use daemon::{LogTarget, Notifier, Signal, Signals};

use crate::service::{Service, State};

/// How long a stopping tunneld waits for its run to be cancelled and the URL cleared.
pub const STOP_WAIT: Duration = Duration::from_secs(10);

/// The Open Conduit tunnel daemon.
#[derive(Parser, Debug)]
#[command(name = "open-conduit-tunneld", version)]
pub struct Args {
    /// The bus socket.
    #[arg(long, env = "OPEN_CONDUIT_BUS", default_value = daemon::bus::DEFAULT_BUS_SOCKET)]
    pub bus: PathBuf,
    /// The address the tunnel forwards to (default: ingressd's listen address, asked
    /// on the bus; an unspecified IP becomes loopback).
    #[arg(long)]
    pub addr: Option<SocketAddr>,
    /// Where logs go: auto (journald when started by it), journald or stderr.
    #[arg(long, default_value = "auto")]
    pub log: LogTarget,
}

/// tunneld's main: returns the exit status.
pub fn main<I: IntoIterator<Item = String>>(args: I) -> i32 {
    let args: Args = match daemon::parse_args(args) {
        Ok(a) => a,
        Err(status) => return status,
    };
    daemon::run_daemon(
        "open-conduit-tunneld",
        args.log,
        daemon::Flavor::CurrentThread,
        |notifier, _activation| run(args, notifier),
    )
}

async fn run(args: Args, notifier: Notifier) -> Result<(), String> {
    let mut signals = Signals::new().map_err(|e| format!("signals: {e}"))?;
    let client = Bus::start(BusOptions::client(&args.bus));
    let state = Arc::new(State::default());
    let service = Service::new(state.clone(), client.clone());
    let bus = Bus::start(
        BusOptions::service(&args.bus, "tunneld", &["tunnel"], Arc::new(service.clone()))
            .with_topics(&["config.applied"]),
    );
    let _ = notifier.status("joining the bus");
    tokio::select! {
        joined = bus.connected(Duration::from_secs(3600)) => {
            joined.map_err(|e| format!("the bus at {}: {e}", args.bus.display()))?;
        }
        _ = signals.next() => {
            bus.close();
            client.close();
            return Ok(());
        }
    }
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let status_notifier = notifier.clone();
    let mut runs = tokio::spawn(crate::runs::run_loop(
        client.clone(),
        state.clone(),
        args.addr,
        service.config_changed.clone(),
        stop_rx,
        move |s: &str| {
            let _ = status_notifier.status(s);
        },
    ));
    let _ = notifier.ready();
    tracing::info!("serving tunnel.* on the bus");
    let mut watchdog = notifier.watchdog_ticker();
    loop {
        tokio::select! {
            _ = daemon::notify::tick(&mut watchdog) => {
                let _ = notifier.watchdog();
            }
            _ = bus.left() => {
                tracing::error!("left the bus (another tunneld registered): stopping");
                break;
            }
            _ = &mut runs => {
                tracing::error!("the run loop ended");
                break;
            }
            signal = signals.next() => match signal {
                Signal::Stop => break,
                Signal::Reload => {
                    let _ = notifier.reloading();
                    service.config_changed.notify_one();
                    let _ = notifier.ready();
                }
            },
        }
    }
    let _ = notifier.stopping();
    let _ = notifier.status("stopping the tunnel");
    stop_tx.send_replace(true);
    if tokio::time::timeout(STOP_WAIT, &mut runs).await.is_err() {
        runs.abort();
    }
    bus.close();
    client.close();
    Ok(())
}
