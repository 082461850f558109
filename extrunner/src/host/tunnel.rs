//! `tunnel.url`: a tunnel provider's public URL, forwarded to tunneld for a run it
//! holds for the host.

use super::*;
use busapi::tunnel::UrlRequest;

/// The most bytes of a `tunnel.url` request forwarded (tunneld's own bound).
pub const MAX_TUNNEL_URL_REQUEST: usize = busapi::tunnel::MAX_URL_REQUEST;

/// `tunnel.url`: forwarded to tunneld (`tunnel.url` on the bus) only when it quotes a
/// run this package is running now; `conflict` otherwise (spec: Crash and reconnect).
pub(super) async fn tunnel_url(
    identity: &Identity,
    bus: &Bus,
    tunnels: Option<&TunnelRuns>,
    request: &Request,
) -> Result<Reply, RpcError> {
    if request.params.get().len() > MAX_TUNNEL_URL_REQUEST {
        return Err(RpcError::new(
            Code::Invalid,
            format!(
                "a {} request is at most {MAX_TUNNEL_URL_REQUEST} bytes",
                wire::TunnelUrlParams::METHOD
            ),
        ));
    }
    let p: wire::TunnelUrlParams = request.params()?;
    let Some(tunnels) = tunnels else {
        return Err(RpcError::new(
            Code::Unsupported,
            format!(
                "{} is not served by this host",
                wire::TunnelUrlParams::METHOD
            ),
        ));
    };
    if !tunnels.holds(&identity.name, &p.run_id) {
        return Err(RpcError::new(
            Code::Conflict,
            format!(
                "tunnel run {:?} is not one `{}` is running for the host",
                p.run_id, identity.name
            ),
        ));
    }
    bus.call_typed(&UrlRequest {
        run_id: p.run_id,
        url: p.url,
        provider_package: identity.name.clone(),
    })
    .await
    .map_err(|e| match e {
        CallError::Rpc(err) => err,
        other => RpcError::new(Code::Unavailable, format!("tunneld: {other}")),
    })?;
    answer::<wire::TunnelUrlParams>(&wire::TunnelUrlResult {})
}
