//! The `claude-code` executor's methods: run, resume, recover, wait, inject,
//! interrupt, stop, forget, attach, and validate for its binding config.
//!
//! A run is one or more segments (`<runs>/<execution_id>/<n>/`): each is one
//! detached `claude -p` under the wrapper. What a segment is lives on disk
//! ([`crate::rundir`]); this process keeps a table of the executions it
//! started or adopted, holding the stdin of the segments it started, so it can
//! inject input into them and close their stdin when the result arrives.

use crate::config::{self, ClaudeConfig};
use crate::continuity::{self, Continuity, Decision, Kind, TurnEnd, TurnUsage};
use crate::env::{self as envs, ToolbeltClient};
use crate::prompt::{self, Shape};
use crate::rundir::{self, Cause, KillRequest, Meta, Spec, Status};
use crate::stream;
use protocol::wire::{
    clip_line, validate_kind, ArtifactCreateParams, CheckRunParams, CheckRunResult, Diagnostic,
    ExecutionPersistRecoveryParams, ExecutorAttachParams, ExecutorAttachResult,
    ExecutorForgetParams, ExecutorForgetResult, ExecutorInjectParams, ExecutorInjectResult,
    ExecutorInterruptParams, ExecutorInterruptResult, ExecutorRecoverParams, ExecutorRecoverResult,
    ExecutorResumeParams, ExecutorResumeResult, ExecutorRunParams, ExecutorRunResult,
    ExecutorStopParams, ExecutorStopResult, ExecutorWaitParams, ExecutorWaitResult, KvCommitParams,
    KvDelete, KvPut, Outcome, Payload, RetryHint, RunRequest, SecretResolveParams, Usage,
    ValidateParams, ValidateResult,
};
use protocol::{CallError, Code, RpcError};
use sdk::detached::Launch;
use sdk::dirs::SharedDirs;
use sdk::Host;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use std::collections::{BTreeMap, HashMap};
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
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
pub const HOLD_KEY: &str = "hold";
/// Seconds between SIGTERM and SIGKILL for an interrupt, a stop and leftovers.
pub const GRACE_S: u64 = 10;
/// Added to a usage limit's reset before the retry.
pub const LIMIT_GRACE_MS: i64 = 2 * 60_000;
/// The retry delay of a usage limit whose reset is unknown.
pub const UNKNOWN_RESET_MS: i64 = 30 * 60_000;
/// The longest status report kept, in bytes.
pub const MAX_REPORT_BYTES: usize = 20_000;
/// The longest summary, in bytes.
pub const MAX_SUMMARY_BYTES: usize = 200;
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
}

#[derive(Debug)]
struct Run {
    work_id: String,
    seq: u64,
    epoch: AtomicU64,
    req: Mutex<RunRequest>,
    launch: Option<Launch>,
    /// The segment's stdin, while this process holds it.
    stdin: tokio::sync::Mutex<Option<ChildStdin>>,
    /// Event IDs written to stdin.
    injected: Mutex<Vec<String>>,
    result: tokio::sync::Mutex<Option<ExecutorWaitResult>>,
    ended: AtomicBool,
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
    /// The executor-wide usage-limit hold: until (ms) and the hint's reset_at.
    hold: Mutex<Option<(i64, String)>>,
}

/// The executor's state, shared by its handlers (cheap to clone).
#[derive(Debug, Clone)]
pub struct ClaudeCode {
    inner: Arc<Inner>,
}

fn refuse(code: Code, message: impl Into<String>) -> RpcError {
    RpcError::new(code, message)
}

fn not_adoptable(id: &str, why: impl std::fmt::Display) -> RpcError {
    refuse(
        Code::NotAdoptable,
        format!("execution {id} is not adoptable: {why}"),
    )
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
    if executor.is_empty() || executor == EXECUTOR {
        return Ok(());
    }
    Err(refuse(
        Code::Invalid,
        format!("executor `{executor}` is not served here (only `{EXECUTOR}`)"),
    ))
}

/// An ID that names a directory: one path component.
fn check_id(id: &str) -> Result<(), RpcError> {
    let ok =
        !id.is_empty() && id.len() <= 255 && id != "." && id != ".." && !id.contains(['/', '\0']);
    if ok {
        return Ok(());
    }
    Err(refuse(
        Code::Invalid,
        "execution_id must be one path component: non-empty, at most 255 bytes, without / or NUL",
    ))
}

/// A structured failure with its reason in the data.
fn failure(schema: &str, reason: &str, error: String) -> ExecutorWaitResult {
    ExecutorWaitResult {
        data: Some(Payload {
            schema: schema.to_string(),
            data: json!({"reason": reason, "kind": reason}),
        }),
        summary: clip_line(&error, MAX_SUMMARY_BYTES),
        error,
        ..ExecutorWaitResult::new(Outcome::Failed)
    }
}

fn limited_failure(schema: &str, reset_at: &str) -> ExecutorWaitResult {
    let mut r = failure(
        schema,
        "usage_limit",
        format!("claude hit a usage limit; retry at {reset_at}"),
    );
    if let Some(d) = r.data.as_mut() {
        d.data["limited"] = json!(true);
        d.data["resets_at"] = json!(reset_at);
    }
    r.retry_hint = Some(RetryHint {
        reset_at: reset_at.to_string(),
    });
    r
}

fn clip(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_string();
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    s[..end].to_string()
}

/// Reads a file, bounded: all of it up to `max` bytes; beyond that its first
/// and last `max / 2` bytes with a marker. A missing file reads as empty.
pub fn read_bounded(path: &Path, max: u64) -> std::io::Result<Vec<u8>> {
    let mut f = match std::fs::File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    let len = f.metadata()?.len();
    if len <= max {
        let mut out = Vec::new();
        f.read_to_end(&mut out)?;
        return Ok(out);
    }
    let half = max / 2;
    let mut out = Vec::new();
    (&mut f).take(half).read_to_end(&mut out)?;
    out.extend_from_slice(
        format!(
            "\n[... {} bytes left out: the output passed {max} bytes ...]\n",
            len - 2 * half
        )
        .as_bytes(),
    );
    f.seek(SeekFrom::Start(len - half))?;
    f.take(half).read_to_end(&mut out)?;
    Ok(out)
}

/// Answers `validate` for kind `executor`, type `claude-code`: diagnostics
/// naming the field (a JSON pointer), warnings about settings that should
/// change, or a line describing what the config runs.
pub fn validate(p: &ValidateParams) -> ValidateResult {
    let mut result = ValidateResult::default();
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
            path: e.pointer(),
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

/// `check.run` for the check `claude-code` (doctor): warns, with the fix, when
/// this executor runs as root, where the default `permission_mode` fails every turn
/// (a binding with `IS_SANDBOX=1` in its env, or another mode, is fine).
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
        return CheckRunResult {
            status: "warn".into(),
            code: "root_bypass_permissions".into(),
            detail: format!("the executor runs as root: {}", config::ROOT_BYPASS),
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
    if let Ok(mut f) = std::fs::File::open("/dev/urandom") {
        let _ = f.read_exact(&mut b);
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

/// The JSON schema of the structured status (`--json-schema`). Its
/// descriptions say only what each state means to Open Conduit.
pub fn status_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "state": {
                "type": "string",
                "enum": ["finished", "building", "review", "help", "done"],
                "description": "finished: the Work is complete and closes. building: work continues; the Work stays open for its next input. review: something is ready for the owner to look at; the Work stays open. help: you need the owner's answer to go on; the Work stays open. done: your part is done and the owner decides what follows; the Work stays open."
            },
            "summary": {"type": "string", "description": "One line saying what this turn did."},
            "handoff": {"type": "string", "description": "A note for a fresh session continuing this Work: what was done, what is next, where things are."},
            "report": {"type": "string", "description": "An optional longer write-up of the turn for the operator."}
        },
        "required": ["state", "summary", "handoff"]
    })
}

