//! Several hosts, one suite: `store.host_beat` and `store.hosts` (each host's
//! liveness), and `store.task_claim` (an extension task's pass, claimed by one host).
//!
//! A host is alive while its beat is fresh: each beat pushes `expires_ms` one host
//! lease (the host's own, at most [`MAX_HOST_LEASE_MS`]) ahead. A host whose
//! `expires_ms` passed, or that never beat, is gone: only then may another host take
//! over its expired attempts (`store.lease_takeover` checks it in the same write).
//!
//! Host leases are measured by the database's clock, and only over time the database
//! was seen reachable (issue 47): when no host has beaten for [`OUTAGE_GAP_MS`], the
//! database was away from every host (or every host from it), and the first write
//! that judges hosts afterwards ([`observe`]: a beat or a takeover) counts as a beat of
//! every host that was alive at the last beat seen, so each has one full lease of
//! reachable database to beat again; reads judge the same way meanwhile
//! ([`alive_after`]).

use super::*;
pub use busapi::store::work::hosts::*;

/// The longest host lease a host may declare.
pub const MAX_HOST_LEASE_MS: u64 = 60 * 60 * 1000;
/// The shortest.
pub const MIN_HOST_LEASE_MS: u64 = 1000;
/// The longest interval an extension task may declare (a week).
pub const MAX_TASK_EVERY_MS: u64 = 7 * 24 * 60 * 60 * 1000;
/// A host gone this long, holding no running or waiting attempt, is forgotten at the
/// next beat of any host.
pub const FORGET_HOST_MS: i64 = 7 * 24 * 60 * 60 * 1000;

/// No beat of any host for this long means the database was away from every host
/// (schedulerd beats every 3 s, and retries a failed beat every second): see
/// docs/decisions.md, "Leases after a database outage (issue 47)".
pub const OUTAGE_GAP_MS: i64 = 5_000;

/// The database's clock, in ms since the epoch (the hosts' clocks may differ; on
/// SQLite, one process on one machine, this machine's).
pub(crate) fn db_now_ms(conn: &Connection) -> Result<i64, StoreError> {
    Ok(match conn.backend() {
        crate::sql::Backend::Postgres => conn.query_row(
            "SELECT (EXTRACT(EPOCH FROM clock_timestamp()) * 1000)::BIGINT",
            [],
            |r| r.get(0),
        )?,
        crate::sql::Backend::Sqlite => util::now_ms(),
    })
}

/// The last beat of any host the database has seen.
fn last_beat(conn: &Connection) -> Result<Option<i64>, StoreError> {
    Ok(conn.query_row("SELECT MAX(beat_ms) FROM hosts", [], |r| r.get(0))?)
}

/// The database's time, and the time a host's `expires_ms` must be after to count as
/// alive: now, or, while no host has beaten for [`OUTAGE_GAP_MS`] (the database was
/// away from every host until a moment ago), the last beat seen.
pub(crate) fn alive_after(conn: &Connection) -> Result<(i64, i64), StoreError> {
    let now = db_now_ms(conn)?;
    let cutoff = match last_beat(conn)? {
        Some(last) if now.saturating_sub(last) > OUTAGE_GAP_MS => last.min(now),
        _ => now,
    };
    Ok((now, cutoff))
}

/// In a write that judges hosts: when no host has beaten for [`OUTAGE_GAP_MS`], every
/// host that was alive at the last beat seen gets a beat now (a full lease of its own
/// from the database's return). Answers the database's time.
pub(crate) fn observe(conn: &Connection) -> Result<i64, StoreError> {
    let (now, cutoff) = alive_after(conn)?;
    if cutoff < now {
        let n = conn.execute(
            "UPDATE hosts SET expires_ms = expires_ms - beat_ms + ?1, beat_ms = ?1 \
             WHERE expires_ms > ?2",
            params![now, cutoff],
        )?;
        tracing::warn!(
            silent_ms = now - cutoff,
            hosts = n,
            "no host beat for longer than {OUTAGE_GAP_MS} ms (the database was away): every \
             host alive then is given a full lease from now"
        );
    }
    Ok(now)
}

/// A host ID: 1 to 64 of `A-Z a-z 0-9 _ - .`.
pub fn check_host(field: &str, v: &str) -> Result<(), StoreError> {
    if v.is_empty() || v.len() > 64 {
        return Err(StoreError::invalid(format!(
            "{field} must be 1 to 64 bytes (the host ID limit), not {}",
            v.len()
        )));
    }
    if !v
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-' || b == b'.')
    {
        return Err(StoreError::invalid(format!(
            "{field} {v:?} may hold only A-Z a-z 0-9 _ - ."
        )));
    }
    Ok(())
}

/// When `host`'s lease runs out (`None`: it never beat, or was forgotten).
pub(crate) fn host_expires(conn: &Connection, host: &str) -> Result<Option<i64>, StoreError> {
    Ok(conn
        .query_row("SELECT expires_ms FROM hosts WHERE id = ?1", [host], |r| {
            r.get(0)
        })
        .optional()?)
}

// ---------------------------------------------------------------------------------------
// store.host_beat, store.hosts
// ---------------------------------------------------------------------------------------

