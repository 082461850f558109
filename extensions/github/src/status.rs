//! The status comment (`work.annotate`, manifest `provides.annotations`): one comment
//! on the issue (or pull request) a Work came from, posted when the host first
//! annotates the Work and edited in place as it moves: queued, running (attempt N),
//! waiting for what its Wait says (with the Wait's progress line), done, failed with
//! why, cancelled; with a link to each pull request the Work's display lists.
//!
//! - The target: the Work's oldest `github.*` Event's repository and number, acted on
//!   as the connection of the scope's entry for that repository.
//! - KV `status/<work>` keeps `{repository, number, comment_id, version, body}`; a
//!   first post commits it with an `absent` check. An annotation whose `version` is
//!   not newer than the kept one, or whose body is the same, changes nothing.
//! - Annotations are handled one at a time in this process, so two never post two
//!   comments for one Work.
//! - A Work with no GitHub Event (a schedule's) has no status comment. A failure is
//!   logged; the next annotation tries again.

use protocol::wire::{
    KvCheck, KvCommitParams, KvGetParams, KvPut, StateWorkEventsParams, WorkAnnotateParams,
    WorkAnnotateResult,
};
use protocol::{Code, RpcError};
use serde::{Deserialize, Serialize};
use serde_json::json;

use crate::{Family, State};

/// The first line of every status comment (how a person, and the package, knows it).
pub const HEADER: &str = "**Open Conduit**";
/// The longest error quoted in a status comment.
const MAX_ERROR_BYTES: usize = 500;

/// What KV keeps about a Work's status comment.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Kept {
    /// `owner/name`.
    pub repository: String,
    /// The issue or pull request it is on.
    pub number: u64,
    /// The comment's ID (GitHub's is an int64).
    pub comment_id: i64,
    /// The Work version it shows.
    pub version: i64,
    /// Its body.
    pub body: String,
}

fn kv_key(work_id: &str) -> String {
    format!("status/{work_id}")
}

/// What the comment says about the Work, from an annotation.
pub fn body(p: &WorkAnnotateParams) -> String {
    let w = &p.work;
    let attempt = p.attempt.as_ref();
    let state = match w.state.as_str() {
        "pending" | "ready" | "woken" => "queued".to_string(),
        "running" => match attempt {
            Some(a) if a.attempt > 1 => format!("running (attempt {})", a.attempt),
            _ => "running".to_string(),
        },
        "waiting" => {
            let mut s = if p.waiting_for.is_empty() {
                "waiting".to_string()
            } else {
                format!("waiting for {}", p.waiting_for)
            };
            if !p.progress.is_empty() {
                s.push_str(&format!(" ({})", p.progress));
            }
            s
        }
        "completed" => "done".to_string(),
        "idle" => "its turn is done; it picks up again on the next event".to_string(),
        "failed" => {
            let why = attempt.map(|a| a.error.as_str()).unwrap_or_default();
            if why.is_empty() {
                "failed".to_string()
            } else {
                format!(
                    "failed: {}",
                    crate::route::one_line(
                        &protocol::toolbelt::agent_message(why),
                        MAX_ERROR_BYTES
                    )
                )
            }
        }
        "cancelled" => "cancelled".to_string(),
        other => other.to_string(),
    };
    let mut out = format!("{HEADER} · Work `{}` · {state}", w.id);
    let prs: Vec<String> = w
        .display
        .as_ref()
        .map(|d| {
            d.links
                .iter()
                .filter(|l| l.label.starts_with("PR #"))
                .map(|l| format!("[{}]({})", l.label, l.url))
                .collect()
        })
        .unwrap_or_default();
    if !prs.is_empty() {
        out.push_str(&format!("\n\nPull request: {}", prs.join(", ")));
    }
    if let Some(a) = attempt.filter(|a| !a.summary.is_empty() && w.state != "failed") {
        out.push_str(&format!(
            "\n\n> {}",
            crate::route::one_line(&a.summary, MAX_ERROR_BYTES)
        ));
    }
    out
}

/// The Work's oldest GitHub Event's repository and number.
async fn origin(host: &sdk::Host, work_id: &str) -> Result<Option<(String, u64)>, RpcError> {
    let page = host
        .call_typed(&StateWorkEventsParams {
            id: work_id.to_string(),
            after: 0,
            limit: 100,
        })
        .await
        .map_err(|e| RpcError::new(Code::Unavailable, format!("reading the Work's Events: {e}")))?;
    Ok(page.events.iter().find_map(|e| {
        Family::of_type(&e.event_type)?;
        let d = &e.payload.data;
        let repo = d["repository"].as_str()?.to_string();
        let n = d["number"]
            .as_u64()
            .or_else(|| d["pull_requests"].get(0).and_then(|v| v.as_u64()))?;
        Some((repo, n))
    }))
}

