//! Serving what the peer sends: each request in its own task within the bound of
//! requests served at once, answered exactly once (or cancelled), notifications
//! (`$/cancel` among them) and the answers to this side's calls.

use super::*;

fn id_key(id: &Value) -> String {
    id.to_string()
}

fn reply_error(inner: &Inner, id: &Value, error: &RpcError) {
    if let Ok(line) = encode(&OutError {
        jsonrpc: "2.0",
        id,
        error,
    }) {
        inner.send_reply(line);
    }
}

pub(super) fn on_request(inner: &Arc<Inner>, id: Value, method: String, params: Box<RawValue>) {
    if inner.in_transaction.load(Ordering::SeqCst) > 0 {
        let e = RpcError::new(
            Code::ReentrantCall,
            format!("{method} refused: an in-transaction call to this peer is outstanding"),
        );
        reply_error(inner, &id, &e);
        return;
    }
    let key = id_key(&id);
    let cancel = CancelToken::new();
    {
        let mut serving = lock(&inner.serving);
        if serving.len() >= inner.opts.max_inflight {
            drop(serving);
            let e = RpcError::new(
                Code::Overloaded,
                format!(
                    "{method} refused: {} requests already in flight (max_inflight)",
                    inner.opts.max_inflight
                ),
            );
            reply_error(inner, &id, &e);
            return;
        }
        if serving.contains_key(&key) {
            drop(serving);
            let e = RpcError {
                code: INVALID_REQUEST,
                message: format!("request id {key} is already in flight"),
                data: None,
            };
            reply_error(inner, &id, &e);
            return;
        }
        serving.insert(key.clone(), cancel.clone());
    }
    let responder = Responder {
        inner: inner.clone(),
        id: Some(id),
        key,
    };
    let request = Request {
        method,
        params,
        peer: Peer {
            inner: inner.clone(),
        },
        cancel: cancel.clone(),
    };
    let timed = inner.opts.serve_times.as_ref().map(|t| {
        (
            t.0.clone(),
            t.0.slot(&request.method),
            std::time::Instant::now(),
        )
    });
    let fut = inner.handler.call(request);
    tokio::spawn(async move {
        let result = tokio::select! {
            biased;
            _ = cancel.cancelled() => Err(RpcError::cancelled()),
            r = fut => r,
        };
        if let Some((times, slot, at)) = timed {
            times.served(slot, at.elapsed());
        }
        responder.respond(result);
    });
}

/// Answers a request exactly once: with the handler's result, or `internal` if the
/// handler's task ends without one (a panic).
struct Responder {
    inner: Arc<Inner>,
    id: Option<Value>,
    key: String,
}

impl Responder {
    fn respond(mut self, result: Result<Reply, RpcError>) {
        let Some(id) = self.id.take() else { return };
        self.finish(&id, result);
    }

    fn finish(&self, id: &Value, result: Result<Reply, RpcError>) {
        // Once the connection closed, nothing is sent.
        if !lock(&self.inner.serving).contains_key(&self.key) {
            return;
        }
        let max = self.inner.send_limit();
        let line = match &result {
            Ok(value) => self.inner.encode(&OutResult {
                jsonrpc: "2.0",
                id,
                result: value,
            }),
            Err(error) => encode(&OutError {
                jsonrpc: "2.0",
                id,
                error,
            }),
        };
        let line = match line {
            Ok(line) if line.len() - 1 <= max => line,
            Ok(line) => {
                let e = RpcError::new(
                    Code::Internal,
                    format!(
                        "the answer is {} bytes, over the {max}-byte message limit (max_message_bytes)",
                        line.len() - 1
                    ),
                );
                match encode(&OutError {
                    jsonrpc: "2.0",
                    id,
                    error: &e,
                }) {
                    Ok(l) => l,
                    Err(_) => {
                        self.forget();
                        return;
                    }
                }
            }
            Err(e) => match encode(&OutError {
                jsonrpc: "2.0",
                id,
                error: &RpcError::unauthored(e),
            }) {
                Ok(l) => l,
                Err(_) => {
                    self.forget();
                    return;
                }
            },
        };
        // Removed and queued under one lock: whoever sees `serving` without this
        // request (idle, then close) sees its answer queued.
        let mut serving = lock(&self.inner.serving);
        if serving.remove(&self.key).is_none() {
            return;
        }
        let queued = self.inner.queue_reply(line);
        let idle = serving.is_empty();
        drop(serving);
        if queued.is_err() {
            self.inner.not_reading();
        }
        if idle {
            self.inner.idle.notify_waiters();
        }
    }

    /// No longer served, with no answer (it could not be encoded at all).
    fn forget(&self) {
        let mut serving = lock(&self.inner.serving);
        serving.remove(&self.key);
        let idle = serving.is_empty();
        drop(serving);
        if idle {
            self.inner.idle.notify_waiters();
        }
    }
}

impl Drop for Responder {
    fn drop(&mut self) {
        if let Some(id) = self.id.take() {
            self.finish(
                &id,
                Err(RpcError::unauthored("the handler ended without an answer")),
            );
        }
    }
}

pub(super) fn on_notification(inner: &Arc<Inner>, method: &str, params: Value) {
    if method == CANCEL_METHOD || method == LSP_CANCEL_METHOD {
        if let Some(id) = params.get("id") {
            // The request stops being served here, in the stream's order, and is
            // answered `cancelled` now: its place is free before the canceller's next
            // request is read, so a caller keeping to max_inflight is never refused.
            let mut serving = lock(&inner.serving);
            if let Some(token) = serving.remove(&id_key(id)) {
                token.cancel();
                // Removed and answered under one lock, as a finished request is.
                let queued = encode(&OutError {
                    jsonrpc: "2.0",
                    id,
                    error: &RpcError::cancelled(),
                })
                .map_or(Ok(()), |line| inner.queue_reply(line));
                let idle = serving.is_empty();
                drop(serving);
                if queued.is_err() {
                    inner.not_reading();
                }
                if idle {
                    inner.idle.notify_waiters();
                }
            }
        }
        return;
    }
    let peer = Peer {
        inner: inner.clone(),
    };
    inner.handler.notify(&peer, method, params);
}

pub(super) fn on_response(
    inner: &Arc<Inner>,
    id: Value,
    result: Option<&RawValue>,
    error: Option<RpcError>,
) {
    let Some(id) = id.as_u64() else {
        tracing::debug!(peer = %inner.opts.name, %id, "answer to an id never sent; discarded");
        return;
    };
    let Some(tx) = lock(&inner.pending).remove(&id) else {
        // A late answer to a cancelled or timed-out call.
        tracing::debug!(peer = %inner.opts.name, id, "late answer discarded");
        return;
    };
    let outcome = match error {
        Some(e) => Err(CallError::Rpc(e)),
        None => Ok(result.map_or_else(null_raw, RawValue::to_owned)),
    };
    let _ = tx.send(outcome);
}
