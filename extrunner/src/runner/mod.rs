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
//! ([`Runner::restart`]), forwards a host-to-extension call ([`Runner::call`])
//! and stops every extension, each with its process group ([`Runner::stop_all`]).

use crate::configuration::{Configuration, Registered};
use crate::conflicts::{check_conflicts, Claimant, Conflict, HostNames};
use crate::discovery::{discover, Origin, Package, Report, ReportKind};
use crate::host::{BoundIdentity, Identity, ScopedHost};
use crate::process::send_configure;
use crate::process::{
    KvLayouts, LayoutFuture, ProcessExit, ProcessSpec, State, Supervisor, SupervisorOptions,
};
use crate::tunnels::TunnelRuns;
use crate::workspaces::Workspaces;
use daemon::bus::Bus;
use protocol::config::Config;
use protocol::wire::KvLayout;
use protocol::{Code, RpcError};
use serde_json::{json, Value};
use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;
use tokio::sync::watch;

mod calls;
mod intake;

pub use intake::{ReconcilePage, WebhookAnswer, WEBHOOK_TIMEOUT};

/// The methods only the host's lifecycle sends; never forwarded by `ext.call`.
const LIFECYCLE: &[&str] = &["initialize", "configure", "shutdown"];

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

/// The KV layout versions storaged records (`store.kv_layout_get/set`), over
/// the bus.
#[derive(Debug, Clone)]
pub struct BusKvLayouts {
    bus: Bus,
}

impl BusKvLayouts {
    /// The layouts storaged keeps, reached on `bus`.
    pub fn new(bus: Bus) -> BusKvLayouts {
        BusKvLayouts { bus }
    }
}

impl KvLayouts for BusKvLayouts {
    fn get<'a>(&'a self, name: &'a str) -> LayoutFuture<'a, u32> {
        Box::pin(async move {
            let answer = self
                .bus
                .call("store.kv_layout_get", &json!({ "extension": name }))
                .await
                .map_err(|e| format!("store.kv_layout_get: {e}"))?;
            match answer.get("version") {
                None | Some(Value::Null) => Ok(0),
                Some(v) => v
                    .as_u64()
                    .and_then(|v| u32::try_from(v).ok())
                    .ok_or_else(|| format!("store.kv_layout_get answered version {v}")),
            }
        })
    }

    fn set<'a>(&'a self, name: &'a str, version: u32) -> LayoutFuture<'a, ()> {
        Box::pin(async move {
            self.bus
                .call(
                    "store.kv_layout_set",
                    &json!({ "extension": name, "version": version }),
                )
                .await
                .map(|_| ())
                .map_err(|e| format!("store.kv_layout_set: {e}"))
        })
    }
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

/// How many extensions are where (for `STATUS=`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counts {
    /// Discovered and offered packages.
    pub packages: usize,
    /// Running.
    pub running: usize,
    /// Refused for good.
    pub refused: usize,
    /// Starting or waiting to restart.
    pub starting: usize,
    /// Not started because of a conflict.
    pub not_started: usize,
}

impl std::fmt::Display for Counts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let plural = |n: usize| if n == 1 { "" } else { "s" };
        if self.not_started > 0 {
            return write!(
                f,
                "{} extension{} not started: conflicts in the package set",
                self.not_started,
                plural(self.not_started)
            );
        }
        write!(
            f,
            "{} extension{} running, {} refused",
            self.running,
            plural(self.running),
            self.refused
        )?;
        if self.starting > 0 {
            write!(f, ", {} starting", self.starting)?;
        }
        Ok(())
    }
}

/// The state's name on the bus.
pub fn state_name(state: &State) -> &'static str {
    match state {
        State::Starting => "starting",
        State::Running => "running",
        State::Backoff { .. } => "backoff",
        State::Refused { .. } => "refused",
        State::Stopped => "stopped",
    }
}

