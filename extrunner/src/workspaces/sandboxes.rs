//! Sandboxes: the host side of sandbox providers (`sandbox.plan`, `sandbox.adopt`).
//!
//! Served only through a run the host opened for the calling process (the same gate
//! as `resource.acquire`) and only when that run's binding has a sandbox. The host
//! checks the executor's needs against its protected set (the state directory but
//! the run's own folders and its Work's workspaces, the configuration directory and
//! the configuration file the suite was started with (its whole folder), the
//! folders of the configuration's `file:` secrets, the bus and toolbelt sockets but
//! the run's, the operator's `~/.claude` and
//! `~/.claude.json`): a need inside it, or one that would re-open it, is refused as
//! `sandbox_denied`. A secret is masked by its folder, not its file, so that a
//! secret rotated by rename (`mv new old`) while a run goes on is still out of
//! reach: a secret whose folder is `/`, a system folder, or holds one of the run's
//! needs refuses the plan (secrets belong in a folder of their own). It adds the set to the launch's denials, asks the binding's
//! provider (`sandbox_provider.plan`), computes the digest of the plan itself and pins
//! plan and digest in `<state>/sandboxes/pins/<execution>.json`. `sandbox.adopt`
//! reads the pin back, refuses (`sandbox_denied`) a plan whose digest no longer
//! matches, and asks the provider (`sandbox_provider.adopt`) to prove the live
//! process is inside it. A provider that is down, slow or answers anything but a
//! refusal fails closed: `sandbox_unavailable`, and nothing runs.

use std::path::{Path, PathBuf};
use std::time::Duration;

use protocol::sandbox::{
    plan_digest, within, SandboxAdoptParams, SandboxLaunch, SandboxNeeds, SandboxPlan,
    SandboxPlanParams, SandboxPlanned, SandboxProviderAdoptParams, SandboxProviderAdoptResult,
    SandboxProviderPlanParams, MAX_NEEDS, MAX_NEED_BYTES,
};
use protocol::{Code, Peer, RpcError};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::{call_method, lock, OpenRun, Workspaces};

/// The longest one `sandbox_provider.plan` or `sandbox_provider.adopt` may take.
pub const PROVIDER_TIMEOUT: Duration = Duration::from_secs(60);
/// The most arguments in a launch.
pub const MAX_ARGS: usize = 4096;
/// The most variables in a launch's environment.
pub const MAX_ENV: usize = 4096;

/// What the host protects from every sandbox.
#[derive(Debug, Clone, Default)]
pub struct Protected {
    /// The host's state directory (its runs and workspaces are re-opened per run).
    pub state_dir: PathBuf,
    /// The configuration directory (`/etc/open-conduit`).
    pub config_dir: PathBuf,
    /// The bus and toolbelt sockets.
    pub sockets: Vec<PathBuf>,
    /// The operator's home (its `.claude` and `.claude.json`).
    pub home: Option<PathBuf>,
    /// The configuration file the suite was started with (`open-conduit up
    /// --config FILE`): its folder is denied.
    pub config_file: Option<PathBuf>,
}

/// Folders a sandbox cannot be denied and still run a program: a secret or the
/// configuration file kept right in one refuses the plan.
pub const SYSTEM_FOLDERS: &[&str] = &[
    "/", "/bin", "/boot", "/dev", "/etc", "/home", "/lib", "/lib32", "/lib64", "/libx32", "/opt",
    "/proc", "/run", "/sbin", "/sys", "/tmp", "/usr", "/var", "/var/lib", "/var/tmp",
];

/// Where the package keeps `file:` secrets, for the refusals' advice.
pub const SECRETS_FOLDER: &str = "/etc/open-conduit/secrets/";

