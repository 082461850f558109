//! The toolbelt operations (`operation.call`): read an issue or pull request,
//! comment, edit a comment, add labels, open a pull request.
//!
//! The repository and the issue or PR number default to the calling Work's own,
//! found in its Events (the `github.*` payloads this package emits carry
//! `repository` and `number`). An input naming another repository than the
//! Work's is refused `unauthorized`; a Work with no GitHub Events may name one of
//! the repositories the scope's `github` entries receive (and gets the one, when
//! they receive one). The GitHub connection is the binding's
//! (`authority.connection`), or, when the binding's is not a github connection (a
//! Linear or Jira binding's), that of the scope's entry receiving the repository
//! ([`crate::target::connection_for`]).
//!
//! Calls that change GitHub are idempotent on the Work's request ID: the output is
//! kept in the package's KV under `op/<digest of scope, Work, request ID>` (committed with an `absent` check), and
//! a call repeating a request ID answers it without calling GitHub again.

use protocol::wire::{
    Authority, KvCheck, KvCommitParams, KvGetParams, KvPut, OperationCallParams,
    OperationCallResult,
};
use protocol::{Code, RpcError};
use serde_json::{json, Map, Value};
use sha2::{Digest, Sha256};

use crate::api::{ApiError, Client};
pub use crate::target::{
    target, work_ref, work_ref_of, Target, WorkRef, ADD_LABELS, ALL, COMMENT, MAX_WORK_EVENT_PAGES,
    OPEN_PULL_REQUEST, READ_ISSUE, UPDATE_COMMENT,
};

/// The most comment pages `github.read_issue` reads (100 comments a page).
pub const MAX_COMMENT_PAGES: usize = 10;
/// The longest comment or pull request body accepted, in bytes (GitHub's own
/// limit is 65536 characters).
pub const MAX_BODY_BYTES: usize = 65536;
/// The most labels one `github.add_labels` adds.
pub const MAX_LABELS: usize = 100;
fn invalid(m: impl Into<String>) -> RpcError {
    RpcError::new(Code::Invalid, m)
}

fn number_of(t: &Target) -> Result<u64, RpcError> {
    t.number
        .ok_or_else(|| invalid("the Work has no issue or pull request: give its number"))
}

fn text<'a>(input: &'a Value, field: &str, required: bool) -> Result<Option<&'a str>, RpcError> {
    match input.get(field) {
        None | Some(Value::Null) if !required => Ok(None),
        None | Some(Value::Null) => Err(invalid(format!("{field} is required"))),
        Some(Value::String(s)) => {
            if s.len() > MAX_BODY_BYTES {
                return Err(invalid(format!(
                    "{field} is longer than {MAX_BODY_BYTES} bytes"
                )));
            }
            if required && s.trim().is_empty() {
                return Err(invalid(format!("{field} is empty")));
            }
            Ok(Some(s))
        }
        Some(_) => Err(invalid(format!("{field} must be a string"))),
    }
}

fn login(v: &Value) -> Value {
    v["login"].as_str().map_or(Value::Null, |s| json!(s))
}

fn comment_out(c: &Value) -> Value {
    json!({
        "id": c["id"],
        "author": login(&c["user"]),
        "body": c["body"],
        "html_url": c["html_url"],
        "created_at": c["created_at"],
        "updated_at": c["updated_at"],
    })
}

