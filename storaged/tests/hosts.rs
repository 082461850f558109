//! Several hosts on one database: host beats, takeovers that only the attempt's own
//! host may make while it is alive, woken Waits left to their host, and extension
//! task passes claimed by one host.

#![allow(clippy::unwrap_used)]

mod work_common;

#[macro_use]
mod backend;
use backend::Backend;
use serde_json::json;
use storaged::work::*;
use storaged::StoreError;
use work_common::*;

fn is_conflict<T: std::fmt::Debug>(r: Result<T, StoreError>) -> String {
    match r {
        Err(StoreError::Conflict(m)) => m,
        other => panic!("expected conflict, got {other:?}"),
    }
}

fn is_invalid<T: std::fmt::Debug>(r: Result<T, StoreError>) -> String {
    match r {
        Err(StoreError::Invalid(m)) => m,
        other => panic!("expected invalid, got {other:?}"),
    }
}

async fn beat(s: &storaged::Store, host: &str, lease_ms: u64) -> HostBeatResponse {
    s.host_beat(req(
        json!({"host": host, "name": format!("{host} name"), "lease_ms": lease_ms}),
    ))
    .await
    .unwrap()
}

/// A Work with one event and an attempt launched by `host`, whose lease ran out.
async fn expired_attempt(t: &TestStore, host: &str) -> (String, AttemptStartResponse) {
    let s = &t.store;
    t.event(1, "s1", "x", &["k:1"]).await;
    let w = s
        .route_decide(req(json!({"seq": 1, "scope_id": "s1",
            "outcome": {"type": "create", "kind": "k", "keys": ["k:1"]}})))
        .await
        .unwrap()
        .work_id
        .unwrap();
    let a = s
        .attempt_start(req(
            json!({"work_id": w, "executor": "e", "lease_owner": format!("schedulerd:1@{host}"),
            "lease_ttl_ms": 0, "host": host}),
        ))
        .await
        .unwrap();
    (w, a)
}

async fn beats_make_hosts_alive_and_bounds_are_named(b: Backend) {
    let t = TestStore::new(b, "host-beat");
    let s = &t.store;
    let first = beat(s, "h-a", 30_000).await;
    assert!(first.returned, "a host's first beat is its return");
    assert!(!beat(s, "h-a", 30_000).await.returned);
    beat(s, "h-b", 30_000).await;
    let hosts = s.hosts(req(json!({}))).await.unwrap().hosts;
    let ids: Vec<_> = hosts.iter().map(|h| (h.id.as_str(), h.alive)).collect();
    assert_eq!(ids, [("h-a", true), ("h-b", true)]);
    assert_eq!(hosts[0].name, "h-a name");
    // Paged.
    let page = s.hosts(req(json!({"limit": 1}))).await.unwrap();
    assert_eq!(page.hosts.len(), 1);
    let rest = s
        .hosts(req(json!({"after": page.next, "limit": 1})))
        .await
        .unwrap();
    assert_eq!(rest.hosts[0].id, "h-b");
    // A host past its lease reads as gone; its next beat is a return.
    t.exec("UPDATE hosts SET expires_ms = 1 WHERE id = 'h-b'")
        .await;
    let hosts = s.hosts(req(json!({}))).await.unwrap().hosts;
    assert!(!hosts[1].alive);
    assert!(beat(s, "h-b", 30_000).await.returned);

    let m = is_invalid(
        s.host_beat(req(json!({"host": "h-a", "lease_ms": 10})))
            .await,
    );
    assert!(m.contains("host lease limits"), "{m}");
    let m = is_invalid(
        s.host_beat(req(json!({"host": "a/b", "lease_ms": 30_000})))
            .await,
    );
    assert!(m.contains("may hold only"), "{m}");
    let m = is_invalid(
        s.host_beat(req(json!({"host": "x".repeat(65), "lease_ms": 30_000})))
            .await,
    );
    assert!(m.contains("host ID limit"), "{m}");
    t.close();
}

