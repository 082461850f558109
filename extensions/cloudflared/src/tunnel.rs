//! `tunnel.run`: cloudflared as a child in its own process group ([`sdk::tunnel`]),
//! for as long as the host holds the call.

use protocol::wire::{TunnelRunParams, TunnelRunResult};
use protocol::{Code, RpcError};
use sdk::tunnel::Event;

use crate::config::Config;

/// What cloudflared logs once a connection to Cloudflare's edge is registered
/// (`connection/observer.go`, `logConnected`): the tunnel is up.
pub const CONNECTED: &str = "Registered tunnel connection";
/// The quick tunnel's domain (`cmd/cloudflared/tunnel/quick_tunnel.go`: the
/// hostname trycloudflare.com answers, printed in the box).
pub const QUICK_DOMAIN: &str = ".trycloudflare.com";
/// The largest token file read.
pub const MAX_TOKEN: u64 = 16 * 1024;
/// The config field naming the token file.
const FILE_FIELD: &str = "token_file";

/// The quick tunnel's URL in a cloudflared log line, if the line has one: the
/// banner's `|  https://<words>.trycloudflare.com  |`.
pub fn quick_url(line: &str) -> Option<String> {
    line.split(|c: char| c.is_whitespace() || c == '|')
        .find_map(|word| {
            let host = word.strip_prefix("https://")?.trim_end_matches('/');
            let label = host.strip_suffix(QUICK_DOMAIN)?;
            let ok = !label.is_empty()
                && label
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'.');
            ok.then(|| format!("https://{host}"))
        })
}

/// Serve one `tunnel.run`: an error when the config cannot run (`invalid`, which
/// the host does not retry), when cloudflared cannot start or dies, or prints a
/// quick tunnel URL that is not https (`unavailable`), or when the host refuses
/// the URL.
pub async fn run(ctx: sdk::Ctx, p: TunnelRunParams) -> Result<TunnelRunResult, RpcError> {
    sdk::tunnel::check_type(&p, crate::TUNNEL_TYPE)?;
    let config = Config::parse(&p.config).map_err(|problems| sdk::tunnel::refusal(&problems))?;
    let addr = sdk::tunnel::listener(&p)?;
    let mut cmd = tokio::process::Command::new(&config.binary);
    cmd.args(config.args(&addr.to_string()));
    if let Some(path) = &config.token_file {
        cmd.env(
            "TUNNEL_TOKEN",
            sdk::tunnel::read_secret_file(FILE_FIELD, path, MAX_TOKEN).await?,
        );
    }
    if let Some((connection, secret)) = &config.token_secret {
        cmd.env(
            "TUNNEL_TOKEN",
            sdk::tunnel::connection_secret(&ctx, connection, secret).await?,
        );
    }
    let mut child = sdk::tunnel::Child::spawn(&format!("cloudflared ({:?})", config.binary), cmd)?;
    eprintln!(
        "cloudflared: run {}: {} to http://{addr}",
        p.run_id,
        if config.named() {
            "a named tunnel"
        } else {
            "a quick tunnel"
        }
    );
    // A named tunnel's URL is the config's; a quick one's is printed.
    let mut url = config.url.clone();
    let mut connected = false;
    let mut published = false;
    loop {
        match child.next().await {
            Event::Ended(e) => return Err(e),
            Event::Line(line) => {
                eprintln!("cloudflared: {line}");
                child.remember(&line);
                if url.is_none() {
                    if let Some(found) = quick_url(&line) {
                        sdk::tunnel::check_https(&found).map_err(|e| {
                            RpcError::new(
                                Code::Unavailable,
                                format!("cloudflared printed a URL that cannot be published: {e}"),
                            )
                        })?;
                        url = Some(found);
                    }
                }
                connected |= line.contains(CONNECTED);
                if let (false, true, Some(u)) = (published, connected, &url) {
                    published = true;
                    sdk::tunnel::publish(&ctx, &p.run_id, u).await?;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The quick tunnel's banner as cloudflared logs it on stderr (its console
    /// format: time, level, message), from `quick_tunnel.go`'s `AsciiBox`.
    #[test]
    fn the_quick_tunnel_url_is_read_from_the_banner() {
        let banner = [
            "2024-05-01T10:00:00Z INF Requesting new quick Tunnel on trycloudflare.com...",
            "2024-05-01T10:00:01Z INF +--------------------------------------------------------------------------------------------+",
            "2024-05-01T10:00:01Z INF |  Your quick Tunnel has been created! Visit it at (it may take some time to be reachable):  |",
            "2024-05-01T10:00:01Z INF |  https://words-like-these-here.trycloudflare.com                                           |",
        ];
        let found: Vec<String> = banner.iter().filter_map(|l| quick_url(l)).collect();
        assert_eq!(found, ["https://words-like-these-here.trycloudflare.com"]);
        // The disclaimer's links are not it.
        assert_eq!(
            quick_url("INF ... Terms of Use (https://www.cloudflare.com/website-terms/) ..."),
            None
        );
        assert_eq!(quick_url("http://x.trycloudflare.com"), None);
        assert_eq!(quick_url("https://.trycloudflare.com"), None);
    }
}
