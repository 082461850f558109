//! The scoped host end to end: a broker on a real unix socket, storaged's service
//! registered on it, and the host serving an "extension" over a socket pair. Every
//! rule is refused with nothing written, and the allowed calls work.

#![allow(clippy::unwrap_used)]

mod common;
use common::{Harness, Stack};

use extrunner::host::{BoundIdentity, Identity, ScopedHost};
use protocol::{CallError, Code};
use serde_json::{json, Value};
use std::sync::Arc;

const MANIFEST: &str = r#"{
  "protocol": [1],
  "name": "notes",
  "version": "1.0.0",
  "command": ["bin/notes"],
  "provides": {
    "families": [{"name": "notes.note", "re_derivable": true}],
    "extensions": [{"type": "notes", "ingress": true, "families": ["notes.note"]}],
    "schemas": [{"base": "notes.note", "versions": [1, 2]}],
    "recurrences": [{"name": "notes.daily"}]
  }
}"#;

impl Harness {
    async fn start() -> Harness {
        let stack = Stack::start("host").await;
        let dir = &stack.dir;
        let manifest = protocol::manifest::parse_manifest(MANIFEST.as_bytes()).unwrap();
        let identity = Identity::new(manifest, vec!["s1".into()], vec!["notes-main".into()]);
        // The connection's secrets: `token` in a file, `missing` in an unset variable.
        std::fs::write(dir.join("token"), "s3cret\n").unwrap();
        let configuration = Arc::new(extrunner::configuration::Configuration::default());
        configuration.set(
            Default::default(),
            std::collections::BTreeMap::from([(
                "notes-main".to_owned(),
                std::collections::BTreeMap::from([
                    (
                        "token".to_owned(),
                        format!("file:{}", dir.join("token").display()),
                    ),
                    (
                        "missing".to_owned(),
                        "env:OC_TEST_SURELY_UNSET_42".to_owned(),
                    ),
                ]),
            )]),
        );
        // One registered source, `notes/inbox` in scope s1.
        configuration
            .register(
                "g1",
                &protocol::wire::ConfigureResult {
                    sources: vec![protocol::wire::SourceDecl {
                        name: "notes/inbox".into(),
                        source_type: "notes".into(),
                        scope_id: "s1".into(),
                        entry: "inbox".into(),
                        families: vec!["notes.note".into()],
                        reconcile_interval_s: 0,
                    }],
                    webhooks: Vec::new(),
                },
            )
            .unwrap();
        let host = ScopedHost::new(BoundIdentity::new(identity), stack.bus.clone())
            .with_configuration(configuration);
        Harness::serve(stack, None, host, "notes")
    }

    /// What storaged holds under `notes`'s key, read directly.
    async fn stored(&self, namespace: &str, key: &str) -> Value {
        let got = self
            .store(
                "store.kv_get",
                json!({"owner": "notes", "namespace": namespace, "key": key}),
            )
            .await;
        got.get("value").cloned().unwrap_or(Value::Null)
    }

    async fn sequence(&self) -> Value {
        self.store("store.sequence", json!({})).await["sequence"].clone()
    }

    /// Accept a root event in `scope` as a trusted daemon; its ID.
    async fn seed(&self, scope: &str, delivery: &str) -> String {
        let accepted = self
            .store(
                "store.events_accept",
                json!({"events": [{"scope_id": scope, "type": "notes.note.added",
                    "source": "notes", "delivery_id": delivery, "payload": {"n": 1}}]}),
            )
            .await;
        accepted["events"][0]["id"].as_str().unwrap().to_string()
    }
}

fn code(e: &CallError) -> Option<&str> {
    e.code()
}

