//! The HTTP/1.1 of the local API stand-ins (the Messages API's and the Responses
//! API's): one request read from a connection, bounded, and an answer written, the
//! connection closing after it.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;

/// One request as read: its line, its headers (names lowercased) and its body
/// (chunks decoded).
#[derive(Debug, Clone)]
pub struct RawRequest {
    /// `GET`, `POST`, ...
    pub method: String,
    /// The path with its query.
    pub path: String,
    /// The headers, names lowercased.
    pub headers: Vec<(String, String)>,
    /// The body's bytes.
    pub body: Vec<u8>,
}

impl RawRequest {
    /// A header's value.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}

fn bad(what: impl Into<String>) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::InvalidData, what.into())
}

/// Reads one request from `conn`: a head of at most `max_head` bytes and a body
/// (`content-length` or chunked) of at most `max_body`; an error names the bound.
pub fn read_request(
    conn: &TcpStream,
    max_head: usize,
    max_body: usize,
) -> std::io::Result<RawRequest> {
    let mut r = BufReader::new(conn.try_clone()?);
    let mut head = Vec::new();
    loop {
        let mut line = Vec::new();
        let n = (&mut r)
            .take(max_head as u64)
            .read_until(b'\n', &mut line)?;
        if n == 0 {
            return Err(bad("the connection closed in the request head"));
        }
        head.extend_from_slice(&line);
        if head.len() > max_head {
            return Err(bad(format!("the request head is over {max_head} bytes")));
        }
        if line == b"\r\n" || line == b"\n" {
            break;
        }
    }
    let text = String::from_utf8_lossy(&head).to_string();
    let mut lines = text.lines();
    let first = lines.next().unwrap_or_default();
    let mut parts = first.split_whitespace();
    let method = parts.next().unwrap_or_default().to_owned();
    let path = parts.next().unwrap_or_default().to_owned();
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    let mut req = RawRequest {
        method,
        path,
        headers,
        body: Vec::new(),
    };
    if req
        .header("transfer-encoding")
        .is_some_and(|v| v.eq_ignore_ascii_case("chunked"))
    {
        loop {
            let mut size = String::new();
            (&mut r).take(64).read_line(&mut size)?;
            let n = usize::from_str_radix(size.trim().split(';').next().unwrap_or(""), 16)
                .map_err(|_| bad(format!("a bad chunk size {size:?}")))?;
            if req.body.len() + n > max_body {
                return Err(bad(format!("the request body is over {max_body} bytes")));
            }
            let mut chunk = vec![0; n + 2];
            r.read_exact(&mut chunk)?;
            if n == 0 {
                break;
            }
            req.body.extend_from_slice(&chunk[..n]);
        }
    } else if let Some(len) = req.header("content-length") {
        let n: usize = len
            .parse()
            .map_err(|_| bad(format!("a bad content-length {len:?}")))?;
        if n > max_body {
            return Err(bad(format!("the request body is over {max_body} bytes")));
        }
        req.body.resize(n, 0);
        r.read_exact(&mut req.body)?;
    }
    Ok(req)
}

/// Writes an answer: `status`, `connection: close`, its length, `headers`, `body`.
pub fn respond<N: AsRef<str>, V: AsRef<str>>(
    conn: &mut TcpStream,
    status: u16,
    headers: &[(N, V)],
    body: &[u8],
) -> std::io::Result<()> {
    let mut out = format!(
        "HTTP/1.1 {status} X\r\nconnection: close\r\ncontent-length: {}\r\n",
        body.len()
    );
    for (n, v) in headers {
        out.push_str(&format!("{}: {}\r\n", n.as_ref(), v.as_ref()));
    }
    out.push_str("\r\n");
    conn.write_all(out.as_bytes())?;
    conn.write_all(body)?;
    conn.flush()
}
