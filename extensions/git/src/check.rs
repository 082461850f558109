//! The doctor check `repositories` (`check.run`): every repository a binding's `git`
//! resource names is asked for its branches (`git ls-remote --heads`, bounded, never
//! prompting), with the credential the provider fetches it with (the resource's
//! `connection` secret, resolved through the host for the first binding's scope, or
//! the installation token of its GitHub App, as an acquisition does), and the free space under the resource directory is held
//! against the configs' `min_free_mb`. Read-only: it makes no cache, no directory and
//! no note.

use crate::config::{self, Config};
use crate::git::{self, Cause, Git};
use crate::neutral::Repo;
use crate::provider::{free_bytes, Provider, RESOURCE};
use protocol::wire::{CheckRunParams, CheckRunResult};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

/// The check's name (doctor lists it as `git_repositories`).
pub const CHECK: &str = "repositories";

/// The longest one `git ls-remote` may run here, whatever `timeout_s` says: doctor
/// waits 30 s for a whole `check.run`, and the repositories are asked at once.
pub const LS_REMOTE_BOUND: Duration = Duration::from_secs(20);

/// How many `git ls-remote` run at once.
const AT_ONCE: usize = 8;

/// One repository to ask, and the bindings that name it.
struct Target {
    cfg: Config,
    bindings: Vec<String>,
    /// The scope of the first binding naming it (where its credential resolves).
    scope_id: String,
    /// Its credential's user name and password, or why they could not be had.
    password: Option<Result<(String, String), String>>,
}

/// What asking one repository gave.
struct Answer {
    display: String,
    bindings: Vec<String>,
    result: Result<usize, String>,
}

fn status(failed: bool) -> String {
    if failed { "fail" } else { "ok" }.to_string()
}

impl Provider {
    /// `check.run`.
    pub async fn check(&self, host: Option<&sdk::Host>, p: &CheckRunParams) -> CheckRunResult {
        if p.check != CHECK {
            return CheckRunResult {
                status: "warn".into(),
                code: "unknown_check".into(),
                detail: format!("no check named {:?} (this package has `{CHECK}`)", p.check),
                ..CheckRunResult::default()
            };
        }
        let config_dir = if p.config.dir.is_empty() {
            self.config_dir()
        } else {
            Some(PathBuf::from(&p.config.dir))
        };
        let mut targets: BTreeMap<String, Target> = BTreeMap::new();
        let mut invalid = Vec::new();
        let mut floor = None::<u64>;
        for scope in &p.config.scopes {
            for binding in &scope.bindings {
                let Some(resource) = binding
                    .resource
                    .as_ref()
                    .filter(|r| r.resource_type == RESOURCE)
                else {
                    continue;
                };
                let name = format!("{}.{}", scope.id, binding.name);
                match Config::parse(&resource.config, config_dir.as_deref()) {
                    Ok(cfg) => {
                        floor = Some(floor.unwrap_or(0).max(cfg.min_free_mb));
                        targets
                            .entry(cfg.source.url.clone())
                            .or_insert_with(|| Target {
                                cfg,
                                bindings: Vec::new(),
                                scope_id: scope.id.clone(),
                                password: None,
                            })
                            .bindings
                            .push(name);
                    }
                    Err(e) => invalid.push(format!("{name}: {}", e.message)),
                }
            }
        }
        let mut targets: Vec<Target> = targets.into_values().collect();
        for t in &mut targets {
            if let Some(c) = &t.cfg.credential {
                let got = self
                    .password(host, &t.scope_id, c, &t.cfg.source, &p.config.connections)
                    .await
                    .map_err(|e| e.message);
                t.password = Some(got);
            }
        }
        let answers = ask_all(targets).await;
        let root = self.root();
        let disk = disk(&root, floor.unwrap_or(config::DEFAULT_MIN_FREE_MB));
        summarise(&answers, &invalid, &disk)
    }
}

/// Asks every repository, at most [`AT_ONCE`] at a time; answers in the targets' order.
async fn ask_all(targets: Vec<Target>) -> Vec<Answer> {
    let gate = Arc::new(tokio::sync::Semaphore::new(AT_ONCE));
    let mut set = tokio::task::JoinSet::new();
    for (i, target) in targets.into_iter().enumerate() {
        let gate = Arc::clone(&gate);
        set.spawn(async move {
            let _permit = gate.acquire_owned().await;
            (i, ask(target).await)
        });
    }
    let mut out = Vec::new();
    while let Some(joined) = set.join_next().await {
        if let Ok(answer) = joined {
            out.push(answer);
        }
    }
    out.sort_by_key(|(i, _)| *i);
    out.into_iter().map(|(_, a)| a).collect()
}

