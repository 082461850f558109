//! Moving a whole store between backends: `open-conduit store export` writes
//! every table's rows to a file (JSON lines), `import` writes them into an empty
//! store, and both sides are checked by each table's row count and a digest of
//! the rows.
//!
//! The export reads one snapshot (a read transaction), table by table in pages
//! by primary key. The digest does not depend on row order (the two backends
//! sort text differently): each row's SHA-256 is summed per table, and the sums
//! and counts of every table are hashed together. The tables and their columns
//! come from the migrations themselves, so the format follows the schema.
//!
//! Artifacts' bytes are files under `<state>/artifacts`, not rows: they stay
//! where they are (copy the directory when moving to another host).

use crate::error::StoreError;
use crate::schema;
use crate::sql::{Backend, Connection, Kind, Param, ToSql, Value};
use crate::Store;
use serde_json::{json, Value as Json};
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::io::{BufRead, Write};

/// The first line's `format`.
pub const FORMAT: &str = "open-conduit-store-export";
/// Rows read (or written) per page.
const PAGE: usize = 1000;
/// How long an export's snapshot may sit idle between two pages (PostgreSQL;
/// over it the server ends the session and the export fails, saying so).
pub const SNAPSHOT_IDLE: std::time::Duration = std::time::Duration::from_secs(300);
/// The longest line an import reads (a row holds at most one 32 MiB payload,
/// written as JSON text inside JSON).
pub const MAX_LINE_BYTES: usize = 80 * 1024 * 1024;

/// A table as the schema has it.
#[derive(Debug, Clone)]
pub struct Table {
    /// Its name.
    pub name: String,
    /// Its columns, in order, with their kinds.
    pub columns: Vec<(String, Kind)>,
    /// Its primary key's columns.
    pub key: Vec<String>,
}

/// The store's tables, read from the migrations applied to an empty database.
pub fn tables() -> Result<Vec<Table>, StoreError> {
    let conn = Connection::sqlite(rusqlite::Connection::open_in_memory()?);
    schema::migrate(&conn)?;
    let mut out = Vec::new();
    for name in schema::TABLES {
        let mut columns = Vec::new();
        let mut key: Vec<(i64, String)> = Vec::new();
        let mut stmt = conn.prepare(&format!("PRAGMA table_info({name})"))?;
        for row in stmt.query_map([], |r| {
            Ok((
                r.get::<_, String>(1)?,
                r.get::<_, String>(2)?,
                r.get::<_, i64>(5)?,
            ))
        })? {
            let (column, ty, pk) = row?;
            let kind = match ty.to_ascii_uppercase().as_str() {
                "INTEGER" => Kind::Int,
                "REAL" => Kind::Real,
                "BLOB" => Kind::Blob,
                _ => Kind::Text,
            };
            if pk > 0 {
                key.push((pk, column.clone()));
            }
            columns.push((column, kind));
        }
        if *name == "artifacts" {
            // Pages of artifacts are ordered by SQLite's rowid: keep it.
            columns.insert(0, ("rowid".into(), Kind::Int));
        }
        key.sort();
        out.push(Table {
            name: (*name).to_string(),
            columns,
            key: key.into_iter().map(|(_, c)| c).collect(),
        });
    }
    Ok(out)
}

/// What a store holds: rows per table and the digest over all of them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Summary {
    /// Rows per table.
    pub rows: BTreeMap<String, u64>,
    /// `sha256:<hex>` over every table's rows.
    pub digest: String,
}

impl Summary {
    /// Every table's rows added up.
    pub fn total(&self) -> u64 {
        self.rows.values().sum()
    }
}

/// Order-independent digest of one table's rows.
#[derive(Default)]
struct TableDigest {
    count: u64,
    sum: [u128; 2],
}

impl TableDigest {
    fn add(&mut self, table: &str, row: &str) {
        let mut h = Sha256::new();
        h.update(table.as_bytes());
        h.update(b"\n");
        h.update(row.as_bytes());
        let d = h.finalize();
        let mut hi = [0u8; 16];
        let mut lo = [0u8; 16];
        hi.copy_from_slice(&d[..16]);
        lo.copy_from_slice(&d[16..]);
        self.sum[0] = self.sum[0].wrapping_add(u128::from_be_bytes(hi));
        self.sum[1] = self.sum[1].wrapping_add(u128::from_be_bytes(lo));
        self.count += 1;
    }
}

