//! Adoption: proving a live launch is inside the sandbox its pinned plan made.
//!
//! The settings file must still be the one planned (its SHA-256), the process must
//! run the planned `srt` invocation (its command line ends with srt's arguments of
//! the plan, `--settings FILE -c LINE`), and every descendant of it must be either inside a mount namespace
//! other than this host's (bubblewrap's sandbox) or one of srt's own helpers outside
//! it (`node`, `sh`, `bwrap`, `socat`, `rg`, which srt runs to find the files its
//! settings deny, and `which`, which it runs to find those tools). A process that runs something else in the
//! host's namespace escaped, or was started outside, and the run is refused. A
//! process that ends while /proc is read (its namespace no longer readable) is
//! passed over: a command inside that starts and ends processes all the time is
//! still adopted.

use crate::plan::{sha256, SETTINGS, SHA256, SRT_ARGS};
use protocol::sandbox::{SandboxProviderAdoptParams, SandboxProviderAdoptResult};
use protocol::{Code, RpcError};
use std::collections::HashMap;

/// The processes srt runs outside its sandbox.
pub const HELPERS: &[&str] = &["node", "sh", "bwrap", "socat", "srt", "rg", "which"];
/// The most descendants looked at.
pub const MAX_DESCENDANTS: usize = 100_000;

fn denied(message: impl Into<String>) -> RpcError {
    RpcError::new(Code::SandboxDenied, message)
}

fn cmdline(pid: i32) -> Option<Vec<String>> {
    let raw = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
    Some(
        raw.split(|b| *b == 0)
            .filter(|s| !s.is_empty())
            .map(|s| String::from_utf8_lossy(s).into_owned())
            .collect(),
    )
}

fn mnt_ns(pid: &str) -> Option<String> {
    std::fs::read_link(format!("/proc/{pid}/ns/mnt"))
        .ok()
        .map(|p| p.display().to_string())
}

/// Whether `pid` runs nothing any more: gone, a zombie, or exiting (an exiting
/// process drops its namespaces before it turns zombie, so in that window its
/// `ns/mnt` no longer reads while its state still says running).
fn runs_nothing(pid: i32) -> bool {
    sdk::detached::proc_stat(pid).is_none_or(|st| !st.live() || st.exiting())
}

fn comm(pid: i32) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/comm"))
        .map(|s| s.trim().to_owned())
        .unwrap_or_default()
}

/// Every live process's parent.
fn parents() -> HashMap<i32, Vec<i32>> {
    let mut children: HashMap<i32, Vec<i32>> = HashMap::new();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return children;
    };
    for e in entries.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else {
            continue;
        };
        if let Some(st) = sdk::detached::proc_stat(pid) {
            if st.live() {
                children.entry(st.ppid).or_default().push(pid);
            }
        }
    }
    children
}

