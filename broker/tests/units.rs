//! The broker's systemd units pass `systemd-analyze verify`, checked against a
//! scratch root holding the system's unit directory and the real built binary at
//! the path the units name (verify refuses an `ExecStart=` that does not exist).

#![allow(clippy::unwrap_used)]

use std::path::Path;
use std::process::Command;

const BROKER: &str = env!("CARGO_BIN_EXE_open-conduit-broker");

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
fn systemd_analyze_verify_accepts_the_broker_units() {
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
    std::fs::create_dir_all(root.join("usr/bin")).unwrap();
    std::fs::copy(BROKER, root.join("usr/bin/open-conduit-broker")).unwrap();
    let units = Path::new(env!("CARGO_MANIFEST_DIR")).join("../units");
    let dest = root.join("etc/systemd/system");
    std::fs::create_dir_all(&dest).unwrap();
    let names = ["open-conduit-broker.socket", "open-conduit-broker.service"];
    for name in names {
        std::fs::copy(units.join(name), dest.join(name)).unwrap();
    }
    let out = Command::new("systemd-analyze")
        .arg("verify")
        .arg(format!("--root={}", root.display()))
        .args(names)
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
