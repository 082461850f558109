//! The executor's side of sandboxes: a launch of a run whose binding has a sandbox
//! goes through `sandbox.plan` (the host pins the plan and answers its digest), and a
//! recovered one through `sandbox.adopt`, which proves the live process is inside the
//! pinned plan's sandbox. A refusal is a structured failure: `sandbox_denied` (a need
//! outside the policy, a plan that no longer matches) or `sandbox_unavailable` (the
//! provider is down or failed): nothing runs.

use crate::Host;
use protocol::container::{ContainerAdoptParams, ContainerLaunchParams};
use protocol::sandbox::{
    SandboxAdoptParams, SandboxLaunch, SandboxNeeds, SandboxPlanParams, SandboxPlanned,
};
use protocol::wire::RunRequest;
use protocol::{CallError, Code, RpcError};
use std::collections::BTreeMap;
use std::path::PathBuf;

/// The run's own tmp folder's name inside its run directory.
pub const TMP_DIR: &str = "tmp";

/// The variables a sandboxed launch's temporary files follow: `TMPDIR` for the
/// command, `CLAUDE_CODE_TMPDIR` for Claude Code (the srt provider keeps srt's own
/// `TMPDIR`, and srt sets the command's from `CLAUDE_CODE_TMPDIR`, else to
/// `/tmp/claude`, read-only inside).
pub const TMP_VARS: [&str; 2] = ["TMPDIR", "CLAUDE_CODE_TMPDIR"];

/// Makes a run's own tmp folder `tmp` (mode 0700; the shell's is `<run dir>/tmp`): a
/// sandboxed launch needs it writable and points [`TMP_VARS`] there, since `/tmp` is
/// read-only inside the sandbox. It must not lie inside a read need: srt mounts read
/// needs over write needs, so a folder inside one is read-only. A symlink at its name
/// is refused, never followed.
pub fn own_tmp(tmp: PathBuf) -> std::io::Result<PathBuf> {
    let (Some(parent), Some(name)) = (tmp.parent(), tmp.file_name().and_then(|n| n.to_str()))
    else {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!("{} names no folder in a directory", tmp.display()),
        ));
    };
    crate::nofollow::Dir::open(parent)?.make_subdir(name, 0o700)?;
    Ok(tmp)
}

/// Why a sandboxed launch or adoption was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// `sandbox_denied` or `sandbox_unavailable`.
    pub reason: String,
    /// The host's or provider's message.
    pub message: String,
}

impl Refusal {
    /// `reason: message`, the run's error line.
    pub fn line(&self) -> String {
        format!("{}: {}", self.reason, self.message)
    }

    /// The refusal as an error answering `executor.run` (nothing was started).
    pub fn error(&self) -> RpcError {
        let code = if self.reason == Code::SandboxDenied.as_str() {
            Code::SandboxDenied
        } else {
            Code::SandboxUnavailable
        };
        RpcError::new(code, self.message.clone())
    }
}

fn refusal(e: CallError) -> Refusal {
    let reason = match e.code() {
        Some(c) if c == Code::SandboxDenied.as_str() => c.to_owned(),
        _ => Code::SandboxUnavailable.as_str().to_owned(),
    };
    let message = match e.rpc() {
        Some(rpc) => rpc.message.clone(),
        None => e.to_string(),
    };
    Refusal { reason, message }
}

/// Whether the run's binding has a sandbox.
pub fn sandboxed(req: &RunRequest) -> bool {
    req.binding.sandbox.is_some()
}

/// Plans `launch` with `needs` through the run's binding's sandbox: `None` when the
/// binding has none (launch as is).
pub async fn plan(
    host: &Host,
    req: &RunRequest,
    launch: SandboxLaunch,
    needs: SandboxNeeds,
) -> Result<Option<SandboxPlanned>, Refusal> {
    if !sandboxed(req) {
        return Ok(None);
    }
    host.call_typed(&SandboxPlanParams {
        execution_id: req.execution_id.clone(),
        epoch: req.epoch,
        launch,
        needs,
    })
    .await
    .map(Some)
    .map_err(refusal)
}

