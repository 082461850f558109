//! What a segment's output says about its turn: codex's `--json` events
//! (`out.jsonl`), its stderr, and the session's rollout file under `CODEX_HOME`
//! (`sessions/YYYY/MM/DD/rollout-<ts>-<session>.jsonl`), which alone says a usage
//! limit's reset and the session's running totals when a turn failed. Every line is
//! read on its own; one that is not JSON, or of a type this release does not know,
//! is counted, never fatal.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::path::{Path, PathBuf};

/// The toolbelt's MCP server, as codex names it in `mcp_tool_call` items.
pub const TOOLBELT_SERVER: &str = "open-conduit";
/// How deep the rollout search goes under `sessions/` (year, month, day).
const ROLLOUT_DEPTH: usize = 3;
/// The most directory entries the rollout search reads.
const MAX_ENTRIES: usize = 100_000;
/// The most bytes of a rollout read: its last ones (the last turn's counts and
/// failure are at its end; a long session's rollout grows past any bound).
pub const MAX_ROLLOUT_BYTES: u64 = 8 * 1024 * 1024;

/// Token counts as codex reports them (OpenAI's: `input` includes `cached_input`,
/// `output` includes `reasoning_output`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Tokens {
    /// `input_tokens`.
    #[serde(default)]
    pub input: u64,
    /// `cached_input_tokens`.
    #[serde(default)]
    pub cached_input: u64,
    /// `cache_write_input_tokens`.
    #[serde(default)]
    pub cache_write: u64,
    /// `output_tokens`.
    #[serde(default)]
    pub output: u64,
    /// `reasoning_output_tokens`.
    #[serde(default)]
    pub reasoning_output: u64,
}

impl Tokens {
    /// Reads a `usage` object (of `turn.completed`, or a rollout's
    /// `total_token_usage`).
    pub fn from_usage(u: &Value) -> Tokens {
        let n = |k: &str| u.get(k).and_then(Value::as_u64).unwrap_or(0);
        Tokens {
            input: n("input_tokens"),
            cached_input: n("cached_input_tokens"),
            cache_write: n("cache_write_input_tokens"),
            output: n("output_tokens"),
            reasoning_output: n("reasoning_output_tokens"),
        }
    }

    /// `self - earlier`, each count at least 0 (a session's totals only grow; a
    /// fresh session's baseline is zero).
    pub fn since(&self, earlier: &Tokens) -> Tokens {
        Tokens {
            input: self.input.saturating_sub(earlier.input),
            cached_input: self.cached_input.saturating_sub(earlier.cached_input),
            cache_write: self.cache_write.saturating_sub(earlier.cache_write),
            output: self.output.saturating_sub(earlier.output),
            reasoning_output: self
                .reasoning_output
                .saturating_sub(earlier.reasoning_output),
        }
    }
}

/// What a segment's events say.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Turn {
    /// The session (`thread.started`).
    pub thread_id: String,
    /// `turn.completed` arrived.
    pub completed: bool,
    /// The session's running totals `turn.completed` reported.
    pub totals: Option<Tokens>,
    /// `turn.failed`'s message.
    pub failed: Option<String>,
    /// The last `error` event's message.
    pub error: Option<String>,
    /// The last `agent_message` text.
    pub last_message: Option<String>,
    /// Completed MCP tool calls, and how many were the toolbelt's.
    pub tool_calls: u64,
    /// Completed shell commands.
    pub commands: u64,
    /// The toolbelt's calls that failed (`tool: message`).
    pub toolbelt_failed: Vec<String>,
    /// Lines that were not JSON or of an unknown type.
    pub unknown_lines: u64,
}

