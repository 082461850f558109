//! `webhook.handle`, the pure part: find the entry, verify, take the delivery ID,
//! parse the body and build the delivery and its answer. Resolving the secret is
//! the caller's ([`crate::State`]).

use crate::config::{DeliveryIdFrom, EntryConfig, Scheme};
use crate::signature::{self, VerifyError};
use protocol::wire::{
    Delivery, HttpAnswer, IngressEvent, Payload, WebhookHandleParams, WebhookHandleResult,
    WebhookPath,
};
use serde_json::{json, Map, Value};
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::sync::Arc;

/// The family (and base Event type) of every delivery.
pub const FAMILY: &str = "webhook.delivery";
/// The payload schema every delivery is written in.
pub const SCHEMA: &str = "webhook.delivery.v1";
/// The longest delivery ID taken from a header, in bytes.
pub const MAX_DELIVERY_ID_BYTES: usize = 200;
/// The longest Event subtype, in bytes.
pub const MAX_SUBTYPE_BYTES: usize = 64;
/// How long a sender is asked to wait before retrying after a 503, in seconds.
pub const RETRY_AFTER_SECS: u32 = 5;

/// A configured webhook entry: where it is and how it is checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// The scope.
    pub scope_id: String,
    /// The entry's name.
    pub name: String,
    /// The connection holding its secret (empty for an unsigned entry).
    pub connection: String,
    /// The source its deliveries feed (`webhook/<scope>/<entry>`).
    pub source: String,
    /// The path it registers (no trailing `/`).
    pub path: String,
    /// Its checked config.
    pub config: EntryConfig,
}

impl Entry {
    /// The webhook path it registers.
    pub fn webhook_path(&self) -> WebhookPath {
        WebhookPath {
            path: self.path.clone(),
            source: self.source.clone(),
            scope_id: self.scope_id.clone(),
            entry: self.name.clone(),
        }
    }
}

/// The entry serving `path`: the longest registered path that covers it.
pub fn find<'a>(entries: &'a [Arc<Entry>], path: &str) -> Option<&'a Arc<Entry>> {
    entries
        .iter()
        .filter(|e| e.webhook_path().covers(path))
        .max_by_key(|e| e.path.len())
}

/// A plain-text answer with no deliveries.
pub fn refuse(status: u16, why: &str) -> WebhookHandleResult {
    let mut headers = BTreeMap::new();
    headers.insert(
        "content-type".to_string(),
        "text/plain; charset=utf-8".to_string(),
    );
    if status == 503 {
        headers.insert("Retry-After".to_string(), RETRY_AFTER_SECS.to_string());
    }
    if status == 405 {
        headers.insert("Allow".to_string(), "POST".to_string());
    }
    WebhookHandleResult {
        deliveries: Vec::new(),
        response: HttpAnswer {
            status,
            headers,
            body: format!("{why}\n").into_bytes(),
        },
    }
}

/// The delivery ID of a request: the configured header's value, or
/// `sha256:<hex of the body's SHA-256>`. An error is the 400 answer's text.
pub fn delivery_id(from: &DeliveryIdFrom, p: &WebhookHandleParams) -> Result<String, String> {
    match from.header() {
        None => Ok(format!(
            "sha256:{}",
            protocol::hex::encode(&Sha256::digest(&p.body))
        )),
        Some(name) => {
            let id = p
                .header(name)
                .map(str::trim)
                .filter(|v| !v.is_empty())
                .ok_or_else(|| format!("missing header {name}"))?;
            if id.len() > MAX_DELIVERY_ID_BYTES || id.chars().any(char::is_control) {
                return Err(format!(
                    "header {name} is not a delivery ID (one line of at most {MAX_DELIVERY_ID_BYTES} bytes)"
                ));
            }
            Ok(id.to_string())
        }
    }
}

/// The text of a scalar JSON value (a non-empty string, a number or a boolean);
/// `None` for null, empty strings, arrays and objects.
pub fn scalar_text(value: &Value) -> Option<String> {
    match value {
        Value::String(s) if !s.is_empty() => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        Value::Bool(b) => Some(b.to_string()),
        _ => None,
    }
}

