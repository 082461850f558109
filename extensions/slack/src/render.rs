//! `event.render`: a `slack.message` Event as the agent's prompt shows it — the
//! thread as people wrote it, up to and including the Event's message, with names
//! rather than IDs.
//!
//! - The thread is read with `conversations.replies` as the Work's binding's
//!   connection (one page of at most [`READ_LIMIT`] messages); without a connection,
//!   or when Slack refuses, the Event's own message is shown with a line saying why.
//! - Authors and `<@U…>` mentions are named through `users.info` (the display name,
//!   else the real name, else the user name), at most [`MAX_LOOKUPS`] lookups a
//!   rendering, each name cached for [`NAME_TTL_MS`] (at most [`MAX_CACHED`]
//!   names); an ID Slack does not name stays as it is.
//! - Slack's markup is resolved ([`resolve`]): `<@U…>` → `@Name`, `<#C…|name>` →
//!   `#name`, `<!here>` → `@here`, `<https://…|text>` → `[text](https://…)`, and
//!   `&lt;`, `&gt;`, `&amp;` unescaped.
//! - Bounded: the first message and the last messages that fit in
//!   [`MAX_MESSAGES`] and the byte bound (the call's `max_bytes`, at most
//!   [`MAX_RENDERED_BYTES`]), a line saying how many were left out.

use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};

use protocol::wire::{EventRenderParams, EventRenderResult, MAX_RENDERED_BYTES};
use protocol::{Code, RpcError};
use serde_json::{json, Value};

use crate::api::{self, Client};
use crate::ops::{self, Thread};
use crate::{FAMILY, SCHEMA};

/// The most messages read of a thread.
pub const READ_LIMIT: usize = 200;
/// The most messages shown.
pub const MAX_MESSAGES: usize = 50;
/// The most `users.info` calls one rendering makes.
pub const MAX_LOOKUPS: usize = 20;
/// How long a name is kept, in ms.
pub const NAME_TTL_MS: i64 = 10 * 60 * 1000;
/// The most names kept.
pub const MAX_CACHED: usize = 1000;
/// The bound when the call gives none.
pub const DEFAULT_MAX_BYTES: usize = 16 * 1024;

/// The byte bound of a call's `max_bytes`.
pub fn bound(max_bytes: u32) -> usize {
    match usize::try_from(max_bytes).unwrap_or(MAX_RENDERED_BYTES) {
        0 => DEFAULT_MAX_BYTES,
        n => n.min(MAX_RENDERED_BYTES),
    }
}

type Names = HashMap<String, String>;

/// (connection, user ID) → (name, when it was read, ms).
type Cache = HashMap<(String, String), (String, i64)>;

fn cache() -> &'static Mutex<Cache> {
    static CACHE: OnceLock<Mutex<Cache>> = OnceLock::new();
    CACHE.get_or_init(|| Mutex::new(HashMap::new()))
}

fn is_user_id(s: &str) -> bool {
    (s.starts_with('U') || s.starts_with('W'))
        && s.len() <= 32
        && s.len() > 1
        && s.bytes().all(|b| b.is_ascii_alphanumeric())
}

/// The user IDs `text` mentions (`<@U…>`).
pub fn mentioned(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(i) = rest.find("<@") {
        rest = &rest[i + 2..];
        let end = rest.find(['>', '|']).unwrap_or(rest.len());
        let id = &rest[..end];
        if is_user_id(id) && !out.iter().any(|x| x == id) {
            out.push(id.to_string());
        }
    }
    out
}

/// Names `ids` (cached, or through `users.info`, at most [`MAX_LOOKUPS`] calls).
pub async fn names(client: &Client, cache_key: &str, ids: &[String]) -> Names {
    let mut out = Names::new();
    let now = protocol::time::now_ms();
    let mut lookups = 0;
    for id in ids {
        let cached = crate::lock(cache())
            .get(&(cache_key.to_string(), id.clone()))
            .filter(|(_, at)| now - at < NAME_TTL_MS)
            .map(|(n, _)| n.clone());
        if let Some(n) = cached {
            out.insert(id.clone(), n);
            continue;
        }
        if lookups >= MAX_LOOKUPS {
            continue;
        }
        lookups += 1;
        match api::user_name(client, id).await {
            Ok(Some(name)) => {
                let mut c = crate::lock(cache());
                if c.len() >= MAX_CACHED {
                    c.clear();
                }
                c.insert((cache_key.to_string(), id.clone()), (name.clone(), now));
                out.insert(id.clone(), name);
            }
            Ok(None) => {}
            Err(e) => tracing::info!(user = %id, error = %e, "naming a Slack user failed"),
        }
    }
    out
}