struct Prepared {
    cfg: ClaudeConfig,
    cwd: PathBuf,
    env: BTreeMap<String, String>,
    binary: PathBuf,
}

impl ClaudeCode {
    /// An executor whose directories come from `dirs` (filled in by
    /// `initialize`), launching segments through this process's own executable.
    pub fn new(dirs: SharedDirs) -> ClaudeCode {
        let exe = std::env::current_exe().map_err(|e| e.to_string());
        ClaudeCode {
            inner: Arc::new(Inner {
                dirs,
                exe,
                table: Mutex::new(Table::default()),
                hold: Mutex::new(None),
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
    ) -> Arc<Run> {
        let mut t = self.table();
        let seq = t.next_seq;
        t.next_seq += 1;
        let ended = known.is_some();
        let run = Arc::new(Run {
            work_id: req.work.id.clone(),
            seq,
            epoch: AtomicU64::new(req.epoch),
            req: Mutex::new(req.clone()),
            launch,
            stdin: tokio::sync::Mutex::new(stdin),
            injected: Mutex::new(Vec::new()),
            result: tokio::sync::Mutex::new(known),
            ended: AtomicBool::new(ended),
        });
        t.runs.insert(req.execution_id.clone(), Arc::clone(&run));
        evict(&mut t);
        run
    }

    fn known(&self, req: &RunRequest, result: ExecutorWaitResult) {
        self.insert(req, None, None, Some(result));
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

    fn hold_now(&self, now: i64) -> Option<String> {
        let mut h = self.inner.hold.lock().unwrap_or_else(|p| p.into_inner());
        match h.clone() {
            Some((until, reset_at)) if until > now => Some(reset_at),
            Some(_) => {
                *h = None;
                None
            }
            None => None,
        }
    }

    fn set_hold(&self, until: i64, reset_at: &str) {
        let mut h = self.inner.hold.lock().unwrap_or_else(|p| p.into_inner());
        if h.as_ref().is_none_or(|(u, _)| *u < until) {
            *h = Some((until, reset_at.to_string()));
        }
    }

    /// The hold, in memory or in the KV (another process of this executor
    /// may have recorded it).
    async fn hold(&self, host: &Host, now: i64) -> Option<String> {
        if let Some(r) = self.hold_now(now) {
            return Some(r);
        }
        let got = host.kv_get(HOLD_KEY).await.ok()?;
        let v = got.value?;
        let until = v.get("until_ms").and_then(Value::as_i64)?;
        let reset_at = v.get("reset_at").and_then(Value::as_str)?.to_string();
        if until > now {
            self.set_hold(until, &reset_at);
            return Some(reset_at);
        }
        None
    }

    /// `executor.run`: checks what needs no process (config, dry run, the
    /// usage-limit hold, the working directory, secrets, the binary; each a
    /// structured failure with no process), then starts the first segment.
    pub async fn run(
        &self,
        host: &Host,
        p: ExecutorRunParams,
    ) -> Result<ExecutorRunResult, RpcError> {
        let req = p.run;
        check_executor(&req.executor)?;
        check_id(&req.execution_id)?;
        if self.get(&req.execution_id).is_some() {
            return Ok(ExecutorRunResult {});
        }
        self.start(host, req, "1", false).await?;
        Ok(ExecutorRunResult {})
    }

    /// `executor.resume`: wakes a parked execution as a new `--resume` segment
    /// of the same session, with the inputs that woke it.
    pub async fn resume(
        &self,
        host: &Host,
        p: ExecutorResumeParams,
    ) -> Result<ExecutorResumeResult, RpcError> {
        check_executor(&p.executor)?;
        let id = p.execution_id.as_str();
        let run = self.get(id).ok_or_else(|| {
            refuse(
                Code::NotFound,
                format!("execution {id} is not known to this process"),
            )
        })?;
        check_epoch(&run, p.epoch)?;
        if !run.ended.load(Ordering::SeqCst) && run.result.lock().await.is_none() {
            return Err(refuse(
                Code::Conflict,
                format!("execution {id} is still running a segment"),
            ));
        }
        let mut req = run.req.lock().unwrap_or_else(|e| e.into_inner()).clone();
        req.epoch = p.epoch;
        req.inputs = p.inputs;
        if let Some(t) = p.toolbelt {
            req.toolbelt = t;
        }
        let exec_dir = self.runs_dir().join(id);
        let next = latest_segment(&exec_dir).map_or(1, |(n, _)| n + 1);
        self.start(host, req, &next.to_string(), true).await?;
        Ok(ExecutorResumeResult {})
    }

    async fn prepare(
        &self,
        host: &Host,
        req: &RunRequest,
        token_file: &Path,
    ) -> Result<Prepared, ExecutorWaitResult> {
        let cfg = config::parse(&req.config).map_err(|e| {
            failure(
                RESULT_SCHEMA,
                "invalid_config",
                format!("invalid claude-code executor config: {e}"),
            )
        })?;
        let schema = cfg.status_schema.clone();
        let cwd = self.workspace(&cfg, &req.work.id);
        if cfg.dir.is_some() {
            if !cwd.is_dir() {
                return Err(failure(
                    &schema,
                    "workspace_unavailable",
                    format!(
                        "workspace_unavailable: the binding's dir {} is not a directory",
                        cwd.display()
                    ),
                ));
            }
        } else if let Err(e) = std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&cwd)
        {
            return Err(failure(
                &schema,
                "workspace_unavailable",
                format!(
                    "workspace_unavailable: cannot create {}: {e}",
                    cwd.display()
                ),
            ));
        }
        let mut secrets = BTreeMap::new();
        if !cfg.secret_env.is_empty() {
            let names: Vec<String> = cfg.secret_env.values().cloned().collect();
            let got = host
                .call_typed(&SecretResolveParams {
                    scope_id: req.work.scope_id.clone(),
                    connection: req.binding.connection.clone(),
                    names,
                })
                .await
                .map_err(|e| {
                    failure(
                        &schema,
                        "secret_unavailable",
                        format!("the binding's secrets could not be resolved: {e}"),
                    )
                })?;
            for (var, name) in &cfg.secret_env {
                match got.values.get(name) {
                    Some(v) => {
                        secrets.insert(var.clone(), v.clone());
                    }
                    None => {
                        return Err(failure(
                            &schema,
                            "secret_unavailable",
                            format!("the secret {name} for {var} was not resolved"),
                        ))
                    }
                }
            }
        }
        let own: BTreeMap<String, String> = std::env::vars().collect();
        let client = has_toolbelt(req).then(|| ToolbeltClient {
            endpoint: req.toolbelt.endpoint.clone(),
            token_file: token_file.display().to_string(),
            dir: req.toolbelt.dir.clone(),
        });
        let env = envs::build(&own, req, &cfg, &secrets, client.as_ref());
        let binary = envs::find_program(&cfg.binary, &env).ok_or_else(|| {
            failure(
                &schema,
                "binary_missing",
                format!(
                    "binary_missing: the Claude Code CLI `{}` was not found (set the binding's binary, or put it on PATH)",
                    cfg.binary
                ),
            )
        })?;
        Ok(Prepared {
            cfg,
            cwd,
            env,
            binary,
        })
    }

    /// Starts segment `segment` of `req`: the checks that need no process, the
    /// recovery intent (persisted first), the decision (recorded in the KV
    /// before the launch), the files, the wrapper, and the prompt on stdin.
    async fn start(
        &self,
        host: &Host,
        req: RunRequest,
        segment: &str,
        force_resume: bool,
    ) -> Result<(), RpcError> {
        let id = req.execution_id.clone();
        let exec_dir = self.runs_dir().join(&id);
        let dir = exec_dir.join(segment);
        let token_file = dir.join(rundir::TOKEN);
        let prepared = match self.prepare(host, &req, &token_file).await {
            Ok(p) => p,
            Err(result) => {
                self.known(&req, result);
                return Ok(());
            }
        };
        let Prepared {
            cfg,
            cwd,
            env,
            binary,
        } = prepared;
        if req.dry_run {
            let result = ExecutorWaitResult {
                summary: clip_line(&format!("dry run: {}", cfg.describe()), MAX_SUMMARY_BYTES),
                ..ExecutorWaitResult::new(Outcome::Completed)
            };
            self.known(&req, result);
            return Ok(());
        }
        let now = protocol::time::now_ms();
        if let Some(reset_at) = self.hold(host, now).await {
            self.known(&req, limited_failure(&cfg.status_schema, &reset_at));
            return Ok(());
        }
        let exe = self.inner.exe.clone().map_err(|e| {
            internal(format!(
                "cannot find this executable to start the wrapper: {e}"
            ))
        })?;
        let nonce = rundir::nonce().map_err(|e| internal(format!("making a nonce: {e}")))?;
        // Recovery intent first, before anything is touched.
        persist(host, &req, &dir, &nonce, 0).await?;
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&exec_dir)
            .map_err(|e| internal(format!("cannot create {}: {e}", exec_dir.display())))?;
        match std::fs::DirBuilder::new().mode(0o700).create(&dir) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                return Err(refuse(
                    Code::Conflict,
                    format!(
                        "execution {id} segment {segment} was launched before: recover it instead"
                    ),
                ))
            }
            Err(e) => return Err(internal(format!("cannot create {}: {e}", dir.display()))),
        }
        let config_dir = envs::claude_config_dir(&env);
        let cwd_text = cwd.display().to_string();
        let (decision, note) = self
            .decide(host, &req, &cfg, segment, force_resume, |s| {
                continuity::find_transcript(&config_dir, &cwd_text, s).is_some()
            })
            .await?;
        if std::env::var(FAULT_ENV).as_deref() == Ok("after_decision") {
            eprintln!("claude-code: {FAULT_ENV}=after_decision: exiting before the launch");
            std::process::exit(86);
        }
        let found = continuity::find_transcript(&config_dir, &cwd_text, &decision.session);
        let launched = if decision.kind == Kind::Fresh && found.is_some() {
            Kind::Resume
        } else {
            decision.kind
        };
        let transcript = found.unwrap_or_else(|| {
            continuity::transcript_path(&config_dir, &cwd_text, &decision.session)
        });
        let mcp = if has_toolbelt(&req) {
            let io = |e: std::io::Error| internal(format!("writing the MCP config: {e}"));
            write_token(&token_file, &req.toolbelt.token).map_err(io)?;
            let command = if req.toolbelt.dir.is_empty() {
                std::env::var("OPEN_CONDUIT_BIN")
                    .ok()
                    .filter(|s| !s.is_empty())
                    .unwrap_or_else(|| "open-conduit".to_string())
            } else {
                Path::new(&req.toolbelt.dir)
                    .join("open-conduit")
                    .display()
                    .to_string()
            };
            let mcp = json!({"mcpServers": {"open-conduit": {
                "command": command,
                "args": ["mcp"],
                "env": {"OS_ENDPOINT": req.toolbelt.endpoint, "OS_TOKEN_FILE": token_file},
            }}});
            rundir::write_json(&dir, rundir::MCP, &mcp).map_err(io)?;
            Some(dir.join(rundir::MCP))
        } else {
            None
        };
        let model = cfg.model_for(&req.work.context);
        let mut argv: Vec<String> = vec![
            binary.display().to_string(),
            "-p".into(),
            "--model".into(),
            model.clone(),
            "--permission-mode".into(),
            cfg.permission_mode.clone(),
            "--input-format".into(),
            "stream-json".into(),
            "--output-format".into(),
            "stream-json".into(),
            "--verbose".into(),
            "--replay-user-messages".into(),
        ];
        let plugin_dir = cfg.plugin_dir.clone().or_else(|| {
            (cfg.playbook.is_some() && !req.playbook_dir.is_empty())
                .then(|| req.playbook_dir.clone())
        });
        if let Some(d) = plugin_dir {
            argv.extend(["--plugin-dir".into(), d]);
        }
        if cfg.structured {
            argv.extend(["--json-schema".into(), status_schema().to_string()]);
        }
        match launched {
            Kind::Resume => argv.extend(["--resume".into(), decision.session.clone()]),
            Kind::Fresh => argv.extend(["--session-id".into(), decision.session.clone()]),
        }
        if let Some(m) = &mcp {
            // The toolbelt's tools are always allowed, whatever the permission mode.
            argv.extend([
                "--mcp-config".into(),
                m.display().to_string(),
                "--allowedTools".into(),
                TOOLBELT_RULE.into(),
            ]);
        }
        if cfg.strict_mcp {
            argv.push("--strict-mcp-config".into());
        }
        if let Some(tools) = &cfg.builtin_tools {
            argv.extend(["--tools".into(), tools.join(",")]);
        }
        argv.extend(cfg.extra_args.iter().cloned());
        let info = SegmentInfo {
            execution_id: id.clone(),
            work_id: req.work.id.clone(),
            segment: segment.to_string(),
            decision: decision.clone(),
            launched,
            cwd: cwd_text.clone(),
            config: req.config.clone(),
            binary: binary.display().to_string(),
            model,
            transcript: transcript.display().to_string(),
            started_ms: now,
        };
        let io = |what: &str, e: std::io::Error| internal(format!("{what}: {e}"));
        rundir::write_json(&dir, rundir::SEGMENT, &info)
            .map_err(|e| io("writing segment.json", e))?;
        let spec = Spec {
            execution_id: id.clone(),
            work_id: req.work.id.clone(),
            argv,
            cwd: cwd_text,
            deadline_s: None,
            grace_s: GRACE_S,
            nonce: nonce.clone(),
        };
        rundir::write_json(&dir, rundir::SPEC, &spec).map_err(|e| io("writing spec.json", e))?;
        let log = std::fs::File::create(dir.join(rundir::WRAPPER_LOG))
            .map_err(|e| io("creating wrapper.log", e))?;
        let mut child = tokio::process::Command::new(&exe)
            .arg(rundir::WRAP_ARG)
            .arg(&dir)
            .arg(&nonce)
            .current_dir(&dir)
            .env_clear()
            .envs(&env)
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(log)
            .kill_on_drop(false)
            .spawn()
            .map_err(|e| io("cannot start the claude-code wrapper", e))?;
        let pid = child
            .id()
            .and_then(|p| i32::try_from(p).ok())
            .ok_or_else(|| internal("the wrapper has no pid"))?;
        // Read before anything can reap the child: pid and start time name it.
        let start = rundir::start_time(pid);
        let mut stdin = child.stdin.take();
        let meta = Meta {
            pid,
            pgid: 0,
            nonce: nonce.clone(),
            started_at: String::new(),
            start,
        };
        let persisted = match rundir::write_json(&dir, rundir::META, &meta) {
            Err(e) => Err(io("writing meta.json", e)),
            Ok(()) => persist(host, &req, &dir, &nonce, pid).await,
        };
        if let Err(e) = persisted {
            drop(stdin);
            let _ = child.wait().await;
            return Err(e);
        }
        let args = prompt::template(&cfg.args, &req.work);
        let text = prompt::prompt(
            cfg.playbook.as_deref(),
            &args,
            decision.shape,
            &note,
            &req.inputs,
        );
        if let Some(pipe) = stdin.as_mut() {
            let first = format!("go\n{}", prompt::user_message(&text));
            if pipe.write_all(first.as_bytes()).await.is_err() {
                // The wrapper died already: the first wait finds it lost.
                stdin = None;
            } else {
                let _ = pipe.flush().await;
            }
        }
        tokio::spawn(async move {
            let _ = child.wait().await;
        });
        let launch = Launch {
            dir: dir.clone(),
            pid,
            start,
            nonce,
            wrap_arg: rundir::WRAP_ARG,
        };
        let run = self.insert(&req, Some(launch), stdin, None);
        tokio::spawn(follow(run, dir));
        Ok(())
    }

