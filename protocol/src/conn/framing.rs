//! The bytes of a connection: one JSON object a line, read without buffering more
//! than the message bound, told apart (request, notification, response), and
//! written in batches.

use super::serve::{on_notification, on_request, on_response};
use super::*;

pub(super) async fn write_loop<W: AsyncWrite + Unpin>(
    inner: Arc<Inner>,
    writer: W,
    mut rx: mpsc::UnboundedReceiver<Out>,
) {
    /// Marks the writer done however it ends, aborted included.
    struct Done(Arc<Inner>);
    impl Drop for Done {
        fn drop(&mut self) {
            self.0.writer_done.send_replace(true);
        }
    }
    let _done = Done(inner.clone());
    let mut w = BufWriter::with_capacity(64 * 1024, writer);
    loop {
        let Some(msg) = rx.recv().await else { break };
        let mut close = false;
        let mut batch = 0usize;
        let mut next = Some(msg);
        while let Some(msg) = next.take() {
            match msg {
                Out::Line(line) => {
                    batch += line.len();
                    if let Err(e) = w.write_all(&line).await {
                        inner.close(io_closed(&e), Shutdown::Abort);
                        return;
                    }
                    inner.recycle(line);
                }
                Out::Close => {
                    close = true;
                    break;
                }
            }
            // Batch what is already queued into one flush.
            if batch < 1024 * 1024 {
                next = rx.try_recv().ok();
            }
        }
        if let Err(e) = w.flush().await {
            inner.close(io_closed(&e), Shutdown::Abort);
            return;
        }
        inner.queued_bytes.fetch_sub(batch, Ordering::SeqCst);
        inner.written.notify_waiters();
        if close {
            let _ = w.shutdown().await;
            return;
        }
    }
}

/// One incoming message, before it is told apart. Params and results stay raw
/// (borrowed from the line): they are decoded once, by whoever knows their type.
#[derive(Deserialize)]
struct Incoming<'a> {
    #[serde(borrow)]
    jsonrpc: Option<&'a str>,
    #[serde(default)]
    id: Option<Value>,
    #[serde(default)]
    method: Option<String>,
    #[serde(default, borrow, deserialize_with = "present")]
    params: Option<&'a RawValue>,
    #[serde(default, borrow, deserialize_with = "present")]
    result: Option<&'a RawValue>,
    #[serde(default)]
    error: Option<RpcError>,
}

/// Tells `null` (present) from no such member at all.
fn present<'de, D: Deserializer<'de>>(d: D) -> Result<Option<&'de RawValue>, D::Error> {
    <&RawValue>::deserialize(d).map(Some)
}

enum ReadError {
    TooLong,
    Truncated,
    Io(std::io::Error),
}

/// The largest line buffer a connection keeps between messages.
const KEPT_READ_BUFFER: usize = 1024 * 1024;
/// The room a connection's line buffer starts with, and the least it grows by.
const READ_CHUNK: usize = 64 * 1024;

/// Lines read straight into one buffer: no intermediate buffer to copy out of, and
/// the buffer (zeroed once, when it grows) is kept from one message to the next, so
/// a stream of large messages (artifact chunks) is read into memory already mapped,
/// each in as few reads as what has arrived allows. Bytes read past a line's
/// newline stay for the next line. Holds at most the message bound and its
/// newline: a line over the bound is refused without buffering more of it.
struct LineReader<R> {
    r: R,
    /// `buf[start..]` are the bytes read and not yet taken; reads go into its spare
    /// capacity, which is never zeroed first.
    buf: Vec<u8>,
    start: usize,
}

impl<R: AsyncRead + Unpin> LineReader<R> {
    fn new(r: R) -> Self {
        LineReader {
            r,
            buf: Vec::with_capacity(READ_CHUNK),
            start: 0,
        }
    }

