//! The wire types of `commit` (moved from storaged).

use crate::store::events::EventInput;
use crate::store::kv::{KvCheckItem, KvDeleteItem, KvPutItem};
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
