//! The `human` package: people in the loop.
//!
//! - `human.ask` (a wait operation, [`ask`]): an agent asks a person a question and
//!   its Work waits for the answer, an action the host records as a
//!   `core.action.answer` Event on the ask's key.
//! - `operation.gate` ([`gate`]): a call of an operation the scope's entry gates
//!   parks until a person approves it (then it is made), rejects it or lets it time
//!   out (then it is refused, the agent reading why).
//! - `work.admit` and the task `human.hours` ([`admit`]): new Work waits for a person,
//!   or for the hours, before its first attempt.
//! - `work.actions` and `work.act` ([`actions`]): answer, approve, reject and admit,
//!   each decided by an identified person (one of the entry's `approvers`, when it
//!   names some) and recorded by the host as one Event.
//! - `view.render` ([`view`]): the open asks, approvals and admissions as panels of
//!   the web view, their buttons those actions, on a Work and on the page `asks`.
//!
//! Nothing is kept in the package: an ask or a gate is its Wait (`state.waits`), a
//! decision its recorded Event (`state.work_events`), a hold the Work's own
//! (`state.work`, `state.works`). The entry config is in [`config`], the hours in
//! [`hours`]. See the crate's `README.md`.

#![warn(missing_docs)]

pub mod actions;
pub mod admit;
pub mod ask;
pub mod config;
pub mod gate;
pub mod hours;
pub mod view;

use crate::config::{parse_config, HumanConfig};
use protocol::wire::{
    clip_line, validate_kind, ConfigureParams, ConfigureResult, Diagnostic, Event,
    OperationGateParams, OperationGateResult, OperationWaitParams, StateWaitsParams,
    StateWorkEventsParams, StateWorkParams, TaskRunParams, ValidateParams, ValidateResult,
    ViewRenderParams, Wait, WorkActParams, WorkActionsParams, WorkActionsResult, WorkAdmitParams,
};
use protocol::{CallError, Code, RpcError};
use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};

/// The manifest, `open-conduit-extension.json`.
pub const MANIFEST: &str = include_str!("../open-conduit-extension.json");
/// The package's name: the owner of its Waits and holds, the provider of its actions.
pub const NAME: &str = "human";
/// The entry type this package serves.
pub const ENTRY_TYPE: &str = "human";
/// The wait operation an agent asks with.
pub const ASK_OPERATION: &str = "human.ask";
/// Answer an ask.
pub const ACTION_ANSWER: &str = "answer";
/// Approve a gated call.
pub const ACTION_APPROVE: &str = "approve";
/// Reject a gated call, or held Work.
pub const ACTION_REJECT: &str = "reject";
/// Admit held Work.
pub const ACTION_ADMIT: &str = "admit";
/// A Wait's state while it waits.
pub const WAIT_ACTIVE: &str = "active";
/// A Wait's state once its timeout fired.
pub const WAIT_TIMED_OUT: &str = "timed_out";
/// The most pages of a Work's Events a gate reads (of 1000 each).
const MAX_EVENT_PAGES: usize = 100;

/// 12 hex digits of the SHA-256 of `parts`, each ended by a NUL.
fn short_hash(parts: &[&str]) -> String {
    let mut h = Sha256::new();
    for p in parts {
        h.update(p.as_bytes());
        h.update([0]);
    }
    h.finalize()
        .iter()
        .take(6)
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// An ask's ID: `a-` and 12 hex digits of the SHA-256 of the Work and the request
/// ID; of the Work, the Execution and the question when the call has no request ID.
pub fn ask_id(work_id: &str, request_id: &str, execution_id: &str, question: &str) -> String {
    if request_id.is_empty() {
        format!("a-{}", short_hash(&[work_id, "", execution_id, question]))
    } else {
        format!("a-{}", short_hash(&[work_id, request_id]))
    }
}

/// A gated call's ID: `g-` and 12 hex digits of the SHA-256 of the Work, the
/// operation, the request ID and the input (as compact JSON with sorted keys), so an
/// approval is of that very call.
pub fn gate_id(work_id: &str, operation: &str, request_id: &str, input: &Value) -> String {
    format!(
        "g-{}",
        short_hash(&[work_id, operation, request_id, &input.to_string()])
    )
}

/// The correlation key an ask's answer carries.
pub fn ask_key(ask_id: &str) -> String {
    format!("{NAME}/ask/{ask_id}")
}

/// The correlation key a gated call's decision carries.
pub fn gate_key(gate_id: &str) -> String {
    format!("{NAME}/gate/{gate_id}")
}

/// A text field of a Wait's plan.
pub(crate) fn plan_str<'a>(plan: &'a Value, field: &str) -> Option<&'a str> {
    plan.get(field).and_then(Value::as_str)
}

