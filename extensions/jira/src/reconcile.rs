//! `ingress.reconcile`: issue changes Jira could not deliver, found by polling.
//!
//! A scan searches the entry's projects' issues updated since the checkpoint, less
//! [`OVERLAP_MS`] ([`crate::poll::search`], pages of the page's `max_items`, at most
//! [`crate::poll::MAX_PER_PAGE`]), and for each issue reads its changes made since
//! then: its creation, its changelog's histories (the search's embedded changelog,
//! or the newest [`crate::poll::MAX_HISTORIES`] when that is cut short) and its newest
//! comments ([`crate::poll::MAX_COMMENTS`]). Each change becomes the webhook payload
//! Jira would have sent for it, the issue's fields as they were just after it
//! ([`crate::poll::payloads`]), and goes through the webhook path's own
//! [`crate::intake::project`]. The observation's delivery ID is the change's
//! identity ([`crate::intake::change_id`]), the one a webhook delivery of the same
//! change carries: a missed delivery is found once, a late one (or one already
//! kept) adds nothing, and a change the webhook path would ignore (a plain edit)
//! is skipped the same way.
//!
//! The checkpoint is the newest `updated` of the issues of the last complete scan
//! (Jira's clock); without one a scan looks back [`FIRST_LOOKBACK_MS`]. The overlap
//! covers Jira's search index lagging behind its writes; what it finds again is the
//! same Event again. Every API failure fails the page, so the checkpoint stays. The
//! cursor is `v1|<newest>|<startAt>|<skip>`: a page cut short by `max_items` or
//! `max_bytes` resumes on the same search page past `skip` issues.

use protocol::wire::{IngressReconcileParams, IngressReconcileResult, Observation};
use protocol::{Code, RpcError};
use serde_json::Value;

use crate::config::EntryConfig;
use crate::{api, intake, poll, State};

/// How long before the checkpoint a scan starts (Jira's search index lags its
/// writes): 5 minutes.
pub const OVERLAP_MS: i64 = 300_000;
/// How far back a scan without a checkpoint looks (a day).
pub const FIRST_LOOKBACK_MS: i64 = 86_400_000;
/// Minutes added to a search's relative window, for the clocks' skew.
pub const SKEW_MINUTES: i64 = 5;

/// Where a scan is.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Cursor {
    /// The newest `updated` seen so far (the next checkpoint), or empty.
    pub newest: String,
    /// The search page's `startAt`.
    pub start_at: u64,
    /// Issues of the search page already handled.
    pub skip: usize,
}

impl Cursor {
    /// The wire form.
    pub fn encode(&self) -> String {
        format!("v1|{}|{}|{}", self.newest, self.start_at, self.skip)
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
        let start_at = parts
            .next()
            .and_then(|p| p.parse::<u64>().ok())
            .ok_or_else(bad)?;
        let skip = parts
            .next()
            .and_then(|p| p.parse::<usize>().ok())
            .ok_or_else(bad)?;
        Ok(Cursor {
            newest,
            start_at,
            skip,
        })
    }
}

fn text<'a>(v: &'a Value, pointer: &str) -> &'a str {
    v.pointer(pointer)
        .and_then(Value::as_str)
        .unwrap_or_default()
}

/// The observations of one polled issue's changes at or after `since_ms`: only
/// those the webhook path would deliver, each under its change's identity.
pub fn observations(
    entry: &EntryConfig,
    issue: &Value,
    histories: &[Value],
    complete: bool,
    comments: &[Value],
    since_ms: i64,
) -> Vec<Observation> {
    let mut out = Vec::new();
    for (at, payload) in poll::payloads(issue, histories, complete, comments, since_ms) {
        let Some(id) = intake::change_id(text(&payload, "/webhookEvent"), &payload) else {
            continue;
        };
        match intake::project(entry, &payload) {
            Ok(Some(event)) => out.push(Observation {
                item: id.clone(),
                version: protocol::time::format_rfc3339_ms(at),
                delivery_id: id,
                events: vec![event],
            }),
            Ok(None) => {}
            Err(why) => eprintln!(
                "jira: reconcile: a change of {} skipped: {why}",
                text(issue, "/key")
            ),
        }
    }
    out
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
        eprintln!("jira: reconcile {}: {}", entry.source, e.message);
    }
    result
}

