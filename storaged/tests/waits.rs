//! Waits: declared by a waiting settle, woken by an event, a timeout or by hand,
//! resumed as the same attempt under a new epoch; progress by the owner only.

#![allow(clippy::unwrap_used)]

mod work_common;

#[macro_use]
mod backend;
use backend::Backend;
use serde_json::json;
use storaged::waits::*;
use storaged::work::*;
use storaged::StoreError;
use work_common::*;

async fn waiting_work(
    t: &TestStore,
    due_ms: Option<i64>,
) -> (String, AttemptStartResponse, String) {
    let s = &t.store;
    t.event(1, "s1", "gh.issue.opened", &["issue:1"]).await;
    let w = s
        .route_decide(req(json!({"seq": 1, "scope_id": "s1",
            "outcome": {"type": "create", "kind": "k", "keys": ["issue:1"]}})))
        .await
        .unwrap()
        .work_id
        .unwrap();
    let a = s
        .attempt_start(req(
            json!({"work_id": w, "executor": "e", "lease_owner": "o",
            "lease_ttl_ms": 60_000}),
        ))
        .await
        .unwrap();
    let r = s
        .attempt_settle(req(
            json!({"execution_id": a.execution_id, "epoch": a.epoch,
            "outcome": "waiting",
            "wait": {"owner": "github", "description": "checks on PR #137\nsecond line",
                     "keys": ["pr:137"], "types": ["gh.checks.done"], "plan": {"head": "abc"},
                     "due_ms": due_ms}}),
        ))
        .await
        .unwrap();
    assert_eq!(
        (r.work_state.as_str(), r.execution_state.as_str()),
        ("waiting", "waiting")
    );
    assert_eq!(r.timer_id.is_some(), due_ms.is_some());
    (w, a, r.wait_id.unwrap())
}

async fn an_event_wakes_a_wait_in_the_routing_unit_and_the_attempt_resumes(b: Backend) {
    let t = TestStore::new(b, "wait-event");
    let s = &t.store;
    let (w, a, wait_id) = waiting_work(&t, Some(1_792_918_800_000)).await;

    let waits = s.waits(req(json!({"work_id": w}))).await.unwrap().waits;
    assert_eq!(waits.len(), 1);
    let wait = &waits[0];
    assert_eq!(wait.description, "checks on PR #137");
    assert_eq!(wait.owner, "github");
    assert_eq!(wait.state, "active");
    assert_eq!(wait.plan, json!({"head": "abc"}));
    assert_eq!(wait.due_at.as_deref(), Some("2026-10-25T09:00:00.000Z"));
    let timers = s
        .timers(req(json!({"owner": TIMER_OWNER})))
        .await
        .unwrap()
        .timers;
    assert_eq!(timers.len(), 1);
    assert_eq!(
        (timers[0].kind.as_str(), timers[0].key.as_str()),
        (TIMER_KIND, wait_id.as_str())
    );
    assert_eq!(timers[0].scope_id, "s1");

    // The router asks which Waits an event could wake.
    let m = s
        .waits_matching(req(
            json!({"keys": ["pr:137", "x"], "types": ["gh.checks.done"]}),
        ))
        .await
        .unwrap();
    assert_eq!(m.waits.len(), 1);
    for miss in [
        json!({"keys": ["pr:138"], "types": ["gh.checks.done"]}),
        json!({"keys": ["pr:137"], "types": ["gh.checks.pending"]}),
        json!({"keys": [], "types": ["gh.checks.done"]}),
    ] {
        assert!(s.waits_matching(req(miss)).await.unwrap().waits.is_empty());
    }

    // Routed to the waiting Work with wake: woken in the same unit, timer gone.
    t.event(2, "s1", "gh.checks.done", &["pr:137"]).await;
    let r = s
        .route_decide(req(json!({"seq": 2, "scope_id": "s1",
            "outcome": {"type": "attach", "work_id": w, "wake": wait_id}})))
        .await
        .unwrap();
    assert_eq!(r.woke.as_deref(), Some(wait_id.as_str()));
    assert_eq!(r.work_state.as_deref(), Some("woken"));
    let wait = &s.waits(req(json!({"work_id": w}))).await.unwrap().waits[0];
    assert_eq!((wait.state.as_str(), wait.wake_seq), ("woken", Some(2)));
    assert!(wait.due_at.is_none());
    assert!(s.timers(req(json!({}))).await.unwrap().timers.is_empty());
    assert!(s
        .waits_matching(req(
            json!({"keys": ["pr:137"], "types": ["gh.checks.done"]})
        ))
        .await
        .unwrap()
        .waits
        .is_empty());
    let ready = s.works_ready(req(json!({"now_ms": 0}))).await.unwrap();
    assert_eq!(ready.works[0].id, w);

    // Resume: the same execution and attempt, a new epoch, the new input.
    let b = s
        .attempt_start(req(
            json!({"work_id": w, "executor": "e", "lease_owner": "o",
            "lease_ttl_ms": 60_000}),
        ))
        .await
        .unwrap();
    assert!(b.resumed);
    assert_eq!(b.execution_id, a.execution_id);
    assert_eq!((b.attempt, b.epoch), (1, 2));
    assert_eq!(b.inputs, [2]);
    assert_eq!(b.wait_id.as_deref(), Some(wait_id.as_str()));
    // The segment before the wait is fenced.
    let before = t.snapshot().await;
    assert!(matches!(
        s.attempt_settle(req(json!({"execution_id": a.execution_id, "epoch": 1,
            "outcome": "completed"})))
            .await,
        Err(StoreError::Conflict(_))
    ));
    assert_eq!(t.snapshot().await, before);
    // Completing it finishes every input the attempt held.
    let r = s
        .attempt_settle(req(json!({"execution_id": b.execution_id, "epoch": 2,
            "outcome": "completed"})))
        .await
        .unwrap();
    assert_eq!(r.work_state, "completed");
    assert_eq!(
        t.rows("SELECT seq, state FROM work_inputs ORDER BY seq")
            .await,
        ["1|done", "2|done"]
    );
    t.close();
}

