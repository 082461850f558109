//! `open-conduit-schedulerd`: arguments, start-up and the main loop.
//!
//! It joins the bus as the `sched` service (subscribed to `event.accepted`,
//! `config.applied` and `ext.state`), reads the configuration and the route handlers,
//! and routes every pending event; then it routes again whenever events are accepted,
//! with a sweep every [`SWEEP`] as the backstop. It never busy-polls. After a pass
//! that routed something it lets [`ROUTE_GATHER`] pass before the next, so that a
//! steady intake is routed in pages of many events rather than a few per pass.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use clap::Parser;
use daemon::bus::{Bus, BusOptions};
use daemon::{LogTarget, Notifier, Signal, Signals};

use crate::ports::{Extensions, OnBus, Store};
use crate::router::{Router, Stats};
use crate::service::{Service, Wakes};
use crate::starter::Starter;

/// The backstop sweep.
pub const SWEEP: Duration = Duration::from_secs(1);

/// How long the router lets events gather after a pass that routed some, before
/// it reads again. An event that arrives after a quiet spell is routed at once;
/// under a steady intake each pass takes what arrived meanwhile, so the reads, the
/// wait lookup and the decisions' write are paid once for many events rather than
/// for the two or three one group commit brings (docs/decisions.md, "Intake
/// speed, fifth step"). An event waits at most this long more to be routed.
pub const ROUTE_GATHER: Duration = Duration::from_millis(10);

/// The Open Conduit scheduler.
#[derive(Parser, Debug)]
#[command(name = "open-conduit-schedulerd", version)]
pub struct Args {
    /// The bus socket.
    #[arg(long, env = "OPEN_CONDUIT_BUS", default_value = daemon::bus::DEFAULT_BUS_SOCKET)]
    pub bus: PathBuf,
    /// The agents' toolbelt socket (default: `toolbelt.sock` beside the bus socket).
    #[arg(long)]
    pub toolbelt: Option<PathBuf>,
    /// The directory holding the `open-conduit` program that executors run as
    /// `open-conduit mcp` (default: this program's directory when it holds one).
    #[arg(long)]
    pub toolbelt_dir: Option<PathBuf>,
    /// This host's ID among the hosts sharing one database (default: derived from
    /// /etc/machine-id). `open-conduit up` passes the one kept in `<state>/host-id`.
    #[arg(long, env = "OPEN_CONDUIT_HOST_ID")]
    pub host_id: Option<String>,
    /// This host's name for people (default: the hostname).
    #[arg(long)]
    pub host_name: Option<String>,
    /// How long this host counts as alive after its last beat: past it, with its
    /// attempts' leases run out, other hosts settle its attempts (10 to 3600).
    #[arg(long, env = "OPEN_CONDUIT_HOST_LEASE_S", default_value_t = crate::host::DEFAULT_HOST_LEASE.as_secs())]
    pub host_lease_s: u64,
    /// Where logs go: auto (journald when started by it), journald or stderr.
    #[arg(long, default_value = "auto")]
    pub log: LogTarget,
}

/// This host, from the arguments.
pub fn host_of(args: &Args) -> Result<crate::host::Host, String> {
    let id = crate::host::resolve_id(args.host_id.as_deref())?;
    let lease = crate::host::check_lease(Duration::from_secs(args.host_lease_s))?;
    let name = match &args.host_name {
        Some(n) => n.clone(),
        None => hostname(),
    };
    Ok(crate::host::Host::new(id, name, lease))
}

/// The hostname (`/proc/sys` is hidden from the packaged unit: `/etc/hostname` then).
fn hostname() -> String {
    ["/proc/sys/kernel/hostname", "/etc/hostname"]
        .iter()
        .filter_map(|p| std::fs::read_to_string(p).ok())
        .map(|h| h.trim().to_owned())
        .find(|h| !h.is_empty())
        .unwrap_or_default()
}

/// schedulerd's main: returns the exit status.
pub fn main<I: IntoIterator<Item = String>>(args: I) -> i32 {
    let args: Args = match daemon::parse_args(args) {
        Ok(a) => a,
        Err(status) => return status,
    };
    daemon::run_daemon(
        "open-conduit-schedulerd",
        args.log,
        daemon::Flavor::Tunable,
        |notifier, activation| run(args, notifier, activation),
    )
}

