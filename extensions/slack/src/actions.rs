//! Block Kit actions: a press of a button on a status message ([`crate::status`])
//! arrives as an interactivity request (form-encoded `payload=<json>`, `type:
//! block_actions`, signed like an Events API request) and becomes `action.submit`
//! for the person who pressed it.
//!
//! - The request is verified first ([`crate::intake`]: signature and timestamp
//!   window, else 401). A press is then claimed in KV (`press/<digest of team and
//!   trigger_id>`, an `absent` check): the same request again (a replay within the
//!   window) is refused 403 and does nothing.
//! - Each pressed button's `value` names the Work, the provider, the action and its
//!   input ([`crate::status::button_value`]). The Work must be in the entry's scope
//!   and be the Work of the conversation the press came from (its thread key names
//!   that channel); anything else is refused.
//! - The caller is the Slack user ID (`user.id`, stable where user names change);
//!   for `core`'s actions the input carries `slack_user` and `slack_user_name`, so
//!   the action's Event names the person both ways. The key is `slack/<team>/<trigger
//!   id>/<action_id>`: the host performs one submit once.
//! - Slack wants an answer within 3 s: the submits run in the background, the answer
//!   (200, empty; over Socket Mode, the envelope's ack) waits for them at most
//!   [`ANSWER_WAIT`]; a projector pass follows so the status message shows what was
//!   done.

use std::sync::Arc;
use std::time::Duration;

use protocol::wire::{
    ActionSubmitParams, HttpAnswer, KvCheck, KvCommitParams, KvPut, StateWorkParams, CORE_PROVIDER,
    MAX_ACTION_KEY_BYTES, MAX_ACTION_NAME_BYTES,
};
use protocol::{CallError, Code, RpcError};
use serde_json::{json, Map, Value};
use sha2::{Digest, Sha256};

use crate::config::EntryConfig;
use crate::intake::{json_answer, text};
use crate::project;

/// The longest the answer waits for the submits.
pub const ANSWER_WAIT: Duration = Duration::from_secs(2);
/// The most actions of one payload acted on.
pub const MAX_ACTIONS: usize = 5;
/// The longest ID (team, user, channel, trigger) accepted, in bytes.
const MAX_ID_BYTES: usize = 128;

/// One pressed button.
#[derive(Debug, Clone, PartialEq)]
pub struct Press {
    /// The Work.
    pub work_id: String,
    /// The provider (`core`, `people`).
    pub provider: String,
    /// The action (`stop`, `answer`).
    pub action: String,
    /// The action's input, as the button carries it.
    pub input: Value,
    /// The button's `action_id`.
    pub action_id: String,
}

/// A `block_actions` payload, read.
#[derive(Debug, Clone, PartialEq)]
pub struct Interaction {
    /// The team.
    pub team: String,
    /// The person: Slack user ID.
    pub user_id: String,
    /// Their user name, when the payload gives it.
    pub user_name: String,
    /// The conversation the message is in.
    pub channel: String,
    /// The pressed message's ts.
    pub message_ts: String,
    /// Slack's `trigger_id` (one per interaction).
    pub trigger_id: String,
    /// The buttons pressed that are the package's.
    pub presses: Vec<Press>,
}

fn id_ok(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= MAX_ID_BYTES
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b'_'))
}

fn s<'a>(v: &'a Value, pointer: &str) -> &'a str {
    v.pointer(pointer)
        .and_then(Value::as_str)
        .unwrap_or_default()
}

/// The button value's Work and action, when it is one of the package's.
pub fn read_value(value: &str) -> Option<(String, String, String, Value)> {
    let v: Value = serde_json::from_str(value).ok()?;
    let work = v.get("w")?.as_str()?.to_string();
    let provider = v.get("p")?.as_str()?.to_string();
    let action = v.get("a")?.as_str()?.to_string();
    let ok = |x: &str| !x.is_empty() && x.len() <= MAX_ACTION_NAME_BYTES;
    if work.is_empty() || work.len() > MAX_ID_BYTES || !ok(&provider) || !ok(&action) {
        return None;
    }
    Some((
        work,
        provider,
        action,
        v.get("i").cloned().unwrap_or(Value::Null),
    ))
}

