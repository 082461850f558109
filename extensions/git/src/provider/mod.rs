//! The provider: a bare cache per repository and the workspaces made from it.
//!
//! Layout under the resource directory (`resource_dirs.git`):
//!
//! ```text
//! cache/<key>.git              the bare cache (origin's branches as refs/remotes/origin/*)
//! cache/<key>.git.tmp-<pid>    a cache being made (renamed into place once fetched)
//! <mode>/<key>/<slug>/         a workspace (a worktree of the cache, or a clone)
//! <mode>/<key>/<slug>.json     its record: `creating` until it is whole, then `ready`
//! ```
//!
//! The record is written `creating` before anything is made and `ready` only once
//! the checkout is complete, both atomically (write, fsync, rename). So whatever a
//! SIGKILL interrupts is recognised: a workspace whose record is not `ready`, or a
//! directory without a record, is half-made, and the next acquisition for it or
//! `provider.reconcile` removes it (and prunes the cache's worktree entry) before
//! anything is made again. A work branch survives the repair, so an owner's commits
//! are never lost with a broken checkout.
//!
//! Its parts: `acquire.rs` (`provider.acquire`), `upkeep.rs` (`provider.lookup`,
//! `provider.reconcile`, `provider.sweep`), `checkout.rs` (what git does: fetch,
//! worktrees, clones, removal, the environment layer) and `record.rs` (the record
//! and the reference).

mod acquire;
mod checkout;
mod record;
mod upkeep;

use checkout::resolve_credential;

use crate::config::{self, Config, Mode};
use crate::git::{self, Git};
use protocol::wire::{validate_kind, Diagnostic, ValidateParams, ValidateResult};
use protocol::{Code, RpcError};
use serde_json::{json, Value};
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The resource type this package provides.
pub const RESOURCE: &str = "git";

const CREATING: &str = "creating";
const READY: &str = "ready";
/// The longest owner ID accepted.
const MAX_OWNER_BYTES: usize = 512;
/// The bound on the provider's own housekeeping commands (status, prune, gc).
const HOUSEKEEPING: Duration = Duration::from_secs(600);

/// The directories `initialize` names.
#[derive(Debug, Clone, Default)]
pub struct Dirs {
    /// The resource directory (`resource_dirs.git`).
    pub root: Option<PathBuf>,
    /// The config file's directory.
    pub config_dir: Option<PathBuf>,
}

impl Dirs {
    /// Reads `resource_dirs.git`, else `<state_dir>/resources/git`, and `config_dir`.
    pub fn from_initialize(params: &Value) -> Dirs {
        let path = |v: Option<&Value>| {
            v.and_then(Value::as_str)
                .filter(|s| !s.is_empty())
                .map(PathBuf::from)
        };
        let root = path(params.get("resource_dirs").and_then(|d| d.get(RESOURCE)))
            .or_else(|| path(params.get("state_dir")).map(|s| s.join("resources").join(RESOURCE)));
        Dirs {
            root,
            config_dir: path(params.get("config_dir")),
        }
    }
}

/// The provider, cheap to clone.
#[derive(Clone, Default)]
pub struct Provider {
    inner: Arc<Inner>,
}

#[derive(Default)]
struct Inner {
    dirs: Mutex<Dirs>,
    /// One lock per cache: every change to a cache and its workspaces holds it.
    locks: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
    /// Whether what a previous process left running has been ended.
    reaped: std::sync::atomic::AtomicBool,
    /// The connections `configure` sent, and the GitHub App tokens minted with them.
    apps: crate::github_app::Apps,
}

fn invalid(message: impl Into<String>) -> RpcError {
    RpcError::new(Code::Invalid, message)
}

/// `resource_setup_failed` with `data.what` (what failed) and `data.repository`.
fn setup_failed(what: &str, repository: &str, message: impl Into<String>) -> RpcError {
    let mut e = RpcError::new(Code::ResourceSetupFailed, message);
    if let Some(Value::Object(map)) = e.data.as_mut() {
        map.insert("what".into(), Value::String(what.into()));
        map.insert("repository".into(), Value::String(repository.into()));
    }
    e
}

fn not_found(message: impl Into<String>) -> RpcError {
    RpcError::new(Code::ResourceNotFound, message)
}

fn io_failed(what: &str, path: &Path, e: std::io::Error) -> RpcError {
    RpcError::new(
        Code::ResourceSetupFailed,
        format!("{what} {}: {e}", path.display()),
    )
}

/// The free space of the file system holding `dir`, in bytes.
pub(crate) fn free_bytes(dir: &Path) -> Option<u64> {
    let s = nix::sys::statvfs::statvfs(dir).ok()?;
    #[allow(clippy::unnecessary_cast)]
    Some((s.blocks_available() as u64).saturating_mul(s.fragment_size() as u64))
}

impl Provider {
    /// A provider whose directories come from `initialize` ([`Provider::record_initialize`]).
    pub fn new() -> Provider {
        Provider::default()
    }

    /// A provider with its directories given (tests, in-process use).
    pub fn with_dirs(dirs: Dirs) -> Provider {
        let p = Provider::default();
        *p.dirs_lock() = dirs;
        p
    }

    /// Records the directories `initialize` names.
    pub fn record_initialize(&self, params: &Value) {
        *self.dirs_lock() = Dirs::from_initialize(params);
    }