fn emission(scope: &str, delivery: &str, schema: &str) -> Value {
    json!({"scope_id": scope, "source": "notes/main", "delivery_id": delivery,
        "type": "notes.note.added", "payload": {"schema": schema, "data": {"text": "hi"}}})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn allowed_calls_work_end_to_end() {
    let h = Harness::start().await;
    // kv.commit, then kv.get sees it; the host filled in the owner.
    let r = h
        .call(
            "kv.commit",
            json!({"puts": [{"key": "a", "value": {"n": 1}},
                {"namespace": "notes.cache", "key": "b", "value": 2}],
                "emissions": [emission("s1", "d1", "notes.note.v2")]}),
        )
        .await
        .unwrap();
    let event = &r["emissions"][0]["event"];
    assert_eq!(r["emissions"][0]["added"], true, "{r}");
    assert_eq!(event["scope_id"], "s1", "{r}");
    assert_eq!(event["payload"]["schema"], "notes.note.v2", "{r}");
    let got = h.call("kv.get", json!({"key": "a"})).await.unwrap();
    assert_eq!(got["value"], json!({"n": 1}));
    let version = got["version"].as_str().unwrap().to_string();
    // A key holding JSON null reads as that value, not as an absent key.
    h.call(
        "kv.commit",
        json!({"puts": [{"key": "nul", "value": null}]}),
    )
    .await
    .unwrap();
    let got = h.call("kv.get", json!({"key": "nul"})).await.unwrap();
    assert_eq!(got.get("value"), Some(&Value::Null), "{got}");
    assert!(got["version"].is_string(), "{got}");
    let none = h.call("kv.get", json!({"key": "none"})).await.unwrap();
    assert_eq!(none, json!({}), "{none}");
    assert_eq!(h.stored("notes.cache", "b").await, json!(2));
    let list = h
        .call("kv.list", json!({"namespace": "notes.cache"}))
        .await
        .unwrap();
    assert_eq!(list["entries"][0]["key"], "b", "{list}");
    // A check against the version read holds.
    h.call(
        "kv.commit",
        json!({"checks": [{"key": "a", "version": version}], "puts": [{"key": "a", "value": 3}]}),
    )
    .await
    .unwrap();
    assert_eq!(h.stored("", "a").await, json!(3));

    // event.accept derives from an Event of its scope.
    let parent = event["id"].as_str().unwrap();
    let mut derived = emission("", "d2", "notes.note.v2");
    derived["parent_id"] = json!(parent);
    let r = h
        .call(
            "event.accept",
            json!({"event": derived, "puts": [{"key": "seen", "value": true}]}),
        )
        .await
        .unwrap();
    assert_eq!(r["added"], true, "{r}");
    assert_eq!(r["event"]["parent_id"], parent, "{r}");
    assert_eq!(r["event"]["depth"], 1, "{r}");
    assert_eq!(h.stored("", "seen").await, json!(true));

    // State reads in its scope.
    let one = h.call("state.event", json!({"id": parent})).await.unwrap();
    assert_eq!(one["event"]["id"], parent);
    let page = h.call("state.events", json!({})).await.unwrap();
    assert_eq!(page["events"].as_array().unwrap().len(), 2, "{page}");
    let seq = h.call("state.sequence", json!({})).await.unwrap();
    assert_eq!(seq["sequence"], h.sequence().await);

    // Timers of a declared recurrence in its scope.
    let armed = h
        .call(
            "timer.arm",
            json!({"recurrence": "notes.daily", "scope_id": "s1", "key": "k",
                "at": "2030-01-01T00:00:00Z"}),
        )
        .await
        .unwrap();
    assert!(!armed["timer_id"].as_str().unwrap().is_empty(), "{armed}");
    let timers = h.call("state.timers", json!({})).await.unwrap();
    assert_eq!(timers["timers"][0]["key"], "k", "{timers}");
    let cancelled = h
        .call(
            "timer.cancel",
            json!({"recurrence": "notes.daily", "scope_id": "s1", "key": "k"}),
        )
        .await
        .unwrap();
    assert_eq!(cancelled["cancelled"], true);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kv_and_emission_rules_apply_nothing() {
    let h = Harness::start().await;
    let before = h.sequence().await;

    // A foreign namespace among its own keys: nothing applied.
    for batch in [
        json!({"puts": [{"key": "mine", "value": 1}, {"namespace": "github", "key": "x", "value": 1}]}),
        json!({"puts": [{"key": "mine", "value": 1}], "deletes": [{"namespace": "core.extensions", "key": "notes"}]}),
        json!({"puts": [{"key": "mine", "value": 1}], "checks": [{"namespace": "notesx", "key": "x", "absent": true}]}),
    ] {
        let e = h.call("kv.commit", batch).await.unwrap_err();
        assert_eq!(code(&e), Some("unauthorized"), "{e:?}");
    }
    assert_eq!(h.stored("", "mine").await, Value::Null);
    let e = h
        .call("kv.get", json!({"namespace": "github", "key": "x"}))
        .await
        .unwrap_err();
    assert_eq!(code(&e), Some("unauthorized"), "{e:?}");
    let e = h
        .call("kv.list", json!({"namespace": "other"}))
        .await
        .unwrap_err();
    assert_eq!(code(&e), Some("unauthorized"), "{e:?}");

    // Whatever owner the extension sends is ignored: it writes its own namespace.
    h.call(
        "kv.commit",
        json!({"owner": "github", "puts": [{"key": "own", "value": 1}]}),
    )
    .await
    .unwrap_or_else(|e| panic!("{e:?}"));
    assert_eq!(h.stored("", "own").await, json!(1));
    let github = h
        .store("store.kv_get", json!({"owner": "github", "key": "own"}))
        .await;
    assert_eq!(github.get("value"), None);

    let refusals = [
        // A foreign family.
        (
            json!({"scope_id": "s1", "source": "notes", "delivery_id": "f1",
                "type": "github.issue.opened"}),
            "unauthorized",
        ),
        // An undeclared family of its own.
        (
            json!({"scope_id": "s1", "source": "notes", "delivery_id": "f2",
                "type": "notes.other"}),
            "undeclared",
        ),
        // A foreign source.
        (
            json!({"scope_id": "s1", "source": "github", "delivery_id": "f3",
                "type": "notes.note.added"}),
            "unauthorized",
        ),
        // An older schema version, a newer one, a foreign one.
        (emission("s1", "f4", "notes.note.v1"), "unreadable_schema"),
        (emission("s1", "f5", "notes.note.v3"), "unreadable_schema"),
        (emission("s1", "f6", "github.issue.v1"), "unreadable_schema"),
        // A root in a scope not its own.
        (emission("s2", "f7", "notes.note.v2"), "unauthorized"),
    ];
    for (em, want) in refusals {
        let e = h
            .call(
                "kv.commit",
                json!({"puts": [{"key": "mine", "value": 1}], "emissions": [em]}),
            )
            .await
            .unwrap_err();
        assert_eq!(code(&e), Some(want), "{em}: {e:?}");
        assert_eq!(h.stored("", "mine").await, Value::Null, "{em}");
    }
    assert_eq!(h.sequence().await, before, "no event was accepted");

    // event.accept: derived only, with the same checks.
    let e = h
        .call(
            "event.accept",
            json!({"event": emission("s1", "r1", "notes.note.v2")}),
        )
        .await
        .unwrap_err();
    assert_eq!(code(&e), Some("invalid"), "{e:?}");
    let own = h.seed("s1", "seed1").await;
    let foreign = h.seed("s2", "seed2").await;
    let seeded = h.sequence().await;
    let mut old = emission("", "r2", "notes.note.v1");
    old["parent_id"] = json!(own);
    let e = h
        .call("event.accept", json!({"event": old}))
        .await
        .unwrap_err();
    assert_eq!(code(&e), Some("unreadable_schema"), "{e:?}");
    let mut alien = emission("", "r3", "notes.note.v2");
    alien["parent_id"] = json!(own);
    alien["type"] = json!("github.issue.opened");
    let e = h
        .call("event.accept", json!({"event": alien}))
        .await
        .unwrap_err();
    assert_eq!(code(&e), Some("unauthorized"), "{e:?}");
    let mut stray = emission("", "r4", "notes.note.v2");
    stray["parent_id"] = json!(own);
    let e = h
        .call(
            "event.accept",
            json!({"event": stray, "puts": [{"namespace": "github", "key": "x", "value": 1}]}),
        )
        .await
        .unwrap_err();
    assert_eq!(code(&e), Some("unauthorized"), "{e:?}");
    // A parent outside its scopes reads as not found.
    let mut outside = emission("", "r5", "notes.note.v2");
    outside["parent_id"] = json!(foreign);
    let e = h
        .call(
            "event.accept",
            json!({"event": outside, "puts": [{"key": "mine", "value": 1}]}),
        )
        .await
        .unwrap_err();
    assert_eq!(code(&e), Some("not_found"), "{e:?}");
    assert_eq!(h.sequence().await, seeded, "no event was accepted");
    assert_eq!(h.stored("", "mine").await, Value::Null);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_outside_its_scopes_are_not_found() {
    let h = Harness::start().await;
    let own = h.seed("s1", "a").await;
    let foreign = h.seed("s2", "b").await;

    let e = h
        .call("state.event", json!({"id": foreign}))
        .await
        .unwrap_err();
    assert_eq!(code(&e), Some("not_found"), "{e:?}");
    let e = h
        .call("state.event", json!({"id": "evt_nope"}))
        .await
        .unwrap_err();
    assert_eq!(code(&e), Some("not_found"), "{e:?}");
    // Scopes the extension sends are ignored.
    let page = h
        .call("state.events", json!({"scopes": ["s2"]}))
        .await
        .unwrap();
    let ids: Vec<&str> = page["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, vec![own.as_str()], "{page}");
    let work = h
        .call("state.work_events", json!({"id": "work_nope"}))
        .await
        .unwrap();
    assert_eq!(work["events"].as_array().map_or(0, Vec::len), 0, "{work}");
    let timers = h
        .call("state.timers", json!({"scope_id": "s2"}))
        .await
        .unwrap();
    assert_eq!(timers["timers"].as_array().map_or(0, Vec::len), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn methods_permissions_timers_and_secrets() {
    let h = Harness::start().await;
    // A host-to-extension method sent to the host, and an unknown one.
    for m in ["route.match", "configure", "no.such"] {
        let e = h.call(m, json!({})).await.unwrap_err();
        assert_eq!(e.rpc().unwrap().code, -32601, "{m}: {e:?}");
    }
    // Permission-gated without the permission, and a surface it does not declare.
    let e = h
        .call("telemetry.capture", json!({"name": "x"}))
        .await
        .unwrap_err();
    assert!(e.is(Code::Undeclared), "{e:?}");
    assert!(
        e.to_string().contains("telemetry.capture") && e.to_string().contains("permission"),
        "{e}"
    );
    let e = h.call("config.base", json!({})).await.unwrap_err();
    assert!(
        e.is(Code::Undeclared) && e.to_string().contains("config.read"),
        "{e}"
    );
    let e = h
        .call("work.cancel", json!({"work_id": "w"}))
        .await
        .unwrap_err();
    assert!(
        e.is(Code::Undeclared) && e.to_string().contains("work_kinds"),
        "{e}"
    );
    // Catalogued, enabled, not served yet: `timer.arm` without `at`.
    let e = h
        .call(
            "timer.arm",
            json!({"recurrence": "notes.daily", "scope_id": "s1", "key": "k"}),
        )
        .await
        .unwrap_err();
    assert!(
        e.is(Code::Unsupported) && e.to_string().contains("timer.arm"),
        "{e}"
    );

    // Timers: only declared recurrences, only its scopes; nothing armed.
    let e = h
        .call(
            "timer.arm",
            json!({"recurrence": "github.poll", "scope_id": "s1", "key": "k", "at": "2030-01-01T00:00:00Z"}),
        )
        .await
        .unwrap_err();
    assert!(e.is(Code::Undeclared), "{e:?}");
    let e = h
        .call(
            "timer.arm",
            json!({"recurrence": "notes.daily", "scope_id": "s2", "key": "k", "at": "2030-01-01T00:00:00Z"}),
        )
        .await
        .unwrap_err();
    assert!(e.is(Code::Unauthorized), "{e:?}");
    let all = h.store("store.timers", json!({})).await;
    assert_eq!(all["timers"].as_array().map_or(0, Vec::len), 0, "{all}");

    // Secrets: only its connections' references, read when asked; the reason for a
    // failure names the reference, never a value.
    let e = h
        .call(
            "secret.resolve",
            json!({"scope_id": "s1", "connection": "someone-else", "names": ["token"]}),
        )
        .await
        .unwrap_err();
    assert!(e.is(Code::Unauthorized), "{e:?}");
    let e = h
        .call(
            "secret.resolve",
            json!({"scope_id": "s2", "connection": "notes-main", "names": ["token"]}),
        )
        .await
        .unwrap_err();
    assert!(e.is(Code::Unauthorized), "{e:?}");
    let ok = h
        .call(
            "secret.resolve",
            json!({"scope_id": "s1", "connection": "notes-main", "names": ["token"]}),
        )
        .await
        .unwrap();
    assert_eq!(ok, json!({"values": {"token": "s3cret"}}));
    let e = h
        .call(
            "secret.resolve",
            json!({"scope_id": "s1", "connection": "notes-main", "names": ["nope"]}),
        )
        .await
        .unwrap_err();
    assert!(e.is(Code::NotFound), "{e:?}");
    let e = h
        .call(
            "secret.resolve",
            json!({"scope_id": "s1", "connection": "notes-main", "names": ["missing"]}),
        )
        .await
        .unwrap_err();
    assert!(e.is(Code::Unavailable), "{e:?}");
    assert!(e.to_string().contains("OC_TEST_SURELY_UNSET_42"), "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn receivers_deliver_only_for_registered_sources() {
    let h = Harness::start().await;
    let delivery = |source: &str, id: &str, text: &str| {
        json!({"delivery": {"source": source, "delivery_id": id, "events": [
            {"type": "notes.note.received", "payload": {"schema": "notes.note.v2", "data": {"text": text}},
             "keys": ["notes:1"]},
            {"type": "notes.note.indexed", "payload": {"schema": "notes.note.v2", "data": {"text": text}}}
        ]}})
    };
    // Accepted durably before the answer; both events, named by the delivery.
    let first = h
        .call("ingress.deliver", delivery("notes/inbox", "m-1", "hello"))
        .await
        .unwrap();
    assert_eq!(first["added"], true, "{first}");
    let events = first["events"].as_array().unwrap();
    assert_eq!(events.len(), 2);
    assert_eq!(events[0]["delivery_id"], "m-1");
    assert_eq!(events[1]["delivery_id"], "m-1#1");
    assert_eq!(events[0]["scope_id"], "s1");
    let stored = h.store("store.events", json!({})).await;
    assert_eq!(stored["events"].as_array().unwrap().len(), 2, "{stored}");

    // The receiver crashed before acknowledging upstream, which redelivers: the same
    // events, nothing added (ingress.push behaves the same).
    let again = h
        .call("ingress.push", delivery("notes/inbox", "m-1", "hello"))
        .await
        .unwrap();
    assert_eq!(again["added"], Value::Null, "{again}");
    assert_eq!(again["events"][0]["id"], events[0]["id"]);
    let stored = h.store("store.events", json!({})).await;
    assert_eq!(stored["events"].as_array().unwrap().len(), 2);

    // The same delivery ID with other content: conflict, nothing kept.
    let e = h
        .call("ingress.deliver", delivery("notes/inbox", "m-1", "changed"))
        .await
        .unwrap_err();
    assert!(e.is(Code::Conflict), "{e:?}");

    // A source the last configure did not register, a family it does not declare, a
    // payload schema that is not the current one: refused, nothing kept.
    let e = h
        .call("ingress.deliver", delivery("notes/other", "m-2", "x"))
        .await
        .unwrap_err();
    assert!(e.is(Code::Unauthorized), "{e:?}");
    let e = h
        .call(
            "ingress.deliver",
            json!({"delivery": {"source": "notes/inbox", "delivery_id": "m-3", "events": [
                {"type": "other.thing", "payload": {"schema": "notes.note.v2", "data": {}}}]}}),
        )
        .await
        .unwrap_err();
    assert!(e.is(Code::Undeclared), "{e:?}");
    let e = h
        .call(
            "ingress.deliver",
            json!({"delivery": {"source": "notes/inbox", "delivery_id": "m-4", "events": [
                {"type": "notes.note.x", "payload": {"schema": "notes.note.v1", "data": {}}}]}}),
        )
        .await
        .unwrap_err();
    assert_eq!(e.code(), Some("unreadable_schema"), "{e:?}");
    let stored = h.store("store.events", json!({})).await;
    assert_eq!(stored["events"].as_array().unwrap().len(), 2);
}
