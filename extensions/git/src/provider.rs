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

use crate::config::{self, Config, Mode};
use crate::git::{self, Cause, Failure, Git};
use crate::neutral::Repo;
use protocol::wire::{
    owner_status, validate_kind, Diagnostic, OwnerStatus, ProvidedResource, ProviderAcquireParams,
    ProviderLookupParams, ProviderOwnerStatusParams, ProviderReconcileParams,
    ProviderReconcileResult, ProviderSweepParams, ProviderSweepResult, ResourceNote,
    ValidateParams, ValidateResult, MAX_PAGE_LIMIT,
};
use protocol::{Code, RpcError};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::io::Write;
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

/// A workspace's record.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Record {
    #[serde(rename = "ref")]
    reference: String,
    owner: String,
    mode: String,
    repository: String,
    branch: String,
    #[serde(default)]
    base: String,
    state: String,
    #[serde(default)]
    created_ms: i64,
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

/// A reference's component: `[A-Za-z0-9_-]`, bounded, never a path trick.
fn component_ok(c: &str) -> bool {
    !c.is_empty()
        && c.len() <= 80
        && c.chars()
            .all(|ch| ch.is_ascii_alphanumeric() || ch == '-' || ch == '_')
}

/// Splits `mode/key/slug`.
fn parse_ref(reference: &str) -> Option<(Mode, String, String)> {
    let mut parts = reference.split('/');
    let (mode, key, slug) = (parts.next()?, parts.next()?, parts.next()?);
    if parts.next().is_some() {
        return None;
    }
    let mode = Mode::parse(mode).filter(|m| m.as_str() == mode)?;
    (component_ok(key) && component_ok(slug)).then(|| (mode, key.to_string(), slug.to_string()))
}

fn read_record(path: &Path) -> Option<Record> {
    let text = std::fs::read(path).ok()?;
    serde_json::from_slice(&text).ok()
}

/// Writes a record atomically: a temporary file, fsync, rename, fsync of the directory.
fn write_record(path: &Path, record: &Record) -> Result<(), RpcError> {
    let tmp = path.with_extension("json.tmp");
    let bytes = serde_json::to_vec_pretty(record).map_err(RpcError::unauthored)?;
    let write = || -> std::io::Result<()> {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(&bytes)?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)?;
        if let Some(parent) = path.parent() {
            std::fs::File::open(parent)?.sync_all()?;
        }
        Ok(())
    };
    write().map_err(|e| io_failed("writing the record", path, e))
}

fn remove_file(path: &Path) {
    let _ = std::fs::remove_file(path);
}

