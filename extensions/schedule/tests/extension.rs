#![allow(clippy::unwrap_used)]
//! The real `oc-schedule-extension` binary as a child process, driven over its
//! stdin and stdout as the host drives it: initialize, configure (with `timer.arm`,
//! `timer.cancel`, `kv.get` and `kv.commit` served back by a recording host with a
//! small in-memory KV), recurrence.next, route.match, route.samples and validate.

use protocol::wire::{RecurrenceNextResult, RouteMatchResult, RouteSamplesResult};
use protocol::{connect, CallError, Code, FnHandler, Options, Peer, Request, RpcError};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::process::{Child, Command};

const EXE: &str = env!("CARGO_BIN_EXE_oc-schedule-extension");
/// Only against hangs: nothing here measures time.
const HANG: Duration = Duration::from_secs(60);

async fn within<F: std::future::Future>(f: F) -> F::Output {
    tokio::time::timeout(HANG, f).await.expect("hung")
}

/// The host's side: every call the extension made, and its KV (key → value,
/// version).
#[derive(Default)]
struct HostState {
    calls: Vec<(String, Value)>,
    kv: BTreeMap<String, (Value, u64)>,
    next_version: u64,
    /// Answer `timer.cancel` of this key with this error code.
    refuse_cancel: Option<(String, Code)>,
}

type Shared = Arc<Mutex<HostState>>;

impl HostState {
    fn take_calls(&mut self) -> Vec<(String, Value)> {
        std::mem::take(&mut self.calls)
    }
}

fn serve(state: &Shared, request: &Request) -> Result<Value, RpcError> {
    let p = request.params_value()?;
    let mut s = state.lock().unwrap();
    s.calls.push((request.method.clone(), p.clone()));
    match request.method.as_str() {
        "kv.get" => {
            assert_eq!(p.get("namespace"), None, "only the own namespace: {p}");
            let key = p["key"].as_str().unwrap();
            Ok(match s.kv.get(key) {
                Some((value, version)) => json!({"value": value, "version": version.to_string()}),
                None => json!({}),
            })
        }
        "kv.commit" => {
            for check in p["checks"].as_array().into_iter().flatten() {
                let key = check["key"].as_str().unwrap();
                let held = s.kv.get(key).map(|(_, v)| v.to_string());
                let ok = match check.get("version").and_then(Value::as_str) {
                    Some(v) => held.as_deref() == Some(v),
                    None => check["absent"] == json!(true) && held.is_none(),
                };
                if !ok {
                    return Err(RpcError::new(
                        Code::Conflict,
                        format!("check of {key} failed"),
                    ));
                }
            }
            for put in p["puts"].as_array().into_iter().flatten() {
                s.next_version += 1;
                let version = s.next_version;
                s.kv.insert(
                    put["key"].as_str().unwrap().to_string(),
                    (put["value"].clone(), version),
                );
            }
            for del in p["deletes"].as_array().into_iter().flatten() {
                s.kv.remove(del["key"].as_str().unwrap());
            }
            Ok(json!({}))
        }
        "timer.arm" => Ok(json!({"timer_id": format!("t-{}", s.calls.len()), "due_at": p["at"]})),
        "timer.cancel" => {
            if let Some((key, code)) = &s.refuse_cancel {
                if p["key"].as_str() == Some(key.as_str()) {
                    return Err(RpcError::new(*code, "refused by the test host"));
                }
            }
            Ok(json!({"cancelled": true}))
        }
        other => Err(RpcError::method_not_found(other)),
    }
}

struct Running {
    _child: Child,
    peer: Peer,
}

/// Starts the extension against `state` and initializes it.
async fn start(state: &Shared) -> Running {
    let mut child = Command::new(EXE)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let stdin = child.stdin.take().unwrap();
    let stdout = child.stdout.take().unwrap();
    let served = Arc::clone(state);
    let host = FnHandler(move |request: Request| {
        let served = Arc::clone(&served);
        async move { serve(&served, &request) }
    });
    let peer = connect(stdout, stdin, host, Options::named("schedule extension"));
    let init = within(peer.call(
        "initialize",
        &json!({
            "protocol_versions": [1],
            "host": {"name": "test-host", "version": "0"},
            "state_dir": std::env::temp_dir(),
        }),
    ))
    .await
    .unwrap();
    assert_eq!(init["protocol_version"], 1);
    let file: Value = serde_json::from_str(oc_schedule::MANIFEST).unwrap();
    assert_eq!(init["manifest"], file);
    Running {
        _child: child,
        peer,
    }
}

