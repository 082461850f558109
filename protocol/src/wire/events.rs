//! Shared types: an Event as the wire carries it, its payload, and what an extension
//! emits ([`Emission`], answered by [`EmissionResult`]).

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::{is_false, is_zero_u32, is_zero_u64};

/// An Event payload (domain.Payload): the schema `<base>.v<N>` and the raw JSON data.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Payload {
    /// The payload schema, `<base>.v<N>`; empty for a payload without one.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub schema: String,
    /// The raw JSON data.
    #[serde(default, skip_serializing_if = "Value::is_null")]
    pub data: Value,
}

/// An accepted Event, as state reads, routing and executors see it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Event {
    /// The Event ID the host assigned.
    pub id: String,
    /// The Event's sequence in the log (0 while not yet known, as for a route trace).
    #[serde(default, skip_serializing_if = "is_zero_u64")]
    pub sequence: u64,
    /// The Event type, within one of the owning extension's families.
    #[serde(rename = "type")]
    pub event_type: String,
    /// The source that produced it (`github`, `schedule/runs`).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub source: String,
    /// The delivery ID within the source.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub delivery_id: String,
    /// The scope the Event was accepted into.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub scope_id: String,
    /// Its correlation keys.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub keys: Vec<String>,
    /// The payload.
    #[serde(default)]
    pub payload: Payload,
    /// When it happened at the source.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub occurred_at: String,
    /// When the host accepted it.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub accepted_at: String,
    /// The Event it was derived from; empty for a root.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub parent_id: String,
    /// The root of its causal chain (its own ID for a root).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub root_id: String,
    /// Its causal depth (0 for a root).
    #[serde(default, skip_serializing_if = "is_zero_u32")]
    pub depth: u32,
    /// The Execution that caused it, when one did.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub execution_id: String,
}

/// An Event the extension asks the host to accept: in a `kv.commit` batch (a root Event of
/// `scope_id`, or one derived from `parent_id`) or through `event.accept` (derived only).
/// The host names it from `source` and `delivery_id`, so emitting it again is the same
/// Event.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Emission {
    /// The scope of a root Event; a derived Event takes its parent's scope.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub scope_id: String,
    /// The parent of a derived Event; empty for a root.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub parent_id: String,
    /// The source: the extension's name, or `name/` + suffix.
    pub source: String,
    /// The delivery ID within the source.
    pub delivery_id: String,
    /// The Event type, of one of the extension's declared families.
    #[serde(rename = "type")]
    pub event_type: String,
    /// The payload, absent or the current version of one of the extension's schemas.
    #[serde(default)]
    pub payload: Payload,
    /// Correlation keys.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub keys: Vec<String>,
    /// When it happened at the source; empty for the host's clock.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub occurred_at: String,
}

/// What the host did with one Emission (or an `event.accept`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct EmissionResult {
    /// The accepted Event (none when refused).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub event: Option<Event>,
    /// True when this call added the Event; false when it was already accepted.
    #[serde(default, skip_serializing_if = "is_false")]
    pub added: bool,
    /// The code of a refusal that applied to this Emission alone (`causal_limit`); the
    /// rest of the batch committed.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub refused: String,
}

/// The spec's EmittedEventID: the ID of the Event accepted from `source` with
/// `delivery_id`, `evt_` + the first 32 hex digits of sha256(source "\n"
/// delivery_id). Whoever knows the source and delivery ID knows the Event's ID
/// before (or without) accepting it.
pub fn emitted_event_id(source: &str, delivery_id: &str) -> String {
    use sha2::{Digest, Sha256};
    let mut h = Sha256::new();
    h.update(source.as_bytes());
    h.update(b"\n");
    h.update(delivery_id.as_bytes());
    format!("evt_{}", crate::hex::encode(&h.finalize()[..16]))
}
