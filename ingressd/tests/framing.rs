//! Request framing on real TCP sockets (loopback only): `Expect: 100-continue`, chunked
//! bodies cut off at the limit, transfer codings, and requests that try to smuggle a
//! second request past the first (`Transfer-Encoding` with `Content-Length`).
#![allow(clippy::unwrap_used)]

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ingressd::{Answer, BoxFuture, Delivery, Intake, IntakeError, Limits, Routes, Server};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::oneshot;
use tokio::time::timeout;

/// Against hangs only: nothing here measures time.
const PATIENCE: Duration = Duration::from_secs(10);

#[derive(Default)]
struct Taken(Mutex<Vec<Delivery>>);

impl Intake for Taken {
    fn deliver(&self, d: Delivery) -> BoxFuture<'_, Result<Answer, IntakeError>> {
        Box::pin(async move {
            self.0.lock().unwrap().push(d);
            Ok(Answer::text(200, "accepted"))
        })
    }

    fn healthy(&self) -> BoxFuture<'_, bool> {
        Box::pin(async { true })
    }
}

struct Running {
    addr: SocketAddr,
    taken: Arc<Taken>,
    stop: oneshot::Sender<()>,
    server: tokio::task::JoinHandle<std::io::Result<()>>,
}

impl Running {
    fn taken(&self) -> Vec<Delivery> {
        self.taken.0.lock().unwrap().clone()
    }

    async fn stop(self) {
        let _ = self.stop.send(());
        timeout(PATIENCE, self.server)
            .await
            .unwrap()
            .unwrap()
            .unwrap();
    }
}

async fn start() -> Running {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let routes = Arc::new(Routes::from_pairs([
        ("/hooks/plain", "plain"),
        ("/hooks/other", "other"),
    ]));
    let taken = Arc::new(Taken::default());
    let limits = Limits {
        max_body_bytes: 1024,
        ..Limits::default()
    };
    let (stop, rx) = oneshot::channel::<()>();
    let server = tokio::spawn(Server::serve(
        listener,
        routes,
        taken.clone() as Arc<dyn Intake>,
        limits,
        async move {
            let _ = rx.await;
        },
    ));
    Running {
        addr,
        taken,
        stop,
        server,
    }
}

/// Everything the server sends until it closes the connection.
async fn until_closed(s: &mut TcpStream) -> String {
    let mut all = Vec::new();
    timeout(PATIENCE, async {
        let mut chunk = [0u8; 4096];
        while let Ok(n) = s.read(&mut chunk).await {
            if n == 0 {
                break;
            }
            all.extend_from_slice(&chunk[..n]);
        }
    })
    .await
    .expect("the server kept the connection open");
    String::from_utf8_lossy(&all).into_owned()
}

/// Reads until `buf` holds `marker`; what was read.
async fn read_until(s: &mut TcpStream, marker: &str) -> String {
    let mut all = Vec::new();
    timeout(PATIENCE, async {
        let mut chunk = [0u8; 4096];
        while !String::from_utf8_lossy(&all).contains(marker) {
            let n = s.read(&mut chunk).await.unwrap();
            assert!(
                n > 0,
                "closed before {marker:?}: {}",
                String::from_utf8_lossy(&all)
            );
            all.extend_from_slice(&chunk[..n]);
        }
    })
    .await
    .expect("no answer in time");
    String::from_utf8_lossy(&all).into_owned()
}

#[tokio::test]
async fn expect_100_continue_is_answered_before_the_body_and_not_over_the_limit() {
    let srv = start().await;
    // Within the limit: 100 Continue, then the body, then the answer.
    let mut s = TcpStream::connect(srv.addr).await.unwrap();
    s.write_all(
        b"POST /hooks/plain HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 5\r\n\r\n",
    )
    .await
    .unwrap();
    let cont = read_until(&mut s, "\r\n\r\n").await;
    assert!(cont.starts_with("HTTP/1.1 100 Continue\r\n"), "{cont}");
    s.write_all(b"hello").await.unwrap();
    let answer = read_until(&mut s, "accepted").await;
    assert!(answer.starts_with("HTTP/1.1 200 "), "{answer}");
    assert_eq!(srv.taken()[0].body, b"hello");
    // Over it: 413 naming the limit at once, no 100 Continue, and the body is not
    // waited for.
    let mut s = TcpStream::connect(srv.addr).await.unwrap();
    s.write_all(
        b"POST /hooks/plain HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 4096\r\n\r\n",
    )
    .await
    .unwrap();
    let answer = until_closed(&mut s).await;
    assert!(answer.starts_with("HTTP/1.1 413 "), "{answer}");
    assert!(!answer.contains("100 Continue"), "{answer}");
    assert!(answer.contains("limit of 1024 bytes"), "{answer}");
    assert_eq!(srv.taken().len(), 1);
    srv.stop().await;
}

