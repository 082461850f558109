//! Reconcile's observations: a polled issue becomes the webhook payload of its last
//! change and goes through the webhook path's own projection, so the same change
//! has the same identity (`Issue/<id>/<updatedAt>`) and the same Event whether the
//! delivery or a poll brings it; a change the webhook path ignores (an edit of an
//! issue assigned long ago) is no observation; a state move and a label added are
//! read from the history entry of the change. A polled comment becomes the
//! payload of its creation and has its delivery's identity (`Comment/<id>/create`)
//! and Event; the agent's own comment and another team's are no observation.

#![allow(clippy::unwrap_used)]

mod standin;

use oc_linear::config::{EntryConfig, Registry};
use oc_linear::project::{project, Verdict};
use oc_linear::reconcile::{comment_observation, comment_payload, observation, payload_of};
use protocol::wire::{ConfigureParams, Entry};
use serde_json::{json, Value};

const ISSUE: &[u8] = include_bytes!("fixtures/issue-assigned.json");

fn entry() -> EntryConfig {
    Registry::from_params(&ConfigureParams {
        entries: vec![Entry {
            scope_id: "s1".into(),
            entry_type: "linear".into(),
            name: "eng".into(),
            connection: "lin".into(),
            config: json!({"teams": ["LIN"], "agent_user": "agent@example.com",
                           "states": ["Ready for agent"], "labels": ["agent"]}),
            ..Default::default()
        }],
        ..Default::default()
    })
    .unwrap()
    .entries
    .remove(0)
}

fn polled() -> Vec<Value> {
    standin::issues_since()["data"]["issues"]["nodes"]
        .as_array()
        .unwrap()
        .clone()
}

#[test]
fn a_polled_change_has_the_identity_and_event_of_its_delivery() {
    let entry = entry();
    let payload: Value = serde_json::from_slice(ISSUE).unwrap();
    let Verdict::Deliver(delivered) = project(&entry, &payload).unwrap() else {
        panic!("the fixture is delivered");
    };
    let issues = polled();
    let o = observation(&entry, &issues[0]).expect("the same change, observed");
    assert_eq!(o.delivery_id, delivered.delivery_id);
    assert_eq!(
        o.delivery_id,
        "Issue/539068e2-ae88-4d09-bd75-22eb4a59612f/2020-01-23T12:55:02.101Z"
    );
    assert_eq!(o.events.len(), 1);
    assert_eq!(o.events[0].event_type, delivered.events[0].event_type);
    assert_eq!(o.events[0].keys, delivered.events[0].keys);
    // The same Event: the store keeps one delivery ID with one envelope.
    assert_eq!(o.events, delivered.events);

    // A change whose delivery was missed: found, with its own identity.
    let missed = observation(&entry, &issues[1]).expect("the missed assignment");
    assert_eq!(
        missed.delivery_id,
        "Issue/6d2f0a51-3c4b-4e5f-8a9b-0c1d2e3f4a5b/2020-01-23T13:10:00.000Z"
    );
    assert_eq!(missed.events[0].event_type, "linear.issue.assigned");
    assert_eq!(missed.events[0].keys, vec!["linear:LIN-1779".to_string()]);

    // An edit of an issue assigned long ago: the webhook path ignores it, so does this.
    assert!(observation(&entry, &issues[2]).is_none());
}

#[test]
fn a_move_and_a_label_are_read_from_the_change_history() {
    let entry = entry();
    let mut issue = standin::polled_issue(
        "8f4b2c73-5e6d-4a7b-8cbd-2e3f4a5b6c7d",
        "LIN-1781",
        "Moved",
        "2020-01-24T10:00:00.000Z",
        json!({"createdAt": "2020-01-24T10:00:00.001Z", "fromStateId": "s0",
               "toStateId": "s9", "addedLabelIds": ["lab-agent"]}),
    );
    issue["assignee"] = Value::Null;
    issue["state"] = json!({"id": "s9", "name": "Ready for agent", "type": "unstarted"});
    issue["labels"]["nodes"] = json!([{"id": "lab-agent", "name": "agent"}]);
    let payload = payload_of(&issue);
    assert_eq!(payload["action"], "update");
    assert_eq!(payload["updatedFrom"]["stateId"], "s0");
    assert_eq!(payload["updatedFrom"]["labelIds"], json!([]));
    assert!(payload["updatedFrom"].get("assigneeId").is_none());
    let o = observation(&entry, &issue).expect("moved and labelled");
    assert_eq!(o.events[0].event_type, "linear.issue.moved");
    assert_eq!(
        o.events[0].payload.data["triggers"],
        json!(["moved", "labeled"])
    );

    // A new issue (never updated) is a create.
    let mut created = issue.clone();
    created["updatedAt"] = created["createdAt"].clone();
    assert_eq!(payload_of(&created)["action"], "create");
}

