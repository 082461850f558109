//! Private continuity: what the executor keeps per Work in its own KV
//! namespace (`claude-code`, key `work/<work id>`). Core never reads it.
//!
//! It holds the session and past sessions, the turns that ended with a status,
//! the handoff note and last state, the last turn's end and context, the
//! session's cumulative totals, the in-flight decision and the attach command.
//! Records left by the removed handoff experiment (`trial`, `feedback`) load:
//! unknown fields are ignored.

use crate::config::{ClaudeConfig, ColdTurns};
use crate::prompt::Shape;
use crate::stream::Tokens;
use serde::{Deserialize, Serialize};

/// How many applied segments a record remembers (for exactly-once applying).
pub const MAX_APPLIED: usize = 32;
/// How many past sessions a record remembers.
pub const MAX_PAST: usize = 32;

/// A session's cumulative totals.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Totals {
    /// Tokens.
    #[serde(default)]
    pub tokens: Tokens,
    /// Cost in USD.
    #[serde(default)]
    pub cost_usd: f64,
}

impl Totals {
    /// This turn's share of `now` (the session's totals as reported at the end
    /// of the turn), given the totals before it. A resumed session reports
    /// cumulative totals; totals that went backwards (a fork) are left as
    /// reported.
    pub fn delta(&self, now: &Totals) -> Totals {
        let t = &now.tokens;
        let p = &self.tokens;
        let backwards = t.input < p.input
            || t.output < p.output
            || t.cache_read < p.cache_read
            || t.cache_creation < p.cache_creation
            || now.cost_usd + 1e-12 < self.cost_usd;
        if backwards {
            return *now;
        }
        Totals {
            tokens: Tokens {
                input: t.input - p.input,
                output: t.output - p.output,
                cache_read: t.cache_read - p.cache_read,
                cache_creation: t.cache_creation - p.cache_creation,
            },
            cost_usd: ((now.cost_usd - self.cost_usd) * 1e9).round() / 1e9,
        }
    }
}

/// Resume the session or start a fresh one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    /// `--resume <session>`.
    Resume,
    /// `--session-id <session>`.
    Fresh,
}

/// The decision a segment launches on, recorded before the launch.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Decision {
    /// The Execution that decided.
    pub execution_id: String,
    /// Its epoch.
    pub epoch: u64,
    /// The segment directory's name within the Execution.
    pub segment: String,
    /// Resume or fresh.
    pub kind: Kind,
    /// The session.
    pub session: String,
    /// The turn's shape.
    pub shape: Shape,
    /// Why a fresh session was started from the note: `size`, `cold` or `missing`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub handoff_reason: String,
}

/// A segment already applied, with the delta it applied.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Applied {
    /// `<execution>/<segment>`.
    pub segment: String,
    /// The per-turn usage it applied.
    pub delta: Totals,
}

/// The record.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Continuity {
    /// The current session.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub session: String,
    /// Earlier sessions, oldest first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub past_sessions: Vec<String>,
    /// Turns that ended with a status.
    #[serde(default)]
    pub turns: u64,
    /// The handoff note; `None` when never written.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    /// The last turn's state.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub last_state: String,
    /// When the last turn ended (ms since the epoch).
    #[serde(default)]
    pub last_turn_end_ms: i64,
    /// The session's context when the last turn ended.
    #[serde(default)]
    pub context_tokens: u64,
    /// The session's cumulative totals.
    #[serde(default)]
    pub totals: Totals,
    /// The decision of the segment in flight.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub in_flight: Option<Decision>,
    /// The attach command.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub attach: Vec<String>,
    /// Segments applied, newest last.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub applied: Vec<Applied>,
}

/// The KV key of a Work's record.
pub fn key(work_id: &str) -> String {
    format!("work/{work_id}")
}

/// Why a session hands off, if it does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Handoff {
    Size,
    Cold,
    Missing,
}

impl Handoff {
    fn as_str(self) -> &'static str {
        match self {
            Handoff::Size => "size",
            Handoff::Cold => "cold",
            Handoff::Missing => "missing",
        }
    }
}