#[tokio::test]
async fn a_chunked_body_is_cut_off_once_it_passes_the_limit() {
    let srv = start().await;
    let mut s = TcpStream::connect(srv.addr).await.unwrap();
    s.write_all(
        b"POST /hooks/plain HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n800\r\n",
    )
    .await
    .unwrap();
    // The server may answer and close before all of it is written.
    let _ = s.write_all(&[b'a'; 0x800]).await;
    let answer = until_closed(&mut s).await;
    assert!(answer.starts_with("HTTP/1.1 413 "), "{answer}");
    assert!(answer.contains("limit of 1024 bytes"), "{answer}");
    assert!(srv.taken().is_empty());
    srv.stop().await;
}

#[tokio::test]
async fn only_the_chunked_transfer_coding_is_taken() {
    let srv = start().await;
    for coding in ["gzip, chunked", "chunked, chunked"] {
        let mut s = TcpStream::connect(srv.addr).await.unwrap();
        let raw = format!(
            "POST /hooks/plain HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: {coding}\r\n\r\n0\r\n\r\n"
        );
        s.write_all(raw.as_bytes()).await.unwrap();
        let answer = until_closed(&mut s).await;
        assert!(answer.starts_with("HTTP/1.1 501 "), "{coding}: {answer}");
    }
    // A coding that does not end in chunked leaves the body's end unknown: 400.
    let mut s = TcpStream::connect(srv.addr).await.unwrap();
    s.write_all(b"POST /hooks/plain HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip\r\n\r\nxyz")
        .await
        .unwrap();
    let answer = until_closed(&mut s).await;
    assert!(answer.starts_with("HTTP/1.1 400 "), "{answer}");
    assert!(srv.taken().is_empty());
    srv.stop().await;
}

#[tokio::test]
async fn a_request_cannot_smuggle_another_past_it() {
    let srv = start().await;
    // Transfer-Encoding and Content-Length together: the chunked framing is the
    // body's (empty here), the answer closes the connection, and what follows is
    // never read as a request of its own.
    let smuggled = "POST /hooks/other HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\n\r\nx";
    for order in [
        "Content-Length: 5\r\nTransfer-Encoding: chunked",
        "Transfer-Encoding: chunked\r\nContent-Length: 5",
    ] {
        let mut s = TcpStream::connect(srv.addr).await.unwrap();
        let raw =
            format!("POST /hooks/plain HTTP/1.1\r\nHost: x\r\n{order}\r\n\r\n0\r\n\r\n{smuggled}");
        s.write_all(raw.as_bytes()).await.unwrap();
        let answer = until_closed(&mut s).await;
        assert!(answer.starts_with("HTTP/1.1 200 "), "{answer}");
        assert_eq!(answer.matches("HTTP/1.1 ").count(), 1, "{answer}");
        assert!(
            answer.to_ascii_lowercase().contains("connection: close"),
            "{answer}"
        );
    }
    // Content-Length values that disagree: refused, nothing delivered.
    let mut s = TcpStream::connect(srv.addr).await.unwrap();
    let raw = format!(
        "POST /hooks/plain HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\nContent-Length: 62\r\n\r\n{smuggled}"
    );
    s.write_all(raw.as_bytes()).await.unwrap();
    let answer = until_closed(&mut s).await;
    assert!(answer.starts_with("HTTP/1.1 400 "), "{answer}");
    let taken = srv.taken();
    assert_eq!(taken.len(), 2, "{taken:?}");
    assert!(taken
        .iter()
        .all(|d| d.owner == "plain" && d.body.is_empty()));
    srv.stop().await;
}

#[tokio::test]
async fn a_malformed_head_is_400_and_counted() {
    let srv = start().await;
    let mut s = TcpStream::connect(srv.addr).await.unwrap();
    s.write_all(b"POST /hooks/plain HTTP/1.1\r\nHost x\r\n\r\n")
        .await
        .unwrap();
    let answer = until_closed(&mut s).await;
    assert!(answer.starts_with("HTTP/1.1 400 "), "{answer}");
    // Counted once the connection is closed on the server's side too.
    let line = "ingressd_http_responses_total{code=\"400\"} 1";
    let mut metrics = String::new();
    for _ in 0..100 {
        let mut s = TcpStream::connect(srv.addr).await.unwrap();
        s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            .await
            .unwrap();
        metrics = until_closed(&mut s).await;
        if metrics.contains(line) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(metrics.contains(line), "{metrics}");
    srv.stop().await;
}
