//! The topics the daemons publish on the bus (notifications, no answer): a
//! subscriber names them with these, never a string of its own.

/// storaged added events (`{"method"}`): schedulerd routes, ingressd's waiters look.
pub const EVENT_ACCEPTED: &str = "event.accepted";
/// Work may be ready to start or resume (`{"method"}`).
pub const WORK_CHANGED: &str = "work.changed";
/// A new configuration generation was applied (`{"generation", "hash"}`).
pub const CONFIG_APPLIED: &str = "config.applied";
/// An extension's state changed (extrunner).
pub const EXT_STATE: &str = "ext.state";
/// The tunnel's public URL changed (tunneld, `{"url"}`).
pub const TUNNEL_CHANGED: &str = "tunnel.changed";
