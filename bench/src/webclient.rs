//! A small HTTP/1.1 client for `bench web`: keep-alive GETs with a bearer token,
//! bodies by length or chunked, and the chunk decoder the live streams use too.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};

use std::time::Duration;

/// How long anything may take before the bench gives up.
pub const HANG: Duration = Duration::from_secs(60);

/// Takes the complete chunks of a chunked body off the front of `buf` into `out`:
/// `true` once the last (empty) chunk was read.
pub fn dechunk(buf: &mut Vec<u8>, out: &mut Vec<u8>) -> Result<bool, String> {
    loop {
        let Some(eol) = buf.windows(2).position(|w| w == b"\r\n") else {
            return Ok(false);
        };
        let line = String::from_utf8_lossy(&buf[..eol]);
        let size = usize::from_str_radix(line.split(';').next().unwrap_or("").trim(), 16)
            .map_err(|_| format!("bad chunk size line {line:?}"))?;
        if buf.len() < eol + 2 + size + 2 {
            return Ok(false);
        }
        out.extend_from_slice(&buf[eol + 2..eol + 2 + size]);
        buf.drain(..eol + 2 + size + 2);
        if size == 0 {
            return Ok(true);
        }
    }
}

/// The head of an answer: its status, `Content-Length`, whether chunked, whether the
/// server closes the connection after it.
pub struct Head {
    pub status: u16,
    pub length: Option<usize>,
    pub chunked: bool,
    pub close: bool,
}

pub fn parse_head(head: &str) -> Result<Head, String> {
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| format!("bad status line in {head:?}"))?;
    let mut h = Head {
        status,
        length: None,
        chunked: false,
        close: false,
    };
    for l in head.lines().skip(1) {
        let Some((n, v)) = l.split_once(':') else {
            continue;
        };
        let (n, v) = (n.trim().to_ascii_lowercase(), v.trim().to_ascii_lowercase());
        match n.as_str() {
            "content-length" => h.length = v.parse().ok(),
            "transfer-encoding" => h.chunked = v.contains("chunked"),
            "connection" => h.close = v.contains("close"),
            _ => {}
        }
    }
    Ok(h)
}

/// One keep-alive HTTP/1.1 connection, as a script's client keeps it.
pub struct Client {
    addr: SocketAddr,
    auth: String,
    s: Option<TcpStream>,
    buf: Vec<u8>,
}

impl Client {
    pub fn new(addr: SocketAddr, token: &str) -> Client {
        Client {
            addr,
            auth: format!("Bearer {token}"),
            s: None,
            buf: Vec::new(),
        }
    }

    pub fn fill(s: &mut TcpStream, buf: &mut Vec<u8>) -> Result<(), String> {
        let mut chunk = [0u8; 16384];
        match s.read(&mut chunk) {
            Ok(0) => Err("the connection closed mid-answer".into()),
            Ok(n) => {
                buf.extend_from_slice(&chunk[..n]);
                Ok(())
            }
            Err(e) => Err(e.to_string()),
        }
    }

    /// `GET path`: the status and the body.
    pub fn get(&mut self, path: &str) -> Result<(u16, Vec<u8>), String> {
        if self.s.is_none() {
            let s = TcpStream::connect(self.addr).map_err(|e| e.to_string())?;
            s.set_nodelay(true).map_err(|e| e.to_string())?;
            s.set_read_timeout(Some(HANG)).map_err(|e| e.to_string())?;
            self.s = Some(s);
            self.buf.clear();
        }
        let Some(s) = self.s.as_mut() else {
            return Err("no connection".into());
        };
        let req = format!(
            "GET {path} HTTP/1.1\r\nHost: {}\r\nAuthorization: {}\r\n\r\n",
            self.addr, self.auth
        );
        s.write_all(req.as_bytes()).map_err(|e| e.to_string())?;
        let buf = &mut self.buf;
        let end = loop {
            if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                break end;
            }
            Client::fill(s, buf)?;
        };
        let head = parse_head(&String::from_utf8_lossy(&buf[..end]))?;
        buf.drain(..end + 4);
        let mut body = Vec::new();
        if head.chunked {
            while !dechunk(buf, &mut body)? {
                Client::fill(s, buf)?;
            }
        } else {
            let len = head.length.ok_or("an answer without a length")?;
            while buf.len() < len {
                Client::fill(s, buf)?;
            }
            body.extend(buf.drain(..len));
        }
        if head.close {
            self.s = None;
        }
        Ok((head.status, body))
    }
}
