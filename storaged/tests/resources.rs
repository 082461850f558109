//! Resource leases: upserted by (type, ref), paged with a (type, ref) cursor, filtered
//! by type and owner, dropped; and the owners' statuses from their Work.

#![allow(clippy::unwrap_used)]

mod work_common;

#[macro_use]
mod backend;
use backend::Backend;
use serde_json::json;
use storaged::resources::*;
use storaged::work::{AttemptSettleRequest, AttemptStartRequest, RouteDecideRequest};
use storaged::StoreError;
use work_common::*;

fn put(ty: &str, reference: &str, owner: &str) -> LeasePutRequest {
    req(json!({
        "type": ty, "ref": reference, "owner": owner, "scope_id": "s1", "binding": "b1",
        "mode": "work", "dir": format!("/var/lib/oc/ws/{ty}/{reference}"),
        "data": {"branch": "fix-12"}, "execution_id": "exe_1"
    }))
}

fn create(seq: i64) -> RouteDecideRequest {
    req(json!({
        "seq": seq, "scope_id": "s1",
        "records": [{"handler": "h", "binding": "b1", "matched": true}],
        "outcome": {"type": "create", "kind": "k", "binding": "b1"}
    }))
}

fn invalid<T: std::fmt::Debug>(r: Result<T, StoreError>) -> String {
    match r {
        Err(StoreError::Invalid(m)) => m,
        other => panic!("expected invalid, got {other:?}"),
    }
}

async fn leases(t: &TestStore) -> Vec<String> {
    t.rows("SELECT * FROM resource_leases ORDER BY 1, 2").await
}

async fn put_upserts_keeping_created_at_and_drop_forgets(b: Backend) {
    let t = TestStore::new(b, "lease-put");
    let s = &t.store;
    let a = s
        .resource_lease_put(put("git", "r1", "work_1"))
        .await
        .unwrap();
    assert!(a.created);
    let l = &a.lease;
    assert_eq!(
        (
            l.resource_type.as_str(),
            l.reference.as_str(),
            l.owner.as_str()
        ),
        ("git", "r1", "work_1")
    );
    assert_eq!(
        (l.mode.as_str(), l.dir.as_str()),
        ("work", "/var/lib/oc/ws/git/r1")
    );
    assert_eq!(l.data, json!({"branch": "fix-12"}));
    assert_eq!(l.execution_id, "exe_1");
    assert_eq!(l.created_at, l.updated_at);
    let wire = serde_json::to_value(l).unwrap();
    assert_eq!(
        (wire["type"].clone(), wire["ref"].clone()),
        (json!("git"), json!("r1"))
    );

    tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    let mut again = put("git", "r1", "work_2");
    again.dir = "/elsewhere".into();
    again.data = None;
    again.execution_id = None;
    let b = s.resource_lease_put(again).await.unwrap();
    assert!(!b.created);
    assert_eq!(b.lease.created_at, a.lease.created_at);
    assert!(b.lease.updated_at > a.lease.updated_at, "{b:?}");
    assert_eq!(
        (b.lease.owner.as_str(), b.lease.dir.as_str()),
        ("work_2", "/elsewhere")
    );
    assert!(b.lease.data.is_null());
    assert_eq!(b.lease.execution_id, "");
    // Null data and an empty execution ID are left out on the wire.
    let wire = serde_json::to_value(&b.lease).unwrap();
    assert!(
        wire.get("data").is_none() && wire.get("execution_id").is_none(),
        "{wire}"
    );
    assert_eq!(leases(&t).await.len(), 1);

    let d = s
        .resource_lease_drop(req(json!({"type": "git", "ref": "r1"})))
        .await
        .unwrap();
    assert!(d.dropped);
    let d = s
        .resource_lease_drop(req(json!({"type": "git", "ref": "r1"})))
        .await
        .unwrap();
    assert!(!d.dropped);
    assert!(leases(&t).await.is_empty());
    t.close();
}

