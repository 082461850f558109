//! The `runner` executor's methods, one `async fn` per protocol method.
//!
//! [`Runner`] is the state every handler shares: a table from execution ID to
//! the [`Entry`] of a run this process started. Each method looks the run up,
//! checks the request against it, and acts on its [`Job`].

use crate::job::{self, Job, Start};
use nix::sys::signal::Signal;
use protocol::wire::{
    clip_line, validate_kind, ArtifactCreateParams, Diagnostic, Event,
    ExecutionPersistRecoveryParams, ExecutorForgetParams, ExecutorForgetResult,
    ExecutorInjectParams, ExecutorInjectResult, ExecutorInterruptParams, ExecutorInterruptResult,
    ExecutorRecoverParams, ExecutorRecoverResult, ExecutorRunParams, ExecutorRunResult,
    ExecutorStopParams, ExecutorStopResult, ExecutorWaitParams, ExecutorWaitResult, Outcome,
    Payload, RunRequest, ValidateParams, ValidateResult,
};
use protocol::{CallError, Code, RpcError};
use sdk::config::ConfigError;
use sdk::Host;
use serde::{Deserialize, Serialize};
use serde_json::json;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The executor's name, as the manifest declares it.
pub const EXECUTOR: &str = "runner";
/// The schema of the recovery metadata persisted for each job.
pub const RECOVERY_SCHEMA: &str = "runner.recovery.v1";
/// How long `executor.stop` waits after SIGTERM before it sends SIGKILL.
pub const STOP_GRACE: Duration = Duration::from_secs(5);
/// How long `executor.stop` waits after SIGKILL for the group to be empty.
const KILL_WAIT: Duration = Duration::from_secs(5);
/// How often stop looks at `/proc`.
const POLL: Duration = Duration::from_millis(50);
/// The longest summary (the last line of stdout), in bytes.
const MAX_SUMMARY_BYTES: usize = 200;
/// The most bytes of an output uploaded as an artifact (its tail is kept).
const MAX_ARTIFACT_BYTES: usize = 16 * 1024 * 1024;

/// The binding config: `{"command": ["argv", ...]}`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunnerConfig {
    /// The job's argv, run as it is (no shell parsing).
    pub command: Vec<String>,
}

impl RunnerConfig {
    /// Parses a binding's config; the command must not be empty. An error names its
    /// field as a JSON pointer (`/command/0: must be a string`).
    pub fn parse(config: &serde_json::Value) -> Result<RunnerConfig, ConfigError> {
        if !config.is_object() {
            // (serde would also read the struct from an array of its fields)
            return Err(ConfigError::whole("must be an object"));
        }
        let parsed: RunnerConfig = sdk::config::parse(config)?;
        if parsed.command.first().is_none_or(String::is_empty) {
            return Err(ConfigError::new("/command", "must name a program"));
        }
        Ok(parsed)
    }
}

/// The recovery metadata's data (schema [`RECOVERY_SCHEMA`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RecoveryData {
    /// The job's pid (and process group).
    pub pid: i32,
    /// The run directory.
    pub run_dir: String,
}

/// A run this process knows.
#[derive(Debug)]
struct Entry {
    work_id: String,
    /// The latest lease epoch: requests carrying an older one are refused.
    epoch: AtomicU64,
    /// The job; `None` for a run whose result was known at once (a bad config,
    /// a dry run), which starts nothing.
    job: Option<Job>,
    /// The result, once a wait has computed it (artifacts are uploaded once).
    result: tokio::sync::Mutex<Option<ExecutorWaitResult>>,
}

impl Entry {
    /// Whether the job's leader is still running.
    fn running(&self) -> bool {
        self.job.as_ref().is_some_and(|j| j.exit_now().is_none())
    }

    /// Refuses a request fenced by an epoch older than the run's.
    fn check_epoch(&self, epoch: u64) -> Result<(), RpcError> {
        let current = self.epoch.load(Ordering::SeqCst);
        if epoch < current {
            return Err(RpcError::new(
                Code::Conflict,
                format!("epoch {epoch} is superseded by {current}"),
            ));
        }
        Ok(())
    }
}

/// The executor: the runs directory and the table of runs, shared by every
/// handler (cheap to clone).
#[derive(Debug, Clone)]
pub struct Runner {
    runs_dir: PathBuf,
    table: Arc<Mutex<HashMap<String, Arc<Entry>>>>,
}

