//! The controls: interrupt, stop, live, forget.

use super::*;
use protocol::wire::{
    ExecutorForgetParams, ExecutorForgetResult, ExecutorInterruptParams, ExecutorInterruptResult,
    ExecutorLiveParams, ExecutorLiveResult, ExecutorStopParams, ExecutorStopResult, KvDelete,
};

impl Codex {
    /// `executor.interrupt`: asks the wrapper to end codex (SIGTERM, then SIGKILL
    /// after the grace); the session stays resumable.
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
        run.tracked.check_epoch(p.epoch)?;
        if let Some(launch) = &run.launch {
            if !rundir::exists(&launch.dir, rundir::STATUS) {
                let request = KillRequest {
                    cause: Cause::Interrupt,
                    reason: clip_line(&p.reason, sdk::agent::status::MAX_SUMMARY_BYTES),
                };
                launch
                    .ask_to_end(&request, WORDS)
                    .map_err(|e| internal(format!("asking the wrapper to end codex: {e}")))?;
            }
        }
        Ok(ExecutorInterruptResult {})
    }

    /// `executor.stop`: ends the segment's process group and answers the evidence.
    pub async fn stop(&self, p: ExecutorStopParams) -> Result<ExecutorStopResult, RpcError> {
        check_executor(&p.executor)?;
        let id = p.execution_id.as_str();
        check_id(id)?;
        let launch = match self.get(id) {
            Some(run) => {
                run.tracked.check_epoch(p.epoch)?;
                run.launch.clone()
            }
            None => latest_segment(&self.runs_dir().join(id)).and_then(|(_, dir)| on_disk(&dir)),
        };
        let Some(launch) = launch else {
            return Ok(ExecutorStopResult {
                stopped: true,
                detail: format!("execution {id} started no process here"),
            });
        };
        launch
            .stop(WORDS)
            .await
            .map_err(|e| internal(format!("asking the wrapper to end codex: {e}")))
    }

    /// `executor.live`: the last bytes of the running segment's events and stderr.
    pub async fn live(&self, p: ExecutorLiveParams) -> Result<ExecutorLiveResult, RpcError> {
        check_executor(&p.executor)?;
        let id = p.execution_id.as_str();
        check_id(id)?;
        let launch = match self.get(id) {
            Some(run) => run.launch.clone(),
            None => latest_segment(&self.runs_dir().join(id)).and_then(|(_, dir)| on_disk(&dir)),
        };
        sdk::live::answer(launch.as_ref(), id, rundir::LIVE_OUTPUTS, p.tail).await
    }

    /// `executor.forget`: removes an execution's segments (one not running), or a
    /// Work's, with its continuity and its `CODEX_HOME`.
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
            let known: Vec<String> = self
                .table()
                .runs
                .iter()
                .filter(|(_, r)| r.work_id == p.work_id)
                .map(|(id, _)| id.clone())
                .collect();
            sdk::segments::of_work(&runs, &p.work_id, known)
        } else {
            return Err(refuse(
                Code::Invalid,
                "forget needs a work_id or an execution_id",
            ));
        };
        let forgotten = sdk::segments::forget(&runs, ids, single, rundir::WRAP_ARG)?;
        for id in &forgotten.removed {
            self.table().runs.remove(id);
        }
        let kept = forgotten.kept;
        if !single && !p.work_id.is_empty() && !kept {
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
            let home = self.home(&p.work_id);
            match std::fs::remove_dir_all(&home) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(internal(format!("removing {}: {e}", home.display()))),
            }
        }
        Ok(ExecutorForgetResult {})
    }
}
