//! The toolbelt operations (`operation.call`): post in the Work's thread, edit a
//! message the package posted there, add a reaction, read the thread, look up a
//! user.
//!
//! The conversation and thread are the Work's own, from its `slack.message` Events
//! (their `channel` and `thread_ts`, the thread's root): an operation never names
//! another. The connection is the binding's (`authority.connection`), its
//! `bot_token` the Web API's.
//!
//! The calls that change Slack (`slack.post`, `slack.update`, `slack.react`) are
//! idempotent on the request ID: the output is kept in the package's KV under
//! `op/<digest of scope, Work, request ID>` (committed with an `absent` check), and a
//! call repeating a request ID answers it without calling Slack again. A message
//! `slack.post` made is remembered under `posted/<digest of scope, Work, channel,
//! ts>` in the same commit: `slack.update` edits only those; and as the Work's last
//! (`last_posted/<digest of scope, Work>`), which `slack.update` without a `ts` edits
//! (the progress message).

use protocol::wire::{
    Authority, KvPut, OperationCallParams, OperationCallResult, StateWorkEventsParams,
};
use protocol::{Code, RpcError};
use serde_json::{json, Map, Value};

use sdk::replay::{digest, kv_get};

use crate::api::{Client, SlackError};
use crate::FAMILY;

/// `slack.post`.
pub const POST: &str = "slack.post";
/// `slack.update`.
pub const UPDATE: &str = "slack.update";
/// `slack.react`.
pub const REACT: &str = "slack.react";
/// `slack.read_thread`.
pub const READ_THREAD: &str = "slack.read_thread";
/// `slack.user`.
pub const USER: &str = "slack.user";
/// Every operation, in manifest order.
pub const ALL: [&str; 5] = [POST, UPDATE, REACT, READ_THREAD, USER];

/// The longest text accepted, in bytes (Slack truncates a message's text past
/// 40000 characters).
pub const MAX_TEXT_BYTES: usize = 40_000;
/// The largest `blocks` accepted, as JSON, in bytes.
pub const MAX_BLOCKS_BYTES: usize = 64 * 1024;
/// The most messages `slack.read_thread` answers (its default: [`DEFAULT_READ`]).
pub const MAX_READ: usize = 1000;
/// How many messages `slack.read_thread` answers unless told.
pub const DEFAULT_READ: usize = 200;
/// Messages asked for per `conversations.replies` page.
pub const PAGE_SIZE: usize = 200;
/// The most `conversations.replies` pages one read takes.
pub const MAX_PAGES: usize = 5;
/// The most Work Event pages read to find the Work's thread.
pub const MAX_WORK_EVENT_PAGES: usize = 10;

fn invalid(m: impl Into<String>) -> RpcError {
    RpcError::new(Code::Invalid, m)
}

/// The Work's conversation and thread root.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Thread {
    /// The conversation ID.
    pub channel: String,
    /// The thread's root `ts`.
    pub thread_ts: String,
}

/// The thread of the first `slack.message` Event among `events`.
pub fn thread_of(events: &[protocol::wire::Event]) -> Option<Thread> {
    events.iter().find_map(|e| {
        let ours = e
            .event_type
            .strip_prefix(FAMILY)
            .is_some_and(|r| r.is_empty() || r.starts_with('.'));
        let data = &e.payload.data;
        let channel = data.get("channel").and_then(Value::as_str)?;
        let thread_ts = data.get("thread_ts").and_then(Value::as_str)?;
        (ours && !channel.is_empty() && !thread_ts.is_empty()).then(|| Thread {
            channel: channel.to_string(),
            thread_ts: thread_ts.to_string(),
        })
    })
}

/// Reads the Work's Events through the host for its thread.
pub async fn work_thread(host: &sdk::Host, work_id: &str) -> Result<Thread, RpcError> {
    let none = || invalid("the Work has no Slack thread (it was not started by a Slack message)");
    if work_id.is_empty() {
        return Err(none());
    }
    let mut after = 0;
    for _ in 0..MAX_WORK_EVENT_PAGES {
        let page = host
            .call_typed(&StateWorkEventsParams {
                id: work_id.to_string(),
                after,
                limit: 1000,
            })
            .await
            .map_err(|e| {
                RpcError::new(Code::Unavailable, format!("reading the Work's Events: {e}"))
            })?;
        if page.events.is_empty() {
            break;
        }
        if let Some(t) = thread_of(&page.events) {
            return Ok(t);
        }
        after = page.next_after(after);
    }
    Err(none())
}

