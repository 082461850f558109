//! The deliveries of issue 38 from real payloads (`@octokit/webhooks-examples`,
//! tests/fixtures/octokit/README.md): each fixture through the signed webhook path
//! (family, type, keys, fields), the route's keys and display, `dependency.filter`
//! for `github.wait` (matched and not), and `event.render`'s Markdown from the
//! payload (and from what the API would add).
//!
//! The examples have no changes-requested review, no merged close and no issue
//! comment on a pull request: those are derived here from the recorded payloads
//! (one field each, named where it is done); the files stay as recorded.

#![allow(clippy::unwrap_used)]

mod common;

use common::*;
use oc_github::config::Registry;
use oc_github::waits::{waking_event, Kind, PendingCheck, Plan};
use oc_github::webhook::{precheck, process};
use oc_github::{filter, render, route, Family};
use protocol::wire::{
    DependencyFilterParams, Event, IngressEvent, Route, RouteMatchParams, MAX_RENDERED_BYTES,
};
use serde_json::{json, Value};

// ---------------------------------------------------------------------------
// Helpers

/// `body` parsed, changed by `f`, and serialized again (a derived payload).
fn derived(body: &[u8], f: impl FnOnce(&mut Value)) -> Vec<u8> {
    let mut v = json_of(body);
    f(&mut v);
    serde_json::to_vec(&v).unwrap()
}

/// The one Event a signed delivery of `event` with `body` makes on the default
/// entry (every event).
fn delivered(event: &str, body: &[u8]) -> IngressEvent {
    let registry = registry(json!({"repository": REPO}));
    let params = request(event, "d-38", body, SECRET);
    let entry = precheck(&registry, &params).unwrap();
    let r = process(entry, SECRET, &params);
    assert_eq!(
        r.response.status,
        200,
        "{}",
        String::from_utf8_lossy(&r.response.body)
    );
    assert_eq!(r.deliveries.len(), 1);
    let mut d = r.deliveries.into_iter().next().unwrap();
    assert_eq!(d.source, "github/s1/hello");
    assert_eq!(d.events.len(), 1);
    d.events.remove(0)
}

/// The accepted Event the host would hand back.
fn event(e: IngressEvent) -> Event {
    Event {
        id: "ev-38".into(),
        event_type: e.event_type,
        source: "github/s1/hello".into(),
        delivery_id: "d-38".into(),
        scope_id: "s1".into(),
        keys: e.keys,
        payload: e.payload,
        occurred_at: e.occurred_at,
        ..Default::default()
    }
}

fn review_comment() -> Event {
    event(delivered(
        "pull_request_review_comment",
        PULL_REQUEST_REVIEW_COMMENT_CREATED,
    ))
}

fn check_suite() -> Event {
    event(delivered("check_suite", CHECK_SUITE_COMPLETED))
}

fn failed_check_run() -> Event {
    event(delivered("check_run", CHECK_RUN_COMPLETED_FAILURE))
}

/// The recorded review (state `commented`) made `changes_requested`.
fn changes_requested() -> Event {
    event(delivered(
        "pull_request_review",
        &derived(PULL_REQUEST_REVIEW_SUBMITTED, |v| {
            v["review"]["state"] = json!("changes_requested");
            v["review"]["body"] = json!("Please spell it `commit`.");
        }),
    ))
}

/// The recorded issue comment on issue #1, as GitHub sends one on a pull
/// request's conversation (the issue carries a `pull_request` object).
fn comment_on_pr() -> Event {
    event(delivered(
        "issue_comment",
        &derived(ISSUE_COMMENT_CREATED, |v| {
            v["issue"]["pull_request"] = json!({
                "url": "https://api.github.com/repos/Codertocat/Hello-World/pulls/1",
                "html_url": "https://github.com/Codertocat/Hello-World/pull/1"
            });
        }),
    ))
}

const PR2: &str = "github:codertocat/hello-world#2";

// ---------------------------------------------------------------------------
// Projection

