//! The connection under hyper: its socket with a bound on stalled writes, the few
//! answers written before or after hyper serves it (the refusal past the connection
//! limit, the 408 of a head that did not arrive in time), and the closing that lets
//! the peer read its answer.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::TcpStream;
use tokio::time::{sleep, timeout, timeout_at, Instant, Sleep};

/// A connection's socket as hyper reads and writes it. A write that cannot proceed
/// for `write_timeout` (the peer reads nothing) fails, so a peer that stops reading
/// cannot hold its connection open.
pub(crate) struct Io {
    stream: TcpStream,
    write_timeout: Duration,
    /// Armed while a write waits for the peer to read.
    stalled: Option<Pin<Box<Sleep>>>,
}

impl Io {
    pub(crate) fn new(stream: TcpStream, write_timeout: Duration) -> Io {
        Io {
            stream,
            write_timeout,
            stalled: None,
        }
    }

    /// Whether the last write was left waiting for the peer to read.
    pub(crate) fn write_stalled(&self) -> bool {
        self.stalled.is_some()
    }

    pub(crate) fn into_inner(self) -> TcpStream {
        self.stream
    }

    /// What a write that returned `poll` becomes: `Pending` arms the stall timer, and
    /// past it the write fails.
    fn bound<T>(&mut self, cx: &mut Context<'_>, poll: Poll<io::Result<T>>) -> Poll<io::Result<T>> {
        match poll {
            Poll::Ready(r) => {
                self.stalled = None;
                Poll::Ready(r)
            }
            Poll::Pending => {
                let within = self.write_timeout;
                let timer = self.stalled.get_or_insert_with(|| Box::pin(sleep(within)));
                match timer.as_mut().poll(cx) {
                    Poll::Ready(()) => Poll::Ready(Err(io::Error::new(
                        io::ErrorKind::TimedOut,
                        format!(
                            "the peer read nothing of the answer for {} ms",
                            within.as_millis()
                        ),
                    ))),
                    Poll::Pending => Poll::Pending,
                }
            }
        }
    }
}

impl AsyncRead for Io {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_read(cx, buf)
    }
}

impl AsyncWrite for Io {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let poll = Pin::new(&mut self.stream).poll_write(cx, buf);
        self.bound(cx, poll)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let poll = Pin::new(&mut self.stream).poll_write_vectored(cx, bufs);
        self.bound(cx, poll)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let poll = Pin::new(&mut self.stream).poll_flush(cx);
        self.bound(cx, poll)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_shutdown(cx)
    }
}

fn reason(status: u16) -> &'static str {
    match status {
        408 => "Request Timeout",
        503 => "Service Unavailable",
        _ => "Status",
    }
}

/// The bytes of an answer written outside hyper: a plain-text body, then close.
pub(crate) fn raw_answer(status: u16, extra: &[(&str, String)], body: &str) -> Vec<u8> {
    let mut out = format!(
        "HTTP/1.1 {status} {}\r\nContent-Type: text/plain; charset=utf-8\r\n",
        reason(status)
    );
    for (name, value) in extra {
        out.push_str(&format!("{name}: {value}\r\n"));
    }
    out.push_str(&format!(
        "Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    ));
    out.into_bytes()
}

/// Writes `bytes` within `within`.
pub(crate) async fn write(
    stream: &mut TcpStream,
    bytes: &[u8],
    within: Duration,
) -> io::Result<()> {
    match timeout(within, stream.write_all(bytes)).await {
        Ok(r) => r,
        Err(_) => Err(io::Error::new(io::ErrorKind::TimedOut, "write timed out")),
    }
}

/// Closes after an answer the peer must see although it may still be sending: stop
/// writing, then read and drop what comes (bounded in bytes and time) so that closing
/// does not reset the connection before the answer is read.
pub(crate) async fn linger_close(mut stream: TcpStream, within: Duration) {
    let _ = stream.shutdown().await;
    let deadline = Instant::now() + within;
    let mut drained = 0usize;
    let mut sink = vec![0u8; 16 * 1024];
    while drained < 1024 * 1024 {
        match timeout_at(deadline, stream.read(&mut sink)).await {
            Ok(Ok(n)) if n > 0 => drained += n,
            _ => break,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_raw_answer_is_framed_and_closes() {
        let bytes = raw_answer(503, &[("Retry-After", "1".to_owned())], "busy\n");
        let text = String::from_utf8(bytes).unwrap_or_default();
        assert!(
            text.starts_with("HTTP/1.1 503 Service Unavailable\r\n"),
            "{text}"
        );
        assert!(text.contains("\r\nRetry-After: 1\r\n"), "{text}");
        assert!(
            text.ends_with("Content-Length: 5\r\nConnection: close\r\n\r\nbusy\n"),
            "{text}"
        );
    }
}
