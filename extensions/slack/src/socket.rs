//! Slack Socket Mode client: Slack's events, interactions and slash commands over a
//! WebSocket the package opens itself (no public HTTP endpoint needed).
//!
//! The protocol (as Slack's SDKs speak it): the app calls `apps.connections.open` with
//! its app-level token (`xapp-…`) and gets a one-time `wss://` URL; on that socket
//! Slack sends `{"type":"hello",…}`, then envelopes
//! `{"envelope_id","type":"events_api"|"interactive"|"slash_commands","payload",
//! "accepts_response_payload","retry_attempt","retry_reason"}`, each of which the app
//! acknowledges with `{"envelope_id":"…"}`; an envelope left unacknowledged is sent
//! again later. Before Slack closes a connection it sends
//! `{"type":"disconnect","reason":"warning"|"refresh_requested"|"link_disabled"|…}`,
//! and the app opens a new one (a fresh `apps.connections.open`).
//!
//! Public API (the package wires it; nothing here knows about tokens or the bus):
//!
//! - [`run`]`(options, open, deliver, stop, status)`: the runner. `open` is an async
//!   closure giving a fresh `ws://`/`wss://` URL (the package calls
//!   `apps.connections.open`) or an error text; `deliver` is an async closure taking an
//!   [`Envelope`] and returning `Ok(())` once the envelope is durably kept (the package
//!   calls `ingress.deliver`) or `Err(reason)`. Returns when `stop` turns `true` (or its
//!   sender is dropped).
//! - [`Options`]: bounds and backoff, with defaults ([`Options::default`]).
//! - [`Envelope`]: what `deliver` gets.
//! - [`StatusHandle`] / [`Status`]: what the doctor check reads ([`StatusHandle::get`]).
//!
//! Guarantees:
//!
//! - An envelope is acknowledged only after `deliver` returned `Ok(())` for it. On
//!   `Err` (or no answer within [`Options::deliver_timeout`]) it is not acknowledged,
//!   so Slack sends it again (with a higher `retry_attempt`); the reason is logged,
//!   never the payload.
//! - Envelopes are delivered one at a time, in arrival order, per connection. The
//!   socket keeps being read meanwhile (so pings are answered) into a queue of at most
//!   [`Options::max_queued`] envelopes; when it is full, reading pauses.
//! - On `disconnect`, the delivery in flight is finished (and acknowledged if it was
//!   kept), queued envelopes are dropped unacknowledged (Slack re-sends them), the socket
//!   is closed and a new URL is asked of `open`. A close frame, a read or write error,
//!   no `hello` within [`Options::hello_timeout`], nothing at all from Slack within
//!   [`Options::idle_timeout`] (the client pings every [`Options::ping_interval`]), or a
//!   message over [`Options::max_message_bytes`] also end the connection; then the
//!   runner opens a new one. Every new attempt waits a backoff that starts at
//!   [`Options::backoff_initial`], doubles up to [`Options::backoff_max`], and starts
//!   over after a connection that said `hello`; failures of `open` are retried the same
//!   way (the first attempt does not wait).
//! - A delivery that was kept but whose acknowledgement could not be written (the
//!   connection ended) is sent again by Slack and delivered again: `deliver` must be
//!   idempotent on it (the package gives `ingress.deliver` a delivery id that a re-send
//!   keeps, such as the Events API `event_id`, so a re-send is the same delivery).
//! - On stop, a delivery in flight is dropped (cancelled) unacknowledged.
//! - Logs carry the URL's host only (the URL carries a ticket), never a payload.

use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use futures_util::{SinkExt, StreamExt};
use serde_json::Value;
use tokio::net::TcpStream;
use tokio::sync::watch;
use tokio::time::{sleep, sleep_until, timeout, Instant, MissedTickBehavior, Timeout};
use tokio_tungstenite::tungstenite::error::{CapacityError, Error as WsError};
use tokio_tungstenite::tungstenite::http::Uri;
use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;
use tokio_tungstenite::tungstenite::{Bytes, Message, Utf8Bytes};
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