fn summary(digests: &BTreeMap<String, TableDigest>) -> Summary {
    let mut h = Sha256::new();
    let mut rows = BTreeMap::new();
    for (name, d) in digests {
        h.update(format!("{name}:{}:{:032x}{:032x}\n", d.count, d.sum[0], d.sum[1]).as_bytes());
        rows.insert(name.clone(), d.count);
    }
    let hex: String = h.finalize().iter().map(|b| format!("{b:02x}")).collect();
    Summary {
        rows,
        digest: format!("sha256:{hex}"),
    }
}

fn to_json(v: Value) -> Json {
    match v {
        Value::Null => Json::Null,
        Value::Integer(i) => json!(i),
        Value::Real(r) => json!(r),
        Value::Text(t) => Json::String(t),
        Value::Blob(b) => {
            json!({ "hex": b.iter().map(|x| format!("{x:02x}")).collect::<String>() })
        }
    }
}

/// Read every row of `table` in pages by its key, in one snapshot the caller
/// holds: `each` gets the row as a JSON array.
fn scan(
    conn: &Connection,
    table: &Table,
    each: &mut dyn FnMut(Json) -> Result<(), StoreError>,
) -> Result<(), StoreError> {
    let cols: Vec<&str> = table.columns.iter().map(|(c, _)| c.as_str()).collect();
    let keys = table.key.join(", ");
    let key_at: Vec<usize> = table
        .key
        .iter()
        .filter_map(|k| cols.iter().position(|c| c == k))
        .collect();
    let params: Vec<String> = (1..=table.key.len()).map(|i| format!("?{i}")).collect();
    let first = format!(
        "SELECT {} FROM {} ORDER BY {keys} LIMIT {PAGE}",
        cols.join(", "),
        table.name
    );
    let next = format!(
        "SELECT {} FROM {} WHERE ({keys}) > ({}) ORDER BY {keys} LIMIT {PAGE}",
        cols.join(", "),
        table.name,
        params.join(", ")
    );
    let mut after: Option<Vec<Value>> = None;
    loop {
        let rows: Vec<Vec<Value>> = {
            let mut stmt = match &after {
                None => conn.prepare(&first)?,
                Some(_) => conn.prepare(&next)?,
            };
            let read = |r: &crate::sql::Row<'_>| -> crate::sql::Result<Vec<Value>> {
                (0..cols.len()).map(|i| r.get::<_, Value>(i)).collect()
            };
            match &after {
                None => stmt.query_map([], read)?,
                Some(k) => stmt.query_map(crate::sql::params_from_iter(k.iter()), read)?,
            }
            .collect::<crate::sql::Result<Vec<_>>>()?
        };
        let n = rows.len();
        if let Some(last) = rows.last() {
            after = Some(key_at.iter().map(|&i| last[i].clone()).collect());
        }
        for row in rows {
            each(Json::Array(row.into_iter().map(to_json).collect()))?;
        }
        if n < PAGE {
            return Ok(());
        }
    }
}

/// Begin a read-only snapshot, whichever the backend.
fn snapshot(conn: &Connection) -> Result<(), StoreError> {
    match conn.backend() {
        Backend::Sqlite => conn.execute_batch("BEGIN")?,
        // The export writes each page to its file between two queries: a slow
        // disk or pipe may keep the snapshot idle past the session's few
        // seconds (it holds no lock a write waits for), up to this bound.
        Backend::Postgres => conn.execute_batch(&format!(
            "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY;
             SET LOCAL idle_in_transaction_session_timeout = {}",
            SNAPSHOT_IDLE.as_millis()
        ))?,
    }
    Ok(())
}

/// Count and digest every table of `store` (one snapshot).
pub async fn summarize(store: &Store) -> Result<Summary, StoreError> {
    let tables = tables()?;
    store
        .read(move |conn| {
            snapshot(conn)?;
            let mut digests = BTreeMap::new();
            let result = (|| {
                for t in &tables {
                    let mut d = TableDigest::default();
                    scan(conn, t, &mut |row| {
                        d.add(&t.name, &row.to_string());
                        Ok(())
                    })?;
                    digests.insert(t.name.clone(), d);
                }
                Ok::<_, StoreError>(())
            })();
            let _ = conn.execute_batch("COMMIT");
            result.map(|()| summary(&digests))
        })
        .await
}

