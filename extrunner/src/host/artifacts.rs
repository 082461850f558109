//! What a run writes through the host: its artifacts (`artifact.create`, `.write`,
//! `.commit`, `.abort`) and its recovery metadata (`execution.persist_recovery`).

use super::*;
use busapi::store::{
    ArtifactAbortRequest, ArtifactCommitRequest, ArtifactCreateRequest, ArtifactWriteRequest,
    RecoveryPersistRequest,
};

impl Scoped<'_> {
    // Artifacts are forwarded as they are. The execution host will bind them to a
    // run it opened for this process (and check the execution) before this.

    pub(super) async fn artifact_create(
        &self,
        p: ArtifactCreateParams,
    ) -> Result<ArtifactCreateResult, RpcError> {
        let some = |s: String| (!s.is_empty()).then_some(s);
        let created = self
            .store(&ArtifactCreateRequest {
                execution_id: some(p.execution_id),
                name: p.name,
                media_type: some(p.media_type),
                max_bytes: (p.max_bytes > 0).then_some(p.max_bytes),
            })
            .await?;
        Ok(ArtifactCreateResult {
            artifact_id: created.artifact_id,
        })
    }

    pub(super) async fn artifact_write(
        &self,
        p: ArtifactWriteParams,
    ) -> Result<ArtifactWriteResult, RpcError> {
        p.validate().map_err(invalid)?;
        // Forwarded typed, not through a `Value`: the chunk's base64 is written
        // once, straight into the request, rather than into a JSON string first.
        let written = self
            .store(&ArtifactWriteRequest {
                artifact_id: p.artifact_id,
                offset: p.offset,
                data: p.data,
            })
            .await?;
        Ok(ArtifactWriteResult { size: written.size })
    }

    pub(super) async fn artifact_commit(
        &self,
        p: ArtifactCommitParams,
    ) -> Result<ArtifactCommitResult, RpcError> {
        let committed = self
            .store(&ArtifactCommitRequest {
                artifact_id: p.artifact_id,
                size: (p.size > 0).then_some(p.size),
            })
            .await?;
        Ok(ArtifactCommitResult {
            artifact_id: committed.artifact_id,
            size: committed.size,
            digest: committed.digest,
        })
    }

    pub(super) async fn artifact_abort(
        &self,
        p: ArtifactAbortParams,
    ) -> Result<ArtifactAbortResult, RpcError> {
        self.store(&ArtifactAbortRequest {
            artifact_id: p.artifact_id,
        })
        .await?;
        Ok(ArtifactAbortResult {})
    }

    /// `execution.persist_recovery`: storaged fences it by the execution's lease epoch,
    /// so a superseded run's write is refused (`conflict`).
    pub(super) async fn persist_recovery(
        &self,
        p: wire::ExecutionPersistRecoveryParams,
    ) -> Result<wire::ExecutionPersistRecoveryResult, RpcError> {
        if !self.identity.manifest.provides.executors.is_empty() {
            let epoch = i64::try_from(p.epoch).map_err(|_| {
                RpcError::invalid_params(format!("epoch {} is out of range", p.epoch))
            })?;
            let recovery = serde_json::to_value(&p.recovery).map_err(RpcError::unauthored)?;
            self.store(&RecoveryPersistRequest {
                execution_id: p.execution_id,
                epoch,
                recovery,
            })
            .await?;
            return Ok(wire::ExecutionPersistRecoveryResult {});
        }
        Err(RpcError::new(
            Code::Undeclared,
            format!("{:?} declares no executor", self.name()),
        ))
    }
}
