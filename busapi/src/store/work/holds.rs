//! The wire types of `work::holds`: a hold on a Work's start, placed by the
//! package whose `work.admit` asked for it and settled by that package alone
//! (`store.work_hold`, `store.work_settle_hold`).

use super::*;

/// `store.work_hold`: hold a pending Work that has not started yet, for `owner`.
/// The same owner's hold again changes nothing (`held: false`).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WorkHoldRequest {
    /// The Work.
    pub work_id: String,
    /// The package that holds it.
    pub owner: String,
    /// Why it waits, in one line (at most
    /// [`protocol::wire::MAX_HOLD_REASON_BYTES`]).
    pub reason: String,
}

/// Result of `store.work_hold`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkHoldResponse {
    /// True when this call placed the hold; false when `owner` held it already.
    pub held: bool,
}

/// `store.work_settle_hold`: settle the hold `owner` placed on a Work. Admitting
/// clears it and lets the Work start (it is not asked again by `owner`); otherwise
/// the Work is cancelled as `store.work_cancel` does. The same `key` again, or no
/// hold of `owner`'s, settles nothing (`settled: false`) and writes nothing.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WorkSettleHoldRequest {
    /// The Work.
    pub work_id: String,
    /// The package settling its own hold.
    pub owner: String,
    /// Let it start (true) or cancel it (false).
    pub admit: bool,
    /// Why (bounded like a cancel's reason; a cancel keeps it).
    #[serde(default)]
    pub reason: String,
    /// The settlement's identity.
    pub key: String,
    /// Only a Work in these scopes (another reads as not found); `None`: any.
    #[serde(default)]
    pub scopes: Option<Vec<String>>,
}

/// Result of `store.work_settle_hold`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkSettleHoldResponse {
    /// True when this call settled the hold.
    pub settled: bool,
    /// The Work's state after the call.
    pub work_state: String,
}

/// A hold to settle in the same write as an action's record
/// ([`super::ActionAcceptRequest::settle_hold`]).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HoldSettle {
    /// The package whose hold it is (the action's provider).
    pub owner: String,
    /// Let the Work start (true) or cancel it (false).
    pub admit: bool,
    /// Why, in one line.
    #[serde(default)]
    pub reason: String,
}
