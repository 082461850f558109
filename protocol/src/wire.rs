//! The serde wire types of the extension protocol's method params and results.
//!
//! Every typed wire method has one params struct and one result struct named after it
//! (`kv.commit` is [`KvCommitParams`] / [`KvCommitResult`]), and the params struct
//! implements [`Call`], which names the method and its result type so a caller can make
//! a typed call generically.
//!
//! Conventions (spec, "Wire format"):
//!
//! * fields are snake_case; optional fields are left out when empty, so messages stay
//!   compact, and a missing field reads as its empty value;
//! * unknown fields are ignored when reading (additive fields ship without a protocol
//!   version bump);
//! * raw JSON (an Event payload's data, configs, operation inputs) is [`serde_json::Value`];
//! * byte fields (delivery bodies, artifact chunks, live output tails) are base64 strings
//!   ([`crate::b64`]);
//! * times are RFC 3339 strings in UTC (`2026-10-25T09:00:00Z`), kept as text: the wire
//!   never interprets them beyond what the receiving side parses.
//!
//! The direction of each method (host to extension, H→E, or extension to host, E→H) is in
//! its params' doc comment.

use std::collections::BTreeMap;
use std::fmt;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::Value;

mod actions;
mod annotate;
mod authorize;
mod render;
mod run;
pub use actions::*;
pub use annotate::*;
pub use authorize::*;
pub use render::*;
pub use run::*;

// ---------------------------------------------------------------------------------------
// Limits
// ---------------------------------------------------------------------------------------

/// The largest artifact chunk one `artifact.write` carries, before base64 (MaxChunkBytes).
pub const MAX_CHUNK_BYTES: usize = 256 * 1024;
/// The largest `limit` a paged read (`kv.list`, `state.events`, `state.works`, ...) accepts.
pub const MAX_PAGE_LIMIT: u32 = 1000;
/// The hard deadline of an in-transaction method, in milliseconds.
pub const IN_TRANSACTION_DEADLINE_MILLIS: u64 = 250;

/// Work display: the longest title, in bytes.
pub const MAX_DISPLAY_TITLE_BYTES: usize = 200;
/// Work display: the longest ref (`#136`, `ENG-12`), in bytes.
pub const MAX_DISPLAY_REF_BYTES: usize = 40;
/// Work display: the longest requester, in bytes.
pub const MAX_DISPLAY_REQUESTER_BYTES: usize = 100;
/// Work display: the longest link label, in bytes.
pub const MAX_DISPLAY_LINK_LABEL_BYTES: usize = 60;
/// Work display: the longest link URL, in bytes.
pub const MAX_DISPLAY_URL_BYTES: usize = 2048;
/// Work display: the most links one display carries.
pub const MAX_DISPLAY_LINKS: usize = 8;
/// The longest wait description, in bytes; longer text is clipped, never refused.
pub const MAX_WAIT_DESCRIPTION_BYTES: usize = 200;
/// The longest wait progress line, in bytes; longer text is clipped, never refused.
pub const MAX_WAIT_PROGRESS_BYTES: usize = 120;

// ---------------------------------------------------------------------------------------
// The typed-call trait
// ---------------------------------------------------------------------------------------

/// A wire method's params type: names the method and the type of its result.
///
/// ```
/// use protocol::wire::{Call, KvGetParams};
/// assert_eq!(<KvGetParams as Call>::METHOD, "kv.get");
/// ```
pub trait Call: Serialize + DeserializeOwned {
    /// The JSON-RPC method name.
    const METHOD: &'static str;
    /// The method's result type.
    type Result: Serialize + DeserializeOwned;
}

// ---------------------------------------------------------------------------------------
// Errors of the validation helpers
// ---------------------------------------------------------------------------------------

/// A wire value that breaks one of the protocol's limits or rules. It names the field and
/// the rule, never the offending text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WireError {
    /// The field, as a path (`title`, `links[2].url`, `limit`).
    pub field: String,
    /// What is wrong, naming the limit.
    pub reason: String,
}

impl WireError {
    fn new(field: impl Into<String>, reason: impl Into<String>) -> Self {
        WireError {
            field: field.into(),
            reason: reason.into(),
        }
    }
}

impl fmt::Display for WireError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.field, self.reason)
    }
}

impl std::error::Error for WireError {}

/// Checks a paged read's `limit` (0 means the receiver's default).
pub fn check_page_limit(limit: u32) -> Result<(), WireError> {
    if limit > MAX_PAGE_LIMIT {
        return Err(WireError::new(
            "limit",
            format!("{limit} is over the maximum of {MAX_PAGE_LIMIT}"),
        ));
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------
// serde helpers
// ---------------------------------------------------------------------------------------

pub(crate) fn is_false(v: &bool) -> bool {
    !*v
}

fn is_zero_u64(v: &u64) -> bool {
    *v == 0
}

fn is_zero_u32(v: &u32) -> bool {
    *v == 0
}

/// An `Option<Value>` that reads a present `null` as `Some(Value::Null)` and only an
/// absent field as `None` (use with `default`).
fn present<'de, D>(deserializer: D) -> Result<Option<Value>, D::Error>
where
    D: Deserializer<'de>,
{
    Value::deserialize(deserializer).map(Some)
}

// ---------------------------------------------------------------------------------------
// Shared types: events, payloads, emissions
// ---------------------------------------------------------------------------------------

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

// ---------------------------------------------------------------------------------------
// Shared types: KV
// ---------------------------------------------------------------------------------------

/// A KV precondition: the key holds exactly `version`, or is absent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KvExpect {
    /// The key holds a value with this version.
    Version(String),
    /// The key holds no value.
    Absent,
}

/// A precondition of a `kv.commit` or `event.accept`. On the wire it is
/// `{"key":"k","version":"…"}` or `{"key":"k","absent":true}`, with `namespace` when it is
/// not the extension's own name; anything else (both, neither) is refused when read.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "KvCheckWire", into = "KvCheckWire")]
pub struct KvCheck {
    /// The namespace: the extension's name (empty) or `name.` + suffix.
    pub namespace: String,
    /// The key.
    pub key: String,
    /// What the key must hold.
    pub expect: KvExpect,
}

impl KvCheck {
    /// The key in the extension's own namespace must hold `version`.
    pub fn version(key: impl Into<String>, version: impl Into<String>) -> Self {
        KvCheck {
            namespace: String::new(),
            key: key.into(),
            expect: KvExpect::Version(version.into()),
        }
    }

    /// The key in the extension's own namespace must be absent.
    pub fn absent(key: impl Into<String>) -> Self {
        KvCheck {
            namespace: String::new(),
            key: key.into(),
            expect: KvExpect::Absent,
        }
    }

    /// The same check in another of the extension's namespaces.
    pub fn in_namespace(mut self, namespace: impl Into<String>) -> Self {
        self.namespace = namespace.into();
        self
    }
}

#[derive(Serialize, Deserialize)]
struct KvCheckWire {
    #[serde(default, skip_serializing_if = "String::is_empty")]
    namespace: String,
    key: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    version: Option<String>,
    #[serde(default, skip_serializing_if = "is_false")]
    absent: bool,
}

impl TryFrom<KvCheckWire> for KvCheck {
    type Error = String;

    fn try_from(w: KvCheckWire) -> Result<Self, String> {
        let expect = match (w.version, w.absent) {
            (Some(v), false) => KvExpect::Version(v),
            (None, true) => KvExpect::Absent,
            (Some(_), true) => {
                return Err(format!(
                    "check of {:?}: version and absent are exclusive",
                    w.key
                ))
            }
            (None, false) => {
                return Err(format!(
                    "check of {:?}: needs a version or absent: true",
                    w.key
                ))
            }
        };
        Ok(KvCheck {
            namespace: w.namespace,
            key: w.key,
            expect,
        })
    }
}

impl From<KvCheck> for KvCheckWire {
    fn from(c: KvCheck) -> Self {
        let (version, absent) = match c.expect {
            KvExpect::Version(v) => (Some(v), false),
            KvExpect::Absent => (None, true),
        };
        KvCheckWire {
            namespace: c.namespace,
            key: c.key,
            version,
            absent,
        }
    }
}

/// A KV write: `value` under `key`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct KvPut {
    /// The namespace: the extension's name (empty) or `name.` + suffix.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub namespace: String,
    /// The key.
    pub key: String,
    /// The value, raw JSON.
    pub value: Value,
}

/// A KV delete (deleting an absent key is not an error).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct KvDelete {
    /// The namespace: the extension's name (empty) or `name.` + suffix.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub namespace: String,
    /// The key.
    pub key: String,
}

/// One entry of a `kv.list` page.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct KvEntry {
    /// The key.
    pub key: String,
    /// The value, raw JSON.
    pub value: Value,
    /// The value's version (a digest of it), for a later check.
    pub version: String,
}

// ---------------------------------------------------------------------------------------
// Shared types: Work, executions, waits, scopes, timers
// ---------------------------------------------------------------------------------------

/// A link of a Work display: a required label and an http or https URL.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DisplayLink {
    /// The label (`Issue #12`), at most 60 bytes.
    pub label: String,
    /// The URL, http or https, at most 2048 bytes.
    pub url: String,
}

/// What a Work is, in its source's words (extension.RouteDecision.Display).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkDisplay {
    /// The title, at most 200 bytes.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub title: String,
    /// A short ref (`#136`, `ENG-12`), at most 40 bytes.
    #[serde(rename = "ref", default, skip_serializing_if = "String::is_empty")]
    pub reference: String,
    /// Who asked, at most 100 bytes.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub requester: String,
    /// Up to 8 links.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub links: Vec<DisplayLink>,
}

