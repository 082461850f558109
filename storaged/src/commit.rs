//! `store.kv_commit`: one atomic batch of an extension's KV checks and writes
//! ([`crate::kv`]) with the Events it emits ([`crate::events`]), accepted in the same
//! transaction. It composes the two, so neither imports the other.

use crate::db::{Limits, Store};
use crate::error::StoreError;
use crate::events::{self, AcceptContext, EventInput};
use crate::kv::{apply_checks, apply_writes, validate_ops, KvCheckItem, KvDeleteItem, KvPutItem};
use crate::sql::Connection;
use crate::util;
use serde::{Deserialize, Serialize};

/// `store.kv_commit`: checks, emissions, deletes and puts as one atomic unit.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KvCommitRequest {
    /// The extension the call is made for.
    pub owner: String,
    /// The owner's declared event families (for emissions).
    #[serde(default)]
    pub families: Option<Vec<String>>,
    /// The scopes the owner is configured in: when given, a root emission must be
    /// of one of them and a derived one's parent in one of them.
    #[serde(default)]
    pub scopes: Option<Vec<String>>,
    /// Preconditions, all of which must hold.
    #[serde(default)]
    pub checks: Vec<KvCheckItem>,
    /// Writes (applied after the deletes).
    #[serde(default)]
    pub puts: Vec<KvPutItem>,
    /// Deletes.
    #[serde(default)]
    pub deletes: Vec<KvDeleteItem>,
    /// Events accepted in the same transaction; each needs a `delivery_id`, and a
    /// root one (no `parent_id`) a `scope_id`.
    #[serde(default)]
    pub emissions: Vec<EventInput>,
}

/// The accepted Event of an emission.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct EmittedEvent {
    /// Its ID (`evt_` + 32 hex digits of sha256(source "\n" delivery_id)).
    pub id: String,
    /// Its sequence.
    pub seq: i64,
}

/// What became of one emission.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct EmissionOutcome {
    /// The accepted Event; none when refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub event: Option<EmittedEvent>,
    /// True when this commit added it; false when it was already accepted.
    #[serde(default)]
    pub added: bool,
    /// The code of a refusal of this emission alone (`causal_limit`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refused: Option<String>,
}

/// Each emission's outcome, in order.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct KvCommitResponse {
    /// One per emission.
    #[serde(default)]
    pub emissions: Vec<EmissionOutcome>,
}

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
    "store.kv_commit" => kv_commit,
}
