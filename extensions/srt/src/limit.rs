//! The per-run process limit (`max_processes`).
//!
//! Two mechanisms, because neither holds everywhere:
//!
//! - Inside the sandbox the command line starts with `ulimit -u N` (srt runs it in
//!   bash). `RLIMIT_NPROC` is counted per user namespace and srt always unshares
//!   the user namespace, so for a service user that is not root it caps the run's
//!   own processes (srt's helpers in there included), whatever else the user runs.
//! - The kernel does not apply `RLIMIT_NPROC` to root, so a provider running as
//!   root also puts the run in a pids cgroup of its own,
//!   `<pids hierarchy>/open-conduit/<execution>` with `pids.max = N` (cgroup v1's
//!   `pids` hierarchy or a v2 hierarchy with the pids controller, whichever is
//!   writable). The plan's argv enters it before srt starts. Every task counts
//!   there: srt (node and its threads), bubblewrap, socat and the command.
//!
//! Empty cgroups of earlier runs are removed at later plans once they are older
//! than [`STALE_AFTER`] (the launch re-creates its own if it was removed before it
//! started).

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

/// The folder of the runs' cgroups in a pids hierarchy.
pub const GROUP: &str = "open-conduit";
/// An empty run cgroup older than this is removed at a later plan.
pub const STALE_AFTER: Duration = Duration::from_secs(600);
/// The most stale cgroups removed at one plan.
pub const MAX_SWEPT: usize = 4096;

/// Whether this process runs as root (its effective uid is 0): the case where
/// `RLIMIT_NPROC` does not hold.
pub fn is_root() -> bool {
    effective_uid() == Some(0)
}

/// This process's effective uid, from `/proc/self/status`.
pub fn effective_uid() -> Option<u32> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("Uid:"))?;
    line.split_whitespace().nth(2)?.parse().ok()
}

/// `\040`-style octal escapes of `/proc/self/mountinfo`, decoded.
fn unescape(field: &str) -> String {
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'\\' && i + 4 <= bytes.len() {
            let code = field
                .get(i + 1..i + 4)
                .and_then(|o| u8::from_str_radix(o, 8).ok());
            if let Some(c) = code {
                out.push(c);
                i += 4;
                continue;
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The mounted pids hierarchies, v1 first: (mount point, is v2).
pub fn hierarchies() -> Vec<(PathBuf, bool)> {
    let text = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    let mut v1 = Vec::new();
    let mut v2 = Vec::new();
    for line in text.lines() {
        let fields: Vec<&str> = line.split(' ').collect();
        let Some(dash) = fields.iter().position(|f| *f == "-") else {
            continue;
        };
        let (Some(point), Some(fstype)) = (fields.get(4), fields.get(dash + 1)) else {
            continue;
        };
        let point = PathBuf::from(unescape(point));
        match *fstype {
            "cgroup" => {
                let options = fields.get(dash + 3).copied().unwrap_or_default();
                if options.split(',').any(|o| o == "pids") {
                    v1.push((point, false));
                }
            }
            "cgroup2" => {
                let controllers =
                    std::fs::read_to_string(point.join("cgroup.controllers")).unwrap_or_default();
                if controllers.split_whitespace().any(|c| c == "pids") {
                    v2.push((point, true));
                }
            }
            _ => {}
        }
    }
    v1.extend(v2);
    v1
}

fn write(path: &Path, text: &str) -> std::io::Result<()> {
    let mut f = std::fs::OpenOptions::new().write(true).open(path)?;
    f.write_all(text.as_bytes())
}

fn make_dir(path: &Path) -> std::io::Result<()> {
    match std::fs::create_dir(path) {
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
        r => r,
    }
}

/// `<hierarchy>/open-conduit`, made (in v2 with the pids controller enabled for
/// the runs under it) in the first pids hierarchy this process may write.
pub fn base() -> Result<PathBuf, String> {
    let found = hierarchies();
    if found.is_empty() {
        return Err("no pids cgroup hierarchy is mounted".into());
    }
    let mut why = Vec::new();
    for (point, v2) in found {
        let base = point.join(GROUP);
        let made = (|| -> std::io::Result<()> {
            if v2 {
                write(&point.join("cgroup.subtree_control"), "+pids")?;
            }
            make_dir(&base)?;
            if v2 {
                write(&base.join("cgroup.subtree_control"), "+pids")?;
            }
            Ok(())
        })();
        match made {
            Ok(()) => return Ok(base),
            Err(e) => why.push(format!("{}: {e}", base.display())),
        }
    }
    Err(format!("no pids cgroup is writable ({})", why.join("; ")))
}

/// The run's cgroup `<base>/<name>` with `pids.max = max`, made now.
pub fn run_cgroup(name: &str, max: u64) -> Result<PathBuf, String> {
    let base = base()?;
    sweep(&base, name);
    let group = base.join(name);
    make_dir(&group).map_err(|e| format!("cannot make {}: {e}", group.display()))?;
    write(&group.join("pids.max"), &max.to_string())
        .map_err(|e| format!("cannot set {}/pids.max: {e}", group.display()))?;
    Ok(group)
}

/// Whether the cgroup `dir` holds no process.
fn empty(dir: &Path) -> bool {
    std::fs::read_to_string(dir.join("cgroup.procs")).is_ok_and(|p| p.trim().is_empty())
}

/// Removes the empty cgroups under `base` older than [`STALE_AFTER`], but `keep`.
pub fn sweep(base: &Path, keep: &str) {
    let Ok(entries) = std::fs::read_dir(base) else {
        return;
    };
    let now = SystemTime::now();
    for e in entries.flatten().take(MAX_SWEPT) {
        let path = e.path();
        if e.file_name() == keep || !path.is_dir() || !empty(&path) {
            continue;
        }
        let old = e
            .metadata()
            .and_then(|m| m.modified())
            .ok()
            .and_then(|t| now.duration_since(t).ok())
            .is_some_and(|age| age >= STALE_AFTER);
        if old {
            // A cgroup that took a process meanwhile refuses (EBUSY).
            let _ = std::fs::remove_dir(&path);
        }
    }
}

/// The shell that enters `group` (re-made with `pids.max = max` if a sweep took
/// it) and execs the rest of its arguments: `sh -c SCRIPT sh ARGV…`.
pub fn enter_script(group: &Path, max: u64) -> String {
    let g = crate::shell::quote(&group.display().to_string());
    let procs = crate::shell::quote(&group.join("cgroup.procs").display().to_string());
    let pids_max = crate::shell::quote(&group.join("pids.max").display().to_string());
    format!("mkdir -p {g} && echo {max} > {pids_max} && echo $$ > {procs} && exec \"$@\"")
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn mount_points_are_unescaped() {
        assert_eq!(unescape(r"/sys/fs/cgroup/a\040b"), "/sys/fs/cgroup/a b");
        assert_eq!(unescape("/plain"), "/plain");
        assert_eq!(unescape(r"/odd\04"), r"/odd\04");
    }

    #[test]
    fn the_enter_script_quotes_the_cgroup() {
        let s = enter_script(Path::new("/sys/fs/cgroup/pids/open-conduit/exec_1"), 64);
        assert_eq!(
            s,
            "mkdir -p '/sys/fs/cgroup/pids/open-conduit/exec_1' && echo 64 > '/sys/fs/cgroup/pids/open-conduit/exec_1/pids.max' && echo $$ > '/sys/fs/cgroup/pids/open-conduit/exec_1/cgroup.procs' && exec \"$@\""
        );
    }
}
