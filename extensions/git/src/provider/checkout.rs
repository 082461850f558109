//! What git does for the provider: fetch the cache, resolve the base, make a
//! worktree or a clone, check and remove a workspace, and describe one as a
//! resource (its environment layer), with the credential resolved through the host.

use super::list;
use super::record::{remove_dir, remove_file, Record};
use super::setup_failed;
use crate::config::{self, Config, Mode};
use crate::git::{self, Cause, Failure, Git};
use crate::neutral::Repo;
use protocol::wire::ProvidedResource;
use protocol::RpcError;
use serde_json::json;
use std::collections::BTreeMap;
use std::path::Path;

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

pub(super) async fn fetch(git: &Git, cfg: &Config, repo: &Repo) -> Result<(), RpcError> {
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

pub(super) async fn resolve_base(
    git: &Git,
    cfg: &Config,
    cache: &Path,
) -> Result<String, RpcError> {
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

pub(super) async fn remote_branch(git: &Git, repo: &Repo, branch: &str) -> bool {
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

pub(super) async fn local_branch(git: &Git, repo: &Repo, branch: &str) -> bool {
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

pub(super) async fn add_worktree(
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

pub(super) async fn make_clone(
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
pub(super) fn workspace_repo(mode: Mode, cache: &Path, dir: &Path) -> Result<Repo, String> {
    match mode {
        Mode::Fresh => Repo::fresh(dir),
        Mode::Work | Mode::Shared => Repo::worktree(cache, dir),
    }
}

/// A workspace is whole when its repository is the one the provider knows for `dir`
/// (git runs with it and `dir` named, so `dir` is the checkout's top) and has a HEAD
/// commit.
pub(super) async fn workspace_ok(git: &Git, mode: Mode, cache: &Path, dir: &Path) -> bool {
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
pub(super) async fn remove_workspace(
    git: &Git,
    mode: Mode,
    cache: &Path,
    dir: &Path,
    branch: &str,
) {
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
pub(super) fn forget_worktree(cache: &Path, dir: &Path) {
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

pub(super) async fn resource(
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
pub(super) fn layer(dir: &Path, env: &BTreeMap<String, String>) -> BTreeMap<String, String> {
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
    fn the_layer_is_git_only() {
        let env = BTreeMap::from([("GIT_AUTHOR_NAME".to_string(), "bot".to_string())]);
        let l = layer(Path::new("/r/work/k/s"), &env);
        assert_eq!(l["GIT_AUTHOR_NAME"], "bot");
        assert_eq!(l["GIT_CEILING_DIRECTORIES"], "/r/work/k");
        assert!(l.keys().all(|k| k.starts_with("GIT_")));
    }
}
