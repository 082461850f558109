//! The toolbelt's tools (`toolbelt.call`): `read_context`, `wait`,
//! `declare_outcome`, `emit`, `create_work` and `call` (an extension operation,
//! `operation.rs`); `emit`, `create_work` and `call` at most once per request ID.

use std::collections::VecDeque;

use busapi::store::{
    EventAcceptDerivedRequest, EventInput, KvCheckItem, KvCommitRequest, KvGetRequest, KvPutItem,
    StoredEvent, WorkEventsRequest, WorkRow,
};
use busapi::Call;
use protocol::toolbelt::{self as tb, CallParams};
use protocol::wire::{self, WaitRequest};
use protocol::{Code, RpcError};
use serde_json::{json, Value};

use super::confine::create_work_refusal;
use super::declared::record;
use super::{
    refuse, store_failed, Caller, Toolbelt, CONTEXT_EVENTS, FAMILY, NAMESPACE, OWNER,
    WORK_REQUESTED,
};
use crate::knowledge::binding_in;

/// What an effect answered, and whether that answer is kept for its request ID.
pub(super) struct Effect {
    /// The answer.
    pub(super) output: Value,
    /// Kept (replayed to the same request ID), or not (the call runs again).
    pub(super) keep: bool,
}

impl Toolbelt {
    pub(super) async fn call(&self, p: CallParams) -> Result<Value, RpcError> {
        let caller = self.caller(&p.token).await?;
        if !p.input.is_null() && !p.input.is_object() {
            return Err(refuse(Code::Invalid, "the input must be an object"));
        }
        if p.input.to_string().len() > tb::MAX_INPUT_BYTES {
            return Err(refuse(
                Code::Invalid,
                format!("the input is over {} bytes", tb::MAX_INPUT_BYTES),
            ));
        }
        // The input is held to the schema the tool publishes (`tools/list`).
        tb::check_input(&p.tool, &p.input).map_err(|why| refuse(Code::Invalid, why))?;
        if p.request_id.len() > 200 || p.request_id.contains('/') {
            return Err(refuse(
                Code::Invalid,
                "a request_id is at most 200 bytes, without /",
            ));
        }
        match p.tool.as_str() {
            tb::TOOL_READ_CONTEXT => self.read_context(&caller).await,
            tb::TOOL_WAIT => {
                let wait = wait_from_input(&p.input, &caller.work)?;
                self.declare(&caller, json!({ "wait": wait, "wait_owner": "" }))
                    .await?;
                Ok(json!({"wait": wait,
                          "note": "declared: end your turn now; the Work waits and a matching event resumes it"}))
            }
            tb::TOOL_DECLARE_OUTCOME => {
                let outcome = p.input["outcome"].as_str().unwrap_or_default();
                if !matches!(outcome, "completed" | "handoff" | "failed") {
                    return Err(refuse(
                        Code::Invalid,
                        "outcome must be completed, handoff or failed",
                    ));
                }
                let summary = wire::clip_line(p.input["summary"].as_str().unwrap_or_default(), 500);
                self.declare(
                    &caller,
                    json!({"outcome": {"outcome": outcome, "summary": summary}}),
                )
                .await?;
                Ok(json!({"outcome": outcome}))
            }
            tb::TOOL_EMIT | tb::TOOL_CREATE_WORK | tb::TOOL_CALL => {
                self.once(&caller, &p.request_id, self.effect(&caller, &p))
                    .await
            }
            other => Err(refuse(
                Code::Invalid,
                format!("no tool named {other:?} (tools: {})", tb::TOOLS.join(", ")),
            )),
        }
    }

    /// Run `effect` at most once per request ID: a committed answer is replayed. An
    /// answer the effect says not to keep (a call a gate parked) is answered but not
    /// committed, so the same request ID runs the effect again.
    async fn once(
        &self,
        caller: &Caller,
        request_id: &str,
        effect: impl std::future::Future<Output = Result<Effect, RpcError>>,
    ) -> Result<Value, RpcError> {
        if request_id.is_empty() {
            return effect.await.map(|e| e.output);
        }
        let key = format!("call/{}/{request_id}", caller.authority.work_id);
        let store = &self.inner.store;
        let got = record(store, &key)
            .await
            .map_err(|e| store_failed(KvGetRequest::METHOD, e))?;
        if let Some((v, _)) = got {
            return Ok(v["output"].clone());
        }
        {
            let mut inflight = self
                .inner
                .inflight
                .lock()
                .map_err(|_| refuse(Code::Internal, "internal error"))?;
            if !inflight.insert(key.clone()) {
                return Err(refuse(
                    Code::Conflict,
                    "a call with this request_id is in progress",
                ));
            }
        }
        let result = effect.await;
        let answer = match result {
            Ok(Effect {
                output,
                keep: false,
            }) => Ok(output),
            Ok(Effect { output, keep: true }) => {
                let put = store
                    .call(&KvCommitRequest {
                        owner: OWNER.into(),
                        families: None,
                        scopes: None,
                        checks: vec![KvCheckItem {
                            namespace: NAMESPACE.into(),
                            key: key.clone(),
                            version: None,
                            absent: true,
                        }],
                        puts: vec![KvPutItem {
                            namespace: NAMESPACE.into(),
                            key: key.clone(),
                            value: json!({ "output": output }),
                        }],
                        deletes: Vec::new(),
                        emissions: Vec::new(),
                    })
                    .await;
                if let Err(e) = put {
                    tracing::warn!(OC_WORK_ID = %caller.authority.work_id, error = %e, "toolbelt: the answer could not be kept; a retry runs the operation again");
                }
                Ok(output)
            }
            Err(e) => Err(e),
        };
        if let Ok(mut inflight) = self.inner.inflight.lock() {
            inflight.remove(&key);
        }
        answer
    }

