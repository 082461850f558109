//! Socket Mode client (`oc_slack::socket`) against a Socket Mode stand-in on
//! 127.0.0.1: a real WebSocket server (tokio-tungstenite's server side) speaking the
//! envelope protocol the way Slack's Python SDK mock server does (hello, envelopes,
//! disconnect), with payloads from Slack's SDK fixtures (tests/fixtures/socket_mode).
//! The test drives each connection by hand and answers each `deliver` itself.
//! Waits only guard against hangs (30 s); nothing asserts on timing.

#![allow(clippy::unwrap_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use oc_slack::socket::{run, Envelope, Options, Status, StatusHandle};
use serde_json::Value;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, oneshot, watch};
use tokio::task::JoinHandle;
use tokio_tungstenite::tungstenite::handshake::server::{Request, Response};
use tokio_tungstenite::tungstenite::{Bytes, Message};
use tokio_tungstenite::WebSocketStream;

/// Bound on every wait: only guards against a hang.
const GUARD: Duration = Duration::from_secs(30);

async fn within<T>(what: &str, f: impl Future<Output = T>) -> T {
    match tokio::time::timeout(GUARD, f).await {
        Ok(v) => v,
        Err(_) => panic!("{what}: nothing within {GUARD:?}"),
    }
}

fn fixture(name: &str) -> String {
    let path = format!(
        "{}/tests/fixtures/socket_mode/{name}",
        env!("CARGO_MANIFEST_DIR")
    );
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

fn fixture_json(name: &str) -> Value {
    serde_json::from_str(&fixture(name)).unwrap()
}

/// The fixture envelope `name` sent as `id` (a re-send carries `retry_attempt`).
fn envelope(name: &str, id: &str, retry_attempt: u64) -> String {
    let mut v = fixture_json(name);
    v["envelope_id"] = id.into();
    if retry_attempt > 0 {
        v["retry_attempt"] = retry_attempt.into();
        v["retry_reason"] = "timeout".into();
    }
    v.to_string()
}

fn hello() -> String {
    fixture("hello.json")
}

fn disconnect(reason: &str) -> String {
    let mut v = fixture_json("disconnect.json");
    v["reason"] = reason.into();
    v.to_string()
}

/// What the test tells one stand-in connection to do.
enum Cmd {
    Text(String),
    Ping,
}

/// What one stand-in connection saw from the client.
#[derive(Debug, PartialEq)]
enum Seen {
    Ack(String),
    Pong,
    /// The client closed the connection (close frame or end of stream).
    Closed,
    Other(String),
}

/// Shared record of "returned:ID" (deliver returned Ok) and "ack:ID" (the stand-in
/// read an ack), in the order they happened.
type Log = Arc<Mutex<Vec<String>>>;

/// One accepted WebSocket connection of the stand-in. Dropping it drops the TCP
/// connection without a close frame.
struct Conn {
    /// The request path and query the client connected with.
    path: String,
    cmd: mpsc::UnboundedSender<Cmd>,
    seen: mpsc::UnboundedReceiver<Seen>,
}

impl Conn {
    fn send(&self, text: String) {
        self.cmd.send(Cmd::Text(text)).unwrap();
    }

    async fn next(&mut self) -> Seen {
        within("stand-in reading the client", self.seen.recv())
            .await
            .unwrap_or(Seen::Closed)
    }

    /// Pings the client and waits for its pong; returns what came before the pong.
    /// Once it returns, the client has read everything sent before the ping.
    async fn ping_roundtrip(&mut self) -> Vec<Seen> {
        self.cmd.send(Cmd::Ping).unwrap();
        let mut before = Vec::new();
        loop {
            match self.next().await {
                Seen::Pong => return before,
                Seen::Closed => panic!("closed before the pong; saw {before:?}"),
                other => before.push(other),
            }
        }
    }

    /// Reads until the client closed; returns the acks seen meanwhile.
    async fn until_closed(&mut self) -> Vec<String> {
        let mut acks = Vec::new();
        loop {
            match self.next().await {
                Seen::Closed => return acks,
                Seen::Ack(id) => acks.push(id),
                _ => {}
            }
        }
    }
}

async fn serve_conn(
    mut ws: WebSocketStream<TcpStream>,
    mut cmd: mpsc::UnboundedReceiver<Cmd>,
    seen: mpsc::UnboundedSender<Seen>,
    log: Log,
) {
    loop {
        tokio::select! {
            c = cmd.recv() => match c {
                Some(Cmd::Text(t)) => {
                    if ws.send(Message::text(t)).await.is_err() {
                        let _ = seen.send(Seen::Closed);
                        return;
                    }
                }
                Some(Cmd::Ping) => {
                    if ws.send(Message::Ping(Bytes::from_static(b"stand-in"))).await.is_err() {
                        let _ = seen.send(Seen::Closed);
                        return;
                    }
                }
                // The test dropped the connection: drop the socket, no close frame.
                None => return,
            },
            m = ws.next() => match m {
                Some(Ok(Message::Text(t))) => {
                    let v: Value = serde_json::from_str(t.as_str()).unwrap_or(Value::Null);
                    match v.get("envelope_id").and_then(Value::as_str) {
                        Some(id) if v.as_object().map(|o| o.len()) == Some(1) => {
                            log.lock().unwrap().push(format!("ack:{id}"));
                            let _ = seen.send(Seen::Ack(id.to_string()));
                        }
                        _ => {
                            let _ = seen.send(Seen::Other(t.to_string()));
                        }
                    }
                }
                Some(Ok(Message::Pong(_))) => {
                    let _ = seen.send(Seen::Pong);
                }
                Some(Ok(Message::Close(_))) | None | Some(Err(_)) => {
                    let _ = seen.send(Seen::Closed);
                    return;
                }
                Some(Ok(_)) => {} // client pings (answered by tungstenite)
            },
        }
    }
}

type Delivery = (Envelope, oneshot::Sender<Result<(), String>>);

/// The stand-in, the runner under test, and the test's ends of `open` and `deliver`.
struct Harness {
    conns: mpsc::UnboundedReceiver<Conn>,
    deliveries: mpsc::UnboundedReceiver<Delivery>,
    log: Log,
    opens: Arc<AtomicUsize>,
    status: StatusHandle,
    stop: watch::Sender<bool>,
    run: Option<JoinHandle<()>>,
}

fn test_options() -> Options {
    Options {
        backoff_initial: Duration::from_millis(10),
        backoff_max: Duration::from_millis(200),
        ..Options::default()
    }
}

impl Harness {
    /// Starts the stand-in and `run`; the first `refuse_opens` calls of `open` fail.
    async fn start(options: Options, refuse_opens: usize) -> Harness {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let log: Log = Arc::default();
        let (conn_tx, conns) = mpsc::unbounded_channel();
        let server_log = log.clone();
        tokio::spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                let path = Arc::new(Mutex::new(String::new()));
                let seen_path = path.clone();
                // The callback's signature is tungstenite's (its error is a Response).
                #[allow(clippy::result_large_err)]
                let callback = move |req: &Request, resp: Response| {
                    *seen_path.lock().unwrap() = req.uri().to_string();
                    Ok(resp)
                };
                let Ok(ws) = tokio_tungstenite::accept_hdr_async(tcp, callback).await else {
                    continue;
                };
                let (cmd_tx, cmd_rx) = mpsc::unbounded_channel();
                let (seen_tx, seen_rx) = mpsc::unbounded_channel();
                tokio::spawn(serve_conn(ws, cmd_rx, seen_tx, server_log.clone()));
                let path = path.lock().unwrap().clone();
                let conn = Conn {
                    path,
                    cmd: cmd_tx,
                    seen: seen_rx,
                };
                if conn_tx.send(conn).is_err() {
                    return;
                }
            }
        });

        let opens = Arc::new(AtomicUsize::new(0));
        let open_count = opens.clone();
        let open = move || {
            let n = open_count.fetch_add(1, Ordering::SeqCst) + 1;
            async move {
                if n <= refuse_opens {
                    Err(format!("stand-in refused open #{n}"))
                } else {
                    Ok(format!(
                        "ws://127.0.0.1:{port}/link/?ticket=ticket-{n}&app_id=A111"
                    ))
                }
            }
        };

        let (delivery_tx, deliveries) = mpsc::unbounded_channel::<Delivery>();
        let deliver_log = log.clone();
        let deliver = move |env: Envelope| {
            let delivery_tx = delivery_tx.clone();
            let log = deliver_log.clone();
            async move {
                let id = env.envelope_id.clone();
                let (answer_tx, answer_rx) = oneshot::channel();
                delivery_tx
                    .send((env, answer_tx))
                    .map_err(|_| "test gone".to_string())?;
                let answer = answer_rx
                    .await
                    .map_err(|_| "test dropped the answer".to_string())?;
                if answer.is_ok() {
                    log.lock().unwrap().push(format!("returned:{id}"));
                }
                answer
            }
        };

        let status = StatusHandle::new();
        let (stop, stop_rx) = watch::channel(false);
        let run = tokio::spawn(run(options, open, deliver, stop_rx, status.clone()));
        Harness {
            conns,
            deliveries,
            log,
            opens,
            status,
            stop,
            run: Some(run),
        }
    }

    async fn next_conn(&mut self) -> Conn {
        within("the client connecting", self.conns.recv())
            .await
            .unwrap()
    }

    async fn next_delivery(&mut self) -> Delivery {
        within("a delivery", self.deliveries.recv()).await.unwrap()
    }

    /// A connection on which the stand-in said hello, once the client counts it.
    async fn connected(&mut self) -> Conn {
        let conn = self.next_conn().await;
        conn.send(hello());
        let wanted = self.status.get().connections + 1;
        self.wait_status("connected", |s| s.connected && s.connections == wanted)
            .await;
        conn
    }

    async fn wait_status(&self, what: &str, f: impl Fn(&Status) -> bool) -> Status {
        let mut rx = self.status.subscribe();
        let s = within(what, rx.wait_for(|s| f(s))).await.unwrap();
        s.clone()
    }

    async fn stop(&mut self) {
        self.stop.send(true).unwrap();
        let run = self.run.take().unwrap();
        within("run ending after stop", run).await.unwrap();
    }

    /// Per envelope id: how often `deliver` returned Ok, and how often the stand-in
    /// read an ack.
    fn counts(&self) -> (BTreeMap<String, usize>, BTreeMap<String, usize>) {
        let mut returned = BTreeMap::new();
        let mut acked = BTreeMap::new();
        for entry in self.log.lock().unwrap().iter() {
            if let Some(id) = entry.strip_prefix("returned:") {
                *returned.entry(id.to_string()).or_insert(0) += 1;
            } else if let Some(id) = entry.strip_prefix("ack:") {
                *acked.entry(id.to_string()).or_insert(0) += 1;
            }
        }
        (returned, acked)
    }

    /// Every ack in the log comes after its "returned" (the n-th ack of an id after
    /// the n-th return of it).
    fn assert_acks_follow_returns(&self) {
        let log = self.log.lock().unwrap();
        let mut returned: BTreeMap<&str, usize> = BTreeMap::new();
        let mut acked: BTreeMap<&str, usize> = BTreeMap::new();
        for entry in log.iter() {
            if let Some(id) = entry.strip_prefix("returned:") {
                *returned.entry(id).or_insert(0) += 1;
            } else if let Some(id) = entry.strip_prefix("ack:") {
                let n = acked.entry(id).or_insert(0);
                *n += 1;
                assert!(
                    *n <= returned.get(id).copied().unwrap_or(0),
                    "ack of {id} before deliver returned; log {log:?}"
                );
            }
        }
    }
}

