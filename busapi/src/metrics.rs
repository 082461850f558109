//! What every daemon's `<family>.metrics` method answers: its samples in the
//! Prometheus text format, every family name prefixed with the daemon's own
//! (`oc_storaged_…`, `oc_schedulerd_…`), so the answers of all the daemons
//! concatenate into one exposition without two families of one name.
//!
//! ingressd's `/metrics` (and webd's) gathers them over the bus.

use serde::{Deserialize, Serialize};

/// The answer of every `<family>.metrics` method.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MetricsText {
    /// Prometheus text format (version 0.0.4), `# HELP` and `# TYPE` lines with
    /// each family.
    pub text: String,
}

/// The most bytes of one daemon's metrics a gatherer takes (each daemon's label
/// sets are bounded, so its text is far smaller).
pub const MAX_METRICS_BYTES: usize = 4 * 1024 * 1024;
