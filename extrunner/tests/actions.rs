//! `action.submit` and `state.works` through the scoped host, end to end: a broker on
//! a real unix socket, storaged's service on it, the host serving an "extension" over
//! a socket pair, and a `sched` service standing in for schedulerd that answers
//! `sched.cancel` and `sched.retry` with storaged's own `store.work_cancel` and
//! `store.work_retry` (what schedulerd does once no run is left to stop) and counts
//! the calls.

#![allow(clippy::unwrap_used)]

mod common;
use common::{refused, Harness, Sched, Stack};

use extrunner::host::{BoundIdentity, Identity, ScopedHost};
use serde_json::{json, Value};

fn manifest(permissions: &str) -> String {
    format!(
        r#"{{"protocol": [1], "name": "notes", "version": "1.0.0", "command": ["bin/notes"],
            "permissions": {permissions}}}"#
    )
}

impl Harness {
    async fn start(permissions: &str) -> Harness {
        let stack = Stack::start("actions").await;
        let sched = Sched::start(&stack);
        let manifest =
            protocol::manifest::parse_manifest(manifest(permissions).as_bytes()).unwrap();
        let identity = Identity::new(manifest, vec!["s1".into()], Vec::new());
        let host = ScopedHost::new(BoundIdentity::new(identity), stack.bus.clone());
        Harness::serve(stack, Some(sched), host, "notes")
    }

    /// A Work in `scope` keyed `key`, made from a delivery as the router would.
    async fn work(&self, scope: &str, key: &str) -> String {
        self.route(common::note(scope, key), "work").await
    }

    async fn events(&self) -> Vec<Value> {
        let page = self.store("store.events", json!({"after": 0})).await;
        page["events"].as_array().unwrap().clone()
    }
}