/// Checks one display text field: one line, no control characters, within `max` bytes.
fn check_display_text(field: &str, text: &str, max: usize) -> Result<(), WireError> {
    if text.len() > max {
        return Err(WireError::new(
            field,
            format!("{} bytes, over the limit of {max} bytes", text.len()),
        ));
    }
    if text.chars().any(char::is_control) {
        return Err(WireError::new(
            field,
            "must be one line without control characters",
        ));
    }
    Ok(())
}

/// Checks a display link URL: http or https with a host, at most 2048 bytes, one line.
pub fn check_display_url(field: &str, url: &str) -> Result<(), WireError> {
    if url.is_empty() {
        return Err(WireError::new(field, "is required"));
    }
    check_display_text(field, url, MAX_DISPLAY_URL_BYTES)?;
    if url.chars().any(char::is_whitespace) {
        return Err(WireError::new(field, "must not contain whitespace"));
    }
    let lower = url.to_ascii_lowercase();
    let rest = if let Some(rest) = lower.strip_prefix("https://") {
        rest
    } else if let Some(rest) = lower.strip_prefix("http://") {
        rest
    } else {
        return Err(WireError::new(field, "must be an http or https URL"));
    };
    let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
    let host = authority.rsplit('@').next().unwrap_or_default();
    if host.is_empty() || host.starts_with(':') {
        return Err(WireError::new(field, "must name a host"));
    }
    Ok(())
}

impl WorkDisplay {
    /// True when the display says nothing.
    pub fn is_empty(&self) -> bool {
        self.title.is_empty()
            && self.reference.is_empty()
            && self.requester.is_empty()
            && self.links.is_empty()
    }

    /// Checks the spec's display limits: every field one line of UTF-8 without control
    /// characters; title at most 200 bytes, ref 40, requester 100; at most 8 links, each
    /// with a label (required, at most 60 bytes) and an http or https URL (at most 2048
    /// bytes); and a title or a ref. A display that breaks one is dropped, never truncated.
    pub fn validate(&self) -> Result<(), WireError> {
        check_display_text("title", &self.title, MAX_DISPLAY_TITLE_BYTES)?;
        check_display_text("ref", &self.reference, MAX_DISPLAY_REF_BYTES)?;
        check_display_text("requester", &self.requester, MAX_DISPLAY_REQUESTER_BYTES)?;
        if self.links.len() > MAX_DISPLAY_LINKS {
            return Err(WireError::new(
                "links",
                format!(
                    "{} links, over the limit of {MAX_DISPLAY_LINKS}",
                    self.links.len()
                ),
            ));
        }
        for (i, link) in self.links.iter().enumerate() {
            let label = format!("links[{i}].label");
            if link.label.is_empty() {
                return Err(WireError::new(label, "is required"));
            }
            check_display_text(&label, &link.label, MAX_DISPLAY_LINK_LABEL_BYTES)?;
            check_display_url(&format!("links[{i}].url"), &link.url)?;
        }
        if self.title.is_empty() && self.reference.is_empty() {
            return Err(WireError::new("title", "a display needs a title or a ref"));
        }
        Ok(())
    }
}

/// Cuts text to its first line, without control characters, within `max` bytes (on a
/// character boundary): the clipping the host applies to a wait description (200 bytes)
/// and a wait progress line (120 bytes), which never fail.
pub fn clip_line(text: &str, max: usize) -> String {
    let line = text.split(['\n', '\r']).next().unwrap_or_default();
    let mut out = String::with_capacity(line.len().min(max));
    for c in line.chars().filter(|c| !c.is_control()) {
        if out.len() + c.len_utf8() > max {
            break;
        }
        out.push(c);
    }
    out
}

/// A Work, as state reads and routing show it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Work {
    /// The Work ID.
    pub id: String,
    /// Its scope.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub scope_id: String,
    /// Its Work kind.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub kind: String,
    /// Its state (`ready`, `running`, `waiting`, `completed`, `failed`, `cancelled`, ...).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub state: String,
    /// Its correlation keys.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub keys: Vec<String>,
    /// The binding it runs on.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub binding: String,
    /// Its display, when a source gave one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub display: Option<WorkDisplay>,
    /// Its context (set by the match that created it).
    #[serde(default, skip_serializing_if = "Value::is_null")]
    pub context: Value,
    /// The binding grants it opted into.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub grants: Vec<String>,
    /// When it was created.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub created_at: String,
    /// When it last changed.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub updated_at: String,
}

impl Work {
    /// A Work as the wire shows it, from storaged's Work row (`store.work_get`,
    /// `store.works`): a display or list that does not read is left out.
    pub fn from_store_row(w: &Value) -> Work {
        let text = |k: &str| w[k].as_str().unwrap_or_default().to_owned();
        Work {
            id: text("id"),
            scope_id: text("scope_id"),
            kind: text("kind"),
            state: text("state"),
            keys: serde_json::from_value(w["keys"].clone()).unwrap_or_default(),
            binding: text("binding"),
            display: serde_json::from_value(w["display"].clone()).ok(),
            context: w["context"].clone(),
            grants: serde_json::from_value(w["grants"].clone()).unwrap_or_default(),
            created_at: text("created_at"),
            updated_at: text("updated_at"),
        }
    }
}

/// An Execution (one attempt of a Work), as `state.executions` shows it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Execution {
    /// The Execution ID.
    pub id: String,
    /// Its Work.
    pub work_id: String,
    /// The attempt number, from 1.
    #[serde(default, skip_serializing_if = "is_zero_u32")]
    pub attempt: u32,
    /// The current lease epoch.
    #[serde(default, skip_serializing_if = "is_zero_u64")]
    pub epoch: u64,
    /// The executor that runs it.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub executor: String,
    /// Its state (`running`, `waiting`, `settled`, ...).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub state: String,
    /// Its outcome once settled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outcome: Option<Outcome>,
    /// When it started.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub started_at: String,
    /// When it ended.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub ended_at: String,
}

/// A Wait of a Work, as `state.waits` shows it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Wait {
    /// The Wait ID.
    pub id: String,
    /// Its Work.
    pub work_id: String,
    /// Its state (`active`, `woken`, `cancelled`, `timed_out`).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub state: String,
    /// The extension whose operation declared it; empty for a builtin wait.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub owner: String,
    /// The operation that declared it.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub operation: String,
    /// What it waits for, in words.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub description: String,
    /// The owner's progress line.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub progress: String,
    /// The keys that wake it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub keys: Vec<String>,
    /// When its timeout fires, while its timer exists.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub due_at: String,
    /// When it was declared.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub created_at: String,
}

/// An armed timer, as `state.timers` shows it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Timer {
    /// The timer ID.
    pub id: String,
    /// Its scope.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub scope_id: String,
    /// The recurrence that re-arms it; empty for a one-shot timer.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub recurrence: String,
    /// Its key (prefixed with the owning extension's name).
    pub key: String,
    /// When it fires next.
    pub due_at: String,
    /// The recurrence's spec (raw JSON).
    #[serde(default, skip_serializing_if = "Value::is_null")]
    pub spec: Value,
}

/// A config entry of one of the extension's types in a scope.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Entry {
    /// The scope the entry is in.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub scope_id: String,
    /// The entry's type (one of the extension's).
    #[serde(rename = "type")]
    pub entry_type: String,
    /// The entry's name within the scope.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub name: String,
    /// The connection it names, when of one of the extension's types and granted.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub connection: String,
    /// The connections the scope's bindings name, of the extension's types and granted.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub binding_connections: Vec<String>,
    /// The entry's config, raw JSON.
    #[serde(default, skip_serializing_if = "Value::is_null")]
    pub config: Value,
}

/// A connection: its config and the names of its secrets, never their values or
/// references.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Connection {
    /// The connection's name.
    pub name: String,
    /// Its type (one of the extension's declared connection types).
    #[serde(rename = "type")]
    pub connection_type: String,
    /// Its config, raw JSON.
    #[serde(default, skip_serializing_if = "Value::is_null")]
    pub config: Value,
    /// The names of its secrets (keys of its secret_refs), for `secret.resolve`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub secrets: Vec<String>,
}

/// A route of a scope.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Route {
    /// The route handler.
    pub handler: String,
    /// The binding it binds.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub binding: String,
    /// The handler's config, raw JSON.
    #[serde(default, skip_serializing_if = "Value::is_null")]
    pub config: Value,
}

/// A binding of a scope, as state reads, checks and runs see it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Binding {
    /// The binding's name.
    pub name: String,
    /// Its executor.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub executor: String,
    /// Its executor's toolbelt capability (`none`, `cli`, `mcp`, `sdk`).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub toolbelt: String,
    /// The operations it grants.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub operations: Vec<String>,
    /// The optional grants a Work may opt into.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub grants: Vec<String>,
    /// The connection it names: what its runs' operations act as (the authority).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub connection: String,
    /// Further connections it names (any type, none repeating `connection`): its
    /// executor may resolve their secrets too (claude-code's `secret_env`), but
    /// operations still act as `connection` alone.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub connections: Vec<String>,
    /// Its resource provider and config, when it has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource: Option<ResourceBinding>,
    /// Its sandbox config, when it has one.
    #[serde(
        default,
        deserialize_with = "present",
        skip_serializing_if = "Option::is_none"
    )]
    pub sandbox: Option<Value>,
    /// Its container config, when it has one.
    #[serde(
        default,
        deserialize_with = "present",
        skip_serializing_if = "Option::is_none"
    )]
    pub container: Option<Value>,
    /// Its executor config (carried for the extension's own executors only).
    #[serde(default, skip_serializing_if = "Value::is_null")]
    pub config: Value,
}

/// A binding's resource: the provider type and its config.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ResourceBinding {
    /// The resource provider type.
    #[serde(rename = "type")]
    pub resource_type: String,
    /// Its config, raw JSON.
    #[serde(default, skip_serializing_if = "Value::is_null")]
    pub config: Value,
}

