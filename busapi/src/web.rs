//! webd's methods (`web.*`): what the web daemon serves and where.
//!
//! webd joins the bus as the service `webd` once it serves HTTP; `web.status`
//! says where (`doctor` and `up` read it). Under systemd webd is socket-activated,
//! so it is on the bus only after its first connection: `doctor` connects to the
//! default address when `web.status` finds no webd.

use serde::{Deserialize, Serialize};

/// The address webd listens on when nothing else is said (its socket unit's).
pub const DEFAULT_LISTEN: &str = "127.0.0.1:8421";

/// The path webd answers `200 ok` on without sign-in, for health checks.
pub const HEALTH_PATH: &str = "/healthz";

/// `web.status`: no fields.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StatusRequest {}

/// Result of `web.status`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct WebStatus {
    /// The address it listens on (`127.0.0.1:8421`).
    pub listen: String,
    /// The URL an operator opens (`http://127.0.0.1:8421/`).
    pub url: String,
    /// Live-update streams (Server-Sent Events) open now.
    #[serde(default)]
    pub streams: u64,
    /// Signed-in sessions held now.
    #[serde(default)]
    pub sessions: u64,
}

/// `web.metrics`: no fields; answers the daemon's samples ([`crate::metrics`]).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct MetricsRequest {}

crate::methods! {
    "web.status": StatusRequest => WebStatus,
    "web.metrics": MetricsRequest => crate::metrics::MetricsText,
}
