//! An extension's configs (a binding's executor config, an entry's or a route's
//! config, a tunnel's): read by `#[derive(Deserialize)]` types with
//! `#[serde(deny_unknown_fields)]` through [`parse`], and each problem answered as a
//! [`ConfigError`] naming its field as a JSON pointer into the config
//! (`/jobs/1/cron: must be a string`), as `validate` reports it to the host
//! (`Diagnostic.path` and `.message`).
//!
//! The reasons never quote a value of the config (a value may be a secret): serde's
//! own messages (`invalid type: string "hunter2", expected u64`) are rewritten to say
//! what the field must be (`must be a whole, non-negative number`). An unknown field
//! is named by its pointer, with the fields that are known there.

use serde::de::DeserializeOwned;
use serde::{Deserialize, Deserializer};
use serde_json::Value;
use std::fmt;

/// A config that cannot run: where (a JSON pointer into the config), and what is wrong
/// there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    /// The field as a JSON pointer into the config (`/env/PATH`, `/extra_args/1`),
    /// empty for the config as a whole.
    pub pointer: String,
    /// What is wrong (without the value).
    pub reason: String,
}

impl ConfigError {
    /// The error at `pointer` (a JSON pointer: `""` or `/a/0`; see [`pointer`] to
    /// make one from keys).
    pub fn new(pointer: impl Into<String>, reason: impl Into<String>) -> Self {
        ConfigError {
            pointer: pointer.into(),
            reason: reason.into(),
        }
    }

    /// The error of the config as a whole.
    pub fn whole(reason: impl Into<String>) -> Self {
        ConfigError::new("", reason)
    }

    /// The same error inside `prefix` (a pointer): `/timeout_s` inside
    /// `/bindings/0` is `/bindings/0/timeout_s`.
    pub fn within(mut self, prefix: &str) -> Self {
        self.pointer = format!("{prefix}{}", self.pointer);
        self
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.pointer.is_empty() {
            write!(f, "the config: {}", self.reason)
        } else {
            write!(f, "{}: {}", self.pointer, self.reason)
        }
    }
}

impl std::error::Error for ConfigError {}

/// One reference token of a JSON pointer, escaped (`~` as `~0`, `/` as `~1`).
pub fn escape(token: &str) -> String {
    token.replace('~', "~0").replace('/', "~1")
}

/// The JSON pointer of `tokens` (`["env", "A/B"]` is `/env/A~1B`; none is `""`).
pub fn pointer<I, T>(tokens: I) -> String
where
    I: IntoIterator<Item = T>,
    T: AsRef<str>,
{
    tokens
        .into_iter()
        .map(|t| format!("/{}", escape(t.as_ref())))
        .collect()
}

/// Reads `value` as `T` (a `Deserialize` type, as a rule with
/// `#[serde(deny_unknown_fields)]`): the first field that does not read is the
/// error, at its pointer. A struct reads from an object only (not, as serde_json
/// would also take it, from an array of its fields).
pub fn parse<T: DeserializeOwned>(value: &Value) -> Result<T, ConfigError> {
    serde_path_to_error::deserialize(strict::Strict(value)).map_err(|e| {
        let mut at = String::new();
        for segment in e.path().iter() {
            match segment {
                serde_path_to_error::Segment::Seq { index } => at.push_str(&format!("/{index}")),
                serde_path_to_error::Segment::Map { key } => {
                    at.push('/');
                    at.push_str(&escape(key));
                }
                serde_path_to_error::Segment::Enum { .. }
                | serde_path_to_error::Segment::Unknown => {}
            }
        }
        error_at(at, &e.into_inner().to_string())
    })
}

/// Reads `value`, an object, as `T`, reporting every top-level field that does not
/// read rather than the first: each one's error, and `T` read from the others (`None`
/// when a field it needs is among them, or `value` is no object). For configs whose
/// check answers every problem at once (a tunnel's).
pub fn parse_each<T: DeserializeOwned>(value: &Value) -> (Option<T>, Vec<ConfigError>) {
    let Value::Object(map) = value else {
        return (None, vec![ConfigError::whole("must be an object")]);
    };
    let mut rest = map.clone();
    let mut errors = Vec::new();
    // Each round drops one field, so at most one round more than there are fields.
    for _ in 0..=map.len() {
        match parse::<T>(&Value::Object(rest.clone())) {
            Ok(t) => return (Some(t), errors),
            Err(e) => {
                let key = e
                    .pointer
                    .strip_prefix('/')
                    .map(|p| p.split('/').next().unwrap_or(p))
                    .map(|k| k.replace("~1", "/").replace("~0", "~"));
                if errors.iter().any(|x: &ConfigError| x.pointer == e.pointer) {
                    // A required field dropped before: already reported.
                    break;
                }
                let dropped = key.is_some_and(|k| rest.remove(&k).is_some());
                errors.push(e);
                if !dropped {
                    break;
                }
            }
        }
    }
    (None, errors)
}

