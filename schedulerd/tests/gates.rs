//! Operation gates in-process, through the toolbelt's socket as an agent's client
//! reaches it: a package serving `operation.gate` in the caller's scope is asked
//! about every call of another package's operation before it is forwarded. It lets
//! the call through, refuses it (the agent reads the gate's reason), or parks it on
//! a Wait the turn declares (an answer never kept, so the call made again asks the
//! gate again); a gate that fails, times out or crashes refuses the call with
//! `gate_failed` and nothing is done.

#![allow(clippy::unwrap_used)]

mod common;
use common::*;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use busapi::ext::{OperationInfo, Registration};
use busapi::store::KvGetRequest;
use protocol::toolbelt::{CallParams, METHOD_CALL};
use protocol::{CallError, Peer, RpcError};
use schedulerd::toolbelt::Toolbelt;
use serde_json::{json, Value};

/// How the test's gate answers `operation.gate`.
#[derive(Clone)]
enum Gate {
    Through,
    Refuse,
    Park,
    Fail(RpcError),
    Garbled,
    Silent,
}

struct Turn {
    s: Sched,
    tb: Toolbelt,
    work_id: String,
    execution_id: String,
    token: String,
    agent: Peer,
    gate: Arc<Mutex<Gate>>,
}

impl Turn {
    async fn call(&self, operation: &str, request_id: &str) -> Result<Value, CallError> {
        let p = CallParams {
            token: self.token.clone(),
            tool: "call".into(),
            input: json!({"operation": operation, "input": {"q": "x"}}),
            request_id: request_id.into(),
        };
        self.agent.call(METHOD_CALL, &p).await
    }

    fn gate(&self, g: Gate) {
        *self.gate.lock().unwrap() = g;
    }

    fn asked(&self, method: &str) -> usize {
        self.s.ext.calls_of(method).len()
    }

    async fn kept(&self, request_id: &str) -> Option<Value> {
        self.s
            .call(&KvGetRequest {
                owner: "core".into(),
                namespace: "core.toolbelt".into(),
                key: format!("call/{}/{request_id}", self.work_id),
            })
            .await
            .value
    }
}

fn op(name: &str, kind: &str) -> OperationInfo {
    OperationInfo {
        name: name.into(),
        kind: kind.into(),
        ..OperationInfo::default()
    }
}

/// A gate package named `name` in `scopes`, with an operation of its own.
fn gate_package(name: &str, scopes: &[&str]) -> Registration {
    let mut p = package(name, scopes);
    p.surfaces.operation_gate = true;
    p.operations = vec![op(&format!("{name}.ask"), "handler")];
    p
}

fn refusal(e: &CallError) -> (String, String) {
    let r = e.rpc().unwrap();
    (
        r.app_code().unwrap_or_default().to_owned(),
        r.message.clone(),
    )
}

