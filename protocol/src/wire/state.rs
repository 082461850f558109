//! State reads (E→H): `state.work`, `state.works`, `state.executions`, `state.waits`,
//! `state.event`, `state.events`, `state.work_events`, `state.sequence`, `state.scopes`,
//! `state.scope` and `state.timers`.

use serde::{Deserialize, Serialize};

use super::events::Event;
use super::work::{Execution, Scope, Timer, Wait, Work};
use super::{check_page_limit, is_zero_u32, is_zero_u64, WireError};

/// `state.work` (E→H): one Work (not_found outside the extension's reach).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StateWorkParams {
    /// The Work ID.
    pub id: String,
}

/// Result of `state.work`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct StateWorkResult {
    /// The Work.
    pub work: Work,
}

/// `state.works` (E→H): a page of Works in the extension's scopes (of any kind: the Work
/// its own routes make is of kind `work` unless a route names one; docs/decisions.md).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StateWorksParams {
    /// Only this scope.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub scope_id: String,
    /// Only this Work kind.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub kind: String,
    /// Only these states.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub states: Vec<String>,
    /// Only Work with this correlation key.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub key: String,
    /// The cursor (the previous page's `next`).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub after: String,
    /// At most this many (at most 1000; 0 for the default).
    #[serde(default, skip_serializing_if = "is_zero_u32")]
    pub limit: u32,
}

/// Result of `state.works`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct StateWorksResult {
    /// The Works.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub works: Vec<Work>,
    /// The cursor of the next page; empty at the end.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub next: String,
}

/// `state.executions` (E→H): a Work's Executions, oldest first.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StateExecutionsParams {
    /// The Work ID.
    pub work_id: String,
}

/// Result of `state.executions`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct StateExecutionsResult {
    /// The Executions.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub executions: Vec<Execution>,
}

/// `state.waits` (E→H): a Work's Waits.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StateWaitsParams {
    /// The Work ID.
    pub work_id: String,
}

/// Result of `state.waits`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct StateWaitsResult {
    /// The Waits.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub waits: Vec<Wait>,
}

/// `state.event` (E→H): one Event (not_found outside the extension's scopes).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StateEventParams {
    /// The Event ID.
    pub id: String,
}

/// Result of `state.event`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct StateEventResult {
    /// The Event, with its scope_id.
    pub event: Event,
}

/// `state.events` (E→H): the extension's scopes' Events after a sequence, in order;
/// filtered by scope before the limit, so a page is short only at the end of the log.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StateEventsParams {
    /// Only Events with a sequence above this one.
    #[serde(default, skip_serializing_if = "is_zero_u64")]
    pub after: u64,
    /// At most this many (at most 1000; 0 for the default).
    #[serde(default, skip_serializing_if = "is_zero_u32")]
    pub limit: u32,
}

impl StateEventsParams {
    /// Checks the limit.
    pub fn validate(&self) -> Result<(), WireError> {
        check_page_limit(self.limit)
    }
}

/// Result of `state.events` (and `state.work_events`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct StateEventsResult {
    /// The Events, each with its scope_id.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub events: Vec<Event>,
}

impl StateEventsResult {
    /// The `after` of the next page: the last Event's sequence, or `after` when empty.
    pub fn next_after(&self, after: u64) -> u64 {
        self.events.last().map_or(after, |e| e.sequence)
    }
}

/// `state.work_events` (E→H): one Work's Events (naming it or routed to it), after a
/// sequence; a Work out of reach reads as an empty page.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StateWorkEventsParams {
    /// The Work ID.
    pub id: String,
    /// Only Events with a sequence above this one.
    #[serde(default, skip_serializing_if = "is_zero_u64")]
    pub after: u64,
    /// At most this many (at most 1000; 0 for the default).
    #[serde(default, skip_serializing_if = "is_zero_u32")]
    pub limit: u32,
}

/// Result of `state.work_events`.
pub type StateWorkEventsResult = StateEventsResult;

/// `state.sequence` (E→H): the latest accepted Event's sequence in the whole log.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StateSequenceParams {}

/// Result of `state.sequence`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StateSequenceResult {
    /// The latest sequence (0 for an empty log).
    #[serde(default)]
    pub sequence: u64,
}

/// `state.scopes` (E→H): the scopes whose configuration uses the extension.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StateScopesParams {}

/// Result of `state.scopes`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct StateScopesResult {
    /// The scopes.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub scopes: Vec<Scope>,
}

/// `state.scope` (E→H): one scope whose configuration uses the extension.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StateScopeParams {
    /// The scope ID.
    pub id: String,
}

/// Result of `state.scope`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct StateScopeResult {
    /// The scope.
    pub scope: Scope,
}

/// `state.timers` (E→H): the extension's armed timers.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StateTimersParams {
    /// Only this scope.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub scope_id: String,
    /// Only this recurrence.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub recurrence: String,
}

/// Result of `state.timers`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct StateTimersResult {
    /// The timers.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub timers: Vec<Timer>,
}
