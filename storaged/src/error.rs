//! The store's errors, and how they cross the wire.

use protocol::{Code, RpcError};

/// What a store operation can end in besides its result.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The record is not there (or not visible to the caller).
    #[error("{0}")]
    NotFound(String),
    /// A precondition failed: re-read and retry.
    #[error("{0}")]
    Conflict(String),
    /// The request breaks a rule or a limit (the message names it).
    #[error("{0}")]
    Invalid(String),
    /// The caller may not touch this.
    #[error("{0}")]
    Unauthorized(String),
    /// A family, kind or type the owner did not declare.
    #[error("{0}")]
    Undeclared(String),
    /// A derived event over its chain's causal bounds.
    #[error("{0}")]
    CausalLimit(String),
    /// The database was written by a newer release.
    #[error("the database has schema version {found}, newer than this release's {ours}: run the newer release, or restore a backup taken before the upgrade")]
    NewerDatabase {
        /// The version found.
        found: u32,
        /// The version this release writes.
        ours: u32,
    },
    /// The database failed.
    #[error("{0}")]
    Db(crate::sql::Error),
    /// The database cannot be reached now (PostgreSQL down or unreachable):
    /// nothing was written; try again.
    #[error("the database is unavailable: {0}")]
    Unavailable(String),
    /// The disk is full (the database's, or the state directory's): nothing was
    /// written; try again once space is freed.
    #[error("the disk is full: {0}")]
    Full(String),
    /// A file operation failed.
    #[error("{0}")]
    Io(String),
    /// A bug or an impossible state.
    #[error("{0}")]
    Internal(String),
    /// The store is shutting down.
    #[error("the store is shutting down")]
    Closed,
}

impl From<crate::sql::Error> for StoreError {
    fn from(e: crate::sql::Error) -> StoreError {
        if let Some(m) = e.full() {
            return StoreError::Full(m);
        }
        match e {
            crate::sql::Error::ConnectionLost(m) | crate::sql::Error::OverBound(m) => {
                StoreError::Unavailable(m)
            }
            other => StoreError::Db(other),
        }
    }
}

impl From<rusqlite::Error> for StoreError {
    fn from(e: rusqlite::Error) -> StoreError {
        StoreError::from(crate::sql::Error::Sqlite(e))
    }
}

impl StoreError {
    /// `invalid`, naming the limit.
    pub fn invalid(msg: impl Into<String>) -> Self {
        StoreError::Invalid(msg.into())
    }

    /// `conflict`.
    pub fn conflict(msg: impl Into<String>) -> Self {
        StoreError::Conflict(msg.into())
    }

    /// `not_found`.
    pub fn not_found(msg: impl Into<String>) -> Self {
        StoreError::NotFound(msg.into())
    }

    /// A file operation's failure: [`StoreError::Full`] when the disk is full
    /// (`ENOSPC`, `EDQUOT`), else [`StoreError::Io`]; `doing` says what failed.
    pub fn io(doing: impl std::fmt::Display, e: &std::io::Error) -> Self {
        if is_full(e) {
            StoreError::Full(format!("{doing}: {e}"))
        } else {
            StoreError::Io(format!("{doing}: {e}"))
        }
    }
}

/// Whether a file operation failed for want of space (`ENOSPC`, or `EDQUOT`: a
/// quota is a full disk to its user).
pub fn is_full(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        std::io::ErrorKind::StorageFull | std::io::ErrorKind::QuotaExceeded
    )
}

impl From<StoreError> for RpcError {
    fn from(e: StoreError) -> RpcError {
        match e {
            StoreError::NotFound(m) => RpcError::new(Code::NotFound, m),
            StoreError::Conflict(m) => RpcError::new(Code::Conflict, m),
            StoreError::Invalid(m) => RpcError::new(Code::Invalid, m),
            StoreError::Unauthorized(m) => RpcError::new(Code::Unauthorized, m),
            StoreError::Undeclared(m) => RpcError::new(Code::Undeclared, m),
            StoreError::CausalLimit(m) => RpcError::new(Code::CausalLimit, m),
            StoreError::Closed => RpcError::new(Code::ShuttingDown, "the store is shutting down"),
            StoreError::Unavailable(m) => RpcError::new(
                Code::Unavailable,
                format!("the database is unavailable: {m}"),
            ),
            // Not the caller's fault, and not a bug: retrying once space is freed
            // succeeds (ingressd answers 503 with Retry-After).
            StoreError::Full(m) => RpcError::new(
                Code::Unavailable,
                format!("the disk is full, nothing was written (retry once space is freed): {m}"),
            ),
            other => RpcError::unauthored(other),
        }
    }
}
