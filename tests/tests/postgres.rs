//! The suite on PostgreSQL: its database stopped for 10 s while deliveries
//! arrive. Meanwhile ingressd answers 503 (nothing is acknowledged that is not
//! kept); after the restart storaged reconnects by itself and every delivery
//! answered 2xx, before, after, or redelivered once the database is back, is
//! kept once.

#![allow(clippy::unwrap_used)]

mod common;

use common::{deliver, hook_events, started_with, wait_within};
use oc_systest::{Daemon, Suite};
use serde_json::json;
use std::collections::BTreeSet;
use std::time::{Duration, Instant};

/// A suite whose storaged keeps its database in `url`.
fn on_postgres(name: &str, url: &str) -> Suite {
    started_with(name, |suite| {
        let etc = suite.dir.join("etc/storaged");
        std::fs::create_dir_all(&etc).unwrap();
        std::fs::write(suite.dir.join("pg.url"), url).unwrap();
        let config = json!({"settings": {"storage": {
            "backend": "postgres",
            "url_ref": format!("file:{}", suite.dir.join("pg.url").display()),
        }}});
        std::fs::write(etc.join("config.json"), config.to_string()).unwrap();
        suite.set_args(
            Daemon::Storaged,
            &["--config-dir", &etc.display().to_string()],
        );
    })
}

fn body(n: usize) -> Vec<u8> {
    json!({"number": n, "text": format!("delivery {n}")})
        .to_string()
        .into_bytes()
}

/// Deliver until answered 2xx (a 503 is the sender's cue to try again).
fn deliver_until_kept(suite: &Suite, id: &str, n: usize) {
    wait_within(
        &format!("{id} answered 2xx"),
        Duration::from_secs(60),
        || {
            let r = deliver(suite, id, &body(n)).ok()?;
            match r.status {
                200..=299 => Some(()),
                503 => {
                    std::thread::sleep(Duration::from_millis(200));
                    None
                }
                other => panic!("{id}: answered {other}: {}", r.text()),
            }
        },
    )
}

#[test]
fn a_database_stopped_for_ten_seconds_is_503_meanwhile_and_nothing_answered_2xx_is_lost() {
    if oc_pgtest::unavailable().is_some() {
        // Say why, or fail under OC_REQUIRE_PEERS=1.
        let _ = oc_pgtest::shared_or_skip("postgres outage");
        return;
    }
    // A cluster of the test's own: it is stopped and started again.
    let cluster = oc_pgtest::Cluster::start().unwrap();
    let url = cluster.create_database("outage").unwrap();
    let suite = on_postgres("pg-outage", &url);
    let check = suite.call("store.check", json!({})).unwrap();
    assert!(
        check["database"]
            .as_str()
            .unwrap_or_default()
            .starts_with("postgres 127.0.0.1:"),
        "{check}"
    );

    let mut kept = BTreeSet::new();
    for n in 0..20 {
        let id = format!("before-{n}");
        deliver_until_kept(&suite, &id, n);
        kept.insert(id);
    }

    cluster.stop();
    let down = Instant::now();
    let mut refused = Vec::new();
    let mut n = 100;
    while down.elapsed() < Duration::from_secs(10) {
        let id = format!("during-{n}");
        let r = deliver(&suite, &id, &body(n)).unwrap();
        assert_eq!(
            r.status,
            503,
            "{id} while the database is down: {} {}",
            r.status,
            r.text()
        );
        assert!(r.header("retry-after").is_some(), "{id}: no Retry-After");
        refused.push((id, n));
        n += 1;
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(
        refused.len() >= 20,
        "only {} deliveries tried",
        refused.len()
    );
    cluster.run().unwrap();

    // storaged reconnects by itself; the senders' redeliveries are kept.
    for n in 0..20 {
        let id = format!("after-{n}");
        deliver_until_kept(&suite, &id, 1000 + n);
        kept.insert(id);
    }
    for (id, n) in &refused {
        deliver_until_kept(&suite, id, *n);
        kept.insert(id.clone());
    }

    let events = hook_events(&suite);
    let ids: Vec<String> = events
        .iter()
        .map(|e| e["delivery_id"].as_str().unwrap_or_default().to_string())
        .collect();
    let unique: BTreeSet<String> = ids.iter().cloned().collect();
    assert_eq!(ids.len(), unique.len(), "a delivery kept twice: {ids:?}");
    assert_eq!(unique, kept, "kept events differ from the 2xx answers");
    // storaged said what happened.
    let log = suite.log(Daemon::Storaged);
    assert!(log.contains("the database connection is lost"), "{log}");
    assert!(log.contains("the database connection is back"), "{log}");
}
