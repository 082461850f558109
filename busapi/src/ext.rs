//! extrunner's methods (`ext.*`): the packages, their registrations, and calls
//! to a running extension.
//!
//! [`ExtCall`] forwards one of the extension protocol's typed calls
//! ([`protocol::wire::Call`]) to a named package: its result is that call's result.
//! [`ExtCallAny`] forwards a call whose method is known only at run time (the
//! CLI's `ext call`, a route handler named in the configuration).
//!
//! The other methods: `ext.list` ([`ListRequest`]), `ext.inspect`
//! ([`InspectRequest`]), `ext.restart` ([`RestartRequest`]), `ext.webhook`
//! ([`WebhookRequest`], answered [`WebhookAnswer`]), `ext.reconcile`
//! ([`ReconcileRequest`], answered [`ReconcilePage`]), `ext.registrations`
//! ([`RegistrationsRequest`]), `ext.resource_sweep` ([`ResourceSweepRequest`]),
//! and people's actions: `ext.actions` ([`ActionsRequest`]: what every provider
//! offers on a Work) and `ext.act` ([`ActRequest`]: one action, for a person the
//! caller identified); and `ext.live` ([`LiveRequest`]: a running attempt's output
//! so far, from its executor's `executor.live`).

use crate::Call;
use protocol::wire::{
    DeliveryAccepted, HttpAnswer, IngressReconcileParams, ProviderSweepResult, SourceDecl,
    WebhookPath,
};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use serde_json::Value;

/// `ext.call` of a typed extension call: `params` go to package `name` as method
/// `C::METHOD`, and the answer is `C::Result`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, bound = "C: Serialize + DeserializeOwned")]
pub struct ExtCall<C> {
    /// The package called.
    pub name: String,
    /// The extension method (always `C::METHOD`; set by [`ExtCall::new`]).
    pub method: String,
    /// Its params.
    pub params: C,
    /// Made in a transaction: bounded, callbacks refused.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub in_transaction: bool,
    /// How long to wait for the answer (ms); extrunner's default when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u64>,
    /// Held open without a deadline (long-lived methods only, `tunnel.run`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub hold: bool,
}

impl<C: Call> ExtCall<C> {
    /// Call `C` on package `name`, with extrunner's default timeout.
    pub fn new(name: impl Into<String>, params: C) -> Self {
        ExtCall {
            name: name.into(),
            method: C::METHOD.to_owned(),
            params,
            in_transaction: false,
            timeout_ms: None,
            hold: false,
        }
    }

    /// With a timeout.
    pub fn timeout_ms(mut self, ms: u64) -> Self {
        self.timeout_ms = Some(ms);
        self
    }

    /// Held open without a deadline.
    pub fn held(mut self) -> Self {
        self.hold = true;
        self
    }
}

impl<C: Call> Call for ExtCall<C> {
    const METHOD: &'static str = EXT_CALL;
    type Result = C::Result;
}

/// `ext.call` of a method named at run time: its answer is any JSON.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExtCallAny {
    /// The package called.
    pub name: String,
    /// The extension method.
    pub method: String,
    /// Its params (`{}` when absent).
    #[serde(default)]
    pub params: Option<Value>,
    /// Made in a transaction: bounded, callbacks refused.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub in_transaction: bool,
    /// How long to wait for the answer (ms); extrunner's default when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u64>,
    /// Held open without a deadline (long-lived methods only, `tunnel.run`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub hold: bool,
}

impl Call for ExtCallAny {
    const METHOD: &'static str = EXT_CALL;
    type Result = Value;
}

/// The name of `ext.call` (served by [`ExtCallAny`]'s shape; [`ExtCall`] is its
/// typed form).
pub const EXT_CALL: &str = "ext.call";

/// `ext.registrations`: no fields.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RegistrationsRequest {}

/// The answer of `ext.registrations`.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct RegistrationsResponse {
    /// Every first handshake is done: the list is complete.
    #[serde(default)]
    pub complete: bool,
    /// The agents' plugin directory runs are given (empty for none).
    #[serde(default)]
    pub playbook_dir: String,
    /// Every package.
    #[serde(default)]
    pub extensions: Vec<Registration>,
}