async fn bounds_are_refused_and_write_nothing(b: Backend) {
    let t = TestStore::new(b, "lease-bounds");
    let s = &t.store;
    s.resource_lease_put(put("git", "r1", "work_1"))
        .await
        .unwrap();
    let before = leases(&t).await;

    let mut relative = put("git", "r2", "work_1");
    relative.dir = "ws/r2".into();
    let m = invalid(s.resource_lease_put(relative).await);
    assert!(m.contains("absolute"), "{m}");
    let mut empty = put("git", "r2", "work_1");
    empty.dir = String::new();
    invalid(s.resource_lease_put(empty).await);
    let mut long = put("git", "r2", "work_1");
    long.dir = format!("/{}", "d".repeat(4096));
    let m = invalid(s.resource_lease_put(long).await);
    assert!(m.contains("max_dir_bytes"), "{m}");
    let mut big = put("git", "r2", "work_1");
    big.data = Some(json!("x".repeat(16 * 1024)));
    let m = invalid(s.resource_lease_put(big).await);
    assert!(m.contains("max_lease_data_bytes"), "{m}");
    for field in [
        "type",
        "ref",
        "owner",
        "scope_id",
        "binding",
        "mode",
        "execution_id",
    ] {
        let mut v = serde_json::to_value(put("git", "r2", "work_1")).unwrap();
        v[field] = json!("n".repeat(513));
        let m = invalid(s.resource_lease_put(req(v)).await);
        assert!(m.contains(field) && m.contains("max_key_bytes"), "{m}");
    }
    for field in ["type", "ref", "owner"] {
        let mut v = serde_json::to_value(put("git", "r2", "work_1")).unwrap();
        v[field] = json!("");
        let m = invalid(s.resource_lease_put(req(v)).await);
        assert!(m.contains("required"), "{m}");
    }
    let m = invalid(s.resource_lease_put(put("g\u{0}t", "r2", "work_1")).await);
    assert!(m.contains("NUL"), "{m}");
    // Data just within the bound is kept.
    let mut fits = put("git", "r3", "work_1");
    fits.data = Some(json!("x".repeat(16 * 1024 - 2)));
    s.resource_lease_put(fits).await.unwrap();
    s.resource_lease_drop(req(json!({"type": "git", "ref": "r3"})))
        .await
        .unwrap();
    assert_eq!(leases(&t).await, before);

    let m = invalid(s.resource_leases(req(json!({"limit": 1001}))).await);
    assert!(m.contains("max_page"), "{m}");
    let m = invalid(s.resource_leases(req(json!({"after": "git/r1"}))).await);
    assert!(m.contains("cursor"), "{m}");
    invalid(
        s.resource_lease_drop(req(json!({"type": "git", "ref": ""})))
            .await,
    );
    t.close();
}

