//! `ingress.reconcile`: pull request changes Bitbucket did not deliver, found by
//! polling.
//!
//! A scan goes through the entry's repositories one list page at a time: the pull
//! requests updated since the checkpoint less [`OVERLAP_MS`], newest first
//! (`GET /repositories/{workspace}/{repo_slug}/pullrequests` with
//! `q=updated_on><since>`, `sort=-updated_on`, `state=OPEN|MERGED|DECLINED`,
//! `pagelen` the page's `max_items`, at most [`MAX_PER_PAGE`]), and for each one its
//! comments created since (`…/pullrequests/{id}/comments` with
//! `q=created_on><since>`, `sort=created_on`, [`COMMENTS_PER_PAGE`] a page, at most
//! [`MAX_COMMENT_PAGES`] pages). Each change becomes the webhook payload Bitbucket
//! would have sent for it ([`payloads`]): a comment as `pullrequest:comment_created`,
//! a pull request created since as `pullrequest:created`, one merged or declined
//! (updated since) as `pullrequest:fulfilled` or `pullrequest:rejected`; and goes
//! through the webhook path's own [`crate::intake::project`], so the agent's own
//! comments are no Event here either. The observation's delivery ID is the change's
//! identity ([`crate::intake::change_id`]), the one a webhook delivery of the same
//! change carries, and its Event is a `snapshot`: a missed delivery is found once, a
//! late one (or one already kept) adds nothing, though the pull request's title or
//! state may have changed since.
//!
//! The checkpoint is the newest `updated_on` (or comment `created_on`) of the last
//! complete scan (Bitbucket's clock); without one a scan looks back
//! [`FIRST_LOOKBACK_MS`]. Every API failure fails the page, so the checkpoint stays.
//! The cursor is `v1|<repository index>|<skip>|<newest>|<page path>`: the page path
//! is the list page being read (empty: the repository's first; else Bitbucket's
//! `next` link, kept only when it stays in the API), and `skip` the pull requests of
//! it already observed when a page was cut short by `max_items` or `max_bytes`.

use protocol::wire::{IngressReconcileParams, IngressReconcileResult, Observation};
use protocol::{Code, RpcError};
use serde_json::{json, Value};

use crate::config::EntryConfig;
use crate::{api, intake, State};

/// How long before the checkpoint a scan starts (a write Bitbucket lists late, a
/// clock's skew): 5 minutes.
pub const OVERLAP_MS: i64 = 300_000;
/// How far back a scan without a checkpoint looks (a day).
pub const FIRST_LOOKBACK_MS: i64 = 86_400_000;
/// The most pull requests of one list page (each costs a comments request).
pub const MAX_PER_PAGE: u32 = 20;
/// Comments asked for a page (Bitbucket's largest `pagelen`).
pub const COMMENTS_PER_PAGE: u32 = 100;
/// The most comment pages read for one pull request in one scan.
pub const MAX_COMMENT_PAGES: usize = 5;

/// Where a scan is.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Cursor {
    /// The index of the repository (in the entry's list) being read.
    pub repo: usize,
    /// Pull requests of the page already observed.
    pub skip: usize,
    /// The newest time seen so far (the next checkpoint), or empty.
    pub newest: String,
    /// The path (under the API) of the list page being read; empty: the first.
    pub page: String,
}

impl Cursor {
    /// The wire form.
    pub fn encode(&self) -> String {
        format!(
            "v1|{}|{}|{}|{}",
            self.repo, self.skip, self.newest, self.page
        )
    }

    /// Parses the wire form.
    pub fn parse(s: &str) -> Result<Cursor, RpcError> {
        let bad = || RpcError::invalid_params(format!("cursor {s:?} is not one this package made"));
        let mut parts = s.splitn(5, '|');
        if parts.next() != Some("v1") {
            return Err(bad());
        }
        let repo = parts
            .next()
            .and_then(|p| p.parse::<usize>().ok())
            .ok_or_else(bad)?;
        let skip = parts
            .next()
            .and_then(|p| p.parse::<usize>().ok())
            .ok_or_else(bad)?;
        let newest = parts.next().ok_or_else(bad)?.to_string();
        if !newest.is_empty() && protocol::time::parse_rfc3339_ms(&newest).is_none() {
            return Err(bad());
        }
        let page = parts.next().ok_or_else(bad)?.to_string();
        if !(page.is_empty() || page.starts_with("/repositories/")) {
            return Err(bad());
        }
        Ok(Cursor {
            repo,
            skip,
            newest,
            page,
        })
    }
}

fn text<'a>(v: &'a Value, pointer: &str) -> &'a str {
    v.pointer(pointer)
        .and_then(Value::as_str)
        .unwrap_or_default()
}

fn time_of(v: &Value, pointer: &str) -> Option<i64> {
    protocol::time::parse_rfc3339_ms(text(v, pointer))
}