async fn route_loop(router: Router, stats: Arc<Stats>, wakes: Arc<Wakes>) {
    loop {
        match router.pass(&stats).await {
            Ok(pass) => {
                if pass.routed > 0 {
                    tracing::debug!(events = pass.routed, to_work = pass.to_work, "routed");
                }
                // Only an event that went to a Work can make one ready to start.
                if pass.to_work > 0 {
                    wakes.work.notify_one();
                }
                // More are likely on their way: let them gather (a nudge that comes
                // meanwhile is kept, and the next pass starts right after).
                if pass.routed > 0 {
                    tokio::time::sleep(ROUTE_GATHER).await;
                }
            }
            Err(e @ crate::router::RouteError::NotLoaded(_)) => {
                tracing::debug!(error = %e, "routing waits");
                stats.blocked(e.to_string());
            }
            Err(e) => {
                tracing::warn!(error = %e, "routing held up; the event stays pending and is routed again");
                stats.blocked(e.to_string());
            }
        }
        tokio::select! {
            _ = wakes.events.notified() => {}
            _ = tokio::time::sleep(SWEEP) => {}
        }
    }
}

async fn start_loop(starter: Starter, wakes: Arc<Wakes>) {
    let mut sweeps = 0u32;
    loop {
        // Attempts whose lease ran out are taken over first (every few sweeps).
        if sweeps.is_multiple_of(3) {
            match starter.recover_expired().await {
                Ok(0) => {}
                Ok(n) => tracing::info!(attempts = n, "taking over attempts whose lease ran out"),
                Err(e) => tracing::warn!(error = %e, "cannot look for expired leases now"),
            }
        }
        sweeps = sweeps.wrapping_add(1);
        // Events routed to running attempts go into them first.
        starter.inject_routed().await;
        match starter.pass().await {
            Ok(0) => {}
            Ok(n) => tracing::debug!(attempts = n, "started"),
            Err(e) => tracing::warn!(error = %e, "cannot start Work now"),
        }
        tokio::select! {
            _ = wakes.work.notified() => {}
            _ = tokio::time::sleep(SWEEP) => {}
        }
    }
}

async fn timer_loop(store: Store, extensions: Extensions, wakes: Arc<Wakes>) {
    loop {
        match crate::timers::pass(&store, &extensions).await {
            Ok(0) => {}
            Ok(n) => {
                tracing::debug!(timers = n, "fired");
                wakes.events.notify_one();
            }
            Err(e) => tracing::warn!(error = %e, "cannot fire timers now"),
        }
        tokio::time::sleep(SWEEP).await;
    }
}

async fn knowledge_loop(router: Router, wakes: Arc<Wakes>) {
    let mut config_ok = false;
    let mut handlers_ok = false;
    loop {
        if let Err(e) = router.refresh_config().await {
            tracing::warn!(error = %e, "cannot read the configuration now");
        } else {
            config_ok = true;
        }
        if let Err(e) = router.refresh_handlers().await {
            tracing::warn!(error = %e, "cannot read the route handlers now");
        } else {
            handlers_ok = true;
        }
        // Poll quickly until both are known, then on notifications (every 30 s regardless).
        let wait = if config_ok && handlers_ok {
            Duration::from_secs(30)
        } else {
            Duration::from_millis(500)
        };
        // What the router knows changed (or is known for the first time): route again.
        wakes.events.notify_one();
        tokio::select! {
            _ = wakes.config.notified() => {}
            _ = wakes.extensions.notified() => {}
            _ = tokio::time::sleep(wait) => {}
        }
    }
}

