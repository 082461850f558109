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
//! `action.submit`, `action.list` and `state.works` are served by [`crate::actions`].
//!
//! `secret.resolve` reads the references (`env:`/`file:`) of a connection bound to
//! the extension's entries in a configured scope; `ingress.push` and
//! `ingress.deliver` accept deliveries of the sources the last configure registered
//! ([`crate::ingress`]).
//!
//! `state.work`, `state.executions`, `state.waits`, `state.scopes`, `state.scope` and
//! `work.cancel` are served in `state.rs`: the Work of the extension's scopes and of
//! its own declared kinds wherever it is, the configuration of its scopes, and
//! cancellation of its own kinds' Work through schedulerd.
//!
//! `work.settle_hold` settles a hold the calling start gate placed, on Work of its
//! scopes (`holds.rs`).
//!
//! Not built yet (answered `unsupported` naming the method): `timer.arm` without `at` (it needs
//! `recurrence.next`, which schedulerd serves), and every other catalogued
//! extension-to-host method not named here.
//! Artifacts are forwarded as they are: the checks that bind them to a run the
//! host opened for this process come with the execution host.
//!
//! The methods are served by concern: the KV and the Event log in `records.rs`,
//! timers and a Wait's progress in `timers.rs`, what a run writes in `artifacts.rs`,
//! what the configuration grants in `secrets.rs`, `tunnel.url` in `tunnel.rs`, the Work
//! and scope reads and `work.cancel` in `state.rs`. Each
//! reaches storaged with `busapi::store`'s typed calls ([`crate::storage`]).

use std::sync::Arc;

use crate::configuration::Configuration;
use crate::render::Owners;
use crate::storage::wire_event;
use crate::tunnels::TunnelRuns;
use crate::workspaces::Workspaces;
use busapi::Call;
use daemon::bus::Bus;
use protocol::catalogue::{self, Direction, Surface};
use protocol::container::{ContainerAdoptParams, ContainerLaunchParams};
use protocol::manifest::Manifest;
use protocol::wire::{
    self, ActionListParams, ActionSubmitParams, ArtifactAbortParams, ArtifactAbortResult,
    ArtifactCommitParams, ArtifactCommitResult, ArtifactCreateParams, ArtifactCreateResult,
    ArtifactWriteParams, ArtifactWriteResult, DeliveryAccepted, Emission, EmissionResult,
    EventAcceptParams, EventRenderOwnedParams, ExecutionPersistRecoveryParams,
    IngressDeliverParams, IngressPushParams, KvCheck, KvCommitParams, KvCommitResult, KvDelete,
    KvExpect, KvGetParams, KvGetResult, KvListParams, KvListResult, KvPut,
    ProviderOwnerStatusParams, ResourceAcquireParams, ResourceLookupParams, ScopeAuthorizeParams,
    SecretResolveParams, SecretResolveResult, StateEventParams, StateEventResult,
    StateEventsParams, StateEventsResult, StateSequenceParams, StateSequenceResult,
    StateTimersParams, StateTimersResult, StateWorkEventsParams, StateWorksParams, TimerArmParams,
    TimerArmResult, TimerCancelParams, TimerCancelResult, TunnelUrlParams, WaitProgressParams,
    WaitProgressResult,
};
use protocol::{BoxFuture, CallError, Code, Handler, Reply, Request, RpcError};
use serde_json::Value;

mod artifacts;
mod holds;
mod records;
mod secrets;
mod state;
mod timers;
mod tunnel;

