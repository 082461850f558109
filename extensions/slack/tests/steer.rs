//! The projector, Block Kit actions and rendering through the real
//! `oc-slack-extension` binary, with this test as the host (`secret.resolve`,
//! `kv.*`, `state.works`, `state.work`, `action.list`, `action.submit`) and a
//! stand-in Slack that counts what it is sent; and the Web API calls they add
//! (`chat.postMessage` and `chat.update` with Block Kit buttons, `reactions.add`,
//! `reactions.remove`, `users.info`) against Prism serving Slack's own description.
//!
//! The press payloads are python-slack-sdk's `block_actions` fixture
//! (`fixtures/events/block_actions.json`, a select in a modal) changed into a button
//! press on a message, as Slack's documentation of `block_actions` describes it (the
//! `container`, `channel`, `message` and `actions` fields alone; see [`press`]).

#![allow(clippy::unwrap_used)]

mod webapi;

use std::collections::{BTreeMap, HashMap};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use oc_slack::signature::sign;
use oc_slack::{actions, render, status};
use protocol::wire::{
    ActionOffer, ConfigureParams, Connection, Entry, Event, EventRenderParams, EventRenderResult,
    HostInfo, InitializeParams, KvCommitParams, KvExpect, KvGetParams, KvListParams, ListedAction,
    Payload, TaskRunParams, TaskRunResult, WebhookHandleParams, WebhookHandleResult, Work,
};
use protocol::{connect, Code, FnHandler, Options, Peer, RpcError};
use serde_json::{json, Value};
use webapi::{Adapter, StandIn};

const EXE: &str = env!("CARGO_BIN_EXE_oc-slack-extension");
const HANG: Duration = Duration::from_secs(60);
const TOKEN: &str = "xoxb-steer-test-token";
const SECRET: &str = "steer-signing-secret";
const BLOCK_ACTIONS: &[u8] = include_bytes!("fixtures/events/block_actions.json");
const KEY: &str = "slack:T12345678/C0123456789/1610241741.000200";

/// What the fake host holds and saw.
#[derive(Default)]
struct Host {
    kv: HashMap<String, (Value, String)>,
    state: String,
    offers: Vec<ListedAction>,
    submits: Vec<Value>,
    n: usize,
}

type Shared = Arc<Mutex<Host>>;

fn work(state: &str) -> Work {
    Work {
        id: "w1".into(),
        scope_id: "s1".into(),
        state: state.into(),
        keys: vec![KEY.into()],
        ..Default::default()
    }
}

fn core(ids: &[&str]) -> Vec<ListedAction> {
    ids.iter()
        .map(|id| ListedAction {
            provider: "core".into(),
            offer: ActionOffer {
                id: (*id).into(),
                label: (*id).into(),
                ..Default::default()
            },
        })
        .collect()
}

fn ask() -> ListedAction {
    ListedAction {
        provider: "people".into(),
        offer: ActionOffer {
            id: "answer".into(),
            label: "Answer".into(),
            detail: "Which base branch?".into(),
            choices: vec!["main".into(), "release-2.x".into()],
            awaited: true,
            input: json!({"ask_id": "a-1"}),
            ..Default::default()
        },
    }
}

