//! The `git` resource provider: hands each Work a workspace of a configured
//! repository.
//!
//! A repository (an `https://`, `ssh://`, `git://` or `file://` URL,
//! `user@host:path`, or a local path) is mirrored once as a bare cache under the
//! resource directory `initialize` names (`resource_dirs.git`) and fetched before
//! each acquisition that makes a workspace. Modes: `shared` (one checkout for the
//! binding), `work` (one `git worktree` per Work on its own branch, kept across its
//! attempts so sessions resume: the default) and `fresh` (a clone per Work that
//! shares nothing writable; `clone` is the same). Acquisition is idempotent per owner
//! and mode; `provider.lookup` never creates; `provider.reconcile` removes what a
//! SIGKILL in the middle of an acquisition left; `provider.sweep` removes the
//! workspaces of closed Works (asking the host `provider.owner_status`), keeps and
//! reports dirty ones, and prunes the caches.
//!
//! Every failure is a structured error: `resource_setup_failed` with `data.what`
//! (`unreachable`, `credential`, `timeout`, `fetch`, `branch`, `checkout`, `cache`)
//! and `data.repository`, `resource_not_found` for a lookup with nothing whole
//! behind it, `resource_exhausted` under the disk floor, `invalid` for a bad config
//! or request. git runs as a child process bounded by `timeout_s`, never prompting.
//!
//! An `https://` repository's credential is its `connection`'s secret (`token`), or,
//! for a `github` GitHub App connection, an installation token the provider mints
//! for that one repository, read-only, kept in memory ([`github_app`]). A `bitbucket`
//! connection's `token` goes with the user `x-token-auth`, else its `app_password`
//! with its `username` ([`bitbucket`]).
//!
//! The doctor check `repositories` ([`check`]) asks every repository a binding's `git`
//! resource names for its branches and holds the free disk space against
//! `min_free_mb`.
//!
//! Modules: [`config`] the resource config, [`git`] running git, [`neutral`] what
//! keeps a command a run planted in its workspace from running, [`provider`] the
//! methods, [`github_app`] a GitHub App connection's tokens, [`bitbucket`] a Bitbucket
//! connection's credential, [`spare`] the spare worktrees a new Work's workspace is made from,
//! [`check`] the doctor check.

#![warn(missing_docs)]

pub mod bitbucket;
pub mod check;
pub mod config;
pub mod fault;
pub mod git;
pub mod github_app;
pub mod neutral;
pub mod provider;
pub mod spare;

use protocol::wire::{
    CheckRunParams, ProviderAcquireParams, ProviderLookupParams, ProviderReconcileParams,
    ProviderSweepParams, ValidateParams,
};
pub use provider::Provider;

/// The manifest, `open-conduit-extension.json`.
pub const MANIFEST: &str = include_str!("../open-conduit-extension.json");

/// The extension, with every handler, serving `provider`.
pub fn extension(provider: Provider) -> Result<sdk::Extension, String> {
    let acquire = provider.clone();
    let lookup = provider.clone();
    let reconcile = provider.clone();
    let sweep = provider.clone();
    let validate = provider.clone();
    let check = provider.clone();
    let configure = provider.clone();
    let init = provider;
    let ext = sdk::Extension::new(MANIFEST)
        .map_err(|e| e.to_string())?
        .on::<ProviderAcquireParams, _, _>(move |ctx, p| {
            let pr = acquire.clone();
            async move { pr.acquire(Some(&ctx.host), p).await }
        })
        .on::<ProviderLookupParams, _, _>(move |_ctx, p| {
            let pr = lookup.clone();
            async move { pr.lookup(p).await }
        })
        .on::<ProviderReconcileParams, _, _>(move |_ctx, p| {
            let pr = reconcile.clone();
            async move { pr.reconcile(p).await }
        })
        .on::<ProviderSweepParams, _, _>(move |ctx, p| {
            let pr = sweep.clone();
            async move { pr.sweep(&ctx.host, p).await }
        })
        .on::<ValidateParams, _, _>(move |_ctx, p| {
            let pr = validate.clone();
            async move { Ok(pr.validate(&p)) }
        })
        .on::<CheckRunParams, _, _>(move |ctx, p| {
            let pr = check.clone();
            async move { Ok(pr.check(Some(&ctx.host), &p).await) }
        })
        .on_configure(move |_ctx, p| {
            configure.record_configure(&p);
            async move { Ok(protocol::wire::ConfigureResult::default()) }
        })
        .on_initialize(move |params| init.record_initialize(params));
    if let Some(e) = ext.errors().first() {
        return Err(e.to_string());
    }
    Ok(ext)
}

/// The binary's entry point: the provider served over stdio. Returns the exit status.
pub fn main() -> i32 {
    match extension(Provider::new()) {
        Ok(ext) => sdk::run(ext),
        Err(e) => {
            eprintln!("git: {e}");
            2
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn the_manifest_declares_the_resource_and_its_methods() {
        let m = protocol::manifest::parse_manifest(MANIFEST.as_bytes()).unwrap();
        assert_eq!(m.name, "git");
        let r = &m.provides.resources[0];
        assert_eq!(r.type_name, provider::RESOURCE);
        assert_eq!(r.modes, ["shared", "work", "fresh"]);
        assert!(r.mode_default && r.sweep);
        for method in [
            "provider.acquire",
            "provider.lookup",
            "provider.reconcile",
            "provider.sweep",
            "provider.owner_status",
            "validate",
            "check.run",
        ] {
            assert!(m.enables(method), "{method}");
        }
        assert!(!m.enables("executor.run"));
        assert_eq!(m.provides.checks[0].name, check::CHECK);
        assert!(!m.provides.checks[0].offline, "it reaches the repositories");
        assert!(extension(Provider::new()).is_ok());
    }
}