    /// The next line, refusing one over `max` bytes (not counting its newline).
    /// `Ok(Some(range))`: the line is `self.buf[range]`, without its newline, until
    /// the next call; `Ok(None)`: the stream ended between lines.
    async fn next(&mut self, max: usize) -> Result<Option<std::ops::Range<usize>>, ReadError> {
        let mut scanned = self.start;
        loop {
            if let Some(i) = memchr::memchr(b'\n', &self.buf[scanned..]) {
                let (begin, end) = (self.start, scanned + i);
                if end - begin > max {
                    return Err(ReadError::TooLong);
                }
                self.start = end + 1;
                return Ok(Some(begin..end));
            }
            let partial = self.buf.len() - self.start;
            if partial > max {
                return Err(ReadError::TooLong);
            }
            // Out of whole lines: move the partial one to the front (the lines
            // before it are done with; a line already at the front stays put) and
            // read more after it.
            if self.start > 0 {
                self.buf.copy_within(self.start.., 0);
                self.buf.truncate(partial);
                self.start = 0;
            }
            scanned = self.buf.len();
            if self.buf.capacity() > KEPT_READ_BUFFER && self.buf.len() <= KEPT_READ_BUFFER / 2 {
                // A large message came before: do not hold its size for the
                // connection's life (the bus's connections are long, and may see a
                // 64 MiB line once).
                self.buf.shrink_to(KEPT_READ_BUFFER / 2);
            }
            if self.buf.len() == self.buf.capacity() {
                // Full: twice the room (at least READ_CHUNK more), within the bound
                // and its newline. `len <= max` here, so this always grows.
                let len = self.buf.len();
                let grown = (len * 2).max(len + READ_CHUNK).min(max.saturating_add(1));
                self.buf.reserve_exact(grown - len);
            }
            // Into the spare room only: a read never grows the buffer past what
            // the bound allowed above.
            let room = self.buf.capacity() - self.buf.len();
            let n = (&mut self.r)
                .take(room as u64)
                .read_buf(&mut self.buf)
                .await
                .map_err(ReadError::Io)?;
            if n == 0 {
                return if self.buf.is_empty() {
                    Ok(None)
                } else {
                    Err(ReadError::Truncated)
                };
            }
        }
    }
}

pub(super) async fn read_loop<R: AsyncRead + Unpin>(inner: Arc<Inner>, reader: R) {
    let max = inner.opts.max_message_bytes;
    let mut lines = LineReader::new(reader);
    loop {
        let line = match lines.next(max).await {
            Ok(Some(line)) => line,
            Ok(None) => {
                inner.close(CloseReason::PeerClosed, Shutdown::Flush);
                return;
            }
            Err(ReadError::Io(e)) => {
                inner.close(io_closed(&e), Shutdown::Abort);
                return;
            }
            Err(ReadError::Truncated) => {
                inner.close(
                    CloseReason::Protocol("the stream ended inside a message".into()),
                    Shutdown::Flush,
                );
                return;
            }
            Err(ReadError::TooLong) => {
                protocol_error(
                    &inner,
                    format!("a message exceeds the {max}-byte limit (max_message_bytes)"),
                );
                return;
            }
        };
        let buf = &lines.buf[line];
        if buf.is_empty() || buf.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        let msg: Incoming = match serde_json::from_slice(buf) {
            Ok(m) => m,
            Err(e) => {
                protocol_error(&inner, format!("invalid JSON-RPC message: {e}"));
                return;
            }
        };
        if msg.jsonrpc != Some("2.0") {
            protocol_error(&inner, "a message without \"jsonrpc\": \"2.0\"".into());
            return;
        }
        if let Some(method) = msg.method {
            match msg.id {
                Some(id) => {
                    let params = msg.params.map_or_else(null_raw, RawValue::to_owned);
                    on_request(&inner, id, method, params)
                }
                None => {
                    let params = msg
                        .params
                        .and_then(|p| serde_json::from_str(p.get()).ok())
                        .unwrap_or(Value::Null);
                    on_notification(&inner, &method, params)
                }
            }
        } else if let Some(id) = msg.id {
            on_response(&inner, id, msg.result, msg.error);
        } else if let Some(error) = msg.error {
            // An error with a null id: the peer could not read what we sent, or
            // refuses us. Either way it is closing: say why.
            inner.close(CloseReason::PeerError(error.to_string()), Shutdown::Flush);
            return;
        } else {
            protocol_error(
                &inner,
                "a message that is no request, response or notification".into(),
            );
            return;
        }
    }
}