/// `ms` as Bitbucket's filter language reads a time, to the second below
/// (`2026-01-05T10:00:00+00:00`: an offset, not `Z`, which it refuses).
pub fn bitbucket_time(ms: i64) -> String {
    let t = protocol::time::format_rfc3339_secs(ms.div_euclid(1000));
    match t.strip_suffix('Z') {
        Some(rest) => format!("{rest}+00:00"),
        None => t,
    }
}

/// `s` percent-encoded for a query value (all but RFC 3986's unreserved bytes).
fn encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len() * 3);
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// The first list page of `repository`'s pull requests updated after `since_ms`,
/// newest first, `pagelen` a page.
pub fn list_path(repository: &str, since_ms: i64, pagelen: u32) -> String {
    let q = format!("updated_on>{}", bitbucket_time(since_ms));
    format!(
        "/repositories/{repository}/pullrequests?q={}&sort=-updated_on&state=OPEN&state=MERGED&state=DECLINED&pagelen={pagelen}",
        encode(&q)
    )
}

/// The first page of pull request `id`'s comments created after `since_ms`, oldest
/// first.
pub fn comments_path(repository: &str, id: u64, since_ms: i64) -> String {
    let q = format!("created_on>{}", bitbucket_time(since_ms));
    format!(
        "/repositories/{repository}/pullrequests/{id}/comments?q={}&sort=created_on&pagelen={COMMENTS_PER_PAGE}",
        encode(&q)
    )
}

/// The webhook payloads (event key, when, payload) of a polled pull request's
/// changes at or after `since_ms`, oldest first: its creation, its comments (not
/// deleted or pending), its merge or decline.
pub fn payloads(
    repository: &str,
    pr: &Value,
    comments: &[Value],
    since_ms: i64,
) -> Vec<(&'static str, i64, Value)> {
    let base = |actor: Option<&Value>| {
        json!({
            "actor": actor.cloned().unwrap_or(Value::Null),
            "repository": {"full_name": repository},
            "pullrequest": pr,
        })
    };
    let mut out = Vec::new();
    if let Some(at) = time_of(pr, "/created_on").filter(|t| *t >= since_ms) {
        out.push(("pullrequest:created", at, base(pr.get("author"))));
    }
    for c in comments {
        // A deleted comment, or a pending one (a draft review's, not yet published
        // and so not yet delivered either), is no change to observe.
        let flag = |name: &str| c.get(name).and_then(Value::as_bool) == Some(true);
        if flag("deleted") || flag("pending") {
            continue;
        }
        if let Some(at) = time_of(c, "/created_on").filter(|t| *t >= since_ms) {
            let mut p = base(c.get("user"));
            p["comment"] = c.clone();
            out.push(("pullrequest:comment_created", at, p));
        }
    }
    let closed = match text(pr, "/state") {
        "MERGED" => Some("pullrequest:fulfilled"),
        "DECLINED" => Some("pullrequest:rejected"),
        _ => None,
    };
    if let (Some(key), Some(at)) = (
        closed,
        time_of(pr, "/updated_on").filter(|t| *t >= since_ms),
    ) {
        out.push((key, at, base(pr.get("closed_by"))));
    }
    out.sort_by_key(|(_, at, _)| *at);
    out
}

