//! Spare worktrees: checkouts made ahead of need, so a new Work's `work`-mode
//! workspace is a move and a branch switch rather than a checkout of every file.
//!
//! Layout under the resource directory:
//!
//! ```text
//! spare/<key>/<id>/        a detached worktree of the cache at origin/<base>
//! spare/<key>/<id>.json    its record: `creating` until it is whole, then `ready`
//! ```
//!
//! After an acquisition the provider tops the pool up to the config's `spares` (in the
//! background, holding the cache's lock as every change to a cache does). An
//! acquisition of a new branch in mode `work` takes a `ready` spare made from the same
//! base: it removes the spare's record, `git worktree move`s the checkout to the
//! workspace's path (the workspace's own record already says `creating`) and switches
//! it to the new branch at the freshly fetched `origin/<base>` (only the files that
//! changed since the spare was made are written). A SIGKILL anywhere leaves either a
//! spare without a `ready` record or a workspace whose record is `creating`, which
//! [`reconcile`] and the workspace's own repair remove.

use crate::git::Git;
use crate::neutral::Repo;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

const CREATING: &str = "creating";
const READY: &str = "ready";

/// A spare's record.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Record {
    state: String,
    /// The branch it was made from.
    base: String,
    /// The commit it has checked out.
    #[serde(default)]
    commit: String,
    created_ms: i64,
}

/// The spares of the cache `key`.
pub fn key_dir(root: &Path, key: &str) -> PathBuf {
    root.join("spare").join(key)
}

fn record_path(dir: &Path) -> PathBuf {
    dir.with_extension("json")
}

fn read(path: &Path) -> Option<Record> {
    serde_json::from_slice(&std::fs::read(path).ok()?).ok()
}

fn write(path: &Path, r: &Record) -> std::io::Result<()> {
    let tmp = path.with_extension("json.tmp");
    let bytes = serde_json::to_vec(r).map_err(std::io::Error::other)?;
    std::fs::write(&tmp, bytes)?;
    std::fs::File::open(&tmp)?.sync_all()?;
    std::fs::rename(&tmp, path)?;
    if let Some(parent) = path.parent() {
        std::fs::File::open(parent)?.sync_all()?;
    }
    Ok(())
}

/// The whole spares of `key` made from `base`.
fn ready(root: &Path, key: &str, base: &str) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = std::fs::read_dir(key_dir(root, key))
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.is_dir())
        .filter(|p| read(&record_path(p)).is_some_and(|r| r.state == READY && r.base == base))
        .collect();
    out.sort();
    out
}

/// How many whole spares of `key` from `base` there are.
pub fn count(root: &Path, key: &str, base: &str) -> usize {
    ready(root, key, base).len()
}

/// Takes a whole spare of `key` from `base`, if there is one, and makes it the
/// workspace at `dir` on the new branch `branch` from `origin/<base>`. `None`: no
/// spare; `Some(Err)`: one was taken but could not be made the workspace (the caller
/// removes what is at `dir` and makes the workspace the usual way).
pub async fn take(
    git: &Git,
    cache: &Path,
    root: &Path,
    key: &str,
    base: &str,
    dir: &Path,
    branch: &str,
) -> Option<Result<(), String>> {
    let spare = ready(root, key, base).into_iter().next()?;
    let made_at = read(&record_path(&spare))
        .map(|r| r.commit)
        .unwrap_or_default();
    // Its record goes first: from here it is nobody's spare.
    let _ = std::fs::remove_file(record_path(&spare));
    let from = spare.to_string_lossy().into_owned();
    let to = dir.to_string_lossy().into_owned();
    let bare = Repo::bare(cache);
    if let Err(f) = git.run(&bare, &["worktree", "move", &from, &to]).await {
        remove(git, cache, &spare).await;
        return Some(Err(format!("git worktree move: {}", f.detail())));
    }
    let start = format!("origin/{base}");
    let moved = match Repo::worktree(cache, dir) {
        Ok(repo) => repo,
        Err(why) => return Some(Err(format!("a spare worktree moved to {to}: {why}"))),
    };
    let now = git
        .run(
            &bare,
            &[
                "rev-parse",
                "--verify",
                "-q",
                &format!("{start}^{{commit}}"),
            ],
        )
        .await
        .map(|o| o.stdout.trim().to_string())
        .unwrap_or_default();
    if !now.is_empty() && now == made_at {
        // The base has not moved since the spare was made: its files and index are
        // the branch's already, so the branch is made at that commit and HEAD
        // pointed at it, without git looking at every file again.
        let made = git
            .run(&bare, &["branch", "--no-track", branch, &now])
            .await;
        let pointed = match made {
            Ok(_) => {
                git.run(
                    &moved,
                    &["symbolic-ref", "HEAD", &format!("refs/heads/{branch}")],
                )
                .await
            }
            Err(f) => Err(f),
        };
        return Some(pointed.map(|_| ()).map_err(|f| {
            format!(
                "making branch {branch} for a spare worktree: {}",
                f.detail()
            )
        }));
    }
    let switched = git
        .run(
            &moved,
            &["switch", "-q", "--no-track", "-c", branch, &start],
        )
        .await;
    Some(
        switched
            .map(|_| ())
            .map_err(|f| format!("git switch -c {branch} in a spare worktree: {}", f.detail())),
    )
}

