#![allow(clippy::unwrap_used)]
//! Reconcile passes, with real daemons: a polled source (the `feed` test extension)
//! is caught up on what it missed, and a page that fails halfway advances no
//! checkpoint.

use oc_systest::{Package, Suite, HANG};
use serde_json::{json, Value};
use std::path::Path;
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_oc-suite");
const SOURCE: &str = "feed/s/f";

fn items(n: usize) -> Value {
    Value::Array(
        (1..=n)
            .map(|i| json!({"item": format!("i{i}"), "version": "1", "title": format!("item {i}")}))
            .collect(),
    )
}

fn write_items(file: &Path, n: usize) {
    let tmp = file.with_extension("tmp");
    std::fs::write(&tmp, serde_json::to_vec(&items(n)).unwrap()).unwrap();
    std::fs::rename(&tmp, file).unwrap();
}

/// Wait for a pass report of the source that satisfies `f`.
fn wait_report(suite: &Suite, what: &str, f: impl Fn(&Value) -> bool) -> Value {
    let deadline = Instant::now() + HANG;
    loop {
        if let Ok(status) = suite.call("ingress.reconcile_status", json!({})) {
            if let Some(r) = status["sources"]
                .as_array()
                .and_then(|a| a.iter().find(|r| r["source"] == SOURCE))
            {
                if f(r) {
                    return r.clone();
                }
            }
        }
        assert!(
            Instant::now() < deadline,
            "no pass report {what} within {HANG:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn seen(suite: &Suite) -> Vec<String> {
    let mut items: Vec<String> = suite
        .events()
        .unwrap()
        .iter()
        .filter(|e| e["source"] == SOURCE)
        .map(|e| e["item"].as_str().unwrap_or_default().to_owned())
        .collect();
    items.sort();
    items
}

fn checkpoint(suite: &Suite) -> Option<String> {
    suite
        .call("store.checkpoint_get", json!({"source": SOURCE}))
        .unwrap()["checkpoint"]
        .as_str()
        .map(str::to_owned)
}

#[test]
fn missed_items_are_caught_up_and_a_failed_page_advances_no_checkpoint() {
    let feed = Package {
        name: "feed".into(),
        manifest: oc_systest::feed::MANIFEST.into(),
        command: vec!["ext-feed".into()],
    };
    let suite = Suite::new(Path::new(BIN), "reconcile", &[feed]).unwrap();
    suite.start_all().unwrap();
    let file = suite.dir.join("items.json");
    write_items(&file, 25);
    let config = json!({"scopes": [{"id": "s", "entries": [{"type": "feed", "name": "f",
        "config": {"file": file.display().to_string(), "page_size": 10, "interval_s": 1}}]}]});
    suite
        .call("store.config_apply", json!({ "config": config }))
        .unwrap();

    // The first pass sees all 25 in three pages.
    let r = wait_report(&suite, "complete at 25", |r| {
        r["outcome"] == "complete" && r["checkpoint"] == "25"
    });
    assert_eq!(r["pages"], 3, "{r}");
    assert_eq!(seen(&suite).len(), 25);
    assert_eq!(checkpoint(&suite).as_deref(), Some("25"));

    // Five items the source got while nobody listened are caught up; the 25 already
    // seen are not kept again.
    write_items(&file, 30);
    wait_report(&suite, "complete at 30", |r| {
        r["outcome"] == "complete" && r["checkpoint"] == "30"
    });
    let items = seen(&suite);
    assert_eq!(items.len(), 30, "{items:?}");
    assert!(items.contains(&"i30".to_owned()));

    // Ten more, but page 3 of 4 fails: pages 1 and 2 are read, the checkpoint stays.
    write_items(&file, 40);
    let marker = suite.dir.join("items.json.fail-page-3");
    std::fs::write(&marker, "always").unwrap();
    let r = wait_report(&suite, "failed", |r| r["outcome"] == "failed");
    assert_eq!(r["pages"], 2, "{r}");
    assert!(
        r["error"].as_str().unwrap().contains("page 3"),
        "the failure names the page: {r}"
    );
    assert_eq!(checkpoint(&suite).as_deref(), Some("30"));
    assert_eq!(
        seen(&suite).len(),
        30,
        "nothing past the failed page is kept"
    );

    // Once the source answers again, the next pass completes.
    std::fs::remove_file(&marker).unwrap();
    wait_report(&suite, "complete at 40", |r| {
        r["outcome"] == "complete" && r["checkpoint"] == "40"
    });
    assert_eq!(seen(&suite).len(), 40);
    assert_eq!(checkpoint(&suite).as_deref(), Some("40"));
}

#[test]
fn extension_tasks_run_at_their_interval() {
    let feed = Package {
        name: "feed".into(),
        manifest: oc_systest::feed::MANIFEST.into(),
        command: vec!["ext-feed".into()],
    };
    let suite = Suite::new(Path::new(BIN), "tasks", &[feed]).unwrap();
    suite.start_all().unwrap();
    let file = suite.dir.join("items.json");
    write_items(&file, 1);
    let config = json!({"scopes": [{"id": "s", "entries": [{"type": "feed", "name": "f",
        "config": {"file": file.display().to_string(), "interval_s": 3600}}]}]});
    suite
        .call("store.config_apply", json!({ "config": config }))
        .unwrap();
    // `feed.touch` runs every second: three passes arrive, each its own line.
    let log = file.with_extension("json.tasks");
    let deadline = Instant::now() + HANG;
    loop {
        let lines = std::fs::read_to_string(&log).unwrap_or_default();
        if lines.lines().count() >= 3 {
            assert!(
                lines.lines().all(|l| l.starts_with("feed.touch ")),
                "{lines}"
            );
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{} passes within {HANG:?}",
            lines.lines().count()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}