/// Reads a `block_actions` payload. `Err` says why it cannot be acted on.
pub fn parse(payload: &Value) -> Result<Interaction, String> {
    if s(payload, "/type") != "block_actions" {
        return Err(format!(
            "interactivity payloads of type `{}` are not acted on",
            s(payload, "/type")
        ));
    }
    let team = match s(payload, "/team/id") {
        "" => s(payload, "/user/team_id"),
        t => t,
    };
    let user_id = s(payload, "/user/id");
    let user_name = match s(payload, "/user/username") {
        "" => s(payload, "/user/name"),
        n => n,
    };
    let channel = match s(payload, "/container/channel_id") {
        "" => s(payload, "/channel/id"),
        c => c,
    };
    let message_ts = match s(payload, "/container/message_ts") {
        "" => s(payload, "/message/ts"),
        t => t,
    };
    let trigger_id = s(payload, "/trigger_id");
    if !id_ok(team) || !id_ok(user_id) || !id_ok(trigger_id) {
        return Err("the payload lacks a readable team, user or trigger_id".into());
    }
    if !id_ok(channel) || !id_ok(message_ts) {
        return Err("the press is not on a message in a conversation".into());
    }
    let presses: Vec<Press> = payload
        .get("actions")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .take(MAX_ACTIONS)
        .filter(|a| s(a, "/type") == "button")
        .filter_map(|a| {
            let (work_id, provider, action, input) = read_value(s(a, "/value"))?;
            Some(Press {
                work_id,
                provider,
                action,
                input,
                action_id: s(a, "/action_id").chars().take(64).collect(),
            })
        })
        .collect();
    if presses.is_empty() {
        return Err("no button of this package was pressed".into());
    }
    Ok(Interaction {
        team: team.to_string(),
        user_id: user_id.to_string(),
        user_name: user_name.chars().take(80).collect(),
        channel: channel.to_string(),
        message_ts: message_ts.to_string(),
        trigger_id: trigger_id.to_string(),
        presses,
    })
}

fn digest(parts: &[&str]) -> String {
    let mut h = Sha256::new();
    for p in parts {
        h.update(p.as_bytes());
        h.update([0]);
    }
    h.finalize().iter().map(|b| format!("{b:02x}")).collect()
}

/// The KV key a press is claimed under.
pub fn press_key(i: &Interaction) -> String {
    format!("press/{}", digest(&[&i.team, &i.trigger_id]))
}

/// The `action.submit` of one press (the Work checked by [`handle`]).
pub fn submit_params(scope_id: &str, i: &Interaction, p: &Press) -> ActionSubmitParams {
    let input = if p.provider == CORE_PROVIDER {
        let mut m = p.input.as_object().cloned().unwrap_or_else(Map::new);
        m.insert("slack_user".into(), json!(i.user_id));
        if !i.user_name.is_empty() {
            m.insert("slack_user_name".into(), json!(i.user_name));
        }
        Value::Object(m)
    } else {
        p.input.clone()
    };
    let mut key = format!("slack/{}/{}/{}", i.team, i.trigger_id, p.action_id);
    if key.len() > MAX_ACTION_KEY_BYTES {
        key = format!("slack/{}", digest(&[&i.team, &i.trigger_id, &p.action_id]));
    }
    ActionSubmitParams {
        scope_id: scope_id.to_string(),
        work_id: p.work_id.clone(),
        provider: p.provider.clone(),
        action: p.action.clone(),
        input,
        caller: i.user_id.clone(),
        key,
    }
}

/// Whether `work` (of `scope_id`, with `keys`) is the Work of a thread in `channel`.
fn of_channel(keys: &[String], channel: &str) -> bool {
    keys.iter()
        .filter_map(|k| project::parse_key(k))
        .any(|(_, c, _)| c == channel)
}

