//! Another repository (spec, "Cross-scope authority"; `scope.authorize`): an operation
//! whose input names a repository other than the Work's own acts on it only when a
//! `github` entry of another scope receives that repository and the configuration
//! lets the Work's scope read it (`github.read_issue`: `authorization.read_scopes` or
//! `file_scopes`) or file in it (the operations that change GitHub:
//! `authorization.file_scopes`). The host answers (`scope.authorize`); the call then
//! acts as that entry's connection, on the number the input names. Otherwise it is
//! refused `unauthorized`, saying why and which field would allow it.

use protocol::wire::{ScopeAuthorizeParams, ScopeAuthorizeResult};
use protocol::{Code, RpcError};
use serde_json::Value;

use crate::target::{Target, WorkRef, OPEN_PULL_REQUEST, READ_ISSUE};
use crate::State;

/// Where a call on another repository acts: the target, the scope and the connection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Foreign {
    /// The repository and number.
    pub target: Target,
    /// The scope whose entry receives the repository.
    pub scope_id: String,
    /// That entry's connection.
    pub connection: String,
}

fn refused(message: String) -> RpcError {
    RpcError::new(Code::Unauthorized, message)
}

/// The other repository `input` names, when it is one and the configuration allows
/// the access; `None` when the input names the Work's own repository, or none, or one
/// of the scope's own entries' for a Work with no repository (the usual path).
pub async fn foreign(
    state: &State,
    host: &sdk::Host,
    scope_id: &str,
    operation: &str,
    input: &Value,
    work: &WorkRef,
) -> Result<Option<Foreign>, RpcError> {
    let Some(named) = input
        .get("repository")
        .and_then(Value::as_str)
        .map(str::trim)
        .filter(|s| !s.is_empty())
    else {
        return Ok(None);
    };
    let entries = state.registry().entries.clone();
    let own_scope = |r: &str| {
        entries
            .iter()
            .any(|e| e.scope_id == scope_id && e.repository.eq_ignore_ascii_case(r))
    };
    let own = match &work.repository {
        Some(own) if own.eq_ignore_ascii_case(named) => return Ok(None),
        Some(own) => own.clone(),
        None if own_scope(named) => return Ok(None),
        None => "none".to_string(),
    };
    let prefix = format!("the Work's repository is {own}, not {named}");
    let Some(entry) = entries
        .iter()
        .find(|e| e.scope_id != scope_id && e.repository.eq_ignore_ascii_case(named))
    else {
        return Err(refused(format!(
            "{prefix}: no github entry of another scope receives {named}"
        )));
    };
    let access = if operation == READ_ISSUE {
        "read"
    } else {
        "file"
    };
    let answer: ScopeAuthorizeResult = host
        .call_typed(&ScopeAuthorizeParams {
            scope_id: scope_id.to_string(),
            target_scope_id: entry.scope_id.clone(),
            access: access.into(),
        })
        .await
        .map_err(|e| RpcError::new(Code::Unavailable, format!("scope.authorize: {e}")))?;
    if !answer.allowed {
        return Err(refused(format!("{prefix}: {}", answer.reason)));
    }
    let number =
        match input.get("number") {
            None | Some(Value::Null) => None,
            Some(v) => Some(v.as_u64().filter(|n| *n > 0).ok_or_else(|| {
                RpcError::new(Code::Invalid, "number must be a positive integer")
            })?),
        };
    let target = crate::target::target(
        &serde_json::json!({"repository": named, "number": number}),
        &WorkRef::default(),
        &[named.to_string()],
    )?;
    if target.number.is_none() && operation != OPEN_PULL_REQUEST {
        return Err(RpcError::new(
            Code::Invalid,
            format!("on another repository ({named}), give the issue or pull request number"),
        ));
    }
    Ok(Some(Foreign {
        target,
        scope_id: entry.scope_id.clone(),
        connection: entry.connection.clone(),
    }))
}
