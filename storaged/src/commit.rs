//! `store.kv_commit`: one atomic batch of an extension's KV checks and writes
//! ([`crate::kv`]) with the Events it emits ([`crate::events`]), accepted in the same
//! transaction. It composes the two, so neither imports the other.

use crate::db::{Limits, Store};
use crate::error::StoreError;
use crate::events::{self, AcceptContext};
use crate::kv::{apply_checks, apply_writes, validate_ops};
use crate::sql::Connection;
use crate::util;

pub use busapi::store::commit::*;

/// `store.kv_commit`: validate everything, apply the checks, accept each emission
/// (one over its chain's causal bounds is refused alone), then the deletes and
/// puts. Any other failure applies nothing.
pub fn kv_commit(
    conn: &Connection,
    limits: &Limits,
    req: &KvCommitRequest,
) -> Result<KvCommitResponse, StoreError> {
    let items = req.checks.len() + req.puts.len() + req.deletes.len() + req.emissions.len();
    if items > limits.max_batch {
        return Err(StoreError::invalid(format!(
            "the batch has {items} items, over max_batch ({})",
            limits.max_batch
        )));
    }
    validate_ops(limits, &req.owner, &req.checks, &req.puts, &req.deletes)?;
    for (i, e) in req.emissions.iter().enumerate() {
        if e.delivery_id.as_deref().unwrap_or("").is_empty() {
            return Err(StoreError::invalid(format!(
                "emissions[{i}]: delivery_id is required"
            )));
        }
        if e.parent_id.as_deref().unwrap_or("").is_empty() && e.scope_id.is_empty() {
            return Err(StoreError::invalid(format!(
                "emissions[{i}]: a root emission needs a scope_id"
            )));
        }
    }
    apply_checks(conn, &req.owner, &req.checks)?;
    let families = req.families.clone().unwrap_or_default();
    let ctx = AcceptContext {
        owner: Some(&req.owner),
        families: &families,
        scopes: req.scopes.as_deref(),
    };
    let now_ms = util::now_ms();
    let mut out = KvCommitResponse::default();
    for e in &req.emissions {
        match events::accept_event(conn, limits, e, &ctx, now_ms, None) {
            Ok(a) => out.emissions.push(EmissionOutcome {
                event: Some(EmittedEvent {
                    id: a.id,
                    seq: a.seq,
                }),
                added: a.added,
                refused: None,
            }),
            Err(StoreError::CausalLimit(why)) => {
                tracing::warn!(
                    OC_EXTENSION = %req.owner,
                    source = %e.source,
                    reason = %why,
                    "emission refused alone: causal_limit"
                );
                out.emissions.push(EmissionOutcome {
                    event: None,
                    added: false,
                    refused: Some("causal_limit".to_string()),
                });
            }
            Err(other) => return Err(other),
        }
    }
    apply_writes(conn, limits, &req.owner, &req.puts, &req.deletes)?;
    Ok(out)
}

impl Store {
    /// `store.kv_commit`.
    pub async fn kv_commit(&self, req: KvCommitRequest) -> Result<KvCommitResponse, StoreError> {
        let limits = self.limits().clone();
        self.write(move |conn| kv_commit(conn, &limits, &req)).await
    }
}

crate::store_methods! {
    KvCommitRequest => kv_commit,
}
