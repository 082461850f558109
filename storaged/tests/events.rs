//! The event log: accepting (identity, redelivery, conflicts, authority, causal
//! bounds), derived events with KV records, checkpoints and the reads, against a
//! real store.

#![allow(clippy::unwrap_used)]

#[macro_use]
mod backend;
use backend::Backend;
use serde_json::{json, Value};
use storaged::events::{
    emitted_event_id, CheckpointGetRequest, CheckpointSetRequest, EventAcceptDerivedRequest,
    EventGetRequest, EventInput, EventsAcceptRequest, EventsListRequest, SequenceRequest,
    WorkEventsRequest,
};
use storaged::kv::{KvCheckItem, KvGetRequest, KvPutItem};
use storaged::{util, Limits, Store, StoreError};

struct Fixture {
    store: Store,
    dir: std::path::PathBuf,
}

impl Fixture {
    fn new(b: Backend, name: &str, limits: Limits) -> Fixture {
        let dir = std::env::temp_dir().join(format!(
            "oc-store-events-{name}-{}-{}",
            std::process::id(),
            util::now_ms()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        let store = b.open(&dir, limits);
        Fixture { store, dir }
    }

    async fn count(&self, table: &'static str) -> i64 {
        self.store
            .read(move |c| {
                Ok(c.query_row(&format!("SELECT count(*) FROM {table}"), [], |r| r.get(0))?)
            })
            .await
            .unwrap()
    }

    async fn accept(
        &self,
        events: Vec<EventInput>,
    ) -> Result<storaged::events::EventsAcceptResponse, StoreError> {
        self.store
            .events_accept(EventsAcceptRequest {
                events,
                owner: None,
                families: None,
                scopes: None,
            })
            .await
    }

    async fn get(&self, id: &str) -> storaged::events::StoredEvent {
        self.store
            .event(EventGetRequest {
                id: id.into(),
                scopes: None,
            })
            .await
            .unwrap()
            .event
    }

    fn close(self) {
        let dir = self.dir.clone();
        self.store.close();
        let _ = std::fs::remove_dir_all(dir);
    }
}

fn ev(scope: &str, delivery: Option<&str>) -> EventInput {
    EventInput {
        scope_id: scope.into(),
        event_type: "github.issue".into(),
        source: "github".into(),
        delivery_id: delivery.map(Into::into),
        payload: json!({"n": delivery}),
        keys: vec![],
        ..Default::default()
    }
}

fn derived(parent: &str, delivery: &str) -> EventInput {
    EventInput {
        event_type: "notes.note".into(),
        source: "notes".into(),
        delivery_id: Some(delivery.into()),
        parent_id: Some(parent.into()),
        payload: json!({"d": delivery}),
        ..Default::default()
    }
}

fn derived_req(event: EventInput) -> EventAcceptDerivedRequest {
    EventAcceptDerivedRequest {
        owner: Some("notes".into()),
        families: Some(vec!["notes.note".into()]),
        scopes: None,
        event,
        checks: vec![],
        puts: vec![],
        deletes: vec![],
    }
}

async fn a_batch_is_accepted_with_ids_roots_and_keys(b: Backend) {
    let f = Fixture::new(b, "accept", Limits::default());
    let mut a = ev("s1", Some("d1"));
    a.keys = vec!["github:acme/api#1".into(), "k2".into()];
    a.schema = Some("github.issue.v1".into());
    a.occurred_at = Some("2026-01-02T03:04:05Z".into());
    a.execution_id = Some("exe_1".into());
    let mut b = ev("s1", None);
    b.item = Some("issue-7".into());
    b.item_version = Some("rev3".into());
    let out = f.accept(vec![a, b]).await.unwrap();
    assert!(out.added_any);
    assert_eq!(out.events.len(), 2);
    assert!(out.events.iter().all(|e| e.added));
    assert!(out.events[0].seq < out.events[1].seq);
    // Deterministic ID for a delivery, random otherwise.
    assert_eq!(out.events[0].id, emitted_event_id("github", "d1"));
    assert!(out.events[0].id.starts_with("evt_") && out.events[0].id.len() == 36);
    assert!(out.events[1].id.starts_with("evt_") && out.events[1].id.len() == 36);
    assert_ne!(out.events[1].id, out.events[0].id);

    let e = f.get(&out.events[0].id).await;
    assert_eq!(e.seq, out.events[0].seq);
    assert_eq!(e.scope_id, "s1");
    assert_eq!(e.event_type, "github.issue");
    assert_eq!(e.source, "github");
    assert_eq!(e.delivery_id.as_deref(), Some("d1"));
    assert_eq!(e.schema.as_deref(), Some("github.issue.v1"));
    assert_eq!(e.payload, json!({"n": "d1"}));
    assert_eq!(e.keys, vec!["github:acme/api#1", "k2"]);
    assert_eq!(e.root_id, e.id);
    assert_eq!(e.depth, 0);
    assert_eq!(e.parent_id, None);
    assert_eq!(e.occurred_at.as_deref(), Some("2026-01-02T03:04:05Z"));
    assert_eq!(e.execution_id.as_deref(), Some("exe_1"));
    assert!(e.accepted_at.ends_with('Z'));
    assert!(e.signature.starts_with("sha256:"));
    let encoded = serde_json::to_value(&e).unwrap();
    assert_eq!(encoded["type"], json!("github.issue"));
    assert_eq!(encoded["scope_id"], json!("s1"));
    let b = f.get(&out.events[1].id).await;
    assert_eq!(b.item.as_deref(), Some("issue-7"));
    assert_eq!(b.item_version.as_deref(), Some("rev3"));
    assert_eq!(f.count("event_keys").await, 2);
    // The signature is the digest of the canonical envelope.
    let want = util::digest(
        util::canonical(&json!({
            "scope_id": "s1", "type": "github.issue", "source": "github",
            "delivery_id": "d1", "item": null, "item_version": null,
            "schema": "github.issue.v1", "payload": {"n": "d1"},
            "keys": ["github:acme/api#1", "k2"], "parent_id": null,
        }))
        .as_bytes(),
    );
    assert_eq!(e.signature, want);
    // An empty batch adds nothing.
    let out = f.accept(vec![]).await.unwrap();
    assert!(!out.added_any && out.events.is_empty());
    f.close();
}

async fn a_redelivery_is_the_same_event_and_a_changed_envelope_conflicts(b: Backend) {
    let f = Fixture::new(b, "redeliver", Limits::default());
    let mut obs = ev("s1", None);
    obs.item = Some("item".into());
    obs.item_version = Some("v1".into());
    let first = f
        .accept(vec![ev("s1", Some("d1")), obs.clone()])
        .await
        .unwrap();
    // Redelivered: the same IDs and sequences, nothing added.
    let again = f
        .accept(vec![ev("s1", Some("d1")), obs.clone()])
        .await
        .unwrap();
    assert!(!again.added_any);
    for (a, b) in first.events.iter().zip(&again.events) {
        assert_eq!((&a.id, a.seq, false), (&b.id, b.seq, b.added));
    }
    assert_eq!(f.count("events").await, 2);
    // A redelivery in a batch with a new event: only the new one is added.
    let mixed = f
        .accept(vec![ev("s1", Some("d1")), ev("s1", Some("d2"))])
        .await
        .unwrap();
    assert!(mixed.added_any);
    assert!(!mixed.events[0].added && mixed.events[1].added);
    // The same identity twice in one batch: one event.
    let twice = f
        .accept(vec![ev("s1", Some("d3")), ev("s1", Some("d3"))])
        .await
        .unwrap();
    assert!(twice.events[0].added && !twice.events[1].added);
    assert_eq!(twice.events[0].id, twice.events[1].id);
    let n = f.count("events").await;
    assert_eq!(n, 4);

    // Changed envelopes, each beside a new event: conflict, nothing written.
    let mut changed_payload = ev("s1", Some("d1"));
    changed_payload.payload = json!({"n": "changed"});
    let mut changed_keys = ev("s1", Some("d1"));
    changed_keys.keys = vec!["new-key".into()];
    let changed_scope = ev("s2", Some("d1"));
    let mut changed_obs = obs.clone();
    changed_obs.payload = json!({"other": true});
    let mut changed_schema = ev("s1", Some("d1"));
    changed_schema.schema = Some("github.issue.v2".into());
    for (what, bad) in [
        ("payload", changed_payload),
        ("keys", changed_keys),
        ("scope", changed_scope),
        ("observation", changed_obs),
        ("schema", changed_schema),
    ] {
        let e = f
            .accept(vec![ev("s1", Some("fresh")), bad])
            .await
            .unwrap_err();
        assert!(
            matches!(&e, StoreError::Conflict(m) if m.contains("events[1]")),
            "{what}: {e:?}"
        );
        assert_eq!(f.count("events").await, n, "{what}");
        assert_eq!(f.count("event_keys").await, 0, "{what}");
    }
    // An observation naming a delivery is that delivery, whichever comes first.
    let mut named = ev("s1", Some("d1"));
    named.item = Some("d1".into());
    named.item_version = Some("1".into());
    let out = f.accept(vec![named.clone()]).await.unwrap();
    assert!(
        !out.added_any,
        "the observation of a kept delivery adds nothing"
    );
    let mut first_named = ev("s1", Some("d9"));
    first_named.item = Some("d9".into());
    first_named.item_version = Some("1".into());
    assert!(f.accept(vec![first_named.clone()]).await.unwrap().added_any);
    let live = f.accept(vec![ev("s1", Some("d9"))]).await.unwrap();
    assert!(
        !live.added_any,
        "the delivery of a kept observation adds nothing"
    );
    assert!(!f.accept(vec![first_named]).await.unwrap().added_any);
    // The same delivery at another source is another event.
    let mut other = ev("s1", Some("d1"));
    other.source = "github/app".into();
    let out = f.accept(vec![other]).await.unwrap();
    assert!(out.events[0].added);
    assert_eq!(out.events[0].id, emitted_event_id("github/app", "d1"));
    // occurred_at and execution_id are not part of the envelope's identity.
    let mut later = ev("s1", Some("d1"));
    later.occurred_at = Some("2030-01-01T00:00:00Z".into());
    let out = f.accept(vec![later]).await.unwrap();
    assert!(!out.events[0].added);
    f.close();
}

async fn refusals_name_their_limit_and_write_nothing(b: Backend) {
    let limits = Limits {
        max_batch: 3,
        max_payload_bytes: 32,
        max_key_bytes: 8,
        ..Limits::default()
    };
    let f = Fixture::new(b, "limits", limits);
    let e = f
        .accept(vec![
            ev("s", None),
            ev("s", None),
            ev("s", None),
            ev("s", None),
        ])
        .await
        .unwrap_err();
    assert!(
        matches!(&e, StoreError::Invalid(m) if m.contains("max_batch (3)")),
        "{e:?}"
    );
    let mut big = ev("s", None);
    big.payload = json!({"text": "x".repeat(64)});
    let e = f.accept(vec![ev("s", None), big]).await.unwrap_err();
    assert!(
        matches!(&e, StoreError::Invalid(m) if m.contains("max_payload_bytes (32)")),
        "{e:?}"
    );
    // The batch's first refusal is the one answered, in the batch's order: a
    // derived event's missing parent (found in the write) before a later root
    // event's payload over its bound (found before the write).
    let mut big = ev("s", None);
    big.payload = json!({"text": "x".repeat(64)});
    let e = f
        .accept(vec![derived("evt_gone", "d-0"), big])
        .await
        .unwrap_err();
    assert!(
        matches!(&e, StoreError::NotFound(m) if m.starts_with("events[0]: parent event evt_gone")),
        "{e:?}"
    );
    let mut long_key = ev("s", None);
    long_key.keys = vec!["123456789".into()];
    let e = f.accept(vec![ev("s", None), long_key]).await.unwrap_err();
    assert!(
        matches!(&e, StoreError::Invalid(m) if m.contains("max_key_bytes (8)")),
        "{e:?}"
    );
    let mut many_keys = ev("s", None);
    many_keys.keys = (0..300).map(|i| format!("k{i}")).collect();
    let e = f.accept(vec![many_keys]).await.unwrap_err();
    assert!(
        matches!(&e, StoreError::Invalid(m) if m.contains("MAX_KEYS_PER_EVENT")),
        "{e:?}"
    );
    let mut long_type = ev("s", None);
    long_type.event_type = "t".repeat(2000);
    let e = f.accept(vec![long_type]).await.unwrap_err();
    assert!(
        matches!(&e, StoreError::Invalid(m) if m.contains("MAX_FIELD_BYTES")),
        "{e:?}"
    );
    let mut half_obs = ev("s", None);
    half_obs.item = Some("item".into());
    let e = f.accept(vec![half_obs]).await.unwrap_err();
    assert!(matches!(e, StoreError::Invalid(_)), "{e:?}");
    let mut no_type = ev("s", None);
    no_type.event_type = String::new();
    assert!(matches!(
        f.accept(vec![no_type]).await.unwrap_err(),
        StoreError::Invalid(_)
    ));
    let mut no_source = ev("s", None);
    no_source.source = String::new();
    assert!(matches!(
        f.accept(vec![no_source]).await.unwrap_err(),
        StoreError::Invalid(_)
    ));
    assert_eq!(f.count("events").await, 0);
    f.close();
}

async fn an_owner_accepts_only_its_families_and_sources(b: Backend) {
    let f = Fixture::new(b, "owner", Limits::default());
    let s = &f.store;
    let req = |events: Vec<EventInput>, families: Option<Vec<&str>>| EventsAcceptRequest {
        events,
        owner: Some("github".into()),
        families: families.map(|v| v.into_iter().map(String::from).collect()),
        scopes: None,
    };
    let fams = Some(vec!["github.issue", "other.thing"]);
    // Allowed: a declared family, own source (the name, or name/…).
    let mut sub = ev("s1", Some("x2"));
    sub.source = "github/app".into();
    let out = s
        .events_accept(req(vec![ev("s1", Some("x1")), sub], fams.clone()))
        .await
        .unwrap();
    assert!(out.events.iter().all(|e| e.added));
    let n = f.count("events").await;

    let mut undeclared = ev("s1", Some("y1"));
    undeclared.event_type = "github.pull".into();
    let e = s
        .events_accept(req(vec![ev("s1", Some("y0")), undeclared], fams.clone()))
        .await
        .unwrap_err();
    assert!(matches!(e, StoreError::Undeclared(_)), "{e:?}");
    // Declared, but not under the owner's name.
    let mut foreign_type = ev("s1", Some("y2"));
    foreign_type.event_type = "other.thing".into();
    let e = s
        .events_accept(req(vec![ev("s1", Some("y0")), foreign_type], fams.clone()))
        .await
        .unwrap_err();
    assert!(matches!(e, StoreError::Unauthorized(_)), "{e:?}");
    for source in ["slack", "githubx", "github/", "github.app"] {
        let mut foreign_source = ev("s1", Some("y3"));
        foreign_source.source = source.into();
        let e = s
            .events_accept(req(
                vec![ev("s1", Some("y0")), foreign_source],
                fams.clone(),
            ))
            .await
            .unwrap_err();
        assert!(matches!(e, StoreError::Unauthorized(_)), "{source}: {e:?}");
    }
    // No families: nothing is declared.
    let e = s
        .events_accept(req(vec![ev("s1", Some("y4"))], None))
        .await
        .unwrap_err();
    assert!(matches!(e, StoreError::Undeclared(_)), "{e:?}");
    // A scope list the root's scope is not in.
    let mut r = req(vec![ev("s1", Some("y5"))], fams.clone());
    r.scopes = Some(vec!["s2".into()]);
    let e = s.events_accept(r).await.unwrap_err();
    assert!(matches!(e, StoreError::Unauthorized(_)), "{e:?}");
    assert_eq!(f.count("events").await, n);
    f.close();
}

async fn derived_events_take_the_parents_scope_root_and_depth(b: Backend) {
    let limits = Limits {
        max_causal_depth: 2,
        ..Limits::default()
    };
    let f = Fixture::new(b, "derive", limits);
    let s = &f.store;
    let root = f.accept(vec![ev("s1", Some("r"))]).await.unwrap().events[0].clone();
    let other = f.accept(vec![ev("s2", Some("o"))]).await.unwrap().events[0].clone();

    // Through events_accept (a trusted daemon), with an empty scope.
    let mut child = ev("", Some("c"));
    child.parent_id = Some(root.id.clone());
    let c = f.accept(vec![child]).await.unwrap().events[0].clone();
    let got = f.get(&c.id).await;
    assert_eq!(
        (got.scope_id.as_str(), got.root_id.as_str(), got.depth),
        ("s1", root.id.as_str(), 1)
    );

    // Through event_accept_derived.
    let g = s
        .event_accept_derived(derived_req(derived(&c.id, "g")))
        .await
        .unwrap();
    assert!(g.added);
    assert_eq!(g.id, emitted_event_id("notes", "g"));
    let got = f.get(&g.id).await;
    assert_eq!(
        (got.scope_id.as_str(), got.root_id.as_str(), got.depth),
        ("s1", root.id.as_str(), 2)
    );
    assert_eq!(got.parent_id.as_deref(), Some(c.id.as_str()));
    // Again: the same event.
    let again = s
        .event_accept_derived(derived_req(derived(&c.id, "g")))
        .await
        .unwrap();
    assert_eq!(
        (again.id.as_str(), again.seq, again.added),
        (g.id.as_str(), g.seq, false)
    );
    let n = f.count("events").await;

    // Depth 3 is over max_causal_depth (2).
    let e = s
        .event_accept_derived(derived_req(derived(&g.id, "too-deep")))
        .await
        .unwrap_err();
    assert!(
        matches!(&e, StoreError::CausalLimit(m) if m.contains("max_causal_depth (2)")),
        "{e:?}"
    );
    let mut deep = ev("", Some("too-deep-2"));
    deep.parent_id = Some(g.id.clone());
    let e = f
        .accept(vec![ev("s1", Some("new")), deep])
        .await
        .unwrap_err();
    assert!(matches!(e, StoreError::CausalLimit(_)), "{e:?}");
    // A parent of another scope, or none: not_found, whichever way it is asked.
    let mut wrong_scope = derived(&other.id, "w1");
    wrong_scope.scope_id = "s1".into();
    let e = s
        .event_accept_derived(derived_req(wrong_scope))
        .await
        .unwrap_err();
    assert!(matches!(e, StoreError::NotFound(_)), "{e:?}");
    let mut r = derived_req(derived(&other.id, "w2"));
    r.scopes = Some(vec!["s1".into()]);
    let e = s.event_accept_derived(r).await.unwrap_err();
    assert!(matches!(e, StoreError::NotFound(_)), "{e:?}");
    let e = s
        .event_accept_derived(derived_req(derived("evt_missing", "w3")))
        .await
        .unwrap_err();
    assert!(matches!(e, StoreError::NotFound(_)), "{e:?}");
    // event.accept only derives.
    let mut rootless = derived(&root.id, "w4");
    rootless.parent_id = None;
    rootless.scope_id = "s1".into();
    let e = s
        .event_accept_derived(derived_req(rootless))
        .await
        .unwrap_err();
    assert!(matches!(e, StoreError::Invalid(_)), "{e:?}");
    // Owner checks apply.
    let mut undeclared = derived(&root.id, "w5");
    undeclared.event_type = "notes.other".into();
    let e = s
        .event_accept_derived(derived_req(undeclared))
        .await
        .unwrap_err();
    assert!(matches!(e, StoreError::Undeclared(_)), "{e:?}");
    let mut foreign = derived(&root.id, "w6");
    foreign.source = "github".into();
    let e = s
        .event_accept_derived(derived_req(foreign))
        .await
        .unwrap_err();
    assert!(matches!(e, StoreError::Unauthorized(_)), "{e:?}");
    assert_eq!(f.count("events").await, n);
    f.close();
}

async fn a_chain_derives_at_most_its_per_minute_bound(b: Backend) {
    let limits = Limits {
        max_derived_per_minute: 3,
        ..Limits::default()
    };
    let f = Fixture::new(b, "rate", limits);
    let s = &f.store;
    let root = f.accept(vec![ev("s1", Some("r"))]).await.unwrap().events[0].clone();
    for i in 0..3 {
        s.event_accept_derived(derived_req(derived(&root.id, &format!("d{i}"))))
            .await
            .unwrap();
    }
    let e = s
        .event_accept_derived(derived_req(derived(&root.id, "d3")))
        .await
        .unwrap_err();
    assert!(
        matches!(&e, StoreError::CausalLimit(m) if m.contains("max_derived_per_minute (3)")),
        "{e:?}"
    );
    assert_eq!(f.count("events").await, 4);
    // A redelivery of one already accepted is still answered.
    let again = s
        .event_accept_derived(derived_req(derived(&root.id, "d1")))
        .await
        .unwrap();
    assert!(!again.added);
    // Another chain is not limited by this one.
    let root2 = f.accept(vec![ev("s1", Some("r2"))]).await.unwrap().events[0].clone();
    s.event_accept_derived(derived_req(derived(&root2.id, "e0")))
        .await
        .unwrap();
    f.close();
}

async fn a_derived_event_commits_with_its_records(b: Backend) {
    let f = Fixture::new(b, "records", Limits::default());
    let s = &f.store;
    let root = f.accept(vec![ev("s1", Some("r"))]).await.unwrap().events[0].clone();
    let kv_get = |key: &str| KvGetRequest {
        owner: "notes".into(),
        namespace: String::new(),
        key: key.into(),
    };
    let absent = |key: &str| KvCheckItem {
        namespace: String::new(),
        key: key.into(),
        version: None,
        absent: true,
    };
    let put = |key: &str, value: Value| KvPutItem {
        namespace: String::new(),
        key: key.into(),
        value,
    };
    let mut r = derived_req(derived(&root.id, "x"));
    r.checks = vec![absent("seen")];
    r.puts = vec![put("seen", json!("x"))];
    let x = s.event_accept_derived(r.clone()).await.unwrap();
    assert!(x.added);
    assert_eq!(
        s.kv_get(kv_get("seen")).await.unwrap().value,
        Some(json!("x"))
    );
    // A retry after success: the same event, its records not applied again (the
    // check, which no longer holds, is not asked either).
    s.kv_commit(storaged::commit::KvCommitRequest {
        owner: "notes".into(),
        families: None,
        scopes: None,
        checks: vec![],
        puts: vec![put("seen", json!("changed since"))],
        deletes: vec![],
        emissions: vec![],
    })
    .await
    .unwrap();
    let again = s.event_accept_derived(r).await.unwrap();
    assert_eq!((again.id, again.added), (x.id, false));
    assert_eq!(
        s.kv_get(kv_get("seen")).await.unwrap().value,
        Some(json!("changed since"))
    );

    // A failed check: no event, no record.
    let n = f.count("events").await;
    let mut r = derived_req(derived(&root.id, "y"));
    r.checks = vec![absent("seen")];
    r.puts = vec![put("other", json!(1))];
    let e = s.event_accept_derived(r).await.unwrap_err();
    assert!(
        matches!(&e, StoreError::Conflict(m) if m.contains("seen")),
        "{e:?}"
    );
    // A foreign namespace: no event.
    let mut r = derived_req(derived(&root.id, "z"));
    r.puts = vec![KvPutItem {
        namespace: "github".into(),
        key: "k".into(),
        value: json!(1),
    }];
    let e = s.event_accept_derived(r).await.unwrap_err();
    assert!(matches!(e, StoreError::Unauthorized(_)), "{e:?}");
    // Records without an owner.
    let mut r = derived_req(derived(&root.id, "z"));
    r.owner = None;
    r.puts = vec![put("k", json!(1))];
    let e = s.event_accept_derived(r).await.unwrap_err();
    assert!(matches!(e, StoreError::Invalid(_)), "{e:?}");
    assert_eq!(f.count("events").await, n);
    assert_eq!(s.kv_get(kv_get("other")).await.unwrap().value, None);
    f.close();
}

async fn checkpoints_move_under_their_precondition(b: Backend) {
    let f = Fixture::new(b, "checkpoint", Limits::default());
    let s = &f.store;
    let get = || CheckpointGetRequest {
        source: "github".into(),
    };
    let set = |cp: &str, expect: Option<&str>, expect_absent: bool| CheckpointSetRequest {
        source: "github".into(),
        checkpoint: cp.into(),
        generation: "g1".into(),
        expect: expect.map(Into::into),
        expect_absent,
    };
    let got = s.checkpoint_get(get()).await.unwrap();
    assert!(got.checkpoint.is_none() && got.generation.is_none());
    // Expecting one when none is stored.
    let e = s
        .checkpoint_set(set("c1", Some("c0"), false))
        .await
        .unwrap_err();
    assert!(matches!(e, StoreError::Conflict(_)), "{e:?}");
    assert!(s.checkpoint_get(get()).await.unwrap().checkpoint.is_none());
    let out = s.checkpoint_set(set("c1", None, true)).await.unwrap();
    assert_eq!(out.previous, None);
    let got = s.checkpoint_get(get()).await.unwrap();
    assert_eq!(got.checkpoint.as_deref(), Some("c1"));
    assert_eq!(got.generation.as_deref(), Some("g1"));
    // Expecting absence, or another checkpoint: conflict, unchanged.
    let e = s.checkpoint_set(set("c2", None, true)).await.unwrap_err();
    assert!(matches!(e, StoreError::Conflict(_)), "{e:?}");
    let e = s
        .checkpoint_set(set("c2", Some("c0"), false))
        .await
        .unwrap_err();
    assert!(matches!(e, StoreError::Conflict(_)), "{e:?}");
    assert_eq!(
        s.checkpoint_get(get()).await.unwrap().checkpoint.as_deref(),
        Some("c1")
    );
    let out = s
        .checkpoint_set(set("c2", Some("c1"), false))
        .await
        .unwrap();
    assert_eq!(out.previous.as_deref(), Some("c1"));
    // Unconditional.
    s.checkpoint_set(set("c3", None, false)).await.unwrap();
    assert_eq!(
        s.checkpoint_get(get()).await.unwrap().checkpoint.as_deref(),
        Some("c3")
    );
    // Both preconditions, or a checkpoint over max_value_bytes.
    let e = s
        .checkpoint_set(set("c4", Some("c3"), true))
        .await
        .unwrap_err();
    assert!(matches!(e, StoreError::Invalid(_)), "{e:?}");
    let e = s
        .checkpoint_set(set(&"x".repeat(2 * 1024 * 1024), None, false))
        .await
        .unwrap_err();
    assert!(
        matches!(&e, StoreError::Invalid(m) if m.contains("max_value_bytes")),
        "{e:?}"
    );
    assert_eq!(
        s.checkpoint_get(get()).await.unwrap().checkpoint.as_deref(),
        Some("c3")
    );
    // Other sources are separate.
    let other = s
        .checkpoint_get(CheckpointGetRequest {
            source: "slack".into(),
        })
        .await
        .unwrap();
    assert!(other.checkpoint.is_none());
    f.close();
}

async fn events_page_by_scope_without_short_pages(b: Backend) {
    let f = Fixture::new(b, "page", Limits::default());
    let s = &f.store;
    // a, then five b, a, b, a, three b, a, b: the `a` events are far apart.
    let layout = [
        "a", "b", "b", "b", "b", "b", "a", "b", "a", "b", "b", "b", "a", "b",
    ];
    let mut events = Vec::new();
    for (i, scope) in layout.iter().enumerate() {
        events.push(ev(scope, Some(&format!("p{i}"))));
    }
    let accepted = f.accept(events).await.unwrap().events;
    let a_seqs: Vec<i64> = layout
        .iter()
        .zip(&accepted)
        .filter(|(s, _)| **s == "a")
        .map(|(_, e)| e.seq)
        .collect();
    assert_eq!(a_seqs.len(), 4);
    let list = |after: i64, limit: u32, scopes: Option<Vec<&str>>| EventsListRequest {
        after,
        limit: Some(limit),
        scopes: scopes.map(|v| v.into_iter().map(String::from).collect()),
    };
    // Pages of two, scope a: full pages until the end.
    let p1 = s.events(list(0, 2, Some(vec!["a"]))).await.unwrap();
    let seqs: Vec<i64> = p1.events.iter().map(|e| e.seq).collect();
    assert_eq!(seqs, a_seqs[..2]);
    assert_eq!(p1.next_after, a_seqs[1]);
    assert!(p1.events.iter().all(|e| e.scope_id == "a"));
    let p2 = s
        .events(list(p1.next_after, 2, Some(vec!["a"])))
        .await
        .unwrap();
    let seqs: Vec<i64> = p2.events.iter().map(|e| e.seq).collect();
    assert_eq!(seqs, a_seqs[2..]);
    let p3 = s
        .events(list(p2.next_after, 2, Some(vec!["a"])))
        .await
        .unwrap();
    assert!(p3.events.is_empty());
    assert_eq!(p3.next_after, p2.next_after);
    // Two scopes, merged in order; a duplicate scope changes nothing.
    let both = s
        .events(list(0, 5, Some(vec!["b", "a", "a"])))
        .await
        .unwrap();
    let seqs: Vec<i64> = both.events.iter().map(|e| e.seq).collect();
    let want: Vec<i64> = accepted.iter().take(5).map(|e| e.seq).collect();
    assert_eq!(seqs, want);
    // No filter: the log; an unknown scope: nothing.
    let all = s.events(list(0, 1000, None)).await.unwrap();
    assert_eq!(all.events.len(), layout.len());
    let none = s.events(list(0, 10, Some(vec!["zzz"]))).await.unwrap();
    assert!(none.events.is_empty() && none.next_after == 0);
    // Default limit and the bound.
    let d = s
        .events(EventsListRequest {
            after: 0,
            limit: None,
            scopes: None,
        })
        .await
        .unwrap();
    assert_eq!(d.events.len(), layout.len());
    let e = s.events(list(0, 1001, None)).await.unwrap_err();
    assert!(
        matches!(&e, StoreError::Invalid(m) if m.contains("max_page (1000)")),
        "{e:?}"
    );
    // The sequence.
    let seq = s.sequence(SequenceRequest {}).await.unwrap();
    assert_eq!(seq.sequence, accepted.last().unwrap().seq);
    f.close();
}

async fn event_reads_respect_scopes_and_the_empty_log(b: Backend) {
    let f = Fixture::new(b, "reads", Limits::default());
    let s = &f.store;
    assert_eq!(s.sequence(SequenceRequest {}).await.unwrap().sequence, 0);
    let e = s
        .event(EventGetRequest {
            id: "evt_nope".into(),
            scopes: None,
        })
        .await
        .unwrap_err();
    assert!(matches!(e, StoreError::NotFound(_)));
    let a = f.accept(vec![ev("s1", Some("x"))]).await.unwrap().events[0].clone();
    let got = s
        .event(EventGetRequest {
            id: a.id.clone(),
            scopes: Some(vec!["s1".into()]),
        })
        .await
        .unwrap();
    assert_eq!(got.event.id, a.id);
    // Outside the caller's scopes it reads as not there.
    let e = s
        .event(EventGetRequest {
            id: a.id.clone(),
            scopes: Some(vec!["s2".into()]),
        })
        .await
        .unwrap_err();
    assert!(matches!(e, StoreError::NotFound(_)));
    f.close();
}

async fn work_events_are_the_routed_and_the_keyed(b: Backend) {
    let f = Fixture::new(b, "work", Limits::default());
    let s = &f.store;
    let mut keyed = ev("s1", Some("keyed"));
    keyed.keys = vec!["k1".into()];
    let routed = ev("s1", Some("routed"));
    let unrelated = ev("s1", Some("unrelated"));
    let mut both = ev("s1", Some("both"));
    both.keys = vec!["k2".into(), "k1".into()];
    let mut other_scope = ev("s2", Some("other"));
    other_scope.keys = vec!["k1".into()];
    let out = f
        .accept(vec![keyed, routed, unrelated, both, other_scope])
        .await
        .unwrap()
        .events;
    let seqs: Vec<i64> = out.iter().map(|e| e.seq).collect();
    let (routed_seq, both_seq) = (seqs[1], seqs[3]);
    s.write(move |c| {
        c.execute(
            "INSERT INTO works (id, scope_id, kind, state, created_at, updated_at)
             VALUES ('w1', 's1', 'agent', 'pending', 'now', 'now')",
            [],
        )?;
        c.execute(
            "INSERT INTO work_keys (key, work_id) VALUES ('k1', 'w1'), ('k2', 'w1')",
            [],
        )?;
        c.execute(
            "INSERT INTO work_inputs (work_id, seq) VALUES ('w1', ?1), ('w1', ?2)",
            [routed_seq, both_seq],
        )?;
        Ok(())
    })
    .await
    .unwrap();
    let req = |after: i64, limit: u32, scopes: Option<Vec<&str>>| WorkEventsRequest {
        work_id: "w1".into(),
        after,
        limit: Some(limit),
        scopes: scopes.map(|v| v.into_iter().map(String::from).collect()),
    };
    let all = s.work_events(req(0, 100, None)).await.unwrap();
    let got: Vec<i64> = all.events.iter().map(|e| e.seq).collect();
    assert_eq!(got, vec![seqs[0], seqs[1], seqs[3], seqs[4]]);
    // Paged by two.
    let p1 = s.work_events(req(0, 2, None)).await.unwrap();
    let got: Vec<i64> = p1.events.iter().map(|e| e.seq).collect();
    assert_eq!(got, vec![seqs[0], seqs[1]]);
    let p2 = s.work_events(req(p1.next_after, 2, None)).await.unwrap();
    let got: Vec<i64> = p2.events.iter().map(|e| e.seq).collect();
    assert_eq!(got, vec![seqs[3], seqs[4]]);
    // Filtered by scope before the limit.
    let p = s.work_events(req(0, 3, Some(vec!["s1"]))).await.unwrap();
    let got: Vec<i64> = p.events.iter().map(|e| e.seq).collect();
    assert_eq!(got, vec![seqs[0], seqs[1], seqs[3]]);
    let p = s.work_events(req(0, 3, Some(vec!["s9"]))).await.unwrap();
    assert!(p.events.is_empty());
    let p = s.work_events(req(0, 3, Some(vec![]))).await.unwrap();
    assert!(p.events.is_empty());
    // An unknown Work: an empty page.
    let mut r = req(0, 10, None);
    r.work_id = "w-none".into();
    assert!(s.work_events(r).await.unwrap().events.is_empty());
    let e = s.work_events(req(0, 5000, None)).await.unwrap_err();
    assert!(matches!(e, StoreError::Invalid(_)));
    f.close();
}

async fn dispatch_decodes_serves_and_refuses(b: Backend) {
    let f = Fixture::new(b, "dispatch", Limits::default());
    let s = &f.store;
    let raw = |v: Value| serde_json::value::to_raw_value(&v).unwrap();
    assert!(
        storaged::events::dispatch(s, "store.kv_get", &raw(json!({})))
            .await
            .is_none()
    );
    for m in storaged::events::METHODS {
        let out = storaged::events::dispatch(s, m, &raw(json!({"bogus": 1})))
            .await
            .unwrap();
        assert!(
            matches!(&out, Err(StoreError::Invalid(msg)) if msg.starts_with(&format!("invalid params for {m}"))),
            "{m}: {out:?}"
        );
    }
    let out = storaged::events::dispatch(
        s,
        "store.events_accept",
        &raw(
            json!({"events": [{"scope_id": "s1", "type": "t", "source": "src",
                                 "delivery_id": "d", "payload": {"a": 1}, "keys": ["k"]}]}),
        ),
    )
    .await
    .unwrap()
    .unwrap();
    assert_eq!(out["added_any"], json!(true));
    assert_eq!(out["events"][0]["id"], json!(emitted_event_id("src", "d")));
    let seq = storaged::events::dispatch(s, "store.sequence", &raw(Value::Null))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(seq, json!({"sequence": out["events"][0]["seq"]}));
    let page = storaged::events::dispatch(s, "store.events", &raw(json!({"scopes": ["s1"]})))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(page["events"][0]["type"], json!("t"));
    assert_eq!(page["events"][0]["scope_id"], json!("s1"));
    assert_eq!(page["next_after"], out["events"][0]["seq"]);
    f.close();
}

async fn a_page_of_events_is_bounded_in_bytes_but_carries_at_least_one(b: Backend) {
    let f = Fixture::new(b, "page-bytes", Limits::default());
    // Three events of 5 MiB: no two fit in one page's byte bound (8 MiB); and one
    // of 20 MiB, alone over it, still comes back whole in a page of its own.
    let five = "x".repeat(5 * 1024 * 1024);
    let mut inputs = Vec::new();
    for i in 0..3 {
        let mut e = ev("s", Some(&format!("d{i}")));
        e.payload = json!({"blob": five, "i": i});
        inputs.push(e);
    }
    let mut big = ev("s", Some("big"));
    big.payload = json!({"blob": "y".repeat(20 * 1024 * 1024)});
    inputs.push(big);
    let mut small = ev("s", Some("small"));
    small.payload = json!({"n": 1});
    inputs.push(small);
    f.accept(inputs).await.unwrap();

    let mut after = 0;
    let mut pages = Vec::new();
    loop {
        let page = f
            .store
            .events(EventsListRequest {
                after,
                limit: Some(100),
                scopes: None,
            })
            .await
            .unwrap();
        if page.events.is_empty() {
            break;
        }
        after = page.next_after;
        pages.push(
            page.events
                .iter()
                .map(|e| e.delivery_id.clone().unwrap_or_default())
                .collect::<Vec<_>>(),
        );
        let bytes: usize = page
            .events
            .iter()
            .map(|e| e.payload.to_string().len())
            .sum();
        assert!(
            page.events.len() == 1 || bytes <= storaged::events::MAX_EVENTS_PAGE_BYTES,
            "a page of {bytes} bytes"
        );
    }
    assert_eq!(
        pages,
        vec![
            vec!["d0"],
            vec!["d1"],
            vec!["d2"],
            vec!["big"],
            vec!["small"]
        ]
    );
    f.close();
}

/// A snapshot (`EventInput::snapshot`): its delivery ID alone is its identity, so a
/// later snapshot of the same change with another payload (a poll reading a title
/// edited since the webhook) is the kept Event again, and the first payload stands;
/// without the flag the same pair is still a conflict.
async fn a_snapshot_under_a_kept_delivery_is_that_event(b: Backend) {
    let f = Fixture::new(b, "snapshot", Limits::default());
    let mut hooked = ev("s1", Some("comment/5"));
    hooked.snapshot = true;
    hooked.payload = json!({"title": "before"});
    let first = f.accept(vec![hooked.clone()]).await.unwrap();
    assert!(first.added_any);
    // The poll's snapshot, an observation naming the delivery, read after an edit.
    let mut polled = hooked.clone();
    polled.payload = json!({"title": "after"});
    polled.item = Some("pr/1/comment/5".into());
    polled.item_version = Some("1".into());
    let again = f.accept(vec![polled.clone()]).await.unwrap();
    assert!(!again.added_any, "{again:?}");
    assert_eq!(again.events[0].id, first.events[0].id);
    assert_eq!(
        f.get(&first.events[0].id).await.payload,
        json!({"title": "before"})
    );
    // The webhook's redelivery after the poll: the same Event, nothing added.
    let mut late = hooked.clone();
    late.payload = json!({"title": "late"});
    assert!(!f.accept(vec![late]).await.unwrap().added_any);
    assert_eq!(f.count("events").await, 1);
    // Not a snapshot: a changed envelope under the ID is a conflict, as ever.
    let mut plain = hooked.clone();
    plain.snapshot = false;
    plain.payload = json!({"title": "other"});
    let e = f.accept(vec![plain]).await.unwrap_err();
    assert!(matches!(&e, StoreError::Conflict(_)), "{e:?}");
    f.close();
}

on_both!(
    a_batch_is_accepted_with_ids_roots_and_keys,
    a_redelivery_is_the_same_event_and_a_changed_envelope_conflicts,
    a_snapshot_under_a_kept_delivery_is_that_event,
    refusals_name_their_limit_and_write_nothing,
    an_owner_accepts_only_its_families_and_sources,
    derived_events_take_the_parents_scope_root_and_depth,
    a_chain_derives_at_most_its_per_minute_bound,
    a_derived_event_commits_with_its_records,
    checkpoints_move_under_their_precondition,
    events_page_by_scope_without_short_pages,
    event_reads_respect_scopes_and_the_empty_log,
    work_events_are_the_routed_and_the_keyed,
    dispatch_decodes_serves_and_refuses,
    a_page_of_events_is_bounded_in_bytes_but_carries_at_least_one,
);