/// Parses `out.jsonl`.
pub fn parse(out: &str) -> Turn {
    let mut t = Turn::default();
    for line in out.lines() {
        let line = line.trim();
        if line.is_empty() {
            continue;
        }
        let Ok(v) = serde_json::from_str::<Value>(line) else {
            t.unknown_lines += 1;
            continue;
        };
        let text = |p: &str| v.pointer(p).and_then(Value::as_str).map(str::to_string);
        match v.get("type").and_then(Value::as_str).unwrap_or("") {
            "thread.started" => {
                if let Some(id) = text("/thread_id") {
                    t.thread_id = id;
                }
            }
            "turn.started" | "item.started" | "item.updated" => {}
            "turn.completed" => {
                t.completed = true;
                t.totals = v.get("usage").map(Tokens::from_usage);
            }
            "turn.failed" => t.failed = Some(text("/error/message").unwrap_or_default()),
            "error" => t.error = text("/message"),
            "item.completed" => {
                let item = v.get("item").unwrap_or(&Value::Null);
                match item.get("type").and_then(Value::as_str).unwrap_or("") {
                    "agent_message" => {
                        t.last_message =
                            item.get("text").and_then(Value::as_str).map(str::to_string)
                    }
                    "mcp_tool_call" => {
                        t.tool_calls += 1;
                        let server = item.get("server").and_then(Value::as_str).unwrap_or("");
                        let failed = item.get("status").and_then(Value::as_str) == Some("failed");
                        if server == TOOLBELT_SERVER && failed {
                            let tool = item.get("tool").and_then(Value::as_str).unwrap_or("");
                            let why = item
                                .pointer("/error/message")
                                .and_then(Value::as_str)
                                .unwrap_or("");
                            t.toolbelt_failed.push(format!("{tool}: {why}"));
                        }
                    }
                    "command_execution" => t.commands += 1,
                    _ => {}
                }
            }
            _ => t.unknown_lines += 1,
        }
    }
    t
}

/// A usage limit, as the turn's failure and the rollout say it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Limit {
    /// When it resets (ms), when the server said.
    pub reset_ms: Option<i64>,
}

/// Whether codex's failure message is a usage limit's (its wording, 0.171.0).
pub fn limit_message(message: &str) -> bool {
    let m = message.replace('\u{2019}', "'");
    m.starts_with("You've hit your usage limit") || m.starts_with("Quota exceeded")
}

/// What the rollout says: the last running totals, and a usage limit of the last
/// turn.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Rollout {
    /// The last `token_count`'s `total_token_usage`.
    pub totals: Option<Tokens>,
    /// The last turn ended on `codex_error_info: usage_limit_exceeded`.
    pub limited: bool,
    /// The latest `resets_at` of a rate-limit window at 100% (ms).
    pub reset_ms: Option<i64>,
}

/// The rollout file of `session` under `home` (`sessions/*/*/*/rollout-*-<session>.jsonl`).
pub fn find_rollout(home: &Path, session: &str) -> Option<PathBuf> {
    if session.is_empty() {
        return None;
    }
    let suffix = format!("-{session}.jsonl");
    let mut stack = vec![(home.join("sessions"), 0usize)];
    let mut seen = 0usize;
    while let Some((dir, depth)) = stack.pop() {
        for e in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            seen += 1;
            if seen > MAX_ENTRIES {
                eprintln!(
                    "codex: over {MAX_ENTRIES} entries under {}: the session {session} is taken as gone",
                    home.join("sessions").display()
                );
                return None;
            }
            let Ok(kind) = e.file_type() else { continue };
            let name = e.file_name();
            let name = name.to_string_lossy();
            if kind.is_dir() && depth < ROLLOUT_DEPTH {
                stack.push((e.path(), depth + 1));
            } else if kind.is_file() && name.starts_with("rollout-") && name.ends_with(&suffix) {
                return Some(e.path());
            }
        }
    }
    None
}

/// The last [`MAX_ROLLOUT_BYTES`] of the rollout at `path`, from its first whole
/// line; never through a symlink.
pub fn read_tail(path: &Path) -> std::io::Result<String> {
    use std::io::{Read, Seek, SeekFrom};
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(nix::libc::O_NOFOLLOW)
        .open(path)?;
    let len = f.metadata()?.len();
    let from = len.saturating_sub(MAX_ROLLOUT_BYTES);
    f.seek(SeekFrom::Start(from))?;
    let mut bytes = Vec::new();
    f.take(MAX_ROLLOUT_BYTES).read_to_end(&mut bytes)?;
    if from > 0 {
        eprintln!(
            "codex: {} is over {MAX_ROLLOUT_BYTES} bytes: only its last {MAX_ROLLOUT_BYTES} are read",
            path.display()
        );
        let cut = bytes
            .iter()
            .position(|b| *b == b'\n')
            .map_or(bytes.len(), |i| i + 1);
        bytes.drain(..cut);
    }
    Ok(String::from_utf8_lossy(&bytes).into_owned())
}