fn unix_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}

/// RFC 3339 in UTC of unix seconds, written here independently of the crate.
fn rfc3339(secs: i64) -> String {
    let days = secs.div_euclid(86_400);
    let tod = secs.rem_euclid(86_400);
    // Civil from days (Hinnant), once more, so the test does not trust the crate.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        tod / 3600,
        tod % 3600 / 60,
        tod % 60
    )
}

/// The next 03:00:00Z strictly after `secs`.
fn next_three_am(secs: i64) -> i64 {
    let today = secs.div_euclid(86_400) * 86_400 + 3 * 3600;
    if today > secs {
        today
    } else {
        today + 86_400
    }
}

fn entry(scope: &str, name: &str, jobs: Value) -> Value {
    json!({"scope_id": scope, "type": "schedule", "name": name,
           "config": {"binding": "agent", "jobs": jobs}})
}

fn two_jobs() -> Value {
    json!([
        {"name": "nightly", "cron": "0 3 * * *", "input": {"report": "daily"}},
        {"name": "poll", "every_s": 60},
    ])
}

async fn configure(ext: &Running, params: Value) -> Result<Value, CallError> {
    within(ext.peer.call("configure", &params)).await
}

fn calls_of<'a>(calls: &'a [(String, Value)], method: &str) -> Vec<&'a Value> {
    calls
        .iter()
        .filter(|(m, _)| m == method)
        .map(|(_, p)| p)
        .collect()
}

fn armed_record(state: &Shared) -> Value {
    state
        .lock()
        .unwrap()
        .kv
        .get("armed")
        .map(|(v, _)| v.clone())
        .unwrap_or(Value::Null)
}

#[tokio::test]
async fn configure_arms_each_job_then_cancels_the_one_removed() {
    let state = Shared::default();
    let ext = start(&state).await;

    let before = unix_now();
    let answer = configure(
        &ext,
        json!({"entries": [entry("acme", "jobs", two_jobs())], "kv": {"stored": 0, "declared": 1}}),
    )
    .await
    .unwrap();
    let after = unix_now();
    assert_eq!(answer, json!({}), "registers no sources or webhooks");

    let calls = state.lock().unwrap().take_calls();
    let arms = calls_of(&calls, "timer.arm");
    assert_eq!(arms.len(), 2, "{calls:?}");
    let nightly = arms.iter().find(|a| a["key"] == "jobs/nightly").unwrap();
    assert_eq!(nightly["recurrence"], "schedule.job");
    assert_eq!(nightly["scope_id"], "acme");
    assert_eq!(
        nightly["spec"],
        json!({"entry": "jobs", "job": "nightly", "binding": "agent",
               "cron": "0 3 * * *", "input": {"report": "daily"}})
    );
    let at = nightly["at"].as_str().unwrap();
    assert!(
        at == rfc3339(next_three_am(before)) || at == rfc3339(next_three_am(after)),
        "nightly armed at {at}"
    );
    let poll = arms.iter().find(|a| a["key"] == "jobs/poll").unwrap();
    assert_eq!(
        poll["spec"],
        json!({"entry": "jobs", "job": "poll", "binding": "agent", "every_s": 60})
    );
    let at = poll["at"].as_str().unwrap();
    assert!(
        (before + 60..=after + 60).any(|t| rfc3339(t) == at),
        "poll armed at {at}, not a minute after {}",
        rfc3339(before)
    );
    assert!(calls_of(&calls, "timer.cancel").is_empty());
    // What was armed is recorded.
    assert_eq!(calls_of(&calls, "kv.commit").len(), 1);
    let record = armed_record(&state);
    assert_eq!(record["timers"]["acme"]["jobs/nightly"], nightly["spec"]);
    assert_eq!(record["timers"]["acme"]["jobs/poll"], poll["spec"]);

    // The same config again arms nothing (an interval job keeps its next run)
    // and writes nothing.
    configure(
        &ext,
        json!({"entries": [entry("acme", "jobs", two_jobs())]}),
    )
    .await
    .unwrap();
    let calls = state.lock().unwrap().take_calls();
    assert!(calls_of(&calls, "timer.arm").is_empty(), "{calls:?}");
    assert!(calls_of(&calls, "timer.cancel").is_empty(), "{calls:?}");
    assert!(calls_of(&calls, "kv.commit").is_empty(), "{calls:?}");

    // One job removed, the other's input changed: a cancel and a re-arm.
    configure(
        &ext,
        json!({"entries": [entry("acme", "jobs", json!([
            {"name": "nightly", "cron": "0 3 * * *", "input": {"report": "weekly"}},
        ]))]}),
    )
    .await
    .unwrap();
    let calls = state.lock().unwrap().take_calls();
    let cancels = calls_of(&calls, "timer.cancel");
    assert_eq!(
        cancels,
        [&json!({"recurrence": "schedule.job", "scope_id": "acme", "key": "jobs/poll"})]
    );
    let arms = calls_of(&calls, "timer.arm");
    assert_eq!(arms.len(), 1);
    assert_eq!(arms[0]["key"], "jobs/nightly");
    assert_eq!(arms[0]["spec"]["input"], json!({"report": "weekly"}));
    let record = armed_record(&state);
    assert_eq!(
        record["timers"]["acme"]
            .as_object()
            .unwrap()
            .keys()
            .collect::<Vec<_>>(),
        ["jobs/nightly"]
    );
}

