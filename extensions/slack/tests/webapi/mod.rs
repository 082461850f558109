//! Slack's Web API for the tests: Prism (`mock --dynamic --errors`, from
//! tests/github-api) over Slack's own OpenAPI description (tests/slack-api), behind
//! a small adapter, and a scripted stand-in for what Prism cannot answer (`ok:
//! false` errors, 429s).
//!
//! The adapter does one thing: Slack's description (2020) lists the token as a
//! `token` header of every POST and a `token` query parameter of every GET, where
//! Slack takes (and the package sends) `Authorization: Bearer`. The adapter refuses
//! a request without that header (recorded as a violation), copies its token where
//! the description wants it, and forwards the request to Prism unchanged otherwise;
//! Prism's 4xx is recorded as a violation with its `sl-violations`.

#![allow(dead_code, clippy::unwrap_used)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

const HANG: Duration = Duration::from_secs(60);

/// True under `OC_REQUIRE_PEERS=1`.
pub fn required() -> bool {
    std::env::var("OC_REQUIRE_PEERS").is_ok_and(|v| v == "1")
}

fn repo_tests() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests")
}

/// Slack's Web API description.
pub fn description() -> PathBuf {
    repo_tests().join("slack-api/slack_web_openapi_v2_without_examples.json")
}

/// A running Prism; dies with the test process (its wrapper kills it when our end
/// of its stdin closes).
pub struct Prism {
    /// `127.0.0.1:PORT`.
    pub addr: String,
    /// Its output.
    pub log: Arc<Mutex<Vec<String>>>,
    _child: Mutex<Child>,
}

/// The one Prism of this test binary, started on first use; `Err` says why there
/// is none.
pub fn prism() -> Result<&'static Prism, String> {
    static PRISM: OnceLock<Result<Prism, String>> = OnceLock::new();
    PRISM
        .get_or_init(start_prism)
        .as_ref()
        .map_err(Clone::clone)
}

/// Prism, or `None` after printing why the test is skipped (a failure under
/// `OC_REQUIRE_PEERS=1`).
pub fn prism_or_skip() -> Option<&'static Prism> {
    match prism() {
        Ok(p) => Some(p),
        Err(why) => {
            assert!(!required(), "no Prism under OC_REQUIRE_PEERS=1: {why}");
            eprintln!("SKIPPED: {why}");
            None
        }
    }
}

fn start_prism() -> Result<Prism, String> {
    let bin = repo_tests().join("github-api/node_modules/.bin/prism");
    let spec = description();
    let node = Command::new("node").arg("--version").output();
    if !node.is_ok_and(|o| o.status.success()) {
        return Err("node is not installed".into());
    }
    if !bin.exists() {
        return Err(
            "tests/github-api has no node_modules (run npm ci --prefix tests/github-api)".into(),
        );
    }
    if !spec.exists() {
        return Err(format!("{} is missing", spec.display()));
    }
    let port = TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map_err(|e| e.to_string())?
        .port();
    let script = format!(
        "'{}' mock --dynamic --errors -h 127.0.0.1 -p {port} '{}' 2>&1 & pid=$!; cat >/dev/null; kill $pid",
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
            lines.lock().unwrap().push(line);
        }
        if let Some(tx) = ready.take() {
            let _ = tx.send(false);
        }
    });
    match rx.recv_timeout(Duration::from_secs(300)) {
        Ok(true) => Ok(Prism {
            addr: format!("127.0.0.1:{port}"),
            log,
            _child: Mutex::new(child),
        }),
        _ => {
            let _ = child.kill();
            Err(format!(
                "prism did not start listening: {}",
                log.lock().unwrap().join("\n")
            ))
        }
    }
}

/// One HTTP request as read off a socket.
#[derive(Debug, Clone, Default)]
pub struct Request {
    /// `GET`, `POST`.
    pub method: String,
    /// The request target (path and query).
    pub target: String,
    /// Headers, names lowercased.
    pub headers: Vec<(String, String)>,
    /// The body.
    pub body: Vec<u8>,
}

