//! `route.match` and the Work display, from the fixtures' Events.

#![allow(clippy::unwrap_used)]

mod common;

use common::*;
use oc_github::route::{match_route, RouteConfig};
use oc_github::{project, Family};
use protocol::wire::{
    DisplayLink, Event, Route, RouteMatchParams, RouteMatchResult, Work, WorkDisplay,
};
use serde_json::{json, Value};

fn event_of(family: Family, body: &[u8]) -> Event {
    let e = project::project(family, "d-1", &json_of(body)).unwrap();
    Event {
        id: "ev-1".into(),
        event_type: e.event_type,
        source: "github/s1/hello".into(),
        delivery_id: "d-1".into(),
        scope_id: "s1".into(),
        keys: e.keys,
        payload: e.payload,
        occurred_at: e.occurred_at,
        ..Default::default()
    }
}

fn params(event: Event, config: Value) -> RouteMatchParams {
    RouteMatchParams {
        handler: "github".into(),
        route: Route {
            handler: "github".into(),
            binding: "agent".into(),
            config,
        },
        event,
        ..Default::default()
    }
}

fn decide(event: Event, config: Value) -> RouteMatchResult {
    match_route(&params(event, config)).unwrap()
}

#[test]
fn an_opened_issue_matches_with_its_keys_and_display() {
    let r = decide(event_of(Family::Issue, ISSUES_OPENED), Value::Null);
    assert!(r.matched, "{}", r.reason);
    assert!(!r.reason.is_empty());
    assert_eq!(r.keys, vec!["github:codertocat/hello-world#1".to_string()]);
    let d = r.display.unwrap();
    d.validate().unwrap();
    assert_eq!(d.title, "Spelling error in the README file");
    assert_eq!(d.reference, "#1");
    assert_eq!(d.requester, "Codertocat");
    assert_eq!(
        d.links,
        vec![DisplayLink {
            label: "Issue #1".into(),
            url: "https://github.com/Codertocat/Hello-World/issues/1".into()
        }]
    );
}

#[test]
fn every_fixture_gives_a_display_that_passes_the_wire_checks() {
    let cases = [
        (Family::Issue, ISSUES_OPENED, "Issue #1", "#1"),
        (
            Family::IssueComment,
            ISSUE_COMMENT_CREATED,
            "Issue #1",
            "#1",
        ),
        (Family::PullRequest, PULL_REQUEST_OPENED, "PR #2", "#2"),
        (
            Family::PullRequestReview,
            PULL_REQUEST_REVIEW_SUBMITTED,
            "PR #2",
            "#2",
        ),
    ];
    for (family, body, label, reference) in cases {
        let r = decide(event_of(family, body), json!({}));
        assert!(r.matched, "{family:?}: {}", r.reason);
        let d = r.display.unwrap();
        d.validate().unwrap();
        assert_eq!(d.reference, reference);
        assert_eq!(d.links[0].label, label);
        assert_eq!(d.requester, "Codertocat");
    }
    let r = decide(
        event_of(Family::PullRequest, PULL_REQUEST_OPENED),
        json!({}),
    );
    let d = r.display.unwrap();
    assert_eq!(d.title, "Update the README with new information.");
    assert_eq!(
        d.links[0].url,
        "https://github.com/Codertocat/Hello-World/pull/2"
    );
}

#[test]
fn a_check_run_is_titled_by_its_name_and_conclusion_with_the_first_prs_ref() {
    let r = decide(event_of(Family::CheckRun, CHECK_RUN_COMPLETED), json!({}));
    assert!(r.matched, "{}", r.reason);
    assert_eq!(r.keys, vec!["github:codertocat/hello-world#2".to_string()]);
    let d = r.display.unwrap();
    d.validate().unwrap();
    assert_eq!(d.title, "Octocoders-linter: success");
    assert_eq!(d.reference, "#2");
    assert_eq!(
        d.links[0].url,
        "https://github.com/Codertocat/Hello-World/runs/128620228"
    );

    // On no pull request: no keys, no match.
    let mut payload = json_of(CHECK_RUN_COMPLETED);
    payload["check_run"]["pull_requests"] = json!([]);
    let body = serde_json::to_vec(&payload).unwrap();
    let r = decide(event_of(Family::CheckRun, &body), json!({}));
    assert!(!r.matched);
    assert!(r.reason.contains("no keys"), "{}", r.reason);
}