async fn pages_by_type_and_ref_with_the_cursor_and_filters(b: Backend) {
    let t = TestStore::new(b, "lease-page");
    let s = &t.store;
    // Two types, refs with a slash, three owners.
    let mut all = Vec::new();
    for ty in ["git", "gix"] {
        for i in 0..7 {
            let reference = format!("r/{i:02}");
            let owner = format!("work_{}", i % 3);
            s.resource_lease_put(put(ty, &reference, &owner))
                .await
                .unwrap();
            all.push((ty.to_string(), reference));
        }
    }
    let mut seen = Vec::new();
    let mut after = String::new();
    let mut pages = 0;
    loop {
        let page = s
            .resource_leases(req(json!({"after": after, "limit": 3})))
            .await
            .unwrap();
        pages += 1;
        seen.extend(
            page.leases
                .iter()
                .map(|l| (l.resource_type.clone(), l.reference.clone())),
        );
        if page.next.is_empty() {
            break;
        }
        assert_eq!(page.leases.len(), 3);
        after = page.next;
    }
    assert_eq!(seen, all);
    assert_eq!(pages, 5);

    // By type, paged.
    let first = s
        .resource_leases(req(json!({"type": "gix", "limit": 4})))
        .await
        .unwrap();
    assert_eq!(first.leases.len(), 4);
    assert_eq!(first.next, "gix\u{0}r/03");
    let rest = s
        .resource_leases(req(json!({"type": "gix", "limit": 4, "after": first.next})))
        .await
        .unwrap();
    assert_eq!(
        rest.leases
            .iter()
            .map(|l| l.reference.as_str())
            .collect::<Vec<_>>(),
        ["r/04", "r/05", "r/06"]
    );
    assert!(rest.next.is_empty());

    // By owner, and by owner and type.
    let mine = s
        .resource_leases(req(json!({"owner": "work_1"})))
        .await
        .unwrap();
    assert_eq!(
        mine.leases
            .iter()
            .map(|l| format!("{}:{}", l.resource_type, l.reference))
            .collect::<Vec<_>>(),
        ["git:r/01", "git:r/04", "gix:r/01", "gix:r/04"]
    );
    let mine = s
        .resource_leases(req(json!({"owner": "work_1", "type": "gix", "limit": 1})))
        .await
        .unwrap();
    assert_eq!(mine.leases[0].reference, "r/01");
    let mine = s
        .resource_leases(req(
            json!({"owner": "work_1", "type": "gix", "after": mine.next}),
        ))
        .await
        .unwrap();
    assert_eq!(mine.leases.len(), 1);
    assert_eq!(mine.leases[0].reference, "r/04");
    assert!(s
        .resource_leases(req(json!({"owner": "work_9"})))
        .await
        .unwrap()
        .leases
        .is_empty());
    t.close();
}

async fn owner_status_answers_open_closed_and_unknown_in_order(b: Backend) {
    let t = TestStore::new(b, "owner-status");
    let s = &t.store;
    for seq in 1..=3 {
        t.event(seq, "s1", "x", &[]).await;
    }
    let mut works = Vec::new();
    for seq in 1..=3 {
        works.push(s.route_decide(create(seq)).await.unwrap().work_id.unwrap());
    }
    let (open, done, cancelled) = (&works[0], &works[1], &works[2]);
    // One completed through an attempt, one cancelled, one left pending.
    let start: AttemptStartRequest = req(json!({"work_id": done, "executor": "e",
        "binding": "b1", "lease_owner": "sched-1", "lease_ttl_ms": 60_000}));
    let a = s.attempt_start(start).await.unwrap();
    let settle: AttemptSettleRequest =
        req(json!({"execution_id": a.execution_id, "epoch": a.epoch, "outcome": "completed"}));
    assert_eq!(
        s.attempt_settle(settle).await.unwrap().work_state,
        "completed"
    );
    s.work_cancel(req(json!({"work_id": cancelled, "reason": "operator"})))
        .await
        .unwrap();
    // A lease of a Work that goes on: nothing about Work touches it.
    s.resource_lease_put(put("git", "r1", cancelled))
        .await
        .unwrap();

    let asked = vec![
        cancelled.clone(),
        "work_nope".to_string(),
        open.clone(),
        done.clone(),
        open.clone(),
    ];
    let r = s.owner_status(req(json!({"owners": asked}))).await.unwrap();
    let got: Vec<(String, String)> = r
        .owners
        .iter()
        .map(|o| (o.owner.clone(), o.status.clone()))
        .collect();
    assert_eq!(
        got,
        [
            (cancelled.clone(), "closed".to_string()),
            ("work_nope".to_string(), "unknown".to_string()),
            (open.clone(), "open".to_string()),
            (done.clone(), "closed".to_string()),
            (open.clone(), "open".to_string()),
        ]
    );
    let updated = |id: &str| {
        let id = id.to_string();
        async move {
            s.work_get(req(json!({"id": id})))
                .await
                .unwrap()
                .work
                .updated_at
        }
    };
    assert_eq!(r.owners[0].closed_at, updated(cancelled).await);
    assert_eq!(r.owners[3].closed_at, updated(done).await);
    assert!(r.owners[0].closed_at.ends_with('Z'));
    assert_eq!(r.owners[1].closed_at, "");
    assert_eq!(r.owners[2].closed_at, "");
    // closed_at is left out of an open or unknown owner's answer on the wire.
    let wire = serde_json::to_value(&r.owners[1]).unwrap();
    assert_eq!(wire, json!({"owner": "work_nope", "status": "unknown"}));
    assert_eq!(
        s.resource_leases(req(json!({"owner": cancelled})))
            .await
            .unwrap()
            .leases
            .len(),
        1
    );

    // At most 500 owners per call; each a name.
    let many: Vec<String> = (0..501).map(|i| format!("work_{i}")).collect();
    let m = invalid(s.owner_status(req(json!({"owners": many}))).await);
    assert!(m.contains("max_owner_status (500)"), "{m}");
    let just: Vec<String> = (0..500).map(|i| format!("work_{i}")).collect();
    assert_eq!(
        s.owner_status(req(json!({"owners": just})))
            .await
            .unwrap()
            .owners
            .len(),
        500
    );
    invalid(s.owner_status(req(json!({"owners": [""]}))).await);
    assert!(s
        .owner_status(req(json!({"owners": []})))
        .await
        .unwrap()
        .owners
        .is_empty());
    t.close();
}

