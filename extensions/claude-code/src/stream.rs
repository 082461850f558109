//! The stream-json follower's parser: what one segment's `out.jsonl` (and its
//! `err.log`) says about the turn. Every line is read on its own; a line that
//! is not JSON, or of a type this release does not know, is counted and kept
//! (it stays in the file), never fatal.

use crate::prompt;
pub use crate::usage::Tokens;
use crate::usage::{model_totals, Reported, Totals};
use serde_json::Value;

/// The prefix of the toolbelt's tools as claude names them.
pub const TOOLBELT_PREFIX: &str = "mcp__open-conduit__";

use std::collections::BTreeSet;

/// The `result` line.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ResultLine {
    /// `subtype` (`success`, `error_during_execution`, ...).
    pub subtype: String,
    /// `is_error`.
    pub is_error: bool,
    /// `result`, the final text.
    pub text: String,
    /// `usage`: this process's tokens.
    pub usage: Tokens,
    /// `total_cost_usd`: this process's cost in older versions, the session's in
    /// current ones.
    pub cost_usd: Option<f64>,
    /// `modelUsage`, summed over models.
    pub model_usage: Option<Totals>,
    /// `model_usage_since_last_result`, summed over models (this turn's).
    pub since_last_result: Option<Totals>,
    /// `permission_denials`: the names of the tools claude refused.
    pub denied: Vec<String>,
    /// `structured_output`, the turn's status.
    pub structured: Option<Value>,
    /// `api_error_status`.
    pub api_error_status: Option<Value>,
}

/// A usage limit claude hit.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Limit {
    /// When it resets (ms since the epoch), when known.
    pub reset_ms: Option<i64>,
}

/// What a segment's output says.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Turn {
    /// The session, from the `system` `init` line.
    pub session_id: String,
    /// The models the assistant messages name.
    pub models: BTreeSet<String>,
    /// Distinct model calls (assistant message IDs).
    pub model_calls: u64,
    /// Tool calls (`tool_use` blocks).
    pub tool_calls: u64,
    /// The usage of the last main-thread model call.
    pub last_main_usage: Option<Tokens>,
    /// Event IDs whose injected message claude echoed back.
    pub echoed: Vec<String>,
    /// The result line, when one arrived.
    pub result: Option<ResultLine>,
    /// A usage limit, when one was reported.
    pub limit: Option<Limit>,
    /// claude could not find the session it was told to resume.
    pub lost_session: bool,
    /// Lines that were not JSON or of an unknown type.
    pub unknown_lines: u64,
    /// The toolbelt's tools claude refused to run (`permission_denied`, or the
    /// result's `permission_denials`).
    pub toolbelt_denied: Vec<String>,
    /// A reset the stream stated as a time (`rate_limit_event`,
    /// `api_error_params`), which wins over one read from wording.
    stated_reset: Option<i64>,
}

impl ResultLine {
    /// What it says about usage.
    pub fn reported(&self) -> Reported {
        Reported {
            usage: self.usage,
            total_cost_usd: self.cost_usd,
            model_usage: self.model_usage,
            since_last_result: self.since_last_result,
        }
    }
}

impl Turn {
    fn denied(&mut self, tool: &str) {
        if tool.starts_with(TOOLBELT_PREFIX) && !self.toolbelt_denied.iter().any(|t| t == tool) {
            self.toolbelt_denied.push(tool.to_string());
        }
    }

    /// The context the session ended the turn with (the last main-thread
    /// call's input, cached or not, and output).
    pub fn context_tokens(&self) -> u64 {
        self.last_main_usage.map_or(0, |t| t.context())
    }
}

/// Texts of a message's `content`: a string, or its `text` blocks.
fn texts(content: &Value) -> Vec<String> {
    match content {
        Value::String(s) => vec![s.clone()],
        Value::Array(blocks) => blocks
            .iter()
            .filter(|b| b.get("type").and_then(Value::as_str) == Some("text"))
            .filter_map(|b| b.get("text").and_then(Value::as_str).map(str::to_string))
            .collect(),
        _ => Vec::new(),
    }
}