#[test]
fn a_review_comment_projects_the_pull_request_and_the_comment() {
    let e = review_comment();
    assert_eq!(e.event_type, "github.pull_request_review_comment.created");
    assert_eq!(e.payload.schema, "github.pull_request_review_comment.v1");
    assert_eq!(e.keys, vec![PR2.to_string()]);
    assert_eq!(e.occurred_at, "2019-05-15T15:20:38Z");
    let d = &e.payload.data;
    assert_eq!(d["action"], "created");
    assert_eq!(d["delivery_id"], "d-38");
    assert_eq!(d["repository"], REPO);
    assert_eq!(d["sender"], "Codertocat");
    assert_eq!(d["number"], 2);
    assert_eq!(d["title"], "Update the README with new information.");
    assert_eq!(d["state"], "open");
    assert_eq!(d["author"], "Codertocat");
    assert_eq!(
        d["html_url"],
        "https://github.com/Codertocat/Hello-World/pull/2"
    );
    assert_eq!(d["head_ref"], "changes");
    assert_eq!(d["head_sha"], HEAD_SHA);
    assert_eq!(d["base_ref"], "master");
    assert_eq!(d["draft"], false);
    let c = &d["comment"];
    assert_eq!(c["id"], 284312630);
    assert_eq!(c["body"], "Maybe you should use more emoji on this line.");
    assert_eq!(c["author"], "Codertocat");
    assert_eq!(c["path"], "README.md");
    assert_eq!(c["line"], 265);
    assert_eq!(c["original_line"], 265);
    assert_eq!(c["diff_hunk"], "@@ -1 +1 @@\n-# Hello-World");
    assert_eq!(
        c["html_url"],
        "https://github.com/Codertocat/Hello-World/pull/2#discussion_r284312630"
    );
    assert_eq!(c["in_reply_to_id"], Value::Null);
    assert_eq!(c["pull_request_review_id"], 237895671);
    assert_eq!(c["created_at"], "2019-05-15T15:20:37Z");
    assert_eq!(c["updated_at"], "2019-05-15T15:20:38Z");
    assert!(c.get("diff_hunk_truncated").is_none());
    assert!(
        d.get("body").is_none(),
        "the pull request's body is not carried"
    );
}

#[test]
fn a_long_diff_hunk_is_cut_to_its_bound() {
    let hunk = format!("@@ -1 +1 @@\n{}", "+é\n".repeat(10_000));
    let e = delivered(
        "pull_request_review_comment",
        &derived(PULL_REQUEST_REVIEW_COMMENT_CREATED, |v| {
            v["comment"]["diff_hunk"] = json!(hunk);
        }),
    );
    let c = &e.payload.data["comment"];
    let cut = c["diff_hunk"].as_str().unwrap();
    assert!(cut.len() <= oc_github::project::MAX_HUNK_BYTES);
    assert!(cut.len() > oc_github::project::MAX_HUNK_BYTES - 4);
    assert!(hunk.starts_with(cut));
    assert_eq!(c["diff_hunk_truncated"], true);
}

#[test]
fn a_completed_check_suite_projects_its_app_and_keys_its_pull_request() {
    let e = check_suite();
    assert_eq!(e.event_type, "github.check_suite.completed");
    assert_eq!(e.payload.schema, "github.check_suite.v1");
    assert_eq!(e.keys, vec![PR2.to_string()]);
    assert_eq!(e.occurred_at, "2019-05-15T15:21:14Z");
    let d = &e.payload.data;
    assert_eq!(d["action"], "completed");
    assert_eq!(d["repository"], REPO);
    assert_eq!(d["sender"], "Codertocat");
    assert_eq!(d["id"], 118578147);
    assert_eq!(d["status"], "completed");
    assert_eq!(d["conclusion"], "success");
    assert_eq!(d["head_sha"], HEAD_SHA);
    assert_eq!(d["head_branch"], "changes");
    // This example's app has no slug: its name stands in.
    assert_eq!(d["app"], "octocoders-linter");
    assert_eq!(d["pull_requests"], json!([2]));
    assert_eq!(d["created_at"], "2019-05-15T15:20:31Z");
    assert_eq!(d["updated_at"], "2019-05-15T15:21:14Z");
}