/// One package's registrations.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Registration {
    /// The package.
    pub name: String,
    /// Its process state (`running`, `refused`, ...).
    #[serde(default)]
    pub state: String,
    /// The scopes its identity holds.
    #[serde(default)]
    pub scopes: Vec<String>,
    /// The surfaces schedulerd calls around a run.
    #[serde(default)]
    pub surfaces: Surfaces,
    /// Its route handlers.
    #[serde(default)]
    pub handlers: Vec<String>,
    /// Its toolbelt operations.
    #[serde(default)]
    pub operations: Vec<OperationInfo>,
    /// The resource types it provides.
    #[serde(default)]
    pub types: Vec<String>,
    /// Its executors.
    #[serde(default)]
    pub executors: Vec<ExecutorInfo>,
    /// Its periodic tasks.
    #[serde(default)]
    pub tasks: Vec<TaskInfo>,
    /// Its checks.
    #[serde(default)]
    pub checks: Vec<CheckInfo>,
    /// The configuration generation its registrations came with.
    #[serde(default)]
    pub generation: String,
    /// Bumped on every registration.
    #[serde(default)]
    pub serial: u64,
    /// Its ingress sources.
    #[serde(default)]
    pub sources: Vec<SourceDecl>,
    /// Its webhook paths.
    #[serde(default)]
    pub webhooks: Vec<WebhookPath>,
    /// The last configuration generation it refused, and why.
    #[serde(default)]
    pub refusal: Option<ConfigRefusal>,
}

/// The surfaces a package serves around a run.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Surfaces {
    /// `run.environment`.
    #[serde(default)]
    pub run_environment: bool,
    /// `segment.ended`.
    #[serde(default)]
    pub segment_end: bool,
    /// `dependency.filter`.
    #[serde(default)]
    pub dependency_filter: bool,
    /// `work.annotate`.
    #[serde(default)]
    pub annotations: bool,
    /// `operation.gate` (manifest `provides.operation_gate` with its permission).
    #[serde(default)]
    pub operation_gate: bool,
    /// `work.admit` (manifest `provides.start_gate` with permission
    /// `work.start_gate`).
    #[serde(default)]
    pub start_gate: bool,
}

/// A toolbelt operation, as registered.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct OperationInfo {
    /// The operation's name.
    pub name: String,
    /// `read` or `write` (the manifest's kind).
    #[serde(default)]
    pub kind: String,
    /// One line for the agent.
    #[serde(default)]
    pub summary: String,
    /// When to use it.
    #[serde(default)]
    pub guidance: String,
    /// Its input schema.
    #[serde(default)]
    pub input: Option<Value>,
}

/// An executor, as registered.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct ExecutorInfo {
    /// The executor's name.
    pub name: String,
    /// The pool its runs share.
    #[serde(default)]
    pub pool: String,
    /// It can inject input into a running attempt.
    #[serde(default)]
    pub inject: bool,
}

/// A periodic task, as registered.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct TaskInfo {
    /// The task's name.
    pub name: String,
    /// How often it runs.
    #[serde(default)]
    pub interval_s: u64,
}

/// A check, as registered.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct CheckInfo {
    /// The check's name.
    pub name: String,
    /// It runs without the service.
    #[serde(default)]
    pub offline: bool,
}

/// A configuration generation a package refused.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConfigRefusal {
    /// The generation (its hash).
    pub generation: String,
    /// The package's reason, with the JSON pointer it names.
    pub error: String,
}

// ---------------------------------------------------------------------------------------
// ext.webhook and ext.reconcile: deliveries through a package
// ---------------------------------------------------------------------------------------

/// `ext.webhook`: one webhook request to the owning package's `webhook.handle`, its
/// deliveries accepted durably before the answer.
///
/// Sent with the request decoded ([`WebhookDelivery`], ingressd's side: the body
/// moves into it, never copied) and served undecoded (extrunner passes
/// `webhook.handle`'s params on as they came): one shape, two views of `request`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WebhookRequest<R = Box<RawValue>> {
    /// The package that owns the path.
    pub name: String,
    /// `webhook.handle`'s params ([`protocol::wire::WebhookHandleParams`]).
    pub request: R,
}

/// `ext.webhook` as ingressd sends it: the request decoded.
pub type WebhookDelivery = WebhookRequest<protocol::wire::WebhookHandleParams>;

impl Call for WebhookDelivery {
    const METHOD: &'static str = <WebhookRequest as Call>::METHOD;
    type Result = WebhookAnswer;
}

/// The answer of `ext.webhook`: the extension's HTTP answer, sent only once the
/// deliveries it carried are durable, and what each delivery is now.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct WebhookAnswer {
    /// The HTTP answer.
    pub response: HttpAnswer,
    /// Each delivery's accepted events (the earlier ones for a redelivery), without
    /// their payloads.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub deliveries: Vec<DeliveryAccepted>,
    /// The sources of the deliveries, in order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sources: Vec<String>,
}

/// `ext.reconcile`: one page of a package's reconcile scan of one of its sources,
/// accepted before the answer.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReconcileRequest {
    /// The package.
    pub name: String,
    /// The page asked of its `ingress.reconcile`.
    pub page: IngressReconcileParams,
    /// How long the page may take (ms): 1 ms to extrunner's longest page timeout.
    pub timeout_ms: u64,
}

