//! ingressd's HTTP intake on real TCP sockets (loopback only).
#![allow(clippy::unwrap_used)]

use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ingressd::{Answer, BoxFuture, Delivery, Intake, IntakeError, Limits, Routes, Server};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tokio::time::timeout;

/// Against hangs only: nothing here measures time.
const PATIENCE: Duration = Duration::from_secs(10);

struct TestIntake {
    deliveries: Mutex<Vec<Delivery>>,
    reply: Mutex<Result<Answer, IntakeError>>,
    healthy: AtomicBool,
    delay: Duration,
}

impl TestIntake {
    fn new() -> TestIntake {
        TestIntake {
            deliveries: Mutex::new(Vec::new()),
            reply: Mutex::new(Ok(Answer::text(200, "accepted"))),
            healthy: AtomicBool::new(true),
            delay: Duration::ZERO,
        }
    }

    fn answer(&self, reply: Result<Answer, IntakeError>) {
        *self.reply.lock().unwrap() = reply;
    }

    fn taken(&self) -> Vec<Delivery> {
        self.deliveries.lock().unwrap().clone()
    }
}

impl Intake for TestIntake {
    fn deliver(&self, d: Delivery) -> BoxFuture<'_, Result<Answer, IntakeError>> {
        Box::pin(async move {
            tokio::time::sleep(self.delay).await;
            self.deliveries.lock().unwrap().push(d);
            self.reply.lock().unwrap().clone()
        })
    }

    fn healthy(&self) -> BoxFuture<'_, bool> {
        Box::pin(async move { self.healthy.load(Ordering::SeqCst) })
    }
}

struct Running {
    addr: SocketAddr,
    intake: Arc<TestIntake>,
    stop: Option<oneshot::Sender<()>>,
    server: JoinHandle<std::io::Result<()>>,
}

impl Running {
    async fn stop(mut self) {
        let _ = self.stop.take().unwrap().send(());
        timeout(PATIENCE, &mut self.server)
            .await
            .unwrap()
            .unwrap()
            .unwrap();
    }
}

async fn start_with(intake: TestIntake, limits: Limits) -> Running {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let routes = Arc::new(Routes::from_pairs([
        ("/hooks/github", "github"),
        ("/hooks/github/app", "github-app"),
        ("/hooks/plain", "plain"),
    ]));
    let intake = Arc::new(intake);
    let (tx, rx) = oneshot::channel::<()>();
    let server = tokio::spawn(Server::serve(
        listener,
        routes,
        intake.clone() as Arc<dyn Intake>,
        limits,
        async move {
            let _ = rx.await;
        },
    ));
    Running {
        addr,
        intake,
        stop: Some(tx),
        server,
    }
}

async fn start() -> Running {
    start_with(TestIntake::new(), Limits::default()).await
}

#[derive(Debug)]
struct Resp {
    status: u16,
    headers: Vec<(String, String)>,
    body: String,
}

