//! PostgreSQL: a group of `store.events_accept` writes inserts its new
//! deliveries in one statement ahead of the writes (issue 46, item 7). The
//! answers and the log are those of one write after another (new, redelivered
//! in the same group, redelivered from an earlier group, changed: conflict; a
//! batch all or nothing; `seq` in the order of the writes; `unrouted` rows and
//! keys), and the round trips to the server are counted: a group of new
//! deliveries costs a few, not one or more per write.
//!
//! The writes are made to form one group deterministically: another session
//! holds the suite's write lock while the writer waits on it with a first
//! write, and the test queues the group's writes one by one behind it.

#![allow(clippy::unwrap_used)]

#[macro_use]
mod backend;
use backend::Backend;
use serde_json::json;
use std::sync::atomic::Ordering;
use std::time::Duration;
use storaged::db::{StorageTarget, WRITE_LOCK};
use storaged::events::{AcceptedEvent, EventInput, EventsAcceptRequest};
use storaged::sql::{PgTarget, SessionBounds};
use storaged::{Limits, Store, StoreError};

fn ev(delivery: &str, n: i64, keys: &[&str]) -> EventInput {
    EventInput {
        scope_id: "s".into(),
        event_type: "github.issue".into(),
        source: "github".into(),
        delivery_id: Some(delivery.into()),
        payload: json!({ "n": n }),
        keys: keys.iter().map(|k| k.to_string()).collect(),
        ..Default::default()
    }
}

fn req(events: Vec<EventInput>) -> EventsAcceptRequest {
    EventsAcceptRequest {
        events,
        owner: None,
        families: None,
        scopes: None,
    }
}

