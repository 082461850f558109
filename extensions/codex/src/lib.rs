//! The `codex` executor extension: runs each agent turn as a detached `codex exec
//! --json` (OpenAI's Codex CLI, non-interactive) on the Work's session, resuming it
//! (`codex exec resume <session>`) on the next turn, in the Work's workspace, with the
//! toolbelt as an MCP server (`open-conduit mcp`).
//!
//! Each segment lives in `<runs>/<execution_id>/<n>/` ([`rundir`]) and runs under the
//! shared wrapper ([`sdk::wrapper`]: `open-conduit-wrap __wrap-codex`, or this binary
//! re-executed so without it), a
//! session leader of its own, so the segment outlives this process and is adopted
//! after a restart ([`sdk::detached`]). The session is wholly in the Work's
//! `CODEX_HOME` (`<state>/codex-home/<work>`), and continuity ([`continuity`]) keeps
//! the session and its running totals in the extension's KV. The prompt, the
//! structured status, the usage-limit hold and `secret_env` are the agent executors'
//! shared ones ([`sdk::agent`]).
//!
//! Modules: [`config`] the binding config, [`env`] codex's environment, [`stream`]
//! what its events and rollout say, [`continuity`], [`executor`] the methods.

#![warn(missing_docs)]

pub mod check;
pub mod config;
pub mod continuity;
pub mod env;
pub mod executor;
pub mod rundir;
pub mod stream;

use executor::Codex;
use protocol::wire::{
    ExecutorForgetParams, ExecutorInterruptParams, ExecutorLiveParams, ExecutorRecoverParams,
    ExecutorResumeParams, ExecutorRunParams, ExecutorStopParams, ExecutorWaitParams,
    ValidateParams,
};

/// The manifest, `open-conduit-extension.json`.
pub const MANIFEST: &str = include_str!("../open-conduit-extension.json");

macro_rules! handle {
    ($ext:ident, $cx:ident, $params:ty, host, $method:ident) => {{
        let cx = $cx.clone();
        $ext.on::<$params, _, _>(move |ctx, p| {
            let cx = cx.clone();
            async move { cx.$method(&ctx.host, p).await }
        })
    }};
    ($ext:ident, $cx:ident, $params:ty, $method:ident) => {{
        let cx = $cx.clone();
        $ext.on::<$params, _, _>(move |_ctx, p| {
            let cx = cx.clone();
            async move { cx.$method(p).await }
        })
    }};
}

/// The extension, with every handler, serving `cx`.
pub fn extension(cx: Codex) -> Result<sdk::Extension, String> {
    let ext = sdk::Extension::new(MANIFEST).map_err(|e| e.to_string())?;
    let ext = handle!(ext, cx, ExecutorRunParams, host, run);
    let ext = handle!(ext, cx, ExecutorResumeParams, host, resume);
    let ext = handle!(ext, cx, ExecutorRecoverParams, host, recover);
    let ext = handle!(ext, cx, ExecutorWaitParams, host, wait);
    let ext = handle!(ext, cx, ExecutorInterruptParams, interrupt);
    let ext = handle!(ext, cx, ExecutorStopParams, stop);
    let ext = handle!(ext, cx, ExecutorForgetParams, host, forget);
    let ext = handle!(ext, cx, ExecutorLiveParams, live);
    let ext = ext
        .on::<ValidateParams, _, _>(|_ctx, p| async move { Ok(executor::validate(&p)) })
        .on::<protocol::wire::CheckRunParams, _, _>(
            |_ctx, p| async move { Ok(check::check(&p).await) },
        )
        .on_migrate(|_ctx, _from, _to| async move { Ok(()) });
    if let Some(e) = ext.errors().first() {
        return Err(e.to_string());
    }
    Ok(ext)
}

/// The binary's entry point: the wrapper when started as `__wrap-codex`, else the
/// extension served over stdio. Returns the exit status.
pub fn main() -> i32 {
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    if args.get(1).and_then(|a| a.to_str()) == Some(rundir::WRAP_ARG) {
        return rundir::wrap(&args[2..]);
    }
    let dirs = sdk::dirs::SharedDirs::default();
    match extension(Codex::new(dirs.clone())) {
        Ok(ext) => sdk::run(ext.on_initialize(sdk::dirs::record(dirs, executor::EXECUTOR))),
        Err(e) => {
            eprintln!("codex: {e}");
            2
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn the_manifest_declares_the_executor_and_its_controls() {
        let m = protocol::manifest::parse_manifest(MANIFEST.as_bytes()).unwrap();
        assert_eq!(m.name, "codex");
        assert_eq!(m.command, ["oc-codex-extension"]);
        let ex = &m.provides.executors[0];
        assert_eq!(ex.name, executor::EXECUTOR);
        assert!(ex.labels.interrupt && ex.labels.resume && !ex.labels.inject);
        assert_eq!(ex.labels.toolbelt, "mcp");
        for method in [
            "executor.run",
            "executor.recover",
            "executor.wait",
            "executor.resume",
            "executor.interrupt",
            "executor.stop",
            "executor.forget",
            "executor.live",
            "kv.get",
            "kv.commit",
        ] {
            assert!(m.enables(method), "{method}");
        }
        assert!(extension(Codex::new(Default::default())).is_ok());
    }
}
