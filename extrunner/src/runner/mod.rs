//! The runner: every discovered package as a supervised extension.
//!
//! [`Runner::load`] discovers the installed and bundled packages, reports every
//! directory it does not offer (refused, misnamed, shadowed), checks the whole
//! set for conflicts (all admitted or none: on a conflict nothing starts and the
//! conflicts are kept for `ext.list`), then starts a [`Supervisor`] for every
//! package at once. [`Runner::ready`] resolves when the slowest first handshake
//! is done, so adding packages does not add their start times together.
//!
//! The runner answers what the `ext.*` bus methods show ([`Runner::list`],
//! [`Runner::inspect`]), restarts a package on the operator's request
//! ([`Runner::restart`]: all three in `view.rs`), forwards a host-to-extension call
//! ([`Runner::call`], `calls.rs`) and the deliveries of `ext.webhook` and
//! `ext.reconcile` (`intake.rs`), configures the packages again on a new generation
//! or tunnel URL ([`Runner::apply`], `configure.rs`), and stops every extension, each
//! with its process group ([`Runner::stop_all`]).

use crate::configuration::{Configuration, Registered};
use crate::conflicts::{check_conflicts, Claimant, Conflict, HostNames};
use crate::discovery::{discover, Origin, Package, Report, ReportKind};
use crate::host::{BoundIdentity, Identity, ScopedHost};
use crate::process::send_configure;
use crate::process::{
    KvLayouts, LayoutFuture, ProcessExit, ProcessSpec, State, Supervisor, SupervisorOptions,
};
use crate::render::{CallFuture as RenderCall, Packages};
use crate::tunnels::TunnelRuns;
use crate::workspaces::{CallFuture as WorkspaceCall, Providers, Workspaces};
use busapi::Call;
use daemon::bus::Bus;
use protocol::config::Config;
use protocol::wire::{ConfigureParams, InitializeParams, KvLayout, ShutdownParams};
use protocol::{Code, RpcError};
use serde_json::value::RawValue;
use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;
use tokio::sync::watch;

mod calls;
mod configure;
mod intake;
mod layouts;
mod view;

use configure::configure_entry;
pub use intake::WEBHOOK_TIMEOUT;
pub use layouts::BusKvLayouts;
pub use view::{state_name, Counts};

/// The methods only the host's lifecycle sends; never forwarded by `ext.call`.
const LIFECYCLE: &[&str] = &[
    InitializeParams::METHOD,
    ConfigureParams::METHOD,
    ShutdownParams::METHOD,
];

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// What the runner loads.
#[derive(Debug, Clone)]
pub struct RunnerConfig {
    /// The installed packages' root (`<config dir>/extensions`).
    pub installed_root: PathBuf,
    /// The bundled packages' root, if any.
    pub bundled_root: Option<PathBuf>,
    /// The state directory: each extension's private state goes to
    /// `<state>/extensions/<name>`, its log to `<state>/logs/extensions/<name>.log`.
    pub state_dir: PathBuf,
    /// The daemon variables the operator grants each package, by package name.
    pub grants: HashMap<String, Vec<String>>,
    /// How every extension is supervised.
    pub options: SupervisorOptions,
    /// The bus the extensions' calls to the host are forwarded on (to storaged),
    /// each through a [`ScopedHost`] bound to the package's identity. `None` leaves
    /// `options.handler` as it is (tests of supervision alone).
    pub host_bus: Option<Bus>,
    /// The configuration generation to configure the packages with from their first
    /// start (and its hash); `None` configures them with nothing until
    /// [`Runner::apply`].
    pub initial: Option<(Config, String)>,
}

/// The process before an operator's restart replaced it.
#[derive(Debug, Clone, Copy)]
struct Previous {
    exit: Option<ProcessExit>,
    restarts: u64,
}

