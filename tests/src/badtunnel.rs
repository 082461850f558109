//! `badtunnel`: a test tunnel provider that publishes the URL its config names
//! (`{"url": "..."}`), whatever it is, says on stderr how the host answered
//! (`badtunnel: tunnel.url answered ok` or `... refused <code>`), then holds the run
//! until cancelled. It forwards nothing.

use protocol::wire::{TunnelRunParams, TunnelRunResult, TunnelUrlParams};
use protocol::RpcError;

/// The manifest.
pub const MANIFEST: &str = include_str!("../badtunnel.json");

/// The extension.
pub fn extension() -> Result<sdk::Extension, sdk::SdkError> {
    Ok(
        sdk::Extension::new(MANIFEST)?.on::<TunnelRunParams, _, _>(|ctx, p| async move {
            let url = p.config["url"].as_str().unwrap_or_default().to_owned();
            let answer = ctx
                .host
                .call_typed(&TunnelUrlParams {
                    run_id: p.run_id.clone(),
                    url: url.clone(),
                })
                .await;
            match answer {
                Ok(_) => eprintln!("badtunnel: tunnel.url answered ok for {url}"),
                Err(e) => eprintln!(
                    "badtunnel: tunnel.url refused {} for {url}",
                    e.code().unwrap_or("transport")
                ),
            }
            // A run it no longer holds: tunneld refuses it.
            let stale = ctx
                .host
                .call_typed(&TunnelUrlParams {
                    run_id: "run_stale".into(),
                    url: "https://stale.example".into(),
                })
                .await;
            if let Err(e) = stale {
                eprintln!(
                    "badtunnel: a stale run's tunnel.url refused {}",
                    e.code().unwrap_or("transport")
                );
            }
            ctx.cancel.cancelled().await;
            Ok::<TunnelRunResult, RpcError>(TunnelRunResult {})
        }),
    )
}

/// The binary's entry point.
pub fn main_entry() -> i32 {
    match extension() {
        Ok(ext) => sdk::run(ext),
        Err(e) => {
            eprintln!("badtunnel: {e}");
            2
        }
    }
}
