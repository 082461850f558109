//! The serde wire types of the extension protocol's method params and results.
//!
//! Every typed wire method has one params struct and one result struct named after it
//! (`kv.commit` is [`KvCommitParams`] / [`KvCommitResult`]), and the params struct
//! implements [`Call`], which names the method and its result type so a caller can make
//! a typed call generically.
//!
//! Conventions (spec, "Wire format"):
//!
//! * fields are snake_case; optional fields are left out when empty, so messages stay
//!   compact, and a missing field reads as its empty value;
//! * unknown fields are ignored when reading (additive fields ship without a protocol
//!   version bump);
//! * raw JSON (an Event payload's data, configs, operation inputs) is [`serde_json::Value`];
//! * byte fields (delivery bodies, artifact chunks, live output tails) are base64 strings
//!   ([`crate::b64`]);
//! * times are RFC 3339 strings in UTC (`2026-10-25T09:00:00Z`), kept as text: the wire
//!   never interprets them beyond what the receiving side parses.
//!
//! The direction of each method (host to extension, H→E, or extension to host, E→H) is in
//! its params' doc comment.
//!
//! The types live in one module a family (`kv`, `state`, `executor`, `workspaces`, ...,
//! and the shared `events` and `work`), all re-exported here: a type's path is
//! `protocol::wire::X` whichever file holds it. This file keeps the limits, [`Call`],
//! [`WireError`], the serde helpers and the method table ([`TYPED_METHODS`]).

use std::fmt;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::Value;

mod actions;
mod annotate;
mod artifacts;
mod authorize;
mod checks;
mod control;
mod events;
mod executor;
mod gates;
mod in_transaction;
mod ingress;
mod kv;
mod lifecycle;
mod operations;
mod render;
mod routing;
mod run;
mod state;
mod timers;
mod tunnels;
mod validation;
mod view;
mod work;
mod workspaces;
pub use actions::*;
pub use annotate::*;
pub use artifacts::*;
pub use authorize::*;
pub use checks::*;
pub use control::*;
pub use events::*;
pub use executor::*;
pub use gates::*;
pub use in_transaction::*;
pub use ingress::*;
pub use kv::*;
pub use lifecycle::*;
pub use operations::*;
pub use render::*;
pub use routing::*;
pub use run::*;
pub use state::*;
pub use timers::*;
pub use tunnels::*;
pub use validation::*;
pub use view::*;
pub use work::*;
pub use workspaces::*;

// ---------------------------------------------------------------------------------------
// Limits
// ---------------------------------------------------------------------------------------

/// The largest artifact chunk one `artifact.write` carries, before base64 (MaxChunkBytes).
pub const MAX_CHUNK_BYTES: usize = 256 * 1024;
/// The largest `limit` a paged read (`kv.list`, `state.events`, `state.works`, ...) accepts.
pub const MAX_PAGE_LIMIT: u32 = 1000;
/// The hard deadline of an in-transaction method, in milliseconds.
pub const IN_TRANSACTION_DEADLINE_MILLIS: u64 = 250;

/// Work display: the longest title, in bytes.
pub const MAX_DISPLAY_TITLE_BYTES: usize = 200;
/// Work display: the longest ref (`#136`, `ENG-12`), in bytes.
pub const MAX_DISPLAY_REF_BYTES: usize = 40;
/// Work display: the longest requester, in bytes.
pub const MAX_DISPLAY_REQUESTER_BYTES: usize = 100;
/// Work display: the longest link label, in bytes.
pub const MAX_DISPLAY_LINK_LABEL_BYTES: usize = 60;
/// Work display: the longest link URL, in bytes.
pub const MAX_DISPLAY_URL_BYTES: usize = 2048;
/// Work display: the most links one display carries.
pub const MAX_DISPLAY_LINKS: usize = 8;
/// The longest wait description, in bytes; longer text is clipped, never refused.
pub const MAX_WAIT_DESCRIPTION_BYTES: usize = 200;
/// The longest wait progress line, in bytes; longer text is clipped, never refused.
pub const MAX_WAIT_PROGRESS_BYTES: usize = 120;

// ---------------------------------------------------------------------------------------
// The typed-call trait
// ---------------------------------------------------------------------------------------

/// A wire method's params type: names the method and the type of its result.
///
/// ```
/// use protocol::wire::{Call, KvGetParams};
/// assert_eq!(<KvGetParams as Call>::METHOD, "kv.get");
/// ```
pub trait Call: Serialize + DeserializeOwned {
    /// The JSON-RPC method name.
    const METHOD: &'static str;
    /// The method's result type.
    type Result: Serialize + DeserializeOwned;
}

// ---------------------------------------------------------------------------------------
// Errors of the validation helpers
// ---------------------------------------------------------------------------------------