/// While the attempt's host is alive, only it takes its expired attempt over; once
/// it is gone, another host may, fencing it by epoch.
async fn another_host_takes_over_only_once_the_attempts_host_is_gone(b: Backend) {
    let t = TestStore::new(b, "host-takeover");
    let s = &t.store;
    beat(s, "h-a", 60_000).await;
    beat(s, "h-b", 60_000).await;
    let (w, a) = expired_attempt(&t, "h-a").await;
    let ex = s
        .executions(req(json!({"work_id": w})))
        .await
        .unwrap()
        .executions;
    assert_eq!(ex[0].host, "h-a");

    let expired = |host: &'static str| {
        let s = s.clone();
        async move {
            s.expired_leases(req(
                json!({"now_ms": storaged::util::now_ms(), "host": host}),
            ))
            .await
            .unwrap()
            .executions
            .into_iter()
            .map(|e| e.id)
            .collect::<Vec<_>>()
        }
    };
    // h-a sees its own; h-b does not while h-a is alive; no host named: all.
    assert_eq!(expired("h-a").await, std::slice::from_ref(&a.execution_id));
    assert!(expired("h-b").await.is_empty());
    assert_eq!(expired("").await, std::slice::from_ref(&a.execution_id));

    let take = |host: &str, epoch: i64| {
        req::<LeaseTakeoverRequest>(json!({"execution_id": a.execution_id, "epoch": epoch,
            "lease_owner": format!("schedulerd:2@{host}"), "lease_ttl_ms": 0, "host": host}))
    };
    let before = t.snapshot().await;
    let m = is_conflict(s.lease_takeover(take("h-b", a.epoch)).await);
    assert!(m.contains("h-a") && m.contains("alive"), "{m}");
    assert_eq!(
        t.snapshot().await,
        before,
        "a refused takeover writes nothing"
    );

    // Its own host adopts it (a restarted schedulerd): no host gone.
    let own = s.lease_takeover(take("h-a", a.epoch)).await.unwrap();
    assert_eq!((own.epoch, own.host.as_str()), (a.epoch + 1, "h-a"));
    assert_eq!(own.host_gone_ms, None);

    // h-a is gone: h-b sees the attempt and takes it over at a higher epoch.
    t.exec("UPDATE hosts SET expires_ms = 5 WHERE id = 'h-a'")
        .await;
    assert_eq!(expired("h-b").await, std::slice::from_ref(&a.execution_id));
    let taken = s.lease_takeover(take("h-b", own.epoch)).await.unwrap();
    assert_eq!(taken.epoch, own.epoch + 1);
    assert_eq!(
        taken.host, "h-a",
        "the attempt still names its launching host"
    );
    assert_eq!(taken.host_gone_ms, Some(5));
    // The older holder is fenced.
    is_conflict(
        s.attempt_settle(req(
            json!({"execution_id": a.execution_id, "epoch": own.epoch,
            "outcome": "completed"}),
        ))
        .await,
    );
    let r = s
        .attempt_settle(req(
            json!({"execution_id": a.execution_id, "epoch": taken.epoch,
            "outcome": "failed", "retry_at_ms": 0,
            "result": {"error": "host h-a is gone"}}),
        ))
        .await
        .unwrap();
    assert_eq!((r.work_state.as_str(), r.failures), ("pending", 1));

    // A host that never beat is gone as well.
    t.exec("DELETE FROM hosts WHERE id = 'h-a'").await;
    let a2 = s
        .attempt_start(req(
            json!({"work_id": w, "executor": "e", "lease_owner": "o",
            "lease_ttl_ms": 0, "host": "h-a"}),
        ))
        .await
        .unwrap();
    let taken = s
        .lease_takeover(req(
            json!({"execution_id": a2.execution_id, "epoch": a2.epoch,
            "lease_owner": "o2", "lease_ttl_ms": 0, "host": "h-b"}),
        ))
        .await
        .unwrap();
    assert_eq!(taken.host_gone_ms, Some(0));
    t.close();
}

/// A woken Wait's attempt resumes on the host that parked it while that host lives.
async fn a_woken_work_is_left_to_its_host_while_it_is_alive(b: Backend) {
    let t = TestStore::new(b, "host-woken");
    let s = &t.store;
    beat(s, "h-a", 60_000).await;
    let (w, a) = expired_attempt(&t, "h-a").await;
    s.attempt_settle(req(
        json!({"execution_id": a.execution_id, "epoch": a.epoch,
        "outcome": "waiting", "wait": {"keys": ["k:2"]}}),
    ))
    .await
    .unwrap();
    let wait = s.waits(req(json!({"work_id": w}))).await.unwrap().waits;
    s.wait_wake(req(json!({"wait_id": wait[0].id, "reason": "timeout"})))
        .await
        .unwrap();
    let ready = |host: &'static str| {
        let s = s.clone();
        async move {
            s.works_ready(req(
                json!({"now_ms": storaged::util::now_ms(), "host": host}),
            ))
            .await
            .unwrap()
            .works
            .into_iter()
            .map(|w| w.id)
            .collect::<Vec<_>>()
        }
    };
    assert_eq!(ready("h-a").await, std::slice::from_ref(&w));
    assert!(ready("h-b").await.is_empty());
    assert_eq!(ready("").await, std::slice::from_ref(&w));
    t.exec("UPDATE hosts SET expires_ms = 5 WHERE id = 'h-a'")
        .await;
    assert_eq!(
        ready("h-b").await,
        std::slice::from_ref(&w),
        "its host is gone"
    );
    // The host that resumes it launches its next segment.
    let r = s
        .attempt_start(req(
            json!({"work_id": w, "executor": "e", "lease_owner": "o",
            "lease_ttl_ms": 60_000, "host": "h-b"}),
        ))
        .await
        .unwrap();
    assert!(r.resumed);
    let ex = s
        .executions(req(json!({"work_id": w})))
        .await
        .unwrap()
        .executions;
    assert_eq!(ex[0].host, "h-b");
    t.close();
}

