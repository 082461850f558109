//! The `schedule` extension: jobs with a cron expression or an interval, kept in
//! config entries of type `schedule`, each run as timed Work through the binding
//! its entry names.
//!
//! - `configure` arms one timer of the recurrence `schedule.job` per job
//!   (`timer.arm`, key `<entry>/<job>`, the [`config::TimerSpec`] as spec, the first
//!   fire time as `at`) and cancels (`timer.cancel`) the timers of jobs that are
//!   gone. What it armed is kept in the extension's KV (key [`ARMED_KEY`] of its own
//!   namespace), so a restarted process knows what to cancel, and a job whose spec
//!   did not change is not armed again (re-arming would push an interval job's next
//!   run back, and could skip a run due that very moment). Entries of disabled
//!   scopes keep their timers; nothing new is armed for them.
//! - `recurrence.next` (in transaction: pure and deterministic) answers the next
//!   fire time strictly after the one that fired, and that occurrence's payload in
//!   schema `schedule.run.v1`: the run's record, which the host accepts as an Event
//!   of family `schedule.run`.
//! - `route.match` (handler `schedule`) takes those Events to a Work of their own
//!   per run, of the timed kind `schedule-job`, titled with the job's name.
//!
//! Modules: [`time`] is the UTC calendar, [`cron`] the cron expressions,
//! [`config`] the entry, route and spec configs, [`route`] the route handler. All of
//! them are pure; this module holds the host calls. See the crate's `README.md`
//! for the entry config.

#![warn(missing_docs)]

pub mod config;
pub mod cron;
pub mod route;
pub mod time;

use crate::config::{parse_entry_config, parse_route_config, TimerSpec};
use crate::time::{format_rfc3339, parse_rfc3339, Secs};
use protocol::wire::{
    validate_kind, ConfigureParams, ConfigureResult, Diagnostic, KvCommitParams, KvPut, Payload,
    RecurrenceNextParams, RecurrenceNextResult, RouteMatchParams, RouteSamplesParams,
    TimerArmParams, TimerCancelParams, ValidateParams, ValidateResult,
};
use protocol::{CallError, Code, RpcError};
use serde_json::{json, Map, Value};
use std::collections::{BTreeMap, BTreeSet};

/// The manifest, `open-conduit-extension.json`.
pub const MANIFEST: &str = include_str!("../open-conduit-extension.json");
/// The entry type this extension serves.
pub const ENTRY_TYPE: &str = "schedule";
/// The recurrence every job's timer is armed under.
pub const RECURRENCE: &str = "schedule.job";
/// The family of the runs' Events.
pub const FAMILY: &str = "schedule.run";
/// The payload schema of a run.
pub const SCHEMA: &str = "schedule.run.v1";
/// The Work kind of a run's Work (timed: a dry run starts none).
pub const WORK_KIND: &str = "schedule-job";
/// The KV key (in the extension's own namespace) listing the armed timers.
pub const ARMED_KEY: &str = "armed";
/// How many times `configure` re-reads the armed timers when another writer
/// changed them under it.
const COMMIT_ATTEMPTS: usize = 3;

/// The payload of a run of `spec`'s job scheduled at `scheduled_at`:
/// `{"schema": "schedule.run.v1", "data": {"scope", "entry", "job", "binding",
/// "scheduled_at", "input"?}}` (`scope` left out when unknown).
pub fn run_payload(scope: &str, spec: &TimerSpec, scheduled_at: &str) -> Payload {
    let mut data = Map::new();
    if !scope.is_empty() {
        data.insert("scope".into(), json!(scope));
    }
    data.insert("entry".into(), json!(spec.entry));
    data.insert("job".into(), json!(spec.job));
    data.insert("binding".into(), json!(spec.binding));
    data.insert("scheduled_at".into(), json!(scheduled_at));
    if let Some(input) = &spec.input {
        data.insert("input".into(), input.clone());
    }
    Payload {
        schema: SCHEMA.to_string(),
        data: Value::Object(data),
    }
}

