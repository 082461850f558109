#![allow(clippy::unwrap_used)]
//! Durable acceptance under faults: senders post signed deliveries as fast as they can
//! while storaged, then ingressd, then extrunner are killed with SIGKILL and started
//! again. A delivery without a 2xx is retried by its sender, as GitHub's redelivery
//! would. In the end every delivery is in the store exactly once: none answered 2xx
//! was lost to a later SIGKILL of storaged, and no retry was kept twice.

mod common;
use common::*;

use oc_systest::{Daemon, HANG};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const SENDERS: usize = 8;
/// Each sender sends at least this many, and goes on until the faults are over.
const AT_LEAST: usize = 20;

#[test]
fn every_acknowledged_delivery_is_kept_exactly_once_across_kills() {
    let suite = Arc::new(started("faults"));
    let done = Arc::new(AtomicBool::new(false));
    let failures = Arc::new(AtomicU64::new(0));
    // The deliveries answered 2xx.
    let acked = Arc::new(Mutex::new(Vec::<String>::new()));
    let mut senders = Vec::new();
    for t in 0..SENDERS {
        let (suite, done, failures, acked) =
            (suite.clone(), done.clone(), failures.clone(), acked.clone());
        senders.push(std::thread::spawn(move || {
            let mut i = 0usize;
            while i < AT_LEAST || !done.load(Ordering::SeqCst) {
                let id = format!("s{t}-{i}");
                let body = format!(r#"{{"number": {i}, "sender": {t}}}"#);
                let started = Instant::now();
                loop {
                    match deliver(&suite, &id, body.as_bytes()) {
                        Ok(r) if (200..300).contains(&r.status) => break,
                        Ok(r) => {
                            assert!(
                                r.status == 503 || r.status == 502,
                                "{id}: unexpected {} {}",
                                r.status,
                                r.text()
                            );
                            failures.fetch_add(1, Ordering::SeqCst);
                        }
                        Err(_) => {
                            failures.fetch_add(1, Ordering::SeqCst);
                        }
                    }
                    assert!(started.elapsed() < HANG * 2, "{id} never got a 2xx");
                    std::thread::sleep(Duration::from_millis(20));
                }
                acked.lock().unwrap().push(id);
                i += 1;
            }
        }));
    }
    for d in [Daemon::Storaged, Daemon::Ingressd, Daemon::Extrunner] {
        std::thread::sleep(Duration::from_millis(400));
        suite.kill(d);
        std::thread::sleep(Duration::from_millis(100));
        suite.start(d).unwrap();
    }
    std::thread::sleep(Duration::from_millis(400));
    done.store(true, Ordering::SeqCst);
    for s in senders {
        s.join().unwrap();
    }

    let acked = acked.lock().unwrap().clone();
    let mut kept: BTreeMap<String, usize> = BTreeMap::new();
    for e in hook_events(&suite) {
        *kept
            .entry(e["delivery_id"].as_str().unwrap().to_owned())
            .or_default() += 1;
    }
    let twice: Vec<_> = kept.iter().filter(|(_, n)| **n > 1).collect();
    assert!(twice.is_empty(), "kept more than once: {twice:?}");
    let missing: Vec<_> = acked.iter().filter(|id| !kept.contains_key(*id)).collect();
    assert!(missing.is_empty(), "acknowledged but not kept: {missing:?}");
    assert_eq!(
        kept.len(),
        acked.len(),
        "kept deliveries nobody was answered 2xx for"
    );
    assert!(
        failures.load(Ordering::SeqCst) > 0,
        "no delivery met a fault: the kills did not happen under traffic"
    );
    eprintln!(
        "{} deliveries kept exactly once; {} attempts failed and were retried",
        acked.len(),
        failures.load(Ordering::SeqCst)
    );
}
