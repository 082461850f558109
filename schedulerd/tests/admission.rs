//! Admission in-process: before a Work's first attempt, a package serving
//! `work.admit` in its scope is asked with the Work, its binding and its first
//! input, and may hold it (the Work waits in the store until the package settles
//! the hold) or let it through; a gate that fails refuses the start for that pass
//! only. A scope's `admission.max_agent_turns` bounds its agent turns running at
//! once, under a burst of ready Work.

#![allow(clippy::unwrap_used)]

mod common;
use common::*;

use std::sync::{Arc, Mutex};

use busapi::store::{ExecutionsRequest, WorkSettleHoldRequest};
use protocol::RpcError;
use serde_json::{json, Value};

/// A start gate named `people` in scope `demo`.
fn people() -> busapi::ext::Registration {
    let mut p = package("people", &["demo"]);
    p.surfaces.start_gate = true;
    p
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_start_gate_holds_work_until_settled_lets_it_through_or_fails_for_a_pass() {
    let s = Sched::new("admission", vec![hook(), shell(), people()]).await;
    // The gate's answer, by the Work's key.
    let answers: Arc<Mutex<Value>> = Arc::new(Mutex::new(json!({})));
    let gate = answers.clone();
    s.ext.answer_with(move |c| {
        if let Some(a) = route_match(c) {
            return a;
        }
        match c.method.as_str() {
            "work.admit" => {
                let key = params(c)["work"]["keys"][0].as_str().unwrap().to_owned();
                match &gate.lock().unwrap()[&key] {
                    Value::Null => Ok(json!({})),
                    Value::String(e) => Err(RpcError::authored("unavailable", e.clone())),
                    hold => Ok(json!({"hold": hold})),
                }
            }
            "executor.wait" => Ok(json!({"outcome": "completed"})),
            _ => Ok(json!({})),
        }
    });
    s.configure(config()).await;
    answers.lock().unwrap()["hook:1"] = json!({"reason": "waiting for a person to admit it"});
    answers.lock().unwrap()["hook:3"] = json!("the gate is down");
    let (held, seq) = s.routed_work("hook:1").await;
    let (through, _) = s.routed_work("hook:2").await;
    let starter = s.starter("h1").await;

    // Held: asked with the Work, its binding and its first input; the hold is in
    // the store and nothing starts. Through: it starts at once.
    assert_eq!(starter.pass().await.unwrap(), 1);
    let asked = s.ext.calls_of("work.admit");
    let first = asked
        .iter()
        .map(params)
        .find(|p| p["work"]["id"] == json!(held))
        .unwrap();
    assert_eq!(first["binding"], "run");
    assert_eq!(first["input"]["sequence"], json!(seq));
    assert_eq!(first["input"]["type"], "hook.opened");
    assert!(first["work"].get("hold").is_none());
    let work = s.work(&held).await;
    let hold = work.hold.clone().unwrap();
    assert_eq!(
        (
            hold.owner.as_str(),
            hold.reason.as_str(),
            work.state.as_str()
        ),
        ("people", "waiting for a person to admit it", "pending")
    );
    assert!(s.executions(&held).await.is_empty());
    assert_eq!(s.executions(&through).await.len(), 1);
    // A held Work is not asked about again while held.
    let before = s.ext.calls_of("work.admit").len();
    assert_eq!(starter.pass().await.unwrap(), 0);
    assert_eq!(s.ext.calls_of("work.admit").len(), before);

    // Settled by its package: it starts, and the package is not asked again.
    let settled = s
        .call(&WorkSettleHoldRequest {
            work_id: held.clone(),
            owner: "people".into(),
            admit: true,
            reason: "admitted by cli:alice".into(),
            key: "act-1".into(),
            scopes: None,
        })
        .await;
    assert!(settled.settled);
    assert_eq!(starter.pass().await.unwrap(), 1);
    assert_eq!(s.ext.calls_of("work.admit").len(), before);
    assert_eq!(s.executions(&held).await.len(), 1);
    assert_eq!(s.work(&held).await.admitted, ["people"]);

    // A gate that fails refuses the start for this pass, says why, and is asked
    // again on the next.
    let (failing, _) = s.routed_work("hook:3").await;
    assert_eq!(starter.pass().await.unwrap(), 0);
    let (_, blocked) = starter.snapshot();
    let why = blocked.get(&failing).unwrap();
    assert!(
        why.contains("start gate people failed") && why.contains("the gate is down"),
        "{why}"
    );
    let work = s.work(&failing).await;
    assert_eq!((work.state.as_str(), work.hold), ("pending", None));
    let asked = s.ext.calls_of("work.admit").len();
    answers.lock().unwrap()["hook:3"] = Value::Null;
    assert_eq!(starter.pass().await.unwrap(), 1);
    assert_eq!(s.ext.calls_of("work.admit").len(), asked + 1);
    assert!(!starter.snapshot().1.contains_key(&failing));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_agent_turns_bounds_a_scope_under_a_burst_of_fifty_ready_works() {
    const MAX: usize = 3;
    const BURST: usize = 50;
    let s = Sched::new("admission-burst", vec![hook(), shell()]).await;
    let release = s.ext.runs_until_released(json!({"outcome": "completed"}));
    let mut c = config();
    c["settings"] = json!({"concurrency": 100});
    c["scopes"][0]["admission"] = json!({"max_agent_turns": MAX});
    s.configure(c).await;
    for i in 0..BURST {
        let key = format!("hook:{i}");
        s.accept(
            "demo",
            "hook.opened",
            &[&key],
            json!({"key": key, "title": "burst"}),
        )
        .await;
    }
    while s.works("demo").await.len() < BURST {
        s.route().await;
    }
    let starter = s.starter("h1").await;

    let running = || async {
        s.call(&ExecutionsRequest {
            state: Some("running".into()),
            limit: 1000,
            ..ExecutionsRequest::default()
        })
        .await
        .executions
        .len()
    };
    let completed = || async {
        s.works("demo")
            .await
            .iter()
            .filter(|w| w.state == "completed")
            .count()
    };
    let mut most = 0;
    let mut passes = 0;
    while completed().await < BURST {
        starter.pass().await.unwrap();
        passes += 1;
        let now = running().await;
        most = most.max(now);
        assert!(now <= MAX, "{now} agent turns run at once in the scope");
        assert!(starter.snapshot().0.len() <= MAX);
        if now == MAX {
            // Let one end, and wait until the starter has seen it end.
            release.notify_one();
            let seen = async {
                while starter.snapshot().0.len() >= MAX {
                    tokio::task::yield_now().await;
                }
            };
            tokio::time::timeout(HANG, seen).await.unwrap();
        } else if now > 0 {
            release.notify_one();
            tokio::task::yield_now().await;
        } else {
            // Nothing runs: the last ones are settling.
            tokio::task::yield_now().await;
        }
        assert!(passes < 100_000, "the burst never drained");
    }
    assert_eq!(most, MAX, "the scope ran its agent turns up to the bound");
}
