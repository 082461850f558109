//! The host's own actions in the store: `store.action_accept` (an action's Event,
//! accepted and attached to its Work in one write, once per identity) and
//! `store.work_retry` (a failed, cancelled, idle or completed Work runs again).

#![allow(clippy::unwrap_used)]

mod work_common;

#[macro_use]
mod backend;
use backend::Backend;
use serde_json::json;
use storaged::work::*;
use storaged::StoreError;
use work_common::*;

fn create(seq: i64, keys: &[&str]) -> RouteDecideRequest {
    req(json!({
        "seq": seq, "scope_id": "s1",
        "records": [{"handler": "gh", "binding": "b1", "matched": true, "reason": "an issue"}],
        "outcome": {"type": "create", "kind": "gh/issue", "binding": "b1", "keys": keys}
    }))
}

fn attach(seq: i64, work_id: &str) -> RouteDecideRequest {
    req(json!({
        "seq": seq, "scope_id": "s1",
        "records": [{"handler": "h", "matched": true}],
        "outcome": {"type": "attach", "work_id": work_id}
    }))
}

fn start(work_id: &str) -> AttemptStartRequest {
    req(
        json!({"work_id": work_id, "executor": "claude/code", "binding": "b1",
               "lease_owner": "sched-1", "lease_ttl_ms": 60_000}),
    )
}

fn settle(execution_id: &str, epoch: i64, outcome: &str) -> AttemptSettleRequest {
    req(json!({"execution_id": execution_id, "epoch": epoch, "outcome": outcome}))
}

fn action(work_id: &str, key: &str, kind: &str, states: &[&str]) -> ActionAcceptRequest {
    req(json!({
        "work_id": work_id,
        "states": states,
        "reason": format!("{kind} by github:octocat"),
        "event": {
            "scope_id": "s1",
            "type": format!("core.action.{kind}"),
            "source": "core/actions/github",
            "delivery_id": key,
            "schema": "core.action.v1",
            "payload": {"action": kind, "caller": "github:octocat", "work_id": work_id},
        }
    }))
}

fn retry(work_id: &str, seq: Option<i64>) -> WorkRetryRequest {
    req(json!({"work_id": work_id, "reason": "retry by github:octocat", "seq": seq}))
}

/// Accept an event the way ingress does (the store numbers it): its sequence.
async fn accept(t: &TestStore, n: i64, keys: &[&str]) -> i64 {
    let r = t
        .store
        .events_accept(req(json!({"events": [{
            "scope_id": "s1", "type": "gh.issue.opened", "source": "gh",
            "delivery_id": format!("d-{n}"), "payload": {"n": n}, "keys": keys,
        }]})))
        .await
        .unwrap();
    r.events[0].seq
}

fn is_conflict<T: std::fmt::Debug>(r: Result<T, StoreError>) -> String {
    match r {
        Err(StoreError::Conflict(m)) => m,
        other => panic!("expected conflict, got {other:?}"),
    }
}

async fn an_action_is_attached_once_and_never_left_for_the_router(b: Backend) {
    let t = TestStore::new(b, "action-accept");
    let s = &t.store;
    let e1 = accept(&t, 1, &["issue:1"]).await;
    let w = s
        .route_decide(create(e1, &["issue:1"]))
        .await
        .unwrap()
        .work_id
        .unwrap();
    s.attempt_start(start(&w)).await.unwrap();

    // Refused before anything is written: a state the action is not for, no
    // delivery ID, keys, another scope's Work, an unknown Work.
    let before = t.snapshot().await;
    let events = t.rows("SELECT count(*) FROM events").await;
    let m = is_conflict(
        s.action_accept(action(&w, "comment/1", "retry", &["failed"]))
            .await,
    );
    assert!(m.contains("is running"), "{m}");
    let mut no_id = action(&w, "comment/1", "stop", &[]);
    no_id.event.delivery_id = None;
    assert!(matches!(
        s.action_accept(no_id).await,
        Err(StoreError::Invalid(_))
    ));
    let mut keyed = action(&w, "comment/1", "stop", &[]);
    keyed.event.keys = vec!["issue:1".into()];
    assert!(matches!(
        s.action_accept(keyed).await,
        Err(StoreError::Invalid(_))
    ));
    let mut elsewhere = action(&w, "comment/1", "stop", &[]);
    elsewhere.event.scope_id = "s2".into();
    assert!(matches!(
        s.action_accept(elsewhere).await,
        Err(StoreError::Invalid(_))
    ));
    assert!(matches!(
        s.action_accept(action("work_nope", "comment/1", "stop", &[]))
            .await,
        Err(StoreError::NotFound(_))
    ));
    assert_eq!(t.snapshot().await, before);
    assert_eq!(t.rows("SELECT count(*) FROM events").await, events);

    // Accepted: a done input of the Work, routed, not unrouted, the Work unchanged.
    let stop = action(&w, "comment/1", "stop", &["running", "idle"]);
    let first = s.action_accept(stop.clone()).await.unwrap();
    assert!(first.added);
    assert_eq!(first.work_state, "running");
    assert_eq!(
        t.rows("SELECT seq, state FROM work_inputs ORDER BY seq")
            .await,
        [format!("{e1}|taken"), format!("{}|done", first.seq)]
    );
    assert_eq!(
        t.rows(&format!(
            "SELECT r.disposition, c.handler, c.work_id, c.reason FROM routed r \
             JOIN route_records c ON c.seq = r.seq WHERE r.seq = {}",
            first.seq
        ))
        .await,
        [format!("attached|core.action|{w}|stop by github:octocat")]
    );
    let unrouted = s
        .unrouted(req(json!({"after": 0, "limit": 10})))
        .await
        .unwrap();
    assert!(unrouted.events.is_empty(), "{:?}", unrouted.events.len());
    let work = s.work_get(req(json!({"id": w}))).await.unwrap().work;
    assert_eq!(work.state, "running");

    // The same key again: the Event kept, nothing written, whatever the state now.
    s.work_cancel(req(json!({"work_id": w}))).await.unwrap();
    let after = t.snapshot().await;
    let again = s.action_accept(stop).await.unwrap();
    assert_eq!(
        (again.id.as_str(), again.seq, again.added),
        (first.id.as_str(), first.seq, false)
    );
    assert_eq!(t.snapshot().await, after);
    // The same key for another action is another envelope: conflict.
    is_conflict(s.action_accept(action(&w, "comment/1", "retry", &[])).await);
    t.close();
}

