//! The scoped host: serves an extension's calls to the host.
//!
//! Every extension-to-host call is checked against the [`Identity`] the host
//! bound when it started the process, never against anything the extension
//! sends, before it is forwarded to storaged on the bus. In order:
//!
//! 1. a host-to-extension method sent to the host, or a method the catalogue does
//!    not know, is method-not-found;
//! 2. a method the manifest does not enable ([`Manifest::enables`]), or a
//!    permission-gated one without its permission, is `undeclared`, naming the
//!    method and what would enable it;
//! 3. the method's own checks (namespaces, families, sources, payload schemas,
//!    scopes, recurrences, connections), then the call goes to storaged with
//!    `owner`, `families` and `scopes` filled in by the host. storaged checks the
//!    namespace (and families and scopes) again.
//!
//! Reads outside the extension's scopes answer as though the record did not
//! exist (`not_found`, or an empty page), so a read is never an existence
//! oracle.
//!
//! `event.render_owned` renders an executor's Events through the extensions that own
//! their families ([`crate::render`]).
//!
//! `action.submit` and `state.works` are served by [`crate::actions`].
//!
//! `secret.resolve` reads the references (`env:`/`file:`) of a connection bound to
//! the extension's entries in a configured scope; `ingress.push` and
//! `ingress.deliver` accept deliveries of the sources the last configure registered
//! ([`crate::ingress`]).
//!
//! Not built yet (answered `unsupported` naming the method): `timer.arm` without `at` (it needs
//! `recurrence.next`, which schedulerd serves), `work.cancel`, `state.work`,
//! `state.executions`, `state.waits`, `state.scopes`,
//! `state.scope` and every other catalogued extension-to-host method.
//! Artifacts are forwarded as they are: the checks that bind them to a run the
//! host opened for this process come with the execution host.

use std::sync::Arc;

use crate::configuration::Configuration;
use crate::render::Owners;
use crate::tunnels::TunnelRuns;
use crate::workspaces::Workspaces;
use daemon::bus::Bus;
use protocol::catalogue::{self, Direction, Surface};
use protocol::manifest::{Manifest, PayloadStatus};
use protocol::wire::{
    self, ArtifactAbortParams, ArtifactAbortResult, ArtifactCommitParams, ArtifactCommitResult,
    ArtifactCreateParams, ArtifactCreateResult, ArtifactWriteParams, ArtifactWriteResult,
    DeliveryAccepted, Emission, EmissionResult, EventAcceptParams, IngressDeliverParams,
    IngressPushParams, KvCheck, KvCommitParams, KvCommitResult, KvDelete, KvExpect, KvGetParams,
    KvGetResult, KvListParams, KvListResult, KvPut, SecretResolveParams, SecretResolveResult,
    StateEventParams, StateEventResult, StateEventsParams, StateEventsResult, StateSequenceResult,
    StateTimersParams, StateTimersResult, StateWorkEventsParams, TimerArmParams, TimerArmResult,
    TimerCancelParams, TimerCancelResult, WaitProgressParams, WaitProgressResult,
};

/// The most secret names one `secret.resolve` may ask for.
pub const MAX_SECRET_NAMES: usize = 64;
use protocol::{BoxFuture, CallError, Code, Handler, Reply, Request, RpcError};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

pub use crate::identity::{
    check_emission, check_payload, declared_family, own_namespace, own_source, BoundIdentity,
    Identity, RESERVED_NAMESPACE,
};

/// The handler serving one extension's calls to the host
/// ([`crate::process::SupervisorOptions::handler`]).
pub struct ScopedHost {
    identity: Arc<BoundIdentity>,
    bus: Bus,
    configuration: Arc<Configuration>,
    workspaces: Option<Arc<Workspaces>>,
    tunnels: Option<Arc<TunnelRuns>>,
    owners: Option<Arc<Owners>>,
}

impl ScopedHost {
    /// Serve the extension bound to `identity`, reaching storaged through `bus`.
    pub fn new(identity: Arc<BoundIdentity>, bus: Bus) -> ScopedHost {
        ScopedHost {
            identity,
            bus,
            configuration: Arc::new(Configuration::default()),
            workspaces: None,
            tunnels: None,
            owners: None,
        }
    }

    /// The same host, serving `event.render_owned` through the extensions of `owners`
    /// ([`crate::render`]).
    pub fn with_owners(mut self, owners: Arc<Owners>) -> ScopedHost {
        self.owners = Some(owners);
        self
    }

    /// The same host, forwarding `tunnel.url` to tunneld for the runs in `tunnels`.
    pub fn with_tunnels(mut self, tunnels: Arc<TunnelRuns>) -> ScopedHost {
        self.tunnels = Some(tunnels);
        self
    }

    /// The same host, serving `resource.*` and `provider.owner_status` through
    /// `workspaces`.
    pub fn with_workspaces(mut self, workspaces: Arc<Workspaces>) -> ScopedHost {
        self.workspaces = Some(workspaces);
        self
    }

    /// The same host, reading the package's configuration (secret references,
    /// registered sources) from `configuration`.
    pub fn with_configuration(mut self, configuration: Arc<Configuration>) -> ScopedHost {
        self.configuration = configuration;
        self
    }

    /// The configuration it reads.
    pub fn configuration(&self) -> &Arc<Configuration> {
        &self.configuration
    }

