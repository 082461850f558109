//! `ext.live`: a running attempt's output so far, for an operator's view (webd).
//!
//! extrunner reads the execution from the store, finds the package that provides
//! its executor, and forwards `executor.live` to it (with the executor, the
//! execution and the tail); the answer is the executor's, bounded again here: at
//! most [`MAX_OUTPUTS`] outputs, each tail cut to its last `tail` bytes, whatever a
//! package answered.
//!
//! * An unknown execution is `not_found`; one that is not `running` in the store is
//!   `not_live` (and so is one the executor has nothing of running on this host:
//!   its own `not_live` crosses as it is).
//! * An executor whose manifest does not declare the control `live` is
//!   `unsupported`, without a call; one no running package here provides is
//!   `unavailable`.
//! * A `tail` over [`sdk::live::MAX_TAIL`] is `invalid`; 0 asks for
//!   [`sdk::live::DEFAULT_TAIL`].

use crate::render::Packages;
use busapi::ext::LiveRequest;
use busapi::store::{ExecutionRow, ExecutionsRequest};
use daemon::bus::Bus;
use protocol::manifest::Manifest;
use protocol::wire::{Call, ExecutorLiveParams, ExecutorLiveResult};
use protocol::{CallError, Code, RpcError};
use std::time::Duration;

/// How long the executor's `executor.live` may take.
pub const LIVE_TIMEOUT: Duration = Duration::from_secs(30);
/// The most outputs one answer carries; a package's further ones are left out.
pub const MAX_OUTPUTS: usize = 16;
/// The longest execution ID taken.
pub const MAX_ID_BYTES: usize = 255;
/// Executions read per page while looking one up by its ID.
const LOOKUP_PAGE: u32 = 64;
/// Pages read at most while looking one up by its ID.
const LOOKUP_PAGES: usize = 8;

fn refuse(code: Code, message: impl Into<String>) -> RpcError {
    RpcError::new(code, message)
}

fn store_error(e: CallError) -> RpcError {
    match e {
        CallError::Rpc(e) => e,
        other => refuse(
            Code::Unavailable,
            format!("the store is unavailable ({other})"),
        ),
    }
}

/// The execution `id`, when the store has it. `store.executions` pages executions
/// in ID order when no Work is named, after a cursor: the page after `id` less its
/// last character starts at it, but for IDs that share that prefix and sort before
/// it (with the store's random IDs, practically none); the look-up reads on while
/// the pages hold only such IDs, at most [`LOOKUP_PAGES`] pages.
async fn execution(bus: &Bus, id: &str) -> Result<Option<ExecutionRow>, RpcError> {
    let last = id.chars().last().map_or(0, char::len_utf8);
    let prefix = &id[..id.len() - last];
    let mut after = prefix.to_owned();
    for _ in 0..LOOKUP_PAGES {
        let page = bus
            .call_typed(&ExecutionsRequest {
                after,
                limit: LOOKUP_PAGE,
                ..ExecutionsRequest::default()
            })
            .await
            .map_err(store_error)?;
        if let Some(e) = page.executions.iter().find(|e| e.id == id) {
            return Ok(Some(e.clone()));
        }
        let past = page.executions.iter().any(|e| !e.id.starts_with(prefix));
        if past || page.next.is_empty() {
            return Ok(None);
        }
        after = page.next;
    }
    Ok(None)
}

/// The package among `packages` that provides `executor`, and whether its manifest
/// declares the executor's control `live`.
pub fn provider_of<'a>(packages: &'a dyn Packages, executor: &str) -> Option<(&'a str, bool)> {
    packages.names().into_iter().find_map(|name| {
        let m: &Manifest = packages.manifest(name)?;
        let x = m.provides.executors.iter().find(|x| x.name == executor)?;
        Some((name, x.has_control("live")))
    })
}

/// `answer` bounded: at most [`MAX_OUTPUTS`] outputs, each tail its last `tail`
/// bytes.
pub fn bounded(mut answer: ExecutorLiveResult, tail: u64) -> ExecutorLiveResult {
    answer.outputs.truncate(MAX_OUTPUTS);
    let keep = usize::try_from(tail).unwrap_or(usize::MAX);
    for o in &mut answer.outputs {
        if o.tail.len() > keep {
            o.tail.drain(..o.tail.len() - keep);
        }
    }
    answer
}