    /// Reads continuity and decides (or takes over the decision in flight),
    /// recording it in the KV before the launch. Answers the decision and the
    /// note a handoff starts from.
    async fn decide(
        &self,
        host: &Host,
        req: &RunRequest,
        cfg: &ClaudeConfig,
        segment: &str,
        force_resume: bool,
        transcript_exists: impl Fn(&str) -> bool,
    ) -> Result<(Decision, String), RpcError> {
        let key = continuity::key(&req.work.id);
        for _ in 0..KV_RETRIES {
            let got = host
                .kv_get(&key)
                .await
                .map_err(|e| host_error("reading continuity", e))?;
            let mut c: Continuity = match &got.value {
                Some(v) => serde_json::from_value(v.clone()).unwrap_or_else(|e| {
                    eprintln!(
                        "claude-code: work {}: continuity does not read ({e}); starting afresh",
                        req.work.id
                    );
                    Continuity::default()
                }),
                None => Continuity::default(),
            };
            let decision = match c.in_flight.clone() {
                // A decision recorded but never settled: take it over.
                Some(d) => Decision {
                    execution_id: req.execution_id.clone(),
                    epoch: req.epoch,
                    segment: segment.to_string(),
                    ..d
                },
                None if force_resume && !c.session.is_empty() => Decision {
                    execution_id: req.execution_id.clone(),
                    epoch: req.epoch,
                    segment: segment.to_string(),
                    kind: Kind::Resume,
                    session: c.session.clone(),
                    shape: Shape::Events,
                    handoff_reason: String::new(),
                },
                None => continuity::decide(
                    &c,
                    cfg,
                    !c.session.is_empty() && transcript_exists(&c.session),
                    protocol::time::now_ms(),
                    &req.execution_id,
                    req.epoch,
                    segment,
                    new_session_id,
                ),
            };
            if let Some(old) = &c.in_flight {
                if old.execution_id == req.execution_id && old.epoch > req.epoch {
                    return Err(refuse(
                        Code::Conflict,
                        format!("epoch {} is superseded by {}", req.epoch, old.epoch),
                    ));
                }
            }
            let note = c.note.clone().unwrap_or_default();
            continuity::record_decision(&mut c, &decision);
            let batch = KvCommitParams {
                checks: vec![got.check("", &key)],
                puts: vec![KvPut {
                    namespace: String::new(),
                    key: key.clone(),
                    value: json!(c),
                }],
                ..KvCommitParams::default()
            };
            match host.kv_commit(&batch).await {
                Ok(_) => return Ok((decision, note)),
                Err(CallError::Rpc(e)) if e.is(Code::Conflict) => continue,
                Err(e) => return Err(host_error("recording the decision", e)),
            }
        }
        Err(refuse(
            Code::Conflict,
            "continuity kept changing while the decision was recorded",
        ))
    }