    /// The bus it forwards to.
    pub fn bus(&self) -> &Bus {
        &self.bus
    }

    /// The identity it serves.
    pub fn identity(&self) -> &Arc<BoundIdentity> {
        &self.identity
    }
}

impl Handler for ScopedHost {
    fn call(&self, request: Request) -> BoxFuture<Result<Reply, RpcError>> {
        let identity = self.identity.current();
        let bus = self.bus.clone();
        let configuration = self.configuration.clone();
        let workspaces = self.workspaces.clone();
        let tunnels = self.tunnels.clone();
        let owners = self.owners.clone();
        Box::pin(async move {
            if request.method == "event.render_owned" {
                admit(&identity.manifest, &request.method)?;
                let p = request.params()?;
                let r = crate::render::render_owned(&identity, &bus, owners.as_deref(), p).await?;
                return protocol::reply(&r);
            }
            if request.method == "tunnel.url" {
                admit(&identity.manifest, &request.method)?;
                return tunnel_url(&identity, &bus, tunnels.as_deref(), &request).await;
            }
            serve(
                &identity,
                &bus,
                &configuration,
                workspaces.as_deref(),
                &request,
            )
            .await
        })
    }
}

/// The most bytes of a `tunnel.url` request forwarded.
pub const MAX_TUNNEL_URL_REQUEST: usize = 4096;

/// `tunnel.url`: forwarded to tunneld (`tunnel.url` on the bus) only when it quotes a
/// run this package is running now; `conflict` otherwise (spec: Crash and reconnect).
async fn tunnel_url(
    identity: &Identity,
    bus: &Bus,
    tunnels: Option<&TunnelRuns>,
    request: &Request,
) -> Result<Reply, RpcError> {
    if request.params.get().len() > MAX_TUNNEL_URL_REQUEST {
        return Err(RpcError::new(
            Code::Invalid,
            format!("a tunnel.url request is at most {MAX_TUNNEL_URL_REQUEST} bytes"),
        ));
    }
    let p: wire::TunnelUrlParams = request.params()?;
    let Some(tunnels) = tunnels else {
        return Err(RpcError::new(
            Code::Unsupported,
            "tunnel.url is not served by this host",
        ));
    };
    if !tunnels.holds(&identity.name, &p.run_id) {
        return Err(RpcError::new(
            Code::Conflict,
            format!(
                "tunnel run {:?} is not one `{}` is running for the host",
                p.run_id, identity.name
            ),
        ));
    }
    let answer = bus
        .call(
            "tunnel.url",
            &json!({"run_id": p.run_id, "url": p.url, "provider_package": identity.name}),
        )
        .await
        .map_err(|e| match e {
            CallError::Rpc(err) => err,
            other => RpcError::new(Code::Unavailable, format!("tunneld: {other}")),
        })?;
    protocol::reply(&answer)
}

/// Whether `identity` may call `method` at all: method-not-found for a method
/// the host does not serve (unknown, or host-to-extension), `undeclared` for one
/// its manifest does not enable.
pub fn admit(manifest: &Manifest, method: &str) -> Result<(), RpcError> {
    let Some(m) = catalogue::method(method) else {
        return Err(RpcError::method_not_found(method));
    };
    if m.direction != Direction::ExtensionToHost {
        return Err(RpcError::method_not_found(method));
    }
    if manifest.enables(method) {
        return Ok(());
    }
    let needs = match m.permission {
        Some(p) if !manifest.has_permission(p) => {
            format!("the permission {p:?} in the manifest's permissions")
        }
        _ => describe(m.surface),
    };
    Err(RpcError::new(
        Code::Undeclared,
        format!("{method} is not enabled by the manifest: it needs {needs}"),
    ))
}

/// What declares a surface, for a person.
fn describe(surface: Surface) -> String {
    let s = match surface {
        Surface::Always => "nothing",
        Surface::Permission => "its permission",
        Surface::Families => "provides.families",
        Surface::Ingress => "an extension type with ingress",
        Surface::Webhooks => "an extension type with webhooks",
        Surface::Routes => "provides.routes",
        Surface::RouteSamples => "a route handler with samples",
        Surface::WorkKinds => "provides.work_kinds",
        Surface::WorkKindTrigger => "a work kind with trigger",
        Surface::Recurrences => "provides.recurrences",
        Surface::Operations(kind) => {
            return format!(
                "an operation of kind {:?} in provides.operations",
                kind.as_str()
            )
        }
        Surface::EmitCommit => "an emit operation with commit",
        Surface::DependencyFilter => "provides.dependency_filter",
        Surface::OperationGate => "provides.operation_gate",
        Surface::StartGate => "provides.start_gate",
        Surface::Targets => "provides.targets",
        Surface::SegmentEnd => "provides.segment_end",
        Surface::Executors => "provides.executors",
        Surface::ExecutorLabel(label) => return format!("an executor labelled {label}"),
        Surface::ExecutorControl(control) => {
            return format!("an executor with the control {control}")
        }
        Surface::Resources => "provides.resources",
        Surface::ResourceSweep => "a resource type with sweep",
        Surface::Sandboxes => "provides.sandboxes",
        Surface::Containers => "provides.containers",
        Surface::ContainerForward => "a container type with forward",
        Surface::Tunnels => "provides.tunnels",
        Surface::Tasks => "provides.tasks",
        Surface::Checks => "provides.checks",
        Surface::Probes => "provides.probes",
        Surface::ConfigCandidate => "provides.config_candidate",
        Surface::Exporter => "provides.exporter",
        Surface::RunEnvironment => "provides.run_environment",
        Surface::Annotations => "provides.annotations",
        Surface::Actions => "provides.actions",
        Surface::Panels => "provides.panels",
        Surface::Setup => "provides.setup",
    };
    s.to_string()
}

