//! Routing (H→E): `route.match` and `route.samples`.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::events::Event;
use super::work::{Route, Scope, Work, WorkDisplay};
use super::{is_false, present};

/// `route.match` (H→E): may this route take this Event? Free of side effects, outside any
/// transaction, also for route traces.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RouteMatchParams {
    /// The route handler.
    pub handler: String,
    /// The route.
    pub route: Route,
    /// The scope (id, entries, routes, bindings).
    pub scope: Scope,
    /// The Event.
    pub event: Event,
    /// The Work the Event already reaches, with its current display, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub work: Option<Work>,
}

/// Result of `route.match`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RouteMatchResult {
    /// True when the route takes the Event.
    #[serde(default, skip_serializing_if = "is_false")]
    pub matched: bool,
    /// The correlation keys of the Work it goes to.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub keys: Vec<String>,
    /// The Work kind of Work the match creates.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub kind: String,
    /// Why, for a trace; never changes the decision.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub reason: String,
    /// The Work's display, replacing the current one; none keeps it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub display: Option<WorkDisplay>,
    /// The context of Work the match creates.
    #[serde(
        default,
        deserialize_with = "present",
        skip_serializing_if = "Option::is_none"
    )]
    pub context: Option<Value>,
    /// The binding grants Work the match creates opts into.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub grants: Vec<String>,
    /// Close the open Work the Event reaches, as `completed` or `cancelled` (a merged or
    /// closed pull request), instead of running a turn on it; an Event that reaches no
    /// open Work then creates none. Not the spec's (docs/decisions.md).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub close: String,
}

/// `route.samples` (H→E): named sample Events for a route trace, as of the host's `now`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RouteSamplesParams {
    /// The route handler.
    pub handler: String,
    /// The route.
    pub route: Route,
    /// The scope.
    pub scope: Scope,
    /// The host's clock.
    pub now: String,
}

/// A sample Event for a route trace.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RouteSample {
    /// The sample's ID.
    pub id: String,
    /// Its title.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub title: String,
    /// The hypothetical Event.
    pub event: Event,
}

/// Result of `route.samples`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RouteSamplesResult {
    /// The samples.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub samples: Vec<RouteSample>,
}
