//! Small things every part of the store uses: time, ids, digests, canonical JSON.

use serde_json::Value;
use sha2::{Digest, Sha256};
use std::fmt::Write as _;

/// Milliseconds since the Unix epoch.
pub use protocol::time::now_ms;

/// RFC 3339 UTC with milliseconds for a time in ms since the epoch.
pub use protocol::time::format_rfc3339_ms as rfc3339;

/// Now, as RFC 3339.
pub fn now() -> String {
    rfc3339(now_ms())
}

/// `sha256:<hex>` of `bytes`.
pub fn digest(bytes: &[u8]) -> String {
    let hash = Sha256::digest(bytes);
    let mut out = String::with_capacity(7 + 64);
    out.push_str("sha256:");
    push_hex(&mut out, &hash);
    out
}

/// Append `bytes` as lowercase hex digits.
pub fn push_hex(out: &mut String, bytes: &[u8]) {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    for b in bytes {
        out.push(char::from(DIGITS[usize::from(b >> 4)]));
        out.push(char::from(DIGITS[usize::from(b & 0xf)]));
    }
}

/// JSON with object keys sorted at every level, so equal values encode equally.
pub fn canonical(v: &Value) -> String {
    let mut out = String::new();
    write_canonical(v, &mut out, None);
    out
}

/// [`canonical`] of the object `v` with its top-level `key` holding `value`
/// instead, so a large value (an event's payload) is encoded where it lies rather
/// than copied into `v` first. The envelope signature was made this way; it is now
/// written field by field (`events::signature`), and this stays as what its test
/// compares with.
#[cfg(test)]
pub(crate) fn canonical_with(v: &Value, key: &str, value: &Value) -> String {
    let mut out = String::new();
    write_canonical(v, &mut out, Some((key, value)));
    out
}

fn write_canonical(v: &Value, out: &mut String, replace: Option<(&str, &Value)>) {
    match v {
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            out.push('{');
            for (i, k) in keys.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                let _ = write!(out, "{}", Value::String((*k).clone()));
                out.push(':');
                match replace {
                    Some((key, value)) if key == k.as_str() => write_canonical(value, out, None),
                    _ => {
                        if let Some(val) = map.get(*k) {
                            write_canonical(val, out, None);
                        }
                    }
                }
            }
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_canonical(item, out, None);
            }
            out.push(']');
        }
        // Written in place: a 25 MiB string is not copied into a temporary first.
        other => {
            let _ = write!(out, "{other}");
        }
    }
}

/// A new random id with a prefix (`evt_…`), 128 bits from the OS (time, pid and a
/// counter when it fails: unique, if not unguessable).
pub fn new_id(prefix: &str) -> String {
    let bytes: [u8; 16] = protocol::random::unique_bytes();
    let mut out = String::with_capacity(prefix.len() + 33);
    out.push_str(prefix);
    out.push('_');
    for b in bytes {
        let _ = write!(out, "{b:02x}");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn rfc3339_of_known_instants() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(rfc3339(1_795_449_600_123), "2026-11-23T16:00:00.123Z");
        assert_eq!(rfc3339(951_782_400_000), "2000-02-29T00:00:00.000Z");
    }

    #[test]
    fn canonical_sorts_keys_at_every_level() {
        let a = json!({"b": 1, "a": {"d": [1, {"z": 0, "y": 1}], "c": "x"}});
        let b = json!({"a": {"c": "x", "d": [1, {"y": 1, "z": 0}]}, "b": 1});
        assert_eq!(canonical(&a), canonical(&b));
        assert_eq!(
            canonical(&a),
            r#"{"a":{"c":"x","d":[1,{"y":1,"z":0}]},"b":1}"#
        );
    }

    #[test]
    fn canonical_with_is_canonical_of_the_value_in_place() {
        let payload = json!({"z": "é\n\"", "a": [1.5, null, {"k": true}]});
        let with = json!({"type": "t", "payload": payload.clone(), "keys": ["k"]});
        let without = json!({"type": "t", "payload": null, "keys": ["k"]});
        assert_eq!(
            canonical_with(&without, "payload", &payload),
            canonical(&with)
        );
    }

    #[test]
    fn digests_and_ids() {
        assert_eq!(
            digest(b""),
            "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
        let a = new_id("evt");
        assert!(a.starts_with("evt_") && a.len() == 36, "{a}");
        assert_ne!(a, new_id("evt"));
    }
}