/// A scope, as `state.scope` and `state.scopes` show it (secret references dropped).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Scope {
    /// The scope ID.
    pub id: String,
    /// True when the scope is configured but disabled.
    #[serde(default, skip_serializing_if = "is_false")]
    pub disabled: bool,
    /// The extension's own entries in it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub entries: Vec<Entry>,
    /// Its routes.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub routes: Vec<Route>,
    /// Its bindings, with their grants.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub bindings: Vec<Binding>,
}

/// The validated authority of a toolbelt call, never its bearer token.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Authority {
    /// The scope of the calling Work.
    pub scope_id: String,
    /// The calling Work.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub work_id: String,
    /// The calling Execution.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub execution_id: String,
    /// The Execution's lease epoch.
    #[serde(default, skip_serializing_if = "is_zero_u64")]
    pub epoch: u64,
    /// The Execution's binding.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub binding: String,
    /// The connection the binding names; empty when it names none.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub connection: String,
}

// ---------------------------------------------------------------------------------------
// Lifecycle
// ---------------------------------------------------------------------------------------

/// The host's name and version, in `initialize`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct HostInfo {
    /// The host's name (`open-conduit`).
    pub name: String,
    /// The host's version.
    pub version: String,
}

/// `initialize` (H→E): the first call; the protocol versions the host speaks and the
/// directories the extension uses.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct InitializeParams {
    /// The protocol versions the host supports.
    pub protocol_versions: Vec<u32>,
    /// The host's name and version.
    pub host: HostInfo,
    /// The extension's private state directory.
    pub state_dir: String,
    /// Each declared executor's runs directory (`<state>/executors/<name>`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub executor_dirs: BTreeMap<String, String>,
    /// Each declared resource type's state directory (`<state>/resources/<type>`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub resource_dirs: BTreeMap<String, String>,
    /// Each declared container provider type's state directory.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub container_dirs: BTreeMap<String, String>,
    /// The host's container label.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub container_host: String,
    /// The config file's directory, against which relative config paths resolve.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub config_dir: String,
    /// The largest message the host reads, when it reads more than the spec's 16 MiB
    /// (an addition: absent means 16 MiB). The extension may answer up to this.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_message_bytes: Option<u64>,
}

impl InitializeParams {
    /// The highest version both `ours` and the host's list contain.
    pub fn pick_version(&self, ours: &[u32]) -> Option<u32> {
        self.protocol_versions
            .iter()
            .copied()
            .filter(|v| ours.contains(v))
            .max()
    }
}

/// Result of `initialize`: the chosen version and the extension's manifest, kept raw (the
/// host parses it and compares it with the file).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct InitializeResult {
    /// The chosen protocol version.
    pub protocol_version: u32,
    /// The manifest, raw JSON.
    pub manifest: Value,
    /// The largest message the extension reads, when it reads more than the spec's
    /// 16 MiB (an addition: absent means 16 MiB). The host then sends it up to this
    /// (at most [`crate::LARGE_MESSAGE_BYTES`]), so a webhook body over about 12 MiB
    /// reaches it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_message_bytes: Option<u64>,
}

/// The extension's KV layout versions, in `configure`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct KvLayout {
    /// The version the host recorded from the last successful configure.
    #[serde(default)]
    pub stored: u32,
    /// The manifest's kv_version.
    #[serde(default)]
    pub declared: u32,
}

impl KvLayout {
    /// True when the extension must migrate its KV before configuring.
    pub fn needs_migration(&self) -> bool {
        self.stored < self.declared
    }
}

/// `configure` (H→E): the current generation's entries, connections and settings; sent
/// after initialize and again on every config apply and tunnel URL change.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ConfigureParams {
    /// The config generation's hash.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub generation: String,
    /// The extension's entries in enabled scopes.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub entries: Vec<Entry>,
    /// The connections the entries name (secret names only).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub connections: Vec<Connection>,
    /// The public URL webhooks arrive at.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub public_url: String,
    /// True for a dry run: start nothing.
    #[serde(default, skip_serializing_if = "is_false")]
    pub dry_run: bool,
    /// The extension's entries in scopes configured but disabled: start nothing for them,
    /// keep what is held for them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub disabled: Vec<Entry>,
    /// The KV layout versions.
    #[serde(default)]
    pub kv: KvLayout,
    /// Every enabled binding whose container provider the extension declares.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub containers: Vec<Binding>,
}

/// An ingress source the extension registers in `configure`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SourceDecl {
    /// The source name: the extension's name or `name/` + suffix.
    pub name: String,
    /// The ingress type (one the manifest declares).
    #[serde(rename = "type", default, skip_serializing_if = "String::is_empty")]
    pub source_type: String,
    /// The scope it feeds.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub scope_id: String,
    /// The entry it belongs to.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub entry: String,
    /// The families its Events belong to.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub families: Vec<String>,
    /// How often to reconcile it, in seconds; 0 never.
    #[serde(default, skip_serializing_if = "is_zero_u64")]
    pub reconcile_interval_s: u64,
}

/// A webhook path the extension registers in `configure`; it covers the paths beneath it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct WebhookPath {
    /// The path (`/schedule/<scope>/<entry>`), under the extension's own name.
    pub path: String,
    /// The source its deliveries feed.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub source: String,
    /// The scope.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub scope_id: String,
    /// The entry.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub entry: String,
}

impl WebhookPath {
    /// True when this path serves `request_path` (itself or a path beneath it).
    pub fn covers(&self, request_path: &str) -> bool {
        let base = self.path.trim_end_matches('/');
        match request_path.strip_prefix(base) {
            Some(rest) => rest.is_empty() || rest.starts_with('/') || base.is_empty(),
            None => false,
        }
    }
}

/// Result of `configure`: the ingress sources and webhook paths the extension registers.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ConfigureResult {
    /// Ingress sources.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sources: Vec<SourceDecl>,
    /// Webhook paths.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub webhooks: Vec<WebhookPath>,
}

/// `shutdown` (H→E): finish or cancel in-flight work and exit; new requests are answered
/// `shutting_down`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShutdownParams {}

/// Result of `shutdown`: an acknowledgement.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShutdownResult {}

// ---------------------------------------------------------------------------------------
// KV
// ---------------------------------------------------------------------------------------

/// `kv.get` (E→H): one key of the extension's namespaces.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct KvGetParams {
    /// The namespace: the extension's name (empty) or `name.` + suffix.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub namespace: String,
    /// The key.
    pub key: String,
}

/// Result of `kv.get`: the value and its version, or neither when the key is absent.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct KvGetResult {
    /// The value (a stored JSON `null` is `Some(Value::Null)`).
    #[serde(
        default,
        deserialize_with = "present",
        skip_serializing_if = "Option::is_none"
    )]
    pub value: Option<Value>,
    /// The value's version (a digest of it); none when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
}

impl KvGetResult {
    /// True when the key holds no value.
    pub fn is_absent(&self) -> bool {
        self.version.is_none()
    }

    /// The precondition that the key is still as read (its version, or absent).
    pub fn check(&self, namespace: &str, key: &str) -> KvCheck {
        KvCheck {
            namespace: namespace.to_string(),
            key: key.to_string(),
            expect: match &self.version {
                Some(v) => KvExpect::Version(v.clone()),
                None => KvExpect::Absent,
            },
        }
    }
}

/// `kv.list` (E→H): one page of a namespace's keys with a prefix, in key order.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct KvListParams {
    /// The namespace: the extension's name (empty) or `name.` + suffix.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub namespace: String,
    /// Only keys with this prefix.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub prefix: String,
    /// The cursor: only keys after this one (the previous page's `next`).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub after: String,
    /// At most this many entries (at most 1000; 0 for the default).
    #[serde(default, skip_serializing_if = "is_zero_u32")]
    pub limit: u32,
}

impl KvListParams {
    /// Checks the limit.
    pub fn validate(&self) -> Result<(), WireError> {
        check_page_limit(self.limit)
    }
}

/// Result of `kv.list`: a page of entries and the cursor of the next, if any.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct KvListResult {
    /// The entries.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub entries: Vec<KvEntry>,
    /// The `after` of the next page; empty at the end.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub next: String,
}

/// `kv.commit` (E→H): one atomic batch of preconditions, puts, deletes and Emissions. A
/// failed check or refused Emission applies nothing (`conflict`, or the refusal's code).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct KvCommitParams {
    /// Preconditions, all of which must hold.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub checks: Vec<KvCheck>,
    /// Writes.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub puts: Vec<KvPut>,
    /// Deletes.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub deletes: Vec<KvDelete>,
    /// Events to accept in the same transaction.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub emissions: Vec<Emission>,
}

/// Result of `kv.commit`: each Emission's outcome, in the order sent.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct KvCommitResult {
    /// One per Emission.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub emissions: Vec<EmissionResult>,
}

// ---------------------------------------------------------------------------------------
// State reads
// ---------------------------------------------------------------------------------------

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

// ---------------------------------------------------------------------------------------
// Derived events and control
// ---------------------------------------------------------------------------------------

/// `event.accept` (E→H): accept a derived Event (its `parent_id` required) with KV checks
/// and records committed atomically with it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct EventAcceptParams {
    /// The Event; `parent_id` is required.
    pub event: Emission,
    /// Preconditions.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub checks: Vec<KvCheck>,
    /// Records written with a newly added Event.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub puts: Vec<KvPut>,
    /// Records deleted with a newly added Event.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub deletes: Vec<KvDelete>,
}

impl EventAcceptParams {
    /// event.accept only derives: checks that a parent is named.
    pub fn validate(&self) -> Result<(), WireError> {
        if self.event.parent_id.is_empty() {
            return Err(WireError::new(
                "event.parent_id",
                "is required: event.accept only derives",
            ));
        }
        Ok(())
    }
}

