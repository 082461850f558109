//! extrunner: every extension as a supervised process with a scoped host.
//!
//! This crate holds the behaviour of `open-conduit-extrunner`: the discovery
//! of installed and bundled packages ([`discovery`]) and the atomic conflict
//! check of the discovered set ([`conflicts`]).

pub mod conflicts;
pub mod discovery;
