//! PostgreSQL: one session (a client and its compiled statements), the SQL
//! rewritten from `?N` to `$N`, and the connection settings, among them the
//! server-side bounds storaged sets on every session it opens ([`SessionBounds`]).

use super::{Error, Kind, Param, Result, ToSql};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Most statements kept compiled per session; past it the cache starts over.
const MAX_CACHED_STATEMENTS: usize = 512;

/// The bounds storaged sets, server side, on each PostgreSQL session it opens,
/// so that a host that stops making progress (a frozen VM, a stopped container,
/// a partition that keeps the TCP session) cannot hold the suite's write lock
/// ([`crate::db::WRITE_LOCK`]) for long, and a write never waits or runs
/// unbounded: docs/decisions.md, "A hung host cannot hold the write lock
/// (issue 47)". Zero leaves a bound off (PostgreSQL's meaning). A bound the
/// connection URL sets itself (`options=-c lock_timeout=20s`) is left to it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SessionBounds {
    /// `idle_in_transaction_session_timeout`: the server ends a session that
    /// sits inside a transaction doing nothing this long (its host frozen
    /// mid-write), which releases its locks. storaged's write transactions run
    /// nothing but SQL between their statements (files are made durable before
    /// or after), so a live host never idles for near this long.
    pub idle_in_transaction: Duration,
    /// `lock_timeout`: the longest wait for a lock (the write lock, while
    /// another host holds it) before the write is answered `unavailable`.
    /// Longer than `idle_in_transaction`, so that a writer outlasts a hung
    /// holder whom the server ends.
    pub lock: Duration,
    /// `statement_timeout`: the longest one statement runs (reads included);
    /// storaged's statements work in bounded pages and batches.
    pub statement: Duration,
}

/// storaged's bounds on each session ([`SessionBounds`]).
pub const SESSION_BOUNDS: SessionBounds = SessionBounds {
    idle_in_transaction: Duration::from_secs(5),
    lock: Duration::from_secs(10),
    statement: Duration::from_secs(30),
};

impl SessionBounds {
    /// The settings as (name, milliseconds).
    fn settings(&self) -> [(&'static str, u128); 3] {
        [
            (
                "idle_in_transaction_session_timeout",
                self.idle_in_transaction.as_millis(),
            ),
            ("lock_timeout", self.lock.as_millis()),
            ("statement_timeout", self.statement.as_millis()),
        ]
    }
}

/// Where PostgreSQL is, parsed from an operator's URL (`postgres://…` or
/// `host=… port=…`); the text itself is never logged (it may carry a password).
#[derive(Clone)]
pub struct PgTarget {
    config: postgres::Config,
    bounds: SessionBounds,
}

impl std::fmt::Debug for PgTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "PgTarget({})", self.describe())
    }
}

impl PgTarget {
    /// Parse a connection URL or key-value string.
    pub fn parse(url: &str) -> std::result::Result<PgTarget, String> {
        let mut config: postgres::Config = url
            .parse()
            .map_err(|e| format!("the PostgreSQL URL does not parse: {e}"))?;
        if config.get_connect_timeout().is_none() {
            config.connect_timeout(Duration::from_secs(5));
        }
        config.keepalives(true);
        config.keepalives_idle(Duration::from_secs(10));
        if config.get_application_name().is_none() {
            config.application_name("open-conduit-storaged");
        }
        Ok(PgTarget {
            config,
            bounds: SESSION_BOUNDS,
        })
    }

    /// The same database with other session bounds (tests, benchmarks).
    pub fn with_bounds(mut self, bounds: SessionBounds) -> PgTarget {
        self.bounds = bounds;
        self
    }

    /// The session bounds storaged sets.
    pub fn bounds(&self) -> SessionBounds {
        self.bounds
    }

    /// The `SET` statements that put `bounds` on a session, leaving out every
    /// setting the URL's `options` names (the operator's choice stands).
    fn bounds_sql(&self, bounds: SessionBounds) -> String {
        let named = self
            .config
            .get_options()
            .map(option_names)
            .unwrap_or_default();
        bounds
            .settings()
            .iter()
            .filter(|(name, _)| !named.iter().any(|n| n == name))
            .map(|(name, ms)| format!("SET {name} = {ms};"))
            .collect()
    }

