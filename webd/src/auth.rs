//! Who a request comes from, and whether it may act.
//!
//! Three ways in:
//! - **a login token** (`open-conduit web login`) as `Authorization: Bearer`, for
//!   scripts: a browser never sends one on its own, so such a request needs no CSRF
//!   token;
//! - **a session cookie**, set when a person signs in on `/login` with a login
//!   token: `oc_session=<id>.<expires>.<mac>`, HttpOnly, SameSite=Strict, Secure
//!   when served over TLS. The MAC is an HMAC-SHA256 keyed by the token's recorded
//!   digest, so a session outlives a restart of webd (nothing is written) and ends
//!   when its token's line is removed from `<state>/webd/tokens`;
//! - **a reverse proxy's header** naming the person (`--trusted-header`), taken only
//!   from the proxy's addresses (`--trusted-proxy`).
//!
//! A cookie or a proxy's header is sent by the browser with any request, a
//! cross-site one too: every `POST` they sign must carry the CSRF token of the
//! session (`X-CSRF-Token`, or the form field `csrf`), an HMAC under a key this
//! process draws at start. After a restart the page reads a new one from
//! `/api/session`.

use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use hmac::{Hmac, Mac};
use hyper::header::{HeaderName, AUTHORIZATION, COOKIE};
use hyper::{HeaderMap, StatusCode};
use sha2::Sha256;

use crate::http::{fail, ApiError};
use crate::tokens::{self, Tokens};

/// The session cookie's name.
pub const COOKIE_NAME: &str = "oc_session";
/// How long a session lasts.
pub const SESSION_LIFETIME: Duration = Duration::from_secs(12 * 3600);
/// The header a page sends its CSRF token in.
pub const CSRF_HEADER: &str = "x-csrf-token";

/// A reverse proxy webd trusts to name the person.
#[derive(Debug, Clone)]
pub struct Trusted {
    /// The header it names the person in (`X-Forwarded-User`).
    pub header: HeaderName,
    /// The addresses it connects from.
    pub proxies: Vec<IpAddr>,
}

/// How a request signed in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Via {
    /// A login token.
    Bearer,
    /// A session cookie (its value).
    Cookie(String),
    /// A trusted proxy's header.
    Proxy,
}

/// A signed-in person.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Who {
    /// `web:<name>`.
    pub person: String,
    /// How.
    pub via: Via,
}

/// The sign-in rules of one webd.
pub struct Auth {
    tokens: Tokens,
    key: [u8; 32],
    trusted: Option<Trusted>,
    secure_cookies: bool,
    signed_in: AtomicU64,
}

type HmacSha256 = Hmac<Sha256>;

fn mac(key: &[u8], parts: &[&str]) -> String {
    // An HMAC takes a key of any length.
    let Ok(mut m) = HmacSha256::new_from_slice(key) else {
        return String::new();
    };
    for p in parts {
        m.update(p.as_bytes());
        m.update(b"\n");
    }
    protocol::hex::encode(&m.finalize().into_bytes())
}

/// Compare two strings in time that does not depend on where they differ.
fn same(a: &str, b: &str) -> bool {
    a.len() == b.len() && a.bytes().zip(b.bytes()).fold(0u8, |d, (x, y)| d | (x ^ y)) == 0
}

fn now_s() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

fn unauthorized(m: &str) -> ApiError {
    fail(StatusCode::UNAUTHORIZED, "unauthorized", m)
}

impl Auth {
    /// The rules: `tokens` for login tokens and sessions, `trusted` a proxy's header,
    /// `secure_cookies` to mark cookies Secure whatever the request says.
    pub fn new(
        tokens: Tokens,
        trusted: Option<Trusted>,
        secure_cookies: bool,
    ) -> Result<Auth, String> {
        let key = protocol::random::bytes::<32>().map_err(|e| format!("no randomness: {e}"))?;
        Ok(Auth {
            tokens,
            key,
            trusted,
            secure_cookies,
            signed_in: AtomicU64::new(0),
        })
    }

    /// Sessions signed in since webd started.
    pub fn sessions(&self) -> u64 {
        self.signed_in.load(Ordering::Relaxed)
    }