/// An Event subtype from free text: lower-cased, every character outside
/// `[a-z0-9_]` made `_`, runs of `_` collapsed, `_` trimmed at both ends, at most
/// 64 bytes; `None` when nothing is left.
pub fn sanitize_subtype(text: &str) -> Option<String> {
    let mut out = String::new();
    for c in text.chars() {
        let c = c.to_ascii_lowercase();
        let c = if c.is_ascii_lowercase() || c.is_ascii_digit() {
            c
        } else {
            '_'
        };
        if c == '_' && (out.is_empty() || out.ends_with('_')) {
            continue;
        }
        if out.len() >= MAX_SUBTYPE_BYTES {
            break;
        }
        out.push(c);
    }
    let trimmed = out.trim_end_matches('_');
    (!trimmed.is_empty()).then(|| trimmed.to_string())
}

/// The Event type of a delivery of `entry` with this body.
pub fn event_type(entry: &EntryConfig, body: &Value) -> String {
    let subtype = entry
        .event_type_pointer
        .as_deref()
        .and_then(|p| body.pointer(p))
        .and_then(Value::as_str)
        .and_then(sanitize_subtype);
    match subtype {
        Some(s) => format!("{FAMILY}.{s}"),
        None => FAMILY.to_string(),
    }
}

/// The correlation key of a delivery of `entry`, from its correlation value.
pub fn correlation_key(entry: &Entry, value: &str) -> String {
    format!("webhook:{}/{}:{value}", entry.scope_id, entry.name)
}

/// The Event a verified delivery carries.
pub fn build_event(
    entry: &Entry,
    delivery_id: &str,
    p: &WebhookHandleParams,
    body: Value,
) -> IngressEvent {
    let mut headers = Map::new();
    let id_header = entry.config.delivery_id.header();
    for name in ["content-type", "user-agent"].into_iter().chain(id_header) {
        if let Some(v) = p.header(name) {
            headers.insert(name.to_ascii_lowercase(), Value::String(v.to_string()));
        }
    }
    let correlation = entry
        .config
        .correlate
        .as_deref()
        .and_then(|ptr| body.pointer(ptr))
        .and_then(scalar_text);
    let event_type = event_type(&entry.config, &body);
    let keys = correlation
        .iter()
        .map(|c| correlation_key(entry, c))
        .collect();
    let mut data = Map::new();
    data.insert("scope".into(), json!(entry.scope_id));
    data.insert("entry".into(), json!(entry.name));
    data.insert("delivery_id".into(), json!(delivery_id));
    data.insert("headers".into(), Value::Object(headers));
    data.insert("body".into(), body);
    if let Some(c) = correlation {
        data.insert("correlation".into(), Value::String(c));
    }
    IngressEvent {
        event_type,
        payload: Payload {
            schema: SCHEMA.to_string(),
            data: Value::Object(data),
        },
        keys,
        // Left to the host: a time taken here would differ on a redelivery, and
        // the host binds a delivery ID to the exact envelope it first accepted.
        occurred_at: String::new(),
        snapshot: false,
    }
}

/// The 200 answer of an accepted delivery: `{"ok":true,"delivery":"<id>"}`.
pub fn accepted_answer(delivery_id: &str) -> HttpAnswer {
    let mut headers = BTreeMap::new();
    headers.insert("content-type".to_string(), "application/json".to_string());
    HttpAnswer {
        status: 200,
        headers,
        body: format!("{{\"ok\":true,\"delivery\":{}}}", json!(delivery_id)).into_bytes(),
    }
}

