//! Retention never removes what open Work or a running Execution still needs,
//! removes orphan and stale artifact files, and reports what it removed; stats
//! count what is there. Also the configuration generations.

#![allow(clippy::unwrap_used)]

#[macro_use]
mod backend;
use backend::Backend;
use serde_json::json;
use std::path::{Path, PathBuf};
use storaged::artifacts::{ArtifactCommitRequest, ArtifactCreateRequest, ArtifactWriteRequest};
use storaged::config::{ConfigApplyRequest, ConfigCurrentRequest, ConfigGenerationRequest};
use storaged::retention::RetentionRunRequest;
use storaged::sql::{params, Connection};
use storaged::stats::StatsRequest;
use storaged::{util, Limits, Store, StoreError};

struct TempDir(PathBuf);

impl TempDir {
    fn new(name: &str) -> TempDir {
        let dir = std::env::temp_dir().join(format!(
            "oc-ret-{name}-{}-{}",
            std::process::id(),
            util::new_id("t")
        ));
        let _ = std::fs::remove_dir_all(&dir);
        TempDir(dir)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

const DAY: i64 = 24 * 60 * 60 * 1000;

/// Insert an event; returns its seq.
fn event(
    conn: &Connection,
    id: &str,
    accepted_ms: i64,
    parent: Option<&str>,
    root: Option<&str>,
    routed: bool,
) -> Result<i64, StoreError> {
    let seq: i64 = conn.query_row(
        "INSERT INTO events (id, scope_id, type, source, payload, signature, parent_id, root_id,
                             accepted_at, accepted_ms)
         VALUES (?1, 's', 't', 'src', '{}', 'sig', ?2, ?3, ?4, ?5) RETURNING seq",
        params![
            id,
            parent,
            root.unwrap_or(id),
            util::rfc3339(accepted_ms),
            accepted_ms
        ],
        |r| r.get(0),
    )?;
    conn.execute(
        "INSERT INTO event_keys (key, seq) VALUES (?1, ?2)",
        params![format!("k:{id}"), seq],
    )?;
    if routed {
        conn.execute(
            "INSERT INTO routed (seq, disposition, routed_at) VALUES (?1, 'routed', 'x')",
            [seq],
        )?;
        conn.execute(
            "INSERT INTO route_records (seq, idx, scope_id, matched, recorded_at)
             VALUES (?1, 0, 's', 1, 'x')",
            [seq],
        )?;
    }
    Ok(seq)
}

fn work(conn: &Connection, id: &str, state: &str) -> Result<(), StoreError> {
    conn.execute(
        "INSERT INTO works (id, scope_id, kind, state, created_at, updated_at)
         VALUES (?1, 's', 'k', ?2, 'x', 'x')",
        params![id, state],
    )?;
    Ok(())
}

fn input(conn: &Connection, work: &str, seq: i64) -> Result<(), StoreError> {
    conn.execute(
        "INSERT INTO work_inputs (work_id, seq) VALUES (?1, ?2)",
        params![work, seq],
    )?;
    Ok(())
}

fn wait(
    conn: &Connection,
    id: &str,
    work: &str,
    state: &str,
    wake_seq: Option<i64>,
) -> Result<(), StoreError> {
    conn.execute(
        "INSERT INTO waits (id, work_id, state, created_at, wake_seq) VALUES (?1, ?2, ?3, 'x', ?4)",
        params![id, work, state, wake_seq],
    )?;
    Ok(())
}

fn execution(conn: &Connection, id: &str, work: &str, state: &str) -> Result<(), StoreError> {
    conn.execute(
        "INSERT INTO executions (id, work_id, attempt, executor, state, lease_epoch, started_at)
         VALUES (?1, ?2, (SELECT count(*) + 1 FROM executions WHERE work_id = ?2), 'x', ?3, 1, 'x')",
        params![id, work, state],
    )?;
    Ok(())
}

async fn event_ids(store: &Store) -> Vec<String> {
    store
        .read(|c| {
            let mut s = c.prepare("SELECT id FROM events ORDER BY seq")?;
            let rows = s.query_map([], |r| r.get(0))?;
            Ok(rows.collect::<Result<Vec<String>, _>>()?)
        })
        .await
        .unwrap()
}

async fn count(store: &Store, sql: &'static str) -> i64 {
    store
        .read(move |c| Ok(c.query_row(sql, [], |r| r.get(0))?))
        .await
        .unwrap()
}

async fn an_age_cut_keeps_what_open_work_needs(b: Backend) {
    let dir = TempDir::new("events");
    let store = b.open(&dir.0, Limits::default());
    let now = util::now_ms();
    let old = now - 10 * DAY;
    store
        .write(move |c| {
            work(c, "w_open", "running")?;
            work(c, "w_done", "completed")?;
            work(c, "w_waiting", "waiting")?;
            work(c, "w_failed", "failed")?;
            // Removable: old, routed, needed by nothing open.
            event(c, "e_plain", old, None, None, true)?;
            // An input of open Work, with its causal chain.
            event(c, "e_root", old, None, None, true)?;
            event(c, "e_parent", old + 1, Some("e_root"), Some("e_root"), true)?;
            let child = event(
                c,
                "e_child",
                old + 2,
                Some("e_parent"),
                Some("e_root"),
                true,
            )?;
            input(c, "w_open", child)?;
            // An input of terminal Work: goes, with its work_inputs row.
            let done = event(c, "e_done_input", old, None, None, true)?;
            input(c, "w_done", done)?;
            // The same event feeding open and terminal Work stays (both rows too).
            let shared = event(c, "e_shared", old, None, None, true)?;
            input(c, "w_done", shared)?;
            input(c, "w_open", shared)?;
            // What an active Wait woke on stays.
            let woke = event(c, "e_wake", old, None, None, true)?;
            wait(c, "wt_active", "w_waiting", "active", Some(woke))?;
            // What a settled Wait of terminal Work woke on goes.
            let woke_done = event(c, "e_wake_done", old, None, None, true)?;
            wait(c, "wt_done", "w_failed", "woken", Some(woke_done))?;
            // Not routed yet: the router still needs it.
            event(c, "e_unrouted", old, None, None, false)?;
            // Recent.
            event(c, "e_recent", now, None, None, true)?;
            Ok(())
        })
        .await
        .unwrap();
    let before = store.stats(StatsRequest {}).await.unwrap();
    assert_eq!(before.events.count, 10);
    assert_eq!(before.events.latest_seq, 10);
    assert_eq!(
        before.events.oldest_accepted_at.as_deref(),
        Some(util::rfc3339(old).as_str())
    );
    assert_eq!(before.works.get("running"), Some(&1));
    assert_eq!(before.works.get("completed"), Some(&1));
    assert_eq!(before.waits_active, 1);
    assert!(before.db_bytes > 0);

    let out = store
        .retention_run(RetentionRunRequest {
            max_event_age_ms: Some(DAY),
            now_ms: Some(now),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(out.events_removed, 3, "{out:?}");
    assert_eq!(out.work_inputs_removed, 1, "{out:?}");
    assert_eq!(
        event_ids(&store).await,
        [
            "e_root",
            "e_parent",
            "e_child",
            "e_shared",
            "e_wake",
            "e_unrouted",
            "e_recent"
        ]
    );
    // The removed events' keys, route records and routed rows went with them.
    assert_eq!(
        count(
            &store,
            "SELECT count(*) FROM event_keys WHERE seq NOT IN (SELECT seq FROM events)"
        )
        .await,
        0
    );
    assert_eq!(count(&store, "SELECT count(*) FROM event_keys").await, 7);
    assert_eq!(count(&store, "SELECT count(*) FROM routed").await, 6);
    assert_eq!(count(&store, "SELECT count(*) FROM route_records").await, 6);
    assert_eq!(count(&store, "SELECT count(*) FROM work_inputs").await, 3);
    let after = store.stats(StatsRequest {}).await.unwrap();
    assert_eq!(after.events.count, 7);
    assert_eq!(after.events.latest_seq, 10);

    // Run again: nothing more to remove.
    let again = store
        .retention_run(RetentionRunRequest {
            max_event_age_ms: Some(DAY),
            now_ms: Some(now),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(again.events_removed, 0);

    // The Work finishing frees its inputs and their chain.
    store
        .write(|c| {
            c.execute(
                "UPDATE works SET state = 'cancelled' WHERE id IN ('w_open', 'w_waiting')",
                [],
            )?;
            c.execute("UPDATE waits SET state = 'cancelled'", [])?;
            Ok(())
        })
        .await
        .unwrap();
    let out = store
        .retention_run(RetentionRunRequest {
            max_event_age_ms: Some(DAY),
            now_ms: Some(now),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(out.events_removed, 5, "{out:?}");
    assert_eq!(event_ids(&store).await, ["e_unrouted", "e_recent"]);
    assert_eq!(count(&store, "SELECT count(*) FROM work_inputs").await, 0);
    // A negative age is refused.
    let e = store
        .retention_run(RetentionRunRequest {
            max_event_age_ms: Some(-1),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert!(matches!(e, StoreError::Invalid(_)), "{e}");
    store.close();
}

async fn a_count_cut_removes_the_oldest_beyond_the_count_in_batches(b: Backend) {
    let dir = TempDir::new("count");
    let store = b.open(&dir.0, Limits::default());
    let now = util::now_ms();
    // 2500 events (more than two batches), one in every hundred an open Work's input.
    store
        .write(move |c| {
            work(c, "w_open", "pending")?;
            for i in 0..2500 {
                let seq = event(c, &format!("e{i:04}"), now - 5000 + i, None, None, true)?;
                if i % 100 == 50 {
                    input(c, "w_open", seq)?;
                }
            }
            Ok(())
        })
        .await
        .unwrap();
    // Keep 1000: the oldest 1500 are over, 15 of them protected.
    let out = store
        .retention_run(RetentionRunRequest {
            max_events: Some(1000),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(out.events_removed, 1485, "{out:?}");
    let ids = event_ids(&store).await;
    assert_eq!(ids.len(), 1015);
    assert_eq!(ids[0], "e0050");
    assert_eq!(ids[15], "e1500");
    // Now an age cut over every event: all but the 25 protected go, in batches.
    let out = store
        .retention_run(RetentionRunRequest {
            max_event_age_ms: Some(0),
            now_ms: Some(now + 1),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(out.events_removed, 1015 - 25, "{out:?}");
    let ids = event_ids(&store).await;
    assert_eq!(ids.len(), 25);
    assert!(ids.iter().all(|id| id.ends_with("50")), "{ids:?}");
    store.close();
}

async fn committed_artifact(store: &Store, execution: &str, len: usize) -> String {
    let id = store
        .artifact_create(ArtifactCreateRequest {
            execution_id: Some(execution.into()),
            name: "log".into(),
            media_type: None,
            max_bytes: None,
        })
        .await
        .unwrap()
        .artifact_id;
    store
        .artifact_write(ArtifactWriteRequest {
            artifact_id: id.clone(),
            offset: 0,
            data: vec![7u8; len],
        })
        .await
        .unwrap();
    store
        .artifact_commit(ArtifactCommitRequest {
            artifact_id: id.clone(),
            size: None,
        })
        .await
        .unwrap();
    id
}

async fn set_created(store: &Store, id: &str, ms: i64) {
    let id = id.to_string();
    store
        .write(move |c| {
            c.execute(
                "UPDATE artifacts SET created_ms = ?1 WHERE id = ?2",
                params![ms, id],
            )?;
            Ok(())
        })
        .await
        .unwrap();
}

fn art(dir: &Path, id: &str) -> PathBuf {
    dir.join("artifacts").join(id)
}

async fn artifacts_of_running_executions_survive_and_orphans_go(b: Backend) {
    let dir = TempDir::new("artifacts");
    let store = b.open(&dir.0, Limits::default());
    let now = util::now_ms();
    store
        .write(|c| {
            work(c, "w1", "running")?;
            execution(c, "x_running", "w1", "running")?;
            execution(c, "x_done", "w1", "succeeded")?;
            Ok(())
        })
        .await
        .unwrap();
    let running_old = committed_artifact(&store, "x_running", 100).await;
    let done_old = committed_artifact(&store, "x_done", 200).await;
    let loose_old = committed_artifact(&store, "", 300).await;
    let done_new = committed_artifact(&store, "x_done", 400).await;
    let done_newer = committed_artifact(&store, "x_done", 500).await;
    set_created(&store, &running_old, now - 10 * DAY).await;
    set_created(&store, &done_old, now - 10 * DAY + 1).await;
    set_created(&store, &loose_old, now - 10 * DAY + 2).await;
    set_created(&store, &done_new, now - 1000).await;
    set_created(&store, &done_newer, now - 500).await;

    // An orphan (a file without a row), a file mid-commit (renamed, its .meta not
    // yet gone), a file that is no artifact, and an open artifact.
    std::fs::write(art(&dir.0, "art_orphan"), b"lost").unwrap();
    std::fs::write(art(&dir.0, "art_limbo"), b"renamed").unwrap();
    std::fs::write(dir.0.join("artifacts/tmp/art_limbo.meta"), b"{}").unwrap();
    std::fs::write(art(&dir.0, "README.txt"), b"not an artifact").unwrap();
    let open = store
        .artifact_create(ArtifactCreateRequest {
            execution_id: None,
            name: "open".into(),
            media_type: None,
            max_bytes: None,
        })
        .await
        .unwrap()
        .artifact_id;

    let before = store.stats(StatsRequest {}).await.unwrap();
    assert_eq!(before.artifacts.count, 5);
    assert_eq!(before.artifacts.bytes, 1500);
    assert_eq!(before.executions.get("running"), Some(&1));
    assert_eq!(before.executions.get("succeeded"), Some(&1));

    let out = store
        .retention_run(RetentionRunRequest {
            max_artifact_age_ms: Some(DAY),
            now_ms: Some(now),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(out.artifacts_removed, 2, "{out:?}");
    assert_eq!(out.artifact_bytes_removed, 500, "{out:?}");
    assert_eq!(out.orphan_files_removed, 1, "{out:?}");
    assert_eq!(out.stale_tmp_files_removed, 0, "{out:?}");
    assert!(art(&dir.0, &running_old).exists());
    assert!(!art(&dir.0, &done_old).exists());
    assert!(!art(&dir.0, &loose_old).exists());
    assert!(art(&dir.0, &done_new).exists());
    assert!(!art(&dir.0, "art_orphan").exists());
    assert!(art(&dir.0, "art_limbo").exists());
    assert!(art(&dir.0, "README.txt").exists());
    assert!(dir.0.join("artifacts/tmp").join(&open).exists());
    let after = store.stats(StatsRequest {}).await.unwrap();
    assert_eq!(after.artifacts.count, 3);
    assert_eq!(after.artifacts.bytes, 1000);

    // Over a total of 600 bytes: the oldest not running goes first (400 bytes),
    // which leaves 100 (running) + 500 = 600.
    let out = store
        .retention_run(RetentionRunRequest {
            max_artifact_bytes: Some(600),
            now_ms: Some(now),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(out.artifacts_removed, 1, "{out:?}");
    assert_eq!(out.artifact_bytes_removed, 400, "{out:?}");
    assert!(!art(&dir.0, &done_new).exists());
    assert!(art(&dir.0, &done_newer).exists());
    // A cap below what a running Execution holds removes all but its artifacts.
    let out = store
        .retention_run(RetentionRunRequest {
            max_artifact_bytes: Some(0),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(out.artifacts_removed, 1, "{out:?}");
    assert!(art(&dir.0, &running_old).exists());
    assert_eq!(count(&store, "SELECT count(*) FROM artifacts").await, 1);

    // Two days on: the open artifact's tmp files are stale, and so is the
    // mid-commit .meta, which leaves its file an orphan.
    let out = store
        .retention_run(RetentionRunRequest {
            now_ms: Some(now + 2 * DAY),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(out.stale_tmp_files_removed, 3, "{out:?}");
    assert_eq!(out.orphan_files_removed, 1, "{out:?}");
    assert!(!dir.0.join("artifacts/tmp").join(&open).exists());
    assert!(!dir
        .0
        .join("artifacts/tmp")
        .join(format!("{open}.meta"))
        .exists());
    assert!(!art(&dir.0, "art_limbo").exists());
    assert!(art(&dir.0, &running_old).exists());
    assert!(art(&dir.0, "README.txt").exists());
    let e = store
        .artifact_write(ArtifactWriteRequest {
            artifact_id: open,
            offset: 0,
            data: b"late".to_vec(),
        })
        .await
        .unwrap_err();
    assert!(matches!(e, StoreError::NotFound(_)), "{e}");
    store.close();
}

async fn stats_count_what_is_there(b: Backend) {
    let dir = TempDir::new("stats");
    let store = b.open(&dir.0, Limits::default());
    let empty = store.stats(StatsRequest {}).await.unwrap();
    assert_eq!(empty.events.count, 0);
    assert_eq!(empty.events.latest_seq, 0);
    assert!(empty.events.oldest_accepted_at.is_none());
    assert!(empty.works.is_empty() && empty.executions.is_empty());
    assert_eq!(
        (empty.waits_active, empty.timers, empty.kv_entries),
        (0, 0, 0)
    );
    assert_eq!(empty.artifacts.count, 0);
    store
        .write(|c| {
            work(c, "w1", "pending")?;
            work(c, "w2", "pending")?;
            work(c, "w3", "completed")?;
            wait(c, "wt1", "w1", "active", None)?;
            wait(c, "wt2", "w2", "timed_out", None)?;
            c.execute(
                "INSERT INTO timers (id, owner, kind, key, due_ms, created_at)
                 VALUES ('t1', 'o', 'k', 'a', 1, 'x'), ('t2', 'o', 'k', 'b', 1, 'x')",
                [],
            )?;
            for i in 0..3 {
                c.execute(
                    "INSERT INTO kv (namespace, key, value, version, updated_at)
                     VALUES ('ns', ?1, '1', 'v', 'x')",
                    [format!("k{i}")],
                )?;
            }
            Ok(())
        })
        .await
        .unwrap();
    let s = store.stats(StatsRequest {}).await.unwrap();
    assert_eq!(s.works.get("pending"), Some(&2));
    assert_eq!(s.works.get("completed"), Some(&1));
    assert_eq!(s.waits_active, 1);
    assert_eq!(s.timers, 2);
    assert_eq!(s.kv_entries, 3);
    // The writes above went through the writer, each in some group.
    assert!(
        s.writer.groups >= 1 && s.writer.writes >= s.writer.groups,
        "{:?}",
        s.writer
    );
    let raw = serde_json::value::to_raw_value(&json!(null)).unwrap();
    let v = storaged::stats::dispatch(&store, "store.stats", &raw)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(v["kv_entries"], json!(3));
    assert_eq!(v["works"]["pending"], json!(2));
    assert_eq!(v["writer"]["writes"], json!(s.writer.writes));
    let raw = serde_json::value::to_raw_value(&json!({"max_events": "x"})).unwrap();
    let e = storaged::retention::dispatch(&store, "store.retention_run", &raw)
        .await
        .unwrap()
        .unwrap_err();
    assert!(
        matches!(&e, StoreError::Invalid(m) if m.contains("invalid params")),
        "{e}"
    );
    assert!(storaged::retention::dispatch(&store, "store.other", &raw)
        .await
        .is_none());
    store.close();
}

async fn applying_a_config_twice_stores_one_generation(b: Backend) {
    let dir = TempDir::new("config");
    let store = b.open(&dir.0, Limits::default());
    let e = store
        .config_current(ConfigCurrentRequest {})
        .await
        .unwrap_err();
    assert!(matches!(e, StoreError::NotFound(_)), "{e}");

    let a = json!({"settings": {"b": 1, "a": 2}, "scopes": []});
    let a_reordered = json!({"scopes": [], "settings": {"a": 2, "b": 1}});
    let first = store
        .config_apply(ConfigApplyRequest { config: a.clone() })
        .await
        .unwrap();
    assert!(first.changed);
    assert_eq!(first.generation, 1);
    assert_eq!(first.hash, util::digest(util::canonical(&a).as_bytes()));
    let second = store
        .config_apply(ConfigApplyRequest {
            config: a_reordered,
        })
        .await
        .unwrap();
    assert!(!second.changed);
    assert_eq!(second.generation, 1);
    assert_eq!(second.hash, first.hash);
    assert_eq!(
        count(&store, "SELECT count(*) FROM config_generations").await,
        1
    );

    let b = json!({"settings": {"a": 3}});
    let third = store
        .config_apply(ConfigApplyRequest { config: b.clone() })
        .await
        .unwrap();
    assert!(third.changed);
    assert_eq!(third.generation, 2);
    let current = store.config_current(ConfigCurrentRequest {}).await.unwrap();
    assert_eq!(current.generation, 2);
    assert_eq!(current.config, b);
    assert_eq!(current.hash, third.hash);
    let one = store
        .config_generation(ConfigGenerationRequest { generation: 1 })
        .await
        .unwrap();
    assert_eq!(one.config, a);

    // Back to the first: a new, current generation.
    let back = store
        .config_apply(ConfigApplyRequest { config: a.clone() })
        .await
        .unwrap();
    assert!(back.changed);
    assert_eq!(back.generation, 3);
    assert_eq!(back.hash, first.hash);
    // The history stays whole: generation 1 still reads back.
    let one_again = store
        .config_generation(ConfigGenerationRequest { generation: 1 })
        .await
        .unwrap();
    assert_eq!(one_again.hash, first.hash);
    let current = store.config_current(ConfigCurrentRequest {}).await.unwrap();
    assert_eq!((current.generation, current.config), (3, a));

    // Refusals, which store nothing.
    for bad in [json!([1]), json!("x"), json!(null)] {
        let e = store
            .config_apply(ConfigApplyRequest { config: bad })
            .await
            .unwrap_err();
        assert!(matches!(e, StoreError::Invalid(_)), "{e}");
    }
    let huge = json!({"blob": "x".repeat(storaged::config::MAX_CONFIG_BYTES)});
    let e = store
        .config_apply(ConfigApplyRequest { config: huge })
        .await
        .unwrap_err();
    assert!(
        matches!(&e, StoreError::Invalid(m) if m.contains("max_config_bytes")),
        "{e}"
    );
    assert_eq!(
        count(&store, "SELECT count(*) FROM config_generations").await,
        3
    );
    let e = store
        .config_generation(ConfigGenerationRequest { generation: 99 })
        .await
        .unwrap_err();
    assert!(matches!(e, StoreError::NotFound(_)), "{e}");

    let raw = serde_json::value::to_raw_value(&json!({"generation": 3})).unwrap();
    let v = storaged::config::dispatch(&store, "store.config_generation", &raw)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(v["generation"], json!(3));
    let raw = serde_json::value::to_raw_value(&json!({})).unwrap();
    let e = storaged::config::dispatch(&store, "store.config_apply", &raw)
        .await
        .unwrap()
        .unwrap_err();
    assert!(
        matches!(&e, StoreError::Invalid(m) if m.contains("invalid params")),
        "{e}"
    );
    store.close();
}

on_both!(
    an_age_cut_keeps_what_open_work_needs,
    a_count_cut_removes_the_oldest_beyond_the_count_in_batches,
    artifacts_of_running_executions_survive_and_orphans_go,
    stats_count_what_is_there,
    applying_a_config_twice_stores_one_generation,
);
