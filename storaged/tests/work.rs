//! Work: routing decisions, attempts under fenced leases, settles, cancels and the
//! Work reads. Waits and timers are in `tests/waits.rs` and `tests/timers.rs`.

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
        "seq": seq,
        "scope_id": "s1",
        "records": [
            {"handler": "gh/issues", "binding": "b1", "matched": true, "reason": "an issue"}
        ],
        "outcome": {"type": "create", "kind": "gh/issue", "binding": "b1", "keys": keys,
                    "display": {"title": "Fix it", "ref": "#12"},
                    "context": {"model": "m"}, "grants": ["g1"]}
    }))
}

fn attach(seq: i64, work_id: &str) -> RouteDecideRequest {
    req(json!({
        "seq": seq, "scope_id": "s1",
        "records": [{"handler": "h", "matched": true}],
        "outcome": {"type": "attach", "work_id": work_id}
    }))
}

fn start(work_id: &str, ttl: u64) -> AttemptStartRequest {
    req(
        json!({"work_id": work_id, "executor": "claude/code", "binding": "b1",
               "lease_owner": "sched-1", "lease_ttl_ms": ttl}),
    )
}

fn settle(execution_id: &str, epoch: i64, outcome: &str) -> AttemptSettleRequest {
    req(json!({"execution_id": execution_id, "epoch": epoch, "outcome": outcome}))
}

fn is_conflict<T: std::fmt::Debug>(r: Result<T, StoreError>) -> String {
    match r {
        Err(StoreError::Conflict(m)) => m,
        other => panic!("expected conflict, got {other:?}"),
    }
}

async fn create_then_a_key_attaches_the_next_event_and_routing_twice_conflicts(b: Backend) {
    let t = TestStore::new(b, "route-create");
    let s = &t.store;
    t.event(1, "s1", "gh.issue.opened", &["issue:12"]).await;
    t.event(2, "s1", "gh.issue.comment", &["issue:12"]).await;
    t.event(3, "s1", "gh.pr.opened", &["pr:7", "issue:12"])
        .await;

    let unrouted = s
        .unrouted(req(json!({"after": 0, "limit": 10})))
        .await
        .unwrap();
    assert_eq!(
        unrouted.events.iter().map(|e| e.seq).collect::<Vec<_>>(),
        [1, 2, 3]
    );
    assert_eq!(unrouted.events[0].keys, ["issue:12"]);
    let payload: serde_json::Value =
        serde_json::from_str(unrouted.events[0].payload.get()).unwrap();
    assert_eq!(payload, json!({"n": 1}));
    // The page held all there was: the router need not read again to find out.
    assert!(
        !unrouted.more,
        "a page holding every pending event says no more"
    );
    let cut = s
        .unrouted(req(json!({"after": 0, "limit": 2})))
        .await
        .unwrap();
    assert_eq!(cut.events.len(), 2);
    assert!(cut.more, "a page cut at its limit says more may follow");

    let a = s.route_decide(create(1, &["issue:12"])).await.unwrap();
    assert!(a.created);
    let work_id = a.work_id.clone().unwrap();
    assert_eq!(a.work_state.as_deref(), Some("pending"));

    // A key finds its Work: the second event attaches though the router said create.
    let b = s.route_decide(create(2, &["issue:12"])).await.unwrap();
    assert!(!b.created);
    assert_eq!(b.work_id.as_deref(), Some(work_id.as_str()));
    // A new key of an attaching event is bound to the Work it found.
    let c = s
        .route_decide(create(3, &["pr:7", "issue:12"]))
        .await
        .unwrap();
    assert_eq!(c.work_id.as_deref(), Some(work_id.as_str()));
    let w = s.work_get(req(json!({"id": work_id}))).await.unwrap().work;
    assert_eq!(w.keys, ["issue:12", "pr:7"]);
    assert_eq!(w.kind, "gh/issue");
    assert_eq!(w.context, json!({"model": "m"}));
    assert_eq!(w.grants, ["g1"]);
    assert_eq!(w.display.as_ref().unwrap().title, "Fix it");
    let inputs = s
        .work_inputs(req(json!({"work_id": work_id})))
        .await
        .unwrap();
    assert_eq!(
        inputs
            .inputs
            .iter()
            .map(|i| (i.seq, i.state.as_str()))
            .collect::<Vec<_>>(),
        [(1, "pending"), (2, "pending"), (3, "pending")]
    );
    let found = s.works(req(json!({"key": "pr:7"}))).await.unwrap().works;
    assert_eq!(found.len(), 1);
    assert_eq!(found[0].id, work_id);

    // Routed: nothing left for the router, and the records say why.
    assert!(s
        .unrouted(req(json!({"after": 0})))
        .await
        .unwrap()
        .events
        .is_empty());
    let records = t
        .rows("SELECT seq, idx, handler, matched, work_id, reason FROM route_records ORDER BY seq, idx")
        .await;
    assert_eq!(records.len(), 3);
    assert!(records[0].contains(&work_id) && records[0].contains("an issue"));
    let routed = t
        .rows("SELECT seq, disposition FROM routed ORDER BY seq")
        .await;
    assert_eq!(routed, ["1|created", "2|attached", "3|attached"]);

    // Routing an event twice is a conflict and writes nothing.
    let before = t.snapshot().await;
    let m = is_conflict(s.route_decide(create(1, &["issue:99"])).await);
    assert!(m.contains("already routed"), "{m}");
    is_conflict(s.route_decide(attach(2, &work_id)).await);
    assert_eq!(t.snapshot().await, before);
    t.close();
}

