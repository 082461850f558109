//! Retention (`store.retention_run`).
//!
//! Retention removes old events and artifacts in batches of at most
//! [`BATCH`] rows per write, so a huge cleanup never holds the writer for long.
//! It never removes what open Work still needs:
//!
//! * an input of a Work not in a terminal state (`completed`, `failed`,
//!   `cancelled`), an event a live Wait refers to (`waits.wake_seq` of an active
//!   Wait or of an open Work's Wait), and every ancestor (parent chain and root) of
//!   such an event;
//! * an event the router has not decided yet (no `routed` row): it may still
//!   become an input;
//! * an artifact of an Execution still running.
//!
//! It never removes Work nor resource leases: a lease goes only when the host drops
//! it, after its provider removed the workspace.
//!
//! Removing an event removes its keys, route records and routed row (ON DELETE
//! CASCADE) and the `work_inputs` rows of terminal Work that name it.
//!
//! Files: an artifact's row goes first, then its file (a crash in between leaves
//! an orphan file, which the next run removes). A file in `artifacts/` with
//! neither a row nor an open `.meta` is an orphan; files in `artifacts/tmp/` whose
//! artifact was last touched more than a day ago are stale.

use crate::artifacts::{self, META_SUFFIX};
use crate::db::Store;
use crate::error::StoreError;
use crate::sql::{Connection, OptionalExtension};
use crate::util;
pub use busapi::store::retention::*;
use std::collections::HashMap;
use std::io::ErrorKind;
use std::path::Path;
use std::time::UNIX_EPOCH;

/// Most rows removed by one write.
pub const BATCH: usize = 1000;

/// How long an open artifact may go untouched before its tmp files are stale.
pub const STALE_TMP_MS: i64 = 24 * 60 * 60 * 1000;

/// The terminal states of Work.
const TERMINAL: &str = "('completed', 'failed', 'cancelled')";

// ---------------------------------------------------------------------------------------
// Events
// ---------------------------------------------------------------------------------------

/// The events open Work needs (`needed`) and their ancestors' ids (`ancestors`),
/// as CTEs, followed by the candidate query's `SELECT`.
fn protected_ctes() -> String {
    format!(
        "WITH RECURSIVE
           open_works(id) AS (SELECT id FROM works WHERE state NOT IN {TERMINAL}),
           needed(seq) AS (
             SELECT wi.seq FROM work_inputs wi WHERE wi.work_id IN (SELECT id FROM open_works)
             UNION
             SELECT w.wake_seq FROM waits w
              WHERE w.wake_seq IS NOT NULL
                AND (w.state = 'active' OR w.work_id IN (SELECT id FROM open_works))
           ),
           ancestors(id) AS (
             SELECT e.parent_id FROM events e
              WHERE e.seq IN (SELECT seq FROM needed) AND e.parent_id IS NOT NULL
             UNION
             SELECT e.root_id FROM events e WHERE e.seq IN (SELECT seq FROM needed)
             UNION
             SELECT e.parent_id FROM events e JOIN ancestors a ON e.id = a.id
              WHERE e.parent_id IS NOT NULL
           )"
    )
}

const REMOVABLE: &str = "EXISTS (SELECT 1 FROM routed r WHERE r.seq = e.seq)
         AND e.seq NOT IN (SELECT seq FROM needed WHERE seq IS NOT NULL)
         AND e.id NOT IN (SELECT id FROM ancestors WHERE id IS NOT NULL)";

/// Remove the given events, with the `work_inputs` rows of terminal Work naming
/// them. Returns (events, work_inputs) removed.
fn remove_events(conn: &Connection, seqs: &[i64]) -> Result<(u64, u64), StoreError> {
    let mut inputs = conn.prepare_cached("DELETE FROM work_inputs WHERE seq = ?1")?;
    let mut events = conn.prepare_cached("DELETE FROM events WHERE seq = ?1")?;
    let (mut ev, mut wi) = (0u64, 0u64);
    for seq in seqs {
        wi += inputs.execute([seq])? as u64;
        ev += events.execute([seq])? as u64;
    }
    Ok((ev, wi))
}

/// What one batch of event removal did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EventBatch<C> {
    /// The cursor of the next batch; `None` when this one was the last.
    pub next: Option<C>,
    /// Events removed.
    pub events: u64,
    /// `work_inputs` rows removed.
    pub work_inputs: u64,
}

