//! The projector (`task.run` of [`TASK`]): each Jira issue that is a Work shows the
//! Work's state as one comment on the issue, posted once and then edited in place
//! (`PUT /rest/api/3/issue/{key}/comment/{id}`).
//!
//! - Which Works: each pass reads one page of each configured scope's Works (at
//!   most [`PAGE`], the newest first as the state answers them) whose keys hold a
//!   `jira:<issue key>` of one of the scope's entries' projects; at most
//!   [`MAX_WORKS_A_PASS`] a pass.
//! - KV `status/<work id>` keeps the comment's ID and the state shown: a pass
//!   changes Jira only when the state changed. The first post claims the key
//!   (`absent`) before posting, so one comment is posted per Work; a claim whose
//!   post failed is retried on the next pass.

use protocol::wire::{
    KvCheck, KvCommitParams, KvGetParams, KvPut, StateWorksParams, TaskRunResult, Work,
};
use protocol::{Code, RpcError};
use serde_json::{json, Value};

use crate::config::EntryConfig;
use crate::intake;

/// The projector task.
pub const TASK: &str = "jira.status";
/// The first words of every status comment.
pub const HEADER: &str = "Open Conduit";
/// The most Works one pass shows.
pub const MAX_WORKS_A_PASS: usize = 100;
/// The Works read of a scope per pass.
pub const PAGE: u32 = 200;

fn unavailable(what: &str, e: impl std::fmt::Display) -> RpcError {
    RpcError::new(Code::Unavailable, format!("{what}: {e}"))
}

/// The comment's markdown for a Work in `state`.
pub fn view(work: &Work) -> String {
    format!("{HEADER} · Work {} · {}", work.id, work.state)
}

/// The KV key of a Work's status comment.
pub fn kv_key(work_id: &str) -> String {
    format!("status/{work_id}")
}

/// The entry of `entries` (in `scope`) whose projects hold `issue_key`.
fn entry_for<'a>(
    entries: &'a [EntryConfig],
    scope: &str,
    issue_key: &str,
) -> Option<&'a EntryConfig> {
    let project = issue_key.rsplit_once('-').map(|(p, _)| p)?;
    entries
        .iter()
        .find(|e| e.scope_id == scope && e.config.projects.iter().any(|p| p == project))
}

/// Passes run one at a time in the process.
fn pass_lock() -> &'static tokio::sync::Mutex<()> {
    static LOCK: std::sync::OnceLock<tokio::sync::Mutex<()>> = std::sync::OnceLock::new();
    LOCK.get_or_init(|| tokio::sync::Mutex::new(()))
}

/// One pass.
pub async fn pass(state: &crate::State, host: &sdk::Host) -> Result<TaskRunResult, RpcError> {
    let _one = pass_lock().lock().await;
    let registry = state.registry();
    let mut scopes: Vec<String> = registry
        .entries
        .iter()
        .map(|e| e.scope_id.clone())
        .collect();
    scopes.sort();
    scopes.dedup();
    let (mut shown, mut failed) = (0usize, 0usize);
    let mut seen = 0usize;
    for scope in &scopes {
        let page = host
            .call_typed(&StateWorksParams {
                scope_id: scope.clone(),
                limit: PAGE,
                ..Default::default()
            })
            .await
            .map_err(|e| unavailable("state.works", e))?;
        for work in &page.works {
            if seen >= MAX_WORKS_A_PASS {
                break;
            }
            let Some(issue) = work.keys.iter().find_map(|k| intake::parse_key(k)) else {
                continue;
            };
            let Some(entry) = entry_for(&registry.entries, scope, issue) else {
                continue;
            };
            seen += 1;
            match show(state, host, entry, issue, work).await {
                Ok(true) => shown += 1,
                Ok(false) => {}
                Err(e) => {
                    failed += 1;
                    tracing::warn!(work = %work.id, issue, error = %e.message, "showing the Work's state failed");
                }
            }
        }
    }
    Ok(TaskRunResult {
        detail: format!("{seen} Works looked at, {shown} shown, {failed} failed"),
    })
}

/// Shows `work`'s state on `issue` when it changed; true when Jira was changed.
async fn show(
    state: &crate::State,
    host: &sdk::Host,
    entry: &EntryConfig,
    issue: &str,
    work: &Work,
) -> Result<bool, RpcError> {
    let key = kv_key(&work.id);
    let kept = host
        .call_typed(&KvGetParams {
            namespace: String::new(),
            key: key.clone(),
        })
        .await
        .map_err(|e| unavailable("kv.get", e))?
        .value;
    let comment_id = kept
        .as_ref()
        .and_then(|v| v.get("comment_id"))
        .and_then(Value::as_str)
        .filter(|c| c.len() <= 32 && c.bytes().all(|b| b.is_ascii_digit()))
        .unwrap_or_default()
        .to_string();
    if kept
        .as_ref()
        .and_then(|v| v.get("state"))
        .and_then(Value::as_str)
        == Some(&work.state)
        && !comment_id.is_empty()
    {
        return Ok(false);
    }
    let client = state
        .client(host, &entry.scope_id, &entry.connection)
        .await?;
    let body = json!({"body": crate::adf::from_markdown(&view(work))});
    let comment_id = if comment_id.is_empty() {
        if kept.is_none() {
            // Claim the key first: one comment per Work, even with passes racing.
            host.call_typed(&KvCommitParams {
                checks: vec![KvCheck::absent(key.clone())],
                puts: vec![KvPut {
                    namespace: String::new(),
                    key: key.clone(),
                    value: json!({"issue": issue, "state": "", "comment_id": ""}),
                }],
                ..Default::default()
            })
            .await
            .map_err(|e| unavailable("kv.commit", e))?;
        }
        let made = client
            .call(
                "POST",
                format!("/rest/api/3/issue/{issue}/comment"),
                Some(body),
            )
            .await?;
        made.get("id")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string()
    } else {
        client
            .call(
                "PUT",
                format!("/rest/api/3/issue/{issue}/comment/{comment_id}"),
                Some(body),
            )
            .await?;
        comment_id
    };
    host.call_typed(&KvCommitParams {
        puts: vec![KvPut {
            namespace: String::new(),
            key,
            value: json!({"issue": issue, "state": work.state, "comment_id": comment_id}),
        }],
        ..Default::default()
    })
    .await
    .map_err(|e| unavailable("kv.commit", e))?;
    Ok(true)
}