#[test]
fn a_comment_on_a_pull_request_links_the_pr() {
    let mut payload = json_of(ISSUE_COMMENT_CREATED);
    payload["issue"]["pull_request"] =
        json!({"url": "https://api.github.com/repos/Codertocat/Hello-World/pulls/1"});
    payload["issue"]["html_url"] = json!("https://github.com/Codertocat/Hello-World/pull/1");
    let body = serde_json::to_vec(&payload).unwrap();
    let d = decide(event_of(Family::IssueComment, &body), json!({}))
        .display
        .unwrap();
    assert_eq!(d.links[0].label, "PR #1");
    assert_eq!(
        d.links[0].url,
        "https://github.com/Codertocat/Hello-World/pull/1"
    );
}

#[test]
fn a_long_title_is_cut_to_200_bytes_at_a_char_boundary_and_control_chars_go() {
    let mut payload = json_of(ISSUES_OPENED);
    payload["issue"]["title"] = json!(format!("a\tb{}", "€".repeat(100))); // 3 + 300 bytes
    let body = serde_json::to_vec(&payload).unwrap();
    let d = decide(event_of(Family::Issue, &body), json!({}))
        .display
        .unwrap();
    d.validate().unwrap();
    assert!(d.title.len() <= 200);
    assert!(d.title.starts_with("a b€"));
    assert_eq!(d.title.len(), 3 + 3 * 65); // 198: a 66th € would pass 200
}

#[test]
fn the_events_filter_takes_type_prefixes_at_dot_boundaries() {
    let issue = || event_of(Family::Issue, ISSUES_OPENED);
    let comment = || event_of(Family::IssueComment, ISSUE_COMMENT_CREATED);
    assert!(decide(issue(), json!({"events": ["github.issue.opened"]})).matched);
    assert!(decide(issue(), json!({"events": ["github.issue"]})).matched);
    let r = decide(issue(), json!({"events": ["github.issue.closed"]}));
    assert!(!r.matched);
    assert!(
        r.reason.contains("not in the route's events"),
        "{}",
        r.reason
    );
    // `github.issue` does not take `github.issue_comment.created`.
    assert!(!decide(comment(), json!({"events": ["github.issue"]})).matched);
    assert!(
        decide(
            comment(),
            json!({"events": ["github.issue", "github.issue_comment"]})
        )
        .matched
    );
}

#[test]
fn the_labels_filter_needs_one_of_the_labels() {
    let issue = || event_of(Family::Issue, ISSUES_OPENED);
    assert!(decide(issue(), json!({"labels": ["BUG"]})).matched);
    assert!(decide(issue(), json!({"labels": ["agent", "bug"]})).matched);
    let r = decide(issue(), json!({"labels": ["agent"]}));
    assert!(!r.matched);
    assert!(r.reason.contains("labels"), "{}", r.reason);
    let r = decide(
        event_of(Family::CheckRun, CHECK_RUN_COMPLETED),
        json!({"labels": ["bug"]}),
    );
    assert!(!r.matched);
}

#[test]
fn an_unreadable_payload_schema_is_no_match() {
    let mut e = event_of(Family::Issue, ISSUES_OPENED);
    e.payload.schema = "github.issue.v2".into();
    let r = decide(e, json!({}));
    assert!(!r.matched);
    assert!(
        r.reason.contains("unreadable payload schema"),
        "{}",
        r.reason
    );
    let mut e = event_of(Family::Issue, ISSUES_OPENED);
    e.payload.schema = String::new();
    assert!(!decide(e, json!({})).matched);
    let mut e = event_of(Family::Issue, ISSUES_OPENED);
    e.event_type = "github.push".into();
    let r = decide(e, json!({}));
    assert!(!r.matched);
    assert!(!r.reason.is_empty());
}

