//! Signature verification (constant time, through `hmac`'s `verify_slice`), the
//! timestamp window and the loopback rule.

use crate::config::{decode_base64, Scheme};
use hmac::{Hmac, Mac};
use protocol::wire::WebhookHandleParams;
use sha2::Sha256;
use std::net::{IpAddr, SocketAddr};

type HmacSha256 = Hmac<Sha256>;

/// How far a signed timestamp may be from now, either way, in seconds.
pub const WINDOW_SECS: i64 = 300;

/// The Standard Webhooks headers.
pub const WEBHOOK_ID: &str = "webhook-id";
/// The Standard Webhooks timestamp header.
pub const WEBHOOK_TIMESTAMP: &str = "webhook-timestamp";
/// The Standard Webhooks signature header.
pub const WEBHOOK_SIGNATURE: &str = "webhook-signature";

/// Why a delivery was not verified.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum VerifyError {
    /// The request is not signed as it must be (answered 401 with this text).
    Refused(String),
    /// The configured secret cannot key the MAC (answered 500; the operator's to fix).
    Secret(String),
}

fn refused(why: impl Into<String>) -> VerifyError {
    VerifyError::Refused(why.into())
}

/// The HMAC key of `secret` under `scheme`: for `standard-webhooks`, a `whsec_`
/// secret is the base64 after the prefix and any other is its raw bytes; for
/// `hmac-sha256` always the raw bytes. An empty key is refused.
pub fn key_of(scheme: &Scheme, secret: &str) -> Result<Vec<u8>, VerifyError> {
    let key = match (scheme, secret.strip_prefix("whsec_")) {
        (Scheme::StandardWebhooks, Some(b64)) => decode_base64(b64).ok_or_else(|| {
            VerifyError::Secret("the whsec_ secret is not base64 after its prefix".into())
        })?,
        _ => secret.as_bytes().to_vec(),
    };
    if key.is_empty() {
        return Err(VerifyError::Secret("the secret is empty".into()));
    }
    Ok(key)
}

fn mac(key: &[u8]) -> Result<HmacSha256, VerifyError> {
    HmacSha256::new_from_slice(key)
        .map_err(|_| VerifyError::Secret("the secret cannot key HMAC-SHA256".into()))
}

/// Checks a unix-seconds timestamp header value against `now` (± 5 minutes).
pub fn check_timestamp(header: &str, value: &str, now: i64) -> Result<(), VerifyError> {
    let t: i64 = value
        .trim()
        .parse()
        .map_err(|_| refused(format!("header {header} is not a unix time in seconds")))?;
    if t.abs_diff(now) > WINDOW_SECS.unsigned_abs() {
        return Err(refused("timestamp outside the 5-minute window"));
    }
    Ok(())
}

fn header<'a>(p: &'a WebhookHandleParams, name: &str) -> Result<&'a str, VerifyError> {
    p.header(name)
        .ok_or_else(|| refused(format!("missing header {name}")))
}

/// Verifies a request's signature under `scheme` with `secret`, at unix time `now`.
/// Scheme `none` verifies nothing (the loopback rule is the caller's).
pub fn verify(
    scheme: &Scheme,
    secret: &str,
    p: &WebhookHandleParams,
    now: i64,
) -> Result<(), VerifyError> {
    match scheme {
        Scheme::None => Ok(()),
        Scheme::HmacSha256 {
            header: name,
            format,
            timestamp_header,
        } => {
            let key = key_of(scheme, secret)?;
            let sent = header(p, name)?;
            let mut m = mac(&key)?;
            if let Some(th) = timestamp_header {
                let ts = header(p, th)?;
                check_timestamp(th, ts, now)?;
                m.update(ts.as_bytes());
                m.update(b".");
            }
            m.update(&p.body);
            let expected = format.decode(sent).ok_or_else(|| {
                refused(format!(
                    "header {name} is not in the format {}",
                    format.text
                ))
            })?;
            m.verify_slice(&expected)
                .map_err(|_| refused("signature does not match"))
        }
        Scheme::StandardWebhooks => {
            let key = key_of(scheme, secret)?;
            let id = header(p, WEBHOOK_ID)?;
            let ts = header(p, WEBHOOK_TIMESTAMP)?;
            let sigs = header(p, WEBHOOK_SIGNATURE)?;
            check_timestamp(WEBHOOK_TIMESTAMP, ts, now)?;
            let mut m = mac(&key)?;
            m.update(id.as_bytes());
            m.update(b".");
            m.update(ts.as_bytes());
            m.update(b".");
            m.update(&p.body);
            let matched = sigs
                .split_whitespace()
                .filter_map(|s| s.strip_prefix("v1,"))
                .filter_map(decode_base64)
                .any(|sig| m.clone().verify_slice(&sig).is_ok());
            if matched {
                Ok(())
            } else {
                Err(refused("signature does not match"))
            }
        }
    }
}