#[tokio::test]
async fn a_restarted_process_cancels_what_an_earlier_one_armed() {
    let state = Shared::default();
    {
        let ext = start(&state).await;
        configure(
            &ext,
            json!({"entries": [entry("acme", "jobs", two_jobs())]}),
        )
        .await
        .unwrap();
    }
    state.lock().unwrap().take_calls();
    // A new process, the same host KV: the entry is gone from the config.
    let ext = start(&state).await;
    configure(&ext, json!({"entries": []})).await.unwrap();
    let calls = state.lock().unwrap().take_calls();
    let mut cancelled: Vec<_> = calls_of(&calls, "timer.cancel")
        .iter()
        .map(|c| c["key"].as_str().unwrap().to_string())
        .collect();
    cancelled.sort();
    assert_eq!(cancelled, ["jobs/nightly", "jobs/poll"]);
    assert_eq!(armed_record(&state), json!({"timers": {}}));
}

#[tokio::test]
async fn disabled_scopes_keep_their_timers() {
    let state = Shared::default();
    let ext = start(&state).await;
    configure(
        &ext,
        json!({"entries": [entry("acme", "jobs", two_jobs()), entry("beta", "jobs", two_jobs())]}),
    )
    .await
    .unwrap();
    state.lock().unwrap().take_calls();

    // Scope beta disabled, with a job added there: nothing cancelled, nothing new
    // armed for it.
    configure(
        &ext,
        json!({
            "entries": [entry("acme", "jobs", two_jobs())],
            "disabled": [entry("beta", "jobs", json!([
                {"name": "nightly", "cron": "0 3 * * *", "input": {"report": "daily"}},
                {"name": "poll", "every_s": 60},
                {"name": "extra", "every_s": 60},
            ]))],
        }),
    )
    .await
    .unwrap();
    let calls = state.lock().unwrap().take_calls();
    assert!(calls_of(&calls, "timer.arm").is_empty(), "{calls:?}");
    assert!(calls_of(&calls, "timer.cancel").is_empty(), "{calls:?}");
    let record = armed_record(&state);
    assert_eq!(record["timers"]["beta"].as_object().unwrap().len(), 2);

    // Scope beta removed altogether: its timers are cancelled, and a refusal from
    // the host for a scope no longer configured does not fail configure.
    state.lock().unwrap().refuse_cancel = Some(("jobs/poll".into(), Code::Unauthorized));
    configure(
        &ext,
        json!({"entries": [entry("acme", "jobs", two_jobs())]}),
    )
    .await
    .unwrap();
    let calls = state.lock().unwrap().take_calls();
    let cancels = calls_of(&calls, "timer.cancel");
    assert_eq!(cancels.len(), 2, "{calls:?}");
    assert!(cancels.iter().all(|c| c["scope_id"] == "beta"));
    // The refused one stays listed, to be cancelled again next time.
    let record = armed_record(&state);
    assert_eq!(
        record["timers"]["beta"]
            .as_object()
            .unwrap()
            .keys()
            .collect::<Vec<_>>(),
        ["jobs/poll"]
    );

    // In a configured scope, a refused cancel fails configure (and stays listed).
    state.lock().unwrap().refuse_cancel = Some(("jobs/nightly".into(), Code::Unavailable));
    let e = configure(&ext, json!({"entries": [entry("acme", "jobs", json!([]))]}))
        .await
        .unwrap_err();
    assert!(e.is(Code::Unavailable), "{e}");
    assert!(
        e.to_string()
            .contains("scope acme: cancelling timer jobs/nightly"),
        "{e}"
    );
    let record = armed_record(&state);
    assert_eq!(
        record["timers"]["acme"]
            .as_object()
            .unwrap()
            .keys()
            .collect::<Vec<_>>(),
        ["jobs/nightly"]
    );
    // Once the host takes it, it is gone.
    state.lock().unwrap().refuse_cancel = None;
    configure(&ext, json!({"entries": [entry("acme", "jobs", json!([]))]}))
        .await
        .unwrap();
    assert!(armed_record(&state)["timers"].get("acme").is_none());
}