async fn run(
    args: Args,
    notifier: Notifier,
    mut activation: daemon::Activation,
) -> Result<(), String> {
    let mut signals = Signals::new().map_err(|e| format!("signals: {e}"))?;
    let host = host_of(&args)?;
    let options = BusOptions::client(&args.bus).with_direct();
    let on_bus = OnBus::new(Bus::start(options.clone()));
    let client = on_bus.bus().clone();
    let (store, extensions) = (Store::new(on_bus.clone()), Extensions::new(on_bus));
    let router = Router::new(store.clone(), extensions.clone());
    let stats = Arc::new(Stats::default());
    let wakes = Arc::new(Wakes::default());
    let service = Service::new(router.clone(), stats.clone(), wakes.clone());
    let bus = Bus::start(
        BusOptions::service(
            &args.bus,
            "schedulerd",
            &["sched"],
            Arc::new(service.clone()),
        )
        .with_topics(&[
            busapi::topic::EVENT_ACCEPTED,
            busapi::topic::CONFIG_APPLIED,
            busapi::topic::EXT_STATE,
            busapi::topic::WORK_CHANGED,
        ]),
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
    let knowledge = tokio::spawn(knowledge_loop(router.clone(), wakes.clone()));
    let routing = tokio::spawn(route_loop(router.clone(), stats.clone(), wakes.clone()));
    let starter = Starter::new(router.clone(), host.clone());
    let beating = {
        let starter = starter.clone();
        tokio::spawn(host.clone().run(store.clone(), move |since| {
            let starter = starter.clone();
            tokio::spawn(async move { starter.stop_runs_taken_since(since).await });
        }))
    };
    service.set_starter(starter.clone());
    let endpoint = args.toolbelt.clone().unwrap_or_else(|| {
        args.bus
            .parent()
            .map(|d| d.join("toolbelt.sock"))
            .unwrap_or_else(|| PathBuf::from("toolbelt.sock"))
    });
    // The socket systemd passes (open-conduit-toolbelt.socket), else one of its own.
    let listener = match activation
        .take_unix_listener("toolbelt")
        .map_err(|e| format!("the toolbelt socket: {e}"))?
    {
        Some(l) => {
            l.set_nonblocking(true)
                .map_err(|e| format!("the toolbelt socket: {e}"))?;
            tokio::net::UnixListener::from_std(l)
                .map_err(|e| format!("the toolbelt socket: {e}"))?
        }
        None => crate::toolbelt::Toolbelt::bind(&endpoint)?,
    };
    let dir = args
        .toolbelt_dir
        .clone()
        .or_else(|| {
            std::env::current_exe()
                .ok()
                .and_then(|e| e.parent().map(PathBuf::from))
                .filter(|d| d.join("open-conduit").exists())
        })
        .map(|d| d.display().to_string())
        .unwrap_or_default();
    let serving = {
        let (router, starter) = (router.clone(), starter.clone());
        tokio::spawn(async move {
            // The key is in the store: wait for storaged.
            let key = loop {
                match crate::toolbelt::load_key(router.store()).await {
                    Ok(k) => break k,
                    Err(e) => {
                        tracing::warn!(error = %e, "the toolbelt key cannot be read yet");
                        tokio::time::sleep(Duration::from_secs(1)).await;
                    }
                }
            };
            let tb = crate::toolbelt::Toolbelt::new(
                router.store().clone(),
                router.extensions().clone(),
                router.knowledge(),
                key,
                endpoint.clone(),
                dir,
            );
            starter.set_toolbelt(tb.clone());
            tracing::info!(endpoint = %endpoint.display(), "serving the agents' toolbelt");
            tb.serve(listener).await;
        })
    };
    let starting = tokio::spawn(start_loop(starter, wakes.clone()));
    let timing = tokio::spawn(timer_loop(store.clone(), extensions, wakes.clone()));
    let tasking = tokio::spawn(crate::tasks::run(store, router.clone(), host));
    let _ = notifier.ready();
    let _ = notifier.status("routing events");
    tracing::info!("routing events");
    let mut watchdog = notifier.watchdog_ticker();
    loop {
        tokio::select! {
            _ = daemon::notify::tick(&mut watchdog) => {
                let _ = notifier.watchdog();
            }
            _ = bus.left() => {
                tracing::error!("left the bus (another schedulerd registered): stopping");
                break;
            }
            signal = signals.next() => match signal {
                Signal::Stop => break,
                Signal::Reload => {
                    let _ = notifier.reloading();
                    wakes.config.notify_one();
                    let _ = notifier.ready();
                }
            },
        }
    }
    let _ = notifier.stopping();
    knowledge.abort();
    routing.abort();
    starting.abort();
    timing.abort();
    tasking.abort();
    beating.abort();
    serving.abort();
    bus.close();
    client.close();
    Ok(())
}