/// One package and its supervision.
struct Entry {
    package: Package,
    spec: ProcessSpec,
    /// The supervision options, with the scoped host bound to this package's
    /// identity: the same across restarts, so a restart never widens authority.
    options: SupervisorOptions,
    /// `None` when the set has a conflict: nothing was started.
    supervisor: Mutex<Option<Arc<Supervisor>>>,
    /// Crash restarts of the supervisors an operator's restart replaced, and
    /// how the last of their processes ended.
    previous: Mutex<Option<Previous>>,
    /// Serializes operator restarts of this package.
    restarting: tokio::sync::Mutex<()>,
    /// What configure sends and what it registered.
    configuration: Arc<Configuration>,
    /// The scopes and connections the package is bound to.
    identity: Arc<BoundIdentity>,
}

impl Entry {
    fn supervisor(&self) -> Option<Arc<Supervisor>> {
        lock(&self.supervisor).clone()
    }
}

/// The variable naming the configuration file the suite was started with
/// (`open-conduit up --config FILE` sets it for extrunner): every sandbox is denied
/// its folder.
pub const CONFIG_FILE_VAR: &str = "OPEN_CONDUIT_CONFIG_FILE";

/// Every package, supervised.
pub struct Runner {
    host_bus: Option<Bus>,
    entries: Vec<Entry>,
    reports: Vec<Report>,
    conflicts: Vec<Conflict>,
    stopping: AtomicBool,
    workspaces: Arc<Workspaces>,
    tunnels: Arc<TunnelRuns>,
    /// The extensions `event.render_owned` renders through (this runner, once shared).
    owners: Arc<crate::render::Owners>,
    /// The configuration generation last applied, for the checks' view of it.
    applied: Mutex<Option<Arc<Config>>>,
    /// The configuration directory (the installed packages' root's parent).
    config_dir: String,
    /// The agents' plugin written from every package's playbooks (empty when it
    /// could not be written).
    playbook_dir: String,
}

impl std::fmt::Debug for Runner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Runner")
            .field("packages", &self.entries.len())
            .field("reports", &self.reports.len())
            .field("conflicts", &self.conflicts.len())
            .finish()
    }
}

fn unavailable(message: impl Into<String>) -> RpcError {
    RpcError::new(Code::Unavailable, message)
}

/// A first handshake is done: running, refused, stopped, or failed once (it is
/// then restarting with backoff; waiting for it would hold readiness hostage to
/// a package that may never start).
fn settled(sup: &Supervisor) -> bool {
    match sup.state() {
        State::Running => sup.peer().is_some(),
        State::Refused { .. } | State::Stopped | State::Backoff { .. } => true,
        State::Starting => sup.restarts() > 0,
    }
}