/// True when `remote_addr` (`ip:port`, `[v6]:port` or a bare IP) is a loopback
/// address: 127.0.0.0/8, `::1`, or `::ffff:127.x.y.z` (an IPv4 loopback client of a
/// dual-stack listener). Anything unparsable is not.
pub fn is_loopback(remote_addr: &str) -> bool {
    let ip = match remote_addr.parse::<SocketAddr>() {
        Ok(sa) => sa.ip(),
        Err(_) => match remote_addr.parse::<IpAddr>() {
            Ok(ip) => ip,
            Err(_) => return false,
        },
    };
    match ip {
        IpAddr::V4(v4) => v4.is_loopback(),
        IpAddr::V6(v6) => {
            v6.is_loopback() || v6.to_ipv4_mapped().is_some_and(|v4| v4.is_loopback())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::parse_entry_config;
    use serde_json::json;

    fn request(headers: &[(&str, &str)], body: &[u8]) -> WebhookHandleParams {
        WebhookHandleParams {
            method: "POST".into(),
            path: "/webhook/s/e".into(),
            headers: headers
                .iter()
                .map(|(k, v)| (k.to_ascii_lowercase(), vec![v.to_string()]))
                .collect(),
            body: body.to_vec(),
            ..Default::default()
        }
    }

    fn scheme(config: serde_json::Value) -> Scheme {
        parse_entry_config(&config).expect("valid").scheme
    }

    fn refusal(r: Result<(), VerifyError>) -> String {
        match r {
            Err(VerifyError::Refused(why)) => why,
            other => panic!("not refused: {other:?}"),
        }
    }

    // RFC 4231 test case 2: HMAC-SHA256 of "what do ya want for nothing?" keyed "Jefe".
    const RFC4231_BODY: &[u8] = b"what do ya want for nothing?";
    const RFC4231_MAC: &str = "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843";
    const NOW: i64 = 1_700_000_000;

    #[test]
    fn hmac_sha256_matches_the_rfc_4231_vector() {
        let s = scheme(json!({}));
        let sig = format!("sha256={RFC4231_MAC}");
        let p = request(&[("X-Signature-256", &sig)], RFC4231_BODY);
        assert_eq!(verify(&s, "Jefe", &p, NOW), Ok(()));
        // The header name is matched in any case; the hex in either case.
        let upper = format!("sha256={}", RFC4231_MAC.to_ascii_uppercase());
        let p = request(&[("x-signature-256", &upper)], RFC4231_BODY);
        assert_eq!(verify(&s, "Jefe", &p, NOW), Ok(()));
    }

    #[test]
    fn a_tampered_body_or_a_wrong_secret_fails() {
        let s = scheme(json!({}));
        let sig = format!("sha256={RFC4231_MAC}");
        let tampered = request(
            &[("X-Signature-256", &sig)],
            b"what do ya want for nothing!",
        );
        assert_eq!(
            refusal(verify(&s, "Jefe", &tampered, NOW)),
            "signature does not match"
        );
        let p = request(&[("X-Signature-256", &sig)], RFC4231_BODY);
        assert_eq!(
            refusal(verify(&s, "jefe", &p, NOW)),
            "signature does not match"
        );
        // A truncated MAC is no match either.
        let short = format!("sha256={}", &RFC4231_MAC[..32]);
        let p = request(&[("X-Signature-256", &short)], RFC4231_BODY);
        assert_eq!(
            refusal(verify(&s, "Jefe", &p, NOW)),
            "signature does not match"
        );
    }

    #[test]
    fn a_missing_or_malformed_header_says_so() {
        let s = scheme(json!({}));
        let p = request(&[], RFC4231_BODY);
        assert_eq!(
            refusal(verify(&s, "Jefe", &p, NOW)),
            "missing header X-Signature-256"
        );
        let p = request(&[("X-Signature-256", RFC4231_MAC)], RFC4231_BODY);
        assert_eq!(
            refusal(verify(&s, "Jefe", &p, NOW)),
            "header X-Signature-256 is not in the format sha256={hex}"
        );
    }

    #[test]
    fn other_formats_and_headers() {
        let raw = protocol::hex::decode(RFC4231_MAC).expect("hex");
        let b64 = protocol::b64::encode(&raw);
        let s = scheme(json!({"signature": {"header": "X-Hmac", "format": "{base64}"}}));
        let p = request(&[("X-Hmac", &b64)], RFC4231_BODY);
        assert_eq!(verify(&s, "Jefe", &p, NOW), Ok(()));
        let s = scheme(json!({"signature": {"header": "X-Hmac", "format": "{hex}"}}));
        let p = request(&[("X-Hmac", RFC4231_MAC)], RFC4231_BODY);
        assert_eq!(verify(&s, "Jefe", &p, NOW), Ok(()));
        let p = request(&[("X-Hmac", &b64)], RFC4231_BODY);
        assert!(verify(&s, "Jefe", &p, NOW).is_err());
    }

    #[test]
    fn a_timestamp_header_is_signed_and_must_be_recent() {
        // Computed independently of `verify`: HMAC over "<ts>.<body>".
        let s = scheme(json!({"signature": {"timestamp_header": "X-Timestamp"}}));
        let ts = NOW.to_string();
        let sign = |ts: &str, body: &[u8]| {
            let mut m = HmacSha256::new_from_slice(b"k3y").expect("any key");
            m.update(format!("{ts}.").as_bytes());
            m.update(body);
            format!(
                "sha256={}",
                protocol::hex::encode(&m.finalize().into_bytes())
            )
        };
        let sig = sign(&ts, b"{}");
        let p = request(&[("X-Signature-256", &sig), ("X-Timestamp", &ts)], b"{}");
        assert_eq!(verify(&s, "k3y", &p, NOW), Ok(()));
        assert_eq!(verify(&s, "k3y", &p, NOW + 300), Ok(()));
        assert_eq!(verify(&s, "k3y", &p, NOW - 300), Ok(()));
        assert_eq!(
            refusal(verify(&s, "k3y", &p, NOW + 301)),
            "timestamp outside the 5-minute window"
        );
        assert_eq!(
            refusal(verify(&s, "k3y", &p, NOW - 301)),
            "timestamp outside the 5-minute window"
        );
        // The timestamp is part of what is signed: another one fails.
        let other = (NOW + 1).to_string();
        let p = request(&[("X-Signature-256", &sig), ("X-Timestamp", &other)], b"{}");
        assert_eq!(
            refusal(verify(&s, "k3y", &p, NOW)),
            "signature does not match"
        );
        // The body alone, signed without the timestamp, fails too.
        let mut m = HmacSha256::new_from_slice(b"k3y").expect("any key");
        m.update(b"{}");
        let body_only = format!(
            "sha256={}",
            protocol::hex::encode(&m.finalize().into_bytes())
        );
        let p = request(
            &[("X-Signature-256", &body_only), ("X-Timestamp", &ts)],
            b"{}",
        );
        assert_eq!(
            refusal(verify(&s, "k3y", &p, NOW)),
            "signature does not match"
        );
        let p = request(&[("X-Signature-256", &sig)], b"{}");
        assert_eq!(
            refusal(verify(&s, "k3y", &p, NOW)),
            "missing header X-Timestamp"
        );
        let p = request(&[("X-Signature-256", &sig), ("X-Timestamp", "soon")], b"{}");
        assert_eq!(
            refusal(verify(&s, "k3y", &p, NOW)),
            "header X-Timestamp is not a unix time in seconds"
        );
    }

    // The Standard Webhooks specification's published test vector.
    const SW_SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
    const SW_ID: &str = "msg_p5jXN8AQM9LWM0D4loKWxJek";
    const SW_TS: &str = "1614265330";
    const SW_BODY: &[u8] = br#"{"test": 2432232314}"#;
    const SW_SIG: &str = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=";
    const SW_NOW: i64 = 1_614_265_330;

    fn sw(sig: &str, body: &[u8]) -> WebhookHandleParams {
        request(
            &[
                ("webhook-id", SW_ID),
                ("webhook-timestamp", SW_TS),
                ("webhook-signature", sig),
            ],
            body,
        )
    }

    #[test]
    fn standard_webhooks_matches_the_spec_vector() {
        let s = Scheme::StandardWebhooks;
        assert_eq!(verify(&s, SW_SECRET, &sw(SW_SIG, SW_BODY), SW_NOW), Ok(()));
        // Any one of several signatures passes; other versions are ignored.
        let several = format!("v1,bm9wZQ== v1a,AAAA {SW_SIG}");
        assert_eq!(
            verify(&s, SW_SECRET, &sw(&several, SW_BODY), SW_NOW),
            Ok(())
        );
        let tampered = br#"{"test": 2432232315}"#;
        assert_eq!(
            refusal(verify(&s, SW_SECRET, &sw(SW_SIG, tampered), SW_NOW)),
            "signature does not match"
        );
        assert_eq!(
            refusal(verify(&s, "whsec_bm9wZQ==", &sw(SW_SIG, SW_BODY), SW_NOW)),
            "signature does not match"
        );
        // Without the prefix, the secret is its raw bytes: not the same key.
        assert_eq!(
            refusal(verify(
                &s,
                "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
                &sw(SW_SIG, SW_BODY),
                SW_NOW
            )),
            "signature does not match"
        );
        assert_eq!(
            refusal(verify(&s, SW_SECRET, &sw(SW_SIG, SW_BODY), SW_NOW + 301)),
            "timestamp outside the 5-minute window"
        );
        let no_id = request(
            &[("webhook-timestamp", SW_TS), ("webhook-signature", SW_SIG)],
            SW_BODY,
        );
        assert_eq!(
            refusal(verify(&s, SW_SECRET, &no_id, SW_NOW)),
            "missing header webhook-id"
        );
    }

    #[test]
    fn a_raw_standard_webhooks_secret_is_its_bytes() {
        let s = Scheme::StandardWebhooks;
        let mut m = HmacSha256::new_from_slice(b"plain secret").expect("any key");
        m.update(format!("{SW_ID}.{SW_TS}.").as_bytes());
        m.update(SW_BODY);
        let sig = format!("v1,{}", protocol::b64::encode(m.finalize().into_bytes()));
        assert_eq!(
            verify(&s, "plain secret", &sw(&sig, SW_BODY), SW_NOW),
            Ok(())
        );
    }

    #[test]
    fn an_unusable_secret_is_not_a_refusal() {
        let p = sw(SW_SIG, SW_BODY);
        assert!(matches!(
            verify(&Scheme::StandardWebhooks, "whsec_!!!", &p, SW_NOW),
            Err(VerifyError::Secret(_))
        ));
        assert!(matches!(
            verify(&scheme(json!({})), "", &p, SW_NOW),
            Err(VerifyError::Secret(_))
        ));
    }

    #[test]
    fn loopback_is_127_slash_8_and_colon_colon_1() {
        for yes in [
            "127.0.0.1:5000",
            "127.1.2.3:1",
            "[::1]:80",
            "::1",
            "127.0.0.1",
            "[::ffff:127.0.0.1]:9",
        ] {
            assert!(is_loopback(yes), "{yes}");
        }
        for no in [
            "10.0.0.1:5000",
            "[::2]:80",
            "128.0.0.1:1",
            "",
            "localhost:80",
            "[::ffff:10.0.0.1]:9",
            "0.0.0.0:1",
        ] {
            assert!(!is_loopback(no), "{no}");
        }
    }
}