/// One batch of the count cut: removable events with `after < seq <= cut_seq`.
pub fn remove_events_upto_seq(
    conn: &Connection,
    after: i64,
    cut_seq: i64,
    batch: usize,
) -> Result<EventBatch<i64>, StoreError> {
    let sql = format!(
        "{} SELECT e.seq FROM events e
          WHERE e.seq > ?1 AND e.seq <= ?2 AND {REMOVABLE}
          ORDER BY e.seq LIMIT ?3",
        protected_ctes()
    );
    let seqs: Vec<i64> = {
        let mut stmt = conn.prepare_cached(&sql)?;
        let rows = stmt.query_map(crate::sql::params![after, cut_seq, batch as i64], |r| {
            r.get(0)
        })?;
        rows.collect::<Result<_, _>>()?
    };
    let (ev, wi) = remove_events(conn, &seqs)?;
    let next = if seqs.len() < batch {
        None
    } else {
        seqs.last().copied()
    };
    Ok(EventBatch {
        next,
        events: ev,
        work_inputs: wi,
    })
}

/// One batch of the age cut: removable events accepted before `cut_ms`, after the
/// cursor `(after_ms, after_seq)` in `(accepted_ms, seq)` order.
pub fn remove_events_before_ms(
    conn: &Connection,
    after: (i64, i64),
    cut_ms: i64,
    batch: usize,
) -> Result<EventBatch<(i64, i64)>, StoreError> {
    let sql = format!(
        "{} SELECT e.accepted_ms, e.seq FROM events e
          WHERE e.accepted_ms < ?1
            AND (e.accepted_ms > ?2 OR (e.accepted_ms = ?2 AND e.seq > ?3))
            AND {REMOVABLE}
          ORDER BY e.accepted_ms, e.seq LIMIT ?4",
        protected_ctes()
    );
    let found: Vec<(i64, i64)> = {
        let mut stmt = conn.prepare_cached(&sql)?;
        let rows = stmt.query_map(
            crate::sql::params![cut_ms, after.0, after.1, batch as i64],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )?;
        rows.collect::<Result<_, _>>()?
    };
    let seqs: Vec<i64> = found.iter().map(|(_, s)| *s).collect();
    let (ev, wi) = remove_events(conn, &seqs)?;
    let next = if found.len() < batch {
        None
    } else {
        found.last().copied()
    };
    Ok(EventBatch {
        next,
        events: ev,
        work_inputs: wi,
    })
}

/// The seq at and below which events are over `max_events`, if any are.
pub fn count_cut_seq(conn: &Connection, max_events: u64) -> Result<Option<i64>, StoreError> {
    let count: i64 = conn.query_row("SELECT count(*) FROM events", [], |r| r.get(0))?;
    let over = count.saturating_sub(max_events.min(i64::MAX as u64) as i64);
    if over <= 0 {
        return Ok(None);
    }
    Ok(conn
        .query_row(
            "SELECT seq FROM events ORDER BY seq LIMIT 1 OFFSET ?1",
            [over - 1],
            |r| r.get(0),
        )
        .optional()?)
}

// ---------------------------------------------------------------------------------------
// Artifacts
// ---------------------------------------------------------------------------------------

const NOT_RUNNING: &str = "(a.execution_id = '' OR NOT EXISTS (
     SELECT 1 FROM executions x WHERE x.id = a.execution_id AND x.state = 'running'))";

/// Remove one batch of artifact rows committed before `cut_ms` (oldest first, none
/// of a running Execution). Returns the removed (id, size).
pub fn remove_artifacts_before_ms(
    conn: &Connection,
    cut_ms: i64,
    batch: usize,
) -> Result<Vec<(String, u64)>, StoreError> {
    let victims: Vec<(String, i64)> = {
        let mut stmt = conn.prepare_cached(&format!(
            "SELECT a.id, a.size FROM artifacts a
              WHERE a.created_ms < ?1 AND {NOT_RUNNING}
              ORDER BY a.created_ms, a.id LIMIT ?2"
        ))?;
        let rows = stmt.query_map(crate::sql::params![cut_ms, batch as i64], |r| {
            Ok((r.get(0)?, r.get(1)?))
        })?;
        rows.collect::<Result<_, _>>()?
    };
    delete_artifact_rows(conn, victims)
}

/// Remove one batch of the oldest artifact rows (none of a running Execution)
/// while the total is over `max_bytes`. Returns the removed (id, size).
pub fn remove_artifacts_over_bytes(
    conn: &Connection,
    max_bytes: u64,
    batch: usize,
) -> Result<Vec<(String, u64)>, StoreError> {
    let total: i64 = conn.query_row(
        "SELECT CAST(coalesce(sum(size), 0) AS BIGINT) FROM artifacts",
        [],
        |r| r.get(0),
    )?;
    let mut over = (total.max(0) as u64).saturating_sub(max_bytes);
    if over == 0 {
        return Ok(Vec::new());
    }
    let mut victims = Vec::new();
    {
        let mut stmt = conn.prepare_cached(&format!(
            "SELECT a.id, a.size FROM artifacts a WHERE {NOT_RUNNING}
              ORDER BY a.created_ms, a.id LIMIT ?1"
        ))?;
        let mut rows = stmt.query([batch as i64])?;
        while over > 0 {
            let Some(row) = rows.next()? else { break };
            let (id, size): (String, i64) = (row.get(0)?, row.get(1)?);
            over = over.saturating_sub(size.max(0) as u64);
            victims.push((id, size));
        }
    }
    delete_artifact_rows(conn, victims)
}