/// A task's pass is claimed by one host at a time, one interval apart.
async fn a_task_pass_is_claimed_once_across_hosts(b: Backend) {
    let t = TestStore::new(b, "host-tasks");
    let s = &t.store;
    let claim = |host: &'static str, every_ms: u64| {
        let s = s.clone();
        async move {
            s.task_claim(req(json!({"extension": "github", "task": "github.waits",
                "every_ms": every_ms, "host": host})))
                .await
                .unwrap()
        }
    };
    let first = claim("h-a", 15_000).await;
    assert!(
        !first.claimed,
        "the first pass is one interval after the task is known"
    );
    let again = claim("h-b", 15_000).await;
    assert!(!again.claimed);
    assert_eq!(again.due_ms, first.due_ms);
    // Due: one host wins, the other is told when the next pass is due.
    t.exec("UPDATE task_claims SET due_ms = 0").await;
    let won = claim("h-b", 15_000).await;
    assert!(won.claimed);
    let lost = claim("h-a", 15_000).await;
    assert!(!lost.claimed);
    assert_eq!((lost.due_ms, lost.host.as_str()), (won.due_ms, "h-b"));
    // A shorter interval applies at once.
    let shorter = claim("h-a", 1_000).await;
    assert!(!shorter.claimed && shorter.due_ms < won.due_ms);

    let m = is_invalid(
        s.task_claim(req(
            json!({"extension": "github", "task": "t", "every_ms": 0,
            "host": "h-a"}),
        ))
        .await,
    );
    assert!(m.contains("task interval limits"), "{m}");
    t.close();
}

/// A database away from every host (no beat of any host for longer than
/// `OUTAGE_GAP_MS`): its absence counts against no host's lease. The hosts alive at
/// the last beat stay alive, and the next beat gives each a full lease from then; a
/// host gone before stays gone.
async fn a_database_away_counts_against_no_host_lease(b: Backend) {
    let t = TestStore::new(b, "host-outage");
    let s = &t.store;
    for h in ["h-a", "h-b", "h-c"] {
        beat(s, h, 10_000).await;
    }
    let (_, a) = expired_attempt(&t, "h-a").await;
    // 20 s without a beat, past every lease; h-c was gone before.
    t.exec("UPDATE hosts SET beat_ms = beat_ms - 20000, expires_ms = expires_ms - 20000")
        .await;
    t.exec(
        "UPDATE hosts SET beat_ms = beat_ms - 20000, expires_ms = expires_ms - 20000 \
            WHERE id = 'h-c'",
    )
    .await;
    let alive = || async {
        s.hosts(req(json!({})))
            .await
            .unwrap()
            .hosts
            .into_iter()
            .map(|h| (h.id, h.alive))
            .collect::<Vec<_>>()
    };
    let want = vec![
        ("h-a".to_owned(), true),
        ("h-b".to_owned(), true),
        ("h-c".to_owned(), false),
    ];
    assert_eq!(alive().await, want);
    let expired = || async {
        s.expired_leases(req(
            json!({"now_ms": storaged::util::now_ms(), "host": "h-b"}),
        ))
        .await
        .unwrap()
        .executions
    };
    assert!(expired().await.is_empty(), "h-a's attempt offered to h-b");
    let take = || {
        req::<LeaseTakeoverRequest>(json!({"execution_id": a.execution_id, "epoch": a.epoch,
            "lease_owner": "schedulerd:2@h-b", "lease_ttl_ms": 0, "host": "h-b"}))
    };
    let m = is_conflict(s.lease_takeover(take()).await);
    assert!(m.contains("h-a") && m.contains("alive"), "{m}");

    // The database is back: h-b's beat gives h-a a full lease from now.
    let before = storaged::util::now_ms();
    beat(s, "h-b", 10_000).await;
    assert_eq!(alive().await, want);
    let rows = t
        .rows("SELECT id, beat_ms, expires_ms FROM hosts ORDER BY id")
        .await;
    let a_row: Vec<&str> = rows[0].split('|').collect();
    assert_eq!(a_row[0], "h-a");
    let (beat_ms, expires_ms): (i64, i64) = (a_row[1].parse().unwrap(), a_row[2].parse().unwrap());
    assert!(beat_ms >= before - 1_000, "{rows:?}");
    assert_eq!(expires_ms - beat_ms, 10_000, "{rows:?}");
    assert!(expired().await.is_empty());
    let m = is_conflict(s.lease_takeover(take()).await);
    assert!(m.contains("alive"), "{m}");
    t.close();
}

on_both!(
    beats_make_hosts_alive_and_bounds_are_named,
    another_host_takes_over_only_once_the_attempts_host_is_gone,
    a_woken_work_is_left_to_its_host_while_it_is_alive,
    a_task_pass_is_claimed_once_across_hosts,
    a_database_away_counts_against_no_host_lease,
);
