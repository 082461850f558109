//! The store's tests run on both backends: `on_both!(test_fn, …)` makes each
//! `async fn test_fn(b: Backend)` into two tests, `test_fn::sqlite` and
//! `test_fn::postgres` (the second on a fresh database in the test process's
//! own PostgreSQL cluster; skipped, saying why, where PostgreSQL is missing,
//! unless `OC_REQUIRE_PEERS=1`).

#![allow(dead_code)]

use std::path::Path;
use storaged::db::StorageTarget;
use storaged::sql::PgTarget;
use storaged::{Limits, Store};

/// Which backend a test runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Sqlite,
    Postgres,
}

impl Backend {
    /// Where a fresh store for a test goes (a new database on PostgreSQL).
    pub fn target(self, hint: &str) -> StorageTarget {
        match self {
            Backend::Sqlite => StorageTarget::Sqlite,
            Backend::Postgres => {
                let cluster = oc_pgtest::shared().expect("PostgreSQL was checked before the test");
                let url = cluster.create_database(hint).expect("create a database");
                StorageTarget::Postgres(Box::new(
                    PgTarget::parse(&url).expect("the test URL parses"),
                ))
            }
        }
    }

    /// A fresh database's URL (PostgreSQL), or `None` (SQLite).
    pub fn url(self, hint: &str) -> Option<String> {
        match self {
            Backend::Sqlite => None,
            Backend::Postgres => Some(
                oc_pgtest::shared()
                    .expect("PostgreSQL was checked before the test")
                    .create_database(hint)
                    .expect("create a database"),
            ),
        }
    }

    /// A fresh store under `dir`.
    pub fn open(self, dir: &Path, limits: Limits) -> Store {
        let hint = dir
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or("store")
            .to_string();
        Store::open_with(dir, limits, &self.target(&hint)).expect("open the store")
    }

    /// Whether the test can run here (prints why not).
    pub fn ready(self, test: &str) -> bool {
        match self {
            Backend::Sqlite => true,
            Backend::Postgres => oc_pgtest::shared_or_skip(test).is_some(),
        }
    }
}

/// Two tests, one per backend, for each `async fn name(b: Backend)`.
#[macro_export]
macro_rules! on_both {
    ($($name:ident),* $(,)?) => {$(
        mod $name {
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn sqlite() {
                super::$name($crate::backend::Backend::Sqlite).await
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn postgres() {
                let b = $crate::backend::Backend::Postgres;
                if b.ready(concat!(stringify!($name), "::postgres")) {
                    super::$name(b).await
                }
            }
        }
    )*};
}
