//! The connection's shared state at work ([`Inner`]'s methods): encoding into recycled
//! line buffers, a call's place on the wire (within the bounds of waiting calls and
//! bytes), the send bound, queueing lines and answers for the writer, and closing.

use super::*;

/// Counts a call among those waiting for a place, for as long as it waits.
struct Waiting<'a> {
    inner: &'a Inner,
    bytes: usize,
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.inner.waiting.fetch_sub(1, Ordering::SeqCst);
        self.inner
            .waiting_bytes
            .fetch_sub(self.bytes, Ordering::SeqCst);
    }
}

impl Inner {
    /// [`encode`], into a line buffer the writer is done with when there is one: a
    /// stream of large messages (artifact chunks) is then written into memory
    /// already mapped, not into fresh pages grown by doubling, each message.
    pub(super) fn encode<T: Serialize>(&self, msg: &T) -> Result<Vec<u8>, CallError> {
        let spare = lock(&self.spare).pop();
        match spare {
            Some(buf) => encode_into(buf, msg),
            None => encode(msg),
        }
    }

    /// Keep a written line's buffer for [`Inner::encode`], if it is worth keeping.
    pub(super) fn recycle(&self, mut line: Vec<u8>) {
        if !(SPARE_MIN_BYTES..=SPARE_MAX_BYTES).contains(&line.capacity()) {
            return;
        }
        let mut spare = lock(&self.spare);
        if spare.len() < SPARE_BUFFERS {
            line.clear();
            spare.push(line);
        }
    }

    /// One of the `max_inflight` places on the wire for a call of `len` bytes: at
    /// once when one is free, else in turn, within the call's deadline and while it
    /// is not cancelled. Past a waiting bound, `overloaded` naming it.
    pub(super) async fn place(
        &self,
        method: &str,
        len: usize,
        timeout: Option<Duration>,
        cancel: &CancelToken,
    ) -> Result<OwnedSemaphorePermit, CallError> {
        if let Ok(p) = self.window.clone().try_acquire_owned() {
            return Ok(p);
        }
        let waiting = self.waiting.fetch_add(1, Ordering::SeqCst) + 1;
        let bytes = self.waiting_bytes.fetch_add(len, Ordering::SeqCst) + len;
        let _counted = Waiting {
            inner: self,
            bytes: len,
        };
        let over = |what: String| {
            CallError::Rpc(RpcError::new(
                Code::Overloaded,
                format!(
                    "{method} refused: {what} wait for one of the {} places on the wire to {}",
                    self.opts.max_inflight, self.opts.name
                ),
            ))
        };
        if waiting > self.opts.max_waiting_calls {
            return Err(over(format!(
                "{} calls already (max_waiting_calls)",
                waiting - 1
            )));
        }
        if bytes > self.opts.max_waiting_bytes {
            return Err(over(format!(
                "{} bytes of calls already (max_waiting_bytes {})",
                bytes - len,
                self.opts.max_waiting_bytes
            )));
        }
        let mut closed = self.closed.subscribe();
        let acquire = self.window.clone().acquire_owned();
        let deadline = async {
            match timeout {
                Some(limit) => tokio::time::sleep(limit).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            p = acquire => p.map_err(|_| CallError::Transport(self.close_reason())),
            _ = cancel.cancelled() => Err(CallError::Cancelled),
            _ = deadline => Err(CallError::Timeout(timeout.unwrap_or_default())),
            _ = closed.wait_for(Option::is_some) => Err(CallError::Transport(self.close_reason())),
        }
    }

    pub(super) fn send_limit(&self) -> usize {
        self.send_limit.load(Ordering::SeqCst)
    }

    pub(super) fn close_reason(&self) -> Arc<CloseReason> {
        self.closed
            .borrow()
            .clone()
            .unwrap_or_else(|| Arc::new(CloseReason::Local("connection dropped".into())))
    }

    pub(super) fn close(&self, reason: CloseReason, how: Shutdown) {
        let reason = Arc::new(reason);
        let first = self.closed.send_if_modified(|state| {
            if state.is_some() {
                return false;
            }
            *state = Some(reason.clone());
            true
        });
        if !first {
            return;
        }
        match &*reason {
            CloseReason::PeerClosed | CloseReason::Local(_) => {
                tracing::debug!(peer = %self.opts.name, %reason, "connection closed")
            }
            _ => tracing::warn!(peer = %self.opts.name, %reason, "connection closed"),
        }
        let pending: Vec<_> = lock(&self.pending).drain().collect();
        for (_, tx) in pending {
            let _ = tx.send(Err(CallError::Transport(reason.clone())));
        }
        let serving: Vec<_> = lock(&self.serving).drain().map(|(_, t)| t).collect();
        for token in serving {
            token.cancel();
        }
        self.idle.notify_waiters();
        if let Some(reader) = self.reader.get() {
            reader.abort();
        }
        match how {
            Shutdown::Flush => {
                let _ = self.out.send(Out::Close);
            }
            Shutdown::Abort => {
                if let Some(writer) = self.writer.get() {
                    writer.abort();
                }
            }
        }
        self.written.notify_waiters();
    }

    /// Queue a line that must not wait (an answer, a notification, a cancel). If the
    /// peer has left more than `max_queued_bytes` unread, it is not reading: close.
    pub(super) fn send_reply(&self, line: Vec<u8>) {
        if self.queue_reply(line).is_err() {
            self.not_reading();
        }
    }

    /// Queue a line that must not wait, or `Err` when the peer has left more than
    /// `max_queued_bytes` unread (the caller closes, with [`Inner::not_reading`]).
    /// Takes no lock, so it may be called holding one.
    pub(super) fn queue_reply(&self, line: Vec<u8>) -> Result<(), ()> {
        let len = line.len();
        let queued = self.queued_bytes.fetch_add(len, Ordering::SeqCst) + len;
        if queued > self.opts.max_queued_bytes {
            self.queued_bytes.fetch_sub(len, Ordering::SeqCst);
            return Err(());
        }
        if self.out.send(Out::Line(line)).is_err() {
            self.queued_bytes.fetch_sub(len, Ordering::SeqCst);
        }
        Ok(())
    }

    pub(super) fn not_reading(&self) {
        self.close(
            CloseReason::Protocol(format!(
                "the peer is not reading: more than {} bytes of output queued (max_queued_bytes)",
                self.opts.max_queued_bytes
            )),
            Shutdown::Abort,
        );
    }

    /// Queue a request line; the room was awaited before.
    pub(super) fn send_line(&self, line: Vec<u8>) -> Result<(), CallError> {
        let len = line.len();
        self.queued_bytes.fetch_add(len, Ordering::SeqCst);
        if self.out.send(Out::Line(line)).is_err() {
            self.queued_bytes.fetch_sub(len, Ordering::SeqCst);
            return Err(CallError::Transport(self.close_reason()));
        }
        Ok(())
    }

    /// A caller's request waits (it may: it is not the reader) while the peer has
    /// more than half the queue bound unread.
    pub(super) async fn wait_for_room(&self, len: usize) -> Result<(), CallError> {
        let room = |queued: usize| queued == 0 || queued + len <= self.opts.max_queued_bytes / 2;
        if room(self.queued_bytes.load(Ordering::SeqCst)) {
            return Ok(());
        }
        loop {
            let written = self.written.notified();
            tokio::pin!(written);
            written.as_mut().enable();
            if let Some(reason) = self.closed.borrow().clone() {
                return Err(CallError::Transport(reason));
            }
            if room(self.queued_bytes.load(Ordering::SeqCst)) {
                return Ok(());
            }
            written.await;
        }
    }
}
