//! The connection over real unix stream sockets: both ends in this process, or one
//! end driven raw, line by line, to see exactly what crosses.

#![allow(clippy::unwrap_used)]

use protocol::{
    connect, CallError, CallOptions, CancelToken, CloseReason, Code, FnHandler, NoHandler, Options,
    Peer, Request, RpcError,
};
use serde_json::{json, Value};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::UnixStream;
use tokio::sync::{mpsc, Notify};

/// A long bound for "this must happen", never a timing assertion: it only turns a
/// hang into a failure.
const HANG: Duration = Duration::from_secs(30);

async fn within<F: std::future::Future>(f: F) -> F::Output {
    tokio::time::timeout(HANG, f).await.expect("hung")
}

fn echo_handler() -> FnHandler<impl Fn(Request) -> protocol::BoxFuture<Result<Value, RpcError>>> {
    FnHandler(
        |req: Request| -> protocol::BoxFuture<Result<Value, RpcError>> {
            Box::pin(async move {
                let params = req.params_value()?;
                match req.method.as_str() {
                    "echo" => Ok(params),
                    "fail" => Err(RpcError::authored("rate_limited", "slow down, friend")),
                    "secret" => Err(RpcError::unauthored("db password is hunter2")),
                    "panic" => panic!("handler bug"),
                    "sleep" => {
                        let ms = params.as_u64().unwrap_or(50);
                        tokio::time::sleep(Duration::from_millis(ms)).await;
                        Ok(json!(ms))
                    }
                    // Calls the peer back `n` times while serving this request.
                    "nested" => {
                        let n = params.as_u64().unwrap_or(0);
                        let mut sum = 0;
                        for i in 0..n {
                            let v = req.peer.call("echo", &json!(i)).await.map_err(|e| {
                                RpcError::authored("callback_failed", e.to_string())
                            })?;
                            sum += v.as_u64().unwrap_or(0);
                        }
                        Ok(json!(sum))
                    }
                    // Calls the peer back once; answers what that callback ended in.
                    "callback" => match req.peer.call("echo", &json!("x")).await {
                        Ok(v) => Ok(v),
                        Err(e) => Ok(json!({"refused": e.code()})),
                    },
                    other => Err(RpcError::method_not_found(other)),
                }
            })
        },
    )
}

fn pair() -> (Peer, Peer) {
    let (a, b) = UnixStream::pair().unwrap();
    let (ar, aw) = a.into_split();
    let (br, bw) = b.into_split();
    let pa = connect(ar, aw, echo_handler(), Options::named("a"));
    let pb = connect(br, bw, echo_handler(), Options::named("b"));
    (pa, pb)
}

/// One end a connection, the other raw lines.
struct Raw {
    lines: tokio::io::Lines<BufReader<tokio::net::unix::OwnedReadHalf>>,
    w: tokio::net::unix::OwnedWriteHalf,
}

impl Raw {
    async fn send(&mut self, v: Value) {
        let mut line = serde_json::to_vec(&v).unwrap();
        line.push(b'\n');
        self.w.write_all(&line).await.unwrap();
    }
    async fn recv(&mut self) -> Option<Value> {
        let line = within(self.lines.next_line()).await.ok()??;
        Some(serde_json::from_str(&line).unwrap())
    }
}

fn raw_pair<H: protocol::Handler>(handler: H, opts: Options) -> (Peer, Raw) {
    let (a, b) = UnixStream::pair().unwrap();
    let (ar, aw) = a.into_split();
    let (br, bw) = b.into_split();
    let peer = connect(ar, aw, handler, opts);
    (
        peer,
        Raw {
            lines: BufReader::new(br).lines(),
            w: bw,
        },
    )
}

#[tokio::test]
async fn either_side_calls_the_other() {
    let (a, b) = pair();
    assert_eq!(
        within(a.call("echo", &json!({"x": 1}))).await.unwrap(),
        json!({"x": 1})
    );
    assert_eq!(
        within(b.call("echo", &json!([1, 2]))).await.unwrap(),
        json!([1, 2])
    );
}

