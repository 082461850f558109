//! The projector (`task.run` of [`TASK`]): each Slack thread that is a Work shows the
//! Work's state, as one status message in the thread (posted once, then edited in
//! place with `chat.update`) and a reaction on the thread's first message (the old
//! one removed when the state changes).
//!
//! - Which Works: the package watches the thread keys it delivered Events on (KV
//!   `watch/<digest of scope and key>`, written after a delivering `webhook.handle`,
//!   [`watch`]), and each pass also reads one page of the open Works of each scope
//!   (a cursor kept in memory, so every open Work is seen within a few passes) for
//!   keys it did not deliver (Socket Mode, a restart). A watch is dropped once every
//!   Work on its key ended and shows it, or an hour after it was made when no Work
//!   came of it.
//! - What it shows ([`view`]): `Open Conduit · Work w-… · running`, with the
//!   buttons of the actions offered on the Work (`action.list`): `core`'s stop and
//!   retry, and what another provider awaits of a person (an ask's choices, one
//!   button each; a gate's approve and reject). A button's `value` names the Work
//!   and the action ([`crate::actions`] reads it back).
//! - KV `status/<work>` keeps the message (`channel`, `ts`), the state shown, the
//!   reaction and a digest of the message: a pass changes Slack only when one of
//!   them changed. A first post claims the key (`absent`) before posting, so a
//!   message is posted once.
//! - Bounded: at most [`MAX_WORKS_A_PASS`] Works a pass, [`MAX_BUTTONS`] buttons a
//!   message; passes run one at a time in the process.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Mutex, OnceLock};

use protocol::wire::{
    ActionListParams, KvCheck, KvCommitParams, KvDelete, KvGetParams, KvListParams, KvPut,
    ListedAction, StateWorksParams, TaskRunResult, WebhookHandleResult, Work, CORE_PROVIDER,
};
use protocol::{CallError, Code, RpcError};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use sha2::{Digest, Sha256};

use crate::api::{self, Client};
use crate::project;

/// The projector task.
pub const TASK: &str = "slack.status";
/// The first words of every status message.
pub const HEADER: &str = "Open Conduit";
/// The most Works one pass looks at.
pub const MAX_WORKS_A_PASS: usize = 100;
/// The most watches one pass reads.
pub const MAX_WATCHES_A_PASS: u32 = 200;
/// The most open Works read of a scope per pass (one page).
pub const OPEN_PAGE: u32 = 200;
/// The most buttons on a status message.
pub const MAX_BUTTONS: usize = 10;
/// The longest button label Slack takes, in characters.
pub const MAX_LABEL_CHARS: usize = 75;
/// The longest button value Slack takes, in bytes.
pub const MAX_VALUE_BYTES: usize = 2000;
/// How long a watch that found no Work is kept, in ms.
pub const WATCH_TTL_MS: i64 = 60 * 60 * 1000;
/// The states a Work ends in (a completed one reopens on new input).
pub const ENDED: [&str; 3] = ["completed", "failed", "cancelled"];
/// The open states.
pub const OPEN: [&str; 5] = ["pending", "idle", "running", "waiting", "woken"];

/// The reaction that shows a state.
pub fn reaction(state: &str) -> &'static str {
    match state {
        "running" => "eyes",
        "waiting" => "hourglass",
        "idle" => "speech_balloon",
        "completed" => "white_check_mark",
        "failed" => "x",
        "cancelled" => "no_entry_sign",
        _ => "hourglass_flowing_sand",
    }
}

/// The state in words.
pub fn words(state: &str) -> &str {
    match state {
        "pending" | "woken" => "queued",
        "idle" => "its turn is done; a reply in the thread starts the next",
        "waiting" => "waiting",
        "completed" => "done",
        other => other,
    }
}

/// What KV keeps of a Work's status message.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Kept {
    /// The scope.
    pub scope_id: String,
    /// The connection it was posted as.
    pub connection: String,
    /// The conversation.
    pub channel: String,
    /// The thread's root.
    pub thread_ts: String,
    /// The status message's ts; empty while its first post is under way (or failed).
    #[serde(default)]
    pub ts: String,
    /// The state it shows.
    #[serde(default)]
    pub state: String,
    /// The reaction on the thread's root.
    #[serde(default)]
    pub reaction: String,
    /// A digest of its text and blocks.
    #[serde(default)]
    pub digest: String,
}

