#![allow(clippy::unwrap_used)]
//! The real `oc-human-extension` binary as a child process, driven over its stdin
//! and stdout as the host drives it: initialize, configure, `operation.wait`
//! (`human.ask`), `work.actions`, `work.act`, `operation.gate`, `work.admit`,
//! `task.run` and validate. This test is the host: it answers `state.work`,
//! `state.waits`, `state.work_events`, `state.works` and `work.settle_hold` from a
//! small in-memory store and records every call the package makes.

use protocol::wire::{
    ActionOffer, Authority, OperationGateParams, OperationGateResult, OperationWaitParams,
    OperationWaitResult, TaskRunParams, ValidateParams, ValidateResult, WaitRequest, Work,
    WorkActParams, WorkActResult, WorkActionsParams, WorkAdmitParams, WorkAdmitResult, WorkHold,
};
use protocol::{connect, CallError, Code, FnHandler, Options, Peer, Request, RpcError};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::process::{Child, Command};

const EXE: &str = env!("CARGO_BIN_EXE_oc-human-extension");
/// Only against hangs: nothing here measures time.
const HANG: Duration = Duration::from_secs(60);
/// The most Works one `state.works` page of the stand-in holds, so paging is used.
const PAGE: usize = 2;

async fn within<F: std::future::Future>(f: F) -> F::Output {
    tokio::time::timeout(HANG, f).await.expect("hung")
}

/// The host's side: its Works, Waits and Events, what was settled, and every call
/// the package made.
#[derive(Default)]
struct HostState {
    calls: Vec<(String, Value)>,
    works: BTreeMap<String, Value>,
    waits: Vec<Value>,
    events: Vec<Value>,
    settled: Vec<Value>,
}

type Shared = Arc<Mutex<HostState>>;

impl HostState {
    fn methods(&mut self) -> Vec<String> {
        std::mem::take(&mut self.calls)
            .into_iter()
            .map(|(m, _)| m)
            .collect()
    }
}

