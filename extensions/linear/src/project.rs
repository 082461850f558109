//! A verified Linear webhook payload to at most one Event of family `linear.issue`.
//!
//! Taken, for an issue of one of the entry's teams:
//!
//! - an `Issue` `create` or `update` whose assignee became the agent user
//!   (`linear.issue.assigned`), or that moved into one of the entry's `states`
//!   (`linear.issue.moved`), or that was given one of its `labels`
//!   (`linear.issue.labeled`); for an `update`, Linear's `updatedFrom` says what
//!   changed (`assigneeId`, `stateId`, `labelIds`), so an edit of something else is
//!   not a new trigger;
//! - a `Comment` `create` on an issue, by someone other than the agent user
//!   (`linear.issue.commented`, `mentions_agent` when it carries the entry's
//!   `mention`): the route decides whether it joins open Work or starts it.
//!
//! Each Event is keyed by its issue, `linear:<identifier>` (`linear:ENG-123`); its
//! delivery ID is the change's identity (`Issue/<id>/<updatedAt>`,
//! `Comment/<id>/create`), which a redelivery of the same change repeats.
//!
//! The data (schema `linear.issue.v1`): `kind` (`assigned`, `moved`, `labeled`,
//! `commented`), `action`, `triggers`, `issue` {`id`, `identifier`, `title`, `url`,
//! `team`, `state`, `assignee_id`, `creator`, `description` (cut to
//! [`MAX_TEXT_BYTES`])}, and for a comment `comment` {`id`, `body` (cut), `user_id`,
//! `user`, `mentions_agent`}, `actor`, `webhook_id`. An Event carries only what the
//! issue or the comment itself says, so reconcile, polling it, makes the same Event
//! a delivery of the same change makes: an issue's Event has no `actor` and no
//! `webhook_id`, and a comment's has `actor` null and `webhook_id` empty, since the
//! webhook path drops the payload's `actor` and `webhookId` before projecting
//! ([`crate::intake::strip_delivery_fields`]).

use protocol::wire::{Delivery, IngressEvent, Payload};
use serde_json::{json, Value};

use crate::config::EntryConfig;
use crate::{FAMILY, SCHEMA};

/// The most bytes of a description or comment body an Event carries.
pub const MAX_TEXT_BYTES: usize = 64 * 1024;
const MAX_ID_BYTES: usize = 100;

/// What a payload comes to.
#[derive(Debug, Clone, PartialEq)]
pub enum Verdict {
    /// One delivery of one Event.
    Deliver(Delivery),
    /// Nothing, and why.
    Ignored(String),
}

/// The Work key of an issue: `linear:<identifier>`.
pub fn key(identifier: &str) -> String {
    format!("linear:{identifier}")
}

/// An issue identifier: a team key, `-`, a number (`ENG-123`).
pub fn is_identifier(s: &str) -> bool {
    match s.rsplit_once('-') {
        Some((team, n)) => {
            crate::config::is_team_key(team)
                && !n.is_empty()
                && n.len() <= 12
                && n.bytes().all(|b| b.is_ascii_digit())
        }
        None => false,
    }
}

/// The identifier of a key made by [`key`].
pub fn parse_key(key: &str) -> Option<&str> {
    key.strip_prefix("linear:").filter(|s| is_identifier(s))
}

fn s<'a>(v: &'a Value, field: &str) -> &'a str {
    v.get(field).and_then(Value::as_str).unwrap_or_default()
}

fn id_ok(s: &str) -> bool {
    !s.is_empty() && s.len() <= MAX_ID_BYTES && !s.chars().any(char::is_control)
}

fn clipped(text: &str) -> (String, bool) {
    let (t, cut) = sdk::tracker::clip(text, MAX_TEXT_BYTES);
    (t.to_string(), cut)
}

/// True when `user` (an `assignee`/`user` child object and its ID) is the agent.
fn is_agent(entry: &EntryConfig, id: &str, child: Option<&Value>) -> bool {
    let agent = entry.config.agent_user.as_str();
    (!id.is_empty() && id == agent)
        || child.is_some_and(|c| {
            s(c, "id") == agent
                || (!s(c, "email").is_empty() && s(c, "email").eq_ignore_ascii_case(agent))
        })
}

fn person(child: Option<&Value>, id: &str) -> Value {
    match child {
        Some(c) => json!({"id": s(c, "id"), "name": s(c, "name")}),
        None => json!({"id": id, "name": ""}),
    }
}

/// Turns a verified payload into at most one delivery for `entry`.
pub fn project(entry: &EntryConfig, payload: &Value) -> Result<Verdict, String> {
    let kind = s(payload, "type");
    let action = s(payload, "action");
    let data = payload
        .get("data")
        .filter(|d| d.is_object())
        .ok_or("no `data` object")?;
    match (kind, action) {
        ("Issue", "create" | "update") => issue(entry, payload, data, action),
        ("Comment", "create") => comment(entry, payload, data),
        _ => Ok(Verdict::Ignored(format!(
            "Linear `{kind}` `{action}` is not one this package takes"
        ))),
    }
}

fn team_of<'a>(entry: &EntryConfig, identifier: &'a str) -> Option<&'a str> {
    let (team, _) = identifier.rsplit_once('-')?;
    entry
        .config
        .teams
        .iter()
        .any(|t| t.eq_ignore_ascii_case(team))
        .then_some(team)
}

