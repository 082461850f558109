//! Adoption: proving a live launch is inside the sandbox its pinned plan made.
//!
//! The settings file must still be the one planned (its SHA-256), the process must
//! run the planned `srt` invocation (its command line ends with the plan's
//! arguments), and every descendant of it must be either inside a mount namespace
//! other than this host's (bubblewrap's sandbox) or one of srt's own helpers outside
//! it (`node`, `sh`, `bwrap`, `socat`). A process that runs something else in the
//! host's namespace escaped, or was started outside, and the run is refused.

use crate::plan::{sha256, SETTINGS, SHA256};
use protocol::sandbox::{SandboxProviderAdoptParams, SandboxProviderAdoptResult};
use protocol::{Code, RpcError};
use std::collections::HashMap;

/// The processes srt runs outside its sandbox.
pub const HELPERS: &[&str] = &["node", "sh", "bwrap", "socat", "srt"];
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
    let args = p.plan.argv.get(1..).unwrap_or_default();
    if line.len() < args.len() || line[line.len() - args.len()..] != *args {
        return Err(denied(format!(
            "process {} is not the planned srt invocation",
            p.pid
        )));
    }
    let host = mnt_ns("self").unwrap_or_default();
    let children = parents();
    let (mut inside, mut helpers) = (0usize, 0usize);
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
        let ns = mnt_ns(&pid.to_string()).unwrap_or_default();
        if !ns.is_empty() && ns != host {
            inside += 1;
            continue;
        }
        let name = comm(pid);
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
            "process {} runs the planned srt with {inside} processes inside its sandbox and {helpers} srt helpers",
            p.pid
        ),
    })
}
