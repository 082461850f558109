//! People's actions on Work (`action.submit`, `action.list` from packages; `ext.act`,
//! `ext.actions` on the bus for the CLI), and `state.works`, the read a package finds
//! a Work with.
//!
//! An action is offered by a **provider**: the host's own `core` ([`core`]: `stop`
//! and `retry`), or a package that declares `provides.actions` and is configured in
//! the Work's scope ([`provider`]: it answers `work.actions` with what it offers and
//! `work.act` with a plan; the `human` package's `answer`, `approve`, `reject`,
//! `admit`).
//!
//! Whoever submits, the action is recorded as **one Event** `core.action.<action>`
//! from source `core/actions/<surface>` (the submitting package's name, or `cli`)
//! whose delivery ID is the action's `key`, payload `core.action.v1` with data
//! `{action, provider, caller, work_id, input, decision?}`, where `caller` is the
//! person as `<surface>:<person>` (`github:octocat`, `cli:alice`). The same key again
//! answers that Event with `added: false` and does nothing again, so no decision
//! applies twice.
//!
//! In order: the scope must be one whose configuration uses the submitting package
//! (`unauthorized`; the CLI may act anywhere), the Work must exist in that scope
//! (`not_found` otherwise, as for a Work out of reach), the provider and action must
//! be offered (`not_found`, naming what is), and the fields within their bounds
//! (`invalid`).
//!
//! The web view's panels and pages ([`view`]: `view.panels`, `view.pages`,
//! `view.page`) are asked of the packages the same way, their buttons taken as
//! actions with `ext.act`.

use busapi::store::{WorkGetRequest, WorkRow, WorksRequest};
use daemon::bus::Bus;
use protocol::wire::{
    self, ActionListParams, ActionListResult, ActionSubmitParams, ActionSubmitResult, ListedAction,
    StateWorksParams, StateWorksResult, CORE_PROVIDER, MAX_ACTION_CALLER_BYTES,
    MAX_ACTION_INPUT_BYTES, MAX_ACTION_KEY_BYTES, MAX_ACTION_NAME_BYTES,
};
use protocol::{CallError, Code, RpcError};

use crate::identity::Identity;
use crate::render::Packages;

pub mod core;
pub mod provider;
pub mod view;

pub use self::core::{RETRY_STATES, STOP_STATES};

/// The payload schema of every action's Event.
pub const ACTION_SCHEMA: &str = "core.action.v1";
/// The surface the CLI's actions are recorded from (`core/actions/cli`).
pub const CLI_SURFACE: &str = "cli";

/// An action whose fields passed the checks that need no store.
#[derive(Debug, Clone, PartialEq)]
pub struct Act {
    /// The scope (the submitting package's; for the CLI, the Work's once read).
    pub scope_id: String,
    /// The Work.
    pub work_id: String,
    /// The provider: `core` or a package's name.
    pub provider: String,
    /// The action.
    pub action: String,
    /// What the person gave with it.
    pub input: serde_json::Value,
    /// `<surface>:<person>`.
    pub caller: String,
    /// The Event source: `core/actions/<surface>`.
    pub source: String,
    /// The action's identity (the recorded Event's delivery ID).
    pub key: String,
}

fn refuse(code: Code, message: impl Into<String>) -> RpcError {
    RpcError::new(code, message)
}

/// One line of text, non-empty, within `max` bytes, with no control characters.
fn one_line(field: &str, v: &str, max: usize) -> Result<(), RpcError> {
    if v.is_empty() {
        return Err(refuse(Code::Invalid, format!("{field} is required")));
    }
    if v.len() > max {
        return Err(refuse(
            Code::Invalid,
            format!("{field} is {} bytes, over the limit of {max}", v.len()),
        ));
    }
    if v.chars().any(char::is_control) {
        return Err(refuse(
            Code::Invalid,
            format!("{field} must be one line of text (no control characters)"),
        ));
    }
    Ok(())
}

/// The bounds every action's fields keep, whoever submits it.
fn check_fields(a: &Act) -> Result<(), RpcError> {
    one_line("provider", &a.provider, MAX_ACTION_NAME_BYTES)?;
    one_line("action", &a.action, MAX_ACTION_NAME_BYTES)?;
    if a.work_id.is_empty() {
        return Err(refuse(
            Code::Invalid,
            format!("work_id is required: {} acts on a Work", a.action),
        ));
    }
    one_line("work_id", &a.work_id, MAX_ACTION_KEY_BYTES)?;
    // The person within their bound, after the surface that names them.
    one_line(
        "caller",
        &a.caller,
        MAX_ACTION_NAME_BYTES + 1 + MAX_ACTION_CALLER_BYTES,
    )?;
    one_line("key", &a.key, MAX_ACTION_KEY_BYTES)?;
    let input = serde_json::to_string(&a.input)
        .map_err(|e| refuse(Code::Invalid, format!("input is not JSON: {e}")))?;
    if input.len() > MAX_ACTION_INPUT_BYTES {
        return Err(refuse(
            Code::Invalid,
            format!(
                "input is {} bytes, over the limit of {MAX_ACTION_INPUT_BYTES}",
                input.len()
            ),
        ));
    }
    Ok(())
}