const COMMENT: &[u8] = include_bytes!("fixtures/comment-created.json");

/// The comment fixture as Linear delivers it, through the webhook path (signature,
/// timestamp, projection): its one delivery.
fn delivered_comment(entry: &EntryConfig) -> protocol::wire::Delivery {
    use std::collections::BTreeMap;
    let mut payload: Value = serde_json::from_slice(COMMENT).unwrap();
    let now = 1_579_784_000_000;
    payload["webhookTimestamp"] = json!(now);
    let body = serde_json::to_vec(&payload).unwrap();
    let secret = b"lin_wh_reconcile";
    let mut headers = BTreeMap::new();
    headers.insert(
        "Linear-Signature".to_string(),
        vec![sdk::tracker::hmac_sha256_hex(secret, &body)],
    );
    let params = protocol::wire::WebhookHandleParams {
        method: "POST".into(),
        path: entry.path.clone(),
        headers,
        body,
        ..Default::default()
    };
    let result = oc_linear::intake::process(entry, secret, &params, now);
    assert_eq!(result.response.status, 200);
    result.deliveries.into_iter().next().expect("one delivery")
}

/// The fixture's comment as `OcCommentsSince` answers it.
fn polled_fixture_comment() -> Value {
    let payload: Value = serde_json::from_slice(COMMENT).unwrap();
    let data = &payload["data"];
    standin::polled_comment(
        data["id"].as_str().unwrap(),
        data["body"].as_str().unwrap(),
        data["createdAt"].as_str().unwrap(),
    )
}

#[test]
fn a_polled_comment_has_the_identity_and_event_of_its_delivery() {
    let mut entry = entry();
    entry.config.mention = Some("@conduit".into());
    let delivered = delivered_comment(&entry);
    assert_eq!(
        delivered.delivery_id,
        "Comment/2174add1-f7c8-44e3-bbf3-2d60b5ea8bc9/create"
    );
    let o = comment_observation(&entry, &polled_fixture_comment()).expect("the comment");
    assert_eq!(o.delivery_id, delivered.delivery_id);
    assert_eq!(o.item, "Comment/2174add1-f7c8-44e3-bbf3-2d60b5ea8bc9");
    // The same Event, so the store keeps one (a delivered comment adds nothing).
    assert_eq!(o.events, delivered.events);
    assert_eq!(o.events[0].event_type, "linear.issue.commented");
    assert_eq!(o.events[0].keys, vec!["linear:LIN-1778".to_string()]);
    assert_eq!(o.events[0].payload.data["comment"]["mentions_agent"], true);
    assert_eq!(o.events[0].occurred_at, "2020-01-23T12:53:18.084Z");
    // Only the delivery knows them; neither Event carries them.
    assert!(o.events[0].payload.data["actor"].is_null());
    assert_eq!(o.events[0].payload.data["webhook_id"], "");
}

#[test]
fn a_polled_comment_the_webhook_path_ignores_is_no_observation() {
    let entry = entry();
    // The agent's own comment.
    let mut own = standin::polled_comment("c-own", "Done.", "2020-01-24T00:00:00.000Z");
    own["user"] = json!({"id": "d1e2f3a4-1111-4222-8333-444455556666", "name": "Conduit Agent",
                         "email": "agent@example.com"});
    assert!(comment_observation(&entry, &own).is_none());
    // Another team's issue.
    let mut other = standin::polled_comment("c-other", "Hi", "2020-01-24T00:00:00.000Z");
    other["issue"]["identifier"] = json!("OPS-4");
    assert!(comment_observation(&entry, &other).is_none());
    // A bot's comment (no user) on the team's issue is still a comment.
    let mut bot = standin::polled_comment("c-bot", "Build failed", "2020-01-24T00:00:00.000Z");
    bot["user"] = Value::Null;
    let o = comment_observation(&entry, &bot).expect("a comment without a user");
    assert_eq!(o.delivery_id, "Comment/c-bot/create");
    assert_eq!(
        comment_payload(&bot)["data"].get("userId"),
        None,
        "as Linear's payload of a comment without a user"
    );
}