#[test]
fn a_check_suite_on_no_pull_request_has_no_keys_and_no_work() {
    let e = event(delivered("check_suite", CHECK_SUITE_COMPLETED_NO_PR));
    assert!(e.keys.is_empty());
    let d = &e.payload.data;
    assert_eq!(d["app"], "github-actions");
    assert_eq!(d["head_branch"], "main");
    assert_eq!(d["pull_requests"], json!([]));
    let r = route::match_route(&route_params(e, Value::Null)).unwrap();
    assert!(!r.matched);
    assert!(r.reason.contains("no keys"), "{}", r.reason);
}

#[test]
fn a_failed_check_run_projects_its_output_and_suite() {
    let e = failed_check_run();
    assert_eq!(e.event_type, "github.check_run.completed");
    assert_eq!(e.keys, vec![PR2.to_string()]);
    let d = &e.payload.data;
    assert_eq!(d["id"], 128620228);
    assert_eq!(d["name"], "Octocoders-linter");
    assert_eq!(d["conclusion"], "failure");
    assert_eq!(d["head_sha"], HEAD_SHA);
    assert_eq!(d["check_suite_id"], 118578147);
    assert_eq!(d["output"], json!({"title": null, "summary": null}));
    assert_eq!(d["pull_requests"], json!([2]));
    // The recorded successful run of the same suite.
    let ok = event(delivered("check_run", CHECK_RUN_COMPLETED));
    assert_eq!(ok.payload.data["conclusion"], "success");
    assert_eq!(ok.payload.data["check_suite_id"], 118578147);
}

#[test]
fn a_closed_pull_request_says_whether_it_was_merged() {
    let e = event(delivered("pull_request", PULL_REQUEST_CLOSED));
    assert_eq!(e.event_type, "github.pull_request.closed");
    assert_eq!(e.keys, vec![PR2.to_string()]);
    assert_eq!(e.occurred_at, "2019-05-15T15:21:18Z");
    let d = &e.payload.data;
    assert_eq!(d["state"], "closed");
    assert_eq!(d["merged"], false);
    assert_eq!(d["head_ref"], "changes");
    assert_eq!(d["base_ref"], "master");
    assert_eq!(
        d["body"],
        "This is a pretty simple change that we need to pull into master."
    );
    // Derived: the same close, merged.
    let merged = delivered(
        "pull_request",
        &derived(PULL_REQUEST_CLOSED, |v| {
            v["pull_request"]["merged"] = json!(true)
        }),
    );
    assert_eq!(merged.event_type, "github.pull_request.closed");
    assert_eq!(merged.payload.data["merged"], true);
}

#[test]
fn a_changes_requested_review_and_a_comment_on_a_pull_request_project() {
    let r = changes_requested();
    assert_eq!(r.event_type, "github.pull_request_review.submitted");
    assert_eq!(r.keys, vec![PR2.to_string()]);
    assert_eq!(r.payload.data["review"]["state"], "changes_requested");
    assert_eq!(r.payload.data["review"]["id"], 237895671);
    assert_eq!(r.payload.data["review"]["commit_id"], HEAD_SHA);
    let c = comment_on_pr();
    assert_eq!(c.event_type, "github.issue_comment.created");
    assert_eq!(c.keys, vec!["github:codertocat/hello-world#1".to_string()]);
    assert_eq!(c.payload.data["is_pull_request"], true);
    assert_eq!(c.payload.data["comment"]["id"], 492700400);
}