/// What one watch keeps.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Watch {
    /// The scope.
    pub scope_id: String,
    /// The thread key.
    pub key: String,
    /// When it was made (ms).
    pub since_ms: i64,
}

fn digest(parts: &[&str]) -> String {
    let mut h = Sha256::new();
    for p in parts {
        h.update(p.as_bytes());
        h.update([0]);
    }
    h.finalize()
        .iter()
        .take(16)
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// KV key of a Work's status message.
pub fn status_key(work_id: &str) -> String {
    format!("status/{work_id}")
}

/// KV key of a watch.
pub fn watch_key(scope_id: &str, key: &str) -> String {
    format!("watch/{}", digest(&[scope_id, key]))
}

/// A button's value: the Work and the action, read back by [`crate::actions`].
pub fn button_value(work_id: &str, provider: &str, action: &str, input: &Value) -> String {
    json!({"w": work_id, "p": provider, "a": action, "i": input}).to_string()
}

fn label(text: &str) -> String {
    let one: String = text.split_whitespace().collect::<Vec<_>>().join(" ");
    if one.chars().count() <= MAX_LABEL_CHARS {
        return one;
    }
    let mut s: String = one.chars().take(MAX_LABEL_CHARS - 1).collect();
    s.push('…');
    s
}

/// The buttons of the offered actions: `core`'s stop and retry, and each action
/// another provider awaits (one button per choice of an ask), at most
/// [`MAX_BUTTONS`]; a value over Slack's bound is left out.
pub fn buttons(work_id: &str, offers: &[ListedAction]) -> Vec<Value> {
    let mut out = Vec::new();
    let mut push = |text: String, value: String, style: Option<&str>| {
        if out.len() >= MAX_BUTTONS || value.len() > MAX_VALUE_BYTES {
            return;
        }
        let mut b = json!({
            "type": "button",
            "action_id": format!("oc-{}", out.len()),
            "text": {"type": "plain_text", "text": label(&text)},
            "value": value,
        });
        if let Some(s) = style {
            b["style"] = json!(s);
        }
        out.push(b);
    };
    for a in offers.iter().filter(|a| a.provider == CORE_PROVIDER) {
        let (text, style) = match a.offer.id.as_str() {
            "stop" => ("Stop", Some("danger")),
            "retry" => ("Retry", None),
            _ => continue,
        };
        push(
            text.to_string(),
            button_value(work_id, CORE_PROVIDER, &a.offer.id, &Value::Null),
            style,
        );
    }
    for a in offers
        .iter()
        .filter(|a| a.provider != CORE_PROVIDER && a.offer.awaited)
    {
        if a.offer.choices.is_empty() {
            if !a.offer.prompt.is_empty() {
                // Free text needs a form Slack's buttons cannot give.
                continue;
            }
            let text = if a.offer.label.is_empty() {
                &a.offer.id
            } else {
                &a.offer.label
            };
            let style = match a.offer.id.as_str() {
                "approve" | "admit" => Some("primary"),
                "reject" => Some("danger"),
                _ => None,
            };
            push(
                text.clone(),
                button_value(work_id, &a.provider, &a.offer.id, &a.offer.input),
                style,
            );
            continue;
        }
        for choice in &a.offer.choices {
            let mut input = a.offer.input.as_object().cloned().unwrap_or_default();
            input.insert("answer".into(), json!(choice));
            push(
                choice.clone(),
                button_value(work_id, &a.provider, &a.offer.id, &Value::Object(input)),
                None,
            );
        }
    }
    out
}

/// The status message of a Work in `state` with `offers`: its text (the
/// notification's fallback) and its blocks.
pub fn view(work: &Work, offers: &[ListedAction]) -> (String, Vec<Value>) {
    let mut text = format!("{HEADER} · Work `{}` · {}", work.id, words(&work.state));
    let asks: Vec<String> = offers
        .iter()
        .filter(|a| a.provider != CORE_PROVIDER && a.offer.awaited)
        .map(|a| {
            let d = if a.offer.detail.is_empty() {
                &a.offer.prompt
            } else {
                &a.offer.detail
            };
            format!("• {}", label(d))
        })
        .filter(|s| s.len() > 2)
        .take(MAX_BUTTONS)
        .collect();
    if !asks.is_empty() {
        text.push_str("\nWaiting for a person:\n");
        text.push_str(&asks.join("\n"));
    }
    let mut blocks = vec![json!({
        "type": "section",
        "text": {"type": "mrkdwn", "text": text},
    })];
    let b = buttons(&work.id, offers);
    if !b.is_empty() {
        blocks.push(json!({"type": "actions", "block_id": "oc-actions", "elements": b}));
    }
    (text, blocks)
}

fn unavailable(what: &str, e: CallError) -> RpcError {
    RpcError::new(Code::Unavailable, format!("{what}: {e}"))
}

/// After a delivering `webhook.handle` (or Socket Mode delivery): watch each thread
/// key the deliveries carry, in the background.
pub fn after_deliveries(host: &sdk::Host, scope_id: &str, result: &WebhookHandleResult) {
    let keys: Vec<String> = result
        .deliveries
        .iter()
        .flat_map(|d| d.events.iter())
        .flat_map(|e| e.keys.iter())
        .filter(|k| project::parse_key(k).is_some())
        .cloned()
        .collect();
    if keys.is_empty() {
        return;
    }
    let (host, scope_id) = (host.clone(), scope_id.to_string());
    tokio::spawn(async move {
        for key in keys {
            if let Err(e) = watch(&host, &scope_id, &key).await {
                eprintln!("slack: watching {key}: {}", e.message);
            }
        }
    });
}

/// Watches thread `key` of `scope_id` (the projector shows its Works); a watch
/// already kept is left as it is.
pub async fn watch(host: &sdk::Host, scope_id: &str, key: &str) -> Result<(), RpcError> {
    let k = watch_key(scope_id, key);
    let value = serde_json::to_value(Watch {
        scope_id: scope_id.to_string(),
        key: key.to_string(),
        since_ms: protocol::time::now_ms(),
    })
    .unwrap_or(Value::Null);
    match host
        .call_typed(&KvCommitParams {
            checks: vec![KvCheck::absent(k.clone())],
            puts: vec![KvPut {
                namespace: String::new(),
                key: k,
                value,
            }],
            ..Default::default()
        })
        .await
    {
        Ok(_) => Ok(()),
        Err(CallError::Rpc(e)) if e.is(Code::Conflict) => Ok(()),
        Err(e) => Err(unavailable("kv.commit", e)),
    }
}

fn pass_lock() -> &'static tokio::sync::Mutex<()> {
    static LOCK: OnceLock<tokio::sync::Mutex<()>> = OnceLock::new();
    LOCK.get_or_init(|| tokio::sync::Mutex::new(()))
}