fn provider_or_core(p: &str) -> String {
    if p.is_empty() {
        CORE_PROVIDER.to_owned()
    } else {
        p.to_owned()
    }
}

/// The checks of a package's submit that need no store: the scope is the package's
/// and every field is within its bound. The caller is recorded as
/// `<package>:<caller>`.
pub fn check(identity: &Identity, p: &ActionSubmitParams) -> Result<Act, RpcError> {
    let name = identity.name.as_str();
    if p.scope_id.is_empty() || !identity.scopes.iter().any(|s| s == &p.scope_id) {
        return Err(refuse(
            Code::Unauthorized,
            format!(
                "scope {:?} is not one whose configuration uses {name:?}: nothing was done",
                p.scope_id
            ),
        ));
    }
    one_line("caller", &p.caller, MAX_ACTION_CALLER_BYTES)?;
    let a = Act {
        scope_id: p.scope_id.clone(),
        work_id: p.work_id.clone(),
        provider: provider_or_core(&p.provider),
        action: p.action.clone(),
        input: p.input.clone(),
        caller: format!("{name}:{}", p.caller),
        source: format!("core/actions/{name}"),
        key: p.key.clone(),
    };
    check_fields(&a)?;
    Ok(a)
}

/// The checks of the CLI's `ext.act`: the caller names its surface
/// (`cli:alice`), which the Event's source takes.
pub fn check_bus(p: &busapi::ext::ActRequest) -> Result<Act, RpcError> {
    let Some((surface, person)) = p.caller.split_once(':') else {
        return Err(refuse(
            Code::Invalid,
            format!(
                "caller {:?} must be <surface>:<person> (cli:alice)",
                p.caller
            ),
        ));
    };
    if surface.is_empty()
        || person.is_empty()
        || !surface
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_')
    {
        return Err(refuse(
            Code::Invalid,
            format!(
                "caller {:?} must be <surface>:<person> with a surface of a-z, 0-9, - and _",
                p.caller
            ),
        ));
    }
    let a = Act {
        scope_id: String::new(),
        work_id: p.work_id.clone(),
        provider: provider_or_core(&p.provider),
        action: p.action.clone(),
        input: p.input.clone(),
        caller: p.caller.clone(),
        source: format!("core/actions/{surface}"),
        key: p.key.clone(),
    };
    check_fields(&a)?;
    Ok(a)
}

/// A store or scheduler answer as the caller sees it: authored errors pass on,
/// anything else is `unavailable`.
fn bus_error(what: &str, e: CallError) -> RpcError {
    match e {
        CallError::Rpc(e) => e,
        other => refuse(
            Code::Unavailable,
            format!("{what} is unavailable ({other})"),
        ),
    }
}

/// The Work `work_id`, when it is in `scope` (any scope when `scope` is empty);
/// otherwise `not_found`, as for a Work out of reach.
async fn work_in(bus: &Bus, scope: &str, work_id: &str) -> Result<WorkRow, RpcError> {
    let not_found = || {
        if scope.is_empty() {
            refuse(Code::NotFound, format!("no Work {work_id}"))
        } else {
            refuse(
                Code::NotFound,
                format!("no Work {work_id} in scope {scope}"),
            )
        }
    };
    let work = match bus
        .call_typed(&WorkGetRequest {
            id: work_id.to_owned(),
        })
        .await
    {
        Ok(w) => w.work,
        Err(CallError::Rpc(e)) if e.is(Code::NotFound) => return Err(not_found()),
        Err(e) => return Err(bus_error("the store", e)),
    };
    if !scope.is_empty() && work.scope_id != scope {
        return Err(not_found());
    }
    Ok(work)
}

/// Take the checked action on its Work, through its provider.
async fn perform(
    bus: &Bus,
    packages: Option<&dyn Packages>,
    work: &WorkRow,
    a: &Act,
) -> Result<ActionSubmitResult, RpcError> {
    let r = if a.provider == CORE_PROVIDER {
        self::core::act(bus, work, a).await
    } else {
        provider::act(bus, packages, work, a).await
    };
    match &r {
        Ok(done) => {
            tracing::info!(OC_WORK_ID = %a.work_id, provider = %a.provider, action = %a.action, caller = %a.caller, event = %done.event, added = done.added, "action taken")
        }
        Err(e) => {
            tracing::info!(OC_WORK_ID = %a.work_id, provider = %a.provider, action = %a.action, caller = %a.caller, error = %e, "action refused")
        }
    }
    r
}