fn remove_dir(path: &Path) {
    if path.exists() {
        let _ = std::fs::remove_dir_all(path);
    }
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
    /// the connection's secret. `extra` are connections a `check.run` view carries.
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

    /// `provider.acquire`.
    pub async fn acquire(
        &self,
        host: Option<&sdk::Host>,
        p: ProviderAcquireParams,
    ) -> Result<ProvidedResource, RpcError> {
        if !p.resource_type.is_empty() && p.resource_type != RESOURCE {
            return Err(invalid(format!(
                "this provider serves `{RESOURCE}`, not `{}`",
                p.resource_type
            )));
        }
        let cfg = Config::parse(&p.config, self.config_dir().as_deref())?;
        let mode = if p.mode.is_empty() {
            cfg.mode
        } else {
            Mode::parse(&p.mode)
                .ok_or_else(|| invalid(format!("mode `{}` is not shared, work or fresh", p.mode)))?
        };
        if p.owner.is_empty() || p.owner.len() > MAX_OWNER_BYTES {
            return Err(invalid(format!(
                "owner must be 1 to {MAX_OWNER_BYTES} bytes"
            )));
        }
        let requested = match p.params.get("branch") {
            None | Some(Value::Null) => None,
            Some(Value::String(s)) if s.is_empty() => None,
            Some(Value::String(s)) => {
                config::check_branch("branch", s)?;
                Some(s.clone())
            }
            Some(_) => return Err(invalid("params.branch must be a string")),
        };
        let named = match mode {
            Mode::Shared if p.binding.is_empty() => "default".to_string(),
            Mode::Shared => format!("{}.{}", p.scope_id, p.binding),
            _ => p.owner.clone(),
        };
        let slug = format!(
            "{}-{}",
            config::slug(&named, 40),
            config::short_hash(&named)
        );
        let key = cfg.source.key.clone();
        let reference = format!("{}/{key}/{slug}", mode.as_str());
        let root = self.root();
        let (dir, record_path) = Self::paths(&root, mode, &key, &slug);
        let cache = Self::cache_dir(&root, &key);
        let mut git = Git::new(cfg.timeout, p.host_env.clone(), Some(root.join("running")));
        if let Some(c) = &cfg.credential {
            let (username, password) = self
                .password(host, &p.scope_id, c, &cfg.source, &[])
                .await?;
            git = git.with_credential(&username, &password);
        }
        let lock = self.lock(&key);
        let _held = lock.lock().await;
        self.reap_once(&root).await;

        // Idempotent per owner and mode: a whole workspace is answered as it is.
        match read_record(&record_path) {
            Some(rec) if rec.state == READY && workspace_ok(&git, mode, &cache, &dir).await => {
                return Ok(resource(&git, &rec, mode, &cache, &dir, &cfg.env).await);
            }
            Some(rec) => {
                remove_workspace(&git, mode, &cache, &dir, &rec.branch).await;
                remove_file(&record_path);
            }
            None if dir.exists() => {
                remove_workspace(&git, mode, &cache, &dir, "").await;
                remove_file(&record_path);
            }
            None => {}
        }

        std::fs::create_dir_all(dir.parent().unwrap_or(&root))
            .map_err(|e| io_failed("creating", &root, e))?;
        check_disk(&root, cfg.min_free_mb)?;
        self.ensure_cache(&git, &cfg, &root, &cache).await?;
        let base = resolve_base(&git, &cfg, &cache).await?;
        let branch = match (mode, requested) {
            (_, Some(b)) => b,
            (Mode::Shared, None) => base.clone(),
            (_, None) => format!("{}{slug}", cfg.branch_prefix),
        };
        let mut record = Record {
            reference: reference.clone(),
            owner: if mode == Mode::Shared {
                named.clone()
            } else {
                p.owner.clone()
            },
            mode: mode.as_str().into(),
            repository: cfg.source.display.clone(),
            branch: branch.clone(),
            base: base.clone(),
            state: CREATING.into(),
            created_ms: protocol::time::now_ms(),
        };
        write_record(&record_path, &record)?;
        let new_branch = mode == Mode::Work
            && cfg.spares > 0
            && !local_branch(&git, &Repo::bare(&cache), &branch).await
            && !remote_branch(&git, &Repo::bare(&cache), &branch).await;
        let from_spare = if new_branch {
            crate::spare::take(&git, &cache, &root, &key, &base, &dir, &branch).await
        } else {
            None
        };
        let made = match (mode, from_spare) {
            (_, Some(Ok(()))) => Ok(()),
            (_, Some(Err(why))) => {
                tracing::warn!(%why, "a spare worktree could not become the workspace; checking out anew");
                remove_workspace(&git, mode, &cache, &dir, &branch).await;
                add_worktree(&git, &cfg, mode, &cache, &dir, &branch, &base).await
            }
            (Mode::Work | Mode::Shared, None) => {
                add_worktree(&git, &cfg, mode, &cache, &dir, &branch, &base).await
            }
            (Mode::Fresh, None) => make_clone(&git, &cfg, &cache, &dir, &branch, &base).await,
        };
        let made = match made {
            Ok(()) if workspace_ok(&git, mode, &cache, &dir).await => Ok(()),
            Ok(()) => Err(setup_failed(
                "checkout",
                &cfg.source.display,
                format!(
                    "the checkout at {} is not whole after git made it",
                    dir.display()
                ),
            )),
            Err(e) => Err(e),
        };
        if let Err(e) = made {
            remove_workspace(&git, mode, &cache, &dir, &branch).await;
            remove_file(&record_path);
            return Err(e);
        }
        crate::fault::pause_point("pause_after_add").await;
        record.state = READY.into();
        write_record(&record_path, &record)?;
        let answer = resource(&git, &record, mode, &cache, &dir, &cfg.env).await;
        if mode == Mode::Work && cfg.spares > 0 {
            self.top_up(git, cfg, key, base);
        }
        Ok(answer)
    }

    /// Tops the spare worktrees of `key` from `base` up to the config's `spares`, in
    /// the background, holding the cache's lock (an acquisition waits behind it).
    fn top_up(&self, git: Git, cfg: Config, key: String, base: String) {
        let this = self.clone();
        tokio::spawn(async move {
            let lock = this.lock(&key);
            let _held = lock.lock().await;
            let root = this.root();
            let cache = Self::cache_dir(&root, &key);
            while crate::spare::count(&root, &key, &base) < cfg.spares as usize {
                if check_disk(&root, cfg.min_free_mb).is_err() {
                    tracing::info!(key = %key, "no spare worktree made: the disk is under min_free_mb");
                    return;
                }
                if let Err(why) = crate::spare::make(&git, &cache, &root, &key, &base).await {
                    tracing::warn!(key = %key, %why, "making a spare worktree failed");
                    return;
                }
            }
        });
    }

    /// Waits until nothing holds the cache lock of `key` (a spare being made).
    pub async fn settled(&self, key: &str) {
        let lock = self.lock(key);
        let _held = lock.lock().await;
    }

    /// Makes the bare cache when it is missing (in a temporary directory renamed into
    /// place once fetched), else fetches it.
    async fn ensure_cache(
        &self,
        git: &Git,
        cfg: &Config,
        root: &Path,
        cache: &Path,
    ) -> Result<(), RpcError> {
        let repo = &cfg.source.display;
        let bare = Repo::bare(cache);
        if cache.join("HEAD").is_file() {
            let url = git
                .run(&bare, &["config", "--get", "remote.origin.url"])
                .await
                .map(|o| o.stdout.trim().to_string())
                .unwrap_or_default();
            if url != cfg.source.url {
                git.run(&bare, &["config", "remote.origin.url", &cfg.source.url])
                    .await
                    .map_err(|f| {
                        setup_failed(
                            "cache",
                            repo,
                            format!("configuring the cache of {repo}: {}", f.detail()),
                        )
                    })?;
            }
            fetch(git, cfg, &bare).await?;
        } else {
            remove_dir(cache);
            let dir = root.join("cache");
            std::fs::create_dir_all(&dir).map_err(|e| io_failed("creating", &dir, e))?;
            let name = cache
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            let tmp = dir.join(format!("{name}.tmp-{}", std::process::id()));
            remove_dir(&tmp);
            let tmp_s = tmp.to_string_lossy().into_owned();
            let made = async {
                let step = |f: Failure| {
                    setup_failed(
                        "cache",
                        repo,
                        format!("making the cache of {repo}: {}", f.detail()),
                    )
                };
                git.run(&Repo::none(), &["init", "--bare", "-q", &tmp_s])
                    .await
                    .map_err(step)?;
                let made = Repo::bare(&tmp);
                git.run(&made, &["config", "remote.origin.url", &cfg.source.url])
                    .await
                    .map_err(step)?;
                git.run(
                    &made,
                    &[
                        "config",
                        "remote.origin.fetch",
                        "+refs/heads/*:refs/remotes/origin/*",
                    ],
                )
                .await
                .map_err(step)?;
                fetch(git, cfg, &made).await?;
                std::fs::rename(&tmp, cache)
                    .map_err(|e| io_failed("renaming the cache into", cache, e))
            }
            .await;
            if let Err(e) = made {
                remove_dir(&tmp);
                return Err(e);
            }
        }
        if !git
            .ok(&bare, &["symbolic-ref", "-q", "refs/remotes/origin/HEAD"])
            .await
        {
            // The remote's default branch; an empty repository has none, which the
            // base's resolution reports.
            let _ = git
                .run(&bare, &["remote", "set-head", "origin", "--auto"])
                .await;
        }
        Ok(())
    }

    /// `validate`, with the config directory `initialize` named.
    pub fn validate(&self, p: &ValidateParams) -> ValidateResult {
        validate(p, self.config_dir().as_deref())
    }

    /// `provider.lookup`: never creates anything.
    pub async fn lookup(&self, p: ProviderLookupParams) -> Result<ProvidedResource, RpcError> {
        let Some((mode, key, slug)) = parse_ref(&p.reference) else {
            return Err(not_found(format!(
                "`{}` is not a git workspace reference",
                p.reference
            )));
        };
        let env = if p.config.is_null() {
            BTreeMap::new()
        } else {
            Config::parse(&p.config, self.config_dir().as_deref())?.env
        };
        let root = self.root();
        let (dir, record_path) = Self::paths(&root, mode, &key, &slug);
        let cache = Self::cache_dir(&root, &key);
        let lock = self.lock(&key);
        let _held = lock.lock().await;
        let git = housekeeping(&root);
        match read_record(&record_path) {
            None => Err(not_found(format!("no workspace for `{}`", p.reference))),
            Some(rec) if rec.state != READY => Err(not_found(format!(
                "the workspace for `{}` is half-made (an acquisition was interrupted); acquire it again",
                p.reference
            ))),
            Some(_) if !workspace_ok(&git, mode, &cache, &dir).await => Err(not_found(format!(
                "the workspace for `{}` at {} is gone or no longer a checkout; acquire it again",
                p.reference,
                dir.display()
            ))),
            Some(rec) => Ok(resource(&git, &rec, mode, &cache, &dir, &env).await),
        }
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

    /// `provider.reconcile`: removes what interrupted acquisitions left and answers
    /// every whole workspace.
    pub async fn reconcile(
        &self,
        _p: ProviderReconcileParams,
    ) -> Result<ProviderReconcileResult, RpcError> {
        let root = self.root();
        let git = housekeeping(&root);
        git::reap(&root.join("running")).await;
        let mut out = ProviderReconcileResult::default();
        // Caches being made by a process that is gone.
        let ours = format!(".tmp-{}", std::process::id());
        for entry in list(&root.join("cache")) {
            let name = entry
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            if name.contains(".git.tmp-") && !name.ends_with(&ours) {
                remove_dir(&entry);
                out.removed.push(ResourceNote {
                    reference: format!("cache/{name}"),
                    dir: entry.to_string_lossy().into_owned(),
                    reason: "a half-made cache (its first fetch was interrupted)".into(),
                    ..Default::default()
                });
            }
        }
        for key in crate::spare::keys(&root) {
            let lock = self.lock(&key);
            let _held = lock.lock().await;
            let cache = Self::cache_dir(&root, &key);
            for dir in crate::spare::reconcile(&git, &cache, &root, &key).await {
                out.removed.push(ResourceNote {
                    reference: format!("spare/{key}"),
                    dir: dir.to_string_lossy().into_owned(),
                    reason: "a half-made spare worktree".into(),
                    ..Default::default()
                });
            }
        }
        for mode in Mode::ALL {
            for key_dir in list(&root.join(mode.as_str())) {
                let Some(key) = key_dir
                    .file_name()
                    .map(|n| n.to_string_lossy().into_owned())
                else {
                    continue;
                };
                let lock = self.lock(&key);
                let _held = lock.lock().await;
                let cache = Self::cache_dir(&root, &key);
                let mut slugs = BTreeSet::new();
                for entry in list(&key_dir) {
                    let name = entry
                        .file_name()
                        .map(|n| n.to_string_lossy().into_owned())
                        .unwrap_or_default();
                    if let Some(s) = name.strip_suffix(".json.tmp") {
                        remove_file(&entry);
                        slugs.insert(s.to_string());
                    } else if let Some(s) = name.strip_suffix(".json") {
                        slugs.insert(s.to_string());
                    } else {
                        slugs.insert(name);
                    }
                }
                for slug in slugs {
                    let (dir, record_path) = Self::paths(&root, mode, &key, &slug);
                    let reference = format!("{}/{key}/{slug}", mode.as_str());
                    let rec = read_record(&record_path);
                    let reason = match &rec {
                        Some(r) if r.state == READY => {
                            if workspace_ok(&git, mode, &cache, &dir).await {
                                out.resources.push(
                                    resource(&git, r, mode, &cache, &dir, &BTreeMap::new()).await,
                                );
                                continue;
                            }
                            "broken: its directory is gone or no longer a checkout"
                        }
                        Some(_) => "half-made: an acquisition was interrupted",
                        None => "half-made: a directory without a record",
                    };
                    let branch = rec.as_ref().map(|r| r.branch.as_str()).unwrap_or("");
                    remove_workspace(&git, mode, &cache, &dir, branch).await;
                    remove_file(&record_path);
                    out.removed.push(ResourceNote {
                        reference,
                        owner: rec.as_ref().map(|r| r.owner.clone()).unwrap_or_default(),
                        dir: dir.to_string_lossy().into_owned(),
                        reason: reason.into(),
                    });
                }
                if mode != Mode::Fresh && cache.is_dir() {
                    let _ = git.run(&Repo::bare(&cache), &["worktree", "prune"]).await;
                }
            }
        }
        Ok(out)
    }

    /// `provider.sweep`: removes the workspaces of closed owners (keeping and reporting
    /// dirty ones), then prunes every cache.
    pub async fn sweep(
        &self,
        host: &sdk::Host,
        p: ProviderSweepParams,
    ) -> Result<ProviderSweepResult, RpcError> {
        let root = self.root();
        let git = housekeeping(&root);
        let mut found = Vec::new();
        for mode in [Mode::Work, Mode::Fresh] {
            for key_dir in list(&root.join(mode.as_str())) {
                let Some(key) = key_dir
                    .file_name()
                    .map(|n| n.to_string_lossy().into_owned())
                else {
                    continue;
                };
                for entry in list(&key_dir) {
                    let name = entry
                        .file_name()
                        .map(|n| n.to_string_lossy().into_owned())
                        .unwrap_or_default();
                    if let Some(slug) = name.strip_suffix(".json") {
                        if let Some(rec) = read_record(&entry).filter(|r| r.state == READY) {
                            found.push((mode, key.clone(), slug.to_string(), rec));
                        }
                    }
                }
            }
        }
        let owners: Vec<String> = found
            .iter()
            .map(|(_, _, _, r)| r.owner.clone())
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect();
        let mut status: HashMap<String, OwnerStatus> = HashMap::new();
        for chunk in owners.chunks(MAX_PAGE_LIMIT as usize) {
            let answer = host
                .call_typed(&ProviderOwnerStatusParams {
                    pass_id: p.pass_id.clone(),
                    owners: chunk.to_vec(),
                })
                .await
                .map_err(|e| match e.rpc() {
                    Some(rpc) => rpc.clone(),
                    None => RpcError::new(Code::Unavailable, format!("provider.owner_status: {e}")),
                })?;
            for s in answer.owners {
                status.insert(s.owner.clone(), s);
            }
        }
        let now = protocol::time::now_ms();
        let mut out = ProviderSweepResult::default();
        for (mode, key, slug, rec) in found {
            let Some(s) = status
                .get(&rec.owner)
                .filter(|s| s.status == owner_status::CLOSED)
            else {
                continue;
            };
            let (dir, record_path) = Self::paths(&root, mode, &key, &slug);
            let note = |reason: String| ResourceNote {
                reference: rec.reference.clone(),
                owner: rec.owner.clone(),
                dir: dir.to_string_lossy().into_owned(),
                reason,
            };
            if p.grace_s > 0 {
                let grace_ms = i64::try_from(p.grace_s.saturating_mul(1000)).unwrap_or(i64::MAX);
                match protocol::time::parse_rfc3339_ms(&s.closed_at) {
                    Some(at) if now.saturating_sub(at) >= grace_ms => {}
                    Some(_) => {
                        out.kept.push(note(format!(
                            "closed at {}, within the grace of {} s",
                            s.closed_at, p.grace_s
                        )));
                        continue;
                    }
                    None => {
                        out.kept.push(note(format!(
                            "closed at an unknown time, so within the grace of {} s",
                            p.grace_s
                        )));
                        continue;
                    }
                }
            }
            let lock = self.lock(&key);
            let _held = lock.lock().await;
            let cache = Self::cache_dir(&root, &key);
            let changes = if dir.exists() {
                let repo = match workspace_repo(mode, &cache, &dir) {
                    Ok(repo) => repo,
                    Err(why) => {
                        out.kept
                            .push(note(format!("cannot read its status: {why}")));
                        continue;
                    }
                };
                // No optional lock: the index is not rewritten (nor a hook asked about it).
                let status = [
                    "--no-optional-locks",
                    "status",
                    "--porcelain",
                    "--untracked-files=normal",
                    "--ignore-submodules=all",
                ];
                match git.run(&repo, &status).await {
                    Ok(o) => o.stdout.lines().filter(|l| !l.is_empty()).count(),
                    Err(f) => {
                        out.kept
                            .push(note(format!("cannot read its status: {}", f.detail())));
                        continue;
                    }
                }
            } else {
                0
            };
            if changes > 0 && !p.remove_dirty {
                out.kept.push(note(format!(
                    "uncommitted changes ({changes} path(s)); commit, stash or discard them, or sweep with remove_dirty"
                )));
                continue;
            }
            remove_workspace(&git, mode, &cache, &dir, &rec.branch).await;
            remove_file(&record_path);
            out.removed.push(note(if changes > 0 {
                format!("owner closed; {changes} uncommitted path(s) discarded (remove_dirty)")
            } else {
                "owner closed".into()
            }));
        }
        for cache in list(&root.join("cache")) {
            let name = cache
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            let Some(key) = name.strip_suffix(".git") else {
                continue;
            };
            let lock = self.lock(key);
            let _held = lock.lock().await;
            let bare = Repo::bare(&cache);
            let prune = git.run(&bare, &["worktree", "prune"]).await;
            let gc = git.run(&bare, &["gc", "--auto", "--quiet"]).await;
            out.pruned.push(match (prune, gc) {
                (Ok(_), Ok(_)) => format!("{key}: worktree prune, gc --auto"),
                (Err(f), _) | (_, Err(f)) => format!("{key}: {}", f.detail()),
            });
        }
        Ok(out)
    }
}

/// `validate`: kind `resource` checks a config, kind `resource_mode` answers its mode.
pub fn validate(p: &ValidateParams, config_dir: Option<&Path>) -> ValidateResult {
    let mut result = ValidateResult::default();
    if p.type_name != RESOURCE {
        return result;
    }
    match p.kind.as_str() {
        validate_kind::RESOURCE => match Config::parse(&p.config, config_dir) {
            Ok(c) => result.describe.push(format!(
                "a {} workspace of {} per acquisition (cache {})",
                c.mode.as_str(),
                c.source.display,
                c.source.key
            )),
            Err(e) => result.diagnostics.push(Diagnostic {
                code: "invalid_config".into(),
                message: e.message,
                path: String::new(),
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

/// The password of `credential`: its connection's secret, through the host's
/// `secret.resolve` (the connection must be one the configuration binds to this
/// package: a binding's resource config naming it).
pub(crate) async fn resolve_credential(
    host: Option<&sdk::Host>,
    scope_id: &str,
    credential: &config::Credential,
    repository: &str,
) -> Result<String, RpcError> {
    let Some(host) = host else {
        return Err(setup_failed(
            "credential",
            repository,
            "no host to resolve the repository's credential through",
        ));
    };
    let answer = host
        .call_typed(&protocol::wire::SecretResolveParams {
            scope_id: scope_id.to_string(),
            connection: credential.connection.clone(),
            names: vec![credential.secret.clone()],
        })
        .await
        .map_err(|e| {
            setup_failed(
                "credential",
                repository,
                format!(
                    "the credential of {repository} (secret {:?} of connection {:?}) could not be resolved: {}",
                    credential.secret,
                    credential.connection,
                    e.rpc().map_or_else(|| e.to_string(), |r| r.message.clone())
                ),
            )
        })?;
    answer
        .values
        .get(&credential.secret)
        .cloned()
        .ok_or_else(|| {
            setup_failed(
                "credential",
                repository,
                format!(
                    "connection {:?} has no secret {:?}",
                    credential.connection, credential.secret
                ),
            )
        })
}

async fn fetch(git: &Git, cfg: &Config, repo: &Repo) -> Result<(), RpcError> {
    match git
        .run(repo, &["fetch", "--prune", "--quiet", "origin"])
        .await
    {
        Ok(_) => Ok(()),
        Err(f) => {
            let cause = git::classify(&f);
            let display = &cfg.source.display;
            let why = match cause {
                Cause::Credential => {
                    "it needs a credential the provider lacks, or refused the one given"
                }
                Cause::Unreachable => "it cannot be reached or does not exist there",
                Cause::Timeout => "the fetch ran over timeout_s",
                Cause::Other => "git failed",
            };
            let detail = f.detail().replace(&cfg.source.url, display);
            Err(setup_failed(
                cause.as_str(),
                display,
                format!("cannot fetch {display}: {why}: {detail}"),
            ))
        }
    }
}

async fn resolve_base(git: &Git, cfg: &Config, cache: &Path) -> Result<String, RpcError> {
    let repo = &cfg.source.display;
    let bare = Repo::bare(cache);
    let base = match &cfg.base {
        Some(b) => b.clone(),
        None => {
            let head = git
                .run(
                    &bare,
                    &["symbolic-ref", "-q", "--short", "refs/remotes/origin/HEAD"],
                )
                .await
                .map(|o| o.stdout.trim().to_string())
                .unwrap_or_default();
            match head.strip_prefix("origin/") {
                Some(b) if !b.is_empty() => b.to_string(),
                _ => {
                    return Err(setup_failed(
                        "branch",
                        repo,
                        format!("{repo} has no default branch (is it empty?): set base"),
                    ))
                }
            }
        }
    };
    if !remote_branch(git, &bare, &base).await {
        return Err(setup_failed(
            "branch",
            repo,
            format!("branch `{base}` does not exist in {repo}"),
        ));
    }
    Ok(base)
}

async fn remote_branch(git: &Git, repo: &Repo, branch: &str) -> bool {
    git.ok(
        repo,
        &[
            "rev-parse",
            "--verify",
            "-q",
            &format!("refs/remotes/origin/{branch}^{{commit}}"),
        ],
    )
    .await
}

async fn local_branch(git: &Git, repo: &Repo, branch: &str) -> bool {
    git.ok(
        repo,
        &[
            "rev-parse",
            "--verify",
            "-q",
            &format!("refs/heads/{branch}^{{commit}}"),
        ],
    )
    .await
}

async fn add_worktree(
    git: &Git,
    cfg: &Config,
    mode: Mode,
    cache: &Path,
    dir: &Path,
    branch: &str,
    base: &str,
) -> Result<(), RpcError> {
    let repo = &cfg.source.display;
    let d = dir.to_string_lossy().into_owned();
    let bare = Repo::bare(cache);
    let result = if local_branch(git, &bare, branch).await {
        git.run(&bare, &["worktree", "add", "-q", &d, branch]).await
    } else if remote_branch(git, &bare, branch).await {
        let start = format!("origin/{branch}");
        git.run(
            &bare,
            &["worktree", "add", "-q", "--track", "-b", branch, &d, &start],
        )
        .await
    } else if mode == Mode::Shared {
        return Err(setup_failed(
            "branch",
            repo,
            format!(
                "branch `{branch}` does not exist in {repo} (a shared checkout never creates one)"
            ),
        ));
    } else {
        let start = format!("origin/{base}");
        git.run(
            &bare,
            &[
                "worktree",
                "add",
                "-q",
                "--no-track",
                "-b",
                branch,
                &d,
                &start,
            ],
        )
        .await
    };
    result.map(|_| ()).map_err(|f| {
        let low = f.lower();
        if low.contains("already checked out") || low.contains("already used by worktree") {
            setup_failed(
                "branch",
                repo,
                format!(
                    "branch `{branch}` is checked out in another workspace: {}",
                    f.detail()
                ),
            )
        } else {
            setup_failed(
                "checkout",
                repo,
                format!("git worktree add {d}: {}", f.detail()),
            )
        }
    })
}

async fn make_clone(
    git: &Git,
    cfg: &Config,
    cache: &Path,
    dir: &Path,
    branch: &str,
    base: &str,
) -> Result<(), RpcError> {
    let repo = &cfg.source.display;
    let d = dir.to_string_lossy().into_owned();
    let c = cache.to_string_lossy().into_owned();
    let step = |f: Failure| {
        setup_failed(
            "checkout",
            repo,
            format!("making the clone {d}: {}", f.detail()),
        )
    };
    git.run(&Repo::none(), &["init", "-q", &d])
        .await
        .map_err(step)?;
    let clone = Repo::fresh(dir)
        .map_err(|why| setup_failed("checkout", repo, format!("making the clone {d}: {why}")))?;
    // A fetch from the cache copies its objects: the clone shares nothing writable.
    git.run(
        &clone,
        &[
            "fetch",
            "-q",
            "--no-tags",
            &c,
            "+refs/remotes/origin/*:refs/remotes/origin/*",
        ],
    )
    .await
    .map_err(step)?;
    git.run(&clone, &["remote", "add", "origin", &cfg.source.url])
        .await
        .map_err(step)?;
    let head = format!("refs/remotes/origin/{base}");
    git.run(&clone, &["symbolic-ref", "refs/remotes/origin/HEAD", &head])
        .await
        .map_err(step)?;
    if remote_branch(git, &clone, branch).await {
        let start = format!("origin/{branch}");
        git.run(&clone, &["checkout", "-q", "--track", "-b", branch, &start])
            .await
            .map_err(step)?;
    } else {
        let start = format!("origin/{base}");
        git.run(
            &clone,
            &["checkout", "-q", "--no-track", "-b", branch, &start],
        )
        .await
        .map_err(step)?;
    }
    Ok(())
}

/// The repository of the workspace at `dir`, as the provider knows it: a fresh
/// clone's `.git` directory, else the cache's worktree entry for `dir` (never the
/// workspace's own `.git` file, which its run can repoint).
fn workspace_repo(mode: Mode, cache: &Path, dir: &Path) -> Result<Repo, String> {
    match mode {
        Mode::Fresh => Repo::fresh(dir),
        Mode::Work | Mode::Shared => Repo::worktree(cache, dir),
    }
}

/// A workspace is whole when its repository is the one the provider knows for `dir`
/// (git runs with it and `dir` named, so `dir` is the checkout's top) and has a HEAD
/// commit.
async fn workspace_ok(git: &Git, mode: Mode, cache: &Path, dir: &Path) -> bool {
    if !dir.is_dir() {
        return false;
    }
    let Ok(repo) = workspace_repo(mode, cache, dir) else {
        return false;
    };
    git.ok(&repo, &["rev-parse", "--verify", "-q", "HEAD^{commit}"])
        .await
}

/// Removes a workspace, whole or half-made, and its entry in the cache. The branch stays.
async fn remove_workspace(git: &Git, mode: Mode, cache: &Path, dir: &Path, branch: &str) {
    let worktree = mode != Mode::Fresh && cache.is_dir();
    let bare = Repo::bare(cache);
    if worktree && dir.exists() {
        // `--force` twice: no status of the worktree is asked, a lock is overridden.
        let d = dir.to_string_lossy().into_owned();
        let _ = git
            .run(&bare, &["worktree", "remove", "--force", "--force", &d])
            .await;
    }
    remove_dir(dir);
    if worktree {
        forget_worktree(cache, dir);
        let _ = git.run(&bare, &["worktree", "prune"]).await;
        if !branch.is_empty() && config::check_branch("branch", branch).is_ok() {
            // A ref lock a killed `worktree add -b` left would refuse the branch forever.
            remove_file(
                &cache
                    .join("refs")
                    .join("heads")
                    .join(format!("{branch}.lock")),
            );
        }
    }
}

/// Removes the cache's admin entries (`worktrees/<name>`) whose checkout was `dir`:
/// an interrupted `git worktree add` leaves its entry locked ("initializing"), which
/// `git worktree prune` never removes and which refuses a new worktree at that path.
fn forget_worktree(cache: &Path, dir: &Path) {
    let mut targets = vec![dir.join(".git")];
    if let (Some(parent), Some(name)) = (dir.parent(), dir.file_name()) {
        if let Ok(real) = std::fs::canonicalize(parent) {
            targets.push(real.join(name).join(".git"));
        }
    }
    for admin in list(&cache.join("worktrees")) {
        let gitdir = std::fs::read_to_string(admin.join("gitdir")).unwrap_or_default();
        if targets.iter().any(|t| Path::new(gitdir.trim()) == t) {
            remove_dir(&admin);
        }
    }
}

async fn resource(
    git: &Git,
    rec: &Record,
    mode: Mode,
    cache: &Path,
    dir: &Path,
    env: &BTreeMap<String, String>,
) -> ProvidedResource {
    let head = git.head(workspace_repo(mode, cache, dir)).await;
    ProvidedResource {
        reference: rec.reference.clone(),
        owner: rec.owner.clone(),
        mode: rec.mode.clone(),
        dir: dir.to_string_lossy().into_owned(),
        env: layer(dir, env),
        data: json!({
            "repository": rec.repository,
            "branch": rec.branch,
            "base": rec.base,
            "head": head,
        }),
    }
}

/// The provider's environment layer: the config's `GIT_*` variables, and a ceiling so
/// git in the workspace never wanders up into the resource directory.
fn layer(dir: &Path, env: &BTreeMap<String, String>) -> BTreeMap<String, String> {
    let mut out: BTreeMap<String, String> = env
        .iter()
        .filter(|(k, _)| k.starts_with("GIT_"))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    if let Some(parent) = dir.parent() {
        out.insert(
            "GIT_CEILING_DIRECTORIES".into(),
            parent.to_string_lossy().into_owned(),
        );
    }
    out
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn references_are_checked() {
        assert!(parse_ref("work/api-1a2b3c4d/w-1-0f0e0d0c").is_some());
        for bad in [
            "work/../x",
            "work/a",
            "lent/a/b",
            "work/a/b/c",
            "clone/a/b",
            "work/a/..",
        ] {
            assert!(parse_ref(bad).is_none(), "{bad}");
        }
    }

    #[test]
    fn directories_come_from_initialize() {
        let d =
            Dirs::from_initialize(&json!({"state_dir": "/s", "resource_dirs": {"git": "/r/git"}}));
        assert_eq!(d.root, Some(PathBuf::from("/r/git")));
        let d = Dirs::from_initialize(&json!({"state_dir": "/s"}));
        assert_eq!(d.root, Some(PathBuf::from("/s/resources/git")));
    }

    #[test]
    fn the_layer_is_git_only() {
        let env = BTreeMap::from([("GIT_AUTHOR_NAME".to_string(), "bot".to_string())]);
        let l = layer(Path::new("/r/work/k/s"), &env);
        assert_eq!(l["GIT_AUTHOR_NAME"], "bot");
        assert_eq!(l["GIT_CEILING_DIRECTORIES"], "/r/work/k");
        assert!(l.keys().all(|k| k.starts_with("GIT_")));
    }
}