/// Bounds and backoff of the runner. Every bound's error names its field.
#[derive(Debug, Clone)]
pub struct Options {
    /// Largest WebSocket message (and frame) accepted from Slack; a larger one ends the
    /// connection. Default 1 MiB.
    pub max_message_bytes: usize,
    /// Bound on `open` giving a URL, and separately on the WebSocket handshake.
    /// Default 30 s.
    pub open_timeout: Duration,
    /// Bound on Slack's `hello` after the handshake. Default 30 s.
    pub hello_timeout: Duration,
    /// Bound on writing one acknowledgement (or ping, or close). Default 10 s.
    pub ack_timeout: Duration,
    /// Bound on one `deliver` call; past it the envelope counts as not kept (no
    /// acknowledgement). Default 60 s.
    pub deliver_timeout: Duration,
    /// How often the client pings Slack. Default 15 s.
    pub ping_interval: Duration,
    /// Longest silence (no frame at all, pongs included) from Slack while reading.
    /// Default 60 s.
    pub idle_timeout: Duration,
    /// Most envelopes read and waiting for their delivery, per connection; reading
    /// pauses while it is reached. Default 64.
    pub max_queued: usize,
    /// First backoff before a new connection attempt. Default 1 s.
    pub backoff_initial: Duration,
    /// Largest backoff. Default 30 s.
    pub backoff_max: Duration,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            max_message_bytes: 1 << 20,
            open_timeout: Duration::from_secs(30),
            hello_timeout: Duration::from_secs(30),
            ack_timeout: Duration::from_secs(10),
            deliver_timeout: Duration::from_secs(60),
            ping_interval: Duration::from_secs(15),
            idle_timeout: Duration::from_secs(60),
            max_queued: 64,
            backoff_initial: Duration::from_secs(1),
            backoff_max: Duration::from_secs(30),
        }
    }
}

/// One Socket Mode envelope, as given to `deliver`.
#[derive(Debug, Clone, PartialEq)]
pub struct Envelope {
    /// Slack's id of the envelope; the acknowledgement echoes it.
    pub envelope_id: String,
    /// The envelope's `type`: `events_api`, `interactive`, `slash_commands` (or a newer
    /// one, passed on as is).
    pub kind: String,
    /// The envelope's `payload` (`Null` when absent): for `events_api` the Events API
    /// callback (`{"type":"event_callback","event":{…},…}`), for `interactive` the
    /// interaction (`block_actions`, `shortcut`, …), for `slash_commands` the command.
    pub payload: Value,
    /// Whether Slack takes a response payload in the acknowledgement (not used: the
    /// acknowledgement is always bare).
    pub accepts_response_payload: bool,
    /// How many times Slack sent this envelope before (0 on the first send).
    pub retry_attempt: u64,
    /// Why Slack sent it again (`None` on the first send or when Slack gives none).
    pub retry_reason: Option<String>,
}

/// What the runner is doing, for the doctor check and tests.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Status {
    /// Whether a connection is open and Slack said `hello` on it.
    pub connected: bool,
    /// When `connected` last changed (or `run` started, while never connected).
    pub since: Option<SystemTime>,
    /// Host of the current (or last) connection's URL.
    pub host: Option<String>,
    /// The last failure (open, connect, read, write, bound, delivery), if any.
    pub last_error: Option<String>,
    /// When `last_error` happened.
    pub last_error_at: Option<SystemTime>,
    /// Envelopes `deliver` kept (returned `Ok`).
    pub delivered: u64,
    /// Acknowledgements written.
    pub acked: u64,
    /// Deliveries that failed or timed out (not acknowledged).
    pub deliver_failures: u64,
    /// Connections on which Slack said `hello`.
    pub connections: u64,
    /// Connection attempts after the first one.
    pub reconnects: u64,
}

/// A shared, readable [`Status`]; clones share it.
#[derive(Debug, Clone)]
pub struct StatusHandle(Arc<watch::Sender<Status>>);

impl Default for StatusHandle {
    fn default() -> Self {
        Self::new()
    }
}

impl StatusHandle {
    /// A fresh status (not connected, nothing counted).
    pub fn new() -> Self {
        StatusHandle(Arc::new(watch::Sender::new(Status::default())))
    }

    /// The status now.
    pub fn get(&self) -> Status {
        self.0.borrow().clone()
    }

    /// A receiver that sees every change (to wait for one).
    pub fn subscribe(&self) -> watch::Receiver<Status> {
        self.0.subscribe()
    }

    fn update(&self, f: impl FnOnce(&mut Status)) {
        self.0.send_modify(f);
    }

    fn set_connected(&self, connected: bool) {
        self.update(|s| {
            if s.connected != connected {
                s.connected = connected;
                s.since = Some(SystemTime::now());
            }
        });
    }

    fn error(&self, message: &str) {
        self.update(|s| {
            s.last_error = Some(message.to_string());
            s.last_error_at = Some(SystemTime::now());
        });
    }
}

