//! A started run's controls: `executor.wait` (and the result it builds from the
//! run directory: status, stdout and stderr as artifacts), `executor.interrupt`,
//! `executor.stop`, `executor.live` and `executor.forget`.

use super::*;

impl Shell {
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
        // Only an adopted run may have been answered before (by an earlier process);
        // a `result.json` older than its status is none of the extension's.
        let result = launch
            .answer_once(run.adopted, WORDS, id, build_result(host, id, &launch))
            .await?;
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

    /// `executor.live`: a running run's stdout and stderr so far, each one's size
    /// and last `tail` bytes ([`sdk::live::answer`]). A run this process follows
    /// is found in its table, else in its run directory (as stop finds it); one
    /// that has ended, started no process or is not here is `not_live`.
    pub async fn live(&self, p: ExecutorLiveParams) -> Result<ExecutorLiveResult, RpcError> {
        check_executor(&p.executor)?;
        let id = p.execution_id.as_str();
        check_id(id)?;
        let launch = match self.get(id) {
            Some(run) => run.launch.clone(),
            None => on_disk(&self.runs_dir().join(id)),
        };
        sdk::live::answer(launch.as_ref(), id, rundir::LIVE_OUTPUTS, p.tail).await
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
/// artifacts, the last line of stdout as the summary. An output that is not a
/// regular file of the run directory (a symlink the command put there) is never
/// read: the run fails, saying so.
async fn build_result(
    host: &Host,
    id: &str,
    launch: &Launch,
) -> Result<ExecutorWaitResult, RpcError> {
    let dir = launch.dir.clone();
    let status = rundir::read_status(&dir, WORDS.unit);
    let rundir::Outputs {
        stdout,
        stderr,
        refusals,
    } = rundir::read_outputs(
        &dir,
        WORDS.unit,
        rundir::STDOUT,
        rundir::STDERR,
        MAX_OUTPUT_BYTES,
    )
    .await
    .map_err(internal)?;
    let mut result = match (status.failure(), refusals.is_empty()) {
        (None, true) => ExecutorWaitResult::new(Outcome::Completed),
        (None, false) => failed(refusals.join("; ")),
        (Some(error), true) => failed(error),
        (Some(error), false) => failed(format!("{error}; {}", refusals.join("; "))),
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
