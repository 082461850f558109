//! The `codex` executor's methods: run, resume, recover, wait, interrupt, stop,
//! live, forget, and validate for its binding config.
//!
//! A run is one or more segments (`<runs>/<execution_id>/<n>/`), each one detached
//! `codex exec` (or `codex exec resume`) under the wrapper ([`sdk::wrapper`]). What
//! a segment is lives on disk ([`crate::rundir`]); this process keeps a table of the
//! executions it started or adopted. Split by concern: `launch` (run, resume, the
//! launch), `recover` (adoption), `result` (wait and the result of a segment) and
//! `controls` (interrupt, stop, live, forget).

mod controls;
mod launch;
mod recover;
mod result;

use crate::config::{self, CodexConfig};
use crate::continuity::{self, Continuity, Kind};
use crate::rundir::{self, Cause, KillRequest, Launch, Meta, Spec, Words};
use crate::stream::{self, Tokens};
use protocol::wire::{
    clip_line, validate_kind, Diagnostic, ExecutorWaitResult, KvCommitParams, RunRequest,
    ValidateParams, ValidateResult,
};
use protocol::{CallError, Code, RpcError};
use sdk::agent::status::failure;
use sdk::dirs::SharedDirs;
use sdk::runs::{check_id, evict, not_adoptable, Tracked};
use sdk::Host;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

/// The executor's name.
pub const EXECUTOR: &str = "codex";
/// The schema of the recovery metadata this executor persists.
pub const RECOVERY_SCHEMA: &str = "open-conduit.codex.recovery.v1";
/// The outcome data schema of a result whose config could not be read.
pub const RESULT_SCHEMA: &str = "open-conduit.codex.result.v1";
/// Seconds between SIGTERM and SIGKILL for an interrupt, a stop and leftovers.
pub const GRACE_S: u64 = 10;
/// The most bytes of each output read and uploaded as an artifact.
pub const MAX_OUTPUT_BYTES: u64 = 16 * 1024 * 1024;
/// How many ended executions the table keeps answering waits for.
pub const MAX_RETAINED: usize = 256;
const WORDS: Words = Words {
    label: "codex",
    unit: "segment",
    what: "codex",
    default_grace_s: GRACE_S,
};

/// The recovery metadata's data (schema [`RECOVERY_SCHEMA`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RecoveryData {
    /// The segment directory (absolute).
    pub segment_dir: String,
    /// The nonce the wrapper is (or will be) started with.
    pub nonce: String,
    /// The wrapper's pid; 0 before the launch.
    #[serde(default)]
    pub pid: i32,
    /// The epoch the segment was started at.
    #[serde(default)]
    pub epoch: u64,
    /// The wrapper's start time as read right after the spawn.
    #[serde(default)]
    pub start: u64,
    /// The digest of the sandbox or container plan the host pinned, for a confined
    /// segment.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub sandbox_digest: String,
}

impl sdk::runs::Recovery for RecoveryData {
    fn epoch(&self) -> u64 {
        self.epoch
    }
}

/// What `segment.json` records before the launch.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SegmentInfo {
    /// The Execution.
    pub execution_id: String,
    /// Its Work.
    pub work_id: String,
    /// The segment's name within the Execution.
    pub segment: String,
    /// How it launched.
    pub kind: Kind,
    /// The session it resumed (empty for a fresh one).
    pub session: String,
    /// The session's totals before the turn.
    pub baseline: Tokens,
    /// `CODEX_HOME`.
    pub home: String,
    /// The working directory.
    pub cwd: String,
    /// The binding's executor config (credentials redacted).
    #[serde(default)]
    pub config: Value,
    /// The program.
    pub binary: String,
    /// The model.
    pub model: String,
    /// When the segment started (ms).
    pub started_ms: i64,
    /// The workspace's lease reference, when the binding has a resource.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub workspace_ref: String,
}

#[derive(Debug)]
struct Run {
    work_id: String,
    tracked: Tracked,
    req: Mutex<RunRequest>,
    launch: Option<Launch>,
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
    hold: sdk::agent::hold::Hold,
}

/// The executor's state, shared by its handlers (cheap to clone).
#[derive(Debug, Clone)]
pub struct Codex {
    inner: Arc<Inner>,
}

fn refuse(code: Code, message: impl Into<String>) -> RpcError {
    RpcError::new(code, message)
}

fn internal(what: impl std::fmt::Display) -> RpcError {
    refuse(Code::Internal, what.to_string())
}

fn host_error(what: &str, e: CallError) -> RpcError {
    match e {
        CallError::Rpc(e) => e,
        other => refuse(Code::Unavailable, format!("{what}: {other}")),
    }
}

fn check_executor(executor: &str) -> Result<(), RpcError> {
    sdk::runs::check_executor(executor, EXECUTOR)
}

