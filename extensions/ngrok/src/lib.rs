//! The `ngrok` tunnel provider: exposes the webhook listener through the ngrok agent.
//!
//! `tunnel.run` starts `ngrok http <listen addr> --log stdout --log-format json`
//! (`--domain <domain>` when the config reserves one), with the authtoken from
//! `authtoken_file` in the agent's `NGROK_AUTHTOKEN` environment variable (never on
//! its command line). The public URL is read from the agent's local API, as ngrok's
//! agent API documentation gives it (<https://ngrok.com/docs/agent/api/>, "List
//! tunnels"): `GET http://127.0.0.1:4040/api/tunnels` answers `{"tunnels":
//! [{"name": "command_line", "public_url": "https://….ngrok-free.app", "proto":
//! "https", "config": {"addr": "http://127.0.0.1:8420", …}, …}], "uri":
//! "/api/tunnels"}`. The API is polled every [`tunnel::POLL`], at most
//! [`tunnel::MAX_POLLS`] times, until an https tunnel to the listener is there; that
//! `public_url` is published. The supervision (process group, parent-death signal,
//! SIGTERM then SIGKILL on cancel, the run's error naming how the agent died) is
//! [`sdk::tunnel`]'s.

#![warn(missing_docs)]

pub mod api;
pub mod config;
pub mod tunnel;

/// The manifest, `open-conduit-extension.json`.
pub const MANIFEST: &str = include_str!("../open-conduit-extension.json");

/// The tunnel type.
pub const TUNNEL_TYPE: &str = "ngrok";

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
        assert_eq!(m.name, "ngrok");
        assert_eq!(m.provides.tunnels[0].type_name, TUNNEL_TYPE);
        for method in ["tunnel.run", "tunnel.url", "validate"] {
            assert!(m.enables(method), "{method}");
        }
        assert!(extension().is_ok());
    }

    /// With ngrok's agent on PATH, its `--version` answers (it reaches no network);
    /// without it the check is skipped.
    #[test]
    fn the_real_ngrok_answers_its_version_when_installed() {
        match std::process::Command::new("ngrok")
            .arg("--version")
            .output()
        {
            Ok(out) => {
                assert!(out.status.success(), "{out:?}");
                let said = String::from_utf8_lossy(&out.stdout);
                assert!(said.contains("ngrok version"), "{said}");
            }
            Err(e) => eprintln!("SKIPPED: no ngrok on PATH ({e})"),
        }
    }
}
