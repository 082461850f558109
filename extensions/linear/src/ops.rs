//! The toolbelt operations (`operation.call`), on the Work's issue (the issue of the
//! first `linear.issue` Event of the Work):
//!
//! - `linear.read_issue` {`comments`: 1..=100, default 50}: the issue with its
//!   comments, the description and each body cut for the prompt
//!   ([`MAX_TEXT_BYTES`]);
//! - `linear.comment` {`body`}: `commentCreate`, answering the comment's ID and URL;
//! - `linear.move` {`state`}: the team's workflow states are looked up and the issue
//!   is moved (`issueUpdate`) to the one of that name (case-insensitive); an unknown
//!   name is refused naming the states there are;
//! - `linear.label` {`label`}: the label of that name (the issue's team's, else the
//!   workspace's) is added (`issueAddLabel`); an unknown name is refused.
//! - `linear.link` {`url`, `title`?}: the URL attached to the issue ([`link`]);
//! - `linear.update` {`title`, `priority`, `estimate`, `due_date`: some}: those
//!   fields changed ([`update`]).
//!
//! `linear.comment`, `linear.move`, `linear.label`, `linear.link` and `linear.update` change Linear: with a request ID, their result
//! is kept ([`sdk::tracker::keep_result`]) and a retry answers it instead of acting
//! again.

use protocol::wire::{OperationCallParams, OperationCallResult, StateWorkEventsParams};
use protocol::{Code, RpcError};
use serde_json::{json, Value};

use crate::api::{self, Client};
use crate::FAMILY;

pub mod link;
pub mod update;

/// `linear.read_issue`.
pub const READ_ISSUE: &str = "linear.read_issue";
/// `linear.comment`.
pub const COMMENT: &str = "linear.comment";
/// `linear.move`.
pub const MOVE: &str = "linear.move";
/// `linear.label`.
pub const LABEL: &str = "linear.label";
/// Every operation.
pub const ALL: [&str; 6] = [READ_ISSUE, COMMENT, MOVE, LABEL, link::LINK, update::UPDATE];
/// The longest comment body accepted, in bytes.
pub const MAX_COMMENT_BYTES: usize = 64 * 1024;
/// The most bytes of a description or comment body `linear.read_issue` answers.
pub const MAX_TEXT_BYTES: usize = 16 * 1024;
/// The most comments read.
pub const MAX_COMMENTS: u64 = 100;
const DEFAULT_COMMENTS: u64 = 50;
const MAX_WORK_EVENT_PAGES: usize = 10;

fn invalid(m: impl Into<String>) -> RpcError {
    RpcError::new(Code::Invalid, m)
}

/// True for the operations that change Linear.
pub fn changes_linear(op: &str) -> bool {
    matches!(op, COMMENT | MOVE | LABEL | link::LINK | update::UPDATE)
}

/// The identifier of the first `linear.issue` Event's issue among `events`.
pub fn issue_of(events: &[protocol::wire::Event]) -> Option<String> {
    events.iter().find_map(|e| {
        let ours = e
            .event_type
            .strip_prefix(FAMILY)
            .is_some_and(|r| r.is_empty() || r.starts_with('.'));
        let id = e.payload.data.pointer("/issue/identifier")?.as_str()?;
        (ours && crate::project::is_identifier(id)).then(|| id.to_string())
    })
}

/// The Work's issue, from its Events.
pub async fn work_issue(host: &sdk::Host, work_id: &str) -> Result<String, RpcError> {
    let none = || invalid("the Work has no Linear issue (it was not started by a Linear Event)");
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
        if let Some(id) = issue_of(&page.events) {
            return Ok(id);
        }
        after = page.next_after(after);
    }
    Err(none())
}

fn cut(v: &Value) -> Value {
    let text = v.as_str().unwrap_or_default();
    json!(sdk::tracker::clip_markdown(text, MAX_TEXT_BYTES))
}