/// Proves the live process `pid` (0: never started) of a recovered run is inside the
/// plan pinned with `digest`; answers the pinned plan.
pub async fn adopt(
    host: &Host,
    req: &RunRequest,
    digest: &str,
    pid: i32,
) -> Result<SandboxPlanned, Refusal> {
    host.call_typed(&SandboxAdoptParams {
        execution_id: req.execution_id.clone(),
        epoch: req.epoch,
        digest: digest.to_owned(),
        pid,
    })
    .await
    .map_err(refusal)
}

/// Whether the run's binding has a container.
pub fn contained(req: &RunRequest) -> bool {
    req.binding.container.is_some()
}

/// Whether the run's binding confines it: a sandbox or a container.
pub fn confined(req: &RunRequest) -> bool {
    sandboxed(req) || contained(req)
}

/// A confined launch: what the executor runs under its wrapper instead of the
/// launch (the sandbox's program around it, or the container provider's program that
/// runs it in the container), and the digest of the plan the host pinned.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Confined {
    /// The program and its arguments.
    pub argv: Vec<String>,
    /// Its working directory.
    pub cwd: String,
    /// Its environment (a container's launch keeps its own inside).
    pub env: BTreeMap<String, String>,
    /// The pinned plan's digest, for the recovery metadata.
    pub digest: String,
}

fn both(req: &RunRequest) -> Refusal {
    Refusal {
        reason: Code::SandboxDenied.as_str().to_owned(),
        message: format!(
            "binding {:?} has both a sandbox and a container: a run is confined by one",
            req.binding.name
        ),
    }
}

/// Confines `launch` with `needs` through the run's binding: its sandbox
/// (`sandbox.plan`) or its container (`container.launch`, which makes the container:
/// the launch's environment goes into it, never into the plan). `None` when the
/// binding has neither (launch as is).
pub async fn confine(
    host: &Host,
    req: &RunRequest,
    launch: SandboxLaunch,
    needs: SandboxNeeds,
) -> Result<Option<Confined>, Refusal> {
    if sandboxed(req) && contained(req) {
        return Err(both(req));
    }
    if contained(req) {
        let launched = host
            .call_typed(&ContainerLaunchParams {
                execution_id: req.execution_id.clone(),
                epoch: req.epoch,
                launch,
                needs,
            })
            .await
            .map_err(refusal)?;
        return Ok(Some(Confined {
            argv: launched.plan.argv,
            cwd: launched.plan.cwd,
            env: launched.plan.env,
            digest: launched.digest,
        }));
    }
    Ok(plan(host, req, launch, needs).await?.map(|p| Confined {
        argv: p.plan.argv,
        cwd: p.plan.cwd,
        env: p.plan.env,
        digest: p.digest,
    }))
}

/// Proves a recovered confined run is the one pinned with `digest` (a sandbox's
/// live process `pid`, or a container's labels); answers the pinned program's argv,
/// which the executor compares with the one its wrapper runs.
pub async fn adopt_confined(
    host: &Host,
    req: &RunRequest,
    digest: &str,
    pid: i32,
) -> Result<Vec<String>, Refusal> {
    if sandboxed(req) && contained(req) {
        return Err(both(req));
    }
    if contained(req) {
        return host
            .call_typed(&ContainerAdoptParams {
                execution_id: req.execution_id.clone(),
                epoch: req.epoch,
                digest: digest.to_owned(),
            })
            .await
            .map(|l| l.plan.argv)
            .map_err(refusal);
    }
    adopt(host, req, digest, pid).await.map(|p| p.plan.argv)
}

/// [`adopt_confined`], and the pinned program must be the one the run's wrapper
/// runs (`launched`, its `spec.json`'s argv): a refusal otherwise
/// (`sandbox_denied`), which the executor answers as `not_adoptable`.
pub async fn adopt_as_launched(
    host: &Host,
    req: &RunRequest,
    digest: &str,
    pid: i32,
    launched: &[String],
) -> Result<(), Refusal> {
    let argv = adopt_confined(host, req, digest, pid).await?;
    if argv != launched {
        return Err(Refusal {
            reason: Code::SandboxDenied.as_str().to_owned(),
            message: "the run's command is not the pinned plan's".into(),
        });
    }
    Ok(())
}