fn report_kind(kind: &ReportKind) -> &'static str {
    match kind {
        ReportKind::Invalid { .. } => "invalid",
        ReportKind::NoManifest => "no_manifest",
        ReportKind::ShadowedBundled { .. } => "shadowed_bundled",
        ReportKind::Unreadable { .. } => "unreadable",
    }
}

fn report_json(r: &Report) -> Value {
    let mut v = json!({
        "name": r.name,
        "dir": r.dir.display().to_string(),
        "origin": r.origin.as_str(),
        "kind": report_kind(&r.kind),
        "message": r.message,
    });
    if let ReportKind::Invalid {
        rule, needs_newer, ..
    } = &r.kind
    {
        v["rule"] = json!(rule);
        v["needs_newer"] = json!(needs_newer);
    }
    v
}

fn claimant_json(c: &Claimant) -> Value {
    match c {
        Claimant::Host => json!({"host": true}),
        Claimant::Package { name, dir } => {
            json!({"package": name, "dir": dir.display().to_string()})
        }
    }
}

fn conflict_json(c: &Conflict) -> Value {
    json!({
        "kind": c.kind,
        "name": c.name,
        "first": claimant_json(&c.first),
        "second": claimant_json(&c.second),
        "packages": c.packages().collect::<Vec<_>>(),
        "message": c.to_string(),
    })
}