/// Reads `identifier` with up to `comments` comments.
pub async fn read_issue(
    client: &Client,
    identifier: &str,
    comments: u64,
) -> Result<Value, RpcError> {
    let data = client
        .send(
            "read_issue",
            api::ISSUE_QUERY,
            json!({"id": identifier, "first": comments}),
        )
        .await
        .map_err(|e| {
            if e.is(Code::NotFound) {
                let text = format!(
                    "Linear has no issue {identifier} (or the connection's key cannot see it): {}",
                    e.message
                );
                api::reworded(e, text)
            } else {
                e
            }
        })?;
    let issue = data.get("issue").filter(|i| i.is_object()).ok_or_else(|| {
        RpcError::new(Code::NotFound, format!("Linear has no issue {identifier}"))
    })?;
    let comments_out: Vec<Value> = issue
        .pointer("/comments/nodes")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(|c| {
            json!({"id": c["id"], "author": c.pointer("/user/name").cloned().unwrap_or(Value::Null),
                   "created_at": c["createdAt"], "body": cut(&c["body"])})
        })
        .collect();
    Ok(json!({
        "id": issue["id"],
        "identifier": issue["identifier"],
        "title": issue["title"],
        "url": issue["url"],
        "description": cut(&issue["description"]),
        "state": issue.pointer("/state/name").cloned().unwrap_or(Value::Null),
        "team": issue.pointer("/team/key").cloned().unwrap_or(Value::Null),
        "team_id": issue.pointer("/team/id").cloned().unwrap_or(Value::Null),
        "creator": issue.pointer("/creator/name").cloned().unwrap_or(Value::Null),
        "assignee": issue.pointer("/assignee/name").cloned().unwrap_or(Value::Null),
        "labels": issue.pointer("/labels/nodes").and_then(Value::as_array).map(|a| a.iter().map(|l| l["name"].clone()).collect::<Vec<_>>()).unwrap_or_default(),
        "comments": comments_out,
        "more_comments": issue.pointer("/comments/pageInfo/hasNextPage").cloned().unwrap_or(json!(false)),
    }))
}

/// Runs operation `op` with `input` on the issue `identifier`.
pub async fn run(
    client: &Client,
    op: &str,
    input: &Value,
    identifier: &str,
) -> Result<Value, RpcError> {
    match op {
        READ_ISSUE => {
            let n = match input.get("comments") {
                None | Some(Value::Null) => DEFAULT_COMMENTS,
                Some(v) => v
                    .as_u64()
                    .filter(|n| (1..=MAX_COMMENTS).contains(n))
                    .ok_or_else(|| invalid(format!("comments must be 1 to {MAX_COMMENTS}")))?,
            };
            read_issue(client, identifier, n).await
        }
        COMMENT => {
            let body = input
                .get("body")
                .and_then(Value::as_str)
                .filter(|b| !b.trim().is_empty())
                .ok_or_else(|| invalid("body (markdown) is required"))?;
            if body.len() > MAX_COMMENT_BYTES {
                return Err(invalid(format!(
                    "body is longer than {MAX_COMMENT_BYTES} bytes"
                )));
            }
            let issue = read_issue(client, identifier, 1).await?;
            let data = client
                .send(
                    "comment",
                    api::COMMENT_MUTATION,
                    json!({"input": {"issueId": issue["id"], "body": body}}),
                )
                .await?;
            let c = data
                .pointer("/commentCreate/comment")
                .cloned()
                .unwrap_or(Value::Null);
            if data.pointer("/commentCreate/success") != Some(&json!(true)) {
                return Err(RpcError::new(
                    Code::Unavailable,
                    format!("Linear did not create the comment on {identifier}"),
                ));
            }
            Ok(json!({"issue": identifier, "id": c["id"], "url": c["url"]}))
        }
        MOVE => {
            let name = input
                .get("state")
                .and_then(Value::as_str)
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .ok_or_else(|| {
                    invalid("state (a workflow state name, e.g. In Review) is required")
                })?;
            let issue = read_issue(client, identifier, 1).await?;
            let team_id = issue["team_id"].as_str().unwrap_or_default().to_string();
            let data = client
                .send(
                    "team states",
                    api::TEAM_STATES_QUERY,
                    json!({"id": team_id}),
                )
                .await?;
            let states: Vec<&Value> = data
                .pointer("/team/states/nodes")
                .and_then(Value::as_array)
                .map(|a| a.iter().collect())
                .unwrap_or_default();
            let Some(state) = states.iter().find(|s| {
                s["name"]
                    .as_str()
                    .is_some_and(|n| n.eq_ignore_ascii_case(name))
            }) else {
                let names: Vec<&str> = states.iter().filter_map(|s| s["name"].as_str()).collect();
                return Err(invalid(format!(
                    "team {} has no workflow state `{name}` (it has: {})",
                    issue["team"].as_str().unwrap_or("?"),
                    names.join(", ")
                )));
            };
            let data = client
                .send(
                    "move",
                    api::MOVE_MUTATION,
                    json!({"id": issue["id"], "input": {"stateId": state["id"]}}),
                )
                .await?;
            if data.pointer("/issueUpdate/success") != Some(&json!(true)) {
                return Err(RpcError::new(
                    Code::Unavailable,
                    format!("Linear did not move {identifier}"),
                ));
            }
            Ok(json!({"issue": identifier, "state": state["name"], "state_id": state["id"]}))
        }
        LABEL => add_label(client, input, identifier).await,
        link::LINK => link::run(client, input, identifier).await,
        update::UPDATE => update::run(client, input, identifier).await,
        other => Err(RpcError::new(
            Code::NotFound,
            format!("`{other}` is not an operation of this package"),
        )),
    }
}