/// Result of `event.accept`.
pub type EventAcceptResult = EmissionResult;

/// `work.cancel` (E→H): cancel a Work of the extension's own kinds.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkCancelParams {
    /// The Work ID.
    pub work_id: String,
    /// Why, for the operator.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub reason: String,
}

/// Result of `work.cancel`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkCancelResult {
    /// True when this call cancelled it; false when it had already ended.
    #[serde(default, skip_serializing_if = "is_false")]
    pub cancelled: bool,
}

/// `wait.progress` (E→H): the owner's progress line beside a Work's active Wait ("" clears
/// it; the host clips it to one line of 120 bytes).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct WaitProgressParams {
    /// The Work whose active Wait it describes.
    pub work_id: String,
    /// The progress line.
    #[serde(default)]
    pub progress: String,
}

/// Result of `wait.progress`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct WaitProgressResult {}

// ---------------------------------------------------------------------------------------
// Ingress
// ---------------------------------------------------------------------------------------

/// An Event an ingress delivery or observation carries, before acceptance.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct IngressEvent {
    /// The Event type.
    #[serde(rename = "type")]
    pub event_type: String,
    /// The payload.
    #[serde(default)]
    pub payload: Payload,
    /// Correlation keys.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub keys: Vec<String>,
    /// When it happened at the source.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub occurred_at: String,
}

/// A pushed delivery of one registered source: its identity, the raw body as evidence,
/// and the Events it carries.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Delivery {
    /// The source (registered by the last configure).
    pub source: String,
    /// The delivery ID within the source (a redelivery repeats it).
    pub delivery_id: String,
    /// The raw body, base64.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        with = "crate::b64::option"
    )]
    pub body: Option<Vec<u8>>,
    /// The Events.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub events: Vec<IngressEvent>,
}

/// What the host accepted durably for a delivery.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct DeliveryAccepted {
    /// The accepted Events (the earlier ones for a redelivery).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub events: Vec<Event>,
    /// True when this delivery was new; false for a redelivery, which added nothing.
    #[serde(default, skip_serializing_if = "is_false")]
    pub added: bool,
}

/// An HTTP response the host sends for a webhook.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct HttpAnswer {
    /// The status (2xx is sent only after the deliveries are durably accepted).
    pub status: u16,
    /// Response headers.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub headers: BTreeMap<String, String>,
    /// The body, base64.
    #[serde(default, skip_serializing_if = "Vec::is_empty", with = "crate::b64")]
    pub body: Vec<u8>,
}

/// `webhook.handle` (H→E): verify and parse one webhook request under a registered path.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct WebhookHandleParams {
    /// The HTTP method.
    pub method: String,
    /// The request path (under a registered webhook path).
    pub path: String,
    /// The raw query string, without `?`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub query: String,
    /// The request headers, each name with its values in order.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub headers: BTreeMap<String, Vec<String>>,
    /// The raw body, base64.
    #[serde(default, skip_serializing_if = "Vec::is_empty", with = "crate::b64")]
    pub body: Vec<u8>,
    /// The sender's address (`ip:port`) as ingressd saw it; an addition, so an entry can
    /// accept unsigned deliveries from loopback alone.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub remote_addr: String,
}

impl WebhookHandleParams {
    /// The first value of a header, by case-insensitive name.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .and_then(|(_, v)| v.first())
            .map(String::as_str)
    }
}

/// Result of `webhook.handle`: the deliveries to accept durably, then the HTTP answer
/// (which the host replaces with a non-2xx when acceptance fails).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct WebhookHandleResult {
    /// Deliveries to accept before answering.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub deliveries: Vec<Delivery>,
    /// The answer.
    pub response: HttpAnswer,
}

/// `ingress.push` (E→H): push a delivery while serving a host call (`webhook.handle`);
/// answered after durable acceptance.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct IngressPushParams {
    /// The delivery.
    pub delivery: Delivery,
}

/// Result of `ingress.push`.
pub type IngressPushResult = DeliveryAccepted;

/// `ingress.deliver` (E→H): a delivery from the extension's own receiver (Slack Socket
/// Mode); acknowledge upstream only after the answer.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct IngressDeliverParams {
    /// The delivery.
    pub delivery: Delivery,
}

/// Result of `ingress.deliver`.
pub type IngressDeliverResult = DeliveryAccepted;

/// One observed item of a reconcile page: the item's identity and version, and its
/// Events. An item missing from a complete scan is inferred absent.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Observation {
    /// The item's identity within the source.
    pub item: String,
    /// The item's version (a new version means a visible change).
    pub version: String,
    /// The delivery ID of what this observation carries.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub delivery_id: String,
    /// The Events it carries.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub events: Vec<IngressEvent>,
}

/// `ingress.reconcile` (H→E): one page of a source's reconcile scan, under the runtime's
/// page timeout and item and byte limits.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct IngressReconcileParams {
    /// The source.
    pub source: String,
    /// The scan generation.
    #[serde(default, skip_serializing_if = "is_zero_u64")]
    pub generation: u64,
    /// The page cursor (empty for the first page).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub cursor: String,
    /// The checkpoint of the last complete scan.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub checkpoint: String,
    /// At most this many items.
    #[serde(default, skip_serializing_if = "is_zero_u32")]
    pub max_items: u32,
    /// At most this many bytes of items.
    #[serde(default, skip_serializing_if = "is_zero_u64")]
    pub max_bytes: u64,
}

/// Result of `ingress.reconcile`: a page of items, the next cursor, and on the last page
/// `complete` and the new checkpoint.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct IngressReconcileResult {
    /// The observed items.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub items: Vec<Observation>,
    /// The cursor of the next page.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub cursor: String,
    /// The checkpoint to keep once the scan is complete.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub checkpoint: String,
    /// True on the scan's last page.
    #[serde(default, skip_serializing_if = "is_false")]
    pub complete: bool,
}

// ---------------------------------------------------------------------------------------
// Routing
// ---------------------------------------------------------------------------------------

/// `route.match` (H→E): may this route take this Event? Free of side effects, outside any
/// transaction, also for route traces.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RouteMatchParams {
    /// The route handler.
    pub handler: String,
    /// The route.
    pub route: Route,
    /// The scope (id, entries, routes, bindings).
    pub scope: Scope,
    /// The Event.
    pub event: Event,
    /// The Work the Event already reaches, with its current display, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub work: Option<Work>,
}

/// Result of `route.match`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RouteMatchResult {
    /// True when the route takes the Event.
    #[serde(default, skip_serializing_if = "is_false")]
    pub matched: bool,
    /// The correlation keys of the Work it goes to.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub keys: Vec<String>,
    /// The Work kind of Work the match creates.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub kind: String,
    /// Why, for a trace; never changes the decision.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub reason: String,
    /// The Work's display, replacing the current one; none keeps it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub display: Option<WorkDisplay>,
    /// The context of Work the match creates.
    #[serde(
        default,
        deserialize_with = "present",
        skip_serializing_if = "Option::is_none"
    )]
    pub context: Option<Value>,
    /// The binding grants Work the match creates opts into.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub grants: Vec<String>,
    /// Close the open Work the Event reaches, as `completed` or `cancelled` (a merged or
    /// closed pull request), instead of running a turn on it; an Event that reaches no
    /// open Work then creates none. Not the spec's (docs/decisions.md).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub close: String,
}

/// `route.samples` (H→E): named sample Events for a route trace, as of the host's `now`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RouteSamplesParams {
    /// The route handler.
    pub handler: String,
    /// The route.
    pub route: Route,
    /// The scope.
    pub scope: Scope,
    /// The host's clock.
    pub now: String,
}

/// A sample Event for a route trace.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RouteSample {
    /// The sample's ID.
    pub id: String,
    /// Its title.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub title: String,
    /// The hypothetical Event.
    pub event: Event,
}

/// Result of `route.samples`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RouteSamplesResult {
    /// The samples.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub samples: Vec<RouteSample>,
}

// ---------------------------------------------------------------------------------------
// In-transaction methods (pure, deterministic, 250 ms, no callbacks)
// ---------------------------------------------------------------------------------------

/// `recurrence.next` (H→E, in transaction): the next fire time of a recurrence after a
/// fire, and the occurrence's payload.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RecurrenceNextParams {
    /// The recurrence.
    pub recurrence: String,
    /// The scope.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub scope_id: String,
    /// The timer's key.
    pub key: String,
    /// The recurrence's spec, as armed.
    #[serde(default, skip_serializing_if = "Value::is_null")]
    pub spec: Value,
    /// The time that just fired (or, when first armed, the arm time).
    pub after: String,
}

/// Result of `recurrence.next`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RecurrenceNextResult {
    /// The next fire time; empty to stop re-arming.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub next: String,
    /// The payload of the occurrence that fired, if it carries one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub payload: Option<Payload>,
}

/// `work_kind.trigger` (H→E, in transaction): which pending input starts a Work of a kind.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct WorkKindTriggerParams {
    /// The Work kind.
    pub kind: String,
    /// The Work.
    pub work: Work,
    /// Its pending inputs, in acceptance order.
    pub inputs: Vec<Event>,
}

/// Result of `work_kind.trigger`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkKindTriggerResult {
    /// The chosen input's Event ID; empty (or unknown) falls back to the first input.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub event_id: String,
}

/// `dependency.filter` (H→E, in transaction): does this Event satisfy a wait's plan?
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct DependencyFilterParams {
    /// The wait operation that planned the Wait.
    pub operation: String,
    /// The waiting Work.
    pub work_id: String,
    /// The plan the wait operation returned.
    #[serde(default, skip_serializing_if = "Value::is_null")]
    pub plan: Value,
    /// The candidate Event.
    pub event: Event,
}

