//! `open-conduit-extrunner`: arguments, start-up and the main loop.
//!
//! Start-up: discover and start every package at once, join the bus as the
//! service `extrunner` (prefix `ext`), and say `READY=1` once every first
//! handshake is done and the service is registered. `STATUS=` says how many
//! extensions run; the watchdog is fed from the main loop; SIGTERM stops every
//! extension with its process group and exits 0.

use crate::process::SupervisorOptions;
use crate::runner::{Runner, RunnerConfig};
use crate::service::Service;
use busapi::store::{ConfigCurrentRequest, TunnelGetRequest};
use busapi::Call;
use clap::Parser;
use daemon::bus::{Bus, BusOptions};
use daemon::{LogTarget, Notifier, Signal, Signals};
use protocol::config::Config;
use serde_json::Value;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

/// How often the main loop looks whether `STATUS=` changed.
const STATUS_EVERY: Duration = Duration::from_secs(2);

/// extrunner: every extension as a supervised process.
#[derive(Parser, Debug)]
#[command(name = "open-conduit-extrunner", version)]
pub struct Args {
    /// The configuration directory: installed packages are in `<config-dir>/extensions`,
    /// the operator's grants (`settings.extensions.<name>.pass_env`) in `config.json`.
    #[arg(long, default_value = "/etc/open-conduit")]
    pub config_dir: PathBuf,
    /// The bundled packages' directory.
    #[arg(long, default_value = "/usr/lib/open-conduit/extensions")]
    pub bundled: PathBuf,
    /// The state directory (extensions' private state and logs).
    #[arg(long, default_value = "/var/lib/open-conduit")]
    pub state: PathBuf,
    /// The bus socket.
    #[arg(long, env = "OPEN_CONDUIT_BUS", default_value = daemon::bus::DEFAULT_BUS_SOCKET)]
    pub bus: PathBuf,
    /// Where logs go: auto (journald when started by it), journald or stderr.
    #[arg(long, default_value = "auto")]
    pub log: LogTarget,
}

/// extrunner's main: returns the exit status.
pub fn main<I: IntoIterator<Item = String>>(args: I) -> i32 {
    let args: Args = match daemon::parse_args(args) {
        Ok(a) => a,
        Err(status) => return status,
    };
    daemon::run_daemon(
        "open-conduit-extrunner",
        args.log,
        daemon::Flavor::Tunable,
        |notifier, _activation| run(args, notifier),
    )
}

/// The variables the operator grants each package: `settings.extensions.<name>.pass_env`
/// in `<config_dir>/config.json`. A missing file grants nothing; an unreadable or
/// malformed one is reported and grants nothing.
pub fn read_grants(config_dir: &Path) -> HashMap<String, Vec<String>> {
    let path = config_dir.join("config.json");
    let text = match std::fs::read(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return HashMap::new(),
        Err(e) => {
            tracing::warn!(path = %path.display(), error = %e, "cannot read the configuration; no variable is granted to any extension");
            return HashMap::new();
        }
    };
    let doc: Value = match serde_json::from_slice(&text) {
        Ok(v) => v,
        Err(e) => {
            tracing::warn!(path = %path.display(), error = %e, "the configuration is not JSON; no variable is granted to any extension");
            return HashMap::new();
        }
    };
    grants_from(&doc)
}

/// The grants in a configuration document (see [`read_grants`]).
pub fn grants_from(doc: &Value) -> HashMap<String, Vec<String>> {
    let mut out = HashMap::new();
    let Some(exts) = doc
        .pointer("/settings/extensions")
        .and_then(Value::as_object)
    else {
        return out;
    };
    for (name, settings) in exts {
        let names: Vec<String> = settings
            .get("pass_env")
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(Value::as_str)
                    .map(str::to_string)
                    .collect()
            })
            .unwrap_or_default();
        if !names.is_empty() {
            out.insert(name.clone(), names);
        }
    }
    out
}

/// How long extrunner waits at start for storaged's configuration before it starts the
/// packages with none (they are configured again once it arrives).
pub const CONFIG_WAIT: Duration = Duration::from_secs(5);
/// How often the configuration is looked at without a `config.applied` notification
/// (the backstop for a notification lost while the bus restarted).
pub const CONFIG_POLL: Duration = Duration::from_secs(30);

