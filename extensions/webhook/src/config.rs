//! Entry and route configs: read by strict `Deserialize` types
//! ([`sdk::config::parse`]) and checked, so every error names its field as a JSON
//! pointer into the config (`/signature/scheme`).

use serde::Deserialize;
use serde_json::Value;

/// The longest webhook path an entry may register, in bytes.
pub const MAX_PATH_BYTES: usize = 256;
/// The signature header of scheme `hmac-sha256` when the config names none.
pub const DEFAULT_SIGNATURE_HEADER: &str = "X-Signature-256";
/// The signature format of scheme `hmac-sha256` when the config names none.
pub const DEFAULT_FORMAT: &str = "sha256={hex}";
/// The only value `allow_unsigned` takes.
pub const LOOPBACK: &str = "loopback";

/// Paths ingressd answers itself, before any webhook route.
const RESERVED_PATHS: &[&str] = &["/healthz", "/metrics"];

pub use sdk::config::ConfigError;

/// How a signature's bytes are written in its header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Encoding {
    /// Hexadecimal, either case.
    Hex,
    /// Standard base64 (padding optional).
    Base64,
}

/// A signature header's format: literal text around one encoded MAC
/// (`sha256={hex}`, `{hex}`, `{base64}`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Format {
    /// The text before the MAC.
    pub prefix: String,
    /// How the MAC is written.
    pub encoding: Encoding,
    /// The text after the MAC.
    pub suffix: String,
    /// The format as configured, for messages.
    pub text: String,
}

impl Format {
    /// Parses a format: literal text around exactly one `{hex}` or `{base64}`.
    pub fn parse(text: &str) -> Option<Format> {
        let mut found = None;
        for (placeholder, encoding) in [("{hex}", Encoding::Hex), ("{base64}", Encoding::Base64)] {
            if let Some(at) = text.find(placeholder) {
                if found.is_some() {
                    return None;
                }
                found = Some((at, placeholder.len(), encoding));
            }
        }
        let (at, len, encoding) = found?;
        let prefix = text.get(..at)?;
        let suffix = text.get(at + len..)?;
        if [prefix, suffix]
            .iter()
            .any(|t| t.contains(['{', '}']) || t.chars().any(char::is_control))
        {
            return None;
        }
        Some(Format {
            prefix: prefix.to_string(),
            encoding,
            suffix: suffix.to_string(),
            text: text.to_string(),
        })
    }

    /// The MAC bytes a header value carries in this format; `None` when the value is
    /// not in it.
    pub fn decode(&self, value: &str) -> Option<Vec<u8>> {
        let inner = value
            .trim()
            .strip_prefix(self.prefix.as_str())?
            .strip_suffix(self.suffix.as_str())?;
        match self.encoding {
            Encoding::Hex => protocol::hex::decode(inner).filter(|b| !b.is_empty()),
            Encoding::Base64 => decode_base64(inner),
        }
    }
}

/// Decodes standard base64, with or without its padding.
pub fn decode_base64(text: &str) -> Option<Vec<u8>> {
    let missing = (4 - text.len() % 4) % 4;
    if text.is_empty() || (missing > 0 && text.contains('=')) {
        return None;
    }
    let mut padded = text.to_string();
    padded.extend(std::iter::repeat_n('=', missing));
    protocol::b64::decode(&padded).ok()
}

/// How deliveries of an entry are signed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Scheme {
    /// HMAC-SHA256 of the body (or of `<timestamp>.<body>`) in one header.
    HmacSha256 {
        /// The header carrying the signature, as configured (looked up in any case).
        header: String,
        /// How the header writes it.
        format: Format,
        /// A header whose unix time is signed with the body and must be recent.
        timestamp_header: Option<String>,
    },
    /// The Standard Webhooks scheme (`webhook-id`, `webhook-timestamp`,
    /// `webhook-signature`).
    StandardWebhooks,
    /// Unsigned: accepted from loopback only.
    None,
}

impl Scheme {
    /// The scheme's config name.
    pub fn name(&self) -> &'static str {
        match self {
            Scheme::HmacSha256 { .. } => "hmac-sha256",
            Scheme::StandardWebhooks => "standard-webhooks",
            Scheme::None => "none",
        }
    }

    /// True for a scheme that needs the connection's secret.
    pub fn is_signed(&self) -> bool {
        !matches!(self, Scheme::None)
    }
}

