//! The packages bundled in this binary: their manifests and playbooks, written to
//! disk as packages whose program is a script that runs this binary as the
//! extension (`up`'s `<state>/bundled`, the Debian package's
//! `/usr/lib/open-conduit/extensions`, and `config check`'s scratch directory).

use std::path::{Path, PathBuf};

use serde_json::Value;

/// A bundled extension this binary serves: (package name, manifest).
pub fn bundled() -> Vec<(&'static str, &'static str)> {
    vec![
        ("webhook", oc_webhook::MANIFEST),
        ("github", oc_github::MANIFEST),
        ("slack", oc_slack::MANIFEST),
        ("linear", oc_linear::MANIFEST),
        ("jira", oc_jira::MANIFEST),
        ("bitbucket", oc_bitbucket::MANIFEST),
        ("schedule", oc_schedule::MANIFEST),
        ("human", oc_human::MANIFEST),
        ("shell", oc_shell::MANIFEST),
        ("claude-code", oc_claude_code::MANIFEST),
        ("codex", oc_codex::MANIFEST),
        ("git", oc_git::MANIFEST),
        ("ssh", oc_ssh::MANIFEST),
        ("cloudflared", oc_cloudflared::MANIFEST),
        ("ngrok", oc_ngrok::MANIFEST),
        ("srt", oc_srt::MANIFEST),
        ("docker", oc_docker::MANIFEST),
    ]
}

/// The playbooks a bundled package ships, each by its path inside the manifest's
/// `playbooks` directory, with its text (none for a package without playbooks).
pub fn bundled_playbooks(name: &str) -> &'static [(&'static str, &'static str)] {
    match name {
        "github" => oc_github::playbooks::PLAYBOOKS,
        "linear" => oc_linear::playbooks::PLAYBOOKS,
        "jira" => oc_jira::playbooks::PLAYBOOKS,
        _ => &[],
    }
}

/// Write the playbooks of the bundled package `name` under `dir` (its package
/// directory), in the directory its `manifest` declares (`playbooks`), replacing what
/// an earlier release left there. Made as the manifest is (this process's umask:
/// 0644 and 0755 for the Debian package, private to the user under `up`). Nothing
/// for a package without playbooks.
pub fn write_playbooks(dir: &Path, name: &str, manifest: &Value) -> Result<(), String> {
    let files = bundled_playbooks(name);
    if files.is_empty() {
        return Ok(());
    }
    let sub = manifest["playbooks"].as_str().ok_or_else(|| {
        format!("{name}: ships playbooks but its manifest declares no `playbooks` directory")
    })?;
    let inside = |p: &str| {
        !p.is_empty()
            && Path::new(p)
                .components()
                .all(|c| matches!(c, std::path::Component::Normal(_)))
    };
    if !inside(sub) {
        return Err(format!(
            "{name}: `playbooks` {sub:?} is not a path inside the package"
        ));
    }
    let root = dir.join(sub);
    match std::fs::remove_dir_all(&root) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(format!("{}: {e}", root.display())),
    }
    for (rel, text) in files {
        if !inside(rel) {
            return Err(format!(
                "{name}: the playbook file {rel:?} is not a path inside its directory"
            ));
        }
        let path = root.join(rel);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).map_err(|e| format!("{}: {e}", parent.display()))?;
        }
        std::fs::write(&path, text).map_err(|e| format!("{}: {e}", path.display()))?;
    }
    Ok(())
}

/// Write the bundled packages under `<state>/bundled`: each manifest as it is, and
/// beside it a script named after its program that execs this binary as the extension.
pub(crate) fn write_bundled(state: &Path, exe: &Path) -> Result<PathBuf, String> {
    let root = state.join("bundled");
    write_bundled_with(&root, exe, 0o700)?;
    Ok(root)
}

/// Write each bundled package under `root` (`root/<name>/open-conduit-extension.json`,
/// its program, a script that runs `exe` as the extension, and its playbooks,
/// [`write_playbooks`]): `up`'s layout, and the package's
/// `/usr/lib/open-conduit/extensions`.
pub fn write_bundled_to(root: &Path, exe: &Path) -> Result<(), String> {
    write_bundled_with(root, exe, 0o755)
}

/// [`write_bundled_to`] with the programs' `mode`.
fn write_bundled_with(root: &Path, exe: &Path, mode: u32) -> Result<(), String> {
    for (name, manifest) in bundled() {
        let m: Value = serde_json::from_str(manifest).map_err(|e| format!("{name}: {e}"))?;
        let program = m["command"][0]
            .as_str()
            .filter(|p| !p.contains('/'))
            .ok_or_else(|| format!("{name}: command[0] is not a bare name"))?;
        let dir = root.join(name);
        std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        std::fs::write(dir.join("open-conduit-extension.json"), manifest)
            .map_err(|e| format!("{name}: {e}"))?;
        let script = dir.join(program);
        let text = format!(
            "#!/bin/sh\nexec '{}' {} '{name}' \"$@\"\n",
            exe.display(),
            crate::EXTENSION_RUN
        );
        std::fs::write(&script, text).map_err(|e| format!("{}: {e}", script.display()))?;
        std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(mode))
            .map_err(|e| format!("{}: {e}", script.display()))?;
        write_playbooks(&dir, name, &m)?;
    }
    Ok(())
}
