//! A pull request the agent opens is linked to its Work (issue 38, "The review loop"):
//! once `github.open_pull_request` has opened it, the package accepts a derived Event
//! `github.pull_request.opened` (`event.accept`, parent: the Work's newest `github.*`
//! Event) carrying the pull request's key and the parent's keys, on the source of the
//! scope's entry for the repository. Routed, it attaches to the Work through the
//! parent's key and binds the pull request's key to it, so a review, a review comment,
//! a comment or a check on that pull request reaches the same Work; `work show` lists
//! the key. Its delivery ID (`linked/<repo>#<n>`) makes a repeat add nothing.
//! Best effort: a failure is logged and the pull request stays open, unlinked.

use protocol::wire::Payload;
use protocol::{Code, RpcError};
use serde_json::{json, Value};

use crate::{Family, State};

/// The Event linking the pull request `pr` (the API's answer) to the Work whose
/// newest `github.*` Event is `parent`: (type, payload, keys).
pub fn linked_event(
    repository: &str,
    pr: &Value,
    parent_keys: &[String],
) -> Result<(String, Value, Vec<String>), String> {
    let number = pr["number"]
        .as_u64()
        .ok_or("the pull request has no number")?;
    let hook = json!({
        "action": "opened",
        "number": number,
        "pull_request": pr,
        "repository": {"full_name": repository},
        "sender": pr["user"],
    });
    let delivery = format!("linked/{}#{number}", repository.to_ascii_lowercase());
    let ev = crate::project::project(Family::PullRequest, &delivery, &hook)?;
    let keys = sdk::link::linked_keys(&crate::project::key(repository, number), parent_keys);
    Ok((
        ev.event_type,
        serde_json::to_value(&ev.payload).map_err(|e| e.to_string())?,
        keys,
    ))
}

/// Link the pull request `pr` of `repository` to the calling Work (module docs),
/// through [`sdk::link`].
pub async fn link(
    state: &State,
    host: &sdk::Host,
    scope_id: &str,
    work_id: &str,
    repository: &str,
    pr: &Value,
) -> Result<(), RpcError> {
    let parent =
        sdk::link::newest_work_event(host, work_id, |e| Family::of_type(&e.event_type).is_some())
            .await?
            .ok_or_else(|| {
                RpcError::new(
                    Code::NotFound,
                    "the Work has no GitHub Event to link the pull request under",
                )
            })?;
    let source = state
        .registry()
        .entries
        .iter()
        .find(|e| e.scope_id == scope_id && e.repository.eq_ignore_ascii_case(repository))
        .map(|e| e.source.clone())
        .ok_or_else(|| {
            RpcError::new(
                Code::NotFound,
                format!("no github entry of scope {scope_id} receives {repository}"),
            )
        })?;
    let (event_type, payload, keys) =
        linked_event(repository, pr, &parent.keys).map_err(|e| RpcError::new(Code::Invalid, e))?;
    let payload: Payload = serde_json::from_value(payload)
        .map_err(|e| RpcError::new(Code::Internal, e.to_string()))?;
    let number = pr["number"].as_u64().unwrap_or_default();
    sdk::link::accept(
        host,
        &parent,
        sdk::link::Linked {
            source,
            delivery_id: format!("linked/{}#{number}", repository.to_ascii_lowercase()),
            event_type,
            payload,
            keys,
        },
    )
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_linked_event_carries_the_pull_requests_key_then_the_works() {
        let pr = json!({"number": 12, "title": "Fix", "state": "open", "html_url": "https://github.com/o/r/pull/12",
                        "user": {"login": "bot"}, "body": null, "labels": [], "draft": false, "merged": false,
                        "head": {"ref": "oc/w-1", "sha": "abc"}, "base": {"ref": "main"},
                        "created_at": "2026-12-03T10:00:00Z", "updated_at": "2026-12-03T10:00:00Z"});
        let (t, payload, keys) = linked_event("O/R", &pr, &["github:o/r#1".to_string()]).unwrap();
        assert_eq!(t, "github.pull_request.opened");
        assert_eq!(keys, ["github:o/r#12", "github:o/r#1"]);
        assert_eq!(payload["schema"], "github.pull_request.v1");
        assert_eq!(payload["data"]["head_ref"], "oc/w-1");
        assert_eq!(payload["data"]["number"], 12);
    }
}