/// 1. Envelopes are delivered one at a time in arrival order, each acked only after
///    its deliver returned Ok; pings are answered while a delivery is in flight.
#[tokio::test]
async fn acks_only_after_deliver_returned() {
    let mut h = Harness::start(test_options(), 0).await;
    let mut conn = h.connected().await;
    assert!(
        conn.path.starts_with("/link/?ticket=ticket-1"),
        "{}",
        conn.path
    );

    let sent = [
        ("app_mention.json", "env-1", "events_api"),
        ("message.json", "env-2", "events_api"),
        ("block_actions.json", "env-3", "interactive"),
        ("slash_command.json", "env-4", "slash_commands"),
        ("shortcut.json", "env-5", "interactive"),
    ];
    for (name, id, _) in sent {
        conn.send(envelope(name, id, 0));
    }

    let (first, release_first) = h.next_delivery().await;
    assert_eq!(first.envelope_id, "env-1");
    assert_eq!(first.kind, "events_api");
    assert_eq!(first.payload, fixture_json("app_mention.json")["payload"]);
    assert_eq!(first.payload["event"]["type"], "app_mention");
    assert_eq!(first.retry_attempt, 0);
    assert_eq!(first.retry_reason, None);
    assert!(!first.accepts_response_payload);

    // The client has read all five envelopes and the ping, answered the ping while
    // env-1 is in flight, and acked nothing.
    let before_pong = conn.ping_roundtrip().await;
    assert!(
        before_pong.is_empty(),
        "saw before the pong: {before_pong:?}"
    );
    // One delivery at a time: env-2 is not handed over while env-1 is in flight.
    assert!(
        h.deliveries.try_recv().is_err(),
        "a second delivery while the first is in flight"
    );
    assert!(h.log.lock().unwrap().is_empty());

    release_first.send(Ok(())).unwrap();
    assert_eq!(conn.next().await, Seen::Ack("env-1".into()));

    for (name, id, kind) in &sent[1..] {
        let (env, answer) = h.next_delivery().await;
        assert_eq!(env.envelope_id, *id, "arrival order");
        assert_eq!(env.kind, *kind);
        assert_eq!(env.payload, fixture_json(name)["payload"]);
        // Still nothing acked for it.
        assert!(!h.log.lock().unwrap().contains(&format!("ack:{id}")));
        answer.send(Ok(())).unwrap();
        assert_eq!(conn.next().await, Seen::Ack(id.to_string()));
    }

    h.assert_acks_follow_returns();
    let s = h.wait_status("five acked", |s| s.acked == 5).await;
    assert_eq!(
        (s.delivered, s.deliver_failures, s.connections, s.reconnects),
        (5, 0, 1, 0)
    );
    assert!(s.connected && s.since.is_some());
    assert_eq!(s.host.as_deref(), Some("127.0.0.1"));
    assert_eq!(s.last_error, None);
    h.stop().await;
}

