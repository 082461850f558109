//! `call`: an extension operation the caller's binding grants, asked of the scope's
//! operation gates (`gates.rs`) and then forwarded to the extension that declares it (`operation.call`, `operation.wait` or
//! `operation.emit` by its kind, through extrunner). A wait operation's Wait is
//! declared for the turn; an emit operation's event is emitted as the toolbelt's
//! own `emit` would. An extension's refusal reaches the agent only through safe
//! codes and the message meant for it (`refusal.rs`).

use busapi::ext::ExtCall;
use protocol::toolbelt::CallParams;
use protocol::wire::{
    Authority, OperationCallParams, OperationCallResult, OperationEmitParams, OperationEmitResult,
    OperationWaitParams, OperationWaitResult,
};
use protocol::{CallError, Code, RpcError};
use serde::de::DeserializeOwned;
use serde_json::{json, Value};

use std::time::Instant;

use super::gates::Gated;
use super::refusal::refusal;
use super::tools::Effect;
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
        deadline: Instant,
    ) -> Result<C::Result, RpcError>
    where
        C::Result: DeserializeOwned,
    {
        let left = deadline.saturating_duration_since(Instant::now());
        let call = ExtCall::new(extension, params).timeout_ms(ms(left));
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

    /// `call`: an extension operation the binding grants, once the scope's gates
    /// let it through (`gates.rs`). A call a gate parks is answered but not kept.
    pub(super) async fn operation(
        &self,
        caller: &Caller,
        p: &CallParams,
    ) -> Result<Effect, RpcError> {
        let deadline = Instant::now() + OPERATION_TIMEOUT;
        let name = p.input["operation"].as_str().unwrap_or_default();
        let granted = self.granted(&caller.binding);
        let Some((extension, g)) = granted.iter().find(|(_, g)| g.name == name) else {
            return Err(refuse(
                Code::Unauthorized,
                format!("the binding grants no operation {name:?}"),
            ));
        };
        let input = p.input.get("input").cloned().unwrap_or(Value::Null);
        if let Gated::Parked(answer) = self
            .gate(caller, p, name, extension, &input, deadline)
            .await?
        {
            return Ok(Effect {
                output: answer,
                keep: false,
            });
        }
        // Every kind's params are the same fields.
        let operation = name.to_owned();
        let request_id = p.request_id.clone();
        let authority: Authority = caller.authority.clone();
        let output = match g.kind.as_str() {
            "wait" => {
                let params = OperationWaitParams {
                    operation,
                    request_id,
                    authority,
                    input,
                };
                let answer: OperationWaitResult =
                    self.forward(name, extension, params, deadline).await?;
                let mut wait = answer.wait;
                wait.description = wait.clipped_description();
                self.declare(caller, json!({ "wait": wait, "wait_owner": extension }))
                    .await?;
                json!({"wait": wait})
            }
            "emit" => {
                let params = OperationEmitParams {
                    operation,
                    request_id,
                    authority,
                    input,
                };
                let answer: OperationEmitResult =
                    self.forward(name, extension, params, deadline).await?;
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
                json!({"event": out, "output": answer.output})
            }
            _ => {
                let params = OperationCallParams {
                    operation,
                    request_id,
                    authority,
                    input,
                };
                let answer: OperationCallResult =
                    self.forward(name, extension, params, deadline).await?;
                answer.output
            }
        };
        Ok(Effect { output, keep: true })
    }
}
