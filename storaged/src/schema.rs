//! The schema and its numbered, forward-only migrations.
//!
//! The schema version is SQLite's `user_version`. Each migration runs in its own
//! transaction together with the version bump. A database whose version is higher
//! than this release knows is refused, naming both versions.

use crate::error::StoreError;
use rusqlite::Connection;

/// The migrations, in order: migration `i` (1-based) brings version `i - 1` to `i`.
pub const MIGRATIONS: &[&str] = &[MIGRATION_1, MIGRATION_2, MIGRATION_3];

/// The schema version this release writes.
pub fn current_version() -> u32 {
    MIGRATIONS.len() as u32
}

/// Bring `conn` to the current version, or refuse a newer database.
pub fn migrate(conn: &mut Connection) -> Result<u32, StoreError> {
    let found: u32 = conn.query_row("PRAGMA user_version", [], |r| r.get(0))?;
    let ours = current_version();
    if found > ours {
        return Err(StoreError::NewerDatabase { found, ours });
    }
    for (i, sql) in MIGRATIONS.iter().enumerate().skip(found as usize) {
        let version = i as u32 + 1;
        let tx = conn.transaction()?;
        tx.execute_batch(sql)?;
        tx.pragma_update(None, "user_version", version)?;
        tx.commit()?;
        tracing::info!(version, "database migrated");
    }
    Ok(ours)
}

/// Version 3: resource leases, the workspace a resource provider made for a Work,
/// keyed by (type, ref). `owner` is a Work ID with no foreign key: a lease outlives
/// its Work (it goes only when the host drops it, after the provider removed the
/// workspace), and a provider may report an owner the store no longer has.
const MIGRATION_3: &str = r#"
CREATE TABLE resource_leases (
    type         TEXT NOT NULL,
    ref          TEXT NOT NULL,
    owner        TEXT NOT NULL,
    scope_id     TEXT NOT NULL DEFAULT '',
    binding      TEXT NOT NULL DEFAULT '',
    mode         TEXT NOT NULL DEFAULT '',
    dir          TEXT NOT NULL,
    data         TEXT,
    execution_id TEXT NOT NULL DEFAULT '',
    created_at   TEXT NOT NULL,
    updated_at   TEXT NOT NULL,
    PRIMARY KEY (type, ref)
) WITHOUT ROWID;
CREATE INDEX resource_leases_owner ON resource_leases(owner, type, ref);
"#;

/// Version 2: the causal-chain index covers derived events only (the only ones its
/// query asks about: `depth > 0`). A root's `root_id` is its own random ID, so indexing
/// roots cost every ingress write an insert at a random place in the index (a dirty
/// page per event in each commit) for nothing.
const MIGRATION_2: &str = r#"
DROP INDEX events_root;
CREATE INDEX events_derived ON events(root_id, accepted_ms) WHERE depth > 0;
"#;

/// Version 1: the whole first schema.
const MIGRATION_1: &str = r#"
-- The event log. `seq` is the acceptance order.
CREATE TABLE events (
    seq          INTEGER PRIMARY KEY AUTOINCREMENT,
    id           TEXT    NOT NULL UNIQUE,
    scope_id     TEXT    NOT NULL,
    type         TEXT    NOT NULL,
    source       TEXT    NOT NULL,
    delivery_id  TEXT,
    item         TEXT,
    item_version TEXT,
    schema       TEXT,
    payload      TEXT    NOT NULL,
    keys         TEXT    NOT NULL DEFAULT '[]',
    signature    TEXT    NOT NULL,
    parent_id    TEXT,
    root_id      TEXT    NOT NULL,
    depth        INTEGER NOT NULL DEFAULT 0,
    execution_id TEXT,
    occurred_at  TEXT,
    accepted_at  TEXT    NOT NULL,
    accepted_ms  INTEGER NOT NULL
);
-- The delivery identity and the observation identity: the same identity is the
-- same event, and a changed envelope under it is a conflict (by signature).
CREATE UNIQUE INDEX events_delivery ON events(source, delivery_id) WHERE delivery_id IS NOT NULL;
CREATE UNIQUE INDEX events_observation ON events(source, item, item_version) WHERE item IS NOT NULL;
CREATE INDEX events_scope ON events(scope_id, seq);
CREATE INDEX events_root ON events(root_id, accepted_ms);
CREATE INDEX events_accepted ON events(accepted_ms);
-- Correlation keys: a key finds its events.
CREATE TABLE event_keys (
    key TEXT    NOT NULL,
    seq INTEGER NOT NULL REFERENCES events(seq) ON DELETE CASCADE,
    PRIMARY KEY (key, seq)
) WITHOUT ROWID;
CREATE INDEX event_keys_seq ON event_keys(seq);

-- Ingress checkpoints per source.
CREATE TABLE checkpoints (
    source     TEXT PRIMARY KEY,
    checkpoint TEXT NOT NULL,
    generation TEXT NOT NULL DEFAULT '',
    updated_at TEXT NOT NULL
);