async fn serve(
    identity: &Identity,
    bus: &Bus,
    configuration: &Configuration,
    workspaces: Option<&Workspaces>,
    request: &Request,
) -> Result<Reply, RpcError> {
    let method = request.method.as_str();
    admit(&identity.manifest, method)?;
    let host = Scoped {
        identity,
        bus,
        configuration,
    };
    match method {
        "kv.get" => protocol::reply(&host.kv_get(request.params()?).await?),
        "kv.list" => protocol::reply(&host.kv_list(request.params()?).await?),
        "kv.commit" => protocol::reply(&host.kv_commit(request.params()?).await?),
        "event.accept" => protocol::reply(&host.event_accept(request.params()?).await?),
        "state.event" => protocol::reply(&host.state_event(request.params()?).await?),
        "state.events" => protocol::reply(&host.state_events(request.params()?).await?),
        "state.work_events" => protocol::reply(&host.state_work_events(request.params()?).await?),
        "state.sequence" => protocol::reply(&host.state_sequence().await?),
        "state.timers" => protocol::reply(&host.state_timers(request.params()?).await?),
        "state.works" => {
            protocol::reply(&crate::actions::state_works(identity, bus, request.params()?).await?)
        }
        "action.submit" => {
            protocol::reply(&crate::actions::submit(identity, bus, request.params()?).await?)
        }
        "timer.arm" => protocol::reply(&host.timer_arm(request.params()?).await?),
        "wait.progress" => protocol::reply(&host.wait_progress(request.params()?).await?),
        "timer.cancel" => protocol::reply(&host.timer_cancel(request.params()?).await?),
        "artifact.create" => protocol::reply(&host.artifact_create(request.params()?).await?),
        "artifact.write" => protocol::reply(&host.artifact_write(request.params()?).await?),
        "artifact.commit" => protocol::reply(&host.artifact_commit(request.params()?).await?),
        "artifact.abort" => protocol::reply(&host.artifact_abort(request.params()?).await?),
        "secret.resolve" => protocol::reply(&host.secret_resolve(request.params()?)?),
        "scope.authorize" => protocol::reply(&host.scope_authorize(request.params()?)?),
        "resource.acquire" | "resource.lookup" | "provider.owner_status" => {
            let Some(ws) = workspaces else {
                return Err(RpcError::new(
                    Code::Unsupported,
                    format!("{method} is not served by this host"),
                ));
            };
            let (name, peer) = (identity.name.as_str(), &request.peer);
            match method {
                "resource.acquire" => {
                    protocol::reply(&ws.acquire(name, peer, request.params()?).await?)
                }
                "resource.lookup" => {
                    protocol::reply(&ws.lookup(name, peer, request.params()?).await?)
                }
                _ => protocol::reply(&ws.owner_status(name, peer, request.params()?).await?),
            }
        }
        "sandbox.plan" | "sandbox.adopt" => {
            let Some(ws) = workspaces else {
                return Err(RpcError::new(
                    Code::Unsupported,
                    format!("{method} is not served by this host"),
                ));
            };
            let (name, peer) = (identity.name.as_str(), &request.peer);
            if method == "sandbox.plan" {
                protocol::reply(&ws.sandbox_plan(name, peer, request.params()?).await?)
            } else {
                protocol::reply(&ws.sandbox_adopt(name, peer, request.params()?).await?)
            }
        }
        "execution.persist_recovery" => {
            let p: wire::ExecutionPersistRecoveryParams = request.params()?;
            protocol::reply(&host.persist_recovery(p).await?)
        }
        "ingress.push" => {
            let p: IngressPushParams = request.params()?;
            protocol::reply(&host.ingress(p.delivery).await?)
        }
        "ingress.deliver" => {
            let p: IngressDeliverParams = request.params()?;
            protocol::reply(&host.ingress(p.delivery).await?)
        }
        other => Err(RpcError::new(
            Code::Unsupported,
            format!("{other} is not served by this host yet"),
        )),
    }
}

/// The payload read gate, applied before any call that decides on an Event
/// (`route.match`, `dependency.filter`, `event.render`): an Event whose payload
/// is foreign, current or upcast passes verbatim; one that is retired, newer or
/// undeclared is withheld (`None`). The schema is read from `payload.schema` (the
/// wire Event) or, failing that, `schema` (storaged's envelope).
pub fn gate_event(manifest: &Manifest, event: &Value) -> Option<Value> {
    if event_payload_status(manifest, event).readable() {
        Some(event.clone())
    } else {
        None
    }
}

/// [`gate_event`] for a typed wire Event.
pub fn gate_wire_event(manifest: &Manifest, event: wire::Event) -> Option<wire::Event> {
    manifest
        .payload_status(Some(&event.payload.schema))
        .readable()
        .then_some(event)
}

