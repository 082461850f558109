#![allow(clippy::unwrap_used)]
//! A reply in a Slack thread while its Work's agent turn runs reaches that turn, with
//! real daemons: a signed Events API `app_mention` (python-slack-sdk's fixture) to
//! ingressd starts a Work on a claude-code binding whose fake `claude` holds its turn
//! open (`FAKE_CLAUDE_HOLD`: it takes in and keeps what arrives on its stdin until a
//! file exists); a signed reply in the thread, delivered to ingressd while the turn
//! runs, joins the running Work (the route counts running Work as open) and is
//! injected into the running segment: the segment's `injected.jsonl` names its Event,
//! and the user message `claude` took in on stdin is the thread as `event.render` makes
//! it through the binding's connection (names from `users.info`, links resolved, no
//! user IDs). Once the turn ends the Work completes with that one execution: the reply
//! was consumed by the turn it reached and started no second one.
//!
//! The Web API is a recording stand-in (`oc_systest::slack::WebStandIn`): the
//! rendering needs the thread and the names back as the test wrote them, which Prism's
//! made-up answers are not (tests/tests/slack.rs checks the requests against Slack's
//! description). Nothing here measures time: the waits only guard against hangs.

mod common;
use common::*;

use oc_slack::signature::sign;
use oc_systest::slack::{Request, WebStandIn};
use oc_systest::{Package, Suite};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};

const BOT_TOKEN: &str = "xoxb-inject-SecretBotTokenNeverLogged-0123456789";
const SIGNING_SECRET: &str = "inject-signing-secret-never-logged-abcdef";
const PATH: &str = "/slack/demo/team";
const THREAD_TS: &str = "1610241741.000200";
const REPLY_TS: &str = "1610241800.000300";

fn fixture() -> Value {
    let raw = std::fs::read(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../extensions/slack/tests/fixtures/events/app_mention.json"),
    )
    .unwrap();
    serde_json::from_slice(&raw).unwrap()
}

fn now_s() -> i64 {
    protocol::time::now_ms() / 1000
}

/// POSTs `body` to the entry's path, signed now under the signing secret.
fn send(suite: &Suite, body: &Value) -> oc_systest::Response {
    let bytes = serde_json::to_vec(body).unwrap();
    let ts = now_s().to_string();
    let headers = vec![
        ("Content-Type", "application/json".to_string()),
        ("X-Slack-Request-Timestamp", ts.clone()),
        (
            "X-Slack-Signature",
            sign(SIGNING_SECRET.as_bytes(), &ts, &bytes),
        ),
    ];
    oc_systest::post(suite.http, PATH, &headers, &bytes).unwrap()
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

/// Every file named `name` under `dir`.
fn files_named(dir: &Path, name: &str) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else if p
                .file_name()
                .is_some_and(|n| n.to_string_lossy().ends_with(name))
            {
                out.push(p);
            }
        }
    }
    out
}

/// The Event IDs the claude-code package wrote to running segments.
fn injected_ids(state: &Path) -> Vec<String> {
    files_named(state, "injected.jsonl")
        .iter()
        .flat_map(|p| records(p))
        .filter_map(|r| r["id"].as_str().map(str::to_owned))
        .collect()
}

/// The texts of the user messages `claude` took in on its stdin (its sessions'
/// transcripts), in each session's order.
fn user_messages(config_dir: &Path) -> Vec<String> {
    files_named(config_dir, ".jsonl")
        .iter()
        .flat_map(|p| records(p))
        .filter(|r| r["type"] == "user")
        .map(|r| match &r["message"]["content"] {
            Value::String(t) => t.clone(),
            Value::Array(parts) => parts
                .iter()
                .filter_map(|p| p["text"].as_str())
                .collect::<Vec<_>>()
                .join("\n"),
            _ => String::new(),
        })
        .collect()
}

/// The things a test of this file has: the Web API stand-in, the suite, the fake
/// claude's record file, its release file and its config directory.
struct Setup {
    _stand_in: WebStandIn,
    suite: Suite,
    rec: PathBuf,
    hold: PathBuf,
    config_dir: PathBuf,
}

