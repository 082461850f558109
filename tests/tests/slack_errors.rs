#![allow(clippy::unwrap_used)]
//! Slack's errors and rate limits with the whole suite (issue 42): a signed
//! `app_mention` (python-slack-sdk's fixture) through ingressd starts a Work on a
//! claude-code binding granted `slack.post`; the fake `claude` (mode `calls`, through
//! the real `open-conduit mcp`) posts three times in the thread, against a scripted
//! Web API stand-in (`oc_systest::slack::WebStandIn::start_answering`):
//!
//! - the first post is answered 429 with `Retry-After: 1` once, then ok: the agent's
//!   call succeeds, and exactly two requests of it reached Slack;
//! - the second is answered `channel_not_found`: the agent's tool result says Slack
//!   refused with `channel_not_found` (the fake's record shows it), and the package's
//!   log (extrunner's) names the method and the code, never the token;
//! - the third is answered `invalid_auth`, and from then on every request with the
//!   token is: the agent's call fails saying so, the doctor's `tokens` check fails
//!   naming `invalid_auth`, and the projector, whose status message then fails each
//!   pass, does not ask Slack again pass after pass (the token is held back after an
//!   authentication failure): over several passes, the requests reaching the
//!   stand-in after the refusal stay at the one that was refused.
//!
//! Through it all the package keeps running (`ext.list`) and no daemon logs the
//! token. Waits only bound hangs; the passes are counted from the package's log.

mod common;
use common::*;

use busapi::ext::{ExtCall, EXT_CALL};
use oc_slack::signature::sign;
use oc_systest::slack::{Answer, Request, WebStandIn};
use oc_systest::{Daemon, Package, Suite};
use protocol::wire::{CheckRunParams, CheckRunResult};
use serde_json::{json, Value};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

const BOT_TOKEN: &str = "xoxb-errors-SecretBotTokenNeverLogged-0123456789";
const SIGNING_SECRET: &str = "errors-signing-secret-never-logged-abcdef";
const PATH: &str = "/slack/demo/team";
const CALLS: &str = r#"[
 {"operation": "slack.post", "input": {"text": "retry me"}, "request_id": "p-429", "tag": " ratelimited"},
 {"operation": "slack.post", "input": {"text": "to nowhere"}, "request_id": "p-404", "tag": " nowhere"},
 {"operation": "slack.post", "input": {"text": "bad auth"}, "request_id": "p-401", "tag": " badauth"}
]"#;

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

fn check(suite: &Suite, name: &str) -> CheckRunResult {
    let call = ExtCall::new(
        "slack",
        CheckRunParams {
            check: name.into(),
            ..Default::default()
        },
    );
    let answer = suite
        .call(EXT_CALL, serde_json::to_value(call).unwrap())
        .unwrap();
    serde_json::from_value(answer).unwrap()
}

