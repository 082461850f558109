//! The toolbelt operations (`operation.call`), as the binding's `bitbucket`
//! connection, on the Work's own pull request (the repository and ID of its first
//! `bitbucket.pullrequest` Event) or, for `bitbucket.open_pull_request`, its
//! repository:
//!
//! - `bitbucket.read_pull_request`: the pull request, its comments (at most
//!   [`MAX_COMMENTS`]), the files changed (at most [`MAX_DIFFSTAT_FILES`]) and the diff
//!   (at most [`MAX_DIFF_BYTES`]);
//! - `bitbucket.comment`: a comment, inline (`inline.path`, `inline.to`) or not;
//! - `bitbucket.open_pull_request`: a pull request from the Work's branch (`branch`),
//!   linked to the Work ([`crate::link`]);
//! - `bitbucket.approve`, `bitbucket.request_changes`.
//!
//! The calls that change Bitbucket are idempotent on the request ID through the SDK's
//! [`sdk::tracker::keep_result`]: the output is kept in the package's KV, and a call
//! repeating a request ID answers it without calling Bitbucket again.

use protocol::wire::{OperationCallParams, OperationCallResult, StateWorkEventsParams};
use protocol::{Code, RpcError};
use serde_json::{json, Value};

use crate::api::Client;

/// `bitbucket.read_pull_request`.
pub const READ_PULL_REQUEST: &str = "bitbucket.read_pull_request";
/// `bitbucket.comment`.
pub const COMMENT: &str = "bitbucket.comment";
/// `bitbucket.open_pull_request`.
pub const OPEN_PULL_REQUEST: &str = "bitbucket.open_pull_request";
/// `bitbucket.approve`.
pub const APPROVE: &str = "bitbucket.approve";
/// `bitbucket.request_changes`.
pub const REQUEST_CHANGES: &str = "bitbucket.request_changes";
/// Every operation.
pub const ALL: [&str; 5] = [
    READ_PULL_REQUEST,
    COMMENT,
    OPEN_PULL_REQUEST,
    APPROVE,
    REQUEST_CHANGES,
];
/// The longest comment or description accepted, in bytes.
pub const MAX_TEXT_BYTES: usize = 32_000;
/// The longest title or branch name accepted, in bytes.
pub const MAX_NAME_BYTES: usize = 255;
/// The most comments `bitbucket.read_pull_request` answers.
pub const MAX_COMMENTS: usize = 50;
/// The most bytes of one comment or description answered.
pub const MAX_BODY_TEXT_BYTES: usize = 16 * 1024;
/// The most changed files answered.
pub const MAX_DIFFSTAT_FILES: usize = 200;
/// The most bytes of the diff answered.
pub const MAX_DIFF_BYTES: usize = 64 * 1024;
/// The most Work Event pages read to find the Work's pull request.
pub const MAX_WORK_EVENT_PAGES: usize = 10;

fn invalid(m: impl Into<String>) -> RpcError {
    RpcError::new(Code::Invalid, m)
}

/// What the Work acts on: its repository, and its pull request when it has one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    /// `workspace/repo_slug`.
    pub repository: String,
    /// The pull request's ID.
    pub pull_request: Option<u64>,
}

impl Target {
    fn pull_request(&self) -> Result<u64, RpcError> {
        self.pull_request.ok_or_else(|| {
            invalid(format!(
                "the Work has no pull request of {} (it was not started by one)",
                self.repository
            ))
        })
    }

    fn base(&self) -> Result<String, RpcError> {
        Ok(format!(
            "/repositories/{}/pullrequests/{}",
            self.repository,
            self.pull_request()?
        ))
    }
}

/// The target of the Work whose Events are `events`: the first pull request Event's
/// repository and ID, else the first of the package's Events' repository.
pub fn target_of(events: &[protocol::wire::Event]) -> Option<Target> {
    let ours = |e: &&protocol::wire::Event| {
        crate::FAMILIES
            .iter()
            .any(|f| e.event_type.starts_with(&format!("{f}.")))
    };
    let repository = |e: &protocol::wire::Event| {
        e.payload
            .data
            .get("repository")
            .and_then(Value::as_str)
            .filter(|r| crate::config::is_repository(r))
            .map(str::to_string)
    };
    let pr = events
        .iter()
        .filter(ours)
        .filter(|e| e.event_type.starts_with(crate::PULLREQUEST))
        .find_map(|e| {
            let id = e.payload.data.get("id").and_then(Value::as_u64)?;
            Some(Target {
                repository: repository(e)?,
                pull_request: Some(id),
            })
        });
    pr.or_else(|| {
        events.iter().filter(ours).find_map(|e| {
            Some(Target {
                repository: repository(e)?,
                pull_request: None,
            })
        })
    })
}

