//! `route.match` and `route.samples` for handler `schedule`: free of side effects,
//! decided from their input alone.

use crate::config::{parse_entry_config, parse_route_config, RouteConfig};
use crate::time::{format_rfc3339, parse_rfc3339, short_time};
use crate::{run_payload, ENTRY_TYPE, FAMILY, SCHEMA, WORK_KIND};
use protocol::wire::{
    clip_line, Event, RouteMatchParams, RouteMatchResult, RouteSample, RouteSamplesParams,
    RouteSamplesResult, WorkDisplay, MAX_DISPLAY_TITLE_BYTES,
};
use serde_json::Value;

/// The route handler's name.
pub const HANDLER: &str = "schedule";
/// Who a run's Work says asked for it.
pub const REQUESTER: &str = "schedule";

/// True for the Event types of family `schedule.run`: `schedule.run` and
/// `schedule.run.<anything>`.
pub fn is_run_type(event_type: &str) -> bool {
    event_type == FAMILY
        || event_type
            .strip_prefix(FAMILY)
            .is_some_and(|rest| rest.starts_with('.') && rest.len() > 1)
}

/// The correlation key of one run: `schedule:<scope>/<entry>/<job>@<scheduled_at>`,
/// so each run is a Work of its own.
pub fn run_key(scope: &str, entry: &str, job: &str, scheduled_at: &str) -> String {
    format!("schedule:{scope}/{entry}/{job}@{scheduled_at}")
}

fn no(reason: impl Into<String>) -> RouteMatchResult {
    RouteMatchResult {
        matched: false,
        reason: reason.into(),
        ..RouteMatchResult::default()
    }
}

fn text<'a>(data: &'a Value, key: &str) -> Option<&'a str> {
    data.get(key)
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
}

/// Why the route's filters turn a run away, if they do.
fn filtered(config: &RouteConfig, entry: &str, job: &str) -> Option<String> {
    if let Some(wanted) = &config.entry {
        if wanted != entry {
            return Some(format!(
                "job {job} of entry {entry}, but the route takes entry {wanted}"
            ));
        }
    }
    if let Some(wanted) = &config.job {
        if wanted != job {
            return Some(format!(
                "job {job} of entry {entry}, but the route takes job {wanted}"
            ));
        }
    }
    None
}

/// Decides whether the route takes the Event: a `schedule.run` Event in schema
/// `schedule.run.v1`, of the route's `entry` and `job` when it names them, whose
/// job runs on the route's binding (when both name one). A match goes to a Work of
/// its own per run (key [`run_key`]), of kind `schedule-job`, displayed with the
/// job's name as title, the scheduled time as ref (`03:00Z`) and `schedule` as
/// requester.
pub fn route_match(p: &RouteMatchParams) -> RouteMatchResult {
    if p.handler != HANDLER {
        return no(format!("handler {} is not {HANDLER}", p.handler));
    }
    let event = &p.event;
    if !is_run_type(&event.event_type) {
        return no(format!(
            "event type {} is not a scheduled run ({FAMILY})",
            event.event_type
        ));
    }
    if event.payload.schema != SCHEMA {
        let schema = if event.payload.schema.is_empty() {
            "(none)"
        } else {
            event.payload.schema.as_str()
        };
        return no(format!("payload schema {schema} is not {SCHEMA}"));
    }
    let config = match parse_route_config(&p.route.config) {
        Ok(c) => c,
        Err(e) => return no(format!("the route's config is not valid: {e}")),
    };
    let data = &event.payload.data;
    let (Some(entry), Some(job)) = (text(data, "entry"), text(data, "job")) else {
        return no("the run's payload names no entry or no job");
    };
    let Some(scheduled) = text(data, "scheduled_at") else {
        return no(format!(
            "the run of job {job} of entry {entry} has no scheduled_at"
        ));
    };
    let Ok(scheduled_secs) = parse_rfc3339(scheduled) else {
        return no(format!(
            "the run of job {job} of entry {entry} has a scheduled_at that is not an RFC 3339 time"
        ));
    };
    if let Some(why) = filtered(&config, entry, job) {
        return no(why);
    }
    let binding = text(data, "binding").unwrap_or_default();
    if !binding.is_empty() && !p.route.binding.is_empty() && binding != p.route.binding {
        return no(format!(
            "job {job} of entry {entry} runs on binding {binding}, but the route binds {}",
            p.route.binding
        ));
    }
    let scope = [event.scope_id.as_str(), p.scope.id.as_str()]
        .into_iter()
        .chain(text(data, "scope"))
        .find(|s| !s.is_empty())
        .unwrap_or_default();
    let at = format_rfc3339(scheduled_secs).unwrap_or_else(|| scheduled.to_string());
    let display = WorkDisplay {
        title: clip_line(job, MAX_DISPLAY_TITLE_BYTES),
        reference: short_time(scheduled_secs),
        requester: REQUESTER.to_string(),
        links: Vec::new(),
    };
    RouteMatchResult {
        matched: true,
        keys: vec![run_key(scope, entry, job, &at)],
        kind: WORK_KIND.to_string(),
        reason: format!("run of job {job} of entry {entry} scheduled at {at}"),
        display: display.validate().is_ok().then_some(display),
        ..RouteMatchResult::default()
    }
}

