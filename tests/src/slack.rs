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

// ---------------------------------------------------------------------------
// A Slack stand-in for Socket Mode and the doctor: `apps.connections.open` and
// `auth.test` over HTTP (no published description of the first: Slack's is from
// 2020, docs/decisions.md), and a WebSocket server (RFC 6455, written here: the
// handshake's SHA-1 and base64, unmasked text frames out, masked frames in) that
// speaks the Socket Mode envelope protocol as Slack's SDKs' mock servers do: `hello`
// on connect, envelopes, `{"envelope_id"}` acks, `disconnect`.

/// SHA-1 (FIPS 180-4), for the WebSocket handshake only.
pub fn sha1(data: &[u8]) -> [u8; 20] {
    let mut h: [u32; 5] = [
        0x6745_2301,
        0xEFCD_AB89,
        0x98BA_DCFE,
        0x1032_5476,
        0xC3D2_E1F0,
    ];
    let mut msg = data.to_vec();
    let bits = (data.len() as u64).wrapping_mul(8);
    msg.push(0x80);
    while msg.len() % 64 != 56 {
        msg.push(0);
    }
    msg.extend_from_slice(&bits.to_be_bytes());
    for chunk in msg.chunks(64) {
        let mut w = [0u32; 80];
        for (i, word) in chunk.chunks(4).enumerate().take(16) {
            w[i] = u32::from_be_bytes([word[0], word[1], word[2], word[3]]);
        }
        for i in 16..80 {
            w[i] = (w[i - 3] ^ w[i - 8] ^ w[i - 14] ^ w[i - 16]).rotate_left(1);
        }
        let [mut a, mut b, mut c, mut d, mut e] = h;
        for (i, wi) in w.iter().enumerate() {
            let (f, k) = match i {
                0..=19 => ((b & c) | (!b & d), 0x5A82_7999),
                20..=39 => (b ^ c ^ d, 0x6ED9_EBA1),
                40..=59 => ((b & c) | (b & d) | (c & d), 0x8F1B_BCDC),
                _ => (b ^ c ^ d, 0xCA62_C1D6),
            };
            let t = a
                .rotate_left(5)
                .wrapping_add(f)
                .wrapping_add(e)
                .wrapping_add(k)
                .wrapping_add(*wi);
            e = d;
            d = c;
            c = b.rotate_left(30);
            b = a;
            a = t;
        }
        for (x, y) in h.iter_mut().zip([a, b, c, d, e]) {
            *x = x.wrapping_add(y);
        }
    }
    let mut out = [0u8; 20];
    for (i, x) in h.iter().enumerate() {
        out[i * 4..i * 4 + 4].copy_from_slice(&x.to_be_bytes());
    }
    out
}

