//! The calling side of a connection, [`Peer`]'s methods: calls (typed, raw, prepared,
//! in transaction) within the bound of calls on the wire, the guard that cancels an
//! abandoned call, notifications, the send bound, and closing.

use super::*;

impl Peer {
    /// The connection's name.
    pub fn name(&self) -> &str {
        &self.inner.opts.name
    }

    /// Call `method` and wait for its answer.
    pub async fn call<P: Serialize + ?Sized>(
        &self,
        method: &str,
        params: &P,
    ) -> Result<Value, CallError> {
        self.call_with(method, params, CallOptions::default()).await
    }

    /// Call `method` and decode its answer into `T`.
    pub async fn call_as<P: Serialize + ?Sized, T: DeserializeOwned>(
        &self,
        method: &str,
        params: &P,
    ) -> Result<T, CallError> {
        let raw = self
            .call_raw(method, params, CallOptions::default())
            .await?;
        serde_json::from_str(raw.get())
            .map_err(|e| CallError::Codec(format!("answer to {method} does not decode: {e}")))
    }

    /// A typed call: the method is the params type's, and the answer decodes into
    /// its result type. A request of `{}` params is sent as `{}`.
    pub async fn call_typed<C: crate::wire::Call>(
        &self,
        params: &C,
    ) -> Result<C::Result, CallError> {
        self.call_as(C::METHOD, params).await
    }

    /// An in-transaction call: bounded by [`IN_TRANSACTION_DEADLINE`], and every
    /// callback from the peer meanwhile is refused with `reentrant_call`.
    pub async fn call_in_transaction<P: Serialize + ?Sized>(
        &self,
        method: &str,
        params: &P,
    ) -> Result<Value, CallError> {
        let opts = CallOptions {
            timeout: Some(IN_TRANSACTION_DEADLINE),
            cancel: None,
            in_transaction: true,
        };
        self.call_with(method, params, opts).await
    }

    /// Call with a deadline, a cancellation token, or in a transaction. Dropping the
    /// returned future before it completes cancels the call (`$/cancel`).
    pub async fn call_with<P: Serialize + ?Sized>(
        &self,
        method: &str,
        params: &P,
        opts: CallOptions,
    ) -> Result<Value, CallError> {
        let raw = self.call_raw(method, params, opts).await?;
        serde_json::from_str(raw.get())
            .map_err(|e| CallError::Codec(format!("answer to {method}: {e}")))
    }

    /// [`Peer::call_with`], answering the result exactly as it arrived.
    pub async fn call_raw<P: Serialize + ?Sized>(
        &self,
        method: &str,
        params: &P,
        opts: CallOptions,
    ) -> Result<Box<RawValue>, CallError> {
        let request = self.prepare(method, params)?;
        self.call_prepared(request, opts).await
    }

    /// Encode a request now, to call later with [`Peer::call_prepared`]: for a
    /// caller that sends requests one after another, each once the one before is
    /// answered (artifact chunks), to encode the next while the peer serves the
    /// current. Refused [`CallError::TooLarge`] now if over the send bound. A
    /// request never called is never sent.
    pub fn prepare<P: Serialize + ?Sized>(
        &self,
        method: &str,
        params: &P,
    ) -> Result<Prepared, CallError> {
        let inner = &self.inner;
        if let Some(reason) = inner.closed.borrow().clone() {
            return Err(CallError::Transport(reason));
        }
        let id = inner.next_id.fetch_add(1, Ordering::Relaxed);
        let line = inner.encode(&OutRequest {
            jsonrpc: "2.0",
            id,
            method,
            params,
        })?;
        let limit = inner.send_limit();
        if line.len() - 1 > limit {
            return Err(CallError::TooLarge {
                size: line.len() - 1,
                limit,
            });
        }
        Ok(Prepared {
            method: method.to_string(),
            id,
            line,
        })
    }

    /// Send a [`Peer::prepare`]d request and wait for its answer, as
    /// [`Peer::call_raw`] does.
    pub async fn call_prepared(
        &self,
        request: Prepared,
        opts: CallOptions,
    ) -> Result<Box<RawValue>, CallError> {
        let inner = &self.inner;
        let Prepared { method, id, line } = request;
        let method = method.as_str();
        if let Some(reason) = inner.closed.borrow().clone() {
            return Err(CallError::Transport(reason));
        }
        let started = tokio::time::Instant::now();
        let cancel = opts.cancel.clone().unwrap_or_default();
        // A place on the wire, kept until the answer (or until the call is abandoned,
        // after its `$/cancel` is queued: the guard below is dropped first).
        let _place = inner
            .place(method, line.len(), opts.timeout, &cancel)
            .await?;
        let _tx_guard = opts.in_transaction.then(|| TxGuard::new(inner));
        let (tx, rx) = oneshot::channel();
        lock(&inner.pending).insert(id, tx);
        let mut guard = PendingGuard {
            inner: inner.clone(),
            id,
            armed: true,
        };
        // close() marks the connection closed before it drains `pending`, so
        // either the drain saw this call or this check sees the close.
        if let Some(reason) = inner.closed.borrow().clone() {
            guard.armed = false;
            lock(&inner.pending).remove(&id);
            return Err(CallError::Transport(reason));
        }
        inner.wait_for_room(line.len()).await?;
        inner.send_line(line)?;

        let answer = async {
            match rx.await {
                Ok(result) => result,
                // The sender is dropped only by a close that already answered.
                Err(_) => Err(CallError::Transport(inner.close_reason())),
            }
        };
        let result = match opts.timeout {
            Some(limit) => tokio::select! {
                r = answer => r,
                _ = cancel.cancelled() => Err(CallError::Cancelled),
                _ = tokio::time::sleep_until(started + limit) => Err(CallError::Timeout(limit)),
            },
            None => tokio::select! {
                r = answer => r,
                _ = cancel.cancelled() => Err(CallError::Cancelled),
            },
        };
        if !matches!(
            result,
            Err(CallError::Cancelled) | Err(CallError::Timeout(_))
        ) {
            guard.armed = false;
        }
        result
    }

