//! The `ssh` tunnel provider: exposes the webhook listener through a reverse forward
//! (`ssh -N -R`) to an SSH server the operator runs on the public side.
//!
//! `tunnel.run` starts `ssh -v -N -R [bind:]<remote_port>:<addr> -p <port> user@host`
//! with `ExitOnForwardFailure=yes`, `ServerAliveInterval`, `BatchMode=yes`,
//! `StrictHostKeyChecking`, and the config's key (`-i`) and known_hosts file, in a
//! process group of its own that dies with the extension (`PR_SET_PDEATHSIG`). Once
//! ssh reports the remote forward up, it publishes the config's `url` through
//! `tunnel.url`; when ssh dies the run ends with an error (the host starts it again);
//! on `$/cancel` it stops the group (SIGTERM, then SIGKILL past [`STOP_GRACE`]) and
//! answers. `validate` kind `tunnel` checks the config, each problem with its pointer.
//!
//! Modules: [`config`] the tunnel config, [`tunnel`] running ssh.

#![warn(missing_docs)]

pub mod config;
pub mod tunnel;

/// The manifest, `open-conduit-extension.json`.
pub const MANIFEST: &str = include_str!("../open-conduit-extension.json");

/// The tunnel type.
pub const TUNNEL_TYPE: &str = "ssh";

/// How long a stopped ssh gets after SIGTERM before SIGKILL.
pub const STOP_GRACE: std::time::Duration = sdk::tunnel::STOP_GRACE;

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
        assert_eq!(m.name, "ssh");
        assert_eq!(m.provides.tunnels[0].type_name, TUNNEL_TYPE);
        for method in ["tunnel.run", "tunnel.url", "validate"] {
            assert!(m.enables(method), "{method}");
        }
        assert!(extension().is_ok());
    }
}
