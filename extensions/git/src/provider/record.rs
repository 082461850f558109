//! A workspace's record and reference: `<mode>/<key>/<slug>`, and the record file
//! written atomically beside the workspace (`creating`, then `ready`).

use super::io_failed;
use crate::config::Mode;
use protocol::RpcError;
use serde::{Deserialize, Serialize};
use std::io::Write;
use std::path::Path;

/// A workspace's record.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(super) struct Record {
    #[serde(rename = "ref")]
    pub(super) reference: String,
    pub(super) owner: String,
    pub(super) mode: String,
    pub(super) repository: String,
    pub(super) branch: String,
    #[serde(default)]
    pub(super) base: String,
    pub(super) state: String,
    #[serde(default)]
    pub(super) created_ms: i64,
}

/// A reference's component: `[A-Za-z0-9_-]`, bounded, never a path trick.
pub(super) fn component_ok(c: &str) -> bool {
    !c.is_empty()
        && c.len() <= 80
        && c.chars()
            .all(|ch| ch.is_ascii_alphanumeric() || ch == '-' || ch == '_')
}

/// Splits `mode/key/slug`.
pub(super) fn parse_ref(reference: &str) -> Option<(Mode, String, String)> {
    let mut parts = reference.split('/');
    let (mode, key, slug) = (parts.next()?, parts.next()?, parts.next()?);
    if parts.next().is_some() {
        return None;
    }
    let mode = Mode::parse(mode).filter(|m| m.as_str() == mode)?;
    (component_ok(key) && component_ok(slug)).then(|| (mode, key.to_string(), slug.to_string()))
}

pub(super) fn read_record(path: &Path) -> Option<Record> {
    let text = std::fs::read(path).ok()?;
    serde_json::from_slice(&text).ok()
}

/// Writes a record atomically: a temporary file, fsync, rename, fsync of the directory.
pub(super) fn write_record(path: &Path, record: &Record) -> Result<(), RpcError> {
    let tmp = path.with_extension("json.tmp");
    let bytes = serde_json::to_vec_pretty(record).map_err(RpcError::unauthored)?;
    let write = || -> std::io::Result<()> {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(&bytes)?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)?;
        if let Some(parent) = path.parent() {
            std::fs::File::open(parent)?.sync_all()?;
        }
        Ok(())
    };
    write().map_err(|e| io_failed("writing the record", path, e))
}

pub(super) fn remove_file(path: &Path) {
    let _ = std::fs::remove_file(path);
}

pub(super) fn remove_dir(path: &Path) {
    if path.exists() {
        let _ = std::fs::remove_dir_all(path);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn references_are_checked() {
        assert!(parse_ref("work/api-1a2b3c4d/w-1-0f0e0d0c").is_some());
        for bad in [
            "work/../x",
            "work/a",
            "lent/a/b",
            "work/a/b/c",
            "clone/a/b",
            "work/a/..",
        ] {
            assert!(parse_ref(bad).is_none(), "{bad}");
        }
    }
}
