//! The Open Conduit web daemon, `open-conduit-webd`: the web view and its JSON HTTP
//! API over the bus.
//!
//! - [`app`]: one request from its first line to its answer, and webd's bus service
//!   ([`context`] holds what the routes share);
//! - [`auth`]: login tokens, session cookies, a trusted proxy's header, CSRF tokens
//!   ([`tokens`] keeps the tokens' digests);
//! - [`api`]: the JSON routes, described by the OpenAPI document ([`OPENAPI`]);
//! - [`ui`]: the pages, drawn on the server, and the panels and pages of extensions;
//! - [`reads`]: the bus reads both share;
//! - [`live`]: Server-Sent Events from the bus's nudges, and a run's live output;
//! - [`http`]: bodies, errors and parameters; [`server`]: the accept loop.

pub mod api;
pub mod app;
pub mod auth;
pub mod cli;
pub mod context;
pub mod http;
pub mod live;
pub mod reads;
pub mod server;
pub mod tokens;
pub mod ui;

/// The OpenAPI 3.0 document of the API (webd/openapi.json).
pub const OPENAPI: &str = include_str!("../openapi.json");