/// Serves `work.annotate`.
pub async fn annotate(
    state: &State,
    host: &sdk::Host,
    p: &WorkAnnotateParams,
) -> Result<WorkAnnotateResult, RpcError> {
    let _one_at_a_time = state.status_lock.lock().await;
    let work_id = &p.work.id;
    let got = host
        .call_typed(&KvGetParams {
            namespace: String::new(),
            key: kv_key(work_id),
        })
        .await
        .map_err(|e| RpcError::new(Code::Unavailable, format!("kv.get: {e}")))?;
    let kept: Option<Kept> = got.value.and_then(|v| serde_json::from_value(v).ok());
    if kept.as_ref().is_some_and(|k| k.version >= p.version) {
        return Ok(WorkAnnotateResult {});
    }
    let text = body(p);
    if kept.as_ref().is_some_and(|k| k.body == text) {
        return Ok(WorkAnnotateResult {});
    }
    let (repository, number) = match &kept {
        Some(k) => (k.repository.clone(), k.number),
        None => match origin(host, work_id).await? {
            Some(o) => o,
            None => return Ok(WorkAnnotateResult {}),
        },
    };
    let Some(entry) = state
        .registry()
        .entries
        .iter()
        .find(|e| e.scope_id == p.work.scope_id && e.repository.eq_ignore_ascii_case(&repository))
        .cloned()
    else {
        return Ok(WorkAnnotateResult {});
    };
    let client = state
        .client(host, &p.work.scope_id, &entry.connection)
        .await?;
    let comment_id = match &kept {
        Some(k) => {
            client
                .request(
                    "PATCH",
                    &format!("/repos/{repository}/issues/comments/{}", k.comment_id),
                    Some(json!({ "body": text })),
                )
                .await
                .map_err(|e| e.to_rpc())?;
            k.comment_id
        }
        None => {
            let c = client
                .request(
                    "POST",
                    &format!("/repos/{repository}/issues/{number}/comments"),
                    Some(json!({ "body": text })),
                )
                .await
                .map_err(|e| e.to_rpc())?;
            c["id"].as_i64().ok_or_else(|| {
                RpcError::new(
                    Code::Unavailable,
                    "GitHub answered the comment without an id",
                )
            })?
        }
    };
    let record = Kept {
        repository,
        number,
        comment_id,
        version: p.version,
        body: text,
    };
    let checks = match &got.version {
        Some(v) if kept.is_some() => vec![KvCheck::version(kv_key(work_id), v.clone())],
        _ => vec![KvCheck::absent(kv_key(work_id))],
    };
    host.call_typed(&KvCommitParams {
        checks,
        puts: vec![KvPut {
            namespace: String::new(),
            key: kv_key(work_id),
            value: serde_json::to_value(&record)
                .map_err(|e| RpcError::new(Code::Internal, e.to_string()))?,
        }],
        ..Default::default()
    })
    .await
    .map_err(|e| {
        RpcError::new(
            Code::Unavailable,
            format!("keeping the status comment: {e}"),
        )
    })?;
    tracing::info!(work = %work_id, comment = comment_id, "status comment updated");
    Ok(WorkAnnotateResult {})
}

#[cfg(test)]
mod tests {
    use super::*;
    use protocol::wire::{AnnotatedAttempt, DisplayLink, Work, WorkDisplay};

    fn params(state: &str) -> WorkAnnotateParams {
        WorkAnnotateParams {
            work: Work {
                id: "w-1".into(),
                state: state.into(),
                display: Some(WorkDisplay {
                    title: "Fix".into(),
                    links: vec![
                        DisplayLink {
                            label: "Issue #1".into(),
                            url: "https://github.com/o/r/issues/1".into(),
                        },
                        DisplayLink {
                            label: "PR #12".into(),
                            url: "https://github.com/o/r/pull/12".into(),
                        },
                    ],
                    ..Default::default()
                }),
                ..Default::default()
            },
            version: 3,
            ..Default::default()
        }
    }

    #[test]
    fn each_state_reads_as_a_person_expects() {
        assert!(body(&params("pending")).contains("· queued"));
        assert!(body(&params("running")).contains("· running"));
        let mut w = params("waiting");
        w.waiting_for = "checks on PR #12".into();
        w.progress = "1 of 2 checks finished".into();
        assert!(body(&w).contains("waiting for checks on PR #12 (1 of 2 checks finished)"));
        assert!(body(&params("completed")).contains("· done"));
        let mut f = params("failed");
        f.attempt = Some(AnnotatedAttempt {
            execution_id: "x".into(),
            attempt: 2,
            state: "failed".into(),
            summary: String::new(),
            error: "git push failed: token ghp_abcdefghijklmnop1234 refused".into(),
        });
        let text = body(&f);
        assert!(text.contains("failed: git push failed"), "{text}");
        assert!(!text.contains("ghp_abcdefghijklmnop1234"), "{text}");
        assert!(
            text.contains("[PR #12](https://github.com/o/r/pull/12)"),
            "{text}"
        );
        assert!(!text.contains("Issue #1]"), "{text}");
    }
}