#[tokio::test]
async fn answers_arrive_in_any_order_and_match_their_calls() {
    let (a, _b) = pair();
    let (p300, p1) = (json!(300), json!(1));
    let slow = a.call("sleep", &p300);
    let fast = a.call("sleep", &p1);
    let (slow, fast) = within(async { tokio::join!(slow, fast) }).await;
    assert_eq!(slow.unwrap(), json!(300));
    assert_eq!(fast.unwrap(), json!(1));

    // 32 callers at once (under the 64 in flight), 50 calls each.
    let callers = (0..32).map(|c| {
        let a = a.clone();
        async move {
            for i in 0..50 {
                let v = a.call("echo", &json!([c, i])).await.unwrap();
                assert_eq!(v, json!([c, i]));
            }
            c
        }
    });
    assert_eq!(within(join_all(callers)).await, (0..32).collect::<Vec<_>>());
}

async fn join_all<F: std::future::Future + Send + 'static>(
    futs: impl Iterator<Item = F>,
) -> Vec<F::Output>
where
    F::Output: Send + 'static,
{
    let handles: Vec<_> = futs.map(tokio::spawn).collect();
    let mut out = Vec::new();
    for h in handles {
        out.push(h.await.unwrap());
    }
    out
}

#[tokio::test]
async fn nested_callbacks_work_while_serving() {
    let (a, _b) = pair();
    // b serves "nested" by calling a back 1,000 times.
    let sum = within(a.call("nested", &json!(1000))).await.unwrap();
    assert_eq!(sum, json!((0..1000u64).sum::<u64>()));
}

#[tokio::test]
async fn authored_errors_cross_verbatim_and_unknown_methods_are_distinct() {
    let (a, _b) = pair();
    let e = within(a.call("fail", &json!(null))).await.unwrap_err();
    let rpc = e.rpc().expect("an rpc error");
    assert_eq!(rpc.code, protocol::error::APP_ERROR);
    assert_eq!(rpc.app_code(), Some("rate_limited"));
    assert_eq!(rpc.message, "slow down, friend");

    let e = within(a.call("no.such", &json!(null))).await.unwrap_err();
    let rpc = e.rpc().expect("an rpc error");
    assert_eq!(rpc.code, protocol::error::METHOD_NOT_FOUND);
    assert_eq!(rpc.app_code(), None);
}

#[tokio::test]
async fn unauthored_errors_and_panics_cross_as_internal_without_detail() {
    let (a, _b) = pair();
    let e = within(a.call("secret", &json!(null))).await.unwrap_err();
    assert!(e.is(Code::Internal));
    assert!(!e.to_string().contains("hunter2"), "{e}");

    let e = within(a.call("panic", &json!(null))).await.unwrap_err();
    assert!(e.is(Code::Internal), "{e:?}");
    // The connection survives a handler's panic.
    assert_eq!(within(a.call("echo", &json!(7))).await.unwrap(), json!(7));
}