/// Standard base64 with padding.
pub fn base64(data: &[u8]) -> String {
    const T: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for c in data.chunks(3) {
        let n = (u32::from(c[0]) << 16)
            | (u32::from(*c.get(1).unwrap_or(&0)) << 8)
            | u32::from(*c.get(2).unwrap_or(&0));
        for (i, shift) in [18, 12, 6, 0].into_iter().enumerate() {
            if i <= c.len() {
                out.push(char::from(T[((n >> shift) & 63) as usize]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// One WebSocket connection the package opened to the stand-in.
pub struct WsConn {
    /// Its number, from 1 in the order the connections came.
    pub number: usize,
    writer: Mutex<TcpStream>,
    closed: AtomicBool,
}

impl WsConn {
    fn frame(&self, opcode: u8, payload: &[u8]) -> std::io::Result<()> {
        let mut f = vec![0x80 | opcode];
        match payload.len() {
            n if n < 126 => f.push(n as u8),
            n if n <= 0xFFFF => {
                f.push(126);
                f.extend_from_slice(&(n as u16).to_be_bytes());
            }
            n => {
                f.push(127);
                f.extend_from_slice(&(n as u64).to_be_bytes());
            }
        }
        f.extend_from_slice(payload);
        let mut w = self
            .writer
            .lock()
            .map_err(|_| io_err("the writer is poisoned"))?;
        w.write_all(&f)
    }

    /// Sends a text message (an envelope, `hello`, `disconnect`).
    pub fn send(&self, text: &str) -> std::io::Result<()> {
        self.frame(1, text.as_bytes())
    }

    /// Drops the TCP connection, without a close frame.
    pub fn drop_connection(&self) {
        self.closed.store(true, Ordering::SeqCst);
        if let Ok(w) = self.writer.lock() {
            let _ = w.shutdown(Shutdown::Both);
        }
    }

    /// Whether the connection ended.
    pub fn is_closed(&self) -> bool {
        self.closed.load(Ordering::SeqCst)
    }
}

type AckHook = Arc<dyn Fn(&str) -> String + Send + Sync>;

#[derive(Default)]
struct SockState {
    conns: Vec<Arc<WsConn>>,
    /// (envelope ID, connection number, what the hook said when the ack was read).
    acks: Vec<(String, usize, String)>,
    opens: usize,
    refuse_open: bool,
}

struct SockShared {
    state: Mutex<SockState>,
    changed: std::sync::Condvar,
    hook: Mutex<Option<AckHook>>,
    bot_token: String,
    app_token: String,
    addr: SocketAddr,
}

/// The Socket Mode and doctor stand-in (see above). Stops accepting when dropped.
pub struct SocketSlack {
    /// The connection's `api_url`.
    pub api_url: String,
    shared: Arc<SockShared>,
    stop: Arc<AtomicBool>,
}

impl Drop for SocketSlack {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        let _ = TcpStream::connect(self.shared.addr);
        for c in self.connections() {
            c.drop_connection();
        }
    }
}

impl SocketSlack {
    /// A stand-in that takes `bot_token` for `auth.test` and `app_token` for
    /// `apps.connections.open`, on a free loopback port.
    pub fn start(bot_token: &str, app_token: &str) -> std::io::Result<SocketSlack> {
        let listener = TcpListener::bind("127.0.0.1:0")?;
        let addr = listener.local_addr()?;
        let shared = Arc::new(SockShared {
            state: Mutex::new(SockState::default()),
            changed: std::sync::Condvar::new(),
            hook: Mutex::new(None),
            bot_token: bot_token.to_string(),
            app_token: app_token.to_string(),
            addr,
        });
        let stop = Arc::new(AtomicBool::new(false));
        let (s, st) = (shared.clone(), stop.clone());
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                if st.load(Ordering::SeqCst) {
                    break;
                }
                let Ok(conn) = conn else { continue };
                let s = s.clone();
                std::thread::spawn(move || sock_serve(conn, &s));
            }
        });
        Ok(SocketSlack {
            api_url: format!("http://{addr}"),
            shared,
            stop,
        })
    }

    /// Runs `hook(envelope_id)` when an ack is read, before the next frame is:
    /// what it answers is kept with the ack ([`SocketSlack::acks`]).
    pub fn on_ack(&self, hook: impl Fn(&str) -> String + Send + Sync + 'static) {
        if let Ok(mut h) = self.shared.hook.lock() {
            *h = Some(Arc::new(hook));
        }
    }

    /// While set, `apps.connections.open` answers `invalid_auth`.
    pub fn refuse_open(&self, refuse: bool) {
        if let Ok(mut s) = self.shared.state.lock() {
            s.refuse_open = refuse;
        }
    }

    /// Every connection so far.
    pub fn connections(&self) -> Vec<Arc<WsConn>> {
        self.shared
            .state
            .lock()
            .map(|s| s.conns.clone())
            .unwrap_or_default()
    }

    /// How many times `apps.connections.open` was called.
    pub fn opens(&self) -> usize {
        self.shared.state.lock().map(|s| s.opens).unwrap_or(0)
    }

    /// Every ack: (envelope ID, connection number, what the hook said).
    pub fn acks(&self) -> Vec<(String, usize, String)> {
        self.shared
            .state
            .lock()
            .map(|s| s.acks.clone())
            .unwrap_or_default()
    }

    fn wait<T>(&self, what: &str, f: impl Fn(&SockState) -> Option<T>) -> Result<T, String> {
        let deadline = std::time::Instant::now() + HANG;
        let mut s = self
            .shared
            .state
            .lock()
            .map_err(|_| "poisoned".to_string())?;
        loop {
            if let Some(v) = f(&s) {
                return Ok(v);
            }
            let now = std::time::Instant::now();
            if now >= deadline {
                return Err(format!("{what}: nothing within {HANG:?}"));
            }
            s = self
                .shared
                .changed
                .wait_timeout(s, deadline - now)
                .map_err(|_| "poisoned".to_string())?
                .0;
        }
    }

    /// The `n`th connection (from 1), once the package opened it (`hello` sent).
    pub fn connection(&self, n: usize) -> Result<Arc<WsConn>, String> {
        self.wait(&format!("connection {n}"), |s| s.conns.get(n - 1).cloned())
    }

    /// The ack of `envelope_id`, once read: (connection number, what the hook said).
    pub fn ack_of(&self, envelope_id: &str) -> Result<(usize, String), String> {
        self.wait(&format!("the ack of {envelope_id}"), |s| {
            s.acks
                .iter()
                .find(|(id, _, _)| id == envelope_id)
                .map(|(_, n, h)| (*n, h.clone()))
        })
    }
}

fn json_answer(conn: &mut TcpStream, body: &serde_json::Value) {
    answer(
        conn,
        200,
        Some("application/json"),
        body.to_string().as_bytes(),
    );
}

fn sock_serve(mut conn: TcpStream, shared: &Arc<SockShared>) {
    let _ = conn.set_read_timeout(Some(HANG));
    let Ok(req) = read_request(&mut conn) else {
        return;
    };
    let bearer = req
        .header("authorization")
        .and_then(|a| a.strip_prefix("Bearer "))
        .unwrap_or_default()
        .to_string();
    match (req.method.as_str(), req.path()) {
        ("POST", "/apps.connections.open") => {
            let refuse = {
                let Ok(mut s) = shared.state.lock() else {
                    return;
                };
                s.opens += 1;
                s.refuse_open
            };
            if refuse || bearer != shared.app_token {
                json_answer(
                    &mut conn,
                    &serde_json::json!({"ok": false, "error": "invalid_auth"}),
                );
                return;
            }
            let url = format!("ws://{}/link/?ticket=t-{}", shared.addr, bearer.len());
            json_answer(&mut conn, &serde_json::json!({"ok": true, "url": url}));
        }
        ("GET", "/auth.test") => {
            if bearer != shared.bot_token {
                json_answer(
                    &mut conn,
                    &serde_json::json!({"ok": false, "error": "invalid_auth"}),
                );
                return;
            }
            json_answer(
                &mut conn,
                &serde_json::json!({"ok": true, "url": "https://acme.slack.com/", "team": "Acme",
                                    "user": "conduit", "team_id": "T111", "user_id": "U111",
                                    "bot_id": "B111"}),
            );
        }
        ("GET", "/link/") => websocket(conn, &req, shared),
        _ => json_answer(
            &mut conn,
            &serde_json::json!({"ok": false, "error": "unknown_method"}),
        ),
    }
}

fn websocket(mut conn: TcpStream, req: &Request, shared: &Arc<SockShared>) {
    let Some(key) = req.header("sec-websocket-key") else {
        answer(&mut conn, 400, None, b"not a WebSocket request");
        return;
    };
    let accept = base64(&sha1(
        format!("{key}258EAFA5-E914-47DA-95CA-C5AB0DC85B11").as_bytes(),
    ));
    let head = format!(
        "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
         Sec-WebSocket-Accept: {accept}\r\n\r\n"
    );
    if conn.write_all(head.as_bytes()).is_err() {
        return;
    }
    let Ok(writer) = conn.try_clone() else {
        return;
    };
    let ws = {
        let Ok(mut s) = shared.state.lock() else {
            return;
        };
        let ws = Arc::new(WsConn {
            number: s.conns.len() + 1,
            writer: Mutex::new(writer),
            closed: AtomicBool::new(false),
        });
        let _ = ws.send(r#"{"type":"hello","num_connections":1,"debug_info":{"host":"applink-standin"},"connection_info":{"app_id":"A111"}}"#);
        s.conns.push(ws.clone());
        ws
    };
    shared.changed.notify_all();
    let _ = conn.set_read_timeout(None);
    while let Ok((opcode, payload)) = read_frame(&mut conn) {
        match opcode {
            1 => {
                let v: serde_json::Value =
                    serde_json::from_slice(&payload).unwrap_or(serde_json::Value::Null);
                let id = v.get("envelope_id").and_then(serde_json::Value::as_str);
                if let (Some(id), Some(1)) = (id, v.as_object().map(|o| o.len())) {
                    let hook = shared.hook.lock().ok().and_then(|h| h.clone());
                    let said = hook.map(|h| h(id)).unwrap_or_default();
                    if let Ok(mut s) = shared.state.lock() {
                        s.acks.push((id.to_string(), ws.number, said));
                    }
                    shared.changed.notify_all();
                }
            }
            8 => {
                let _ = ws.frame(8, &[]);
                break;
            }
            9 => {
                let _ = ws.frame(10, &payload);
            }
            _ => {}
        }
    }
    ws.drop_connection();
    shared.changed.notify_all();
}

/// One client frame (masked), unfragmented: (opcode, payload). Larger than 1 MiB
/// is an error.
fn read_frame(conn: &mut TcpStream) -> std::io::Result<(u8, Vec<u8>)> {
    let mut h = [0u8; 2];
    conn.read_exact(&mut h)?;
    let opcode = h[0] & 0x0F;
    let masked = h[1] & 0x80 != 0;
    let len = match h[1] & 0x7F {
        126 => {
            let mut b = [0u8; 2];
            conn.read_exact(&mut b)?;
            u64::from(u16::from_be_bytes(b))
        }
        127 => {
            let mut b = [0u8; 8];
            conn.read_exact(&mut b)?;
            u64::from_be_bytes(b)
        }
        n => u64::from(n),
    };
    if len > 1 << 20 {
        return Err(io_err("a frame over 1 MiB"));
    }
    let mut mask = [0u8; 4];
    if masked {
        conn.read_exact(&mut mask)?;
    }
    let mut payload = vec![0u8; len as usize];
    conn.read_exact(&mut payload)?;
    if masked {
        for (i, b) in payload.iter_mut().enumerate() {
            *b ^= mask[i % 4];
        }
    }
    Ok((opcode, payload))
}

// ---------------------------------------------------------------------------
// A scripted Web API stand-in, for what the system tests look at beyond what Prism
// can answer (Prism makes up each answer: a `chat.update` of the `ts` a
// `chat.postMessage` answered needs the same `ts` back).

type Script = Arc<dyn Fn(&Request) -> serde_json::Value + Send + Sync>;

/// A Web API stand-in on a free loopback port: each request is recorded and answered
/// 200 with what the script makes of it. Stops accepting when dropped.
pub struct WebStandIn {
    /// The connection's `api_url`.
    pub url: String,
    requests: Arc<Mutex<Vec<Request>>>,
    stop: Arc<AtomicBool>,
    addr: SocketAddr,
}

impl Drop for WebStandIn {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        let _ = TcpStream::connect(self.addr);
    }
}

impl WebStandIn {
    /// A stand-in answering each request with `script(request)`.
    pub fn start(
        script: impl Fn(&Request) -> serde_json::Value + Send + Sync + 'static,
    ) -> std::io::Result<WebStandIn> {
        let listener = TcpListener::bind("127.0.0.1:0")?;
        let addr = listener.local_addr()?;
        let requests = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let script: Script = Arc::new(script);
        let (r, st) = (requests.clone(), stop.clone());
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                if st.load(Ordering::SeqCst) {
                    break;
                }
                let Ok(mut conn) = conn else { continue };
                let (r, script) = (r.clone(), script.clone());
                std::thread::spawn(move || {
                    let _ = conn.set_read_timeout(Some(HANG));
                    let Ok(mut req) = read_request(&mut conn) else {
                        return;
                    };
                    let body = script(&req);
                    req.status = 200;
                    if let Ok(mut all) = r.lock() {
                        all.push(req);
                    }
                    json_answer(&mut conn, &body);
                });
            }
        });
        Ok(WebStandIn {
            url: format!("http://{addr}"),
            requests,
            stop,
            addr,
        })
    }

    /// Every request so far, in the order they were answered.
    pub fn requests(&self) -> Vec<Request> {
        self.requests.lock().map(|r| r.clone()).unwrap_or_default()
    }

    /// The requests to `path` (`/chat.update`).
    pub fn calls(&self, path: &str) -> Vec<Request> {
        self.requests()
            .into_iter()
            .filter(|r| r.path() == path)
            .collect()
    }
}

