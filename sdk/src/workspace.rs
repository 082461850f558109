//! An executor's workspace: the binding's resource, asked of the host through the
//! run it opened (`resource.acquire` for a new segment, `resource.lookup` for a
//! resumed one), and the provider's environment layer.
//!
//! Both executors use it the same way: a binding without a resource has no
//! workspace; a refusal becomes a structured failure with no process started, whose
//! reason is the provider's code (`resource_setup_failed`, `resource_not_found`,
//! `resource_exhausted`), `invalid_config` for a resource the provider refused as
//! invalid, or `workspace_unavailable` when the host or the provider cannot be
//! reached.

use std::collections::BTreeMap;

use protocol::wire::{ProvidedResource, ResourceAcquireParams, ResourceLookupParams, RunRequest};
use protocol::{CallError, Code};
use serde_json::Value;

use crate::Host;

/// The variable naming the workspace in a run's environment.
pub const WORKSPACE_VAR: &str = "OC_WORKSPACE";

/// Why a run has no workspace: a structured failure, no process started.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    /// The failure's reason (`resource_setup_failed`, `resource_not_found`,
    /// `resource_exhausted`, `invalid_config`, `workspace_unavailable`).
    pub reason: String,
    /// What went wrong, for a person (the provider's message, which says what to
    /// free or fix).
    pub message: String,
}

impl Failure {
    /// True for a failure no retry can mend (the config is wrong).
    pub fn permanent(&self) -> bool {
        self.reason == "invalid_config"
    }

    /// `reason: message`, the run's error line.
    pub fn line(&self) -> String {
        format!("{}: {}", self.reason, self.message)
    }
}

fn failure(e: CallError) -> Failure {
    let reason = match e.code() {
        Some(c)
            if c == Code::ResourceSetupFailed.as_str()
                || c == Code::ResourceNotFound.as_str()
                || c == Code::ResourceExhausted.as_str() =>
        {
            c.to_owned()
        }
        Some(c) if c == Code::Invalid.as_str() => "invalid_config".to_owned(),
        _ => "workspace_unavailable".to_owned(),
    };
    let message = match e.rpc() {
        Some(rpc) => rpc.message.clone(),
        None => e.to_string(),
    };
    Failure { reason, message }
}

/// The run's workspace for a new segment: `None` when the binding has no resource.
/// `mode` empty takes the resource config's own default.
pub async fn acquire(
    host: &Host,
    req: &RunRequest,
    mode: &str,
    params: Value,
) -> Result<Option<ProvidedResource>, Failure> {
    if req.binding.resource.is_none() {
        return Ok(None);
    }
    host.call_typed(&ResourceAcquireParams {
        execution_id: req.execution_id.clone(),
        epoch: req.epoch,
        mode: mode.to_owned(),
        params,
    })
    .await
    .map(Some)
    .map_err(failure)
}

/// The workspace `reference` names, for a resumed segment. Never creates one.
pub async fn lookup(
    host: &Host,
    req: &RunRequest,
    reference: &str,
) -> Result<ProvidedResource, Failure> {
    host.call_typed(&ResourceLookupParams {
        execution_id: req.execution_id.clone(),
        epoch: req.epoch,
        reference: reference.to_owned(),
    })
    .await
    .map_err(failure)
}

/// The provider's environment layer as a run applies it: `OS_*` names (the
/// toolbelt's) are dropped, and so is anything not a plain variable.
pub fn provider_layer(resource: &ProvidedResource) -> BTreeMap<String, String> {
    resource
        .env
        .iter()
        .filter(|(k, v)| {
            !k.is_empty() && !k.starts_with("OS_") && !k.contains(['=', '\0']) && !v.contains('\0')
        })
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_layer_drops_toolbelt_names() {
        let r = ProvidedResource {
            env: BTreeMap::from([
                ("GIT_AUTHOR_NAME".into(), "bot".into()),
                ("OS_TOKEN".into(), "x".into()),
                ("A=B".into(), "x".into()),
            ]),
            ..ProvidedResource::default()
        };
        let layer = provider_layer(&r);
        assert_eq!(layer.keys().collect::<Vec<_>>(), ["GIT_AUTHOR_NAME"]);
    }

    #[test]
    fn refusals_keep_the_provider_code() {
        let e = CallError::Rpc(protocol::RpcError::new(
            Code::ResourceExhausted,
            "free 2 GiB under /var",
        ));
        let f = failure(e);
        assert_eq!(f.reason, "resource_exhausted");
        assert_eq!(f.line(), "resource_exhausted: free 2 GiB under /var");
        assert!(!f.permanent());
        let f = failure(CallError::Rpc(protocol::RpcError::new(
            Code::Invalid,
            "bad",
        )));
        assert!(f.permanent());
    }
}