impl Runner {
    /// An executor keeping each run's files in `<runs_dir>/<execution_id>/`.
    pub fn new(runs_dir: PathBuf) -> Runner {
        Runner {
            runs_dir,
            table: Arc::default(),
        }
    }

    fn get(&self, id: &str) -> Option<Arc<Entry>> {
        let table = self.table.lock().unwrap_or_else(|p| p.into_inner());
        table.get(id).cloned()
    }

    fn insert(&self, id: &str, entry: Entry) {
        let mut table = self.table.lock().unwrap_or_else(|p| p.into_inner());
        table.insert(id.to_string(), Arc::new(entry));
    }

    /// `executor.run`: start the job, persist its recovery metadata, answer.
    ///
    /// The metadata is persisted right after the spawn and before the answer,
    /// so the host never holds a started run it cannot find again. If the host
    /// refuses it, the job is killed and the run fails with the host's error.
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
            return Err(RpcError::new(
                Code::Conflict,
                format!("execution {id} was started here already"),
            ));
        }
        // A result known at once: the run starts nothing and its wait answers it.
        let known = match RunnerConfig::parse(&req.config) {
            Err(e) => Err(failed(format!("invalid runner config: {e}"))),
            Ok(cfg) if req.dry_run => Err(ExecutorWaitResult {
                summary: clip_line(&format!("dry run: would run {:?}", cfg.command), 200),
                ..ExecutorWaitResult::new(Outcome::Completed)
            }),
            Ok(cfg) => Ok(cfg),
        };
        let cfg = match known {
            Ok(cfg) => cfg,
            Err(result) => {
                self.insert(id, entry(&req, None, Some(result)));
                return Ok(ExecutorRunResult {});
            }
        };

        let run_dir = self.runs_dir.join(id);
        std::fs::create_dir_all(&run_dir)
            .map_err(|e| internal(format!("creating {}: {e}", run_dir.display())))?;
        let job = match Job::spawn(Start {
            argv: &cfg.command,
            run_dir: &run_dir,
            env: environment(&req, &run_dir),
        }) {
            Ok(job) => job,
            Err(e) => {
                // The program could not start (not found, not executable): a
                // failed run, not a broken executor.
                let result = failed(format!("cannot start {}: {e}", cfg.command[0]));
                self.insert(id, entry(&req, None, Some(result)));
                return Ok(ExecutorRunResult {});
            }
        };

        let recovery = ExecutionPersistRecoveryParams {
            execution_id: id.to_string(),
            epoch: req.epoch,
            recovery: Payload {
                schema: RECOVERY_SCHEMA.to_string(),
                data: json!(RecoveryData {
                    pid: job.pid,
                    run_dir: run_dir.display().to_string(),
                }),
            },
        };
        if let Err(e) = host.call_typed(&recovery).await {
            let _ = job.signal(Signal::SIGKILL);
            let _ = job.exited().await;
            let _ = std::fs::remove_dir_all(&run_dir);
            return Err(match e {
                CallError::Rpc(e) => e,
                other => RpcError::new(
                    Code::Unavailable,
                    format!("cannot persist the recovery metadata: {other}"),
                ),
            });
        }

        // The run's own inputs are the job's first lines on stdin; injections
        // queue behind them.
        job.feed(req.inputs.iter().map(input_line).collect()).await;
        self.insert(id, entry(&req, Some(job), None));
        Ok(ExecutorRunResult {})
    }

    /// `executor.recover`: adopt a run after the host restarted or moved its
    /// lease. This example adopts only a job it started itself (still in its
    /// table, with the persisted pid); anything else is `not_adoptable`.
    pub async fn recover(
        &self,
        p: ExecutorRecoverParams,
    ) -> Result<ExecutorRecoverResult, RpcError> {
        let req = p.run;
        check_executor(&req.executor)?;
        let id = req.execution_id.as_str();
        let not_adoptable = |why: &str| {
            RpcError::authored(
                Code::NotAdoptable.as_str(),
                format!("execution {id} is not adoptable: {why}"),
            )
        };
        if p.recovery.schema != RECOVERY_SCHEMA {
            return Err(not_adoptable(
                "its recovery metadata is not runner.recovery.v1",
            ));
        }
        let data: RecoveryData = serde_json::from_value(p.recovery.data)
            .map_err(|_| not_adoptable("its recovery metadata is malformed"))?;
        let Some(entry) = self.get(id) else {
            return Err(not_adoptable("this process did not start it"));
        };
        if entry.job.as_ref().map(|j| j.pid) != Some(data.pid) {
            return Err(not_adoptable("this process started another job for it"));
        }
        entry.check_epoch(req.epoch)?;
        entry.epoch.store(req.epoch, Ordering::SeqCst);
        Ok(ExecutorRecoverResult {})
    }

    /// `executor.wait`: wait for the job's leader to exit and answer its result.
    ///
    /// The first wait to see the exit computes the result (and uploads the
    /// outputs); later waits answer the same result. An unknown execution is
    /// `not_found`, which tells the host to recover it.
    pub async fn wait(
        &self,
        host: &Host,
        p: ExecutorWaitParams,
    ) -> Result<ExecutorWaitResult, RpcError> {
        check_executor(&p.executor)?;
        let id = p.execution_id.as_str();
        let entry = self.get(id).ok_or_else(|| not_found(id))?;
        let mut result = entry.result.lock().await;
        if let Some(known) = &*result {
            return Ok(known.clone());
        }
        let job = entry
            .job
            .as_ref()
            .ok_or_else(|| internal("a run without a job has no result"))?;
        let computed = match job.exited().await {
            Err(e) => failed(format!("cannot wait for the job: {e}")),
            Ok(status) => finish(host, id, job, status).await?,
        };
        *result = Some(computed.clone());
        Ok(computed)
    }

    /// `executor.inject`: write the input to the job's stdin as one JSON line,
    /// `{"id", "type", "data"}`, and answer once it is written.
    /// `not_accepting` when the job is not running.
    pub async fn inject(&self, p: ExecutorInjectParams) -> Result<ExecutorInjectResult, RpcError> {
        check_executor(&p.executor)?;
        let id = p.execution_id.as_str();
        let not_accepting = |why: String| {
            RpcError::new(
                Code::NotAccepting,
                format!("execution {id} takes no input: {why}"),
            )
        };
        let entry = self
            .get(id)
            .ok_or_else(|| not_accepting("no job of this process".into()))?;
        entry.check_epoch(p.epoch)?;
        let job = match &entry.job {
            Some(job) if entry.running() => job,
            _ => return Err(not_accepting("its job has ended".into())),
        };
        job.write(vec![input_line(&p.event)])
            .await
            .map_err(|e| not_accepting(format!("its stdin is closed ({e})")))?;
        Ok(ExecutorInjectResult {})
    }

    /// `executor.interrupt`: SIGINT to the job's process group. The job may
    /// handle it and exit on its own terms; its wait reports how it ended.
    pub async fn interrupt(
        &self,
        p: ExecutorInterruptParams,
    ) -> Result<ExecutorInterruptResult, RpcError> {
        check_executor(&p.executor)?;
        let entry = self
            .get(&p.execution_id)
            .ok_or_else(|| not_found(&p.execution_id))?;
        entry.check_epoch(p.epoch)?;
        if let Some(job) = &entry.job {
            job.signal(Signal::SIGINT).map_err(internal)?;
        }
        Ok(ExecutorInterruptResult {})
    }

    /// `executor.stop`: SIGTERM to the job's group, SIGKILL after
    /// [`STOP_GRACE`], and answer once `/proc` shows no process of the group:
    /// `stopped: true` is the evidence the host asks for.
    pub async fn stop(&self, p: ExecutorStopParams) -> Result<ExecutorStopResult, RpcError> {
        check_executor(&p.executor)?;
        let entry = self
            .get(&p.execution_id)
            .ok_or_else(|| not_found(&p.execution_id))?;
        entry.check_epoch(p.epoch)?;
        let Some(job) = &entry.job else {
            return Ok(stopped(true, "the run started no process".into()));
        };
        let group = job.pid;
        if job::group_members(group).is_empty() {
            return Ok(stopped(true, format!("process group {group} is empty")));
        }
        job.signal(Signal::SIGTERM).map_err(internal)?;
        if group_gone(group, STOP_GRACE).await {
            return Ok(stopped(
                true,
                format!("process group {group} ended on SIGTERM"),
            ));
        }
        job.signal(Signal::SIGKILL).map_err(internal)?;
        if group_gone(group, KILL_WAIT).await {
            return Ok(stopped(
                true,
                format!("process group {group} ended on SIGKILL"),
            ));
        }
        let left = job::group_members(group);
        Ok(stopped(
            false,
            format!("processes {left:?} of group {group} outlived SIGKILL"),
        ))
    }

    /// `executor.forget`: drop the files and state of an ended run, or of
    /// every ended run of the Work when no execution is named. A running job
    /// is refused (`conflict`): stop it first.
    pub async fn forget(&self, p: ExecutorForgetParams) -> Result<ExecutorForgetResult, RpcError> {
        check_executor(&p.executor)?;
        let ids: Vec<String> = if p.execution_id.is_empty() {
            let table = self.table.lock().unwrap_or_else(|e| e.into_inner());
            table
                .iter()
                .filter(|(_, e)| e.work_id == p.work_id)
                .map(|(id, _)| id.clone())
                .collect()
        } else {
            check_id(&p.execution_id)?;
            vec![p.execution_id.clone()]
        };
        for id in &ids {
            if self.get(id).is_some_and(|e| e.running()) {
                return Err(RpcError::new(
                    Code::Conflict,
                    format!("execution {id} is still running: stop it first"),
                ));
            }
        }
        for id in &ids {
            self.table
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .remove(id);
            match std::fs::remove_dir_all(self.runs_dir.join(id)) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(internal(format!("removing the files of {id}: {e}"))),
            }
        }
        Ok(ExecutorForgetResult {})
    }
}