impl Request {
    /// The first value of a header (lowercase name).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    /// The path, without the query.
    pub fn path(&self) -> &str {
        self.target.split('?').next().unwrap_or_default()
    }

    /// The form fields of the body, or of the query for a GET.
    pub fn fields(&self) -> Vec<(String, String)> {
        let raw = if self.method == "GET" {
            self.target
                .split_once('?')
                .map(|(_, q)| q.to_string())
                .unwrap_or_default()
        } else {
            String::from_utf8_lossy(&self.body).into_owned()
        };
        oc_slack::intake::form_fields(&raw)
    }

    /// One form field.
    pub fn field(&self, name: &str) -> Option<String> {
        self.fields()
            .into_iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v)
    }
}

/// Reads one request (Content-Length bodies only: what the client sends).
pub fn read_request(conn: &mut TcpStream) -> std::io::Result<Request> {
    conn.set_read_timeout(Some(HANG))?;
    let mut reader = BufReader::new(conn.try_clone()?);
    let mut line = String::new();
    reader.read_line(&mut line)?;
    let mut parts = line.split_whitespace();
    let method = parts.next().unwrap_or_default().to_string();
    let target = parts.next().unwrap_or_default().to_string();
    let mut headers = Vec::new();
    loop {
        let mut h = String::new();
        reader.read_line(&mut h)?;
        let h = h.trim_end();
        if h.is_empty() {
            break;
        }
        if let Some((n, v)) = h.split_once(':') {
            headers.push((n.trim().to_ascii_lowercase(), v.trim().to_string()));
        }
    }
    let len: usize = headers
        .iter()
        .find(|(n, _)| n == "content-length")
        .and_then(|(_, v)| v.parse().ok())
        .unwrap_or(0);
    let mut body = vec![0; len.min(16 * 1024 * 1024)];
    reader.read_exact(&mut body)?;
    Ok(Request {
        method,
        target,
        headers,
        body,
    })
}

/// Writes an answer and closes.
pub fn write_answer(conn: &mut TcpStream, status: u16, headers: &[(&str, String)], body: &[u8]) {
    let mut head = format!(
        "HTTP/1.1 {status} X\r\nContent-Length: {}\r\nConnection: close\r\n",
        body.len()
    );
    for (n, v) in headers {
        head.push_str(&format!("{n}: {v}\r\n"));
    }
    head.push_str("\r\n");
    let _ = conn.write_all(head.as_bytes());
    let _ = conn.write_all(body);
}

/// What the adapter saw: each request, Prism's status, and the violations.
#[derive(Debug, Clone, Default)]
pub struct Seen {
    /// (request, Prism's status).
    pub exchanges: Vec<(Request, u16)>,
    /// Requests refused: by the adapter (no bearer token) or by Prism (4xx).
    pub violations: Vec<String>,
}

/// The adapter in front of Prism (see the module); its URL is the client's api_url.
pub struct Adapter {
    /// `http://127.0.0.1:PORT`.
    pub url: String,
    /// What it saw.
    pub seen: Arc<Mutex<Seen>>,
}

impl Adapter {
    /// An adapter in front of `prism`.
    pub fn start(prism: &Prism) -> Adapter {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let seen = Arc::new(Mutex::new(Seen::default()));
        let log = seen.clone();
        let upstream = prism.addr.clone();
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                let Ok(mut conn) = conn else { break };
                let (log, upstream) = (log.clone(), upstream.clone());
                std::thread::spawn(move || {
                    let Ok(req) = read_request(&mut conn) else {
                        return;
                    };
                    let token = req
                        .header("authorization")
                        .and_then(|a| a.strip_prefix("Bearer "))
                        .map(str::to_string);
                    let Some(token) = token else {
                        log.lock().unwrap().violations.push(format!(
                            "{} {}: no Authorization: Bearer header",
                            req.method, req.target
                        ));
                        write_answer(
                            &mut conn,
                            401,
                            &[],
                            b"{\"ok\":false,\"error\":\"not_authed\"}",
                        );
                        return;
                    };
                    let (status, headers, body) = forward(&upstream, &req, &token);
                    let mut seen = log.lock().unwrap();
                    if (400..500).contains(&status) {
                        let violations = headers
                            .iter()
                            .find(|(n, _)| n == "sl-violations")
                            .map(|(_, v)| v.clone())
                            .unwrap_or_default();
                        seen.violations.push(format!(
                            "{} {}: prism answered {status}: {violations}",
                            req.method,
                            req.path()
                        ));
                    }
                    seen.exchanges.push((req, status));
                    drop(seen);
                    let ct: Vec<(&str, String)> = headers
                        .iter()
                        .filter(|(n, _)| n == "content-type" || n == "retry-after")
                        .map(|(n, v)| (n.as_str(), v.clone()))
                        .collect();
                    write_answer(&mut conn, status, &ct, &body);
                });
            }
        });
        Adapter { url, seen }
    }

    /// What it saw so far.
    pub fn seen(&self) -> Seen {
        self.seen.lock().unwrap().clone()
    }
}

