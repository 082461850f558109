//! Slack for the system tests: Prism (`mock --dynamic --errors`, the install in
//! tests/github-api) over Slack's own Web API description (tests/slack-api), behind
//! an [`Adapter`] the package's `api_url` points at.
//!
//! Slack's description (2020) lists the token as a `token` header of each POST and a
//! `token` query parameter of each GET; Slack takes `Authorization: Bearer`, which is
//! what the package sends (docs/decisions.md, "Slack, first step (issue 42)"). The
//! adapter refuses a request without a bearer token, copies the token where the
//! description wants it, and forwards the request otherwise unchanged to Prism, which
//! validates it; Prism's 4xx answers are recorded as violations.

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use crate::github::{start_prism_with, Prism};
use crate::{io_err, parse_response, HANG};

/// The largest request the adapter reads.
pub const MAX_REQUEST_BYTES: usize = 4 * 1024 * 1024;

/// Slack's Web API description in tests/slack-api.
pub fn description_path() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("slack-api/slack_web_openapi_v2_without_examples.json")
}

/// Prism over Slack's description, on a free loopback port.
pub fn start_prism() -> Result<Prism, String> {
    start_prism_with(&description_path(), "mock --dynamic --errors", "")
}

/// One request the adapter handled.
#[derive(Debug, Clone, Default)]
pub struct Request {
    /// `GET`, `POST`.
    pub method: String,
    /// The request target, as the client sent it.
    pub target: String,
    /// Headers, names lowercased.
    pub headers: Vec<(String, String)>,
    /// The body.
    pub body: Vec<u8>,
    /// Prism's status.
    pub status: u16,
}

impl Request {
    /// The path, without the query.
    pub fn path(&self) -> &str {
        self.target.split('?').next().unwrap_or_default()
    }

    /// A form field of the body (a POST's) or the query (a GET's), decoded.
    pub fn field(&self, name: &str) -> Option<String> {
        let raw = if self.method == "GET" {
            self.target
                .split_once('?')
                .map(|(_, q)| q.to_string())
                .unwrap_or_default()
        } else {
            String::from_utf8_lossy(&self.body).into_owned()
        };
        oc_slack::intake::form_fields(&raw)
            .into_iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v)
    }

    /// A header (lowercase name).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

#[derive(Default)]
struct Shared {
    requests: Vec<Request>,
    violations: Vec<String>,
}

/// The adapter in front of Prism (see the module). Stops when dropped.
pub struct Adapter {
    /// Its base URL (the connection's `api_url`).
    pub url: String,
    shared: Arc<Mutex<Shared>>,
    stop: Arc<AtomicBool>,
    addr: SocketAddr,
}

impl Drop for Adapter {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        let _ = TcpStream::connect(self.addr);
    }
}

impl Adapter {
    /// An adapter in front of `prism`.
    pub fn start(prism: &Prism) -> std::io::Result<Adapter> {
        let listener = TcpListener::bind("127.0.0.1:0")?;
        let addr = listener.local_addr()?;
        let upstream: SocketAddr = prism
            .url
            .trim_start_matches("http://")
            .parse()
            .map_err(|e| io_err(format!("prism's url {}: {e}", prism.url)))?;
        let shared = Arc::new(Mutex::new(Shared::default()));
        let stop = Arc::new(AtomicBool::new(false));
        let (s, st) = (shared.clone(), stop.clone());
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                if st.load(Ordering::SeqCst) {
                    break;
                }
                let Ok(conn) = conn else { continue };
                let s = s.clone();
                std::thread::spawn(move || serve(conn, upstream, &s));
            }
        });
        Ok(Adapter {
            url: format!("http://{addr}"),
            shared,
            stop,
            addr,
        })
    }

    /// Every request handled so far, in order.
    pub fn requests(&self) -> Vec<Request> {
        self.shared
            .lock()
            .map(|s| s.requests.clone())
            .unwrap_or_default()
    }

    /// The requests refused (by the adapter or by Prism), each said in a line.
    pub fn violations(&self) -> Vec<String> {
        self.shared
            .lock()
            .map(|s| s.violations.clone())
            .unwrap_or_default()
    }
}

fn answer(conn: &mut TcpStream, status: u16, content_type: Option<&str>, body: &[u8]) {
    let mut head = format!(
        "HTTP/1.1 {status} X\r\nContent-Length: {}\r\nConnection: close\r\n",
        body.len()
    );
    if let Some(ct) = content_type {
        head.push_str(&format!("Content-Type: {ct}\r\n"));
    }
    head.push_str("\r\n");
    let _ = conn.write_all(head.as_bytes());
    let _ = conn.write_all(body);
}

