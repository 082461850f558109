//! Moving a store between backends: a SQLite store with events, Work, an
//! attempt, a Wait, a timer, KV and a configuration is exported, imported into
//! a new PostgreSQL database, and both hold the same rows (counts and digest);
//! the PostgreSQL store then keeps numbering where SQLite stopped, and the copy
//! goes back to SQLite whole. A non-empty target, a cut-short file and a file
//! from another schema are refused.

#![allow(clippy::unwrap_used)]

mod work_common;

#[allow(unused_macros)]
mod backend;
use backend::Backend;
use serde_json::json;
use storaged::events::EventInput;
use storaged::transfer::{self, Summary};
use storaged::work::*;
use storaged::{Store, StoreError};
use work_common::*;

fn event(delivery: &str, keys: &[&str]) -> EventInput {
    req(
        json!({"scope_id": "s1", "type": "gh.issue.opened", "source": "github/s1/repo",
               "delivery_id": delivery, "payload": {"title": "Fix it", "n": delivery},
               "keys": keys}),
    )
}

/// A store with a row in most tables, written through the store's own methods.
async fn fill(s: &Store) {
    let accepted = s
        .events_accept(req(json!({"events": [
            event("d1", &["issue:1"]),
            event("d2", &["issue:1"]),
            event("d3", &["issue:2", "pr:9"]),
        ]})))
        .await
        .unwrap();
    let seqs: Vec<i64> = accepted.events.iter().map(|e| e.seq).collect();
    let mut work = Vec::new();
    for (seq, key) in [(seqs[0], "issue:1"), (seqs[2], "issue:2")] {
        let r: RouteDecideResponse = s
            .route_decide(req(json!({
                "seq": seq, "scope_id": "s1",
                "records": [{"handler": "gh/issues", "binding": "b1", "matched": true}],
                "outcome": {"type": "create", "kind": "gh/issue", "binding": "b1",
                            "keys": [key], "display": {"title": "Fix it", "ref": "#1"}}
            })))
            .await
            .unwrap();
        work.push(r.work_id.unwrap());
    }
    let started = s
        .attempt_start(req(json!({"work_id": work[0], "executor": "shell/run",
            "binding": "b1", "lease_owner": "sched-1", "lease_ttl_ms": 60000})))
        .await
        .unwrap();
    s.attempt_settle(req(json!({"execution_id": started.execution_id,
        "epoch": started.epoch, "outcome": "completed", "result": {"summary": "done"}})))
        .await
        .unwrap();
    let second = s
        .attempt_start(req(json!({"work_id": work[1], "executor": "shell/run",
            "binding": "b1", "lease_owner": "sched-1", "lease_ttl_ms": 60000})))
        .await
        .unwrap();
    s.attempt_settle(req(json!({"execution_id": second.execution_id,
        "epoch": second.epoch, "outcome": "waiting",
        "wait": {"keys": ["review:1"], "description": "a review",
                 "due_ms": storaged::util::now_ms() + 3_600_000}})))
        .await
        .unwrap();
    s.timer_arm(req(
        json!({"owner": "schedule", "kind": "recurrence", "scope_id": "s1",
        "key": "nightly", "due_ms": 2_000_000_000_000i64, "spec": {"every": "1h"},
        "payload": {"n": 1}}),
    ))
    .await
    .unwrap();
    s.kv_commit(req(json!({"owner": "notes", "puts": [
        {"key": "a", "value": {"n": 1}}, {"key": "b", "value": "two"}]})))
        .await
        .unwrap();
    s.config_apply(req(json!({"config": {"scopes": [{"id": "s1"}]}})))
        .await
        .unwrap();
}

async fn open(b: Backend, name: &str) -> (Store, std::path::PathBuf) {
    let dir = std::env::temp_dir().join(format!(
        "oc-transfer-{name}-{}-{}",
        std::process::id(),
        storaged::util::new_id("t")
    ));
    let _ = std::fs::remove_dir_all(&dir);
    (b.open(&dir, storaged::Limits::default()), dir)
}

async fn export(s: &Store, file: &std::path::Path) -> Summary {
    let out = std::fs::File::create(file).unwrap();
    transfer::export(s, Box::new(out), |_, _| {}).await.unwrap()
}