// ---------------------------------------------------------------------------
// Issue 42, errors and rate limits: a stand-in that can answer other than 200.

/// What [`WebStandIn::start_answering`]'s script answers a request with.
#[derive(Debug, Clone)]
pub struct Answer {
    /// The HTTP status (Slack answers its `ok: false` errors 200; a rate limit 429).
    pub status: u16,
    /// A `Retry-After` header, in seconds.
    pub retry_after: Option<u64>,
    /// The JSON body.
    pub body: serde_json::Value,
}

impl Answer {
    /// 200 with `body`.
    pub fn ok(body: serde_json::Value) -> Answer {
        Answer {
            status: 200,
            retry_after: None,
            body,
        }
    }

    /// Slack's `200 {"ok": false, "error": code}`.
    pub fn error(code: &str) -> Answer {
        Answer::ok(serde_json::json!({"ok": false, "error": code}))
    }

    /// Slack's rate limit: 429 with `Retry-After: secs` and `{"ok": false, "error": "ratelimited"}`.
    pub fn rate_limited(secs: u64) -> Answer {
        Answer {
            status: 429,
            retry_after: Some(secs),
            body: serde_json::json!({"ok": false, "error": "ratelimited"}),
        }
    }
}

type AnswerScript = Arc<dyn Fn(&Request) -> Answer + Send + Sync>;