async fn the_methods_are_on_the_bus_with_strict_params(b: Backend) {
    let t = TestStore::new(b, "lease-bus");
    let s = &t.store;
    let raw =
        |v: serde_json::Value| serde_json::value::RawValue::from_string(v.to_string()).unwrap();
    let call = |method: &'static str, v: serde_json::Value| async move {
        storaged::service::call(s, method, &raw(v)).await
    };
    let methods = call("store.methods", json!({})).await.unwrap();
    for m in [
        "store.resource_lease_put",
        "store.resource_leases",
        "store.resource_lease_drop",
        "store.owner_status",
    ] {
        assert!(
            methods["methods"].as_array().unwrap().contains(&json!(m)),
            "{m}"
        );
    }
    assert_eq!(METHODS.len(), 4);
    let v = call(
        "store.resource_lease_put",
        json!({"type": "git", "ref": "r1", "owner": "work_1", "scope_id": "s1",
               "binding": "b1", "mode": "shared", "dir": "/ws/r1"}),
    )
    .await
    .unwrap();
    assert_eq!(v["created"], json!(true));
    assert_eq!(v["lease"]["type"], json!("git"));
    assert_eq!(v["lease"]["ref"], json!("r1"));
    let v = call("store.resource_leases", json!({"type": "git"}))
        .await
        .unwrap();
    assert_eq!(v["leases"].as_array().unwrap().len(), 1);
    assert_eq!(v["next"], json!(""));
    let v = call("store.owner_status", json!({"owners": ["work_1"]}))
        .await
        .unwrap();
    assert_eq!(
        v,
        json!({"owners": [{"owner": "work_1", "status": "unknown"}]})
    );
    let stats = call("store.stats", json!({})).await.unwrap();
    assert_eq!(stats["resource_leases"], json!(1));
    let v = call(
        "store.resource_lease_drop",
        json!({"type": "git", "ref": "r1"}),
    )
    .await
    .unwrap();
    assert_eq!(v, json!({"dropped": true}));
    for (method, params) in [
        (
            "store.resource_lease_put",
            json!({"type": "git", "ref": "r", "owner": "o",
            "dir": "/d", "bogus": 1}),
        ),
        ("store.resource_leases", json!({"bogus": 1})),
        (
            "store.resource_lease_drop",
            json!({"type": "git", "ref": "r", "bogus": 1}),
        ),
        ("store.owner_status", json!({"owners": [], "bogus": 1})),
    ] {
        let e = call(method, params).await.unwrap_err();
        assert!(
            e.to_string()
                .contains(&format!("invalid params for {method}")),
            "{e}"
        );
    }
    t.close();
}

on_both!(
    put_upserts_keeping_created_at_and_drop_forgets,
    bounds_are_refused_and_write_nothing,
    pages_by_type_and_ref_with_the_cursor_and_filters,
    owner_status_answers_open_closed_and_unknown_in_order,
    the_methods_are_on_the_bus_with_strict_params,
);
