//! What reconcile reads from Jira Cloud (platform REST v3, through the public
//! [`crate::api::Client`]), and how a polled issue becomes the webhook payloads of
//! its changes.
//!
//! - [`search`]: `GET /rest/api/3/search` with the JQL of [`jql`] (the projects'
//!   issues updated in the last minutes, oldest created first, so a page's place
//!   does not move as issues are updated during a scan), the fields a payload needs
//!   and `expand=changelog`.
//! - [`changelog_tail`]: `GET /rest/api/3/issue/{id}/changelog`, the newest
//!   [`MAX_HISTORIES`] histories, when the search's embedded changelog is cut short.
//! - [`recent_comments`]: `GET /rest/api/3/issue/{id}/comment?orderBy=-created`, the
//!   newest [`MAX_COMMENTS`].
//! - [`comment`]: `GET /rest/api/3/issue/{id}/comment/{comment id}`, read when an
//!   Event of a comment is rendered.
//!
//! A change's payload carries the issue's fields as they were just after it
//! ([`Snapshot`]): the current fields with every later history undone (`summary`,
//! `status`, `assignee`, `labels` items), which is what a webhook delivery of that
//! change carried.

use protocol::RpcError;
use serde_json::{json, Value};

use crate::api::Client;

/// The most issues one search page asks for (Jira's cap with `expand=changelog`).
pub const MAX_PER_PAGE: u32 = 50;
/// The most histories of one issue read in a scan (the newest).
pub const MAX_HISTORIES: u32 = 100;
/// The most comments of one issue read in a scan (the newest).
pub const MAX_COMMENTS: u32 = 50;
/// The fields a search asks for.
pub const FIELDS: &str = "summary,status,assignee,labels,reporter,creator,created,updated";

/// Percent-encodes a query value (RFC 3986 unreserved bytes stay).
pub fn encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len() * 3);
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// The JQL of a scan: the `projects`' issues updated in the last `minutes`, oldest
/// created first. Relative minutes, so the site's time zone does not matter.
pub fn jql(projects: &[String], minutes: i64) -> String {
    let keys: Vec<String> = projects.iter().map(|p| format!("\"{p}\"")).collect();
    format!(
        "project in ({}) AND updated >= \"-{}m\" ORDER BY created ASC, key ASC",
        keys.join(", "),
        minutes.max(1)
    )
}

/// One search page: `max` issues from `start_at`.
pub async fn search(
    client: &Client,
    jql: &str,
    start_at: u64,
    max: u32,
) -> Result<Value, RpcError> {
    let path = format!(
        "/rest/api/3/search?jql={}&startAt={start_at}&maxResults={}&fields={}&expand=changelog",
        encode(jql),
        max.clamp(1, MAX_PER_PAGE),
        encode(FIELDS)
    );
    client.call("GET", path, None).await
}

/// The newest histories of issue `id` (at most [`MAX_HISTORIES`]), oldest first,
/// from the changelog's `total`.
pub async fn changelog_tail(client: &Client, id: &str, total: u64) -> Result<Vec<Value>, RpcError> {
    let start = total.saturating_sub(u64::from(MAX_HISTORIES));
    let page = client
        .call(
            "GET",
            format!(
                "/rest/api/3/issue/{}/changelog?startAt={start}&maxResults={MAX_HISTORIES}",
                encode(id)
            ),
            None,
        )
        .await?;
    Ok(page
        .get("values")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default())
}

/// The newest comments of issue `id` (at most [`MAX_COMMENTS`]), newest first.
pub async fn recent_comments(client: &Client, id: &str) -> Result<Vec<Value>, RpcError> {
    let page = client
        .call(
            "GET",
            format!(
                "/rest/api/3/issue/{}/comment?startAt=0&maxResults={MAX_COMMENTS}&orderBy=-created",
                encode(id)
            ),
            None,
        )
        .await?;
    Ok(page
        .get("comments")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default())
}

/// One comment of issue `issue`.
pub async fn comment(client: &Client, issue: &str, id: &str) -> Result<Value, RpcError> {
    client
        .call(
            "GET",
            format!("/rest/api/3/issue/{}/comment/{}", encode(issue), encode(id)),
            None,
        )
        .await
}

/// Milliseconds since the epoch of a Jira time: RFC 3339, or Jira's own
/// `2019-06-13T12:51:49.131+0300` (an offset without a colon).
pub fn time_ms(s: &str) -> Option<i64> {
    if let Some(ms) = protocol::time::parse_rfc3339_ms(s) {
        return Some(ms);
    }
    let b = s.as_bytes();
    let n = b.len();
    if n > 5 && matches!(b[n - 5], b'+' | b'-') && b[n - 4..].iter().all(u8::is_ascii_digit) {
        let fixed = format!("{}:{}", s.get(..n - 2)?, s.get(n - 2..)?);
        return protocol::time::parse_rfc3339_ms(&fixed);
    }
    None
}

fn text<'a>(v: &'a Value, pointer: &str) -> &'a str {
    v.pointer(pointer)
        .and_then(Value::as_str)
        .unwrap_or_default()
}

/// The fields of an issue that a change's payload reads and later histories may
/// have changed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Snapshot {
    /// The summary.
    pub summary: String,
    /// The status's name.
    pub status: String,
    /// The assignee's account ID, or empty.
    pub assignee: String,
    /// The labels.
    pub labels: Vec<String>,
}

