//! `ingress.reconcile`: issue changes Linear could not deliver, found by polling.
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
//! API failure fails the page, so the checkpoint stays. The cursor is
//! `v1|<newest>|<skip>|<Linear's cursor>`: a page cut short by `max_bytes` resumes
//! on the same Linear page past `skip` issues. Comments are not polled (see
//! docs/decisions.md).

use protocol::wire::{IngressReconcileParams, IngressReconcileResult, Observation};
use protocol::{Code, RpcError};
use serde_json::{json, Map, Value};

use crate::config::EntryConfig;
use crate::project::{self, Verdict};
use crate::{api, State};

/// The most issues a page asks Linear for.
pub const MAX_PER_PAGE: u32 = 100;
/// How far back a scan without a checkpoint looks (a day).
pub const FIRST_LOOKBACK_MS: i64 = 86_400_000;
/// How close a history entry's `createdAt` is to the issue's `updatedAt` to be the
/// change that set it.
pub const HISTORY_MATCH_MS: i64 = 5_000;

/// Where a scan is.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Cursor {
    /// The newest `updatedAt` seen so far (the next checkpoint), or empty.
    pub newest: String,
    /// Issues of the Linear page already handled.
    pub skip: usize,
    /// Linear's cursor of the page (empty: the first).
    pub after: String,
}

impl Cursor {
    /// The wire form.
    pub fn encode(&self) -> String {
        format!("v1|{}|{}|{}", self.newest, self.skip, self.after)
    }

    /// Parses the wire form.
    pub fn parse(s: &str) -> Result<Cursor, RpcError> {
        let bad = || RpcError::invalid_params(format!("cursor {s:?} is not one this package made"));
        let mut parts = s.splitn(4, '|');
        if parts.next() != Some("v1") {
            return Err(bad());
        }
        let newest = parts.next().ok_or_else(bad)?.to_string();
        if !newest.is_empty() && protocol::time::parse_rfc3339_ms(&newest).is_none() {
            return Err(bad());
        }
        let skip = parts
            .next()
            .and_then(|p| p.parse::<usize>().ok())
            .ok_or_else(bad)?;
        let after = parts.next().ok_or_else(bad)?.to_string();
        Ok(Cursor {
            newest,
            skip,
            after,
        })
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

/// Serves one page of `ingress.reconcile`.
pub async fn page(
    state: &State,
    host: &sdk::Host,
    p: &IngressReconcileParams,
) -> Result<IngressReconcileResult, RpcError> {
    let registry = state.registry();
    let entry = registry
        .entries
        .iter()
        .find(|e| e.source == p.source)
        .ok_or_else(|| {
            RpcError::new(
                Code::NotFound,
                format!("source {:?} is not one of this package's entries", p.source),
            )
        })?;
    let result = scan(state, host, entry, p).await;
    if let Err(e) = &result {
        eprintln!("linear: reconcile {}: {}", entry.source, e.message);
    }
    result
}

async fn scan(
    state: &State,
    host: &sdk::Host,
    entry: &EntryConfig,
    p: &IngressReconcileParams,
) -> Result<IngressReconcileResult, RpcError> {
    let since = match p.checkpoint.as_str() {
        "" => protocol::time::format_rfc3339_ms(
            protocol::time::now_ms().saturating_sub(FIRST_LOOKBACK_MS),
        ),
        c => {
            ms(c).ok_or_else(|| {
                RpcError::invalid_params(format!("checkpoint {c:?} is not an RFC 3339 time"))
            })?;
            c.to_string()
        }
    };
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
    let filter = json!({
        "team": {"key": {"in": entry.config.teams}},
        "updatedAt": {"gt": since},
    });
    let after = if cur.after.is_empty() {
        Value::Null
    } else {
        json!(cur.after)
    };
    let data = client
        .send(
            "listing issues updated since the checkpoint",
            api::ISSUES_SINCE_QUERY,
            json!({"filter": filter, "first": per_page, "after": after}),
        )
        .await?;
    let issues = data
        .pointer("/issues/nodes")
        .and_then(Value::as_array)
        .ok_or_else(|| RpcError::new(Code::Unavailable, "Linear answered no issues list"))?;
    let mut out = IngressReconcileResult::default();
    let mut bytes = 0u64;
    for (i, issue) in issues.iter().enumerate().skip(cur.skip) {
        let updated = text(issue, "updatedAt");
        if ms(updated) > ms(&cur.newest) {
            cur.newest = updated.to_string();
        }
        let Some(o) = observation(entry, issue) else {
            continue;
        };
        let size = serde_json::to_vec(&o).map(|v| v.len()).unwrap_or(0) as u64;
        if bytes.saturating_add(size) > max_bytes {
            if out.items.is_empty() {
                return Err(RpcError::new(
                    Code::Invalid,
                    format!(
                        "issue {} is {size} bytes as an observation, over the page's max_bytes {max_bytes}",
                        text(issue, "identifier")
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
    let next = data
        .pointer("/issues/pageInfo/endCursor")
        .and_then(Value::as_str)
        .filter(|_| data.pointer("/issues/pageInfo/hasNextPage") == Some(&json!(true)));
    match next {
        Some(next) if !next.is_empty() => {
            cur.after = next.to_string();
            cur.skip = 0;
            out.cursor = cur.encode();
        }
        _ => {
            out.complete = true;
            out.checkpoint = if ms(&cur.newest) > ms(&since) {
                cur.newest
            } else {
                since
            };
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
            newest: "2020-01-23T12:55:02.101Z".into(),
            skip: 3,
            after: "a|b".into(),
        };
        assert_eq!(Cursor::parse(&c.encode()).ok(), Some(c));
        assert!(Cursor::parse("12").is_err());
        assert!(Cursor::parse("v1|yesterday|0|").is_err());
    }
}
