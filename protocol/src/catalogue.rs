//! The method catalogue as data: every wire method, who sends it, whether it
//! runs inside a coordination transaction, the permission that gates it, the
//! manifest declaration that enables it and its shipped users.
//!
//! [`Manifest::enabled`] answers which methods a manifest enables: the host
//! neither serves nor calls any other (an undeclared call is `undeclared`).

use std::collections::BTreeSet;

use crate::manifest::{Manifest, OperationKind};

/// Who sends a method's requests.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Direction {
    /// The host calls the extension.
    HostToExtension,
    /// The extension calls the host.
    ExtensionToHost,
}

/// The manifest declaration that enables a method.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Surface {
    /// Every package: lifecycle, validation, KV, state reads, artifacts,
    /// secrets, scope authority.
    Always,
    /// Enabled by the method's permission alone.
    Permission,
    /// `provides.families` (rendering and accepting Events of its families).
    Families,
    /// An extension type with `ingress`.
    Ingress,
    /// An extension type with `webhooks`.
    Webhooks,
    /// `provides.routes`.
    Routes,
    /// A route handler with `samples`.
    RouteSamples,
    /// `provides.work_kinds`.
    WorkKinds,
    /// A work kind with `trigger`.
    WorkKindTrigger,
    /// `provides.recurrences`.
    Recurrences,
    /// An operation of the kind.
    Operations(OperationKind),
    /// An emit operation with `commit`.
    EmitCommit,
    /// `provides.dependency_filter`.
    DependencyFilter,
    /// `provides.operation_gate`.
    OperationGate,
    /// `provides.start_gate`.
    StartGate,
    /// `provides.targets`.
    Targets,
    /// `provides.segment_end`.
    SegmentEnd,
    /// `provides.executors`.
    Executors,
    /// An executor with the label (`resume`, `interrupt`, `inject`).
    ExecutorLabel(&'static str),
    /// An executor with the control.
    ExecutorControl(&'static str),
    /// `provides.resources`.
    Resources,
    /// A resource type with `sweep`.
    ResourceSweep,
    /// `provides.sandboxes`.
    Sandboxes,
    /// `provides.containers`.
    Containers,
    /// A container type with `forward`.
    ContainerForward,
    /// `provides.tunnels`.
    Tunnels,
    /// `provides.tasks`.
    Tasks,
    /// `provides.checks`.
    Checks,
    /// `provides.probes`.
    Probes,
    /// `provides.config_candidate`.
    ConfigCandidate,
    /// `provides.exporter`.
    Exporter,
    /// `provides.run_environment`.
    RunEnvironment,
    /// `provides.annotations`.
    Annotations,
    /// `provides.actions`.
    Actions,
    /// `provides.panels`.
    Panels,
    /// `provides.setup`.
    Setup,
}

/// One wire method.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Method {
    /// The JSON-RPC method name.
    pub name: &'static str,
    /// Who sends its requests.
    pub direction: Direction,
    /// Runs inside a coordination transaction: pure, bounded (250 ms), no
    /// callbacks while it runs.
    pub in_transaction: bool,
    /// The permission the manifest must declare, if any.
    pub permission: Option<&'static str>,
    /// The declaration that enables it.
    pub surface: Surface,
    /// The shipped users (the specification's abbreviations).
    pub users: &'static str,
}

/// The deadline of an in-transaction method, in milliseconds.
pub const IN_TRANSACTION_DEADLINE_MILLIS: u64 = 250;

use Direction::{ExtensionToHost as E2H, HostToExtension as H2E};

const fn m(
    name: &'static str,
    direction: Direction,
    surface: Surface,
    users: &'static str,
) -> Method {
    Method {
        name,
        direction,
        in_transaction: false,
        permission: None,
        surface,
        users,
    }
}

const fn tx(name: &'static str, surface: Surface, users: &'static str) -> Method {
    Method {
        name,
        direction: H2E,
        in_transaction: true,
        permission: None,
        surface,
        users,
    }
}

