//! An extension's refusal as the agent sees it: safe codes only, and the message the
//! operation (or a gate) meant for the agent. Shared by `operation.rs` and
//! `gates.rs`.

use protocol::toolbelt as tb;
use protocol::{Code, RpcError};
use serde_json::Value;

/// An extension's refusal as the agent sees it: its safe code, and the message the
/// operation meant for the agent (`data.agent_message`, made safe and bounded by
/// [`tb::agent_message`]) or else only the code. The refusal's own `message` (for
/// logs) never crosses.
pub(super) fn refusal(operation: &str, e: &RpcError) -> RpcError {
    let code = e.app_code().unwrap_or("internal");
    let said = e
        .data
        .as_ref()
        .and_then(|d| d.get(tb::AGENT_MESSAGE_FIELD))
        .and_then(Value::as_str)
        .map(tb::agent_message)
        .filter(|m| !m.is_empty());
    let message = match said {
        Some(m) => format!("{operation}: {m}"),
        None => format!(
            "{operation} refused the call ({})",
            safe_code(code).as_str()
        ),
    };
    RpcError::new(safe_code(code), message)
}

/// Only the codes an agent may see; anything else is `internal`.
fn safe_code(code: &str) -> Code {
    match code {
        "invalid" => Code::Invalid,
        "unauthorized" => Code::Unauthorized,
        "not_found" => Code::NotFound,
        "conflict" => Code::Conflict,
        "unavailable" => Code::Unavailable,
        _ => Code::Internal,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_refusal_carries_the_agent_message_bounded_and_never_the_log_message() {
        let mut e = RpcError::new(Code::NotFound, "internal detail for the log");
        let r = refusal("github.comment", &e);
        assert_eq!(r.app_code(), Some("not_found"));
        assert_eq!(r.message, "github.comment refused the call (not_found)");
        if let Some(d) = e.data.as_mut() {
            d[tb::AGENT_MESSAGE_FIELD] = json!(format!(
                "GitHub answered 404: Not Found Bearer s3cret {}",
                "x".repeat(900)
            ));
        }
        let r = refusal("github.comment", &e);
        assert!(
            r.message
                .starts_with("github.comment: GitHub answered 404: Not Found"),
            "{}",
            r.message
        );
        assert!(!r.message.contains("s3cret") && !r.message.contains("internal detail"));
        assert!(r.message.len() <= "github.comment: ".len() + tb::MAX_AGENT_MESSAGE_BYTES);
        // An unknown code is internal, its message still the agent's.
        let mut odd = RpcError::authored("quota_blown", "log");
        if let Some(d) = odd.data.as_mut() {
            d[tb::AGENT_MESSAGE_FIELD] = json!("try later");
        }
        let r = refusal("x.op", &odd);
        assert_eq!(r.app_code(), Some("internal"));
        assert_eq!(r.message, "x.op: try later");
    }
}
