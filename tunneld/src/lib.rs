//! tunneld: the host side of webhook tunnels.
//!
//! When the configuration names a tunnel (`settings.webhooks.tunnel`), tunneld asks
//! extrunner to call `tunnel.run` on the package of its type with ingressd's listen
//! address, the operator's tunnel config as written and a fresh run ID, and holds the
//! call open ([`runs`]). It serves `tunnel.url` (the provider's, forwarded by extrunner
//! only for the package running that run) and `tunnel.status` on the bus
//! ([`service`]): a URL is taken only for the run it holds and only when the operator's
//! own `public_url` could be it, then recorded in storaged (`store.tunnel_set`) and
//! published (`tunnel.changed`). When a run ends any other way than its own cancel,
//! the URL is cleared, the stop logged, and the run started again after a growing
//! wait; a provider's `invalid` refusal is not retried until the configuration
//! changes. The daemon's main is [`cli`].

pub mod cli;
pub mod runs;
pub mod service;
