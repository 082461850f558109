//! The operations' names and what a call acts on: the Work's own repository and
//! number (from its Events) and the target an input names. Shared by the operations
//! ([`crate::ops`]) and the cross-scope check ([`crate::authority`]).

use protocol::wire::StateWorkEventsParams;
use protocol::{Code, RpcError};
use serde_json::Value;

/// `github.read_issue`.
pub const READ_ISSUE: &str = "github.read_issue";
/// `github.comment`.
pub const COMMENT: &str = "github.comment";
/// `github.update_comment`.
pub const UPDATE_COMMENT: &str = "github.update_comment";
/// `github.add_labels`.
pub const ADD_LABELS: &str = "github.add_labels";
/// `github.open_pull_request`.
pub const OPEN_PULL_REQUEST: &str = "github.open_pull_request";

/// Every operation, in manifest order.
pub const ALL: [&str; 5] = [
    READ_ISSUE,
    COMMENT,
    UPDATE_COMMENT,
    ADD_LABELS,
    OPEN_PULL_REQUEST,
];

/// The most Work Events read to find the Work's repository and number.
pub const MAX_WORK_EVENT_PAGES: usize = 10;

/// The Work's own repository and issue or PR number, from its Events.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WorkRef {
    /// `owner/name`, as GitHub sent it.
    pub repository: Option<String>,
    /// The issue or PR number.
    pub number: Option<u64>,
}

/// The newest `github.*` Event's repository and number among `events`.
pub fn work_ref_of(events: &[protocol::wire::Event]) -> WorkRef {
    let mut found = WorkRef::default();
    for e in events {
        if crate::Family::of_type(&e.event_type).is_none() {
            continue;
        }
        let data = &e.payload.data;
        let Some(repo) = data["repository"].as_str() else {
            continue;
        };
        found.repository = Some(repo.to_string());
        let number = data["number"]
            .as_u64()
            .or_else(|| data["pull_requests"].get(0).and_then(Value::as_u64));
        if number.is_some() {
            found.number = number;
        }
    }
    found
}

fn invalid(m: impl Into<String>) -> RpcError {
    RpcError::new(Code::Invalid, m)
}

/// Reads the Work's Events through the host.
pub async fn work_ref(host: &sdk::Host, work_id: &str) -> Result<WorkRef, RpcError> {
    if work_id.is_empty() {
        return Ok(WorkRef::default());
    }
    let mut events = Vec::new();
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
        after = page.next_after(after);
        events.extend(page.events);
    }
    Ok(work_ref_of(&events))
}

/// What an operation acts on: the repository and, for issue operations, the
/// number.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    /// `owner/name`.
    pub repository: String,
    /// The issue or PR number.
    pub number: Option<u64>,
}

/// Decides the target: the input's `repository`/`number`, defaulting to the
/// Work's. `entry_repos` are the repositories of the scope's entries, which a
/// Work with no GitHub Events may name (and gets, when there is one and it names
/// none).
pub fn target(input: &Value, work: &WorkRef, entry_repos: &[String]) -> Result<Target, RpcError> {
    let named = match input.get("repository") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => Some(s.trim().to_string()),
        Some(_) => return Err(invalid("repository must be a string (owner/name)")),
    };
    let repository = match (&work.repository, named) {
        (Some(own), Some(named)) if !own.eq_ignore_ascii_case(&named) => {
            return Err(RpcError::new(
                Code::Unauthorized,
                format!("the Work's repository is {own}, not {named}: an operation acts on the Work's own repository"),
            ))
        }
        (Some(own), _) => own.clone(),
        (None, Some(named)) => {
            if !entry_repos.iter().any(|r| r.eq_ignore_ascii_case(&named)) {
                return Err(RpcError::new(
                    Code::Unauthorized,
                    format!("{named} is not a repository of this scope's github entries"),
                ));
            }
            named
        }
        // A Work from elsewhere (a Linear or Jira issue) in a scope whose github
        // entries receive one repository: that one.
        (None, None) if entry_repos.len() == 1 => entry_repos[0].clone(),
        (None, None) => {
            return Err(invalid(
                "the Work has no GitHub Events: name the repository (owner/name)",
            ))
        }
    };
    let (owner, name) = repository
        .split_once('/')
        .filter(|(o, n)| !o.is_empty() && !n.is_empty() && !n.contains('/'))
        .ok_or_else(|| invalid(format!("`{repository}` is not owner/name")))?;
    let safe = |p: &str| {
        p.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
            && p != "."
            && p != ".."
    };
    if !safe(owner) || !safe(name) {
        return Err(invalid(format!("`{repository}` is not owner/name")));
    }
    let number = match input.get("number") {
        None | Some(Value::Null) => work.number,
        Some(v) => Some(
            v.as_u64()
                .filter(|n| *n > 0)
                .ok_or_else(|| invalid("number must be a positive integer"))?,
        ),
    };
    Ok(Target { repository, number })
}

/// The connection an operation on `repository` in `scope_id` acts as: the binding's
/// (`binding_connection`) when it is a github connection this package knows, else
/// (a binding whose `connection` is another package's, as a Linear or Jira binding's
/// is) the connection of the scope's github entry that receives `repository`. None
/// when neither is.
pub fn connection_for(
    state: &crate::State,
    scope_id: &str,
    binding_connection: &str,
    repository: &str,
) -> Option<String> {
    let known = crate::lock(&state.connections)
        .get(binding_connection)
        .is_some_and(|c| c.connection_type == crate::NAME);
    if known {
        return Some(binding_connection.to_string());
    }
    state
        .registry()
        .entries
        .iter()
        .find(|e| e.scope_id == scope_id && e.repository.eq_ignore_ascii_case(repository))
        .map(|e| e.connection.clone())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use serde_json::json;

    #[test]
    fn a_work_without_github_events_gets_the_scopes_one_repository() {
        let none = WorkRef::default();
        let one = vec!["Codertocat/Hello-World".to_string()];
        let t = target(&json!({}), &none, &one).unwrap();
        assert_eq!(t.repository, "Codertocat/Hello-World");
        assert_eq!(t.number, None);
        // Two repositories: it must name one, and only one of them.
        let two = vec!["a/one".to_string(), "b/two".to_string()];
        let e = target(&json!({}), &none, &two).unwrap_err();
        assert!(e.message.contains("name the repository"), "{}", e.message);
        assert_eq!(
            target(&json!({"repository": "b/two"}), &none, &two)
                .unwrap()
                .repository,
            "b/two"
        );
        let e = target(&json!({"repository": "c/three"}), &none, &one).unwrap_err();
        assert!(e.is(Code::Unauthorized), "{e:?}");
        // A Work with GitHub Events keeps its own.
        let own = WorkRef {
            repository: Some("a/one".into()),
            number: Some(3),
        };
        assert_eq!(target(&json!({}), &own, &two).unwrap().repository, "a/one");
    }
}
