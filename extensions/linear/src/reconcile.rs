//! `ingress.reconcile`: issue changes and comments Linear could not deliver, found
//! by polling.
//!
//! A scan reads the issues of the entry's teams updated after the checkpoint
//! (`issues(filter: {team: {key: {in: …}}, updatedAt: {gt: …}}, orderBy: updatedAt)`,
//! [`crate::api::ISSUES_SINCE_QUERY`], pages of the page's `max_items`, at most
//! [`MAX_PER_PAGE`]) and turns each issue's last change into the webhook payload
//! Linear would have sent for it ([`payload_of`]: the issue's fields, and
//! `updatedFrom` from the history entry of that change), then through the webhook
//! path's own [`project::project`]. So the Event has the identity a delivery of the
//! same change carries (`Issue/<id>/<updatedAt>`): a missed delivery is found once,
//! and a late one (or one already kept) adds nothing. Changes the webhook path
//! would ignore are skipped the same way.
//!
//! The checkpoint is the newest `updatedAt` of the last complete scan (kept by the
//! host with the source); without one a scan looks back [`FIRST_LOOKBACK_MS`]. Every
//! API failure fails the page, so the checkpoint stays. A page cut short by
//! `max_bytes` resumes on the same Linear page past `skip` nodes.
//!
//! Then the comments created after the checkpoint on the teams' issues
//! ([`COMMENTS_SINCE_QUERY`], `comments(filter: {issue: {team: …}, createdAt: {gt: …}})`,
//! the same page size) become the `Comment` `create` payload their delivery
//! carries ([`comment_payload`]) and go through the same projection: identity
//! `Comment/<id>/create`, so a missed comment is found once and a delivered one adds
//! nothing. The cursor is `v2|<phase>|<newest issue>|<newest comment>|<skip>|<Linear's
//! cursor>`, the checkpoint `v2|<issues>|<comments>` (each phase's newest time; a
//! bare time, the checkpoint of earlier versions, is both). A scan is bounded by the
//! runtime's page limit and [`MAX_PER_PAGE`] a page.

use protocol::wire::{IngressReconcileParams, IngressReconcileResult, Observation};
use protocol::{Code, RpcError};
use serde_json::{json, Map, Value};

use crate::config::EntryConfig;
use crate::project::{self, Verdict};
use crate::{api, State};

/// The most issues (or comments) a page asks Linear for.
pub const MAX_PER_PAGE: u32 = 100;
/// How far back a scan without a checkpoint looks (a day).
pub const FIRST_LOOKBACK_MS: i64 = 86_400_000;
/// How close a history entry's `createdAt` is to the issue's `updatedAt` to be the
/// change that set it.
pub const HISTORY_MATCH_MS: i64 = 5_000;

/// The comments of a filter (reconcile: on the entry's teams' issues, created after
/// the checkpoint), with what a webhook payload of their creation carries.
pub const COMMENTS_SINCE_QUERY: &str =
    "query OcCommentsSince($filter: CommentFilter!, $first: Int!, $after: String) {
  comments(filter: $filter, first: $first, after: $after, orderBy: createdAt) {
    nodes {
      id body createdAt url
      user { id name email }
      issue { id identifier title url team { id key name } }
    }
    pageInfo { hasNextPage endCursor }
  }
}";

/// The documents this module sends besides [`api::ISSUES_SINCE_QUERY`].
pub const DOCUMENTS: [(&str, &str); 1] = [("OcCommentsSince", COMMENTS_SINCE_QUERY)];

/// What a scan reads: the issues, then the comments.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Phase {
    /// Issues updated since the checkpoint.
    #[default]
    Issues,
    /// Comments created since the checkpoint.
    Comments,
}

/// Where a scan is.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Cursor {
    /// What the page reads.
    pub phase: Phase,
    /// The newest issue `updatedAt` seen so far (the next checkpoint's), or empty.
    pub newest: String,
    /// The newest comment `createdAt` seen so far, or empty.
    pub newest_comment: String,
    /// Nodes of the Linear page already handled.
    pub skip: usize,
    /// Linear's cursor of the page (empty: the first).
    pub after: String,
}

