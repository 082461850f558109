#![allow(clippy::unwrap_used)]
//! Metrics for the whole suite (issue 46 item 4), with real daemons: a few webhooks
//! each run a shell Work, then ingressd's `/metrics` (and webd's) is scraped and
//! parsed with a real Prometheus parser, Python's `prometheus_client`
//! (`text_string_to_metric_families`; Debian's `python3-prometheus-client`). Every
//! daemon's families are there, with values that fit what was done.

mod common;
use common::*;

use oc_systest::{Daemon, Suite};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::io::Write;
use std::process::{Command, Stdio};

/// Parses the text on stdin with prometheus_client's parser and prints every
/// sample as one JSON line: the family's name and type, the sample's name,
/// labels and value.
const PARSE: &str = r#"
import json, sys
from prometheus_client.parser import text_string_to_metric_families
for family in text_string_to_metric_families(sys.stdin.read()):
    for s in family.samples:
        print(json.dumps({"family": family.name, "type": family.type,
                          "name": s.name, "labels": s.labels, "value": s.value}))
"#;

/// A Python that has prometheus_client: the system's first (where the Debian
/// package installs it), then the one on PATH.
fn python() -> Option<String> {
    ["/usr/bin/python3", "python3"]
        .into_iter()
        .find(|p| {
            Command::new(p)
                .args(["-c", "import prometheus_client.parser"])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|s| s.success())
        })
        .map(str::to_owned)
}

#[derive(Debug, Clone)]
struct Sample {
    family: String,
    kind: String,
    name: String,
    labels: BTreeMap<String, String>,
    value: f64,
}

fn parse(python: &str, text: &str) -> Vec<Sample> {
    let mut child = Command::new(python)
        .args(["-c", PARSE])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "prometheus_client refused the exposition: {}\n---\n{text}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|line| {
            let v: Value = serde_json::from_str(line).unwrap();
            Sample {
                family: v["family"].as_str().unwrap().to_owned(),
                kind: v["type"].as_str().unwrap().to_owned(),
                name: v["name"].as_str().unwrap().to_owned(),
                labels: serde_json::from_value(v["labels"].clone()).unwrap(),
                value: v["value"].as_f64().unwrap(),
            }
        })
        .collect()
}

/// The samples named `name` whose labels include `labels`.
fn find<'a>(samples: &'a [Sample], name: &str, labels: &[(&str, &str)]) -> Vec<&'a Sample> {
    samples
        .iter()
        .filter(|s| {
            s.name == name
                && labels
                    .iter()
                    .all(|(k, v)| s.labels.get(*k).map(String::as_str) == Some(*v))
        })
        .collect()
}

/// The sum of the samples named `name` with `labels`.
fn total(samples: &[Sample], name: &str, labels: &[(&str, &str)]) -> f64 {
    find(samples, name, labels).iter().map(|s| s.value).sum()
}

/// The one sample named `name` with `labels`.
fn one(samples: &[Sample], name: &str, labels: &[(&str, &str)]) -> f64 {
    let found = find(samples, name, labels);
    assert_eq!(found.len(), 1, "one {name} {labels:?}: {found:?}");
    found[0].value
}

fn family_kind(samples: &[Sample], family: &str) -> String {
    samples
        .iter()
        .find(|s| s.family == family)
        .map(|s| s.kind.clone())
        .unwrap_or_else(|| panic!("no family {family}"))
}

fn scrape(addr: std::net::SocketAddr) -> String {
    let r = oc_systest::get(addr, "/metrics").unwrap();
    assert_eq!(r.status, 200, "{}", r.text());
    assert!(
        r.header("content-type")
            .is_some_and(|c| c.starts_with("text/plain; version=0.0.4")),
        "{:?}",
        r.header("content-type")
    );
    r.text()
}

