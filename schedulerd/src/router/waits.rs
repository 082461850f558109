//! The Wait an event is for: an active Wait of a Work of the event's scope whose
//! keys and types the event matches (`store.waits_matching`), and whose owner's
//! `dependency.filter` takes it when the owner declares one.

use busapi::ext::ExtCall;
use busapi::store::{WaitRow, WaitsMatchingRequest, WorkGetRequest};
use busapi::Call;
use protocol::wire;

use super::{store_err, RouteError, Router, FILTER_WAIT};

impl Router {
    /// The active Wait this event satisfies (by its keys and type, and by its owner's
    /// [`Router::dependency_filter`] when the owner declares one), in the event's
    /// scope: (Wait ID, Work ID).
    pub(super) async fn waiting_for(
        &self,
        ev: &busapi::store::UnroutedEvent,
    ) -> Result<Option<(String, String)>, RouteError> {
        if ev.keys.is_empty() {
            return Ok(None);
        }
        let waits = self
            .store
            .call(&WaitsMatchingRequest {
                keys: ev.keys.clone(),
                types: vec![ev.event_type.clone()],
                limit: 10,
            })
            .await
            .map_err(|e| store_err(WaitsMatchingRequest::METHOD, e))?;
        for w in &waits.waits {
            let work = self
                .store
                .call(&WorkGetRequest {
                    id: w.work_id.clone(),
                })
                .await
                .map_err(|e| store_err(WorkGetRequest::METHOD, e))?;
            if work.work.scope_id == ev.scope_id && self.dependency_filter(w, ev).await {
                return Ok(Some((w.id.clone(), w.work_id.clone())));
            }
        }
        Ok(None)
    }

    /// Whether the Wait `w` takes `ev`, which its keys and types already match, as its
    /// owner's `dependency.filter` says: asked only when the owner declares
    /// `provides.dependency_filter` (a Wait with no owner, or whose owner declares
    /// none, takes it), in transaction ([`super::FILTER_TIMEOUT`], enforced by
    /// extrunner on the extension; [`FILTER_WAIT`] for the whole round trip). The
    /// operation is the owner's wait operation
    /// ([`crate::knowledge::Knowledge::wait_filter`]). `matched: false` and any
    /// failure (an error, a timeout, the extension down, an unreadable payload) count
    /// as no match (spec: the event routes as it would otherwise, and a later one may
    /// wake the Wait).
    async fn dependency_filter(&self, w: &WaitRow, ev: &busapi::store::UnroutedEvent) -> bool {
        let owner = w.owner.as_str();
        if owner.is_empty() {
            return true;
        }
        let operation = {
            let Ok(k) = self.knowledge.read() else {
                return false;
            };
            match k.wait_filter(owner) {
                Some(operation) => operation,
                None => return true,
            }
        };
        let wait_id = w.id.as_str();
        let params = wire::DependencyFilterParams {
            operation,
            work_id: w.work_id.clone(),
            plan: w.plan.clone(),
            event: crate::rows::routed_event(ev),
        };
        let mut call = ExtCall::new(owner, params);
        call.in_transaction = true;
        let answer = self.extensions.call(&call);
        match tokio::time::timeout(FILTER_WAIT, answer).await {
            Ok(Ok(r)) => {
                if !r.matched {
                    tracing::info!(OC_EXTENSION = %owner, wait = %wait_id, seq = ev.seq, "the Wait's dependency filter did not take the event");
                }
                r.matched
            }
            Ok(Err(e)) => {
                tracing::warn!(OC_EXTENSION = %owner, wait = %wait_id, seq = ev.seq, error = %e, "the Wait's dependency filter failed: counted as no match");
                false
            }
            Err(_) => {
                tracing::warn!(OC_EXTENSION = %owner, wait = %wait_id, seq = ev.seq, "the Wait's dependency filter did not answer within {FILTER_WAIT:?}: counted as no match");
                false
            }
        }
    }
}
