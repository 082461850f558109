//! `logs [COMPONENT]`: the daemons' logs, from the files `up` writes or from the
//! journal.

use std::path::Path;

use crate::output::{Failure, Out};

/// The daemons `logs` knows: those `up` starts.
pub const COMPONENTS: [&str; 6] = crate::up::DAEMONS;

/// `logs [COMPONENT]`: under `up` (the bus is `<state>/run/bus.sock` and
/// `<state>/logs/` exists), the log files `up` writes; otherwise the journal
/// (`journalctl -u open-conduit-<component>`, or every unit of the suite).
pub fn logs(bus: &Path, component: Option<&str>, lines: usize) -> Out {
    if let Some(c) = component {
        if !COMPONENTS.contains(&c) {
            return Err(Failure {
                message: format!("no component {c:?} (one of {})", COMPONENTS.join(", ")),
                status: 1,
            });
        }
    }
    let state = bus.parent().and_then(Path::parent);
    let dir = state.map(|s| s.join("logs")).filter(|d| d.is_dir());
    if let Some(dir) = dir {
        let wanted: Vec<&str> = component.map_or(COMPONENTS.to_vec(), |c| vec![c]);
        for c in wanted {
            let path = dir.join(format!("{c}.log"));
            let Ok(text) = std::fs::read_to_string(&path) else {
                continue;
            };
            let all: Vec<&str> = text.lines().collect();
            let from = all.len().saturating_sub(lines);
            for l in &all[from..] {
                println!("{c:>10} | {l}");
            }
        }
        return Ok(());
    }
    let mut cmd = std::process::Command::new("journalctl");
    cmd.args(["--no-pager", "-n", &lines.to_string()]);
    match component {
        Some(c) => {
            cmd.arg("-u").arg(format!("open-conduit-{c}.service"));
        }
        None => {
            for c in COMPONENTS {
                cmd.arg("-u").arg(format!("open-conduit-{c}.service"));
            }
        }
    }
    let status = cmd.status().map_err(|e| {
        format!(
            "journalctl: {e} (is this a systemd machine? under `up`, point --bus at its socket)"
        )
    })?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("journalctl: {status}").into())
    }
}
