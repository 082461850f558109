//! The one door to the database: a small API in rusqlite's shape over either
//! backend, SQLite (the default) or PostgreSQL.
//!
//! The methods above it (`store.*`) write their SQL once, in the subset both
//! dialects share: `?N` parameters (rewritten to `$N` for PostgreSQL), `INSERT
//! … ON CONFLICT`, `RETURNING`, `CAST(… AS BIGINT)` around sums. Where the
//! dialects part (JSON arrays, the schema's types, integrity checks) the caller
//! asks [`Connection::backend`]. Values cross as five kinds (integer, real,
//! text, blob, null), which both backends store the same way; PostgreSQL is told
//! each parameter's type from its kind, so no statement depends on inference.

mod pg;
mod value;

pub use pg::{PgSession, PgTarget, SessionBounds, SESSION_BOUNDS};
pub use value::{FromSql, Kind, Param, ToSql, Value};

use std::cell::RefCell;

/// `sql` with each `LIMIT ?N` written `LIMIT (?N + 0)`, for SQLite: it reads a
/// bare parameter in LIMIT as a constant of the plan, so every new binding of it
/// marks the statement expired and the next step compiles it again (a cached page
/// query was parsed and planned on each run). As an expression it is read at run
/// time, and the statement is compiled once.
fn sqlite_limits(sql: &str) -> std::borrow::Cow<'_, str> {
    const BARE: &str = "LIMIT ?";
    if !sql.contains(BARE) {
        return std::borrow::Cow::Borrowed(sql);
    }
    let mut out = String::with_capacity(sql.len() + 16);
    let mut rest = sql;
    while let Some(at) = rest.find(BARE) {
        out.push_str(&rest[..at]);
        let after = &rest[at + BARE.len()..];
        let digits = after.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 {
            out.push_str(BARE);
        } else {
            out.push_str("LIMIT (?");
            out.push_str(&after[..digits]);
            out.push_str(" + 0)");
        }
        rest = &after[digits..];
    }
    out.push_str(rest);
    std::borrow::Cow::Owned(out)
}

/// Which database a connection speaks to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    /// SQLite, one file under the state directory.
    Sqlite,
    /// PostgreSQL, shared by every host of a suite.
    Postgres,
}

impl Backend {
    /// The name operators use (`settings.storage.backend`).
    pub fn name(self) -> &'static str {
        match self {
            Backend::Sqlite => "sqlite",
            Backend::Postgres => "postgres",
        }
    }
}

/// A database failure.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// SQLite failed.
    #[error("sqlite: {0}")]
    Sqlite(#[from] rusqlite::Error),
    /// PostgreSQL failed (or its connection is gone).
    #[error("postgres: {0}")]
    Postgres(String),
    /// The connection to PostgreSQL is lost; the outcome of a write in flight is
    /// unknown, so it is answered as a failure.
    #[error("the database connection is lost: {0}")]
    ConnectionLost(String),
    /// The server canceled a statement at one of the session's bounds
    /// (`lock_timeout`, `statement_timeout`: [`SessionBounds`]): the
    /// transaction is rolled back, nothing of it was written; try again.
    #[error("{0}")]
    OverBound(String),
    /// The database's disk is full (SQLite's `SQLITE_FULL`, PostgreSQL's
    /// `disk_full`, 53100): nothing of the transaction was written; try again
    /// once space is freed.
    #[error("{0}")]
    Full(String),
    /// `query_row` found no row.
    #[error("query returned no rows")]
    QueryReturnedNoRows,
    /// A column's value is not of the type asked for.
    #[error("column {index}: {why}")]
    Conversion {
        /// The column.
        index: usize,
        /// What did not fit.
        why: String,
    },
}

