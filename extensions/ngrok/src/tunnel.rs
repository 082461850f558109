//! `tunnel.run`: the ngrok agent as a child in its own process group
//! ([`sdk::tunnel`]), its public URL from its local API.

use std::time::Duration;

use protocol::wire::{TunnelRunParams, TunnelRunResult};
use protocol::{Code, RpcError};
use sdk::tunnel::Event;

use crate::config::Config;

/// Between two polls of the agent's API.
pub const POLL: Duration = Duration::from_millis(250);
/// How many polls before the run gives up (a minute of them).
pub const MAX_POLLS: u32 = 240;
/// The largest authtoken file read.
pub const MAX_TOKEN: u64 = 16 * 1024;
/// The config field naming the authtoken file.
const FILE_FIELD: &str = "authtoken_file";

/// Serve one `tunnel.run`: an error when the config cannot run (`invalid`, which
/// the host does not retry), when the agent cannot start or dies, shows no https
/// tunnel within [`MAX_POLLS`] polls or a URL that is not https (`unavailable`), or
/// when the host refuses the URL.
pub async fn run(ctx: sdk::Ctx, p: TunnelRunParams) -> Result<TunnelRunResult, RpcError> {
    sdk::tunnel::check_type(&p, crate::TUNNEL_TYPE)?;
    let config = Config::parse(&p.config).map_err(|problems| sdk::tunnel::refusal(&problems))?;
    let addr = sdk::tunnel::listener(&p)?;
    let mut cmd = tokio::process::Command::new(&config.binary);
    cmd.args(config.args(&addr.to_string()));
    if let Some(path) = &config.authtoken_file {
        cmd.env(
            "NGROK_AUTHTOKEN",
            sdk::tunnel::read_secret_file(FILE_FIELD, path, MAX_TOKEN).await?,
        );
    }
    let mut child = sdk::tunnel::Child::spawn(&format!("ngrok ({:?})", config.binary), cmd)?;
    eprintln!(
        "ngrok: run {}: http to {addr}; the URL from {}",
        p.run_id, config.api_addr
    );
    let mut polls = 0u32;
    let mut last_error = String::from("not asked yet");
    let mut published = false;
    let mut tick = tokio::time::interval(POLL);
    loop {
        tokio::select! {
            event = child.next() => match event {
                Event::Ended(e) => return Err(e),
                Event::Line(line) => {
                    eprintln!("ngrok: {line}");
                    child.remember(&line);
                }
            },
            _ = tick.tick(), if !published => {
                polls += 1;
                match crate::api::tunnels(config.api_addr).await {
                    Ok(answer) => match crate::api::public_url(&answer, &addr.to_string()) {
                        Some(url) => {
                            sdk::tunnel::check_https(&url).map_err(|e| RpcError::new(
                                Code::Unavailable,
                                format!("the agent's tunnel URL cannot be published: {e}"),
                            ))?;
                            if let Some(d) = &config.domain {
                                if !url.to_ascii_lowercase().starts_with(&format!("https://{d}")) {
                                    return Err(RpcError::new(
                                        Code::Unavailable,
                                        format!("the agent serves {url}, not the configured domain {d}"),
                                    ));
                                }
                            }
                            published = true;
                            sdk::tunnel::publish(&ctx, &p.run_id, &url).await?;
                        }
                        None => last_error = format!("no https tunnel to {addr} yet"),
                    },
                    Err(e) => last_error = e,
                }
                if !published && polls >= MAX_POLLS {
                    return Err(RpcError::new(
                        Code::Unavailable,
                        format!(
                            "no https tunnel to {addr} in the agent's API on {} after {MAX_POLLS} polls {POLL:?} apart: {last_error}",
                            config.api_addr
                        ),
                    ));
                }
            }
        }
    }
}
