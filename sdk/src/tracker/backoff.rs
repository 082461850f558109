//! The back-off of a tracker's API client (`linear`, `jira`): a rate limit whose
//! reset is near is waited out and the call asked again ([`MAX_RATE_LIMIT_WAIT`],
//! [`RATE_LIMIT_RETRIES`]); after a refused credential (401, [`AUTH_BACKOFF`]) or
//! a rate limit not waited out (its reset, at most [`MAX_RATE_LIMIT_BACKOFF`]) the
//! credential is held back ([`Holds`], keyed by a digest of the endpoint and the
//! credential), so the background passes (projector, reconcile) answer the refusal
//! without asking the tracker again, while the agent's operations and the doctor's
//! check ([`Backoff::without_holds`]) still ask. A success lifts the hold.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

use protocol::RpcError;
use serde_json::{json, Value};

use super::hmac_sha256_hex;

/// The longest a call waits out a rate limit (the tracker's reset) before asking
/// again; a later reset is the error, with `retry_after_s`.
pub const MAX_RATE_LIMIT_WAIT: Duration = Duration::from_secs(10);
/// How many times a rate limited call is asked again (each after its wait).
pub const RATE_LIMIT_RETRIES: u32 = 1;
/// How long calls with a credential the tracker refused (401) are not sent again,
/// unless asked for by the agent or the doctor ([`Backoff::without_holds`]); also
/// the hold of a rate limit that named no reset.
pub const AUTH_BACKOFF: Duration = Duration::from_secs(60);
/// The longest a rate limit holds calls back (a reset further away holds this long).
pub const MAX_RATE_LIMIT_BACKOFF: Duration = Duration::from_secs(3600);
/// The most credentials held back at once (the oldest hold is dropped past it).
pub const MAX_HOLDS: usize = 256;

/// `e` with its message (and `data.agent_message`) replaced by `text`, the rest of
/// its data kept.
pub fn reworded(mut e: RpcError, text: String) -> RpcError {
    let agent = protocol::toolbelt::agent_message(&text);
    match e.data.as_mut() {
        Some(Value::Object(data)) => {
            data.insert(protocol::toolbelt::AGENT_MESSAGE_FIELD.into(), json!(agent));
        }
        Some(_) => {}
        None => e.data = Some(json!({ protocol::toolbelt::AGENT_MESSAGE_FIELD: agent })),
    }
    e.message = text;
    e
}

/// A credential held back: until when, the refusal that held it, and when (RFC 3339).
#[derive(Debug, Clone)]
struct Hold {
    until: Instant,
    error: RpcError,
    since: String,
}

/// Credentials held back, by hold key (a digest, never the credential), at most
/// [`MAX_HOLDS`]. Every method takes `now`, so tests drive it with their own clock;
/// clients use the process's ([`Holds::global`]).
#[derive(Debug, Default)]
pub struct Holds {
    holds: Mutex<HashMap<String, Hold>>,
}

