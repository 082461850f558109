//! Client-side pacing of Web API calls, by Slack's per-method rate limit tiers, and
//! a back-off after Slack refused a token.
//!
//! Slack limits each method per app and workspace by a tier (Tier 1 about 1 call a
//! minute, Tier 2 about 20, Tier 3 about 50, Tier 4 about 100; `chat.postMessage`
//! about 1 a second per conversation, with short bursts). [`Pacer`] keeps one token
//! bucket per (API URL, token, method) — and per conversation for
//! `chat.postMessage` — shared by every client of the package's process
//! ([`Pacer::global`]): a call takes a slot, waiting for one when the bucket is
//! empty, and a call that would wait longer than the pacer's bound is refused
//! ([`Refused`]) rather than queued without end. A 429's `Retry-After` holds the
//! bucket until then ([`Pacer::hold`]), so the calls behind it wait too.
//!
//! A token Slack refused (`invalid_auth`, `token_revoked` …) is not sent again for a
//! while ([`Pacer::auth_failed`]: 30 s, doubling up to 10 minutes while Slack keeps
//! refusing it): the projector's passes and the agent's calls meanwhile fail at once
//! with the same error, instead of asking Slack every few seconds.
//!
//! Everything takes `now` as an argument, so tests drive it with their own clock;
//! [`Pacer::delayed`] and [`Pacer::refused`] count what the pacing did.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

/// The longest a call waits for its slot before it is refused.
pub const MAX_PACE_WAIT: Duration = Duration::from_secs(10);
/// The first back-off after Slack refused a token.
pub const AUTH_BACKOFF: Duration = Duration::from_secs(30);
/// The longest back-off after Slack refused a token.
pub const MAX_AUTH_BACKOFF: Duration = Duration::from_secs(600);
/// The most buckets kept; past it, the ones full again are dropped.
pub const MAX_BUCKETS: usize = 10_000;

/// A method's rate limit tier, as Slack documents it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tier {
    /// Tier 1: about 1 call a minute (a small burst tolerated).
    Tier1,
    /// Tier 2: about 20 a minute.
    Tier2,
    /// Tier 3: about 50 a minute.
    Tier3,
    /// Tier 4: about 100 a minute.
    Tier4,
    /// `chat.postMessage`: about 1 a second per conversation, short bursts.
    PostMessage,
    /// `auth.test` and the like: "special", paced as Tier 4.
    Special,
}

/// How many calls a minute a bucket refills, and how many it holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rate {
    /// Calls a minute, sustained.
    pub per_minute: u32,
    /// Calls at once from a full bucket.
    pub burst: u32,
}

impl Tier {
    /// The tier of Web API `method` (an unlisted method: Tier 3, Slack's most common).
    pub fn of(method: &str) -> Tier {
        match method {
            "apps.connections.open" => Tier::Tier1,
            "reactions.remove" | "conversations.history" => Tier::Tier2,
            "chat.postMessage" => Tier::PostMessage,
            "users.info" => Tier::Tier4,
            "auth.test" => Tier::Special,
            // chat.update, reactions.add, conversations.replies …
            _ => Tier::Tier3,
        }
    }

    /// Its name, as Slack's documentation says it.
    pub fn name(self) -> &'static str {
        match self {
            Tier::Tier1 => "Tier 1",
            Tier::Tier2 => "Tier 2",
            Tier::Tier3 => "Tier 3",
            Tier::Tier4 => "Tier 4",
            Tier::PostMessage => "chat.postMessage's special tier",
            Tier::Special => "special tier",
        }
    }

    /// The bucket's rate.
    pub fn rate(self) -> Rate {
        let (per_minute, burst) = match self {
            Tier::Tier1 => (1, 5),
            Tier::Tier2 => (20, 20),
            Tier::Tier3 => (50, 50),
            Tier::Tier4 | Tier::Special => (100, 100),
            Tier::PostMessage => (60, 3),
        };
        Rate { per_minute, burst }
    }

    /// Whether the bucket is per conversation (the call's `channel`).
    pub fn per_channel(self) -> bool {
        self == Tier::PostMessage
    }
}

/// A call the pacer refused: it would have waited `wait`, past `bound`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Refused {
    /// The wait it would have needed.
    pub wait: Duration,
    /// The pacer's bound.
    pub bound: Duration,
}

/// Slack refused a token: its code, and until when the token is not sent again.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuthHeld {
    /// Slack's code (`invalid_auth`).
    pub error: String,
    /// The method Slack refused it on.
    pub method: String,
    /// How long until the token is tried again.
    pub remaining: Duration,
}

#[derive(Debug, Clone, Copy)]
struct Bucket {
    tokens: f64,
    at: Instant,
    held_until: Option<Instant>,
}

#[derive(Debug, Clone)]
struct AuthFailure {
    error: String,
    method: String,
    until: Instant,
    backoff: Duration,
}