/// The histories of a searched issue, and whether they are all of them: the
/// embedded changelog when whole, else the newest through the changelog endpoint.
async fn histories(client: &api::Client, issue: &Value) -> Result<(Vec<Value>, bool), RpcError> {
    let embedded: Vec<Value> = issue
        .pointer("/changelog/histories")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let total = issue
        .pointer("/changelog/total")
        .and_then(Value::as_u64)
        .unwrap_or(embedded.len() as u64);
    if total <= embedded.len() as u64 {
        return Ok((embedded, true));
    }
    let tail = poll::changelog_tail(client, text(issue, "/id"), total).await?;
    let complete = tail.len() as u64 >= total;
    if !complete {
        eprintln!(
            "jira: reconcile: {} has {total} histories; only the newest {} (MAX_HISTORIES) are read",
            text(issue, "/key"),
            poll::MAX_HISTORIES
        );
    }
    Ok((tail, complete))
}

async fn scan(
    state: &State,
    host: &sdk::Host,
    entry: &EntryConfig,
    p: &IngressReconcileParams,
) -> Result<IngressReconcileResult, RpcError> {
    let now = protocol::time::now_ms();
    let checkpoint = match p.checkpoint.as_str() {
        "" => None,
        c => Some(protocol::time::parse_rfc3339_ms(c).ok_or_else(|| {
            RpcError::invalid_params(format!("checkpoint {c:?} is not an RFC 3339 time"))
        })?),
    };
    let since_ms = match checkpoint {
        Some(c) => c.saturating_sub(OVERLAP_MS),
        None => now.saturating_sub(FIRST_LOOKBACK_MS),
    };
    let minutes = (now.saturating_sub(since_ms).max(0) + 59_999) / 60_000 + SKEW_MINUTES;
    let max_items = match p.max_items {
        0 => usize::MAX,
        n => n as usize,
    };
    let per_page = match p.max_items {
        0 => poll::MAX_PER_PAGE,
        n => n.min(poll::MAX_PER_PAGE),
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
    let jql = poll::jql(&entry.config.projects, minutes);
    let data = poll::search(&client, &jql, cur.start_at, per_page).await?;
    let issues = data
        .get("issues")
        .and_then(Value::as_array)
        .ok_or_else(|| RpcError::new(Code::Unavailable, "Jira's search answered no issues list"))?;
    let mut out = IngressReconcileResult::default();
    let mut bytes = 0u64;
    for (i, issue) in issues.iter().enumerate().skip(cur.skip) {
        let updated = poll::time_ms(text(issue, "/fields/updated"));
        if updated > protocol::time::parse_rfc3339_ms(&cur.newest) {
            if let Some(u) = updated {
                cur.newest = protocol::time::format_rfc3339_ms(u);
            }
        }
        let (hs, complete) = histories(&client, issue).await?;
        let comments = poll::recent_comments(&client, text(issue, "/id")).await?;
        let found = observations(entry, issue, &hs, complete, &comments, since_ms);
        let size: u64 = found
            .iter()
            .map(|o| serde_json::to_vec(o).map(|v| v.len()).unwrap_or(0) as u64)
            .sum();
        if out.items.len() + found.len() > max_items || bytes.saturating_add(size) > max_bytes {
            if out.items.is_empty() {
                return Err(RpcError::new(
                    Code::Invalid,
                    format!(
                        "issue {} has {} changes to observe ({size} bytes), over the page's max_items {} or max_bytes {max_bytes}",
                        text(issue, "/key"),
                        found.len(),
                        p.max_items
                    ),
                ));
            }
            cur.skip = i;
            out.cursor = cur.encode();
            return Ok(out);
        }
        bytes += size;
        out.items.extend(found);
    }
    let total = data.get("total").and_then(Value::as_u64).unwrap_or(0);
    let next = cur.start_at + issues.len() as u64;
    if !issues.is_empty() && next < total {
        cur.start_at = next;
        cur.skip = 0;
        out.cursor = cur.encode();
        return Ok(out);
    }
    out.complete = true;
    let newest = protocol::time::parse_rfc3339_ms(&cur.newest);
    out.checkpoint = match (newest, checkpoint) {
        (Some(n), Some(c)) if n <= c => p.checkpoint.clone(),
        (Some(_), _) => cur.newest,
        (None, Some(_)) => p.checkpoint.clone(),
        // Nothing seen and no checkpoint: nothing changed up to now.
        (None, None) => protocol::time::format_rfc3339_ms(now),
    };
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
            start_at: 50,
            skip: 3,
        };
        assert_eq!(Cursor::parse(&c.encode()).ok(), Some(c));
        assert!(Cursor::parse("12").is_err());
        assert!(Cursor::parse("v1|yesterday|0|0").is_err());
    }
}
