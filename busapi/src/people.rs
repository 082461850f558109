//! What waits for a person, and what people decided, shaped from the store's rows:
//! pure functions (no I/O) shared by the CLI (`asks`, `work show`) and webd
//! (`/api/asks`, `/api/works/{id}`), so both say the same thing.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::store::{StoredEvent, WaitRow, WorkRow};

/// One thing that waits for a person: an ask, an approval or an admission.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Open {
    /// `ask`, `approval` or `admission`.
    pub kind: String,
    /// The ask's or gate's ID; the Work's ID for an admission.
    pub id: String,
    /// The Work.
    pub work_id: String,
    /// Its scope.
    pub scope_id: String,
    /// The provider that decides (the Wait's or the hold's owner).
    pub provider: String,
    /// What is asked or decided, in one line.
    pub text: String,
    /// The answers to choose from.
    pub choices: Vec<String>,
    /// Since when.
    pub since: String,
    /// Until when (a Wait's timeout); empty when it has none.
    pub due_at: String,
}

/// The open ask or approval an active Wait `w` (of a Work in `scope`) stands for;
/// `None` for any other Wait.
pub fn from_wait(w: &WaitRow, scope: &str) -> Option<Open> {
    let kind = match w.plan["kind"].as_str() {
        Some("ask") => "ask",
        Some("gate") => "approval",
        _ => return None,
    };
    let id = w.plan[if kind == "ask" { "ask_id" } else { "gate_id" }]
        .as_str()?
        .to_owned();
    let text = if kind == "ask" {
        w.plan["question"].as_str().unwrap_or(&w.description)
    } else {
        &w.description
    };
    Some(Open {
        kind: kind.to_owned(),
        id,
        work_id: w.work_id.clone(),
        scope_id: scope.to_owned(),
        provider: w.owner.clone(),
        text: text.lines().next().unwrap_or_default().to_owned(),
        choices: serde_json::from_value(w.plan["choices"].clone()).unwrap_or_default(),
        since: w.created_at.clone(),
        due_at: w.due_at.clone().unwrap_or_default(),
    })
}

/// The admission a held Work waits for; `None` when it is not held.
pub fn from_hold(w: &WorkRow) -> Option<Open> {
    let hold = w.hold.as_ref()?;
    Some(Open {
        kind: "admission".to_owned(),
        id: w.id.clone(),
        work_id: w.id.clone(),
        scope_id: w.scope_id.clone(),
        provider: hold.owner.clone(),
        text: hold.reason.clone(),
        choices: Vec::new(),
        since: hold.held_at.clone(),
        due_at: String::new(),
    })
}

/// One person's decision on a Work: a `core.action.*` Event.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Decision {
    /// The Event's sequence.
    pub seq: i64,
    /// Its type (`core.action.<action>`).
    #[serde(rename = "type")]
    pub event_type: String,
    /// The action.
    pub action: Value,
    /// The provider that performed it.
    pub provider: Value,
    /// Who acted (`cli:<user>`, `web:<person>`, `<package>:<caller>`).
    pub caller: Value,
    /// What was decided, as the provider recorded it.
    pub decision: Value,
    /// The action's input.
    pub input: Value,
}

/// The decision Event `e` records; `None` when it is not a `core.action.*` Event.
pub fn decision(e: &StoredEvent) -> Option<Decision> {
    if !e.event_type.starts_with("core.action.") {
        return None;
    }
    let field = |name: &str| e.payload.get(name).cloned().unwrap_or(Value::Null);
    Some(Decision {
        seq: e.seq,
        event_type: e.event_type.clone(),
        action: field("action"),
        provider: field("provider"),
        caller: field("caller"),
        decision: field("decision"),
        input: field("input"),
    })
}
