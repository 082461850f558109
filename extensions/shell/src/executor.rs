//! The `shell` executor's methods: run, recover, wait, interrupt, stop, forget,
//! and validate for its binding config.
//!
//! What a run is lives on disk, in its run directory ([`crate::rundir`]); this
//! process only keeps a table of the runs it started or adopted, so it can
//! answer `executor.wait` for them and refuse what it does not know (a wait for
//! an unknown execution is `not_found`, which tells the host to recover it).
//! `executor.stop` and `executor.forget` also work from the run directory alone,
//! so a run that could not be adopted can still be stopped and cleaned up.

use crate::config::{self, ShellConfig};
use crate::rundir::{self, Cause, KillRequest, Meta, Spec, Status};
use protocol::sandbox::{SandboxLaunch, SandboxNeeds};
use protocol::wire::{
    clip_line, validate_kind, ArtifactCreateParams, Diagnostic, ExecutionPersistRecoveryParams,
    ExecutorForgetParams, ExecutorForgetResult, ExecutorInterruptParams, ExecutorInterruptResult,
    ExecutorRecoverParams, ExecutorRecoverResult, ExecutorRunParams, ExecutorRunResult,
    ExecutorStopParams, ExecutorStopResult, ExecutorWaitParams, ExecutorWaitResult, Outcome,
    Payload, ProvidedResource, RunRequest, ValidateParams, ValidateResult,
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
use std::process::Stdio;
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
}

#[derive(Debug)]
struct Run {
    work_id: String,
    tracked: Tracked,
    /// None for a run whose result was known at once (a bad config, a dry run).
    launch: Option<Launch>,
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
            path: e.pointer(),
        }),
    }
    result
}

