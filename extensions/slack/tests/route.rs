//! `route.match` for the `slack` handler on Events made from Slack's own payloads:
//! a mention or a direct message creates the thread's Work, a reply joins open Work
//! and creates none, and the display is the spec's for a Slack thread.

#![allow(clippy::unwrap_used)]

use oc_slack::config::Registry;
use oc_slack::project::{event_callback, Verdict};
use oc_slack::route::{display, match_route, without_mentions, RouteConfig};
use protocol::wire::{
    ConfigureParams, Connection, Entry, Event, Route, RouteMatchParams, Work, WorkDisplay,
};
use serde_json::{json, Value};

const APP_MENTION: &[u8] = include_bytes!("fixtures/events/app_mention.json");
const MESSAGE: &[u8] = include_bytes!("fixtures/events/message.channels.json");

fn registry(config: Value) -> Registry {
    Registry::from_params(&ConfigureParams {
        entries: vec![Entry {
            scope_id: "s1".into(),
            entry_type: "slack".into(),
            name: "team".into(),
            connection: "sl".into(),
            config,
            ..Default::default()
        }],
        connections: vec![Connection {
            name: "sl".into(),
            connection_type: "slack".into(),
            ..Default::default()
        }],
        ..Default::default()
    })
    .unwrap()
}

/// The Event the intake makes of `payload`, as the router shows it.
fn event_of(payload: &Value) -> Event {
    let reg = registry(Value::Null);
    let Verdict::Deliver(d) = event_callback(&reg.entries[0], payload).unwrap() else {
        panic!("not delivered: {payload}");
    };
    let e = d.events.into_iter().next().unwrap();
    Event {
        id: "e1".into(),
        sequence: 1,
        event_type: e.event_type,
        scope_id: "s1".into(),
        payload: e.payload,
        keys: e.keys,
        ..Default::default()
    }
}

fn ask(event: Event, config: Value, work: Option<Work>) -> protocol::wire::RouteMatchResult {
    match_route(&RouteMatchParams {
        handler: "slack".into(),
        route: Route {
            handler: "slack".into(),
            binding: "agent".into(),
            config,
        },
        event,
        work,
        ..Default::default()
    })
    .unwrap()
}

fn mention(text: &str) -> Value {
    let mut v: Value = serde_json::from_slice(APP_MENTION).unwrap();
    v["event"]["text"] = json!(text);
    v
}

fn reply() -> Value {
    let mut v: Value = serde_json::from_slice(MESSAGE).unwrap();
    v["event"]["thread_ts"] = json!("1610241000.000100");
    v["event"]["text"] = json!("also check the staging docs");
    v
}

#[test]
fn a_mention_starts_its_threads_work_with_the_specs_display() {
    let m = ask(
        event_of(&mention(
            "<@U111> Deploy the docs site\nand tell me when it is live",
        )),
        Value::Null,
        None,
    );
    assert!(m.matched, "{}", m.reason);
    assert_eq!(
        m.keys,
        vec!["slack:T111/C111/1610241741.000200".to_string()]
    );
    let d = m.display.unwrap();
    assert_eq!(d.title, "Deploy the docs site");
    assert_eq!(d.requester, "U222");
    assert_eq!(d.reference, "");
    assert!(d.validate().is_ok());
}

#[test]
fn a_bare_mention_gives_no_display() {
    // The fixture's text is the mention alone: no title, and a display needs one.
    let m = ask(
        event_of(&serde_json::from_slice(APP_MENTION).unwrap()),
        Value::Null,
        None,
    );
    assert!(m.matched);
    assert_eq!(m.display, None);
}

#[test]
fn a_reply_joins_open_work_and_creates_none() {
    let alone = ask(event_of(&reply()), Value::Null, None);
    assert!(!alone.matched);
    assert!(alone.reason.contains("no open Work"), "{}", alone.reason);

    let current = WorkDisplay {
        title: "Deploy the docs site".into(),
        requester: "U222".into(),
        ..Default::default()
    };
    let work = Work {
        id: "w1".into(),
        binding: "agent".into(),
        display: Some(current),
        ..Default::default()
    };
    let joined = ask(event_of(&reply()), Value::Null, Some(work));
    assert!(joined.matched, "{}", joined.reason);
    assert_eq!(
        joined.keys,
        vec!["slack:T111/C111/1610241000.000100".to_string()]
    );
    // The first message named the thread: the reply keeps that display.
    assert_eq!(joined.display, None);
}

#[test]
fn a_direct_message_starts_work() {
    let mut im: Value = serde_json::from_slice(MESSAGE).unwrap();
    im["event"]["channel"] = json!("D111");
    im["event"]["channel_type"] = json!("im");
    im["event"]["text"] = json!("What broke the nightly build?");
    let m = ask(event_of(&im), Value::Null, None);
    assert!(m.matched);
    assert_eq!(m.display.unwrap().title, "What broke the nightly build?");
}

#[test]
fn the_routes_events_filter_and_config_errors() {
    let only_mentions = json!({"events": ["slack.message.app_mention"]});
    let m = ask(
        event_of(&mention("<@U111> hi")),
        only_mentions.clone(),
        None,
    );
    assert!(m.matched);
    let mut im: Value = serde_json::from_slice(MESSAGE).unwrap();
    im["event"]["channel_type"] = json!("im");
    let m = ask(event_of(&im), only_mentions, None);
    assert!(!m.matched);
    let e = RouteConfig::check(&json!({"events": ["slack.message", "github.issue"]})).unwrap_err();
    assert_eq!(e.pointer, "/events/1");
    let e = RouteConfig::check(&json!({"labels": []})).unwrap_err();
    assert_eq!(e.pointer, "/labels");
}

#[test]
fn mention_tokens_are_dropped_and_links_keep_their_labels() {
    assert_eq!(
        without_mentions(
            "<@U111> <!here> ship <https://x.example/a|the fix> to <#C1|general> <@W2|bob>"
        ),
        "  ship the fix to #general "
    );
    assert_eq!(without_mentions("a < b"), "a < b");
    let d = display(
        &json!({"text": "<@U1>\n\n  <!channel>  \n  Rotate   the keys  \nplease", "user": "U9"}),
    )
    .unwrap();
    assert_eq!(d.title, "Rotate the keys");
    assert_eq!(d.requester, "U9");
    let long = "x".repeat(500);
    let d = display(&json!({"text": long, "user": "U9"})).unwrap();
    assert_eq!(d.title.len(), protocol::wire::MAX_DISPLAY_TITLE_BYTES);
}
