//! What the webhook benches (`bench intake`, `bench dispatch`) share on the wire: a
//! signed delivery `POST` on a keep-alive connection, and one answer's status read
//! off it.

use crate::Res;
use std::net::SocketAddr;
use tokio::io::{AsyncRead, AsyncReadExt};

/// A delivery `POST` of `body` to `path`, with `delivery_id` and the body's
/// HMAC-SHA256 signature by `secret` (`X-Signature-256`).
pub fn signed_post(
    addr: SocketAddr,
    path: &str,
    delivery_id: &str,
    secret: &str,
    body: &[u8],
) -> Vec<u8> {
    let sig = oc_systest::sign_sha256(secret.as_bytes(), body);
    let mut req = format!(
        "POST {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\n\
         X-Delivery-Id: {delivery_id}\r\nX-Signature-256: {sig}\r\nContent-Length: {}\r\n\r\n",
        body.len()
    )
    .into_bytes();
    req.extend_from_slice(body);
    req
}

/// Reads one answer off a keep-alive connection (its head and a `Content-Length`
/// body, taken off the front of `buf`): its status.
pub async fn read_status<R: AsyncRead + Unpin>(s: &mut R, buf: &mut Vec<u8>) -> Res<u16> {
    loop {
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&buf[..end]).to_string();
            let status: u16 = head
                .split(' ')
                .nth(1)
                .and_then(|s| s.parse().ok())
                .ok_or("bad status line")?;
            let len: usize = head
                .lines()
                .find_map(|l| {
                    let (n, v) = l.split_once(':')?;
                    n.eq_ignore_ascii_case("content-length")
                        .then(|| v.trim().parse().ok())?
                })
                .unwrap_or(0);
            while buf.len() < end + 4 + len {
                let mut chunk = [0u8; 8192];
                let n = s.read(&mut chunk).await?;
                if n == 0 {
                    return Err("connection closed mid-answer".into());
                }
                buf.extend_from_slice(&chunk[..n]);
            }
            buf.drain(..end + 4 + len);
            return Ok(status);
        }
        let mut chunk = [0u8; 8192];
        let n = s.read(&mut chunk).await?;
        if n == 0 {
            return Err("connection closed".into());
        }
        buf.extend_from_slice(&chunk[..n]);
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[tokio::test]
    async fn answers_are_read_one_at_a_time() {
        let wire = b"HTTP/1.1 202 Accepted\r\nContent-Length: 2\r\n\r\nokHTTP/1.1 401 No\r\ncontent-length: 0\r\n\r\nHTTP/1.1 500 X\r\nContent-Length: 9\r\n\r\nab";
        let mut s: &[u8] = wire;
        let mut buf = Vec::new();
        assert_eq!(read_status(&mut s, &mut buf).await.unwrap(), 202);
        assert_eq!(read_status(&mut s, &mut buf).await.unwrap(), 401);
        let e = read_status(&mut s, &mut buf).await.unwrap_err();
        assert_eq!(e.to_string(), "connection closed mid-answer");
        let mut s: &[u8] = b"HTTP/1.1 2";
        let e = read_status(&mut s, &mut Vec::new()).await.unwrap_err();
        assert_eq!(e.to_string(), "connection closed");
        let mut s: &[u8] = b"HTTP/1.1 abc\r\n\r\n";
        let e = read_status(&mut s, &mut Vec::new()).await.unwrap_err();
        assert_eq!(e.to_string(), "bad status line");
    }

    #[test]
    fn a_post_is_signed() {
        let addr: SocketAddr = "127.0.0.1:9".parse().unwrap();
        let req = signed_post(addr, "/hooks/x", "t-1", "s", b"{}");
        let text = String::from_utf8(req).unwrap();
        let sig = oc_systest::sign_sha256(b"s", b"{}");
        assert!(text.starts_with("POST /hooks/x HTTP/1.1\r\nHost: 127.0.0.1:9\r\n"));
        assert!(text.contains("X-Delivery-Id: t-1\r\n"));
        assert!(text.contains(&format!("X-Signature-256: {sig}\r\n")));
        assert!(text.ends_with("Content-Length: 2\r\n\r\n{}"));
    }
}