/// Write every row of `store` to `out` (one snapshot); `progress` hears each
/// table's name and rows when it is done.
pub async fn export(
    store: &Store,
    out: Box<dyn Write + Send>,
    mut progress: impl FnMut(&str, u64) + Send + 'static,
) -> Result<Summary, StoreError> {
    let tables = tables()?;
    let source = store.backend().name();
    store
        .read(move |conn| {
            let mut out = std::io::BufWriter::new(out);
            let io = |e: std::io::Error| StoreError::Io(format!("write the export: {e}"));
            snapshot(conn)?;
            let result = (|| {
                let version = schema::version(conn)?;
                writeln!(
                    out,
                    "{}",
                    json!({"format": FORMAT, "schema_version": version, "source": source})
                )
                .map_err(io)?;
                let mut digests = BTreeMap::new();
                for t in &tables {
                    let columns: Vec<&str> = t.columns.iter().map(|(c, _)| c.as_str()).collect();
                    writeln!(out, "{}", json!({"table": t.name, "columns": columns}))
                        .map_err(io)?;
                    let mut d = TableDigest::default();
                    scan(conn, t, &mut |row| {
                        let text = row.to_string();
                        d.add(&t.name, &text);
                        writeln!(out, "{text}").map_err(io)
                    })?;
                    progress(&t.name, d.count);
                    digests.insert(t.name.clone(), d);
                }
                let s = summary(&digests);
                writeln!(
                    out,
                    "{}",
                    json!({"end": true, "rows": s.rows, "digest": s.digest})
                )
                .map_err(io)?;
                out.flush().map_err(io)?;
                Ok(s)
            })();
            let _ = conn.execute_batch("COMMIT");
            result
        })
        .await
}

/// A cell of an imported row, with its column's kind (a null must have one).
struct Cell<'a>(&'a Json, Kind);

impl ToSql for Cell<'_> {
    fn to_param(&self) -> Param<'_> {
        match self.0 {
            Json::Null => Param::Null(self.1),
            Json::Bool(b) => Param::Int(i64::from(*b)),
            Json::Number(n) => match n.as_i64() {
                Some(i) => Param::Int(i),
                None => Param::Real(n.as_f64().unwrap_or(0.0)),
            },
            Json::String(s) => Param::Text(s),
            // Blobs are written as {"hex": …}; the schema has none today.
            other => Param::Null(match other {
                Json::Object(_) => Kind::Blob,
                _ => self.1,
            }),
        }
    }
}

fn bad(line: usize, why: impl std::fmt::Display) -> StoreError {
    StoreError::invalid(format!("the export, line {line}: {why}"))
}