async fn wait_wake_preconditions_timeout_and_cancel(b: Backend) {
    let t = TestStore::new(b, "wait-wake");
    let s = &t.store;
    let (w, _a, wait_id) = waiting_work(&t, Some(1_000)).await;
    // Input reaching a waiting Work is queued without waking.
    t.event(2, "s1", "note", &["issue:1"]).await;
    t.event(3, "s1", "note", &[]).await;
    let r = s
        .route_decide(req(json!({"seq": 2, "scope_id": "s1",
            "outcome": {"type": "create", "kind": "k", "keys": ["issue:1"]}})))
        .await
        .unwrap();
    assert_eq!(r.work_state.as_deref(), Some("waiting"));
    let before = t.snapshot().await;
    let wake = |v: serde_json::Value| s.wait_wake(req(v));
    assert!(matches!(
        wake(json!({"wait_id": "wait_nope", "reason": "manual"})).await,
        Err(StoreError::NotFound(_))
    ));
    assert!(matches!(
        wake(json!({"wait_id": wait_id, "reason": "event"})).await,
        Err(StoreError::Invalid(_))
    ));
    // Event 3 is not an input of the Work.
    assert!(matches!(
        wake(json!({"wait_id": wait_id, "reason": "event", "seq": 3})).await,
        Err(StoreError::Conflict(_))
    ));
    // Attach with wake of the wrong Wait id.
    assert!(matches!(
        s.route_decide(req(json!({"seq": 3, "scope_id": "s1",
            "outcome": {"type": "attach", "work_id": w, "wake": "wait_other"}})))
            .await,
        Err(StoreError::Conflict(_))
    ));
    assert_eq!(t.snapshot().await, before);

    // The timeout: due, then woken as timed out; the timer goes in the same unit.
    let due = s.timers_due(req(json!({"now_ms": 1_000}))).await.unwrap();
    assert_eq!(due.timers.len(), 1);
    assert_eq!(due.timers[0].payload["wait_id"], json!(wait_id));
    let r = wake(json!({"wait_id": wait_id, "reason": "timeout"}))
        .await
        .unwrap();
    assert_eq!(r.state, "timed_out");
    assert!(s
        .timers_due(req(json!({"now_ms": 1_000})))
        .await
        .unwrap()
        .timers
        .is_empty());
    assert_eq!(
        s.work_get(req(json!({"id": w}))).await.unwrap().work.state,
        "woken"
    );
    // Waking it again is a conflict and writes nothing.
    let after = t.snapshot().await;
    assert!(matches!(
        wake(json!({"wait_id": wait_id, "reason": "manual"})).await,
        Err(StoreError::Conflict(_))
    ));
    assert_eq!(t.snapshot().await, after);
    // The resumed segment takes the input queued while it waited.
    let b = s
        .attempt_start(req(
            json!({"work_id": w, "executor": "e", "lease_owner": "o",
            "lease_ttl_ms": 60_000}),
        ))
        .await
        .unwrap();
    assert!(b.resumed);
    assert_eq!(b.inputs, [2]);
    t.close();
}

