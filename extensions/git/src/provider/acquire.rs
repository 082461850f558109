//! `provider.acquire`: the cache made or fetched, then the workspace found, repaired
//! or made, and the spare worktrees topped up behind it.

use super::checkout::{
    add_worktree, fetch, local_branch, make_clone, remote_branch, remove_workspace, resolve_base,
    resource, workspace_ok,
};
use super::record::{read_record, remove_dir, remove_file, write_record, Record};
use super::{
    check_disk, invalid, io_failed, setup_failed, Provider, CREATING, MAX_OWNER_BYTES, READY,
    RESOURCE,
};

use crate::config::{self, Config, Mode};
use crate::git::{Failure, Git};
use crate::neutral::Repo;
use protocol::wire::{ProvidedResource, ProviderAcquireParams};
use protocol::RpcError;
use serde_json::Value;
use std::path::Path;

impl Provider {
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
}