/// The folders denied for the `file:` secrets and the configuration file: each
/// one's folder. A secret's folder that is a system folder or holds a need of the
/// launch refuses the plan; so does a configuration file's system folder (needs
/// in its folder are checked against the protected set as usual: the run's own
/// folders may be there).
pub fn secret_folders(
    secrets: &[PathBuf],
    config_file: Option<&Path>,
    needs: &SandboxNeeds,
) -> Result<Vec<String>, RpcError> {
    let system = |f: &str| SYSTEM_FOLDERS.contains(&f);
    let mut out: Vec<String> = Vec::new();
    for secret in secrets {
        let file = absolute(secret);
        let folder = folder_of(&file);
        if system(&folder) {
            return Err(denied(format!(
                "the `file:` secret {} is kept right in {folder:?}, a folder a sandbox cannot be denied: keep secrets in a folder of their own (the package's is {SECRETS_FOLDER})",
                file.display()
            )));
        }
        if let Some(need) = needs
            .read
            .iter()
            .chain(&needs.write)
            .find(|n| within(n, &folder))
        {
            return Err(denied(format!(
                "the `file:` secret {} is in {folder:?}, which also holds the run's need {need:?}: a sandbox is denied the whole folder of each secret, so keep secrets in a folder of their own (the package's is {SECRETS_FOLDER})",
                file.display()
            )));
        }
        if !out.contains(&folder) {
            out.push(folder);
        }
    }
    if let Some(config) = config_file {
        let file = absolute(config);
        let folder = folder_of(&file);
        if system(&folder) {
            return Err(denied(format!(
                "the configuration file {} is kept right in {folder:?}, a folder a sandbox cannot be denied: keep it in a folder of its own",
                file.display()
            )));
        }
        if !out.contains(&folder) {
            out.push(folder);
        }
    }
    Ok(out)
}

/// The folder holding `file` (`/` for a file at the root).
fn folder_of(file: &Path) -> String {
    file.parent()
        .unwrap_or(Path::new("/"))
        .display()
        .to_string()
}

impl Protected {
    fn paths(&self) -> Vec<String> {
        let mut out: Vec<PathBuf> = Vec::new();
        for p in [&self.state_dir, &self.config_dir] {
            if !p.as_os_str().is_empty() {
                out.push(absolute(p));
            }
        }
        out.extend(self.sockets.iter().map(|p| absolute(p)));
        if let Some(h) = &self.home {
            out.push(h.join(".claude"));
            out.push(h.join(".claude.json"));
        }
        out.iter().map(|p| p.display().to_string()).collect()
    }
}

fn absolute(p: &Path) -> PathBuf {
    std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf())
}

/// A pinned plan as the host keeps it.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
struct Pin {
    execution_id: String,
    work_id: String,
    #[serde(rename = "type")]
    sandbox_type: String,
    digest: String,
    plan: SandboxPlan,
}

pub(super) fn denied(message: impl Into<String>) -> RpcError {
    RpcError::new(Code::SandboxDenied, message)
}

pub(super) fn unavailable(message: impl Into<String>) -> RpcError {
    RpcError::new(Code::SandboxUnavailable, message)
}

/// A provider's refusal crosses as itself; anything else fails closed.
fn provider_error(provider: &str, method: &str, e: RpcError) -> RpcError {
    match e.app_code() {
        Some("sandbox_denied") | Some("sandbox_unavailable") => e,
        _ => unavailable(format!(
            "the sandbox provider {provider:?} failed {method}: {}",
            e.message
        )),
    }
}

fn check_path(what: &str, p: &str) -> Result<(), RpcError> {
    if p.len() > MAX_NEED_BYTES || p.contains('\0') || !Path::new(p).is_absolute() {
        return Err(RpcError::invalid_params(format!(
            "{what} {:?} is not an absolute path within {MAX_NEED_BYTES} bytes",
            protocol::wire::clip_line(p, 200)
        )));
    }
    Ok(())
}