/// For an `Option<Value>` field with `#[serde(default, deserialize_with =
/// "sdk::config::present")]`: a field written `null` is `Some(Value::Null)`, not
/// `None` as serde reads an absent and a null field alike.
pub fn present<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Value>, D::Error> {
    Value::deserialize(d).map(Some)
}

/// A deserializer of a `serde_json::Value` that reads a struct from an object only.
mod strict {
    use serde::de::value::{BorrowedStrDeserializer, Error};
    use serde::de::{self, Deserializer, IntoDeserializer, Unexpected, Visitor};
    use serde_json::Value;

    /// The value, read strictly.
    pub(super) struct Strict<'a>(pub(super) &'a Value);

    fn unexpected(v: &Value) -> Unexpected<'_> {
        match v {
            Value::Null => Unexpected::Unit,
            Value::Bool(b) => Unexpected::Bool(*b),
            Value::Number(n) => match (n.as_u64(), n.as_i64(), n.as_f64()) {
                (Some(u), _, _) => Unexpected::Unsigned(u),
                (_, Some(i), _) => Unexpected::Signed(i),
                (_, _, Some(f)) => Unexpected::Float(f),
                _ => Unexpected::Other("number"),
            },
            Value::String(s) => Unexpected::Str(s),
            Value::Array(_) => Unexpected::Seq,
            Value::Object(_) => Unexpected::Map,
        }
    }

    struct Seq<'a>(std::slice::Iter<'a, Value>);

    impl<'de> de::SeqAccess<'de> for Seq<'de> {
        type Error = Error;
        fn next_element_seed<T: de::DeserializeSeed<'de>>(
            &mut self,
            seed: T,
        ) -> Result<Option<T::Value>, Error> {
            self.0
                .next()
                .map(|v| seed.deserialize(Strict(v)))
                .transpose()
        }
        fn size_hint(&self) -> Option<usize> {
            Some(self.0.len())
        }
    }

    struct Map<'a> {
        entries: serde_json::map::Iter<'a>,
        value: Option<&'a Value>,
    }

    impl<'de> de::MapAccess<'de> for Map<'de> {
        type Error = Error;
        fn next_key_seed<K: de::DeserializeSeed<'de>>(
            &mut self,
            seed: K,
        ) -> Result<Option<K::Value>, Error> {
            match self.entries.next() {
                Some((k, v)) => {
                    self.value = Some(v);
                    seed.deserialize(BorrowedStrDeserializer::new(k)).map(Some)
                }
                None => Ok(None),
            }
        }
        fn next_value_seed<V: de::DeserializeSeed<'de>>(
            &mut self,
            seed: V,
        ) -> Result<V::Value, Error> {
            match self.value.take() {
                Some(v) => seed.deserialize(Strict(v)),
                None => Err(de::Error::custom("a value without its key")),
            }
        }
    }

    impl<'de> Deserializer<'de> for Strict<'de> {
        type Error = Error;

        fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
            match self.0 {
                Value::Null => visitor.visit_unit(),
                Value::Bool(b) => visitor.visit_bool(*b),
                Value::Number(n) => match (n.as_u64(), n.as_i64(), n.as_f64()) {
                    (Some(u), _, _) => visitor.visit_u64(u),
                    (_, Some(i), _) => visitor.visit_i64(i),
                    (_, _, Some(f)) => visitor.visit_f64(f),
                    _ => Err(de::Error::invalid_type(unexpected(self.0), &visitor)),
                },
                Value::String(s) => visitor.visit_borrowed_str(s),
                Value::Array(items) => visitor.visit_seq(Seq(items.iter())),
                Value::Object(map) => visitor.visit_map(Map {
                    entries: map.iter(),
                    value: None,
                }),
            }
        }

        fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
            match self.0 {
                Value::Null => visitor.visit_none(),
                _ => visitor.visit_some(self),
            }
        }

        fn deserialize_struct<V: Visitor<'de>>(
            self,
            _name: &'static str,
            _fields: &'static [&'static str],
            visitor: V,
        ) -> Result<V::Value, Error> {
            match self.0 {
                Value::Object(_) => self.deserialize_any(visitor),
                other => Err(de::Error::invalid_type(unexpected(other), &visitor)),
            }
        }

        fn deserialize_enum<V: Visitor<'de>>(
            self,
            _name: &'static str,
            _variants: &'static [&'static str],
            visitor: V,
        ) -> Result<V::Value, Error> {
            match self.0 {
                // A unit variant, by its name.
                Value::String(s) => {
                    visitor.visit_enum(IntoDeserializer::<Error>::into_deserializer(s.as_str()))
                }
                other => Err(de::Error::invalid_type(unexpected(other), &visitor)),
            }
        }

        fn deserialize_newtype_struct<V: Visitor<'de>>(
            self,
            _name: &'static str,
            visitor: V,
        ) -> Result<V::Value, Error> {
            visitor.visit_newtype_struct(self)
        }

        serde::forward_to_deserialize_any! {
            bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string
            bytes byte_buf unit unit_struct seq tuple tuple_struct map identifier
            ignored_any
        }
    }
}