impl From<postgres::Error> for Error {
    fn from(e: postgres::Error) -> Error {
        if e.is_closed() {
            return Error::ConnectionLost(e.to_string());
        }
        // A database error's own message (and detail) says more than the
        // driver's summary.
        match e.as_db_error() {
            // The server is going away or cannot take connections now (class
            // 08, or an administrator's, crash or start-up shutdown), or it
            // ended this session (over idle_in_transaction_session_timeout:
            // 25P03; idle_session_timeout: 57P05; any other FATAL): as lost.
            Some(db)
                if db.code().code().starts_with("08")
                    || matches!(
                        db.code().code(),
                        "57P01" | "57P02" | "57P03" | "57P05" | "25P03"
                    )
                    || matches!(db.severity(), "FATAL" | "PANIC") =>
            {
                Error::ConnectionLost(format!("{} ({})", db.message(), db.code().code()))
            }
            // A statement canceled at a session bound (storaged sends no
            // cancel requests of its own): say which bound.
            Some(db) if matches!(db.code().code(), "55P03" | "57014") => {
                let bound = if db.code().code() == "55P03" {
                    "a lock waited for longer than the session's lock_timeout"
                } else {
                    "a statement ran longer than the session's statement_timeout"
                };
                Error::OverBound(format!(
                    "{} ({}): {bound} (storaged's bounds: docs/operator-guide.md)",
                    db.message(),
                    db.code().code(),
                ))
            }
            // The server's disk is full: it refuses writes until space is freed.
            Some(db) if db.code().code() == "53100" => {
                Error::Full(format!("{} ({})", db.message(), db.code().code()))
            }
            Some(db) => Error::Postgres(match db.detail() {
                Some(d) => format!("{} ({}; {d})", db.message(), db.code().code()),
                None => format!("{} ({})", db.message(), db.code().code()),
            }),
            None => {
                let text = e.to_string();
                // An I/O error on the socket is a lost connection too.
                if text.contains("connection") || text.contains("broken pipe") {
                    Error::ConnectionLost(text)
                } else {
                    Error::Postgres(text)
                }
            }
        }
    }
}

impl Error {
    /// What a disk-full error says, if this is one: [`Error::Full`], or SQLite's
    /// `SQLITE_FULL` (a write that could not grow the database, its WAL or its
    /// shared-memory file).
    pub fn full(&self) -> Option<String> {
        match self {
            Error::Full(m) => Some(m.clone()),
            Error::Sqlite(e) => sqlite_full(e),
            _ => None,
        }
    }
}

/// What SQLite's disk-full error says, if `e` is one.
pub fn sqlite_full(e: &rusqlite::Error) -> Option<String> {
    match e {
        rusqlite::Error::SqliteFailure(f, _)
            if f.code == rusqlite::ErrorCode::DiskFull
                || f.extended_code == rusqlite::ffi::SQLITE_IOERR_SHMSIZE =>
        {
            Some(format!("sqlite: {e}"))
        }
        _ => None,
    }
}

/// A database result.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// `query_row(…).optional()`: no row is `None`.
pub trait OptionalExtension<T> {
    /// No row is `Ok(None)`; other errors stay errors.
    fn optional(self) -> Result<Option<T>>;
}

impl<T> OptionalExtension<T> for Result<T> {
    fn optional(self) -> Result<Option<T>> {
        match self {
            Ok(v) => Ok(Some(v)),
            Err(Error::QueryReturnedNoRows) => Ok(None),
            Err(e) => Err(e),
        }
    }
}

/// One connection, to either backend.
pub struct Connection {
    inner: Inner,
}

enum Inner {
    Sqlite(rusqlite::Connection),
    Pg(Box<RefCell<PgSession>>),
}

impl Connection {
    /// A connection to SQLite.
    pub fn sqlite(conn: rusqlite::Connection) -> Connection {
        Connection {
            inner: Inner::Sqlite(conn),
        }
    }

    /// A connection to PostgreSQL.
    pub fn postgres(session: PgSession) -> Connection {
        Connection {
            inner: Inner::Pg(Box::new(RefCell::new(session))),
        }
    }

    /// Which backend this is.
    pub fn backend(&self) -> Backend {
        match &self.inner {
            Inner::Sqlite(_) => Backend::Sqlite,
            Inner::Pg(_) => Backend::Postgres,
        }
    }

    /// The SQLite connection, for what only SQLite has (pragmas, checkpoints).
    pub fn as_sqlite(&self) -> Option<&rusqlite::Connection> {
        match &self.inner {
            Inner::Sqlite(c) => Some(c),
            Inner::Pg(_) => None,
        }
    }

    /// Whether the connection is known to be gone (PostgreSQL only: a SQLite
    /// connection is a file handle).
    pub fn is_lost(&self) -> bool {
        match &self.inner {
            Inner::Sqlite(_) => false,
            Inner::Pg(s) => s.borrow().is_closed(),
        }
    }

