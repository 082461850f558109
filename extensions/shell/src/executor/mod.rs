//! The `shell` executor's methods: run, recover, wait, interrupt, stop, live,
//! forget, and validate for its binding config.
//!
//! What a run is lives on disk, in its run directory ([`crate::rundir`]); this
//! process only keeps a table of the runs it started or adopted, so it can
//! answer `executor.wait` for them and refuse what it does not know (a wait for
//! an unknown execution is `not_found`, which tells the host to recover it).
//! `executor.stop` and `executor.forget` also work from the run directory alone,
//! so a run that could not be adopted can still be stopped and cleaned up.
//!
//! Modules: `launch` (`executor.run`), `recover` (`executor.recover`),
//! `controls` (wait, interrupt, stop, live, forget).

mod controls;
mod launch;
mod recover;

use crate::config::{self, ShellConfig};
use crate::rundir::{self, Cause, KillRequest, Meta, Spec};
use protocol::sandbox::{SandboxLaunch, SandboxNeeds};
use protocol::wire::{
    clip_line, validate_kind, ArtifactCreateParams, Diagnostic, ExecutionPersistRecoveryParams,
    ExecutorForgetParams, ExecutorForgetResult, ExecutorInterruptParams, ExecutorInterruptResult,
    ExecutorLiveParams, ExecutorLiveResult, ExecutorRecoverParams, ExecutorRecoverResult,
    ExecutorRunParams, ExecutorRunResult, ExecutorStopParams, ExecutorStopResult,
    ExecutorWaitParams, ExecutorWaitResult, Outcome, Payload, ProvidedResource, RunRequest,
    ValidateParams, ValidateResult,
};
use protocol::{CallError, Code, RpcError};
use sdk::detached::Launch;
use sdk::dirs::SharedDirs;
pub use sdk::runs::read_bounded;
use sdk::runs::{check_id, evict, not_adoptable, Tracked};
use sdk::Host;
use serde::{Deserialize, Serialize};
use serde_json::json;
use std::collections::{BTreeMap, HashMap};
use std::ffi::OsString;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use tokio::io::AsyncWriteExt;

/// The executor's name.
pub const EXECUTOR: &str = "shell";
/// The schema of the recovery metadata this executor persists.
pub const RECOVERY_SCHEMA: &str = "shell.recovery.v1";
/// The most bytes of each output uploaded as an artifact; a longer output keeps
/// its first and last halves of this, with a marker between.
pub const MAX_OUTPUT_BYTES: u64 = 16 * 1024 * 1024;
/// The longest summary (the last line of stdout), in bytes.
pub const MAX_SUMMARY_BYTES: usize = 200;
/// How many ended runs the table keeps answering waits for; older ones are
/// dropped from memory (their run directories stay, and recover finds them).
pub const MAX_RETAINED: usize = 256;
/// How this executor names its runs in what it records.
const WORDS: rundir::Words = rundir::Words {
    label: "shell",
    unit: "run",
    what: "the command",
    default_grace_s: config::DEFAULT_GRACE_S,
};

/// The recovery metadata's data (schema [`RECOVERY_SCHEMA`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RecoveryData {
    /// The wrapper's pid.
    pub pid: i32,
    /// The nonce the wrapper was started with.
    pub nonce: String,
    /// The run directory (absolute).
    pub run_dir: String,
    /// The epoch the run was started (or last adopted) at.
    #[serde(default)]
    pub epoch: u64,
    /// The digest of the sandbox plan the host pinned, for a sandboxed run.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub sandbox_digest: String,
    /// The wrapper's start time ([`rundir::ProcStat::start`]) as the extension read
    /// it right after the spawn: with the pid, it names the wrapper for good. 0 in
    /// metadata of an earlier release (the wrapper's argv then proves it).
    #[serde(default)]
    pub start: u64,
}

impl sdk::runs::Recovery for RecoveryData {
    fn epoch(&self) -> u64 {
        self.epoch
    }
}

#[derive(Debug)]
struct Run {
    work_id: String,
    tracked: Tracked,
    /// None for a run whose result was known at once (a bad config, a dry run).
    launch: Option<Launch>,
    /// Adopted by `executor.recover` (its `result.json` may hold the result an
    /// earlier process answered), not launched here.
    adopted: bool,
    result: tokio::sync::Mutex<Option<ExecutorWaitResult>>,
}

#[derive(Debug, Default)]
struct Table {
    runs: HashMap<String, Arc<Run>>,
    next_seq: u64,
}

#[derive(Debug)]
struct Inner {
    dirs: SharedDirs,
    exe: Result<PathBuf, String>,
    table: Mutex<Table>,
}

/// The executor's state, shared by its handlers (cheap to clone).
#[derive(Debug, Clone)]
pub struct Shell {
    inner: Arc<Inner>,
}

fn refuse(code: Code, message: impl Into<String>) -> RpcError {
    RpcError::new(code, message)
}

fn internal(what: impl std::fmt::Display) -> RpcError {
    refuse(Code::Internal, what.to_string())
}

fn check_executor(executor: &str) -> Result<(), RpcError> {
    sdk::runs::check_executor(executor, EXECUTOR)
}

