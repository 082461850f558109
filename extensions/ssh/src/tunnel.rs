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
    // A key held by a connection is written to a file of this run's own (0600),
    // removed when the run ends.
    let mut config = config;
    let _key = match config.key_secret.clone() {
        Some((connection, secret)) => {
            let key = KeyFile::write(&ctx, &p.run_id, &connection, &secret).await?;
            config.identity_file = Some(key.0.clone());
            Some(key)
        }
        None => None,
    };
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

/// A private key from a connection's secret, in a file only this process may read;
/// removed when dropped.
struct KeyFile(std::path::PathBuf);

impl KeyFile {
    async fn write(
        ctx: &sdk::Ctx,
        run_id: &str,
        connection: &str,
        secret: &str,
    ) -> Result<KeyFile, RpcError> {
        use std::io::Write;
        use std::os::unix::fs::OpenOptionsExt;
        let key = sdk::tunnel::connection_secret(ctx, connection, secret).await?;
        let safe: String = run_id
            .chars()
            .filter(|c| c.is_ascii_alphanumeric() || *c == '-')
            .take(64)
            .collect();
        let path = std::env::temp_dir().join(format!("oc-ssh-key-{}-{safe}", std::process::id()));
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&path)
            .map_err(|e| {
                RpcError::new(
                    protocol::Code::Unavailable,
                    format!("cannot write the key file {}: {e}", path.display()),
                )
            })?;
        let guard = KeyFile(path);
        // ssh wants the key's last line ended (a `file:` reference drops it).
        f.write_all(format!("{}\n", key.trim_end()).as_bytes())
            .map_err(|e| {
                RpcError::new(
                    protocol::Code::Unavailable,
                    format!("cannot write the key file: {e}"),
                )
            })?;
        Ok(guard)
    }
}

impl Drop for KeyFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}
