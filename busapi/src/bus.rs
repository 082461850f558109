//! The broker's methods that are part of the daemons' API (`bus.*`): its metrics.
//! (`bus.register`, `bus.subscribe` and `bus.status` are the bus client's own.)

use serde::{Deserialize, Serialize};

/// `bus.metrics`: no fields.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MetricsRequest {}

crate::methods! {
    "bus.metrics": MetricsRequest => crate::metrics::MetricsText,
}
