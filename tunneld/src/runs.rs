//! The run loop: one `tunnel.run` held open through extrunner at a time.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use busapi::ext::{ExtCall, ListRequest};
use busapi::ingress::RoutesRequest;
use busapi::store::ConfigCurrentRequest;
use busapi::Call;
use daemon::bus::Bus;
use protocol::config::{Config, TunnelSettings};
use protocol::wire::TunnelRunParams;
use protocol::{CallError, CallOptions, CancelToken, Code};
use tokio::sync::{watch, Notify};

use crate::service::{Held, State};

/// The first wait before a run that ended is started again.
pub const BACKOFF_FIRST: Duration = Duration::from_secs(5);
/// The longest wait.
pub const BACKOFF_MAX: Duration = Duration::from_secs(300);
/// How often the configuration is read without a `config.applied`.
pub const CONFIG_POLL: Duration = Duration::from_secs(30);
/// How long to wait between tries when a dependency (storaged, ingressd, extrunner)
/// does not answer yet.
pub const RETRY: Duration = Duration::from_secs(1);

/// The next wait after `now`.
pub fn next_backoff(now: Duration) -> Duration {
    (now * 2).min(BACKOFF_MAX)
}

/// The tunnel the stored configuration names: `Ok(None)` when none.
pub async fn configured(bus: &Bus) -> Result<Option<TunnelSettings>, String> {
    let current = match bus.call_typed(&ConfigCurrentRequest {}).await {
        Ok(a) => a,
        Err(e) if e.code() == Some(Code::NotFound.as_str()) => return Ok(None),
        Err(e) => return Err(format!("{}: {e}", ConfigCurrentRequest::METHOD)),
    };
    let config = Config::parse(&current.config).map_err(|p| {
        format!(
            "the stored configuration has problems: {}",
            p.iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join("; ")
        )
    })?;
    Ok(config.settings.webhooks.tunnel)
}

/// The package serving tunnel type `provider`: the one named so, or the longest
/// package name the type begins with (`ngrok-edge` is `ngrok`'s).
pub fn package_for(provider: &str, names: &[String]) -> Option<String> {
    names
        .iter()
        .filter(|n| {
            provider == n.as_str()
                || provider
                    .strip_prefix(n.as_str())
                    .is_some_and(|r| r.starts_with(['-', '.', '_']))
        })
        .max_by_key(|n| n.len())
        .cloned()
}

async fn find_package(bus: &Bus, provider: &str) -> Result<String, String> {
    let list = bus
        .call_typed(&ListRequest {})
        .await
        .map_err(|e| format!("{}: {e}", ListRequest::METHOD))?;
    let names: Vec<String> = list.extensions.into_iter().map(|e| e.name).collect();
    package_for(provider, &names)
        .ok_or_else(|| format!("no extension package provides the tunnel type {provider:?}"))
}

/// The address to forward to: `--addr`, else ingressd's listen address (an unspecified
/// IP becomes loopback).
pub async fn listen_addr(bus: &Bus, fixed: Option<SocketAddr>) -> Result<SocketAddr, String> {
    let addr = match fixed {
        Some(a) => a,
        None => {
            let r = bus
                .call_typed(&RoutesRequest {})
                .await
                .map_err(|e| format!("{}: {e}", RoutesRequest::METHOD))?;
            let listen = r.listen;
            listen
                .parse::<SocketAddr>()
                .map_err(|_| format!("ingressd listens on {listen:?}, not an address"))?
        }
    };
    Ok(loopback_if_unspecified(addr))
}

/// `0.0.0.0:p` → `127.0.0.1:p`, `[::]:p` → `[::1]:p`.
pub fn loopback_if_unspecified(a: SocketAddr) -> SocketAddr {
    match a.ip() {
        IpAddr::V4(ip) if ip.is_unspecified() => {
            SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), a.port())
        }
        IpAddr::V6(ip) if ip.is_unspecified() => {
            SocketAddr::new(IpAddr::V6(Ipv6Addr::LOCALHOST), a.port())
        }
        _ => a,
    }
}

