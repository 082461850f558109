//! What every Open Conduit daemon shares: logging ([`log`]), readiness and watchdog
//! notifications ([`notify`]), stop and reload signals ([`signals`]), socket
//! activation ([`activation`]), the bus client ([`bus`]), metrics ([`metrics`]) and the
//! scrape of the whole suite's ([`scrape`]).
//!
//! A daemon's `main`, in this order: [`log::init`], then [`Notifier::from_env`] and
//! [`Activation::from_env`] (both before any thread starts, as they edit the environment),
//! then the tokio runtime, [`Signals::new`], serving, and [`Notifier::ready`].

pub mod activation;
pub mod batch;
pub mod bus;
pub mod direct;
pub mod error;
pub mod log;
pub mod metrics;
pub mod notify;
pub mod scrape;
pub mod signals;
pub mod sock;
pub mod start;

pub use activation::{bind_unix, Activation};
pub use error::Error;
pub use log::{fields, LogTarget};
pub use notify::Notifier;
pub use signals::{with_deadline, DeadlineElapsed, Signal, Signals};
pub use start::{parse_args, run_daemon, Flavor, MAX_WORKER_THREADS, WORKER_THREADS_ENV};
