//! The `claude-code` executor's methods: run, resume, recover, wait, inject,
//! interrupt, stop, live, forget, attach, and validate for its binding config.
//!
//! A run is one or more segments (`<runs>/<execution_id>/<n>/`): each is one
//! detached `claude -p` under the wrapper. What a segment is lives on disk
//! ([`crate::rundir`]); this process keeps a table of the executions it
//! started or adopted, holding the stdin of the segments it started, so it can
//! inject input into them and close their stdin when the result arrives.
//!
//! This module holds the shared state, the table, the helpers and `validate`;
//! the methods are split by concern: `launch` (run, resume, the decision and
//! the launch), `recover` (adoption), `result` (wait and the result of a
//! segment) and `controls` (inject, interrupt, stop, live, forget, attach).

mod controls;
mod launch;
mod recover;
mod result;
pub mod sandbox;

use crate::config::{self, ClaudeConfig};
use crate::continuity::{self, Continuity, Decision, Kind, TurnEnd, TurnUsage};
use crate::env::{self as envs, ToolbeltClient};
use crate::prompt::{self, Shape};
use crate::rundir::{self, Cause, KillRequest, Meta, Spec};
use crate::stream;
use protocol::wire::{
    clip_line, validate_kind, ArtifactCreateParams, CheckRunParams, CheckRunResult, Diagnostic,
    ExecutionPersistRecoveryParams, ExecutorAttachParams, ExecutorAttachResult,
    ExecutorForgetParams, ExecutorForgetResult, ExecutorInjectParams, ExecutorInjectResult,
    ExecutorInterruptParams, ExecutorInterruptResult, ExecutorLiveParams, ExecutorLiveResult,
    ExecutorRecoverParams, ExecutorRecoverResult, ExecutorResumeParams, ExecutorResumeResult,
    ExecutorRunParams, ExecutorRunResult, ExecutorStopParams, ExecutorStopResult,
    ExecutorWaitParams, ExecutorWaitResult, KvCommitParams, KvDelete, KvPut, Outcome, Payload,
    ProvidedResource, RetryHint, RunRequest, Usage, ValidateParams, ValidateResult,
};
use protocol::{CallError, Code, RpcError};
use sdk::detached::Launch;
use sdk::dirs::SharedDirs;
pub use sdk::runs::read_bounded;
use sdk::runs::{check_id, evict, not_adoptable, Tracked};
use sdk::Host;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use std::collections::{BTreeMap, HashMap};
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;
use tokio::io::AsyncWriteExt;
use tokio::process::ChildStdin;

/// The executor's name.
pub const EXECUTOR: &str = "claude-code";
/// The schema of the recovery metadata this executor persists.
pub const RECOVERY_SCHEMA: &str = "open-conduit.claudecode.recovery.v1";
/// The outcome data schema of a result whose config could not be read.
pub const RESULT_SCHEMA: &str = "open-conduit.claudecode.result.v1";
/// The KV key of the executor-wide usage-limit hold.
pub use sdk::agent::hold::{HOLD_KEY, LIMIT_GRACE_MS, UNKNOWN_RESET_MS};
/// Seconds between SIGTERM and SIGKILL for an interrupt, a stop and leftovers.
pub const GRACE_S: u64 = 10;
/// The longest status report and summary kept, in bytes.
pub use sdk::agent::status::{MAX_REPORT_BYTES, MAX_SUMMARY_BYTES};
/// The most bytes of each output uploaded as an artifact (first and last halves
/// beyond it).
pub const MAX_OUTPUT_BYTES: u64 = 16 * 1024 * 1024;
/// How many ended executions the table keeps answering waits for.
pub const MAX_RETAINED: usize = 256;
/// Set to `after_decision` in this process's environment, the executor exits
/// right after it commits a decision and before it launches: the fault
/// boundary the crash-between-decision-and-launch test drives.
pub const FAULT_ENV: &str = "OC_CLAUDE_CODE_FAULT";
const POLL: Duration = Duration::from_millis(50);
/// How this executor names its segments in what it records.
const WORDS: rundir::Words = rundir::Words {
    label: "claude-code",
    unit: "segment",
    what: "claude",
    default_grace_s: GRACE_S,
};
const KV_RETRIES: usize = 8;
/// The permission rule that allows every tool of the toolbelt's MCP server.
pub const TOOLBELT_RULE: &str = "mcp__open-conduit";

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
    /// The digest of the sandbox plan the host pinned, for a sandboxed segment.
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

