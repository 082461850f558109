//! doctor's `public-url` check: a request sent to the public URL's `/healthz` (the
//! tunnel's, when tunneld runs one) must come back to this ingressd, which names
//! itself in the `X-Open-Conduit-Ingressd` header of its `/healthz` answers.

use std::path::Path;
use std::time::Duration;

use busapi::ingress::RoutesRequest;
use busapi::tunnel::StatusRequest;

use crate::output::{call, verdict, Verdict};

/// How long the round trip through the public URL may take.
pub const ROUND_TRIP_TIMEOUT: Duration = Duration::from_secs(10);

/// The check, when there is a public URL to try: the tunnel's, else none.
pub fn public_url(bus: &Path) -> Option<Verdict> {
    let tunnel = call(bus, &StatusRequest {}).ok()?;
    let url = tunnel.url.trim_end_matches('/').to_owned();
    if url.is_empty() {
        return Some(verdict(
            "public-url",
            "warn",
            "tunneld runs but has no public URL now".into(),
            "see `open-conduit logs tunneld` for why the tunnel is down",
        ));
    }
    let ours = call(bus, &RoutesRequest {})
        .map(|r| r.instance)
        .unwrap_or_default();
    Some(judge(&url, &ours, round_trip(&url)))
}

/// What `GET <url>/healthz` answered: its status and the ingressd it names.
fn round_trip(url: &str) -> Result<(u16, String), String> {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .timeout_global(Some(ROUND_TRIP_TIMEOUT))
        .http_status_as_error(false)
        .max_redirects(0)
        .build()
        .into();
    let answer = agent
        .get(format!("{url}/healthz"))
        .call()
        .map_err(|e| e.to_string())?;
    let named = answer
        .headers()
        .get(ingressd::INSTANCE_HEADER)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    Ok((answer.status().as_u16(), named))
}

fn judge(url: &str, ours: &str, got: Result<(u16, String), String>) -> Verdict {
    let target = format!("{url}/healthz");
    match got {
        Err(e) => verdict(
            "public-url",
            "fail",
            format!("{target}: {e}"),
            "the tunnel or the address in front of ingressd does not reach it: see `open-conduit logs tunneld`",
        ),
        Ok((_, named)) if named.is_empty() || (!ours.is_empty() && named != ours) => verdict(
            "public-url",
            "fail",
            format!("{target} was answered by another server, not this ingressd"),
            "the public URL points somewhere else: check the tunnel's config and the DNS or proxy in front",
        ),
        Ok((200, _)) => verdict(
            "public-url",
            "ok",
            format!("a request to {target} came back to this ingressd"),
            "",
        ),
        Ok((status, _)) => verdict(
            "public-url",
            "warn",
            format!("{target} reaches this ingressd, which answered {status}: it cannot take deliveries now"),
            "see `open-conduit logs ingressd`",
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_this_ingressd_passes() {
        let ok = judge("https://x", "7-ab", Ok((200, "7-ab".into())));
        assert_eq!(ok.status, "ok");
        let other = judge("https://x", "7-ab", Ok((200, "9-cd".into())));
        assert_eq!(other.status, "fail");
        assert!(other.detail.contains("another server"));
        let plain = judge("https://x", "7-ab", Ok((200, String::new())));
        assert_eq!(plain.status, "fail");
        let busy = judge("https://x", "7-ab", Ok((503, "7-ab".into())));
        assert_eq!(busy.status, "warn");
        let down = judge("https://x", "7-ab", Err("connection refused".into()));
        assert_eq!(down.status, "fail");
    }
}