    /// `executor.recover`: adopts a segment from its recovery metadata at the
    /// new epoch when its result or end is recorded, or its wrapper is alive and
    /// proves by the nonce to be the one started (replacing the toolbelt token
    /// file first with the new run's token). A lower epoch, metadata that does
    /// not match the segment directory, or a dead process with no recorded end
    /// is `not_adoptable`. Never launches.
    pub async fn recover(
        &self,
        p: ExecutorRecoverParams,
    ) -> Result<ExecutorRecoverResult, RpcError> {
        let req = p.run;
        check_executor(&req.executor)?;
        check_id(&req.execution_id)?;
        let id = req.execution_id.as_str();
        if p.recovery.schema != RECOVERY_SCHEMA {
            return Err(not_adoptable(
                id,
                format!("the recovery metadata is not {RECOVERY_SCHEMA}"),
            ));
        }
        let data: RecoveryData = serde_json::from_value(p.recovery.data.clone())
            .map_err(|e| not_adoptable(id, format!("the recovery metadata does not read: {e}")))?;
        if req.epoch < data.epoch {
            return Err(not_adoptable(
                id,
                format!("epoch {} is lower than the run's {}", req.epoch, data.epoch),
            ));
        }
        if let Some(run) = self.get(id) {
            let current = run.epoch.load(Ordering::SeqCst);
            if req.epoch < current {
                return Err(not_adoptable(
                    id,
                    format!("epoch {} is lower than the run's {current}", req.epoch),
                ));
            }
            run.epoch.fetch_max(req.epoch, Ordering::SeqCst);
            return Ok(ExecutorRecoverResult {});
        }
        let dir = PathBuf::from(&data.segment_dir);
        let exec_dir = dir.parent().map(Path::to_path_buf).unwrap_or_default();
        let ours = dir.is_absolute()
            && exec_dir.file_name().and_then(|n| n.to_str()) == Some(id)
            && exec_dir.parent() == Some(self.runs_dir().as_path());
        if !ours {
            return Err(not_adoptable(
                id,
                "the segment directory is not this execution's",
            ));
        }
        if !rundir::is_nonce(&data.nonce) {
            return Err(not_adoptable(id, "the nonce is malformed"));
        }
        let spec: Spec =
            match rundir::read_json(&dir, rundir::SPEC) {
                Ok(Some(spec)) => spec,
                Ok(None) => return Err(not_adoptable(
                    id,
                    "the segment was never launched (its decision may be taken over by a retry)",
                )),
                Err(e) => {
                    return Err(not_adoptable(
                        id,
                        format!("its spec.json does not read: {e}"),
                    ))
                }
            };
        if spec.nonce != data.nonce || spec.execution_id != id {
            return Err(not_adoptable(
                id,
                "the metadata does not match its segment directory",
            ));
        }
        let adopted: u64 = rundir::read_json::<Value>(&dir, "adopted.json")
            .ok()
            .flatten()
            .and_then(|v| v.get("epoch").and_then(Value::as_u64))
            .unwrap_or(0);
        if req.epoch < adopted {
            return Err(not_adoptable(
                id,
                format!("epoch {} is lower than the adoption's {adopted}", req.epoch),
            ));
        }
        if let Ok(Some(result)) = rundir::read_json::<ExecutorWaitResult>(&dir, rundir::RESULT) {
            self.insert(&req, None, None, Some(result));
            return Ok(ExecutorRecoverResult {});
        }
        let meta = rundir::read_json::<Meta>(&dir, rundir::META).ok().flatten();
        let pid = match &meta {
            Some(m) if m.pid != data.pid && data.pid != 0 => {
                return Err(not_adoptable(
                    id,
                    "the metadata does not match its segment directory",
                ))
            }
            Some(m) if m.nonce != data.nonce => {
                return Err(not_adoptable(
                    id,
                    "the metadata does not match its segment directory",
                ))
            }
            Some(m) => m.pid,
            None => data.pid,
        };
        let start = meta.as_ref().map_or(0, |m| m.start);
        let alive = rundir::wrapper_alive(pid, start, &data.nonce, rundir::WRAP_ARG);
        let ended = rundir::exists(&dir, rundir::STATUS);
        if !ended && !alive {
            return Err(not_adoptable(
                id,
                format!("its process {pid} is gone and recorded no end"),
            ));
        }
        if !ended && rundir::exists(&dir, rundir::MCP) && !req.toolbelt.token.is_empty() {
            write_token(&dir.join(rundir::TOKEN), &req.toolbelt.token)
                .map_err(|e| internal(format!("replacing the toolbelt token file: {e}")))?;
        }
        rundir::write_json(&dir, "adopted.json", &json!({"epoch": req.epoch}))
            .map_err(|e| internal(format!("recording the adoption: {e}")))?;
        let launch = Launch {
            dir,
            pid,
            start,
            nonce: data.nonce,
            wrap_arg: rundir::WRAP_ARG,
        };
        self.insert(&req, Some(launch), None, None);
        Ok(ExecutorRecoverResult {})
    }

