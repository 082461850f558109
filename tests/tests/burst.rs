#![allow(clippy::unwrap_used)]
//! No delivery refused while the suite is merely busy: a burst of simultaneous signed
//! deliveries to one path is answered 2xx, every one, each kept once; deliveries posted
//! while the owning extension restarts wait for it and are answered 2xx.

mod common;
use common::*;

use oc_systest::{Suite, HANG};
use serde_json::json;
use std::collections::BTreeMap;
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

/// Posts `n` deliveries at once (one thread each, released together); answers each
/// delivery's status (0 when the connection failed).
fn burst(suite: &Arc<Suite>, prefix: &str, n: usize) -> Vec<(String, u16, String)> {
    let barrier = Arc::new(Barrier::new(n));
    let threads: Vec<_> = (0..n)
        .map(|i| {
            let (suite, barrier) = (suite.clone(), barrier.clone());
            let id = format!("{prefix}-{i}");
            std::thread::spawn(move || {
                let body = format!(r#"{{"number": {i}, "burst": "{id}"}}"#);
                barrier.wait();
                match deliver(&suite, &id, body.as_bytes()) {
                    Ok(r) => (id, r.status, r.text()),
                    Err(e) => (id, 0, e.to_string()),
                }
            })
        })
        .collect();
    threads.into_iter().map(|t| t.join().unwrap()).collect()
}

/// Every delivery of `answers` answered 2xx and kept exactly once.
fn all_kept_once(suite: &Suite, answers: &[(String, u16, String)]) {
    let refused: Vec<_> = answers
        .iter()
        .filter(|(_, s, _)| !(200..300).contains(s))
        .collect();
    assert!(
        refused.is_empty(),
        "{} of {} not answered 2xx, e.g. {:?}",
        refused.len(),
        answers.len(),
        refused.iter().take(5).collect::<Vec<_>>()
    );
    let mut kept: BTreeMap<String, usize> = BTreeMap::new();
    for e in hook_events(suite) {
        *kept
            .entry(e["delivery_id"].as_str().unwrap().to_owned())
            .or_default() += 1;
    }
    for (id, _, _) in answers {
        assert_eq!(kept.get(id), Some(&1), "{id} kept {:?} times", kept.get(id));
    }
}

#[test]
fn five_hundred_simultaneous_deliveries_to_one_path_are_all_answered_2xx_and_kept_once() {
    let suite = Arc::new(started("burst"));
    let answers = burst(&suite, "b", 500);
    all_kept_once(&suite, &answers);
    let metrics = oc_systest::get(suite.http, "/metrics").unwrap().text();
    assert!(
        !metrics.contains("outcome=\"overloaded\""),
        "nothing refused as overloaded: {metrics}"
    );
}

#[test]
fn deliveries_posted_while_the_webhook_extension_restarts_are_answered_2xx() {
    let suite = Arc::new(started("restart"));
    for round in 0..3 {
        let pid = {
            let deadline = Instant::now() + HANG;
            loop {
                let v = suite
                    .call("ext.inspect", json!({"name": "webhook"}))
                    .unwrap();
                if let Some(pid) = v["pid"].as_i64() {
                    break pid;
                }
                assert!(Instant::now() < deadline, "webhook never ran again: {v}");
                std::thread::sleep(Duration::from_millis(20));
            }
        };
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(i32::try_from(pid).unwrap()),
            nix::sys::signal::Signal::SIGKILL,
        )
        .unwrap();
        // Posted at once: the extension is dead or in its restart backoff.
        let answers = burst(&suite, &format!("r{round}"), 20);
        all_kept_once(&suite, &answers);
    }
    let restarts = suite
        .call("ext.inspect", json!({"name": "webhook"}))
        .unwrap()["restarts"]
        .as_u64()
        .unwrap();
    assert!(restarts >= 3, "the extension was restarted: {restarts}");
}
