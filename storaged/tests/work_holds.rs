//! Holds on a Work's start (admission): `store.work_hold` holds a pending Work
//! before its first attempt for one package; the starter's page (`store.works_ready`)
//! leaves it out and `store.attempt_start` refuses it; `store.work_settle_hold`
//! (or an action's record, `store.action_accept` with `settle_hold`) settles it
//! for that package alone, once per key: admitted, it starts; refused, it is
//! cancelled. Work rows show the hold and who admitted it.

#![allow(clippy::unwrap_used)]

mod work_common;

#[macro_use]
mod backend;
use backend::Backend;
use serde_json::json;
use storaged::work::*;
use storaged::StoreError;
use work_common::*;

fn create(seq: i64, key: &str) -> RouteDecideRequest {
    req(json!({
        "seq": seq, "scope_id": "s1",
        "records": [{"handler": "gh", "binding": "b1", "matched": true, "reason": "an issue"}],
        "outcome": {"type": "create", "kind": "gh/issue", "binding": "b1", "keys": [key]}
    }))
}

fn start(work_id: &str) -> AttemptStartRequest {
    req(
        json!({"work_id": work_id, "executor": "claude/code", "binding": "b1",
               "lease_owner": "sched-1", "lease_ttl_ms": 60_000}),
    )
}

fn hold(work_id: &str, owner: &str) -> WorkHoldRequest {
    req(json!({"work_id": work_id, "owner": owner, "reason": "waiting for a person to admit it"}))
}

fn settle(work_id: &str, owner: &str, admit: bool, key: &str) -> WorkSettleHoldRequest {
    req(json!({"work_id": work_id, "owner": owner, "admit": admit,
               "reason": format!("decided by cli:alice ({key})"), "key": key}))
}

fn act(work_id: &str, key: &str, admit: bool) -> ActionAcceptRequest {
    let action = if admit { "admit" } else { "reject" };
    req(json!({
        "work_id": work_id,
        "reason": format!("{action} by cli:alice"),
        "event": {
            "scope_id": "s1",
            "type": format!("core.action.{action}"),
            "source": "core/actions/cli",
            "delivery_id": key,
            "schema": "core.action.v1",
            "payload": {"action": action, "provider": "people", "caller": "cli:alice",
                        "work_id": work_id},
        },
        "settle_hold": {"owner": "people", "admit": admit, "reason": format!("{action}ed by cli:alice")},
    }))
}

async fn accept(t: &TestStore, n: i64, key: &str) -> i64 {
    let r = t
        .store
        .events_accept(req(json!({"events": [{
            "scope_id": "s1", "type": "gh.issue.opened", "source": "gh",
            "delivery_id": format!("d-{n}"), "payload": {"n": n}, "keys": [key],
        }]})))
        .await
        .unwrap();
    r.events[0].seq
}

/// A routed, pending Work of key `key` (event number `n`).
async fn work(t: &TestStore, n: i64, key: &str) -> String {
    let seq = accept(t, n, key).await;
    t.store
        .route_decide(create(seq, key))
        .await
        .unwrap()
        .work_id
        .unwrap()
}

async fn ready(t: &TestStore) -> Vec<String> {
    t.store
        .works_ready(req(json!({"now_ms": i64::MAX / 2, "limit": 100})))
        .await
        .unwrap()
        .works
        .into_iter()
        .map(|w| w.id)
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .collect()
}

fn sorted(mut ids: Vec<String>) -> Vec<String> {
    ids.sort();
    ids
}

fn conflict<T: std::fmt::Debug>(r: Result<T, StoreError>) -> String {
    match r {
        Err(StoreError::Conflict(m)) => m,
        other => panic!("expected conflict, got {other:?}"),
    }
}