/// How one connection ended.
enum End {
    /// The stop signal.
    Stopped,
    /// Slack asked for a new connection (`disconnect`): not an error.
    Refresh(String),
    /// Anything else; recorded as the last error.
    Failed(String),
}

type Socket = WebSocketStream<MaybeTlsStream<TcpStream>>;

/// Runs Socket Mode until `stop` turns `true` (or its sender is dropped): opens a
/// connection with a URL from `open`, hands every envelope to `deliver` one at a time,
/// acknowledges it once `deliver` returned `Ok(())`, and opens a new connection
/// whenever one ends (see the module documentation for when and how). `status` is kept
/// up to date throughout.
pub async fn run<O, OF, D, DF>(
    options: Options,
    mut open: O,
    mut deliver: D,
    mut stop: watch::Receiver<bool>,
    status: StatusHandle,
) where
    O: FnMut() -> OF,
    OF: Future<Output = Result<String, String>>,
    D: FnMut(Envelope) -> DF,
    DF: Future<Output = Result<(), String>>,
{
    status.update(|s| {
        s.since.get_or_insert_with(SystemTime::now);
    });
    let mut backoff = options.backoff_initial;
    let mut first = true;
    loop {
        if !first {
            status.update(|s| s.reconnects += 1);
            tracing::debug!(
                delay_ms = backoff.as_millis() as u64,
                "socket mode: waiting before reconnecting"
            );
            tokio::select! {
                biased;
                () = stopped(&mut stop) => break,
                () = sleep(backoff) => {}
            }
            backoff = backoff.saturating_mul(2).min(options.backoff_max);
        }
        first = false;
        let mut helloed = false;
        let end = session(
            &options,
            &mut open,
            &mut deliver,
            &mut stop,
            &status,
            &mut helloed,
        )
        .await;
        status.set_connected(false);
        if helloed {
            backoff = options.backoff_initial;
        }
        match end {
            End::Stopped => break,
            End::Refresh(reason) => {
                tracing::info!(reason = %reason, "socket mode: reconnecting");
            }
            End::Failed(error) => {
                tracing::warn!(error = %error, "socket mode: connection failed; reconnecting");
                status.error(&error);
            }
        }
    }
    tracing::info!("socket mode: stopped");
}

/// Resolves once `stop` is `true` or its sender is gone.
async fn stopped(stop: &mut watch::Receiver<bool>) {
    let _ = stop.wait_for(|v| *v).await;
}

/// One delivery in flight.
struct InFlight<F> {
    id: String,
    kind: String,
    fut: Pin<Box<Timeout<F>>>,
}

/// Resolves with the delivery's outcome; never, when there is none.
async fn finish<F: Future>(
    slot: &mut Option<InFlight<F>>,
) -> Result<F::Output, tokio::time::error::Elapsed> {
    match slot {
        Some(f) => f.fut.as_mut().await,
        None => std::future::pending().await,
    }
}

/// One connection: open, connect, then read and deliver until it ends.
async fn session<O, OF, D, DF>(
    options: &Options,
    open: &mut O,
    deliver: &mut D,
    stop: &mut watch::Receiver<bool>,
    status: &StatusHandle,
    helloed: &mut bool,
) -> End
where
    O: FnMut() -> OF,
    OF: Future<Output = Result<String, String>>,
    D: FnMut(Envelope) -> DF,
    DF: Future<Output = Result<(), String>>,
{
    let url = tokio::select! {
        biased;
        () = stopped(stop) => return End::Stopped,
        r = timeout(options.open_timeout, open()) => match r {
            Err(_) => return End::Failed(format!(
                "opening a connection gave no URL within {:?} (Options::open_timeout)",
                options.open_timeout
            )),
            Ok(Err(e)) => return End::Failed(format!("opening a connection: {e}")),
            Ok(Ok(url)) => url,
        },
    };
    let host = match host_of(&url) {
        Ok(h) => h,
        Err(e) => return End::Failed(e),
    };
    status.update(|s| s.host = Some(host.clone()));
    let config = WebSocketConfig::default()
        .max_message_size(Some(options.max_message_bytes))
        .max_frame_size(Some(options.max_message_bytes));
    tracing::debug!(host = %host, "socket mode: connecting");
    let mut ws: Socket = tokio::select! {
        biased;
        () = stopped(stop) => return End::Stopped,
        r = timeout(
            options.open_timeout,
            tokio_tungstenite::connect_async_with_config(url.as_str(), Some(config), false),
        ) => match r {
            Err(_) => return End::Failed(format!(
                "WebSocket handshake with {host} not done within {:?} (Options::open_timeout)",
                options.open_timeout
            )),
            Ok(Err(e)) => return End::Failed(redact(
                &format!("WebSocket handshake with {host}: {}", describe(&e, options)),
                &url,
            )),
            Ok(Ok((ws, _response))) => ws,
        },
    };
    let mut link = Link {
        options,
        ws: &mut ws,
        host: &host,
        url: &url,
        status,
    };
    let end = connected(&mut link, deliver, stop, helloed).await;
    // Best effort: tell Slack we are going (bounded), then drop the socket.
    let _ = timeout(options.ack_timeout, ws.close(None)).await;
    end
}