/// Per scope, where the sweep of open Works goes on.
fn cursors() -> &'static Mutex<HashMap<String, String>> {
    static CURSORS: OnceLock<Mutex<HashMap<String, String>>> = OnceLock::new();
    CURSORS.get_or_init(|| Mutex::new(HashMap::new()))
}

/// What one pass did.
#[derive(Debug, Default)]
struct Tally {
    works: usize,
    posted: usize,
    edited: usize,
    failed: usize,
    dropped: usize,
}

/// Serves `task.run` for [`TASK`]: one pass (see the module doc).
pub async fn pass(state: &crate::State, host: &sdk::Host) -> Result<TaskRunResult, RpcError> {
    let _one = pass_lock().lock().await;
    let registry = state.registry();
    let mut scopes: Vec<String> = registry
        .entries
        .iter()
        .map(|e| e.scope_id.clone())
        .collect();
    scopes.sort();
    scopes.dedup();
    // The open Works not watched yet: one page per scope, the sweep going on.
    for scope in &scopes {
        let after = crate::lock(cursors())
            .get(scope)
            .cloned()
            .unwrap_or_default();
        let page = host
            .call_typed(&StateWorksParams {
                scope_id: scope.clone(),
                states: OPEN.iter().map(|s| s.to_string()).collect(),
                after,
                limit: OPEN_PAGE,
                ..Default::default()
            })
            .await
            .map_err(|e| unavailable("state.works", e))?;
        crate::lock(cursors()).insert(scope.clone(), page.next.clone());
        for w in &page.works {
            if let Some(key) = w.keys.iter().find(|k| project::parse_key(k).is_some()) {
                watch(host, scope, key).await?;
            }
        }
    }
    let watches = host
        .call_typed(&KvListParams {
            namespace: String::new(),
            prefix: "watch/".into(),
            after: String::new(),
            limit: MAX_WATCHES_A_PASS,
        })
        .await
        .map_err(|e| unavailable("kv.list", e))?;
    let mut t = Tally::default();
    let now = protocol::time::now_ms();
    for entry in watches.entries {
        if t.works >= MAX_WORKS_A_PASS {
            break;
        }
        let Ok(w) = serde_json::from_value::<Watch>(entry.value.clone()) else {
            continue;
        };
        if !scopes.contains(&w.scope_id) {
            continue;
        }
        let works = host
            .call_typed(&StateWorksParams {
                scope_id: w.scope_id.clone(),
                key: w.key.clone(),
                limit: 10,
                ..Default::default()
            })
            .await
            .map_err(|e| unavailable("state.works", e))?
            .works;
        let mut settled = !works.is_empty() || now - w.since_ms > WATCH_TTL_MS;
        for work in &works {
            t.works += 1;
            match project(state, host, work).await {
                Ok(Outcome::Posted) => t.posted += 1,
                Ok(Outcome::Edited) => t.edited += 1,
                Ok(Outcome::Same) => {}
                Err(e) => {
                    t.failed += 1;
                    settled = false;
                    eprintln!("slack: status of Work {}: {}", work.id, e.message);
                    continue;
                }
            }
            if !ENDED.contains(&work.state.as_str()) {
                settled = false;
            }
        }
        if settled {
            t.dropped += 1;
            let _ = host
                .call_typed(&KvCommitParams {
                    checks: vec![KvCheck::version(entry.key.clone(), entry.version.clone())],
                    deletes: vec![KvDelete {
                        namespace: String::new(),
                        key: entry.key.clone(),
                    }],
                    ..Default::default()
                })
                .await;
        }
    }
    Ok(TaskRunResult {
        detail: format!(
            "{} Works: {} posted, {} edited, {} failed; {} watches dropped",
            t.works, t.posted, t.edited, t.failed, t.dropped
        ),
    })
}