/// Read an export into `store`, which must be empty, then check the store
/// against the export's counts and digest. `progress` hears each table's
/// name and rows once written.
pub async fn import(
    store: &Store,
    input: impl BufRead,
    mut progress: impl FnMut(&str, u64),
) -> Result<Summary, StoreError> {
    let tables = tables()?;
    let before = summarize(store).await?;
    if before.total() > 0 {
        let held: Vec<String> = before
            .rows
            .iter()
            .filter(|(_, n)| **n > 0)
            .map(|(t, n)| format!("{t}: {n}"))
            .collect();
        return Err(StoreError::conflict(format!(
            "the target store is not empty ({}): import only into a new store",
            held.join(", ")
        )));
    }
    let mut lines = input.lines().enumerate();
    let mut next_line = || -> Result<Option<(usize, String)>, StoreError> {
        match lines.next() {
            None => Ok(None),
            Some((i, Ok(l))) if l.len() <= MAX_LINE_BYTES => Ok(Some((i + 1, l))),
            Some((i, Ok(l))) => Err(bad(
                i + 1,
                format!("{} bytes, over the line limit ({MAX_LINE_BYTES})", l.len()),
            )),
            Some((i, Err(e))) => Err(bad(i + 1, e)),
        }
    };
    let (n, head) = next_line()?.ok_or_else(|| bad(1, "empty"))?;
    let head: Json = serde_json::from_str(&head).map_err(|e| bad(n, e))?;
    if head["format"] != FORMAT {
        return Err(bad(
            n,
            format!("not an export of this kind (format {})", head["format"]),
        ));
    }
    let ours = schema::current_version();
    if head["schema_version"].as_u64() != Some(u64::from(ours)) {
        return Err(bad(
            n,
            format!(
                "schema version {} (this release reads {ours}: import with the release that exported it, or export again after upgrading)",
                head["schema_version"]
            ),
        ));
    }
    let mut current: Option<(Table, Vec<usize>)> = None;
    let mut batch: Vec<Vec<Json>> = Vec::new();
    let mut written: BTreeMap<String, u64> = BTreeMap::new();
    let mut trailer: Option<Json> = None;
    while let Some((n, line)) = next_line()? {
        let v: Json = serde_json::from_str(&line).map_err(|e| bad(n, e))?;
        if let Json::Array(row) = v {
            let Some((t, _)) = &current else {
                return Err(bad(n, "a row before any table"));
            };
            if row.len() != t.columns.len() {
                return Err(bad(
                    n,
                    format!("{} values for {} columns", row.len(), t.columns.len()),
                ));
            }
            batch.push(row);
            if batch.len() >= PAGE {
                let t = t.clone();
                *written.entry(t.name.clone()).or_default() += flush(store, &t, &mut batch).await?;
            }
            continue;
        }
        if let Some((t, _)) = &current {
            let t = t.clone();
            *written.entry(t.name.clone()).or_default() += flush(store, &t, &mut batch).await?;
            progress(&t.name, written.get(&t.name).copied().unwrap_or(0));
        }
        if v["end"] == true {
            trailer = Some(v);
            break;
        }
        let name = v["table"]
            .as_str()
            .ok_or_else(|| bad(n, "neither a row, a table nor the end"))?;
        let table = tables
            .iter()
            .find(|t| t.name == name)
            .cloned()
            .ok_or_else(|| bad(n, format!("no table {name:?} in this release's schema")))?;
        let columns: Vec<String> =
            serde_json::from_value(v["columns"].clone()).map_err(|e| bad(n, e))?;
        let ours: Vec<String> = table.columns.iter().map(|(c, _)| c.clone()).collect();
        if columns != ours {
            return Err(bad(
                n,
                format!("{name}'s columns {columns:?} are not this schema's {ours:?}"),
            ));
        }
        current = Some((table, Vec::new()));
    }
    let trailer = trailer.ok_or_else(|| {
        StoreError::invalid(
            "the export ends before its last line (it was cut short): nothing is checked",
        )
    })?;
    restart_sequences(store).await?;
    let after = summarize(store).await?;
    let expected: BTreeMap<String, u64> = serde_json::from_value(trailer["rows"].clone())
        .map_err(|e| StoreError::invalid(format!("the export's counts: {e}")))?;
    if after.rows != expected || trailer["digest"].as_str() != Some(after.digest.as_str()) {
        return Err(StoreError::Internal(format!(
            "the imported store differs from the export: rows {:?} (export {:?}), digest {} (export {})",
            after.rows, expected, after.digest, trailer["digest"]
        )));
    }
    Ok(after)
}

/// Write a batch of rows of `t` in one transaction: how many.
async fn flush(store: &Store, t: &Table, batch: &mut Vec<Vec<Json>>) -> Result<u64, StoreError> {
    if batch.is_empty() {
        return Ok(0);
    }
    let rows = std::mem::take(batch);
    let t = t.clone();
    store
        .write(move |conn| {
            let cols: Vec<&str> = t.columns.iter().map(|(c, _)| c.as_str()).collect();
            let marks: Vec<String> = (1..=cols.len()).map(|i| format!("?{i}")).collect();
            let sql = format!(
                "INSERT INTO {} ({}) VALUES ({})",
                t.name,
                cols.join(", "),
                marks.join(", ")
            );
            let mut stmt = conn.prepare(&sql)?;
            for row in &rows {
                let cells: Vec<Cell<'_>> = row
                    .iter()
                    .zip(&t.columns)
                    .map(|(v, (_, k))| Cell(v, *k))
                    .collect();
                let refs: Vec<&dyn ToSql> = cells.iter().map(|c| c as &dyn ToSql).collect();
                stmt.execute(refs.as_slice())?;
            }
            Ok(rows.len() as u64)
        })
        .await
}

/// After rows with their own numbers were written, PostgreSQL's identity
/// sequences start after the highest (SQLite's follow by themselves).
async fn restart_sequences(store: &Store) -> Result<(), StoreError> {
    if store.backend() != Backend::Postgres {
        return Ok(());
    }
    store
        .write(|conn| {
            for (table, column) in [
                ("events", "seq"),
                ("config_generations", "generation"),
                ("artifacts", "rowid"),
            ] {
                conn.execute_batch(&format!(
                    "SELECT setval(pg_get_serial_sequence('{table}', '{column}'), \
                     COALESCE((SELECT MAX({column}) FROM {table}), 0) + 1, false)"
                ))?;
            }
            Ok(())
        })
        .await
}
