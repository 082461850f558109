//! Adopting a segment: `executor.recover` proves a running (or ended) segment is the
//! one started, by its metadata, nonce and wrapper, and takes it over at the new
//! epoch. It never launches: codex keeps running under its wrapper, and its session
//! is wholly in the Work's `CODEX_HOME`.

use super::*;
use protocol::wire::{ExecutorRecoverParams, ExecutorRecoverResult};

impl Codex {
    /// `executor.recover`: adopts a segment from its recovery metadata when its
    /// result or end is recorded, or its wrapper is alive and proves by the nonce to
    /// be the one started (the toolbelt token file replaced with the new run's
    /// token). Anything else is `not_adoptable`. Never launches.
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
        let spec: Spec = match rundir::read_json(&dir, rundir::SPEC) {
            Ok(Some(spec)) => spec,
            Ok(None) => return Err(not_adoptable(id, "the segment was never launched")),
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
        if let Some(result) = rundir::recorded_result::<ExecutorWaitResult>(&dir) {
            self.insert(&req, None, Some(result), true);
            return Ok(ExecutorRecoverResult {});
        }
        let meta = rundir::read_json::<Meta>(&dir, rundir::META).ok().flatten();
        let pid = match &meta {
            Some(m) if (m.pid != data.pid && data.pid != 0) || m.nonce != data.nonce => {
                return Err(not_adoptable(
                    id,
                    "the metadata does not match its segment directory",
                ))
            }
            Some(m) => m.pid,
            None => data.pid,
        };
        let start = if data.start > 0 && pid == data.pid {
            data.start
        } else {
            rundir::wrapper_start(pid, &dir, &data.nonce, rundir::WRAP_ARG).unwrap_or(0)
        };
        let launch = Launch {
            dir: dir.clone(),
            pid,
            start,
            nonce: data.nonce.clone(),
            wrap_arg: rundir::WRAP_ARG,
        };
        let ended = rundir::exists(&dir, rundir::STATUS);
        if !ended && !launch.wrapper_alive() {
            return Err(not_adoptable(
                id,
                format!("its process {pid} is gone and recorded no end"),
            ));
        }
        let group = meta.as_ref().map_or(0, |m| m.pgid);
        if !ended && group > 1 && !launch.owns_group(group) {
            return Err(not_adoptable(
                id,
                format!("meta.json names process group {group}, which is not the segment's"),
            ));
        }
        if !ended && sdk::sandbox::confined(&req) {
            // Adopted only once the provider proves codex is inside the plan the host
            // pinned; anything else is stopped by the host, not adopted.
            sdk::sandbox::adopt_as_launched(host, &req, &data.sandbox_digest, group, &spec.argv)
                .await
                .map_err(|r| not_adoptable(id, r.line()))?;
        }
        if !ended && rundir::exists(&dir, rundir::TOKEN) && !req.toolbelt.token.is_empty() {
            write_token(&dir, &req.toolbelt.token)
                .map_err(|e| internal(format!("replacing the toolbelt token file: {e}")))?;
        }
        rundir::write_json(&dir, "adopted.json", &json!({"epoch": req.epoch}))
            .map_err(|e| internal(format!("recording the adoption: {e}")))?;
        self.insert(&req, Some(launch), None, true);
        Ok(ExecutorRecoverResult {})
    }
}