async fn route_decide_preconditions_and_bounds_write_nothing(b: Backend) {
    let t = TestStore::new(b, "route-pre");
    let s = &t.store;
    t.event(1, "s1", "x", &[]).await;
    t.event(2, "s1", "x", &[]).await;
    t.event(3, "s2", "x", &["other"]).await;
    let w = s
        .route_decide(create(1, &["k1"]))
        .await
        .unwrap()
        .work_id
        .unwrap();
    let other = s
        .route_decide(req(json!({"seq": 3, "scope_id": "s2",
            "outcome": {"type": "create", "kind": "k", "keys": ["other"]}})))
        .await
        .unwrap()
        .work_id
        .unwrap();
    let before = t.snapshot().await;

    // The event does not exist.
    assert!(matches!(
        s.route_decide(create(42, &[])).await,
        Err(StoreError::NotFound(_))
    ));
    // The event is in another scope.
    let mut wrong_scope = create(2, &[]);
    wrong_scope.scope_id = "s2".into();
    assert!(matches!(
        s.route_decide(wrong_scope).await,
        Err(StoreError::Invalid(_))
    ));
    // Attach to a Work that does not exist, or of another scope.
    assert!(matches!(
        s.route_decide(attach(2, "work_nope")).await,
        Err(StoreError::NotFound(_))
    ));
    assert!(matches!(
        s.route_decide(attach(2, &other)).await,
        Err(StoreError::Invalid(_))
    ));
    // Create whose key names Work of another scope.
    assert!(matches!(
        s.route_decide(create(2, &["other"])).await,
        Err(StoreError::Invalid(_))
    ));
    // Wake a Wait that does not exist.
    let wake = req(json!({"seq": 2, "scope_id": "s1",
        "outcome": {"type": "attach", "work_id": w, "wake": "wait_nope"}}));
    is_conflict(s.route_decide(wake).await);
    // Bounds: a key over max_key_bytes, too many records, an oversized reason.
    let long_key = "k".repeat(600);
    let e = s
        .route_decide(create(2, &[long_key.as_str()]))
        .await
        .unwrap_err();
    assert!(e.to_string().contains("max_key_bytes"), "{e}");
    let records: Vec<_> = (0..1001).map(|_| json!({"matched": false})).collect();
    let e = s
        .route_decide(req(json!({"seq": 2, "scope_id": "s1", "records": records,
            "outcome": {"type": "unmatched"}})))
        .await
        .unwrap_err();
    assert!(e.to_string().contains("max_batch"), "{e}");
    let e = s
        .route_decide(req(json!({"seq": 2, "scope_id": "s1",
            "records": [{"matched": false, "reason": "r".repeat(5000)}],
            "outcome": {"type": "unmatched"}})))
        .await
        .unwrap_err();
    assert!(matches!(e, StoreError::Invalid(_)), "{e}");
    let e = s
        .route_decide(req(json!({"seq": 2, "scope_id": "s1",
            "outcome": {"type": "create", "kind": "k", "context": {"x": "y".repeat(2_000_000)}}})))
        .await
        .unwrap_err();
    assert!(e.to_string().contains("max_value_bytes"), "{e}");

    // Attach to a cancelled Work is a conflict.
    s.work_cancel(req(json!({"work_id": w, "reason": "done"})))
        .await
        .unwrap();
    let before_cancelled = t.snapshot().await;
    assert_ne!(before, before_cancelled);
    let m = is_conflict(s.route_decide(attach(2, &w)).await);
    assert!(m.contains("cancelled"), "{m}");
    assert_eq!(t.snapshot().await, before_cancelled);

    // A closed Work's key goes to the next Work created with it.
    let fresh = s.route_decide(create(2, &["k1"])).await.unwrap();
    assert!(fresh.created);
    assert_ne!(fresh.work_id.as_deref(), Some(w.as_str()));
    let found = s.works(req(json!({"key": "k1"}))).await.unwrap().works;
    assert_eq!(found[0].id, fresh.work_id.unwrap());
    t.close();
}

async fn a_display_that_breaks_a_limit_is_refused_and_routing_goes_on(b: Backend) {
    let t = TestStore::new(b, "route-display");
    let s = &t.store;
    for seq in 1..=5 {
        t.event(seq, "s1", "x", &["k"]).await;
    }
    let w = s
        .route_decide(create(1, &["k"]))
        .await
        .unwrap()
        .work_id
        .unwrap();
    let cases = [
        (2, json!({"title": "t".repeat(201)}), "title"),
        (
            3,
            json!({"title": "ok", "links": [{"label": "x", "url": "ftp://h/x"}]}),
            "links[0].url",
        ),
        (4, json!({"requester": "only"}), "title or a ref"),
        (5, json!({"title": 5}), "not a display"),
    ];
    for (seq, display, why) in cases {
        let r = s
            .route_decide(req(json!({"seq": seq, "scope_id": "s1",
                "records": [{"handler": "a", "matched": false}, {"handler": "b", "matched": true}],
                "outcome": {"type": "attach", "work_id": w, "display": display}})))
            .await
            .unwrap();
        let refused = r.display_refused.unwrap();
        assert!(refused.contains(why), "{refused}");
        // Recorded on the matching record.
        let rec = t
            .rows(&format!(
                "SELECT idx, display_refused FROM route_records WHERE seq = {seq} ORDER BY idx"
            ))
            .await;
        assert_eq!(rec[0], "0|NULL");
        assert!(rec[1].starts_with("1|") && rec[1].contains(why), "{rec:?}");
        // The Work keeps its display.
        let work = s.work_get(req(json!({"id": w}))).await.unwrap().work;
        assert_eq!(work.display.unwrap().title, "Fix it");
    }
    // A valid display replaces it.
    t.event(6, "s1", "x", &[]).await;
    let r = s
        .route_decide(req(json!({"seq": 6, "scope_id": "s1",
            "outcome": {"type": "attach", "work_id": w, "display": {"title": "Renamed",
                "links": [{"label": "Issue #12", "url": "https://example.com/12"}]}}})))
        .await
        .unwrap();
    assert!(r.display_refused.is_none());
    let work = s.work_get(req(json!({"id": w}))).await.unwrap().work;
    let d = work.display.unwrap();
    assert_eq!(d.title, "Renamed");
    assert_eq!(d.links.len(), 1);
    t.close();
}