/// What `segment.json` records before the launch.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SegmentInfo {
    /// The Execution.
    pub execution_id: String,
    /// Its Work.
    pub work_id: String,
    /// The segment's name within the Execution.
    pub segment: String,
    /// The decision it launched on.
    pub decision: Decision,
    /// How it launched (`resume` when a fresh decision's session already had a transcript).
    pub launched: Kind,
    /// The working directory.
    pub cwd: String,
    /// The binding's executor config.
    #[serde(default)]
    pub config: Value,
    /// The program.
    pub binary: String,
    /// The model.
    pub model: String,
    /// The session's transcript.
    pub transcript: String,
    /// When the segment started (ms).
    pub started_ms: i64,
    /// The workspace's lease reference, when the binding has a resource (a resumed
    /// segment looks it up).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub workspace_ref: String,
}

#[derive(Debug)]
struct Run {
    work_id: String,
    tracked: Tracked,
    req: Mutex<RunRequest>,
    launch: Option<Launch>,
    /// Adopted by `executor.recover` (its `result.json` may hold the result an
    /// earlier process answered), not launched here.
    adopted: bool,
    /// The segment's stdin, while this process holds it.
    stdin: tokio::sync::Mutex<Option<ChildStdin>>,
    /// Event IDs written to stdin.
    injected: Mutex<Vec<String>>,
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
    /// The executor-wide usage-limit hold.
    hold: sdk::agent::hold::Hold,
}

/// The executor's state, shared by its handlers (cheap to clone).
#[derive(Debug, Clone)]
pub struct ClaudeCode {
    inner: Arc<Inner>,
}

fn refuse(code: Code, message: impl Into<String>) -> RpcError {
    RpcError::new(code, message)
}