/// Parses one segment's stdout and stderr. `now_ms` anchors a reset time of
/// day (`resets 9:40am`).
pub fn parse(out: &str, err: &str, now_ms: i64) -> Turn {
    let mut t = Turn::default();
    let mut ids = BTreeSet::new();
    for line in out.lines() {
        let line = line.trim();
        if line.is_empty() {
            continue;
        }
        let Ok(v) = serde_json::from_str::<Value>(line) else {
            t.unknown_lines += 1;
            continue;
        };
        match v.get("type").and_then(Value::as_str).unwrap_or("") {
            "system" => match v.get("subtype").and_then(Value::as_str) {
                Some("init") => {
                    if let Some(s) = v.get("session_id").and_then(Value::as_str) {
                        t.session_id = s.to_string();
                    }
                }
                Some("permission_denied") => {
                    if let Some(tool) = v.get("tool_name").and_then(Value::as_str) {
                        t.denied(tool);
                    }
                }
                _ => {}
            },
            "assistant" => {
                let msg = v.get("message").cloned().unwrap_or(Value::Null);
                if let Some(m) = msg.get("model").and_then(Value::as_str) {
                    if !m.is_empty() && !m.starts_with('<') {
                        t.models.insert(m.to_string());
                    }
                }
                let id = msg
                    .get("id")
                    .and_then(Value::as_str)
                    .map(str::to_string)
                    .unwrap_or_else(|| format!("line-{}", ids.len()));
                if ids.insert(id) {
                    t.model_calls += 1;
                }
                if let Some(blocks) = msg.get("content").and_then(Value::as_array) {
                    t.tool_calls += blocks
                        .iter()
                        .filter(|b| b.get("type").and_then(Value::as_str) == Some("tool_use"))
                        .count() as u64;
                }
                let main = v.get("parent_tool_use_id").is_none_or(Value::is_null);
                if main {
                    if let Some(u) = msg.get("usage") {
                        t.last_main_usage = Some(Tokens::from_usage(u));
                    }
                }
                for text in texts(msg.get("content").unwrap_or(&Value::Null)) {
                    if let Some(l) = limit_in_text(&text, now_ms) {
                        t.limit = Some(merge(t.limit, l));
                    }
                }
            }
            "user" => {
                let content = v
                    .pointer("/message/content")
                    .cloned()
                    .unwrap_or(Value::Null);
                for text in texts(&content) {
                    for id in prompt::marked_ids(&text) {
                        if !t.echoed.contains(&id) {
                            t.echoed.push(id);
                        }
                    }
                }
            }
            "rate_limit_event" => {
                let info = v.get("rate_limit_info").unwrap_or(&v);
                let status = info.get("status").and_then(Value::as_str).unwrap_or("");
                if !status.is_empty() && !status.starts_with("allowed") {
                    let reset = info
                        .get("resetsAt")
                        .or_else(|| info.get("resets_at"))
                        .and_then(epoch_ms);
                    t.stated_reset = t.stated_reset.max(reset);
                    t.limit = Some(merge(t.limit, Limit { reset_ms: reset }));
                }
            }
            "result" => {
                let r = ResultLine {
                    subtype: v
                        .get("subtype")
                        .and_then(Value::as_str)
                        .unwrap_or("")
                        .to_string(),
                    is_error: v.get("is_error").and_then(Value::as_bool).unwrap_or(false),
                    text: v
                        .get("result")
                        .and_then(Value::as_str)
                        .unwrap_or("")
                        .to_string(),
                    usage: v.get("usage").map(Tokens::from_usage).unwrap_or_default(),
                    cost_usd: v.get("total_cost_usd").and_then(Value::as_f64),
                    structured: v.get("structured_output").filter(|s| !s.is_null()).cloned(),
                    api_error_status: v.get("api_error_status").filter(|s| !s.is_null()).cloned(),
                    model_usage: model_totals(v.get("modelUsage")),
                    since_last_result: model_totals(v.get("model_usage_since_last_result")),
                    denied: v
                        .get("permission_denials")
                        .and_then(Value::as_array)
                        .map(|a| {
                            a.iter()
                                .filter_map(|d| d.get("tool_name").and_then(Value::as_str))
                                .map(str::to_string)
                                .collect()
                        })
                        .unwrap_or_default(),
                };
                for tool in &r.denied {
                    t.denied(tool);
                }
                if let Some(s) = v.get("session_id").and_then(Value::as_str) {
                    if t.session_id.is_empty() {
                        t.session_id = s.to_string();
                    }
                }
                let reset = v.pointer("/api_error_params/reset").and_then(epoch_ms);
                t.stated_reset = t.stated_reset.max(reset);
                let limited_status = r
                    .api_error_status
                    .as_ref()
                    .is_some_and(|s| s.as_u64() == Some(429) || s.as_str() == Some("429"));
                let text_limit = limit_in_text(&r.text, now_ms);
                // 2.1.100 says a 429 only in the text: `API Error: 429 {..."rate_limit_error"...}`.
                let limited_text =
                    r.text.starts_with("API Error: 429") || r.text.contains("\"rate_limit_error\"");
                if r.is_error
                    && (limited_status || limited_text || line.contains("usage_limit_reached"))
                {
                    let from_text = text_limit.and_then(|l| l.reset_ms);
                    t.limit = Some(merge(
                        t.limit,
                        Limit {
                            reset_ms: reset.or(from_text),
                        },
                    ));
                } else if let Some(l) = text_limit.filter(|_| r.is_error) {
                    t.limit = Some(merge(t.limit, l));
                }
                if r.is_error && r.text.contains("No conversation found with session ID") {
                    t.lost_session = true;
                }
                t.result = Some(r);
            }
            _ => t.unknown_lines += 1,
        }
    }
    if err.contains("No conversation found with session ID") {
        t.lost_session = true;
    }
    if let (Some(l), Some(stated)) = (t.limit.as_mut(), t.stated_reset) {
        l.reset_ms = Some(stated);
    }
    if t.result.is_none() {
        if let Some(l) = limit_in_text(err, now_ms) {
            t.limit = Some(merge(t.limit, l));
        }
    }
    t
}

