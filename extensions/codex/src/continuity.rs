//! The Work's session, private in the extension's KV (`work/<work_id>`): the codex
//! session (thread) the next turn resumes and its running totals as of the last
//! turn. codex's `turn.completed` reports the session's totals, not the turn's, so
//! a turn's usage is its totals less the baseline its segment recorded at the launch
//! (zero for a fresh session).

use crate::stream::Tokens;
use serde::{Deserialize, Serialize};

/// How many applied segments the record remembers (a segment is applied once).
pub const MAX_APPLIED: usize = 32;

/// The record.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Continuity {
    /// The session the next turn resumes; empty for none.
    #[serde(default)]
    pub session: String,
    /// The session's running totals after its last turn.
    #[serde(default)]
    pub totals: Tokens,
    /// The segments applied (`<execution>/<segment>`), newest last.
    #[serde(default)]
    pub applied: Vec<String>,
    /// When the last turn ended (ms).
    #[serde(default)]
    pub ended_ms: i64,
}

/// How a segment launches.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    /// A new session (`codex exec`).
    Fresh,
    /// The Work's session (`codex exec resume <session>`).
    Resume,
}

/// The KV key of a Work's record.
pub fn key(work_id: &str) -> String {
    format!("work/{work_id}")
}

/// How the next segment launches: it resumes the recorded session when its
/// rollout is still there (`exists`), else starts afresh from a zero baseline.
pub fn decide(c: &Continuity, exists: impl Fn(&str) -> bool) -> (Kind, String, Tokens) {
    if !c.session.is_empty() && exists(&c.session) {
        (Kind::Resume, c.session.clone(), c.totals)
    } else {
        (Kind::Fresh, String::new(), Tokens::default())
    }
}

/// What a finished segment says for the record.
#[derive(Debug, Clone, PartialEq)]
pub struct TurnEnd {
    /// `<execution>/<segment>`.
    pub segment: String,
    /// The session it ran (empty: none, or lost).
    pub session: String,
    /// The session's totals after it, when known.
    pub totals: Option<Tokens>,
    /// When it ended (ms).
    pub ended_ms: i64,
}

/// Applies a segment's end to the record, once; answers whether it changed.
pub fn apply(c: &mut Continuity, end: &TurnEnd) -> bool {
    if c.applied.contains(&end.segment) {
        return false;
    }
    if end.session != c.session {
        c.totals = Tokens::default();
    }
    c.session = end.session.clone();
    if let Some(t) = end.totals {
        c.totals = t;
    }
    c.ended_ms = end.ended_ms;
    c.applied.push(end.segment.clone());
    let extra = c.applied.len().saturating_sub(MAX_APPLIED);
    c.applied.drain(..extra);
    true
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn a_segment_applies_once_and_a_lost_session_starts_afresh() {
        let mut c = Continuity::default();
        assert_eq!(decide(&c, |_| true).0, Kind::Fresh);
        let t = Tokens {
            input: 5,
            ..Tokens::default()
        };
        let end = TurnEnd {
            segment: "e/1".into(),
            session: "s".into(),
            totals: Some(t),
            ended_ms: 1,
        };
        assert!(apply(&mut c, &end));
        assert!(!apply(&mut c, &end));
        assert_eq!(decide(&c, |_| true), (Kind::Resume, "s".into(), t));
        assert_eq!(decide(&c, |_| false).0, Kind::Fresh);
    }
}