/// One press submitted: checks the Work, then `action.submit`.
async fn submit(
    host: &sdk::Host,
    scope_id: &str,
    i: &Interaction,
    p: &Press,
) -> Result<String, RpcError> {
    let work = host
        .call_typed(&StateWorkParams {
            id: p.work_id.clone(),
        })
        .await
        .map_err(|e| RpcError::new(Code::NotFound, format!("Work {}: {e}", p.work_id)))?
        .work;
    if work.scope_id != scope_id || !of_channel(&work.keys, &i.channel) {
        return Err(RpcError::new(
            Code::Unauthorized,
            format!(
                "Work {} is not the Work of a thread in {} of scope {scope_id}",
                p.work_id, i.channel
            ),
        ));
    }
    let r = host
        .call_typed(&submit_params(scope_id, i, p))
        .await
        .map_err(|e| match e {
            CallError::Rpc(e) => e,
            other => RpcError::new(Code::Unavailable, format!("action.submit: {other}")),
        })?;
    Ok(r.message)
}

/// Serves a verified `block_actions` payload for `entry` (see the module doc).
pub async fn handle(
    state: &Arc<crate::State>,
    host: &sdk::Host,
    entry: &EntryConfig,
    payload: &Value,
) -> HttpAnswer {
    let interaction = match parse(payload) {
        Ok(i) => i,
        Err(why) => return json_answer(200, &json!({"ok": true, "ignored": true, "reason": why})),
    };
    let claim = host
        .call_typed(&KvCommitParams {
            checks: vec![KvCheck::absent(press_key(&interaction))],
            puts: vec![KvPut {
                namespace: String::new(),
                key: press_key(&interaction),
                value: json!({"user": interaction.user_id, "channel": interaction.channel,
                              "at": protocol::time::format_rfc3339_ms(protocol::time::now_ms())}),
            }],
            ..Default::default()
        })
        .await;
    match claim {
        Ok(_) => {}
        Err(CallError::Rpc(e)) if e.is(Code::Conflict) => {
            return text(403, "this interaction was received before (a replay)");
        }
        Err(e) => {
            eprintln!("slack: claiming a press: {e}");
            return crate::intake::unavailable();
        }
    }
    let (state, host, scope) = (state.clone(), host.clone(), entry.scope_id.clone());
    let (submitted, done) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(async move {
        for p in &interaction.presses {
            match submit(&host, &scope, &interaction, p).await {
                Ok(message) => eprintln!(
                    "slack: {} {} of Work {} by {}: {message}",
                    p.provider, p.action, p.work_id, interaction.user_id
                ),
                Err(e) => eprintln!(
                    "slack: {} {} of Work {} by {} refused: {}",
                    p.provider, p.action, p.work_id, interaction.user_id, e.message
                ),
            }
        }
        // The answer (an HTTP 200, a Socket Mode ack) goes once the submits are in;
        // the projector pass that shows them follows.
        let _ = submitted.send(());
        if let Err(e) = crate::status::pass(&state, &host).await {
            eprintln!("slack: status pass after a press: {}", e.message);
        }
    });
    // The answer waits a little for the submits, never longer than Slack does.
    if tokio::time::timeout(ANSWER_WAIT, done).await.is_err() {
        eprintln!(
            "slack: a press answered before its submits finished (ANSWER_WAIT {} s); they go on",
            ANSWER_WAIT.as_secs()
        );
    }
    HttpAnswer {
        status: 200,
        ..Default::default()
    }
}

/// After `webhook.handle` answered: a verified `block_actions` press (a 200 to a
/// form-encoded `payload=`) is acted on and its answer replaces the one given; the
/// thread keys of a delivering answer are watched by the projector.
pub async fn after_webhook(
    state: &Arc<crate::State>,
    host: &sdk::Host,
    params: &protocol::wire::WebhookHandleParams,
    result: &mut protocol::wire::WebhookHandleResult,
) {
    if result.response.status != 200 {
        return;
    }
    let registry = state.registry();
    let Some(entry) = registry.entry_for(&params.path) else {
        return;
    };
    if !result.deliveries.is_empty() {
        crate::status::after_deliveries(host, &entry.scope_id, result);
        return;
    }
    if let Some(payload) = crate::intake::block_actions_payload(params) {
        result.response = handle(state, host, entry, &payload).await;
    }
}
