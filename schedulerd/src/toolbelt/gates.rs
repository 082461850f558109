//! Operation gates: before a `call` is forwarded, every package that serves
//! `operation.gate` (manifest `provides.operation_gate`, permission
//! `operation.gate`) and is configured in the caller's scope, other than the
//! operation's own package, is asked about it, one after the other.
//!
//! - No `wait`: the call goes on to the next gate, then to its operation.
//! - An operation error (`invalid`, `unauthorized`, `not_found`, `conflict`): the
//!   call is refused with the gate's reason as the agent's text ([`refusal`]); the
//!   operation is never asked.
//! - A `wait`: the call parks. The Wait is declared for the turn, owned by the gate's
//!   package (as a wait operation's is), and the agent is told its turn ends and to
//!   call again with the same request ID once resumed. That answer is not kept for
//!   the request ID, so the call made again reaches the gate again, which then lets
//!   it through or refuses it.
//! - Anything else (the gate timed out, crashed, answered something that does not
//!   read as its result, or failed otherwise): the call is refused with code
//!   [`GATE_FAILED`] and nothing is done (the host fails closed).

use std::time::{Duration, Instant};

use busapi::ext::ExtCall;
use protocol::toolbelt::CallParams;
use protocol::wire::{OperationGateParams, OperationGateResult, GATE_FAILED};
use protocol::{CallError, Code, RpcError};
use serde_json::{json, Value};

use super::refusal::refusal;
use super::{refuse, Caller, Toolbelt};
use crate::ports::ms;

/// How long one gate may take to answer, unless [`Toolbelt::set_gate_timeout`] says
/// (always within what is left of the call's own time).
pub const GATE_TIMEOUT: Duration = Duration::from_secs(15);

/// What the gates said of a call.
pub(super) enum Gated {
    /// Every gate lets it through.
    Through,
    /// A gate parks it: the answer the agent is given (never kept).
    Parked(Value),
}

/// The error codes by which a gate refuses a call (an operation error); any other
/// failure of the gate is [`GATE_FAILED`].
fn is_refusal(e: &RpcError) -> bool {
    [
        Code::Invalid,
        Code::Unauthorized,
        Code::NotFound,
        Code::Conflict,
    ]
    .iter()
    .any(|c| e.is(*c))
}

/// The refusal of a call whose gate failed, for the agent and the log.
fn gate_failed(operation: &str, gate: &str, why: &str) -> RpcError {
    tracing::warn!(
        operation,
        gate,
        why,
        "toolbelt: an operation gate failed; the call is refused"
    );
    RpcError::authored(
        GATE_FAILED,
        format!(
            "{operation}: the approval gate ({gate}) failed, so the call was refused and nothing was done; try again later"
        ),
    )
}

impl Toolbelt {
    /// From now on, a gate may take at most `d` to answer.
    pub fn set_gate_timeout(&self, d: Duration) {
        self.inner
            .gate_timeout_ms
            .store(ms(d), std::sync::atomic::Ordering::Relaxed);
    }

    fn gate_timeout(&self) -> Duration {
        Duration::from_millis(
            self.inner
                .gate_timeout_ms
                .load(std::sync::atomic::Ordering::Relaxed),
        )
    }

    /// The packages asked about a call of `owner`'s operation in `scope`.
    fn gates(&self, scope: &str, owner: &str) -> Vec<String> {
        let Ok(k) = self.inner.knowledge.read() else {
            return Vec::new();
        };
        k.with_surface(scope, |s| s.operation_gate)
            .into_iter()
            .filter(|g| g != owner)
            .collect()
    }

    /// Ask every gate of the caller's scope about the call of `operation` (declared
    /// by `owner`), by `deadline` (see the module doc).
    pub(super) async fn gate(
        &self,
        caller: &Caller,
        p: &CallParams,
        operation: &str,
        owner: &str,
        input: &Value,
        deadline: Instant,
    ) -> Result<Gated, RpcError> {
        for gate in self.gates(&caller.authority.scope_id, owner) {
            let left = deadline.saturating_duration_since(Instant::now());
            let timeout = self.gate_timeout().min(left);
            let params = OperationGateParams {
                operation: operation.to_owned(),
                owner: owner.to_owned(),
                request_id: p.request_id.clone(),
                authority: caller.authority.clone(),
                input: input.clone(),
            };
            let call = ExtCall::new(&gate, params).timeout_ms(ms(timeout));
            // Bounded here too: a gate's silence never holds the call past its time,
            // whatever carries it.
            let answer =
                match tokio::time::timeout(timeout, self.inner.extensions.answer(&call)).await {
                    Ok(a) => a,
                    Err(_) => {
                        return Err(gate_failed(
                            operation,
                            &gate,
                            &format!("no answer within {timeout:?}"),
                        ))
                    }
                };
            let answer = match answer {
                Ok(a) => a,
                Err(CallError::Rpc(e)) if is_refusal(&e) => {
                    tracing::info!(OC_WORK_ID = %caller.authority.work_id, operation, gate = %gate, reason = %e.message, "toolbelt: an operation gate refused a call");
                    return Err(refusal(operation, &e));
                }
                Err(e) => return Err(gate_failed(operation, &gate, &e.to_string())),
            };
            let result: OperationGateResult = match serde_json::from_str(answer.get()) {
                Ok(r) => r,
                Err(e) => {
                    return Err(gate_failed(
                        operation,
                        &gate,
                        &format!("its answer does not read as operation.gate's: {e}"),
                    ))
                }
            };
            let Some(mut wait) = result.wait else {
                continue;
            };
            if p.request_id.is_empty() {
                // The call made again must be the same call, for the gate to know it.
                return Err(refuse(
                    Code::Invalid,
                    format!("{operation} needs a person's approval: call it with a request_id (and the same one again once you are resumed)"),
                ));
            }
            wait.description = wait.clipped_description();
            self.declare(caller, json!({ "wait": wait, "wait_owner": gate }))
                .await?;
            tracing::info!(OC_WORK_ID = %caller.authority.work_id, operation, gate = %gate, "toolbelt: an operation gate parked a call");
            let what = if wait.description.is_empty() {
                String::new()
            } else {
                format!(" ({})", wait.description)
            };
            let message = format!(
                "{operation} needs a person's approval{what}: your turn ends now; when you are resumed, call it again with the same request_id ({:?})",
                p.request_id
            );
            return Ok(Gated::Parked(json!({
                "parked": true,
                "wait": wait,
                "request_id": p.request_id,
                "message": message,
            })));
        }
        Ok(Gated::Through)
    }
}
