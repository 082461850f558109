//! extrunner: every extension as a supervised process with a scoped host.
//!
//! This crate holds the behaviour of `open-conduit-extrunner`: the discovery
//! of installed and bundled packages ([`discovery`]), the atomic conflict
//! check of the discovered set ([`conflicts`]), and each extension as a
//! supervised process: sanitized start, handshake, restart with backoff, group
//! stop ([`process`]).

pub mod conflicts;
pub mod discovery;
pub mod process;