/// Runs one operation against GitHub (no replay).
pub async fn run(
    client: &Client,
    operation: &str,
    input: &Value,
    target: &Target,
) -> Result<Value, RpcError> {
    let repo = &target.repository;
    let api = |e: ApiError| e.to_rpc();
    match operation {
        READ_ISSUE => {
            let n = number_of(target)?;
            let issue = client
                .request("GET", &format!("/repos/{repo}/issues/{n}"), None)
                .await
                .map_err(api)?;
            let (comments, truncated) = client
                .get_all(
                    &format!("/repos/{repo}/issues/{n}/comments?per_page=100"),
                    MAX_COMMENT_PAGES,
                )
                .await
                .map_err(api)?;
            let labels: Vec<Value> = issue["labels"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|l| l["name"].as_str().or(l.as_str()).map(|s| json!(s)))
                .collect();
            Ok(json!({
                "repository": repo,
                "number": issue["number"],
                "title": issue["title"],
                "state": issue["state"],
                "author": login(&issue["user"]),
                "body": issue["body"],
                "labels": labels,
                "html_url": issue["html_url"],
                "is_pull_request": issue.get("pull_request").is_some_and(Value::is_object),
                "created_at": issue["created_at"],
                "updated_at": issue["updated_at"],
                "comments": comments.iter().map(comment_out).collect::<Vec<_>>(),
                "comments_truncated": truncated,
            }))
        }
        COMMENT => {
            let n = number_of(target)?;
            let body = text(input, "body", true)?.unwrap_or_default();
            let c = client
                .request(
                    "POST",
                    &format!("/repos/{repo}/issues/{n}/comments"),
                    Some(json!({ "body": body })),
                )
                .await
                .map_err(api)?;
            Ok(json!({"repository": repo, "number": n, "comment": comment_out(&c)}))
        }
        UPDATE_COMMENT => {
            let id = input["comment_id"]
                .as_u64()
                .ok_or_else(|| invalid("comment_id (a positive integer) is required"))?;
            let body = text(input, "body", true)?.unwrap_or_default();
            let c = client
                .request(
                    "PATCH",
                    &format!("/repos/{repo}/issues/comments/{id}"),
                    Some(json!({ "body": body })),
                )
                .await
                .map_err(api)?;
            Ok(json!({"repository": repo, "comment": comment_out(&c)}))
        }
        ADD_LABELS => {
            let n = number_of(target)?;
            let labels: Vec<&str> = match input.get("labels") {
                Some(Value::Array(items)) => items.iter().filter_map(Value::as_str).collect(),
                _ => Vec::new(),
            };
            if labels.is_empty() || labels.len() != input["labels"].as_array().map_or(0, Vec::len) {
                return Err(invalid("labels must be a non-empty list of strings"));
            }
            if labels.len() > MAX_LABELS {
                return Err(invalid(format!("at most {MAX_LABELS} labels at once")));
            }
            let now = client
                .request(
                    "POST",
                    &format!("/repos/{repo}/issues/{n}/labels"),
                    Some(json!({ "labels": labels })),
                )
                .await
                .map_err(api)?;
            let names: Vec<Value> = now
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|l| l["name"].as_str().map(|s| json!(s)))
                .collect();
            Ok(json!({"repository": repo, "number": n, "labels": names}))
        }
        OPEN_PULL_REQUEST => Ok(open_pull_request(client, input, target).await?.0),
        other => Err(RpcError::new(
            Code::NotFound,
            format!("`{other}` is not an operation of this package"),
        )),
    }
}

/// `github.open_pull_request`: the operation's output, and the pull request as
/// GitHub answered it (for the Work's link, [`crate::link`]).
pub async fn open_pull_request(
    client: &Client,
    input: &Value,
    target: &Target,
) -> Result<(Value, Value), RpcError> {
    let repo = &target.repository;
    let api = |e: ApiError| e.to_rpc();
    let head = text(input, "head", true)?.unwrap_or_default();
    let base = text(input, "base", true)?.unwrap_or_default();
    let title = text(input, "title", true)?.unwrap_or_default();
    let mut req = Map::new();
    req.insert("head".into(), json!(head));
    req.insert("base".into(), json!(base));
    req.insert("title".into(), json!(title));
    if let Some(body) = text(input, "body", false)? {
        req.insert("body".into(), json!(body));
    }
    if let Some(draft) = input.get("draft").and_then(Value::as_bool) {
        req.insert("draft".into(), json!(draft));
    }
    let pr = client
        .request(
            "POST",
            &format!("/repos/{repo}/pulls"),
            Some(Value::Object(req)),
        )
        .await
        .map_err(api)?;
    let out = json!({
        "repository": repo,
        "number": pr["number"],
        "html_url": pr["html_url"],
        "state": pr["state"],
        "head": pr["head"]["ref"],
        "base": pr["base"]["ref"],
    });
    Ok((out, pr))
}

/// A refusal as the agent will see it: one that carries no `data.agent_message`
/// (the package's own refusals, whose messages are written for the agent and hold
/// no secret) gets its message as that. A GitHub error already has its own.
pub fn for_agent(mut e: RpcError) -> RpcError {
    let message = protocol::toolbelt::agent_message(&e.message);
    if let Some(Value::Object(data)) = e.data.as_mut() {
        data.entry(protocol::toolbelt::AGENT_MESSAGE_FIELD)
            .or_insert_with(|| json!(message));
    }
    e
}

/// True for the operations that change GitHub (and so are replayed by request ID).
pub fn changes_github(operation: &str) -> bool {
    operation != READ_ISSUE
}

