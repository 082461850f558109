//! Shared types: Work (and its display), executions, waits, timers, connections,
//! routes, bindings, scopes and the authority a call carries.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::{
    is_false, is_zero_u32, is_zero_u64, present, WireError, MAX_DISPLAY_LINKS,
    MAX_DISPLAY_LINK_LABEL_BYTES, MAX_DISPLAY_REF_BYTES, MAX_DISPLAY_REQUESTER_BYTES,
    MAX_DISPLAY_TITLE_BYTES, MAX_DISPLAY_URL_BYTES,
};

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
    /// The hold its start waits on (an admission), while it has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hold: Option<super::WorkHold>,
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
            hold: serde_json::from_value(w["hold"].clone()).ok(),
            created_at: text("created_at"),
            updated_at: text("updated_at"),
        }
    }
}

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
    /// The Event types that wake it (none: any).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub types: Vec<String>,
    /// The plan its operation gave (shown to its owner only).
    #[serde(default, skip_serializing_if = "Value::is_null")]
    pub plan: Value,
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
