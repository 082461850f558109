//! `sieve`: a test wait operation whose Wait only the events its dependency filter
//! matches may wake.
//!
//! `sieve.await {key, pointer, equals}` plans a Wait on `key` with the plan `{pointer,
//! equals}`; `dependency.filter` matches an event whose payload data has `equals` at
//! `pointer` (a JSON pointer). Each filter call appends one JSON line `{operation,
//! work_id, event, matched}` to `filters` in its package directory, so a test sees
//! what the host asked.

use std::io::Write;

use protocol::wire::{
    DependencyFilterParams, DependencyFilterResult, OperationWaitParams, OperationWaitResult,
    WaitRequest,
};
use protocol::{Code, RpcError};
use serde_json::json;

/// The manifest.
pub const MANIFEST: &str = include_str!("../sieve.json");

/// The extension.
pub fn extension() -> Result<sdk::Extension, sdk::SdkError> {
    Ok(sdk::Extension::new(MANIFEST)?
        .on::<OperationWaitParams, _, _>(|_ctx, p| async move {
            let key = p.input["key"]
                .as_str()
                .filter(|k| !k.is_empty())
                .ok_or_else(|| RpcError::invalid_params("input.key is required"))?;
            let pointer = p.input["pointer"].as_str().unwrap_or_default();
            Ok(OperationWaitResult {
                wait: WaitRequest {
                    keys: vec![key.to_owned()],
                    description: format!("waiting for {key} with {pointer} set"),
                    plan: json!({"pointer": pointer, "equals": p.input["equals"]}),
                    ..WaitRequest::default()
                },
            })
        })
        .on::<DependencyFilterParams, _, _>(|_ctx, p| async move {
            let pointer = p.plan["pointer"].as_str().unwrap_or_default();
            let matched = p.event.payload.data.pointer(pointer) == Some(&p.plan["equals"]);
            let line = json!({"operation": p.operation, "work_id": p.work_id,
                              "event": p.event.id, "matched": matched});
            // The package directory is the process's working directory.
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open("filters")
                .and_then(|mut f| writeln!(f, "{line}"))
                .map_err(|e| RpcError::new(Code::Internal, e.to_string()))?;
            Ok(DependencyFilterResult { matched })
        }))
}

/// `oc-suite ext-sieve`.
pub fn main_entry() -> i32 {
    match extension() {
        Ok(ext) => sdk::run(ext),
        Err(e) => {
            eprintln!("sieve: {e}");
            2
        }
    }
}
