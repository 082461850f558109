//! The checks and encodings every record's writes share: names and texts within
//! their limits (each error names the limit), JSON columns, list columns and page
//! sizes. Below every module that stores something.

use crate::db::Limits;
use crate::error::StoreError;
use serde_json::Value;

/// A page's default size when the caller says 0.
pub const DEFAULT_PAGE: u32 = 100;

/// `field` within `max` bytes, naming the limit.
pub(crate) fn check_text(field: &str, v: &str, max: usize, limit: &str) -> Result<(), StoreError> {
    if v.len() > max {
        return Err(StoreError::invalid(format!(
            "{field} is {} bytes, over {limit} ({max})",
            v.len()
        )));
    }
    Ok(())
}

/// A name or key: non-empty, within `max_key_bytes`.
pub(crate) fn check_name(field: &str, v: &str, limits: &Limits) -> Result<(), StoreError> {
    if v.is_empty() {
        return Err(StoreError::invalid(format!("{field} is required")));
    }
    check_text(field, v, limits.max_key_bytes, "max_key_bytes")
}

/// An optional name: within `max_key_bytes`.
pub(crate) fn check_opt_name(field: &str, v: &str, limits: &Limits) -> Result<(), StoreError> {
    check_text(field, v, limits.max_key_bytes, "max_key_bytes")
}

/// A list of names: at most `max_batch`, each non-empty within `max_key_bytes`.
pub(crate) fn check_list(field: &str, items: &[String], limits: &Limits) -> Result<(), StoreError> {
    if items.len() > limits.max_batch {
        return Err(StoreError::invalid(format!(
            "{field} has {} entries, over max_batch ({})",
            items.len(),
            limits.max_batch
        )));
    }
    for item in items {
        check_name(&format!("{field} entry"), item, limits)?;
    }
    Ok(())
}

/// JSON text of a value, within `max_value_bytes`.
pub(crate) fn json_text(field: &str, v: &Value, limits: &Limits) -> Result<String, StoreError> {
    let text = serde_json::to_string(v)
        .map_err(|e| StoreError::invalid(format!("{field} is not JSON: {e}")))?;
    check_text(field, &text, limits.max_value_bytes, "max_value_bytes")?;
    Ok(text)
}

/// JSON text of a list of strings.
pub(crate) fn list_text(items: &[String]) -> String {
    serde_json::to_string(items).unwrap_or_else(|_| "[]".into())
}

/// A stored JSON list of strings (an unreadable one reads as empty).
pub(crate) fn parse_list(text: &str) -> Vec<String> {
    serde_json::from_str(text).unwrap_or_default()
}

/// A stored JSON value (absent or unreadable reads as null).
/// Kept JSON text passed on as it is; text that is not JSON (never written by the
/// store) reads as `null`, as [`parse_json`] reads it.
pub(crate) fn raw_json(text: String) -> Box<serde_json::value::RawValue> {
    serde_json::value::RawValue::from_string(text).unwrap_or_default()
}

pub(crate) fn parse_json(text: Option<String>) -> Value {
    text.and_then(|t| serde_json::from_str(&t).ok())
        .unwrap_or(Value::Null)
}

/// The page size: 0 is the default; over `max_page` is refused.
pub(crate) fn page_limit(limit: u32, limits: &Limits) -> Result<i64, StoreError> {
    let max = limits.max_page;
    if limit as usize > max {
        return Err(StoreError::invalid(format!(
            "limit {limit} is over max_page ({max})"
        )));
    }
    let n = if limit == 0 {
        (DEFAULT_PAGE as usize).min(max)
    } else {
        limit as usize
    };
    Ok(n as i64)
}