impl Cursor {
    /// The wire form.
    pub fn encode(&self) -> String {
        let phase = match self.phase {
            Phase::Issues => "i",
            Phase::Comments => "c",
        };
        format!(
            "v2|{phase}|{}|{}|{}|{}",
            self.newest, self.newest_comment, self.skip, self.after
        )
    }

    /// Parses the wire form (also the issues-only `v1|newest|skip|after` of
    /// earlier versions).
    pub fn parse(s: &str) -> Result<Cursor, RpcError> {
        let bad = || RpcError::invalid_params(format!("cursor {s:?} is not one this package made"));
        let time = |t: &str| -> Result<String, RpcError> {
            if !t.is_empty() && protocol::time::parse_rfc3339_ms(t).is_none() {
                return Err(bad());
            }
            Ok(t.to_string())
        };
        let (phase, newest, newest_comment, rest) = if let Some(rest) = s.strip_prefix("v1|") {
            let (newest, rest) = rest.split_once('|').ok_or_else(bad)?;
            (Phase::Issues, time(newest)?, String::new(), rest)
        } else if let Some(rest) = s.strip_prefix("v2|") {
            let mut parts = rest.splitn(4, '|');
            let phase = match parts.next() {
                Some("i") => Phase::Issues,
                Some("c") => Phase::Comments,
                _ => return Err(bad()),
            };
            let newest = time(parts.next().ok_or_else(bad)?)?;
            let newest_comment = time(parts.next().ok_or_else(bad)?)?;
            (phase, newest, newest_comment, parts.next().ok_or_else(bad)?)
        } else {
            return Err(bad());
        };
        let (skip, after) = rest.split_once('|').ok_or_else(bad)?;
        Ok(Cursor {
            phase,
            newest,
            newest_comment,
            skip: skip.parse::<usize>().map_err(|_| bad())?,
            after: after.to_string(),
        })
    }
}

/// The checkpoint of a complete scan: the newest issue `updatedAt` and comment
/// `createdAt` seen (or the times scanned from), `v2|<issues>|<comments>`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Checkpoint {
    /// Issues updated after this were read.
    pub issues: String,
    /// Comments created after this were read.
    pub comments: String,
}

impl Checkpoint {
    /// The wire form.
    pub fn encode(&self) -> String {
        format!("v2|{}|{}", self.issues, self.comments)
    }

    /// Parses the wire form; a bare RFC 3339 time (the checkpoint of earlier
    /// versions) is both; empty is [`FIRST_LOOKBACK_MS`] before `now_ms`.
    pub fn parse(s: &str, now_ms: i64) -> Result<Checkpoint, RpcError> {
        let bad =
            || RpcError::invalid_params(format!("checkpoint {s:?} is not one this package made"));
        let time = |t: &str| ms(t).map(|_| t.to_string()).ok_or_else(bad);
        if s.is_empty() {
            let since = protocol::time::format_rfc3339_ms(now_ms.saturating_sub(FIRST_LOOKBACK_MS));
            return Ok(Checkpoint {
                issues: since.clone(),
                comments: since,
            });
        }
        match s.strip_prefix("v2|") {
            Some(rest) => {
                let (issues, comments) = rest.split_once('|').ok_or_else(bad)?;
                Ok(Checkpoint {
                    issues: time(issues)?,
                    comments: time(comments)?,
                })
            }
            None => Ok(Checkpoint {
                issues: time(s)?,
                comments: time(s)?,
            }),
        }
    }
}

fn ms(s: &str) -> Option<i64> {
    protocol::time::parse_rfc3339_ms(s)
}

fn text<'a>(v: &'a Value, field: &str) -> &'a str {
    v.get(field).and_then(Value::as_str).unwrap_or_default()
}