#[tokio::test]
async fn the_65th_request_is_answered_overloaded_at_once() {
    let release = Arc::new(Notify::new());
    let started = Arc::new(AtomicUsize::new(0));
    let (r2, s2) = (release.clone(), started.clone());
    let handler = FnHandler(move |req: Request| {
        let release = r2.clone();
        let started = s2.clone();
        async move {
            if req.method == "block" {
                let wait = release.notified();
                started.fetch_add(1, Ordering::SeqCst);
                wait.await;
            }
            Ok(json!("done"))
        }
    });
    let (peer, mut raw) = raw_pair(handler, Options::named("server"));
    for id in 0..64 {
        raw.send(json!({"jsonrpc": "2.0", "id": id, "method": "block"}))
            .await;
    }
    within(async {
        while peer.serving() < 64 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await;
    raw.send(json!({"jsonrpc": "2.0", "id": 64, "method": "block"}))
        .await;
    let answer = raw.recv().await.unwrap();
    assert_eq!(answer["id"], 64);
    assert_eq!(answer["error"]["data"]["code"], "overloaded");
    assert!(answer["error"]["message"].as_str().unwrap().contains("64"));
    // The reader was not paused: a cancel for one of the 64 is still served.
    raw.send(json!({"jsonrpc": "2.0", "method": "$/cancel", "params": {"id": 3}}))
        .await;
    let answer = raw.recv().await.unwrap();
    assert_eq!(answer["id"], 3);
    assert_eq!(answer["error"]["code"], -32800);
    while started.load(Ordering::SeqCst) < 64 {
        tokio::task::yield_now().await;
    }
    release.notify_waiters();
    let mut done = 0;
    while done < 63 {
        let a = raw.recv().await.unwrap();
        assert_eq!(a["result"], "done");
        done += 1;
    }
}

#[tokio::test]
async fn cancel_returns_at_once_reaches_the_handler_and_discards_the_late_answer() {
    let (seen_tx, mut seen_rx) = mpsc::unbounded_channel::<&'static str>();
    let handler = FnHandler(move |req: Request| {
        let seen = seen_tx.clone();
        async move {
            struct OnDrop(mpsc::UnboundedSender<&'static str>);
            impl Drop for OnDrop {
                fn drop(&mut self) {
                    let _ = self.0.send("dropped");
                }
            }
            let _guard = OnDrop(seen.clone());
            if req.method == "wait" {
                req.cancel.cancelled().await;
                let _ = seen.send("token");
            }
            Ok(json!(null))
        }
    });
    let (a, b) = UnixStream::pair().unwrap();
    let (ar, aw) = a.into_split();
    let (br, bw) = b.into_split();
    let caller = connect(ar, aw, NoHandler, Options::named("caller"));
    let _server = connect(br, bw, handler, Options::named("server"));

    let token = CancelToken::new();
    let opts = CallOptions {
        cancel: Some(token.clone()),
        ..Default::default()
    };
    let call = tokio::spawn({
        let caller = caller.clone();
        async move { caller.call_with("wait", &json!(null), opts).await }
    });
    tokio::time::sleep(Duration::from_millis(20)).await;
    token.cancel();
    assert_eq!(within(call).await.unwrap(), Err(CallError::Cancelled));
    // The handler's future was dropped: cancellation reached it.
    assert_eq!(within(seen_rx.recv()).await, Some("dropped"));
    // The connection is still good.
    let e = within(caller.call("other", &json!(null))).await;
    assert_eq!(e.unwrap(), json!(null));
}

#[tokio::test]
async fn a_cancelled_request_is_answered_minus_32800() {
    let handler = FnHandler(|_req: Request| async move {
        tokio::time::sleep(Duration::from_secs(3600)).await;
        Ok(json!(null))
    });
    let (_peer, mut raw) = raw_pair(handler, Options::named("server"));
    raw.send(json!({"jsonrpc": "2.0", "id": "abc", "method": "slow"}))
        .await;
    raw.send(json!({"jsonrpc": "2.0", "method": "$/cancel", "params": {"id": "abc"}}))
        .await;
    let a = raw.recv().await.unwrap();
    assert_eq!(a["id"], "abc");
    assert_eq!(a["error"]["code"], -32800);
}

/// A handler whose `slow` waits until cancelled and which reports every
/// notification it is handed.
struct SlowUntilCancelled(mpsc::UnboundedSender<String>);

impl protocol::Handler for SlowUntilCancelled {
    fn call(&self, req: Request) -> protocol::BoxFuture<Result<protocol::Reply, RpcError>> {
        Box::pin(async move {
            match req.method.as_str() {
                "slow" => {
                    req.cancel.cancelled().await;
                    protocol::reply(&"finished although cancelled")
                }
                "echo" => protocol::reply(&req.params_value()?),
                other => Err(RpcError::method_not_found(other)),
            }
        })
    }

    fn notify(&self, _peer: &Peer, method: &str, _params: Value) {
        let _ = self.0.send(method.to_string());
    }
}

#[tokio::test]
async fn the_lsp_cancel_request_name_cancels_like_cancel() {
    // vscode-jsonrpc and other LSP-derived peers cancel with `$/cancelRequest`.
    let (seen, mut notifications) = mpsc::unbounded_channel();
    let (_peer, mut raw) = raw_pair(SlowUntilCancelled(seen), Options::named("server"));
    raw.send(json!({"jsonrpc": "2.0", "id": 7, "method": "slow"}))
        .await;
    raw.send(json!({"jsonrpc": "2.0", "method": "$/cancelRequest", "params": {"id": 7}}))
        .await;
    let a = raw.recv().await.unwrap();
    assert_eq!(a["id"], 7, "{a}");
    assert_eq!(a["error"]["code"], -32800, "{a}");
    // Handled by the connection, not handed to the handler as a notification;
    // another notification still is, and the connection still serves.
    raw.send(json!({"jsonrpc": "2.0", "method": "other/note"}))
        .await;
    raw.send(json!({"jsonrpc": "2.0", "id": 8, "method": "echo", "params": [1]}))
        .await;
    let b = raw.recv().await.unwrap();
    assert_eq!(b, json!({"jsonrpc": "2.0", "id": 8, "result": [1]}));
    assert_eq!(within(notifications.recv()).await.unwrap(), "other/note");
}

#[tokio::test]
async fn idle_waits_for_answers_and_cancel_serving_answers_minus_32800_before_a_close() {
    let (seen, _notifications) = mpsc::unbounded_channel();
    let (peer, mut raw) = raw_pair(SlowUntilCancelled(seen), Options::named("server"));
    raw.send(json!({"jsonrpc": "2.0", "id": 1, "method": "slow"}))
        .await;
    raw.send(json!({"jsonrpc": "2.0", "id": 2, "method": "echo", "params": "x"}))
        .await;
    assert_eq!(raw.recv().await.unwrap()["result"], "x");
    // `slow` is still served: idle does not resolve until it is answered.
    let idle = tokio::spawn({
        let peer = peer.clone();
        async move { peer.idle().await }
    });
    assert_eq!(peer.serving(), 1);
    assert!(!idle.is_finished());
    peer.cancel_serving();
    within(idle).await.unwrap();
    assert_eq!(peer.serving(), 0);
    // A close right after idle still writes the answer, then EOF.
    peer.close("done");
    let a = raw.recv().await.unwrap();
    assert_eq!(a["id"], 1, "{a}");
    assert_eq!(a["error"]["code"], -32800, "{a}");
    assert_eq!(raw.recv().await, None, "then the stream ends");
}

#[tokio::test]
async fn a_dead_peer_fails_pending_and_later_calls_with_a_transport_error() {
    let handler = FnHandler(|_req: Request| async move {
        tokio::time::sleep(Duration::from_secs(3600)).await;
        Ok(json!(null))
    });
    let (a, b) = UnixStream::pair().unwrap();
    let (ar, aw) = a.into_split();
    let caller = connect(ar, aw, NoHandler, Options::named("caller"));
    let (br, bw) = b.into_split();
    let server = connect(br, bw, handler, Options::named("server"));
    let pending = tokio::spawn({
        let caller = caller.clone();
        async move { caller.call("slow", &json!(null)).await }
    });
    tokio::time::sleep(Duration::from_millis(20)).await;
    server.close("test kills the server");
    let e = within(pending).await.unwrap().unwrap_err();
    assert!(e.is_transport(), "{e:?}");
    assert_eq!(e.code(), None);
    let later = within(caller.call("echo", &json!(1))).await.unwrap_err();
    assert!(later.is_transport());
    assert_eq!(*within(caller.closed()).await, CloseReason::PeerClosed);
}

#[tokio::test]
async fn a_line_over_16_mib_closes_the_connection_and_says_why() {
    let (peer, mut raw) = raw_pair(NoHandler, Options::named("server"));
    let max = protocol::MAX_MESSAGE_BYTES;
    // A valid JSON string message of exactly max + 1 bytes.
    let mut line = vec![b' '; max + 1];
    line[0] = b'"';
    line[max] = b'"';
    line.push(b'\n');
    let writer = tokio::spawn(async move {
        let _ = raw.w.write_all(&line).await;
        raw.w
    });
    let reason = within(peer.closed()).await;
    match &*reason {
        CloseReason::Protocol(why) => assert!(why.contains("16777216"), "{why}"),
        other => panic!("{other:?}"),
    }
    let said = raw.lines.next_line().await.unwrap().unwrap();
    let said: Value = serde_json::from_str(&said).unwrap();
    assert_eq!(said["error"]["code"], -32700);
    assert!(said["error"]["message"]
        .as_str()
        .unwrap()
        .contains("max_message_bytes"));
    drop(writer);
}

#[tokio::test]
async fn a_line_of_exactly_16_mib_is_accepted() {
    let (peer, mut raw) = raw_pair(echo_handler(), Options::named("server"));
    let max = protocol::MAX_MESSAGE_BYTES;
    let head = br#"{"jsonrpc":"2.0","id":1,"method":"echo","params":""#;
    let tail = br#""}"#;
    let mut line = Vec::with_capacity(max + 1);
    line.extend_from_slice(head);
    line.resize(max - tail.len(), b'a');
    line.extend_from_slice(tail);
    assert_eq!(line.len(), max);
    line.push(b'\n');
    raw.w.write_all(&line).await.unwrap();
    let answer = raw.recv().await.unwrap();
    assert_eq!(answer["id"], 1);
    assert!(
        answer.get("result").is_some(),
        "{}",
        &answer.to_string()[..200]
    );
    assert!(!peer.is_closed());
}

#[tokio::test]
async fn an_endless_line_is_refused_without_buffering_it_all() {
    let (peer, raw) = raw_pair(NoHandler, Options::named("server"));
    let mut w = raw.w;
    let sent = Arc::new(AtomicUsize::new(0));
    let counter = sent.clone();
    let writer = tokio::spawn(async move {
        let chunk = vec![b'x'; 1 << 20];
        // Up to 1 GiB with no newline: far more than the connection may hold.
        for _ in 0..1024 {
            if w.write_all(&chunk).await.is_err() {
                break;
            }
            counter.fetch_add(chunk.len(), Ordering::SeqCst);
        }
    });
    let reason = within(peer.closed()).await;
    assert!(matches!(&*reason, CloseReason::Protocol(_)), "{reason:?}");
    drop(raw.lines);
    within(writer).await.unwrap();
    // The writer was cut off close to the limit, not after its whole gigabyte.
    assert!(
        sent.load(Ordering::SeqCst) < 64 << 20,
        "{}",
        sent.load(Ordering::SeqCst)
    );
}

#[tokio::test]
async fn invalid_json_closes_the_connection_with_a_protocol_error() {
    let (peer, mut raw) = raw_pair(NoHandler, Options::named("server"));
    raw.w
        .write_all(b"{\"jsonrpc\": \"2.0\", oops}\n")
        .await
        .unwrap();
    let reason = within(peer.closed()).await;
    assert!(
        matches!(&*reason, CloseReason::Protocol(why) if why.contains("invalid JSON")),
        "{reason:?}"
    );
    let said = raw.recv().await.unwrap();
    assert_eq!(said["error"]["code"], -32700);
    assert_eq!(said["id"], Value::Null);
    // And then the stream ends.
    assert!(raw.recv().await.is_none());
}

#[tokio::test]
async fn in_transaction_calls_refuse_callbacks_and_have_a_deadline() {
    let (a, _b) = pair();
    // b serves "callback" by calling a back: a refuses it while in a transaction.
    let v = within(a.call_in_transaction("callback", &json!(null)))
        .await
        .unwrap();
    assert_eq!(v, json!({"refused": "reentrant_call"}));
    // Outside a transaction the same callback is served.
    let v = within(a.call("callback", &json!(null))).await.unwrap();
    assert_eq!(v, json!("x"));
    // A call that outlives the deadline fails with a timeout, not a hang.
    let e = within(a.call_in_transaction("sleep", &json!(5000)))
        .await
        .unwrap_err();
    assert_eq!(e, CallError::Timeout(protocol::IN_TRANSACTION_DEADLINE));
}

#[tokio::test]
async fn a_peer_that_floods_requests_and_never_reads_does_not_deadlock_us() {
    let opts = Options {
        max_queued_bytes: 1 << 20,
        ..Options::named("server")
    };
    let (peer, raw) = raw_pair(echo_handler(), opts);
    let mut w = raw.w;
    // The flooder never reads its input (raw.lines is kept but never polled).
    let _unread = raw.lines;
    let flooder = tokio::spawn(async move {
        let req = b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"echo\",\"params\":\"0123456789012345678901234567890123456789\"}\n";
        let mut n = 0u64;
        // Bounded: 4 million requests at most.
        while n < 4_000_000 {
            if w.write_all(req).await.is_err() {
                break;
            }
            n += 1;
        }
        n
    });
    let reason = within(peer.closed()).await;
    match &*reason {
        CloseReason::Protocol(why) => assert!(why.contains("not reading"), "{why}"),
        other => panic!("{other:?}"),
    }
    // The flooder is not stuck either: its writes now fail.
    let n = within(flooder).await.unwrap();
    assert!(n < 4_000_000);
}

#[tokio::test]
async fn a_request_over_the_limit_is_not_sent() {
    let (a, _b) = pair();
    let big = "x".repeat(protocol::MAX_MESSAGE_BYTES);
    let e = within(a.call("echo", &big)).await.unwrap_err();
    assert!(matches!(e, CallError::TooLarge { .. }), "{e:?}");
    // Nothing was broken by it.
    assert_eq!(within(a.call("echo", &json!(1))).await.unwrap(), json!(1));
}

/// A pair whose `a` side has these options.
fn pair_with(a_opts: Options) -> (Peer, Peer) {
    let (a, b) = UnixStream::pair().unwrap();
    let (ar, aw) = a.into_split();
    let (br, bw) = b.into_split();
    let pa = connect(ar, aw, echo_handler(), a_opts);
    let pb = connect(br, bw, echo_handler(), Options::named("b"));
    (pa, pb)
}

#[tokio::test]
async fn a_burst_of_calls_over_the_bound_waits_its_turn_and_none_is_refused() {
    let (a, b) = pair();
    // 300 calls at once to a peer that serves 64 at a time: each is answered.
    let calls: Vec<_> = (0..300u64)
        .map(|i| {
            let a = a.clone();
            tokio::spawn(async move { a.call("sleep", &json!(20 + i % 7)).await })
        })
        .collect();
    for (i, c) in calls.into_iter().enumerate() {
        let r = within(c).await.unwrap();
        assert_eq!(r.unwrap(), json!(20 + i as u64 % 7), "call {i}");
    }
    // The other side never served more than its bound (it would have refused).
    assert!(b.serving() <= protocol::MAX_INFLIGHT);
}

#[tokio::test]
async fn calls_waiting_past_their_bound_are_refused_naming_it() {
    let (a, b) = pair_with(Options {
        max_inflight: 2,
        max_waiting_calls: 3,
        ..Options::named("a")
    });
    // Two on the wire, three waiting: the sixth is refused at once.
    let held: Vec<_> = (0..5)
        .map(|_| {
            let a = a.clone();
            tokio::spawn(async move { a.call("sleep", &json!(20_000)).await })
        })
        .collect();
    // Let the five take their places first (a probe waiting meanwhile would take
    // one of the three waiting places itself).
    within(async {
        while b.serving() < 2 {
            tokio::task::yield_now().await;
        }
    })
    .await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    let e = within(async {
        loop {
            let opts = CallOptions {
                timeout: Some(Duration::from_millis(50)),
                ..CallOptions::default()
            };
            match a.call_with("echo", &json!(1), opts).await {
                // Not all five were waiting yet: this one went through, or waited.
                Ok(_) | Err(CallError::Timeout(_)) => tokio::task::yield_now().await,
                Err(e) => return e,
            }
        }
    })
    .await;
    assert!(e.is(Code::Overloaded), "{e:?}");
    assert!(e.to_string().contains("max_waiting_calls"), "{e}");
    for h in held {
        h.abort();
    }
}

#[tokio::test]
async fn a_waiting_call_keeps_its_deadline_and_its_cancel() {
    let (a, _b) = pair_with(Options {
        max_inflight: 1,
        ..Options::named("a")
    });
    let a2 = a.clone();
    let holder = tokio::spawn(async move { a2.call("sleep", &json!(2000)).await });
    tokio::time::sleep(Duration::from_millis(50)).await;
    // It waits for the one place, and its deadline counts the wait.
    let opts = CallOptions {
        timeout: Some(Duration::from_millis(100)),
        ..CallOptions::default()
    };
    let e = within(a.call_with("echo", &json!(1), opts))
        .await
        .unwrap_err();
    assert_eq!(e, CallError::Timeout(Duration::from_millis(100)));
    // Cancelled while it waits: cancelled at once.
    let cancel = CancelToken::new();
    let c2 = cancel.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(50)).await;
        c2.cancel();
    });
    let opts = CallOptions {
        cancel: Some(cancel),
        ..CallOptions::default()
    };
    let e = within(a.call_with("echo", &json!(1), opts))
        .await
        .unwrap_err();
    assert_eq!(e, CallError::Cancelled);
    // The holder's answer frees the place: the next call is served.
    assert_eq!(within(holder).await.unwrap().unwrap(), json!(2000));
    assert_eq!(within(a.call("echo", &json!(2))).await.unwrap(), json!(2));
}

