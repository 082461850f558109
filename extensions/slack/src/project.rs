//! An Events API `event_callback` (over HTTP, or inside a Socket Mode envelope) to
//! at most one Event of family `slack.message`.
//!
//! Taken: an `app_mention`; a `message` in a direct message (`channel_type` `im`);
//! a `message` that replies in a thread (`thread_ts` other than its `ts`). Each is
//! one Event, of type `slack.message.app_mention`, `slack.message.im` or
//! `slack.message.reply`, keyed by its thread (`slack:<team>/<channel>/<thread
//! root ts>`, [`key`]), its delivery ID the payload's `event_id`, so the same event
//! delivered again (a retry, or the same event by the other way in) is kept once.
//!
//! Ignored: messages of bots, the app's own included (`bot_id`, a `bot_message`
//! subtype), edits, deletions and other subtypes but `thread_broadcast` and
//! `file_share`; a `message` that mentions the app (its `app_mention` is the one
//! taken); a channel message outside a thread; conversations outside the entry's
//! allow-list; every other event type.
//!
//! The data (schema `slack.message.v1`): `team_id`, `channel`, `channel_type`,
//! `user`, `text` (cut to [`MAX_TEXT_BYTES`], `text_truncated`), `ts`, `thread_ts`
//! (the thread's root, the message's own `ts` when it starts one), `kind`
//! (`app_mention`, `im`, `reply`), `event_id`, `api_app_id`.

use protocol::wire::{Delivery, IngressEvent, Payload};
use serde_json::{json, Value};

use crate::config::EntryConfig;
use crate::{FAMILY, SCHEMA};

/// The most bytes of a message's text an Event carries.
pub const MAX_TEXT_BYTES: usize = 64 * 1024;
/// The longest `event_id` accepted, in bytes.
pub const MAX_EVENT_ID_BYTES: usize = 200;
/// The longest team, channel, user or ts field accepted, in bytes.
const MAX_ID_BYTES: usize = 64;

/// The Work key of a thread: `slack:<team_id>/<channel>/<root ts>`.
pub fn key(team_id: &str, channel: &str, root_ts: &str) -> String {
    format!("slack:{team_id}/{channel}/{root_ts}")
}

/// The team, channel and thread root of a key made by [`key`].
pub fn parse_key(key: &str) -> Option<(&str, &str, &str)> {
    let rest = key.strip_prefix("slack:")?;
    let mut parts = rest.splitn(3, '/');
    let team = parts.next().filter(|s| !s.is_empty())?;
    let channel = parts.next().filter(|s| !s.is_empty())?;
    let ts = parts.next().filter(|s| !s.is_empty())?;
    Some((team, channel, ts))
}

/// What an `event_callback` comes to.
#[derive(Debug, Clone, PartialEq)]
pub enum Verdict {
    /// One delivery of one Event.
    Deliver(Delivery),
    /// Nothing, and why.
    Ignored(String),
}

/// `text` cut to at most `max` bytes at a character boundary, and whether it was cut.
pub fn truncate(text: &str, max: usize) -> (&str, bool) {
    if text.len() <= max {
        return (text, false);
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    (&text[..end], true)
}

/// A Slack ID or timestamp: 1 to 64 bytes of ASCII letters, digits, `.`, `-`, `_`.
fn id_ok(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= MAX_ID_BYTES
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b'_'))
}

fn s<'a>(v: &'a Value, field: &str) -> &'a str {
    v.get(field).and_then(Value::as_str).unwrap_or_default()
}

/// The app's bot user IDs in the payload's `authorizations` (the installation the
/// event is seen by).
fn bot_users(payload: &Value) -> Vec<&str> {
    payload
        .get("authorizations")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter(|a| a.get("is_bot").and_then(Value::as_bool) == Some(true))
        .filter_map(|a| a.get("user_id").and_then(Value::as_str))
        .filter(|u| !u.is_empty())
        .collect()
}