-- Work. `version` is bumped by every write, for preconditions.
CREATE TABLE works (
    id          TEXT    PRIMARY KEY,
    scope_id    TEXT    NOT NULL,
    kind        TEXT    NOT NULL,
    binding     TEXT    NOT NULL DEFAULT '',
    state       TEXT    NOT NULL,
    display     TEXT,
    context     TEXT,
    grants      TEXT    NOT NULL DEFAULT '[]',
    lease_epoch INTEGER NOT NULL DEFAULT 0,
    failures    INTEGER NOT NULL DEFAULT 0,
    retry_at_ms INTEGER,
    created_at  TEXT    NOT NULL,
    updated_at  TEXT    NOT NULL,
    version     INTEGER NOT NULL DEFAULT 1
);
CREATE INDEX works_scope ON works(scope_id, state);
CREATE INDEX works_state ON works(state, retry_at_ms);
CREATE INDEX works_state_page ON works(state, id);
CREATE INDEX works_scope_page ON works(scope_id, id);
-- A correlation key names at most one Work.
CREATE TABLE work_keys (
    key     TEXT PRIMARY KEY,
    work_id TEXT NOT NULL REFERENCES works(id) ON DELETE CASCADE
);
CREATE INDEX work_keys_work ON work_keys(work_id);
-- The events routed to a Work, in acceptance order, and what became of each.
CREATE TABLE work_inputs (
    work_id    TEXT    NOT NULL REFERENCES works(id) ON DELETE CASCADE,
    seq        INTEGER NOT NULL REFERENCES events(seq),
    state      TEXT    NOT NULL DEFAULT 'pending',
    attempt_id TEXT,
    PRIMARY KEY (work_id, seq)
) WITHOUT ROWID;
CREATE INDEX work_inputs_seq ON work_inputs(seq);
CREATE INDEX work_inputs_pending ON work_inputs(state, work_id);
-- Why each event went where it went: one row per route asked, in order.
CREATE TABLE route_records (
    seq             INTEGER NOT NULL REFERENCES events(seq) ON DELETE CASCADE,
    idx             INTEGER NOT NULL,
    scope_id        TEXT    NOT NULL,
    handler         TEXT    NOT NULL DEFAULT '',
    binding         TEXT    NOT NULL DEFAULT '',
    matched         INTEGER NOT NULL,
    work_id         TEXT,
    reason          TEXT    NOT NULL DEFAULT '',
    display_refused TEXT,
    recorded_at     TEXT    NOT NULL,
    PRIMARY KEY (seq, idx)
) WITHOUT ROWID;
-- Events the router has decided (routed or unmatched).
CREATE TABLE routed (
    seq         INTEGER PRIMARY KEY REFERENCES events(seq) ON DELETE CASCADE,
    disposition TEXT    NOT NULL,
    routed_at   TEXT    NOT NULL
);

-- Executions: one per attempt of a Work, each under its lease epoch.
CREATE TABLE executions (
    id              TEXT    PRIMARY KEY,
    work_id         TEXT    NOT NULL REFERENCES works(id) ON DELETE CASCADE,
    attempt         INTEGER NOT NULL,
    executor        TEXT    NOT NULL,
    binding         TEXT    NOT NULL DEFAULT '',
    state           TEXT    NOT NULL,
    lease_owner     TEXT    NOT NULL DEFAULT '',
    lease_epoch     INTEGER NOT NULL,
    lease_expires_ms INTEGER,
    recovery        TEXT,
    result          TEXT,
    retry_at_ms     INTEGER,
    started_at      TEXT    NOT NULL,
    settled_at      TEXT,
    UNIQUE (work_id, attempt)
);
CREATE INDEX executions_state ON executions(state, lease_expires_ms);
CREATE INDEX executions_state_page ON executions(state, id);

-- Waits: at most one active per Work.
CREATE TABLE waits (
    id           TEXT    PRIMARY KEY,
    work_id      TEXT    NOT NULL REFERENCES works(id) ON DELETE CASCADE,
    execution_id TEXT,
    owner        TEXT    NOT NULL DEFAULT '',
    description  TEXT    NOT NULL DEFAULT '',
    progress     TEXT    NOT NULL DEFAULT '',
    keys         TEXT    NOT NULL DEFAULT '[]',
    types        TEXT    NOT NULL DEFAULT '[]',
    plan         TEXT,
    due_ms       INTEGER,
    state        TEXT    NOT NULL,
    created_at   TEXT    NOT NULL,
    woken_at     TEXT,
    wake_seq     INTEGER
);
CREATE UNIQUE INDEX waits_active ON waits(work_id) WHERE state = 'active';
CREATE INDEX waits_due ON waits(state, due_ms);
CREATE INDEX waits_work ON waits(work_id, id);
CREATE INDEX waits_state_page ON waits(state, id);

-- Timers: recurrences, wait timeouts, retries; fired and re-armed atomically.
CREATE TABLE timers (
    id         TEXT    PRIMARY KEY,
    owner      TEXT    NOT NULL,
    kind       TEXT    NOT NULL,
    scope_id   TEXT    NOT NULL DEFAULT '',
    key        TEXT    NOT NULL,
    due_ms     INTEGER NOT NULL,
    spec       TEXT,
    payload    TEXT,
    created_at TEXT    NOT NULL,
    UNIQUE (owner, kind, scope_id, key)
);
CREATE INDEX timers_due ON timers(due_ms);
CREATE INDEX timers_owner_page ON timers(owner, id);