/// What a Work's projection changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// The status message was posted.
    Posted,
    /// It (or the reaction) was changed.
    Edited,
    /// Nothing changed.
    Same,
}

/// Shows `work` in its thread (see the module doc).
pub async fn project(
    state: &crate::State,
    host: &sdk::Host,
    work: &Work,
) -> Result<Outcome, RpcError> {
    let Some((channel, thread_ts)) = work
        .keys
        .iter()
        .find_map(|k| project::parse_key(k).map(|(_, c, t)| (c.to_string(), t.to_string())))
    else {
        return Ok(Outcome::Same);
    };
    let key = status_key(&work.id);
    let got = host
        .call_typed(&KvGetParams {
            namespace: String::new(),
            key: key.clone(),
        })
        .await
        .map_err(|e| unavailable("kv.get", e))?;
    let kept: Option<Kept> = got
        .value
        .clone()
        .and_then(|v| serde_json::from_value(v).ok());
    let offers = list(host, work).await?;
    let (text, blocks) = view(work, &offers);
    let blocks_json = Value::Array(blocks).to_string();
    let want = digest(&[&text, &blocks_json]);
    let want_reaction = reaction(&work.state);
    if let Some(k) = &kept {
        if !k.ts.is_empty() && k.digest == want && k.reaction == want_reaction {
            return Ok(Outcome::Same);
        }
    }
    let connection = match &kept {
        Some(k) => k.connection.clone(),
        None => match state
            .registry()
            .entries
            .iter()
            .find(|e| e.scope_id == work.scope_id)
        {
            Some(e) => e.connection.clone(),
            None => return Ok(Outcome::Same),
        },
    };
    let client = state.client(host, &work.scope_id, &connection).await?;
    let mut record = kept.clone().unwrap_or_else(|| Kept {
        scope_id: work.scope_id.clone(),
        connection: connection.clone(),
        channel: channel.clone(),
        thread_ts: thread_ts.clone(),
        ..Kept::default()
    });
    let version = got.version.clone().filter(|_| kept.is_some());
    if kept.is_none() {
        // Claim the Work's status message before posting it.
        host.call_typed(&KvCommitParams {
            checks: vec![KvCheck::absent(key.clone())],
            puts: vec![KvPut {
                namespace: String::new(),
                key: key.clone(),
                value: serde_json::to_value(&record).unwrap_or(Value::Null),
            }],
            ..Default::default()
        })
        .await
        .map_err(|e| unavailable("claiming the status message", e))?;
    }
    let outcome = if record.ts.is_empty() {
        let answer = client
            .post(
                "chat.postMessage",
                vec![
                    ("channel", record.channel.clone()),
                    ("thread_ts", record.thread_ts.clone()),
                    ("text", text.clone()),
                    ("blocks", blocks_json.clone()),
                ],
            )
            .await
            .map_err(|e| e.to_rpc())?;
        record.ts = answer
            .get("ts")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string();
        if record.ts.is_empty() {
            return Err(RpcError::new(
                Code::Unavailable,
                "Slack answered chat.postMessage without a ts",
            ));
        }
        Outcome::Posted
    } else {
        if record.digest != want {
            client
                .post(
                    "chat.update",
                    vec![
                        ("channel", record.channel.clone()),
                        ("ts", record.ts.clone()),
                        ("text", text.clone()),
                        ("blocks", blocks_json.clone()),
                    ],
                )
                .await
                .map_err(|e| e.to_rpc())?;
        }
        Outcome::Edited
    };
    record.digest = want;
    record.state = work.state.clone();
    if record.reaction != want_reaction {
        set_reaction(&client, &record, want_reaction).await?;
        record.reaction = want_reaction.to_string();
    }
    let checks = match version {
        Some(v) => vec![KvCheck::version(key.clone(), v)],
        None => Vec::new(),
    };
    host.call_typed(&KvCommitParams {
        checks,
        puts: vec![KvPut {
            namespace: String::new(),
            key,
            value: serde_json::to_value(&record).unwrap_or(Value::Null),
        }],
        ..Default::default()
    })
    .await
    .map_err(|e| unavailable("keeping the status message", e))?;
    Ok(outcome)
}

async fn list(host: &sdk::Host, work: &Work) -> Result<Vec<ListedAction>, RpcError> {
    host.call_typed(&ActionListParams {
        scope_id: work.scope_id.clone(),
        work_id: work.id.clone(),
    })
    .await
    .map(|r| r.actions)
    .map_err(|e| unavailable("action.list", e))
}

/// The new reaction added on the thread's root, then the old one removed.
async fn set_reaction(client: &Client, kept: &Kept, name: &str) -> Result<(), RpcError> {
    api::add_reaction(client, &kept.channel, &kept.thread_ts, name)
        .await
        .map_err(|e| e.to_rpc())?;
    if !kept.reaction.is_empty() && kept.reaction != name {
        api::remove_reaction(client, &kept.channel, &kept.thread_ts, &kept.reaction)
            .await
            .map_err(|e| e.to_rpc())?;
    }
    Ok(())
}

/// The fields a status message's state shows, for tests: state → reaction.
pub fn reactions() -> BTreeMap<&'static str, &'static str> {
    OPEN.iter()
        .chain(ENDED.iter())
        .map(|s| (*s, reaction(s)))
        .collect()
}
