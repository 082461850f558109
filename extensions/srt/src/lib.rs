//! The `srt` sandbox provider: each launch of a binding with `sandbox: {type: "srt"}`
//! is planned as an invocation of Anthropic's sandbox runtime (`srt`, which on Linux
//! confines the command with bubblewrap and routes its network through a proxy that
//! keeps to an allow-list).
//!
//! `sandbox_provider.plan` writes a settings file for the launch in the package's
//! state directory (which every sandbox is denied) and answers
//! `srt --settings FILE -c 'ulimit -u N … && ARGV…'`: reads everywhere but the
//! denied paths (the host's protected set, the config's `deny_read`), writes only
//! where the needs say (the workspace, the run's own folders: srt's own default
//! write paths are denied), the network only to the needs' hosts and the config's
//! `allowed_domains`. The plan's data keeps the file's SHA-256.
//! `sandbox_provider.adopt` proves a live launch is inside its sandbox ([`adopt`]).
//! `validate` kind `sandbox` checks the config; the check `srt.sandbox` (doctor)
//! runs a command in a sandbox.
//!
//! Each run is limited to the binding's `max_processes` ([`limit`]: `ulimit -u`
//! inside, and as root a pids cgroup).
//!
//! Modules: [`config`] the sandbox config, [`plan`] the settings and the argv,
//! [`limit`] the process limit, [`adopt`] the proof, [`check`] the doctor check,
//! [`shell`] the shell quoting of the plan's and the limit's command lines.

#![warn(missing_docs)]

pub mod adopt;
pub mod check;
pub mod config;
pub mod limit;
pub mod plan;
pub mod shell;

use protocol::sandbox::{SandboxProviderAdoptParams, SandboxProviderPlanParams};
use protocol::wire::{CheckRunParams, ValidateParams};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

/// The manifest, `open-conduit-extension.json`.
pub const MANIFEST: &str = include_str!("../open-conduit-extension.json");

/// The sandbox type.
pub const SANDBOX_TYPE: &str = "srt";

/// The extension, with every handler.
pub fn extension() -> Result<sdk::Extension, String> {
    let state: Arc<Mutex<Option<PathBuf>>> = Arc::default();
    let init = state.clone();
    let scratch = state.clone();
    let ext = sdk::Extension::new(MANIFEST)
        .map_err(|e| e.to_string())?
        .on::<SandboxProviderPlanParams, _, _>(move |_ctx, p| {
            let dir = state.lock().unwrap_or_else(|e| e.into_inner()).clone();
            async move { plan::plan(dir.as_deref(), &p) }
        })
        .on::<SandboxProviderAdoptParams, _, _>(|_ctx, p| async move { adopt::adopt(&p) })
        .on::<ValidateParams, _, _>(|_ctx, p| async move { Ok(config::validate(&p)) })
        .on::<CheckRunParams, _, _>(move |_ctx, p| {
            let dir = scratch
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .clone()
                .unwrap_or_else(std::env::temp_dir);
            async move { Ok(check::check(&p, &dir).await) }
        })
        .on_initialize(move |params| {
            let dir = params
                .get("state_dir")
                .and_then(serde_json::Value::as_str)
                .map(PathBuf::from);
            *init.lock().unwrap_or_else(|e| e.into_inner()) = dir;
        });
    if let Some(e) = ext.errors().first() {
        return Err(e.to_string());
    }
    Ok(ext)
}

/// The binary's entry point: the provider served over stdio. Returns the exit status.
pub fn main() -> i32 {
    match extension() {
        Ok(ext) => sdk::run(ext),
        Err(e) => {
            eprintln!("srt: {e}");
            2
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn the_manifest_declares_the_sandbox_type_and_its_methods() {
        let m = protocol::manifest::parse_manifest(MANIFEST.as_bytes()).unwrap();
        assert_eq!(m.name, "srt");
        assert_eq!(m.provides.sandboxes[0].type_name, SANDBOX_TYPE);
        for method in [
            "sandbox_provider.plan",
            "sandbox_provider.adopt",
            "validate",
            "check.run",
        ] {
            assert!(m.enables(method), "{method}");
        }
        assert!(extension().is_ok());
    }
}
