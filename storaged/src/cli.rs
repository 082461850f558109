//! `open-conduit-storaged`: arguments, start-up and the main loop.

use crate::service::{Publish, Service};
use crate::{Limits, Store};
use clap::Parser;
use daemon::bus::{Bus, BusOptions};
use daemon::{LogTarget, Notifier, Signal, Signals};
use std::path::PathBuf;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

/// storaged: the only process that opens Open Conduit's database.
#[derive(Parser, Debug)]
#[command(name = "open-conduit-storaged", version)]
pub struct Args {
    /// The state directory (the database is `db/conduit.db`, artifacts `artifacts/`).
    #[arg(long, default_value = "/var/lib/open-conduit")]
    pub state: PathBuf,
    /// The bus socket.
    #[arg(long, env = "OPEN_CONDUIT_BUS", default_value = daemon::bus::DEFAULT_BUS_SOCKET)]
    pub bus: PathBuf,
    /// The configuration directory whose `config.json` says where the database
    /// is (`settings.storage`). Without it, or without that setting, SQLite.
    #[arg(long)]
    pub config_dir: Option<PathBuf>,
    /// Where logs go: auto (journald when started by it), journald or stderr.
    #[arg(long, default_value = "auto")]
    pub log: LogTarget,
    /// Remove events older than this many days (never those open Work needs).
    #[arg(long)]
    pub max_event_age_days: Option<u64>,
    /// Remove artifacts older than this many days (never a running execution's).
    #[arg(long)]
    pub max_artifact_age_days: Option<u64>,
    /// Run retention this often (seconds), when an age is set.
    #[arg(long, default_value_t = 3600)]
    pub retention_interval_s: u64,
}

/// storaged's main: returns the exit status.
pub fn main<I: IntoIterator<Item = String>>(args: I) -> i32 {
    let args: Args = match daemon::parse_args(args) {
        Ok(a) => a,
        Err(status) => return status,
    };
    daemon::run_daemon(
        "open-conduit-storaged",
        args.log,
        daemon::Flavor::Tunable,
        |notifier, _activation| run(args, notifier),
    )
}

async fn run(args: Args, notifier: Notifier) -> Result<(), String> {
    let mut signals = Signals::new().map_err(|e| format!("signals: {e}"))?;
    let _ = notifier.status("opening the database");
    let state = args.state.clone();
    let target = crate::target::storage_target(args.config_dir.as_deref())?;
    let store = loop {
        let (state, target) = (state.clone(), target.clone());
        let opened = tokio::task::spawn_blocking(move || {
            Store::open_with(&state, Limits::default(), &target)
        })
        .await
        .map_err(|e| e.to_string())?;
        match opened {
            Ok(store) => break store,
            // PostgreSQL not up yet (a host booting before its database): wait
            // for it, saying so, rather than fail and be restarted.
            Err(crate::StoreError::Unavailable(why)) => {
                tracing::warn!(error = %why, "the database is unavailable; trying again in 2 s");
                let _ = notifier.status(&format!("waiting for the database: {why}"));
                tokio::select! {
                    _ = tokio::time::sleep(Duration::from_secs(2)) => {}
                    signal = signals.next() => if signal == Signal::Stop { return Ok(()); },
                }
            }
            Err(e) => return Err(e.to_string()),
        }
    };
    tracing::info!(database = %store.describe(), backend = store.backend().name(), "database open");
    let publish: Arc<OnceLock<Publish>> = Arc::new(OnceLock::new());
    let handler = Arc::new(Service::new(store.clone(), publish.clone()));
    let bus = Bus::start(BusOptions::service(
        &args.bus,
        "storaged",
        &["store"],
        handler,
    ));
    // On PostgreSQL the other hosts hear of this one's writes, and this host's
    // daemons of theirs.
    let nudges = match &target {
        crate::db::StorageTarget::Postgres(pg) => {
            let local = bus.clone();
            let nudges = crate::nudge::Nudges::start(
                (**pg).clone(),
                crate::util::new_id("storaged"),
                Arc::new(move |topic: &str, params: &serde_json::Value| {
                    local.publish(topic, params);
                }),
            )?;
            Some(nudges)
        }
        crate::db::StorageTarget::Sqlite => None,
    };
    {
        let bus = bus.clone();
        let _ = publish.set(Arc::new(move |topic: &str, params: &serde_json::Value| {
            bus.publish(topic, params);
            if let Some(n) = &nudges {
                n.send(topic, params);
            }
        }));
    }
    let _ = notifier.status(&format!("joining the bus at {}", args.bus.display()));
    loop {
        tokio::select! {
            joined = bus.connected(Duration::from_secs(3600)) => {
                if joined.is_ok() { break; }
            }
            signal = signals.next() => {
                if signal == Signal::Stop {
                    bus.close();
                    store.close();
                    return Ok(());
                }
            }
        }
    }
    let _ = notifier.ready();
    let _ = notifier.status("serving store.* on the bus");
    tracing::info!("serving store.* on the bus");
    let mut watchdog = notifier.watchdog_ticker();
    let retention = retention_policy(&args);
    let mut retention_tick =
        tokio::time::interval(Duration::from_secs(args.retention_interval_s.max(60)));
    loop {
        tokio::select! {
            _ = daemon::notify::tick(&mut watchdog) => {
                let _ = notifier.watchdog();
            }
            _ = retention_tick.tick(), if retention.is_some() => {
                if let Some(policy) = &retention {
                    match store.retention_run(policy.clone()).await {
                        Ok(done) => tracing::info!(
                            events = done.events_removed,
                            artifacts = done.artifacts_removed,
                            artifact_bytes = done.artifact_bytes_removed,
                            "retention pass"
                        ),
                        Err(e) => tracing::warn!(error = %e, "retention pass failed"),
                    }
                }
            }
            _ = bus.left() => {
                tracing::error!("left the bus (another storaged registered): stopping");
                break;
            }
            signal = signals.next() => match signal {
                Signal::Stop => break,
                Signal::Reload => {
                    let _ = notifier.reloading();
                    tracing::info!("reload asked: storaged reads no configuration file");
                    let _ = notifier.ready();
                }
            },
        }
    }
    let _ = notifier.stopping();
    tracing::info!("stopping: finishing queued writes");
    bus.close();
    tokio::task::spawn_blocking(move || store.close())
        .await
        .map_err(|e| e.to_string())?;
    Ok(())
}

fn retention_policy(args: &Args) -> Option<crate::retention::RetentionRunRequest> {
    const DAY_MS: u64 = 24 * 3600 * 1000;
    if args.max_event_age_days.is_none() && args.max_artifact_age_days.is_none() {
        return None;
    }
    let ms = |days: u64| i64::try_from(days.saturating_mul(DAY_MS)).unwrap_or(i64::MAX);
    Some(crate::retention::RetentionRunRequest {
        max_event_age_ms: args.max_event_age_days.map(ms),
        max_artifact_age_ms: args.max_artifact_age_days.map(ms),
        ..Default::default()
    })
}