/// Serves `action.submit` (see the module doc).
pub async fn submit(
    identity: &Identity,
    bus: &Bus,
    packages: Option<&dyn Packages>,
    p: ActionSubmitParams,
) -> Result<ActionSubmitResult, RpcError> {
    let a = check(identity, &p)?;
    let work = work_in(bus, &a.scope_id, &a.work_id).await?;
    perform(bus, packages, &work, &a).await
}

/// Serves `ext.act`: an action for a person the caller identified (the CLI's).
pub async fn act(
    bus: &Bus,
    packages: Option<&dyn Packages>,
    p: busapi::ext::ActRequest,
) -> Result<ActionSubmitResult, RpcError> {
    let mut a = check_bus(&p)?;
    let work = work_in(bus, "", &a.work_id).await?;
    a.scope_id = work.scope_id.clone();
    perform(bus, packages, &work, &a).await
}

/// What every provider offers on the Work: `core`'s first, then each provider
/// package configured in its scope, by name. A provider that fails to answer is left
/// out (and logged), so one package never hides the others' actions.
pub async fn offered(packages: Option<&dyn Packages>, work: &WorkRow) -> ActionListResult {
    let mut actions: Vec<ListedAction> = self::core::offers(work)
        .into_iter()
        .map(|offer| ListedAction {
            provider: CORE_PROVIDER.to_owned(),
            offer,
        })
        .collect();
    if let Some(packages) = packages {
        actions.extend(provider::offers(packages, work).await);
    }
    ActionListResult { actions }
}

/// Serves `action.list` (permission `action.submit`): in one of the package's
/// scopes, what every provider offers on a Work of it. A Work outside the scope reads
/// as `not_found`; no Work lists nothing (no provider here offers scope actions).
pub async fn list(
    identity: &Identity,
    bus: &Bus,
    packages: Option<&dyn Packages>,
    p: ActionListParams,
) -> Result<ActionListResult, RpcError> {
    if p.scope_id.is_empty() || !identity.scopes.iter().any(|s| s == &p.scope_id) {
        return Err(refuse(
            Code::Unauthorized,
            format!(
                "scope {:?} is not one whose configuration uses {:?}",
                p.scope_id, identity.name
            ),
        ));
    }
    if p.work_id.is_empty() {
        return Ok(ActionListResult::default());
    }
    let work = work_in(bus, &p.scope_id, &p.work_id).await?;
    Ok(offered(packages, &work).await)
}

/// Serves `ext.actions`: what every provider offers on the Work.
pub async fn actions(
    bus: &Bus,
    packages: Option<&dyn Packages>,
    p: busapi::ext::ActionsRequest,
) -> Result<ActionListResult, RpcError> {
    one_line("work_id", &p.work_id, MAX_ACTION_KEY_BYTES)?;
    let work = work_in(bus, "", &p.work_id).await?;
    Ok(offered(packages, &work).await)
}