impl Shell {
    /// An executor whose directories come from `dirs` (filled in by
    /// `initialize`), launching runs through this process's own executable.
    pub fn new(dirs: SharedDirs) -> Shell {
        let exe = std::env::current_exe().map_err(|e| e.to_string());
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
    ) {
        let mut t = self.table();
        let seq = t.next_seq;
        t.next_seq += 1;
        let ended = known.is_some();
        let run = Run {
            work_id: work_id.to_string(),
            tracked: Tracked::new(seq, epoch, ended),
            launch,
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

    /// `executor.run`: checks the config (a bad one fails the run at once, with
    /// the field named), creates the run directory, starts the wrapper, persists
    /// the recovery metadata, and only then lets the wrapper start the command.
    /// A persistence the host refuses fails the run with the host's own error,
    /// and the command never starts.
    pub async fn run(
        &self,
        host: &Host,
        p: ExecutorRunParams,
    ) -> Result<ExecutorRunResult, RpcError> {
        let req = p.run;
        check_executor(&req.executor)?;
        check_id(&req.execution_id)?;
        let id = req.execution_id.as_str();
        if self.get(id).is_some() {
            // Started here already: never twice.
            return Ok(ExecutorRunResult {});
        }
        let cfg = match config::parse(&req.config) {
            Ok(cfg) => cfg,
            Err(e) => {
                let result = failed(format!("invalid shell executor config: {e}"));
                self.insert(id, &req.work.id, req.epoch, None, Some(result));
                return Ok(ExecutorRunResult {});
            }
        };
        if req.dry_run {
            let result = ExecutorWaitResult {
                summary: clip_line(&format!("dry run: {}", cfg.describe()), MAX_SUMMARY_BYTES),
                ..ExecutorWaitResult::new(Outcome::Completed)
            };
            self.insert(id, &req.work.id, req.epoch, None, Some(result));
            return Ok(ExecutorRunResult {});
        }
        let exe = self.inner.exe.clone().map_err(|e| {
            internal(format!(
                "cannot find this executable to start the wrapper: {e}"
            ))
        })?;
        // The binding's workspace, made (or found again) before anything starts: a
        // refusal fails the run with the provider's reason and no process.
        let workspace = match sdk::workspace::acquire(host, &req, "", serde_json::Value::Null).await
        {
            Ok(w) => w,
            Err(f) => {
                self.insert(id, &req.work.id, req.epoch, None, Some(failed(f.line())));
                return Ok(ExecutorRunResult {});
            }
        };
        let runs = self.runs_dir();
        let dir = runs.join(id);
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&runs)
            .map_err(|e| internal(format!("cannot create {}: {e}", runs.display())))?;
        match std::fs::DirBuilder::new().mode(0o700).create(&dir) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                return Err(refuse(
                    Code::Conflict,
                    format!("execution {id} was launched before (its run directory exists): recover it instead"),
                ))
            }
            Err(e) => return Err(internal(format!("cannot create {}: {e}", dir.display()))),
        }
        match self
            .launch(host, &req, &cfg, &exe, &dir, workspace.as_ref())
            .await
        {
            Ok(launch) => {
                self.insert(id, &req.work.id, req.epoch, Some(launch), None);
                Ok(ExecutorRunResult {})
            }
            Err(e) => {
                let _ = std::fs::remove_dir_all(&dir);
                Err(e)
            }
        }
    }

    async fn launch(
        &self,
        host: &Host,
        req: &RunRequest,
        cfg: &ShellConfig,
        exe: &Path,
        dir: &Path,
        workspace: Option<&ProvidedResource>,
    ) -> Result<Launch, RpcError> {
        let io = |what: &str, e: std::io::Error| internal(format!("{what}: {e}"));
        let inputs = json!({
            "execution_id": req.execution_id,
            "attempt": req.attempt,
            "work": req.work,
            "inputs": req.inputs,
        });
        rundir::write_json(dir, rundir::INPUTS, &inputs)
            .map_err(|e| io("writing inputs.json", e))?;
        let nonce = rundir::nonce().map_err(|e| io("making a nonce", e))?;
        // With a workspace, the command runs in it (a relative cwd inside it);
        // without, in the run directory (a relative cwd against the config's).
        let base = match workspace {
            Some(w) => PathBuf::from(&w.dir),
            None => self.config_dir().unwrap_or_else(|| dir.to_path_buf()),
        };
        let cwd = match &cfg.cwd {
            None => workspace.map_or_else(|| dir.to_path_buf(), |w| PathBuf::from(&w.dir)),
            Some(c) if Path::new(c).is_absolute() => PathBuf::from(c),
            Some(c) => base.join(c),
        };
        // A sandboxed binding's launch is the plan the host pinned: a refusal
        // starts nothing.
        let mut env = environment(req, cfg, dir, workspace);
        let mut argv = cfg.argv.clone();
        let mut cwd = cwd.display().to_string();
        let mut sandbox_digest = String::new();
        if sdk::sandbox::sandboxed(req) {
            // /tmp is read-only inside: temporary files go to the run's own tmp.
            let tmp = sdk::sandbox::own_tmp(dir.join(sdk::sandbox::TMP_DIR))
                .map_err(|e| io("making the run's tmp", e))?;
            for var in sdk::sandbox::TMP_VARS {
                env.insert(var.into(), tmp.clone().into());
            }
            let launch = SandboxLaunch {
                argv,
                cwd: cwd.clone(),
                env: env
                    .iter()
                    .filter_map(|(k, v)| Some((k.to_str()?.to_owned(), v.to_str()?.to_owned())))
                    .collect(),
            };
            let mut needs = SandboxNeeds {
                write: vec![dir.display().to_string()],
                ..SandboxNeeds::default()
            };
            match workspace {
                Some(w) => needs.write.push(w.dir.clone()),
                None if !Path::new(&cwd).starts_with(dir) => needs.read.push(cwd.clone()),
                None => {}
            }
            let planned = sdk::sandbox::plan(host, req, launch, needs)
                .await
                .map_err(|r| r.error())?
                .ok_or_else(|| internal("the binding's sandbox planned nothing"))?;
            argv = planned.plan.argv;
            cwd = planned.plan.cwd;
            env = planned
                .plan
                .env
                .into_iter()
                .map(|(k, v)| (k.into(), v.into()))
                .collect();
            sandbox_digest = planned.digest;
        }
        let spec = Spec {
            execution_id: req.execution_id.clone(),
            work_id: req.work.id.clone(),
            argv,
            cwd,
            deadline_s: cfg.deadline_s,
            grace_s: cfg.grace_s,
            nonce: nonce.clone(),
        };
        rundir::write_json(dir, rundir::SPEC, &spec).map_err(|e| io("writing spec.json", e))?;
        let log = std::fs::File::create(dir.join(rundir::WRAPPER_LOG))
            .map_err(|e| io("creating wrapper.log", e))?;
        let mut child = tokio::process::Command::new(exe)
            .arg(rundir::WRAP_ARG)
            .arg(dir)
            .arg(&nonce)
            .current_dir(dir)
            .env_clear()
            .envs(env)
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(log)
            .kill_on_drop(false)
            .spawn()
            .map_err(|e| io("cannot start the shell wrapper", e))?;
        let pid = child
            .id()
            .and_then(|p| i32::try_from(p).ok())
            .ok_or_else(|| internal("the wrapper has no pid"))?;
        // Read before anything can reap the child: pid and start time name it.
        let start = rundir::start_time(pid);
        let mut go = child.stdin.take();
        let meta = Meta {
            pid,
            pgid: 0,
            nonce: nonce.clone(),
            started_at: String::new(),
            start,
        };
        let persisted = match rundir::write_json(dir, rundir::META, &meta) {
            Err(e) => Err(io("writing meta.json", e)),
            Ok(()) => host
                .call_typed(&ExecutionPersistRecoveryParams {
                    execution_id: req.execution_id.clone(),
                    epoch: req.epoch,
                    recovery: Payload {
                        schema: RECOVERY_SCHEMA.to_string(),
                        data: json!(RecoveryData {
                            pid,
                            nonce: nonce.clone(),
                            run_dir: dir.display().to_string(),
                            epoch: req.epoch,
                            sandbox_digest,
                        }),
                    },
                })
                .await
                .map_err(|e| match e {
                    CallError::Rpc(e) => e,
                    other => refuse(
                        Code::Unavailable,
                        format!("cannot persist the recovery metadata: {other}"),
                    ),
                }),
        };
        if let Err(e) = persisted {
            // No go: the wrapper reads EOF and exits without starting anything.
            drop(go);
            let _ = child.wait().await;
            return Err(e);
        }
        if let Some(mut stdin) = go.take() {
            // A wrapper that died already is found lost by the first wait.
            let _ = stdin.write_all(b"go\n").await;
            let _ = stdin.shutdown().await;
        }
        tokio::spawn(async move {
            let _ = child.wait().await;
        });
        Ok(Launch {
            dir: dir.to_path_buf(),
            pid,
            start,
            nonce,
            wrap_arg: rundir::WRAP_ARG,
        })
    }

    /// `executor.recover`: adopts a run from its recovery metadata, at the new
    /// epoch, when its end is recorded (the next wait answers it as it was) or
    /// its wrapper is alive and proves, by the nonce in its argv, to be the one
    /// started. Anything else is `not_adoptable`: a lower epoch, metadata that does
    /// not match the run directory, a dead process with no recorded end. Never
    /// launches.
    pub async fn recover(
        &self,
        host: &Host,
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
            if let Err(current) = run.tracked.raise_epoch(req.epoch) {
                return Err(not_adoptable(
                    id,
                    format!("epoch {} is lower than the run's {current}", req.epoch),
                ));
            }
            return Ok(ExecutorRecoverResult {});
        }
        let dir = PathBuf::from(&data.run_dir);
        if !dir.is_absolute() || dir.file_name().and_then(|n| n.to_str()) != Some(id) {
            return Err(not_adoptable(
                id,
                "the run directory is not this execution's",
            ));
        }
        if !rundir::is_nonce(&data.nonce) || data.pid <= 1 {
            return Err(not_adoptable(id, "the pid or nonce is malformed"));
        }
        let spec: Spec = match rundir::read_json(&dir, rundir::SPEC) {
            Ok(Some(spec)) => spec,
            Ok(None) => return Err(not_adoptable(id, "its run directory is gone")),
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
                "the metadata does not match its run directory",
            ));
        }
        let mut start = 0;
        let mut pgid = 0;
        if let Ok(Some(meta)) = rundir::read_json::<Meta>(&dir, rundir::META) {
            if meta.pid != data.pid || meta.nonce != data.nonce {
                return Err(not_adoptable(
                    id,
                    "the metadata does not match its run directory",
                ));
            }
            start = meta.start;
            pgid = meta.pgid;
        }
        let launch = Launch {
            dir,
            pid: data.pid,
            start,
            nonce: data.nonce,
            wrap_arg: rundir::WRAP_ARG,
        };
        let ended = rundir::exists(&launch.dir, rundir::STATUS);
        if !ended && !launch.wrapper_alive() {
            return Err(not_adoptable(
                id,
                format!("its process {} is gone and recorded no end", data.pid),
            ));
        }
        if !ended && sdk::sandbox::sandboxed(&req) {
            // Adopted only once the provider proves the command is inside the plan
            // the host pinned; anything else is stopped by the host, not adopted.
            let planned = sdk::sandbox::adopt(host, &req, &data.sandbox_digest, pgid)
                .await
                .map_err(|r| not_adoptable(id, r.line()))?;
            if planned.plan.argv != spec.argv {
                return Err(not_adoptable(
                    id,
                    "sandbox_denied: the run's command is not the pinned plan's",
                ));
            }
        }
        self.insert(id, &spec.work_id, req.epoch, Some(launch), None);
        Ok(ExecutorRecoverResult {})
    }

    /// `executor.wait`: resolves once the run's `status` exists (the wrapper
    /// writes it from the command's wait status), then uploads stdout and stderr
    /// as artifacts and answers the result. Every wait of the run, and a wait
    /// after a recover, gets the same result. An unknown execution is
    /// `not_found`.
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
        let result = match rundir::read_json::<ExecutorWaitResult>(&launch.dir, rundir::RESULT) {
            Ok(Some(r)) => r,
            _ => {
                let r = build_result(host, id, &launch).await?;
                if let Err(e) = rundir::write_json(&launch.dir, rundir::RESULT, &r) {
                    eprintln!("shell: execution {id}: cannot record the result: {e}");
                }
                r
            }
        };
        *cached = Some(result.clone());
        drop(cached);
        run.tracked.set_ended();
        evict(&mut self.table().runs, MAX_RETAINED, |r: &Run| &r.tracked);
        Ok(result)
    }

    /// `executor.interrupt`: asks the wrapper to end the command's group (SIGTERM,
    /// then SIGKILL after the grace period), recorded as cause `interrupt`.
    /// Answers at once; the wait reports the end.
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

    /// `executor.stop`: ends the run's processes (as interrupt does, cause
    /// `stop`) and answers once they are gone, with the evidence: no process of
    /// the command's group is left and the wrapper has exited. Works from the
    /// run directory alone, for a run this process never adopted.
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
                let dir = self.runs_dir().join(id);
                match on_disk(&dir) {
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
            .map_err(|e| internal(format!("asking the wrapper to end the command: {e}")))
    }

    /// `executor.forget`: removes the run directory of an ended run (or of every
    /// ended run of the Work, without an execution), and forgets it here. A run
    /// still running is refused (`conflict`): stop it first.
    pub async fn forget(&self, p: ExecutorForgetParams) -> Result<ExecutorForgetResult, RpcError> {
        check_executor(&p.executor)?;
        let runs = self.runs_dir();
        let ids: Vec<String> = if !p.execution_id.is_empty() {
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
                    let dir = e.path();
                    let Some(name) = dir.file_name().and_then(|n| n.to_str()) else {
                        continue;
                    };
                    if let Ok(Some(spec)) = rundir::read_json::<Spec>(&dir, rundir::SPEC) {
                        if spec.work_id == p.work_id && !ids.iter().any(|i| i == name) {
                            ids.push(name.to_string());
                        }
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
        let single = !p.execution_id.is_empty();
        for id in ids {
            let dir = match self.get(&id).and_then(|r| r.launch.clone()) {
                Some(l) => l.dir,
                None => runs.join(&id),
            };
            if let Some(l) = on_disk(&dir) {
                if !rundir::exists(&dir, rundir::STATUS) && l.wrapper_alive() {
                    if single {
                        return Err(refuse(
                            Code::Conflict,
                            format!("execution {id} is still running: stop it first"),
                        ));
                    }
                    continue;
                }
            }
            match std::fs::remove_dir_all(&dir) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(internal(format!("removing {}: {e}", dir.display()))),
            }
            self.table().runs.remove(&id);
        }
        Ok(ExecutorForgetResult {})
    }
}

