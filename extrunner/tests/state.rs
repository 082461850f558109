//! The Work and scope reads (`state.work`, `state.executions`, `state.waits`,
//! `state.scopes`, `state.scope`) and `work.cancel` through the scoped host, end to
//! end: a broker on a real unix socket, storaged's service on it, the host serving an
//! "extension" over a socket pair, bound as the runner binds it (its identity and
//! configure params from the configuration document), and a `sched` service standing
//! in for schedulerd that answers `sched.cancel` with storaged's own
//! `store.work_cancel` (what schedulerd does once no run is left to stop) and records
//! what it was asked.

#![allow(clippy::unwrap_used)]

mod common;
use common::{refused, Harness, Sched, Stack};

use serde_json::{json, Value};

/// `notes`: one entry type, a route handler with the Work kind `notes-sweep`, and an
/// executor.
const MANIFEST: &str = r#"{
  "protocol": [1], "name": "notes", "version": "1.0.0", "command": ["bin/notes"],
  "provides": {
    "extensions": [{"type": "notes"}],
    "routes": [{"handler": "notes"}],
    "work_kinds": [{"name": "notes-sweep", "handler": "notes"}],
    "executors": [{"name": "notes-exec", "pool": "jobs"}]
  }
}"#;

/// s1 uses notes (an entry); s2 does not; s3 holds a notes entry but is disabled.
fn document() -> Value {
    json!({
        "scopes": [
            {"id": "s1",
             "entries": [{"type": "notes", "name": "main", "config": {"folder": "inbox"}}],
             "routes": [
                {"handler": "notes", "binding": "b", "config": {"folder": "inbox"}},
                {"handler": "github", "binding": "c", "config": {"repo": "acme/site"}}],
             "bindings": [
                {"name": "b", "executor": "notes-exec", "config": {"depth": 2}},
                {"name": "c", "executor": "claude-code", "operations": ["notes.read"],
                 "config": {"model": "opus"}}]},
            {"id": "s2",
             "entries": [{"type": "github", "name": "gh"}],
             "bindings": [{"name": "b", "executor": "claude-code"}]},
            {"id": "s3", "enabled": false,
             "entries": [{"type": "notes", "name": "old"}]}
        ]
    })
}

impl Harness {
    async fn start() -> Harness {
        let stack = Stack::start("state").await;
        let sched = Sched::start(&stack);
        // Bound as the runner binds a package to a configuration generation.
        let host = stack.bound(MANIFEST, &document(), &["s1"]);
        Harness::serve(stack, Some(sched), host, "notes")
    }

    /// A Work of `kind` in `scope` keyed `key`, made from a delivery as the router
    /// would.
    async fn work(&self, scope: &str, kind: &str, key: &str) -> String {
        self.route(common::note(scope, key), kind).await
    }