    /// Host, port, database and user, without the password: for logs and
    /// errors.
    pub fn describe(&self) -> String {
        let hosts: Vec<String> = self
            .config
            .get_hosts()
            .iter()
            .map(|h| match h {
                postgres::config::Host::Tcp(name) => name.clone(),
                postgres::config::Host::Unix(path) => path.display().to_string(),
            })
            .collect();
        let port = self.config.get_ports().first().copied().unwrap_or(5432);
        format!(
            "{}:{port}/{} as {}",
            hosts.join(","),
            self.config.get_dbname().unwrap_or("(default)"),
            self.config.get_user().unwrap_or("(default)")
        )
    }

    /// Open a session, with storaged's bounds on it ([`SessionBounds`]).
    pub fn connect(&self) -> Result<PgSession> {
        self.connect_bounded(self.bounds)
    }

    /// Open a session to migrate the schema: a migration of a large database
    /// may run long, and a host waits for another's to finish (the migration
    /// lock), so only the idle-in-transaction bound is kept.
    pub fn connect_to_migrate(&self) -> Result<PgSession> {
        self.connect_bounded(SessionBounds {
            idle_in_transaction: self.bounds.idle_in_transaction,
            lock: Duration::ZERO,
            statement: Duration::ZERO,
        })
    }

    fn connect_bounded(&self, bounds: SessionBounds) -> Result<PgSession> {
        let lost = |e: postgres::Error| {
            Error::ConnectionLost(format!("connect to {}: {e}", self.describe()))
        };
        let mut client = self.config.connect(postgres::NoTls).map_err(lost)?;
        let set = self.bounds_sql(bounds);
        if !set.is_empty() {
            client
                .batch_execute(&set)
                .map_err(|e| match Error::from(e) {
                    Error::Postgres(m) => Error::Postgres(format!(
                        "set the session bounds on {}: {m}",
                        self.describe()
                    )),
                    other => other,
                })?;
        }
        Ok(PgSession {
            client,
            statements: HashMap::new(),
            arrays: HashMap::new(),
            round_trips: Arc::new(AtomicU64::new(0)),
            ahead: HashMap::new(),
        })
    }
}

/// The settings a connection's `options` sets (`-c name=value`,
/// `-cname=value`, `--name=value`), by name.
fn option_names(options: &str) -> Vec<String> {
    let mut names = Vec::new();
    let mut words = options.split_whitespace();
    while let Some(word) = words.next() {
        let setting = if word == "-c" {
            words.next()
        } else if let Some(rest) = word.strip_prefix("-c") {
            Some(rest)
        } else {
            word.strip_prefix("--")
        };
        if let Some((name, _)) = setting.and_then(|s| s.split_once('=')) {
            names.push(name.trim().replace('-', "_").to_ascii_lowercase());
        }
    }
    names
}

/// One PostgreSQL connection and the statements compiled on it.
pub struct PgSession {
    client: postgres::Client,
    statements: HashMap<(String, Vec<Kind>), postgres::Statement>,
    /// Statements whose parameters are arrays ([`PgSession::query_arrays`]).
    arrays: HashMap<String, postgres::Statement>,
    /// Requests sent that waited for the server's answer (a statement compiled,
    /// run, or a batch of statements without parameters): each one round trip.
    /// Shared with whoever counts them ([`PgSession::count_round_trips_in`]).
    round_trips: Arc<AtomicU64>,
    /// Values a statement run ahead of a group's writes produced for them, by a
    /// key the write that owns each knows ([`PgSession::take_ahead`]).
    ahead: HashMap<String, i64>,
}

impl PgSession {
    /// Whether the server closed the connection.
    pub fn is_closed(&self) -> bool {
        self.client.is_closed()
    }