async fn a_held_work_waits_until_its_owner_admits_it_once(b: Backend) {
    let t = TestStore::new(b, "holds-admit");
    let s = &t.store;
    let w = work(&t, 1, "issue:1").await;
    let other = work(&t, 2, "issue:2").await;
    assert_eq!(ready(&t).await, sorted(vec![w.clone(), other.clone()]));

    // Held: out of the starter's page, refused a start, shown on the row.
    assert!(s.work_hold(hold(&w, "people")).await.unwrap().held);
    assert_eq!(ready(&t).await, vec![other.clone()]);
    let m = conflict(s.attempt_start(start(&w)).await);
    assert!(m.contains("held by people"), "{m}");
    let row = s.work_get(req(json!({"id": w}))).await.unwrap().work;
    let held = row.hold.clone().unwrap();
    assert_eq!(
        (
            held.owner.as_str(),
            held.reason.as_str(),
            row.state.as_str()
        ),
        ("people", "waiting for a person to admit it", "pending")
    );
    assert!(!held.held_at.is_empty());
    assert!(row.admitted.is_empty());
    // As the wire shows it, from the same row.
    let wire = protocol::wire::Work::from_store_row(&serde_json::to_value(&row).unwrap());
    assert_eq!(wire.hold, Some(held.clone()));
    let listed = s
        .works(req(json!({"scope_id": "s1", "limit": 10})))
        .await
        .unwrap()
        .works;
    let shown = |id: &str| listed.iter().find(|x| x.id == id).unwrap().hold.clone();
    assert_eq!(shown(&w), Some(held));
    assert_eq!(shown(&other), None);

    // The same owner again changes nothing; another owner may not hold it too.
    let before = t.snapshot().await;
    assert!(!s.work_hold(hold(&w, "people")).await.unwrap().held);
    let m = conflict(s.work_hold(hold(&w, "budget")).await);
    assert!(m.contains("held by people"), "{m}");
    // A reason past the limit, or over a line, is refused naming it.
    let long = json!({"work_id": other, "owner": "people", "reason": "r".repeat(201)});
    let e = s.work_hold(req(long)).await.unwrap_err().to_string();
    assert!(e.contains("hold reason limit (200)"), "{e}");
    // Only the owner settles it.
    let r = s
        .work_settle_hold(settle(&w, "budget", true, "k0"))
        .await
        .unwrap();
    assert!(!r.settled);
    assert_eq!(t.snapshot().await, before);

    // Admitted: the hold goes, the owner is listed, and the Work is ready again.
    let r = s
        .work_settle_hold(settle(&w, "people", true, "k1"))
        .await
        .unwrap();
    assert_eq!((r.settled, r.work_state.as_str()), (true, "pending"));
    let row = s.work_get(req(json!({"id": w}))).await.unwrap().work;
    assert_eq!((row.hold, row.admitted), (None, vec!["people".to_owned()]));
    assert_eq!(ready(&t).await, sorted(vec![w.clone(), other.clone()]));
    // The same settlement again: nothing; the admitting owner does not hold it again.
    let after = t.snapshot().await;
    let r = s
        .work_settle_hold(settle(&w, "people", true, "k1"))
        .await
        .unwrap();
    assert!(!r.settled);
    let m = conflict(s.work_hold(hold(&w, "people")).await);
    assert!(m.contains("admitted by people"), "{m}");
    assert_eq!(t.snapshot().await, after);
    s.attempt_start(start(&w)).await.unwrap();

    // A Work that has started, or is not pending, is not held.
    let m = conflict(s.work_hold(hold(&w, "budget")).await);
    assert!(m.contains("running"), "{m}");
    t.close();
}