fn text<'a>(input: &'a Value, field: &str, required: bool) -> Result<Option<&'a str>, RpcError> {
    match input.get(field) {
        None | Some(Value::Null) if !required => Ok(None),
        None | Some(Value::Null) => Err(invalid(format!("{field} is required"))),
        Some(Value::String(s)) => {
            if s.len() > MAX_TEXT_BYTES {
                return Err(invalid(format!(
                    "{field} is longer than {MAX_TEXT_BYTES} bytes"
                )));
            }
            if required && s.trim().is_empty() {
                return Err(invalid(format!("{field} is empty")));
            }
            Ok(Some(s))
        }
        Some(_) => Err(invalid(format!("{field} must be a string"))),
    }
}

/// A Slack message timestamp: digits, `.`, digits.
pub fn is_ts(ts: &str) -> bool {
    ts.split_once('.').is_some_and(|(a, b)| {
        !a.is_empty()
            && !b.is_empty()
            && a.len() <= 20
            && b.len() <= 20
            && a.bytes().all(|c| c.is_ascii_digit())
            && b.bytes().all(|c| c.is_ascii_digit())
    })
}

fn ts_input(input: &Value, field: &str) -> Result<Option<String>, RpcError> {
    match text(input, field, false)? {
        None => Ok(None),
        Some(ts) if is_ts(ts.trim()) => Ok(Some(ts.trim().to_string())),
        Some(_) => Err(invalid(format!(
            "{field} must be a Slack message timestamp (1712345678.123456)"
        ))),
    }
}

/// `blocks`, when given: a list of Block Kit blocks, sent as its JSON text.
fn blocks(input: &Value) -> Result<Option<String>, RpcError> {
    match input.get("blocks") {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Array(list)) => {
            let encoded = Value::Array(list.clone()).to_string();
            if encoded.len() > MAX_BLOCKS_BYTES {
                return Err(invalid(format!(
                    "blocks are larger than {MAX_BLOCKS_BYTES} bytes of JSON"
                )));
            }
            Ok(Some(encoded))
        }
        Some(_) => Err(invalid("blocks must be a list of Block Kit blocks")),
    }
}

fn message_out(m: &Value) -> Value {
    let mut out = Map::new();
    for field in ["user", "bot_id", "text", "ts", "thread_ts"] {
        if let Some(v) = m.get(field).filter(|v| !v.is_null()) {
            out.insert(field.into(), v.clone());
        }
    }
    Value::Object(out)
}