/// Serves `state.works`: a page of the Works in the package's scopes (of any kind),
/// and of its own declared Work kinds wherever they are (spec: a package may read and
/// retire Work of its own kinds left where its entry was removed), by ID, optionally
/// of one scope, one kind, some states and with one correlation key. A scope that is
/// not the package's reads as an empty page unless `kind` is one of its own. The
/// filters the store does not apply (several states; every scope of the package) are
/// applied to the page it read, so a page may be short before the end: only an empty
/// `next` ends the listing.
pub async fn state_works(
    identity: &Identity,
    bus: &Bus,
    p: StateWorksParams,
) -> Result<StateWorksResult, RpcError> {
    wire::check_page_limit(p.limit).map_err(|e| refuse(Code::Invalid, e.to_string()))?;
    let own_kind = |kind: &str| {
        !kind.is_empty()
            && identity
                .manifest
                .provides
                .work_kinds
                .iter()
                .any(|k| k.name == kind)
    };
    let in_scopes = |scope: &str| identity.scopes.iter().any(|s| s == scope);
    // Only Work of the asked kind, one of the package's own: any scope.
    let anywhere = own_kind(&p.kind);
    if !p.scope_id.is_empty() && !in_scopes(&p.scope_id) && !anywhere {
        return Ok(StateWorksResult::default());
    }
    if identity.scopes.is_empty() && !anywhere {
        return Ok(StateWorksResult::default());
    }
    let scope = if p.scope_id.is_empty() && identity.scopes.len() == 1 && !anywhere {
        identity.scopes[0].as_str()
    } else {
        p.scope_id.as_str()
    };
    let some = |s: &str| (!s.is_empty()).then(|| s.to_owned());
    let request = WorksRequest {
        scope_id: some(scope),
        state: match p.states.as_slice() {
            [one] => Some(one.clone()),
            _ => None,
        },
        kind: some(&p.kind),
        key: some(&p.key),
        after: p.after.clone(),
        limit: p.limit,
        recent: false,
    };
    let page = bus
        .call_typed(&request)
        .await
        .map_err(|e| bus_error("the store", e))?;
    let works = page
        .works
        .iter()
        .filter_map(|row| serde_json::to_value(row).ok())
        .map(|row| wire::Work::from_store_row(&row))
        .filter(|w| in_scopes(&w.scope_id) || own_kind(&w.kind))
        .filter(|w| p.states.is_empty() || p.states.contains(&w.state))
        .collect();
    Ok(StateWorksResult {
        works,
        next: page.next,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn identity() -> Identity {
        let manifest = protocol::manifest::parse_manifest(
            br#"{"protocol": [1], "name": "github", "version": "1.0.0",
                 "command": ["x"], "permissions": ["action.submit"]}"#,
        )
        .unwrap();
        Identity::new(manifest, vec!["s1".into()], Vec::new())
    }

    fn submit(action: &str) -> ActionSubmitParams {
        ActionSubmitParams {
            scope_id: "s1".into(),
            work_id: "w-1".into(),
            provider: String::new(),
            action: action.into(),
            input: serde_json::Value::Null,
            caller: "octocat".into(),
            key: "comment/1".into(),
        }
    }

    fn code(r: Result<Act, RpcError>) -> String {
        match r {
            Ok(c) => panic!("expected a refusal, got {c:?}"),
            Err(e) => format!("{}: {}", e.app_code().unwrap_or("?"), e.message),
        }
    }

    #[test]
    fn the_caller_is_the_packages_and_the_provider_defaults_to_core() {
        let c = check(&identity(), &submit("stop")).map_err(|e| e.message);
        let c = c.unwrap();
        assert_eq!(
            (
                c.provider.as_str(),
                c.action.as_str(),
                c.caller.as_str(),
                c.source.as_str()
            ),
            ("core", "stop", "github:octocat", "core/actions/github")
        );
        let mut p = submit("retry");
        p.provider = "core".into();
        assert_eq!(
            check(&identity(), &p).map(|c| c.action).ok().as_deref(),
            Some("retry")
        );
    }

    #[test]
    fn the_clis_caller_names_its_surface() {
        let p = busapi::ext::ActRequest {
            work_id: "w-1".into(),
            provider: "human".into(),
            action: "answer".into(),
            input: json!({"ask_id": "a-1", "answer": "yes"}),
            caller: "cli:alice".into(),
            key: "answer/a-1".into(),
        };
        let a = check_bus(&p).unwrap();
        assert_eq!(
            (a.caller.as_str(), a.source.as_str()),
            ("cli:alice", "core/actions/cli")
        );
        for caller in ["alice", ":alice", "cli:", "CLI:alice", "a b:c"] {
            let mut q = p.clone();
            q.caller = caller.into();
            let said = code(check_bus(&q));
            assert!(said.starts_with("invalid: caller"), "{caller}: {said}");
        }
    }

    #[test]
    fn a_submit_outside_its_scopes_is_refused() {
        let mut p = submit("stop");
        p.scope_id = "s2".into();
        let said = code(check(&identity(), &p));
        assert!(said.starts_with("unauthorized: scope \"s2\""), "{said}");
        let mut p = submit("stop");
        p.provider = "a\nb".into();
        let said = code(check(&identity(), &p));
        assert!(said.starts_with("invalid: provider"), "{said}");
    }

    #[test]
    fn every_field_is_bounded() {
        type Edit = fn(&mut ActionSubmitParams);
        let edits: [(&str, Edit); 7] = [
            ("work_id", |p| p.work_id.clear()),
            ("caller", |p| p.caller.clear()),
            ("caller", |p| p.caller = "a\nb".into()),
            ("caller", |p| {
                p.caller = "x".repeat(MAX_ACTION_CALLER_BYTES + 1)
            }),
            ("key", |p| p.key = "k".repeat(MAX_ACTION_KEY_BYTES + 1)),
            ("key", |p| p.key.clear()),
            ("input", |p| {
                p.input = json!("i".repeat(MAX_ACTION_INPUT_BYTES))
            }),
        ];
        for (field, edit) in edits {
            let mut p = submit("stop");
            edit(&mut p);
            let said = code(check(&identity(), &p));
            assert!(
                said.starts_with(&format!("invalid: {field}")),
                "{field}: {said}"
            );
        }
        let mut p = submit("stop");
        p.caller = "x".repeat(MAX_ACTION_CALLER_BYTES);
        p.key = "k".repeat(MAX_ACTION_KEY_BYTES);
        assert!(check(&identity(), &p).is_ok());
    }
}