const fn gated(
    name: &'static str,
    direction: Direction,
    permission: &'static str,
    surface: Surface,
    users: &'static str,
) -> Method {
    Method {
        name,
        direction,
        in_transaction: false,
        permission: Some(permission),
        surface,
        users,
    }
}

const ALL: &str = "all";
const KV_USERS: &str = "GH SL TR BB SC IS CC";
const STATE_USERS: &str = "GH SL TR BB SC IS CC HU";
const INGRESS_USERS: &str = "GH SL TR BB SC";
const EXEC_USERS: &str = "SH CC";

/// Every wire method.
pub static METHODS: &[Method] = &[
    // Lifecycle and configuration.
    m("initialize", H2E, Surface::Always, ALL),
    m("configure", H2E, Surface::Always, ALL),
    m("shutdown", H2E, Surface::Always, ALL),
    m("validate", H2E, Surface::Always, ALL),
    m("check.run", H2E, Surface::Checks, "all but SH"),
    // Ingress.
    m("webhook.handle", H2E, Surface::Webhooks, INGRESS_USERS),
    m("ingress.push", E2H, Surface::Ingress, INGRESS_USERS),
    m("ingress.reconcile", H2E, Surface::Ingress, INGRESS_USERS),
    m("ingress.deliver", E2H, Surface::Ingress, "SL"),
    // Routing and Work kinds.
    m("route.match", H2E, Surface::Routes, "GH SL TR BB SC IS"),
    m(
        "route.samples",
        H2E,
        Surface::RouteSamples,
        "GH SL TR BB SC IS",
    ),
    tx("work_kind.trigger", Surface::WorkKindTrigger, "SC"),
    m("work.cancel", E2H, Surface::WorkKinds, "IS"),
    // Recurrences and timers.
    tx("recurrence.next", Surface::Recurrences, "SC IS"),
    m("timer.arm", E2H, Surface::Recurrences, "SC IS"),
    m("timer.cancel", E2H, Surface::Recurrences, "SC IS"),
    // Toolbelt operations.
    m(
        "operation.call",
        H2E,
        Surface::Operations(OperationKind::Handler),
        "GH SL TR BB IS HU",
    ),
    m(
        "operation.wait",
        H2E,
        Surface::Operations(OperationKind::Wait),
        "GH",
    ),
    m(
        "operation.emit",
        H2E,
        Surface::Operations(OperationKind::Emit),
        "IS",
    ),
    tx("emit.commit", Surface::EmitCommit, "IS"),
    tx("dependency.filter", Surface::DependencyFilter, "GH"),
    gated(
        "operation.gate",
        H2E,
        "operation.gate",
        Surface::OperationGate,
        "HU",
    ),
    gated(
        "work.admit",
        H2E,
        "work.start_gate",
        Surface::StartGate,
        "HU",
    ),
    gated(
        "work.settle_hold",
        E2H,
        "work.start_gate",
        Surface::Permission,
        "HU",
    ),
    m(
        "wait.progress",
        E2H,
        Surface::Operations(OperationKind::Wait),
        "GH",
    ),
    m(
        "wait.target",
        E2H,
        Surface::Operations(OperationKind::Wait),
        "GH",
    ),
    m("target.resolve", H2E, Surface::Targets, "SC"),
    // Events.
    m("event.render", H2E, Surface::Families, "GH SL IS"),
    m("event.render_owned", E2H, Surface::Executors, "CC"),
    m("event.accept", E2H, Surface::Families, "GH SC IS"),
    m("scope.authorize", E2H, Surface::Always, "GH"),
    m("segment.ended", H2E, Surface::SegmentEnd, "GH"),
    // Executors.
    m("executor.run", H2E, Surface::Executors, EXEC_USERS),
    m("executor.recover", H2E, Surface::Executors, EXEC_USERS),
    m("executor.wait", H2E, Surface::Executors, EXEC_USERS),
    m(
        "executor.resume",
        H2E,
        Surface::ExecutorLabel("resume"),
        EXEC_USERS,
    ),
    m(
        "executor.interrupt",
        H2E,
        Surface::ExecutorLabel("interrupt"),
        EXEC_USERS,
    ),
    m(
        "executor.inject",
        H2E,
        Surface::ExecutorLabel("inject"),
        EXEC_USERS,
    ),
    m(
        "executor.forget",
        H2E,
        Surface::ExecutorControl("forget"),
        EXEC_USERS,
    ),
    m(
        "executor.stop",
        H2E,
        Surface::ExecutorControl("stop"),
        EXEC_USERS,
    ),
    m(
        "executor.attach",
        H2E,
        Surface::ExecutorControl("attach"),
        "CC",
    ),
    m(
        "executor.container_attach",
        H2E,
        Surface::ExecutorControl("container_attach"),
        "CC",
    ),
    m("executor.live", H2E, Surface::ExecutorControl("live"), "CC"),
    m(
        "executor.interactive_launch",
        H2E,
        Surface::ExecutorControl("interactive_launch"),
        "CC CX",
    ),
    m(
        "execution.persist_recovery",
        E2H,
        Surface::Executors,
        EXEC_USERS,
    ),
    // Workspaces: the executor's broker side and the provider side.
    m("resource.acquire", E2H, Surface::Executors, "CC"),
    m("resource.lookup", E2H, Surface::Executors, "CC"),
    m("provider.acquire", H2E, Surface::Resources, "GIT"),
    m("provider.lookup", H2E, Surface::Resources, "GIT"),
    m("provider.reconcile", H2E, Surface::Resources, "GIT"),
    m("provider.sweep", H2E, Surface::ResourceSweep, "GIT"),
    m("provider.owner_status", E2H, Surface::Resources, "GIT"),
    // Sandboxes and containers: the executor's broker side.
    m("sandbox.plan", E2H, Surface::Executors, EXEC_USERS),
    m("sandbox.adopt", E2H, Surface::Executors, EXEC_USERS),
    m("container.launch", E2H, Surface::Executors, EXEC_USERS),
    m("container.adopt", E2H, Surface::Executors, EXEC_USERS),
    // Sandbox and container providers.
    m("sandbox_provider.plan", H2E, Surface::Sandboxes, "SRT"),
    m("sandbox_provider.adopt", H2E, Surface::Sandboxes, "SRT"),
    m(
        "container_provider.plan",
        H2E,
        Surface::Containers,
        "DK SSH",
    ),
    m(
        "container_provider.create",
        H2E,
        Surface::Containers,
        "DK SSH",
    ),
    m(
        "container_provider.signal",
        H2E,
        Surface::Containers,
        "DK SSH",
    ),
    m(
        "container_provider.stop",
        H2E,
        Surface::Containers,
        "DK SSH",
    ),
    m(
        "container_provider.inspect",
        H2E,
        Surface::Containers,
        "DK SSH",
    ),
    m(
        "container_provider.list",
        H2E,
        Surface::Containers,
        "DK SSH",
    ),
    m(
        "container_provider.remove",
        H2E,
        Surface::Containers,
        "DK SSH",
    ),
    m(
        "container_provider.forward",
        H2E,
        Surface::ContainerForward,
        "DK SSH",
    ),
    // Tunnels.
    m("tunnel.run", H2E, Surface::Tunnels, "NG CF"),
    m("tunnel.url", E2H, Surface::Tunnels, "NG CF"),
    // Namespaced KV.
    m("kv.get", E2H, Surface::Always, KV_USERS),
    m("kv.list", E2H, Surface::Always, KV_USERS),
    m("kv.commit", E2H, Surface::Always, KV_USERS),
    // Read-only state.
    m("state.work", E2H, Surface::Always, STATE_USERS),
    m("state.works", E2H, Surface::Always, STATE_USERS),
    m("state.executions", E2H, Surface::Always, STATE_USERS),
    m("state.waits", E2H, Surface::Always, "HU"),
    m("state.event", E2H, Surface::Always, STATE_USERS),
    m("state.events", E2H, Surface::Always, STATE_USERS),
    m("state.work_events", E2H, Surface::Always, STATE_USERS),
    m("state.sequence", E2H, Surface::Always, "HU"),
    m("state.scopes", E2H, Surface::Always, STATE_USERS),
    m("state.scope", E2H, Surface::Always, STATE_USERS),
    m("state.timers", E2H, Surface::Always, "SC IS"),
    // Artifacts and secrets.
    m("artifact.create", E2H, Surface::Always, EXEC_USERS),
    m("artifact.write", E2H, Surface::Always, EXEC_USERS),
    m("artifact.commit", E2H, Surface::Always, EXEC_USERS),
    m("artifact.abort", E2H, Surface::Always, EXEC_USERS),
    m("secret.resolve", E2H, Surface::Always, "GH SL TR BB SC PH"),
    // Background passes and telemetry.
    m("task.run", H2E, Surface::Tasks, "GH SL TR BB SC IS CC"),
    m("telemetry.export", H2E, Surface::Exporter, "PH IS"),
    gated(
        "telemetry.capture",
        E2H,
        "telemetry.capture",
        Surface::Permission,
        "IS PH",
    ),
    gated(
        "telemetry.sink",
        H2E,
        "telemetry.sink",
        Surface::Permission,
        "IS PH",
    ),
    // Setup probes.
    gated("probe.list", E2H, "probes", Surface::Permission, "setup"),
    gated("probe.run", E2H, "probes", Surface::Permission, "setup"),
    m("probe.serve", H2E, Surface::Probes, "GH CC"),
    // The config host.
    gated(
        "config.base",
        E2H,
        "config.read",
        Surface::Permission,
        "setup",
    ),
    gated(
        "config.edit",
        E2H,
        "config.read",
        Surface::Permission,
        "setup",
    ),
    gated(
        "config.validate",
        E2H,
        "config.read",
        Surface::Permission,
        "setup",
    ),
    gated(
        "config.trace",
        E2H,
        "config.read",
        Surface::Permission,
        "setup",
    ),
    gated(
        "config.candidate",
        H2E,
        "config.read",
        Surface::ConfigCandidate,
        "setup",
    ),
    // Run environment, annotations, actions and panels.
    m("run.environment", H2E, Surface::RunEnvironment, "GH"),
    m("run.credential", H2E, Surface::RunEnvironment, "GH"),
    m("work.annotate", H2E, Surface::Annotations, "GH"),
    m("work.actions", H2E, Surface::Actions, "GH SL HU"),
    m("work.act", H2E, Surface::Actions, "GH SL HU"),
    gated(
        "action.submit",
        E2H,
        "action.submit",
        Surface::Permission,
        "GH SL HU",
    ),
    gated(
        "action.list",
        E2H,
        "action.submit",
        Surface::Permission,
        "GH SL HU",
    ),
    m("view.render", H2E, Surface::Panels, "HU setup"),
    // Setup and its callbacks (SetupHost: prompts, browser, secret store,
    // LookPath, Run).
    m("setup.run", H2E, Surface::Setup, "GH SL TR"),
    m("setup.prompt", E2H, Surface::Setup, "GH SL TR"),
    m("setup.open_browser", E2H, Surface::Setup, "GH SL TR"),
    m("setup.store_secret", E2H, Surface::Setup, "GH SL TR"),
    m("setup.look_path", E2H, Surface::Setup, "GH SL TR"),
    m("setup.exec", E2H, Surface::Setup, "GH SL TR"),
];