async fn unmatched_records_the_disposition_and_makes_no_work(b: Backend) {
    let t = TestStore::new(b, "route-unmatched");
    let s = &t.store;
    t.event(1, "s1", "x", &[]).await;
    t.event(2, "s1", "x", &[]).await;
    let r = s
        .route_decide(req(json!({"seq": 1, "scope_id": "s1",
            "records": [{"handler": "h", "matched": false, "reason": "not mine"}],
            "outcome": {"type": "unmatched", "disposition": "drop"}})))
        .await
        .unwrap();
    assert!(r.work_id.is_none() && !r.created);
    s.route_decide(req(
        json!({"seq": 2, "scope_id": "s1", "outcome": {"type": "unmatched"}}),
    ))
    .await
    .unwrap();
    assert_eq!(
        t.rows("SELECT seq, disposition FROM routed ORDER BY seq")
            .await,
        ["1|unmatched:drop", "2|unmatched"]
    );
    assert_eq!(t.rows("SELECT count(*) FROM works").await, ["0"]);
    // Unknown fields and outcome types are refused at decode (dispatch).
    let raw = serde_json::value::RawValue::from_string(
        json!({"seq": 1, "scope_id": "s1", "outcome": {"type": "maybe"}}).to_string(),
    )
    .unwrap();
    let e = dispatch(s, "store.route_decide", &raw)
        .await
        .unwrap()
        .unwrap_err();
    assert!(
        e.to_string()
            .contains("invalid params for store.route_decide"),
        "{e}"
    );
    let raw = serde_json::value::RawValue::from_string(
        json!({"seq": 1, "scope_id": "s1", "outcome": {"type": "unmatched", "extra": 1}})
            .to_string(),
    )
    .unwrap();
    assert!(matches!(
        dispatch(s, "store.route_decide", &raw).await.unwrap(),
        Err(StoreError::Invalid(_))
    ));
    assert!(dispatch(s, "store.kv_get", &raw).await.is_none());
    // Dispatch answers JSON.
    let raw = serde_json::value::RawValue::from_string(json!({"after": 0}).to_string()).unwrap();
    let v = dispatch(s, "store.unrouted", &raw).await.unwrap().unwrap();
    assert_eq!(v["events"], json!([]));
    for m in METHODS {
        assert!(m.starts_with("store."));
    }
    t.close();
}

async fn attempts_take_inputs_and_settle_completed_handoff_and_failed(b: Backend) {
    let t = TestStore::new(b, "attempts");
    let s = &t.store;
    for seq in 1..=4 {
        t.event(seq, "s1", "x", &["k"]).await;
    }
    let w = s
        .route_decide(create(1, &["k"]))
        .await
        .unwrap()
        .work_id
        .unwrap();
    s.route_decide(create(2, &["k"])).await.unwrap();

    let a1 = s.attempt_start(start(&w, 60_000)).await.unwrap();
    assert_eq!((a1.attempt, a1.epoch, a1.resumed), (1, 1, false));
    assert_eq!(a1.inputs, [1, 2]);
    let work = s.work_get(req(json!({"id": w}))).await.unwrap().work;
    assert_eq!((work.state.as_str(), work.lease_epoch), ("running", 1));

    // Input arriving while it runs stays pending.
    s.route_decide(create(3, &["k"])).await.unwrap();
    s.lease_renew(req(
        json!({"execution_id": a1.execution_id, "epoch": 1, "lease_ttl_ms": 90_000}),
    ))
    .await
    .unwrap();
    s.recovery_persist(req(json!({"execution_id": a1.execution_id, "epoch": 1,
        "recovery": {"session": "abc"}})))
        .await
        .unwrap();
    let mut done = settle(&a1.execution_id, 1, "completed");
    done.result = Some(json!({"summary": "ok"}));
    let r = s.attempt_settle(done).await.unwrap();
    assert_eq!(r.work_state, "pending");
    assert_eq!(r.pending, [3]);
    let ex = s
        .executions(req(json!({"work_id": w})))
        .await
        .unwrap()
        .executions;
    assert_eq!(ex[0].state, "completed");
    assert_eq!(ex[0].recovery, json!({"session": "abc"}));
    assert_eq!(ex[0].result, json!({"summary": "ok"}));
    assert!(ex[0].settled_at.is_some());
    let inputs = s
        .work_inputs(req(json!({"work_id": w, "state": "done"})))
        .await
        .unwrap();
    assert_eq!(inputs.inputs.len(), 2);

    // Attempt 2 takes the new input; a handoff leaves the Work idle.
    let a2 = s.attempt_start(start(&w, 60_000)).await.unwrap();
    assert_eq!((a2.attempt, a2.epoch), (2, 2));
    assert_eq!(a2.inputs, [3]);
    let r = s
        .attempt_settle(settle(&a2.execution_id, 2, "handoff"))
        .await
        .unwrap();
    assert_eq!(
        (r.work_state.as_str(), r.execution_state.as_str()),
        ("idle", "handoff")
    );
    // New input makes an idle Work pending; a failed attempt returns its inputs.
    let r = s.route_decide(create(4, &["k"])).await.unwrap();
    assert_eq!(r.work_state.as_deref(), Some("pending"));
    let a3 = s.attempt_start(start(&w, 60_000)).await.unwrap();
    let mut fail = settle(&a3.execution_id, 3, "failed");
    fail.retry_at_ms = Some(5_000);
    let r = s.attempt_settle(fail).await.unwrap();
    assert_eq!((r.work_state.as_str(), r.failures), ("pending", 1));
    assert_eq!(r.pending, [4]);
    // Ready once the retry time passed.
    let ready = s.works_ready(req(json!({"now_ms": 4_999}))).await.unwrap();
    assert!(ready.works.is_empty());
    let ready = s.works_ready(req(json!({"now_ms": 5_000}))).await.unwrap();
    assert_eq!(ready.works.len(), 1);
    // A success resets the failures.
    let a4 = s.attempt_start(start(&w, 60_000)).await.unwrap();
    assert_eq!(a4.inputs, [4]);
    let r = s
        .attempt_settle(settle(&a4.execution_id, 4, "completed"))
        .await
        .unwrap();
    assert_eq!((r.work_state.as_str(), r.failures), ("completed", 0));
    // A completed Work is reopened by new input through its key.
    t.event(5, "s1", "x", &["k"]).await;
    let r = s.route_decide(create(5, &["k"])).await.unwrap();
    assert_eq!(r.work_id.as_deref(), Some(w.as_str()));
    assert_eq!(r.work_state.as_deref(), Some("pending"));
    // Pages of executions by attempt.
    let p1 = s
        .executions(req(json!({"work_id": w, "limit": 3})))
        .await
        .unwrap();
    assert_eq!(
        p1.executions.iter().map(|e| e.attempt).collect::<Vec<_>>(),
        [1, 2, 3]
    );
    assert_eq!(p1.next, "3");
    let p2 = s
        .executions(req(json!({"work_id": w, "limit": 3, "after": p1.next})))
        .await
        .unwrap();
    assert_eq!(p2.executions.len(), 1);
    assert_eq!(p2.next, "");
    t.close();
}