fn failed(error: String) -> ExecutorWaitResult {
    ExecutorWaitResult {
        error,
        ..ExecutorWaitResult::new(Outcome::Failed)
    }
}

/// The last non-blank line of `output`, one line, within [`MAX_SUMMARY_BYTES`].
pub fn summary(output: &[u8]) -> String {
    let text = String::from_utf8_lossy(output);
    text.lines()
        .rev()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .map(|l| clip_line(l, MAX_SUMMARY_BYTES))
        .unwrap_or_default()
}

/// Answers `validate` for kind `executor`, type `shell`: diagnostics naming the
/// field, or a line describing what the config runs.
pub fn validate(p: &ValidateParams) -> ValidateResult {
    let mut result = ValidateResult::default();
    if p.kind != validate_kind::EXECUTOR || p.type_name != EXECUTOR {
        return result;
    }
    match config::parse(&p.config) {
        Ok(c) => result.describe.push(c.describe()),
        Err(e) => result.diagnostics.push(Diagnostic {
            code: "invalid_config".to_string(),
            message: e.to_string(),
            path: e.pointer,
        }),
    }
    result
}

impl Shell {
    /// An executor whose directories come from `dirs` (filled in by
    /// `initialize`), launching runs through the wrapper's small program, or this
    /// process's own executable without one ([`sdk::wrapper::program`]).
    pub fn new(dirs: SharedDirs) -> Shell {
        let exe = std::env::current_exe()
            .map(|e| sdk::wrapper::program(&e))
            .map_err(|e| e.to_string());
        Shell {
            inner: Arc::new(Inner {
                dirs,
                exe,
                table: Mutex::new(Table::default()),
            }),
        }
    }

    fn table(&self) -> MutexGuard<'_, Table> {
        self.inner.table.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn get(&self, id: &str) -> Option<Arc<Run>> {
        self.table().runs.get(id).cloned()
    }

    fn insert(
        &self,
        id: &str,
        work_id: &str,
        epoch: u64,
        launch: Option<Launch>,
        known: Option<ExecutorWaitResult>,
        adopted: bool,
    ) {
        let mut t = self.table();
        let seq = t.next_seq;
        t.next_seq += 1;
        let ended = known.is_some();
        let run = Run {
            work_id: work_id.to_string(),
            tracked: Tracked::new(seq, epoch, ended),
            launch,
            adopted,
            result: tokio::sync::Mutex::new(known),
        };
        t.runs.insert(id.to_string(), Arc::new(run));
        evict(&mut t.runs, MAX_RETAINED, |r: &Run| &r.tracked);
    }

    /// The directory runs live in, absolute.
    pub fn runs_dir(&self) -> PathBuf {
        let runs = self
            .inner
            .dirs
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .runs();
        std::path::absolute(&runs).unwrap_or(runs)
    }

    fn config_dir(&self) -> Option<PathBuf> {
        self.inner
            .dirs
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .config_dir
            .clone()
    }
}

fn check_epoch(run: &Run, epoch: u64) -> Result<(), RpcError> {
    run.tracked.check_epoch(epoch)
}

/// A run as its directory shows it, when it has a wrapper recorded.
fn on_disk(dir: &Path) -> Option<Launch> {
    Launch::on_disk(dir, rundir::WRAP_ARG)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn summary_is_the_last_line() {
        assert_eq!(summary(b"one\ntwo\n\n  \n"), "two");
        assert_eq!(summary(b""), "");
        let long = "x".repeat(500);
        assert_eq!(summary(long.as_bytes()).len(), MAX_SUMMARY_BYTES);
    }

    #[test]
    fn outputs_are_bounded_with_a_marker() {
        let dir = std::env::temp_dir().join(format!("oc-shell-bounded-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("out");
        std::fs::write(&path, b"0123456789abcdefghij").unwrap();
        assert_eq!(read_bounded(&path, 64).unwrap(), b"0123456789abcdefghij");
        let cut = String::from_utf8(read_bounded(&path, 8).unwrap()).unwrap();
        assert!(cut.starts_with("0123\n[... 12 bytes left out"), "{cut}");
        assert!(cut.ends_with("...]\nghij"), "{cut}");
        assert!(read_bounded(&dir.join("none"), 8).unwrap().is_empty());
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn ids_are_one_path_component() {
        assert!(check_id("exec-1").is_ok());
        for bad in ["", ".", "..", "a/b", "a\0b"] {
            assert!(check_id(bad).is_err(), "{bad:?}");
        }
        assert!(check_id(&"x".repeat(256)).is_err());
    }

    #[test]
    fn validate_names_the_field() {
        let v = validate(&ValidateParams {
            kind: "executor".into(),
            type_name: "shell".into(),
            config: json!({"command": ["make"], "deadline_s": "soon"}),
            ..ValidateParams::default()
        });
        assert_eq!(v.diagnostics.len(), 1);
        assert_eq!(v.diagnostics[0].path, "/deadline_s");
        let v = validate(&ValidateParams {
            kind: "executor".into(),
            type_name: "shell".into(),
            config: json!({"command": ["make", "deploy"], "deadline_s": 600}),
            ..ValidateParams::default()
        });
        assert!(v.diagnostics.is_empty());
        assert_eq!(v.describe, ["runs make, killed after 600 s"]);
    }
}