fn started_with_shell() -> Suite {
    let suite = started("metrics");
    let mut c = common::config(&suite);
    c["scopes"][0]["routes"] =
        json!([{"handler": "webhook", "binding": "run", "config": {"entry": "ci"}}]);
    c["scopes"][0]["bindings"] =
        json!([{"name": "run", "executor": "shell", "config": {"script": "echo done"}}]);
    suite.apply_config(&c, HOOK).unwrap();
    wait_for("the shell executor known", || {
        let s = suite.call_typed(&busapi::sched::StatusRequest {}).unwrap();
        (s.handlers.get("webhook").map(String::as_str) == Some("webhook")).then_some(())
    });
    suite
}

/// The Works of scope demo once `n` of them are completed.
fn completed(suite: &Suite, n: usize) {
    wait_for("the Works completed", || {
        let works = suite
            .call("store.works", json!({"scope_id": "demo"}))
            .unwrap();
        let done = works["works"]
            .as_array()?
            .iter()
            .filter(|w| w["state"] == "completed")
            .count();
        (done == n).then_some(())
    });
}

#[test]
fn one_scrape_serves_every_daemons_metrics() {
    let Some(python) = python() else {
        let why =
            "python3 with prometheus_client (Debian: python3-prometheus-client) is not installed";
        assert!(!oc_systest::github::required(), "{why}");
        println!("SKIPPED: {why}");
        return;
    };
    let suite = started_with_shell();
    suite.start(Daemon::Webd).unwrap();
    const WORKS: usize = 3;
    for n in 0..WORKS {
        let body = format!(r#"{{"number": {n}}}"#);
        let r = deliver(&suite, &format!("d-{n}"), body.as_bytes()).unwrap();
        assert_eq!(r.status, 200, "{}", r.text());
    }
    completed(&suite, WORKS);
    // webd joins the bus on its own time: its metrics are there once it has.
    wait_for("webd on the bus", || {
        suite
            .call_typed(&busapi::web::StatusRequest {})
            .ok()
            .map(|_| ())
    });

    let text = scrape(suite.http);
    let s = parse(&python, &text);

    // Every daemon answered in time.
    for c in [
        "ingressd",
        "broker",
        "storaged",
        "schedulerd",
        "extrunner",
        "webd",
    ] {
        assert_eq!(
            one(&s, "oc_scrape_up", &[("component", c)]),
            1.0,
            "{c} up\n{text}"
        );
    }

    // ingressd: its deliveries and its bus calls.
    assert_eq!(family_kind(&s, "ingressd_deliveries"), "counter");
    assert!(
        total(&s, "ingressd_deliveries_total", &[]) >= WORKS as f64,
        "{text}"
    );
    assert_eq!(
        family_kind(&s, "ingressd_intake_duration_seconds"),
        "histogram"
    );

    // storaged: Works by state, read from the database; attempts; Waits; groups.
    assert_eq!(
        one(&s, "oc_storaged_works", &[("state", "completed")]),
        WORKS as f64,
        "{text}"
    );
    assert_eq!(one(&s, "oc_storaged_attempts_running", &[]), 0.0);
    assert_eq!(one(&s, "oc_storaged_works_retrying", &[]), 0.0);
    assert_eq!(one(&s, "oc_storaged_waits_active", &[]), 0.0);
    assert_eq!(
        family_kind(&s, "oc_storaged_commit_group_size"),
        "histogram"
    );
    let groups = one(&s, "oc_storaged_commit_group_size_count", &[]);
    assert!(groups > 0.0, "{text}");
    assert_eq!(
        one(&s, "oc_storaged_commit_groups_total", &[]),
        groups,
        "{text}"
    );
    assert!(
        one(&s, "oc_storaged_commit_group_size_sum", &[]) >= groups,
        "a group holds one write at least"
    );
    assert_eq!(
        one(
            &s,
            "oc_storaged_commit_group_size_bucket",
            &[("le", "+Inf")]
        ),
        groups
    );
    assert_eq!(
        one(&s, "oc_storaged_commit_group_duration_seconds_count", &[]),
        groups,
        "{text}"
    );

    // schedulerd: the router and the starter, idle now.
    assert_eq!(one(&s, "oc_schedulerd_router_queue_depth", &[]), 0.0);
    assert_eq!(one(&s, "oc_schedulerd_starter_queue_depth", &[]), 0.0);
    assert!(
        one(
            &s,
            "oc_schedulerd_router_events_total",
            &[("outcome", "created")]
        ) >= WORKS as f64,
        "{text}"
    );

    // extrunner: its extensions run and none was restarted.
    assert!(one(&s, "oc_extrunner_extensions_running", &[]) >= 2.0);
    assert_eq!(
        one(&s, "oc_extrunner_extension_up", &[("extension", "shell")]),
        1.0
    );
    assert_eq!(
        total(&s, "oc_extrunner_extension_restarts_total", &[]),
        0.0,
        "{text}"
    );

    // broker: it forwarded calls to every prefix.
    assert!(one(&s, "oc_broker_requests_total", &[]) > 0.0);
    for prefix in ["store", "ext", "sched"] {
        assert!(
            one(
                &s,
                "oc_broker_forward_duration_seconds_count",
                &[("prefix", prefix)]
            ) > 0.0,
            "{prefix}\n{text}"
        );
    }

    // Every daemon's bus server timed the calls it served, by method.
    for daemon in ["storaged", "schedulerd", "extrunner", "ingressd", "webd"] {
        let name = format!("oc_{daemon}_bus_call_duration_seconds");
        assert_eq!(family_kind(&s, &name), "histogram", "{daemon}");
        assert!(
            total(&s, &format!("{name}_count"), &[]) > 0.0,
            "{daemon} timed its calls\n{text}"
        );
        assert!(
            find(&s, &format!("{name}_count"), &[]).iter().all(|x| {
                let m = x.labels["method"].as_str();
                m == "other" || m.ends_with(".batch") || busapi::all_methods().contains(&m)
            }),
            "labels are the methods served\n{text}"
        );
    }
    assert!(
        total(
            &s,
            "oc_storaged_bus_call_duration_seconds_count",
            &[("method", "store.work_get")]
        ) + total(
            &s,
            "oc_storaged_bus_call_duration_seconds_count",
            &[("method", "store.works")]
        ) > 0.0,
        "{text}"
    );

    // webd: its own samples.
    assert_eq!(family_kind(&s, "oc_webd_sessions"), "gauge");

    // webd serves the same whole-suite exposition.
    let web = parse(&python, &scrape(suite.web));
    for c in ["ingressd", "broker", "storaged", "schedulerd", "extrunner"] {
        assert_eq!(one(&web, "oc_scrape_up", &[("component", c)]), 1.0, "{c}");
    }
    assert_eq!(
        one(&web, "oc_storaged_works", &[("state", "completed")]),
        WORKS as f64
    );
    assert!(total(&web, "ingressd_deliveries_total", &[]) >= WORKS as f64);
}

#[test]
fn a_daemon_that_does_not_answer_is_reported_down_and_the_scrape_still_answers() {
    let Some(python) = python() else {
        let why =
            "python3 with prometheus_client (Debian: python3-prometheus-client) is not installed";
        assert!(!oc_systest::github::required(), "{why}");
        println!("SKIPPED: {why}");
        return;
    };
    let suite = started("metrics-down");
    // schedulerd stopped: the broker holds its calls (a known prefix waits for its
    // owner), so only the scrape's own bound ends the wait.
    suite.stop(Daemon::Schedulerd);
    let s = parse(&python, &scrape(suite.http));
    assert_eq!(one(&s, "oc_scrape_up", &[("component", "schedulerd")]), 0.0);
    // webd was never started: down too.
    assert_eq!(one(&s, "oc_scrape_up", &[("component", "webd")]), 0.0);
    for c in ["ingressd", "broker", "storaged", "extrunner"] {
        assert_eq!(one(&s, "oc_scrape_up", &[("component", c)]), 1.0, "{c}");
    }
    assert!(!find(&s, "oc_storaged_works_retrying", &[]).is_empty());
    assert!(find(&s, "oc_schedulerd_router_queue_depth", &[]).is_empty());
}
