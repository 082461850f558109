//! `agent`: a test executor whose turn the test itself drives, as an agent would,
//! through the real toolbelt.
//!
//! Binding config: `{"dir": "<directory>"}`. `executor.run` writes
//! `<dir>/<execution id>.json` (the run's toolbelt, Work, epoch and inputs) and its
//! `executor.wait` answers once `<dir>/<execution id>.end` exists, with the outcome and
//! summary that file holds (`{"outcome": "handoff", "summary": "…"}`), removing it.
//! `executor.resume` rewrites the `.json` with `"segment": n` and the inputs that woke
//! it, and the next `.end` ends that segment. The operation `agent.count` appends one
//! line per call to `calls` in its package directory and answers how many lines there are, so a test
//! sees how often the handler ran.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use protocol::wire::{
    ExecutorRecoverParams, ExecutorRecoverResult, ExecutorResumeParams, ExecutorResumeResult,
    ExecutorRunParams, ExecutorRunResult, ExecutorWaitParams, ExecutorWaitResult,
    OperationCallParams, OperationCallResult, Outcome,
};
use protocol::{Code, RpcError};
use serde_json::{json, Value};

/// The manifest.
pub const MANIFEST: &str = include_str!("../agent.json");

#[derive(Debug, Clone)]
struct Run {
    dir: PathBuf,
    record: Value,
    segment: u32,
}

type Runs = Arc<Mutex<HashMap<String, Run>>>;

fn write(path: &std::path::Path, v: &Value) -> Result<(), RpcError> {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, v.to_string())
        .and_then(|()| std::fs::rename(&tmp, path))
        .map_err(|e| RpcError::new(Code::Internal, format!("{}: {e}", path.display())))
}

/// The extension.
pub fn extension() -> Result<sdk::Extension, sdk::SdkError> {
    let runs: Runs = Arc::default();
    let (r1, r2, r3) = (runs.clone(), runs.clone(), runs);
    Ok(sdk::Extension::new(MANIFEST)?
        .on::<ExecutorRunParams, _, _>(move |_ctx, p| {
            let runs = r1.clone();
            async move {
                let dir = PathBuf::from(
                    p.run.config["dir"]
                        .as_str()
                        .ok_or_else(|| RpcError::invalid_params("config.dir is required"))?,
                );
                let record = json!({"toolbelt": p.run.toolbelt, "work_id": p.run.work.id,
                                    "epoch": p.run.epoch, "segment": 0,
                                    "inputs": p.run.inputs.iter().map(|e| e.id.clone()).collect::<Vec<_>>()});
                write(&dir.join(format!("{}.json", p.run.execution_id)), &record)?;
                if let Ok(mut r) = runs.lock() {
                    r.insert(p.run.execution_id, Run { dir, record, segment: 0 });
                }
                Ok(ExecutorRunResult {})
            }
        })
        .on::<ExecutorResumeParams, _, _>(move |_ctx, p| {
            let runs = r2.clone();
            async move {
                let mut r = runs
                    .lock()
                    .map_err(|_| RpcError::new(Code::Internal, "poisoned"))?;
                let run = r
                    .get_mut(&p.execution_id)
                    .ok_or_else(|| RpcError::new(Code::NotFound, "no such run"))?;
                run.segment += 1;
                run.record["segment"] = json!(run.segment);
                run.record["inputs"] = json!(p.inputs.iter().map(|e| e.id.clone()).collect::<Vec<_>>());
                if let Some(tb) = &p.toolbelt {
                    run.record["toolbelt"] = json!(tb);
                }
                run.record["epoch"] = json!(p.epoch);
                write(&run.dir.join(format!("{}.json", p.execution_id)), &run.record)?;
                Ok(ExecutorResumeResult {})
            }
        })
        .on::<ExecutorWaitParams, _, _>(move |_ctx, p| {
            let runs = r3.clone();
            async move {
                let dir = runs
                    .lock()
                    .ok()
                    .and_then(|r| r.get(&p.execution_id).map(|x| x.dir.clone()))
                    .ok_or_else(|| RpcError::new(Code::NotFound, "no such run"))?;
                let end = dir.join(format!("{}.end", p.execution_id));
                loop {
                    if let Ok(text) = std::fs::read_to_string(&end) {
                        let _ = std::fs::remove_file(&end);
                        let v: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
                        let outcome: Outcome = serde_json::from_value(v["outcome"].clone())
                            .unwrap_or(Outcome::Handoff);
                        let mut r = ExecutorWaitResult::new(outcome);
                        r.summary = v["summary"].as_str().unwrap_or_default().to_owned();
                        if outcome == Outcome::Failed {
                            r.error = "the test said so".into();
                        }
                        return Ok(r);
                    }
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
        })
        .on::<OperationCallParams, _, _>(move |_ctx, p| async move {
            // The package directory is the process's working directory.
            let calls = PathBuf::from("calls");
            let line = format!("{} {}\n", p.request_id, p.authority.work_id);
            use std::io::Write;
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(&calls)
                .and_then(|mut f| f.write_all(line.as_bytes()))
                .map_err(|e| RpcError::new(Code::Internal, e.to_string()))?;
            let n = std::fs::read_to_string(&calls).map(|t| t.lines().count()).unwrap_or(0);
            Ok(OperationCallResult {
                output: json!({"count": n, "note": p.input["note"]}),
            })
        })
        .on::<ExecutorRecoverParams, _, _>(|_ctx, _p| async {
            Err::<ExecutorRecoverResult, _>(RpcError::authored(
                "not_adoptable",
                "agent keeps its runs in memory",
            ))
        }))
}

/// `oc-suite ext-agent`.
pub fn main_entry() -> i32 {
    match extension() {
        Ok(ext) => sdk::run(ext),
        Err(e) => {
            eprintln!("agent: {e}");
            2
        }
    }
}
