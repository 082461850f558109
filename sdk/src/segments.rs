//! The segments of an agent executor's execution on disk
//! (`<runs>/<execution>/<n>/`, one numbered folder per turn), shared by the
//! executors that run turns as detached segments (claude-code, codex): listing them,
//! the latest one, the executions of a Work, and forgetting ended executions.

use crate::detached::{self as rundir, Launch, Spec};
use protocol::{Code, RpcError};
use std::path::{Path, PathBuf};

/// An execution's segment folders, in order.
pub fn list(exec_dir: &Path) -> Vec<(u64, PathBuf)> {
    let mut out: Vec<(u64, PathBuf)> = std::fs::read_dir(exec_dir)
        .map(|entries| {
            entries
                .flatten()
                .filter_map(|e| {
                    let n = e.file_name().to_str()?.parse::<u64>().ok()?;
                    Some((n, e.path()))
                })
                .collect()
        })
        .unwrap_or_default();
    out.sort();
    out
}

/// An execution's latest segment folder.
pub fn latest(exec_dir: &Path) -> Option<(u64, PathBuf)> {
    list(exec_dir).pop()
}

/// The execution's latest segment as its folder shows it, when it recorded a
/// wrapper (started by `wrap_arg`).
pub fn latest_launch(exec_dir: &Path, wrap_arg: &'static str) -> Option<Launch> {
    latest(exec_dir).and_then(|(_, dir)| Launch::on_disk(&dir, wrap_arg))
}

/// The executions of `work_id`: those `known` (the executor's table) and those
/// under `runs` whose latest segment's `spec.json` names the Work.
pub fn of_work(runs: &Path, work_id: &str, known: impl IntoIterator<Item = String>) -> Vec<String> {
    let mut ids: Vec<String> = known.into_iter().collect();
    for e in std::fs::read_dir(runs).into_iter().flatten().flatten() {
        let Some(name) = e.file_name().to_str().map(str::to_string) else {
            continue;
        };
        let ours = latest(&e.path())
            .and_then(|(_, d)| rundir::read_json::<Spec>(&d, rundir::SPEC).ok().flatten())
            .is_some_and(|s| s.work_id == work_id);
        if ours && !ids.contains(&name) {
            ids.push(name);
        }
    }
    ids
}

/// What [`forget`] did.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Forgotten {
    /// The executions whose folders were removed.
    pub removed: Vec<String>,
    /// Whether one was kept because a segment of it still runs.
    pub kept: bool,
}

/// Removes the folders of `ids` under `runs`, but those with a segment still
/// running (its wrapper alive and no `status`): with `single` such a one is refused
/// `conflict`; otherwise it is kept and said so.
pub fn forget(
    runs: &Path,
    ids: Vec<String>,
    single: bool,
    wrap_arg: &'static str,
) -> Result<Forgotten, RpcError> {
    let mut out = Forgotten::default();
    for id in ids {
        let exec_dir = runs.join(&id);
        let live = list(&exec_dir).into_iter().any(|(_, d)| {
            Launch::on_disk(&d, wrap_arg)
                .is_some_and(|l| !rundir::exists(&d, rundir::STATUS) && l.wrapper_alive())
        });
        if live {
            if single {
                return Err(RpcError::new(
                    Code::Conflict,
                    format!("execution {id} is still running: stop it first"),
                ));
            }
            out.kept = true;
            continue;
        }
        match std::fs::remove_dir_all(&exec_dir) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => {
                return Err(RpcError::new(
                    Code::Internal,
                    format!("removing {}: {e}", exec_dir.display()),
                ))
            }
        }
        out.removed.push(id);
    }
    Ok(out)
}
