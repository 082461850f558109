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

/// Read one line into `buf` (without the newline), refusing a line over `max`
/// without buffering more of it than `max`.
async fn read_line<R: AsyncRead + Unpin>(
    r: &mut BufReader<R>,
    buf: &mut Vec<u8>,
    max: usize,
) -> Result<bool, ReadError> {
    if buf.capacity() > KEPT_READ_BUFFER {
        // A large message came before: do not hold its size for the connection's
        // life (the bus's connections are long, and may see a 64 MiB line once).
        *buf = Vec::with_capacity(4096);
    }
    buf.clear();
    loop {
        let avail = r.fill_buf().await.map_err(ReadError::Io)?;
        if avail.is_empty() {
            return if buf.is_empty() {
                Ok(false)
            } else {
                Err(ReadError::Truncated)
            };
        }
        match memchr::memchr(b'\n', avail) {
            Some(i) => {
                if buf.len() + i > max {
                    return Err(ReadError::TooLong);
                }
                buf.extend_from_slice(&avail[..i]);
                r.consume(i + 1);
                return Ok(true);
            }
            None => {
                let n = avail.len();
                if buf.len() + n > max {
                    return Err(ReadError::TooLong);
                }
                buf.extend_from_slice(avail);
                r.consume(n);
            }
        }
    }
}

pub(super) async fn read_loop<R: AsyncRead + Unpin>(inner: Arc<Inner>, reader: R) {
    let max = inner.opts.max_message_bytes;
    let mut r = BufReader::with_capacity(64 * 1024, reader);
    let mut buf = Vec::with_capacity(4096);
    loop {
        match read_line(&mut r, &mut buf, max).await {
            Ok(true) => {}
            Ok(false) => {
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
        }
        if buf.is_empty() || buf.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        let msg: Incoming = match serde_json::from_slice(&buf) {
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