impl Runner {
    /// Discover, report, check conflicts and start every package at once. Must
    /// be called within a tokio runtime.
    pub fn load(config: RunnerConfig) -> Runner {
        let discovery = discover(&config.installed_root, config.bundled_root.as_deref());
        for r in &discovery.reports {
            match r.kind {
                ReportKind::ShadowedBundled {
                    installed_refused: false,
                } => {
                    tracing::info!(OC_EXTENSION = %r.name, dir = %r.dir.display(), origin = %r.origin, "{}", r.message)
                }
                _ => {
                    tracing::warn!(OC_EXTENSION = %r.name, dir = %r.dir.display(), origin = %r.origin, "{}", r.message)
                }
            }
        }
        let conflicts = match check_conflicts(&discovery.packages, &HostNames::default()) {
            Ok(()) => Vec::new(),
            Err(conflicts) => {
                tracing::error!("{}", crate::conflicts::describe(&conflicts));
                conflicts
            }
        };
        let start = conflicts.is_empty();
        let playbook_dir =
            match crate::playbooks::write_plugin(&config.state_dir, &discovery.packages) {
                // Absolute: a sandbox's read need must be.
                Ok(w) => std::path::absolute(&w.dir)
                    .unwrap_or(w.dir)
                    .display()
                    .to_string(),
                Err(why) => {
                    tracing::error!(%why, "runs get no playbooks");
                    String::new()
                }
            };
        let workspaces = Workspaces::new(config.host_bus.clone());
        workspaces.protect(crate::workspaces::Protected {
            state_dir: config.state_dir.clone(),
            config_dir: config
                .installed_root
                .parent()
                .map(std::path::Path::to_path_buf)
                .unwrap_or_default(),
            sockets: Vec::new(),
            home: std::env::var_os("HOME")
                .filter(|h| !h.is_empty())
                .map(PathBuf::from),
            config_file: std::env::var_os(CONFIG_FILE_VAR)
                .filter(|f| !f.is_empty())
                .map(PathBuf::from),
        });
        let tunnels = Arc::new(TunnelRuns::default());
        let owners = crate::render::Owners::new();
        let entries: Vec<Entry> = discovery
            .packages
            .into_iter()
            .map(|package| {
                let mut spec = ProcessSpec::new(
                    package.name.clone(),
                    package.dir.clone(),
                    package.manifest.command.clone(),
                    package.manifest_json.clone(),
                    &config.state_dir,
                );
                spec.grants = config.grants.get(&package.name).cloned().unwrap_or_default();
                let mut options = config.options.clone();
                let configuration = Arc::new(Configuration::new(Some(package.manifest.clone())));
                options.configuration = configuration.clone();
                let identity = BoundIdentity::new(Identity::new(
                    package.manifest.clone(),
                    Vec::new(),
                    Vec::new(),
                ));
                if let Some((doc, generation)) = &config.initial {
                    configure_entry(doc, generation, &package.manifest, &configuration, &identity);
                }
                if let Some(bus) = &config.host_bus {
                    let host = ScopedHost::new(identity.clone(), bus.clone())
                        .with_configuration(configuration.clone())
                        .with_workspaces(workspaces.clone())
                        .with_tunnels(tunnels.clone())
                        .with_owners(owners.clone());
                    options.handler = Arc::new(host);
                    options.kv_layouts = Some(Arc::new(BusKvLayouts::new(bus.clone())));
                }
                let supervisor = if start {
                    tracing::info!(OC_EXTENSION = %package.name, origin = %package.origin, version = %package.manifest.version, "starting the extension");
                    Some(Arc::new(Supervisor::start(spec.clone(), options.clone())))
                } else {
                    tracing::warn!(OC_EXTENSION = %package.name, "not started: the package set has conflicts");
                    None
                };
                Entry {
                    package,
                    spec,
                    options,
                    supervisor: Mutex::new(supervisor),
                    previous: Mutex::new(None),
                    restarting: tokio::sync::Mutex::new(()),
                    configuration,
                    identity,
                }
            })
            .collect();
        Runner {
            host_bus: config.host_bus.clone(),
            entries,
            reports: discovery.reports,
            conflicts,
            stopping: AtomicBool::new(false),
            workspaces,
            tunnels,
            owners,
            applied: Mutex::new(
                config
                    .initial
                    .as_ref()
                    .map(|(doc, _)| Arc::new(doc.clone())),
            ),
            config_dir: config
                .installed_root
                .parent()
                .map(|p| p.display().to_string())
                .unwrap_or_default(),
            playbook_dir,
        }
    }

    /// The runner, shared: its workspace service can then call the providers, and
    /// `event.render_owned` the Events' owners.
    pub fn shared(self) -> Arc<Runner> {
        let runner = Arc::new(self);
        let weak = Arc::downgrade(&runner);
        runner.workspaces.attach(weak.clone());
        runner.owners.attach(weak);
        runner
    }

    /// The workspace service.
    pub fn workspaces(&self) -> &Arc<Workspaces> {
        &self.workspaces
    }

    /// Every resource type an admitted package provides, with the package.
    pub fn resource_types(&self) -> Vec<(String, String)> {
        self.entries
            .iter()
            .filter(|e| e.supervisor().is_some())
            .flat_map(|e| {
                e.package
                    .manifest
                    .provides
                    .resources
                    .iter()
                    .map(|r| (r.type_name.clone(), e.package.name.clone()))
            })
            .collect()
    }

    /// The package that provides `resource_type`.
    pub fn resource_provider(&self, resource_type: &str) -> Option<String> {
        self.resource_types()
            .into_iter()
            .find(|(t, _)| t == resource_type)
            .map(|(_, p)| p)
    }

