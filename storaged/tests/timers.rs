//! Timers: armed by (owner, kind, scope, key), fired (and re-armed) atomically with a
//! precondition on the due time, so of two racing fires exactly one wins.

#![allow(clippy::unwrap_used)]

mod work_common;

#[macro_use]
mod backend;
use backend::Backend;
use serde_json::json;
use storaged::timers::*;
use storaged::StoreError;
use work_common::*;

fn arm(key: &str, due_ms: i64) -> TimerArmRequest {
    req(
        json!({"owner": "schedule", "kind": "recurrence", "scope_id": "s1", "key": key,
               "due_ms": due_ms, "spec": {"every": "1h"}, "payload": {"n": 1}}),
    )
}

async fn arm_upserts_cancel_deletes_and_due_lists_in_order(b: Backend) {
    let t = TestStore::new(b, "timer-arm");
    let s = &t.store;
    let a = s.timer_arm(arm("nightly", 2_000)).await.unwrap();
    assert!(!a.replaced);
    assert_eq!(a.timer.spec, json!({"every": "1h"}));
    assert_eq!(a.timer.due_at, "1970-01-01T00:00:02.000Z");
    // Same (owner, kind, scope, key): replaced under a new ID.
    let b = s.timer_arm(arm("nightly", 3_000)).await.unwrap();
    assert!(b.replaced);
    assert_ne!(a.timer.id, b.timer.id);
    s.timer_arm(arm("hourly", 1_000)).await.unwrap();
    let mut other = arm("hourly", 500);
    other.owner = "github".into();
    s.timer_arm(other).await.unwrap();

    let due = s.timers_due(req(json!({"now_ms": 3_000}))).await.unwrap();
    assert_eq!(
        due.timers.iter().map(|t| t.due_ms).collect::<Vec<_>>(),
        [500, 1_000, 3_000]
    );
    assert_eq!(
        s.timers_due(req(json!({"now_ms": 999})))
            .await
            .unwrap()
            .timers
            .len(),
        1
    );
    let mine = s
        .timers(req(json!({"owner": "schedule", "limit": 1})))
        .await
        .unwrap();
    assert_eq!(mine.timers.len(), 1);
    let rest = s
        .timers(req(
            json!({"owner": "schedule", "limit": 1, "after": mine.next}),
        ))
        .await
        .unwrap();
    assert_eq!(rest.timers.len(), 1);
    assert_ne!(rest.timers[0].id, mine.timers[0].id);

    let c = s
        .timer_cancel(req(json!({"owner": "schedule", "kind": "recurrence",
            "scope_id": "s1", "key": "nightly"})))
        .await
        .unwrap();
    assert!(c.cancelled);
    let c = s
        .timer_cancel(req(json!({"owner": "schedule", "kind": "recurrence",
            "scope_id": "s1", "key": "nightly"})))
        .await
        .unwrap();
    assert!(!c.cancelled);

    // Bounds write nothing.
    let before = t.snapshot().await;
    let e = s.timer_arm(arm(&"k".repeat(513), 1)).await.unwrap_err();
    assert!(e.to_string().contains("max_key_bytes"), "{e}");
    let mut big = arm("k", 1);
    big.payload = Some(json!("x".repeat(2_000_000)));
    let e = s.timer_arm(big).await.unwrap_err();
    assert!(e.to_string().contains("max_value_bytes"), "{e}");
    let mut empty = arm("k", 1);
    empty.owner = String::new();
    assert!(matches!(
        s.timer_arm(empty).await,
        Err(StoreError::Invalid(_))
    ));
    let e = s
        .timers_due(req(json!({"now_ms": 1, "limit": 1001})))
        .await
        .unwrap_err();
    assert!(e.to_string().contains("max_page"), "{e}");
    assert_eq!(t.snapshot().await, before);
    t.close();
}