fn check_epoch(run: &Run, epoch: u64) -> Result<(), RpcError> {
    run.tracked.check_epoch(epoch)
}

/// A run as its directory shows it, when it has a wrapper recorded.
fn on_disk(dir: &Path) -> Option<Launch> {
    Launch::on_disk(dir, rundir::WRAP_ARG)
}

/// The run's environment: this process's own (the host's sanitized baseline),
/// then the daemon's values the binding passes (`host_env`), the run's merged
/// layers (`env`), the config's `env`, and the run's own variables: later ones
/// win.
/// The command's environment, in the spec's order (later layers win): the
/// executor's own, the daemon's `pass_env` values, the workspace provider's layer,
/// the run layer, the config's `env`, then the run's identity (and `OC_WORKSPACE`).
fn environment(
    req: &RunRequest,
    cfg: &ShellConfig,
    dir: &Path,
    workspace: Option<&ProvidedResource>,
) -> BTreeMap<OsString, OsString> {
    let mut env: BTreeMap<OsString, OsString> = std::env::vars_os().collect();
    let provider = workspace
        .map(sdk::workspace::provider_layer)
        .unwrap_or_default();
    let layers = req
        .host_env
        .iter()
        .chain(&provider)
        .chain(&req.env)
        .chain(&cfg.env);
    for (k, v) in layers {
        if k.is_empty() || k.contains(['=', '\0']) || v.contains('\0') {
            continue;
        }
        env.insert(k.into(), v.into());
    }
    let own = [
        ("OS_EXECUTION_ID", req.execution_id.clone()),
        ("OS_WORK_ID", req.work.id.clone()),
        ("OS_SCOPE_ID", req.work.scope_id.clone()),
        ("OS_ATTEMPT", req.attempt.to_string()),
        ("OS_INPUTS", dir.join(rundir::INPUTS).display().to_string()),
        ("OS_RUN_DIR", dir.display().to_string()),
    ];
    for (k, v) in own {
        env.insert(k.into(), v.into());
    }
    if let Some(w) = workspace {
        env.insert(sdk::workspace::WORKSPACE_VAR.into(), w.dir.clone().into());
    }
    env
}

