//! `open-conduit-broker`: arguments, start-up and the main loop.

use crate::{Broker, Config};
use clap::Parser;
use daemon::{Activation, LogTarget, Notifier, Signal, Signals};
use std::path::PathBuf;
use std::time::Duration;
use tokio::net::UnixListener;

/// The Open Conduit broker: the bus between the suite's daemons and the CLI.
#[derive(Parser, Debug)]
#[command(name = "open-conduit-broker", version)]
pub struct Args {
    /// The bus socket to bind when systemd passes none.
    #[arg(long, default_value = daemon::bus::DEFAULT_BUS_SOCKET)]
    pub socket: PathBuf,
    /// The mode of a socket this broker binds itself (octal).
    #[arg(long, default_value = "660")]
    pub socket_mode: String,
    /// How long a request for a known prefix waits for its service to register (ms).
    #[arg(long, default_value_t = 5000)]
    pub bus_wait_ms: u64,
    /// The suite's service user: it may connect and register services.
    #[arg(long, default_value = "open-conduit")]
    pub service_user: String,
    /// The suite's group: its members may connect and call.
    #[arg(long, default_value = "open-conduit")]
    pub group: String,
    /// The group by number, instead of by name.
    #[arg(long)]
    pub group_gid: Option<u32>,
    /// Where logs go: auto (journald when started by it), journald or stderr.
    #[arg(long, default_value = "auto")]
    pub log: LogTarget,
}

/// The broker's main: returns the exit status.
pub fn main<I: IntoIterator<Item = String>>(args: I) -> i32 {
    let args: Args = match daemon::parse_args(args) {
        Ok(a) => a,
        Err(status) => return status,
    };
    // One thread: the broker's work is short hops between sockets, and keeping
    // them on one thread saves a cross-thread wake-up per hop.
    daemon::run_daemon(
        "open-conduit-broker",
        args.log,
        daemon::Flavor::CurrentThread,
        |notifier, activation| run(args, notifier, activation),
    )
}

fn config(args: &Args) -> Config {
    use nix::unistd::{Group, User};
    let service_uid = match User::from_name(&args.service_user) {
        Ok(Some(u)) => Some(u.uid.as_raw()),
        _ => {
            tracing::info!(user = %args.service_user, "no such service user: only root may register services");
            None
        }
    };
    let group_gid = args.group_gid.or_else(|| match Group::from_name(&args.group) {
        Ok(Some(g)) => Some(g.gid.as_raw()),
        _ => {
            tracing::info!(group = %args.group, "no such group: only root and the service user may connect");
            None
        }
    });
    Config {
        bus_wait: Duration::from_millis(args.bus_wait_ms),
        service_uid,
        group_gid,
        ..Config::default()
    }
}

async fn listen(
    args: &Args,
    activation: &mut Activation,
    group_gid: Option<u32>,
) -> Result<(UnixListener, Option<PathBuf>), String> {
    match activation.take_unix_listener("bus") {
        Ok(Some(l)) => {
            let l = UnixListener::from_std(l).map_err(|e| format!("the passed socket: {e}"))?;
            tracing::info!("serving on the socket systemd passed");
            return Ok((l, None));
        }
        Ok(None) => {}
        Err(e) => return Err(e.to_string()),
    }
    let mode = u32::from_str_radix(&args.socket_mode, 8)
        .map_err(|e| format!("--socket-mode {:?}: {e}", args.socket_mode))?;
    let l = daemon::bind_unix(&args.socket, mode)
        .map_err(|e| format!("bind {}: {e}", args.socket.display()))?;
    if let Some(gid) = group_gid {
        if let Err(e) =
            nix::unistd::chown(&args.socket, None, Some(nix::unistd::Gid::from_raw(gid)))
        {
            tracing::warn!(error = %e, gid, "cannot give the socket to the bus group");
        }
    }
    let l = UnixListener::from_std(l).map_err(|e| format!("{}: {e}", args.socket.display()))?;
    tracing::info!(socket = %args.socket.display(), "serving on a socket of its own");
    Ok((l, Some(args.socket.clone())))
}

async fn run(args: Args, notifier: Notifier, mut activation: Activation) -> Result<(), String> {
    let config = config(&args);
    let mut signals = Signals::new().map_err(|e| format!("signals: {e}"))?;
    let (listener, own_path) = listen(&args, &mut activation, config.group_gid).await?;
    let broker = Broker::new(config);
    let _ = notifier.ready();
    let _ = notifier.status("serving: 0 peers, 0 services");
    let mut watchdog = notifier.watchdog_ticker();
    let mut status = tokio::time::interval(Duration::from_secs(5));
    let mut last_status = (0, 0);
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => broker.admit(stream),
                Err(e) => {
                    // Out of descriptors, say: keep serving the peers we have.
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            },
            _ = daemon::notify::tick(&mut watchdog) => {
                let _ = notifier.watchdog();
            }
            _ = status.tick() => {
                let now = (broker.peer_count(), broker.service_count());
                if now != last_status {
                    last_status = now;
                    let _ = notifier.status(&format!("serving: {} peers, {} services", now.0, now.1));
                }
            }
            signal = signals.next() => match signal {
                Signal::Stop => break,
                Signal::Reload => {
                    let _ = notifier.reloading();
                    tracing::info!("reload asked: the broker has no configuration to reload");
                    let _ = notifier.ready();
                }
            },
        }
    }
    let _ = notifier.stopping();
    tracing::info!("stopping: closing every peer's connection");
    broker.close_all("the broker is stopping");
    drop(listener);
    if let Some(path) = own_path {
        let _ = std::fs::remove_file(path);
    }
    // Let the close reach the peers.
    tokio::time::sleep(Duration::from_millis(50)).await;
    Ok(())
}