fn not_accepting(id: &str, why: &str) -> RpcError {
    refuse(
        Code::NotAccepting,
        format!("execution {id} takes no input: {why}"),
    )
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

use sdk::agent::status::failure;

/// Answers `validate` for kind `executor`, type `claude-code`: diagnostics
/// naming the field (a JSON pointer), warnings about settings that should
/// change, or a line describing what the config runs.
pub fn validate(p: &ValidateParams) -> ValidateResult {
    let mut result = ValidateResult::default();
    if p.kind == validate_kind::EXECUTOR_MODE && p.type_name == EXECUTOR {
        // The mode a binding's config makes the executor request (spec 003: the
        // request always wins over the resource's own mode).
        result.mode = Some(
            config::parse(&p.config)
                .map(|c| c.workspace_mode)
                .unwrap_or_default(),
        );
        return result;
    }
    if p.kind == validate_kind::EXECUTOR_SECRETS && p.type_name == EXECUTOR {
        // The connection secrets `secret_env` resolves, which config check holds
        // against the binding's connections and their types' declared secrets.
        result.secrets = config::parse(&p.config)
            .map(|c| c.secret_uses())
            .unwrap_or_default();
        return result;
    }
    if p.kind != validate_kind::EXECUTOR || p.type_name != EXECUTOR {
        return result;
    }
    match config::parse(&p.config) {
        Ok(c) => {
            result.describe.push(c.describe());
            result.warnings = c.warnings();
            result.warnings.extend(c.root_problem(is_root()));
        }
        Err(e) => result.diagnostics.push(Diagnostic {
            code: "invalid_config".to_string(),
            message: e.to_string(),
            path: e.pointer,
        }),
    }
    result
}

/// Whether this process (and so every segment it starts) runs as root: the
/// owner of `/proc/self` is the effective user.
pub fn is_root() -> bool {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata("/proc/self").is_ok_and(|m| m.uid() == 0)
}

/// `check.run` for the check `claude-code` (doctor): as root, reads the bindings of
/// the configuration view that run this executor and warns, naming them and the
/// fix, about those whose turns would all fail (`bypassPermissions` without
/// `IS_SANDBOX=1` in their env); a binding with `IS_SANDBOX=1`, or another mode, is
/// fine. Without any such binding in the view, as root it warns in general.
pub fn check(p: &CheckRunParams, root: bool) -> CheckRunResult {
    if p.check != EXECUTOR {
        return CheckRunResult {
            status: "warn".into(),
            code: "unknown_check".into(),
            detail: format!("no check named {:?}", p.check),
            ..CheckRunResult::default()
        };
    }
    if root {
        let mut ours = 0usize;
        let mut failing = Vec::new();
        for scope in &p.config.scopes {
            for b in scope.bindings.iter().filter(|b| b.executor == EXECUTOR) {
                ours += 1;
                // A config that does not parse is config check's to report.
                let fails = config::parse(&b.config)
                    .ok()
                    .and_then(|c| c.root_problem(true))
                    .is_some();
                if fails {
                    failing.push(format!("{}.{}", scope.id, b.name));
                }
            }
        }
        if ours > 0 && failing.is_empty() {
            return CheckRunResult {
                status: "ok".into(),
                detail: format!(
                    "the executor runs as root; each of its {ours} binding(s) sets IS_SANDBOX=1 or a permission mode that works as root"
                ),
                ..CheckRunResult::default()
            };
        }
        let whom = if failing.is_empty() {
            "the executor runs as root".to_string()
        } else {
            format!(
                "the executor runs as root and binding(s) {} would fail every turn",
                failing.join(", ")
            )
        };
        return CheckRunResult {
            status: "warn".into(),
            code: "root_bypass_permissions".into(),
            detail: format!("{whom}: {}", config::ROOT_BYPASS),
            ..CheckRunResult::default()
        };
    }
    CheckRunResult {
        status: "ok".into(),
        detail: "the executor does not run as root".into(),
        ..CheckRunResult::default()
    }
}

/// A fresh session ID: a random (version 4) UUID.
pub fn new_session_id() -> String {
    let mut b = [0u8; 16];
    // The system's random source; should it fail (the buffer stays zero), the clock
    // and the process ID still make the ID unlikely to repeat.
    if getrandom::fill(&mut b).is_err() {
        b = [0u8; 16];
    }
    if b == [0u8; 16] {
        let t = protocol::time::now_ms().unsigned_abs() ^ u64::from(std::process::id());
        b[..8].copy_from_slice(&t.to_le_bytes());
    }
    b[6] = (b[6] & 0x0f) | 0x40;
    b[8] = (b[8] & 0x3f) | 0x80;
    let h: String = b.iter().map(|x| format!("{x:02x}")).collect();
    format!(
        "{}-{}-{}-{}-{}",
        &h[0..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..32]
    )
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

/// The JSON schema of the structured status (`--json-schema`).
pub fn status_schema() -> Value {
    sdk::agent::status::schema()
}

impl ClaudeCode {
    /// An executor whose directories come from `dirs` (filled in by
    /// `initialize`), launching segments through this process's own executable.
    pub fn new(dirs: SharedDirs) -> ClaudeCode {
        let exe = std::env::current_exe()
            .map(|e| sdk::wrapper::program(&e))
            .map_err(|e| e.to_string());
        ClaudeCode {
            inner: Arc::new(Inner {
                dirs,
                exe,
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
        stdin: Option<ChildStdin>,
        known: Option<ExecutorWaitResult>,
        adopted: bool,
    ) -> Arc<Run> {
        let mut t = self.table();
        let seq = t.next_seq;
        t.next_seq += 1;
        let ended = known.is_some();
        let run = Arc::new(Run {
            work_id: req.work.id.clone(),
            tracked: Tracked::new(seq, req.epoch, ended),
            req: Mutex::new(req.clone()),
            launch,
            adopted,
            stdin: tokio::sync::Mutex::new(stdin),
            injected: Mutex::new(Vec::new()),
            result: tokio::sync::Mutex::new(known),
        });
        t.runs.insert(req.execution_id.clone(), Arc::clone(&run));
        evict(&mut t.runs, MAX_RETAINED, |r: &Run| &r.tracked);
        run
    }

    fn known(&self, req: &RunRequest, result: ExecutorWaitResult) {
        self.insert(req, None, None, Some(result), false);
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

    fn works_dir(&self) -> PathBuf {
        // The private per-Work directories: `<state_dir>/work`, else `work` beside the
        // runs directory.
        let w = {
            let d = self.inner.dirs.lock().unwrap_or_else(|p| p.into_inner());
            match &d.state_dir {
                Some(state) => state.join("work"),
                None => d
                    .runs()
                    .parent()
                    .map_or_else(|| PathBuf::from("work"), |p| p.join("work")),
            }
        };
        std::path::absolute(&w).unwrap_or(w)
    }

    /// The directory a Work's sessions run in: the config's `dir`, else a
    /// private one per Work under the state directory.
    fn workspace(&self, cfg: &ClaudeConfig, work_id: &str) -> PathBuf {
        match &cfg.dir {
            Some(d) => PathBuf::from(d),
            None => self.works_dir().join(dir_name(work_id)),
        }
    }

    /// The hold, in memory or in the KV (another process of this executor
    /// may have recorded it).
    async fn hold(&self, host: &Host, now: i64) -> Option<String> {
        self.inner.hold.current(host, now).await
    }
}

/// The limits an attached session keeps: the built-in tools and strict MCP.
fn attach_limits(cfg: &ClaudeConfig) -> Vec<String> {
    let mut out = Vec::new();
    if let Some(tools) = &cfg.builtin_tools {
        out.extend(["--tools".to_string(), tools.join(",")]);
    }
    if cfg.strict_mcp {
        out.push("--strict-mcp-config".into());
    }
    out
}

/// Writes the token to a 0600 file, replacing any earlier one whole.
fn write_token(path: &Path, token: &str) -> std::io::Result<()> {
    let dir = path
        .parent()
        .ok_or_else(|| std::io::Error::other("the token file has no directory"))?;
    let name = path
        .file_name()
        .and_then(|n| n.to_str())
        .ok_or_else(|| std::io::Error::other("the token file has no name"))?;
    rundir::write_atomic(dir, name, token.as_bytes())
}

use sdk::segments::latest as latest_segment;

fn check_epoch(run: &Run, epoch: u64) -> Result<(), RpcError> {
    run.tracked.check_epoch(epoch)
}

/// A segment as its directory shows it, when it has a wrapper recorded.
fn on_disk(dir: &Path) -> Option<Launch> {
    Launch::on_disk(dir, rundir::WRAP_ARG)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn session_ids_are_uuids() {
        let a = new_session_id();
        assert_eq!(a.len(), 36);
        assert_eq!(&a[14..15], "4");
        assert_ne!(a, new_session_id());
    }

    #[test]
    fn validate_names_the_field_and_warns() {
        let v = validate(&ValidateParams {
            kind: "executor".into(),
            type_name: "claude-code".into(),
            config: json!({"handoff_tokens": "many"}),
            ..ValidateParams::default()
        });
        assert_eq!(v.diagnostics.len(), 1);
        assert_eq!(v.diagnostics[0].path, "/handoff_tokens");
        let v = validate(&ValidateParams {
            kind: "executor".into(),
            type_name: "claude-code".into(),
            config: json!({"handoff_share": 0.2, "permission_mode": "acceptEdits"}),
            ..ValidateParams::default()
        });
        assert!(v.diagnostics.is_empty());
        assert_eq!(v.warnings.len(), 1);
        // The secrets a config resolves, for config check's secret-name check.
        let v = validate(&ValidateParams {
            kind: validate_kind::EXECUTOR_SECRETS.into(),
            type_name: "claude-code".into(),
            config: json!({"secret_env": {"K": {"connection": "a", "secret": "api_key"}}}),
            ..ValidateParams::default()
        });
        assert_eq!(v.secrets.len(), 1, "{v:?}");
        assert_eq!(v.secrets[0].path, "/secret_env/K");
        assert_eq!(v.secrets[0].connection, "a");
        assert!(v.diagnostics.is_empty() && v.warnings.is_empty());
    }

    /// As root, config check warns that the default permission mode fails every
    /// turn, with the fix; IS_SANDBOX=1 or another mode does not.
    #[test]
    fn config_check_and_doctor_say_when_root_makes_every_turn_fail() {
        let warned = |config: Value| {
            validate(&ValidateParams {
                kind: "executor".into(),
                type_name: "claude-code".into(),
                config,
                ..ValidateParams::default()
            })
            .warnings
            .iter()
            .any(|w| w.contains("fails every turn as root") && w.contains("IS_SANDBOX=1"))
        };
        assert_eq!(warned(json!({})), is_root());
        assert_eq!(
            warned(json!({"permission_mode": "bypassPermissions"})),
            is_root()
        );
        assert!(!warned(json!({"env": {"IS_SANDBOX": "1"}})));
        assert!(!warned(json!({"permission_mode": "acceptEdits"})));
        let p = CheckRunParams {
            check: "claude-code".into(),
            ..CheckRunParams::default()
        };
        let c = check(&p, true);
        assert_eq!(
            (c.status.as_str(), c.code.as_str()),
            ("warn", "root_bypass_permissions")
        );
        assert!(
            c.detail.contains("run Open Conduit as a non-root user"),
            "{}",
            c.detail
        );
        assert_eq!(check(&p, false).status, "ok");
        // As root, the bindings decide: IS_SANDBOX=1 or another mode is fine; a
        // binding that would fail is named.
        let binding = |name: &str, config: Value| protocol::wire::Binding {
            name: name.into(),
            executor: EXECUTOR.into(),
            config,
            ..protocol::wire::Binding::default()
        };
        let view = |bindings: Vec<protocol::wire::Binding>| CheckRunParams {
            check: "claude-code".into(),
            config: protocol::wire::CheckConfig {
                scopes: vec![protocol::wire::CheckScope {
                    id: "s".into(),
                    bindings,
                    ..protocol::wire::CheckScope::default()
                }],
                ..protocol::wire::CheckConfig::default()
            },
            ..CheckRunParams::default()
        };
        let fine = view(vec![
            binding("a", json!({"env": {"IS_SANDBOX": "1"}})),
            binding("b", json!({"permission_mode": "acceptEdits"})),
        ]);
        assert_eq!(check(&fine, true).status, "ok", "{:?}", check(&fine, true));
        let one_bad = view(vec![
            binding("a", json!({"env": {"IS_SANDBOX": "1"}})),
            binding("bad", json!({})),
        ]);
        let c = check(&one_bad, true);
        assert_eq!(c.status, "warn");
        assert!(
            c.detail.contains("s.bad") && !c.detail.contains("s.a"),
            "{}",
            c.detail
        );
    }

    #[test]
    fn work_dirs() {
        assert_eq!(dir_name("w-1"), "w-1");
        assert_eq!(dir_name("../x/y"), "_x_y");
    }
}