fn s<'a>(v: &'a Value, p: &str) -> &'a str {
    v.pointer(p).and_then(Value::as_str).unwrap_or_default()
}

/// `bitbucket.read_pull_request`.
pub async fn read_pull_request(client: &Client, target: &Target) -> Result<Value, RpcError> {
    let base = target.base()?;
    let pr = client.json("GET", base.clone(), None).await?;
    let comments = client
        .json(
            "GET",
            format!("{base}/comments?pagelen={MAX_COMMENTS}"),
            None,
        )
        .await?;
    // The pull request's diff and diffstat answer a 302 to the repository's for the
    // source and destination commits; asked for those directly (`topic=true`: the
    // three-dot diff of the source against the merge base), as the redirect would.
    let commit = |p: &str| {
        Some(s(&pr, p))
            .filter(|h| (7..=64).contains(&h.len()) && h.bytes().all(|b| b.is_ascii_hexdigit()))
            .map(str::to_string)
    };
    let (source, destination) = match (
        commit("/source/commit/hash"),
        commit("/destination/commit/hash"),
    ) {
        (Some(a), Some(b)) => (a, b),
        _ => {
            return Err(RpcError::new(
                Code::Unavailable,
                format!("{base} names no source and destination commits"),
            ))
        }
    };
    let spec = format!("{source}..{destination}");
    let repo = format!("/repositories/{}", target.repository);
    let diffstat = client
        .json("GET", format!("{repo}/diffstat/{spec}?topic=true"), None)
        .await?;
    let diff = client
        .call("GET", format!("{repo}/diff/{spec}?topic=true"), None)
        .await?;
    let listed: Vec<Value> = comments
        .get("values")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter(|c| c.get("deleted").and_then(Value::as_bool) != Some(true))
        .take(MAX_COMMENTS)
        .map(|c| {
            let mut out = json!({
                "id": c.get("id").cloned().unwrap_or(Value::Null),
                "author": s(c, "/user/display_name"),
                "created_on": s(c, "/created_on"),
                "text": sdk::tracker::clip(s(c, "/content/raw"), MAX_BODY_TEXT_BYTES).0,
            });
            if let Some(inline) = c.get("inline").filter(|i| i.is_object()) {
                out["inline"] = json!({"path": s(inline, "/path"), "to": inline.get("to").cloned().unwrap_or(Value::Null)});
            }
            if let Some(parent) = c.pointer("/parent/id") {
                out["parent_id"] = parent.clone();
            }
            out
        })
        .collect();
    let files: Vec<Value> = diffstat
        .get("values")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .take(MAX_DIFFSTAT_FILES)
        .map(|f| {
            let path = match s(f, "/new/path") {
                "" => s(f, "/old/path"),
                p => p,
            };
            json!({"path": path, "status": s(f, "/status"),
                   "lines_added": f.get("lines_added").cloned().unwrap_or(Value::Null),
                   "lines_removed": f.get("lines_removed").cloned().unwrap_or(Value::Null)})
        })
        .collect();
    let diff_text = String::from_utf8_lossy(&diff.body);
    let (diff_text, diff_cut) = sdk::tracker::clip(&diff_text, MAX_DIFF_BYTES);
    Ok(json!({
        "repository": target.repository,
        "id": pr.get("id").cloned().unwrap_or(Value::Null),
        "title": s(&pr, "/title"),
        "description": sdk::tracker::clip(s(&pr, "/description"), MAX_BODY_TEXT_BYTES).0,
        "state": s(&pr, "/state"),
        "author": s(&pr, "/author/display_name"),
        "source_branch": s(&pr, "/source/branch/name"),
        "destination_branch": s(&pr, "/destination/branch/name"),
        "url": s(&pr, "/links/html/href"),
        "comments": listed,
        "comments_more": comments.get("next").is_some(),
        "files": files,
        "files_more": diffstat.get("next").is_some() || files.len() == MAX_DIFFSTAT_FILES,
        "diff": diff_text,
        "diff_truncated": diff_cut,
    }))
}

fn text<'a>(input: &'a Value, field: &str, max: usize) -> Result<Option<&'a str>, RpcError> {
    match input.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(t)) if t.len() > max => {
            Err(invalid(format!("{field} is longer than {max} bytes")))
        }
        Some(Value::String(t)) if t.trim().is_empty() => Err(invalid(format!("{field} is empty"))),
        Some(Value::String(t)) => Ok(Some(t)),
        Some(_) => Err(invalid(format!("{field} must be a string"))),
    }
}

fn required<'a>(input: &'a Value, field: &str, max: usize) -> Result<&'a str, RpcError> {
    text(input, field, max)?.ok_or_else(|| invalid(format!("{field} is required (a string)")))
}