pub(super) fn check_launch(launch: &SandboxLaunch, needs: &SandboxNeeds) -> Result<(), RpcError> {
    if launch.argv.is_empty() || launch.argv.len() > MAX_ARGS {
        return Err(RpcError::invalid_params(format!(
            "a launch needs 1 to {MAX_ARGS} arguments, not {}",
            launch.argv.len()
        )));
    }
    if launch.env.len() > MAX_ENV {
        return Err(RpcError::invalid_params(format!(
            "{} variables in a launch's environment, over the limit of {MAX_ENV}",
            launch.env.len()
        )));
    }
    check_path("the launch's cwd", &launch.cwd)?;
    for (what, list) in [
        ("read", &needs.read),
        ("write", &needs.write),
        ("deny", &needs.deny),
        ("hosts", &needs.hosts),
    ] {
        if list.len() > MAX_NEEDS {
            return Err(RpcError::invalid_params(format!(
                "{} {what} needs, over the limit of {MAX_NEEDS}",
                list.len()
            )));
        }
        for item in list {
            if what == "hosts" {
                if item.is_empty() || item.len() > 253 || item.contains(['/', ' ', '\0']) {
                    return Err(RpcError::invalid_params(format!(
                        "the host need {item:?} is not a host name"
                    )));
                }
            } else {
                check_path(&format!("the {what} need"), item)?;
            }
        }
    }
    Ok(())
}

impl Workspaces {
    /// Sets what every sandbox is denied (the extrunner's state and configuration
    /// directories, its sockets, the operator's home).
    pub fn protect(&self, protected: Protected) {
        *lock(&self.protected) = protected;
    }

    /// Adds sockets to the protected set.
    pub fn protect_sockets(&self, sockets: impl IntoIterator<Item = PathBuf>) {
        lock(&self.protected).sockets.extend(sockets);
    }

    fn sandboxed(
        &self,
        caller: &str,
        peer: &Peer,
        execution_id: &str,
        epoch: u64,
    ) -> Result<(OpenRun, String, Value), RpcError> {
        self.confined_run(caller, peer, execution_id, epoch, "sandbox", |b| {
            b.sandbox.clone()
        })
    }

    /// The run the host opened for `caller` over `peer` whose binding has a
    /// `field` (`sandbox`, `container`) picked by `pick`: the run, the field's type
    /// and its config. A binding without one is `unauthorized`.
    pub(super) fn confined_run(
        &self,
        caller: &str,
        peer: &Peer,
        execution_id: &str,
        epoch: u64,
        field: &str,
        pick: impl Fn(&protocol::wire::Binding) -> Option<Value>,
    ) -> Result<(OpenRun, String, Value), RpcError> {
        let run = self.opened(caller, peer, execution_id, epoch)?;
        let Some(confine) = pick(&run.binding) else {
            return Err(RpcError::new(
                Code::Unauthorized,
                format!(
                    "binding {:?} of scope {:?} has no {field}: {field}.* is served only through a run whose binding has one",
                    run.binding.name, run.scope_id
                ),
            ));
        };
        let Some(kind) = confine.get("type").and_then(Value::as_str) else {
            return Err(RpcError::new(
                Code::Invalid,
                format!("binding {:?}'s {field} names no type", run.binding.name),
            ));
        };
        let config = confine.get("config").cloned().unwrap_or(Value::Null);
        Ok((run, kind.to_owned(), config))
    }

    fn pin_path(&self, execution_id: &str) -> Result<PathBuf, RpcError> {
        let state = lock(&self.protected).state_dir.clone();
        if state.as_os_str().is_empty() {
            return Err(unavailable(
                "the host has no state directory to pin sandbox plans in",
            ));
        }
        Ok(state
            .join("sandboxes/pins")
            .join(format!("{execution_id}.json")))
    }

