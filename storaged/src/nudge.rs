//! Nudges across hosts (PostgreSQL only): the topics storaged publishes on its
//! own bus after a write (`event.accepted`, `work.changed`, `config.applied`)
//! also go out as `NOTIFY open_conduit`, and the ones every other storaged on
//! the database sends come back in through `LISTEN` and are published on this
//! host's bus, so a daemon waiting on a nudge hears of another host's writes as
//! soon as of its own.
//!
//! A nudge is only a hint to look again (every daemon also looks on a timer):
//! one lost while the database is away costs a delay, never a write. Bursts are
//! coalesced: at most one notification per topic per [`COALESCE`].

use crate::sql::PgTarget;
use serde_json::{json, Value};
use std::sync::mpsc::{self, RecvTimeoutError, SyncSender, TrySendError};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The channel every storaged listens on.
pub const CHANNEL: &str = "open_conduit";
/// How long nudges of one topic are gathered into one notification.
pub const COALESCE: Duration = Duration::from_millis(5);
/// Most nudges waiting to be sent; past it a nudge is dropped (the next one,
/// or the daemons' own timers, carries the news).
pub const MAX_QUEUED: usize = 1024;
/// The longest wait before connecting again after a loss.
const MAX_BACKOFF: Duration = Duration::from_secs(5);
/// PostgreSQL's limit on a notification's payload is 8000 bytes; params past
/// this are sent without their params.
const MAX_PAYLOAD: usize = 7000;

/// Publishes a topic on this host's bus.
pub type LocalPublish = Arc<dyn Fn(&str, &Value) + Send + Sync>;

/// Sends this host's nudges to the others.
#[derive(Clone)]
pub struct Nudges {
    tx: SyncSender<(String, Value)>,
}

impl Nudges {
    /// Start the sender and the listener for `target`; `local` publishes what
    /// other hosts send. `origin` names this storaged (its own notifications are
    /// not published twice).
    pub fn start(target: PgTarget, origin: String, local: LocalPublish) -> Result<Nudges, String> {
        let (tx, rx) = mpsc::sync_channel::<(String, Value)>(MAX_QUEUED);
        let send_target = target.clone();
        let send_origin = origin.clone();
        std::thread::Builder::new()
            .name("storaged-notify".into())
            .spawn(move || sender(send_target, send_origin, rx))
            .map_err(|e| format!("start the notify thread: {e}"))?;
        std::thread::Builder::new()
            .name("storaged-listen".into())
            .spawn(move || listener(target, origin, local))
            .map_err(|e| format!("start the listen thread: {e}"))?;
        Ok(Nudges { tx })
    }

    /// Tell the other hosts (never blocks).
    pub fn send(&self, topic: &str, params: &Value) {
        match self.tx.try_send((topic.to_string(), params.clone())) {
            Ok(()) | Err(TrySendError::Disconnected(_)) => {}
            Err(TrySendError::Full(_)) => {
                tracing::debug!(topic, "nudge queue full ({MAX_QUEUED}); dropped");
            }
        }
    }
}

fn payload(origin: &str, topic: &str, params: &Value) -> String {
    let text = json!({"origin": origin, "topic": topic, "params": params}).to_string();
    if text.len() <= MAX_PAYLOAD {
        return text;
    }
    json!({"origin": origin, "topic": topic, "params": {}}).to_string()
}

fn backoff(wait: &mut Duration) {
    std::thread::sleep(*wait);
    *wait = (*wait * 2).min(MAX_BACKOFF);
}

fn sender(target: PgTarget, origin: String, rx: mpsc::Receiver<(String, Value)>) {
    let mut client: Option<crate::sql::PgSession> = None;
    let mut wait = Duration::from_millis(100);
    loop {
        let Ok(first) = rx.recv() else {
            return;
        };
        // Gather the burst: one notification per topic.
        let mut batch: Vec<(String, Value)> = vec![first];
        let until = Instant::now() + COALESCE;
        loop {
            let left = until.saturating_duration_since(Instant::now());
            match rx.recv_timeout(left) {
                Ok((topic, params)) => {
                    if let Some(slot) = batch.iter_mut().find(|(t, _)| *t == topic) {
                        slot.1 = params;
                    } else {
                        batch.push((topic, params));
                    }
                }
                Err(RecvTimeoutError::Timeout) => break,
                Err(RecvTimeoutError::Disconnected) => return,
            }
        }
        if client.as_ref().is_none_or(|c| c.is_closed()) {
            match target.connect() {
                Ok(c) => {
                    client = Some(c);
                    wait = Duration::from_millis(100);
                }
                Err(e) => {
                    tracing::debug!(error = %e, "cannot send nudges to the other hosts now");
                    client = None;
                    backoff(&mut wait);
                    continue;
                }
            }
        }
        let Some(c) = client.as_mut() else {
            continue;
        };
        for (topic, params) in &batch {
            let text = payload(&origin, topic, params);
            if let Err(e) = c.execute("SELECT pg_notify(?1, ?2)", &[&CHANNEL, &text]) {
                tracing::debug!(error = %e, "a nudge to the other hosts failed");
                break;
            }
        }
    }
}

fn listener(target: PgTarget, origin: String, local: LocalPublish) {
    let mut wait = Duration::from_millis(100);
    loop {
        let mut session = match target.connect() {
            Ok(s) => s,
            Err(e) => {
                tracing::debug!(error = %e, "cannot listen for the other hosts' nudges now");
                backoff(&mut wait);
                continue;
            }
        };
        if let Err(e) = session.batch(&format!("LISTEN {CHANNEL}")) {
            tracing::debug!(error = %e, "LISTEN failed");
            backoff(&mut wait);
            continue;
        }
        wait = Duration::from_millis(100);
        tracing::debug!("listening for the other hosts' nudges");
        // After a (re)connection something may have been missed: nudge every
        // topic once, so the daemons look again.
        for topic in ["event.accepted", "work.changed"] {
            local(topic, &json!({"method": "nudge.reconnected"}));
        }
        session.each_notification(Duration::from_secs(1), &mut |text: &str| {
            let Ok(v) = serde_json::from_str::<Value>(text) else {
                return;
            };
            if v["origin"].as_str() == Some(origin.as_str()) {
                return;
            }
            if let Some(topic) = v["topic"].as_str() {
                local(topic, &v["params"]);
            }
        });
        tracing::debug!("the nudge connection is lost; connecting again");
        backoff(&mut wait);
    }
}