impl Resp {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// Reads one response (a 100 Continue is skipped); `buf` keeps what follows it.
async fn read_response(stream: &mut TcpStream, buf: &mut Vec<u8>) -> Resp {
    timeout(PATIENCE, async {
        loop {
            let (status, headers, consumed) = loop {
                let mut hs = [httparse::EMPTY_HEADER; 64];
                let mut r = httparse::Response::new(&mut hs);
                if let httparse::Status::Complete(n) = r.parse(buf).unwrap() {
                    let headers: Vec<(String, String)> = r
                        .headers
                        .iter()
                        .map(|h| {
                            (
                                h.name.to_owned(),
                                String::from_utf8_lossy(h.value).into_owned(),
                            )
                        })
                        .collect();
                    break (r.code.unwrap(), headers, n);
                }
                let mut chunk = [0u8; 4096];
                let n = stream.read(&mut chunk).await.unwrap();
                assert!(n > 0, "the server closed before answering");
                buf.extend_from_slice(&chunk[..n]);
            };
            buf.drain(..consumed);
            if status == 100 {
                continue;
            }
            let len: usize = headers
                .iter()
                .find(|(n, _)| n.eq_ignore_ascii_case("content-length"))
                .map(|(_, v)| v.parse().unwrap())
                .expect("every answer has a Content-Length");
            while buf.len() < len {
                let mut chunk = [0u8; 4096];
                let n = stream.read(&mut chunk).await.unwrap();
                assert!(n > 0, "the server closed in the middle of a body");
                buf.extend_from_slice(&chunk[..n]);
            }
            let body = String::from_utf8_lossy(&buf[..len]).into_owned();
            buf.drain(..len);
            return Resp {
                status,
                headers,
                body,
            };
        }
    })
    .await
    .expect("no answer in time")
}

/// Sends `raw` on a new connection and reads one answer.
async fn exchange(addr: SocketAddr, raw: &[u8]) -> Resp {
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(raw).await.unwrap();
    read_response(&mut s, &mut Vec::new()).await
}

fn post(path: &str, body: &str) -> Vec<u8> {
    format!(
        "POST {path} HTTP/1.1\r\nHost: localhost\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

fn get(path: &str) -> Vec<u8> {
    format!("GET {path} HTTP/1.1\r\nHost: localhost\r\n\r\n").into_bytes()
}

/// Waits for the server to close the connection (EOF or reset), discarding bytes.
async fn closed(stream: &mut TcpStream) {
    timeout(PATIENCE, async {
        let mut chunk = [0u8; 4096];
        while let Ok(n) = stream.read(&mut chunk).await {
            if n == 0 {
                break;
            }
        }
    })
    .await
    .expect("the server kept the connection open");
}

#[tokio::test]
async fn a_post_is_delivered_with_its_body_and_headers() {
    let srv = start().await;
    let mut reply = Answer::text(202, "queued");
    reply.headers.push(("X-Reply".to_owned(), "yes".to_owned()));
    srv.intake.answer(Ok(reply));
    let body = "{\"action\":\"opened\"}";
    let raw = format!(
        "POST /hooks/github/push?source=gh&x=1 HTTP/1.1\r\nHost: localhost\r\n\
         X-Hub-Signature-256: sha256=abc\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\n\r\n{body}",
        body.len()
    );
    let resp = exchange(srv.addr, raw.as_bytes()).await;
    assert_eq!(resp.status, 202);
    assert_eq!(resp.body, "queued");
    assert_eq!(resp.header("X-Reply"), Some("yes"));
    let taken = srv.intake.taken();
    assert_eq!(taken.len(), 1);
    let d = &taken[0];
    assert_eq!(d.method, "POST");
    assert_eq!(d.path, "/hooks/github/push");
    assert_eq!(d.route, "/hooks/github");
    assert_eq!(d.owner, "github");
    assert_eq!(d.query, "source=gh&x=1");
    assert_eq!(d.body, body.as_bytes());
    assert_eq!(d.header("x-hub-signature-256"), Some(&b"sha256=abc"[..]));
    assert_eq!(d.header("Content-Type"), Some(&b"application/json"[..]));
    assert!(d.remote.ip().is_loopback());
    srv.stop().await;
}

#[tokio::test]
async fn keep_alive_serves_two_requests_on_one_connection() {
    let srv = start().await;
    let mut s = TcpStream::connect(srv.addr).await.unwrap();
    let mut buf = Vec::new();
    s.write_all(&post("/hooks/plain", "one")).await.unwrap();
    assert_eq!(read_response(&mut s, &mut buf).await.status, 200);
    s.write_all(&post("/hooks/plain", "two")).await.unwrap();
    assert_eq!(read_response(&mut s, &mut buf).await.status, 200);
    // Pipelined: both requests in one write.
    let mut both = post("/hooks/plain", "three");
    both.extend_from_slice(&get("/healthz"));
    s.write_all(&both).await.unwrap();
    assert_eq!(read_response(&mut s, &mut buf).await.status, 200);
    assert_eq!(read_response(&mut s, &mut buf).await.body, "ok\n");
    let bodies: Vec<Vec<u8>> = srv.intake.taken().into_iter().map(|d| d.body).collect();
    assert_eq!(
        bodies,
        vec![b"one".to_vec(), b"two".to_vec(), b"three".to_vec()]
    );
    srv.stop().await;
}

#[tokio::test]
async fn a_chunked_body_is_decoded() {
    let srv = start().await;
    let raw = "POST /hooks/plain HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n\
               5\r\nhello\r\n6;ext=1\r\n world\r\n0\r\nX-Trailer: t\r\n\r\n";
    let mut s = TcpStream::connect(srv.addr).await.unwrap();
    let mut buf = Vec::new();
    s.write_all(raw.as_bytes()).await.unwrap();
    assert_eq!(read_response(&mut s, &mut buf).await.status, 200);
    // The connection stays usable after a chunked body.
    s.write_all(&post("/hooks/plain", "next")).await.unwrap();
    assert_eq!(read_response(&mut s, &mut buf).await.status, 200);
    let taken = srv.intake.taken();
    assert_eq!(taken[0].body, b"hello world");
    assert_eq!(taken[1].body, b"next");
    srv.stop().await;
}

#[tokio::test]
async fn routing_unknown_paths_methods_and_longest_prefix() {
    let srv = start().await;
    let resp = exchange(srv.addr, &post("/nowhere", "x")).await;
    assert_eq!(resp.status, 404);
    assert!(resp.body.contains("/nowhere"), "{}", resp.body);
    let resp = exchange(srv.addr, &post("/hooks/githubx", "x")).await;
    assert_eq!(resp.status, 404);
    let resp = exchange(srv.addr, &get("/hooks/github")).await;
    assert_eq!(resp.status, 405);
    assert_eq!(resp.header("Allow"), Some("POST"));
    let resp = exchange(srv.addr, &post("/hooks/github/app/installation", "a")).await;
    assert_eq!(resp.status, 200);
    let resp = exchange(srv.addr, &post("/hooks/github/apps", "b")).await;
    assert_eq!(resp.status, 200);
    let owners: Vec<(String, String)> = srv
        .intake
        .taken()
        .into_iter()
        .map(|d| (d.owner, d.route))
        .collect();
    assert_eq!(
        owners,
        vec![
            ("github-app".to_owned(), "/hooks/github/app".to_owned()),
            ("github".to_owned(), "/hooks/github".to_owned()),
        ]
    );
    srv.stop().await;
}

#[tokio::test]
async fn routes_are_replaceable_while_serving() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let routes = Arc::new(Routes::new());
    let (tx, rx) = oneshot::channel::<()>();
    let server = tokio::spawn(Server::serve(
        listener,
        routes.clone(),
        Arc::new(TestIntake::new()),
        Limits::default(),
        async move {
            let _ = rx.await;
        },
    ));
    assert_eq!(exchange(addr, &post("/hooks/new", "x")).await.status, 404);
    routes.insert("/hooks/new", "newcomer");
    assert_eq!(exchange(addr, &post("/hooks/new", "x")).await.status, 200);
    routes.replace(Vec::<(String, String)>::new());
    assert_eq!(exchange(addr, &post("/hooks/new", "x")).await.status, 404);
    tx.send(()).unwrap();
    timeout(PATIENCE, server).await.unwrap().unwrap().unwrap();
}

fn small_limits() -> Limits {
    Limits {
        max_body_bytes: 1024,
        header_timeout: Duration::from_millis(300),
        body_timeout: Duration::from_millis(300),
        ..Limits::default()
    }
}

#[tokio::test]
async fn a_body_over_the_limit_is_413_without_reading_it() {
    let srv = start_with(TestIntake::new(), small_limits()).await;
    // A gigabyte announced, a few bytes sent: the answer comes from the head alone.
    let mut s = TcpStream::connect(srv.addr).await.unwrap();
    s.write_all(
        b"POST /hooks/plain HTTP/1.1\r\nHost: x\r\nContent-Length: 1073741824\r\n\r\nabcdef",
    )
    .await
    .unwrap();
    let resp = read_response(&mut s, &mut Vec::new()).await;
    assert_eq!(resp.status, 413);
    assert!(resp.body.contains("1024"), "{}", resp.body);
    assert_eq!(resp.header("Connection"), Some("close"));
    closed(&mut s).await;
    // Chunked: cut off once the bytes pass the limit, inside a chunk that
    // announces far more (hyper does not expose the chunk size line: docs/decisions.md,
    // "ingressd on hyper").
    let mut s = TcpStream::connect(srv.addr).await.unwrap();
    s.write_all(
        b"POST /hooks/plain HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n200\r\n",
    )
    .await
    .unwrap();
    s.write_all(&[b'a'; 0x200]).await.unwrap();
    s.write_all(b"\r\n10000000\r\n").await.unwrap();
    s.write_all(&[b'b'; 0x300]).await.unwrap();
    let resp = read_response(&mut s, &mut Vec::new()).await;
    assert_eq!(resp.status, 413);
    assert!(srv.intake.taken().is_empty());
    srv.stop().await;
}

#[tokio::test]
async fn a_slow_sender_is_cut_off_with_408() {
    let srv = start_with(TestIntake::new(), small_limits()).await;
    // The head arrives, the body never completes.
    let mut s = TcpStream::connect(srv.addr).await.unwrap();
    s.write_all(b"POST /hooks/plain HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\nonly some")
        .await
        .unwrap();
    let resp = read_response(&mut s, &mut Vec::new()).await;
    assert_eq!(resp.status, 408);
    assert_eq!(resp.header("Connection"), Some("close"));
    closed(&mut s).await;
    // The head itself never completes.
    let mut s = TcpStream::connect(srv.addr).await.unwrap();
    s.write_all(b"POST /hooks/plain HTTP/1.1\r\nHost: x\r\n")
        .await
        .unwrap();
    let resp = read_response(&mut s, &mut Vec::new()).await;
    assert_eq!(resp.status, 408);
    closed(&mut s).await;
    // A connection that never starts a request is closed quietly.
    let mut s = TcpStream::connect(srv.addr).await.unwrap();
    closed(&mut s).await;
    assert!(srv.intake.taken().is_empty());
    srv.stop().await;
}

#[tokio::test]
async fn heads_over_their_bounds_are_431() {
    let limits = Limits {
        max_head_bytes: 2048,
        max_headers: 10,
        ..Limits::default()
    };
    let srv = start_with(TestIntake::new(), limits).await;
    let mut raw = String::from("POST /hooks/plain HTTP/1.1\r\n");
    for i in 0..20 {
        raw.push_str(&format!("X-H{i}: v\r\n"));
    }
    raw.push_str("Content-Length: 0\r\n\r\n");
    assert_eq!(exchange(srv.addr, raw.as_bytes()).await.status, 431);
    let raw = format!(
        "POST /hooks/plain HTTP/1.1\r\nX-Big: {}\r\n\r\n",
        "a".repeat(4096)
    );
    assert_eq!(exchange(srv.addr, raw.as_bytes()).await.status, 431);
    srv.stop().await;
}

#[tokio::test]
async fn intake_errors_map_to_their_statuses() {
    let srv = start().await;
    srv.intake
        .answer(Err(IntakeError::Unavailable { retry_after_s: 7 }));
    let resp = exchange(srv.addr, &post("/hooks/plain", "x")).await;
    assert_eq!(resp.status, 503);
    assert_eq!(resp.header("Retry-After"), Some("7"));
    srv.intake
        .answer(Err(IntakeError::BadSignature("digest mismatch".to_owned())));
    let resp = exchange(srv.addr, &post("/hooks/plain", "x")).await;
    assert_eq!(resp.status, 401);
    assert!(resp.body.contains("digest mismatch"), "{}", resp.body);
    srv.intake
        .answer(Err(IntakeError::Invalid("not json".to_owned())));
    assert_eq!(
        exchange(srv.addr, &post("/hooks/plain", "x")).await.status,
        400
    );
    srv.intake
        .answer(Err(IntakeError::Internal("disk on fire".to_owned())));
    let resp = exchange(srv.addr, &post("/hooks/plain", "x")).await;
    assert_eq!(resp.status, 500);
    assert!(!resp.body.contains("disk on fire"), "{}", resp.body);
    srv.stop().await;
}

#[tokio::test]
async fn healthz_follows_the_intake_and_metrics_count() {
    let srv = start().await;
    let resp = exchange(srv.addr, &get("/healthz")).await;
    assert_eq!((resp.status, resp.body.as_str()), (200, "ok\n"));
    srv.intake.healthy.store(false, Ordering::SeqCst);
    assert_eq!(exchange(srv.addr, &get("/healthz")).await.status, 503);
    assert_eq!(
        exchange(srv.addr, &post("/hooks/github", "x")).await.status,
        200
    );
    srv.intake
        .answer(Err(IntakeError::BadSignature("no".to_owned())));
    assert_eq!(
        exchange(srv.addr, &post("/hooks/github", "x")).await.status,
        401
    );
    let resp = exchange(srv.addr, &get("/metrics")).await;
    assert_eq!(resp.status, 200);
    let m = resp.body;
    assert!(
        m.contains("# TYPE ingressd_deliveries_total counter"),
        "{m}"
    );
    assert!(
        m.contains(
            "ingressd_deliveries_total{owner=\"github\",source=\"\",outcome=\"accepted\"} 1"
        ),
        "{m}"
    );
    assert!(
        m.contains(
            "ingressd_deliveries_total{owner=\"github\",source=\"\",outcome=\"bad_signature\"} 1"
        ),
        "{m}"
    );
    assert!(
        m.contains("ingressd_intake_duration_seconds_count 2"),
        "{m}"
    );
    assert!(
        m.contains("ingressd_intake_duration_seconds_bucket{le=\"+Inf\"} 2"),
        "{m}"
    );
    assert!(m.contains("ingressd_deliveries_in_flight 0"), "{m}");
    assert!(m.contains("\ningressd_connections_open "), "{m}");
    assert!(
        m.contains("ingressd_http_responses_total{code=\"503\"} 1"),
        "{m}"
    );
    srv.stop().await;
}

#[tokio::test]
async fn past_the_connection_limit_a_connection_gets_503() {
    let limits = Limits {
        max_connections: 1,
        ..Limits::default()
    };
    let srv = start_with(TestIntake::new(), limits).await;
    let mut first = TcpStream::connect(srv.addr).await.unwrap();
    let mut buf = Vec::new();
    first.write_all(&get("/healthz")).await.unwrap();
    assert_eq!(read_response(&mut first, &mut buf).await.status, 200);
    let mut second = TcpStream::connect(srv.addr).await.unwrap();
    let resp = read_response(&mut second, &mut Vec::new()).await;
    assert_eq!(resp.status, 503);
    assert!(resp.header("Retry-After").is_some());
    closed(&mut second).await;
    // The first is still served.
    first.write_all(&get("/healthz")).await.unwrap();
    assert_eq!(read_response(&mut first, &mut buf).await.status, 200);
    srv.stop().await;
}

/// Waits until the server's `/metrics` has the line `line`.
async fn metric_reads(addr: SocketAddr, line: &str) {
    timeout(PATIENCE, async {
        while !exchange(addr, &get("/metrics"))
            .await
            .body
            .lines()
            .any(|l| l == line)
        {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .unwrap();
}

#[tokio::test]
async fn stopping_finishes_the_delivery_in_flight() {
    let mut intake = TestIntake::new();
    intake.delay = Duration::from_millis(300);
    let srv = start_with(intake, Limits::default()).await;
    let mut s = TcpStream::connect(srv.addr).await.unwrap();
    s.write_all(&post("/hooks/plain", "late")).await.unwrap();
    // Wait until the server has the request, then ask it to stop.
    metric_reads(srv.addr, "ingressd_deliveries_in_flight 1").await;
    let Running { stop, server, .. } = srv;
    stop.unwrap().send(()).unwrap();
    let resp = read_response(&mut s, &mut Vec::new()).await;
    assert_eq!(resp.status, 200);
    assert_eq!(resp.header("Connection"), Some("close"));
    timeout(PATIENCE, server).await.unwrap().unwrap().unwrap();
}

#[tokio::test]
async fn stopping_answers_a_connection_whose_request_has_not_arrived() {
    // A client connects (the server accepts), the server is asked to stop, and only
    // then does the request arrive: it is answered, not closed unanswered (curl's
    // "empty reply from server" during a restart).
    let srv = start().await;
    let mut s = TcpStream::connect(srv.addr).await.unwrap();
    // This connection and the one asking for the metrics.
    metric_reads(srv.addr, "ingressd_connections_open 2").await;
    let Running {
        stop,
        server,
        intake,
        ..
    } = srv;
    stop.unwrap().send(()).unwrap();
    // The server has stopped accepting: a new connection is not served.
    timeout(PATIENCE, async {
        while TcpStream::connect(s.peer_addr().unwrap()).await.is_ok() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .unwrap();
    s.write_all(&post("/hooks/plain", "just in time"))
        .await
        .unwrap();
    let resp = read_response(&mut s, &mut Vec::new()).await;
    assert_eq!(resp.status, 200);
    assert_eq!(resp.header("Connection"), Some("close"));
    assert_eq!(intake.taken().len(), 1);
    timeout(PATIENCE, server).await.unwrap().unwrap().unwrap();
}

const BIN: &str = env!("CARGO_BIN_EXE_open-conduit-ingressd");

struct Proc(Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn free_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port()
}

/// Retries a request until something answers on `addr` (the daemon is starting).
async fn exchange_when_up(addr: SocketAddr, raw: &[u8]) -> Resp {
    for _ in 0..200 {
        if let Ok(mut s) = TcpStream::connect(addr).await {
            s.write_all(raw).await.unwrap();
            return read_response(&mut s, &mut Vec::new()).await;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("nothing answers on {addr}");
}

#[tokio::test]
async fn the_binary_serves_on_an_inherited_socket() {
    let activate = std::path::Path::new("/usr/bin/systemd-socket-activate");
    assert!(
        activate.exists(),
        "systemd-socket-activate is needed (Debian's systemd package)"
    );
    let port = free_port();
    let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let child = Command::new(activate)
        .arg("-l")
        .arg(addr.to_string())
        .arg("--fdname=http")
        .arg(BIN)
        // Not this address: the daemon must use the socket it is given.
        .args(["--log", "stderr", "--listen", "127.0.0.1:1"])
        .args(["--bus", "/nonexistent/oc-bus.sock"])
        .stdin(Stdio::null())
        .spawn()
        .unwrap();
    let mut daemon = Proc(child);
    // No bus here: the webhook paths are never known, so an unknown path is told to
    // come back (not that it does not exist), and the daemon is not healthy.
    let resp = exchange_when_up(addr, &get("/nowhere")).await;
    assert_eq!(resp.status, 503, "{}", resp.body);
    assert_eq!(resp.header("Retry-After"), Some("2"));
    let resp = exchange(addr, &get("/healthz")).await;
    assert_eq!(resp.status, 503, "no bus, not healthy: {}", resp.body);
    let resp = exchange(addr, &get("/metrics")).await;
    assert!(
        resp.body.contains("ingressd_connections_total"),
        "{}",
        resp.body
    );
    // SIGTERM stops it gracefully (systemd-socket-activate execs the daemon in place).
    let pid = daemon.0.id().to_string();
    let killed = Command::new("kill").args(["-TERM", &pid]).status().unwrap();
    assert!(killed.success());
    let status = tokio::task::spawn_blocking(move || {
        for _ in 0..200 {
            if let Some(status) = daemon.0.try_wait().unwrap() {
                return Some(status);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        None
    })
    .await
    .unwrap()
    .expect("the daemon did not stop on SIGTERM");
    assert!(status.success(), "{status:?}");
}