/// The stored configuration generation: its hash and the parsed document, `Ok(None)`
/// when none was ever applied.
pub async fn current_config(bus: &Bus) -> Result<Option<(Config, String)>, String> {
    let current = match bus.call_typed(&ConfigCurrentRequest {}).await {
        Ok(a) => a,
        Err(e) if e.code() == Some(protocol::Code::NotFound.as_str()) => return Ok(None),
        Err(e) => return Err(format!("{}: {e}", ConfigCurrentRequest::METHOD)),
    };
    let hash = current.hash;
    let doc = current.config;
    match Config::parse(&doc) {
        Ok(c) => Ok(Some((c, hash))),
        Err(problems) => Err(format!(
            "the stored configuration {hash} has problems: {}",
            problems
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join("; ")
        )),
    }
}

/// Follow the stored configuration: apply each new generation to the runner, woken
/// by `config.applied` (and every [`CONFIG_POLL`] regardless).
pub async fn follow_config(
    runner: Arc<Runner>,
    bus: Bus,
    changed: Arc<tokio::sync::Notify>,
    mut applied: Option<String>,
) {
    loop {
        match current_config(&bus).await {
            Ok(Some((doc, hash))) if applied.as_deref() != Some(hash.as_str()) => {
                tracing::info!(generation = %hash, "applying a new configuration generation");
                for (name, r) in runner.apply(&doc, &hash).await {
                    if let Err(why) = r {
                        tracing::error!(OC_EXTENSION = %name, %why, "the extension refused the configuration");
                    }
                }
                applied = Some(hash);
            }
            Ok(_) => {}
            Err(e) => tracing::warn!(error = %e, "cannot read the configuration now"),
        }
        tokio::select! {
            _ = changed.notified() => {}
            _ = tokio::time::sleep(CONFIG_POLL) => {}
        }
    }
}

/// The tunnel's public URL as tunneld recorded it (`store.tunnel_get`): `None` when
/// none is published.
pub async fn current_tunnel_url(bus: &Bus) -> Result<Option<String>, String> {
    let answer = bus
        .call_typed(&TunnelGetRequest {})
        .await
        .map_err(|e| format!("{}: {e}", TunnelGetRequest::METHOD))?;
    Ok(answer.tunnel.map(|t| t.url).filter(|u| !u.is_empty()))
}

/// Follow the tunnel's public URL: every package is configured with it in place of
/// `settings.webhooks.public_url` (again, without a restart, on each change), woken by
/// `tunnel.changed` (and every [`CONFIG_POLL`] regardless).
pub async fn follow_tunnel(runner: Arc<Runner>, bus: Bus, changed: Arc<tokio::sync::Notify>) {
    loop {
        match current_tunnel_url(&bus).await {
            Ok(url) => {
                let shown = url.clone().unwrap_or_default();
                let results = runner.set_public_url(url).await;
                if !results.is_empty() {
                    tracing::info!(public_url = %shown, "the tunnel's public URL changed: extensions configured again");
                }
                for (name, r) in results {
                    if let Err(why) = r {
                        tracing::error!(OC_EXTENSION = %name, %why, "the extension refused the configuration with the tunnel's URL");
                    }
                }
            }
            Err(e) => tracing::debug!(error = %e, "cannot read the tunnel's URL now"),
        }
        tokio::select! {
            _ = changed.notified() => {}
            _ = tokio::time::sleep(CONFIG_POLL) => {}
        }
    }
}

/// Publish `ext.state {name, serial, state}` whenever a package's registrations change.
pub fn publish_registrations(runner: &Runner, bus: &Bus) {
    for (name, mut rx) in runner.watch_registrations() {
        let bus = bus.clone();
        tokio::spawn(async move {
            while rx.changed().await.is_ok() {
                let serial = rx.borrow_and_update().serial;
                bus.publish(
                    busapi::topic::EXT_STATE,
                    &serde_json::json!({"name": name, "serial": serial}),
                );
            }
        });
    }
}