-- Extension KV. `version` is a digest of the value. The reserved namespace
-- `core.extensions` holds each extension's KV layout version; no extension can
-- address it.
CREATE TABLE kv (
    namespace  TEXT NOT NULL,
    key        TEXT NOT NULL,
    value      TEXT NOT NULL,
    version    TEXT NOT NULL,
    updated_at TEXT NOT NULL,
    PRIMARY KEY (namespace, key)
) WITHOUT ROWID;

-- Artifacts: the bytes are files under <state>/artifacts; a row means committed.
CREATE TABLE artifacts (
    id           TEXT    PRIMARY KEY,
    execution_id TEXT    NOT NULL DEFAULT '',
    name         TEXT    NOT NULL,
    media_type   TEXT    NOT NULL DEFAULT '',
    size         INTEGER NOT NULL,
    digest       TEXT    NOT NULL,
    created_at   TEXT    NOT NULL,
    created_ms   INTEGER NOT NULL
);
CREATE INDEX artifacts_created ON artifacts(created_ms);
CREATE INDEX artifacts_execution ON artifacts(execution_id);

-- Applied configurations.
CREATE TABLE config_generations (
    generation INTEGER PRIMARY KEY AUTOINCREMENT,
    hash       TEXT    NOT NULL,
    config     TEXT    NOT NULL,
    applied_at TEXT    NOT NULL
);
CREATE INDEX config_generations_hash ON config_generations(hash);
"#;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn migrates_an_empty_database_and_refuses_a_newer_one() {
        let mut conn = Connection::open_in_memory().unwrap();
        assert_eq!(migrate(&mut conn).unwrap(), current_version());
        // Idempotent.
        assert_eq!(migrate(&mut conn).unwrap(), current_version());
        let tables: i64 = conn
            .query_row(
                "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'events'",
                [],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(tables, 1);
        conn.pragma_update(None, "user_version", current_version() + 7)
            .unwrap();
        let e = migrate(&mut conn).unwrap_err();
        let text = e.to_string();
        assert!(
            text.contains(&format!("{}", current_version() + 7)),
            "{text}"
        );
        assert!(text.contains(&format!("{}", current_version())), "{text}");
    }

    #[test]
    fn a_version_2_database_migrates_to_3_and_keeps_its_rows() {
        let mut conn = Connection::open_in_memory().unwrap();
        for (i, sql) in MIGRATIONS.iter().take(2).enumerate() {
            conn.execute_batch(sql).unwrap();
            conn.pragma_update(None, "user_version", i as u32 + 1)
                .unwrap();
        }
        conn.execute(
            "INSERT INTO works (id, scope_id, kind, state, created_at, updated_at)
             VALUES ('work_1', 's1', 'k', 'completed', 'a', 'b')",
            [],
        )
        .unwrap();
        let leases = |conn: &Connection| -> i64 {
            conn.query_row(
                "SELECT count(*) FROM sqlite_master WHERE name = 'resource_leases'",
                [],
                |r| r.get(0),
            )
            .unwrap()
        };
        assert_eq!(leases(&conn), 0);
        assert_eq!(migrate(&mut conn).unwrap(), 3);
        let version: u32 = conn
            .query_row("PRAGMA user_version", [], |r| r.get(0))
            .unwrap();
        assert_eq!(version, 3);
        assert_eq!(leases(&conn), 1);
        let kept: String = conn
            .query_row("SELECT state FROM works WHERE id = 'work_1'", [], |r| {
                r.get(0)
            })
            .unwrap();
        assert_eq!(kept, "completed");
        conn.execute(
            "INSERT INTO resource_leases (type, ref, owner, dir, created_at, updated_at)
             VALUES ('git', 'r1', 'work_1', '/w', 'a', 'a')",
            [],
        )
        .unwrap();
        // A lease is unique per (type, ref).
        assert!(conn
            .execute(
                "INSERT INTO resource_leases (type, ref, owner, dir, created_at, updated_at)
                 VALUES ('git', 'r1', 'work_2', '/x', 'a', 'a')",
                [],
            )
            .is_err());
    }

    #[test]
    fn the_causal_chain_query_uses_the_derived_index() {
        let mut conn = Connection::open_in_memory().unwrap();
        migrate(&mut conn).unwrap();
        let plan: Vec<String> = conn
            .prepare(
                "EXPLAIN QUERY PLAN SELECT count(*) FROM events
                 WHERE root_id = ?1 AND accepted_ms > ?2 AND depth > 0",
            )
            .unwrap()
            .query_map(["evt_x", "0"], |r| r.get::<_, String>(3))
            .unwrap()
            .map(Result::unwrap)
            .collect();
        assert!(
            plan.iter().any(|l| l.contains("events_derived")),
            "{plan:?}"
        );
    }
}