/// How the payload of `event` (JSON) stands for `manifest`.
pub fn event_payload_status(manifest: &Manifest, event: &Value) -> PayloadStatus {
    let schema = event
        .get("payload")
        .and_then(|p| p.get("schema"))
        .and_then(Value::as_str)
        .or_else(|| event.get("schema").and_then(Value::as_str));
    manifest.payload_status(schema)
}

// ---------------------------------------------------------------------------------------
// storaged's shapes
// ---------------------------------------------------------------------------------------

#[derive(Serialize)]
struct StoreCheck {
    namespace: String,
    key: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    version: Option<String>,
    absent: bool,
}

#[derive(Serialize)]
struct StoreEntry {
    namespace: String,
    key: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    value: Option<Value>,
}

#[derive(Serialize)]
struct StoreEventInput {
    scope_id: String,
    #[serde(rename = "type")]
    event_type: String,
    source: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    delivery_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    schema: Option<String>,
    payload: Value,
    keys: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    occurred_at: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    parent_id: Option<String>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct StoredEvent {
    id: String,
    seq: i64,
    scope_id: String,
    #[serde(rename = "type")]
    event_type: String,
    source: String,
    delivery_id: Option<String>,
    schema: Option<String>,
    payload: Value,
    keys: Vec<String>,
    parent_id: Option<String>,
    root_id: String,
    depth: i64,
    execution_id: Option<String>,
    occurred_at: Option<String>,
    accepted_at: String,
}

impl From<StoredEvent> for wire::Event {
    fn from(e: StoredEvent) -> wire::Event {
        wire::Event {
            id: e.id,
            sequence: u64::try_from(e.seq).unwrap_or(0),
            event_type: e.event_type,
            source: e.source,
            delivery_id: e.delivery_id.unwrap_or_default(),
            scope_id: e.scope_id,
            keys: e.keys,
            payload: wire::Payload {
                schema: e.schema.unwrap_or_default(),
                data: e.payload,
            },
            occurred_at: e.occurred_at.unwrap_or_default(),
            accepted_at: e.accepted_at,
            parent_id: e.parent_id.unwrap_or_default(),
            root_id: e.root_id,
            depth: u32::try_from(e.depth).unwrap_or(u32::MAX),
            execution_id: e.execution_id.unwrap_or_default(),
        }
    }
}

#[derive(Deserialize)]
struct StoredEventAnswer {
    event: StoredEvent,
}

/// The Event `id` as accepted, read from the store in `scopes` (`not_found` outside
/// them, as for an absent one).
pub(crate) async fn read_event(
    bus: &Bus,
    id: &str,
    scopes: &[String],
) -> Result<wire::Event, RpcError> {
    let answer = bus
        .call("store.event", &json!({"id": id, "scopes": scopes}))
        .await
        .map_err(|e| store_error("store.event", e))?;
    let read: StoredEventAnswer = serde_json::from_value(answer)
        .map_err(|e| RpcError::unauthored(format_args!("the answer to store.event: {e}")))?;
    Ok(read.event.into())
}

#[derive(Deserialize)]
struct StoredEventsPage {
    #[serde(default)]
    events: Vec<StoredEvent>,
}

#[derive(Deserialize)]
struct StoredEmission {
    #[serde(default)]
    event: Option<StoredRef>,
    #[serde(default)]
    added: bool,
    #[serde(default)]
    refused: Option<String>,
}

#[derive(Deserialize)]
struct StoredRef {
    id: String,
    seq: i64,
}

#[derive(Deserialize)]
struct StoredCommit {
    #[serde(default)]
    emissions: Vec<StoredEmission>,
}

#[derive(Deserialize)]
struct StoredAccepted {
    id: String,
    seq: i64,
    added: bool,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct StoredTimer {
    id: String,
    kind: String,
    scope_id: String,
    key: String,
    due_at: String,
    spec: Value,
}

#[derive(Deserialize)]
struct StoredTimerArm {
    timer: StoredTimer,
}

#[derive(Deserialize)]
struct StoredTimersPage {
    #[serde(default)]
    timers: Vec<StoredTimer>,
    #[serde(default)]
    next: String,
}

fn limit(limit: u32) -> Option<u32> {
    (limit > 0).then_some(limit)
}

fn after(after: u64) -> i64 {
    i64::try_from(after).unwrap_or(i64::MAX)
}

fn invalid(e: wire::WireError) -> RpcError {
    RpcError::new(Code::Invalid, e.to_string())
}

/// A call's answer as the extension sees it: storaged's authored errors pass on,
/// anything else is `unavailable` or `internal`.
fn store_error(method: &str, e: CallError) -> RpcError {
    match e {
        CallError::Rpc(e) => e,
        CallError::Transport(_) | CallError::Timeout(_) | CallError::Cancelled => {
            RpcError::new(Code::Unavailable, format!("the store is unavailable ({e})"))
        }
        other => RpcError::unauthored(format_args!("{method}: {other}")),
    }
}

/// The prefix of the extension's timer keys.
fn timer_key(name: &str, key: &str) -> String {
    format!("{name}:{key}")
}

// ---------------------------------------------------------------------------------------
// The methods
// ---------------------------------------------------------------------------------------

struct Scoped<'a> {
    identity: &'a Identity,
    bus: &'a Bus,
    configuration: &'a Configuration,
}

impl Scoped<'_> {
    fn name(&self) -> &str {
        &self.identity.name
    }