    /// The configuration generation last applied, if any.
    pub fn applied(&self) -> Option<Arc<Config>> {
        lock(&self.applied).clone()
    }

    /// The files the applied configuration's `file:` secret references name: every
    /// sandbox is denied them.
    pub fn secret_files(&self) -> Vec<PathBuf> {
        let Some(doc) = lock(&self.applied).clone() else {
            return Vec::new();
        };
        doc.connections
            .iter()
            .flat_map(|c| c.secret_refs.values())
            .filter_map(|r| r.strip_prefix("file:"))
            .filter(|p| !p.is_empty())
            .map(PathBuf::from)
            .collect()
    }

    /// The running package whose manifest `declares`.
    fn provider_of(
        &self,
        declares: impl Fn(&protocol::manifest::Provides) -> bool,
    ) -> Option<String> {
        self.entries
            .iter()
            .filter(|e| e.supervisor().is_some())
            .find(|e| declares(&e.package.manifest.provides))
            .map(|e| e.package.name.clone())
    }

    /// The package that provides the sandbox type `sandbox_type`, when it runs.
    pub fn sandbox_provider(&self, sandbox_type: &str) -> Option<String> {
        self.provider_of(|p| p.sandboxes.iter().any(|s| s.type_name == sandbox_type))
    }

    /// The package that provides the container type `container_type`, when it runs.
    pub fn container_provider(&self, container_type: &str) -> Option<String> {
        self.provider_of(|p| p.containers.iter().any(|s| s.type_name == container_type))
    }

    /// Each distinct container (type, config) the applied configuration's enabled
    /// bindings name.
    pub fn container_configs(&self) -> Vec<(String, serde_json::Value)> {
        let Some(doc) = lock(&self.applied).clone() else {
            return Vec::new();
        };
        let mut out: Vec<(String, serde_json::Value)> = Vec::new();
        for scope in doc.scopes.iter().filter(|s| s.enabled) {
            for b in &scope.bindings {
                let Some(c) = b.get("container") else {
                    continue;
                };
                let Some(t) = c.get("type").and_then(serde_json::Value::as_str) else {
                    continue;
                };
                let item = (
                    t.to_owned(),
                    c.get("config").cloned().unwrap_or(serde_json::Value::Null),
                );
                if !out.contains(&item) {
                    out.push(item);
                }
            }
        }
        out
    }

    /// Whether `provider`'s manifest marks `resource_type` for sweeping.
    pub fn sweeps(&self, provider: &str, resource_type: &str) -> bool {
        self.manifest(provider).is_some_and(|m| {
            m.provides
                .resources
                .iter()
                .any(|r| r.type_name == resource_type && r.sweep)
        })
    }

    /// Resolves once every started extension's first handshake is done
    /// (running or refused, or failed and restarting): the slowest one.
    pub async fn ready(&self) {
        for entry in &self.entries {
            let Some(sup) = entry.supervisor() else {
                continue;
            };
            let mut rx = sup.subscribe();
            loop {
                rx.borrow_and_update();
                if settled(&sup) {
                    break;
                }
                if rx.changed().await.is_err() {
                    break;
                }
            }
        }
    }

    /// The conflicts that kept the whole set from starting (empty when none).
    pub fn conflicts(&self) -> &[Conflict] {
        &self.conflicts
    }

    /// The directories discovery did not offer.
    pub fn reports(&self) -> &[Report] {
        &self.reports
    }

    /// The names of the packages, in discovery order.
    pub fn names(&self) -> Vec<&str> {
        self.entries
            .iter()
            .map(|e| e.package.name.as_str())
            .collect()
    }

    /// The supervisor of `name`, when it is started.
    pub fn supervisor(&self, name: &str) -> Option<Arc<Supervisor>> {
        self.entry(name).and_then(Entry::supervisor)
    }

    fn entry(&self, name: &str) -> Option<&Entry> {
        self.entries.iter().find(|e| e.package.name == name)
    }