fn delete_artifact_rows(
    conn: &Connection,
    victims: Vec<(String, i64)>,
) -> Result<Vec<(String, u64)>, StoreError> {
    let mut del = conn.prepare_cached("DELETE FROM artifacts WHERE id = ?1")?;
    let mut out = Vec::with_capacity(victims.len());
    for (id, size) in victims {
        if del.execute([&id])? > 0 {
            out.push((id, size.max(0) as u64));
        }
    }
    Ok(out)
}

/// Remove committed artifacts' files (their rows are gone). Returns how many were
/// there.
fn remove_artifact_files(state_dir: &Path, ids: &[String]) -> Result<u64, StoreError> {
    let dir = artifacts::artifacts_dir(state_dir);
    let mut n = 0;
    for id in ids {
        if !artifacts::is_valid_id(id) {
            continue;
        }
        match std::fs::remove_file(dir.join(id)) {
            Ok(()) => n += 1,
            Err(e) if e.kind() == ErrorKind::NotFound => {}
            Err(e) => {
                return Err(StoreError::Io(format!(
                    "remove {}: {e}",
                    dir.join(id).display()
                )))
            }
        }
    }
    if n > 0 {
        artifacts::sync_dir(&dir)?;
    }
    Ok(n)
}

fn mtime_ms(meta: &std::fs::Metadata) -> i64 {
    meta.modified()
        .ok()
        .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
        .map_or(0, |d| d.as_millis() as i64)
}

/// Remove the tmp files of open artifacts untouched (data and meta) since before
/// `cut_ms`, and other tmp files as old. Returns how many files went.
fn remove_stale_tmp(state_dir: &Path, cut_ms: i64) -> Result<u64, StoreError> {
    let tmp = artifacts::tmp_dir(state_dir);
    let entries = match std::fs::read_dir(&tmp) {
        Ok(e) => e,
        Err(e) if e.kind() == ErrorKind::NotFound => return Ok(0),
        Err(e) => return Err(StoreError::Io(format!("list {}: {e}", tmp.display()))),
    };
    // The latest touch of each artifact (by id), over its data and meta files.
    let mut latest: HashMap<String, i64> = HashMap::new();
    let mut files = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|e| StoreError::Io(format!("list {}: {e}", tmp.display())))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        let Ok(meta) = entry.metadata() else { continue };
        if !meta.is_file() || name.starts_with('.') {
            continue;
        }
        let id = name.strip_suffix(META_SUFFIX).unwrap_or(&name).to_string();
        let t = mtime_ms(&meta);
        let e = latest.entry(id.clone()).or_insert(t);
        *e = (*e).max(t);
        files.push((name, id));
    }
    let mut n = 0;
    for (name, id) in files {
        if latest.get(&id).is_some_and(|t| *t < cut_ms) {
            match std::fs::remove_file(tmp.join(&name)) {
                Ok(()) => n += 1,
                Err(e) if e.kind() == ErrorKind::NotFound => {}
                Err(e) => {
                    tracing::warn!(file = %name, error = %e, "cannot remove a stale artifact file")
                }
            }
        }
    }
    Ok(n)
}

/// The artifact ids that have files in `artifacts/` (not in `tmp/`).
fn artifact_files(state_dir: &Path) -> Result<Vec<String>, StoreError> {
    let dir = artifacts::artifacts_dir(state_dir);
    let entries = match std::fs::read_dir(&dir) {
        Ok(e) => e,
        Err(e) if e.kind() == ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(StoreError::Io(format!("list {}: {e}", dir.display()))),
    };
    let mut ids = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|e| StoreError::Io(format!("list {}: {e}", dir.display())))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if artifacts::is_valid_id(&name) && entry.file_type().is_ok_and(|t| t.is_file()) {
            ids.push(name);
        }
    }
    Ok(ids)
}

// ---------------------------------------------------------------------------------------
// The methods
// ---------------------------------------------------------------------------------------

fn check_non_negative(name: &str, v: Option<i64>) -> Result<(), StoreError> {
    match v {
        Some(n) if n < 0 => Err(StoreError::invalid(format!(
            "{name} is {n}: it must not be negative"
        ))),
        _ => Ok(()),
    }
}