/// Where an entry's delivery ID comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DeliveryIdFrom {
    /// `sha256:<hex of sha256(body)>`.
    BodyHash,
    /// This header (as configured; looked up in any case).
    Header(String),
    /// The Standard Webhooks `webhook-id` header.
    WebhookId,
}

impl DeliveryIdFrom {
    /// The header the ID comes from, if any.
    pub fn header(&self) -> Option<&str> {
        match self {
            DeliveryIdFrom::BodyHash => None,
            DeliveryIdFrom::Header(h) => Some(h),
            DeliveryIdFrom::WebhookId => Some("webhook-id"),
        }
    }
}

/// A webhook entry's config, checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EntryConfig {
    /// The path it registers, when the config names one (else the default).
    pub path: Option<String>,
    /// How deliveries are signed.
    pub scheme: Scheme,
    /// Where the delivery ID comes from.
    pub delivery_id: DeliveryIdFrom,
    /// A JSON pointer into the body whose scalar value correlates deliveries.
    pub correlate: Option<String>,
    /// A JSON pointer into the body whose string value is the Event subtype.
    pub event_type_pointer: Option<String>,
}

/// A route's config (handler `webhook`), checked.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RouteConfig {
    /// Only deliveries of this entry.
    pub entry: Option<String>,
    /// A JSON pointer into the body whose value titles the Work.
    pub title_pointer: Option<String>,
}

/// An entry's config as written (strict).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawEntry {
    #[serde(default)]
    path: Option<String>,
    #[serde(default)]
    signature: Option<RawSignature>,
    #[serde(default)]
    allow_unsigned: Option<String>,
    #[serde(default)]
    delivery_id: Option<RawDeliveryId>,
    #[serde(default)]
    correlate: Option<String>,
    #[serde(default)]
    event_type_pointer: Option<String>,
}

/// `signature` as written (strict).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSignature {
    #[serde(default)]
    scheme: Option<String>,
    #[serde(default)]
    header: Option<String>,
    #[serde(default)]
    format: Option<String>,
    #[serde(default)]
    timestamp_header: Option<String>,
}

/// `delivery_id` as written (strict).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawDeliveryId {
    #[serde(default)]
    header: Option<String>,
}

/// A route's config as written (strict).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRoute {
    #[serde(default)]
    entry: Option<String>,
    #[serde(default)]
    title_pointer: Option<String>,
}

/// Reads a config that is an object or `null` (read as `{}`).
fn read<T: Default + serde::de::DeserializeOwned>(config: &Value) -> Result<T, ConfigError> {
    match config {
        Value::Null => Ok(T::default()),
        Value::Object(_) => sdk::config::parse(config),
        _ => Err(ConfigError::whole("must be an object")),
    }
}

/// Checks a header name: an HTTP token.
fn check_header(field: &str, name: &str) -> Result<(), ConfigError> {
    let token = |c: char| c.is_ascii_alphanumeric() || "!#$%&'*+-.^_`|~".contains(c);
    if name.is_empty() || name.len() > 100 || !name.chars().all(token) {
        return Err(ConfigError::new(
            field,
            format!("{name:?} is not an HTTP header name"),
        ));
    }
    Ok(())
}

/// Checks a JSON pointer (RFC 6901): empty pointers (the whole body) are refused.
pub fn check_pointer(field: &str, pointer: &str) -> Result<(), ConfigError> {
    if !pointer.starts_with('/') {
        return Err(ConfigError::new(
            field,
            format!(
                "{pointer:?} is not a JSON pointer (it starts with /, as /pull_request/number)"
            ),
        ));
    }
    let mut chars = pointer.chars();
    while let Some(c) = chars.next() {
        if c == '~' && !matches!(chars.next(), Some('0' | '1')) {
            return Err(ConfigError::new(
                field,
                format!("{pointer:?} is not a JSON pointer (~ must be followed by 0 or 1)"),
            ));
        }
    }
    Ok(())
}

/// Checks a webhook path: starts with `/`, at most 256 bytes, one line without
/// whitespace, no `?`, `#`, `..` or empty segment, not `/` itself nor a path ingressd
/// answers itself. Answers it without a trailing `/`.
pub fn check_path(path: &str) -> Result<String, String> {
    if !path.starts_with('/') {
        return Err(format!("{path:?} does not start with /"));
    }
    if path.len() > MAX_PATH_BYTES {
        return Err(format!(
            "{} bytes, over the limit of {MAX_PATH_BYTES}",
            path.len()
        ));
    }
    if path.chars().any(|c| c.is_control() || c.is_whitespace()) {
        return Err(format!(
            "{path:?} contains whitespace or control characters"
        ));
    }
    if path.contains(['?', '#']) {
        return Err(format!("{path:?} contains ? or #"));
    }
    if path.contains("..") {
        return Err(format!("{path:?} contains .."));
    }
    let trimmed = path.trim_end_matches('/');
    if trimmed.is_empty() {
        return Err("/ alone would take every webhook: name a path beneath it".into());
    }
    if trimmed.contains("//") {
        return Err(format!("{path:?} has an empty segment"));
    }
    if RESERVED_PATHS.contains(&trimmed) {
        return Err(format!("{trimmed} is answered by ingressd itself"));
    }
    Ok(trimmed.to_string())
}

