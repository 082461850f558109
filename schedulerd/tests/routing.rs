//! Routing in-process: accepted events become Work through the scope's routes
//! (`route.match` on the package declaring the handler), what no route takes is
//! recorded unmatched with why, an extension that cannot answer holds the event, and
//! a route trace writes nothing.

#![allow(clippy::unwrap_used)]

mod common;
use common::*;

use busapi::sched::{RouteTraceRequest, TraceEvent};
use busapi::store::{RouteOutcome, UnroutedRequest};
use protocol::wire::Payload;
use protocol::RpcError;
use schedulerd::router::RouteError;
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_event_a_route_matches_becomes_work_and_the_rest_is_recorded_unmatched() {
    let s = Sched::new("routing", vec![hook()]).await;
    s.ext.answer_with(|c| route_match(c).unwrap());
    s.configure(config()).await;

    let opened = s
        .accept(
            "demo",
            "hook.opened",
            &["hook:7"],
            json!({"key": "hook:7", "title": "red build"}),
        )
        .await;
    let other = s
        .accept("demo", "hook.closed", &["hook:8"], json!({}))
        .await;
    let again = s
        .accept(
            "demo",
            "hook.opened",
            &["hook:7"],
            json!({"key": "hook:7", "title": "still red"}),
        )
        .await;
    let pass = s.route().await;
    assert_eq!((pass.routed, pass.to_work), (3, 2));

    // The first event made a Work on the route's binding, keyed and titled as the
    // route said; the route's verdict is recorded with its reason.
    let made = s.routing(opened).await;
    assert_eq!(made.disposition.as_deref(), Some("created"), "{made:?}");
    assert_eq!(made.records.len(), 1);
    assert_eq!(made.records[0].handler, "hook.route");
    assert!(made.records[0].matched);
    assert_eq!(made.records[0].reason, "an opened hook");
    let works = s.works("demo").await;
    assert_eq!(works.len(), 1, "{works:?}");
    let work = &works[0];
    assert_eq!(work.binding, "run");
    assert_eq!(work.kind, "work");
    assert_eq!(work.keys, vec!["hook:7"]);
    assert_eq!(work.state, "pending");
    // (The display is the latest the route gave: the third event's.)
    assert_eq!(
        work.display.as_ref().map(|d| d.title.as_str()),
        Some("still red")
    );
    assert_eq!(made.records[0].work_id.as_deref(), Some(work.id.as_str()));

    // No route took the second: the scope's disposition, and why.
    let dropped = s.routing(other).await;
    assert_eq!(dropped.disposition.as_deref(), Some("unmatched:drop"));
    assert!(!dropped.records[0].matched);
    assert_eq!(dropped.records[0].reason, "not for hook.closed");

    // The third names the open Work by its key: it joins it.
    let joined = s.routing(again).await;
    assert_eq!(
        joined.disposition.as_deref(),
        Some("attached"),
        "{joined:?}"
    );
    assert_eq!(joined.records[0].work_id.as_deref(), Some(work.id.as_str()));

    // The route handler was shown the event, its scope's own entries, and (for the
    // third) the open Work.
    let asked = s.ext.calls_of("route.match");
    assert_eq!(asked.len(), 3);
    assert!(asked.iter().all(|c| c.name == "hook"));
    let first = asked[0].params.clone().unwrap();
    assert_eq!(first["event"]["keys"], json!(["hook:7"]));
    assert_eq!(first["scope"]["entries"][0]["name"], "ci");
    assert!(first.get("work").is_none(), "{first}");
    let third = asked[2].params.clone().unwrap();
    assert_eq!(third["work"]["id"], json!(work.id));

    let stats = s.stats.snapshot();
    assert_eq!(
        (stats.routed, stats.created, stats.unmatched, stats.last_seq),
        (2, 1, 1, again)
    );
    // Nothing is left to route.
    let left = s
        .call(&UnroutedRequest {
            after: 0,
            limit: 10,
        })
        .await;
    assert!(left.events.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_extension_that_cannot_answer_holds_the_event_and_those_after_it() {
    let s = Sched::new("routing-held", vec![hook()]).await;
    s.configure(config()).await;
    s.ext
        .answer_with(|_| Err(RpcError::authored("unavailable", "the extension is down")));
    let first = s
        .accept(
            "demo",
            "hook.opened",
            &["hook:1"],
            json!({"key": "hook:1", "title": "one"}),
        )
        .await;
    let second = s
        .accept(
            "demo",
            "hook.opened",
            &["hook:2"],
            json!({"key": "hook:2", "title": "two"}),
        )
        .await;

    let held = s.router.pass(&s.stats).await.unwrap_err();
    assert!(
        matches!(&held, RouteError::Unavailable { index: 0, handler, why }
            if handler == "hook.route" && why.contains("the extension is down")),
        "{held:?}"
    );
    assert!(s.routing(first).await.disposition.is_none());
    assert!(s.routing(second).await.disposition.is_none());
    assert!(s.works("demo").await.is_empty());

    // Once it answers, both are routed, in order.
    s.ext.answer_with(|c| route_match(c).unwrap());
    assert_eq!(s.route().await.routed, 2);
    assert_eq!(
        s.routing(first).await.disposition.as_deref(),
        Some("created")
    );
    assert_eq!(
        s.routing(second).await.disposition.as_deref(),
        Some("created")
    );
    let works = s.works("demo").await;
    assert_eq!(works.len(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nothing_routes_before_the_configuration_and_registrations_are_read() {
    let s = Sched::new("routing-unloaded", vec![hook()]).await;
    s.ext.answer_with(|c| route_match(c).unwrap());
    let seq = s
        .accept(
            "demo",
            "hook.opened",
            &["hook:1"],
            json!({"key": "hook:1", "title": "one"}),
        )
        .await;
    let e = s.router.pass(&s.stats).await.unwrap_err();
    assert_eq!(e, RouteError::NotLoaded("configuration"));
    assert!(s.routing(seq).await.disposition.is_none());
    // An event of a scope the configuration does not have is `no_scope`.
    s.configure(config()).await;
    let stray = s.accept("elsewhere", "hook.opened", &[], json!({})).await;
    s.route().await;
    assert_eq!(
        s.routing(stray).await.disposition.as_deref(),
        Some("unmatched:no_scope")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_route_trace_says_how_the_routes_would_decide_and_writes_nothing() {
    let s = Sched::new("routing-trace", vec![hook()]).await;
    s.ext.answer_with(|c| route_match(c).unwrap());
    s.configure(config()).await;
    let trace = schedulerd::service::Service::trace(
        &s.router,
        RouteTraceRequest {
            scope_id: "demo".into(),
            event: TraceEvent {
                event_type: "hook.opened".into(),
                source: "hook".into(),
                keys: vec!["hook:99".into()],
                payload: Some(Payload {
                    schema: "hook.opened.v1".into(),
                    data: json!({"key": "hook:99", "title": "traced"}),
                }),
            },
        },
    )
    .await
    .unwrap();
    assert!(trace.records[0].matched);
    match &trace.outcome {
        RouteOutcome::Create {
            binding,
            keys,
            display,
            ..
        } => {
            assert_eq!(binding, "run");
            assert_eq!(keys, &vec!["hook:99".to_string()]);
            assert_eq!(display.as_ref().unwrap()["title"], "traced");
        }
        other => panic!("{other:?}"),
    }
    // As the operator sees it: the outcome names only what the route said.
    let shown = serde_json::to_value(&trace).unwrap();
    assert!(shown["outcome"].get("close").is_none(), "{shown}");
    assert!(s.works("demo").await.is_empty());
}
