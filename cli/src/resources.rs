//! Workspaces for the operator: `resource list` (the leases and their owners),
//! `resource sweep` (remove the workspaces of closed Work now), and the workspace
//! lines of `work show`.

use std::path::Path;
use std::process::Command;

use serde_json::{json, Value};

use crate::output::{call, count, print_json, text, Failure, Out};

/// The most leases one page asks for.
const PAGE: u32 = 500;

/// Every lease (of `owner` when given), through every page.
pub fn leases(bus: &Path, owner: Option<&str>) -> Result<Vec<Value>, String> {
    let mut out = Vec::new();
    let mut after = String::new();
    loop {
        let mut params = json!({"after": after, "limit": PAGE});
        if let Some(o) = owner {
            params["owner"] = json!(o);
        }
        let page = call(bus, "store.resource_leases", params)?;
        out.extend(page["leases"].as_array().cloned().unwrap_or_default());
        match page["next"].as_str().filter(|n| !n.is_empty()) {
            Some(n) => after = n.to_owned(),
            None => return Ok(out),
        }
    }
}

/// The workspace's HEAD as it is now, when its directory is readable here; else the
/// one recorded at acquisition.
fn head(lease: &Value) -> String {
    let now = Command::new("git")
        .args(["-C", text(lease, "dir"), "rev-parse", "--short=12", "HEAD"])
        .env("GIT_TERMINAL_PROMPT", "0")
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
        .filter(|h| !h.is_empty());
    now.unwrap_or_else(|| {
        let recorded = lease["data"]["head"].as_str().unwrap_or("");
        recorded.chars().take(12).collect()
    })
}

/// One lease, for a person: `dir  branch B  HEAD H  (type ref)`.
fn describe(lease: &Value) -> String {
    let mut line = text(lease, "dir").to_owned();
    if let Some(b) = lease["data"]["branch"].as_str().filter(|b| !b.is_empty()) {
        line.push_str(&format!("  branch {b}"));
    }
    let h = head(lease);
    if !h.is_empty() {
        line.push_str(&format!("  HEAD {h}"));
    }
    line.push_str(&format!(
        "  ({} {}, {})",
        text(lease, "type"),
        text(lease, "ref"),
        text(lease, "mode")
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
    Value::Array(leases(bus, Some(work_id)).unwrap_or_default())
}

/// `resource list`: every lease with its owner and the owner's state.
pub fn list(bus: &Path, json_out: bool) -> Out {
    let all = leases(bus, None)?;
    if json_out {
        print_json(&Value::Array(all));
        return Ok(());
    }
    if all.is_empty() {
        println!("no workspaces: no binding with a resource has run yet");
        return Ok(());
    }
    for l in &all {
        let owner = text(l, "owner");
        let state = call(bus, "store.work_get", json!({"id": owner}))
            .ok()
            .and_then(|w| w["work"]["state"].as_str().map(str::to_owned))
            .unwrap_or_else(|| "unknown".into());
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
    let mut params = json!({"remove_dirty": remove_dirty});
    if let Some(t) = resource_type {
        params["type"] = json!(t);
    }
    if let Some(g) = grace {
        params["grace_s"] =
            json!(parse_grace(g).map_err(|message| Failure { message, status: 2 })?);
    }
    let answer = call(bus, "ext.resource_sweep", params)?;
    if json_out {
        print_json(&answer);
        return Ok(());
    }
    let mut failed = false;
    for s in answer["sweeps"].as_array().into_iter().flatten() {
        let what = format!("{} ({})", text(s, "type"), text(s, "provider"));
        if let Some(e) = s["error"].as_str().filter(|e| !e.is_empty()) {
            println!("{what}: the sweep failed: {e}");
            failed = true;
            continue;
        }
        let notes = |k: &str| s[k].as_array().cloned().unwrap_or_default();
        let (removed, kept) = (notes("removed"), notes("kept"));
        println!(
            "{what}: removed {}, kept {}",
            count(removed.len(), "workspace"),
            kept.len()
        );
        for n in &removed {
            println!(
                "  removed {}  {} — {}",
                text(n, "owner"),
                text(n, "dir"),
                text(n, "reason")
            );
        }
        for n in &kept {
            println!(
                "  kept    {}  {} — {}",
                text(n, "owner"),
                text(n, "dir"),
                text(n, "reason")
            );
        }
        for p in notes("pruned") {
            println!("  pruned  {}", p.as_str().unwrap_or(""));
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