/// 2. A failed delivery gets no ack; the stand-in's re-send (retry_attempt 1) is
///    delivered and acked.
#[tokio::test]
async fn failed_delivery_is_not_acked_and_the_resend_is() {
    let mut h = Harness::start(test_options(), 0).await;
    let mut conn = h.connected().await;

    conn.send(envelope("message.json", "fail-1", 0));
    let (env, answer) = h.next_delivery().await;
    assert_eq!(env.envelope_id, "fail-1");
    answer.send(Err("store unavailable".into())).unwrap();

    // The next envelope's delivery starts only once fail-1's outcome was handled, and
    // its ack is the first the stand-in sees: fail-1 was not acked.
    conn.send(envelope("app_mention.json", "ok-2", 0));
    let (env, answer) = h.next_delivery().await;
    assert_eq!(env.envelope_id, "ok-2");
    answer.send(Ok(())).unwrap();
    assert_eq!(conn.next().await, Seen::Ack("ok-2".into()));

    let s = h
        .wait_status("failure counted", |s| s.deliver_failures == 1)
        .await;
    let error = s.last_error.unwrap();
    assert!(
        error.contains("fail-1") && error.contains("store unavailable"),
        "{error}"
    );
    assert!(
        !error.contains("Hi here"),
        "payload text in the status: {error}"
    );

    // Slack re-sends the unacknowledged envelope.
    conn.send(envelope("message.json", "fail-1", 1));
    let (env, answer) = h.next_delivery().await;
    assert_eq!(env.envelope_id, "fail-1");
    assert_eq!(env.retry_attempt, 1);
    assert_eq!(env.retry_reason.as_deref(), Some("timeout"));
    assert_eq!(env.payload, fixture_json("message.json")["payload"]);
    answer.send(Ok(())).unwrap();
    assert_eq!(conn.next().await, Seen::Ack("fail-1".into()));

    h.assert_acks_follow_returns();
    let (returned, acked) = h.counts();
    assert_eq!(returned, acked);
    assert_eq!(acked.get("fail-1"), Some(&1));
    assert_eq!(acked.get("ok-2"), Some(&1));
    let s = h.wait_status("two acked", |s| s.acked == 2).await;
    assert_eq!((s.delivered, s.deliver_failures, s.reconnects), (2, 1, 0));
    h.stop().await;
}