static NEXT: AtomicU64 = AtomicU64::new(0);

/// Makes one spare of `key` from `base` (the caller holds the cache's lock).
pub async fn make(
    git: &Git,
    cache: &Path,
    root: &Path,
    key: &str,
    base: &str,
) -> Result<(), String> {
    let parent = key_dir(root, key);
    std::fs::create_dir_all(&parent).map_err(|e| format!("creating {}: {e}", parent.display()))?;
    let id = format!(
        "s{}-{}-{}",
        protocol::time::now_ms(),
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    );
    let dir = parent.join(&id);
    let rec_path = record_path(&dir);
    let mut rec = Record {
        state: CREATING.into(),
        base: base.to_string(),
        commit: String::new(),
        created_ms: protocol::time::now_ms(),
    };
    write(&rec_path, &rec).map_err(|e| format!("writing {}: {e}", rec_path.display()))?;
    let d = dir.to_string_lossy().into_owned();
    let start = format!("origin/{base}");
    let added = git
        .run(
            &Repo::bare(cache),
            &["worktree", "add", "-q", "--detach", &d, &start],
        )
        .await;
    if let Err(f) = added {
        remove(git, cache, &dir).await;
        return Err(format!("git worktree add --detach: {}", f.detail()));
    }
    rec.commit = git.head(Repo::worktree(cache, &dir)).await;
    rec.state = READY.into();
    write(&rec_path, &rec).map_err(|e| format!("writing {}: {e}", rec_path.display()))
}

/// Removes a spare, whole or half-made, and its entry in the cache.
async fn remove(git: &Git, cache: &Path, dir: &Path) {
    let d = dir.to_string_lossy().into_owned();
    let bare = Repo::bare(cache);
    if dir.exists() && cache.is_dir() {
        let _ = git
            .run(&bare, &["worktree", "remove", "--force", "--force", &d])
            .await;
    }
    if dir.exists() {
        let _ = std::fs::remove_dir_all(dir);
    }
    let _ = std::fs::remove_file(record_path(dir));
    let _ = std::fs::remove_file(dir.with_extension("json.tmp"));
    if cache.is_dir() {
        let _ = git.run(&bare, &["worktree", "prune"]).await;
    }
}

/// Removes the spares of `key` that are not whole (a SIGKILL while one was made or
/// taken), answering their directories. The caller holds the cache's lock.
pub async fn reconcile(git: &Git, cache: &Path, root: &Path, key: &str) -> Vec<PathBuf> {
    let mut removed = Vec::new();
    let entries: Vec<PathBuf> = std::fs::read_dir(key_dir(root, key))
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .collect();
    for p in entries {
        let name = p
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let dir = if let Some(stem) = name.strip_suffix(".json.tmp") {
            p.with_file_name(stem)
        } else if let Some(stem) = name.strip_suffix(".json") {
            p.with_file_name(stem)
        } else {
            p.clone()
        };
        if removed.contains(&dir) {
            continue;
        }
        let whole = dir.is_dir() && read(&record_path(&dir)).is_some_and(|r| r.state == READY);
        if !whole {
            remove(git, cache, &dir).await;
            removed.push(dir);
        }
    }
    removed
}

/// The keys that have a spare directory.
pub fn keys(root: &Path) -> Vec<String> {
    std::fs::read_dir(root.join("spare"))
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.path().is_dir())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect()
}