/// The Event (or why none) an `event_callback` payload makes for `entry`. `Err`
/// is a payload that cannot be read (no `event`, `event_id` or `team_id`).
pub fn event_callback(entry: &EntryConfig, payload: &Value) -> Result<Verdict, String> {
    let event_id = s(payload, "event_id").trim();
    if event_id.is_empty() {
        return Err("the payload has no event_id".into());
    }
    if event_id.len() > MAX_EVENT_ID_BYTES || !event_id.bytes().all(|b| b.is_ascii_graphic()) {
        return Err("the payload's event_id is not one line of printable ASCII".into());
    }
    let event = payload
        .get("event")
        .filter(|e| e.is_object())
        .ok_or("the payload has no event object")?;
    let team_id = match s(payload, "team_id") {
        "" => s(event, "team"),
        t => t,
    };
    let ignored = |why: String| Ok(Verdict::Ignored(why));
    let event_type = s(event, "type");
    let subtype = s(event, "subtype");
    let channel = s(event, "channel");
    let channel_type = s(event, "channel_type");
    let user = s(event, "user");
    let ts = s(event, "ts");
    let thread_ts = s(event, "thread_ts");
    if !matches!(event_type, "app_mention" | "message") {
        return ignored(format!(
            "Slack event `{event_type}` is not one this package takes"
        ));
    }
    if !subtype.is_empty() && !matches!(subtype, "thread_broadcast" | "file_share") {
        return ignored(format!("a message of subtype `{subtype}` is not taken"));
    }
    if event.get("bot_id").is_some_and(|b| !b.is_null()) || event.get("bot_profile").is_some() {
        return ignored("a bot's message (the app's own included) is not taken".into());
    }
    // A message the app posts carries its bot_id, so the check above also keeps
    // the app from hearing itself.
    let bots = bot_users(payload);
    if !id_ok(team_id) || !id_ok(channel) || !id_ok(ts) || !id_ok(user) {
        return Err(format!(
            "the `{event_type}` event lacks a readable team, channel, user or ts"
        ));
    }
    if !thread_ts.is_empty() && !id_ok(thread_ts) {
        return Err("the event's thread_ts is not a Slack timestamp".into());
    }
    let im = channel_type == "im";
    let reply = !thread_ts.is_empty() && thread_ts != ts;
    let text = s(event, "text");
    let kind = match event_type {
        "app_mention" => "app_mention",
        _ if bots.iter().any(|b| text.contains(&format!("<@{b}"))) => {
            return ignored(
                "a message that mentions the app is taken as its app_mention event".into(),
            )
        }
        _ if im => "im",
        _ if reply => "reply",
        _ => {
            return ignored(
                "a channel message outside a thread that does not mention the app".into(),
            )
        }
    };
    if !entry.allows(channel, im) {
        return ignored(format!(
            "conversation {channel} is not in the entry's channels"
        ));
    }
    let root = if thread_ts.is_empty() { ts } else { thread_ts };
    let (text, cut) = truncate(text, MAX_TEXT_BYTES);
    let mut data = json!({
        "team_id": team_id,
        "channel": channel,
        "channel_type": channel_type,
        "user": user,
        "text": text,
        "ts": ts,
        "thread_ts": root,
        "kind": kind,
        "event_id": event_id,
        "api_app_id": s(payload, "api_app_id"),
    });
    if cut {
        data["text_truncated"] = json!(true);
    }
    let occurred_at = payload
        .get("event_time")
        .and_then(Value::as_i64)
        .filter(|t| *t > 0)
        .map(|t| protocol::time::format_rfc3339_ms(t.saturating_mul(1000)))
        .unwrap_or_default();
    Ok(Verdict::Deliver(Delivery {
        source: entry.source.clone(),
        delivery_id: event_id.to_string(),
        body: None,
        events: vec![IngressEvent {
            event_type: format!("{FAMILY}.{kind}"),
            payload: Payload {
                schema: SCHEMA.to_string(),
                data,
            },
            keys: vec![key(team_id, channel, root)],
            occurred_at,
            snapshot: false,
        }],
    }))
}