/// `validate` of kind `executor`: a diagnostic for a config a run would refuse.
pub fn validate(p: &ValidateParams) -> ValidateResult {
    let mut result = ValidateResult::default();
    if p.kind != validate_kind::EXECUTOR || p.type_name != EXECUTOR {
        return result;
    }
    match RunnerConfig::parse(&p.config) {
        Ok(cfg) => result
            .describe
            .push(format!("runs {:?} as a job", cfg.command)),
        Err(e) => result.diagnostics.push(Diagnostic {
            code: "invalid_config".to_string(),
            message: e.to_string(),
            path: e.pointer,
        }),
    }
    result
}

/// The result of a job whose leader exited with `status`: completed for exit
/// 0, failed otherwise; the summary is stdout's last line, and stdout and
/// stderr, when not empty, are uploaded as artifacts.
async fn finish(
    host: &Host,
    id: &str,
    job: &Job,
    status: std::process::ExitStatus,
) -> Result<ExecutorWaitResult, RpcError> {
    let mut result = match job::describe_failure(status) {
        None => ExecutorWaitResult::new(Outcome::Completed),
        Some(why) => failed(why),
    };
    for name in ["stdout", "stderr"] {
        let bytes = read_tail(&job.run_dir.join(name));
        if name == "stdout" {
            let text = String::from_utf8_lossy(&bytes);
            let last = text.lines().rev().find(|l| !l.trim().is_empty());
            result.summary = clip_line(last.unwrap_or(""), MAX_SUMMARY_BYTES);
        }
        if bytes.is_empty() {
            continue;
        }
        let create = ArtifactCreateParams {
            execution_id: id.to_string(),
            name: name.to_string(),
            media_type: "text/plain".to_string(),
            max_bytes: 0,
        };
        match host.upload_artifact(&create, &bytes).await {
            Ok(committed) => result.artifacts.push(committed.artifact_id),
            // The host said no (a quota, say): the run's result stands without it.
            Err(CallError::Rpc(e)) => eprintln!("runner: {id}: the {name} artifact: {e}"),
            // The connection is gone: answer nothing, a later wait retries.
            Err(e) => {
                return Err(RpcError::new(
                    Code::Unavailable,
                    format!("uploading the {name} artifact: {e}"),
                ))
            }
        }
    }
    Ok(result)
}