    async fn store<T: DeserializeOwned>(&self, method: &str, params: Value) -> Result<T, RpcError> {
        self.store_typed(method, &params).await
    }

    /// [`Scoped::store`] with params of any serializable type.
    async fn store_typed<P: Serialize + ?Sized, T: DeserializeOwned>(
        &self,
        method: &str,
        params: &P,
    ) -> Result<T, RpcError> {
        let answer = self
            .bus
            .call(method, params)
            .await
            .map_err(|e| store_error(method, e))?;
        serde_json::from_value(answer)
            .map_err(|e| RpcError::unauthored(format_args!("the answer to {method}: {e}")))
    }

    fn checks(&self, checks: Vec<KvCheck>) -> Result<Vec<StoreCheck>, RpcError> {
        checks
            .into_iter()
            .map(|c| {
                let (version, absent) = match c.expect {
                    KvExpect::Version(v) => (Some(v), false),
                    KvExpect::Absent => (None, true),
                };
                Ok(StoreCheck {
                    namespace: own_namespace(self.name(), &c.namespace)?,
                    key: c.key,
                    version,
                    absent,
                })
            })
            .collect()
    }

    fn puts(&self, puts: Vec<KvPut>) -> Result<Vec<StoreEntry>, RpcError> {
        puts.into_iter()
            .map(|p| {
                Ok(StoreEntry {
                    namespace: own_namespace(self.name(), &p.namespace)?,
                    key: p.key,
                    value: Some(p.value),
                })
            })
            .collect()
    }

    fn deletes(&self, deletes: Vec<KvDelete>) -> Result<Vec<StoreEntry>, RpcError> {
        deletes
            .into_iter()
            .map(|d| {
                Ok(StoreEntry {
                    namespace: own_namespace(self.name(), &d.namespace)?,
                    key: d.key,
                    value: None,
                })
            })
            .collect()
    }

    fn emission(&self, e: Emission) -> Result<StoreEventInput, RpcError> {
        check_emission(self.identity, &e)?;
        let some = |s: String| (!s.is_empty()).then_some(s);
        Ok(StoreEventInput {
            scope_id: e.scope_id,
            event_type: e.event_type,
            source: e.source,
            delivery_id: some(e.delivery_id),
            schema: some(e.payload.schema),
            payload: e.payload.data,
            keys: e.keys,
            occurred_at: some(e.occurred_at),
            parent_id: some(e.parent_id),
        })
    }

    /// The whole Event just accepted, read back in the extension's scopes.
    async fn accepted(&self, id: String, seq: i64) -> wire::Event {
        let read: Result<StoredEventAnswer, _> = self
            .store(
                "store.event",
                json!({"id": id, "scopes": self.identity.scopes}),
            )
            .await;
        match read {
            Ok(a) => a.event.into(),
            Err(_) => wire::Event {
                id,
                sequence: u64::try_from(seq).unwrap_or(0),
                ..wire::Event::default()
            },
        }
    }

    async fn kv_get(&self, p: KvGetParams) -> Result<KvGetResult, RpcError> {
        let namespace = own_namespace(self.name(), &p.namespace)?;
        self.store(
            "store.kv_get",
            json!({"owner": self.name(), "namespace": namespace, "key": p.key}),
        )
        .await
    }

    async fn kv_list(&self, p: KvListParams) -> Result<KvListResult, RpcError> {
        p.validate().map_err(invalid)?;
        let namespace = own_namespace(self.name(), &p.namespace)?;
        self.store(
            "store.kv_list",
            json!({"owner": self.name(), "namespace": namespace, "prefix": p.prefix,
                "after": p.after, "limit": limit(p.limit)}),
        )
        .await
    }

    async fn kv_commit(&self, p: KvCommitParams) -> Result<KvCommitResult, RpcError> {
        // Every check first: a batch with anything refused applies nothing.
        let checks = self.checks(p.checks)?;
        let puts = self.puts(p.puts)?;
        let deletes = self.deletes(p.deletes)?;
        let emissions = p
            .emissions
            .into_iter()
            .map(|e| self.emission(e))
            .collect::<Result<Vec<_>, _>>()?;
        let answer: StoredCommit = self
            .store(
                "store.kv_commit",
                json!({"owner": self.name(), "families": self.identity.families(),
                    "scopes": self.identity.scopes, "checks": checks, "puts": puts,
                    "deletes": deletes, "emissions": emissions}),
            )
            .await?;
        let mut out = Vec::with_capacity(answer.emissions.len());
        for e in answer.emissions {
            let event = match e.event {
                Some(r) => Some(self.accepted(r.id, r.seq).await),
                None => None,
            };
            out.push(EmissionResult {
                event,
                added: e.added,
                refused: e.refused.unwrap_or_default(),
            });
        }
        Ok(KvCommitResult { emissions: out })
    }