/// Set what `configure` sends `manifest`'s package from `doc`, and rebind its identity.
fn configure_entry(
    doc: &Config,
    generation: &str,
    manifest: &protocol::manifest::Manifest,
    configuration: &Configuration,
    identity: &BoundIdentity,
) {
    let ec = doc.for_extension(manifest, generation);
    let refs: BTreeMap<String, BTreeMap<String, String>> = ec
        .connections
        .iter()
        .filter_map(|c| doc.connection(c))
        .map(|c| (c.name.clone(), c.secret_refs.clone()))
        .collect();
    configuration.set(ec.params, refs);
    configuration.set_document(std::sync::Arc::new(doc.clone()));
    identity.rebind(ec.scopes, ec.connections);
    identity.rebind_unscoped(ec.unscoped_connections);
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
        runner.workspaces.attach(&runner);
        runner.owners.attach(&runner);
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

    /// The package that provides the sandbox type `sandbox_type`, when it runs.
    pub fn sandbox_provider(&self, sandbox_type: &str) -> Option<String> {
        self.entries
            .iter()
            .filter(|e| e.supervisor().is_some())
            .find(|e| {
                e.package
                    .manifest
                    .provides
                    .sandboxes
                    .iter()
                    .any(|s| s.type_name == sandbox_type)
            })
            .map(|e| e.package.name.clone())
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

    fn restarts(e: &Entry, sup: Option<&Supervisor>) -> u64 {
        let before = lock(&e.previous).map_or(0, |p| p.restarts);
        before + sup.map_or(0, Supervisor::restarts)
    }

    fn state_of(sup: Option<&Supervisor>) -> (&'static str, Option<State>) {
        match sup {
            None => ("not_started", None),
            Some(s) => {
                let state = s.state();
                (state_name(&state), Some(state))
            }
        }
    }

    fn refusal(&self, e: &Entry, sup: Option<&Supervisor>) -> Option<String> {
        match sup.map(Supervisor::state) {
            None => Some(crate::conflicts::describe(&self.conflicts)),
            Some(State::Refused { reason }) => Some(reason.to_string()),
            _ => e.configuration.registered().refusal.map(|r| {
                format!(
                    "refuses configuration generation {}: {}",
                    r.generation, r.error
                )
            }),
        }
    }

    /// `ext.list`: every package, the discovery reports and the conflicts.
    pub fn list(&self) -> Value {
        let extensions: Vec<Value> = self
            .entries
            .iter()
            .map(|e| {
                let sup = e.supervisor();
                let sup = sup.as_deref();
                let (state, _) = Self::state_of(sup);
                let running = state == "running";
                json!({
                    "name": e.package.name,
                    "origin": e.package.origin.as_str(),
                    "bundled": e.package.origin == Origin::Bundled,
                    "version": e.package.manifest.version,
                    "state": state,
                    "restarts": Self::restarts(e, sup),
                    "pid": if running { sup.and_then(Supervisor::pid) } else { None },
                    "protocol_version": sup.and_then(Supervisor::protocol_version),
                    "refusal": self.refusal(e, sup),
                })
            })
            .collect();
        json!({
            "extensions": extensions,
            "reports": self.reports.iter().map(report_json).collect::<Vec<_>>(),
            "conflicts": self.conflicts.iter().map(conflict_json).collect::<Vec<_>>(),
        })
    }

    /// `ext.inspect`: one package in detail, or `None` for an unknown name.
    pub fn inspect(&self, name: &str) -> Option<Value> {
        let e = self.entry(name)?;
        let sup = e.supervisor();
        let sup = sup.as_deref();
        let (state_text, state) = Self::state_of(sup);
        let previous = *lock(&e.previous);
        let last_exit = match (sup.and_then(Supervisor::last_exit), &state) {
            (Some(exit), Some(state)) => Some(json!({
                "status": exit.to_string(),
                "why": match state {
                    State::Refused { .. } => "refused",
                    State::Stopped => "stopped",
                    _ => "crashed",
                },
            })),
            _ => previous.and_then(|p| p.exit).map(
                |exit| json!({"status": exit.to_string(), "why": "restarted by the operator"}),
            ),
        };
        let running = state_text == "running";
        let mut v = json!({
            "name": e.package.name,
            "origin": e.package.origin.as_str(),
            "version": e.package.manifest.version,
            "title": e.package.manifest.title,
            "state": state_text,
            "protocol_version": sup.and_then(Supervisor::protocol_version),
            "protocol_versions": e.package.manifest.protocol,
            "restarts": Self::restarts(e, sup),
            "pid": if running { sup.and_then(Supervisor::pid) } else { None },
            "last_exit": last_exit,
            "refusal": self.refusal(e, sup),
            "permissions": e.package.manifest.permissions,
            "command": e.package.manifest.command,
            "dir": e.package.dir.display().to_string(),
            "state_dir": e.spec.state_dir.display().to_string(),
            "log": e.spec.log_path.display().to_string(),
            "grants": e.spec.grants,
        });
        if let Some(State::Backoff { until }) = state {
            let ms = until.saturating_duration_since(Instant::now()).as_millis();
            v["restart_in_ms"] = json!(u64::try_from(ms).unwrap_or(u64::MAX));
        }
        if sup.is_none() {
            v["conflicts"] = self
                .conflicts
                .iter()
                .filter(|c| c.packages().any(|p| p == name))
                .map(conflict_json)
                .collect();
        }
        Some(v)
    }

    /// `ext.restart`: stop the extension and start it again; a refused one is
    /// tried again (the operator may have fixed it). Answers the new state.
    pub async fn restart(&self, name: &str) -> Result<Value, RpcError> {
        let Some(e) = self.entry(name) else {
            return Err(RpcError::new(
                Code::NotFound,
                format!("no extension named `{name}`"),
            ));
        };
        let _serial = e.restarting.lock().await;
        if self.stopping.load(Ordering::SeqCst) {
            return Err(RpcError::new(
                Code::ShuttingDown,
                "extrunner is stopping every extension",
            ));
        }
        let Some(old) = e.supervisor() else {
            return Err(RpcError::new(
                Code::Conflict,
                format!(
                    "`{name}` is not started: {}",
                    crate::conflicts::describe(&self.conflicts)
                ),
            ));
        };
        tracing::info!(OC_EXTENSION = %name, "restarting the extension, as the operator asked");
        old.stop().await;
        {
            let mut prev = lock(&e.previous);
            let before = prev.map_or(0, |p| p.restarts);
            *prev = Some(Previous {
                exit: old.last_exit().or(prev.and_then(|p| p.exit)),
                restarts: before + old.restarts(),
            });
        }
        let new = Arc::new(Supervisor::start(e.spec.clone(), e.options.clone()));
        *lock(&e.supervisor) = Some(new.clone());
        let mut rx = new.subscribe();
        loop {
            rx.borrow_and_update();
            if settled(&new) {
                break;
            }
            if rx.changed().await.is_err() {
                break;
            }
        }
        let state = new.state();
        Ok(json!({
            "name": name,
            "state": state_name(&state),
            "pid": if state == State::Running { new.pid() } else { None },
            "refusal": match state { State::Refused { reason } => Some(reason.to_string()), _ => None },
        }))
    }

    /// A new configuration generation: every package's configure params and
    /// identity are replaced, and each running one is sent `configure` again without
    /// a restart (with its KV layout current). Answers, for each package configured
    /// again, the reason it failed, if it did; a failed one keeps its earlier
    /// registration and gets the new configuration at its next start.
    pub async fn apply(&self, doc: &Config, generation: &str) -> Vec<(String, Result<(), String>)> {
        *lock(&self.applied) = Some(Arc::new(doc.clone()));
        for e in &self.entries {
            configure_entry(
                doc,
                generation,
                &e.package.manifest,
                &e.configuration,
                &e.identity,
            );
        }
        self.configure_running(generation).await
    }

    /// The tunnel's public URL changed (`None`: none published): every package is
    /// configured with it in place of `settings.webhooks.public_url`, the running ones
    /// again at once without a restart (spec: configure is sent again on every tunnel
    /// URL change). Answers what [`Runner::apply`] does; nothing when it did not change.
    pub async fn set_public_url(&self, url: Option<String>) -> Vec<(String, Result<(), String>)> {
        if !self.tunnels.set_public_url(url) {
            return Vec::new();
        }
        let url = self.tunnels.public_url();
        let mut generation = String::new();
        for e in &self.entries {
            e.configuration.set_tunnel_url(url.clone());
            generation = e.configuration.params().generation;
        }
        self.configure_running(&generation).await
    }

    async fn configure_running(&self, generation: &str) -> Vec<(String, Result<(), String>)> {
        let mut out = Vec::new();
        for e in &self.entries {
            let Some(peer) = e.supervisor().and_then(|s| s.peer()) else {
                continue;
            };
            let declared = crate::process::declared_kv_version(&e.spec.manifest_json);
            let kv = KvLayout {
                stored: declared,
                declared,
            };
            let r = send_configure(&peer, &e.options, kv, e.options.configure_timeout)
                .await
                .map(|_| ())
                .map_err(|err| err.to_string());
            match &r {
                Ok(()) => {
                    tracing::info!(OC_EXTENSION = %e.package.name, %generation, "configured again")
                }
                Err(why) => {
                    tracing::error!(OC_EXTENSION = %e.package.name, %generation, %why, "configure failed");
                    e.configuration.refuse(generation, why);
                }
            }
            out.push((e.package.name.clone(), r));
        }
        out
    }

    /// What each package registered in its last configure, with its state.
    pub fn registrations(&self) -> Vec<(String, &'static str, Registered)> {
        self.entries
            .iter()
            .map(|e| {
                let sup = e.supervisor();
                let (state, _) = Self::state_of(sup.as_deref());
                (e.package.name.clone(), state, e.configuration.registered())
            })
            .collect()
    }

    /// The agents' plugin directory, written at start from every package's playbooks
    /// ([`crate::playbooks`]); empty when it could not be written.
    pub fn playbook_dir(&self) -> &str {
        &self.playbook_dir
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

    /// Follow each package's registrations (name, receiver).
    pub fn watch_registrations(&self) -> Vec<(String, watch::Receiver<Registered>)> {
        self.entries
            .iter()
            .map(|e| (e.package.name.clone(), e.configuration.subscribe()))
            .collect()
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
