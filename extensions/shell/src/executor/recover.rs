//! Adopting a run: `executor.recover` proves a running (or ended) run is the one
//! started, by its metadata, nonce and wrapper (a sandboxed one through
//! `sandbox.adopt`), and takes it over at the new epoch. It never launches.

use super::*;

impl Shell {
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
        let followed = self.get(id);
        let Some(data) = sdk::runs::recovery_opening::<RecoveryData>(
            id,
            RECOVERY_SCHEMA,
            &p.recovery,
            req.epoch,
            followed.as_ref().map(|run| &run.tracked),
        )?
        else {
            return Ok(ExecutorRecoverResult {});
        };
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
        let mut pgid = 0;
        if let Ok(Some(meta)) = rundir::read_json::<Meta>(&dir, rundir::META) {
            if meta.pid != data.pid || meta.nonce != data.nonce {
                return Err(not_adoptable(
                    id,
                    "the metadata does not match its run directory",
                ));
            }
            pgid = meta.pgid;
        }
        // The wrapper's start time as recorded at the spawn; metadata of an earlier
        // release has none, and then only `/proc` says it (when the argv proves the
        // process the wrapper of this run), never `meta.json`.
        let start = if data.start > 0 {
            data.start
        } else {
            rundir::wrapper_start(data.pid, &dir, &data.nonce, rundir::WRAP_ARG).unwrap_or(0)
        };
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
        if !ended && pgid > 1 && !launch.owns_group(pgid) {
            return Err(not_adoptable(
                id,
                format!("meta.json names process group {pgid}, which is not the run's"),
            ));
        }
        if !ended && sdk::sandbox::confined(&req) {
            // Adopted only once the provider proves the command is inside the plan
            // the host pinned; anything else is stopped by the host, not adopted.
            sdk::sandbox::adopt_as_launched(host, &req, &data.sandbox_digest, pgid, &spec.argv)
                .await
                .map_err(|r| not_adoptable(id, r.line()))?;
        }
        self.insert(id, &spec.work_id, req.epoch, Some(launch), None, true);
        Ok(ExecutorRecoverResult {})
    }
}