#[tokio::test]
async fn a_cancelled_call_frees_its_place_on_both_sides_at_once() {
    // One place: a call cancelled while served lets the next one through, and the
    // server (bound 1) does not refuse it, since the cancel freed its slot first.
    let (x, y) = UnixStream::pair().unwrap();
    let (xr, xw) = x.into_split();
    let (yr, yw) = y.into_split();
    let one = |name: &str| Options {
        max_inflight: 1,
        ..Options::named(name)
    };
    let a = connect(xr, xw, echo_handler(), one("a"));
    let _b = connect(yr, yw, echo_handler(), one("b"));
    for _ in 0..20 {
        let opts = CallOptions {
            timeout: Some(Duration::from_millis(5)),
            ..CallOptions::default()
        };
        let e = within(a.call_with("sleep", &json!(1000), opts))
            .await
            .unwrap_err();
        assert!(matches!(e, CallError::Timeout(_)), "{e:?}");
        assert_eq!(within(a.call("echo", &json!(3))).await.unwrap(), json!(3));
    }
}

#[test]
fn the_agreed_bound_is_the_spec_floor_unless_the_peer_said_more_and_at_most_64_mib() {
    use protocol::{agreed_message_bytes, LARGE_MESSAGE_BYTES, MAX_MESSAGE_BYTES};
    assert_eq!(agreed_message_bytes(None), MAX_MESSAGE_BYTES);
    assert_eq!(agreed_message_bytes(Some(1024)), MAX_MESSAGE_BYTES);
    assert_eq!(agreed_message_bytes(Some(32 << 20)), 32 << 20);
    assert_eq!(agreed_message_bytes(Some(u64::MAX)), LARGE_MESSAGE_BYTES);
}