fn serve(mut conn: TcpStream, upstream: SocketAddr, shared: &Mutex<Shared>) {
    let _ = conn.set_read_timeout(Some(HANG));
    let mut req = match read_request(&mut conn) {
        Ok(r) => r,
        Err(e) => {
            answer(&mut conn, 400, None, format!("adapter: {e}").as_bytes());
            return;
        }
    };
    let record = |req: Request, violation: Option<String>| {
        if let Ok(mut s) = shared.lock() {
            if let Some(v) = violation {
                s.violations.push(v);
            }
            s.requests.push(req);
        }
    };
    let Some(token) = req
        .header("authorization")
        .and_then(|a| a.strip_prefix("Bearer "))
        .map(str::to_string)
    else {
        let line = format!("{} {}: no Authorization: Bearer", req.method, req.path());
        req.status = 401;
        record(req, Some(line));
        answer(
            &mut conn,
            401,
            Some("application/json"),
            br#"{"ok":false,"error":"not_authed"}"#,
        );
        return;
    };
    match forward(upstream, &req, &token) {
        Ok((status, content_type, body)) => {
            let violation = (400..500).contains(&status).then(|| {
                format!(
                    "{} {}: prism answered {status}: {}",
                    req.method,
                    req.path(),
                    String::from_utf8_lossy(&body)
                )
            });
            req.status = status;
            record(req, violation);
            answer(&mut conn, status, content_type.as_deref(), &body);
        }
        Err(e) => {
            let line = format!("{} {}: prism: {e}", req.method, req.path());
            req.status = 502;
            record(req, Some(line));
            answer(&mut conn, 502, None, b"adapter: prism failed");
        }
    }
}

fn read_request(conn: &mut TcpStream) -> std::io::Result<Request> {
    let mut raw = Vec::new();
    let mut buf = [0u8; 8192];
    let head_end = loop {
        if let Some(p) = raw.windows(4).position(|w| w == b"\r\n\r\n") {
            break p;
        }
        if raw.len() > 64 * 1024 {
            return Err(io_err("the request head is over 64 KiB"));
        }
        let n = conn.read(&mut buf)?;
        if n == 0 {
            return Err(io_err("the connection closed within the head"));
        }
        raw.extend_from_slice(buf.get(..n).unwrap_or_default());
    };
    let head = String::from_utf8_lossy(raw.get(..head_end).unwrap_or_default()).into_owned();
    let mut lines = head.split("\r\n");
    let mut parts = lines.next().unwrap_or_default().split(' ');
    let method = parts.next().unwrap_or_default().to_string();
    let target = parts.next().unwrap_or_default().to_string();
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    let len: usize = headers
        .iter()
        .find(|(n, _)| n == "content-length")
        .and_then(|(_, v)| v.parse().ok())
        .unwrap_or(0);
    if len > MAX_REQUEST_BYTES {
        return Err(io_err(format!(
            "the body is over {MAX_REQUEST_BYTES} bytes"
        )));
    }
    let mut body = raw.get(head_end + 4..).unwrap_or_default().to_vec();
    while body.len() < len {
        let n = conn.read(&mut buf)?;
        if n == 0 {
            return Err(io_err("the body is cut short"));
        }
        body.extend_from_slice(buf.get(..n).unwrap_or_default());
    }
    body.truncate(len);
    Ok(Request {
        method,
        target,
        headers,
        body,
        status: 0,
    })
}

/// `req` sent on to Prism with `token` where the description wants it: Prism's
/// status, content type and (de-chunked) body.
fn forward(
    upstream: SocketAddr,
    req: &Request,
    token: &str,
) -> std::io::Result<(u16, Option<String>, Vec<u8>)> {
    let mut target = req.target.clone();
    let mut extra = String::new();
    if req.method == "GET" {
        let sep = if target.contains('?') { '&' } else { '?' };
        target = format!(
            "{target}{sep}token={}",
            oc_slack::api::percent_encode(token)
        );
    } else {
        extra = format!("token: {token}\r\n");
    }
    let mut s = TcpStream::connect(upstream)?;
    s.set_read_timeout(Some(HANG))?;
    let mut head = format!(
        "{} {target} HTTP/1.1\r\nHost: {upstream}\r\nConnection: close\r\nContent-Length: {}\r\n{extra}",
        req.method,
        req.body.len()
    );
    for (n, v) in &req.headers {
        if matches!(n.as_str(), "host" | "connection" | "content-length") {
            continue;
        }
        head.push_str(&format!("{n}: {v}\r\n"));
    }
    head.push_str("\r\n");
    let mut bytes = head.into_bytes();
    bytes.extend_from_slice(&req.body);
    s.write_all(&bytes)?;
    let _ = s.shutdown(Shutdown::Write);
    let mut raw = Vec::new();
    s.read_to_end(&mut raw)?;
    let resp = parse_response(&raw)?;
    let chunked = resp
        .header("transfer-encoding")
        .is_some_and(|v| v.eq_ignore_ascii_case("chunked"));
    let content_type = resp.header("content-type").map(str::to_string);
    let body = if chunked {
        dechunk(&resp.body)?
    } else {
        resp.body
    };
    Ok((resp.status, content_type, body))
}

fn dechunk(raw: &[u8]) -> std::io::Result<Vec<u8>> {
    let mut out = Vec::new();
    let mut rest = raw;
    loop {
        let end = rest
            .windows(2)
            .position(|w| w == b"\r\n")
            .ok_or_else(|| io_err("a chunk without its size line"))?;
        let line = String::from_utf8_lossy(rest.get(..end).unwrap_or_default()).into_owned();
        let size = usize::from_str_radix(line.split(';').next().unwrap_or("").trim(), 16)
            .map_err(|_| io_err(format!("bad chunk size {line:?}")))?;
        rest = rest.get(end + 2..).unwrap_or_default();
        if size == 0 {
            return Ok(out);
        }
        out.extend_from_slice(
            rest.get(..size)
                .ok_or_else(|| io_err("a chunk is cut short"))?,
        );
        rest = rest.get(size + 2..).unwrap_or_default();
    }
}