async fn cancelling_a_waiting_work_cancels_its_wait_and_timer(b: Backend) {
    let t = TestStore::new(b, "wait-cancel");
    let s = &t.store;
    let (w, a, wait_id) = waiting_work(&t, Some(5_000)).await;
    let c = s
        .work_cancel(req(json!({"work_id": w, "reason": "stop"})))
        .await
        .unwrap();
    assert_eq!(c.wait_id.as_deref(), Some(wait_id.as_str()));
    assert_eq!(c.execution_id.as_deref(), Some(a.execution_id.as_str()));
    let wait = &s
        .waits(req(json!({"state": "cancelled"})))
        .await
        .unwrap()
        .waits[0];
    assert_eq!(wait.id, wait_id);
    assert!(s.timers(req(json!({}))).await.unwrap().timers.is_empty());
    t.close();
}

async fn progress_belongs_to_the_owner_and_is_clipped(b: Backend) {
    let t = TestStore::new(b, "wait-progress");
    let s = &t.store;
    let (w, _a, wait_id) = waiting_work(&t, None).await;
    let before = t.snapshot().await;
    let p = |v: serde_json::Value| s.wait_progress(req(v));
    assert!(matches!(
        p(json!({"owner": "slack", "work_id": w, "progress": "x"})).await,
        Err(StoreError::Unauthorized(_))
    ));
    assert!(matches!(
        p(json!({"owner": "github", "work_id": "work_nope", "progress": "x"})).await,
        Err(StoreError::NotFound(_))
    ));
    assert!(matches!(
        p(json!({"owner": "github", "work_id": w, "progress": "x".repeat(2_000_000)})).await,
        Err(StoreError::Invalid(_))
    ));
    assert_eq!(t.snapshot().await, before);

    let long = format!("{}\nmore", "é".repeat(100));
    let r = p(json!({"owner": "github", "work_id": w, "progress": long}))
        .await
        .unwrap();
    assert_eq!(r.wait_id, wait_id);
    assert_eq!(r.progress, "é".repeat(60));
    let r = p(json!({"owner": "github", "work_id": w, "progress": "1 of 2 checks finished"}))
        .await
        .unwrap();
    assert_eq!(r.progress, "1 of 2 checks finished");
    // A woken Wait keeps its progress; setting it is then not_found.
    s.wait_wake(req(json!({"wait_id": wait_id, "reason": "manual"})))
        .await
        .unwrap();
    assert!(matches!(
        p(json!({"owner": "github", "work_id": w, "progress": ""})).await,
        Err(StoreError::NotFound(_))
    ));
    let wait = &s.waits(req(json!({"work_id": w}))).await.unwrap().waits[0];
    assert_eq!(wait.progress, "1 of 2 checks finished");
    t.close();
}

async fn a_builtin_wait_refuses_progress_and_a_timed_wait_without_words_is_described(b: Backend) {
    let t = TestStore::new(b, "wait-builtin");
    let s = &t.store;
    t.event(1, "s1", "x", &[]).await;
    let w = s
        .route_decide(req(json!({"seq": 1, "scope_id": "s1",
            "outcome": {"type": "create", "kind": "k"}})))
        .await
        .unwrap()
        .work_id
        .unwrap();
    let a = s
        .attempt_start(req(
            json!({"work_id": w, "executor": "e", "lease_owner": "o",
            "lease_ttl_ms": 1000}),
        ))
        .await
        .unwrap();
    s.attempt_settle(req(json!({"execution_id": a.execution_id, "epoch": 1,
        "outcome": "waiting", "wait": {"due_ms": 1_792_918_800_000i64}})))
        .await
        .unwrap();
    let wait = &s.waits(req(json!({"work_id": w}))).await.unwrap().waits[0];
    assert_eq!(wait.description, "until 25 Oct 2026 09:00 UTC");
    assert!(matches!(
        s.wait_progress(req(
            json!({"owner": "github", "work_id": w, "progress": "x"})
        ))
        .await,
        Err(StoreError::Unauthorized(_))
    ));
    assert_eq!(due_description(0), "until 1 Jan 1970 00:00 UTC");
    t.close();
}

on_both!(
    an_event_wakes_a_wait_in_the_routing_unit_and_the_attempt_resumes,
    wait_wake_preconditions_timeout_and_cancel,
    cancelling_a_waiting_work_cancels_its_wait_and_timer,
    progress_belongs_to_the_owner_and_is_clipped,
    a_builtin_wait_refuses_progress_and_a_timed_wait_without_words_is_described,
);