async fn import(s: &Store, file: &std::path::Path) -> Result<Summary, StoreError> {
    let input = std::io::BufReader::new(std::fs::File::open(file).unwrap());
    transfer::import(s, input, |_, _| {}).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sqlite_store_moves_to_postgres_and_back_whole() {
    if !Backend::Postgres.ready("a_sqlite_store_moves_to_postgres_and_back_whole") {
        return;
    }
    let (sqlite, dir) = open(Backend::Sqlite, "from").await;
    fill(&sqlite).await;
    let file = dir.join("export.jsonl");
    let exported = export(&sqlite, &file).await;
    assert_eq!(exported, transfer::summarize(&sqlite).await.unwrap());
    for table in [
        "events",
        "event_keys",
        "works",
        "work_keys",
        "work_inputs",
        "executions",
        "waits",
        "timers",
        "kv",
        "config_generations",
        "route_records",
        "routed",
    ] {
        assert!(
            exported.rows[table] > 0,
            "{table} is empty: {:?}",
            exported.rows
        );
    }

    let (pg, pg_dir) = open(Backend::Postgres, "to").await;
    let imported = import(&pg, &file).await.unwrap();
    assert_eq!(imported, exported);
    // The copy works as a store: the same delivery is the same event, and new
    // events number after the imported ones.
    let again = pg
        .events_accept(req(json!({"events": [event("d1", &["issue:1"])]})))
        .await
        .unwrap();
    assert!(!again.events[0].added);
    let last = exported.rows["events"] as i64;
    let next = pg
        .events_accept(req(json!({"events": [event("d4", &["issue:4"])]})))
        .await
        .unwrap();
    assert!(next.events[0].added);
    assert!(
        next.events[0].seq > last,
        "{} after {last}",
        next.events[0].seq
    );
    let applied = pg
        .config_apply(req(json!({"config": {"scopes": [{"id": "s2"}]}})))
        .await
        .unwrap();
    assert!(applied.changed);
    assert_eq!(applied.generation, 2);

    // A second import into the now non-empty store is refused, naming what is
    // there.
    match import(&pg, &file).await {
        Err(StoreError::Conflict(m)) => assert!(m.contains("events"), "{m}"),
        other => panic!("{other:?}"),
    }

    // And back to SQLite, whole.
    let back_file = pg_dir.join("back.jsonl");
    let from_pg = export(&pg, &back_file).await;
    let (sqlite2, dir2) = open(Backend::Sqlite, "back").await;
    assert_eq!(import(&sqlite2, &back_file).await.unwrap(), from_pg);

    // A file cut short is refused before anything is checked as done.
    let text = std::fs::read_to_string(&file).unwrap();
    let cut: String = text.lines().take(8).map(|l| format!("{l}\n")).collect();
    let cut_file = dir.join("cut.jsonl");
    std::fs::write(&cut_file, cut).unwrap();
    let (sqlite3, dir3) = open(Backend::Sqlite, "cut").await;
    match import(&sqlite3, &cut_file).await {
        Err(StoreError::Invalid(m)) => assert!(m.contains("cut short"), "{m}"),
        other => panic!("{other:?}"),
    }
    // Another schema's export is refused naming both versions.
    let mut lines: Vec<String> = text.lines().map(str::to_string).collect();
    lines[0] =
        json!({"format": transfer::FORMAT, "schema_version": 99, "source": "sqlite"}).to_string();
    let other_file = dir.join("other.jsonl");
    std::fs::write(&other_file, lines.join("\n")).unwrap();
    let (sqlite4, dir4) = open(Backend::Sqlite, "other").await;
    match import(&sqlite4, &other_file).await {
        Err(StoreError::Invalid(m)) => assert!(m.contains("99"), "{m}"),
        other => panic!("{other:?}"),
    }
    for (s, d) in [
        (sqlite, dir),
        (pg, pg_dir),
        (sqlite2, dir2),
        (sqlite3, dir3),
        (sqlite4, dir4),
    ] {
        s.close();
        let _ = std::fs::remove_dir_all(d);
    }
}
