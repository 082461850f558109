//! Calls gathered into one bus message under load, and served apart again.
//!
//! A caller of [`crate::bus::Bus::call_gathered`] hands the params of one call and
//! waits for its own answer. The calls of one method (and key) go out in batches, at
//! most [`BatchLimits::in_flight`] batches at once: while that many are out, the
//! calls that arrive wait and go together in the next one. At rest every call goes
//! alone and at once as the plain method (nothing waits for company); under load a
//! batch holds what arrived during one round trip, up to [`BatchLimits::max_calls`]
//! and [`BatchLimits::max_bytes`] of params.
//!
//! A batch of several calls of `svc.method` is the request `svc.batch {method, calls}`,
//! routed like any `svc.*` method. Its answer is `{answers: [{result} | {error}]}`,
//! one per call in order: each call succeeds or fails on its own, exactly as it
//! would alone. The serving side ([`serve`]) runs the calls of a batch through the
//! service's own handler, concurrently, so a batched call is served by the very
//! code that serves it alone.

use protocol::{BoxFuture, CallError, Code, Handler, Reply, Request, RpcError};
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use std::sync::Arc;
use tokio::sync::{mpsc, oneshot, Semaphore};

/// The most calls one batch request may carry.
pub const MAX_BATCH_CALLS: usize = 256;

/// How calls are gathered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchLimits {
    /// The most calls in one batch (at most [`MAX_BATCH_CALLS`]).
    pub max_calls: usize,
    /// The most bytes of params in one batch; a call over it goes alone.
    pub max_bytes: usize,
    /// How many batches may be out at once; the calls that arrive meanwhile wait
    /// for the next batch.
    pub in_flight: usize,
    /// How many calls may wait for a batch; a caller past it waits for room.
    pub queue: usize,
}

impl Default for BatchLimits {
    fn default() -> Self {
        BatchLimits {
            max_calls: 64,
            max_bytes: 1024 * 1024,
            in_flight: 8,
            queue: 1024,
        }
    }
}

/// The method a batch of `method`'s calls goes as: `svc.batch` for `svc.name`.
pub fn batch_method(method: &str) -> Option<String> {
    let (service, name) = method.split_once('.')?;
    (!service.is_empty() && !name.is_empty() && name != "batch").then(|| format!("{service}.batch"))
}

/// The params of `svc.batch`.
#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BatchParams<C> {
    /// The method of every call, of the same service.
    pub method: String,
    /// Each call's params, in order.
    pub calls: Vec<C>,
}

/// One call's outcome in a batch's answer: exactly one of the two is present.
#[derive(Debug, Default, Serialize, Deserialize)]
pub struct Outcome {
    /// The call's result, as its method answers it alone.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<Box<RawValue>>,
    /// The call's error, as its method answers it alone.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<RpcError>,
}

/// The answer of `svc.batch`.
#[derive(Debug, Default, Serialize, Deserialize)]
pub struct BatchAnswer {
    /// One per call, in order.
    pub answers: Vec<Outcome>,
}

/// True for a batch request: `svc.batch`.
pub fn is_batch(method: &str) -> bool {
    method
        .strip_suffix(".batch")
        .is_some_and(|service| !service.is_empty() && !service.contains('.'))
}

/// Serve the batch `request` ([`is_batch`]) through `handler`: each call as a request
/// of its own, all at once, answered in order.
pub fn serve(handler: &Arc<dyn Handler>, request: Request) -> BoxFuture<Result<Reply, RpcError>> {
    let params: BatchParams<Box<RawValue>> = match request.params() {
        Ok(p) => p,
        Err(e) => return Box::pin(async move { Err(e) }),
    };
    let refusal = if params.calls.len() > MAX_BATCH_CALLS {
        Some(RpcError::invalid_params(format!(
            "a batch of {} calls is over MAX_BATCH_CALLS ({MAX_BATCH_CALLS})",
            params.calls.len()
        )))
    } else if batch_method(&params.method).as_deref() != Some(request.method.as_str()) {
        Some(RpcError::invalid_params(format!(
            "{} carries calls of {}, not of its own service",
            request.method, params.method
        )))
    } else {
        None
    };
    if let Some(e) = refusal {
        return Box::pin(async move { Err(e) });
    }
    let running: Vec<_> = params
        .calls
        .into_iter()
        .map(|p| {
            tokio::spawn(handler.call(Request {
                method: params.method.clone(),
                params: p,
                peer: request.peer.clone(),
                cancel: request.cancel.clone(),
            }))
        })
        .collect();
    Box::pin(async move {
        let mut answers = Vec::with_capacity(running.len());
        for call in running {
            answers.push(match call.await {
                Ok(Ok(result)) => Outcome {
                    result: Some(result),
                    error: None,
                },
                Ok(Err(error)) => Outcome {
                    result: None,
                    error: Some(error),
                },
                Err(_) => Outcome {
                    result: None,
                    error: Some(RpcError::new(
                        Code::Internal,
                        "the call failed inside its service (see its log)",
                    )),
                },
            });
        }
        protocol::reply(&BatchAnswer { answers })
    })
}

