//! A bound on ingressd's line per accepted delivery: at most [`LINES_PER_S`] a second.
//!
//! Each accepted delivery is the first line of a Work's story (`open-conduit logs
//! --work` joins it by the event's ID), but a line per delivery at thousands a
//! second would cost a write (a journald datagram) per delivery and trip journald's
//! rate limit for the unit, which then drops the daemon's warnings with the rest.
//! So the first [`LINES_PER_S`] deliveries of each second get their line; the
//! others are counted, and the count is logged with the next line after the second
//! ends. The Event itself is kept either way, and `logs --work` shows its acceptance
//! from the store.

use std::sync::atomic::{AtomicU64, Ordering};

/// The most delivery lines logged in one second.
pub const LINES_PER_S: u64 = 20;

/// The lines of the current second, shared by every connection's task.
#[derive(Debug, Default)]
pub struct LineBudget {
    second: AtomicU64,
    used: AtomicU64,
    skipped: AtomicU64,
}

impl LineBudget {
    /// An unused budget.
    pub const fn new() -> LineBudget {
        LineBudget {
            second: AtomicU64::new(0),
            used: AtomicU64::new(0),
            skipped: AtomicU64::new(0),
        }
    }

    /// Whether one more line may be logged in second `now_s`, and how many lines an
    /// earlier second left out (to be said once, now). Approximate under races by
    /// a line or two, never unbounded.
    pub fn take(&self, now_s: u64) -> (bool, u64) {
        let current = self.second.load(Ordering::Relaxed);
        let mut left_out = 0;
        if now_s != current
            && self
                .second
                .compare_exchange(current, now_s, Ordering::AcqRel, Ordering::Relaxed)
                .is_ok()
        {
            self.used.store(0, Ordering::Relaxed);
            left_out = self.skipped.swap(0, Ordering::Relaxed);
        }
        if self.used.fetch_add(1, Ordering::Relaxed) < LINES_PER_S {
            (true, left_out)
        } else {
            self.skipped.fetch_add(1, Ordering::Relaxed);
            (false, left_out)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_logs_at_most_its_budget_and_the_next_says_how_many_were_left_out() {
        let b = LineBudget::new();
        let logged = (0..100).filter(|_| b.take(7).0).count() as u64;
        assert_eq!(logged, LINES_PER_S);
        assert_eq!(b.take(8), (true, 100 - LINES_PER_S));
        assert_eq!(b.take(8), (true, 0));
    }
}