/// The webhook payload (`type` `Issue`) of a polled issue's last change: `create`
/// when it was never updated, else `update` with `updatedFrom` naming the fields the
/// history entry of that change (within [`HISTORY_MATCH_MS`] of `updatedAt`) changed:
/// the assignee, the state, labels added.
pub fn payload_of(issue: &Value) -> Value {
    let updated = text(issue, "updatedAt");
    let created = text(issue, "createdAt");
    let labels: Vec<Value> = issue
        .pointer("/labels/nodes")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let label_ids: Vec<&str> = labels.iter().map(|l| text(l, "id")).collect();
    let mut data = Map::new();
    for field in [
        "id",
        "identifier",
        "title",
        "description",
        "url",
        "createdAt",
        "updatedAt",
    ] {
        data.insert(field.into(), json!(text(issue, field)));
    }
    for field in ["team", "state", "assignee", "creator"] {
        data.insert(
            field.into(),
            issue.get(field).cloned().unwrap_or(Value::Null),
        );
    }
    data.insert("teamId".into(), json!(text(&issue["team"], "id")));
    data.insert("stateId".into(), json!(text(&issue["state"], "id")));
    data.insert("assigneeId".into(), json!(text(&issue["assignee"], "id")));
    data.insert("creatorId".into(), json!(text(&issue["creator"], "id")));
    data.insert("labels".into(), Value::Array(labels.clone()));
    data.insert("labelIds".into(), json!(label_ids));
    let mut out = json!({
        "type": "Issue",
        "data": Value::Object(data),
        "url": text(issue, "url"),
    });
    if !updated.is_empty() && updated == created {
        out["action"] = json!("create");
        return out;
    }
    out["action"] = json!("update");
    let mut from = Map::new();
    from.insert("updatedAt".into(), Value::Null);
    let change = ms(updated).and_then(|at| {
        issue
            .pointer("/history/nodes")?
            .as_array()?
            .iter()
            .filter_map(|h| Some((ms(text(h, "createdAt"))?, h)))
            .filter(|(t, _)| (t - at).abs() <= HISTORY_MATCH_MS)
            .min_by_key(|(t, _)| (t - at).abs())
            .map(|(_, h)| h)
    });
    if let Some(h) = change {
        if !text(h, "toAssigneeId").is_empty()
            && text(h, "toAssigneeId") != text(h, "fromAssigneeId")
        {
            from.insert("assigneeId".into(), h["fromAssigneeId"].clone());
        }
        if !text(h, "toStateId").is_empty() {
            from.insert("stateId".into(), h["fromStateId"].clone());
        }
        let added: Vec<&str> = h
            .get("addedLabelIds")
            .and_then(Value::as_array)
            .map(|a| a.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        if !added.is_empty() {
            let before: Vec<&str> = label_ids
                .iter()
                .copied()
                .filter(|id| !added.contains(id))
                .collect();
            from.insert("labelIds".into(), json!(before));
        }
    }
    out["updatedFrom"] = Value::Object(from);
    out
}

/// The observation of one polled issue, or `None` for one the webhook path would
/// not deliver either.
pub fn observation(entry: &EntryConfig, issue: &Value) -> Option<Observation> {
    match project::project(entry, &payload_of(issue)) {
        Ok(Verdict::Deliver(d)) => Some(Observation {
            item: format!("Issue/{}", text(issue, "id")),
            version: text(issue, "updatedAt").to_string(),
            delivery_id: d.delivery_id,
            events: d.events,
        }),
        Ok(Verdict::Ignored(_)) => None,
        Err(why) => {
            eprintln!(
                "linear: reconcile: issue {} skipped: {why}",
                text(issue, "identifier")
            );
            None
        }
    }
}

/// The webhook payload (`type` `Comment`, `action` `create`) of a polled comment:
/// what the delivery of its creation carries that the Event reads.
pub fn comment_payload(comment: &Value) -> Value {
    let issue = &comment["issue"];
    let mut data = Map::new();
    for field in ["id", "body", "createdAt"] {
        data.insert(field.into(), json!(text(comment, field)));
    }
    if let Some(user) = comment.get("user").filter(|u| u.is_object()) {
        data.insert("userId".into(), json!(text(user, "id")));
        data.insert("user".into(), user.clone());
    }
    data.insert("issueId".into(), json!(text(issue, "id")));
    let mut issue_out = Map::new();
    for field in ["id", "identifier", "title", "url"] {
        issue_out.insert(field.into(), json!(text(issue, field)));
    }
    issue_out.insert("teamId".into(), json!(text(&issue["team"], "id")));
    issue_out.insert(
        "team".into(),
        issue.get("team").cloned().unwrap_or(Value::Null),
    );
    data.insert("issue".into(), Value::Object(issue_out));
    json!({
        "type": "Comment",
        "action": "create",
        "data": Value::Object(data),
        "url": text(comment, "url"),
    })
}

/// The observation of one polled comment (identity `Comment/<id>/create`, as its
/// delivery's), or `None` for one the webhook path would not deliver either (the
/// agent's own, another team's).
pub fn comment_observation(entry: &EntryConfig, comment: &Value) -> Option<Observation> {
    match project::project(entry, &comment_payload(comment)) {
        Ok(Verdict::Deliver(d)) => Some(Observation {
            item: format!("Comment/{}", text(comment, "id")),
            version: text(comment, "createdAt").to_string(),
            delivery_id: d.delivery_id,
            events: d.events,
        }),
        Ok(Verdict::Ignored(_)) => None,
        Err(why) => {
            eprintln!(
                "linear: reconcile: comment {} skipped: {why}",
                text(comment, "id")
            );
            None
        }
    }
}

/// Serves one page of `ingress.reconcile`.
pub async fn page(
    state: &State,
    host: &sdk::Host,
    p: &IngressReconcileParams,
) -> Result<IngressReconcileResult, RpcError> {
    let registry = state.registry();
    let entry = sdk::entries::by_source(&registry.entries, &p.source)?;
    let result = scan(state, host, entry, p).await;
    if let Err(e) = &result {
        eprintln!("linear: reconcile {}: {}", entry.source, e.message);
    }
    result
}

/// What one phase reads: its query, the connection's name in answers, the time
/// field its checkpoint follows, and how a node becomes an observation.
struct Reading {
    what: &'static str,
    query: &'static str,
    list: &'static str,
    time: &'static str,
    filter: Value,
    observe: fn(&EntryConfig, &Value) -> Option<Observation>,
}

async fn scan(
    state: &State,
    host: &sdk::Host,
    entry: &EntryConfig,
    p: &IngressReconcileParams,
) -> Result<IngressReconcileResult, RpcError> {
    let since = Checkpoint::parse(&p.checkpoint, protocol::time::now_ms())?;
    let per_page = match p.max_items {
        0 => MAX_PER_PAGE,
        n => n.min(MAX_PER_PAGE),
    };
    let max_bytes = match p.max_bytes {
        0 => u64::MAX,
        n => n,
    };
    let mut cur = if p.cursor.is_empty() {
        Cursor::default()
    } else {
        Cursor::parse(&p.cursor)?
    };
    let client = state
        .client(host, &entry.scope_id, &entry.connection)
        .await?;
    let teams = json!({"key": {"in": entry.config.teams}});
    let reading = match cur.phase {
        Phase::Issues => Reading {
            what: "listing issues updated since the checkpoint",
            query: api::ISSUES_SINCE_QUERY,
            list: "issues",
            time: "updatedAt",
            filter: json!({"team": teams, "updatedAt": {"gt": since.issues}}),
            observe: observation,
        },
        Phase::Comments => Reading {
            what: "listing comments created since the checkpoint",
            query: COMMENTS_SINCE_QUERY,
            list: "comments",
            time: "createdAt",
            filter: json!({"issue": {"team": teams}, "createdAt": {"gt": since.comments}}),
            observe: comment_observation,
        },
    };
    let after = if cur.after.is_empty() {
        Value::Null
    } else {
        json!(cur.after)
    };
    let data = client
        .send(
            reading.what,
            reading.query,
            json!({"filter": reading.filter, "first": per_page, "after": after}),
        )
        .await?;
    let nodes = data
        .pointer(&format!("/{}/nodes", reading.list))
        .and_then(Value::as_array)
        .ok_or_else(|| {
            RpcError::new(
                Code::Unavailable,
                format!("Linear answered no {} list", reading.list),
            )
        })?;
    let mut out = IngressReconcileResult::default();
    let mut bytes = 0u64;
    for (i, node) in nodes.iter().enumerate().skip(cur.skip) {
        let at = text(node, reading.time);
        let newest = match cur.phase {
            Phase::Issues => &mut cur.newest,
            Phase::Comments => &mut cur.newest_comment,
        };
        if ms(at) > ms(newest) {
            *newest = at.to_string();
        }
        let Some(o) = (reading.observe)(entry, node) else {
            continue;
        };
        let size = serde_json::to_vec(&o).map(|v| v.len()).unwrap_or(0) as u64;
        if bytes.saturating_add(size) > max_bytes {
            if out.items.is_empty() {
                return Err(RpcError::new(
                    Code::Invalid,
                    format!(
                        "{} {} is {size} bytes as an observation, over the page's max_bytes {max_bytes}",
                        reading.list,
                        o.item
                    ),
                ));
            }
            cur.skip = i;
            out.cursor = cur.encode();
            return Ok(out);
        }
        bytes += size;
        out.items.push(o);
    }
    let info = format!("/{}/pageInfo", reading.list);
    let next = data
        .pointer(&format!("{info}/endCursor"))
        .and_then(Value::as_str)
        .filter(|_| data.pointer(&format!("{info}/hasNextPage")) == Some(&json!(true)));
    cur.skip = 0;
    match (next, cur.phase) {
        (Some(next), _) if !next.is_empty() => {
            cur.after = next.to_string();
            out.cursor = cur.encode();
        }
        (_, Phase::Issues) => {
            cur.phase = Phase::Comments;
            cur.after = String::new();
            out.cursor = cur.encode();
        }
        (_, Phase::Comments) => {
            let later = |seen: &str, from: &str| {
                if ms(seen) > ms(from) {
                    seen.to_string()
                } else {
                    from.to_string()
                }
            };
            out.complete = true;
            out.checkpoint = Checkpoint {
                issues: later(&cur.newest, &since.issues),
                comments: later(&cur.newest_comment, &since.comments),
            }
            .encode();
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn a_cursor_round_trips_and_a_foreign_one_is_refused() {
        let c = Cursor {
            phase: Phase::Comments,
            newest: "2020-01-23T12:55:02.101Z".into(),
            newest_comment: String::new(),
            skip: 3,
            after: "a|b".into(),
        };
        assert_eq!(Cursor::parse(&c.encode()).ok(), Some(c));
        let old = Cursor::parse("v1|2020-01-23T12:55:02.101Z|2|x").unwrap();
        assert_eq!(
            (old.phase, old.skip, old.after.as_str()),
            (Phase::Issues, 2, "x")
        );
        assert!(Cursor::parse("12").is_err());
        assert!(Cursor::parse("v1|yesterday|0|").is_err());
        assert!(Cursor::parse("v2|x||2020-01-23T12:55:02.101Z|0|").is_err());
    }

    #[test]
    fn a_checkpoint_keeps_both_times_and_reads_the_old_form() {
        let c = Checkpoint {
            issues: "2020-01-23T12:55:02.101Z".into(),
            comments: "2020-01-24T00:00:00.000Z".into(),
        };
        assert_eq!(Checkpoint::parse(&c.encode(), 0).ok(), Some(c));
        let old = Checkpoint::parse("2020-01-23T12:55:02.101Z", 0).unwrap();
        assert_eq!(old.issues, old.comments);
        let first = Checkpoint::parse("", FIRST_LOOKBACK_MS + 1000).unwrap();
        assert_eq!(first.issues, "1970-01-01T00:00:01.000Z");
        assert!(Checkpoint::parse("v2|x|y", 0).is_err());
    }
}