/// Serves `ext.live` (see the module doc).
pub async fn live(
    bus: &Bus,
    packages: &dyn Packages,
    p: LiveRequest,
) -> Result<ExecutorLiveResult, RpcError> {
    let id = p.execution_id.as_str();
    if id.is_empty() || id.len() > MAX_ID_BYTES || id.chars().any(char::is_control) {
        return Err(refuse(
            Code::Invalid,
            format!(
                "execution_id must be one line of 1 to {MAX_ID_BYTES} bytes without control characters"
            ),
        ));
    }
    let tail = sdk::live::tail_bytes(p.tail)?;
    let Some(ex) = execution(bus, id).await? else {
        return Err(refuse(Code::NotFound, format!("no execution {id}")));
    };
    if ex.state != "running" {
        return Err(refuse(
            Code::NotLive,
            format!("execution {id} is {}, not running", ex.state),
        ));
    }
    let Some((package, declared)) = provider_of(packages, &ex.executor) else {
        return Err(refuse(
            Code::Unavailable,
            format!(
                "no package here provides executor `{}` of execution {id}",
                ex.executor
            ),
        ));
    };
    if !declared {
        return Err(refuse(
            Code::Unsupported,
            format!(
                "executor `{}` does not support live output (its package `{package}` declares no control live)",
                ex.executor
            ),
        ));
    }
    let params = ExecutorLiveParams {
        executor: ex.executor.clone(),
        execution_id: id.to_owned(),
        tail,
    };
    let raw = protocol::reply(&params)?;
    let reply = packages
        .call(package, ExecutorLiveParams::METHOD, raw, LIVE_TIMEOUT)
        .await?;
    let answer: ExecutorLiveResult = serde_json::from_str(reply.get()).map_err(|e| {
        refuse(
            Code::Internal,
            format!("package `{package}` answered executor.live with something else: {e}"),
        )
    })?;
    Ok(bounded(answer, tail))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::render::CallFuture;
    use protocol::config::Config;
    use protocol::wire::LiveOutput;
    use serde_json::json;
    use std::sync::Arc;

    struct Two(Vec<(String, Manifest)>);

    impl Packages for Two {
        fn names(&self) -> Vec<&str> {
            self.0.iter().map(|(n, _)| n.as_str()).collect()
        }
        fn manifest(&self, name: &str) -> Option<&Manifest> {
            self.0.iter().find(|(n, _)| n == name).map(|(_, m)| m)
        }
        fn scopes_of(&self, _name: &str) -> Vec<String> {
            Vec::new()
        }
        fn applied(&self) -> Option<Arc<Config>> {
            None
        }
        fn call<'a>(
            &'a self,
            _name: &'a str,
            _method: &'a str,
            _params: Box<serde_json::value::RawValue>,
            _timeout: Duration,
        ) -> CallFuture<'a> {
            Box::pin(async { Err(RpcError::new(Code::Internal, "not called here")) })
        }
    }

    fn manifest(name: &str, executor: &str, controls: &[&str]) -> (String, Manifest) {
        let m = protocol::manifest::parse_manifest(
            json!({"protocol": [1], "name": name, "version": "1.0.0", "command": ["x"],
                   "provides": {"executors": [{"name": executor, "controls": controls}]}})
            .to_string()
            .as_bytes(),
        )
        .unwrap();
        (name.to_owned(), m)
    }

    #[test]
    fn the_provider_is_the_package_declaring_the_executor_with_its_control() {
        let all = Two(vec![
            manifest("shell", "shell", &["stop", "live"]),
            manifest("runner", "runner-jobs", &["stop"]),
        ]);
        assert_eq!(provider_of(&all, "shell"), Some(("shell", true)));
        assert_eq!(provider_of(&all, "runner-jobs"), Some(("runner", false)));
        assert_eq!(provider_of(&all, "nobody"), None);
    }

    #[test]
    fn a_package_answer_is_bounded_again() {
        let output = |n: usize| LiveOutput {
            name: format!("o{n}"),
            media_type: "text/plain".into(),
            size: 10,
            tail: b"0123456789".to_vec(),
        };
        let answer = ExecutorLiveResult {
            outputs: (0..MAX_OUTPUTS + 3).map(output).collect(),
        };
        let b = bounded(answer, 4);
        assert_eq!(b.outputs.len(), MAX_OUTPUTS);
        assert_eq!(b.outputs[0].tail, b"6789");
        assert_eq!(b.outputs[0].size, 10);
        let whole = bounded(
            ExecutorLiveResult {
                outputs: vec![output(0)],
            },
            64,
        );
        assert_eq!(whole.outputs[0].tail, b"0123456789");
    }
}