    /// The run's own folders: its run directory under its executor's directory, its
    /// Work's workspaces, its toolbelt.
    async fn own_folders(&self, run: &OpenRun, execution_id: &str) -> Vec<String> {
        let state = absolute(&lock(&self.protected).state_dir);
        // The executor's directory (`initialize`'s executor_dirs), or the package's
        // own state directory when it keeps its runs there.
        let mut own: Vec<String> = [
            state.join("executors").join(&run.executor),
            state.join("extensions").join(&run.extension),
        ]
        .iter()
        .map(|d| d.join("runs").join(execution_id).display().to_string())
        .collect();
        if let Some((endpoint, dir)) = &run.toolbelt {
            own.push(endpoint.clone());
            if !dir.is_empty() {
                own.push(dir.clone());
            }
        }
        if let Ok(leases) = self.leases(None, Some(&run.work_id)).await {
            own.extend(leases.into_iter().map(|l| l.dir).filter(|d| !d.is_empty()));
        }
        own
    }

    /// The needs merged with the protected set, or the need that would breach it.
    pub(super) async fn merge(
        &self,
        run: &OpenRun,
        execution_id: &str,
        needs: SandboxNeeds,
    ) -> Result<SandboxNeeds, RpcError> {
        let (mut protected, config_file) = {
            let p = lock(&self.protected);
            (p.paths(), p.config_file.clone())
        };
        let secrets = self.runner().map(|r| r.secret_files()).unwrap_or_default();
        for folder in secret_folders(&secrets, config_file.as_deref(), &needs)? {
            if !protected.contains(&folder) {
                protected.push(folder);
            }
        }
        let own = self.own_folders(run, execution_id).await;
        // The agents' plugin (under the state directory) may be read, never written.
        let playbooks = self.runner().map(|r| r.playbook_dir()).unwrap_or_default();
        let mut merged = needs;
        let reads = merged.read.len();
        for (i, need) in merged.read.iter().chain(&merged.write).enumerate() {
            let readable = i < reads && !playbooks.is_empty() && within(need, &playbooks);
            let is_own = readable || own.iter().any(|o| within(need, o));
            for p in &protected {
                let inside = within(need, p) && !is_own;
                // A need above a protected path would re-open it.
                let above = within(p, need) && need != p;
                if inside || above {
                    return Err(denied(format!(
                        "the need {need:?} is outside the policy: it {} the host's protected {p:?}",
                        if inside { "is inside" } else { "contains" }
                    )));
                }
            }
        }
        for p in protected {
            // The run's own toolbelt socket is the one protected path it may use.
            if !own.contains(&p) && !merged.deny.contains(&p) {
                merged.deny.push(p);
            }
        }
        Ok(merged)
    }

    /// `sandbox.plan` from `caller` over `peer`.
    pub async fn sandbox_plan(
        &self,
        caller: &str,
        peer: &Peer,
        p: SandboxPlanParams,
    ) -> Result<SandboxPlanned, RpcError> {
        let (run, kind, config) = self.sandboxed(caller, peer, &p.execution_id, p.epoch)?;
        check_launch(&p.launch, &p.needs)?;
        let pin_path = self.pin_path(&p.execution_id)?;
        let needs = self.merge(&run, &p.execution_id, p.needs).await?;
        let runner = self.runner().map_err(|e| unavailable(e.message))?;
        let provider = runner.sandbox_provider(&kind).ok_or_else(|| {
            unavailable(format!(
                "no installed package provides the sandbox type {kind:?}"
            ))
        })?;
        let params = SandboxProviderPlanParams {
            sandbox_type: kind.clone(),
            config,
            execution_id: p.execution_id.clone(),
            launch: p.launch,
            needs,
        };
        let v = call_method(
            runner.as_ref(),
            &provider,
            "sandbox_provider.plan",
            &params,
            PROVIDER_TIMEOUT,
        )
        .await
        .map_err(|e| provider_error(&provider, "sandbox_provider.plan", e))?;
        let plan: SandboxPlan = serde_json::from_value(v).map_err(|e| {
            unavailable(format!(
                "{provider:?} answered sandbox_provider.plan with something else: {e}"
            ))
        })?;
        if plan.argv.is_empty() || !Path::new(&plan.cwd).is_absolute() {
            return Err(unavailable(format!(
                "{provider:?} answered a plan without a program or an absolute cwd"
            )));
        }
        let digest = plan_digest(&plan);
        let pin = Pin {
            execution_id: p.execution_id.clone(),
            work_id: run.work_id.clone(),
            sandbox_type: kind,
            digest: digest.clone(),
            plan: plan.clone(),
        };
        write_pin(&pin_path, &pin).map_err(|e| {
            unavailable(format!(
                "cannot pin the plan in {}: {e}",
                pin_path.display()
            ))
        })?;
        tracing::info!(OC_EXTENSION = %provider, OC_WORK_ID = %run.work_id,
            OC_EXECUTION_ID = %p.execution_id, %digest, "sandbox plan pinned");
        Ok(SandboxPlanned { plan, digest })
    }

