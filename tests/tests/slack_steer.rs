#![allow(clippy::unwrap_used)]
//! Steering a Slack thread's Work from Slack, with real daemons: a signed Events API
//! `app_mention` (python-slack-sdk's fixture) to ingressd starts a Work on a shell
//! binding whose script waits on a file, so the run keeps running; the package's
//! projector (`slack.status`, on schedulerd's clock) posts one status message in the
//! thread with a Stop button, against a Web API stand-in that records what it is
//! sent; a signed `block_actions` press of that button (Slack's own payload,
//! python-slack-sdk's Socket Mode fixture, made a press of the button the projector
//! made, as extensions/slack/tests/steer.rs does) POSTed to the entry's path through
//! ingressd stops the run: the Work is cancelled, the `core.action.stop` Event names
//! the Slack person (`slack:U…`), and the status message is edited (never posted
//! again) to the cancelled state. The same press again is 403 and applies nothing; a
//! press with a bad signature is 401 and nothing is kept. Then
//! `open-conduit slack manifest` prints the app manifest made from the configuration
//! (the request URL under `public_url`).
//!
//! A second test: a reply in the thread of a claude-code Work (the fake `claude`,
//! `calls` mode with no calls) wakes it, and the resumed turn's prompt is the thread
//! as `event.render` makes it through the binding's connection: names from
//! `users.info` (answered by the stand-in), links resolved, no user IDs.
//!
//! Nothing here measures time: the waits only guard against hangs.

mod common;
use common::*;

use oc_slack::signature::sign;
use oc_systest::slack::{Request, WebStandIn};
use oc_systest::{Daemon, Package, Suite};
use serde_json::{json, Value};
use std::path::Path;

const BOT_TOKEN: &str = "xoxb-steer-SecretBotTokenNeverLogged-0123456789";
const SIGNING_SECRET: &str = "steer-signing-secret-never-logged-abcdef";
const PATH: &str = "/slack/demo/team";
const PUBLIC_URL: &str = "https://conduit.example.com";
/// The status message's `ts`, as the stand-in answers `chat.postMessage`.
const STATUS_TS: &str = "1610242000.000100";
const THREAD_TS: &str = "1610241741.000200";

fn fixture(path: &str) -> Value {
    let raw = std::fs::read(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../extensions/slack/tests/fixtures")
            .join(path),
    )
    .unwrap();
    serde_json::from_slice(&raw).unwrap()
}

fn now_s() -> i64 {
    protocol::time::now_ms() / 1000
}

/// POSTs `body` to the entry's path, signed at `ts` under `secret`.
fn post_signed(
    suite: &Suite,
    content_type: &str,
    body: &[u8],
    ts: i64,
    secret: &str,
) -> oc_systest::Response {
    let ts = ts.to_string();
    let headers = vec![
        ("Content-Type", content_type.to_string()),
        ("X-Slack-Request-Timestamp", ts.clone()),
        ("X-Slack-Signature", sign(secret.as_bytes(), &ts, body)),
    ];
    oc_systest::post(suite.http, PATH, &headers, body).unwrap()
}

/// Slack's `block_actions` payload (python-slack-sdk's Socket Mode fixture: a select
/// in a modal) made a press of `button` on the status message in the thread, by
/// `trigger`: the `container`, `channel`, `message` and `actions` Slack sends for a
/// button in a message.
fn press(button: &Value, trigger: &str) -> Value {
    let mut p = fixture("socket_mode/block_actions.json")["payload"].clone();
    let obj = p.as_object_mut().unwrap();
    obj.remove("view");
    obj.insert(
        "container".into(),
        json!({"type": "message", "message_ts": STATUS_TS, "channel_id": "C111",
               "is_ephemeral": false}),
    );
    obj.insert("channel".into(), json!({"id": "C111", "name": "deploys"}));
    obj.insert(
        "message".into(),
        json!({"type": "message", "ts": STATUS_TS, "thread_ts": THREAD_TS}),
    );
    obj.insert("team".into(), json!({"id": "T111", "domain": "acme"}));
    obj.insert("trigger_id".into(), json!(trigger));
    let mut action = button.clone();
    action["block_id"] = json!("oc-actions");
    action["action_ts"] = json!("1655863389.628431");
    obj.insert("actions".into(), json!([action]));
    p
}