    /// Call `f` with each notification's payload as it arrives, until the
    /// connection is lost (`LISTEN` first). `tick` bounds each wait.
    pub fn each_notification(&mut self, tick: Duration, f: &mut dyn FnMut(&str)) {
        use postgres::fallible_iterator::FallibleIterator;
        while !self.client.is_closed() {
            let mut notifications = self.client.notifications();
            let mut iter = notifications.timeout_iter(tick);
            loop {
                match iter.next() {
                    Ok(Some(note)) => f(note.payload()),
                    Ok(None) => break,
                    Err(_) => return,
                }
            }
        }
    }

    /// Run statements that take no parameters.
    pub fn batch(&mut self, sql: &str) -> Result<()> {
        self.round_trips.fetch_add(1, Ordering::Relaxed);
        Ok(self.client.batch_execute(sql)?)
    }

    /// Round trips to the server on this session so far (each request the
    /// session waited for the answer of): a figure that does not depend on the
    /// machine, counted per commit group by the writer.
    pub fn round_trips(&self) -> u64 {
        self.round_trips.load(Ordering::Relaxed)
    }

    /// Count this session's round trips from now on in `counter` (the
    /// writer's, across the sessions it makes again after a loss), each as it
    /// is answered.
    pub fn count_round_trips_in(&mut self, counter: Arc<AtomicU64>) {
        self.round_trips = counter;
    }

    /// Run a query whose parameters are arrays (`$1::text[]`, `$2::int8[]`),
    /// its parameter types as the SQL casts them; compiled once per session.
    pub fn query_arrays(
        &mut self,
        sql: &str,
        params: &[&(dyn postgres::types::ToSql + Sync)],
    ) -> Result<Vec<postgres::Row>> {
        let stmt = match self.arrays.get(sql) {
            Some(s) => s.clone(),
            None => {
                self.round_trips.fetch_add(1, Ordering::Relaxed);
                let s = self.client.prepare(sql)?;
                if self.arrays.len() >= MAX_CACHED_STATEMENTS {
                    self.arrays.clear();
                }
                self.arrays.insert(sql.to_string(), s.clone());
                s
            }
        };
        self.round_trips.fetch_add(1, Ordering::Relaxed);
        Ok(self.client.query(&stmt, params)?)
    }

    /// Keep `value` for the write that will ask for it by `key`.
    pub fn put_ahead(&mut self, key: String, value: i64) {
        self.ahead.insert(key, value);
    }

    /// The value kept for `key` by [`PgSession::put_ahead`], once.
    pub fn take_ahead(&mut self, key: &str) -> Option<i64> {
        self.ahead.remove(key)
    }

    /// Forget every value kept ahead: how many nobody took.
    pub fn clear_ahead(&mut self) -> usize {
        let left = self.ahead.len();
        self.ahead.clear();
        left
    }