/// Answers every delivery Ok (the deliver closure logs its return).
fn answer_all(mut deliveries: mpsc::UnboundedReceiver<Delivery>) -> JoinHandle<Vec<String>> {
    tokio::spawn(async move {
        let mut ids = Vec::new();
        while let Some((env, answer)) = deliveries.recv().await {
            ids.push(env.envelope_id);
            let _ = answer.send(Ok(()));
        }
        ids
    })
}

/// 3. `disconnect` (refresh_requested) mid-stream: the in-flight delivery finishes and
///    is acked, the client asks `open` again, reconnects, and what the stand-in
///    (re-)sends on the new connection is delivered; every id sent is acked exactly as
///    often as deliver returned Ok for it.
#[tokio::test]
async fn disconnect_reconnects_and_loses_nothing() {
    let mut h = Harness::start(test_options(), 0).await;
    let mut conn = h.connected().await;
    let mut sent: BTreeMap<&str, &str> = BTreeMap::new();
    let mut acked: BTreeSet<String> = BTreeSet::new();

    for (name, id) in [("app_mention.json", "a"), ("message.json", "b")] {
        conn.send(envelope(name, id, 0));
        sent.insert(id, name);
    }
    let (env, answer_a) = h.next_delivery().await;
    assert_eq!(env.envelope_id, "a");
    assert!(conn.ping_roundtrip().await.is_empty());
    conn.send(disconnect("refresh_requested"));
    let deliveries = std::mem::replace(&mut h.deliveries, mpsc::unbounded_channel().1);
    let answered = answer_all(deliveries);
    answer_a.send(Ok(())).unwrap();

    // The client finishes and closes the old connection.
    acked.extend(conn.until_closed().await);
    assert!(
        acked.contains("a"),
        "the in-flight delivery was not acked: {acked:?}"
    );

    // A new URL, a new connection; Slack re-sends what was not acked, then more.
    let mut conn = h.next_conn().await;
    assert_eq!(h.opens.load(Ordering::SeqCst), 2);
    assert!(conn.path.contains("ticket-2"), "{}", conn.path);
    conn.send(hello());
    for (id, name) in &sent {
        if !acked.contains(*id) {
            conn.send(envelope(name, id, 1));
        }
    }
    conn.send(envelope("block_actions.json", "c", 0));
    sent.insert("c", "block_actions.json");
    while sent.keys().any(|id| !acked.contains(*id)) {
        match conn.next().await {
            Seen::Ack(id) => {
                acked.insert(id);
            }
            Seen::Closed => panic!("second connection closed; acked {acked:?}"),
            _ => {}
        }
    }

    h.stop().await;
    let delivered = within("answering task", answered).await.unwrap();
    assert!(delivered.contains(&"c".to_string()), "{delivered:?}");
    h.assert_acks_follow_returns();
    let (returned, acks) = h.counts();
    assert_eq!(
        returned, acks,
        "every Ok delivery acked exactly once per delivery"
    );
    for id in sent.keys() {
        assert!(acks.contains_key(*id), "{id} never acked");
    }
    let s = h.status.get();
    assert_eq!(s.connections, 2);
    assert!(s.reconnects >= 1);
    assert_eq!(s.last_error, None, "a refresh is not an error");
    assert!(!s.connected);
}