/// Another session holding the write lock until dropped.
struct LockHolder {
    release: Option<std::sync::mpsc::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl LockHolder {
    fn hold(url: &str) -> LockHolder {
        let target = PgTarget::parse(url).unwrap().with_bounds(SessionBounds {
            idle_in_transaction: Duration::ZERO,
            lock: Duration::ZERO,
            statement: Duration::ZERO,
        });
        let (held_tx, held_rx) = std::sync::mpsc::channel();
        let (release, release_rx) = std::sync::mpsc::channel::<()>();
        let thread = std::thread::spawn(move || {
            let mut s = target.connect().unwrap();
            s.batch(&format!(
                "BEGIN; SELECT pg_advisory_xact_lock({WRITE_LOCK})"
            ))
            .unwrap();
            held_tx.send(()).unwrap();
            // Bounds a hang: the test lets go long before.
            let _ = release_rx.recv_timeout(Duration::from_secs(60));
            s.batch("COMMIT").unwrap();
        });
        held_rx.recv_timeout(Duration::from_secs(30)).unwrap();
        LockHolder {
            release: Some(release),
            thread: Some(thread),
        }
    }
}

impl Drop for LockHolder {
    fn drop(&mut self) {
        drop(self.release.take());
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Wait (bounded) until `f` holds.
async fn until(what: &str, f: impl Fn() -> bool) {
    for _ in 0..3000 {
        if f() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    panic!("{what}: not within 15 s");
}

type Answer = tokio::task::JoinHandle<Result<Vec<AcceptedEvent>, StoreError>>;

/// Queue `reqs` as one group behind a first write that waits for the lock
/// held by another session: the answers, in order.
async fn one_group(store: &Store, url: &str, reqs: Vec<EventsAcceptRequest>) -> Vec<Answer> {
    let holder = LockHolder::hold(url);
    let queued = || store.write_queue().0;
    let taken = store.writer_counters().1;
    let first = {
        let store = store.clone();
        tokio::spawn(async move {
            let plug = format!("plug-{}", storaged::util::now_ms());
            store.events_accept(req(vec![ev(&plug, 0, &[])])).await
        })
    };
    // The writer took the first write: it waits for the lock.
    until("the writer takes the first write", || {
        store.writer_counters().1 > taken && queued() == 0
    })
    .await;
    let mut answers = Vec::new();
    for (i, r) in reqs.into_iter().enumerate() {
        let store = store.clone();
        answers.push(tokio::spawn(async move {
            store.events_accept(r).await.map(|a| a.events)
        }));
        until("the write is queued", || queued() == i + 1).await;
    }
    drop(holder);
    first.await.unwrap().unwrap();
    answers
}

async fn count(store: &Store, table: &'static str) -> i64 {
    store
        .read(move |c| Ok(c.query_row(&format!("SELECT count(*) FROM {table}"), [], |r| r.get(0))?))
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_group_of_deliveries_is_inserted_ahead_as_one_write_after_another_would() {
    let b = Backend::Postgres;
    if !b.ready("a_group_of_deliveries_is_inserted_ahead_as_one_write_after_another_would") {
        return;
    }
    let url = b.url("ahead").unwrap();
    let dir = std::env::temp_dir().join(format!("oc-store-ahead-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let target = StorageTarget::Postgres(Box::new(PgTarget::parse(&url).unwrap()));
    let store = Store::open_with(&dir, Limits::default(), &target).unwrap();
    let kept = store
        .events_accept(req(vec![ev("kept", 1, &[])]))
        .await
        .unwrap()
        .events[0]
        .clone();

    // A group of new deliveries, one redelivered in the group, a batch of two
    // and a redelivery of an event of an earlier group.
    let stats = store.writer_stats();
    let (groups_before, writes_before) = store.writer_counters();
    let trips_before = stats.round_trips.load(Ordering::Relaxed);
    let mut reqs: Vec<EventsAcceptRequest> = (0..30)
        .map(|i| {
            let k = format!("k{i}");
            req(vec![ev(&format!("d{i}"), i, &[&k, "shared", "shared"])])
        })
        .collect();
    reqs.push(req(vec![ev("d5", 5, &["k5", "shared", "shared"])]));
    reqs.push(req(vec![ev("e1", 1, &[]), ev("e2", 2, &[])]));
    reqs.push(req(vec![ev("kept", 1, &[])]));
    let answers = one_group(&store, &url, reqs).await;
    let mut got = Vec::new();
    for a in answers {
        got.push(a.await.unwrap().unwrap());
    }
    let (groups, writes) = store.writer_counters();
    let trips = stats.round_trips.load(Ordering::Relaxed) - trips_before;
    assert_eq!(
        (groups - groups_before, writes - writes_before),
        (2, 34),
        "the first write alone, then the 33 queued behind it as one group"
    );
    // The first write: begin, its statement ahead, commit. The group: begin,
    // the statement ahead, the redelivery in the group (the insert, compiled
    // on first use, and the lookup of the kept event, compiled), the
    // redelivery of the kept event (the insert and the lookup), commit.
    println!("round trips for the two groups: {trips}");
    assert!(
        trips <= 3 + 10,
        "{trips} round trips for 34 writes in 2 groups"
    );
    for (i, a) in got.iter().take(30).enumerate() {
        assert_eq!(a.len(), 1);
        assert!(a[0].added, "d{i} is new");
        if i > 0 {
            assert!(
                a[0].seq > got[i - 1][0].seq,
                "seq follows the writes' order"
            );
        }
    }
    let again = &got[30][0];
    assert_eq!(
        (again.id.as_str(), again.seq, again.added),
        (got[5][0].id.as_str(), got[5][0].seq, false),
        "a delivery redelivered in its own group is that event"
    );
    let pair = &got[31];
    assert!(pair[0].added && pair[1].added);
    assert!(got[29][0].seq < pair[0].seq && pair[0].seq < pair[1].seq);
    let replay = &got[32][0];
    assert_eq!(
        (replay.id.as_str(), replay.seq, replay.added),
        (kept.id.as_str(), kept.seq, false)
    );
    // kept, the first write, 30 deliveries and the pair.
    assert_eq!(count(&store, "events").await, 34);
    assert_eq!(count(&store, "unrouted").await, 34);
    assert_eq!(count(&store, "event_keys").await, 60);

    // A group with a failing write: a changed envelope under a kept delivery
    // (conflict), alone and in a batch with a new delivery (all or nothing).
    // The group runs again, each write alone, and only those fail.
    let reqs = vec![
        req(vec![ev("f0", 0, &["kf"])]),
        req(vec![ev("d7", 700, &[])]),
        req(vec![ev("f1", 1, &[])]),
        req(vec![ev("f2", 2, &[]), ev("d8", 800, &[])]),
        req(vec![ev("f3", 3, &[])]),
        req(vec![ev("f1", 1, &[])]),
    ];
    let answers = one_group(&store, &url, reqs).await;
    let mut got = Vec::new();
    for a in answers {
        got.push(a.await.unwrap());
    }
    let added = |i: usize| got[i].as_ref().unwrap()[0].clone();
    assert!(added(0).added && added(2).added && added(4).added);
    assert!(added(0).seq < added(2).seq && added(2).seq < added(4).seq);
    assert_eq!(
        (added(5).seq, added(5).added),
        (added(2).seq, false),
        "f1 again"
    );
    for i in [1, 3] {
        match &got[i] {
            Err(StoreError::Conflict(m)) => assert!(m.contains("different envelope"), "{m}"),
            other => panic!("write {i}: {other:?}"),
        }
    }
    // The first write, f0, f1, f3: nothing of the refused batch (f2).
    assert_eq!(count(&store, "events").await, 34 + 4);
    assert_eq!(count(&store, "unrouted").await, 34 + 4);
    assert_eq!(count(&store, "event_keys").await, 61);
    store.close();
    let _ = std::fs::remove_dir_all(&dir);
}
