#![allow(clippy::unwrap_used)]
//! `event.render_owned` with real processes: a broker on a temp socket, storaged's
//! service on it, and a runner (in this process) supervising the `oc-test-extension`
//! package, which is both an executor (so it may ask) and the owner of the family
//! `testext.note` (so it renders). Its `testext.render_owned` method asks the host,
//! and the host forwards each Event to the owner's `event.render`.

mod common;
use common::{within, Stack, HANG};

use extrunner::process::SupervisorOptions;
use extrunner::runner::{Runner, RunnerConfig};
use protocol::manifest::MANIFEST_FILE;
use serde_json::{json, Value};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

const TESTEXT: &str = env!("CARGO_BIN_EXE_oc-test-extension");
const MANIFEST: &str = include_str!("../src/bin/testext.json");

struct Harness {
    stack: Stack,
    runner: Arc<Runner>,
}

impl Harness {
    async fn start(test: &str) -> Harness {
        let stack = Stack::start(&format!("render-{test}")).await;
        let dir = &stack.dir;
        let pkg = dir.join("etc/extensions/testext");
        std::fs::create_dir_all(&pkg).unwrap();
        std::fs::write(pkg.join(MANIFEST_FILE), MANIFEST).unwrap();
        std::fs::copy(TESTEXT, pkg.join("oc-test-extension")).unwrap();
        // Scope s1 binds the test executor with the connection `conn1`; s2 does not
        // use the package at all.
        let config = protocol::config::Config::parse(&json!({
            "connections": [{"name": "conn1", "type": "testconn"}],
            "scopes": [
                {"id": "s1", "bindings": [
                    {"name": "b", "executor": "testext-exec", "connection": "conn1"}]},
                {"id": "s2"}
            ]
        }))
        .unwrap();
        let runner = Runner::load(RunnerConfig {
            installed_root: dir.join("etc/extensions"),
            bundled_root: None,
            state_dir: dir.join("state"),
            grants: HashMap::new(),
            options: SupervisorOptions {
                backoff_initial: Duration::from_millis(10),
                grace: Duration::from_millis(500),
                ..SupervisorOptions::default()
            },
            host_bus: Some(stack.bus.clone()),
            initial: Some((config, "g1".into())),
        })
        .shared();
        within(runner.ready()).await;
        Harness { stack, runner }
    }

    /// Accept one Event straight into the store: its ID.
    async fn accept(&self, scope: &str, t: &str, schema: &str, data: Value) -> String {
        static N: AtomicU32 = AtomicU32::new(0);
        let n = N.fetch_add(1, Ordering::SeqCst);
        let answer = self
            .stack
            .store(
                "store.events_accept",
                json!({"events": [{"scope_id": scope, "type": t, "source": "testext",
                    "delivery_id": format!("d-{n}"), "schema": schema,
                    "payload": data}]}),
            )
            .await;
        answer["events"][0]["id"].as_str().unwrap().to_owned()
    }

    /// The executor (the test extension) asks the host to render `ids`.
    async fn render(&self, ids: &[String], extra: Value) -> Value {
        let mut params = json!({
            "events": ids.iter().map(|id| json!({"id": id, "type": "x"})).collect::<Vec<_>>(),
        });
        for (k, v) in extra.as_object().unwrap() {
            params[k] = v.clone();
        }
        let reply = within(self.runner.call(
            "testext",
            "testext.render_owned",
            &params,
            false,
            HANG,
            None,
        ))
        .await
        .unwrap();
        serde_json::from_str(reply.get()).unwrap()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_event_is_rendered_by_its_owner_or_left_to_the_generic_rendering() {
    let h = Harness::start("owned").await;
    let ok = h
        .accept(
            "s1",
            "testext.note.added",
            "testext.note.v1",
            json!({"title": "hello"}),
        )
        .await;
    let refused = h
        .accept(
            "s1",
            "testext.note.added",
            "testext.note.v1",
            json!({"title": "no", "fail": true}),
        )
        .await;
    let unowned = h
        .accept("s1", "tracker.comment", "tracker.v1", json!({"body": "hi"}))
        .await;
    let unreadable = h
        .accept(
            "s1",
            "testext.note.added",
            "testext.note.v9",
            json!({"title": "from the future"}),
        )
        .await;
    let long = h
        .accept(
            "s1",
            "testext.note.added",
            "testext.note.v1",
            json!({"title": "long", "text": "é", "repeat": 500}),
        )
        .await;
    let ids = [&ok, &refused, &unowned, &unreadable, &long].map(|s| s.to_string());
    let answer = h
        .render(&ids, json!({"connection": "conn1", "max_bytes": 200}))
        .await;
    let events = answer["ok"]["events"]
        .as_array()
        .unwrap_or_else(|| panic!("{answer}"));
    assert_eq!(events.len(), 5, "{answer}");
    for (e, id) in events.iter().zip(&ids) {
        assert_eq!(&e["id"], id, "in order: {answer}");
    }
    // Forwarded to the owner, with the connection and the bound.
    assert_eq!(
        events[0]["text"],
        "rendered by testext: testext.note.added hello (work , connection conn1, max 200)"
    );
    assert_eq!(events[0]["rendered_by"], "testext");
    assert!(events[0].get("truncated").is_none(), "{answer}");
    // An owner that errs, no owner, an unreadable payload: no text, no renderer.
    for e in &events[1..4] {
        assert!(e.get("text").is_none(), "{answer}");
        assert!(e.get("rendered_by").is_none(), "{answer}");
    }
    // An owner that ignores the bound is cut by the host, at a character boundary.
    let text = events[4]["text"].as_str().unwrap();
    assert!(text.len() <= 200 && text.len() > 190, "{}", text.len());
    assert!(text.starts_with("rendered by testext: testext.note.added long"));
    assert!(text.ends_with('é'), "{text}");
    assert_eq!(events[4]["truncated"], true);
    within(h.runner.stop_all()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_events_of_its_own_scopes_and_at_most_the_limit() {
    let h = Harness::start("scopes").await;
    let mine = h
        .accept(
            "s1",
            "testext.note.added",
            "testext.note.v1",
            json!({"title": "mine"}),
        )
        .await;
    let other = h
        .accept(
            "s2",
            "testext.note.added",
            "testext.note.v1",
            json!({"title": "not mine"}),
        )
        .await;
    let answer = h.render(&[mine.clone(), other.clone()], json!({})).await;
    assert_eq!(answer["error"], "unauthorized", "{answer}");
    let message = answer["message"].as_str().unwrap();
    assert!(message.contains(&other), "{message}");
    // A connection not bound to the executor's bindings.
    let answer = h
        .render(
            std::slice::from_ref(&mine),
            json!({"connection": "someone-else"}),
        )
        .await;
    assert_eq!(answer["error"], "unauthorized", "{answer}");
    // More Events than the limit: refused, naming it.
    let many: Vec<String> = (0..101).map(|_| mine.clone()).collect();
    let answer = h.render(&many, json!({})).await;
    assert_eq!(answer["error"], "invalid", "{answer}");
    assert!(
        answer["message"]
            .as_str()
            .unwrap()
            .contains("MAX_RENDER_EVENTS"),
        "{answer}"
    );
    // Its own, alone: rendered (max_bytes 0 is the spec's bound).
    let answer = h.render(&[mine], json!({})).await;
    assert_eq!(
        answer["ok"]["events"][0]["text"],
        "rendered by testext: testext.note.added mine (work , connection , max 32768)",
        "{answer}"
    );
    within(h.runner.stop_all()).await;
}
