//! What claude's stream reports about usage, and what continuity keeps of it: token
//! counts, a session's totals, one turn's usage and what a segment's `result` line
//! reports. The stream's parser ([`crate::stream`]) reads them and continuity
//! ([`crate::continuity`]) sums them, so neither needs the other.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Token counts of one model call or of a session's totals.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Tokens {
    /// Input tokens (not cached).
    #[serde(default)]
    pub input: u64,
    /// Output tokens.
    #[serde(default)]
    pub output: u64,
    /// Cache-read input tokens.
    #[serde(default)]
    pub cache_read: u64,
    /// Cache-creation input tokens.
    #[serde(default)]
    pub cache_creation: u64,
}

impl Tokens {
    /// Reads a stream-json `usage` object.
    pub fn from_usage(u: &Value) -> Tokens {
        let n = |k: &str| u.get(k).and_then(Value::as_u64).unwrap_or(0);
        Tokens {
            input: n("input_tokens"),
            output: n("output_tokens"),
            cache_read: n("cache_read_input_tokens"),
            cache_creation: n("cache_creation_input_tokens"),
        }
    }

    /// The context a call used: its whole input (cached or not) and its output.
    pub fn context(&self) -> u64 {
        self.input + self.cache_read + self.cache_creation + self.output
    }
}

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

/// One turn's usage: its tokens, and its cost when it can be known.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct TurnUsage {
    /// Tokens.
    #[serde(default)]
    pub tokens: Tokens,
    /// Cost in USD; `None` when the stream does not say it for this turn.
    #[serde(default)]
    pub cost_usd: Option<f64>,
}

/// What a segment's `result` line reports about usage, as read ([`crate::stream`]).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Reported {
    /// `usage`: this process's tokens (every version seen reports it per process).
    pub usage: Tokens,
    /// `total_cost_usd`: this process's cost in older versions (2.1.100), the
    /// session's cumulative cost in current ones (2.1.332).
    pub total_cost_usd: Option<f64>,
    /// `modelUsage` summed over models: per process or cumulative, like
    /// `total_cost_usd`.
    pub model_usage: Option<Totals>,
    /// `model_usage_since_last_result` summed over models: this turn's, exactly
    /// (current versions only).
    pub since_last_result: Option<Totals>,
}

/// A `modelUsage`-like object (`{model: {inputTokens, outputTokens,
/// cacheReadInputTokens, cacheCreationInputTokens, costUSD}}`) summed over models.
pub fn model_totals(v: Option<&Value>) -> Option<Totals> {
    let models = v?.as_object()?;
    let mut t = Totals::default();
    for m in models.values() {
        let n = |k: &str| m.get(k).and_then(Value::as_u64).unwrap_or(0);
        t.tokens.input += n("inputTokens");
        t.tokens.output += n("outputTokens");
        t.tokens.cache_read += n("cacheReadInputTokens");
        t.tokens.cache_creation += n("cacheCreationInputTokens");
        t.cost_usd += m.get("costUSD").and_then(Value::as_f64).unwrap_or(0.0);
    }
    Some(t)
}