/// `sandbox_provider.adopt`.
pub fn adopt(p: &SandboxProviderAdoptParams) -> Result<SandboxProviderAdoptResult, RpcError> {
    let settings = p.plan.data[SETTINGS].as_str().unwrap_or_default();
    let want = p.plan.data[SHA256].as_str().unwrap_or_default();
    match std::fs::read(settings) {
        Ok(bytes) if !want.is_empty() && sha256(&bytes) == want => {}
        Ok(_) => {
            return Err(denied(format!(
                "the settings file {settings:?} is not the one planned (its digest changed)"
            )))
        }
        Err(e) => return Err(denied(format!("the settings file {settings:?}: {e}"))),
    }
    if p.pid <= 0 {
        return Ok(SandboxProviderAdoptResult {
            evidence: "the launch never started".into(),
        });
    }
    let Some(line) = cmdline(p.pid) else {
        return Ok(SandboxProviderAdoptResult {
            evidence: format!("process {} has ended", p.pid),
        });
    };
    // The srt invocation's own arguments (as root the argv enters the run's
    // cgroup first, then execs srt).
    let argv = &p.plan.argv;
    let args = argv
        .get(argv.len().saturating_sub(SRT_ARGS).max(1)..)
        .unwrap_or_default();
    if line.len() < args.len() || line[line.len() - args.len()..] != *args {
        return Err(denied(format!(
            "process {} is not the planned srt invocation",
            p.pid
        )));
    }
    let host = mnt_ns("self").unwrap_or_default();
    let children = parents();
    let (mut inside, mut helpers, mut ended) = (0usize, 0usize, 0usize);
    let mut queue = vec![p.pid];
    let mut seen = 0usize;
    while let Some(pid) = queue.pop() {
        seen += 1;
        if seen > MAX_DESCENDANTS {
            return Err(denied(format!(
                "process {} has over {MAX_DESCENDANTS} descendants",
                p.pid
            )));
        }
        if let Some(kids) = children.get(&pid) {
            queue.extend(kids);
        }
        if pid == p.pid {
            continue;
        }
        let Some(ns) = mnt_ns(&pid.to_string()) else {
            // Its namespace does not read: a process that ended (or is a zombie,
            // or is exiting) since /proc was listed runs nothing and is passed
            // over; a live one cannot be proven inside and is refused below.
            if runs_nothing(pid) {
                ended += 1;
                continue;
            }
            return Err(denied(format!(
                "process {pid} ({}) under the sandboxed run {}: its mount namespace does not read",
                comm(pid),
                p.pid
            )));
        };
        if ns != host {
            inside += 1;
            continue;
        }
        let name = comm(pid);
        if name.is_empty() && runs_nothing(pid) {
            ended += 1;
            continue;
        }
        if HELPERS.contains(&name.as_str()) {
            helpers += 1;
            continue;
        }
        return Err(denied(format!(
            "process {pid} ({name}) under the sandboxed run {} is outside its sandbox",
            p.pid
        )));
    }
    Ok(SandboxProviderAdoptResult {
        evidence: format!(
            "process {} runs the planned srt with {inside} processes inside its sandbox and {helpers} srt helpers ({ended} ended while looked at)",
            p.pid
        ),
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use protocol::sandbox::{SandboxLaunch, SandboxNeeds, SandboxProviderPlanParams};
    use std::os::unix::process::CommandExt;
    use std::path::Path;

    /// A sandboxed command that starts and ends a process every few milliseconds is
    /// adopted each time it is looked at: a process that ends while the provider
    /// reads `/proc` (its namespace no longer readable) is no escape.
    #[test]
    fn a_busy_sandboxed_command_is_adopted_while_its_processes_come_and_go() {
        let srt =
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/srt/node_modules/.bin/srt");
        let scratch = std::env::temp_dir().join(format!("oc-srt-adopt-{}", std::process::id()));
        std::fs::create_dir_all(&scratch).unwrap();
        let srt_text = srt.display().to_string();
        let probe = crate::check::probe(&srt_text, &scratch);
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        if let Err(f) = rt.block_on(probe) {
            let peers = std::env::var_os("OC_REQUIRE_PEERS").is_some();
            assert!(
                !peers || f.code == "user_namespaces_refused",
                "srt does not run: {f:?}"
            );
            eprintln!("SKIPPED: {}", f.reason);
            return;
        }
        let p = SandboxProviderPlanParams {
            sandbox_type: "srt".into(),
            config: serde_json::json!({"srt": srt.display().to_string()}),
            execution_id: "exec_busy".into(),
            launch: SandboxLaunch {
                argv: vec![
                    "/bin/sh".into(),
                    "-c".into(),
                    "while :; do /bin/true; done".into(),
                ],
                cwd: scratch.display().to_string(),
                ..SandboxLaunch::default()
            },
            needs: SandboxNeeds::default(),
        };
        let plan = crate::plan::plan(Some(&scratch), &p).unwrap();
        let mut child = std::process::Command::new(&plan.argv[0])
            .args(&plan.argv[1..])
            .current_dir(&scratch)
            .process_group(0)
            .stdout(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let pid = i32::try_from(child.id()).unwrap();
        // Once the loop runs inside the sandbox.
        let inside = |pid: i32| {
            let kids = parents();
            let mut queue = vec![pid];
            while let Some(p) = queue.pop() {
                if p != pid && mnt_ns(&p.to_string()) != mnt_ns("self") {
                    return true;
                }
                queue.extend(kids.get(&p).cloned().unwrap_or_default());
            }
            false
        };
        while !inside(pid) {
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        let params = SandboxProviderAdoptParams {
            sandbox_type: "srt".into(),
            config: p.config.clone(),
            execution_id: p.execution_id.clone(),
            plan,
            pid,
        };
        let refused: Vec<String> = (0..200)
            .filter_map(|_| adopt(&params).err().map(|e| e.message))
            .collect();
        let _ = nix::sys::signal::killpg(
            nix::unistd::Pid::from_raw(pid),
            nix::sys::signal::Signal::SIGKILL,
        );
        let _ = child.wait();
        if let Some(group) = params.plan.data[crate::plan::CGROUP].as_str() {
            let _ = std::fs::remove_dir(group);
        }
        let _ = std::fs::remove_dir_all(&scratch);
        assert!(
            refused.is_empty(),
            "{} refusals: {:?}",
            refused.len(),
            refused.first()
        );
    }
}