    /// Start `work`'s attempt and settle it as `outcome` (with `wait` when waiting).
    async fn settle(&self, work: &str, outcome: &str, wait: Value) {
        let started = self
            .store(
                "store.attempt_start",
                json!({"work_id": work, "executor": "notes-exec", "lease_owner": "sched-1",
                    "lease_ttl_ms": 60000}),
            )
            .await;
        let mut settle = json!({"execution_id": started["execution_id"],
            "epoch": started["epoch"], "outcome": outcome});
        if !wait.is_null() {
            settle["wait"] = wait;
        }
        self.store("store.attempt_settle", settle).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn work_and_executions_within_reach_and_nothing_beyond() {
    let h = Harness::start().await;
    let mine = h.work("s1", "work", "notes:1").await;
    h.settle(&mine, "completed", Value::Null).await;
    let elsewhere = h.work("s2", "work", "notes:2").await;
    h.settle(&elsewhere, "completed", Value::Null).await;
    // Of its own kind, where its entry is not: still its to read.
    let own_kind = h.work("s2", "notes-sweep", "notes:3").await;

    let work = h.ok("state.work", json!({"id": mine})).await["work"].clone();
    assert_eq!(work["id"], mine);
    assert_eq!(work["scope_id"], "s1");
    assert_eq!(work["kind"], "work");
    assert_eq!(work["state"], "completed");
    assert_eq!(work["keys"], json!(["notes:1"]));
    let executions = h.ok("state.executions", json!({"work_id": mine})).await;
    let executions = executions["executions"].as_array().unwrap().clone();
    assert_eq!(executions.len(), 1, "{executions:?}");
    assert_eq!(executions[0]["work_id"], mine);
    assert_eq!(executions[0]["attempt"], 1);
    assert_eq!(executions[0]["executor"], "notes-exec");
    assert_eq!(executions[0]["state"], "completed");
    assert_eq!(executions[0]["outcome"], "completed");
    assert!(executions[0]["ended_at"].is_string(), "{executions:?}");

    let work = h.ok("state.work", json!({"id": own_kind})).await["work"].clone();
    assert_eq!(
        (work["scope_id"].as_str(), work["kind"].as_str()),
        (Some("s2"), Some("notes-sweep"))
    );
    assert_eq!(work["state"], "pending");
    assert_eq!(
        h.ok("state.executions", json!({"work_id": own_kind})).await,
        json!({})
    );
    // `state.works` lists the same: its scopes' Work, and its own kind anywhere when it
    // asks for that kind; never another scope's Work of another kind.
    let ids = |v: Value| -> Vec<String> {
        v["works"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|w| w["id"].as_str().map(str::to_owned))
            .collect()
    };
    let listed = ids(h.ok("state.works", json!({"limit": 100})).await);
    assert!(
        listed.contains(&mine) && !listed.contains(&elsewhere),
        "{listed:?}"
    );
    let listed = ids(h
        .ok("state.works", json!({"kind": "notes-sweep", "limit": 100}))
        .await);
    assert_eq!(listed, vec![own_kind.clone()]);
    let listed = ids(h
        .ok("state.works", json!({"scope_id": "s2", "limit": 100}))
        .await);
    assert!(
        listed.is_empty(),
        "another scope without its kind: {listed:?}"
    );
    let listed = ids(h
        .ok(
            "state.works",
            json!({"scope_id": "s2", "kind": "notes-sweep", "limit": 100}),
        )
        .await);
    assert_eq!(listed, vec![own_kind.clone()]);

    // Another scope's Work of another kind reads as no Work at all: the same answer
    // as an ID that names nothing.
    let (code, said) = refused(h.call("state.work", json!({"id": elsewhere})).await);
    assert_eq!(
        (code.as_str(), said),
        ("not_found", format!("no Work {elsewhere}"))
    );
    let (code, said) = refused(h.call("state.work", json!({"id": "work_nope"})).await);
    assert_eq!(
        (code.as_str(), said.as_str()),
        ("not_found", "no Work work_nope")
    );
    for method in ["state.executions", "state.waits"] {
        assert_eq!(
            h.ok(method, json!({"work_id": elsewhere})).await,
            json!({}),
            "{method}"
        );
        assert_eq!(
            h.ok(method, json!({"work_id": "work_nope"})).await,
            json!({}),
            "{method}"
        );
        let (code, _) = refused(h.call(method, json!({"work_id": ""})).await);
        assert_eq!(code, "invalid", "{method}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waits_carry_their_plan_to_their_owner_only() {
    let h = Harness::start().await;
    let plan = json!({"kind": "ask", "ask_id": "a-0123456789ab",
        "question": "Ship it?", "choices": ["yes", "no"]});
    let asking = h.work("s1", "work", "notes:1").await;
    h.settle(
        &asking,
        "waiting",
        json!({"owner": "notes", "description": "Ship it?",
            "keys": ["notes/ask/a-0123456789ab"], "types": ["core.action.answer"],
            "plan": plan, "due_ms": 4_102_444_800_000_i64}),
    )
    .await;
    let other = h.work("s1", "work", "notes:2").await;
    h.settle(
        &other,
        "waiting",
        json!({"owner": "human", "description": "approval of github.merge",
            "keys": ["human/gate/g-1"], "types": ["core.action.approve"],
            "plan": {"kind": "gate", "gate_id": "g-1"}}),
    )
    .await;
    let outside = h.work("s2", "work", "notes:3").await;
    h.settle(
        &outside,
        "waiting",
        json!({"owner": "notes", "description": "elsewhere", "keys": ["k"],
            "plan": {"kind": "ask"}}),
    )
    .await;

    let waits = h.ok("state.waits", json!({"work_id": asking})).await;
    let waits = waits["waits"].as_array().unwrap().clone();
    assert_eq!(waits.len(), 1, "{waits:?}");
    let w = &waits[0];
    assert_eq!(w["work_id"], asking);
    assert_eq!(w["state"], "active");
    assert_eq!(w["owner"], "notes");
    assert_eq!(w["description"], "Ship it?");
    assert_eq!(w["keys"], json!(["notes/ask/a-0123456789ab"]));
    assert_eq!(w["types"], json!(["core.action.answer"]));
    assert_eq!(w["plan"], plan);
    assert_eq!(w["due_at"], "2100-01-01T00:00:00.000Z");
    assert!(w["id"].as_str().is_some_and(|id| !id.is_empty()), "{w}");
    // The Work's execution is parked on it.
    let executions = h.ok("state.executions", json!({"work_id": asking})).await;
    assert_eq!(executions["executions"][0]["state"], "waiting");
    assert_eq!(executions["executions"][0]["outcome"], "waiting");

    // Another owner's Wait: everything but its plan.
    let waits = h.ok("state.waits", json!({"work_id": other})).await;
    let w = &waits["waits"][0];
    assert_eq!(w["owner"], "human");
    assert_eq!(w["description"], "approval of github.merge");
    assert_eq!(w["types"], json!(["core.action.approve"]));
    assert!(w.get("plan").is_none(), "{w}");

    // Another scope's Work: no Waits.
    assert_eq!(
        h.ok("state.waits", json!({"work_id": outside})).await,
        json!({})
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scopes_are_those_that_use_it_with_only_its_own_configs() {
    let h = Harness::start().await;
    let scopes = h.ok("state.scopes", json!({})).await;
    let expected_s1 = json!({
        "id": "s1",
        "entries": [{"scope_id": "s1", "type": "notes", "name": "main",
            "config": {"folder": "inbox"}}],
        "routes": [
            {"handler": "notes", "binding": "b", "config": {"folder": "inbox"}},
            {"handler": "github", "binding": "c"}],
        "bindings": [
            {"name": "b", "executor": "notes-exec", "config": {"depth": 2}},
            {"name": "c", "executor": "claude-code", "operations": ["notes.read"]}]
    });
    let expected_s3 = json!({
        "id": "s3", "disabled": true,
        "entries": [{"scope_id": "s3", "type": "notes", "name": "old"}]
    });
    assert_eq!(scopes, json!({"scopes": [expected_s1, expected_s3]}));

    assert_eq!(
        h.ok("state.scope", json!({"id": "s1"})).await,
        json!({"scope": expected_s1})
    );
    assert_eq!(
        h.ok("state.scope", json!({"id": "s3"})).await,
        json!({"scope": expected_s3})
    );
    // A scope that does not use it reads as one that does not exist.
    let (code, said) = refused(h.call("state.scope", json!({"id": "s2"})).await);
    assert_eq!((code.as_str(), said.as_str()), ("not_found", "no scope s2"));
    let (code, said) = refused(h.call("state.scope", json!({"id": "s9"})).await);
    assert_eq!((code.as_str(), said.as_str()), ("not_found", "no scope s9"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_is_for_its_own_kinds_only() {
    let h = Harness::start().await;
    let own = h.work("s1", "notes-sweep", "notes:1").await;
    let own_elsewhere = h.work("s2", "notes-sweep", "notes:2").await;
    let other_kind = h.work("s1", "work", "notes:3").await;
    let other_elsewhere = h.work("s2", "work", "notes:4").await;

    // Refused, with nothing asked of the scheduler and nothing changed.
    let (code, said) = refused(h.call("work.cancel", json!({"work_id": other_kind})).await);
    assert_eq!(code, "unauthorized", "{said}");
    assert!(
        said.contains("\"work\"")
            && said.contains("notes-sweep")
            && said.contains("nothing was done"),
        "{said}"
    );
    let (code, said) = refused(
        h.call("work.cancel", json!({"work_id": other_elsewhere}))
            .await,
    );
    assert_eq!(
        (code.as_str(), said),
        ("not_found", format!("no Work {other_elsewhere}"))
    );
    let (code, said) = refused(h.call("work.cancel", json!({"work_id": "work_nope"})).await);
    assert_eq!(
        (code.as_str(), said.as_str()),
        ("not_found", "no Work work_nope")
    );
    let (code, said) = refused(
        h.call(
            "work.cancel",
            json!({"work_id": own, "reason": "r".repeat(extrunner::host::MAX_CANCEL_REASON_BYTES + 1)}),
        )
        .await,
    );
    assert_eq!(code, "invalid", "{said}");
    assert!(said.contains("over the limit of 1024"), "{said}");
    assert!(h.asked().is_empty(), "{:?}", h.asked());
    assert_eq!(h.state(&other_kind).await, "pending");
    assert_eq!(h.state(&other_elsewhere).await, "pending");
    assert_eq!(h.state(&own).await, "pending");

    // Its own kind in its scope: cancelled through the scheduler, naming it.
    let r = h
        .ok(
            "work.cancel",
            json!({"work_id": own, "reason": "entry removed"}),
        )
        .await;
    assert_eq!(r, json!({"cancelled": true}));
    assert_eq!(h.state(&own).await, "cancelled");
    assert_eq!(
        h.asked(),
        vec![(
            "sched.cancel".to_owned(),
            json!({"work_id": own, "reason": "cancelled by notes: entry removed"})
        )]
    );
    // Already ended: nothing to cancel, nothing asked.
    let r = h.ok("work.cancel", json!({"work_id": own})).await;
    assert_eq!(r, json!({}));
    assert_eq!(h.asked().len(), 1);

    // Its own kind where its entry is not: cancelled too.
    let r = h.ok("work.cancel", json!({"work_id": own_elsewhere})).await;
    assert_eq!(r, json!({"cancelled": true}));
    assert_eq!(h.state(&own_elsewhere).await, "cancelled");
    let asked = h.asked();
    assert_eq!(asked.len(), 2);
    assert_eq!(
        asked[1].1,
        json!({"work_id": own_elsewhere, "reason": "cancelled by notes"})
    );
}