async fn add_label(client: &Client, input: &Value, identifier: &str) -> Result<Value, RpcError> {
    let name = input
        .get("label")
        .and_then(Value::as_str)
        .map(str::trim)
        .filter(|s| !s.is_empty() && s.len() <= 200)
        .ok_or_else(|| invalid("label (a label name, at most 200 bytes) is required"))?;
    let issue = read_issue(client, identifier, 1).await?;
    let team_id = issue["team_id"].as_str().unwrap_or_default();
    let data = client
        .send("labels", api::LABELS_QUERY, json!({"name": name}))
        .await?;
    let labels: Vec<&Value> = data
        .pointer("/issueLabels/nodes")
        .and_then(Value::as_array)
        .map(|a| a.iter().collect())
        .unwrap_or_default();
    let team_label = labels
        .iter()
        .find(|l| l.pointer("/team/id").and_then(Value::as_str) == Some(team_id));
    let workspace_label = labels.iter().find(|l| l["team"].is_null());
    let Some(label) = team_label.or(workspace_label) else {
        return Err(invalid(format!(
            "no label `{name}` in team {} or the workspace",
            issue["team"].as_str().unwrap_or("?")
        )));
    };
    let data = client
        .send(
            "label",
            api::ADD_LABEL_MUTATION,
            json!({"id": issue["id"], "labelId": label["id"]}),
        )
        .await?;
    if data.pointer("/issueAddLabel/success") != Some(&json!(true)) {
        return Err(RpcError::new(
            Code::Unavailable,
            format!("Linear did not label {identifier}"),
        ));
    }
    Ok(json!({"issue": identifier, "label": label["name"], "label_id": label["id"]}))
}

/// A refusal as the agent sees it (its message as `data.agent_message`, unless it
/// carries one: Linear's refusals carry what Linear said, and when to retry).
pub use sdk::tracker::for_agent;

/// Serves `operation.call`: the replay, the Work's issue, the call, the kept result.
pub async fn call(
    state: &crate::State,
    host: &sdk::Host,
    params: &OperationCallParams,
) -> Result<OperationCallResult, RpcError> {
    let input = sdk::tracker::operation_input(params, &ALL, "linear")?;
    let op = params.operation.as_str();
    let authority = &params.authority;
    sdk::tracker::replayed(host, params, changes_linear(op), async {
        let identifier = work_issue(host, &authority.work_id).await?;
        let client = state
            .client(host, &authority.scope_id, &authority.connection)
            .await?
            .without_backoff();
        run(&client, op, &input, &identifier)
            .await
            .inspect_err(|e| {
                // The operator's line: the connection, the operation and Linear's answer.
                tracing::warn!(
                    connection = %authority.connection,
                    operation = op,
                    issue = %identifier,
                    code = e.app_code().unwrap_or("internal"),
                    "linear operation refused: {}",
                    e.message
                );
            })
    })
    .await
}
