//! PostgreSQL: one session (a client and its compiled statements), the SQL
//! rewritten from `?N` to `$N`, and the connection settings.

use super::{Error, Kind, Param, Result, ToSql};
use std::collections::HashMap;
use std::time::Duration;

/// Most statements kept compiled per session; past it the cache starts over.
const MAX_CACHED_STATEMENTS: usize = 512;

/// Where PostgreSQL is, parsed from an operator's URL (`postgres://…` or
/// `host=… port=…`); the text itself is never logged (it may carry a password).
#[derive(Clone)]
pub struct PgTarget {
    config: postgres::Config,
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
        Ok(PgTarget { config })
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

    /// Open a session.
    pub fn connect(&self) -> Result<PgSession> {
        let client = self
            .config
            .connect(postgres::NoTls)
            .map_err(|e| Error::ConnectionLost(format!("connect to {}: {e}", self.describe())))?;
        Ok(PgSession {
            client,
            statements: HashMap::new(),
        })
    }
}

/// One PostgreSQL connection and the statements compiled on it.
pub struct PgSession {
    client: postgres::Client,
    statements: HashMap<(String, Vec<Kind>), postgres::Statement>,
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
        Ok(self.client.batch_execute(sql)?)
    }

    fn statement(&mut self, sql: &str, params: &[Param<'_>]) -> Result<postgres::Statement> {
        let kinds: Vec<Kind> = params.iter().map(Param::kind).collect();
        let key = (sql.to_string(), kinds);
        if let Some(s) = self.statements.get(&key) {
            return Ok(s.clone());
        }
        let types: Vec<postgres::types::Type> = key.1.iter().map(|k| k.pg_type()).collect();
        let translated = translate(sql);
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
    use super::translate;

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