async fn fire_deletes_or_rearms_under_its_due_time_precondition(b: Backend) {
    let t = TestStore::new(b, "timer-fire");
    let s = &t.store;
    let a = s.timer_arm(arm("nightly", 2_000)).await.unwrap().timer;
    let before = t.snapshot().await;
    // A stale due time, an unknown id, a payload without re-arm: refused, nothing written.
    let fire = |v: serde_json::Value| s.timer_fire(req(v));
    assert!(matches!(
        fire(json!({"id": a.id, "expect_due_ms": 1_999})).await,
        Err(StoreError::Conflict(_))
    ));
    assert!(matches!(
        fire(json!({"id": "tmr_nope", "expect_due_ms": 2_000})).await,
        Err(StoreError::Conflict(_))
    ));
    assert!(matches!(
        fire(json!({"id": a.id, "expect_due_ms": 2_000, "payload": {"n": 2}})).await,
        Err(StoreError::Invalid(_))
    ));
    assert_eq!(t.snapshot().await, before);

    // Fire and re-arm: the recurrence's next occurrence, with a new payload.
    let r = fire(
        json!({"id": a.id, "expect_due_ms": 2_000, "rearm_due_ms": 5_000,
        "payload": {"n": 2}}),
    )
    .await
    .unwrap();
    assert_eq!(r.fired.id, a.id);
    assert_eq!(r.fired.payload, json!({"n": 1}));
    let next = r.rearmed.unwrap();
    assert_eq!((next.due_ms, next.key.as_str()), (5_000, "nightly"));
    assert_eq!(next.payload, json!({"n": 2}));
    assert_eq!(next.spec, json!({"every": "1h"}));
    assert_ne!(next.id, a.id);
    // The old arming is gone: firing it again conflicts.
    assert!(matches!(
        fire(json!({"id": a.id, "expect_due_ms": 2_000})).await,
        Err(StoreError::Conflict(_))
    ));
    // A re-arm by timer_arm at the very same due time still fences a fire that read
    // the earlier arming.
    let again = s.timer_arm(arm("nightly", 5_000)).await.unwrap().timer;
    assert!(matches!(
        fire(json!({"id": next.id, "expect_due_ms": 5_000})).await,
        Err(StoreError::Conflict(_))
    ));
    // Fire without re-arm deletes it; the payload stays with what fired.
    let r = fire(json!({"id": again.id, "expect_due_ms": 5_000}))
        .await
        .unwrap();
    assert!(r.rearmed.is_none());
    assert!(s.timers(req(json!({}))).await.unwrap().timers.is_empty());
    t.close();
}

async fn of_two_racing_fires_one_wins_and_the_other_conflicts(b: Backend) {
    let t = TestStore::new(b, "timer-race");
    let s = &t.store;
    for round in 0..20 {
        let key = format!("k{round}");
        let timer = s.timer_arm(arm(&key, 1_000)).await.unwrap().timer;
        let mut tasks = Vec::new();
        for _ in 0..2 {
            let store = s.clone();
            let id = timer.id.clone();
            tasks.push(tokio::spawn(async move {
                store
                    .timer_fire(req(json!({"id": id, "expect_due_ms": 1_000,
                        "rearm_due_ms": 2_000})))
                    .await
            }));
        }
        let mut won = 0;
        let mut lost = 0;
        for task in tasks {
            match task.await.unwrap() {
                Ok(r) => {
                    assert!(r.rearmed.is_some());
                    won += 1;
                }
                Err(StoreError::Conflict(_)) => lost += 1,
                Err(e) => panic!("{e}"),
            }
        }
        assert_eq!((won, lost), (1, 1), "round {round}");
        // Exactly one re-armed timer for the key.
        let armed = t
            .rows(&format!("SELECT due_ms FROM timers WHERE key = '{key}'"))
            .await;
        assert_eq!(armed, ["2000"]);
    }
    // Dispatch: the module's methods only, params decoded strictly.
    let raw =
        serde_json::value::RawValue::from_string(json!({"now_ms": 0, "bogus": 1}).to_string())
            .unwrap();
    let e = dispatch(s, "store.timers_due", &raw)
        .await
        .unwrap()
        .unwrap_err();
    assert!(
        e.to_string()
            .contains("invalid params for store.timers_due"),
        "{e}"
    );
    assert!(dispatch(s, "store.route_decide", &raw).await.is_none());
    assert_eq!(METHODS.len(), 5);
    t.close();
}

on_both!(
    arm_upserts_cancel_deletes_and_due_lists_in_order,
    fire_deletes_or_rearms_under_its_due_time_precondition,
    of_two_racing_fires_one_wins_and_the_other_conflicts,
);
