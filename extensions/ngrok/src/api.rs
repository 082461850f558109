//! The ngrok agent's local API: `GET /api/tunnels` over plain HTTP on loopback, and
//! the public URL of the tunnel to the listener in its answer.

use serde_json::Value;
use std::net::SocketAddr;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// The largest answer read.
pub const MAX_ANSWER: u64 = 1024 * 1024;
/// How long one request may take.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);

/// `GET /api/tunnels` on `api`: the JSON body of a 200 answer. An HTTP/1.0 request,
/// so the agent answers without chunking and closes.
pub async fn tunnels(api: SocketAddr) -> Result<Value, String> {
    let get = async {
        let mut s = tokio::net::TcpStream::connect(api)
            .await
            .map_err(|e| format!("{api}: {e}"))?;
        s.write_all(
            format!("GET /api/tunnels HTTP/1.0\r\nHost: {api}\r\nAccept: application/json\r\n\r\n")
                .as_bytes(),
        )
        .await
        .map_err(|e| format!("{api}: {e}"))?;
        let mut buf = Vec::new();
        (&mut s)
            .take(MAX_ANSWER + 1)
            .read_to_end(&mut buf)
            .await
            .map_err(|e| format!("{api}: {e}"))?;
        if buf.len() as u64 > MAX_ANSWER {
            return Err(format!(
                "{api}: the answer is over the {MAX_ANSWER}-byte limit"
            ));
        }
        Ok(buf)
    };
    let buf = tokio::time::timeout(REQUEST_TIMEOUT, get)
        .await
        .map_err(|_| format!("{api}: no answer within {REQUEST_TIMEOUT:?}"))??;
    let split = buf
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or_else(|| format!("{api}: not an HTTP answer"))?;
    let head = String::from_utf8_lossy(&buf[..split]);
    let status = head.lines().next().unwrap_or_default();
    let code = status.split_whitespace().nth(1).unwrap_or_default();
    if !status.starts_with("HTTP/1.") || code != "200" {
        return Err(format!("{api}: GET /api/tunnels answered {status:?}"));
    }
    serde_json::from_slice(&buf[split + 4..])
        .map_err(|e| format!("{api}: /api/tunnels is not JSON: {e}"))
}

/// The public URL of the https tunnel forwarding to `addr` in a `/api/tunnels`
/// answer. A tunnel whose `config.addr` names another address is another's (an agent
/// already on that API address); one without `config.addr` is taken.
pub fn public_url(answer: &Value, addr: &str) -> Option<String> {
    answer["tunnels"].as_array()?.iter().find_map(|t| {
        let url = t["public_url"].as_str()?;
        let https = t["proto"].as_str().is_none_or(|p| p == "https")
            && url.to_ascii_lowercase().starts_with("https://");
        let to = t["config"]["addr"].as_str().map(|a| {
            a.trim_start_matches("http://")
                .trim_start_matches("https://")
                .trim_end_matches('/')
                .to_owned()
        });
        let ours = to.is_none_or(|a| a == addr);
        (https && ours).then(|| url.to_owned())
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// The answer as ngrok's agent API documentation shows it ("List tunnels").
    #[test]
    fn the_public_url_is_the_https_tunnel_to_the_listener() {
        let answer = json!({"tunnels": [
            {"name": "command_line (http)", "uri": "/api/tunnels/command_line%20%28http%29",
             "public_url": "http://d95211d2.ngrok-free.app", "proto": "http",
             "config": {"addr": "http://127.0.0.1:8420", "inspect": true}},
            {"name": "other", "public_url": "https://other.ngrok-free.app", "proto": "https",
             "config": {"addr": "http://localhost:80", "inspect": true}},
            {"name": "command_line", "uri": "/api/tunnels/command_line",
             "public_url": "https://d95211d2.ngrok-free.app", "proto": "https",
             "config": {"addr": "http://127.0.0.1:8420", "inspect": true},
             "metrics": {"conns": {"count": 0}, "http": {"count": 0}}}
        ], "uri": "/api/tunnels"});
        assert_eq!(
            public_url(&answer, "127.0.0.1:8420").as_deref(),
            Some("https://d95211d2.ngrok-free.app")
        );
        assert_eq!(public_url(&answer, "127.0.0.1:9"), None);
        assert_eq!(public_url(&json!({"tunnels": []}), "127.0.0.1:8420"), None);
        assert_eq!(public_url(&json!({}), "127.0.0.1:8420"), None);
    }
}
