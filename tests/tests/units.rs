//! Every systemd unit in `units/` passes `systemd-analyze verify`, checked against a
//! scratch root holding the system's unit directory and a real built binary at each
//! path an `ExecStart=` names (verify refuses one that does not exist).

#![allow(clippy::unwrap_used)]

use std::path::Path;
use std::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_oc-suite");

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let kind = entry.file_type().unwrap();
        let dest = to.join(entry.file_name());
        if kind.is_dir() {
            copy_dir(&entry.path(), &dest);
        } else if kind.is_symlink() {
            let target = std::fs::read_link(entry.path()).unwrap();
            let _ = std::os::unix::fs::symlink(target, dest);
        } else {
            std::fs::copy(entry.path(), dest).unwrap();
        }
    }
}

#[test]
fn systemd_analyze_verify_accepts_every_unit() {
    assert!(
        Path::new("/usr/bin/systemd-analyze").exists(),
        "systemd-analyze is needed (Debian's systemd package; .ci/run installs it)"
    );
    let root = std::env::temp_dir().join(format!("oc-units-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    copy_dir(
        Path::new("/usr/lib/systemd/system"),
        &root.join("usr/lib/systemd/system"),
    );
    let units = Path::new(env!("CARGO_MANIFEST_DIR")).join("../units");
    let dest = root.join("etc/systemd/system");
    std::fs::create_dir_all(&dest).unwrap();
    let mut names = Vec::new();
    for entry in std::fs::read_dir(&units).unwrap() {
        let name = entry.unwrap().file_name().into_string().unwrap();
        if !(name.ends_with(".service") || name.ends_with(".socket") || name.ends_with(".target")) {
            continue;
        }
        let text = std::fs::read_to_string(units.join(&name)).unwrap();
        for line in text.lines() {
            let Some((key, cmd)) = line.split_once('=') else {
                continue;
            };
            if !key.starts_with("Exec") {
                continue;
            }
            let program = cmd.split_whitespace().next().unwrap();
            let at = root.join(program.trim_start_matches('/'));
            std::fs::create_dir_all(at.parent().unwrap()).unwrap();
            // Ours: the built binary; a system tool (`/bin/kill`): the system's own.
            let from = if program.contains("open-conduit") {
                BIN
            } else {
                program
            };
            std::fs::copy(from, &at).unwrap();
        }
        std::fs::copy(units.join(&name), dest.join(&name)).unwrap();
        names.push(name);
    }
    names.sort();
    assert!(
        names.iter().any(|n| n == "open-conduit-ingressd.socket"),
        "{names:?}"
    );
    let out = Command::new("systemd-analyze")
        .arg("verify")
        .arg(format!("--root={}", root.display()))
        .args(&names)
        .output()
        .unwrap();
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let _ = std::fs::remove_dir_all(&root);
    assert!(
        out.status.success(),
        "systemd-analyze verify failed:\n{said}"
    );
    assert_eq!(said.trim(), "", "systemd-analyze verify reported:\n{said}");
}
