//! storaged: the only process that opens Open Conduit's database.
//!
//! [`db::Store`] is the storage module: SQLite (WAL, `synchronous=FULL`, foreign
//! keys on) behind one writer thread with group commit and a pool of read-only
//! connections. The bus methods (`store.*`) sit above it, so another backend can
//! replace it without touching a caller.

pub mod artifacts;
pub mod cli;
pub mod commit;
pub mod config;
pub mod db;
pub mod error;
pub mod events;
pub mod fields;
pub mod kv;
pub mod metrics;
pub mod nudge;
pub mod reserved;
pub mod resources;
pub mod retention;
pub mod rpc;
pub mod schema;
pub mod service;
pub mod sql;
pub mod stats;
pub mod target;
pub mod timers;
pub mod transfer;
pub mod util;
pub mod work;

pub use db::{Limits, Store};
pub use error::StoreError;
pub use work::waits;
