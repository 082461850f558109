//! One Work's story in the journal: the host calls that act for a Work run inside a
//! span carrying `OC_WORK_ID` (and `OC_EXECUTION_ID` for an executor's run), so every
//! line a package logs while serving one of them names the Work. The package's log
//! lines go to stderr (`OC_WORK_ID=<id>` in the span's part of the line); extrunner
//! lifts those fields onto the journal entry it writes, so `journalctl
//! OC_WORK_ID=<id>` finds them with the daemons' own.
//!
//! Only the calls that name a Work in their params are read for it
//! ([`carries_work`]); their params are read once more for just the IDs (serde skips
//! the rest), which costs a parse, not a copy.

use serde::Deserialize;

/// Methods whose params name the Work they act for.
pub fn carries_work(method: &str) -> bool {
    matches!(
        method,
        "executor.run"
            | "executor.recover"
            | "operation.call"
            | "operation.wait"
            | "operation.gate"
            | "work.actions"
            | "work.act"
            | "work.admit"
            | "work.annotate"
    )
}

#[derive(Deserialize, Default)]
struct WorkRef {
    #[serde(default)]
    id: String,
}

#[derive(Deserialize, Default)]
struct RunRef {
    #[serde(default)]
    execution_id: String,
    #[serde(default)]
    work: WorkRef,
}

#[derive(Deserialize, Default)]
struct AuthorityRef {
    #[serde(default)]
    work_id: String,
    #[serde(default)]
    execution_id: String,
}

#[derive(Deserialize, Default)]
struct Ids {
    #[serde(default)]
    run: Option<RunRef>,
    #[serde(default)]
    authority: Option<AuthorityRef>,
    #[serde(default)]
    work_id: Option<String>,
    #[serde(default)]
    work: Option<WorkRef>,
}

/// The Work and execution a call's params name, when its method carries one.
pub fn ids_of(method: &str, params: &str) -> Option<(String, String)> {
    if !carries_work(method) {
        return None;
    }
    let ids: Ids = serde_json::from_str(params).ok()?;
    let (work, execution) = if let Some(r) = ids.run {
        (r.work.id, r.execution_id)
    } else if let Some(a) = ids.authority {
        (a.work_id, a.execution_id)
    } else if let Some(w) = ids.work_id {
        (w, String::new())
    } else {
        (ids.work.map(|w| w.id).unwrap_or_default(), String::new())
    };
    (!work.is_empty()).then_some((work, execution))
}

/// The span a call for a Work runs in (disabled for any other call).
pub fn span(method: &str, params: &str) -> tracing::Span {
    match ids_of(method, params) {
        Some((work, execution)) if execution.is_empty() => {
            tracing::info_span!("call", OC_WORK_ID = %work)
        }
        Some((work, execution)) => {
            tracing::info_span!("call", OC_WORK_ID = %work, OC_EXECUTION_ID = %execution)
        }
        None => tracing::Span::none(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_work_is_read_from_each_shape_of_params() {
        let run = r#"{"run": {"execution_id": "x-1", "work": {"id": "w-1", "kind": "k"}, "inputs": [1,2]}}"#;
        assert_eq!(
            ids_of("executor.run", run),
            Some(("w-1".into(), "x-1".into()))
        );
        let call = r#"{"operation": "a.b", "authority": {"work_id": "w-2", "execution_id": ""}}"#;
        assert_eq!(
            ids_of("operation.call", call),
            Some(("w-2".into(), String::new()))
        );
        assert_eq!(
            ids_of("work.admit", r#"{"work": {"id": "w-3"}}"#),
            Some(("w-3".into(), String::new()))
        );
        assert_eq!(ids_of("route.match", r#"{"work_id": "w-4"}"#), None);
        assert_eq!(ids_of("operation.call", "not json"), None);
        assert_eq!(ids_of("operation.call", "{}"), None);
    }
}