fn slack_state(suite: &Suite) -> String {
    let list = suite.call("ext.list", json!({})).unwrap();
    list["extensions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["name"] == "slack")
        .map(|e| e["state"].as_str().unwrap_or_default().to_string())
        .unwrap_or_default()
}

/// The stand-in's Slack: see the module.
struct Script {
    rate_limited: AtomicUsize,
    refused: AtomicBool,
    /// Requests answered once the token was refused.
    after_refusal: AtomicUsize,
}

fn answer(s: &Script, req: &Request) -> Answer {
    if s.refused.load(Ordering::SeqCst) {
        s.after_refusal.fetch_add(1, Ordering::SeqCst);
        return Answer::error("invalid_auth");
    }
    match (req.path(), req.field("text").as_deref()) {
        ("/chat.postMessage", Some("retry me")) => {
            if s.rate_limited.fetch_add(1, Ordering::SeqCst) == 0 {
                Answer::rate_limited(1)
            } else {
                Answer::ok(json!({"ok": true, "channel": req.field("channel"),
                                  "ts": "1610242100.000200"}))
            }
        }
        ("/chat.postMessage", Some("to nowhere")) => Answer::error("channel_not_found"),
        ("/chat.postMessage", Some("bad auth")) => {
            s.refused.store(true, Ordering::SeqCst);
            s.after_refusal.fetch_add(1, Ordering::SeqCst);
            Answer::error("invalid_auth")
        }
        ("/chat.postMessage", _) => Answer::ok(
            json!({"ok": true, "channel": req.field("channel"), "ts": "1610242000.000100"}),
        ),
        ("/chat.update", _) => {
            Answer::ok(json!({"ok": true, "channel": req.field("channel"), "ts": req.field("ts")}))
        }
        ("/users.info", _) => Answer::ok(json!({"ok": true, "user": {"id": req.field("user"),
                                  "name": "jdoe", "profile": {"display_name": "Jane Doe"}}})),
        ("/conversations.replies", _) => Answer::ok(json!({"ok": true, "messages": []})),
        _ => Answer::ok(json!({"ok": true})),
    }
}

#[test]
fn rate_limits_are_waited_out_and_slacks_refusals_reach_the_agent_and_the_operator_without_a_storm()
{
    let script = Arc::new(Script {
        rate_limited: AtomicUsize::new(0),
        refused: AtomicBool::new(false),
        after_refusal: AtomicUsize::new(0),
    });
    let s = script.clone();
    let stand_in = WebStandIn::start_answering(move |req| answer(&s, req)).unwrap();

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
    let suite = Suite::new(Path::new(BIN), "slack-errors", &packages).unwrap();
    let claude = suite.dir.join("bin/claude");
    script_file(&claude);
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
                "operations": ["slack.post"],
                "config": {"binary": claude, "dir": suite.dir.join("work"),
                           "env": {"FAKE_CLAUDE_MODE": "calls", "FAKE_CLAUDE_RECORD": rec,
                                   "FAKE_CLAUDE_CALLS": CALLS,
                                   "CLAUDE_CONFIG_DIR": suite.dir.join("claude-config")}}
            }]
        }]
    });
    suite.apply_config(&doc, PATH).unwrap();

    let mut mention = fixture();
    mention["event"]["text"] = json!("<@U111> Post the release notes");
    let body = serde_json::to_vec(&mention).unwrap();
    let ts = now_s().to_string();
    let headers = vec![
        ("Content-Type", "application/json".to_string()),
        ("X-Slack-Request-Timestamp", ts.clone()),
        (
            "X-Slack-Signature",
            sign(SIGNING_SECRET.as_bytes(), &ts, &body),
        ),
    ];
    let r = oc_systest::post(suite.http, PATH, &headers, &body).unwrap();
    assert_eq!(r.status, 200, "{}", r.text());

    // The agent's three calls, through the real MCP server.
    let mcp = wait_for("the agent's calls", || {
        records(&rec)
            .into_iter()
            .filter_map(|r| r["mcp"].as_array().cloned())
            .next()
    });
    let result = |m: &str| {
        mcp.iter()
            .find(|x| x["method"] == m)
            .unwrap_or_else(|| panic!("no {m} in {mcp:#?}"))["answer"]["result"]
            .clone()
    };

    // 429 with Retry-After: waited out, the call succeeded; two requests reached Slack.
    let ok = result("tools/call slack.post ratelimited");
    assert_eq!(ok["isError"], false, "{ok}");
    let tried: Vec<_> = stand_in
        .calls("/chat.postMessage")
        .into_iter()
        .filter(|r| r.field("text").as_deref() == Some("retry me"))
        .collect();
    assert_eq!(tried.len(), 2, "{tried:#?}");
    assert_eq!((tried[0].status, tried[1].status), (429, 200));

    // channel_not_found: the agent is told Slack refused, and why.
    let nowhere = result("tools/call slack.post nowhere");
    assert_eq!(nowhere["isError"], true, "{nowhere}");
    let said = nowhere.to_string();
    assert!(
        said.contains("Slack chat.postMessage failed: channel_not_found"),
        "{said}"
    );
    assert!(said.contains("invite the app"), "{said}");

    // invalid_auth: the agent is told.
    let bad = result("tools/call slack.post badauth");
    assert_eq!(bad["isError"], true, "{bad}");
    let said = bad.to_string();
    assert!(
        said.contains("Slack chat.postMessage failed: invalid_auth"),
        "{said}"
    );
    assert!(said.contains("bot_token is not a valid token"), "{said}");
    assert!(!said.contains(BOT_TOKEN));

    // The operator: the package's log names the method and Slack's code.
    let log = wait_for("the package's log of the refusals", || {
        let log = suite.log(Daemon::Extrunner);
        (log.contains("channel_not_found") && log.contains("invalid_auth")).then_some(log)
    });
    assert!(
        log.lines()
            .any(|l| l.contains("chat.postMessage") && l.contains("channel_not_found")),
        "no log line names the method and the code"
    );

    // The doctor's `tokens` fails, naming Slack's code.
    let tokens = check(&suite, "tokens");
    assert_eq!(tokens.status, "fail", "{tokens:?}");
    assert!(tokens.detail.contains("invalid_auth"), "{tokens:?}");
    assert!(tokens.detail.contains("connection sl"), "{tokens:?}");

    // No storm: the projector's passes fail (its status message cannot be written
    // with the refused token) without asking Slack again each time. Several passes
    // are seen in the package's log; the stand-in saw only the one refused request.
    let held_back = |log: &str| {
        log.lines()
            .filter(|l| l.contains("slack: status of Work") && l.contains("not asked again"))
            .count()
    };
    wait_for("several projector passes after the refusal", || {
        (held_back(&suite.log(Daemon::Extrunner)) >= 3).then_some(())
    });
    assert_eq!(
        script.after_refusal.load(Ordering::SeqCst),
        1,
        "requests reached Slack after it refused the token: {:#?}",
        stand_in
            .requests()
            .iter()
            .rev()
            .take(10)
            .collect::<Vec<_>>()
    );

    // The package kept running; no daemon logged the token.
    assert_eq!(slack_state(&suite), "running");
    for d in [
        Daemon::Broker,
        Daemon::Storaged,
        Daemon::Schedulerd,
        Daemon::Ingressd,
        Daemon::Extrunner,
    ] {
        let log = suite.log(d);
        assert!(!log.contains(BOT_TOKEN), "{d:?} logged the bot token");
        assert!(
            !log.contains(SIGNING_SECRET),
            "{d:?} logged the signing secret"
        );
    }
}

fn script_file(claude: &Path) {
    script(
        claude,
        &format!("#!/bin/sh\nexec '{BIN}' fake-claude \"$@\"\n"),
    );
}
