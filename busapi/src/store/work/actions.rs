//! The wire types of `work::actions` (moved from storaged).

use super::*;
use crate::store::events::EventInput;

/// `store.action_accept`: accept an action's Event and attach it to its Work.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ActionAcceptRequest {
    /// The Event: a root with a `delivery_id` and no keys, in the Work's scope.
    pub event: EventInput,
    /// The Work it is attached to.
    pub work_id: String,
    /// The Work states the action may be taken in; empty: any. A Work in another
    /// state is `conflict` and nothing is written (unless the Event was accepted
    /// before: then it is answered, `added: false`).
    #[serde(default)]
    pub states: Vec<String>,
    /// Why, kept on the route record (`stop by github:octocat`).
    #[serde(default)]
    pub reason: String,
    /// A hold of the provider's to settle in the same write (an `admit` or
    /// `reject` action on a held Work): applied only when this call adds the
    /// Event; a Work with no such hold is `conflict` and nothing is written.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub settle_hold: Option<HoldSettle>,
}

/// Result of `store.action_accept`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ActionAcceptResponse {
    /// The Event's ID.
    pub id: String,
    /// Its sequence.
    pub seq: i64,
    /// True when this call added it; false when it was accepted before.
    pub added: bool,
    /// The Work's state as the call found it.
    pub work_state: String,
    /// True when this call settled the hold `settle_hold` named.
    #[serde(default)]
    pub settled: bool,
}

/// `store.work_retry`: run a failed, cancelled, idle or completed Work again.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WorkRetryRequest {
    /// The Work.
    pub work_id: String,
    /// Why (bounded like a cancel's reason; schedulerd logs it).
    #[serde(default)]
    pub reason: String,
    /// An input of the Work to run too (the retry action's Event).
    #[serde(default)]
    pub seq: Option<i64>,
    /// The Work's version as read.
    #[serde(default)]
    pub expect_version: Option<i64>,
}

/// Result of `store.work_retry`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkRetryResponse {
    /// The Work's state before (`failed`, `cancelled`, `idle`, `completed`).
    pub was: String,
    /// Its state now (`pending`).
    pub state: String,
    /// The inputs its next attempt takes, by sequence.
    pub inputs: Vec<i64>,
}
