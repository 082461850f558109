//! ingressd's methods (`ingress.*`): where webhooks are accepted, and how the last
//! reconcile pass of each source went.

use serde::{Deserialize, Serialize};

/// `ingress.routes`: no fields.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RoutesRequest {}

/// One webhook path served, and the package it is delivered to.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Route {
    /// The path (no trailing `/`).
    pub path: String,
    /// The package that registered it.
    pub owner: String,
}

/// Result of `ingress.routes`: the paths served now.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RoutesResponse {
    /// The address webhooks are accepted on (empty until it is known).
    #[serde(default)]
    pub listen: String,
    /// This ingressd's random instance ID (also the `X-Open-Conduit-Ingressd` header
    /// of its `/healthz` answers).
    #[serde(default)]
    pub instance: String,
    /// The paths served.
    #[serde(default)]
    pub routes: Vec<Route>,
    /// Every package's paths are known (extrunner's registrations were complete).
    #[serde(default)]
    pub complete: bool,
    /// How many times the routes were fetched from extrunner.
    #[serde(default)]
    pub fetches: u64,
}

/// `ingress.reconcile_status`: no fields.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReconcileStatusRequest {}

/// How the last reconcile pass of a source went.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PassReport {
    /// The source.
    pub source: String,
    /// Its owner.
    pub owner: String,
    /// `complete` or `failed`.
    pub outcome: String,
    /// Pages read.
    pub pages: u32,
    /// Items observed.
    pub items: u64,
    /// Events newly accepted.
    pub added: u64,
    /// The checkpoint now.
    pub checkpoint: String,
    /// Why it failed.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub error: String,
}

/// Result of `ingress.reconcile_status`: the last pass of each source, by source.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReconcileStatusResponse {
    /// The reports.
    #[serde(default)]
    pub sources: Vec<PassReport>,
}

/// `ingress.metrics`: no fields; answers ingressd's samples ([`crate::metrics`]).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MetricsRequest {}

crate::methods! {
    "ingress.routes": RoutesRequest => RoutesResponse,
    "ingress.metrics": MetricsRequest => crate::metrics::MetricsText,
    "ingress.reconcile_status": ReconcileStatusRequest => ReconcileStatusResponse,
}