    /// `executor.wait`: resolves once the segment's end is recorded, then
    /// applies the turn to continuity (once), uploads out.jsonl and err.log as
    /// artifacts and answers the result. Every wait, and a wait after a
    /// recover, gets the same result. An unknown execution is `not_found`.
    pub async fn wait(
        &self,
        host: &Host,
        p: ExecutorWaitParams,
    ) -> Result<ExecutorWaitResult, RpcError> {
        check_executor(&p.executor)?;
        let id = p.execution_id.as_str();
        let run = self.get(id).ok_or_else(|| {
            refuse(
                Code::NotFound,
                format!("execution {id} is not known to this process: recover it"),
            )
        })?;
        if let Some(r) = run.result.lock().await.clone() {
            return Ok(r);
        }
        let Some(launch) = run.launch.clone() else {
            return Err(internal(format!(
                "execution {id} has neither a process nor a result"
            )));
        };
        launch.await_end(WORDS).await;
        let mut cached = run.result.lock().await;
        if let Some(r) = cached.clone() {
            return Ok(r);
        }
        run.stdin.lock().await.take();
        let result = match rundir::read_json::<ExecutorWaitResult>(&launch.dir, rundir::RESULT) {
            Ok(Some(r)) => r,
            _ => {
                let r = self.build_result(host, id, &launch).await?;
                if let Err(e) = rundir::write_json(&launch.dir, rundir::RESULT, &r) {
                    eprintln!("claude-code: execution {id}: cannot record the result: {e}");
                }
                r
            }
        };
        *cached = Some(result.clone());
        drop(cached);
        run.ended.store(true, Ordering::SeqCst);
        evict(&mut self.table());
        Ok(result)
    }

    async fn build_result(
        &self,
        host: &Host,
        id: &str,
        launch: &Launch,
    ) -> Result<ExecutorWaitResult, RpcError> {
        let dir = launch.dir.clone();
        let status = match rundir::read_json::<Status>(&dir, rundir::STATUS) {
            Ok(Some(s)) => s,
            Ok(None) => Status {
                error: "the segment's status is missing".into(),
                ..Status::default()
            },
            Err(e) => Status {
                error: format!("the segment's status does not read: {e}"),
                ..Status::default()
            },
        };
        let info: SegmentInfo = rundir::read_json(&dir, rundir::SEGMENT)
            .ok()
            .flatten()
            .ok_or_else(|| internal(format!("execution {id}: segment.json is missing")))?;
        let cfg = config::parse(&info.config).ok();
        let schema = cfg
            .as_ref()
            .map_or(RESULT_SCHEMA.to_string(), |c| c.status_schema.clone());
        let structured = cfg.as_ref().is_none_or(|c| c.structured);
        let read = |name: &'static str| {
            let path = dir.join(name);
            async move {
                tokio::task::spawn_blocking(move || read_bounded(&path, MAX_OUTPUT_BYTES))
                    .await
                    .map_err(|e| internal(format!("reading {name}: {e}")))?
                    .map_err(|e| internal(format!("reading {name}: {e}")))
            }
        };
        let out = read(rundir::STDOUT).await?;
        let err = read(rundir::STDERR).await?;
        let now = protocol::time::now_ms();
        let turn = stream::parse(
            &String::from_utf8_lossy(&out),
            &String::from_utf8_lossy(&err),
            now,
        );
        let injected = read_injected(&dir);
        let consumed: Vec<String> = turn
            .echoed
            .iter()
            .filter(|e| injected.contains(e))
            .cloned()
            .collect();

