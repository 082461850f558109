//! Base64 for byte fields on the wire (delivery bodies, artifact chunks, live output tails).
//!
//! The wire carries bytes as standard-alphabet, padded base64 strings (RFC 4648 §4).
//! Use the module on a `Vec<u8>` field:
//!
//! ```
//! #[derive(serde::Serialize, serde::Deserialize)]
//! struct Chunk {
//!     #[serde(with = "protocol::b64")]
//!     data: Vec<u8>,
//! }
//! let json = serde_json::to_string(&Chunk { data: b"hi".to_vec() }).unwrap();
//! assert_eq!(json, r#"{"data":"aGk="}"#);
//! ```
//!
//! and [`option`] on an `Option<Vec<u8>>` field, usually with
//! `#[serde(default, skip_serializing_if = "Option::is_none", with = "crate::b64::option")]`.

use std::fmt;

use base64_simd::STANDARD;
use serde::de::{self, Visitor};
use serde::{Deserializer, Serializer};

/// Encodes bytes as a standard, padded base64 string.
pub fn encode(bytes: impl AsRef<[u8]>) -> String {
    STANDARD.encode_to_string(bytes)
}

/// Decodes a standard, padded base64 string.
pub fn decode(text: &str) -> Result<Vec<u8>, base64_simd::Error> {
    STANDARD.decode_to_vec(text)
}

/// Serializes bytes as a base64 string.
pub fn serialize<T, S>(value: &T, serializer: S) -> Result<S::Ok, S::Error>
where
    T: AsRef<[u8]> + ?Sized,
    S: Serializer,
{
    // Base64 never needs escaping: hand the quoted text over as raw JSON, so the
    // JSON writer copies it instead of checking every byte for escapes.
    let bytes = value.as_ref();
    let mut quoted = String::with_capacity(STANDARD.encoded_length(bytes.len()) + 2);
    quoted.push('"');
    STANDARD.encode_append(bytes, &mut quoted);
    quoted.push('"');
    match serde_json::value::RawValue::from_string(quoted) {
        Ok(raw) => serde::Serialize::serialize(&raw, serializer),
        Err(_) => serializer.serialize_str(&STANDARD.encode_to_string(bytes)),
    }
}

/// Deserializes bytes from a base64 string.
pub fn deserialize<'de, D>(deserializer: D) -> Result<Vec<u8>, D::Error>
where
    D: Deserializer<'de>,
{
    deserializer.deserialize_str(B64Visitor)
}

struct B64Visitor;

impl Visitor<'_> for B64Visitor {
    type Value = Vec<u8>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a standard, padded base64 string")
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Vec<u8>, E> {
        STANDARD
            .decode_to_vec(v)
            .map_err(|err| E::custom(format_args!("invalid base64: {err}")))
    }
}

/// The same encoding for `Option<Vec<u8>>`: `None` is JSON `null` (or, with
/// `skip_serializing_if = "Option::is_none"` and `default`, an absent field).
pub mod option {
    use serde::{Deserialize, Deserializer, Serializer};

    /// Serializes `Some(bytes)` as a base64 string and `None` as `null`.
    pub fn serialize<T, S>(value: &Option<T>, serializer: S) -> Result<S::Ok, S::Error>
    where
        T: AsRef<[u8]>,
        S: Serializer,
    {
        match value {
            Some(bytes) => super::serialize(bytes, serializer),
            None => serializer.serialize_none(),
        }
    }

    /// Deserializes a base64 string as `Some(bytes)` and `null` as `None`.
    pub fn deserialize<'de, D>(deserializer: D) -> Result<Option<Vec<u8>>, D::Error>
    where
        D: Deserializer<'de>,
    {
        #[derive(Deserialize)]
        struct Wrap(#[serde(with = "super")] Vec<u8>);
        Ok(Option::<Wrap>::deserialize(deserializer)?.map(|Wrap(bytes)| bytes))
    }
}
