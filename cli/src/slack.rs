//! `open-conduit slack …`: the bundled Slack package's commands.
//!
//! `slack manifest` prints the Slack app manifest the package generates from the
//! configuration (its method [`oc_slack::receiver::MANIFEST_METHOD`], through the
//! bus's `ext.call`), for the operator to paste into Slack's app settings.

use std::path::Path;

use busapi::ext::ExtCallAny;
use serde_json::{json, Value};

use crate::output::{call, print_json, Failure, Out};

/// The package's name.
pub const PACKAGE: &str = "slack";

/// How long the package has to answer (ms).
pub const TIMEOUT_MS: u64 = 10_000;

/// The manifests of `answer` (`{"manifests": [...]}`) for `connection` and `scope`
/// (each when given): an entry is `scope/entry`.
pub fn select(answer: &Value, connection: Option<&str>, scope: Option<&str>) -> Vec<Value> {
    answer["manifests"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default()
        .iter()
        .filter(|m| connection.is_none_or(|c| m["connection"] == c))
        .filter(|m| {
            scope.is_none_or(|s| {
                m["entries"].as_array().is_some_and(|es| {
                    es.iter()
                        .filter_map(Value::as_str)
                        .any(|e| e.split_once('/').is_some_and(|(sc, _)| sc == s))
                })
            })
        })
        .cloned()
        .collect()
}

/// `slack manifest`: one manifest printed as JSON (its notes on stderr); with
/// `--json`, every selected answer (`{"manifests": [...]}`).
pub fn manifest(bus: &Path, connection: Option<&str>, scope: Option<&str>, json_out: bool) -> Out {
    let answer = call(
        bus,
        &ExtCallAny {
            name: PACKAGE.into(),
            method: oc_slack::receiver::MANIFEST_METHOD.into(),
            params: Some(json!({})),
            in_transaction: false,
            timeout_ms: Some(TIMEOUT_MS),
            hold: false,
        },
    )
    .map_err(|e| format!("the slack package's manifest: {e}"))?;
    let selected = select(&answer, connection, scope);
    if json_out {
        print_json(&json!({ "manifests": selected }));
        return Ok(());
    }
    let narrowed = match (connection, scope) {
        (None, None) => String::new(),
        (c, s) => format!(
            " of{}{}",
            c.map(|c| format!(" connection {c}")).unwrap_or_default(),
            s.map(|s| format!(" scope {s}")).unwrap_or_default()
        ),
    };
    match selected.as_slice() {
        [] => Err(Failure::from(format!(
            "no slack entry{narrowed} in the configuration: a manifest is made for each \
             connection that entries of type slack name"
        ))),
        [one] => {
            for note in one["notes"]
                .as_array()
                .map(Vec::as_slice)
                .unwrap_or_default()
            {
                if let Some(n) = note.as_str() {
                    eprintln!("note: {n}");
                }
            }
            print_json(&one["manifest"]);
            Ok(())
        }
        many => {
            let names: Vec<&str> = many
                .iter()
                .filter_map(|m| m["connection"].as_str())
                .collect();
            Err(Failure {
                message: format!(
                    "{} connections have slack entries{narrowed} ({}): give --connection NAME",
                    names.len(),
                    names.join(", ")
                ),
                status: 2,
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn select_narrows_by_connection_and_scope() {
        let answer = json!({"manifests": [
            {"connection": "a", "entries": ["demo/team"], "manifest": {}, "notes": []},
            {"connection": "b", "entries": ["ops/team", "ops2/x"], "manifest": {}, "notes": []}
        ]});
        assert_eq!(select(&answer, None, None).len(), 2);
        assert_eq!(select(&answer, Some("b"), None)[0]["connection"], "b");
        assert_eq!(select(&answer, None, Some("demo"))[0]["connection"], "a");
        assert!(select(&answer, Some("a"), Some("ops")).is_empty());
        assert!(select(&json!({}), None, None).is_empty());
    }
}
