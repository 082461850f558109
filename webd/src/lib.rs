//! The Open Conduit web daemon, `open-conduit-webd`: a JSON HTTP API over the bus
//! (Works, Events, extensions, what waits for a person, a Work's actions), described
//! by the OpenAPI document it serves at `/api/openapi.json` ([`OPENAPI`]), for
//! operators signed in with a login token (`open-conduit web login`, [`tokens`]).
//!
//! The web UI, live updates (SSE) and the pages and panels extensions declare come
//! later (docs/webd.md).

pub mod api;
pub mod cli;
pub mod server;
pub mod tokens;

/// The OpenAPI 3.0 document of the API (webd/openapi.json).
pub const OPENAPI: &str = include_str!("../openapi.json");