async fn attempt_start_preconditions_write_nothing(b: Backend) {
    let t = TestStore::new(b, "start-pre");
    let s = &t.store;
    t.event(1, "s1", "x", &[]).await;
    let w = s
        .route_decide(create(1, &[]))
        .await
        .unwrap()
        .work_id
        .unwrap();
    let version = s
        .work_get(req(json!({"id": w})))
        .await
        .unwrap()
        .work
        .version;
    let before = t.snapshot().await;
    assert!(matches!(
        s.attempt_start(start("work_nope", 1000)).await,
        Err(StoreError::NotFound(_))
    ));
    let mut stale = start(&w, 1000);
    stale.expect_version = Some(version - 1);
    let m = is_conflict(s.attempt_start(stale).await);
    assert!(m.contains("version"), "{m}");
    let e = s.attempt_start(start(&w, u64::MAX)).await.unwrap_err();
    assert!(matches!(e, StoreError::Invalid(_)), "{e}");
    let mut no_owner = start(&w, 1000);
    no_owner.lease_owner = String::new();
    assert!(matches!(
        s.attempt_start(no_owner).await,
        Err(StoreError::Invalid(_))
    ));
    assert_eq!(t.snapshot().await, before);

    let mut good = start(&w, 1000);
    good.expect_version = Some(version);
    let a = s.attempt_start(good).await.unwrap();
    let running = t.snapshot().await;
    let m = is_conflict(s.attempt_start(start(&w, 1000)).await);
    assert!(m.contains("already running"), "{m}");
    assert_eq!(t.snapshot().await, running);
    // Completed, no pending input: nothing to start.
    s.attempt_settle(settle(&a.execution_id, a.epoch, "handoff"))
        .await
        .unwrap();
    let idle = t.snapshot().await;
    is_conflict(s.attempt_start(start(&w, 1000)).await);
    assert_eq!(t.snapshot().await, idle);
    t.close();
}

async fn settle_bounds_and_preconditions_write_nothing(b: Backend) {
    let t = TestStore::new(b, "settle-pre");
    let s = &t.store;
    t.event(1, "s1", "x", &[]).await;
    let w = s
        .route_decide(create(1, &[]))
        .await
        .unwrap()
        .work_id
        .unwrap();
    let a = s.attempt_start(start(&w, 60_000)).await.unwrap();
    let before = t.snapshot().await;
    // No such execution.
    assert!(matches!(
        s.attempt_settle(settle("exe_nope", 1, "completed")).await,
        Err(StoreError::NotFound(_))
    ));
    // waiting without its wait, a wait on another outcome, retry on a success.
    assert!(matches!(
        s.attempt_settle(settle(&a.execution_id, 1, "waiting"))
            .await,
        Err(StoreError::Invalid(_))
    ));
    let mut odd = settle(&a.execution_id, 1, "completed");
    odd.wait = Some(req(json!({"keys": ["k"]})));
    assert!(matches!(
        s.attempt_settle(odd).await,
        Err(StoreError::Invalid(_))
    ));
    let mut odd = settle(&a.execution_id, 1, "completed");
    odd.retry_at_ms = Some(1);
    assert!(matches!(
        s.attempt_settle(odd).await,
        Err(StoreError::Invalid(_))
    ));
    let mut big = settle(&a.execution_id, 1, "completed");
    big.result = Some(json!("x".repeat(2_000_000)));
    let e = s.attempt_settle(big).await.unwrap_err();
    assert!(e.to_string().contains("max_value_bytes"), "{e}");
    let e = s
        .recovery_persist(req(json!({"execution_id": a.execution_id, "epoch": 1,
            "recovery": "x".repeat(2_000_000)})))
        .await
        .unwrap_err();
    assert!(e.to_string().contains("max_value_bytes"), "{e}");
    assert_eq!(t.snapshot().await, before);
    // A second active Wait for the Work is refused (one is injected beside the run).
    t.exec(&format!(
        "INSERT INTO waits (id, work_id, state, created_at) VALUES ('wait_x', '{w}', 'active', 'now')"
    ))
    .await;
    let injected = t.snapshot().await;
    let mut wait = settle(&a.execution_id, 1, "waiting");
    wait.wait = Some(req(json!({"keys": ["k"], "due_ms": 10})));
    let m = is_conflict(s.attempt_settle(wait).await);
    assert!(m.contains("active Wait"), "{m}");
    assert_eq!(t.snapshot().await, injected);
    t.close();
}

