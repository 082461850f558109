//! GitHub for the system tests: Prism over GitHub's own OpenAPI description, and a
//! validating, scriptable stand-in in front of it.
//!
//! [`start_prism`] runs Prism (`mock --dynamic --errors`) from tests/github-api
//! (`npm ci --prefix tests/github-api`): a request that does not fit the description
//! is answered 4xx with the violation, anything else with an answer generated from
//! the schemas. [`StandIn`] is what a package's `api_url` points at: every request
//! it gets is first forwarded to Prism; a 4xx from Prism is a violation, recorded
//! and answered to the client as it is; otherwise the test's handler answers (a
//! stateful closure over the request), or, when it does not take the request,
//! Prism's answer goes back. Scripted bodies take their shape from the description:
//! [`example`] reads one of its `components/examples`, and the test overrides the
//! fields its scenario needs.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use serde_json::Value;

use crate::{io_err, parse_response, HANG};

/// The largest request body the stand-in reads.
pub const MAX_REQUEST_BYTES: usize = 16 * 1024 * 1024;

/// True when the peers (node, Prism) must be there: `OC_REQUIRE_PEERS=1`.
pub fn required() -> bool {
    std::env::var("OC_REQUIRE_PEERS").is_ok_and(|v| v == "1")
}

/// tests/github-api.
pub fn api_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("github-api")
}

/// GitHub's OpenAPI description (api.github.com) in tests/github-api.
pub fn description_path() -> PathBuf {
    api_dir().join("node_modules/@octokit/openapi/generated/api.github.com.json")
}

/// A running Prism.
pub struct Prism {
    /// Its base URL.
    pub url: String,
    /// Its output, line by line.
    pub log: Arc<Mutex<Vec<String>>>,
    child: Child,
}

impl Drop for Prism {
    fn drop(&mut self) {
        // The wrapper kills Prism when its stdin closes.
        drop(self.child.stdin.take());
        let _ = self.child.wait();
    }
}

impl Prism {
    /// Its output so far.
    pub fn lines(&self) -> Vec<String> {
        self.log.lock().map(|l| l.clone()).unwrap_or_default()
    }
}

/// Start Prism on a free loopback port; `Err` says why it cannot run (no node, no
/// node_modules, or it did not start).
pub fn start_prism() -> Result<Prism, String> {
    start_prism_with(&description_path(), "mock --dynamic --errors", "")
}

/// Prism in validation proxy mode over the OpenAPI document `spec`, in front of
/// `upstream` (`http://127.0.0.1:PORT`): each request and answer is checked against
/// `spec`, a violation answered as an error and named in `sl-violations`.
pub fn start_prism_proxy(spec: &Path, upstream: &str) -> Result<Prism, String> {
    start_prism_with(spec, "proxy --errors", upstream)
}

/// Prism `mode` (`mock …`, `proxy …`) over `spec`, with `upstream` for a proxy.
pub fn start_prism_with(spec: &Path, mode: &str, upstream: &str) -> Result<Prism, String> {
    let bin = api_dir().join("node_modules/.bin/prism");
    let node = Command::new("node").arg("--version").output();
    if !node.is_ok_and(|o| o.status.success()) {
        return Err("node is not installed".into());
    }
    if !bin.exists() || !spec.exists() {
        return Err(format!(
            "{} has no node_modules (run npm ci --prefix tests/github-api)",
            api_dir().display()
        ));
    }
    let port = TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map_err(|e| e.to_string())?
        .port();
    let upstream = if upstream.is_empty() {
        String::new()
    } else {
        format!(" '{upstream}'")
    };
    let script = format!(
        "'{}' {mode} -h 127.0.0.1 -p {port} '{}'{upstream} 2>&1 & pid=$!; cat >/dev/null; kill $pid",
        bin.display(),
        spec.display()
    );
    let mut child = Command::new("sh")
        .arg("-c")
        .arg(script)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("starting prism: {e}"))?;
    let stdout = child.stdout.take().ok_or("no stdout")?;
    let log = Arc::new(Mutex::new(Vec::new()));
    let (tx, rx) = std::sync::mpsc::channel();
    let lines = log.clone();
    std::thread::spawn(move || {
        let mut ready = Some(tx);
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if line.contains("Prism is listening") {
                if let Some(tx) = ready.take() {
                    let _ = tx.send(true);
                }
            }
            if let Ok(mut l) = lines.lock() {
                l.push(line);
            }
        }
        if let Some(tx) = ready.take() {
            let _ = tx.send(false);
        }
    });
    let prism = Prism {
        url: format!("http://127.0.0.1:{port}"),
        log,
        child,
    };
    // Loading GitHub's description takes Prism a while (20-30 s, more on a busy host).
    match rx.recv_timeout(Duration::from_secs(300)) {
        Ok(true) => Ok(prism),
        _ => Err(format!(
            "prism did not start listening: {}",
            prism.lines().join("\n")
        )),
    }
}