/// Token buckets per method (and conversation), and the tokens Slack refused.
#[derive(Debug)]
pub struct Pacer {
    max_wait: Duration,
    buckets: Mutex<HashMap<String, Bucket>>,
    auth: Mutex<HashMap<String, AuthFailure>>,
    delayed: AtomicU64,
    refused: AtomicU64,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Pacer {
    /// A pacer refusing calls that would wait longer than `max_wait`.
    pub fn new(max_wait: Duration) -> Pacer {
        Pacer {
            max_wait,
            buckets: Mutex::new(HashMap::new()),
            auth: Mutex::new(HashMap::new()),
            delayed: AtomicU64::new(0),
            refused: AtomicU64::new(0),
        }
    }

    /// The process's pacer (bound [`MAX_PACE_WAIT`]), shared by every client.
    pub fn global() -> &'static Pacer {
        static GLOBAL: OnceLock<Pacer> = OnceLock::new();
        GLOBAL.get_or_init(|| Pacer::new(MAX_PACE_WAIT))
    }

    /// The bound on a wait.
    pub fn max_wait(&self) -> Duration {
        self.max_wait
    }

    /// Takes a slot of bucket `key` (of `rate`) at `now`: how long to wait before
    /// the call, or [`Refused`] (nothing taken) when that is past the bound.
    pub fn reserve(&self, key: &str, rate: Rate, now: Instant) -> Result<Duration, Refused> {
        let per_sec = f64::from(rate.per_minute.max(1)) / 60.0;
        let burst = f64::from(rate.burst.max(1));
        let mut buckets = lock(&self.buckets);
        if buckets.len() >= MAX_BUCKETS && !buckets.contains_key(key) {
            buckets.retain(|_, b| {
                let idle = now.saturating_duration_since(b.at).as_secs_f64();
                b.tokens + idle * per_sec < burst || b.held_until.is_some_and(|h| h > now)
            });
        }
        let b = buckets.entry(key.to_string()).or_insert(Bucket {
            tokens: burst,
            at: now,
            held_until: None,
        });
        let elapsed = now.saturating_duration_since(b.at).as_secs_f64();
        let tokens = (b.tokens + elapsed * per_sec).min(burst);
        let held = b
            .held_until
            .map(|h| h.saturating_duration_since(now))
            .unwrap_or_default();
        let left = tokens - 1.0;
        let mut wait = held;
        if left < 0.0 {
            wait += Duration::from_secs_f64(-left / per_sec);
        }
        if wait > self.max_wait {
            self.refused.fetch_add(1, Ordering::Relaxed);
            return Err(Refused {
                wait,
                bound: self.max_wait,
            });
        }
        b.tokens = left;
        b.at = now;
        if !wait.is_zero() {
            self.delayed.fetch_add(1, Ordering::Relaxed);
        }
        Ok(wait)
    }

    /// Holds bucket `key` until `until` (a 429's `Retry-After`), emptied.
    pub fn hold(&self, key: &str, until: Instant, now: Instant) {
        let mut buckets = lock(&self.buckets);
        let b = buckets.entry(key.to_string()).or_insert(Bucket {
            tokens: 0.0,
            at: now,
            held_until: None,
        });
        b.tokens = b.tokens.min(0.0);
        b.at = now;
        b.held_until = Some(b.held_until.map_or(until, |h| h.max(until)));
    }

    /// Notes that Slack refused token `token_key` with `error` on `method` at `now`:
    /// it is not sent again for [`AUTH_BACKOFF`], doubled each time it is refused
    /// again, at most [`MAX_AUTH_BACKOFF`].
    pub fn auth_failed(&self, token_key: &str, method: &str, error: &str, now: Instant) {
        let mut auth = lock(&self.auth);
        let backoff = match auth.get(token_key) {
            Some(f) => (f.backoff * 2).min(MAX_AUTH_BACKOFF),
            None => AUTH_BACKOFF,
        };
        auth.insert(
            token_key.to_string(),
            AuthFailure {
                error: error.to_string(),
                method: method.to_string(),
                until: now + backoff,
                backoff,
            },
        );
    }

    /// Forgets a refusal of `token_key` (Slack took the token).
    pub fn auth_ok(&self, token_key: &str) {
        lock(&self.auth).remove(token_key);
    }

    /// Whether `token_key` is held back at `now` after Slack refused it.
    pub fn auth_held(&self, token_key: &str, now: Instant) -> Option<AuthHeld> {
        let auth = lock(&self.auth);
        let f = auth.get(token_key)?;
        (f.until > now).then(|| AuthHeld {
            error: f.error.clone(),
            method: f.method.clone(),
            remaining: f.until.saturating_duration_since(now),
        })
    }

    /// How many calls waited for their slot.
    pub fn delayed(&self) -> u64 {
        self.delayed.load(Ordering::Relaxed)
    }