async fn retry_reopens_a_failed_or_cancelled_work_and_turns_an_idle_one(b: Backend) {
    let t = TestStore::new(b, "retry");
    let s = &t.store;
    let e1 = accept(&t, 1, &["k"]).await;
    let e2 = accept(&t, 2, &["k"]).await;
    let e3 = accept(&t, 3, &["other"]).await;
    let w = s
        .route_decide(create(e1, &["k"]))
        .await
        .unwrap()
        .work_id
        .unwrap();

    // Pending, running: refused, nothing written.
    let before = t.snapshot().await;
    let m = is_conflict(s.work_retry(retry(&w, None)).await);
    assert!(m.contains("pending"), "{m}");
    assert!(matches!(
        s.work_retry(retry("work_nope", None)).await,
        Err(StoreError::NotFound(_))
    ));
    assert_eq!(t.snapshot().await, before);
    let a1 = s.attempt_start(start(&w)).await.unwrap();
    let m = is_conflict(s.work_retry(retry(&w, None)).await);
    assert!(m.contains("running") && m.contains("stop it first"), "{m}");

    // Failed for good: reopened with the input it failed on, its failures reset.
    let mut fin = settle(&a1.execution_id, a1.epoch, "failed");
    fin.final_failure = true;
    s.attempt_settle(fin).await.unwrap();
    let r = s.work_retry(retry(&w, None)).await.unwrap();
    assert_eq!((r.was.as_str(), r.state.as_str()), ("failed", "pending"));
    assert_eq!(r.inputs, [e1]);
    let work = s.work_get(req(json!({"id": w}))).await.unwrap().work;
    assert_eq!((work.state.as_str(), work.failures), ("pending", 0));
    assert_eq!(
        t.rows("SELECT seq, state, attempt_id FROM work_inputs ORDER BY seq")
            .await,
        [format!("{e1}|pending|NULL")]
    );
    // It starts again and takes it.
    let a2 = s.attempt_start(start(&w)).await.unwrap();
    assert_eq!(a2.attempt, 2);
    assert_eq!(a2.inputs, [e1]);

    // Cancelled while running: reopened with what it was cancelled with.
    s.route_decide(attach(e2, &w)).await.unwrap();
    s.work_cancel(req(json!({"work_id": w}))).await.unwrap();
    let r = s.work_retry(retry(&w, None)).await.unwrap();
    assert_eq!(r.was, "cancelled");
    assert_eq!(r.inputs, [e1, e2]);
    let a3 = s.attempt_start(start(&w)).await.unwrap();
    s.attempt_settle(settle(&a3.execution_id, a3.epoch, "completed"))
        .await
        .unwrap();
    let work = s.work_get(req(json!({"id": w}))).await.unwrap().work;
    assert_eq!(work.state, "completed");

    // Completed, with the retry action's Event: a new turn on that Event.
    let act = s
        .action_accept(action(&w, "comment/9", "retry", &["completed", "idle"]))
        .await
        .unwrap();
    let r = s.work_retry(retry(&w, Some(act.seq))).await.unwrap();
    assert_eq!(
        (r.was.as_str(), r.inputs.as_slice()),
        ("completed", [act.seq].as_slice())
    );
    let a4 = s.attempt_start(start(&w)).await.unwrap();
    assert_eq!(a4.inputs, [act.seq]);
    s.attempt_settle(settle(&a4.execution_id, a4.epoch, "completed"))
        .await
        .unwrap();
    // Completed, with no Event: its latest input again; an input of another Work
    // is refused.
    let other = s
        .route_decide(create(e3, &["other"]))
        .await
        .unwrap()
        .work_id
        .unwrap();
    let before = t.snapshot().await;
    let e = s.work_retry(retry(&w, Some(e3))).await;
    assert!(matches!(e, Err(StoreError::Invalid(_))), "{e:?}");
    assert_eq!(t.snapshot().await, before);
    let r = s.work_retry(retry(&w, None)).await.unwrap();
    assert_eq!(r.inputs, [act.seq]);
    let m = is_conflict(s.work_retry(retry(&other, None)).await);
    assert!(m.contains("queued"), "{m}");
    assert!(matches!(
        s.work_retry(req(json!({"work_id": w, "reason": "r".repeat(3000)})))
            .await,
        Err(StoreError::Invalid(_))
    ));
    t.close();
}

on_both!(
    an_action_is_attached_once_and_never_left_for_the_router,
    retry_reopens_a_failed_or_cancelled_work_and_turns_an_idle_one,
);