/// Writes the kill request the wrapper acts on ([`Launch::ask_to_end`]).
fn ask_to_end(launch: &Launch, cause: Cause, reason: &str) -> Result<(), RpcError> {
    let request = KillRequest {
        cause,
        reason: clip_line(reason, MAX_SUMMARY_BYTES),
    };
    launch
        .ask_to_end(&request, WORDS)
        .map_err(|e| internal(format!("asking the wrapper to end the command: {e}")))
}

/// The result of an ended run: its outcome from `status`, stdout and stderr as
/// artifacts, the last line of stdout as the summary.
async fn build_result(
    host: &Host,
    id: &str,
    launch: &Launch,
) -> Result<ExecutorWaitResult, RpcError> {
    let dir = launch.dir.clone();
    let status = match rundir::read_json::<Status>(&dir, rundir::STATUS) {
        Ok(Some(s)) => s,
        Ok(None) => Status {
            error: "the run's status is missing".into(),
            ..Status::default()
        },
        Err(e) => Status {
            error: format!("the run's status does not read: {e}"),
            ..Status::default()
        },
    };
    let read = |name: &'static str| {
        let path = dir.join(name);
        async move {
            tokio::task::spawn_blocking(move || read_bounded(&path, MAX_OUTPUT_BYTES))
                .await
                .map_err(|e| internal(format!("reading {name}: {e}")))?
                .map_err(|e| internal(format!("reading {name}: {e}")))
        }
    };
    let stdout = read(rundir::STDOUT).await?;
    let stderr = read(rundir::STDERR).await?;
    let mut result = match status.failure() {
        None => ExecutorWaitResult::new(Outcome::Completed),
        Some(error) => failed(error),
    };
    result.summary = summary(&stdout);
    for (name, bytes) in [(rundir::STDOUT, &stdout), (rundir::STDERR, &stderr)] {
        if bytes.is_empty() {
            continue;
        }
        let create = ArtifactCreateParams {
            execution_id: id.to_string(),
            name: name.to_string(),
            media_type: "text/plain".to_string(),
            max_bytes: 0,
        };
        match host.upload_artifact(&create, bytes).await {
            Ok(committed) => result.artifacts.push(committed.artifact_id),
            Err(CallError::Rpc(e)) => {
                eprintln!("shell: execution {id}: the host refused the {name} artifact: {e}");
            }
            Err(e) => {
                return Err(refuse(
                    Code::Unavailable,
                    format!("uploading the {name} artifact: {e}"),
                ))
            }
        }
    }
    Ok(result)
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
