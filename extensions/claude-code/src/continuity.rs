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
pub use crate::usage::{Reported, Tokens, Totals, TurnUsage};
use serde::{Deserialize, Serialize};

/// How many applied segments a record remembers (for exactly-once applying).
pub const MAX_APPLIED: usize = 32;
/// How many past sessions a record remembers.
pub const MAX_PAST: usize = 32;

fn round_usd(x: f64) -> f64 {
    (x * 1e9).round() / 1e9
}

/// This turn's usage from what its segment reported, whichever way the version
/// reports: `session_cost` is the session's cumulative cost before the turn as far
/// as continuity knows it (`None` when it does not), `fresh` whether the segment was
/// the session's first process. Answers the turn's usage and the session's
/// cumulative cost after it (when known).
///
/// * `model_usage_since_last_result`, when present, is the turn's, tokens and cost.
/// * Otherwise the tokens are `usage` (per process, and a segment is one process),
///   and the cost is `total_cost_usd` when it is this process's: a fresh session's
///   first process, or `modelUsage`'s tokens equal to `usage`'s (both per
///   process). When `modelUsage` is cumulative (its tokens exceed `usage`'s), the
///   cost is the difference from `session_cost`, or unknown without it.
pub fn turn_usage(
    r: &Reported,
    session_cost: Option<f64>,
    fresh: bool,
) -> (TurnUsage, Option<f64>) {
    let cumulative_after = |turn: Option<f64>| -> Option<f64> {
        match (r.model_usage, r.total_cost_usd) {
            (Some(m), Some(total)) if m.tokens != r.usage && !fresh => Some(total),
            _ => match (session_cost.or(fresh.then_some(0.0)), turn) {
                (Some(before), Some(t)) => Some(round_usd(before + t)),
                _ => None,
            },
        }
    };
    if let Some(t) = r.since_last_result {
        let cost = Some(round_usd(t.cost_usd));
        let after = match (r.model_usage, r.total_cost_usd) {
            (Some(_), Some(total)) => Some(total),
            _ => cumulative_after(cost),
        };
        return (
            TurnUsage {
                tokens: t.tokens,
                cost_usd: cost,
            },
            after,
        );
    }
    let per_process = fresh || r.model_usage.is_some_and(|m| m.tokens == r.usage);
    let cost = if per_process {
        r.total_cost_usd.map(round_usd)
    } else if let (Some(_), Some(total), Some(before)) =
        (r.model_usage, r.total_cost_usd, session_cost)
    {
        (total + 1e-12 >= before).then(|| round_usd(total - before))
    } else {
        None
    };
    (
        TurnUsage {
            tokens: r.usage,
            cost_usd: cost,
        },
        cumulative_after(cost),
    )
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
    pub delta: TurnUsage,
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
    /// The session's cumulative totals (its cost as far as known: `None` once a
    /// turn's cost could not be known).
    #[serde(default)]
    pub totals: Totals,
    /// Whether `totals.cost_usd` is the session's cumulative cost (records from
    /// before this field: not known).
    #[serde(default)]
    pub cost_known: bool,
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
        c.cost_known = true;
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
    /// What the result reported about usage, when a result arrived.
    pub reported: Option<Reported>,
    /// The segment was the session's first process.
    pub fresh: bool,
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
pub fn apply(c: &mut Continuity, end: &TurnEnd) -> (TurnUsage, bool) {
    if let Some(a) = c.applied.iter().find(|a| a.segment == end.segment) {
        return (a.delta, false);
    }
    let mut delta = TurnUsage::default();
    if end.session == c.session || c.session.is_empty() {
        if let Some(r) = &end.reported {
            let before = c.cost_known.then_some(c.totals.cost_usd);
            let (turn, after) = turn_usage(r, before, end.fresh);
            delta = turn;
            let t = &mut c.totals.tokens;
            t.input += turn.tokens.input;
            t.output += turn.tokens.output;
            t.cache_read += turn.tokens.cache_read;
            t.cache_creation += turn.tokens.cache_creation;
            c.totals.cost_usd = after.unwrap_or(0.0);
            c.cost_known = after.is_some();
        }
        if end.lost_session {
            if !c.session.is_empty() {
                c.past_sessions.push(std::mem::take(&mut c.session));
            }
            c.totals = Totals::default();
            c.cost_known = true;
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
    } else if let Some(r) = &end.reported {
        // A segment of a session no longer current: what it says of itself only.
        delta = turn_usage(r, None, end.fresh).0;
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

/// The longest project folder name Claude Code writes whole (in UTF-16 units);
/// a longer one is cut to it and given `-<hash>`.
pub const MAX_PROJECT_NAME: usize = 200;
/// The most entries of `<config>/projects` a transcript lookup reads.
pub const MAX_PROJECT_DIRS: usize = 10_000;

/// Claude Code's project folder name for a working directory, as it derives it
/// (in JavaScript, over UTF-16 code units): every unit but an ASCII letter or digit
/// as `-` (so a character outside the Basic Multilingual Plane, two units, is two
/// dashes); a name over [`MAX_PROJECT_NAME`] units is cut to it and followed by `-`
/// and the base-36 absolute value of the directory's 32-bit Java-style string hash.
pub fn project_name(cwd: &str) -> String {
    let units: Vec<u16> = cwd.encode_utf16().collect();
    let name: String = units
        .iter()
        .map(|u| match char::from_u32(u32::from(*u)) {
            Some(c) if c.is_ascii_alphanumeric() => c,
            _ => '-',
        })
        .collect();
    if name.len() <= MAX_PROJECT_NAME {
        return name;
    }
    let mut h: i32 = 0;
    for u in &units {
        h = h.wrapping_mul(31).wrapping_add(i32::from(*u));
    }
    format!(
        "{}-{}",
        &name[..MAX_PROJECT_NAME],
        base36(i64::from(h).unsigned_abs())
    )
}

fn base36(mut n: u64) -> String {
    const DIGITS: &[u8; 36] = b"0123456789abcdefghijklmnopqrstuvwxyz";
    let mut out = Vec::new();
    loop {
        out.push(DIGITS[(n % 36) as usize]);
        n /= 36;
        if n == 0 {
            break;
        }
    }
    out.reverse();
    String::from_utf8_lossy(&out).into_owned()
}

/// The path of a session's transcript as Claude Code names it:
/// `<config>/projects/<project_name(cwd)>/<session>.jsonl`.
pub fn transcript_path(
    config_dir: &std::path::Path,
    cwd: &str,
    session: &str,
) -> std::path::PathBuf {
    config_dir
        .join("projects")
        .join(project_name(cwd))
        .join(format!("{session}.jsonl"))
}

/// Where a session's transcript is: the derived path when it exists, else the
/// `<session>.jsonl` of any project folder (a version that names folders otherwise),
/// reading at most [`MAX_PROJECT_DIRS`] entries. `None` when there is none.
///
/// claude's config directory is writable by a sandboxed segment, so below the
/// directory itself nothing is followed: `projects`, the project folder and the
/// transcript count only as a real directory, directory and regular file, never a
/// symlink to one ([`sdk::nofollow`]).
pub fn find_transcript(
    config_dir: &std::path::Path,
    cwd: &str,
    session: &str,
) -> Option<std::path::PathBuf> {
    if session.is_empty() || session.contains('/') || session.starts_with('.') {
        return None;
    }
    let file = format!("{session}.jsonl");
    let projects = sdk::nofollow::Dir::open_configured(config_dir)
        .and_then(|d| d.subdir("projects"))
        .ok()?;
    let found = |name: &str| {
        projects
            .subdir(name)
            .is_ok_and(|folder| folder.is_file(&file))
            .then(|| config_dir.join("projects").join(name).join(&file))
    };
    if let Some(p) = found(&project_name(cwd)) {
        return Some(p);
    }
    // The names of the folder opened (not of whatever `projects` names now).
    std::fs::read_dir(format!("/proc/self/fd/{}", projects.raw_fd()))
        .ok()?
        .take(MAX_PROJECT_DIRS)
        .flatten()
        .find_map(|e| found(e.file_name().to_str()?))
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

    fn tokens(input: u64, output: u64) -> Tokens {
        Tokens {
            input,
            output,
            ..Tokens::default()
        }
    }

    fn totals(input: u64, output: u64, cost_usd: f64) -> Totals {
        Totals {
            tokens: tokens(input, output),
            cost_usd,
        }
    }

    /// Three turns of one session, 4,000 input tokens and $0.02 each, as each
    /// version reports them: every turn's usage is its own (12,000 in all).
    #[test]
    fn per_turn_usage_whichever_way_the_version_reports() {
        let per_turn = totals(4000, 100, 0.02);
        // 2.1.332: usage per process; total_cost_usd and modelUsage cumulative;
        // model_usage_since_last_result the turn's.
        let current = |n: u64| Reported {
            usage: per_turn.tokens,
            total_cost_usd: Some(0.02 * n as f64),
            model_usage: Some(totals(4000 * n, 100 * n, 0.02 * n as f64)),
            since_last_result: Some(per_turn),
        };
        // 2.1.100: everything per process.
        let old = |_n: u64| Reported {
            usage: per_turn.tokens,
            total_cost_usd: Some(0.02),
            model_usage: Some(per_turn),
            since_last_result: None,
        };
        // A version between: cumulative modelUsage and cost, no since-last-result.
        let between = |n: u64| Reported {
            since_last_result: None,
            ..current(n)
        };
        for (name, report) in [
            ("current", &current as &dyn Fn(u64) -> Reported),
            ("old", &old),
            ("between", &between),
        ] {
            let mut c = Continuity::default();
            let mut sum = 0;
            for n in 1..=3u64 {
                let dec = decide(
                    &c,
                    &cfg(json!({})),
                    n > 1,
                    0,
                    "ex",
                    1,
                    &n.to_string(),
                    || "s".to_string(),
                );
                record_decision(&mut c, &dec);
                let end = TurnEnd {
                    segment: format!("ex/{n}"),
                    session: "s".into(),
                    reported: Some(report(n)),
                    fresh: n == 1,
                    state: Some("building".into()),
                    note: Some("note".into()),
                    ..TurnEnd::default()
                };
                let (turn, changed) = apply(&mut c, &end);
                assert!(changed);
                assert_eq!(turn.tokens, per_turn.tokens, "{name} turn {n}");
                let cost = turn
                    .cost_usd
                    .unwrap_or_else(|| panic!("{name} turn {n}: no cost"));
                assert!((cost - 0.02).abs() < 1e-9, "{name} turn {n}: {cost}");
                sum += turn.tokens.input;
            }
            assert_eq!(sum, 12_000, "{name}");
        }
    }

    #[test]
    fn a_cost_that_cannot_be_known_is_unknown() {
        // Cumulative modelUsage on a resumed session whose earlier cost is not known
        // (a record from before, or an attached session's).
        let r = Reported {
            usage: tokens(4000, 100),
            total_cost_usd: Some(0.06),
            model_usage: Some(totals(12000, 300, 0.06)),
            since_last_result: None,
        };
        let (turn, after) = turn_usage(&r, None, false);
        assert_eq!(turn.tokens, tokens(4000, 100));
        assert_eq!(turn.cost_usd, None);
        assert_eq!(after, Some(0.06));
        // No modelUsage and no way to tell: unknown, never the session's total.
        let r = Reported {
            usage: tokens(4000, 100),
            total_cost_usd: Some(0.06),
            model_usage: None,
            since_last_result: None,
        };
        assert_eq!(turn_usage(&r, Some(0.04), false).0.cost_usd, None);
        assert_eq!(turn_usage(&r, None, true).0.cost_usd, Some(0.06));
    }

    #[test]
    fn applying_twice_changes_nothing() {
        let mut c = Continuity::default();
        let dec = d(&c, &cfg(json!({})), false, 0);
        record_decision(&mut c, &dec);
        let end = TurnEnd {
            segment: "ex/1".into(),
            session: "new".into(),
            reported: Some(Reported {
                usage: tokens(7, 0),
                total_cost_usd: Some(0.1),
                ..Reported::default()
            }),
            fresh: true,
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

    /// As Claude Code 2.1.332 named them (seen in its projects folder).
    #[test]
    fn transcript_paths_of_long_and_astral_directories() {
        let at = |cwd: &str| {
            transcript_path(std::path::Path::new("/c"), cwd, "s")
                .display()
                .to_string()
        };
        let long = format!("/tmp/ccx/{}", "d".repeat(230));
        assert_eq!(
            at(&long),
            format!("/c/projects/-tmp-ccx-{}-borema/s.jsonl", "d".repeat(191))
        );
        assert_eq!(
            at("/tmp/ccx/e\u{1F600}x"),
            "/c/projects/-tmp-ccx-e--x/s.jsonl"
        );
        assert_eq!(
            at("/tmp/ccx/\u{e9}_\u{fc}"),
            "/c/projects/-tmp-ccx----/s.jsonl"
        );
        let exactly = format!("/{}", "a".repeat(199));
        assert_eq!(
            at(&exactly),
            format!("/c/projects/-{}/s.jsonl", "a".repeat(199))
        );
    }

    #[test]
    fn a_transcript_is_found_by_its_session_whatever_its_folder() {
        let dir = std::env::temp_dir().join(format!("oc-cc-transcripts-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let odd = dir.join("projects/some-other-naming");
        std::fs::create_dir_all(&odd).unwrap();
        std::fs::write(odd.join("s-9.jsonl"), "{}\n").unwrap();
        assert_eq!(
            find_transcript(&dir, "/w/\u{1F600}", "s-9"),
            Some(odd.join("s-9.jsonl"))
        );
        assert_eq!(find_transcript(&dir, "/w", "s-8"), None);
        assert_eq!(find_transcript(&dir, "/w", "../x"), None);
        let long = format!("/w/{}", "x".repeat(300));
        let derived = transcript_path(&dir, &long, "s-7");
        std::fs::create_dir_all(derived.parent().unwrap()).unwrap();
        std::fs::write(&derived, "{}\n").unwrap();
        assert_eq!(find_transcript(&dir, &long, "s-7"), Some(derived));
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_transcript_behind_a_symlink_is_not_found() {
        let base = std::env::temp_dir().join(format!("oc-cc-linked-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        // Outside the config directory: a transcript, a projects folder.
        let elsewhere = base.join("elsewhere");
        std::fs::create_dir_all(elsewhere.join("p")).unwrap();
        std::fs::write(elsewhere.join("p/s-1.jsonl"), "{}\n").unwrap();
        std::fs::write(elsewhere.join("secret.txt"), "secret\n").unwrap();
        // The config directory, as a symlink the operator made: followed.
        let real = base.join("real-config");
        std::fs::create_dir_all(real.join("projects/-w")).unwrap();
        let config = base.join("config");
        std::os::unix::fs::symlink(&real, &config).unwrap();
        std::fs::write(real.join("projects/-w/s-0.jsonl"), "{}\n").unwrap();
        assert!(find_transcript(&config, "/w", "s-0").is_some());
        // A transcript that is a symlink, a project folder that is one.
        std::os::unix::fs::symlink(
            elsewhere.join("secret.txt"),
            real.join("projects/-w/s-2.jsonl"),
        )
        .unwrap();
        std::os::unix::fs::symlink(elsewhere.join("p"), real.join("projects/-x")).unwrap();
        assert_eq!(find_transcript(&config, "/w", "s-2"), None);
        assert_eq!(find_transcript(&config, "/x", "s-1"), None);
        assert_eq!(find_transcript(&config, "/w", "s-1"), None);
        // `projects` itself a symlink.
        std::fs::remove_dir_all(real.join("projects")).unwrap();
        std::os::unix::fs::symlink(&elsewhere, real.join("projects")).unwrap();
        assert_eq!(find_transcript(&config, "/p", "s-1"), None);
        let _ = std::fs::remove_dir_all(&base);
    }
}
