//! Workspaces for the operator: `resource list` (the leases and their owners),
//! `resource sweep` (remove the workspaces of closed Work now), and the workspace
//! lines of `work show`.

use std::path::Path;
use std::process::Command;

use busapi::ext::ResourceSweepRequest;
use busapi::store::{LeaseRow, LeasesRequest, WorkGetRequest};
use serde_json::{json, Value};

use crate::output::{call, call_json, count, decode, print_json, Failure, Out};

/// The most leases one page asks for.
const PAGE: u32 = 500;

/// Every lease (of `owner` when given), through every page.
pub fn leases(bus: &Path, owner: Option<&str>) -> Result<Vec<LeaseRow>, String> {
    let mut out = Vec::new();
    let mut after = String::new();
    loop {
        let page = call(
            bus,
            &LeasesRequest {
                owner: owner.map(str::to_owned),
                after,
                limit: PAGE,
                ..LeasesRequest::default()
            },
        )?;
        out.extend(page.leases);
        if page.next.is_empty() {
            return Ok(out);
        }
        after = page.next;
    }
}

/// The workspace's HEAD as it is now, when its directory is readable here; else the
/// one recorded at acquisition.
fn head(lease: &LeaseRow) -> String {
    let now = Command::new("git")
        .args(["-C", &lease.dir, "rev-parse", "--short=12", "HEAD"])
        .env("GIT_TERMINAL_PROMPT", "0")
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
        .filter(|h| !h.is_empty());
    now.unwrap_or_else(|| {
        let recorded = lease.data["head"].as_str().unwrap_or("");
        recorded.chars().take(12).collect()
    })
}

/// One lease, for a person: `dir  branch B  HEAD H  (type ref)`.
fn describe(lease: &LeaseRow) -> String {
    let mut line = lease.dir.clone();
    if let Some(b) = lease.data["branch"].as_str().filter(|b| !b.is_empty()) {
        line.push_str(&format!("  branch {b}"));
    }
    let h = head(lease);
    if !h.is_empty() {
        line.push_str(&format!("  HEAD {h}"));
    }
    line.push_str(&format!(
        "  ({} {}, {})",
        lease.resource_type, lease.reference, lease.mode
    ));
    line
}

/// The lines `work show` prints for the Work's workspaces (none without a lease).
pub fn workspace_lines(bus: &Path, work_id: &str) -> Vec<String> {
    match leases(bus, Some(work_id)) {
        Ok(l) => l
            .iter()
            .map(|l| format!("  workspace: {}", describe(l)))
            .collect(),
        Err(e) => vec![format!("  workspace: unknown ({e})")],
    }
}

/// The Work's leases, for `work show --json`.
pub fn workspace_json(bus: &Path, work_id: &str) -> Value {
    json!(leases(bus, Some(work_id)).unwrap_or_default())
}

/// `resource list`: every lease with its owner and the owner's state.
pub fn list(bus: &Path, json_out: bool) -> Out {
    let all = leases(bus, None)?;
    if json_out {
        print_json(&json!(all));
        return Ok(());
    }
    if all.is_empty() {
        println!("no workspaces: no binding with a resource has run yet");
        return Ok(());
    }
    for l in &all {
        let owner = &l.owner;
        let state = call(bus, &WorkGetRequest { id: owner.clone() })
            .map_or_else(|_| "unknown".into(), |w| w.work.state);
        println!("{owner} ({state})  {}", describe(l));
    }
    println!("{}", count(all.len(), "workspace"));
    Ok(())
}

/// A grace like `0`, `90s`, `30m`, `2h` or `7d`, in seconds.
pub fn parse_grace(text: &str) -> Result<u64, String> {
    let t = text.trim();
    let (digits, unit) = t.split_at(t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len()));
    let n: u64 = digits
        .parse()
        .map_err(|_| format!("{text:?} is not a duration (90s, 30m, 2h, 7d)"))?;
    let scale = match unit {
        "" | "s" => 1,
        "m" => 60,
        "h" => 3600,
        "d" => 86400,
        _ => return Err(format!("{text:?}: the unit is s, m, h or d")),
    };
    n.checked_mul(scale)
        .ok_or_else(|| format!("{text:?} is too long"))
}

/// `resource sweep`: ask each provider now to remove the workspaces of Work closed
/// longer than the grace (dirty ones are kept and listed unless `remove_dirty`).
pub fn sweep(
    bus: &Path,
    resource_type: Option<&str>,
    grace: Option<&str>,
    remove_dirty: bool,
    json_out: bool,
) -> Out {
    let grace_s = match grace {
        Some(g) => Some(parse_grace(g).map_err(|message| Failure { message, status: 2 })?),
        None => None,
    };
    let request = ResourceSweepRequest {
        resource_type: resource_type.map(str::to_owned),
        grace_s,
        remove_dirty,
    };
    let answer = call_json(bus, &request)?;
    if json_out {
        // As extrunner wrote it.
        print_json(&answer);
        return Ok(());
    }
    let mut failed = false;
    for s in decode::<ResourceSweepRequest>(answer)?.sweeps {
        let what = format!("{} ({})", s.resource_type, s.provider);
        if !s.error.is_empty() {
            println!("{what}: the sweep failed: {}", s.error);
            failed = true;
            continue;
        }
        let (removed, kept) = (&s.result.removed, &s.result.kept);
        println!(
            "{what}: removed {}, kept {}",
            count(removed.len(), "workspace"),
            kept.len()
        );
        for n in removed {
            println!("  removed {}  {} — {}", n.owner, n.dir, n.reason);
        }
        for n in kept {
            println!("  kept    {}  {} — {}", n.owner, n.dir, n.reason);
        }
        for p in &s.result.pruned {
            println!("  pruned  {p}");
        }
    }
    if failed {
        return Err(Failure {
            message: "a sweep failed (above)".into(),
            status: 1,
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn graces_take_units() {
        assert_eq!(parse_grace("0"), Ok(0));
        assert_eq!(parse_grace("90s"), Ok(90));
        assert_eq!(parse_grace("2h"), Ok(7200));
        assert_eq!(parse_grace("7d"), Ok(604_800));
        assert!(parse_grace("soon").is_err());
        assert!(parse_grace("3w").is_err());
    }
}