    /// How many extensions are where.
    pub fn counts(&self) -> Counts {
        let mut c = Counts {
            packages: self.entries.len(),
            ..Counts::default()
        };
        for e in &self.entries {
            match e.supervisor().map(|s| s.state()) {
                None => c.not_started += 1,
                Some(State::Running) => c.running += 1,
                Some(State::Refused { .. }) => c.refused += 1,
                Some(State::Starting | State::Backoff { .. }) => c.starting += 1,
                Some(State::Stopped) => {}
            }
        }
        c
    }

    /// The agents' plugin directory, written at start from every package's playbooks
    /// ([`crate::playbooks`]); empty when it could not be written.
    pub fn playbook_dir(&self) -> &str {
        &self.playbook_dir
    }

    /// The bus the packages' host calls go out on (`None` in tests of supervision
    /// alone).
    pub fn host_bus(&self) -> Option<&Bus> {
        self.host_bus.as_ref()
    }

    /// The scopes whose configuration uses the package `name` (its identity's).
    pub fn scopes_of(&self, name: &str) -> Vec<String> {
        self.entry(name)
            .map(|e| e.identity.current().scopes.clone())
            .unwrap_or_default()
    }

    /// The manifest of the package `name`.
    pub fn manifest(&self, name: &str) -> Option<&protocol::manifest::Manifest> {
        self.entry(name).map(|e| &e.package.manifest)
    }

    /// Stop every extension at once, each with its whole process group, and wait
    /// for all of them.
    pub async fn stop_all(&self) {
        self.stopping.store(true, Ordering::SeqCst);
        // Wait for restarts under way, so none starts a process after this.
        for e in &self.entries {
            drop(e.restarting.lock().await);
        }
        let mut set = tokio::task::JoinSet::new();
        for e in &self.entries {
            if let Some(sup) = e.supervisor() {
                set.spawn(async move { sup.stop().await });
            }
        }
        while let Some(r) = set.join_next().await {
            if let Err(e) = r {
                tracing::error!(error = %e, "stopping an extension failed");
            }
        }
    }
}

/// The packages that provide resources and sandboxes, as the workspace service
/// needs them.
impl Providers for Runner {
    fn resource_types(&self) -> Vec<(String, String)> {
        Runner::resource_types(self)
    }

    fn sweeps(&self, provider: &str, resource_type: &str) -> bool {
        Runner::sweeps(self, provider, resource_type)
    }

    fn sandbox_provider(&self, sandbox_type: &str) -> Option<String> {
        Runner::sandbox_provider(self, sandbox_type)
    }

    fn container_provider(&self, container_type: &str) -> Option<String> {
        Runner::container_provider(self, container_type)
    }

    fn container_configs(&self) -> Vec<(String, serde_json::Value)> {
        Runner::container_configs(self)
    }

    fn secret_files(&self) -> Vec<PathBuf> {
        Runner::secret_files(self)
    }

    fn playbook_dir(&self) -> String {
        Runner::playbook_dir(self).to_owned()
    }

    fn peer(&self, provider: &str) -> Option<protocol::Peer> {
        Runner::supervisor(self, provider).and_then(|s| s.peer())
    }

    fn call<'a>(
        &'a self,
        provider: &'a str,
        method: &'a str,
        params: Box<RawValue>,
        timeout: std::time::Duration,
    ) -> WorkspaceCall<'a> {
        Box::pin(async move {
            Runner::call(self, provider, method, &*params, false, timeout, None).await
        })
    }
}

/// The packages that own Event families, as the renderings need them.
impl Packages for Runner {
    fn names(&self) -> Vec<&str> {
        Runner::names(self)
    }

    fn manifest(&self, name: &str) -> Option<&protocol::manifest::Manifest> {
        Runner::manifest(self, name)
    }

    fn applied(&self) -> Option<Arc<Config>> {
        Runner::applied(self)
    }

    fn scopes_of(&self, name: &str) -> Vec<String> {
        Runner::scopes_of(self, name)
    }

    fn call<'a>(
        &'a self,
        name: &'a str,
        method: &'a str,
        params: Box<RawValue>,
        timeout: std::time::Duration,
    ) -> RenderCall<'a> {
        Box::pin(
            async move { Runner::call(self, name, method, &*params, false, timeout, None).await },
        )
    }
}