#[test]
fn an_entry_takes_the_new_events_by_name_and_all_seven_by_default() {
    let reg = registry(json!({"repository": REPO}));
    let e = the_entry(&reg);
    assert_eq!(
        e.github_events(),
        vec![
            "issues",
            "issue_comment",
            "pull_request",
            "pull_request_review",
            "pull_request_review_comment",
            "check_run",
            "check_suite"
        ]
    );
    let only = Registry::from_params(&configure_params(vec![entry(
        json!({"repository": REPO, "events": ["check_suite", "pull_request_review_comment"]}),
    )]))
    .unwrap();
    let e = the_entry(&only);
    assert!(e.accepts(Family::CheckSuite) && e.accepts(Family::PullRequestReviewComment));
    assert!(!e.accepts(Family::CheckRun));
    assert_eq!(
        e.github_events(),
        vec!["pull_request_review_comment", "check_suite"]
    );
    let v = oc_github::validate(&protocol::wire::ValidateParams {
        kind: protocol::wire::validate_kind::EXTENSION.into(),
        type_name: "github".into(),
        config: json!({"repository": REPO}),
        ..Default::default()
    });
    assert!(v.diagnostics.is_empty(), "{:?}", v.diagnostics);
    assert!(
        v.describe[0].contains("pull_request_review_comment, check_run and check_suite"),
        "{:?}",
        v.describe
    );
}

// ---------------------------------------------------------------------------
// Routes

