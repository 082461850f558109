//! The `docker` container provider: each launch of a binding with
//! `container: {type: "docker", config: {image, …}}` runs in a container made for its
//! attempt through the Docker Engine API on a unix socket (Docker's, or podman's
//! `podman system service`).
//!
//! `container_provider.plan` ([`plan`]) answers the Docker create body (the image,
//! the launch's argv, env and cwd, the needs bind-mounted at the same paths and
//! nothing else of the host, no privileges, every capability dropped, an init, a
//! pids limit, the network policy, labels naming the execution, its Work and the
//! host) and the attach client's argv; `create`, `inspect`, `list`, `signal`, `stop`
//! and `remove` ([`provider`]) act on the engine ([`engine`]). The attach client
//! ([`attach`], this program as `__docker-attach`) is what the executor runs: it
//! carries the container's streams and ends with its exit status. `validate` kind
//! `container` checks the config ([`config`]); the check `engine` (doctor) asks each
//! binding's engine for its image ([`check`]).

#![warn(missing_docs)]

pub mod attach;
pub mod check;
pub mod config;
pub mod engine;
pub mod plan;
pub mod provider;

use protocol::container::{
    ContainerProviderCreateParams, ContainerProviderInspectParams, ContainerProviderListParams,
    ContainerProviderPlanParams, ContainerProviderRemoveParams, ContainerProviderSignalParams,
    ContainerProviderStopParams,
};
use protocol::wire::{CheckRunParams, ValidateParams};

/// The manifest, `open-conduit-extension.json`.
pub const MANIFEST: &str = include_str!("../open-conduit-extension.json");

/// The container type.
pub const CONTAINER_TYPE: &str = "docker";

/// The extension, with every handler.
pub fn extension() -> Result<sdk::Extension, String> {
    let ext = sdk::Extension::new(MANIFEST)
        .map_err(|e| e.to_string())?
        .on::<ContainerProviderPlanParams, _, _>(|_ctx, p| async move { plan::plan(&p) })
        .on::<ContainerProviderCreateParams, _, _>(
            |_ctx, p| async move { provider::create(&p).await },
        )
        .on::<ContainerProviderInspectParams, _, _>(
            |_ctx, p| async move { provider::inspect(&p).await },
        )
        .on::<ContainerProviderListParams, _, _>(|_ctx, p| async move { provider::list(&p).await })
        .on::<ContainerProviderSignalParams, _, _>(
            |_ctx, p| async move { provider::signal(&p).await },
        )
        .on::<ContainerProviderStopParams, _, _>(|_ctx, p| async move { provider::stop(&p).await })
        .on::<ContainerProviderRemoveParams, _, _>(
            |_ctx, p| async move { provider::remove(&p).await },
        )
        .on::<ValidateParams, _, _>(|_ctx, p| async move { Ok(config::validate(&p)) })
        .on::<CheckRunParams, _, _>(|_ctx, p| async move { Ok(check::check(&p).await) });
    if let Some(e) = ext.errors().first() {
        return Err(e.to_string());
    }
    Ok(ext)
}

/// The binary's entry point: the attach client when started as `__docker-attach`,
/// else the provider served over stdio. Returns the exit status.
pub fn main() -> i32 {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some(plan::ATTACH_ARG) {
        return attach::main(&args[2..]);
    }
    match extension() {
        Ok(ext) => sdk::run(ext),
        Err(e) => {
            eprintln!("docker: {e}");
            2
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn the_manifest_declares_the_container_type_and_its_methods() {
        let m = protocol::manifest::parse_manifest(MANIFEST.as_bytes()).unwrap();
        assert_eq!(m.name, "docker");
        assert_eq!(m.command, ["oc-docker-extension"]);
        assert_eq!(m.provides.containers[0].type_name, CONTAINER_TYPE);
        for method in [
            "container_provider.plan",
            "container_provider.create",
            "container_provider.inspect",
            "container_provider.list",
            "container_provider.signal",
            "container_provider.stop",
            "container_provider.remove",
            "validate",
            "check.run",
        ] {
            assert!(m.enables(method), "{method}");
        }
        assert!(extension().is_ok());
    }
}