impl Holds {
    /// The process's holds, shared by every client of the package.
    pub fn global() -> &'static Holds {
        static HOLDS: OnceLock<Holds> = OnceLock::new();
        HOLDS.get_or_init(Holds::default)
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<String, Hold>> {
        self.holds.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Holds `key` back from `now` for `for_`, after `error` (the holds run out are
    /// dropped first, then the oldest when [`MAX_HOLDS`] are kept).
    pub fn hold(&self, key: &str, for_: Duration, error: &RpcError, now: Instant) {
        let mut h = self.lock();
        h.retain(|_, v| v.until > now);
        if h.len() >= MAX_HOLDS {
            if let Some(oldest) = h
                .iter()
                .min_by_key(|(_, v)| v.until)
                .map(|(k, _)| k.clone())
            {
                h.remove(&oldest);
            }
        }
        h.insert(
            key.to_string(),
            Hold {
                until: now + for_,
                error: error.clone(),
                since: protocol::time::format_rfc3339_ms(protocol::time::now_ms()),
            },
        );
    }

    /// The refusal holding `key` back at `now`, if any, reworded to say so: how long
    /// it is held yet, and when `tracker` (`Linear`, `Jira`) refused the call.
    pub fn held(&self, key: &str, tracker: &str, now: Instant) -> Option<RpcError> {
        let h = self.lock();
        let hold = h.get(key).filter(|v| v.until > now)?;
        let left = hold.until.duration_since(now).as_secs().max(1);
        let text = format!(
            "{}; not asked again for {left} s (back-off after {tracker} refused a call at {})",
            hold.error.message, hold.since
        );
        Some(reworded(hold.error.clone(), text))
    }

    /// Lifts the hold of `key` (the tracker took a call).
    pub fn release(&self, key: &str) {
        self.lock().remove(key);
    }

    /// How many holds are kept (some may have run out).
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    /// Whether no hold is kept.
    pub fn is_empty(&self) -> bool {
        self.lock().is_empty()
    }
}

/// What to do with a rate limited answer ([`Backoff::rate_limited`]).
#[derive(Debug)]
pub enum RateLimitStep {
    /// Wait this long, then ask again.
    Wait(Duration),
    /// Answer this error (the credential is now held back).
    Fail(RpcError),
}

/// The back-off of one tracker client: its hold key (an HMAC of the endpoint under
/// the credential, so the credential is never kept in clear) and whether its calls
/// honour holds. See the module doc.
#[derive(Clone)]
pub struct Backoff {
    tracker: &'static str,
    key: Arc<str>,
    honour: bool,
}

impl std::fmt::Debug for Backoff {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Backoff")
            .field("tracker", &self.tracker)
            .field("honour", &self.honour)
            .finish()
    }
}

impl Backoff {
    /// The back-off of `tracker`'s (`Linear`, `Jira`) client of `endpoint` with
    /// `credential` (the key, or the `Authorization` header), honouring holds.
    pub fn new(tracker: &'static str, endpoint: &str, credential: &str) -> Backoff {
        Backoff {
            tracker,
            key: hmac_sha256_hex(credential.as_bytes(), endpoint.as_bytes()).into(),
            honour: true,
        }
    }

    /// This back-off, not honouring holds (a call someone asked for now, which
    /// still records a new refusal).
    pub fn without_holds(mut self) -> Backoff {
        self.honour = false;
        self
    }

    /// The hold key: a digest of the endpoint and the credential.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// The refusal holding the credential back, reworded to say so, when this
    /// back-off honours holds and one is in force.
    pub fn held(&self) -> Option<RpcError> {
        self.held_in(Holds::global(), Instant::now())
    }

    fn held_in(&self, holds: &Holds, now: Instant) -> Option<RpcError> {
        if !self.honour {
            return None;
        }
        holds.held(&self.key, self.tracker, now)
    }

    /// The tracker took a call: the hold (if any) is lifted.
    pub fn succeeded(&self) {
        Holds::global().release(&self.key);
    }

    /// The tracker refused the credential (401): it is held back [`AUTH_BACKOFF`].
    pub fn refused(&self, error: &RpcError) {
        Holds::global().hold(&self.key, AUTH_BACKOFF, error, Instant::now());
    }

    /// A rate limited answer `e`, whose reset is `retry_after_s` away, after
    /// `retried` retries: wait it out when it is at most [`MAX_RATE_LIMIT_WAIT`]
    /// away and fewer than [`RATE_LIMIT_RETRIES`] were made; else the error (saying
    /// why it was not waited out), the credential held back until the reset
    /// ([`AUTH_BACKOFF`] when none was named), at most [`MAX_RATE_LIMIT_BACKOFF`].
    pub fn rate_limited(
        &self,
        e: RpcError,
        retry_after_s: Option<u64>,
        retried: u32,
    ) -> RateLimitStep {
        self.rate_limited_in(Holds::global(), e, retry_after_s, retried, Instant::now())
    }

