//! HTTP/1.1 on one connection: reading heads and bodies within their bounds, writing answers.

use std::io;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::watch;
use tokio::time::{timeout, timeout_at, Instant};

use crate::Limits;

/// A parsed request head.
#[derive(Debug)]
pub(crate) struct Head {
    pub method: String,
    pub target: String,
    /// The minor version: HTTP/1.0 or HTTP/1.1.
    pub minor: u8,
    pub headers: Vec<(String, Vec<u8>)>,
}

impl Head {
    /// Every value of the headers named `name`.
    pub fn values<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a [u8]> + 'a {
        self.headers
            .iter()
            .filter(move |(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_slice())
    }

    /// Whether a comma-separated header named `name` holds `token` (case-insensitive).
    pub fn has_token(&self, name: &str, token: &str) -> bool {
        self.values(name).any(|v| {
            v.split(|b| *b == b',')
                .any(|t| t.trim_ascii().eq_ignore_ascii_case(token.as_bytes()))
        })
    }
}

/// Why no request head came.
#[derive(Debug)]
pub(crate) enum HeadError {
    /// The peer closed, went quiet before starting a request, or the server is stopping:
    /// close without an answer.
    Idle,
    /// Answer this status with this reason, then close.
    Reject(u16, String),
}

/// Why a body could not be read.
#[derive(Debug)]
pub(crate) enum BodyError {
    TooLarge,
    Timeout,
    Bad(String),
    Closed,
}

enum ReadError {
    Timeout,
    Eof,
    Io(io::Error),
}

impl From<ReadError> for BodyError {
    fn from(e: ReadError) -> BodyError {
        match e {
            ReadError::Timeout => BodyError::Timeout,
            ReadError::Eof => BodyError::Closed,
            ReadError::Io(e) => {
                tracing::debug!(error = %e, "reading a body");
                BodyError::Closed
            }
        }
    }
}

/// The longest chunk-size line (with extensions) and trailer section accepted.
const MAX_CHUNK_LINE: usize = 4096;
const MAX_TRAILERS: usize = 64 * 1024;

/// One connection with the bytes read and not yet consumed.
pub(crate) struct Conn {
    pub stream: TcpStream,
    buf: Vec<u8>,
}

/// Where the head ends (the index after its blank line), searching from `from`.
fn head_end(buf: &[u8], from: usize) -> Option<usize> {
    let mut i = from;
    while let Some(off) = buf
        .get(i..)
        .and_then(|b| b.iter().position(|c| *c == b'\n'))
    {
        let nl = i + off;
        if let Some([b'\r', b'\n']) = buf.get(nl + 1..nl + 3) {
            return Some(nl + 3);
        }
        if buf.get(nl + 1) == Some(&b'\n') {
            return Some(nl + 2);
        }
        i = nl + 1;
    }
    None
}

impl Conn {
    pub fn new(stream: TcpStream) -> Conn {
        Conn {
            stream,
            buf: Vec::with_capacity(8192),
        }
    }

    async fn fill(&mut self, deadline: Instant) -> Result<(), ReadError> {
        self.buf.reserve(16 * 1024);
        match timeout_at(deadline, self.stream.read_buf(&mut self.buf)).await {
            Err(_) => Err(ReadError::Timeout),
            Ok(Ok(0)) => Err(ReadError::Eof),
            Ok(Ok(_)) => Ok(()),
            Ok(Err(e)) => Err(ReadError::Io(e)),
        }
    }

    /// Reads the next request head. Waiting for a new request ends quietly when the
    /// server stops.
    pub async fn read_head(
        &mut self,
        limits: &Limits,
        stop: &mut watch::Receiver<bool>,
    ) -> Result<Head, HeadError> {
        let deadline = Instant::now() + limits.header_timeout;
        let mut scanned: usize = 0;
        loop {
            // Empty lines before a request line are ignored (RFC 9112, 2.2).
            let blank = self
                .buf
                .iter()
                .take_while(|b| **b == b'\r' || **b == b'\n')
                .count();
            if blank > 0 {
                self.buf.drain(..blank);
                scanned = 0;
            }
            if let Some(end) = head_end(&self.buf, scanned.saturating_sub(3)) {
                if end > limits.max_head_bytes {
                    return Err(too_large_head(limits));
                }
                return self.parse_head(end, limits);
            }
            scanned = self.buf.len();
            if self.buf.len() > limits.max_head_bytes {
                return Err(too_large_head(limits));
            }
            let read = if self.buf.is_empty() {
                if *stop.borrow() {
                    return Err(HeadError::Idle);
                }
                tokio::select! {
                    r = self.fill(deadline) => r,
                    _ = stop.changed() => return Err(HeadError::Idle),
                }
            } else {
                self.fill(deadline).await
            };
            match read {
                Ok(()) => {}
                Err(ReadError::Timeout) if !self.buf.is_empty() => {
                    return Err(HeadError::Reject(
                        408,
                        format!(
                            "the request head did not arrive within {} ms",
                            limits.header_timeout.as_millis()
                        ),
                    ))
                }
                Err(_) => return Err(HeadError::Idle),
            }
        }
    }