/// A branch name as git allows it, checked enough to go in a request body.
fn check_branch(field: &str, name: &str) -> Result<(), RpcError> {
    let bad = name.starts_with(['-', '/'])
        || name.ends_with(['/', '.'])
        || name.contains("..")
        || name.contains("//")
        || name.ends_with(".lock")
        || name
            .chars()
            .any(|c| c.is_whitespace() || c.is_control() || "~^:?*[\\".contains(c));
    if bad {
        return Err(invalid(format!("{field} `{name}` is not a branch name")));
    }
    Ok(())
}

/// `bitbucket.comment`: `text`, inline on `inline.path` line `inline.to` when given.
pub async fn comment(client: &Client, target: &Target, input: &Value) -> Result<Value, RpcError> {
    let body_text = required(input, "text", MAX_TEXT_BYTES)?;
    let base = target.base()?;
    // `type` is what the description requires of every object (Bitbucket infers it).
    let mut body = json!({"type": "pullrequest_comment", "content": {"raw": body_text}});
    match input.get("inline") {
        None | Some(Value::Null) => {}
        Some(inline) => {
            let path = inline
                .get("path")
                .and_then(Value::as_str)
                .filter(|p| !p.trim().is_empty() && p.len() <= 1024)
                .ok_or_else(|| {
                    invalid("inline.path is required: the file's path (at most 1024 bytes)")
                })?;
            let to = inline
                .get("to")
                .and_then(Value::as_u64)
                .filter(|n| *n >= 1)
                .ok_or_else(|| {
                    invalid("inline.to is required: the line (1 or more) in the new version")
                })?;
            body["inline"] = json!({"path": path, "to": to});
        }
    }
    let made = client
        .json("POST", format!("{base}/comments"), Some(body))
        .await?;
    Ok(json!({
        "pull_request": crate::intake::key(&target.repository, target.pull_request()?),
        "comment_id": made.get("id").cloned().unwrap_or(Value::Null),
        "url": s(&made, "/links/html/href"),
    }))
}

/// `bitbucket.open_pull_request`: from `branch` to `destination` (the repository's
/// main branch when absent).
pub async fn open_pull_request(
    client: &Client,
    target: &Target,
    input: &Value,
) -> Result<Value, RpcError> {
    Ok(open_pull_request_made(client, target, input).await?.0)
}

/// [`open_pull_request`], with the API's answer (the pull request made), which
/// [`crate::link`] links to the Work.
pub async fn open_pull_request_made(
    client: &Client,
    target: &Target,
    input: &Value,
) -> Result<(Value, Value), RpcError> {
    let title = required(input, "title", MAX_NAME_BYTES)?;
    let branch = required(input, "branch", MAX_NAME_BYTES)?;
    check_branch("branch", branch)?;
    let mut body =
        json!({"type": "pullrequest", "title": title, "source": {"branch": {"name": branch}}});
    if let Some(d) = text(input, "destination", MAX_NAME_BYTES)? {
        check_branch("destination", d)?;
        body["destination"] = json!({"branch": {"name": d}});
    }
    if let Some(d) = text(input, "description", MAX_TEXT_BYTES)? {
        body["description"] = json!(d);
    }
    let made = client
        .json(
            "POST",
            format!("/repositories/{}/pullrequests", target.repository),
            Some(body),
        )
        .await?;
    let id = made.get("id").and_then(Value::as_u64).unwrap_or_default();
    let output = json!({
        "id": id,
        "key": format!("{}#{id}", target.repository),
        "url": s(&made, "/links/html/href"),
        "source_branch": s(&made, "/source/branch/name"),
        "destination_branch": s(&made, "/destination/branch/name"),
    });
    Ok((output, made))
}

/// `bitbucket.approve`.
pub async fn approve(client: &Client, target: &Target) -> Result<Value, RpcError> {
    let base = target.base()?;
    client.json("POST", format!("{base}/approve"), None).await?;
    Ok(json!({
        "pull_request": crate::intake::key(&target.repository, target.pull_request()?),
        "approved": true,
    }))
}

/// `bitbucket.request_changes`: `text` as a comment first, when given.
pub async fn request_changes(
    client: &Client,
    target: &Target,
    input: &Value,
) -> Result<Value, RpcError> {
    let base = target.base()?;
    let said = match text(input, "text", MAX_TEXT_BYTES)? {
        Some(_) => Some(comment(client, target, input).await?),
        None => None,
    };
    client
        .json("POST", format!("{base}/request-changes"), None)
        .await?;
    let mut out = json!({
        "pull_request": crate::intake::key(&target.repository, target.pull_request()?),
        "changes_requested": true,
    });
    if let Some(c) = said {
        out["comment_id"] = c["comment_id"].clone();
    }
    Ok(out)
}