/// The KV key a request ID's result is kept under: the request ID is the calling
/// Work's (as the toolbelt keeps it), so another Work's same ID is another call.
pub fn replay_key(authority: &Authority, request_id: &str) -> String {
    let mut h = Sha256::new();
    h.update(authority.scope_id.as_bytes());
    h.update([0]);
    h.update(authority.work_id.as_bytes());
    h.update([0]);
    h.update(request_id.as_bytes());
    let d = h.finalize();
    let hex: String = d.iter().map(|b| format!("{b:02x}")).collect();
    format!("op/{hex}")
}

/// A kept result: the operation's output if `stored` is for `operation`.
fn replayed(stored: &Value, operation: &str) -> Result<Value, RpcError> {
    if stored["operation"].as_str() != Some(operation) {
        return Err(RpcError::new(
            Code::Conflict,
            format!(
                "this request_id was already used for {}",
                stored["operation"].as_str().unwrap_or("another operation")
            ),
        ));
    }
    Ok(stored["output"].clone())
}

/// Serves `operation.call`: the target, the replay, the call, the kept result.
pub async fn call(
    state: &crate::State,
    host: &sdk::Host,
    params: &OperationCallParams,
) -> Result<OperationCallResult, RpcError> {
    let op = params.operation.as_str();
    if !ALL.contains(&op) {
        return Err(RpcError::new(
            Code::NotFound,
            format!("`{op}` is not an operation of this package"),
        ));
    }
    let authority = &params.authority;
    if authority.connection.is_empty() {
        return Err(RpcError::new(
            Code::Unauthorized,
            "the binding names no connection: a github operation acts as the binding's github connection",
        ));
    }
    let input = if params.input.is_null() {
        Value::Object(Map::new())
    } else if params.input.is_object() {
        params.input.clone()
    } else {
        return Err(invalid("the input must be an object"));
    };
    let replay = changes_github(op) && !params.request_id.is_empty();
    let key = replay_key(authority, &params.request_id);
    if replay {
        let kept = host
            .call_typed(&KvGetParams {
                namespace: String::new(),
                key: key.clone(),
            })
            .await
            .map_err(|e| RpcError::new(Code::Unavailable, format!("kv.get: {e}")))?;
        if let Some(stored) = kept.value {
            tracing::info!(operation = op, "replaying the kept result of a request_id");
            return Ok(OperationCallResult {
                output: replayed(&stored, op)?,
            });
        }
    }
    let work = work_ref(host, &authority.work_id).await?;
    let entry_repos: Vec<String> = state
        .registry()
        .entries
        .iter()
        .filter(|e| e.scope_id == authority.scope_id)
        .map(|e| e.repository.clone())
        .collect();
    let foreign =
        crate::authority::foreign(state, host, &authority.scope_id, op, &input, &work).await?;
    let (target, client) = match &foreign {
        Some(f) => (
            f.target.clone(),
            state.client(host, &f.scope_id, &f.connection).await?,
        ),
        None => {
            let target = target(&input, &work, &entry_repos)?;
            let connection = crate::target::connection_for(
                state,
                &authority.scope_id,
                &authority.connection,
                &target.repository,
            )
            .unwrap_or_else(|| authority.connection.clone());
            let client = state.client(host, &authority.scope_id, &connection).await?;
            (target, client)
        }
    };
    let output = if op == OPEN_PULL_REQUEST && foreign.is_none() {
        let (output, pr) = open_pull_request(&client, &input, &target).await?;
        if let Err(e) = crate::link::link(
            state,
            host,
            &authority.scope_id,
            &authority.work_id,
            &target.repository,
            &pr,
        )
        .await
        {
            tracing::warn!(repository = %target.repository, error = %e.message, "the pull request could not be linked to its Work");
        }
        output
    } else {
        run(&client, op, &input, &target).await?
    };
    if replay {
        let commit = host
            .call_typed(&KvCommitParams {
                checks: vec![KvCheck::absent(key.clone())],
                puts: vec![KvPut {
                    namespace: String::new(),
                    key: key.clone(),
                    value: json!({"operation": op, "output": output, "at": protocol::time::format_rfc3339_ms(protocol::time::now_ms())}),
                }],
                ..Default::default()
            })
            .await;
        if let Err(e) = commit {
            if e.is(Code::Conflict) {
                // Another call with the same request ID kept its result first.
                let kept = host
                    .call_typed(&KvGetParams {
                        namespace: String::new(),
                        key,
                    })
                    .await
                    .map_err(|e| RpcError::new(Code::Unavailable, format!("kv.get: {e}")))?;
                if let Some(stored) = kept.value {
                    return Ok(OperationCallResult {
                        output: replayed(&stored, op)?,
                    });
                }
            }
            tracing::warn!(operation = op, error = %e, "keeping the result of a request_id failed");
        }
    }
    Ok(OperationCallResult { output })
}
