//! `linear.update` {`title`?, `priority`?, `estimate`?, `due_date`?}: a small, checked
//! set of the Work's issue's fields changed with one `issueUpdate` (the issue by its
//! identifier). At least one field; anything else is refused, so an agent cannot
//! reassign, re-team or otherwise change the issue through it.
//!
//! - `title`: one line, 1 to [`MAX_TITLE_BYTES`];
//! - `priority`: 0 to 4 (none, urgent, high, medium, low) or one of those names;
//! - `estimate`: a whole number from 0 to [`MAX_ESTIMATE`] (the team's scale);
//! - `due_date`: `YYYY-MM-DD`, or null to clear it.

use protocol::{Code, RpcError};
use serde_json::{json, Map, Value};

use crate::api::Client;

/// `linear.update`.
pub const UPDATE: &str = "linear.update";
/// The longest title accepted, in bytes.
pub const MAX_TITLE_BYTES: usize = 255;
/// The largest estimate accepted.
pub const MAX_ESTIMATE: u64 = 100;
/// The fields `linear.update` takes.
pub const FIELDS: [&str; 4] = ["title", "priority", "estimate", "due_date"];
const PRIORITIES: [&str; 5] = ["none", "urgent", "high", "medium", "low"];

/// Some of an issue's fields changed.
pub const UPDATE_MUTATION: &str = "mutation OcUpdate($id: String!, $input: IssueUpdateInput!) {
  issueUpdate(id: $id, input: $input) {
    success
    issue { id identifier title priority estimate dueDate }
  }
}";

fn invalid(m: impl Into<String>) -> RpcError {
    RpcError::new(Code::Invalid, m)
}

fn is_date(s: &str) -> bool {
    let b = s.as_bytes();
    if b.len() != 10 || b[4] != b'-' || b[7] != b'-' {
        return false;
    }
    let num = |r: std::ops::Range<usize>| s.get(r).and_then(|p| p.parse::<u32>().ok());
    let (Some(y), Some(m), Some(d)) = (num(0..4), num(5..7), num(8..10)) else {
        return false;
    };
    let leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
    let days = match m {
        1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
        4 | 6 | 9 | 11 => 30,
        2 if leap => 29,
        2 => 28,
        _ => return false,
    };
    y >= 1970 && (1..=days).contains(&d) && b.iter().all(|c| c.is_ascii_digit() || *c == b'-')
}

/// The `IssueUpdateInput` of a checked input: at least one of [`FIELDS`], nothing
/// else, each within its bounds.
pub fn checked(input: &Value) -> Result<Value, RpcError> {
    let given = input.as_object().cloned().unwrap_or_default();
    if let Some(other) = given.keys().find(|k| !FIELDS.contains(&k.as_str())) {
        return Err(invalid(format!(
            "`{other}` is not a field linear.update sets (it sets: {})",
            FIELDS.join(", ")
        )));
    }
    if given.is_empty() {
        return Err(invalid(format!(
            "give at least one of: {}",
            FIELDS.join(", ")
        )));
    }
    let mut out = Map::new();
    if let Some(t) = given.get("title") {
        let t = t.as_str().map(str::trim).unwrap_or_default();
        if t.is_empty() || t.len() > MAX_TITLE_BYTES || t.chars().any(char::is_control) {
            return Err(invalid(format!(
                "title must be one line of 1 to {MAX_TITLE_BYTES} bytes"
            )));
        }
        out.insert("title".into(), json!(t));
    }
    if let Some(p) = given.get("priority") {
        let n = match p {
            Value::String(name) => PRIORITIES
                .iter()
                .position(|x| x.eq_ignore_ascii_case(name.trim()))
                .map(|i| i as u64),
            other => other.as_u64().filter(|n| *n <= 4),
        };
        let n = n.ok_or_else(|| {
            invalid("priority must be 0 to 4 or a name: none (0), urgent (1), high (2), medium (3), low (4)")
        })?;
        out.insert("priority".into(), json!(n));
    }
    if let Some(e) = given.get("estimate") {
        let n = e.as_u64().filter(|n| *n <= MAX_ESTIMATE).ok_or_else(|| {
            invalid(format!(
                "estimate must be a whole number from 0 to {MAX_ESTIMATE}"
            ))
        })?;
        out.insert("estimate".into(), json!(n));
    }
    if let Some(d) = given.get("due_date") {
        match d {
            Value::Null => {
                out.insert("dueDate".into(), Value::Null);
            }
            Value::String(s) if is_date(s.trim()) => {
                out.insert("dueDate".into(), json!(s.trim()));
            }
            _ => {
                return Err(invalid(
                    "due_date must be a date, YYYY-MM-DD (e.g. 2026-12-31), or null to clear it",
                ))
            }
        }
    }
    Ok(Value::Object(out))
}

/// Changes the input's fields of the issue `identifier`.
pub async fn run(client: &Client, input: &Value, identifier: &str) -> Result<Value, RpcError> {
    let fields = checked(input)?;
    let data = client
        .send(
            "update",
            UPDATE_MUTATION,
            json!({"id": identifier, "input": fields}),
        )
        .await?;
    if data.pointer("/issueUpdate/success") != Some(&json!(true)) {
        return Err(RpcError::new(
            Code::Unavailable,
            format!("Linear did not update {identifier}"),
        ));
    }
    let issue = data
        .pointer("/issueUpdate/issue")
        .cloned()
        .unwrap_or(Value::Null);
    Ok(
        json!({"issue": identifier, "title": issue["title"], "priority": issue["priority"],
              "estimate": issue["estimate"], "due_date": issue["dueDate"]}),
    )
}