async fn run(args: Args, notifier: Notifier) -> Result<(), String> {
    let mut signals = Signals::new().map_err(|e| format!("signals: {e}"))?;
    let _ = notifier.status("reading the configuration");
    let host_bus = Bus::start(BusOptions::client(&args.bus).with_direct());
    let initial = match tokio::time::timeout(CONFIG_WAIT, async {
        loop {
            match current_config(&host_bus).await {
                Ok(c) => return Ok(c),
                Err(e) if e.contains("problems") => return Err(e),
                Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
            }
        }
    })
    .await
    {
        Ok(Ok(c)) => c,
        Ok(Err(e)) => {
            tracing::error!(error = %e, "starting the extensions with no configuration");
            None
        }
        Err(_) => {
            tracing::warn!("storaged did not answer within {CONFIG_WAIT:?}: starting the extensions with no configuration; they are configured once it answers");
            None
        }
    };
    let applied = initial.as_ref().map(|(_, h)| h.clone());
    let _ = notifier.status("starting the extensions");
    let config = RunnerConfig {
        installed_root: args.config_dir.join("extensions"),
        bundled_root: Some(args.bundled.clone()),
        state_dir: args.state.clone(),
        grants: read_grants(&args.config_dir),
        options: SupervisorOptions::default(),
        // The extensions' own calls (KV, state, events, artifacts) reach storaged
        // on a connection of their own.
        host_bus: Some(host_bus.clone()),
        initial,
    };
    let runner = Runner::load(config).shared();
    // The bus socket, the toolbelt's beside it (schedulerd's default) and the
    // daemons' direct sockets (daemon::direct).
    let toolbelt = args.bus.parent().map(|d| d.join("toolbelt.sock"));
    let direct = daemon::direct::dir_for(&args.bus);
    runner.workspaces().protect_sockets(
        std::iter::once(args.bus.clone())
            .chain(toolbelt)
            .chain(direct),
    );
    tracing::info!(
        packages = runner.names().len(),
        "every extension started; waiting for their handshakes"
    );
    let service = Service::new(runner.clone());
    let bus = Bus::start(
        BusOptions::service(
            &args.bus,
            "extrunner",
            &["ext", "view"],
            Arc::new(service.clone()),
        )
        .with_topics(&[busapi::topic::CONFIG_APPLIED, busapi::topic::TUNNEL_CHANGED]),
    );
    publish_registrations(&runner, &bus);
    let follower = tokio::spawn(follow_config(
        runner.clone(),
        host_bus.clone(),
        service.config_changed(),
        applied,
    ));
    let tunnel_follower = tokio::spawn(follow_tunnel(
        runner.clone(),
        host_bus.clone(),
        service.tunnel_changed(),
    ));

    // Every first handshake, then the registration on the bus.
    let mut handshakes_done = false;
    loop {
        tokio::select! {
            _ = runner.ready(), if !handshakes_done => {
                handshakes_done = true;
                service.set_ready();
                let counts = runner.counts();
                tracing::info!(%counts, "every extension's handshake is done");
                let _ = notifier.status(&format!("{counts}; joining the bus at {}", args.bus.display()));
            }
            joined = bus.connected(Duration::from_secs(3600)), if handshakes_done => {
                if joined.is_ok() { break; }
            }
            signal = signals.next() => {
                if signal == Signal::Stop {
                    let _ = notifier.stopping();
                    tracing::info!("stopping before ready: stopping every extension");
                    follower.abort();
                    tunnel_follower.abort();
                    runner.stop_all().await;
                    bus.close();
                    return Ok(());
                }
            }
        }
    }
    let _ = notifier.ready();
    let housekeeping = tokio::spawn(workspace_passes(runner.clone()));
    let container_sweep = tokio::spawn(container_passes(runner.clone()));
    let mut status = runner.counts().to_string();
    let _ = notifier.status(&status);
    tracing::info!(%status, "serving ext.* on the bus");

    let mut watchdog = notifier.watchdog_ticker();
    let mut status_tick = tokio::time::interval(STATUS_EVERY);
    loop {
        tokio::select! {
            _ = daemon::notify::tick(&mut watchdog) => {
                let _ = notifier.watchdog();
            }
            _ = status_tick.tick() => {
                let now = runner.counts().to_string();
                if now != status {
                    status = now;
                    let _ = notifier.status(&status);
                }
            }
            _ = bus.left() => {
                tracing::error!("left the bus (another extrunner registered): stopping");
                break;
            }
            signal = signals.next() => match signal {
                Signal::Stop => break,
                Signal::Reload => {
                    let _ = notifier.reloading();
                    tracing::info!("reload asked: extrunner rereads nothing yet; restart an extension with {}", busapi::ext::RestartRequest::METHOD);
                    let _ = notifier.ready();
                }
            },
        }
    }
    let _ = notifier.stopping();
    let _ = notifier.status("stopping every extension");
    tracing::info!("stopping every extension");
    follower.abort();
    tunnel_follower.abort();
    housekeeping.abort();
    container_sweep.abort();
    runner.stop_all().await;
    bus.close();
    host_bus.close();
    tracing::info!("every extension stopped");
    Ok(())
}

/// The variable that, for tests, sets the sweep timer's period in seconds (1 to
/// [`MAX_SWEEP_TEST_S`]) and makes its grace 0 (sweep what is closed at all).
pub const SWEEP_TEST_ENV: &str = "OC_TEST_SWEEP_INTERVAL_S";
/// The longest period [`SWEEP_TEST_ENV`] may set.
pub const MAX_SWEEP_TEST_S: u64 = 3600;