    /// Who the request comes from: `Ok(None)` when it carries no sign-in at all.
    pub fn who(&self, headers: &HeaderMap, remote: IpAddr) -> Result<Option<Who>, ApiError> {
        if let Some(value) = headers.get(AUTHORIZATION) {
            let token = value
                .to_str()
                .ok()
                .and_then(|v| v.strip_prefix("Bearer "))
                .map(str::trim)
                .filter(|t| !t.is_empty())
                .ok_or_else(|| unauthorized("the Authorization header is not Bearer <token>"))?;
            return match self.tokens.person(token) {
                Ok(Some(person)) => Ok(Some(Who {
                    person,
                    via: Via::Bearer,
                })),
                Ok(None) => Err(unauthorized(
                    "the token is not a login token (open-conduit web login prints one)",
                )),
                Err(e) => Err(self.unreadable(&e)),
            };
        }
        if let Some(t) = &self.trusted {
            if t.proxies.contains(&remote) {
                if let Some(v) = headers.get(&t.header) {
                    let name = v.to_str().unwrap_or("").trim();
                    let person = tokens::person(name).map_err(|e| {
                        unauthorized(&format!("the proxy's {}: {e}", t.header.as_str()))
                    })?;
                    return Ok(Some(Who {
                        person,
                        via: Via::Proxy,
                    }));
                }
            }
        }
        if let Some(cookie) = cookie(headers, COOKIE_NAME) {
            return match self.session(&cookie)? {
                Some(person) => Ok(Some(Who {
                    person,
                    via: Via::Cookie(cookie),
                })),
                None => Err(unauthorized(
                    "the session has ended (its token was removed, or it expired): sign in again",
                )),
            };
        }
        Ok(None)
    }

    fn unreadable(&self, e: &str) -> ApiError {
        tracing::warn!(error = %e, "cannot read the login tokens");
        fail(
            StatusCode::SERVICE_UNAVAILABLE,
            "unavailable",
            "the login tokens cannot be read now",
        )
    }

    /// The person a session cookie's value signs in as, if it is valid now.
    fn session(&self, value: &str) -> Result<Option<String>, ApiError> {
        let mut parts = value.splitn(3, '.');
        let (Some(id), Some(exp), Some(given)) = (parts.next(), parts.next(), parts.next()) else {
            return Ok(None);
        };
        if exp.parse::<u64>().map_or(true, |e| e <= now_s()) {
            return Ok(None);
        }
        let Some((digest, person)) = self
            .tokens
            .by_session_id(id)
            .map_err(|e| self.unreadable(&e))?
        else {
            return Ok(None);
        };
        Ok(same(&mac(digest.as_bytes(), &["session", id, exp]), given).then_some(person))
    }

    /// Sign in with a login token: the person and the `Set-Cookie` value of a new
    /// session. `tls`: the request came over TLS (through the trusted proxy).
    pub fn login(&self, token: &str, tls: bool) -> Result<(String, String), ApiError> {
        let token = token.trim();
        let person = match self.tokens.person(token) {
            Ok(Some(p)) => p,
            Ok(None) => {
                return Err(unauthorized(
                    "that is not a login token (open-conduit web login prints one)",
                ))
            }
            Err(e) => return Err(self.unreadable(&e)),
        };
        let digest = tokens::digest(token);
        let id = tokens::session_id(&digest);
        let exp = (now_s() + SESSION_LIFETIME.as_secs()).to_string();
        let m = mac(digest.as_bytes(), &["session", &id, &exp]);
        self.signed_in.fetch_add(1, Ordering::Relaxed);
        Ok((
            person,
            self.cookie_header(&format!("{id}.{exp}.{m}"), SESSION_LIFETIME.as_secs(), tls),
        ))
    }

    /// The `Set-Cookie` value that ends the session.
    pub fn logout_cookie(&self, tls: bool) -> String {
        self.cookie_header("", 0, tls)
    }

    fn cookie_header(&self, value: &str, max_age: u64, tls: bool) -> String {
        let secure = if self.secure_cookies || tls {
            "; Secure"
        } else {
            ""
        };
        format!(
            "{COOKIE_NAME}={value}; Path=/; HttpOnly; SameSite=Strict; Max-Age={max_age}{secure}"
        )
    }

    /// Whether the request came over TLS through the trusted proxy
    /// (`X-Forwarded-Proto: https` from one of its addresses).
    pub fn tls(&self, headers: &HeaderMap, remote: IpAddr) -> bool {
        self.trusted
            .as_ref()
            .is_some_and(|t| t.proxies.contains(&remote))
            && headers
                .get("x-forwarded-proto")
                .and_then(|v| v.to_str().ok())
                .is_some_and(|v| v.eq_ignore_ascii_case("https"))
    }

    /// The CSRF token of a signed-in person's session (empty for a login token, which
    /// needs none).
    pub fn csrf(&self, who: &Who) -> String {
        match &who.via {
            Via::Bearer => String::new(),
            Via::Cookie(c) => mac(&self.key, &["csrf", "cookie", c]),
            Via::Proxy => mac(&self.key, &["csrf", "proxy", &who.person]),
        }
    }

