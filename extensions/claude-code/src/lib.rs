//! The `claude-code` executor extension: runs each agent turn as a detached
//! `claude -p` segment on the Work's session, resumes or hands off sessions
//! from continuity it keeps private in its own KV, and gives the agent its
//! toolbelt over MCP.
//!
//! Each segment lives in `<runs>/<execution_id>/<n>/` ([`rundir`]), where
//! `<runs>` is the executor's directory from `initialize`
//! (`executor_dirs.claude-code`), else `<state_dir>/runs`. claude runs under
//! a wrapper (`open-conduit-wrap __wrap-claude-code`, or this binary re-executed so
//! without it: [`sdk::wrapper::program`], [`wrapper`]) that is a
//! session leader of its own, so the segment outlives this process; its
//! stdin is a pipe this process holds (the prompt, then injected input), and
//! its stream-json output goes to `out.jsonl` ([`stream`] reads it), whose last
//! bytes `executor.live` answers while the segment runs ([`sdk::live`]).
//!
//! Modules: [`config`] the binding config, [`prompt`] the turn's prompt and
//! stdin messages, [`continuity`] the private per-Work record and the
//! resume-or-handoff decision, [`env`] claude's environment, [`executor`] the
//! methods; the run directory and the wrapper are [`sdk::detached`] and
//! [`sdk::wrapper`], the directories come from `initialize` ([`sdk::dirs`]).

#![warn(missing_docs)]

pub mod config;
pub mod continuity;
pub mod env;
pub mod executor;
pub mod fake;
pub mod prompt;
pub mod rundir;
pub mod stream;
pub mod usage;
pub mod wrapper;

use executor::ClaudeCode;
use protocol::wire::{
    CheckRunParams, ExecutorAttachParams, ExecutorForgetParams, ExecutorInjectParams,
    ExecutorInterruptParams, ExecutorLiveParams, ExecutorRecoverParams, ExecutorResumeParams,
    ExecutorRunParams, ExecutorStopParams, ExecutorWaitParams, ValidateParams,
};

/// The manifest, `open-conduit-extension.json`.
pub const MANIFEST: &str = include_str!("../open-conduit-extension.json");

macro_rules! handle {
    ($ext:ident, $cc:ident, $params:ty, host, $method:ident) => {{
        let cc = $cc.clone();
        $ext.on::<$params, _, _>(move |ctx, p| {
            let cc = cc.clone();
            async move { cc.$method(&ctx.host, p).await }
        })
    }};
    ($ext:ident, $cc:ident, $params:ty, $method:ident) => {{
        let cc = $cc.clone();
        $ext.on::<$params, _, _>(move |_ctx, p| {
            let cc = cc.clone();
            async move { cc.$method(p).await }
        })
    }};
}

/// The extension, with every handler, serving `cc`.
pub fn extension(cc: ClaudeCode) -> Result<sdk::Extension, String> {
    let ext = sdk::Extension::new(MANIFEST).map_err(|e| e.to_string())?;
    let ext = handle!(ext, cc, ExecutorRunParams, host, run);
    let ext = handle!(ext, cc, ExecutorResumeParams, host, resume);
    let ext = handle!(ext, cc, ExecutorRecoverParams, host, recover);
    let ext = handle!(ext, cc, ExecutorWaitParams, host, wait);
    let ext = handle!(ext, cc, ExecutorInjectParams, host, inject);
    let ext = handle!(ext, cc, ExecutorInterruptParams, interrupt);
    let ext = handle!(ext, cc, ExecutorStopParams, stop);
    let ext = handle!(ext, cc, ExecutorForgetParams, host, forget);
    let ext = handle!(ext, cc, ExecutorAttachParams, host, attach);
    let ext = handle!(ext, cc, ExecutorLiveParams, live);
    let ext = ext
        .on::<ValidateParams, _, _>(|_ctx, p| async move { Ok(executor::validate(&p)) })
        .on::<CheckRunParams, _, _>(|_ctx, p| async move {
            Ok(executor::check(&p, executor::is_root()))
        })
        .on_migrate(|_ctx, _from, _to| async move { Ok(()) });
    if let Some(e) = ext.errors().first() {
        return Err(e.to_string());
    }
    Ok(ext)
}

/// The binary's entry point: the wrapper when started as `__wrap-claude-code`, else the
/// extension served over stdio. Returns the exit status.
pub fn main() -> i32 {
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    if args.get(1).and_then(|a| a.to_str()) == Some(rundir::WRAP_ARG) {
        return wrapper::main(&args[2..]);
    }
    let dirs = sdk::dirs::SharedDirs::default();
    match extension(ClaudeCode::new(dirs.clone())) {
        Ok(ext) => sdk::run(ext.on_initialize(sdk::dirs::record(dirs, executor::EXECUTOR))),
        Err(e) => {
            eprintln!("claude-code: {e}");
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
        assert_eq!(m.name, "claude-code");
        assert_eq!(m.command, ["oc-claude-code-extension"]);
        assert_eq!(m.kv_version, 1);
        let ex = &m.provides.executors[0];
        assert_eq!(ex.name, executor::EXECUTOR);
        assert!(ex.labels.interrupt && ex.labels.inject && ex.labels.resume);
        assert_eq!(ex.labels.toolbelt, "mcp");
        for method in [
            "executor.run",
            "executor.recover",
            "executor.wait",
            "executor.resume",
            "executor.inject",
            "executor.interrupt",
            "executor.stop",
            "executor.forget",
            "executor.attach",
            "executor.live",
            "check.run",
            "kv.get",
            "kv.commit",
        ] {
            assert!(m.enables(method), "{method}");
        }
        assert!(extension(ClaudeCode::new(Default::default())).is_ok());
    }
}