    fn rate_limited_in(
        &self,
        holds: &Holds,
        e: RpcError,
        retry_after_s: Option<u64>,
        retried: u32,
        now: Instant,
    ) -> RateLimitStep {
        let wait = retry_after_s.map(Duration::from_secs);
        if let Some(w) = wait.filter(|w| retried < RATE_LIMIT_RETRIES && *w <= MAX_RATE_LIMIT_WAIT)
        {
            return RateLimitStep::Wait(w);
        }
        let e = if retried > 0 {
            let text = format!(
                "{} (still rate limited after {retried} retry, at most {RATE_LIMIT_RETRIES} (RATE_LIMIT_RETRIES))",
                e.message
            );
            reworded(e, text)
        } else if wait.is_some_and(|w| w > MAX_RATE_LIMIT_WAIT) {
            let text = format!(
                "{} (longer than the {} s a call waits, MAX_RATE_LIMIT_WAIT)",
                e.message,
                MAX_RATE_LIMIT_WAIT.as_secs()
            );
            reworded(e, text)
        } else {
            e
        };
        let for_ = wait.unwrap_or(AUTH_BACKOFF).min(MAX_RATE_LIMIT_BACKOFF);
        holds.hold(&self.key, for_, &e, now);
        RateLimitStep::Fail(e)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use protocol::Code;

    fn unauthorized() -> RpcError {
        RpcError::new(Code::Unauthorized, "Linear read_issue: the key was refused")
    }

    fn limited() -> RpcError {
        RpcError::new(Code::Unavailable, "rate limited")
    }

    #[test]
    fn a_hold_after_a_401_is_seen_until_it_expires() {
        let holds = Holds::default();
        let b = Backoff::new("Linear", "https://api.linear.app/graphql", "lin_api_SECRET");
        let t0 = Instant::now();
        holds.hold(b.key(), AUTH_BACKOFF, &unauthorized(), t0);
        let e = b.held_in(&holds, t0).expect("held at once");
        assert!(e.is(Code::Unauthorized));
        assert!(
            e.message.starts_with(
                "Linear read_issue: the key was refused; not asked again for 60 s (back-off after Linear refused a call at "
            ),
            "{}",
            e.message
        );
        assert_eq!(
            e.data
                .as_ref()
                .and_then(|d| d.get(protocol::toolbelt::AGENT_MESSAGE_FIELD)),
            Some(&json!(protocol::toolbelt::agent_message(&e.message)))
        );
        let late = t0 + AUTH_BACKOFF - Duration::from_secs(1);
        assert!(b.held_in(&holds, late).unwrap().message.contains("for 1 s"));
        assert!(b.held_in(&holds, t0 + AUTH_BACKOFF).is_none());
        // A client that does not honour holds is never held.
        assert!(b.clone().without_holds().held_in(&holds, t0).is_none());
        // Another credential or endpoint is not held.
        let other = Backoff::new("Linear", "https://api.linear.app/graphql", "lin_api_OTHER");
        assert!(other.held_in(&holds, t0).is_none());
        let elsewhere = Backoff::new("Linear", "https://example.test/graphql", "lin_api_SECRET");
        assert!(elsewhere.held_in(&holds, t0).is_none());
    }

    #[test]
    fn a_success_lifts_the_hold() {
        let b = Backoff::new("Jira", "https://lift.example.test", "Bearer lift-token");
        b.refused(&unauthorized());
        assert!(b.held().is_some());
        assert!(b.clone().without_holds().held().is_none());
        b.succeeded();
        assert!(b.held().is_none());
        let holds = Holds::default();
        holds.hold(b.key(), AUTH_BACKOFF, &unauthorized(), Instant::now());
        holds.release(b.key());
        assert!(holds.is_empty());
    }

    #[test]
    fn the_hold_key_is_a_digest_never_the_credential() {
        let b = Backoff::new(
            "Jira",
            "https://acme.atlassian.net",
            "Basic c2VjcmV0LXRva2Vu",
        );
        assert_eq!(b.key().len(), 64);
        assert!(b.key().bytes().all(|c| c.is_ascii_hexdigit()));
        assert!(!b.key().contains("c2VjcmV0LXRva2Vu"));
        assert!(!format!("{b:?}").contains("c2VjcmV0LXRva2Vu"));
        assert_eq!(
            b.key(),
            hmac_sha256_hex(b"Basic c2VjcmV0LXRva2Vu", b"https://acme.atlassian.net")
        );
    }

    #[test]
    fn holds_are_bounded() {
        let holds = Holds::default();
        let t0 = Instant::now();
        for i in 0..MAX_HOLDS + 5 {
            let for_ = AUTH_BACKOFF + Duration::from_secs(i as u64);
            holds.hold(&format!("k{i}"), for_, &unauthorized(), t0);
        }
        assert_eq!(holds.len(), MAX_HOLDS);
        assert!(holds.held("k0", "Linear", t0).is_none());
        let newest = format!("k{}", MAX_HOLDS + 4);
        assert!(holds.held(&newest, "Linear", t0).is_some());
    }

    #[test]
    fn a_near_rate_limit_is_waited_out_once_then_held() {
        let holds = Holds::default();
        let b = Backoff::new("Linear", "https://api.linear.app/graphql", "k");
        let t0 = Instant::now();
        match b.rate_limited_in(&holds, limited(), Some(3), 0, t0) {
            RateLimitStep::Wait(w) => assert_eq!(w, Duration::from_secs(3)),
            RateLimitStep::Fail(e) => panic!("not waited: {}", e.message),
        }
        assert!(holds.is_empty());
        let RateLimitStep::Fail(e) = b.rate_limited_in(&holds, limited(), Some(3), 1, t0) else {
            panic!("waited twice");
        };
        assert_eq!(
            e.message,
            "rate limited (still rate limited after 1 retry, at most 1 (RATE_LIMIT_RETRIES))"
        );
        assert!(b.held_in(&holds, t0 + Duration::from_secs(2)).is_some());
        assert!(b.held_in(&holds, t0 + Duration::from_secs(3)).is_none());
    }

    #[test]
    fn a_far_rate_limit_is_held_up_to_its_bound() {
        let holds = Holds::default();
        let b = Backoff::new("Jira", "https://acme.atlassian.net", "Bearer t");
        let t0 = Instant::now();
        let RateLimitStep::Fail(e) = b.rate_limited_in(&holds, limited(), Some(17), 0, t0) else {
            panic!("waited past MAX_RATE_LIMIT_WAIT");
        };
        assert_eq!(
            e.message,
            "rate limited (longer than the 10 s a call waits, MAX_RATE_LIMIT_WAIT)"
        );
        assert!(b.held_in(&holds, t0 + Duration::from_secs(16)).is_some());
        assert!(b.held_in(&holds, t0 + Duration::from_secs(17)).is_none());
        // No reset named: held AUTH_BACKOFF; a far one at most MAX_RATE_LIMIT_BACKOFF.
        let RateLimitStep::Fail(e) = b.rate_limited_in(&holds, limited(), None, 0, t0) else {
            panic!("waited without a reset");
        };
        assert_eq!(e.message, "rate limited");
        assert!(b.held_in(&holds, t0 + AUTH_BACKOFF).is_none());
        let _ = b.rate_limited_in(&holds, limited(), Some(86_400), 0, t0);
        let bound = t0 + MAX_RATE_LIMIT_BACKOFF;
        assert!(b.held_in(&holds, bound - Duration::from_secs(1)).is_some());
        assert!(b.held_in(&holds, bound).is_none());
    }
}