/// Result of `dependency.filter` (a failure counts as false).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DependencyFilterResult {
    /// True when the Event satisfies the Wait.
    #[serde(default, skip_serializing_if = "is_false")]
    pub matched: bool,
}

/// The identity of an Event accepted in the current transaction.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AcceptedRef {
    /// The Event ID.
    pub id: String,
    /// Its sequence.
    pub sequence: u64,
    /// The root of its causal chain.
    pub root_id: String,
    /// Its causal depth.
    #[serde(default)]
    pub depth: u32,
    /// True when it was newly added.
    #[serde(default, skip_serializing_if = "is_false")]
    pub added: bool,
}

/// `emit.commit` (H→E, in transaction): the records an emit operation commits with the
/// Event the transaction just accepted.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct EmitCommitParams {
    /// The emit operation.
    pub operation: String,
    /// The commit data its `operation.emit` returned.
    #[serde(default, skip_serializing_if = "Value::is_null")]
    pub commit: Value,
    /// The accepted Event.
    pub event: AcceptedRef,
}

/// Result of `emit.commit`: the records, committed with the emission.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct EmitCommitResult {
    /// Writes.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub puts: Vec<KvPut>,
    /// Deletes.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub deletes: Vec<KvDelete>,
}

// ---------------------------------------------------------------------------------------
// Timers
// ---------------------------------------------------------------------------------------

/// `timer.arm` (E→H): arm (or re-arm) a declared recurrence's timer under a key.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct TimerArmParams {
    /// The recurrence (declared by the extension).
    pub recurrence: String,
    /// The configured scope.
    pub scope_id: String,
    /// The key (the host prefixes it with the extension's name).
    pub key: String,
    /// The recurrence's spec, passed back to `recurrence.next`.
    #[serde(default, skip_serializing_if = "Value::is_null")]
    pub spec: Value,
    /// The first fire time; empty asks `recurrence.next` from now.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub at: String,
}

/// Result of `timer.arm`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TimerArmResult {
    /// The timer ID.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub timer_id: String,
    /// When it fires.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub due_at: String,
}

/// `timer.cancel` (E→H): cancel a timer by recurrence, scope and key.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TimerCancelParams {
    /// The recurrence.
    pub recurrence: String,
    /// The scope.
    pub scope_id: String,
    /// The key.
    pub key: String,
}

/// Result of `timer.cancel`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TimerCancelResult {
    /// True when a timer was armed and is now cancelled.
    #[serde(default, skip_serializing_if = "is_false")]
    pub cancelled: bool,
}

// ---------------------------------------------------------------------------------------
// Operations
// ---------------------------------------------------------------------------------------

/// `operation.call` (H→E): a toolbelt call of a handler operation; idempotent on
/// `request_id`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct OperationCallParams {
    /// The operation.
    pub operation: String,
    /// The call's request ID (a retry repeats it); empty for no replay.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub request_id: String,
    /// The validated authority.
    pub authority: Authority,
    /// The input's data.
    #[serde(default, skip_serializing_if = "Value::is_null")]
    pub input: Value,
}

/// Result of `operation.call` (an OperationError crosses as an error with its code).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct OperationCallResult {
    /// The output.
    #[serde(default, skip_serializing_if = "Value::is_null")]
    pub output: Value,
}

/// What a Work waits for: the wire form of extension.WaitRequest.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct WaitRequest {
    /// Correlation keys whose Events wake it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub keys: Vec<String>,
    /// Only Events of these types wake it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub types: Vec<String>,
    /// When it times out; empty for no timeout.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub due_at: String,
    /// What it waits for, in words (clipped to one line of 200 bytes).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub description: String,
    /// The plan `dependency.filter` receives.
    #[serde(default, skip_serializing_if = "Value::is_null")]
    pub plan: Value,
}

impl WaitRequest {
    /// The description as the toolbelt stores it: its first line within 200 bytes.
    pub fn clipped_description(&self) -> String {
        clip_line(&self.description, MAX_WAIT_DESCRIPTION_BYTES)
    }
}

/// `operation.wait` (H→E): plan a wait operation's Wait.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct OperationWaitParams {
    /// The wait operation.
    pub operation: String,
    /// The call's request ID.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub request_id: String,
    /// The validated authority.
    pub authority: Authority,
    /// The input's data.
    #[serde(default, skip_serializing_if = "Value::is_null")]
    pub input: Value,
}

/// Result of `operation.wait`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct OperationWaitResult {
    /// The Wait to declare.
    pub wait: WaitRequest,
}

/// `operation.emit` (H→E): plan an emit operation's Event.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct OperationEmitParams {
    /// The emit operation.
    pub operation: String,
    /// The call's request ID.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub request_id: String,
    /// The validated authority.
    pub authority: Authority,
    /// The input's data.
    #[serde(default, skip_serializing_if = "Value::is_null")]
    pub input: Value,
}

/// Result of `operation.emit`: the Event to accept and, for an operation that commits,
/// the data `emit.commit` receives in the emission transaction.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct OperationEmitResult {
    /// The Event to accept (derived from the calling Work's input).
    pub event: Emission,
    /// The commit data; present only for an operation declared to commit.
    #[serde(
        default,
        deserialize_with = "present",
        skip_serializing_if = "Option::is_none"
    )]
    pub commit: Option<Value>,
    /// The output returned to the caller.
    #[serde(default, skip_serializing_if = "Value::is_null")]
    pub output: Value,
}

// ---------------------------------------------------------------------------------------
// Executors
// ---------------------------------------------------------------------------------------

/// The per-execution toolbelt a run reaches the host through.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Toolbelt {
    /// The endpoint (a unix socket path).
    pub endpoint: String,
    /// The per-execution bearer token.
    pub token: String,
    /// The host's toolbelt directory.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub dir: String,
}

/// A run's request (extension.RunRequest / ExecutionContext).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RunRequest {
    /// The executor.
    pub executor: String,
    /// The Execution ID (unguessable, host-assigned).
    pub execution_id: String,
    /// The lease epoch.
    pub epoch: u64,
    /// The attempt number.
    #[serde(default, skip_serializing_if = "is_zero_u32")]
    pub attempt: u32,
    /// The Work.
    pub work: Work,
    /// The binding.
    pub binding: Binding,
    /// The binding's executor config.
    #[serde(default, skip_serializing_if = "Value::is_null")]
    pub config: Value,
    /// The inputs, in acceptance order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub inputs: Vec<Event>,
    /// The toolbelt endpoint and token.
    pub toolbelt: Toolbelt,
    /// The environment layers merged for the run.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<String, String>,
    /// The network hosts the run layer needs (`run.environment`'s `hosts`), for a
    /// sandboxed run's network needs.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub hosts: Vec<String>,
    /// The daemon's values of the variables the binding's pass_env names, those set.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub host_env: BTreeMap<String, String>,
    /// The acquired workspace, if the binding has a resource.
    #[serde(
        default,
        deserialize_with = "present",
        skip_serializing_if = "Option::is_none"
    )]
    pub workspace: Option<Value>,
    /// The playbook directory the host names for the run.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub playbook_dir: String,
    /// True for a dry run.
    #[serde(default, skip_serializing_if = "is_false")]
    pub dry_run: bool,
}

/// `executor.run` (H→E): start a run; its result comes from `executor.wait`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ExecutorRunParams {
    /// The run.
    pub run: RunRequest,
}

/// Result of `executor.run`: the run started.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExecutorRunResult {}

/// `executor.recover` (H→E): adopt a run after a restart from its recovery metadata, at a
/// higher epoch; never launches (not_adoptable otherwise).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ExecutorRecoverParams {
    /// The run, at its new epoch.
    pub run: RunRequest,
    /// The last recovery metadata persisted for it.
    pub recovery: Payload,
}

/// Result of `executor.recover`: adopted.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExecutorRecoverResult {}

/// How a run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// Completed the Work.
    Completed,
    /// Failed; the retry policy applies.
    Failed,
    /// Parked on a Wait.
    Waiting,
    /// Keeps the Work open for its next input.
    Handoff,
}

/// A retry hint of a failed result (retry_after).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RetryHint {
    /// When to retry; empty when unknown.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub reset_at: String,
}

/// A run's usage.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Usage {
    /// Input tokens.
    #[serde(default, skip_serializing_if = "is_zero_u64")]
    pub input_tokens: u64,
    /// Output tokens.
    #[serde(default, skip_serializing_if = "is_zero_u64")]
    pub output_tokens: u64,
    /// Cache-read tokens.
    #[serde(default, skip_serializing_if = "is_zero_u64")]
    pub cached_tokens: u64,
    /// Cache-creation tokens.
    #[serde(default, skip_serializing_if = "is_zero_u64")]
    pub cache_creation_tokens: u64,
    /// Cost in USD; absent when the executor cannot know it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost_usd: Option<f64>,
}

/// `executor.wait` (H→E): observe a run until it ends; cancelling it cancels the
/// observation only.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExecutorWaitParams {
    /// The executor.
    pub executor: String,
    /// The Execution.
    pub execution_id: String,
}

/// Result of `executor.wait`: the run's result (extension.Result).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ExecutorWaitResult {
    /// How it ended.
    pub outcome: Outcome,
    /// The outcome data.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<Payload>,
    /// A one-line summary.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub summary: String,
    /// The reason of a failure.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub error: String,
    /// The Wait of a waiting outcome.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wait: Option<WaitRequest>,
    /// Inputs consumed with the run (echoed injections).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub consumed_inputs: Vec<String>,
    /// A failed result's retry hint.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_hint: Option<RetryHint>,
    /// Usage.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<Usage>,
    /// Artifacts the run produced.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub artifacts: Vec<String>,
}