/// Record a beat.
pub fn host_beat(
    conn: &Connection,
    limits: &Limits,
    req: &HostBeatRequest,
) -> Result<HostBeatResponse, StoreError> {
    check_host("host", &req.host)?;
    check_opt_name("name", &req.name, limits)?;
    if !(MIN_HOST_LEASE_MS..=MAX_HOST_LEASE_MS).contains(&req.lease_ms) {
        return Err(StoreError::invalid(format!(
            "lease_ms {} is outside the host lease limits ({MIN_HOST_LEASE_MS} to {MAX_HOST_LEASE_MS} ms)",
            req.lease_ms
        )));
    }
    let now_ms = observe(conn)?;
    let expires = now_ms.saturating_add(req.lease_ms as i64);
    let before = host_expires(conn, &req.host)?;
    let returned = before.is_none_or(|e| e <= now_ms);
    if before.is_some() {
        conn.execute(
            "UPDATE hosts SET name = ?2, beat_ms = ?3, expires_ms = ?4 WHERE id = ?1",
            params![req.host, req.name, now_ms, expires],
        )?;
    } else {
        conn.execute(
            "INSERT INTO hosts (id, name, beat_ms, expires_ms, started_at) \
             VALUES (?1, ?2, ?3, ?4, ?5)",
            params![req.host, req.name, now_ms, expires, util::rfc3339(now_ms)],
        )?;
    }
    if returned {
        // Forget hosts long gone that hold nothing (each new `up` state directory is a
        // new host); done when a host (re)appears, so rarely.
        conn.execute(
            "DELETE FROM hosts WHERE expires_ms < ?1 AND NOT EXISTS (SELECT 1 FROM executions e \
             WHERE e.host = hosts.id AND e.state IN ('running', 'waiting'))",
            params![now_ms.saturating_sub(FORGET_HOST_MS)],
        )?;
    }
    Ok(HostBeatResponse {
        expires_ms: expires,
        returned,
        gone_since_ms: before.filter(|e| *e <= now_ms),
    })
}

/// The hosts.
pub fn hosts(
    conn: &Connection,
    limits: &Limits,
    req: &HostsRequest,
) -> Result<HostsResponse, StoreError> {
    check_opt_name("after", &req.after, limits)?;
    let limit = page_limit(req.limit, limits)?;
    let (_, alive_after) = alive_after(conn)?;
    let mut stmt = conn.prepare_cached(
        "SELECT h.id, h.name, h.beat_ms, h.expires_ms, h.started_at, \
         (SELECT count(*) FROM executions e WHERE e.host = h.id AND e.state = 'running') \
         FROM hosts h WHERE h.id > ?1 ORDER BY h.id LIMIT ?2",
    )?;
    let hosts = stmt
        .query_map(params![req.after, limit], |r| {
            let expires_ms: i64 = r.get(3)?;
            Ok(HostRow {
                id: r.get(0)?,
                name: r.get(1)?,
                beat_ms: r.get(2)?,
                expires_ms,
                alive: expires_ms > alive_after,
                started_at: r.get(4)?,
                running: r.get(5)?,
            })
        })?
        .collect::<crate::sql::Result<Vec<_>>>()?;
    let next = if hosts.len() as i64 == limit {
        hosts.last().map(|h| h.id.clone()).unwrap_or_default()
    } else {
        String::new()
    };
    Ok(HostsResponse { hosts, next })
}

// ---------------------------------------------------------------------------------------
// store.task_claim
// ---------------------------------------------------------------------------------------

/// Claim a task's pass. The first claim of a task schedules its first pass one
/// interval later; a claim of a due task moves its due time one interval past now
/// (a missed pass runs once, not once per missed interval); a changed interval
/// takes effect at once (never later than one new interval from now).
pub fn task_claim(
    conn: &Connection,
    limits: &Limits,
    req: &TaskClaimRequest,
) -> Result<TaskClaimResponse, StoreError> {
    check_name("extension", &req.extension, limits)?;
    check_name("task", &req.task, limits)?;
    check_host("host", &req.host)?;
    if req.every_ms == 0 || req.every_ms > MAX_TASK_EVERY_MS {
        return Err(StoreError::invalid(format!(
            "every_ms {} is outside the task interval limits (1 to {MAX_TASK_EVERY_MS} ms)",
            req.every_ms
        )));
    }
    let every = req.every_ms as i64;
    let now_ms = util::now_ms();
    let next = now_ms.saturating_add(every);
    let row: Option<(i64, i64, String)> = conn
        .query_row(
            "SELECT every_ms, due_ms, host FROM task_claims WHERE extension = ?1 AND task = ?2",
            params![req.extension, req.task],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
        )
        .optional()?;
    let Some((was_every, due, host)) = row else {
        conn.execute(
            "INSERT INTO task_claims (extension, task, every_ms, due_ms) VALUES (?1, ?2, ?3, ?4)",
            params![req.extension, req.task, every, next],
        )?;
        return Ok(TaskClaimResponse {
            claimed: false,
            due_ms: next,
            host: String::new(),
        });
    };
    if due > now_ms {
        let due = if was_every != every {
            let due = due.min(next);
            conn.execute(
                "UPDATE task_claims SET every_ms = ?3, due_ms = ?4 WHERE extension = ?1 AND task = ?2",
                params![req.extension, req.task, every, due],
            )?;
            due
        } else {
            due
        };
        return Ok(TaskClaimResponse {
            claimed: false,
            due_ms: due,
            host,
        });
    }
    conn.execute(
        "UPDATE task_claims SET every_ms = ?3, due_ms = ?4, host = ?5, claimed_at = ?6 \
         WHERE extension = ?1 AND task = ?2",
        params![
            req.extension,
            req.task,
            every,
            next,
            req.host,
            util::rfc3339(now_ms)
        ],
    )?;
    Ok(TaskClaimResponse {
        claimed: true,
        due_ms: next,
        host: req.host.clone(),
    })
}