fn merge(old: Option<Limit>, new: Limit) -> Limit {
    match (old.and_then(|o| o.reset_ms), new.reset_ms) {
        (Some(a), Some(b)) => Limit {
            reset_ms: Some(a.max(b)),
        },
        (a, b) => Limit { reset_ms: b.or(a) },
    }
}

/// An epoch time in seconds or milliseconds (a number or digits), or RFC 3339.
fn epoch_ms(v: &Value) -> Option<i64> {
    let n = match v {
        Value::Number(n) => n.as_i64()?,
        Value::String(s) => match s.parse::<i64>() {
            Ok(n) => n,
            Err(_) => return protocol::time::parse_rfc3339_ms(s),
        },
        _ => return None,
    };
    if n <= 0 {
        return None;
    }
    Some(if n < 100_000_000_000 { n * 1000 } else { n })
}

/// A usage limit in claude's wording: `... limit ... resets 9:40am
/// (Europe/London)`, or the older `Claude AI usage limit reached|<epoch>`.
/// `None` when the text reports no limit.
pub fn limit_in_text(text: &str, now_ms: i64) -> Option<Limit> {
    let lower = text.to_ascii_lowercase();
    if let Some(i) = lower.find("usage limit reached|") {
        let rest = &text[i + "usage limit reached|".len()..];
        let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
        return Some(Limit {
            reset_ms: epoch_ms(&Value::String(digits)),
        });
    }
    let limited = lower.contains("limit") && (lower.contains("reset") || lower.contains("usage"));
    if !limited {
        return None;
    }
    let reset = lower
        .find("resets ")
        .and_then(|i| reset_time_of_day(&text[i + "resets ".len()..], now_ms));
    Some(Limit { reset_ms: reset })
}