/// Slack's markup in `text` resolved for a person (see the module doc).
pub fn resolve(text: &str, names: &Names) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(i) = rest.find('<') {
        out.push_str(&unescape(&rest[..i]));
        let after = &rest[i + 1..];
        let Some(end) = after.find('>') else {
            out.push_str(&unescape(&rest[i..]));
            rest = "";
            break;
        };
        let token = &after[..end];
        let (target, label) = match token.split_once('|') {
            Some((t, l)) => (t, Some(unescape(l))),
            None => (token, None),
        };
        let shown = if let Some(id) = target.strip_prefix('@') {
            match (names.get(id), label) {
                (Some(n), _) => format!("@{n}"),
                (None, Some(l)) => format!("@{}", l.trim_start_matches('@')),
                (None, None) => format!("@{id}"),
            }
        } else if let Some(id) = target.strip_prefix('#') {
            format!("#{}", label.unwrap_or_else(|| id.to_string()))
        } else if let Some(special) = target.strip_prefix('!') {
            match label {
                Some(l) => l,
                None => {
                    let word = special.split('^').next().unwrap_or(special);
                    format!("@{word}")
                }
            }
        } else {
            let url = unescape(target);
            match label {
                Some(l) if l != url => format!("[{l}]({url})"),
                _ => url,
            }
        };
        out.push_str(&shown);
        rest = &after[end + 1..];
    }
    out.push_str(&unescape(rest));
    out
}

fn unescape(s: &str) -> String {
    s.replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&amp;", "&")
}

/// A message as the thread shows it.
#[derive(Debug, Clone, PartialEq)]
pub struct Message {
    /// The author's user ID (empty for a bot without one).
    pub user: String,
    /// Whether a bot (the app itself included) wrote it.
    pub bot: bool,
    /// Its text, as Slack has it.
    pub text: String,
    /// Its ts.
    pub ts: String,
}

fn when(ts: &str) -> String {
    let secs = ts
        .split('.')
        .next()
        .and_then(|s| s.parse::<i64>().ok())
        .unwrap_or(0);
    if secs <= 0 {
        return String::new();
    }
    let t = protocol::time::format_rfc3339_ms(secs.saturating_mul(1000));
    // 2021-01-10T01:22:21.000Z → 2021-01-10 01:22 UTC
    format!(
        "{} {} UTC",
        t.get(..10).unwrap_or_default(),
        t.get(11..16).unwrap_or_default()
    )
}

fn line(m: &Message, names: &Names, mark: bool) -> String {
    let who = if m.user.is_empty() {
        "a bot".to_string()
    } else {
        names
            .get(&m.user)
            .cloned()
            .unwrap_or_else(|| m.user.clone())
    };
    let bot = if m.bot { " (bot)" } else { "" };
    let this = if mark { " ← this message" } else { "" };
    let text = resolve(&m.text, names);
    let text = text.trim();
    let body = if text.contains('\n') {
        format!(
            "\n{}",
            text.lines()
                .map(|l| format!("> {l}"))
                .collect::<Vec<_>>()
                .join("\n")
        )
    } else {
        format!(" {text}")
    };
    format!("**{who}**{bot} ({}){this}:{body}", when(&m.ts))
}

/// The thread's rendering: a header, the first message, the last messages that fit
/// in [`MAX_MESSAGES`] and `max` bytes, and the notes. `this_ts` is marked.
pub fn markdown(
    channel: &str,
    messages: &[Message],
    names: &Names,
    this_ts: &str,
    notes: &[String],
    max: usize,
) -> EventRenderResult {
    let mut head = format!("Slack thread in conversation {channel}");
    if messages.len() > 1 {
        head.push_str(&format!(" ({} messages)", messages.len()));
    }
    head.push_str(":\n");
    for n in notes {
        head.push_str(&format!("_{n}_\n"));
    }
    let Some((first, rest)) = messages.split_first() else {
        return finish(head, max);
    };
    let first_line = line(first, names, first.ts == this_ts);
    let mut used = head.len() + first_line.len() + 2;
    let mut tail: Vec<String> = Vec::new();
    let room = MAX_MESSAGES.saturating_sub(1);
    for m in rest.iter().rev() {
        if tail.len() >= room {
            break;
        }
        let l = line(m, names, m.ts == this_ts);
        // Leave room for the line saying what was left out.
        if used + l.len() + 2 + 64 > max {
            break;
        }
        used += l.len() + 2;
        tail.push(l);
    }
    tail.reverse();
    let left_out = rest.len() - tail.len();
    let mut out = head;
    out.push('\n');
    out.push_str(&first_line);
    out.push_str("\n\n");
    if left_out > 0 {
        out.push_str(&format!(
            "_… {left_out} earlier messages left out (the rendering is bounded) …_\n\n"
        ));
    }
    for l in tail {
        out.push_str(&l);
        out.push_str("\n\n");
    }
    let mut r = finish(out.trim_end().to_string(), max);
    r.truncated |= left_out > 0;
    r
}

