//! Extension KV: get, list, commit (checks, puts, deletes, emissions) and the KV
//! layout versions, against a real store.

#![allow(clippy::unwrap_used)]

#[macro_use]
mod backend;
use backend::Backend;
use serde_json::{json, Value};
use storaged::commit::KvCommitRequest;
use storaged::events::{emitted_event_id, EventInput};
use storaged::kv::{KvCheckItem, KvDeleteItem, KvGetRequest, KvListRequest, KvPutItem};
use storaged::reserved::{KvLayoutGetRequest, KvLayoutSetRequest};
use storaged::{util, Limits, Store, StoreError};

struct Fixture {
    store: Store,
    dir: std::path::PathBuf,
}

impl Fixture {
    fn new(b: Backend, name: &str, limits: Limits) -> Fixture {
        let dir = std::env::temp_dir().join(format!(
            "oc-store-kv-{name}-{}-{}",
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

    async fn get(&self, owner: &str, namespace: &str, key: &str) -> Option<Value> {
        self.store
            .kv_get(KvGetRequest {
                owner: owner.into(),
                namespace: namespace.into(),
                key: key.into(),
            })
            .await
            .unwrap()
            .value
    }

    fn close(self) {
        let dir = self.dir.clone();
        self.store.close();
        let _ = std::fs::remove_dir_all(dir);
    }
}

fn commit(owner: &str) -> KvCommitRequest {
    KvCommitRequest {
        owner: owner.into(),
        families: Some(vec!["notes.note".into()]),
        scopes: None,
        checks: vec![],
        puts: vec![],
        deletes: vec![],
        emissions: vec![],
    }
}

fn put(ns: &str, key: &str, value: Value) -> KvPutItem {
    KvPutItem {
        namespace: ns.into(),
        key: key.into(),
        value,
    }
}

fn check_version(ns: &str, key: &str, v: &str) -> KvCheckItem {
    KvCheckItem {
        namespace: ns.into(),
        key: key.into(),
        version: Some(v.into()),
        absent: false,
    }
}

fn check_absent(ns: &str, key: &str) -> KvCheckItem {
    KvCheckItem {
        namespace: ns.into(),
        key: key.into(),
        version: None,
        absent: true,
    }
}

fn emission(scope: &str, delivery: &str) -> EventInput {
    EventInput {
        scope_id: scope.into(),
        event_type: "notes.note".into(),
        source: "notes".into(),
        delivery_id: Some(delivery.into()),
        payload: json!({"text": delivery}),
        keys: vec![format!("notes:{delivery}")],
        ..Default::default()
    }
}

async fn get_put_list_and_delete(b: Backend) {
    let f = Fixture::new(b, "basic", Limits::default());
    let s = &f.store;
    // Absent: neither value nor version.
    let got = s
        .kv_get(KvGetRequest {
            owner: "notes".into(),
            namespace: String::new(),
            key: "a".into(),
        })
        .await
        .unwrap();
    assert!(got.value.is_none() && got.version.is_none());
    let encoded = serde_json::to_value(&got).unwrap();
    assert_eq!(encoded, json!({}));

    let mut req = commit("notes");
    req.checks = vec![check_absent("", "a")];
    req.puts = vec![
        put("", "a", json!({"n": 1, "b": [true]})),
        put("notes", "b", json!(null)),
        put("notes.cache", "a", json!("other")),
    ];
    s.kv_commit(req).await.unwrap();
    let got = s
        .kv_get(KvGetRequest {
            owner: "notes".into(),
            namespace: "notes".into(),
            key: "a".into(),
        })
        .await
        .unwrap();
    assert_eq!(got.value, Some(json!({"b": [true], "n": 1})));
    let want_version = util::digest(util::canonical(&json!({"n": 1, "b": [true]})).as_bytes());
    assert_eq!(got.version.as_deref(), Some(want_version.as_str()));
    // A stored null is present.
    let b = s
        .kv_get(KvGetRequest {
            owner: "notes".into(),
            namespace: String::new(),
            key: "b".into(),
        })
        .await
        .unwrap();
    assert_eq!(b.value, Some(Value::Null));
    assert!(b.version.is_some());
    // Namespaces are separate.
    assert_eq!(
        f.get("notes", "notes.cache", "a").await,
        Some(json!("other"))
    );

    // Versioned check, then a delete.
    let mut req = commit("notes");
    req.checks = vec![check_version("", "a", &want_version)];
    req.deletes = vec![KvDeleteItem {
        namespace: String::new(),
        key: "a".into(),
    }];
    s.kv_commit(req).await.unwrap();
    assert_eq!(f.get("notes", "", "a").await, None);
    // Deleting an absent key is no error.
    let mut req = commit("notes");
    req.deletes = vec![KvDeleteItem {
        namespace: String::new(),
        key: "never".into(),
    }];
    s.kv_commit(req).await.unwrap();
    f.close();
}

async fn list_pages_by_key_within_a_prefix(b: Backend) {
    let f = Fixture::new(b, "list", Limits::default());
    let s = &f.store;
    let mut req = commit("notes");
    for k in ["a", "p/1", "p/2", "p/3", "p/4", "p/5", "q"] {
        req.puts.push(put("", k, json!(k)));
    }
    req.puts.push(put("notes.x", "p/9", json!(9)));
    s.kv_commit(req).await.unwrap();

    let list = |after: &str, limit: Option<u32>| KvListRequest {
        owner: "notes".into(),
        namespace: String::new(),
        prefix: "p/".into(),
        after: after.into(),
        limit,
    };
    let page = s.kv_list(list("", Some(2))).await.unwrap();
    let keys: Vec<_> = page.entries.iter().map(|e| e.key.as_str()).collect();
    assert_eq!(keys, ["p/1", "p/2"]);
    assert_eq!(page.next, "p/2");
    assert_eq!(page.entries[0].value, json!("p/1"));
    assert_eq!(
        page.entries[0].version,
        util::digest(util::canonical(&json!("p/1")).as_bytes())
    );
    let page = s.kv_list(list("p/2", Some(2))).await.unwrap();
    let keys: Vec<_> = page.entries.iter().map(|e| e.key.as_str()).collect();
    assert_eq!(keys, ["p/3", "p/4"]);
    assert_eq!(page.next, "p/4");
    // The last page: p/5 only, and no next (q is outside the prefix).
    let page = s.kv_list(list("p/4", Some(2))).await.unwrap();
    let keys: Vec<_> = page.entries.iter().map(|e| e.key.as_str()).collect();
    assert_eq!(keys, ["p/5"]);
    assert_eq!(page.next, "");
    // A page that ends exactly at the last key has no next either.
    let page = s.kv_list(list("p/3", Some(2))).await.unwrap();
    assert_eq!(page.entries.len(), 2);
    assert_eq!(page.next, "");
    // Default limit, no prefix: the whole namespace, not the other one.
    let page = s
        .kv_list(KvListRequest {
            owner: "notes".into(),
            namespace: String::new(),
            prefix: String::new(),
            after: String::new(),
            limit: None,
        })
        .await
        .unwrap();
    assert_eq!(page.entries.len(), 7);
    // Over max_page.
    let e = s.kv_list(list("", Some(1001))).await.unwrap_err();
    assert!(
        matches!(&e, StoreError::Invalid(m) if m.contains("max_page (1000)")),
        "{e:?}"
    );
    // A foreign namespace.
    let e = s
        .kv_list(KvListRequest {
            owner: "notes".into(),
            namespace: "other".into(),
            prefix: String::new(),
            after: String::new(),
            limit: None,
        })
        .await
        .unwrap_err();
    assert!(matches!(e, StoreError::Unauthorized(_)), "{e:?}");
    f.close();
}

async fn a_failed_check_applies_nothing(b: Backend) {
    let f = Fixture::new(b, "check", Limits::default());
    let s = &f.store;
    let mut req = commit("notes");
    req.puts = vec![put("", "a", json!(1))];
    s.kv_commit(req).await.unwrap();
    let before_events = f.count("events").await;

    // Version mismatch.
    let mut req = commit("notes");
    req.checks = vec![check_version("", "a", "sha256:nope")];
    req.puts = vec![put("", "a", json!(2)), put("", "b", json!(2))];
    req.emissions = vec![emission("s1", "d1")];
    let e = s.kv_commit(req).await.unwrap_err();
    assert!(
        matches!(&e, StoreError::Conflict(m) if m.contains("notes/a")),
        "{e:?}"
    );
    // Absent expected, but present.
    let mut req = commit("notes");
    req.checks = vec![check_absent("notes", "a")];
    req.puts = vec![put("", "b", json!(2))];
    let e = s.kv_commit(req).await.unwrap_err();
    assert!(
        matches!(&e, StoreError::Conflict(m) if m.contains("notes/a")),
        "{e:?}"
    );
    // A version expected, but absent.
    let mut req = commit("notes");
    req.checks = vec![check_version("notes.x", "zz", "sha256:x")];
    req.deletes = vec![KvDeleteItem {
        namespace: String::new(),
        key: "a".into(),
    }];
    let e = s.kv_commit(req).await.unwrap_err();
    assert!(
        matches!(&e, StoreError::Conflict(m) if m.contains("notes.x/zz")),
        "{e:?}"
    );
    assert_eq!(f.get("notes", "", "a").await, Some(json!(1)));
    assert_eq!(f.get("notes", "", "b").await, None);
    assert_eq!(f.count("kv").await, 1);
    assert_eq!(f.count("events").await, before_events);
    // Both version and absent, or neither: invalid.
    let mut req = commit("notes");
    req.checks = vec![KvCheckItem {
        namespace: String::new(),
        key: "a".into(),
        version: Some("v".into()),
        absent: true,
    }];
    assert!(matches!(
        s.kv_commit(req).await.unwrap_err(),
        StoreError::Invalid(_)
    ));
    let mut req = commit("notes");
    req.checks = vec![KvCheckItem {
        namespace: String::new(),
        key: "a".into(),
        version: None,
        absent: false,
    }];
    assert!(matches!(
        s.kv_commit(req).await.unwrap_err(),
        StoreError::Invalid(_)
    ));
    f.close();
}

async fn foreign_and_reserved_namespaces_apply_nothing(b: Backend) {
    let f = Fixture::new(b, "ns", Limits::default());
    let s = &f.store;
    let foreign = [
        "other",
        "other.notes",
        "notesx",
        "notes-x",
        "notes.",
        "core.extensions",
        "core.extensions.notes",
    ];
    for ns in foreign {
        // A put among good ones.
        let mut req = commit("notes");
        req.puts = vec![put("", "good", json!(1)), put(ns, "k", json!(1))];
        req.emissions = vec![emission("s1", "d-ns")];
        let e = s.kv_commit(req).await.unwrap_err();
        assert!(matches!(e, StoreError::Unauthorized(_)), "{ns}: {e:?}");
        // A check.
        let mut req = commit("notes");
        req.checks = vec![check_absent(ns, "k")];
        req.puts = vec![put("", "good", json!(1))];
        let e = s.kv_commit(req).await.unwrap_err();
        assert!(matches!(e, StoreError::Unauthorized(_)), "{ns}: {e:?}");
        // A delete.
        let mut req = commit("notes");
        req.deletes = vec![KvDeleteItem {
            namespace: ns.into(),
            key: "k".into(),
        }];
        req.puts = vec![put("", "good", json!(1))];
        let e = s.kv_commit(req).await.unwrap_err();
        assert!(matches!(e, StoreError::Unauthorized(_)), "{ns}: {e:?}");
        // A read.
        let e = s
            .kv_get(KvGetRequest {
                owner: "notes".into(),
                namespace: ns.into(),
                key: "k".into(),
            })
            .await
            .unwrap_err();
        assert!(matches!(e, StoreError::Unauthorized(_)), "{ns}: {e:?}");
    }
    assert_eq!(f.count("kv").await, 0);
    assert_eq!(f.count("events").await, 0);

    // Not even an extension called `core` reaches the reserved namespace.
    s.kv_layout_set(KvLayoutSetRequest {
        extension: "notes".into(),
        version: 3,
    })
    .await
    .unwrap();
    let e = s
        .kv_get(KvGetRequest {
            owner: "core".into(),
            namespace: "core.extensions".into(),
            key: "notes".into(),
        })
        .await
        .unwrap_err();
    assert!(matches!(e, StoreError::Unauthorized(_)), "{e:?}");
    let mut req = commit("core");
    req.puts = vec![put("core.extensions", "notes", json!(0))];
    let e = s.kv_commit(req).await.unwrap_err();
    assert!(matches!(e, StoreError::Unauthorized(_)), "{e:?}");
    let layout = s
        .kv_layout_get(KvLayoutGetRequest {
            extension: "notes".into(),
        })
        .await
        .unwrap();
    assert_eq!(layout.version, Some(3));
    // A bad owner.
    let e = s
        .kv_get(KvGetRequest {
            owner: "Not A Name".into(),
            namespace: String::new(),
            key: "k".into(),
        })
        .await
        .unwrap_err();
    assert!(matches!(e, StoreError::Invalid(_)), "{e:?}");
    f.close();
}

async fn sizes_are_bounded_and_name_their_limit(b: Backend) {
    let limits = Limits {
        max_key_bytes: 8,
        max_value_bytes: 16,
        max_batch: 3,
        ..Limits::default()
    };
    let f = Fixture::new(b, "sizes", limits);
    let s = &f.store;
    let mut req = commit("notes");
    req.puts = vec![put("", "ok", json!(1)), put("", "123456789", json!(1))];
    let e = s.kv_commit(req).await.unwrap_err();
    assert!(
        matches!(&e, StoreError::Invalid(m) if m.contains("max_key_bytes (8)")),
        "{e:?}"
    );
    let mut req = commit("notes");
    req.puts = vec![
        put("", "ok", json!(1)),
        put("", "v", json!("0123456789abcdef")),
    ];
    let e = s.kv_commit(req).await.unwrap_err();
    assert!(
        matches!(&e, StoreError::Invalid(m) if m.contains("max_value_bytes (16)")),
        "{e:?}"
    );
    let mut req = commit("notes");
    req.puts = vec![put("", "a", json!(1)), put("", "b", json!(1))];
    req.checks = vec![check_absent("", "c")];
    req.deletes = vec![KvDeleteItem {
        namespace: String::new(),
        key: "d".into(),
    }];
    let e = s.kv_commit(req).await.unwrap_err();
    assert!(
        matches!(&e, StoreError::Invalid(m) if m.contains("max_batch (3)")),
        "{e:?}"
    );
    let mut req = commit("notes");
    req.puts = vec![put("", "", json!(1))];
    assert!(matches!(
        s.kv_commit(req).await.unwrap_err(),
        StoreError::Invalid(_)
    ));
    let e = s
        .kv_get(KvGetRequest {
            owner: "notes".into(),
            namespace: String::new(),
            key: "123456789".into(),
        })
        .await
        .unwrap_err();
    assert!(matches!(e, StoreError::Invalid(_)), "{e:?}");
    assert_eq!(f.count("kv").await, 0);
    f.close();
}

async fn emissions_commit_atomically_with_the_writes(b: Backend) {
    let f = Fixture::new(b, "emit", Limits::default());
    let s = &f.store;
    let mut req = commit("notes");
    req.checks = vec![check_absent("", "cursor")];
    req.puts = vec![put("", "cursor", json!(1))];
    req.emissions = vec![emission("s1", "d1")];
    let out = s.kv_commit(req.clone()).await.unwrap();
    assert_eq!(out.emissions.len(), 1);
    let first = &out.emissions[0];
    assert!(first.added && first.refused.is_none());
    let ev = first.event.as_ref().unwrap();
    assert_eq!(ev.id, emitted_event_id("notes", "d1"));
    assert_eq!(f.get("notes", "", "cursor").await, Some(json!(1)));
    let stored = s
        .event(storaged::events::EventGetRequest {
            id: ev.id.clone(),
            scopes: None,
        })
        .await
        .unwrap()
        .event;
    assert_eq!(stored.seq, ev.seq);
    assert_eq!(stored.scope_id, "s1");
    assert_eq!(stored.root_id, ev.id);
    assert_eq!(stored.depth, 0);

    // The same emission again, with a derived one from it: the first is the same
    // Event (added: false), the second is new.
    let mut req2 = commit("notes");
    let mut derived = emission("", "d2");
    derived.parent_id = Some(ev.id.clone());
    req2.emissions = vec![emission("s1", "d1"), derived];
    req2.puts = vec![put("", "cursor", json!(2))];
    let out = s.kv_commit(req2).await.unwrap();
    assert!(!out.emissions[0].added);
    assert_eq!(out.emissions[0].event.as_ref().unwrap().id, ev.id);
    assert!(out.emissions[1].added);
    let d = s
        .event(storaged::events::EventGetRequest {
            id: out.emissions[1].event.as_ref().unwrap().id.clone(),
            scopes: None,
        })
        .await
        .unwrap()
        .event;
    assert_eq!(d.scope_id, "s1");
    assert_eq!(d.root_id, ev.id);
    assert_eq!(d.depth, 1);
    assert_eq!(d.parent_id.as_deref(), Some(ev.id.as_str()));
    assert_eq!(f.get("notes", "", "cursor").await, Some(json!(2)));
    assert_eq!(f.count("events").await, 2);
    // The encoded answer: event {id, seq}, added, no refused.
    let encoded = serde_json::to_value(&out).unwrap();
    assert_eq!(encoded["emissions"][0]["added"], json!(false));
    assert!(encoded["emissions"][0].get("refused").is_none());
    assert!(encoded["emissions"][1]["event"]["seq"].is_i64());
    f.close();
}

async fn a_refused_emission_fails_the_whole_batch(b: Backend) {
    let f = Fixture::new(b, "refuse", Limits::default());
    let s = &f.store;
    // A root in another scope to name as a parent.
    let mut req = commit("notes");
    req.emissions = vec![emission("other-scope", "root")];
    let root = s.kv_commit(req).await.unwrap().emissions[0]
        .event
        .clone()
        .unwrap();
    let events_before = f.count("events").await;

    type Case = (&'static str, EventInput, fn(&StoreError) -> bool);
    let cases: Vec<Case> = vec![
        (
            "undeclared family",
            EventInput {
                event_type: "notes.secret".into(),
                ..emission("s1", "u1")
            },
            |e| matches!(e, StoreError::Undeclared(_)),
        ),
        (
            "foreign source",
            EventInput {
                source: "github".into(),
                ..emission("s1", "u2")
            },
            |e| matches!(e, StoreError::Unauthorized(_)),
        ),
        (
            "a source that only starts like ours",
            EventInput {
                source: "notesx/a".into(),
                ..emission("s1", "u3")
            },
            |e| matches!(e, StoreError::Unauthorized(_)),
        ),
        (
            "a parent outside the scope",
            EventInput {
                parent_id: Some(root.id.clone()),
                ..emission("s1", "u4")
            },
            |e| matches!(e, StoreError::NotFound(_)),
        ),
        (
            "an unknown parent",
            EventInput {
                parent_id: Some("evt_nope".into()),
                ..emission("s1", "u5")
            },
            |e| matches!(e, StoreError::NotFound(_)),
        ),
        (
            "no delivery id",
            EventInput {
                delivery_id: None,
                ..emission("s1", "u6")
            },
            |e| matches!(e, StoreError::Invalid(_)),
        ),
        ("a root without a scope", emission("", "u7"), |e| {
            matches!(e, StoreError::Invalid(_))
        }),
    ];
    for (what, bad, ok) in cases {
        let mut req = commit("notes");
        req.puts = vec![put("", "k", json!(what))];
        req.emissions = vec![emission("s1", "good"), bad];
        let e = s.kv_commit(req).await.unwrap_err();
        assert!(ok(&e), "{what}: {e:?}");
        assert_eq!(f.count("events").await, events_before, "{what}");
        assert_eq!(f.count("kv").await, 0, "{what}");
    }
    // Without families, nothing is declared.
    let mut req = commit("notes");
    req.families = None;
    req.emissions = vec![emission("s1", "good")];
    let e = s.kv_commit(req).await.unwrap_err();
    assert!(matches!(e, StoreError::Undeclared(_)), "{e:?}");
    // A configured-scope list the root's scope is not in.
    let mut req = commit("notes");
    req.scopes = Some(vec!["s2".into()]);
    req.emissions = vec![emission("s1", "good")];
    let e = s.kv_commit(req).await.unwrap_err();
    assert!(matches!(e, StoreError::Unauthorized(_)), "{e:?}");
    // A changed envelope under an accepted delivery identity.
    let mut changed = emission("other-scope", "root");
    changed.payload = json!({"text": "changed"});
    let mut req = commit("notes");
    req.puts = vec![put("", "k", json!(1))];
    req.emissions = vec![changed];
    let e = s.kv_commit(req).await.unwrap_err();
    assert!(matches!(e, StoreError::Conflict(_)), "{e:?}");
    assert_eq!(f.count("events").await, events_before);
    assert_eq!(f.count("kv").await, 0);
    f.close();
}

async fn a_causal_limit_emission_is_refused_alone(b: Backend) {
    let limits = Limits {
        max_causal_depth: 1,
        ..Limits::default()
    };
    let f = Fixture::new(b, "causal", limits);
    let s = &f.store;
    let mut req = commit("notes");
    req.emissions = vec![emission("s1", "root")];
    let root = s.kv_commit(req).await.unwrap().emissions[0]
        .event
        .clone()
        .unwrap();
    let mut req = commit("notes");
    req.emissions = vec![EventInput {
        parent_id: Some(root.id.clone()),
        ..emission("s1", "child")
    }];
    let child = s.kv_commit(req).await.unwrap().emissions[0]
        .event
        .clone()
        .unwrap();

    // A grandchild is over max_causal_depth (1): refused alone; the put and the
    // other emission commit.
    let mut req = commit("notes");
    req.puts = vec![put("", "after", json!(true))];
    req.emissions = vec![
        EventInput {
            parent_id: Some(child.id.clone()),
            ..emission("s1", "grandchild")
        },
        emission("s1", "another-root"),
    ];
    let out = s.kv_commit(req).await.unwrap();
    assert_eq!(out.emissions[0].refused.as_deref(), Some("causal_limit"));
    assert!(out.emissions[0].event.is_none() && !out.emissions[0].added);
    assert!(out.emissions[1].added && out.emissions[1].refused.is_none());
    assert_eq!(f.get("notes", "", "after").await, Some(json!(true)));
    assert_eq!(f.count("events").await, 3);
    let e = s
        .event(storaged::events::EventGetRequest {
            id: emitted_event_id("notes", "grandchild"),
            scopes: None,
        })
        .await
        .unwrap_err();
    assert!(matches!(e, StoreError::NotFound(_)));
    f.close();
}

async fn layout_versions_never_go_down(b: Backend) {
    let f = Fixture::new(b, "layout", Limits::default());
    let s = &f.store;
    let get = |name: &str| KvLayoutGetRequest {
        extension: name.into(),
    };
    assert_eq!(s.kv_layout_get(get("notes")).await.unwrap().version, None);
    let out = s
        .kv_layout_set(KvLayoutSetRequest {
            extension: "notes".into(),
            version: 1,
        })
        .await
        .unwrap();
    assert_eq!(out.previous, None);
    let out = s
        .kv_layout_set(KvLayoutSetRequest {
            extension: "notes".into(),
            version: 2,
        })
        .await
        .unwrap();
    assert_eq!(out.previous, Some(1));
    // The same again is fine.
    s.kv_layout_set(KvLayoutSetRequest {
        extension: "notes".into(),
        version: 2,
    })
    .await
    .unwrap();
    let e = s
        .kv_layout_set(KvLayoutSetRequest {
            extension: "notes".into(),
            version: 1,
        })
        .await
        .unwrap_err();
    assert!(
        matches!(&e, StoreError::Conflict(m) if m == "kv_downgrade: stored 2, declared 1"),
        "{e:?}"
    );
    assert_eq!(
        s.kv_layout_get(get("notes")).await.unwrap().version,
        Some(2)
    );
    assert_eq!(s.kv_layout_get(get("other")).await.unwrap().version, None);
    // The extension's own namespace does not see it.
    assert_eq!(f.get("notes", "", "notes").await, None);
    let e = s.kv_layout_get(get("../x")).await.unwrap_err();
    assert!(matches!(e, StoreError::Invalid(_)));
    f.close();
}

async fn dispatch_decodes_serves_and_refuses(b: Backend) {
    let f = Fixture::new(b, "dispatch", Limits::default());
    let s = &f.store;
    let raw = |v: Value| serde_json::value::to_raw_value(&v).unwrap();
    assert!(storaged::kv::dispatch(s, "store.nope", &raw(json!({})))
        .await
        .is_none());
    for m in storaged::kv::METHODS {
        let out = storaged::kv::dispatch(s, m, &raw(json!({"bogus": 1})))
            .await
            .unwrap();
        assert!(
            matches!(&out, Err(StoreError::Invalid(msg)) if msg.starts_with(&format!("invalid params for {m}"))),
            "{m}: {out:?}"
        );
    }
    for m in storaged::commit::METHODS {
        let out = storaged::commit::dispatch(s, m, &raw(json!({"bogus": 1})))
            .await
            .unwrap();
        assert!(
            matches!(&out, Err(StoreError::Invalid(msg)) if msg.starts_with(&format!("invalid params for {m}"))),
            "{m}: {out:?}"
        );
    }
    for m in storaged::reserved::METHODS {
        let out = storaged::reserved::dispatch(s, m, &raw(json!({"bogus": 1})))
            .await
            .unwrap();
        assert!(
            matches!(&out, Err(StoreError::Invalid(msg)) if msg.starts_with(&format!("invalid params for {m}"))),
            "{m}: {out:?}"
        );
    }
    let out = storaged::commit::dispatch(
        s,
        "store.kv_commit",
        &raw(
            json!({"owner": "notes", "puts": [{"key": "k", "value": [1, 2]}],
                    "checks": [{"key": "k", "absent": true}]}),
        ),
    )
    .await
    .unwrap()
    .unwrap();
    assert_eq!(out, json!({"emissions": []}));
    let out = storaged::kv::dispatch(
        s,
        "store.kv_get",
        &raw(json!({"owner": "notes", "key": "k"})),
    )
    .await
    .unwrap()
    .unwrap();
    assert_eq!(out["value"], json!([1, 2]));
    assert!(out["version"].as_str().unwrap().starts_with("sha256:"));
    f.close();
}

async fn the_tunnel_record_is_kept_checked_and_out_of_the_extensions_reach(b: Backend) {
    use storaged::reserved::{TunnelGetRequest, TunnelRecord};
    let f = Fixture::new(b, "tunnel", Limits::default());
    let s = &f.store;
    assert!(s
        .tunnel_get(TunnelGetRequest {})
        .await
        .unwrap()
        .tunnel
        .is_none());
    s.tunnel_set(TunnelRecord {
        url: "https://hooks.example.com".into(),
        run_id: "run_1".into(),
        provider: "ssh".into(),
        ..TunnelRecord::default()
    })
    .await
    .unwrap();
    let got = s
        .tunnel_get(TunnelGetRequest {})
        .await
        .unwrap()
        .tunnel
        .unwrap();
    assert_eq!(got.url, "https://hooks.example.com");
    assert_eq!(got.run_id, "run_1");
    assert!(!got.updated_at.is_empty());
    // A credential-bearing URL is refused; cleared is fine.
    let e = s
        .tunnel_set(TunnelRecord {
            url: "https://u:p@x.example".into(),
            ..TunnelRecord::default()
        })
        .await
        .unwrap_err();
    assert!(matches!(e, StoreError::Invalid(_)), "{e:?}");
    s.tunnel_set(TunnelRecord {
        reason: "the run ended".into(),
        ..TunnelRecord::default()
    })
    .await
    .unwrap();
    let got = s
        .tunnel_get(TunnelGetRequest {})
        .await
        .unwrap()
        .tunnel
        .unwrap();
    assert_eq!(
        (got.url.as_str(), got.reason.as_str()),
        ("", "the run ended")
    );
    f.close();
}

on_both!(
    get_put_list_and_delete,
    list_pages_by_key_within_a_prefix,
    a_failed_check_applies_nothing,
    foreign_and_reserved_namespaces_apply_nothing,
    sizes_are_bounded_and_name_their_limit,
    emissions_commit_atomically_with_the_writes,
    a_refused_emission_fails_the_whole_batch,
    a_causal_limit_emission_is_refused_alone,
    layout_versions_never_go_down,
    dispatch_decodes_serves_and_refuses,
    the_tunnel_record_is_kept_checked_and_out_of_the_extensions_reach,
);