    fn statement(&mut self, sql: &str, params: &[Param<'_>]) -> Result<postgres::Statement> {
        let kinds: Vec<Kind> = params.iter().map(Param::kind).collect();
        let key = (sql.to_string(), kinds);
        if let Some(s) = self.statements.get(&key) {
            return Ok(s.clone());
        }
        let types: Vec<postgres::types::Type> = key.1.iter().map(|k| k.pg_type()).collect();
        let translated = translate(sql);
        self.round_trips.fetch_add(1, Ordering::Relaxed);
        let stmt = self.client.prepare_typed(&translated, &types)?;
        if self.statements.len() >= MAX_CACHED_STATEMENTS {
            self.statements.clear();
        }
        self.statements.insert(key, stmt.clone());
        Ok(stmt)
    }

    /// Run one statement: the rows it changed.
    pub fn execute(&mut self, sql: &str, params: &[&dyn ToSql]) -> Result<usize> {
        let values: Vec<Param<'_>> = params.iter().map(|p| p.to_param()).collect();
        let stmt = self.statement(sql, &values)?;
        let refs: Vec<&(dyn postgres::types::ToSql + Sync)> = values
            .iter()
            .map(|v| v as &(dyn postgres::types::ToSql + Sync))
            .collect();
        self.round_trips.fetch_add(1, Ordering::Relaxed);
        let n = self.client.execute(&stmt, &refs)?;
        Ok(usize::try_from(n).unwrap_or(usize::MAX))
    }

    /// Run a query: all its rows.
    pub fn query(&mut self, sql: &str, params: &[&dyn ToSql]) -> Result<Vec<postgres::Row>> {
        let values: Vec<Param<'_>> = params.iter().map(|p| p.to_param()).collect();
        let stmt = self.statement(sql, &values)?;
        let refs: Vec<&(dyn postgres::types::ToSql + Sync)> = values
            .iter()
            .map(|v| v as &(dyn postgres::types::ToSql + Sync))
            .collect();
        self.round_trips.fetch_add(1, Ordering::Relaxed);
        Ok(self.client.query(&stmt, &refs)?)
    }
}

/// Rewrite SQLite's parameters for PostgreSQL: `?N` becomes `$N`, and a bare
/// `?` the next number after the highest so far (SQLite's rule). Quoted text,
/// quoted names and comments are left alone.
pub fn translate(sql: &str) -> String {
    let bytes = sql.as_bytes();
    let mut out = String::with_capacity(sql.len() + 8);
    let mut highest = 0u32;
    let mut i = 0;
    let mut start = 0;
    while i < bytes.len() {
        match bytes[i] {
            q @ (b'\'' | b'"') => {
                i += 1;
                while i < bytes.len() && bytes[i] != q {
                    i += 1;
                }
                i += 1;
            }
            b'-' if bytes.get(i + 1) == Some(&b'-') => {
                while i < bytes.len() && bytes[i] != b'\n' {
                    i += 1;
                }
            }
            b'?' => {
                out.push_str(&sql[start..i]);
                let digits_start = i + 1;
                let mut j = digits_start;
                while j < bytes.len() && bytes[j].is_ascii_digit() {
                    j += 1;
                }
                let n = if j > digits_start {
                    sql[digits_start..j].parse::<u32>().unwrap_or(0)
                } else {
                    highest + 1
                };
                highest = highest.max(n);
                out.push('$');
                out.push_str(&n.to_string());
                i = j;
                start = j;
            }
            _ => i += 1,
        }
    }
    out.push_str(&sql[start.min(sql.len())..]);
    out
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::{option_names, translate, PgTarget, SESSION_BOUNDS};

    #[test]
    fn every_session_is_bounded_unless_the_url_sets_a_bound_itself() {
        let t = PgTarget::parse("postgres://u@127.0.0.1:5999/db").unwrap();
        assert_eq!(t.bounds(), SESSION_BOUNDS);
        assert_eq!(
            t.bounds_sql(t.bounds()),
            "SET idle_in_transaction_session_timeout = 5000;SET lock_timeout = 10000;SET statement_timeout = 30000;"
        );
        let t = PgTarget::parse(
            "postgres://u@127.0.0.1:5999/db?options=-c%20lock_timeout%3D20s%20--statement-timeout%3D0",
        )
        .unwrap();
        assert_eq!(
            t.bounds_sql(t.bounds()),
            "SET idle_in_transaction_session_timeout = 5000;"
        );
        assert_eq!(
            option_names("-cgeqo=off -c idle_in_transaction_session_timeout=1s"),
            ["geqo", "idle_in_transaction_session_timeout"]
        );
    }

    #[test]
    fn parameters_become_dollar_numbers_outside_quotes() {
        assert_eq!(
            translate("SELECT a FROM t WHERE b = ?1 AND c = ?2 OR d = ?1"),
            "SELECT a FROM t WHERE b = $1 AND c = $2 OR d = $1"
        );
        assert_eq!(translate("VALUES (?, ?, ?)"), "VALUES ($1, $2, $3)");
        assert_eq!(translate("x = ?3 AND y = ?"), "x = $3 AND y = $4");
        assert_eq!(
            translate("SELECT '?1', \"a?\" -- ?2\n, ?1"),
            "SELECT '?1', \"a?\" -- ?2\n, $1"
        );
    }
}
