//! The projector (`task.run` of [`TASK`]): each Linear issue that is a Work shows
//! the Work's state as one comment on the issue, posted once (`commentCreate`) and
//! then edited in place (`commentUpdate`) when the state changes.
//!
//! - Which Works: each pass reads one page ([`PAGE`]) of each configured scope's
//!   Works (a cursor kept in memory, so every Work is seen within a few passes), and
//!   projects those keyed by a Linear issue (`linear:ENG-123`), at most
//!   [`MAX_WORKS_A_PASS`] a pass.
//! - KV `status/<work>` keeps the comment (`issue`, `comment_id`) and the state
//!   shown: a pass changes Linear only when the state changed. A first comment
//!   claims the key (`absent`) before posting, so one comment is posted per Work.
//! - The comment is the agent user's (the connection's key), so its delivery back is
//!   ignored ([`crate::project`]) and wakes nothing.

use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};

use protocol::wire::{
    KvCheck, KvCommitParams, KvGetParams, KvPut, StateWorksParams, TaskRunResult, Work,
};
use protocol::{CallError, Code, RpcError};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use crate::{api, ops, project, State};

/// The projector task.
pub const TASK: &str = "linear.status";
/// The first words of every status comment.
pub const HEADER: &str = "**Open Conduit**";
/// The most Works one pass projects.
pub const MAX_WORKS_A_PASS: usize = 100;
/// The Works read of a scope a pass (one page).
pub const PAGE: u32 = 100;

/// What a status comment keeps.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Kept {
    /// The connection it was posted with.
    pub connection: String,
    /// The issue's identifier.
    pub issue: String,
    /// The comment's ID (empty until posted).
    #[serde(default)]
    pub comment_id: String,
    /// The state it shows.
    #[serde(default)]
    pub state: String,
}

/// The state in words.
pub fn words(state: &str) -> &str {
    match state {
        "pending" | "woken" => "queued",
        "running" => "working on it",
        "waiting" => "waiting (a comment on this issue wakes it)",
        "idle" => "its turn is done; a comment on this issue starts the next",
        "completed" => "done",
        "failed" => "failed",
        "cancelled" => "cancelled",
        other => other,
    }
}

/// The status comment's markdown for `work`.
pub fn body(work: &Work) -> String {
    format!(
        "{HEADER} · Work `{}` · **{}**: {}",
        work.id,
        work.state,
        words(&work.state)
    )
}

/// The KV key of a Work's status comment.
pub fn status_key(work_id: &str) -> String {
    format!("status/{work_id}")
}

fn unavailable(what: &str, e: CallError) -> RpcError {
    RpcError::new(Code::Unavailable, format!("{what}: {e}"))
}

fn cursors() -> &'static Mutex<HashMap<String, String>> {
    static CURSORS: OnceLock<Mutex<HashMap<String, String>>> = OnceLock::new();
    CURSORS.get_or_init(|| Mutex::new(HashMap::new()))
}

fn pass_lock() -> &'static tokio::sync::Mutex<()> {
    static LOCK: OnceLock<tokio::sync::Mutex<()>> = OnceLock::new();
    LOCK.get_or_init(|| tokio::sync::Mutex::new(()))
}

/// What a Work's projection changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// The status comment was posted.
    Posted,
    /// It was edited.
    Edited,
    /// Nothing changed.
    Same,
}

/// Serves `task.run` for [`TASK`]: one pass (see the module doc).
pub async fn pass(state: &State, host: &sdk::Host) -> Result<TaskRunResult, RpcError> {
    let _one = pass_lock().lock().await;
    let registry = state.registry();
    let mut scopes: Vec<String> = registry
        .entries
        .iter()
        .map(|e| e.scope_id.clone())
        .collect();
    scopes.sort();
    scopes.dedup();
    let (mut seen, mut posted, mut edited, mut failed) = (0usize, 0, 0, 0);
    for scope in &scopes {
        let after = cursors()
            .lock()
            .map(|c| c.get(scope).cloned().unwrap_or_default())
            .unwrap_or_default();
        let page = host
            .call_typed(&StateWorksParams {
                scope_id: scope.clone(),
                after,
                limit: PAGE,
                ..Default::default()
            })
            .await
            .map_err(|e| unavailable("state.works", e))?;
        if let Ok(mut c) = cursors().lock() {
            c.insert(scope.clone(), page.next.clone());
        }
        for work in &page.works {
            if seen >= MAX_WORKS_A_PASS {
                break;
            }
            if !work.keys.iter().any(|k| project::parse_key(k).is_some()) {
                continue;
            }
            seen += 1;
            match project_work(state, host, work).await {
                Ok(Outcome::Posted) => posted += 1,
                Ok(Outcome::Edited) => edited += 1,
                Ok(Outcome::Same) => {}
                Err(e) => {
                    failed += 1;
                    eprintln!("linear: status of Work {}: {}", work.id, e.message);
                }
            }
        }
    }
    Ok(TaskRunResult {
        detail: format!("{seen} Works: {posted} posted, {edited} edited, {failed} failed"),
    })
}