/// An open WebSocket and what its errors are told with.
struct Link<'a> {
    options: &'a Options,
    ws: &'a mut Socket,
    host: &'a str,
    url: &'a str,
    status: &'a StatusHandle,
}

impl Link<'_> {
    /// Writes one message within [`Options::ack_timeout`]; `what` names it in the error.
    async fn send(&mut self, message: Message, what: &str) -> Result<(), String> {
        match timeout(self.options.ack_timeout, self.ws.send(message)).await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(e)) => Err(redact(
                &format!("{what} on {}: {}", self.host, describe(&e, self.options)),
                self.url,
            )),
            Err(_) => Err(format!(
                "{what} on {} not written within {:?} (Options::ack_timeout)",
                self.host, self.options.ack_timeout
            )),
        }
    }

    /// Acknowledges a kept delivery, or records why it was not kept.
    async fn settle(&mut self, done: InFlight<impl Future>, outcome: Delivered) -> Option<End> {
        let reason = match outcome {
            Ok(Ok(())) => {
                self.status.update(|s| s.delivered += 1);
                let ack = serde_json::json!({ "envelope_id": done.id }).to_string();
                let what = format!(
                    "acknowledging kept envelope {} (Slack will re-send it)",
                    done.id
                );
                if let Err(e) = self.send(Message::text(ack), &what).await {
                    return Some(End::Failed(e));
                }
                self.status.update(|s| s.acked += 1);
                tracing::debug!(envelope_id = %done.id, "socket mode: acknowledged");
                return None;
            }
            Ok(Err(reason)) => reason,
            Err(_) => format!(
                "no answer within {:?} (Options::deliver_timeout)",
                self.options.deliver_timeout
            ),
        };
        tracing::warn!(
            envelope_id = %done.id,
            kind = %done.kind,
            reason = %reason,
            "socket mode: delivery failed; not acknowledged, Slack will re-send it"
        );
        let message = format!("delivering envelope {} ({}): {reason}", done.id, done.kind);
        self.status.update(|s| s.deliver_failures += 1);
        self.status.error(&message);
        None
    }

    /// The text of what was read, `Ok(None)` for what needs no handling, or how the
    /// connection ended.
    fn text(&self, read: Option<Result<Message, WsError>>) -> Result<Option<Utf8Bytes>, End> {
        let host = self.host;
        match read {
            None => Err(End::Failed(format!("the connection to {host} ended"))),
            Some(Err(e)) => Err(End::Failed(redact(
                &format!("reading from {host}: {}", describe(&e, self.options)),
                self.url,
            ))),
            Some(Ok(Message::Text(text))) => Ok(Some(text)),
            Some(Ok(Message::Close(frame))) => {
                let code = frame.map_or_else(|| "none".into(), |f| u16::from(f.code).to_string());
                Err(End::Failed(format!(
                    "{host} closed the WebSocket (close code {code})"
                )))
            }
            Some(Ok(Message::Binary(b))) => {
                tracing::debug!(bytes = b.len(), "socket mode: binary message ignored");
                Ok(None)
            }
            // Ping (tungstenite answers it), pong, raw frame.
            Some(Ok(_)) => Ok(None),
        }
    }
}

/// What a delivery in flight came to.
type Delivered = Result<Result<(), String>, tokio::time::error::Elapsed>;