#[tokio::test]
async fn a_request_over_the_peers_bound_is_refused_unsent_until_the_bound_is_raised() {
    let (ar, bw) = tokio::io::duplex(1 << 20);
    let (br, aw) = tokio::io::duplex(1 << 20);
    let caller = connect(ar, aw, NoHandler, Options::negotiated("caller"));
    let _server = connect(br, bw, echo_handler(), Options::negotiated("server"));
    let big = json!("x".repeat(20 << 20));
    match caller.call("echo", &big).await {
        Err(CallError::TooLarge { limit, .. }) => assert_eq!(limit, protocol::MAX_MESSAGE_BYTES),
        other => panic!("expected TooLarge, got {other:?}"),
    }
    caller.set_max_send_bytes(protocol::LARGE_MESSAGE_BYTES);
    // The server reads 64 MiB but answers at most 16 MiB until told otherwise: the
    // echo is refused on its side, as an error that names the limit.
    let e = caller.call("echo", &big).await.unwrap_err();
    assert!(e.to_string().contains("16777216-byte message limit"), "{e}");
}

#[tokio::test]
async fn prepared_requests_are_sent_when_called_and_answered_as_calls_are() {
    let (a, _b) = pair();
    let first = a.prepare("echo", &json!("first")).unwrap();
    let second = a.prepare("echo", &json!({"n": 2})).unwrap();
    // Called in the other order, each gets its own answer.
    let answer = within(a.call_prepared(second, CallOptions::default()))
        .await
        .unwrap();
    assert_eq!(answer.get(), r#"{"n":2}"#);
    let answer = within(a.call_prepared(first, CallOptions::default()))
        .await
        .unwrap();
    assert_eq!(answer.get(), r#""first""#);
    // One never called is never sent, and holds nothing up.
    let _dropped = a.prepare("echo", &json!("never")).unwrap();
    assert_eq!(within(a.call("echo", &json!(3))).await.unwrap(), json!(3));
    let e = within(a.call_prepared(
        a.prepare("fail", &json!(null)).unwrap(),
        CallOptions::default(),
    ))
    .await
    .unwrap_err();
    assert_eq!(e.rpc().and_then(|r| r.app_code()), Some("rate_limited"));
}

#[tokio::test]
async fn a_prepared_request_over_the_limit_is_refused_at_once() {
    let (a, _b) = pair();
    let big = "x".repeat(protocol::MAX_MESSAGE_BYTES);
    let e = a.prepare("echo", &big).unwrap_err();
    assert!(matches!(e, CallError::TooLarge { .. }), "{e:?}");
    a.close("done");
    let e = a.prepare("echo", &json!(1)).unwrap_err();
    assert!(matches!(e, CallError::Transport(_)), "{e:?}");
}
