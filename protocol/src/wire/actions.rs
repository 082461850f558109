//! `action.submit` (E→H, permission `action.submit`): an extension invokes an action
//! for a person it identified on its own surface (a comment's author on GitHub), in
//! one of its configured scopes. The host records the action as one Event under
//! `core.action` whose caller is `<package name>:<caller>`, and performs it once per
//! `key`: a repeated submit with the same key answers `added: false` and does
//! nothing again.
//!
//! The host offers the provider [`CORE_PROVIDER`] with the actions [`ACTION_STOP`]
//! (cancel the Work, stopping its running attempt first) and [`ACTION_RETRY`] (a
//! failed or cancelled Work is reopened; an idle or completed one gets a new turn).

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The host's own action provider, the default when `provider` is empty.
pub const CORE_PROVIDER: &str = "core";
/// `core`'s `stop`: cancel the Work, stopping its running attempt first.
pub const ACTION_STOP: &str = "stop";
/// `core`'s `retry`: reopen a failed or cancelled Work, or give an idle or completed
/// one a new turn.
pub const ACTION_RETRY: &str = "retry";
/// The Event type family the host records actions under (`core.action.<action>`).
pub const ACTION_EVENT_FAMILY: &str = "core.action";
/// The longest `caller`, in bytes (a GitHub login is at most 39).
pub const MAX_ACTION_CALLER_BYTES: usize = 200;
/// The longest `key`, in bytes.
pub const MAX_ACTION_KEY_BYTES: usize = 200;
/// The longest `provider` or `action`, in bytes.
pub const MAX_ACTION_NAME_BYTES: usize = 64;
/// The most bytes of `input`, as JSON text.
pub const MAX_ACTION_INPUT_BYTES: usize = 16 * 1024;

/// `action.submit` (E→H, permission `action.submit`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ActionSubmitParams {
    /// One of the package's configured scopes.
    pub scope_id: String,
    /// The Work the action is on (required by `core`'s actions).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub work_id: String,
    /// The provider offering the action; empty is [`CORE_PROVIDER`].
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub provider: String,
    /// The action (`stop`, `retry`).
    pub action: String,
    /// What the person gave with it, if anything.
    #[serde(default, skip_serializing_if = "Value::is_null")]
    pub input: Value,
    /// The person, as the package knows them (a GitHub login); recorded as
    /// `<package name>:<caller>`.
    pub caller: String,
    /// The submit's identity (the delivery ID of the Event recorded): the same key
    /// again adds and performs nothing.
    pub key: String,
}

/// Result of `action.submit`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ActionSubmitResult {
    /// The ID of the `core.action.<action>` Event recorded for the submit.
    pub event: String,
    /// Whether this submit added it (false: the key was submitted before, and
    /// nothing was done again).
    #[serde(default)]
    pub added: bool,
    /// What was done, in one line for a person (`stopped Work w-1`).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
}