/// Reads and delivers on an open WebSocket until the connection ends.
async fn connected<D, DF>(
    link: &mut Link<'_>,
    deliver: &mut D,
    stop: &mut watch::Receiver<bool>,
    helloed: &mut bool,
) -> End
where
    D: FnMut(Envelope) -> DF,
    DF: Future<Output = Result<(), String>>,
{
    let options = link.options;
    let host = link.host;
    let hello_deadline = Instant::now() + options.hello_timeout;
    let mut last_heard = Instant::now();
    let mut ping = tokio::time::interval_at(
        Instant::now() + options.ping_interval,
        options.ping_interval,
    );
    ping.set_missed_tick_behavior(MissedTickBehavior::Delay);
    let mut queue: VecDeque<Envelope> = VecDeque::new();
    let mut in_flight: Option<InFlight<DF>> = None;
    // Set once Slack asked to reconnect: read no more, finish the delivery in flight.
    let mut closing: Option<End> = None;
    loop {
        if in_flight.is_none() {
            if let Some(end) = closing.take() {
                return end;
            }
            if let Some(env) = queue.pop_front() {
                tracing::debug!(
                    envelope_id = %env.envelope_id,
                    kind = %env.kind,
                    retry_attempt = env.retry_attempt,
                    "socket mode: delivering"
                );
                in_flight = Some(InFlight {
                    id: env.envelope_id.clone(),
                    kind: env.kind.clone(),
                    fut: Box::pin(timeout(options.deliver_timeout, deliver(env))),
                });
            }
        }
        let reading = closing.is_none() && queue.len() < options.max_queued.max(1);
        if !reading {
            // Silence counts only while reading.
            last_heard = Instant::now();
        }
        tokio::select! {
            biased;
            () = stopped(stop) => return End::Stopped,
            outcome = finish(&mut in_flight), if in_flight.is_some() => {
                if let Some(done) = in_flight.take() {
                    if let Some(end) = link.settle(done, outcome).await {
                        return end;
                    }
                }
            }
            read = link.ws.next(), if reading => {
                last_heard = Instant::now();
                let text = match link.text(read) {
                    Ok(Some(text)) => text,
                    Ok(None) => continue,
                    Err(end) => return end,
                };
                match parse(text.as_str()) {
                    Incoming::Hello(num_connections) => {
                        if !*helloed {
                            *helloed = true;
                            link.status.update(|s| s.connections += 1);
                            link.status.set_connected(true);
                            tracing::info!(host, num_connections, "socket mode: connected");
                        }
                    }
                    Incoming::Disconnect(reason) => {
                        // Queued envelopes are dropped unacknowledged: Slack re-sends them.
                        let dropped = queue.len();
                        queue.clear();
                        tracing::info!(
                            host,
                            reason = %reason,
                            dropped,
                            "socket mode: Slack asked to reconnect"
                        );
                        closing = Some(End::Refresh(format!("Slack sent disconnect ({reason})")));
                    }
                    Incoming::Envelope(env) => queue.push_back(env),
                    Incoming::Other(kind) => {
                        tracing::debug!(kind = %kind, "socket mode: message ignored");
                    }
                    Incoming::Unparsable(bytes) => {
                        tracing::warn!(bytes, "socket mode: message not a JSON object, ignored");
                    }
                }
            }
            () = sleep_until(hello_deadline), if !*helloed => {
                return End::Failed(format!(
                    "no hello from {host} within {:?} (Options::hello_timeout)",
                    options.hello_timeout
                ));
            }
            () = sleep_until(last_heard + options.idle_timeout), if reading => {
                return End::Failed(format!(
                    "nothing from {host} within {:?} (Options::idle_timeout)",
                    options.idle_timeout
                ));
            }
            _ = ping.tick() => {
                if let Err(e) = link.send(Message::Ping(Bytes::new()), "a ping").await {
                    return End::Failed(e);
                }
            }
        }
    }
}

/// A text message from Slack, classified.
enum Incoming {
    /// `hello`, with its `num_connections`.
    Hello(u64),
    /// `disconnect`, with its reason (sanitized).
    Disconnect(String),
    Envelope(Envelope),
    /// Another `type` without an envelope id.
    Other(String),
    /// Not a JSON object (its length).
    Unparsable(usize),
}

/// Longest envelope id taken (Slack's are UUIDs); a longer one is ignored.
const MAX_ENVELOPE_ID: usize = 256;