impl ExecutorWaitResult {
    /// A result with only an outcome.
    pub fn new(outcome: Outcome) -> Self {
        ExecutorWaitResult {
            outcome,
            data: None,
            summary: String::new(),
            error: String::new(),
            wait: None,
            consumed_inputs: Vec::new(),
            retry_hint: None,
            usage: None,
            artifacts: Vec::new(),
        }
    }

    /// Checks that a retry hint rides only on a failed result.
    pub fn validate(&self) -> Result<(), WireError> {
        if self.retry_hint.is_some() && self.outcome != Outcome::Failed {
            return Err(WireError::new(
                "retry_hint",
                "only a failed result carries a retry hint",
            ));
        }
        Ok(())
    }
}

/// `executor.resume` (H→E): wake a waiting run as a new segment of the same attempt.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ExecutorResumeParams {
    /// The executor.
    pub executor: String,
    /// The Execution.
    pub execution_id: String,
    /// The lease epoch.
    pub epoch: u64,
    /// The inputs that woke it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub inputs: Vec<Event>,
    /// The toolbelt for the new segment.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub toolbelt: Option<Toolbelt>,
}

/// Result of `executor.resume`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExecutorResumeResult {}

/// `executor.interrupt` (H→E): signal a running run to stop its turn.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExecutorInterruptParams {
    /// The executor.
    pub executor: String,
    /// The Execution.
    pub execution_id: String,
    /// The lease epoch.
    pub epoch: u64,
    /// Why, for the record.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub reason: String,
}

/// Result of `executor.interrupt`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExecutorInterruptResult {}

/// `executor.inject` (H→E): deliver an input to a running run (not_accepting otherwise).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ExecutorInjectParams {
    /// The executor.
    pub executor: String,
    /// The Execution.
    pub execution_id: String,
    /// The lease epoch.
    pub epoch: u64,
    /// The input.
    pub event: Event,
}

/// Result of `executor.inject`: accepted for delivery.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExecutorInjectResult {}

/// `executor.forget` (H→E): drop what the executor keeps for a Work.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExecutorForgetParams {
    /// The executor.
    pub executor: String,
    /// The Work.
    pub work_id: String,
    /// The Execution, when one run is forgotten.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub execution_id: String,
}

/// Result of `executor.forget`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExecutorForgetResult {}

/// `executor.stop` (H→E): stop a run's processes and answer physical-stop evidence.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExecutorStopParams {
    /// The executor.
    pub executor: String,
    /// The Execution.
    pub execution_id: String,
    /// The lease epoch.
    pub epoch: u64,
}

/// Result of `executor.stop`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExecutorStopResult {
    /// True when no process of the run is left.
    #[serde(default, skip_serializing_if = "is_false")]
    pub stopped: bool,
    /// The evidence, for the record.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub detail: String,
}

/// `executor.attach` (H→E): the operator's command to attach to a Work's session
/// (nothing_to_attach otherwise).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ExecutorAttachParams {
    /// The executor.
    pub executor: String,
    /// The Work.
    pub work_id: String,
    /// The binding's executor config.
    #[serde(default, skip_serializing_if = "Value::is_null")]
    pub config: Value,
    /// The Work's workspace, if any.
    #[serde(
        default,
        deserialize_with = "present",
        skip_serializing_if = "Option::is_none"
    )]
    pub workspace: Option<Value>,
}

/// Result of `executor.attach` (extension.AttachSpec).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExecutorAttachResult {
    /// The command.
    pub argv: Vec<String>,
    /// Its working directory.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub dir: String,
    /// Variables to set.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<String, String>,
}

/// `executor.live` (H→E): a running attempt's output so far (not_live otherwise).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExecutorLiveParams {
    /// The executor.
    pub executor: String,
    /// The Execution.
    pub execution_id: String,
    /// How many trailing bytes of each output.
    #[serde(default, skip_serializing_if = "is_zero_u64")]
    pub tail: u64,
}

/// One output of a live run.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LiveOutput {
    /// Its name.
    pub name: String,
    /// Its media type.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub media_type: String,
    /// Its size so far.
    #[serde(default)]
    pub size: u64,
    /// Its last bytes, base64.
    #[serde(default, skip_serializing_if = "Vec::is_empty", with = "crate::b64")]
    pub tail: Vec<u8>,
}

/// Result of `executor.live`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExecutorLiveResult {
    /// The outputs.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub outputs: Vec<LiveOutput>,
}

/// `execution.persist_recovery` (E→H): persist a run's recovery metadata, fenced by epoch.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ExecutionPersistRecoveryParams {
    /// The Execution.
    pub execution_id: String,
    /// The lease epoch (a superseded one is refused, conflict).
    pub epoch: u64,
    /// The metadata.
    pub recovery: Payload,
}

/// Result of `execution.persist_recovery`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExecutionPersistRecoveryResult {}

// ---------------------------------------------------------------------------------------
// Artifacts
// ---------------------------------------------------------------------------------------

/// `artifact.create` (E→H): open an artifact of a run for chunked writing.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ArtifactCreateParams {
    /// The Execution it belongs to.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub execution_id: String,
    /// Its name (`transcript`, `log`).
    pub name: String,
    /// Its media type.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub media_type: String,
    /// The most bytes it may hold; 0 for the host's default.
    #[serde(default, skip_serializing_if = "is_zero_u64")]
    pub max_bytes: u64,
}

/// Result of `artifact.create`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ArtifactCreateResult {
    /// The artifact ID.
    pub artifact_id: String,
}

/// `artifact.write` (E→H): one chunk, of at most [`MAX_CHUNK_BYTES`], at an offset; each
/// is acknowledged before the next.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ArtifactWriteParams {
    /// The artifact.
    pub artifact_id: String,
    /// The offset of this chunk (the bytes written so far).
    #[serde(default)]
    pub offset: u64,
    /// The bytes, base64.
    #[serde(with = "crate::b64")]
    pub data: Vec<u8>,
}

impl ArtifactWriteParams {
    /// Checks the chunk size.
    pub fn validate(&self) -> Result<(), WireError> {
        if self.data.len() > MAX_CHUNK_BYTES {
            return Err(WireError::new(
                "data",
                format!(
                    "{} bytes, over the chunk limit of {MAX_CHUNK_BYTES} bytes",
                    self.data.len()
                ),
            ));
        }
        Ok(())
    }
}

/// Result of `artifact.write`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ArtifactWriteResult {
    /// The artifact's size after the chunk.
    pub size: u64,
}

/// `artifact.commit` (E→H): make a written artifact durable and visible.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ArtifactCommitParams {
    /// The artifact.
    pub artifact_id: String,
    /// The total size the writer expects (refused when it differs); 0 skips the check.
    #[serde(default, skip_serializing_if = "is_zero_u64")]
    pub size: u64,
}

/// Result of `artifact.commit`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ArtifactCommitResult {
    /// The artifact.
    pub artifact_id: String,
    /// Its size.
    pub size: u64,
    /// Its digest (`sha256:<hex>`).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub digest: String,
}

/// `artifact.abort` (E→H): discard an open artifact.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ArtifactAbortParams {
    /// The artifact.
    pub artifact_id: String,
}

/// Result of `artifact.abort`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ArtifactAbortResult {}

// ---------------------------------------------------------------------------------------
// Secrets, tasks, checks
// ---------------------------------------------------------------------------------------

/// `secret.resolve` (E→H): resolve a connection's secrets by name, in a configured scope
/// (current generation).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SecretResolveParams {
    /// The scope.
    pub scope_id: String,
    /// The connection.
    pub connection: String,
    /// The secret names.
    pub names: Vec<String>,
}

/// Result of `secret.resolve`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SecretResolveResult {
    /// Each name's value.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub values: BTreeMap<String, String>,
}

/// `task.run` (H→E): one pass of a declared background task.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskRunParams {
    /// The task.
    pub task: String,
    /// The host's clock.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub now: String,
}

/// Result of `task.run`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskRunResult {
    /// What the pass did, for the log.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub detail: String,
}

/// A scope in a check's configuration view.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct CheckScope {
    /// The scope ID.
    pub id: String,
    /// Its routes.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub routes: Vec<Route>,
    /// Its bindings (with the executor config for the extension's own executors).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub bindings: Vec<Binding>,
    /// The extension's own entries.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub entries: Vec<Entry>,
}

/// The tunnel in a check's configuration view.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct CheckTunnel {
    /// The tunnel type.
    #[serde(rename = "type")]
    pub tunnel_type: String,
    /// Its config as written.
    #[serde(default, skip_serializing_if = "Value::is_null")]
    pub config: Value,
}

/// The read-only configuration view a check receives (protocol.CheckConfig): never secret
/// values or reference text.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct CheckConfig {
    /// The config file's directory.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub dir: String,
    /// Each enabled scope that uses the extension.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub scopes: Vec<CheckScope>,
    /// The connections of the extension's types those name, config only.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub connections: Vec<Connection>,
    /// The tunnel, when its type is the extension's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tunnel: Option<CheckTunnel>,
}

/// `check.run` (H→E): one doctor check.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct CheckRunParams {
    /// The check's name.
    pub check: String,
    /// True for a deep check (may use secrets).
    #[serde(default, skip_serializing_if = "is_false")]
    pub deep: bool,
    /// The configuration view.
    #[serde(default)]
    pub config: CheckConfig,
}

/// A check status.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CheckStatus {
    /// Fine.
    Ok,
    /// Worth knowing.
    Info,
    /// Worth fixing.
    Warn,
    /// Broken.
    Fail,
}

impl CheckStatus {
    /// Parses a wire status.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "ok" => Some(CheckStatus::Ok),
            "info" => Some(CheckStatus::Info),
            "warn" => Some(CheckStatus::Warn),
            "fail" => Some(CheckStatus::Fail),
            _ => None,
        }
    }
}