fn serve(state: &Shared, request: &Request) -> Result<Value, RpcError> {
    let p = request.params_value()?;
    let mut s = state.lock().unwrap();
    s.calls.push((request.method.clone(), p.clone()));
    match request.method.as_str() {
        "state.work" => {
            let id = p["id"].as_str().unwrap();
            match s.works.get(id) {
                Some(w) => Ok(json!({ "work": w })),
                None => Err(RpcError::new(Code::NotFound, format!("no Work {id}"))),
            }
        }
        "state.waits" => {
            let id = p["work_id"].as_str().unwrap();
            let waits: Vec<&Value> = s.waits.iter().filter(|w| w["work_id"] == id).collect();
            Ok(json!({ "waits": waits }))
        }
        "state.work_events" => {
            let id = p["id"].as_str().unwrap();
            let after = p["after"].as_u64().unwrap_or(0);
            // One Event a page, so the package pages.
            let events: Vec<&Value> = s
                .events
                .iter()
                .filter(|e| e["payload"]["data"]["work_id"] == id)
                .filter(|e| e["sequence"].as_u64().unwrap() > after)
                .take(1)
                .collect();
            Ok(json!({ "events": events }))
        }
        "state.works" => {
            let scope = p["scope_id"].as_str().unwrap_or_default();
            let states: Vec<&str> = p["states"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .collect();
            let after = p["after"].as_str().unwrap_or_default();
            let matching: Vec<&Value> = s
                .works
                .iter()
                .filter(|(id, _)| id.as_str() > after)
                .map(|(_, w)| w)
                .filter(|w| scope.is_empty() || w["scope_id"] == scope)
                .filter(|w| states.is_empty() || states.contains(&w["state"].as_str().unwrap()))
                .collect();
            let page: Vec<&Value> = matching.iter().take(PAGE).copied().collect();
            let next = if matching.len() > PAGE {
                page.last().unwrap()["id"].clone()
            } else {
                json!("")
            };
            Ok(json!({ "works": page, "next": next }))
        }
        "work.settle_hold" => {
            s.settled.push(p.clone());
            let id = p["work_id"].as_str().unwrap().to_string();
            if let Some(w) = s.works.get_mut(&id) {
                w.as_object_mut().unwrap().remove("hold");
            }
            Ok(json!({ "settled": true }))
        }
        other => Err(RpcError::method_not_found(other)),
    }
}

struct Running {
    _child: Child,
    peer: Peer,
}

/// Starts the package against `state`, initializes and configures it.
async fn start(state: &Shared) -> Running {
    let mut child = Command::new(EXE)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let stdin = child.stdin.take().unwrap();
    let stdout = child.stdout.take().unwrap();
    let served = Arc::clone(state);
    let host = FnHandler(move |request: Request| {
        let served = Arc::clone(&served);
        async move { serve(&served, &request) }
    });
    let peer = connect(stdout, stdin, host, Options::named("human package"));
    let init = within(peer.call(
        "initialize",
        &json!({
            "protocol_versions": [1],
            "host": {"name": "test-host", "version": "0"},
            "state_dir": std::env::temp_dir(),
        }),
    ))
    .await
    .unwrap();
    assert_eq!(init["protocol_version"], 1);
    let file: Value = serde_json::from_str(oc_human::MANIFEST).unwrap();
    assert_eq!(init["manifest"], file);
    let configured = within(peer.call(
        "configure",
        &json!({"entries": [
            {"scope_id": "acme", "type": "human", "name": "people", "config": {
                "approvers": ["cli:alice", "github:octocat"],
                "gates": [{"operation": "github.open_pull_request", "timeout_s": 600}],
                "admission": {"by": "person"}}},
            {"scope_id": "open", "type": "human", "name": "anyone", "config": {
                "admission": {"hours": {"days": ["mon", "tue", "wed", "thu", "fri", "sat", "sun"],
                                        "from": "00:00", "to": "24:00", "zone": "Europe/Paris"}}}},
        ]}),
    ))
    .await
    .unwrap();
    assert_eq!(configured, json!({}));
    Running {
        _child: child,
        peer,
    }
}

fn authority(scope: &str, work: &str) -> Authority {
    Authority {
        scope_id: scope.into(),
        work_id: work.into(),
        execution_id: "x-1".into(),
        binding: "agent".into(),
        ..Authority::default()
    }
}

/// Declares `wait` as the host would: an active Wait of the package on `work`.
fn declare(state: &Shared, work: &str, wait_id: &str, wait: &WaitRequest) {
    state.lock().unwrap().waits.push(json!({
        "id": wait_id, "work_id": work, "state": "active", "owner": "human",
        "description": wait.description, "keys": wait.keys, "types": wait.types,
        "plan": wait.plan, "due_at": wait.due_at,
    }));
}

fn set_wait_state(state: &Shared, wait_id: &str, to: &str) {
    let mut s = state.lock().unwrap();
    let w = s.waits.iter_mut().find(|w| w["id"] == wait_id).unwrap();
    w["state"] = json!(to);
}

/// Records the Event the host records for an action.
fn record(state: &Shared, seq: u64, work: &str, action: &str, caller: &str, act: &WorkActResult) {
    state.lock().unwrap().events.push(json!({
        "id": format!("e-{seq}"), "sequence": seq, "type": format!("core.action.{action}"),
        "source": "core/actions/cli", "delivery_id": format!("k-{seq}"), "scope_id": "acme",
        "keys": act.keys,
        "payload": {"schema": "core.action.v1", "data": {
            "action": action, "provider": "human", "caller": caller, "work_id": work,
            "input": {}, "decision": act.decision}},
    }));
}

fn add_work(state: &Shared, id: &str, scope: &str, work_state: &str, held: bool) {
    let mut w = serde_json::to_value(Work {
        id: id.into(),
        scope_id: scope.into(),
        kind: "work".into(),
        state: work_state.into(),
        binding: "agent".into(),
        hold: held.then(|| WorkHold {
            owner: "human".into(),
            reason: "outside the hours of admission".into(),
            held_at: "2026-10-25T08:00:00Z".into(),
        }),
        ..Work::default()
    })
    .unwrap();
    if !held {
        w.as_object_mut().unwrap().remove("hold");
    }
    state.lock().unwrap().works.insert(id.into(), w);
}

async fn actions(ext: &Running, scope: &str, work: &str) -> Vec<ActionOffer> {
    within(ext.peer.call_typed(&WorkActionsParams {
        scope_id: scope.into(),
        work_id: work.into(),
    }))
    .await
    .unwrap()
    .actions
}

async fn act(
    ext: &Running,
    work: &str,
    action: &str,
    input: Value,
    caller: &str,
) -> Result<WorkActResult, RpcError> {
    match within(ext.peer.call_typed(&WorkActParams {
        scope_id: "acme".into(),
        work_id: work.into(),
        action: action.into(),
        input,
        caller: caller.into(),
        key: "k-1".into(),
    }))
    .await
    {
        Ok(r) => Ok(r),
        Err(CallError::Rpc(e)) => Err(e),
        Err(other) => panic!("{other}"),
    }
}

async fn gate(
    ext: &Running,
    operation: &str,
    request_id: &str,
    input: Value,
) -> Result<OperationGateResult, RpcError> {
    match within(ext.peer.call_typed(&OperationGateParams {
        operation: operation.into(),
        owner: "github".into(),
        request_id: request_id.into(),
        authority: authority("acme", "w-1"),
        input,
    }))
    .await
    {
        Ok(r) => Ok(r),
        Err(CallError::Rpc(e)) => Err(e),
        Err(other) => panic!("{other}"),
    }
}

fn agent_message(e: &RpcError) -> &str {
    e.data.as_ref().unwrap()["agent_message"].as_str().unwrap()
}

#[tokio::test]
async fn an_ask_is_offered_answered_and_refused_to_others() {
    let state = Shared::default();
    let ext = start(&state).await;
    add_work(&state, "w-1", "acme", "waiting", false);

    let planned: OperationWaitResult = within(ext.peer.call_typed(&OperationWaitParams {
        operation: "human.ask".into(),
        request_id: "r-1".into(),
        authority: authority("acme", "w-1"),
        input: json!({"question": "Which database?\nWe need one for the cache.",
                      "choices": ["postgres", "sqlite"], "timeout_s": 3600}),
    }))
    .await
    .unwrap();
    let wait = planned.wait;
    let ask_id = wait.plan["ask_id"].as_str().unwrap().to_string();
    assert_eq!(ask_id, oc_human::ask_id("w-1", "r-1", "", ""));
    assert_eq!(wait.keys, [format!("human/ask/{ask_id}")]);
    assert_eq!(wait.types, ["core.action.answer"]);
    assert_eq!(wait.description, "Which database?");
    assert!(!wait.due_at.is_empty());
    assert_eq!(wait.plan["choices"], json!(["postgres", "sqlite"]));
    assert!(
        state.lock().unwrap().methods().is_empty(),
        "planning reads nothing"
    );

    // A bad ask is refused with a message for the agent.
    let e = within(ext.peer.call_typed(&OperationWaitParams {
        operation: "human.ask".into(),
        request_id: "r-2".into(),
        authority: authority("acme", "w-1"),
        input: json!({"question": "Pick", "choices": ["a", "a"]}),
    }))
    .await
    .unwrap_err();
    let CallError::Rpc(e) = e else { panic!() };
    assert!(e.is(Code::Invalid));
    assert_eq!(
        agent_message(&e),
        "human.ask: /choices/1: \"a\" is offered twice"
    );
    // A scope without a human entry has nobody to answer.
    let e = within(ext.peer.call_typed(&OperationWaitParams {
        operation: "human.ask".into(),
        request_id: "r-3".into(),
        authority: authority("elsewhere", "w-9"),
        input: json!({"question": "Anyone?"}),
    }))
    .await
    .unwrap_err();
    let CallError::Rpc(e) = e else { panic!() };
    assert!(agent_message(&e).contains("no human entry"), "{e}");

    declare(&state, "w-1", "wt-1", &wait);
    let offered = actions(&ext, "acme", "w-1").await;
    assert_eq!(offered.len(), 1, "{offered:?}");
    let answer = &offered[0];
    assert_eq!(answer.id, "answer");
    assert_eq!(answer.choices, ["postgres", "sqlite"]);
    assert_eq!(answer.prompt, "Which database?\nWe need one for the cache.");
    assert!(answer.awaited);
    assert_eq!(answer.input, json!({ "ask_id": ask_id }));
    assert_eq!(
        state.lock().unwrap().methods(),
        ["state.work", "state.waits"]
    );

    // Someone who is not an approver.
    let e = act(
        &ext,
        "w-1",
        "answer",
        json!({"ask_id": ask_id, "choice": 1}),
        "cli:bob",
    )
    .await
    .unwrap_err();
    assert!(e.is(Code::Unauthorized));
    assert_eq!(
        e.message,
        "cli:bob may not answer here: only cli:alice, github:octocat may"
    );
    // A choice not offered.
    let e = act(
        &ext,
        "w-1",
        "answer",
        json!({"ask_id": ask_id, "choice": "mysql"}),
        "cli:alice",
    )
    .await
    .unwrap_err();
    assert!(e.is(Code::Invalid));
    assert_eq!(
        e.message,
        "answer: choice \"mysql\" is not one offered (1-2 of: postgres, sqlite)"
    );
    // An ask that is not there.
    let e = act(
        &ext,
        "w-1",
        "answer",
        json!({"ask_id": "a-000000000000", "answer": "x"}),
        "cli:alice",
    )
    .await
    .unwrap_err();
    assert!(e.is(Code::NotFound));
    // The answer: keys and decision planned, nothing written.
    state.lock().unwrap().methods();
    let r = act(
        &ext,
        "w-1",
        "answer",
        json!({"ask_id": ask_id, "choice": 2}),
        "github:octocat",
    )
    .await
    .unwrap();
    assert_eq!(r.keys, [format!("human/ask/{ask_id}")]);
    assert_eq!(r.decision, json!({"ask_id": ask_id, "answer": "sqlite"}));
    assert!(r.settle_hold.is_none());
    assert_eq!(
        state.lock().unwrap().methods(),
        ["state.work", "state.waits"]
    );

    // Once the answer woke the Wait, the ask is closed and offered no more.
    set_wait_state(&state, "wt-1", "woken");
    let e = act(
        &ext,
        "w-1",
        "answer",
        json!({"ask_id": ask_id, "answer": "postgres"}),
        "cli:alice",
    )
    .await
    .unwrap_err();
    assert!(e.is(Code::Conflict), "{e}");
    assert!(actions(&ext, "acme", "w-1").await.is_empty());
    // Another scope's Work is not reached through this one.
    add_work(&state, "w-x", "open", "waiting", false);
    let e = act(
        &ext,
        "w-x",
        "answer",
        json!({"ask_id": ask_id, "answer": "x"}),
        "cli:alice",
    )
    .await
    .unwrap_err();
    assert!(e.is(Code::NotFound));
    assert!(actions(&ext, "acme", "w-x").await.is_empty());
    assert!(actions(&ext, "acme", "w-none").await.is_empty());
}

#[tokio::test]
async fn a_gate_parks_the_call_until_a_person_decides() {
    let state = Shared::default();
    let ext = start(&state).await;
    add_work(&state, "w-1", "acme", "running", false);
    let pr = json!({"title": "Fix the parser", "head": "fix", "base": "main"});

    // Not gated: through, without reading anything.
    let r = gate(&ext, "github.comment", "r-0", json!({"body": "hi"}))
        .await
        .unwrap();
    assert_eq!(r, OperationGateResult::default());
    assert!(state.lock().unwrap().methods().is_empty());

    // Gated: parks on a Wait for an approver.
    let r = gate(&ext, "github.open_pull_request", "r-1", pr.clone())
        .await
        .unwrap();
    let wait = r.wait.unwrap();
    let gate_id = wait.plan["gate_id"].as_str().unwrap().to_string();
    assert_eq!(
        gate_id,
        oc_human::gate_id("w-1", "github.open_pull_request", "r-1", &pr)
    );
    assert_eq!(wait.keys, [format!("human/gate/{gate_id}")]);
    assert_eq!(wait.types, ["core.action.approve", "core.action.reject"]);
    assert_eq!(
        wait.description,
        "approval of github.open_pull_request by cli:alice or github:octocat"
    );
    assert_eq!(wait.plan["timeout_s"], 600);
    assert_eq!(
        wait.plan["approvers"],
        json!(["cli:alice", "github:octocat"])
    );
    assert_eq!(state.lock().unwrap().methods(), ["state.waits"]);
    declare(&state, "w-1", "wt-1", &wait);

    // Offered to a person: approve and reject.
    let offered = actions(&ext, "acme", "w-1").await;
    let ids: Vec<&str> = offered.iter().map(|o| o.id.as_str()).collect();
    assert_eq!(ids, ["approve", "reject"]);
    assert_eq!(
        offered[0].detail,
        "github.open_pull_request base=\"main\" head=\"fix\" title=\"Fix the parser\""
    );
    assert_eq!(offered[1].input, json!({ "gate_id": gate_id }));

    // Called again while it waits: the same Wait.
    let again = gate(&ext, "github.open_pull_request", "r-1", pr.clone())
        .await
        .unwrap();
    assert_eq!(again.wait.unwrap().keys, wait.keys);

    // Approved (by an approver; another person is refused): through.
    let e = act(
        &ext,
        "w-1",
        "approve",
        json!({"gate_id": gate_id}),
        "cli:bob",
    )
    .await
    .unwrap_err();
    assert!(e.is(Code::Unauthorized));
    let approval = act(
        &ext,
        "w-1",
        "approve",
        json!({"gate_id": gate_id}),
        "cli:alice",
    )
    .await
    .unwrap();
    assert_eq!(approval.keys, [format!("human/gate/{gate_id}")]);
    assert_eq!(
        approval.decision,
        json!({"gate_id": gate_id, "approved": true, "reason": ""})
    );
    // An unrelated Event first, so the package pages through the Work's Events.
    record(
        &state,
        1,
        "w-1",
        "stop",
        "cli:alice",
        &WorkActResult::default(),
    );
    record(&state, 2, "w-1", "approve", "cli:alice", &approval);
    set_wait_state(&state, "wt-1", "woken");
    state.lock().unwrap().methods();
    let r = gate(&ext, "github.open_pull_request", "r-1", pr.clone())
        .await
        .unwrap();
    assert_eq!(
        r,
        OperationGateResult::default(),
        "approved: the call is made"
    );
    let read = state.lock().unwrap().methods();
    assert_eq!(read[0], "state.waits");
    assert!(
        read[1..].iter().all(|m| m == "state.work_events") && read.len() >= 3,
        "{read:?}"
    );
    // The approval was of that call: the same request with another input waits anew.
    let other = gate(
        &ext,
        "github.open_pull_request",
        "r-1",
        json!({"title": "Other"}),
    )
    .await
    .unwrap();
    assert!(other.wait.is_some());

    // Rejected: refused, the agent reading who and why.
    let r2 = gate(&ext, "github.open_pull_request", "r-2", pr.clone())
        .await
        .unwrap();
    let wait2 = r2.wait.unwrap();
    let gate2 = wait2.plan["gate_id"].as_str().unwrap().to_string();
    declare(&state, "w-1", "wt-2", &wait2);
    let e = act(
        &ext,
        "w-1",
        "reject",
        json!({"gate_id": gate2, "reason": "a\nb"}),
        "github:octocat",
    )
    .await
    .unwrap_err();
    assert!(e.is(Code::Invalid));
    let rejection = act(
        &ext,
        "w-1",
        "reject",
        json!({"gate_id": gate2, "reason": "not before the release"}),
        "github:octocat",
    )
    .await
    .unwrap();
    assert_eq!(rejection.keys, [format!("human/gate/{gate2}")]);
    record(&state, 3, "w-1", "reject", "github:octocat", &rejection);
    set_wait_state(&state, "wt-2", "woken");
    let e = gate(&ext, "github.open_pull_request", "r-2", pr.clone())
        .await
        .unwrap_err();
    assert!(e.is(Code::Unauthorized));
    assert_eq!(
        agent_message(&e),
        "rejected by github:octocat: not before the release"
    );
    // A decided gate is closed to further decisions.
    let e = act(
        &ext,
        "w-1",
        "approve",
        json!({"gate_id": gate2}),
        "cli:alice",
    )
    .await
    .unwrap_err();
    assert!(e.is(Code::Conflict));

    // Timed out with no decision: refused.
    let r3 = gate(&ext, "github.open_pull_request", "r-3", pr.clone())
        .await
        .unwrap();
    declare(&state, "w-1", "wt-3", r3.wait.as_ref().unwrap());
    set_wait_state(&state, "wt-3", "timed_out");
    let e = gate(&ext, "github.open_pull_request", "r-3", pr)
        .await
        .unwrap_err();
    assert!(e.is(Code::Unauthorized));
    assert_eq!(
        agent_message(&e),
        "no approval within 600s: the call was not made"
    );

    // Another scope gates nothing.
    let r = within(ext.peer.call_typed(&OperationGateParams {
        operation: "github.open_pull_request".into(),
        owner: "github".into(),
        request_id: "r-1".into(),
        authority: authority("open", "w-7"),
        input: json!({}),
    }))
    .await
    .unwrap();
    assert_eq!(r, OperationGateResult::default());
}

#[tokio::test]
async fn admission_holds_by_person_and_the_hours_task_releases_its_holds() {
    let state = Shared::default();
    let ext = start(&state).await;
    let admit = |scope: &str, id: &str| WorkAdmitParams {
        work: Work {
            id: id.into(),
            scope_id: scope.into(),
            state: "pending".into(),
            ..Work::default()
        },
        binding: "agent".into(),
        input: None,
    };
    // By person: held.
    let r: WorkAdmitResult = within(ext.peer.call_typed(&admit("acme", "w-1")))
        .await
        .unwrap();
    assert_eq!(r.hold.unwrap().reason, "waiting for a person to admit it");
    // Open hours (every day, all day): through. No admission configured: through.
    let r: WorkAdmitResult = within(ext.peer.call_typed(&admit("open", "w-2")))
        .await
        .unwrap();
    assert_eq!(r, WorkAdmitResult::default());
    let r: WorkAdmitResult = within(ext.peer.call_typed(&admit("elsewhere", "w-3")))
        .await
        .unwrap();
    assert_eq!(r, WorkAdmitResult::default());
    assert!(state.lock().unwrap().methods().is_empty());

    // A person admits held Work; the hold is settled in the record.
    add_work(&state, "w-1", "acme", "pending", true);
    let offered = actions(&ext, "acme", "w-1").await;
    let ids: Vec<&str> = offered.iter().map(|o| o.id.as_str()).collect();
    assert_eq!(ids, ["admit", "reject"]);
    let r = act(&ext, "w-1", "admit", json!({}), "cli:alice")
        .await
        .unwrap();
    assert!(r.keys.is_empty());
    let settle = r.settle_hold.unwrap();
    assert!(settle.admit);
    assert_eq!(settle.reason, "admitted by cli:alice");
    let e = act(&ext, "w-1", "admit", json!({}), "cli:bob")
        .await
        .unwrap_err();
    assert!(e.is(Code::Unauthorized));

    // The hours task: the open scope's held Works are admitted (three, over two
    // pages), the scope that waits for a person keeps its own.
    for id in ["h-1", "h-2", "h-3"] {
        add_work(&state, id, "open", "pending", true);
    }
    add_work(&state, "h-4", "open", "pending", false);
    state.lock().unwrap().methods();
    let r = within(ext.peer.call_typed(&TaskRunParams {
        task: "human.hours".into(),
        now: "2026-10-25T12:00:00Z".into(),
    }))
    .await
    .unwrap();
    assert_eq!(r.detail, "admitted 3 held Work");
    let settled = std::mem::take(&mut state.lock().unwrap().settled);
    let ids: Vec<&str> = settled
        .iter()
        .map(|s| s["work_id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["h-1", "h-2", "h-3"]);
    assert!(settled.iter().all(|s| s["admit"] == true));
    assert_eq!(settled[0]["key"], "human/hours/h-1");
    assert_eq!(
        settled[0]["reason"],
        "admitted: within the hours (mon,tue,wed,thu,fri,sat,sun 00:00-24:00 Europe/Paris)"
    );
    let calls = std::mem::take(&mut state.lock().unwrap().calls);
    let listed: Vec<&Value> = calls
        .iter()
        .filter(|(m, _)| m == "state.works")
        .map(|(_, p)| p)
        .collect();
    assert_eq!(listed.len(), 2, "two pages: {listed:?}");
    assert!(listed
        .iter()
        .all(|p| p["scope_id"] == "open" && p["states"] == json!(["pending"])));
    let e = within(ext.peer.call_typed(&TaskRunParams {
        task: "human.other".into(),
        now: String::new(),
    }))
    .await
    .unwrap_err();
    let CallError::Rpc(e) = e else { panic!() };
    assert!(e.is(Code::NotFound));
}

#[tokio::test]
async fn configure_and_validate_name_the_bad_field() {
    let state = Shared::default();
    let ext = start(&state).await;
    let e = within(ext.peer.call(
        "configure",
        &json!({"entries": [{"scope_id": "acme", "type": "human", "name": "people",
                             "config": {"approvers": ["alice"]}}]}),
    ))
    .await
    .unwrap_err();
    let CallError::Rpc(e) = e else { panic!() };
    assert_eq!(
        e.message,
        "invalid params: scope acme, entry people: /approvers/0: \"alice\" is not surface:name (cli:alice, github:octocat)"
    );
    // The configuration before stays: acme still gates.
    let r = gate(&ext, "github.open_pull_request", "r-1", json!({}))
        .await
        .unwrap();
    assert!(r.wait.is_some());
    let v: ValidateResult = within(ext.peer.call_typed(&ValidateParams {
        kind: "extension".into(),
        type_name: "human".into(),
        config: json!({"gates": [{"operation": "github.*", "timeout_s": 0}]}),
        ..ValidateParams::default()
    }))
    .await
    .unwrap();
    assert_eq!(v.diagnostics.len(), 1);
    assert_eq!(v.diagnostics[0].path, "/gates/0/timeout_s");
    assert_eq!(
        v.diagnostics[0].message,
        "/gates/0/timeout_s: 0 is outside 1-2592000 (seconds; at most 30 days)"
    );
}

async fn render(ext: &Running, params: Value) -> Result<Vec<Value>, RpcError> {
    match within(ext.peer.call("view.render", &params)).await {
        Ok(r) => {
            let result: protocol::wire::ViewRenderResult =
                serde_json::from_value(r.clone()).unwrap();
            result.validate().unwrap();
            Ok(r["panels"].as_array().cloned().unwrap_or_default())
        }
        Err(CallError::Rpc(e)) => Err(e),
        Err(other) => panic!("{other}"),
    }
}

#[tokio::test]
async fn panels_show_what_waits_on_a_work_and_on_the_page() {
    let state = Shared::default();
    let ext = start(&state).await;
    // acme: w-1 waits on an ask; w-2 is held; w-4 is done (its ask closed); w-5 and
    // w-6 wait on nothing of the package's (so the page reads past a page of Works).
    // open: w-3 runs with a parked call.
    add_work(&state, "w-1", "acme", "waiting", false);
    add_work(&state, "w-2", "acme", "pending", true);
    add_work(&state, "w-3", "open", "running", false);
    add_work(&state, "w-4", "acme", "completed", false);
    add_work(&state, "w-0", "acme", "waiting", false);
    add_work(&state, "w-00", "acme", "waiting", false);
    let ask = WaitRequest {
        description: "Which database?".into(),
        plan: json!({"kind": "ask", "ask_id": "a-1", "question": "Which database?\nFor the cache.",
                     "choices": ["postgres", "sqlite"]}),
        ..WaitRequest::default()
    };
    declare(&state, "w-1", "wt-1", &ask);
    let gate = WaitRequest {
        plan: json!({"kind": "gate", "gate_id": "g-1", "operation": "github.open_pull_request",
                     "input": "title=\"Fix\""}),
        ..WaitRequest::default()
    };
    declare(&state, "w-3", "wt-3", &gate);
    declare(&state, "w-4", "wt-4", &ask);
    set_wait_state(&state, "wt-4", "woken");

    // On a Work: its ask, the choices as buttons of `answer`.
    let panels = render(
        &ext,
        json!({"surface": "work", "work_id": "w-1", "scope_id": "acme"}),
    )
    .await
    .unwrap();
    assert_eq!(panels.len(), 1, "{panels:#?}");
    assert_eq!(panels[0]["id"], "ask-a-1");
    assert_eq!(panels[0]["work_id"], "w-1");
    assert_eq!(
        panels[0]["sections"][0]["text"],
        "Which database?\nFor the cache."
    );
    assert_eq!(
        panels[0]["sections"][0]["buttons"],
        json!([
            {"label": "postgres", "action": "answer", "input": {"ask_id": "a-1", "choice": "postgres"}},
            {"label": "sqlite", "action": "answer", "input": {"ask_id": "a-1", "choice": "sqlite"}}
        ])
    );
    // A button's input answers the ask.
    let answered = act(
        &ext,
        "w-1",
        "answer",
        panels[0]["sections"][0]["buttons"][1]["input"].clone(),
        "cli:alice",
    )
    .await
    .unwrap();
    assert_eq!(answered.decision["answer"], "sqlite");

    // Held Work: admit and reject.
    let panels = render(
        &ext,
        json!({"surface": "work", "work_id": "w-2", "scope_id": "acme"}),
    )
    .await
    .unwrap();
    let actions: Vec<&Value> = panels[0]["sections"][0]["buttons"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| &b["action"])
        .collect();
    assert_eq!(actions, [&json!("admit"), &json!("reject")], "{panels:#?}");
    // Nothing open, another scope's Work, an unknown Work: no panels.
    for (work, scope) in [("w-4", "acme"), ("w-3", "acme"), ("w-9", "acme")] {
        let none = render(
            &ext,
            json!({"surface": "work", "work_id": work, "scope_id": scope}),
        )
        .await
        .unwrap();
        assert!(none.is_empty(), "{work}: {none:#?}");
    }

    // The page: every open item across the scopes, each naming its Work.
    let panels = render(&ext, json!({"surface": "page", "page": "asks"}))
        .await
        .unwrap();
    let shown: Vec<(&str, &str)> = panels
        .iter()
        .map(|p| (p["id"].as_str().unwrap(), p["work_id"].as_str().unwrap()))
        .collect();
    assert_eq!(
        shown,
        [
            ("ask-a-1", "w-1"),
            ("admission-w-2", "w-2"),
            ("approval-g-1", "w-3")
        ]
    );
    assert_eq!(
        panels[2]["sections"][0]["fields"][0],
        json!({"label": "Work", "value": "w-3"})
    );
    let only_open = render(
        &ext,
        json!({"surface": "page", "page": "asks", "scope_id": "open"}),
    )
    .await
    .unwrap();
    assert_eq!(only_open.len(), 1);
    let e = render(&ext, json!({"surface": "page", "page": "other"}))
        .await
        .unwrap_err();
    assert_eq!(e.app_code(), Some("not_found"));
    assert!(
        e.message.contains("human has no page \"other\""),
        "{}",
        e.message
    );
}