/// Handles a request for `entry` (already found, POST, and for an unsigned entry
/// from loopback) with its resolved secret (ignored by scheme `none`), at unix
/// time `now`: verify, take the delivery ID, parse the body, build the delivery.
pub fn deliver(
    entry: &Entry,
    p: &WebhookHandleParams,
    secret: &str,
    now: i64,
) -> WebhookHandleResult {
    match signature::verify(&entry.config.scheme, secret, p, now) {
        Ok(()) => {}
        Err(VerifyError::Refused(why)) => return refuse(401, &why),
        Err(VerifyError::Secret(why)) => {
            eprintln!(
                "webhook: scope {}, entry {}: the secret of connection {} is not usable: {why}",
                entry.scope_id, entry.name, entry.connection
            );
            return refuse(
                500,
                "the webhook's secret is not usable; the operator must fix it",
            );
        }
    }
    let id = match delivery_id(&entry.config.delivery_id, p) {
        Ok(id) => id,
        Err(why) => return refuse(400, &why),
    };
    let body: Value = match serde_json::from_slice(&p.body) {
        Ok(v) => v,
        Err(e) => return refuse(400, &format!("the body is not JSON: {e}")),
    };
    let event = build_event(entry, &id, p, body);
    WebhookHandleResult {
        deliveries: vec![Delivery {
            source: entry.source.clone(),
            delivery_id: id.clone(),
            body: None,
            events: vec![event],
        }],
        response: accepted_answer(&id),
    }
}

