//! The syntax of the names a manifest declares: identifiers, names, namespaced names
//! and versioned schema names, and paths that stay inside the package.

use super::*;

/// `[a-z][a-z0-9_-]*`, at most 64 bytes: the package name and other
/// identifier-shaped names.
pub fn is_identifier(s: &str) -> bool {
    let bytes = s.as_bytes();
    !bytes.is_empty()
        && bytes.len() <= MAX_IDENTIFIER_BYTES
        && bytes[0].is_ascii_lowercase()
        && bytes
            .iter()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'-' || *b == b'_')
}

/// An identifier, or identifier segments joined by dots (each segment of
/// lower-case letters, digits, `-` and `_`, the first starting with a letter),
/// at most 128 bytes.
pub fn is_name(s: &str) -> bool {
    if s.is_empty() || s.len() > MAX_NAME_BYTES {
        return false;
    }
    let mut segments = s.split('.');
    let first_ok = segments.next().is_some_and(is_identifier);
    first_ok
        && segments.all(|seg| {
            !seg.is_empty()
                && seg
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_')
        })
}

/// Whether `s` is under the package name `own`: an identifier-shaped name is
/// `own` or `own-…`, a dotted name is `own.…`.
pub fn is_under(own: &str, s: &str) -> bool {
    if s.contains('.') {
        s.strip_prefix(own)
            .and_then(|rest| rest.strip_prefix('.'))
            .is_some_and(|rest| !rest.is_empty())
    } else {
        s == own
            || s.strip_prefix(own)
                .and_then(|rest| rest.strip_prefix('-'))
                .is_some_and(|rest| !rest.is_empty())
    }
}

/// A wait target kind: lower-case letters, digits, `-` or `_`.
pub fn is_target_kind(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= MAX_IDENTIFIER_BYTES
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_')
}

/// A top-level config field name: ASCII letters, digits, `_` and `-`.
pub(super) fn is_config_field(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= MAX_NAME_BYTES
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

pub(super) fn is_one_line(s: &str) -> bool {
    !s.chars().any(char::is_control)
}

/// A `.v<N>` version suffix's number, when the last segment is one.
pub(super) fn version_suffix(s: &str) -> Option<(&str, u64)> {
    let (base, last) = s.rsplit_once('.')?;
    let digits = last.strip_prefix('v')?;
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok().map(|n| (base, n))
}

/// Whether a path written in the manifest stays inside the package directory:
/// relative, non-empty, and with no `..` component.
pub(super) fn stays_inside(p: &str) -> bool {
    if p.is_empty() || p.starts_with('/') || p.starts_with('\\') {
        return false;
    }
    Path::new(p)
        .components()
        .all(|c| matches!(c, Component::Normal(_) | Component::CurDir))
}