async fn answer(host: Shared, request: protocol::Request) -> Result<Value, RpcError> {
    let mut h = host.lock().unwrap();
    Ok(match request.method.as_str() {
        "secret.resolve" => {
            json!({"values": {"bot_token": TOKEN, "signing_secret": SECRET}})
        }
        "state.works" => {
            let p: Value = request.params()?;
            let w = work(&h.state);
            let open = p["states"]
                .as_array()
                .is_none_or(|s| s.iter().any(|x| x == &json!(w.state)));
            if open {
                json!({"works": [w]})
            } else {
                json!({})
            }
        }
        "state.work" => json!({"work": work(&h.state)}),
        "action.list" => json!({"actions": h.offers}),
        "action.submit" => {
            let p: Value = request.params()?;
            let added = !h.submits.iter().any(|s| s["key"] == p["key"]);
            h.submits.push(p);
            json!({"event": "e-action", "added": added, "message": "stopped Work w1"})
        }
        "kv.get" => {
            let p: KvGetParams = request.params()?;
            match h.kv.get(&p.key) {
                Some((v, ver)) => json!({"value": v, "version": ver}),
                None => json!({}),
            }
        }
        "kv.list" => {
            let p: KvListParams = request.params()?;
            let mut entries: Vec<Value> =
                h.kv.iter()
                    .filter(|(k, _)| k.starts_with(&p.prefix))
                    .map(|(k, (v, ver))| json!({"key": k, "value": v, "version": ver}))
                    .collect();
            entries.sort_by(|a, b| a["key"].as_str().cmp(&b["key"].as_str()));
            json!({ "entries": entries })
        }
        "kv.commit" => {
            let p: KvCommitParams = request.params()?;
            for c in &p.checks {
                let holds = match &c.expect {
                    KvExpect::Absent => !h.kv.contains_key(&c.key),
                    KvExpect::Version(v) => h.kv.get(&c.key).is_some_and(|(_, x)| x == v),
                };
                if !holds {
                    return Err(RpcError::new(Code::Conflict, "check failed"));
                }
            }
            for d in p.deletes {
                h.kv.remove(&d.key);
            }
            for put in p.puts {
                h.n += 1;
                let ver = format!("v{}", h.n);
                h.kv.insert(put.key, (put.value, ver));
            }
            json!({})
        }
        other => return Err(RpcError::method_not_found(other)),
    })
}

async fn start(host: Shared, api_url: &str) -> (Peer, tokio::process::Child) {
    let mut child = tokio::process::Command::new(EXE)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let stdin = child.stdin.take().unwrap();
    let stdout = child.stdout.take().unwrap();
    let handler = FnHandler(move |request: protocol::Request| answer(host.clone(), request));
    let peer = connect(stdout, stdin, handler, Options::named("extension slack"));
    tokio::time::timeout(
        HANG,
        peer.call_typed(&InitializeParams {
            protocol_versions: vec![1],
            host: HostInfo {
                name: "open-conduit".into(),
                version: "test".into(),
            },
            state_dir: std::env::temp_dir().display().to_string(),
            ..Default::default()
        }),
    )
    .await
    .unwrap()
    .unwrap();
    let params = ConfigureParams {
        entries: vec![Entry {
            scope_id: "s1".into(),
            entry_type: "slack".into(),
            name: "team".into(),
            connection: "sl".into(),
            config: Value::Null,
            ..Default::default()
        }],
        connections: vec![Connection {
            name: "sl".into(),
            connection_type: "slack".into(),
            config: json!({"api_url": api_url}),
            secrets: vec!["bot_token".into(), "signing_secret".into()],
        }],
        ..Default::default()
    };
    tokio::time::timeout(HANG, peer.call_typed(&params))
        .await
        .unwrap()
        .unwrap();
    (peer, child)
}

fn slack() -> StandIn {
    StandIn::start(|_, req| {
        let body = match req.path() {
            "/chat.postMessage" => {
                json!({"ok": true, "channel": req.field("channel"), "ts": "1610242000.000100"})
            }
            "/chat.update" => {
                json!({"ok": true, "channel": req.field("channel"), "ts": req.field("ts")})
            }
            "/conversations.replies" => json!({"ok": true, "messages": [
                {"user": "U222", "ts": "1610241741.000200",
                 "text": "<@U111> Deploy <https://docs.example.com|the docs> &amp; the API &lt;v2&gt;"},
                {"bot_id": "B1", "ts": "1610242000.000100", "text": "Open Conduit · Work `w1` · running"},
                {"user": "U333", "ts": "1610242100.000300", "text": "<@U222> also post in <#C999|general>"},
                {"user": "U222", "ts": "1610242200.000400", "text": "later, not yet in the prompt"}
            ]}),
            "/users.info" => match req.field("user").as_deref() {
                Some("U222") => json!({"ok": true, "user": {"id": "U222", "name": "jdoe",
                                        "profile": {"display_name": "Jane Doe"}}}),
                Some("U333") => {
                    json!({"ok": true, "user": {"id": "U333", "name": "sam", "real_name": "Sam Roe",
                                        "profile": {"display_name": ""}}})
                }
                _ => json!({"ok": false, "error": "user_not_found"}),
            },
            _ => json!({"ok": true}),
        };
        (200, vec![], body.to_string())
    })
}

