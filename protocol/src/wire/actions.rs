//! `action.submit` (E→H, permission `action.submit`): an extension invokes an action
//! for a person it identified on its own surface (a comment's author on GitHub), in
//! one of its configured scopes. The host records the action as one Event under
//! `core.action` whose caller is `<package name>:<caller>`, and performs it once per
//! `key`: a repeated submit with the same key answers `added: false` and does
//! nothing again.
//!
//! The host offers the provider [`CORE_PROVIDER`] with the actions [`ACTION_STOP`]
//! (cancel the Work, stopping its running attempt first), [`ACTION_INTERRUPT`] (end
//! the running attempt's turn, the Work staying open) and [`ACTION_RETRY`] (a failed
//! or cancelled Work is reopened; an idle or completed one gets a new turn).

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The host's own action provider, the default when `provider` is empty.
pub const CORE_PROVIDER: &str = "core";
/// `core`'s `stop`: cancel the Work, stopping its running attempt first.
pub const ACTION_STOP: &str = "stop";
/// `core`'s `interrupt`: end the running attempt's turn (the executor's
/// `executor.interrupt`); the Work stays open for its next input.
pub const ACTION_INTERRUPT: &str = "interrupt";
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

/// The longest `label`, `prompt` or `detail` of an offered action, in bytes.
pub const MAX_ACTION_TEXT_BYTES: usize = 500;
/// The most choices an offered action carries.
pub const MAX_ACTION_CHOICES: usize = 20;
/// The most actions one provider offers on one target.
pub const MAX_ACTIONS_OFFERED: usize = 50;

/// One action a provider offers on a Work (or on a scope, with no Work).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ActionOffer {
    /// The action's name, as `work.act` and `action.submit` take it (`answer`).
    pub id: String,
    /// A short label for a button or a listing (`Answer`).
    pub label: String,
    /// What to ask the person for the input, when the action takes text.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub prompt: String,
    /// The answers to choose from, when the action takes one of them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub choices: Vec<String>,
    /// What the person is deciding, in one line (`github.open_pull_request "Fix"`).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub detail: String,
    /// The Work waits for a person to take this action.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub awaited: bool,
    /// The input the action is for (an ask's or a gate's ID), to send back as the
    /// action's `input` with the person's own fields added.
    #[serde(default, skip_serializing_if = "Value::is_null")]
    pub input: Value,
}

/// `work.actions` (H→E, with manifest `provides.actions`): what the provider offers
/// on a Work of one of its configured scopes.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkActionsParams {
    /// The scope.
    pub scope_id: String,
    /// The Work; empty for the scope itself.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub work_id: String,
}

/// Result of `work.actions`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct WorkActionsResult {
    /// The actions offered now.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub actions: Vec<ActionOffer>,
}

/// `work.act` (H→E, with manifest `provides.actions`): the provider authorises an
/// action for a person and plans the one Event the host records for it under
/// `core.action`. The provider writes nothing: the recorded Event is the decision.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct WorkActParams {
    /// The scope.
    pub scope_id: String,
    /// The Work; empty for the scope itself.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub work_id: String,
    /// The action (one the provider offers).
    pub action: String,
    /// What the person gave with it.
    #[serde(default, skip_serializing_if = "Value::is_null")]
    pub input: Value,
    /// The person, with the surface that identified them (`cli:alice`,
    /// `github:octocat`).
    pub caller: String,
    /// The action's identity: the delivery ID of the Event recorded.
    pub key: String,
}

/// A hold the action settles (an admission).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct HoldSettlement {
    /// Let the Work's next start through (true) or cancel the Work (false).
    pub admit: bool,
    /// Why, in one line.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub reason: String,
}

/// Result of `work.act`: the Event to record and what else the host does with it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct WorkActResult {
    /// The correlation keys of the recorded Event: a Wait on them wakes by it (an
    /// ask's answer). None: the Event is attached to the Work without routing.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub keys: Vec<String>,
    /// What the provider decided, recorded as the Event's `decision`.
    #[serde(default, skip_serializing_if = "Value::is_null")]
    pub decision: Value,
    /// A hold of the provider's on the Work that the action settles, in the same
    /// write as the record.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub settle_hold: Option<HoldSettlement>,
    /// What was done, in one line for the person.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
}

/// `action.list` (E→H, permission `action.submit`): every provider's actions on a
/// target of one of the package's configured scopes.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ActionListParams {
    /// One of the package's configured scopes.
    pub scope_id: String,
    /// The Work; empty for the scope itself.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub work_id: String,
}

/// An action with the provider that offers it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ListedAction {
    /// The provider (`core`, or a package's name).
    pub provider: String,
    /// The action.
    #[serde(flatten)]
    pub offer: ActionOffer,
}

/// Result of `action.list`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ActionListResult {
    /// The actions, `core`'s first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub actions: Vec<ListedAction>,
}

/// An action's Event (`core.action.<action>`, payload `core.action.v1`) as an agent
/// reads it in its prompt: who did what, then each field the provider decided and
/// the person gave (`answer: release-2.x`, `reason: wrong base`), one per line.
pub fn render_action(data: &Value) -> String {
    let text = |k: &str| data[k].as_str().unwrap_or_default();
    let mut out = format!("{} by {}", text("action"), text("caller"));
    if !text("provider").is_empty() && text("provider") != CORE_PROVIDER {
        out.push_str(&format!(" (through {})", text("provider")));
    }
    out.push('\n');
    let mut seen = std::collections::BTreeSet::new();
    for part in ["decision", "input"] {
        let Some(fields) = data[part].as_object() else {
            continue;
        };
        for (k, v) in fields {
            if !seen.insert(k.clone()) {
                continue;
            }
            let shown = match v {
                Value::String(s) => s.clone(),
                Value::Null => continue,
                other => other.to_string(),
            };
            out.push_str(&format!("{k}: {}\n", shown.replace('\n', " ")));
        }
    }
    out
}
