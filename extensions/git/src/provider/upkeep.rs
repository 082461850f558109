//! The workspaces that exist: `provider.lookup` (never creates), `provider.reconcile`
//! (removes what interrupted acquisitions left) and `provider.sweep` (the workspaces
//! of closed owners, then the caches pruned).

use super::checkout::{remove_workspace, resource, workspace_ok, workspace_repo};
use super::record::{parse_ref, read_record, remove_dir, remove_file};
use super::{housekeeping, list, not_found, Provider, READY};

use crate::config::{Config, Mode};
use crate::git::{self};
use crate::neutral::Repo;
use protocol::wire::{
    owner_status, OwnerStatus, ProvidedResource, ProviderLookupParams, ProviderOwnerStatusParams,
    ProviderReconcileParams, ProviderReconcileResult, ProviderSweepParams, ProviderSweepResult,
    ResourceNote, MAX_PAGE_LIMIT,
};
use protocol::{Code, RpcError};
use std::collections::{BTreeMap, BTreeSet, HashMap};

impl Provider {
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