/// Result of `check.run`: `{ok, detail}`, or with `status` a full check.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CheckRunResult {
    /// The short form's verdict.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ok: Option<bool>,
    /// The full form's status (`ok`, `info`, `warn`, `fail`), kept as text so an unknown
    /// one can be reported.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub status: String,
    /// A stable code.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub code: String,
    /// The detail.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub detail: String,
    /// Items.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub items: Vec<String>,
}

impl CheckRunResult {
    /// The status doctor shows, and the code it records when the extension gave none
    /// valid: without status, ok gives ok and its absence warn with
    /// `extension_check_failed`; an unknown status is warn with `extension_check_invalid`.
    pub fn effective(&self) -> (CheckStatus, String) {
        if self.status.is_empty() {
            return if self.ok == Some(true) {
                (CheckStatus::Ok, self.code.clone())
            } else {
                (CheckStatus::Warn, "extension_check_failed".to_string())
            };
        }
        match CheckStatus::parse(&self.status) {
            Some(status) => (status, self.code.clone()),
            None => (CheckStatus::Warn, "extension_check_invalid".to_string()),
        }
    }
}

// ---------------------------------------------------------------------------------------
// Validation
// ---------------------------------------------------------------------------------------

/// The kinds `validate` is asked about.
pub mod validate_kind {
    /// A connection's config.
    pub const CONNECTION: &str = "connection";
    /// An extension entry's config.
    pub const EXTENSION: &str = "extension";
    /// A route handler's config.
    pub const ROUTE: &str = "route";
    /// A resource config.
    pub const RESOURCE: &str = "resource";
    /// A binding's executor config (may answer warnings).
    pub const EXECUTOR: &str = "executor";
    /// A route's binding, for a handler declared with routes[].binding.
    pub const BINDING: &str = "binding";
    /// A binding's sandbox config.
    pub const SANDBOX: &str = "sandbox";
    /// A binding's container config.
    pub const CONTAINER: &str = "container";
    /// A tunnel config.
    pub const TUNNEL: &str = "tunnel";
    /// The mode a resource config writes (answered `mode`).
    pub const RESOURCE_MODE: &str = "resource_mode";
    /// Whether a resource works in a sandbox or container under a mode.
    pub const RESOURCE_SANDBOX: &str = "resource_sandbox";
    /// The mode an executor config requests (answered `mode`).
    pub const EXECUTOR_MODE: &str = "executor_mode";
    /// The playbook an executor config starts turns on (answered `playbook`).
    pub const EXECUTOR_PLAYBOOK: &str = "executor_playbook";
    /// An executor config adapted to an included folder (answered `config`).
    pub const EXECUTOR_FOLDER: &str = "executor_folder";
    /// The connection secrets an executor config resolves (answered `secrets`), which
    /// config check holds against the binding's connections and their types' declared
    /// secret fields.
    pub const EXECUTOR_SECRETS: &str = "executor_secrets";
    /// Every kind.
    pub const ALL: &[&str] = &[
        CONNECTION,
        EXTENSION,
        ROUTE,
        RESOURCE,
        EXECUTOR,
        BINDING,
        SANDBOX,
        CONTAINER,
        TUNNEL,
        RESOURCE_MODE,
        RESOURCE_SANDBOX,
        EXECUTOR_MODE,
        EXECUTOR_PLAYBOOK,
        EXECUTOR_FOLDER,
        EXECUTOR_SECRETS,
    ];
}

/// `validate` (H→E): check a config object of one of the extension's types; a refusal is
/// an `invalid` error, diagnostics a finer answer.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ValidateParams {
    /// What is validated ([`validate_kind`]).
    pub kind: String,
    /// The type (connection, entry, handler, executor, resource, sandbox, container or
    /// tunnel type).
    #[serde(rename = "type")]
    pub type_name: String,
    /// The object's name, for messages.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub name: String,
    /// The config, raw JSON.
    #[serde(default, skip_serializing_if = "Value::is_null")]
    pub config: Value,
    /// The binding, for kind `binding`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub binding: Option<Binding>,
    /// The mode the executor requests, for kind `resource_sandbox`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub mode: String,
    /// The included folder, for kind `executor_folder`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub folder: String,
    /// Whether the binding has a resource, for kind `executor_folder`.
    #[serde(default, skip_serializing_if = "is_false")]
    pub resource: bool,
}

/// One validation finding.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Diagnostic {
    /// A stable code.
    pub code: String,
    /// The message.
    pub message: String,
    /// A JSON pointer into the config.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub path: String,
}

/// Result of `validate`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ValidateResult {
    /// Findings; none means valid.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub diagnostics: Vec<Diagnostic>,
    /// What a valid object sets up, one line each, for the config view.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub describe: Vec<String>,
    /// The mode, for kinds `resource_mode` and `executor_mode` (empty for none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<String>,
    /// The playbook, for kind `executor_playbook` (empty for none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub playbook: Option<String>,
    /// The adapted config, for kind `executor_folder`.
    #[serde(
        default,
        deserialize_with = "present",
        skip_serializing_if = "Option::is_none"
    )]
    pub config: Option<Value>,
    /// Warnings about a valid executor config.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
    /// The connection secrets the config resolves, for kind `executor_secrets`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub secrets: Vec<SecretUse>,
}

/// One connection secret an executor config resolves (`validate` kind
/// `executor_secrets`): where the config names it, the connection (empty for the
/// binding's own `connection`) and the secret's name.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SecretUse {
    /// A JSON pointer into the executor config.
    pub path: String,
    /// The connection, one the binding names; empty for the binding's `connection`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub connection: String,
    /// The secret's name (a key of the connection's `secret_refs`).
    pub secret: String,
}

// ---------------------------------------------------------------------------------------
// Workspaces: resource providers
// ---------------------------------------------------------------------------------------

/// The status a host answers for an owner in `provider.owner_status`.
pub mod owner_status {
    /// The owner (a Work) is still open: its workspace is in use.
    pub const OPEN: &str = "open";
    /// The owner is closed: its workspace is spare.
    pub const CLOSED: &str = "closed";
    /// The host does not know the owner: a provider keeps its workspace.
    pub const UNKNOWN: &str = "unknown";
}

/// `provider.acquire` (H→E): the workspace of `owner` in `mode`, made when it does not
/// exist yet. Idempotent per owner and mode: a second acquisition answers the same
/// workspace (the same `ref` and `dir`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ProviderAcquireParams {
    /// The resource type (`git`).
    #[serde(rename = "type")]
    pub resource_type: String,
    /// The lease's owner: the Work the workspace is for.
    pub owner: String,
    /// The mode the executor requests (`shared`, `work`, `fresh`); empty for the
    /// resource config's own default.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub mode: String,
    /// The executor's request parameters (`{"branch": "fix-12"}`).
    #[serde(default, skip_serializing_if = "Value::is_null")]
    pub params: Value,
    /// The binding's resource config, raw JSON.
    #[serde(default, skip_serializing_if = "Value::is_null")]
    pub config: Value,
    /// The scope of the binding (names a `shared` checkout with `binding`).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub scope_id: String,
    /// The binding (names a `shared` checkout with `scope_id`).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub binding: String,
    /// The host's values of the variables the resource's own `pass_env` names
    /// (ResourceAcquisition.HostEnv): the only daemon variables the provider adds to its
    /// sanitized environment.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub host_env: BTreeMap<String, String>,
}

/// A workspace a provider answers (`provider.acquire`, `provider.lookup`,
/// `provider.reconcile`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ProvidedResource {
    /// The lease reference: stable for the owner and mode, quoted by `provider.lookup`.
    #[serde(rename = "ref")]
    pub reference: String,
    /// The owner it was acquired for.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub owner: String,
    /// The mode it was made in.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub mode: String,
    /// The directory the executor runs in (absolute).
    pub dir: String,
    /// The provider's environment layer for runs in it.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<String, String>,
    /// What the provider says about it, for the operator (`branch`, `head`,
    /// `repository`).
    #[serde(default, skip_serializing_if = "Value::is_null")]
    pub data: Value,
}

/// Result of `provider.acquire`.
pub type ProviderAcquireResult = ProvidedResource;

/// `provider.lookup` (H→E): the workspace a lease reference names. Never creates
/// anything: a reference with no complete workspace is `resource_not_found`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ProviderLookupParams {
    /// The resource type.
    #[serde(rename = "type")]
    pub resource_type: String,
    /// The lease reference from the acquisition.
    #[serde(rename = "ref")]
    pub reference: String,
    /// The binding's resource config, raw JSON (for its environment layer).
    #[serde(default, skip_serializing_if = "Value::is_null")]
    pub config: Value,
}

/// Result of `provider.lookup`.
pub type ProviderLookupResult = ProvidedResource;

/// `resource.acquire` (E→H): an executor asks for its run's workspace, only through a
/// run the host opened for this process. The host calls `provider.acquire` on the
/// provider of the binding's resource (the Work as owner) and records the lease.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ResourceAcquireParams {
    /// The run's Execution.
    pub execution_id: String,
    /// The run's lease epoch (a superseded one is refused, conflict).
    #[serde(default, skip_serializing_if = "is_zero_u64")]
    pub epoch: u64,
    /// The mode requested (`shared`, `work`, `fresh`/`clone`); empty for the resource
    /// config's own default.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub mode: String,
    /// The request's parameters (`{"branch": "fix-12"}`).
    #[serde(default, skip_serializing_if = "Value::is_null")]
    pub params: Value,
}

/// Result of `resource.acquire`: the workspace.
pub type ResourceAcquireResult = ProvidedResource;

/// `resource.lookup` (E→H): the workspace a lease reference names, for a resumed
/// segment. Never creates anything.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ResourceLookupParams {
    /// The run's Execution.
    pub execution_id: String,
    /// The run's lease epoch.
    #[serde(default, skip_serializing_if = "is_zero_u64")]
    pub epoch: u64,
    /// The lease reference from the acquisition.
    #[serde(rename = "ref")]
    pub reference: String,
}