/// The answer of `ext.reconcile`: one page, accepted.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReconcilePage {
    /// Observations in the page.
    pub items: usize,
    /// Events they carried.
    pub events: usize,
    /// Of them, how many were new.
    pub added: usize,
    /// The next page's cursor.
    #[serde(default)]
    pub cursor: String,
    /// On the last page, the checkpoint to keep.
    #[serde(default)]
    pub checkpoint: String,
    /// True on the scan's last page.
    #[serde(default)]
    pub complete: bool,
}

// ---------------------------------------------------------------------------------------
// ext.list, ext.inspect, ext.restart: the packages
// ---------------------------------------------------------------------------------------

/// `ext.list`: no fields.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ListRequest {}

/// The answer of `ext.list`: every package, the discovery reports and the conflicts.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ListResponse {
    /// Every package, in discovery order.
    pub extensions: Vec<ExtensionSummary>,
    /// The directories discovery did not offer.
    pub reports: Vec<DiscoveryReport>,
    /// The conflicts that kept the whole set from starting.
    pub conflicts: Vec<ConflictInfo>,
}

/// One package in `ext.list`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ExtensionSummary {
    /// The package.
    pub name: String,
    /// `installed` or `bundled`.
    pub origin: String,
    /// It came with Open Conduit.
    pub bundled: bool,
    /// The manifest's version.
    pub version: String,
    /// Its process state (`running`, `refused`, `not_started`, ...).
    pub state: String,
    /// Crash restarts, across the operator's restarts.
    pub restarts: u64,
    /// The process ID while it runs.
    pub pid: Option<i32>,
    /// The protocol version its handshake agreed.
    pub protocol_version: Option<u32>,
    /// Why it is not running, or the configuration it refused.
    pub refusal: Option<String>,
}

/// A directory discovery did not offer.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct DiscoveryReport {
    /// The package name it claims (or its directory's).
    pub name: String,
    /// The directory.
    pub dir: String,
    /// `installed` or `bundled`.
    pub origin: String,
    /// `invalid`, `no_manifest`, `shadowed_bundled` or `unreadable`.
    pub kind: String,
    /// What happened, for a person.
    pub message: String,
    /// Of an invalid one: the broken rule, `null` when no rule was broken (absent for
    /// the other kinds).
    #[serde(
        default,
        deserialize_with = "present",
        skip_serializing_if = "Option::is_none"
    )]
    pub rule: Option<Option<String>>,
    /// Of an invalid one: it needs a newer Open Conduit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub needs_newer: Option<bool>,
}

/// A field that is present (even as `null`) reads as `Some`; an absent one takes
/// its default, `None`.
fn present<'de, D, T>(d: D) -> Result<Option<T>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Deserialize<'de>,
{
    T::deserialize(d).map(Some)
}

/// A conflict in the package set.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ConflictInfo {
    /// The kind (`name`, `families`, `operations`, ...).
    pub kind: String,
    /// The name claimed twice.
    pub name: String,
    /// Who claims it first.
    pub first: ClaimantInfo,
    /// Who claims it again.
    pub second: ClaimantInfo,
    /// The packages involved (one or two).
    pub packages: Vec<String>,
    /// The conflict, for a person.
    pub message: String,
}

/// Who claims a name: the host (`{"host": true}`) or a package (`{"package", "dir"}`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClaimantInfo {
    /// The host claims it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub host: bool,
    /// The package that claims it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub package: Option<String>,
    /// That package's directory.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dir: Option<String>,
}

/// `ext.inspect`: one package.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InspectRequest {
    /// The package (`not_found` for an unknown name).
    pub name: String,
}

/// The answer of `ext.inspect`: one package in detail.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ExtensionDetail {
    /// The package.
    pub name: String,
    /// `installed` or `bundled`.
    pub origin: String,
    /// The manifest's version.
    pub version: String,
    /// The manifest's title.
    pub title: Option<String>,
    /// Its process state.
    pub state: String,
    /// The protocol version its handshake agreed.
    pub protocol_version: Option<u32>,
    /// The protocol versions its manifest speaks.
    pub protocol_versions: Vec<u32>,
    /// Crash restarts, across the operator's restarts.
    pub restarts: u64,
    /// The process ID while it runs.
    pub pid: Option<i32>,
    /// How its last process ended.
    pub last_exit: Option<LastExit>,
    /// Why it is not running, or the configuration it refused.
    pub refusal: Option<String>,
    /// The manifest's permissions.
    pub permissions: Vec<String>,
    /// The manifest's command.
    pub command: Vec<String>,
    /// The package directory.
    pub dir: String,
    /// Its private state directory.
    pub state_dir: String,
    /// Its log file.
    pub log: String,
    /// The daemon variables the operator grants it.
    pub grants: Vec<String>,
    /// While it waits to restart: in how long (ms).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restart_in_ms: Option<u64>,
    /// When it was not started: the conflicts that name it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conflicts: Option<Vec<ConflictInfo>>,
}