    /// How many calls were refused for a wait past the bound.
    pub fn refused(&self) -> u64 {
        self.refused.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn tiers_of_the_package_methods() {
        assert_eq!(Tier::of("chat.postMessage"), Tier::PostMessage);
        assert_eq!(Tier::of("chat.update"), Tier::Tier3);
        assert_eq!(Tier::of("reactions.add"), Tier::Tier3);
        assert_eq!(Tier::of("conversations.replies"), Tier::Tier3);
        assert_eq!(Tier::of("users.info"), Tier::Tier4);
        assert_eq!(Tier::of("auth.test"), Tier::Special);
        assert_eq!(Tier::of("apps.connections.open"), Tier::Tier1);
        assert!(Tier::PostMessage.per_channel());
        assert!(!Tier::Tier3.per_channel());
    }

    #[test]
    fn a_burst_goes_at_once_then_calls_wait_then_are_refused() {
        let p = Pacer::new(Duration::from_secs(10));
        let t0 = Instant::now();
        let rate = Tier::PostMessage.rate();
        // The burst: no wait.
        for _ in 0..3 {
            assert_eq!(p.reserve("k", rate, t0), Ok(Duration::ZERO));
        }
        assert_eq!((p.delayed(), p.refused()), (0, 0));
        // Then one a second: each waits a second longer than the one before.
        let waits: Vec<_> = (0..10).map(|_| p.reserve("k", rate, t0).unwrap()).collect();
        for (i, w) in waits.iter().enumerate() {
            let want = (i + 1) as f64;
            assert!((w.as_secs_f64() - want).abs() < 0.01, "{i}: {w:?}");
        }
        assert_eq!(p.delayed(), 10);
        // The eleventh would wait 11 s, past the 10 s bound: refused, nothing taken.
        let r = p.reserve("k", rate, t0).unwrap_err();
        assert_eq!(r.bound, Duration::from_secs(10));
        assert!(r.wait > r.bound);
        assert_eq!(p.refused(), 1);
        // Another conversation's bucket is its own.
        assert_eq!(p.reserve("other", rate, t0), Ok(Duration::ZERO));
        // A minute later the bucket is full again.
        let later = t0 + Duration::from_secs(60);
        assert_eq!(p.reserve("k", rate, later), Ok(Duration::ZERO));
        assert_eq!((p.delayed(), p.refused()), (10, 1));
    }

    #[test]
    fn tier_one_takes_five_then_one_a_minute() {
        let p = Pacer::new(Duration::from_secs(30));
        let t0 = Instant::now();
        let rate = Tier::Tier1.rate();
        for _ in 0..5 {
            assert_eq!(p.reserve("open", rate, t0), Ok(Duration::ZERO));
        }
        // The sixth needs a minute: refused (bound 30 s).
        assert!(p.reserve("open", rate, t0).is_err());
        // 40 s later it needs 20 s more: waits.
        let w = p
            .reserve("open", rate, t0 + Duration::from_secs(40))
            .unwrap();
        assert!((w.as_secs_f64() - 20.0).abs() < 0.01, "{w:?}");
        assert_eq!((p.delayed(), p.refused()), (1, 1));
    }

    #[test]
    fn retry_after_holds_the_bucket() {
        let p = Pacer::new(Duration::from_secs(10));
        let t0 = Instant::now();
        let rate = Tier::Tier3.rate();
        assert_eq!(p.reserve("m", rate, t0), Ok(Duration::ZERO));
        p.hold("m", t0 + Duration::from_secs(5), t0);
        let w = p.reserve("m", rate, t0 + Duration::from_secs(1)).unwrap();
        assert!(w >= Duration::from_secs(4), "{w:?}");
        // Held past the bound: refused.
        p.hold("m", t0 + Duration::from_secs(60), t0);
        assert!(p.reserve("m", rate, t0).is_err());
    }

    #[test]
    fn a_refused_token_is_held_back_doubling() {
        let p = Pacer::new(Duration::from_secs(10));
        let t0 = Instant::now();
        assert!(p.auth_held("tok", t0).is_none());
        p.auth_failed("tok", "chat.postMessage", "invalid_auth", t0);
        let held = p.auth_held("tok", t0 + Duration::from_secs(1)).unwrap();
        assert_eq!(held.error, "invalid_auth");
        assert_eq!(held.method, "chat.postMessage");
        assert!(p.auth_held("tok", t0 + AUTH_BACKOFF).is_none());
        assert!(p.auth_held("other", t0).is_none());
        // Refused again: twice as long.
        let t1 = t0 + AUTH_BACKOFF;
        p.auth_failed("tok", "auth.test", "invalid_auth", t1);
        assert!(p.auth_held("tok", t1 + AUTH_BACKOFF).is_some());
        assert!(p.auth_held("tok", t1 + AUTH_BACKOFF * 2).is_none());
        // Taken again: forgotten.
        p.auth_ok("tok");
        assert!(p.auth_held("tok", t1).is_none());
    }
}