    async fn effect(&self, caller: &Caller, p: &CallParams) -> Result<Effect, RpcError> {
        let output = match p.tool.as_str() {
            tb::TOOL_EMIT => {
                let t = p.input["type"].as_str().unwrap_or_default();
                if !t.starts_with(FAMILY) || t == WORK_REQUESTED || t.len() <= FAMILY.len() {
                    return Err(refuse(
                        Code::Invalid,
                        format!("type must be in the toolbelt's family {FAMILY}* (and not {WORK_REQUESTED})"),
                    ));
                }
                let keys = strings(&p.input["keys"]);
                self.emit(caller, t, p.input["payload"].clone(), keys)
                    .await?
            }
            tb::TOOL_CREATE_WORK => self.create_work(caller, p).await?,
            _ => return self.operation(caller, p).await,
        };
        Ok(Effect { output, keep: true })
    }

    /// `create_work`: an `agent.work_requested` event the router turns into Work on
    /// the binding named, held to the caller's confinement (`confine.rs`).
    async fn create_work(&self, caller: &Caller, p: &CallParams) -> Result<Value, RpcError> {
        let title = p.input["title"].as_str().unwrap_or_default();
        if title.trim().is_empty() {
            return Err(refuse(Code::Invalid, "create_work needs a title"));
        }
        let binding = p.input["binding"]
            .as_str()
            .unwrap_or(&caller.authority.binding)
            .to_owned();
        // The caller's binding and the one named, as configured now.
        let (mine, named) = {
            let k = self
                .inner
                .knowledge
                .read()
                .map_err(|_| refuse(Code::Internal, "internal error"))?;
            let scope = k.scope(&caller.authority.scope_id);
            let find = |name: &str| scope.and_then(|s| binding_in(s, name).cloned());
            (find(&caller.authority.binding), find(&binding))
        };
        let Some(named) = named else {
            return Err(refuse(
                Code::Invalid,
                format!("the scope has no binding {binding:?}"),
            ));
        };
        if let Some(why) =
            create_work_refusal(&caller.authority.binding, mine.as_ref(), &binding, &named)
        {
            tracing::warn!(OC_WORK_ID = %caller.authority.work_id, OC_EXECUTION_ID = %caller.authority.execution_id, %why, "toolbelt: create_work refused");
            return Err(refuse(Code::Unauthorized, why));
        }
        let mut keys = strings(&p.input["keys"]);
        if keys.is_empty() {
            let id = if p.request_id.is_empty() {
                random_id()
            } else {
                p.request_id.clone()
            };
            keys.push(format!("agent:{}/{}", caller.authority.work_id, id));
        }
        let payload = json!({
            "schema": "agent.work_requested.v1",
            "data": {"title": wire::clip_line(title, 200), "binding": binding,
                     "context": p.input["context"], "requested_by": caller.authority.work_id},
        });
        let mut out = self
            .emit(caller, WORK_REQUESTED, payload, keys.clone())
            .await?;
        out["key"] = json!(keys[0]);
        Ok(out)
    }

    /// Accept an event derived from the Work's latest event, caused by the caller's
    /// execution. The payload is kept as given when it names its `schema`, else
    /// wrapped as `{schema: "<type>.v1", data}`.
    pub(super) async fn emit(
        &self,
        caller: &Caller,
        event_type: &str,
        payload: Value,
        keys: Vec<String>,
    ) -> Result<Value, RpcError> {
        let parent = self
            .last_event(&caller.authority.work_id)
            .await?
            .ok_or_else(|| refuse(Code::Invalid, "the Work has no event to derive from"))?;
        let payload = if payload.get("schema").is_some() {
            payload
        } else {
            json!({"schema": format!("{event_type}.v1"), "data": payload})
        };
        let event = EventInput {
            scope_id: caller.authority.scope_id.clone(),
            event_type: event_type.to_owned(),
            source: format!("toolbelt/{}", caller.authority.scope_id),
            payload,
            keys,
            parent_id: Some(parent),
            execution_id: Some(caller.authority.execution_id.clone()),
            ..EventInput::default()
        };
        let answer = self
            .inner
            .store
            .call(&EventAcceptDerivedRequest {
                owner: None,
                families: None,
                scopes: None,
                event,
                checks: Vec::new(),
                puts: Vec::new(),
                deletes: Vec::new(),
            })
            .await
            .map_err(|e| store_failed(EventAcceptDerivedRequest::METHOD, e))?;
        Ok(json!({"event_id": answer.id, "seq": answer.seq}))
    }