/// Prism, or `None` after printing why the test is skipped (a failure instead under
/// `OC_REQUIRE_PEERS=1`).
pub fn prism_or_skip() -> Option<Prism> {
    match start_prism() {
        Ok(p) => Some(p),
        Err(why) => {
            assert!(!required(), "no Prism under OC_REQUIRE_PEERS=1: {why}");
            eprintln!("SKIPPED: {why}");
            None
        }
    }
}

/// The description, parsed once.
fn description() -> Result<&'static Value, String> {
    static DOC: OnceLock<Result<Value, String>> = OnceLock::new();
    DOC.get_or_init(|| {
        let raw = std::fs::read(description_path())
            .map_err(|e| format!("{}: {e}", description_path().display()))?;
        serde_json::from_slice(&raw).map_err(|e| format!("the description: {e}"))
    })
    .as_ref()
    .map_err(Clone::clone)
}

/// The value of the description's example `components/examples/<name>` (`hook`,
/// `hook-delivery-items`, `hook-delivery`, …).
pub fn example(name: &str) -> Result<Value, String> {
    description()?
        .pointer(&format!("/components/examples/{name}/value"))
        .cloned()
        .ok_or_else(|| format!("the description has no example {name}"))
}

/// One request the stand-in got.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    /// `GET`, `POST`, …
    pub method: String,
    /// The path with its query.
    pub target: String,
    /// The headers, names lowercased.
    pub headers: Vec<(String, String)>,
    /// The body.
    pub body: Vec<u8>,
}

impl Request {
    /// The path without its query.
    pub fn path(&self) -> &str {
        self.target.split('?').next().unwrap_or_default()
    }

    /// The value of query parameter `name`, as sent.
    pub fn query(&self, name: &str) -> Option<&str> {
        let q = self.target.split_once('?')?.1;
        q.split('&').find_map(|pair| {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            (k == name).then_some(v)
        })
    }

    /// The body as JSON (`null` when it is not).
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or(Value::Null)
    }

    /// True for a request that changes something (not GET or HEAD).
    pub fn is_write(&self) -> bool {
        !matches!(self.method.as_str(), "GET" | "HEAD")
    }
}

/// A scripted answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reply {
    /// The status.
    pub status: u16,
    /// Headers besides `Content-Length` and `Connection`.
    pub headers: Vec<(String, String)>,
    /// The body.
    pub body: Vec<u8>,
}

impl Reply {
    /// A JSON answer.
    pub fn json(status: u16, body: &Value) -> Reply {
        Reply {
            status,
            headers: vec![(
                "Content-Type".into(),
                "application/json; charset=utf-8".into(),
            )],
            body: body.to_string().into_bytes(),
        }
    }

    /// GitHub's error body (`message`, `documentation_url`) with `status`.
    pub fn error(status: u16, message: &str) -> Reply {
        Reply::json(
            status,
            &serde_json::json!({"message": message,
                "documentation_url": "https://docs.github.com/rest", "status": status.to_string()}),
        )
    }

    /// With one more header.
    pub fn header(mut self, name: &str, value: &str) -> Reply {
        self.headers.push((name.into(), value.into()));
        self
    }
}

/// A request as the stand-in handled it.
#[derive(Debug, Clone)]
pub struct Exchange {
    /// The request.
    pub request: Request,
    /// Prism's status for it.
    pub prism: u16,
    /// The status answered.
    pub status: u16,
}

/// The test's handler: `Some` answer for the requests it takes.
pub type Handler = Box<dyn FnMut(&Request) -> Option<Reply> + Send>;

#[derive(Default)]
struct Shared {
    exchanges: Vec<Exchange>,
    violations: Vec<String>,
}

/// The validating stand-in (see the module). Stops when dropped.
pub struct StandIn {
    /// Its base URL (the package's `api_url`).
    pub url: String,
    shared: Arc<Mutex<Shared>>,
    stop: Arc<AtomicBool>,
    addr: std::net::SocketAddr,
}