impl Snapshot {
    /// The issue's fields now.
    pub fn current(fields: &Value) -> Snapshot {
        Snapshot {
            summary: text(fields, "/summary").to_string(),
            status: text(fields, "/status/name").to_string(),
            assignee: text(fields, "/assignee/accountId").to_string(),
            labels: fields
                .get("labels")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .map(str::to_string)
                .collect(),
        }
    }

    /// Undoes one history: each of its items sets its field back to the value before.
    pub fn undo(&mut self, history: &Value) {
        let items = history.get("items").and_then(Value::as_array);
        for item in items.into_iter().flatten() {
            let field = match text(item, "/fieldId") {
                "" => text(item, "/field"),
                f => f,
            };
            match field {
                "summary" => self.summary = text(item, "/fromString").to_string(),
                "status" => self.status = text(item, "/fromString").to_string(),
                "assignee" => {
                    self.assignee = match text(item, "/tmpFromAccountId") {
                        "" => text(item, "/from").to_string(),
                        a => a.to_string(),
                    }
                }
                "labels" => {
                    self.labels = text(item, "/fromString")
                        .split_whitespace()
                        .map(str::to_string)
                        .collect()
                }
                _ => {}
            }
        }
    }

    /// The issue object of a webhook payload with these fields (and the issue's
    /// reporter and creator as they are).
    pub fn issue(&self, issue: &Value) -> Value {
        let fields = issue.get("fields").cloned().unwrap_or(Value::Null);
        let assignee = if self.assignee.is_empty() {
            Value::Null
        } else {
            json!({"accountId": self.assignee})
        };
        json!({
            "id": text(issue, "/id"),
            "key": text(issue, "/key"),
            "fields": {
                "summary": self.summary,
                "status": {"name": self.status},
                "assignee": assignee,
                "labels": self.labels,
                "reporter": fields.get("reporter").cloned().unwrap_or(Value::Null),
                "creator": fields.get("creator").cloned().unwrap_or(Value::Null),
            },
        })
    }
}

/// A history's or a comment's time and numeric ID, for ordering.
fn order(v: &Value) -> (i64, u64) {
    (
        time_ms(text(v, "/created")).unwrap_or(i64::MIN),
        text(v, "/id").parse().unwrap_or(0),
    )
}

/// The webhook payloads a polled issue's changes at or after `since_ms` would
/// have been delivered as, each with the time of its change: `jira:issue_created`
/// when the issue was created then, `jira:issue_updated` for each history,
/// `comment_created` for each comment. `histories` are all the issue's histories
/// from the oldest one before `since_ms` (or from its creation when `complete`),
/// `comments` its newest comments. A change whose fields cannot be known (older
/// than the histories read) is left out, and so is an edited comment.
pub fn payloads(
    issue: &Value,
    histories: &[Value],
    complete: bool,
    comments: &[Value],
    since_ms: i64,
) -> Vec<(i64, Value)> {
    let fields = issue.get("fields").cloned().unwrap_or(Value::Null);
    // What happened after the issue was read (a history or comment fetched later)
    // is not in its fields: the next scan sees it with them.
    let read_at = time_ms(text(&fields, "/updated")).unwrap_or(i64::MAX);
    let mut hs: Vec<&Value> = histories.iter().filter(|h| order(h).0 <= read_at).collect();
    hs.sort_by_key(|h| order(h));
    // after[k]: the fields just after history k.
    let mut st = Snapshot::current(&fields);
    let mut after = vec![st.clone(); hs.len()];
    for k in (0..hs.len()).rev() {
        after[k] = st.clone();
        st.undo(hs[k]);
    }
    let at_creation = complete.then_some(st);
    let mut out = Vec::new();
    let created = time_ms(text(&fields, "/created"));
    if let (Some(t), Some(snap)) = (created, &at_creation) {
        if t >= since_ms {
            out.push((
                t,
                json!({"webhookEvent": "jira:issue_created", "timestamp": t,
                       "issue": snap.issue(issue)}),
            ));
        }
    }
    for (k, h) in hs.iter().enumerate() {
        let t = order(h).0;
        if t < since_ms {
            continue;
        }
        out.push((
            t,
            json!({"webhookEvent": "jira:issue_updated", "timestamp": t,
                   "issue": after[k].issue(issue),
                   "changelog": {"id": text(h, "/id"), "items": h.get("items").cloned().unwrap_or(json!([]))}}),
        ));
    }
    for c in comments {
        let t = order(c).0;
        if t < since_ms || t > read_at {
            continue;
        }
        // An edited comment may no longer be what its webhook delivery read (a
        // mention added or taken out): the same identity with another payload would
        // be refused, so it is left to its delivery.
        let edited = time_ms(text(c, "/updated")).is_some_and(|u| u != t);
        if edited {
            continue;
        }
        // The fields just after the last history at or before the comment; before
        // every history read, those at creation (when all were read).
        let snap = match hs.iter().rposition(|h| order(h).0 <= t) {
            Some(k) => &after[k],
            None => match &at_creation {
                Some(s) => s,
                None => continue,
            },
        };
        out.push((
            t,
            json!({"webhookEvent": "comment_created", "timestamp": t,
                   "issue": snap.issue(issue), "comment": c}),
        ));
    }
    out
}