    /// `sandbox.adopt` from `caller` over `peer`.
    pub async fn sandbox_adopt(
        &self,
        caller: &str,
        peer: &Peer,
        p: SandboxAdoptParams,
    ) -> Result<SandboxPlanned, RpcError> {
        let (run, kind, config) = self.sandboxed(caller, peer, &p.execution_id, p.epoch)?;
        let pin_path = self.pin_path(&p.execution_id)?;
        let pin: Pin = read_pin(&pin_path, "plan", "sandbox plan", &p.execution_id)?;
        let now = plan_digest(&pin.plan);
        if now != pin.digest || p.digest != pin.digest || pin.execution_id != p.execution_id {
            return Err(denied(format!(
                "the plan digest no longer matches: pinned {}, the plan now {now}, the executor's {}",
                pin.digest, p.digest
            )));
        }
        let runner = self.runner().map_err(|e| unavailable(e.message))?;
        let provider = runner.sandbox_provider(&kind).ok_or_else(|| {
            unavailable(format!(
                "no installed package provides the sandbox type {kind:?}"
            ))
        })?;
        let params = SandboxProviderAdoptParams {
            sandbox_type: kind,
            config,
            execution_id: p.execution_id.clone(),
            plan: pin.plan.clone(),
            pid: p.pid,
        };
        let v = call_method(
            runner.as_ref(),
            &provider,
            "sandbox_provider.adopt",
            &params,
            PROVIDER_TIMEOUT,
        )
        .await
        .map_err(|e| provider_error(&provider, "sandbox_provider.adopt", e))?;
        let proof: SandboxProviderAdoptResult = serde_json::from_value(v).map_err(|e| {
            unavailable(format!(
                "{provider:?} answered sandbox_provider.adopt with something else: {e}"
            ))
        })?;
        tracing::info!(OC_EXTENSION = %provider, OC_WORK_ID = %run.work_id,
            OC_EXECUTION_ID = %p.execution_id, digest = %pin.digest, evidence = %proof.evidence,
            "sandboxed run adopted through its pinned plan");
        Ok(SandboxPlanned {
            plan: pin.plan,
            digest: pin.digest,
        })
    }
}

