#![allow(clippy::unwrap_used)]
//! A Block Kit press over Socket Mode (issue 42), with real daemons and the Socket
//! Mode stand-in (`oc_systest::slack::SocketSlack`): Slack's `app_mention` envelope
//! (python-slack-sdk's fixture) starts a Work on a shell binding whose run keeps
//! running; an `interactive` envelope carrying Slack's `block_actions` payload
//! (python-slack-sdk's Socket Mode fixture, made a press of the status message's
//! Stop button: the value the projector gives it, `oc_slack::status::button_value`
//! of `core`'s `stop`) stops the run. The envelope is acknowledged only once the
//! action was submitted (the stand-in looks in the store for the `core.action.stop`
//! Event when it reads the ack), and that Event names the person (`slack:U…`). The
//! same press sent again (as Slack does when an ack is late) is acknowledged and
//! applies nothing.
//!
//! The stand-in answers only `apps.connections.open` and `auth.test`, so the
//! projector cannot post its status message here (tests/tests/slack_steer.rs shows
//! the same press over HTTP with the message the projector posted); the button's
//! value is made the way the projector makes it. Waits only bound hangs.

mod common;
use common::*;

use oc_systest::slack::SocketSlack;
use oc_systest::{Daemon, Package, Suite, HANG};
use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};

const BOT_TOKEN: &str = "xoxb-press-SecretBotTokenNeverLogged-0123";
const APP_TOKEN: &str = "xapp-1-press-SecretAppTokenNeverLogged-4567";
const SIGNING_SECRET: &str = "press-signing-secret-never-logged-abcdef";
/// The entry's request path (a `socket` entry keeps one when its connection has a
/// signing secret); `apply_config` waits for ingressd to serve it.
const PATH: &str = "/slack/demo/team";
const ROOT_TS: &str = "1700000000.000100";
const STATUS_TS: &str = "1700000005.000200";

fn fixture(name: &str) -> Value {
    let raw = std::fs::read(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../extensions/slack/tests/fixtures/socket_mode")
            .join(name),
    )
    .unwrap();
    serde_json::from_slice(&raw).unwrap()
}

/// One bus call from any thread (the stand-in's hook runs on its own).
fn bus_call(bus: &Path, method: &str, params: Value) -> Value {
    let mut s = UnixStream::connect(bus).unwrap();
    s.set_read_timeout(Some(HANG)).unwrap();
    let mut line =
        serde_json::to_vec(&json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params}))
            .unwrap();
    line.push(b'\n');
    s.write_all(&line).unwrap();
    let mut answer = String::new();
    BufReader::new(s).read_line(&mut answer).unwrap();
    let v: Value = serde_json::from_str(&answer).unwrap();
    v["result"].clone()
}

