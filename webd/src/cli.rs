//! `open-conduit-webd`: arguments, start-up and the main loop.
//!
//! It takes the listening socket systemd passes (named `http`) or binds `--listen`,
//! joins the bus as the service `webd` (answering `web.status`, receiving the topics
//! the live streams pass on), and serves the API and the pages ([`crate::app`]) until
//! it is told to stop; the login tokens are read from `<state>/webd/tokens`.

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use clap::Parser;
use daemon::bus::{Bus, BusOptions};
use daemon::{Activation, LogTarget, Notifier, Signal, Signals};

use crate::app::Service;
use crate::auth::{Auth, Trusted};
use crate::context::App;
use crate::live::Hub;
use crate::server::{serve, Limits};
use crate::tokens::Tokens;

/// The Open Conduit web daemon: the web view and its JSON HTTP API.
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
    /// A header a reverse proxy in front names the signed-in person in
    /// (`X-Forwarded-User`); taken only from `--trusted-proxy` addresses.
    #[arg(long, env = "OPEN_CONDUIT_WEB_TRUSTED_HEADER")]
    pub trusted_header: Option<String>,
    /// The addresses the reverse proxy connects from (default: loopback).
    #[arg(long, env = "OPEN_CONDUIT_WEB_TRUSTED_PROXY", value_delimiter = ',')]
    pub trusted_proxy: Vec<IpAddr>,
    /// Mark session cookies Secure whatever the request says (set it when a TLS proxy
    /// that does not send `X-Forwarded-Proto` is in front).
    #[arg(long)]
    pub secure_cookies: bool,
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
    let trusted = match &args.trusted_header {
        None => None,
        Some(h) => Some(Trusted {
            header: hyper::header::HeaderName::from_bytes(h.trim().as_bytes())
                .map_err(|e| format!("--trusted-header {h:?}: {e}"))?,
            proxies: if args.trusted_proxy.is_empty() {
                vec![
                    IpAddr::from([127, 0, 0, 1]),
                    IpAddr::from(std::net::Ipv6Addr::LOCALHOST),
                ]
            } else {
                args.trusted_proxy.clone()
            },
        }),
    };
    let auth = Auth::new(
        Tokens::new(crate::tokens::path(&args.state)),
        trusted,
        args.secure_cookies,
    )?;
    let (streams_stop, streams_stop_rx) = tokio::sync::watch::channel(false);
    let hub = Arc::new(Hub::new(streams_stop_rx));
    let service = Arc::new(Service {
        hub: Arc::clone(&hub),
        app: std::sync::OnceLock::new(),
        listen: local.clone(),
    });
    let bus = Bus::start(
        BusOptions::service(&args.bus, "webd", &["web"], service.clone())
            .with_topics(crate::live::TOPICS),
    );
    let app = Arc::new(App {
        bus: bus.clone(),
        auth,
        hub,
        listen: local.clone(),
    });
    let _ = service.app.set(Arc::clone(&app));
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let mut server = tokio::spawn(serve(listener, app, limits, async move {
        let _ = stop_rx.await;
    }));
    let _ = notifier.ready();
    let _ = notifier.status(&format!("serving the web view on http://{local}/"));
    tracing::info!(listen = %local, "serving the web view");
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
                    // The live streams never end on their own: end them first.
                    let _ = streams_stop.send(true);
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
