//! `call`: an extension operation the caller's binding grants, forwarded to the
//! extension that declares it (`operation.call`, `operation.wait` or
//! `operation.emit` by its kind, through extrunner). A wait operation's Wait is
//! declared for the turn; an emit operation's event is emitted as the toolbelt's
//! own `emit` would. An extension's refusal reaches the agent only through safe
//! codes and the message meant for it ([`refusal`]).

use busapi::ext::ExtCall;
use protocol::toolbelt::{self as tb, CallParams};
use protocol::wire::{
    Authority, OperationCallParams, OperationCallResult, OperationEmitParams, OperationEmitResult,
    OperationWaitParams, OperationWaitResult,
};
use protocol::{CallError, Code, RpcError};
use serde::de::DeserializeOwned;
use serde_json::{json, Value};

use super::{refuse, Caller, Toolbelt, OPERATION_TIMEOUT, WORK_REQUESTED};
use crate::ports::ms;

impl Toolbelt {
    /// `operation.<kind>` on `extension`, answered its result; a refusal as the agent
    /// sees it.
    async fn forward<C: busapi::Call>(
        &self,
        name: &str,
        extension: &str,
        params: C,
    ) -> Result<C::Result, RpcError>
    where
        C::Result: DeserializeOwned,
    {
        let call = ExtCall::new(extension, params).timeout_ms(ms(OPERATION_TIMEOUT));
        let answer = match self.inner.extensions.answer(&call).await {
            Ok(a) => a,
            Err(CallError::Rpc(e)) => return Err(refusal(name, &e)),
            Err(e) => {
                return Err(refuse(
                    Code::Unavailable,
                    format!("{name}: {e}; retry with the same request_id"),
                ))
            }
        };
        serde_json::from_str(answer.get()).map_err(|e| {
            tracing::warn!(operation = name, error = %e, "toolbelt: an operation's answer does not decode");
            refuse(Code::Internal, "internal error")
        })
    }

    /// `call`: an extension operation the binding grants.
    pub(super) async fn operation(
        &self,
        caller: &Caller,
        p: &CallParams,
    ) -> Result<Value, RpcError> {
        let name = p.input["operation"].as_str().unwrap_or_default();
        let granted = self.granted(&caller.binding);
        let Some((extension, g)) = granted.iter().find(|(_, g)| g.name == name) else {
            return Err(refuse(
                Code::Unauthorized,
                format!("the binding grants no operation {name:?}"),
            ));
        };
        // Every kind's params are the same fields.
        let operation = name.to_owned();
        let request_id = p.request_id.clone();
        let authority: Authority = caller.authority.clone();
        let input = p.input.get("input").cloned().unwrap_or(Value::Null);
        match g.kind.as_str() {
            "wait" => {
                let params = OperationWaitParams {
                    operation,
                    request_id,
                    authority,
                    input,
                };
                let answer: OperationWaitResult = self.forward(name, extension, params).await?;
                let mut wait = answer.wait;
                wait.description = wait.clipped_description();
                self.declare(caller, json!({ "wait": wait, "wait_owner": extension }))
                    .await?;
                Ok(json!({"wait": wait}))
            }
            "emit" => {
                let params = OperationEmitParams {
                    operation,
                    request_id,
                    authority,
                    input,
                };
                let answer: OperationEmitResult = self.forward(name, extension, params).await?;
                let ev = answer.event;
                if ev.event_type == WORK_REQUESTED {
                    // Work is created through create_work alone, which holds the
                    // binding it names to the caller's confinement.
                    tracing::warn!(
                        operation = name,
                        "toolbelt: an operation emitted {WORK_REQUESTED}; refused"
                    );
                    return Err(refuse(
                        Code::Unauthorized,
                        format!("{name} may not emit {WORK_REQUESTED}: Work is created through create_work"),
                    ));
                }
                // The payload as the extension gave it (none: null).
                let payload = if ev.payload.schema.is_empty() && ev.payload.data.is_null() {
                    Value::Null
                } else {
                    json!(ev.payload)
                };
                let out = self.emit(caller, &ev.event_type, payload, ev.keys).await?;
                Ok(json!({"event": out, "output": answer.output}))
            }
            _ => {
                let params = OperationCallParams {
                    operation,
                    request_id,
                    authority,
                    input,
                };
                let answer: OperationCallResult = self.forward(name, extension, params).await?;
                Ok(answer.output)
            }
        }
    }
}

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
