//! A pull request the agent opens is linked to its Work: once
//! `bitbucket.open_pull_request` has opened it, the package accepts a derived Event
//! `bitbucket.pullrequest.created` (`event.accept`, parent: the Work's newest Event
//! of the package), projected from the API's answer as the webhook would be
//! ([`crate::intake::project`], with `linked: true`), whose keys are the new pull
//! request's key then the parent's keys, on the source of the scope's entry that
//! takes the repository. Routed, it joins the Work through the parent's keys and
//! binds the pull request's key to it, so a comment, a change request, a merge or a
//! build of that pull request reaches the same Work. Its delivery ID
//! (`linked/<workspace>/<repo>#<id>`) makes a repeat add nothing. Best effort: a
//! failure is logged and the pull request stays open, unlinked. The generic part
//! (finding the parent, the keys, `event.accept`) is [`sdk::link`]'s, shared with
//! GitHub.

use protocol::wire::IngressEvent;
use protocol::{Code, RpcError};
use serde_json::{json, Value};

use crate::config::ParsedConfig;
use crate::{intake, State, FAMILIES};

/// The delivery ID of the Event linking pull request `id` of `repository`.
pub fn delivery_id(repository: &str, id: u64) -> String {
    format!("linked/{}#{id}", repository.to_ascii_lowercase())
}

/// The Event linking the pull request `made` (the API's answer to its creation) of
/// `repository`, for an entry's `config`, to a Work whose parent Event has
/// `parent_keys`.
pub fn linked_event(
    config: &ParsedConfig,
    repository: &str,
    made: &Value,
    parent_keys: &[String],
) -> Result<IngressEvent, String> {
    let hook = json!({
        "pullrequest": made,
        "repository": {"full_name": repository},
        "actor": made.get("author").cloned().unwrap_or(Value::Null),
    });
    let mut ev = intake::project(config, "pullrequest:created", &hook)?
        .ok_or_else(|| format!("no entry's repositories take {repository}"))?;
    ev.payload.data["linked"] = json!(true);
    let own = ev
        .keys
        .first()
        .cloned()
        .ok_or("the pull request has no key")?;
    ev.keys = sdk::link::linked_keys(&own, parent_keys);
    Ok(ev)
}

/// Links the pull request `made` of `repository` to Work `work_id` (module docs).
pub async fn link(
    state: &State,
    host: &sdk::Host,
    scope_id: &str,
    work_id: &str,
    repository: &str,
    made: &Value,
) -> Result<(), RpcError> {
    let ours = |e: &protocol::wire::Event| {
        FAMILIES
            .iter()
            .any(|f| e.event_type.starts_with(&format!("{f}.")))
    };
    // A Work of another package (a Jira issue's) links under its newest Event.
    let parent = match sdk::link::newest_work_event(host, work_id, ours).await? {
        Some(p) => Some(p),
        None => sdk::link::newest_work_event(host, work_id, |_| true).await?,
    };
    let parent = parent.ok_or_else(|| {
        RpcError::new(
            Code::NotFound,
            "the Work has no Event to link the pull request under",
        )
    })?;
    let registry = state.registry();
    let entry = registry
        .entries
        .iter()
        .find(|e| e.scope_id == scope_id && e.config.takes(repository))
        .ok_or_else(|| {
            RpcError::new(
                Code::NotFound,
                format!("no bitbucket entry of scope {scope_id} takes {repository}"),
            )
        })?;
    let ev = linked_event(&entry.config, repository, made, &parent.keys)
        .map_err(|e| RpcError::new(Code::Invalid, e))?;
    let id = made.get("id").and_then(Value::as_u64).unwrap_or_default();
    sdk::link::accept(
        host,
        &parent,
        sdk::link::Linked {
            source: entry.source.clone(),
            delivery_id: delivery_id(repository, id),
            event_type: ev.event_type,
            payload: ev.payload,
            keys: ev.keys,
        },
    )
    .await
}
