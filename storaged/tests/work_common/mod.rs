//! Helpers shared by the work, waits and timers tests.

#![allow(dead_code)]

use crate::backend::Backend;
use serde::de::DeserializeOwned;
use storaged::{Limits, Store};

/// A store in a fresh temp directory, removed by `close`.
pub struct TestStore {
    pub store: Store,
    dir: std::path::PathBuf,
}

/// A request from JSON (panics on a test's own mistake).
pub fn req<T: DeserializeOwned>(v: serde_json::Value) -> T {
    serde_json::from_value(v).unwrap()
}

impl TestStore {
    pub fn new(b: Backend, name: &str) -> TestStore {
        let dir = std::env::temp_dir().join(format!(
            "oc-work-{name}-{}-{}",
            std::process::id(),
            storaged::util::new_id("t")
        ));
        let _ = std::fs::remove_dir_all(&dir);
        let store = b.open(&dir, Limits::default());
        TestStore { store, dir }
    }

    /// Run SQL on the writer.
    pub async fn exec(&self, sql: &str) {
        let sql = sql.to_string();
        self.store
            .write(move |c| c.execute_batch(&sql).map_err(Into::into))
            .await
            .unwrap();
    }

    /// Insert an accepted event, as the events module would.
    pub async fn event(&self, seq: i64, scope: &str, ty: &str, keys: &[&str]) {
        let keys = serde_json::to_string(keys).unwrap();
        let scope = scope.to_string();
        let ty = ty.to_string();
        self.store
            .write(move |c| {
                c.execute(
                    "INSERT INTO events (seq, id, scope_id, type, source, payload, keys, signature, \
                     root_id, accepted_at, accepted_ms) \
                     VALUES (?1, ?2, ?3, ?4, 'test', ?5, ?6, 'sig', ?2, 'now', ?1)",
                    storaged::sql::params![
                        seq,
                        format!("evt_{seq}"),
                        scope,
                        ty,
                        format!("{{\"n\":{seq}}}"),
                        keys
                    ],
                )?;
                c.execute("INSERT INTO unrouted (seq) VALUES (?1)", [seq])?;
                Ok(())
            })
            .await
            .unwrap();
    }

    /// Rows of a query, each as its columns joined by `|` (NULL for null).
    pub async fn rows(&self, sql: &str) -> Vec<String> {
        let sql = sql.to_string();
        self.store
            .read(move |c| {
                let mut stmt = c.prepare(&sql)?;
                let mut rows = stmt.query([])?;
                let mut out = Vec::new();
                while let Some(r) = rows.next()? {
                    let mut cols = Vec::new();
                    for i in 0..r.column_count() {
                        let v: storaged::sql::Value = r.get(i)?;
                        cols.push(match v {
                            storaged::sql::Value::Null => "NULL".to_string(),
                            storaged::sql::Value::Integer(i) => i.to_string(),
                            storaged::sql::Value::Real(f) => f.to_string(),
                            storaged::sql::Value::Text(t) => t,
                            storaged::sql::Value::Blob(b) => format!("{b:?}"),
                        });
                    }
                    out.push(cols.join("|"));
                }
                Ok(out)
            })
            .await
            .unwrap()
    }

    /// Every row this module's tables hold: equal before and after means nothing
    /// was written.
    pub async fn snapshot(&self) -> Vec<String> {
        let mut all = Vec::new();
        for table in [
            "works",
            "work_keys",
            "work_inputs",
            "route_records",
            "routed",
            "executions",
            "waits",
            "timers",
        ] {
            all.push(format!("-- {table}"));
            all.extend(
                self.rows(&format!("SELECT * FROM {table} ORDER BY 1, 2"))
                    .await,
            );
        }
        all
    }

    pub fn close(self) {
        let dir = self.dir.clone();
        self.store.close();
        let _ = std::fs::remove_dir_all(dir);
    }
}