/// The observations of one polled pull request's changes at or after `since_ms`:
/// only those the webhook path would deliver, each under its change's identity.
pub fn observations(
    entry: &EntryConfig,
    repository: &str,
    pr: &Value,
    comments: &[Value],
    since_ms: i64,
) -> Vec<Observation> {
    let mut out = Vec::new();
    for (key, at, payload) in payloads(repository, pr, comments, since_ms) {
        let Some(id) = intake::change_id(key, &payload) else {
            continue;
        };
        match intake::project(&entry.config, key, &payload) {
            Ok(Some(mut event)) => {
                event.snapshot = true;
                out.push(Observation {
                    item: id.clone(),
                    version: protocol::time::format_rfc3339_ms(at),
                    delivery_id: id,
                    events: vec![event],
                });
            }
            Ok(None) => {}
            Err(why) => eprintln!(
                "bitbucket: reconcile: a change of {repository} pull request {} skipped: {why}",
                pr.get("id").and_then(Value::as_u64).unwrap_or_default()
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
        eprintln!("bitbucket: reconcile {}: {}", entry.source, e.message);
    }
    result
}

/// The `values` of a list page, and its `next` link as a path in the API.
fn values_and_next(
    client: &api::Client,
    data: &Value,
    what: &str,
) -> Result<(Vec<Value>, Option<String>), RpcError> {
    let values = data
        .get("values")
        .and_then(Value::as_array)
        .cloned()
        .ok_or_else(|| {
            RpcError::new(
                Code::Unavailable,
                format!("Bitbucket answered {what} without a values list"),
            )
        })?;
    let next = match data.get("next").and_then(Value::as_str) {
        None | Some("") => None,
        Some(url) => Some(client.path_in_api(url).ok_or_else(|| {
            RpcError::new(
                Code::Unavailable,
                format!("Bitbucket's next page of {what} is not under the connection's api_url"),
            )
        })?),
    };
    Ok((values, next))
}

/// The comments of pull request `id` created at or after `since_ms`, at most
/// [`MAX_COMMENT_PAGES`] pages.
async fn comments(
    client: &api::Client,
    repository: &str,
    id: u64,
    since_ms: i64,
) -> Result<Vec<Value>, RpcError> {
    let mut out = Vec::new();
    let mut path = Some(comments_path(repository, id, since_ms));
    let mut pages = 0;
    while let Some(p) = path.take() {
        if pages == MAX_COMMENT_PAGES {
            eprintln!(
                "bitbucket: reconcile: {repository} pull request {id} has more than {} new comments; only the first {MAX_COMMENT_PAGES} pages (MAX_COMMENT_PAGES) are read",
                out.len()
            );
            break;
        }
        pages += 1;
        let data = client.json("GET", p, None).await?;
        let (values, next) = values_and_next(client, &data, "a pull request's comments")?;
        out.extend(values);
        path = next;
    }
    Ok(out)
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
    let max_items = match p.max_items {
        0 => usize::MAX,
        n => n as usize,
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
    let repos = &entry.config.repositories;
    let mut out = IngressReconcileResult::default();
    if let Some(repository) = repos.get(cur.repo) {
        let client = state
            .client(host, &entry.scope_id, &entry.connection)
            .await?;
        let path = match cur.page.as_str() {
            "" => list_path(repository, since_ms, per_page),
            page => page.to_string(),
        };
        let data = client.json("GET", path, None).await?;
        let (prs, next) = values_and_next(&client, &data, "the pull requests")?;
        let mut bytes = 0u64;
        for (i, pr) in prs.iter().enumerate().skip(cur.skip) {
            let Some(updated) = time_of(pr, "/updated_on").filter(|t| *t >= since_ms) else {
                continue;
            };
            let Some(id) = pr.get("id").and_then(Value::as_u64).filter(|n| *n > 0) else {
                continue;
            };
            let cs = comments(&client, repository, id, since_ms).await?;
            let seen = cs
                .iter()
                .filter_map(|c| time_of(c, "/created_on"))
                .chain([updated])
                .max()
                .unwrap_or(updated);
            let found = observations(entry, repository, pr, &cs, since_ms);
            let size: u64 = found
                .iter()
                .map(|o| serde_json::to_vec(o).map(|v| v.len()).unwrap_or(0) as u64)
                .sum();
            if out.items.len() + found.len() > max_items || bytes.saturating_add(size) > max_bytes {
                if out.items.is_empty() {
                    return Err(RpcError::new(
                        Code::Invalid,
                        format!(
                            "{repository} pull request {id} has {} changes to observe ({size} bytes), over the page's max_items {} or max_bytes {max_bytes}",
                            found.len(),
                            p.max_items
                        ),
                    ));
                }
                cur.skip = i;
                out.cursor = cur.encode();
                return Ok(out);
            }
            if Some(seen) > protocol::time::parse_rfc3339_ms(&cur.newest) {
                cur.newest = protocol::time::format_rfc3339_ms(seen);
            }
            bytes += size;
            out.items.extend(found);
        }
        cur.skip = 0;
        match next {
            Some(next) if !prs.is_empty() => cur.page = next,
            _ => {
                cur.repo += 1;
                cur.page.clear();
            }
        }
        if cur.repo < repos.len() {
            out.cursor = cur.encode();
            return Ok(out);
        }
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
            repo: 1,
            skip: 3,
            newest: "2026-01-05T10:00:00.000Z".into(),
            page: "/repositories/a/b/pullrequests?page=2&q=x|y".into(),
        };
        assert_eq!(Cursor::parse(&c.encode()).ok(), Some(c));
        assert!(Cursor::parse("12").is_err());
        assert!(Cursor::parse("v1|0|0|yesterday|").is_err());
        assert!(Cursor::parse("v1|0|0||https://elsewhere.example/x").is_err());
    }

    #[test]
    fn the_queries_are_encoded_in_bitbucket_s_time_form() {
        let since = protocol::time::parse_rfc3339_ms("2026-01-05T10:00:00Z").unwrap();
        assert_eq!(
            list_path("acme/widgets", since, 20),
            "/repositories/acme/widgets/pullrequests?q=updated_on%3E2026-01-05T10%3A00%3A00%2B00%3A00&sort=-updated_on&state=OPEN&state=MERGED&state=DECLINED&pagelen=20"
        );
        assert_eq!(
            comments_path("acme/widgets", 7, since + 999),
            "/repositories/acme/widgets/pullrequests/7/comments?q=created_on%3E2026-01-05T10%3A00%3A00%2B00%3A00&sort=created_on&pagelen=100"
        );
    }
}