pub use crate::identity::{
    check_emission, check_payload, declared_family, own_namespace, own_source, BoundIdentity,
    Identity, RESERVED_NAMESPACE,
};
pub use secrets::MAX_SECRET_NAMES;
pub use state::{MAX_CANCEL_REASON_BYTES, MAX_READ_ROWS, MAX_WORK_ROWS};
pub use tunnel::MAX_TUNNEL_URL_REQUEST;

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
            if request.method == EventRenderOwnedParams::METHOD {
                admit(&identity.manifest, &request.method)?;
                let p = request.params()?;
                let r = crate::render::render_owned(&identity, &bus, owners.as_deref(), p).await?;
                return protocol::reply(&r);
            }
            if request.method == ActionSubmitParams::METHOD
                || request.method == ActionListParams::METHOD
            {
                admit(&identity.manifest, &request.method)?;
                let runner = owners.as_deref().and_then(crate::render::Owners::runner);
                let packages = runner.as_deref();
                return if request.method == ActionSubmitParams::METHOD {
                    let p = request.params()?;
                    answer::<ActionSubmitParams>(
                        &crate::actions::submit(&identity, &bus, packages, p).await?,
                    )
                } else {
                    let p = request.params()?;
                    answer::<ActionListParams>(
                        &crate::actions::list(&identity, &bus, packages, p).await?,
                    )
                };
            }
            if request.method == TunnelUrlParams::METHOD {
                admit(&identity.manifest, &request.method)?;
                return tunnel::tunnel_url(&identity, &bus, tunnels.as_deref(), &request).await;
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
        m if m == KvGetParams::METHOD => {
            answer::<KvGetParams>(&host.kv_get(request.params()?).await?)
        }
        m if m == KvListParams::METHOD => {
            answer::<KvListParams>(&host.kv_list(request.params()?).await?)
        }
        m if m == KvCommitParams::METHOD => {
            answer::<KvCommitParams>(&host.kv_commit(request.params()?).await?)
        }
        m if m == EventAcceptParams::METHOD => {
            answer::<EventAcceptParams>(&host.event_accept(request.params()?).await?)
        }
        m if m == StateEventParams::METHOD => {
            answer::<StateEventParams>(&host.state_event(request.params()?).await?)
        }
        m if m == StateEventsParams::METHOD => {
            answer::<StateEventsParams>(&host.state_events(request.params()?).await?)
        }
        m if m == StateWorkEventsParams::METHOD => {
            answer::<StateWorkEventsParams>(&host.state_work_events(request.params()?).await?)
        }
        m if m == StateSequenceParams::METHOD => {
            answer::<StateSequenceParams>(&host.state_sequence().await?)
        }
        m if m == StateTimersParams::METHOD => {
            answer::<StateTimersParams>(&host.state_timers(request.params()?).await?)
        }
        m if m == wire::StateWorkParams::METHOD => {
            answer::<wire::StateWorkParams>(&host.state_work(request.params()?).await?)
        }
        m if m == wire::StateExecutionsParams::METHOD => {
            answer::<wire::StateExecutionsParams>(&host.state_executions(request.params()?).await?)
        }
        m if m == wire::StateWaitsParams::METHOD => {
            answer::<wire::StateWaitsParams>(&host.state_waits(request.params()?).await?)
        }
        m if m == wire::StateScopesParams::METHOD => {
            answer::<wire::StateScopesParams>(&host.state_scopes())
        }
        m if m == wire::StateScopeParams::METHOD => {
            answer::<wire::StateScopeParams>(&host.state_scope(request.params()?)?)
        }
        m if m == wire::WorkCancelParams::METHOD => {
            answer::<wire::WorkCancelParams>(&host.work_cancel(request.params()?).await?)
        }
        m if m == StateWorksParams::METHOD => answer::<StateWorksParams>(
            &crate::actions::state_works(identity, bus, request.params()?).await?,
        ),
        m if m == wire::WorkSettleHoldParams::METHOD => {
            answer::<wire::WorkSettleHoldParams>(&host.work_settle_hold(request.params()?).await?)
        }
        m if m == TimerArmParams::METHOD => {
            answer::<TimerArmParams>(&host.timer_arm(request.params()?).await?)
        }
        m if m == WaitProgressParams::METHOD => {
            answer::<WaitProgressParams>(&host.wait_progress(request.params()?).await?)
        }
        m if m == TimerCancelParams::METHOD => {
            answer::<TimerCancelParams>(&host.timer_cancel(request.params()?).await?)
        }
        m if m == ArtifactCreateParams::METHOD => {
            answer::<ArtifactCreateParams>(&host.artifact_create(request.params()?).await?)
        }
        m if m == ArtifactWriteParams::METHOD => {
            answer::<ArtifactWriteParams>(&host.artifact_write(request.params()?).await?)
        }
        m if m == ArtifactCommitParams::METHOD => {
            answer::<ArtifactCommitParams>(&host.artifact_commit(request.params()?).await?)
        }
        m if m == ArtifactAbortParams::METHOD => {
            answer::<ArtifactAbortParams>(&host.artifact_abort(request.params()?).await?)
        }
        m if m == SecretResolveParams::METHOD => {
            answer::<SecretResolveParams>(&host.secret_resolve(request.params()?)?)
        }
        m if m == ScopeAuthorizeParams::METHOD => {
            answer::<ScopeAuthorizeParams>(&host.scope_authorize(request.params()?)?)
        }
        m if m == ResourceAcquireParams::METHOD
            || m == ResourceLookupParams::METHOD
            || m == ProviderOwnerStatusParams::METHOD =>
        {
            let Some(ws) = workspaces else {
                return Err(RpcError::new(
                    Code::Unsupported,
                    format!("{method} is not served by this host"),
                ));
            };
            let (name, peer) = (identity.name.as_str(), &request.peer);
            match method {
                m if m == ResourceAcquireParams::METHOD => answer::<ResourceAcquireParams>(
                    &ws.acquire(name, peer, request.params()?).await?,
                ),
                m if m == ResourceLookupParams::METHOD => {
                    answer::<ResourceLookupParams>(&ws.lookup(name, peer, request.params()?).await?)
                }
                _ => answer::<ProviderOwnerStatusParams>(
                    &ws.owner_status(name, peer, request.params()?).await?,
                ),
            }
        }
        // Not typed in the protocol crate: the sandbox methods name themselves.
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
        m if m == ContainerLaunchParams::METHOD || m == ContainerAdoptParams::METHOD => {
            let Some(ws) = workspaces else {
                return Err(RpcError::new(
                    Code::Unsupported,
                    format!("{method} is not served by this host"),
                ));
            };
            let (name, peer) = (identity.name.as_str(), &request.peer);
            if method == ContainerLaunchParams::METHOD {
                answer::<ContainerLaunchParams>(
                    &ws.container_launch(name, peer, request.params()?).await?,
                )
            } else {
                answer::<ContainerAdoptParams>(
                    &ws.container_adopt(name, peer, request.params()?).await?,
                )
            }
        }
        m if m == ExecutionPersistRecoveryParams::METHOD => {
            answer::<ExecutionPersistRecoveryParams>(
                &host.persist_recovery(request.params()?).await?,
            )
        }
        m if m == IngressPushParams::METHOD => {
            let p: IngressPushParams = request.params()?;
            answer::<IngressPushParams>(&host.ingress(p.delivery).await?)
        }
        m if m == IngressDeliverParams::METHOD => {
            let p: IngressDeliverParams = request.params()?;
            answer::<IngressDeliverParams>(&host.ingress(p.delivery).await?)
        }
        other => Err(RpcError::new(
            Code::Unsupported,
            format!("{other} is not served by this host yet"),
        )),
    }
}

/// Encode `C`'s answer: a method answered with anything but its declared result does
/// not build.
fn answer<C: Call>(result: &C::Result) -> Result<Reply, RpcError> {
    protocol::reply(result)
}

fn invalid(e: wire::WireError) -> RpcError {
    RpcError::new(Code::Invalid, e.to_string())
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

    /// A typed call to storaged, its failure as the extension sees it.
    async fn store<C: Call>(&self, params: &C) -> Result<C::Result, RpcError> {
        crate::storage::call(self.bus, params).await
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
