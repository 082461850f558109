//! `jira.labels` and `jira.set_fields`: the Work's issue's labels and fields, with
//! `PUT /rest/api/3/issue/{key}`.
//!
//! - `jira.labels` {`add`?, `remove`?}: label names (no spaces, at most
//!   [`MAX_LABEL_BYTES`], at most [`MAX_LABELS`] each) added and removed with the
//!   `update` operations, so the issue's other labels stay.
//! - `jira.set_fields` {`fields`: {field ID: value}}: only the field IDs the entry's
//!   `settable_fields` lists (none by default), so an agent cannot set arbitrary
//!   fields; the values go as Jira takes them (`{"duedate": "2026-12-31"}`,
//!   `{"priority": {"name": "High"}}`), at most [`MAX_FIELDS_BYTES`] of JSON.
//!
//! The entries whose fields apply are those of the Work's scope on the binding's
//! connection; when several are, a field is settable only when all of them list it.

use protocol::{Code, RpcError};
use serde_json::{json, Map, Value};

use crate::api::Client;

/// `jira.labels`.
pub const LABELS: &str = "jira.labels";
/// `jira.set_fields`.
pub const SET_FIELDS: &str = "jira.set_fields";
/// The most labels added or removed by one call, each way.
pub const MAX_LABELS: usize = 50;
/// The longest label, in bytes.
pub const MAX_LABEL_BYTES: usize = 255;
/// The most JSON bytes of `fields`.
pub const MAX_FIELDS_BYTES: usize = 32 * 1024;

fn invalid(m: impl Into<String>) -> RpcError {
    RpcError::new(Code::Invalid, m)
}

fn labels_of(input: &Value, field: &str) -> Result<Vec<String>, RpcError> {
    let list = match input.get(field) {
        None | Some(Value::Null) => return Ok(Vec::new()),
        Some(Value::Array(a)) => a,
        Some(_) => return Err(invalid(format!("{field} must be an array of label names"))),
    };
    if list.len() > MAX_LABELS {
        return Err(invalid(format!(
            "{field} lists more than {MAX_LABELS} labels (MAX_LABELS)"
        )));
    }
    let mut out: Vec<String> = Vec::new();
    for v in list {
        let l = v.as_str().map(str::trim).unwrap_or_default();
        if l.is_empty()
            || l.len() > MAX_LABEL_BYTES
            || l.chars().any(|c| c.is_whitespace() || c.is_control())
        {
            return Err(invalid(format!(
                "{field}: `{}` is not a label (1 to {MAX_LABEL_BYTES} bytes, no spaces: Jira labels cannot have them)",
                sdk::tracker::one_line(&v.to_string(), 80)
            )));
        }
        if !out.iter().any(|o| o == l) {
            out.push(l.to_string());
        }
    }
    Ok(out)
}

/// The `update` body of a checked `jira.labels` input.
pub fn labels_body(input: &Value) -> Result<Value, RpcError> {
    if let Some(other) = input
        .as_object()
        .and_then(|o| o.keys().find(|k| *k != "add" && *k != "remove"))
    {
        return Err(invalid(format!(
            "`{other}` is not an input of jira.labels (add, remove)"
        )));
    }
    let add = labels_of(input, "add")?;
    let remove = labels_of(input, "remove")?;
    if add.is_empty() && remove.is_empty() {
        return Err(invalid(
            "give labels to add or remove (add: [..], remove: [..])",
        ));
    }
    if let Some(both) = add.iter().find(|a| remove.contains(a)) {
        return Err(invalid(format!("`{both}` is both added and removed")));
    }
    let ops: Vec<Value> = add
        .iter()
        .map(|l| json!({"add": l}))
        .chain(remove.iter().map(|l| json!({"remove": l})))
        .collect();
    Ok(json!({"update": {"labels": ops}}))
}

/// `jira.labels` on the issue `key`.
pub async fn labels(client: &Client, key: &str, input: &Value) -> Result<Value, RpcError> {
    let body = labels_body(input)?;
    let base = super::issue_path(key)?;
    client.call("PUT", base, Some(body.clone())).await?;
    let of = |op: &str| -> Vec<Value> {
        body["update"]["labels"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|o| o.get(op).cloned())
            .collect()
    };
    Ok(json!({"issue": key, "added": of("add"), "removed": of("remove")}))
}

/// The field IDs `jira.set_fields` may set on a Work's issue: those every entry of `scope_id`
/// on `connection` lists (none when no entry is).
pub fn settable(
    registry: &crate::config::Registry,
    scope_id: &str,
    connection: &str,
) -> Vec<String> {
    let mut entries = registry
        .entries
        .iter()
        .filter(|e| e.scope_id == scope_id && e.connection == connection);
    let Some(first) = entries.next() else {
        return Vec::new();
    };
    let mut allowed = first.config.settable_fields.clone();
    for e in entries {
        allowed.retain(|f| e.config.settable_fields.contains(f));
    }
    allowed
}

/// The `fields` body of a checked `jira.set_fields` input, given the field IDs
/// `allowed`.
pub fn fields_body(input: &Value, allowed: &[String]) -> Result<Value, RpcError> {
    if let Some(other) = input
        .as_object()
        .and_then(|o| o.keys().find(|k| *k != "fields"))
    {
        return Err(invalid(format!(
            "`{other}` is not an input of jira.set_fields (fields)"
        )));
    }
    let fields: &Map<String, Value> = input
        .get("fields")
        .and_then(Value::as_object)
        .filter(|f| !f.is_empty())
        .ok_or_else(|| {
            invalid("fields (an object of field ID to value, e.g. {\"duedate\": \"2026-12-31\"}) is required")
        })?;
    for id in fields.keys() {
        if !allowed.iter().any(|a| a == id) {
            return Err(RpcError::new(
                Code::Unauthorized,
                if allowed.is_empty() {
                    format!("field `{id}` may not be set: this entry allows no fields (its settable_fields lists none)")
                } else {
                    format!(
                        "field `{id}` may not be set: this entry allows only {} (settable_fields)",
                        allowed.join(", ")
                    )
                },
            ));
        }
    }
    let size = serde_json::to_vec(fields)
        .map(|b| b.len())
        .unwrap_or(usize::MAX);
    if size > MAX_FIELDS_BYTES {
        return Err(invalid(format!(
            "fields is larger than {MAX_FIELDS_BYTES} bytes of JSON (MAX_FIELDS_BYTES)"
        )));
    }
    Ok(json!({"fields": fields}))
}

/// `jira.set_fields` on the issue `key`, the fields limited to `allowed`.
pub async fn set_fields(
    client: &Client,
    key: &str,
    input: &Value,
    allowed: &[String],
) -> Result<Value, RpcError> {
    let body = fields_body(input, allowed)?;
    let base = super::issue_path(key)?;
    client.call("PUT", base, Some(body.clone())).await?;
    let set: Vec<&String> = body["fields"]
        .as_object()
        .map(|f| f.keys().collect())
        .unwrap_or_default();
    Ok(json!({"issue": key, "set": set}))
}