/// The error serde's `message` makes at pointer `at`, rewritten so that it says what
/// the field must be and quotes no value.
fn error_at(at: String, message: &str) -> ConfigError {
    if let Some(field) = between(message, "missing field `", "`") {
        return ConfigError::new(format!("{at}/{}", escape(field)), "is required");
    }
    if let Some(rest) = message.strip_prefix("unknown field `") {
        let known = rest.split_once(", expected ").map_or("", |(_, k)| k);
        // (serde writes two names as `a` or `b`)
        let known = words(
            &known
                .strip_prefix("one of ")
                .unwrap_or(known)
                .replace("` or `", "`, `"),
        );
        return ConfigError::new(
            at,
            if known.is_empty() {
                "unknown field (none is known here)".to_string()
            } else {
                format!("unknown field (known: {known})")
            },
        );
    }
    if let Some(rest) = message.strip_prefix("unknown variant `") {
        let known = rest.split_once(", expected ").map_or("", |(_, k)| k);
        let known = words(known.strip_prefix("one of ").unwrap_or(known));
        let plural = known.contains(", ");
        return ConfigError::new(
            at,
            if plural {
                format!("must be one of {known}")
            } else {
                format!("must be {known}")
            },
        );
    }
    for prefix in ["invalid type: ", "invalid value: ", "invalid length "] {
        if let Some(rest) = message.strip_prefix(prefix) {
            if let Some((_, expected)) = rest.rsplit_once(", expected ") {
                return ConfigError::new(at, format!("must be {}", expected_words(expected)));
            }
        }
    }
    // A message of the config's own types (an `expecting`, a custom error).
    ConfigError::new(at, message)
}

fn between<'a>(text: &'a str, start: &str, end: &str) -> Option<&'a str> {
    let rest = text.strip_prefix(start)?;
    rest.split_once(end).map(|(inside, _)| inside)
}

/// serde's list of names (`` `a`, `b` `` or `` `a` or `b` ``) without the backticks.
fn words(list: &str) -> String {
    list.replace('`', "")
}

