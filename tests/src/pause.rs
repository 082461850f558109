//! `pause`: a test executor whose first segment parks the Work on a Wait and whose
//! resumed segment finishes it, saying what woke it.
//!
//! Binding config: `{"key": "<correlation key>", "timeout_s": N?}`. `executor.run`
//! starts a run; its `executor.wait` answers `waiting` with a Wait for events carrying
//! `key` (and, with `timeout_s`, due that many seconds later). `executor.resume`
//! starts the next segment with the inputs that woke it; its wait answers `completed`
//! with the summary `woken by <event types>` or `woken by the timeout` (no inputs). The
//! runs are held in memory: a restart of this extension loses them (recover answers
//! `not_adoptable`), which is all these tests need.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use protocol::wire::{
    ExecutorRecoverParams, ExecutorRecoverResult, ExecutorResumeParams, ExecutorResumeResult,
    ExecutorRunParams, ExecutorRunResult, ExecutorWaitParams, ExecutorWaitResult, Outcome,
    WaitRequest,
};
use protocol::{Code, RpcError};

/// The manifest.
pub const MANIFEST: &str = include_str!("../pause.json");

#[derive(Debug, Clone)]
enum Segment {
    /// The first segment: park on a Wait.
    First { key: String, timeout_s: Option<u64> },
    /// Resumed with these input types.
    Resumed(Vec<String>),
}

type Runs = Arc<Mutex<HashMap<String, Segment>>>;

fn rfc3339_in(secs: u64) -> String {
    let ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d + Duration::from_secs(secs))
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(0))
        .unwrap_or(0);
    protocol::time::format_rfc3339_ms(ms)
}

/// The extension.
pub fn extension() -> Result<sdk::Extension, sdk::SdkError> {
    let runs: Runs = Arc::default();
    let (r1, r2, r3) = (runs.clone(), runs.clone(), runs.clone());
    Ok(sdk::Extension::new(MANIFEST)?
        .on::<ExecutorRunParams, _, _>(move |_ctx, p| {
            let runs = r1.clone();
            async move {
                let key = p.run.config["key"]
                    .as_str()
                    .ok_or_else(|| RpcError::invalid_params("config.key is required"))?
                    .to_owned();
                let timeout_s = p.run.config["timeout_s"].as_u64();
                if let Ok(mut r) = runs.lock() {
                    r.insert(p.run.execution_id, Segment::First { key, timeout_s });
                }
                Ok(ExecutorRunResult {})
            }
        })
        .on::<ExecutorResumeParams, _, _>(move |_ctx, p| {
            let runs = r2.clone();
            async move {
                let types = p.inputs.iter().map(|e| e.event_type.clone()).collect();
                match runs.lock() {
                    Ok(mut r) if r.contains_key(&p.execution_id) => {
                        r.insert(p.execution_id, Segment::Resumed(types));
                        Ok(ExecutorResumeResult {})
                    }
                    _ => Err(RpcError::new(Code::NotFound, "no such run")),
                }
            }
        })
        .on::<ExecutorWaitParams, _, _>(move |_ctx, p| {
            let runs = r3.clone();
            async move {
                let segment = runs
                    .lock()
                    .ok()
                    .and_then(|r| r.get(&p.execution_id).cloned());
                match segment {
                    None => Err(RpcError::new(Code::NotFound, "no such run")),
                    Some(Segment::First { key, timeout_s }) => {
                        let mut r = ExecutorWaitResult::new(Outcome::Waiting);
                        r.wait = Some(WaitRequest {
                            keys: vec![key.clone()],
                            due_at: timeout_s.map(rfc3339_in).unwrap_or_default(),
                            description: format!("waiting for an event on {key}"),
                            ..WaitRequest::default()
                        });
                        Ok(r)
                    }
                    Some(Segment::Resumed(types)) => {
                        let mut r = ExecutorWaitResult::new(Outcome::Completed);
                        r.summary = if types.is_empty() {
                            "woken by the timeout".to_owned()
                        } else {
                            format!("woken by {}", types.join(", "))
                        };
                        Ok(r)
                    }
                }
            }
        })
        .on::<ExecutorRecoverParams, _, _>(|_ctx, _p| async {
            Err::<ExecutorRecoverResult, _>(RpcError::authored(
                "not_adoptable",
                "pause keeps its runs in memory",
            ))
        }))
}

/// `oc-suite ext-pause`.
pub fn main_entry() -> i32 {
    match extension() {
        Ok(ext) => sdk::run(ext),
        Err(e) => {
            eprintln!("pause: {e}");
            2
        }
    }
}