        // The outcome.
        let mut state: Option<String> = None;
        let mut note: Option<String> = None;
        let mut summary = String::new();
        let mut report: Option<String> = None;
        let mut reason = String::new();
        let mut retry_hint = None;
        let mut resets_at = String::new();
        let (outcome, error) = if let Some(cause) = status.cause {
            reason = match cause {
                Cause::Stop => "stopped".into(),
                _ => "interrupted".into(),
            };
            (
                Outcome::Failed,
                status.failure().unwrap_or_else(|| "interrupted".into()),
            )
        } else if let Some(limit) = turn.limit {
            let reset_ms = match limit.reset_ms {
                Some(r) => r + LIMIT_GRACE_MS,
                None => now + UNKNOWN_RESET_MS,
            };
            resets_at = protocol::time::format_rfc3339_ms(reset_ms);
            self.set_hold(reset_ms, &resets_at);
            let hold = KvCommitParams {
                puts: vec![KvPut {
                    namespace: String::new(),
                    key: HOLD_KEY.to_string(),
                    value: json!({"until_ms": reset_ms, "reset_at": resets_at}),
                }],
                ..KvCommitParams::default()
            };
            if let Err(e) = host.kv_commit(&hold).await {
                eprintln!("claude-code: cannot record the usage-limit hold: {e}");
            }
            retry_hint = Some(RetryHint {
                reset_at: resets_at.clone(),
            });
            reason = "usage_limit".into();
            (
                Outcome::Failed,
                format!("claude hit a usage limit; retry at {resets_at}"),
            )
        } else {
            match &turn.result {
                None => {
                    reason = if turn.lost_session {
                        "session_missing".into()
                    } else {
                        "no_result".into()
                    };
                    let mut e = format!("claude ended without a result: {}", status.how());
                    if turn.lost_session {
                        e.push_str(&format!(
                            " (no conversation found with session {})",
                            info.decision.session
                        ));
                    } else if let Some(line) = String::from_utf8_lossy(&err)
                        .lines()
                        .rev()
                        .find(|l| !l.trim().is_empty())
                    {
                        e.push_str(&format!(": {}", clip_line(line, 300)));
                    }
                    (Outcome::Failed, e)
                }
                Some(r) if r.is_error => {
                    reason = if turn.lost_session {
                        "session_missing".into()
                    } else {
                        "error".into()
                    };
                    (
                        Outcome::Failed,
                        format!("claude reported an error: {}", clip_line(&r.text, 300)),
                    )
                }
                Some(r) if !structured => {
                    summary = clip_line(&r.text, MAX_SUMMARY_BYTES);
                    (Outcome::Handoff, String::new())
                }
                Some(r) => match r.structured.as_ref().and_then(|s| s.as_object()) {
                    None => {
                        reason = "no_status".into();
                        (
                            Outcome::Failed,
                            "the turn ended without a status".to_string(),
                        )
                    }
                    Some(s) => {
                        let st = s.get("state").and_then(Value::as_str).unwrap_or("");
                        summary = clip_line(
                            s.get("summary").and_then(Value::as_str).unwrap_or(""),
                            MAX_SUMMARY_BYTES,
                        );
                        report = s
                            .get("report")
                            .and_then(Value::as_str)
                            .filter(|t| !t.is_empty())
                            .map(|t| clip(t, MAX_REPORT_BYTES));
                        note = s
                            .get("handoff")
                            .and_then(Value::as_str)
                            .filter(|t| !t.trim().is_empty())
                            .map(str::to_string);
                        match st {
                            "finished" => {
                                state = Some(st.to_string());
                                (Outcome::Completed, String::new())
                            }
                            "building" | "review" | "help" | "done" => {
                                state = Some(st.to_string());
                                (Outcome::Handoff, String::new())
                            }
                            other => {
                                reason = "no_status".into();
                                (
                                    Outcome::Failed,
                                    format!(
                                        "the turn ended with an unknown state `{}`",
                                        clip_line(other, 40)
                                    ),
                                )
                            }
                        }
                    }
                },
            }
        };

        // A turn whose toolbelt call claude refused is no success: what it declared
        // (or could not) is not what the agent meant.
        let (outcome, error) = if !turn.toolbelt_denied.is_empty() && outcome != Outcome::Failed {
            reason = "toolbelt_denied".into();
            state = None;
            (
                Outcome::Failed,
                format!(
                    "claude refused the toolbelt ({}) under permission_mode {:?}",
                    turn.toolbelt_denied.join(", "),
                    cfg.as_ref().map_or("", |c| c.permission_mode.as_str())
                ),
            )
        } else {
            (outcome, error)
        };

        // Continuity, once per segment, before the result is recorded.
        let segment_key = format!("{id}/{}", info.segment);
        let session = if turn.session_id.is_empty() {
            info.decision.session.clone()
        } else {
            turn.session_id.clone()
        };
        let reported = turn.result.as_ref().map(stream::ResultLine::reported);
        let mut attach = vec![info.binary.clone(), "--resume".into(), session.clone()];
        if let Some(c) = &cfg {
            attach.extend(attach_limits(c));
        }
        let end = TurnEnd {
            segment: segment_key,
            session,
            reported,
            fresh: info.launched == Kind::Fresh,
            state: state.clone(),
            note,
            context_tokens: turn.context_tokens(),
            ended_ms: now,
            lost_session: turn.lost_session,
            attach,
        };
        let delta = apply_turn(host, &info.work_id, &end).await?;
        let usage = turn.result.is_some().then_some(Usage {
            input_tokens: delta.tokens.input,
            output_tokens: delta.tokens.output,
            cached_tokens: delta.tokens.cache_read,
            cache_creation_tokens: delta.tokens.cache_creation,
            cost_usd: delta.cost_usd,
        });

        // Artifacts.
        let mut artifacts = Vec::new();
        let mut named = serde_json::Map::new();
        for (name, media, bytes, label) in [
            (rundir::STDOUT, "application/x-ndjson", &out, "transcript"),
            (rundir::STDERR, "text/plain", &err, "log"),
        ] {
            if bytes.is_empty() {
                continue;
            }
            let create = ArtifactCreateParams {
                execution_id: id.to_string(),
                name: name.to_string(),
                media_type: media.to_string(),
                max_bytes: 0,
            };
            match host.upload_artifact(&create, bytes).await {
                Ok(committed) => {
                    named.insert(label.into(), json!(committed.artifact_id));
                    artifacts.push(committed.artifact_id);
                }
                Err(CallError::Rpc(e)) => {
                    eprintln!(
                        "claude-code: execution {id}: the host refused the {name} artifact: {e}"
                    );
                }
                Err(e) => {
                    return Err(refuse(
                        Code::Unavailable,
                        format!("uploading the {name} artifact: {e}"),
                    ))
                }
            }
        }