/// Serves `recurrence.next`: the first fire time of the spec's schedule strictly
/// after `after` (a cron job's next matching minute, an interval job's `after +
/// every_s`), and the payload of the run that fired at `after`. Pure: the same
/// params always give the same answer. A next time past the year 9999 is empty,
/// which stops the timer.
pub fn recurrence_next(p: &RecurrenceNextParams) -> Result<RecurrenceNextResult, RpcError> {
    if p.recurrence != RECURRENCE {
        return Err(RpcError::invalid_params(format!(
            "recurrence {} is not {RECURRENCE}",
            p.recurrence
        )));
    }
    let spec = TimerSpec::from_value(&p.spec)
        .map_err(|e| RpcError::invalid_params(format!("the spec of timer {}: {e}", p.key)))?;
    let after =
        parse_rfc3339(&p.after).map_err(|e| RpcError::invalid_params(format!("after: {e}")))?;
    let scheduled_at = format_rfc3339(after).unwrap_or_else(|| p.after.clone());
    let next = spec
        .when
        .next_after(after)
        .and_then(format_rfc3339)
        .unwrap_or_default();
    Ok(RecurrenceNextResult {
        next,
        payload: Some(run_payload(&p.scope_id, &spec, &scheduled_at)),
    })
}

fn entry_error(scope: &str, entry: &str, detail: impl std::fmt::Display) -> RpcError {
    RpcError::invalid_params(format!("scope {scope}, entry {entry}: {detail}"))
}

/// One timer `configure` wants armed.
#[derive(Debug, Clone, PartialEq)]
pub struct Wanted {
    /// The scope.
    pub scope: String,
    /// The timer's key, `<entry>/<job>`.
    pub key: String,
    /// The spec, as armed.
    pub spec: Value,
    /// The first fire time after the configure's clock (RFC 3339).
    pub at: String,
}

/// The timers `configure` found armed and keeps: scope → key → spec.
pub type Armed = BTreeMap<String, BTreeMap<String, Value>>;

/// Checks `configure`'s entries of type `schedule` and lists the timers they want,
/// first firing after `now`. The first bad entry fails it all with an
/// invalid-params error naming the scope, the entry and the field
/// (`scope acme, entry jobs: /jobs/1/cron: ...`).
pub fn wanted(params: &ConfigureParams, now: Secs) -> Result<Vec<Wanted>, RpcError> {
    let mut seen = BTreeSet::new();
    let mut out = Vec::new();
    for e in params.entries.iter().filter(|e| e.entry_type == ENTRY_TYPE) {
        let (scope, name) = (e.scope_id.as_str(), e.name.as_str());
        if name.is_empty() || name.contains('/') {
            return Err(entry_error(
                scope,
                name,
                "an entry name must be non-empty and without /",
            ));
        }
        if !seen.insert((scope, name)) {
            return Err(entry_error(scope, name, "the entry is named twice"));
        }
        let config = parse_entry_config(&e.config).map_err(|err| entry_error(scope, name, err))?;
        for (i, job) in config.jobs.iter().enumerate() {
            let spec = TimerSpec::new(name, &config.binding, job);
            let at = job
                .when
                .next_after(now)
                .and_then(format_rfc3339)
                .ok_or_else(|| {
                    entry_error(
                        scope,
                        name,
                        format!("/jobs/{i}: the job never fires again before the year 10000"),
                    )
                })?;
            out.push(Wanted {
                scope: scope.to_string(),
                key: spec.key(),
                spec: spec.to_value(),
                at,
            });
        }
    }
    Ok(out)
}

/// What `configure` does to the armed timers.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Plan {
    /// Timers to arm: new jobs and jobs whose spec changed.
    pub arm: Vec<Wanted>,
    /// Timers to cancel (scope, key, spec): jobs that are gone, of entries not in a
    /// disabled scope.
    pub cancel: Vec<(String, String, Value)>,
    /// What stays armed as it is: unchanged jobs and the jobs of disabled entries.
    pub keep: Armed,
}

/// The entry of a timer key `<entry>/<job>`.
fn entry_of(key: &str) -> &str {
    key.rsplit_once('/').map_or(key, |(entry, _)| entry)
}