/// An ask's choices, from its Wait's plan (none for a free-text ask).
pub(crate) fn plan_choices(plan: &Value) -> Vec<String> {
    plan["choices"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .map(str::to_string)
        .collect()
}

/// A call's input in one line for a person: an object's fields as `key=value`
/// (texts quoted and cut to 80 bytes, lists and objects as `[…]` and `{…}`), at
/// most 300 bytes.
pub fn summarize(input: &Value) -> String {
    let one = |v: &Value| match v {
        Value::String(s) => {
            let cut = clip_line(s, 80);
            if cut.len() < s.len() {
                format!("{:?}", format!("{cut}…"))
            } else {
                format!("{cut:?}")
            }
        }
        Value::Array(_) => "[…]".to_string(),
        Value::Object(_) => "{…}".to_string(),
        other => other.to_string(),
    };
    let text = match input {
        Value::Null => String::new(),
        Value::Object(map) => map
            .iter()
            .map(|(k, v)| format!("{k}={}", one(v)))
            .collect::<Vec<_>>()
            .join(" "),
        other => one(other),
    };
    clip_line(&text, 300)
}

/// A refusal meant for the agent: its message becomes `data.agent_message`.
pub(crate) fn for_agent(mut e: RpcError) -> RpcError {
    let message = protocol::toolbelt::agent_message(&e.message);
    if let Some(Value::Object(data)) = e.data.as_mut() {
        data.entry(protocol::toolbelt::AGENT_MESSAGE_FIELD)
            .or_insert_with(|| json!(message));
    }
    e
}

/// A scope's `human` entry.
#[derive(Debug, Clone)]
pub struct Scoped {
    /// The entry's name.
    pub entry: String,
    /// Its config.
    pub config: HumanConfig,
}

/// The entries of the configured (enabled) scopes, by scope.
#[derive(Debug, Clone, Default)]
pub struct Registry {
    /// Scope → its entry.
    pub scopes: BTreeMap<String, Scoped>,
}

impl Registry {
    /// Reads `configure`'s entries of type `human`: one per scope at most. The first
    /// bad one fails it all, naming the scope, the entry and the field.
    pub fn from_configure(params: &ConfigureParams) -> Result<Registry, RpcError> {
        let mut scopes: BTreeMap<String, Scoped> = BTreeMap::new();
        for e in params.entries.iter().filter(|e| e.entry_type == ENTRY_TYPE) {
            let config = parse_config(&e.config).map_err(|err| {
                RpcError::invalid_params(format!("scope {}, entry {}: {err}", e.scope_id, e.name))
            })?;
            if let Some(first) = scopes.get(&e.scope_id) {
                return Err(RpcError::invalid_params(format!(
                    "scope {}: entries {} and {} are both of type {ENTRY_TYPE}; a scope takes one",
                    e.scope_id, first.entry, e.name
                )));
            }
            scopes.insert(
                e.scope_id.clone(),
                Scoped {
                    entry: e.name.clone(),
                    config,
                },
            );
        }
        Ok(Registry { scopes })
    }

    /// The config of `scope`'s entry.
    pub fn config(&self, scope: &str) -> Option<&HumanConfig> {
        self.scopes.get(scope).map(|s| &s.config)
    }
}

/// The package's state: the registry of the last `configure`.
#[derive(Debug, Clone, Default)]
pub struct State {
    registry: Arc<RwLock<Registry>>,
}

impl State {
    /// A copy of the registry.
    pub fn registry(&self) -> Registry {
        match self.registry.read() {
            Ok(r) => r.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }

    /// The config of `scope`'s entry.
    pub fn config(&self, scope: &str) -> Option<HumanConfig> {
        self.registry().config(scope).cloned()
    }

    /// Serves `configure`: checks the entries and, unless it is a dry run, keeps them.
    pub fn configure(&self, params: &ConfigureParams) -> Result<ConfigureResult, RpcError> {
        let registry = Registry::from_configure(params)?;
        if !params.dry_run {
            match self.registry.write() {
                Ok(mut r) => *r = registry,
                Err(poisoned) => *poisoned.into_inner() = registry,
            }
        }
        Ok(ConfigureResult::default())
    }
}

/// A host call's failure as this package's error, saying what it was doing.
fn host_error(what: &str, e: &CallError) -> RpcError {
    match e {
        CallError::Rpc(rpc) => RpcError {
            message: format!("{what}: {}", rpc.message),
            ..rpc.clone()
        },
        other => RpcError::new(Code::Unavailable, format!("{what}: {other}")),
    }
}

async fn waits_of(host: &sdk::Host, work_id: &str) -> Result<Vec<Wait>, RpcError> {
    host.call_typed(&StateWaitsParams {
        work_id: work_id.to_string(),
    })
    .await
    .map(|r| r.waits)
    .map_err(|e| host_error(&format!("reading Work {work_id}'s Waits (state.waits)"), &e))
}

async fn events_of(host: &sdk::Host, work_id: &str) -> Result<Vec<Event>, RpcError> {
    let mut out: Vec<Event> = Vec::new();
    let mut after = 0u64;
    for _ in 0..MAX_EVENT_PAGES {
        let page = host
            .call_typed(&StateWorkEventsParams {
                id: work_id.to_string(),
                after,
                limit: 1000,
            })
            .await
            .map_err(|e| {
                host_error(
                    &format!("reading Work {work_id}'s Events (state.work_events)"),
                    &e,
                )
            })?;
        if page.events.is_empty() {
            return Ok(out);
        }
        let next = page.next_after(after);
        out.extend(page.events);
        if next <= after {
            return Ok(out);
        }
        after = next;
    }
    Err(RpcError::new(
        Code::Unavailable,
        format!("Work {work_id} has more Events than a gate reads ({MAX_EVENT_PAGES} pages)"),
    ))
}

/// Serves `human.ask`'s `operation.wait`.
pub fn ask(
    state: &State,
    p: &OperationWaitParams,
    now_ms: i64,
) -> Result<protocol::wire::OperationWaitResult, RpcError> {
    let Some(config) = state.config(&p.authority.scope_id) else {
        return Err(for_agent(RpcError::new(
            Code::Invalid,
            format!(
                "{ASK_OPERATION}: nobody answers asks in this scope (it has no {ENTRY_TYPE} entry)"
            ),
        )));
    };
    ask::plan(&config, p, now_ms)
}

/// Serves `operation.gate`: a call of an operation the caller's scope gates parks
/// until decided ([`gate::decide`]); any other call goes through.
pub async fn operation_gate(
    state: &State,
    host: &sdk::Host,
    p: &OperationGateParams,
    now_ms: i64,
) -> Result<OperationGateResult, RpcError> {
    let Some(config) = state.config(&p.authority.scope_id) else {
        return Ok(OperationGateResult::default());
    };
    let Some(gate) = config.gate_for(&p.operation).cloned() else {
        return Ok(OperationGateResult::default());
    };
    let work_id = &p.authority.work_id;
    if work_id.is_empty() {
        return Err(for_agent(RpcError::new(
            Code::Unauthorized,
            format!(
                "{} needs a person's approval, and a call outside a Work cannot wait for it",
                p.operation
            ),
        )));
    }
    let id = gate_id(work_id, &p.operation, &p.request_id, &p.input);
    let waits = waits_of(host, work_id).await?;
    // No Wait of the gate yet: nobody can have decided it.
    let events = if gate::has_wait(&id, &waits) {
        events_of(host, work_id).await?
    } else {
        Vec::new()
    };
    gate::decide(&config, &gate, p, &id, &events, &waits, now_ms)
}

/// Serves `work.admit`.
pub fn work_admit(
    state: &State,
    p: &WorkAdmitParams,
    now_ms: i64,
) -> protocol::wire::WorkAdmitResult {
    match state.config(&p.work.scope_id) {
        Some(config) => admit::admission(&config, timestamp(now_ms)),
        None => protocol::wire::WorkAdmitResult::default(),
    }
}

/// The Work `work_id` of `scope` (not_found when it is another scope's).
async fn work_of(
    host: &sdk::Host,
    scope: &str,
    work_id: &str,
) -> Result<protocol::wire::Work, RpcError> {
    let work = host
        .call_typed(&StateWorkParams {
            id: work_id.to_string(),
        })
        .await
        .map_err(|e| host_error(&format!("reading Work {work_id} (state.work)"), &e))?
        .work;
    if work.scope_id != scope {
        return Err(RpcError::new(
            Code::NotFound,
            format!("no Work {work_id} in scope {scope}"),
        ));
    }
    Ok(work)
}

/// Serves `work.actions` (nothing on a Work out of reach or of another scope).
pub async fn work_actions(
    state: &State,
    host: &sdk::Host,
    p: &WorkActionsParams,
) -> Result<WorkActionsResult, RpcError> {
    if p.work_id.is_empty() || state.config(&p.scope_id).is_none() {
        return Ok(WorkActionsResult::default());
    }
    let work = match work_of(host, &p.scope_id, &p.work_id).await {
        Ok(work) => work,
        // A Work out of reach (or of another scope) is offered nothing.
        Err(e) if e.is(Code::NotFound) => return Ok(WorkActionsResult::default()),
        Err(e) => return Err(e),
    };
    let waits = waits_of(host, &p.work_id).await?;
    Ok(WorkActionsResult {
        actions: actions::offers(&work, &waits),
    })
}

/// Serves `work.act`.
pub async fn work_act(
    state: &State,
    host: &sdk::Host,
    p: &WorkActParams,
) -> Result<protocol::wire::WorkActResult, RpcError> {
    let Some(config) = state.config(&p.scope_id) else {
        return Err(RpcError::new(
            Code::NotFound,
            format!("scope {} has no {ENTRY_TYPE} entry", p.scope_id),
        ));
    };
    if p.work_id.is_empty() {
        return Err(RpcError::new(
            Code::NotFound,
            format!("{NAME}'s actions are on a Work, and none was named"),
        ));
    }
    let work = work_of(host, &p.scope_id, &p.work_id).await?;
    let waits = waits_of(host, &p.work_id).await?;
    actions::act(&config, p, &work, &waits)
}

/// The instant `ms` milliseconds after the epoch (the epoch when out of range).
fn timestamp(ms: i64) -> jiff::Timestamp {
    jiff::Timestamp::from_millisecond(ms).unwrap_or(jiff::Timestamp::UNIX_EPOCH)
}

/// Serves `task.run`.
pub async fn run_task(
    state: &State,
    host: &sdk::Host,
    p: &TaskRunParams,
) -> Result<protocol::wire::TaskRunResult, RpcError> {
    if p.task != admit::HOURS_TASK {
        return Err(RpcError::new(
            Code::NotFound,
            format!(
                "no task `{}` (this package runs `{}`)",
                p.task,
                admit::HOURS_TASK
            ),
        ));
    }
    let now = protocol::time::parse_rfc3339_ms(&p.now).unwrap_or_else(protocol::time::now_ms);
    admit::hours_pass(host, &state.registry(), timestamp(now)).await
}

/// Serves `validate` for an entry of type `human`; other kinds and types have
/// nothing to check.
pub fn validate(p: &ValidateParams) -> ValidateResult {
    let mut result = ValidateResult::default();
    if p.kind == validate_kind::EXTENSION && p.type_name == ENTRY_TYPE {
        match parse_config(&p.config) {
            Ok(c) => result.describe = c.describe(),
            Err(e) => result.diagnostics.push(Diagnostic {
                code: "invalid_config".to_string(),
                message: e.to_string(),
                path: e.pointer,
            }),
        }
    }
    result
}

/// The extension, with every handler.
pub fn extension() -> Result<sdk::Extension, String> {
    let state = State::default();
    let s8 = state.clone();
    let (s1, s2, s3, s4, s5, s6, s7) = (
        state.clone(),
        state.clone(),
        state.clone(),
        state.clone(),
        state.clone(),
        state.clone(),
        state,
    );
    let ext = sdk::Extension::new(MANIFEST)
        .map_err(|e| e.to_string())?
        .on_configure(move |_ctx, params| {
            let state = s1.clone();
            async move { state.configure(&params) }
        })
        .on::<OperationWaitParams, _, _>(move |_ctx, p| {
            let state = s2.clone();
            async move { ask(&state, &p, protocol::time::now_ms()) }
        })
        .on::<OperationGateParams, _, _>(move |ctx, p| {
            let state = s3.clone();
            async move { operation_gate(&state, &ctx.host, &p, protocol::time::now_ms()).await }
        })
        .on::<WorkAdmitParams, _, _>(move |_ctx, p| {
            let state = s4.clone();
            async move { Ok(work_admit(&state, &p, protocol::time::now_ms())) }
        })
        .on::<WorkActionsParams, _, _>(move |ctx, p| {
            let state = s5.clone();
            async move { work_actions(&state, &ctx.host, &p).await }
        })
        .on::<WorkActParams, _, _>(move |ctx, p| {
            let state = s6.clone();
            async move { work_act(&state, &ctx.host, &p).await }
        })
        .on::<TaskRunParams, _, _>(move |ctx, p| {
            let state = s7.clone();
            async move { run_task(&state, &ctx.host, &p).await }
        })
        .on::<ViewRenderParams, _, _>(move |ctx, p| {
            let state = s8.clone();
            async move { view::render(&state, &ctx.host, &p).await }
        })
        .on::<ValidateParams, _, _>(|_ctx, p| async move { Ok(validate(&p)) });
    match ext.errors().first() {
        Some(e) => Err(e.to_string()),
        None => Ok(ext),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use protocol::wire::Entry;

    #[test]
    fn the_manifest_parses_and_every_handler_is_allowed() {
        extension().unwrap();
        let m = protocol::manifest::parse_manifest(MANIFEST.as_bytes()).unwrap();
        assert_eq!(m.name, NAME);
        assert_eq!(m.command, ["oc-human-extension"]);
        let p = &m.provides;
        assert!(p.operation_gate && p.start_gate && p.actions && p.panels);
        assert_eq!(
            p.pages
                .iter()
                .map(|x| (x.id.as_str(), x.title.as_str(), x.entry.as_str()))
                .collect::<Vec<_>>(),
            [(view::PAGE_ASKS, "What waits for a person", ENTRY_TYPE)]
        );
        assert!(p
            .operations
            .iter()
            .any(|o| o.name == ASK_OPERATION && o.kind == "wait"));
        assert!(p.tasks.iter().any(|t| t.name == admit::HOURS_TASK));
        assert!(p.extensions.iter().any(|e| e.type_name == ENTRY_TYPE));
        for method in [
            "operation.wait",
            "operation.gate",
            "work.admit",
            "work.settle_hold",
            "work.actions",
            "work.act",
            "task.run",
            "state.waits",
            "view.render",
        ] {
            assert!(m.enables(method), "{method}");
        }
    }

    fn entry(scope: &str, name: &str, config: Value) -> Entry {
        Entry {
            scope_id: scope.into(),
            entry_type: ENTRY_TYPE.into(),
            name: name.into(),
            config,
            ..Entry::default()
        }
    }

    #[test]
    fn configure_keeps_one_entry_per_scope_and_names_bad_ones() {
        let state = State::default();
        state
            .configure(&ConfigureParams {
                entries: vec![entry("acme", "people", json!({"approvers": ["cli:alice"]}))],
                ..ConfigureParams::default()
            })
            .unwrap();
        assert_eq!(state.config("acme").unwrap().approvers, ["cli:alice"]);
        assert!(state.config("other").is_none());
        let e = state
            .configure(&ConfigureParams {
                entries: vec![entry(
                    "acme",
                    "people",
                    json!({"gates": [{"operation": "x"}]}),
                )],
                ..ConfigureParams::default()
            })
            .unwrap_err();
        assert_eq!(
            e.message,
            "invalid params: scope acme, entry people: /gates/0/operation: \"x\" is not an operation of a package (github.open_pull_request) or all of a package's (github.*)"
        );
        let e = state
            .configure(&ConfigureParams {
                entries: vec![entry("acme", "a", json!({})), entry("acme", "b", json!({}))],
                ..ConfigureParams::default()
            })
            .unwrap_err();
        assert!(e
            .message
            .contains("scope acme: entries a and b are both of type human; a scope takes one"));
        // A failed or dry configure keeps what was configured.
        state
            .configure(&ConfigureParams {
                entries: vec![entry("other", "p", json!({}))],
                dry_run: true,
                ..ConfigureParams::default()
            })
            .unwrap();
        assert!(state.config("acme").is_some() && state.config("other").is_none());
    }

    #[test]
    fn validate_describes_and_diagnoses() {
        let r = validate(&ValidateParams {
            kind: validate_kind::EXTENSION.into(),
            type_name: ENTRY_TYPE.into(),
            config: json!({"gates": [{"operation": "github.merge", "timeout_s": 60}],
                           "admission": {"by": "person"}}),
            ..ValidateParams::default()
        });
        assert!(r.diagnostics.is_empty());
        assert_eq!(
            r.describe,
            [
                "asks and approvals answered by a person; asks wait at most 604800s",
                "github.merge needs approval within 60s",
                "new Work waits for a person to admit it"
            ]
        );
        let r = validate(&ValidateParams {
            kind: validate_kind::EXTENSION.into(),
            type_name: ENTRY_TYPE.into(),
            config: json!({"admission": {"hours": {"days": ["mon"], "from": "09:00", "to": "08:00"}}}),
            ..ValidateParams::default()
        });
        assert_eq!(r.diagnostics.len(), 1);
        assert_eq!(r.diagnostics[0].path, "/admission/hours/to");
        assert_eq!(
            r.diagnostics[0].message,
            "/admission/hours/to: 08:00 is not after from (09:00): the hours lie within one day"
        );
    }

    #[test]
    fn input_summaries_are_one_short_line() {
        assert_eq!(
            summarize(&json!({"b": [1], "a": "x\ny", "n": 3, "o": {"k": 1}})),
            "a=\"x…\" b=[…] n=3 o={…}"
        );
        let long = "z".repeat(100);
        let s = summarize(&json!({ "t": long }));
        assert_eq!(s, format!("t=\"{}…\"", "z".repeat(80)));
        assert_eq!(summarize(&Value::Null), "");
        assert!(summarize(&json!({ "a": "y".repeat(79), "b": "y".repeat(79), "c": "y".repeat(79), "d": "y".repeat(79)})).len() <= 300);
    }
}