        let mut data = json!({
            "state": state.clone().unwrap_or_default(),
            "summary": summary,
            "kind": match info.launched { Kind::Resume => "resume", Kind::Fresh => "fresh" },
            "models": turn.models.iter().collect::<Vec<_>>(),
            "model_calls": turn.model_calls,
            "tool_calls": turn.tool_calls,
            "tokens": {
                "input": delta.tokens.input,
                "output": delta.tokens.output,
                "cache_read": delta.tokens.cache_read,
                "cache_creation": delta.tokens.cache_creation,
            },
            "cost_usd": delta.cost_usd,
            "limited": retry_hint.is_some(),
            "injected": {"accepted": injected.len(), "consumed": consumed.len()},
            "artifacts": Value::Object(named),
        });
        if !reason.is_empty() {
            data["reason"] = json!(reason);
        }
        if !info.decision.handoff_reason.is_empty() {
            data["handoff_reason"] = json!(info.decision.handoff_reason);
        }
        if let Some(r) = report {
            data["report"] = json!(r);
        }
        if !resets_at.is_empty() {
            data["resets_at"] = json!(resets_at);
        }
        if let Some(code) = status.exit_code {
            data["exit_code"] = json!(code);
        }
        if summary_is_empty(&data) && !error.is_empty() {
            data["summary"] = json!(clip_line(&error, MAX_SUMMARY_BYTES));
        }
        let summary = data["summary"].as_str().unwrap_or("").to_string();
        Ok(ExecutorWaitResult {
            outcome,
            data: Some(Payload { schema, data }),
            summary,
            error,
            wait: None,
            consumed_inputs: consumed,
            retry_hint,
            usage,
            artifacts,
        })
    }

    /// `executor.inject`: writes the Event to the segment's stdin as a
    /// stream-json user message. Only a segment this process started and whose
    /// result has not arrived takes input; anything else is `not_accepting`. An
    /// Event already written is not written again.
    pub async fn inject(&self, p: ExecutorInjectParams) -> Result<ExecutorInjectResult, RpcError> {
        check_executor(&p.executor)?;
        let id = p.execution_id.as_str();
        let Some(run) = self.get(id) else {
            return Err(not_accepting(id, "this process does not hold it"));
        };
        check_epoch(&run, p.epoch)?;
        if run.ended.load(Ordering::SeqCst) {
            return Err(not_accepting(id, "its turn has ended"));
        }
        let mut stdin = run.stdin.lock().await;
        let Some(pipe) = stdin.as_mut() else {
            return Err(not_accepting(
                id,
                "its segment is adopted or already has its result",
            ));
        };
        let dir = run.launch.as_ref().map(|l| l.dir.clone());
        if let Some(d) = &dir {
            if rundir::exists(d, rundir::STATUS) {
                return Err(not_accepting(id, "its turn has ended"));
            }
        }
        {
            let written = run.injected.lock().unwrap_or_else(|e| e.into_inner());
            if written.contains(&p.event.id) {
                return Ok(ExecutorInjectResult {});
            }
        }
        let line = prompt::user_message(&prompt::inject_text(&p.event));
        if pipe.write_all(line.as_bytes()).await.is_err() || pipe.flush().await.is_err() {
            *stdin = None;
            return Err(not_accepting(id, "its input closed"));
        }
        run.injected
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(p.event.id.clone());
        if let Some(d) = dir {
            let record = format!("{}\n", json!({"id": p.event.id}));
            let appended = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .mode(0o600)
                .open(d.join(rundir::INJECTED))
                .and_then(|mut f| f.write_all(record.as_bytes()));
            if let Err(e) = appended {
                eprintln!("claude-code: execution {id}: cannot record an injection: {e}");
            }
        }
        Ok(ExecutorInjectResult {})
    }

    /// `executor.interrupt`: asks the wrapper to end claude's group (SIGTERM,
    /// then SIGKILL after the grace period), cause `interrupt`. Answers at once.
    pub async fn interrupt(
        &self,
        p: ExecutorInterruptParams,
    ) -> Result<ExecutorInterruptResult, RpcError> {
        check_executor(&p.executor)?;
        let id = p.execution_id.as_str();
        let run = self.get(id).ok_or_else(|| {
            refuse(
                Code::NotFound,
                format!("execution {id} is not known to this process"),
            )
        })?;
        check_epoch(&run, p.epoch)?;
        let Some(launch) = &run.launch else {
            return Ok(ExecutorInterruptResult {});
        };
        if !rundir::exists(&launch.dir, rundir::STATUS) {
            ask_to_end(launch, Cause::Interrupt, &p.reason)?;
        }
        Ok(ExecutorInterruptResult {})
    }

    /// `executor.stop`: ends the segment's processes (cause `stop`) and answers
    /// once they are gone, with the evidence. Works from the segment directory
    /// alone, for an execution this process never adopted.
    pub async fn stop(&self, p: ExecutorStopParams) -> Result<ExecutorStopResult, RpcError> {
        check_executor(&p.executor)?;
        let id = p.execution_id.as_str();
        check_id(id)?;
        let launch = match self.get(id) {
            Some(run) => {
                check_epoch(&run, p.epoch)?;
                match &run.launch {
                    Some(l) => l.clone(),
                    None => {
                        return Ok(ExecutorStopResult {
                            stopped: true,
                            detail: format!("execution {id} started no process"),
                        })
                    }
                }
            }
            None => {
                let found =
                    latest_segment(&self.runs_dir().join(id)).and_then(|(_, dir)| on_disk(&dir));
                match found {
                    Some(l) => l,
                    None => {
                        return Ok(ExecutorStopResult {
                            stopped: true,
                            detail: format!("execution {id} started no process here"),
                        })
                    }
                }
            }
        };
        launch
            .stop(WORDS)
            .await
            .map_err(|e| internal(format!("asking the wrapper to end claude: {e}")))
    }

    /// `executor.forget`: removes the segment directories of an ended
    /// execution (or of every ended execution of the Work); without an
    /// execution it also releases the Work's continuity. A segment still
    /// running is refused (`conflict`).
    pub async fn forget(
        &self,
        host: &Host,
        p: ExecutorForgetParams,
    ) -> Result<ExecutorForgetResult, RpcError> {
        check_executor(&p.executor)?;
        let runs = self.runs_dir();
        let single = !p.execution_id.is_empty();
        let ids: Vec<String> = if single {
            check_id(&p.execution_id)?;
            vec![p.execution_id.clone()]
        } else if !p.work_id.is_empty() {
            let mut ids: Vec<String> = self
                .table()
                .runs
                .iter()
                .filter(|(_, r)| r.work_id == p.work_id)
                .map(|(id, _)| id.clone())
                .collect();
            if let Ok(entries) = std::fs::read_dir(&runs) {
                for e in entries.flatten() {
                    let Some(name) = e.file_name().to_str().map(str::to_string) else {
                        continue;
                    };
                    let of_work = latest_segment(&e.path())
                        .and_then(|(_, d)| {
                            rundir::read_json::<Spec>(&d, rundir::SPEC).ok().flatten()
                        })
                        .is_some_and(|s| s.work_id == p.work_id);
                    if of_work && !ids.contains(&name) {
                        ids.push(name);
                    }
                }
            }
            ids
        } else {
            return Err(refuse(
                Code::Invalid,
                "forget needs a work_id or an execution_id",
            ));
        };
        for id in ids {
            let exec_dir = runs.join(&id);
            let live = segments(&exec_dir).into_iter().any(|(_, d)| {
                on_disk(&d)
                    .is_some_and(|l| !rundir::exists(&d, rundir::STATUS) && l.wrapper_alive())
            });
            if live {
                if single {
                    return Err(refuse(
                        Code::Conflict,
                        format!("execution {id} is still running: stop it first"),
                    ));
                }
                continue;
            }
            match std::fs::remove_dir_all(&exec_dir) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(internal(format!("removing {}: {e}", exec_dir.display()))),
            }
            self.table().runs.remove(&id);
        }
        if !single && !p.work_id.is_empty() {
            let batch = KvCommitParams {
                deletes: vec![KvDelete {
                    namespace: String::new(),
                    key: continuity::key(&p.work_id),
                }],
                ..KvCommitParams::default()
            };
            host.kv_commit(&batch)
                .await
                .map_err(|e| host_error("releasing continuity", e))?;
        }
        Ok(ExecutorForgetResult {})
    }

    /// `executor.attach`: `claude --resume <session>` in the Work's workspace,
    /// and clears the handoff note so the next turn resumes even when cold. A
    /// Work without a session is `nothing_to_attach`.
    pub async fn attach(
        &self,
        host: &Host,
        p: ExecutorAttachParams,
    ) -> Result<ExecutorAttachResult, RpcError> {
        check_executor(&p.executor)?;
        let cfg = config::parse(&p.config).map_err(|e| {
            refuse(
                Code::Invalid,
                format!("invalid claude-code executor config: {e}"),
            )
        })?;
        let key = continuity::key(&p.work_id);
        for _ in 0..KV_RETRIES {
            let got = host
                .kv_get(&key)
                .await
                .map_err(|e| host_error("reading continuity", e))?;
            let mut c: Continuity = got
                .value
                .clone()
                .and_then(|v| serde_json::from_value(v).ok())
                .unwrap_or_default();
            if c.session.is_empty() {
                return Err(refuse(
                    Code::NothingToAttach,
                    format!("work {} has no Claude Code session", p.work_id),
                ));
            }
            let mut argv = vec![cfg.binary.clone(), "--resume".into(), c.session.clone()];
            argv.extend(attach_limits(&cfg));
            c.note = None;
            c.attach = argv.clone();
            let batch = KvCommitParams {
                checks: vec![got.check("", &key)],
                puts: vec![KvPut {
                    namespace: String::new(),
                    key: key.clone(),
                    value: json!(c),
                }],
                ..KvCommitParams::default()
            };
            match host.kv_commit(&batch).await {
                Ok(_) => {
                    return Ok(ExecutorAttachResult {
                        argv,
                        dir: self.workspace(&cfg, &p.work_id).display().to_string(),
                        env: BTreeMap::new(),
                    })
                }
                Err(CallError::Rpc(e)) if e.is(Code::Conflict) => continue,
                Err(e) => return Err(host_error("clearing the note", e)),
            }
        }
        Err(refuse(Code::Conflict, "continuity kept changing"))
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

fn summary_is_empty(data: &Value) -> bool {
    data["summary"].as_str().is_none_or(str::is_empty)
}

fn has_toolbelt(req: &RunRequest) -> bool {
    !req.toolbelt.endpoint.is_empty() && !req.toolbelt.token.is_empty()
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

async fn persist(
    host: &Host,
    req: &RunRequest,
    dir: &Path,
    nonce: &str,
    pid: i32,
) -> Result<(), RpcError> {
    host.call_typed(&ExecutionPersistRecoveryParams {
        execution_id: req.execution_id.clone(),
        epoch: req.epoch,
        recovery: Payload {
            schema: RECOVERY_SCHEMA.to_string(),
            data: json!(RecoveryData {
                segment_dir: dir.display().to_string(),
                nonce: nonce.to_string(),
                pid,
                epoch: req.epoch,
            }),
        },
    })
    .await
    .map(|_| ())
    .map_err(|e| host_error("cannot persist the recovery metadata", e))
}

/// Applies a finished segment to the Work's continuity, once; answers the
/// per-turn delta (the same every time).
async fn apply_turn(host: &Host, work_id: &str, end: &TurnEnd) -> Result<TurnUsage, RpcError> {
    let key = continuity::key(work_id);
    for _ in 0..KV_RETRIES {
        let got = host
            .kv_get(&key)
            .await
            .map_err(|e| host_error("reading continuity", e))?;
        let mut c: Continuity = got
            .value
            .clone()
            .and_then(|v| serde_json::from_value(v).ok())
            .unwrap_or_default();
        let (delta, changed) = continuity::apply(&mut c, end);
        if !changed {
            return Ok(delta);
        }
        let batch = KvCommitParams {
            checks: vec![got.check("", &key)],
            puts: vec![KvPut {
                namespace: String::new(),
                key: key.clone(),
                value: json!(c),
            }],
            ..KvCommitParams::default()
        };
        match host.kv_commit(&batch).await {
            Ok(_) => return Ok(delta),
            Err(CallError::Rpc(e)) if e.is(Code::Conflict) => continue,
            Err(e) => return Err(host_error("applying the turn", e)),
        }
    }
    Err(refuse(
        Code::Conflict,
        "continuity kept changing while the turn was applied",
    ))
}

fn read_injected(dir: &Path) -> Vec<String> {
    let Ok(text) = std::fs::read_to_string(dir.join(rundir::INJECTED)) else {
        return Vec::new();
    };
    text.lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter_map(|v| v.get("id").and_then(Value::as_str).map(str::to_string))
        .collect()
}

/// The follower of a segment this process holds: reads `out.jsonl` as it
/// grows and closes claude's stdin when the result line arrives (so claude
/// exits), or once the segment has ended.
async fn follow(run: Arc<Run>, dir: PathBuf) {
    let path = dir.join(rundir::STDOUT);
    let mut offset: u64 = 0;
    let mut partial: Vec<u8> = Vec::new();
    loop {
        let ended = rundir::exists(&dir, rundir::STATUS);
        let mut chunk = Vec::new();
        if let Ok(mut f) = std::fs::File::open(&path) {
            if f.seek(SeekFrom::Start(offset)).is_ok() {
                let _ = f.read_to_end(&mut chunk);
            }
        }
        offset += chunk.len() as u64;
        partial.extend_from_slice(&chunk);
        let mut result = false;
        while let Some(i) = partial.iter().position(|b| *b == b'\n') {
            let line: Vec<u8> = partial.drain(..=i).collect();
            if let Ok(v) = serde_json::from_slice::<Value>(&line) {
                if v.get("type").and_then(Value::as_str) == Some("result") {
                    result = true;
                }
            }
        }
        if result || ended {
            let mut stdin = run.stdin.lock().await;
            if let Some(mut pipe) = stdin.take() {
                let _ = pipe.shutdown().await;
            }
            return;
        }
        if run.ended.load(Ordering::SeqCst) {
            return;
        }
        tokio::time::sleep(POLL).await;
    }
}

/// An execution's segment directories, by number.
fn segments(exec_dir: &Path) -> Vec<(u64, PathBuf)> {
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

fn latest_segment(exec_dir: &Path) -> Option<(u64, PathBuf)> {
    segments(exec_dir).pop()
}

/// Drops the oldest ended runs beyond [`MAX_RETAINED`].
fn evict(t: &mut Table) {
    let mut ended: Vec<(u64, String)> = t
        .runs
        .iter()
        .filter(|(_, r)| r.ended.load(Ordering::SeqCst))
        .map(|(id, r)| (r.seq, id.clone()))
        .collect();
    if ended.len() <= MAX_RETAINED {
        return;
    }
    ended.sort_unstable();
    let extra = ended.len() - MAX_RETAINED;
    for (_, id) in ended.into_iter().take(extra) {
        t.runs.remove(&id);
    }
}

fn check_epoch(run: &Run, epoch: u64) -> Result<(), RpcError> {
    let current = run.epoch.load(Ordering::SeqCst);
    if epoch < current {
        return Err(refuse(
            Code::Conflict,
            format!("epoch {epoch} is superseded by {current}"),
        ));
    }
    Ok(())
}

/// A segment as its directory shows it, when it has a wrapper recorded.
fn on_disk(dir: &Path) -> Option<Launch> {
    Launch::on_disk(dir, rundir::WRAP_ARG)
}

/// Writes the kill request the wrapper acts on ([`Launch::ask_to_end`]).
fn ask_to_end(launch: &Launch, cause: Cause, reason: &str) -> Result<(), RpcError> {
    let request = KillRequest {
        cause,
        reason: clip_line(reason, MAX_SUMMARY_BYTES),
    };
    launch
        .ask_to_end(&request, WORDS)
        .map_err(|e| internal(format!("asking the wrapper to end claude: {e}")))
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
    }

    #[test]
    fn work_dirs() {
        assert_eq!(dir_name("w-1"), "w-1");
        assert_eq!(dir_name("../x/y"), "_x_y");
    }
}
