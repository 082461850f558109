//! tunneld's methods (`tunnel.*`): the public URL of the tunnel it holds.
//!
//! `tunnel.url` is the provider's URL as extrunner forwards it (an extension's own
//! `tunnel.url`, [`protocol::wire::TunnelUrlParams`], quoting the run tunneld holds);
//! `tunnel.status` says what tunneld holds now. The URL's changes are published as
//! [`crate::topic::TUNNEL_CHANGED`].

use serde::{Deserialize, Serialize};

/// The most bytes of a `tunnel.url` request tunneld (and extrunner, forwarding one)
/// takes.
pub const MAX_URL_REQUEST: usize = 4096;

/// `tunnel.url`: the provider's public URL for the run it quotes (`""`: the tunnel
/// is down). Forwarded by extrunner, which names the package that sent it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UrlRequest {
    /// The run the URL is for.
    pub run_id: String,
    /// The public URL (`""` while down).
    #[serde(default)]
    pub url: String,
    /// The package that sent it (empty: not checked).
    #[serde(default)]
    pub provider_package: String,
}

/// Result of `tunnel.url`: nothing; an error says why the URL was not taken
/// (`conflict`: not the run held; `invalid`: not a public URL).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct UrlResponse {}

/// `tunnel.status`: no fields (any are ignored).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StatusRequest {}

/// Result of `tunnel.status`: the run held, the URL, the last stop and the counts.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TunnelStatus {
    /// The tunnel type of the run held (empty: none).
    #[serde(default)]
    pub provider: String,
    /// The package running it.
    #[serde(default)]
    pub package: String,
    /// The run held.
    #[serde(default)]
    pub run_id: String,
    /// The public URL now (`""`: none).
    #[serde(default)]
    pub url: String,
    /// Why the last run stopped.
    #[serde(default)]
    pub last_stop: String,
    /// Runs started.
    #[serde(default)]
    pub runs: u64,
    /// URLs refused.
    #[serde(default)]
    pub refused: u64,
}

crate::methods! {
    "tunnel.url": UrlRequest => UrlResponse,
    "tunnel.status": StatusRequest => TunnelStatus,
}
