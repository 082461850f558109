//! `tunnel.run`: ssh as a child in its own process group, for as long as the host
//! holds the call (the supervision is [`sdk::tunnel`]'s, shared with the other
//! tunnel providers).

use protocol::wire::{TunnelRunParams, TunnelRunResult};
use protocol::RpcError;
use sdk::tunnel::Event;

use crate::config::Config;

/// What ssh says (with `-v`) once the server took the reverse forward.
pub const FORWARD_UP: &str = "remote forward success";

/// Serve one `tunnel.run`: an error when the config cannot run (`invalid`, which
/// the host does not retry), when ssh cannot start or dies (`unavailable`), or when
/// the host refuses the URL.
pub async fn run(ctx: sdk::Ctx, p: TunnelRunParams) -> Result<TunnelRunResult, RpcError> {
    sdk::tunnel::check_type(&p, crate::TUNNEL_TYPE)?;
    let config = Config::parse(&p.config).map_err(|problems| sdk::tunnel::refusal(&problems))?;
    let addr = sdk::tunnel::listener(&p)?;
    let mut cmd = tokio::process::Command::new(&config.ssh);
    cmd.args(config.args(&addr.to_string()));
    let mut child = sdk::tunnel::Child::spawn(&format!("ssh ({:?})", config.ssh), cmd)?;
    eprintln!(
        "ssh: run {}: forwarding {} on {}@{}:{} to {addr}",
        p.run_id, config.remote_port, config.user, config.host, config.port
    );
    let mut published = false;
    loop {
        match child.next().await {
            Event::Ended(e) => return Err(e),
            Event::Line(line) => {
                let up = line.contains(FORWARD_UP);
                if !line.starts_with("debug") || up {
                    eprintln!("ssh: {line}");
                }
                if !line.starts_with("debug") {
                    child.remember(&line);
                }
                if !published && up {
                    published = true;
                    sdk::tunnel::publish(&ctx, &p.run_id, &config.url).await?;
                }
            }
        }
    }
}