fn issue(
    entry: &EntryConfig,
    payload: &Value,
    data: &Value,
    action: &str,
) -> Result<Verdict, String> {
    let identifier = s(data, "identifier");
    if !is_identifier(identifier) {
        return Err(format!(
            "issue identifier `{identifier}` is not TEAM-NUMBER"
        ));
    }
    let id = s(data, "id");
    if !id_ok(id) {
        return Err("an issue without a readable id".into());
    }
    let Some(team) = team_of(entry, identifier) else {
        return Ok(Verdict::Ignored(format!(
            "issue {identifier} is not of team(s) {}",
            entry.config.teams.join(", ")
        )));
    };
    let created = action == "create";
    let from = payload.get("updatedFrom");
    let changed = |field: &str| created || from.is_some_and(|f| f.get(field).is_some());
    let mut triggers: Vec<&str> = Vec::new();
    if changed("assigneeId") && is_agent(entry, s(data, "assigneeId"), data.get("assignee")) {
        triggers.push("assigned");
    }
    let state = data
        .get("state")
        .map(|st| s(st, "name"))
        .unwrap_or_default();
    if changed("stateId")
        && entry
            .config
            .states
            .iter()
            .any(|w| w.eq_ignore_ascii_case(state))
    {
        triggers.push("moved");
    }
    if changed("labelIds") {
        let before: Vec<&str> = from
            .and_then(|f| f.get("labelIds"))
            .and_then(Value::as_array)
            .map(|a| a.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        let added = data
            .get("labels")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter(|l| !before.contains(&s(l, "id")))
            .any(|l| {
                entry
                    .config
                    .labels
                    .iter()
                    .any(|w| w.eq_ignore_ascii_case(s(l, "name")))
            });
        if added {
            triggers.push("labeled");
        }
    }
    let Some(first) = triggers.first().copied() else {
        return Ok(Verdict::Ignored(format!(
            "issue {identifier}: no trigger (not assigned to the agent, moved to a configured state or given a configured label)"
        )));
    };
    let (description, cut) = clipped(s(data, "description"));
    let updated = s(data, "updatedAt");
    let data_out = json!({
        "kind": first,
        "action": action,
        "triggers": triggers,
        "issue": {
            "id": id,
            "identifier": identifier,
            "title": s(data, "title"),
            "url": s(data, "url"),
            "team": team.to_ascii_uppercase(),
            "state": state,
            "assignee_id": s(data, "assigneeId"),
            "creator": person(data.get("creator"), s(data, "creatorId")),
            "description": description,
            "description_truncated": cut,
        },
    });
    Ok(deliver(
        entry,
        format!("Issue/{id}/{updated}"),
        first,
        identifier,
        data_out,
        updated,
    ))
}

fn comment(entry: &EntryConfig, payload: &Value, data: &Value) -> Result<Verdict, String> {
    let id = s(data, "id");
    if !id_ok(id) {
        return Err("a comment without a readable id".into());
    }
    let Some(issue) = data.get("issue").filter(|i| i.is_object()) else {
        return Ok(Verdict::Ignored(
            "a comment on something other than an issue".into(),
        ));
    };
    let identifier = s(issue, "identifier");
    if !is_identifier(identifier) {
        return Err(format!(
            "issue identifier `{identifier}` is not TEAM-NUMBER"
        ));
    }
    let Some(team) = team_of(entry, identifier) else {
        return Ok(Verdict::Ignored(format!(
            "issue {identifier} is not of team(s) {}",
            entry.config.teams.join(", ")
        )));
    };
    let user_id = s(data, "userId");
    if is_agent(entry, user_id, data.get("user")) {
        return Ok(Verdict::Ignored(
            "a comment by the agent user itself".into(),
        ));
    }
    let body = s(data, "body");
    let mentions = entry
        .config
        .mention
        .as_deref()
        .is_some_and(|m| body.to_lowercase().contains(&m.to_lowercase()))
        || body.contains(&entry.config.agent_user);
    let (body, cut) = clipped(body);
    let data_out = json!({
        "kind": "commented",
        "action": "create",
        "triggers": ["commented"],
        "issue": {
            "id": s(issue, "id"),
            "identifier": identifier,
            "title": s(issue, "title"),
            "url": s(issue, "url"),
            "team": team.to_ascii_uppercase(),
        },
        "comment": {
            "id": id,
            "body": body,
            "body_truncated": cut,
            "user": person(data.get("user"), user_id),
            "mentions_agent": mentions,
        },
        "actor": payload.get("actor").cloned().unwrap_or(Value::Null),
        "webhook_id": s(payload, "webhookId"),
    });
    Ok(deliver(
        entry,
        format!("Comment/{id}/create"),
        "commented",
        identifier,
        data_out,
        s(data, "createdAt"),
    ))
}

fn deliver(
    entry: &EntryConfig,
    delivery_id: String,
    kind: &str,
    identifier: &str,
    data: Value,
    occurred_at: &str,
) -> Verdict {
    Verdict::Deliver(Delivery {
        source: entry.source.clone(),
        delivery_id,
        body: None,
        events: vec![IngressEvent {
            event_type: format!("{FAMILY}.{kind}"),
            payload: Payload {
                schema: SCHEMA.to_string(),
                data,
            },
            keys: vec![key(identifier)],
            occurred_at: if protocol::time::parse_rfc3339_ms(occurred_at).is_some() {
                occurred_at.to_string()
            } else {
                String::new()
            },
            snapshot: false,
        }],
    })
}