fn finish(text: String, max: usize) -> EventRenderResult {
    let (cut, truncated) = crate::project::truncate(&text, max);
    EventRenderResult {
        text: cut.to_string(),
        truncated,
    }
}

fn of_event(data: &Value) -> Message {
    let s = |k: &str| {
        data.get(k)
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string()
    };
    Message {
        user: s("user"),
        bot: false,
        text: s("text"),
        ts: s("ts"),
    }
}

fn of_read(m: &Value) -> Message {
    let s = |k: &str| {
        m.get(k)
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string()
    };
    Message {
        user: s("user"),
        bot: m.get("bot_id").is_some_and(|b| !b.is_null()),
        text: s("text"),
        ts: s("ts"),
    }
}

fn ts_key(ts: &str) -> (u64, u64) {
    let (a, b) = ts.split_once('.').unwrap_or((ts, "0"));
    (a.parse().unwrap_or(0), b.parse().unwrap_or(0))
}

/// Serves `event.render`.
pub async fn serve(
    state: &crate::State,
    host: &sdk::Host,
    params: &EventRenderParams,
) -> Result<EventRenderResult, RpcError> {
    let event = &params.event;
    let ours = event
        .event_type
        .strip_prefix(FAMILY)
        .is_some_and(|r| r.is_empty() || r.starts_with('.'));
    if !ours || event.payload.schema != SCHEMA {
        return Err(RpcError::new(
            Code::Invalid,
            format!(
                "`{}` ({}) is not a {FAMILY} Event this release reads ({SCHEMA})",
                event.event_type, event.payload.schema
            ),
        ));
    }
    let data = &event.payload.data;
    let own = of_event(data);
    let channel = data
        .get("channel")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    let thread_ts = data
        .get("thread_ts")
        .and_then(Value::as_str)
        .unwrap_or(&own.ts)
        .to_string();
    let max = bound(params.max_bytes);
    let mut notes = Vec::new();
    let client = if params.connection.is_empty() {
        notes.push(
            "The thread was not read from Slack: the Work's binding names no connection."
                .to_string(),
        );
        None
    } else {
        match state
            .client(host, &event.scope_id, &params.connection)
            .await
        {
            Ok(c) => Some(c),
            Err(e) => {
                notes.push(format!(
                    "The thread was not read from Slack ({}).",
                    protocol::toolbelt::agent_message(&e.message)
                ));
                None
            }
        }
    };
    let mut messages = vec![own.clone()];
    let mut names = Names::new();
    if let Some(client) = &client {
        let thread = Thread {
            channel: channel.clone(),
            thread_ts: thread_ts.clone(),
        };
        match ops::run(
            client,
            ops::READ_THREAD,
            &json!({"limit": READ_LIMIT}),
            &thread,
        )
        .await
        {
            Ok(answer) => {
                let upto = ts_key(&own.ts);
                let mut read: Vec<Message> = answer["messages"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(of_read)
                    .filter(|m| !m.ts.is_empty() && ts_key(&m.ts) <= upto)
                    .collect();
                if !read.iter().any(|m| m.ts == own.ts) {
                    read.push(own.clone());
                }
                read.sort_by_key(|m| ts_key(&m.ts));
                if answer["truncated"].as_bool() == Some(true) {
                    notes.push(format!(
                        "Only the first {READ_LIMIT} messages of the thread were read."
                    ));
                }
                messages = read;
            }
            Err(e) => notes.push(format!(
                "The thread was not read from Slack ({}); showing this message alone.",
                protocol::toolbelt::agent_message(&e.message)
            )),
        }
        let mut ids: Vec<String> = Vec::new();
        for m in &messages {
            for id in std::iter::once(m.user.clone())
                .filter(|u| is_user_id(u))
                .chain(mentioned(&m.text))
            {
                if !ids.contains(&id) {
                    ids.push(id);
                }
            }
        }
        let cache_key = format!("{}/{}", event.scope_id, params.connection);
        names = self::names(client, &cache_key, &ids).await;
    }
    Ok(markdown(&channel, &messages, &names, &own.ts, &notes, max))
}
