//! The `extension` commands: the packages extrunner runs (`list`, `inspect`,
//! `restart`), and installing or removing a package in the configuration directory.

use std::path::Path;

use busapi::ext::{InspectRequest, ListRequest, RestartRequest};

use crate::output::{call, call_json, decode, paint, print_json, Failure, Out};

/// `extension list`: with `--json`, the packages as extrunner wrote them.
pub fn extension_list(bus: &Path, json_out: bool) -> Out {
    let answer = call_json(bus, &ListRequest {})?;
    if json_out {
        print_json(&answer["extensions"]);
        return Ok(());
    }
    let ext = decode::<ListRequest>(answer)?;
    for e in &ext.extensions {
        println!(
            "{:<12} {:<8} {} {:<9} restarts {}{}",
            e.name,
            e.version,
            paint(&e.state, 10),
            e.origin,
            e.restarts,
            e.refusal
                .as_deref()
                .map(|r| format!(" ({r})"))
                .unwrap_or_default()
        );
    }
    for r in &ext.reports {
        println!("not offered: {}", r.message);
    }
    Ok(())
}

/// `extension inspect NAME`: the package as extrunner wrote it.
pub fn extension_inspect(bus: &Path, name: &str) -> Out {
    let request = InspectRequest {
        name: name.to_owned(),
    };
    print_json(&call_json(bus, &request)?);
    Ok(())
}

/// `extension restart NAME`.
pub fn extension_restart(bus: &Path, name: &str) -> Out {
    let request = RestartRequest {
        name: name.to_owned(),
    };
    println!("{name}: {}", call(bus, &request)?.state);
    Ok(())
}

fn copy_tree(from: &Path, to: &Path) -> Result<(), String> {
    std::fs::create_dir_all(to).map_err(|e| format!("{}: {e}", to.display()))?;
    for entry in std::fs::read_dir(from).map_err(|e| format!("{}: {e}", from.display()))? {
        let entry = entry.map_err(|e| e.to_string())?;
        let kind = entry.file_type().map_err(|e| e.to_string())?;
        let dest = to.join(entry.file_name());
        if kind.is_dir() {
            copy_tree(&entry.path(), &dest)?;
        } else if kind.is_file() {
            std::fs::copy(entry.path(), &dest)
                .map_err(|e| format!("{}: {e}", entry.path().display()))?;
        } else if kind.is_symlink() {
            let target = std::fs::read_link(entry.path()).map_err(|e| e.to_string())?;
            std::os::unix::fs::symlink(target, &dest).map_err(|e| e.to_string())?;
        }
    }
    Ok(())
}

/// `extension install DIR`: the package's manifest is checked offline, then the
/// directory is copied to `<config dir>/extensions/<name>` (staged under a hidden name
/// and renamed, so extrunner never sees half a package). It replaces a bundled package
/// of the same name; extrunner loads it at its next start.
pub fn extension_install(config_dir: &Path, dir: &Path) -> Out {
    // Checked as extrunner will (but for the directory's name: the copy takes the
    // manifest's).
    let file = dir.join(protocol::manifest::MANIFEST_FILE);
    let bytes = std::fs::read(&file).map_err(|e| format!("{}: {e}", file.display()))?;
    let manifest = protocol::manifest::parse_manifest(&bytes)
        .map_err(|e| format!("{}: {e}", file.display()))?;
    let root = config_dir.join("extensions");
    std::fs::create_dir_all(&root).map_err(|e| format!("{}: {e}", root.display()))?;
    let dest = root.join(&manifest.name);
    let staging = root.join(format!(".{}.installing", manifest.name));
    let _ = std::fs::remove_dir_all(&staging);
    copy_tree(dir, &staging)?;
    let old = root.join(format!(".{}.old", manifest.name));
    let _ = std::fs::remove_dir_all(&old);
    if dest.exists() {
        std::fs::rename(&dest, &old).map_err(|e| format!("{}: {e}", dest.display()))?;
    }
    std::fs::rename(&staging, &dest).map_err(|e| format!("{}: {e}", dest.display()))?;
    let _ = std::fs::remove_dir_all(&old);
    println!(
        "installed {} {} in {}; restart extrunner to load it (`systemctl restart open-conduit-extrunner`, or restart `open-conduit up`)",
        manifest.name,
        manifest.version,
        dest.display()
    );
    Ok(())
}

/// `extension remove NAME`: removes an installed package (a bundled one of the same
/// name comes back at extrunner's next start).
pub fn extension_remove(config_dir: &Path, name: &str) -> Out {
    if name.is_empty() || name.contains('/') || name.starts_with('.') {
        return Err(Failure {
            message: format!("{name:?} is not a package name"),
            status: 2,
        });
    }
    let dest = config_dir.join("extensions").join(name);
    if !dest.is_dir() {
        return Err(format!("no installed package {name} in {}", dest.display()).into());
    }
    std::fs::remove_dir_all(&dest).map_err(|e| format!("{}: {e}", dest.display()))?;
    println!(
        "removed {name} from {}; restart extrunner for it to take effect",
        dest.display()
    );
    Ok(())
}
