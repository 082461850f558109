//! Parsing and loading a manifest: the JSON read strictly (an unknown field means a
//! newer manifest, located by its path), validated, and the files it names kept
//! inside the package's directory.

use super::*;

/// Parses and validates a manifest.
pub fn parse_manifest(bytes: &[u8]) -> Result<Manifest, ManifestError> {
    if bytes.len() > MAX_MANIFEST_BYTES {
        return Err(invalid(
            "manifest_size",
            MANIFEST_FILE,
            format!("{} bytes, more than {MAX_MANIFEST_BYTES}", bytes.len()),
        ));
    }
    let manifest: Manifest = match serde_json::from_slice(bytes) {
        Ok(m) => m,
        Err(err) => return Err(map_serde_error(bytes, err)),
    };
    manifest.validate()?;
    Ok(manifest)
}

/// Reads `dir/open-conduit-extension.json`, validates it, checks that the
/// directory is named after the manifest's name, and that the command and the
/// playbooks resolve inside the directory (following links).
pub fn load_manifest(dir: &Path) -> Result<Manifest, ManifestError> {
    let path = dir.join(MANIFEST_FILE);
    let bytes = std::fs::read(&path).map_err(|source| ManifestError::Io {
        path: path.clone(),
        source,
    })?;
    let manifest = parse_manifest(&bytes)?;
    let root = std::fs::canonicalize(dir).map_err(|source| ManifestError::Io {
        path: dir.to_path_buf(),
        source,
    })?;
    let dir_name = dir
        .file_name()
        .or_else(|| root.file_name())
        .and_then(|n| n.to_str())
        .unwrap_or("");
    if dir_name != manifest.name {
        return Err(invalid(
            "directory_name",
            dir.display(),
            format!(
                "the package directory is named `{dir_name}` but the manifest's name is `{}`",
                manifest.name
            ),
        ));
    }
    if !manifest.is_host_run() {
        if let Some(program) = manifest.command.first() {
            check_resolves_inside(&root, program, "command[0]", "command_outside")?;
        }
    }
    if let Some(playbooks) = &manifest.playbooks {
        check_resolves_inside(&root, playbooks, "playbooks", "playbooks_outside")?;
    }
    Ok(manifest)
}

fn check_resolves_inside(
    root: &Path,
    rel: &str,
    path: &str,
    rule: &'static str,
) -> Result<(), ManifestError> {
    let target = root.join(rel);
    if std::fs::symlink_metadata(&target).is_err() {
        // Missing: nothing to follow. The lexical check has already run.
        return Ok(());
    }
    let resolved = std::fs::canonicalize(&target).map_err(|source| ManifestError::Io {
        path: target.clone(),
        source,
    })?;
    if !resolved.starts_with(root) {
        return Err(invalid(
            rule,
            path,
            format!(
                "`{rel}` resolves to {}, outside the package directory",
                resolved.display()
            ),
        ));
    }
    Ok(())
}

fn map_serde_error(bytes: &[u8], err: serde_json::Error) -> ManifestError {
    let text = err.to_string();
    if let Some(rest) = text.strip_prefix("unknown field `") {
        if let Some(end) = rest.find('`') {
            let field = rest[..end].to_string();
            let location = match locate_key(bytes, &field) {
                Some(path) => format!(" at {path}"),
                None => format!(" (line {}, column {})", err.line(), err.column()),
            };
            return ManifestError::NewerManifest {
                kind: "field",
                field,
                location,
            };
        }
    }
    ManifestError::Malformed(err)
}

/// The path of the object holding `key`, when exactly one object in the
/// document holds it.
fn locate_key(bytes: &[u8], key: &str) -> Option<String> {
    let value: Value = serde_json::from_slice(bytes).ok()?;
    let mut found = Vec::new();
    collect_key_paths(&value, "", key, &mut found);
    if found.len() == 1 {
        found.pop()
    } else {
        None
    }
}

fn collect_key_paths(value: &Value, path: &str, key: &str, found: &mut Vec<String>) {
    match value {
        Value::Object(map) => {
            for (k, v) in map {
                let child = if path.is_empty() {
                    k.clone()
                } else {
                    format!("{path}.{k}")
                };
                if k == key {
                    found.push(child.clone());
                }
                collect_key_paths(v, &child, key, found);
            }
        }
        Value::Array(items) => {
            for (i, v) in items.iter().enumerate() {
                collect_key_paths(v, &format!("{path}[{i}]"), key, found);
            }
        }
        _ => {}
    }
}