/// The answer before the secret is needed: 404 without an entry, 405 for a method
/// other than POST, 403 for an unsigned entry from anywhere but loopback. `Ok` with
/// the entry otherwise.
pub fn admit<'a>(
    entries: &'a [Arc<Entry>],
    p: &WebhookHandleParams,
) -> Result<&'a Arc<Entry>, WebhookHandleResult> {
    let Some(entry) = find(entries, &p.path) else {
        return Err(refuse(
            404,
            &format!("no webhook is registered at {}", p.path),
        ));
    };
    if !p.method.eq_ignore_ascii_case("POST") {
        return Err(refuse(
            405,
            &format!("{} is a webhook path: POST only", entry.path),
        ));
    }
    if entry.config.scheme == Scheme::None && !signature::is_loopback(&p.remote_addr) {
        return Err(refuse(
            403,
            "this webhook takes unsigned deliveries from loopback only",
        ));
    }
    Ok(entry)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::parse_entry_config;
    use hmac::{Hmac, Mac};

    fn entry(scope: &str, name: &str, path: &str, config: Value) -> Arc<Entry> {
        Arc::new(Entry {
            scope_id: scope.into(),
            name: name.into(),
            connection: "hooks".into(),
            source: format!("webhook/{scope}/{name}"),
            path: path.into(),
            config: parse_entry_config(&config).expect("valid"),
        })
    }

    fn post(path: &str, headers: &[(&str, &str)], body: &[u8]) -> WebhookHandleParams {
        WebhookHandleParams {
            method: "POST".into(),
            path: path.into(),
            headers: headers
                .iter()
                .map(|(k, v)| (k.to_ascii_lowercase(), vec![v.to_string()]))
                .collect(),
            body: body.to_vec(),
            remote_addr: "10.0.0.1:4000".into(),
            ..Default::default()
        }
    }

    fn sign(secret: &str, body: &[u8]) -> String {
        let mut m = Hmac::<Sha256>::new_from_slice(secret.as_bytes()).expect("any key");
        m.update(body);
        format!(
            "sha256={}",
            protocol::hex::encode(&m.finalize().into_bytes())
        )
    }

    fn text(r: &WebhookHandleResult) -> String {
        String::from_utf8_lossy(&r.response.body).into_owned()
    }

    #[test]
    fn the_longest_covering_path_wins() {
        let entries = vec![
            entry("s", "a", "/hooks", json!({})),
            entry("s", "b", "/hooks/ci", json!({})),
            entry("s", "c", "/hooks/ci/deep", json!({})),
        ];
        let name = |path: &str| find(&entries, path).map(|e| e.name.clone());
        assert_eq!(name("/hooks").as_deref(), Some("a"));
        assert_eq!(name("/hooks/other").as_deref(), Some("a"));
        assert_eq!(name("/hooks/ci").as_deref(), Some("b"));
        assert_eq!(name("/hooks/ci/").as_deref(), Some("b"));
        assert_eq!(name("/hooks/ci/x/y").as_deref(), Some("b"));
        assert_eq!(name("/hooks/ci/deep/1").as_deref(), Some("c"));
        assert_eq!(name("/hooks/cix").as_deref(), Some("a"));
        assert_eq!(name("/hooksx"), None);
        assert_eq!(name("/"), None);
    }

    #[test]
    fn delivery_ids_come_from_the_header_or_the_body_hash() {
        let body_hash = DeliveryIdFrom::BodyHash;
        let p = post("/x", &[], b"abc");
        // SHA-256("abc"), FIPS 180-2 appendix B.1.
        assert_eq!(
            delivery_id(&body_hash, &p).as_deref(),
            Ok("sha256:ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad")
        );
        let header = DeliveryIdFrom::Header("X-Delivery-Id".into());
        let p = post("/x", &[("X-Delivery-Id", "d-42")], b"abc");
        assert_eq!(delivery_id(&header, &p).as_deref(), Ok("d-42"));
        let p = post("/x", &[], b"abc");
        assert_eq!(
            delivery_id(&header, &p),
            Err("missing header X-Delivery-Id".to_string())
        );
        let p = post("/x", &[("X-Delivery-Id", "  ")], b"abc");
        assert!(delivery_id(&header, &p).is_err());
        let long = "x".repeat(201);
        let p = post("/x", &[("X-Delivery-Id", &long)], b"abc");
        assert!(delivery_id(&header, &p).is_err());
    }

    #[test]
    fn subtypes_are_sanitized() {
        assert_eq!(sanitize_subtype("push").as_deref(), Some("push"));
        assert_eq!(sanitize_subtype("Push Hook").as_deref(), Some("push_hook"));
        assert_eq!(
            sanitize_subtype("pull_request.opened").as_deref(),
            Some("pull_request_opened")
        );
        assert_eq!(sanitize_subtype("--a..b--").as_deref(), Some("a_b"));
        assert_eq!(sanitize_subtype("été").as_deref(), Some("t"));
        assert_eq!(sanitize_subtype("...").as_deref(), None);
        assert_eq!(sanitize_subtype("").as_deref(), None);
        assert_eq!(
            sanitize_subtype(&"a".repeat(100)).map(|s| s.len()),
            Some(64)
        );
    }

    #[test]
    fn json_pointers_pick_correlation_and_subtype() {
        let e = entry(
            "s",
            "ci",
            "/w",
            json!({"correlate": "/pull_request/number", "event_type_pointer": "/a~1b/0"}),
        );
        let body = json!({"pull_request": {"number": 12}, "a/b": ["Opened"]});
        let p = post(
            "/w",
            &[("Content-Type", "application/json"), ("X-Other", "x")],
            b"{}",
        );
        let ev = build_event(&e, "d1", &p, body.clone());
        assert_eq!(ev.event_type, "webhook.delivery.opened");
        assert_eq!(ev.keys, vec!["webhook:s/ci:12".to_string()]);
        assert_eq!(ev.payload.schema, "webhook.delivery.v1");
        assert_eq!(
            ev.payload.data,
            json!({
                "scope": "s", "entry": "ci", "delivery_id": "d1",
                "headers": {"content-type": "application/json"},
                "body": body, "correlation": "12",
            })
        );
        // A pointer to nothing, or to an object, yields no key and no subtype.
        let ev = build_event(
            &e,
            "d1",
            &p,
            json!({"pull_request": {"number": {"x": 1}}, "a/b": [3]}),
        );
        assert_eq!(ev.event_type, "webhook.delivery");
        assert!(ev.keys.is_empty());
        assert!(ev.payload.data.get("correlation").is_none());
        assert_eq!(scalar_text(&json!("x")).as_deref(), Some("x"));
        assert_eq!(scalar_text(&json!(true)).as_deref(), Some("true"));
        assert_eq!(scalar_text(&json!(null)), None);
        assert_eq!(scalar_text(&json!("")), None);
    }

    #[test]
    fn a_signed_delivery_is_accepted_and_answered() {
        let e = entry(
            "s",
            "ci",
            "/w",
            json!({"delivery_id": {"header": "X-Delivery-Id"}, "correlate": "/ref"}),
        );
        let body = br#"{"ref":"main"}"#;
        let sig = sign("s3cret", body);
        let p = post(
            "/w",
            &[
                ("X-Signature-256", &sig),
                ("X-Delivery-Id", "abc"),
                ("User-Agent", "curl/8"),
            ],
            body,
        );
        let r = deliver(&e, &p, "s3cret", 0);
        assert_eq!(r.response.status, 200, "{}", text(&r));
        assert_eq!(text(&r), r#"{"ok":true,"delivery":"abc"}"#);
        assert_eq!(
            r.response.headers.get("content-type").map(String::as_str),
            Some("application/json")
        );
        assert_eq!(r.deliveries.len(), 1);
        let d = &r.deliveries[0];
        assert_eq!(
            (d.source.as_str(), d.delivery_id.as_str()),
            ("webhook/s/ci", "abc")
        );
        assert_eq!(d.body, None);
        assert_eq!(d.events[0].keys, vec!["webhook:s/ci:main".to_string()]);
        assert_eq!(
            d.events[0].payload.data["headers"],
            json!({"user-agent": "curl/8", "x-delivery-id": "abc"})
        );
    }

    #[test]
    fn refusals_carry_no_deliveries() {
        let e = entry(
            "s",
            "ci",
            "/w",
            json!({"delivery_id": {"header": "X-Delivery-Id"}}),
        );
        let good = sign("s3cret", b"{}");
        let cases: Vec<(WebhookHandleParams, u16, &str)> = vec![
            (
                post(
                    "/w",
                    &[
                        ("X-Signature-256", &sign("other", b"{}")),
                        ("X-Delivery-Id", "1"),
                    ],
                    b"{}",
                ),
                401,
                "signature does not match",
            ),
            (
                post("/w", &[("X-Delivery-Id", "1")], b"{}"),
                401,
                "missing header X-Signature-256",
            ),
            (
                post("/w", &[("X-Signature-256", &good)], b"{}"),
                400,
                "missing header X-Delivery-Id",
            ),
            (
                post(
                    "/w",
                    &[
                        ("X-Signature-256", &sign("s3cret", b"{")),
                        ("X-Delivery-Id", "1"),
                    ],
                    b"{",
                ),
                400,
                "the body is not JSON",
            ),
        ];
        for (p, status, why) in cases {
            let r = deliver(&e, &p, "s3cret", 0);
            assert_eq!(r.response.status, status, "{}", text(&r));
            assert!(text(&r).starts_with(why), "{}", text(&r));
            assert!(r.deliveries.is_empty());
        }
        let r = deliver(&e, &post("/w", &[], b"{}"), "", 0);
        assert_eq!(r.response.status, 500);
        assert!(r.deliveries.is_empty());
    }

    #[test]
    fn admission_answers_404_405_and_403() {
        let entries = vec![
            entry("s", "signed", "/w/signed", json!({})),
            entry(
                "s",
                "local",
                "/w/local",
                json!({"signature": {"scheme": "none"}, "allow_unsigned": "loopback"}),
            ),
        ];
        let status = |p: &WebhookHandleParams| match admit(&entries, p) {
            Ok(e) => Ok(e.name.clone()),
            Err(r) => {
                assert!(r.deliveries.is_empty());
                Err(r.response.status)
            }
        };
        assert_eq!(status(&post("/elsewhere", &[], b"")), Err(404));
        let mut get = post("/w/signed", &[], b"");
        get.method = "GET".into();
        assert_eq!(status(&get), Err(405));
        assert_eq!(
            status(&post("/w/signed", &[], b"")).as_deref(),
            Ok("signed")
        );
        // Signed entries take any sender; unsigned ones only loopback.
        assert_eq!(status(&post("/w/local", &[], b"")), Err(403));
        let mut local = post("/w/local", &[], b"{}");
        local.remote_addr = "127.0.0.1:5555".into();
        assert_eq!(status(&local).as_deref(), Ok("local"));
        let r = deliver(&entries[1], &local, "", 0);
        assert_eq!(r.response.status, 200);
        assert!(r.deliveries[0].delivery_id.starts_with("sha256:"));
    }

    #[test]
    fn a_503_asks_for_a_retry() {
        let r = refuse(503, "no secret");
        assert_eq!(
            r.response.headers.get("Retry-After").map(String::as_str),
            Some("5")
        );
        assert!(r.deliveries.is_empty());
    }
}