/// The last [`MAX_ARTIFACT_BYTES`] of a file (empty when it cannot be read).
fn read_tail(path: &Path) -> Vec<u8> {
    let mut bytes = std::fs::read(path).unwrap_or_default();
    if bytes.len() > MAX_ARTIFACT_BYTES {
        bytes.drain(..bytes.len() - MAX_ARTIFACT_BYTES);
    }
    bytes
}

/// Polls `/proc` until group `pgid` has no process left, for at most `limit`.
async fn group_gone(pgid: i32, limit: Duration) -> bool {
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        if job::group_members(pgid).is_empty() {
            return true;
        }
        if tokio::time::Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(POLL).await;
    }
}

/// One input as the job reads it: `{"id", "type", "data"}` on one line.
fn input_line(event: &Event) -> String {
    json!({"id": event.id, "type": event.event_type, "data": event.payload.data}).to_string()
}

/// The job's environment over the extension's own: the host's layers, then
/// the run's identity.
fn environment(req: &RunRequest, run_dir: &Path) -> Vec<(String, String)> {
    let valid = |(k, v): &(&String, &String)| {
        !k.is_empty() && !k.contains(['=', '\0']) && !v.contains('\0')
    };
    let mut env: Vec<(String, String)> = req
        .host_env
        .iter()
        .chain(&req.env)
        .filter(valid)
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    env.push(("OS_EXECUTION_ID".into(), req.execution_id.clone()));
    env.push(("OS_WORK_ID".into(), req.work.id.clone()));
    env.push(("OS_RUN_DIR".into(), run_dir.display().to_string()));
    env
}