/// What a call acts on, and the connection it acts as.
///
/// A Work with Bitbucket Events acts on its own pull request (or repository). A
/// Work of another package (a Jira issue's, fixed in a Bitbucket repository) has
/// none: it acts on the repository the input names (`repository`), which a
/// `bitbucket` entry of its scope must take, or on the scope's one repository when
/// its entries take only one. The connection is the binding's when that is a
/// `bitbucket` connection, else (a tracker's binding) that of the scope's entry
/// taking the repository.
async fn resolve(
    state: &crate::State,
    host: &sdk::Host,
    params: &OperationCallParams,
    input: &Value,
) -> Result<(Target, String), RpcError> {
    let authority = &params.authority;
    let target = match work_target(host, &authority.work_id).await? {
        Some(t) => t,
        None => scope_target(state, &authority.scope_id, input)?,
    };
    let ours = state
        .configured
        .connection(&authority.connection)
        .is_some_and(|c| c.connection_type == crate::NAME);
    let connection = if ours {
        authority.connection.clone()
    } else {
        state
            .registry()
            .entries
            .iter()
            .find(|e| e.scope_id == authority.scope_id && e.config.takes(&target.repository))
            .map(|e| e.connection.clone())
            .unwrap_or_else(|| authority.connection.clone())
    };
    Ok((target, connection))
}

/// The repository of a Work without Bitbucket Events: the input's `repository`, one
/// the scope's `bitbucket` entries take, else their one repository.
fn scope_target(state: &crate::State, scope_id: &str, input: &Value) -> Result<Target, RpcError> {
    let registry = state.registry();
    let mut repositories: Vec<&String> = registry
        .entries
        .iter()
        .filter(|e| e.scope_id == scope_id)
        .flat_map(|e| e.config.repositories.iter())
        .collect();
    repositories.sort();
    repositories.dedup();
    let named = input.get("repository").and_then(Value::as_str);
    let repository = match (named, repositories.as_slice()) {
        (Some(r), _) => repositories
            .iter()
            .find(|known| known.eq_ignore_ascii_case(r))
            .map(|known| known.to_string())
            .ok_or_else(|| {
                RpcError::new(
                    Code::Unauthorized,
                    format!("no bitbucket entry of this scope takes {r}"),
                )
            })?,
        (None, [one]) => one.to_string(),
        (None, []) => {
            return Err(invalid(
                "the Work has no Bitbucket pull request (it was not started by a Bitbucket webhook) and its scope has no bitbucket entry",
            ))
        }
        (None, _) => {
            return Err(invalid(format!(
                "the Work has no Bitbucket pull request and its scope's bitbucket entries take several repositories: name the repository ({})",
                repositories
                    .iter()
                    .map(|r| r.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            )))
        }
    };
    Ok(Target {
        repository,
        pull_request: None,
    })
}

/// The target of the Work's own Bitbucket Events; `None` when it has none.
async fn work_target(host: &sdk::Host, work_id: &str) -> Result<Option<Target>, RpcError> {
    if work_id.is_empty() {
        return Ok(None);
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
        if let Some(t) = target_of(&page.events) {
            return Ok(Some(t));
        }
        after = page.next_after(after);
    }
    Ok(None)
}

/// Serves `operation.call`. A refusal carries its message for the agent
/// (`data.agent_message`): the messages name the method, path and status, never a
/// credential.
pub async fn call(
    state: &crate::State,
    host: &sdk::Host,
    params: &OperationCallParams,
) -> Result<OperationCallResult, RpcError> {
    call_inner(state, host, params)
        .await
        .map_err(sdk::tracker::for_agent)
}

async fn call_inner(
    state: &crate::State,
    host: &sdk::Host,
    params: &OperationCallParams,
) -> Result<OperationCallResult, RpcError> {
    let input = sdk::tracker::operation_input(params, &ALL, "bitbucket")?;
    let op = params.operation.as_str();
    let authority = &params.authority;
    sdk::tracker::replayed(host, params, op != READ_PULL_REQUEST, async {
        let (target, connection) = resolve(state, host, params, &input).await?;
        let client = state.client(host, &authority.scope_id, &connection).await?;
        let output = match op {
            READ_PULL_REQUEST => read_pull_request(&client, &target).await?,
            COMMENT => comment(&client, &target, &input).await?,
            OPEN_PULL_REQUEST => {
                let (output, made) = open_pull_request_made(&client, &target, &input).await?;
                // Best effort: the pull request is open whether or not it is linked.
                if let Err(e) = crate::link::link(
                    state,
                    host,
                    &authority.scope_id,
                    &authority.work_id,
                    &target.repository,
                    &made,
                )
                .await
                {
                    tracing::warn!(repository = %target.repository, error = %e.message,
                        "the pull request could not be linked to its Work");
                }
                output
            }
            APPROVE => approve(&client, &target).await?,
            _ => request_changes(&client, &target, &input).await?,
        };
        Ok(output)
    })
    .await
}
