//! storaged: the only process that opens Open Conduit's database.
//!
//! [`db::Store`] is the storage module: SQLite (WAL, `synchronous=FULL`, foreign
//! keys on) behind one writer thread with group commit and a pool of read-only
//! connections. The bus methods (`store.*`) sit above it, so another backend can
//! replace it without touching a caller.

pub mod db;
pub mod error;
pub mod schema;
pub mod util;

pub use db::{Limits, Store};
pub use error::StoreError;