fn submit(work_id: &str, action: &str, key: &str) -> Value {
    json!({"scope_id": "s1", "work_id": work_id, "action": action, "caller": "octocat",
        "key": key, "input": {"comment": 7}})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stop_and_retry_are_recorded_once_and_performed_once() {
    let h = Harness::start(r#"["action.submit"]"#).await;
    let w = h.work("s1", "notes:1").await;
    h.store(
        "store.attempt_start",
        json!({"work_id": w, "executor": "x", "lease_owner": "sched-1", "lease_ttl_ms": 60000}),
    )
    .await;
    let before = h.events().await.len();

    // What the host refuses, with nothing recorded and nothing asked of the scheduler.
    let mut other_scope = submit(&w, "stop", "k0");
    other_scope["scope_id"] = json!("s2");
    let (code, said) = refused(h.call("action.submit", other_scope).await);
    assert_eq!(code, "unauthorized", "{said}");
    let (code, said) = refused(
        h.call("action.submit", submit("work_nope", "stop", "k0"))
            .await,
    );
    assert_eq!(code, "not_found", "{said}");
    let elsewhere = h.work("s2", "notes:2").await;
    let (code, said) = refused(
        h.call("action.submit", submit(&elsewhere, "stop", "k0"))
            .await,
    );
    assert_eq!(
        (code.as_str(), said.as_str()),
        (
            "not_found",
            format!("no Work {elsewhere} in scope s1").as_str()
        )
    );
    let (code, said) = refused(h.call("action.submit", submit(&w, "merge", "k0")).await);
    assert_eq!(code, "not_found", "{said}");
    let (code, said) = refused(h.call("action.submit", submit(&w, "retry", "k0")).await);
    assert_eq!(code, "conflict", "{said}");
    assert!(said.contains("is running"), "{said}");
    assert_eq!(
        h.events().await.len(),
        before + 1,
        "only the other scope's Work"
    );
    assert!(h.asked().is_empty());

    // stop: recorded as core.action.stop, attached to the Work, and the Work cancelled.
    let stopped = h
        .call("action.submit", submit(&w, "stop", "comment/7"))
        .await
        .unwrap();
    assert_eq!(stopped["added"], true);
    assert_eq!(stopped["message"], format!("stopped Work {w}"));
    assert_eq!(h.state(&w).await, "cancelled");
    let asked = h.asked();
    assert_eq!(asked.len(), 1);
    assert_eq!(asked[0].0, "sched.cancel");
    assert_eq!(
        asked[0].1,
        json!({"work_id": w, "reason": "stop by notes:octocat"})
    );
    let event = h
        .store("store.event", json!({"id": stopped["event"]}))
        .await["event"]
        .clone();
    assert_eq!(event["type"], "core.action.stop");
    assert_eq!(event["source"], "core/actions/notes");
    assert_eq!(event["delivery_id"], "comment/7");
    assert_eq!(event["keys"], json!([]));
    assert_eq!(
        event["payload"],
        json!({"action": "stop", "provider": "core", "caller": "notes:octocat", "work_id": w,
            "input": {"comment": 7}})
    );
    let unrouted = h
        .store("store.unrouted", json!({"after": 0, "limit": 100}))
        .await;
    let pending: Vec<&Value> = unrouted["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["id"] == stopped["event"])
        .collect();
    assert!(
        pending.is_empty(),
        "the action's Event is never left for the router"
    );
    let of_work = h.call("state.work_events", json!({"id": w})).await.unwrap();
    assert!(
        of_work["events"]
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["id"] == stopped["event"]),
        "{of_work}"
    );

    // The same key again: the same Event, added false, nothing done again.
    let again = h
        .call("action.submit", submit(&w, "stop", "comment/7"))
        .await
        .unwrap();
    assert_eq!(again["event"], stopped["event"]);
    assert_eq!(again["added"], false);
    assert_eq!(h.asked().len(), 1);

    // retry: the cancelled Work runs again, on the inputs it was cancelled with.
    let retried = h
        .call("action.submit", submit(&w, "retry", "comment/8"))
        .await
        .unwrap();
    assert_eq!(retried["added"], true);
    assert_eq!(retried["message"], format!("Work {w} will run again"));
    assert_eq!(h.state(&w).await, "pending");
    let asked = h.asked();
    assert_eq!(asked.len(), 2);
    assert_eq!(asked[1].0, "sched.retry");
    assert_eq!(asked[1].1["reason"], "retry by notes:octocat");
    assert!(asked[1].1["seq"].is_i64(), "{:?}", asked[1].1);
    // Queued already: refused, nothing recorded.
    let n = h.events().await.len();
    let (code, said) = refused(
        h.call("action.submit", submit(&w, "retry", "comment/9"))
            .await,
    );
    assert_eq!(code, "conflict", "{said}");
    assert_eq!(h.events().await.len(), n);
    assert_eq!(h.asked().len(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn submit_needs_its_permission_and_state_works_finds_a_work_by_key() {
    let h = Harness::start("[]").await;
    let w = h.work("s1", "notes:1").await;
    h.work("s1", "notes:2").await;
    let outside = h.work("s2", "notes:3").await;
    let (code, said) = refused(h.call("action.submit", submit(&w, "stop", "k")).await);
    assert_eq!(code, "undeclared", "{said}");
    assert!(said.contains("\"action.submit\""), "{said}");

    let found = h
        .call("state.works", json!({"key": "notes:1"}))
        .await
        .unwrap();
    let works = found["works"].as_array().unwrap();
    assert_eq!(works.len(), 1, "{found}");
    assert_eq!(works[0]["id"], w);
    assert_eq!(works[0]["state"], "pending");
    assert_eq!(works[0]["keys"], json!(["notes:1"]));
    let all = h.call("state.works", json!({})).await.unwrap();
    assert_eq!(all["works"].as_array().unwrap().len(), 2, "{all}");
    // Another scope's Work, by its key or by the scope: an empty page.
    let none = h
        .call("state.works", json!({"key": "notes:3"}))
        .await
        .unwrap();
    assert_eq!(none, json!({}));
    let none = h
        .call("state.works", json!({"scope_id": "s2"}))
        .await
        .unwrap();
    assert_eq!(none, json!({}));
    let by_state = h
        .call("state.works", json!({"states": ["running", "idle"]}))
        .await
        .unwrap();
    assert_eq!(by_state, json!({}));
    let _ = outside;
    let (code, _) = refused(h.call("state.works", json!({"limit": 5000})).await);
    assert_eq!(code, "invalid");
}