/// The fence: once a newer attempt (or a takeover) holds a newer epoch, every write
/// of the older holder is refused and changes nothing.
async fn lease_fencing_refuses_an_older_epoch(b: Backend) {
    let t = TestStore::new(b, "fence");
    let s = &t.store;
    t.event(1, "s1", "x", &[]).await;
    let w = s
        .route_decide(create(1, &[]))
        .await
        .unwrap()
        .work_id
        .unwrap();

    // Attempt 1 under epoch 1, whose lease expires at once (ttl 0).
    let a1 = s.attempt_start(start(&w, 0)).await.unwrap();
    assert_eq!((a1.attempt, a1.epoch), (1, 1));
    s.recovery_persist(req(json!({"execution_id": a1.execution_id, "epoch": 1,
        "recovery": {"pid": 1}})))
        .await
        .unwrap();
    let expired = s
        .expired_leases(req(json!({"now_ms": i64::MAX})))
        .await
        .unwrap();
    assert_eq!(expired.executions.len(), 1);
    assert_eq!(expired.executions[0].id, a1.execution_id);
    assert_eq!(expired.executions[0].epoch, 1);
    // Nothing expired in the distant past.
    assert!(s
        .expired_leases(req(json!({"now_ms": 0})))
        .await
        .unwrap()
        .executions
        .is_empty());

    // Recovery takes the lease over under epoch 2 and reads the recovery metadata.
    let take = s
        .lease_takeover(req(json!({"execution_id": a1.execution_id, "epoch": 1,
            "lease_owner": "sched-2", "lease_ttl_ms": 600_000})))
        .await
        .unwrap();
    assert_eq!(take.epoch, 2);
    assert_eq!(take.recovery, json!({"pid": 1}));
    assert_eq!(take.inputs, [1]);

    // The old holder's writes under epoch 1 are refused and change nothing.
    let before = t.snapshot().await;
    let old = &a1.execution_id;
    is_conflict(
        s.lease_renew(req(
            json!({"execution_id": old, "epoch": 1, "lease_ttl_ms": 1000}),
        ))
        .await,
    );
    let m = is_conflict(
        s.recovery_persist(req(
            json!({"execution_id": old, "epoch": 1, "recovery": {"pid": 666}}),
        ))
        .await,
    );
    assert!(m.contains("fenced"), "{m}");
    is_conflict(s.attempt_settle(settle(old, 1, "completed")).await);
    is_conflict(s.attempt_settle(settle(old, 1, "failed")).await);
    // A second takeover from epoch 1 loses too; a live lease cannot be taken over.
    is_conflict(
        s.lease_takeover(req(json!({"execution_id": old, "epoch": 1,
            "lease_owner": "sched-3", "lease_ttl_ms": 1000})))
            .await,
    );
    let m = is_conflict(
        s.lease_takeover(req(json!({"execution_id": old, "epoch": 2,
            "lease_owner": "sched-3", "lease_ttl_ms": 1000})))
            .await,
    );
    assert!(m.contains("live"), "{m}");
    // An epoch from the future is no better.
    is_conflict(s.attempt_settle(settle(old, 3, "completed")).await);
    assert_eq!(t.snapshot().await, before);

    // The new holder stops it and fails it: inputs return, the Work waits to retry.
    let mut fail = settle(old, 2, "failed");
    fail.retry_at_ms = Some(0);
    s.attempt_settle(fail).await.unwrap();
    // Attempt 2 under epoch 3.
    let a2 = s.attempt_start(start(&w, 600_000)).await.unwrap();
    assert_eq!((a2.attempt, a2.epoch), (2, 3));
    assert_eq!(a2.inputs, [1]);

    // Attempt 1, under either of its epochs, is refused; attempt 2 is untouched.
    let before = t.snapshot().await;
    for epoch in [1, 2] {
        is_conflict(
            s.lease_renew(req(
                json!({"execution_id": old, "epoch": epoch, "lease_ttl_ms": 1000}),
            ))
            .await,
        );
        is_conflict(
            s.recovery_persist(req(
                json!({"execution_id": old, "epoch": epoch, "recovery": 1}),
            ))
            .await,
        );
        is_conflict(s.attempt_settle(settle(old, epoch, "completed")).await);
    }
    // Attempt 2's own id under attempt 1's epochs is fenced as well.
    is_conflict(
        s.attempt_settle(settle(&a2.execution_id, 2, "completed"))
            .await,
    );
    assert_eq!(t.snapshot().await, before);
    let r = s
        .attempt_settle(settle(&a2.execution_id, 3, "completed"))
        .await
        .unwrap();
    assert_eq!(r.work_state, "completed");
    t.close();
}