impl Store {
    /// `store.retention_run`.
    pub async fn retention_run(
        &self,
        req: RetentionRunRequest,
    ) -> Result<RetentionRunResponse, StoreError> {
        check_non_negative("max_event_age_ms", req.max_event_age_ms)?;
        check_non_negative("max_artifact_age_ms", req.max_artifact_age_ms)?;
        let now = req.now_ms.unwrap_or_else(util::now_ms);
        let mut out = RetentionRunResponse::default();

        // Events: the age cut, then the count cut.
        if let Some(age) = req.max_event_age_ms {
            let cut_ms = now.saturating_sub(age);
            let mut cursor = (i64::MIN, i64::MIN);
            loop {
                let b = self
                    .write(move |conn| remove_events_before_ms(conn, cursor, cut_ms, BATCH))
                    .await?;
                out.events_removed += b.events;
                out.work_inputs_removed += b.work_inputs;
                match b.next {
                    Some(c) => cursor = c,
                    None => break,
                }
            }
        }
        if let Some(max) = req.max_events {
            if let Some(cut_seq) = self.read(move |conn| count_cut_seq(conn, max)).await? {
                let mut after = i64::MIN;
                loop {
                    let b = self
                        .write(move |conn| remove_events_upto_seq(conn, after, cut_seq, BATCH))
                        .await?;
                    out.events_removed += b.events;
                    out.work_inputs_removed += b.work_inputs;
                    match b.next {
                        Some(s) => after = s,
                        None => break,
                    }
                }
            }
        }

        // Artifacts: rows first, then files.
        let dir = self.dir().to_path_buf();
        if let Some(age) = req.max_artifact_age_ms {
            let cut_ms = now.saturating_sub(age);
            loop {
                let gone = self
                    .write(move |conn| remove_artifacts_before_ms(conn, cut_ms, BATCH))
                    .await?;
                let more = gone.len() == BATCH;
                self.account_removed(&dir, gone, &mut out).await?;
                if !more {
                    break;
                }
            }
        }
        if let Some(max) = req.max_artifact_bytes {
            loop {
                let gone = self
                    .write(move |conn| remove_artifacts_over_bytes(conn, max, BATCH))
                    .await?;
                let more = gone.len() == BATCH;
                self.account_removed(&dir, gone, &mut out).await?;
                if !more {
                    break;
                }
            }
        }

        // Stale tmp files, then orphans (a stale `.meta` no longer shields its file).
        let stale_dir = dir.clone();
        out.stale_tmp_files_removed = tokio::task::spawn_blocking(move || {
            remove_stale_tmp(&stale_dir, now.saturating_sub(STALE_TMP_MS))
        })
        .await
        .map_err(|e| StoreError::Internal(format!("retention file task: {e}")))??;
        out.orphan_files_removed = self.remove_orphans().await?;
        Ok(out)
    }

    async fn account_removed(
        &self,
        dir: &Path,
        gone: Vec<(String, u64)>,
        out: &mut RetentionRunResponse,
    ) -> Result<(), StoreError> {
        if gone.is_empty() {
            return Ok(());
        }
        out.artifacts_removed += gone.len() as u64;
        out.artifact_bytes_removed += gone.iter().map(|(_, s)| *s).sum::<u64>();
        let ids: Vec<String> = gone.into_iter().map(|(id, _)| id).collect();
        let dir = dir.to_path_buf();
        tokio::task::spawn_blocking(move || remove_artifact_files(&dir, &ids))
            .await
            .map_err(|e| StoreError::Internal(format!("retention file task: {e}")))??;
        Ok(())
    }

    /// Remove the files in `artifacts/` that have neither a row nor an open
    /// `.meta` (a commit between its rename and its row keeps its `.meta` until the
    /// row is durable, so it is never taken for an orphan).
    async fn remove_orphans(&self) -> Result<u64, StoreError> {
        let dir = self.dir().to_path_buf();
        let list_dir = dir.clone();
        let candidates = tokio::task::spawn_blocking(move || -> Result<Vec<String>, StoreError> {
            let tmp = artifacts::tmp_dir(&list_dir);
            Ok(artifact_files(&list_dir)?
                .into_iter()
                .filter(|id| !tmp.join(format!("{id}{META_SUFFIX}")).exists())
                .collect())
        })
        .await
        .map_err(|e| StoreError::Internal(format!("retention file task: {e}")))??;
        let mut removed = 0;
        for chunk in candidates.chunks(BATCH) {
            let ids = chunk.to_vec();
            let orphans = self
                .read(move |conn| {
                    let mut stmt = conn.prepare_cached("SELECT 1 FROM artifacts WHERE id = ?1")?;
                    let mut out = Vec::new();
                    for id in ids {
                        if !stmt.exists([&id])? {
                            out.push(id);
                        }
                    }
                    Ok(out)
                })
                .await?;
            let dir = dir.clone();
            removed += tokio::task::spawn_blocking(move || remove_artifact_files(&dir, &orphans))
                .await
                .map_err(|e| StoreError::Internal(format!("retention file task: {e}")))??;
        }
        Ok(removed)
    }
}

crate::store_methods! {
    RetentionRunRequest => retention_run,
}