/// Parses a webhook entry's config. Cross-field rules: `standard-webhooks` takes
/// no `header`, `format`, `timestamp_header` or `delivery_id`; `none` takes no
/// `header`, `format` or `timestamp_header` and needs `allow_unsigned: loopback`,
/// which no signed scheme takes.
pub fn parse_entry_config(config: &Value) -> Result<EntryConfig, ConfigError> {
    let raw: RawEntry = read(config)?;
    let path = match raw.path {
        Some(p) => Some(check_path(&p).map_err(|why| ConfigError::new("/path", why))?),
        None => None,
    };
    let sig = raw.signature.unwrap_or_default();
    let (scheme_name, header, format, timestamp_header) =
        (sig.scheme, sig.header, sig.format, sig.timestamp_header);
    let scheme = match scheme_name.as_deref().unwrap_or("hmac-sha256") {
        "hmac-sha256" => {
            let header = header.unwrap_or_else(|| DEFAULT_SIGNATURE_HEADER.to_string());
            check_header("/signature/header", &header)?;
            let text = format.unwrap_or_else(|| DEFAULT_FORMAT.to_string());
            let format = Format::parse(&text).ok_or_else(|| {
                ConfigError::new(
                    "/signature/format",
                    format!(
                        "{text:?} must contain {{hex}} or {{base64}} once (sha256={{hex}}, {{hex}}, {{base64}})"
                    ),
                )
            })?;
            if let Some(t) = &timestamp_header {
                check_header("/signature/timestamp_header", t)?;
            }
            Scheme::HmacSha256 {
                header,
                format,
                timestamp_header,
            }
        }
        other @ ("standard-webhooks" | "none") => {
            for (key, set) in [
                ("header", header.is_some()),
                ("format", format.is_some()),
                ("timestamp_header", timestamp_header.is_some()),
            ] {
                if set {
                    return Err(ConfigError::new(
                        format!("/signature/{key}"),
                        format!("does not apply to scheme {other}"),
                    ));
                }
            }
            if other == "none" {
                Scheme::None
            } else {
                Scheme::StandardWebhooks
            }
        }
        other => {
            return Err(ConfigError::new(
                "/signature/scheme",
                format!("{other:?} is not hmac-sha256, standard-webhooks or none"),
            ))
        }
    };

    match (raw.allow_unsigned, &scheme) {
        (Some(v), _) if v != LOOPBACK => {
            return Err(ConfigError::new(
                "/allow_unsigned",
                format!("{v:?} is not loopback, the only value it takes"),
            ))
        }
        (Some(_), s) if s.is_signed() => {
            return Err(ConfigError::new(
                "/allow_unsigned",
                format!(
                    "applies to signature scheme none only, not {}",
                    s.name()
                ),
            ))
        }
        (None, Scheme::None) => {
            return Err(ConfigError::new(
                "/allow_unsigned",
                "signature scheme none needs allow_unsigned: loopback (unsigned deliveries are taken from loopback only)",
            ))
        }
        _ => {}
    }

    let delivery_id = match raw.delivery_id {
        Some(_) if scheme == Scheme::StandardWebhooks => {
            return Err(ConfigError::new(
                "/delivery_id",
                "scheme standard-webhooks takes the delivery ID from webhook-id",
            ));
        }
        Some(RawDeliveryId { header: Some(h) }) => {
            check_header("/delivery_id/header", &h)?;
            DeliveryIdFrom::Header(h)
        }
        Some(RawDeliveryId { header: None }) => DeliveryIdFrom::BodyHash,
        None if scheme == Scheme::StandardWebhooks => DeliveryIdFrom::WebhookId,
        None => DeliveryIdFrom::BodyHash,
    };

    if let Some(p) = &raw.correlate {
        check_pointer("/correlate", p)?;
    }
    if let Some(p) = &raw.event_type_pointer {
        check_pointer("/event_type_pointer", p)?;
    }
    let (correlate, event_type_pointer) = (raw.correlate, raw.event_type_pointer);

    Ok(EntryConfig {
        path,
        scheme,
        delivery_id,
        correlate,
        event_type_pointer,
    })
}