/// The sweep timer's period and grace: [`crate::workspaces::SWEEP_INTERVAL`] and
/// [`crate::workspaces::SWEEP_GRACE`], unless a test set [`SWEEP_TEST_ENV`].
fn sweep_timing(test: Option<&str>) -> Result<(Duration, Duration), String> {
    let defaults = (
        crate::workspaces::SWEEP_INTERVAL,
        crate::workspaces::SWEEP_GRACE,
    );
    match test {
        None => Ok(defaults),
        Some(v) => match v.trim().parse::<u64>() {
            Ok(s) if (1..=MAX_SWEEP_TEST_S).contains(&s) => {
                Ok((Duration::from_secs(s), Duration::ZERO))
            }
            _ => Err(format!(
                "{SWEEP_TEST_ENV}={v:?} is not a whole number of seconds from 1 to {MAX_SWEEP_TEST_S}; the sweep keeps its period of 6 h"
            )),
        },
    }
}

/// How often extrunner sweeps the containers of ended executions.
pub const CONTAINER_SWEEP_INTERVAL: Duration = Duration::from_secs(30);

/// The container sweep: every [`CONTAINER_SWEEP_INTERVAL`], the containers of this
/// host whose execution is no longer running are stopped and removed (a list that
/// fails removes nothing, and is tried again on the next tick).
async fn container_passes(runner: Arc<Runner>) {
    let ws = runner.workspaces().clone();
    let mut tick = tokio::time::interval(CONTAINER_SWEEP_INTERVAL);
    loop {
        tick.tick().await;
        for r in ws.sweep_containers().await {
            if !r.error.is_empty() {
                tracing::warn!(container_type = %r.container_type, error = %r.error,
                    "the container sweep failed");
            } else if !r.removed.is_empty() {
                tracing::info!(container_type = %r.container_type, seen = r.seen,
                    removed = ?r.removed, "containers of ended executions removed");
            }
        }
    }
}

/// The workspace passes: every provider reconciled once the suite is up, then the
/// spare workspaces swept every [`crate::workspaces::SWEEP_INTERVAL`] (a test's
/// [`SWEEP_TEST_ENV`] sets the period, with no grace).
async fn workspace_passes(runner: Arc<Runner>) {
    let ws = runner.workspaces().clone();
    ws.reconcile_all().await;
    let test = std::env::var(SWEEP_TEST_ENV).ok();
    let (period, grace) = sweep_timing(test.as_deref()).unwrap_or_else(|why| {
        tracing::warn!(%why, "ignoring the sweep's test period");
        (
            crate::workspaces::SWEEP_INTERVAL,
            crate::workspaces::SWEEP_GRACE,
        )
    });
    if test.is_some() {
        tracing::info!(
            period_s = period.as_secs(),
            grace_s = grace.as_secs(),
            "the workspace sweep's timer"
        );
    }
    let mut tick = tokio::time::interval(period);
    tick.tick().await;
    loop {
        tick.tick().await;
        match ws.sweep(None, grace, false).await {
            Ok(reports) => {
                for r in reports {
                    tracing::info!(OC_EXTENSION = %r.provider, resource_type = %r.resource_type,
                        removed = r.result.removed.len(), kept = r.result.kept.len(),
                        error = %r.error, "spare workspaces swept");
                }
            }
            Err(e) => tracing::warn!(error = %e.message, "the workspace sweep failed"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sweep_timer_period_is_settable_for_tests_only_within_bounds() {
        let six_hours = crate::workspaces::SWEEP_INTERVAL;
        assert_eq!(
            sweep_timing(None),
            Ok((six_hours, crate::workspaces::SWEEP_GRACE))
        );
        assert_eq!(
            sweep_timing(Some("2")),
            Ok((Duration::from_secs(2), Duration::ZERO))
        );
        for bad in ["0", "-1", "x", "3601", ""] {
            let why = sweep_timing(Some(bad)).unwrap_err();
            assert!(
                why.contains(SWEEP_TEST_ENV) && why.contains("3600"),
                "{why}"
            );
        }
    }

    #[test]
    fn grants_come_from_settings_extensions_pass_env() {
        let doc = serde_json::json!({
            "settings": {"extensions": {
                "github": {"pass_env": ["HTTPS_PROXY", 3, "NO_PROXY"]},
                "slack": {},
            }},
        });
        let grants = grants_from(&doc);
        assert_eq!(
            grants.get("github"),
            Some(&vec!["HTTPS_PROXY".to_string(), "NO_PROXY".to_string()])
        );
        assert!(!grants.contains_key("slack"));
        assert!(grants_from(&serde_json::json!({})).is_empty());
    }
}