/// Tell the peer why (a -32700 with a null id), then close.
fn protocol_error(inner: &Arc<Inner>, why: String) {
    let error = RpcError {
        code: PARSE_ERROR,
        message: format!("{why}; closing the connection"),
        data: None,
    };
    if let Ok(line) = encode(&OutError {
        jsonrpc: "2.0",
        id: &Value::Null,
        error: &error,
    }) {
        inner.send_reply(line);
    }
    inner.close(CloseReason::Protocol(why), Shutdown::Flush);
}

/// Why a failed read or write ended the connection: a broken pipe or a reset is the
/// peer gone (it exited, or closed its end while this side wrote), as ordinary as an
/// EOF; anything else is a failure of the stream.
fn io_closed(e: &std::io::Error) -> CloseReason {
    match e.kind() {
        std::io::ErrorKind::BrokenPipe
        | std::io::ErrorKind::ConnectionReset
        | std::io::ErrorKind::ConnectionAborted => CloseReason::PeerClosed,
        _ => CloseReason::Io(e.to_string()),
    }
}

#[cfg(test)]
mod close_tests {
    use super::*;

    #[test]
    fn a_broken_pipe_is_the_peer_gone_and_other_failures_are_failures() {
        let gone = std::io::Error::from(std::io::ErrorKind::BrokenPipe);
        assert!(matches!(io_closed(&gone), CloseReason::PeerClosed));
        let reset = std::io::Error::from(std::io::ErrorKind::ConnectionReset);
        assert!(matches!(io_closed(&reset), CloseReason::PeerClosed));
        let other = std::io::Error::other("disk on fire");
        assert!(matches!(io_closed(&other), CloseReason::Io(m) if m.contains("disk on fire")));
    }
}

#[cfg(test)]
mod line_tests {
    use super::*;
    use std::collections::VecDeque;
    use std::pin::Pin;
    use std::task::{Context, Poll};

    /// A stream that hands out exactly these pieces, one a read (a piece larger
    /// than the room offered comes over several reads), then EOF.
    struct Pieces(VecDeque<Vec<u8>>);

    impl AsyncRead for Pieces {
        fn poll_read(
            mut self: Pin<&mut Self>,
            _cx: &mut Context<'_>,
            out: &mut tokio::io::ReadBuf<'_>,
        ) -> Poll<std::io::Result<()>> {
            if let Some(mut piece) = self.0.pop_front() {
                let n = piece.len().min(out.remaining());
                out.put_slice(&piece[..n]);
                if n < piece.len() {
                    self.0.push_front(piece.split_off(n));
                }
            }
            Poll::Ready(Ok(()))
        }
    }

    type Got = Vec<Result<Vec<u8>, &'static str>>;

    async fn lines(pieces: Vec<Vec<u8>>, max: usize) -> Got {
        let mut reader = LineReader::new(Pieces(pieces.into()));
        let mut out = Vec::new();
        loop {
            match reader.next(max).await {
                Ok(Some(range)) => out.push(Ok(reader.buf[range].to_vec())),
                Ok(None) => return out,
                Err(ReadError::TooLong) => {
                    out.push(Err("too long"));
                    return out;
                }
                Err(ReadError::Truncated) => {
                    out.push(Err("truncated"));
                    return out;
                }
                Err(ReadError::Io(_)) => {
                    out.push(Err("io"));
                    return out;
                }
            }
        }
    }