async fn pass(peer: &Peer) -> String {
    let r: TaskRunResult = tokio::time::timeout(
        HANG,
        peer.call_typed(&TaskRunParams {
            task: status::TASK.into(),
            now: String::new(),
        }),
    )
    .await
    .unwrap()
    .unwrap();
    r.detail
}

fn calls(s: &StandIn, path: &str) -> Vec<webapi::Request> {
    s.requests()
        .into_iter()
        .filter(|r| r.path() == path)
        .collect()
}

/// python-slack-sdk's `block_actions` payload as a press of `button` on the status
/// message in the thread.
fn press(button: &Value, trigger: &str) -> Value {
    let mut p: Value = serde_json::from_slice(BLOCK_ACTIONS).unwrap();
    let obj = p.as_object_mut().unwrap();
    obj.remove("view");
    obj.insert(
        "container".into(),
        json!({"type": "message", "message_ts": "1610242000.000100",
               "channel_id": "C0123456789", "is_ephemeral": false}),
    );
    obj.insert(
        "channel".into(),
        json!({"id": "C0123456789", "name": "deploys"}),
    );
    obj.insert(
        "message".into(),
        json!({"type": "message", "ts": "1610242000.000100", "thread_ts": "1610241741.000200"}),
    );
    obj.insert("trigger_id".into(), json!(trigger));
    let mut action = button.clone();
    action["block_id"] = json!("oc-actions");
    action["action_ts"] = json!("1655863389.628431");
    obj.insert("actions".into(), json!([action]));
    p
}

fn form(payload: &Value, ts: i64, secret: &str) -> WebhookHandleParams {
    let body = format!(
        "payload={}",
        oc_slack::api::percent_encode(&payload.to_string())
    );
    let mut headers = BTreeMap::new();
    let t = ts.to_string();
    headers.insert("X-Slack-Request-Timestamp".to_string(), vec![t.clone()]);
    headers.insert(
        "X-Slack-Signature".to_string(),
        vec![sign(secret.as_bytes(), &t, body.as_bytes())],
    );
    headers.insert(
        "Content-Type".to_string(),
        vec!["application/x-www-form-urlencoded".to_string()],
    );
    WebhookHandleParams {
        method: "POST".into(),
        path: "/slack/s1/team".into(),
        headers,
        body: body.into_bytes(),
        ..Default::default()
    }
}

async fn webhook(peer: &Peer, p: &WebhookHandleParams) -> WebhookHandleResult {
    tokio::time::timeout(HANG, peer.call_typed(p))
        .await
        .unwrap()
        .unwrap()
}

fn now_s() -> i64 {
    protocol::time::now_ms() / 1000
}

