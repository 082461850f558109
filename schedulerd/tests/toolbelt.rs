//! The toolbelt in-process, through its socket as an agent's client reaches it: what
//! a turn emits lands in the log (once per request ID, the answer kept in the
//! store), an extension operation's event is emitted as the toolbelt's own, a wait
//! operation's Wait is declared for the turn, an operation the binding does not
//! grant is refused, and a settled execution's token is no longer good.

#![allow(clippy::unwrap_used)]

mod common;
use common::*;

use busapi::ext::OperationInfo;
use busapi::store::{AttemptSettleRequest, EventGetRequest, KvGetRequest, SequenceRequest};
use protocol::toolbelt::{CallParams, METHOD_CALL};
use protocol::wire::Outcome;
use protocol::Peer;
use serde_json::{json, Value};

struct Turn {
    s: Sched,
    work_id: String,
    execution_id: String,
    epoch: i64,
    token: String,
    agent: Peer,
}

impl Turn {
    /// `toolbelt.call` of `tool` with `input`, as the agent's client sends it.
    async fn call(&self, tool: &str, input: Value, request_id: &str) -> Result<Value, String> {
        let p = CallParams {
            token: self.token.clone(),
            tool: tool.into(),
            input,
            request_id: request_id.into(),
        };
        self.agent
            .call(METHOD_CALL, &p)
            .await
            .map_err(|e| e.to_string())
    }
}