impl Drop for StandIn {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        let _ = TcpStream::connect(self.addr);
    }
}

impl StandIn {
    /// A stand-in in front of `prism` answering with `handler`.
    pub fn start(
        prism: &Prism,
        handler: impl FnMut(&Request) -> Option<Reply> + Send + 'static,
    ) -> std::io::Result<StandIn> {
        let listener = TcpListener::bind("127.0.0.1:0")?;
        let addr = listener.local_addr()?;
        let prism_addr: std::net::SocketAddr = prism
            .url
            .trim_start_matches("http://")
            .parse()
            .map_err(|e| io_err(format!("prism's url {}: {e}", prism.url)))?;
        let shared = Arc::new(Mutex::new(Shared::default()));
        let stop = Arc::new(AtomicBool::new(false));
        let handler: Arc<Mutex<Handler>> = Arc::new(Mutex::new(Box::new(handler)));
        let (s, st) = (shared.clone(), stop.clone());
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                if st.load(Ordering::SeqCst) {
                    break;
                }
                let Ok(conn) = conn else { continue };
                let (s, h) = (s.clone(), handler.clone());
                std::thread::spawn(move || serve(conn, prism_addr, &s, &h));
            }
        });
        Ok(StandIn {
            url: format!("http://{addr}"),
            shared,
            stop,
            addr,
        })
    }

    /// Every request handled so far, in order.
    pub fn exchanges(&self) -> Vec<Exchange> {
        self.shared
            .lock()
            .map(|s| s.exchanges.clone())
            .unwrap_or_default()
    }

    /// The requests Prism refused (method, target, Prism's status and answer).
    pub fn violations(&self) -> Vec<String> {
        self.shared
            .lock()
            .map(|s| s.violations.clone())
            .unwrap_or_default()
    }

    /// The handled requests that match `method` and whose path ends with `suffix`.
    pub fn requests(&self, method: &str, suffix: &str) -> Vec<Request> {
        self.exchanges()
            .into_iter()
            .map(|e| e.request)
            .filter(|r| r.method == method && r.path().ends_with(suffix))
            .collect()
    }

    /// The write requests (POST, PATCH, PUT, DELETE) handled so far.
    pub fn writes(&self) -> Vec<Request> {
        self.exchanges()
            .into_iter()
            .map(|e| e.request)
            .filter(Request::is_write)
            .collect()
    }
}

fn serve(
    mut conn: TcpStream,
    prism: std::net::SocketAddr,
    shared: &Mutex<Shared>,
    handler: &Mutex<Handler>,
) {
    let _ = conn.set_read_timeout(Some(HANG));
    let request = match read_request(&mut conn) {
        Ok(r) => r,
        Err(e) => {
            let _ = write_reply(&mut conn, &Reply::error(400, &format!("stand-in: {e}")));
            return;
        }
    };
    let forwarded = forward(prism, &request);
    let (reply, prism_status) = match forwarded {
        Err(e) => (Reply::error(502, &format!("stand-in: prism: {e}")), 502),
        Ok(p) if (400..500).contains(&p.status) => {
            if let Ok(mut s) = shared.lock() {
                s.violations.push(format!(
                    "{} {}: prism answered {}: {}",
                    request.method,
                    request.target,
                    p.status,
                    String::from_utf8_lossy(&p.body)
                ));
            }
            let status = p.status;
            (p, status)
        }
        Ok(p) => {
            let status = p.status;
            let scripted = match handler.lock() {
                Ok(mut h) => (*h)(&request),
                Err(_) => None,
            };
            (scripted.unwrap_or(p), status)
        }
    };
    if let Ok(mut s) = shared.lock() {
        s.exchanges.push(Exchange {
            request,
            prism: prism_status,
            status: reply.status,
        });
    }
    let _ = write_reply(&mut conn, &reply);
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
            return Err(io_err(
                "the connection closed before the request head ended",
            ));
        }
        raw.extend_from_slice(buf.get(..n).unwrap_or_default());
    };
    let head = String::from_utf8_lossy(raw.get(..head_end).unwrap_or_default()).into_owned();
    let mut lines = head.split("\r\n");
    let line = lines.next().unwrap_or_default();
    let mut parts = line.split(' ');
    let method = parts.next().unwrap_or_default().to_string();
    let target = parts.next().unwrap_or_default().to_string();
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    let find = |name: &str| {
        headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.clone())
    };
    let mut body = raw.get(head_end + 4..).unwrap_or_default().to_vec();
    if find("transfer-encoding").is_some_and(|v| v.eq_ignore_ascii_case("chunked")) {
        // Read to the last chunk, then decode.
        while !body.windows(5).any(|w| w == b"0\r\n\r\n") {
            if body.len() > MAX_REQUEST_BYTES {
                return Err(io_err(format!(
                    "the body is over {MAX_REQUEST_BYTES} bytes"
                )));
            }
            let n = conn.read(&mut buf)?;
            if n == 0 {
                break;
            }
            body.extend_from_slice(buf.get(..n).unwrap_or_default());
        }
        body = dechunk(&body)?;
    } else {
        let len: usize = find("content-length")
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        if len > MAX_REQUEST_BYTES {
            return Err(io_err(format!(
                "the body is over {MAX_REQUEST_BYTES} bytes"
            )));
        }
        while body.len() < len {
            let n = conn.read(&mut buf)?;
            if n == 0 {
                return Err(io_err("the body is cut short"));
            }
            body.extend_from_slice(buf.get(..n).unwrap_or_default());
        }
        body.truncate(len);
    }
    Ok(Request {
        method,
        target,
        headers,
        body,
    })
}

