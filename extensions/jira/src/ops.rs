//! The toolbelt operations (`operation.call`): `jira.read_issue`, `jira.comment`,
//! `jira.transition`, `jira.link` ([`link`]), `jira.labels` and `jira.set_fields`
//! ([`fields`]), on the Work's own issue (the `issue_key` of its first
//! `jira.issue` Event), as the binding's connection.
//!
//! The calls that change Jira (all but `jira.read_issue`) are idempotent on
//! the request ID, through the SDK's shared [`sdk::tracker::keep_result`]: the
//! output is kept in the package's KV under `op/<digest of scope, Work, request
//! ID>` (committed with an `absent` check), and a call repeating a request ID
//! answers it without calling Jira again.

use protocol::wire::{OperationCallParams, OperationCallResult, StateWorkEventsParams};
use protocol::{Code, RpcError};
use serde_json::{json, Value};

use crate::api::Client;
use crate::FAMILY;

pub mod fields;
pub mod link;

/// `jira.read_issue`.
pub const READ_ISSUE: &str = "jira.read_issue";
/// `jira.comment`.
pub const COMMENT: &str = "jira.comment";
/// `jira.transition`.
pub const TRANSITION: &str = "jira.transition";
/// Every operation.
pub const ALL: [&str; 6] = [
    READ_ISSUE,
    COMMENT,
    TRANSITION,
    link::LINK,
    fields::LABELS,
    fields::SET_FIELDS,
];
/// The longest comment text accepted, in bytes.
pub const MAX_TEXT_BYTES: usize = 32_000;
/// The most comments `jira.read_issue` answers.
pub const MAX_COMMENTS: usize = 50;
/// The most bytes of one description or comment body answered.
pub const MAX_BODY_TEXT_BYTES: usize = 16 * 1024;
/// The most Work Event pages read to find the Work's issue.
pub const MAX_WORK_EVENT_PAGES: usize = 10;

fn invalid(m: impl Into<String>) -> RpcError {
    RpcError::new(Code::Invalid, m)
}

/// The path segment of an issue key (checked: letters, digits, `_`, `-`).
fn issue_path(key: &str) -> Result<String, RpcError> {
    if !crate::config::is_issue_key(key) {
        return Err(invalid(format!("`{key}` is not an issue key (PROJ-123)")));
    }
    Ok(format!("/rest/api/3/issue/{key}"))
}

/// `jira.read_issue`: the issue and its latest comments, bodies as text.
pub async fn read_issue(client: &Client, key: &str) -> Result<Value, RpcError> {
    let base = issue_path(key)?;
    let issue = client
        .call(
            "GET",
            format!("{base}?fields=summary,status,assignee,reporter,labels,description"),
            None,
        )
        .await?;
    let comments = client
        .call(
            "GET",
            format!("{base}/comment?maxResults={MAX_COMMENTS}&orderBy=-created"),
            None,
        )
        .await?;
    let f = |p: &str| issue.pointer(p).and_then(Value::as_str).unwrap_or_default();
    let listed: Vec<Value> = comments
        .get("comments")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .take(MAX_COMMENTS)
        .map(|c| {
            json!({
                "id": c.get("id").and_then(Value::as_str).unwrap_or_default(),
                "author": c.pointer("/author/displayName").and_then(Value::as_str).unwrap_or_default(),
                "created": c.get("created").and_then(Value::as_str).unwrap_or_default(),
                "text": c.get("body").map(|b| crate::adf::to_text(b, MAX_BODY_TEXT_BYTES)).unwrap_or_default(),
            })
        })
        .collect();
    Ok(json!({
        "key": issue.get("key").and_then(Value::as_str).unwrap_or(key),
        "summary": f("/fields/summary"),
        "status": f("/fields/status/name"),
        "assignee": f("/fields/assignee/displayName"),
        "reporter": f("/fields/reporter/displayName"),
        "labels": issue.pointer("/fields/labels").cloned().unwrap_or(json!([])),
        "description": issue.pointer("/fields/description").filter(|d| !d.is_null())
            .map(|d| crate::adf::to_text(d, MAX_BODY_TEXT_BYTES)).unwrap_or_default(),
        "comments": listed,
        "comments_total": comments.get("total").cloned().unwrap_or(Value::Null),
    }))
}

/// `jira.comment`: posts `text` (as ADF) on the issue.
pub async fn comment(client: &Client, key: &str, text: &str) -> Result<Value, RpcError> {
    if text.trim().is_empty() {
        return Err(invalid("text is empty"));
    }
    if text.len() > MAX_TEXT_BYTES {
        return Err(invalid(format!(
            "text is longer than {MAX_TEXT_BYTES} bytes (MAX_TEXT_BYTES)"
        )));
    }
    let base = issue_path(key)?;
    let body = json!({"body": crate::adf::from_markdown(text)});
    let made = client
        .call("POST", format!("{base}/comment"), Some(body))
        .await?;
    Ok(
        json!({"issue": key, "comment_id": made.get("id").and_then(Value::as_str).unwrap_or_default()}),
    )
}