#[tokio::test]
async fn the_status_message_is_posted_once_and_edited_as_the_work_moves() {
    let stand_in = slack();
    let host: Shared = Arc::default();
    {
        let mut h = host.lock().unwrap();
        h.state = "running".into();
        h.offers = core(&["stop", "interrupt"]);
    }
    let (peer, _child) = start(host.clone(), &stand_in.url).await;
    let d = pass(&peer).await;
    assert!(d.contains("1 posted"), "{d}");
    let posts = calls(&stand_in, "/chat.postMessage");
    assert_eq!(posts.len(), 1);
    assert_eq!(posts[0].field("channel").as_deref(), Some("C0123456789"));
    assert_eq!(
        posts[0].field("thread_ts").as_deref(),
        Some("1610241741.000200")
    );
    assert!(posts[0].field("text").unwrap().contains("running"));
    let blocks: Value = serde_json::from_str(&posts[0].field("blocks").unwrap()).unwrap();
    let buttons = blocks[1]["elements"].as_array().unwrap();
    assert_eq!(buttons.len(), 1, "{blocks}");
    assert_eq!(buttons[0]["text"]["text"], "Stop");
    let adds = calls(&stand_in, "/reactions.add");
    assert_eq!(adds.len(), 1);
    assert_eq!(adds[0].field("name").as_deref(), Some("eyes"));
    assert_eq!(
        adds[0].field("timestamp").as_deref(),
        Some("1610241741.000200")
    );

    // Nothing moved: nothing sent.
    let before = stand_in.requests().len();
    pass(&peer).await;
    assert_eq!(stand_in.requests().len(), before);

    // An ask of `human` shows its choices; then the Work completes.
    host.lock().unwrap().offers = {
        let mut o = core(&["stop"]);
        o.push(ask());
        o
    };
    pass(&peer).await;
    let updates = calls(&stand_in, "/chat.update");
    assert_eq!(updates.len(), 1);
    assert_eq!(updates[0].field("ts").as_deref(), Some("1610242000.000100"));
    let blocks: Value = serde_json::from_str(&updates[0].field("blocks").unwrap()).unwrap();
    let labels: Vec<&str> = blocks[1]["elements"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["text"]["text"].as_str().unwrap())
        .collect();
    assert_eq!(labels, vec!["Stop", "main", "release-2.x"]);
    assert!(updates[0]
        .field("text")
        .unwrap()
        .contains("Which base branch?"));

    {
        let mut h = host.lock().unwrap();
        h.state = "completed".into();
        h.offers = core(&["retry"]);
    }
    pass(&peer).await;
    assert_eq!(
        calls(&stand_in, "/chat.postMessage").len(),
        1,
        "posted once"
    );
    let updates = calls(&stand_in, "/chat.update");
    assert_eq!(updates.len(), 2);
    assert!(updates[1].field("text").unwrap().contains("done"));
    let adds = calls(&stand_in, "/reactions.add");
    assert_eq!(
        adds.last().unwrap().field("name").as_deref(),
        Some("white_check_mark")
    );
    let removes = calls(&stand_in, "/reactions.remove");
    assert_eq!(removes.len(), 1);
    assert_eq!(removes[0].field("name").as_deref(), Some("eyes"));
    // Ended and shown: the watch is dropped, the status kept for a reopening.
    let h = host.lock().unwrap();
    assert!(h.kv.keys().all(|k| !k.starts_with("watch/")), "{:?}", h.kv);
    assert!(h.kv.contains_key("status/w1"));
}