fn parse(text: &str) -> Incoming {
    let Ok(Value::Object(mut map)) = serde_json::from_str::<Value>(text) else {
        return Incoming::Unparsable(text.len());
    };
    let kind = map
        .get("type")
        .and_then(Value::as_str)
        .map(sanitize)
        .unwrap_or_default();
    match kind.as_str() {
        "hello" => {
            return Incoming::Hello(
                map.get("num_connections")
                    .and_then(Value::as_u64)
                    .unwrap_or(0),
            );
        }
        "disconnect" => {
            let reason = map
                .get("reason")
                .and_then(Value::as_str)
                .map(sanitize)
                .unwrap_or_default();
            return Incoming::Disconnect(reason);
        }
        _ => {}
    }
    let Some(envelope_id) = map
        .get("envelope_id")
        .and_then(Value::as_str)
        .map(str::to_string)
    else {
        return Incoming::Other(kind);
    };
    if envelope_id.len() > MAX_ENVELOPE_ID {
        return Incoming::Other(format!(
            "{kind} with an envelope id over {MAX_ENVELOPE_ID} bytes"
        ));
    }
    Incoming::Envelope(Envelope {
        envelope_id,
        kind,
        payload: map.remove("payload").unwrap_or(Value::Null),
        accepts_response_payload: map
            .get("accepts_response_payload")
            .and_then(Value::as_bool)
            .unwrap_or(false),
        retry_attempt: map
            .get("retry_attempt")
            .and_then(Value::as_u64)
            .unwrap_or(0),
        retry_reason: map
            .get("retry_reason")
            .and_then(Value::as_str)
            .filter(|r| !r.is_empty())
            .map(sanitize),
    })
}

/// A short word from Slack fit for a log line: at most 64 characters of `[A-Za-z0-9_.-]`.
fn sanitize(s: &str) -> String {
    s.chars()
        .filter(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
        .take(64)
        .collect()
}

/// The host of a `ws://` or `wss://` URL, or why it is not one.
fn host_of(url: &str) -> Result<String, String> {
    let uri: Uri = url
        .parse()
        .map_err(|_| "opening a connection gave an unparsable URL".to_string())?;
    match uri.scheme_str() {
        Some("ws") | Some("wss") => {}
        _ => return Err("opening a connection gave a URL that is not ws:// or wss://".into()),
    }
    uri.host()
        .map(str::to_string)
        .ok_or_else(|| "opening a connection gave a URL without a host".into())
}

/// A WebSocket error in words; the size bound names its option.
fn describe(e: &WsError, options: &Options) -> String {
    match e {
        WsError::Capacity(CapacityError::MessageTooLong { size, max_size }) => format!(
            "a message of {size} bytes is over the limit of {max_size} bytes \
             (Options::max_message_bytes = {})",
            options.max_message_bytes
        ),
        other => other.to_string(),
    }
}

/// `text` without the URL's path and query (they carry the connection ticket).
fn redact(text: &str, url: &str) -> String {
    let mut out = text.replace(url, "<socket mode URL>");
    let Some(start) = url.find("://").map(|p| p + 3) else {
        return out;
    };
    if let Some(i) = url[start..].find(['/', '?']) {
        let tail = &url[start + i..];
        if tail.len() > 1 {
            out = out.replace(tail, "/<redacted>");
        }
        if let Some(q) = tail.find('?') {
            if tail.len() > q + 1 {
                out = out.replace(&tail[q + 1..], "<redacted>");
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn redact_hides_path_and_query() {
        let url = "wss://wss-primary.slack.com/link/?ticket=SECRET&app_id=A1";
        let r = redact(&format!("error at {url}"), url);
        assert!(!r.contains("SECRET"), "{r}");
        let r = redact("GET /link/?ticket=SECRET&app_id=A1 failed", url);
        assert!(!r.contains("SECRET"), "{r}");
        assert_eq!(host_of(url).unwrap(), "wss-primary.slack.com");
        assert!(host_of("https://slack.com/").is_err());
    }

    #[test]
    fn parse_kinds() {
        assert!(matches!(
            parse(r#"{"type":"hello","num_connections":2}"#),
            Incoming::Hello(2)
        ));
        let disconnect = parse(r#"{"type":"disconnect","reason":"warning"}"#);
        assert!(matches!(disconnect, Incoming::Disconnect(r) if r == "warning"));
        assert!(matches!(parse("[1]"), Incoming::Unparsable(3)));
        let text = r#"{"envelope_id":"e1","type":"events_api","payload":{"a":1},
            "retry_attempt":2,"retry_reason":"timeout"}"#;
        match parse(text) {
            Incoming::Envelope(e) => {
                assert_eq!(e.envelope_id, "e1");
                assert_eq!(e.kind, "events_api");
                assert_eq!(e.payload, serde_json::json!({"a":1}));
                assert_eq!(e.retry_attempt, 2);
                assert_eq!(e.retry_reason.as_deref(), Some("timeout"));
            }
            _ => panic!("not an envelope"),
        }
    }
}
