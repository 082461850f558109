//! schedulerd: the core loop of Open Conduit.
//!
//! Built so far: the router ([`router`]): each accepted event, in sequence order, asked
//! of its scope's routes (`route.match` through extrunner) and recorded with why
//! (`store.route_decide`): a new Work, the Work its key names, or the scope's unmatched
//! disposition; route traces that write nothing ([`service`]); the daemon's main
//! ([`cli`]); the starter ([`starter`]): attempts under leases through the binding's
//! executor, settled with retries, and adoption after restarts; recurrence timers
//! ([`timers`]); extension tasks at their intervals ([`tasks`]); the agents' toolbelt
//! ([`toolbelt`]); this host among the hosts sharing one database ([`host`]).
//!
//! What it knows of the suite (configuration, what each package declares) is
//! [`knowledge`]'s. The router, starter and toolbelt reach storaged and extrunner
//! only through [`ports`] (typed by the `busapi` crate), so that tests run them
//! in-process against storaged's own store.

pub mod annotate;
pub mod cli;
pub mod host;
pub mod knowledge;
pub mod ports;
pub mod router;
pub mod rows;
pub mod service;
pub mod starter;
pub mod tasks;
pub mod timers;
pub mod toolbelt;