    /// Refuse a request signed by a cookie or a proxy's header that does not carry its
    /// session's CSRF token (`given`: the header's or the form field's).
    pub fn check_csrf(&self, who: &Who, given: Option<&str>) -> Result<(), ApiError> {
        if who.via == Via::Bearer {
            return Ok(());
        }
        match given {
            Some(g) if same(&self.csrf(who), g.trim()) => Ok(()),
            Some(_) => Err(fail(
                StatusCode::FORBIDDEN,
                "csrf",
                "the CSRF token is not this session's (webd restarted?): read a new one from /api/session",
            )),
            None => Err(fail(
                StatusCode::FORBIDDEN,
                "csrf",
                "a request signed by a session must carry its CSRF token (X-CSRF-Token)",
            )),
        }
    }
}

/// A cookie's value from the request's `Cookie` headers.
pub fn cookie(headers: &HeaderMap, name: &str) -> Option<String> {
    headers
        .get_all(COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|kv| kv.trim().split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v.to_owned())
        .filter(|v| !v.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;
    use hyper::header::HeaderValue;

    fn auth(dir: &std::path::Path, trusted: Option<Trusted>) -> Auth {
        match Auth::new(Tokens::new(tokens::path(dir)), trusted, false) {
            Ok(a) => a,
            Err(e) => panic!("{e}"),
        }
    }

    #[test]
    fn a_session_cookie_signs_in_until_its_token_goes_and_needs_its_csrf_token() {
        let dir = std::env::temp_dir().join(format!("webd-auth-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let _ = std::fs::create_dir_all(&dir);
        let token = tokens::mint(&dir, "alice").unwrap_or_default();
        let a = auth(&dir, None);
        let local = IpAddr::from([127, 0, 0, 1]);
        let (person, set) = a.login(&token, false).unwrap_or_default();
        assert_eq!(person, "web:alice");
        assert!(
            set.contains("HttpOnly") && set.contains("SameSite=Strict"),
            "{set}"
        );
        assert!(!set.contains("Secure"), "{set}");
        let value = set
            .strip_prefix("oc_session=")
            .and_then(|v| v.split(';').next())
            .unwrap_or_default()
            .to_owned();
        let mut h = HeaderMap::new();
        h.insert(
            COOKIE,
            HeaderValue::from_str(&format!("x=1; oc_session={value}"))
                .unwrap_or(HeaderValue::from_static("")),
        );
        let who = a.who(&h, local).ok().flatten();
        assert_eq!(who.as_ref().map(|w| w.person.as_str()), Some("web:alice"));
        let Some(who) = who else { return };
        assert!(a.check_csrf(&who, None).is_err());
        assert!(a.check_csrf(&who, Some("nope")).is_err());
        assert!(a.check_csrf(&who, Some(&a.csrf(&who))).is_ok());
        // A new webd (a new key) keeps the session but not the CSRF token.
        let b = auth(&dir, None);
        assert!(b.who(&h, local).ok().flatten().is_some());
        assert!(b.check_csrf(&who, Some(&a.csrf(&who))).is_err());
        // A forged MAC, and a removed token, sign in no one.
        let mut forged = HeaderMap::new();
        // The MAC's last digit changed (to one it is not: a random MAC may end in 0).
        let last = if value.ends_with('0') { '1' } else { '0' };
        let bad = format!("{}{last}", &value[..value.len() - 1]);
        forged.insert(
            COOKIE,
            HeaderValue::from_str(&format!("oc_session={bad}"))
                .unwrap_or(HeaderValue::from_static("")),
        );
        assert!(a.who(&forged, local).is_err());
        let _ = std::fs::write(tokens::path(&dir), "");
        assert!(a.who(&h, local).is_err());
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_proxy_header_counts_only_from_the_proxy() {
        let dir = std::env::temp_dir().join(format!("webd-auth-proxy-{}", std::process::id()));
        let trusted = Trusted {
            header: HeaderName::from_static("x-forwarded-user"),
            proxies: vec![IpAddr::from([127, 0, 0, 1])],
        };
        let a = auth(&dir, Some(trusted));
        let mut h = HeaderMap::new();
        h.insert("x-forwarded-user", HeaderValue::from_static("bob"));
        let from_proxy = a.who(&h, IpAddr::from([127, 0, 0, 1])).ok().flatten();
        assert_eq!(from_proxy.map(|w| w.person), Some("web:bob".to_owned()));
        assert_eq!(a.who(&h, IpAddr::from([10, 0, 0, 9])).ok().flatten(), None);
        h.insert("x-forwarded-user", HeaderValue::from_static("bob smith"));
        assert!(a.who(&h, IpAddr::from([127, 0, 0, 1])).is_err());
    }
}
