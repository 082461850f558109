#![allow(clippy::unwrap_used)]
//! Routing with real daemons: deliveries through ingressd become events, and
//! schedulerd routes each to Work by asking the scope's routes (`route.match` on the
//! webhook extension, through extrunner), recording why.

mod common;
use common::*;

use oc_systest::{post, sign_sha256, Suite};
use serde_json::{json, Value};

fn routed_config(suite: &Suite) -> Value {
    let mut c = config(suite);
    let scope = &mut c["scopes"][0];
    // A second webhook entry that no route takes.
    scope["entries"].as_array_mut().unwrap().push(json!(
        {"type": "webhook", "name": "other", "connection": "hooks",
         "config": {"path": "/hooks/other", "delivery_id": {"header": "X-Delivery-Id"}}}
    ));
    scope["routes"] = json!([
        {"handler": "webhook", "binding": "echo",
         "config": {"entry": "ci", "title_pointer": "/title"}}
    ]);
    scope["bindings"] =
        json!([{"name": "echo", "executor": "shell", "config": {"command": ["true"]}}]);
    scope["unmatched"] = json!("drop");
    c
}

fn seq_of(suite: &Suite, source: &str, delivery_id: &str) -> i64 {
    suite
        .events()
        .unwrap()
        .iter()
        .find(|e| e["source"] == source && e["delivery_id"] == delivery_id)
        .and_then(|e| e["seq"].as_i64())
        .unwrap()
}

fn routing(suite: &Suite, seq: i64) -> Value {
    wait_for("routing decision", || {
        let r = suite.call("store.routing", json!({ "seq": seq })).unwrap();
        r["disposition"].is_string().then_some(r)
    })
}

#[test]
fn events_become_work_by_key_and_the_rest_is_recorded_unmatched() {
    let suite = started("routing");
    suite
        .apply_config(&routed_config(&suite), "/hooks/other")
        .unwrap();

    // The first delivery about #7 creates a Work, with the display the route gave.
    let body = br#"{"number": 7, "title": "the build is red"}"#;
    assert_eq!(deliver(&suite, "d-1", body).unwrap().status, 200);
    let first = routing(&suite, seq_of(&suite, HOOK_SOURCE, "d-1"));
    assert_eq!(first["disposition"], "created", "{first}");
    let record = &first["records"][0];
    assert_eq!(record["matched"], true, "{first}");
    assert!(!record["reason"].as_str().unwrap().is_empty());
    let work_id = record["work_id"].as_str().unwrap().to_owned();
    let work = suite
        .call("store.work_get", json!({ "id": work_id }))
        .unwrap();
    assert_eq!(
        work["work"]["display"]["title"], "the build is red",
        "{work}"
    );
    assert_eq!(work["work"]["binding"], "echo");

    // A second delivery about #7 joins the same Work.
    let body2 = br#"{"number": 7, "title": "still red"}"#;
    assert_eq!(deliver(&suite, "d-2", body2).unwrap().status, 200);
    let second = routing(&suite, seq_of(&suite, HOOK_SOURCE, "d-2"));
    assert_eq!(second["disposition"], "attached", "{second}");
    assert_eq!(
        second["records"][0]["work_id"],
        work_id.as_str(),
        "{second}"
    );
    let inputs = suite
        .call("store.work_inputs", json!({ "work_id": work_id }))
        .unwrap();
    assert_eq!(inputs["inputs"].as_array().unwrap().len(), 2, "{inputs}");

    // A delivery no route takes: recorded unmatched with the scope's disposition,
    // each route's verdict kept.
    let other = br#"{"number": 8}"#;
    let r = post(
        suite.http,
        "/hooks/other",
        &[
            ("X-Delivery-Id", "o-1".into()),
            ("X-Signature-256", sign_sha256(SECRET.as_bytes(), other)),
        ],
        other,
    )
    .unwrap();
    assert_eq!(r.status, 200, "{}", r.text());
    let unmatched = routing(&suite, seq_of(&suite, "webhook/demo/other", "o-1"));
    assert_eq!(unmatched["disposition"], "unmatched:drop", "{unmatched}");
    assert_eq!(unmatched["records"][0]["matched"], false, "{unmatched}");
    let works = suite
        .call("store.works", json!({ "scope_id": "demo" }))
        .unwrap();
    assert_eq!(works["works"].as_array().unwrap().len(), 1, "{works}");

    // A route trace says how the routes would decide, and writes nothing.
    let before = suite.events().unwrap().len();
    let trace = suite
        .call(
            "sched.route_trace",
            json!({"scope_id": "demo", "event": {"type": "webhook.delivery",
                   "source": HOOK_SOURCE, "keys": ["webhook:demo/ci:99"],
                   "payload": {"schema": "webhook.delivery.v1",
                               "data": {"scope": "demo", "entry": "ci", "delivery_id": "t",
                                        "body": {"number": 99, "title": "traced"}}}}}),
        )
        .unwrap();
    assert_eq!(trace["records"][0]["matched"], true, "{trace}");
    assert_eq!(trace["outcome"]["type"], "create", "{trace}");
    assert_eq!(
        trace["outcome"]["keys"],
        json!(["webhook:demo/ci:99"]),
        "{trace}"
    );
    assert_eq!(suite.events().unwrap().len(), before);
    let works = suite
        .call("store.works", json!({ "scope_id": "demo" }))
        .unwrap();
    assert_eq!(
        works["works"].as_array().unwrap().len(),
        1,
        "the trace created nothing"
    );
}