/// Runs one operation against Slack (no replay).
pub async fn run(
    client: &Client,
    operation: &str,
    input: &Value,
    thread: &Thread,
) -> Result<Value, RpcError> {
    let api = |e: SlackError| e.to_rpc();
    let channel = thread.channel.clone();
    match operation {
        POST => {
            let body = text(input, "text", true)?.unwrap_or_default();
            let mut params = vec![
                ("channel", channel.clone()),
                ("thread_ts", thread.thread_ts.clone()),
                ("text", body.to_string()),
            ];
            if let Some(b) = blocks(input)? {
                params.push(("blocks", b));
            }
            let answer = client.post("chat.postMessage", params).await.map_err(api)?;
            Ok(json!({
                "channel": answer.get("channel").cloned().unwrap_or(json!(channel)),
                "ts": answer.get("ts"),
                "thread_ts": thread.thread_ts,
            }))
        }
        UPDATE => {
            let ts = ts_input(input, "ts")?.ok_or_else(|| invalid("ts is required"))?;
            let body = text(input, "text", true)?.unwrap_or_default();
            let mut params = vec![
                ("channel", channel.clone()),
                ("ts", ts.clone()),
                ("text", body.to_string()),
            ];
            if let Some(b) = blocks(input)? {
                params.push(("blocks", b));
            }
            let answer = client.post("chat.update", params).await.map_err(api)?;
            Ok(json!({
                "channel": answer.get("channel").cloned().unwrap_or(json!(channel)),
                "ts": answer.get("ts").cloned().unwrap_or(json!(ts)),
            }))
        }
        REACT => {
            let name = text(input, "name", true)?
                .unwrap_or_default()
                .trim()
                .trim_matches(':')
                .to_string();
            if name.is_empty()
                || name.len() > 100
                || !name
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'+' | b'\''))
            {
                return Err(invalid(
                    "name must be an emoji name (eyes, white_check_mark)",
                ));
            }
            let ts = ts_input(input, "ts")?.unwrap_or_else(|| thread.thread_ts.clone());
            let params = vec![
                ("channel", channel.clone()),
                ("name", name.clone()),
                ("timestamp", ts.clone()),
            ];
            let already = match client.post("reactions.add", params).await {
                Ok(_) => false,
                Err(e) if e.error.as_deref() == Some("already_reacted") => true,
                Err(e) => return Err(api(e)),
            };
            Ok(json!({"channel": channel, "ts": ts, "name": name, "already": already}))
        }
        READ_THREAD => read_thread(client, input, thread).await,
        USER => {
            let user = text(input, "user", true)?
                .unwrap_or_default()
                .trim()
                .to_string();
            if user.len() > 64 || !user.bytes().all(|b| b.is_ascii_alphanumeric()) {
                return Err(invalid("user must be a Slack user ID (U0123ABCD)"));
            }
            let answer = client
                .get("users.info", vec![("user", user)])
                .await
                .map_err(api)?;
            // Slack's own description lists `user` as a list of one; Slack sends an
            // object. Both are read.
            let u = match answer.get("user") {
                Some(Value::Array(list)) => list.first().cloned().unwrap_or(Value::Null),
                Some(v) => v.clone(),
                None => Value::Null,
            };
            let p = |field: &str| u.pointer(&format!("/profile/{field}")).cloned();
            Ok(json!({
                "id": u.get("id"),
                "name": u.get("name"),
                "real_name": u.get("real_name").cloned().or_else(|| p("real_name")),
                "display_name": p("display_name"),
                "title": p("title"),
                "tz": u.get("tz"),
                "is_bot": u.get("is_bot"),
                "deleted": u.get("deleted"),
            }))
        }
        other => Err(RpcError::new(
            Code::NotFound,
            format!("`{other}` is not an operation of this package"),
        )),
    }
}

/// `slack.read_thread`: the thread's messages, oldest first, up to `limit`
/// (default [`DEFAULT_READ`], at most [`MAX_READ`]) over at most [`MAX_PAGES`]
/// pages; `truncated` says when more were left.
async fn read_thread(client: &Client, input: &Value, thread: &Thread) -> Result<Value, RpcError> {
    let limit = match input.get("limit") {
        None | Some(Value::Null) => DEFAULT_READ,
        Some(v) => v
            .as_u64()
            .and_then(|n| usize::try_from(n).ok())
            .filter(|n| (1..=MAX_READ).contains(n))
            .ok_or_else(|| invalid(format!("limit must be a whole number from 1 to {MAX_READ}")))?,
    };
    let mut messages: Vec<Value> = Vec::new();
    let mut cursor = String::new();
    let mut truncated = false;
    for page in 0..MAX_PAGES {
        let want = (limit - messages.len()).min(PAGE_SIZE);
        let mut params = vec![
            ("channel", thread.channel.clone()),
            ("ts", thread.thread_ts.clone()),
            ("limit", want.to_string()),
        ];
        if !cursor.is_empty() {
            params.push(("cursor", cursor.clone()));
        }
        let answer = client
            .get("conversations.replies", params)
            .await
            .map_err(|e| e.to_rpc())?;
        // Slack sends a list of messages; its description nests them one list
        // deeper. Both are read.
        for m in answer
            .get("messages")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            match m {
                Value::Array(inner) => messages.extend(inner.iter().map(message_out)),
                m => messages.push(message_out(m)),
            }
        }
        cursor = answer
            .pointer("/response_metadata/next_cursor")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string();
        let more =
            answer.get("has_more").and_then(Value::as_bool) == Some(true) || !cursor.is_empty();
        if messages.len() >= limit {
            truncated = more || messages.len() > limit;
            messages.truncate(limit);
            break;
        }
        if !more || cursor.is_empty() {
            break;
        }
        if page + 1 == MAX_PAGES {
            truncated = true;
        }
    }
    Ok(json!({
        "channel": thread.channel,
        "thread_ts": thread.thread_ts,
        "messages": messages,
        "truncated": truncated,
    }))
}