/// The next moment (after `now_ms`) of a time of day like `9:40am`, `9am`,
/// `21:40`, optionally followed by ` (Zone)`. Zones are not resolved without a
/// time zone database: every zone is taken as UTC (docs/decisions.md).
pub fn reset_time_of_day(text: &str, now_ms: i64) -> Option<i64> {
    let s = text.trim_start();
    let hour_digits: String = s.chars().take_while(char::is_ascii_digit).collect();
    if hour_digits.is_empty() || hour_digits.len() > 2 {
        return None;
    }
    let mut hour: i64 = hour_digits.parse().ok()?;
    let mut rest = &s[hour_digits.len()..];
    let mut minute: i64 = 0;
    if let Some(r) = rest.strip_prefix(':') {
        let m: String = r.chars().take_while(char::is_ascii_digit).collect();
        if m.len() != 2 {
            return None;
        }
        minute = m.parse().ok()?;
        rest = &r[2..];
    }
    let rest = rest.trim_start().to_ascii_lowercase();
    if rest.starts_with("am") || rest.starts_with("a.m.") {
        if hour == 12 {
            hour = 0;
        }
    } else if rest.starts_with("pm") || rest.starts_with("p.m.") {
        if hour < 12 {
            hour += 12;
        }
    } else if hour_digits.len() == 1 && minute == 0 && !s[1..].starts_with(':') {
        // A bare digit with neither minutes nor am/pm is not a time.
        return None;
    }
    if hour > 23 || minute > 59 {
        return None;
    }
    let day = 86_400_000;
    let start_of_day = now_ms.div_euclid(day) * day;
    let mut at = start_of_day + (hour * 3600 + minute * 60) * 1000;
    if at <= now_ms {
        at += day;
    }
    Some(at)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    const NOW: i64 = 1_760_000_000_000; // 2025-10-09T08:53:20Z

    #[test]
    fn parses_a_turn() {
        let out = r###"{"type":"system","subtype":"init","session_id":"s-1","model":"opus"}
not json at all
{"type":"assistant","message":{"id":"m1","model":"claude-opus","content":[{"type":"tool_use","name":"Bash"}],"usage":{"input_tokens":10,"output_tokens":5,"cache_read_input_tokens":100,"cache_creation_input_tokens":20}},"parent_tool_use_id":null}
{"type":"assistant","message":{"id":"m1","model":"claude-opus","content":[{"type":"text","text":"ok"}],"usage":{"input_tokens":10,"output_tokens":6,"cache_read_input_tokens":100,"cache_creation_input_tokens":20}},"parent_tool_use_id":null}
{"type":"assistant","message":{"id":"sub","model":"claude-haiku","content":[],"usage":{"input_tokens":99999}},"parent_tool_use_id":"t1"}
{"type":"user","message":{"role":"user","content":[{"type":"text","text":"## Arrived during this turn\n\n<!-- open-conduit event ev-7 -->\n"}]},"isReplay":true}
{"type":"something_new","x":1}
{"type":"result","subtype":"success","is_error":false,"result":"done","usage":{"input_tokens":30,"output_tokens":11},"total_cost_usd":0.25,"structured_output":{"state":"building","summary":"s"}}
"###;
        let t = parse(out, "", NOW);
        assert_eq!(t.session_id, "s-1");
        assert_eq!(t.model_calls, 2);
        assert_eq!(t.tool_calls, 1);
        assert_eq!(t.models.len(), 2);
        assert_eq!(t.context_tokens(), 10 + 6 + 100 + 20);
        assert_eq!(t.echoed, ["ev-7"]);
        assert_eq!(t.unknown_lines, 2);
        let r = t.result.unwrap();
        assert_eq!(r.usage.input, 30);
        assert_eq!(r.cost_usd, Some(0.25));
        assert_eq!(r.structured.unwrap()["state"], "building");
        assert!(t.limit.is_none());
    }

    #[test]
    fn limits() {
        let out = r#"{"type":"rate_limit_event","rate_limit_info":{"status":"rejected","resetsAt":1760003600}}"#;
        assert_eq!(
            parse(out, "", NOW).limit,
            Some(Limit {
                reset_ms: Some(1_760_003_600_000)
            })
        );
        let allowed = r#"{"type":"rate_limit_event","rate_limit_info":{"status":"allowed","resetsAt":1760003600}}"#;
        assert_eq!(parse(allowed, "", NOW).limit, None);
        let result = r#"{"type":"result","subtype":"success","is_error":true,"result":"You've hit your limit · resets 9:40am (Europe/London)","api_error_status":429}"#;
        let l = parse(result, "", NOW).limit.unwrap();
        // 09:40 UTC on the same day (NOW is 08:53 UTC).
        assert_eq!(
            l.reset_ms,
            Some(NOW - (NOW % 86_400_000) + (9 * 60 + 40) * 60_000)
        );
        let old = r#"{"type":"result","is_error":true,"result":"Claude AI usage limit reached|1760003600"}"#;
        assert_eq!(
            parse(old, "", NOW).limit.unwrap().reset_ms,
            Some(1_760_003_600_000)
        );
        let both = format!("{out}\n{result}");
        assert_eq!(
            parse(&both, "", NOW).limit.unwrap().reset_ms,
            Some(1_760_003_600_000)
        );
        let unknown = r#"{"type":"result","is_error":true,"result":"usage_limit_reached","api_error_status":429}"#;
        assert_eq!(
            parse(unknown, "", NOW).limit,
            Some(Limit { reset_ms: None })
        );
        // As 2.1.100 reports a 429: in the text only.
        let old_429 = r#"{"type":"result","subtype":"success","is_error":true,"result":"API Error: 429 {\"type\":\"error\",\"error\":{\"type\":\"rate_limit_error\",\"message\":\"Number of requests has exceeded your rate limit\"}}","total_cost_usd":0}"#;
        assert_eq!(
            parse(old_429, "", NOW).limit,
            Some(Limit { reset_ms: None })
        );
        let ok = r#"{"type":"result","is_error":false,"result":"I read about rate limits"}"#;
        assert_eq!(parse(ok, "", NOW).limit, None);
    }

    #[test]
    fn reset_text() {
        let day = NOW - NOW % 86_400_000;
        assert_eq!(
            reset_time_of_day("9:40am (Europe/London)", NOW),
            Some(day + 32_400_000 + 2_400_000)
        );
        assert_eq!(reset_time_of_day("12am", NOW), Some(day + 86_400_000));
        assert_eq!(reset_time_of_day("1pm", NOW), Some(day + 13 * 3_600_000));
        assert_eq!(
            reset_time_of_day("21:05", NOW),
            Some(day + 21 * 3_600_000 + 300_000)
        );
        assert_eq!(
            reset_time_of_day("8:00am", NOW),
            Some(day + 86_400_000 + 8 * 3_600_000)
        );
        assert_eq!(reset_time_of_day("soon", NOW), None);
        assert_eq!(reset_time_of_day("7 days", NOW), None);
    }

    /// As 2.1.332 writes them: a toolbelt call refused under acceptEdits, and the
    /// result's usage fields.
    #[test]
    fn toolbelt_denials_and_usage_fields() {
        let out = r#"{"type":"system","subtype":"permission_denied","tool_name":"mcp__open-conduit__read_context","tool_use_id":"t1"}
{"type":"system","subtype":"permission_denied","tool_name":"Bash","tool_use_id":"t2"}
{"type":"result","subtype":"success","is_error":false,"result":"","usage":{"input_tokens":100,"output_tokens":5},"total_cost_usd":0.001,"modelUsage":{"a":{"inputTokens":200,"outputTokens":10,"costUSD":0.001}},"model_usage_since_last_result":{"a":{"inputTokens":100,"outputTokens":5,"costUSD":0.0005}},"permission_denials":[{"tool_name":"mcp__open-conduit__declare_outcome","tool_use_id":"t3","tool_input":{}}]}"#;
        let t = parse(out, "", NOW);
        assert_eq!(
            t.toolbelt_denied,
            [
                "mcp__open-conduit__read_context",
                "mcp__open-conduit__declare_outcome"
            ]
        );
        let r = t.result.unwrap().reported();
        assert_eq!(r.usage.input, 100);
        assert_eq!(r.model_usage.unwrap().tokens.input, 200);
        let since = r.since_last_result.unwrap();
        assert_eq!((since.tokens.input, since.tokens.output), (100, 5));
        assert!((since.cost_usd - 0.0005).abs() < 1e-12);
    }

    #[test]
    fn a_lost_session() {
        let t = parse(
            "",
            "Error: No conversation found with session ID: abc\n",
            NOW,
        );
        assert!(t.lost_session);
        assert!(t.result.is_none());
    }
}