impl WebStandIn {
    /// A stand-in answering each request with `script(request)`: any status, with
    /// `Retry-After` when the answer has one. Requests are recorded with the status
    /// answered.
    pub fn start_answering(
        script: impl Fn(&Request) -> Answer + Send + Sync + 'static,
    ) -> std::io::Result<WebStandIn> {
        let listener = TcpListener::bind("127.0.0.1:0")?;
        let addr = listener.local_addr()?;
        let requests = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let script: AnswerScript = Arc::new(script);
        let (r, st) = (requests.clone(), stop.clone());
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                if st.load(Ordering::SeqCst) {
                    break;
                }
                let Ok(mut conn) = conn else { continue };
                let (r, script) = (r.clone(), script.clone());
                std::thread::spawn(move || {
                    let _ = conn.set_read_timeout(Some(HANG));
                    let Ok(mut req) = read_request(&mut conn) else {
                        return;
                    };
                    let a = script(&req);
                    req.status = a.status;
                    if let Ok(mut all) = r.lock() {
                        all.push(req);
                    }
                    let body = a.body.to_string();
                    let mut head = format!(
                        "HTTP/1.1 {} X\r\nContent-Length: {}\r\nConnection: close\r\nContent-Type: application/json\r\n",
                        a.status,
                        body.len()
                    );
                    if let Some(s) = a.retry_after {
                        head.push_str(&format!("Retry-After: {s}\r\n"));
                    }
                    head.push_str("\r\n");
                    let _ = conn.write_all(head.as_bytes());
                    let _ = conn.write_all(body.as_bytes());
                });
            }
        });
        Ok(WebStandIn {
            url: format!("http://{addr}"),
            requests,
            stop,
            addr,
        })
    }
}