/// How a package's last process ended.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LastExit {
    /// The exit status, for a person.
    pub status: String,
    /// `crashed`, `refused`, `stopped` or `restarted by the operator`.
    pub why: String,
}

/// `ext.restart`: stop a package and start it again (a refused one is tried again).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RestartRequest {
    /// The package.
    pub name: String,
}

/// The answer of `ext.restart`: the new state.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RestartResponse {
    /// The package.
    pub name: String,
    /// Its process state after the first handshake.
    pub state: String,
    /// The process ID when it runs.
    pub pid: Option<i32>,
    /// Why it was refused, when it was.
    pub refusal: Option<String>,
}

// ---------------------------------------------------------------------------------------
// ext.resource_sweep
// ---------------------------------------------------------------------------------------

/// `ext.resource_sweep`: sweep the spare workspaces now.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ResourceSweepRequest {
    /// Only this resource type.
    #[serde(default, rename = "type", skip_serializing_if = "Option::is_none")]
    pub resource_type: Option<String>,
    /// How long a Work must have been closed (default the periodic sweep's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub grace_s: Option<u64>,
    /// Remove closed Works' workspaces even with uncommitted changes.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub remove_dirty: bool,
}

/// The answer of `ext.resource_sweep`: one report per provider swept.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ResourceSweepResponse {
    /// The reports.
    pub sweeps: Vec<SweepReport>,
}

/// One provider's answer to a sweep.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SweepReport {
    /// The resource type.
    #[serde(rename = "type")]
    pub resource_type: String,
    /// The package that provides it.
    pub provider: String,
    /// What it removed, kept and pruned; absent when it failed.
    #[serde(default, flatten)]
    pub result: ProviderSweepResult,
    /// Why the pass failed, when it did.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub error: String,
}

/// `ext.metrics`: no fields; answers the daemon's samples ([`crate::metrics`]).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct MetricsRequest {}

crate::methods! {
    "ext.list": ListRequest => ListResponse,
    "ext.metrics": MetricsRequest => crate::metrics::MetricsText,
    "ext.inspect": InspectRequest => ExtensionDetail,
    "ext.restart": RestartRequest => RestartResponse,
    "ext.webhook": WebhookRequest => WebhookAnswer,
    "ext.reconcile": ReconcileRequest => ReconcilePage,
    "ext.registrations": RegistrationsRequest => RegistrationsResponse,
    "ext.resource_sweep": ResourceSweepRequest => ResourceSweepResponse,
    "ext.actions": ActionsRequest => protocol::wire::ActionListResult,
    "ext.act": ActRequest => protocol::wire::ActionSubmitResult,
    "ext.live": LiveRequest => protocol::wire::ExecutorLiveResult,
}

/// `ext.actions`: what every action provider offers on a Work (the host's `core`
/// first, then each package with `provides.actions` configured in the Work's scope).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ActionsRequest {
    /// The Work.
    pub work_id: String,
}

/// `ext.act`: one action on a Work, for a person the caller identified on its own
/// surface (the CLI: `cli:<user>`). Recorded as one `core.action.<action>` Event
/// whose delivery ID is `key`; the same key again does nothing again.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ActRequest {
    /// The Work.
    pub work_id: String,
    /// The provider; empty for the host's `core`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub provider: String,
    /// The action.
    pub action: String,
    /// What the person gave with it.
    #[serde(default, skip_serializing_if = "Value::is_null")]
    pub input: Value,
    /// The person with their surface (`cli:alice`): recorded as it is.
    pub caller: String,
    /// The action's identity.
    pub key: String,
}

/// `ext.live`: a running attempt's output so far. extrunner finds the execution's
/// executor in the store and forwards `executor.live` to the package that provides
/// it; the answer is that executor's: each output's name, media type, size and last
/// `tail` bytes. `not_found` for an unknown execution, `not_live` for one that is not
/// running (or whose executor has nothing of it running here), `unsupported` when
/// its executor does not declare the control `live`, `invalid` for a `tail` over
/// 64 KiB.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LiveRequest {
    /// The Execution.
    pub execution_id: String,
    /// How many trailing bytes of each output: 0 for the default (16 KiB), at most
    /// 64 KiB.
    #[serde(default)]
    pub tail: u64,
}