/// A running attempt of a routed Work, and an agent connected to the toolbelt with
/// its token.
async fn turn(name: &str) -> Turn {
    let mut hook = hook();
    hook.operations = [
        "hook.label:emit",
        "hook.await_checks:wait",
        "hook.lookup:handler",
        "hook.secret:handler",
    ]
    .iter()
    .map(|o| {
        let (name, kind) = o.split_once(':').unwrap();
        OperationInfo {
            name: name.into(),
            kind: kind.into(),
            ..OperationInfo::default()
        }
    })
    .collect();
    let s = Sched::new(name, vec![hook, shell()]).await;
    s.ext.answer_with(|c| {
        if let Some(a) = route_match(c) {
            return a;
        }
        let p = params(c);
        Ok(match c.method.as_str() {
            "operation.emit" => json!({
                "event": {"type": "hook.labelled", "source": "hook", "delivery_id": "l-1",
                          "payload": {"schema": "hook.labelled.v1",
                                      "data": {"label": p["input"]["label"]}},
                          "keys": ["hook:7"]},
                "output": {"labelled": true}}),
            "operation.wait" => json!({"wait": {"keys": ["pr:9"], "types": ["hook.checks"],
                                                "description": "checks on PR 9"}}),
            "operation.call" => json!({"output": {"found": p["input"]["q"],
                                                  "by": p["authority"]["work_id"]}}),
            _ => json!({}),
        })
    });
    s.configure(config()).await;
    let (work_id, _) = s.routed_work("hook:7").await;
    let a = s.attempt(&work_id).await;
    Turn {
        token: a.token,
        s,
        work_id,
        execution_id: a.execution_id,
        epoch: a.epoch,
        agent: a.agent,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_emit_lands_in_the_log_once_per_request_id() {
    let t = turn("toolbelt-emit").await;
    let s = &t.s;
    let first = t
        .call(
            "emit",
            json!({"type": "agent.note", "payload": {"text": "hi"}, "keys": ["note:1"]}),
            "r-1",
        )
        .await
        .unwrap();
    let id = first["event_id"].as_str().unwrap().to_owned();
    let event = s.call(&EventGetRequest { id, scopes: None }).await.event;
    assert_eq!(event.event_type, "agent.note");
    assert_eq!(event.source, "toolbelt/demo");
    assert_eq!(event.keys, vec!["note:1"]);
    assert_eq!(event.execution_id.as_deref(), Some(t.execution_id.as_str()));
    assert_eq!(
        event.payload,
        json!({"schema": "agent.note.v1", "data": {"text": "hi"}})
    );
    // Derived from the Work's own event.
    let parent = event.parent_id.clone().unwrap();
    let parent = s
        .call(&EventGetRequest {
            id: parent,
            scopes: None,
        })
        .await
        .event;
    assert_eq!(parent.event_type, "hook.opened");

    // The same request ID again: the kept answer, and nothing new in the log.
    let log = s.call(&SequenceRequest {}).await.sequence;
    let again = t
        .call(
            "emit",
            json!({"type": "agent.note", "payload": {"text": "hi"}, "keys": ["note:1"]}),
            "r-1",
        )
        .await
        .unwrap();
    assert_eq!(again, first);
    assert_eq!(s.call(&SequenceRequest {}).await.sequence, log);
    let kept = s
        .call(&KvGetRequest {
            owner: "core".into(),
            namespace: "core.toolbelt".into(),
            key: format!("call/{}/r-1", t.work_id),
        })
        .await;
    assert_eq!(kept.value, Some(json!({ "output": first })));

    // Outside the toolbelt's family: refused.
    let e = t
        .call("emit", json!({"type": "hook.opened", "payload": {}}), "r-2")
        .await
        .unwrap_err();
    assert!(e.contains("family agent.*"), "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn operations_the_binding_grants_reach_their_extension_and_their_effects_land() {
    let t = turn("toolbelt-ops").await;
    let s = &t.s;

    // An emit operation: the extension's event is emitted as the turn's.
    let labelled = t
        .call(
            "call",
            json!({"operation": "hook.label", "input": {"label": "bug"}}),
            "l-1",
        )
        .await
        .unwrap();
    assert_eq!(labelled["output"], json!({"labelled": true}));
    let id = labelled["event"]["event_id"].as_str().unwrap().to_owned();
    let event = s.call(&EventGetRequest { id, scopes: None }).await.event;
    assert_eq!(event.event_type, "hook.labelled");
    assert_eq!(event.source, "toolbelt/demo");
    assert_eq!(
        event.payload,
        json!({"schema": "hook.labelled.v1", "data": {"label": "bug"}})
    );
    assert_eq!(event.execution_id.as_deref(), Some(t.execution_id.as_str()));
    let asked = s.ext.calls_of("operation.emit");
    assert_eq!(asked[0].name, "hook");
    let p = params(&asked[0]);
    assert_eq!(p["operation"], "hook.label");
    assert_eq!(p["request_id"], "l-1");
    assert_eq!(p["authority"]["work_id"], json!(t.work_id));
    assert_eq!(p["authority"]["epoch"], json!(t.epoch));

    // A handler operation: its output.
    let found = t
        .call(
            "call",
            json!({"operation": "hook.lookup", "input": {"q": "x"}}),
            "",
        )
        .await
        .unwrap();
    assert_eq!(found, json!({"found": "x", "by": t.work_id}));

    // A wait operation: the turn ends parked on the extension's Wait (declared in the
    // store for the starter to settle with).
    let wait = t
        .call("call", json!({"operation": "hook.await_checks"}), "w-1")
        .await
        .unwrap();
    assert_eq!(wait["wait"]["keys"], json!(["pr:9"]));
    let declared = schedulerd::toolbelt::declared(&s.store, &t.execution_id)
        .await
        .unwrap();
    assert_eq!(declared.wait_owner, "hook");
    assert_eq!(declared.wait.unwrap().description, "checks on PR 9");
    t.call(
        "declare_outcome",
        json!({"outcome": "completed", "summary": "labelled"}),
        "",
    )
    .await
    .unwrap();
    let declared = schedulerd::toolbelt::declared(&s.store, &t.execution_id)
        .await
        .unwrap();
    assert_eq!(
        declared.outcome,
        Some((Outcome::Completed, "labelled".to_owned()))
    );

    // An operation the binding does not grant is refused, and its extension never
    // asked.
    let e = t
        .call("call", json!({"operation": "hook.secret"}), "")
        .await
        .unwrap_err();
    assert!(e.contains("grants no operation \"hook.secret\""), "{e}");
    assert!(s
        .ext
        .calls_of("operation.call")
        .iter()
        .all(|c| params(c)["operation"] != "hook.secret"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_settled_executions_token_is_refused() {
    let t = turn("toolbelt-settled").await;
    let context = t.call("read_context", Value::Null, "").await.unwrap();
    assert_eq!(context["work"]["id"], json!(t.work_id));
    assert_eq!(context["execution"]["id"], json!(t.execution_id));
    assert_eq!(context["events"][0]["type"], "hook.opened");
    t.s.call(&AttemptSettleRequest {
        execution_id: t.execution_id.clone(),
        epoch: t.epoch,
        outcome: Outcome::Completed,
        result: None,
        retry_at_ms: None,
        final_failure: false,
        wait: None,
        consumed: Vec::new(),
    })
    .await;
    let e = t.call("read_context", Value::Null, "").await.unwrap_err();
    assert!(e.contains("not a running execution"), "{e}");
}