    /// A statement, compiled once per connection.
    pub fn prepare_cached(&self, sql: &str) -> Result<Statement<'_>> {
        Ok(Statement {
            inner: match &self.inner {
                Inner::Sqlite(c) => StmtInner::SqliteCached(c.prepare_cached(&sqlite_limits(sql))?),
                Inner::Pg(s) => StmtInner::Pg {
                    session: s,
                    sql: sql.to_string(),
                },
            },
        })
    }

    /// A statement compiled for this use (SQL built at run time).
    pub fn prepare(&self, sql: &str) -> Result<Statement<'_>> {
        Ok(Statement {
            inner: match &self.inner {
                Inner::Sqlite(c) => StmtInner::Sqlite(c.prepare(&sqlite_limits(sql))?),
                Inner::Pg(s) => StmtInner::Pg {
                    session: s,
                    sql: sql.to_string(),
                },
            },
        })
    }

    /// Run one statement: the rows it changed.
    pub fn execute<P: Params>(&self, sql: &str, params: P) -> Result<usize> {
        self.prepare_cached(sql)?.execute(params)
    }

    /// The first row of a query, through `f`; no row is
    /// [`Error::QueryReturnedNoRows`].
    pub fn query_row<T, P, F>(&self, sql: &str, params: P, f: F) -> Result<T>
    where
        P: Params,
        F: FnOnce(&Row<'_>) -> Result<T>,
    {
        self.prepare_cached(sql)?.query_row(params, f)
    }

    /// The PostgreSQL session, for what only PostgreSQL has; `None` on SQLite.
    pub fn with_pg<R>(&self, f: impl FnOnce(&mut PgSession) -> R) -> Option<R> {
        match &self.inner {
            Inner::Sqlite(_) => None,
            Inner::Pg(s) => Some(f(&mut s.borrow_mut())),
        }
    }

    /// Round trips to the server so far (PostgreSQL; 0 on SQLite, which has none).
    pub fn round_trips(&self) -> u64 {
        self.with_pg(|s| s.round_trips()).unwrap_or(0)
    }

    /// Count this connection's round trips in `counter` from now on
    /// ([`PgSession::count_round_trips_in`]; nothing on SQLite).
    pub fn count_round_trips_in(&self, counter: std::sync::Arc<std::sync::atomic::AtomicU64>) {
        self.with_pg(|s| s.count_round_trips_in(counter));
    }

    /// The value a statement run ahead of this write's group kept for it under
    /// `key` ([`PgSession::put_ahead`]), once; always `None` on SQLite.
    pub fn take_ahead(&self, key: &str) -> Option<i64> {
        self.with_pg(|s| s.take_ahead(key)).flatten()
    }

    /// Forget the values kept ahead: how many no write took.
    pub fn clear_ahead(&self) -> usize {
        self.with_pg(PgSession::clear_ahead).unwrap_or(0)
    }

    /// Run statements without parameters, one after another.
    pub fn execute_batch(&self, sql: &str) -> Result<()> {
        match &self.inner {
            Inner::Sqlite(c) => Ok(c.execute_batch(sql)?),
            Inner::Pg(s) => s.borrow_mut().batch(sql),
        }
    }
}

/// A statement ready to run.
pub struct Statement<'c> {
    inner: StmtInner<'c>,
}

enum StmtInner<'c> {
    SqliteCached(rusqlite::CachedStatement<'c>),
    Sqlite(rusqlite::Statement<'c>),
    Pg {
        session: &'c RefCell<PgSession>,
        sql: String,
    },
}

impl<'c> StmtInner<'c> {
    fn sqlite(&mut self) -> Option<&mut rusqlite::Statement<'c>> {
        match self {
            StmtInner::SqliteCached(s) => Some(s),
            StmtInner::Sqlite(s) => Some(s),
            StmtInner::Pg { .. } => None,
        }
    }
}