    /// Send a notification.
    pub fn notify<P: Serialize + ?Sized>(&self, method: &str, params: &P) -> Result<(), CallError> {
        let inner = &self.inner;
        if let Some(reason) = inner.closed.borrow().clone() {
            return Err(CallError::Transport(reason));
        }
        let line = encode(&OutNotification {
            jsonrpc: "2.0",
            method,
            params,
        })?;
        let limit = inner.send_limit();
        if line.len() - 1 > limit {
            return Err(CallError::TooLarge {
                size: line.len() - 1,
                limit,
            });
        }
        inner.send_reply(line);
        Ok(())
    }

    /// Send a notification only if the peer has less than `room` bytes of output
    /// unread; otherwise drop it and answer `false`. For fan-out to subscribers:
    /// a slow reader loses notifications and never holds anyone up.
    pub fn notify_if_room<P: Serialize + ?Sized>(
        &self,
        method: &str,
        params: &P,
        room: usize,
    ) -> Result<bool, CallError> {
        if self.inner.queued_bytes.load(Ordering::SeqCst) >= room {
            return Ok(false);
        }
        self.notify(method, params).map(|()| true)
    }

    /// The most bytes a message sent to the peer may have now.
    pub fn max_send_bytes(&self) -> usize {
        self.inner.send_limit()
    }

    /// Send the peer messages of up to `bytes` from now on: it said it reads them
    /// (see [`agreed_message_bytes`]).
    pub fn set_max_send_bytes(&self, bytes: usize) {
        self.inner.send_limit.store(bytes, Ordering::SeqCst);
    }

    /// Bytes queued for the peer and not yet written.
    pub fn queued_bytes(&self) -> usize {
        self.inner.queued_bytes.load(Ordering::SeqCst)
    }

    /// True when `other` is a handle of this same connection (not merely one to the
    /// same peer): what the host binds a run it opened to.
    pub fn same_connection(&self, other: &Peer) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }

    /// True once the connection has closed.
    pub fn is_closed(&self) -> bool {
        self.inner.closed.borrow().is_some()
    }

    /// Resolves with the reason once the connection has closed.
    pub async fn closed(&self) -> Arc<CloseReason> {
        let mut rx = self.inner.closed.subscribe();
        loop {
            if let Some(reason) = rx.borrow_and_update().clone() {
                return reason;
            }
            if rx.changed().await.is_err() {
                return self.inner.close_reason();
            }
        }
    }

    /// Resolves once the connection has closed and everything queued before the
    /// close was written (or the writer gave up): wait for this before the process
    /// exits, so a last answer or error reaches the peer. Bounded by `limit`.
    pub async fn finished(&self, limit: Duration) -> Arc<CloseReason> {
        let reason = self.closed().await;
        let mut rx = self.inner.writer_done.subscribe();
        let _ = tokio::time::timeout(limit, rx.wait_for(|done| *done)).await;
        reason
    }

    /// Close: fail every pending call, cancel every request being served, flush
    /// what is queued and shut the stream down (the peer sees EOF).
    pub fn close(&self, why: &str) {
        self.inner
            .close(CloseReason::Local(why.to_string()), Shutdown::Flush);
    }

    /// The number of requests from the peer being served now.
    pub fn serving(&self) -> usize {
        lock(&self.inner.serving).len()
    }

    /// Resolves once no request from the peer is being served: each has been
    /// answered (its answer queued before this resolves, so a [`Peer::close`]
    /// after it still writes them) or the connection closed.
    pub async fn idle(&self) {
        loop {
            let idle = self.inner.idle.notified();
            tokio::pin!(idle);
            idle.as_mut().enable();
            if lock(&self.inner.serving).is_empty() {
                return;
            }
            idle.await;
        }
    }

    /// Cancel every request from the peer being served now, as `$/cancel` would:
    /// each handler's token fires, its future is dropped, and it is answered
    /// -32800. The connection stays open.
    pub fn cancel_serving(&self) {
        let tokens: Vec<CancelToken> = lock(&self.inner.serving).values().cloned().collect();
        for token in tokens {
            token.cancel();
        }
    }
}

struct PendingGuard {
    inner: Arc<Inner>,
    id: u64,
    armed: bool,
}

impl Drop for PendingGuard {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        // Abandoned (dropped, cancelled or timed out): forget the id, so a late
        // answer is discarded, and tell the peer to stop.
        let was_pending = lock(&self.inner.pending).remove(&self.id).is_some();
        if was_pending && self.inner.closed.borrow().is_none() {
            let params = serde_json::json!({ "id": self.id });
            if let Ok(line) = encode(&OutNotification {
                jsonrpc: "2.0",
                method: CANCEL_METHOD,
                params: &params,
            }) {
                self.inner.send_reply(line);
            }
        }
    }
}

struct TxGuard<'a>(&'a Inner);

impl<'a> TxGuard<'a> {
    fn new(inner: &'a Inner) -> Self {
        inner.in_transaction.fetch_add(1, Ordering::SeqCst);
        TxGuard(inner)
    }
}

impl Drop for TxGuard<'_> {
    fn drop(&mut self) {
        self.0.in_transaction.fetch_sub(1, Ordering::SeqCst);
    }
}