/// Compares what is armed (`stored`) with what is wanted. `disabled` holds the
/// (scope, entry) pairs of entries in disabled scopes, whose timers stay armed.
pub fn plan(stored: &Armed, wanted: &[Wanted], disabled: &BTreeSet<(String, String)>) -> Plan {
    let mut p = Plan::default();
    let mut wanted_keys = BTreeSet::new();
    for w in wanted {
        wanted_keys.insert((w.scope.as_str(), w.key.as_str()));
        let current = stored.get(&w.scope).and_then(|keys| keys.get(&w.key));
        if current == Some(&w.spec) {
            p.keep
                .entry(w.scope.clone())
                .or_default()
                .insert(w.key.clone(), w.spec.clone());
        } else {
            p.arm.push(w.clone());
        }
    }
    for (scope, keys) in stored {
        for (key, spec) in keys {
            if wanted_keys.contains(&(scope.as_str(), key.as_str())) {
                continue;
            }
            if disabled.contains(&(scope.clone(), entry_of(key).to_string())) {
                p.keep
                    .entry(scope.clone())
                    .or_default()
                    .insert(key.clone(), spec.clone());
            } else {
                p.cancel.push((scope.clone(), key.clone(), spec.clone()));
            }
        }
    }
    p
}

/// Reads the KV value of [`ARMED_KEY`]: `{"timers": {scope: {key: spec}}}`. A
/// value of another shape reads as nothing armed (and is said so on stderr).
pub fn read_armed(value: Option<&Value>) -> Armed {
    let Some(value) = value else {
        return Armed::new();
    };
    let parsed = value
        .get("timers")
        .and_then(Value::as_object)
        .map(|scopes| {
            scopes
                .iter()
                .filter_map(|(scope, keys)| {
                    let keys = keys.as_object()?;
                    Some((
                        scope.clone(),
                        keys.iter()
                            .map(|(k, v)| (k.clone(), v.clone()))
                            .collect::<BTreeMap<_, _>>(),
                    ))
                })
                .collect::<Armed>()
        });
    parsed.unwrap_or_else(|| {
        eprintln!("schedule: the KV key {ARMED_KEY} is not {{\"timers\": {{...}}}}; reading it as nothing armed");
        Armed::new()
    })
}

/// The KV value of [`ARMED_KEY`] for `armed` (scopes without timers left out).
pub fn write_armed(armed: &Armed) -> Value {
    let timers: Map<String, Value> = armed
        .iter()
        .filter(|(_, keys)| !keys.is_empty())
        .map(|(scope, keys)| {
            let keys: Map<String, Value> =
                keys.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
            (scope.clone(), Value::Object(keys))
        })
        .collect();
    json!({ "timers": timers })
}

fn host_error(what: &str, e: &CallError) -> RpcError {
    match e {
        CallError::Rpc(rpc) => RpcError {
            message: format!("{what}: {}", rpc.message),
            ..rpc.clone()
        },
        other => RpcError::new(Code::Unavailable, format!("{what}: {other}")),
    }
}