    async fn event_accept(&self, p: EventAcceptParams) -> Result<EmissionResult, RpcError> {
        p.validate().map_err(invalid)?;
        let checks = self.checks(p.checks)?;
        let puts = self.puts(p.puts)?;
        let deletes = self.deletes(p.deletes)?;
        let event = self.emission(p.event)?;
        let accepted: StoredAccepted = self
            .store(
                "store.event_accept_derived",
                json!({"owner": self.name(), "families": self.identity.families(),
                    "scopes": self.identity.scopes, "event": event, "checks": checks,
                    "puts": puts, "deletes": deletes}),
            )
            .await?;
        Ok(EmissionResult {
            event: Some(self.accepted(accepted.id, accepted.seq).await),
            added: accepted.added,
            refused: String::new(),
        })
    }

    async fn state_event(&self, p: StateEventParams) -> Result<StateEventResult, RpcError> {
        let answer: StoredEventAnswer = self
            .store(
                "store.event",
                json!({"id": p.id, "scopes": self.identity.scopes}),
            )
            .await?;
        Ok(StateEventResult {
            event: answer.event.into(),
        })
    }

    async fn state_events(&self, p: StateEventsParams) -> Result<StateEventsResult, RpcError> {
        p.validate().map_err(invalid)?;
        let page: StoredEventsPage = self
            .store(
                "store.events",
                json!({"after": after(p.after), "limit": limit(p.limit),
                    "scopes": self.identity.scopes}),
            )
            .await?;
        Ok(StateEventsResult {
            events: page.events.into_iter().map(Into::into).collect(),
        })
    }

    async fn state_work_events(
        &self,
        p: StateWorkEventsParams,
    ) -> Result<StateEventsResult, RpcError> {
        wire::check_page_limit(p.limit).map_err(invalid)?;
        let page: Result<StoredEventsPage, RpcError> = self
            .store(
                "store.work_events",
                json!({"work_id": p.id, "after": after(p.after), "limit": limit(p.limit),
                    "scopes": self.identity.scopes}),
            )
            .await;
        match page {
            Ok(page) => Ok(StateEventsResult {
                events: page.events.into_iter().map(Into::into).collect(),
            }),
            // A Work out of reach, or none, reads as an empty page.
            Err(e) if e.is(Code::NotFound) => Ok(StateEventsResult::default()),
            Err(e) => Err(e),
        }
    }

    /// `wait.progress`: the progress line of a Work's active Wait, which only the
    /// extension whose wait operation planned it may set (storaged checks the owner).
    async fn wait_progress(&self, p: WaitProgressParams) -> Result<WaitProgressResult, RpcError> {
        let _: Value = self
            .store(
                "store.wait_progress",
                json!({"owner": self.name(), "work_id": p.work_id, "progress": p.progress}),
            )
            .await?;
        Ok(WaitProgressResult {})
    }

    async fn state_sequence(&self) -> Result<StateSequenceResult, RpcError> {
        #[derive(Deserialize)]
        struct Sequence {
            sequence: i64,
        }
        let s: Sequence = self.store("store.sequence", json!({})).await?;
        Ok(StateSequenceResult {
            sequence: u64::try_from(s.sequence).unwrap_or(0),
        })
    }

    async fn state_timers(&self, p: StateTimersParams) -> Result<StateTimersResult, RpcError> {
        if !p.scope_id.is_empty() && !self.identity.in_scope(&p.scope_id) {
            return Ok(StateTimersResult::default());
        }
        let prefix = timer_key(self.name(), "");
        let mut timers = Vec::new();
        let mut cursor = String::new();
        // Bounded: an extension's timers are few; a runaway cursor stops here.
        for _ in 0..64 {
            let page: StoredTimersPage = self
                .store(
                    "store.timers",
                    json!({"owner": self.name(),
                        "scope_id": (!p.scope_id.is_empty()).then_some(&p.scope_id),
                        "after": cursor}),
                )
                .await?;
            for t in page.timers {
                let Some(key) = t.key.strip_prefix(&prefix) else {
                    continue;
                };
                if !self.identity.in_scope(&t.scope_id)
                    || (!p.recurrence.is_empty() && t.kind != p.recurrence)
                {
                    continue;
                }
                timers.push(wire::Timer {
                    key: key.to_string(),
                    id: t.id,
                    scope_id: t.scope_id,
                    recurrence: t.kind,
                    due_at: t.due_at,
                    spec: t.spec,
                });
            }
            if page.next.is_empty() || page.next == cursor {
                break;
            }
            cursor = page.next;
        }
        Ok(StateTimersResult { timers })
    }

    fn check_timer(&self, recurrence: &str, scope_id: &str) -> Result<(), RpcError> {
        let declared = self
            .identity
            .manifest
            .provides
            .recurrences
            .iter()
            .any(|r| r.name == recurrence);
        if !declared {
            return Err(RpcError::new(
                Code::Undeclared,
                format!("recurrence {recurrence:?} is not declared in provides.recurrences"),
            ));
        }
        if !self.identity.in_scope(scope_id) {
            return Err(RpcError::new(
                Code::Unauthorized,
                format!(
                    "scope {scope_id:?} is not one whose configuration uses {:?}",
                    self.name()
                ),
            ));
        }
        Ok(())
    }

