//! `work.settle_hold` through the scoped host, end to end: a broker on a real unix
//! socket, storaged's service on it, and the host serving a start gate (`people`,
//! permission `work.start_gate`) over a socket pair, bound as the runner binds it. The
//! package settles only its own holds, on Work of its configured scopes, once per key.

#![allow(clippy::unwrap_used)]

mod common;
use common::{refused, Harness, Stack};

use protocol::CallError;
use serde_json::{json, Value};

const MANIFEST: &str = r#"{
  "protocol": [1], "name": "people", "version": "1.0.0", "command": ["bin/people"],
  "permissions": ["work.start_gate"],
  "provides": {"extensions": [{"type": "people"}], "start_gate": true}
}"#;

impl Harness {
    async fn start() -> Harness {
        let stack = Stack::start("holds").await;
        let document = json!({"scopes": [
            {"id": "s1", "entries": [{"type": "people", "name": "people"}]},
            {"id": "s2"}
        ]});
        let host = stack.bound(MANIFEST, &document, &["s1"]);
        Harness::serve(stack, None, host, "people")
    }

    async fn settle(&self, params: Value) -> Result<Value, CallError> {
        self.call("work.settle_hold", params).await
    }

    /// A pending Work in `scope`, held by `owner`.
    async fn held(&self, scope: &str, key: &str, owner: &str) -> String {
        let id = self
            .route(
                json!({"scope_id": scope, "type": "people.asked", "source": "people",
                    "delivery_id": key, "payload": {}, "keys": [key]}),
                "work",
            )
            .await;
        self.store(
            "store.work_hold",
            json!({"work_id": id, "owner": owner, "reason": "waiting"}),
        )
        .await;
        id
    }

    async fn work(&self, id: &str) -> Value {
        self.store("store.work_get", json!({"id": id})).await["work"].clone()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_start_gate_settles_only_its_own_holds_in_its_scopes_once_per_key() {
    let h = Harness::start().await;
    let mine = h.held("s1", "k:1", "people").await;
    let others = h.held("s1", "k:2", "budget").await;
    let elsewhere = h.held("s2", "k:3", "people").await;
    let refused_one = h.held("s1", "k:4", "people").await;

    // Another package's hold: nothing settled, the hold stays.
    let r = h
        .settle(json!({"work_id": others, "admit": true, "key": "a-2"}))
        .await
        .unwrap();
    assert_eq!(r, json!({"settled": false}));
    assert_eq!(h.work(&others).await["hold"]["owner"], "budget");
    // A Work outside its scopes reads as none.
    let (code, message) = refused(
        h.settle(json!({"work_id": elsewhere, "admit": true, "key": "a-3"}))
            .await,
    );
    assert_eq!(code, "not_found");
    assert_eq!(message, format!("no Work {elsewhere}"));
    assert_eq!(h.work(&elsewhere).await["hold"]["owner"], "people");
    let (code, _) = refused(
        h.settle(json!({"work_id": mine, "admit": true, "key": ""}))
            .await,
    );
    assert_eq!(code, "invalid");

    // Its own hold: admitted once; the same key again settles nothing.
    let r = h
        .settle(json!({"work_id": mine, "admit": true, "reason": "hours are open", "key": "a-1"}))
        .await
        .unwrap();
    assert_eq!(r, json!({"settled": true}));
    let work = h.work(&mine).await;
    assert!(work.get("hold").is_none(), "{work}");
    assert_eq!(work["admitted"], json!(["people"]));
    assert_eq!((work["state"].as_str()), Some("pending"));
    let r = h
        .settle(json!({"work_id": mine, "admit": true, "key": "a-1"}))
        .await
        .unwrap();
    assert_eq!(r, json!({"settled": false}));

    // Refused: the Work is cancelled.
    let r = h
        .settle(json!({"work_id": refused_one, "admit": false, "reason": "closed on Sundays", "key": "a-4"}))
        .await
        .unwrap();
    assert_eq!(r, json!({"settled": true}));
    assert_eq!(h.work(&refused_one).await["state"], "cancelled");
}