/// A fresh run ID: `run_` and 16 hex digits from the system's random source (time,
/// pid and a counter when it fails: [`protocol::random::unique_hex`]).
pub fn new_run_id() -> String {
    format!("run_{}", protocol::random::unique_hex::<8>())
}

/// How a wait ended.
enum Woke {
    Timeout,
    Config,
    Stop,
}

async fn wait(limit: Duration, config: &Notify, stop: &mut watch::Receiver<bool>) -> Woke {
    if *stop.borrow() {
        return Woke::Stop;
    }
    tokio::select! {
        _ = tokio::time::sleep(limit) => Woke::Timeout,
        _ = config.notified() => Woke::Config,
        _ = stop.wait_for(|s| *s) => Woke::Stop,
    }
}

/// The loop: run the configured tunnel until `stop`, starting it again after each end.
pub async fn run_loop(
    bus: Bus,
    state: Arc<State>,
    fixed_addr: Option<SocketAddr>,
    config_changed: Arc<Notify>,
    mut stop: watch::Receiver<bool>,
    status: impl Fn(&str) + Send + Sync + 'static,
) {
    let mut backoff = BACKOFF_FIRST;
    // A provider's `invalid` refusal of this tunnel: not run again until it changes.
    let mut refused: Option<TunnelSettings> = None;
    loop {
        let tunnel = match configured(&bus).await {
            Ok(t) => t,
            Err(e) => {
                tracing::warn!(error = %e, "cannot read the configuration now");
                match wait(RETRY, &config_changed, &mut stop).await {
                    Woke::Stop => return,
                    _ => continue,
                }
            }
        };
        let Some(tunnel) = tunnel else {
            state.hold(None);
            if !state.url().is_empty() {
                if let Err(e) = state
                    .record(&bus, None, "", "no tunnel is configured")
                    .await
                {
                    tracing::warn!(error = %e, "cannot clear the public URL now");
                }
            }
            status("no tunnel is configured");
            match wait(CONFIG_POLL, &config_changed, &mut stop).await {
                Woke::Stop => return,
                _ => continue,
            }
        };
        if refused.as_ref() == Some(&tunnel) {
            status("the provider refused the tunnel config; waiting for a new configuration");
            match wait(CONFIG_POLL, &config_changed, &mut stop).await {
                Woke::Stop => return,
                _ => continue,
            }
        }
        refused = None;
        let prepared = async {
            let package = find_package(&bus, &tunnel.provider).await?;
            let addr = listen_addr(&bus, fixed_addr).await?;
            Ok::<_, String>((package, addr))
        }
        .await;
        let (package, addr) = match prepared {
            Ok(p) => p,
            Err(e) => {
                tracing::warn!(error = %e, provider = %tunnel.provider, "cannot start the tunnel yet");
                status(&format!("cannot start the tunnel yet: {e}"));
                match wait(RETRY.max(backoff / 5), &config_changed, &mut stop).await {
                    Woke::Stop => return,
                    _ => continue,
                }
            }
        };
        let held = Held {
            run_id: new_run_id(),
            provider: tunnel.provider.clone(),
            package: package.clone(),
        };
        state.hold(Some(held.clone()));
        state.runs.fetch_add(1, Ordering::SeqCst);
        tracing::info!(run_id = %held.run_id, provider = %held.provider, package = %package, %addr, "starting the tunnel run");
        status(&format!("running the {} tunnel ({package})", held.provider));
        let cancel = CancelToken::new();
        let request = ExtCall::new(
            package.clone(),
            TunnelRunParams {
                tunnel_type: tunnel.provider.clone(),
                addr: addr.to_string(),
                config: tunnel.run_config(),
                run_id: held.run_id.clone(),
            },
        )
        .held();
        let call = bus.call_typed_with(
            &request,
            CallOptions {
                timeout: None,
                cancel: Some(cancel.clone()),
                in_transaction: false,
            },
        );
        tokio::pin!(call);
        // Hold the call; a new configuration that changes the tunnel, or the stop,
        // cancels it.
        let mut cancelled_for: Option<&str> = None;
        let ended = loop {
            let woke = tokio::select! {
                r = &mut call => break r,
                _ = config_changed.notified(), if cancelled_for.is_none() => Woke::Config,
                _ = stop.changed(), if cancelled_for.is_none() => Woke::Stop,
            };
            match woke {
                Woke::Config => match configured(&bus).await {
                    Ok(now) if now.as_ref() != Some(&tunnel) => {
                        tracing::info!(run_id = %held.run_id, "the tunnel's configuration changed: stopping the run to start it again");
                        cancelled_for = Some("reconfigured");
                        cancel.cancel();
                    }
                    _ => {}
                },
                _ => {
                    if *stop.borrow() {
                        cancelled_for = Some("stopping");
                        cancel.cancel();
                    }
                }
            }
        };
        let published = state.published();
        state.hold(None);
        if let Some(why) = cancelled_for {
            // Its own cancel: the provider was sent `$/cancel` and stops.
            state.stopped(why);
            if let Err(e) = state.record(&bus, None, "", why).await {
                tracing::warn!(error = %e, "cannot clear the public URL now");
            }
            if why == "stopping" {
                return;
            }
            backoff = BACKOFF_FIRST;
            continue;
        }
        let (why, invalid) = match &ended {
            Ok(_) => ("the provider ended the run".to_owned(), false),
            Err(e) => (
                e.to_string(),
                e.code() == Some(Code::Invalid.as_str()) && !matches!(e, CallError::Transport(_)),
            ),
        };
        state.stopped(&why);
        if let Err(e) = state.record(&bus, None, "", &why).await {
            tracing::warn!(error = %e, "cannot clear the public URL now");
        }
        if invalid {
            tracing::error!(run_id = %held.run_id, provider = %held.provider, %why,
                "the provider refused the tunnel config: not started again until the configuration changes");
            refused = Some(tunnel);
            continue;
        }
        if published {
            backoff = BACKOFF_FIRST;
        }
        tracing::warn!(run_id = %held.run_id, provider = %held.provider, %why,
            "the tunnel run ended; starting it again in {backoff:?}");
        status(&format!(
            "the tunnel run ended; starting again in {backoff:?}"
        ));
        let waited = wait(backoff, &config_changed, &mut stop).await;
        backoff = next_backoff(backoff);
        if let Woke::Stop = waited {
            return;
        }
        if let Woke::Config = waited {
            backoff = BACKOFF_FIRST;
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn the_backoff_doubles_to_five_minutes() {
        let mut b = BACKOFF_FIRST;
        let mut seen = vec![b];
        for _ in 0..8 {
            b = next_backoff(b);
            seen.push(b);
        }
        assert_eq!(seen[1], Duration::from_secs(10));
        assert_eq!(*seen.last().unwrap(), BACKOFF_MAX);
    }

    #[test]
    fn a_type_is_served_by_its_package() {
        let names: Vec<String> = ["ssh", "ngrok", "webhook"].map(String::from).into();
        assert_eq!(package_for("ssh", &names).as_deref(), Some("ssh"));
        assert_eq!(package_for("ngrok-edge", &names).as_deref(), Some("ngrok"));
        assert_eq!(package_for("sshd", &names), None);
        assert_eq!(package_for("cloudflared", &names), None);
    }

    #[test]
    fn unspecified_addresses_become_loopback_and_run_ids_differ() {
        assert_eq!(
            loopback_if_unspecified("0.0.0.0:80".parse().unwrap()).to_string(),
            "127.0.0.1:80"
        );
        assert_eq!(
            loopback_if_unspecified("[::]:80".parse().unwrap()).to_string(),
            "[::1]:80"
        );
        assert_eq!(
            loopback_if_unspecified("10.0.0.1:80".parse().unwrap()).to_string(),
            "10.0.0.1:80"
        );
        let (a, b) = (new_run_id(), new_run_id());
        assert!(a.starts_with("run_") && a.len() == 20 && a != b);
    }
}