/// A refusal as the agent will see it: one without `data.agent_message` (the
/// package's own, written for the agent) gets its message as that.
pub fn for_agent(mut e: RpcError) -> RpcError {
    let message = protocol::toolbelt::agent_message(&e.message);
    if let Some(Value::Object(data)) = e.data.as_mut() {
        data.entry(protocol::toolbelt::AGENT_MESSAGE_FIELD)
            .or_insert_with(|| json!(message));
    }
    e
}

/// True for the operations that change Slack (replayed by request ID).
pub fn changes_slack(operation: &str) -> bool {
    matches!(operation, POST | UPDATE | REACT)
}

/// The KV key remembering that the package posted message `ts` in `channel` for
/// the Work.
pub fn posted_key(authority: &Authority, channel: &str, ts: &str) -> String {
    format!(
        "posted/{}",
        digest(&[&authority.scope_id, &authority.work_id, channel, ts])
    )
}

/// The KV key of the last message `slack.post` made for the Work (what
/// `slack.update` without a `ts` edits).
pub fn last_posted_key(authority: &Authority) -> String {
    format!(
        "last_posted/{}",
        digest(&[&authority.scope_id, &authority.work_id])
    )
}

/// Serves `operation.call`: the Work's thread, the replay, the call, the kept
/// result.
pub async fn call(
    state: &crate::State,
    host: &sdk::Host,
    params: &OperationCallParams,
) -> Result<OperationCallResult, RpcError> {
    let op = params.operation.as_str();
    if !ALL.contains(&op) {
        return Err(RpcError::new(
            Code::NotFound,
            format!("`{op}` is not an operation of this package"),
        ));
    }
    let authority = &params.authority;
    if authority.connection.is_empty() {
        return Err(RpcError::new(
            Code::Unauthorized,
            "the binding names no connection: a slack operation acts as the binding's slack connection",
        ));
    }
    let input = match &params.input {
        Value::Null => Value::Object(Map::new()),
        v if v.is_object() => v.clone(),
        _ => return Err(invalid("the input must be an object")),
    };
    let request_id = if changes_slack(op) {
        params.request_id.as_str()
    } else {
        ""
    };
    if let Some(output) = sdk::replay::kept_result(host, authority, request_id, op).await? {
        return Ok(OperationCallResult { output });
    }
    let thread = work_thread(host, &authority.work_id).await?;
    let mut input = input;
    if op == UPDATE {
        // Without a `ts`, the progress message: the last one `slack.post` made.
        let ts = match ts_input(&input, "ts")? {
            Some(ts) => ts,
            None => kv_get(host, &last_posted_key(authority))
                .await?
                .and_then(|v| v["ts"].as_str().map(str::to_string))
                .ok_or_else(|| {
                    invalid("no ts given, and slack.post has posted no message for this Work yet")
                })?,
        };
        if let Some(o) = input.as_object_mut() {
            o.insert("ts".into(), json!(ts));
        }
        if kv_get(host, &posted_key(authority, &thread.channel, &ts))
            .await?
            .is_none()
        {
            return Err(RpcError::new(
                Code::Unauthorized,
                format!(
                    "message {ts} was not posted by slack.post for this Work: slack.update edits only those"
                ),
            ));
        }
    }
    let client = state
        .client(host, &authority.scope_id, &authority.connection)
        .await?;
    let output = run(&client, op, &input, &thread).await?;
    let mut puts = Vec::new();
    if op == POST {
        if let Some(ts) = output.get("ts").and_then(Value::as_str) {
            puts.push(KvPut {
                namespace: String::new(),
                key: posted_key(authority, &thread.channel, ts),
                value: json!({"channel": thread.channel, "ts": ts}),
            });
            puts.push(KvPut {
                namespace: String::new(),
                key: last_posted_key(authority),
                value: json!({"channel": thread.channel, "ts": ts}),
            });
        }
    }
    let output =
        sdk::replay::keep_result_with(host, authority, request_id, op, output, puts).await?;
    Ok(OperationCallResult { output })
}