/// A wire value that breaks one of the protocol's limits or rules. It names the field and
/// the rule, never the offending text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WireError {
    /// The field, as a path (`title`, `links[2].url`, `limit`).
    pub field: String,
    /// What is wrong, naming the limit.
    pub reason: String,
}

impl WireError {
    fn new(field: impl Into<String>, reason: impl Into<String>) -> Self {
        WireError {
            field: field.into(),
            reason: reason.into(),
        }
    }
}

impl fmt::Display for WireError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.field, self.reason)
    }
}

impl std::error::Error for WireError {}

/// Checks a paged read's `limit` (0 means the receiver's default).
pub fn check_page_limit(limit: u32) -> Result<(), WireError> {
    if limit > MAX_PAGE_LIMIT {
        return Err(WireError::new(
            "limit",
            format!("{limit} is over the maximum of {MAX_PAGE_LIMIT}"),
        ));
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------
// serde helpers
// ---------------------------------------------------------------------------------------

pub(crate) fn is_false(v: &bool) -> bool {
    !*v
}

fn is_zero_u64(v: &u64) -> bool {
    *v == 0
}

fn is_zero_u32(v: &u32) -> bool {
    *v == 0
}

/// An `Option<Value>` that reads a present `null` as `Some(Value::Null)` and only an
/// absent field as `None` (use with `default`).
fn present<'de, D>(deserializer: D) -> Result<Option<Value>, D::Error>
where
    D: Deserializer<'de>,
{
    Value::deserialize(deserializer).map(Some)
}

// ---------------------------------------------------------------------------------------
// Shared types: events, payloads, emissions
// ---------------------------------------------------------------------------------------
// ---------------------------------------------------------------------------------------
// Shared types: Work, executions, waits, scopes, timers
// ---------------------------------------------------------------------------------------
// ---------------------------------------------------------------------------------------
// Lifecycle
// ---------------------------------------------------------------------------------------
// ---------------------------------------------------------------------------------------
// State reads
// ---------------------------------------------------------------------------------------
// ---------------------------------------------------------------------------------------
// Derived events and control
// ---------------------------------------------------------------------------------------
// ---------------------------------------------------------------------------------------
// Ingress
// ---------------------------------------------------------------------------------------
// ---------------------------------------------------------------------------------------
// Routing
// ---------------------------------------------------------------------------------------
// ---------------------------------------------------------------------------------------
// In-transaction methods (pure, deterministic, 250 ms, no callbacks)
// ---------------------------------------------------------------------------------------
// ---------------------------------------------------------------------------------------
// Timers
// ---------------------------------------------------------------------------------------
// ---------------------------------------------------------------------------------------
// Operations
// ---------------------------------------------------------------------------------------
// ---------------------------------------------------------------------------------------
// Executors
// ---------------------------------------------------------------------------------------
// ---------------------------------------------------------------------------------------
// Artifacts
// ---------------------------------------------------------------------------------------
// ---------------------------------------------------------------------------------------
// Secrets, tasks, checks
// ---------------------------------------------------------------------------------------
// ---------------------------------------------------------------------------------------
// Validation
// ---------------------------------------------------------------------------------------
// ---------------------------------------------------------------------------------------
// Workspaces: resource providers
// ---------------------------------------------------------------------------------------
// ---------------------------------------------------------------------------------------
// Tunnels
// ---------------------------------------------------------------------------------------
// ---------------------------------------------------------------------------------------
// Method names
// ---------------------------------------------------------------------------------------

macro_rules! calls {
    ($($params:ty => $result:ty : $method:literal;)*) => {
        $(
            impl Call for $params {
                const METHOD: &'static str = $method;
                type Result = $result;
            }
        )*
        /// Every method this module types, in catalogue order.
        pub const TYPED_METHODS: &[&str] = &[$($method),*];
    };
}

calls! {
    InitializeParams => InitializeResult: "initialize";
    ConfigureParams => ConfigureResult: "configure";
    ShutdownParams => ShutdownResult: "shutdown";
    KvGetParams => KvGetResult: "kv.get";
    KvListParams => KvListResult: "kv.list";
    KvCommitParams => KvCommitResult: "kv.commit";
    StateWorkParams => StateWorkResult: "state.work";
    StateWorksParams => StateWorksResult: "state.works";
    StateExecutionsParams => StateExecutionsResult: "state.executions";
    StateWaitsParams => StateWaitsResult: "state.waits";
    StateEventParams => StateEventResult: "state.event";
    StateEventsParams => StateEventsResult: "state.events";
    StateWorkEventsParams => StateWorkEventsResult: "state.work_events";
    StateSequenceParams => StateSequenceResult: "state.sequence";
    StateScopesParams => StateScopesResult: "state.scopes";
    StateScopeParams => StateScopeResult: "state.scope";
    StateTimersParams => StateTimersResult: "state.timers";
    EventAcceptParams => EventAcceptResult: "event.accept";
    WorkCancelParams => WorkCancelResult: "work.cancel";
    WaitProgressParams => WaitProgressResult: "wait.progress";
    WebhookHandleParams => WebhookHandleResult: "webhook.handle";
    IngressPushParams => IngressPushResult: "ingress.push";
    IngressDeliverParams => IngressDeliverResult: "ingress.deliver";
    IngressReconcileParams => IngressReconcileResult: "ingress.reconcile";
    RouteMatchParams => RouteMatchResult: "route.match";
    RouteSamplesParams => RouteSamplesResult: "route.samples";
    RecurrenceNextParams => RecurrenceNextResult: "recurrence.next";
    WorkKindTriggerParams => WorkKindTriggerResult: "work_kind.trigger";
    DependencyFilterParams => DependencyFilterResult: "dependency.filter";
    EventRenderParams => EventRenderResult: "event.render";
    EventRenderOwnedParams => EventRenderOwnedResult: "event.render_owned";
    RunEnvironmentParams => RunEnvironmentResult: "run.environment";
    RunCredentialParams => RunCredentialResult: "run.credential";
    SegmentEndedParams => SegmentEndedResult: "segment.ended";
    WorkAnnotateParams => WorkAnnotateResult: "work.annotate";
    ScopeAuthorizeParams => ScopeAuthorizeResult: "scope.authorize";
    ActionSubmitParams => ActionSubmitResult: "action.submit";
    ActionListParams => ActionListResult: "action.list";
    WorkActionsParams => WorkActionsResult: "work.actions";
    WorkActParams => WorkActResult: "work.act";
    ViewRenderParams => ViewRenderResult: "view.render";
    OperationGateParams => OperationGateResult: "operation.gate";
    WorkAdmitParams => WorkAdmitResult: "work.admit";
    WorkSettleHoldParams => WorkSettleHoldResult: "work.settle_hold";
    EmitCommitParams => EmitCommitResult: "emit.commit";
    TimerArmParams => TimerArmResult: "timer.arm";
    TimerCancelParams => TimerCancelResult: "timer.cancel";
    OperationCallParams => OperationCallResult: "operation.call";
    OperationWaitParams => OperationWaitResult: "operation.wait";
    OperationEmitParams => OperationEmitResult: "operation.emit";
    ExecutorRunParams => ExecutorRunResult: "executor.run";
    ExecutorRecoverParams => ExecutorRecoverResult: "executor.recover";
    ExecutorWaitParams => ExecutorWaitResult: "executor.wait";
    ExecutorResumeParams => ExecutorResumeResult: "executor.resume";
    ExecutorInterruptParams => ExecutorInterruptResult: "executor.interrupt";
    ExecutorInjectParams => ExecutorInjectResult: "executor.inject";
    ExecutorForgetParams => ExecutorForgetResult: "executor.forget";
    ExecutorStopParams => ExecutorStopResult: "executor.stop";
    ExecutorAttachParams => ExecutorAttachResult: "executor.attach";
    ExecutorLiveParams => ExecutorLiveResult: "executor.live";
    ExecutionPersistRecoveryParams => ExecutionPersistRecoveryResult: "execution.persist_recovery";
    ArtifactCreateParams => ArtifactCreateResult: "artifact.create";
    ArtifactWriteParams => ArtifactWriteResult: "artifact.write";
    ArtifactCommitParams => ArtifactCommitResult: "artifact.commit";
    ArtifactAbortParams => ArtifactAbortResult: "artifact.abort";
    SecretResolveParams => SecretResolveResult: "secret.resolve";
    TaskRunParams => TaskRunResult: "task.run";
    CheckRunParams => CheckRunResult: "check.run";
    ValidateParams => ValidateResult: "validate";
    ResourceAcquireParams => ResourceAcquireResult: "resource.acquire";
    ResourceLookupParams => ResourceLookupResult: "resource.lookup";
    ProviderAcquireParams => ProviderAcquireResult: "provider.acquire";
    ProviderLookupParams => ProviderLookupResult: "provider.lookup";
    ProviderReconcileParams => ProviderReconcileResult: "provider.reconcile";
    ProviderSweepParams => ProviderSweepResult: "provider.sweep";
    ProviderOwnerStatusParams => ProviderOwnerStatusResult: "provider.owner_status";
    TunnelRunParams => TunnelRunResult: "tunnel.run";
    TunnelUrlParams => TunnelUrlResult: "tunnel.url";
}

/// The four in-transaction methods (bounded, pure, no callbacks while one is served).
pub const IN_TRANSACTION_METHODS: &[&str] = &[
    RecurrenceNextParams::METHOD,
    WorkKindTriggerParams::METHOD,
    DependencyFilterParams::METHOD,
    EmitCommitParams::METHOD,
];
