//! Waits in-process: an attempt that ends waiting parks its Work on a Wait; an event
//! with the Wait's key and type wakes it (in the routing write) and the attempt
//! resumes with that event; an event of another type does not; a Wait whose owner
//! filters its wakes (`dependency.filter`) wakes only on the events the owner takes.

#![allow(clippy::unwrap_used)]

mod common;
use common::*;

use busapi::store::WaitsRequest;
use serde_json::json;

/// A Sched whose executor ends every turn waiting for `pr:9` checks, and whose
/// `dependency.filter` takes only successful checks.
async fn parked(name: &str, filtered: bool) -> (Sched, schedulerd::starter::Starter, String) {
    let mut shell = shell();
    if filtered {
        shell.surfaces.dependency_filter = true;
        shell.operations = vec![busapi::ext::OperationInfo {
            name: "shell.await".into(),
            kind: "wait".into(),
            ..Default::default()
        }];
    }
    let s = Sched::new(name, vec![hook(), shell]).await;
    s.ext.answer_with(|c| {
        if let Some(a) = route_match(c) {
            return a;
        }
        Ok(match c.method.as_str() {
            "executor.wait" => json!({"outcome": "waiting", "wait": {
                "keys": ["pr:9"], "types": ["hook.checks"],
                "description": "checks on PR 9", "plan": {"head": "abc"}}}),
            "dependency.filter" => json!({
                "matched": params(c)["event"]["payload"]["data"]["conclusion"] == "success"}),
            _ => json!({}),
        })
    });
    s.configure(config()).await;
    let (work_id, _) = s.routed_work("hook:9").await;
    let starter = s.starter("h1").await;
    assert_eq!(starter.pass().await.unwrap(), 1);
    s.ext
        .wait_for("the waiting Work's annotation", |c| {
            c.method == "work.annotate" && params(c)["work"]["state"] == "waiting"
        })
        .await;
    (s, starter, work_id)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_parked_work_is_woken_by_a_matching_event_and_resumes_with_it() {
    let (s, starter, work_id) = parked("waits", false).await;
    let work = s.work(&work_id).await;
    assert_eq!(work.state, "waiting");
    let waits = s
        .call(&WaitsRequest {
            work_id: Some(work_id.clone()),
            ..WaitsRequest::default()
        })
        .await
        .waits;
    assert_eq!(waits.len(), 1);
    let wait = &waits[0];
    assert_eq!(
        (wait.state.as_str(), wait.owner.as_str()),
        ("active", "shell")
    );
    assert_eq!(wait.description, "checks on PR 9");

    // Another type with the Wait's key does not wake it.
    let other = s.accept("demo", "hook.comment", &["pr:9"], json!({})).await;
    s.route().await;
    assert_eq!(
        s.routing(other).await.disposition.as_deref(),
        Some("unmatched:drop")
    );
    assert_eq!(s.work(&work_id).await.state, "waiting");

    // The checks do: the event goes to the Work and wakes its Wait, as recorded.
    let checks = s
        .accept(
            "demo",
            "hook.checks",
            &["pr:9"],
            json!({"conclusion": "success"}),
        )
        .await;
    let pass = s.route().await;
    assert_eq!((pass.routed, pass.to_work), (1, 1));
    let routing = s.routing(checks).await;
    assert_eq!(
        routing.records[0].reason,
        format!("the Work's Wait {} is for this event", wait.id)
    );
    assert_eq!(
        routing.records[0].work_id.as_deref(),
        Some(work_id.as_str())
    );
    assert_eq!(s.work(&work_id).await.state, "woken");
    let woken = s
        .call(&WaitsRequest {
            work_id: Some(work_id.clone()),
            ..WaitsRequest::default()
        })
        .await
        .waits;
    assert_eq!(woken[0].state, "woken");
    assert_eq!(woken[0].wake_seq, Some(checks));

    // The same attempt resumes, with the event that woke it (started by a starter
    // of the same host that observes nothing: the parking one forgets the attempt
    // only after its settle returns).
    drop(starter);
    let starter = s.starter("h1").await;
    assert_eq!(starter.pass().await.unwrap(), 1);
    let resume = s
        .ext
        .wait_for("executor.resume", |c| c.method == "executor.resume")
        .await;
    let p = params(&resume);
    let ex = s.executions(&work_id).await;
    assert_eq!(ex.len(), 1, "one attempt, resumed: {ex:?}");
    assert_eq!(p["execution_id"], json!(ex[0].id));
    assert_eq!(p["inputs"].as_array().unwrap().len(), 1, "{p}");
    assert_eq!(p["inputs"][0]["sequence"], json!(checks));
    assert_eq!(s.ext.calls_of("executor.run").len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wait_whose_owner_filters_wakes_only_on_the_events_it_takes() {
    let (s, _starter, work_id) = parked("waits-filter", true).await;
    let failed = s
        .accept(
            "demo",
            "hook.checks",
            &["pr:9"],
            json!({"conclusion": "failure"}),
        )
        .await;
    s.route().await;
    // The owner did not take it: it routes as it would otherwise.
    assert_eq!(
        s.routing(failed).await.disposition.as_deref(),
        Some("unmatched:drop")
    );
    assert_eq!(s.work(&work_id).await.state, "waiting");
    let asked = s.ext.calls_of("dependency.filter");
    assert_eq!(asked.len(), 1);
    let p = params(&asked[0]);
    assert_eq!(p["operation"], "shell.await");
    assert_eq!(p["work_id"], json!(work_id));
    assert_eq!(p["plan"], json!({"head": "abc"}));
    assert_eq!(p["event"]["sequence"], json!(failed));
    assert!(asked[0].in_transaction);

    let passed = s
        .accept(
            "demo",
            "hook.checks",
            &["pr:9"],
            json!({"conclusion": "success"}),
        )
        .await;
    s.route().await;
    assert_eq!(
        s.routing(passed).await.records[0].work_id.as_deref(),
        Some(work_id.as_str())
    );
    assert_eq!(s.work(&work_id).await.state, "woken");
}