async fn a_refused_hold_cancels_the_work_and_a_replayed_key_settles_nothing(b: Backend) {
    let t = TestStore::new(b, "holds-refuse");
    let s = &t.store;
    let w = work(&t, 1, "issue:1").await;
    s.work_hold(hold(&w, "people")).await.unwrap();

    // Outside the caller's scopes it reads as absent, and nothing is written.
    let before = t.snapshot().await;
    let mut elsewhere = settle(&w, "people", false, "k1");
    elsewhere.scopes = Some(vec!["s2".into()]);
    assert!(matches!(
        s.work_settle_hold(elsewhere).await,
        Err(StoreError::NotFound(_))
    ));
    assert!(matches!(
        s.work_settle_hold(settle("work_nope", "people", false, "k1"))
            .await,
        Err(StoreError::NotFound(_))
    ));
    assert_eq!(t.snapshot().await, before);

    let mut refuse = settle(&w, "people", false, "k1");
    refuse.scopes = Some(vec!["s1".into()]);
    let r = s.work_settle_hold(refuse.clone()).await.unwrap();
    assert_eq!((r.settled, r.work_state.as_str()), (true, "cancelled"));
    let row = s.work_get(req(json!({"id": w}))).await.unwrap().work;
    assert_eq!(
        (row.state.as_str(), row.hold.is_none()),
        ("cancelled", true)
    );
    assert!(row.admitted.is_empty());
    assert_eq!(t.rows("SELECT state FROM work_inputs").await, ["cancelled"]);

    // Run again by a person, it is held anew; the old settlement replayed does not
    // settle the new hold.
    s.work_retry(req(json!({"work_id": w}))).await.unwrap();
    s.work_hold(hold(&w, "people")).await.unwrap();
    let before = t.snapshot().await;
    assert!(!s.work_settle_hold(refuse).await.unwrap().settled);
    assert_eq!(t.snapshot().await, before);
    assert!(ready(&t).await.is_empty());
    // A cancel drops the hold with the Work.
    s.work_cancel(req(json!({"work_id": w}))).await.unwrap();
    let row = s.work_get(req(json!({"id": w}))).await.unwrap().work;
    assert_eq!((row.state.as_str(), row.hold), ("cancelled", None));
    t.close();
}

async fn an_action_settles_its_providers_hold_in_the_same_write_once(b: Backend) {
    let t = TestStore::new(b, "holds-action");
    let s = &t.store;
    let w = work(&t, 1, "issue:1").await;

    // No hold of the provider's: refused, nothing written.
    let before = t.snapshot().await;
    let events = t.rows("SELECT count(*) FROM events").await;
    let m = conflict(s.action_accept(act(&w, "cli/1", true)).await);
    assert!(m.contains("no hold of people"), "{m}");
    s.work_hold(hold(&w, "budget")).await.unwrap();
    let held_by_other = t.snapshot().await;
    conflict(s.action_accept(act(&w, "cli/1", true)).await);
    assert_eq!(t.snapshot().await, held_by_other);
    assert_eq!(t.rows("SELECT count(*) FROM events").await, events);
    assert_ne!(before, held_by_other);
    s.work_settle_hold(settle(&w, "budget", true, "b1"))
        .await
        .unwrap();

    // Held by the provider: the action's Event and the admission in one write.
    s.work_hold(hold(&w, "people")).await.unwrap();
    let admit = act(&w, "cli/2", true);
    let first = s.action_accept(admit.clone()).await.unwrap();
    assert!(first.added && first.settled, "{first:?}");
    let row = s.work_get(req(json!({"id": w}))).await.unwrap().work;
    assert_eq!(row.hold, None);
    assert_eq!(row.admitted, ["budget", "people"]);
    assert_eq!(ready(&t).await, vec![w.clone()]);
    assert_eq!(
        t.rows(&format!(
            "SELECT state FROM work_inputs WHERE seq = {}",
            first.seq
        ))
        .await,
        ["done"]
    );
    // The same action again: the Event kept, nothing settled again.
    let after = t.snapshot().await;
    let again = s.action_accept(admit).await.unwrap();
    assert_eq!(
        (again.seq, again.added, again.settled),
        (first.seq, false, false)
    );
    assert_eq!(t.snapshot().await, after);

    // A reject action cancels a held Work.
    let w2 = work(&t, 2, "issue:2").await;
    s.work_hold(hold(&w2, "people")).await.unwrap();
    let rejected = s.action_accept(act(&w2, "cli/3", false)).await.unwrap();
    assert!(rejected.settled);
    assert_eq!(rejected.work_state, "pending", "as the call found it");
    let row = s.work_get(req(json!({"id": w2}))).await.unwrap().work;
    assert_eq!((row.state.as_str(), row.hold), ("cancelled", None));
    t.close();
}

on_both!(
    a_held_work_waits_until_its_owner_admits_it_once,
    a_refused_hold_cancels_the_work_and_a_replayed_key_settles_nothing,
    an_action_settles_its_providers_hold_in_the_same_write_once,
);