/// A suite with claude-code and slack, the thread's people answered by a stand-in, an
/// entry whose mentions run binding `cc` (the fake claude with `env` and its
/// `FAKE_CLAUDE_RECORD` and `CLAUDE_CONFIG_DIR`, granted `operations`; an
/// `env.FAKE_CLAUDE_HOLD` is replaced by the release file's path).
fn setup(name: &str, env: Value, operations: Value) -> Setup {
    // The thread as Slack keeps it, and who its people are.
    let stand_in = WebStandIn::start(|req: &Request| match req.path() {
        "/conversations.replies" => json!({"ok": true, "messages": [
            {"user": "U222", "ts": THREAD_TS, "text": "<@U111> Deploy the docs site"},
            {"user": "U333", "ts": REPLY_TS,
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
            json!({"ok": true, "channel": req.field("channel"), "ts": "1610242000.000100"})
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
    let suite = Suite::new(Path::new(BIN), name, &packages).unwrap();
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
    let hold = suite.dir.join("release-the-turn");
    let config_dir = suite.dir.join("claude-config");
    let mut env = env;
    env["FAKE_CLAUDE_RECORD"] = json!(rec);
    env["CLAUDE_CONFIG_DIR"] = json!(config_dir);
    if env.get("FAKE_CLAUDE_HOLD").is_some() {
        env["FAKE_CLAUDE_HOLD"] = json!(hold);
    }
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
                "operations": operations,
                "config": {"binary": claude, "dir": suite.dir.join("work"),
                           "env": env}
            }]
        }]
    });
    suite.apply_config(&doc, PATH).unwrap();
    Setup {
        _stand_in: stand_in,
        suite,
        rec,
        hold,
        config_dir,
    }
}

#[test]
fn a_thread_reply_while_the_turn_runs_reaches_that_turn_rendered_with_names() {
    let Setup {
        _stand_in,
        suite,
        rec,
        hold,
        config_dir,
    } = setup(
        "slack-inject",
        json!({"FAKE_CLAUDE_HOLD": true, "FAKE_CLAUDE_STATE": "finished"}),
        json!([]),
    );

    // The mention: the turn starts and holds.
    let mut mention = fixture();
    mention["event"]["text"] = json!("<@U111> Deploy the docs site");
    let r = send(&suite, &mention);
    assert_eq!(r.status, 200, "{}", r.text());
    let work = wait_for("the thread's Work", || {
        works(&suite).first()?["id"].as_str().map(str::to_string)
    });
    wait_for("the turn's prompt", || {
        records(&rec)
            .iter()
            .any(|r| r["prompt"].is_string())
            .then_some(())
    });
    assert_eq!(work_state(&suite, &work), "running");

    // A reply in the thread while the turn runs.
    let mut reply = fixture();
    reply["event_id"] = json!("Ev-reply-inject");
    reply["event"]["type"] = json!("message");
    reply["event"]["user"] = json!("U333");
    // (No mention: the fixture's authorizations make U222 the app, and a message
    // mentioning the app is taken as its `app_mention`.)
    reply["event"]["text"] =
        json!("also <https://api.example.com|the API reference> &amp; the changelog");
    reply["event"]["ts"] = json!(REPLY_TS);
    reply["event"]["thread_ts"] = json!(THREAD_TS);
    reply["event"]["channel_type"] = json!("channel");
    let r = send(&suite, &reply);
    assert_eq!(r.status, 200, "{}", r.text());
    let reply_id = wait_for("the reply on the running Work", || {
        suite
            .call("store.work_events", json!({"work_id": work, "limit": 100}))
            .unwrap()["events"]
            .as_array()?
            .iter()
            .find(|e| e["type"] == "slack.message.reply")?["id"]
            .as_str()
            .map(str::to_string)
    });
    assert_eq!(works(&suite).len(), 1, "the reply made no Work of its own");

    // It reached the running turn: written to the segment's stdin, and taken in.
    let state = suite.dir.join("state");
    wait_for("the reply injected", || {
        injected_ids(&state).contains(&reply_id).then_some(())
    });
    let injected = wait_for("the reply taken in by claude", || {
        user_messages(&config_dir)
            .into_iter()
            .find(|m| m.contains("Arrived during this turn"))
    });
    assert!(injected.contains(&reply_id), "{injected}");
    assert!(injected.contains("Jane Doe"), "{injected}");
    assert!(
        injected.contains(
            "← this message: also [the API reference](https://api.example.com) & the changelog"
        ),
        "{injected}"
    );
    assert!(injected.contains("Sam Roe"), "{injected}");
    for id in ["U111", "U222", "U333"] {
        assert!(!injected.contains(id), "{id} in {injected}");
    }
    assert_eq!(work_state(&suite, &work), "running", "still the same turn");

    // The turn ends: the reply was consumed by it, no second turn starts.
    std::fs::write(&hold, "go").unwrap();
    wait_for("the Work completed", || {
        let s = work_state(&suite, &work);
        (s == "completed" || s == "failed").then_some(())
    });
    let ex = suite
        .call("store.executions", json!({ "work_id": work }))
        .unwrap();
    assert_eq!(work_state(&suite, &work), "completed", "{ex}");
    assert_eq!(
        ex["executions"].as_array().unwrap().len(),
        1,
        "the reply started no second turn: {ex}"
    );
    assert_eq!(
        ex["executions"][0]["result"]["data"]["data"]["injected"],
        json!({"accepted": 1, "consumed": 1}),
        "{ex}"
    );
    let prompts = records(&rec)
        .iter()
        .filter(|r| r["prompt"].is_string())
        .count();
    assert_eq!(prompts, 1, "one turn: {:#?}", records(&rec));
    assert_eq!(injected_ids(&state), [reply_id], "written once");
}