    fn parse_head(&mut self, end: usize, limits: &Limits) -> Result<Head, HeadError> {
        let mut headers = vec![httparse::EMPTY_HEADER; limits.max_headers];
        let mut req = httparse::Request::new(&mut headers);
        let head = match req.parse(&self.buf[..end]) {
            Ok(httparse::Status::Complete(n)) if n == end => Head {
                method: req.method.unwrap_or_default().to_owned(),
                target: req.path.unwrap_or_default().to_owned(),
                minor: req.version.unwrap_or(1),
                headers: req
                    .headers
                    .iter()
                    .map(|h| (h.name.to_owned(), h.value.to_vec()))
                    .collect(),
            },
            Ok(_) => return Err(HeadError::Reject(400, "malformed request head".to_owned())),
            Err(httparse::Error::TooManyHeaders) => {
                return Err(HeadError::Reject(
                    431,
                    format!("more than {} headers", limits.max_headers),
                ))
            }
            Err(e) => {
                return Err(HeadError::Reject(
                    400,
                    format!("malformed request head: {e}"),
                ))
            }
        };
        self.buf.drain(..end);
        Ok(head)
    }

    /// Takes up to `n` buffered bytes, reading when none are buffered.
    async fn take_some(&mut self, n: usize, deadline: Instant) -> Result<Vec<u8>, BodyError> {
        if self.buf.is_empty() {
            self.fill(deadline).await?;
        }
        let k = n.min(self.buf.len());
        Ok(self.buf.drain(..k).collect())
    }

    /// Reads a body of exactly `n` bytes (already checked against the limit).
    pub async fn read_body(&mut self, n: usize, deadline: Instant) -> Result<Vec<u8>, BodyError> {
        let mut body = Vec::with_capacity(n.min(1024 * 1024));
        while body.len() < n {
            let part = self.take_some(n - body.len(), deadline).await?;
            body.extend_from_slice(&part);
        }
        Ok(body)
    }

    /// Reads one line ending in LF (CRLF or LF stripped), at most `max` bytes.
    async fn line(&mut self, max: usize, deadline: Instant) -> Result<Vec<u8>, BodyError> {
        let mut scanned = 0;
        loop {
            if let Some(i) = self.buf[scanned..].iter().position(|b| *b == b'\n') {
                let nl = scanned + i;
                if nl > max {
                    break;
                }
                let mut line: Vec<u8> = self.buf.drain(..=nl).collect();
                line.pop();
                if line.last() == Some(&b'\r') {
                    line.pop();
                }
                return Ok(line);
            }
            scanned = self.buf.len();
            if scanned > max {
                break;
            }
            self.fill(deadline).await?;
        }
        Err(BodyError::Bad(format!(
            "a chunk line or trailer is longer than {max} bytes"
        )))
    }

    /// Reads a chunked body, stopping as soon as it would pass `max` bytes.
    pub async fn read_chunked(
        &mut self,
        max: usize,
        deadline: Instant,
    ) -> Result<Vec<u8>, BodyError> {
        let mut body = Vec::new();
        loop {
            let line = self.line(MAX_CHUNK_LINE, deadline).await?;
            let size_part = line.split(|b| *b == b';').next().unwrap_or_default();
            let size = parse_hex(size_part.trim_ascii())
                .ok_or_else(|| BodyError::Bad("a chunk size is not hexadecimal".to_owned()))?;
            if size == 0 {
                let mut trailers = 0;
                loop {
                    let t = self.line(MAX_CHUNK_LINE, deadline).await?;
                    if t.is_empty() {
                        return Ok(body);
                    }
                    trailers += t.len();
                    if trailers > MAX_TRAILERS {
                        return Err(BodyError::Bad(format!(
                            "trailers longer than {MAX_TRAILERS} bytes"
                        )));
                    }
                }
            }
            let fits = usize::try_from(size)
                .ok()
                .and_then(|s| body.len().checked_add(s))
                .filter(|total| *total <= max);
            let Some(total) = fits else {
                return Err(BodyError::TooLarge);
            };
            while body.len() < total {
                let part = self.take_some(total - body.len(), deadline).await?;
                body.extend_from_slice(&part);
            }
            if !self.line(2, deadline).await?.is_empty() {
                return Err(BodyError::Bad("a chunk does not end in CRLF".to_owned()));
            }
        }
    }