/// 4. `open` failures are retried; a dropped TCP connection (no close frame) makes
///    the client open a new connection; no ticket in the status.
#[tokio::test]
async fn open_failures_are_retried_and_dropped_connection_reconnects() {
    let mut h = Harness::start(test_options(), 2).await;
    let mut conn = h.connected().await;
    assert_eq!(h.opens.load(Ordering::SeqCst), 3);
    assert!(conn.path.contains("ticket-3"), "{}", conn.path);
    let s = h.status.get();
    assert!(s.reconnects >= 2, "{s:?}");
    assert!(s.last_error.unwrap().contains("stand-in refused open #2"));

    conn.send(envelope("app_mention.json", "before-drop", 0));
    let (_, answer) = h.next_delivery().await;
    answer.send(Ok(())).unwrap();
    assert_eq!(conn.next().await, Seen::Ack("before-drop".into()));

    drop(conn);
    let mut conn = h.connected().await;
    assert_eq!(h.opens.load(Ordering::SeqCst), 4);
    assert!(conn.path.contains("ticket-4"), "{}", conn.path);
    let s = h.status.get();
    let error = s.last_error.unwrap();
    assert!(error.contains("127.0.0.1"), "{error}");
    assert!(
        !error.contains("ticket"),
        "URL ticket in the status: {error}"
    );

    conn.send(envelope("message.json", "after-drop", 0));
    let (env, answer) = h.next_delivery().await;
    assert_eq!(env.envelope_id, "after-drop");
    answer.send(Ok(())).unwrap();
    assert_eq!(conn.next().await, Seen::Ack("after-drop".into()));
    h.assert_acks_follow_returns();
    h.stop().await;
}

