//! Starts in-process: Work with pending input starts an attempt under a lease, on
//! its binding's executor (`executor.run` with the binding, its inputs and its
//! toolbelt token), and the result settles it; a launch the executor refuses fails
//! the attempt under the retry policy; Work whose binding is gone does not start,
//! and says why.

#![allow(clippy::unwrap_used)]

mod common;
use common::*;

use protocol::RpcError;
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pending_work_starts_an_attempt_on_its_binding_and_its_result_settles_it() {
    let s = Sched::new("starts", vec![hook(), shell()]).await;
    let release = s
        .ext
        .runs_until_released(json!({"outcome": "completed", "summary": "done"}));
    s.configure(config()).await;
    let (work_id, seq) = s.routed_work("hook:7").await;
    let starter = s.starter("h1").await;

    assert_eq!(starter.pass().await.unwrap(), 1);
    let run = s
        .ext
        .wait_for("executor.run", |c| c.method == "executor.run")
        .await;
    assert_eq!(run.name, "shell");
    let run = &params(&run)["run"];
    assert_eq!(run["binding"]["name"], "run");
    assert_eq!(run["executor"], "shell");
    assert_eq!(run["config"], json!({"command": ["true"]}));
    assert_eq!(run["work"]["id"], json!(work_id));
    assert_eq!(run["inputs"][0]["sequence"], json!(seq));
    assert_eq!(run["attempt"], 1);

    // The store shows the attempt running under its lease, on this host.
    let ex = s.executions(&work_id).await;
    assert_eq!(ex.len(), 1, "{ex:?}");
    assert_eq!(ex[0].state, "running");
    assert_eq!(
        (ex[0].binding.as_str(), ex[0].executor.as_str()),
        ("run", "shell")
    );
    assert_eq!(ex[0].host, "h1");
    assert_eq!(run["execution_id"], json!(ex[0].id));
    assert_eq!(run["epoch"], json!(ex[0].epoch));
    assert!(ex[0].lease_owner.ends_with("@h1"), "{}", ex[0].lease_owner);
    // Its toolbelt token names the execution at its epoch.
    let token = run["toolbelt"]["token"].as_str().unwrap();
    assert!(
        token.starts_with(&format!("oct1.{work_id}.{}.{}.", ex[0].id, ex[0].epoch)),
        "{token}"
    );
    assert_eq!(s.work(&work_id).await.state, "running");
    assert_eq!(
        starter.snapshot().0.get(&work_id).map(String::as_str),
        Some("")
    );
    // Observed already: a second pass starts nothing more.
    assert_eq!(starter.pass().await.unwrap(), 0);

    // The executor's result settles the attempt; the packages that show Work are told.
    release.notify_one();
    s.ext
        .wait_for("the completed Work's annotation", |c| {
            c.method == "work.annotate" && params(c)["work"]["state"] == "completed"
        })
        .await;
    let ex = s.executions(&work_id).await;
    assert_eq!(ex[0].state, "completed");
    assert_eq!(ex[0].result["summary"], "done");
    assert_eq!(s.work(&work_id).await.state, "completed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_launch_the_executor_refuses_fails_the_attempt_and_the_work_retries_later() {
    let s = Sched::new("starts-refused", vec![hook(), shell()]).await;
    s.ext.answer_with(|c| {
        if let Some(a) = route_match(c) {
            return a;
        }
        match c.method.as_str() {
            "executor.run" => Err(RpcError::authored("invalid", "no such command")),
            _ => Ok(json!({})),
        }
    });
    s.configure(config()).await;
    let (work_id, _) = s.routed_work("hook:7").await;
    let starter = s.starter("h1").await;
    assert_eq!(starter.pass().await.unwrap(), 1);
    s.ext
        .wait_for("the failed attempt's annotation", |c| {
            c.method == "work.annotate" && params(c)["attempt"]["state"] == "failed"
        })
        .await;
    let ex = s.executions(&work_id).await;
    assert_eq!(ex[0].state, "failed");
    let error = ex[0].result["error"].as_str().unwrap();
    assert!(
        error.starts_with("executor.run: ") && error.contains("no such command"),
        "{error}"
    );
    let work = s.work(&work_id).await;
    assert_eq!((work.state.as_str(), work.failures), ("pending", 1));
    assert!(work.retry_at_ms.is_some(), "{work:?}");
    // Nothing was observed: no run was launched.
    assert!(s.ext.calls_of("executor.wait").is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn work_whose_binding_is_gone_does_not_start_and_says_why() {
    let s = Sched::new("starts-blocked", vec![hook(), shell()]).await;
    s.ext
        .answer_with(|c| route_match(c).unwrap_or_else(|| Ok(json!({}))));
    s.configure(config()).await;
    let (work_id, _) = s.routed_work("hook:7").await;
    // The operator renames the Work's binding before it starts.
    let mut c = config();
    c["scopes"][0]["routes"][0]["binding"] = json!("renamed");
    c["scopes"][0]["bindings"][0]["name"] = json!("renamed");
    s.configure(c).await;
    let starter = s.starter("h1").await;
    assert_eq!(starter.pass().await.unwrap(), 0);
    let (running, blocked) = starter.snapshot();
    assert!(running.is_empty());
    assert_eq!(
        blocked.get(&work_id).map(String::as_str),
        Some("scope \"demo\" has no binding \"run\"")
    );
    assert!(s.ext.calls_of("executor.run").is_empty());
    assert_eq!(s.work(&work_id).await.state, "pending");
}