async fn a_failed_attempt_is_fenced_by_the_next_and_a_final_failure_closes_the_work(b: Backend) {
    let t = TestStore::new(b, "fence-fail");
    let s = &t.store;
    t.event(1, "s1", "x", &["k"]).await;
    let w = s
        .route_decide(create(1, &["k"]))
        .await
        .unwrap()
        .work_id
        .unwrap();
    let a1 = s.attempt_start(start(&w, 60_000)).await.unwrap();
    s.attempt_settle(settle(&a1.execution_id, 1, "failed"))
        .await
        .unwrap();
    let a2 = s.attempt_start(start(&w, 60_000)).await.unwrap();
    assert_eq!((a2.attempt, a2.epoch), (2, 2));
    let before = t.snapshot().await;
    is_conflict(
        s.recovery_persist(req(
            json!({"execution_id": a1.execution_id, "epoch": 1, "recovery": 1}),
        ))
        .await,
    );
    is_conflict(
        s.attempt_settle(settle(&a1.execution_id, 1, "completed"))
            .await,
    );
    is_conflict(
        s.lease_renew(req(
            json!({"execution_id": a1.execution_id, "epoch": 1, "lease_ttl_ms": 5}),
        ))
        .await,
    );
    assert_eq!(t.snapshot().await, before);

    // The budget is spent: the Work fails for good, its inputs with it.
    let mut fin = settle(&a2.execution_id, 2, "failed");
    fin.final_failure = true;
    let r = s.attempt_settle(fin).await.unwrap();
    assert_eq!((r.work_state.as_str(), r.failures), ("failed", 2));
    assert_eq!(
        t.rows("SELECT seq, state FROM work_inputs").await,
        ["1|failed"]
    );
    is_conflict(s.attempt_start(start(&w, 1000)).await);
    is_conflict(s.work_cancel(req(json!({"work_id": w}))).await);
    // Its key goes to the next Work.
    t.event(2, "s1", "x", &["k"]).await;
    let r = s.route_decide(create(2, &["k"])).await.unwrap();
    assert!(r.created);
    t.close();
}

async fn cancel_fences_the_running_attempt(b: Backend) {
    let t = TestStore::new(b, "cancel");
    let s = &t.store;
    t.event(1, "s1", "x", &[]).await;
    t.event(2, "s1", "x", &[]).await;
    let w = s
        .route_decide(create(1, &[]))
        .await
        .unwrap()
        .work_id
        .unwrap();
    let a = s.attempt_start(start(&w, 60_000)).await.unwrap();
    s.route_decide(attach(2, &w)).await.unwrap();
    let version = s
        .work_get(req(json!({"id": w})))
        .await
        .unwrap()
        .work
        .version;
    let before = t.snapshot().await;
    assert!(matches!(
        s.work_cancel(req(json!({"work_id": "work_nope"}))).await,
        Err(StoreError::NotFound(_))
    ));
    is_conflict(
        s.work_cancel(req(json!({"work_id": w, "expect_version": version + 1})))
            .await,
    );
    assert!(matches!(
        s.work_cancel(req(json!({"work_id": w, "reason": "r".repeat(3000)})))
            .await,
        Err(StoreError::Invalid(_))
    ));
    assert_eq!(t.snapshot().await, before);

    let c = s
        .work_cancel(req(
            json!({"work_id": w, "reason": "operator", "expect_version": version}),
        ))
        .await
        .unwrap();
    assert_eq!(c.execution_id.as_deref(), Some(a.execution_id.as_str()));
    assert_eq!(c.epoch, 2);
    let work = s.work_get(req(json!({"id": w}))).await.unwrap().work;
    assert_eq!(work.state, "cancelled");
    assert_eq!(
        t.rows("SELECT seq, state FROM work_inputs ORDER BY seq")
            .await,
        ["1|cancelled", "2|cancelled"]
    );
    let after = t.snapshot().await;
    is_conflict(
        s.attempt_settle(settle(&a.execution_id, 1, "completed"))
            .await,
    );
    is_conflict(
        s.recovery_persist(req(
            json!({"execution_id": a.execution_id, "epoch": 1, "recovery": 1}),
        ))
        .await,
    );
    is_conflict(s.work_cancel(req(json!({"work_id": w}))).await);
    assert_eq!(t.snapshot().await, after);
    t.close();
}

/// `recent`: the last changed Work first (ties by ID, descending), paged by the
/// `<updated_at>|<id>` cursor; a cursor that is not one is refused.
async fn recent_lists_the_last_changed_first_and_pages_on(b: Backend) {
    let t = TestStore::new(b, "recent");
    let s = &t.store;
    let mut ids = Vec::new();
    for seq in 1..=5 {
        t.event(seq, "s1", "x", &[]).await;
        ids.push(
            s.route_decide(create(seq, &[]))
                .await
                .unwrap()
                .work_id
                .unwrap(),
        );
    }
    // The largest ID changes last: by ID it is last, the last changed first it is
    // first, and the others follow by when they changed.
    ids.sort();
    tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    s.attempt_start(start(&ids[4], 1000)).await.unwrap();
    let mut all = Vec::new();
    let mut after = String::new();
    loop {
        let p = s
            .works(req(json!({"recent": true, "limit": 2, "after": after})))
            .await
            .unwrap();
        assert!(p.works.len() <= 2);
        all.extend(p.works);
        if p.next.is_empty() {
            break;
        }
        assert!(p.next.contains('|'), "{}", p.next);
        after = p.next;
    }
    assert_eq!(all.len(), 5, "{all:?}");
    assert_eq!(all[0].id, ids[4], "the last changed is first: {all:?}");
    for pair in all.windows(2) {
        let (a, b) = (&pair[0], &pair[1]);
        assert!(
            (a.updated_at.as_str(), a.id.as_str()) > (b.updated_at.as_str(), b.id.as_str()),
            "{a:?} before {b:?}"
        );
    }
    let e = s
        .works(req(json!({"recent": true, "after": ids[0]})))
        .await
        .unwrap_err();
    assert!(e.to_string().contains("cursor"), "{e}");
    t.close();
}

