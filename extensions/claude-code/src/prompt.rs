//! The turn's prompt ([`sdk::agent::prompt`], shared with the other agent
//! executors), and the stream-json user messages written to claude's stdin (the
//! prompt, and each injected Event).

pub use sdk::agent::prompt::*;
use serde_json::json;

/// A stream-json user message carrying `text`, as one line with its newline.
pub fn user_message(text: &str) -> String {
    let msg = json!({
        "type": "user",
        "message": {"role": "user", "content": [{"type": "text", "text": text}]},
    });
    format!("{msg}\n")
}