/// Parses a route's config (handler `webhook`): `entry` and `title_pointer`.
pub fn parse_route_config(config: &Value) -> Result<RouteConfig, ConfigError> {
    let RawRoute {
        entry,
        title_pointer,
    } = read(config)?;
    if entry.as_deref() == Some("") {
        return Err(ConfigError::new("/entry", "is empty"));
    }
    if let Some(p) = &title_pointer {
        check_pointer("/title_pointer", p)?;
    }
    Ok(RouteConfig {
        entry,
        title_pointer,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn err(config: Value) -> ConfigError {
        match parse_entry_config(&config) {
            Ok(c) => panic!("{config} parsed as {c:?}"),
            Err(e) => e,
        }
    }

    #[test]
    fn an_empty_config_is_hmac_sha256_in_x_signature_256() {
        for config in [Value::Null, json!({})] {
            let c = parse_entry_config(&config).expect("valid");
            assert_eq!(c.path, None);
            match &c.scheme {
                Scheme::HmacSha256 {
                    header,
                    format,
                    timestamp_header,
                } => {
                    assert_eq!(header, "X-Signature-256");
                    assert_eq!(format.prefix, "sha256=");
                    assert_eq!(format.encoding, Encoding::Hex);
                    assert_eq!(format.suffix, "");
                    assert_eq!(*timestamp_header, None);
                }
                other => panic!("{other:?}"),
            }
            assert_eq!(c.delivery_id, DeliveryIdFrom::BodyHash);
        }
    }

    #[test]
    fn a_full_config_parses() {
        let c = parse_entry_config(&json!({
            "path": "/hooks/ci/",
            "signature": {"scheme": "hmac-sha256", "header": "X-Hub-Signature", "format": "{base64}", "timestamp_header": "X-Timestamp"},
            "delivery_id": {"header": "X-Delivery"},
            "correlate": "/pull_request/number",
            "event_type_pointer": "/action",
        }))
        .expect("valid");
        assert_eq!(c.path.as_deref(), Some("/hooks/ci"));
        assert_eq!(c.delivery_id, DeliveryIdFrom::Header("X-Delivery".into()));
        assert_eq!(c.correlate.as_deref(), Some("/pull_request/number"));
        assert_eq!(c.event_type_pointer.as_deref(), Some("/action"));
        let Scheme::HmacSha256 {
            format,
            timestamp_header,
            ..
        } = &c.scheme
        else {
            panic!("{:?}", c.scheme)
        };
        assert_eq!(format.encoding, Encoding::Base64);
        assert_eq!(timestamp_header.as_deref(), Some("X-Timestamp"));

        let sw = parse_entry_config(&json!({"signature": {"scheme": "standard-webhooks"}}))
            .expect("valid");
        assert_eq!(sw.scheme, Scheme::StandardWebhooks);
        assert_eq!(sw.delivery_id, DeliveryIdFrom::WebhookId);

        let none = parse_entry_config(
            &json!({"signature": {"scheme": "none"}, "allow_unsigned": "loopback"}),
        )
        .expect("valid");
        assert_eq!(none.scheme, Scheme::None);
    }

    #[test]
    fn errors_name_the_field() {
        let cases = [
            (json!([]), ""),
            (json!({"paht": "/x"}), "/paht"),
            (json!({"path": 3}), "/path"),
            (json!({"path": "x"}), "/path"),
            (json!({"path": "/a/../b"}), "/path"),
            (json!({"path": "/a?b"}), "/path"),
            (json!({"path": "/a#b"}), "/path"),
            (json!({"path": "/"}), "/path"),
            (json!({"path": "/healthz"}), "/path"),
            (json!({"path": format!("/{}", "a".repeat(256))}), "/path"),
            (json!({"signature": "hmac"}), "/signature"),
            (json!({"signature": {"scheme": "md5"}}), "/signature/scheme"),
            (json!({"signature": {"sheme": "none"}}), "/signature/sheme"),
            (
                json!({"signature": {"header": "bad header"}}),
                "/signature/header",
            ),
            (
                json!({"signature": {"format": "sha256=hex"}}),
                "/signature/format",
            ),
            (
                json!({"signature": {"format": "{hex}{base64}"}}),
                "/signature/format",
            ),
            (
                json!({"signature": {"timestamp_header": ""}}),
                "/signature/timestamp_header",
            ),
            (
                json!({"signature": {"scheme": "standard-webhooks", "header": "X"}}),
                "/signature/header",
            ),
            (
                json!({"signature": {"scheme": "none", "format": "{hex}"}, "allow_unsigned": "loopback"}),
                "/signature/format",
            ),
            (json!({"signature": {"scheme": "none"}}), "/allow_unsigned"),
            (
                json!({"signature": {"scheme": "none"}, "allow_unsigned": "anywhere"}),
                "/allow_unsigned",
            ),
            (json!({"allow_unsigned": "loopback"}), "/allow_unsigned"),
            (
                json!({"signature": {"scheme": "standard-webhooks"}, "delivery_id": {"header": "X"}}),
                "/delivery_id",
            ),
            (
                json!({"delivery_id": {"header": ""}}),
                "/delivery_id/header",
            ),
            (json!({"delivery_id": {"hdr": "X"}}), "/delivery_id/hdr"),
            (json!({"correlate": "pull_request.number"}), "/correlate"),
            (json!({"event_type_pointer": "/a~2"}), "/event_type_pointer"),
            (json!({"a/b": 1}), "/a~1b"),
        ];
        for (config, field) in cases {
            let e = err(config.clone());
            assert_eq!(e.pointer, field, "{config}: {e}");
            assert!(
                e.to_string().starts_with(if field.is_empty() {
                    "the config"
                } else {
                    field
                }),
                "{e}"
            );
        }
    }

    #[test]
    fn reasons_say_what_a_field_must_be() {
        for (config, text) in [
            (json!({"paht": "/x"}), "/paht: unknown field (known: path, signature, allow_unsigned, delivery_id, correlate, event_type_pointer)"),
            (json!({"path": 3}), "/path: must be a string"),
            (json!({"signature": "hmac"}), "/signature: must be an object"),
            (json!({"signature": {"sheme": "none"}}), "/signature/sheme: unknown field (known: scheme, header, format, timestamp_header)"),
            (json!({"delivery_id": {"hdr": "X"}}), "/delivery_id/hdr: unknown field (known: header)"),
            (json!([]), "the config: must be an object"),
        ] {
            assert_eq!(err(config.clone()).to_string(), text, "{config}");
        }
    }

    #[test]
    fn formats_decode_what_they_describe() {
        let f = Format::parse("sha256={hex}").expect("valid");
        assert_eq!(f.decode("sha256=00ff10"), Some(vec![0, 255, 16]));
        assert_eq!(f.decode("sha256=00FF10"), Some(vec![0, 255, 16]));
        assert_eq!(f.decode("sha1=00ff10"), None);
        assert_eq!(f.decode("sha256=0ff10"), None);
        assert_eq!(f.decode("sha256=zz"), None);
        let b = Format::parse("{base64}").expect("valid");
        assert_eq!(b.decode("AP8Q"), Some(vec![0, 255, 16]));
        assert_eq!(b.decode("AP8="), Some(vec![0, 255]));
        assert_eq!(b.decode("AP8"), Some(vec![0, 255]));
        assert_eq!(b.decode("A=P8"), None);
        let v = Format::parse("v1={hex};").expect("valid");
        assert_eq!(v.decode("v1=ab;"), Some(vec![0xab]));
        assert!(Format::parse("{hex}{hex}").is_none());
        assert!(Format::parse("{hex}{base64}").is_none());
        assert!(Format::parse("plain").is_none());
        assert_eq!(protocol::hex::encode(&[0, 255, 16]), "00ff10");
    }

    #[test]
    fn route_configs_parse_and_name_their_errors() {
        assert_eq!(
            parse_route_config(&Value::Null).expect("valid"),
            RouteConfig::default()
        );
        let r =
            parse_route_config(&json!({"entry": "ci", "title_pointer": "/head_commit/message"}))
                .expect("valid");
        assert_eq!(r.entry.as_deref(), Some("ci"));
        assert_eq!(r.title_pointer.as_deref(), Some("/head_commit/message"));
        for (config, field) in [
            (json!({"entry": 1}), "/entry"),
            (json!({"entry": ""}), "/entry"),
            (json!({"title_pointer": "title"}), "/title_pointer"),
            (json!({"kind": "x"}), "/kind"),
            (json!("x"), ""),
        ] {
            let e = parse_route_config(&config).expect_err("invalid");
            assert_eq!(e.pointer, field, "{config}: {e}");
        }
    }
}