type Answer = Result<Box<RawValue>, CallError>;
type Queued = (Box<RawValue>, oneshot::Sender<Answer>);

/// How a batch goes out: the plain method for one call, the batch for several.
pub trait BatchSend: Send + Sync + 'static {
    /// Send one call of `method` and answer its result.
    fn one(&self, method: &str, params: Box<RawValue>) -> BoxFuture<Answer>;
    /// Send `params` (calls of one method) as the request `batch`, and answer its
    /// raw result. The request is encoded before this returns.
    fn many(&self, batch: &str, params: &BatchParams<Box<RawValue>>) -> BoxFuture<Answer>;
}

/// The calls of one method gathered into batches (see the module's documentation).
pub struct Gatherer {
    queue: mpsc::Sender<Queued>,
}

impl Gatherer {
    /// Gather calls of `method`, sent through `send`. Must be called within a tokio
    /// runtime: the gathering task starts now and ends when the gatherer is dropped.
    pub fn start(method: &str, limits: BatchLimits, send: Arc<dyn BatchSend>) -> Gatherer {
        let (queue, rx) = mpsc::channel(limits.queue.max(1));
        tokio::spawn(gather(method.to_owned(), limits, send, rx));
        Gatherer { queue }
    }

    /// Call with `params` in the next batch, and answer this call's own result.
    pub async fn call(&self, params: Box<RawValue>) -> Answer {
        let (tx, rx) = oneshot::channel();
        let gone = || CallError::Rpc(RpcError::new(Code::Unavailable, "the bus client stopped"));
        self.queue.send((params, tx)).await.map_err(|_| gone())?;
        rx.await.map_err(|_| gone())?
    }
}

async fn gather(
    method: String,
    limits: BatchLimits,
    send: Arc<dyn BatchSend>,
    mut rx: mpsc::Receiver<Queued>,
) {
    let Some(batch) = batch_method(&method) else {
        // No service to batch for: every call goes alone.
        while let Some((params, reply)) = rx.recv().await {
            let answer = send.one(&method, params);
            tokio::spawn(async move {
                let _ = reply.send(answer.await);
            });
        }
        return;
    };
    let slots = Arc::new(Semaphore::new(limits.in_flight.max(1)));
    let max_calls = limits.max_calls.clamp(1, MAX_BATCH_CALLS);
    let mut carried: Option<Queued> = None;
    loop {
        let first = match carried.take() {
            Some(q) => q,
            None => match rx.recv().await {
                Some(q) => q,
                None => return,
            },
        };
        // While every slot is out, the calls that arrive wait in the queue.
        let Ok(slot) = slots.clone().acquire_owned().await else {
            return;
        };
        let mut bytes = first.0.get().len();
        let mut calls = vec![first];
        while calls.len() < max_calls {
            let Ok(next) = rx.try_recv() else { break };
            let size = next.0.get().len();
            if bytes + size > limits.max_bytes {
                carried = Some(next);
                break;
            }
            bytes += size;
            calls.push(next);
        }
        let (send, method, batch) = (send.clone(), method.clone(), batch.clone());
        tokio::spawn(async move {
            let _slot = slot;
            let (params, replies): (Vec<_>, Vec<_>) = calls.into_iter().unzip();
            if params.len() == 1 {
                if let (Some(p), Some(reply)) =
                    (params.into_iter().next(), replies.into_iter().next())
                {
                    let _ = reply.send(send.one(&method, p).await);
                }
                return;
            }
            let n = params.len();
            let params = BatchParams {
                method,
                calls: params,
            };
            let answers = match send.many(&batch, &params).await {
                // A service that serves no batches (an older one): each call alone.
                Err(CallError::Rpc(e)) if e.code == protocol::error::METHOD_NOT_FOUND => {
                    let mut answers = Vec::with_capacity(n);
                    for p in params.calls {
                        answers.push(send.one(&params.method, p).await);
                    }
                    answers
                }
                answer => split(&batch, n, answer),
            };
            for (reply, answer) in replies.into_iter().zip(answers) {
                let _ = reply.send(answer);
            }
        });
    }
}

/// Each call's answer from a batch's: a failure of the batch as a whole is each
/// call's failure.
fn split(batch: &str, n: usize, answer: Answer) -> Vec<Answer> {
    let raw = match answer {
        Ok(raw) => raw,
        Err(e) => return vec![Err(e); n],
    };
    let decoded: BatchAnswer = match serde_json::from_str(raw.get()) {
        Ok(a) => a,
        Err(e) => {
            let e = CallError::Codec(format!("the answer to {batch} does not decode: {e}"));
            return vec![Err(e); n];
        }
    };
    let got = decoded.answers.len();
    let mut out: Vec<Answer> = decoded
        .answers
        .into_iter()
        .take(n)
        .map(|o| match (o.result, o.error) {
            (_, Some(e)) => Err(CallError::Rpc(e)),
            (Some(r), None) => Ok(r),
            (None, None) => Err(CallError::Codec(format!(
                "an answer of {batch} has neither result nor error"
            ))),
        })
        .collect();
    while out.len() < n {
        out.push(Err(CallError::Codec(format!(
            "{batch} answered {got} calls of {n}"
        ))));
    }
    out
}
