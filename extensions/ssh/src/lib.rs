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
//! It is also the `ssh` container provider ([`container`]): a binding with
//! `container: {type: "ssh"}` runs each launch on another machine over SSH, through
//! the attach program [`attach`] (`__ssh-attach`).
//!
//! Modules: [`config`] the tunnel config, [`tunnel`] running ssh, [`container`] the
//! container provider, [`attach`] its attach program.

#![warn(missing_docs)]

pub mod attach;
pub mod config;
pub mod container;
pub mod tunnel;

use protocol::container::{
    ContainerProviderCreateParams, ContainerProviderInspectParams, ContainerProviderListParams,
    ContainerProviderPlanParams, ContainerProviderRemoveParams, ContainerProviderSignalParams,
    ContainerProviderStopParams,
};
use protocol::wire::{validate_kind, ValidateParams, ValidateResult};

/// The manifest, `open-conduit-extension.json`.
pub const MANIFEST: &str = include_str!("../open-conduit-extension.json");

/// The tunnel type.
pub const TUNNEL_TYPE: &str = "ssh";

/// How long a stopped ssh gets after SIGTERM before SIGKILL.
pub const STOP_GRACE: std::time::Duration = sdk::tunnel::STOP_GRACE;

/// `validate`: kind `tunnel` (the tunnel's config) or kind `container` (the
/// container provider's).
fn validate(p: &ValidateParams) -> ValidateResult {
    if p.kind == validate_kind::CONTAINER {
        container::validate(p)
    } else {
        config::validate(p)
    }
}

/// Runs a blocking provider call (each is one or two ssh exchanges) off the runtime.
async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, protocol::RpcError> + Send + 'static,
) -> Result<T, protocol::RpcError> {
    tokio::task::spawn_blocking(f).await.map_err(|e| {
        protocol::RpcError::new(protocol::Code::Internal, format!("the call failed: {e}"))
    })?
}

/// The extension, with every handler.
pub fn extension() -> Result<sdk::Extension, String> {
    let ext = sdk::tunnel::provider(MANIFEST, tunnel::run, validate)?
        .on::<ContainerProviderPlanParams, _, _>(|_ctx, p| async move { container::plan(&p) })
        .on::<ContainerProviderCreateParams, _, _>(|_ctx, p| async move {
            blocking(move || container::create(&p)).await
        })
        .on::<ContainerProviderInspectParams, _, _>(|_ctx, p| async move {
            blocking(move || container::inspect(&p)).await
        })
        .on::<ContainerProviderListParams, _, _>(|_ctx, p| async move {
            blocking(move || container::list(&p)).await
        })
        .on::<ContainerProviderSignalParams, _, _>(|_ctx, p| async move {
            blocking(move || container::signal(&p)).await
        })
        .on::<ContainerProviderStopParams, _, _>(|_ctx, p| async move {
            blocking(move || container::stop(&p)).await
        })
        .on::<ContainerProviderRemoveParams, _, _>(|_ctx, p| async move {
            blocking(move || container::remove(&p)).await
        });
    if let Some(e) = ext.errors().first() {
        return Err(e.to_string());
    }
    Ok(ext)
}

/// The binary's entry point: the provider served over stdio, or the attach program
/// when the first argument is `__ssh-attach`. Returns the exit status.
pub fn main() -> i32 {
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    if args.get(1).is_some_and(|a| a == container::ATTACH_ARG) {
        return attach::main(&args);
    }
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
        assert_eq!(
            m.provides.containers[0].type_name,
            container::CONTAINER_TYPE
        );
        for method in [
            "tunnel.run",
            "tunnel.url",
            "validate",
            "container_provider.plan",
            "container_provider.create",
            "container_provider.inspect",
            "container_provider.list",
            "container_provider.signal",
            "container_provider.stop",
            "container_provider.remove",
        ] {
            assert!(m.enables(method), "{method}");
        }
        assert!(extension().is_ok());
    }
}