#[test]
fn a_broken_route_config_is_an_error_not_a_silent_no_match() {
    for config in [
        json!({"events": "github.issue"}),
        json!({"events": ["github.issues.opened"]}),
        json!({"labels": [1]}),
        json!([1]),
    ] {
        let e = match_route(&params(
            event_of(Family::Issue, ISSUES_OPENED),
            config.clone(),
        ));
        assert!(e.is_err(), "{config}");
    }
    assert!(RouteConfig::parse(
        &json!({"events": ["github.check_run.completed"], "labels": ["x"]})
    )
    .is_ok());
}

#[test]
fn a_match_adds_its_link_to_the_works_current_display() {
    let issue_display = WorkDisplay {
        title: "Spelling error in the README file".into(),
        reference: "#1".into(),
        requester: "Codertocat".into(),
        links: vec![DisplayLink {
            label: "Issue #1".into(),
            url: "https://github.com/Codertocat/Hello-World/issues/1".into(),
        }],
    };
    let mut p = params(
        event_of(Family::PullRequest, PULL_REQUEST_OPENED),
        json!({}),
    );
    p.work = Some(Work {
        id: "w-1".into(),
        display: Some(issue_display.clone()),
        ..Default::default()
    });
    let d = match_route(&p).unwrap().display.unwrap();
    d.validate().unwrap();
    // Another issue or PR than the display's: the Work keeps its title and ref.
    assert_eq!(d.title, issue_display.title);
    assert_eq!(d.reference, "#1");
    let labels: Vec<&str> = d.links.iter().map(|l| l.label.as_str()).collect();
    assert_eq!(labels, vec!["Issue #1", "PR #2"]);

    // The same issue renamed: the title follows, the link is not repeated.
    let mut payload = json_of(ISSUES_OPENED);
    payload["issue"]["title"] = json!("Renamed");
    let body = serde_json::to_vec(&payload).unwrap();
    let mut p = params(event_of(Family::Issue, &body), json!({}));
    p.work = Some(Work {
        id: "w-1".into(),
        display: Some(issue_display),
        ..Default::default()
    });
    let d = match_route(&p).unwrap().display.unwrap();
    assert_eq!(d.title, "Renamed");
    assert_eq!(d.links.len(), 1);
}

/// A Work the route's binding runs, as `route.match` shows it.
fn work_on(binding: &str) -> Work {
    Work {
        id: "w-1".into(),
        binding: binding.into(),
        ..Default::default()
    }
}

#[test]
fn an_event_that_reaches_the_routes_own_work_follows_it_whatever_its_labels() {
    let config = json!({"events": ["github.pull_request_review"], "labels": ["agent"]});
    let review = event_of(Family::PullRequestReview, PULL_REQUEST_REVIEW_SUBMITTED);
    // No Work yet: the review's pull request carries no `agent` label.
    let r = decide(review.clone(), config.clone());
    assert!(!r.matched, "{}", r.reason);
    // It reaches a Work this route's binding runs: it follows it.
    let mut p = params(review.clone(), config.clone());
    p.work = Some(work_on("agent"));
    let r = match_route(&p).unwrap();
    assert!(r.matched, "{}", r.reason);
    // Another binding's Work is not this route's to follow.
    let mut p = params(review, config);
    p.work = Some(work_on("other"));
    assert!(!match_route(&p).unwrap().matched);
}

#[test]
fn a_merged_pull_request_completes_its_work_and_an_unmerged_one_cancels_it() {
    let closed = event_of(Family::PullRequest, PULL_REQUEST_CLOSED);
    let merged = closed.payload.data["merged"] == true;
    let r = decide(closed.clone(), Value::Null);
    assert!(r.matched, "{}", r.reason);
    assert_eq!(r.close, if merged { "completed" } else { "cancelled" });
    // The same event with the other `merged`.
    let mut other = closed;
    other.payload.data["merged"] = json!(!merged);
    let r = decide(other, Value::Null);
    assert_eq!(r.close, if merged { "cancelled" } else { "completed" });
    assert!(r.reason.contains("Work"), "{}", r.reason);
    // An opened one closes nothing.
    let r = decide(
        event_of(Family::PullRequest, PULL_REQUEST_OPENED),
        Value::Null,
    );
    assert_eq!(r.close, "");
}