async fn reads_are_paged_and_bounded(b: Backend) {
    let t = TestStore::new(b, "reads");
    let s = &t.store;
    let mut ids = Vec::new();
    for seq in 1..=5 {
        t.event(seq, "s1", "x", &[]).await;
        ids.push(
            s.route_decide(create(seq, &[]))
                .await
                .unwrap()
                .work_id
                .unwrap(),
        );
    }
    ids.sort();
    let p1 = s
        .works(req(
            json!({"scope_id": "s1", "state": "pending", "limit": 2}),
        ))
        .await
        .unwrap();
    assert_eq!(
        p1.works.iter().map(|w| w.id.clone()).collect::<Vec<_>>(),
        ids[..2]
    );
    let p2 = s
        .works(req(json!({"scope_id": "s1", "limit": 2, "after": p1.next})))
        .await
        .unwrap();
    assert_eq!(
        p2.works.iter().map(|w| w.id.clone()).collect::<Vec<_>>(),
        ids[2..4]
    );
    let p3 = s
        .works(req(json!({"limit": 2, "after": p2.next})))
        .await
        .unwrap();
    assert_eq!(p3.works.len(), 1);
    assert_eq!(p3.next, "");
    assert!(s
        .works(req(json!({"scope_id": "s2"})))
        .await
        .unwrap()
        .works
        .is_empty());
    let e = s.works(req(json!({"limit": 1001}))).await.unwrap_err();
    assert!(e.to_string().contains("max_page"), "{e}");
    let e = s.executions(req(json!({"limit": 5000}))).await.unwrap_err();
    assert!(e.to_string().contains("max_page"), "{e}");
    assert!(matches!(
        s.work_get(req(json!({"id": "work_nope"}))).await,
        Err(StoreError::NotFound(_))
    ));
    let e = s.unrouted(req(json!({"limit": 1001}))).await.unwrap_err();
    assert!(e.to_string().contains("max_page"), "{e}");
    // Executions across Works page by ID.
    for id in &ids[..3] {
        s.attempt_start(start(id, 1000)).await.unwrap();
    }
    let running = s
        .executions(req(json!({"state": "running", "limit": 2})))
        .await
        .unwrap();
    assert_eq!(running.executions.len(), 2);
    let rest = s
        .executions(req(
            json!({"state": "running", "limit": 2, "after": running.next}),
        ))
        .await
        .unwrap();
    assert_eq!(rest.executions.len(), 1);
    assert!(rest.executions[0].id > running.executions[1].id);
    t.close();
}

/// An event routed to a Work while its attempt runs, and consumed by that attempt
/// (injected and taken in), is done with it: the Work settles without pending input,
/// so no further attempt starts for it. An input it did not consume stays pending.
async fn inputs_an_attempt_consumed_while_it_ran_are_done_with_it(b: Backend) {
    let t = TestStore::new(b, "settle-consumed");
    let s = &t.store;
    for seq in 1..=3 {
        t.event(seq, "s1", "x", &["k"]).await;
    }
    let w = s
        .route_decide(create(1, &["k"]))
        .await
        .unwrap()
        .work_id
        .unwrap();
    let a = s.attempt_start(start(&w, 60_000)).await.unwrap();
    assert_eq!(a.inputs, [1]);
    let during = s.route_decide(attach(2, &w)).await.unwrap();
    assert_eq!(during.work_state.as_deref(), Some("running"));
    let mut done = settle(&a.execution_id, a.epoch, "completed");
    done.consumed = vec!["evt_2".into()];
    let r = s.attempt_settle(done).await.unwrap();
    assert_eq!(r.work_state, "completed");
    assert!(r.pending.is_empty(), "{:?}", r.pending);
    let inputs = s.work_inputs(req(json!({"work_id": w}))).await.unwrap();
    assert_eq!(
        inputs
            .inputs
            .iter()
            .map(|i| (i.seq, i.state.as_str()))
            .collect::<Vec<_>>(),
        [(1, "done"), (2, "done")]
    );

    // Not consumed: it stays pending for the next attempt.
    let b = s.attempt_start(start(&w, 60_000));
    assert!(b.await.is_err(), "nothing pending to start for");
    s.route_decide(attach(3, &w)).await.unwrap();
    let a = s.attempt_start(start(&w, 60_000)).await.unwrap();
    assert_eq!(a.inputs, [3]);
    let mut other = settle(&a.execution_id, a.epoch, "handoff");
    other.consumed = vec!["evt_1".into()];
    let r = s.attempt_settle(other).await.unwrap();
    assert_eq!(r.work_state, "idle");
    t.close();
}