    pub async fn write(&mut self, bytes: &[u8], within: Duration) -> io::Result<()> {
        match timeout(within, self.stream.write_all(bytes)).await {
            Ok(r) => r,
            Err(_) => Err(io::Error::new(io::ErrorKind::TimedOut, "write timed out")),
        }
    }

    /// Closes after an answer the peer must see although it may still be sending: stop
    /// writing, then read and drop what comes (bounded in bytes and time) so that closing
    /// does not reset the connection before the answer is read.
    pub async fn linger_close(mut self, within: Duration) {
        let _ = self.stream.shutdown().await;
        let deadline = Instant::now() + within;
        let mut drained = 0usize;
        let mut sink = vec![0u8; 16 * 1024];
        while drained < 1024 * 1024 {
            match timeout_at(deadline, self.stream.read(&mut sink)).await {
                Ok(Ok(n)) if n > 0 => drained += n,
                _ => break,
            }
        }
    }
}

fn too_large_head(limits: &Limits) -> HeadError {
    HeadError::Reject(
        431,
        format!(
            "the request head is larger than {} bytes",
            limits.max_head_bytes
        ),
    )
}

fn parse_hex(s: &[u8]) -> Option<u64> {
    if s.is_empty() || s.len() > 16 {
        return None;
    }
    let mut n: u64 = 0;
    for c in s {
        let d = (*c as char).to_digit(16)?;
        n = n.checked_mul(16)?.checked_add(u64::from(d))?;
    }
    Some(n)
}

pub(crate) fn reason(status: u16) -> &'static str {
    match status {
        100 => "Continue",
        200 => "OK",
        201 => "Created",
        202 => "Accepted",
        204 => "No Content",
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        408 => "Request Timeout",
        409 => "Conflict",
        411 => "Length Required",
        413 => "Content Too Large",
        422 => "Unprocessable Content",
        429 => "Too Many Requests",
        431 => "Request Header Fields Too Large",
        500 => "Internal Server Error",
        501 => "Not Implemented",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        504 => "Gateway Timeout",
        _ => "Status",
    }
}

/// An answer's bytes: status line, headers, `Content-Length`, `Connection`, body.
pub(crate) fn response(
    status: u16,
    headers: &[(String, String)],
    body: &[u8],
    close: bool,
    head_only: bool,
) -> Vec<u8> {
    let mut out = Vec::with_capacity(128 + body.len());
    out.extend_from_slice(format!("HTTP/1.1 {status} {}\r\n", reason(status)).as_bytes());
    for (name, value) in headers {
        let reserved = ["content-length", "transfer-encoding", "connection"]
            .iter()
            .any(|r| name.eq_ignore_ascii_case(r));
        let broken = name.is_empty()
            || !name.bytes().all(|b| b.is_ascii_graphic() && b != b':')
            || value.bytes().any(|b| b == b'\r' || b == b'\n');
        if reserved || broken {
            continue;
        }
        out.extend_from_slice(format!("{name}: {value}\r\n").as_bytes());
    }
    out.extend_from_slice(format!("Content-Length: {}\r\n", body.len()).as_bytes());
    if close {
        out.extend_from_slice(b"Connection: close\r\n");
    }
    out.extend_from_slice(b"\r\n");
    if !head_only {
        out.extend_from_slice(body);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_the_end_of_a_head() {
        assert_eq!(head_end(b"GET / HTTP/1.1\r\n\r\n", 0), Some(18));
        assert_eq!(head_end(b"GET / HTTP/1.1\n\n", 0), Some(16));
        assert_eq!(head_end(b"GET / HTTP/1.1\r\nA: b\r\n", 0), None);
    }

    #[test]
    fn parses_chunk_sizes() {
        assert_eq!(parse_hex(b"1a"), Some(26));
        assert_eq!(parse_hex(b"0"), Some(0));
        assert_eq!(parse_hex(b"x"), None);
        assert_eq!(parse_hex(b"ffffffffffffffffff"), None);
    }
}
