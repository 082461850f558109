//! What the operator sees of the packages and does to them: `ext.list`,
//! `ext.inspect`, `ext.restart`, and the counts of `STATUS=`.

use super::*;
use busapi::ext::{
    ClaimantInfo, ConflictInfo, DiscoveryReport, ExtensionDetail, ExtensionSummary, LastExit,
    ListResponse, RestartResponse,
};

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

fn report_info(r: &Report) -> DiscoveryReport {
    let mut v = DiscoveryReport {
        name: r.name.clone(),
        dir: r.dir.display().to_string(),
        origin: r.origin.as_str().to_owned(),
        kind: report_kind(&r.kind).to_owned(),
        message: r.message.clone(),
        rule: None,
        needs_newer: None,
    };
    if let ReportKind::Invalid {
        rule, needs_newer, ..
    } = &r.kind
    {
        v.rule = Some(rule.map(str::to_owned));
        v.needs_newer = Some(*needs_newer);
    }
    v
}

fn claimant_info(c: &Claimant) -> ClaimantInfo {
    match c {
        Claimant::Host => ClaimantInfo {
            host: true,
            ..ClaimantInfo::default()
        },
        Claimant::Package { name, dir } => ClaimantInfo {
            host: false,
            package: Some(name.clone()),
            dir: Some(dir.display().to_string()),
        },
    }
}

fn conflict_info(c: &Conflict) -> ConflictInfo {
    ConflictInfo {
        kind: c.kind.clone(),
        name: c.name.clone(),
        first: claimant_info(&c.first),
        second: claimant_info(&c.second),
        packages: c.packages().map(str::to_owned).collect(),
        message: c.to_string(),
    }
}

impl Runner {
    fn restarts(e: &Entry, sup: Option<&Supervisor>) -> u64 {
        let before = lock(&e.previous).map_or(0, |p| p.restarts);
        before + sup.map_or(0, Supervisor::restarts)
    }

    pub(super) fn state_of(sup: Option<&Supervisor>) -> (&'static str, Option<State>) {
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
    pub fn list(&self) -> ListResponse {
        let extensions: Vec<ExtensionSummary> = self
            .entries
            .iter()
            .map(|e| {
                let sup = e.supervisor();
                let sup = sup.as_deref();
                let (state, _) = Self::state_of(sup);
                let running = state == "running";
                ExtensionSummary {
                    name: e.package.name.clone(),
                    origin: e.package.origin.as_str().to_owned(),
                    bundled: e.package.origin == Origin::Bundled,
                    version: e.package.manifest.version.clone(),
                    state: state.to_owned(),
                    restarts: Self::restarts(e, sup),
                    pid: if running {
                        sup.and_then(Supervisor::pid)
                    } else {
                        None
                    },
                    protocol_version: sup.and_then(Supervisor::protocol_version),
                    refusal: self.refusal(e, sup),
                }
            })
            .collect();
        ListResponse {
            extensions,
            reports: self.reports.iter().map(report_info).collect(),
            conflicts: self.conflicts.iter().map(conflict_info).collect(),
        }
    }

    /// `ext.inspect`: one package in detail, or `None` for an unknown name.
    pub fn inspect(&self, name: &str) -> Option<ExtensionDetail> {
        let e = self.entry(name)?;
        let sup = e.supervisor();
        let sup = sup.as_deref();
        let (state_text, state) = Self::state_of(sup);
        let previous = *lock(&e.previous);
        let last_exit = match (sup.and_then(Supervisor::last_exit), &state) {
            (Some(exit), Some(state)) => Some(LastExit {
                status: exit.to_string(),
                why: match state {
                    State::Refused { .. } => "refused",
                    State::Stopped => "stopped",
                    _ => "crashed",
                }
                .to_owned(),
            }),
            _ => previous.and_then(|p| p.exit).map(|exit| LastExit {
                status: exit.to_string(),
                why: "restarted by the operator".to_owned(),
            }),
        };
        let running = state_text == "running";
        let mut v = ExtensionDetail {
            name: e.package.name.clone(),
            origin: e.package.origin.as_str().to_owned(),
            version: e.package.manifest.version.clone(),
            title: e.package.manifest.title.clone(),
            state: state_text.to_owned(),
            protocol_version: sup.and_then(Supervisor::protocol_version),
            protocol_versions: e.package.manifest.protocol.clone(),
            restarts: Self::restarts(e, sup),
            pid: if running {
                sup.and_then(Supervisor::pid)
            } else {
                None
            },
            last_exit,
            refusal: self.refusal(e, sup),
            permissions: e.package.manifest.permissions.clone(),
            command: e.package.manifest.command.clone(),
            dir: e.package.dir.display().to_string(),
            state_dir: e.spec.state_dir.display().to_string(),
            log: e.spec.log_path.display().to_string(),
            grants: e.spec.grants.clone(),
            restart_in_ms: None,
            conflicts: None,
        };
        if let Some(State::Backoff { until }) = state {
            let ms = until.saturating_duration_since(Instant::now()).as_millis();
            v.restart_in_ms = Some(u64::try_from(ms).unwrap_or(u64::MAX));
        }
        if sup.is_none() {
            v.conflicts = Some(
                self.conflicts
                    .iter()
                    .filter(|c| c.packages().any(|p| p == name))
                    .map(conflict_info)
                    .collect(),
            );
        }
        Some(v)
    }

    /// `ext.restart`: stop the extension and start it again; a refused one is
    /// tried again (the operator may have fixed it). Answers the new state.
    pub async fn restart(&self, name: &str) -> Result<RestartResponse, RpcError> {
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
        Ok(RestartResponse {
            name: name.to_owned(),
            state: state_name(&state).to_owned(),
            pid: if state == State::Running {
                new.pid()
            } else {
                None
            },
            refusal: match state {
                State::Refused { reason } => Some(reason.to_string()),
                _ => None,
            },
        })
    }
}