    /// The ID of the Work's latest event.
    async fn last_event(&self, work_id: &str) -> Result<Option<String>, RpcError> {
        let events = self.events(work_id).await?;
        Ok(events.back().map(|e| e.id.clone()))
    }

    /// The Work's events, the last [`CONTEXT_EVENTS`], in acceptance order.
    async fn events(&self, work_id: &str) -> Result<VecDeque<StoredEvent>, RpcError> {
        let mut out = VecDeque::new();
        let mut after = 0i64;
        loop {
            let page = self
                .inner
                .store
                .call(&WorkEventsRequest {
                    work_id: work_id.to_owned(),
                    after,
                    limit: Some(200),
                    scopes: None,
                })
                .await
                .map_err(|e| store_failed(WorkEventsRequest::METHOD, e))?;
            if page.events.is_empty() {
                break;
            }
            for e in page.events {
                after = after.max(e.seq);
                out.push_back(e);
                if out.len() > CONTEXT_EVENTS {
                    out.pop_front();
                }
            }
        }
        Ok(out)
    }

    async fn read_context(&self, caller: &Caller) -> Result<Value, RpcError> {
        let events = self.events(&caller.authority.work_id).await?;
        let w = &caller.work;
        Ok(json!({
            "work": {"id": w.id, "scope": w.scope_id, "kind": w.kind, "state": w.state,
                     "display": w.display, "keys": w.keys, "context": w.context,
                     "binding": w.binding},
            "execution": {"id": caller.authority.execution_id, "attempt": caller.attempt,
                          "epoch": caller.authority.epoch},
            "events": events,
            "tools": tb::TOOLS,
            "operations": self.granted(&caller.binding).into_iter().map(|(_, g)| g.name).collect::<Vec<_>>(),
        }))
    }
}

pub(super) fn strings(v: &Value) -> Vec<String> {
    v.as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .map(str::to_owned)
        .collect()
}

fn random_id() -> String {
    protocol::random::unique_hex::<12>()
}

/// The Wait a `wait` input asks for: the Work's own keys unless it names some; a
/// timeout as `due_at` or `timeout_s`; a timed Wait with no description is described
/// by its due time.
fn wait_from_input(input: &Value, work: &WorkRow) -> Result<WaitRequest, RpcError> {
    let mut keys = strings(&input["keys"]);
    if keys.is_empty() {
        keys = work.keys.clone();
    }
    let due_at = match (input["due_at"].as_str(), input["timeout_s"].as_u64()) {
        (Some(d), _) => {
            protocol::time::parse_rfc3339_ms(d)
                .ok_or_else(|| refuse(Code::Invalid, "due_at is not an RFC 3339 time"))?;
            d.to_owned()
        }
        (None, Some(s)) => {
            let s = i64::try_from(s.min(366 * 86_400)).unwrap_or(0);
            protocol::time::format_rfc3339_ms(protocol::time::now_ms() + s * 1000)
        }
        (None, None) => String::new(),
    };
    if keys.is_empty() && due_at.is_empty() {
        return Err(refuse(
            Code::Invalid,
            "a wait needs keys (the Work has none) or a timeout",
        ));
    }
    let mut description = input["description"].as_str().unwrap_or_default().to_owned();
    if description.is_empty() && !due_at.is_empty() {
        description = format!("until {due_at}");
    }
    let w = WaitRequest {
        keys,
        types: strings(&input["types"]),
        due_at,
        description,
        plan: Value::Null,
    };
    Ok(WaitRequest {
        description: w.clipped_description(),
        ..w
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn work(keys: &[&str]) -> WorkRow {
        serde_json::from_value(
            json!({"id": "w", "scope_id": "s", "kind": "k", "binding": "b",
            "state": "running", "keys": keys, "lease_epoch": 1, "failures": 0,
            "created_at": "now", "updated_at": "now", "version": 1}),
        )
        .unwrap()
    }

    #[test]
    fn a_wait_defaults_to_the_work_keys_and_describes_its_due_time() {
        let w = wait_from_input(&json!({"timeout_s": 60}), &work(&["github:o/r#1"])).unwrap();
        assert_eq!(w.keys, vec!["github:o/r#1"]);
        assert!(w.description.starts_with("until "), "{}", w.description);
        assert!(wait_from_input(&json!({}), &work(&[])).is_err());
        assert!(wait_from_input(&json!({"due_at": "tomorrow"}), &work(&["k"])).is_err());
    }
}