#[tokio::test]
async fn a_signed_press_becomes_one_action_submit_for_the_person() {
    let stand_in = slack();
    let host: Shared = Arc::default();
    {
        let mut h = host.lock().unwrap();
        h.state = "running".into();
        h.offers = core(&["stop"]);
    }
    let (peer, _child) = start(host.clone(), &stand_in.url).await;
    pass(&peer).await;
    let blocks: Value = serde_json::from_str(
        &calls(&stand_in, "/chat.postMessage")[0]
            .field("blocks")
            .unwrap(),
    )
    .unwrap();
    let stop = blocks[1]["elements"][0].clone();
    let payload = press(&stop, "3701415066658.3485157640.aaaa");

    // Not signed, or signed long ago: 401, nothing submitted or kept.
    let r = webhook(&peer, &form(&payload, now_s(), "not the secret")).await;
    assert_eq!(r.response.status, 401);
    let r = webhook(&peer, &form(&payload, now_s() - 3600, SECRET)).await;
    assert_eq!(r.response.status, 401);
    assert!(host.lock().unwrap().submits.is_empty());
    assert!(host
        .lock()
        .unwrap()
        .kv
        .keys()
        .all(|k| !k.starts_with("press/")));

    let signed = form(&payload, now_s(), SECRET);
    let r = webhook(&peer, &signed).await;
    assert_eq!(r.response.status, 200);
    assert!(r.deliveries.is_empty());
    let submit = {
        let deadline = std::time::Instant::now() + HANG;
        loop {
            if let Some(s) = host.lock().unwrap().submits.first().cloned() {
                break s;
            }
            assert!(std::time::Instant::now() < deadline, "no action.submit");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    };
    assert_eq!(submit["scope_id"], "s1");
    assert_eq!(submit["work_id"], "w1");
    assert_eq!(submit["provider"], "core");
    assert_eq!(submit["action"], "stop");
    assert_eq!(submit["caller"], "U12345678");
    assert_eq!(submit["input"]["slack_user_name"], "testxyz");
    assert_eq!(
        submit["key"],
        "slack/T12345678/3701415066658.3485157640.aaaa/oc-0"
    );
    // The same request again (a replay): 403, nothing more submitted.
    let r = webhook(&peer, &signed).await;
    assert_eq!(r.response.status, 403);
    assert_eq!(host.lock().unwrap().submits.len(), 1);

    // A press naming a Work of another conversation is refused.
    let mut elsewhere = press(&stop, "3701415066658.3485157640.bbbb");
    elsewhere["container"]["channel_id"] = json!("C0OTHER0000");
    let r = webhook(&peer, &form(&elsewhere, now_s(), SECRET)).await;
    assert_eq!(r.response.status, 200);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(host.lock().unwrap().submits.len(), 1);

    // Slack's fixture as it is (a select in a modal) is no press of ours.
    let fixture: Value = serde_json::from_slice(BLOCK_ACTIONS).unwrap();
    let r = webhook(&peer, &form(&fixture, now_s(), SECRET)).await;
    assert_eq!(r.response.status, 200);
    assert!(String::from_utf8_lossy(&r.response.body).contains("ignored"));
}

#[tokio::test]
async fn the_prompt_shows_the_thread_with_names_not_ids() {
    let stand_in = slack();
    let host: Shared = Arc::default();
    let (peer, _child) = start(host, &stand_in.url).await;
    let event = Event {
        id: "e2".into(),
        event_type: "slack.message.reply".into(),
        scope_id: "s1".into(),
        payload: Payload {
            schema: "slack.message.v1".into(),
            data: json!({"team_id": "T12345678", "channel": "C0123456789", "user": "U333",
                         "text": "<@U222> also post in <#C999|general>",
                         "ts": "1610242100.000300", "thread_ts": "1610241741.000200", "kind": "reply"}),
        },
        keys: vec![KEY.into()],
        ..Default::default()
    };
    let r: EventRenderResult = tokio::time::timeout(
        HANG,
        peer.call_typed(&EventRenderParams {
            event: event.clone(),
            work_id: "w1".into(),
            connection: "sl".into(),
            max_bytes: 0,
        }),
    )
    .await
    .unwrap()
    .unwrap();
    let t = &r.text;
    assert!(t.contains("**Jane Doe**"), "{t}");
    assert!(t.contains("**Sam Roe**"), "{t}");
    assert!(
        t.contains("Deploy [the docs](https://docs.example.com) & the API <v2>"),
        "{t}"
    );
    assert!(t.contains("@Jane Doe also post in #general"), "{t}");
    assert!(t.contains("← this message"), "{t}");
    assert!(!t.contains("U222") && !t.contains("U333"), "{t}");
    assert!(!t.contains("not yet in the prompt"), "{t}");
    // U111 (the app) is unknown to users.info: it stays an ID.
    assert!(t.contains("@U111"), "{t}");
    // Names are cached: a second rendering asks Slack for none of them again.
    let asked = calls(&stand_in, "/users.info").len();
    let _: EventRenderResult = peer
        .call_typed(&EventRenderParams {
            event,
            work_id: "w1".into(),
            connection: "sl".into(),
            max_bytes: 0,
        })
        .await
        .unwrap();
    let again = calls(&stand_in, "/users.info");
    // Only the unknown U111 is asked again.
    assert!(again.len() - asked <= 1, "{again:#?}");
}

#[test]
fn buttons_carry_the_work_and_action_and_stay_within_slacks_bounds() {
    let mut offers = core(&["stop", "retry", "interrupt"]);
    let mut big = ask();
    big.offer.choices = (0..30)
        .map(|i| format!("choice {i} {}", "x".repeat(100)))
        .collect();
    offers.push(big);
    let b = status::buttons("w1", &offers);
    assert_eq!(b.len(), status::MAX_BUTTONS);
    for button in &b {
        assert!(button["text"]["text"].as_str().unwrap().chars().count() <= 75);
        assert!(button["value"].as_str().unwrap().len() <= 2000);
        let (w, _, _, _) = actions::read_value(button["value"].as_str().unwrap()).unwrap();
        assert_eq!(w, "w1");
    }
    let (_, provider, action, input) =
        actions::read_value(b[2]["value"].as_str().unwrap()).unwrap();
    assert_eq!((provider.as_str(), action.as_str()), ("people", "answer"));
    assert_eq!(input["ask_id"], "a-1");
    assert!(input["answer"].as_str().unwrap().starts_with("choice 0"));
    assert_eq!(status::reaction("running"), "eyes");
    assert_eq!(status::reaction("failed"), "x");
    assert!(actions::read_value("{\"w\": \"\"}").is_none());
    assert!(actions::read_value("not json").is_none());
}

#[test]
fn slack_markup_is_resolved_and_the_rendering_is_bounded() {
    let mut names = HashMap::new();
    names.insert("U1".to_string(), "Ann".to_string());
    assert_eq!(
        render::resolve(
            "<@U1> <@U2|bob> <!here> <#C1> <!subteam^S1|@ops> <mailto:a@b.c|a@b.c> <https://x.y>",
            &names
        ),
        "@Ann @bob @here #C1 @ops [a@b.c](mailto:a@b.c) https://x.y"
    );
    assert_eq!(
        render::resolve("a < b &amp; <unclosed", &names),
        "a < b & <unclosed"
    );
    let messages: Vec<render::Message> = (0..100)
        .map(|i| render::Message {
            user: "U1".into(),
            bot: false,
            text: format!("message {i} {}", "y".repeat(200)),
            ts: format!("16102417{i:02}.000100"),
        })
        .collect();
    let r = render::markdown("C1", &messages, &names, "1610241799.000100", &[], 4096);
    assert!(r.truncated);
    assert!(r.text.len() <= 4096);
    assert!(r.text.contains("message 0 "), "the first message stays");
    assert!(r.text.contains("message 99 "), "the last message stays");
    assert!(r.text.contains("earlier messages left out"), "{}", r.text);
}

#[tokio::test]
async fn the_calls_the_projector_and_rendering_add_are_valid_against_slacks_description() {
    let Some(prism) = webapi::prism_or_skip() else {
        return;
    };
    let adapter = Adapter::start(prism);
    let client = oc_slack::api::Client::new(&adapter.url, TOKEN).unwrap();
    let mut offers = core(&["stop", "retry"]);
    offers.push(ask());
    let (text, blocks) = status::view(&work("waiting"), &offers);
    let blocks = Value::Array(blocks).to_string();
    client
        .post(
            "chat.postMessage",
            vec![
                ("channel", "C0123456789".into()),
                ("thread_ts", "1610241741.000200".into()),
                ("text", text.clone()),
                ("blocks", blocks.clone()),
            ],
        )
        .await
        .unwrap();
    client
        .post(
            "chat.update",
            vec![
                ("channel", "C0123456789".into()),
                ("ts", "1610242000.000100".into()),
                ("text", text),
                ("blocks", blocks),
            ],
        )
        .await
        .unwrap();
    oc_slack::api::add_reaction(&client, "C0123456789", "1610241741.000200", "eyes")
        .await
        .unwrap();
    oc_slack::api::remove_reaction(&client, "C0123456789", "1610241741.000200", "eyes")
        .await
        .unwrap();
    oc_slack::api::user_name(&client, "U0123ABCD")
        .await
        .unwrap();
    let seen = adapter.seen();
    assert!(seen.violations.is_empty(), "{:?}", seen.violations);
    let paths: Vec<String> = seen
        .exchanges
        .iter()
        .map(|(r, _)| format!("{} {}", r.method, r.path()))
        .collect();
    assert_eq!(
        paths,
        vec![
            "POST /chat.postMessage",
            "POST /chat.update",
            "POST /reactions.add",
            "POST /reactions.remove",
            "GET /users.info",
        ]
    );
}