/// `jira.transition`: the transition named `to` (or leading to status `to`).
pub async fn transition(client: &Client, key: &str, to: &str) -> Result<Value, RpcError> {
    let to = to.trim();
    if to.is_empty() || to.len() > 255 {
        return Err(invalid(
            "to must name a transition or a status (1 to 255 bytes)",
        ));
    }
    let base = issue_path(key)?;
    let offered = client
        .call("GET", format!("{base}/transitions"), None)
        .await?;
    let list: Vec<&Value> = offered
        .get("transitions")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .collect();
    let name = |t: &Value, p: &str| {
        t.pointer(p)
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string()
    };
    let chosen = list
        .iter()
        .find(|t| name(t, "/name").eq_ignore_ascii_case(to))
        .or_else(|| {
            list.iter()
                .find(|t| name(t, "/to/name").eq_ignore_ascii_case(to))
        })
        .ok_or_else(|| {
            let names: Vec<String> = list
                .iter()
                .map(|t| format!("{} (to {})", name(t, "/name"), name(t, "/to/name")))
                .collect();
            invalid(format!(
                "{key} offers no transition or status named `{to}`; it offers: {}",
                if names.is_empty() {
                    "none".to_string()
                } else {
                    names.join(", ")
                }
            ))
        })?;
    let id = name(chosen, "/id");
    client
        .call(
            "POST",
            format!("{base}/transitions"),
            Some(json!({"transition": {"id": id}})),
        )
        .await?;
    Ok(
        json!({"issue": key, "transition": name(chosen, "/name"), "status": name(chosen, "/to/name")}),
    )
}

/// The issue key of the first `jira.issue` Event among `events`.
pub fn issue_of(events: &[protocol::wire::Event]) -> Option<String> {
    events.iter().find_map(|e| {
        let ours = e
            .event_type
            .strip_prefix(FAMILY)
            .is_some_and(|r| r.is_empty() || r.starts_with('.'));
        let key = e.payload.data.get("issue_key").and_then(Value::as_str)?;
        (ours && crate::config::is_issue_key(key)).then(|| key.to_string())
    })
}

async fn work_issue(host: &sdk::Host, work_id: &str) -> Result<String, RpcError> {
    let none = || invalid("the Work has no Jira issue (it was not started by a Jira webhook)");
    if work_id.is_empty() {
        return Err(none());
    }
    let mut after = 0;
    for _ in 0..MAX_WORK_EVENT_PAGES {
        let page = host
            .call_typed(&StateWorkEventsParams {
                id: work_id.to_string(),
                after,
                limit: 1000,
            })
            .await
            .map_err(|e| {
                RpcError::new(Code::Unavailable, format!("reading the Work's Events: {e}"))
            })?;
        if page.events.is_empty() {
            break;
        }
        if let Some(k) = issue_of(&page.events) {
            return Ok(k);
        }
        after = page.next_after(after);
    }
    Err(none())
}

fn string<'a>(input: &'a Value, field: &str) -> Result<&'a str, RpcError> {
    input
        .get(field)
        .and_then(Value::as_str)
        .ok_or_else(|| invalid(format!("{field} is required (a string)")))
}

/// Serves `operation.call`. A refusal carries its message for the agent
/// (`data.agent_message`): the package's messages name the method, path and status,
/// never a credential.
pub async fn call(
    state: &crate::State,
    host: &sdk::Host,
    params: &OperationCallParams,
) -> Result<OperationCallResult, RpcError> {
    call_inner(state, host, params).await.map_err(|e| {
        // The operator's line: the connection, the operation and Jira's answer.
        tracing::warn!(
            connection = %params.authority.connection,
            operation = %params.operation,
            code = e.app_code().unwrap_or("internal"),
            "jira operation refused: {}",
            e.message
        );
        sdk::tracker::for_agent(e)
    })
}

async fn call_inner(
    state: &crate::State,
    host: &sdk::Host,
    params: &OperationCallParams,
) -> Result<OperationCallResult, RpcError> {
    let input = sdk::tracker::operation_input(params, &ALL, "jira")?;
    let op = params.operation.as_str();
    let authority = &params.authority;
    sdk::tracker::replayed(host, params, op != READ_ISSUE, async {
        let issue = work_issue(host, &authority.work_id).await?;
        let client = state
            .client(host, &authority.scope_id, &authority.connection)
            .await?
            .without_backoff();
        let output = match op {
            READ_ISSUE => read_issue(&client, &issue).await?,
            COMMENT => comment(&client, &issue, string(&input, "text")?).await?,
            link::LINK => link::link(&client, &issue, &input).await?,
            fields::LABELS => fields::labels(&client, &issue, &input).await?,
            fields::SET_FIELDS => {
                let allowed = fields::settable(
                    &state.registry(),
                    &authority.scope_id,
                    &authority.connection,
                );
                fields::set_fields(&client, &issue, &input, &allowed).await?
            }
            _ => transition(&client, &issue, string(&input, "to")?).await?,
        };
        Ok(output)
    })
    .await
}