/// Decides how the next segment starts: resume the session or start a fresh
/// one (a new session ID from `new_session`), and the turn's shape.
///
/// * No session: a fresh session on the first turn's shape.
/// * The session's transcript is gone: a fresh session, from the note when
///   one was written (a handoff, reason `missing`), else a first turn.
/// * The session is large (its last turn ended with more than
///   `handoff_tokens` of context, unless 0) and has a note: a handoff (`size`).
/// * The session is cold (its last turn ended more than `handoff_minutes`
///   ago), has a note and `cold_turns` is `handoff`: a handoff (`cold`).
/// * Otherwise it resumes. A session without a note always resumes while its
///   transcript exists: there is nothing to hand off from.
#[allow(clippy::too_many_arguments)]
pub fn decide(
    c: &Continuity,
    cfg: &ClaudeConfig,
    transcript_exists: bool,
    now_ms: i64,
    execution_id: &str,
    epoch: u64,
    segment: &str,
    new_session: impl FnOnce() -> String,
) -> Decision {
    let decision = |kind, session: String, shape, reason: Option<Handoff>| Decision {
        execution_id: execution_id.to_string(),
        epoch,
        segment: segment.to_string(),
        kind,
        session,
        shape,
        handoff_reason: reason.map(|r| r.as_str().to_string()).unwrap_or_default(),
    };
    let note = c.note.as_deref().filter(|n| !n.trim().is_empty());
    if c.session.is_empty() {
        let shape = if note.is_some() {
            Shape::Handoff
        } else {
            Shape::First
        };
        return decision(Kind::Fresh, new_session(), shape, None);
    }
    if !transcript_exists {
        return match note {
            Some(_) => decision(
                Kind::Fresh,
                new_session(),
                Shape::Handoff,
                Some(Handoff::Missing),
            ),
            None => decision(Kind::Fresh, new_session(), Shape::First, None),
        };
    }
    if note.is_some() {
        let large = cfg.handoff_tokens > 0 && c.context_tokens > cfg.handoff_tokens;
        if large {
            return decision(
                Kind::Fresh,
                new_session(),
                Shape::Handoff,
                Some(Handoff::Size),
            );
        }
        let cold_after = i64::try_from(cfg.handoff_minutes)
            .unwrap_or(i64::MAX / 120_000)
            .saturating_mul(60_000);
        let cold = c.last_turn_end_ms > 0 && now_ms - c.last_turn_end_ms > cold_after;
        if cold && cfg.cold_turns == ColdTurns::Handoff {
            return decision(
                Kind::Fresh,
                new_session(),
                Shape::Handoff,
                Some(Handoff::Cold),
            );
        }
    }
    decision(Kind::Resume, c.session.clone(), Shape::Events, None)
}

/// Records `d` as the decision in flight, moving the old session to the past
/// sessions when `d` starts a new one.
pub fn record_decision(c: &mut Continuity, d: &Decision) {
    if d.session != c.session {
        if !c.session.is_empty() {
            c.past_sessions.push(std::mem::take(&mut c.session));
            if c.past_sessions.len() > MAX_PAST {
                let extra = c.past_sessions.len() - MAX_PAST;
                c.past_sessions.drain(..extra);
            }
        }
        c.session = d.session.clone();
        c.totals = Totals::default();
        c.context_tokens = 0;
    }
    c.in_flight = Some(d.clone());
}

/// What a finished segment applies to continuity.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TurnEnd {
    /// `<execution>/<segment>`.
    pub segment: String,
    /// The session the segment ran.
    pub session: String,
    /// The session's totals as the result reported them, when it did.
    pub totals: Option<Totals>,
    /// The state, when the turn ended with a status.
    pub state: Option<String>,
    /// The handoff note the status wrote, when it wrote one.
    pub note: Option<String>,
    /// The context at the end.
    pub context_tokens: u64,
    /// When it ended.
    pub ended_ms: i64,
    /// claude could not find the session.
    pub lost_session: bool,
    /// The attach command.
    pub attach: Vec<String>,
}

/// Applies a finished segment, once: a segment already applied changes
/// nothing and answers the delta it applied then. Returns the per-turn delta
/// and whether the record changed.
pub fn apply(c: &mut Continuity, end: &TurnEnd) -> (Totals, bool) {
    if let Some(a) = c.applied.iter().find(|a| a.segment == end.segment) {
        return (a.delta, false);
    }
    let mut delta = Totals::default();
    if end.session == c.session || c.session.is_empty() {
        if let Some(now) = end.totals {
            delta = c.totals.delta(&now);
            c.totals = now;
        }
        if end.lost_session {
            if !c.session.is_empty() {
                c.past_sessions.push(std::mem::take(&mut c.session));
            }
            c.totals = Totals::default();
            c.context_tokens = 0;
        } else {
            if c.session.is_empty() {
                c.session = end.session.clone();
            }
            if end.context_tokens > 0 {
                c.context_tokens = end.context_tokens;
            }
            if !end.attach.is_empty() {
                c.attach = end.attach.clone();
            }
        }
    } else if let Some(now) = end.totals {
        // A segment of a session no longer current: its own totals only.
        delta = now;
    }
    if let Some(state) = &end.state {
        c.turns += 1;
        c.last_state = state.clone();
        c.last_turn_end_ms = end.ended_ms;
        if let Some(n) = &end.note {
            c.note = Some(n.clone());
        }
    }
    if c.in_flight
        .as_ref()
        .is_some_and(|d| format!("{}/{}", d.execution_id, d.segment) == end.segment)
    {
        c.in_flight = None;
    }
    c.applied.push(Applied {
        segment: end.segment.clone(),
        delta,
    });
    if c.applied.len() > MAX_APPLIED {
        let extra = c.applied.len() - MAX_APPLIED;
        c.applied.drain(..extra);
    }
    (delta, true)
}