#[tokio::test]
async fn a_bad_config_fails_configure_naming_the_field_and_arms_nothing() {
    let state = Shared::default();
    let ext = start(&state).await;
    let e = configure(
        &ext,
        json!({"entries": [entry("acme", "jobs", json!([
            {"name": "nightly", "cron": "0 3 * * *"},
            {"name": "weekly", "cron": "0 3 * * 8"},
        ]))]}),
    )
    .await
    .unwrap_err();
    let rpc = e.rpc().unwrap();
    assert_eq!(rpc.code, protocol::error::INVALID_PARAMS);
    assert!(
        rpc.message.contains(
            "scope acme, entry jobs: /jobs/1/cron: the day-of-week field: 8 is outside 0-7"
        ),
        "{}",
        rpc.message
    );
    // A dry run checks and does nothing else.
    configure(
        &ext,
        json!({"dry_run": true, "entries": [entry("acme", "jobs", two_jobs())]}),
    )
    .await
    .unwrap();
    assert!(state.lock().unwrap().take_calls().is_empty());
}

#[tokio::test]
async fn recurrence_next_and_route_match_make_one_work_per_run() {
    let state = Shared::default();
    let ext = start(&state).await;

    let cron: RecurrenceNextResult = within(ext.peer.call_as(
        "recurrence.next",
        &json!({
            "recurrence": "schedule.job", "scope_id": "acme", "key": "jobs/nightly",
            "spec": {"entry": "jobs", "job": "nightly", "binding": "agent",
                     "cron": "0 3 * * *", "input": {"report": "daily"}},
            "after": "2028-02-28T03:00:00Z",
        }),
    ))
    .await
    .unwrap();
    assert_eq!(cron.next, "2028-02-29T03:00:00Z");
    let payload = cron.payload.unwrap();
    assert_eq!(payload.schema, "schedule.run.v1");
    assert_eq!(
        payload.data,
        json!({"scope": "acme", "entry": "jobs", "job": "nightly", "binding": "agent",
               "scheduled_at": "2028-02-28T03:00:00Z", "input": {"report": "daily"}})
    );

    let interval: RecurrenceNextResult = within(ext.peer.call_as(
        "recurrence.next",
        &json!({
            "recurrence": "schedule.job", "scope_id": "acme", "key": "jobs/poll",
            "spec": {"entry": "jobs", "job": "poll", "binding": "agent", "every_s": 60},
            "after": "2026-12-31T23:59:30Z",
        }),
    ))
    .await
    .unwrap();
    assert_eq!(interval.next, "2027-01-01T00:00:30Z");
    assert_eq!(
        interval.payload.as_ref().unwrap().data["scheduled_at"],
        "2026-12-31T23:59:30Z"
    );
    // Pure: the same question, the same answer; and no callback was made.
    let again: RecurrenceNextResult = within(ext.peer.call_as(
        "recurrence.next",
        &json!({
            "recurrence": "schedule.job", "scope_id": "acme", "key": "jobs/poll",
            "spec": {"entry": "jobs", "job": "poll", "binding": "agent", "every_s": 60},
            "after": "2026-12-31T23:59:30Z",
        }),
    ))
    .await
    .unwrap();
    assert_eq!(again, interval);
    assert!(state.lock().unwrap().take_calls().is_empty());

    // The run's Event, as the host accepts it from the occurrence.
    let event = |payload: &protocol::wire::Payload, id: &str| {
        json!({"id": id, "type": "schedule.run", "source": "schedule", "scope_id": "acme",
               "payload": payload})
    };
    let route_match = |event: Value, route: Value| {
        let peer = ext.peer.clone();
        async move {
            within(peer.call_as::<_, RouteMatchResult>(
                "route.match",
                &json!({"handler": "schedule", "route": route,
                        "scope": {"id": "acme"}, "event": event}),
            ))
            .await
            .unwrap()
        }
    };
    let m = route_match(
        event(&payload, "ev1"),
        json!({"handler": "schedule", "binding": "agent"}),
    )
    .await;
    assert!(m.matched, "{}", m.reason);
    assert_eq!(m.keys, ["schedule:acme/jobs/nightly@2028-02-28T03:00:00Z"]);
    assert_eq!(m.kind, "schedule-job");
    let display = m.display.unwrap();
    assert_eq!(display.title, "nightly");
    assert_eq!(display.reference, "03:00Z");
    assert_eq!(display.requester, "schedule");

    // The next run is a Work of its own.
    let next = oc_schedule::recurrence_next(&protocol::wire::RecurrenceNextParams {
        recurrence: "schedule.job".into(),
        scope_id: "acme".into(),
        key: "jobs/nightly".into(),
        spec: json!({"entry": "jobs", "job": "nightly", "binding": "agent", "cron": "0 3 * * *"}),
        after: cron.next.clone(),
    })
    .unwrap();
    let m2 = route_match(
        event(next.payload.as_ref().unwrap(), "ev2"),
        json!({"handler": "schedule"}),
    )
    .await;
    assert!(m2.matched, "{}", m2.reason);
    assert_eq!(m2.keys, ["schedule:acme/jobs/nightly@2028-02-29T03:00:00Z"]);

    // Filters, bindings and foreign schemas do not match, and say why.
    let m = route_match(
        event(&payload, "ev1"),
        json!({"handler": "schedule", "config": {"entry": "other"}}),
    )
    .await;
    assert!(!m.matched);
    assert_eq!(
        m.reason,
        "job nightly of entry jobs, but the route takes entry other"
    );
    let m = route_match(
        event(&payload, "ev1"),
        json!({"handler": "schedule", "binding": "deploy"}),
    )
    .await;
    assert!(!m.matched);
    assert!(m.reason.contains("runs on binding agent"), "{}", m.reason);
    let foreign = protocol::wire::Payload {
        schema: "webhook.delivery.v1".into(),
        data: json!({"entry": "jobs"}),
    };
    let m = route_match(event(&foreign, "ev3"), json!({"handler": "schedule"})).await;
    assert!(!m.matched);
    assert_eq!(
        m.reason,
        "payload schema webhook.delivery.v1 is not schedule.run.v1"
    );
}