fn form(payload: &Value) -> Vec<u8> {
    format!(
        "payload={}",
        oc_slack::api::percent_encode(&payload.to_string())
    )
    .into_bytes()
}

/// `open-conduit ARGS…` on the suite's bus: (status, stdout, stderr).
fn oc(suite: &Suite, args: &[&str]) -> (i32, String, String) {
    let out = std::process::Command::new(BIN)
        .arg("open-conduit")
        .arg("--bus")
        .arg(&suite.bus)
        .args(args)
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn slack() -> WebStandIn {
    WebStandIn::start(|req: &Request| match req.path() {
        "/chat.postMessage" => {
            json!({"ok": true, "channel": req.field("channel"), "ts": STATUS_TS})
        }
        "/chat.update" => {
            json!({"ok": true, "channel": req.field("channel"), "ts": req.field("ts")})
        }
        "/users.info" => json!({"ok": true, "user": {"id": req.field("user"), "name": "jdoe",
                                "profile": {"display_name": "Jane Doe"}}}),
        "/conversations.replies" => json!({"ok": true, "messages": []}),
        _ => json!({"ok": true}),
    })
    .unwrap()
}

fn works(suite: &Suite) -> Vec<Value> {
    suite
        .call("store.works", json!({"scope_id": "demo"}))
        .unwrap()["works"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

fn work_state(suite: &Suite, work: &str) -> String {
    suite.call("store.work_get", json!({"id": work})).unwrap()["work"]["state"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

fn events_of(suite: &Suite, prefix: &str) -> Vec<Value> {
    suite
        .events()
        .unwrap()
        .into_iter()
        .filter(|e| e["type"].as_str().is_some_and(|t| t.starts_with(prefix)))
        .collect()
}

/// The status message's buttons, as `request` (a `chat.postMessage` or
/// `chat.update`) carries them.
fn buttons(request: &Request) -> Vec<Value> {
    let blocks: Value =
        serde_json::from_str(&request.field("blocks").unwrap_or_default()).unwrap_or(Value::Null);
    blocks
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default()
        .iter()
        .filter(|b| b["type"] == "actions")
        .flat_map(|b| b["elements"].as_array().cloned().unwrap_or_default())
        .collect()
}

#[test]
fn a_stop_pressed_in_slack_stops_the_run_and_the_thread_shows_it() {
    let stand_in = slack();
    let mut packages = Suite::first_party();
    packages.push(Package {
        name: "slack".into(),
        manifest: oc_slack::MANIFEST.into(),
        command: vec!["ext-slack".into()],
    });
    let suite = Suite::new(Path::new(BIN), "slack-steer", &packages).unwrap();
    suite.start_all().unwrap();

    let token_file = suite.dir.join("slack-bot-token");
    std::fs::write(&token_file, format!("{BOT_TOKEN}\n")).unwrap();
    let secret_file = suite.dir.join("slack-signing-secret");
    std::fs::write(&secret_file, format!("{SIGNING_SECRET}\n")).unwrap();
    let end = suite.dir.join("end");
    let script = format!(
        "echo 'deploying'\nwhile [ ! -e '{end}' ]; do sleep 0.05; done\necho 'done'",
        end = end.display()
    );
    let doc = json!({
        "settings": {"webhooks": {"public_url": PUBLIC_URL}},
        "connections": [{"name": "sl", "type": "slack", "config": {"api_url": stand_in.url},
                         "secret_refs": {"bot_token": format!("file:{}", token_file.display()),
                                         "signing_secret": format!("file:{}", secret_file.display())}}],
        "scopes": [{
            "id": "demo",
            "entries": [{"type": "slack", "name": "team", "connection": "sl"}],
            "routes": [{"handler": "slack", "binding": "run"}],
            // The deadline only bounds what a failed test would leave behind.
            "bindings": [{"name": "run", "executor": "shell",
                          "config": {"script": script, "deadline_s": 120, "grace_s": 1}}]
        }]
    });
    suite.apply_config(&doc, PATH).unwrap();

    // The mention starts the Work, whose run keeps running.
    let mut mention = fixture("events/app_mention.json");
    mention["event"]["text"] = json!("<@U111> Deploy the docs site");
    let body = serde_json::to_vec(&mention).unwrap();
    let r = post_signed(&suite, "application/json", &body, now_s(), SIGNING_SECRET);
    assert_eq!(r.status, 200, "{}", r.text());
    let work = wait_for("the thread's Work", || {
        works(&suite).first()?["id"].as_str().map(str::to_string)
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

    // The projector's status message, in the thread, with a Stop button.
    let stop = wait_for("the status message showing running, with Stop", || {
        let shown = stand_in
            .requests()
            .into_iter()
            .rfind(|r| matches!(r.path(), "/chat.postMessage" | "/chat.update"))?;
        shown.field("text")?.contains("running").then_some(())?;
        buttons(&shown)
            .into_iter()
            .find(|b| b["text"]["text"] == "Stop")
    });
    let posts = stand_in.calls("/chat.postMessage");
    assert_eq!(posts.len(), 1, "one status message: {posts:#?}");
    assert_eq!(posts[0].field("channel").as_deref(), Some("C111"));
    assert_eq!(posts[0].field("thread_ts").as_deref(), Some(THREAD_TS));
    assert!(
        posts[0].field("text").unwrap().contains(&work),
        "{posts:#?}"
    );
    assert_eq!(work_state(&suite, &work), "running");

    // A press with a bad signature: 401, nothing kept, the run goes on.
    let payload = press(&stop, "3701415066658.3485157640.steer1");
    let pressed = form(&payload);
    let ct = "application/x-www-form-urlencoded";
    let before = suite.events().unwrap().len();
    let r = post_signed(&suite, ct, &pressed, now_s(), "not the signing secret");
    assert_eq!(r.status, 401, "{}", r.text());
    let r = post_signed(&suite, ct, &pressed, now_s() - 3600, SIGNING_SECRET);
    assert_eq!(r.status, 401, "{}", r.text());
    assert_eq!(
        suite.events().unwrap().len(),
        before,
        "a refused press kept nothing"
    );
    assert!(events_of(&suite, "core.action.").is_empty());
    assert_eq!(work_state(&suite, &work), "running");

    // The signed press stops the run: the Work is cancelled, by the Slack person.
    let ts = now_s();
    let r = post_signed(&suite, ct, &pressed, ts, SIGNING_SECRET);
    assert_eq!(r.status, 200, "{}", r.text());
    wait_for("the Work cancelled", || {
        (work_state(&suite, &work) == "cancelled").then_some(())
    });
    let actions = events_of(&suite, "core.action.");
    assert_eq!(actions.len(), 1, "{actions:#?}");
    let stopped = &actions[0];
    assert_eq!(stopped["type"], "core.action.stop", "{stopped:#}");
    let data = &stopped["payload"];
    assert_eq!(data["caller"], "slack:U12345678", "{stopped:#}");
    assert_eq!(data["work_id"], json!(work), "{stopped:#}");
    assert_eq!(stopped["source"], "core/actions/slack");
    assert_eq!(data["input"]["slack_user"], "U12345678", "{stopped:#}");
    assert_eq!(data["input"]["slack_user_name"], "testxyz", "{stopped:#}");
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

    // The status message is edited to the cancelled state, not posted again.
    wait_for("the status message showing cancelled", || {
        stand_in
            .calls("/chat.update")
            .last()?
            .field("text")?
            .contains("cancelled")
            .then_some(())
    });
    let updates = stand_in.calls("/chat.update");
    assert!(updates
        .iter()
        .all(|u| u.field("ts").as_deref() == Some(STATUS_TS)));
    assert_eq!(stand_in.calls("/chat.postMessage").len(), 1, "posted once");
    assert!(stand_in
        .calls("/reactions.add")
        .iter()
        .any(|r| r.field("name").as_deref() == Some("no_entry_sign")));

    // The same press again (a replay within the window): refused, nothing applied.
    let before = suite.events().unwrap().len();
    let r = post_signed(&suite, ct, &pressed, ts, SIGNING_SECRET);
    assert_eq!(r.status, 403, "{}", r.text());
    assert_eq!(suite.events().unwrap().len(), before);
    assert_eq!(events_of(&suite, "core.action.").len(), 1);
    assert_eq!(work_state(&suite, &work), "cancelled");

    // The Web API calls all carried the bot token, and no log holds a secret.
    assert!(stand_in
        .requests()
        .iter()
        .all(|r| r.header("authorization") == Some(&format!("Bearer {BOT_TOKEN}"))));
    for d in Daemon::ALL {
        let log = suite.log(d);
        assert!(!log.contains(BOT_TOKEN), "{d:?} logged the bot token");
        assert!(
            !log.contains(SIGNING_SECRET),
            "{d:?} logged the signing secret"
        );
    }

    // `open-conduit slack manifest`: the app manifest of this configuration.
    let (status, out, err) = oc(&suite, &["slack", "manifest"]);
    assert_eq!(status, 0, "{out}{err}");
    assert!(err.contains("note: install the app"), "{err}");
    let manifest: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
    let url = format!("{PUBLIC_URL}{PATH}");
    assert_eq!(
        manifest["settings"]["event_subscriptions"]["request_url"], url,
        "{manifest:#}"
    );
    assert_eq!(manifest["settings"]["interactivity"]["request_url"], url);
    assert_eq!(manifest["settings"]["socket_mode_enabled"], false);
    let (status, again, err) = oc(
        &suite,
        &["slack", "manifest", "--connection", "sl", "--scope", "demo"],
    );
    assert_eq!(status, 0, "{err}");
    assert_eq!(again, out);
    let (status, out, err) = oc(
        &suite,
        &["--json", "slack", "manifest", "--connection", "sl"],
    );
    assert_eq!(status, 0, "{err}");
    let all: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(all["manifests"][0]["connection"], "sl");
    assert_eq!(all["manifests"][0]["entries"], json!(["demo/team"]));
    let (status, _, err) = oc(&suite, &["slack", "manifest", "--scope", "elsewhere"]);
    assert_eq!(status, 1, "{err}");
    assert!(err.contains("no slack entry of scope elsewhere"), "{err}");
    std::fs::write(&end, b"").unwrap();
}

/// The prompts the fake `claude` took in, in order, with whether each was a resumed
/// turn.
fn prompts(rec: &Path) -> Vec<(String, bool)> {
    records(rec)
        .into_iter()
        .filter_map(|r| Some((r["prompt"].as_str()?.to_owned(), r["resumed"] == true)))
        .collect()
}

#[test]
fn the_resumed_turns_prompt_shows_the_thread_with_names_not_ids() {
    // The thread as Slack keeps it, and who its people are.
    let stand_in = WebStandIn::start(|req: &Request| match req.path() {
        "/conversations.replies" => json!({"ok": true, "messages": [
            {"user": "U222", "ts": THREAD_TS, "text": "<@U111> Deploy the docs site"},
            {"user": "U333", "ts": "1610241800.000300",
             "text": "also <https://api.example.com|the API reference> &amp; the changelog"}
        ]}),
        "/users.info" => match req.field("user").as_deref() {
            Some("U222") => json!({"ok": true, "user": {"id": "U222", "name": "jdoe",
                                    "profile": {"display_name": "Jane Doe"}}}),
            Some("U333") => json!({"ok": true, "user": {"id": "U333", "name": "sam",
                                    "real_name": "Sam Roe", "profile": {"display_name": ""}}}),
            Some("U111") => json!({"ok": true, "user": {"id": "U111", "name": "conduit",
                                    "profile": {"display_name": ""}}}),
            _ => json!({"ok": false, "error": "user_not_found"}),
        },
        "/chat.postMessage" => {
            json!({"ok": true, "channel": req.field("channel"), "ts": STATUS_TS})
        }
        _ => json!({"ok": true}),
    })
    .unwrap();
    let mut packages = Suite::first_party();
    for (name, manifest, command) in [
        ("claude-code", oc_claude_code::MANIFEST, "ext-claude-code"),
        ("slack", oc_slack::MANIFEST, "ext-slack"),
    ] {
        packages.push(Package {
            name: name.into(),
            manifest: manifest.into(),
            command: vec![command.into()],
        });
    }
    let suite = Suite::new(Path::new(BIN), "slack-steer-names", &packages).unwrap();
    let claude = suite.dir.join("bin/claude");
    script(
        &claude,
        &format!("#!/bin/sh\nexec '{BIN}' fake-claude \"$@\"\n"),
    );
    with_toolbelt(&suite);
    suite.start_all().unwrap();
    let token_file = suite.dir.join("slack-bot-token");
    std::fs::write(&token_file, format!("{BOT_TOKEN}\n")).unwrap();
    let secret_file = suite.dir.join("slack-signing-secret");
    std::fs::write(&secret_file, format!("{SIGNING_SECRET}\n")).unwrap();
    let rec = suite.dir.join("claude.jsonl");
    std::fs::create_dir_all(suite.dir.join("work")).unwrap();
    let doc = json!({
        "connections": [{"name": "sl", "type": "slack", "config": {"api_url": stand_in.url},
                         "secret_refs": {"bot_token": format!("file:{}", token_file.display()),
                                         "signing_secret": format!("file:{}", secret_file.display())}}],
        "scopes": [{
            "id": "demo",
            "entries": [{"type": "slack", "name": "team", "connection": "sl"}],
            "routes": [{"handler": "slack", "binding": "cc"}],
            "bindings": [{
                "name": "cc", "executor": "claude-code", "connection": "sl",
                "config": {"binary": claude, "dir": suite.dir.join("work"),
                           "env": {"FAKE_CLAUDE_MODE": "calls", "FAKE_CLAUDE_RECORD": rec,
                                   "FAKE_CLAUDE_CALLS": "[]",
                                   "CLAUDE_CONFIG_DIR": suite.dir.join("claude-config")}}
            }]
        }]
    });
    suite.apply_config(&doc, PATH).unwrap();

    // The mention: the first turn.
    let mut mention = fixture("events/app_mention.json");
    mention["event"]["text"] = json!("<@U111> Deploy the docs site");
    let body = serde_json::to_vec(&mention).unwrap();
    let r = post_signed(&suite, "application/json", &body, now_s(), SIGNING_SECRET);
    assert_eq!(r.status, 200, "{}", r.text());
    wait_for("the first turn", || {
        (!prompts(&rec).is_empty()).then_some(())
    });
    let work = wait_for("the Work between turns", || {
        let w = works(&suite).first()?.clone();
        (w["state"] != "running" && w["state"] != "pending" && w["state"] != "queued")
            .then(|| w["id"].as_str().map(str::to_string))?
    });

    // A reply in the thread: the resumed turn's prompt is the thread with names.
    let mut reply = fixture("events/app_mention.json");
    reply["event_id"] = json!("Ev-reply-names");
    reply["event"]["type"] = json!("message");
    reply["event"]["user"] = json!("U333");
    // (No mention: the fixture's authorizations make U222 the app, and a message
    // mentioning the app is taken as its `app_mention`.)
    reply["event"]["text"] =
        json!("also <https://api.example.com|the API reference> &amp; the changelog");
    reply["event"]["ts"] = json!("1610241800.000300");
    reply["event"]["thread_ts"] = json!(THREAD_TS);
    reply["event"]["channel_type"] = json!("channel");
    let body = serde_json::to_vec(&reply).unwrap();
    let r = post_signed(&suite, "application/json", &body, now_s(), SIGNING_SECRET);
    assert_eq!(r.status, 200, "{}", r.text());
    let resumed = wait_for("the resumed turn's prompt", || {
        prompts(&rec)
            .into_iter()
            .find(|(_, resumed)| *resumed)
            .map(|(p, _)| p)
    });
    assert_eq!(works(&suite).len(), 1, "the reply joined {work}");
    assert!(resumed.contains("Jane Doe"), "{resumed}");
    assert!(resumed.contains("Sam Roe"), "{resumed}");
    assert!(
        resumed.contains("**Jane Doe** (2021-01-10 01:22 UTC): @conduit Deploy the docs site"),
        "{resumed}"
    );
    assert!(
        resumed.contains(
            "← this message: also [the API reference](https://api.example.com) & the changelog"
        ),
        "{resumed}"
    );
    for id in ["U111", "U222", "U333"] {
        assert!(!resumed.contains(id), "{id} in {resumed}");
    }
    assert!(!stand_in.calls("/users.info").is_empty());
    assert!(!stand_in.calls("/conversations.replies").is_empty());
}