/// The host-to-extension methods whose call is held open for as long as the host
/// wants it (`tunnel.run`, answered once the tunnel has stopped): the host calls them
/// without a deadline and ends them by cancelling.
pub const LONG_LIVED: &[&str] = &["tunnel.run"];

/// Whether a call of `name` is held open without a deadline ([`LONG_LIVED`]).
pub fn long_lived(name: &str) -> bool {
    LONG_LIVED.contains(&name)
}

/// The method named `name`.
pub fn method(name: &str) -> Option<&'static Method> {
    METHODS.iter().find(|m| m.name == name)
}

impl Method {
    /// Whether `manifest` enables this method: it declares the surface and,
    /// for a gated method, the permission.
    pub fn enabled_by(&self, manifest: &Manifest) -> bool {
        let permitted = self.permission.is_none_or(|p| manifest.has_permission(p));
        permitted && (self.surface == Surface::Permission || manifest.declares(self.surface))
    }
}

impl Manifest {
    /// Whether the manifest declares `surface` (permissions apart).
    pub fn declares(&self, surface: Surface) -> bool {
        let p = &self.provides;
        match surface {
            Surface::Always => true,
            Surface::Permission => false,
            Surface::Families => !p.families.is_empty(),
            Surface::Ingress => p.extensions.iter().any(|e| e.ingress),
            Surface::Webhooks => p.extensions.iter().any(|e| e.webhooks),
            Surface::Routes => !p.routes.is_empty(),
            Surface::RouteSamples => p.routes.iter().any(|r| r.samples),
            Surface::WorkKinds => !p.work_kinds.is_empty(),
            Surface::WorkKindTrigger => p.work_kinds.iter().any(|k| k.trigger),
            Surface::Recurrences => !p.recurrences.is_empty(),
            Surface::Operations(kind) => p.operations.iter().any(|o| o.kind() == Some(kind)),
            Surface::EmitCommit => p
                .operations
                .iter()
                .any(|o| o.kind() == Some(OperationKind::Emit) && o.commit),
            Surface::DependencyFilter => p.dependency_filter,
            Surface::OperationGate => p.operation_gate,
            Surface::StartGate => p.start_gate,
            Surface::Targets => !p.targets.is_empty(),
            Surface::SegmentEnd => p.segment_end,
            Surface::Executors => !p.executors.is_empty(),
            Surface::ExecutorLabel(label) => p.executors.iter().any(|e| match label {
                "resume" => e.labels.resume,
                "interrupt" => e.labels.interrupt,
                "inject" => e.labels.inject,
                "workspace" => e.labels.workspace,
                _ => false,
            }),
            Surface::ExecutorControl(control) => p.executors.iter().any(|e| e.has_control(control)),
            Surface::Resources => !p.resources.is_empty(),
            Surface::ResourceSweep => p.resources.iter().any(|r| r.sweep),
            Surface::Sandboxes => !p.sandboxes.is_empty(),
            Surface::Containers => !p.containers.is_empty(),
            Surface::ContainerForward => p.containers.iter().any(|c| c.forward),
            Surface::Tunnels => !p.tunnels.is_empty(),
            Surface::Tasks => !p.tasks.is_empty(),
            Surface::Checks => !p.checks.is_empty(),
            Surface::Probes => !p.probes.is_empty(),
            Surface::ConfigCandidate => p.config_candidate,
            Surface::Exporter => p.exporter,
            Surface::RunEnvironment => p.run_environment,
            Surface::Annotations => p.annotations,
            Surface::Actions => p.actions,
            Surface::Panels => p.panels,
            Surface::Setup => p.setup,
        }
    }

    /// The methods this manifest enables, in both directions.
    pub fn enabled(&self) -> BTreeSet<&'static str> {
        METHODS
            .iter()
            .filter(|m| m.enabled_by(self))
            .map(|m| m.name)
            .collect()
    }

    /// Whether this manifest enables the method named `name`.
    pub fn enables(&self, name: &str) -> bool {
        method(name).is_some_and(|m| m.enabled_by(self))
    }
}