    async fn timer_arm(&self, p: TimerArmParams) -> Result<TimerArmResult, RpcError> {
        self.check_timer(&p.recurrence, &p.scope_id)?;
        if p.key.is_empty() {
            return Err(RpcError::new(Code::Invalid, "timer.arm needs a key"));
        }
        if p.at.is_empty() {
            return Err(RpcError::new(
                Code::Unsupported,
                "timer.arm without `at` asks recurrence.next for the first fire time, which this host does not serve yet: give `at`",
            ));
        }
        let Some(due_ms) = parse_rfc3339_ms(&p.at) else {
            return Err(RpcError::new(
                Code::Invalid,
                format!("at {:?} is not an RFC 3339 time", p.at),
            ));
        };
        let spec = (!p.spec.is_null()).then_some(p.spec);
        let armed: StoredTimerArm = self
            .store(
                "store.timer_arm",
                json!({"owner": self.name(), "kind": p.recurrence, "scope_id": p.scope_id,
                    "key": timer_key(self.name(), &p.key), "due_ms": due_ms, "spec": spec}),
            )
            .await?;
        Ok(TimerArmResult {
            timer_id: armed.timer.id,
            due_at: armed.timer.due_at,
        })
    }

    async fn timer_cancel(&self, p: TimerCancelParams) -> Result<TimerCancelResult, RpcError> {
        self.check_timer(&p.recurrence, &p.scope_id)?;
        self.store(
            "store.timer_cancel",
            json!({"owner": self.name(), "kind": p.recurrence, "scope_id": p.scope_id,
                "key": timer_key(self.name(), &p.key)}),
        )
        .await
    }

    // Artifacts are forwarded as they are. The execution host will bind them to a
    // run it opened for this process (and check the execution) before this.

    async fn artifact_create(
        &self,
        p: ArtifactCreateParams,
    ) -> Result<ArtifactCreateResult, RpcError> {
        let some = |s: String| (!s.is_empty()).then_some(s);
        self.store(
            "store.artifact_create",
            json!({"execution_id": some(p.execution_id), "name": p.name,
                "media_type": some(p.media_type), "max_bytes": (p.max_bytes > 0).then_some(p.max_bytes)}),
        )
        .await
    }

    async fn artifact_write(
        &self,
        p: ArtifactWriteParams,
    ) -> Result<ArtifactWriteResult, RpcError> {
        p.validate().map_err(invalid)?;
        // Forwarded typed, not through a `Value`: the chunk's base64 is written
        // once, straight into the request, rather than into a JSON string first.
        self.store_typed("store.artifact_write", &p).await
    }

    async fn artifact_commit(
        &self,
        p: ArtifactCommitParams,
    ) -> Result<ArtifactCommitResult, RpcError> {
        self.store(
            "store.artifact_commit",
            json!({"artifact_id": p.artifact_id, "size": (p.size > 0).then_some(p.size)}),
        )
        .await
    }

    async fn artifact_abort(
        &self,
        p: ArtifactAbortParams,
    ) -> Result<ArtifactAbortResult, RpcError> {
        let _: Value = self
            .store(
                "store.artifact_abort",
                json!({"artifact_id": p.artifact_id}),
            )
            .await?;
        Ok(ArtifactAbortResult {})
    }

    /// `scope.authorize`: asked only about one of the package's own scopes; answered
    /// from the configuration in force (`authorization.read_scopes`/`file_scopes`).
    fn scope_authorize(
        &self,
        p: protocol::wire::ScopeAuthorizeParams,
    ) -> Result<protocol::wire::ScopeAuthorizeResult, RpcError> {
        if !self.identity.in_scope(&p.scope_id) {
            return Err(RpcError::new(
                Code::Unauthorized,
                format!(
                    "scope {:?} is not one whose configuration uses {:?}",
                    p.scope_id,
                    self.name()
                ),
            ));
        }
        let Some(access) = protocol::config::Access::parse(&p.access) else {
            return Err(RpcError::invalid_params(format!(
                "access is {:?}: read or file",
                p.access
            )));
        };
        Ok(
            match self
                .configuration
                .authorizes(&p.scope_id, &p.target_scope_id, access)
            {
                Ok(()) => protocol::wire::ScopeAuthorizeResult {
                    allowed: true,
                    reason: String::new(),
                },
                Err(why) => protocol::wire::ScopeAuthorizeResult {
                    allowed: false,
                    reason: why,
                },
            },
        )
    }

    fn secret_resolve(&self, p: SecretResolveParams) -> Result<SecretResolveResult, RpcError> {
        // A connection of a scope that uses the package, or the tunnel's (asked with
        // no scope: the tunnel is the suite's).
        let scoped = self.identity.in_scope(&p.scope_id);
        let unscoped = p.scope_id.is_empty() && self.identity.unscoped.contains(&p.connection);
        if !(scoped || unscoped) || !self.identity.connections.contains(&p.connection) {
            return Err(RpcError::new(
                Code::Unauthorized,
                format!(
                    "connection {:?} in scope {:?} is not bound to {:?}'s entries or its executors' bindings",
                    p.connection,
                    p.scope_id,
                    self.name()
                ),
            ));
        }
        if p.names.len() > MAX_SECRET_NAMES {
            return Err(RpcError::invalid_params(format!(
                "{} secret names, over the limit of {MAX_SECRET_NAMES}",
                p.names.len()
            )));
        }
        let mut out = SecretResolveResult::default();
        for name in p.names {
            let Some(reference) = self.configuration.secret_ref(&p.connection, &name) else {
                return Err(RpcError::new(
                    Code::NotFound,
                    format!(
                        "connection {:?} has no secret {name:?} in its secret_refs",
                        p.connection
                    ),
                ));
            };
            // The reason names the reference, never the value.
            let value = protocol::config::resolve_secret_ref(&reference).map_err(|why| {
                RpcError::new(
                    Code::Unavailable,
                    format!(
                        "secret {name:?} of connection {:?} cannot be read: {why}",
                        p.connection
                    ),
                )
            })?;
            out.values.insert(name, value);
        }
        Ok(out)
    }