/// A run of decisions is one write: recorded whole, or (one refused) not at all, the
/// refusal naming the decision; and the events leave `store.unrouted` only when
/// recorded.
async fn decisions_in_one_write_are_recorded_whole_or_not_at_all(b: Backend) {
    let t = TestStore::new(b, "route-many");
    let s = &t.store;
    for seq in 1..=4 {
        t.event(seq, "s1", "x", &[]).await;
    }
    let unmatched =
        |seq: i64| json!({"seq": seq, "scope_id": "s1", "outcome": {"type": "unmatched"}});
    // The third is already routed: the batch is refused and writes nothing.
    s.route_decide(req(unmatched(3))).await.unwrap();
    let e = s
        .route_decide_many(req(
            json!({"decisions": [unmatched(1), unmatched(2), unmatched(3)]}),
        ))
        .await
        .unwrap_err();
    assert!(
        matches!(&e, StoreError::Conflict(m) if m.starts_with("events[2]:") && m.contains("already routed")),
        "{e:?}"
    );
    assert_eq!(t.rows("SELECT seq FROM routed ORDER BY seq").await, ["3"]);
    let pending = |s: &storaged::Store| {
        let s = s.clone();
        async move {
            s.unrouted(req(json!({"after": 0, "limit": 10})))
                .await
                .unwrap()
                .events
                .iter()
                .map(|e| e.seq)
                .collect::<Vec<_>>()
        }
    };
    assert_eq!(pending(s).await, [1, 2, 4]);
    // Whole: one result per decision, in order.
    let r = s
        .route_decide_many(req(
            json!({"decisions": [unmatched(1), unmatched(2), unmatched(4)]}),
        ))
        .await
        .unwrap();
    assert_eq!(r.decided.len(), 3);
    assert!(r.decided.iter().all(|d| d.work_id.is_none() && !d.created));
    assert_eq!(
        t.rows("SELECT seq, disposition FROM routed ORDER BY seq")
            .await,
        ["1|unmatched", "2|unmatched", "3|unmatched", "4|unmatched"]
    );
    assert!(pending(s).await.is_empty());
    // Bounded like every batch.
    let many: Vec<_> = (0..1001).map(unmatched).collect();
    let e = s
        .route_decide_many(req(json!({ "decisions": many })))
        .await
        .unwrap_err();
    assert!(e.to_string().contains("max_batch"), "{e}");
    t.close();
}

fn closing(seq: i64, keys: &[&str], close: &str) -> RouteDecideRequest {
    req(json!({
        "seq": seq, "scope_id": "s1",
        "records": [{"handler": "gh", "binding": "b1", "matched": true, "reason": "closed"}],
        "outcome": {"type": "create", "kind": "gh/issue", "binding": "b1", "keys": keys,
                    "close": close}
    }))
}

async fn an_event_that_closes_completes_or_cancels_its_work_and_fences_the_run(b: Backend) {
    let t = TestStore::new(b, "close");
    let s = &t.store;
    for seq in 1..=5 {
        t.event(seq, "s1", "x", &["pr:7"]).await;
    }
    // Nothing open to close: no Work is made.
    let r = s
        .route_decide(closing(1, &["pr:7"], "completed"))
        .await
        .unwrap();
    assert_eq!(r.work_id, None);
    assert_eq!(
        t.rows("SELECT seq, disposition FROM routed ORDER BY seq")
            .await,
        ["1|unmatched:closes_nothing"]
    );
    // A Work with a running attempt: the close completes it and fences the run.
    let w = s
        .route_decide(create(2, &["pr:7"]))
        .await
        .unwrap()
        .work_id
        .unwrap();
    let a = s.attempt_start(start(&w, 60_000)).await.unwrap();
    let r = s
        .route_decide(closing(3, &["pr:7"], "completed"))
        .await
        .unwrap();
    assert_eq!(r.work_id.as_deref(), Some(w.as_str()));
    assert_eq!(r.work_state.as_deref(), Some("completed"));
    let work = s.work_get(req(json!({"id": w}))).await.unwrap().work;
    assert_eq!(work.state, "completed");
    is_conflict(
        s.attempt_settle(settle(&a.execution_id, a.epoch, "completed"))
            .await,
    );
    assert_eq!(
        t.rows("SELECT seq, state FROM work_inputs ORDER BY seq")
            .await,
        ["2|done", "3|done"]
    );
    // A completed Work reopens on the next event, and a closed-unmerged one cancels it.
    s.route_decide(create(4, &["pr:7"])).await.unwrap();
    let r = s
        .route_decide(closing(5, &["pr:7"], "cancelled"))
        .await
        .unwrap();
    assert_eq!(r.work_state.as_deref(), Some("cancelled"));
    // Only completed or cancelled.
    t.event(6, "s1", "x", &["pr:8"]).await;
    assert!(matches!(
        s.route_decide(closing(6, &["pr:8"], "failed")).await,
        Err(StoreError::Invalid(_))
    ));
    t.close();
}

on_both!(
    create_then_a_key_attaches_the_next_event_and_routing_twice_conflicts,
    decisions_in_one_write_are_recorded_whole_or_not_at_all,
    route_decide_preconditions_and_bounds_write_nothing,
    a_display_that_breaks_a_limit_is_refused_and_routing_goes_on,
    unmatched_records_the_disposition_and_makes_no_work,
    attempts_take_inputs_and_settle_completed_handoff_and_failed,
    attempt_start_preconditions_write_nothing,
    settle_bounds_and_preconditions_write_nothing,
    lease_fencing_refuses_an_older_epoch,
    a_failed_attempt_is_fenced_by_the_next_and_a_final_failure_closes_the_work,
    cancel_fences_the_running_attempt,
    reads_are_paged_and_bounded,
    recent_lists_the_last_changed_first_and_pages_on,
    inputs_an_attempt_consumed_while_it_ran_are_done_with_it,
    an_event_that_closes_completes_or_cancels_its_work_and_fences_the_run,
);