/// Serves `configure`: checks the entries, then (unless it is a dry run) arms the
/// timers of new and changed jobs, cancels those of jobs that are gone, and records
/// what is armed in the KV. A host call that fails fails `configure` once the
/// record says what did happen, so the next `configure` retries the rest.
pub async fn configure(
    host: &sdk::Host,
    params: &ConfigureParams,
    now: Secs,
) -> Result<ConfigureResult, RpcError> {
    let wanted = wanted(params, now)?;
    if params.dry_run {
        return Ok(ConfigureResult::default());
    }
    let disabled: BTreeSet<(String, String)> = params
        .disabled
        .iter()
        .filter(|e| e.entry_type == ENTRY_TYPE)
        .map(|e| (e.scope_id.clone(), e.name.clone()))
        .collect();
    let configured: BTreeSet<&str> = params
        .entries
        .iter()
        .chain(&params.disabled)
        .map(|e| e.scope_id.as_str())
        .collect();
    for attempt in 1..=COMMIT_ATTEMPTS {
        let read = host
            .kv_get(ARMED_KEY)
            .await
            .map_err(|e| host_error("reading the armed timers (kv.get)", &e))?;
        let stored = read_armed(read.value.as_ref());
        let plan = plan(&stored, &wanted, &disabled);
        let mut armed = plan.keep;
        let mut failures: Vec<RpcError> = Vec::new();
        for w in &plan.arm {
            let call = TimerArmParams {
                recurrence: RECURRENCE.to_string(),
                scope_id: w.scope.clone(),
                key: w.key.clone(),
                spec: w.spec.clone(),
                at: w.at.clone(),
            };
            match host.call_typed(&call).await {
                Ok(_) => {
                    armed
                        .entry(w.scope.clone())
                        .or_default()
                        .insert(w.key.clone(), w.spec.clone());
                }
                Err(e) => {
                    // The timer armed before (if any) is still armed as it was.
                    if let Some(old) = stored.get(&w.scope).and_then(|k| k.get(&w.key)) {
                        armed
                            .entry(w.scope.clone())
                            .or_default()
                            .insert(w.key.clone(), old.clone());
                    }
                    failures.push(host_error(
                        &format!(
                            "scope {}, entry {}: arming timer {} (timer.arm)",
                            w.scope,
                            entry_of(&w.key),
                            w.key
                        ),
                        &e,
                    ));
                }
            }
        }
        for (scope, key, spec) in &plan.cancel {
            let call = TimerCancelParams {
                recurrence: RECURRENCE.to_string(),
                scope_id: scope.clone(),
                key: key.clone(),
            };
            match host.call_typed(&call).await {
                Ok(_) => {}
                Err(e) if e.is(Code::NotFound) => {}
                Err(e) => {
                    // Still armed, as far as anyone knows: keep it listed, so the
                    // next configure cancels it again.
                    armed
                        .entry(scope.clone())
                        .or_default()
                        .insert(key.clone(), spec.clone());
                    let err = host_error(
                        &format!("scope {scope}: cancelling timer {key} (timer.cancel)"),
                        &e,
                    );
                    if configured.contains(scope.as_str()) {
                        failures.push(err);
                    } else {
                        // A scope that is gone from the config: the host may refuse
                        // to address it. That does not hold this config up.
                        eprintln!("schedule: {err}");
                    }
                }
            }
        }
        if armed != stored {
            let commit = KvCommitParams {
                checks: vec![read.check("", ARMED_KEY)],
                puts: vec![KvPut {
                    namespace: String::new(),
                    key: ARMED_KEY.to_string(),
                    value: write_armed(&armed),
                }],
                ..KvCommitParams::default()
            };
            match host.kv_commit(&commit).await {
                Ok(_) => {}
                Err(e) if e.is(Code::Conflict) && attempt < COMMIT_ATTEMPTS => continue,
                Err(e) => return Err(host_error("recording the armed timers (kv.commit)", &e)),
            }
        }
        return match failures.into_iter().next() {
            Some(first) => Err(first),
            None => Ok(ConfigureResult::default()),
        };
    }
    Err(RpcError::new(
        Code::Conflict,
        "recording the armed timers: the KV kept changing under configure",
    ))
}

/// One line per job of a valid entry: `job nightly: cron 0 3 * * * (UTC) on
/// binding agent`.
fn describe_entry(config: &config::EntryConfig) -> Vec<String> {
    if config.jobs.is_empty() {
        return vec![format!("no jobs (binding {})", config.binding)];
    }
    config
        .jobs
        .iter()
        .map(|j| {
            format!(
                "job {}: {} (UTC) on binding {}",
                j.name,
                j.when.describe(),
                config.binding
            )
        })
        .collect()
}

/// Serves `validate` for an entry (kind `extension`) or a route (kind `route`) of
/// type `schedule`; other kinds have nothing to check.
pub fn validate(p: &ValidateParams) -> ValidateResult {
    let diagnostic = |e: config::ConfigError| Diagnostic {
        code: "invalid_config".to_string(),
        message: e.to_string(),
        path: e.pointer,
    };
    let mut result = ValidateResult::default();
    match (p.kind.as_str(), p.type_name.as_str()) {
        (validate_kind::EXTENSION, ENTRY_TYPE) => match parse_entry_config(&p.config) {
            Ok(c) => result.describe = describe_entry(&c),
            Err(e) => result.diagnostics.push(diagnostic(e)),
        },
        (validate_kind::ROUTE, route::HANDLER) => match parse_route_config(&p.config) {
            Ok(c) => result.describe.push(match (c.entry, c.job) {
                (Some(e), Some(j)) => format!("runs of job {j} of entry {e}"),
                (Some(e), None) => format!("runs of every job of entry {e}"),
                (None, Some(j)) => format!("runs of job {j} of every entry"),
                (None, None) => "runs of every job of the scope".to_string(),
            }),
            Err(e) => result.diagnostics.push(diagnostic(e)),
        },
        _ => {}
    }
    result
}