/// Reads the pin at `path` (`what` names it in errors: "the pinned {what}"; `none`
/// when there is none: "execution … has no pinned {none}"): a pin that does not
/// read or is missing is `sandbox_denied`, a read that fails `sandbox_unavailable`.
pub(super) fn read_pin<T: serde::de::DeserializeOwned>(
    path: &Path,
    what: &str,
    none: &str,
    execution_id: &str,
) -> Result<T, RpcError> {
    match std::fs::read(path) {
        Ok(bytes) => serde_json::from_slice(&bytes).map_err(|e| {
            denied(format!(
                "the pinned {what} {} does not read: {e}",
                path.display()
            ))
        }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Err(denied(format!(
            "execution {execution_id:?} has no pinned {none}"
        ))),
        Err(e) => Err(unavailable(format!("cannot read {}: {e}", path.display()))),
    }
}

/// Writes `pin` as JSON to `path` (mode 0600, its folder 0700), atomically.
pub(super) fn write_pin<T: Serialize>(path: &Path, pin: &T) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
    let dir = path.parent().unwrap_or(Path::new("."));
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)?;
    let tmp = path.with_extension("tmp");
    let bytes = serde_json::to_vec_pretty(pin).map_err(std::io::Error::other)?;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&tmp)?;
    f.write_all(&bytes)?;
    f.sync_all()?;
    std::fs::rename(&tmp, path)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::super::testkit::peer;
    use super::*;
    use protocol::wire::RunRequest;
    use serde_json::json;

    fn run(sandbox: Option<Value>) -> RunRequest {
        super::super::testkit::run(|b| b.sandbox = sandbox)
    }

    fn launch() -> SandboxPlanParams {
        SandboxPlanParams {
            execution_id: "exec_1".into(),
            epoch: 1,
            launch: SandboxLaunch {
                argv: vec!["sh".into()],
                cwd: "/tmp".into(),
                ..SandboxLaunch::default()
            },
            needs: SandboxNeeds::default(),
        }
    }

    #[tokio::test]
    async fn sandbox_calls_need_a_run_whose_binding_has_a_sandbox() {
        let ws = Workspaces::new(None);
        let p = peer();
        ws.open("shell", &p, &run(None));
        let e = ws.sandbox_plan("shell", &p, launch()).await.unwrap_err();
        assert_eq!(e.app_code(), Some("unauthorized"), "{e}");
        let other = peer();
        let e = ws
            .sandbox_plan("shell", &other, launch())
            .await
            .unwrap_err();
        assert_eq!(e.app_code(), Some("unauthorized"), "{e}");
    }

    #[tokio::test]
    async fn needs_inside_or_above_the_protected_set_are_denied() {
        let ws = Workspaces::new(None);
        ws.protect(Protected {
            state_dir: "/var/lib/oc".into(),
            config_dir: "/etc/oc".into(),
            sockets: vec!["/run/oc/bus.sock".into()],
            home: Some("/home/op".into()),
            config_file: None,
        });
        let p = peer();
        ws.open("shell", &p, &run(Some(json!({"type": "srt"}))));
        let r = ws.opened("shell", &p, "exec_1", 1).unwrap();
        for bad in [
            "/var/lib/oc/resources/git/other",
            "/etc",
            "/",
            "/home/op/.claude/x",
        ] {
            let needs = SandboxNeeds {
                read: vec![bad.into()],
                ..SandboxNeeds::default()
            };
            let e = ws.merge(&r, "exec_1", needs).await.unwrap_err();
            assert_eq!(e.app_code(), Some("sandbox_denied"), "{bad}: {e}");
        }
        let own = "/var/lib/oc/executors/shell/runs/exec_1/tmp";
        let needs = SandboxNeeds {
            write: vec![own.into(), "/srv/data".into()],
            ..SandboxNeeds::default()
        };
        let merged = ws.merge(&r, "exec_1", needs).await.unwrap();
        for p in [
            "/var/lib/oc",
            "/etc/oc",
            "/run/oc/bus.sock",
            "/home/op/.claude.json",
        ] {
            assert!(merged.deny.iter().any(|d| d == p), "{p}: {merged:?}");
        }
        // Another run's folder is not this one's.
        let needs = SandboxNeeds {
            read: vec!["/var/lib/oc/executors/shell/runs/exec_2".into()],
            ..SandboxNeeds::default()
        };
        assert!(ws.merge(&r, "exec_1", needs).await.is_err());
        // No provider: fails closed.
        let e = ws.sandbox_plan("shell", &p, launch()).await.unwrap_err();
        assert_eq!(e.app_code(), Some("sandbox_unavailable"), "{e}");
    }

    fn needs(read: &[&str], write: &[&str]) -> SandboxNeeds {
        SandboxNeeds {
            read: read.iter().map(|r| (*r).to_owned()).collect(),
            write: write.iter().map(|w| (*w).to_owned()).collect(),
            ..SandboxNeeds::default()
        }
    }

    /// A secret is denied by its folder (a rotation by rename stays masked); a
    /// folder that cannot be denied, or that holds one of the run's needs, refuses
    /// the plan naming the folder and where secrets belong.
    #[test]
    fn a_secret_is_masked_by_its_folder_or_the_plan_is_refused() {
        let secrets = [
            PathBuf::from("/etc/oc/secrets/gh"),
            PathBuf::from("/etc/oc/secrets/hook"),
            PathBuf::from("/srv/keys/ssh"),
        ];
        let ok = needs(&["/srv/repo"], &["/var/lib/oc/executors/shell/runs/exec_1"]);
        assert_eq!(
            secret_folders(&secrets, None, &ok).unwrap(),
            ["/etc/oc/secrets", "/srv/keys"]
        );
        for (secret, folder) in [
            ("/token", "\"/\""),
            ("/tmp/token", "\"/tmp\""),
            ("/etc/token", "\"/etc\""),
            ("/home/token", "\"/home\""),
        ] {
            let e = secret_folders(&[PathBuf::from(secret)], None, &ok).unwrap_err();
            assert_eq!(e.app_code(), Some("sandbox_denied"), "{e}");
            assert!(e.message.contains(folder), "{secret}: {e}");
            assert!(
                e.message.contains("a folder of their own")
                    && e.message.contains("/etc/open-conduit/secrets/"),
                "{e}"
            );
        }
        // The secret beside the state directory: its folder holds the run's own.
        let beside = [PathBuf::from("/srv/oc/token")];
        for n in [
            needs(&[], &["/srv/oc/state/executors/shell/runs/exec_1"]),
            needs(&["/srv/oc"], &[]),
        ] {
            let e = secret_folders(&beside, None, &n).unwrap_err();
            assert_eq!(e.app_code(), Some("sandbox_denied"), "{e}");
            assert!(
                e.message.contains("\"/srv/oc\"") && e.message.contains("holds the run's need"),
                "{e}"
            );
        }
        // The configuration file: its folder, unless a system one.
        assert_eq!(
            secret_folders(&[], Some(Path::new("/home/op/oc/config.json")), &ok).unwrap(),
            ["/home/op/oc"]
        );
        let e = secret_folders(&[], Some(Path::new("/etc/oc.json")), &ok).unwrap_err();
        assert!(e.message.contains("configuration file /etc/oc.json"), "{e}");
    }

    /// `up --config FILE`: the file's folder is in the protected set. A need in it or
    /// above it is refused; the run's own folders there are not, and the folder is
    /// denied.
    #[tokio::test]
    async fn the_configuration_file_and_its_folder_are_protected() {
        let ws = Workspaces::new(None);
        ws.protect(Protected {
            state_dir: "/home/op/proj/state".into(),
            config_dir: "/home/op/proj/state/etc".into(),
            sockets: Vec::new(),
            home: None,
            config_file: Some("/home/op/proj/oc.json".into()),
        });
        let p = peer();
        ws.open("shell", &p, &run(Some(json!({"type": "srt"}))));
        let r = ws.opened("shell", &p, "exec_1", 1).unwrap();
        for bad in [
            "/home/op/proj/oc.json",
            "/home/op/proj/data",
            "/home/op",
            "/home",
        ] {
            let e = ws
                .merge(&r, "exec_1", needs(&[bad], &[]))
                .await
                .unwrap_err();
            assert_eq!(e.app_code(), Some("sandbox_denied"), "{bad}: {e}");
            assert!(e.message.contains("/home/op/proj"), "{bad}: {e}");
        }
        let own = "/home/op/proj/state/executors/shell/runs/exec_1";
        let merged = ws
            .merge(&r, "exec_1", needs(&["/srv/data"], &[own]))
            .await
            .unwrap();
        assert!(
            merged.deny.iter().any(|d| d == "/home/op/proj"),
            "{merged:?}"
        );
    }
}