/// `req` sent on to Prism with the token where the description wants it.
fn forward(upstream: &str, req: &Request, token: &str) -> (u16, Vec<(String, String)>, Vec<u8>) {
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
    let mut s = TcpStream::connect(upstream).unwrap();
    s.set_read_timeout(Some(HANG)).unwrap();
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
    s.write_all(head.as_bytes()).unwrap();
    s.write_all(&req.body).unwrap();
    let mut raw = Vec::new();
    let _ = s.read_to_end(&mut raw);
    parse_response(&raw)
}

fn parse_response(raw: &[u8]) -> (u16, Vec<(String, String)>, Vec<u8>) {
    let end = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .unwrap_or(raw.len());
    let head = String::from_utf8_lossy(&raw[..end]).into_owned();
    let mut lines = head.split("\r\n");
    let status = lines
        .next()
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|s| s.parse().ok())
        .unwrap_or(502);
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    let mut body = raw.get(end + 4..).unwrap_or_default().to_vec();
    if headers
        .iter()
        .any(|(n, v)| n == "transfer-encoding" && v.eq_ignore_ascii_case("chunked"))
    {
        body = dechunk(&body);
    }
    (status, headers, body)
}

fn dechunk(mut rest: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    while let Some(end) = rest.windows(2).position(|w| w == b"\r\n") {
        let size = usize::from_str_radix(
            String::from_utf8_lossy(&rest[..end])
                .split(';')
                .next()
                .unwrap_or("")
                .trim(),
            16,
        )
        .unwrap_or(0);
        rest = &rest[end + 2..];
        if size == 0 || rest.len() < size {
            break;
        }
        out.extend_from_slice(&rest[..size]);
        rest = rest.get(size + 2..).unwrap_or_default();
    }
    out
}

/// A scripted stand-in: each request is recorded and answered by `answer`
/// (status, headers, JSON body).
pub struct StandIn {
    /// `http://127.0.0.1:PORT`.
    pub url: String,
    /// The requests so far.
    pub requests: Arc<Mutex<Vec<Request>>>,
}

impl StandIn {
    /// A stand-in answering with `answer(n, request)` (`n` counts from 1).
    pub fn start(
        answer: impl Fn(usize, &Request) -> (u16, Vec<(&'static str, String)>, String)
            + Send
            + Sync
            + 'static,
    ) -> StandIn {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let requests = Arc::new(Mutex::new(Vec::new()));
        let log = requests.clone();
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                let Ok(mut conn) = conn else { break };
                let Ok(req) = read_request(&mut conn) else {
                    continue;
                };
                let n = {
                    let mut l = log.lock().unwrap();
                    l.push(req.clone());
                    l.len()
                };
                let (status, mut headers, body) = answer(n, &req);
                headers.push(("Content-Type", "application/json; charset=utf-8".into()));
                write_answer(&mut conn, status, &headers, body.as_bytes());
            }
        });
        StandIn { url, requests }
    }

    /// The requests so far.
    pub fn requests(&self) -> Vec<Request> {
        self.requests.lock().unwrap().clone()
    }
}