    /// Records what `configure` sends: the connections the bindings' git resources
    /// name (their type and config). A dry run changes nothing.
    pub fn record_configure(&self, params: &protocol::wire::ConfigureParams) {
        if !params.dry_run {
            self.inner.apps.configure(&params.connections);
        }
    }

    /// The user name and password git fetches `source` with, by `credential`: an
    /// installation token of the connection's GitHub App ([`crate::github_app`]), else
    /// the connection's secret (for a `bitbucket` connection, the one its secrets
    /// choose: [`crate::bitbucket`]). `extra` are connections a `check.run` view
    /// carries.
    pub(crate) async fn password(
        &self,
        host: Option<&sdk::Host>,
        scope_id: &str,
        credential: &config::Credential,
        source: &config::Source,
        extra: &[protocol::wire::Connection],
    ) -> Result<(String, String), RpcError> {
        let apps = &self.inner.apps;
        if let Some((connection, app)) = apps.app_for(credential, extra, &source.display)? {
            let token = apps
                .token(host, scope_id, &connection, &app, source)
                .await?;
            return Ok((config::DEFAULT_USERNAME.to_string(), token));
        }
        let connection = apps.connection(&credential.connection, extra);
        let chosen =
            crate::bitbucket::credential_for(credential, connection.as_ref(), &source.display)?;
        let credential = chosen.as_ref().unwrap_or(credential);
        let password = resolve_credential(host, scope_id, credential, &source.display).await?;
        Ok((credential.username.clone(), password))
    }

    fn dirs_lock(&self) -> std::sync::MutexGuard<'_, Dirs> {
        self.inner.dirs.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(crate) fn root(&self) -> PathBuf {
        self.dirs_lock()
            .root
            .clone()
            .unwrap_or_else(|| PathBuf::from("state").join("resources").join(RESOURCE))
    }

    pub(crate) fn config_dir(&self) -> Option<PathBuf> {
        self.dirs_lock().config_dir.clone()
    }

    fn lock(&self, key: &str) -> Arc<tokio::sync::Mutex<()>> {
        let mut locks = self.inner.locks.lock().unwrap_or_else(|p| p.into_inner());
        locks.entry(key.to_string()).or_default().clone()
    }

    fn cache_dir(root: &Path, key: &str) -> PathBuf {
        root.join("cache").join(format!("{key}.git"))
    }

    fn paths(root: &Path, mode: Mode, key: &str, slug: &str) -> (PathBuf, PathBuf) {
        let parent = root.join(mode.as_str()).join(key);
        (parent.join(slug), parent.join(format!("{slug}.json")))
    }

    /// `validate`, with the config directory `initialize` named.
    pub fn validate(&self, p: &ValidateParams) -> ValidateResult {
        validate(p, self.config_dir().as_deref())
    }

    /// Ends, once per process, what a dead provider left running.
    async fn reap_once(&self, root: &Path) {
        if self
            .inner
            .reaped
            .swap(true, std::sync::atomic::Ordering::SeqCst)
        {
            return;
        }
        git::reap(&root.join("running")).await;
    }
}

/// `validate`: kind `resource` checks a config, kind `resource_mode` answers its mode.
pub fn validate(p: &ValidateParams, config_dir: Option<&Path>) -> ValidateResult {
    let mut result = ValidateResult::default();
    if p.type_name != RESOURCE {
        return result;
    }
    match p.kind.as_str() {
        validate_kind::RESOURCE => match Config::check(&p.config, config_dir) {
            Ok(c) => result.describe.push(format!(
                "a {} workspace of {} per acquisition (cache {})",
                c.mode.as_str(),
                c.source.display,
                c.source.key
            )),
            Err(e) => result.diagnostics.push(Diagnostic {
                code: "invalid_config".into(),
                message: format!("git resource config: {e}"),
                path: e.pointer,
            }),
        },
        validate_kind::RESOURCE_MODE => result.mode = Some(config::written_mode(&p.config)),
        _ => {}
    }
    result
}

fn housekeeping(root: &Path) -> Git {
    Git::new(HOUSEKEEPING, BTreeMap::new(), Some(root.join("running")))
}

fn list(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|rd| rd.filter_map(|e| e.ok()).map(|e| e.path()).collect())
        .unwrap_or_default();
    v.sort();
    v
}

fn check_disk(root: &Path, min_free_mb: u64) -> Result<(), RpcError> {
    if min_free_mb == 0 {
        return Ok(());
    }
    let Some(free) = free_bytes(root) else {
        return Ok(());
    };
    let floor = min_free_mb.saturating_mul(1024 * 1024);
    if free < floor {
        let mut e = RpcError::new(
            Code::ResourceExhausted,
            format!(
                "only {} MiB free on the file system of {}, under the floor of {min_free_mb} MiB (min_free_mb): free disk space there, or sweep the workspaces of closed Works",
                free / (1024 * 1024),
                root.display()
            ),
        );
        if let Some(Value::Object(map)) = e.data.as_mut() {
            map.insert("what".into(), json!("disk"));
            map.insert("free_mb".into(), json!(free / (1024 * 1024)));
            map.insert("min_free_mb".into(), json!(min_free_mb));
        }
        return Err(e);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn directories_come_from_initialize() {
        let d =
            Dirs::from_initialize(&json!({"state_dir": "/s", "resource_dirs": {"git": "/r/git"}}));
        assert_eq!(d.root, Some(PathBuf::from("/r/git")));
        let d = Dirs::from_initialize(&json!({"state_dir": "/s"}));
        assert_eq!(d.root, Some(PathBuf::from("/s/resources/git")));
    }
}