fn entry(req: &RunRequest, job: Option<Job>, result: Option<ExecutorWaitResult>) -> Entry {
    Entry {
        work_id: req.work.id.clone(),
        epoch: AtomicU64::new(req.epoch),
        job,
        result: tokio::sync::Mutex::new(result),
    }
}

fn failed(error: String) -> ExecutorWaitResult {
    ExecutorWaitResult {
        error,
        ..ExecutorWaitResult::new(Outcome::Failed)
    }
}

fn stopped(stopped: bool, detail: String) -> ExecutorStopResult {
    ExecutorStopResult { stopped, detail }
}

fn internal(what: impl std::fmt::Display) -> RpcError {
    RpcError::new(Code::Internal, what.to_string())
}

fn not_found(id: &str) -> RpcError {
    RpcError::new(
        Code::NotFound,
        format!("execution {id} is not a job of this process"),
    )
}

fn check_executor(executor: &str) -> Result<(), RpcError> {
    if executor.is_empty() || executor == EXECUTOR {
        return Ok(());
    }
    Err(RpcError::new(
        Code::Invalid,
        format!("executor `{executor}` is not served here (only `{EXECUTOR}`)"),
    ))
}

/// An execution ID names a directory: it must be one plain path component.
fn check_id(id: &str) -> Result<(), RpcError> {
    let ok =
        !id.is_empty() && id.len() <= 255 && id != "." && id != ".." && !id.contains(['/', '\0']);
    if ok {
        return Ok(());
    }
    Err(RpcError::new(
        Code::Invalid,
        format!("execution ID {id:?} cannot name a run directory"),
    ))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn the_config_needs_a_command() {
        let ok = RunnerConfig::parse(&json!({"command": ["cat"]})).unwrap();
        assert_eq!(ok.command, ["cat"]);
        for bad in [
            json!(null),
            json!({}),
            json!({"command": []}),
            json!({"command": [""]}),
            json!({"command": "cat"}),
            json!({"command": ["cat"], "other": 1}),
            json!([["cat"]]),
        ] {
            assert!(RunnerConfig::parse(&bad).is_err(), "{bad}");
        }
        let e = RunnerConfig::parse(&json!({"command": ["cat", 1]})).unwrap_err();
        assert_eq!(e.to_string(), "/command/1: must be a string");
        let e = RunnerConfig::parse(&json!({"command": ["cat"], "other": 1})).unwrap_err();
        assert_eq!(e.to_string(), "/other: unknown field (known: command)");
    }

    #[test]
    fn ids_are_single_path_components() {
        assert!(check_id("ex-1").is_ok());
        for bad in ["", ".", "..", "a/b", "a\0b"] {
            assert!(check_id(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn an_input_is_one_json_line() {
        let event = Event {
            id: "ev-1".into(),
            event_type: "notes.added".into(),
            payload: Payload {
                schema: String::new(),
                data: json!({"text": "a\nb"}),
            },
            ..Event::default()
        };
        let line = input_line(&event);
        assert!(!line.contains('\n'));
        let back: serde_json::Value = serde_json::from_str(&line).unwrap();
        assert_eq!(
            back,
            json!({"id": "ev-1", "type": "notes.added", "data": {"text": "a\nb"}})
        );
    }
}