/// Serves `route.samples`: one sample Event per job of the scope's `schedule`
/// entries that the route's filters let through, as it would fire next after the
/// host's `now`. Entries whose config is not valid give none.
pub fn route_samples(p: &RouteSamplesParams) -> RouteSamplesResult {
    let mut result = RouteSamplesResult::default();
    if p.handler != HANDLER {
        return result;
    }
    let Ok(config) = parse_route_config(&p.route.config) else {
        return result;
    };
    let Ok(now) = parse_rfc3339(&p.now) else {
        return result;
    };
    for e in p
        .scope
        .entries
        .iter()
        .filter(|e| e.entry_type == ENTRY_TYPE)
    {
        let Ok(entry) = parse_entry_config(&e.config) else {
            continue;
        };
        for job in &entry.jobs {
            if filtered(&config, &e.name, &job.name).is_some() {
                continue;
            }
            let Some(at) = job.when.next_after(now).and_then(format_rfc3339) else {
                continue;
            };
            let spec = crate::config::TimerSpec::new(&e.name, &entry.binding, job);
            let id = format!("{}/{}", e.name, job.name);
            result.samples.push(RouteSample {
                id: id.clone(),
                title: format!("{}: the run at {at} ({})", job.name, job.when.describe()),
                event: Event {
                    id: format!("sample:{id}@{at}"),
                    event_type: FAMILY.to_string(),
                    source: format!("{HANDLER}/{}", e.name),
                    delivery_id: format!("{id}@{at}"),
                    scope_id: p.scope.id.clone(),
                    payload: run_payload(&p.scope.id, &spec, &at),
                    occurred_at: at.clone(),
                    ..Event::default()
                },
            });
        }
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;
    use protocol::wire::{Entry, Payload, Route, Scope};
    use serde_json::json;

    fn params(event_type: &str, data: Value, route: Value, binding: &str) -> RouteMatchParams {
        RouteMatchParams {
            handler: HANDLER.into(),
            route: Route {
                handler: HANDLER.into(),
                binding: binding.into(),
                config: route,
            },
            scope: Scope {
                id: "acme".into(),
                ..Scope::default()
            },
            event: Event {
                id: "ev1".into(),
                event_type: event_type.into(),
                scope_id: "acme".into(),
                payload: Payload {
                    schema: SCHEMA.into(),
                    data,
                },
                ..Event::default()
            },
            ..RouteMatchParams::default()
        }
    }

    fn data() -> Value {
        json!({
            "scope": "acme", "entry": "jobs", "job": "nightly", "binding": "agent",
            "scheduled_at": "2026-10-25T03:00:00Z", "input": {"report": "daily"},
        })
    }

    #[test]
    fn a_run_matches_as_its_own_work() {
        let r = route_match(&params("schedule.run", data(), Value::Null, "agent"));
        assert!(r.matched, "{}", r.reason);
        assert_eq!(
            r.keys,
            vec!["schedule:acme/jobs/nightly@2026-10-25T03:00:00Z".to_string()]
        );
        assert_eq!(r.kind, "schedule-job");
        assert_eq!(
            r.reason,
            "run of job nightly of entry jobs scheduled at 2026-10-25T03:00:00Z"
        );
        let d = r.display.unwrap();
        assert_eq!(d.title, "nightly");
        assert_eq!(d.reference, "03:00Z");
        assert_eq!(d.requester, "schedule");
        assert!(d.links.is_empty());
        // Another occurrence: another key.
        let mut later = data();
        later["scheduled_at"] = json!("2026-10-26T03:00:00Z");
        let r2 = route_match(&params("schedule.run.nightly", later, Value::Null, ""));
        assert!(r2.matched, "{}", r2.reason);
        assert_ne!(r.keys, r2.keys);
    }

    #[test]
    fn the_scheduled_time_is_normalized_in_the_key() {
        let mut d = data();
        d["scheduled_at"] = json!("2026-10-25T05:00:00+02:00");
        let r = route_match(&params("schedule.run", d, Value::Null, "agent"));
        assert_eq!(
            r.keys,
            vec!["schedule:acme/jobs/nightly@2026-10-25T03:00:00Z".to_string()]
        );
        let mut d = data();
        d["scheduled_at"] = json!("2026-10-25T03:00:30Z");
        let r = route_match(&params("schedule.run", d, Value::Null, "agent"));
        assert_eq!(r.display.unwrap().reference, "03:00:30Z");
    }

    #[test]
    fn filters_and_gates_say_why() {
        let r = route_match(&params(
            "schedule.run",
            data(),
            json!({"entry": "jobs"}),
            "",
        ));
        assert!(r.matched);
        let r = route_match(&params(
            "schedule.run",
            data(),
            json!({"entry": "other"}),
            "",
        ));
        assert!(!r.matched);
        assert_eq!(
            r.reason,
            "job nightly of entry jobs, but the route takes entry other"
        );
        assert!(r.keys.is_empty() && r.display.is_none() && r.kind.is_empty());
        let r = route_match(&params("schedule.run", data(), json!({"job": "poll"}), ""));
        assert_eq!(
            r.reason,
            "job nightly of entry jobs, but the route takes job poll"
        );
        let r = route_match(&params("schedule.run", data(), Value::Null, "deploy"));
        assert!(!r.matched);
        assert_eq!(
            r.reason,
            "job nightly of entry jobs runs on binding agent, but the route binds deploy"
        );
        let r = route_match(&params("schedule.run", data(), json!({"entyr": "x"}), ""));
        assert!(!r.matched);
        assert!(r.reason.contains("/entyr"), "{}", r.reason);

        for other in ["github.push", "schedule.runs", "schedule.run.", "schedule"] {
            let r = route_match(&params(other, data(), Value::Null, ""));
            assert!(!r.matched, "{other}");
            assert_eq!(
                r.reason,
                format!("event type {other} is not a scheduled run (schedule.run)")
            );
        }
        let mut p = params("schedule.run", data(), Value::Null, "");
        p.event.payload.schema = "webhook.delivery.v1".into();
        let r = route_match(&p);
        assert!(!r.matched);
        assert_eq!(
            r.reason,
            "payload schema webhook.delivery.v1 is not schedule.run.v1"
        );
        p.event.payload.schema = String::new();
        assert_eq!(
            route_match(&p).reason,
            "payload schema (none) is not schedule.run.v1"
        );

        let r = route_match(&params(
            "schedule.run",
            json!({"entry": "jobs"}),
            Value::Null,
            "",
        ));
        assert_eq!(r.reason, "the run's payload names no entry or no job");
        let mut d = data();
        d["scheduled_at"] = json!("yesterday");
        let r = route_match(&params("schedule.run", d, Value::Null, ""));
        assert!(!r.matched);
        assert!(r.reason.contains("not an RFC 3339 time"), "{}", r.reason);

        let mut p = params("schedule.run", data(), Value::Null, "");
        p.handler = "webhook".into();
        assert_eq!(route_match(&p).reason, "handler webhook is not schedule");
    }

    #[test]
    fn samples_one_per_job() {
        let p = RouteSamplesParams {
            handler: HANDLER.into(),
            route: Route {
                handler: HANDLER.into(),
                config: json!({"entry": "jobs"}),
                ..Route::default()
            },
            scope: Scope {
                id: "acme".into(),
                entries: vec![
                    Entry {
                        scope_id: "acme".into(),
                        entry_type: ENTRY_TYPE.into(),
                        name: "jobs".into(),
                        config: json!({"binding": "agent", "jobs": [
                            {"name": "nightly", "cron": "0 3 * * *"},
                            {"name": "poll", "every_s": 60, "input": {"q": 1}},
                        ]}),
                        ..Entry::default()
                    },
                    Entry {
                        scope_id: "acme".into(),
                        entry_type: ENTRY_TYPE.into(),
                        name: "other".into(),
                        config: json!({"binding": "agent", "jobs": [{"name": "x", "every_s": 60}]}),
                        ..Entry::default()
                    },
                ],
                ..Scope::default()
            },
            now: "2026-10-25T09:00:00Z".into(),
        };
        let s = route_samples(&p);
        let ids: Vec<_> = s.samples.iter().map(|s| s.id.as_str()).collect();
        assert_eq!(ids, ["jobs/nightly", "jobs/poll"]);
        let nightly = &s.samples[0].event;
        assert_eq!(nightly.payload.schema, SCHEMA);
        assert_eq!(
            nightly.payload.data["scheduled_at"],
            json!("2026-10-26T03:00:00Z")
        );
        assert_eq!(
            s.samples[1].event.payload.data["scheduled_at"],
            json!("2026-10-25T09:01:00Z")
        );
        assert_eq!(s.samples[1].event.payload.data["input"], json!({"q": 1}));
        // Each sample matches the route it was made for.
        for sample in &s.samples {
            let r = route_match(&RouteMatchParams {
                handler: HANDLER.into(),
                route: p.route.clone(),
                scope: p.scope.clone(),
                event: sample.event.clone(),
                work: None,
            });
            assert!(r.matched, "{}", r.reason);
        }
    }
}