#[tokio::test]
async fn samples_and_validate_over_the_wire() {
    let state = Shared::default();
    let ext = start(&state).await;
    let samples: RouteSamplesResult = within(ext.peer.call_as(
        "route.samples",
        &json!({
            "handler": "schedule", "route": {"handler": "schedule"},
            "scope": {"id": "acme", "entries": [entry("acme", "jobs", two_jobs())]},
            "now": "2026-10-25T09:00:00Z",
        }),
    ))
    .await
    .unwrap();
    let got: Vec<_> = samples
        .samples
        .iter()
        .map(|s| {
            (
                s.id.as_str(),
                s.event.payload.data["scheduled_at"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        got,
        [
            ("jobs/nightly", "2026-10-26T03:00:00Z"),
            ("jobs/poll", "2026-10-25T09:01:00Z")
        ]
    );

    let v = within(ext.peer.call(
        "validate",
        &json!({"kind": "extension", "type": "schedule", "name": "jobs",
                "config": {"binding": "agent", "jobs": [{"name": "a", "every_s": 5}]}}),
    ))
    .await
    .unwrap();
    assert_eq!(v["diagnostics"][0]["path"], "/jobs/0/every_s");
    assert_eq!(
        v["diagnostics"][0]["message"],
        "/jobs/0/every_s: 5 is outside 10-31622400 seconds"
    );
    let v = within(ext.peer.call(
        "validate",
        &json!({"kind": "extension", "type": "schedule", "name": "jobs",
                "config": {"binding": "agent", "jobs": [{"name": "a", "cron": "@daily"}]}}),
    ))
    .await
    .unwrap();
    assert_eq!(
        v,
        json!({"describe": ["job a: cron @daily (UTC) on binding agent"]})
    );

    // recurrence.next refuses what it cannot compute.
    let e = within(ext.peer.call(
        "recurrence.next",
        &json!({"recurrence": "schedule.job", "key": "k", "spec": {"entry": "e"},
                "after": "2026-10-25T09:00:00Z"}),
    ))
    .await
    .unwrap_err();
    assert_eq!(e.rpc().unwrap().code, protocol::error::INVALID_PARAMS);
}
