//! `route.match` for the `linear` handler on Events made from the fixtures: an
//! assignment starts the issue's Work with the spec's display (title, key, author);
//! a comment joins open Work, and starts one only when it mentions the agent.

#![allow(clippy::unwrap_used)]

use oc_linear::config::Registry;
use oc_linear::project::{project, Verdict};
use oc_linear::route::match_route;
use protocol::wire::{
    ConfigureParams, Entry, Event, Route, RouteMatchParams, RouteMatchResult, Work, WorkDisplay,
};
use serde_json::{json, Value};

const ISSUE: &[u8] = include_bytes!("fixtures/issue-assigned.json");
const COMMENT: &[u8] = include_bytes!("fixtures/comment-created.json");

fn event_of(payload: &Value) -> Event {
    let reg = Registry::from_params(&ConfigureParams {
        entries: vec![Entry {
            scope_id: "s1".into(),
            entry_type: "linear".into(),
            name: "eng".into(),
            connection: "lin".into(),
            config: json!({"teams": ["LIN"], "agent_user": "agent@example.com", "mention": "@conduit"}),
            ..Default::default()
        }],
        ..Default::default()
    })
    .unwrap();
    let Verdict::Deliver(d) = project(&reg.entries[0], payload).unwrap() else {
        panic!("not delivered");
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

fn ask(event: Event, config: Value, work: Option<Work>) -> RouteMatchResult {
    match_route(&RouteMatchParams {
        handler: "linear".into(),
        route: Route {
            handler: "linear".into(),
            binding: "agent".into(),
            config,
        },
        event,
        work,
        ..Default::default()
    })
    .unwrap()
}

fn open_work() -> Work {
    Work {
        id: "w1".into(),
        display: Some(WorkDisplay {
            title: "Foo bar".into(),
            ..Default::default()
        }),
        ..Default::default()
    }
}

#[test]
fn an_assignment_starts_the_issues_work_with_the_specs_display() {
    let r = ask(
        event_of(&serde_json::from_slice(ISSUE).unwrap()),
        Value::Null,
        None,
    );
    assert!(r.matched, "{}", r.reason);
    assert_eq!(r.keys, vec!["linear:LIN-1778".to_string()]);
    let d = r.display.unwrap();
    assert_eq!(d.title, "Foo bar");
    assert_eq!(d.reference, "LIN-1778");
    assert_eq!(d.requester, "Ada Lovelace");
    assert_eq!(
        d.links[0].url,
        "https://linear.app/acme/issue/LIN-1778/foo-bar"
    );
    // Joining open Work keeps its display.
    let r = ask(
        event_of(&serde_json::from_slice(ISSUE).unwrap()),
        Value::Null,
        Some(open_work()),
    );
    assert!(r.matched);
    assert!(r.display.is_none());
}

#[test]
fn a_comment_joins_open_work_and_starts_one_only_when_it_mentions_the_agent() {
    let mentioning: Value = serde_json::from_slice(COMMENT).unwrap();
    let mut plain = mentioning.clone();
    plain["data"]["body"] = json!("looks good to me");
    let r = ask(event_of(&plain), Value::Null, None);
    assert!(!r.matched);
    assert!(r.reason.contains("no open Work"), "{}", r.reason);
    let r = ask(event_of(&plain), Value::Null, Some(open_work()));
    assert!(r.matched, "{}", r.reason);
    assert_eq!(r.keys, vec!["linear:LIN-1778".to_string()]);
    let r = ask(event_of(&mentioning), Value::Null, None);
    assert!(r.matched);
    let d = r.display.unwrap();
    assert_eq!(
        (d.title.as_str(), d.reference.as_str()),
        ("Foo bar", "LIN-1778")
    );
}

#[test]
fn the_routes_events_filter_and_config_errors() {
    let issue = event_of(&serde_json::from_slice(ISSUE).unwrap());
    let r = ask(
        issue.clone(),
        json!({"events": ["linear.issue.commented"]}),
        None,
    );
    assert!(!r.matched);
    let r = ask(
        issue.clone(),
        json!({"events": ["linear.issue.assigned"]}),
        None,
    );
    assert!(r.matched);
    let e = match_route(&RouteMatchParams {
        handler: "linear".into(),
        route: Route {
            handler: "linear".into(),
            binding: "agent".into(),
            config: json!({"events": ["slack.message"]}),
        },
        event: issue.clone(),
        ..Default::default()
    })
    .unwrap_err();
    assert!(e.message.contains("/events/0"), "{}", e.message);
    let mut other = issue;
    other.event_type = "github.issue.opened".into();
    assert!(!ask(other, Value::Null, None).matched);
}

fn render(event: Event, max_bytes: u32) -> protocol::wire::EventRenderResult {
    oc_linear::render::serve(&protocol::wire::EventRenderParams {
        event,
        max_bytes,
        ..Default::default()
    })
    .unwrap()
}

#[test]
fn events_render_as_bounded_markdown() {
    let issue = render(event_of(&serde_json::from_slice(ISSUE).unwrap()), 0);
    assert!(!issue.truncated);
    assert!(
        issue.text.starts_with("**Linear issue LIN-1778: Foo bar**"),
        "{}",
        issue.text
    );
    assert!(issue.text.contains("assigned to you"));
    assert!(issue.text.contains("Opened by Ada Lovelace"));
    assert!(issue.text.contains("```\nfoo --bar\n```"));
    let comment = render(event_of(&serde_json::from_slice(COMMENT).unwrap()), 0);
    assert!(comment.text.contains("by Ada Lovelace"), "{}", comment.text);
    assert!(comment
        .text
        .contains("improvement over the previous version"));
    let mut long: Value = serde_json::from_slice(ISSUE).unwrap();
    long["data"]["description"] = json!(format!("```\n{}\n```", "line\n".repeat(2000)));
    let cut = render(event_of(&long), 1000);
    assert!(cut.truncated);
    assert!(cut.text.len() < 1200, "{}", cut.text.len());
    assert_eq!(
        cut.text.matches("```").count() % 2,
        0,
        "the open fence is closed"
    );
    let mut other = event_of(&serde_json::from_slice(ISSUE).unwrap());
    other.payload.schema = "linear.issue.v9".into();
    assert!(
        oc_linear::render::serve(&protocol::wire::EventRenderParams {
            event: other,
            ..Default::default()
        })
        .is_err()
    );
}