fn route_params(event: Event, config: Value) -> RouteMatchParams {
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

#[test]
fn a_review_comment_routes_to_the_pull_requests_work_with_its_display() {
    let r = route::match_route(&route_params(review_comment(), Value::Null)).unwrap();
    assert!(r.matched, "{}", r.reason);
    assert_eq!(r.keys, vec![PR2.to_string()]);
    let d = r.display.unwrap();
    assert_eq!(d.title, "Update the README with new information.");
    assert_eq!(d.reference, "#2");
    assert_eq!(d.requester, "Codertocat");
    assert_eq!(d.links[0].label, "PR #2");
    // The review family's prefix does not take its comments.
    let r = route::match_route(&route_params(
        review_comment(),
        json!({"events": ["github.pull_request_review"]}),
    ))
    .unwrap();
    assert!(!r.matched);
    let r = route::match_route(&route_params(
        review_comment(),
        json!({"events": ["github.pull_request_review_comment.created"], "labels": ["BUG"]}),
    ))
    .unwrap();
    assert!(r.matched, "{}", r.reason);
}

#[test]
fn a_check_suite_routes_by_its_pull_request_and_keeps_the_works_title() {
    let r = route::match_route(&route_params(check_suite(), Value::Null)).unwrap();
    assert!(r.matched, "{}", r.reason);
    assert_eq!(r.keys, vec![PR2.to_string()]);
    assert!(
        r.reason.contains("check suite of octocoders-linter"),
        "{}",
        r.reason
    );
    let d = r.display.unwrap();
    assert_eq!(d.title, "Checks (octocoders-linter): success");
    assert_eq!(d.reference, "#2");
    // Over a Work's display, a suite keeps its title and ref.
    let mut p = route_params(check_suite(), Value::Null);
    p.work = Some(protocol::wire::Work {
        display: Some(protocol::wire::WorkDisplay {
            title: "Fix the README".into(),
            reference: "#1".into(),
            requester: "Codertocat".into(),
            links: Vec::new(),
        }),
        ..Default::default()
    });
    let d = route::match_route(&p).unwrap().display.unwrap();
    assert_eq!(d.title, "Fix the README");
    assert_eq!(d.reference, "#1");
    // A route with labels does not take a suite.
    let r = route::match_route(&route_params(check_suite(), json!({"labels": ["bug"]}))).unwrap();
    assert!(!r.matched);
    assert!(
        route::RouteConfig::parse(&json!({"events": ["github.check_suite.completed"]})).is_ok()
    );
}

// ---------------------------------------------------------------------------
// dependency.filter

fn plan(kind: Kind, number: u64) -> Plan {
    Plan {
        id: "p1".into(),
        kind,
        work_id: "w1".into(),
        scope_id: "s1".into(),
        connection: "gh".into(),
        source: "github/s1/hello".into(),
        repository: REPO.into(),
        number,
        head_sha: if kind == Kind::Checks {
            HEAD_SHA.into()
        } else {
            String::new()
        },
        after_id: 0,
        pending_checks: Vec::new(),
        pending_checks_truncated: false,
        bot: "oc-bot".into(),
        planned_at: "2019-05-15T15:20:00.000Z".into(),
        due_ms: 0,
        progress: String::new(),
    }
}

fn pending(id: u64, name: &str, suite_id: u64) -> PendingCheck {
    PendingCheck {
        id,
        name: name.into(),
        suite_id,
    }
}

fn matched(plan: &Plan, event: &Event) -> bool {
    filter::filter(&DependencyFilterParams {
        operation: "github.wait".into(),
        work_id: "w1".into(),
        plan: serde_json::to_value(plan).unwrap(),
        event: event.clone(),
    })
    .unwrap()
    .matched
}

#[test]
fn a_completed_suite_satisfies_checks_when_the_pending_runs_were_its_own() {
    let mut p = plan(Kind::Checks, 2);
    // Nothing had reported when the wait was planned: the suite's completion decides.
    assert!(matched(&p, &check_suite()));
    // Its own run was pending.
    p.pending_checks = vec![pending(128620228, "Octocoders-linter", 118578147)];
    assert!(matched(&p, &check_suite()));
    // A run of another suite was pending too: left to the task.
    p.pending_checks.push(pending(9, "deploy", 777));
    assert!(!matched(&p, &check_suite()));
    assert!(filter::decide(&p, &check_suite())
        .unwrap_err()
        .contains("deploy"));
    // Another head commit.
    let mut other = plan(Kind::Checks, 2);
    other.head_sha = "0000000000000000000000000000000000000000".into();
    assert!(!matched(&other, &check_suite()));
    // More pending runs than the plan lists.
    let mut many = plan(Kind::Checks, 2);
    many.pending_checks_truncated = true;
    assert!(!matched(&many, &check_suite()));
}

#[test]
fn a_completed_run_satisfies_checks_only_when_it_was_the_one_pending() {
    let mut p = plan(Kind::Checks, 2);
    assert!(!matched(&p, &failed_check_run()), "no run was pending");
    p.pending_checks = vec![pending(128620228, "Octocoders-linter", 118578147)];
    assert!(matched(&p, &failed_check_run()));
    // A re-run has a new ID and the same name.
    p.pending_checks = vec![pending(1, "Octocoders-linter", 118578147)];
    assert!(matched(&p, &failed_check_run()));
    p.pending_checks = vec![pending(1, "lint", 118578147)];
    assert!(!matched(&p, &failed_check_run()));
    p.pending_checks = vec![
        pending(128620228, "Octocoders-linter", 118578147),
        pending(2, "test", 118578147),
    ];
    assert!(!matched(&p, &failed_check_run()));
}

#[test]
fn checks_are_not_satisfied_by_other_repositories_types_or_schemas() {
    let p = plan(Kind::Checks, 2);
    let elsewhere = event(project_of(
        Family::CheckSuite,
        &derived(CHECK_SUITE_COMPLETED, |v| {
            v["repository"]["full_name"] = json!("someone/else")
        }),
    ));
    assert!(!matched(&p, &elsewhere));
    assert!(!matched(&p, &changes_requested()));
    let mut v2 = check_suite();
    v2.payload.schema = "github.check_suite.v2".into();
    assert!(!matched(&p, &v2));
    // A suite still running.
    let running = event(project_of(
        Family::CheckSuite,
        &derived(CHECK_SUITE_COMPLETED, |v| {
            v["check_suite"]["status"] = json!("in_progress")
        }),
    ));
    assert!(!matched(&p, &running));
}

fn project_of(family: Family, body: &[u8]) -> IngressEvent {
    oc_github::project::project(family, "d-38", &json_of(body)).unwrap()
}

#[test]
fn a_review_after_planning_by_someone_else_satisfies_a_review_wait() {
    let mut p = plan(Kind::Review, 2);
    assert!(matched(&p, &changes_requested()));
    // The recorded `commented` review counts as well.
    let commented = event(delivered(
        "pull_request_review",
        PULL_REQUEST_REVIEW_SUBMITTED,
    ));
    assert!(matched(&p, &commented));
    // Not newer than the newest when planned.
    p.after_id = 237895671;
    assert!(!matched(&p, &changes_requested()));
    // The connection's own review.
    let mut own = plan(Kind::Review, 2);
    own.bot = "codertocat".into();
    assert!(!matched(&own, &changes_requested()));
    // Another pull request.
    assert!(!matched(&plan(Kind::Review, 3), &changes_requested()));
    // A comment does not satisfy a review wait.
    assert!(!matched(&plan(Kind::Review, 2), &review_comment()));
}

#[test]
fn a_new_comment_by_someone_else_satisfies_a_reply_wait() {
    // The conversation's comment on #1, newer than the newest when planned.
    let mut p = plan(Kind::Reply, 1);
    let on_issue = event(delivered("issue_comment", ISSUE_COMMENT_CREATED));
    assert!(matched(&p, &on_issue));
    assert!(matched(&p, &comment_on_pr()));
    p.after_id = 492700400;
    assert!(!matched(&p, &on_issue));
    let mut own = plan(Kind::Reply, 1);
    own.bot = "Codertocat".into();
    assert!(!matched(&own, &on_issue));
    // A review comment on #2, by its time: made 15:20:37, so a plan of 15:20:00 or
    // of the same second takes it, a later one does not.
    let mut p = plan(Kind::Reply, 2);
    assert!(matched(&p, &review_comment()));
    p.planned_at = "2019-05-15T15:20:37.900Z".into();
    assert!(matched(&p, &review_comment()));
    p.planned_at = "2019-05-15T15:20:38.000Z".into();
    assert!(!matched(&p, &review_comment()));
    assert!(
        !matched(&plan(Kind::Reply, 1), &review_comment()),
        "#2, not #1"
    );
    // A reply wait is not satisfied by a review.
    assert!(!matched(&plan(Kind::Reply, 2), &changes_requested()));
}

#[test]
fn the_tasks_own_event_satisfies_its_plan_only() {
    let p = plan(Kind::Checks, 2);
    let own = waking_event(&p, serde_json::Map::new());
    let own = Event {
        id: "w".into(),
        event_type: own.event_type,
        keys: own.keys,
        payload: own.payload,
        ..Default::default()
    };
    assert!(matched(&p, &own));
    let mut other = p.clone();
    other.id = "p2".into();
    assert!(!matched(&other, &own));
}

#[test]
fn a_broken_plan_or_another_operation_is_an_error() {
    let e = filter::filter(&DependencyFilterParams {
        operation: "github.wait".into(),
        work_id: "w1".into(),
        plan: json!({"kind": "checks"}),
        event: check_suite(),
    })
    .unwrap_err();
    assert!(e.message.contains("plan"), "{}", e.message);
    let e = filter::filter(&DependencyFilterParams {
        operation: "github.comment".into(),
        work_id: "w1".into(),
        plan: serde_json::to_value(plan(Kind::Checks, 2)).unwrap(),
        event: check_suite(),
    })
    .unwrap_err();
    assert!(e.message.contains("github.comment"), "{}", e.message);
    // Another Work's plan is no match.
    let r = filter::filter(&DependencyFilterParams {
        operation: "github.wait".into(),
        work_id: "w2".into(),
        plan: serde_json::to_value(plan(Kind::Checks, 2)).unwrap(),
        event: check_suite(),
    })
    .unwrap();
    assert!(!r.matched);
}

// ---------------------------------------------------------------------------
// event.render (the payload's part; the API's is in tests/api.rs and
// tests/operations.rs)

fn rendered(e: &Event, extra: &render::Extra) -> String {
    let family = render::family_of(e).unwrap();
    render::markdown(family, e, extra)
}

#[test]
fn an_issue_renders_its_title_state_author_labels_and_body() {
    let e = event(delivered("issues", ISSUES_OPENED));
    let text = rendered(&e, &render::Extra::default());
    assert!(
        text.starts_with("## Issue #1 opened: Spelling error in the README file\n"),
        "{text}"
    );
    assert!(
        text.contains("state: open · author: @Codertocat · labels: bug"),
        "{text}"
    );
    assert!(text.contains("https://github.com/Codertocat/Hello-World/issues/1"));
    assert!(text.contains("> It looks like you accidently spelled 'commit' with two 't's."));
}

#[test]
fn a_comment_renders_with_its_conversation_without_repeating_itself() {
    let e = comment_on_pr();
    let alone = rendered(&e, &render::Extra::default());
    assert!(
        alone.starts_with("## @Codertocat commented on pull request #1: Spelling error"),
        "{alone}"
    );
    assert!(alone.contains("> You are totally right! I'll get this fixed right away."));
    let thread = vec![
        json!({"id": 1, "user": {"login": "alice"}, "created_at": "2019-05-15T15:00:00Z", "body": "First!"}),
        json!({"id": 492700400, "user": {"login": "Codertocat"}, "created_at": "2019-05-15T15:20:21Z",
               "body": "You are totally right! I'll get this fixed right away."}),
    ];
    let text = rendered(
        &e,
        &render::Extra {
            thread: Some(thread),
            ..Default::default()
        },
    );
    assert!(text.contains("### The conversation on #1"), "{text}");
    assert!(
        text.contains("**@alice** (2019-05-15T15:00:00Z):\n> First!"),
        "{text}"
    );
    assert_eq!(text.matches("I'll get this fixed").count(), 1, "{text}");
}

#[test]
fn a_pull_request_renders_head_base_and_whether_it_merged() {
    let closed = event(delivered("pull_request", PULL_REQUEST_CLOSED));
    let text = rendered(&closed, &render::Extra::default());
    assert!(
        text.starts_with(
            "## Pull request #2 closed without merging: Update the README with new information.\n"
        ),
        "{text}"
    );
    assert!(
        text.contains("`changes` → `master` · head ec26c3e · state: closed"),
        "{text}"
    );
    assert!(text.contains("> This is a pretty simple change"));
    let merged = event(delivered(
        "pull_request",
        &derived(PULL_REQUEST_CLOSED, |v| {
            v["pull_request"]["merged"] = json!(true)
        }),
    ));
    let text = rendered(&merged, &render::Extra::default());
    assert!(text.starts_with("## Pull request #2 merged:"), "{text}");
    assert!(text.contains("state: closed, merged"), "{text}");
}

#[test]
fn a_review_renders_its_state_body_and_comments_with_their_hunks() {
    let e = changes_requested();
    let comments = vec![json!({
        "id": 10, "path": "README.md", "line": 1, "user": {"login": "Codertocat"},
        "diff_hunk": "@@ -1 +1 @@\n-# Hello-World\n+# Hello-World ```", "body": "Spell it out."
    })];
    let text = rendered(
        &e,
        &render::Extra {
            review_comments: Some(comments),
            ..Default::default()
        },
    );
    assert!(
        text.starts_with("## @Codertocat reviewed pull request #2: changes requested\n"),
        "{text}"
    );
    assert!(text.contains("> Please spell it `commit`."), "{text}");
    assert!(text.contains("### Review comments (1)"), "{text}");
    assert!(
        text.contains("#### `README.md` line 1 (@Codertocat)"),
        "{text}"
    );
    // The hunk's own backticks do not close its fence.
    assert!(
        text.contains(
            "````diff\n@@ -1 +1 @@\n-# Hello-World\n+# Hello-World ```\n````\n> Spell it out."
        ),
        "{text}"
    );
    // Without the API's part it says so.
    let text = rendered(
        &e,
        &render::Extra {
            notes: vec!["The review's comments were not read from GitHub (x).".into()],
            ..Default::default()
        },
    );
    assert!(text.ends_with("\n_The review's comments were not read from GitHub (x)._\n"));
}

#[test]
fn a_review_comment_renders_its_path_line_and_hunk() {
    let text = rendered(&review_comment(), &render::Extra::default());
    assert!(
        text.starts_with("## @Codertocat commented on `README.md` line 265 in pull request #2\n"),
        "{text}"
    );
    assert!(
        text.contains("```diff\n@@ -1 +1 @@\n-# Hello-World\n```\n> Maybe you should use more emoji on this line.\n"),
        "{text}"
    );
}

#[test]
fn checks_render_their_outcome_and_a_failed_runs_output() {
    let text = rendered(&failed_check_run(), &render::Extra::default());
    assert!(
        text.starts_with("## Check run \"Octocoders-linter\" completed: failure\n"),
        "{text}"
    );
    assert!(text.contains("commit ec26c3e · pull request #2"), "{text}");
    assert!(
        text.contains("_The check run reported no output._"),
        "{text}"
    );
    let from_api = json!({"output": {"title": "2 errors", "summary": "lint failed on README.md"}});
    let text = rendered(
        &failed_check_run(),
        &render::Extra {
            check_run: Some(from_api),
            ..Default::default()
        },
    );
    assert!(
        text.contains("**2 errors**\n\n> lint failed on README.md\n"),
        "{text}"
    );
    let text = rendered(&check_suite(), &render::Extra::default());
    assert!(
        text.starts_with("## Checks of octocoders-linter completed: success\n"),
        "{text}"
    );
    assert!(
        text.contains("branch `changes` · commit ec26c3e · pull request #2"),
        "{text}"
    );
}

#[test]
fn a_wait_event_renders_what_woke_it() {
    let p = plan(Kind::Checks, 2);
    let runs = [
        json!({"name": "lint", "status": "completed", "conclusion": "success", "html_url": "https://x/1"}),
        json!({"name": "test", "status": "completed", "conclusion": "failure", "html_url": "https://x/2"}),
    ];
    let oc_github::waits::Observed::Done(found) = oc_github::waits::checks_state(&runs) else {
        panic!("done")
    };
    let w = waking_event(&p, found);
    let e = Event {
        id: "w".into(),
        event_type: w.event_type,
        keys: w.keys,
        payload: w.payload,
        ..Default::default()
    };
    let text = rendered(&e, &render::Extra::default());
    assert!(
        text.starts_with(
            "## The wait is over: every check on pull request #2 finished (failure)\n"
        ),
        "{text}"
    );
    assert!(text.contains("2 checks, 1 failed"), "{text}");
    assert!(text.contains("- test: failure https://x/2"), "{text}");
}

#[test]
fn the_text_is_bounded_at_a_character_boundary() {
    let long = event(delivered(
        "issues",
        &derived(ISSUES_OPENED, |v| {
            v["issue"]["body"] = json!("é".repeat(40_000))
        }),
    ));
    let text = rendered(&long, &render::Extra::default());
    let r = render::finish(&text, render::bound(0));
    assert!(r.truncated);
    assert!(r.text.len() <= render::DEFAULT_MAX_BYTES);
    assert!(r.text.len() >= render::DEFAULT_MAX_BYTES - 1);
    let r = render::finish(&text, render::bound(1001));
    assert!(
        r.text.len() == 1000 || r.text.len() == 1001,
        "{}",
        r.text.len()
    );
    assert!(r.text.ends_with('é'), "cut before a split character");
    let r = render::finish(&text, render::bound(u32::MAX));
    assert!(r.text.len() <= MAX_RENDERED_BYTES && r.truncated);
    let short = render::finish("## x\n", render::bound(0));
    assert!(!short.truncated);
}

#[test]
fn an_unreadable_schema_is_not_rendered() {
    let mut e = check_suite();
    e.payload.schema = "github.check_suite.v9".into();
    let err = render::family_of(&e).unwrap_err();
    assert!(
        err.message.contains("unreadable payload schema"),
        "{}",
        err.message
    );
}