/// The extension, with every handler.
pub fn extension() -> Result<sdk::Extension, String> {
    let ext = sdk::Extension::new(MANIFEST)
        .map_err(|e| e.to_string())?
        .on_configure(|ctx, params| async move { configure(&ctx.host, &params, time::now()).await })
        .on::<RecurrenceNextParams, _, _>(|_ctx, p| async move { recurrence_next(&p) })
        .on::<RouteMatchParams, _, _>(|_ctx, p| async move { Ok(route::route_match(&p)) })
        .on::<RouteSamplesParams, _, _>(|_ctx, p| async move { Ok(route::route_samples(&p)) })
        .on::<ValidateParams, _, _>(|_ctx, p| async move { Ok(validate(&p)) });
    match ext.errors().first() {
        Some(e) => Err(e.to_string()),
        None => Ok(ext),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use protocol::wire::Entry;

    fn entry(scope: &str, name: &str, config: Value) -> Entry {
        Entry {
            scope_id: scope.into(),
            entry_type: ENTRY_TYPE.into(),
            name: name.into(),
            config,
            ..Entry::default()
        }
    }

    fn at(text: &str) -> Secs {
        parse_rfc3339(text).unwrap()
    }

    #[test]
    fn the_manifest_parses_and_every_handler_is_allowed() {
        extension().unwrap();
        let m = protocol::manifest::parse_manifest(MANIFEST.as_bytes()).unwrap();
        assert_eq!(m.name, "schedule");
        assert_eq!(m.command, ["oc-schedule-extension"]);
        let p = &m.provides;
        assert_eq!(p.recurrences.len(), 1);
        assert_eq!(p.recurrences[0].name, RECURRENCE);
        assert!(p
            .families
            .iter()
            .any(|f| f.name == FAMILY && !f.re_derivable));
        assert!(p
            .schemas
            .iter()
            .any(|s| format!("{}.v{}", s.base, s.versions.last().unwrap()) == SCHEMA));
        let kind = p.work_kinds.iter().find(|k| k.name == WORK_KIND).unwrap();
        assert!(kind.timed && !kind.standing && !kind.trigger);
        assert_eq!(kind.handler, route::HANDLER);
        assert!(p
            .extensions
            .iter()
            .any(|e| e.type_name == ENTRY_TYPE && !e.ingress));
        for method in [
            "recurrence.next",
            "timer.arm",
            "timer.cancel",
            "route.match",
            "route.samples",
        ] {
            assert!(m.enables(method), "{method}");
        }
        // Nothing in-transaction besides recurrence.next.
        assert!(!m.enables("work_kind.trigger"));
    }

    #[test]
    fn recurrence_next_for_cron_and_interval() {
        let spec = json!({"entry": "jobs", "job": "nightly", "binding": "agent", "cron": "0 3 * * *", "input": {"n": 1}});
        let r = recurrence_next(&RecurrenceNextParams {
            recurrence: RECURRENCE.into(),
            scope_id: "acme".into(),
            key: "jobs/nightly".into(),
            spec,
            after: "2026-10-25T03:00:00Z".into(),
        })
        .unwrap();
        assert_eq!(r.next, "2026-10-26T03:00:00Z");
        assert_eq!(
            r.payload,
            Some(Payload {
                schema: SCHEMA.into(),
                data: json!({"scope": "acme", "entry": "jobs", "job": "nightly", "binding": "agent",
                    "scheduled_at": "2026-10-25T03:00:00Z", "input": {"n": 1}}),
            })
        );
        let r = recurrence_next(&RecurrenceNextParams {
            recurrence: RECURRENCE.into(),
            key: "jobs/poll".into(),
            spec: json!({"entry": "jobs", "job": "poll", "binding": "agent", "every_s": 90}),
            after: "2026-10-25T23:59:00.250+00:00".into(),
            ..RecurrenceNextParams::default()
        })
        .unwrap();
        assert_eq!(r.next, "2026-10-26T00:00:30Z");
        let payload = r.payload.unwrap();
        assert_eq!(
            payload.data,
            json!({"entry": "jobs", "job": "poll", "binding": "agent", "scheduled_at": "2026-10-25T23:59:00Z"})
        );
    }

    #[test]
    fn recurrence_next_refusals_and_the_end_of_time() {
        let p = |recurrence: &str, spec: Value, after: &str| RecurrenceNextParams {
            recurrence: recurrence.into(),
            key: "jobs/x".into(),
            spec,
            after: after.into(),
            ..RecurrenceNextParams::default()
        };
        let good = json!({"entry": "jobs", "job": "x", "binding": "b", "every_s": 60});
        let e = recurrence_next(&p("other.rec", good.clone(), "2026-10-25T00:00:00Z")).unwrap_err();
        assert_eq!(e.code, protocol::error::INVALID_PARAMS);
        assert!(e
            .message
            .contains("recurrence other.rec is not schedule.job"));
        let e = recurrence_next(&p(
            RECURRENCE,
            json!({"entry": "jobs"}),
            "2026-10-25T00:00:00Z",
        ))
        .unwrap_err();
        assert!(
            e.message
                .contains("the spec of timer jobs/x: /job: is required"),
            "{}",
            e.message
        );
        let e = recurrence_next(&p(RECURRENCE, good.clone(), "soon")).unwrap_err();
        assert!(e.message.contains("after: "), "{}", e.message);
        let r = recurrence_next(&p(RECURRENCE, good, "9999-12-31T23:59:30Z")).unwrap();
        assert_eq!(r.next, "", "past the year 9999 the timer stops");
        assert!(r.payload.is_some());
    }

    #[test]
    fn wanted_timers_and_their_first_fire() {
        let params = ConfigureParams {
            entries: vec![
                entry(
                    "acme",
                    "jobs",
                    json!({"binding": "agent", "jobs": [
                        {"name": "nightly", "cron": "0 3 * * *"},
                        {"name": "poll", "every_s": 60, "input": [1]},
                    ]}),
                ),
                Entry {
                    entry_type: "other".into(),
                    ..entry("acme", "x", json!("not ours"))
                },
            ],
            ..ConfigureParams::default()
        };
        let w = wanted(&params, at("2026-10-25T09:00:10Z")).unwrap();
        assert_eq!(w.len(), 2);
        assert_eq!(
            (w[0].scope.as_str(), w[0].key.as_str()),
            ("acme", "jobs/nightly")
        );
        assert_eq!(w[0].at, "2026-10-26T03:00:00Z");
        assert_eq!(
            w[0].spec,
            json!({"entry": "jobs", "job": "nightly", "binding": "agent", "cron": "0 3 * * *"})
        );
        assert_eq!(w[1].key, "jobs/poll");
        assert_eq!(w[1].at, "2026-10-25T09:01:10Z");
        assert_eq!(w[1].spec["input"], json!([1]));
    }

    #[test]
    fn a_bad_entry_names_scope_entry_and_pointer() {
        let params = ConfigureParams {
            entries: vec![
                entry("acme", "ok", json!({"binding": "b", "jobs": []})),
                entry(
                    "acme",
                    "jobs",
                    json!({"binding": "b", "jobs": [
                        {"name": "a", "every_s": 60},
                        {"name": "b", "cron": "0 3 * * 8"},
                    ]}),
                ),
            ],
            ..ConfigureParams::default()
        };
        let e = wanted(&params, 0).unwrap_err();
        assert_eq!(e.code, protocol::error::INVALID_PARAMS);
        assert_eq!(
            e.message,
            "invalid params: scope acme, entry jobs: /jobs/1/cron: the day-of-week field: 8 is outside 0-7"
        );
        let twice = ConfigureParams {
            entries: vec![
                entry("acme", "jobs", json!({"binding": "b", "jobs": []})),
                entry("acme", "jobs", json!({"binding": "b", "jobs": []})),
            ],
            ..ConfigureParams::default()
        };
        assert!(wanted(&twice, 0)
            .unwrap_err()
            .message
            .contains("scope acme, entry jobs: the entry is named twice"));
    }

    fn w(scope: &str, key: &str, spec: Value) -> Wanted {
        Wanted {
            scope: scope.into(),
            key: key.into(),
            spec,
            at: "2026-10-26T03:00:00Z".into(),
        }
    }

    #[test]
    fn plans_arm_new_and_changed_keep_unchanged_and_cancel_gone() {
        let mut stored = Armed::new();
        let s = |n: u64| json!({"every_s": n});
        stored
            .entry("a".into())
            .or_default()
            .insert("e/same".into(), s(60));
        stored
            .entry("a".into())
            .or_default()
            .insert("e/changed".into(), s(60));
        stored
            .entry("a".into())
            .or_default()
            .insert("e/gone".into(), s(60));
        stored
            .entry("off".into())
            .or_default()
            .insert("e/held".into(), s(60));
        stored
            .entry("off".into())
            .or_default()
            .insert("f/dropped".into(), s(60));
        stored
            .entry("removed".into())
            .or_default()
            .insert("e/x".into(), s(60));
        let wanted = vec![
            w("a", "e/same", s(60)),
            w("a", "e/changed", s(120)),
            w("a", "e/new", s(60)),
        ];
        let disabled: BTreeSet<(String, String)> = [("off".to_string(), "e".to_string())].into();
        let p = plan(&stored, &wanted, &disabled);
        let armed: Vec<_> = p.arm.iter().map(|w| w.key.as_str()).collect();
        assert_eq!(armed, ["e/changed", "e/new"]);
        let cancelled: Vec<_> = p
            .cancel
            .iter()
            .map(|(s, k, _)| format!("{s}:{k}"))
            .collect();
        assert_eq!(cancelled, ["a:e/gone", "off:f/dropped", "removed:e/x"]);
        let kept: Vec<_> = p
            .keep
            .iter()
            .flat_map(|(s, keys)| keys.keys().map(move |k| format!("{s}:{k}")))
            .collect();
        assert_eq!(kept, ["a:e/same", "off:e/held"]);
        // Nothing stored: everything is armed.
        let p = plan(&Armed::new(), &wanted, &BTreeSet::new());
        assert_eq!(p.arm.len(), 3);
        assert!(p.cancel.is_empty() && p.keep.is_empty());
    }

    #[test]
    fn the_armed_record_round_trips() {
        let mut armed = Armed::new();
        armed
            .entry("acme".into())
            .or_default()
            .insert("jobs/nightly".into(), json!({"cron": "0 3 * * *"}));
        armed.entry("empty".into()).or_default();
        let v = write_armed(&armed);
        assert_eq!(
            v,
            json!({"timers": {"acme": {"jobs/nightly": {"cron": "0 3 * * *"}}}})
        );
        armed.remove("empty");
        assert_eq!(read_armed(Some(&v)), armed);
        assert_eq!(read_armed(None), Armed::new());
        assert_eq!(read_armed(Some(&json!([1, 2]))), Armed::new());
    }

    #[test]
    fn validate_describes_and_diagnoses() {
        let r = validate(&ValidateParams {
            kind: validate_kind::EXTENSION.into(),
            type_name: ENTRY_TYPE.into(),
            config: json!({"binding": "agent", "jobs": [
                {"name": "nightly", "cron": "0 3 * * *"}, {"name": "poll", "every_s": 60}]}),
            ..ValidateParams::default()
        });
        assert!(r.diagnostics.is_empty());
        assert_eq!(
            r.describe,
            [
                "job nightly: cron 0 3 * * * (UTC) on binding agent",
                "job poll: every 60s (UTC) on binding agent"
            ]
        );
        let r = validate(&ValidateParams {
            kind: validate_kind::EXTENSION.into(),
            type_name: ENTRY_TYPE.into(),
            config: json!({"binding": "agent", "jobs": [{"name": "x", "cron": "* * *"}]}),
            ..ValidateParams::default()
        });
        assert_eq!(r.diagnostics.len(), 1);
        assert_eq!(r.diagnostics[0].path, "/jobs/0/cron");
        assert_eq!(r.diagnostics[0].code, "invalid_config");
        let r = validate(&ValidateParams {
            kind: validate_kind::ROUTE.into(),
            type_name: route::HANDLER.into(),
            config: json!({"entry": "jobs"}),
            ..ValidateParams::default()
        });
        assert_eq!(r.describe, ["runs of every job of entry jobs"]);
        let r = validate(&ValidateParams {
            kind: validate_kind::ROUTE.into(),
            type_name: route::HANDLER.into(),
            config: json!({"nope": 1}),
            ..ValidateParams::default()
        });
        assert_eq!(r.diagnostics[0].path, "/nope");
    }
}