    fn sizes(got: &Got) -> Vec<Result<usize, &'static str>> {
        got.iter()
            .map(|l| l.as_ref().map(Vec::len).map_err(|e| *e))
            .collect()
    }

    #[tokio::test]
    async fn lines_come_whole_and_in_order_however_the_reads_cut_them() {
        let big = vec![b'x'; 3 * READ_CHUNK + 17];
        let mut input = b"a\n\nbc\n".to_vec();
        input.extend_from_slice(&big);
        input.extend_from_slice(b"\nd\n");
        let want: Got = vec![
            Ok(b"a".to_vec()),
            Ok(Vec::new()),
            Ok(b"bc".to_vec()),
            Ok(big.clone()),
            Ok(b"d".to_vec()),
        ];
        // All at once; a byte a read; and cuts inside the large line, at its
        // newline, and just after it.
        let cut = 6 + big.len();
        let cuts: Vec<Vec<Vec<u8>>> = vec![
            vec![input.clone()],
            input.iter().map(|b| vec![*b]).collect(),
            vec![
                input[..3].to_vec(),
                input[3..1000].to_vec(),
                input[1000..cut].to_vec(),
                input[cut..cut + 1].to_vec(),
                input[cut + 1..].to_vec(),
            ],
        ];
        for pieces in cuts {
            let n = pieces.len();
            let got = lines(pieces, 4 * READ_CHUNK).await;
            assert!(got == want, "{n} pieces: {:?}", sizes(&got));
        }
    }

    #[tokio::test]
    async fn large_lines_one_after_another_reuse_the_buffer() {
        let line = vec![b'y'; 341 * 1024];
        let mut input = Vec::new();
        for _ in 0..8 {
            input.extend_from_slice(&line);
            input.push(b'\n');
        }
        let mut reader = LineReader::new(Pieces(vec![input].into()));
        let mut len = 0;
        for i in 0..8 {
            let range = reader.next(1 << 20).await.ok().flatten();
            assert_eq!(range.map(|r| r.len()), Some(line.len()), "line {i}");
            if i == 1 {
                len = reader.buf.capacity();
            } else if i > 1 {
                assert_eq!(
                    reader.buf.capacity(),
                    len,
                    "the buffer grew again at line {i}"
                );
            }
        }
        assert!(len <= 4 * line.len(), "{len}");
    }

    #[tokio::test]
    async fn a_line_over_the_bound_is_refused_and_a_cut_one_is_truncated() {
        let mut input = vec![b'y'; 100];
        input.push(b'\n');
        assert_eq!(lines(vec![input.clone()], 99).await, vec![Err("too long")]);
        assert_eq!(
            lines(vec![input.clone()], 100).await,
            vec![Ok(vec![b'y'; 100])]
        );
        // The same, the newline arriving in a read of its own.
        let split = vec![input[..100].to_vec(), input[100..].to_vec()];
        assert_eq!(lines(split.clone(), 99).await, vec![Err("too long")]);
        assert_eq!(lines(split, 100).await, vec![Ok(vec![b'y'; 100])]);
        assert_eq!(
            lines(vec![b"ok\nno newline".to_vec()], 100).await,
            vec![Ok(b"ok".to_vec()), Err("truncated")]
        );
    }

    #[tokio::test]
    async fn an_endless_line_is_refused_having_buffered_no_more_than_the_bound() {
        let max = 200_000;
        let pieces = vec![vec![b'z'; 10_000]; 1000];
        let mut reader = LineReader::new(Pieces(pieces.into()));
        assert!(matches!(reader.next(max).await, Err(ReadError::TooLong)));
        assert!(
            reader.buf.capacity() <= max + 1,
            "{}",
            reader.buf.capacity()
        );
    }

    #[tokio::test]
    async fn a_huge_line_is_not_held_for_the_connections_life() {
        let mut input = vec![b'h'; 3 * KEPT_READ_BUFFER];
        input.extend_from_slice(b"\nsmall\n");
        let mut reader = LineReader::new(Pieces(vec![input].into()));
        let first = reader.next(4 * KEPT_READ_BUFFER).await.ok().flatten();
        assert_eq!(first.map(|r| r.len()), Some(3 * KEPT_READ_BUFFER));
        let second = reader.next(4 * KEPT_READ_BUFFER).await.ok().flatten();
        assert_eq!(
            second.map(|r| reader.buf[r].to_vec()),
            Some(b"small".to_vec())
        );
        assert!(matches!(reader.next(4 * KEPT_READ_BUFFER).await, Ok(None)));
        assert!(
            reader.buf.capacity() <= KEPT_READ_BUFFER,
            "{}",
            reader.buf.capacity()
        );
    }
}
