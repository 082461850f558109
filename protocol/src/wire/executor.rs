//! Executors: a run's request and toolbelt, and the `executor.*` methods (H→E) with
//! `execution.persist_recovery` (E→H).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::events::{Event, Payload};
use super::operations::WaitRequest;
use super::work::{Binding, Outcome, Work};
use super::{is_false, is_zero_u32, is_zero_u64, present, WireError};

/// The per-execution toolbelt a run reaches the host through.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Toolbelt {
    /// The endpoint (a unix socket path).
    pub endpoint: String,
    /// The per-execution bearer token.
    pub token: String,
    /// The host's toolbelt directory.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub dir: String,
}

/// A run's request (extension.RunRequest / ExecutionContext).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RunRequest {
    /// The executor.
    pub executor: String,
    /// The Execution ID (unguessable, host-assigned).
    pub execution_id: String,
    /// The lease epoch.
    pub epoch: u64,
    /// The attempt number.
    #[serde(default, skip_serializing_if = "is_zero_u32")]
    pub attempt: u32,
    /// The Work.
    pub work: Work,
    /// The binding.
    pub binding: Binding,
    /// The binding's executor config.
    #[serde(default, skip_serializing_if = "Value::is_null")]
    pub config: Value,
    /// The inputs, in acceptance order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub inputs: Vec<Event>,
    /// The toolbelt endpoint and token.
    pub toolbelt: Toolbelt,
    /// The environment layers merged for the run.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<String, String>,
    /// The network hosts the run layer needs (`run.environment`'s `hosts`), for a
    /// sandboxed run's network needs.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub hosts: Vec<String>,
    /// The daemon's values of the variables the binding's pass_env names, those set.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub host_env: BTreeMap<String, String>,
    /// The acquired workspace, if the binding has a resource.
    #[serde(
        default,
        deserialize_with = "present",
        skip_serializing_if = "Option::is_none"
    )]
    pub workspace: Option<Value>,
    /// The playbook directory the host names for the run.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub playbook_dir: String,
    /// True for a dry run.
    #[serde(default, skip_serializing_if = "is_false")]
    pub dry_run: bool,
}

/// `executor.run` (H→E): start a run; its result comes from `executor.wait`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ExecutorRunParams {
    /// The run.
    pub run: RunRequest,
}

/// Result of `executor.run`: the run started.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExecutorRunResult {}

/// `executor.recover` (H→E): adopt a run after a restart from its recovery metadata, at a
/// higher epoch; never launches (not_adoptable otherwise).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ExecutorRecoverParams {
    /// The run, at its new epoch.
    pub run: RunRequest,
    /// The last recovery metadata persisted for it.
    pub recovery: Payload,
}

/// Result of `executor.recover`: adopted.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExecutorRecoverResult {}

/// A retry hint of a failed result (retry_after).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RetryHint {
    /// When to retry; empty when unknown.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub reset_at: String,
}

/// A run's usage.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Usage {
    /// Input tokens.
    #[serde(default, skip_serializing_if = "is_zero_u64")]
    pub input_tokens: u64,
    /// Output tokens.
    #[serde(default, skip_serializing_if = "is_zero_u64")]
    pub output_tokens: u64,
    /// Cache-read tokens.
    #[serde(default, skip_serializing_if = "is_zero_u64")]
    pub cached_tokens: u64,
    /// Cache-creation tokens.
    #[serde(default, skip_serializing_if = "is_zero_u64")]
    pub cache_creation_tokens: u64,
    /// Cost in USD; absent when the executor cannot know it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost_usd: Option<f64>,
}

/// `executor.wait` (H→E): observe a run until it ends; cancelling it cancels the
/// observation only.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExecutorWaitParams {
    /// The executor.
    pub executor: String,
    /// The Execution.
    pub execution_id: String,
}

/// Result of `executor.wait`: the run's result (extension.Result).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ExecutorWaitResult {
    /// How it ended.
    pub outcome: Outcome,
    /// The outcome data.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<Payload>,
    /// A one-line summary.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub summary: String,
    /// The reason of a failure.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub error: String,
    /// The Wait of a waiting outcome.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wait: Option<WaitRequest>,
    /// Inputs consumed with the run (echoed injections).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub consumed_inputs: Vec<String>,
    /// A failed result's retry hint.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_hint: Option<RetryHint>,
    /// Usage.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<Usage>,
    /// Artifacts the run produced.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub artifacts: Vec<String>,
}

impl ExecutorWaitResult {
    /// A result with only an outcome.
    pub fn new(outcome: Outcome) -> Self {
        ExecutorWaitResult {
            outcome,
            data: None,
            summary: String::new(),
            error: String::new(),
            wait: None,
            consumed_inputs: Vec::new(),
            retry_hint: None,
            usage: None,
            artifacts: Vec::new(),
        }
    }