    /// `execution.persist_recovery`: storaged fences it by the execution's lease epoch,
    /// so a superseded run's write is refused (`conflict`).
    async fn persist_recovery(
        &self,
        p: wire::ExecutionPersistRecoveryParams,
    ) -> Result<wire::ExecutionPersistRecoveryResult, RpcError> {
        if !self.identity.manifest.provides.executors.is_empty() {
            let _: Value = self
                .store(
                    "store.recovery_persist",
                    json!({"execution_id": p.execution_id, "epoch": p.epoch,
                           "recovery": p.recovery}),
                )
                .await?;
            return Ok(wire::ExecutionPersistRecoveryResult {});
        }
        Err(RpcError::new(
            Code::Undeclared,
            format!("{:?} declares no executor", self.name()),
        ))
    }

    async fn ingress(&self, delivery: wire::Delivery) -> Result<DeliveryAccepted, RpcError> {
        let registered = self.configuration.registered();
        let mut answers =
            crate::ingress::accept(self.identity, &registered, self.bus, vec![delivery]).await?;
        Ok(answers.pop().unwrap_or_default())
    }
}

/// Milliseconds since the epoch of an RFC 3339 time (moved to [`protocol::time`]).
pub use protocol::time::parse_rfc3339_ms;

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn manifest() -> Manifest {
        protocol::manifest::parse_manifest(
            br#"{"protocol": [1], "name": "notes", "version": "1.0.0", "command": ["bin/notes"],
                "provides": {"families": [{"name": "notes.note", "re_derivable": true}],
                "schemas": [{"base": "notes.note", "versions": [2, 3]}]}}"#,
        )
        .unwrap()
    }

    fn event(schema: Option<&str>) -> Value {
        let mut e =
            json!({"id": "evt_1", "type": "notes.note.added", "payload": {"data": {"a": 1}}});
        if let Some(s) = schema {
            e["payload"]["schema"] = json!(s);
        }
        e
    }

    #[test]
    fn gate_passes_foreign_current_and_upcast_verbatim() {
        let m = manifest();
        for schema in [
            None,
            Some("github.issue.v9"),
            Some("notes.note.v3"),
            Some("notes.note.v2"),
        ] {
            let e = event(schema);
            assert_eq!(gate_event(&m, &e), Some(e.clone()), "{schema:?}");
        }
        // storaged's envelope keeps the schema at the top.
        let stored = json!({"id": "evt_2", "schema": "notes.note.v3", "payload": {"a": 1}});
        assert_eq!(gate_event(&m, &stored), Some(stored.clone()));
    }

    #[test]
    fn gate_withholds_retired_newer_and_undeclared() {
        let m = manifest();
        for schema in [
            "notes.note.v1",
            "notes.note.v4",
            "notes.other.v1",
            "notes.note",
        ] {
            assert_eq!(gate_event(&m, &event(Some(schema))), None, "{schema}");
        }
        let stored = json!({"id": "evt_2", "schema": "notes.note.v9"});
        assert_eq!(gate_event(&m, &stored), None);
        let typed = wire::Event {
            payload: wire::Payload {
                schema: "notes.note.v1".into(),
                data: Value::Null,
            },
            ..wire::Event::default()
        };
        assert!(gate_wire_event(&m, typed.clone()).is_none());
        let current = wire::Event {
            payload: wire::Payload {
                schema: "notes.note.v3".into(),
                data: Value::Null,
            },
            ..typed
        };
        assert!(gate_wire_event(&m, current).is_some());
    }

    #[test]
    fn namespaces_and_sources() {
        assert_eq!(own_namespace("notes", "").unwrap(), "notes");
        assert_eq!(own_namespace("notes", "notes.x").unwrap(), "notes.x");
        for bad in ["notesx", "notes.", "github", "core.extensions", "core"] {
            assert!(own_namespace("notes", bad)
                .unwrap_err()
                .is(Code::Unauthorized));
        }
        assert!(own_source("notes", "notes") && own_source("notes", "notes/a"));
        assert!(!own_source("notes", "notes/") && !own_source("notes", "notesx"));
    }

    #[test]
    fn rfc3339() {
        assert_eq!(parse_rfc3339_ms("1970-01-01T00:00:00Z"), Some(0));
        assert_eq!(
            parse_rfc3339_ms("2026-11-23T16:00:00.123Z"),
            Some(1_795_449_600_123)
        );
        assert_eq!(
            parse_rfc3339_ms("2000-02-29T01:00:00+01:00"),
            Some(951_782_400_000)
        );
        assert_eq!(parse_rfc3339_ms("2000-02-29"), None);
        assert_eq!(parse_rfc3339_ms("2000-13-01T00:00:00Z"), None);
    }
}
