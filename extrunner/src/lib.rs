//! extrunner: every extension as a supervised process with a scoped host.
//!
//! This crate holds the behaviour of `open-conduit-extrunner`: the discovery
//! of installed and bundled packages ([`discovery`]), the atomic conflict
//! check of the discovered set ([`conflicts`]), each extension as a
//! supervised process: sanitized start, handshake, restart with backoff, group
//! stop ([`process`]), every package started at once and kept ([`runner`]), the
//! `ext.*` bus methods ([`service`]), the daemon's main ([`cli`]), and the
//! scoped host that checks every extension-to-host call against the identity
//! bound at start before it reaches storaged ([`host`]), what each package is
//! configured with and registered ([`configuration`]), and webhook and ingress
//! acceptance ([`ingress`]), the tunnel runs held for tunneld
//! ([`tunnels`]), and the prompt renderings an executor asks of the Events' owners
//! ([`render`]), the agents' plugin written from every package's playbooks
//! ([`playbooks`]), and the host's actions a package invokes for a person
//! (`action.submit`) with the Work read it finds their Work with ([`actions`]), and
//! a running attempt's output through its executor's `executor.live` ([`live`]).
//!
//! The modules are layered one way: [`identity`] and [`storage`] (storaged's typed
//! calls as the extensions see them) are below the scoped host, ingress, the
//! renderings and the actions; the workspace service and the renderings reach the
//! runner only through the narrow traits they declare ([`workspaces::Providers`],
//! [`render::Packages`]), which the runner implements.

pub mod actions;
pub mod cli;
pub mod configuration;
pub mod conflicts;
pub mod discovery;
pub mod host;
pub mod identity;
pub mod ingress;
pub mod live;
pub mod metrics;
pub mod offline;
pub mod playbooks;
pub mod process;
pub mod render;
pub mod runner;
pub mod service;
pub mod storage;
pub mod tunnels;
pub mod workspaces;