/// The path of a session's transcript: `<config>/projects/<cwd with every
/// character but ASCII letters and digits as ->/<session>.jsonl`.
pub fn transcript_path(
    config_dir: &std::path::Path,
    cwd: &str,
    session: &str,
) -> std::path::PathBuf {
    let project: String = cwd
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect();
    config_dir
        .join("projects")
        .join(project)
        .join(format!("{session}.jsonl"))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use serde_json::json;

    fn cfg(v: serde_json::Value) -> ClaudeConfig {
        crate::config::parse(&v).unwrap()
    }

    fn with_session() -> Continuity {
        Continuity {
            session: "s-1".into(),
            note: Some("the note".into()),
            last_turn_end_ms: 1_000_000,
            context_tokens: 1000,
            ..Continuity::default()
        }
    }

    fn d(c: &Continuity, cfg: &ClaudeConfig, exists: bool, now: i64) -> Decision {
        decide(c, cfg, exists, now, "ex", 1, "1", || "new".to_string())
    }

    #[test]
    fn decisions() {
        let warm = 1_000_000 + 60_000;
        let cold = 1_000_000 + 56 * 60_000;
        let def = cfg(json!({}));
        let first = d(&Continuity::default(), &def, false, warm);
        assert_eq!(
            (first.kind, first.shape, first.session.as_str()),
            (Kind::Fresh, Shape::First, "new")
        );
        let c = with_session();
        let r = d(&c, &def, true, warm);
        assert_eq!(
            (r.kind, r.shape, r.session.as_str()),
            (Kind::Resume, Shape::Events, "s-1")
        );
        let h = d(&c, &def, true, cold);
        assert_eq!(
            (h.kind, h.shape, h.handoff_reason.as_str()),
            (Kind::Fresh, Shape::Handoff, "cold")
        );
        let r = d(&c, &cfg(json!({"cold_turns": "resume"})), true, cold);
        assert_eq!(r.kind, Kind::Resume);
        let m = d(&c, &def, false, warm);
        assert_eq!(
            (m.kind, m.handoff_reason.as_str()),
            (Kind::Fresh, "missing")
        );
        let mut big = with_session();
        big.context_tokens = 400_001;
        let s = d(&big, &def, true, warm);
        assert_eq!((s.kind, s.handoff_reason.as_str()), (Kind::Fresh, "size"));
        assert_eq!(
            d(&big, &cfg(json!({"handoff_tokens": 0})), true, warm).kind,
            Kind::Resume
        );
        let mut no_note = with_session();
        no_note.note = None;
        assert_eq!(d(&no_note, &def, true, cold).kind, Kind::Resume);
    }

    #[test]
    fn per_turn_deltas() {
        let before = Totals {
            tokens: Tokens {
                input: 10,
                output: 5,
                cache_read: 100,
                cache_creation: 20,
            },
            cost_usd: 0.5,
        };
        let now = Totals {
            tokens: Tokens {
                input: 15,
                output: 9,
                cache_read: 300,
                cache_creation: 20,
            },
            cost_usd: 0.75,
        };
        let delta = before.delta(&now);
        assert_eq!(
            delta.tokens,
            Tokens {
                input: 5,
                output: 4,
                cache_read: 200,
                cache_creation: 0
            }
        );
        assert!((delta.cost_usd - 0.25).abs() < 1e-9);
        // Backwards (a fork): left as reported.
        assert_eq!(now.delta(&before), before);
    }

    #[test]
    fn applying_twice_changes_nothing() {
        let mut c = Continuity::default();
        let dec = d(&c, &cfg(json!({})), false, 0);
        record_decision(&mut c, &dec);
        let end = TurnEnd {
            segment: "ex/1".into(),
            session: "new".into(),
            totals: Some(Totals {
                tokens: Tokens {
                    input: 7,
                    ..Tokens::default()
                },
                cost_usd: 0.1,
            }),
            state: Some("building".into()),
            note: Some("n".into()),
            context_tokens: 50,
            ended_ms: 9,
            ..TurnEnd::default()
        };
        let (delta, changed) = apply(&mut c, &end);
        assert!(changed);
        assert_eq!(delta.tokens.input, 7);
        assert_eq!(c.turns, 1);
        assert!(c.in_flight.is_none());
        let snapshot = c.clone();
        let (again, changed) = apply(&mut c, &end);
        assert!(!changed);
        assert_eq!(again, delta);
        assert_eq!(c, snapshot);
    }

    #[test]
    fn old_records_load() {
        let old = json!({"session": "s", "turns": 3, "trial": {"arm": "b"}, "feedback": ["q"]});
        let c: Continuity = serde_json::from_value(old).unwrap();
        assert_eq!(c.session, "s");
        assert_eq!(c.turns, 3);
    }

    #[test]
    fn transcript_paths() {
        let p = transcript_path(std::path::Path::new("/h/.claude"), "/work/a_b.c", "s1");
        assert_eq!(
            p,
            std::path::PathBuf::from("/h/.claude/projects/-work-a-b-c/s1.jsonl")
        );
    }
}