/// Result of `resource.lookup`.
pub type ResourceLookupResult = ProvidedResource;

/// A workspace a reconcile or sweep removed or kept, and why.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ResourceNote {
    /// The lease reference.
    #[serde(rename = "ref")]
    pub reference: String,
    /// Its owner, when known.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub owner: String,
    /// Its directory.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub dir: String,
    /// Why it was removed or kept.
    pub reason: String,
}

/// `provider.reconcile` (H→E): after a crash or a restart, repair what an interrupted
/// acquisition left (a half-made worktree is removed, so the next acquisition makes it
/// whole) and answer every complete workspace, for the host to compare with its leases.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ProviderReconcileParams {
    /// The resource type.
    #[serde(rename = "type")]
    pub resource_type: String,
    /// The pass's ID, quoted in `provider.owner_status`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub pass_id: String,
}

/// Result of `provider.reconcile`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ProviderReconcileResult {
    /// Every complete workspace.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub resources: Vec<ProvidedResource>,
    /// What was half-made and removed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub removed: Vec<ResourceNote>,
}

/// `provider.sweep` (H→E, with manifest `resources[].sweep`): remove the workspaces of
/// owners the host reports closed (asked through `provider.owner_status`), keep and report
/// any with uncommitted changes, and prune the provider's caches.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ProviderSweepParams {
    /// The resource type.
    #[serde(rename = "type")]
    pub resource_type: String,
    /// The pass's ID, quoted in `provider.owner_status`.
    pub pass_id: String,
    /// How long an owner must have been closed before its workspace goes, in seconds.
    #[serde(default, skip_serializing_if = "is_zero_u64")]
    pub grace_s: u64,
    /// Remove a closed owner's workspace even with uncommitted changes.
    #[serde(default, skip_serializing_if = "is_false")]
    pub remove_dirty: bool,
}

/// Result of `provider.sweep`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ProviderSweepResult {
    /// The workspaces removed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub removed: Vec<ResourceNote>,
    /// The spare workspaces kept, and why (uncommitted changes, within the grace).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub kept: Vec<ResourceNote>,
    /// What was pruned (one line per cache).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pruned: Vec<String>,
}

/// `provider.owner_status` (E→H): during a reconcile or sweep pass, whether each owner
/// is still open.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProviderOwnerStatusParams {
    /// The pass's ID, from `provider.reconcile` or `provider.sweep`.
    pub pass_id: String,
    /// The owners asked about (at most [`MAX_PAGE_LIMIT`] per call).
    pub owners: Vec<String>,
}

/// One owner's status in `provider.owner_status`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct OwnerStatus {
    /// The owner.
    pub owner: String,
    /// [`owner_status`]: `open`, `closed` or `unknown`.
    pub status: String,
    /// When it closed (RFC 3339), for a closed owner.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub closed_at: String,
}

/// Result of `provider.owner_status`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProviderOwnerStatusResult {
    /// One status per owner asked about.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub owners: Vec<OwnerStatus>,
}

// ---------------------------------------------------------------------------------------
// Tunnels
// ---------------------------------------------------------------------------------------

/// `tunnel.run` (H→E): keep the webhook listener exposed until cancelled, publishing each
/// public URL through `tunnel.url`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct TunnelRunParams {
    /// The tunnel type.
    #[serde(rename = "type")]
    pub tunnel_type: String,
    /// The listener's address, the only one to forward to.
    pub addr: String,
    /// The operator's tunnel config as written (`{}` when none).
    #[serde(default)]
    pub config: Value,
    /// The run ID, quoted by `tunnel.url`.
    pub run_id: String,
}

/// Result of `tunnel.run`, once the tunnel has stopped.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TunnelRunResult {}

/// `tunnel.url` (E→H): the run's public URL changed (`""` while down).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TunnelUrlParams {
    /// The run ID.
    pub run_id: String,
    /// The public URL.
    #[serde(default)]
    pub url: String,
}

/// Result of `tunnel.url`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TunnelUrlResult {}

// ---------------------------------------------------------------------------------------
// Method names
// ---------------------------------------------------------------------------------------

macro_rules! calls {
    ($($params:ty => $result:ty : $method:literal;)*) => {
        $(
            impl Call for $params {
                const METHOD: &'static str = $method;
                type Result = $result;
            }
        )*
        /// Every method this module types, in catalogue order.
        pub const TYPED_METHODS: &[&str] = &[$($method),*];
    };
}

calls! {
    InitializeParams => InitializeResult: "initialize";
    ConfigureParams => ConfigureResult: "configure";
    ShutdownParams => ShutdownResult: "shutdown";
    KvGetParams => KvGetResult: "kv.get";
    KvListParams => KvListResult: "kv.list";
    KvCommitParams => KvCommitResult: "kv.commit";
    StateWorkParams => StateWorkResult: "state.work";
    StateWorksParams => StateWorksResult: "state.works";
    StateExecutionsParams => StateExecutionsResult: "state.executions";
    StateWaitsParams => StateWaitsResult: "state.waits";
    StateEventParams => StateEventResult: "state.event";
    StateEventsParams => StateEventsResult: "state.events";
    StateWorkEventsParams => StateWorkEventsResult: "state.work_events";
    StateSequenceParams => StateSequenceResult: "state.sequence";
    StateScopesParams => StateScopesResult: "state.scopes";
    StateScopeParams => StateScopeResult: "state.scope";
    StateTimersParams => StateTimersResult: "state.timers";
    EventAcceptParams => EventAcceptResult: "event.accept";
    WorkCancelParams => WorkCancelResult: "work.cancel";
    WaitProgressParams => WaitProgressResult: "wait.progress";
    WebhookHandleParams => WebhookHandleResult: "webhook.handle";
    IngressPushParams => IngressPushResult: "ingress.push";
    IngressDeliverParams => IngressDeliverResult: "ingress.deliver";
    IngressReconcileParams => IngressReconcileResult: "ingress.reconcile";
    RouteMatchParams => RouteMatchResult: "route.match";
    RouteSamplesParams => RouteSamplesResult: "route.samples";
    RecurrenceNextParams => RecurrenceNextResult: "recurrence.next";
    WorkKindTriggerParams => WorkKindTriggerResult: "work_kind.trigger";
    DependencyFilterParams => DependencyFilterResult: "dependency.filter";
    EventRenderParams => EventRenderResult: "event.render";
    EventRenderOwnedParams => EventRenderOwnedResult: "event.render_owned";
    RunEnvironmentParams => RunEnvironmentResult: "run.environment";
    RunCredentialParams => RunCredentialResult: "run.credential";
    SegmentEndedParams => SegmentEndedResult: "segment.ended";
    WorkAnnotateParams => WorkAnnotateResult: "work.annotate";
    ScopeAuthorizeParams => ScopeAuthorizeResult: "scope.authorize";
    ActionSubmitParams => ActionSubmitResult: "action.submit";
    EmitCommitParams => EmitCommitResult: "emit.commit";
    TimerArmParams => TimerArmResult: "timer.arm";
    TimerCancelParams => TimerCancelResult: "timer.cancel";
    OperationCallParams => OperationCallResult: "operation.call";
    OperationWaitParams => OperationWaitResult: "operation.wait";
    OperationEmitParams => OperationEmitResult: "operation.emit";
    ExecutorRunParams => ExecutorRunResult: "executor.run";
    ExecutorRecoverParams => ExecutorRecoverResult: "executor.recover";
    ExecutorWaitParams => ExecutorWaitResult: "executor.wait";
    ExecutorResumeParams => ExecutorResumeResult: "executor.resume";
    ExecutorInterruptParams => ExecutorInterruptResult: "executor.interrupt";
    ExecutorInjectParams => ExecutorInjectResult: "executor.inject";
    ExecutorForgetParams => ExecutorForgetResult: "executor.forget";
    ExecutorStopParams => ExecutorStopResult: "executor.stop";
    ExecutorAttachParams => ExecutorAttachResult: "executor.attach";
    ExecutorLiveParams => ExecutorLiveResult: "executor.live";
    ExecutionPersistRecoveryParams => ExecutionPersistRecoveryResult: "execution.persist_recovery";
    ArtifactCreateParams => ArtifactCreateResult: "artifact.create";
    ArtifactWriteParams => ArtifactWriteResult: "artifact.write";
    ArtifactCommitParams => ArtifactCommitResult: "artifact.commit";
    ArtifactAbortParams => ArtifactAbortResult: "artifact.abort";
    SecretResolveParams => SecretResolveResult: "secret.resolve";
    TaskRunParams => TaskRunResult: "task.run";
    CheckRunParams => CheckRunResult: "check.run";
    ValidateParams => ValidateResult: "validate";
    ResourceAcquireParams => ResourceAcquireResult: "resource.acquire";
    ResourceLookupParams => ResourceLookupResult: "resource.lookup";
    ProviderAcquireParams => ProviderAcquireResult: "provider.acquire";
    ProviderLookupParams => ProviderLookupResult: "provider.lookup";
    ProviderReconcileParams => ProviderReconcileResult: "provider.reconcile";
    ProviderSweepParams => ProviderSweepResult: "provider.sweep";
    ProviderOwnerStatusParams => ProviderOwnerStatusResult: "provider.owner_status";
    TunnelRunParams => TunnelRunResult: "tunnel.run";
    TunnelUrlParams => TunnelUrlResult: "tunnel.url";
}

/// The four in-transaction methods (bounded, pure, no callbacks while one is served).
pub const IN_TRANSACTION_METHODS: &[&str] = &[
    RecurrenceNextParams::METHOD,
    WorkKindTriggerParams::METHOD,
    DependencyFilterParams::METHOD,
    EmitCommitParams::METHOD,
];
