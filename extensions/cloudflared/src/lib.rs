//! The `cloudflared` tunnel provider: exposes the webhook listener through a
//! Cloudflare Tunnel, run by Cloudflare's `cloudflared` program.
//!
//! * A **quick tunnel** (no `token_file`): `cloudflared tunnel --no-autoupdate --url
//!   http://<listen addr>`. cloudflared asks trycloudflare.com for a random hostname
//!   and logs it on stderr in a box (`cmd/cloudflared/tunnel/quick_tunnel.go`,
//!   `AsciiBox`: `|  https://<words>.trycloudflare.com  |`, each line an INF log
//!   line). That line is the public URL.
//! * A **named tunnel** (`token_file`): `cloudflared tunnel --no-autoupdate run`
//!   with the token in cloudflared's `TUNNEL_TOKEN` environment variable (the
//!   `--token` flag's, kept off the command line where `ps` shows it). Its public
//!   URL is the DNS route the operator gave it in Cloudflare's dashboard, so the
//!   config's `url` says it.
//!
//! Either way the URL is published once cloudflared logs `Registered tunnel
//! connection` (`connection/observer.go`, `logConnected`): the edge can reach it
//! then. Cloudflared's metrics server also answers `GET /quicktunnel` with
//! `{"hostname": "..."}`, but that needs a port chosen ahead (or read back from the
//! log) and a poll; the log lines need neither and come from the one source that
//! also says when the tunnel is up. The supervision (process group, parent-death
//! signal, SIGTERM then SIGKILL on cancel, the run's error naming how cloudflared
//! died) is [`sdk::tunnel`]'s.

#![warn(missing_docs)]

pub mod config;
pub mod tunnel;

/// The manifest, `open-conduit-extension.json`.
pub const MANIFEST: &str = include_str!("../open-conduit-extension.json");

/// The tunnel type.
pub const TUNNEL_TYPE: &str = "cloudflared";

/// The extension, with every handler.
pub fn extension() -> Result<sdk::Extension, String> {
    sdk::tunnel::provider(MANIFEST, tunnel::run, config::validate)
}

/// The binary's entry point: the provider served over stdio. Returns the exit status.
pub fn main() -> i32 {
    sdk::tunnel::serve(TUNNEL_TYPE, extension())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn the_manifest_declares_the_tunnel_type_and_its_methods() {
        let m = protocol::manifest::parse_manifest(MANIFEST.as_bytes()).unwrap();
        assert_eq!(m.name, "cloudflared");
        assert_eq!(m.provides.tunnels[0].type_name, TUNNEL_TYPE);
        for method in ["tunnel.run", "tunnel.url", "validate"] {
            assert!(m.enables(method), "{method}");
        }
        assert!(extension().is_ok());
    }

    /// With Cloudflare's cloudflared on PATH, its `--version` answers (it reaches
    /// no network); without it the check is skipped.
    #[test]
    fn the_real_cloudflared_answers_its_version_when_installed() {
        match std::process::Command::new("cloudflared")
            .arg("--version")
            .output()
        {
            Ok(out) => {
                assert!(out.status.success(), "{out:?}");
                let said = String::from_utf8_lossy(&out.stdout);
                assert!(said.contains("cloudflared version"), "{said}");
            }
            Err(e) => eprintln!("SKIPPED: no cloudflared on PATH ({e})"),
        }
    }
}
