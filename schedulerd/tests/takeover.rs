//! Lease takeover in-process: an attempt of this host whose lease ran out (its
//! schedulerd went away) is taken over at a new epoch, which fences the old holder,
//! and adopted with the recovery metadata it persisted (`executor.recover`, nothing
//! launched again); one of a host that is gone is settled failed, saying so.

#![allow(clippy::unwrap_used)]

mod common;
use common::*;

use busapi::store::{AttemptStartRequest, LeaseRenewRequest, RecoveryPersistRequest};
use serde_json::json;

/// An attempt of `work_id` started by another schedulerd process, on `host`, whose
/// lease has run out already: (execution, epoch).
async fn abandoned(s: &Sched, work_id: &str, host: &str) -> (String, i64) {
    let a = s
        .call(&AttemptStartRequest {
            work_id: work_id.into(),
            executor: "shell".into(),
            binding: "run".into(),
            lease_owner: format!("schedulerd:1@{host}"),
            lease_ttl_ms: 0,
            expect_version: None,
            host: host.into(),
        })
        .await;
    (a.execution_id, a.epoch)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expired_lease_is_taken_over_at_a_new_epoch_and_the_run_adopted() {
    let s = Sched::new("takeover", vec![hook(), shell()]).await;
    s.ext.answer_async(|c| async move {
        if let Some(a) = route_match(&c) {
            return a;
        }
        match c.method.as_str() {
            // The adopted run goes on.
            "executor.wait" => std::future::pending().await,
            _ => Ok(json!({})),
        }
    });
    s.configure(config()).await;
    let (work_id, seq) = s.routed_work("hook:7").await;
    let (execution_id, old_epoch) = abandoned(&s, &work_id, "h1").await;
    s.call(&RecoveryPersistRequest {
        execution_id: execution_id.clone(),
        epoch: old_epoch,
        recovery: json!({"schema": "shell.recovery.v1", "data": {"pid": 4242}}),
    })
    .await;

    let starter = s.starter("h1").await;
    assert_eq!(starter.recover_expired().await.unwrap(), 1);
    let recover = s
        .ext
        .wait_for("executor.recover", |c| c.method == "executor.recover")
        .await;
    assert_eq!(recover.name, "shell");
    let p = params(&recover);

    // The store shows the same execution under a new epoch and a new holder.
    let ex = s.executions(&work_id).await;
    assert_eq!(ex.len(), 1, "{ex:?}");
    assert_eq!(ex[0].id, execution_id);
    assert_eq!(ex[0].state, "running");
    assert!(ex[0].epoch > old_epoch, "{} after {old_epoch}", ex[0].epoch);
    assert!(ex[0].lease_owner.ends_with("@h1"), "{}", ex[0].lease_owner);
    assert_ne!(ex[0].lease_owner, "schedulerd:1@h1");

    // The executor was asked to adopt the run at that epoch, with what it persisted,
    // the Work's inputs and a token of the new epoch; nothing was launched again.
    assert_eq!(p["run"]["execution_id"], json!(execution_id));
    assert_eq!(p["run"]["epoch"], json!(ex[0].epoch));
    assert_eq!(p["recovery"]["data"]["pid"], 4242);
    assert_eq!(p["run"]["inputs"][0]["sequence"], json!(seq));
    let token = p["run"]["toolbelt"]["token"].as_str().unwrap();
    assert!(
        token.starts_with(&format!("oct1.{work_id}.{execution_id}.{}.", ex[0].epoch)),
        "{token}"
    );
    assert!(s.ext.calls_of("executor.run").is_empty());
    assert_eq!(starter.snapshot().0.len(), 1);

    // The old holder is fenced: its epoch's writes are refused.
    let fenced = s
        .store
        .call(&LeaseRenewRequest {
            execution_id,
            epoch: old_epoch,
            lease_ttl_ms: 10_000,
        })
        .await
        .unwrap_err();
    assert_eq!(fenced.code(), Some("conflict"), "{fenced}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expired_attempt_of_a_host_that_is_gone_is_settled_failed_saying_so() {
    let s = Sched::new("takeover-gone", vec![hook(), shell()]).await;
    s.ext
        .answer_with(|c| route_match(c).unwrap_or_else(|| Ok(json!({}))));
    s.configure(config()).await;
    let (work_id, _) = s.routed_work("hook:7").await;
    // Launched by a host that never beat: gone.
    let (execution_id, old_epoch) = abandoned(&s, &work_id, "h-gone").await;

    let starter = s.starter("h1").await;
    assert_eq!(starter.recover_expired().await.unwrap(), 1);
    let ex = s.executions(&work_id).await;
    assert_eq!(ex[0].id, execution_id);
    assert_eq!(ex[0].state, "failed");
    assert!(ex[0].epoch > old_epoch);
    let error = ex[0].result["error"].as_str().unwrap();
    assert!(
        error.contains("host h-gone is gone (it never beat)")
            && error.contains("settled by host h1")
            && error.contains("the run may have executed"),
        "{error}"
    );
    // Under the retry policy: the Work runs again later.
    let work = s.work(&work_id).await;
    assert_eq!((work.state.as_str(), work.failures), ("pending", 1));
    // No executor here was asked anything of a run it never knew.
    assert!(s
        .ext
        .calls()
        .iter()
        .all(|c| !c.method.starts_with("executor.")));
}