/// The agent's calls: on its first turn, wait for a reply in the thread.
const WAIT_CALLS: &str = r#"[
 {"operation": "slack.wait_reply", "turn": "first", "request_id": "wait-1",
  "input": {"timeout_s": 3600}}
]"#;

#[test]
fn an_agent_waits_for_a_reply_and_the_reply_wakes_it() {
    let Setup {
        _stand_in,
        suite,
        rec,
        ..
    } = setup(
        "slack-wait-reply",
        json!({"FAKE_CLAUDE_MODE": "calls", "FAKE_CLAUDE_CALLS": WAIT_CALLS}),
        json!(["slack.wait_reply"]),
    );
    let mut mention = fixture();
    mention["event"]["text"] = json!("<@U111> Deploy the docs site");
    let r = send(&suite, &mention);
    assert_eq!(r.status, 200, "{}", r.text());
    let work = wait_for("the thread's Work", || {
        works(&suite).first()?["id"].as_str().map(str::to_string)
    });
    // The turn calls slack.wait_reply and ends: the Work waits, saying for what.
    let waiting = wait_for("the Work waiting for a reply", || {
        let w = suite.call("store.waits", json!({"work_id": work})).ok()?["waits"]
            .as_array()?
            .iter()
            .find(|w| w["state"] == "active" && w["owner"] == "slack")?
            .clone();
        (work_state(&suite, &work) == "waiting").then_some(w)
    });
    assert_eq!(
        waiting["description"], "a reply in the Work's Slack thread",
        "{waiting}"
    );
    assert_eq!(
        waiting["keys"],
        json!([format!("slack:T111/C111/{THREAD_TS}")]),
        "{waiting}"
    );
    let first: Vec<Value> = records(&rec)
        .into_iter()
        .filter(|r| r["prompt"].is_string())
        .collect();
    assert_eq!(first.len(), 1, "{first:#?}");

    // A person replies in the thread: the Wait is satisfied and the next turn
    // carries the reply, with names.
    let mut reply = fixture();
    reply["event_id"] = json!("Ev-reply-wait");
    reply["event"]["type"] = json!("message");
    reply["event"]["user"] = json!("U333");
    reply["event"]["text"] =
        json!("also <https://api.example.com|the API reference> &amp; the changelog");
    reply["event"]["ts"] = json!(REPLY_TS);
    reply["event"]["thread_ts"] = json!(THREAD_TS);
    reply["event"]["channel_type"] = json!("channel");
    let r = send(&suite, &reply);
    assert_eq!(r.status, 200, "{}", r.text());
    let resumed = wait_for("the turn the reply started", || {
        records(&rec)
            .into_iter()
            .filter_map(|r| r["prompt"].as_str().map(str::to_owned))
            .nth(1)
    });
    assert!(resumed.contains("Sam Roe"), "{resumed}");
    assert!(resumed.contains("the changelog"), "{resumed}");
    assert!(!resumed.contains("U333"), "{resumed}");
    let waits = suite.call("store.waits", json!({"work_id": work})).unwrap();
    assert!(
        waits["waits"]
            .as_array()
            .unwrap()
            .iter()
            .any(|w| w["state"] == "woken"),
        "the reply woke the Wait: {waits}"
    );
    assert_eq!(works(&suite).len(), 1, "the reply made no Work of its own");
}