/// Answers `validate` for kind `executor` (and `executor_mode`,
/// `executor_secrets`), type `codex`.
pub fn validate(p: &ValidateParams) -> ValidateResult {
    let mut result = ValidateResult::default();
    if p.type_name != EXECUTOR {
        return result;
    }
    if p.kind == validate_kind::EXECUTOR_MODE {
        result.mode = Some(
            config::parse(&p.config)
                .map(|c| c.workspace_mode)
                .unwrap_or_default(),
        );
        return result;
    }
    if p.kind == validate_kind::EXECUTOR_SECRETS {
        result.secrets = config::parse(&p.config)
            .map(|c| c.secret_uses())
            .unwrap_or_default();
        return result;
    }
    if p.kind != validate_kind::EXECUTOR {
        return result;
    }
    match config::parse(&p.config) {
        Ok(c) => {
            result.describe.push(c.describe());
            result.warnings = c.warnings();
        }
        Err(e) => result.diagnostics.push(Diagnostic {
            code: "invalid_config".to_string(),
            message: e.to_string(),
            path: e.pointer,
        }),
    }
    result
}

/// A Work ID as a directory name.
fn dir_name(id: &str) -> String {
    id.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' || c == '.' {
                c
            } else {
                '_'
            }
        })
        .collect::<String>()
        .trim_start_matches('.')
        .to_string()
}

impl Codex {
    /// An executor whose directories come from `dirs` (filled in by `initialize`),
    /// launching segments through this process's own executable.
    pub fn new(dirs: SharedDirs) -> Codex {
        Codex {
            inner: Arc::new(Inner {
                dirs,
                exe: std::env::current_exe()
                    .map(|e| sdk::wrapper::program(&e))
                    .map_err(|e| e.to_string()),
                table: Mutex::new(Table::default()),
                hold: sdk::agent::hold::Hold::default(),
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
        req: &RunRequest,
        launch: Option<Launch>,
        known: Option<ExecutorWaitResult>,
        adopted: bool,
    ) -> Arc<Run> {
        let mut t = self.table();
        let seq = t.next_seq;
        t.next_seq += 1;
        let run = Arc::new(Run {
            work_id: req.work.id.clone(),
            tracked: Tracked::new(seq, req.epoch, known.is_some()),
            req: Mutex::new(req.clone()),
            launch,
            adopted,
            result: tokio::sync::Mutex::new(known),
        });
        t.runs.insert(req.execution_id.clone(), Arc::clone(&run));
        evict(&mut t.runs, MAX_RETAINED, |r: &Run| &r.tracked);
        run
    }

    fn known(&self, req: &RunRequest, result: ExecutorWaitResult) {
        self.insert(req, None, Some(result), false);
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

    /// A private directory of the extension's state: `<state_dir>/<name>`, else
    /// `<name>` beside the runs directory.
    fn state_sub(&self, name: &str) -> PathBuf {
        let d = {
            let d = self.inner.dirs.lock().unwrap_or_else(|p| p.into_inner());
            match &d.state_dir {
                Some(state) => state.join(name),
                None => d
                    .runs()
                    .parent()
                    .map_or_else(|| PathBuf::from(name), |p| p.join(name)),
            }
        };
        std::path::absolute(&d).unwrap_or(d)
    }

    /// The Work's `CODEX_HOME`: `<state>/codex-home/<work>`, kept across turns and
    /// restarts (it holds the session's rollout).
    pub fn home(&self, work_id: &str) -> PathBuf {
        self.state_sub("codex-home").join(dir_name(work_id))
    }

    /// The directory a workspace-free Work's sessions run in.
    fn workspace(&self, cfg: &CodexConfig, work_id: &str) -> PathBuf {
        match &cfg.dir {
            Some(d) => PathBuf::from(d),
            None => self.state_sub("work").join(dir_name(work_id)),
        }
    }
}

use sdk::segments::latest as latest_segment;

/// A segment as its directory shows it, when it has a wrapper recorded.
fn on_disk(dir: &Path) -> Option<Launch> {
    Launch::on_disk(dir, rundir::WRAP_ARG)
}

/// Writes the token to a 0600 file, replacing any earlier one whole.
fn write_token(dir: &Path, token: &str) -> std::io::Result<()> {
    rundir::write_atomic(dir, rundir::TOKEN, token.as_bytes())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn validate_names_the_field() {
        let v = validate(&ValidateParams {
            kind: "executor".into(),
            type_name: "codex".into(),
            config: json!({"sandbox_mode": "x"}),
            ..ValidateParams::default()
        });
        assert_eq!(v.diagnostics[0].path, "/sandbox_mode");
        assert_eq!(dir_name("../w"), "_w");
    }
}