/// Shows `work` on its issue (see the module doc).
pub async fn project_work(
    state: &State,
    host: &sdk::Host,
    work: &Work,
) -> Result<Outcome, RpcError> {
    let Some(identifier) = work.keys.iter().find_map(|k| project::parse_key(k)) else {
        return Ok(Outcome::Same);
    };
    let key = status_key(&work.id);
    let got = host
        .call_typed(&KvGetParams {
            namespace: String::new(),
            key: key.clone(),
        })
        .await
        .map_err(|e| unavailable("kv.get", e))?;
    let kept: Option<Kept> = got
        .value
        .clone()
        .and_then(|v| serde_json::from_value(v).ok());
    if let Some(k) = &kept {
        if !k.comment_id.is_empty() && k.state == work.state {
            return Ok(Outcome::Same);
        }
    }
    let connection = match &kept {
        Some(k) => k.connection.clone(),
        None => match state
            .registry()
            .entries
            .iter()
            .find(|e| e.scope_id == work.scope_id)
        {
            Some(e) => e.connection.clone(),
            None => return Ok(Outcome::Same),
        },
    };
    let client = state.client(host, &work.scope_id, &connection).await?;
    let mut record = kept.clone().unwrap_or_else(|| Kept {
        connection,
        issue: identifier.to_string(),
        ..Kept::default()
    });
    let version = got.version.clone().filter(|_| kept.is_some());
    if kept.is_none() {
        // Claim the Work's status comment before posting it.
        host.call_typed(&KvCommitParams {
            checks: vec![KvCheck::absent(key.clone())],
            puts: vec![KvPut {
                namespace: String::new(),
                key: key.clone(),
                value: serde_json::to_value(&record).unwrap_or(Value::Null),
            }],
            ..Default::default()
        })
        .await
        .map_err(|e| unavailable("claiming the status comment", e))?;
    }
    let text = body(work);
    let outcome = if record.comment_id.is_empty() {
        let issue = ops::read_issue(&client, identifier, 1).await?;
        let data = client
            .send(
                "status comment",
                api::COMMENT_MUTATION,
                json!({"input": {"issueId": issue["id"], "body": text}}),
            )
            .await?;
        record.comment_id = data
            .pointer("/commentCreate/comment/id")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string();
        if record.comment_id.is_empty() {
            return Err(RpcError::new(
                Code::Unavailable,
                format!("Linear did not create the status comment on {identifier}"),
            ));
        }
        Outcome::Posted
    } else {
        client
            .send(
                "status comment update",
                api::COMMENT_UPDATE_MUTATION,
                json!({"id": record.comment_id, "input": {"body": text}}),
            )
            .await?;
        Outcome::Edited
    };
    record.state = work.state.clone();
    // The claim's version is the one just written when this pass claimed it.
    let checks = match version {
        Some(v) => vec![KvCheck::version(key.clone(), v)],
        None => Vec::new(),
    };
    host.call_typed(&KvCommitParams {
        checks,
        puts: vec![KvPut {
            namespace: String::new(),
            key,
            value: serde_json::to_value(&record).unwrap_or(Value::Null),
        }],
        ..Default::default()
    })
    .await
    .map_err(|e| unavailable("keeping the status comment", e))?;
    Ok(outcome)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_body_names_the_work_and_its_state() {
        let work = Work {
            id: "w-1".into(),
            state: "waiting".into(),
            ..Default::default()
        };
        let b = body(&work);
        assert!(b.starts_with(HEADER), "{b}");
        assert!(b.contains("`w-1`") && b.contains("**waiting**"), "{b}");
        assert_eq!(status_key("w-1"), "status/w-1");
    }
}