/// What serde says it expected, in the words an operator reads.
fn expected_words(expected: &str) -> String {
    let whole = |max: u64| format!("a whole number from 0 to {max}");
    match expected {
        "u64" | "usize" | "u128" => "a whole, non-negative number".to_string(),
        "u32" => whole(u64::from(u32::MAX)),
        "u16" => whole(u64::from(u16::MAX)),
        "u8" => whole(u64::from(u8::MAX)),
        "i64" | "i32" | "i16" | "i8" | "isize" | "i128" => "a whole number".to_string(),
        "f64" | "f32" => "a number".to_string(),
        "a boolean" => "true or false".to_string(),
        "a borrowed string" | "a string" => "a string".to_string(),
        "a character" => "one character".to_string(),
        "a sequence" => "an array".to_string(),
        "a map" => "an object".to_string(),
        "unit" => "null".to_string(),
        "string or map" => "a string".to_string(),
        other if other.starts_with("struct ") => "an object".to_string(),
        // An enum of names (its variants' names are strings).
        other if other.starts_with("enum ") => "a string".to_string(),
        other
            if other.starts_with("a tuple of size ")
                || other.starts_with("an array of length ") =>
        {
            other.replace("a tuple of size", "an array of length")
        }
        other => words(other),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use serde_json::json;
    use std::collections::BTreeMap;

    #[derive(Debug, Deserialize, PartialEq)]
    #[serde(deny_unknown_fields)]
    struct Binding {
        name: String,
        #[serde(default)]
        timeout_s: Option<u64>,
        #[serde(default)]
        port: Option<u16>,
        #[serde(default)]
        mode: Option<Mode>,
        #[serde(default)]
        env: BTreeMap<String, String>,
        #[serde(default, deserialize_with = "present")]
        input: Option<Value>,
    }

    #[derive(Debug, Deserialize, PartialEq)]
    #[serde(rename_all = "snake_case")]
    enum Mode {
        Work,
        Clone,
    }

    #[derive(Debug, Deserialize, PartialEq)]
    #[serde(deny_unknown_fields)]
    struct Doc {
        bindings: Vec<Binding>,
    }

    fn err(v: Value) -> ConfigError {
        parse::<Doc>(&v).unwrap_err()
    }

    #[test]
    fn each_error_names_its_pointer_and_no_value() {
        let e = err(json!({"bindings": [{"name": "a"}, {"name": "b", "timeout_s": "hunter2"}]}));
        assert_eq!(e.pointer, "/bindings/1/timeout_s");
        assert_eq!(e.reason, "must be a whole, non-negative number");
        assert_eq!(
            e.to_string(),
            "/bindings/1/timeout_s: must be a whole, non-negative number"
        );
        for (config, pointer, reason) in [
            (
                json!({"bindings": [{"name": "a", "timeout_s": -1}]}),
                "/bindings/0/timeout_s",
                "must be a whole, non-negative number",
            ),
            (
                json!({"bindings": [{"name": "a", "port": 70000}]}),
                "/bindings/0/port",
                "must be a whole number from 0 to 65535",
            ),
            (
                json!({"bindings": [{"name": "a", "mode": "lent"}]}),
                "/bindings/0/mode",
                "must be work or clone",
            ),
            (
                json!({"bindings": [{"name": "a", "mode": 3}]}),
                "/bindings/0/mode",
                "must be a string",
            ),
            (
                json!({"bindings": [{"name": "a", "env": {"A/B": 1}}]}),
                "/bindings/0/env/A~1B",
                "must be a string",
            ),
            (
                json!({"bindings": [{"name": "a", "env": []}]}),
                "/bindings/0/env",
                "must be an object",
            ),
            (json!({"bindings": [{}]}), "/bindings/0/name", "is required"),
            (json!({"bindings": [7]}), "/bindings/0", "must be an object"),
            (
                json!({"bindings": [["a", 5]]}),
                "/bindings/0",
                "must be an object",
            ),
            (json!({"bindings": {}}), "/bindings", "must be an array"),
            (
                json!({"bindings": [{"name": "a", "nmae": "secret"}]}),
                "/bindings/0/nmae",
                "unknown field (known: name, timeout_s, port, mode, env, input)",
            ),
            (
                json!({"bindings": [], "x/y": 1}),
                "/x~1y",
                "unknown field (known: bindings)",
            ),
            (json!(null), "", "must be an object"),
        ] {
            let e = err(config.clone());
            assert_eq!(
                (e.pointer.as_str(), e.reason.as_str()),
                (pointer, reason),
                "{config}"
            );
            assert!(!e.to_string().contains("hunter2") && !e.to_string().contains("secret"));
        }
    }

    #[test]
    fn a_written_null_is_present() {
        let d: Doc =
            parse(&json!({"bindings": [{"name": "a", "input": null}, {"name": "b"}]})).unwrap();
        assert_eq!(d.bindings[0].input, Some(Value::Null));
        assert_eq!(d.bindings[1].input, None);
    }

    #[test]
    fn every_field_that_does_not_read_is_reported() {
        let (b, errors) = parse_each::<Binding>(
            &json!({"name": "a", "port": 0, "timeout_s": "x", "bogus": 1, "a/b": 2}),
        );
        let pointers: Vec<&str> = errors.iter().map(|e| e.pointer.as_str()).collect();
        assert_eq!(pointers, ["/a~1b", "/bogus", "/timeout_s"]);
        assert_eq!(b.unwrap().port, Some(0));
        // A required field that does not read leaves nothing to read.
        let (b, errors) = parse_each::<Binding>(&json!({"name": 1, "port": "x"}));
        assert!(b.is_none());
        let pointers: Vec<&str> = errors.iter().map(|e| e.pointer.as_str()).collect();
        assert_eq!(pointers, ["/name", "/port"]);
        let (b, errors) = parse_each::<Binding>(&json!([]));
        assert!(b.is_none());
        assert_eq!(errors, [ConfigError::whole("must be an object")]);
    }

    #[test]
    fn pointers_escape() {
        assert_eq!(pointer(["env", "A/B~"]), "/env/A~1B~0");
        assert_eq!(pointer(Vec::<String>::new()), "");
        assert_eq!(
            ConfigError::new("/port", "x")
                .within("/bindings/0")
                .to_string(),
            "/bindings/0/port: x"
        );
        assert_eq!(ConfigError::whole("x").to_string(), "the config: x");
    }
}
