//! Secret references (`env:NAME`, `file:/path`): their form checked without reading
//! them, and resolved; the values never enter the document.

/// The largest secret file read through a `file:` reference.
pub const MAX_SECRET_FILE_BYTES: u64 = 64 * 1024;

/// Check a secret reference's form without reading it.
pub fn check_secret_ref(r: &str) -> Result<(), String> {
    if let Some(name) = r.strip_prefix("env:") {
        if name.is_empty() || name.contains('=') || name.contains('\0') {
            return Err(format!("{r:?}: `env:` needs a variable name"));
        }
        return Ok(());
    }
    if let Some(path) = r.strip_prefix("file:") {
        if !path.starts_with('/') {
            return Err(format!("{r:?}: `file:` needs an absolute path"));
        }
        return Ok(());
    }
    Err(format!(
        "{r:?} is not a secret reference (`env:NAME` or `file:/absolute/path`)"
    ))
}

/// Read a secret reference: `env:NAME` (the reading process's environment) or
/// `file:/path` (its content without one trailing newline, at most
/// [`MAX_SECRET_FILE_BYTES`]). The error never contains the value.
pub fn resolve_secret_ref(r: &str) -> Result<String, String> {
    check_secret_ref(r)?;
    if let Some(name) = r.strip_prefix("env:") {
        return std::env::var(name).map_err(|_| format!("the variable {name} is not set"));
    }
    let path = r.strip_prefix("file:").unwrap_or(r);
    let meta = std::fs::metadata(path).map_err(|e| format!("{path}: {e}"))?;
    if meta.len() > MAX_SECRET_FILE_BYTES {
        return Err(format!(
            "{path} is {} bytes, over the secret file limit ({MAX_SECRET_FILE_BYTES})",
            meta.len()
        ));
    }
    let text = std::fs::read_to_string(path).map_err(|e| format!("{path}: {e}"))?;
    let text = text.strip_suffix('\n').unwrap_or(&text);
    let text = text.strip_suffix('\r').unwrap_or(text);
    Ok(text.to_owned())
}

/// What a copy of a configuration shows in place of each secret reference.
pub const REDACTED: &str = "[redacted]";

/// A copy of configuration document `doc` for people to read: every value of every
/// connection's `secret_refs` replaced by [`REDACTED`] (an unset `false` stays),
/// so neither a secret nor where it is kept is shown.
pub fn redacted(doc: &serde_json::Value) -> serde_json::Value {
    let mut c = doc.clone();
    if let Some(conns) = c
        .get_mut("connections")
        .and_then(serde_json::Value::as_array_mut)
    {
        for conn in conns {
            if let Some(refs) = conn
                .get_mut("secret_refs")
                .and_then(serde_json::Value::as_object_mut)
            {
                for v in refs.values_mut() {
                    if *v != serde_json::Value::Bool(false) {
                        *v = serde_json::Value::String(REDACTED.to_owned());
                    }
                }
            }
        }
    }
    c
}