fn dechunk(raw: &[u8]) -> std::io::Result<Vec<u8>> {
    let mut out = Vec::new();
    let mut rest = raw;
    loop {
        let end = rest
            .windows(2)
            .position(|w| w == b"\r\n")
            .ok_or_else(|| io_err("a chunk without its size line"))?;
        let size_line = String::from_utf8_lossy(rest.get(..end).unwrap_or_default()).into_owned();
        let size = usize::from_str_radix(size_line.split(';').next().unwrap_or("").trim(), 16)
            .map_err(|_| io_err(format!("bad chunk size {size_line:?}")))?;
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

/// The request sent on to Prism as it came (its own `Host`, one connection).
fn forward(prism: std::net::SocketAddr, r: &Request) -> std::io::Result<Reply> {
    let mut s = TcpStream::connect(prism)?;
    s.set_read_timeout(Some(HANG))?;
    let mut head = format!(
        "{} {} HTTP/1.1\r\nHost: {prism}\r\nConnection: close\r\nContent-Length: {}\r\n",
        r.method,
        r.target,
        r.body.len()
    );
    for (n, v) in &r.headers {
        if matches!(
            n.as_str(),
            "host" | "connection" | "content-length" | "transfer-encoding" | "if-none-match"
        ) {
            continue;
        }
        head.push_str(&format!("{n}: {v}\r\n"));
    }
    head.push_str("\r\n");
    let mut bytes = head.into_bytes();
    bytes.extend_from_slice(&r.body);
    s.write_all(&bytes)?;
    let _ = s.shutdown(Shutdown::Write);
    let mut raw = Vec::new();
    s.read_to_end(&mut raw)?;
    let resp = parse_response(&raw)?;
    let body = if resp
        .header("transfer-encoding")
        .is_some_and(|v| v.eq_ignore_ascii_case("chunked"))
    {
        dechunk(&resp.body)?
    } else {
        resp.body
    };
    Ok(Reply {
        status: resp.status,
        headers: resp
            .headers
            .into_iter()
            .filter(|(n, _)| {
                !matches!(
                    n.as_str(),
                    "content-length" | "connection" | "transfer-encoding" | "keep-alive"
                )
            })
            .collect(),
        body,
    })
}

fn write_reply(conn: &mut TcpStream, reply: &Reply) -> std::io::Result<()> {
    let mut head = format!(
        "HTTP/1.1 {} {}\r\nConnection: close\r\nContent-Length: {}\r\n",
        reply.status,
        reason(reply.status),
        reply.body.len()
    );
    for (n, v) in &reply.headers {
        head.push_str(&format!("{n}: {v}\r\n"));
    }
    head.push_str("\r\n");
    conn.write_all(head.as_bytes())?;
    conn.write_all(&reply.body)?;
    conn.flush()
}

fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        201 => "Created",
        204 => "No Content",
        304 => "Not Modified",
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        422 => "Unprocessable Entity",
        502 => "Bad Gateway",
        _ => "Status",
    }
}