/// `git ls-remote --heads <repository>`: the number of branches, or why not.
async fn ask(target: Target) -> Answer {
    let cfg = &target.cfg;
    let mut git = Git::new(cfg.timeout.min(LS_REMOTE_BOUND), BTreeMap::new(), None);
    let display = cfg.source.display.clone();
    match (&cfg.credential, &target.password) {
        (Some(_), Some(Ok((username, password)))) => git = git.with_credential(username, password),
        (Some(_), Some(Err(why))) => {
            return Answer {
                display,
                bindings: target.bindings,
                result: Err(why.clone()),
            }
        }
        _ => {}
    }
    let result = match git
        .run(
            &Repo::none(),
            &["ls-remote", "--heads", cfg.source.url.as_str()],
        )
        .await
    {
        Ok(out) => Ok(out.stdout.lines().filter(|l| !l.is_empty()).count()),
        Err(f) => {
            let why = match git::classify(&f) {
                Cause::Credential => "needs a credential the provider lacks",
                Cause::Unreachable => "unreachable",
                Cause::Timeout => "no answer in time",
                Cause::Other => "git failed",
            };
            let detail = f
                .detail()
                .replace(&cfg.source.url, &display)
                .lines()
                .map(str::trim)
                .filter(|l| !l.is_empty())
                .collect::<Vec<_>>()
                .join(" / ");
            Err(format!("{why}: {detail}"))
        }
    };
    Answer {
        display,
        bindings: target.bindings,
        result,
    }
}

/// The free space under the resource directory against `floor` MiB: the item, and
/// whether it is under the floor.
fn disk(root: &Path, floor: u64) -> (String, bool) {
    // The directory may not exist yet: its nearest existing ancestor is on the same
    // file system as it will be.
    let at = root
        .ancestors()
        .find(|a| a.exists())
        .unwrap_or_else(|| Path::new("/"));
    let Some(free) = free_bytes(at) else {
        return (
            format!("cannot read the free space of {}", at.display()),
            false,
        );
    };
    let free_mb = free / (1024 * 1024);
    if floor > 0 && free_mb < floor {
        (
            format!(
                "only {free_mb} MiB free on the file system of {}, under min_free_mb {floor}: acquisitions are refused; free disk space there, or sweep the workspaces of closed Works",
                root.display()
            ),
            true,
        )
    } else {
        (
            format!(
                "{free_mb} MiB free on the file system of {} (min_free_mb {floor})",
                root.display()
            ),
            false,
        )
    }
}

fn summarise(answers: &[Answer], invalid: &[String], disk: &(String, bool)) -> CheckRunResult {
    let mut items = Vec::new();
    let mut failures = Vec::new();
    for a in answers {
        let names = a.bindings.join(", ");
        match &a.result {
            Ok(n) => items.push(format!("ok {}: {names}: {n} branch(es)", a.display)),
            Err(why) => {
                items.push(format!("fail {}: {names}: {why}", a.display));
                failures.push(format!("{} ({names}): {why}", a.display));
            }
        }
    }
    for i in invalid {
        items.push(format!("fail {i}"));
    }
    let (disk_text, disk_low) = disk;
    items.push(format!("{} disk: {disk_text}", status(*disk_low).as_str()));
    let reachable = answers.iter().filter(|a| a.result.is_ok()).count();
    let mut parts = Vec::new();
    if answers.is_empty() {
        parts.push("no binding has a git resource".to_string());
    } else {
        parts.push(format!(
            "{reachable} of {} repositories reachable",
            answers.len()
        ));
    }
    if !failures.is_empty() {
        parts.push(format!("unreachable: {}", failures.join("; ")));
    }
    if !invalid.is_empty() {
        parts.push(format!("invalid config: {}", invalid.join("; ")));
    }
    parts.push(disk_text.clone());
    let code = if !failures.is_empty() {
        "repository_unreachable"
    } else if !invalid.is_empty() {
        "invalid_config"
    } else if *disk_low {
        "disk_low"
    } else {
        ""
    };
    CheckRunResult {
        status: status(!code.is_empty()),
        code: code.into(),
        detail: parts.join("; "),
        items,
        ..CheckRunResult::default()
    }
}