/// No hello within the bound: the client gives up on that connection (the error
/// names the bound) and opens another.
#[tokio::test]
async fn no_hello_within_bound_reconnects() {
    let options = Options {
        hello_timeout: Duration::from_millis(300),
        ..test_options()
    };
    let mut h = Harness::start(options, 0).await;
    let mut silent = h.next_conn().await;
    assert!(silent.until_closed().await.is_empty());
    let _conn = h.connected().await;
    let s = h.status.get();
    let error = s.last_error.unwrap();
    assert!(error.contains("Options::hello_timeout"), "{error}");
    assert_eq!(s.connections, 1);
    assert!(s.reconnects >= 1);
    h.stop().await;
}

/// 5a. Stop ends `run` while a delivery is in flight (never answered), and the client
///     closes the connection.
#[tokio::test]
async fn stop_ends_run_promptly_while_delivering() {
    let mut h = Harness::start(test_options(), 0).await;
    let mut conn = h.connected().await;
    conn.send(envelope("app_mention.json", "held", 0));
    let (_env, _held_answer) = h.next_delivery().await;
    h.stop().await;
    assert!(conn.until_closed().await.is_empty(), "held envelope acked");
    assert!(!h.status.get().connected);
}

/// 5a'. Stop ends `run` while it waits to retry a failed `open` (a long backoff).
#[tokio::test]
async fn stop_ends_run_promptly_while_waiting_to_reconnect() {
    let options = Options {
        backoff_initial: Duration::from_secs(3600),
        backoff_max: Duration::from_secs(3600),
        ..Options::default()
    };
    let mut h = Harness::start(options, usize::MAX).await;
    h.wait_status("open failed", |s| s.last_error.is_some())
        .await;
    h.stop().await;
    assert_eq!(h.opens.load(Ordering::SeqCst), 1);
}

/// 5b. A real large payload under the bound goes through; a message over the bound
///     (1 MiB by default) ends the connection with an error naming the bound, and the
///     client reconnects; the oversize envelope is never delivered.
#[tokio::test]
async fn oversize_message_is_an_error_naming_the_bound_and_reconnects() {
    let mut h = Harness::start(test_options(), 0).await;
    let mut conn = h.connected().await;

    conn.send(envelope("block_actions.json", "large-but-fine", 0));
    let (env, answer) = h.next_delivery().await;
    assert_eq!(env.payload["type"], "block_actions");
    answer.send(Ok(())).unwrap();
    assert_eq!(conn.next().await, Seen::Ack("large-but-fine".into()));

    let mut big: Value = serde_json::from_str(&envelope("message.json", "too-big", 0)).unwrap();
    big["payload"]["event"]["text"] = "x".repeat(Options::default().max_message_bytes + 1).into();
    conn.send(big.to_string());
    assert!(conn.until_closed().await.is_empty());

    let mut conn = h.connected().await;
    let s = h.status.get();
    let error = s.last_error.unwrap();
    assert!(
        error.contains("Options::max_message_bytes") && error.contains("1048576"),
        "{error}"
    );
    conn.send(envelope("message.json", "after-big", 0));
    let (env, answer) = h.next_delivery().await;
    assert_eq!(
        env.envelope_id, "after-big",
        "the oversize envelope was delivered"
    );
    answer.send(Ok(())).unwrap();
    assert_eq!(conn.next().await, Seen::Ack("after-big".into()));
    h.stop().await;
}