fn sqlite_params<'p>(params: &'p [&'p dyn ToSql]) -> impl rusqlite::Params + 'p {
    rusqlite::params_from_iter(params.iter().map(|p| p.to_param()))
}

impl Statement<'_> {
    /// Run it: the rows it changed.
    pub fn execute<P: Params>(&mut self, params: P) -> Result<usize> {
        params.with(|ps| match &mut self.inner {
            StmtInner::Pg { session, sql } => session.borrow_mut().execute(sql, ps),
            other => match other.sqlite() {
                Some(s) => Ok(s.execute(sqlite_params(ps))?),
                None => Err(Error::Postgres("unreachable".into())),
            },
        })
    }

    /// All its rows, each through `f`.
    pub fn query_map<T, P, F>(
        &mut self,
        params: P,
        mut f: F,
    ) -> Result<std::vec::IntoIter<Result<T>>>
    where
        P: Params,
        F: FnMut(&Row<'_>) -> Result<T>,
    {
        let mut out = Vec::new();
        self.each(params, |row| {
            out.push(f(row));
            Ok(true)
        })?;
        Ok(out.into_iter())
    }

    /// The first row through `f`; none is [`Error::QueryReturnedNoRows`].
    pub fn query_row<T, P, F>(&mut self, params: P, f: F) -> Result<T>
    where
        P: Params,
        F: FnOnce(&Row<'_>) -> Result<T>,
    {
        let mut f = Some(f);
        let mut out = None;
        self.each(params, |row| {
            if let Some(f) = f.take() {
                out = Some(f(row));
            }
            Ok(false)
        })?;
        out.unwrap_or(Err(Error::QueryReturnedNoRows))
    }

    /// Whether it returns any row.
    pub fn exists<P: Params>(&mut self, params: P) -> Result<bool> {
        let mut any = false;
        self.each(params, |_| {
            any = true;
            Ok(false)
        })?;
        Ok(any)
    }

    /// Its rows, to step through with [`Rows::next`].
    pub fn query<P: Params>(&mut self, params: P) -> Result<Rows> {
        let mut rows = Vec::new();
        self.each(params, |row| {
            rows.push(row.to_values()?);
            Ok(true)
        })?;
        Ok(Rows {
            rows: rows.into_iter(),
            current: None,
        })
    }

    /// Call `f` on each row while it answers `true`.
    fn each<P, F>(&mut self, params: P, mut f: F) -> Result<()>
    where
        P: Params,
        F: FnMut(&Row<'_>) -> Result<bool>,
    {
        params.with(|ps| match &mut self.inner {
            StmtInner::Pg { session, sql } => {
                let rows = session.borrow_mut().query(sql, ps)?;
                for r in &rows {
                    if !f(&Row {
                        inner: RowInner::Pg(r),
                    })? {
                        break;
                    }
                }
                Ok(())
            }
            other => {
                let Some(s) = other.sqlite() else {
                    return Ok(());
                };
                let mut rows = s.query(sqlite_params(ps))?;
                while let Some(r) = rows.next()? {
                    if !f(&Row {
                        inner: RowInner::Sqlite(r),
                    })? {
                        break;
                    }
                }
                Ok(())
            }
        })
    }
}

/// Rows read whole, stepped through one at a time.
pub struct Rows {
    rows: std::vec::IntoIter<Vec<Value>>,
    current: Option<Vec<Value>>,
}

impl Rows {
    /// The next row, if any.
    #[allow(clippy::should_implement_trait)]
    pub fn next(&mut self) -> Result<Option<Row<'_>>> {
        self.current = self.rows.next();
        Ok(self.current.as_deref().map(|v| Row {
            inner: RowInner::Owned(v),
        }))
    }
}

/// One row of a result.
pub struct Row<'a> {
    inner: RowInner<'a>,
}

enum RowInner<'a> {
    Sqlite(&'a rusqlite::Row<'a>),
    Pg(&'a postgres::Row),
    Owned(&'a [Value]),
}

impl Row<'_> {
    /// Column `index` as a `T`.
    pub fn get<I: RowIndex, T: FromSql>(&self, index: I) -> Result<T> {
        let index = index.index();
        let converted = match &self.inner {
            RowInner::Sqlite(r) => T::from_sqlite(r.get_ref(index)?),
            RowInner::Pg(r) => T::from_pg(r, index),
            RowInner::Owned(v) => match v.get(index) {
                Some(v) => T::from_value(v),
                None => Err(format!("no column {index}")),
            },
        };
        converted.map_err(|why| Error::Conversion { index, why })
    }

    /// How many columns it has.
    pub fn column_count(&self) -> usize {
        match &self.inner {
            RowInner::Sqlite(r) => r.as_ref().column_count(),
            RowInner::Pg(r) => r.len(),
            RowInner::Owned(v) => v.len(),
        }
    }

    fn to_values(&self) -> Result<Vec<Value>> {
        (0..self.column_count())
            .map(|i| self.get::<usize, Value>(i))
            .collect()
    }
}

/// A column index.
pub trait RowIndex {
    /// As a position.
    fn index(self) -> usize;
}

impl RowIndex for usize {
    fn index(self) -> usize {
        self
    }
}

/// A statement's parameters: `[]`, `params![…]`, an array of one type, or
/// [`params_from_iter`].
pub trait Params {
    /// Call `f` with them as a slice.
    fn with<R>(self, f: impl FnOnce(&[&dyn ToSql]) -> R) -> R;
}

impl Params for &[&dyn ToSql] {
    fn with<R>(self, f: impl FnOnce(&[&dyn ToSql]) -> R) -> R {
        f(self)
    }
}

impl Params for &Vec<&dyn ToSql> {
    fn with<R>(self, f: impl FnOnce(&[&dyn ToSql]) -> R) -> R {
        f(self)
    }
}

impl Params for [&dyn ToSql; 0] {
    fn with<R>(self, f: impl FnOnce(&[&dyn ToSql]) -> R) -> R {
        f(&[])
    }
}

macro_rules! array_params {
    ($($n:literal)*) => {$(
        impl<T: ToSql> Params for [T; $n] {
            fn with<R>(self, f: impl FnOnce(&[&dyn ToSql]) -> R) -> R {
                let refs: Vec<&dyn ToSql> = self.iter().map(|p| p as &dyn ToSql).collect();
                f(&refs)
            }
        }
        impl<T: ToSql> Params for &[T; $n] {
            fn with<R>(self, f: impl FnOnce(&[&dyn ToSql]) -> R) -> R {
                let refs: Vec<&dyn ToSql> = self.iter().map(|p| p as &dyn ToSql).collect();
                f(&refs)
            }
        }
    )*};
}
array_params!(1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16);

/// Parameters from an iterator of values.
pub struct ParamsFromIter<I>(I);

/// Parameters from an iterator of values (of one type).
pub fn params_from_iter<I>(iter: I) -> ParamsFromIter<I>
where
    I: IntoIterator,
    I::Item: ToSql,
{
    ParamsFromIter(iter)
}

impl<I> Params for ParamsFromIter<I>
where
    I: IntoIterator,
    I::Item: ToSql,
{
    fn with<R>(self, f: impl FnOnce(&[&dyn ToSql]) -> R) -> R {
        let owned: Vec<I::Item> = self.0.into_iter().collect();
        let refs: Vec<&dyn ToSql> = owned.iter().map(|p| p as &dyn ToSql).collect();
        f(&refs)
    }
}

/// `params![a, b, …]`: parameters of any types.
#[macro_export]
macro_rules! params {
    () => {
        &[] as &[&dyn $crate::sql::ToSql]
    };
    ($($p:expr),+ $(,)?) => {
        &[$(&$p as &dyn $crate::sql::ToSql),+] as &[&dyn $crate::sql::ToSql]
    };
}
pub use params;

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn limit_parameters_are_read_at_run_time() {
        assert_eq!(
            sqlite_limits("SELECT a FROM t WHERE a > ?1 ORDER BY a LIMIT ?12"),
            "SELECT a FROM t WHERE a > ?1 ORDER BY a LIMIT (?12 + 0)"
        );
        assert_eq!(
            sqlite_limits("SELECT 1 LIMIT ?2; SELECT 2 LIMIT ?3 OFFSET 1"),
            "SELECT 1 LIMIT (?2 + 0); SELECT 2 LIMIT (?3 + 0) OFFSET 1"
        );
        assert!(matches!(
            sqlite_limits("SELECT a FROM t LIMIT 5"),
            std::borrow::Cow::Borrowed(_)
        ));
    }

    /// A cached page query is compiled once, not once per run: SQLite compiles a
    /// statement again after a new binding of a bare `LIMIT ?`.
    #[test]
    fn a_cached_page_query_is_not_compiled_again_on_each_run() {
        let db = Connection::sqlite(rusqlite::Connection::open_in_memory().unwrap());
        db.execute_batch(
            "CREATE TABLE t (a INTEGER PRIMARY KEY); INSERT INTO t VALUES (1), (2), (3);",
        )
        .unwrap();
        let sql = "SELECT a FROM t WHERE a > ?1 ORDER BY a LIMIT ?2";
        for (after, limit, expect) in [(0, 2, 2), (1, 5, 2), (2, 1, 1)] {
            let rows = db
                .prepare_cached(sql)
                .unwrap()
                .query_map(params![after, limit], |r| r.get::<_, i64>(0))
                .unwrap()
                .count();
            assert_eq!(rows, expect);
        }
        let Inner::Sqlite(c) = &db.inner else {
            unreachable!()
        };
        let stmt = c.prepare_cached(&sqlite_limits(sql)).unwrap();
        assert_eq!(
            stmt.get_status(rusqlite::StatementStatus::RePrepare),
            0,
            "the page query was compiled again after a new binding"
        );
    }
}