    /// Checks that a retry hint rides only on a failed result.
    pub fn validate(&self) -> Result<(), WireError> {
        if self.retry_hint.is_some() && self.outcome != Outcome::Failed {
            return Err(WireError::new(
                "retry_hint",
                "only a failed result carries a retry hint",
            ));
        }
        Ok(())
    }
}

/// `executor.resume` (H→E): wake a waiting run as a new segment of the same attempt.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ExecutorResumeParams {
    /// The executor.
    pub executor: String,
    /// The Execution.
    pub execution_id: String,
    /// The lease epoch.
    pub epoch: u64,
    /// The inputs that woke it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub inputs: Vec<Event>,
    /// The toolbelt for the new segment.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub toolbelt: Option<Toolbelt>,
}

/// Result of `executor.resume`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExecutorResumeResult {}

/// `executor.interrupt` (H→E): signal a running run to stop its turn.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExecutorInterruptParams {
    /// The executor.
    pub executor: String,
    /// The Execution.
    pub execution_id: String,
    /// The lease epoch.
    pub epoch: u64,
    /// Why, for the record.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub reason: String,
}

/// Result of `executor.interrupt`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExecutorInterruptResult {}

/// `executor.inject` (H→E): deliver an input to a running run (not_accepting otherwise).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ExecutorInjectParams {
    /// The executor.
    pub executor: String,
    /// The Execution.
    pub execution_id: String,
    /// The lease epoch.
    pub epoch: u64,
    /// The input.
    pub event: Event,
}

/// Result of `executor.inject`: accepted for delivery.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExecutorInjectResult {}

/// `executor.forget` (H→E): drop what the executor keeps for a Work.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExecutorForgetParams {
    /// The executor.
    pub executor: String,
    /// The Work.
    pub work_id: String,
    /// The Execution, when one run is forgotten.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub execution_id: String,
}

/// Result of `executor.forget`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExecutorForgetResult {}

/// `executor.stop` (H→E): stop a run's processes and answer physical-stop evidence.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExecutorStopParams {
    /// The executor.
    pub executor: String,
    /// The Execution.
    pub execution_id: String,
    /// The lease epoch.
    pub epoch: u64,
}

/// Result of `executor.stop`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExecutorStopResult {
    /// True when no process of the run is left.
    #[serde(default, skip_serializing_if = "is_false")]
    pub stopped: bool,
    /// The evidence, for the record.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub detail: String,
}

/// `executor.attach` (H→E): the operator's command to attach to a Work's session
/// (nothing_to_attach otherwise).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ExecutorAttachParams {
    /// The executor.
    pub executor: String,
    /// The Work.
    pub work_id: String,
    /// The binding's executor config.
    #[serde(default, skip_serializing_if = "Value::is_null")]
    pub config: Value,
    /// The Work's workspace, if any.
    #[serde(
        default,
        deserialize_with = "present",
        skip_serializing_if = "Option::is_none"
    )]
    pub workspace: Option<Value>,
}

/// Result of `executor.attach` (extension.AttachSpec).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExecutorAttachResult {
    /// The command.
    pub argv: Vec<String>,
    /// Its working directory.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub dir: String,
    /// Variables to set.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<String, String>,
}

/// `executor.live` (H→E): a running attempt's output so far (not_live otherwise).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExecutorLiveParams {
    /// The executor.
    pub executor: String,
    /// The Execution.
    pub execution_id: String,
    /// How many trailing bytes of each output.
    #[serde(default, skip_serializing_if = "is_zero_u64")]
    pub tail: u64,
}

/// One output of a live run.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LiveOutput {
    /// Its name.
    pub name: String,
    /// Its media type.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub media_type: String,
    /// Its size so far.
    #[serde(default)]
    pub size: u64,
    /// Its last bytes, base64.
    #[serde(default, skip_serializing_if = "Vec::is_empty", with = "crate::b64")]
    pub tail: Vec<u8>,
}

/// Result of `executor.live`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExecutorLiveResult {
    /// The outputs.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub outputs: Vec<LiveOutput>,
}

/// `execution.persist_recovery` (E→H): persist a run's recovery metadata, fenced by epoch.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ExecutionPersistRecoveryParams {
    /// The Execution.
    pub execution_id: String,
    /// The lease epoch (a superseded one is refused, conflict).
    pub epoch: u64,
    /// The metadata.
    pub recovery: Payload,
}

/// Result of `execution.persist_recovery`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExecutionPersistRecoveryResult {}
