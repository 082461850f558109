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

use std::borrow::Cow;
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

/// The largest scratch text [`serialize`] keeps for its thread between calls.
const KEPT_SCRATCH: usize = 1024 * 1024;

thread_local! {
    /// Where [`serialize`] encodes, kept between calls: a stream of chunks is
    /// encoded into memory already mapped rather than fresh pages each time.
    static SCRATCH: std::cell::RefCell<String> = const { std::cell::RefCell::new(String::new()) };
}

/// Serializes bytes as a base64 string.
pub fn serialize<T, S>(value: &T, serializer: S) -> Result<S::Ok, S::Error>
where
    T: AsRef<[u8]> + ?Sized,
    S: Serializer,
{
    let bytes = value.as_ref();
    SCRATCH.with(|cell| match cell.try_borrow_mut() {
        Ok(mut quoted) => {
            quoted.clear();
            let result = raw_json(quote(bytes, &mut quoted), serializer);
            if quoted.capacity() > KEPT_SCRATCH {
                *quoted = String::new();
            }
            result
        }
        // Only if a serializer serialized bytes from inside its own writes.
        Err(_) => raw_json(quote(bytes, &mut String::new()), serializer),
    })
}

/// `bytes` as a quoted base64 string (JSON text) in `out` (empty).
fn quote<'a>(bytes: &[u8], out: &'a mut String) -> &'a str {
    out.reserve(STANDARD.encoded_length(bytes.len()) + 2);
    out.push('"');
    STANDARD.encode_append(bytes, out);
    out.push('"');
    out
}

/// serde_json's name for raw JSON text inside a value being serialized: what
/// `RawValue`'s own `Serialize` emits, which its serializers write as it is (and
/// `to_value` parses).
const RAW_VALUE_TOKEN: &str = "$serde_json::private::RawValue";

/// Serializes `text`, which must be JSON (here a quoted base64 string, which needs
/// no escapes), as raw JSON, the way `RawValue` does, but without
/// `RawValue::from_string`'s parse of the whole text to check it: a chunk's 341 KiB
/// of base64 would be read once more for nothing (docs/decisions.md). The tests pin
/// the output, so a serde_json that dropped the convention fails them.
fn raw_json<S: Serializer>(text: &str, serializer: S) -> Result<S::Ok, S::Error> {
    use serde::ser::SerializeStruct;
    let mut s = serializer.serialize_struct(RAW_VALUE_TOKEN, 1)?;
    s.serialize_field(RAW_VALUE_TOKEN, text)?;
    s.end()
}

/// Deserializes bytes from a base64 string.
///
/// The string is asked for as bytes: serde_json then finds its end with a plain
/// search for a quote or a backslash, not the per-byte check for control
/// characters a `str` gets (base64 has none: the decoder refuses them, and a
/// message's JSON was checked whole when it was read).
pub fn deserialize<'de, D>(deserializer: D) -> Result<Vec<u8>, D::Error>
where
    D: Deserializer<'de>,
{
    deserializer.deserialize_bytes(B64Visitor)
}

struct B64Visitor;

impl Visitor<'_> for B64Visitor {
    type Value = Vec<u8>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a standard, padded base64 string")
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Vec<u8>, E> {
        self.visit_bytes(v.as_bytes())
    }

    fn visit_bytes<E: de::Error>(self, v: &[u8]) -> Result<Vec<u8>, E> {
        STANDARD.decode_to_vec(v).map_err(invalid)
    }
}

fn invalid<E: de::Error>(err: base64_simd::Error) -> E {
    E::custom(format_args!("invalid base64: {err}"))
}

/// A base64 string borrowed from the JSON it was read from, not yet decoded: for a
/// receiver that decodes it straight where the bytes go ([`Text::decode_append`])
/// instead of into a vector of their own first.
///
/// ```
/// #[derive(serde::Deserialize)]
/// struct Chunk<'a> {
///     #[serde(borrow)]
///     data: protocol::b64::Text<'a>,
/// }
/// let chunk: Chunk = serde_json::from_str(r#"{"data":"aGk="}"#).unwrap();
/// let mut out = b">".to_vec();
/// chunk.data.decode_append(&mut out).unwrap();
/// assert_eq!(out, b">hi");
/// ```
/// (A string with escapes, which base64 never needs but a JSON writer may add
/// for `/`, is read unescaped into a copy.)
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Text<'a>(Cow<'a, [u8]>);

impl Text<'_> {
    /// The number of bytes it decodes to, or why it is not base64.
    pub fn decoded_len(&self) -> Result<usize, base64_simd::Error> {
        STANDARD.decoded_length(&self.0)
    }

    /// Decodes it onto the end of `out`; on an error `out` is left as it was.
    pub fn decode_append(&self, out: &mut Vec<u8>) -> Result<(), base64_simd::Error> {
        // Room as `Vec` grows it (doubling), so appending chunk after chunk is not a
        // reallocation each time.
        out.reserve(self.decoded_len()?);
        STANDARD.decode_append(&self.0, out)
    }
}

impl<'de: 'a, 'a> serde::Deserialize<'de> for Text<'a> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct TextVisitor;
        impl<'de> Visitor<'de> for TextVisitor {
            type Value = Text<'de>;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a standard, padded base64 string")
            }

            fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Text<'de>, E> {
                Ok(Text(Cow::Borrowed(v.as_bytes())))
            }

            fn visit_borrowed_bytes<E: de::Error>(self, v: &'de [u8]) -> Result<Text<'de>, E> {
                Ok(Text(Cow::Borrowed(v)))
            }

            fn visit_str<E: de::Error>(self, v: &str) -> Result<Text<'de>, E> {
                Ok(Text(Cow::Owned(v.as_bytes().to_vec())))
            }

            fn visit_bytes<E: de::Error>(self, v: &[u8]) -> Result<Text<'de>, E> {
                Ok(Text(Cow::Owned(v.to_vec())))
            }
        }
        deserializer.deserialize_bytes(TextVisitor)
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

#[cfg(test)]
mod tests {
    use super::Text;
    use serde_json::json;

    #[derive(serde::Serialize, serde::Deserialize, PartialEq, Debug)]
    struct Chunk {
        #[serde(with = "super")]
        data: Vec<u8>,
    }

    #[derive(serde::Serialize, serde::Deserialize, PartialEq, Debug)]
    struct Maybe {
        #[serde(default, with = "super::option")]
        data: Option<Vec<u8>>,
    }

    #[test]
    fn bytes_are_written_as_a_plain_base64_string_and_read_back() {
        let chunk = Chunk {
            data: (0..=255u8).cycle().take(1000).collect(),
        };
        let text = serde_json::to_string(&chunk).expect("encode");
        let expected = format!("{{\"data\":\"{}\"}}", super::encode(&chunk.data));
        assert_eq!(text, expected);
        let back: Chunk = serde_json::from_str(&text).expect("decode");
        assert_eq!(back, chunk);
        // From bytes, and through a Value both ways (what a forwarder that decodes does).
        let back: Chunk = serde_json::from_slice(text.as_bytes()).expect("decode");
        assert_eq!(back, chunk);
        let value = serde_json::to_value(&chunk).expect("to_value");
        assert_eq!(value["data"], json!(super::encode(&chunk.data)));
        let back: Chunk = serde_json::from_value(value).expect("from_value");
        assert_eq!(back, chunk);
        let raw = serde_json::value::to_raw_value(&chunk).expect("to_raw_value");
        assert_eq!(raw.get(), expected);
        let pretty = serde_json::to_string_pretty(&chunk).expect("pretty");
        assert!(pretty.contains(&format!("\"{}\"", super::encode(&chunk.data))));
        // Empty, and the optional form.
        let empty = serde_json::to_string(&Chunk { data: Vec::new() }).expect("encode");
        assert_eq!(empty, r#"{"data":""}"#);
        let some = Maybe {
            data: Some(b"hi".to_vec()),
        };
        assert_eq!(
            serde_json::to_string(&some).expect("encode"),
            r#"{"data":"aGk="}"#
        );
        assert_eq!(
            serde_json::from_str::<Maybe>(r#"{"data":"aGk="}"#).expect("decode"),
            some
        );
        assert_eq!(
            serde_json::from_str::<Maybe>(r#"{"data":null}"#).expect("decode"),
            Maybe { data: None }
        );
    }

    #[test]
    fn escapes_a_json_writer_may_add_are_read_through() {
        // `/` is in the alphabet; some writers escape it as `\/`.
        let back: Chunk = serde_json::from_str(r#"{"data":"\/w=="}"#).expect("decode");
        assert_eq!(back.data, vec![0xff]);
        let back: Chunk = serde_json::from_str(r#"{"data":"\u0061Gk="}"#).expect("decode");
        assert_eq!(back.data, b"hi");
    }

    #[test]
    fn what_is_not_base64_is_refused_as_invalid_base64() {
        for bad in [
            r#"{"data":"not base64!"}"#,
            r#"{"data":"aGk"}"#,
            r#"{"data":"aG\nk="}"#,
            r#"{"data":"aGk=\u0000"}"#,
        ] {
            let err = serde_json::from_str::<Chunk>(bad).expect_err(bad);
            assert!(err.to_string().contains("invalid base64"), "{bad}: {err}");
        }
        let err = serde_json::from_value::<Chunk>(json!({"data": "not base64!"})).expect_err("bad");
        assert!(err.to_string().contains("invalid base64"), "{err}");
        let err = serde_json::from_str::<Chunk>(r#"{"data":[1,2]}"#).expect_err("array");
        assert!(err.to_string().contains("base64 string"), "{err}");
        let err = serde_json::from_str::<Chunk>(r#"{"data":7}"#).expect_err("number");
        assert!(err.to_string().contains("base64 string"), "{err}");
    }

    #[derive(serde::Deserialize)]
    struct Borrowed<'a> {
        #[serde(borrow)]
        data: Text<'a>,
    }

    #[test]
    fn borrowed_text_decodes_onto_the_end_of_a_buffer() {
        let mut out = b"<".to_vec();
        let one: Borrowed = serde_json::from_str(r#"{"data":"aGk="}"#).expect("decode");
        assert_eq!(one.data.decoded_len().ok(), Some(2));
        one.data.decode_append(&mut out).expect("append");
        let two: Borrowed = serde_json::from_str(r#"{"data":"\/w=="}"#).expect("decode");
        two.data.decode_append(&mut out).expect("append");
        assert_eq!(out, b"<hi\xff");
        // Bad base64 leaves the buffer as it was.
        let bad: Borrowed = serde_json::from_str(r#"{"data":"aGk!"}"#).expect("text");
        assert!(bad.data.decode_append(&mut out).is_err());
        assert!(bad.data.decoded_len().is_err() || bad.data.decode_append(&mut out).is_err());
        assert_eq!(out, b"<hi\xff");
        let err = serde_json::from_str::<Borrowed>(r#"{"data":1}"#).err();
        assert!(err.is_some_and(|e| e.to_string().contains("base64 string")));
    }
}