fn events_at(bus: &Path, prefix: &str) -> Vec<Value> {
    bus_call(bus, "store.events", json!({"after": 0, "limit": 1000}))["events"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .into_iter()
        .filter(|e| e["type"].as_str().is_some_and(|t| t.starts_with(prefix)))
        .collect()
}

fn secret(suite: &Suite, name: &str, value: &str) -> PathBuf {
    let dir = suite.dir.join("secrets");
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(name);
    std::fs::write(&path, format!("{value}\n")).unwrap();
    path
}

fn work_state(suite: &Suite, work: &str) -> String {
    suite.call("store.work_get", json!({"id": work})).unwrap()["work"]["state"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

/// The `interactive` envelope `envelope_id`: Slack's `block_actions` fixture made a
/// press of the status message's Stop button of `work` in `channel`.
fn press(envelope_id: &str, work: &str, channel: &str, team: &str) -> Value {
    let mut env = fixture("block_actions.json");
    env["envelope_id"] = json!(envelope_id);
    let p = env["payload"].as_object_mut().unwrap();
    p.remove("view");
    p.insert(
        "container".into(),
        json!({"type": "message", "message_ts": STATUS_TS, "channel_id": channel,
               "is_ephemeral": false}),
    );
    p.insert("channel".into(), json!({"id": channel, "name": "deploys"}));
    p.insert(
        "message".into(),
        json!({"type": "message", "ts": STATUS_TS, "thread_ts": ROOT_TS}),
    );
    p.insert("team".into(), json!({"id": team, "domain": "acme"}));
    p.insert(
        "trigger_id".into(),
        json!("3701415066658.3485157640.socketpress"),
    );
    p.insert(
        "actions".into(),
        json!([{
            "type": "button", "action_id": "oc-0", "block_id": "oc-actions",
            "text": {"type": "plain_text", "text": "Stop"}, "style": "danger",
            "value": oc_slack::status::button_value(work, "core", "stop", &Value::Null),
            "action_ts": "1700000006.000300"
        }]),
    );
    env
}

#[test]
fn a_stop_pressed_over_socket_mode_stops_the_run_and_is_acked_once_submitted() {
    let slack = SocketSlack::start(BOT_TOKEN, APP_TOKEN).unwrap();
    let mut packages = Suite::first_party();
    packages.push(Package {
        name: "slack".into(),
        manifest: oc_slack::MANIFEST.into(),
        command: vec!["ext-slack".into()],
    });
    let suite = Suite::new(Path::new(BIN), "slack-socket-press", &packages).unwrap();
    suite.start_all().unwrap();
    let end = suite.dir.join("end");
    let script = format!(
        "echo 'deploying'\nwhile [ ! -e '{end}' ]; do sleep 0.05; done\necho 'done'",
        end = end.display()
    );
    let file = |p: PathBuf| format!("file:{}", p.display());
    let doc = json!({
        "connections": [
            {"name": "sl", "type": "slack", "config": {"api_url": slack.api_url},
             "secret_refs": {"bot_token": file(secret(&suite, "bot", BOT_TOKEN)),
                             "app_token": file(secret(&suite, "app", APP_TOKEN)),
                             "signing_secret": file(secret(&suite, "signing", SIGNING_SECRET))}}
        ],
        "scopes": [{
            "id": "demo",
            "entries": [{"type": "slack", "name": "team", "connection": "sl",
                         "config": {"mode": "socket"}}],
            "routes": [{"handler": "slack", "binding": "run"}],
            // The deadline only bounds what a failed test would leave behind.
            "bindings": [{"name": "run", "executor": "shell",
                          "config": {"script": script, "deadline_s": 120, "grace_s": 1}}]
        }]
    });
    suite.apply_config(&doc, PATH).unwrap();
    let conn = slack.connection(1).unwrap();
    let bus = suite.bus.clone();
    slack.on_ack(move |envelope_id| match envelope_id {
        "env-mention" => {
            if events_at(&bus, "slack.").is_empty() {
                "not kept".into()
            } else {
                "kept".into()
            }
        }
        _ => format!("{} stop events", events_at(&bus, "core.action.stop").len()),
    });

    // The mention over the socket: a Work whose run keeps running.
    let mut mention = fixture("app_mention.json");
    mention["envelope_id"] = json!("env-mention");
    mention["payload"]["event_id"] = json!("Ev-press-1");
    mention["payload"]["event"]["ts"] = json!(ROOT_TS);
    mention["payload"]["event"]["text"] = json!("<@U111> Deploy the docs site");
    let channel = mention["payload"]["event"]["channel"]
        .as_str()
        .unwrap()
        .to_string();
    let team = mention["payload"]["team_id"].as_str().unwrap().to_string();
    conn.send(&mention.to_string()).unwrap();
    assert_eq!(slack.ack_of("env-mention").unwrap().1, "kept");
    let work = wait_for("the thread's Work", || {
        let works = suite
            .call("store.works", json!({"scope_id": "demo"}))
            .unwrap();
        works["works"][0]["id"].as_str().map(str::to_string)
    });
    wait_for("a running attempt", || {
        let ex = suite
            .call("store.executions", json!({"work_id": work}))
            .unwrap();
        ex["executions"]
            .as_array()?
            .iter()
            .any(|e| e["state"] == "running")
            .then_some(())
    });

    // The press over the socket: acked once submitted, the run stopped.
    conn.send(&press("env-press", &work, &channel, &team).to_string())
        .unwrap();
    let (_, said) = slack.ack_of("env-press").unwrap();
    assert_eq!(
        said, "1 stop events",
        "the press was acked before it was submitted"
    );
    wait_for("the Work cancelled", || {
        (work_state(&suite, &work) == "cancelled").then_some(())
    });
    let stops = events_at(&suite.bus, "core.action.");
    assert_eq!(stops.len(), 1, "{stops:#?}");
    let stopped = &stops[0];
    assert_eq!(stopped["type"], "core.action.stop", "{stopped:#}");
    assert_eq!(
        stopped["payload"]["caller"], "slack:U12345678",
        "{stopped:#}"
    );
    assert_eq!(stopped["payload"]["work_id"], json!(work), "{stopped:#}");
    assert_eq!(
        stopped["payload"]["input"]["slack_user_name"], "testxyz",
        "{stopped:#}"
    );
    let ran = suite
        .call("store.executions", json!({"work_id": work}))
        .unwrap();
    assert!(
        ran["executions"]
            .as_array()
            .unwrap()
            .iter()
            .all(|e| e["state"] != "running"),
        "{ran:#}"
    );

    // The same press again (Slack re-sends an envelope acked late): acked, nothing
    // more applied.
    let mut again = press("env-press-again", &work, &channel, &team);
    again["retry_attempt"] = json!(1);
    again["retry_reason"] = json!("timeout");
    conn.send(&again.to_string()).unwrap();
    let (_, said) = slack.ack_of("env-press-again").unwrap();
    assert_eq!(said, "1 stop events");
    assert_eq!(events_at(&suite.bus, "core.action.").len(), 1);
    assert_eq!(work_state(&suite, &work), "cancelled");

    // No log holds a token.
    for d in [Daemon::Broker, Daemon::Storaged, Daemon::Extrunner] {
        let log = suite.log(d);
        for s in [BOT_TOKEN, APP_TOKEN, SIGNING_SECRET] {
            assert!(!log.contains(s), "{d:?} logged a token");
        }
    }
}