/// Reads a rollout's text.
pub fn read_rollout(text: &str) -> Rollout {
    let mut r = Rollout::default();
    for line in text.lines() {
        let Ok(v) = serde_json::from_str::<Value>(line) else {
            continue;
        };
        if v.get("type").and_then(Value::as_str) != Some("event_msg") {
            continue;
        }
        let p = v.get("payload").unwrap_or(&Value::Null);
        match p.get("type").and_then(Value::as_str).unwrap_or("") {
            "token_count" => {
                if let Some(u) = p.pointer("/info/total_token_usage") {
                    r.totals = Some(Tokens::from_usage(u));
                }
                for w in ["primary", "secondary"] {
                    let Some(win) = p.pointer(&format!("/rate_limits/{w}")) else {
                        continue;
                    };
                    let full = win
                        .get("used_percent")
                        .and_then(Value::as_f64)
                        .is_some_and(|u| u >= 100.0);
                    let at = win.get("resets_at").and_then(Value::as_i64);
                    if let (true, Some(at)) = (full, at) {
                        let ms = if at < 100_000_000_000 { at * 1000 } else { at };
                        r.reset_ms = r.reset_ms.max(Some(ms));
                    }
                }
            }
            "task_started" => r.limited = false,
            "task_complete" | "error" => {
                let info = p
                    .pointer("/error/codex_error_info")
                    .or_else(|| p.get("codex_error_info"))
                    .and_then(Value::as_str);
                if info == Some("usage_limit_exceeded") {
                    r.limited = true;
                }
            }
            _ => {}
        }
    }
    r
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn events_and_rollouts() {
        let out = r#"{"type":"thread.started","thread_id":"t-1"}
{"type":"item.completed","item":{"id":"item_0","type":"error","message":"Model metadata"}}
{"type":"item.completed","item":{"id":"item_1","type":"mcp_tool_call","server":"open-conduit","tool":"declare_outcome","arguments":{},"result":null,"error":{"message":"no"},"status":"failed"}}
{"type":"item.completed","item":{"id":"item_2","type":"agent_message","text":"{\"state\":\"finished\"}"}}
{"type":"turn.completed","usage":{"input_tokens":10,"cached_input_tokens":2,"output_tokens":3}}
not json"#;
        let t = parse(out);
        assert_eq!(t.thread_id, "t-1");
        assert!(t.completed);
        assert_eq!(t.totals.unwrap().input, 10);
        assert_eq!(t.toolbelt_failed, ["declare_outcome: no"]);
        assert_eq!(t.unknown_lines, 1);
        assert_eq!(t.last_message.as_deref(), Some("{\"state\":\"finished\"}"));
        let a = Tokens {
            input: 30,
            output: 5,
            ..Tokens::default()
        };
        let b = Tokens {
            input: 10,
            output: 9,
            ..Tokens::default()
        };
        assert_eq!(
            a.since(&b),
            Tokens {
                input: 20,
                ..Tokens::default()
            }
        );
        assert!(limit_message(
            "You\u{2019}ve hit your usage limit. Try again later."
        ));
        assert!(!limit_message("exceeded retry limit, last status: 429"));
        let roll = r#"{"type":"event_msg","payload":{"type":"task_started"}}
{"type":"event_msg","payload":{"type":"token_count","info":{"total_token_usage":{"input_tokens":7}},"rate_limits":{"primary":{"used_percent":100.0,"window_minutes":300,"resets_at":4102444800},"secondary":null}}}
{"type":"event_msg","payload":{"type":"task_complete","error":{"message":"m","codex_error_info":"usage_limit_exceeded"}}}"#;
        let r = read_rollout(roll);
        assert!(r.limited);
        assert_eq!(r.reset_ms, Some(4_102_444_800_000));
        assert_eq!(r.totals.unwrap().input, 7);
    }
}