/// A running attempt in scope `demo` whose binding grants `hook.lookup` and
/// `people.ask`, with the gate `people` in `demo` and `watcher` elsewhere.
async fn turn(name: &str) -> Turn {
    let mut hook = hook();
    hook.operations = vec![op("hook.lookup", "handler")];
    let s = Sched::new(
        name,
        vec![
            hook,
            shell(),
            gate_package("people", &["demo"]),
            gate_package("watcher", &["elsewhere"]),
        ],
    )
    .await;
    let gate = Arc::new(Mutex::new(Gate::Through));
    let mode = gate.clone();
    s.ext.answer_async(move |c| {
        let mode = mode.lock().unwrap().clone();
        async move {
            if let Some(a) = route_match(&c) {
                return a;
            }
            let p = params(&c);
            match c.method.as_str() {
                "operation.gate" => match mode {
                    Gate::Through => Ok(json!({})),
                    Gate::Refuse => {
                        let mut e = RpcError::authored("unauthorized", "rejected (log)");
                        e.data.as_mut().unwrap()["agent_message"] =
                            json!("rejected by cli:alice: not on a Friday");
                        Err(e)
                    }
                    Gate::Park => Ok(json!({"wait": {
                        "keys": [format!("human/gate/{}", p["request_id"].as_str().unwrap_or_default())],
                        "types": ["core.action.approve", "core.action.reject"],
                        "description": "approval of hook.lookup by a person\nsecond line",
                        "plan": {"kind": "gate"}}})),
                    Gate::Fail(e) => Err(e),
                    Gate::Garbled => Ok(json!({"wait": 5})),
                    Gate::Silent => std::future::pending().await,
                },
                "operation.call" => Ok(json!({"output": {"found": p["input"]["q"]}})),
                _ => Ok(json!({})),
            }
        }
    });
    let mut c = config();
    c["scopes"][0]["bindings"][0]["operations"] = json!(["hook.lookup", "people.ask"]);
    c["scopes"]
        .as_array_mut()
        .unwrap()
        .push(json!({"id": "elsewhere"}));
    s.configure(c).await;
    let (work_id, _) = s.routed_work("hook:7").await;
    let a = s.attempt(&work_id).await;
    Turn {
        token: a.token,
        tb: a.tb,
        s,
        work_id,
        execution_id: a.execution_id,
        agent: a.agent,
        gate,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gate_lets_a_call_through_refuses_it_or_parks_it_until_it_is_made_again() {
    let t = turn("gates-answers").await;

    // Through: the operation runs, and its answer is kept for the request ID.
    let found = t.call("hook.lookup", "r-1").await.unwrap();
    assert_eq!(found, json!({"found": "x"}));
    let asked = t.s.ext.calls_of("operation.gate");
    assert_eq!(
        asked.len(),
        1,
        "only the gate of the caller's scope is asked"
    );
    assert_eq!(asked[0].name, "people");
    let p = params(&asked[0]);
    assert_eq!(
        (
            p["operation"].as_str(),
            p["owner"].as_str(),
            p["request_id"].as_str()
        ),
        (Some("hook.lookup"), Some("hook"), Some("r-1"))
    );
    assert_eq!(p["authority"]["work_id"], json!(t.work_id));
    assert_eq!(p["input"], json!({"q": "x"}));
    assert_eq!(t.kept("r-1").await, Some(json!({"output": found})));
    // A gate is not asked about its own package's operations.
    t.call("people.ask", "r-own").await.unwrap();
    assert_eq!(t.asked("operation.gate"), 1);

    // Refused: the agent reads the gate's reason; the operation is never asked.
    t.gate(Gate::Refuse);
    let calls = t.asked("operation.call");
    let e = t.call("hook.lookup", "r-2").await.unwrap_err();
    let (code, message) = refusal(&e);
    assert_eq!(code, "unauthorized");
    assert_eq!(
        message,
        "hook.lookup: rejected by cli:alice: not on a Friday"
    );
    assert_eq!(t.asked("operation.call"), calls);
    assert_eq!(t.kept("r-2").await, None);

    // Parked: the turn declares the gate's Wait, owned by the gate's package, and the
    // agent is told to end its turn and call again with the same request ID.
    t.gate(Gate::Park);
    let parked = t.call("hook.lookup", "r-3").await.unwrap();
    assert_eq!(parked["parked"], json!(true));
    assert_eq!(parked["request_id"], "r-3");
    let message = parked["message"].as_str().unwrap();
    assert!(
        message.starts_with(
            "hook.lookup needs a person's approval (approval of hook.lookup by a person): your turn ends now"
        ) && message.contains("call it again with the same request_id (\"r-3\")"),
        "{message}"
    );
    assert_eq!(parked["wait"]["keys"], json!(["human/gate/r-3"]));
    assert_eq!(t.asked("operation.call"), calls);
    let declared = schedulerd::toolbelt::declared(&t.s.store, &t.execution_id)
        .await
        .unwrap();
    assert_eq!(declared.wait_owner, "people");
    let wait = declared.wait.unwrap();
    assert_eq!(wait.description, "approval of hook.lookup by a person");
    assert_eq!(
        wait.types,
        ["core.action.approve", "core.action.reject"].map(String::from)
    );
    assert_eq!(t.kept("r-3").await, None, "a parked answer is not kept");

    // Made again once approved: the gate is asked again, and lets it through.
    t.gate(Gate::Through);
    let gates = t.asked("operation.gate");
    let found = t.call("hook.lookup", "r-3").await.unwrap();
    assert_eq!(found, json!({"found": "x"}));
    assert_eq!(t.asked("operation.gate"), gates + 1);
    assert_eq!(t.asked("operation.call"), calls + 1);
    assert_eq!(t.kept("r-3").await, Some(json!({"output": found})));

    // A parked call needs a request ID to be made again as the same call.
    t.gate(Gate::Park);
    let e = t.call("hook.lookup", "").await.unwrap_err();
    let (code, message) = refusal(&e);
    assert_eq!(code, "invalid");
    assert!(message.contains("call it with a request_id"), "{message}");
    assert_eq!(t.asked("operation.call"), calls + 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gate_that_fails_times_out_or_crashes_refuses_the_call_and_nothing_is_done() {
    let t = turn("gates-fail-closed").await;
    t.tb.set_gate_timeout(Duration::from_millis(50));
    let mut crashed = RpcError::authored(
        "unavailable",
        "the extension crashed during the call (closed)",
    );
    crashed.data.as_mut().unwrap()["crashed"] = json!(true);
    let failures = [
        ("crash", Gate::Fail(crashed)),
        (
            "timeout in extrunner",
            Gate::Fail(RpcError::authored(
                "unavailable",
                "`people` did not answer `operation.gate` within 50ms",
            )),
        ),
        (
            "internal",
            Gate::Fail(RpcError::authored("internal", "boom")),
        ),
        ("garbled answer", Gate::Garbled),
        ("silence", Gate::Silent),
    ];
    for (i, (what, gate)) in failures.into_iter().enumerate() {
        t.gate(gate);
        let rid = format!("f-{i}");
        let e = t.call("hook.lookup", &rid).await.unwrap_err();
        let (code, message) = refusal(&e);
        assert_eq!(code, "gate_failed", "{what}: {message}");
        assert_eq!(
            message,
            "hook.lookup: the approval gate (people) failed, so the call was refused and nothing was done; try again later",
            "{what}"
        );
        assert!(
            t.s.ext.calls_of("operation.call").is_empty(),
            "{what}: the operation was asked"
        );
        assert_eq!(t.kept(&rid).await, None, "{what}");
    }
    assert!(schedulerd::toolbelt::declared(&t.s.store, &t.execution_id)
        .await
        .is_none_or(|d| d.wait.is_none()));
}
