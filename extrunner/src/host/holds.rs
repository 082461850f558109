//! `work.settle_hold` (E→H, permission `work.start_gate`): a start gate settles a
//! hold it placed (its `work.admit` answered `hold`, which schedulerd kept). Only
//! the calling package's own holds, on Work in its configured scopes: a Work
//! elsewhere reads as `not_found`, exactly as one that does not exist, and a Work
//! with no hold of the package's (or a settlement whose `key` was used before)
//! answers `settled: false` and nothing changes. Admitting lets the Work's next
//! start through; otherwise the Work is cancelled (storaged,
//! `store.work_settle_hold`, in one write).

use super::*;
use busapi::store::WorkSettleHoldRequest;
use protocol::wire::{WorkSettleHoldParams, WorkSettleHoldResult};

impl Scoped<'_> {
    /// `work.settle_hold`, for the calling package's own hold (see the module doc).
    pub(super) async fn work_settle_hold(
        &self,
        p: WorkSettleHoldParams,
    ) -> Result<WorkSettleHoldResult, RpcError> {
        if p.work_id.is_empty() || p.key.is_empty() {
            return Err(RpcError::new(
                Code::Invalid,
                "work.settle_hold needs a work_id and a key",
            ));
        }
        let settled = self
            .store(&WorkSettleHoldRequest {
                work_id: p.work_id.clone(),
                owner: self.name().to_owned(),
                admit: p.admit,
                reason: p.reason,
                key: p.key,
                scopes: Some(self.identity.scopes.clone()),
            })
            .await?;
        tracing::info!(OC_EXTENSION = %self.name(), OC_WORK_ID = %p.work_id, admit = p.admit,
            settled = settled.settled, "a start gate settled its hold");
        Ok(WorkSettleHoldResult {
            settled: settled.settled,
        })
    }
}
